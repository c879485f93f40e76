#include <config.h>

#include "reap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sysmacros.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "client.h"
#include "fsutil.h"
#include "idrange.h"
#include "layer.h"
#include "layermount.h"
#include "lock.h"
#include "log.h"
#include "sandbox.h"
#include "spec.h"
#include "store.h"
#include "verify.h"
#include "vmimage.h"

#define CG_ROOT "/sys/fs/cgroup"
/* A temporary file or directory (a "*.tmp-*" name) older than this has no
 * writer left: every writer renames or removes its own within moments.
 * Store objects younger than this are not collected either (their maker
 * may be about to reference them). */
#define STALE_S 60
/* a layer's tree being removed: layers/.trash-<hex> */
#define TRASH_PREFIX ".trash-"
#define VM_BOOT_MIN_AGE 600 /* s: a boot entry being built and indexed is younger */

struct reap {
  const struct dsec_reap_opts *o;
  dsec_reap_emit_fn emit;
  void *ud;
  char *root;  /* $DSEC_ROOT */
  char *run;   /* $DSEC_RUN */
  char *sbdir; /* $DSEC_ROOT/sandboxes */
  time_t now;
  char *mountinfo; /* /proc/self/mountinfo, read once per phase that needs it */
  json_t *doomed;  /* sandboxes removed, or with dry_run to be removed */
  json_t *killed;  /* supervisors killed, or with dry_run to be killed */
  /* counters for the summary */
  int64_t actions, freed, kept, kept_bytes, failed;
};

/* ---- records */

/* Emits one record; extra (stolen, may be NULL) adds fields. */
static int put(struct reap *r, const char *what, const char *id,
               const char *reason, const char *action, int64_t freed,
               json_t *extra, struct dsec_error **err)
{
  json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "type", "reap",
                          "what", what, "id", id, "reason", reason, "action",
                          action, "freed_bytes", (json_int_t) freed);
  int ret;

  if (extra) {
    json_object_update_missing(rec, extra);
    json_decref(extra);
  }
  if (strcmp(action, "kept") == 0) {
    r->kept++;
    r->kept_bytes += json_integer_value(json_object_get(rec, "size_bytes"));
  } else if (strcmp(action, "failed") == 0)
    r->failed++;
  else {
    r->actions++;
    r->freed += freed;
  }
  ret = r->emit(rec, r->ud, err);
  json_decref(rec);
  return ret;
}

/* A record of an object that could not be removed (e is consumed). */
static int put_failed(struct reap *r, const char *what, const char *id,
                      const char *reason, struct dsec_error *e, json_t *extra,
                      struct dsec_error **err)
{
  if (!extra)
    extra = json_object();
  json_object_set_new(extra, "error",
                      json_string(e && e->msg ? e->msg : "unknown error"));
  dsec_error_free(e);
  return put(r, what, id, reason, "failed", 0, extra, err);
}

/* The action word: what was done, or with dry_run what would be. */
static const char *act(struct reap *r, const char *done, const char *would)
{
  return r->o->dry_run ? would : done;
}

/* Removes name in dirfd (not in a dry run) and reports it: what, id,
 * reason, extra (stolen), and the bytes it held. */
static int remove_put(struct reap *r, int dirfd, const char *name,
                      const char *what, const char *id, const char *reason,
                      json_t *extra, struct dsec_error **err)
{
  int64_t freed = dsec_disk_usage_at(dirfd, name);
  if (!r->o->dry_run) {
    struct dsec_error *e = NULL;
    if (dsec_rm_rf_at(dirfd, name, &e) < 0)
      return put_failed(r, what, id, reason, e, extra, err);
  }
  return put(r, what, id, reason, act(r, "removed", "would remove"), freed,
             extra, err);
}

static bool exists_at(int dirfd, const char *path)
{
  struct stat st;
  return fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 ||
         errno != ENOENT;
}

/* Seconds since dirfd/name was last modified (-1 when it is gone). */
static int64_t age_at(struct reap *r, int dirfd, const char *name)
{
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return -1;
  return (int64_t) (r->now - st.st_mtime);
}

static time_t mtime_at(int dirfd, const char *name)
{
  struct stat st;
  return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_mtime : 0;
}

static bool is_tmp_name(const char *name)
{
  return strstr(name, ".tmp-") != NULL;
}

/* ---- the trainer's progress */

int dsec_reap_progress_read(const char *file, int64_t *min_step,
                            struct dsec_error **err)
{
  _cleanup_json_ json_t *p = dsec_json_load_path(file, 1 << 20, err);
  json_int_t step = 0, keep = 0;
  int ret;

  if (!p)
    return dsec_error_wrap(err, "--progress");
  if (!json_is_object(p))
    return dsec_bad_input(err, "%s: must be a JSON object", file);
  ret = dsec_json_get_int(p, "step", true, file, &step, err);
  if (ret < 0)
    return ret;
  ret = dsec_json_get_int(p, "keep_steps", false, file, &keep, err);
  if (ret < 0)
    return ret;
  if (step < 0 || keep < 0)
    return dsec_bad_input(err, "%s: field `%s` must not be negative", file,
                          step < 0 ? "step" : "keep_steps");
  *min_step = (int64_t) (step - keep);
  return 0;
}

/* labels.step of a spec: an integer, or a string of one (--label
 * step=4200 makes a string). */
static bool label_step(json_t *spec, int64_t *out)
{
  json_t *v = json_object_get(json_object_get(spec, "labels"), "step");
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return true;
  }
  if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
      fabs(json_real_value(v)) < 9e15) {
    *out = (int64_t) json_real_value(v);
    return true;
  }
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    char *end;
    long long n;
    errno = 0;
    n = strtoll(s, &end, 10);
    if (*s && !*end && !errno) {
      *out = n;
      return true;
    }
  }
  return false;
}

/* ---- who is alive */

/* The sandbox id a path names: the component after prefix/ (NULL if the
 * path is not under prefix or the component is not an id).  Writes into
 * id. */
static bool id_under(const char *path, const char *prefix,
                     char id[DSEC_ID_LEN + 1])
{
  size_t n = strlen(prefix);
  if (strncmp(path, prefix, n) != 0 || path[n] != '/')
    return false;
  path += n + 1;
  if (strlen(path) < DSEC_ID_LEN ||
      (path[DSEC_ID_LEN] != '\0' && path[DSEC_ID_LEN] != '/'))
    return false;
  memcpy(id, path, DSEC_ID_LEN);
  id[DSEC_ID_LEN] = '\0';
  return dsec_sandbox_id_valid(id);
}

/* Every sandbox id named by a component of path. */
static void ids_in_path(const char *path, json_t *ids)
{
  for (const char *p = strstr(path, "/sb-"); p; p = strstr(p + 1, "/sb-")) {
    char id[DSEC_ID_LEN + 1];
    if (strlen(p + 1) < DSEC_ID_LEN ||
        (p[1 + DSEC_ID_LEN] != '\0' && p[1 + DSEC_ID_LEN] != '/' &&
         p[1 + DSEC_ID_LEN] != ' '))
      continue;
    memcpy(id, p + 1, DSEC_ID_LEN);
    id[DSEC_ID_LEN] = '\0';
    if (dsec_sandbox_id_valid(id))
      json_object_set_new(ids, id, json_true());
  }
}

struct procs {
  json_t *any;  /* id -> true: some dsec process, of any root, holds its files */
  json_t *ours; /* "pid" -> [start, {id: true}]: supervisors holding files
                 * of this root's sandboxes, and which */
  bool uncertain; /* some dsec process's files could not be read */
};

static void procs_clear(struct procs *p)
{
  json_decref(p->any);
  json_decref(p->ours);
}

/* Finds sandboxes by their processes: a supervisor keeps its sandbox's
 * directory, files and run directory open, so its open files name its id
 * whatever its root.  Only processes called dsec-* are looked at. */
