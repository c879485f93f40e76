/* nolistener CMD [ARG]...: runs CMD where seccomp(2) refuses a filter a
 * user-notification listener (EBUSY, as when a filter of an ancestor has
 * one, or ENOSYS-like kernels without them), so dsec falls back to its
 * filter without one.  A seccomp filter itself, inherited by every
 * process CMD starts (dsec-run's supervisor, the sandbox's init and its
 * calls).  tests/dsec-run.bats uses it; needs root (CAP_SYS_ADMIN) or
 * no_new_privs.  Exits 77 on an architecture it does not know. */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
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
  /* seccomp(SECCOMP_SET_MODE_FILTER, flags with NEW_LISTENER, ...):
   * EBUSY; everything else is allowed.  The flags are the second
   * argument's low 32 bits (little-endian: at its start). */
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_seccomp, 0, 5),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_SET_MODE_FILTER, 0, 3),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, SECCOMP_FILTER_FLAG_NEW_LISTENER, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EBUSY),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = { sizeof f / sizeof f[0], f };

  if (argc < 2) {
    fprintf(stderr, "usage: nolistener CMD [ARG]...\n");
    return 2;
  }
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0) {
    perror("nolistener: seccomp");
    return 1;
  }
  execvp(argv[1], argv + 1);
  perror(argv[1]);
  return 127;
#else
  (void) argc, (void) argv;
  return 77;
#endif
}
