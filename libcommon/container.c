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
#include <linux/sockios.h>
#include <malloc.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/fanotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <seccomp.h>

#include "audit.h"
#include "cgroup.h"
#include "crash.h"
#include "ctl.h"
#include "engine.h"
#include "exec.h"
#include "fsutil.h"
#include "guest.h"
#include "idrange.h"
#include "landlock.h"
#include "layermount.h"
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

/* Returns the message (new ref) and its descriptors; NULL on EOF/error.
 * *from (if not NULL): the sender's pid as we number it, where the
 * socket passes credentials (SO_PASSCRED), else 0. */
static json_t *msg_recv_from(int sock, char *buf, size_t cap, int *fds,
                             int *nfds, pid_t *from)
{
  union {
    char b[CMSG_SPACE(3 * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
    struct cmsghdr align;
  } u;
  struct iovec iov = { buf, cap - 1 };
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = u.b, .msg_controllen = sizeof u.b };
  ssize_t n;

  *nfds = 0;
  if (from)
    *from = 0;
  do
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return NULL;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
        c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
      struct ucred uc;
      memcpy(&uc, CMSG_DATA(c), sizeof uc);
      if (from)
        *from = uc.pid;
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int k = (int) ((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      if (k > 3)
        k = 3;
      memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t) k);
      *nfds = k;
    }
  buf[n] = '\0';
  return json_loadb(buf, (size_t) n, 0, NULL);
}

static json_t *msg_recv(int sock, char *buf, size_t cap, int *fds, int *nfds)
{
  return msg_recv_from(sock, buf, cap, fds, nfds, NULL);
}

/* ---- init */

struct init_ctx {
  int sock;
  bool fncall;
  bool sys_shared; /* /sys is the host's shared sysfs, attached already */
  bool templated;  /* the mount namespace is the template's copy: its root
                    * is the sandbox's, the device nodes are bound */
  struct dsec_bpf filter;        /* denials go to a listener (audited) */
  struct dsec_bpf filter_plain;  /* denials fail at once (no listener) */
  int last_cap;
  char *tmp_size; /* tmpfs size option for fncall's /tmp and workdir */
  int ll_abi;     /* the kernel's Landlock ABI, 0 without Landlock */
  json_t *protect; /* fncall and exclusive execs: the spec's protect,
                    * planned again per call */
  bool exclusive;  /* an exclusive exec (the supervisor's child, not init's) */
  char *stack;     /* where a child that shares our memory runs (spawn_stack) */
  uint64_t token;  /* the exec's own execve passes it (not notified: the
                    * child tells its start, exec_started); 0: none */
  bool vfork_ok;   /* such a child may change its credentials (see
                    * init_spawn) */
  bool bset_dropped; /* our bounding set is empty: so is our children's */
  /* fncall: the next call's process, made ahead (warm_spawn) */
  pid_t warm_pid;  /* 0: none */
  int warm_sock;   /* where its request goes */
  bool warm_ready; /* it has made its mounts and installed its filter */
  bool warm_off;   /* one failed to prepare: calls start as they come */
  bool ahead;      /* (in that process) a call made ahead: all its mounts
                    * are made and its filter installed (warm_spawn) */
  int warm_lfd;    /* (in that process) the filter's listener, or -1 */
  char *workdir;   /* the spec's working directory */
};

/* Paths masked in /proc and /sys: files get a watched empty file (or
 * /dev/null), directories an empty read-only directory (mask_paths).
 * kpage* let a reader walk physical memory state
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

/* In the sandbox's /dev (make_dev): the mask files, and the empty
 * directory bound over masked directories */
#define MASKS ".dsec"
#define MASK_DIR MASKS "/dir"
#define MASK_EMPTY MASKS "/empty"

/* The sandbox's /dev (make_dev): the host's device nodes bound over
 * empty files (a user namespace cannot mknod), and links */
static const char *const dev_nodes[] = { "null", "zero", "full", "random",
                                         "urandom", "tty" };
static const char *const dev_links[][2] = {
  { "fd", "/proc/self/fd" },     { "stdin", "/proc/self/fd/0" },
  { "stdout", "/proc/self/fd/1" }, { "stderr", "/proc/self/fd/2" },
  { "ptmx", "pts/ptmx" },
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


/* The mount at path is read-only, nosuid, nodev and noexec. */
static bool mask_flags_set(const char *path)
{
  const unsigned long all = ST_RDONLY | ST_NOSUID | ST_NODEV | ST_NOEXEC;
  struct statvfs sv;
  return statvfs(path, &sv) == 0 && (sv.f_flag & all) == all;
}

/* Masks run inside the sandbox's root (once it is init's root), so no
 * path can lead out of it.  Files get a watched empty file (or an empty
 * one nobody watches),
 * directories the mask file system's empty directory: a bind, not a tmpfs
 * each, because every superblock takes a shrinker id that each memory
 * cgroup on the host then carries a slot for (1 KiB per 64 ids, the high
 * mark never shrinks), so file systems per sandbox cost memory that grows
 * with the square of the density.  Also used by exclusive execs over
 * their own /proc. */
static int mask_paths(const char **failed)
{
  for (const char *const *p = readonly_paths; *p; p++) {
    struct stat st;
    if (lstat(*p, &st) == 0 && S_ISDIR(st.st_mode))
      dsec_guest_bind_ro(*p);
  }
  for (size_t i = 0; masked_paths[i]; i++) {
    const char *p = masked_paths[i];
    struct stat st;
    char src[64];
    int r;
    if (lstat(p, &st) < 0)
      continue;
    /* an empty file of its own that the supervisor watches (fanotify):
     * opening a masked file is recorded; an empty file nobody watches for
     * a file it made none for.  The supervisor made them in the sandbox's
     * /dev (make_dev), never files of the image or of a checkpoint. */
    if (S_ISDIR(st.st_mode))
      snprintf(src, sizeof src, "/dev/%s", MASK_DIR);
    else
      snprintf(src, sizeof src, "/dev/%s/%zu", MASKS, i);
    r = mount(src, p, NULL, MS_BIND, NULL);
    if (r < 0 && errno == ENOENT && !S_ISDIR(st.st_mode))
      r = mount("/dev/" MASK_EMPTY, p, NULL, MS_BIND, NULL);
    /* a bind has its source mount's flags: /dev's read-only, nosuid,
     * nodev, noexec (make_dev), checked, then said again only where one
     * is missing (a remount takes the host's global mount lock: 25 a
     * sandbox, and every exclusive exec's) */
    if (r == 0 && !mask_flags_set(p))
      r = mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                                 MS_NODEV | MS_NOEXEC, NULL);
    if (r < 0) {
      /* a sandbox or an exec without its masks does not start */
      *failed = p;
      return -1;
    }
  }
  return 0;
}

static int mkdirs(const char *path, mode_t mode)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  return dsec_mkdir_p(AT_FDCWD, path, mode, &e);
}

/* Device nodes are the host's, bound in over make_dev's empty files. */
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

/* After pivot_root, in the /dev the supervisor made (make_dev): the
 * host's device nodes (which the supervisor binds itself where the
 * namespace is the template's: no host path is seen here then). */
static void setup_dev(struct dev_trees *d, int sock)
{
  for (size_t i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
    char path[64];
    snprintf(path, sizeof path, "/dev/%s", dev_nodes[i]);
    if (attach(d->fd[i], path) < 0)
      die_init(sock, "cannot bind %s", path);
  }
}


/* protect and hide (guest.c), inside the sandbox's root; a failure of
 * either ends the setup. */
static void protect_and_hide(json_t *spec, int sock)
{
  char why[4200];
  bool bad = false;
  if (dsec_guest_protect(json_object_get(spec, "protect"), why, sizeof why,
                         &bad) < 0 ||
      dsec_guest_hide(json_object_get(spec, "hide"), "/dev/shm", why,
                      sizeof why) < 0) {
    errno = 0; /* in the message */
    die_init_status(sock, bad ? DSEC_EXIT_INPUT : DSEC_EXIT_FAILURE, "%s", why);
  }
}

/* A task world's member: every member's name in /etc/hosts, on the
 * world's one loopback (the agent: "agent" and its services' names; a
 * service: world.names).  Written inside the sandbox's own root, as its
 * root: a link there points into the sandbox, never out of it. */
static void world_hosts(json_t *spec, int sock)
{
  json_t *names = json_object_get(json_object_get(spec, "world"), "names");
  json_t *svcs = json_object_get(spec, "services"), *v;
  _cleanup_free_ char *line = xstrdup("127.0.0.1\tlocalhost");
  size_t i;
  int fd;

  if (!names && !svcs)
    return;
  if (svcs) {
    char *l = xasprintf("%s agent", line);
    free(line);
    line = l;
  }
  json_array_foreach(svcs ? svcs : names, i, v)
  {
    const char *n = json_string_value(svcs ? json_object_get(v, "name") : v);
    char *l = xasprintf("%s %s", line, n);
    free(line);
    line = l;
  }
  {
    char *l = xasprintf("%s\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                        line);
    free(line);
    line = l;
  }
  mkdirs("/etc", 0755);
  unlink("/etc/hosts");
  fd = open("/etc/hosts", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
            0644);
  if (fd < 0 || dsec_write_all(fd, line, strlen(line), NULL) < 0)
    die_init(sock, "cannot write /etc/hosts");
  close(fd);
}

/* init's own setup, in the new namespaces, starting in the sandbox's root
 * (stage1 entered it through a descriptor, so no host path has to be
 * traversable by the sandbox's unprivileged host uid). */
static void init_setup(struct init_ctx *c, json_t *spec)
{
  const char *workdir = json_string_value(json_object_get(spec, "workdir"));
  struct dev_trees dev;
  int t;

  c->workdir = xstrdup(workdir ? workdir : "/");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    die_init(c->sock, "cannot make mounts private");
  if (!c->templated) {
    /* the mounts we inherited are locked to this namespace; pivot_root
     * needs a root mount of our own: a recursive copy of the root,
     * attached on itself */
    t = (int) syscall(SYS_open_tree, AT_FDCWD, ".",
                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (t < 0 || syscall(SYS_move_mount, t, "", AT_FDCWD, ".",
                         MOVE_MOUNT_F_EMPTY_PATH) < 0 || fchdir(t) < 0)
      die_init(c->sock, "cannot bind the root file system");
    close(t);
    open_dev_trees(&dev, c->sock);
  }
  /* proc and sysfs while the host's are still visible (the kernel allows
   * a new one only then; the template's hidden ones count), at paths
   * resolved inside the root */
  mkdirat(AT_FDCWD, "proc", 0555);
  mkdirat(AT_FDCWD, "sys", 0555);
  if (mount_in_root("proc", "proc", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                        MOUNT_ATTR_NOEXEC) < 0)
    die_init(c->sock, "cannot mount /proc");
  /* /sys: the host's shared sysfs, which the supervisor attached, or one
   * of our own.  A world's service is in the agent's network namespace,
   * which is not its user namespace's: the kernel ties sysfs to the
   * network namespace and refuses it one; it then gets an empty
   * read-only /sys */
  if (!c->sys_shared &&
      mount_in_root(json_object_get(spec, "world") ? "tmpfs" : "sysfs", "sys",
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                      MOUNT_ATTR_NOEXEC) < 0)
    die_init(c->sock, "cannot mount /sys");
  /* (the template's copy has the sandbox's root for its own already) */
  if (!c->templated &&
      (syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0))
    die_init(c->sock, "cannot pivot_root");
  if (chdir("/") < 0)
    die_init(c->sock, "cannot enter the root file system");

  /* from here on every path is the sandbox's; the masks first */
  {
    const char *bad = NULL;
    if (mask_paths(&bad) < 0)
      die_init(c->sock, "cannot mask %s", bad);
  }
  if (!c->templated)
    setup_dev(&dev, c->sock);
  /* without it, /dev/ptmx leads nowhere and no terminal can be had */
  mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=620");
  mkdirs("/tmp", 01777);
  if (workdir && strcmp(workdir, "/") != 0)
    mkdirs(workdir, 0755);
  protect_and_hide(spec, c->sock);

  if (sethostname("dsec", 4) < 0)
    die_init(c->sock, "cannot set the host name");
  world_hosts(spec, c->sock);
  dsec_guest_loopback_up();
  if (c->fncall) {
    /* calls share nothing: the root is read-only, each call gets its own
     * /tmp and work dir */
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                                 MS_NODEV, NULL) < 0)
      die_init(c->sock, "cannot make the root read-only");
  }
}

/* A seccomp filter's listener lfd (closed here), handed to the
 * supervisor for exec xid over fd 3 (init's control socket, still open
 * here).  *tells: the command's start is to be told on fd 3 (with a
 * token, the socket stays open until the execve, close-on-exec, for
 * exec_started); if not, the command's process closes it. */
static int send_listener(struct init_ctx *c, int lfd, uint64_t xid,
                         bool *tells)
{
  json_t *m = json_pack("{s:s, s:I}", "op", "listener", "xid",
                        (json_int_t) xid);
  int r = msg_send(3, m, &lfd, 1), e = errno;
  json_decref(m);
  close(lfd);
  *tells = r == 0 && c->token;
  errno = e;
  return r;
}

/* The seccomp filter with a user-notification listener (*lfd), or where
 * the kernel refuses one the filter without (*lfd -1: denials then fail
 * silently).  -1 with errno when neither can be installed. */
static int filter_in(struct init_ctx *c, int *lfd)
{
  *lfd = dsec_seccomp_install(&c->filter, true);
  return *lfd >= 0 ? 0 : dsec_seccomp_install(&c->filter_plain, false);
}

/* The seccomp filter, its listener handed to the supervisor, which
 * answers denied calls with their error and records them. */
static int install_filter(struct init_ctx *c, uint64_t xid, bool *tells)
{
  int lfd, r = filter_in(c, &lfd), e;
  *tells = false;
  if (r == 0 && lfd >= 0)
    r = send_listener(c, lfd, xid, tells);
  e = errno;
  if (!*tells)
    close(3);
  errno = e;
  return r;
}

/* The capabilities no exec keeps: the bounding set (unless init emptied
 * it for all its children) and the ambient set. */
