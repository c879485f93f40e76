/* dsec-agent: PID 1 of a dsec-vm guest.
 *
 * It starts in the initramfs dsec-vm built: loads the kernel modules the
 * guest needs, waits for the host's "setup" on the virtio-serial port
 * named dsec.agent, mounts the image's EROFS layers (read-only disks or
 * pmem) under an overlay whose writable layer is the VM's own ext4 disk,
 * moves into it, and then serves execs, one JSON header line each way:
 *
 *   host:  {"op":"exec","id":N,"argv":[..],"env":[..],"cwd":..,"uid":..,
 *           "gid":..,"stdin_len":K,"timeout_ms":T,"cap":C}  + K bytes
 *   guest: {"op":"result","id":N,"status":S,"timed_out":b,"oom_killed":b,
 *           "stdout_total":..,"stderr_total":..,"stdout_len":a,
 *           "stderr_len":b,"error":..}  + a + b bytes
 *
 * plus "setup"/"ready", "ping"/"pong" and "kill".  The captured output is
 * raw bytes after the header, so nothing needs escaping in here; the host
 * turns it into the result JSON exactly as the container backend does.
 *
 * A checkpoint streams the overlay's upper directory as a tar (pax) that
 * the host imports as it would an untrusted tarball:
 *
 *   host:  {"op":"checkpoint","id":N}
 *   guest: {"op":"checkpoint_data","id":N,"data_len":n} + n bytes, ...
 *          {"op":"checkpoint_end","id":N,"frozen":b,"entries":..,
 *           "bytes":..,"skipped_whiteout_names":..,"error":..}
 *   host:  {"op":"checkpoint_abort","id":N} (it refused the stream: the
 *          agent stops at the next piece)
 *
 * Static, on jansson only: the guest has nothing else. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/random.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "guest.h"
#include "netmux.h"

#define PORT_NAME "dsec.agent"
#define NET_PORT_NAME "dsec.net"
#define PROXY_PORT 3128
#define DRAIN_MS 100 /* output still arriving after the command exited */

extern char **environ;

static int port = -1;
static int rwfd = -1; /* the writable disk's root, frozen for a checkpoint */
/* the overlay's upper directory, opened before any command ran: a guest
 * root that renames it or puts a symlink in its place later changes
 * nothing of what a checkpoint reads */
static int upperfd = -1;

static void logmsg(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("dsec-agent: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* PID 1 must not exit: a fatal error stops the VM, which the host reports
 * as died with the console's last lines as the cause. */
static _Noreturn void fatal(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("dsec-agent: fatal: ", stderr);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, ": %s\n", strerror(errno));
  va_end(ap);
  sync();
  reboot(RB_POWER_OFF);
  for (;;)
    pause();
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static char *read_small(const char *path)
{
  static char buf[4096];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n;
  if (fd < 0)
    return NULL;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0)
    return NULL;
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
    n--;
  buf[n] = '\0';
  return buf;
}

/* ---- boot */

static void load_modules(void)
{
  FILE *f = fopen("/lib/modules/order", "re");
  char line[256];
  if (!f)
    return; /* a kernel with everything built in */
  while (fgets(line, sizeof line, f)) {
    char path[300];
    int fd;
    line[strcspn(line, "\n")] = '\0';
    if (!*line)
      continue;
    snprintf(path, sizeof path, "/lib/modules/%s", line);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST))
      logmsg("cannot load %s: %s", line, strerror(errno));
    if (fd >= 0)
      close(fd);
    unlink(path); /* its memory goes back once loaded */
  }
  fclose(f);
}

/* The block device whose virtio serial is want ("dsec-l0", "dsec-rw"),
 * waiting for the driver to probe it. */
static bool find_disk(const char *want, char *dev, size_t len)
{
  for (int tries = 0; tries < 1000; tries++) {
    DIR *d = opendir("/sys/block");
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char p[300];
      const char *serial;
      if (strncmp(e->d_name, "vd", 2) != 0)
        continue;
      snprintf(p, sizeof p, "/sys/block/%s/serial", e->d_name);
      serial = read_small(p);
      if (serial && strcmp(serial, want) == 0) {
        snprintf(dev, len, "/dev/%s", e->d_name);
        closedir(d);
        return true;
      }
    }
    if (d)
      closedir(d);
    usleep(10000);
  }
  return false;
}

/* The pmem device holding the EROFS image whose volume uuid is want (32
 * hex digits): the host names images by uuid, as the probe order of
 * devices is not the order they were given in. */
static bool find_pmem(const char *want, char *dev, size_t len)
{
  for (int tries = 0; tries < 1000; tries++) {
    DIR *d = opendir("/sys/block");
    struct dirent *e;
    while (d && (e = readdir(d))) {
      unsigned char sb[64];
      char hex[33], p[300];
      int fd;
      if (strncmp(e->d_name, "pmem", 4) != 0)
        continue;
      snprintf(p, sizeof p, "/dev/%s", e->d_name);
      fd = open(p, O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        continue;
      if (pread(fd, sb, sizeof sb, 1024) == (ssize_t) sizeof sb) {
        for (int i = 0; i < 16; i++)
          snprintf(hex + 2 * i, 3, "%02x", sb[48 + i]);
        if (strcmp(hex, want) == 0) {
          close(fd);
          closedir(d);
          snprintf(dev, len, "%s", p);
          return true;
        }
      }
      close(fd);
    }
    if (d)
      closedir(d);
    usleep(10000);
  }
  return false;
}

static int open_port(const char *want)
{
  for (int tries = 0; tries < 2000; tries++) {
    DIR *d = opendir("/sys/class/virtio-ports");
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char p[300];
      const char *name;
      if (e->d_name[0] == '.')
        continue;
      snprintf(p, sizeof p, "/sys/class/virtio-ports/%s/name", e->d_name);
      name = read_small(p);
      if (name && strcmp(name, want) == 0) {
        int fd;
        snprintf(p, sizeof p, "/dev/%s", e->d_name);
        fd = open(p, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
          closedir(d);
          return fd;
        }
      }
    }
    if (d)
      closedir(d);
    usleep(10000);
  }
  return -1;
}

static void mkdirs(const char *path, mode_t mode)
{
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *s = strchr(buf + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = '\0';
    mkdir(buf, mode);
    *s = '/';
  }
  mkdir(buf, mode);
}


/* protect and hide (guest.c, as in a container).  Execs lose
 * CAP_SYS_ADMIN and the rest of last_caps_drop when either is asked for,
 * so the guest's root cannot simply unmount them.  A failure of either
 * fails the setup: "ready" carries the error and the host ends the VM. */
static bool restricted;
static char setup_error[4200];
static void damon_fields(json_t *m);
static bool setup_bad_input;

static void protect_and_hide(json_t *setup)
{
  json_t *protect = json_object_get(setup, "protect");
  json_t *hide = json_object_get(setup, "hide");
  restricted = json_array_size(protect) > 0 || json_array_size(hide) > 0;
  if (dsec_guest_protect(protect, setup_error, sizeof setup_error,
                         &setup_bad_input) < 0 ||
      dsec_guest_hide(hide, "/run", setup_error, sizeof setup_error) < 0)
    logmsg("%s", setup_error);
  else
    setup_error[0] = '\0';
}

