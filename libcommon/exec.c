/* The exec protocol shared by the container and VM supervisors. */
#include <config.h>

#include "exec.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "audit.h"
#include "crash.h"
#include "digest.h"
#include "exitcodes.h"
#include "log.h"
#include "process.h"
#include "proxy.h"
#include "sandbox.h"
#include "utils.h"

int dsec_exec_request_check(json_t *req, char **why)
{
  json_t *cmd = json_object_get(req, "cmd");
  json_t *v;
  size_t i, total = 0;

  if (!json_is_array(cmd) || json_array_size(cmd) == 0 ||
      json_array_size(cmd) > 65536) {
    *why = xstrdup("`cmd` must be a non-empty array of strings");
    return -1;
  }
  json_array_foreach(cmd, i, v)
  {
    if (!json_is_string(v)) {
      *why = xasprintf("`cmd[%zu]` must be a string", i);
      return -1;
    }
    total += json_string_length(v) + 1;
    if (strlen(json_string_value(v)) != json_string_length(v)) {
      *why = xasprintf("`cmd[%zu]` contains a NUL byte", i);
      return -1;
    }
  }
  if (total > (512u << 10)) {
    *why = xstrdup("`cmd` is larger than 512 KiB");
    return -1;
  }
  v = json_object_get(req, "stdin");
  if (v && !json_is_null(v) && !json_is_string(v)) {
    *why = xstrdup("`stdin` must be a string");
    return -1;
  }
  v = json_object_get(req, "timeout_s");
  if (v && !json_is_null(v) &&
      (!json_is_number(v) || json_number_value(v) < 0 ||
       json_number_value(v) > 1e7)) {
    /* bounded: a deadline must stay a number a timer can hold */
    *why = xstrdup("`timeout_s` must be a number from 0 to 10000000");
    return -1;
  }
  v = json_object_get(req, "seq");
  if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0)) {
    *why = xstrdup("`seq` must be a non-negative integer");
    return -1;
  }
  v = json_object_get(req, "max_output_bytes");
  if (v && !json_is_null(v) &&
      (!json_is_integer(v) || json_integer_value(v) < 0 ||
       json_integer_value(v) > (64LL << 20))) {
    /* the supervisor holds the output (outside the sandbox's memory
     * limit): bounded */
    *why = xstrdup("`max_output_bytes` must be an integer from 0 to 64 MiB");
    return -1;
  }
  v = json_object_get(req, "env");
  if (v && !json_is_null(v)) {
    const char *k;
    json_t *ev;
    if (!json_is_object(v)) {
      *why = xstrdup("`env` must be an object of strings");
      return -1;
    }
    json_object_foreach(v, k, ev)
    {
      if (!*k || strchr(k, '=') || !json_is_string(ev)) {
        *why = xasprintf("invalid environment entry `%s`", k);
        return -1;
      }
    }
  }
  v = json_object_get(req, "workdir");
  if (v && !json_is_null(v) &&
      (!json_is_string(v) || json_string_value(v)[0] != '/')) {
    *why = xstrdup("`workdir` must be an absolute path");
    return -1;
  }
  v = json_object_get(req, "exclusive");
  if (v && !json_is_null(v) && !json_is_boolean(v)) {
    *why = xstrdup("`exclusive` must be true or false");
    return -1;
  }
  v = json_object_get(req, "durable");
  if (v && !json_is_null(v) && !json_is_boolean(v)) {
    *why = xstrdup("`durable` must be true or false");
    return -1;
  }
  if (json_is_false(v) && json_is_integer(json_object_get(req, "seq"))) {
    /* a replay answers from the record: it must outlive a crash */
    *why = xstrdup("a request with a `seq` is always durable "
                   "(`durable`: false goes without one)");
    return -1;
  }
  {
    json_t *tty = json_object_get(req, "tty");
    json_t *size = json_object_get(req, "tty_size");
    json_t *inter = json_object_get(req, "interactive");
    if ((tty && !json_is_null(tty) && !json_is_boolean(tty)) ||
        (inter && !json_is_null(inter) && !json_is_boolean(inter))) {
      *why = xstrdup("`tty` and `interactive` must be true or false");
      return -1;
    }
    if (size && !json_is_null(size)) {
      json_t *c = json_array_get(size, 0), *r = json_array_get(size, 1);
      if (json_array_size(size) != 2 || !json_is_integer(c) ||
          !json_is_integer(r) || json_integer_value(c) < 1 ||
          json_integer_value(c) > 10000 || json_integer_value(r) < 1 ||
          json_integer_value(r) > 10000) {
        *why = xstrdup("`tty_size` must be [COLUMNS, ROWS], each from 1 to "
                       "10000");
        return -1;
      }
    }
    if (json_is_true(inter) && !json_is_true(tty)) {
      *why = xstrdup("an interactive exec runs on a terminal (`tty`)");
      return -1;
    }
    if (json_is_true(tty) && json_is_true(json_object_get(req, "exclusive"))) {
      *why = xstrdup("an exclusive exec cannot have a terminal");
      return -1;
    }
    if (json_is_true(tty) && json_is_string(json_object_get(req, "session"))) {
      *why = xstrdup("a session command runs in its session's shell, "
                     "without a terminal");
      return -1;
    }
  }
  v = json_object_get(req, "session");
  if (v && !json_is_null(v)) {
    const char *in = json_string_value(json_object_get(req, "stdin"));
    if (!dsec_session_name_ok(json_string_value(v))) {
      *why = xstrdup("`session` must be a name of 1 to 64 letters, digits, "
                     "`.`, `_` or `-`");
      return -1;
    }
    if (json_array_size(cmd) != 1) {
      *why = xstrdup("a session command is one command line: `cmd` must "
                     "hold one string");
      return -1;
    }
    if (in && *in) {
      *why = xstrdup("a session command reads no `stdin` (the session's "
                     "shell reads the commands): pipe into a plain exec, "
                     "or copy a file in");
      return -1;
    }
    if (json_is_true(json_object_get(req, "exclusive"))) {
      *why = xstrdup("a session command runs in its session's shell: it "
                     "cannot be exclusive");
      return -1;
    }
  }
  return 0;
}

