/* Unit tests for libcommon/cgroup.c's removal: dsec_cgroup_destroy kills
 * what is in a sandbox's cgroups, removes a cgroup the sandbox made under
 * its own, and waits for a killed process that leaves its cgroups late
 * (held by a frozen v1 freezer cgroup that is not the sandbox's, thawed
 * well after the kill: as a process whose exit takes long); and a
 * process's move of itself into the cgroups (dsec_cgroup_join).
 *
 * Needs root and a writable cgroup tree, else skips.  What it makes is
 * <hierarchy>/dsec/sb-<random> and /sys/fs/cgroup/freezer/dsec-test-<pid>;
 * its children are SIGKILLed and those directories removed at exit, also
 * after a failure. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "sandbox.h"
#include "tap.h"

#define FREEZER_V1 "/sys/fs/cgroup/freezer"

/* ---- cleanup whatever happens: children and directories of ours */

static pid_t kids[8];
static size_t nkids;
static char *dirs[32]; /* removed last first */
static size_t ndirs;
static char ext[128];  /* the freezer cgroup that is not the sandbox's */

static void remember_dir(const char *path)
{
  if (ndirs < ARRAY_SIZE(dirs))
    dirs[ndirs++] = xstrdup(path);
}

static void put_file(const char *dir, const char *file, const char *value)
{
  char path[512];
  int fd;
  snprintf(path, sizeof path, "%s/%s", dir, file);
  fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, value, strlen(value)) < 0) {
      /* the callers check what they need by reading back */
    }
    close(fd);
  }
}

static void cleanup(void)
{
  if (ext[0])
    put_file(ext, "freezer.state", "THAWED");
  for (size_t i = 0; i < nkids; i++)
    if (kids[i] > 0) {
      kill(kids[i], SIGKILL);
      waitpid(kids[i], NULL, 0);
    }
  for (size_t i = ndirs; i-- > 0;)
    rmdir(dirs[i]);
  if (ext[0])
    rmdir(ext);
}

/* A child that waits to be killed. */
static pid_t spawn(void)
{
  pid_t pid;
  fflush(stdout);
  pid = fork();
  if (pid < 0)
    bail_out("fork");
  if (pid == 0) {
    for (;;)
      pause();
  }
  if (nkids < ARRAY_SIZE(kids))
    kids[nkids++] = pid;
  return pid;
}

/* Waits for pid; true when SIGKILL ended it. */
static bool died_of_sigkill(pid_t pid)
{
  int status;
  if (waitpid(pid, &status, 0) != pid)
    return false;
  for (size_t i = 0; i < nkids; i++)
    if (kids[i] == pid)
      kids[i] = 0;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static char *new_id(void)
{
  char *id = dsec_sandbox_new_id();
  if (!dsec_sandbox_id_valid(id))
    bail_out("a sandbox id that is not valid: %s", id);
  return id;
}

/* The sandbox's cgroups, remembered for the cleanup; skips the whole file
 * when there is no cgroup tree to write to.  Each directory is held open
 * by this process, named dsec-*: a dsec-reap run by someone else meanwhile
 * takes the cgroups of a sandbox whose files no dsec process holds for
 * leftovers. */
static struct dsec_cgroup *make_cgroup(const char *id)
{
  struct dsec_cgroup *cg = NULL;
  struct dsec_error *err = NULL;
  json_t *res = json_object();
  bool any = false;

  if (dsec_cgroup_create(id, res, &cg, &err) < 0)
    skip_all("cannot make cgroups: %s", err->msg);
  json_decref(res);
  for (int c = 0; c < DSEC_CG_N; c++)
    if (cg->path[c]) {
      remember_dir(cg->path[c]);
      if (open(cg->path[c], O_RDONLY | O_DIRECTORY) < 0)
        bail_out("cannot open %s: %s", cg->path[c], strerror(errno));
      any = true;
    }
  if (!any)
    skip_all("no writable cgroup: %s", cg->unavailable ? cg->unavailable : "?");
  return cg;
}

static bool all_gone(struct dsec_cgroup *cg)
{
  for (int c = 0; c < DSEC_CG_N; c++)
    if (cg->path[c] && access(cg->path[c], F_OK) == 0) {
      diag("%s is still there", cg->path[c]);
      return false;
    }
  return true;
}

/* The first directory of cg that is not a v1 freezer's. */
static const char *some_dir(struct dsec_cgroup *cg)
{
  for (int c = 0; c < DSEC_CG_N; c++)
    if (cg->path[c] && (c != DSEC_CG_FREEZER || cg->v2[c]))
      return cg->path[c];
  return NULL;
}

/* A small cgroup file's text in buf; false if it cannot be read. */
static bool read_small(const char *dir, const char *file, char *buf,
                       size_t size)
{
  char path[512];
  ssize_t n;
  int fd;
  snprintf(path, sizeof path, "%s/%s", dir, file);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  n = read(fd, buf, size - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
  return n >= 0;
}

/* The file starts with want. */
static bool read_is(const char *dir, const char *file, const char *want)
{
  char buf[64];
  return read_small(dir, file, buf, sizeof buf) && buf[0] &&
         strncmp(buf, want, strlen(want)) == 0;
}

/* SIGKILL is pending for pid (sent, not yet acted on). */
static bool sigkill_pending(pid_t pid)
{
  char path[64], line[256];
  bool yes = false;
  FILE *f;
  snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
  f = fopen(path, "re");
  if (!f)
    return false;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "SigPnd:", 7) == 0 || strncmp(line, "ShdPnd:", 7) == 0)
      yes |= (strtoull(line + 7, NULL, 16) & (1ULL << (SIGKILL - 1))) != 0;
  }
  fclose(f);
  return yes;
}