static void scan_procs(struct reap *r, struct procs *p)
{
  _cleanup_closedir_ DIR *d = opendir("/proc");
  struct dirent *de;
  pid_t self = getpid();

  p->any = json_object();
  p->ours = json_object();
  p->uncertain = false;
  if (!d) {
    p->uncertain = true;
    return;
  }
  while ((de = readdir(d))) {
    char comm[64], path[64];
    _cleanup_free_ char *buf = NULL;
    _cleanup_closedir_ DIR *fds = NULL;
    struct dirent *fe;
    pid_t pid = (pid_t) atoi(de->d_name);
    uint64_t start;
    bool sup;

    if (pid <= 0 || pid == self)
      continue;
    snprintf(path, sizeof path, "%d/comm", (int) pid);
    buf = dsec_read_file_at(dirfd(d), path, 64, NULL, NULL);
    if (!buf)
      continue;
    snprintf(comm, sizeof comm, "%s", buf);
    comm[strcspn(comm, "\n")] = '\0';
    if (!dsec_str_has_prefix(comm, "dsec-"))
      continue;
    sup = strcmp(comm, "dsec-supervise") == 0;
    start = dsec_process_starttime(pid);
    if (!start)
      continue;
    snprintf(path, sizeof path, "%d/fd", (int) pid);
    fds = dsec_opendir_at(dirfd(d), path);
    if (!fds) {
      if (errno != ENOENT && dsec_process_starttime(pid) == start)
        p->uncertain = true;
      continue;
    }
    while ((fe = readdir(fds))) {
      char target[4096], id[DSEC_ID_LEN + 1];
      ssize_t n;
      char *del;
      if (fe->d_name[0] == '.')
        continue;
      n = readlinkat(dirfd(fds), fe->d_name, target, sizeof target - 1);
      if (n <= 0)
        continue;
      target[n] = '\0';
      del = strstr(target, " (deleted)");
      if (del && del[10] == '\0')
        *del = '\0';
      if (target[0] != '/')
        continue;
      ids_in_path(target, p->any);
      if (sup && (id_under(target, r->sbdir, id) ||
                  id_under(target, r->run, id))) {
        char key[16];
        json_t *e;
        snprintf(key, sizeof key, "%d", (int) pid);
        e = json_object_get(p->ours, key);
        if (!e)
          json_object_set_new(p->ours, key,
                              e = json_pack("[I, {}]", (json_int_t) start));
        json_object_set_new(json_array_get(e, 1), id, json_true());
      }
    }
  }
}

/* The supervisor recorded in the sandbox's state is alive. */
static bool supervisor_alive(const char *id)
{
  _cleanup_json_ json_t *st = dsec_sandbox_state_read(id, NULL);
  return st && dsec_process_alive(
                 (pid_t) json_integer_value(json_object_get(st, "supervisor_pid")),
                 (uint64_t) json_integer_value(
                   json_object_get(st, "supervisor_start")));
}

static bool has_dir(struct reap *r, const char *id)
{
  _cleanup_free_ char *dir = xasprintf("%s/%s", r->sbdir, id);
  return exists_at(AT_FDCWD, dir);
}

/* ---- supervisors whose sandbox directory is gone */

static int reap_supervisors(struct reap *r, struct dsec_error **err)
{
  struct procs p;
  const char *key;
  json_t *v;
  int ret = 0;

  scan_procs(r, &p);
  json_object_foreach(p.ours, key, v)
  {
    pid_t pid = (pid_t) atoi(key);
    uint64_t start = (uint64_t) json_integer_value(json_array_get(v, 0));
    json_t *ids = json_array_get(v, 1), *t;
    const char *id = NULL, *k;
    bool any_dir = false;
    json_t *extra;

    /* orphaned only when none of the sandboxes it holds files of has a
     * directory (a fork's supervisor may hold its parent's too) */
    json_object_foreach(ids, k, t)
    {
      any_dir |= has_dir(r, k);
      if (!id)
        id = k;
    }
    if (any_dir || !id)
      continue;
    extra = json_pack("{s:i}", "pid", (int) pid);
    if (!r->o->dry_run) {
      /* the same process still (pid and start time), then gone */
      if (dsec_process_starttime(pid) == start)
        kill(pid, SIGKILL);
      for (int i = 0; i < 200 && dsec_process_alive(pid, start); i++)
        usleep(10000);
      if (dsec_process_alive(pid, start)) {
        struct dsec_error *e = NULL;
        dsec_fail(&e, EBUSY, "supervisor %d of %s does not die", (int) pid,
                  id);
        ret = put_failed(r, "supervisor", id, "orphan", e, extra, err);
        if (ret < 0)
          break;
        continue;
      }
    }
    json_object_foreach(ids, k, t)
      json_object_set_new(r->killed, k, json_true());
    ret = put(r, "supervisor", id, "orphan", act(r, "killed", "would kill"), 0,
              extra, err);
    if (ret < 0)
      break;
  }
  procs_clear(&p);
  return ret;
}

/* ---- mounts left in our namespace */

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
  char *o = s;
  for (; *s; s++) {
    if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
        s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
      *o++ = (char) ((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
      s += 3;
    } else
      *o++ = *s;
  }
  *o = '\0';
}

static int cmp_len_desc(const void *a, const void *b)
{
  size_t la = strlen(json_string_value(json_array_get(*(json_t *const *) a, 1)));
  size_t lb = strlen(json_string_value(json_array_get(*(json_t *const *) b, 1)));
  return la < lb ? 1 : la > lb ? -1 : 0;
}

static void read_mountinfo(struct reap *r)
{
  free(r->mountinfo);
  r->mountinfo = dsec_read_file_at(AT_FDCWD, "/proc/self/mountinfo", 64 << 20,
                                   NULL, NULL);
}

/* Mounts under a sandbox's directory or run directory whose sandbox has
 * no live supervisor: a supervisor mounts in its own namespace, so these
 * are someone's leftovers, and they would keep the directories from being
 * removed.  Deepest first, detached. */
