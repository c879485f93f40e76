/* Fuzz target: the parser of dsec-run cp's copy stream (libcommon/copy.c,
 * the code the supervisor, dsec-run and the sandbox's builtins run on a
 * stream the other side wrote).  Beyond memory errors it checks what a
 * receiver relies on: a refusal has a reason; the header comes once and
 * first; the first entry is the root (path ""), every other one a
 * relative path of real names (no "", "." or ".." component, no NUL,
 * within DSEC_COPY_PATH_MAX) below a root that is a directory; kinds are
 * 'd', 'f' and 'l', a link has a target and nothing else does; data comes
 * only inside a file, in chunks of at most DSEC_COPY_CHUNK, never more
 * than the input held; nothing comes after the end; and the input fed in
 * pieces (a byte at a time, or split anywhere) gives the same events and
 * the same answer as fed whole. */
#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

struct seen {
  int names, entries, ends;
  bool in_file, root_dir;
  uint64_t data;
  uint64_t h; /* the events, hashed (FNV-1a) */
};

static void mix(struct seen *w, const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    w->h = (w->h ^ b[i]) * 1099511628211u;
}

static bool real_path(const char *p)
{
  const char *c = p;
  if (!*p || *p == '/' || strlen(p) > DSEC_COPY_PATH_MAX)
    return false;
  for (;;) {
    const char *s = strchr(c, '/');
    size_t n = s ? (size_t) (s - c) : strlen(c);
    if (n == 0 || (n == 1 && c[0] == '.') ||
        (n == 2 && c[0] == '.' && c[1] == '.'))
      return false;
    if (!s)
      return true;
    c = s + 1;
  }
}

static int w_name(void *ud, const char *name)
{
  struct seen *w = ud;
  CHECK(w->names == 0 && w->entries == 0 && w->ends == 0);
  CHECK(strlen(name) < 256 && !strchr(name, '/') && strcmp(name, ".") != 0 &&
        strcmp(name, "..") != 0);
  w->names++;
  mix(w, "h", 1);
  mix(w, name, strlen(name) + 1);
  return 0;
}

static int w_entry(void *ud, const struct dsec_copy_entry *e)
{
  struct seen *w = ud;
  CHECK(w->names == 1 && w->ends == 0 && !w->in_file);
  CHECK(e->kind == 'd' || e->kind == 'f' || e->kind == 'l');
  CHECK(e->path && (e->target != NULL) == (e->kind == 'l'));
  CHECK(e->mode <= 07777 && e->mtime_ns < 1000000000u);
  if (w->entries == 0) {
    CHECK(e->path[0] == '\0');
    w->root_dir = e->kind == 'd';
  } else
    CHECK(w->root_dir && real_path(e->path));
  if (e->target)
    CHECK(e->target[0] && strlen(e->target) <= DSEC_COPY_PATH_MAX);
  w->entries++;
  w->in_file = e->kind == 'f';
  mix(w, &e->kind, sizeof e->kind);
  mix(w, &e->mode, sizeof e->mode);
  mix(w, &e->uid, sizeof e->uid);
  mix(w, &e->gid, sizeof e->gid);
  mix(w, &e->mtime_s, sizeof e->mtime_s);
  mix(w, &e->mtime_ns, sizeof e->mtime_ns);
  mix(w, e->path, strlen(e->path) + 1);
  if (e->target)
    mix(w, e->target, strlen(e->target) + 1);
  return 0;
}

static int w_data(void *ud, const char *buf, size_t n)
{
  struct seen *w = ud;
  CHECK(w->in_file && n > 0 && n <= DSEC_COPY_CHUNK);
  w->data += n;
  /* hashed as a count, not by call: pieces may cut a chunk anywhere */
  (void) buf;
  return 0;
}

static int w_file_end(void *ud)
{
  struct seen *w = ud;
  CHECK(w->in_file);
  w->in_file = false;
  mix(w, "/", 1);
  mix(w, &w->data, sizeof w->data);
  return 0;
}

static int w_end(void *ud)
{
  struct seen *w = ud;
  CHECK(w->ends == 0 && w->entries > 0 && !w->in_file);
  w->ends++;
  mix(w, "E", 1);
  return 0;
}

static const struct dsec_copy_ops ops = {
  w_name, w_entry, w_data, w_file_end, w_end,
};

/* Feeds data in pieces of step bytes (0: whole, else a first piece of
 * split bytes and the rest in steps): the result, *w what was seen. */
static int run(const uint8_t *data, size_t size, size_t split, size_t step,
               struct seen *w, bool *done)
{
  char why[DSEC_COPY_WHY];
  struct dsec_copy_parser *p;
  size_t off = 0;
  int r = 0;

  memset(w, 0, sizeof *w);
  w->h = 14695981039346656037u;
  why[0] = '\0';
  p = dsec_copy_parser_new(&ops, w, why);
  CHECK(p);
  if (split > 0 && split < size) {
    r = dsec_copy_parse(p, (const char *) data, split);
    off = split;
  }
  while (r == 0 && off < size) {
    size_t n = step == 0 || size - off < step ? size - off : step;
    r = dsec_copy_parse(p, (const char *) data + off, n);
    off += n;
  }
  CHECK(r == 0 || r == -1);
  if (r < 0)
    CHECK(why[0] != '\0');
  *done = dsec_copy_parser_done(p);
  if (*done)
    CHECK(w->ends == 1);
  CHECK(w->data <= size);
  dsec_copy_parser_free(p);
  mix(w, &r, sizeof r);
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct seen whole, piece;
  bool done, done2;
  int r;

  if (size > (4u << 20))
    return 0;
  r = run(data, size, 0, 0, &whole, &done);
  /* split where the input says, then the rest whole */
  if (size > 1) {
    size_t split = 1 + (size_t) data[size - 1] * 7919 % (size - 1);
    CHECK(run(data, size, split, 0, &piece, &done2) == r);
    CHECK(piece.h == whole.h && done2 == done);
  }
  /* a byte at a time (what a slow pipe does) */
  if (size <= 8192) {
    CHECK(run(data, size, 0, 1, &piece, &done2) == r);
    CHECK(piece.h == whole.h && done2 == done);
  }
  return 0;
}
