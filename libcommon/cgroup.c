#include <config.h>

#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"
#include "utils.h"
#include "log.h"

#define CG_ROOT "/sys/fs/cgroup"

/* How long dsec_cgroup_destroy waits for what it killed to leave.  A
 * killed process leaves its cgroups only at the end of its exit, once its
 * memory and files are released: a large address space, I/O in flight or
 * a loaded host stretch that past a second, and until then rmdir fails
 * with EBUSY (seen on v1 memory cgroups). */
#define CG_DESTROY_WAIT_MS 10000

static const char *const ctrl_names[DSEC_CG_N] = {
  [DSEC_CG_MEMORY] = "memory",
  [DSEC_CG_PIDS] = "pids",
  [DSEC_CG_CPU] = "cpu",
  [DSEC_CG_FREEZER] = "freezer",
};

static bool is_fs(const char *path, long magic)
{
  struct statfs s;
  return statfs(path, &s) == 0 && (long) s.f_type == magic;
}

/* The cgroup2 mount: /sys/fs/cgroup itself, or /sys/fs/cgroup/unified
 * in a hybrid layout. */
static const char *unified_root(void)
{
  if (is_fs(CG_ROOT, CGROUP2_SUPER_MAGIC))
    return CG_ROOT;
  if (is_fs(CG_ROOT "/unified", CGROUP2_SUPER_MAGIC))
    return CG_ROOT "/unified";
  return NULL;
}

static bool v2_has(const char *root, const char *ctrl)
{
  _cleanup_free_ char *path = xasprintf("%s/cgroup.controllers", root);
  _cleanup_free_ char *buf = dsec_read_file_at(AT_FDCWD, path, 4096, NULL, NULL);
  char *save = NULL;

  if (!buf)
    return false;
  if (strcmp(ctrl, "freezer") == 0) {
    /* v2's freezer is cgroup.freeze, present in every non-root cgroup */
    _cleanup_free_ char *p = xasprintf("%s/cgroup.subtree_control", root);
    return access(p, F_OK) == 0 && v2_has(root, "memory");
  }
  for (char *t = strtok_r(buf, " \n", &save); t; t = strtok_r(NULL, " \n", &save))
    if (strcmp(t, ctrl) == 0)
      return true;
  return false;
}

static int write_str(const char *dir, const char *file, const char *value,
                     struct dsec_error **err)
{
  _cleanup_free_ char *path = xasprintf("%s/%s", dir, file);
  _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return dsec_fail(err, errno, "cannot open %s", path);
  if (write(fd, value, strlen(value)) < 0)
    return dsec_fail(err, errno, "cannot write `%s` to %s", value, path);
  return 0;
}

static int64_t read_key(const char *dir, const char *file, const char *key)
{
  _cleanup_free_ char *path = xasprintf("%s/%s", dir, file);
  _cleanup_free_ char *buf = dsec_read_file_at(AT_FDCWD, path, 1 << 16, NULL,
                                               NULL);
  size_t klen = key ? strlen(key) : 0;

  if (!buf)
    return -1;
  if (!key)
    return strtoll(buf, NULL, 10);
  for (char *line = buf; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    if (strncmp(line, key, klen) == 0 && line[klen] == ' ')
      return strtoll(line + klen + 1, NULL, 10);
    line = nl ? nl + 1 : NULL;
  }
  return -1;
}

/* v2: the parent "dsec" cgroup passes the controllers down. */
static int v2_enable(const char *root, struct dsec_error **err)
{
  static const char *const want[] = { "memory", "pids", "cpu" };
  _cleanup_free_ char *parent = xasprintf("%s/dsec", root);
  const char *levels[] = { root, parent };

  if (mkdir(parent, 0755) < 0 && errno != EEXIST)
    return dsec_fail(err, errno, "cannot create %s", parent);
  for (size_t l = 0; l < ARRAY_SIZE(levels); l++)
    for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
      _cleanup_free_ char *v = xasprintf("+%s", want[i]);
      _cleanup_error_ struct dsec_error *e = NULL;
      if (v2_has(levels[l], want[i]))
        write_str(levels[l], "cgroup.subtree_control", v, &e);
    }
  return 0;
}

int dsec_cgroup_create(const char *id, json_t *resources,
                       struct dsec_cgroup **out, struct dsec_error **err)
{
  struct dsec_cgroup *cg = xzalloc(sizeof *cg);
  const char *uni = unified_root();
  bool v2_ready = false;
  json_t *v;

