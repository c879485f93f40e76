/* The copy stream: see copy.h.  libc only (dsec-agent is static). */
#define _GNU_SOURCE
#include "copy.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int say(char *why, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
static int say(char *why, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, DSEC_COPY_WHY, fmt, ap);
  va_end(ap);
  return -1;
}

static int write_all(int fd, const void *buf, size_t n)
{
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t) w;
  }
  return 0;
}

/* A path of the stream: relative, no empty, "." or ".." component. */
static bool path_ok(const char *p)
{
  const char *c = p;
  if (!*p || *p == '/')
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

/* ---- the parser */

enum {
  S_MAGIC, S_KIND, S_NAMELEN, S_NAME, S_FIXED, S_PATH, S_TLEN, S_TARGET,
  S_CLEN, S_DATA, S_DONE,
};

#define FIXED_LEN (4 * 3 + 8 + 4 + 4)

struct dsec_copy_parser {
  const struct dsec_copy_ops *ops;
  void *ud;
  char *why;
  int state;
  size_t need, got;       /* bytes the field needs, and has */
  unsigned char fix[FIXED_LEN];
  char name[256];
  char path[DSEC_COPY_PATH_MAX + 1];
  char target[DSEC_COPY_PATH_MAX + 1];
  struct dsec_copy_entry e;
  uint64_t left;          /* of the chunk */
  bool named, rooted, root_dir;
};

struct dsec_copy_parser *dsec_copy_parser_new(const struct dsec_copy_ops *ops,
                                              void *ud, char *why)
{
  struct dsec_copy_parser *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->ops = ops;
  p->ud = ud;
  p->why = why;
  p->state = S_MAGIC;
  p->need = 8;
  return p;
}

void dsec_copy_parser_free(struct dsec_copy_parser *p)
{
  free(p);
}

bool dsec_copy_parser_done(const struct dsec_copy_parser *p)
{
  return p->state == S_DONE;
}

/* The bytes of file data the parser waits for now (0: a header's). */
static uint64_t parser_data_left(const struct dsec_copy_parser *p)
{
  return p->state == S_DATA ? p->left : 0;
}

/* The bytes of header the parser waits for now (at least 1). */
static size_t header_want(const struct dsec_copy_parser *p)
{
  size_t n = p->need - p->got;
  return n ? n : 1;
}

/* n of those went to the file otherwise (spliced). */
static void parser_data_taken(struct dsec_copy_parser *p, size_t n)
{
  p->left -= n;
  if (p->left == 0) {
    p->state = S_CLEN;
    p->need = 4;
    p->got = 0;
  }
}

static uint32_t be32(const unsigned char *b)
{
  return (uint32_t) b[0] << 24 | (uint32_t) b[1] << 16 | (uint32_t) b[2] << 8 |
         b[3];
}

static void expect(struct dsec_copy_parser *p, int state, size_t need)
{
  p->state = state;
  p->need = need;
  p->got = 0;
}

/* The entry is whole (its path, and a link's target). */
static int entry_ready(struct dsec_copy_parser *p)
{
  struct dsec_copy_entry *e = &p->e;
  if (!p->rooted) {
    if (p->path[0])
      return say(p->why, "copy stream: the first entry is not the root");
    p->rooted = true;
    p->root_dir = e->kind == 'd';
  } else if (!p->root_dir || !path_ok(p->path))
    return say(p->why, "copy stream: a bad path `%s`", p->path);
  e->path = p->path;
  e->target = e->kind == 'l' ? p->target : NULL;
  if (p->ops->entry && p->ops->entry(p->ud, e) < 0)
    return -1;
  if (e->kind == 'f')
    expect(p, S_CLEN, 4);
  else
    expect(p, S_KIND, 1);
  return 0;
}

/* A field is complete: what it means, and what comes next. */
static int field(struct dsec_copy_parser *p)
{
  uint32_t n;
  switch (p->state) {
  case S_MAGIC:
    if (memcmp(p->fix, DSEC_COPY_MAGIC, 8) != 0)
      return say(p->why, "not a copy stream");
    expect(p, S_KIND, 1);
    return 0;
  case S_KIND:
    p->e.kind = p->fix[0];
    if (p->e.kind == 'h' && !p->named) {
      expect(p, S_NAMELEN, 4);
      return 0;
    }
    if (!p->named)
      return say(p->why, "copy stream: no header");
    if (p->e.kind == 'e') {
      if (!p->rooted)
        return say(p->why, "copy stream: nothing in it");
      p->state = S_DONE;
      return p->ops->end ? p->ops->end(p->ud) : 0;
    }
    if (p->e.kind != 'd' && p->e.kind != 'f' && p->e.kind != 'l')
      return say(p->why, "copy stream: an entry of unknown kind %d",
                 p->e.kind);
    expect(p, S_FIXED, FIXED_LEN);
    return 0;
  case S_NAMELEN:
    n = be32(p->fix);
    if (n >= sizeof p->name)
      return say(p->why, "copy stream: the name is too long");
    expect(p, S_NAME, n);
    if (n == 0)
      return field(p);
    return 0;
  case S_NAME:
    p->name[p->got] = '\0';
    if (strlen(p->name) != p->got || strchr(p->name, '/') ||
        strcmp(p->name, ".") == 0 || strcmp(p->name, "..") == 0)
      return say(p->why, "copy stream: a bad name");
    p->named = true;
    if (p->ops->name && p->ops->name(p->ud, p->name) < 0)
      return -1;
    expect(p, S_KIND, 1);
    return 0;
  case S_FIXED:
    p->e.mode = be32(p->fix) & 07777;
    p->e.uid = be32(p->fix + 4);
    p->e.gid = be32(p->fix + 8);
    p->e.mtime_s = (int64_t) ((uint64_t) be32(p->fix + 12) << 32 |
                              be32(p->fix + 16));
    p->e.mtime_ns = be32(p->fix + 20);
    if (p->e.mtime_ns >= 1000000000u)
      p->e.mtime_ns = 0;
    n = be32(p->fix + 24);
    if (n > DSEC_COPY_PATH_MAX)
      return say(p->why, "copy stream: a path is too long");
    expect(p, S_PATH, n);
    if (n == 0)
      return field(p);
    return 0;
  case S_PATH:
    p->path[p->got] = '\0';
    if (strlen(p->path) != p->got)
      return say(p->why, "copy stream: a path holds a NUL byte");
    if (p->e.kind == 'l') {
      expect(p, S_TLEN, 4);
      return 0;
    }
    return entry_ready(p);
  case S_TLEN:
    n = be32(p->fix);
    if (n == 0 || n > DSEC_COPY_PATH_MAX)
      return say(p->why, "copy stream: a bad link target");
    expect(p, S_TARGET, n);
    return 0;
  case S_TARGET:
    p->target[p->got] = '\0';
    if (strlen(p->target) != p->got)
      return say(p->why, "copy stream: a link target holds a NUL byte");
    return entry_ready(p);
  case S_CLEN:
    n = be32(p->fix);
    if (n > DSEC_COPY_CHUNK)
      return say(p->why, "copy stream: a chunk is too large");
    if (n == 0) {
      if (p->ops->file_end && p->ops->file_end(p->ud) < 0)
        return -1;
      expect(p, S_KIND, 1);
      return 0;
    }
    p->left = n;
    p->state = S_DATA;
    return 0;
  }
  return say(p->why, "copy stream: internal state");
}

int dsec_copy_parse(struct dsec_copy_parser *p, const char *buf, size_t n)
{
  while (n > 0) {
    if (p->state == S_DONE)
      return say(p->why, "copy stream: data after its end");
    if (p->state == S_DATA) {
      size_t k = n < p->left ? n : (size_t) p->left;
      if (p->ops->data && p->ops->data(p->ud, buf, k) < 0)
        return -1;
      buf += k;
      n -= k;
      p->left -= k;
      if (p->left == 0)
        expect(p, S_CLEN, 4);
      continue;
    }
    {
      unsigned char *to = p->state == S_NAME     ? (unsigned char *) p->name
                          : p->state == S_PATH   ? (unsigned char *) p->path
                          : p->state == S_TARGET ? (unsigned char *) p->target
                                                 : p->fix;
      size_t k = p->need - p->got < n ? p->need - p->got : n;
      memcpy(to + p->got, buf, k);
      p->got += k;
      buf += k;
      n -= k;
      if (p->got == p->need && field(p) < 0)
        return -1;
    }
  }
  return 0;
}

/* ---- the sender */

/* What a source is called in its stream (its base name, "" for its
 * contents: "dir/.", "/", "."), cut from copy (which it edits); *follow
 * when its last link is followed ("dir/"). */
static char *source_name(char *copy, bool *contents, bool *follow)
{
  size_t n = strlen(copy);
  char *slash, *base;

  /* "dir/." is dir's contents; "dir/" is dir, followed if a link */
  if (n >= 2 && strcmp(copy + n - 2, "/.") == 0) {
    *contents = *follow = true;
    copy[n - 1] = '\0';
    n--;
  }
  while (n > 1 && copy[n - 1] == '/') {
    *follow = true;
    copy[--n] = '\0';
  }
  slash = strrchr(copy, '/');
  base = slash ? slash + 1 : copy;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 ||
      strcmp(copy, "/") == 0)
    *contents = true;
  return *contents ? copy + n : base;
}