/* The device nodes a command has no business with go from /dev: the
 * agent's ports (it keeps them open), and with protect or hide the disks
 * (their file systems stay mounted), so that a root without CAP_MKNOD
 * cannot write around the agent or under the overlay. */
static void hide_devices(void)
{
  DIR *d = opendir("/dev");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    bool chan = strncmp(e->d_name, "vport", 5) == 0 ||
                strcmp(e->d_name, "hvc0") == 0;
    bool disk = strncmp(e->d_name, "vd", 2) == 0 ||
                strncmp(e->d_name, "pmem", 4) == 0;
    if (chan || (restricted && disk))
      unlinkat(dirfd(d), e->d_name, 0);
  }
  if (d)
    closedir(d);
}

/* Builds the root: layers bottom to top, the writable disk, the overlay,
 * then the usual kernel file systems inside it, and moves into it. */
static void setup_root(json_t *setup)
{
  size_t n = (size_t) json_integer_value(json_object_get(setup, "layers"));
  bool pmem = json_is_true(json_object_get(setup, "pmem"));
  size_t optlen = 64 + n * 24;
  char *opts = malloc(optlen), *o = opts;
  char dev[300], dir[64];

  if (!opts)
    fatal("out of memory");
  o += sprintf(o, "lowerdir=");
  for (size_t i = n; i-- > 0;) {
    char serial[32];
    snprintf(dir, sizeof dir, "/mnt/l%zu", i);
    mkdirs(dir, 0755);
    if (pmem) {
      const char *uuid = json_string_value(json_array_get(
        json_object_get(setup, "uuids"), i));
      if (!uuid || !find_pmem(uuid, dev, sizeof dev))
        fatal("no pmem device for layer %zu", i);
    } else {
      snprintf(serial, sizeof serial, "dsec-l%zu", i);
      if (!find_disk(serial, dev, sizeof dev))
        fatal("no disk for layer %zu", i);
    }
    if (mount(dev, dir, "erofs", MS_RDONLY | MS_NODEV, pmem ? "dax=always" : NULL) < 0 &&
        (!pmem || mount(dev, dir, "erofs", MS_RDONLY | MS_NODEV, NULL) < 0))
      fatal("cannot mount layer %zu (%s)", i, dev);
    o += sprintf(o, "%s%s", dir, i ? ":" : "");
  }
  if (!find_disk("dsec-rw", dev, sizeof dev))
    fatal("no writable disk");
  mkdirs("/mnt/rw", 0755);
  if (mount(dev, "/mnt/rw", "ext4", MS_NODEV, NULL) < 0)
    fatal("cannot mount the writable disk %s", dev);
  rwfd = open("/mnt/rw", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  mkdirs("/mnt/rw/upper", 0755);
  mkdirs("/mnt/rw/work", 0755);
  upperfd = open("/mnt/rw/upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                    O_CLOEXEC);
  if (upperfd < 0)
    fatal("cannot open the upper directory");
  if (n == 0) {
    mkdirs("/mnt/empty", 0755);
    o += sprintf(o, "/mnt/empty");
  }
  sprintf(o, ",upperdir=/mnt/rw/upper,workdir=/mnt/rw/work");
  if (mount("overlay", "/newroot", "overlay", 0, opts) < 0)
    fatal("cannot mount the overlay (%s)", opts);
  free(opts);
  /* the overlay holds its layers; their mounts go, so that no way out of
   * the new root (a chroot escape) finds the layers or the upper dir
   * bare.  rwfd keeps the disk's file system reachable for freezes. */
  for (size_t i = 0; i < n; i++) {
    snprintf(dir, sizeof dir, "/mnt/l%zu", i);
    umount2(dir, MNT_DETACH);
  }
  umount2("/mnt/rw", MNT_DETACH);

  /* the layers and the disk move under the new root, out of sight */
  mkdirs("/newroot/proc", 0555);
  mkdirs("/newroot/sys", 0555);
  mkdirs("/newroot/dev", 0755);
  mkdirs("/newroot/run", 0755);
  mkdirs("/newroot/tmp", 01777);
  if (mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
      mount("sysfs", "/newroot/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
      mount("/dev", "/newroot/dev", NULL, MS_MOVE, NULL) < 0 ||
      mount("tmpfs", "/newroot/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755") < 0)
    fatal("cannot mount the kernel file systems");
  mkdirs("/newroot/dev/pts", 0755);
  mkdirs("/newroot/dev/shm", 01777);
  mount("devpts", "/newroot/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=620");
  mount("tmpfs", "/newroot/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
  umount2("/proc", MNT_DETACH);
  umount2("/sys", MNT_DETACH);
  if (chdir("/newroot") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 ||
      chroot(".") < 0 || chdir("/") < 0)
    fatal("cannot enter the root");
  {
    const char *wd = json_string_value(json_object_get(setup, "workdir"));
    if (wd && *wd == '/')
      mkdirs(wd, 0755);
  }
  protect_and_hide(setup);
  hide_devices();
  if (sethostname("dsec", 4) < 0)
    logmsg("cannot set the host name: %s", strerror(errno));
  dsec_guest_loopback_up();
}

/* ---- proxy mode: the guest's 127.0.0.1:3128 is relayed, connection by
 * connection, over the dsec.net port to the host's proxy (netmux.c).  A
 * thread of PID 1, so nothing in the guest can kill it apart. */

struct relay {
  int chan, lsock;
};

static void *relay_main(void *arg)
{
  struct relay *r = arg;
  dsec_mux_run(r->chan, r->lsock, NULL, NULL, 1);
  return NULL;
}

static void start_proxy_relay(int chan)
{
  static struct relay r;
  struct sockaddr_in sa = { .sin_family = AF_INET,
                            .sin_port = htons(PROXY_PORT),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  int one = 1;
  pthread_t t;

  r.chan = chan;
  r.lsock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r.chan < 0 || r.lsock < 0)
    fatal("no network port for the proxy");
  setsockopt(r.lsock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(r.lsock, (struct sockaddr *) &sa, sizeof sa) < 0 ||
      listen(r.lsock, 128) < 0)
    fatal("cannot listen on 127.0.0.1:%d", PROXY_PORT);
  if (pthread_create(&t, NULL, relay_main, &r) != 0)
    fatal("cannot start the proxy relay");
  pthread_detach(t);
}

/* ---- the port: whole messages, in order */

static void port_write(const void *buf, size_t len)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(port, p, len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      struct pollfd pf = { port, POLLOUT, 0 };
      poll(&pf, 1, 100); /* POLLHUP while the host is away: retry */
      continue;
    }
    if (n < 0) {
      logmsg("cannot write to the host: %s", strerror(errno));
      return;
    }
    p += n;
    len -= (size_t) n;
  }
}

static void send_msg(json_t *m, const char *a, size_t alen, const char *b,
                     size_t blen)
{
  char *text = json_dumps(m, JSON_COMPACT);
  size_t tl = strlen(text);
  text = realloc(text, tl + 2);
  text[tl++] = '\n';
  port_write(text, tl);
  if (alen)
    port_write(a, alen);
  if (blen)
    port_write(b, blen);
  free(text);
  json_decref(m);
}

/* ---- execs */

struct capture {
  int fd;
  int no;                      /* 1 or 2 */
  json_int_t job;              /* its exec's id */
  bool stream;                 /* sent as it comes ("output" messages) */
  size_t cap;
  struct dsec_guest_capture k; /* what is kept, and the count */
};

struct job {
  json_int_t id;
  pid_t pid;
  struct capture out, err;
  int in_fd;
  char *in;
  size_t in_len, in_off;
  double deadline;   /* 0: none */
  double exited_at;  /* 0: still running */
  int status;
  bool timed_out;
  bool keep_stdin;   /* more comes ("stdin" messages): a session's shell */
  bool acks;         /* "stdin_ack" what was written (a copy's flow control) */
  uint64_t oom_before;
  int tty_slave;     /* a terminal's other end, held until the command's
                      * last output was read (job_finish), or -1 */
  struct job *next;
};

static struct job *jobs;
/* what the guest's root loses when protect or hide is asked for: the
 * means to unmount them, to reach around them (raw disks, PID 1's memory)
 * or to change the kernel under them */
static uint64_t last_caps_drop[] = { CAP_SYS_ADMIN, CAP_SYS_MODULE,
                                     CAP_SYS_RAWIO, CAP_MKNOD,
                                     CAP_SYS_BOOT, CAP_SYS_PTRACE,
                                     CAP_SYS_CHROOT, CAP_BPF,
                                     CAP_PERFMON };

static uint64_t oom_kills(void)
{
  FILE *f = fopen("/proc/vmstat", "re");
  char line[128];
  uint64_t v = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "oom_kill %lu", &v) == 1)
      break;
  if (f)
    fclose(f);
  return v;
}