static int reap_mounts(struct reap *r, struct dsec_error **err)
{
  _cleanup_json_ json_t *found = json_array();
  _cleanup_free_ char *copy = NULL;
  char *save = NULL;
  json_t **v;
  size_t n;
  int ret = 0;

  read_mountinfo(r);
  if (!r->mountinfo)
    return 0;
  copy = xstrdup(r->mountinfo);
  for (char *line = strtok_r(copy, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    char *f[5] = { NULL }, *s2 = NULL, id[DSEC_ID_LEN + 1];
    _cleanup_free_ char *l = xstrdup(line);
    int i = 0;
    for (char *t = strtok_r(l, " ", &s2); t && i < 5; t = strtok_r(NULL, " ", &s2))
      f[i++] = t;
    if (i < 5)
      continue;
    unescape(f[4]);
    if (!id_under(f[4], r->run, id) && !id_under(f[4], r->sbdir, id))
      continue;
    if (has_dir(r, id) && supervisor_alive(id))
      continue;
    json_array_append_new(found, json_pack("[s, s]", id, f[4]));
  }
  n = json_array_size(found);
  if (n == 0)
    return 0;
  v = xmalloc(sizeof *v * n);
  for (size_t i = 0; i < n; i++)
    v[i] = json_array_get(found, i);
  qsort(v, n, sizeof *v, cmp_len_desc);
  for (size_t i = 0; i < n && ret == 0; i++) {
    const char *id = json_string_value(json_array_get(v[i], 0));
    const char *mp = json_string_value(json_array_get(v[i], 1));
    json_t *extra = json_pack("{s:s}", "path", mp);
    if (!r->o->dry_run && umount2(mp, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 &&
        errno != EINVAL && errno != ENOENT) {
      struct dsec_error *e = NULL;
      dsec_fail(&e, errno, "cannot unmount %s", mp);
      ret = put_failed(r, "mount", id, "orphan", e, extra, err);
      continue;
    }
    ret = put(r, "mount", id, "orphan", act(r, "unmounted", "would unmount"),
              0, extra, err);
  }
  free(v);
  return ret;
}

/* ---- sandboxes */

/* created (RFC 3339) as a time, else the time spec.json was written. */
static time_t created_at(json_t *st, const char *dir)
{
  const char *c = json_string_value(json_object_get(st, "created"));
  struct tm tm = { 0 };
  _cleanup_free_ char *spec = xasprintf("%s/spec.json", dir);
  struct stat sb;

  if (c && strptime(c, "%Y-%m-%dT%H:%M:%S", &tm))
    return timegm(&tm);
  if (stat(spec, &sb) == 0)
    return sb.st_mtime;
  return 0;
}

static json_t *read_spec(const char *dir)
{
  _cleanup_free_ char *path = xasprintf("%s/spec.json", dir);
  _cleanup_free_ char *buf = dsec_read_file_at(AT_FDCWD, path, DSEC_SPEC_MAX,
                                               NULL, NULL);
  return buf ? json_loads(buf, 0, NULL) : NULL;
}

/* The states a supervisor writes last, on its way out: after it, it only
 * finishes its audit log and exits (dsec_engine_end). */
static bool final_state(const char *s)
{
  return s && (strcmp(s, "expired") == 0 || strcmp(s, "died") == 0 ||
               strcmp(s, "stopped") == 0);
}

/* The sandbox's supervisor wrote its final state and has not exited yet. */
static bool supervisor_ending(json_t *st)
{
  return final_state(json_string_value(json_object_get(st, "state"))) &&
         dsec_process_alive(
           (pid_t) json_integer_value(json_object_get(st, "supervisor_pid")),
           (uint64_t) json_integer_value(json_object_get(st, "supervisor_start")));
}

/* Why sandbox id should go, or NULL to keep it.  *state gets the state
 * the reaper saw (borrowed from st or a constant). */
static const char *sandbox_reason(struct reap *r, const char *id, json_t *st,
                                  json_t *spec, const char *dir,
                                  const char **state)
{
  const char *s = json_string_value(json_object_get(st, "state"));
  const char *cause = json_string_value(json_object_get(st, "cause"));
  pid_t pid = (pid_t) json_integer_value(json_object_get(st, "supervisor_pid"));
  uint64_t start =
    (uint64_t) json_integer_value(json_object_get(st, "supervisor_start"));
  json_int_t ttl = json_integer_value(json_object_get(spec, "ttl_s"));
  int64_t step;

  *state = st ? (s ? s : "unknown") : "unreadable";
  if (!st)
    return "orphan"; /* a crash mid-removal, or a torn state file */
  {
    /* a world's service goes with its world: when its agent is gone or
     * goes now (whatever the order the two are met in) */
    const char *agent = json_string_value(
      json_object_get(json_object_get(spec, "world"), "agent"));
    if (agent && dsec_sandbox_id_valid(agent) && strcmp(agent, id) != 0) {
      _cleanup_free_ char *adir = xasprintf("%s/%s", r->sbdir, agent);
      _cleanup_json_ json_t *ast = NULL;
      _cleanup_json_ json_t *aspec = NULL;
      const char *astate;
      if (!exists_at(AT_FDCWD, adir))
        return "world";
      ast = dsec_sandbox_state_read(agent, NULL);
      aspec = read_spec(adir);
      if (!json_object_get(aspec, "world") &&
          sandbox_reason(r, agent, ast, aspec, adir, &astate))
        return "world";
    }
  }
  if ((s && strcmp(s, "suspended") == 0 &&
       json_is_true(json_object_get(st, "released"))) ||
      dsec_sandbox_resume_cut(st) || dsec_sandbox_release_cut(st)) {
    /* released: no supervisor by design, waiting for a resume (which
     * gives it a new ttl), or again after a resume killed before its
     * supervisor ran, or after a release killed once answered; only
     * training progress takes it */
    if (r->o->min_step_set && label_step(spec, &step) && step < r->o->min_step)
      return "step";
    return NULL;
  }
  /* a supervisor that wrote a final state is on its way out: the sandbox
   * goes for that state, as once the supervisor is gone */
  if (!final_state(s) && dsec_process_alive(pid, start)) {
    /* a live supervisor enforces ttl_s and idle_timeout_s itself; one
     * that does not (stopped, stuck) is held to ttl_s by the clock */
    if (s && (strcmp(s, "creating") == 0 || strcmp(s, "stopping") == 0))
      return NULL;
    if (r->o->min_step_set && label_step(spec, &step) && step < r->o->min_step)
      return "step";
    if (ttl > 0 && created_at(st, dir) + ttl <= r->now)
      return "ttl";
    return NULL;
  }
  if (s && strcmp(s, "expired") == 0)
    return cause && (strcmp(cause, "ttl") == 0 || strcmp(cause, "idle") == 0)
             ? cause
             : "ttl";
  if (s && strcmp(s, "died") == 0)
    return "died";
  if (s && strcmp(s, "stopped") == 0)
    return "stopped";
  /* running, creating, suspended, stopping: the supervisor was killed
   * before it could say so (kill -9, a crash).  A creation that never
   * named its supervisor is given a minute. */
  if (s && strcmp(s, "creating") == 0 && pid == 0 &&
      age_at(r, AT_FDCWD, dir) < STALE_S)
    return NULL;
  return "orphan";
}

/* A process stopped by a signal (or traced) answers nothing. */
static bool process_stopped(pid_t pid)
{
  char path[64], buf[512];
  _cleanup_close_ int fd = -1;
  ssize_t n;
  char *p;

  snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || (n = read(fd, buf, sizeof buf - 1)) <= 0)
    return false;
  buf[n] = '\0';
  p = strrchr(buf, ')');
  return p && (p[2] == 'T' || p[2] == 't');
}

/* One op on a live supervisor: its answer (new ref), or NULL with an
 * error (an error answer too). */
static json_t *supervisor_call(const char *id, json_t *req,
                               struct dsec_error **err)
{
  struct dsec_conn *c = NULL;
  json_t *res;
  const char *type;

  if (dsec_conn_open(id, &c, err) < 0)
    return NULL;
  res = dsec_conn_call(c, req, err);
  dsec_conn_close(c);
  type = json_string_value(json_object_get(res, "type"));
  if (res && type && strcmp(type, "error") == 0) {
    dsec_fail(err, 0, "%s", json_string_value(json_object_get(res, "error")));
    json_decref(res);
    return NULL;
  }
  return res;
}

/* --suspend-idle: a running sandbox whose last exec ended (or that was
 * created or resumed) S seconds ago, with no exec running, is frozen as
 * `dsec-run suspend` does; `dsec-run resume` thaws it. */
static int maybe_suspend(struct reap *r, const char *id, json_t *st,
                         json_t *spec, const char *dir, struct dsec_error **err)
{
  static const char *const logs[] = { "trajectory.jsonl", "events.jsonl" };
  const char *s = json_string_value(json_object_get(st, "state"));
  pid_t pid = (pid_t) json_integer_value(json_object_get(st, "supervisor_pid"));
  const char *name = json_string_value(json_object_get(spec, "name"));
  time_t last = created_at(st, dir);
  _cleanup_json_ json_t *status = NULL;
  json_t *req, *extra;
  int64_t step;

  if (!s || strcmp(s, "running") != 0 || process_stopped(pid))
    return 0;
  for (size_t i = 0; i < ARRAY_SIZE(logs); i++) {
    _cleanup_free_ char *f = xasprintf("%s/%s", dir, logs[i]);
    time_t t = mtime_at(AT_FDCWD, f);
    if (t > last)
      last = t;
  }
  if (r->now - last < (time_t) r->o->suspend_idle)
    return 0;
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    req = json_pack("{s:s}", "op", "status");
    status = supervisor_call(id, req, &e);
    json_decref(req);
    if (!status || json_integer_value(json_object_get(status, "execs_running")))
      return 0; /* busy, or gone meanwhile */
  }
  extra = json_pack("{s:s, s:I}", "state", s, "idle_s",
                    (json_int_t) (r->now - last));
  if (name)
    json_object_set_new(extra, "name", json_string(name));
  if (label_step(spec, &step))
    json_object_set_new(extra, "step", json_integer((json_int_t) step));
  if (!r->o->dry_run) {
    struct dsec_error *e = NULL;
    json_t *res;
    req = json_pack("{s:s, s:b}", "op", "suspend", "release", false);
    res = supervisor_call(id, req, &e);
    json_decref(req);
    if (!res)
      return put_failed(r, "sandbox", id, "idle", e, extra, err);
    json_decref(res);
  }
  return put(r, "sandbox", id, "idle", act(r, "suspended", "would suspend"), 0,
             extra, err);
}

static int reap_sandboxes(struct reap *r, struct dsec_error **err)
{
  _cleanup_json_ json_t *ids = dsec_sandbox_list(err);
  json_t *v;
  size_t i;
  int ret = 0;

  if (!ids)
    return -1;
  json_array_foreach(ids, i, v)
  {
    const char *id = json_string_value(v);
    _cleanup_free_ char *dir = xasprintf("%s/%s", r->sbdir, id);
    _cleanup_json_ json_t *st = dsec_sandbox_state_read(id, NULL);
    _cleanup_json_ json_t *spec = read_spec(dir);
    const char *state = NULL;
    const char *reason = sandbox_reason(r, id, st, spec, dir, &state);
    const char *name = json_string_value(json_object_get(spec, "name"));
    int64_t freed, step;
    json_t *extra;

    if (!reason) {
      /* (a world is frozen as one by dsec-run suspend, never member by
       * member here) */
      if (r->o->suspend_idle_set && st && !json_object_get(spec, "world") &&
          !json_object_get(spec, "services")) {
        ret = maybe_suspend(r, id, st, spec, dir, err);
        if (ret < 0)
          return ret;
      }
      continue;
    }
    extra = json_pack("{s:s}", "state", state);
    if (name)
      json_object_set_new(extra, "name", json_string(name));
    if (label_step(spec, &step))
      json_object_set_new(extra, "step", json_integer((json_int_t) step));
    freed = dsec_disk_usage_at(AT_FDCWD, dir);
    if (!r->o->dry_run) {
      struct dsec_error *e = NULL;
      /* at once: the sandbox is going, and a stuck supervisor must not
       * hold the reaper up; one finishing its exit is given the moment
       * (5 s at most) to write the end of its audit log */
      if (dsec_sandbox_stop(id, !supervisor_ending(st), &e) < 0 ||
          exists_at(AT_FDCWD, dir)) {
        if (!exists_at(AT_FDCWD, dir)) {
          /* removed meanwhile (dsec-run rm): nothing of ours to report */
          dsec_error_free(e);
          json_decref(extra);
          continue;
        }
        if (!e)
          dsec_fail(&e, EBUSY, "%s is still there", dir);
        ret = put_failed(r, "sandbox", id, reason, e, extra, err);
        if (ret < 0)
          return ret;
        continue;
      }
    }
    json_object_set_new(r->doomed, id, json_true());
    ret = put(r, "sandbox", id, reason, act(r, "removed", "would remove"),
              freed, extra, err);
    if (ret < 0)
      return ret;
  }
  return 0;
}

