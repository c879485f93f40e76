/* The microvm and vm backends (dsec-vm): a per-sandbox supervisor that
 * runs QEMU, talks to dsec-agent (PID 1 of the guest) over a virtio-serial
 * port, and serves the same exec socket, trajectory and events as the
 * container supervisor.  See vm.c for the steps. */
#ifndef DSEC_VM_H
#define DSEC_VM_H

#include <stdbool.h>

#include "container.h"

/* The supervisor of a VM sandbox: boots it (or restores o->restore),
 * reports on o->ready_fd, serves until the VM ends.  Never returns. */
_Noreturn void dsec_vm_supervisor_main(struct dsec_container_opts *o);

/* The QEMU dsec-vm runs: $DSEC_QEMU, else the one configure found. */
const char *dsec_vm_qemu(void);
/* Whether that QEMU is there to run. */
bool dsec_vm_available(void);

/* "kvm" when /dev/kvm is there and works (probed once per host boot),
 * else "tcg"; $DSEC_VM_ACCEL=kvm|tcg decides instead. */
const char *dsec_vm_accelerator(void);

/* The next whole message the guest agent sent, from buf (len bytes of
 * what it sent, not consumed yet): its header (new; an empty object for a
 * header that is no JSON, to be skipped) and its payload, *plen
 * bytes at *payload (stdout_len + stderr_len bytes of a result, or
 * data_len of a piece of a checkpoint's stream); *used bytes make the
 * whole message.  NULL when none is complete yet, or when the guest broke
 * the protocol (*bad): a header past 64 KiB, a length outside 0..64 MiB.
 * The guest writes these, so nothing in them is trusted. */
json_t *dsec_vm_agent_next(const char *buf, size_t len, const char **payload,
                          size_t *plen, size_t *used, bool *bad);

#endif
