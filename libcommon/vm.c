/* The VM supervisor, one per microvm or vm sandbox.
 *
 *  1. the boot artefacts (an uncompressed kernel and an initramfs with
 *     dsec-agent and the guest's modules, built once per store), the
 *     layers as EROFS images, and the VM's writable disk (a sparse ext4
 *     file of disk_mb in the sandbox directory);
 *  2. QEMU, contained: its own mount, network, IPC and UTS namespaces,
 *     no capabilities, no new privileges, QEMU's own seccomp sandbox, and
 *     every channel handed over as a descriptor (the agent's port and the
 *     monitor are socketpairs; a snapshot to restore is an open file);
 *  3. the agent's "ready" (boot) or "pong" (restore);
 *  4. the exec socket, speaking exactly the container supervisor's
 *     protocol: execs go to the agent, their results come back as a header
 *     and raw output, and are recorded in the trajectory (fsync'd) before
 *     they are answered; a seq already recorded is replayed.
 *
 * suspend migrates the whole VM to a file (QEMU's migration over a
 * descriptor) and ends QEMU; resume starts QEMU with that file as its
 * incoming migration, processes and all.  A fork snapshot does the same
 * while the VM stays paused, copies the writable disk, and continues. */
#include <config.h>

#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/fs.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <limits.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "cgroup.h"
#include "ctl.h"
#include "exec.h"
#include "exitcodes.h"
#include "fsutil.h"
#include "idrange.h"
#include "log.h"
#include "netmux.h"
#include "process.h"
#include "proxy.h"
#include "sandbox.h"
#include "spec.h"
#include "store.h"
#include "utils.h"
#include "vmimage.h"

#define BOOT_TIMEOUT_MS 180000   /* TCG on a loaded machine is slow */
#define MIGRATE_TIMEOUT_MS 600000
#define MSG_MAX (64u << 20)
#define AGENT_HEADER_MAX 65536
#define AGENT_SEND_TIMEOUT_MS 60000
#define VM_OVERHEAD_MB 256  /* QEMU beyond the guest's RAM */
#define VM_QEMU_PIDS 512    /* QEMU's threads */
#define GUEST_GRACE_MS 15000 /* after an exec's timeout, for the agent's answer */
#define CONSOLE_HEAD (1u << 20) /* console.log keeps the first MiB ... */
#define CONSOLE_TAIL 65536      /* ... and the last 64 KiB */
#define CONSOLE_TAIL_FIELD 2048 /* console_tail in the record of a death */
#define CHECKPOINT_IDLE_MS 60000     /* a guest that sends nothing this long */
#define CHECKPOINT_TIMEOUT_MS 600000 /* a whole checkpoint's stream */

const char *dsec_vm_qemu(void)
{
  const char *q = getenv("DSEC_QEMU");
  return q && *q ? q : QEMU_PROG;
}

bool dsec_vm_available(void)
{
  const char *q = dsec_vm_qemu();
  return strchr(q, '/') ? access(q, X_OK) == 0 : dsec_in_path(q);
}

/* Whether KVM works, not only whether /dev/kvm is there: some hosts (nested
 * virtualisation, emulated /dev/kvm) have the device but fail at the first
 * vCPU reset.  A paused QEMU that is told to quit tells; the answer is
 * kept in $DSEC_RUN for this boot of the host. */
static bool kvm_works(void)
{
  int in[2];
  pid_t pid;
  int st = -1;

  if (pipe2(in, O_CLOEXEC) < 0)
    return false;
  pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(in[0], 0);
    dup2(null, 1);
    dup2(null, 2);
    execlp(dsec_vm_qemu(), dsec_vm_qemu(), "-M", "microvm", "-accel", "kvm", "-cpu", "host",
          "-m", "16", "-nodefaults", "-no-user-config", "-display", "none",
          "-S", "-qmp", "stdio", (char *) NULL);
    _exit(127);
  }
  close(in[0]);
  if (pid > 0) {
    static const char cmds[] = "{\"execute\":\"qmp_capabilities\"}\n"
                               "{\"execute\":\"quit\"}\n";
    if (write(in[1], cmds, sizeof cmds - 1) < 0)
      kill(pid, SIGKILL);
  }
  close(in[1]);
  for (int i = 0; pid > 0 && i < 1000; i++) {
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) && WEXITSTATUS(st) == 0;
    usleep(10000);
  }
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  return false;
}

const char *dsec_vm_accelerator(void)
{
  const char *force = getenv("DSEC_VM_ACCEL");
  _cleanup_free_ char *run = NULL, *path = NULL, *text = NULL, *boot = NULL;
  char b[128], acc[8];
  int fd;
  bool kvm;

  if (force && (strcmp(force, "tcg") == 0 || strcmp(force, "kvm") == 0))
    return strcmp(force, "kvm") == 0 ? "kvm" : "tcg";
  fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return "tcg";
  close(fd);
  run = dsec_run_dir();
  path = xasprintf("%s/vm-accel", run);
  text = dsec_read_file_at(AT_FDCWD, path, 256, NULL, NULL);
  boot = dsec_boot_id();
  if (text && boot && sscanf(text, "%7s %127s", acc, b) == 2 &&
      strcmp(b, boot) == 0)
    return strcmp(acc, "kvm") == 0 ? "kvm" : "tcg";
  kvm = kvm_works();
  {
    _cleanup_free_ char *line = xasprintf("%s %s\n", kvm ? "kvm" : "tcg",
                                          boot ? boot : "-");
    dsec_private_dir(run, NULL);
    dsec_write_file_replace(AT_FDCWD, path, line, strlen(line), 0644, NULL);
  }
  return kvm ? "kvm" : "tcg";
}

/* The VM backend's share of the supervisor (the engine has the rest). */
struct vm {
  struct dsec_engine *e;
  const char *accel;
  int agent, qmp, console_fd;
  int console_in;           /* the read end of QEMU's serial console */
  uint64_t console_written, console_dropped;
  char *console_tail;       /* ring of the last CONSOLE_TAIL bytes dropped */
  size_t tail_pos, tail_len;
  pid_t qemu;
  int life;                 /* QEMU's end of a pipe we hold until we die */
  int net_chan;             /* the dsec.net port's host end */
  char *abuf;     /* what the agent sent, not yet consumed */
  size_t alen, acap;
  bool pending;   /* a blocked send read what the agent sent meanwhile */
  uid_t host_id;  /* QEMU's: the first id of the VM's own host range */
  struct dsec_watch w_agent, w_console;
  /* what QEMU's monitor said of the guest's end: the host's view */
  bool guest_panicked;      /* GUEST_PANICKED (pvpanic) */
  char *shutdown_reason;    /* SHUTDOWN's reason ("guest-shutdown", ...) */
  /* the checkpoint in progress (guest_produce) */
  json_int_t ckpt_id;
  uint64_t ckpt_max;
  bool ckpt_frozen; /* the agent says it stopped the processes and froze */
  bool ckpt_ended;  /* its checkpoint_end came */
};

/* ---- the writable disk */

/* A sparse copy of src (holes stay holes), reflinked when the file system
 * can. */
static int copy_sparse(const char *src, const char *dst, struct dsec_error **err)
{
  _cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
  _cleanup_close_ int out = -1;
  struct stat st;
  off_t data = 0;

  if (in < 0 || fstat(in, &st) < 0)
    return dsec_fail(err, errno, "cannot open %s", src);
  out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0)
    return dsec_fail(err, errno, "cannot create %s", dst);
  if (ioctl(out, FICLONE, in) == 0)
    return fsync(out) < 0 ? dsec_fail(err, errno, "cannot sync %s", dst) : 0;
  if (ftruncate(out, st.st_size) < 0)
    return dsec_fail(err, errno, "cannot size %s", dst);
  for (;;) {
    off_t hole;
    data = lseek(in, data, SEEK_DATA);
    if (data < 0)
      break; /* ENXIO: no data past here */
    hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0)
      hole = st.st_size;
    while (data < hole) {
      loff_t a = data, b = data;
      ssize_t n = copy_file_range(in, &a, out, &b, (size_t) (hole - data), 0);
      if (n <= 0)
        return dsec_fail(err, n < 0 ? errno : EIO, "cannot copy %s", src);
      data += n;
    }
  }
  if (fsync(out) < 0)
    return dsec_fail(err, errno, "cannot sync %s", dst);
  return 0;
}

/* The VM's writable layer: disk.img in the sandbox directory, kept as it
 * is when there (resume), copied from a fork's disk, or made: a sparse
 * file of disk_mb with an ext4 file system (made here, so the guest needs
 * no mkfs). */
static int prepare_disk(struct vm *v, const char *from, struct dsec_error **err)
{
  _cleanup_free_ char *path = xasprintf("%s/disk.img", v->e->dir);
  _cleanup_free_ char *tmp = xasprintf("%s/disk.img.tmp", v->e->dir);
  int64_t mb = v->e->spec->resources.disk_mb;

  if (!from && access(path, F_OK) == 0)
    return 0;
  unlink(tmp);
  if (from) {
    if (copy_sparse(from, tmp, err) < 0)
      return -1;
  } else {
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                                  0600);
    if (fd < 0 || ftruncate(fd, (off_t) (mb > 0 ? mb : 2048) << 20) < 0)
      return dsec_fail(err, errno, "cannot create %s", tmp);
    {
      /* lazy inode tables: the guest initialises them in the background,
       * so a 2 GiB disk costs a few MiB here */
      char *argv[] = { "mkfs.ext4", "-q", "-F", "-m", "0", "-E",
                       "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                       tmp, NULL };
      if (dsec_run_program(argv, NULL, NULL, err) < 0)
        return dsec_error_wrap(err, "cannot make the writable disk");
    }
    if (fsync(fd) < 0)
      return dsec_fail(err, errno, "cannot sync %s", tmp);
  }
  if (rename(tmp, path) < 0)
    return dsec_fail(err, errno, "cannot create %s", path);
  return 0;
}

