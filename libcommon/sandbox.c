#include <config.h>

#include "sandbox.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "audit.h"
#include "cgroup.h"
#include "client.h"
#include "crash.h"
#include "fsutil.h"
#include "idrange.h"
#include "layermount.h"
#include "log.h"
#include "spec.h"
#include "store.h"

char *dsec_sandboxes_dir(void)
{
  _cleanup_free_ char *root = dsec_root_dir();
  return xasprintf("%s/sandboxes", root);
}

char *dsec_sandbox_dir(const char *id)
{
  _cleanup_free_ char *root = dsec_root_dir();
  return xasprintf("%s/sandboxes/%s", root, id);
}

char *dsec_sandbox_run_dir(const char *id)
{
  _cleanup_free_ char *run = dsec_run_dir();
  return xasprintf("%s/%s", run, id);
}

char *dsec_sandbox_new_id(void)
{
  uint64_t r;
  if (getrandom(&r, sizeof r, 0) != sizeof r)
    r = ((uint64_t) getpid() << 32) ^ (uint64_t) dsec_now_ms();
  return xasprintf("sb-%016llx", (unsigned long long) r);
}

bool dsec_sandbox_id_valid(const char *id)
{
  if (!id || strlen(id) != DSEC_ID_LEN || strncmp(id, "sb-", 3) != 0)
    return false;
  for (const char *p = id + 3; *p; p++)
    if (!isxdigit((unsigned char) *p) || isupper((unsigned char) *p))
      return false;
  return true;
}

static char *names_dir(void)
{
  _cleanup_free_ char *root = dsec_root_dir();
  return xasprintf("%s/names", root);
}

static bool name_valid(const char *n)
{
  size_t len = strlen(n);
  if (len == 0 || len > 64 || !isalnum((unsigned char) n[0]))
    return false;
  for (size_t i = 0; i < len; i++)
    if (!isalnum((unsigned char) n[i]) && n[i] != '_' && n[i] != '.' &&
        n[i] != '-')
      return false;
  return true;
}

static char *name_lookup(const char *name)
{
  _cleanup_free_ char *dir = names_dir();
  _cleanup_free_ char *path = NULL;
  char *buf;
  size_t len;

  if (!name_valid(name))
    return NULL;
  path = xasprintf("%s/%s", dir, name);
  buf = dsec_read_file_at(AT_FDCWD, path, 64, &len, NULL);
  if (!buf)
    return NULL;
  buf[strcspn(buf, "\n")] = '\0';
  if (!dsec_sandbox_id_valid(buf)) {
    free(buf);
    return NULL;
  }
  return buf;
}

int dsec_sandbox_name_claim(const char *name, const char *id,
                            struct dsec_error **err)
{
  _cleanup_free_ char *dir = names_dir();
  _cleanup_free_ char *path = NULL;
  _cleanup_free_ char *tmp = NULL;
  _cleanup_close_ int dfd = -1;
  _cleanup_close_ int fd = -1;

  if (!name_valid(name))
    return dsec_bad_input(err, "invalid sandbox name `%s`", name);
  dfd = dsec_open_dir_at(AT_FDCWD, dir, true, err);
  if (dfd < 0)
    return -1;
  path = xasprintf("%s/%s", dir, name);
  for (int tries = 0; tries < 2; tries++) {
    /* link() of a complete temp file claims the name atomically */
    fd = dsec_open_tmp_at(dfd, name, 0644, &tmp, err);
    if (fd < 0)
      return -1;
    if (dsec_write_all(fd, id, strlen(id), err) < 0 || fsync(fd) < 0) {
      unlinkat(dfd, tmp, 0);
      return dsec_fail(err, errno, "cannot claim name %s", name);
    }
    if (linkat(dfd, tmp, dfd, name, 0) == 0) {
      unlinkat(dfd, tmp, 0);
      return dsec_fsync_dir(dfd, err);
    }
    unlinkat(dfd, tmp, 0);
    free(steal_pointer(&tmp));
    close(dsec_steal_fd(&fd));
    if (errno != EEXIST)
      return dsec_fail(err, errno, "cannot claim name %s", name);
    {
      /* a name whose sandbox is gone is free again */
      _cleanup_free_ char *owner = name_lookup(name);
      _cleanup_free_ char *sdir = owner ? dsec_sandbox_dir(owner) : NULL;
      struct stat st;
      if (owner && stat(sdir, &st) == 0)
        return dsec_bad_input(err, "name `%s` is taken by %s", name, owner);
      unlinkat(dfd, name, 0);
    }
  }
  return dsec_bad_input(err, "name `%s` is taken", name);
}

