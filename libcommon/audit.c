/* The bounded audit log (see audit.h). */
#include <config.h>

#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "sandbox.h"
#include "utils.h"

/* the budget's parts (audit.h) */
#define RESERVE_MIN 16384
#define NOTICE_RESERVE 2048

/* what may go where: the log's own notices (audit_truncated,
 * audit_seen_full) have a reserve of their own */
enum rclass { ROUTINE, FIRST, NOTICE, LIFECYCLE };

/* Records that decide what a trainer believes about the sandbox's life:
 * written while the lifecycle reserve lasts. */
static const char *const lifecycle_types[] = {
  "created", "resumed", "suspended", "checkpoint",    "died",
  "expired", "forked",  "claimed",   "audit_summary", NULL,
};

static const char *const kind_names[DSEC_AUDIT_NKINDS] = {
  "program", "syscall", "ioctl", "masked", "host",
};
static const size_t kind_limits[DSEC_AUDIT_NKINDS] = {
  4096, 1024, 1024, 64, 1024,
};

/* dropped counts are kept for this many record types (a closed set in
 * the code; the rest add up under "other") */
#define DROPPED_TYPES 64

struct dsec_audit {
  int fd;
  const char *id;
  char *service;  /* a task world's member: its service name ("agent"
                   * for the agent), in every record; else NULL */
  int64_t max;
  pthread_mutex_t lock;
  bool truncated; /* audit_truncated was written (or need not be) */
  struct {
    char *type;
    uint64_t n;
  } dropped[DROPPED_TYPES];
  size_t ndropped;
  uint8_t key[16];  /* the seen set's hash key */
  uint64_t *seen;   /* open addressing; 0 is an empty slot */
  size_t cap, used;
  size_t count[DSEC_AUDIT_NKINDS];
  bool full_said[DSEC_AUDIT_NKINDS];
};

/* ---- the seen set: SipHash-2-4 with a key of this log's, so that no
 * one outside can make a new key collide with a seen one */

