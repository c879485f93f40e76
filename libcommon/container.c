/* The container backend.
 *
 * dsec-run create forks the supervisor, which:
 *   1. moves into a mount namespace of its own (nothing it mounts is seen
 *      by the host, and everything goes when it exits);
 *   2. creates the cgroups and applies the limits;
 *   3. clones "stage1" into a new user namespace and maps its root to an
 *      unprivileged host range;
 *   4. mounts each layer idmapped to that user namespace (open_tree +
 *      mount_setattr), stacks them with the sandbox's upper dir in an
 *      overlay, and attaches the spec's bind mounts on top, all in its own
 *      mount namespace;
 *   5. lets stage1 go: stage1 joins the cgroups, unshares mount, pid, net,
 *      ipc, uts, cgroup and time namespaces and clones init as a sibling
 *      (CLONE_PARENT), so the supervisor is init's parent;
 *   6. init mounts /proc, /dev, /sys, masks the dangerous /proc and /sys
 *      files, pivot_roots, protects and hides the spec's paths, brings up
 *      lo, restricts itself with Landlock (so every process of the sandbox
 *      is in its domain; fncall: each call, after its own mounts), and
 *      waits for exec requests;
 *   7. serves the exec socket until the sandbox ends.
 *
 * Each exec is a child of init: a new session, the spec's user, no
 * capabilities, no_new_privs, the seccomp filter, then execve.  Its output
 * goes through pipes the supervisor owns, so caps, timeouts and the
 * trajectory are the supervisor's business, outside the sandbox. */
#include <config.h>

#include "container.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/fanotify.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <seccomp.h>

#include "audit.h"
#include "cgroup.h"
#include "ctl.h"
#include "exec.h"
#include "fsutil.h"
#include "idrange.h"
#include "landlock.h"
#include "log.h"
#include "process.h"
#include "proxy.h"
#include "sandbox.h"
#include "spec.h"
#include "store.h"
#include "sysfilter.h"
#include "tarball.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

#define MSG_MAX (1u << 20)

/* Messages between the supervisor and init travel on a SOCK_SEQPACKET
 * pair: one JSON object per message, an exec's three pipe ends attached. */

static int write_file(const char *path, const char *s)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t n;
  if (fd < 0)
    return -1;
  n = write(fd, s, strlen(s));
  close(fd);
  return n == (ssize_t) strlen(s) ? 0 : -1;
}

/* Sending and receiving messages, with up to 3 descriptors. */
static int msg_send(int sock, json_t *msg, const int *fds, int nfds)
{
  _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
  struct iovec iov = { text, text ? strlen(text) : 0 };
  union {
    char buf[CMSG_SPACE(3 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

  if (!text)
    return -1;
  if (nfds > 0) {
    struct cmsghdr *c;
    memset(&u, 0, sizeof u);
    mh.msg_control = u.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t) nfds);
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t) nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t) nfds);
  }
  while (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
    if (errno != EINTR)
      return -1;
  return 0;
}

/* Returns the message (new ref) and its descriptors; NULL on EOF/error. */
static json_t *msg_recv(int sock, char *buf, size_t cap, int *fds, int *nfds)
{
  union {
    char b[CMSG_SPACE(3 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec iov = { buf, cap - 1 };
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = u.b, .msg_controllen = sizeof u.b };
  ssize_t n;

  *nfds = 0;
  do
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return NULL;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int k = (int) ((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      if (k > 3)
        k = 3;
      memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t) k);
      *nfds = k;
    }
  buf[n] = '\0';
  return json_loadb(buf, (size_t) n, 0, NULL);
}

/* Overwrites our command line (inherited from the dsec-run that forked
 * us) with title, within the space the original one had: `ps` and
 * `pkill -f` then see what this process is, not its creator's command. */
static void set_cmdline(const char *title)
{
  char buf[1024], *p;
  unsigned long start = 0, end = 0;
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;

  if (fd >= 0)
    close(fd);
  if (n <= 0)
    return;
  buf[n] = '\0';
  p = strrchr(buf, ')');
  if (!p)
    return;
  /* fields 48 and 49: arg_start, arg_end (field 3 follows the ')') */
  p += 2;
  for (int field = 3; field < 48 && p; field++) {
    p = strchr(p, ' ');
    if (p)
      p++;
  }
  if (!p || sscanf(p, "%lu %lu", &start, &end) != 2 || end <= start)
    return;
  {
    size_t len = end - start;
    size_t t = strlen(title);
    char *area = (char *) (uintptr_t) start;
    if (t >= len)
      t = len - 1;
    memcpy(area, title, t);
    memset(area + t, 0, len - t);
  }
}

/* ---- init */

struct init_ctx {
  int sock;
  bool fncall;
  struct dsec_bpf filter;        /* denials go to a listener (audited) */
  struct dsec_bpf filter_plain;  /* denials fail at once (no listener) */
  int last_cap;
  char *tmp_size; /* tmpfs size option for fncall's /tmp and workdir */
  int ll_abi;     /* the kernel's Landlock ABI, 0 without Landlock */
  json_t *protect; /* fncall and exclusive execs: the spec's protect,
                    * planned again per call */
  bool exclusive;  /* an exclusive exec (the supervisor's child, not init's) */
};

/* Paths masked in /proc and /sys: files get /dev/null, directories an
 * empty read-only tmpfs.  kpage* let a reader walk physical memory state
 * (a host crash was seen through kpagecgroup); kcore and keys leak the
 * host; sysrq-trigger acts on it. */
static const char *const masked_paths[] = {
  "/proc/kcore",         "/proc/kpagecgroup",  "/proc/kpageflags",
  "/proc/kpagecount",    "/proc/kmsg",         "/proc/keys",
  "/proc/key-users",     "/proc/timer_list",   "/proc/sched_debug",
  "/proc/latency_stats", "/proc/sysrq-trigger", "/proc/acpi",
  "/proc/scsi",          "/proc/asound",       "/proc/interrupts",
  "/proc/kallsyms",      "/proc/modules",      "/proc/slabinfo",
  "/proc/pagetypeinfo",  "/proc/vmallocinfo",  "/proc/buddyinfo",
  "/proc/zoneinfo",      "/proc/iomem",        "/proc/ioports",
  "/proc/mtrr",          "/proc/config.gz",    "/proc/bootconfig",
  "/sys/firmware",       "/sys/kernel/debug",  "/sys/kernel/tracing",
  "/sys/kernel/security", "/sys/fs/bpf",       "/sys/devices/virtual/powercap",
  "/proc/sys/kernel/core_pattern", NULL,
};

/* Kept readable but read-only. */
static const char *const readonly_paths[] = {
  "/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs", NULL,
};

static void die_init_status(int sock, int status, const char *fmt, ...)
  _printf_(3, 4);
static void die_init_status(int sock, int status, const char *fmt, ...)
{
  int e = errno;
  char what[4096];
  va_list ap;
  json_t *m;

  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  m = json_pack("{s:s, s:s, s:i, s:i}", "op", "failed", "msg", what, "errno",
                e, "status", status);
  msg_send(sock, m, NULL, 0);
  json_decref(m);
  _exit(1);
}

#define die_init(sock, ...) die_init_status((sock), DSEC_EXIT_FAILURE, __VA_ARGS__)

/* Attaches a detached mount (from open_tree) on path; closes t. */
static int attach(int t, const char *path)
{
  int r = (int) syscall(SYS_move_mount, t, "", AT_FDCWD, path,
                        MOVE_MOUNT_F_EMPTY_PATH);
  close(t);
  return r;
}

/* Mounts a new fstype (proc, sysfs) on path, resolved inside the root
 * that starts at the working directory: an image's symlink cannot aim it
 * at the host. */
static int mount_in_root(const char *fstype, const char *path, uint64_t attrs)
{
  struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                          .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
  int fs, m = -1, target = -1, r = -1;

  fs = (int) syscall(SYS_fsopen, fstype, FSOPEN_CLOEXEC);
  if (fs < 0)
    return -1;
  if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
    m = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs);
  if (m >= 0)
    target = (int) syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
  if (target >= 0)
    r = (int) syscall(SYS_move_mount, m, "", target, "",
                      MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
  if (target >= 0)
    close(target);
  if (m >= 0)
    close(m);
  close(fs);
  return r;
}

/* A read-only recursive bind of path onto itself. */
static int bind_ro(const char *path)
{
  struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                         MOUNT_ATTR_NODEV };
  int t = (int) syscall(SYS_open_tree, AT_FDCWD, path,
                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (t < 0)
    return -1;
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
              sizeof attr) < 0) {
    close(t);
    return -1;
  }
  return attach(t, path);
}

/* Masks run inside the sandbox's root (after pivot_root), so no path can
 * lead out of it.  Files get /dev/null, directories an empty read-only
 * tmpfs.  Also used by fncall calls over their own /proc. */
static void mask_paths(void)
{
  for (const char *const *p = readonly_paths; *p; p++) {
    struct stat st;
    if (lstat(*p, &st) == 0 && S_ISDIR(st.st_mode))
      bind_ro(*p);
  }
  for (size_t i = 0; masked_paths[i]; i++) {
    const char *p = masked_paths[i];
    struct stat st;
    char watched[64];
    if (lstat(p, &st) < 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "size=0,mode=555");
      continue;
    }
    /* an empty file of its own that the supervisor watches (fanotify):
     * opening a masked file is recorded; /dev/null where there is none.
     * The supervisor made them on a tmpfs of its own over the root's /dev
     * (never files of the image or of a checkpoint), covered by the real
     * /dev once they are bound. */
    snprintf(watched, sizeof watched, "/dev/dsec-mask-%zu", i);
    if (mount(watched, p, NULL, MS_BIND, NULL) == 0)
      mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            NULL);
    else
      mount("/dev/null", p, NULL, MS_BIND, NULL);
  }
}

static int mkdirs(const char *path, mode_t mode)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  return dsec_mkdir_p(AT_FDCWD, path, mode, &e);
}

/* Device nodes are the host's, bound in: a user namespace cannot mknod. */
static const char *const dev_nodes[] = { "null", "zero", "full", "random",
                                         "urandom", "tty" };

struct dev_trees {
  int fd[ARRAY_SIZE(dev_nodes)];
};

/* Before pivot_root: detached copies of the host's device nodes. */
static void open_dev_trees(struct dev_trees *d, int sock)
{
  for (size_t i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
    char host[64];
    snprintf(host, sizeof host, "/dev/%s", dev_nodes[i]);
    d->fd[i] = (int) syscall(SYS_open_tree, AT_FDCWD, host,
                             OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (d->fd[i] < 0)
      die_init(sock, "cannot open %s", host);
  }
}

/* After pivot_root: /dev, /dev/pts, /dev/shm. */
static void setup_dev(struct dev_trees *d, int sock)
{
  mkdirs("/dev", 0755);
  if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC,
            "mode=755,size=65536") < 0)
    die_init(sock, "cannot mount /dev");
  for (size_t i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
    char path[64];
    int fd;
    snprintf(path, sizeof path, "/dev/%s", dev_nodes[i]);
    fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd >= 0)
      close(fd);
    if (attach(d->fd[i], path) < 0)
      die_init(sock, "cannot bind %s", path);
  }
  mkdir("/dev/pts", 0755);
  if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
            "newinstance,ptmxmode=0666,mode=620") == 0 &&
      symlink("pts/ptmx", "/dev/ptmx") < 0)
    die_init(sock, "cannot create /dev/ptmx");
  mkdir("/dev/shm", 01777);
  if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
            "mode=1777,size=67108864") < 0)
    die_init(sock, "cannot mount /dev/shm");
  {
    static const char *const links[][2] = {
      { "/proc/self/fd", "/dev/fd" },     { "/proc/self/fd/0", "/dev/stdin" },
      { "/proc/self/fd/1", "/dev/stdout" }, { "/proc/self/fd/2", "/dev/stderr" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(links); i++)
      if (symlink(links[i][0], links[i][1]) < 0)
        die_init(sock, "cannot populate /dev");
  }
  mount(NULL, "/dev", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                              MS_NOEXEC, NULL);
}

static void loopback_up(void)
{
  struct ifreq ifr = { 0 };
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return;
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  close(s);
}

/* protect: readable, unchangeable (a read-only bind, recursive);
 * hide: covered by an empty read-only tmpfs (a directory) or an empty
 * read-only file.  Both run inside the sandbox's root. */
static void protect_and_hide(json_t *spec, int sock)
{
  json_t *v;
  size_t i;

  json_array_foreach(json_object_get(spec, "protect"), i, v)
  {
    const char *p = json_string_value(v);
    struct stat st;
    if (lstat(p, &st) < 0)
      die_init_status(sock, DSEC_EXIT_INPUT, "protect: %s does not exist in "
                                             "the sandbox", p);
    /* a symbolic link on the way could be pointed elsewhere later (it is
     * not the protected tree): the path must be the real one */
    {
      _cleanup_free_ char *a = xstrdup(p);
      for (char *slash = a; slash;) {
        struct stat ls;
        slash = strchr(slash + 1, '/');
        if (slash)
          *slash = '\0';
        if (lstat(a, &ls) == 0 && S_ISLNK(ls.st_mode)) {
          errno = 0; /* no failed call to report */
          die_init_status(sock, DSEC_EXIT_INPUT,
                          "protect: %s runs through the symbolic link %s: "
                          "protect the path it leads to", p, a);
        }
        if (slash)
          *slash = '/';
      }
    }
    /* Every directory above a protected path becomes a mount point (bound
     * onto itself, still writable): the kernel refuses to rename or remove
     * a mount point, so a parent cannot be moved away and replaced by a
     * look-alike (rename, exchange), and links out of it cross mounts. */
    {
      _cleanup_free_ char *a = xstrdup(p);
      for (char *slash = strchr(a + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (mount(a, a, NULL, MS_BIND | MS_REC, NULL) < 0)
          die_init(sock, "cannot pin %s (a parent of %s)", a, p);
        *slash = '/';
      }
    }
    if (bind_ro(p) < 0)
      die_init(sock, "cannot protect %s", p);
  }
  json_array_foreach(json_object_get(spec, "hide"), i, v)
  {
    const char *p = json_string_value(v);
    struct stat st;
    if (lstat(p, &st) < 0)
      continue; /* nothing there to hide */
    if (S_ISDIR(st.st_mode)) {
      if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "size=0,mode=000") < 0)
        die_init(sock, "cannot hide %s", p);
    } else {
      /* an empty, unreadable, unwritable file in its place */
      int fd = open("/dev/shm/.dsec-hidden", O_CREAT | O_RDONLY | O_CLOEXEC,
                    0000);
      if (fd >= 0)
        close(fd);
      if (mount("/dev/shm/.dsec-hidden", p, NULL, MS_BIND, NULL) < 0 ||
          mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                                 MS_NODEV | MS_NOEXEC, NULL) < 0)
        die_init(sock, "cannot hide %s", p);
      unlink("/dev/shm/.dsec-hidden");
    }
  }
}

/* init's own setup, in the new namespaces, starting in the sandbox's root
 * (stage1 entered it through a descriptor, so no host path has to be
 * traversable by the sandbox's unprivileged host uid). */