void dsec_sandbox_name_release(const char *name, const char *id)
{
  _cleanup_free_ char *owner = name_lookup(name);
  _cleanup_free_ char *dir = names_dir();
  _cleanup_free_ char *path = NULL;

  if (!owner || strcmp(owner, id) != 0)
    return;
  path = xasprintf("%s/%s", dir, name);
  unlink(path);
}

char *dsec_sandbox_resolve(const char *arg, struct dsec_error **err)
{
  _cleanup_json_ json_t *all = NULL;
  const char *hex = dsec_str_has_prefix(arg, "sb-") ? arg + 3 : arg;
  char *found = NULL;
  json_t *v;
  size_t i;

  if (dsec_sandbox_id_valid(arg)) {
    _cleanup_free_ char *dir = dsec_sandbox_dir(arg);
    struct stat st;
    if (stat(dir, &st) == 0)
      return xstrdup(arg);
  }
  found = name_lookup(arg);
  if (found) {
    _cleanup_free_ char *dir = dsec_sandbox_dir(found);
    struct stat st;
    if (stat(dir, &st) == 0)
      return found;
    free(found);
    found = NULL;
  }
  if (strlen(hex) >= 4 && strlen(hex) <= 16 &&
      strspn(hex, "0123456789abcdef") == strlen(hex)) {
    all = dsec_sandbox_list(err);
    if (!all)
      return NULL;
    json_array_foreach(all, i, v)
    {
      const char *id = json_string_value(v);
      if (strncmp(id + 3, hex, strlen(hex)) != 0)
        continue;
      if (found) {
        free(found);
        dsec_bad_input(err, "`%s` matches more than one sandbox", arg);
        return NULL;
      }
      found = xstrdup(id);
    }
    if (found)
      return found;
  }
  dsec_bad_input(err, "no sandbox `%s`", arg);
  return NULL;
}

json_t *dsec_sandbox_state_read(const char *id, struct dsec_error **err)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *path = xasprintf("%s/state.json", dir);
  _cleanup_free_ char *buf = NULL;
  size_t len;

  buf = dsec_read_file_at(AT_FDCWD, path, 1 << 20, &len, err);
  if (!buf)
    return NULL;
  return dsec_json_parse(buf, len, path, err);
}

int dsec_sandbox_state_write(const char *id, json_t *state,
                             struct dsec_error **err)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_free_ char *text = NULL;

  if (dfd < 0)
    return dsec_fail(err, errno, "cannot open %s", dir);
  text = json_dumps(state, JSON_COMPACT | JSON_REAL_PRECISION(10));
  /* a suspended sandbox is meant to outlive the host (its checkpoint or
   * memory snapshot is on disk): its state is synced.  A running one
   * does not survive a host crash, and readers take a missing or torn
   * state.json for "died": no fsync on that hot path. */
  if (strcmp(json_string_value(json_object_get(state, "state")) ?: "",
             "suspended") == 0)
    return dsec_write_file_atomic(dfd, "state.json", text, strlen(text), 0644,
                                  err);
  return dsec_write_file_replace(dfd, "state.json", text, strlen(text), 0644,
                                 err);
}