  for (int c = 0; c < DSEC_CG_N; c++) {
    _cleanup_free_ char *v1 = xasprintf(CG_ROOT "/%s", ctrl_names[c]);
    const char *root = NULL;

    if (uni && v2_has(uni, ctrl_names[c])) {
      if (!v2_ready && v2_enable(uni, err) < 0)
        goto fail;
      v2_ready = true;
      root = uni;
      cg->v2[c] = true;
    } else if (is_fs(v1, CGROUP_SUPER_MAGIC))
      root = v1;
    else
      continue;
    {
      _cleanup_free_ char *parent = xasprintf("%s/dsec", root);
      if (mkdir(parent, 0755) < 0 && errno != EEXIST) {
        if (errno == EACCES || errno == EPERM || errno == EROFS) {
          free(cg->unavailable);
          cg->unavailable = xasprintf("no writable cgroup for %s (%s)",
                                      ctrl_names[c], strerror(errno));
          continue;
        }
        dsec_fail(err, errno, "cannot create %s", parent);
        goto fail;
      }
    }
    /* controllers sharing one v2 directory share the path */
    cg->path[c] = xasprintf("%s/dsec/%s", root, id);
    if (mkdir(cg->path[c], 0755) < 0 && errno != EEXIST) {
      if (errno == EACCES || errno == EPERM || errno == EROFS) {
        /* rootless without a delegated cgroup: said, not hidden */
        free(cg->unavailable);
        cg->unavailable = xasprintf("no writable cgroup for %s (%s)",
                                    ctrl_names[c], strerror(errno));
        free(cg->path[c]);
        cg->path[c] = NULL;
        continue;
      }
      dsec_fail(err, errno, "cannot create %s", cg->path[c]);
      goto fail;
    }
  }

  /* limits */
  if ((v = json_object_get(resources, "memory_mb")) && cg->path[DSEC_CG_MEMORY]) {
    char *n = xasprintf("%lld", (long long) json_integer_value(v) << 20);
    int r;
    if (cg->v2[DSEC_CG_MEMORY]) {
      _cleanup_error_ struct dsec_error *e = NULL;
      r = write_str(cg->path[DSEC_CG_MEMORY], "memory.max", n, err);
      write_str(cg->path[DSEC_CG_MEMORY], "memory.swap.max", "0", &e);
    } else {
      _cleanup_error_ struct dsec_error *e = NULL;
      r = write_str(cg->path[DSEC_CG_MEMORY], "memory.limit_in_bytes", n, err);
      /* no swap beyond the limit, where swap accounting exists */
      write_str(cg->path[DSEC_CG_MEMORY], "memory.memsw.limit_in_bytes", n, &e);
    }
    free(n);
    if (r < 0)
      goto fail;
  }
  if ((v = json_object_get(resources, "pids")) && cg->path[DSEC_CG_PIDS]) {
    _cleanup_free_ char *n = xasprintf("%lld", (long long) json_integer_value(v));
    if (write_str(cg->path[DSEC_CG_PIDS], "pids.max", n, err) < 0)
      goto fail;
  }
  if (cg->path[DSEC_CG_CPU]) {
    const char *class = json_string_value(json_object_get(resources, "class"));
    bool best = class && strcmp(class, "besteffort") == 0;
    int r;
    v = json_object_get(resources, "cpus");
    if (cg->v2[DSEC_CG_CPU]) {
      r = write_str(cg->path[DSEC_CG_CPU], "cpu.weight", best ? "25" : "100",
                    err);
      if (r == 0 && v) {
        _cleanup_free_ char *q = xasprintf(
          "%lld 100000", (long long) (json_number_value(v) * 100000));
        r = write_str(cg->path[DSEC_CG_CPU], "cpu.max", q, err);
      }
    } else {
      r = write_str(cg->path[DSEC_CG_CPU], "cpu.shares", best ? "256" : "1024",
                    err);
      if (r == 0 && v) {
        _cleanup_free_ char *q = xasprintf(
          "%lld", (long long) (json_number_value(v) * 100000));
        r = write_str(cg->path[DSEC_CG_CPU], "cpu.cfs_period_us", "100000",
                      err);
        if (r == 0)
          r = write_str(cg->path[DSEC_CG_CPU], "cpu.cfs_quota_us", q, err);
      }
    }
    if (r < 0)
      goto fail;
  }
  *out = cg;
  return 0;
fail:
  dsec_error_wrap(err, "cgroup");
  dsec_cgroup_destroy(cg, NULL);
  dsec_cgroup_free(cg);
  return -1;
}

/* Whether controller c has a cgroup of its own: a path no controller
 * before it has (v2 controllers share one, co-mounted v1 ones too). */