/* What an exec loses besides its user: with protect or hide, the
 * capabilities that would undo them (last_caps_drop). */
static void exec_drop(void *ud, uid_t uid, gid_t gid)
{
  (void) ud;
  if (restricted)
    for (size_t i = 0; i < sizeof last_caps_drop / sizeof *last_caps_drop; i++)
      prctl(PR_CAPBSET_DROP, last_caps_drop[i], 0, 0, 0);
  if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
      setresuid(uid, uid, uid) < 0) {
    dprintf(2, "dsec: cannot switch to user %u:%u: %s\n", uid, gid,
            strerror(errno));
    _exit(125);
  }
}

static _Noreturn void exec_child(json_t *req, int in, int out, int err)
{
  struct dsec_guest_exec x = {
    .fds = { in, out, err },
    .keep = -1,
    .drop = exec_drop,
  };
  dsec_guest_exec_from(&x, req);
  dsec_guest_exec(&x);
}

static void job_start(json_t *req, const char *stdin_buf, size_t stdin_len)
{
  struct job *j = calloc(1, sizeof *j);
  if (!j) {
    send_msg(json_pack("{s:s, s:O, s:s}", "op", "result", "id",
                       json_object_get(req, "id"), "error", "out of memory"),
             NULL, 0, NULL, 0);
    return;
  }
  j->tty_slave = -1;
  int in[2], out[2], er[2], tty = -1;
  char *tty_in = NULL;
  double timeout_ms = json_number_value(json_object_get(req, "timeout_ms"));
  json_int_t cap = json_integer_value(json_object_get(req, "cap"));

  j->id = json_integer_value(json_object_get(req, "id"));
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC | O_NONBLOCK) < 0 ||
      pipe2(er, O_CLOEXEC | O_NONBLOCK) < 0) {
    send_msg(json_pack("{s:s, s:I, s:s}", "op", "result", "id", j->id, "error",
                       "cannot make pipes"), NULL, 0, NULL, 0);
    free(j);
    return;
  }
  /* the child's ends must block: O_NONBLOCK is per open file */
  fcntl(out[1], F_SETFL, 0);
  fcntl(er[1], F_SETFL, 0);
  if (json_is_true(json_object_get(req, "tty"))) {
    /* a terminal: the command's stdin, stdout and stderr; we read and
     * write its master instead of the pipes */
    char path[64];
    tty = dsec_guest_openpty(
      (uid_t) json_integer_value(json_object_get(req, "uid")),
      (gid_t) json_integer_value(json_object_get(req, "gid")),
      (unsigned) json_integer_value(json_object_get(req, "cols")),
      (unsigned) json_integer_value(json_object_get(req, "rows")), path,
      sizeof path);
    if (tty < 0) {
      for (int i = 0; i < 2; i++)
        close(in[i]), close(out[i]), close(er[i]);
      send_msg(json_pack("{s:s, s:I, s:s}", "op", "result", "id", j->id,
                         "error", "cannot allocate a terminal"), NULL, 0, NULL, 0);
      free(j);
      return;
    }
    json_object_set_new(req, "tty_path", json_string(path));
    /* held while the command runs: the master then never says EIO
     * before the command's last output is read (job_finish) */
    j->tty_slave = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
  }
  j->oom_before = oom_kills();
  j->pid = fork();
  if (j->pid == 0)
    exec_child(req, in[0], out[1], er[1]);
  close(in[0]);
  close(out[1]);
  close(er[1]);
  if (j->pid < 0) {
    close(in[1]);
    close(out[0]);
    close(er[0]);
    if (tty >= 0)
      close(tty);
    if (j->tty_slave >= 0)
      close(j->tty_slave);
    send_msg(json_pack("{s:s, s:I, s:s}", "op", "result", "id", j->id, "error",
                       "fork failed"), NULL, 0, NULL, 0);
    free(j);
    return;
  }
  if (tty >= 0) {
    close(out[0]);
    close(in[1]);
    out[0] = tty;
    in[1] = dup(tty);
    if (stdin_len) {
      /* then the end of input, as a terminal says it (^D at a line's
       * start; a second one ends a partial line first) */
      char *d = malloc(stdin_len + 2);
      if (d) {
        memcpy(d, stdin_buf, stdin_len);
        d[stdin_len] = d[stdin_len + 1] = '\004';
        stdin_buf = tty_in = d;
        stdin_len += stdin_buf[stdin_len - 1] == '\n' ? 1 : 2;
      }
    }
  }
  {
    bool stream = json_is_true(json_object_get(req, "stream"));
    j->out = (struct capture){ .fd = out[0], .no = 1, .job = j->id,
                               .stream = stream,
                               .cap = cap > 0 ? (size_t) cap : 0 };
    j->err = (struct capture){ .fd = er[0], .no = 2, .job = j->id,
                               .stream = stream,
                               .cap = cap > 0 ? (size_t) cap : 0 };
  }
  j->keep_stdin = json_is_true(json_object_get(req, "keep_stdin"));
  j->acks = json_is_true(json_object_get(req, "stdin_acks"));
  if (j->acks)
    fcntl(in[1], F_SETPIPE_SZ, 1 << 20); /* fewer, larger writes and acks */
  if (j->keep_stdin) {
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    j->in_fd = in[1];
  }
  if (stdin_len && (j->in = malloc(stdin_len))) {
    memcpy(j->in, stdin_buf, stdin_len);
    j->in_len = stdin_len;
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    j->in_fd = in[1];
  } else if (!j->keep_stdin) {
    close(in[1]);
    j->in_fd = -1;
  }
  free(tty_in);
  if (timeout_ms > 0)
    j->deadline = now_ms() + timeout_ms;
  j->next = jobs;
  jobs = j;
}