char *dsec_copy_source_name(const char *src)
{
  char *copy = strdup(src), *name;
  bool contents = false, follow = false;
  if (!copy)
    return NULL;
  name = strdup(source_name(copy, &contents, &follow));
  free(copy);
  return name;
}

struct sender {
  int fd;
  char *why;
  char buf[65536];
  size_t len;
  char *data;           /* a chunk being read */
  uint64_t skipped;
  bool splice;          /* the stream is a pipe, as far as we know */
  char path[DSEC_COPY_PATH_MAX + 1];
};

static int s_flush(struct sender *s)
{
  if (s->len && write_all(s->fd, s->buf, s->len) < 0)
    return say(s->why, "cannot write the copy stream: %s", strerror(errno));
  s->len = 0;
  return 0;
}

static int s_put(struct sender *s, const void *p, size_t n)
{
  if (s->len + n > sizeof s->buf && s_flush(s) < 0)
    return -1;
  if (n > sizeof s->buf)
    return write_all(s->fd, p, n) < 0
             ? say(s->why, "cannot write the copy stream: %s", strerror(errno))
             : 0;
  memcpy(s->buf + s->len, p, n);
  s->len += n;
  return 0;
}

static int s_u32(struct sender *s, uint32_t v)
{
  uint32_t b = htobe32(v);
  return s_put(s, &b, 4);
}