static void drop_unkept(struct init_ctx *c)
{
  if (!c->bset_dropped)
    for (int cap = 0; cap <= c->last_cap; cap++)
      prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

static void drop_privileges(struct init_ctx *c, uid_t uid, gid_t gid,
                            uint64_t xid, uint32_t keep, bool *tells)
{
  struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct d[2] = { { keep, keep, 0 } };

  if (!c->ahead) /* (done: warm_seal) */
    drop_unkept(c);
  /* rootless, setgroups is denied in the user namespace (EPERM) and the
   * supplementary groups are the host user's, unmapped */
  if ((setgroups(0, NULL) < 0 && errno != EPERM) ||
      setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
    dprintf(STDERR_FILENO, "dsec: cannot switch to user %u:%u: %s\n", uid,
            gid, strerror(errno));
    _exit(125);
  }
  /* (a call made ahead has its filter: warm_seal, warm_listener) */
  if (syscall(SYS_capset, &h, d) < 0 ||
      (!c->ahead && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
                     install_filter(c, xid, tells) < 0))) {
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
/* The reaper's part: waits for the command (cmd) and leaves with its
 * status given to the relay (sp >= 0), or to the supervisor (on init's
 * socket at 3, for the exec xid: see init_message) once every other
 * process of the call is gone: the supervisor answers the call on that
 * message, as the relay's end told before that the call's processes
 * died with its pid namespace. */
_Noreturn static void call_reap(pid_t cmd, int sp, uint64_t xid)
{
  struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct none[2] = { { 0 } };
  struct __user_cap_data_struct kill_only[2] = {
    { 1u << CAP_KILL, 1u << CAP_KILL, 0 }
  };
  pid_t pid;
  int status = 0, devnull;

  /* the reaper needs nothing but to kill what the call leaves (its
   * processes may be another user's): no other capability, no standard
   * streams (the exec's pipes end with the command); its name says what
   * it is */
  prctl(PR_SET_NAME, "dsec-call", 0, 0, 0);
  syscall(SYS_capset, &h, sp >= 0 ? none : kill_only);
  devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; fd++)
    if (devnull >= 0)
      dup2(devnull, fd);
  for (;;) {
    pid = waitpid(-1, &status, 0);
    if (pid == cmd)
      break;
    if (pid < 0 && errno != EINTR)
      _exit(125);
  }
  if (sp >= 0) {
    if (write(sp, &status, sizeof status) != (ssize_t) sizeof status)
      _exit(125);
  } else {
    json_t *m;
    /* every process of the pid namespace but us, until none is left (a
     * fork may race a round: another round takes its child) */
    for (;;) {
      kill(-1, SIGKILL);
      pid = waitpid(-1, NULL, 0);
      if (pid < 0 && errno == ECHILD)
        break;
      if (pid < 0 && errno != EINTR)
        _exit(125);
    }
    syscall(SYS_capset, &h, none);
    m = json_pack("{s:s, s:I, s:i}", "op", "status", "xid", (json_int_t) xid,
                  "status", status);
    if (!m || msg_send(3, m, NULL, 0) < 0)
      _exit(125);
  }
  _exit(0);
}

/* PID 1 of a call's pid namespace: not the command (the kernel keeps
 * from PID 1 the signals it has no handler for, so `kill $$` would not
 * end it), but its reaper.  The command is its child; when it ends, PID 1
 * gives its status to the relay (sp) and exits, and every process the
 * call left behind dies with the namespace.  Returns in the command. */
static void call_split(int sp)
{
  pid_t cmd = fork();

  if (cmd < 0)
    _exit(125);
  if (cmd == 0) {
    close(sp);
    return;
  }
  call_reap(cmd, sp, 0);
}

static void call_mounts(struct init_ctx *c, const char *workdir);

static void call_enter(struct init_ctx *c, const char *workdir, int *life)
{
  pid_t pid;
  int status, lp[2] = { -1, -1 }, sp[2] = { -1, -1 };

  if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC) < 0) {
    dprintf(STDERR_FILENO, "dsec: cannot isolate the call: %s\n",
            strerror(errno));
    _exit(125);
  }
  if ((c->exclusive && pipe2(lp, O_CLOEXEC) < 0) || pipe2(sp, O_CLOEXEC) < 0)
    _exit(125);
  pid = fork();
  if (pid < 0)
    _exit(125);
  if (pid > 0) {
    /* relay the call's status, signal included: the command's, as PID 1
     * tells it (else PID 1's own) */
    int told;
    if (lp[0] >= 0)
      close(lp[0]);
    close(sp[1]);
    while (waitpid(pid, &status, 0) < 0)
      if (errno != EINTR)
        _exit(125);
    if (read(sp[0], &told, sizeof told) == (ssize_t) sizeof told)
      status = told;
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
  close(sp[0]);
  *life = lp[0];
  call_mounts(c, workdir);
  call_split(sp[1]);
}

static _Noreturn void call_mount_failed(void)
{
  dprintf(STDERR_FILENO, "dsec: cannot prepare the call: %s\n",
          strerror(errno));
  _exit(125);
}

/* A call's own /proc, /dev/shm, and for fncall /tmp, in its new mount
 * namespace: what does not depend on the request. */
static void call_base_mounts(struct init_ctx *c)
{
  if (c->exclusive) {
    const char *bad = NULL;
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) < 0)
      call_mount_failed();
    if (mask_paths(&bad) < 0) {
      dprintf(STDERR_FILENO, "dsec: cannot mask %s: %s\n", bad,
              strerror(errno));
      _exit(125);
    }
  } else if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   "subset=pid") < 0)
    /* the call's own /proc shows its processes and nothing of the
     * kernel's (subset=pid: no sysctls, no kpage* or kcore files) */
    call_mount_failed();
  /* calls share no SysV IPC (own IPC namespace) or POSIX shared memory */
  if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
            "mode=1777,size=67108864") < 0)
    call_mount_failed();
  if (!c->exclusive &&
      mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, c->tmp_size) < 0)
    call_mount_failed();
}

/* An fncall call's working directory gets a clean tmpfs of its own,
 * unless it is / (the read-only root) or /tmp (clean already). */
static bool own_tmpfs(const char *workdir)
{
  return strcmp(workdir, "/") != 0 && strcmp(workdir, "/tmp") != 0;
}

/* fncall: the call's clean working directory (call_mounts). */
static void call_workdir_mount(struct init_ctx *c, const char *workdir)
{
  if (c->exclusive || !own_tmpfs(workdir))
    return;
  if (mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, c->tmp_size) < 0) {
    /* as any exec: a working directory it cannot enter is 126 */
    if (errno == ENOENT || errno == ENOTDIR || errno == EACCES) {
      dprintf(STDERR_FILENO, "dsec: cannot enter %s: %s\n", workdir,
              strerror(errno));
      _exit(DSEC_EXIT_CANNOT_EXEC);
    }
    call_mount_failed();
  }
}

/* The call's mounts, and for fncall a clean working directory; a call
 * made ahead has them all (warm_spawn, warm_fits). */
static void call_mounts(struct init_ctx *c, const char *workdir)
{
  if (c->ahead)
    return;
  call_base_mounts(c);
  call_workdir_mount(c, workdir);
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


/* An exec's start in the sandbox (dsec_guest_exec), with the container's
 * own steps: fncall calls and exclusive execs enter namespaces of their
 * own and their Landlock domain; the privileges go with the seccomp
 * filter; an exclusive exec then dies with its relay. */
struct exec_run {
  struct init_ctx *c;
  uint64_t xid;
  int life; /* the relay's pipe (call_enter), or -1 */
  uint32_t caps; /* kept (the sandbox's root copying files), else 0 */
  const struct dsec_guest_exec *x;
  bool tells;    /* the listener is the supervisor's (or goes with the
                  * first start, listener_at4), and init's socket (3)
                  * still open: exec_started */
  bool listener_at4; /* a call made ahead: its listener is at 4, not yet
                      * the supervisor's (warm_listener) */
};

/* The command of an fncall call, in a child of its reaper that shares
 * the reaper's memory until it runs the command. */
static int call_command(void *ud)
{
  struct exec_run *r = ud;
  fncall_landlock(r->c);
  dsec_guest_exec_finish(r->x);
}

/* An fncall call: init started us as PID 1 of the call's own pid, mount
 * and IPC namespaces (init_spawn), so no relay stands between init and
 * the call.  After the call's mounts the command is our child, started
 * with CLONE_VM | CLONE_VFORK (nothing of our memory is copied; we wait
 * until it runs the command, and have nothing else to do), and we stay
 * its reaper; the command's status goes to the supervisor before we
 * exit (call_reap). */
_Noreturn static void call_run(struct exec_run *r, const char *cwd)
{
  pid_t cmd;

  prctl(PR_SET_NAME, "dsec-call", 0, 0, 0);
  call_mounts(r->c, cwd);
  cmd = clone(call_command, r->c->stack, CLONE_VM | CLONE_VFORK | SIGCHLD, r);
  if (cmd < 0) {
    dprintf(STDERR_FILENO, "dsec: cannot start the call: %s\n",
            strerror(errno));
    _exit(125);
  }
  /* the listener was the command's to hand over */
  if (r->x->keep_listener)
    close(4);
  call_reap(cmd, -1, r->xid);
}

static void exec_enter(void *ud, const char *cwd)
{
  struct exec_run *r = ud;
  if (r->c->exclusive) {
    call_enter(r->c, cwd, &r->life);
    fncall_landlock(r->c);
  } else if (r->c->fncall)
    call_run(r, cwd);
}

/* A call made ahead, in its command's process: its listener (at 4, see
 * warm_run) goes to the supervisor with the command's start, one message
 * less to wake it than a listener of its own (exec_started); where no
 * start is told (a copy, or no token), it goes now, before anything the
 * filter notifies.  Without a listener (warm_seal fell back to the filter
 * without), as install_filter. */
static void warm_listener(struct exec_run *r)
{
  if (!r->listener_at4)
    r->tells = false;
  else if (r->c->token && !r->x->builtin)
    r->tells = true;
  else if (send_listener(r->c, 4, r->xid, &r->tells) < 0) {
    dprintf(STDERR_FILENO, "dsec: cannot drop privileges: %s\n",
            strerror(errno));
    _exit(125);
  } else
    r->listener_at4 = false;
  if (!r->tells)
    close(3);
}

static void exec_drop(void *ud, uid_t uid, gid_t gid)
{
  struct exec_run *r = ud;
  drop_privileges(r->c, uid, gid, r->xid, uid == 0 ? r->caps : 0, &r->tells);
  if (r->c->ahead)
    warm_listener(r);
}

/* Before each execve of the command (with the token, so not notified):
 * the start the supervisor would have seen, told on init's socket; the
 * supervisor takes our pid from the socket's credentials.  An exec whose
 * start cannot be told does not start (as a notified execve fails when
 * the listener is gone). */
static void exec_started(void *ud, const char *path, char *const argv[])
{
  struct exec_run *r = ud;
  json_t *m, *a;
  size_t total = 0;
  if (!r->tells)
    return;
  /* as much as the supervisor reads of a notified one (remote_argv): one
   * argument and one byte more than the audit log keeps */
  a = json_array();
  for (size_t i = 0; i <= DSEC_AUDIT_ARGV_MAX && argv[i] &&
                     total <= DSEC_AUDIT_ARGV_BYTES; i++) {
    size_t n = strnlen(argv[i], DSEC_AUDIT_ARG_MAX + 1);
    total += n;
    json_array_append_new(a, dsec_json_utf8(argv[i], n));
  }
  m = json_pack("{s:s, s:I, s:o, s:o}", "op", "started", "xid",
                (json_int_t) r->xid, "path", dsec_json_utf8(path, strlen(path)),
                "argv", a);
  /* a call made ahead's listener comes with its first start; a failure to
   * hand it over is told as in a call started as it comes */
  if (!m || msg_send(3, m, r->listener_at4 ? (int[]){ 4 } : NULL,
                     r->listener_at4 ? 1 : 0) < 0) {
    if (r->listener_at4)
      dprintf(STDERR_FILENO, "dsec: cannot drop privileges: %s\n",
              strerror(errno));
    _exit(DSEC_EXIT_INTERNAL);
  }
  json_decref(m);
  if (r->listener_at4) {
    close(4);
    r->listener_at4 = false;
  }
}

static void exec_last(void *ud)
{
  struct exec_run *r = ud;
  if (r->tells && r->x->builtin) {
    /* a copy starts nothing: init's socket goes now */
    close(3);
    r->tells = false;
  }
  if (r->life >= 0) {
    /* the parent-death signal goes with every change of credentials:
     * set now, then check the relay has not died already */
    struct pollfd pf = { r->life, POLLIN, 0 };
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || poll(&pf, 1, 0) != 0)
      _exit(DSEC_EXIT_INTERNAL);
    close(r->life);
  }
}

/* An exec's start as x (its argv and envp arrays are new: free them),
 * with r its container steps. */
static void exec_prepare(struct init_ctx *c, json_t *req, int *fds,
                         struct exec_run *r, struct dsec_guest_exec *x)
{
  *r = (struct exec_run){
    c, (uint64_t) json_integer_value(json_object_get(req, "xid")), -1, 0, x
  };
  /* dsec's copies run as the sandbox's root with what a root's cp needs,
   * in the sandbox's user namespace only (no process of the sandbox can
   * trace a process with capabilities it lacks) */
  if (json_string_value(json_object_get(req, "builtin")))
    r->caps = 1u << CAP_CHOWN | 1u << CAP_DAC_OVERRIDE |
              1u << CAP_DAC_READ_SEARCH | 1u << CAP_FOWNER | 1u << CAP_FSETID;
  *x = (struct dsec_guest_exec){
    .fds = { fds[0], fds[1], fds[2] },
    /* init's socket, until the filter's listener is handed over */
    .keep = 3,
    .enter = exec_enter,
    .drop = exec_drop,
    .last = exec_last,
    .ud = r,
    .token = c->token,
    .started = c->token ? exec_started : NULL,
  };
  dsec_guest_exec_from(x, req);
}

static void init_exec_child(struct init_ctx *c, json_t *req, int *fds)
{
  struct exec_run r;
  struct dsec_guest_exec x;
  exec_prepare(c, req, fds, &r, &x);
  dsec_guest_exec(&x);
}

#define SPAWN_STACK (256u << 10)

/* The top of the stack that children sharing our memory run on, made
 * once (only its touched pages cost memory); NULL when it cannot be.  One
 * is enough: such a child runs while we wait (CLONE_VFORK). */
static char *spawn_stack(struct init_ctx *c)
{
  if (!c->stack) {
    void *p = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
      return NULL;
    c->stack = (char *) p + SPAWN_STACK;
  }
  return c->stack;
}

static int spawn_child(void *x)
{
  dsec_guest_exec(x);
}

/* A child of ours (forked, as fork returns) that is PID 1 of a call's
 * own mount, pid and IPC namespaces. */
static pid_t call_clone(void)
{
  return (pid_t) syscall(SYS_clone, CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC |
                                      SIGCHLD,
                         NULL, NULL, NULL, 0);
}

/* What a call made ahead does before its request, after its mounts: the
 * reset of a fresh program's signals and session, the capability sets
 * that no exec keeps, and the seccomp filter, whose install (the kernel
 * checks, translates and compiles it, then runs it for every system call
 * number to cache the ones it always allows) was the largest step left
 * between a call's request and its command.  Its listener goes to the
 * supervisor from the command's process (warm_run, warm_listener).  The
 * filter denies mount(2): every mount of the call is made before
 * (warm_fits). */
static void warm_seal(struct init_ctx *c)
{
  dsec_guest_exec_reset();
  drop_unkept(c);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
      filter_in(c, &c->warm_lfd) < 0)
    _exit(DSEC_EXIT_INTERNAL);
}

/* The call's request (req, with its pipes fds) in the call made ahead,
 * whose process is to be the call's reaper: its listener stays at 4 for
 * the command's process to hand over (warm_listener); fd 3 stays in the
 * reaper, which tells the call's status on it. */
_Noreturn static void warm_run(struct init_ctx *c, json_t *req, int *fds)
{
  struct exec_run r;
  struct dsec_guest_exec x;

  exec_prepare(c, req, fds, &r, &x);
  x.reset = true;
  if (c->warm_lfd >= 0) {
    x.keep_listener = true;
    x.listener = c->warm_lfd;
    r.listener_at4 = true;
    c->warm_lfd = -1;
  }
  dsec_guest_exec(&x);
}