static void capture_read(struct capture *c)
{
  char buf[65536];
  while (c->fd >= 0) {
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    if (n <= 0) {
      close(c->fd);
      c->fd = -1;
      return;
    }
    {
      /* a streamed exec's output goes as it comes, what its cap keeps
       * (nothing stays here); the result then carries only the counts */
      size_t kept;
      if (c->stream) {
        kept = c->k.total < c->cap ? (size_t) n < c->cap - c->k.total
                                       ? (size_t) n
                                       : (size_t) (c->cap - c->k.total)
                                   : 0;
        c->k.total += (size_t) n;
      } else
        kept = dsec_guest_capture_add(&c->k, buf, (size_t) n, c->cap);
      if (c->stream && kept)
        send_msg(json_pack("{s:s, s:I, s:I}", "op", "output", "id", c->job,
                           c->no == 2 ? "stderr_len" : "stdout_len",
                           (json_int_t) kept),
                 c->no == 2 ? NULL : buf, c->no == 2 ? 0 : kept,
                 c->no == 2 ? buf : NULL, c->no == 2 ? kept : 0);
    }
  }
}

static void job_finish(struct job *j)
{
  json_t *m;
  bool oom;
  capture_read(&j->out);
  if (j->tty_slave >= 0) {
    /* read to EAGAIN while we held the other end (the kernel had moved
     * the last output by then); what a process left behind on the
     * terminal wrote since, or the end (EIO) */
    close(j->tty_slave);
    j->tty_slave = -1;
    capture_read(&j->out);
  }
  capture_read(&j->err);
  oom = WIFSIGNALED(j->status) && WTERMSIG(j->status) == SIGKILL &&
        !j->timed_out && oom_kills() > j->oom_before;
  m = json_pack("{s:s, s:I, s:i, s:b, s:b, s:I, s:I, s:I, s:I}", "op",
                "result", "id", j->id, "status", j->status, "timed_out",
                j->timed_out, "oom_killed", oom, "stdout_total",
                (json_int_t) j->out.k.total, "stderr_total",
                (json_int_t) j->err.k.total, "stdout_len",
                (json_int_t) (j->out.stream ? 0 : j->out.k.len), "stderr_len",
                (json_int_t) (j->err.stream ? 0 : j->err.k.len));
  if (j->out.stream)
    send_msg(m, NULL, 0, NULL, 0);
  else
    send_msg(m, j->out.k.data, j->out.k.len, j->err.k.data, j->err.k.len);
  if (j->out.fd >= 0)
    close(j->out.fd);
  if (j->err.fd >= 0)
    close(j->err.fd);
  if (j->in_fd >= 0)
    close(j->in_fd);
  for (struct job **p = &jobs; *p; p = &(*p)->next)
    if (*p == j) {
      *p = j->next;
      break;
    }
  free(j->out.k.data);
  free(j->err.k.data);
  free(j->in);
  free(j);
}

static void stdin_write(struct job *j)
{
  size_t before = j->in_off;
  while (j->in_fd >= 0 && j->in_off < j->in_len) {
    ssize_t n = write(j->in_fd, j->in + j->in_off, j->in_len - j->in_off);
    if (n < 0 && errno == EAGAIN)
      break;
    if (n <= 0) {
      j->in_off = j->in_len; /* the command takes no more: all gone */
      close(j->in_fd);
      j->in_fd = -1;
      break;
    }
    j->in_off += (size_t) n;
  }
  if (j->acks && j->in_off > before)
    /* the host sends no more than a window ahead (a copy in): what left */
    send_msg(json_pack("{s:s, s:I, s:I}", "op", "stdin_ack", "id", j->id, "n",
                       (json_int_t) (j->in_off - before)), NULL, 0, NULL, 0);
  if (j->in_off < j->in_len)
    return;
  if (j->in_fd >= 0 && j->keep_stdin && j->in_off == j->in_len) {
    /* all written: the next "stdin" message brings more */
    free(j->in);
    j->in = NULL;
    j->in_len = j->in_off = 0;
    return;
  }
  if (j->in_fd >= 0) {
    close(j->in_fd);
    j->in_fd = -1;
  }
}

static void reap(void)
{
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0)
      return;
    for (struct job *j = jobs; j; j = j->next)
      if (j->pid == pid) {
        j->status = status;
        j->exited_at = now_ms();
      }
  }
}

/* what the host sent, not yet handled */
static char *inbuf;
static size_t inlen, incap;

/* ---- checkpoint: the upper directory as a tar stream (pax).  A writer
 * of our own, bounds-checked: libarchive does not link statically here
 * (no static libacl or liblz4, and its libxml2 drags ICU in), and the host
 * reads the stream with libarchive and checks every member anyway.  The
 * walk goes from directory descriptor to directory descriptor and never
 * follows a symlink; whiteouts (0/0 character devices) become .wh. files,
 * an opaque directory (trusted.overlay.opaque) gets .wh..wh..opq, overlay
 * xattrs are left out, and so is a name that starts with ".wh." (the
 * guest chose it: it would be a whiteout wherever the layer is used). */

#define CK_CHUNK (1u << 20)
#define CK_XATTR_LIST 65536  /* XATTR_LIST_MAX */
#define CK_XATTR_VALUE 65536 /* XATTR_SIZE_MAX */
#define CK_LINK_BUCKETS 4096

struct ck_link {
  dev_t dev;
  ino_t ino;
  char *path;
  struct ck_link *next;
};

struct ck {
  json_int_t id;
  char abort_msg[96]; /* the host's checkpoint_abort for this id */
  unsigned char *buf; /* what goes out next, CK_CHUNK at most */
  size_t len;
  uint64_t bytes, entries, skipped;
  struct ck_link *links[CK_LINK_BUCKETS];
  char *xlist, *xval;
  char *pax; /* the extended header being built */
  size_t paxlen, paxcap;
  char err[512];
  bool aborted;
};

static bool port_read(void);

