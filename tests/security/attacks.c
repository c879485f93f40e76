/* attacks: what an agent inside a dsec sandbox tries, one subcommand per
 * attack.  tests/security/baseline.bats runs it in the sandbox.
 *
 * Built static so it runs in the busybox image:
 *   gcc -static -O2 -o attack tests/security/attacks.c
 *
 * tests/security/landlock.bats runs the protect, landlock and scope ones.
 *
 * Every subcommand prints exactly one verdict line on stdout and exits:
 *   0  BLOCKED NAME: how it failed
 *   1  ESCAPED NAME: what succeeded
 *   2  UNEXPECTED NAME: it failed, but not the way the baseline says it
 *      must (a wrong errno: another layer than the one DESIGN.md promises)
 *   3  ERROR NAME: the attack could not be set up (a bug of the test)
 * Details go to stderr as "# ..." lines.
 *
 * Nothing here reads /proc/kpagecgroup or any other kpage* or kcore file,
 * and nothing writes to a real /proc/sysrq-trigger, /sys or /proc/sys
 * file: when such a file turns out to be reachable, the verdict is
 * ESCAPED without touching it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/bpf.h>
#include <linux/fs.h>
#include <linux/if_ether.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/magic.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/timex.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/sendfile.h>
#include <sys/inotify.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ verdicts */

enum { V_BLOCKED = 0, V_ESCAPED = 1, V_UNEXPECTED = 2, V_ERROR = 3 };

static const char *attack_name = "?";
static int verdict = V_BLOCKED;
static char why_bad[1024];    /* the first ESCAPED/UNEXPECTED reason */
static char summary[1024];    /* how the BLOCKED checks failed */

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
  va_list ap;
  fputs("# ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static void raise_verdict(int v, const char *fmt, va_list ap)
{
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  note("%s: %s", v == V_ESCAPED ? "ESCAPED" : "UNEXPECTED", msg);
  /* ESCAPED outranks UNEXPECTED; the first reason of the worst kind wins */
  if (v == V_ESCAPED && verdict != V_ESCAPED) {
    verdict = V_ESCAPED;
    snprintf(why_bad, sizeof why_bad, "%s", msg);
  } else if (v == V_UNEXPECTED && verdict == V_BLOCKED) {
    verdict = V_UNEXPECTED;
    snprintf(why_bad, sizeof why_bad, "%s", msg);
  }
}

static void escaped(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void escaped(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  raise_verdict(V_ESCAPED, fmt, ap);
  va_end(ap);
}

static void unexpected(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void unexpected(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  raise_verdict(V_UNEXPECTED, fmt, ap);
  va_end(ap);
}

/* A blocked check: noted, and added to the verdict line. */
static void blocked(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void blocked(const char *fmt, ...)
{
  char msg[512];
  va_list ap;
  size_t n = strlen(summary);
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  note("blocked: %s", msg);
  if (n < sizeof summary - 1)
    snprintf(summary + n, sizeof summary - n, "%s%s", n ? "; " : "", msg);
}

static int finish(void)
{
  switch (verdict) {
  case V_BLOCKED:
    printf("BLOCKED %s: %s\n", attack_name, summary[0] ? summary : "nothing got through");
    break;
  case V_ESCAPED:
    printf("ESCAPED %s: %s\n", attack_name, why_bad);
    break;
  default:
    printf("UNEXPECTED %s: %s\n", attack_name, why_bad);
    break;
  }
  fflush(stdout);
  return verdict;
}

static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fatal(const char *fmt, ...)
{
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("ERROR %s: %s\n", attack_name, msg);
  fflush(stdout);
  exit(V_ERROR);
}

static const char *errname(int e)
{
  static const struct { int e; const char *n; } names[] = {
    { EPERM, "EPERM" },   { ENOENT, "ENOENT" },       { EACCES, "EACCES" },
    { EROFS, "EROFS" },   { ENOSYS, "ENOSYS" },       { EOPNOTSUPP, "EOPNOTSUPP" },
    { ENXIO, "ENXIO" },   { EINVAL, "EINVAL" },       { EBADF, "EBADF" },
    { ENOTTY, "ENOTTY" }, { EAGAIN, "EAGAIN" },       { ENOSPC, "ENOSPC" },
    { EDQUOT, "EDQUOT" }, { ESRCH, "ESRCH" },         { ECONNREFUSED, "ECONNREFUSED" },
    { ENETUNREACH, "ENETUNREACH" }, { EXDEV, "EXDEV" }, { EAFNOSUPPORT, "EAFNOSUPPORT" },
    { ETIMEDOUT, "ETIMEDOUT" }, { EHOSTUNREACH, "EHOSTUNREACH" }, { EEXIST, "EEXIST" },
    { ENOTDIR, "ENOTDIR" }, { EFAULT, "EFAULT" }, { EBUSY, "EBUSY" },
    { ENOTEMPTY, "ENOTEMPTY" }, { E2BIG, "E2BIG" },
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].e == e)
      return names[i].n;
  return "errno";
}

/* check(LABEL, RET, WANT...): RET is a syscall's result.  Success is an
 * escape; failure with one of the wanted errnos is blocked; any other
 * errno is unexpected.  The wanted list ends with 0. */
static int check_v(const char *label, long ret, int e, va_list ap)
{
  int want, first = 0;
  if (ret >= 0) {
    escaped("%s succeeded (returned %ld)", label, ret);
    return 1;
  }
  while ((want = va_arg(ap, int)) != 0) {
    if (!first)
      first = want;
    if (e == want) {
      blocked("%s: %s", label, strerror(e));
      return 0;
    }
  }
  unexpected("%s failed with %s (%s), expected %s", label, errname(e), strerror(e),
             errname(first));
  return 0;
}

static int check(const char *label, long ret, ...)
{
  int e = errno, r;
  va_list ap;
  va_start(ap, ret);
  r = check_v(label, ret, e, ap);
  va_end(ap);
  return r;
}

/* ------------------------------------------------------------- helpers */

/* A mask: /dev/null, or an empty regular file that is not procfs's (dsec
 * binds a watched empty file of its own, so opens are recorded). */
static int is_dev_null(int fd)
{
  struct stat st;
  struct statfs sf;
  if (fstat(fd, &st) < 0)
    return 0;
  if (S_ISCHR(st.st_mode))
    return major(st.st_rdev) == 1 && minor(st.st_rdev) == 3;
  return S_ISREG(st.st_mode) && st.st_size == 0 && fstatfs(fd, &sf) == 0 &&
         sf.f_type != PROC_SUPER_MAGIC;
}

static const char *mask_kind(int fd)
{
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) ? "/dev/null" : "an empty mask file";
}

static int read_file(const char *path, char *buf, size_t cap)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n, total = 0;
  if (fd < 0)
    return -1;
  while ((size_t) total < cap - 1 && (n = read(fd, buf + total, cap - 1 - (size_t) total)) > 0)
    total += n;
  close(fd);
  buf[total] = '\0';
  return (int) total;
}

/* The hex value of "Key:\t..." in /proc/self/status, or -1. */
static long long status_field(const char *status, const char *key, int base)
{
  char k[64];
  const char *p;
  snprintf(k, sizeof k, "\n%s:", key);
  p = strstr(status, k);
  if (!p)
    return -1;
  return strtoll(p + strlen(k), NULL, base);
}

static void sleep_ms(int ms)
{
  struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

/* A child that waits to be killed. */
static pid_t spawn_sleeper(void)
{
  pid_t p = fork();
  if (p == 0) {
    for (;;)
      pause();
  }
  if (p < 0)
    fatal("fork: %s", strerror(errno));
  return p;
}

static void reap(pid_t p)
{
  kill(p, SIGKILL);
  waitpid(p, NULL, 0);
}

/* ------------------------------------------------------------- attacks */

static int a_keyctl(int argc, char **argv)
{
  long r;
  (void) argc, (void) argv;
  r = syscall(SYS_add_key, "user", "dsec-attack", "x", 1, KEY_SPEC_PROCESS_KEYRING);
  if (check("add_key", r, EPERM, 0))
    syscall(SYS_keyctl, KEYCTL_INVALIDATE, r);
  r = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
  check("keyctl(GET_KEYRING_ID)", r, EPERM, 0);
  r = syscall(SYS_request_key, "user", "dsec-attack", NULL, 0);
  check("request_key", r, EPERM, 0);
  return finish();
}

static int a_bpf(int argc, char **argv)
{
  struct bpf_insn insns[2] = {
    { .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 0 },
    { .code = BPF_JMP | BPF_EXIT },
  };
  char log[256] = "";
  union bpf_attr a;
  long r;
  (void) argc, (void) argv;

  memset(&a, 0, sizeof a);
  a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  a.insns = (uint64_t) (uintptr_t) insns;
  a.insn_cnt = 2;
  a.license = (uint64_t) (uintptr_t) "GPL";
  a.log_buf = (uint64_t) (uintptr_t) log;
  a.log_size = sizeof log;
  r = syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a);
  if (check("bpf(BPF_PROG_LOAD)", r, EPERM, 0))
    close((int) r);
  memset(&a, 0, sizeof a);
  a.map_type = BPF_MAP_TYPE_ARRAY;
  a.key_size = 4;
  a.value_size = 8;
  a.max_entries = 1;
  r = syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a);
  if (check("bpf(BPF_MAP_CREATE)", r, EPERM, 0))
    close((int) r);
  return finish();
}

static int a_perf(int argc, char **argv)
{
  struct perf_event_attr a;
  long r;
  (void) argc, (void) argv;
  memset(&a, 0, sizeof a);
  a.type = PERF_TYPE_SOFTWARE;
  a.size = sizeof a;
  a.config = PERF_COUNT_SW_CPU_CLOCK;
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  r = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
  if (check("perf_event_open(self, sw clock)", r, EPERM, 0))
    close((int) r);
  a.exclude_kernel = 0;
  r = syscall(SYS_perf_event_open, &a, -1, 0, -1, 0);
  if (check("perf_event_open(cpu 0, kernel)", r, EPERM, 0))
    close((int) r);
  return finish();
}

static int a_userfaultfd(int argc, char **argv)
{
  long r;
  int fd;
  (void) argc, (void) argv;
  r = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  if (check("userfaultfd", r, EPERM, 0))
    close((int) r);
  /* /dev/userfaultfd hands out the same object through an ioctl */
  fd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    escaped("/dev/userfaultfd opened");
    close(fd);
  } else
    blocked("/dev/userfaultfd: %s", strerror(errno));
  return finish();
}

static int a_io_uring(int argc, char **argv)
{
  struct io_uring_params p;
  long r;
  (void) argc, (void) argv;
  memset(&p, 0, sizeof p);
  r = syscall(SYS_io_uring_setup, 8, &p);
  if (check("io_uring_setup", r, EPERM, 0))
    close((int) r);
  /* EPERM rather than EBADF: the filter answers before the kernel looks */
  r = syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0);
  check("io_uring_enter", r, EPERM, 0);
  r = syscall(SYS_io_uring_register, -1, 0, NULL, 0);
  check("io_uring_register", r, EPERM, 0);
  return finish();
}