/* Whether the call made ahead can take req.  Its working directory is
 * the spec's, made when it is one of its own (call_workdir_mount), and
 * its filter lets it mount no other: a call elsewhere starts as it comes,
 * and so does a call in / or /tmp where the spec's directory is covered
 * by a tmpfs (it would see that tmpfs, not the image's directory). */
static bool warm_fits(const struct init_ctx *c, json_t *req)
{
  const char *cwd = json_string_value(json_object_get(req, "cwd"));
  if (!cwd)
    cwd = "/";
  return own_tmpfs(cwd) ? strcmp(cwd, c->workdir) == 0
                        : !own_tmpfs(c->workdir);
}

/* fncall: the next call, made ahead.  A call's process is PID 1 of its
 * own pid, mount and IPC namespaces, with its own /proc, /dev/shm, /tmp
 * and working directory (call_mounts): none of that depends on the
 * request, and making it (a copy of init, of the sandbox's mount table, a
 * new IPC namespace, four mounts) is most of what an fncall call costs
 * more than a container's exec; nor does its seccomp filter (warm_seal).
 * So while a call runs, init makes the next one's process, which tells
 * it is ready once it has those and then waits for its request on a
 * socket of its own; the next call is handed to it (warm_hand).  Each
 * such process serves one call and is never reused: calls still share
 * nothing.  It is made when init holds no call's pipes or terminal (they
 * are closed as soon as a request is handled); besides its socket it has
 * init's (3), which every call has, its signalfd (which reads only its
 * own signals), its listener and /dev/null, all closed before the
 * command runs. */
static void warm_spawn(struct init_ctx *c, char *buf)
{
  int sp[2], fds[3], nfds;
  pid_t pid;
  json_t *req;

  if (c->warm_pid > 0 || c->warm_off || !spawn_stack(c))
    return;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return;
  pid = call_clone();
  if (pid < 0) {
    close(sp[0]);
    close(sp[1]);
    return;
  }
  if (pid > 0) {
    close(sp[1]);
    c->warm_pid = pid;
    c->warm_sock = sp[0];
    c->warm_ready = false;
    return;
  }
  prctl(PR_SET_NAME, "dsec-call", 0, 0, 0);
  close(sp[0]);
  /* a failure here exits before we are ready: init then starts every
   * call as it comes, and the call tells the failure */
  call_base_mounts(c);
  call_workdir_mount(c, c->workdir);
  warm_seal(c);
  c->ahead = true;
  if (write(sp[1], "r", 1) != 1)
    _exit(DSEC_EXIT_INTERNAL);
  req = msg_recv(sp[1], buf, MSG_MAX, fds, &nfds);
  /* no request: init dropped us; a bad one: the call failed */
  if (!req || nfds != 3)
    _exit(DSEC_EXIT_INTERNAL);
  close(sp[1]);
  warm_run(c, req, fds);
}

/* Ends the call made ahead, if any (reaped as any orphan). */
static void warm_drop(struct init_ctx *c)
{
  if (c->warm_pid <= 0)
    return;
  kill(c->warm_pid, SIGKILL);
  close(c->warm_sock);
  c->warm_pid = 0;
}

/* Hands the call req (with its pipes, fds) to the call made ahead, once
 * it is ready: true when it has it (it is then the job's process, *pid).
 * One that is not ready yet stays for a later call; one that cannot take
 * the request is dropped; the call then starts as it comes. */