static void init_setup(struct init_ctx *c, json_t *spec)
{
  const char *workdir = json_string_value(json_object_get(spec, "workdir"));
  struct dev_trees dev;
  int t;

  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    die_init(c->sock, "cannot make mounts private");
  /* the mounts we inherited are locked to this namespace; pivot_root needs
   * a root mount of our own: a recursive copy of the root, attached on
   * itself */
  t = (int) syscall(SYS_open_tree, AT_FDCWD, ".",
                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (t < 0 || syscall(SYS_move_mount, t, "", AT_FDCWD, ".",
                       MOVE_MOUNT_F_EMPTY_PATH) < 0 || fchdir(t) < 0)
    die_init(c->sock, "cannot bind the root file system");
  close(t);
  open_dev_trees(&dev, c->sock);
  /* proc and sysfs while the host's are still visible (the kernel allows
   * a new one only then), at paths resolved inside the root */
  mkdirat(AT_FDCWD, "proc", 0555);
  mkdirat(AT_FDCWD, "sys", 0555);
  if (mount_in_root("proc", "proc", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                        MOUNT_ATTR_NOEXEC) < 0)
    die_init(c->sock, "cannot mount /proc");
  if (mount_in_root("sysfs", "sys", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                        MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC) < 0)
    die_init(c->sock, "cannot mount /sys");
  if (syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 ||
      chdir("/") < 0)
    die_init(c->sock, "cannot pivot_root");

  /* from here on every path is the sandbox's; the masks first, while the
   * supervisor's mask files are still at /dev */
  mask_paths();
  setup_dev(&dev, c->sock);
  mkdirs("/tmp", 01777);
  if (workdir && strcmp(workdir, "/") != 0)
    mkdirs(workdir, 0755);
  protect_and_hide(spec, c->sock);

  if (sethostname("dsec", 4) < 0)
    die_init(c->sock, "cannot set the host name");
  loopback_up();
  if (c->fncall) {
    /* calls share nothing: the root is read-only, each call gets its own
     * /tmp and work dir */
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                                 MS_NODEV, NULL) < 0)
      die_init(c->sock, "cannot make the root read-only");
  }
}

/* The seccomp filter, with a user-notification listener handed to the
 * supervisor over fd 3 (init's control socket, still open here): the
 * supervisor answers denied calls with their error and records them.
 * Without a listener (the kernel refuses one), denials fail silently. */
static int install_filter(struct init_ctx *c, uint64_t xid)
{
  int lfd = dsec_seccomp_install(&c->filter, true);
  if (lfd >= 0) {
    json_t *m = json_pack("{s:s, s:I}", "op", "listener", "xid",
                          (json_int_t) xid);
    int r = msg_send(3, m, &lfd, 1);
    json_decref(m);
    close(lfd);
    close(3);
    return r;
  }
  close(3);
  return dsec_seccomp_install(&c->filter_plain, false);
}

static void drop_privileges(struct init_ctx *c, uid_t uid, gid_t gid,
                            uint64_t xid)
{
  struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct d[2] = { { 0 } };

  for (int cap = 0; cap <= c->last_cap; cap++)
    prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  /* rootless, setgroups is denied in the user namespace (EPERM) and the
   * supplementary groups are the host user's, unmapped */
  if ((setgroups(0, NULL) < 0 && errno != EPERM) ||
      setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
    dprintf(STDERR_FILENO, "dsec: cannot switch to user %u:%u: %s\n", uid,
            gid, strerror(errno));
    _exit(125);
  }
  if (syscall(SYS_capset, &h, d) < 0 ||
      prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
      install_filter(c, xid) < 0) {
    dprintf(STDERR_FILENO, "dsec: cannot drop privileges: %s\n",
            strerror(errno));
    _exit(125);
  }
}

/* fncall calls and exclusive execs get mount, pid and IPC namespaces of
 * their own; the process that returns from here is PID 1 of the new pid
 * namespace, so every process it leaves behind dies with it, and its
 * parent stays behind to relay its status.
 *
 * An fncall call sees only its own processes (/proc with subset=pid) and
 * gets a clean /tmp and working directory.  An exclusive exec joined the
 * sandbox's namespaces from outside its pid namespace (see xexec_spawn):
 * its pid namespace is a sibling of the sandbox's, so no process of an
 * earlier exec can see it, signal it, trace it or open its /proc files;
 * it gets a /proc of its own (masked like the sandbox's) and its own
 * /dev/shm, and shares the sandbox's files.  Its parent is outside the
 * sandbox: the exec dies with it (*life is what tells, see below). */
static void call_enter(struct init_ctx *c, const char *workdir, int *life)
{
  pid_t pid;
  int status, lp[2] = { -1, -1 };

  if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC) < 0) {
    dprintf(STDERR_FILENO, "dsec: cannot isolate the call: %s\n",
            strerror(errno));
    _exit(125);
  }
  if (c->exclusive && pipe2(lp, O_CLOEXEC) < 0)
    _exit(125);
  pid = fork();
  if (pid < 0)
    _exit(125);
  if (pid > 0) {
    /* relay the call's status, signal included */
    if (lp[0] >= 0)
      close(lp[0]);
    while (waitpid(pid, &status, 0) < 0)
      if (errno != EINTR)
        _exit(125);
    if (WIFSIGNALED(status)) {
      signal(WTERMSIG(status), SIG_DFL);
      prctl(PR_SET_DUMPABLE, 0);
      kill(getpid(), WTERMSIG(status));
      _exit(128 + WTERMSIG(status));
    }
    _exit(WEXITSTATUS(status));
  }
  if (lp[1] >= 0)
    close(lp[1]);
  *life = lp[0];
  if (c->exclusive) {
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) < 0)
      goto fail;
    mask_paths();
  } else if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   "subset=pid") < 0)
    /* the call's own /proc shows its processes and nothing of the
     * kernel's (subset=pid: no sysctls, no kpage* or kcore files) */
    goto fail;
  /* calls share no SysV IPC (own IPC namespace) or POSIX shared memory */
  if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
            "mode=1777,size=67108864") < 0)
    goto fail;
  if (c->exclusive)
    return;
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, c->tmp_size) < 0 ||
      (strcmp(workdir, "/") != 0 && strcmp(workdir, "/tmp") != 0 &&
       mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, c->tmp_size) < 0))
    goto fail;
  return;
fail:
  dprintf(STDERR_FILENO, "dsec: cannot prepare the call: %s\n",
          strerror(errno));
  _exit(125);
}

/* fncall and exclusive execs: the call's Landlock domain, made from the call's own mounts,
 * since a domain that handles file system rights cannot mount.  A rule
 * holds the root of the mount it was made on, and Landlock skips the
 * directories that mounts cover: the call's new /proc, /tmp and working
 * directory need rules of their own, and a protected path they cover is
 * not there to protect. */
static void fncall_landlock(struct init_ctx *c)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  struct dsec_landlock ll;

  if (!c->ll_abi)
    return;
  if (dsec_landlock_plan(&ll, c->ll_abi, c->protect, &e) < 0 ||
      dsec_landlock_apply(&ll, &e) < 0) {
    dprintf(STDERR_FILENO, "dsec: cannot apply the Landlock rules: %s\n",
            e->msg);
    _exit(125);
  }
  dsec_landlock_clear(&ll);
}

static char **json_to_strv(json_t *a)
{
  size_t n = json_array_size(a);
  char **v = xzalloc(sizeof *v * (n + 1));
  for (size_t i = 0; i < n; i++)
    v[i] = (char *) json_string_value(json_array_get(a, i));
  return v;
}

static void init_exec_child(struct init_ctx *c, json_t *req, int *fds)
{
  const char *cwd = json_string_value(json_object_get(req, "cwd"));
  char **argv = json_to_strv(json_object_get(req, "argv"));
  char **envp = json_to_strv(json_object_get(req, "env"));
  uid_t uid = (uid_t) json_integer_value(json_object_get(req, "uid"));
  gid_t gid = (gid_t) json_integer_value(json_object_get(req, "gid"));
  int life = -1;
  sigset_t all;

  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  for (int s = 1; s < NSIG; s++)
    signal(s, SIG_DFL);
  setsid();
  if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0)
    _exit(125);
  /* everything inherited goes, but fd 3 (init's socket) until the filter's
   * listener is handed over, just before execve */
  syscall(SYS_close_range, 4U, ~0U, 0U);
  if (c->fncall || c->exclusive) {
    call_enter(c, cwd ? cwd : "/", &life);
    fncall_landlock(c);
  }
  if (cwd && chdir(cwd) < 0) {
    dprintf(2, "dsec: cannot enter %s: %s\n", cwd, strerror(errno));
    _exit(126);
  }
  drop_privileges(c, uid, gid,
                  (uint64_t) json_integer_value(json_object_get(req, "xid")));
  if (life >= 0) {
    /* the parent-death signal goes with every change of credentials:
     * set now, then check the relay has not died already */
    struct pollfd pf = { life, POLLIN, 0 };
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || poll(&pf, 1, 0) != 0)
      _exit(125);
    close(life);
  }
  environ = envp;
  execvp(argv[0], argv);
  dprintf(2, "dsec: %s: %s\n", argv[0], strerror(errno));
  _exit(errno == ENOENT || errno == ENOTDIR ? 127 : 126);
}

struct init_job {
  uint64_t xid;
  pid_t pid;
};

_Noreturn static void init_loop(struct init_ctx *c)
{
  struct init_job *jobs = NULL;
  size_t njobs = 0;
  char *buf = xmalloc(MSG_MAX);
  sigset_t mask;
  int sfd;
  struct pollfd pf[2];

  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  pf[0] = (struct pollfd){ c->sock, POLLIN, 0 };
  pf[1] = (struct pollfd){ sfd, POLLIN, 0 };

  for (;;) {
    if (poll(pf, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      _exit(1);
    }
    if (pf[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0)
        ;
      for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
          break;
        for (size_t i = 0; i < njobs; i++)
          if (jobs[i].pid == pid) {
            json_t *m = json_pack("{s:s, s:I, s:i}", "op", "exited", "xid",
                                  (json_int_t) jobs[i].xid, "status", status);
            msg_send(c->sock, m, NULL, 0);
            json_decref(m);
            jobs[i] = jobs[--njobs];
            break;
          }
        /* anything else is an orphan reparented to us: reaped */
      }
    }
    if (pf[0].revents) {
      int fds[3], nfds;
      json_t *req = msg_recv(c->sock, buf, MSG_MAX, fds, &nfds);
      const char *op;
      if (!req)
        _exit(0); /* the supervisor is gone: so are we, and the sandbox */
      op = json_string_value(json_object_get(req, "op"));
      if (op && strcmp(op, "exec") == 0 && nfds == 3) {
        uint64_t xid = (uint64_t) json_integer_value(json_object_get(req, "xid"));
        pid_t pid = fork();
        if (pid == 0)
          init_exec_child(c, req, fds);
        if (pid < 0) {
          json_t *m = json_pack("{s:s, s:I, s:s, s:i}", "op", "error", "xid",
                                (json_int_t) xid, "msg", "fork failed",
                                "errno", errno);
          msg_send(c->sock, m, NULL, 0);
          json_decref(m);
        } else {
          jobs = xrealloc(jobs, sizeof *jobs * (njobs + 1));
          jobs[njobs++] = (struct init_job){ xid, pid };
        }
      } else if (op && strcmp(op, "kill") == 0) {
        uint64_t xid = (uint64_t) json_integer_value(json_object_get(req, "xid"));
        int sig = (int) json_integer_value(json_object_get(req, "signal"));
        if (json_object_get(req, "xid")) {
          for (size_t i = 0; i < njobs; i++)
            if (jobs[i].xid == xid)
              kill(-jobs[i].pid, sig);
        } else
          kill(-1, sig); /* every process of the sandbox but init */
      }
      for (int i = 0; i < nfds; i++)
        close(fds[i]);
      json_decref(req);
    }
  }
}

struct stage1_args {
  int sock;      /* init's end of the control socket */
  int rootfd;    /* the root file system, sent with "go" */
  json_t *spec;
  bool fncall;
  uid_t owner;   /* the host id that creates (owns) the user namespace;
                  * 0: the supervisor made it (rootless) */
};

/* Landlock, once every mount is made: the container's init restricts
 * itself, so every process of the sandbox is in the domain; fncall's
 * calls mount their own /proc, /tmp and working directory first, so each
 * makes its domain (fncall_landlock), and init only checks the plan.
 * What is enforced, or why nothing, goes into the ready message. */
static void init_landlock(struct init_ctx *c, json_t *spec, json_t *ready)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  _cleanup_free_ char *why = NULL;
  struct dsec_landlock ll;
  json_t *rec;

  c->ll_abi = dsec_landlock_abi(&why);
  if (!c->ll_abi) {
    json_object_set_new(ready, "landlock_unavailable", json_string(why));
    return;
  }
  if (dsec_landlock_plan(&ll, c->ll_abi, json_object_get(spec, "protect"),
                         &err) < 0)
    die_init(c->sock, "%s", err->msg);
  if (!c->fncall && dsec_landlock_apply(&ll, &err) < 0)
    die_init(c->sock, "%s", err->msg);
  rec = dsec_landlock_to_json(&ll);
  json_object_set_new(rec, "applied", json_string(c->fncall ? "call" : "init"));
  json_object_set_new(ready, "landlock", rec);
  dsec_landlock_clear(&ll);
  if (c->fncall)
    c->protect = json_incref(json_object_get(spec, "protect"));
}

/* The seccomp filter's flags for a spec: with a read-write mount, no
 * set-id bits anywhere (they would land on the host, the mount's
 * owner's). */
static unsigned seccomp_flags(json_t *spec)
{
  json_t *m;
  size_t i;
  json_array_foreach(json_object_get(spec, "mounts"), i, m)
    if (!json_is_true(json_object_get(m, "ro")))
      return DSEC_SECCOMP_NO_SETID;
  return 0;
}

/* The highest capability this kernel knows. */
static int last_cap(void)
{
  int last = CAP_LAST_CAP;
  FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
  if (f) {
    if (fscanf(f, "%d", &last) != 1)
      last = CAP_LAST_CAP;
    fclose(f);
  }
  return last;
}

_Noreturn static void run_init(struct stage1_args *a)
{
  struct init_ctx c = { .sock = a->sock, .fncall = a->fncall };
  _cleanup_error_ struct dsec_error *err = NULL;
  json_t *ready;

  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_NAME, "dsec-init");
  set_cmdline("dsec-init");
  /* keep only the control socket (fd 3), the root (fd 4) and /dev/null
   * on 0-2 */
  {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0 || dup2(a->sock, 3) < 0 || dup2(null, 0) < 0 ||
        dup2(null, 1) < 0 || dup2(null, 2) < 0)
      _exit(1);
    c.sock = 3;
    syscall(SYS_close_range, 4U, ~0U, 0U);
    fcntl(3, F_SETFD, FD_CLOEXEC);
  }
  {
    /* no core dumps: a crashing program's memory stays in the sandbox
     * (and no disk fills with them); the hard limit too, for good */
    struct rlimit none = { 0, 0 };
    if (setrlimit(RLIMIT_CORE, &none) < 0)
      die_init(c.sock, "cannot set RLIMIT_CORE");
  }
  c.last_cap = last_cap();
  c.tmp_size = xstrdup("mode=1777,size=268435456");
  if (dsec_seccomp_build(&c.filter, seccomp_flags(a->spec) | DSEC_SECCOMP_NOTIFY,
                         &err) < 0 ||
      dsec_seccomp_build(&c.filter_plain, seccomp_flags(a->spec), &err) < 0)
    die_init(c.sock, "%s", err->msg);
  init_setup(&c, a->spec);
  ready = json_pack("{s:s}", "op", "ready");
  init_landlock(&c, a->spec, ready);
  /* nothing in the sandbox may read init's memory or attach to it */
  prctl(PR_SET_DUMPABLE, 0);
  {
    /* proxy mode: the proxy's port on the sandbox's own loopback, served by
     * the supervisor from outside through this socket */
    const char *mode = json_string_value(json_object_get(
      json_object_get(a->spec, "network"), "mode"));
    int lfd = -1;
    if (mode && strcmp(mode, "proxy") == 0) {
      struct sockaddr_in sa = { .sin_family = AF_INET,
                                .sin_port = htons(DSEC_PROXY_PORT),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
      lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (lfd < 0 || bind(lfd, (struct sockaddr *) &sa, sizeof sa) < 0 ||
          listen(lfd, 128) < 0)
        die_init(c.sock, "cannot set up the proxy's port");
    }
    msg_send(c.sock, ready, lfd >= 0 ? &lfd : NULL, lfd >= 0 ? 1 : 0);
    if (lfd >= 0)
      close(lfd);
  }
  json_decref(ready);
  json_decref(a->spec);
  init_loop(&c);
}