static bool first_of_path(const struct dsec_cgroup *cg, int c)
{
  if (!cg->path[c])
    return false;
  for (int k = 0; k < c; k++)
    if (cg->path[k] && strcmp(cg->path[k], cg->path[c]) == 0)
      return false;
  return true;
}

int dsec_cgroup_attach(struct dsec_cgroup *cg, pid_t pid,
                       struct dsec_error **err)
{
  char buf[32];
  snprintf(buf, sizeof buf, "%d", (int) pid);
  for (int c = 0; c < DSEC_CG_N; c++)
    if (first_of_path(cg, c) &&
        write_str(cg->path[c], "cgroup.procs", buf, err) < 0)
      return -1;
  return 0;
}

int dsec_cgroup_join_open(struct dsec_cgroup *cg, int fds[DSEC_CG_N],
                          struct dsec_error **err)
{
  for (int c = 0; c < DSEC_CG_N; c++)
    fds[c] = -1;
  for (int c = 0; c < DSEC_CG_N; c++) {
    _cleanup_free_ char *path = NULL;
    if (!first_of_path(cg, c))
      continue;
    path = xasprintf("%s/%s", cg->path[c], cg->v2[c] ? "cgroup.procs" : "tasks");
    fds[c] = open(path, O_WRONLY | O_CLOEXEC);
    if (fds[c] < 0) {
      dsec_fail(err, errno, "cannot open %s", path);
      dsec_cgroup_join_close(fds);
      return -1;
    }
  }
  return 0;
}

int dsec_cgroup_join(int fds[DSEC_CG_N], int *failed)
{
  int r = 0, e = 0;
  for (int c = 0; c < DSEC_CG_N; c++)
    if (fds[c] >= 0 && r == 0 && write(fds[c], "0", 1) != 1) {
      e = errno;
      r = -1;
      if (failed)
        *failed = c;
    }
  dsec_cgroup_join_close(fds);
  errno = e;
  return r;
}

const char *dsec_cgroup_ctrl_name(int c)
{
  return c >= 0 && c < DSEC_CG_N ? ctrl_names[c] : "?";
}

void dsec_cgroup_join_close(int fds[DSEC_CG_N])
{
  for (int c = 0; c < DSEC_CG_N; c++)
    if (fds[c] >= 0) {
      close(fds[c]);
      fds[c] = -1;
    }
}

/* The value of "key N" in an open cgroup file, read from its start. */
static int64_t pread_key(int fd, const char *key)
{
  char buf[4096];
  size_t klen = strlen(key);
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  for (char *line = buf; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    if (strncmp(line, key, klen) == 0 && line[klen] == ' ')
      return strtoll(line + klen + 1, NULL, 10);
    line = nl ? nl + 1 : NULL;
  }
  return -1;
}

int64_t dsec_cgroup_oom_kills(struct dsec_cgroup *cg)
{
  const char *p = cg->path[DSEC_CG_MEMORY];
  if (!p)
    return -1;
  /* read around every exec: opened once */
  if (cg->oom_fd <= 0) {
    _cleanup_free_ char *path = xasprintf("%s/%s", p,
                                          cg->v2[DSEC_CG_MEMORY]
                                            ? "memory.events"
                                            : "memory.oom_control");
    cg->oom_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (cg->oom_fd < 0)
      return -1;
  }
  return pread_key(cg->oom_fd, "oom_kill");
}

int64_t dsec_cgroup_pids_max_hits(struct dsec_cgroup *cg)
{
  const char *p = cg->path[DSEC_CG_PIDS];
  if (!p)
    return -1;
  /* "max N" in pids.events, v1 and v2 alike */
  return read_key(p, "pids.events", "max");
}

int64_t dsec_cgroup_memory_current(struct dsec_cgroup *cg)
{
  const char *p = cg->path[DSEC_CG_MEMORY];
  if (!p)
    return -1;
  return cg->v2[DSEC_CG_MEMORY] ? read_key(p, "memory.current", NULL)
                                : read_key(p, "memory.usage_in_bytes", NULL);
}

int dsec_cgroup_freeze(struct dsec_cgroup *cg, bool frozen,
                       struct dsec_error **err)
{
  const char *p = cg->path[DSEC_CG_FREEZER];
  if (!p)
    return dsec_fail(err, ENOTSUP, "no freezer cgroup on this machine");
  if (cg->v2[DSEC_CG_FREEZER])
    return write_str(p, "cgroup.freeze", frozen ? "1" : "0", err);
  return write_str(p, "freezer.state", frozen ? "FROZEN" : "THAWED", err);
}