static bool warm_hand(struct init_ctx *c, json_t *req, const int *fds,
                      pid_t *pid)
{
  char b;

  if (c->warm_pid <= 0)
    return false;
  if (!c->warm_ready) {
    ssize_t n = recv(c->warm_sock, &b, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      return false;
    if (n != 1) {
      warm_drop(c);
      return false;
    }
    c->warm_ready = true;
  }
  if (msg_send(c->warm_sock, req, fds, 3) < 0) {
    if (errno != EMSGSIZE) /* else it may take a smaller one */
      warm_drop(c);
    return false;
  }
  *pid = c->warm_pid;
  close(c->warm_sock);
  c->warm_pid = 0;
  return true;
}

/* Starts an exec in a child of ours: its pid, or -1 with errno.
 *
 * A container's exec shares our memory until it runs its command
 * (CLONE_VM | CLONE_VFORK): no copy of init's page tables and mappings
 * (a fork of init is a copy of the supervisor's ~120 of them) and no
 * copy-on-write faults after it, nor the teardown of that copy at its
 * execve, which were most of what an exec cost.  We wait meanwhile, so
 * nothing else runs on that memory; what the child allocates it frees
 * before its execve, and its argv and envp are ours (freed here).  Not
 * so for dsec's own copies (builtin: the copy runs in the child and would
 * keep us waiting), nor where a process becomes user-dumpable when it
 * changes credentials (fs.suid_dumpable=1): the child becomes the
 * sandbox's user before its execve, and init's memory must never be open
 * to the sandbox's processes.  (The supervisor keeps its messages to us
 * from ever blocking it, see ctr_exec: the child's execve waits for the
 * supervisor's answer to its seccomp notification while we wait for it.)
 *
 * An fncall call's child is PID 1 of a new pid, mount and IPC namespace
 * (call_run), forked: it stays, as the call's reaper. */
static pid_t init_spawn(struct init_ctx *c, json_t *req, int *fds)
{
  struct exec_run r;
  struct dsec_guest_exec x;
  char *stack = spawn_stack(c);
  pid_t pid = 0;
  int e;

  if (c->fncall && warm_fits(c, req) && warm_hand(c, req, fds, &pid))
    return pid;
  exec_prepare(c, req, fds, &r, &x);
  if (c->fncall && !stack) {
    errno = ENOMEM;
    pid = -1;
  } else if (c->fncall) {
    pid = call_clone();
    if (pid == 0)
      dsec_guest_exec(&x);
  } else if (stack && c->vfork_ok && !x.builtin)
    pid = clone(spawn_child, stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &x);
  else {
    pid = fork();
    if (pid == 0)
      dsec_guest_exec(&x);
  }
  e = errno;
  free((void *) x.argv);
  free((void *) x.envp);
  errno = e;
  return pid;
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
        if (pid == c->warm_pid) {
          /* the call made ahead is gone before its request: killed
           * (kill ID), or it could not make its mounts; then every call
           * starts as it comes, and tells why */
          close(c->warm_sock);
          c->warm_pid = 0;
          c->warm_off = !WIFSIGNALED(status);
          continue;
        }
        for (size_t i = 0; i < njobs; i++)
          if (jobs[i].pid == pid) {
            /* an fncall call's reaper that exits 0 has told the call's
             * status itself (call_reap): the supervisor is not woken
             * for a job it has ended */
            if (!c->fncall || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
              json_t *m = json_pack("{s:s, s:I, s:i}", "op", "exited", "xid",
                                    (json_int_t) jobs[i].xid, "status", status);
              msg_send(c->sock, m, NULL, 0);
              json_decref(m);
            }
            jobs[i] = jobs[--njobs];
            break;
          }
        /* anything else is an orphan reparented to us: reaped */
      }
    }
    if (pf[0].revents) {
      int fds[3], nfds;
      json_t *req = msg_recv(c->sock, buf, MSG_MAX, fds, &nfds);
      bool is_exec;
      const char *op;
      if (!req)
        _exit(0); /* the supervisor is gone: so are we, and the sandbox */
      op = json_string_value(json_object_get(req, "op"));
      is_exec = op && strcmp(op, "exec") == 0 && nfds == 3;
      if (is_exec) {
        uint64_t xid = (uint64_t) json_integer_value(json_object_get(req, "xid"));
        pid_t pid;
        if (json_is_true(json_object_get(req, "tty"))) {
          /* a terminal of the sandbox's devpts: its master goes to the
           * supervisor (before the exec can end), its other end to the
           * command */
          char path[64];
          int m = dsec_guest_openpty(
            (uid_t) json_integer_value(json_object_get(req, "uid")),
            (gid_t) json_integer_value(json_object_get(req, "gid")),
            (unsigned) json_integer_value(json_object_get(req, "cols")),
            (unsigned) json_integer_value(json_object_get(req, "rows")), path,
            sizeof path);
          json_t *tm = json_pack("{s:s, s:I}", "op", "tty", "xid", (json_int_t) xid);
          /* and its other end, which the supervisor holds until it has
           * read the command's last output (see tty_drain) */
          int ends[2] = { m, m >= 0 ? open(path, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1 };
          if (m >= 0 && ends[1] >= 0 && msg_send(c->sock, tm, ends, 2) == 0)
            json_object_set_new(req, "tty_path", json_string(path));
          for (int i = 0; i < 2; i++)
            if (ends[i] >= 0)
              close(ends[i]);
          json_decref(tm);
        }
        if (json_is_true(json_object_get(req, "tty")) &&
            !json_object_get(req, "tty_path")) {
          json_t *m = json_pack("{s:s, s:I, s:s}", "op", "error", "xid",
                                (json_int_t) xid, "msg",
                                "cannot allocate a terminal");
          msg_send(c->sock, m, NULL, 0);
          json_decref(m);
          pid = -2;
        } else
          pid = init_spawn(c, req, fds);
        if (pid == -2) {
          /* answered */
        } else if (pid < 0) {
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
        } else {
          /* every process of the sandbox but init; the call made ahead
           * too, whatever the signal (a stopped one would hold up the
           * next call) */
          warm_drop(c);
          kill(-1, sig);
        }
      }
      for (int i = 0; i < nfds; i++)
        close(fds[i]);
      json_decref(req);
      /* the next call is made while this one runs (the request's pipes
       * are closed: it must not hold them), so that it is ready when the
       * next request comes */
      if (c->fncall && is_exec)
        warm_spawn(c, buf);
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
  int netns_fd;  /* a world's service: its world's network namespace (the
                  * agent's), joined instead of a new one; else -1 */
  bool sys_shared; /* the supervisor attaches the shared sysfs at /sys */
  bool templated;  /* "go" brings the sandbox's mount namespace (made from
                    * the template: template_ns), not its root */
  int last_cap;    /* read while the host's /proc is ours to read */
  int suid_dumpable;
  struct dsec_cmdline_area cmdline; /* ditto (init's is at the same place) */
  int cg_fds[DSEC_CG_N]; /* the sandbox's cgroups, which stage1 moves
                          * itself into (dsec_cgroup_join); -1: none */
  /* init's seccomp filters, compiled once per host (seccomp_filters):
   * the audited one as a template for init's token, and the plain one */
  struct dsec_bpf filter_tmpl, filter_plain;
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

/* fs.suid_dumpable: 1 makes a process that changes credentials
 * user-dumpable (open to ptrace and /proc/PID/mem of its new user) until
 * its execve; -1 when unknown. */
static int suid_dumpable(void)
{
  int v = -1;
  FILE *f = fopen("/proc/sys/fs/suid_dumpable", "re");
  if (f) {
    if (fscanf(f, "%d", &v) != 1)
      v = -1;
    fclose(f);
  }
  return v;
}

_Noreturn static void run_init(struct stage1_args *a)
{
  struct init_ctx c = { .sock = a->sock, .fncall = a->fncall, .warm_lfd = -1,
                        .sys_shared = a->sys_shared,
                        .templated = a->templated };
  _cleanup_error_ struct dsec_error *err = NULL;
  json_t *ready;

  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_NAME, "dsec-init");
  dsec_set_cmdline_at(&a->cmdline, "dsec-init");
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
  c.last_cap = a->last_cap;
  c.vfork_ok = a->suid_dumpable != 1;
  c.tmp_size = xstrdup("mode=1777,size=268435456");
  /* the exec's own start is told by its child (exec_started), not
   * notified: a round trip to the supervisor less per exec.  A secret of
   * init's, in no memory a process of the sandbox can read (ours and our
   * children's until their execve are not dumpable) */
  if (getrandom(&c.token, sizeof c.token, 0) != (ssize_t) sizeof c.token)
    c.token = 0;
  if ((c.token && a->filter_tmpl.insns
         ? dsec_seccomp_set_token(&c.filter, &a->filter_tmpl, c.token, &err)
         : dsec_seccomp_build_token(&c.filter, seccomp_flags(a->spec) |
                                                 DSEC_SECCOMP_NOTIFY,
                                    c.token, &err)) < 0)
    die_init(c.sock, "%s", err->msg);
  dsec_bpf_clear(&a->filter_tmpl);
  c.filter_plain = a->filter_plain;
  a->filter_plain = (struct dsec_bpf){ 0 };
  init_setup(&c, a->spec);
  ready = json_pack("{s:s}", "op", "ready");
  init_landlock(&c, a->spec, ready);
  /* nothing in the sandbox may read init's memory or attach to it */
  prctl(PR_SET_DUMPABLE, 0);
  /* the bounding set, which every exec empties, emptied once here for all
   * of them (~40 prctl calls an exec less): init keeps the capabilities
   * it has (the bounding set only caps what an execve grants), and its
   * children inherit the empty set */
  c.bset_dropped = true;
  for (int cap = 0; cap <= c.last_cap; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
      c.bset_dropped = false;
  {
    /* proxy mode: the proxy's port on the sandbox's own loopback, served by
     * the supervisor from outside through this socket */
    const char *mode = json_string_value(json_object_get(
      json_object_get(a->spec, "network"), "mode"));
    int lfd = -1;
    /* (a world's service shares the agent's loopback, and its proxy) */
    if (mode && strcmp(mode, "proxy") == 0 &&
        !json_object_get(a->spec, "world")) {
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
  /* an idle sandbox's memory is mostly ours: give back the heap the setup
   * freed */
  malloc_trim(0);
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
  a->last_cap = last_cap();
  a->suid_dumpable = suid_dumpable();
  dsec_cmdline_area(&a->cmdline);
  if (a->netns_fd >= 0) {
    /* a world's service: the world's network (the agent's namespace),
     * joined while we are still the host's root; the rest of the
     * namespaces are its own */
    if (setns(a->netns_fd, CLONE_NEWNET) < 0)
      die_init(a->sock, "cannot join the world's network");
    close(a->netns_fd);
    flags &= ~CLONE_NEWNET;
  }
  if (a->owner) {
    /* The user namespace is made as the sandbox's own host id, never as
     * root: per-user kernel limits (inotify instances and watches, POSIX
     * message queues, pending signals, user namespaces) are counted up
     * the chain of namespace owners, so each sandbox gets its own and
     * none can use up host root's.  The supervisor writes its maps. */
    json_t *m = json_pack("{s:s}", "op", "userns");
    pid_t parent = getppid();
    /* not dumpable as the owner's id either (fs.suid_dumpable may say
     * otherwise): until the move below we hold files the host's root
     * opened (dsec_cgroup_join_open) */
    int r = prctl(PR_SET_DUMPABLE, 0) == 0 && setgroups(0, NULL) == 0 &&
            setresgid(a->owner, a->owner, a->owner) == 0 &&
            setresuid(a->owner, a->owner, a->owner) == 0 &&
            prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() == parent &&
            unshare(CLONE_NEWUSER) == 0
              ? msg_send(a->sock, m, NULL, 0)
              : -1;
    json_decref(m);
    if (r < 0)
      die_init(a->sock, "cannot create the user namespace");
  }
  /* into the sandbox's cgroups, while the supervisor writes our maps and
   * mounts the root: we are one thread, so v1's cheap move of a thread is
   * the whole move (see dsec_cgroup_join_open); init and everything of
   * the sandbox are our children.  A failure is told after "go", where
   * the supervisor listens for it. */
  int cg_failed = -1;
  int cg_errno = dsec_cgroup_join(a->cg_fds, &cg_failed) < 0 ? errno : 0;
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
  if (cg_errno) {
    errno = cg_errno;
    die_init(a->sock, "cannot move into the sandbox's %s cgroup",
             dsec_cgroup_ctrl_name(cg_failed));
  }
  /* we came in as an id this namespace does not map: become its root, so
   * what we create is owned by a mapped user */
  /* (rootless, setgroups is denied in our user namespace: EPERM is fine) */
  if (setresgid(0, 0, 0) < 0 || (setgroups(0, NULL) < 0 && errno != EPERM) ||
      setresuid(0, 0, 0) < 0)
    die_init(a->sock, "cannot become root in the user namespace");
  if (a->templated) {
    /* the sandbox's own mount namespace, whose root is the sandbox's
     * (setns puts us there) */
    if (setns(a->rootfd, CLONE_NEWNS) < 0)
      die_init(a->sock, "cannot enter the sandbox's mount namespace");
    flags &= ~CLONE_NEWNS;
  } else if (fchdir(a->rootfd) < 0)
    /* enter the root while we share the supervisor's mounts: unshare
     * below carries the working directory over to the copy in the new
     * namespace */
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

/* The container backend's share of the supervisor (the engine has the
 * rest): init's control socket, the seccomp listeners, the proxy's port,
 * the masked-file watch, exclusive execs. */

/* A seccomp listener: the denials of one exec's process tree. */
struct listener {
  int fd;
  struct dsec_watch w;
  json_t *seq; /* the exec's seq (owned), or NULL */
};

/* What our end of init's socket may hold (see init_backlogged). */
#define INIT_SNDBUF (16 << 20)

struct sup {
  struct dsec_engine *e;
  int isock;            /* init's control socket */
  int isock_sndbuf;     /* its SO_SNDBUF, bytes */
  pid_t init_pid, stage1_pid;
  pid_t ns_helper;      /* template_ns's child, reaped once init is up */
  int userns_fd;        /* stage1's user namespace, kept for template_ns */
  bool fncall;
  bool rootless;        /* not root: a user namespace of our own, no idmaps */
  int proxy_lfd;        /* proxy mode: the sandbox's 127.0.0.1:3128 */
  int fan_fd;           /* fanotify on the mask files, or -1 */
  int sysfs_fd;         /* the host's shared sysfs, a clone to attach at
                         * the root's /sys, or -1: init mounts its own */
  int rootns_fd;        /* the template mount namespace, or -1: init
                         * pivot_roots out of a copy of ours */
  int dev_fd;           /* our directory of the host's /dev tmpfs, a
                         * clone, or -1: make_dev mounts a tmpfs */
  bool dev_shared;      /* /dev is that directory (it outlives us) */
  struct file_handle **mask_fh; /* each masked_paths entry's file, or NULL */
  char *audit_off;      /* why opens of masked files are not recorded */
  json_t *landlock;     /* what Landlock enforces (init's report), or NULL */
  char *landlock_off;   /* why Landlock is not used at all, or NULL */
  int core_sched;       /* 1: a core-scheduling cookie of its own */
  char *core_sched_off; /* why not, for a latency-class sandbox */
  struct init_ctx *xctx; /* what exclusive execs run with (made once) */
  struct dsec_watch w_init, w_fan, w_proxy;
  uid_t base;           /* the sandbox root's host id (0 rootless) */
  uid_t count;
  char *upperfs;        /* the disk-limited file system, or NULL */
  struct listener **listeners;
  size_t nlisteners;
  struct seccomp_notif *notif;
  struct seccomp_notif_resp *notif_resp;
  double denial_window;   /* start of the current second */
  int denials_in_window;
  uint64_t denials_suppressed;
  double process_window;
  int processes_in_window;
  uint64_t processes_suppressed;
  bool disk_full_seen;
  char *msgbuf;
  char **erofs_images;  /* the EROFS images the sandbox runs from */
  size_t n_erofs;
};

/* What the container backend keeps of an exec. */
struct cjob {
  int64_t oom_before;   /* the cgroup's OOM kills when it started, or -1 */
  int64_t pids_before;  /* its refused forks, or -1 */
  pid_t xpid;           /* an exclusive exec: its relay, our child (else 0) */
  int xsock;            /* ... and the socket its seccomp listener comes on */
  struct dsec_watch w_xsock;
  bool told;            /* an fncall call: its reaper told its status (an
                         * "exited" after that, of a reaper killed before
                         * it could exit, is not the call's) */
};

static double now_ms(void) { return dsec_now_ms(); }

static int open_in_root(int rfd, const char *path, bool dir, uid_t base,
                        struct dsec_error **err);
static void listener_add(struct sup *s, int fd, uint64_t xid);
static void process_told(struct sup *s, struct dsec_job *j, json_t *m,
                         pid_t pid);

#define DENIALS_PER_SECOND 50

/* ---- execs */


/* A job of ours from the engine's. */
static struct cjob *cjob(struct dsec_job *j)
{
  return j->priv;
}

/* Signals every process of an exec.  An exclusive one dies with its
 * relay (our child) whatever the signal: its processes are out of our
 * reach (and init's) otherwise. */
static void job_signal(struct sup *s, struct dsec_job *j, int sig)
{
  json_t *m;
  if (cjob(j)->xpid > 0) {
    kill(cjob(j)->xpid, SIGKILL);
    return;
  }
  m = json_pack("{s:s, s:I, s:i}", "op", "kill", "xid", (json_int_t) j->xid,
                "signal", sig);
  msg_send(s->isock, m, NULL, 0);
  json_decref(m);
}

static void ctr_signal(struct dsec_engine *e, struct dsec_job *j, int sig)
{
  struct sup *s = e->b;
  json_t *m;

  if (j) {
    job_signal(s, j, sig);
    return;
  }
  /* every process of the sandbox but init, and every exclusive exec */
  m = json_pack("{s:s, s:i}", "op", "kill", "signal", sig);
  msg_send(s->isock, m, NULL, 0);
  json_decref(m);
  for (size_t i = 0; i < e->njobs; i++)
    if (cjob(e->jobs[i]) && cjob(e->jobs[i])->xpid > 0)
      job_signal(s, e->jobs[i], SIGKILL);
}

/* An exec ended: how, as init (or the exclusive exec's relay) says. */
static void job_ended(struct sup *s, struct dsec_job *j, int status,
                      const char *error)
{
  int64_t after = s->e->cg ? dsec_cgroup_oom_kills(s->e->cg) : -1;
  struct dsec_job_end end = {
    .status = status,
    .error = error,
    .oom = cjob(j)->oom_before >= 0 && after > cjob(j)->oom_before,
  };
  dsec_job_finish(s->e, j, &end);
}

/* The limits an exec ran into that only the cgroup and the file system
 * tell: refused forks, a full writable layer. */
static void ctr_exec_done(struct dsec_engine *e, struct dsec_job *j, json_t *res)
{
  struct sup *s = e->b;
  (void) res;
  if (cjob(j)->pids_before >= 0) {
    int64_t hits = dsec_cgroup_pids_max_hits(e->cg);
    if (hits > cjob(j)->pids_before)
      dsec_engine_event(e, json_pack("{s:s, s:s, s:O, s:I}", "type", "limit",
                                     "limit", "pids", "seq",
                                     j->seq ? j->seq : json_null(),
                                     "refused_forks",
                                     (json_int_t) (hits - cjob(j)->pids_before)));
  }
  if (s->upperfs) {
    struct statfs fs;
    /* the writable layer is (nearly) full: the agent hit its disk limit */
    if (statfs(s->upperfs, &fs) == 0 && fs.f_bavail * 100 < fs.f_blocks) {
      if (!s->disk_full_seen)
        dsec_engine_event(e, json_pack("{s:s, s:s, s:O}", "type", "limit",
                                       "limit", "disk", "seq",
                                       j->seq ? j->seq : json_null()));
      s->disk_full_seen = true;
    } else
      s->disk_full_seen = false;
  }
}

static void ctr_job_free(struct dsec_engine *e, struct dsec_job *j)
{
  struct cjob *c = cjob(j);
  if (!c)
    return;
  if (c->xsock >= 0) {
    epoll_ctl(e->epfd, EPOLL_CTL_DEL, c->xsock, NULL);
    close(c->xsock);
  }
  c->xsock = -1;
  c->w_xsock.dead = true;
  /* its watch may still be in this batch's events */
  dsec_engine_bury(e, c);
  j->priv = NULL;
}

static int xexec_spawn(struct sup *s, struct dsec_job *j, json_t *msg,
                       int fds[3], struct dsec_error **err);

/* Our messages to init may take up s->isock_sndbuf bytes of its socket
 * (INIT_SNDBUF where SO_SNDBUFFORCE is allowed); an exec is refused once
 * half of that waits unread, so that kill messages always find room and
 * we never block on init: an exec's child may wait for our answer to its
 * seccomp notification while init waits for that child (init_spawn). */
static int init_backlogged(struct sup *s)
{
  int queued = 0;
  if (ioctl(s->isock, SIOCOUTQ, &queued) == 0 &&
      queued > s->isock_sndbuf / 2)
    return -1;
  return 0;
}

/* An exec: a child of init (new session, the spec's user, no capabilities,
 * the seccomp filter) on pipes the engine reads; an exclusive one is
 * started beside the sandbox's pid namespace (xexec_spawn). */
static int ctr_exec(struct dsec_engine *e, struct dsec_job *j, json_t *msg,
                    struct dsec_error **err)
{
  struct sup *s = e->b;
  struct cjob *c = xzalloc(sizeof *c);
  int in[2] = { -1, -1 }, out[2] = { -1, -1 }, er[2] = { -1, -1 };
  int r;

  c->xsock = -1;
  c->oom_before = e->cg ? dsec_cgroup_oom_kills(e->cg) : -1;
  c->pids_before = e->cg && e->spec->resources.pids
                     ? dsec_cgroup_pids_max_hits(e->cg)
                     : -1;
  j->priv = c;
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
      pipe2(er, O_CLOEXEC) < 0) {
    r = dsec_fail(err, errno, "cannot create pipes");
    goto out;
  }
  {
    int fds[3] = { in[0], out[1], er[1] };
    /* fncall calls are isolated from each other as it is */
    if (json_is_true(json_object_get(j->req, "exclusive")) && !s->fncall)
      r = xexec_spawn(s, j, msg, fds, err);
    else if ((r = init_backlogged(s)) < 0)
      dsec_fail(err, EAGAIN, "the sandbox's init is not keeping up");
    else if ((r = msg_send(s->isock, msg, fds, 3)) < 0)
      dsec_fail(err, errno, "cannot reach the sandbox's init");
  }
  if (r == 0) {
    dsec_job_pipes(e, j, out[0], er[0], in[1]);
    out[0] = er[0] = in[1] = -1;
  }
out:
  for (int i = 0; i < 2; i++) {
    if (in[i] >= 0)
      close(in[i]);
    if (out[i] >= 0)
      close(out[i]);
    if (er[i] >= 0)
      close(er[i]);
  }
  return r;
}

/* What init says: an exec ended, failed, or its listener is here. */
static void init_message(struct dsec_engine *e, void *p, uint32_t events)
{
  struct sup *s = e->b;
  int fds[3], nfds;
  pid_t from;
  json_t *m = msg_recv_from(s->isock, s->msgbuf, MSG_MAX, fds, &nfds, &from);
  const char *op;
  struct dsec_job *j;
  (void) p, (void) events;

  if (!m) {
    for (int i = 0; i < nfds; i++)
      close(fds[i]);
    /* init is gone; SIGCHLD tells how */
    epoll_ctl(e->epfd, EPOLL_CTL_DEL, s->isock, NULL);
    return;
  }
  op = json_string_value(json_object_get(m, "op"));
  j = dsec_engine_job(e, (uint64_t) json_integer_value(json_object_get(m, "xid")));
  if (op && strcmp(op, "listener") == 0 && nfds == 1) {
    listener_add(s, fds[0], (uint64_t) json_integer_value(json_object_get(m, "xid")));
    nfds = 0;
  } else if (op && strcmp(op, "tty") == 0 && (nfds == 1 || nfds == 2)) {
    if (j)
      dsec_job_tty(e, j, fds[0], nfds == 2 ? fds[1] : -1);
    else
      for (int i = 0; i < nfds; i++)
        close(fds[i]);
    nfds = 0;
  } else if (op && strcmp(op, "started") == 0) {
    /* a call made ahead's listener comes with its command's first start
     * (exec_started, warm_listener) */
    if (nfds == 1) {
      listener_add(s, fds[0], (uint64_t) json_integer_value(json_object_get(m, "xid")));
      nfds = 0;
    }
    if (j)
      process_told(s, j, m, from);
  } else if (op && j && strcmp(op, "status") == 0) {
    /* an fncall call's command ended, and every other process of the
     * call is gone (call_reap): the call's end (init tells no "exited"
     * for a reaper that exits 0 after this).  The status as a relay
     * gives it: a signal's number, or the exit code. */
    int status = (int) json_integer_value(json_object_get(m, "status"));
    cjob(j)->told = true;
    job_ended(s, j, WIFSIGNALED(status) ? WTERMSIG(status) : status, NULL);
  } else if (op && j && strcmp(op, "exited") == 0 && !cjob(j)->told) {
    job_ended(s, j, (int) json_integer_value(json_object_get(m, "status")), NULL);
  } else if (op && j && strcmp(op, "error") == 0) {
    job_ended(s, j, 0, json_string_value(json_object_get(m, "msg")) ?: "exec failed");
  }
  for (int i = 0; i < nfds; i++)
    close(fds[i]);
  json_decref(m);
}

/* Our children: init (the sandbox's end) and exclusive execs' relays. */
static void ctr_child(struct dsec_engine *e)
{
  struct sup *s = e->b;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0)
      break;
    for (size_t i = 0; i < e->njobs; i++)
      if (cjob(e->jobs[i]) && cjob(e->jobs[i])->xpid == pid) {
        cjob(e->jobs[i])->xpid = 0;
        job_ended(s, e->jobs[i], status, NULL);
        break;
      }
    if (pid == s->init_pid) {
      int64_t ooms = e->cg ? dsec_cgroup_oom_kills(e->cg) : -1;
      _cleanup_free_ char *cause =
        ooms > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
          ? xstrdup("oom")
        : WIFSIGNALED(status)
          ? xasprintf("init killed by signal %d", WTERMSIG(status))
          : xasprintf("init exited with status %d", WEXITSTATUS(status));
      s->init_pid = 0;
      dsec_engine_end(e, "died", cause);
    }
  }
}

/* The end: exclusive execs (out of init's pid namespace: their relays,
 * each takes its exec along), then init, PID 1 of the sandbox: when it
 * dies the kernel kills the rest.  Before the sandbox ran, stage1. */
static void ctr_stop(struct dsec_engine *e)
{
  struct sup *s = e->b;
  for (size_t i = 0; i < e->njobs; i++)
    if (e->jobs[i]->priv && cjob(e->jobs[i])->xpid > 0) {
      kill(cjob(e->jobs[i])->xpid, SIGKILL);
      while (waitpid(cjob(e->jobs[i])->xpid, NULL, 0) < 0 && errno == EINTR)
        ;
    }
  if (s->stage1_pid > 0)
    kill(s->stage1_pid, SIGKILL);
  if (s->init_pid > 0) {
    /* init's mount namespace is held until we exit (our callers exit
     * next): its teardown, which waits for an expedited RCU grace period
     * (~0.5 ms here), then comes after rm has its answer instead of
     * before.  Nobody is left in it; its mounts go with our exit, and
     * the files under them are removed only after that (rm's remover
     * waits for it) */
    char ns[64];
    snprintf(ns, sizeof ns, "/proc/%d/ns/mnt", (int) s->init_pid);
    if (open(ns, O_RDONLY | O_CLOEXEC) < 0)
      dsec_log(DSEC_LOG_DEBUG, errno, "cannot hold %s", ns);
    kill(s->init_pid, SIGKILL);
    while (waitpid(s->init_pid, NULL, 0) < 0 && errno == EINTR)
      ;
  }
  /* init is gone: its network namespace lives on only in the proxy's
   * sockets, ours */
  if (s->proxy_lfd >= 0)
    dsec_crash_point("proxy init stopped");
}

/* What the sandbox read of its images, for the next host to mount them:
 * after rm has its answer (a mincore of each image and maybe a file
 * written, which the answer need not wait for). */
static void ctr_epilogue(struct dsec_engine *e)
{
  struct sup *s = e->b;
  for (size_t i = 0; i < s->n_erofs; i++)
    dsec_layer_hot_note(s->erofs_images[i]);
  /* our directory of the host's /dev tmpfs outlives us until rm (or a
   * resume) removes it: what the sandbox left in /dev/shm would be memory
   * until then, as its own tmpfs, gone with our mount namespace, was not.
   * Emptied through our mount of it (rm's remover takes it all) */
  if (s->dev_shared && !e->removing) {
    _cleanup_free_ char *shm = xasprintf("%s/rootfs/dev/shm", e->run);
    _cleanup_error_ struct dsec_error *err = NULL;
    if (dsec_rm_rf_children_at(AT_FDCWD, shm, &err) < 0)
      dsec_log(DSEC_LOG_DEBUG, 0, "%s", err->msg);
  }
}

/* Freezes (or thaws) every process of the sandbox. */
static int ctr_freeze(struct dsec_engine *e, bool frozen, struct dsec_error **err)
{
  if (!e->cg || !e->cg->path[DSEC_CG_FREEZER])
    return dsec_fail(err, ENOTSUP, "no freezer cgroup here (rootless without "
                                   "a delegated cgroup): use --release");
  return dsec_cgroup_freeze(e->cg, frozen, err);
}

/* ---- exclusive execs */


/* The sandbox's two seccomp filters for flags, from the host's cache of
 * compiled ones ($DSEC_RUN/seccomp): the audited one (a template for a
 * token, with token; none where libseccomp makes none) and the plain
 * one. */
static int seccomp_filters(struct dsec_bpf *audited, struct dsec_bpf *plain,
                           unsigned flags, bool token, struct dsec_error **err)
{
  _cleanup_free_ char *run = dsec_run_dir();
  _cleanup_free_ char *dir = xasprintf("%s/seccomp", run);
  _cleanup_error_ struct dsec_error *e = NULL;

  /* (a libseccomp that makes no template: init compiles its own) */
  if (dsec_seccomp_cached(audited, flags | DSEC_SECCOMP_NOTIFY, token, dir,
                          &e) < 0 &&
      !(token && e->errnum == EPROTO)) {
    if (err && !*err)
      *err = steal_pointer(&e);
    return -1;
  }
  if (dsec_seccomp_cached(plain, flags, false, dir, err) < 0) {
    dsec_bpf_clear(audited);
    return -1;
  }
  return 0;
}

/* What exclusive execs run with, made once: the filters and rules init
 * made for the others. */
static struct init_ctx *xexec_ctx(struct sup *s, struct dsec_error **err)
{
  struct init_ctx *c;
  unsigned flags = seccomp_flags(s->e->spec_json);

  if (s->xctx)
    return s->xctx;
  c = xzalloc(sizeof *c);
  c->sock = 3;
  c->exclusive = true;
  c->warm_lfd = -1;
  c->last_cap = last_cap();
  c->ll_abi = s->landlock_off ? 0 : dsec_landlock_abi(NULL);
  c->protect = json_object_get(s->e->spec_json, "protect");
  if (seccomp_filters(&c->filter, &c->filter_plain, flags, false, err) < 0) {
    free(c);
    return NULL;
  }
  s->xctx = c;
  return c;
}

/* The listener of an exclusive exec, or its socket's end. */
static void xsock_message(struct dsec_engine *e, void *p, uint32_t events)
{
  struct sup *s = e->b;
  struct dsec_job *j = p;
  struct cjob *c = cjob(j);
  int fds[3], nfds;
  json_t *m = msg_recv(c->xsock, s->msgbuf, MSG_MAX, fds, &nfds);
  const char *op = json_string_value(json_object_get(m, "op"));
  (void) events;

  if (!m) {
    epoll_ctl(e->epfd, EPOLL_CTL_DEL, c->xsock, NULL);
    close(c->xsock);
    c->xsock = -1;
    c->w_xsock.dead = true;
  } else if (op && strcmp(op, "listener") == 0 && nfds == 1) {
    listener_add(s, fds[0], j->xid);
    nfds = 0;
  }
  for (int i = 0; i < nfds; i++)
    close(fds[i]);
  json_decref(m);
}

/* Starts an exclusive exec: a child of ours (in the sandbox's cgroup)
 * joins the sandbox's user, mount, network, UTS and cgroup namespaces
 * but not its pid namespace, and goes on as init's children do, with
 * call_enter's new pid, mount and IPC namespaces (see there).  Its
 * seccomp listener comes back on a socket of the job's. */
static int xexec_spawn(struct sup *s, struct dsec_job *j, json_t *msg,
                       int fds[3], struct dsec_error **err)
{
  struct init_ctx *c = xexec_ctx(s, err);
  _cleanup_close_ int pidfd = -1;
  int sp[2] = { -1, -1 }, cg[DSEC_CG_N];
  pid_t parent = getpid(), pid;

  for (int i = 0; i < DSEC_CG_N; i++)
    cg[i] = -1;
  if (!c)
    return -1;
  pidfd = (int) syscall(SYS_pidfd_open, s->init_pid, 0);
  if (pidfd < 0)
    return dsec_fail(err, errno, "cannot reach the sandbox's init");
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
    dsec_fail(err, errno, "cannot create the exec's channels");
    goto fail;
  }
  if (s->e->cg && dsec_cgroup_join_open(s->e->cg, cg, err) < 0)
    goto fail;
  pid = fork();
  if (pid < 0) {
    dsec_fail(err, errno, "fork");
    goto fail;
  }
  if (pid == 0) {
    int hi[3];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(125);
    /* into the sandbox's cgroups first, as the one thread we are (see
     * dsec_cgroup_join_open) */
    int failed = -1;
    if (dsec_cgroup_join(cg, &failed) < 0) {
      dprintf(fds[2], "dsec: cannot move into the sandbox's %s cgroup: %s\n",
              dsec_cgroup_ctrl_name(failed), strerror(errno));
      _exit(125);
    }
    /* init's core-scheduling cookie: this exec shares no core with
     * another sandbox's tasks either */
    if (s->core_sched == 1 &&
        prctl(PR_SCHED_CORE, PR_SCHED_CORE_SHARE_FROM, s->init_pid,
              PR_SCHED_CORE_SCOPE_THREAD, 0) < 0) {
      dprintf(fds[2], "dsec: cannot share the sandbox's core-scheduling "
                      "cookie: %s\n", strerror(errno));
      _exit(125);
    }
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
  dsec_cgroup_join_close(cg);
  cjob(j)->xpid = pid;
  cjob(j)->xsock = sp[0];
  cjob(j)->w_xsock = (struct dsec_watch){ xsock_message, j, false };
  dsec_engine_watch(s->e, sp[0], EPOLLIN, &cjob(j)->w_xsock);
  return 0;
fail:
  for (int i = 0; i < 2; i++)
    if (sp[i] >= 0)
      close(sp[i]);
  dsec_cgroup_join_close(cg);
  return -1;
}


/* ---- seccomp listeners: denials and program starts */

#define LISTENERS_MAX 4096

static void listener_event(struct dsec_engine *e, void *p, uint32_t events);

static void listener_close(struct sup *s, struct listener *l)
{
  for (size_t i = 0; i < s->nlisteners; i++)
    if (s->listeners[i] == l) {
      s->listeners[i] = s->listeners[--s->nlisteners];
      break;
    }
  /* out of the epoll set first: see close_watched (engine.c) */
  epoll_ctl(s->e->epfd, EPOLL_CTL_DEL, l->fd, NULL);
  close(l->fd);
  l->w.dead = true;
  json_decref(l->seq);
  l->seq = NULL;
  dsec_engine_bury(s->e, l);
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
  l->w = (struct dsec_watch){ listener_event, l, false };
  for (size_t i = 0; i < s->e->njobs; i++)
    if (s->e->jobs[i]->xid == xid && s->e->jobs[i]->seq)
      l->seq = json_incref(s->e->jobs[i]->seq);
  s->listeners = xrealloc(s->listeners,
                          sizeof *s->listeners * (s->nlisteners + 1));
  s->listeners[s->nlisteners++] = l;
  if (dsec_engine_watch(s->e, fd, EPOLLIN, &l->w) < 0)
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
      dsec_engine_event(s->e, json_pack("{s:s, s:I}", "type", "process_suppressed",
                             "count", (json_int_t) s->processes_suppressed));
    s->process_window = now;
    s->processes_in_window = 0;
    s->processes_suppressed = 0;
  }
  if (now - s->denial_window >= 1000) {
    if (s->denials_suppressed)
      dsec_engine_event(s->e, json_pack("{s:s, s:I}", "type", "denied_suppressed",
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

/* Whether a program start at path is recorded (*first: the first of
 * that path, never lost in a flood), or counted as suppressed. */
static bool process_admit(struct sup *s, const char *path, double now,
                          bool *first)
{
  if (now - s->process_window >= 1000)
    flush_suppressed(s, now);
  *first = path && dsec_audit_is_new(s->e->audit, DSEC_AUDIT_PROGRAM, path,
                                     strlen(path));
  if (!*first && s->processes_in_window++ >= PROCESSES_PER_SECOND) {
    s->processes_suppressed++;
    return false;
  }
  return true;
}

/* The "process" event (argv stolen). */
static void process_event(struct sup *s, const char *path, json_t *argv,
                          pid_t pid, json_t *seq, bool first)
{
  json_t *ev = json_pack("{s:s, s:o, s:o, s:i, s:O}", "type", "process",
                         "path", path ? dsec_json_utf8(path, strlen(path))
                                      : json_null(),
                         "argv", argv, "pid", (int) pid, "seq",
                         seq ? seq : json_null());
  if (first)
    dsec_engine_event_first(s->e, ev, DSEC_AUDIT_PROGRAM, path, strlen(path));
  else
    dsec_engine_event(s->e, ev);
}

/* An exec's own start, as its child tells it (exec_started): the pid
 * is the socket's (the kernel's word, not the child's). */
static void process_told(struct sup *s, struct dsec_job *j, json_t *m,
                         pid_t pid)
{
  const char *path = json_string_value(json_object_get(m, "path"));
  json_t *argv = json_object_get(m, "argv");
  bool first;

  if (!path || !json_is_array(argv) || pid <= 0 ||
      !process_admit(s, path, now_ms(), &first))
    return;
  process_event(s, path, json_incref(argv), pid, j->seq, first);
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
    if (!process_admit(s, path, now, &first))
      goto answer;
    argv = remote_argv(pid, req->data.args[at ? 2 : 1]);
    /* read before answering, and only trusted if the call is still the
     * same one (the process could have died and its pid be reused) */
    if (seccomp_notify_id_valid(l->fd, req->id) == 0)
      process_event(s, path, argv, pid, l->seq, first);
    else
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
static void listener_event(struct dsec_engine *e, void *p, uint32_t events)
{
  struct sup *s = e->b;
  struct listener *l = p;

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
        bool first = dsec_audit_is_new(s->e->audit, kind, &key, sizeof key);
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
            dsec_engine_event_first(s->e, ev, kind, &key, sizeof key);
          else
            dsec_engine_event(s->e, ev);
        }
      }
      return;
    }
  }
  if (events & (EPOLLHUP | EPOLLERR))
    listener_close(s, l); /* every process of that exec is gone */
}

/* ---- the proxy: the sandbox's connections to its 127.0.0.1:3128 */
/* ---- the proxy: the sandbox's connections to its 127.0.0.1:3128 */
static void proxy_accept(struct dsec_engine *e, void *p, uint32_t events)
{
  struct sup *s = e->b;
  (void) p, (void) events;
  for (;;) {
    int fd = accept4(s->proxy_lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
      return;
    dsec_proxy_serve(e->proxy, fd);
  }
}

/* ---- opens of masked files */

/* The fanotify group that watches the mask files: FAN_OPEN reported with
 * a file handle (FAN_REPORT_FID), so no descriptor is opened per event.
 *
 * fs.fanotify.max_user_groups (128 by default) counts groups per user, and
 * the kernel charges a group to its creator's effective uid (up the chain
 * of user namespaces), while what makes a full group (one whose events
 * name the opener's pid) is CAP_SYS_ADMIN.  One group per sandbox made as
 * root ran out past ~128 sandboxes (issue 16).  So, as root, for this one
 * call and on this thread only (the raw syscall: glibc's setresuid would
 * change every thread), we take the sandbox's own host uid as effective
 * uid and keep our capabilities: each sandbox's group is charged to its
 * own uid, 128 each, and its events still carry the opener's pid.  A
 * change of euid also resets the dumpable flag and the parent-death
 * signal: both are put back, and a supervisor that cannot become euid 0
 * with its capabilities again ends.
 *
 * Rootless, the user namespace of our own gives no CAP_SYS_ADMIN in the
 * host's: the group is the kernel's unprivileged kind (Linux 5.13: FID
 * reports and inode marks only), whose events say pid 0 for every other
 * process, and all of a user's sandboxes share that user's 128. */
static int mask_group(struct sup *s)
{
  const unsigned flags =
    FAN_CLASS_NOTIF | FAN_REPORT_FID | FAN_CLOEXEC | FAN_NONBLOCK;
  struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct caps[2], raised[2], now[2];
  int dumpable, sig = 0, fd = -1, saved;
  uid_t ruid, euid, suid;

  if (s->rootless)
    return fanotify_init(flags, O_RDONLY | O_CLOEXEC);
  dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  if (dumpable < 0 || prctl(PR_GET_PDEATHSIG, &sig, 0, 0, 0) < 0 ||
      syscall(SYS_capget, &h, caps) < 0)
    return -1;
  memcpy(raised, caps, sizeof raised);
  raised[0].effective = raised[0].permitted;
  raised[1].effective = raised[1].permitted;
  if (syscall(SYS_setresuid, -1, s->base, -1) == 0) {
    /* leaving euid 0 emptied the effective set: raise it again */
    if (syscall(SYS_capset, &h, raised) == 0)
      fd = fanotify_init(flags, O_RDONLY | O_CLOEXEC);
    saved = errno;
    /* euid 0 again brings the permitted set back into the effective one */
    if (syscall(SYS_setresuid, -1, 0, -1) < 0 ||
        getresuid(&ruid, &euid, &suid) < 0 || euid != 0 ||
        syscall(SYS_capget, &h, now) < 0 ||
        now[0].effective != raised[0].effective ||
        now[1].effective != raised[1].effective ||
        (caps[0].effective != raised[0].effective &&
         syscall(SYS_capset, &h, caps) < 0)) {
      struct dsec_error *err = NULL;
      dsec_fail(&err, errno, "cannot be root again after making the "
                             "fanotify group");
      dsec_engine_fail(s->e, err);
    }
    errno = saved;
  }
  saved = errno;
  prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
  if (sig)
    prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0);
  errno = saved;
  return fd;
}

/* The host's device nodes bound over their empty files in the sandbox's
 * /dev (dev, attached): init's work (setup_dev) where it pivot_roots, in
 * sight of the host's /dev; ours where its namespace is the template's.
 * -1 with errno. */
static int bind_dev_nodes(int dev)
{
  for (size_t i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
    char host[64];
    int t, r;
    snprintf(host, sizeof host, "/dev/%s", dev_nodes[i]);
    t = (int) syscall(SYS_open_tree, AT_FDCWD, host,
                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (t < 0)
      return -1;
    r = (int) syscall(SYS_move_mount, t, "", dev, dev_nodes[i],
                      MOVE_MOUNT_F_EMPTY_PATH);
    close(t);
    if (r < 0)
      return -1;
  }
  return 0;
}

/* The sandbox's /dev, its masks and its /dev/shm: one directory, our own
 * in the host's shared /dev tmpfs (layermount.h; or, without it, a tmpfs
 * of our own), mounted over the root's /dev (ours, whatever the image or
 * a checkpoint put there), where init finds it once in its root.  One
 * directory of a file system every sandbox shares, not three file
 * systems of its own, because every superblock takes a shrinker id that
 * each memory cgroup on the host then carries a slot for (see
 * mask_paths).  In it:
 *   - the device nodes' empty files, which the host's nodes are bound
 *     over (a user namespace cannot mknod; by us where the namespace is
 *     the template's, bind_dev_nodes, else by init), pts for init's
 *     devpts, and the usual links;
 *   - .dsec: an empty read-only file of its own for each masked file,
 *     which init (and an exclusive exec, over its own /proc) binds over
 *     /proc's and /sys's, one more (empty) for a masked file it made
 *     none for, and an empty directory for the masked directories.  The container backend watches the files' opens
 *     (fanotify); an fncall call's /proc shows only its processes
 *     (subset=pid).  They are made whether or not opens can be watched:
 *     a sandbox whose masks cannot be bound does not start;
 *   - shm, 1777, mounted again at /dev/shm: the one part the sandbox may
 *     write (nosuid, nodev); in the shared tmpfs what it writes counts in
 *     its memory cgroup (which is its only bound), in one of its own the
 *     tmpfs holds 64 MiB.
 * /dev itself is read-only (nosuid, nodev, noexec) and its files are the
 * supervisor's: nothing in the sandbox can add to it.  As root, the kernel
 * locks these flags in the sandbox's user namespace; rootless (no user
 * namespace of the sandbox's own), the dropped capabilities and the
 * seccomp filter's refusal of mount calls keep them.  The root of it and
 * shm belong to the sandbox's root, as init's own tmpfs did.  A sandbox
 * whose /dev cannot be made is not created. */
static int make_dev(struct sup *s, struct dsec_error **err)
{
  _cleanup_free_ char *root = xasprintf("%s/rootfs", s->e->run);
  _cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  _cleanup_close_ int dev = -1;
  _cleanup_close_ int mnt = -1;
  _cleanup_close_ int shm = -1;
  _cleanup_close_ int masks = -1;
  struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
  struct mount_attr exec = { .attr_clr = MOUNT_ATTR_NOEXEC };
  size_t n = 0;

  while (masked_paths[n])
    n++;
  if (rfd < 0)
    return dsec_fail(err, errno, "cannot open %s", root);
  {
    /* the root's own /dev, a directory: not where a link of the image
     * or of a checkpoint points (it would take the masks elsewhere) */
    struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_NOFOLLOW |
                                     O_CLOEXEC,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                       RESOLVE_NO_XDEV };
    dev = (int) syscall(SYS_openat2, rfd, "dev", &how, sizeof how);
    if (dev < 0 && errno == ENOENT)
      dev = open_in_root(rfd, "/dev", true, s->base, err);
    else if (dev < 0 && (errno == ELOOP || errno == ENOTDIR))
      return dsec_bad_input(err, "the image's /dev is not a directory (%s)",
                            strerror(errno));
    else if (dev < 0)
      return dsec_fail(err, errno, "cannot open the image's /dev");
    if (dev < 0)
      return -1;
  }
  if (s->dev_fd >= 0) {
    /* the flags the tmpfs of our own gets below, whatever the clone has */
    struct mount_attr flags = { .attr_set = MOUNT_ATTR_NOSUID |
                                            MOUNT_ATTR_NODEV |
                                            MOUNT_ATTR_NOEXEC };
    mnt = s->dev_fd;
    s->dev_fd = -1;
    s->dev_shared = true;
    if (syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &flags,
                sizeof flags) < 0 ||
        fchownat(mnt, "", s->base, s->base, AT_EMPTY_PATH) < 0)
      return dsec_fail(err, errno, "cannot make the sandbox's /dev");
  } else if ((mnt = dsec_tmpfs_new("64m", NULL, "0755")) < 0 ||
             fchownat(mnt, "", s->base, s->base, AT_EMPTY_PATH) < 0)
    return dsec_fail(err, errno, "cannot make the sandbox's /dev");
  for (size_t i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
    int fd = openat(mnt, dev_nodes[i],
                    O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
      return dsec_fail(err, errno, "cannot make /dev/%s", dev_nodes[i]);
    close(fd);
  }
  for (size_t i = 0; i < ARRAY_SIZE(dev_links); i++)
    if (symlinkat(dev_links[i][1], mnt, dev_links[i][0]) < 0 ||
        fchownat(mnt, dev_links[i][0], s->base, s->base,
                 AT_SYMLINK_NOFOLLOW) < 0)
      return dsec_fail(err, errno, "cannot make /dev/%s", dev_links[i][0]);
  /* shm's mode without the umask's say */
  if (mkdirat(mnt, "pts", 0755) < 0 || mkdirat(mnt, "shm", 0700) < 0 ||
      fchownat(mnt, "shm", s->base, s->base, 0) < 0 ||
      fchmodat(mnt, "shm", 01777, 0) < 0)
    return dsec_fail(err, errno, "cannot make the sandbox's /dev");

  if (s->fncall)
    s->audit_off = xstrdup("masked: not recorded by the fncall backend");
  else if ((s->fan_fd = mask_group(s)) < 0)
    /* EMFILE: fs.fanotify.max_user_groups (128 by default) is used up */
    s->audit_off = xasprintf("masked: fanotify_init: %s", strerror(errno));
  if (mkdirat(mnt, MASKS, 0755) < 0 ||
      (masks = openat(mnt, MASKS, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    return dsec_fail(err, errno, "cannot make the mask files");
  s->mask_fh = xzalloc(sizeof *s->mask_fh * (n + 1));
  for (size_t i = 0; i < n; i++) {
    char hbuf[sizeof(struct file_handle) + MAX_HANDLE_SZ]
      __attribute__((aligned(__alignof__(struct file_handle))));
    struct file_handle *fh = (struct file_handle *) hbuf;
    struct stat st;
    char name[32];
    int fd, mnt_id;
    /* only files (directories get MASK_DIR) */
    if (lstat(masked_paths[i], &st) < 0 || S_ISDIR(st.st_mode))
      continue;
    snprintf(name, sizeof name, "%zu", i);
    fd = openat(masks, name,
                O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd < 0)
      return dsec_fail(err, errno, "cannot make the mask file of %s",
                       masked_paths[i]);
    /* watched with the handle its events will carry */
    fh->handle_bytes = MAX_HANDLE_SZ;
    if (s->fan_fd >= 0 &&
        name_to_handle_at(fd, "", fh, &mnt_id, AT_EMPTY_PATH) == 0 &&
        fanotify_mark(s->fan_fd, FAN_MARK_ADD, FAN_OPEN, fd, NULL) == 0) {
      s->mask_fh[i] = xmalloc(sizeof *fh + fh->handle_bytes);
      memcpy(s->mask_fh[i], fh, sizeof *fh + fh->handle_bytes);
    }
    close(fd);
  }
  /* the masks' file where it made none (mask_paths); then mode 0555, the
   * supervisor's, on a mount that is read-only: nothing in the sandbox
   * can put a file in it */
  {
    int fd = openat(masks, "empty",
                    O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd < 0)
      return dsec_fail(err, errno, "cannot make the mask files");
    close(fd);
  }
  if (mkdirat(masks, "dir", 0555) < 0 || fchmodat(mnt, MASKS, 0555, 0) < 0)
    return dsec_fail(err, errno, "cannot make the mask directory");

  /* attached first: a detached mount cannot be cloned before Linux 6.15;
   * read-only last: a mount may go on a directory of a read-only mount */
  if (syscall(SYS_move_mount, mnt, "", dev, "",
              MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0 ||
      (shm = (int) syscall(SYS_open_tree, mnt, "shm",
                           OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)) < 0 ||
      syscall(SYS_mount_setattr, shm, "", AT_EMPTY_PATH, &exec,
              sizeof exec) < 0 ||
      syscall(SYS_move_mount, shm, "", mnt, "shm",
              MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
      (s->rootns_fd >= 0 && bind_dev_nodes(mnt) < 0) ||
      syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &ro, sizeof ro) < 0)
    return dsec_fail(err, errno, "cannot mount the sandbox's /dev");
  return 0;
}

/* The host's shared sysfs (layermount.h) at the root's /sys, where init
 * finds it once in its root: read-only, nosuid, nodev, noexec, and locked
 * so in the sandbox's user namespace as /dev is.  /sys is resolved inside
 * the root (an image's link to a directory of its own is followed there,
 * as init's own mount did; the masks are resolved the same way), made
 * when the image has none.  Nothing to do without one (init mounts its
 * own). */
static int attach_sys(struct sup *s, struct dsec_error **err)
{
  _cleanup_free_ char *root = xasprintf("%s/rootfs", s->e->run);
  _cleanup_close_ int rfd = -1;
  _cleanup_close_ int sys = -1;
  _cleanup_close_ int t = s->sysfs_fd;
  struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                         MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC };

  s->sysfs_fd = -1;
  if (t < 0)
    return 0;
  rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0)
    return dsec_fail(err, errno, "cannot open %s", root);
  sys = open_in_root(rfd, "/sys", true, s->base, err);
  if (sys < 0)
    return -1;
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0 ||
      syscall(SYS_move_mount, t, "", sys, "",
              MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
    return dsec_fail(err, errno, "cannot attach the shared sysfs at /sys");
  return 0;
}

/* Which masked path an event's file handle names, or NULL. */
static const char *mask_of_event(struct sup *s,
                                 const struct fanotify_event_metadata *m)
{
  const char *p = (const char *) m + m->metadata_len;
  const char *end = (const char *) m + m->event_len;
  struct fanotify_event_info_header h;

  for (; p + sizeof h <= end; p += h.len) {
    struct file_handle fh;
    const char *bytes;
    memcpy(&h, p, sizeof h);
    if (h.len < sizeof h || h.len > (size_t) (end - p))
      return NULL;
    if (h.info_type != FAN_EVENT_INFO_TYPE_FID ||
        h.len < sizeof(struct fanotify_event_info_fid) + sizeof fh)
      continue;
    memcpy(&fh, p + sizeof(struct fanotify_event_info_fid), sizeof fh);
    bytes = p + sizeof(struct fanotify_event_info_fid) + sizeof fh;
    if (fh.handle_bytes > (size_t) (p + h.len - bytes))
      continue;
    for (size_t i = 0; masked_paths[i]; i++) {
      const struct file_handle *want = s->mask_fh[i];
      if (want && want->handle_type == fh.handle_type &&
          want->handle_bytes == fh.handle_bytes &&
          memcmp(want->f_handle, bytes, fh.handle_bytes) == 0)
        return masked_paths[i];
    }
  }
  return NULL;
}

/* An open of a masked file: recorded with the denials' rate limit.  pid
 * is the opener's as the host numbers it, or null where the kernel does
 * not say (rootless: an unprivileged group's events carry pid 0). */
static void masks_opened(struct dsec_engine *e, void *p, uint32_t events)
{
  struct sup *s = e->b;
  (void) p, (void) events;
  char buf[4096] __attribute__((aligned(__alignof__(struct fanotify_event_metadata))));
  for (;;) {
    ssize_t n = read(s->fan_fd, buf, sizeof buf);
    struct fanotify_event_metadata *m;
    if (n <= 0)
      return;
    for (m = (struct fanotify_event_metadata *) buf; FAN_EVENT_OK(m, n);
         m = FAN_EVENT_NEXT(m, n)) {
      const char *path = mask_of_event(s, m);
      if (m->fd >= 0)
        close(m->fd);
      if (!path)
        continue;
      if (dsec_audit_is_new(s->e->audit, DSEC_AUDIT_MASKED, path, strlen(path)))
        dsec_engine_event_first(s->e, json_pack("{s:s, s:s, s:o}", "type", "masked",
                                     "path", path, "pid",
                                     m->pid > 0 ? json_integer(m->pid) : json_null()),
                        DSEC_AUDIT_MASKED, path, strlen(path));
      else if (denial_admit(s))
        dsec_engine_event(s->e, json_pack("{s:s, s:s, s:o}", "type", "masked", "path",
                               path, "pid",
                               m->pid > 0 ? json_integer(m->pid) : json_null()));
    }
  }
}

/* Destroying a fanotify group waits for an SRCU grace period (~15 ms here),
 * and whoever removes the sandbox waits for our exit: a child holding the
 * last reference pays it instead, dying with us (only async-signal-safe
 * calls after fork: proxy threads may run). */
static void ctr_after_end(struct dsec_engine *e)
{
  struct sup *s = e->b;
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

/* ---- checkpoints */

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
  /* libarchive's name conversions, set up while the root is the host's:
   * the upper directory is the sandbox's to fill (dsec_tar_preload) */
  dsec_tar_preload();
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


/* The checkpoint's producer (see dsec_checkpoint_import): the writable
 * layer streamed by upper_stream_child, from the sandbox's own privilege
 * domain.  The engine keeps the sandbox frozen meanwhile. */
static int ctr_checkpoint(void *ud, int fd, json_t **stats,
                          struct dsec_error **err)
{
  struct dsec_engine *e = ud;
  struct sup *s = e->b;
  _cleanup_free_ char *upper = s->upperfs ? xasprintf("%s/upper", s->upperfs)
                                          : xasprintf("%s/upper", e->dir);
  _cleanup_free_ char *text = NULL;
  _cleanup_json_ json_t *r = NULL;
  size_t len = 0;
  int rp[2], st;
  pid_t pid;

  if (s->init_pid <= 0)
    return dsec_fail(err, ESRCH, "the sandbox's init is gone");
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
    upper_stream_child(upper, s->init_pid, s->rootless, fd, rp[1]);
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

/* ---- timers: the counts the rate limits dropped, once a second */

static int ctr_next_timer(struct dsec_engine *e)
{
  struct sup *s = e->b;
  double now = now_ms(), next = -1;
  /* a pending suppressed count is written when its second ends */
  if (s->processes_suppressed)
    next = s->process_window + 1000;
  if (s->denials_suppressed && (next < 0 || s->denial_window + 1000 < next))
    next = s->denial_window + 1000;
  if (next < 0)
    return -1;
  return next <= now ? 0 : (int) (next - now) + 1;
}

static void ctr_timers(struct dsec_engine *e)
{
  struct sup *s = e->b;
  if (s->processes_suppressed || s->denials_suppressed)
    flush_suppressed(s, now_ms());
}


/* ---- the root file system */

/* With resources.disk_mb, the writable layer lives on an ext4 file system
 * of that size (a sparse file in the sandbox's directory on a loop
 * device): the sandbox hits ENOSPC, the host's disk does not fill.
 * Returns the directory holding upper/ and work/ (new). */
static char *disk_limited_upper(struct sup *s, json_int_t mb, uid_t base,
                                struct dsec_error **err)
{
  _cleanup_free_ char *img = xasprintf("%s/upper.img", s->e->dir);
  _cleanup_free_ char *mnt = xasprintf("%s/upperfs", s->e->run);
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
  dev = dsec_loop_attach(fd, false, &loop, err);
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
static int bind_into_root(struct sup *s, int rfd, const struct dsec_mount *m,
                          int userns, uid_t base, struct dsec_error **err)
{
  const char *src = m->source, *dst = m->target;
  bool ro = m->ro;
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
    um = rw_map(st.st_uid, base, s->e->spec->uid);
    gm = rw_map(st.st_gid, base, s->e->spec->gid);
    mapns = dsec_userns_with_maps(um, gm, err);
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

/* The overlay of the root from its layers as descriptors (lowers[], top
 * first, each a detached idmapped mount), upper and work: Linux 6.15
 * takes detached mounts as layers ("lowerdir+" with FSCONFIG_SET_FD), so
 * no directory is made for a layer to be mounted on.  A mount descriptor,
 * or -1 with errno.  Older kernels fail here in several ways: EBADF for
 * the O_PATH descriptors open_tree gives (before 6.15), EINVAL for
 * "lowerdir+" (before 6.13) or for a detached layer (at the create). */
static int overlay_by_fd(const int *lowers, size_t n, const char *empty,
                         const char *upper, const char *work)
{
  _cleanup_close_ int fs = (int) syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);

  if (fs < 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_FD, "lowerdir+", NULL,
                lowers[i]) < 0)
      return -1;
  if ((empty && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir+",
                        empty, 0) < 0) ||
      (upper && (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "upperdir",
                         upper, 0) < 0 ||
                 syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "workdir",
                         work, 0) < 0 ||
                 syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "volatile",
                         NULL, 0) < 0)) ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
    return -1;
  return (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                       MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
}

/* Mounts the sandbox's root in the supervisor's mount namespace:
 * run/rootfs the overlay of the idmapped layers (given as descriptors, or
 * on older kernels mounted at run/lower/<i> first), then the spec's bind
 * mounts (idmapped as well, so the sandbox's root owns what the host's
 * root owns, and nothing is chowned). */
static int mount_rootfs(struct sup *s, struct dsec_container_opts *o,
                        int userns, uid_t base, struct dsec_error **err)
{
  _cleanup_free_ char *lowers = xstrdup("");
  _cleanup_free_ char *opts = NULL;
  _cleanup_free_ char *upper = NULL;
  _cleanup_free_ char *work = NULL;
  _cleanup_free_ char *empty = NULL;
  _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", s->e->run);
  _cleanup_close_ int root = -1;
  int *trees = xmalloc((o->n_layers + 1) * sizeof *trees);
  size_t i, n = 0;
  int ret = -1;

  /* each layer a detached mount, idmapped read-only, top layer first */
  for (i = o->n_layers; i-- > 0; n++) {
    struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY |
                                           MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                               .userns_fd = (uint64_t) userns };
    if (s->rootless) {
      /* our layers are ours: nothing to map */
      attr.attr_set &= ~(uint64_t) MOUNT_ATTR_IDMAP;
      attr.userns_fd = 0;
    }
    if (o->layer_fds && o->layer_fds[i] >= 0) {
      s->erofs_images = xrealloc(s->erofs_images,
                                 (s->n_erofs + 1) * sizeof *s->erofs_images);
      s->erofs_images[s->n_erofs++] = xstrdup(o->layers[i]);
      /* the creator's clone of the host's mount of the layer's EROFS
       * image: this sandbox's own from now on */
      trees[n] = o->layer_fds[i];
      o->layer_fds[i] = -1;
    } else
      trees[n] = (int) syscall(SYS_open_tree, AT_FDCWD, o->layers[i],
                               OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (trees[n] < 0) {
      dsec_fail(err, errno, "cannot open layer %s", o->layers[i]);
      goto out;
    }
    if (syscall(SYS_mount_setattr, trees[n], "", AT_EMPTY_PATH, &attr,
                sizeof attr) < 0) {
      dsec_fail(err, errno, "cannot idmap layer %s (idmapped mounts need "
                            "Linux 5.12 and a filesystem that supports "
                            "them)", o->layers[i]);
      n++;
      goto out;
    }
  }
  {
    /* our copy of the host's layer mounts (made when we unshared) would
     * keep every layer mounted then alive as long as this sandbox */
    _cleanup_free_ char *top = dsec_run_dir();
    dsec_layer_mounts_detach(top);
  }
  if (o->n_layers == 1 && s->fncall) {
    /* overlay wants two lower layers when there is no upper: an empty one */
    empty = xasprintf("%s/lower/empty", s->e->run);
    if (dsec_mkdir_p(AT_FDCWD, empty, 0755, err) < 0)
      goto out;
  }
  if (dsec_mkdir_p(AT_FDCWD, rootfs, 0755, err) < 0)
    goto out;
  if (!s->fncall) {
    /* fncall's root has no upper layer: its calls write to tmpfs only */
    int64_t mb = s->e->spec->resources.disk_mb;
    _cleanup_free_ char *top = NULL;
    if (mb > 0) {
      top = disk_limited_upper(s, mb, base, err);
      if (!top)
        goto out;
      s->upperfs = xstrdup(top);
    } else
      top = xstrdup(s->e->dir);
    upper = xasprintf("%s/upper", top);
    work = xasprintf("%s/work", top);
    if (mkdir(upper, 0755) < 0 && errno != EEXIST) {
      dsec_fail(err, errno, "cannot create %s", upper);
      goto out;
    }
    if (mkdir(work, 0700) < 0 && errno != EEXIST) {
      dsec_fail(err, errno, "cannot create %s", work);
      goto out;
    }
    if (chown(upper, base, base) < 0 || chown(work, base, base) < 0) {
      dsec_fail(err, errno, "cannot give the upper dir to the sandbox");
      goto out;
    }
  }
  /* Overlay metadata (opaque directories) is in user.overlay.* xattrs
   * (userxattr), as root too: a checkpoint reads the upper directory from
   * inside the sandbox's user namespace, where trusted.* cannot be read.
   * (The layers carry both; what the sandbox sets through the overlay as
   * user.overlay.* is escaped by overlayfs, so only overlayfs makes
   * markers.)
   * volatile: no syncs to the upper file system (an unmount with them syncs
   * the whole file system, milliseconds on a busy disk); a sandbox's
   * writable layer does not outlive a host crash anyway. */
  /* whatever made the descriptors' way fail (an older kernel, or what
   * would fail the path form too), the path form is tried: it says what
   * is wrong, if anything is.  (Each supervisor makes one overlay: there
   * is nothing to remember between tries.) */
  root = overlay_by_fd(trees, n, empty, upper, work);
  if (root >= 0) {
    if (syscall(SYS_move_mount, root, "", s->e->run_fd, "rootfs",
                MOVE_MOUNT_F_EMPTY_PATH) < 0) {
      dsec_fail(err, errno, "cannot attach the overlay");
      goto out;
    }
  } else {
    /* before Linux 6.15: each layer mounted at run/lower/<i>, the
     * overlay's options name them (relative to run/: a shorter string) */
    for (i = 0; i < n; i++) {
      size_t layer = n - 1 - i;
      _cleanup_free_ char *dst = xasprintf("%s/lower/%zu", s->e->run, layer);
      char *nl;
      if (dsec_mkdir_p(AT_FDCWD, dst, 0700, err) < 0)
        goto out;
      if (syscall(SYS_move_mount, trees[i], "", AT_FDCWD, dst,
                  MOVE_MOUNT_F_EMPTY_PATH) < 0) {
        dsec_fail(err, errno, "cannot attach layer %s", o->layers[layer]);
        goto out;
      }
      nl = xasprintf("%s%slower/%zu", lowers, *lowers ? ":" : "", layer);
      free(lowers);
      lowers = nl;
    }
    if (s->fncall)
      opts = xasprintf("lowerdir=%s%s,userxattr", lowers,
                       empty ? ":lower/empty" : "");
    else
      opts = xasprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr,volatile",
                       lowers, upper, work);
    if (fchdir(s->e->run_fd) < 0) {
      dsec_fail(err, errno, "cannot enter %s", s->e->run);
      goto out;
    }
    if (mount("overlay", "rootfs", "overlay", MS_NOSUID | MS_NODEV, opts) < 0) {
      dsec_fail(err, errno, "cannot mount the overlay");
      goto out;
    }
    if (chdir("/") < 0) {
      dsec_fail(err, errno, "chdir /");
      goto out;
    }
  }

  {
    _cleanup_close_ int rfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0) {
      dsec_fail(err, errno, "cannot open %s", rootfs);
      goto out;
    }
    for (i = 0; i < s->e->spec->n_mounts; i++)
      if (bind_into_root(s, rfd, &s->e->spec->mounts[i], userns, base, err) < 0)
        goto out;
  }
  ret = 0;
out:
  for (i = 0; i < n; i++)
    if (trees[i] >= 0)
      close(trees[i]);
  free(trees);
  return ret;
}


/* ---- the container backend */

static const struct dsec_backend_ops container_ops = {
  .exec = ctr_exec,
  .signal = ctr_signal,
  .freeze = ctr_freeze,
  .checkpoint = ctr_checkpoint,
  .exec_done = ctr_exec_done,
  .job_free = ctr_job_free,
  .child = ctr_child,
  .next_timer = ctr_next_timer,
  .timers = ctr_timers,
  .stop = ctr_stop,
  .after_end = ctr_after_end,
  .epilogue = ctr_epilogue,
};

/* fncall: the root is read-only, calls share nothing: no state to keep */
static const struct dsec_backend_ops fncall_ops = {
  .exec = ctr_exec,
  .signal = ctr_signal,
  .freeze = ctr_freeze,
  .exec_done = ctr_exec_done,
  .job_free = ctr_job_free,
  .child = ctr_child,
  .next_timer = ctr_next_timer,
  .timers = ctr_timers,
  .stop = ctr_stop,
  .after_end = ctr_after_end,
  .epilogue = ctr_epilogue,
};

/* 1. A mount namespace of our own (nothing we mount is seen by the host,
 * and everything goes when we exit); rootless, inside a user namespace of
 * our own that maps its root to us (the sandbox shares it: only one id is
 * ours to map).  The run directory is private: the sandbox's processes
 * never need a host path, its init enters the root through a descriptor. */
static int own_namespaces(struct sup *s, struct dsec_error **err)
{
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
    if (unshare(CLONE_NEWUSER) < 0)
      return dsec_fail(err, errno, "cannot create a user namespace (are "
                                   "unprivileged user namespaces enabled?)");
    snprintf(map, sizeof map, "0 %u 1\n", uid);
    if (write_file("/proc/self/setgroups", "deny") < 0 ||
        write_file("/proc/self/uid_map", map) < 0)
      return dsec_fail(err, errno, "cannot map our user id");
    snprintf(map, sizeof map, "0 %u 1\n", gid);
    if (write_file("/proc/self/gid_map", map) < 0)
      return dsec_fail(err, errno, "cannot map our group id");
  }
  if (unshare(CLONE_NEWNS) < 0 ||
      mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    return dsec_fail(err, errno, "cannot create a mount namespace");
  {
    _cleanup_free_ char *top = dsec_run_dir();
    if (dsec_private_dir(top, err) < 0 ||
        dsec_private_dir(s->e->run, err) < 0)
      return -1;
  }
  s->e->run_fd = open(s->e->run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s->e->run_fd < 0)
    return dsec_fail(err, errno, "cannot open %s", s->e->run);
  return 0;
}

/* The network namespace of a world whose agent is the sandbox agent: its
 * init's, while its supervisor lives (an fd), or -1 and *err. */
static int world_netns(const char *agent, struct dsec_error **err)
{
  _cleanup_json_ json_t *st = NULL;
  _cleanup_free_ char *path = NULL;
  const char *state;
  pid_t init;
  int fd;

  if (!dsec_sandbox_id_valid(agent))
    return dsec_bad_input(err, "world: `%s` is no sandbox id", agent);
  st = dsec_sandbox_status(agent, err);
  if (!st)
    return dsec_error_wrap(err, "the world's agent");
  state = json_string_value(json_object_get(st, "state"));
  init = (pid_t) json_integer_value(json_object_get(st, "init_pid"));
  if (!state || strcmp(state, "running") != 0 || init <= 0)
    return dsec_fail(err, 0, "the world's agent %s is %s", agent,
                     state ? state : "unknown");
  path = xasprintf("/proc/%d/ns/net", (int) init);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return dsec_fail(err, errno, "cannot open the world's network (%s)", path);
  /* the init we opened is still the agent's: its supervisor lives */
  {
    _cleanup_json_ json_t *again = dsec_sandbox_status(agent, NULL);
    if (!again || strcmp(json_string_value(json_object_get(again, "state"))
                           ?: "", "running") != 0) {
      close(fd);
      return dsec_fail(err, 0, "the world's agent %s ended", agent);
    }
  }
  return fd;
}

/* 3. stage1, which makes the sandbox's user namespace as the sandbox's
 * own host id, and its maps: root inside is the first id of the range. */
static int start_stage1(struct sup *s, json_t *spec, struct dsec_error **err)
{
  struct stage1_args a = { 0 };
  int ip[2];

  if (s->rootless) {
    /* the sandbox's root is our own root, which is us on the host */
    s->base = 0;
    s->count = 1;
  } else {
    struct dsec_idrange r;
    if (dsec_idrange_acquire(s->e->id, &r, err) < 0)
      return -1;
    s->base = r.base;
    s->count = r.count;
  }
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ip) < 0)
    return dsec_fail(err, errno, "cannot create the control channel");
  {
    int sz = MSG_MAX + 4096, big = INIT_SNDBUF;
    socklen_t len = sizeof s->isock_sndbuf;
    /* (see init_backlogged; rootless, as much as we may) */
    if (setsockopt(ip[0], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) < 0)
      setsockopt(ip[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    if (getsockopt(ip[0], SOL_SOCKET, SO_SNDBUF, &s->isock_sndbuf, &len) < 0)
      s->isock_sndbuf = 2 * (MSG_MAX + 4096);
    /* each message with its sender's pid: an exec's start (process_told) */
    setsockopt(ip[0], SOL_SOCKET, SO_PASSCRED, &(int){ 1 }, sizeof(int));
    setsockopt(ip[1], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz);
    setsockopt(ip[0], SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
    setsockopt(ip[1], SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
  }
  if (seccomp_filters(&a.filter_tmpl, &a.filter_plain, seccomp_flags(spec),
                      true, err) < 0) {
    close(ip[0]);
    close(ip[1]);
    return -1;
  }
  a.sock = ip[1];
  a.rootfd = -1;
  a.spec = spec;
  a.fncall = s->fncall;
  a.sys_shared = s->sysfs_fd >= 0;
  a.templated = s->rootns_fd >= 0;
  a.owner = s->rootless ? 0 : s->base;
  a.netns_fd = -1;
  for (int c = 0; c < DSEC_CG_N; c++)
    a.cg_fds[c] = -1;
  if ((s->e->spec->world.agent &&
       (a.netns_fd = world_netns(s->e->spec->world.agent, err)) < 0) ||
      (s->e->cg && dsec_cgroup_join_open(s->e->cg, a.cg_fds, err) < 0)) {
    if (a.netns_fd >= 0)
      close(a.netns_fd);
    dsec_bpf_clear(&a.filter_tmpl);
    dsec_bpf_clear(&a.filter_plain);
    close(ip[0]);
    close(ip[1]);
    return -1;
  }
  s->stage1_pid = (pid_t) syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, 0);
  if (s->stage1_pid == 0) {
    close(ip[0]);
    if (s->rootns_fd >= 0)
      close(s->rootns_fd);
    if (s->sysfs_fd >= 0)
      close(s->sysfs_fd);
    if (s->dev_fd >= 0)
      close(s->dev_fd);
    stage1(&a);
  }
  close(ip[1]);
  dsec_cgroup_join_close(a.cg_fds);
  dsec_bpf_clear(&a.filter_tmpl);
  dsec_bpf_clear(&a.filter_plain);
  if (a.netns_fd >= 0)
    close(a.netns_fd);
  s->isock = ip[0];
  if (s->stage1_pid < 0)
    return dsec_fail(err, errno, "cannot start the sandbox");
  if (!s->rootless) {
    char map[64], path[64];
    int fds[3], nfds;
    json_t *m = msg_recv(s->isock, s->msgbuf, MSG_MAX, fds, &nfds);
    const char *op = json_string_value(json_object_get(m, "op"));
    bool made = op && strcmp(op, "userns") == 0;
    if (!made && op && strcmp(op, "failed") == 0)
      dsec_fail(err, (int) json_integer_value(json_object_get(m, "errno")),
                "%s", json_string_value(json_object_get(m, "msg")));
    for (int i = 0; i < nfds; i++)
      close(fds[i]);
    json_decref(m);
    if (!made)
      return dsec_fail(err, 0, "the sandbox's first process died");
    snprintf(map, sizeof map, "0 %u %u\n", s->base, s->count);
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int) s->stage1_pid);
    if (write_file(path, map) < 0)
      return dsec_fail(err, errno, "cannot write the uid map");
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int) s->stage1_pid);
    if (write_file(path, map) < 0)
      return dsec_fail(err, errno, "cannot write the gid map");
  }
  return 0;
}

