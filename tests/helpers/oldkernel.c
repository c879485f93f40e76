/* oldkernel WHAT CMD [ARG]...: runs CMD where the kernel refuses what
 * older kernels lack, so that dsec takes its way for them.  A seccomp
 * filter, inherited by every process CMD starts (dsec-run's supervisor,
 * the sandbox's init and its calls).  WHAT:
 *   listener   seccomp(2) refuses a filter a user-notification listener
 *              (EBUSY, as when a filter of an ancestor has one)
 *   fdlayers   fsconfig(2) refuses FSCONFIG_SET_FD (EBADF, as kernels
 *              before Linux 6.15 answer it for an O_PATH descriptor, which
 *              open_tree(2) gives)
 * tests/dsec-run.bats uses it; needs root (CAP_SYS_ADMIN) or
 * no_new_privs.  Exits 77 on an architecture it does not know. */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

int main(int argc, char **argv)
{
#ifdef ARCH
  /* the system call refused, the argument whose low 32 bits (little-
   * endian: at its start) decide, how (BPF_JEQ or BPF_JSET), and the
   * answer; everything else is allowed */
  static const struct {
    const char *what;
    unsigned nr, arg, op, value, err;
  } refusals[] = {
    /* (of seccomp's operations only SECCOMP_SET_MODE_FILTER takes flags) */
    { "listener", SYS_seccomp, 1, BPF_JSET, SECCOMP_FILTER_FLAG_NEW_LISTENER,
      EBUSY },
    { "fdlayers", SYS_fsconfig, 1, BPF_JEQ, FSCONFIG_SET_FD, EBADF },
  };
  size_t i = 0;

  if (argc < 3) {
    fprintf(stderr, "usage: oldkernel listener|fdlayers CMD [ARG]...\n");
    return 2;
  }
  while (i < sizeof refusals / sizeof *refusals &&
         strcmp(argv[1], refusals[i].what) != 0)
    i++;
  if (i == sizeof refusals / sizeof *refusals) {
    fprintf(stderr, "oldkernel: unknown %s (listener or fdlayers)\n", argv[1]);
    return 2;
  }
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refusals[i].nr, 0, 3),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
             offsetof(struct seccomp_data, args) + 8 * refusals[i].arg),
    BPF_JUMP(BPF_JMP | refusals[i].op | BPF_K, refusals[i].value, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | refusals[i].err),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = { sizeof f / sizeof *f, f };

  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0) {
    perror("oldkernel: seccomp");
    return 1;
  }
  execvp(argv[2], argv + 2);
  perror(argv[2]);
  return 127;
#else
  (void) argc, (void) argv;
  return 77;
#endif
}