/* stage1: in the new user namespace; waits for the supervisor's mounts,
 * then creates the remaining namespaces and init. */
_Noreturn static void stage1(struct stage1_args *a)
{
  pid_t pid;
  int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
              CLONE_NEWUTS | CLONE_NEWCGROUP;

  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (a->owner) {
    /* The user namespace is made as the sandbox's own host id, never as
     * root: per-user kernel limits (inotify instances and watches, POSIX
     * message queues, pending signals, user namespaces) are counted up
     * the chain of namespace owners, so each sandbox gets its own and
     * none can use up host root's.  The supervisor writes its maps. */
    json_t *m = json_pack("{s:s}", "op", "userns");
    pid_t parent = getppid();
    int r = setgroups(0, NULL) == 0 && setresgid(a->owner, a->owner, a->owner) == 0 &&
            setresuid(a->owner, a->owner, a->owner) == 0 &&
            prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() == parent &&
            unshare(CLONE_NEWUSER) == 0
              ? msg_send(a->sock, m, NULL, 0)
              : -1;
    json_decref(m);
    if (r < 0)
      die_init(a->sock, "cannot create the user namespace");
  }
  {
    char buf[4096];
    int fds[3], nfds;
    json_t *go = msg_recv(a->sock, buf, sizeof buf, fds, &nfds);
    const char *op = json_string_value(json_object_get(go, "op"));
    if (!go || !op || strcmp(op, "go") != 0 || nfds != 1)
      _exit(1);
    json_decref(go);
    a->rootfd = fds[0];
  }
  /* we came in as an id this namespace does not map: become its root, so
   * what we create is owned by a mapped user */
  /* (rootless, setgroups is denied in our user namespace: EPERM is fine) */
  if (setresgid(0, 0, 0) < 0 || (setgroups(0, NULL) < 0 && errno != EPERM) ||
      setresuid(0, 0, 0) < 0)
    die_init(a->sock, "cannot become root in the user namespace");
  /* enter the root while we share the supervisor's mounts: unshare below
   * carries the working directory over to the copy in the new namespace */
  if (fchdir(a->rootfd) < 0)
    die_init(a->sock, "cannot enter the root file system");
  close(a->rootfd);
  a->rootfd = -1;
  if (unshare(flags) < 0)
    die_init(a->sock, "cannot create namespaces");
  /* a time namespace where the kernel has them */
  unshare(CLONE_NEWTIME);
  pid = (pid_t) syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, 0);
  if (pid < 0)
    die_init(a->sock, "cannot start init");
  if (pid == 0)
    run_init(a);
  _exit(0);
}

/* ---------------------------------------------------------- supervisor */

enum watch_kind {
  W_LISTEN,
  W_SIGNAL,
  W_INIT,
  W_CLIENT,
  W_OUT,
  W_ERR,
  W_IN,
  W_NOTIFY,
  W_PROXY,
  W_FANOTIFY,
  W_XSOCK,
};

struct watch {
  enum watch_kind kind;
  void *p;
  bool dead; /* its object is gone: events still queued for it are dropped */
};

struct capture {
  char *data;
  size_t len;
  uint64_t total;
  int fd;
  struct watch w;
  struct job *job;
  const char *name; /* "stdout" or "stderr" */
};

/* A seccomp listener: the denials of one exec's process tree. */
struct listener {
  int fd;
  struct watch w;
  json_t *seq; /* the exec's seq (owned), or NULL */
};

struct client;

struct job {
  uint64_t xid;
  struct client *cl;
  json_t *req;      /* the request as recorded in the trajectory */
  json_t *seq;      /* borrowed from req, or NULL */
  struct capture out, err;
  uint64_t cap;
  int in_fd;
  struct watch w_in;
  char *stdin_data;
  size_t stdin_len, stdin_off;
  double start, deadline;
  int64_t oom_before;
  int64_t pids_before;
  bool stream; /* send output as it comes (run --attach) */
  pid_t xpid;  /* an exclusive exec: its relay, our child (else 0) */
  int xsock;   /* ... and the socket its seccomp listener comes on */
  struct watch w_xsock;
  bool timed_out, exited, kill_sent;
  int status;
  char *error;
};

struct client {
  struct dsec_ctl_client c;
  struct watch w;
  struct job *job;
};

struct sup {
  const char *id;
  char *dir, *run;
  json_t *spec;
  json_t *state;
  int epfd, sfd, lsock, isock, events_fd, run_fd;
  pid_t init_pid, stage1_pid;
  struct dsec_cgroup *cg;
  struct client **clients;
  size_t nclients;
  struct job **jobs;
  size_t njobs;
  uint64_t next_xid;
  json_t *base_env;
  uid_t uid;
  gid_t gid;
  const char *workdir;
  double start_ms, last_activity_ms;
  json_int_t ttl_s, idle_s;
  bool fncall;
  bool rootless;        /* not root: a user namespace of our own, no idmaps */
  bool suspended;       /* frozen: execs wait for resume */
  int proxy_lfd;        /* proxy mode: the sandbox's 127.0.0.1:3128 */
  int fan_fd;           /* fanotify on the mask files, or -1 */
  ino_t *mask_ino;      /* inode of each masked_paths entry's file */
  char *audit_off;      /* why opens of masked files are not recorded */
  json_t *landlock;     /* what Landlock enforces (init's report), or NULL */
  struct init_ctx *xctx; /* what exclusive execs run with (made once) */
  char *landlock_off;   /* why Landlock is not used at all, or NULL */
  struct watch w_fan;
  struct dsec_proxy *proxy;
  struct watch w_proxy;
  struct dsec_net_events net; /* network events come from proxy threads */
  struct dsec_audit *audit;   /* events.jsonl, within its budget */
  uid_t base;           /* the sandbox root's host id (0 rootless) */
  char *upperfs;        /* the disk-limited file system, or NULL */
  struct listener **listeners;
  size_t nlisteners;
  /* objects closed during an event batch, freed after it (the batch may
   * still hold events that point at them) */
  void **graves;
  size_t ngraves;
  struct dsec_traj traj;
  struct seccomp_notif *notif;
  struct seccomp_notif_resp *notif_resp;
  double denial_window;   /* start of the current second */
  int denials_in_window;
  uint64_t denials_suppressed;
  double process_window;
  int processes_in_window;
  uint64_t processes_suppressed;
  bool disk_full_seen;
  const char *end_state;
  char *end_cause;
  char *msgbuf;
  struct watch w_listen, w_signal, w_init;
};

static void sup_event(struct sup *s, json_t *ev)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  dsec_audit_append(s->audit, ev, &e);
  json_decref(ev);
}

/* The first sighting of key of kind: past the rate limits, with a
 * reserve of the budget (audit.h). */
static void sup_event_first(struct sup *s, json_t *ev, enum dsec_audit_kind kind,
                            const void *key, size_t len)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  dsec_audit_append_first(s->audit, ev, kind, key, len, &e);
  json_decref(ev);
}

static void sup_write_state(struct sup *s)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  if (s->audit)
    json_object_set_new(s->state, "audit", dsec_audit_status(s->audit));
  if (dsec_sandbox_state_write(s->id, s->state, &e) < 0)
    dsec_warn("cannot write state: %s", e->msg);
}

static int ep_add(struct sup *s, int fd, uint32_t events, struct watch *w)
{
  struct epoll_event ev = { .events = events, .data.ptr = w };
  return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Replaces invalid UTF-8 with U+FFFD so output always fits in JSON. */
/* An answer goes whole: the socket blocks for it (SO_SNDTIMEO bounds a
 * client that stops reading to 10 s), then is non-blocking again for
 * reading requests. */
static void client_write(struct client *cl, json_t *rec)
{
  if (cl)
    dsec_ctl_write(cl->c.fd, rec);
}

static void bury(struct sup *s, void *p)
{
  s->graves = xrealloc(s->graves, sizeof *s->graves * (s->ngraves + 1));
  s->graves[s->ngraves++] = p;
}

static void client_close(struct sup *s, struct client *cl)
{
  for (size_t i = 0; i < s->nclients; i++)
    if (s->clients[i] == cl) {
      s->clients[i] = s->clients[--s->nclients];
      break;
    }
  if (cl->job)
    cl->job->cl = NULL; /* the job finishes and is recorded all the same */
  if (cl->c.fd >= 0)
    close(cl->c.fd);
  cl->c.fd = -1;
  cl->w.dead = true;
  free(cl->c.in);
  cl->c.in = NULL;
  bury(s, cl);
}

/* Streams a chunk of output to the client, base64 so bytes stay bytes. */
static void stream_chunk(struct capture *c, const char *buf, size_t n)
{
  struct job *j = c->job;
  json_t *m;

  if (!j || !j->stream || !j->cl)
    return;
  m = dsec_exec_output(c->name, buf, n);
  client_write(j->cl, m);
  json_decref(m);
}

static void capture_read(struct capture *c, uint64_t cap)
{
  char buf[65536];
  if (c->fd < 0)
    return;
  for (;;) {
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0 || errno != EAGAIN) {
        close(c->fd);
        c->fd = -1;
      }
      return;
    }
    if (c->len < cap) {
      size_t keep = (size_t) n;
      if (c->len + keep > cap)
        keep = (size_t) (cap - c->len);
      c->data = xrealloc(c->data, c->len + keep + 1);
      memcpy(c->data + c->len, buf, keep);
      c->len += keep;
    }
    /* a streaming client gets what the cap keeps, no more (the result
     * counts the rest) */
    if (c->total < cap)
      stream_chunk(c, buf, (uint64_t) n < cap - c->total ? (size_t) n
                                                         : (size_t) (cap - c->total));
    c->total += (uint64_t) n;
  }
}

static double now_ms(void) { return dsec_now_ms(); }

static void job_free(struct sup *s, struct job *j)
{
  if (j->out.fd >= 0)
    close(j->out.fd);
  if (j->err.fd >= 0)
    close(j->err.fd);
  if (j->in_fd >= 0)
    close(j->in_fd);
  if (j->xsock >= 0)
    close(j->xsock);
  j->out.fd = j->err.fd = j->in_fd = j->xsock = -1;
  j->out.w.dead = j->err.w.dead = j->w_in.dead = j->w_xsock.dead = true;
  free(j->out.data);
  free(j->err.data);
  free(j->stdin_data);
  free(j->error);
  json_decref(j->req);
  j->out.data = j->err.data = j->stdin_data = j->error = NULL;
  j->req = NULL;
  bury(s, j);
}

static void client_next(struct sup *s, struct client *cl);
static bool denial_admit(struct sup *s);
static int open_in_root(int rfd, const char *path, bool dir, uid_t base,
                        struct dsec_error **err);

#define DENIALS_PER_SECOND 50

/* Builds the result, records it (trajectory first, fsync'd), answers. */
static void job_finish(struct sup *s, struct job *j)
{
  json_t *res;
  int code, sig = 0;
  int64_t oom_after;
  bool oom = false;

  capture_read(&j->out, j->cap);
  capture_read(&j->err, j->cap);
  if (j->error)
    code = DSEC_EXIT_INTERNAL;
  else if (j->timed_out)
    code = DSEC_EXIT_TIMEOUT, sig = SIGKILL;
  else if (WIFSIGNALED(j->status))
    sig = WTERMSIG(j->status), code = 128 + sig;
  else
    code = WEXITSTATUS(j->status);
  oom_after = s->cg ? dsec_cgroup_oom_kills(s->cg) : -1;
  if (j->oom_before >= 0 && oom_after > j->oom_before && sig == SIGKILL)
    oom = true;

  res = dsec_exec_result(s->id, j->seq, code, sig, j->out.data, j->out.len,
                         j->out.total, j->err.data, j->err.len, j->err.total,
                         j->timed_out, oom, now_ms() - j->start);
  if (j->error)
    json_object_set_new(res, "error", json_string(j->error));
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    if (dsec_traj_append(&s->traj, j->seq, j->req, res, &e) < 0) {
      /* the result cannot be made durable: say so instead of lying */
      json_object_set_new(res, "exit_code", json_integer(DSEC_EXIT_INTERNAL));
      json_object_set_new(res, "error",
                          json_string("cannot record the result in the "
                                      "trajectory"));
    }
  }
  dsec_exec_events(s->audit, j->req, res,
                   j->out.total - j->out.len + j->err.total - j->err.len);
  if (j->pids_before >= 0) {
    int64_t hits = dsec_cgroup_pids_max_hits(s->cg);
    if (hits > j->pids_before)
      sup_event(s, json_pack("{s:s, s:s, s:O, s:I}", "type", "limit", "limit",
                             "pids", "seq", j->seq ? j->seq : json_null(),
                             "refused_forks",
                             (json_int_t) (hits - j->pids_before)));
  }

  if (s->upperfs) {
    struct statfs fs;
    /* the writable layer is (nearly) full: the agent hit its disk limit */
    if (statfs(s->upperfs, &fs) == 0 && fs.f_bavail * 100 < fs.f_blocks) {
      if (!s->disk_full_seen)
        sup_event(s, json_pack("{s:s, s:s, s:O}", "type", "limit", "limit",
                               "disk", "seq", j->seq ? j->seq : json_null()));
      s->disk_full_seen = true;
    } else
      s->disk_full_seen = false;
  }
  client_write(j->cl, res);
  json_decref(res);
  for (size_t i = 0; i < s->njobs; i++)
    if (s->jobs[i] == j) {
      s->jobs[i] = s->jobs[--s->njobs];
      break;
    }
  s->last_activity_ms = now_ms();
  {
    struct client *cl = j->cl;
    if (cl)
      cl->job = NULL;
    job_free(s, j);
    if (cl)
      client_next(s, cl);
  }
}

static void reply_error(struct client *cl, const char *msg, int status)
{
  if (cl)
    dsec_ctl_reply_error(cl->c.fd, msg, status);
}

/* ---- the trajectory: replay by seq */

/* A request with a seq: replayed from the trajectory when recorded (1),
 * refused when it conflicts (-1), run when it is the next one (0). */
static int traj_check(struct sup *s, struct client *cl, json_t *req)
{
  json_int_t *running = xzalloc(sizeof *running * (s->njobs + 1));
  size_t n = 0;
  const char *conflict;
  json_t *out = NULL;
  int r;

  for (size_t i = 0; i < s->njobs; i++)
    if (s->jobs[i]->seq)
      running[n++] = json_integer_value(s->jobs[i]->seq);
  r = dsec_traj_check(&s->traj, req, running, n, &out, &conflict);
  free(running);
  if (r == 0)
    return 0;
  if (r > 0)
    json_object_set_new(out, "id", json_string(s->id));
  client_write(cl, out);
  json_decref(out);
  if (conflict)
    sup_event(s, json_pack("{s:s, s:O, s:s}", "type", "replay_conflict",
                           "seq", json_object_get(req, "seq"), "field",
                           conflict));
  else if (r > 0) {
    sup_event(s, json_pack("{s:s, s:O}", "type", "replay", "seq",
                           json_object_get(req, "seq")));
    s->last_activity_ms = now_ms();
  }
  return r;
}