/* 4. The root file system (while stage1 moves itself into the
 * cgroups). */
static int root_file_system(struct sup *s, struct dsec_container_opts *o,
                            struct dsec_error **err)
{
  _cleanup_free_ char *userns_path =
    xasprintf("/proc/%d/ns/user", (int) s->stage1_pid);
  _cleanup_close_ int userns = open(userns_path, O_RDONLY | O_CLOEXEC);

  if (userns < 0)
    return dsec_fail(err, errno, "cannot open the user namespace");
  if (mount_rootfs(s, o, userns, s->base, err) < 0)
    return -1;
  /* (template_ns joins it too) */
  if (s->rootns_fd >= 0)
    s->userns_fd = dsec_steal_fd(&userns);
  return 0;
}

/* The sandbox's mount namespace, from the template (layermount.h): a
 * child of ours copies the template and stacks a clone of the root file
 * system on the copy's root; its child joins the sandbox's user
 * namespace and copies that again, which locks every mount of it there
 * (the sandbox can undo none), as init's copy of ours is where it
 * pivot_roots.  The first copy goes when our child exits, which waits
 * for an RCU grace period: we wait for that only once init is up
 * (start_init), and never for its child, which is not ours.  An nsfs
 * descriptor of the second copy (new fd), or -1. */