/* ---- this host's mounts of layers' EROFS images */

/* The host's shared sysfs, /dev tmpfs and template mount namespace
 * (layermount.h) go with the last sandbox of this root (used: what the
 * sandboxes reference, none when there is none): what sysfs_mount, id
 * "sysfs", what dev_mount, id "dev", and what mount_ns, id "rootns".
 * Sandboxes hold clones or copies of their own; a creation taking its
 * own holds the lock (then the next run). */
static int reap_shared_mount(struct reap *r, json_t *used, const char *dir,
                             const char *what, bool mounted,
                             struct dsec_error **err)
{
  _cleanup_free_ char *mnt = NULL;
  bool busy = false;

  if (json_object_size(used) > 0 || !mounted)
    return 0;
  mnt = xasprintf("%s/layers/%s/mnt", r->run, dir);
  if (!r->o->dry_run) {
    struct dsec_error *e = NULL;
    if (dsec_layer_unmount(r->run, dir, &busy, &e) < 0)
      return put_failed(r, what, dir, "unused", e,
                        json_pack("{s:s}", "path", mnt), err);
    if (busy)
      return 0;
  }
  return put(r, what, dir, "unused", act(r, "unmounted", "would unmount"), 0,
             json_pack("{s:s}", "path", mnt), err);
}

/* A layer mount under $DSEC_RUN/layers that no sandbox of this root uses
 * (none lists the layer in its environment.json) is unmounted; one whose
 * lock a creation holds (it is taking its clone) is left for the next
 * run.  Sandboxes that run from a layer hold clones of their own, so an
 * unmount never reaches them; its loop device, if any, detaches itself
 * when the last of them goes.  The bind mount of $DSEC_RUN/layers goes
 * with the last layer mount (and the sysfs and template). */
static int reap_layer_mounts(struct reap *r, struct dsec_error **err)
{
  _cleanup_json_ json_t *mounts = dsec_layer_mounts_list(r->run);
  _cleanup_json_ json_t *used = NULL;
  json_t *m;
  size_t i;
  int ret = 0;

  if (json_array_size(mounts) == 0 && !dsec_sysfs_mounted(r->run) &&
      !dsec_devfs_mounted(r->run) && !dsec_rootns_mounted(r->run)) {
    if (!r->o->dry_run && dsec_layer_unbind(r->run, err) < 0)
      return -1;
    return 0;
  }
  /* a dry run counts the sandboxes it would remove as gone, as the real
   * run has removed them by now */
  used = dsec_sandbox_references_except(r->o->dry_run ? r->doomed : NULL, err);
  if (!used)
    return -1;
  if (reap_shared_mount(r, used, DSEC_SYSFS_DIR, "sysfs_mount",
                        dsec_sysfs_mounted(r->run), err) < 0 ||
      reap_shared_mount(r, used, DSEC_DEVFS_DIR, "dev_mount",
                        dsec_devfs_mounted(r->run), err) < 0 ||
      reap_shared_mount(r, used, DSEC_ROOTNS_DIR, "mount_ns",
                        dsec_rootns_mounted(r->run), err) < 0)
    return -1;
  json_array_foreach(mounts, i, m)
  {
    const char *d = json_string_value(json_object_get(m, "digest"));
    json_t *extra;
    bool busy = false;
    if (!d || !dsec_digest_valid(d) || json_object_get(used, d))
      continue;
    extra = json_pack("{s:O}", "path", json_object_get(m, "path"));
    if (json_object_get(m, "backing"))
      json_object_set(extra, "backing", json_object_get(m, "backing"));
    if (json_object_get(m, "device"))
      json_object_set(extra, "device", json_object_get(m, "device"));
    if (!r->o->dry_run) {
      struct dsec_error *e = NULL;
      if (dsec_layer_unmount(r->run, dsec_digest_hex(d), &busy, &e) < 0) {
        ret = put_failed(r, "layer_mount", d, "unused", e, extra, err);
        if (ret < 0)
          return ret;
        continue;
      }
      if (busy) {
        json_decref(extra);
        continue;
      }
    }
    ret = put(r, "layer_mount", d, "unused",
              act(r, "unmounted", "would unmount"), 0, extra, err);
    if (ret < 0)
      return ret;
  }
  if (!r->o->dry_run && dsec_layer_unbind(r->run, err) < 0)
    return -1;
  return 0;
}

/* ---- run directories, names, temporary files of the root */

static int reap_stale_in(struct reap *r, int dirfd, const char *path,
                         bool recurse, struct dsec_error **err);

/* Run directories without a sandbox directory (a removal or a creation
 * killed half way), and the stale temporary files of the cache of
 * compiled seccomp filters (a creation killed while it wrote one). */
static int reap_run_dirs(struct reap *r, struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = opendir(r->run);
  struct dirent *de;
  int ret = 0;

  if (!d)
    return 0;
  while ((de = readdir(d)) && ret == 0) {
    _cleanup_free_ char *path = NULL;
    if (!dsec_sandbox_id_valid(de->d_name) || has_dir(r, de->d_name))
      continue;
    path = xasprintf("%s/%s", r->run, de->d_name);
    ret = remove_put(r, dirfd(d), de->d_name, "run_dir", de->d_name, "orphan",
                     json_pack("{s:s}", "path", path), err);
  }
  if (ret == 0) {
    _cleanup_free_ char *path = xasprintf("%s/seccomp", r->run);
    _cleanup_close_ int fd = openat(dirfd(d), "seccomp",
                                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                      O_CLOEXEC);
    if (fd >= 0)
      ret = reap_stale_in(r, fd, path, false, err);
  }
  return ret;
}

/* Whether some process holds an flock on the file dev/ino, as
 * /proc/locks says: how a dry run tells without taking a lock. */
static bool flock_held(dev_t dev, ino_t ino)
{
  _cleanup_fclose_ FILE *f = fopen("/proc/locks", "re");
  char line[256];

  while (f && fgets(line, sizeof line, f)) {
    char type[16];
    unsigned maj, min;
    unsigned long long i;
    /* "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INO START END"; a waiter's
     * line has "->" where the type is */
    if (sscanf(line, "%*d: %15s %*s %*s %*d %x:%x:%llu", type, &maj, &min,
               &i) == 4 &&
        strcmp(type, "FLOCK") == 0 && makedev(maj, min) == dev &&
        (ino_t) i == ino)
      return true;
  }
  return false;
}

/* Whether a remover holds fd's file locked: a dry run looks in
 * /proc/locks; a real run takes the lock (EWOULDBLOCK: held; any other
 * failure, a file system without flock, means that nobody could). */
static bool being_removed(struct reap *r, int fd)
{
  struct stat st;
  if (r->o->dry_run)
    return fstat(fd, &st) < 0 || flock_held(st.st_dev, st.st_ino);
  return flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
}

/* <top>/removing/: the directories of removed sandboxes that dsec-run rm
 * moved aside for a detached process to remove (sandbox.h).  That
 * process holds an flock on each until it is gone, so one that can be
 * locked has no remover left. */
static int reap_removing(struct reap *r, const char *top,
                         struct dsec_error **err)
{
  _cleanup_free_ char *dir = xasprintf("%s/" DSEC_REMOVING_DIR, top);
  _cleanup_closedir_ DIR *d = opendir(dir);
  struct dirent *de;
  int ret = 0;

  if (!d)
    return 0;
  while ((de = readdir(d)) && ret == 0) {
    _cleanup_free_ char *path = NULL;
    _cleanup_close_ int fd = -1;
    if (!is_tmp_name(de->d_name))
      continue;
    /* not only directories: anything else there is nobody's either */
    fd = openat(dirfd(d), de->d_name,
                O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno != ELOOP)
      continue;
    /* a symbolic link (ELOOP) has no lock to look at */
    if (fd >= 0 && being_removed(r, fd))
      continue;
    path = xasprintf("%s/%s", dir, de->d_name);
    ret = remove_put(r, dirfd(d), de->d_name, "tmp", path, "stale", NULL, err);
  }
  return ret;
}

/* ---- directories of the host's shared /dev tmpfs (layermount.h) */

/* A sandbox's directory there whose sandbox is gone (a creation killed
 * before its directory was in place, a removal killed before it came to
 * it), once a minute old: a creation makes it before its sandbox's
 * directory.  Then what removals moved aside there and left. */