/* ---- QEMU */

/* The host's TSC rate in kHz.  Under TCG the guest's TSC runs at the
 * host's, and a microvm guest without a PIT to calibrate against hangs
 * unless told the rate (tsc_early_khz=).  Measured once per boot of the
 * host, remembered in $DSEC_RUN. */
static unsigned long tsc_khz(void)
{
  _cleanup_free_ char *run = dsec_run_dir();
  _cleanup_free_ char *path = xasprintf("%s/tsc_khz", run);
  _cleanup_free_ char *text = dsec_read_file_at(AT_FDCWD, path, 64, NULL, NULL);
  _cleanup_free_ char *boot = dsec_boot_id();
  unsigned long khz = 0;
  char b[128];

  if (text && boot && sscanf(text, "%lu %127s", &khz, b) == 2 &&
      strcmp(b, boot) == 0 && khz > 0)
    return khz;
  {
    struct timespec t0, t1;
    uint64_t c0, c1;
    clock_gettime(CLOCK_MONOTONIC_RAW, &t0);
    c0 = __builtin_ia32_rdtsc();
    usleep(20000);
    c1 = __builtin_ia32_rdtsc();
    clock_gettime(CLOCK_MONOTONIC_RAW, &t1);
    khz = (unsigned long) ((double) (c1 - c0) /
                           ((double) (t1.tv_sec - t0.tv_sec) * 1e3 +
                            (double) (t1.tv_nsec - t0.tv_nsec) / 1e6));
  }
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    char line[160];
    int n = snprintf(line, sizeof line, "%lu %s\n", khz, boot ? boot : "-");
    dsec_private_dir(run, NULL);
    dsec_write_file_replace(AT_FDCWD, path, line, (size_t) n, 0644, &e);
  }
  return khz;
}