static int a_kexec(int argc, char **argv)
{
  long r;
  (void) argc, (void) argv;
  /* zero segments and no flags would only unload a loaded image */
  r = syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0UL);
  check("kexec_load", r, EPERM, 0);
  r = syscall(SYS_kexec_file_load, -1, -1, 0UL, "", 0UL);
  check("kexec_file_load", r, EPERM, 0);
  return finish();
}

static int a_module(int argc, char **argv)
{
  static const char junk[64] = "\177ELF-not-a-module";
  long r;
  int fd;
  (void) argc, (void) argv;
  r = syscall(SYS_init_module, junk, sizeof junk, "");
  check("init_module", r, EPERM, 0);
  fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fatal("open /proc/self/exe: %s", strerror(errno));
  r = syscall(SYS_finit_module, fd, "", 0);
  check("finit_module", r, EPERM, 0);
  close(fd);
  r = syscall(SYS_delete_module, "dsec_no_such_module", O_NONBLOCK);
  check("delete_module", r, EPERM, 0);
  return finish();
}

static int a_handle(int argc, char **argv)
{
  struct {
    struct file_handle fh;
    unsigned char bytes[128];
  } h;
  int mount_id, root;
  long r;
  (void) argc, (void) argv;

  memset(&h, 0, sizeof h);
  h.fh.handle_bytes = sizeof h.bytes;
  r = syscall(SYS_name_to_handle_at, AT_FDCWD, "/etc/passwd", &h.fh, &mount_id, 0);
  check("name_to_handle_at", r, EPERM, 0);
  /* "shocker": a hand-made handle for inode 2, the root directory of
   * most ext4 file systems, opened relative to any mount of it */
  root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0)
    fatal("open /: %s", strerror(errno));
  memset(&h, 0, sizeof h);
  h.fh.handle_bytes = 8;
  h.fh.handle_type = 1; /* FILEID_INO32_GEN */
  h.bytes[0] = 2;
  r = syscall(SYS_open_by_handle_at, root, &h.fh, O_RDONLY);
  if (check("open_by_handle_at(inode 2)", r, EPERM, 0))
    close((int) r);
  close(root);
  return finish();
}

static int a_mount(int argc, char **argv)
{
  long r;
  (void) argc, (void) argv;
  if (mkdir("/mnt", 0755) < 0 && errno != EEXIST)
    fatal("mkdir /mnt: %s", strerror(errno));
  r = mount("tmpfs", "/mnt", "tmpfs", 0, "size=1m");
  if (check("mount(tmpfs, /mnt)", r, EPERM, 0))
    umount2("/mnt", MNT_DETACH);
  r = mount(NULL, "/proc/sys", NULL, MS_REMOUNT | MS_BIND, NULL);
  check("mount(remount /proc/sys rw)", r, EPERM, 0);
  r = mount("/", "/mnt", NULL, MS_BIND | MS_REC, NULL);
  if (check("mount(bind / on /mnt)", r, EPERM, 0))
    umount2("/mnt", MNT_DETACH);
  /* the new mount API */
  r = syscall(SYS_fsopen, "tmpfs", 0);
  if (check("fsopen(tmpfs)", r, EPERM, 0))
    close((int) r);
  r = syscall(SYS_open_tree, AT_FDCWD, "/proc", 1 /* OPEN_TREE_CLONE */);
  if (check("open_tree(/proc, clone)", r, EPERM, 0))
    close((int) r);
  r = syscall(SYS_fspick, AT_FDCWD, "/", 0);
  if (check("fspick(/)", r, EPERM, 0))
    close((int) r);
  return finish();
}

static int a_umount(int argc, char **argv)
{
  long r;
  (void) argc, (void) argv;
  r = umount2("/proc", MNT_DETACH);
  check("umount2(/proc)", r, EPERM, 0);
  /* unmounting a mask would uncover the real file: never read it */
  r = umount2("/proc/kpagecgroup", MNT_DETACH);
  check("umount2(/proc/kpagecgroup)", r, EPERM, 0);
  r = umount2("/proc/sys", MNT_DETACH);
  check("umount2(/proc/sys)", r, EPERM, 0);
  r = umount2("/sys", MNT_DETACH);
  check("umount2(/sys)", r, EPERM, 0);
  return finish();
}

static int a_pivot_root(int argc, char **argv)
{
  long r;
  (void) argc, (void) argv;
  if (mkdir("/tmp/pivot-old", 0755) < 0 && errno != EEXIST)
    fatal("mkdir: %s", strerror(errno));
  if (chdir("/") < 0)
    fatal("chdir /: %s", strerror(errno));
  r = syscall(SYS_pivot_root, ".", ".");
  check("pivot_root(., .)", r, EPERM, 0);
  r = syscall(SYS_pivot_root, "/tmp", "/tmp/pivot-old");
  check("pivot_root(/tmp, /tmp/pivot-old)", r, EPERM, 0);
  return finish();
}

static int a_userns(int argc, char **argv)
{
  struct clone_args ca;
  long r;
  (void) argc, (void) argv;

  r = unshare(CLONE_NEWUSER);
  check("unshare(CLONE_NEWUSER)", r, EPERM, 0);
  r = unshare(CLONE_NEWUSER | CLONE_NEWNS);
  check("unshare(CLONE_NEWUSER|CLONE_NEWNS)", r, EPERM, 0);
  /* without a new user namespace, the missing CAP_SYS_ADMIN says no */
  r = unshare(CLONE_NEWNS);
  check("unshare(CLONE_NEWNS)", r, EPERM, 0);
  r = unshare(CLONE_NEWNET);
  check("unshare(CLONE_NEWNET)", r, EPERM, 0);

  r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
  if (r == 0)
    _exit(0);
  if (check("clone(CLONE_NEWUSER)", r, EPERM, 0))
    waitpid((pid_t) r, NULL, 0);

  /* clone3's flags are in memory the filter cannot read: ENOSYS, so
   * libc falls back to clone */
  memset(&ca, 0, sizeof ca);
  ca.flags = CLONE_NEWUSER;
  ca.exit_signal = SIGCHLD;
  r = syscall(SYS_clone3, &ca, sizeof ca);
  if (r == 0)
    _exit(0);
  if (check("clone3(CLONE_NEWUSER)", r, ENOSYS, 0))
    waitpid((pid_t) r, NULL, 0);
  return finish();
}

static int a_setns(int argc, char **argv)
{
  static const struct { const char *path; int type; } ns[] = {
    { "/proc/1/ns/mnt", CLONE_NEWNS },  { "/proc/1/ns/user", CLONE_NEWUSER },
    { "/proc/1/ns/net", CLONE_NEWNET }, { "/proc/1/ns/pid", CLONE_NEWPID },
  };
  char label[128];
  long r;
  int fd;
  (void) argc, (void) argv;

  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    fd = open(ns[i].path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      blocked("open %s: %s", ns[i].path, strerror(errno));
      continue;
    }
    note("opened %s (the sandbox's own namespace, init is not dumpable?)", ns[i].path);
    snprintf(label, sizeof label, "setns(%s)", ns[i].path);
    r = setns(fd, ns[i].type);
    check(label, r, EPERM, 0);
    close(fd);
  }
  /* a pidfd works as a namespace handle too */
  fd = (int) syscall(SYS_pidfd_open, 1, 0);
  if (fd >= 0) {
    r = setns(fd, CLONE_NEWNS | CLONE_NEWNET);
    check("setns(pidfd of init)", r, EPERM, 0);
    close(fd);
  } else
    blocked("pidfd_open(1): %s", strerror(errno));
  return finish();
}

static int a_ptrace(int argc, char **argv)
{
  const char *target = argc > 0 ? argv[0] : "init";
  pid_t pid, child = 0;
  long r;
  int pfd;

  if (strcmp(target, "init") == 0)
    pid = 1;
  else if (strcmp(target, "child") == 0)
    pid = child = spawn_sleeper();
  else
    pid = (pid_t) atoi(target);
  if (pid <= 0)
    fatal("bad target %s", target);
  note("target pid %d", (int) pid);

  r = ptrace(PTRACE_ATTACH, pid, NULL, NULL);
  if (check("ptrace(PTRACE_ATTACH)", r, EPERM, 0))
    ptrace(PTRACE_DETACH, pid, NULL, NULL);
  r = ptrace(PTRACE_SEIZE, pid, NULL, NULL);
  if (check("ptrace(PTRACE_SEIZE)", r, EPERM, 0))
    ptrace(PTRACE_DETACH, pid, NULL, NULL);
  if (child) {
    /* the other way round: the child asks to be traced */
    pid_t t = fork();
    int st = 0;
    if (t == 0)
      _exit(ptrace(PTRACE_TRACEME, 0, NULL, NULL) == 0 ? 0 : errno == EPERM ? 1 : 2);
    waitpid(t, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 1)
      blocked("ptrace(PTRACE_TRACEME): %s", strerror(EPERM));
    else if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
      escaped("ptrace(PTRACE_TRACEME) succeeded");
    else
      unexpected("ptrace(PTRACE_TRACEME) failed, not with EPERM");
  }
  /* stealing a descriptor: init's fd 3 is its control socket.  (A
   * process of the sandbox's own is no boundary: not tried.) */
  if (pid == 1) {
    pfd = (int) syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
      r = syscall(SYS_pidfd_getfd, pfd, 3, 0);
      if (check("pidfd_getfd(init, fd 3)", r, EPERM, 0))
        close((int) r);
      close(pfd);
    } else
      note("pidfd_open(1): %s", strerror(errno));
  }
  if (child)
    reap(child);
  return finish();
}

static int a_vm_readv(int argc, char **argv)
{
  const char *target = argc > 0 ? argv[0] : "init";
  char buf[64];
  struct iovec local = { buf, sizeof buf };
  /* an address every x86-64 process maps: its own stack is somewhere
   * else, but any address will do, the call must not get that far */
  struct iovec remote = { (void *) 0x400000, sizeof buf };
  pid_t pid, child = 0;
  long r;

  if (strcmp(target, "init") == 0)
    pid = 1;
  else
    pid = child = spawn_sleeper();
  r = syscall(SYS_process_vm_readv, pid, &local, 1, &remote, 1, 0);
  check("process_vm_readv", r, EPERM, 0);
  r = syscall(SYS_process_vm_writev, pid, &local, 1, &remote, 1, 0);
  check("process_vm_writev", r, EPERM, 0);
  if (child)
    reap(child);
  return finish();
}

/* /proc/1/mem, environ, fd/, root: init is not dumpable, so nothing of it
 * is readable. */