static void ck_flush(struct ck *c)
{
  if (!c->len)
    return;
  send_msg(json_pack("{s:s, s:I, s:I}", "op", "checkpoint_data", "id", c->id,
                     "data_len", (json_int_t) c->len),
           (const char *) c->buf, c->len, NULL, 0);
  c->len = 0;
  /* the host may have given up (it refused a member): it says so, and
   * the guest need not stay stopped for the rest */
  port_read();
  if (!c->err[0] && memmem(inbuf, inlen, c->abort_msg, strlen(c->abort_msg))) {
    snprintf(c->err, sizeof c->err, "the host gave up");
    c->aborted = true;
  }
}

static void ck_put(struct ck *c, const void *p, size_t n)
{
  const unsigned char *b = p;
  while (n > 0) {
    size_t k = CK_CHUNK - c->len < n ? CK_CHUNK - c->len : n;
    memcpy(c->buf + c->len, b, k);
    c->len += k;
    c->bytes += k;
    b += k;
    n -= k;
    if (c->len == CK_CHUNK)
      ck_flush(c);
  }
}

/* Zeros after n bytes of data, up to the next 512-byte block. */
static void ck_pad(struct ck *c, uint64_t n)
{
  static const unsigned char zero[512];
  if (n % 512)
    ck_put(c, zero, 512 - (size_t) (n % 512));
}

static bool ck_fail(struct ck *c, const char *what, const char *path)
{
  if (!c->err[0])
    snprintf(c->err, sizeof c->err, "%s %s: %s", what, path, strerror(errno));
  return false;
}

/* An octal field of w bytes: w - 1 digits and a NUL, or zeros when the
 * value does not fit (the pax header carries it). */
static void ck_oct(char *f, size_t w, uint64_t v)
{
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%0*llo", (int) (w - 1),
                   (unsigned long long) v);
  if (n < 0 || (size_t) n > w - 1)
    n = snprintf(tmp, sizeof tmp, "%0*o", (int) (w - 1), 0);
  memcpy(f, tmp, (size_t) n + 1 <= w ? (size_t) n + 1 : w);
}

/* A pax record "LEN KEY=VALUE\n", LEN counting its own digits. */
static void ck_rec(struct ck *c, const char *key, const void *val, size_t vlen)
{
  size_t base = strlen(key) + vlen + 3, len = base + 1;
  char num[24];
  int d;

  for (;;) {
    d = snprintf(num, sizeof num, "%zu", len);
    if (base + (size_t) d == len)
      break;
    len = base + (size_t) d;
  }
  if (c->paxlen + len > c->paxcap) {
    size_t cap = (c->paxlen + len) * 2;
    char *p = realloc(c->pax, cap);
    if (!p)
      fatal("out of memory");
    c->pax = p;
    c->paxcap = cap;
  }
  c->paxlen += (size_t) sprintf(c->pax + c->paxlen, "%s %s=", num, key);
  memcpy(c->pax + c->paxlen, val, vlen);
  c->paxlen += vlen;
  c->pax[c->paxlen++] = '\n';
}

static void ck_str(struct ck *c, const char *key, const char *val)
{
  ck_rec(c, key, val, strlen(val));
}

static void ck_header(struct ck *c, const char *name, char type, mode_t mode,
                      uid_t uid, gid_t gid, uint64_t size, time_t mtime,
                      const char *link, dev_t rdev)
{
  unsigned char h[512];
  unsigned sum = 0;
  size_t nl = strlen(name);

  memset(h, 0, sizeof h);
  /* the tail of the name (pax's "path" is the whole of it) */
  memcpy(h, nl > 99 ? name + nl - 99 : name, nl > 99 ? 99 : nl);
  ck_oct((char *) h + 100, 8, mode & 07777);
  ck_oct((char *) h + 108, 8, uid);
  ck_oct((char *) h + 116, 8, gid);
  ck_oct((char *) h + 124, 12, size);
  ck_oct((char *) h + 136, 12, mtime > 0 ? (uint64_t) mtime : 0);
  memset(h + 148, ' ', 8);
  h[156] = (unsigned char) type;
  if (link)
    memcpy(h + 157, link, strlen(link) > 99 ? 99 : strlen(link));
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  if (type == '3' || type == '4') {
    ck_oct((char *) h + 329, 8, major(rdev));
    ck_oct((char *) h + 337, 8, minor(rdev));
  }
  for (size_t i = 0; i < sizeof h; i++)
    sum += h[i];
  snprintf((char *) h + 148, 8, "%06o", sum);
  h[155] = ' ';
  ck_put(c, h, sizeof h);
}

static bool needs_binary(const char *s)
{
  for (; *s; s++)
    if ((unsigned char) *s >= 0x80)
      return true;
  return false;
}

/* One member: its pax extended header (with the xattrs ck_xattrs put
 * there already), then its ustar header. */
static void ck_entry(struct ck *c, const char *path, char type,
                     const struct stat *st, uint64_t size, const char *link)
{
  char v[64];

  if (needs_binary(path) || (link && needs_binary(link)))
    ck_str(c, "hdrcharset", "BINARY");
  ck_str(c, "path", path);
  if (link)
    ck_str(c, "linkpath", link);
  snprintf(v, sizeof v, "%llu", (unsigned long long) size);
  ck_str(c, "size", v);
  snprintf(v, sizeof v, "%u", (unsigned) st->st_uid);
  ck_str(c, "uid", v);
  snprintf(v, sizeof v, "%u", (unsigned) st->st_gid);
  ck_str(c, "gid", v);
  snprintf(v, sizeof v, "%lld.%09ld", (long long) st->st_mtim.tv_sec,
           (long) st->st_mtim.tv_nsec);
  ck_str(c, "mtime", v);
  ck_header(c, "PaxHeader", 'x', 0644, 0, 0, c->paxlen, 0, NULL, 0);
  ck_put(c, c->pax, c->paxlen);
  ck_pad(c, c->paxlen);
  ck_header(c, path, type, st->st_mode, st->st_uid, st->st_gid,
            type == '0' ? size : 0, st->st_mtim.tv_sec, link, st->st_rdev);
  c->paxlen = 0;
  c->entries++;
}

static bool overlay_xattr(const char *name)
{
  return strncmp(name, "trusted.overlay.", 16) == 0 ||
         strncmp(name, "user.overlay.", 13) == 0;
}

/* fd's xattrs as SCHILY.xattr records, overlay ones left out; *opaque
 * when overlayfs marked the directory opaque. */
static bool ck_xattrs(struct ck *c, int fd, const char *path, bool *opaque)
{
  ssize_t n = flistxattr(fd, c->xlist, CK_XATTR_LIST);
  *opaque = false;
  if (n < 0)
    return errno == ENOTSUP ? true
                            : ck_fail(c, "cannot list the xattrs of", path);
  for (ssize_t i = 0; i < n;) {
    const char *name = c->xlist + i;
    size_t len = strnlen(name, (size_t) (n - i));
    ssize_t vl;
    char key[300];
    if (i + (ssize_t) len >= n)
      break; /* not NUL-terminated: the end */
    i += (ssize_t) len + 1;
    vl = fgetxattr(fd, name, c->xval, CK_XATTR_VALUE);
    if (strcmp(name, "trusted.overlay.opaque") == 0)
      *opaque = vl > 0 && c->xval[0] == 'y';
    if (overlay_xattr(name) || strchr(name, '=') || strchr(name, '\n') ||
        len > 255)
      continue;
    if (vl < 0) {
      if (errno == ENODATA)
        continue;
      return ck_fail(c, "cannot read the xattrs of", path);
    }
    snprintf(key, sizeof key, "SCHILY.xattr.%s", name);
    ck_rec(c, key, c->xval, (size_t) vl);
  }
  return true;
}