static int template_ns(struct sup *s, struct dsec_error **err)
{
  _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", s->e->run);
  _cleanup_close_ int userns = dsec_steal_fd(&s->userns_fd);
  _cleanup_close_ int tree = -1;
  int sp[2], ns = -1;
  struct { int e; pid_t pid; } r = { 0, 0 };
  pid_t pid, self;

  tree = (int) syscall(SYS_open_tree, AT_FDCWD, rootfs,
                       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (tree < 0)
    return dsec_fail(err, errno, "cannot clone %s", rootfs);
  /* one end for the children: the second copy's pid (or an error) goes
   * up, and its end of file comes back once the copy is open */
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return dsec_fail(err, errno, "socketpair");
  self = getpid();
  pid = fork();
  if (pid == 0) {
    char c;
    close(sp[0]);
    /* (a supervisor killed before the prctl is not our parent now) */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != self)
      _exit(1);
    self = getpid();
    if (setns(s->rootns_fd, CLONE_NEWNS) < 0 || unshare(CLONE_NEWNS) < 0 ||
        syscall(SYS_move_mount, tree, "", AT_FDCWD, "/",
                MOVE_MOUNT_F_EMPTY_PATH) < 0 || (r.pid = fork()) < 0) {
      r.e = errno;
      (void) !write(sp[1], &r, sizeof r);
      _exit(1);
    }
    if (r.pid == 0) {
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != self)
        _exit(1);
      r.pid = getpid();
      if (setns(userns, CLONE_NEWUSER) < 0 || unshare(CLONE_NEWNS) < 0)
        r.e = errno;
      if (write(sp[1], &r, sizeof r) != (ssize_t) sizeof r || r.e)
        _exit(1);
      /* until the second copy is open */
      (void) !read(sp[1], &c, 1);
      _exit(0);
    }
    /* the end is the child's alone (should it die before it tells, we
     * see the end of file); the first copy lives while we wait */
    close(sp[1]);
    while (waitpid(r.pid, NULL, 0) < 0 && errno == EINTR)
      ;
    _exit(0);
  }
  close(sp[1]);
  if (pid < 0) {
    r.e = errno;
    close(sp[0]);
    return dsec_fail(err, r.e, "fork");
  }
  if (read(sp[0], &r, sizeof r) != (ssize_t) sizeof r)
    r.e = EPROTO;
  if (r.e == 0) {
    _cleanup_free_ char *path = xasprintf("/proc/%d/ns/mnt", (int) r.pid);
    if ((ns = open(path, O_RDONLY | O_CLOEXEC)) < 0)
      r.e = errno;
  }
  close(sp[0]);
  if (r.e) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
      ;
    return dsec_fail(err, r.e, "cannot make the sandbox's mount namespace "
                               "from the template");
  }
  s->ns_helper = pid;
  return ns;
}

