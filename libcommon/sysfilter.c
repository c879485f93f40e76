#include <config.h>

#include "sysfilter.h"

#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Kernel attack surface a sandboxed agent has no use for.  Each is EPERM,
 * like a missing capability, so programs take their usual fallback. */
const char *const dsec_seccomp_denied[] = {
  /* keyrings are not namespaced */
  "add_key", "keyctl", "request_key",
  /* bpf, perf and userfaultfd are the usual kernel exploit primitives */
  "bpf", "perf_event_open", "userfaultfd",
  /* io_uring bypasses seccomp for the operations it runs */
  "io_uring_setup", "io_uring_enter", "io_uring_register",
  "kexec_load", "kexec_file_load", "init_module", "finit_module",
  "delete_module", "create_module", "query_module", "get_kernel_syms",
  /* file handles open files by inode, past mount boundaries */
  "open_by_handle_at", "name_to_handle_at",
  /* the mount family: the sandbox's mounts are fixed */
  "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree",
  "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
  /* namespaces: no nested user namespaces, no joining others */
  "setns",
  "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
  "acct", "swapon", "swapoff", "reboot", "syslog", "lookup_dcookie",
  "quotactl", "quotactl_fd", "iopl", "ioperm", "vm86", "vm86old",
  "nfsservctl", "uselib", "pciconfig_read", "pciconfig_write",
  "pciconfig_iobase", "settimeofday", "clock_settime", "clock_adjtime",
  "adjtimex", "stime", "fanotify_init", "lsm_set_self_attr",
  NULL,
};

/* ioctl commands matched on their low 16 bits (type and number), whatever
 * the direction and size bits say. */
static const struct {
  unsigned long cmd16;
  int errnum;
} denied_ioctls[] = {
  /* TIOCSTI/TIOCLINUX: typing into a terminal outside the sandbox */
  { 0x5412, EPERM },
  { 0x541c, EPERM },
  /* XFS_IOC_SWAPEXT and XFS_IOC_EXCHANGE_RANGE: extent swaps past
   * permissions (seen in production) */
  { 0x586d, EPERM },
  { 0x5881, EPERM },
  /* FICLONE, FICLONERANGE, FIDEDUPERANGE: share extents with protected
   * files.  EOPNOTSUPP makes cp --reflink=auto copy instead. */
  { 0x9409, EOPNOTSUPP },
  { 0x940d, EOPNOTSUPP },
  { 0x9436, EOPNOTSUPP },
};

int dsec_seccomp_denial_errno(int nr, unsigned long arg1)
{
  if (nr == SCMP_SYS(ioctl))
    for (size_t i = 0; i < sizeof denied_ioctls / sizeof denied_ioctls[0]; i++)
      if ((arg1 & 0xffffUL) == denied_ioctls[i].cmd16)
        return denied_ioctls[i].errnum;
  return EPERM;
}

const char *dsec_seccomp_name(int nr)
{
  static __thread char buf[32];
  char *n = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
  if (!n) {
    snprintf(buf, sizeof buf, "syscall_%d", nr);
    return buf;
  }
  snprintf(buf, sizeof buf, "%s", n);
  free(n);
  return buf;
}

int dsec_seccomp_build(struct dsec_bpf *out, bool notify,
                       struct dsec_error **err)
{
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  uint32_t deny = notify ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(EPERM);
  char *buf = NULL;
  size_t len = 0;
  int r = 0;

  if (!ctx)
    return dsec_fail(err, ENOMEM, "seccomp_init failed");
  /* 32-bit and x32 system calls are not in the filter's arch: killed */
  seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  for (const char *const *n = dsec_seccomp_denied; *n && r == 0; n++) {
    int nr = seccomp_syscall_resolve_name(*n);
    if (nr == __NR_SCMP_ERROR || nr < 0)
      continue; /* not on this architecture */
    r = seccomp_rule_add(ctx, deny, nr, 0);
  }
  /* unshare/clone of a new user namespace: its root would get every
   * capability over new mounts and network objects */
  if (r == 0)
    r = seccomp_rule_add(ctx, deny, SCMP_SYS(unshare), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                 CLONE_NEWUSER));
  if (r == 0)
    r = seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                 CLONE_NEWUSER));
  /* clone3 passes its flags in memory the filter cannot read: ENOSYS makes
   * libc fall back to clone, which is checked above (not an attack, so
   * not notified: libc tries it for every thread) */
  if (r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  for (size_t i = 0; i < sizeof denied_ioctls / sizeof denied_ioctls[0] && r == 0;
       i++)
    r = seccomp_rule_add(ctx, notify ? SCMP_ACT_NOTIFY
                                     : SCMP_ACT_ERRNO(denied_ioctls[i].errnum),
                         SCMP_SYS(ioctl), 1,
                         SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffUL,
                                 denied_ioctls[i].cmd16));
  /* with a listener, every program start is reported too (and let run):
   * the audit trail's "process" events */
  if (notify && r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(execve), 0);
  if (notify && r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(execveat), 0);
  if (r < 0) {
    seccomp_release(ctx);
    return dsec_fail(err, -r, "cannot build the seccomp filter");
  }
  {
    int fd = memfd_create("dsec-seccomp", MFD_CLOEXEC);
    off_t size;
    if (fd < 0 || seccomp_export_bpf(ctx, fd) < 0 ||
        (size = lseek(fd, 0, SEEK_END)) <= 0) {
      int e = errno;
      if (fd >= 0)
        close(fd);
      seccomp_release(ctx);
      return dsec_fail(err, e, "cannot export the seccomp filter");
    }
    len = (size_t) size;
    buf = xmalloc(len);
    if (pread(fd, buf, len, 0) != (ssize_t) len) {
      int e = errno;
      close(fd);
      free(buf);
      seccomp_release(ctx);
      return dsec_fail(err, e, "cannot read the seccomp filter");
    }
    close(fd);
  }
  seccomp_release(ctx);
  out->insns = (struct sock_filter *) buf;
  out->len = (unsigned short) (len / sizeof(struct sock_filter));
  return 0;
}

int dsec_seccomp_install(const struct dsec_bpf *f, bool listener)
{
  struct sock_fprog prog = { .len = f->len, .filter = f->insns };
  return (int) syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                       listener ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
}

void dsec_bpf_clear(struct dsec_bpf *f)
{
  free(f->insns);
  f->insns = NULL;
  f->len = 0;
}