/* ---- exclusive execs */

static void listener_add(struct sup *s, int fd, uint64_t xid);
static void job_kill(struct sup *s, struct job *j, int sig);

/* What exclusive execs run with, made once: the filters and rules init
 * made for the others. */
static struct init_ctx *xexec_ctx(struct sup *s, struct dsec_error **err)
{
  struct init_ctx *c;
  unsigned flags = seccomp_flags(s->spec);

  if (s->xctx)
    return s->xctx;
  c = xzalloc(sizeof *c);
  c->sock = 3;
  c->exclusive = true;
  c->last_cap = last_cap();
  c->ll_abi = s->landlock_off ? 0 : dsec_landlock_abi(NULL);
  c->protect = json_object_get(s->spec, "protect");
  if (dsec_seccomp_build(&c->filter, flags | DSEC_SECCOMP_NOTIFY, err) < 0 ||
      dsec_seccomp_build(&c->filter_plain, flags, err) < 0) {
    dsec_bpf_clear(&c->filter);
    free(c);
    return NULL;
  }
  s->xctx = c;
  return c;
}

/* Starts an exclusive exec: a child of ours (in the sandbox's cgroup)
 * joins the sandbox's user, mount, network, UTS and cgroup namespaces
 * but not its pid namespace, and goes on as init's children do, with
 * call_enter's new pid, mount and IPC namespaces (see there).  Its
 * seccomp listener comes back on a socket of the job's. */
static int xexec_spawn(struct sup *s, struct job *j, json_t *msg, int fds[3],
                       struct dsec_error **err)
{
  struct init_ctx *c = xexec_ctx(s, err);
  _cleanup_close_ int pidfd = -1;
  int sp[2] = { -1, -1 }, go[2] = { -1, -1 };
  pid_t parent = getpid(), pid;

  if (!c)
    return -1;
  pidfd = (int) syscall(SYS_pidfd_open, s->init_pid, 0);
  if (pidfd < 0)
    return dsec_fail(err, errno, "cannot reach the sandbox's init");
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0 ||
      pipe2(go, O_CLOEXEC) < 0) {
    dsec_fail(err, errno, "cannot create the exec's channels");
    goto fail;
  }
  pid = fork();
  if (pid < 0) {
    dsec_fail(err, errno, "fork");
    goto fail;
  }
  if (pid == 0) {
    int hi[3];
    char g;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent || read(go[0], &g, 1) != 1)
      _exit(125);
    /* joined all at once: the user namespace's capabilities for the
     * others; then its root (the others keep their host ids) */
    if (setns(pidfd, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET |
                       CLONE_NEWUTS | CLONE_NEWCGROUP) < 0 ||
        setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 ||
        setresuid(0, 0, 0) < 0) {
      dprintf(fds[2], "dsec: cannot enter the sandbox: %s\n", strerror(errno));
      _exit(125);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(125);
    /* the listener's socket at 3, as init's is for init's children */
    for (int i = 0; i < 3; i++)
      hi[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
    if (hi[0] < 0 || hi[1] < 0 || hi[2] < 0 || dup2(sp[1], 3) < 0)
      _exit(125);
    init_exec_child(c, msg, hi);
    _exit(125);
  }
  close(sp[1]);
  close(go[0]);
  sp[1] = go[0] = -1;
  if (s->cg && dsec_cgroup_attach(s->cg, pid, err) < 0) {
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
      ;
    goto fail;
  }
  if (write(go[1], "g", 1) != 1) {
    dsec_fail(err, errno, "the exec's process is gone");
    goto fail;
  }
  close(go[1]);
  j->xpid = pid;
  j->xsock = sp[0];
  j->w_xsock = (struct watch){ W_XSOCK, j };
  ep_add(s, j->xsock, EPOLLIN, &j->w_xsock);
  return 0;
fail:
  for (int i = 0; i < 2; i++) {
    if (sp[i] >= 0)
      close(sp[i]);
    if (go[i] >= 0)
      close(go[i]);
  }
  return -1;
}

/* The listener of an exclusive exec, or its socket's end. */
static void xsock_message(struct sup *s, struct job *j)
{
  int fds[3], nfds;
  json_t *m = msg_recv(j->xsock, s->msgbuf, MSG_MAX, fds, &nfds);
  const char *op = json_string_value(json_object_get(m, "op"));

  if (!m) {
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, j->xsock, NULL);
    close(j->xsock);
    j->xsock = -1;
    j->w_xsock.dead = true;
  } else if (op && strcmp(op, "listener") == 0 && nfds == 1) {
    listener_add(s, fds[0], j->xid);
    nfds = 0;
  }
  for (int i = 0; i < nfds; i++)
    close(fds[i]);
  json_decref(m);
}

static void job_start(struct sup *s, struct client *cl, json_t *req)
{
  struct job *j = xzalloc(sizeof *j);
  int in[2] = { -1, -1 }, out[2] = { -1, -1 }, er[2] = { -1, -1 };
  json_t *msg;
  const char *workdir;
  double timeout;
  char *why = NULL;

  if (dsec_exec_request_check(req, &why) < 0) {
    reply_error(cl, why, DSEC_EXIT_INPUT);
    free(why);
    free(j);
    client_next(s, cl);
    return;
  }
  j->xid = ++s->next_xid;
  j->cl = cl;
  j->out.fd = j->err.fd = j->in_fd = j->xsock = -1;
  j->out.job = j->err.job = j;
  j->out.name = "stdout";
  j->err.name = "stderr";
  j->stream = json_is_true(json_object_get(req, "stream"));
  workdir = json_string_value(json_object_get(req, "workdir"));
  if (!workdir)
    workdir = s->workdir;
  timeout = json_number_value(json_object_get(req, "timeout_s"));
  /* what the trajectory records: the request as it will run */
  j->req = dsec_exec_request_record(req, s->workdir, &j->cap);
  j->seq = json_object_get(j->req, "seq");
  if (j->seq) {
    int r = traj_check(s, cl, j->req);
    if (r != 0) {
      json_decref(j->req);
      free(j);
      client_next(s, cl);
      return;
    }
  }
  j->start = now_ms();
  j->deadline = timeout > 0 ? j->start + timeout * 1000 : 0;
  j->oom_before = s->cg ? dsec_cgroup_oom_kills(s->cg) : -1;
  j->pids_before = s->cg && json_object_get(json_object_get(s->spec,
                                                            "resources"),
                                            "pids")
                     ? dsec_cgroup_pids_max_hits(s->cg)
                     : -1;
  cl->job = j;
  s->jobs = xrealloc(s->jobs, sizeof *s->jobs * (s->njobs + 1));
  s->jobs[s->njobs++] = j;
  s->last_activity_ms = j->start;

  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
      pipe2(er, O_CLOEXEC) < 0) {
    j->error = xasprintf("cannot create pipes: %s", strerror(errno));
    goto fail;
  }
  msg = json_pack("{s:s, s:I, s:O, s:o, s:s, s:i, s:i}", "op", "exec", "xid",
                  (json_int_t) j->xid, "argv", json_object_get(req, "cmd"),
                  "env", dsec_exec_env(s->base_env, json_object_get(req, "env")), "cwd",
                  workdir, "uid", (int) s->uid, "gid", (int) s->gid);
  {
    int fds[3] = { in[0], out[1], er[1] };
    _cleanup_error_ struct dsec_error *e = NULL;
    int r;
    /* an exclusive exec is not init's child (fncall calls are isolated
     * from each other as it is) */
    if (json_is_true(json_object_get(req, "exclusive")) && !s->fncall)
      r = xexec_spawn(s, j, msg, fds, &e);
    else if ((r = msg_send(s->isock, msg, fds, 3)) < 0)
      dsec_fail(&e, errno, "cannot reach the sandbox's init");
    json_decref(msg);
    close(in[0]);
    close(out[1]);
    close(er[1]);
    in[0] = out[1] = er[1] = -1;
    if (r < 0) {
      j->error = xasprintf("%s%s%s", e->msg, e->errnum ? ": " : "",
                           e->errnum ? strerror(e->errnum) : "");
      goto fail;
    }
  }
  j->out.fd = out[0];
  j->err.fd = er[0];
  fcntl(j->out.fd, F_SETFL, O_NONBLOCK);
  fcntl(j->err.fd, F_SETFL, O_NONBLOCK);
  j->out.w = (struct watch){ W_OUT, j };
  j->err.w = (struct watch){ W_ERR, j };
  ep_add(s, j->out.fd, EPOLLIN, &j->out.w);
  ep_add(s, j->err.fd, EPOLLIN, &j->err.w);
  {
    const char *data = json_string_value(json_object_get(req, "stdin"));
    size_t len = data ? json_string_length(json_object_get(req, "stdin")) : 0;
    if (len > 0) {
      j->stdin_data = xmalloc(len);
      memcpy(j->stdin_data, data, len);
      j->stdin_len = len;
      j->in_fd = in[1];
      fcntl(j->in_fd, F_SETFL, O_NONBLOCK);
      j->w_in = (struct watch){ W_IN, j };
      ep_add(s, j->in_fd, EPOLLOUT, &j->w_in);
    } else
      close(in[1]);
  }
  return;

fail:
  for (int i = 0; i < 2; i++) {
    if (in[i] >= 0)
      close(in[i]);
    if (out[i] >= 0)
      close(out[i]);
    if (er[i] >= 0)
      close(er[i]);
  }
  job_finish(s, j);
}

static void sup_teardown(struct sup *s, const char *state, const char *cause);

/* ---- the proxy: the sandbox's connections to its 127.0.0.1:3128 */
static void proxy_accept(struct sup *s)
{
  for (;;) {
    int fd = accept4(s->proxy_lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
      return;
    dsec_proxy_serve(s->proxy, fd);
  }
}

/* ---- opens of masked files */

static void watch_masks(struct sup *s)
{
  _cleanup_free_ char *root = xasprintf("%s/rootfs", s->run);
  _cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  _cleanup_close_ int dev = -1;
  _cleanup_close_ int fs = -1;
  _cleanup_close_ int mnt = -1;
  _cleanup_error_ struct dsec_error *e = NULL;
  size_t n = 0;

  while (masked_paths[n])
    n++;
  s->fan_fd = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK,
                            O_RDONLY | O_CLOEXEC);
  if (s->fan_fd < 0) {
    /* EMFILE: fs.fanotify.max_user_groups (128 by default) is used up */
    s->audit_off = xasprintf("masked: fanotify_init: %s", strerror(errno));
    goto off;
  }
  if (rfd < 0) {
    s->audit_off = xasprintf("masked: cannot open %s: %s", root, strerror(errno));
    goto off;
  }
  /* a tmpfs of our own over the root's /dev: the mask files are ours,
   * whatever the image or a checkpoint put there */
  dev = open_in_root(rfd, "/dev", true, s->base, &e);
  fs = dev < 0 ? -1 : (int) syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "64k", 0) < 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0755", 0) < 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
      (mnt = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                           MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                             MOUNT_ATTR_NOEXEC)) < 0) {
    s->audit_off = xasprintf("masked: %s", e ? e->msg : strerror(errno));
    goto off;
  }
  s->mask_ino = xzalloc(sizeof *s->mask_ino * (n + 1));
  {
    for (size_t i = 0; i < n; i++) {
      struct stat st;
      char name[32];
      int fd;
      /* only files are watched (directories get an empty tmpfs) */
      if (lstat(masked_paths[i], &st) < 0 || S_ISDIR(st.st_mode))
        continue;
      snprintf(name, sizeof name, "dsec-mask-%zu", i);
      fd = openat(mnt, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC,
                  0444);
      if (fd < 0)
        continue;
      if (fstat(fd, &st) == 0 &&
          fanotify_mark(s->fan_fd, FAN_MARK_ADD, FAN_OPEN, fd, NULL) == 0)
        s->mask_ino[i] = st.st_ino;
      close(fd);
    }
  }
  {
    struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
    if (syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &ro, sizeof ro) < 0)
      goto off_errno;
  }
  if (syscall(SYS_move_mount, mnt, "", dev, "",
              MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
  off_errno:
    s->audit_off = xasprintf("masked: cannot mount the mask files: %s",
                             strerror(errno));
    goto off;
  }
  return;
off:
  if (s->fan_fd >= 0)
    close(s->fan_fd);
  s->fan_fd = -1;
}

/* An open of a masked file: recorded with the denials' rate limit. */
static void masks_opened(struct sup *s)
{
  char buf[4096] __attribute__((aligned(__alignof__(struct fanotify_event_metadata))));
  for (;;) {
    ssize_t n = read(s->fan_fd, buf, sizeof buf);
    struct fanotify_event_metadata *m;
    if (n <= 0)
      return;
    for (m = (struct fanotify_event_metadata *) buf; FAN_EVENT_OK(m, n);
         m = FAN_EVENT_NEXT(m, n)) {
      struct stat st;
      const char *path = NULL;
      if (m->fd >= 0 && fstat(m->fd, &st) == 0)
        for (size_t i = 0; masked_paths[i]; i++)
          if (s->mask_ino[i] && s->mask_ino[i] == st.st_ino)
            path = masked_paths[i];
      if (m->fd >= 0)
        close(m->fd);
      if (!path)
        continue;
      if (dsec_audit_is_new(s->audit, DSEC_AUDIT_MASKED, path, strlen(path)))
        sup_event_first(s, json_pack("{s:s, s:s, s:i}", "type", "masked",
                                     "path", path, "pid", (int) m->pid),
                        DSEC_AUDIT_MASKED, path, strlen(path));
      else if (denial_admit(s))
        sup_event(s, json_pack("{s:s, s:s, s:i}", "type", "masked", "path",
                               path, "pid", (int) m->pid));
    }
  }
}

/* ---- checkpoint, suspend, resume */

static json_t *op_error(struct dsec_error *e)
{
  return dsec_ctl_op_error(e);
}

/* Freezes (or thaws) every process of the sandbox; false when there is
 * no freezer here (rootless without a delegated cgroup). */
static bool sup_freeze(struct sup *s, bool frozen)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  if (!s->cg || !s->cg->path[DSEC_CG_FREEZER])
    return false;
  if (dsec_cgroup_freeze(s->cg, frozen, &e) < 0) {
    dsec_warn("%s", e->msg);
    return false;
  }
  return true;
}

static int fd_write(void *ud, const void *buf, size_t len,
                    struct dsec_error **err)
{
  return dsec_write_all(*(int *) ud, buf, len, err);
}

/* The checkpoint's producer: a helper forked from the supervisor that
 * writes the upper directory as a tar stream from the sandbox's own
 * privilege domain.  It opens the directory (no symlink followed), joins
 * the sandbox's user namespace as its root, chroots into the directory (so
 * that no path in it resolves outside) and keeps only the capabilities
 * that read files.  It is not in the sandbox's PID namespace: nothing in
 * the sandbox can see or signal it.  One JSON line on res says how it
 * went. */
