#include <config.h>

#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crash.h"

int dsec_write_all(int fd, const void *buf, size_t len,
                   struct dsec_error **err)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return dsec_fail(err, errno, "write failed");
    }
    p += n;
    len -= (size_t) n;
  }
  return 0;
}

char *dsec_read_fd(int fd, size_t max, size_t *len, struct dsec_error **err)
{
  size_t cap = 8192, n = 0;
  char *buf = xmalloc(cap + 1);

  for (;;) {
    ssize_t r;
    if (n == cap) {
      if (cap > max) {
        free(buf);
        dsec_bad_input(err, "input larger than %zu bytes", max);
        return NULL;
      }
      cap *= 2;
      buf = xrealloc(buf, cap + 1);
    }
    r = read(fd, buf + n, cap - n);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      free(buf);
      dsec_fail(err, errno, "read failed");
      return NULL;
    }
    if (r == 0)
      break;
    n += (size_t) r;
    if (n > max) {
      free(buf);
      dsec_bad_input(err, "input larger than %zu bytes", max);
      return NULL;
    }
  }
  buf[n] = '\0';
  if (len)
    *len = n;
  return buf;
}

char *dsec_read_file_at(int dirfd, const char *path, size_t max, size_t *len,
                        struct dsec_error **err)
{
  _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
  char *buf;

  if (fd < 0) {
    dsec_error_set(err, errno == ENOENT ? DSEC_EXIT_INPUT : DSEC_EXIT_FAILURE,
                   errno, "cannot open %s", path);
    return NULL;
  }
  buf = dsec_read_fd(fd, max, len, err);
  if (!buf)
    dsec_error_wrap(err, "%s", path);
  return buf;
}

int dsec_open_tmp_at(int dirfd, const char *name, mode_t mode, char **tmpname,
                     struct dsec_error **err)
{
  for (int tries = 0; tries < 100; tries++) {
    uint64_t r;
    char *t;
    int fd;

    if (getrandom(&r, sizeof r, 0) != sizeof r)
      r = ((uint64_t) getpid() << 32) ^ (uint64_t) tries ^ (uint64_t) &r;
    t = xasprintf("%s.tmp-%016llx", name, (unsigned long long) r);
    fd = openat(dirfd, t, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0) {
      *tmpname = t;
      return fd;
    }
    free(t);
    if (errno != EEXIST)
      return dsec_fail(err, errno, "cannot create a temporary file for %s",
                       name);
  }
  return dsec_fail(err, EEXIST, "cannot create a temporary file for %s", name);
}

int dsec_fsync_dir(int dirfd, struct dsec_error **err)
{
  /* O_PATH descriptors cannot be fsync'd: reopen when needed. */
  int ret = fsync(dirfd);
  if (ret < 0 && errno == EBADF) {
    _cleanup_close_ int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY |
                                                   O_CLOEXEC);
    if (fd < 0)
      return dsec_fail(err, errno, "cannot open directory to sync it");
    ret = fsync(fd);
  }
  if (ret < 0 && errno != EINVAL && errno != EROFS)
    return dsec_fail(err, errno, "cannot sync directory");
  return 0;
}

int dsec_commit_tmp_at(int dirfd, int fd, const char *tmpname,
                       const char *name, struct dsec_error **err)
{
  dsec_crash_point(name);
  if (fsync(fd) < 0) {
    int e = errno;
    unlinkat(dirfd, tmpname, 0);
    return dsec_fail(err, e, "cannot sync %s", name);
  }
  dsec_crash_point("synced");
  if (renameat(dirfd, tmpname, dirfd, name) < 0) {
    int e = errno;
    unlinkat(dirfd, tmpname, 0);
    return dsec_fail(err, e, "cannot rename %s into place", name);
  }
  dsec_crash_point("renamed");
  return dsec_fsync_dir(dirfd, err);
}

int dsec_write_file_atomic(int dirfd, const char *name, const void *buf,
                           size_t len, mode_t mode, struct dsec_error **err)
{
  _cleanup_free_ char *tmp = NULL;
  _cleanup_close_ int fd = dsec_open_tmp_at(dirfd, name, mode, &tmp, err);
  int ret;

  if (fd < 0)
    return fd;
  ret = dsec_write_all(fd, buf, len, err);
  if (ret < 0) {
    unlinkat(dirfd, tmp, 0);
    return dsec_error_wrap(err, "%s", name);
  }
  return dsec_commit_tmp_at(dirfd, fd, tmp, name, err);
}