static int s_entry(struct sender *s, int kind, const char *path,
                   const struct stat *st)
{
  unsigned char k = (unsigned char) kind;
  uint64_t t = (uint64_t) st->st_mtim.tv_sec;
  size_t n = strlen(path);
  if (s_put(s, &k, 1) < 0 || s_u32(s, st->st_mode & 07777) < 0 ||
      s_u32(s, st->st_uid) < 0 || s_u32(s, st->st_gid) < 0 ||
      s_u32(s, (uint32_t) (t >> 32)) < 0 || s_u32(s, (uint32_t) t) < 0 ||
      s_u32(s, (uint32_t) st->st_mtim.tv_nsec) < 0 ||
      s_u32(s, (uint32_t) n) < 0 || s_put(s, path, n) < 0)
    return -1;
  return 0;
}

/* A regular file's data, as it reads now (a file that grows or shrinks
 * meanwhile is sent as read). */
static int s_file(struct sender *s, int fd, const char *path,
                  const struct stat *st)
{
  off_t left = st->st_size;
  /* what the file held when it was opened: spliced from the page cache
   * to the stream (a pipe), no copy through us; a file that shrinks
   * meanwhile is padded with zeros (the chunk's length is sent first),
   * one that grows is read on to its end */
  while (left > 0 && s->splice) {
    size_t want = left < (off_t) DSEC_COPY_CHUNK ? (size_t) left
                                                : DSEC_COPY_CHUNK;
    size_t moved = 0;
    if (s_u32(s, (uint32_t) want) < 0 || s_flush(s) < 0)
      return -1;
    while (moved < want) {
      ssize_t n = splice(fd, NULL, s->fd, NULL, want - moved, SPLICE_F_MORE);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && moved == 0 && (errno == EINVAL || errno == ENOSYS)) {
        /* not a pipe: read and write from here on, this chunk too */
        s->splice = false;
        break;
      }
      if (n < 0 && errno == EPIPE)
        return say(s->why, "cannot write the copy stream: %s",
                   strerror(errno));
      if (n < 0)
        return say(s->why, "cannot read %s: %s", *path ? path : "the file",
                   strerror(errno));
      if (n == 0) {
        /* shrunk: the rest of the chunk as zeros */
        memset(s->data, 0, want - moved);
        if (write_all(s->fd, s->data, want - moved) < 0)
          return say(s->why, "cannot write the copy stream: %s",
                     strerror(errno));
        left = 0;
        moved = want;
        break;
      }
      moved += (size_t) n;
    }
    if (moved < want) {
      /* the chunk announced: the rest of its data read and written */
      size_t got = 0;
      while (got < want - moved) {
        ssize_t n = read(fd, s->data + got, want - moved - got);
        if (n < 0 && errno == EINTR)
          continue;
        if (n < 0)
          return say(s->why, "cannot read %s: %s", *path ? path : "the file",
                     strerror(errno));
        if (n == 0)
          break;
        got += (size_t) n;
      }
      memset(s->data + got, 0, want - moved - got);
      if (s_put(s, s->data, want - moved) < 0)
        return -1;
    }
    left -= (off_t) want;
  }
  for (;;) {
    ssize_t n = read(fd, s->data, DSEC_COPY_CHUNK);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return say(s->why, "cannot read %s: %s", *path ? path : "the file",
                 strerror(errno));
    if (s_u32(s, (uint32_t) n) < 0)
      return -1;
    if (n == 0)
      return 0;
    if (s_put(s, s->data, (size_t) n) < 0)
      return -1;
  }
}