static struct ck_link **ck_link_slot(struct ck *c, const struct stat *st)
{
  size_t b = (size_t) ((st->st_ino * 31u + st->st_dev) % CK_LINK_BUCKETS);
  struct ck_link **l = &c->links[b];
  while (*l && ((*l)->ino != st->st_ino || (*l)->dev != st->st_dev))
    l = &(*l)->next;
  return l;
}

static int ck_cmp(const void *a, const void *b)
{
  return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The names in directory dfd, sorted; NULL on error. */
static char **ck_list(int dfd, size_t *count)
{
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd < 0 ? NULL : fdopendir(fd);
  char **v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;

  if (!d) {
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (n + 1 >= cap) {
      char **nv;
      cap = cap ? cap * 2 : 64;
      nv = realloc(v, cap * sizeof *v);
      if (!nv)
        fatal("out of memory");
      v = nv;
    }
    if (!(v[n++] = strdup(e->d_name)))
      fatal("out of memory");
  }
  closedir(d);
  if (!v && !(v = calloc(1, sizeof *v)))
    fatal("out of memory");
  qsort(v, n, sizeof *v, ck_cmp);
  *count = n;
  return v;
}

static bool ck_tree(struct ck *c, int dfd, const char *rel);

/* One name of directory dfd (rel its path in the layer, "" the top). */
static bool ck_one(struct ck *c, int dfd, const char *rel, const char *name)
{
  char *path;
  struct stat st, fst;
  bool ok = true, opaque = false;
  int fd = -1;

  if (strncmp(name, ".wh.", 4) == 0) {
    c->skipped++;
    return true;
  }
  if (asprintf(&path, "%s%s%s", rel, *rel ? "/" : "", name) < 0)
    fatal("out of memory");
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    ok = ck_fail(c, "cannot stat", path);
    goto out;
  }
  if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
    fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                             (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0));
    if (fd < 0 || fstat(fd, &fst) < 0 || fst.st_ino != st.st_ino ||
        fst.st_dev != st.st_dev ||
        (fst.st_mode & S_IFMT) != (st.st_mode & S_IFMT)) {
      if (fd >= 0)
        errno = ESTALE;
      ok = ck_fail(c, "cannot open", path);
      goto out;
    }
  }
  switch (st.st_mode & S_IFMT) {
  case S_IFREG: {
    struct ck_link **l = st.st_nlink > 1 ? ck_link_slot(c, &st) : NULL;
    uint64_t left = (uint64_t) st.st_size;
    if (l && *l) {
      ck_entry(c, path, '1', &st, 0, (*l)->path);
      break;
    }
    if (l) {
      if (!(*l = calloc(1, sizeof **l)) || !((*l)->path = strdup(path)))
        fatal("out of memory");
      (*l)->dev = st.st_dev;
      (*l)->ino = st.st_ino;
    }
    if (!ck_xattrs(c, fd, path, &opaque)) {
      ok = false;
      break;
    }
    ck_entry(c, path, '0', &st, (uint64_t) st.st_size, NULL);
    /* exactly the size in the header: a file that shrank (it cannot,
     * frozen) is padded, one that grew is cut.  Read straight into the
     * chunk: every copy counts in an emulated guest. */
    while (left > 0 && !c->aborted) {
      size_t room = CK_CHUNK - c->len;
      size_t want = left < room ? (size_t) left : room;
      ssize_t n = read(fd, c->buf + c->len, want);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0) {
        ok = ck_fail(c, "cannot read", path);
        break;
      }
      if (n == 0) {
        memset(c->buf + c->len, 0, want);
        n = (ssize_t) want;
      }
      c->len += (size_t) n;
      c->bytes += (uint64_t) n;
      left -= (uint64_t) n;
      if (c->len == CK_CHUNK)
        ck_flush(c);
    }
    ck_pad(c, (uint64_t) st.st_size);
    break;
  }
  case S_IFDIR:
    if (!ck_xattrs(c, fd, path, &opaque)) {
      ok = false;
      break;
    }
    ck_entry(c, path, '5', &st, 0, NULL);
    if (opaque) {
      char *m;
      struct stat ms = st;
      ms.st_mode = S_IFREG;
      if (asprintf(&m, "%s/.wh..wh..opq", path) < 0)
        fatal("out of memory");
      ck_entry(c, m, '0', &ms, 0, NULL);
      free(m);
    }
    ok = ck_tree(c, fd, path);
    break;
  case S_IFLNK: {
    char target[4096];
    ssize_t n = readlinkat(dfd, name, target, sizeof target);
    if (n < 0 || (size_t) n >= sizeof target) {
      if (n >= 0)
        errno = ENAMETOOLONG;
      ok = ck_fail(c, "cannot read the symlink", path);
      break;
    }
    target[n] = '\0';
    ck_entry(c, path, '2', &st, 0, target);
    break;
  }
  case S_IFCHR:
    if (st.st_rdev == 0) {
      /* overlayfs's whiteout: the OCI form */
      char *w;
      struct stat ws = st;
      ws.st_mode = S_IFREG;
      if (asprintf(&w, "%s%s.wh.%s", rel, *rel ? "/" : "", name) < 0)
        fatal("out of memory");
      ck_entry(c, w, '0', &ws, 0, NULL);
      free(w);
      break;
    }
    /* a device node: sent as it is, and the host refuses it */
    ck_entry(c, path, '3', &st, 0, NULL);
    break;
  case S_IFBLK:
    ck_entry(c, path, '4', &st, 0, NULL);
    break;
  case S_IFIFO:
    ck_entry(c, path, '6', &st, 0, NULL);
    break;
  default:
    break; /* sockets */
  }
out:
  if (fd >= 0)
    close(fd);
  free(path);
  return ok;
}

static bool ck_tree(struct ck *c, int dfd, const char *rel)
{
  size_t n = 0;
  char **names = ck_list(dfd, &n);
  bool ok = true;

  if (!names)
    return ck_fail(c, "cannot read the directory", *rel ? rel : "/");
  for (size_t i = 0; i < n; i++) {
    if (ok && !c->aborted)
      ok = ck_one(c, dfd, rel, names[i]);
    free(names[i]);
  }
  if (c->aborted)
    ok = false;
  free(names);
  return ok;
}