static void argv_add(json_t *a, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
static void argv_add(json_t *a, const char *fmt, ...)
{
  va_list ap;
  char *s;
  va_start(ap, fmt);
  if (vasprintf(&s, fmt, ap) < 0)
    abort();
  va_end(ap);
  json_array_append_new(a, json_string(s));
  free(s);
}

/* QEMU's command line.  fds: 3 the agent's port, 4 the monitor, 5 (and
 * stdout) the console, 6 a snapshot to restore, 7 the network port
 * (proxy mode), 8 on the files (qfile).  pmem: the layers' pmem images
 * (backend vm with --pmem), else NULL. */
/* The files QEMU opens, each handed over as a descriptor (8, 9, ...) and
 * named to it as /dev/fd/N: in its own root it sees no host path. */
#define QFILE_FIRST 8
struct qfiles {
  int fd[64];
  size_t n;
};

/* Opens path for QEMU; returns the name QEMU uses for it (new), or NULL
 * with an error. */
static char *qfile(struct qfiles *f, const char *path, int flags,
                   struct dsec_error **err)
{
  int fd;
  if (f->n == ARRAY_SIZE(f->fd)) {
    dsec_fail(err, EMFILE, "too many files for QEMU");
    return NULL;
  }
  fd = open(path, flags | O_CLOEXEC);
  if (fd < 0) {
    dsec_fail(err, errno, "cannot open %s", path);
    return NULL;
  }
  f->fd[f->n] = fd;
  return xasprintf("/dev/fd/%zu", QFILE_FIRST + f->n++);
}

static void qfiles_close(struct qfiles *f)
{
  for (size_t i = 0; i < f->n; i++)
    close(f->fd[i]);
  f->n = 0;
}

static json_t *qemu_argv(struct vm *v, struct dsec_vm_boot *boot,
                         char **layers, size_t n_layers, char **pmem,
                         bool restore, struct qfiles *qf,
                         struct dsec_error **err)
{
  json_t *a = json_array();
  bool micro = v->e->spec->backend == DSEC_BACKEND_MICROVM;
  bool kvm = strcmp(v->accel, "kvm") == 0;
  const char *bus = micro ? "device" : "pci";
  json_int_t mem = v->e->spec->resources.memory_mb;
  double cpus = v->e->spec->resources.cpus;
  _cleanup_free_ char *disk = xasprintf("%s/disk.img", v->e->dir);

  argv_add(a, "%s", dsec_vm_qemu());
  argv_add(a, "-name");
  argv_add(a, "dsec-%s,debug-threads=on", v->e->id);
  argv_add(a, "-M");
  if (micro)
    argv_add(a, "microvm,x-option-roms=off,rtc=on,isa-serial=on,pit=on,pic=on");
  else
    argv_add(a, "q35");
  argv_add(a, "-accel");
  /* TCG's translation cache defaults to 1 GiB per VM: 64 MiB does */
  argv_add(a, "%s", kvm ? "kvm" : "tcg,tb-size=64");
  argv_add(a, "-cpu");
  argv_add(a, "%s", kvm ? "host" : "max");
  argv_add(a, "-m");
  if (pmem) {
    /* pmem devices live in the device memory area above RAM */
    long long extra = 0;
    for (size_t i = 0; i < n_layers; i++) {
      struct stat st;
      if (stat(pmem[i], &st) == 0)
        extra += (st.st_size + (1 << 20) - 1) >> 20;
    }
    argv_add(a, "%lld,slots=%zu,maxmem=%lldM", (long long) (mem > 0 ? mem : 512),
             n_layers, (long long) (mem > 0 ? mem : 512) + extra);
  } else
    argv_add(a, "%lld", (long long) (mem > 0 ? mem : 512));
  argv_add(a, "-smp");
  argv_add(a, "%d", cpus >= 1 ? dsec_ceil_int(cpus) : 1);
  argv_add(a, "-nodefaults");
  argv_add(a, "-no-user-config");
  argv_add(a, "-nographic");
  argv_add(a, "-no-reboot");
  argv_add(a, "-sandbox");
  argv_add(a, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,"
              "resourcecontrol=deny");
  {
    _cleanup_free_ char *k = qfile(qf, boot->kernel, O_RDONLY, err);
    _cleanup_free_ char *i = k ? qfile(qf, boot->initramfs, O_RDONLY, err) : NULL;
    if (!i) {
      json_decref(a);
      return NULL;
    }
    argv_add(a, "-kernel");
    argv_add(a, "%s", k);
    argv_add(a, "-initrd");
    argv_add(a, "%s", i);
  }
  argv_add(a, "-append");
  {
    /* swiotlb=noforce: DAX mappings of pmem must not be bounced */
    const char *extra = pmem ? " swiotlb=noforce" : "";
    if (kvm)
      argv_add(a, "console=ttyS0 quiet panic=-1 reboot=t%s", extra);
    else
      argv_add(a, "console=ttyS0 quiet panic=-1 reboot=t tsc_early_khz=%lu%s",
               tsc_khz(), extra);
  }
  /* the console is QEMU's stdout, a pipe to us (a pipe cannot be
   * reopened through /dev/fd by another user) */
  argv_add(a, "-chardev");
  argv_add(a, "stdio,id=con,signal=off");
  argv_add(a, "-serial");
  argv_add(a, "chardev:con");
  /* a guest kernel panic reaches us through the monitor (GUEST_PANICKED,
   * then QEMU shuts down), not through what the guest prints */
  argv_add(a, "-device");
  argv_add(a, "pvpanic");
  argv_add(a, "-action");
  argv_add(a, "panic=shutdown");
  argv_add(a, "-chardev");
  argv_add(a, "socket,id=agent,fd=3");
  argv_add(a, "-device");
  argv_add(a, "virtio-serial-%s", bus);
  argv_add(a, "-device");
  argv_add(a, "virtserialport,chardev=agent,name=dsec.agent");
  if (v->e->proxy) {
    /* the guest's way to the proxy: connections relayed over a port */
    argv_add(a, "-chardev");
    argv_add(a, "socket,id=net,fd=7");
    argv_add(a, "-device");
    argv_add(a, "virtserialport,chardev=net,name=dsec.net");
  }
  argv_add(a, "-chardev");
  argv_add(a, "socket,id=qmp,fd=4");
  argv_add(a, "-mon");
  argv_add(a, "chardev=qmp,mode=control");
  for (size_t i = 0; pmem && i < n_layers; i++) {
    struct stat st;
    _cleanup_free_ char *f = qfile(qf, pmem[i], O_RDONLY, err);
    if (!f) {
      json_decref(a);
      return NULL;
    }
    /* shared and read-only: every VM maps the host's page cache of the
     * image; a guest that writes to it faults, and only it */
    argv_add(a, "-object");
    argv_add(a, "memory-backend-file,id=pm%zu,mem-path=%s,size=%lld,share=on,"
                "readonly=on", i, f,
             stat(pmem[i], &st) == 0 ? (long long) st.st_size : 0LL);
    argv_add(a, "-device");
    argv_add(a, "virtio-pmem-pci,memdev=pm%zu,id=pmem%zu", i, i);
  }
  for (size_t i = 0; !pmem && i < n_layers; i++) {
    _cleanup_free_ char *f = qfile(qf, layers[i], O_RDONLY, err);
    if (!f) {
      json_decref(a);
      return NULL;
    }
    argv_add(a, "-drive");
    argv_add(a, "if=none,id=l%zu,file=%s,format=raw,readonly=on,rerror=report",
             i, f);
    argv_add(a, "-device");
    argv_add(a, "virtio-blk-%s,drive=l%zu,serial=dsec-l%zu", bus, i, i);
  }
  {
    _cleanup_free_ char *f = qfile(qf, disk, O_RDWR, err);
    if (!f) {
      json_decref(a);
      return NULL;
    }
    argv_add(a, "-drive");
    /* a full host disk is an I/O error in the guest, not a VM paused
     * for good */
    argv_add(a, "if=none,id=rw,file=%s,format=raw,discard=unmap,"
                "werror=report,rerror=report", f);
  }
  argv_add(a, "-device");
  argv_add(a, "virtio-blk-%s,drive=rw,serial=dsec-rw", bus);
  /* memory the guest frees goes back to the host (free page reporting;
   * DSEC_VM_FREE_PAGE_REPORTING=0 turns it off, for a host that would
   * rather spend the CPU) */
  argv_add(a, "-device");
  argv_add(a, "virtio-balloon-%s,free-page-reporting=%s", bus,
           strcmp(getenv("DSEC_VM_FREE_PAGE_REPORTING") ?: "1", "0") == 0
             ? "off" : "on");
  if (restore) {
    argv_add(a, "-incoming");
    argv_add(a, "fd:6");
  }
  return a;
}

/* Binds host path p read-only at root/p (a directory or a file). */
static int bind_ro_at(const char *root, const char *p)
{
  _cleanup_free_ char *dst = xasprintf("%s%s", root, p);
  struct stat st;
  if (stat(p, &st) < 0)
    return -1;
  if (S_ISDIR(st.st_mode)) {
    if (dsec_mkdir_p(AT_FDCWD, dst, 0755, NULL) < 0)
      return -1;
  } else {
    _cleanup_free_ char *parent = xstrdup(dst);
    int fd;
    *strrchr(parent, '/') = '\0';
    if (dsec_mkdir_p(AT_FDCWD, parent, 0755, NULL) < 0)
      return -1;
    fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
      return -1;
    close(fd);
  }
  if (mount(p, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
    return -1;
  return mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID,
               NULL);
}

/* QEMU's root: a tmpfs with only the programs' trees (read-only), a few
 * device nodes and /proc (for /dev/fd); every file of the VM comes as a
 * descriptor.  Entered with pivot_root; the host's tree is gone. */
static int qemu_root(const char *root, const char *qemu, bool kvm)
{
  static const char *const top[] = { "usr", "bin", "sbin", "lib", "lib32",
                                     "lib64", "libx32" };
  static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/urandom",
                                      "/dev/random" };
  _cleanup_free_ char *proc = xasprintf("%s/proc", root);
  _cleanup_free_ char *fdlink = xasprintf("%s/dev/fd", root);
  _cleanup_free_ char *qdir = xstrdup(qemu);
  char *slash;

  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
      mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0)
    return -1;
  for (size_t k = 0; k < ARRAY_SIZE(top); k++) {
    _cleanup_free_ char *host = xasprintf("/%s", top[k]);
    _cleanup_free_ char *dst = xasprintf("%s/%s", root, top[k]);
    char target[PATH_MAX];
    struct stat st;
    ssize_t n;
    if (lstat(host, &st) < 0)
      continue;
    if (S_ISLNK(st.st_mode)) {
      n = readlink(host, target, sizeof target - 1);
      if (n <= 0)
        return -1;
      target[n] = '\0';
      if (symlink(target, dst) < 0)
        return -1;
    } else if (S_ISDIR(st.st_mode) && bind_ro_at(root, host) < 0)
      return -1;
  }
  /* the dynamic linker's cache, and QEMU's own tree when it lives
   * elsewhere (DSEC_QEMU) */
  bind_ro_at(root, "/etc/ld.so.cache");
  slash = strrchr(qdir, '/');
  if (slash && slash != qdir) {
    *slash = '\0';
    if (strncmp(qdir, "/usr/", 5) != 0 && bind_ro_at(root, qdir) < 0)
      return -1;
  }
  for (size_t k = 0; k < ARRAY_SIZE(devs); k++)
    if (bind_ro_at(root, devs[k]) < 0 && k == 0)
      return -1;
  if (kvm) {
    _cleanup_free_ char *dst = xasprintf("%s/dev/kvm", root);
    int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 || mount("/dev/kvm", dst, NULL, MS_BIND, NULL) < 0)
      return -1;
    close(fd);
  }
  if (symlink("/proc/self/fd", fdlink) < 0 || mkdir(proc, 0555) < 0 ||
      mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
    return -1;
  if (chdir(root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
      umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
    return -1;
  return mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
               NULL);
}

/* The QEMU child: contained, then exec'd with its channels at 3-7, its
 * files at 8 on (qf) and its diagnostics in qemu.log.  It runs as the
 * unprivileged id sandboxes map their root to, without capabilities,
 * with no new privileges, in new mount, network, IPC and UTS namespaces,
 * in a root of its own. */
static _Noreturn void qemu_child(struct vm *vm, json_t *argv, int fds[5],
                                 struct qfiles *qf, int log)
{
  char **v = xzalloc(sizeof *v * (json_array_size(argv) + 1));
  struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct d[2] = { { 0 } };
  _cleanup_free_ char *root = xasprintf("%s/qemu-root", vm->e->run);
  bool kvm = strcmp(vm->accel, "kvm") == 0;
  int all[5 + ARRAY_SIZE(qf->fd)];
  size_t n = 5 + qf->n, i;
  uid_t uid = vm->host_id;
  gid_t kvm_gid = 0;
  json_t *x;

  json_array_foreach(argv, i, x)
    v[i] = (char *) json_string_value(x);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (log >= 0)
    dup2(log, 2);
  for (i = 0; i < n; i++) {
    int fd = i < 5 ? fds[i] : qf->fd[i - 5];
    if (fd < 0)
      fd = open("/dev/null", O_RDWR);
    /* dup to a high number first: a source may sit on a target */
    all[i] = fcntl(fd, F_DUPFD, 200);
  }
  for (i = 0; i < n; i++)
    if (dup2(all[i], 3 + (int) i) < 0)
      _exit(125);
  /* the console (slot 5) is stdout; stdin is nothing */
  if (dup2(5, 1) < 0 || dup2(open("/dev/null", O_RDONLY), 0) < 0)
    _exit(125);
  /* the life pipe next, until the last check below */
  if (dup2(fcntl(vm->life, F_DUPFD, 200), 3 + (int) n) < 0)
    _exit(125);
  vm->life = 3 + (int) n;
  syscall(SYS_close_range, 4U + (unsigned) n, ~0U, 0U);
  {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
  }
  if (kvm) {
    struct stat st;
    if (stat("/dev/kvm", &st) == 0)
      kvm_gid = st.st_gid;
  }
  /* no network, no host IPC, no host name to change, no host files */
  mkdir(root, 0755);
  if (unshare(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS) < 0 ||
      qemu_root(root, v[0], kvm) < 0) {
    dprintf(2, "dsec-vm: cannot contain QEMU: %s\n", strerror(errno));
    _exit(125);
  }
  /* the bounding set first: dropping needs CAP_SETPCAP, gone with root */
  for (int cap = 0; cap <= 63; cap++)
    prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  if (setgroups(kvm_gid ? 1 : 0, &kvm_gid) < 0 ||
      setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0) {
    dprintf(2, "dsec-vm: cannot switch QEMU to user %u: %s\n", uid,
            strerror(errno));
    _exit(125);
  }
  /* a change of user clears the parent-death signal: again, and the
   * supervisor may have died meanwhile */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    _exit(125);
  {
    /* (the supervisor's end of the life pipe closes when it dies; in our
     * own PID namespace getppid() cannot tell) */
    struct pollfd pf = { vm->life, POLLIN, 0 };
    if (poll(&pf, 1, 0) != 0)
      _exit(125);
    close(vm->life);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || syscall(SYS_capset, &h, d) < 0) {
    dprintf(2, "dsec-vm: cannot drop QEMU's privileges: %s\n", strerror(errno));
    _exit(125);
  }
  execvp(v[0], v);
  dprintf(2, "dsec-vm: cannot run %s: %s\n", v[0], strerror(errno));
  _exit(127);
}

/* ---- the monitor (QMP), used synchronously: the operations that need it
 * (suspend, fork) block the loop while they run */

static char qbuf[65536];
static size_t qlen;

/* An event QEMU sent: the ones that tell how the guest ended are kept. */
static void qmp_note(struct vm *v, json_t *m)
{
  const char *ev = json_string_value(json_object_get(m, "event"));
  const char *reason;
  if (!ev)
    return;
  if (strcmp(ev, "GUEST_PANICKED") == 0)
    v->guest_panicked = true;
  reason = json_string_value(json_object_get(json_object_get(m, "data"),
                                             "reason"));
  if (strcmp(ev, "SHUTDOWN") == 0 && reason && !v->shutdown_reason)
    v->shutdown_reason = xstrdup(reason);
}

static json_t *qmp_read(struct vm *v, int timeout_ms)
{
  double end = dsec_now_ms() + timeout_ms;
  for (;;) {
    char *nl = memchr(qbuf, '\n', qlen);
    if (nl) {
      size_t n = (size_t) (nl - qbuf);
      json_t *m = json_loadb(qbuf, n, 0, NULL);
      memmove(qbuf, nl + 1, qlen - n - 1);
      qlen -= n + 1;
      if (m) {
        qmp_note(v, m);
        return m;
      }
      continue;
    }
    {
      struct pollfd pf = { v->qmp, POLLIN, 0 };
      int left = (int) (end - dsec_now_ms());
      ssize_t r;
      /* past the deadline, what is there already is still read */
      if (poll(&pf, 1, left > 0 ? left : 0) <= 0)
        return NULL;
      r = read(v->qmp, qbuf + qlen, sizeof qbuf - qlen);
      if (r <= 0)
        return NULL;
      qlen += (size_t) r;
      if (qlen == sizeof qbuf)
        qlen = 0; /* a line longer than we care for */
    }
  }
}

/* Runs a QMP command (with an fd sent alongside when fd >= 0); returns
 * its "return" (new), or NULL with the error. */
static json_t *qmp(struct vm *v, json_t *cmd, int fd, struct dsec_error **err)
{
  char *text = json_dumps(cmd, JSON_COMPACT);
  struct iovec iov = { text, strlen(text) };
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int))];
  } u;
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
  json_decref(cmd);
  if (fd >= 0) {
    struct cmsghdr *c;
    memset(&u, 0, sizeof u);
    mh.msg_control = u.b;
    mh.msg_controllen = sizeof u.b;
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  if (sendmsg(v->qmp, &mh, MSG_NOSIGNAL) < 0) {
    free(text);
    dsec_fail(err, errno, "cannot talk to QEMU");
    return NULL;
  }
  free(text);
  for (;;) {
    json_t *m = qmp_read(v, 60000), *r;
    if (!m) {
      dsec_fail(err, ETIMEDOUT, "QEMU does not answer");
      return NULL;
    }
    if ((r = json_object_get(m, "return"))) {
      json_incref(r);
      json_decref(m);
      return r;
    }
    if ((r = json_object_get(m, "error"))) {
      dsec_fail(err, 0, "QEMU: %s",
                json_string_value(json_object_get(r, "desc")) ?: "error");
      json_decref(m);
      return NULL;
    }
    json_decref(m); /* an event */
  }
}