uint64_t dsec_process_starttime(pid_t pid)
{
  char path[64], buf[1024];
  _cleanup_close_ int fd = -1;
  ssize_t n;
  char *p;
  unsigned long long start = 0;

  snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  n = read(fd, buf, sizeof buf - 1);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  /* the command name may hold spaces and parentheses: skip to the last ')' */
  p = strrchr(buf, ')');
  if (!p)
    return 0;
  /* field 3 (state) follows; start time is field 22 */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
                    "%*d %*d %*d %*d %*d %*d %llu",
             &start) != 1)
    return 0;
  if (p[2] == 'Z' || p[2] == 'X')
    return 0; /* a zombie is dead for our purposes */
  return start;
}

bool dsec_process_alive(pid_t pid, uint64_t starttime)
{
  return pid > 0 && starttime && dsec_process_starttime(pid) == starttime;
}

/* st is in state with flag set and a checkpoint (or snapshot) to go on
 * from, and its supervisor is dead: a resume or a release cut short. */
static bool cut_short(json_t *st, const char *state, const char *flag)
{
  const char *s = json_string_value(json_object_get(st, "state"));
  return s && strcmp(s, state) == 0 &&
         json_is_true(json_object_get(st, flag)) &&
         (json_is_string(json_object_get(st, "checkpoint")) ||
          json_is_string(json_object_get(st, "snapshot"))) &&
         !dsec_process_alive(
           (pid_t) json_integer_value(json_object_get(st, "supervisor_pid")),
           (uint64_t) json_integer_value(
             json_object_get(st, "supervisor_start")));
}

bool dsec_sandbox_resume_cut(json_t *st)
{
  return cut_short(st, "creating", "resuming");
}

bool dsec_sandbox_release_cut(json_t *st)
{
  return cut_short(st, "running", "released");
}

json_t *dsec_sandbox_status(const char *id, struct dsec_error **err)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  json_t *st = dsec_sandbox_state_read(id, &e);
  const char *state;
  json_int_t pid, start;

  if (!st) {
    /* a directory without a readable state (a host crash mid-write): the
     * sandbox is gone, and rm must be able to clean it */
    _cleanup_free_ char *dir = dsec_sandbox_dir(id);
    struct stat sb;
    if (stat(dir, &sb) < 0) {
      if (err && !*err)
        *err = steal_pointer(&e);
      return NULL;
    }
    return json_pack("{s:s, s:s, s:s, s:s}", "type", "sandbox", "id", id,
                     "state", "died", "cause", "no readable state");
  }
  state = json_string_value(json_object_get(st, "state"));
  pid = json_integer_value(json_object_get(st, "supervisor_pid"));
  start = json_integer_value(json_object_get(st, "supervisor_start"));
  /* a released sandbox has no supervisor by design */
  if (state && strcmp(state, "suspended") == 0 &&
      json_is_true(json_object_get(st, "released")))
    return st;
  /* nor has one whose resume was killed before its supervisor ran: it is
   * as released as before, its checkpoint (or snapshot) intact */
  if (dsec_sandbox_resume_cut(st)) {
    json_object_set_new(st, "state", json_string("suspended"));
    json_object_set_new(st, "released", json_true());
    json_object_set_new(st, "cause", json_string("resume interrupted"));
    json_object_del(st, "resuming");
    return st;
  }
  /* nor has one whose supervisor was killed tearing it down after its
   * release was answered: released all the same */
  if (dsec_sandbox_release_cut(st)) {
    json_object_set_new(st, "state", json_string("suspended"));
    json_object_set_new(st, "cause", json_string("release interrupted"));
    return st;
  }
  if (state && (strcmp(state, "running") == 0 ||
                strcmp(state, "creating") == 0 ||
                strcmp(state, "suspended") == 0 ||
                strcmp(state, "stopping") == 0) &&
      !dsec_process_alive((pid_t) pid, (uint64_t) start)) {
    _cleanup_free_ char *boot = dsec_boot_id();
    const char *was = json_string_value(json_object_get(st, "boot_id"));
    json_object_set_new(st, "state", json_string("died"));
    /* a host that rebooted since is told apart: the trainer masks infra
     * failures out of rewards by this cause */
    if (!json_object_get(st, "cause"))
      json_object_set_new(st, "cause",
                          json_string(was && boot && strcmp(was, boot) != 0
                                        ? "node reboot"
                                        : "supervisor killed"));
  }
  return st;
}