static void checkpoint(json_t *id)
{
  static const unsigned char end[1024];
  struct ck c = { .id = json_integer_value(id) };
  bool frozen = false, ok;
  json_t *m;

  snprintf(c.abort_msg, sizeof c.abort_msg,
           "{\"op\":\"checkpoint_abort\",\"id\":%lld}", (long long) c.id);
  c.buf = malloc(CK_CHUNK);
  c.xlist = malloc(CK_XATTR_LIST);
  c.xval = malloc(CK_XATTR_VALUE);
  if (!c.buf || !c.xlist || !c.xval)
    fatal("out of memory");
  {
    /* a deep tree holds a descriptor per level */
    struct rlimit rl = { 1 << 20, 1 << 20 };
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  /* every process of the guest stopped (not us), then the disk's file
   * system frozen: nothing changes while it is read */
  kill(-1, SIGSTOP);
  sync();
  frozen = upperfd >= 0 && ioctl(rwfd, FIFREEZE, 0) == 0;
  ok = upperfd >= 0 ? ck_tree(&c, upperfd, "")
                    : (snprintf(c.err, sizeof c.err, "no upper directory"),
                       false);
  if (ok)
    ck_put(&c, end, sizeof end);
  ck_flush(&c);
  if (frozen)
    ioctl(rwfd, FITHAW, 0);
  kill(-1, SIGCONT);
  m = json_pack("{s:s, s:I, s:b, s:I, s:I, s:I}", "op", "checkpoint_end",
                "id", c.id, "frozen", frozen, "entries",
                (json_int_t) c.entries, "bytes", (json_int_t) c.bytes,
                "skipped_whiteout_names", (json_int_t) c.skipped);
  if (!ok)
    json_object_set_new(m, "error", json_string(c.err));
  send_msg(m, NULL, 0, NULL, 0);
  for (size_t b = 0; b < CK_LINK_BUCKETS; b++)
    for (struct ck_link *l = c.links[b], *nx; l; l = nx) {
      nx = l->next;
      free(l->path);
      free(l);
    }
  free(c.buf);
  free(c.xlist);
  free(c.xval);
  free(c.pax);
}

/* ---- requests */

static void handle(json_t *req, const char *payload, size_t plen)
{
  const char *op = json_string_value(json_object_get(req, "op"));
  json_t *id = json_object_get(req, "id");
  if (!op)
    return;
  if (strcmp(op, "exec") == 0) {
    job_start(req, payload, plen);
  } else if (strcmp(op, "ping") == 0) {
    struct utsname u;
    uname(&u);
    json_t *m = json_pack("{s:s, s:O, s:s}", "op", "pong", "id",
                          id ? id : json_null(), "kernel", u.release);
    damon_fields(m);
    send_msg(m, NULL, 0, NULL, 0);
  } else if (strcmp(op, "kill") == 0) {
    int sig = (int) json_integer_value(json_object_get(req, "signal"));
    sig = sig > 0 && sig < NSIG ? sig : SIGKILL;
    if (id) {
      /* one exec's processes (its process group) */
      for (struct job *j = jobs; j; j = j->next)
        if (j->id == json_integer_value(id) && !j->exited_at)
          kill(-j->pid, sig);
    } else
      kill(-1, sig);
  } else if (strcmp(op, "resize") == 0) {
    /* an interactive exec's terminal */
    struct winsize ws = {
      .ws_row = (unsigned short) json_integer_value(json_object_get(req, "rows")),
      .ws_col = (unsigned short) json_integer_value(json_object_get(req, "cols")),
    };
    for (struct job *j = jobs; j; j = j->next)
      if (j->id == json_integer_value(id) && j->out.fd >= 0)
        ioctl(j->out.fd, TIOCSWINSZ, &ws);
  } else if (strcmp(op, "stdin") == 0) {
    /* more input for a session's shell or a copy; "eof": no more (closed
     * once what waits is written) */
    for (struct job *j = jobs; j; j = j->next)
      if (j->id == json_integer_value(id) && j->keep_stdin && j->in_fd >= 0) {
        if (plen > 0) {
          char *more = realloc(j->in, j->in_len + plen);
          if (!more)
            break;
          memcpy(more + j->in_len, payload, plen);
          j->in = more;
          j->in_len += plen;
        }
        if (json_is_true(json_object_get(req, "eof")))
          j->keep_stdin = false;
        stdin_write(j);
        break;
      }
  } else if (strcmp(op, "sync") == 0) {
    sync();
    send_msg(json_pack("{s:s, s:O}", "op", "synced", "id", id ? id : json_null()),
             NULL, 0, NULL, 0);
  } else if (strcmp(op, "checkpoint") == 0) {
    checkpoint(id ? id : json_null());
  } else if (strcmp(op, "reseed") == 0) {
    /* a restored VM (a resume, or one fork of many) must not go on with
     * the random state it was saved with: the host's seed is mixed in,
     * credited, and the kernel's generator reseeded at once */
    const char *hex = json_string_value(json_object_get(req, "seed"));
    struct {
      struct rand_pool_info info;
      unsigned char buf[64];
    } pool = { .info = { 0, 0 } };
    size_t n = hex ? strlen(hex) / 2 : 0;
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    json_t *m = json_pack("{s:s, s:O}", "op", "reseeded", "id", id ? id : json_null());
    if (n > sizeof pool.buf)
      n = sizeof pool.buf;
    for (size_t i = 0; i < n; i++)
      sscanf(hex + 2 * i, "%2hhx", &pool.buf[i]);
    pool.info.entropy_count = (int) (n * 8);
    pool.info.buf_size = (int) n;
    if (fd < 0 || ioctl(fd, RNDADDENTROPY, &pool) < 0 ||
        ioctl(fd, RNDRESEEDCRNG) < 0)
      json_object_set_new(m, "error", json_string(strerror(errno)));
    if (fd >= 0)
      close(fd);
    send_msg(m, NULL, 0, NULL, 0);
  } else if (strcmp(op, "poweroff") == 0) {
    kill(-1, SIGKILL);
    sync();
    reboot(RB_POWER_OFF);
  }
}

/* Consumes whole messages from inbuf (a header line and its payload). */
static void dispatch(void)
{
  size_t off = 0;
  for (;;) {
    json_t *req;
    size_t plen, used;
    bool bad;
    used = dsec_guest_next(inbuf + off, inlen - off, &req, &plen, &bad);
    if (used == 0)
      break;
    if (bad) {
      /* answer an error if it was an exec */
      json_t *id = json_object_get(req, "id");
      if (id)
        send_msg(json_pack("{s:s, s:O, s:s}", "op", "result", "id", id,
                           "error", "invalid stdin length"),
                 NULL, 0, NULL, 0);
    } else if (req)
      handle(req, inbuf + off + used - plen, plen);
    json_decref(req);
    off += used;
  }
  memmove(inbuf, inbuf + off, inlen - off);
  inlen -= off;
}

static bool port_read(void)
{
  for (;;) {
    ssize_t n;
    if (incap - inlen < 65536) {
      incap = incap ? incap * 2 : 1 << 20;
      inbuf = realloc(inbuf, incap);
      if (!inbuf)
        fatal("out of memory");
    }
    n = read(port, inbuf + inlen, incap - inlen);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return true;
    if (n <= 0)
      return false; /* the host is not connected */
    inlen += (size_t) n;
  }
}

/* Waits for the host's setup message (boot only). */
static json_t *wait_setup(void)
{
  for (;;) {
    struct pollfd pf = { port, POLLIN, 0 };
    char *nl;
    if (poll(&pf, 1, -1) < 0 && errno != EINTR)
      fatal("poll");
    if (!port_read())
      usleep(20000);
    nl = inlen ? memchr(inbuf, '\n', inlen) : NULL;
    if (nl) {
      size_t hl = (size_t) (nl - inbuf);
      json_t *m = json_loadb(inbuf, hl, 0, NULL);
      memmove(inbuf, nl + 1, inlen - hl - 1);
      inlen -= hl + 1;
      if (m && strcmp(json_string_value(json_object_get(m, "op")) ?: "", "setup") == 0)
        return m;
      json_decref(m);
    }
  }
}

static void serve(void)
{
  sigset_t mask;
  int sfd;

  /* blocked since main(), in every thread: only the signalfd sees it */
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  for (;;) {
    struct pollfd pf[2 + 3 * 64];
    struct job *who[2 + 3 * 64];
    nfds_t n = 0;
    double now = now_ms(), next = -1;
    int timeout;
    bool host = true;

    pf[n++] = (struct pollfd){ port, POLLIN, 0 };
    pf[n++] = (struct pollfd){ sfd, POLLIN, 0 };
    for (struct job *j = jobs; j; j = j->next) {
      double t = j->exited_at ? j->exited_at + DRAIN_MS : j->deadline;
      if (t > 0 && (next < 0 || t < next))
        next = t;
      if (n + 3 > sizeof pf / sizeof *pf)
        continue; /* polled on a later turn */
      if (j->out.fd >= 0)
        who[n] = j, pf[n++] = (struct pollfd){ j->out.fd, POLLIN, 0 };
      if (j->err.fd >= 0)
        who[n] = j, pf[n++] = (struct pollfd){ j->err.fd, POLLIN, 0 };
      if (j->in_fd >= 0 && j->in_off < j->in_len)
        who[n] = j, pf[n++] = (struct pollfd){ j->in_fd, POLLOUT, 0 };
    }
    timeout = next < 0 ? -1 : next <= now ? 0 : (int) (next - now) + 1;
    if (poll(pf, n, timeout) < 0 && errno != EINTR)
      fatal("poll");
    if (pf[0].revents & POLLIN)
      host = port_read();
    else if (pf[0].revents & POLLHUP)
      host = false;
    if (!host)
      usleep(20000); /* the host is away (a suspend, a reconnect) */
    dispatch();
    if (pf[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0)
        ;
      reap();
    }
    for (nfds_t i = 2; i < n; i++) {
      struct job *j = who[i];
      if (!pf[i].revents)
        continue;
      if (pf[i].fd == j->out.fd)
        capture_read(&j->out);
      else if (pf[i].fd == j->err.fd)
        capture_read(&j->err);
      else if (pf[i].fd == j->in_fd)
        stdin_write(j);
    }
    now = now_ms();
    for (struct job *j = jobs, *nx; j; j = nx) {
      nx = j->next;
      if (!j->exited_at && j->deadline > 0 && now >= j->deadline &&
          !j->timed_out) {
        j->timed_out = true;
        kill(-j->pid, SIGKILL);
        kill(j->pid, SIGKILL);
      }
      if (j->exited_at &&
          ((j->out.fd < 0 && j->err.fd < 0) || now >= j->exited_at + DRAIN_MS))
        job_finish(j);
    }
  }
}

/* DAMON-based reclaim: cold pages of the guest are paged out (its
 * DAMON_RECLAIM module, Linux 5.16), and free page reporting hands what
 * that frees back to the host.  Watermarks that keep it on whatever the
 * free memory (an idle guest has much of it), pages cold for 30 s, at
 * most 1 s of CPU a second (the module's default quota otherwise).
 * Returns NULL when on, else why not (static). */
static const char *damon_off; /* why not, or NULL: on */

static const char *damon_reclaim_start(void)
{
  static const char *const dir = "/sys/module/damon_reclaim/parameters";
  static const struct { const char *name, *value; } params[] = {
    { "min_age", "30000000" }, { "wmarks_high", "1000" },
    { "wmarks_mid", "999" },   { "wmarks_low", "0" },
    { "enabled", "Y" },
  };
  char path[128];

  snprintf(path, sizeof path, "%s/enabled", dir);
  if (access(path, W_OK) < 0)
    return access("/sys/kernel/mm/damon", F_OK) == 0
             ? "the guest kernel has DAMON but not DAMON_RECLAIM"
             : "the guest kernel has no DAMON";
  for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
    int fd;
    bool ok;
    snprintf(path, sizeof path, "%s/%s", dir, params[i].name);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    ok = fd >= 0 && write(fd, params[i].value, strlen(params[i].value)) ==
                      (ssize_t) strlen(params[i].value);
    if (fd >= 0)
      close(fd);
    if (!ok)
      return "the guest's DAMON_RECLAIM refused its parameters";
  }
  return NULL;
}