static int a_procmem(int argc, char **argv)
{
  static const char *const files[] = { "/proc/1/mem", "/proc/1/environ",
                                       "/proc/1/auxv", "/proc/1/stack" };
  char buf[256];
  DIR *d;
  (void) argc, (void) argv;

  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    int fd = open(files[i], O_RDONLY | O_CLOEXEC);
    ssize_t n;
    if (fd < 0) {
      blocked("open %s: %s", files[i], strerror(errno));
      continue;
    }
    if (strcmp(files[i], "/proc/1/mem") == 0) {
      escaped("opened %s", files[i]);
      close(fd);
      continue;
    }
    n = read(fd, buf, sizeof buf);
    if (n > 0)
      escaped("read %zd bytes of %s", n, files[i]);
    else
      blocked("read %s: %s", files[i], n == 0 ? "empty" : strerror(errno));
    close(fd);
  }
  d = opendir("/proc/1/fd");
  if (d) {
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
      n += e->d_name[0] != '.';
    closedir(d);
    if (n > 0)
      escaped("listed %d descriptors of init in /proc/1/fd", n);
    else
      blocked("/proc/1/fd: empty");
  } else
    blocked("opendir /proc/1/fd: %s", strerror(errno));
  if (readlink("/proc/1/root", buf, sizeof buf) >= 0)
    escaped("readlink /proc/1/root succeeded");
  else
    blocked("readlink /proc/1/root: %s", strerror(errno));
  return finish();
}

static char proc_state(pid_t pid)
{
  char path[64], buf[512], *p;
  snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
  if (read_file(path, buf, sizeof buf) <= 0)
    return 0;
  p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p[2] : '?';
}

static int a_kill_init(int argc, char **argv)
{
  static const int sigs[] = { SIGKILL, SIGSTOP, SIGTERM, SIGINT, SIGHUP, SIGSEGV };
  static const char *const names[] = { "SIGKILL", "SIGSTOP", "SIGTERM",
                                       "SIGINT", "SIGHUP", "SIGSEGV" };
  char comm[64] = "";
  (void) argc, (void) argv;

  read_file("/proc/1/comm", comm, sizeof comm);
  comm[strcspn(comm, "\n")] = '\0';
  note("pid 1 is %s", comm);
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    char st;
    int r = kill(1, sigs[i]);
    int e = errno;
    sleep_ms(100);
    st = proc_state(1);
    if (st == 0 || st == 'Z' || st == 'X') {
      escaped("kill(1, %s) killed init", names[i]);
      break;
    }
    if (st == 'T' || st == 't') {
      kill(1, SIGCONT);
      escaped("kill(1, %s) stopped init", names[i]);
      continue;
    }
    blocked("kill(1, %s): %s, init still %c", names[i],
            r < 0 ? strerror(e) : "ignored", st);
  }
  return finish();
}

/* open("/proc/kpagecgroup"): open only, never read (reading it crashed a
 * host).  It must be absent or the /dev/null mask. */
static int a_kpagecgroup(int argc, char **argv)
{
  int fd;
  (void) argc, (void) argv;
  fd = open("/proc/kpagecgroup", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    blocked("open /proc/kpagecgroup: %s", strerror(errno));
  else if (is_dev_null(fd))
    blocked("/proc/kpagecgroup is %s", mask_kind(fd));
  else
    escaped("opened the real /proc/kpagecgroup (not read)");
  if (fd >= 0)
    close(fd);
  return finish();
}

/* masked PATH [read]: PATH is absent or a /dev/null bind; with "read"
 * (only for files safe to read for real), reading gives nothing. */
static int a_masked(int argc, char **argv)
{
  const char *path;
  int fd, do_read;
  char buf[256];

  if (argc < 1)
    fatal("usage: masked PATH [read]");
  path = argv[0];
  do_read = argc > 1 && strcmp(argv[1], "read") == 0;
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == EACCES || errno == EPERM)
      blocked("open %s: %s", path, strerror(errno));
    else
      unexpected("open %s: %s", path, strerror(errno));
    return finish();
  }
  if (is_dev_null(fd)) {
    blocked("%s is /dev/null", path);
    if (do_read) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n != 0)
        escaped("read of %s gave %zd", path, n);
    }
  } else {
    struct stat st;
    fstat(fd, &st);
    escaped("opened %s, a real file (mode %o), not the /dev/null mask", path,
            (unsigned) st.st_mode);
    if (do_read) {
      ssize_t n = read(fd, buf, sizeof buf);
      note("read %zd bytes", n);
    }
  }
  close(fd);
  return finish();
}

/* /proc/sysrq-trigger: absent, or not writable, or /dev/null.  A real
 * one is never written. */
static int a_sysrq(int argc, char **argv)
{
  int fd;
  (void) argc, (void) argv;
  fd = open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    blocked("open /proc/sysrq-trigger for writing: %s", strerror(errno));
  else if (is_dev_null(fd))
    blocked("/proc/sysrq-trigger is /dev/null");
  else
    escaped("/proc/sysrq-trigger is open for writing (nothing written)");
  if (fd >= 0)
    close(fd);
  return finish();
}

/* sysctl PATH VALUE: write VALUE to a /proc/sys file.  The tests pass a
 * value that changes nothing even if it went through: the host's current
 * core_pattern, or 4 for drop_caches (only silences its log line). */
static int a_sysctl(int argc, char **argv)
{
  const char *path, *value;
  int fd;
  struct statvfs sv;

  if (argc < 2)
    fatal("usage: sysctl PATH VALUE");
  path = argv[0];
  value = argv[1];
  if (statvfs("/proc/sys", &sv) == 0 && !(sv.f_flag & ST_RDONLY))
    unexpected("/proc/sys is mounted read-write");
  fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EROFS || errno == EACCES || errno == EPERM || errno == ENOENT)
      blocked("open %s for writing: %s", path, strerror(errno));
    else
      unexpected("open %s for writing: %s", path, strerror(errno));
    return finish();
  }
  if (is_dev_null(fd)) {
    blocked("%s is /dev/null", path);
  } else {
    ssize_t n = write(fd, value, strlen(value));
    if (n >= 0)
      escaped("wrote %s to %s", value, path);
    else
      blocked("write %s: %s", path, strerror(errno));
  }
  close(fd);
  return finish();
}

/* sysfs: read-only; no file opens for writing (none is written). */
static int a_sysfs(int argc, char **argv)
{
  static const char *const files[] = {
    "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/class/net/lo/mtu",
    "/sys/kernel/uevent_helper", "/sys/power/state", "/sys/kernel/profiling",
    "/sys/module/printk/parameters/time",
  };
  struct statvfs sv;
  int fd;
  (void) argc, (void) argv;

  if (statvfs("/sys", &sv) < 0)
    fatal("statvfs /sys: %s", strerror(errno));
  if (sv.f_flag & ST_RDONLY)
    blocked("/sys is read-only");
  else
    escaped("/sys is mounted read-write");
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    fd = open(files[i], O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
      escaped("%s is open for writing (nothing written)", files[i]);
      close(fd);
    } else if (errno == EROFS || errno == ENOENT || errno == EACCES || errno == EPERM)
      note("open %s for writing: %s", files[i], strerror(errno));
    else
      unexpected("open %s for writing: %s", files[i], strerror(errno));
  }
  fd = open("/sys/dsec-attack", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    escaped("created /sys/dsec-attack");
    close(fd);
    unlink("/sys/dsec-attack");
  } else
    blocked("create /sys/dsec-attack: %s", strerror(errno));
  return finish();
}

/* Every regular file under DIR opened for writing (none is written). */
static int writable_walk(const char *dir, int depth, int *seen)
{
  DIR *d;
  struct dirent *e;
  int found = 0;

  if (depth > 8 || !(d = opendir(dir)))
    return 0;
  while ((e = readdir(d))) {
    char path[4096];
    struct stat st;
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (lstat(path, &st) < 0)
      continue;
    if (S_ISDIR(st.st_mode))
      found += writable_walk(path, depth + 1, seen);
    else if (S_ISREG(st.st_mode)) {
      int fd = open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
      (*seen)++;
      if (fd >= 0) {
        escaped("%s is open for writing (nothing written)", path);
        close(fd);
        found++;
      }
    }
  }
  closedir(d);
  return found;
}

static int a_cgroup(int argc, char **argv)
{
  char buf[4096];
  int seen = 0;
  long r;
  (void) argc, (void) argv;

  if (read_file("/proc/self/cgroup", buf, sizeof buf) > 0)
    note("/proc/self/cgroup: %s", strtok(buf, "\n"));
  if (access("/sys/fs/cgroup", F_OK) < 0)
    blocked("/sys/fs/cgroup: %s", strerror(errno));
  writable_walk("/sys/fs/cgroup", 0, &seen);
  if (verdict == V_BLOCKED)
    blocked("none of %d files under /sys/fs/cgroup opens for writing", seen);
  r = mkdir("/sys/fs/cgroup/dsec-attack", 0755);
  if (r == 0) {
    escaped("created /sys/fs/cgroup/dsec-attack");
    rmdir("/sys/fs/cgroup/dsec-attack");
  } else
    blocked("mkdir /sys/fs/cgroup/dsec-attack: %s", strerror(errno));
  if (mkdir("/tmp/cg", 0755) < 0 && errno != EEXIST)
    fatal("mkdir /tmp/cg: %s", strerror(errno));
  r = mount("cgroup2", "/tmp/cg", "cgroup2", 0, NULL);
  if (check("mount(cgroup2)", r, EPERM, 0))
    umount2("/tmp/cg", MNT_DETACH);
  r = mount("cgroup", "/tmp/cg", "cgroup", 0, "memory");
  if (check("mount(cgroup v1 memory)", r, EPERM, 0))
    umount2("/tmp/cg", MNT_DETACH);
  return finish();
}

static int a_mknod(int argc, char **argv)
{
  static const struct { const char *path; mode_t type; int ma, mi; } nodes[] = {
    { "/tmp/sda", S_IFBLK, 8, 0 },    { "/dev/shm/sda", S_IFBLK, 8, 0 },
    { "/tmp/mem", S_IFCHR, 1, 1 },    { "/tmp/vda", S_IFBLK, 253, 0 },
    { "/tmp/kmsg", S_IFCHR, 1, 11 },
  };
  char label[128];
  (void) argc, (void) argv;
  for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
    long r;
    unlink(nodes[i].path);
    r = mknod(nodes[i].path, nodes[i].type | 0600,
              makedev((unsigned) nodes[i].ma, (unsigned) nodes[i].mi));
    snprintf(label, sizeof label, "mknod(%s, %d:%d)", nodes[i].path, nodes[i].ma,
             nodes[i].mi);
    if (r == 0) {
      /* made: is it usable?  opened read-only, never read */
      int fd = open(nodes[i].path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (fd >= 0) {
        escaped("%s made a device that opens", label);
        close(fd);
      } else
        unexpected("%s succeeded (open then failed: %s)", label, strerror(errno));
      unlink(nodes[i].path);
    } else
      check(label, r, EPERM, 0);
  }
  return finish();
}

/* hostdev [PATH...]: host device paths do not open, and /dev holds only
 * the standard nodes. */
