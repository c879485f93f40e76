/* The microvm and vm backends (dsec-vm): a per-sandbox supervisor that
 * runs QEMU, talks to dsec-agent (PID 1 of the guest) over a virtio-serial
 * port, and serves the same exec socket, trajectory and events as the
 * container supervisor.  See vm.c for the steps. */
#ifndef DSEC_VM_H
#define DSEC_VM_H

#include "container.h"

/* The supervisor of a VM sandbox: boots it (or restores o->restore),
 * reports on o->ready_fd, serves until the VM ends.  Never returns. */
_Noreturn void dsec_vm_supervisor_main(struct dsec_container_opts *o);

/* "kvm" when /dev/kvm is there and works (probed once per host boot),
 * else "tcg"; $DSEC_VM_ACCEL=kvm|tcg decides instead. */
const char *dsec_vm_accelerator(void);

#endif