static int reap_dev_dirs(struct reap *r, struct dsec_error **err)
{
  _cleanup_free_ char *top = NULL;
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int ret = 0;

  if (!dsec_devfs_mounted(r->run))
    return 0;
  top = xasprintf("%s/layers/" DSEC_DEVFS_DIR "/mnt", r->run);
  d = opendir(top);
  while (d && (de = readdir(d)) && ret == 0) {
    _cleanup_free_ char *path = NULL;
    _cleanup_free_ char *tmp = NULL;
    if (!dsec_sandbox_id_valid(de->d_name) ||
        age_at(r, dirfd(d), de->d_name) < STALE_S)
      continue;
    /* a creation still on its way (a stalled one: its directory is made
     * under a temporary name, then renamed: looked for first) */
    tmp = xasprintf("%s/.tmp-%s", r->sbdir, de->d_name);
    if (exists_at(AT_FDCWD, tmp) || has_dir(r, de->d_name))
      continue;
    path = xasprintf("%s/%s", top, de->d_name);
    ret = remove_put(r, dirfd(d), de->d_name, "dev_dir", de->d_name, "orphan",
                     json_pack("{s:s}", "path", path), err);
  }
  if (ret == 0)
    ret = reap_removing(r, top, err);
  return ret;
}

/* Names whose sandbox is gone. */
static int reap_names(struct reap *r, struct dsec_error **err)
{
  _cleanup_free_ char *dir = xasprintf("%s/names", r->root);
  _cleanup_closedir_ DIR *d = opendir(dir);
  struct dirent *de;
  int ret = 0;

  if (!d)
    return 0;
  while ((de = readdir(d)) && ret == 0) {
    _cleanup_free_ char *buf = NULL;
    _cleanup_free_ char *path = NULL;
    if (de->d_name[0] == '.' || is_tmp_name(de->d_name))
      continue;
    buf = dsec_read_file_at(dirfd(d), de->d_name, 64, NULL, NULL);
    if (!buf)
      continue;
    buf[strcspn(buf, "\n")] = '\0';
    if (!dsec_sandbox_id_valid(buf) || has_dir(r, buf))
      continue;
    path = xasprintf("%s/%s", dir, de->d_name);
    if (!r->o->dry_run) {
      /* still the same (a claim may have replaced a stale name) */
      _cleanup_free_ char *again = dsec_read_file_at(dirfd(d), de->d_name, 64,
                                                     NULL, NULL);
      if (!again || strncmp(again, buf, strlen(buf)) != 0)
        continue;
      if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
        struct dsec_error *e = NULL;
        dsec_fail(&e, errno, "cannot remove %s", path);
        ret = put_failed(r, "name", de->d_name, "orphan", e,
                         json_pack("{s:s, s:s}", "sandbox", buf, "path", path),
                         err);
        continue;
      }
    }
    ret = put(r, "name", de->d_name, "orphan",
              act(r, "removed", "would remove"), 0,
              json_pack("{s:s, s:s}", "sandbox", buf, "path", path), err);
  }
  return ret;
}

/* Host id ranges whose sandbox is gone (rm frees its own; a crash or a
 * create that died half-way leaves one behind). */
static void collect_id(void *ud, const char *slot, const char *owner)
{
  json_array_append_new(ud, json_pack("{s:s, s:s?}", "slot", slot, "sandbox",
                                      owner));
}

static int reap_ids(struct reap *r, struct dsec_error **err)
{
  _cleanup_json_ json_t *gone = json_array();
  json_t *g;
  size_t i;
  int ret = 0;

  dsec_idrange_collect(STALE_S, !r->o->dry_run, collect_id, gone);
  json_array_foreach(gone, i, g)
  {
    _cleanup_free_ char *path = xasprintf(
      "%s/ids/%s", r->root, json_string_value(json_object_get(g, "slot")));
    json_t *extra = json_pack("{s:s}", "path", path);
    if (json_object_get(g, "sandbox"))
      json_object_set(extra, "sandbox", json_object_get(g, "sandbox"));
    ret = put(r, "ids", json_string_value(json_object_get(g, "slot")),
              "orphan", act(r, "removed", "would remove"), 0, extra, err);
    if (ret < 0)
      break;
  }
  return ret;
}

/* Removes the "*.tmp-*" entries of dirfd (the directory at path) older
 * than STALE_S; with recurse, also in its subdirectories (not crossing
 * into tmp entries). */
static int reap_stale_in(struct reap *r, int dirfd, const char *path,
                         bool recurse, struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(dirfd, ".");
  struct dirent *de;
  int ret = 0;

  if (!d)
    return 0;
  while ((de = readdir(d)) && ret == 0) {
    _cleanup_free_ char *full = NULL;
    int64_t age;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    full = xasprintf("%s/%s", path, de->d_name);
    if (!is_tmp_name(de->d_name)) {
      struct stat st;
      if (recurse && fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISDIR(st.st_mode)) {
        _cleanup_close_ int sub = openat(dirfd, de->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                           O_CLOEXEC);
        if (sub >= 0)
          ret = reap_stale_in(r, sub, full, true, err);
      }
      continue;
    }
    age = age_at(r, dirfd, de->d_name);
    if (age < STALE_S)
      continue;
    ret = remove_put(r, dirfd, de->d_name, "tmp", full, "stale", NULL, err);
  }
  return ret;
}