/* 5 and 6. stage1 goes on with the root file system; init sets the
 * sandbox up and reports ready, or why not. */
static int start_init(struct sup *s, struct dsec_error **err)
{
  {
    _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", s->e->run);
    _cleanup_close_ int rfd = -1;
    json_t *go;
    int r;
    if (s->rootns_fd >= 0) {
      rfd = template_ns(s, err);
      close(s->rootns_fd);
      s->rootns_fd = -1;
      if (rfd < 0)
        return -1;
    } else if ((rfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
      return dsec_fail(err, errno, "cannot open %s", rootfs);
    go = json_pack("{s:s}", "op", "go");
    r = msg_send(s->isock, go, &rfd, 1);
    json_decref(go);
    if (r < 0)
      return dsec_fail(err, errno, "cannot start stage1");
  }
  while (waitpid(s->stage1_pid, NULL, 0) < 0 && errno == EINTR)
    ;
  s->stage1_pid = 0;
  for (;;) {
    int fds[3], nfds;
    struct pollfd pf = { s->isock, POLLIN, 0 };
    json_t *m;
    const char *op;
    if (poll(&pf, 1, 60000) <= 0)
      return dsec_fail(err, ETIMEDOUT, "the sandbox's init did not start");
    m = msg_recv(s->isock, s->msgbuf, MSG_MAX, fds, &nfds);
    op = json_string_value(json_object_get(m, "op"));
    if (m && nfds == 1 && op && strcmp(op, "ready") == 0) {
      s->proxy_lfd = fds[0];
      nfds = 0;
    }
    for (int i = 0; i < nfds; i++)
      close(fds[i]);
    if (!m)
      return dsec_fail(err, 0, "the sandbox's init died while starting");
    if (op && strcmp(op, "failed") == 0) {
      json_int_t st = json_integer_value(json_object_get(m, "status"));
      dsec_error_set(err, st ? (int) st : DSEC_EXIT_FAILURE,
                     (int) json_integer_value(json_object_get(m, "errno")),
                     "sandbox setup: %s",
                     json_string_value(json_object_get(m, "msg")));
      json_decref(m);
      return -1;
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
  /* init is our child (CLONE_PARENT): the only one left once
   * template_ns's is reaped (long gone by now) */
  if (s->ns_helper > 0) {
    while (waitpid(s->ns_helper, NULL, 0) < 0 && errno == EINTR)
      ;
    s->ns_helper = 0;
  }
  {
    char path[64];
    _cleanup_free_ char *children = NULL;
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int) getpid());
    children = dsec_read_file_at(AT_FDCWD, path, 4096, NULL, NULL);
    if (children)
      s->init_pid = (pid_t) strtol(children, NULL, 10);
  }
  if (s->init_pid <= 0)
    return dsec_fail(err, 0, "cannot find the sandbox's init");
  /* a latency-class sandbox shares no core with another's tasks: init's
   * cookie goes to every process it starts */
  if (s->e->spec->resources.klass == DSEC_CLASS_LATENCY)
    s->core_sched = dsec_core_sched_isolate(s->init_pid, &s->core_sched_off);
  return 0;
}

/* 7. What the engine serves besides the exec socket: init's messages,
 * opens of masked files, the proxy's port. */
static int watch_sandbox(struct sup *s, struct dsec_error **err)
{
  struct dsec_engine *e = s->e;
  s->w_init = (struct dsec_watch){ init_message, NULL, false };
  if (dsec_engine_watch(e, s->isock, EPOLLIN, &s->w_init) < 0)
    return dsec_fail(err, errno, "cannot watch the sandbox's init");
  if (s->fan_fd >= 0) {
    s->w_fan = (struct dsec_watch){ masks_opened, NULL, false };
    dsec_engine_watch(e, s->fan_fd, EPOLLIN, &s->w_fan);
  }
  if (s->proxy_lfd >= 0) {
    dsec_net_events_init(&e->net, e->audit);
    e->proxy = dsec_proxy_new(e->spec->network.json, dsec_net_events_report,
                              &e->net);
    s->w_proxy = (struct dsec_watch){ proxy_accept, NULL, false };
    if (dsec_engine_watch(e, s->proxy_lfd, EPOLLIN, &s->w_proxy) < 0)
      return dsec_fail(err, errno, "cannot serve the proxy");
  }
  return 0;
}

/* The container's fields of the sandbox's state (new). */
static json_t *state_fields(struct sup *s)
{
  _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", s->e->run);
  json_t *f = json_pack("{s:i, s:s, s:{s:I, s:I}}", "init_pid",
                        (int) s->init_pid, "rootfs", rootfs, "idmap",
                        "host_base", (json_int_t) s->base, "count",
                        (json_int_t) s->count);
  if (s->audit_off)
    json_object_set_new(f, "audit_unavailable", json_string(s->audit_off));
  if (s->landlock)
    json_object_set(f, "landlock", s->landlock);
  if (s->landlock_off)
    json_object_set_new(f, "landlock_unavailable",
                        json_string(s->landlock_off));
  if (s->core_sched == 1)
    json_object_set_new(f, "core_sched", json_true());
  else if (s->core_sched_off)
    json_object_set_new(f, "core_sched_unavailable",
                        json_string(s->core_sched_off));
  return f;
}

/* How the layers are mounted, from the environment the creator made:
 * "layer_format" erofs or dir, and with dir why not erofs. */
static void layer_fields(json_t *f, json_t *env)
{
  static const char *const keys[] = { "layer_format", "erofs_unavailable",
                                      "erofs_backing", "sysfs",
                                      "sysfs_unshared", "dev", "dev_unshared",
                                      "mount_ns", "mount_ns_own" };
  for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
    if (json_object_get(env, keys[i]))
      json_object_set(f, keys[i], json_object_get(env, keys[i]));
}

_Noreturn void dsec_supervisor_main(struct dsec_container_opts *o)
{
  struct dsec_engine engine, *e = &engine;
  struct sup sv = { 0 }, *s = &sv;
  struct dsec_error *err = NULL;

  /* one malloc arena: the threads (the proxy's) are few
   * and brief, and an arena each is memory every sandbox pays for */
  mallopt(M_ARENA_MAX, 1);
  s->e = e;
  s->isock = s->proxy_lfd = s->fan_fd = s->userns_fd = -1;
  /* the creator's clone of the host's shared sysfs, in the slot after the
   * layers' */
  s->sysfs_fd = o->layer_fds ? o->layer_fds[o->n_layers] : -1;
  s->rootns_fd = o->layer_fds ? o->layer_fds[o->n_layers + 1] : -1;
  s->dev_fd = o->layer_fds ? o->layer_fds[o->n_layers + 2] : -1;
  s->msgbuf = xmalloc(MSG_MAX);
  s->rootless = geteuid() != 0;
  dsec_engine_init(e, o, &container_ops, s);
  s->fncall = e->spec->backend == DSEC_BACKEND_FNCALL;
  if (s->fncall)
    e->ops = &fncall_ops;

  if (own_namespaces(s, &err) < 0 ||
      /* 2. cgroups */
      dsec_cgroup_create(o->id, json_object_get(o->spec, "resources"), &e->cg,
                         &err) < 0 ||
      start_stage1(s, o->spec, &err) < 0 ||
      root_file_system(s, o, &err) < 0)
    dsec_engine_fail(e, err);
  /* /dev, with an empty file of its own for each masked file, whose
   * opens are recorded */
  if (make_dev(s, &err) < 0 || attach_sys(s, &err) < 0 ||
      start_init(s, &err) < 0)
    dsec_engine_fail(e, err);
  /* init is in its network namespace; in proxy mode its port's listening
   * socket is ours */
  if (s->proxy_lfd >= 0)
    dsec_crash_point("proxy port received");
  if (watch_sandbox(s, &err) < 0)
    dsec_engine_fail(e, err);
  if (s->proxy_lfd >= 0)
    dsec_crash_point("proxy serving");
  /* what the creation freed goes back before the sandbox idles */
  malloc_trim(0);
  {
    json_t *f = state_fields(s);
    layer_fields(f, o->environment);
    dsec_engine_serve(e, f,
                      json_pack("{s:s, s:s, s:O}", "type", "created",
                                "backend", dsec_backend_name(e->spec->backend),
                                "labels", e->spec->labels));
  }
}