static bool kill_procs(const char *dir)
{
  _cleanup_free_ char *path = xasprintf("%s/cgroup.procs", dir);
  _cleanup_free_ char *buf = dsec_read_file_at(AT_FDCWD, path, 1 << 22, NULL,
                                               NULL);
  bool any = false;
  char *save = NULL;

  if (!buf)
    return false;
  for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
    pid_t pid = (pid_t) strtol(t, NULL, 10);
    if (pid > 0 && kill(pid, SIGKILL) == 0)
      any = true;
  }
  return any;
}

void dsec_cgroup_kill_all(struct dsec_cgroup *cg)
{
  /* a frozen v1 cgroup must be thawed for SIGKILL to be delivered: first,
   * so that the other hierarchies' processes can die too */
  if (cg->path[DSEC_CG_FREEZER] && !cg->v2[DSEC_CG_FREEZER]) {
    _cleanup_error_ struct dsec_error *e = NULL;
    write_str(cg->path[DSEC_CG_FREEZER], "freezer.state", "THAWED", &e);
  }
  for (int c = 0; c < DSEC_CG_N; c++) {
    if (!cg->path[c])
      continue;
    if (cg->v2[c]) {
      _cleanup_error_ struct dsec_error *e = NULL;
      if (write_str(cg->path[c], "cgroup.kill", "1", &e) == 0)
        continue;
    }
    for (int tries = 0; tries < 100 && kill_procs(cg->path[c]); tries++)
      usleep(1000);
  }
}

static int64_t mono_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* SIGKILLs what dir's cgroup.procs lists (thawing a v1 freezer first) and
 * waits until deadline (CLOCK_MONOTONIC, ms) at most for those processes
 * to exit.  Returns whether it waited for any. */
static bool kill_and_wait(const char *dir, bool v2, int64_t deadline)
{
  _cleanup_free_ char *path = xasprintf("%s/cgroup.procs", dir);
  _cleanup_free_ char *buf = NULL;
  struct pollfd p[64];
  nfds_t n = 0;
  bool waited;
  char *save = NULL;

  if (!v2) {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_free_ char *f = xasprintf("%s/freezer.state", dir);
    if (access(f, F_OK) == 0)
      write_str(dir, "freezer.state", "THAWED", &e);
  }
  buf = dsec_read_file_at(AT_FDCWD, path, 1 << 22, NULL, NULL);
  if (!buf)
    return false;
  for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
    pid_t pid = (pid_t) strtol(t, NULL, 10);
    int fd;
    if (pid <= 0)
      continue;
    /* through a pidfd where there is one: once the process is gone, its
     * number may be another's */
    fd = n < ARRAY_SIZE(p) ? (int) syscall(SYS_pidfd_open, pid, 0) : -1;
    if (fd < 0) {
      kill(pid, SIGKILL);
      continue;
    }
    syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
    p[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
  }
  waited = n > 0;
  /* a pidfd is readable once its process has exited, which is after it
   * left its cgroups */
  while (n > 0) {
    int64_t left = deadline - mono_ms();
    if (left <= 0 || poll(p, n, (int) left) <= 0)
      break;
    for (nfds_t i = 0; i < n;) {
      if (p[i].revents) {
        close(p[i].fd);
        p[i] = p[--n];
      } else
        i++;
    }
  }
  for (nfds_t i = 0; i < n; i++)
    close(p[i].fd);
  return waited;
}

/* Removes the cgroup directory dir and the cgroups under it (a sandbox
 * may make its own), killing what is in them.  While rmdir says EBUSY,
 * kills and waits again, until deadline (CLOCK_MONOTONIC, ms). */
static int cgroup_rmdir(const char *dir, bool v2, int64_t deadline,
                        struct dsec_error **err)
{
  useconds_t nap = 1000;

  for (;;) {
    _cleanup_closedir_ DIR *d = opendir(dir);
    struct dirent *de;
    int errnum;

    while (d && (de = readdir(d))) {
      _cleanup_free_ char *sub = NULL;
      struct stat st;
      if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
        continue;
      if (de->d_type != DT_DIR &&
          (de->d_type != DT_UNKNOWN ||
           fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
           !S_ISDIR(st.st_mode)))
        continue;
      sub = xasprintf("%s/%s", dir, de->d_name);
      if (cgroup_rmdir(sub, v2, deadline, err) < 0)
        return -1;
    }
    if (rmdir(dir) == 0 || errno == ENOENT)
      return 0;
    errnum = errno;
    if (errnum != EBUSY || mono_ms() >= deadline)
      return dsec_fail(err, errnum, "cannot remove %s", dir);
    if (v2) {
      _cleanup_error_ struct dsec_error *e = NULL;
      write_str(dir, "cgroup.kill", "1", &e);
    }
    /* still busy with nothing left to wait for: what was killed is on
     * its way out */
    if (!kill_and_wait(dir, v2, deadline)) {
      usleep(nap);
      nap = nap < 64000 ? nap * 2 : 64000;
    }
  }
}