static int reap_root_tmp(struct reap *r, struct dsec_error **err)
{
  _cleanup_close_ int sb = open(r->sbdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_free_ char *names = xasprintf("%s/names", r->root);
  _cleanup_close_ int nfd = open(names, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int ret = 0;

  if (nfd >= 0) {
    ret = reap_stale_in(r, nfd, names, false, err);
    if (ret < 0)
      return ret;
  }
  if (sb < 0)
    return 0;
  /* sandboxes/.tmp-<id>: creations killed before their directory was
   * renamed into place */
  ret = reap_stale_in(r, sb, r->sbdir, false, err);
  if (ret < 0)
    return ret;
  /* and each sandbox's own (state.json.tmp-...), not inside upper/ */
  d = dsec_opendir_at(sb, ".");
  while (d && (de = readdir(d)) && ret == 0) {
    _cleanup_close_ int fd = -1;
    _cleanup_free_ char *path = NULL;
    if (!dsec_sandbox_id_valid(de->d_name))
      continue;
    fd = openat(sb, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      continue;
    path = xasprintf("%s/%s", r->sbdir, de->d_name);
    ret = reap_stale_in(r, fd, path, false, err);
  }
  return ret;
}

/* ---- cgroups */

struct cg_dir {
  char *path;
  char id[DSEC_ID_LEN + 1];
  bool v2, freezer;
};

struct cg_list {
  struct cg_dir *v;
  size_t n;
};

static void cg_list_clear(struct cg_list *l)
{
  for (size_t i = 0; i < l->n; i++)
    free(l->v[i].path);
  free(l->v);
}

static void cg_scan_parent(struct cg_list *l, const char *parent, bool freezer,
                           dev_t *seen_dev, ino_t *seen_ino, size_t *nseen)
{
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  struct statfs sf;
  struct stat st;
  bool v2;

  if (stat(parent, &st) < 0 || !S_ISDIR(st.st_mode))
    return;
  /* cpu and cpuacct are links to one hierarchy: each is scanned once */
  for (size_t i = 0; i < *nseen; i++)
    if (seen_dev[i] == st.st_dev && seen_ino[i] == st.st_ino)
      return;
  if (*nseen < 64) {
    seen_dev[*nseen] = st.st_dev;
    seen_ino[*nseen] = st.st_ino;
    (*nseen)++;
  }
  v2 = statfs(parent, &sf) == 0 && (long) sf.f_type == CGROUP2_SUPER_MAGIC;
  d = opendir(parent);
  while (d && (de = readdir(d))) {
    struct cg_dir *c;
    if (!dsec_sandbox_id_valid(de->d_name))
      continue;
    l->v = xrealloc(l->v, sizeof *l->v * (l->n + 1));
    c = &l->v[l->n++];
    c->path = xasprintf("%s/%s", parent, de->d_name);
    memcpy(c->id, de->d_name, sizeof c->id); /* a valid id: 19 + NUL */
    c->v2 = v2;
    c->freezer = freezer;
  }
}

/* Every <hierarchy>/dsec/sb-* directory, v1 and v2. */
static void cg_scan(struct cg_list *l)
{
  _cleanup_closedir_ DIR *d = opendir(CG_ROOT);
  struct dirent *de;
  dev_t dev[64];
  ino_t ino[64];
  size_t n = 0;

  cg_scan_parent(l, CG_ROOT "/dsec", false, dev, ino, &n);
  while (d && (de = readdir(d))) {
    _cleanup_free_ char *parent = NULL;
    if (de->d_name[0] == '.')
      continue;
    parent = xasprintf(CG_ROOT "/%s/dsec", de->d_name);
    cg_scan_parent(l, parent, strstr(de->d_name, "freezer") != NULL, dev, ino,
                   &n);
  }
}

/* Kills what is in the cgroup at path and removes it, its children
 * first (the libcommon cgroup code does the killing and the waiting). */
static int cg_destroy_dir(const char *path, bool v2, bool freezer,
                          struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = opendir(path);
  struct dirent *de;
  struct dsec_cgroup cg;
  int slot = freezer ? DSEC_CG_FREEZER : DSEC_CG_MEMORY;

  while (d && (de = readdir(d))) {
    struct stat st;
    _cleanup_free_ char *sub = NULL;
    if (de->d_name[0] == '.')
      continue;
    sub = xasprintf("%s/%s", path, de->d_name);
    if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode) &&
        cg_destroy_dir(sub, v2, freezer, err) < 0)
      return -1;
  }
  memset(&cg, 0, sizeof cg);
  cg.path[slot] = (char *) path;
  cg.v2[slot] = v2;
  return dsec_cgroup_destroy(&cg, err);
}

static int cmp_cg(const void *a, const void *b)
{
  const struct cg_dir *x = a, *y = b;
  /* frozen v1 tasks die only once thawed: freezer hierarchies first */
  if (x->freezer != y->freezer)
    return x->freezer ? -1 : 1;
  return strcmp(x->path, y->path);
}

/* cgroups of no live sandbox.  Listed before the processes are looked at:
 * a cgroup seen here was made by a supervisor that already held its
 * sandbox's files open, so it is found if it still lives. */
static int reap_cgroups(struct reap *r, struct dsec_error **err)
{
  struct cg_list l = { NULL, 0 };
  struct procs p;
  int ret = 0;

  cg_scan(&l);
  if (l.n == 0)
    return 0;
  scan_procs(r, &p);
  if (p.uncertain)
    dsec_debug("some dsec processes' files cannot be read: only cgroups of "
               "this root's sandboxes are collected");
  qsort(l.v, l.n, sizeof *l.v, cmp_cg);
  for (size_t i = 0; i < l.n && ret == 0; i++) {
    struct cg_dir *c = &l.v[i];
    json_t *extra;
    /* a supervisor killed above (or, with dry_run, to be killed) may
     * leave a dying process behind that still holds its files; and with
     * dry_run a sandbox to be removed takes its cgroups along */
    if (json_object_get(p.any, c->id) && !json_object_get(r->killed, c->id))
      continue;
    if (r->o->dry_run && json_object_get(r->doomed, c->id))
      continue;
    if (has_dir(r, c->id) && supervisor_alive(c->id))
      continue;
    /* without a full view of the processes, a cgroup is ours to judge
     * only when its sandbox is this root's */
    if (p.uncertain && !has_dir(r, c->id))
      continue;
    /* the cgroup tree is the host's: one of no sandbox of this root may
     * be another root's, made a moment ago by a create whose processes
     * are not in it yet (or left by an rm still at work); such a one
     * goes once it is STALE_S old, unless we killed its supervisor */
    if (!has_dir(r, c->id) && !json_object_get(r->killed, c->id) &&
        age_at(r, AT_FDCWD, c->path) < STALE_S)
      continue;
    extra = json_pack("{s:s}", "path", c->path);
    if (!r->o->dry_run) {
      struct dsec_error *e = NULL;
      if (cg_destroy_dir(c->path, c->v2, c->freezer, &e) < 0) {
        ret = put_failed(r, "cgroup", c->id, "orphan", e, extra, err);
        continue;
      }
    }
    ret = put(r, "cgroup", c->id, "orphan", act(r, "removed", "would remove"),
              0, extra, err);
  }
  procs_clear(&p);
  cg_list_clear(&l);
  return ret;
}

/* ---- the store */

struct cand {
  const char *what;                  /* "image", "layer", "blob" or "vm-boot" */
  char digest[DSEC_DIGEST_LEN + 1];
  char config[DSEC_DIGEST_LEN + 1];  /* an image's config blob going with it */
  int64_t bytes;
  time_t mtime;
};

static void mark(struct dsec_store *s, json_t *live, const char *digest)
{
  _cleanup_json_ json_t *img = NULL;
  json_t *l;
  size_t i;

  if (!digest || !dsec_digest_valid(digest) || json_object_get(live, digest))
    return;
  json_object_set_new(live, digest, json_true());
  if (dsec_store_kind(s, digest) != DSEC_KIND_IMAGE)
    return;
  img = dsec_image_record(s, digest, NULL);
  if (!img)
    return;
  {
    const char *cfg = json_string_value(json_object_get(img, "config_digest"));
    if (cfg && dsec_digest_valid(cfg))
      json_object_set_new(live, cfg, json_true());
  }
  json_array_foreach(json_object_get(img, "layers"), i, l)
  {
    const char *d = json_string_value(json_object_get(l, "digest"));
    if (d && dsec_digest_valid(d))
      json_object_set_new(live, d, json_true());
  }
}

/* The roots: names, source references and every sandbox's environment;
 * and what they need. */
static json_t *mark_live(struct reap *r, struct dsec_store *s,
                         struct dsec_error **err)
{
  _cleanup_json_ json_t *refs = dsec_ref_list(s, err);
  _cleanup_json_ json_t *sb = NULL;
  _cleanup_closedir_ DIR *d = NULL;
  json_t *live, *v;
  struct dirent *de;
  const char *k;
  size_t i;

  if (!refs)
    return NULL;
  sb = dsec_sandbox_references_except(r->o->dry_run ? r->doomed : NULL, err);
  if (!sb)
    return NULL;
  live = json_object();
  json_array_foreach(refs, i, v)
    mark(s, live, json_string_value(json_object_get(v, "digest")));
  d = dsec_opendir_at(s->sources_fd, ".");
  while (d && (de = readdir(d))) {
    _cleanup_free_ char *buf = NULL;
    _cleanup_json_ json_t *j = NULL;
    size_t len;
    if (de->d_name[0] == '.' || is_tmp_name(de->d_name))
      continue;
    buf = dsec_read_file_at(s->sources_fd, de->d_name, 65536, &len, NULL);
    if (buf && (j = json_loadb(buf, len, 0, NULL)))
      mark(s, live, json_string_value(json_object_get(j, "digest")));
  }
  json_object_foreach(sb, k, v)
    mark(s, live, k);
  /* an image recorded in the last minute keeps its layers as a root
   * would: see STALE_S */
  dsec_closedirp(&d);
  d = NULL;
  d = dsec_opendir_at(s->images_fd, ".");
  while (d && (de = readdir(d))) {
    char digest[DSEC_DIGEST_LEN + 1];
    if (strlen(de->d_name) != DSEC_SHA256_HEX_LEN + 5 ||
        !dsec_str_has_suffix(de->d_name, ".json") ||
        r->now - mtime_at(s->images_fd, de->d_name) >= STALE_S)
      continue;
    snprintf(digest, sizeof digest, "sha256:%.64s", de->d_name);
    mark(s, live, digest);
  }
  return live;
}

/* A layer mounted in our namespace (a mount point or an overlay's lower
 * directory under it) or backing a loop device is in use. */
static bool layer_mounted(struct reap *r, struct dsec_store *s,
                          const char *hex)
{
  _cleanup_free_ char *p = xasprintf("%s/layers/%s", s->path, hex);
  return dsec_path_in_use(r->mountinfo, p);
}

static void add_cand(struct cand **v, size_t *n, const char *what,
                     const char *hex, int64_t bytes, time_t mtime)
{
  struct cand *c;
  *v = xrealloc(*v, sizeof **v * (*n + 1));
  c = &(*v)[(*n)++];
  memset(c, 0, sizeof *c);
  c->what = what;
  snprintf(c->digest, sizeof c->digest, "sha256:%s", hex);
  c->bytes = bytes;
  c->mtime = mtime;
}

/* The unreferenced objects: image records (with their manifest blob, and
 * their config blob unless something else needs it), layers (blob and
 * materialised trees) and any other blob. */
static void find_candidates(struct reap *r, struct dsec_store *s, json_t *live,
                            struct cand **v, size_t *n)
{
  _cleanup_json_ json_t *claimed = json_object();
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;

  d = dsec_opendir_at(s->images_fd, ".");
  while (d && (de = readdir(d))) {
    char hex[DSEC_SHA256_HEX_LEN + 1], digest[DSEC_DIGEST_LEN + 1];
    _cleanup_json_ json_t *img = NULL;
    const char *cfg;
    struct cand *c;
    if (strlen(de->d_name) != DSEC_SHA256_HEX_LEN + 5 ||
        !dsec_str_has_suffix(de->d_name, ".json"))
      continue;
    snprintf(hex, sizeof hex, "%.64s", de->d_name);
    snprintf(digest, sizeof digest, "sha256:%s", hex);
    if (!dsec_digest_hex_valid(hex) || json_object_get(live, digest))
      continue;
    add_cand(v, n, "image", hex,
             dsec_disk_usage_at(s->images_fd, de->d_name) +
               dsec_disk_usage_at(s->blobs_fd, hex),
             mtime_at(s->images_fd, de->d_name));
    c = &(*v)[*n - 1];
    json_object_set_new(claimed, digest, json_true());
    img = dsec_image_record(s, digest, NULL);
    cfg = json_string_value(json_object_get(img, "config_digest"));
    if (cfg && dsec_digest_valid(cfg) && !json_object_get(live, cfg) &&
        !json_object_get(claimed, cfg)) {
      snprintf(c->config, sizeof c->config, "%s", cfg);
      c->bytes += dsec_disk_usage_at(s->blobs_fd, dsec_digest_hex(cfg));
      json_object_set_new(claimed, cfg, json_true());
    }
  }
  dsec_closedirp(&d);
  d = NULL;

  d = dsec_opendir_at(s->layers_fd, ".");
  while (d && (de = readdir(d))) {
    char digest[DSEC_DIGEST_LEN + 1];
    time_t t;
    static const char *const parts[] = { "meta.json", "rootfs", "layer.erofs",
                                         "layer.pmem" };
    if (!dsec_digest_hex_valid(de->d_name))
      continue;
    snprintf(digest, sizeof digest, "sha256:%s", de->d_name);
    if (json_object_get(live, digest) || layer_mounted(r, s, de->d_name))
      continue;
    t = mtime_at(s->layers_fd, de->d_name);
    if (mtime_at(s->blobs_fd, de->d_name) > t)
      t = mtime_at(s->blobs_fd, de->d_name);
    for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
      _cleanup_free_ char *p = xasprintf("%s/%s", de->d_name, parts[i]);
      if (mtime_at(s->layers_fd, p) > t)
        t = mtime_at(s->layers_fd, p);
    }
    add_cand(v, n, "layer", de->d_name,
             dsec_disk_usage_at(s->layers_fd, de->d_name) +
               dsec_disk_usage_at(s->blobs_fd, de->d_name),
             t);
    json_object_set_new(claimed, digest, json_true());
  }
  dsec_closedirp(&d);
  d = NULL;

  {
    /* dsec-vm's boot entries that no create will use again (built for a
     * kernel or agent since replaced) */
    _cleanup_json_ json_t *unused = dsec_vm_boot_unused(s, VM_BOOT_MIN_AGE);
    json_t *e;
    size_t i;
    json_array_foreach(unused, i, e)
      add_cand(v, n, "vm-boot",
               dsec_digest_hex(json_string_value(json_object_get(e, "key"))),
               json_integer_value(json_object_get(e, "bytes")),
               (time_t) json_integer_value(json_object_get(e, "mtime")));
  }

  d = dsec_opendir_at(s->blobs_fd, ".");
  while (d && (de = readdir(d))) {
    char digest[DSEC_DIGEST_LEN + 1];
    if (!dsec_digest_hex_valid(de->d_name))
      continue;
    snprintf(digest, sizeof digest, "sha256:%s", de->d_name);
    if (json_object_get(live, digest) || json_object_get(claimed, digest))
      continue;
    add_cand(v, n, "blob", de->d_name,
             dsec_disk_usage_at(s->blobs_fd, de->d_name),
             mtime_at(s->blobs_fd, de->d_name));
  }
}

