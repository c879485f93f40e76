/* Unit tests for libcommon/lock.c: flock-based locks seen from another
 * process, and released when their holder dies, even by SIGKILL.  No
 * test waits on a clock: a child probes with a non-blocking lock. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock.h"
#include "tap.h"

static int dirfd_ = -1;

static const char *mode_name(enum dsec_lock_mode m)
{
  return m == DSEC_LOCK_EXCLUSIVE ? "exclusive" : "shared";
}

/* Tries a non-blocking lock in a forked child.  Returns the child's errno
 * (0 when it got the lock), or -1 when the child did not exit normally. */
static int probe_in_child(const char *name, enum dsec_lock_mode mode)
{
  pid_t pid;
  int status;

  fflush(stdout);
  pid = fork();
  if (pid < 0)
    bail_out("fork");
  if (pid == 0) {
    struct dsec_error *err = NULL;
    int fd = dsec_lock_at(dirfd_, name, mode, true, &err);
    if (fd >= 0)
      _exit(0);
    _exit(err && err->errnum > 0 && err->errnum < 100 ? err->errnum : 100);
  }
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

static void check_probe(const char *name, enum dsec_lock_mode mode, int want,
                        const char *held)
{
  int got = probe_in_child(name, mode);
  if (want == 0)
    is_int(got, 0, "with %s held, another process gets %s", held,
           mode_name(mode));
  else
    is_int(got, want, "with %s held, another process's non-blocking %s fails "
                      "with EWOULDBLOCK", held, mode_name(mode));
}

static int lock_or_fail(const char *name, enum dsec_lock_mode mode,
                        bool nonblock, const char *what)
{
  struct dsec_error *err = NULL;
  int fd = dsec_lock_at(dirfd_, name, mode, nonblock, &err);
  ok(fd >= 0, "%s", what);
  if (err)
    diag("  %s", err->msg);
  dsec_error_free(err);
  return fd;
}

static void test_exclusive(void)
{
  int fd = lock_or_fail("ex.lock", DSEC_LOCK_EXCLUSIVE, false,
                        "take an exclusive lock (creating the file)");
  struct stat st;

  ok(fstatat(dirfd_, "ex.lock", &st, 0) == 0 && S_ISREG(st.st_mode),
     "... the lock file exists");
  check_probe("ex.lock", DSEC_LOCK_EXCLUSIVE, EWOULDBLOCK, "exclusive");
  check_probe("ex.lock", DSEC_LOCK_SHARED, EWOULDBLOCK, "exclusive");
  close(fd);
  check_probe("ex.lock", DSEC_LOCK_EXCLUSIVE, 0, "nothing (closed)");
}

static void test_shared(void)
{
  int fd = lock_or_fail("sh.lock", DSEC_LOCK_SHARED, false,
                        "take a shared lock");
  check_probe("sh.lock", DSEC_LOCK_SHARED, 0, "shared");
  check_probe("sh.lock", DSEC_LOCK_EXCLUSIVE, EWOULDBLOCK, "shared");
  close(fd);
}

static void test_nonblock_error(void)
{
  struct dsec_error *err = NULL;
  int held = lock_or_fail("nb.lock", DSEC_LOCK_EXCLUSIVE, true,
                          "a non-blocking exclusive lock when free");
  /* flock locks belong to the open file: a second open conflicts even in
   * this process. */
  int fd = dsec_lock_at(dirfd_, "nb.lock", DSEC_LOCK_EXCLUSIVE, true, &err);

  is_int(fd, -1, "a second non-blocking exclusive open fails");
  ok(err && err->status == DSEC_EXIT_FAILURE && err->errnum == EWOULDBLOCK &&
     strstr(err->msg, "nb.lock"),
     "... status 1, errno EWOULDBLOCK, message names the lock");
  if (err)
    diag("  %s", err->msg);
  dsec_error_free(err);
  close(held);
}

/* A child takes the lock, says so on a pipe and waits to be killed. */
static pid_t spawn_holder(const char *name)
{
  int pfd[2];
  char c = 0;
  pid_t pid;

  if (pipe2(pfd, O_CLOEXEC) < 0)
    bail_out("pipe");
  fflush(stdout);
  pid = fork();
  if (pid < 0)
    bail_out("fork");
  if (pid == 0) {
    struct dsec_error *err = NULL;
    int fd = dsec_lock_at(dirfd_, name, DSEC_LOCK_EXCLUSIVE, true, &err);
    char r = fd >= 0 ? 'L' : 'E';
    close(pfd[0]);
    if (write(pfd[1], &r, 1) != 1)
      _exit(1);
    for (;;)
      pause();
  }
  close(pfd[1]);
  if (read(pfd[0], &c, 1) != 1)
    c = 0;
  close(pfd[0]);
  is_int(c, 'L', "a child holds the lock");
  return pid;
}

static void test_released_on_kill(void)
{
  struct dsec_error *err = NULL;
  pid_t pid = spawn_holder("kill.lock");
  int status = 0, fd;

  fd = dsec_lock_at(dirfd_, "kill.lock", DSEC_LOCK_EXCLUSIVE, true, &err);
  ok(fd < 0 && err && err->errnum == EWOULDBLOCK,
     "while it lives, the parent cannot take it");
  if (fd >= 0)
    close(fd);
  dsec_error_free(err);
  err = NULL;

  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
     "the holder is killed with SIGKILL");
  fd = dsec_lock_at(dirfd_, "kill.lock", DSEC_LOCK_EXCLUSIVE, true, &err);
  ok(fd >= 0, "after it died, the lock is free");
  if (err)
    diag("  %s", err->msg);
  dsec_error_free(err);
  if (fd >= 0)
    close(fd);
}

static void test_errors(void)
{
  struct dsec_error *err = NULL;

  if (symlinkat("target.lock", dirfd_, "link.lock") < 0)
    bail_out("symlink");
  is_int(dsec_lock_at(dirfd_, "link.lock", DSEC_LOCK_EXCLUSIVE, true, &err),
         -1, "a lock through a symlink is refused");
  ok(err && err->errnum == ELOOP && err->status == DSEC_EXIT_FAILURE,
     "... status 1, errno ELOOP");
  ok(faccessat(dirfd_, "target.lock", F_OK, AT_SYMLINK_NOFOLLOW) < 0,
     "... and the symlink's target is not created");
  dsec_error_free(err);
  err = NULL;

  is_int(dsec_lock_at(dirfd_, "no/such/dir.lock", DSEC_LOCK_SHARED, true,
                      &err),
         -1, "a lock in a missing directory fails");
  ok(err && err->errnum == ENOENT, "... errno ENOENT");
  dsec_error_free(err);
}

int main(void)
{
  dirfd_ = open(tap_tmpdir("test-lock"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd_ < 0)
    bail_out("cannot open the temporary directory");
  test_exclusive();
  test_shared();
  test_nonblock_error();
  test_released_on_kill();
  test_errors();
  close(dirfd_);
  return done_testing();
}