bool dsec_session_name_ok(const char *name)
{
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > 64)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char) name[i]) && !strchr("._-", name[i]))
      return false;
  return true;
}

json_t *dsec_exec_request_record(json_t *req, const char *default_workdir,
                                 uint64_t *cap)
{
  json_t *v = json_object_get(req, "max_output_bytes");
  const char *workdir = json_string_value(json_object_get(req, "workdir"));
  const char *in = json_string_value(json_object_get(req, "stdin"));
  json_t *env = json_object_get(req, "env");
  json_t *rec;

  *cap = v && json_is_integer(v) ? (uint64_t) json_integer_value(v) : 1u << 20;
  rec = json_pack("{s:O, s:s, s:s, s:o, s:f, s:I}", "cmd",
                  json_object_get(req, "cmd"), "stdin", in ? in : "",
                  "workdir", workdir ? workdir : default_workdir, "env",
                  json_is_object(env) ? json_deep_copy(env) : json_object(),
                  "timeout_s", json_number_value(json_object_get(req, "timeout_s")),
                  "max_output_bytes", (json_int_t) *cap);
  if (json_is_integer(json_object_get(req, "seq")))
    json_object_set(rec, "seq", json_object_get(req, "seq"));
  /* recorded only when asked for: earlier records stay what they were */
  if (json_is_true(json_object_get(req, "exclusive")))
    json_object_set_new(rec, "exclusive", json_true());
  if (json_is_string(json_object_get(req, "session")))
    json_object_set(rec, "session", json_object_get(req, "session"));
  if (json_is_true(json_object_get(req, "tty"))) {
    json_t *size = json_object_get(req, "tty_size");
    json_object_set_new(rec, "tty", json_true());
    json_object_set_new(rec, "tty_size",
                        json_is_array(size) ? json_deep_copy(size)
                                            : json_pack("[i, i]", 80, 24));
    if (json_is_true(json_object_get(req, "interactive")))
      json_object_set_new(rec, "interactive", json_true());
  }
  return rec;
}