static int cmp_cand(const void *a, const void *b)
{
  const struct cand *x = a, *y = b;
  bool xi = strcmp(x->what, "image") == 0, yi = strcmp(y->what, "image") == 0;
  /* image records first: they hold nothing alive and their layers are
   * then plain unreferenced layers; after that the oldest first */
  if (xi != yi)
    return xi ? -1 : 1;
  if (x->mtime != y->mtime)
    return x->mtime < y->mtime ? -1 : 1;
  return strcmp(x->digest, y->digest);
}

static bool has_tmp_entries(int dirfd, const char *name)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(dirfd, name);
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (is_tmp_name(de->d_name))
      return true;
  return false;
}

/* Removes a candidate: its name-giving file first (the image record, the
 * layer's blob), so that a kill -9 half way leaves unreferenced leftovers
 * the next run removes. */
static int remove_cand(struct dsec_store *s, const struct cand *c,
                       struct dsec_error **err)
{
  const char *hex = dsec_digest_hex(c->digest);

  if (strcmp(c->what, "image") == 0) {
    _cleanup_free_ char *rec = xasprintf("%s.json", hex);
    if (unlinkat(s->images_fd, rec, 0) < 0 && errno != ENOENT)
      return dsec_fail(err, errno, "cannot remove image %s", c->digest);
    if (unlinkat(s->blobs_fd, hex, 0) < 0 && errno != ENOENT)
      return dsec_fail(err, errno, "cannot remove blob %s", c->digest);
    if (c->config[0] &&
        unlinkat(s->blobs_fd, dsec_digest_hex(c->config), 0) < 0 &&
        errno != ENOENT)
      return dsec_fail(err, errno, "cannot remove blob %s", c->config);
    return 0;
  }
  if (strcmp(c->what, "layer") == 0) {
    _cleanup_close_ int lock = -1;
    /* a materialisation in progress (its temporary tree is there) holds
     * the layer's lock: wait for it */
    if (has_tmp_entries(s->layers_fd, hex)) {
      lock = dsec_store_lock(s, "layer", c->digest, err);
      if (lock < 0)
        return -1;
    }
    {
      /* the tree goes out of sight first, under a name the next run
       * removes whatever its age: a reaper killed here or below leaves
       * no young-looking half layer behind */
      _cleanup_free_ char *trash = xasprintf("%s%s", TRASH_PREFIX, hex);
      if (dsec_rm_rf_at(s->layers_fd, trash, err) < 0 ||
          (renameat(s->layers_fd, hex, s->layers_fd, trash) < 0 &&
           errno != ENOENT &&
           dsec_fail(err, errno, "cannot remove layer %s", c->digest) < 0))
        return dsec_error_wrap(err, "layer %s", c->digest);
      if (unlinkat(s->blobs_fd, hex, 0) < 0 && errno != ENOENT)
        return dsec_fail(err, errno, "cannot remove blob %s", c->digest);
      if (dsec_rm_rf_at(s->layers_fd, trash, err) < 0)
        return dsec_error_wrap(err, "layer %s", c->digest);
    }
    return 0;
  }
  if (strcmp(c->what, "vm-boot") == 0)
    return dsec_vm_boot_remove(s, c->digest, err);
  if (unlinkat(s->blobs_fd, hex, 0) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove blob %s", c->digest);
  return 0;
}

/* Layers an earlier run was removing when it was killed (see remove_cand):
 * gone now, whatever their age (we hold the gc lock). */
static int reap_trash(struct reap *r, struct dsec_store *s,
                      struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int dfd = dup(s->layers_fd);

  if (r->o->dry_run || dfd < 0 || !(d = fdopendir(dfd))) {
    if (dfd >= 0 && !d)
      close(dfd);
    return 0;
  }
  while ((de = readdir(d))) {
    if (!dsec_str_has_prefix(de->d_name, TRASH_PREFIX))
      continue;
    if (dsec_rm_rf_at(s->layers_fd, de->d_name, err) < 0)
      return dsec_error_wrap(err, "layers/%s", de->d_name);
  }
  return 0;
}

static int store_gc(struct reap *r, struct dsec_store *s, int64_t *store_bytes,
                    struct dsec_error **err)
{
  _cleanup_json_ json_t *live = mark_live(r, s, err);
  struct cand *v = NULL;
  size_t n = 0;
  int64_t total = 0;
  int ret = 0;