static int a_hostdev(int argc, char **argv)
{
  static const char *const paths[] = {
    "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/xvda", "/dev/mem", "/dev/kmem",
    "/dev/port", "/dev/kmsg", "/dev/console", "/dev/loop0", "/dev/loop-control",
    "/dev/mapper/control", "/dev/fuse", "/dev/net/tun", "/dev/kvm",
    "/dev/btrfs-control", "/dev/zram0", "/dev/cpu/0/msr", "/dev/hwrng", "/dev/tty0",
    "/dev/autofs", "/dev/userfaultfd", "/dev/vhost-net",
  };
  DIR *d;
  struct dirent *e;
  int n = 0;

  for (size_t i = 0; i < sizeof paths / sizeof paths[0] + (size_t) argc; i++) {
    const char *p = i < sizeof paths / sizeof paths[0]
                      ? paths[i] : argv[i - sizeof paths / sizeof paths[0]];
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd >= 0) {
      escaped("opened host device %s", p);
      close(fd);
    } else {
      n++;
      note("open %s: %s", p, strerror(errno));
    }
  }
  blocked("%d host device paths do not open", n);
  /* what /dev holds: the standard character devices and pts only */
  d = opendir("/dev");
  if (!d)
    fatal("opendir /dev: %s", strerror(errno));
  while ((e = readdir(d))) {
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "/dev/%s", e->d_name);
    if (lstat(path, &st) < 0)
      continue;
    if (S_ISBLK(st.st_mode))
      escaped("/dev has a block device: %s", path);
    else if (S_ISCHR(st.st_mode)) {
      unsigned ma = major(st.st_rdev), mi = minor(st.st_rdev);
      int ok = (ma == 1 && (mi == 3 || mi == 5 || mi == 7 || mi == 8 || mi == 9)) ||
               (ma == 5 && (mi == 0 || mi == 2));
      if (!ok)
        unexpected("/dev has an unexpected device %s (%u:%u)", path, ma, mi);
    }
  }
  closedir(d);
  return finish();
}

static int a_rawsock(int argc, char **argv)
{
  long r;
  (void) argc, (void) argv;
  /* AF_PACKET is not a family sandboxes may open at all (seccomp) */
  r = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (check("socket(AF_PACKET, SOCK_RAW)", r, EAFNOSUPPORT, 0))
    close((int) r);
  r = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (check("socket(AF_PACKET, SOCK_DGRAM)", r, EAFNOSUPPORT, 0))
    close((int) r);
  r = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
  if (check("socket(AF_INET, SOCK_RAW, ICMP)", r, EPERM, 0))
    close((int) r);
  r = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (check("socket(AF_INET, SOCK_RAW, IPPROTO_RAW)", r, EPERM, 0))
    close((int) r);
  r = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6);
  if (check("socket(AF_INET6, SOCK_RAW, ICMPV6)", r, EPERM, EAFNOSUPPORT, 0))
    close((int) r);
  return finish();
}

static int a_tiocsti(int argc, char **argv)
{
  char c = '\n';
  long r;
  int fd, master, slave;
  (void) argc, (void) argv;

  /* no controlling terminal: /dev/tty does not open */
  fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENXIO)
      blocked("open /dev/tty: %s", strerror(errno));
    else
      unexpected("open /dev/tty: %s, expected ENXIO", strerror(errno));
  } else {
    r = ioctl(fd, TIOCSTI, &c);
    check("ioctl(/dev/tty, TIOCSTI)", r, EPERM, 0);
    close(fd);
  }
  /* fd 0 is a pipe: the filter answers before the tty layer would */
  r = ioctl(0, TIOCSTI, &c);
  check("ioctl(0, TIOCSTI)", r, EPERM, 0);
  r = ioctl(1, TIOCSTI, &c);
  check("ioctl(1, TIOCSTI)", r, EPERM, 0);
  {
    char sub = 0; /* TIOCLINUX subcode */
    r = ioctl(0, TIOCLINUX, &sub);
    check("ioctl(0, TIOCLINUX)", r, EPERM, 0);
  }
  /* a terminal of our own: still no injection */
  master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master >= 0) {
    r = ioctl(master, TIOCSTI, &c);
    check("ioctl(ptmx, TIOCSTI)", r, EPERM, 0);
    if (grantpt(master) == 0 && unlockpt(master) == 0 &&
        (slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC)) >= 0) {
      r = ioctl(slave, TIOCSTI, &c);
      check("ioctl(pts, TIOCSTI)", r, EPERM, 0);
      close(slave);
    }
    close(master);
  } else
    note("posix_openpt: %s", strerror(errno));
  return finish();
}

static int make_file(const char *path, size_t size)
{
  char buf[4096];
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fatal("create %s: %s", path, strerror(errno));
  memset(buf, 'a', sizeof buf);
  for (size_t n = 0; n < size; n += sizeof buf)
    if (write(fd, buf, sizeof buf) != (ssize_t) sizeof buf)
      fatal("write %s: %s", path, strerror(errno));
  fsync(fd);
  return fd;
}

static int a_reflink(int argc, char **argv)
{
  int src = make_file("/tmp/reflink-src", 65536);
  int dst = make_file("/tmp/reflink-dst", 0);
  struct file_clone_range cr = { .src_fd = src, .src_offset = 0, .src_length = 65536,
                                 .dest_offset = 0 };
  struct {
    struct file_dedupe_range r;
    struct file_dedupe_range_info info;
  } dd;
  long r;
  (void) argc, (void) argv;

  r = ioctl(dst, FICLONE, src);
  check("ioctl(FICLONE)", r, EOPNOTSUPP, 0);
  r = ioctl(dst, FICLONERANGE, &cr);
  check("ioctl(FICLONERANGE)", r, EOPNOTSUPP, 0);
  close(dst);
  dst = make_file("/tmp/reflink-dst", 65536);
  memset(&dd, 0, sizeof dd);
  dd.r.src_offset = 0;
  dd.r.src_length = 65536;
  dd.r.dest_count = 1;
  dd.info.dest_fd = dst;
  dd.info.dest_offset = 0;
  r = ioctl(src, FIDEDUPERANGE, &dd);
  check("ioctl(FIDEDUPERANGE)", r, EOPNOTSUPP, 0);
  /* on ext4 and overlayfs the file system answers EOPNOTSUPP as well;
   * these calls tell the filter's answer from the kernel's (EBADF for a
   * bad source descriptor, EFAULT for a bad argument) */
  r = ioctl(dst, FICLONE, -1);
  check("ioctl(FICLONE, bad fd): the filter, not the fs", r, EOPNOTSUPP, 0);
  cr.src_fd = -1;
  r = ioctl(dst, FICLONERANGE, &cr);
  check("ioctl(FICLONERANGE, bad fd): the filter, not the fs", r, EOPNOTSUPP, 0);
  r = syscall(SYS_ioctl, src, FIDEDUPERANGE, NULL);
  check("ioctl(FIDEDUPERANGE, NULL): the filter, not the fs", r, EOPNOTSUPP, 0);
  close(src);
  close(dst);
  unlink("/tmp/reflink-src");
  unlink("/tmp/reflink-dst");
  return finish();
}

/* XFS_IOC_SWAPEXT, from xfs_fs.h: _IOWR('X', 109, struct xfs_swapext). */
struct xfs_bstime {
  long tv_sec;
  int32_t tv_nsec;
};
struct xfs_bstat {
  uint64_t bs_ino;
  uint16_t bs_mode;
  int16_t bs_nlink;
  uint32_t bs_uid, bs_gid, bs_rdev;
  int32_t bs_blksize;
  int64_t bs_size;
  struct xfs_bstime bs_atime, bs_mtime, bs_ctime;
  int64_t bs_blocks;
  uint32_t bs_xflags;
  int32_t bs_extsize, bs_extents;
  uint32_t bs_gen;
  uint16_t bs_projid_lo, bs_forkoff, bs_projid_hi, bs_sick, bs_checked;
  unsigned char bs_pad[2];
  uint32_t bs_cowextsize, bs_dmevmask;
  uint16_t bs_dmstate, bs_aextents;
};
struct xfs_swapext {
  int64_t sx_version, sx_fdtarget, sx_fdtmp;
  int64_t sx_offset, sx_length;
  char sx_pad[16];
  struct xfs_bstat sx_stat;
};
/* XFS_IOC_EXCHANGE_RANGE (Linux 6.10): _IOW('X', 129, ...) */
struct xfs_exchange_range {
  int32_t file1_fd;
  uint32_t pad;
  uint64_t file1_offset, file2_offset, length, flags;
};
#define XFS_IOC_SWAPEXT _IOWR('X', 109, struct xfs_swapext)
#define XFS_IOC_EXCHANGE_RANGE _IOW('X', 129, struct xfs_exchange_range)
_Static_assert(sizeof(struct xfs_swapext) == 192, "xfs_swapext layout");
_Static_assert(XFS_IOC_SWAPEXT == 0xc0c0586dUL, "XFS_IOC_SWAPEXT number");

static int a_swapext(int argc, char **argv)
{
  int target = make_file("/tmp/swap-target", 8192);
  int tmp = make_file("/tmp/swap-tmp", 8192);
  struct xfs_swapext sx;
  struct xfs_exchange_range xr;
  struct stat st;
  long r;
  (void) argc, (void) argv;

  memset(&sx, 0, sizeof sx);
  fstat(target, &st);
  sx.sx_version = 0;
  sx.sx_fdtarget = target;
  sx.sx_fdtmp = tmp;
  sx.sx_length = 8192;
  sx.sx_stat.bs_ino = st.st_ino;
  sx.sx_stat.bs_size = st.st_size;
  r = ioctl(target, XFS_IOC_SWAPEXT, &sx);
  check("ioctl(XFS_IOC_SWAPEXT = _IOWR('X',109,struct xfs_swapext))", r, EPERM, 0);
  r = syscall(SYS_ioctl, target, 0xc0c0586dUL, &sx);
  check("ioctl(0xc0c0586d)", r, EPERM, 0);
  /* the same type and number with other size bits (the 32-bit layout is
   * 0xc0b8586d), and with junk in the upper half of the register */
  r = syscall(SYS_ioctl, target, 0xc0b8586dUL, &sx);
  check("ioctl(0xc0b8586d, 32-bit layout)", r, EPERM, 0);
  r = syscall(SYS_ioctl, target, 0xdead0000c0c0586dUL, &sx);
  check("ioctl(0xdead0000c0c0586d)", r, EPERM, 0);
  memset(&xr, 0, sizeof xr);
  xr.file1_fd = tmp;
  xr.length = 8192;
  r = ioctl(target, XFS_IOC_EXCHANGE_RANGE, &xr);
  check("ioctl(XFS_IOC_EXCHANGE_RANGE)", r, EPERM, 0);
  close(target);
  close(tmp);
  unlink("/tmp/swap-target");
  unlink("/tmp/swap-tmp");
  return finish();
}

/* Capabilities and no_new_privs of this process. */
static void check_privs(const char *who, const char *status)
{
  static const char *const caps[] = { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb" };
  for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
    long long v = status_field(status, caps[i], 16);
    if (v != 0)
      escaped("%s: %s is %llx", who, caps[i], v);
  }
  if (status_field(status, "NoNewPrivs", 10) != 1)
    escaped("%s: NoNewPrivs is not 1", who);
  if (status_field(status, "Seccomp", 10) != 2)
    escaped("%s: Seccomp is not 2 (filter)", who);
}