int dsec_write_file_replace(int dirfd, const char *name, const void *buf,
                            size_t len, mode_t mode, struct dsec_error **err)
{
  _cleanup_free_ char *tmp = NULL;
  _cleanup_close_ int fd = dsec_open_tmp_at(dirfd, name, mode, &tmp, err);
  int ret;

  if (fd < 0)
    return fd;
  ret = dsec_write_all(fd, buf, len, err);
  if (ret == 0)
    dsec_crash_point(name);
  if (ret < 0 || renameat(dirfd, tmp, dirfd, name) < 0) {
    int e = errno;
    unlinkat(dirfd, tmp, 0);
    if (err && *err)
      return dsec_error_wrap(err, "%s", name);
    return dsec_fail(err, e, "cannot rename %s into place", name);
  }
  dsec_crash_point("renamed");
  return 0;
}

int dsec_mkdir_p(int dirfd, const char *path, mode_t mode,
                 struct dsec_error **err)
{
  _cleanup_free_ char *p = NULL;
  struct stat st;
  char *s;

  /* mostly there already: one lookup, no parent locked (a mkdir that
   * fails with EEXIST still locks the parent directory, which creators
   * running side by side all write to) */
  if (fstatat(dirfd, path, &st, 0) == 0 && S_ISDIR(st.st_mode))
    return 0;
  s = p = xstrdup(path);
  if (*s == '/')
    s++;
  for (;;) {
    char *slash = strchr(s, '/');
    if (slash)
      *slash = '\0';
    if (*s && mkdirat(dirfd, p, mode) < 0) {
      if (errno != EEXIST)
        return dsec_fail(err, errno, "cannot create directory %s", p);
      if (fstatat(dirfd, p, &st, 0) < 0 || !S_ISDIR(st.st_mode))
        return dsec_fail(err, ENOTDIR, "cannot create directory %s", p);
    }
    if (!slash)
      break;
    *slash = '/';
    s = slash + 1;
  }
  return 0;
}

int dsec_open_dir_at(int dirfd, const char *path, bool create,
                     struct dsec_error **err)
{
  int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    if (dsec_mkdir_p(dirfd, path, 0755, err) < 0)
      return -1;
    fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0)
    return dsec_fail(err, errno, "cannot open directory %s", path);
  return fd;
}

/* How deep rm_rf_children descends: a directory further down is moved up
 * to the top of the removal (renamed into it) and removed from there in
 * another pass, so that a tree of any depth (a sandbox can make one
 * thousands deep) goes with a bounded number of open descriptors. */
#define RM_DEPTH_MAX 64

/* Moves directory name of fd into top under a name of its own: true when
 * it did (it is then left for the next pass). */
static bool rm_move_up(int fd, const char *name, int top)
{
  static unsigned long long n;
  char to[64];
  unsigned long long r;

  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
    r = (unsigned long long) getpid() << 32;
  snprintf(to, sizeof to, ".dsec-rm-%016llx-%llu", r, ++n);
  if (syscall(SYS_renameat2, fd, name, top, to, RENAME_NOREPLACE) == 0)
    return true;
  /* a directory moves to a new parent only where its ".." can be
   * written: a read-only one from an archive, made ours first (root
   * ignores the mode, anyone else does not) */
  return errno == EACCES && fchmodat(fd, name, 0700, 0) == 0 &&
         syscall(SYS_renameat2, fd, name, top, to, RENAME_NOREPLACE) == 0;
}

/* Removes what is in fd (which it closes), depth levels below top;
 * *moved is set when a directory was moved up to top. */