json_t *dsec_exec_env(json_t *base, json_t *req_env)
{
  json_t *merged = json_is_object(base) ? json_copy(base) : json_object();
  json_t *out = json_array();
  const char *k;
  json_t *v;

  if (json_is_object(req_env))
    json_object_update(merged, req_env);
  json_object_foreach(merged, k, v)
    json_array_append_new(out, json_sprintf("%s=%s", k, json_string_value(v)));
  json_decref(merged);
  return out;
}

json_t *dsec_exec_base_env(json_t *spec, json_t *environment, uid_t uid)
{
  json_t *env;
  /* the image's, then the spec's */
  env = json_copy(json_object_get(
    json_object_get(environment, "config"), "env"));
  if (!json_is_object(env)) {
    json_decref(env);
    env = json_object();
  }
  if (!json_object_get(env, "PATH"))
    json_object_set_new(env, "PATH",
                        json_string("/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                    "/usr/bin:/sbin:/bin"));
  {
    const char *mode = json_string_value(json_object_get(
      json_object_get(spec, "network"), "mode"));
    if (mode && strcmp(mode, "proxy") == 0) {
      /* the only way out; the sandbox's own loopback stays direct */
      static const char *const vars[] = { "HTTP_PROXY", "HTTPS_PROXY",
                                          "http_proxy", "https_proxy" };
      _cleanup_free_ char *url = xasprintf("http://127.0.0.1:%d",
                                           DSEC_PROXY_PORT);
      for (size_t i = 0; i < ARRAY_SIZE(vars); i++)
        json_object_set_new(env, vars[i], json_string(url));
      json_object_set_new(env, "NO_PROXY",
                          json_string("localhost,127.0.0.1,::1"));
      json_object_set_new(env, "no_proxy",
                          json_string("localhost,127.0.0.1,::1"));
    }
  }
  json_object_update(env, json_object_get(spec, "env"));
  if (!json_object_get(env, "HOME"))
    json_object_set_new(env, "HOME",
                        json_string(uid == 0 ? "/root" : "/"));

  return env;
}

json_t *dsec_exec_result(const char *id, json_t *seq, int exit_code, int sig,
                         const char *out, size_t out_len, uint64_t out_total,
                         const char *err, size_t err_len, uint64_t err_total,
                         bool timed_out, bool oom, double duration_ms)
{
  return json_pack("{s:s, s:s, s:O, s:i, s:o, s:o, s:o, s:I, s:I, s:b, s:b, "
                   "s:b, s:f, s:b}",
                   "type", "result", "id", id, "seq", seq ? seq : json_null(),
                   "exit_code", exit_code, "signal",
                   sig ? json_integer(sig) : json_null(), "stdout",
                   dsec_json_utf8(out ? out : "", out_len), "stderr",
                   dsec_json_utf8(err ? err : "", err_len), "stdout_bytes",
                   (json_int_t) out_total, "stderr_bytes",
                   (json_int_t) err_total, "truncated",
                   out_total > out_len || err_total > err_len, "timed_out",
                   timed_out, "oom_killed", oom, "duration_ms",
                   dsec_ms1(duration_ms), "replayed", false);
}

/* ---- the trajectory */

static void traj_note(struct dsec_traj *t, json_int_t seq, off_t off,
                      size_t len)
{
  size_t i;
  if (t->n == 0 && !t->e)
    t->seq_base = seq;
  if (seq < t->seq_base)
    return;
  i = (size_t) (seq - t->seq_base);
  if (i >= t->n) {
    t->e = xrealloc(t->e, sizeof *t->e * (i + 1));
    for (size_t k = t->n; k <= i; k++)
      t->e[k] = (struct dsec_traj_entry){ -1, 0 };
    t->n = i + 1;
  }
  t->e[i] = (struct dsec_traj_entry){ off, len };
}

void dsec_traj_load(struct dsec_traj *t)
{
  FILE *f = fdopen(dup(t->fd), "r");
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  off_t off = 0;
  bool torn = false;

  if (!f)
    return;
  rewind(f);
  while ((n = getline(&line, &cap, f)) > 0) {
    json_t *rec = json_loadb(line, (size_t) n, 0, NULL);
    json_t *seq = json_object_get(rec, "seq");
    const char *type = json_string_value(json_object_get(rec, "type")) ?: "";
    torn = line[n - 1] != '\n';
    if (json_is_integer(seq) &&
        (strcmp(type, "exec") == 0 || strcmp(type, "copy") == 0)) {
      traj_note(t, json_integer_value(seq), off, (size_t) n);
      json_decref(t->last_seq);
      t->last_seq = json_incref(seq);
    }
    json_decref(rec);
    off += n;
  }
  free(line);
  fclose(f);
  /* a last line without its newline: a record cut by a crash before it
   * was synced ("durable": false).  The next record starts a line of its
   * own, else it would be glued to the cut one and never parse again
   * (its own sync makes this newline durable with it) */
  if (torn && write(t->fd, "\n", 1) != 1)
    dsec_debug("cannot end the trajectory's cut last line: %s",
               strerror(errno));
}

void dsec_traj_free(struct dsec_traj *t)
{
  free(t->e);
  json_decref(t->last_seq);
  t->e = NULL;
  t->last_seq = NULL;
  t->n = 0;
}

static bool same(json_t *a, json_t *b)
{
  return (!a && !b) || (a && b && json_equal(a, b));
}

static json_t *seq_error(json_int_t seq, char *msg)
{
  json_t *r = json_pack("{s:s, s:s, s:I, s:i}", "type", "error", "error", msg,
                        "seq", (json_int_t) seq, "exit_code",
                        DSEC_EXIT_SEQUENCE);
  free(msg);
  return r;
}

int dsec_traj_check(struct dsec_traj *t, json_t *req, const json_int_t *running,
                    size_t nrunning, json_t **out, const char **conflict)
{
  json_int_t seq = json_integer_value(json_object_get(req, "seq"));
  json_int_t next = t->e ? t->seq_base + (json_int_t) t->n : -1;
  struct dsec_traj_entry *e;
  _cleanup_json_ json_t *rec = NULL;
  char *buf;

  *conflict = NULL;
  for (size_t i = 0; i < nrunning; i++)
    if (running[i] == seq) {
      *out = seq_error(seq, xasprintf("seq %lld is running already",
                                      (long long) seq));
      return -1;
    }
  if (seq == LLONG_MAX) {
    /* the trajectory's next seq would be past the largest integer */
    *out = seq_error(seq, xasprintf("seq %lld is too large", (long long) seq));
    return -1;
  }
  if (!t->e || seq >= next) {
    /* the next one (with those still running counted), or the first */
    json_int_t want = next;
    for (size_t i = 0; i < nrunning; i++)
      if (running[i] >= want)
        want = running[i] + 1;
    if (!t->e && want < 0)
      return 0; /* the first seq starts the trajectory */
    if (seq == want)
      return 0;
    *out = seq_error(seq, xasprintf("seq %lld is beyond the trajectory's "
                                    "next, %lld", (long long) seq,
                                    (long long) want));
    return -1;
  }
  if (seq < t->seq_base || t->e[seq - t->seq_base].off < 0) {
    *out = seq_error(seq, xasprintf("seq %lld is not in the trajectory",
                                    (long long) seq));
    return -1;
  }
  e = &t->e[seq - t->seq_base];
  buf = xmalloc(e->len + 1);
  if (pread(t->fd, buf, e->len, e->off) == (ssize_t) e->len)
    rec = json_loadb(buf, e->len, 0, NULL);
  free(buf);
  if (!rec) {
    *out = seq_error(seq, xasprintf("seq %lld: its trajectory record cannot "
                                    "be read", (long long) seq));
    return -1;
  }
  {
    /* the same command, input, environment, directory and session (or
     * the same copy), or a conflict: never a silent re-run */
    static const char *const keys[] = { "op",  "cmd", "stdin", "env",
                                        "workdir", "session", "src", "dst",
                                        "archive" };
    json_t *was = json_object_get(rec, "request");
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
      if (!same(json_object_get(was, keys[i]), json_object_get(req, keys[i]))) {
        *conflict = keys[i];
        *out = seq_error(seq, xasprintf("seq %lld differs from the recorded "
                                        "request (%s)", (long long) seq,
                                        keys[i]));
        return -1;
      }
  }
  *out = json_incref(json_object_get(rec, "result"));
  json_object_set_new(*out, "replayed", json_true());
  return 1;
}

int dsec_traj_append(struct dsec_traj *t, json_t *seq, json_t *req,
                     json_t *res, bool sync, struct dsec_error **err)
{
  json_t *rec = json_pack("{s:s, s:O, s:O, s:O}", "type",
                          json_object_get(req, "op") ? "copy" : "exec", "seq",
                          seq ? seq : json_null(), "request", req, "result",
                          res);
  off_t off = lseek(t->fd, 0, SEEK_END);
  int ret = dsec_json_write_line(t->fd, rec, err);
  json_decref(rec);
  if (ret == 0)
    dsec_crash_point("trajectory written");
  if (ret == 0 && sync && fdatasync(t->fd) < 0)
    ret = dsec_fail(err, errno, "cannot sync the trajectory");
  if (ret < 0)
    return ret;
  if (sync)
    dsec_crash_point("trajectory synced");
  if (seq) {
    traj_note(t, json_integer_value(seq), off,
              (size_t) (lseek(t->fd, 0, SEEK_END) - off));
    json_decref(t->last_seq);
    t->last_seq = json_incref(seq);
  }
  return 0;
}

static int traj_checkpoint(struct dsec_traj *t, const char *digest,
                           bool consistent, struct dsec_error **err)
{
  json_t *rec = json_pack("{s:s, s:O, s:s, s:b}", "type", "checkpoint",
                          "after_seq", t->last_seq ? t->last_seq : json_null(),
                          "layer", digest, "consistent", consistent);
  int ret = dsec_json_write_line(t->fd, rec, err);
  json_decref(rec);
  if (ret == 0)
    dsec_crash_point("checkpoint recorded");
  if (ret == 0 && fdatasync(t->fd) < 0)
    ret = dsec_fail(err, errno, "cannot record the checkpoint in the "
                                "trajectory");
  if (ret == 0)
    dsec_crash_point("checkpoint synced");
  return ret;
}

/* dsec-layer names its input "-": the stream needs no name. */
static void strip_stdin_name(struct dsec_error *e)
{
  if (e && e->status == DSEC_EXIT_INPUT && strncmp(e->msg, "-: ", 3) == 0)
    memmove(e->msg, e->msg + 3, strlen(e->msg + 3) + 1);
}

json_t *dsec_checkpoint_import(const struct dsec_checkpoint_opts *o,
                               dsec_checkpoint_producer produce, void *ud,
                               json_t **stats, struct dsec_error **err)
{
  _cleanup_free_ char *prog = dsec_sibling_program("dsec-layer");
  _cleanup_free_ char *max = NULL;
  _cleanup_free_ char *out = NULL;
  _cleanup_json_ json_t *counts = NULL;
  struct dsec_program layer = { 0 };
  json_t *argv = json_array(), *v, *rec;
  char **args;
  size_t i;
  int in[2];
  int ret;

  /* what a registry's tarball gets, and what only a sandbox's changes
   * need: setuid/setgid bits, file capabilities and overlay metadata
   * removed (counted), the protected paths untouched */
  json_array_append_new(argv, json_string(prog));
  json_array_append_new(argv, json_string("create"));
  json_array_append_new(argv, json_string("--tar"));
  json_array_append_new(argv, json_string("-"));
  json_array_append_new(argv, json_string("--strip-setuid"));
  json_array_append_new(argv, json_string("--strip-overlay"));
  json_array_foreach(o->protect, i, v)
  {
    if (!json_is_string(v))
      continue;
    json_array_append_new(argv, json_string("--protect"));
    json_array_append(argv, v);
  }
  if (o->max_size) {
    max = xasprintf("%llu", (unsigned long long) o->max_size);
    json_array_append_new(argv, json_string("--max-size"));
    json_array_append_new(argv, json_string(max));
  }
  if (o->name) {
    json_array_append_new(argv, json_string("--name"));
    json_array_append_new(argv, json_string(o->name));
  }
  args = xzalloc(sizeof *args * (json_array_size(argv) + 1));
  json_array_foreach(argv, i, v)
    args[i] = (char *) json_string_value(v);

  if (pipe2(in, O_CLOEXEC) < 0) {
    dsec_fail(err, errno, "pipe");
    goto fail;
  }
  /* fewer turns between the producer and the import */
  fcntl(in[1], F_SETPIPE_SZ, 1 << 20);
  layer.status_passthrough = true;
  ret = dsec_program_start(args, NULL, in[0], true, &layer, err);
  close(in[0]);
  if (ret < 0) {
    close(in[1]);
    goto fail;
  }
  /* the import sees the end of the stream only from us, once the
   * producer vouched for all of it: a stream cut short at a member's
   * boundary reads as a whole tar */
  ret = produce(ud, in[1], &counts, err);
  if (ret < 0) {
    struct dsec_error *mine = NULL;
    /* a broken pipe: the import is going (it closes its input only by
     * ending), and says why; else it may be waiting for more, and must
     * not see the end of a cut stream */
    bool gave_up = (*err && (*err)->errnum == EPIPE) ||
                   dsec_program_exited(&layer);
    if (!gave_up)
      dsec_program_kill(&layer);
    close(in[1]);
    /* the import's own refusal (a protected path, a setuid...) is why
     * the producer could not go on */
    if (gave_up && dsec_program_finish(&layer, NULL, &mine) < 0) {
      dsec_error_free(*err);
      *err = mine;
      strip_stdin_name(mine);
    } else {
      if (!gave_up)
        dsec_program_finish(&layer, NULL, &mine);
      dsec_error_free(mine);
    }
    goto fail;
  }
  close(in[1]);
  if (dsec_program_finish(&layer, &out, err) < 0) {
    strip_stdin_name(*err);
    goto fail;
  }
  free(args);
  json_decref(argv);
  rec = json_loads(out, 0, NULL);
  if (!json_is_string(json_object_get(rec, "digest"))) {
    json_decref(rec);
    dsec_fail(err, 0, "dsec-layer answered no layer record");
    return NULL;
  }
  if (stats)
    *stats = counts ? steal_pointer(&counts) : json_object();
  return rec;
fail:
  free(args);
  json_decref(argv);
  dsec_error_wrap(err, "checkpoint");
  return NULL;
}

json_t *dsec_checkpoint_record(struct dsec_traj *t, struct dsec_audit *audit,
                               const char *id, json_t *state, json_t *layer,
                               json_t *stats, bool consistent,
                               struct dsec_error **err)
{
  static const char *const stripped[] = { "stripped_setuid",
                                          "stripped_setgid",
                                          "stripped_capabilities",
                                          "stripped_overlay_xattrs" };
  json_t *digest = json_object_get(layer, "digest");
  json_t *after = t->last_seq ? t->last_seq : json_null();
  json_t *skipped = json_object_get(stats, "skipped_whiteout_names");
  json_t *ev, *r;

  if (traj_checkpoint(t, json_string_value(digest), consistent, err) < 0)
    return NULL;
  ev = json_pack("{s:s, s:O, s:O}", "type", "checkpoint", "layer", digest,
                 "after_seq", after);
  for (size_t i = 0; i < ARRAY_SIZE(stripped); i++)
    json_object_set_new(ev, stripped[i],
                        json_integer(json_integer_value(
                          json_object_get(layer, stripped[i]))));
  json_object_set_new(ev, "skipped_whiteout_names",
                      json_integer(json_integer_value(skipped)));
  dsec_audit_append(audit, ev, NULL);
  json_decref(ev);
  json_object_set(state, "checkpoint", digest);
  r = json_pack("{s:s, s:s, s:O, s:O, s:b, s:I}", "type", "checkpoint", "id",
                id, "layer", layer, "after_seq", after, "consistent",
                consistent, "skipped_whiteout_names",
                json_integer_value(skipped));
  return r;
}

json_t *dsec_exec_output(const char *stream, const char *buf, size_t len)
{
  char *b64 = dsec_base64_encode(buf, len);
  json_t *m;
  /* bytes stay bytes in data_b64; data is the same as text (what is not
   * UTF-8 becomes U+FFFD), for a reader that wants text */
  m = json_pack("{s:s, s:i, s:s, s:o, s:s}", "type", "output", "fd",
                strcmp(stream, "stderr") == 0 ? 2 : 1, "stream", stream, "data",
                dsec_json_utf8(buf, len), "data_b64", b64);
  free(b64);
  return m;
}

void dsec_exec_events(struct dsec_audit *audit, json_t *req, json_t *res,
                      uint64_t dropped)
{
  json_t *seq = json_object_get(req, "seq");
  bool timed_out = json_is_true(json_object_get(res, "timed_out"));
  bool oom = json_is_true(json_object_get(res, "oom_killed"));
  json_t *evs[4] = { NULL };
  int n = 0;

  if (!seq)
    seq = json_null();
  evs[n++] = json_pack("{s:s, s:O, s:O, s:O, s:O, s:b, s:b}", "type", "exec",
                       "seq", seq, "argv", json_object_get(req, "cmd"), "cwd",
                       json_object_get(req, "workdir"), "exit_code",
                       json_object_get(res, "exit_code"), "timed_out",
                       timed_out, "oom_killed", oom);
  if (json_is_string(json_object_get(req, "session"))) {
    /* a session's command: its line, in its shell (whose directory is
     * the shell's own by now, not the first command's) */
    json_object_set(evs[0], "session", json_object_get(req, "session"));
    json_object_del(evs[0], "cwd");
  }
  if (json_is_true(json_object_get(req, "tty")))
    json_object_set_new(evs[0], "tty", json_true());
  if (timed_out)
    evs[n++] = json_pack("{s:s, s:s, s:O}", "type", "limit", "limit",
                         "timeout", "seq", seq);
  if (oom)
    evs[n++] = json_pack("{s:s, s:s, s:O}", "type", "limit", "limit",
                         "memory", "seq", seq);
  if (dropped > 0)
    evs[n++] = json_pack("{s:s, s:s, s:O, s:I}", "type", "limit", "limit",
                         "output", "seq", seq, "dropped_bytes",
                         (json_int_t) dropped);
  for (int i = 0; i < n; i++) {
    _cleanup_error_ struct dsec_error *e = NULL;
    dsec_audit_append(audit, evs[i], &e);
    json_decref(evs[i]);
  }
}