static int a_caps(int argc, char **argv)
{
  char status[8192];
  (void) argc, (void) argv;
  if (read_file("/proc/self/status", status, sizeof status) <= 0)
    fatal("read /proc/self/status: %s", strerror(errno));
  check_privs("self", status);
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
    escaped("PR_GET_NO_NEW_PRIVS is not 1");
  /* a process of the sandbox's root without capabilities cannot get one */
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 21 /* CAP_SYS_ADMIN */, 0, 0) == 0)
    escaped("raised CAP_SYS_ADMIN into the ambient set");
  if (setgroups(0, NULL) == 0 && getuid() != 0)
    escaped("setgroups as uid %d", (int) getuid());
  if (verdict == V_BLOCKED)
    blocked("CapInh/CapPrm/CapEff/CapBnd/CapAmb all 0, NoNewPrivs 1, Seccomp 2");
  return finish();
}

/* suid SRC: run a set-user-ID copy of busybox (made from SRC in /tmp
 * when we are root, else SRC itself, which the test made set-user-ID
 * root on the host) and look at what the new process has. */
static int a_suid(int argc, char **argv)
{
  const char *src, *bin;
  uid_t me = geteuid();
  struct stat st;
  char status[8192];
  int p[2], wst;
  ssize_t n, total = 0;
  pid_t pid;

  if (argc < 1)
    fatal("usage: suid SRC");
  src = argv[0];
  bin = src;
  if (me == 0) {
    char cmd[512];
    /* a copy of our own, set-user-ID root */
    snprintf(cmd, sizeof cmd, "cp %s /tmp/suid-busybox && chmod 4755 /tmp/suid-busybox", src);
    if (system(cmd) != 0)
      fatal("cannot copy %s to /tmp", src);
    bin = "/tmp/suid-busybox";
  }
  if (stat(bin, &st) < 0)
    fatal("stat %s: %s", bin, strerror(errno));
  if (!(st.st_mode & S_ISUID))
    fatal("%s is not set-user-ID (mode %o)", bin, (unsigned) st.st_mode);
  note("%s: mode %o owner %d, we are uid %d", bin, (unsigned) st.st_mode,
       (int) st.st_uid, (int) me);
  if (pipe(p) < 0)
    fatal("pipe: %s", strerror(errno));
  pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    execl(bin, "cat", "/proc/self/status", (char *) NULL);
    _exit(127);
  }
  close(p[1]);
  while ((n = read(p[0], status + total, sizeof status - 1 - (size_t) total)) > 0)
    total += n;
  status[total] = '\0';
  close(p[0]);
  waitpid(pid, &wst, 0);
  if (total == 0)
    fatal("%s ran nothing (status %d)", bin, wst);
  {
    const char *u = strstr(status, "\nUid:");
    unsigned ru, eu, su, fu;
    if (!u || sscanf(u + 5, "%u %u %u %u", &ru, &eu, &su, &fu) != 4)
      fatal("no Uid line");
    note("after exec: Uid %u %u %u %u", ru, eu, su, fu);
    if (eu != me || su != me || fu != me)
      escaped("exec of set-user-ID %s gave euid %u (was %u)", bin, eu, (unsigned) me);
  }
  check_privs("set-user-ID child", status);
  if (verdict == V_BLOCKED)
    blocked("set-user-ID %s (owner %d) ran with uid %d, no capabilities", bin,
            (int) st.st_uid, (int) me);
  return finish();
}

static int a_fds(int argc, char **argv)
{
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int own, count = 0;
  (void) argc, (void) argv;

  if (!d)
    fatal("opendir /proc/self/fd: %s", strerror(errno));
  own = dirfd(d);
  while ((e = readdir(d))) {
    char path[64], target[256];
    ssize_t n;
    int fd;
    if (e->d_name[0] == '.')
      continue;
    fd = atoi(e->d_name);
    if (fd == own)
      continue;
    count++;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    note("fd %d -> %s", fd, target);
    if (fd > 2)
      escaped("leaked descriptor %d -> %s", fd, target);
    else if (strncmp(target, "pipe:", 5) != 0 && strcmp(target, "/dev/null") != 0)
      unexpected("fd %d is %s, not a pipe", fd, target);
  }
  closedir(d);
  if (verdict == V_BLOCKED)
    blocked("only descriptors 0, 1, 2 are open (%d)", count);
  return finish();
}

static int a_session(int argc, char **argv)
{
  char stat[1024], *p;
  pid_t me = getpid();
  int fd;
  (void) argc, (void) argv;

  if (getsid(0) != me)
    escaped("getsid(0) is %d, not our pid %d: we share a session", (int) getsid(0), (int) me);
  else
    blocked("getsid(0) == getpid() == %d", (int) me);
  if (getpgrp() != me)
    unexpected("process group %d, not %d", (int) getpgrp(), (int) me);
  fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    escaped("/dev/tty opened: a controlling terminal");
    close(fd);
  } else if (errno == ENXIO)
    blocked("open /dev/tty: %s", strerror(errno));
  else
    unexpected("open /dev/tty: %s, expected ENXIO", strerror(errno));
  if (read_file("/proc/self/stat", stat, sizeof stat) > 0 && (p = strrchr(stat, ')'))) {
    int tty = -1;
    sscanf(p + 2, "%*c %*d %*d %*d %d", &tty);
    if (tty != 0)
      escaped("tty_nr is %d", tty);
  }
  return finish();
}

static int a_netdev(int argc, char **argv)
{
  char buf[8192], *line, *save = NULL;
  int n = 0, lineno = 0;
  DIR *d;
  struct dirent *e;
  (void) argc, (void) argv;

  if (read_file("/proc/net/dev", buf, sizeof buf) <= 0)
    fatal("read /proc/net/dev: %s", strerror(errno));
  for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char name[64];
    if (++lineno <= 2)
      continue;
    if (sscanf(line, " %63[^:]:", name) != 1)
      continue;
    n++;
    if (strcmp(name, "lo") != 0)
      escaped("interface %s in /proc/net/dev", name);
  }
  d = opendir("/sys/class/net");
  if (d) {
    while ((e = readdir(d)))
      if (e->d_name[0] != '.' && strcmp(e->d_name, "lo") != 0)
        escaped("interface %s in /sys/class/net", e->d_name);
    closedir(d);
  }
  if (n == 0)
    unexpected("no interface at all in /proc/net/dev");
  if (verdict == V_BLOCKED)
    blocked("only lo exists");
  return finish();
}

static int try_connect(int family, const void *sa, socklen_t len, const char *label)
{
  int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct timeval tv = { 3, 0 };
  int r, e;
  if (s < 0)
    fatal("socket: %s", strerror(errno));
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  r = connect(s, sa, len);
  e = errno;
  close(s);
  if (r == 0) {
    escaped("connected to %s", label);
    return 1;
  }
  if (e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH || e == ETIMEDOUT ||
      e == EINPROGRESS || e == EAGAIN || e == ENOENT)
    blocked("connect %s: %s", label, strerror(e));
  else
    unexpected("connect %s: %s", label, strerror(e));
  return 0;
}

/* connect PORT [IP|@ABSTRACT]...: 127.0.0.1:PORT is the host's loopback
 * server; each IP is an address of the host (port PORT); @NAME is an
 * abstract unix socket the host listens on. */
static int a_connect(int argc, char **argv)
{
  int port;
  char label[160];
  if (argc < 1)
    fatal("usage: connect PORT [IP|@NAME]...");
  port = atoi(argv[0]);
  for (int i = 0; i < argc; i++) {
    const char *ip = i == 0 ? "127.0.0.1" : argv[i];
    if (ip[0] == '@') {
      struct sockaddr_un su = { .sun_family = AF_UNIX };
      size_t n = strlen(ip + 1);
      if (n > sizeof su.sun_path - 2)
        fatal("name too long");
      memcpy(su.sun_path + 1, ip + 1, n);
      snprintf(label, sizeof label, "abstract unix socket %s", ip);
      try_connect(AF_UNIX, &su, (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + n),
                  label);
    } else if (strchr(ip, ':')) {
      struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t) port) };
      if (inet_pton(AF_INET6, ip, &s6.sin6_addr) != 1)
        fatal("bad address %s", ip);
      snprintf(label, sizeof label, "[%s]:%d", ip, port);
      try_connect(AF_INET6, &s6, sizeof s6, label);
    } else {
      struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
      if (inet_pton(AF_INET, ip, &s4.sin_addr) != 1)
        fatal("bad address %s", ip);
      snprintf(label, sizeof label, "%s:%d", ip, port);
      try_connect(AF_INET, &s4, sizeof s4, label);
    }
  }
  return finish();
}

/* chroot, then the classic escape: chroot into a subdirectory while the
 * working directory stays outside, climb with "..", chroot("."). */
static int a_chroot(int argc, char **argv)
{
  struct stat before, after;
  long r;
  (void) argc, (void) argv;

  if (stat("/", &before) < 0)
    fatal("stat /: %s", strerror(errno));
  if (mkdir("/tmp/jail", 0755) < 0 && errno != EEXIST)
    fatal("mkdir: %s", strerror(errno));
  if (chdir("/") < 0)
    fatal("chdir /: %s", strerror(errno));
  r = chroot("/tmp/jail");
  if (r == 0) {
    unexpected("chroot(/tmp/jail) succeeded without CAP_SYS_CHROOT");
    for (int i = 0; i < 64; i++)
      if (chdir("..") < 0)
        break;
    r = chroot(".");
    if (stat("/", &after) == 0 &&
        (after.st_dev != before.st_dev || after.st_ino != before.st_ino))
      escaped("chroot escape reached a root other than the sandbox's (dev %lu ino %lu)",
              (unsigned long) after.st_dev, (unsigned long) after.st_ino);
    else
      note("the climb ended at the sandbox's own root");
  } else
    check("chroot(/tmp/jail)", r, EPERM, 0);
  return finish();
}

/* The i386 (int $0x80) and x32 entry points: the filter only knows
 * x86-64 numbers, so other ABIs must kill the process, or a denied call
 * goes through under its other number. */
static long int80(long nr, long a, long b, long c)
{
  long ret;
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
  return ret;
}

static void abi_try(const char *label, int which)
{
  int st;
  pid_t p = fork();
  if (p < 0)
    fatal("fork: %s", strerror(errno));
  if (p == 0) {
    long r;
    if (which == 0) /* i386 keyctl(KEYCTL_GET_KEYRING_ID, session, 0) */
      r = int80(288, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
    else if (which == 1) /* i386 unshare(CLONE_NEWUSER) */
      r = int80(310, CLONE_NEWUSER, 0, 0);
    else /* x32 keyctl */
      r = syscall(0x40000000L | 250, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0),
      r = r < 0 ? -errno : r;
    _exit(r >= 0 ? 20 : r == -EPERM ? 21 : r == -ENOSYS ? 22 : 23);
  }
  waitpid(p, &st, 0);
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS)
    blocked("%s: killed by SIGSYS", label);
  else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV)
    blocked("%s: SIGSEGV (no such ABI in this kernel)", label);
  else if (WIFEXITED(st) && WEXITSTATUS(st) == 20)
    escaped("%s succeeded", label);
  else if (WIFEXITED(st) && WEXITSTATUS(st) == 22)
    blocked("%s: ENOSYS (no such ABI in this kernel)", label);
  else
    unexpected("%s: child status %#x, expected death by SIGSYS", label, st);
}