static int s_link(struct sender *s, int dirfd, const char *name,
                  const char *path, const struct stat *st)
{
  char target[DSEC_COPY_PATH_MAX + 1];
  ssize_t n = readlinkat(dirfd, name, target, sizeof target);
  if (n <= 0 || (size_t) n >= sizeof target)
    return say(s->why, "cannot read the link %s: %s", *path ? path : name,
               n < 0 ? strerror(errno) : "too long");
  if (s_entry(s, 'l', path, st) < 0 || s_u32(s, (uint32_t) n) < 0 ||
      s_put(s, target, (size_t) n) < 0)
    return -1;
  return 0;
}

static int cmp_names(const void *a, const void *b)
{
  return strcmp(*(char *const *) a, *(char *const *) b);
}

/* One entry: name in dirfd, at path (s->path, plen long) of the stream. */
static int s_any(struct sender *s, int dirfd, const char *name, size_t plen,
                 int depth);

static int s_dir(struct sender *s, int fd, size_t plen, int depth)
{
  DIR *d;
  struct dirent *de;
  char **names = NULL;
  size_t n = 0, cap = 0;
  int r = 0, dfd = dup(fd);

  if (depth > 512)
    return say(s->why, "%s: directories nested too deep", s->path);
  if (dfd < 0 || !(d = fdopendir(dfd))) {
    if (dfd >= 0)
      close(dfd);
    return say(s->why, "cannot read %s: %s", plen ? s->path : "the directory",
               strerror(errno));
  }
  errno = 0;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (n == cap) {
      char **m = realloc(names, sizeof *names * (cap = cap ? cap * 2 : 64));
      if (!m) {
        r = say(s->why, "out of memory");
        break;
      }
      names = m;
    }
    if (!(names[n] = strdup(de->d_name))) {
      r = say(s->why, "out of memory");
      break;
    }
    n++;
  }
  closedir(d);
  /* sorted: the same tree makes the same stream */
  if (r == 0 && n > 1) /* an empty directory has no list (NULL) */
    qsort(names, n, sizeof *names, cmp_names);
  for (size_t i = 0; i < n; i++) {
    if (r == 0)
      r = s_any(s, fd, names[i], plen, depth + 1);
    free(names[i]);
  }
  free(names);
  return r;
}

static int s_any(struct sender *s, int dirfd, const char *name, size_t plen,
                 int depth)
{
  struct stat st;
  size_t nl = strlen(name);
  int fd, r;

  if (plen + 1 + nl > DSEC_COPY_PATH_MAX)
    return say(s->why, "%s/%s: the path is too long", s->path, name);
  if (plen)
    s->path[plen++] = '/';
  memcpy(s->path + plen, name, nl + 1);
  plen += nl;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 /* gone meanwhile */
                           : say(s->why, "cannot read %s: %s", s->path,
                                 strerror(errno));
  if (S_ISLNK(st.st_mode))
    return s_link(s, dirfd, name, s->path, &st);
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    s->skipped++;
    return 0;
  }
  /* O_NONBLOCK: what turned into a fifo meanwhile does not hang us */
  fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                             (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0));
  if (fd < 0)
    return errno == ENOENT ? 0
                           : say(s->why, "cannot read %s: %s", s->path,
                                 strerror(errno));
  if (fstat(fd, &st) < 0 || (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))) {
    close(fd);
    s->skipped++;
    return 0;
  }
  if (S_ISREG(st.st_mode))
    fcntl(fd, F_SETFL, 0);
  r = s_entry(s, S_ISDIR(st.st_mode) ? 'd' : 'f', s->path, &st);
  if (r == 0)
    r = S_ISDIR(st.st_mode) ? s_dir(s, fd, plen, depth)
                            : s_file(s, fd, s->path, &st);
  close(fd);
  return r;
}