int dsec_cgroup_destroy(struct dsec_cgroup *cg, struct dsec_error **err)
{
  int64_t deadline = mono_ms() + CG_DESTROY_WAIT_MS;
  int ret = 0;
  if (!cg)
    return 0;
  if (cg->oom_fd > 0) {
    close(cg->oom_fd);
    cg->oom_fd = 0;
  }
  dsec_cgroup_kill_all(cg);
  for (int c = 0; c < DSEC_CG_N; c++) {
    if (cg->path[c] && cgroup_rmdir(cg->path[c], cg->v2[c], deadline, err) < 0)
      ret = -1;
  }
  return ret;
}

void dsec_cgroup_free(struct dsec_cgroup *cg)
{
  if (!cg)
    return;
  if (cg->oom_fd > 0)
    close(cg->oom_fd);
  for (int c = 0; c < DSEC_CG_N; c++)
    free(cg->path[c]);
  free(cg->unavailable);
  free(cg);
}

json_t *dsec_cgroup_to_json(struct dsec_cgroup *cg)
{
  json_t *j = json_object();
  for (int c = 0; c < DSEC_CG_N; c++)
    if (cg->path[c])
      json_object_set_new(j, ctrl_names[c],
                          json_pack("{s:s, s:i}", "path", cg->path[c],
                                    "version", cg->v2[c] ? 2 : 1));
  if (cg->unavailable)
    json_object_set_new(j, "unavailable", json_string(cg->unavailable));
  return j;
}

struct dsec_cgroup *dsec_cgroup_from_json(json_t *j)
{
  struct dsec_cgroup *cg = xzalloc(sizeof *cg);
  for (int c = 0; c < DSEC_CG_N; c++) {
    json_t *e = json_object_get(j, ctrl_names[c]);
    const char *p = json_string_value(json_object_get(e, "path"));
    /* only our own directories: never rmdir anything else */
    if (p && strstr(p, "/dsec/sb-") && dsec_str_has_prefix(p, CG_ROOT "/")) {
      cg->path[c] = xstrdup(p);
      cg->v2[c] = json_integer_value(json_object_get(e, "version")) == 2;
    }
  }
  return cg;
}

struct dsec_cgroup *dsec_cgroup_for_id(const char *id)
{
  struct dsec_cgroup *cg = xzalloc(sizeof *cg);
  const char *uni = unified_root();

  for (int c = 0; c < DSEC_CG_N; c++) {
    _cleanup_free_ char *v1 = xasprintf(CG_ROOT "/%s/dsec/%s", ctrl_names[c], id);
    _cleanup_free_ char *v2 = uni ? xasprintf("%s/dsec/%s", uni, id) : NULL;
    if (access(v1, F_OK) == 0)
      cg->path[c] = steal_pointer(&v1);
    else if (v2 && access(v2, F_OK) == 0) {
      cg->path[c] = steal_pointer(&v2);
      cg->v2[c] = true;
    }
  }
  return cg;
}

/* ---- core scheduling */

#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#define PR_SCHED_CORE_CREATE 1
#endif
#ifndef PR_SCHED_CORE_SCOPE_THREAD_GROUP
#define PR_SCHED_CORE_SCOPE_THREAD_GROUP 1
#endif

int dsec_core_sched_isolate(pid_t pid, char **why)
{
  _cleanup_free_ char *smt = dsec_read_file_at(
    AT_FDCWD, "/sys/devices/system/cpu/smt/active", 64, NULL, NULL);

  *why = NULL;
  /* without SMT siblings no core is shared: nothing to keep apart */
  if (smt && smt[0] == '0') {
    *why = xstrdup("no SMT siblings on this host "
                   "(/sys/devices/system/cpu/smt/active is 0)");
    return 0;
  }
  if (prctl(PR_SCHED_CORE, PR_SCHED_CORE_CREATE, pid,
            PR_SCHED_CORE_SCOPE_THREAD_GROUP, 0) == 0)
    return 1;
  if (errno == EINVAL) {
    *why = xstrdup("the kernel has no core scheduling (CONFIG_SCHED_CORE)");
    return 0;
  }
  if (errno == ENODEV) {
    *why = xstrdup("no SMT siblings on this host");
    return 0;
  }
  *why = xasprintf("prctl(PR_SCHED_CORE): %s", strerror(errno));
  return -1;
}