static int a_abi(int argc, char **argv)
{
  (void) argc, (void) argv;
  abi_try("i386 keyctl", 0);
  abi_try("i386 unshare(CLONE_NEWUSER)", 1);
  abi_try("x32 keyctl", 2);
  return finish();
}

/* The rest of the filter's list, each called so that it would do nothing
 * harmful if it got through. */
static int a_misc(int argc, char **argv)
{
  struct timex tx;
  long r;
  (void) argc, (void) argv;

  /* a bad magic: EINVAL if the filter and the capability check let it by */
  r = syscall(SYS_reboot, 0, 0, 0, NULL);
  check("reboot", r, EPERM, 0);
  r = syscall(SYS_swapon, "/nonexistent", 0);
  check("swapon", r, EPERM, 0);
  r = syscall(SYS_swapoff, "/nonexistent");
  check("swapoff", r, EPERM, 0);
  r = syscall(SYS_acct, "/nonexistent");
  check("acct", r, EPERM, 0);
  r = syscall(SYS_syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
  check("syslog", r, EPERM, 0);
  r = syscall(SYS_settimeofday, NULL, NULL);
  check("settimeofday", r, EPERM, 0);
  /* reading the clock state needs no privilege: EPERM is the filter's */
  memset(&tx, 0, sizeof tx);
  r = syscall(SYS_adjtimex, &tx);
  check("adjtimex (read only)", r, EPERM, 0);
  memset(&tx, 0, sizeof tx);
  r = syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx);
  check("clock_adjtime (read only)", r, EPERM, 0);
  r = syscall(SYS_iopl, 3);
  check("iopl", r, EPERM, 0);
  r = syscall(SYS_ioperm, 0x80, 1, 1);
  check("ioperm", r, EPERM, 0);
  r = syscall(SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, 0, 0);
  check("kcmp (self)", r, EPERM, 0);
  r = syscall(SYS_fanotify_init, 0, 0);
  if (check("fanotify_init", r, EPERM, 0))
    close((int) r);
  r = syscall(SYS_quotactl, 0x800007 /* Q_GETQUOTA, user */, "/dev/vda", 0, NULL);
  check("quotactl", r, EPERM, 0);
  return finish();
}

static int count_procs(void)
{
  DIR *d = opendir("/proc");
  struct dirent *e;
  int n = 0;
  if (!d)
    return -1;
  while ((e = readdir(d)))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
      n++;
  closedir(d);
  return n;
}

/* forkbomb LIMIT: every process forks for ever; a shared counter stops
 * the bomb at 4 x LIMIT so a missing limit cannot take the host down. */
static int a_forkbomb(int argc, char **argv)
{
  int limit, peak = 0, cur;
  volatile int *made;
  pid_t leader, p;
  int got_eagain = 0;

  if (argc < 1)
    fatal("usage: forkbomb LIMIT");
  limit = atoi(argv[0]);
  made = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (made == MAP_FAILED)
    fatal("mmap: %s", strerror(errno));
  leader = fork();
  if (leader < 0)
    fatal("fork: %s", strerror(errno));
  if (leader == 0) {
    setpgid(0, 0);
    for (;;) {
      if (__atomic_load_n(made, __ATOMIC_RELAXED) < 4 * limit && fork() > 0)
        __atomic_add_fetch(made, 1, __ATOMIC_RELAXED);
      else
        sleep_ms(5);
    }
  }
  setpgid(leader, leader);
  for (int i = 0; i < 60; i++) { /* 3 s */
    sleep_ms(50);
    cur = count_procs();
    if (cur > peak)
      peak = cur;
  }
  /* we are at the limit: our own fork fails */
  p = fork();
  if (p == 0)
    _exit(0);
  if (p < 0 && errno == EAGAIN)
    got_eagain = 1;
  else if (p > 0)
    waitpid(p, NULL, 0);
  note("processes made %d, peak in /proc %d, our fork %s", *made, peak,
       got_eagain ? "failed with EAGAIN" : "worked");
  /* stop it all: signal the group until nobody is left in it (the
   * leader stays in it as a zombie until we reap it) */
  {
    bool reaped = false;
    for (int i = 0; i < 500 && kill(-leader, SIGKILL) == 0; i++) {
      if (!reaped && waitpid(leader, NULL, WNOHANG) == leader)
        reaped = true;
      sleep_ms(10);
    }
    if (!reaped)
      waitpid(leader, NULL, 0);
  }
  for (int i = 0; i < 500 && count_procs() > 2; i++)
    sleep_ms(10);
  note("left after the kill: %d processes", count_procs());
  if (*made >= 4 * limit)
    escaped("no pid limit: the bomb made %d processes (limit %d)", *made, limit);
  else if (peak > limit)
    escaped("%d processes at once, limit %d", peak, limit);
  else if (!got_eagain)
    unexpected("fork at the peak did not fail with EAGAIN");
  else
    blocked("fork: EAGAIN at %d processes (limit %d)", peak, limit);
  return finish();
}

/* membomb MB: allocate and touch MB megabytes. */
static int a_membomb(int argc, char **argv)
{
  int mb;
  if (argc < 1)
    fatal("usage: membomb MB");
  mb = atoi(argv[0]);
  for (int i = 0; i < mb; i++) {
    char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      blocked("mmap failed after %d MB: %s", i, strerror(errno));
      return finish();
    }
    memset(p, 0x5a, 1 << 20);
  }
  escaped("allocated and touched %d MB", mb);
  return finish();
}

/* diskfill PATH MB LIMIT_MB: write MB megabytes; with a disk limit the
 * writes must stop at about LIMIT_MB with ENOSPC or EDQUOT. */
static int a_diskfill(int argc, char **argv)
{
  static char buf[1 << 20];
  long long written = 0;
  int fd, mb, limit;
  if (argc < 3)
    fatal("usage: diskfill PATH MB LIMIT_MB");
  mb = atoi(argv[1]);
  limit = atoi(argv[2]);
  memset(buf, 0x5a, sizeof buf);
  fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fatal("create %s: %s", argv[0], strerror(errno));
  for (int i = 0; i < mb; i++) {
    ssize_t n = write(fd, buf, sizeof buf);
    if (n < 0) {
      int e = errno;
      if (e == ENOSPC || e == EDQUOT) {
        if (written > (long long) limit << 20)
          escaped("wrote %lld MB before %s, limit %d MB", written >> 20, errname(e), limit);
        else
          blocked("write: %s after %lld MB (limit %d MB)", strerror(e), written >> 20, limit);
      } else
        unexpected("write failed after %lld MB: %s", written >> 20, strerror(e));
      break;
    }
    written += n;
  }
  if (written >= (long long) mb << 20)
    escaped("wrote all %d MB with a %d MB disk limit", mb, limit);
  else if (verdict == V_BLOCKED && fsync(fd) < 0 && errno != ENOSPC && errno != EDQUOT)
    unexpected("fsync: %s", strerror(errno));
  close(fd);
  unlink(argv[0]);
  return finish();
}

/* ------------------------------------------------------------ protect */

/* The Landlock system calls and the constants they need (the static
 * build may have headers older than the kernel). */
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_ACCESS_FS_MAKE_BLOCK (1ULL << 11)

