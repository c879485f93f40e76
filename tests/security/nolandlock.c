/* nolandlock ENOSYS|EOPNOTSUPP CMD [ARG]...: runs CMD with
 * landlock_create_ruleset(2) failing with that error, as on a kernel built
 * without Landlock (ENOSYS) or with Landlock left out of lsm= at boot
 * (EOPNOTSUPP).  A seccomp filter, so every process CMD starts (dsec-run's
 * supervisor, the sandbox's init) sees the same kernel.
 * tests/security/landlock.bats uses it; needs root (CAP_SYS_ADMIN) or
 * no_new_privs.  Exits 77 on an architecture it does not know. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

int main(int argc, char **argv)
{
#ifdef ARCH
  int e;
  if (argc < 3 || (strcmp(argv[1], "ENOSYS") != 0 && strcmp(argv[1], "EOPNOTSUPP") != 0)) {
    fprintf(stderr, "usage: nolandlock ENOSYS|EOPNOTSUPP CMD [ARG]...\n");
    return 2;
  }
  e = strcmp(argv[1], "ENOSYS") == 0 ? ENOSYS : EOPNOTSUPP;
  {
    struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_landlock_create_ruleset, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned) e),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
      perror("nolandlock: seccomp");
      return 1;
    }
  }
  execvp(argv[2], argv + 2);
  fprintf(stderr, "nolandlock: %s: %s\n", argv[2], strerror(errno));
  return 127;
#else
  (void) argc, (void) argv;
  fprintf(stderr, "nolandlock: unknown architecture\n");
  return 77;
#endif
}