static int cmp_json_str(const void *a, const void *b)
{
  return strcmp(json_string_value(*(json_t *const *) a),
                json_string_value(*(json_t *const *) b));
}

json_t *dsec_sandbox_list(struct dsec_error **err)
{
  _cleanup_free_ char *dir = dsec_sandboxes_dir();
  _cleanup_closedir_ DIR *d = opendir(dir);
  json_t *out = json_array();
  struct dirent *de;
  json_t **v;
  size_t n;

  if (!d) {
    if (errno == ENOENT)
      return out;
    json_decref(out);
    dsec_fail(err, errno, "cannot read %s", dir);
    return NULL;
  }
  while ((de = readdir(d)))
    if (dsec_sandbox_id_valid(de->d_name))
      json_array_append_new(out, json_string(de->d_name));
  n = json_array_size(out);
  if (n < 2)
    return out;
  v = xmalloc(sizeof *v * n);
  for (size_t i = 0; i < n; i++)
    v[i] = json_incref(json_array_get(out, i));
  qsort(v, n, sizeof *v, cmp_json_str);
  json_array_clear(out);
  for (size_t i = 0; i < n; i++)
    json_array_append_new(out, v[i]);
  free(v);
  return out;
}

int dsec_event_append(int fd, const char *id, json_t *event,
                      struct dsec_error **err)
{
  return dsec_audit_append_once(fd, id, event, err) < 0 ? -1 : 0;
}

/* Stopping and removal, shared by dsec-run rm and dsec-reap. */

static bool remove_in_background;
static bool remove_unwaited;

void dsec_sandbox_remove_background(bool on)
{
  remove_in_background = on;
}

void dsec_sandbox_remove_unwaited(bool on)
{
  remove_unwaited = on;
}

/* With more removals than this pending in $DSEC_ROOT/removing/, a removal
 * is done in place, the caller waiting: removers must not fall behind
 * sandboxes that fill the disk with what they write. */
#define REMOVING_MAX 16

static int removing_count(const char *top)
{
  _cleanup_free_ char *dir = xasprintf("%s/" DSEC_REMOVING_DIR, top);
  _cleanup_closedir_ DIR *d = opendir(dir);
  struct dirent *de;
  int n = 0;

  while (d && (de = readdir(d)))
    n += strstr(de->d_name, ".tmp-") != NULL;
  return n;
}

/* Moves path (a sandbox's directory or run directory) into
 * <top>/removing/ as <id>.tmp-<random> (*moved), and locks it (flock):
 * returns the lock's fd; -2 when a reaper locked it first (it removes
 * it); -1 when it cannot be moved or locked (*moved is set when it was
 * moved: it is to be removed there). */