/* A content for FILE that cannot be mistaken for its own. */
static unsigned long long fnv1a(const char *path)
{
  unsigned long long h = 1469598103934665603ULL;
  char buf[4096];
  ssize_t n;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fatal("open %s: %s", path, strerror(errno));
  while ((n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++)
      h = (h ^ (unsigned char) buf[i]) * 1099511628211ULL;
  close(fd);
  return h;
}

/* Checks an open that must fail; closes what got through. */
static void check_open(const char *label, const char *path, int flags, ...)
{
  int e, want, first = 0;
  va_list ap;
  int fd = open(path, flags | O_CLOEXEC);
  e = errno;
  if (fd >= 0) {
    escaped("%s of %s succeeded", label, path);
    close(fd);
    return;
  }
  va_start(ap, flags);
  while ((want = va_arg(ap, int)) != 0) {
    if (!first)
      first = want;
    if (e == want) {
      blocked("%s: %s", label, strerror(e));
      va_end(ap);
      return;
    }
  }
  va_end(ap);
  unexpected("%s of %s failed with %s (%s), expected %s", label, path, errname(e),
             strerror(e), errname(first));
}

/* protect FILE: every route the issue names for changing a protected
 * file, all of which must fail, with the error of the layer meant to stop
 * it: the read-only bind mount (EROFS), the parents pinned as mount
 * points (EBUSY, EXDEV), Landlock (EACCES), seccomp (EPERM, EOPNOTSUPP),
 * or the kernel's own rules for a read-only descriptor (EBADF, EINVAL,
 * EACCES for a shared writable mapping).  FILE's content must not change. */
static int a_protect(int argc, char **argv)
{
  const char *f;
  char dir[4096], side[4200], path[64], *slash;
  unsigned long long before;
  struct stat st;
  int ro, src, side_fd;
  long r;

  if (argc < 1)
    fatal("usage: protect FILE");
  f = argv[0];
  before = fnv1a(f);
  ro = open(f, O_RDONLY | O_CLOEXEC);
  if (ro < 0 || fstat(ro, &st) < 0 || !S_ISREG(st.st_mode))
    fatal("%s is not a readable regular file", f);
  snprintf(dir, sizeof dir, "%s", f);
  slash = strrchr(dir, '/');
  if (!slash || slash == dir)
    fatal("%s: give a file below a directory", f);
  *slash = '\0';

  /* content */
  check_open("open(O_WRONLY)", f, O_WRONLY, EROFS, EACCES, 0);
  check_open("open(O_RDWR)", f, O_RDWR, EROFS, EACCES, 0);
  check_open("open(O_WRONLY|O_APPEND)", f, O_WRONLY | O_APPEND, EROFS, EACCES, 0);
  check_open("open(O_RDONLY|O_TRUNC)", f, O_RDONLY | O_TRUNC, EROFS, EACCES, 0);
  check_open("open(O_WRONLY|O_CREAT)", f, O_WRONLY | O_CREAT, EROFS, EACCES, 0);
  snprintf(path, sizeof path, "/proc/self/fd/%d", ro);
  check_open("reopen through /proc/self/fd for writing", path, O_WRONLY, EROFS,
             EACCES, 0);
  r = truncate(f, 0);
  check("truncate", r, EROFS, EACCES, 0);
  r = ftruncate(ro, 0);
  check("ftruncate(read-only fd)", r, EINVAL, EBADF, 0);
  r = fallocate(ro, 0, 0, 1 << 20);
  check("fallocate(read-only fd)", r, EBADF, 0);
  r = fallocate(ro, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096);
  check("fallocate(PUNCH_HOLE)", r, EBADF, 0);
  {
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0);
    if (m != MAP_FAILED)
      munmap(m, 4096);
    check("mmap(PROT_WRITE, MAP_SHARED)", m == MAP_FAILED ? -1 : 0, EACCES, 0);
  }

  /* extents: clone, dedupe, swap, copy into it */
  src = make_file("/tmp/protect-src", 65536);
  r = ioctl(ro, FICLONE, src);
  check("ioctl(FICLONE) onto it", r, EOPNOTSUPP, 0);
  {
    struct file_clone_range cr = { .src_fd = src, .src_length = 4096 };
    r = ioctl(ro, FICLONERANGE, &cr);
    check("ioctl(FICLONERANGE) onto it", r, EOPNOTSUPP, 0);
  }
  {
    struct {
      struct file_dedupe_range r;
      struct file_dedupe_range_info info;
    } dd;
    memset(&dd, 0, sizeof dd);
    dd.r.src_length = 4096;
    dd.r.dest_count = 1;
    dd.info.dest_fd = ro;
    r = ioctl(src, FIDEDUPERANGE, &dd);
    check("ioctl(FIDEDUPERANGE) onto it", r, EOPNOTSUPP, 0);
  }
  r = syscall(SYS_ioctl, ro, 0xc0c0586dUL, NULL);
  check("ioctl(XFS_IOC_SWAPEXT)", r, EPERM, 0);
  r = syscall(SYS_ioctl, ro, 0x40205881UL, NULL);
  check("ioctl(XFS_IOC_EXCHANGE_RANGE)", r, EPERM, 0);
  r = copy_file_range(src, NULL, ro, NULL, 4096, 0);
  check("copy_file_range into it", r, EBADF, 0);
  r = sendfile(ro, src, NULL, 4096);
  check("sendfile into it", r, EBADF, EINVAL, 0);

  /* names: replace, exchange, remove, link, move a parent away */
  r = rename("/tmp/protect-src", f);
  check("rename over it (from /tmp)", r, EXDEV, EBUSY, EROFS, EACCES, 0);
  r = syscall(SYS_renameat2, AT_FDCWD, "/tmp/protect-src", AT_FDCWD, f,
              RENAME_EXCHANGE);
  check("renameat2(RENAME_EXCHANGE) (with /tmp)", r, EXDEV, EBUSY, EROFS, EACCES, 0);
  /* a file beside it, where one can be made (not in fncall's read-only
   * root) */
  snprintf(side, sizeof side, "%s/.protect-side", dir);
  side_fd = open(side, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (side_fd >= 0) {
    close(side_fd);
    r = rename(side, f);
    check("rename over it (from its directory)", r, EBUSY, EROFS, EACCES, EXDEV, 0);
    r = syscall(SYS_renameat2, AT_FDCWD, side, AT_FDCWD, f, RENAME_EXCHANGE);
    check("renameat2(RENAME_EXCHANGE) (in its directory)", r, EBUSY, EROFS,
          EACCES, EXDEV, 0);
    unlink(side);
  } else
    note("no file can be made beside it (%s): same-directory renames not tried",
         strerror(errno));
  r = unlink(f);
  check("unlink", r, EBUSY, EROFS, EACCES, 0);
  r = rename(f, "/tmp/protect-moved");
  check("rename it away", r, EXDEV, EBUSY, EROFS, EACCES, 0);
  snprintf(side, sizeof side, "%s/.protect-link", dir);
  r = link(f, side);
  if (check("link(2) beside it", r, EXDEV, EROFS, EACCES, EPERM, 0))
    unlink(side);
  r = link(f, "/tmp/protect-link");
  if (check("link(2) into /tmp", r, EXDEV, EROFS, EACCES, EPERM, 0))
    unlink("/tmp/protect-link");
  snprintf(side, sizeof side, "%s.moved", dir);
  r = rename(dir, side);
  if (check("rename its parent directory away", r, EBUSY, EROFS, EACCES, EXDEV, 0))
    rename(side, dir);
  r = rmdir(dir);
  check("rmdir its parent", r, EBUSY, ENOTEMPTY, EROFS, EACCES, 0);

  /* metadata */
  r = chmod(f, 0777);
  check("chmod", r, EROFS, 0);
  r = chown(f, 1, 1);
  check("chown", r, EROFS, EPERM, 0);
  r = setxattr(f, "user.dsec", "x", 1, 0);
  check("setxattr(user.dsec)", r, EROFS, EPERM, ENOTSUP, 0);
  r = utimensat(AT_FDCWD, f, NULL, 0);
  check("utimensat", r, EROFS, 0);

  /* by handle, and by mounting over it */
  {
    struct {
      struct file_handle fh;
      unsigned char bytes[128];
    } h;
    int mount_id;
    memset(&h, 0, sizeof h);
    h.fh.handle_bytes = sizeof h.bytes;
    r = syscall(SYS_name_to_handle_at, AT_FDCWD, f, &h.fh, &mount_id, 0);
    check("name_to_handle_at", r, EPERM, 0);
    r = syscall(SYS_open_by_handle_at, ro, &h.fh, O_RDWR);
    check("open_by_handle_at(O_RDWR)", r, EPERM, 0);
  }
  r = mount("tmpfs", f, "tmpfs", 0, NULL);
  check("mount over it", r, EPERM, 0);
  r = umount2(f, MNT_DETACH);
  check("umount2 of its read-only bind", r, EPERM, 0);

  close(src);
  close(ro);
  unlink("/tmp/protect-src");
  if (fnv1a(f) != before)
    escaped("the content of %s changed", f);
  return finish();
}

/* protect_landlock FILE: the routes to FILE's content that Landlock alone
 * must refuse, once its read-only bind mount is gone (the test takes it
 * away from outside the sandbox).  Only EACCES is right: EROFS means the
 * mount still answers, and the test does not test Landlock. */
static int a_protect_landlock(int argc, char **argv)
{
  char alias[4200], *slash;
  unsigned long long before;
  int ro;
  long r;

  if (argc < 1)
    fatal("usage: protect_landlock FILE");
  before = fnv1a(argv[0]);
  check_open("open(O_WRONLY)", argv[0], O_WRONLY, EACCES, 0);
  check_open("open(O_RDWR)", argv[0], O_RDWR, EACCES, 0);
  check_open("open(O_WRONLY|O_APPEND)", argv[0], O_WRONLY | O_APPEND, EACCES, 0);
  check_open("open(O_RDONLY|O_TRUNC)", argv[0], O_RDONLY | O_TRUNC, EACCES, 0);
  r = truncate(argv[0], 0);
  check("truncate", r, EACCES, 0);
  ro = open(argv[0], O_RDONLY | O_CLOEXEC);
  if (ro < 0)
    fatal("open %s: %s", argv[0], strerror(errno));
  snprintf(alias, sizeof alias, "/proc/self/fd/%d", ro);
  check_open("reopen through /proc/self/fd for writing", alias, O_WRONLY, EACCES, 0);
  close(ro);
  /* a second name in the same directory (Landlock lets it be made: the
   * directory's rights): the inode is still not writable through it */
  snprintf(alias, sizeof alias, "%s", argv[0]);
  slash = strrchr(alias, '/');
  if (!slash)
    fatal("%s: give an absolute path", argv[0]);
  snprintf(slash + 1, sizeof alias - (size_t) (slash + 1 - alias), ".landlock-alias");
  if (link(argv[0], alias) == 0) {
    check_open("open(O_WRONLY) through a hard link beside it", alias, O_WRONLY,
               EACCES, 0);
    r = truncate(alias, 0);
    check("truncate through a hard link beside it", r, EACCES, 0);
    unlink(alias);
  } else
    note("link beside it: %s", strerror(errno));
  /* into a directory where new files are writable: Landlock refuses a
   * reparenting that gains rights (EXDEV), the mounts too */
  r = link(argv[0], "/tmp/landlock-alias");
  if (check("link(2) into /tmp", r, EXDEV, 0)) {
    check_open("open(O_WRONLY) through the link in /tmp", "/tmp/landlock-alias",
               O_WRONLY, EACCES, 0);
    unlink("/tmp/landlock-alias");
  }
  if (fnv1a(argv[0]) != before)
    escaped("the content of %s changed", argv[0]);
  return finish();
}

/* landlock_domain: this process is in a Landlock domain.  A process can
 * stack at most 16 domains (LANDLOCK_MAX_NUM_LAYERS); a child counts how
 * many more it can add (E2BIG past the last), which tells how many it was
 * born with. */
static int a_landlock_domain(int argc, char **argv)
{
  int p[2], status, added = 0;
  long abi;
  pid_t pid;
  (void) argc, (void) argv;

  abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
  if (abi < 1)
    fatal("no Landlock here: %s", strerror(errno));
  if (pipe(p) < 0)
    fatal("pipe: %s", strerror(errno));
  pid = fork();
  if (pid < 0)
    fatal("fork: %s", strerror(errno));
  if (pid == 0) {
    uint64_t handled = LL_ACCESS_FS_MAKE_BLOCK;
    int n = 0;
    int rs = (int) syscall(SYS_landlock_create_ruleset, &handled, sizeof handled, 0);
    if (rs >= 0) {
      prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
      while (n < 64 && syscall(SYS_landlock_restrict_self, rs, 0) == 0)
        n++;
    }
    n = rs < 0 || errno != E2BIG ? -errno : n;
    if (write(p[1], &n, sizeof n) != (ssize_t) sizeof n)
      _exit(1);
    _exit(0);
  }
  close(p[1]);
  if (read(p[0], &added, sizeof added) != (ssize_t) sizeof added)
    fatal("the child did not answer");
  waitpid(pid, &status, 0);
  if (added < 0)
    fatal("restrict_self failed: %s", strerror(-added));
  note("ABI %ld; %d more domain layers could be stacked", abi, added);
  if (added >= 16)
    escaped("not in a Landlock domain (%d layers could be added)", added);
  else
    blocked("in a Landlock domain of %d layer(s)", 16 - added);
  return finish();
}

/* scope_unix NAME: connect to the abstract unix socket @NAME, which a
 * process outside the sandbox's Landlock domain listens on (in the
 * sandbox's network namespace): the scope refuses it (EPERM). */
static int a_scope_unix(int argc, char **argv)
{
  struct sockaddr_un su = { .sun_family = AF_UNIX };
  size_t n;
  int s, r, e;

  if (argc < 1)
    fatal("usage: scope_unix NAME");
  n = strlen(argv[0]);
  if (n + 1 >= sizeof su.sun_path)
    fatal("name too long");
  memcpy(su.sun_path + 1, argv[0], n);
  s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    fatal("socket: %s", strerror(errno));
  r = connect(s, (struct sockaddr *) &su,
              (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + n));
  e = errno;
  close(s);
  if (r < 0 && e == ECONNREFUSED)
    fatal("nothing listens on @%s", argv[0]);
  errno = e;
  check("connect(@NAME) outside the domain", r, EPERM, 0);
  return finish();
}

/* scope_signal TAG: signal the process whose command line holds TAG, which
 * is in the sandbox's PID namespace and runs as the sandbox's root but is
 * outside its Landlock domain: the scope refuses it (EPERM). */
static int a_scope_signal(int argc, char **argv)
{
  DIR *d;
  struct dirent *de;
  pid_t target = 0;
  long r;

  if (argc < 1)
    fatal("usage: scope_signal TAG");
  d = opendir("/proc");
  if (!d)
    fatal("opendir /proc: %s", strerror(errno));
  while ((de = readdir(d)) && !target) {
    char path[300], cmd[4096];
    int len;
    if (de->d_name[0] < '1' || de->d_name[0] > '9')
      continue;
    snprintf(path, sizeof path, "/proc/%s/cmdline", de->d_name);
    len = read_file(path, cmd, sizeof cmd);
    for (int i = 0; i < len; i++)
      if (cmd[i] == '\0')
        cmd[i] = ' ';
    if (len > 0 && strstr(cmd, argv[0]) && atoi(de->d_name) != getpid())
      target = atoi(de->d_name);
  }
  closedir(d);
  if (!target)
    fatal("no process with %s", argv[0]);
  note("target pid %d", (int) target);
  r = kill(target, 0);
  check("kill(PID, 0)", r, EPERM, 0);
  r = kill(target, SIGTERM);
  check("kill(PID, SIGTERM)", r, EPERM, 0);
  return finish();
}

/* Socket families: only unix, inet, inet6 and netlink route open; the
 * rest fail with EAFNOSUPPORT, high bits in the family register too. */
static int a_sockfam(int argc, char **argv)
{
  static const struct {
    int family, type, proto;
    const char *name;
  } denied[] = {
    { 40, SOCK_STREAM, 0, "AF_VSOCK" },
    { 38, SOCK_SEQPACKET, 0, "AF_ALG" },
    { 31, SOCK_RAW, 0, "AF_BLUETOOTH" },
    { 44, SOCK_RAW, 0, "AF_XDP" },
    { 17, SOCK_RAW, 0, "AF_PACKET" },
    { 4, SOCK_DGRAM, 0, "AF_IPX" },
    { 29, SOCK_RAW, 1, "AF_CAN" },
    { 16, SOCK_RAW, 4, "AF_NETLINK/NETLINK_SOCK_DIAG" },
    { 16, SOCK_RAW, 15, "AF_NETLINK/NETLINK_KOBJECT_UEVENT" },
    { 16, SOCK_RAW, 9, "AF_NETLINK/NETLINK_AUDIT" },
    { 16, SOCK_RAW, 12, "AF_NETLINK/NETLINK_NETFILTER" },
  };
  static const struct {
    int family, type, proto;
    const char *name;
  } allowed[] = {
    { AF_UNIX, SOCK_STREAM, 0, "AF_UNIX" },
    { AF_INET, SOCK_STREAM, 0, "AF_INET" },
    { AF_INET6, SOCK_DGRAM, 0, "AF_INET6" },
    { AF_NETLINK, SOCK_RAW, 0, "AF_NETLINK/NETLINK_ROUTE" },
  };
  char label[96];
  long r;
  int sv[2];
  (void) argc, (void) argv;
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
    snprintf(label, sizeof label, "socket(%s)", denied[i].name);
    r = socket(denied[i].family, denied[i].type | SOCK_CLOEXEC, denied[i].proto);
    if (check(label, r, EAFNOSUPPORT, 0))
      close((int) r);
  }
  /* the family is an int: garbage in the register's high half must not
   * slip AF_VSOCK past the filter */
  r = syscall(SYS_socket, (1UL << 32) | 40UL, (unsigned long) SOCK_STREAM, 0UL);
  if (check("socket(1<<32 | AF_VSOCK)", r, EAFNOSUPPORT, 0))
    close((int) r);
  r = socketpair(40, SOCK_STREAM, 0, sv);
  if (check("socketpair(AF_VSOCK)", r, EAFNOSUPPORT, 0)) {
    close(sv[0]);
    close(sv[1]);
  }
  for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
    int fd = socket(allowed[i].family, allowed[i].type | SOCK_CLOEXEC,
                    allowed[i].proto);
    if (fd < 0)
      unexpected("socket(%s): %s, but it is a family sandboxes use",
                 allowed[i].name, strerror(errno));
    else
      close(fd);
  }
  return finish();
}