static int rm_rf_level(int fd, dev_t dev, int top, unsigned depth,
                       bool *moved, struct dsec_error **err)
{
  DIR *d = fdopendir(fd);
  struct dirent *de;
  int ret = 0;

  if (!d) {
    close(fd);
    return dsec_fail(err, errno, "cannot read directory");
  }
  while ((de = readdir(d))) {
    struct stat st;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT)
        continue;
      ret = dsec_fail(err, errno, "cannot stat %s", de->d_name);
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      int cfd;
      if (st.st_dev != dev) {
        ret = dsec_fail(err, EBUSY, "%s is a mount point", de->d_name);
        break;
      }
      if (depth >= RM_DEPTH_MAX && rm_move_up(dirfd(d), de->d_name, top)) {
        *moved = true;
        continue;
      }
      cfd = openat(dirfd(d), de->d_name,
                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd < 0 && errno == EACCES) {
        /* a read-only directory from an archive: make it ours first */
        if (fchmodat(dirfd(d), de->d_name, 0700, 0) == 0)
          cfd = openat(dirfd(d), de->d_name,
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      }
      if (cfd < 0) {
        ret = dsec_fail(err, errno, "cannot open %s", de->d_name);
        break;
      }
      /* entries of a read-only directory cannot be unlinked: make it ours
       * (root ignores the mode, anyone else does not) */
      if ((st.st_mode & 0700) != 0700 && fchmod(cfd, 0700) < 0 &&
          errno != EPERM) {
        ret = dsec_fail(err, errno, "cannot make %s writable", de->d_name);
        close(cfd);
        break;
      }
      ret = rm_rf_level(cfd, dev, top, depth + 1, moved, err);
      if (ret < 0) {
        dsec_error_wrap(err, "%s", de->d_name);
        break;
      }
      if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 &&
          errno != ENOENT) {
        ret = dsec_fail(err, errno, "cannot remove %s", de->d_name);
        break;
      }
    } else if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
      ret = dsec_fail(err, errno, "cannot remove %s", de->d_name);
      break;
    }
  }
  closedir(d);
  return ret;
}

/* Removes what is in fd (which it closes), in passes while directories
 * too deep were moved up to it. */
static int rm_rf_children(int fd, dev_t dev, struct dsec_error **err)
{
  bool moved;
  int ret;

  do {
    /* each pass reads it again from its start */
    int pass = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (pass < 0 || lseek(pass, 0, SEEK_SET) < 0) {
      ret = dsec_fail(err, errno, "cannot read directory");
      if (pass >= 0)
        close(pass);
      break;
    }
    moved = false;
    ret = rm_rf_level(pass, dev, fd, 1, &moved, err);
  } while (ret == 0 && moved);
  close(fd);
  return ret;
}

DIR *dsec_opendir_at(int dirfd, const char *name)
{
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d;
  if (fd < 0)
    return NULL;
  d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return d;
}

int dsec_rm_rf_at(int dirfd, const char *name, struct dsec_error **err)
{
  struct stat st;
  int fd, ret;

  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno == ENOENT)
      return 0;
    return dsec_fail(err, errno, "cannot stat %s", name);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
      return dsec_fail(err, errno, "cannot remove %s", name);
    return 0;
  }
  fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return dsec_fail(err, errno, "cannot open %s", name);
  if ((st.st_mode & 0700) != 0700)
    (void) !fchmod(fd, 0700);
  ret = rm_rf_children(fd, st.st_dev, err);
  if (ret < 0)
    return dsec_error_wrap(err, "cannot remove %s", name);
  if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove %s", name);
  return 0;
}

int dsec_rm_rf_children_at(int dirfd, const char *name,
                           struct dsec_error **err)
{
  struct stat st;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

  if (fd < 0)
    return errno == ENOENT ? 0 : dsec_fail(err, errno, "cannot open %s", name);
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    return dsec_fail(err, e, "cannot stat %s", name);
  }
  if (rm_rf_children(fd, st.st_dev, err) < 0)
    return dsec_error_wrap(err, "cannot empty %s", name);
  return 0;
}

int dsec_tmpfs_new(const char *size, const char *nr_inodes, const char *mode)
{
  const char *const opts[][2] = { { "size", size },
                                  { "nr_inodes", nr_inodes },
                                  { "mode", mode } };
  int fs = (int) syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
  int m = -1, e;

  if (fs < 0)
    return -1;
  for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
    if (opts[i][1] && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING,
                              opts[i][0], opts[i][1], 0) < 0)
      goto out;
  if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
    m = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                      MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
out:
  e = errno;
  close(fs);
  errno = e;
  return m;
}