int dsec_copy_send(int out, const char *src, uint64_t *skipped, char *why)
{
  struct sender *s = calloc(1, sizeof *s);
  bool contents = false, follow = false;
  char *copy = NULL, *base;
  struct stat st;
  int fd = -1, r = -1;

  if (!s || !(s->data = malloc(DSEC_COPY_CHUNK)) || !(copy = strdup(src))) {
    r = say(why, "out of memory");
    goto out;
  }
  s->fd = out;
  s->why = why;
  {
    struct stat os;
    s->splice = fstat(out, &os) == 0 && S_ISFIFO(os.st_mode);
  }
  base = source_name(copy, &contents, &follow);
  /* what it is, before it is opened (a device is never opened) */
  fd = open(src, O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0 || fstat(fd, &st) < 0) {
    say(why, "cannot read %s: %s", src, strerror(errno));
    goto out;
  }
  if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
    struct stat again;
    int rd = open(src, O_RDONLY | O_NONBLOCK | O_CLOEXEC |
                         (follow ? 0 : O_NOFOLLOW));
    if (rd < 0 || fstat(rd, &again) < 0 || again.st_dev != st.st_dev ||
        again.st_ino != st.st_ino) {
      say(why, "cannot read %s: %s", src,
          rd < 0 ? strerror(errno) : "it changed while opened");
      if (rd >= 0)
        close(rd);
      goto out;
    }
    close(fd);
    fd = rd;
  }
  if (contents && !S_ISDIR(st.st_mode)) {
    say(why, "%s is not a directory", src);
    goto out;
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
    say(why, "%s is neither a directory, a regular file nor a link", src);
    goto out;
  }
  if (s_put(s, DSEC_COPY_MAGIC, 8) < 0 || s_put(s, "h", 1) < 0)
    goto out;
  {
    const char *name = contents ? "" : base;
    if (s_u32(s, (uint32_t) strlen(name)) < 0 ||
        s_put(s, name, strlen(name)) < 0)
      goto out;
  }
  if (S_ISLNK(st.st_mode)) {
    if (s_link(s, fd, "", "", &st) < 0)
      goto out;
  } else {
    if (S_ISREG(st.st_mode))
      fcntl(fd, F_SETFL, 0);
    if (s_entry(s, S_ISDIR(st.st_mode) ? 'd' : 'f', "", &st) < 0 ||
        (S_ISDIR(st.st_mode) ? s_dir(s, fd, 0, 0) : s_file(s, fd, src, &st)) < 0)
      goto out;
  }
  if (s_put(s, "e", 1) < 0 || s_flush(s) < 0)
    goto out;
  if (skipped)
    *skipped = s->skipped;
  r = 0;
out:
  if (fd >= 0)
    close(fd);
  if (s)
    free(s->data);
  free(s);
  free(copy);
  return r;
}

/* ---- the receiver */

struct dirfix {
  char *path; /* below the root; NULL: the root itself */
  struct dsec_copy_entry e;
};

struct dsec_copy_sink {
  char *dst;
  unsigned keep;
  char *expect;          /* the name the stream must give, or NULL */
  uid_t uid;             /* the owner when the stream's is not kept */
  gid_t gid;
  char *why;
  char name[256];
  int parent;            /* where the root goes */
  char *leaf;            /* its name there */
  int root;              /* the root directory, or -1 */
  /* the directory of the last entry, by path below the root */
  char *cpath;
  int cfd;
  /* the file being written: a temporary name beside leaf in dir */
  int fd, fdir;
  char tmp[64];
  char *fleaf;
  struct dsec_copy_entry fe;
  struct dirfix *fix;
  size_t nfix;
  unsigned seq;
};

struct dsec_copy_sink *dsec_copy_sink_new(const char *dst, unsigned keep,
                                          uid_t uid, gid_t gid, char *why)
{
  struct dsec_copy_sink *s = calloc(1, sizeof *s);
  if (!s || !(s->dst = strdup(dst))) {
    free(s);
    say(why, "out of memory");
    return NULL;
  }
  s->keep = keep;
  s->uid = uid;
  s->gid = gid;
  s->why = why;
  why[0] = '\0';
  s->parent = s->root = s->cfd = s->fd = s->fdir = -1;
  return s;
}