static _Noreturn void upper_stream_child(const char *upper, pid_t init,
                                         bool rootless, int out, int res)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  struct dsec_tar_create_stats cs = { 0 };
  struct dsec_tar_source src = { ".", "", NULL, NULL, true, 0 };
  int fds[4], slot[4];
  char path[64];
  json_t *r;

  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_DUMPABLE, 0);
  {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_IGN);
  }
  /* rootless, the sandbox shares our user namespace: we are its root
   * already (and its init's /proc entry is not ours to open) */
  snprintf(path, sizeof path, rootless ? "/proc/self/ns/user"
                                       : "/proc/%d/ns/user", (int) init);
  fds[0] = out;
  fds[1] = res;
  fds[2] = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  fds[3] = open(path, O_RDONLY | O_CLOEXEC);
  if (fds[2] < 0 || fds[3] < 0) {
    dsec_fail(&err, errno, "cannot open %s", fds[2] < 0 ? upper : path);
    goto done;
  }
  /* nothing of the supervisor's but these: 3 out, 4 res, 5 upper, 6 ns */
  for (int i = 0; i < 4; i++)
    slot[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 100);
  for (int i = 0; i < 4; i++)
    if (slot[i] < 0 || dup3(slot[i], 3 + i, O_CLOEXEC) < 0)
      _exit(125);
  syscall(SYS_close_range, 7U, ~0U, 0U);
  out = 3;
  res = 4;
  {
    struct stat mine, theirs;
    if (stat("/proc/self/ns/user", &mine) < 0 || fstat(6, &theirs) < 0) {
      dsec_fail(&err, errno, "cannot read the sandbox's user namespace");
      goto done;
    }
    if ((mine.st_ino != theirs.st_ino || mine.st_dev != theirs.st_dev) &&
        setns(6, CLONE_NEWUSER) < 0) {
      dsec_fail(&err, errno, "cannot join the sandbox's user namespace");
      goto done;
    }
    close(6);
  }
  if ((setgroups(0, NULL) < 0 && errno != EPERM) ||
      setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0) {
    dsec_fail(&err, errno, "cannot become the sandbox's root");
    goto done;
  }
  if (fchdir(5) < 0 || chroot(".") < 0 || chdir("/") < 0) {
    dsec_fail(&err, errno, "cannot enter the upper directory");
    goto done;
  }
  close(5);
  {
    /* reading is all it does */
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2] = { { 0 } };
    d[0].effective = d[0].permitted =
      (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH);
    for (int cap = 0; cap <= 63; cap++)
      if (cap != CAP_DAC_OVERRIDE && cap != CAP_DAC_READ_SEARCH)
        prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        syscall(SYS_capset, &h, d) < 0) {
      dsec_fail(&err, errno, "cannot drop privileges");
      goto done;
    }
    /* and it took */
    if (prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) != 0 ||
        prctl(PR_CAPBSET_READ, CAP_SYS_CHROOT, 0, 0, 0) != 0 ||
        syscall(SYS_capget, &h, d) < 0 ||
        d[0].effective != ((1u << CAP_DAC_OVERRIDE) |
                           (1u << CAP_DAC_READ_SEARCH)) ||
        d[1].effective != 0) {
      dsec_fail(&err, EPERM, "cannot drop privileges");
      goto done;
    }
  }
  {
    /* a deep tree holds a descriptor per level */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  dsec_tar_create(&src, 1, fd_write, &out, false, &cs, &err);
done:
  if (err)
    r = json_pack("{s:b, s:s++, s:i}", "ok", false, "msg", err->msg,
                  err->errnum ? ": " : "",
                  err->errnum ? strerror(err->errnum) : "", "errno",
                  err->errnum);
  else
    r = json_pack("{s:b, s:I, s:I}", "ok", true, "skipped_whiteout_names",
                  (json_int_t) cs.skipped_whiteout_names, "entries",
                  (json_int_t) cs.entries);
  dsec_json_write_line(res, r, NULL);
  _exit(err ? 1 : 0);
}

struct upper_producer {
  const char *upper;
  pid_t init;
  bool rootless;
};

static int upper_produce(void *ud, int fd, json_t **stats,
                         struct dsec_error **err)
{
  struct upper_producer *u = ud;
  _cleanup_free_ char *text = NULL;
  _cleanup_json_ json_t *r = NULL;
  size_t len = 0;
  int rp[2], st;
  pid_t pid;

  if (pipe2(rp, O_CLOEXEC) < 0)
    return dsec_fail(err, errno, "pipe");
  pid = fork();
  if (pid < 0) {
    close(rp[0]);
    close(rp[1]);
    return dsec_fail(err, errno, "fork");
  }
  if (pid == 0) {
    close(rp[0]);
    upper_stream_child(u->upper, u->init, u->rootless, fd, rp[1]);
  }
  close(rp[1]);
  text = dsec_read_fd(rp[0], 65536, &len, NULL);
  close(rp[0]);
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  r = text ? json_loadb(text, len, 0, NULL) : NULL;
  if (!json_is_true(json_object_get(r, "ok")))
    return dsec_fail(err, (int) json_integer_value(json_object_get(r, "errno")),
                     "the writable layer could not be read: %s",
                     json_string_value(json_object_get(r, "msg")) ?: "the "
                     "helper died");
  *stats = json_pack("{s:O}", "skipped_whiteout_names",
                     json_object_get(r, "skipped_whiteout_names"));
  return 0;
}

/* The writable layer as a layer in the store, taken with the sandbox
 * frozen (so it is consistent): streamed by upper_stream_child, imported
 * as an untrusted tarball (dsec_checkpoint_import).  The trajectory
 * records the seq it follows. */
static json_t *sup_checkpoint(struct sup *s, const char *name)
{
  struct dsec_error *err = NULL;
  _cleanup_free_ char *upper = s->upperfs ? xasprintf("%s/upper", s->upperfs)
                                          : xasprintf("%s/upper", s->dir);
  _cleanup_json_ json_t *layer = NULL;
  _cleanup_json_ json_t *stats = NULL;
  struct upper_producer u = { upper, s->init_pid, s->rootless };
  json_int_t mb = json_integer_value(
    json_object_get(json_object_get(s->spec, "resources"), "disk_mb"));
  struct dsec_checkpoint_opts co = {
    name, json_object_get(s->spec, "protect"),
    /* a disk-limited layer's stream cannot be much more than the disk */
    mb > 0 ? ((uint64_t) mb << 21) + (16u << 20) : 0,
  };
  bool frozen;
  json_t *r;

  if (s->fncall) {
    dsec_bad_input(&err, "an fncall sandbox has no state to checkpoint");
    return op_error(err);
  }
  if (s->init_pid <= 0) {
    dsec_fail(&err, ESRCH, "the sandbox's init is gone");
    return op_error(err);
  }
  frozen = s->suspended || sup_freeze(s, true);
  layer = dsec_checkpoint_import(&co, upper_produce, &u, &stats, &err);
  if (frozen && !s->suspended)
    sup_freeze(s, false);
  if (!layer)
    return op_error(err);
  r = dsec_checkpoint_record(&s->traj, s->audit, s->id, s->state, layer,
                             stats, frozen, &err);
  if (!r)
    return op_error(err);
  sup_write_state(s);
  return r;
}

static json_t *sup_suspend(struct sup *s, bool release, struct client *cl)
{
  struct dsec_error *err = NULL;
  (void) cl;
  if (release) {
    /* everything goes but the spec, the trajectory and a checkpoint */
    json_t *cp = sup_checkpoint(s, NULL);
    const char *type = json_string_value(json_object_get(cp, "type"));
    if (!type || strcmp(type, "checkpoint") != 0)
      return cp;
    json_object_set_new(s->state, "released", json_true());
    s->end_state = "suspended";
    json_object_set_new(cp, "type", json_string("suspended"));
    json_object_set_new(cp, "released", json_true());
    sup_event(s, json_pack("{s:s, s:b}", "type", "suspended", "released",
                           true));
    return cp;
  }
  if (s->njobs > 0 && !s->cg) {
    dsec_fail(&err, EBUSY, "cannot freeze here (no freezer cgroup)");
    return op_error(err);
  }
  if (!s->suspended && !sup_freeze(s, true)) {
    dsec_fail(&err, ENOTSUP, "no freezer cgroup here: use --release");
    return op_error(err);
  }
  s->suspended = true;
  json_object_set_new(s->state, "state", json_string("suspended"));
  sup_write_state(s);
  sup_event(s, json_pack("{s:s, s:b}", "type", "suspended", "released", false));
  return json_pack("{s:s, s:s, s:b}", "type", "suspended", "id", s->id,
                   "released", false);
}

static json_t *sup_resume(struct sup *s)
{
  if (s->suspended) {
    sup_freeze(s, false);
    s->suspended = false;
    s->last_activity_ms = now_ms();
    json_object_set_new(s->state, "state", json_string("running"));
    sup_write_state(s);
    sup_event(s, json_pack("{s:s, s:s}", "type", "resumed", "from", "freezer"));
  }
  return json_pack("{s:s, s:s, s:s}", "type", "resumed", "id", s->id, "state",
                   "running");
}

/* Handles the complete lines a client sent, one at a time: the next waits
 * until the current exec is answered, so results come back in order. */
static void client_next(struct sup *s, struct client *cl)
{
  while (!cl->job) {
    json_t *req;
    const char *op;

    if (dsec_ctl_next(&cl->c, &req) == 0) {
      if (cl->c.eof)
        client_close(s, cl);
      return;
    }
    op = json_string_value(json_object_get(req, "op"));
    if ((!op || strcmp(op, "exec") == 0) && s->suspended) {
      reply_error(cl, "the sandbox is suspended (resume it first)",
                  DSEC_EXIT_INTERNAL);
    } else if (!op || strcmp(op, "exec") == 0) {
      job_start(s, cl, req);
    } else if (strcmp(op, "kill") == 0) {
      json_int_t sig = json_integer_value(json_object_get(req, "signal"));
      json_t *m = json_pack("{s:s, s:I}", "op", "kill", "signal",
                            sig > 0 && sig < NSIG ? sig : SIGKILL);
      msg_send(s->isock, m, NULL, 0);
      json_decref(m);
      for (size_t i = 0; i < s->njobs; i++)
        if (s->jobs[i]->xpid > 0)
          job_kill(s, s->jobs[i], SIGKILL);
      m = json_pack("{s:s, s:s, s:I}", "type", "killed", "id", s->id, "signal",
                    sig > 0 && sig < NSIG ? sig : SIGKILL);
      client_write(cl, m);
      json_decref(m);
    } else if (strcmp(op, "status") == 0) {
      json_t *st = json_copy(s->state);
      int64_t mem = s->cg ? dsec_cgroup_memory_current(s->cg) : -1;
      if (mem >= 0)
        json_object_set_new(st, "memory_bytes", json_integer(mem));
      json_object_set_new(st, "execs_running", json_integer((json_int_t) s->njobs));
      json_object_set_new(st, "audit", dsec_audit_status(s->audit));
      client_write(cl, st);
      json_decref(st);
    } else if (strcmp(op, "checkpoint") == 0) {
      json_t *r = sup_checkpoint(s, json_string_value(json_object_get(req, "name")));
      client_write(cl, r);
      json_decref(r);
    } else if (strcmp(op, "suspend") == 0) {
      json_t *r = sup_suspend(s, json_is_true(json_object_get(req, "release")),
                              cl);
      client_write(cl, r);
      json_decref(r);
      if (s->end_state) {
        json_decref(req);
        sup_teardown(s, "suspended", "released");
      }
    } else if (strcmp(op, "resume") == 0) {
      json_t *r = sup_resume(s);
      client_write(cl, r);
      json_decref(r);
    } else if (strcmp(op, "shutdown") == 0) {
      json_t *m = json_pack("{s:s, s:s}", "type", "stopping", "id", s->id);
      client_write(cl, m);
      json_decref(m);
      json_decref(req);
      sup_teardown(s, "stopped", "removed");
    } else {
      reply_error(cl, "unknown op", DSEC_EXIT_INPUT);
    }
    json_decref(req);
  }
}

static void client_readable(struct sup *s, struct client *cl)
{
  if (dsec_ctl_read(&cl->c) < 0) {
    client_close(s, cl);
    return;
  }
  if (cl->c.eof)
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, cl->c.fd, NULL);
  client_next(s, cl);
}

static void accept_clients(struct sup *s)
{
  for (;;) {
    int fd = dsec_ctl_accept(s->lsock);
    struct client *cl;
    if (fd < 0)
      return;
    cl = xzalloc(sizeof *cl);
    cl->c.fd = fd;
    cl->w = (struct watch){ W_CLIENT, cl };
    s->clients = xrealloc(s->clients, sizeof *s->clients * (s->nclients + 1));
    s->clients[s->nclients++] = cl;
    ep_add(s, fd, EPOLLIN, &cl->w);
  }
}

#define LISTENERS_MAX 4096

static void listener_close(struct sup *s, struct listener *l)
{
  for (size_t i = 0; i < s->nlisteners; i++)
    if (s->listeners[i] == l) {
      s->listeners[i] = s->listeners[--s->nlisteners];
      break;
    }
  close(l->fd);
  l->w.dead = true;
  json_decref(l->seq);
  l->seq = NULL;
  bury(s, l);
}

static void listener_add(struct sup *s, int fd, uint64_t xid)
{
  struct listener *l;

  if (s->nlisteners >= LISTENERS_MAX) {
    /* bounded: the oldest tree's denials now fail unrecorded (ENOSYS) */
    listener_close(s, s->listeners[0]);
  }
  l = xzalloc(sizeof *l);
  l->fd = fd;
  l->w = (struct watch){ W_NOTIFY, l };
  for (size_t i = 0; i < s->njobs; i++)
    if (s->jobs[i]->xid == xid && s->jobs[i]->seq)
      l->seq = json_incref(s->jobs[i]->seq);
  s->listeners = xrealloc(s->listeners,
                          sizeof *s->listeners * (s->nlisteners + 1));
  s->listeners[s->nlisteners++] = l;
  if (ep_add(s, fd, EPOLLIN, &l->w) < 0)
    listener_close(s, l);
}

#define PROCESSES_PER_SECOND 200

/* A string of another process's memory (at most max bytes), or NULL. */
static char *remote_string(pid_t pid, uint64_t addr, size_t max)
{
  char *buf = xmalloc(max + 1);
  size_t got = 0;

  while (got < max) {
    /* never across a page boundary in one read: the next page may be
     * unmapped */
    size_t chunk = 4096 - ((addr + got) & 4095);
    struct iovec local, remote;
    ssize_t n;
    char *nul;
    if (chunk > max - got)
      chunk = max - got;
    local = (struct iovec){ buf + got, chunk };
    remote = (struct iovec){ (void *) (uintptr_t) (addr + got), chunk };
    n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0)
      break;
    nul = memchr(buf + got, '\0', (size_t) n);
    got += (size_t) n;
    if (nul) {
      return buf;
    }
  }
  if (got == 0) {
    free(buf);
    return NULL;
  }
  buf[got] = '\0'; /* cut at max */
  return buf;
}

/* The argv of an execve in progress: one argument and one byte more than
 * the audit log keeps (DSEC_AUDIT_ARGV_MAX arguments of DSEC_AUDIT_ARG_MAX
 * bytes, DSEC_AUDIT_ARGV_BYTES in all), so that it sees the cut. */
static json_t *remote_argv(pid_t pid, uint64_t addr)
{
  json_t *argv = json_array();
  size_t total = 0;
  for (int i = 0; i <= DSEC_AUDIT_ARGV_MAX && addr &&
                  total <= DSEC_AUDIT_ARGV_BYTES; i++) {
    uint64_t p = 0;
    struct iovec local = { &p, sizeof p };
    struct iovec remote = { (void *) (uintptr_t) (addr + 8 * (uint64_t) i),
                            sizeof p };
    char *arg;
    if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != sizeof p || !p)
      break;
    arg = remote_string(pid, p, DSEC_AUDIT_ARG_MAX + 1);
    if (!arg)
      break;
    total += strlen(arg);
    json_array_append_new(argv, dsec_json_utf8(arg, strlen(arg)));
    free(arg);
  }
  return argv;
}