static int64_t du_walk(int fd, dev_t dev)
{
  DIR *d = fdopendir(fd);
  struct dirent *de;
  int64_t total = 0;

  if (!d) {
    close(fd);
    return 0;
  }
  while ((de = readdir(d))) {
    struct stat st;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    if (S_ISDIR(st.st_mode) && st.st_dev == dev) {
      int cfd = openat(dirfd(d), de->d_name,
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd >= 0)
        total += du_walk(cfd, dev);
    }
    total += (int64_t) st.st_blocks * 512;
  }
  closedir(d);
  return total;
}

int64_t dsec_disk_usage_at(int dirfd, const char *name)
{
  struct stat st;
  int fd;

  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return 0;
  if (!S_ISDIR(st.st_mode))
    return (int64_t) st.st_blocks * 512;
  fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return 0;
  return (int64_t) st.st_blocks * 512 + du_walk(fd, st.st_dev);
}

int dsec_copy_fd(int in, int out, uint64_t *copied, struct dsec_error **err)
{
  char buf[65536];
  uint64_t total = 0;

  for (;;) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return dsec_fail(err, errno, "read failed");
    }
    if (n == 0)
      break;
    if (dsec_write_all(out, buf, (size_t) n, err) < 0)
      return -1;
    total += (uint64_t) n;
  }
  if (copied)
    *copied = total;
  return 0;
}

char *dsec_abspath(const char *path, struct dsec_error **err)
{
  char *r = realpath(path, NULL);
  if (!r)
    dsec_error_set(err, errno == ENOENT ? DSEC_EXIT_INPUT : DSEC_EXIT_FAILURE,
                   errno, "%s", path);
  return r;
}

/* A loop device on backing_fd, detached automatically when its last user
 * goes (the supervisor's mount namespace dies with it).  Returns the
 * device path (new) and, in *loop_fd, a descriptor that must stay open
 * until the device is mounted (or autoclear detaches it at once). */
char *dsec_loop_attach(int backing_fd, bool read_only, int *loop_fd,
                       struct dsec_error **err)
{
  const uint32_t ro = read_only ? LO_FLAGS_READ_ONLY : 0;
  _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) {
    dsec_fail(err, errno, "cannot open /dev/loop-control");
    return NULL;
  }
  for (int tries = 0; tries < 32; tries++) {
    struct loop_config cfg = { .fd = (uint32_t) backing_fd };
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    char *path;
    int fd;
    if (n < 0) {
      dsec_fail(err, errno, "no free loop device");
      return NULL;
    }
    path = xasprintf("/dev/loop%d", n);
    fd = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd < 0) {
      free(path);
      continue;
    }
    /* direct I/O with 4 KiB blocks keeps one copy of the data in the page
     * cache (the file system's, not the image file's too) */
    cfg.info.lo_flags = ro | LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
    cfg.block_size = 4096;
    if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
      *loop_fd = fd;
      return path;
    }
    if (errno == EINVAL) {
      cfg.info.lo_flags = ro | LO_FLAGS_AUTOCLEAR;
      cfg.block_size = 0;
      if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
        *loop_fd = fd;
        return path;
      }
    }
    close(fd);
    free(path);
    if (errno != EBUSY) {
      dsec_fail(err, errno, "cannot set up a loop device");
      return NULL;
    }
  }
  dsec_fail(err, EBUSY, "cannot find a free loop device");
  return NULL;
}

static int write_text(const char *path, const char *text)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t n;
  if (fd < 0)
    return -1;
  n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t) strlen(text) ? 0 : -1;
}

int dsec_userns_with_maps(const char *uid_map, const char *gid_map,
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
  if (write_text(path, uid_map) == 0) {
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int) pid);
    if (write_text(path, gid_map) == 0) {
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

bool dsec_path_in_use(const char *mountinfo, const char *path)
{
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;

  if (mountinfo && strstr(mountinfo, path))
    return true;
  d = opendir("/sys/block");
  while (d && (de = readdir(d))) {
    _cleanup_free_ char *f = NULL;
    _cleanup_free_ char *b = NULL;
    if (strncmp(de->d_name, "loop", 4) != 0)
      continue;
    f = xasprintf("/sys/block/%s/loop/backing_file", de->d_name);
    b = dsec_read_file_at(AT_FDCWD, f, 8192, NULL, NULL);
    if (b && strstr(b, path))
      return true;
  }
  return false;
}