static int qmp_simple(struct vm *v, const char *execute, struct dsec_error **err)
{
  json_t *r = qmp(v, json_pack("{s:s}", "execute", execute), -1, err);
  if (!r)
    return -1;
  json_decref(r);
  return 0;
}

/* Migrates the (paused) VM into path: written under a temporary name,
 * synced, renamed.  Returns its size, or -1. */
static off_t vm_save(struct vm *v, const char *path, struct dsec_error **err)
{
  _cleanup_free_ char *tmp = xasprintf("%s.tmp", path);
  _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                                0600);
  json_t *r;
  double end = dsec_now_ms() + MIGRATE_TIMEOUT_MS;
  struct stat st;

  if (fd < 0)
    return dsec_fail(err, errno, "cannot create %s", tmp);
  r = qmp(v, json_pack("{s:s, s:{s:s}}", "execute", "getfd", "arguments",
                       "fdname", "snapshot"), fd, err);
  if (!r)
    goto fail;
  json_decref(r);
  r = qmp(v, json_pack("{s:s, s:{s:s}}", "execute", "migrate", "arguments",
                       "uri", "fd:snapshot"), -1, err);
  if (!r)
    goto fail;
  json_decref(r);
  for (;;) {
    const char *status;
    r = qmp(v, json_pack("{s:s}", "execute", "query-migrate"), -1, err);
    if (!r)
      goto fail;
    status = json_string_value(json_object_get(r, "status"));
    if (status && strcmp(status, "completed") == 0) {
      json_decref(r);
      break;
    }
    if (status && (strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0)) {
      dsec_fail(err, 0, "the VM's migration %s: %s", status,
                json_string_value(json_object_get(r, "error-desc")) ?: "");
      json_decref(r);
      goto fail;
    }
    json_decref(r);
    if (dsec_now_ms() > end) {
      dsec_fail(err, ETIMEDOUT, "the VM's migration did not end");
      goto fail;
    }
    usleep(20000);
  }
  if (fsync(fd) < 0 || fstat(fd, &st) < 0 || rename(tmp, path) < 0) {
    dsec_fail(err, errno, "cannot write %s", path);
    goto fail;
  }
  {
    /* the rename reaches the disk before anyone is told */
    _cleanup_free_ char *dir = xstrdup(path);
    _cleanup_close_ int dfd = -1;
    *strrchr(dir, '/') = '\0';
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) < 0) {
      dsec_fail(err, errno, "cannot sync %s", dir);
      return -1;
    }
  }
  return st.st_size;
fail:
  json_decref(qmp(v, json_pack("{s:s}", "execute", "migrate_cancel"), -1, NULL));
  unlink(tmp);
  return -1;
}

/* The guest's console: console.log gets its first MiB; past that only the
 * last 64 KiB are kept (a guest that writes without end cannot fill the
 * host's disk), and written out with the count of what went when the VM
 * ends, so the last lines (a panic) are always there. */
static void console_read(struct vm *v)
{
  char buf[65536];
  for (;;) {
    ssize_t n = read(v->console_in, buf, sizeof buf);
    size_t head;
    if (n <= 0)
      return;
    head = v->console_written < CONSOLE_HEAD
             ? (size_t) n < CONSOLE_HEAD - v->console_written
                 ? (size_t) n
                 : CONSOLE_HEAD - v->console_written
             : 0;
    if (head && write(v->console_fd, buf, head) > 0)
      v->console_written += head;
    for (size_t i = head; i < (size_t) n; i++) {
      if (!v->console_tail)
        v->console_tail = xmalloc(CONSOLE_TAIL);
      v->console_tail[v->tail_pos] = buf[i];
      v->tail_pos = (v->tail_pos + 1) % CONSOLE_TAIL;
      if (v->tail_len < CONSOLE_TAIL)
        v->tail_len++;
      v->console_dropped++;
    }
  }
}

static void console_flush(struct vm *v)
{
  char note[128];
  size_t start;
  int len;

  if (v->console_in >= 0)
    console_read(v);
  if (!v->tail_len)
    return;
  len = snprintf(note, sizeof note, "\n[dsec: %llu bytes of console output "
                                    "dropped; the last %zu follow]\n",
                 (unsigned long long) (v->console_dropped - v->tail_len),
                 v->tail_len);
  if (write(v->console_fd, note, (size_t) len) < 0)
    return;
  start = (v->tail_pos + CONSOLE_TAIL - v->tail_len) % CONSOLE_TAIL;
  for (size_t done = 0; done < v->tail_len;) {
    size_t chunk = CONSOLE_TAIL - (start + done) % CONSOLE_TAIL;
    if (chunk > v->tail_len - done)
      chunk = v->tail_len - done;
    if (write(v->console_fd, v->console_tail + (start + done) % CONSOLE_TAIL,
              chunk) < 0)
      return;
    done += chunk;
  }
  v->tail_len = 0;
}

/* ---- the agent */

static char *death_cause(struct vm *v, int status);
static bool agent_read(struct vm *v);

static int agent_send(struct vm *v, json_t *m, const char *payload, size_t plen)
{
  char *text = json_dumps(m, JSON_COMPACT);
  size_t n = strlen(text);
  struct iovec iov[3] = { { text, n }, { "\n", 1 }, { (void *) payload, plen } };
  int cnt = plen ? 3 : 2;
  int ret = 0;

  double end = dsec_now_ms() + AGENT_SEND_TIMEOUT_MS;

  json_decref(m);
  if (!text)
    return -1;
  /* a message is never split; while the agent is not reading we read
   * what it sends (it may be blocked writing to us), and a guest that
   * never reads again gets no more */
  while (cnt > 0) {
    ssize_t w = writev(v->agent, iov, cnt);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno == EAGAIN) {
      struct pollfd pf = { v->agent, POLLOUT | POLLIN, 0 };
      if (dsec_now_ms() > end) {
        ret = -1;
        break;
      }
      if (poll(&pf, 1, 1000) > 0 && (pf.revents & POLLIN)) {
        agent_read(v);
        v->pending = true; /* the loop dispatches it */
      }
      continue;
    }
    if (w < 0) {
      ret = -1;
      break;
    }
    for (int i = 0; i < cnt && w > 0; i++) {
      size_t k = (size_t) w < iov[i].iov_len ? (size_t) w : iov[i].iov_len;
      iov[i].iov_base = (char *) iov[i].iov_base + k;
      iov[i].iov_len -= k;
      w -= (ssize_t) k;
    }
    while (cnt > 0 && iov[0].iov_len == 0) {
      memmove(iov, iov + 1, sizeof *iov * (size_t) (cnt - 1));
      cnt--;
    }
  }
  free(text);
  return ret;
}

/* Reads what the agent sent; false at EOF. */
static bool agent_read(struct vm *v)
{
  for (;;) {
    ssize_t n;
    if (v->acap - v->alen < 65536) {
      if (v->acap > 2 * (size_t) MSG_MAX + AGENT_HEADER_MAX)
        return true; /* a message this big is refused by agent_next */
      v->acap = v->acap ? v->acap * 2 : 1 << 20;
      v->abuf = xrealloc(v->abuf, v->acap);
    }
    n = read(v->agent, v->abuf + v->alen, v->acap - v->alen);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return true;
    if (n <= 0)
      return false;
    v->alen += (size_t) n;
  }
}

json_t *dsec_vm_agent_next(const char *buf, size_t len, const char **payload,
                          size_t *plen, size_t *used, bool *bad)
{
  const char *nl = len ? memchr(buf, '\n', len) : NULL;
  size_t hl, need;
  json_int_t ol, el, dl;
  json_t *m;
  *bad = false;
  if (!nl) {
    *bad = len > AGENT_HEADER_MAX;
    return NULL;
  }
  hl = (size_t) (nl - buf);
  m = json_loadb(buf, hl, 0, NULL);
  ol = json_integer_value(json_object_get(m, "stdout_len"));
  el = json_integer_value(json_object_get(m, "stderr_len"));
  dl = json_integer_value(json_object_get(m, "data_len"));
  if (hl > AGENT_HEADER_MAX || ol < 0 || el < 0 || dl < 0 ||
      ol > (json_int_t) MSG_MAX || el > (json_int_t) MSG_MAX ||
      dl > (json_int_t) MSG_MAX) {
    json_decref(m);
    *bad = true;
    return NULL;
  }
  need = (size_t) ol + (size_t) el + (size_t) dl;
  if (len - hl - 1 < need) {
    json_decref(m);
    return NULL;
  }
  *payload = nl + 1;
  *plen = need;
  *used = hl + 1 + need;
  if (!m)
    m = json_object(); /* garbage: skipped */
  return m;
}