/* A program start: recorded (at most PROCESSES_PER_SECOND a second), then
 * let go on.  CONTINUE is fine here: nothing is decided on what was read. */
/* The counts of what the rate limits dropped, written once a second
 * (from the timers too, so a burst's count is not lost). */
static void flush_suppressed(struct sup *s, double now)
{
  if (now - s->process_window >= 1000) {
    if (s->processes_suppressed)
      sup_event(s, json_pack("{s:s, s:I}", "type", "process_suppressed",
                             "count", (json_int_t) s->processes_suppressed));
    s->process_window = now;
    s->processes_in_window = 0;
    s->processes_suppressed = 0;
  }
  if (now - s->denial_window >= 1000) {
    if (s->denials_suppressed)
      sup_event(s, json_pack("{s:s, s:I}", "type", "denied_suppressed",
                             "count", (json_int_t) s->denials_suppressed));
    s->denial_window = now;
    s->denials_in_window = 0;
    s->denials_suppressed = 0;
  }
}

/* Whether one more denial-class event (denied, masked) may be recorded in
 * this second; the rest are counted for denied_suppressed. */
static bool denial_admit(struct sup *s)
{
  double now = now_ms();
  if (now - s->denial_window >= 1000)
    flush_suppressed(s, now);
  if (s->denials_in_window < DENIALS_PER_SECOND) {
    s->denials_in_window++;
    return true;
  }
  s->denials_suppressed++;
  return false;
}

static void process_started(struct sup *s, struct listener *l,
                            struct seccomp_notif *req,
                            struct seccomp_notif_resp *resp)
{
  bool at = req->data.nr == SCMP_SYS(execveat);
  pid_t pid = (pid_t) req->pid;
  double now = now_ms();
  bool first;

  {
    _cleanup_free_ char *path = remote_string(pid, req->data.args[at ? 1 : 0],
                                              4096);
    json_t *argv;
    /* a PATH search tries names that do not exist: those execs fail and
     * are not program starts.  Resolved inside the sandbox's root (never
     * the host's), absolute paths of a plain execve only. */
    if (path && !at && path[0] == '/') {
      char root[64];
      struct open_how how = { .flags = O_PATH | O_CLOEXEC,
                              .resolve = RESOLVE_IN_ROOT |
                                         RESOLVE_NO_MAGICLINKS };
      int rfd, fd;
      snprintf(root, sizeof root, "/proc/%d/root", (int) pid);
      rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
      fd = rfd < 0 ? -1 : (int) syscall(SYS_openat2, rfd, path, &how,
                                        sizeof how);
      int e = errno;
      if (fd >= 0)
        close(fd);
      if (rfd >= 0)
        close(rfd);
      if (fd < 0 && e == ENOENT)
        goto answer; /* not counted: it will not run */
    }
    if (now - s->process_window >= 1000)
      flush_suppressed(s, now);
    /* the first start of a program path is never lost in a flood */
    first = path && dsec_audit_is_new(s->audit, DSEC_AUDIT_PROGRAM, path,
                                      strlen(path));
    if (!first && s->processes_in_window++ >= PROCESSES_PER_SECOND) {
      s->processes_suppressed++;
      goto answer;
    }
    argv = remote_argv(pid, req->data.args[at ? 2 : 1]);
    /* read before answering, and only trusted if the call is still the
     * same one (the process could have died and its pid be reused) */
    if (seccomp_notify_id_valid(l->fd, req->id) == 0) {
      json_t *ev = json_pack("{s:s, s:o, s:o, s:i, s:O}", "type", "process",
                             "path", path ? dsec_json_utf8(path, strlen(path))
                                          : json_null(),
                             "argv", argv, "pid", (int) pid, "seq",
                             l->seq ? l->seq : json_null());
      if (first)
        sup_event_first(s, ev, DSEC_AUDIT_PROGRAM, path, strlen(path));
      else
        sup_event(s, ev);
    } else
      json_decref(argv);
  }
answer:
  memset(resp, 0, sizeof *resp);
  resp->id = req->id;
  resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  seccomp_notify_respond(l->fd, resp);
}

/* A denied call: answered with its error, recorded as an event (at most
 * DENIALS_PER_SECOND a second; the rest are counted). */
static void listener_ready(struct sup *s, struct listener *l, uint32_t events)
{
  if (!s->notif && seccomp_notify_alloc(&s->notif, &s->notif_resp) < 0) {
    listener_close(s, l);
    return;
  }
  if (events & EPOLLIN) {
    struct seccomp_notif *req = s->notif;
    struct seccomp_notif_resp *resp = s->notif_resp;
    int nr;

    memset(req, 0, sizeof *req);
    if (seccomp_notify_receive(l->fd, req) == 0) {
      nr = req->data.nr;
      if (nr == SCMP_SYS(execve) || nr == SCMP_SYS(execveat)) {
        process_started(s, l, req, resp);
        return;
      }
      memset(resp, 0, sizeof *resp);
      resp->id = req->id;
      resp->error = -dsec_seccomp_denial_errno(nr, (unsigned long) req->data.args[1]);
      seccomp_notify_respond(l->fd, resp);

      {
        /* the first denial of a syscall (of an ioctl request: by its type
         * and number, the low 16 bits the filter matches) is never lost
         * in a flood */
        bool is_ioctl = nr == SCMP_SYS(ioctl);
        uint32_t key = is_ioctl ? (uint32_t) (req->data.args[1] & 0xffff)
                                : (uint32_t) nr;
        enum dsec_audit_kind kind = is_ioctl ? DSEC_AUDIT_IOCTL
                                             : DSEC_AUDIT_SYSCALL;
        bool first = dsec_audit_is_new(s->audit, kind, &key, sizeof key);
        if (first || denial_admit(s)) {
          json_t *ev = json_pack("{s:s, s:s, s:O, s:i, s:i}", "type", "denied",
                                 "syscall", dsec_seccomp_name(nr), "seq",
                                 l->seq ? l->seq : json_null(), "pid",
                                 (int) req->pid, "errno", -resp->error);
          if (is_ioctl)
            json_object_set_new(ev, "ioctl",
                                json_sprintf("0x%llx",
                                             (unsigned long long) req->data.args[1]));
          if (first)
            sup_event_first(s, ev, kind, &key, sizeof key);
          else
            sup_event(s, ev);
        }
      }
      return;
    }
  }
  if (events & (EPOLLHUP | EPOLLERR))
    listener_close(s, l); /* every process of that exec is gone */
}

static void init_message(struct sup *s)
{
  int fds[3], nfds;
  json_t *m = msg_recv(s->isock, s->msgbuf, MSG_MAX, fds, &nfds);
  const char *op;
  uint64_t xid;

  if (!m) {
    for (int i = 0; i < nfds; i++)
      close(fds[i]);
    /* init is gone; SIGCHLD tells how */
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->isock, NULL);
    return;
  }
  op = json_string_value(json_object_get(m, "op"));
  xid = (uint64_t) json_integer_value(json_object_get(m, "xid"));
  if (op && strcmp(op, "listener") == 0 && nfds == 1) {
    listener_add(s, fds[0], xid);
    nfds = 0;
  }
  for (size_t i = 0; op && i < s->njobs; i++) {
    struct job *j = s->jobs[i];
    if (j->xid != xid)
      continue;
    if (strcmp(op, "exited") == 0) {
      j->exited = true;
      j->status = (int) json_integer_value(json_object_get(m, "status"));
      job_finish(s, j);
    } else if (strcmp(op, "error") == 0) {
      j->error = xstrdup(json_string_value(json_object_get(m, "msg"))
                           ? json_string_value(json_object_get(m, "msg"))
                           : "exec failed");
      job_finish(s, j);
    }
    break;
  }
  for (int i = 0; i < nfds; i++)
    close(fds[i]);
  json_decref(m);
}

static void stdin_writable(struct sup *s, struct job *j)
{
  while (j->stdin_off < j->stdin_len) {
    ssize_t n = write(j->in_fd, j->stdin_data + j->stdin_off,
                      j->stdin_len - j->stdin_off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    if (n < 0)
      break; /* EPIPE: the command does not read its input */
    j->stdin_off += (size_t) n;
  }
  epoll_ctl(s->epfd, EPOLL_CTL_DEL, j->in_fd, NULL);
  close(j->in_fd);
  j->in_fd = -1;
}

/* Destroying a fanotify group waits for an SRCU grace period (~15 ms here),
 * and whoever removes the sandbox waits for our exit: a child holding the
 * last reference pays it instead, dying with us (only async-signal-safe
 * calls after fork: proxy threads may run). */
static void release_mask_watch(struct sup *s)
{
  pid_t parent = getpid(), pid;
  if (s->fan_fd < 0)
    return;
  pid = fork();
  if (pid == 0) {
    if (dup2(s->fan_fd, 0) < 0)
      _exit(0);
    close_range(1, ~0U, 0);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
      _exit(0);
    for (;;)
      pause();
  }
  close(s->fan_fd);
  s->fan_fd = -1;
}

static void sup_teardown(struct sup *s, const char *state, const char *cause)
{
  _cleanup_free_ char *now = dsec_time_rfc3339();
  _cleanup_error_ struct dsec_error *e = NULL;

  /* a frozen process does not die of SIGKILL until thawed */
  if (s->suspended)
    sup_freeze(s, false);

  /* exclusive execs are out of init's pid namespace: their relays first
   * (each takes its exec along) */
  for (size_t i = 0; i < s->njobs; i++)
    if (s->jobs[i]->xpid > 0) {
      kill(s->jobs[i]->xpid, SIGKILL);
      while (waitpid(s->jobs[i]->xpid, NULL, 0) < 0 && errno == EINTR)
        ;
    }
  /* init is PID 1 of the sandbox: when it dies the kernel kills the rest */
  if (s->init_pid > 0) {
    kill(s->init_pid, SIGKILL);
    while (waitpid(s->init_pid, NULL, 0) < 0 && errno == EINTR)
      ;
  }
  if (s->cg) {
    dsec_cgroup_destroy(s->cg, &e);
    if (e)
      dsec_warn("%s", e->msg);
  }
  /* answer whoever still waits */
  for (size_t i = 0; i < s->njobs; i++) {
    struct job *j = s->jobs[i];
    if (j->cl)
      reply_error(j->cl, cause ? cause : state, DSEC_EXIT_INTERNAL);
  }
  json_object_set_new(s->state, "state", json_string(state));
  json_object_set_new(s->state, "ended", json_string(now));
  if (cause)
    json_object_set_new(s->state, "cause", json_string(cause));
  sup_write_state(s);
  if (strcmp(state, "died") == 0 || strcmp(state, "expired") == 0)
    sup_event(s, json_pack("{s:s, s:s}", "type", state, "cause",
                           cause ? cause : state));
  if (s->audit)
    dsec_audit_finish(s->audit);
  if (s->run_fd >= 0)
    unlinkat(s->run_fd, "ctl.sock", 0);
  fsync(s->events_fd);
  release_mask_watch(s);
  _exit(0);
}

static void sup_signal(struct sup *s)
{
  struct signalfd_siginfo si;
  while (read(s->sfd, &si, sizeof si) == sizeof si) {
    if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT ||
        si.ssi_signo == SIGHUP)
      sup_teardown(s, "stopped", "supervisor terminated");
  }
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0)
      break;
    for (size_t i = 0; i < s->njobs; i++)
      if (s->jobs[i]->xpid == pid) {
        struct job *j = s->jobs[i];
        j->xpid = 0;
        j->exited = true;
        j->status = status;
        job_finish(s, j);
        break;
      }
    if (pid == s->init_pid) {
      int64_t ooms = s->cg ? dsec_cgroup_oom_kills(s->cg) : -1;
      _cleanup_free_ char *cause =
        ooms > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
          ? xstrdup("oom")
        : WIFSIGNALED(status)
          ? xasprintf("init killed by signal %d", WTERMSIG(status))
          : xasprintf("init exited with status %d", WEXITSTATUS(status));
      s->init_pid = 0;
      sup_teardown(s, "died", cause);
    }
  }
}

static int sup_timeout_ms(struct sup *s)
{
  double now = now_ms(), next = -1;
  /* a pending suppressed count is written when its second ends */
  if (s->processes_suppressed)
    next = s->process_window + 1000;
  if (s->denials_suppressed && (next < 0 || s->denial_window + 1000 < next))
    next = s->denial_window + 1000;
  for (size_t i = 0; i < s->njobs; i++)
    if (s->jobs[i]->deadline > 0 && !s->jobs[i]->kill_sent &&
        (next < 0 || s->jobs[i]->deadline < next))
      next = s->jobs[i]->deadline;
  if (s->ttl_s > 0) {
    double t = s->start_ms + (double) s->ttl_s * 1000;
    if (next < 0 || t < next)
      next = t;
  }
  if (s->idle_s > 0 && s->njobs == 0) {
    double t = s->last_activity_ms + (double) s->idle_s * 1000;
    if (next < 0 || t < next)
      next = t;
  }
  if (next < 0)
    return -1;
  return next <= now ? 0 : (int) (next - now) + 1;
}

/* Signals every process of an exec.  An exclusive one dies with its
 * relay (our child) whatever the signal: its processes are out of our
 * reach (and init's) otherwise. */
static void job_kill(struct sup *s, struct job *j, int sig)
{
  if (j->xpid > 0) {
    kill(j->xpid, SIGKILL);
    return;
  }
  {
    json_t *m = json_pack("{s:s, s:I, s:i}", "op", "kill", "xid",
                          (json_int_t) j->xid, "signal", sig);
    msg_send(s->isock, m, NULL, 0);
    json_decref(m);
  }
}

static void sup_timers(struct sup *s)
{
  double now = now_ms();
  if (s->processes_suppressed || s->denials_suppressed)
    flush_suppressed(s, now);
  for (size_t i = 0; i < s->njobs; i++) {
    struct job *j = s->jobs[i];
    if (j->deadline > 0 && !j->kill_sent && now >= j->deadline) {
      j->timed_out = true;
      j->kill_sent = true;
      job_kill(s, j, SIGKILL);
    }
  }
  if (s->ttl_s > 0 && now >= s->start_ms + (double) s->ttl_s * 1000)
    sup_teardown(s, "expired", "ttl");
  if (s->idle_s > 0 && s->njobs == 0 && !s->suspended &&
      now >= s->last_activity_ms + (double) s->idle_s * 1000) {
    const char *action = json_string_value(json_object_get(s->spec,
                                                           "idle_action"));
    if (action && strcmp(action, "suspend") == 0) {
      /* idle_action suspend: checkpoint and release, resumable later */
      json_t *r = sup_suspend(s, true, NULL);
      bool ok = s->end_state != NULL;
      json_decref(r);
      if (ok)
        sup_teardown(s, "suspended", "idle");
      /* a failed checkpoint: the sandbox is removed as an idle one */
    }
    sup_teardown(s, "expired", "idle");
  }
}