/* Per-user kernel limits: inotify instances, as many as this sandbox may
 * have, held for SECONDS; prints how many.  ("inotify_one": one more.) */
static int a_inotify_hog(int argc, char **argv)
{
  int n = 0;
  if (argc < 1)
    fatal("usage: inotify_hog SECONDS");
  while (inotify_init1(IN_CLOEXEC) >= 0)
    n++;
  note("%d inotify instances, then %s", n, strerror(errno));
  printf("HELD %d\n", n);
  fflush(stdout);
  close(open("/tmp/inotify-held", O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  sleep((unsigned) atoi(argv[0]));
  return 0;
}

static int a_inotify_one(int argc, char **argv)
{
  int fd = inotify_init1(IN_CLOEXEC);
  (void) argc, (void) argv;
  if (fd < 0)
    escaped("inotify_init1: %s: another sandbox used up our limit",
            strerror(errno));
  else
    blocked("inotify_init1 works: no other sandbox used up our limit");
  return finish();
}

/* SysV shared memory and /dev/shm between calls: "put" leaves both
 * behind, "get" must find neither. */
static int a_shm(int argc, char **argv)
{
  key_t key = 0x64736563;
  int id;
  if (argc < 1)
    fatal("usage: shm put|get");
  if (strcmp(argv[0], "put") == 0) {
    char *p;
    int fd;
    id = shmget(key, 4096, IPC_CREAT | 0666);
    if (id < 0 || (p = shmat(id, NULL, 0)) == (void *) -1)
      fatal("shmget/shmat: %s", strerror(errno));
    strcpy(p, "secret of an earlier call");
    shmdt(p);
    fd = open("/dev/shm/dsec-secret", O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0 || write(fd, "secret\n", 7) != 7)
      fatal("/dev/shm: %s", strerror(errno));
    close(fd);
    printf("PUT\n");
    return 0;
  }
  id = shmget(key, 0, 0);
  if (id >= 0)
    escaped("shmget finds the segment an earlier call left");
  else
    blocked("shmget: %s", strerror(errno));
  if (access("/dev/shm/dsec-secret", F_OK) == 0)
    escaped("/dev/shm holds an earlier call's file");
  else
    blocked("/dev/shm is empty");
  return finish();
}

/* A flood of one denied call, then a call not denied before: the
 * audit log must record the new one all the same (tests/security/
 * audit.bats).  keyctl COUNT times, bpf once, ioctl TIOCSTI COUNT times,
 * ioctl FICLONE once; each must fail as the filter says. */
static void flood(const char *label, int count, long (*call)(void), int want)
{
  int bad = 0, e = 0;
  for (int i = 0; i < count; i++) {
    errno = 0;
    if (call() >= 0 || errno != want) {
      bad++;
      e = errno;
    }
  }
  if (bad)
    unexpected("%s: %d of %d calls did not fail with %s (%s)", label, bad, count,
               errname(want), strerror(e));
  else
    blocked("%s x%d: %s", label, count, strerror(want));
}

static long call_keyctl(void)
{
  return syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
}

static long call_bpf(void)
{
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 4;
  attr.max_entries = 1;
  return syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
}

static long call_tiocsti(void)
{
  char c = '\n';
  return ioctl(0, TIOCSTI, &c);
}

static long call_ficlone(void)
{
  return ioctl(1, FICLONE, 0);
}

static int a_deny_flood(int argc, char **argv)
{
  int count = argc > 0 ? atoi(argv[0]) : 0;
  if (count <= 0)
    fatal("usage: deny_flood COUNT");
  flood("keyctl", count, call_keyctl, EPERM);
  flood("bpf", 1, call_bpf, EPERM);
  flood("ioctl(TIOCSTI)", count, call_tiocsti, EPERM);
  flood("ioctl(FICLONE)", 1, call_ficlone, EOPNOTSUPP);
  return finish();
}

/* ---------------------------------------------------------------- main */

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *args;
} attacks[] = {
  { "keyctl", a_keyctl, "" },
  { "bpf", a_bpf, "" },
  { "perf", a_perf, "" },
  { "userfaultfd", a_userfaultfd, "" },
  { "io_uring", a_io_uring, "" },
  { "kexec", a_kexec, "" },
  { "module", a_module, "" },
  { "handle", a_handle, "" },
  { "mount", a_mount, "" },
  { "umount", a_umount, "" },
  { "pivot_root", a_pivot_root, "" },
  { "userns", a_userns, "" },
  { "setns", a_setns, "" },
  { "ptrace", a_ptrace, "init|child|PID" },
  { "vm_readv", a_vm_readv, "init|child" },
  { "procmem", a_procmem, "" },
  { "kill_init", a_kill_init, "" },
  { "kpagecgroup", a_kpagecgroup, "" },
  { "masked", a_masked, "PATH [read]" },
  { "sysrq", a_sysrq, "" },
  { "sysctl", a_sysctl, "PATH VALUE" },
  { "sysfs", a_sysfs, "" },
  { "cgroup", a_cgroup, "" },
  { "mknod", a_mknod, "" },
  { "hostdev", a_hostdev, "[PATH]..." },
  { "rawsock", a_rawsock, "" },
  { "tiocsti", a_tiocsti, "" },
  { "reflink", a_reflink, "" },
  { "swapext", a_swapext, "" },
  { "caps", a_caps, "" },
  { "suid", a_suid, "SRC" },
  { "fds", a_fds, "" },
  { "session", a_session, "" },
  { "netdev", a_netdev, "" },
  { "connect", a_connect, "PORT [IP|@NAME]..." },
  { "chroot", a_chroot, "" },
  { "abi", a_abi, "" },
  { "misc", a_misc, "" },
  { "forkbomb", a_forkbomb, "LIMIT" },
  { "membomb", a_membomb, "MB" },
  { "diskfill", a_diskfill, "PATH MB LIMIT_MB" },
  { "protect", a_protect, "FILE" },
  { "protect_landlock", a_protect_landlock, "FILE" },
  { "landlock_domain", a_landlock_domain, "" },
  { "scope_unix", a_scope_unix, "NAME" },
  { "scope_signal", a_scope_signal, "TAG" },
  { "sockfam", a_sockfam, "" },
  { "inotify_hog", a_inotify_hog, "SECONDS" },
  { "inotify_one", a_inotify_one, "" },
  { "shm", a_shm, "put|get" },
  { "deny_flood", a_deny_flood, "COUNT" },
};

int main(int argc, char **argv)
{
  setvbuf(stderr, NULL, _IOLBF, 0);
  if (argc >= 2)
    for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++)
      if (strcmp(argv[1], attacks[i].name) == 0) {
        attack_name = attacks[i].name;
        return attacks[i].fn(argc - 2, argv + 2);
      }
  fprintf(stderr, "usage: attack NAME [ARG]...\n");
  for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++)
    fprintf(stderr, "  %s %s\n", attacks[i].name, attacks[i].args);
  return V_ERROR;
}