  if (!live)
    return -1;
  read_mountinfo(r);
  if (reap_trash(r, s, err) < 0)
    return -1;
  find_candidates(r, s, live, &v, &n);
  if (n > 1)
    qsort(v, n, sizeof *v, cmp_cand);
  if (r->o->store_max_set)
    total = dsec_disk_usage_at(s->fd, ".");
  for (size_t i = 0; i < n && ret == 0; i++) {
    struct cand *c = &v[i];
    /* what was written or materialised in the last minute may be about to
     * be referenced by whoever made it (a checkpoint recorded just after,
     * a layer created for the next create): it waits for the next run */
    bool young = r->now - c->mtime < STALE_S;
    bool go = !young &&
              (r->o->all ||
               (r->o->store_max_set && total > (int64_t) r->o->store_max));
    json_t *extra = json_pack("{s:I}", "size_bytes", (json_int_t) c->bytes);
    if (!go) {
      ret = put(r, c->what, c->digest, "unreferenced", "kept", 0, extra, err);
      continue;
    }
    if (!r->o->dry_run) {
      struct dsec_error *e = NULL;
      if (remove_cand(s, c, &e) < 0) {
        ret = put_failed(r, c->what, c->digest, "unreferenced", e, extra, err);
        continue;
      }
    }
    total -= c->bytes;
    ret = put(r, c->what, c->digest, "unreferenced",
              act(r, "removed", "would remove"), c->bytes, extra, err);
  }
  free(v);
  *store_bytes = total;
  return ret;
}

/* store/tmp: blobs being written hold a lock on their file; an unlocked
 * one is a crash's leftover.  Directories (trees being made) have no lock:
 * they go once older than a minute.  Under the gc lock held exclusively
 * no writer runs at all; with dry_run (gc lock shared) only files older
 * than a minute are tested, so the test never races a writer taking its
 * lock. */
static int reap_store_tmp(struct reap *r, struct dsec_store *s,
                          struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(s->tmp_fd, ".");
  struct dirent *de;
  int ret = 0;

  while (d && (de = readdir(d)) && ret == 0) {
    _cleanup_free_ char *path = NULL;
    _cleanup_close_ int fd = -1;
    struct stat st;
    int64_t freed;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (fstatat(s->tmp_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    if (S_ISDIR(st.st_mode) || (r->o->dry_run && S_ISREG(st.st_mode))) {
      if (r->now - st.st_mtime < STALE_S)
        continue;
    }
    if (S_ISREG(st.st_mode)) {
      fd = openat(s->tmp_fd, de->d_name,
                  O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0)
        continue;
      if (flock(fd, LOCK_EX | LOCK_NB) < 0)
        continue; /* its writer is alive */
    }
    path = xasprintf("%s/tmp/%s", s->path, de->d_name);
    freed = dsec_disk_usage_at(s->tmp_fd, de->d_name);
    if (!r->o->dry_run) {
      struct dsec_error *e = NULL;
      if (dsec_rm_rf_at(s->tmp_fd, de->d_name, &e) < 0) {
        ret = put_failed(r, "tmp", path, "stale", e, NULL, err);
        continue;
      }
    }
    ret = put(r, "tmp", path, "stale", act(r, "removed", "would remove"),
              freed, NULL, err);
  }
  return ret;
}

/* "*.tmp-*" leftovers in the store's other directories; those inside a
 * layer's directory only under the layer's lock (a materialisation makes
 * its tree under such a name). */
static int reap_store_stale(struct reap *r, struct dsec_store *s,
                            struct dsec_error **err)
{
  struct {
    int fd;
    const char *name;
    bool recurse;
  } dirs[] = {
    { s->images_fd, "images", false },
    { s->sources_fd, "sources", false },
    { s->refs_fd, "refs", true },
    { s->blobs_fd, "blobs/sha256", false },
    { s->layers_fd, "layers", false },
  };
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int ret = 0;

  for (size_t i = 0; i < ARRAY_SIZE(dirs) && ret == 0; i++) {
    _cleanup_free_ char *path = xasprintf("%s/%s", s->path, dirs[i].name);
    ret = reap_stale_in(r, dirs[i].fd, path, dirs[i].recurse, err);
  }
  d = dsec_opendir_at(s->layers_fd, ".");
  while (d && (de = readdir(d)) && ret == 0) {
    _cleanup_close_ int fd = -1;
    _cleanup_close_ int lock = -1;
    _cleanup_free_ char *path = NULL;
    char digest[DSEC_DIGEST_LEN + 1];
    if (!dsec_digest_hex_valid(de->d_name) || !has_tmp_entries(s->layers_fd, de->d_name))
      continue;
    snprintf(digest, sizeof digest, "sha256:%s", de->d_name);
    if (!r->o->dry_run) {
      lock = dsec_store_lock(s, "layer", digest, err);
      if (lock < 0)
        return -1;
    }
    fd = openat(s->layers_fd, de->d_name,
                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      continue;
    path = xasprintf("%s/layers/%s", s->path, de->d_name);
    ret = reap_stale_in(r, fd, path, false, err);
  }
  return ret;
}

/* A finding of dsec-layer verify as a record of ours: what verify would
 * repair (with dry_run) or did. */
static int verify_emit(json_t *f, void *ud, struct dsec_error **err)
{
  struct reap *r = ud;
  const char *repair = json_string_value(json_object_get(f, "repair"));
  const char *id = json_string_value(json_object_get(f, "id"));
  const char *problem = json_string_value(json_object_get(f, "problem"));
  json_t *extra = json_pack("{s:O}", "object", json_object_get(f, "what"));
  const char *action;

  if (dsec_str_has_prefix(repair, "none: ")) {
    json_object_set_new(extra, "why", json_string(repair + 6));
    action = "kept";
  } else if (dsec_str_has_prefix(repair, "failed: ")) {
    json_object_set_new(extra, "error", json_string(repair + 8));
    action = "failed";
  } else if (strcmp(repair, "remove") == 0)
    action = "would remove";
  else if (strcmp(repair, "complete") == 0)
    action = "would complete";
  else
    action = repair; /* removed, completed */
  return put(r, "verify", id, problem, action, 0, extra, err);
}

/* What dsec-layer verify finds without rehashing blobs (a record that
 * does not parse or needs what is gone, a name of nothing, a layer whose
 * import was cut short over a minute ago), repaired as verify --repair
 * does, or with dry_run named.  Partial objects are ours above. */
static int reap_verify(struct reap *r, struct dsec_store *s,
                       struct dsec_error **err)
{
  const struct dsec_verify_opts vo = { .repair = !r->o->dry_run,
                                       .quick = true, .min_age_s = STALE_S,
                                       .no_partial = true };
  struct dsec_verify_counts c;
  return dsec_store_verify(s, &vo, verify_emit, r, &c, err);
}

static int reap_store(struct reap *r, int64_t *store_bytes,
                      struct dsec_error **err)
{
  _cleanup_store_ struct dsec_store *s = NULL;
  _cleanup_close_ int gc = -1;
  int ret;

  if (r->o->dry_run) {
    /* nothing is created, not even an empty store */
    const char *env = getenv("DSEC_STORE");
    _cleanup_free_ char *path = env && *env ? xstrdup(env)
                                            : xasprintf("%s/store", r->root);
    if (!exists_at(AT_FDCWD, path))
      return 0;
  }
  ret = dsec_store_open(&s, err);
  if (ret < 0)
    return ret;
  gc = dsec_store_lock_gc(s, !r->o->dry_run, err);
  if (gc < 0)
    return dsec_error_wrap(err, "store gc lock");
  ret = reap_store_tmp(r, s, err);
  if (ret < 0)
    return ret;
  ret = reap_store_stale(r, s, err);
  if (ret < 0)
    return ret;
  ret = store_gc(r, s, store_bytes, err);
  if (ret < 0)
    return ret;
  return reap_verify(r, s, err);
}

/* ---- all of it */

int dsec_reap(const struct dsec_reap_opts *o, dsec_reap_emit_fn emit,
              void *ud, json_t **summary, struct dsec_error **err)
{
  struct reap r = { 0 };
  _cleanup_close_ int lock = -1;
  double t0 = dsec_now_ms();
  int64_t store_bytes = -1;
  int ret = 0;

  r.o = o;
  r.emit = emit;
  r.ud = ud;
  r.root = dsec_root_dir();
  r.run = dsec_run_dir();
  r.sbdir = dsec_sandboxes_dir();
  r.now = time(NULL);
  r.doomed = json_object();
  r.killed = json_object();

  /* one reaper at a time: a second one waits, then finds the work done */
  if (!o->dry_run) {
    ret = dsec_private_dir(r.root, err);
    if (ret == 0) {
      _cleanup_close_ int rfd = open(r.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      lock = rfd < 0 ? dsec_fail(err, errno, "cannot open %s", r.root)
                     : dsec_lock_at(rfd, "reap.lock", DSEC_LOCK_EXCLUSIVE,
                                    false, err);
      ret = lock < 0 ? -1 : 0;
    }
  }
  /* the order matters: supervisors without a directory die before their
   * mounts, run directories and cgroups are judged; mounts go before the
   * directories they are in */
  if (ret == 0)
    ret = reap_supervisors(&r, err);
  if (ret == 0)
    ret = reap_mounts(&r, err);
  if (ret == 0)
    ret = reap_sandboxes(&r, err);
  if (ret == 0)
    ret = reap_dev_dirs(&r, err);
  if (ret == 0)
    ret = reap_layer_mounts(&r, err);
  if (ret == 0)
    ret = reap_run_dirs(&r, err);
  if (ret == 0)
    ret = reap_removing(&r, r.root, err);
  if (ret == 0)
    ret = reap_removing(&r, r.run, err);
  if (ret == 0)
    ret = reap_cgroups(&r, err);
  if (ret == 0)
    ret = reap_names(&r, err);
  if (ret == 0)
    ret = reap_ids(&r, err);
  if (ret == 0)
    ret = reap_root_tmp(&r, err);
  if (ret == 0)
    ret = reap_store(&r, &store_bytes, err);

  if (ret == 0) {
    json_t *sum = json_pack(
      "{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:f}", "type", "summary", "dry_run",
      o->dry_run, "actions", (json_int_t) r.actions, "freed_bytes",
      (json_int_t) r.freed, "kept", (json_int_t) r.kept, "kept_bytes",
      (json_int_t) r.kept_bytes, "failed", (json_int_t) r.failed,
      "duration_ms", round((dsec_now_ms() - t0) * 10) / 10);
    if (o->store_max_set) {
      json_object_set_new(sum, "store_bytes",
                          store_bytes < 0 ? json_null()
                                          : json_integer((json_int_t) store_bytes));
      json_object_set_new(sum, "store_max_bytes",
                          json_integer((json_int_t) o->store_max));
    }
    *summary = sum;
  }
  free(r.root);
  free(r.run);
  free(r.sbdir);
  free(r.mountinfo);
  json_decref(r.doomed);
  json_decref(r.killed);
  return ret;
}