static int move_aside(const char *top, const char *path, const char *id,
                      char **moved)
{
  _cleanup_free_ char *dir = xasprintf("%s/" DSEC_REMOVING_DIR, top);
  uint64_t r;
  int fd, e;

  if (getrandom(&r, sizeof r, 0) != sizeof r)
    r = (uint64_t) getpid() ^ (uint64_t) dsec_now_ms();
  *moved = xasprintf("%s/%s.tmp-%016llx", dir, id, (unsigned long long) r);
  if ((mkdir(dir, 0700) < 0 && errno != EEXIST) || rename(path, *moved) < 0) {
    free(steal_pointer(moved));
    return -1;
  }
  fd = open(*moved, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
    return fd;
  e = errno;
  if (fd >= 0)
    close(fd);
  if (fd >= 0 && e == EWOULDBLOCK) {
    free(steal_pointer(moved));
    return -2;
  }
  return -1;
}

/* Waits until the process of pidfd after (-1: none) is gone, 60 s at
 * most: a supervisor that said it stopped is still exiting (its mounts
 * of the sandbox's directories go with its mount namespace). */
#define AFTER_MAX_MS 60000

static void wait_exit(int after)
{
  struct pollfd p = { after, POLLIN, 0 };

  if (after >= 0)
    while (poll(&p, 1, AFTER_MAX_MS) < 0 && errno == EINTR)
      ;
}

/* Removes path: with bg, moved aside for the detached remover (its new
 * path and lock added to paths and fds, *n of them); else, or when it
 * cannot be, in place (warned about with warn). */
static void remove_dir(bool bg, const char *top, const char *path,
                       const char *id, bool warn, int after, char **paths,
                       int *fds, int *n)
{
  _cleanup_free_ char *moved = NULL;
  _cleanup_error_ struct dsec_error *e = NULL;

  if (bg) {
    int fd = move_aside(top, path, id, &moved);
    if (fd >= 0) {
      paths[*n] = steal_pointer(&moved);
      fds[(*n)++] = fd;
      return;
    }
    if (fd == -2)
      return;
  }
  wait_exit(after);
  if (dsec_rm_rf_at(AT_FDCWD, moved ? moved : path, &e) < 0 && warn)
    dsec_warn("%s", e->msg);
}

/* Removes the n paths (each locked by its fd in fds, n <= 3) in a process
 * of its own that nobody waits for, holding the locks until they are gone
 * (a reaper leaves locked ones alone, removes those a killed remover
 * left), once the process of pidfd after (or -1) is gone.  It is set up
 * before the caller goes on: it keeps none of the caller's descriptors
 * but the locks and after (a caller whose output is read to its end must
 * not be held up), blocks no signal, and is named dsec-rm.  It is the
 * child of a child the caller waits for, or, after
 * dsec_sandbox_remove_unwaited(true), the caller's own child, left to be
 * reaped by whoever inherits it when the caller exits: the caller then
 * waits only until it has closed the caller's descriptors (the end of
 * a pipe, shut when they are): a fork, an exit and a wait less on rm's
 * path. */
static void remove_detached(char **paths, int *fds, int n, int after)
{
  int shut[2] = { -1, -1 };
  bool unwaited = remove_unwaited && pipe2(shut, O_CLOEXEC) == 0;
  pid_t pid = fork();

  if (pid == 0) {
    sigset_t none;
    int null;

    /* out of the caller's session and process group first: once shut
     * is closed (below), a signal to the caller's group misses us */
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
    prctl(PR_SET_NAME, "dsec-rm");
    /* the locks to 3 and up, then after, nothing else open but /dev/null
     * on 0-2: they are copied above 4 + n first (one of them may be 0-2,
     * or where another goes); shut goes with the rest */
    for (int i = 0; i < n; i++)
      fds[i] = fcntl(fds[i], F_DUPFD, 4 + n);
    if (after >= 0)
      after = fcntl(after, F_DUPFD, 4 + n);
    null = open("/dev/null", O_RDWR);
    for (int i = 0; i < 3; i++)
      dup2(null, i);
    for (int i = 0; i < n; i++)
      dup2(fds[i], 3 + i);
    if (after >= 0)
      after = dup2(after, 3 + n);
    close_range(3 + (unsigned) n + (after >= 0), ~0U, 0);
    /* the remover is our child's child, or we are it; without a fork,
     * the child removes (and the caller waits) */
    if (!unwaited && fork() > 0)
      _exit(0);
    wait_exit(after);
    for (int i = 0; i < n; i++)
      dsec_rm_rf_at(AT_FDCWD, paths[i], NULL);
    _exit(0);
  }
  if (unwaited) {
    char c;
    close(shut[1]);
    while (pid > 0 && read(shut[0], &c, 1) < 0 && errno == EINTR)
      ;
    close(shut[0]);
  } else if (pid > 0) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
      ;
  }
  if (pid < 0) {
    wait_exit(after);
    for (int i = 0; i < n; i++)
      dsec_rm_rf_at(AT_FDCWD, paths[i], NULL);
  }
}

void dsec_sandbox_remove_files(const char *id, json_t *spec)
{
  dsec_sandbox_remove_files_after(id, spec, -1);
}