void dsec_copy_sink_free(struct dsec_copy_sink *s)
{
  if (!s)
    return;
  if (s->fd >= 0) {
    close(s->fd);
    unlinkat(s->fdir, s->tmp, 0);
  }
  if (s->parent >= 0)
    close(s->parent);
  if (s->root >= 0)
    close(s->root);
  if (s->cfd >= 0)
    close(s->cfd);
  for (size_t i = 0; i < s->nfix; i++)
    free(s->fix[i].path);
  free(s->fix);
  free(s->cpath);
  free(s->fleaf);
  free(s->leaf);
  free(s->dst);
  free(s->expect);
  free(s);
}

static int k_name(void *ud, const char *name)
{
  struct dsec_copy_sink *s = ud;
  if (s->expect && strcmp(s->expect, name) != 0)
    return say(s->why, "the copy stream names `%s`, not `%s`", name,
               s->expect);
  snprintf(s->name, sizeof s->name, "%s", name);
  return 0;
}

static mode_t k_mode(struct dsec_copy_sink *s, const struct dsec_copy_entry *e)
{
  return (mode_t) (e->mode & (s->keep & DSEC_COPY_KEEP_SETID ? 07777 : 0777));
}

/* Owner, mode and times of what fd (or name in dirfd, a link) is. */
static int k_meta(struct dsec_copy_sink *s, int fd, int dirfd, const char *name,
                  const struct dsec_copy_entry *e, const char *what)
{
  struct timespec ts[2] = { { e->mtime_s, e->mtime_ns },
                            { e->mtime_s, e->mtime_ns } };
  bool keep = s->keep & DSEC_COPY_KEEP_OWNER;
  if (keep || s->uid != (uid_t) -1) {
    uid_t u = keep ? e->uid : s->uid;
    gid_t g = keep ? e->gid : s->gid;
    int r = fd >= 0 ? fchown(fd, u, g)
                    : fchownat(dirfd, name, u, g, AT_SYMLINK_NOFOLLOW);
    if (r < 0)
      return say(s->why, "cannot give %s to %u:%u: %s", what, u, g,
                 strerror(errno));
  }
  /* after the owner: chown clears setuid and setgid */
  if (fd >= 0 && fchmod(fd, k_mode(s, e)) < 0)
    return say(s->why, "cannot set the mode of %s: %s", what, strerror(errno));
  if ((fd >= 0 ? futimens(fd, ts)
               : utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW)) < 0 &&
      errno != EPERM)
    return say(s->why, "cannot set the times of %s: %s", what,
               strerror(errno));
  return 0;
}

/* The directory dir (below the root, "" for the root), every component
 * opened without following a link. */
static int k_dir(struct dsec_copy_sink *s, const char *dir)
{
  char *copy, *c, *save = NULL;
  int fd;

  if (s->cpath && strcmp(s->cpath, dir) == 0)
    return s->cfd;
  if (s->cfd >= 0)
    close(s->cfd);
  free(s->cpath);
  s->cpath = NULL;
  s->cfd = -1;
  fd = dup(s->root);
  if (fd < 0 || !(copy = strdup(dir))) {
    if (fd >= 0)
      close(fd);
    return say(s->why, "out of memory");
  }
  for (c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      int e = errno;
      close(fd);
      say(s->why, "%s: %s", dir,
          e == ELOOP || e == ENOTDIR ? "a link or a file is in the way"
                                     : strerror(e));
      free(copy);
      return -1;
    }
    close(fd);
    fd = next;
  }
  free(copy);
  s->cpath = strdup(dir);
  s->cfd = fd;
  return fd;
}

/* Where the root goes: into dst when it is a directory (as name, or its
 * contents when the source gave none), else as dst. */