/* The next whole message the agent sent (see dsec_vm_agent_next); its
 * payload is borrowed until agent_consume. */
static json_t *agent_next(struct vm *v, const char **payload, size_t *plen,
                          size_t *used, bool *bad)
{
  return dsec_vm_agent_next(v->abuf, v->alen, payload, plen, used, bad);
}

static void agent_consume(struct vm *v, size_t used)
{
  memmove(v->abuf, v->abuf + used, v->alen - used);
  v->alen -= used;
}

/* Waits for a message of type op from the agent (boot or restore), while
 * watching QEMU: NULL with an error when it ends first or time is up. */
static json_t *agent_wait(struct vm *v, const char *op, int timeout_ms,
                          struct dsec_error **err)
{
  double end = dsec_now_ms() + timeout_ms;
  for (;;) {
    const char *p;
    size_t pl, used;
    json_t *m;
    bool bad;
    while ((m = agent_next(v, &p, &pl, &used, &bad))) {
      agent_consume(v, used);
      if (strcmp(json_string_value(json_object_get(m, "op")) ?: "", op) == 0)
        return m;
      json_decref(m);
    }
    if (bad) {
      dsec_fail(err, EPROTO, "the guest agent broke its protocol");
      return NULL;
    }
    {
      struct pollfd pf = { v->agent, POLLIN, 0 };
      int left = (int) (end - dsec_now_ms());
      int st;
      if (left <= 0) {
        dsec_fail(err, ETIMEDOUT, "the guest agent did not answer within %d s",
                  timeout_ms / 1000);
        return NULL;
      }
      if (waitpid(v->qemu, &st, WNOHANG) == v->qemu) {
        _cleanup_free_ char *cause = NULL;
        v->qemu = 0;
        cause = death_cause(v, st);
        dsec_fail(err, 0, "the VM ended while starting: %s (see console.log)",
                  cause);
        return NULL;
      }
      if (v->console_in >= 0)
        console_read(v);
      if (poll(&pf, 1, left < 200 ? left : 200) > 0 && !agent_read(v)) {
        dsec_fail(err, 0, "QEMU closed the agent's port");
        return NULL;
      }
    }
  }
}

/* ---- execs */

static _Noreturn void vm_die(struct vm *v, const char *cause);

/* An exec goes to the agent with its stdin; the agent enforces its
 * timeout, and the engine's deadline for it is a grace period later (a
 * guest that does not answer by then is overdue, see vm_deadline). */
static int vm_exec(struct dsec_engine *e, struct dsec_job *j, json_t *msg,
                   struct dsec_error **err)
{
  struct vm *v = e->b;
  const char *in = json_string_value(json_object_get(j->req, "stdin")) ?: "";
  double timeout = json_number_value(json_object_get(j->req, "timeout_s"));
  json_t *m = json_copy(msg);

  if (j->deadline > 0)
    j->deadline += GUEST_GRACE_MS;
  /* the agent's names for xid, and what it needs of the request */
  json_object_set(m, "id", json_object_get(msg, "xid"));
  json_object_del(m, "xid");
  json_object_set_new(m, "stdin_len", json_integer((json_int_t) strlen(in)));
  json_object_set_new(m, "timeout_ms", json_real(timeout * 1000));
  json_object_set_new(m, "cap", json_integer((json_int_t) j->cap));
  if (j->stream)
    json_object_set_new(m, "stream", json_true());
  if (agent_send(v, m, in, strlen(in)) < 0)
    return dsec_fail(err, errno, "cannot reach the guest agent");
  return 0;
}

/* The agent's answer to an exec: a header and the output kept. */
static void vm_result(struct vm *v, json_t *m, const char *payload)
{
  struct dsec_job *j = dsec_engine_job(v->e, (uint64_t) json_integer_value(
                                                json_object_get(m, "id")));
  size_t olen = (size_t) json_integer_value(json_object_get(m, "stdout_len"));
  size_t elen = (size_t) json_integer_value(json_object_get(m, "stderr_len"));
  uint64_t otot = (uint64_t) json_integer_value(json_object_get(m, "stdout_total"));
  uint64_t etot = (uint64_t) json_integer_value(json_object_get(m, "stderr_total"));
  _cleanup_json_ json_t *extra = json_pack("{s:s}", "accelerator", v->accel);
  struct dsec_job_end end = {
    .status = (int) json_integer_value(json_object_get(m, "status")),
    .oom = json_is_true(json_object_get(m, "oom_killed")),
    .error = json_string_value(json_object_get(m, "error")),
    .extra = extra,
  };

  if (!j)
    return;
  if (olen > j->cap || elen > j->cap || otot < olen || etot < elen)
    vm_die(v, "the guest agent broke its protocol (output past the cap)");
  if (json_is_true(json_object_get(m, "timed_out")))
    j->timed_out = true;
  /* the guest answers whole: a streaming client gets it at once */
  dsec_job_output(v->e, j, 1, payload, olen, otot);
  dsec_job_output(v->e, j, 2, payload + olen, elen, etot);
  dsec_job_finish(v->e, j, &end);
}

/* A piece of a streamed exec's output, as the guest read it. */
static void vm_output(struct vm *v, json_t *m, const char *payload)
{
  struct dsec_job *j = dsec_engine_job(v->e, (uint64_t) json_integer_value(
                                                json_object_get(m, "id")));
  size_t olen = (size_t) json_integer_value(json_object_get(m, "stdout_len"));
  size_t elen = (size_t) json_integer_value(json_object_get(m, "stderr_len"));
  if (!j)
    return;
  if (j->out.k.len + olen > j->cap || j->err.k.len + elen > j->cap)
    vm_die(v, "the guest agent broke its protocol (output past the cap)");
  if (olen)
    dsec_job_output(v->e, j, 1, payload, olen, 0);
  if (elen)
    dsec_job_output(v->e, j, 2, payload + olen, elen, 0);
}

/* An exec the agent did not answer for long past its timeout: the guest
 * is stuck, or its root stopped the agent from ending it.  The answer is
 * a timeout all the same, and everything in the guest is killed. */
static void vm_deadline(struct dsec_engine *e, struct dsec_job *j)
{
  struct vm *v = e->b;
  struct dsec_job_end end = { .status = SIGKILL };
  _cleanup_json_ json_t *extra =
    json_pack("{s:s, s:s}", "accelerator", v->accel, "error",
              "the guest did not end the command by its deadline");
  end.extra = extra;
  agent_send(v, json_pack("{s:s, s:i}", "op", "kill", "signal", SIGKILL), NULL, 0);
  dsec_engine_event(e, json_pack("{s:s, s:O, s:s}", "type", "guest_unresponsive",
                                 "seq", j->seq ? j->seq : json_null(), "cause",
                                 "no answer by the exec's deadline"));
  j->timed_out = true;
  dsec_job_finish(e, j, &end);
}

/* sig to one exec's process group in the guest, or to every process of
 * the guest. */
static void vm_signal(struct dsec_engine *e, struct dsec_job *j, int sig)
{
  struct vm *v = e->b;
  json_t *m = json_pack("{s:s, s:i}", "op", "kill", "signal", sig);
  if (j)
    json_object_set_new(m, "id", json_integer((json_int_t) j->xid));
  agent_send(v, m, NULL, 0);
}

/* An interactive exec's terminal size, in the guest. */
static void vm_resize(struct dsec_engine *e, struct dsec_job *j, unsigned cols,
                      unsigned rows)
{
  struct vm *v = e->b;
  agent_send(v, json_pack("{s:s, s:I, s:i, s:i}", "op", "resize", "id",
                          (json_int_t) j->xid, "cols", (int) cols, "rows",
                          (int) rows), NULL, 0);
}

/* More input for an exec that keeps its stdin open (a session's shell,
 * a copy in); buf NULL: its end. */
static int vm_input(struct dsec_engine *e, struct dsec_job *j, const char *buf,
                    size_t len)
{
  struct vm *v = e->b;
  json_t *m = json_pack("{s:s, s:I, s:I}", "op", "stdin", "id",
                        (json_int_t) j->xid, "stdin_len",
                        (json_int_t) (buf ? len : 0));
  if (!buf)
    json_object_set_new(m, "eof", json_true());
  return agent_send(v, m, buf, buf ? len : 0);
}

/* Acts on the whole messages the agent sent (results). */
static void agent_dispatch(struct vm *v)
{
  const char *p;
  size_t pl, used;
  json_t *m;
  bool bad;

  v->pending = false;
  while ((m = agent_next(v, &p, &pl, &used, &bad))) {
    const char *op = json_string_value(json_object_get(m, "op")) ?: "";
    if (strcmp(op, "result") == 0)
      vm_result(v, m, p);
    else if (strcmp(op, "output") == 0)
      vm_output(v, m, p);
    else if (strcmp(op, "stdin_ack") == 0) {
      struct dsec_job *j = dsec_engine_job(
        v->e, (uint64_t) json_integer_value(json_object_get(m, "id")));
      json_int_t n = json_integer_value(json_object_get(m, "n"));
      if (j && n > 0)
        dsec_job_input_taken(v->e, j, (uint64_t) n);
    }
    json_decref(m);
    agent_consume(v, used);
  }
  if (bad)
    vm_die(v, "the guest agent broke its protocol");
}

static void agent_readable(struct dsec_engine *e, void *p, uint32_t events)
{
  struct vm *v = e->b;
  bool open = agent_read(v);
  (void) p, (void) events;
  agent_dispatch(v);
  if (!open)
    epoll_ctl(e->epfd, EPOLL_CTL_DEL, v->agent, NULL);
}

static void console_readable(struct dsec_engine *e, void *p, uint32_t events)
{
  (void) p, (void) events;
  console_read(e->b);
}

/* What a blocked send read meanwhile is dispatched before the loop waits
 * again. */
