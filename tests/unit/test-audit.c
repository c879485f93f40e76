/* Unit tests for libcommon/audit.c: the byte budget of events.jsonl, its
 * reserves (first sightings, audit_truncated, lifecycle records), the
 * bounds on argv and strings, the seen set's bound, the counts carried
 * over to a later supervisor, and writers in several threads and
 * processes.  The file is read back after each step. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "audit.h"
#include "tap.h"

#define ID "sb-00000000000000a1"

static char events_path[600];

static off_t file_size(void)
{
  struct stat st;
  return stat(events_path, &st) == 0 ? st.st_size : -1;
}

/* The records of the file (new array); NULL when a line is not JSON or
 * not one object. */
static json_t *records(void)
{
  FILE *f = fopen(events_path, "r");
  json_t *all = json_array();
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;

  if (!f)
    return all;
  while ((n = getline(&line, &cap, f)) > 0) {
    json_t *r = json_loadb(line, (size_t) n, 0, NULL);
    if (!json_is_object(r) || line[n - 1] != '\n') {
      diag("not a record: %.200s", line);
      json_decref(r);
      json_decref(all);
      all = NULL;
      break;
    }
    json_array_append_new(all, r);
  }
  free(line);
  fclose(f);
  return all;
}

static size_t count_type(json_t *all, const char *type)
{
  size_t n = 0, i;
  json_t *r;
  json_array_foreach(all, i, r)
  {
    if (strcmp(json_string_value(json_object_get(r, "type")) ?: "", type) == 0)
      n++;
  }
  return n;
}

static json_t *last_of(json_t *all, const char *type)
{
  json_t *found = NULL, *r;
  size_t i;
  json_array_foreach(all, i, r)
  {
    if (strcmp(json_string_value(json_object_get(r, "type")) ?: "", type) == 0)
      found = r;
  }
  return found;
}