_Noreturn static void sup_loop(struct sup *s)
{
  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(s->epfd, evs, 64, sup_timeout_ms(s));
    if (n < 0 && errno != EINTR)
      sup_teardown(s, "died", "supervisor error");
    for (int i = 0; i < n; i++) {
      struct watch *w = evs[i].data.ptr;
      if (w->dead)
        continue;
      switch (w->kind) {
      case W_LISTEN:
        accept_clients(s);
        break;
      case W_SIGNAL:
        sup_signal(s);
        break;
      case W_INIT:
        init_message(s);
        break;
      case W_CLIENT:
        client_readable(s, w->p);
        break;
      case W_OUT:
        capture_read(&((struct job *) w->p)->out, ((struct job *) w->p)->cap);
        break;
      case W_ERR:
        capture_read(&((struct job *) w->p)->err, ((struct job *) w->p)->cap);
        break;
      case W_IN:
        stdin_writable(s, w->p);
        break;
      case W_NOTIFY:
        listener_ready(s, w->p, evs[i].events);
        break;
      case W_PROXY:
        proxy_accept(s);
        break;
      case W_FANOTIFY:
        masks_opened(s);
        break;
      case W_XSOCK:
        xsock_message(s, w->p);
        break;
      }
    }
    for (size_t g = 0; g < s->ngraves; g++)
      free(s->graves[g]);
    s->ngraves = 0;
    sup_timers(s);
  }
}


/* With resources.disk_mb, the writable layer lives on an ext4 file system
 * of that size (a sparse file in the sandbox's directory on a loop
 * device): the sandbox hits ENOSPC, the host's disk does not fill.
 * Returns the directory holding upper/ and work/ (new). */
static char *disk_limited_upper(struct sup *s, json_int_t mb, uid_t base,
                                struct dsec_error **err)
{
  _cleanup_free_ char *img = xasprintf("%s/upper.img", s->dir);
  _cleanup_free_ char *mnt = xasprintf("%s/upperfs", s->run);
  _cleanup_free_ char *owner = xasprintf("root_owner=%u:%u", base, base);
  _cleanup_free_ char *dev = NULL;
  _cleanup_close_ int fd = open(img, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  _cleanup_close_ int loop = -1;

  if (fd < 0 || ftruncate(fd, (off_t) mb << 20) < 0) {
    dsec_fail(err, errno, "cannot create %s", img);
    return NULL;
  }
  {
    char *argv[] = { "mkfs.ext4", "-q", "-F", "-b", "4096", "-O", "^has_journal", "-m", "0",
                     "-E", owner, img, NULL };
    if (dsec_run_program(argv, NULL, NULL, err) < 0) {
      dsec_error_wrap(err, "disk limit");
      return NULL;
    }
  }
  dev = dsec_loop_attach(fd, &loop, err);
  if (!dev)
    return NULL;
  if (dsec_mkdir_p(AT_FDCWD, mnt, 0700, err) < 0)
    return NULL;
  if (mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV, NULL) < 0) {
    dsec_fail(err, errno, "cannot mount the writable layer's file system");
    return NULL;
  }
  return steal_pointer(&mnt);
}

/* Opens path inside the sandbox's root, never leaving it: symlinks in the
 * image resolve inside the root (an image cannot aim a mount, a mkdir or
 * a chown at the host).  Missing directories are created, owned by the
 * sandbox's root; the last component is created as a directory or an
 * empty file.  Returns an O_PATH descriptor. */
static int open_in_root(int rfd, const char *path, bool dir, uid_t base,
                        struct dsec_error **err)
{
  struct open_how how = { .flags = O_PATH | O_CLOEXEC,
                          .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS |
                                     RESOLVE_NO_XDEV };
  _cleanup_free_ char *p = xstrdup(path + (path[0] == '/'));
  char *slash = p;
  int fd;

  for (;;) {
    bool last;
    slash = strchr(slash, '/');
    last = !slash;
    if (slash)
      *slash = '\0';
    fd = (int) syscall(SYS_openat2, rfd, p, &how, sizeof how);
    if (fd < 0 && errno == ENOENT) {
      /* create this component in its (resolved) parent */
      _cleanup_close_ int parent = -1;
      const char *name = strrchr(p, '/');
      if (name) {
        char *cut = (char *) name;
        *cut = '\0';
        parent = (int) syscall(SYS_openat2, rfd, p, &how, sizeof how);
        *cut = '/';
        name++;
      } else {
        parent = fcntl(rfd, F_DUPFD_CLOEXEC, 0);
        name = p;
      }
      if (parent < 0)
        return dsec_fail(err, errno, "cannot resolve %s in the sandbox", path);
      {
        /* O_PATH fds cannot be used with mkdirat/openat directly: reopen */
        _cleanup_close_ int pdir = openat(parent, ".", O_RDONLY | O_DIRECTORY |
                                                      O_CLOEXEC);
        if (pdir < 0)
          return dsec_fail(err, errno, "cannot open the parent of %s", path);
        if (!last || dir) {
          if (mkdirat(pdir, name, 0755) < 0 && errno != EEXIST)
            return dsec_fail(err, errno, "cannot create %s in the sandbox",
                             path);
        } else {
          int f = openat(pdir, name,
                         O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
          if (f < 0)
            return dsec_fail(err, errno, "cannot create %s in the sandbox",
                             path);
          close(f);
        }
        if (fchownat(pdir, name, base, base, AT_SYMLINK_NOFOLLOW) < 0)
          return dsec_fail(err, errno, "cannot give %s to the sandbox", path);
      }
      fd = (int) syscall(SYS_openat2, rfd, p, &how, sizeof how);
    }
    if (fd < 0)
      return dsec_fail(err, errno, "cannot resolve %s in the sandbox", path);
    if (last)
      return fd;
    close(fd);
    *slash++ = '/';
  }
}

/* A user namespace with the given maps, for an idmapped mount (new fd):
 * a child that exists only until its namespace is opened. */
static int userns_with_maps(const char *uid_map, const char *gid_map,
                            struct dsec_error **err)
{
  char path[64];
  int fd = -1, p[2];
  pid_t pid;

  if (pipe2(p, O_CLOEXEC) < 0)
    return dsec_fail(err, errno, "pipe");
  pid = (pid_t) syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
  if (pid == 0) {
    char c;
    close(p[1]);
    (void) !read(p[0], &c, 1);
    _exit(0);
  }
  close(p[0]);
  if (pid < 0) {
    close(p[1]);
    return dsec_fail(err, errno, "cannot create a user namespace");
  }
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int) pid);
  if (write_file(path, uid_map) == 0) {
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int) pid);
    if (write_file(path, gid_map) == 0) {
      snprintf(path, sizeof path, "/proc/%d/ns/user", (int) pid);
      fd = open(path, O_RDONLY | O_CLOEXEC);
    }
  }
  if (fd < 0)
    dsec_fail(err, errno, "cannot map the ids of a mount");
  close(p[1]);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
    ;
  return fd;
}

/* The id map of a read-write mount (for uid_map or gid_map): on the host,
 * what the sandbox's user (id inside) creates or changes there belongs to
 * the directory's owner (owner, never root: see bind_into_root), every
 * other id of the sandbox to the sandbox's own host range, and nothing of
 * the sandbox's to host root.  An owner that is one of the sandbox's own
 * ids gets nothing more: the sandbox's ids are its own already. */
static char *rw_map(uid_t owner, uid_t base, uid_t inside)
{
  _cleanup_free_ char *below = NULL;
  _cleanup_free_ char *above = NULL;

  if (owner >= base && owner - base < DSEC_IDRANGE_SIZE)
    return xasprintf("%u %u %u\n", base, base, DSEC_IDRANGE_SIZE);
  below = inside > 0 ? xasprintf("%u %u %u\n", base, base, inside)
                     : xstrdup("");
  above = inside + 1 < DSEC_IDRANGE_SIZE
            ? xasprintf("%u %u %u\n", base + inside + 1, base + inside + 1,
                        DSEC_IDRANGE_SIZE - inside - 1)
            : xstrdup("");
  return xasprintf("%u %u 1\n%s%s", owner, base + inside, below, above);
}

/* A spec mount: the host source, attached on its target inside the root,
 * nosuid and nodev.  A read-only one is idmapped to the sandbox's user
 * namespace (the sandbox's root reads what the host's root owns); a
 * read-write one through rw_map, so that nothing the sandbox writes there
 * belongs to host root or to another sandbox. */