static void diag_error(struct dsec_error *err)
{
  if (err)
    diag("  error: %s", err->msg);
}

static void nap_ms(long ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

/* ---- the tests */

static void test_kills_and_removes(void)
{
  _cleanup_free_ char *id = new_id();
  struct dsec_cgroup *cg = make_cgroup(id);
  struct dsec_error *err = NULL;
  pid_t a = spawn(), b = spawn();

  if (dsec_cgroup_attach(cg, a, &err) < 0 || dsec_cgroup_attach(cg, b, &err) < 0)
    bail_out("cannot attach: %s", err->msg);
  is_int(dsec_cgroup_destroy(cg, &err), 0,
         "destroy of cgroups with two processes succeeds");
  diag_error(err);
  ok(died_of_sigkill(a) && died_of_sigkill(b), "both processes were SIGKILLed");
  ok(all_gone(cg), "every directory of the sandbox is gone");
  dsec_error_free(err);
  dsec_cgroup_free(cg);
}

static void test_nested(void)
{
  _cleanup_free_ char *id = new_id();
  struct dsec_cgroup *cg = make_cgroup(id);
  struct dsec_error *err = NULL;
  _cleanup_free_ char *nested = NULL;
  char buf[32];
  const char *dir = some_dir(cg);
  pid_t a = spawn(), b = spawn();

  if (!dir)
    bail_out("no cgroup directory but a v1 freezer's");
  nested = xasprintf("%s/nested", dir);
  if (mkdir(nested, 0755) < 0)
    bail_out("cannot make %s: %s", nested, strerror(errno));
  remember_dir(nested);
  if (dsec_cgroup_attach(cg, a, &err) < 0 || dsec_cgroup_attach(cg, b, &err) < 0)
    bail_out("cannot attach: %s", err->msg);
  snprintf(buf, sizeof buf, "%d", (int) b);
  put_file(nested, "cgroup.procs", buf);
  snprintf(buf, sizeof buf, "%d\n", (int) b);
  if (!read_is(nested, "cgroup.procs", buf))
    bail_out("cannot move %d into %s", (int) b, nested);
  is_int(dsec_cgroup_destroy(cg, &err), 0,
         "destroy succeeds with a cgroup made under the sandbox's, a process in it");
  diag_error(err);
  ok(died_of_sigkill(a) && died_of_sigkill(b),
     "the processes of both were SIGKILLed");
  ok(access(nested, F_OK) < 0 && errno == ENOENT, "the nested cgroup is gone");
  ok(all_gone(cg), "every directory of the sandbox is gone");
  dsec_error_free(err);
  dsec_cgroup_free(cg);
}

static void test_late_leaver(void)
{
  _cleanup_free_ char *id = NULL;
  struct dsec_cgroup *cg;
  struct dsec_error *err = NULL;
  struct statfs sf;
  char buf[32];
  pid_t p, thawer;
  int i, status;

  if (statfs(FREEZER_V1, &sf) < 0 || (long) sf.f_type != CGROUP_SUPER_MAGIC) {
    skip(4, "no v1 freezer hierarchy to hold a killed process with");
    return;
  }
  id = new_id();
  cg = make_cgroup(id);
  snprintf(ext, sizeof ext, FREEZER_V1 "/dsec-test-%d", (int) getpid());
  if (mkdir(ext, 0755) < 0)
    bail_out("cannot make %s: %s", ext, strerror(errno));
  p = spawn();
  if (dsec_cgroup_attach(cg, p, &err) < 0)
    bail_out("cannot attach: %s", err->msg);
  /* out of the sandbox's freezer cgroup (if it has one) into ours, and
   * frozen there: a SIGKILL waits until the thaw */
  snprintf(buf, sizeof buf, "%d", (int) p);
  put_file(ext, "cgroup.procs", buf);
  put_file(ext, "freezer.state", "FROZEN");
  for (i = 0; i < 1000 && !read_is(ext, "freezer.state", "FROZEN"); i++)
    nap_ms(10);
  if (!read_is(ext, "freezer.state", "FROZEN"))
    bail_out("%s does not freeze", ext);

  /* thawed 1.5 s after destroy killed it: longer than a fixed number of
   * quick retries ever waited */
  fflush(stdout);
  thawer = fork();
  if (thawer < 0)
    bail_out("fork");
  if (thawer == 0) {
    for (i = 0; i < 6000 && !sigkill_pending(p); i++)
      nap_ms(10);
    nap_ms(1500);
    put_file(ext, "freezer.state", "THAWED");
    _exit(0);
  }
  is_int(dsec_cgroup_destroy(cg, &err), 0,
         "destroy waits for a killed process that leaves late");
  diag_error(err);
  ok(waitpid(thawer, &status, 0) == thawer && WIFEXITED(status),
     "the thaw came after the kill");
  ok(died_of_sigkill(p), "the process was SIGKILLed");
  ok(all_gone(cg), "every directory of the sandbox is gone");
  dsec_error_free(err);
  dsec_cgroup_free(cg);
}

/* The whole of a small cgroup file is want. */
static bool read_exactly(const char *dir, const char *file, const char *want)
{
  char buf[256];
  return read_small(dir, file, buf, sizeof buf) && strcmp(buf, want) == 0;
}

/* A child moves itself in through the files opened for it, after it has
 * dropped to an unprivileged id (the kernel checks the opener's
 * credentials): it is then in each of the sandbox's cgroups, and keeps
 * none of the files open. */
static void test_join(void)
{
  _cleanup_free_ char *id = new_id();
  struct dsec_cgroup *cg = make_cgroup(id);
  struct dsec_error *err = NULL;
  int fds[DSEC_CG_N], opened[DSEC_CG_N], p[2];
  bool in_all = true;
  char c = 0;
  pid_t pid;

  if (dsec_cgroup_join_open(cg, fds, &err) < 0)
    bail_out("cannot open the cgroups' files: %s", err->msg);
  memcpy(opened, fds, sizeof fds);
  if (pipe(p) < 0)
    bail_out("pipe");
  fflush(stdout);
  pid = fork();
  if (pid < 0)
    bail_out("fork");
  if (pid == 0) {
    /* 'j': joined; 'o': a file left open; 'f': the move failed; 'u':
     * the drop to nobody failed */
    c = 'j';
    if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
      c = 'u';
    else if (dsec_cgroup_join(fds, NULL) < 0)
      c = 'f';
    for (int i = 0; i < DSEC_CG_N; i++)
      if (fds[i] != -1 || (opened[i] >= 0 && fcntl(opened[i], F_GETFD) >= 0))
        c = c == 'j' ? 'o' : c;
    if (write(p[1], &c, 1) != 1)
      _exit(1);
    for (;;)
      pause();
  }
  if (nkids < ARRAY_SIZE(kids))
    kids[nkids++] = pid;
  close(p[1]);
  dsec_cgroup_join_close(fds);
  if (read(p[0], &c, 1) != 1)
    c = 0;
  close(p[0]);
  is_int(c, 'j', "the child, as nobody, moved itself in and kept no cgroup file open");
  for (int i = 0; i < DSEC_CG_N; i++) {
    char want[32];
    snprintf(want, sizeof want, "%d\n", (int) pid);
    if (cg->path[i] && !read_exactly(cg->path[i], "cgroup.procs", want)) {
      diag("%s does not hold just the child", cg->path[i]);
      in_all = false;
    }
  }
  ok(in_all, "each of the sandbox's cgroups holds the child");
  is_int(dsec_cgroup_destroy(cg, &err), 0, "destroy succeeds");
  diag_error(err);
  ok(died_of_sigkill(pid), "the child was SIGKILLed");
  dsec_error_free(err);
  dsec_cgroup_free(cg);
}

int main(void)
{
  if (geteuid() != 0)
    skip_all("needs root");
  prctl(PR_SET_NAME, "dsec-test-cg");
  atexit(cleanup);
  plan(15);
  test_kills_and_removes();
  test_nested();
  test_late_leaver();
  test_join();
  return done_testing();
}