static int open_events(void)
{
  int fd = open(events_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    bail_out("cannot open %s", events_path);
  return fd;
}

static void reset(void)
{
  unlink(events_path);
}

/* An exec record whose argv is 200 arguments of 3000 bytes. */
static json_t *long_exec(int seq)
{
  json_t *argv = json_array();
  char *arg = malloc(3001);
  memset(arg, 'a', 3000);
  arg[3000] = '\0';
  for (int i = 0; i < 200; i++)
    json_array_append_new(argv, json_string(arg));
  free(arg);
  return json_pack("{s:s, s:i, s:o, s:s, s:i}", "type", "exec", "seq", seq,
                   "argv", argv, "cwd", "/", "exit_code", 0);
}

static void test_bounds(json_t *spec)
{
  int fd = open_events();
  struct dsec_audit *a = dsec_audit_new(fd, ID, spec, NULL);
  json_t *ev = long_exec(1), *all, *r, *v;
  size_t i, total = 0;
  char big[10000];
  bool each_ok = true;

  is_int(dsec_audit_append(a, ev, NULL), 1, "a long exec record is written");
  json_decref(ev);

  /* a path of 10000 bytes, control characters in another string (each
   * takes 6 bytes as written), UTF-8 that must be cut between characters */
  memset(big, 'p', sizeof big - 1);
  big[0] = '/';
  big[sizeof big - 1] = '\0';
  ev = json_pack("{s:s, s:s, s:[s], s:i}", "type", "process", "path", big,
                 "argv", "x", "pid", 1);
  {
    char ctl[2001], utf[1201];
    memset(ctl, 1, 2000);
    ctl[2000] = '\0';
    for (int k = 0; k < 600; k++)
      memcpy(utf + 2 * k, "\xc3\xa9", 2);
    utf[1200] = '\0';
    json_object_set_new(ev, "cwd", json_string(ctl));
    json_array_append_new(json_object_get(ev, "argv"), json_string(utf));
  }
  is_int(dsec_audit_append(a, ev, NULL), 1, "a record with long strings is written");
  json_decref(ev);

  /* labels too large for a record: a stub is written instead */
  ev = json_pack("{s:s, s:{s:s}}", "type", "created", "labels", "big", big);
  {
    json_t *l = json_object_get(ev, "labels");
    for (int k = 0; k < 3; k++) {
      char key[8];
      snprintf(key, sizeof key, "k%d", k);
      json_object_set_new(l, key, json_string(big));
    }
  }
  is_int(dsec_audit_append(a, ev, NULL), 1, "an oversized record is written as a stub");
  json_decref(ev);

  all = records();
  ok(all && json_array_size(all) == 3, "three records, each one JSON line");
  r = json_array_get(all, 0);
  ok(json_is_true(json_object_get(r, "argv_truncated")), "exec: argv_truncated");
  ok(json_array_size(json_object_get(r, "argv")) <= DSEC_AUDIT_ARGV_MAX,
     "exec: at most %d arguments kept", DSEC_AUDIT_ARGV_MAX);
  json_array_foreach(json_object_get(r, "argv"), i, v)
  {
    size_t n = json_string_length(v);
    each_ok &= n <= DSEC_AUDIT_ARG_MAX;
    total += n;
  }
  ok(each_ok && total <= DSEC_AUDIT_ARGV_BYTES && total >= DSEC_AUDIT_ARGV_BYTES - 1024,
     "exec: each argument at most %d bytes, %zu in all", DSEC_AUDIT_ARG_MAX, total);
  ok(json_is_string(json_object_get(r, "time")) &&
       strcmp(json_string_value(json_object_get(r, "sandbox")) ?: "", ID) == 0,
     "time and sandbox are added");

  r = json_array_get(all, 1);
  is_int((int) json_string_length(json_object_get(r, "path")), DSEC_AUDIT_STRING_MAX,
         "a path is cut to %d bytes", DSEC_AUDIT_STRING_MAX);
  ok(json_is_true(json_object_get(r, "path_truncated")), "path_truncated");
  ok(json_is_true(json_object_get(r, "cwd_truncated")) &&
       json_string_length(json_object_get(r, "cwd")) * 6 <= DSEC_AUDIT_STRING_MAX &&
       json_string_length(json_object_get(r, "cwd")) * 6 > DSEC_AUDIT_STRING_MAX - 6,
     "control characters count as written (6 bytes each)");
  v = json_array_get(json_object_get(r, "argv"), 1);
  is_int((int) json_string_length(v), DSEC_AUDIT_ARG_MAX,
         "UTF-8 is cut between characters (the line parsed as JSON)");
  ok(json_is_true(json_object_get(r, "argv_truncated")) &&
       json_array_size(json_object_get(r, "argv")) == 2,
     "a cut argument marks argv_truncated, the others stay");
  ok(!json_object_get(json_array_get(all, 0), "path_truncated"),
     "short fields are not marked");

  r = json_array_get(all, 2);
  ok(json_is_true(json_object_get(r, "record_truncated")) &&
       json_integer_value(json_object_get(r, "record_bytes")) > DSEC_AUDIT_RECORD_MAX &&
       !json_object_get(r, "labels") &&
       strcmp(json_string_value(json_object_get(r, "type")) ?: "", "created") == 0,
     "an oversized record leaves a stub with its type and size");
  json_decref(all);
  dsec_audit_free(a);
  close(fd);
  reset();
}

static void test_budget(json_t *spec, int64_t max)
{
  int fd = open_events();
  struct dsec_audit *a = dsec_audit_new(fd, ID, spec, NULL);
  json_t *all, *st, *ev;
  int written = 0, dropped = 0;
  bool within = true;
  off_t before;

  for (int i = 0; i < 400; i++) {
    ev = long_exec(i);
    int r = dsec_audit_append(a, ev, NULL);
    json_decref(ev);
    written += r == 1;
    dropped += r == 0;
    within &= file_size() <= max;
  }
  ok(within, "the file stays within %lld bytes while execs flood it",
     (long long) max);
  ok(written > 0 && dropped > 0, "%d written, %d dropped", written, dropped);
  all = records();
  is_int((int) count_type(all, "audit_truncated"), 1, "one audit_truncated record");
  ev = last_of(all, "audit_truncated");
  ok(json_integer_value(json_object_get(ev, "max_bytes")) == max &&
       strcmp(json_string_value(json_object_get(ev, "dropped_type")) ?: "", "exec") == 0,
     "it says the budget and what was dropped first");
  json_decref(all);
  /* small records until the routine part is spent to the byte */
  for (int i = 0; i < 1000; i++) {
    ev = json_pack("{s:s, s:s, s:i}", "type", "limit", "limit", "pids", "seq", i);
    int r = dsec_audit_append(a, ev, NULL);
    json_decref(ev);
    if (r == 0)
      break;
    written++;
  }

  /* the routine part is spent: a repeat is dropped, a first sighting is
   * not */
  ev = json_pack("{s:s, s:s, s:[s]}", "type", "process", "path", "/bin/true",
                 "argv", "true");
  ok(dsec_audit_is_new(a, DSEC_AUDIT_PROGRAM, "/bin/true", 9),
     "/bin/true has not been seen");
  is_int(dsec_audit_append_first(a, ev, DSEC_AUDIT_PROGRAM, "/bin/true", 9, NULL), 1,
         "its first start is written past the routine budget");
  ok(!dsec_audit_is_new(a, DSEC_AUDIT_PROGRAM, "/bin/true", 9),
     "then it has been seen");
  is_int(dsec_audit_append(a, ev, NULL), 0, "and a second start is dropped");
  json_decref(ev);
  ok(dsec_audit_is_new(a, DSEC_AUDIT_SYSCALL, "/bin/true", 9),
     "kinds are apart: a syscall key is new");

  /* first sightings until their reserve is spent: still within */
  {
    int firsts = 0;
    for (int i = 0; i < 1000; i++) {
      char path[64];
      json_t *p;
      snprintf(path, sizeof path, "/tmp/prog-%d", i);
      p = json_pack("{s:s, s:s}", "type", "process", "path", path);
      if (dsec_audit_is_new(a, DSEC_AUDIT_PROGRAM, path, strlen(path)))
        firsts += dsec_audit_append_first(a, p, DSEC_AUDIT_PROGRAM, path,
                                          strlen(path), NULL) == 1;
      json_decref(p);
    }
    ok(firsts > 10 && firsts < 1000 && file_size() <= max,
       "%d first sightings fit their reserve, the file within its budget", firsts);
  }

  /* lifecycle records still go */
  before = file_size();
  ev = json_pack("{s:s, s:s, s:s}", "type", "checkpoint", "layer",
                 "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                 "after_seq", "x");
  is_int(dsec_audit_append(a, ev, NULL), 1, "a checkpoint record is written on a spent budget");
  json_decref(ev);
  ev = json_pack("{s:s, s:s}", "type", "died", "cause", "init killed by signal 9");
  is_int(dsec_audit_append(a, ev, NULL), 1, "and a died record");
  json_decref(ev);
  ok(file_size() > before && file_size() <= max, "within the budget all the same");

  st = dsec_audit_status(a);
  ok(json_integer_value(json_object_get(st, "bytes")) == file_size() &&
       json_integer_value(json_object_get(st, "max_bytes")) == max &&
       json_is_true(json_object_get(st, "truncated")),
     "status: bytes, max_bytes, truncated");
  ok(json_integer_value(json_object_get(json_object_get(st, "dropped"), "exec")) == dropped &&
       json_integer_value(json_object_get(json_object_get(st, "dropped"), "limit")) == 1 &&
       json_integer_value(json_object_get(json_object_get(st, "dropped"), "process")) >= 1,
     "status: the drops counted by type");
  dsec_audit_finish(a);
  all = records();
  ev = last_of(all, "audit_summary");
  ok(ev && json_equal(json_object_get(ev, "dropped"), json_object_get(st, "dropped")),
     "the final audit_summary holds the counts");
  ok(file_size() <= max, "the file ends within its budget (%lld bytes)",
     (long long) file_size());
  json_decref(all);
  dsec_audit_free(a);
  close(fd);

  /* a later supervisor (resume): the file's bytes count, the counts go
   * on, audit_truncated is not written twice */
  {
    json_t *state = json_pack("{s:O}", "audit", st);
    json_t *st2;
    fd = open_events();
    a = dsec_audit_new(fd, ID, spec, state);
    ev = long_exec(999);
    is_int(dsec_audit_append(a, ev, NULL), 0, "after a resume the spent budget stays spent");
    json_decref(ev);
    st2 = dsec_audit_status(a);
    is_int((int) json_integer_value(json_object_get(json_object_get(st2, "dropped"), "exec")),
           dropped + 1, "and the counts go on from the state");
    all = records();
    is_int((int) count_type(all, "audit_truncated"), 1, "still one audit_truncated");
    json_decref(all);
    json_decref(st2);
    json_decref(state);
    dsec_audit_free(a);
    close(fd);
  }

  /* dsec-run's one-off records: the budget of spec.json */
  ev = long_exec(1000);
  before = file_size();
  is_int(dsec_audit_append_once(-1, ID, ev, NULL), 0,
         "a passer-by's routine record is dropped too");
  json_decref(ev);
  ev = json_pack("{s:s, s:s}", "type", "resumed", "from", "checkpoint");
  is_int(dsec_audit_append_once(-1, ID, ev, NULL), 1, "its resumed record is written");
  json_decref(ev);
  ok(file_size() > before && file_size() <= max, "within the budget");
  json_decref(st);
  reset();
}

static void test_seen_full(json_t *spec)
{
  int fd = open_events();
  struct dsec_audit *a = dsec_audit_new(fd, ID, spec, NULL);
  json_t *all, *full;
  int fresh = 0;

  for (uint32_t k = 0; k < 1100; k++) {
    if (dsec_audit_is_new(a, DSEC_AUDIT_IOCTL, &k, sizeof k)) {
      json_t *ev = json_pack("{s:s}", "type", "denied");
      dsec_audit_append_first(a, ev, DSEC_AUDIT_IOCTL, &k, sizeof k, NULL);
      json_decref(ev);
      fresh++;
    }
  }
  is_int(fresh, 1024, "1024 ioctl requests are remembered, no more");
  {
    uint32_t k = 5;
    ok(!dsec_audit_is_new(a, DSEC_AUDIT_IOCTL, &k, sizeof k), "a remembered one is not new");
  }
  all = records();
  is_int((int) count_type(all, "audit_seen_full"), 1, "one audit_seen_full record");
  full = last_of(all, "audit_seen_full");
  ok(strcmp(json_string_value(json_object_get(full, "kind")) ?: "", "ioctl") == 0 &&
       json_integer_value(json_object_get(full, "limit")) == 1024,
     "it names the kind and the bound");
  ok(json_is_true(json_object_get(json_array_get(all, 0), "first")),
     "first sightings are marked \"first\"");
  json_decref(all);
  dsec_audit_free(a);
  close(fd);
  reset();
}

struct writer {
  struct dsec_audit *a;
  int n;
};

static void *writer_main(void *p)
{
  struct writer *w = p;
  for (int i = 0; i < w->n; i++) {
    json_t *ev = json_pack("{s:s, s:s, s:i}", "type", "network", "host",
                           "example.com", "port", i);
    dsec_audit_append(w->a, ev, NULL);
    json_decref(ev);
  }
  return NULL;
}

/* Threads of one supervisor and another process at once. */
static void test_concurrent(json_t *spec, int64_t max)
{
  int fd = open_events();
  struct dsec_audit *a = dsec_audit_new(fd, ID, spec, NULL);
  struct writer w = { a, 1500 };
  pthread_t t[3];
  pid_t child;
  int status;
  json_t *all;

  writer_main(&(struct writer){ a, 1 }); /* one before the race */
  fflush(stdout);
  child = fork();
  if (child == 0) {
    for (int i = 0; i < 1500; i++) {
      json_t *ev = json_pack("{s:s, s:s, s:i}", "type", "forked", "checkpoint",
                             "sha256:00", "count", i);
      dsec_audit_append_once(-1, ID, ev, NULL);
      json_decref(ev);
    }
    _exit(0);
  }
  for (int i = 0; i < 3; i++)
    pthread_create(&t[i], NULL, writer_main, &w);
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  waitpid(child, &status, 0);
  all = records();
  ok(all != NULL, "every line is one whole record");
  ok(file_size() <= max, "three threads and a process stay within the budget (%lld of %lld)",
     (long long) file_size(), (long long) max);
  ok(count_type(all, "forked") > 0 && count_type(all, "network") > 0,
     "records of both writers are in");
  json_decref(all);
  dsec_audit_free(a);
  close(fd);
  reset();
}

int main(void)
{
  const char *dir = tap_tmpdir("test-audit");
  char path[512];
  json_t *spec;
  FILE *f;
  int64_t max = 65536;

  setenv("DSEC_ROOT", dir, 1);
  snprintf(path, sizeof path, "%s/sandboxes", dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/sandboxes/%s", dir, ID);
  mkdir(path, 0700);
  snprintf(events_path, sizeof events_path, "%s/events.jsonl", path);
  spec = json_pack("{s:{s:I}}", "audit", "max_bytes", (json_int_t) max);
  snprintf(path, sizeof path, "%s/sandboxes/%s/spec.json", dir, ID);
  f = fopen(path, "w");
  if (!f || json_dumpf(spec, f, 0) < 0 || fclose(f) != 0)
    bail_out("cannot write %s", path);

  is_int((int) dsec_audit_max_bytes(NULL), (int) DSEC_AUDIT_MAX_BYTES_DEFAULT,
         "the default budget");
  is_int((int) dsec_audit_max_bytes(spec), (int) max, "the spec's budget");

  test_bounds(spec);
  test_budget(spec, max);
  test_seen_full(spec);
  test_concurrent(spec, max);
  json_decref(spec);
  return done_testing();
}