void dsec_sandbox_remove_files_after(const char *id, json_t *spec, int after)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *run = dsec_sandbox_run_dir(id);
  _cleanup_free_ char *root_top = dsec_root_dir();
  _cleanup_free_ char *run_top = dsec_run_dir();
  const char *name = json_string_value(json_object_get(spec, "name"));
  bool bg = remove_in_background && removing_count(root_top) < REMOVING_MAX;
  char *moved[3] = { NULL, NULL, NULL };
  int fds[3] = { -1, -1, -1 }, n = 0;

  /* the host id range first: it is found through the directory */
  dsec_crash_point("removing");
  dsec_idrange_release(id);
  dsec_crash_point("ids released");
  remove_dir(bg, root_top, dir, id, true, after, moved, fds, &n);
  dsec_crash_point("directory removed");
  remove_dir(bg, run_top, run, id, false, after, moved, fds, &n);
  if (dsec_devfs_mounted(run_top)) {
    /* its /dev, when it was a directory of the host's shared tmpfs: what
     * it wrote in /dev/shm is memory until then */
    _cleanup_free_ char *dev_top = xasprintf("%s/layers/" DSEC_DEVFS_DIR "/mnt",
                                             run_top);
    _cleanup_free_ char *dev = xasprintf("%s/%s", dev_top, id);
    struct stat st;
    if (lstat(dev, &st) == 0)
      remove_dir(bg, dev_top, dev, id, false, after, moved, fds, &n);
  }
  if (name)
    dsec_sandbox_name_release(name, id);
  if (n > 0) {
    dsec_crash_point("moved aside");
    remove_detached(moved, fds, n, after);
  }
  for (int i = 0; i < n; i++) {
    close(fds[i]);
    free(moved[i]);
  }
}

/* A supervisor killed (rm --force) noted nothing of what its sandbox read
 * of its layers' EROFS images: noted here (layermount.h). */
static void note_hot_sets(const char *dir)
{
  _cleanup_free_ char *path = xasprintf("%s/environment.json", dir);
  _cleanup_free_ char *buf = dsec_read_file_at(AT_FDCWD, path, 1 << 20, NULL,
                                               NULL);
  _cleanup_json_ json_t *env = buf ? json_loads(buf, 0, NULL) : NULL;
  json_t *l;
  size_t i;

  json_array_foreach(json_object_get(env, "layers"), i, l)
  {
    const char *f = json_string_value(json_object_get(l, "format"));
    const char *p = json_string_value(json_object_get(l, "path"));
    if (f && p && strcmp(f, "erofs") == 0)
      dsec_layer_hot_note(p);
  }
}

/* Asks the supervisor of id (pfd: its pidfd) to shut down for rm
 * ("remove": it need not record its end, its files go next), and waits
 * until it says it stopped, until it exits, or until the deadline (ms of
 * the monotonic clock): true when it said so.  False when it cannot be
 * asked or ends without saying so (killed, a build that does not, its
 * cgroups not removed): its exit is then waited for. */
static bool ask_shutdown(const char *id, int pfd, double deadline)
{
  struct dsec_conn *c = NULL;
  _cleanup_error_ struct dsec_error *e = NULL;
  json_t *req, *r;
  bool told = false;

  if (dsec_conn_open(id, &c, &e) < 0)
    return false;
  req = json_pack("{s:s, s:b}", "op", "shutdown", "remove", 1);
  r = dsec_conn_call(c, req, &e);
  json_decref(req);
  if (r && !json_object_get(r, "error")) {
    json_decref(r);
    r = NULL;
    while (!dsec_conn_pending(c)) {
      /* its answer, or its end (the connection closes then too) */
      struct pollfd p[2] = { { dsec_conn_fd(c), POLLIN, 0 }, { pfd, POLLIN, 0 } };
      double left = deadline - dsec_now_ms();
      int n = left > 0 ? poll(p, 2, dsec_ceil_int(left)) : 0;
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0 || p[0].revents)
        break;
      if (p[1].revents)
        break; /* exited without a word */
    }
    if (dsec_conn_pending(c) || poll(&(struct pollfd){ dsec_conn_fd(c), POLLIN, 0 }, 1, 0) > 0)
      r = dsec_conn_recv(c, &e);
    told = r && json_is_string(json_object_get(r, "type")) &&
           strcmp(json_string_value(json_object_get(r, "type")), "stopped") == 0;
  }
  json_decref(r);
  dsec_conn_close(c);
  return told;
}