static uint64_t le64(const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                              \
  do {                                                                        \
    v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                 \
    v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                    \
    v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                    \
    v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                 \
  } while (0)

static uint64_t siphash(const uint8_t k[16], unsigned tweak, const void *data,
                        size_t len)
{
  const uint8_t *in = data;
  uint64_t k0 = le64(k) ^ tweak, k1 = le64(k + 8);
  uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
  uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
  uint64_t b = (uint64_t) len << 56;
  const uint8_t *end = in + (len - len % 8);

  for (; in != end; in += 8) {
    uint64_t m = le64(in);
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
  }
  for (size_t i = 0; i < len % 8; i++)
    b |= (uint64_t) in[i] << (8 * i);
  v3 ^= b;
  SIPROUND;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

static uint64_t seen_hash(struct dsec_audit *a, enum dsec_audit_kind kind,
                          const void *key, size_t len)
{
  uint64_t h = siphash(a->key, (unsigned) kind + 1, key, len);
  return h ? h : 1;
}

static bool seen_has(struct dsec_audit *a, uint64_t h)
{
  if (!a->cap)
    return false;
  for (size_t i = h & (a->cap - 1);; i = (i + 1) & (a->cap - 1)) {
    if (a->seen[i] == h)
      return true;
    if (!a->seen[i])
      return false;
  }
}

static void seen_put(struct dsec_audit *a, uint64_t h)
{
  size_t i;
  if ((a->used + 1) * 2 > a->cap) {
    size_t ncap = a->cap ? a->cap * 2 : 256;
    uint64_t *old = a->seen;
    size_t ocap = a->cap;
    a->seen = xzalloc(ncap * sizeof *a->seen);
    a->cap = ncap;
    a->used = 0;
    for (size_t k = 0; k < ocap; k++)
      if (old[k])
        seen_put(a, old[k]);
    free(old);
  }
  for (i = h & (a->cap - 1); a->seen[i]; i = (i + 1) & (a->cap - 1))
    if (a->seen[i] == h)
      return;
  a->seen[i] = h;
  a->used++;
}

/* ---- bounding what a record holds */

/* The bytes of s[0..len) as jansson writes them between quotes. */
static size_t enc_len(const char *s, size_t len, size_t stop)
{
  size_t n = 0;
  for (size_t i = 0; i < len && n <= stop; i++) {
    unsigned char c = (unsigned char) s[i];
    n += c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' ||
             c == '\r' || c == '\t'
           ? 2
         : c < 0x20 ? 6
                    : 1;
  }
  return n;
}

/* The longest prefix of s (valid UTF-8) that takes at most max bytes as
 * written, cut before a character (new). */
static json_t *cut_string(const char *s, size_t len, size_t max, size_t *used)
{
  size_t n = 0, i = 0;
  while (i < len) {
    size_t w = enc_len(s + i, 1, SIZE_MAX);
    if (n + w > max)
      break;
    n += w;
    i++;
  }
  while (i > 0 && i < len && ((unsigned char) s[i] & 0xc0) == 0x80) {
    i--;
    n -= enc_len(s + i, 1, SIZE_MAX);
  }
  if (used)
    *used = n;
  return json_stringn(s, i);
}

json_t *dsec_audit_argv(json_t *argv, bool *truncated)
{
  json_t *out = json_array();
  size_t total = 0, i;
  json_t *v;

  json_array_foreach(argv, i, v)
  {
    const char *s = json_string_value(v);
    size_t len = json_string_length(v), room, n;
    if (!s)
      continue;
    room = DSEC_AUDIT_ARGV_BYTES - total;
    if (room > DSEC_AUDIT_ARG_MAX)
      room = DSEC_AUDIT_ARG_MAX;
    if (i >= DSEC_AUDIT_ARGV_MAX || room == 0) {
      *truncated = true;
      break;
    }
    n = enc_len(s, len, room);
    if (n > room) {
      json_array_append_new(out, cut_string(s, len, room, &n));
      *truncated = true;
    } else
      json_array_append(out, v);
    total += n;
  }
  return out;
}

/* Bounds rec's argv and top-level strings in place (rec is ours). */
static void bound_fields(json_t *rec)
{
  json_t *argv = json_object_get(rec, "argv");
  char *cut[32];
  size_t ncut = 0;
  const char *k;
  json_t *v;

  if (json_is_array(argv)) {
    bool t = false;
    json_object_set_new(rec, "argv", dsec_audit_argv(argv, &t));
    if (t)
      json_object_set_new(rec, "argv_truncated", json_true());
  }
  json_object_foreach(rec, k, v)
  {
    if (json_is_string(v) && ncut < ARRAY_SIZE(cut) &&
        enc_len(json_string_value(v), json_string_length(v),
                DSEC_AUDIT_STRING_MAX) > DSEC_AUDIT_STRING_MAX)
      cut[ncut++] = xstrdup(k);
  }
  for (size_t i = 0; i < ncut; i++) {
    _cleanup_free_ char *flag = xasprintf("%s_truncated", cut[i]);
    json_t *s = json_object_get(rec, cut[i]);
    json_object_set_new(rec, cut[i],
                        cut_string(json_string_value(s), json_string_length(s),
                                   DSEC_AUDIT_STRING_MAX, NULL));
    json_object_set_new(rec, flag, json_true());
    free(cut[i]);
  }
}

/* The line for ev (new, with its newline; *len its length). */
static char *render(struct dsec_audit *a, json_t *ev, bool first, size_t *len)
{
  _cleanup_free_ char *now = dsec_time_rfc3339();
  json_t *type = json_object_get(ev, "type");
  json_t *rec = json_pack("{s:O, s:s, s:s}", "type",
                          type ? type : json_null(), "time", now, "sandbox",
                          a->id);
  char *s;
  size_t n;

  if (a->service)
    json_object_set_new(rec, "service", json_string(a->service));
  json_object_update_missing(rec, ev);
  if (first)
    json_object_set_new(rec, "first", json_true());
  bound_fields(rec);
  s = json_dumps(rec, JSON_COMPACT | JSON_REAL_PRECISION(10));
  n = s ? strlen(s) : 0;
  if (n + 1 > DSEC_AUDIT_RECORD_MAX) {
    /* what is left of a record too large to keep */
    json_t *seq = json_object_get(ev, "seq");
    json_t *stub = json_pack("{s:O, s:s, s:s, s:b, s:I}", "type",
                             type ? type : json_null(), "time", now,
                             "sandbox", a->id, "record_truncated", true,
                             "record_bytes", (json_int_t) n + 1);
    if (json_is_integer(seq) || json_is_null(seq))
      json_object_set(stub, "seq", seq);
    if (a->service)
      json_object_set_new(stub, "service", json_string(a->service));
    free(s);
    s = json_dumps(stub, JSON_COMPACT);
    json_decref(stub);
    n = strlen(s);
  }
  json_decref(rec);
  if (!s)
    return NULL;
  s = xrealloc(s, n + 2);
  s[n++] = '\n';
  s[n] = '\0';
  *len = n;
  return s;
}

/* ---- the budget */

static int64_t reserve(int64_t max, int64_t div)
{
  return max / div > RESERVE_MIN ? max / div : RESERVE_MIN;
}

/* Where records of class c may go up to. */
static int64_t limit_of(struct dsec_audit *a, enum rclass c)
{
  int64_t life = reserve(a->max, 64), first = reserve(a->max, 8);
  switch (c) {
  case LIFECYCLE:
    return a->max;
  case NOTICE:
    return a->max - life;
  case FIRST:
    return a->max - life - NOTICE_RESERVE;
  case ROUTINE:
    break;
  }
  return a->max - life - NOTICE_RESERVE - first;
}

static bool is_lifecycle(const char *type)
{
  for (const char *const *t = lifecycle_types; *t; t++)
    if (strcmp(*t, type) == 0)
      return true;
  return false;
}

static void count_drop(struct dsec_audit *a, const char *type, uint64_t n)
{
  size_t i;
  for (i = 0; i < a->ndropped; i++)
    if (strcmp(a->dropped[i].type, type) == 0)
      break;
  if (i == a->ndropped) {
    if (a->ndropped >= DROPPED_TYPES - 1 && strcmp(type, "other") != 0) {
      count_drop(a, "other", n);
      return;
    }
    a->dropped[a->ndropped].type = xstrdup(type);
    a->dropped[a->ndropped++].n = 0;
  }
  a->dropped[i].n += n;
}

static json_t *dropped_json(struct dsec_audit *a)
{
  json_t *d = json_object();
  for (size_t i = 0; i < a->ndropped; i++)
    json_object_set_new(d, a->dropped[i].type,
                        json_integer((json_int_t) a->dropped[i].n));
  return d;
}

/* The file's size, under the flock. */
static int64_t file_size(struct dsec_audit *a)
{
  struct stat st;
  if (fstat(a->fd, &st) < 0)
    return -1;
  return (int64_t) st.st_size;
}

/* With the flock held: the line goes when it fits where class c may go,
 * else it is counted, and the first drop writes audit_truncated.  1
 * written, 0 dropped, -1 error. */
static int put_line(struct dsec_audit *a, const char *line, size_t len,
                    enum rclass c, const char *type, struct dsec_error **err)
{
  int64_t size = file_size(a);

  if (size < 0)
    return dsec_fail(err, errno, "cannot read the audit log's size");
  if (size + (int64_t) len <= limit_of(a, c))
    return dsec_write_all(a->fd, line, len, err) < 0 ? -1 : 1;
  count_drop(a, type, 1);
  if (!a->truncated && c != NOTICE) {
    json_t *ev = json_pack("{s:s, s:I, s:I, s:s}", "type", "audit_truncated",
                           "max_bytes", (json_int_t) a->max, "bytes",
                           (json_int_t) size, "dropped_type", type);
    size_t n;
    _cleanup_free_ char *t = render(a, ev, false, &n);
    json_decref(ev);
    a->truncated = true;
    if (t)
      put_line(a, t, n, NOTICE, "audit_truncated", NULL);
  }
  return 0;
}

/* With a->lock held (it orders this process's writers; the flock orders
 * other processes': dsec-run's resumed, forked, claimed). */
static int write_line(struct dsec_audit *a, const char *line, size_t len,
                      enum rclass c, const char *type, struct dsec_error **err)
{
  int ret;
  while (flock(a->fd, LOCK_EX) < 0)
    if (errno != EINTR)
      return dsec_fail(err, errno, "cannot lock the audit log");
  ret = put_line(a, line, len, c, type, err);
  flock(a->fd, LOCK_UN);
  return ret;
}

static int append(struct dsec_audit *a, json_t *ev, bool first,
                  enum dsec_audit_kind kind, const void *key, size_t klen,
                  struct dsec_error **err)
{
  const char *type = json_string_value(json_object_get(ev, "type"));
  size_t len = 0;
  _cleanup_free_ char *line = NULL;
  enum rclass c;
  int ret;

  if (!a)
    return dsec_fail(err, EINVAL, "no audit log open");
  if (!type)
    return dsec_fail(err, EINVAL, "an event without a type");
  line = render(a, ev, first, &len);
  if (!line)
    return dsec_fail(err, ENOMEM, "cannot encode an event");
  c = first ? FIRST : is_lifecycle(type) ? LIFECYCLE : ROUTINE;
  pthread_mutex_lock(&a->lock);
  if (first) {
    seen_put(a, seen_hash(a, kind, key, klen));
    a->count[kind]++;
  }
  ret = write_line(a, line, len, c, type, err);
  pthread_mutex_unlock(&a->lock);
  return ret;
}

/* ---- the interface */

int64_t dsec_audit_max_bytes(json_t *spec)
{
  json_t *v = json_object_get(json_object_get(spec, "audit"), "max_bytes");
  json_int_t m;
  if (!json_is_integer(v))
    return DSEC_AUDIT_MAX_BYTES_DEFAULT;
  m = json_integer_value(v);
  if (m < DSEC_AUDIT_MAX_BYTES_MIN)
    return DSEC_AUDIT_MAX_BYTES_MIN;
  if (m > DSEC_AUDIT_MAX_BYTES_MAX)
    return DSEC_AUDIT_MAX_BYTES_MAX;
  return m;
}

struct dsec_audit *dsec_audit_new(int fd, const char *id, json_t *spec,
                                  json_t *state)
{
  struct dsec_audit *a = xzalloc(sizeof *a);
  json_t *saved = json_object_get(state, "audit");
  const char *k;
  json_t *v;

  a->fd = fd;
  a->id = id;
  a->max = dsec_audit_max_bytes(spec);
  {
    const char *svc = json_string_value(
      json_object_get(json_object_get(spec, "world"), "service"));
    if (svc)
      a->service = xstrdup(svc);
    else if (json_array_size(json_object_get(spec, "services")))
      a->service = xstrdup("agent");
  }
  pthread_mutex_init(&a->lock, NULL);
  if (getrandom(a->key, sizeof a->key, 0) != sizeof a->key) {
    /* not secret then, but still a sandbox's own */
    uint64_t t[2] = { (uint64_t) (dsec_now_ms() * 1000),
                      (uint64_t) getpid() ^ (uint64_t) (uintptr_t) a };
    memcpy(a->key, t, sizeof a->key);
  }
  /* what the sandbox's earlier supervisors dropped */
  a->truncated = json_is_true(json_object_get(saved, "truncated"));
  json_object_foreach(json_object_get(saved, "dropped"), k, v)
  {
    if (json_is_integer(v) && json_integer_value(v) > 0)
      count_drop(a, k, (uint64_t) json_integer_value(v));
  }
  return a;
}

void dsec_audit_free(struct dsec_audit *a)
{
  if (!a)
    return;
  for (size_t i = 0; i < a->ndropped; i++)
    free(a->dropped[i].type);
  free(a->seen);
  free(a->service);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

bool dsec_audit_is_new(struct dsec_audit *a, enum dsec_audit_kind kind,
                       const void *key, size_t len)
{
  uint64_t h = seen_hash(a, kind, key, len);
  bool fresh;

  pthread_mutex_lock(&a->lock);
  fresh = !seen_has(a, h);
  if (fresh && a->count[kind] >= kind_limits[kind]) {
    fresh = false;
    if (!a->full_said[kind]) {
      /* from now on a new one of this kind is an ordinary record */
      json_t *ev = json_pack("{s:s, s:s, s:I}", "type", "audit_seen_full",
                             "kind", kind_names[kind], "limit",
                             (json_int_t) kind_limits[kind]);
      size_t n;
      _cleanup_free_ char *line = render(a, ev, false, &n);
      json_decref(ev);
      a->full_said[kind] = true;
      if (line)
        write_line(a, line, n, NOTICE, "audit_seen_full", NULL);
    }
  }
  pthread_mutex_unlock(&a->lock);
  return fresh;
}

int dsec_audit_append(struct dsec_audit *a, json_t *ev, struct dsec_error **err)
{
  return append(a, ev, false, 0, NULL, 0, err);
}

int dsec_audit_append_first(struct dsec_audit *a, json_t *ev,
                            enum dsec_audit_kind kind, const void *key,
                            size_t len, struct dsec_error **err)
{
  return append(a, ev, true, kind, key, len, err);
}

json_t *dsec_audit_status(struct dsec_audit *a)
{
  json_t *st;
  int64_t size;
  pthread_mutex_lock(&a->lock);
  size = file_size(a);
  st = json_pack("{s:I, s:I, s:o, s:b}", "bytes",
                 (json_int_t) (size < 0 ? 0 : size), "max_bytes",
                 (json_int_t) a->max, "dropped", dropped_json(a), "truncated",
                 a->truncated);
  pthread_mutex_unlock(&a->lock);
  return st;
}

void dsec_audit_finish(struct dsec_audit *a)
{
  json_t *ev;
  size_t n;
  char *line;

  pthread_mutex_lock(&a->lock);
  if (!a->ndropped) {
    pthread_mutex_unlock(&a->lock);
    return;
  }
  {
    int64_t size = file_size(a);
    ev = json_pack("{s:s, s:I, s:I, s:o}", "type", "audit_summary",
                   "max_bytes", (json_int_t) a->max, "bytes",
                   (json_int_t) (size < 0 ? 0 : size), "dropped",
                   dropped_json(a));
  }
  line = render(a, ev, false, &n);
  json_decref(ev);
  if (line)
    write_line(a, line, n, LIFECYCLE, "audit_summary", NULL);
  free(line);
  pthread_mutex_unlock(&a->lock);
}

static json_t *read_spec(const char *id)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *path = xasprintf("%s/spec.json", dir);
  _cleanup_free_ char *text = dsec_read_file_at(AT_FDCWD, path, 1 << 20, NULL,
                                                NULL);
  return text ? json_loads(text, 0, NULL) : NULL;
}

int dsec_audit_append_once(int fd, const char *id, json_t *ev,
                           struct dsec_error **err)
{
  _cleanup_close_ int own = -1;
  _cleanup_json_ json_t *spec = NULL;
  struct dsec_audit *a;
  int ret;

  if (fd < 0) {
    _cleanup_free_ char *dir = dsec_sandbox_dir(id);
    _cleanup_free_ char *path = xasprintf("%s/events.jsonl", dir);
    own = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (own < 0)
      return dsec_fail(err, errno, "cannot open %s", path);
    fd = own;
  }
  spec = read_spec(id);
  a = dsec_audit_new(fd, id, spec, NULL);
  a->truncated = true; /* the supervisor says it, not a passer-by */
  ret = dsec_audit_append(a, ev, err);
  dsec_audit_free(a);
  return ret;
}

json_t *dsec_audit_status_file(const char *id, json_t *spec, json_t *saved)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *path = xasprintf("%s/events.jsonl", dir);
  struct stat st;
  json_t *dropped = json_object_get(saved, "dropped");

  return json_pack("{s:I, s:I, s:o, s:b}", "bytes",
                   (json_int_t) (stat(path, &st) == 0 ? st.st_size : 0),
                   "max_bytes", (json_int_t) dsec_audit_max_bytes(spec),
                   "dropped",
                   json_is_object(dropped) ? json_deep_copy(dropped) : json_object(),
                   "truncated",
                   json_is_true(json_object_get(saved, "truncated")));
}