static int vm_next_timer(struct dsec_engine *e)
{
  struct vm *v = e->b;
  return v->pending ? 0 : -1;
}

static void vm_timers(struct dsec_engine *e)
{
  struct vm *v = e->b;
  if (v->pending)
    agent_dispatch(v);
}

/* ---- the end of a VM */


/* QEMU's last diagnostic line (new), or NULL. */
static char *qemu_said(struct vm *v)
{
  _cleanup_free_ char *path = xasprintf("%s/qemu.log", v->e->dir);
  _cleanup_free_ char *text = dsec_read_file_at(AT_FDCWD, path, 1 << 16, NULL, NULL);
  char *end, *line;
  if (!text)
    return NULL;
  end = text + strlen(text);
  while (end > text && (end[-1] == '\n' || end[-1] == ' '))
    *--end = '\0';
  line = strrchr(text, '\n');
  line = line ? line + 1 : text;
  return *line ? xstrdup(line) : NULL;
}

/* The end of the guest's console (new; NULL when there is none): the
 * guest's own words, kept beside a death's cause (console_tail), never
 * taken for it: a guest can print any line it likes. */
static char *console_tail(struct vm *v, size_t max)
{
  _cleanup_free_ char *path = xasprintf("%s/console.log", v->e->dir);
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  char *buf;
  struct stat st;
  ssize_t n;
  size_t len;
  json_t *j;

  if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0)
    return NULL;
  buf = xmalloc(max + 1);
  n = pread(fd, buf, max, st.st_size > (off_t) max ? st.st_size - (off_t) max
                                                   : 0);
  if (n <= 0) {
    free(buf);
    return NULL;
  }
  len = (size_t) n;
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
                     buf[len - 1] == ' '))
    len--;
  /* whole lines, as valid UTF-8 */
  {
    char *start = len == max ? memchr(buf, '\n', len) : NULL;
    size_t off = start ? (size_t) (start - buf) + 1 : 0;
    j = dsec_json_utf8(buf + off, len - off);
  }
  free(buf);
  buf = xstrdup(json_string_value(j));
  json_decref(j);
  return buf;
}

/* Why the VM ended, as the host saw it (new): QEMU's monitor (a
 * pvpanic's GUEST_PANICKED, SHUTDOWN's reason), the cgroup's OOM
 * killer, and QEMU's wait status.  What the guest printed on its console
 * never decides it. */
static char *death_cause(struct vm *v, int status)
{
  json_t *m;
  /* the events QEMU wrote before it went are still in the socket */
  while (v->qmp >= 0 && (m = qmp_read(v, 0)))
    json_decref(m);
  if (v->guest_panicked ||
      (v->shutdown_reason && strcmp(v->shutdown_reason, "guest-panic") == 0))
    return xstrdup("guest kernel panic (pvpanic)");
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && v->e->cg &&
      dsec_cgroup_oom_kills(v->e->cg) > 0)
    return xstrdup("out of memory: QEMU went past the VM's memory limit");
  if (v->shutdown_reason && strcmp(v->shutdown_reason, "guest-shutdown") == 0)
    return xstrdup("the guest powered off");
  if (v->shutdown_reason && strcmp(v->shutdown_reason, "guest-reset") == 0)
    return xstrdup("the guest rebooted");
  if (WIFSIGNALED(status))
    return xasprintf("QEMU was killed by signal %d", WTERMSIG(status));
  return xasprintf("QEMU exited with status %d", WEXITSTATUS(status));
}


/* QEMU goes (the end, or a failed start), its console written out. */
static void vm_stop(struct dsec_engine *e)
{
  struct vm *v = e->b;
  if (v->qemu > 0) {
    kill(v->qemu, SIGKILL);
    while (waitpid(v->qemu, NULL, 0) < 0 && errno == EINTR)
      ;
    v->qemu = 0;
  }
  console_flush(v);
}

/* The VM died: its console's last lines go beside the cause, labelled. */
static _Noreturn void vm_die(struct vm *v, const char *cause)
{
  _cleanup_free_ char *tail = NULL;
  vm_stop(v->e);
  tail = console_tail(v, CONSOLE_TAIL_FIELD);
  if (tail)
    json_object_set_new(v->e->state, "console_tail", json_string(tail));
  dsec_engine_end(v->e, "died", cause);
}

/* SIGCHLD: QEMU ended of itself. */
static void vm_child(struct dsec_engine *e)
{
  struct vm *v = e->b;
  int st;
  _cleanup_free_ char *cause = NULL;
  if (v->qemu <= 0 || waitpid(v->qemu, &st, WNOHANG) != v->qemu)
    return;
  v->qemu = 0;
  console_flush(v);
  cause = death_cause(v, st);
  vm_die(v, cause);
}

/* ---- operations */

/* suspend without release: the VM paused (its memory and processes kept
 * in QEMU), continued by resume. */
static int vm_freeze(struct dsec_engine *e, bool frozen, struct dsec_error **err)
{
  return qmp_simple(e->b, frozen ? "stop" : "cont", err);
}


/* suspend: the whole VM into vm.snap, then QEMU goes.  The writable disk
 * stays beside it; resume boots nothing, it restores. */
static json_t *vm_release(struct dsec_engine *e, bool *ended)
{
  struct vm *v = e->b;
  struct dsec_error *err = NULL;
  _cleanup_free_ char *snap = xasprintf("%s/vm.snap", v->e->dir);
  double t0 = dsec_now_ms();
  off_t size;

  if (dsec_engine_busy(v->e) > 0) {
    dsec_fail(&err, EBUSY, "execs are running; suspend when they end");
    return dsec_ctl_op_error(err);
  }
  if (qmp_simple(v, "stop", &err) < 0)
    return dsec_ctl_op_error(err);
  size = vm_save(v, snap, &err);
  if (size < 0) {
    qmp_simple(v, "cont", NULL);
    return dsec_ctl_op_error(err);
  }
  json_object_set_new(v->e->state, "released", json_true());
  json_object_set_new(v->e->state, "snapshot", json_string("vm.snap"));
  dsec_engine_event(v->e, json_pack("{s:s, s:b, s:s, s:I}", "type", "suspended",
                        "released", true, "snapshot", "vm.snap",
                        "snapshot_bytes", (json_int_t) size));
  *ended = true;
  return json_pack("{s:s, s:s, s:b, s:s, s:I, s:f, s:O}", "type", "suspended",
                   "id", v->e->id, "released", true, "snapshot", "vm.snap",
                   "snapshot_bytes", (json_int_t) size, "duration_ms",
                   dsec_ms1(dsec_now_ms() - t0), "after_seq",
                   v->e->traj.last_seq ? v->e->traj.last_seq : json_null());
}

/* fork: memory and disk copied while the VM is paused, then it goes on.
 * Answers where the copies are; the forks take them. */
static json_t *vm_snapshot(struct dsec_engine *e)
{
  struct vm *v = e->b;
  struct dsec_error *err = NULL;
  _cleanup_free_ char *tag = dsec_sandbox_new_id();
  _cleanup_free_ char *snap = xasprintf("%s/fork-%s.snap", v->e->dir, tag + 3);
  _cleanup_free_ char *disk = xasprintf("%s/fork-%s.disk", v->e->dir, tag + 3);
  _cleanup_free_ char *mine = xasprintf("%s/disk.img", v->e->dir);
  double t0 = dsec_now_ms();

  if (dsec_engine_busy(v->e) > 0) {
    dsec_fail(&err, EBUSY, "execs are running; fork when they end");
    return dsec_ctl_op_error(err);
  }
  /* stop drains and flushes the disks: the copy matches the memory */
  if (qmp_simple(v, "stop", &err) < 0)
    return dsec_ctl_op_error(err);
  if (copy_sparse(mine, disk, &err) < 0 || vm_save(v, snap, &err) < 0) {
    unlink(disk);
    qmp_simple(v, "cont", NULL);
    return dsec_ctl_op_error(err);
  }
  if (qmp_simple(v, "cont", &err) < 0) {
    unlink(disk);
    unlink(snap);
    return dsec_ctl_op_error(err);
  }
  return json_pack("{s:s, s:s, s:s, s:s, s:f, s:O}", "type", "snapshot", "id",
                   v->e->id, "snapshot", snap, "disk", disk, "duration_ms",
                   dsec_ms1(dsec_now_ms() - t0), "after_seq",
                   v->e->traj.last_seq ? v->e->traj.last_seq : json_null());
}