static int bind_into_root(struct sup *s, int rfd, json_t *m, int userns,
                          uid_t base, struct dsec_error **err)
{
  const char *src = json_string_value(json_object_get(m, "source"));
  const char *dst = json_string_value(json_object_get(m, "target"));
  bool ro = json_is_true(json_object_get(m, "ro"));
  struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID |
                                         MOUNT_ATTR_NODEV |
                                         (ro ? MOUNT_ATTR_RDONLY : 0),
                             .userns_fd = (uint64_t) userns };
  _cleanup_close_ int t = -1;
  _cleanup_close_ int target = -1;
  _cleanup_close_ int mapns = -1;
  struct stat st;

  if (stat(src, &st) < 0)
    return dsec_error_set(err, DSEC_EXIT_INPUT, errno, "mount source %s", src);
  if (!ro && !s->rootless) {
    _cleanup_free_ char *um = NULL;
    _cleanup_free_ char *gm = NULL;
    /* the kernel lets nothing write through an idmapped mount to a file
     * whose owner or group it does not map, and root is never mapped: a
     * directory of root's would be a read-only mount that says it is not */
    if (st.st_uid == 0 || st.st_gid == 0)
      return dsec_error_set(err, DSEC_EXIT_INPUT, 0,
                            "mount %s: it is owned by root (%u:%u), and "
                            "nothing a sandbox writes may belong to root: "
                            "give it to an unprivileged user and group, or "
                            "mount it read-only", src, (unsigned) st.st_uid,
                            (unsigned) st.st_gid);
    um = rw_map(st.st_uid, base, s->uid);
    gm = rw_map(st.st_gid, base, s->gid);
    mapns = userns_with_maps(um, gm, err);
    if (mapns < 0)
      return dsec_error_wrap(err, "mount %s", src);
    attr.userns_fd = (uint64_t) mapns;
  }
  target = open_in_root(rfd, dst, S_ISDIR(st.st_mode), base, err);
  if (target < 0)
    return -1;
  t = (int) syscall(SYS_open_tree, AT_FDCWD, src,
                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (t < 0)
    return dsec_fail(err, errno, "cannot open mount source %s", src);
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
              sizeof attr) < 0) {
    /* a read-write mount is never given to the sandbox unmapped: its
     * writes would be the host's root's */
    if (!ro && !s->rootless)
      return dsec_fail(err, errno, "cannot idmap mount %s (read-write mounts "
                                   "need a file system with idmapped mounts)",
                       src);
    /* a read-only one on a file system that cannot be idmapped: as it is */
    attr.attr_set &= ~(uint64_t) MOUNT_ATTR_IDMAP;
    attr.userns_fd = 0;
    if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
                sizeof attr) < 0)
      return dsec_fail(err, errno, "cannot set up mount %s", src);
  }
  if (syscall(SYS_move_mount, t, "", target, "",
              MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
    return dsec_fail(err, errno, "cannot mount %s on %s", src, dst);
  return 0;
}

/* Mounts the sandbox's root in the supervisor's mount namespace:
 * run/lower/<i> idmapped layers, run/rootfs the overlay, then the spec's
 * bind mounts (idmapped as well, so the sandbox's root owns what the
 * host's root owns, and nothing is chowned). */
static int mount_rootfs(struct sup *s, struct dsec_container_opts *o,
                        int userns, uid_t base, struct dsec_error **err)
{
  _cleanup_free_ char *lowers = xstrdup("");
  _cleanup_free_ char *opts = NULL;
  _cleanup_free_ char *upper = NULL;
  _cleanup_free_ char *work = NULL;
  _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", s->run);
  json_t *m;
  size_t i;

  for (i = 0; i < o->n_layers; i++) {
    _cleanup_free_ char *dst = xasprintf("%s/lower/%zu", s->run, i);
    struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY |
                                           MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                               .userns_fd = (uint64_t) userns };
    if (s->rootless) {
      /* our layers are ours: nothing to map */
      attr.attr_set &= ~(uint64_t) MOUNT_ATTR_IDMAP;
      attr.userns_fd = 0;
    }
    _cleanup_close_ int t = -1;
    char *nl;

    if (dsec_mkdir_p(AT_FDCWD, dst, 0700, err) < 0)
      return -1;
    t = (int) syscall(SYS_open_tree, AT_FDCWD, o->layers[i],
                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (t < 0)
      return dsec_fail(err, errno, "cannot open layer %s", o->layers[i]);
    if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
      return dsec_fail(err, errno, "cannot idmap layer %s (idmapped mounts "
                                   "need Linux 5.12 and a filesystem that "
                                   "supports them)", o->layers[i]);
    if (syscall(SYS_move_mount, t, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      return dsec_fail(err, errno, "cannot attach layer %s", o->layers[i]);
    /* overlay lists the top layer first; relative to run/ keeps the
     * option string short */
    nl = xasprintf("lower/%zu%s%s", i, *lowers ? ":" : "", lowers);
    free(lowers);
    lowers = nl;
  }
  if (o->n_layers == 1 || s->fncall) {
    /* overlay wants two lower layers when there is no upper: an empty one */
    _cleanup_free_ char *empty = xasprintf("%s/lower/empty", s->run);
    char *nl;
    mkdir(empty, 0755);
    nl = xasprintf("%s:lower/empty", lowers);
    free(lowers);
    lowers = nl;
  }
  if (dsec_mkdir_p(AT_FDCWD, rootfs, 0755, err) < 0)
    return -1;
  {
    json_int_t mb = json_integer_value(
      json_object_get(json_object_get(s->spec, "resources"), "disk_mb"));
    _cleanup_free_ char *top = NULL;
    if (mb > 0 && !s->fncall) {
      top = disk_limited_upper(s, mb, base, err);
      if (!top)
        return -1;
      s->upperfs = xstrdup(top);
    } else
      top = xstrdup(s->dir);
    upper = xasprintf("%s/upper", top);
    work = xasprintf("%s/work", top);
  }
  if (mkdir(upper, 0755) < 0 && errno != EEXIST)
    return dsec_fail(err, errno, "cannot create %s", upper);
  if (mkdir(work, 0700) < 0 && errno != EEXIST)
    return dsec_fail(err, errno, "cannot create %s", work);
  if (chown(upper, base, base) < 0 || chown(work, base, base) < 0)
    return dsec_fail(err, errno, "cannot give the upper dir to the sandbox");
  /* Overlay metadata (opaque directories) is in user.overlay.* xattrs
   * (userxattr), as root too: a checkpoint reads the upper directory from
   * inside the sandbox's user namespace, where trusted.* cannot be read.
   * (The layers carry both; what the sandbox sets through the overlay as
   * user.overlay.* is escaped by overlayfs, so only overlayfs makes
   * markers.)
   * volatile: no syncs to the upper file system (an unmount with them syncs
   * the whole file system, milliseconds on a busy disk); a sandbox's
   * writable layer does not outlive a host crash anyway. */
  {
    const char *x = ",userxattr";
    if (s->fncall)
      opts = xasprintf("lowerdir=%s%s", lowers, x);
    else
      opts = xasprintf("lowerdir=%s,upperdir=%s,workdir=%s%s,volatile",
                       lowers, upper, work, x);
  }
  if (fchdir(s->run_fd) < 0)
    return dsec_fail(err, errno, "cannot enter %s", s->run);
  if (mount("overlay", "rootfs", "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
    return dsec_fail(err, errno, "cannot mount the overlay");
  if (chdir("/") < 0)
    return dsec_fail(err, errno, "chdir /");

  {
    _cleanup_close_ int rfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
      return dsec_fail(err, errno, "cannot open %s", rootfs);
    json_array_foreach(json_object_get(s->spec, "mounts"), i, m)
    {
      if (bind_into_root(s, rfd, m, userns, base, err) < 0)
        return -1;
    }
  }
  return 0;
}


struct attach_job {
  struct dsec_cgroup *cg;
  pid_t pid;
  struct dsec_error *err;
};

static void *attach_main(void *arg)
{
  struct attach_job *a = arg;
  dsec_cgroup_attach(a->cg, a->pid, &a->err);
  return NULL;
}

_Noreturn void dsec_supervisor_main(struct dsec_container_opts *o)
{
  struct attach_job attach = { 0 };
  char created[64];
  pthread_t attach_thread;
  bool attach_started = false;
  struct sup sv = { 0 }, *s = &sv;
  struct dsec_error *err = NULL;
  struct stage1_args a = { 0 };
  int ip[2] = { -1, -1 };
  _cleanup_free_ char *now = dsec_time_rfc3339();
  _cleanup_free_ char *userns_path = NULL;
  _cleanup_close_ int userns = -1;
  uid_t base, count;
  sigset_t mask;
  json_t *v;

  s->id = o->id;
  s->spec = o->spec;
  s->dir = dsec_sandbox_dir(o->id);
  s->run = dsec_sandbox_run_dir(o->id);
  s->epfd = s->sfd = s->lsock = s->isock = s->traj.fd = s->events_fd = -1;
  s->proxy_lfd = -1;
  s->fan_fd = -1;
  s->run_fd = -1;
  s->msgbuf = xmalloc(MSG_MAX);
  s->fncall = strcmp(json_string_value(json_object_get(o->spec, "backend")),
                     "fncall") == 0;
  s->workdir = json_string_value(json_object_get(o->spec, "workdir"));
  dsec_parse_user(json_string_value(json_object_get(o->spec, "user")), &s->uid,
                  &s->gid);
  s->ttl_s = json_integer_value(json_object_get(o->spec, "ttl_s"));
  s->idle_s = json_integer_value(json_object_get(o->spec, "idle_timeout_s"));
  s->start_ms = s->last_activity_ms = now_ms();
  s->base_env = dsec_exec_base_env(o->spec, o->environment, s->uid);

  dsec_supervisor_begin(s->dir, &mask);
  {
    _cleanup_free_ char *title = xasprintf("dsec-supervise %s", o->id);
    set_cmdline(title);
  }

  /* 1. a mount namespace of our own; rootless, inside a user namespace of
   * our own that maps its root to us (the sandbox shares it: only one id
   * is ours to map) */
  s->rootless = geteuid() != 0;
  if (s->rootless) {
    char map[64];
    uid_t uid = geteuid();
    gid_t gid = getegid();
    /* inside, we are root: pin the directories we resolved as ourselves */
    {
      _cleanup_free_ char *root = dsec_root_dir();
      _cleanup_free_ char *run = dsec_run_dir();
      setenv("DSEC_ROOT", root, 1);
      setenv("DSEC_RUN", run, 1);
    }
    if (unshare(CLONE_NEWUSER) < 0) {
      dsec_fail(&err, errno, "cannot create a user namespace (are "
                             "unprivileged user namespaces enabled?)");
      goto fail;
    }
    snprintf(map, sizeof map, "0 %u 1\n", uid);
    if (write_file("/proc/self/setgroups", "deny") < 0 ||
        write_file("/proc/self/uid_map", map) < 0) {
      dsec_fail(&err, errno, "cannot map our user id");
      goto fail;
    }
    snprintf(map, sizeof map, "0 %u 1\n", gid);
    if (write_file("/proc/self/gid_map", map) < 0) {
      dsec_fail(&err, errno, "cannot map our group id");
      goto fail;
    }
  }
  if (unshare(CLONE_NEWNS) < 0 ||
      mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
    dsec_fail(&err, errno, "cannot create a mount namespace");
    goto fail;
  }
  /* private (0700): the sandbox's processes never need a host path, its
   * init enters the root file system through a descriptor */
  {
    _cleanup_free_ char *top = dsec_run_dir();
    if (dsec_private_dir(top, &err) < 0 || dsec_private_dir(s->run, &err) < 0)
      goto fail;
  }
  s->run_fd = open(s->run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  {
    _cleanup_free_ char *tp = xasprintf("%s/trajectory.jsonl", s->dir);
    _cleanup_free_ char *ep = xasprintf("%s/events.jsonl", s->dir);
    s->traj.fd = open(tp, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    s->events_fd = open(ep, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (s->run_fd < 0 || s->traj.fd < 0 || s->events_fd < 0) {
      dsec_fail(&err, errno, "cannot open the sandbox's files");
      goto fail;
    }
    dsec_traj_load(&s->traj);
  }
  {
    /* the budget counts what the file holds and what earlier supervisors
     * of this sandbox dropped */
    _cleanup_json_ json_t *old = dsec_sandbox_state_read(o->id, NULL);
    s->audit = dsec_audit_new(s->events_fd, s->id, o->spec, old);
  }

  /* 2. cgroups */
  if (dsec_cgroup_create(o->id, json_object_get(o->spec, "resources"), &s->cg,
                         &err) < 0)
    goto fail;

  /* 3. stage1 in a new user namespace */
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ip) < 0) {
    dsec_fail(&err, errno, "cannot create the control channel");
    goto fail;
  }
  {
    int sz = MSG_MAX + 4096;
    setsockopt(ip[0], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz);
    setsockopt(ip[1], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz);
    setsockopt(ip[0], SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
    setsockopt(ip[1], SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
  }
  if (s->rootless) {
    /* the sandbox's root is our own root, which is us on the host */
    base = 0;
    count = 1;
  } else {
    struct dsec_idrange r;
    if (dsec_idrange_acquire(o->id, &r, &err) < 0)
      goto fail;
    base = r.base;
    count = r.count;
  }
  s->base = base;
  a.sock = ip[1];
  a.rootfd = -1;
  a.spec = o->spec;
  a.fncall = s->fncall;
  a.owner = s->rootless ? 0 : base;
  s->stage1_pid = (pid_t) syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, 0);
  if (s->stage1_pid == 0) {
    close(ip[0]);
    stage1(&a);
  }
  close(ip[1]);
  s->isock = ip[0];
  if (s->stage1_pid < 0) {
    dsec_fail(&err, errno, "cannot start the sandbox");
    goto fail;
  }
  if (!s->rootless) {
    char map[64], path[64];
    int fds[3], nfds;
    json_t *m = msg_recv(s->isock, s->msgbuf, MSG_MAX, fds, &nfds);
    const char *op = json_string_value(json_object_get(m, "op"));
    bool made = op && strcmp(op, "userns") == 0;
    if (!made && op && strcmp(op, "failed") == 0)
      dsec_fail(&err, (int) json_integer_value(json_object_get(m, "errno")),
                "%s", json_string_value(json_object_get(m, "msg")));
    for (int i = 0; i < nfds; i++)
      close(fds[i]);
    json_decref(m);
    if (!made) {
      if (!err)
        dsec_fail(&err, 0, "the sandbox's first process died");
      goto fail;
    }
    snprintf(map, sizeof map, "0 %u %u\n", base, count);
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int) s->stage1_pid);
    if (write_file(path, map) < 0) {
      dsec_fail(&err, errno, "cannot write the uid map");
      goto fail;
    }
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int) s->stage1_pid);
    if (write_file(path, map) < 0) {
      dsec_fail(&err, errno, "cannot write the gid map");
      goto fail;
    }
  }
  /* Moving a task into a v1 cgroup waits for an RCU grace period (~10 ms
   * here): it runs on a thread of its own while we mount. */
  attach.cg = s->cg;
  attach.pid = s->stage1_pid;
  if (pthread_create(&attach_thread, NULL, attach_main, &attach) != 0) {
    dsec_fail(&err, errno, "cannot start a thread");
    goto fail;
  }
  attach_started = true;

  /* 4. the root file system */
  userns_path = xasprintf("/proc/%d/ns/user", (int) s->stage1_pid);
  userns = open(userns_path, O_RDONLY | O_CLOEXEC);
  if (userns < 0) {
    dsec_fail(&err, errno, "cannot open the user namespace");
    goto fail;
  }
  if (mount_rootfs(s, o, userns, base, &err) < 0)
    goto fail;
  pthread_join(attach_thread, NULL);
  attach_started = false;
  if (attach.err) {
    err = steal_pointer(&attach.err);
    goto fail;
  }

  /* masked files the sandbox opens are recorded: each gets an empty file
   * of its own, watched with fanotify (root only; fncall calls mount a
   * /proc without them) */
  if (!s->rootless && !s->fncall)
    watch_masks(s);
  else
    s->audit_off = xasprintf("masked: not recorded %s",
                             s->rootless ? "rootless (fanotify needs root)"
                                         : "by the fncall backend");

  /* 5. go, with the root file system */
  {
    _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", s->run);
    _cleanup_close_ int rfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    json_t *go = json_pack("{s:s}", "op", "go");
    int r = rfd < 0 ? -1 : msg_send(s->isock, go, &rfd, 1);
    json_decref(go);
    if (r < 0) {
      dsec_fail(&err, errno, "cannot start stage1");
      goto fail;
    }
  }
  {
    int st;
    while (waitpid(s->stage1_pid, &st, 0) < 0 && errno == EINTR)
      ;
    s->stage1_pid = 0;
  }
  /* 6. init reports ready (or why not) */
  for (;;) {
    int fds[3], nfds;
    struct pollfd pf = { s->isock, POLLIN, 0 };
    json_t *m;
    const char *op;
    if (poll(&pf, 1, 60000) <= 0) {
      dsec_fail(&err, ETIMEDOUT, "the sandbox's init did not start");
      goto fail;
    }
    m = msg_recv(s->isock, s->msgbuf, MSG_MAX, fds, &nfds);
    if (m && nfds == 1 &&
        strcmp(json_string_value(json_object_get(m, "op")) ?: "", "ready") == 0) {
      s->proxy_lfd = fds[0];
      nfds = 0;
    }
    for (int i = 0; i < nfds; i++)
      close(fds[i]);
    if (!m) {
      dsec_fail(&err, 0, "the sandbox's init died while starting");
      goto fail;
    }
    op = json_string_value(json_object_get(m, "op"));
    if (op && strcmp(op, "failed") == 0) {
      json_int_t st = json_integer_value(json_object_get(m, "status"));
      dsec_error_set(&err, st ? (int) st : DSEC_EXIT_FAILURE,
                     (int) json_integer_value(json_object_get(m, "errno")),
                     "sandbox setup: %s",
                     json_string_value(json_object_get(m, "msg")));
      json_decref(m);
      goto fail;
    }
    if (op && strcmp(op, "ready") == 0) {
      const char *why =
        json_string_value(json_object_get(m, "landlock_unavailable"));
      if (json_is_object(json_object_get(m, "landlock")))
        s->landlock = json_incref(json_object_get(m, "landlock"));
      if (why)
        s->landlock_off = xstrdup(why);
      json_decref(m);
      break;
    }
    json_decref(m);
  }
  /* init is our child (CLONE_PARENT): the only one left */
  {
    char path[64];
    _cleanup_free_ char *children = NULL;
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int) getpid());
    children = dsec_read_file_at(AT_FDCWD, path, 4096, NULL, NULL);
    if (children)
      s->init_pid = (pid_t) strtol(children, NULL, 10);
  }
  if (s->init_pid <= 0) {
    dsec_fail(&err, 0, "cannot find the sandbox's init");
    goto fail;
  }

  /* 7. serve */
  s->lsock = dsec_ctl_listen(s->run_fd, s->run, &err);
  if (s->lsock < 0)
    goto fail;
  s->epfd = epoll_create1(EPOLL_CLOEXEC);
  s->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  s->w_listen = (struct watch){ W_LISTEN, NULL };
  s->w_signal = (struct watch){ W_SIGNAL, NULL };
  s->w_init = (struct watch){ W_INIT, NULL };
  if (s->epfd < 0 || s->sfd < 0 || ep_add(s, s->lsock, EPOLLIN, &s->w_listen) < 0 ||
      ep_add(s, s->sfd, EPOLLIN, &s->w_signal) < 0 ||
      ep_add(s, s->isock, EPOLLIN, &s->w_init) < 0) {
    dsec_fail(&err, errno, "cannot set up the event loop");
    goto fail;
  }
  if (s->fan_fd >= 0) {
    s->w_fan = (struct watch){ W_FANOTIFY, NULL, false };
    ep_add(s, s->fan_fd, EPOLLIN, &s->w_fan);
  }
  if (s->proxy_lfd >= 0) {
    dsec_net_events_init(&s->net, s->audit);
    s->proxy = dsec_proxy_new(json_object_get(o->spec, "network"),
                              dsec_net_events_report, &s->net);
    s->w_proxy = (struct watch){ W_PROXY, NULL, false };
    if (ep_add(s, s->proxy_lfd, EPOLLIN, &s->w_proxy) < 0) {
      dsec_fail(&err, errno, "cannot serve the proxy");
      goto fail;
    }
  }

  {
    /* the creator's time (a resumed sandbox keeps its first one) */
    _cleanup_json_ json_t *old = dsec_sandbox_state_read(o->id, NULL);
    const char *c = json_string_value(json_object_get(old, "created"));
    if (c && *c)
      snprintf(created, sizeof created, "%s", c);
    else
      snprintf(created, sizeof created, "%s", now);
  }
  s->state = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:i, s:s, s:o, s:s, "
                       "s:s}",
                       "type", "sandbox", "id", o->id, "state", "running",
                       "backend",
                       json_string_value(json_object_get(o->spec, "backend")),
                       "supervisor_pid", (int) getpid(), "supervisor_start",
                       (json_int_t) dsec_process_starttime(getpid()),
                       "init_pid", (int) s->init_pid, "created", created, "cgroup",
                       dsec_cgroup_to_json(s->cg), "rootfs", "", "socket", "");
  {
    _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", s->run);
    _cleanup_free_ char *sock = xasprintf("%s/ctl.sock", s->run);
    json_object_set_new(s->state, "rootfs", json_string(rootfs));
    json_object_set_new(s->state, "socket", json_string(sock));
    json_object_set_new(s->state, "idmap",
                        json_pack("{s:I, s:I}", "host_base", (json_int_t) base,
                                  "count", (json_int_t) count));
  }
  if ((v = json_object_get(o->spec, "name")))
    json_object_set(s->state, "name", v);
  if (s->audit_off)
    json_object_set_new(s->state, "audit_unavailable", json_string(s->audit_off));
  if (s->landlock)
    json_object_set(s->state, "landlock", s->landlock);
  if (s->landlock_off)
    json_object_set_new(s->state, "landlock_unavailable",
                        json_string(s->landlock_off));
  {
    _cleanup_free_ char *boot = dsec_boot_id();
    if (boot)
      json_object_set_new(s->state, "boot_id", json_string(boot));
  }
  sup_write_state(s);
  sup_event(s, json_pack("{s:s, s:s, s:O}", "type", "created", "backend",
                         json_string_value(json_object_get(o->spec, "backend")),
                         "labels", json_object_get(o->spec, "labels")));
  dsec_supervisor_report(o->ready_fd, json_pack("{s:b}", "ok", true));
  close(o->ready_fd);
  o->ready_fd = -1;
  sup_loop(s);

fail:
  if (attach_started)
    pthread_join(attach_thread, NULL);
  dsec_supervisor_report(o->ready_fd, json_pack("{s:b, s:s, s:i, s:i}", "ok", false, "error",
                                err ? err->msg : "unknown error", "status",
                                err ? err->status : 1, "errno",
                                err ? err->errnum : 0));
  if (s->stage1_pid > 0)
    kill(s->stage1_pid, SIGKILL);
  if (s->cg)
    dsec_cgroup_destroy(s->cg, NULL);
  _exit(1);
}
