/* Unit tests for libcommon/fsutil.c: atomic writes, bounded reads,
 * mkdir -p, rm -rf that never follows symlinks, copying, temp files, and
 * the error paths of each. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fsutil.h"
#include "tap.h"

#define NOBODY 65534

static const char *tmp;
static int tmpfd = -1;

/* ---- helpers that do not use the code under test ---- */

static void put(int dfd, const char *name, const void *buf, size_t len)
{
  int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, buf, len) != (ssize_t) len)
    bail_out("cannot write %s", name);
  close(fd);
}

static void put_str(int dfd, const char *name, const char *s)
{
  put(dfd, name, s, strlen(s));
}

static void mkdir_or_bail(int dfd, const char *name, mode_t mode)
{
  if (mkdirat(dfd, name, mode) < 0 || fchmodat(dfd, name, mode, 0) < 0)
    bail_out("cannot make directory %s", name);
}

static void symlink_or_bail(const char *target, int dfd, const char *name)
{
  if (symlinkat(target, dfd, name) < 0)
    bail_out("cannot make symlink %s", name);
}

/* Reads at most 255 bytes of a file into a static buffer ("" if none). */
static const char *slurp_fd(int fd)
{
  static char buf[256];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  return buf;
}

static const char *slurp(int dfd, const char *name)
{
  int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
  const char *s;
  if (fd < 0)
    return "(missing)";
  s = slurp_fd(fd);
  close(fd);
  return s;
}

static bool exists(int dfd, const char *name)
{
  struct stat st;
  return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static bool is_dir(int dfd, const char *name)
{
  struct stat st;
  return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(st.st_mode);
}

static mode_t mode_of(int dfd, const char *name)
{
  struct stat st;
  return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0
           ? st.st_mode & 07777
           : (mode_t) -1;
}

/* Entries of dfd whose name contains ".tmp-". */
static int count_tmp_files(int dfd)
{
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  struct dirent *de;
  int n = 0;

  if (!d)
    return -1;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".tmp-"))
      n++;
  closedir(d);
  return n;
}