/* Whether QEMU ended, without collecting it (SIGCHLD's handler will). */
static bool qemu_gone(struct vm *v)
{
  siginfo_t si = { 0 };
  return v->qemu > 0 &&
         waitid(P_PID, (id_t) v->qemu, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         si.si_pid == v->qemu;
}

static int guest_produce(void *ud, int fd, json_t **stats,
                         struct dsec_error **err)
{
  struct dsec_engine *e = ud;
  struct vm *v = e->b;
  double end = dsec_now_ms() + CHECKPOINT_TIMEOUT_MS;
  double idle = dsec_now_ms() + CHECKPOINT_IDLE_MS;
  uint64_t got = 0;

  if (agent_send(v, json_pack("{s:s, s:I}", "op", "checkpoint", "id", v->ckpt_id),
                 NULL, 0) < 0)
    return dsec_fail(err, errno, "cannot reach the guest agent");
  for (;;) {
    const char *p;
    size_t pl, used;
    json_t *m;
    bool bad;

    while ((m = agent_next(v, &p, &pl, &used, &bad))) {
      const char *op = json_string_value(json_object_get(m, "op")) ?: "";
      bool ours = json_integer_value(json_object_get(m, "id")) == v->ckpt_id;
      int ret = 0;

      if (ours && strcmp(op, "checkpoint_data") == 0) {
        idle = dsec_now_ms() + CHECKPOINT_IDLE_MS;
        got += pl;
        if (got > v->ckpt_max)
          ret = dsec_fail(err, EFBIG, "the guest sent more than %llu bytes "
                                      "for a disk of that size",
                          (unsigned long long) v->ckpt_max);
        else if (dsec_write_all(fd, p, pl, err) < 0)
          ret = dsec_error_wrap(err, "cannot pass the guest's stream on");
      } else if (ours && strcmp(op, "checkpoint_end") == 0) {
        const char *why = json_string_value(json_object_get(m, "error"));
        json_t *k = json_object_get(m, "skipped_whiteout_names");
        v->ckpt_ended = true;
        if (why)
          ret = dsec_fail(err, 0, "the guest could not write its layer: %s",
                          why);
        else {
          v->ckpt_frozen = json_is_true(json_object_get(m, "frozen"));
          /* the guest's count, as the guest says */
          *stats = json_pack("{s:I}", "skipped_whiteout_names",
                             json_is_integer(k) && json_integer_value(k) >= 0
                               ? json_integer_value(k) : 0);
          ret = 1;
        }
      }
      /* anything else (a late piece of an earlier checkpoint) is dropped */
      json_decref(m);
      agent_consume(v, used);
      if (ret != 0)
        return ret < 0 ? -1 : 0;
    }
    if (bad)
      return dsec_fail(err, EPROTO, "the guest agent broke its protocol");
    {
      struct pollfd pf = { v->agent, POLLIN, 0 };
      double now = dsec_now_ms();
      int left = (int) ((idle < end ? idle : end) - now);
      if (left <= 0)
        return dsec_fail(err, ETIMEDOUT, now >= end
                           ? "the guest's stream did not end within %d s"
                           : "the guest sent nothing for %d s",
                         (now >= end ? CHECKPOINT_TIMEOUT_MS
                                     : CHECKPOINT_IDLE_MS) / 1000);
      if (qemu_gone(v))
        return dsec_fail(err, 0, "the VM ended during the checkpoint");
      if (v->console_in >= 0)
        console_read(v);
      if (poll(&pf, 1, left < 200 ? left : 200) > 0 && !agent_read(v))
        return dsec_fail(err, 0, "QEMU closed the agent's port");
    }
  }
}

static int net_open(void *ud, uint32_t id)
{
  struct vm *v = ud;
  int sp[2];
  (void) id;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
    return -1;
  dsec_proxy_serve(v->e->proxy, sp[1]);
  return sp[0];
}

static void *net_relay(void *arg)
{
  struct vm *v = arg;
  dsec_mux_run(v->net_chan, -1, net_open, v, 0);
  return NULL;
}

/* QEMU's cgroups: the guest's memory plus QEMU's own (its devices, the
 * TCG translation cache), the CPU quota, and a bound on QEMU's threads.
 * The guest's processes are the guest kernel's business. */
static int vm_cgroup(struct vm *v, struct dsec_error **err)
{
  const struct dsec_spec *sp = v->e->spec;
  _cleanup_json_ json_t *lim = json_object();
  int64_t mem = sp->resources.memory_mb;

  json_object_set_new(lim, "memory_mb",
                      json_integer((mem > 0 ? mem : 512) + VM_OVERHEAD_MB));
  json_object_set_new(lim, "pids", json_integer(VM_QEMU_PIDS));
  if (sp->resources.cpus > 0)
    json_object_set_new(lim, "cpus", json_real(sp->resources.cpus));
  json_object_set_new(lim, "class",
                      json_string(sp->resources.klass == DSEC_CLASS_BESTEFFORT
                                    ? "besteffort"
                                    : "latency"));
  return dsec_cgroup_create(v->e->id, lim, &v->e->cg, err);
}

/* The checkpoint's producer (see dsec_checkpoint_import): the agent
 * stops the guest's processes, freezes the disk and streams its upper
 * directory (guest_produce).  A stream the host gave up on is aborted in
 * the guest, which thaws at once. */
static int vm_checkpoint(void *ud, int fd, json_t **stats,
                         struct dsec_error **err)
{
  struct dsec_engine *e = ud;
  struct vm *v = e->b;
  int64_t mb = e->spec->resources.disk_mb;
  int r;

  v->ckpt_id = (json_int_t) ++e->next_xid;
  /* the stream of a full disk: its files, and a header or two each */
  v->ckpt_max = ((uint64_t) (mb > 0 ? mb : 2048) << 21) + (16u << 20);
  v->ckpt_ended = v->ckpt_frozen = false;
  r = guest_produce(e, fd, stats, err);
  if (r < 0 && !v->ckpt_ended)
    agent_send(v, json_pack("{s:s, s:I}", "op", "checkpoint_abort", "id",
                            v->ckpt_id), NULL, 0);
  if (r == 0 && *stats)
    json_object_set_new(*stats, "frozen", json_boolean(v->ckpt_frozen));
  return r;
}

static const struct dsec_backend_ops vm_ops = {
  .exec = vm_exec,
  .deadline = vm_deadline,
  .signal = vm_signal,
  .input = vm_input,
  .resize = vm_resize,
  .freeze = vm_freeze,
  .checkpoint = vm_checkpoint,
  .checkpoint_freezes = true,
  .release = vm_release,
  .snapshot = vm_snapshot,
  .child = vm_child,
  .next_timer = vm_next_timer,
  .timers = vm_timers,
  .stop = vm_stop,
  /* the guest's earlier execs run as its root, in its one pid namespace:
   * nothing here could keep them from an exec */
  .no_exclusive = "exclusive execs are not available in VMs (the guest's "
                  "processes share one pid namespace)",
};

/* A start that failed: QEMU's last words added when it ended, then the
 * engine's report. */
static _Noreturn void vm_fail(struct vm *v, struct dsec_error *err)
{
  if (v->qemu > 0 && waitpid(v->qemu, NULL, WNOHANG) == v->qemu) {
    _cleanup_free_ char *why = qemu_said(v);
    v->qemu = 0;
    if (why && err)
      dsec_error_wrap(&err, "QEMU exited (%s)", why);
  }
  dsec_engine_fail(v->e, err);
}

_Noreturn void dsec_vm_supervisor_main(struct dsec_container_opts *o)
{
  struct dsec_engine engine, *e = &engine;
  struct vm vv = { 0 }, *v = &vv;
  struct dsec_error *err = NULL;
  struct dsec_store *store = NULL;
  struct dsec_vm_boot boot = { 0 };
  int agent[2] = { -1, -1 }, mon[2] = { -1, -1 };
  _cleanup_close_ int snap = -1;
  _cleanup_json_ json_t *uuids = json_array();
  char **pmem = NULL;
  int go[2] = { -1, -1 }, net[2] = { -1, -1 }, cons[2] = { -1, -1 };
  int life[2] = { -1, -1 };
  struct qfiles qf = { .n = 0 };
  json_t *args, *ready, *fields;

  v->e = e;
  v->agent = v->qmp = v->console_fd = v->net_chan = v->console_in = -1;
  v->accel = dsec_vm_accelerator();
  dsec_engine_init(e, o, &vm_ops, v);
  /* every exec's result says where it ran, a session's command too */
  e->exec_extra = json_pack("{s:s}", "accelerator", v->accel);
  if (geteuid() != 0) {
    dsec_fail(&err, EPERM, "dsec-vm needs root (QEMU's containment)");
    vm_fail(v, err);
  }
  /* a mount namespace of our own: whatever is mounted for QEMU's root
   * goes with us */
  if (unshare(CLONE_NEWNS) < 0 ||
      mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
    dsec_fail(&err, errno, "cannot create a mount namespace");
    vm_fail(v, err);
  }
  {
    _cleanup_free_ char *top = dsec_run_dir();
    _cleanup_free_ char *cp = xasprintf("%s/console.log", e->dir);
    if (dsec_private_dir(top, &err) < 0 || dsec_private_dir(e->run, &err) < 0)
      vm_fail(v, err);
    v->console_fd = open(cp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (v->console_fd < 0) {
      dsec_fail(&err, errno, "cannot open %s", cp);
      vm_fail(v, err);
    }
  }

  /* 1. what the VM boots from */
  if (dsec_store_open(&store, &err) < 0)
    vm_fail(v, err);
  {
    /* beside us in a build tree, else where make install put it */
    _cleanup_free_ char *agent_path = dsec_sibling_program("dsec-agent");
    if (!strchr(agent_path, '/')) {
      free(agent_path);
      agent_path = xstrdup(PKGLIBEXECDIR "/dsec-agent");
    }
    if (dsec_vm_boot_prepare(store, agent_path, &boot, &err) < 0)
      vm_fail(v, err);
  }
  if (prepare_disk(v, o->disk_from, &err) < 0)
    vm_fail(v, err);
  {
    /* QEMU reopens it as the unprivileged id it runs as */
    _cleanup_free_ char *disk = xasprintf("%s/disk.img", e->dir);
    struct dsec_idrange r;
    if (dsec_idrange_acquire(o->id, &r, &err) < 0)
      vm_fail(v, err);
    v->host_id = r.base;
    if (chown(disk, r.base, r.base) < 0) {
      dsec_fail(&err, errno, "cannot give %s to QEMU's user", disk);
      vm_fail(v, err);
    }
  }
  if (o->restore) {
    snap = open(o->restore, O_RDONLY | O_CLOEXEC);
    if (snap < 0) {
      dsec_fail(&err, errno, "cannot open the snapshot %s", o->restore);
      vm_fail(v, err);
    }
  }

  /* 2. QEMU */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, agent) < 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, mon) < 0 ||
      pipe2(cons, O_CLOEXEC) < 0) {
    dsec_fail(&err, errno, "cannot create QEMU's channels");
    vm_fail(v, err);
  }
  if (e->spec->network.mode == DSEC_NET_PROXY) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, net) < 0) {
      dsec_fail(&err, errno, "cannot create the network channel");
      vm_fail(v, err);
    }
    dsec_net_events_init(&e->net, e->audit);
    e->proxy = dsec_proxy_new(e->spec->network.json,
                              dsec_net_events_report, &e->net);
    v->net_chan = net[0];
  }
  if (e->spec->pmem) {
    pmem = xzalloc(sizeof *pmem * (o->n_layers + 1));
    for (size_t i = 0; i < o->n_layers; i++) {
      char uuid[33];
      pmem[i] = dsec_vm_pmem_image(store, o->layers[i], uuid, &err);
      if (!pmem[i])
        vm_fail(v, err);
      json_array_append_new(uuids, json_string(uuid));
    }
  }
  args = qemu_argv(v, &boot, o->layers, o->n_layers, pmem, o->restore != NULL,
                   &qf, &err);
  if (!args)
    vm_fail(v, err);
  if (vm_cgroup(v, &err) < 0 || pipe2(go, O_CLOEXEC) < 0) {
    if (!err)
      dsec_fail(&err, errno, "pipe");
    vm_fail(v, err);
  }
  /* PID 1 of a PID namespace of its own: its /proc shows only itself */
  if (pipe2(life, O_CLOEXEC) < 0) {
    dsec_fail(&err, errno, "pipe");
    vm_fail(v, err);
  }
  v->life = life[0];
  v->qemu = (pid_t) syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL,
                            NULL, 0);
  if (v->qemu < 0) {
    dsec_fail(&err, errno, "cannot start QEMU");
    vm_fail(v, err);
  }
  if (v->qemu == 0) {
    int fds[5] = { agent[1], mon[1], cons[1], snap, net[1] };
    _cleanup_free_ char *qlog = xasprintf("%s/qemu.log", e->dir);
    char c;
    /* in its cgroup before it allocates anything */
    close(go[1]);
    if (read(go[0], &c, 1) != 1)
      _exit(125);
    qemu_child(v, args, fds, &qf,
               open(qlog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  }
  close(go[0]);
  close(life[0]); /* life[1] stays open as long as we live */
  if (dsec_cgroup_attach(e->cg, v->qemu, &err) < 0 || write(go[1], "g", 1) != 1) {
    if (!err)
      dsec_fail(&err, errno, "cannot start QEMU");
    close(go[1]);
    vm_fail(v, err);
  }
  close(go[1]);
  json_decref(args);
  qfiles_close(&qf);
  close(agent[1]);
  close(mon[1]);
  close(cons[1]);
  v->console_in = cons[0];
  fcntl(v->console_in, F_SETFL, O_NONBLOCK);
  if (net[1] >= 0)
    close(net[1]);
  v->agent = agent[0];
  v->qmp = mon[0];
  fcntl(v->agent, F_SETFL, O_NONBLOCK);

  /* 3. the monitor, then the agent */
  {
    json_t *greeting = qmp_read(v, BOOT_TIMEOUT_MS);
    if (!greeting) {
      _cleanup_free_ char *why = qemu_said(v);
      dsec_fail(&err, 0, "QEMU did not start%s%s", why ? ": " : "",
                why ? why : "");
      vm_fail(v, err);
    }
    json_decref(greeting);
    if (qmp_simple(v, "qmp_capabilities", &err) < 0)
      vm_fail(v, err);
  }
  if (o->restore) {
    /* the incoming migration ends paused (the VM was paused when saved) */
    double end = dsec_now_ms() + BOOT_TIMEOUT_MS;
    for (;;) {
      json_t *r = qmp(v, json_pack("{s:s}", "execute", "query-status"), -1, &err);
      const char *st = r ? json_string_value(json_object_get(r, "status")) : NULL;
      bool incoming = st && strcmp(st, "inmigrate") == 0;
      bool running = st && strcmp(st, "running") == 0;
      json_decref(r);
      if (!st)
        vm_fail(v, err);
      if (running)
        break;
      if (!incoming) {
        if (qmp_simple(v, "cont", &err) < 0)
          vm_fail(v, err);
        break;
      }
      if (dsec_now_ms() > end) {
        dsec_fail(&err, ETIMEDOUT, "the snapshot was not restored in time");
        vm_fail(v, err);
      }
      usleep(10000);
    }
    agent_send(v, json_pack("{s:s, s:i}", "op", "ping", "id", 0), NULL, 0);
    ready = agent_wait(v, "pong", BOOT_TIMEOUT_MS, &err);
    if (ready) {
      /* forks of one snapshot would share their random state */
      unsigned char seed[64];
      char hex[sizeof seed * 2 + 1];
      json_t *r;
      if (getrandom(seed, sizeof seed, 0) != (ssize_t) sizeof seed) {
        dsec_fail(&err, errno, "getrandom");
        json_decref(ready);
        vm_fail(v, err);
      }
      for (size_t i = 0; i < sizeof seed; i++)
        snprintf(hex + 2 * i, 3, "%02x", seed[i]);
      agent_send(v, json_pack("{s:s, s:i, s:s}", "op", "reseed", "id", 0,
                              "seed", hex), NULL, 0);
      r = agent_wait(v, "reseeded", BOOT_TIMEOUT_MS, &err);
      if (!r || json_object_get(r, "error")) {
        if (r)
          dsec_fail(&err, 0, "the guest cannot reseed its random generator: %s",
                    json_string_value(json_object_get(r, "error")));
        json_decref(r);
        json_decref(ready);
        vm_fail(v, err);
      }
      json_decref(r);
    }
  } else {
    json_t *setup = json_pack("{s:s, s:I, s:O, s:O, s:s, s:b, s:O}", "op",
                              "setup", "layers", (json_int_t) o->n_layers,
                              "protect",
                              json_object_get(e->spec_json, "protect"),
                              "hide", json_object_get(e->spec_json, "hide"),
                              "workdir", e->spec->workdir,
                              "pmem", pmem != NULL, "uuids", uuids);
    json_object_set_new(setup, "proxy", json_boolean(e->proxy != NULL));
    agent_send(v, setup, NULL, 0);
    ready = agent_wait(v, "ready", BOOT_TIMEOUT_MS, &err);
  }
  if (!ready) {
    _cleanup_free_ char *tail = NULL;
    console_flush(v);
    tail = console_tail(v, 256);
    if (tail && err) {
      /* the guest's words, labelled: a hint for a person, not a cause */
      char *nl = strrchr(tail, '\n');
      _cleanup_free_ char *msg =
        xasprintf("%s; console.log ends (guest text): \"%s\"", err->msg,
                  nl ? nl + 1 : tail);
      free(err->msg);
      err->msg = steal_pointer(&msg);
    }
    vm_fail(v, err);
  }
  if (json_object_get(ready, "error")) {
    /* as in a container: protect or hide could not be made (a path to
     * protect that is not there is the spec's mistake) */
    json_int_t st = json_integer_value(json_object_get(ready, "status"));
    dsec_error_set(&err, st == DSEC_EXIT_INPUT ? DSEC_EXIT_INPUT
                                               : DSEC_EXIT_FAILURE,
                   0, "sandbox setup: %s",
                   json_string_value(json_object_get(ready, "error")));
    json_decref(ready);
    vm_fail(v, err);
  }

  /* 4. serve: the agent's answers and the console in the engine's loop */
  v->w_agent = (struct dsec_watch){ agent_readable, NULL, false };
  v->w_console = (struct dsec_watch){ console_readable, NULL, false };
  if (dsec_engine_watch(e, v->agent, EPOLLIN, &v->w_agent) < 0 ||
      dsec_engine_watch(e, v->console_in, EPOLLIN, &v->w_console) < 0) {
    dsec_fail(&err, errno, "cannot set up the event loop");
    json_decref(ready);
    vm_fail(v, err);
  }
  if (e->proxy) {
    pthread_t t;
    if (pthread_create(&t, NULL, net_relay, v) != 0) {
      dsec_fail(&err, errno, "cannot start the network relay");
      json_decref(ready);
      vm_fail(v, err);
    }
    pthread_detach(t);
  }
  /* QEMU's host id: the first of the VM's own range */
  fields = json_pack("{s:s, s:s, s:i, s:{s:I, s:I}}", "accelerator", v->accel,
                     "kernel",
                     json_string_value(json_object_get(ready, "kernel")) ?: "",
                     "qemu_pid", (int) v->qemu, "idmap", "host_base",
                     (json_int_t) v->host_id, "count",
                     (json_int_t) DSEC_IDRANGE_SIZE);
  /* what the guest does with its cold memory, as its agent said */
  if (json_is_string(json_object_get(ready, "damon")))
    json_object_set(fields, "damon", json_object_get(ready, "damon"));
  else
    json_object_set_new(fields, "damon_unavailable",
                        json_string(json_string_value(json_object_get(
                          ready, "damon_unavailable")) ?:
                                      "the guest agent did not say"));
  /* a latency-class VM's vCPUs share no core with another's tasks */
  if (e->spec->resources.klass == DSEC_CLASS_LATENCY) {
    char *why = NULL;
    if (dsec_core_sched_isolate(v->qemu, &why) == 1)
      json_object_set_new(fields, "core_sched", json_true());
    else
      json_object_set_new(fields, "core_sched_unavailable", json_string(why));
    free(why);
  }
  json_decref(ready);
  dsec_vm_boot_free(&boot);
  dsec_store_free(store);
  /* restored with its memory: its sessions' shells live on */
  e->keeps_processes = o->restore != NULL;
  dsec_engine_serve(e, fields,
                    o->restore
                      ? json_pack("{s:s, s:s, s:s}", "type", "resumed", "from",
                                  "snapshot", "accelerator", v->accel)
                      : json_pack("{s:s, s:s, s:s, s:O}", "type", "created",
                                  "backend", dsec_backend_name(e->spec->backend),
                                  "accelerator", v->accel, "labels",
                                  e->spec->labels));
}
