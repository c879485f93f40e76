#include <config.h>

#include "layermount.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "digest.h"
#include "fsutil.h"
#include "lock.h"
#include "log.h"
#include "sandbox.h"
#include "store.h"
#include "utils.h"

/* path is the root of a mount (of its own, not a directory in one). */
static bool mount_root(int dirfd, const char *path)
{
  struct statx sx;
  if (statx(dirfd, path, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, 0, &sx) < 0)
    return false;
  return (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
         (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* run/layers is a mount point of its own (a private bind mount of
 * itself) while layers are mounted below it.  Returns the fd holding
 * run/layers.lock shared: the reaper takes it exclusively to undo the
 * bind mount once no layer is mounted, never while one is being mounted. */
static int layers_bind(const char *run, const char *dir,
                       struct dsec_error **err)
{
  _cleanup_close_ int rfd = open(run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int lock;

  if (rfd < 0)
    return dsec_fail(err, errno, "cannot open %s", run);
  lock = dsec_lock_at(rfd, "layers.lock", DSEC_LOCK_SHARED, false, err);
  if (lock < 0)
    return -1;
  while (!mount_root(AT_FDCWD, dir)) {
    if (flock(lock, LOCK_EX) < 0) {
      close(lock);
      return dsec_fail(err, errno, "cannot lock %s/layers.lock", run);
    }
    if (!mount_root(AT_FDCWD, dir) &&
        (mount(dir, dir, NULL, MS_BIND, NULL) < 0 ||
         mount(NULL, dir, NULL, MS_PRIVATE, NULL) < 0)) {
      close(lock);
      return dsec_fail(err, errno, "cannot make %s a mount point", dir);
    }
    if (flock(lock, LOCK_SH) < 0) {
      close(lock);
      return dsec_fail(err, errno, "cannot lock %s/layers.lock", run);
    }
  }
  return lock;
}

/* The file system mounted at mnt can be idmapped (erofs can since Linux
 * 5.19): a sandbox sees its files owned by its own root. */
static int probe_idmap(const char *mnt, struct dsec_error **err)
{
  _cleanup_close_ int ns = dsec_userns_with_maps("0 0 1\n", "0 0 1\n", err);
  _cleanup_close_ int t = -1;
  struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP };

  if (ns < 0)
    return -1;
  attr.userns_fd = (uint64_t) ns;
  t = (int) syscall(SYS_open_tree, AT_FDCWD, mnt,
                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (t < 0)
    return dsec_fail(err, errno, "cannot clone %s", mnt);
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
    return dsec_fail(err, errno, "erofs cannot be idmapped here");
  return 0;
}

/* Mounts image at ldfd/mnt: from the file itself, else through a loop
 * device.  *backing and *device (new, or NULL) say which. */
static int mount_image(const char *image, const char *mnt, const char **backing,
                       char **device, struct dsec_error **err)
{
  const unsigned long flags = MS_RDONLY | MS_NOSUID | MS_NODEV;
  _cleanup_close_ int img = -1;
  _cleanup_close_ int loop = -1;
  _cleanup_free_ char *dev = NULL;
  const char *force = getenv("DSEC_EROFS_BACKING");

  *device = NULL;
  if (!force || strcmp(force, "loop") != 0) {
    if (mount(image, mnt, "erofs", flags, NULL) == 0) {
      *backing = "file";
      return 0;
    }
    /* ENOTBLK: a kernel that mounts erofs from block devices only */
    if (errno != ENOTBLK && errno != EINVAL)
      return dsec_fail(err, errno, "cannot mount %s", image);
  }
  img = open(image, O_RDONLY | O_CLOEXEC);
  if (img < 0)
    return dsec_fail(err, errno, "cannot open %s", image);
  dev = dsec_loop_attach(img, true, &loop, err);
  if (!dev)
    return -1;
  if (mount(dev, mnt, "erofs", flags, NULL) < 0)
    return dsec_fail(err, errno, "cannot mount %s (on %s)", image, dev);
  *backing = "loop";
  *device = steal_pointer(&dev);
  return 0;
}

/* Mounts the layer at ldfd (run/layers/<hex>) under its exclusive lock. */
static int mount_layer(int ldfd, const char *ldir, const char *digest,
                       const char *image, struct dsec_error **err)
{
  _cleanup_free_ char *mnt = xasprintf("%s/mnt", ldir);
  _cleanup_free_ char *dev = NULL;
  _cleanup_free_ char *now = dsec_time_rfc3339();
  _cleanup_free_ char *text = NULL;
  const char *backing = NULL;
  json_t *rec;
  int ret;

  if (mkdirat(ldfd, "mnt", 0700) < 0 && errno != EEXIST)
    return dsec_fail(err, errno, "cannot create %s", mnt);
  if (mount_image(image, mnt, &backing, &dev, err) < 0)
    return -1;
  /* the disk starts on what sandboxes read first while the rest is set up */
  dsec_layer_hot_prefetch(image);
  if (probe_idmap(mnt, err) < 0) {
    umount2(mnt, MNT_DETACH);
    return -1;
  }
  rec = json_pack("{s:s, s:s, s:s, s:s, s:s}", "digest", digest, "path", mnt,
                  "image", image, "backing", backing, "mounted", now);
  if (dev)
    json_object_set_new(rec, "device", json_string(dev));
  text = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  ret = dsec_write_file_replace(ldfd, "mount.json", text, strlen(text), 0600,
                                err);
  if (ret < 0)
    umount2(mnt, MNT_DETACH);
  return ret;
}

/* What mounts a host mount under run/layers/<name> (its exclusive lock
 * held): a layer's image, or the shared sysfs. */
struct host_mount {
  const char *name; /* the directory under run/layers */
  const char *what; /* for messages: "layer sha256:..." */
  int (*mount)(int ldfd, const char *ldir, const struct host_mount *h,
               struct dsec_error **err);
  const char *digest, *image; /* a layer's */
  bool nsfs; /* mnt pins a namespace: opened, not cloned */
};

static int mount_layer_at(int ldfd, const char *ldir,
                          const struct host_mount *h, struct dsec_error **err)
{
  if (mount_layer(ldfd, ldir, h->digest, h->image, err) < 0)
    return dsec_error_wrap(err, "layer %s", h->digest);
  return 0;
}

/* A detached clone of run/layers/<h->name>/mnt, mounted first (h->mount)
 * if it is not; *ldfd_out (optional) gets the directory.  With sub, a
 * clone of mnt/<sub> instead, a directory made empty for it (mode 0755;
 * what an earlier one of that name left goes first). */
static int host_mount_clone(const struct host_mount *h, const char *sub,
                            int *ldfd_out, struct dsec_error **err)
{
  _cleanup_free_ char *run = dsec_run_dir();
  _cleanup_free_ char *ldir = NULL;
  _cleanup_close_ int lfd = -1;
  _cleanup_close_ int ldfd = -1;
  _cleanup_close_ int lock = -1;
  _cleanup_close_ int bind = -1;
  int t;

  if (geteuid() != 0)
    return dsec_fail(err, EPERM, "mounting %s needs root", h->what);
  {
    _cleanup_free_ char *dir = xasprintf("%s/layers", run);
    if (dsec_private_dir(run, err) < 0 || dsec_private_dir(dir, err) < 0)
      return -1;
    /* the bind mount first: what is opened below is seen through it */
    bind = layers_bind(run, dir, err);
    if (bind < 0)
      return -1;
    lfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lfd < 0)
      return dsec_fail(err, errno, "cannot open %s", dir);
  }
  ldir = xasprintf("%s/layers/%s", run, h->name);
  if (mkdirat(lfd, h->name, 0700) < 0 && errno != EEXIST)
    return dsec_fail(err, errno, "cannot create %s", ldir);
  ldfd = openat(lfd, h->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (ldfd < 0)
    return dsec_fail(err, errno, "cannot open %s", ldir);
  /* shared: many sandboxes clone the mount at once; the reaper unmounts
   * only under the exclusive lock, so a mount seen here stays until the
   * clone is taken */
  lock = dsec_lock_at(ldfd, "lock", DSEC_LOCK_SHARED, false, err);
  if (lock < 0)
    return -1;
  for (int tries = 0; !mount_root(ldfd, "mnt"); tries++) {
    /* the first user mounts it (flock converts in place); a reaper may
     * unmount it between our locks: then again, once */
    if (tries == 2)
      return dsec_fail(err, EAGAIN, "the mount of %s keeps going", h->what);
    if (flock(lock, LOCK_EX) < 0)
      return dsec_fail(err, errno, "cannot lock %s", ldir);
    if (!mount_root(ldfd, "mnt") && h->mount(ldfd, ldir, h, err) < 0)
      return -1;
    if (flock(lock, LOCK_SH) < 0)
      return dsec_fail(err, errno, "cannot lock %s", ldir);
  }
  if (h->nsfs) {
    t = openat(ldfd, "mnt", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (t >= 0 && ioctl(t, NS_GET_NSTYPE) != CLONE_NEWNS) {
      close(t);
      t = -1;
      errno = EINVAL;
    }
    if (t < 0)
      return dsec_fail(err, errno, "cannot open %s", h->what);
  } else if (sub) {
    /* under the lock: mnt is the shared mount, not the directory under it */
    _cleanup_close_ int m = openat(ldfd, "mnt", O_RDONLY | O_DIRECTORY |
                                                  O_NOFOLLOW | O_CLOEXEC);
    if (m < 0)
      return dsec_fail(err, errno, "cannot open %s/mnt", ldir);
    if (dsec_rm_rf_at(m, sub, err) < 0)
      return -1;
    if (mkdirat(m, sub, 0755) < 0 || fchmodat(m, sub, 0755, 0) < 0)
      return dsec_fail(err, errno, "cannot make %s/mnt/%s", ldir, sub);
    t = (int) syscall(SYS_open_tree, m, sub,
                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (t < 0) {
      int e = errno;
      unlinkat(m, sub, AT_REMOVEDIR);
      return dsec_fail(err, e, "cannot clone %s/mnt/%s", ldir, sub);
    }
  } else {
    t = (int) syscall(SYS_open_tree, ldfd, "mnt",
                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (t < 0)
      return dsec_fail(err, errno, "cannot clone the mount of %s", h->what);
  }
  if (ldfd_out)
    *ldfd_out = dsec_steal_fd(&ldfd);
  return t;
}

int dsec_layer_mount_clone(const char *digest, const char *image,
                           const char **backing, struct dsec_error **err)
{
  _cleanup_free_ char *what = xasprintf("layer %s", digest);
  _cleanup_close_ int ldfd = -1;
  struct host_mount h = { dsec_digest_hex(digest), what, mount_layer_at,
                          digest, image };
  int t = host_mount_clone(&h, NULL, &ldfd, err);

  if (t >= 0 && backing) {
    _cleanup_free_ char *buf = dsec_read_file_at(ldfd, "mount.json", 65536,
                                                 NULL, NULL);
    _cleanup_json_ json_t *j = buf ? json_loads(buf, 0, NULL) : NULL;
    const char *b = json_string_value(json_object_get(j, "backing"));
    *backing = b && strcmp(b, "loop") == 0 ? "loop" : "file";
  }
  return t;
}

/* mount.json for the shared mount of type just made at mnt (ldfd/mnt),
 * which goes again when it cannot be written. */
static int host_mount_record(int ldfd, const char *type, const char *mnt,
                             struct dsec_error **err)
{
  _cleanup_free_ char *now = dsec_time_rfc3339();
  _cleanup_free_ char *text = NULL;
  json_t *rec = json_pack("{s:s, s:s, s:s}", "type", type, "path", mnt,
                          "mounted", now);
  int ret;

  text = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  ret = dsec_write_file_replace(ldfd, "mount.json", text, strlen(text), 0600,
                                err);
  if (ret < 0)
    umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW);
  return ret;
}

/* Mounts a sysfs at ldfd/mnt from a network namespace of its own that
 * nothing else joins (a child makes both; the namespace ends with the
 * child, the mount only keeps its tag, so no interface shows): read-only,
 * nosuid, nodev, noexec. */
static int mount_sysfs(int ldfd, const char *ldir, const struct host_mount *h,
                       struct dsec_error **err)
{
  _cleanup_free_ char *mnt = xasprintf("%s/mnt", ldir);
  int status;
  pid_t pid;

  (void) h;
  if (mkdirat(ldfd, "mnt", 0700) < 0 && errno != EEXIST)
    return dsec_fail(err, errno, "cannot create %s", mnt);
  pid = fork();
  if (pid < 0)
    return dsec_fail(err, errno, "fork");
  if (pid == 0) {
    int fs, m = -1;
    if (unshare(CLONE_NEWNET) < 0)
      _exit(errno & 0xff);
    fs = (int) syscall(SYS_fsopen, "sysfs", FSOPEN_CLOEXEC);
    if (fs < 0 ||
        syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
        (m = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                           MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                             MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)) < 0 ||
        syscall(SYS_move_mount, m, "", ldfd, "mnt", MOVE_MOUNT_F_EMPTY_PATH) < 0)
      _exit(errno & 0xff);
    _exit(0);
  }
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return dsec_fail(err, errno, "waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return dsec_fail(err, WIFEXITED(status) ? WEXITSTATUS(status) : 0,
                     "cannot mount a sysfs of its own network namespace "
                     "at %s", mnt);
  return host_mount_record(ldfd, "sysfs", mnt, err);
}

int dsec_sysfs_mount_clone(struct dsec_error **err)
{
  struct host_mount h = { DSEC_SYSFS_DIR, "the shared sysfs", mount_sysfs,
                          NULL, NULL };
  return host_mount_clone(&h, NULL, NULL, err);
}

/* Mounts the sandboxes' /dev tmpfs at ldfd/mnt: nosuid, nodev, noexec,
 * the root's alone (0700).  No inode limit and the host's memory for a
 * size: a smaller limit of the file system would be one that every
 * sandbox shares (one filling it would leave the others none); what a
 * sandbox writes there counts in its memory cgroup, whose limit bounds
 * it. */
static int mount_devfs(int ldfd, const char *ldir, const struct host_mount *h,
                       struct dsec_error **err)
{
  _cleanup_free_ char *mnt = xasprintf("%s/mnt", ldir);
  _cleanup_close_ int m = -1;

  (void) h;
  if (mkdirat(ldfd, "mnt", 0700) < 0 && errno != EEXIST)
    return dsec_fail(err, errno, "cannot create %s", mnt);
  if ((m = dsec_tmpfs_new("100%", "0", "0700")) < 0 ||
      syscall(SYS_move_mount, m, "", ldfd, "mnt", MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return dsec_fail(err, errno, "cannot mount a tmpfs at %s", mnt);
  return host_mount_record(ldfd, "tmpfs", mnt, err);
}

int dsec_devfs_clone(const char *id, struct dsec_error **err)
{
  struct host_mount h = { DSEC_DEVFS_DIR, "the sandboxes' /dev", mount_devfs,
                          NULL, NULL };
  return host_mount_clone(&h, id, NULL, err);
}

bool dsec_devfs_mounted(const char *run)
{
  _cleanup_free_ char *mnt = xasprintf("%s/layers/" DSEC_DEVFS_DIR "/mnt", run);
  return mount_root(AT_FDCWD, mnt);
}

/* What each sandbox's copy goes through (template_ns in container.c,
 * then init), tried once on the template: a copy with a clone of a tree
 * (here e's) stacked on its root, entered, copied again from a user
 * namespace of its own, where a proc and a sysfs of its own are mounted
 * (on its root).  A kernel that refuses any of it (the hidden ones must
 * count for it) gets no template, and its sandboxes a copy of the host's
 * mounts.  0 or an errno. */
static int rootns_check(void)
{
  int status;
  pid_t pid = fork();

  if (pid == 0) {
    pid_t first;
    int t = -1;
    if (unshare(CLONE_NEWNS) < 0 ||
        (t = (int) syscall(SYS_open_tree, AT_FDCWD, "/e",
                           OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)) < 0 ||
        syscall(SYS_move_mount, t, "", AT_FDCWD, "/",
                MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
        fchdir(t) < 0 || chroot(".") < 0 || unshare(CLONE_NEWUSER) < 0 ||
        unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET) < 0)
      _exit(errno & 0xff);
    first = fork();
    if (first == 0) {
      if (mount("proc", "/", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                NULL) < 0 ||
          mount("sysfs", "/", "sysfs",
                MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        _exit(errno & 0xff);
      _exit(0);
    }
    if (first < 0 || waitpid(first, &status, 0) < 0)
      _exit(EPROTO);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : EPROTO);
  }
  if (pid < 0)
    return errno;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return errno;
  return WIFEXITED(status) ? WEXITSTATUS(status) : EPROTO;
}

/* The template's tree, built by the first process of a new pid and
 * network namespace in its own mount namespace (see layermount.h): a
 * tmpfs with h/proc and h/sys, proc and sysfs mounted there, h covered by
 * the empty e, all read-only but proc; then the tmpfs becomes the
 * namespace's root.  0 or an errno. */
static int rootns_build(const char *ldir)
{
  int m;

  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    return errno;
  if ((m = dsec_tmpfs_new("16k", "16", "0755")) < 0 ||
      syscall(SYS_move_mount, m, "", AT_FDCWD, ldir,
              MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
      chdir(ldir) < 0)
    return errno;
  if (mkdir("h", 0555) < 0 || mkdir("h/proc", 0555) < 0 ||
      mkdir("h/sys", 0555) < 0 || mkdir("e", 0555) < 0 ||
      mount("proc", "h/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
            NULL) < 0 ||
      mount("sysfs", "h/sys", "sysfs",
            MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
      mount("e", "h", NULL, MS_BIND, NULL) < 0 ||
      mount(NULL, "h", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                               MS_NODEV | MS_NOEXEC, NULL) < 0 ||
      mount(NULL, ".", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                               MS_NODEV | MS_NOEXEC, NULL) < 0 ||
      syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 ||
      chdir("/") < 0)
    return errno;
  return rootns_check();
}

/* A template this kernel refused (rootns_check, or the build) is not
 * tried again until the next boot: ldfd/refused says so, {"boot_id",
 * "errno", "error"}.  Errors that may pass (memory, descriptors, a child
 * that died) are not noted. */
static void rootns_refused_note(int ldfd, int e, const char *msg)
{
  _cleanup_free_ char *boot = dsec_boot_id();
  _cleanup_free_ char *text = NULL;
  json_t *rec;

  if (!boot || e == ENOMEM || e == EMFILE || e == ENFILE || e == EAGAIN ||
      e == EINTR || e == EPROTO || e == ENOSPC)
    return;
  rec = json_pack("{s:s, s:i, s:s}", "boot_id", boot, "errno", e, "error",
                  msg);
  text = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  if (text)
    dsec_write_file_replace(ldfd, "refused", text, strlen(text), 0600, NULL);
}

/* Whether this boot's kernel refused the template (*err says why):
 * looked at only where none is mounted, under its lock. */
static bool rootns_refused(int ldfd, const char *ldir, struct dsec_error **err)
{
  _cleanup_free_ char *path = xasprintf("%s/refused", ldir);
  _cleanup_free_ char *buf = dsec_read_file_at(ldfd, "refused", 65536, NULL,
                                               NULL);
  _cleanup_json_ json_t *j = buf ? json_loads(buf, 0, NULL) : NULL;
  _cleanup_free_ char *boot = j ? dsec_boot_id() : NULL;
  const char *was = json_string_value(json_object_get(j, "boot_id"));
  const char *why = json_string_value(json_object_get(j, "error"));

  if (!boot || !was || strcmp(boot, was) != 0)
    return false;
  dsec_fail(err, (int) json_integer_value(json_object_get(j, "errno")),
            "%s (noted in %s: not tried again before the next boot)",
            why ? why : "the template was refused", path);
  return true;
}

/* Makes the template and pins it at ldfd/mnt: a child in new mount, pid
 * and network namespaces has its first process build the tree
 * (rootns_build) and wait; we bind its namespace's file on mnt, in the
 * host's mount namespace, and let both go (their pid and network
 * namespaces end with them: the hidden proc shows no process, the hidden
 * sysfs no interface). */
static int mount_rootns(int ldfd, const char *ldir, const struct host_mount *h,
                        struct dsec_error **err)
{
  _cleanup_free_ char *mnt = xasprintf("%s/mnt", ldir);
  int sp[2], status, e = 0, fd;
  pid_t pid;

  (void) h;
  if (rootns_refused(ldfd, ldir, err))
    return -1;
  fd = openat(ldfd, "mnt", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return dsec_fail(err, errno, "cannot create %s", mnt);
  close(fd);
  /* the children's end: their error (or 0) goes up, and its end of file
   * comes back once the namespace is pinned */
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return dsec_fail(err, errno, "socketpair");
  pid = fork();
  if (pid == 0) {
    pid_t first;
    char c;
    close(sp[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET) < 0 ||
        (first = fork()) < 0) {
      e = errno;
      (void) !write(sp[1], &e, sizeof e);
      _exit(1);
    }
    if (first == 0) {
      e = rootns_build(ldir);
      if (write(sp[1], &e, sizeof e) != (ssize_t) sizeof e || e)
        _exit(1);
      /* until the namespace is pinned */
      (void) !read(sp[1], &c, 1);
      _exit(0);
    }
    close(sp[1]);
    while (waitpid(first, &status, 0) < 0 && errno == EINTR)
      ;
    _exit(0);
  }
  close(sp[1]);
  if (pid < 0) {
    e = errno;
    close(sp[0]);
    return dsec_fail(err, e, "fork");
  }
  if (read(sp[0], &e, sizeof e) != (ssize_t) sizeof e)
    e = EPROTO;
  if (e == 0) {
    _cleanup_free_ char *ns = xasprintf("/proc/%d/ns/mnt", (int) pid);
    if (mount(ns, mnt, NULL, MS_BIND, NULL) < 0)
      e = errno;
  }
  close(sp[0]);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (e) {
    dsec_fail(err, e, "cannot make the template mount namespace at %s", mnt);
    rootns_refused_note(ldfd, e, (*err)->msg);
    return -1;
  }
  return host_mount_record(ldfd, "rootns", mnt, err);
}

int dsec_rootns_open(struct dsec_error **err)
{
  struct host_mount h = { DSEC_ROOTNS_DIR, "the template mount namespace",
                          mount_rootns, NULL, NULL, true };
  return host_mount_clone(&h, NULL, NULL, err);
}

bool dsec_rootns_mounted(const char *run)
{
  _cleanup_free_ char *mnt = xasprintf("%s/layers/" DSEC_ROOTNS_DIR "/mnt",
                                       run);
  return mount_root(AT_FDCWD, mnt);
}

bool dsec_sysfs_mounted(const char *run)
{
  _cleanup_free_ char *mnt = xasprintf("%s/layers/" DSEC_SYSFS_DIR "/mnt", run);
  return mount_root(AT_FDCWD, mnt);
}

void dsec_layer_mounts_detach(const char *run)
{
  _cleanup_free_ char *dir = xasprintf("%s/layers", run);
  /* not a mount point (no layer was ever mounted here): nothing to drop */
  umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW);
}

json_t *dsec_layer_mounts_list(const char *run)
{
  _cleanup_free_ char *dir = xasprintf("%s/layers", run);
  _cleanup_closedir_ DIR *d = opendir(dir);
  json_t *out = json_array();
  struct dirent *de;

  while (d && (de = readdir(d))) {
    _cleanup_free_ char *f = NULL;
    _cleanup_free_ char *buf = NULL;
    json_t *j;
    if (strlen(de->d_name) != DSEC_SHA256_HEX_LEN)
      continue;
    f = xasprintf("%s/mnt", de->d_name);
    if (!mount_root(dirfd(d), f))
      continue;
    free(f);
    f = xasprintf("%s/mount.json", de->d_name);
    buf = dsec_read_file_at(dirfd(d), f, 65536, NULL, NULL);
    j = buf ? json_loads(buf, 0, NULL) : NULL;
    if (!json_is_object(j)) {
      json_decref(j);
      j = json_pack("{s:o}", "digest", json_sprintf("sha256:%s", de->d_name));
    }
    json_object_set_new(j, "path", json_sprintf("%s/%s/mnt", dir, de->d_name));
    json_array_append_new(out, j);
  }
  return out;
}

int dsec_layer_unmount(const char *run, const char *hex, bool *busy,
                       struct dsec_error **err)
{
  _cleanup_free_ char *dir = xasprintf("%s/layers", run);
  _cleanup_free_ char *ldir = xasprintf("%s/%s", dir, hex);
  _cleanup_free_ char *mnt = xasprintf("%s/mnt", ldir);
  _cleanup_close_ int ldfd = open(ldir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                          O_CLOEXEC);
  _cleanup_close_ int lock = -1;

  *busy = false;
  if (ldfd < 0)
    return errno == ENOENT ? 0 : dsec_fail(err, errno, "cannot open %s", ldir);
  lock = dsec_lock_at(ldfd, "lock", DSEC_LOCK_EXCLUSIVE, true, err);
  if (lock < 0) {
    if (err && *err && (*err)->errnum == EWOULDBLOCK) {
      dsec_error_free(*err);
      *err = NULL;
      *busy = true;
      return 0;
    }
    return -1;
  }
  /* detached: a process of ours with its cwd there must not keep the
   * mount; sandboxes hold clones of their own */
  if (mount_root(ldfd, "mnt") &&
      umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
    return dsec_fail(err, errno, "cannot unmount %s", mnt);
  /* the directory and its lock file stay: a user waiting on the lock
   * finds no mount and mounts anew */
  unlinkat(ldfd, "mount.json", 0);
  {
    /* and what a writer of mount.json killed half way left (writers hold
     * the lock we have) */
    _cleanup_closedir_ DIR *d = NULL;
    struct dirent *de;
    int fd = openat(ldfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && !(d = fdopendir(fd)))
      close(fd);
    while (d && (de = readdir(d)))
      if (dsec_str_has_prefix(de->d_name, "mount.json.tmp-"))
        unlinkat(ldfd, de->d_name, 0);
  }
  return 0;
}

int dsec_layer_unbind(const char *run, struct dsec_error **err)
{
  _cleanup_free_ char *dir = xasprintf("%s/layers", run);
  _cleanup_close_ int rfd = open(run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_close_ int lock = -1;
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;

  if (rfd < 0 || !mount_root(AT_FDCWD, dir))
    return 0;
  lock = dsec_lock_at(rfd, "layers.lock", DSEC_LOCK_EXCLUSIVE, true, err);
  if (lock < 0) {
    if (err && *err && (*err)->errnum == EWOULDBLOCK) {
      dsec_error_free(*err);
      *err = NULL;
      return 0; /* a layer is being mounted */
    }
    return -1;
  }
  d = opendir(dir);
  while (d && (de = readdir(d))) {
    _cleanup_free_ char *f = xasprintf("%s/mnt", de->d_name);
    if ((strlen(de->d_name) == DSEC_SHA256_HEX_LEN ||
         strcmp(de->d_name, DSEC_SYSFS_DIR) == 0 ||
         strcmp(de->d_name, DSEC_DEVFS_DIR) == 0 ||
         strcmp(de->d_name, DSEC_ROOTNS_DIR) == 0) &&
        mount_root(dirfd(d), f))
      return 0;
  }
  if (umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL)
    return dsec_fail(err, errno, "cannot unmount %s", dir);
  return 1;
}

/* ---- the hot set */

#define HOT_NAME "erofs.hot"
/* resident runs closer than this are read as one range */
#define HOT_GAP_PAGES 16
/* what a prefetch asks for at most */
#define HOT_MAX_BYTES (256ull << 20)

/* The directory of image (a new fd), or -1. */
static int image_dir(const char *image)
{
  _cleanup_free_ char *dir = xstrdup(image);
  char *slash = strrchr(dir, '/');

  if (!slash || slash == dir)
    return -1;
  *slash = '\0';
  return open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* The store's collector lock, shared and without waiting, for a note in
 * the directory of image (STORE/layers/HEX/layer.erofs): the note's
 * temporary file must not appear in a layer that dsec-layer rm (or gc),
 * holding the lock exclusively, is removing; the removal wins and the
 * note is skipped.  The lock's fd, or -1. */
static int hot_gc_lock(const char *image)
{
  _cleanup_free_ char *locks = xstrdup(image);
  _cleanup_close_ int dfd = -1;
  _cleanup_error_ struct dsec_error *err = NULL;
  char *slash = NULL;
  int fd;

  /* STORE/layers/HEX/layer.erofs: cut three names, the last "layers" */
  for (int i = 0; i < 3; i++) {
    slash = strrchr(locks, '/');
    if (!slash || slash == locks)
      return -1;
    if (i == 2 && strcmp(slash + 1, "layers") != 0)
      return -1;
    *slash = '\0';
  }
  strcpy(slash, "/locks");
  dfd = open(locks, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return -1;
  fd = dsec_store_lock_gc_at(dfd, false, true, &err);
  if (fd < 0)
    dsec_debug("no hot set for %s: %s", image, err->msg);
  return fd;
}

/* The hot record beside image, if it is one for a file of size bytes. */
static json_t *hot_read(int dfd, uint64_t size)
{
  _cleanup_free_ char *buf = dsec_read_file_at(dfd, HOT_NAME, 16u << 20,
                                               NULL, NULL);
  json_t *j = buf ? json_loads(buf, 0, NULL) : NULL;

  if (j && (!json_is_integer(json_object_get(j, "size")) ||
            (uint64_t) json_integer_value(json_object_get(j, "size")) != size ||
            !json_is_array(json_object_get(j, "ranges")))) {
    json_decref(j);
    j = NULL;
  }
  return j;
}

void dsec_layer_hot_note(const char *image)
{
  _cleanup_close_ int fd = open(image, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_close_ int dfd = -1;
  _cleanup_close_ int gc = -1;
  _cleanup_free_ unsigned char *vec = NULL;
  _cleanup_json_ json_t *old = NULL;
  _cleanup_json_ json_t *rec = NULL;
  _cleanup_free_ char *text = NULL;
  _cleanup_error_ struct dsec_error *err = NULL;
  const size_t ps = (size_t) sysconf(_SC_PAGESIZE);
  json_t *ranges;
  uint64_t bytes = 0;
  size_t pages, i, start = 0, last = 0;
  bool open_run = false;
  struct stat st;
  void *map;

  /* a layer's image in a store, and nothing else, gets a record beside it */
  if (!dsec_str_has_suffix(image, "/layer.erofs") || fd < 0 ||
      fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
    return;
  pages = ((size_t) st.st_size + ps - 1) / ps;
  map = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    return;
  vec = xmalloc(pages);
  if (mincore(map, (size_t) st.st_size, vec) < 0) {
    munmap(map, (size_t) st.st_size);
    return;
  }
  munmap(map, (size_t) st.st_size);
  ranges = json_array();
  rec = json_pack("{s:I, s:I, s:o}", "size", (json_int_t) st.st_size, "page",
                  (json_int_t) ps, "ranges", ranges);
  for (i = 0; i <= pages; i++) {
    bool in = i < pages && (vec[i] & 1);
    if (in) {
      bytes += ps;
      if (open_run && i - last > HOT_GAP_PAGES) {
        json_array_append_new(ranges, json_pack("[I, I]", (json_int_t) (start * ps),
                                                (json_int_t) ((last + 1 - start) * ps)));
        open_run = false;
      }
      if (!open_run)
        start = i;
      open_run = true;
      last = i;
    } else if (i == pages && open_run)
      json_array_append_new(ranges, json_pack("[I, I]", (json_int_t) (start * ps),
                                              (json_int_t) ((last + 1 - start) * ps)));
  }
  if (bytes == 0)
    return;
  json_object_set_new(rec, "bytes", json_integer((json_int_t) bytes));
  gc = hot_gc_lock(image);
  if (gc < 0)
    return;
  /* (a removal that ended before we locked took the directory with it) */
  dfd = image_dir(image);
  if (dfd < 0)
    return;
  old = hot_read(dfd, (uint64_t) st.st_size);
  if (old && bytes <= (uint64_t) json_integer_value(json_object_get(old, "bytes")) / 4 * 5)
    return;
  text = json_dumps(rec, JSON_COMPACT);
  if (!text || dsec_write_file_replace(dfd, HOT_NAME, text, strlen(text), 0644,
                                       &err) < 0)
    dsec_debug("no hot set for %s: %s", image, err ? err->msg : "out of memory");
}

void dsec_layer_hot_prefetch(const char *image)
{
  _cleanup_close_ int fd = open(image, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_close_ int dfd = -1;
  _cleanup_json_ json_t *rec = NULL;
  struct stat st;
  pid_t pid;

  if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
    return;
  dfd = image_dir(image);
  if (dfd < 0 || !(rec = hot_read(dfd, (uint64_t) st.st_size)))
    return;
  /* Asking is not free: the kernel allocates the pages and submits the
   * reads in the call, and waits for the disk's queue when it is full
   * (60 ms for 22 MiB here).  A grandchild of ours asks, with nothing of
   * ours open (a caller reading our stdout to its end must not wait for
   * it), while the create goes on. */
  pid = fork();
  if (pid < 0)
    return;
  if (pid == 0) {
    uint64_t asked = 0;
    size_t i;
    json_t *r;
    int null;
    if (fork() != 0)
      _exit(0);
    prctl(PR_SET_NAME, "dsec-prefetch", 0, 0, 0);
    null = open("/dev/null", O_RDWR);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
        dup2(null, 2) < 0 || dup2(fd, 3) < 0)
      _exit(1);
    syscall(SYS_close_range, 4U, ~0U, 0U);
    json_array_foreach(json_object_get(rec, "ranges"), i, r)
    {
      json_int_t off = json_integer_value(json_array_get(r, 0));
      json_int_t len = json_integer_value(json_array_get(r, 1));
      if (off < 0 || len <= 0 || off >= st.st_size)
        continue;
      if (len > st.st_size - off)
        len = st.st_size - off;
      if (asked + (uint64_t) len > HOT_MAX_BYTES)
        break;
      asked += (uint64_t) len;
      (void) posix_fadvise(3, off, len, POSIX_FADV_WILLNEED);
    }
    _exit(0);
  }
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
    ;
  dsec_debug("prefetching %s (%" JSON_INTEGER_FORMAT " bytes noted)", image,
             json_integer_value(json_object_get(rec, "bytes")));
}