static int k_place_root(struct dsec_copy_sink *s, const struct dsec_copy_entry *e)
{
  int d = open(s->dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t n = strlen(s->dst);
  char *copy, *slash;

  if (d >= 0 && s->name[0]) {
    s->parent = d;
    s->leaf = strdup(s->name);
    return s->leaf ? 0 : say(s->why, "out of memory");
  }
  if (d >= 0) {
    /* contents into an existing directory: merged */
    if (e->kind != 'd') {
      close(d);
      return say(s->why, "%s is a directory", s->dst);
    }
    s->root = d;
    return 1;
  }
  if (errno != ENOENT && errno != ENOTDIR)
    return say(s->why, "%s: %s", s->dst, strerror(errno));
  if (n > 0 && s->dst[n - 1] == '/')
    return say(s->why, "%s: no such directory", s->dst);
  if (!(copy = strdup(s->dst)))
    return say(s->why, "out of memory");
  slash = strrchr(copy, '/');
  if (slash) {
    *slash = '\0';
    s->leaf = strdup(slash + 1);
    d = open(slash == copy ? "/" : copy, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0 && errno == ENOENT && (s->keep & DSEC_COPY_PARENTS)) {
      /* mkdir -p of the parent, each made one the receiver's owner's */
      for (char *c = copy + 1;; c++) {
        char was = *c;
        if (was != '/' && was != '\0')
          continue;
        *c = '\0';
        if (mkdir(copy, 0755) == 0 && s->uid != (uid_t) -1 &&
            lchown(copy, s->uid, s->gid) < 0) {
          /* the writer's, then */
        }
        *c = was;
        if (!was)
          break;
      }
      d = open(copy, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
  } else {
    s->leaf = strdup(copy);
    d = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (d < 0) {
    say(s->why, "%s: %s", slash && slash != copy ? copy : ".", strerror(errno));
    free(copy);
    return -1;
  }
  free(copy);
  s->parent = d;
  if (!s->leaf || !*s->leaf || strcmp(s->leaf, ".") == 0 ||
      strcmp(s->leaf, "..") == 0)
    return say(s->why, "%s: not a name to copy to", s->dst);
  return 0;
}

static int k_entry(void *ud, const struct dsec_copy_entry *e)
{
  struct dsec_copy_sink *s = ud;
  const char *leaf;
  int dir;

  if (!*e->path) {
    int r = k_place_root(s, e);
    if (r < 0)
      return -1;
    if (r > 0)
      return 0; /* merged into dst */
    dir = s->parent;
    leaf = s->leaf;
  } else {
    const char *slash = strrchr(e->path, '/');
    char *d = slash ? strndup(e->path, (size_t) (slash - e->path)) : strdup("");
    if (!d)
      return say(s->why, "out of memory");
    dir = k_dir(s, d);
    free(d);
    if (dir < 0)
      return -1;
    leaf = slash ? slash + 1 : e->path;
  }

  if (e->kind == 'd') {
    struct stat st;
    bool made = mkdirat(dir, leaf, 0700) == 0;
    if (!made && (errno != EEXIST ||
                  fstatat(dir, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                  !S_ISDIR(st.st_mode)))
      return say(s->why, "cannot make the directory %s: %s",
                 *e->path ? e->path : s->leaf,
                 errno == EEXIST ? "something else is there" : strerror(errno));
    if (!*e->path) {
      s->root = openat(dir, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (s->root < 0)
        return say(s->why, "%s: %s", s->leaf, strerror(errno));
    }
    if (made) {
      /* its mode and times once what is in it is made */
      struct dirfix *f = realloc(s->fix, sizeof *s->fix * (s->nfix + 1));
      if (!f)
        return say(s->why, "out of memory");
      s->fix = f;
      f[s->nfix].e = *e;
      f[s->nfix].path = *e->path ? strdup(e->path) : NULL;
      f[s->nfix].e.path = f[s->nfix].e.target = NULL;
      if (*e->path && !f[s->nfix].path)
        return say(s->why, "out of memory");
      s->nfix++;
    }
    return 0;
  }

  /* a file or a link: made beside its name, then renamed over it */
  snprintf(s->tmp, sizeof s->tmp, ".dsec-cp.%d.%u", (int) getpid(), s->seq++);
  if (e->kind == 'l') {
    if (symlinkat(e->target, dir, s->tmp) < 0)
      return say(s->why, "cannot make the link %s: %s",
                 *e->path ? e->path : s->leaf, strerror(errno));
    if (k_meta(s, -1, dir, s->tmp, e, *e->path ? e->path : s->leaf) < 0 ||
        renameat(dir, s->tmp, dir, leaf) < 0) {
      int er = errno;
      unlinkat(dir, s->tmp, 0);
      return s->why[0] ? -1
                       : say(s->why, "cannot make the link %s: %s",
                             *e->path ? e->path : s->leaf, strerror(er));
    }
    return 0;
  }
  s->fd = openat(dir, s->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 0600);
  if (s->fd < 0)
    return say(s->why, "cannot write %s: %s", *e->path ? e->path : s->leaf,
               strerror(errno));
  s->fdir = dup(dir);
  free(s->fleaf);
  s->fleaf = strdup(leaf);
  s->fe = *e;
  s->fe.path = s->fe.target = NULL;
  if (s->fdir < 0 || !s->fleaf)
    return say(s->why, "out of memory");
  return 0;
}

static int k_data(void *ud, const char *buf, size_t n)
{
  struct dsec_copy_sink *s = ud;
  if (s->fd < 0)
    return say(s->why, "copy stream: data outside a file");
  if (write_all(s->fd, buf, n) < 0)
    return say(s->why, "cannot write %s: %s", s->fleaf, strerror(errno));
  return 0;
}

static int k_file_end(void *ud)
{
  struct dsec_copy_sink *s = ud;
  int r = 0;
  if (s->fd < 0)
    return say(s->why, "copy stream: the end of no file");
  if (k_meta(s, s->fd, -1, NULL, &s->fe, s->fleaf) < 0)
    r = -1;
  if (close(s->fd) < 0 && r == 0)
    r = say(s->why, "cannot write %s: %s", s->fleaf, strerror(errno));
  s->fd = -1;
  if (r == 0 && renameat(s->fdir, s->tmp, s->fdir, s->fleaf) < 0)
    r = say(s->why, "cannot write %s: %s", s->fleaf,
            errno == EISDIR ? "a directory is there" : strerror(errno));
  if (r < 0)
    unlinkat(s->fdir, s->tmp, 0);
  close(s->fdir);
  s->fdir = -1;
  return r;
}

/* The directories made get their modes and times last, deepest first
 * (a read-only one was written into). */
static int k_end(void *ud)
{
  struct dsec_copy_sink *s = ud;
  for (size_t i = s->nfix; i-- > 0;) {
    struct dirfix *f = &s->fix[i];
    int fd;
    if (!f->path)
      fd = dup(s->root);
    else {
      const char *slash = strrchr(f->path, '/');
      char *d = slash ? strndup(f->path, (size_t) (slash - f->path)) : strdup("");
      int pd = d ? k_dir(s, d) : -1;
      free(d);
      if (pd < 0)
        return -1;
      fd = openat(pd, slash ? slash + 1 : f->path,
                  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0)
      return say(s->why, "%s: %s", f->path ? f->path : s->leaf, strerror(errno));
    if (k_meta(s, fd, -1, NULL, &f->e, f->path ? f->path : s->leaf) < 0) {
      close(fd);
      return -1;
    }
    close(fd);
  }
  return 0;
}

const struct dsec_copy_ops dsec_copy_sink_ops = {
  k_name, k_entry, k_data, k_file_end, k_end,
};

int dsec_copy_receive(int in, const char *dst, unsigned keep, uid_t uid,
                      gid_t gid, char *why)
{
  return dsec_copy_receive_as(in, dst, keep, uid, gid, NULL, why);
}

int dsec_copy_receive_as(int in, const char *dst, unsigned keep, uid_t uid,
                         gid_t gid, const char *name, char *why)
{
  struct dsec_copy_sink *s = dsec_copy_sink_new(dst, keep, uid, gid, why);
  struct dsec_copy_parser *p = s ? dsec_copy_parser_new(&dsec_copy_sink_ops, s, why)
                                 : NULL;
  char *buf = malloc(1u << 20);
  struct stat st;
  bool spl = fstat(in, &st) == 0 && S_ISFIFO(st.st_mode);
  int r = -1;

  why[0] = '\0';
  if (s && name)
    s->expect = strdup(name); /* NULL: out of memory, caught below */
  if (!s || !p || !buf || (name && !s->expect)) {
    if (!why[0])
      say(why, "out of memory");
    goto out;
  }
  for (;;) {
    uint64_t left = parser_data_left(p);
    size_t want = 1u << 20;
    ssize_t n;
    if (left > 0 && spl && s->fd >= 0) {
      /* a file's data: from the stream (a pipe) to the file, no copy
       * through us */
      n = splice(in, NULL, s->fd, NULL, left, SPLICE_F_MOVE);
      if (n < 0 && errno == EINTR)
        continue;
      if (n > 0) {
        parser_data_taken(p, (size_t) n);
        continue;
      }
      if (n == 0)
        break; /* cut short */
      if (errno != EINVAL && errno != ENOSYS) {
        say(why, "cannot write %s: %s", s->fleaf, strerror(errno));
        goto out;
      }
      spl = false;
    }
    /* headers: no more than they need, so that data can be spliced */
    if (spl)
      want = left > 0 ? (left < want ? (size_t) left : want)
                      : header_want(p);
    n = read(in, buf, want);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      say(why, "cannot read the copy stream: %s", strerror(errno));
      goto out;
    }
    if (n == 0)
      break;
    if (dsec_copy_parse(p, buf, (size_t) n) < 0)
      goto out;
  }
  if (!dsec_copy_parser_done(p)) {
    say(why, "the copy stream was cut short");
    goto out;
  }
  r = 0;
out:
  free(buf);
  dsec_copy_parser_free(p);
  dsec_copy_sink_free(s);
  return r;
}