int dsec_sandbox_stop(const char *id, bool force, struct dsec_error **err)
{
  _cleanup_json_ json_t *st = dsec_sandbox_status(id, err);
  _cleanup_json_ json_t *spec = NULL;
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_close_ int pfd = -1;
  /* a supervisor gets 5 s to stop (10 s with force) before SIGKILL */
  double deadline = dsec_now_ms() + (force ? 10000 : 5000);
  const char *state;
  bool told = false;
  pid_t sup;
  uint64_t start;

  if (!st)
    return -1;
  state = json_string_value(json_object_get(st, "state"));
  sup = (pid_t) json_integer_value(json_object_get(st, "supervisor_pid"));
  start = (uint64_t) json_integer_value(json_object_get(st, "supervisor_start"));
  if (dsec_process_alive(sup, start)) {
    /* the supervisor's, while it is the one with that start time */
    pfd = (int) syscall(SYS_pidfd_open, sup, 0);
    if (pfd >= 0 && !dsec_process_alive(sup, start))
      close(dsec_steal_fd(&pfd));
    /* told only with its pidfd: the directories go once it has exited */
    if (!force && pfd >= 0 && state &&
        (strcmp(state, "running") == 0 || strcmp(state, "suspended") == 0))
      told = ask_shutdown(id, pfd, deadline);
  }
  /* unless it said it stopped: wait for its exit (5 s at most before
   * SIGKILL), then make sure */
  if (!told && dsec_process_alive(sup, start)) {
    if (force)
      kill(sup, SIGKILL);
    if (pfd >= 0 && dsec_process_alive(sup, start)) {
      struct pollfd p = { pfd, POLLIN, 0 };
      double left = deadline - dsec_now_ms();
      if (poll(&p, 1, left > 0 ? dsec_ceil_int(left) : 0) == 0) {
        kill(sup, SIGKILL);
        poll(&p, 1, 10000);
      }
    }
    for (int i = 0; i < 200 && dsec_process_alive(sup, start); i++) {
      kill(sup, SIGKILL);
      usleep(10000);
    }
    if (dsec_process_alive(sup, start))
      return dsec_fail(err, EBUSY, "the supervisor of %s does not stop", id);
    if (force)
      note_hot_sets(dir);
  }
  dsec_crash_point("supervisor stopped");
  /* whatever a dead supervisor left: processes, cgroups (found by the id
   * too: a supervisor killed while creating had not recorded them yet);
   * one that said it stopped had removed its own */
  if (!told) {
    struct dsec_cgroup *cg = dsec_cgroup_for_id(id);
    _cleanup_error_ struct dsec_error *e = NULL;
    int r = dsec_cgroup_destroy(cg, &e);
    dsec_cgroup_free(cg);
    if (r < 0)
      return dsec_fail(err, e->errnum, "%s", e->msg);
  }
  {
    _cleanup_free_ char *path = xasprintf("%s/spec.json", dir);
    _cleanup_free_ char *buf = dsec_read_file_at(AT_FDCWD, path, DSEC_SPEC_MAX,
                                                 NULL, NULL);
    spec = buf ? json_loads(buf, 0, NULL) : NULL;
  }
  /* a supervisor that said it stopped is exiting: its directories are
   * removed once it is gone */
  dsec_sandbox_remove_files_after(id, spec, told ? pfd : -1);
  return 0;
}

char *dsec_boot_id(void)
{
  char *b = dsec_read_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", 128,
                              NULL, NULL);
  if (b)
    b[strcspn(b, "\n")] = '\0';
  return b;
}