/* What the guest does with its cold memory, for ready and pong. */
static void damon_fields(json_t *m)
{
  if (damon_off)
    json_object_set_new(m, "damon_unavailable", json_string(damon_off));
  else
    json_object_set_new(m, "damon", json_string("reclaim"));
}

int main(void)
{
  json_t *setup;
  struct utsname u;

  if (getpid() != 1) {
    fprintf(stderr, "dsec-agent: runs as PID 1 of a dsec-vm guest\n");
    return 2;
  }
  mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  {
    int c = open("/dev/console", O_RDWR | O_CLOEXEC);
    if (c >= 0) {
      dup2(c, 1);
      dup2(c, 2);
      close(c);
    }
  }
  signal(SIGPIPE, SIG_IGN);
  {
    /* before any thread starts (the proxy relay), or one of them would
     * take SIGCHLD and the serve loop would never hear of an exit */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
  }
  load_modules();
  damon_off = damon_reclaim_start();
  port = open_port(PORT_NAME);
  if (port < 0)
    fatal("no virtio-serial port named " PORT_NAME);
  setup = wait_setup();
  {
    /* the port is opened before the root's /dev loses its node */
    int net = json_is_true(json_object_get(setup, "proxy"))
                ? open_port(NET_PORT_NAME)
                : -1;
    setup_root(setup);
    if (json_is_true(json_object_get(setup, "proxy")))
      start_proxy_relay(net);
  }
  json_decref(setup);
  uname(&u);
  {
    json_t *m = json_pack("{s:s, s:s}", "op", "ready", "kernel", u.release);
    damon_fields(m);
    if (setup_error[0]) {
      /* the host ends the VM: this sandbox is not what was asked for */
      json_object_set_new(m, "error", json_string(setup_error));
      json_object_set_new(m, "status", json_integer(setup_bad_input ? 3 : 1));
    }
    send_msg(m, NULL, 0, NULL, 0);
  }
  serve();
  return 0;
}