static int subdir(const char *name)
{
  int fd;
  mkdir_or_bail(tmpfd, name, 0755);
  fd = openat(tmpfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    bail_out("cannot open %s", name);
  return fd;
}

/* Checks that a call failed with status and errnum (errnum -1: any), then
 * frees and clears the error. */
static void check_error(struct dsec_error **err, int status, int errnum,
                        const char *what)
{
  struct dsec_error *e = *err;
  ok(e && e->status == status && (errnum < 0 || e->errnum == errnum),
     "%s: error with status %d%s%s", what, status,
     errnum > 0 ? " and " : "", errnum > 0 ? strerror(errnum) : "");
  if (e)
    diag("  status %d, errno %d, %s", e->status, e->errnum, e->msg);
  dsec_error_free(e);
  *err = NULL;
}

/* ---- dsec_write_file_atomic ---- */

static void test_write_atomic(void)
{
  struct dsec_error *err = NULL;
  int dfd = subdir("atomic");
  mode_t old_umask = umask(0);
  struct stat before, after;
  int oldfd;

  is_int(dsec_write_file_atomic(dfd, "cfg", "hello\n", 6, 0640, &err), 0,
         "write_file_atomic creates a file");
  is_str(slurp(dfd, "cfg"), "hello\n", "... with the content");
  is_int(mode_of(dfd, "cfg"), 0640, "... with the mode");
  is_int(count_tmp_files(dfd), 0, "... and no temp file left");

  oldfd = openat(dfd, "cfg", O_RDONLY | O_CLOEXEC);
  fstat(oldfd, &before);
  is_int(dsec_write_file_atomic(dfd, "cfg", "new content", 11, 0600, &err), 0,
         "write_file_atomic replaces an existing file");
  is_str(slurp(dfd, "cfg"), "new content", "... the name has the new content");
  is_str(slurp_fd(oldfd), "hello\n",
         "... an open reader still sees the old content, unmodified");
  fstatat(dfd, "cfg", &after, 0);
  ok(before.st_ino != after.st_ino, "... the file was renamed over, not "
                                    "rewritten in place");
  is_int(mode_of(dfd, "cfg"), 0600, "... with the new mode");
  is_int(count_tmp_files(dfd), 0, "... and no temp file left");
  close(oldfd);

  is_int(dsec_write_file_atomic(dfd, "empty", "", 0, 0644, &err), 0,
         "write_file_atomic of zero bytes");
  is_str(slurp(dfd, "empty"), "", "... gives an empty file");
  ok(err == NULL, "no error was set by the successful writes");

  umask(old_umask);
  close(dfd);
}

static void test_write_atomic_errors(void)
{
  struct dsec_error *err = NULL;
  int dfd = subdir("atomic-err");
  int gonefd;

  /* Fails for root too: the directory no longer exists. */
  mkdir_or_bail(dfd, "gone", 0755);
  gonefd = openat(dfd, "gone", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  unlinkat(dfd, "gone", AT_REMOVEDIR);
  is_int(dsec_write_file_atomic(gonefd, "f", "x", 1, 0644, &err), -1,
         "write_file_atomic into a removed directory fails");
  check_error(&err, DSEC_EXIT_FAILURE, ENOENT, "removed directory");
  close(gonefd);

  /* Fails at the rename: a file cannot replace a non-empty directory. */
  mkdir_or_bail(dfd, "isdir", 0755);
  put_str(dfd, "isdir/keep", "keep");
  is_int(dsec_write_file_atomic(dfd, "isdir", "x", 1, 0644, &err), -1,
         "write_file_atomic over a non-empty directory fails");
  check_error(&err, DSEC_EXIT_FAILURE, EISDIR, "rename over a directory");
  is_int(count_tmp_files(dfd), 0, "... and removes its temp file");
  is_str(slurp(dfd, "isdir/keep"), "keep", "... and leaves the directory");

  if (geteuid() == 0) {
    skip(2, "root ignores directory modes");
  } else {
    int rofd;
    mkdir_or_bail(dfd, "ro", 0555);
    rofd = openat(dfd, "ro", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    is_int(dsec_write_file_atomic(rofd, "f", "x", 1, 0644, &err), -1,
           "write_file_atomic into a read-only directory fails");
    check_error(&err, DSEC_EXIT_FAILURE, EACCES, "read-only directory");
    close(rofd);
  }
  close(dfd);
}

/* ---- dsec_read_file_at / dsec_read_fd ---- */

static void check_read(int dfd, const char *name, const char *content,
                       size_t len, size_t max)
{
  struct dsec_error *err = NULL;
  size_t got = 0;
  char *buf = dsec_read_file_at(dfd, name, max, &got, &err);

  ok(buf && got == len && memcmp(buf, content, len) == 0 && buf[len] == '\0',
     "read_file_at of %zu bytes with max %zu gives them, NUL-terminated", len,
     max);
  free(buf);
  dsec_error_free(err);
}

static void check_read_too_big(int dfd, const char *name, size_t len,
                               size_t max)
{
  struct dsec_error *err = NULL;
  size_t got = 77;
  char *buf = dsec_read_file_at(dfd, name, max, &got, &err);
  char what[64];

  ok(buf == NULL, "read_file_at of %zu bytes with max %zu fails", len, max);
  ok(err && strstr(err->msg, name), "... the message names the file");
  is_int(got, 77, "... and *len is not set");
  snprintf(what, sizeof what, "%zu bytes over max %zu", len, max);
  check_error(&err, DSEC_EXIT_INPUT, -1, what);
  free(buf);
}

static void test_read_file(void)
{
  struct dsec_error *err = NULL;
  int dfd = subdir("read");
  size_t big = 100000;
  char *data = xmalloc(big);

  for (size_t i = 0; i < big; i++)
    data[i] = (char) ('a' + i % 23);
  put(dfd, "big", data, big);
  put(dfd, "page", data, 8192);
  put(dfd, "abc", "abc", 3);
  put(dfd, "empty", "", 0);

  check_read(dfd, "abc", "abc", 3, 3);
  check_read_too_big(dfd, "abc", 3, 2);
  check_read(dfd, "empty", "", 0, 0);
  check_read(dfd, "page", data, 8192, 8192);
  check_read_too_big(dfd, "page", 8192, 8191);
  check_read(dfd, "big", data, big, big);
  check_read(dfd, "big", data, big, 1 << 20);
  check_read_too_big(dfd, "big", big, big - 1);

  ok(dsec_read_file_at(dfd, "missing", 10, NULL, &err) == NULL,
     "read_file_at of a missing file fails");
  check_error(&err, DSEC_EXIT_INPUT, ENOENT, "missing file");

  ok(dsec_read_file_at(tmpfd, "read", 10, NULL, &err) == NULL,
     "read_file_at of a directory fails");
  check_error(&err, DSEC_EXIT_FAILURE, EISDIR, "directory");
  free(data);
  close(dfd);
}

/* ---- dsec_mkdir_p ---- */

static void test_mkdir_p(void)
{
  struct dsec_error *err = NULL;
  int dfd = subdir("mkdir");
  mode_t old_umask = umask(0);
  char *abs;

  is_int(dsec_mkdir_p(dfd, "a/b/c", 0750, &err), 0, "mkdir_p a/b/c");
  ok(is_dir(dfd, "a") && is_dir(dfd, "a/b") && is_dir(dfd, "a/b/c"),
     "... makes every level");
  is_int(mode_of(dfd, "a/b"), 0750, "... with the mode");
  is_int(dsec_mkdir_p(dfd, "a/b/c", 0750, &err), 0,
         "mkdir_p of existing directories is fine");
  is_int(dsec_mkdir_p(dfd, "x//y/", 0755, &err), 0,
         "mkdir_p with doubled and trailing slashes");
  ok(is_dir(dfd, "x/y"), "... makes x/y");

  abs = xasprintf("%s/mkdir/abs/p/q", tmp);
  is_int(dsec_mkdir_p(AT_FDCWD, abs, 0755, &err), 0,
         "mkdir_p of an absolute path");
  ok(is_dir(dfd, "abs/p/q"), "... makes it");
  free(abs);
  ok(err == NULL, "no error was set by the successful calls");

  put_str(dfd, "file", "x");
  is_int(dsec_mkdir_p(dfd, "file/sub", 0755, &err), -1,
         "mkdir_p through a regular file fails");
  check_error(&err, DSEC_EXIT_FAILURE, ENOTDIR, "through a file");
  /* mkdir -p fails on an existing non-directory; callers that go on to
   * open the path would otherwise get a confusing error later. */
  is_int(dsec_mkdir_p(dfd, "file", 0755, &err), -1,
         "mkdir_p of an existing regular file fails, like mkdir -p");
  dsec_error_free(err);
  umask(old_umask);
  close(dfd);
}

/* ---- dsec_rm_rf_at ---- */

/* dfd/name: files, nested and empty directories, a fifo, symlinks (to an
 * outside directory, an outside file, nowhere) and 0555 directories that
 * are not empty.  The outside directory is dfd/outside. */
static void build_tree(int dfd, const char *name)
{
  int t;

  mkdir_or_bail(dfd, "outside", 0755);
  put_str(dfd, "outside/keep", "keep");
  mkdir_or_bail(dfd, name, 0755);
  t = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (t < 0)
    bail_out("cannot open %s", name);
  put_str(t, "f1", "1");
  mkdir_or_bail(t, "d1", 0755);
  put_str(t, "d1/f2", "2");
  mkdir_or_bail(t, "d1/d2", 0700);
  put_str(t, "d1/d2/f3", "3");
  mkdir_or_bail(t, "d1/d2/empty", 0755);
  if (mkfifoat(t, "d1/fifo", 0600) < 0)
    bail_out("cannot make a fifo");
  symlink_or_bail("../../outside", t, "d1/to-outside-dir");
  symlink_or_bail("../../outside/keep", t, "d1/to-outside-file");
  symlink_or_bail("/nonexistent/dangling", t, "dangling");
  mkdir_or_bail(t, "ro", 0755);
  put_str(t, "ro/f4", "4");
  mkdir_or_bail(t, "ro/ro2", 0755);
  put_str(t, "ro/ro2/f5", "5");
  symlink_or_bail("../../../outside", t, "ro/ro2/link");
  mkdir_or_bail(t, "ro/ro2/ro3", 0555);
  if (fchmodat(t, "ro/ro2", 0555, 0) < 0 || fchmodat(t, "ro", 0555, 0) < 0)
    bail_out("cannot chmod");
  close(t);
}

/* dsec_rm_rf_at(dfd, name) is expected to succeed; each call gets its own
 * error so that one failure does not mask the next. */
static void check_rm_rf(int dfd, const char *name, const char *what)
{
  struct dsec_error *err = NULL;

  is_int(dsec_rm_rf_at(dfd, name, &err), 0, "rm_rf of %s", what);
  if (err)
    diag("  %s", err->msg);
  dsec_error_free(err);
}

static void test_rm_rf(void)
{
  struct dsec_error *err = NULL;
  int dfd = subdir("rm");

  build_tree(dfd, "tree");
  check_rm_rf(dfd, "tree", "a nested tree with non-empty 0555 directories");
  ok(!exists(dfd, "tree"), "... removes it all");
  is_str(slurp(dfd, "outside/keep"), "keep",
         "... and does not follow symlinks out of the tree");

  check_rm_rf(dfd, "never-made", "a missing name is ok");
  check_rm_rf(dfd, "missing/deeper", "a path under a missing directory is ok");

  symlink_or_bail("outside", dfd, "link");
  check_rm_rf(dfd, "link", "a symlink to a directory");
  ok(!exists(dfd, "link") && is_dir(dfd, "outside") &&
     exists(dfd, "outside/keep"),
     "... removes the link, not its target");

  put_str(dfd, "plain", "x");
  check_rm_rf(dfd, "plain", "a regular file");
  ok(!exists(dfd, "plain"), "... removes it");

  put_str(dfd, "afile", "x");
  is_int(dsec_rm_rf_at(dfd, "afile/x", &err), -1,
         "rm_rf of a path through a regular file fails");
  check_error(&err, DSEC_EXIT_FAILURE, ENOTDIR, "through a file");
  close(dfd);
}

static void test_rm_rf_children(void)
{
  struct dsec_error *err = NULL;
  int dfd = subdir("rmc");

  build_tree(dfd, "tree");
  is_int(dsec_rm_rf_children_at(dfd, "tree", &err), 0,
         "rm_rf_children of a nested tree");
  ok(is_dir(dfd, "tree") && unlinkat(dfd, "tree", AT_REMOVEDIR) == 0,
     "... leaves the directory, empty");
  is_str(slurp(dfd, "outside/keep"), "keep",
         "... and does not follow symlinks out of it");
  is_int(dsec_rm_rf_children_at(dfd, "never-made", &err), 0,
         "rm_rf_children of a missing name is ok");
  symlink_or_bail("outside", dfd, "link");
  is_int(dsec_rm_rf_children_at(dfd, "link", &err), -1,
         "rm_rf_children of a symlink to a directory fails");
  check_error(&err, DSEC_EXIT_FAILURE, ENOTDIR, "a symlink");
  ok(exists(dfd, "outside/keep"), "... and leaves its target alone");
  close(dfd);
}

/* A chain of n directories d/d/d/... under dfd/name, with a file at the
 * bottom, made through descriptors (no path is that long). */
static void build_deep(int dfd, const char *name, int n)
{
  int fd;

  if (mkdirat(dfd, name, 0755) < 0 ||
      (fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    bail_out("cannot make %s", name);
  for (int i = 0; i < n; i++) {
    int next;
    if (mkdirat(fd, "d", 0755) < 0 ||
        (next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
      bail_out("cannot make level %d of %s", i, name);
    /* some read-only, as from an archive (once their child is made) */
    if (i % 7 == 6 && fchmod(fd, 0555) < 0)
      bail_out("cannot chmod level %d of %s", i, name);
    close(fd);
    fd = next;
  }
  put_str(fd, "bottom", "x");
  close(fd);
}

static void test_rm_rf_deep(void)
{
  struct dsec_error *err = NULL;
  struct rlimit lim, low;
  int dfd = subdir("deep");

  /* deeper than the descriptors it may open (the soft limit, which goes
   * back up after) */
  getrlimit(RLIMIT_NOFILE, &lim);
  low = lim;
  low.rlim_cur = 256;
  build_deep(dfd, "tree", 3000);
  build_deep(dfd, "kept", 300);
  setrlimit(RLIMIT_NOFILE, &low);
  is_int(dsec_rm_rf_at(dfd, "tree", &err), 0,
         "rm_rf of a tree 3,000 directories deep, with 256 descriptors");
  ok(!exists(dfd, "tree"), "... removes it all");
  is_int(dsec_rm_rf_children_at(dfd, "kept", &err), 0,
         "rm_rf_children of one 300 deep");
  ok(is_dir(dfd, "kept") && unlinkat(dfd, "kept", AT_REMOVEDIR) == 0,
     "... leaves the directory, empty");
  setrlimit(RLIMIT_NOFILE, &lim);
  dsec_error_free(err);
  close(dfd);
}

/* ---- dsec_tmpfs_new ---- */

static void test_tmpfs_new(void)
{
  struct statvfs sv;
  struct statfs sf;
  struct stat st;
  int m;

  if (geteuid() != 0) {
    skip(5, "mounting a tmpfs needs root");
    return;
  }
  m = dsec_tmpfs_new("1m", "8", "0710");
  ok(m >= 0, "tmpfs_new with a size, an inode count and a mode");
  if (m < 0) {
    skip(4, "no tmpfs: %s", strerror(errno));
    return;
  }
  ok(fstatfs(m, &sf) == 0 && sf.f_type == TMPFS_MAGIC, "... is a tmpfs");
  ok(fstatvfs(m, &sv) == 0 && sv.f_blocks * sv.f_frsize == 1 << 20 &&
       sv.f_files == 8,
     "... of that size and inode count");
  ok((sv.f_flag & (ST_NOSUID | ST_NODEV | ST_NOEXEC)) ==
       (ST_NOSUID | ST_NODEV | ST_NOEXEC),
     "... nosuid, nodev, noexec");
  ok(fstat(m, &st) == 0 && (st.st_mode & 07777) == 0710, "... with that mode");
  close(m);
  m = dsec_tmpfs_new(NULL, "no-number", NULL);
  is_int(m, -1, "tmpfs_new with an option the kernel refuses fails");
  is_int(errno, EINVAL, "... with its errno");
}

/* In a child that is not root (root ignores modes, so the read-only
 * directories are only a test for someone else): build a tree and rm -rf
 * it.  Child exit: 0 ok, 1 rm_rf failed, 2 tree left, 3 outside harmed,
 * 10 setup failed.  rm_rf's message comes back on msgfd. */
static _Noreturn void rm_rf_unprivileged_child(int dfd, int msgfd)
{
  struct dsec_error *err = NULL;
  int ret;

  if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 ||
                         setuid(NOBODY) < 0 || geteuid() == 0))
    _exit(10);
  build_tree(dfd, "tree");
  ret = dsec_rm_rf_at(dfd, "tree", &err);
  if (ret < 0) {
    if (write(msgfd, err->msg, strlen(err->msg)) < 0)
      _exit(1);
    _exit(1);
  }
  if (exists(dfd, "tree"))
    _exit(2);
  if (strcmp(slurp(dfd, "outside/keep"), "keep") != 0)
    _exit(3);
  _exit(0);
}

static void test_rm_rf_unprivileged(void)
{
  int dfd = subdir("rm-unpriv");
  int pfd[2], status = -1;
  char msg[512];
  ssize_t n;
  pid_t pid;

  /* the child works from dfd, so only this directory must be its own */
  if (geteuid() == 0 && fchown(dfd, NOBODY, NOBODY) < 0)
    bail_out("cannot hand a directory to nobody");
  if (pipe2(pfd, O_CLOEXEC) < 0)
    bail_out("pipe");
  fflush(stdout);
  pid = fork();
  if (pid < 0)
    bail_out("fork");
  if (pid == 0) {
    close(pfd[0]);
    rm_rf_unprivileged_child(dfd, pfd[1]);
  }
  close(pfd[1]);
  n = read(pfd[0], msg, sizeof msg - 1);
  msg[n > 0 ? n : 0] = '\0';
  close(pfd[0]);
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 10) {
    skip(1, "cannot switch to uid %d", NOBODY);
  } else {
    is_int(WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status),
           0, "as a non-root user, rm_rf removes a tree with non-empty 0555 "
              "directories (0 ok, 1 rm_rf failed, 2 left, 3 outside harmed)");
    if (*msg)
      diag("  dsec_rm_rf_at: %s", msg);
  }
  close(dfd);
}

/* ---- dsec_copy_fd ---- */

static void test_copy_fd(void)
{
  struct dsec_error *err = NULL;
  int dfd = subdir("copy");
  size_t len = 200003;
  char *data = xmalloc(len), *back;
  uint64_t copied = 0;
  int in, out, ro, pfd[2];
  size_t got = 0;

  for (size_t i = 0; i < len; i++)
    data[i] = (char) (i * 7 + i / 1000);
  put(dfd, "src", data, len);
  in = openat(dfd, "src", O_RDONLY | O_CLOEXEC);
  out = openat(dfd, "dst", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  is_int(dsec_copy_fd(in, out, &copied, &err), 0, "copy_fd of %zu bytes", len);
  is_int(copied, len, "... counts them");
  back = dsec_read_file_at(dfd, "dst", len, &got, &err);
  ok(back && got == len && memcmp(back, data, len) == 0,
     "... and the copy is identical");
  free(back);

  copied = 99;
  is_int(dsec_copy_fd(in, out, &copied, &err), 0, "copy_fd at EOF");
  is_int(copied, 0, "... copies nothing");
  close(in);
  close(out);

  if (pipe2(pfd, O_CLOEXEC) < 0)
    bail_out("pipe");
  if (write(pfd[1], "through a pipe", 14) != 14)
    bail_out("write to pipe");
  close(pfd[1]);
  out = openat(dfd, "from-pipe", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  is_int(dsec_copy_fd(pfd[0], out, NULL, &err), 0,
         "copy_fd from a pipe (copied NULL)");
  is_str(slurp(dfd, "from-pipe"), "through a pipe", "... copies it");
  close(pfd[0]);
  close(out);

  in = openat(dfd, "src", O_RDONLY | O_CLOEXEC);
  ro = openat(dfd, "dst", O_RDONLY | O_CLOEXEC);
  is_int(dsec_copy_fd(in, ro, NULL, &err), -1,
         "copy_fd to a read-only descriptor fails");
  check_error(&err, DSEC_EXIT_FAILURE, EBADF, "read-only output");
  close(in);
  close(ro);
  free(data);
  close(dfd);
}

/* ---- dsec_open_tmp_at / dsec_commit_tmp_at ---- */

#define NTMP 64

static void test_open_tmp(void)
{
  struct dsec_error *err = NULL;
  int dfd = subdir("tmpfiles");
  mode_t old_umask = umask(0);
  char *names[NTMP] = { NULL };
  int fds[NTMP];
  int opened = 0, prefixed = 0, distinct = 1, gonefd;
  char *t = NULL;

  for (int i = 0; i < NTMP; i++) {
    fds[i] = dsec_open_tmp_at(dfd, "state.json", 0600, &names[i], &err);
    if (fds[i] < 0)
      continue;
    opened++;
    if (dsec_str_has_prefix(names[i], "state.json.tmp-"))
      prefixed++;
    for (int j = 0; j < i; j++)
      if (names[j] && strcmp(names[i], names[j]) == 0)
        distinct = 0;
  }
  is_int(opened, NTMP, "open_tmp_at %d times for one name", NTMP);
  is_int(prefixed, NTMP, "... names are \"<name>.tmp-<random>\"");
  ok(distinct, "... and all distinct");
  is_int(count_tmp_files(dfd), NTMP, "... each one a file on disk");
  is_int(mode_of(dfd, names[0] ? names[0] : "?"), 0600, "... with the mode");

  if (write(fds[0], "committed", 9) != 9)
    bail_out("write");
  is_int(dsec_commit_tmp_at(dfd, fds[0], names[0], "state.json", &err), 0,
         "commit_tmp_at");
  is_str(slurp(dfd, "state.json"), "committed", "... puts the content in place");
  ok(!exists(dfd, names[0]), "... and the temp name is gone");
  for (int i = 0; i < NTMP; i++) {
    if (fds[i] >= 0)
      close(fds[i]);
    free(names[i]);
  }

  mkdir_or_bail(dfd, "gone", 0755);
  gonefd = openat(dfd, "gone", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  unlinkat(dfd, "gone", AT_REMOVEDIR);
  is_int(dsec_open_tmp_at(gonefd, "x", 0600, &t, &err), -1,
         "open_tmp_at in a removed directory fails");
  ok(t == NULL, "... and does not set the name");
  check_error(&err, DSEC_EXIT_FAILURE, ENOENT, "removed directory");
  close(gonefd);
  umask(old_umask);
  close(dfd);
}

/* ---- dsec_open_dir_at / dsec_fsync_dir ---- */

static void test_open_dir(void)
{
  struct dsec_error *err = NULL;
  int fd, pathfd;

  fd = dsec_open_dir_at(tmpfd, "opendir/a/b", true, &err);
  ok(fd >= 0 && is_dir(tmpfd, "opendir/a/b"),
     "open_dir_at with create makes and opens the directory");
  if (fd >= 0)
    close(fd);
  is_int(dsec_open_dir_at(tmpfd, "opendir/missing", false, &err), -1,
         "open_dir_at without create of a missing directory fails");
  check_error(&err, DSEC_EXIT_FAILURE, ENOENT, "missing directory");

  pathfd = openat(tmpfd, "opendir", O_PATH | O_DIRECTORY | O_CLOEXEC);
  is_int(dsec_fsync_dir(pathfd, &err), 0, "fsync_dir of an O_PATH descriptor");
  close(pathfd);
  dsec_error_free(err);
}

int main(void)
{
  tmp = tap_tmpdir("test-fsutil");
  tmpfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tmpfd < 0)
    bail_out("cannot open %s", tmp);

  test_write_atomic();
  test_write_atomic_errors();
  test_read_file();
  test_mkdir_p();
  test_rm_rf();
  test_rm_rf_unprivileged();
  test_rm_rf_children();
  test_rm_rf_deep();
  test_tmpfs_new();
  test_copy_fd();
  test_open_tmp();
  test_open_dir();
  close(tmpfd);
  return done_testing();
}
