/* Unit tests for libcommon/copy.c, the copy stream of dsec-run cp: a tree
 * sent by dsec_copy_send and made again by dsec_copy_receive through a
 * pipe; what the receiver keeps (modes, times, owners, set-id bits); the
 * parser's refusal of every malformed stream; and that a receiver never
 * writes outside its destination, whatever the stream or the destination
 * already holds. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "copy.h"
#include "tap.h"

static const char *tmp;

/* ---- helpers that do not use the code under test ---- */

/* A path under the test's directory: P("a/%s", x).  Eight buffers in
 * turn, so a call may take a few. */
TAP_PRINTF_(1, 2) static const char *P(const char *fmt, ...)
{
  static char bufs[8][4200];
  static int next;
  char *b = bufs[next++ % 8];
  int n = snprintf(b, sizeof bufs[0], "%s/", tmp);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b + n, sizeof bufs[0] - (size_t) n, fmt, ap);
  va_end(ap);
  return b;
}

static void put(const char *path, const void *buf, size_t len, mode_t mode)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, buf, len) != (ssize_t) len || fchmod(fd, mode) < 0)
    bail_out("cannot write %s: %s", path, strerror(errno));
  close(fd);
}

static void put_str(const char *path, const char *s)
{
  put(path, s, strlen(s), 0644);
}

static void mkdir_or_bail(const char *path, mode_t mode)
{
  if (mkdir(path, mode) < 0 || chmod(path, mode) < 0)
    bail_out("cannot make directory %s: %s", path, strerror(errno));
}

static void symlink_or_bail(const char *target, const char *path)
{
  if (symlink(target, path) < 0)
    bail_out("cannot make symlink %s: %s", path, strerror(errno));
}

/* Sets a path's times (a link's own) to sec.nsec. */
static void set_mtime(const char *path, time_t sec, long nsec)
{
  struct timespec ts[2] = { { sec, nsec }, { sec, nsec } };
  if (utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) < 0)
    bail_out("cannot set the times of %s: %s", path, strerror(errno));
}

static const char *slurp(const char *path)
{
  static char buf[256];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n;
  if (fd < 0)
    return "(missing)";
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
  return buf;
}

static bool exists(const char *path)
{
  struct stat st;
  return lstat(path, &st) == 0;
}

static mode_t mode_of(const char *path)
{
  struct stat st;
  return lstat(path, &st) == 0 ? st.st_mode & 07777 : (mode_t) -1;
}

static bool is_link_to(const char *path, const char *target)
{
  char buf[4200];
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  if (n < 0)
    return false;
  buf[n] = '\0';
  return strcmp(buf, target) == 0;
}

/* Entries of directory path (0 for an empty one, -1 if unreadable). */
static int count_entries(const char *path)
{
  DIR *d = opendir(path);
  struct dirent *de;
  int n = 0;
  if (!d)
    return -1;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

/* Entries of directory path named like the receiver's temporary files. */
static int count_temps(const char *path)
{
  DIR *d = opendir(path);
  struct dirent *de;
  int n = 0;
  if (!d)
    return -1;
  while ((de = readdir(d)))
    if (strncmp(de->d_name, ".dsec-cp.", 9) == 0)
      n++;
  closedir(d);
  return n;
}

static bool same_file_data(const char *a, const char *b)
{
  int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
  char ba[65536], bb[65536];
  bool same = fa >= 0 && fb >= 0;
  while (same) {
    ssize_t na = read(fa, ba, sizeof ba), nb = read(fb, bb, sizeof bb);
    /* regular files on one file system: reads of the same size fill alike */
    if (na != nb || na < 0 || memcmp(ba, bb, (size_t) na) != 0)
      same = false;
    if (na <= 0)
      break;
  }
  if (fa >= 0)
    close(fa);
  if (fb >= 0)
    close(fb);
  return same;
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The names in directory path, sorted (n set; NULL on error). */
static char **names_of(const char *path, size_t *n)
{
  DIR *d = opendir(path);
  struct dirent *de;
  char **v = NULL;
  *n = 0;
  if (!d)
    return NULL;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    v = realloc(v, sizeof *v * (*n + 1));
    if (!v || !(v[*n] = strdup(de->d_name)))
      bail_out("out of memory");
    (*n)++;
  }
  closedir(d);
  if (*n)
    qsort(v, *n, sizeof *v, cmp_str);
  return v;
}

/* Whether the trees at a and b have the same entries, kinds, permission
 * bits (mask), modification times (to the nanosecond), data and link
 * targets; the first difference is reported as a diagnostic.  Fifos,
 * devices and sockets at a are expected to be missing at b. */
static bool same_tree(const char *a, const char *b, mode_t mask)
{
  struct stat sa, sb;
  if (lstat(a, &sa) < 0) {
    diag("  %s: %s", a, strerror(errno));
    return false;
  }
  if (!S_ISDIR(sa.st_mode) && !S_ISREG(sa.st_mode) && !S_ISLNK(sa.st_mode)) {
    if (exists(b)) {
      diag("  %s was copied (a special file)", b);
      return false;
    }
    return true;
  }
  if (lstat(b, &sb) < 0) {
    diag("  %s: %s", b, strerror(errno));
    return false;
  }
  if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT)) {
    diag("  %s and %s differ in kind", a, b);
    return false;
  }
  if (!S_ISLNK(sa.st_mode) && (sa.st_mode & mask) != (sb.st_mode & 07777)) {
    diag("  %s: mode %o, %s: %o", a, sa.st_mode & mask, b, sb.st_mode & 07777);
    return false;
  }
  if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec ||
      sa.st_mtim.tv_nsec != sb.st_mtim.tv_nsec) {
    diag("  %s: mtime %lld.%09ld, %s: %lld.%09ld", a,
         (long long) sa.st_mtim.tv_sec, sa.st_mtim.tv_nsec, b,
         (long long) sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec);
    return false;
  }
  if (S_ISREG(sa.st_mode)) {
    if (sa.st_size != sb.st_size || !same_file_data(a, b)) {
      diag("  %s and %s differ in data", a, b);
      return false;
    }
    return true;
  }
  if (S_ISLNK(sa.st_mode)) {
    char ta[4200], tb[4200];
    ssize_t na = readlink(a, ta, sizeof ta), nb = readlink(b, tb, sizeof tb);
    if (na < 0 || na != nb || memcmp(ta, tb, (size_t) na) != 0) {
      diag("  %s and %s differ in target", a, b);
      return false;
    }
    return true;
  }
  {
    size_t na, nb, i = 0, k = 0;
    char **va = names_of(a, &na), **vb = names_of(b, &nb);
    bool same = true;
    while (same && (i < na || k < nb)) {
      char *pa, *pb;
      int c = i == na ? 1 : k == nb ? -1 : strcmp(va[i], vb[k]);
      if (c > 0) {
        diag("  %s/%s is new", b, vb[k]);
        same = false;
        break;
      }
      if (asprintf(&pa, "%s/%s", a, va[i]) < 0 ||
          asprintf(&pb, "%s/%s", b, va[i]) < 0)
        bail_out("out of memory");
      same = same_tree(pa, pb, mask);
      free(pa);
      free(pb);
      i++;
      if (c == 0)
        k++;
    }
    for (i = 0; i < na; i++)
      free(va[i]);
    for (k = 0; k < nb; k++)
      free(vb[k]);
    free(va);
    free(vb);
    return same;
  }
}

/* ---- sending and receiving through a pipe ---- */

/* dsec_copy_send(src) in a child, into a pipe that dsec_copy_receive(dst)
 * reads here: the receiver's result (why: its reason), *skipped the
 * sender's count and *sent its result. */
static int round_trip(const char *src, const char *dst, unsigned keep,
                      uid_t uid, gid_t gid, uint64_t *skipped, int *sent,
                      char *why)
{
  int p[2], q[2], st, r;
  pid_t pid;
  uint64_t sk = 0;

  if (pipe2(p, O_CLOEXEC) < 0 || pipe2(q, O_CLOEXEC) < 0)
    bail_out("pipe: %s", strerror(errno));
  pid = fork();
  if (pid < 0)
    bail_out("fork: %s", strerror(errno));
  if (pid == 0) {
    char cwhy[DSEC_COPY_WHY];
    uint64_t n = 0;
    close(p[0]);
    close(q[0]);
    r = dsec_copy_send(p[1], src, &n, cwhy);
    if (write(q[1], &n, sizeof n) != sizeof n)
      _exit(3);
    if (r < 0)
      dprintf(2, "# sender: %s\n", cwhy);
    _exit(r < 0 ? 1 : 0);
  }
  close(p[1]);
  close(q[1]);
  r = dsec_copy_receive(p[0], dst, keep, uid, gid, why);
  close(p[0]);
  if (read(q[0], &sk, sizeof sk) != sizeof sk)
    sk = UINT64_MAX;
  close(q[0]);
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  if (skipped)
    *skipped = sk;
  if (sent)
    *sent = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
  return r;
}

/* The stream dsec_copy_send writes for src, in a new buffer (*len). */
static char *send_to_buffer(const char *src, size_t *len, int *r, char *why)
{
  int fd = memfd_create("stream", MFD_CLOEXEC);
  struct stat st;
  char *buf;
  if (fd < 0)
    bail_out("memfd_create: %s", strerror(errno));
  *r = dsec_copy_send(fd, src, NULL, why);
  if (fstat(fd, &st) < 0)
    bail_out("fstat: %s", strerror(errno));
  buf = malloc((size_t) st.st_size + 1);
  if (!buf || pread(fd, buf, (size_t) st.st_size, 0) != st.st_size)
    bail_out("cannot read the stream back");
  close(fd);
  *len = (size_t) st.st_size;
  return buf;
}

/* dsec_copy_receive of the bytes given (from a memfd). */
static int receive_bytes(const char *buf, size_t len, const char *dst,
                         unsigned keep, char *why)
{
  int fd = memfd_create("stream", MFD_CLOEXEC);
  int r;
  if (fd < 0 || write(fd, buf, len) != (ssize_t) len ||
      lseek(fd, 0, SEEK_SET) < 0)
    bail_out("memfd: %s", strerror(errno));
  r = dsec_copy_receive(fd, dst, keep, (uid_t) -1, (gid_t) -1, why);
  close(fd);
  return r;
}

/* ---- a stream made by hand ---- */

struct sbuf {
  char *b;
  size_t len, cap;
};

static void sb_put(struct sbuf *s, const void *p, size_t n)
{
  if (s->len + n > s->cap) {
    s->cap = (s->len + n) * 2 + 64;
    s->b = realloc(s->b, s->cap);
    if (!s->b)
      bail_out("out of memory");
  }
  memcpy(s->b + s->len, p, n);
  s->len += n;
}

static void sb_u8(struct sbuf *s, int v)
{
  unsigned char c = (unsigned char) v;
  sb_put(s, &c, 1);
}

static void sb_u32(struct sbuf *s, uint32_t v)
{
  unsigned char b[4] = { v >> 24, v >> 16, v >> 8, v };
  sb_put(s, b, 4);
}

static void sb_magic(struct sbuf *s)
{
  sb_put(s, DSEC_COPY_MAGIC, 8);
}

/* magic and the header naming the root name */
static void sb_head(struct sbuf *s, const char *name)
{
  sb_magic(s);
  sb_u8(s, 'h');
  sb_u32(s, (uint32_t) strlen(name));
  sb_put(s, name, strlen(name));
}

/* an entry's fixed part and path (plen bytes of path: it may hold NULs) */
static void sb_entry_n(struct sbuf *s, int kind, uint32_t mode,
                       const char *path, size_t plen)
{
  sb_u8(s, kind);
  sb_u32(s, mode);
  sb_u32(s, 0);  /* uid */
  sb_u32(s, 0);  /* gid */
  sb_u32(s, 0);  /* mtime, high */
  sb_u32(s, 1000000000u); /* mtime, low: 2001-09-09 */
  sb_u32(s, 0);  /* ns */
  sb_u32(s, (uint32_t) plen);
  sb_put(s, path, plen);
}

static void sb_dir(struct sbuf *s, const char *path)
{
  sb_entry_n(s, 'd', 0755, path, strlen(path));
}

/* a whole file: entry, one chunk, the end chunk */
static void sb_file(struct sbuf *s, const char *path, const char *data)
{
  sb_entry_n(s, 'f', 0644, path, strlen(path));
  if (*data) {
    sb_u32(s, (uint32_t) strlen(data));
    sb_put(s, data, strlen(data));
  }
  sb_u32(s, 0);
}

static void sb_link(struct sbuf *s, const char *path, const char *target)
{
  sb_entry_n(s, 'l', 0777, path, strlen(path));
  sb_u32(s, (uint32_t) strlen(target));
  sb_put(s, target, strlen(target));
}

static void sb_end(struct sbuf *s)
{
  sb_u8(s, 'e');
}

/* What a parser saw: counts, and the events as text. */
struct seen {
  int names, entries, ends, file_ends;
  uint64_t data;
  char log[8192];
};

static void seen_add(struct seen *w, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
static void seen_add(struct seen *w, const char *fmt, ...)
{
  size_t n = strlen(w->log);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->log + n, sizeof w->log - n, fmt, ap);
  va_end(ap);
}

static int w_name(void *ud, const char *name)
{
  struct seen *w = ud;
  w->names++;
  seen_add(w, "h[%s]", name);
  return 0;
}

static int w_entry(void *ud, const struct dsec_copy_entry *e)
{
  struct seen *w = ud;
  w->entries++;
  seen_add(w, "%c[%s]%o%s%s", e->kind, e->path, (unsigned) e->mode,
           e->target ? "->" : "", e->target ? e->target : "");
  return 0;
}

static int w_data(void *ud, const char *buf, size_t n)
{
  struct seen *w = ud;
  (void) buf;
  w->data += n;
  return 0;
}

static int w_file_end(void *ud)
{
  struct seen *w = ud;
  w->file_ends++;
  seen_add(w, "/%llu", (unsigned long long) w->data);
  return 0;
}

static int w_end(void *ud)
{
  struct seen *w = ud;
  w->ends++;
  seen_add(w, "E");
  return 0;
}

static const struct dsec_copy_ops watch_ops = {
  w_name, w_entry, w_data, w_file_end, w_end,
};

/* Parses buf in pieces of step bytes (0: whole): the parse's result; done
 * whether the stream ended. */
static int parse(const char *buf, size_t len, size_t step, struct seen *w,
                 bool *done, char *why)
{
  struct dsec_copy_parser *p;
  int r = 0;
  memset(w, 0, sizeof *w);
  why[0] = '\0';
  p = dsec_copy_parser_new(&watch_ops, w, why);
  if (!p)
    bail_out("out of memory");
  if (step == 0)
    step = len ? len : 1;
  for (size_t off = 0; off < len && r == 0; off += step)
    r = dsec_copy_parse(p, buf + off, len - off < step ? len - off : step);
  *done = dsec_copy_parser_done(p);
  dsec_copy_parser_free(p);
  return r;
}

/* A stream the parser must refuse with a reason that contains want, fed
 * whole and byte by byte; and a receiver, fed the same, makes nothing at
 * its destination. */
static void refused(struct sbuf *s, const char *want, const char *what)
{
  char why[DSEC_COPY_WHY], why1[DSEC_COPY_WHY];
  struct seen w;
  bool done;
  int r = parse(s->b, s->len, 0, &w, &done, why);
  ok(r < 0 && strstr(why, want), "%s: refused (%s)", what, want);
  if (r == 0 || !strstr(why, want))
    diag("  result %d, reason `%s`", r, why);
  r = parse(s->b, s->len, 1, &w, &done, why1);
  ok(r < 0 && strcmp(why, why1) == 0, "... also when it comes byte by byte");
  {
    const char *dst = P("refused-%d", tap_count);
    mkdir_or_bail(dst, 0755);
    r = receive_bytes(s->b, s->len, dst, 0, why);
    /* a root directory may be made before the bad entry: nothing in it */
    ok(r < 0 && strstr(why, want) && count_entries(dst) <= 1 &&
           count_temps(dst) == 0,
       "... and dsec_copy_receive fails with it, leaving nothing behind");
    if (r == 0 || !strstr(why, want))
      diag("  result %d, reason `%s`", r, why);
  }
  free(s->b);
  memset(s, 0, sizeof *s);
}

/* ---- the tests ---- */

/* A tree with what a copy meets: nested directories (one read-only with
 * something in it), files of every size class, every byte value, set-id
 * and odd modes, links of each kind, and a fifo; times to the nanosecond. */
static void make_tree(const char *rel)
{
  const char *root = P("%s", rel);
  char bytes[256];
  char *big = malloc(3 * DSEC_COPY_CHUNK + 17);
  size_t bn = 3 * DSEC_COPY_CHUNK + 17;
  if (!big)
    bail_out("out of memory");
  for (int i = 0; i < 256; i++)
    bytes[i] = (char) i;
  for (size_t i = 0; i < bn; i++)
    big[i] = (char) ((i * 2654435761u) >> 13);
  mkdir_or_bail(root, 0755);
  root = P("%s", rel);
  mkdir_or_bail(P("%s/d", rel), 0750);
  mkdir_or_bail(P("%s/d/e", rel), 0700);
  mkdir_or_bail(P("%s/empty", rel), 0711);
  mkdir_or_bail(P("%s/ro", rel), 0755);
  put(P("%s/bytes", rel), bytes, sizeof bytes, 0644);
  put(P("%s/zero", rel), "", 0, 0600);
  put(P("%s/d/big", rel), big, bn, 0640);
  put(P("%s/d/e/exec", rel), "#!/bin/sh\n", 10, 0755);
  put(P("%s/suid", rel), "s", 1, 04755);
  put(P("%s/sgid", rel), "g", 1, 02750);
  put(P("%s/ro/inside", rel), "in", 2, 0444);
  put(P("%s/name with spaces\nand a newline", rel), "n", 1,
      0644);
  symlink_or_bail("bytes", P("%s/rel", rel));
  symlink_or_bail("/etc/passwd", P("%s/abs", rel));
  symlink_or_bail("../../nowhere", P("%s/d/dangling", rel));
  if (mkfifo(P("%s/fifo", rel), 0644) < 0)
    bail_out("mkfifo: %s", strerror(errno));
  chmod(P("%s/ro", rel), 0555);
  set_mtime(P("%s/bytes", rel), 1000000001, 123456789);
  set_mtime(P("%s/zero", rel), 1, 0);
  set_mtime(P("%s/d/big", rel), 1700000000, 999999999);
  set_mtime(P("%s/rel", rel), 1234567890, 5);
  set_mtime(P("%s/d/e", rel), 1500000000, 42);
  set_mtime(P("%s/d", rel), 1600000000, 7);
  set_mtime(P("%s/ro", rel), 1600000001, 8);
  set_mtime(P("%s", rel), 1600000002, 9);
  free(big);
}

static void test_round_trip(void)
{
  char why[DSEC_COPY_WHY];
  uint64_t skipped;
  int sent;
  int r;

  make_tree("src");

  /* a new name */
  r = round_trip(P("src"), P("copy"), DSEC_COPY_KEEP_SETID, (uid_t) -1,
                 (gid_t) -1, &skipped, &sent, why);
  ok(r == 0 && sent == 0, "a tree through a pipe to a new name");
  if (r < 0)
    diag("  %s", why);
  is_int(skipped, 1, "... the fifo skipped and counted");
  ok(same_tree(P("src"), P("copy"), 07777),
     "... the same entries, kinds, modes, times, data and link targets");
  ok(!exists(P("copy/fifo")), "... no fifo made");
  is_int(count_temps(P("copy")), 0, "... no temporary file left");

  /* into an existing directory: under the source's name */
  mkdir_or_bail(P("into"), 0755);
  r = round_trip(P("src"), P("into"), 0, (uid_t) -1, (gid_t) -1, &skipped,
                 &sent, why);
  ok(r == 0 && sent == 0 && same_tree(P("src"), P("into/src"), 0777),
     "a tree into an existing directory lands under its name");
  ok(!exists(P("into/suid")), "... and nothing beside it");
  is_int(mode_of(P("into/src/suid")), 0755,
         "... setuid stripped without DSEC_COPY_KEEP_SETID");
  is_int(mode_of(P("into/src/sgid")), 0750, "... setgid too");
  is_int(mode_of(P("into/src/ro")), 0555,
         "... a read-only directory gets its mode after its contents");
  is_str(slurp(P("into/src/ro/inside")), "in", "... which are there");

  /* "dir/." : the contents, merged into an existing directory */
  mkdir_or_bail(P("merge"), 0700);
  put_str(P("merge/kept"), "kept");
  put_str(P("merge/bytes"), "old content, longer than the new one .......");
  r = round_trip(P("src/."), P("merge"), 0, (uid_t) -1, (gid_t) -1, NULL, NULL,
                 why);
  ok(r == 0, "the contents of a tree (src/.) into an existing directory");
  is_str(slurp(P("merge/kept")), "kept", "... merged: what was there stays");
  ok(same_file_data(P("src/bytes"), P("merge/bytes")),
     "... an existing file is replaced whole");
  ok(same_tree(P("src/d"), P("merge/d"), 0777), "... the tree is there");
  is_int(mode_of(P("merge")), 0700, "... the directory keeps its own mode");

  /* "dir/." to a new name: the tree under that name */
  r = round_trip(P("src/."), P("contents-new"), 0, (uid_t) -1, (gid_t) -1,
                 NULL, NULL, why);
  ok(r == 0 && same_tree(P("src/d"), P("contents-new/d"), 0777) &&
         exists(P("contents-new/bytes")),
     "src/. to a new name makes the tree under that name");

  /* the same tree makes the same stream */
  {
    size_t n1, n2;
    int r1, r2;
    char *s1 = send_to_buffer(P("src"), &n1, &r1, why);
    char *s2 = send_to_buffer(P("src"), &n2, &r2, why);
    ok(r1 == 0 && r2 == 0 && n1 == n2 && memcmp(s1, s2, n1) == 0,
       "the same tree makes the same stream, byte for byte");
    ok(n1 > 3 * DSEC_COPY_CHUNK, "... which holds the data (%zu bytes)", n1);
    free(s1);
    free(s2);
  }
}

static void test_files_and_links(void)
{
  char why[DSEC_COPY_WHY];
  struct stat a, b;
  int r;

  mkdir_or_bail(P("fl"), 0755);
  put_str(P("fl/one"), "one\n");
  set_mtime(P("fl/one"), 1111111111, 111);

  r = round_trip(P("fl/one"), P("fl/one-copy"), 0, (uid_t) -1, (gid_t) -1,
                 NULL, NULL, why);
  ok(r == 0 && same_tree(P("fl/one"), P("fl/one-copy"), 0777),
     "a file to a new name");
  mkdir_or_bail(P("fl/dir"), 0755);
  r = round_trip(P("fl/one"), P("fl/dir"), 0, (uid_t) -1, (gid_t) -1, NULL,
                 NULL, why);
  ok(r == 0 && same_tree(P("fl/one"), P("fl/dir/one"), 0777),
     "a file into a directory");

  /* replaced whole, by a rename: another name of the old file keeps it */
  put_str(P("fl/old"), "the old content, which is long\n");
  if (link(P("fl/old"), P("fl/old-link")) < 0)
    bail_out("link: %s", strerror(errno));
  r = round_trip(P("fl/one"), P("fl/old"), 0, (uid_t) -1, (gid_t) -1, NULL,
                 NULL, why);
  ok(r == 0, "a file over an existing file");
  is_str(slurp(P("fl/old")), "one\n", "... has the new content only");
  is_str(slurp(P("fl/old-link")), "the old content, which is long\n",
         "... written beside and renamed over: a hard link of the old one "
         "is untouched");
  stat(P("fl/old"), &a);
  stat(P("fl/old-link"), &b);
  ok(a.st_ino != b.st_ino, "... a new inode");

  /* a link is sent as a link; "link/" follows it */
  symlink_or_bail("dir", P("fl/to-dir"));
  r = round_trip(P("fl/to-dir"), P("fl/link-copy"), 0, (uid_t) -1, (gid_t) -1,
                 NULL, NULL, why);
  ok(r == 0 && is_link_to(P("fl/link-copy"), "dir"),
     "a link as the source stays a link");
  r = round_trip(P("fl/to-dir/"), P("fl/followed"), 0, (uid_t) -1, (gid_t) -1,
                 NULL, NULL, why);
  ok(r == 0 && same_tree(P("fl/dir"), P("fl/followed"), 0777),
     "link/ copies what it points to");

  /* a file in the way of a directory and the other way round */
  mkdir_or_bail(P("fl/tree"), 0755);
  put_str(P("fl/tree/x"), "x");
  mkdir_or_bail(P("fl/clash"), 0755);
  put_str(P("fl/clash/tree"), "a file");
  r = round_trip(P("fl/tree"), P("fl/clash"), 0, (uid_t) -1, (gid_t) -1, NULL,
                 NULL, why);
  ok(r < 0 && strstr(why, "something else is there"),
     "a directory where a file is: refused (%s)", why);
  is_str(slurp(P("fl/clash/tree")), "a file", "... the file is left alone");
  mkdir_or_bail(P("fl/clash2"), 0755);
  mkdir_or_bail(P("fl/clash2/one"), 0755);
  put_str(P("fl/clash2/one/keep"), "keep");
  r = round_trip(P("fl/one"), P("fl/clash2"), 0, (uid_t) -1, (gid_t) -1, NULL,
                 NULL, why);
  ok(r < 0 && strstr(why, "a directory is there"),
     "a file where a non-empty directory is: refused (%s)", why);
  is_int(count_temps(P("fl/clash2")), 0, "... its temporary file removed");

  /* the parent of a new name must exist */
  r = round_trip(P("fl/one"), P("fl/no/such/name"), 0, (uid_t) -1, (gid_t) -1,
                 NULL, NULL, why);
  ok(r < 0 && strstr(why, "No such file"),
     "a new name whose parent is missing: refused (%s)", why);
  ok(!exists(P("fl/no")), "... nothing made");

  /* what the sender refuses */
  if (mkfifo(P("fl/fifo"), 0644) < 0)
    bail_out("mkfifo: %s", strerror(errno));
  {
    size_t n;
    char *s;
    s = send_to_buffer(P("fl/fifo"), &n, &r, why);
    ok(r < 0 && strstr(why, "neither a directory, a regular file nor a link"),
       "a fifo as the source is refused (%s)", why);
    free(s);
    s = send_to_buffer(P("fl/one/."), &n, &r, why);
    ok(r < 0 && strstr(why, "Not a directory"),
       "file/. is refused (%s)", why);
    free(s);
    s = send_to_buffer(P("fl/missing"), &n, &r, why);
    ok(r < 0 && strstr(why, "No such file"), "a missing source: %s", why);
    free(s);
  }
  if (geteuid() == 0) {
    if (mknod(P("fl/dir/null"), S_IFCHR | 0666, makedev(1, 3)) < 0)
      bail_out("mknod: %s", strerror(errno));
    {
      uint64_t skipped = 0;
      r = round_trip(P("fl/dir"), P("fl/no-dev"), 0, (uid_t) -1, (gid_t) -1,
                     &skipped, NULL, why);
      ok(r == 0 && skipped == 1 && !exists(P("fl/no-dev/null")) &&
             exists(P("fl/no-dev/one")),
         "a device below the source is skipped and counted");
    }
  } else
    skip(1, "mknod needs root");
}

static void test_owners(void)
{
  char why[DSEC_COPY_WHY];
  struct stat st;
  int r;

  if (geteuid() != 0) {
    skip(5, "giving files away needs root");
    return;
  }
  mkdir_or_bail(P("own"), 0755);
  put(P("own/f"), "f", 1, 0644);
  if (chown(P("own/f"), 1234, 2345) < 0 || chmod(P("own/f"), 06755) < 0 ||
      lchown(P("own"), 1234, 2345) < 0)
    bail_out("chown: %s", strerror(errno));
  symlink_or_bail("f", P("own/l"));
  if (lchown(P("own/l"), 1234, 2345) < 0)
    bail_out("lchown: %s", strerror(errno));

  r = round_trip(P("own"), P("own-to"), 0, 1000, 1001, NULL, NULL, why);
  ok(r == 0 && stat(P("own-to/f"), &st) == 0 && st.st_uid == 1000 &&
         st.st_gid == 1001 && (st.st_mode & 07777) == 0755,
     "given an owner: files are its, set-id bits stripped");
  ok(lstat(P("own-to/l"), &st) == 0 && st.st_uid == 1000 &&
         stat(P("own-to"), &st) == 0 && st.st_uid == 1000,
     "... links and directories too");

  r = round_trip(P("own"), P("own-keep"),
                 DSEC_COPY_KEEP_OWNER | DSEC_COPY_KEEP_SETID, 1000, 1001, NULL,
                 NULL, why);
  ok(r == 0 && stat(P("own-keep/f"), &st) == 0 && st.st_uid == 1234 &&
         st.st_gid == 2345 && (st.st_mode & 07777) == 06755,
     "DSEC_COPY_KEEP_OWNER|SETID: the stream's owners and set-id bits");
  ok(lstat(P("own-keep/l"), &st) == 0 && st.st_uid == 1234,
     "... a link's owner too");

  r = round_trip(P("own"), P("own-mine"), 0, (uid_t) -1, (gid_t) -1, NULL,
                 NULL, why);
  ok(r == 0 && stat(P("own-mine/f"), &st) == 0 && st.st_uid == 0 &&
         (st.st_mode & 07777) == 0755,
     "no owner given: the writer's, never set-id");
}

static void test_parser(void)
{
  char why[DSEC_COPY_WHY];
  struct sbuf s = { 0 };
  struct seen w, w1;
  bool done;
  int r;

  /* a valid stream, whole and byte by byte: the same events */
  sb_head(&s, "root");
  sb_dir(&s, "");
  sb_dir(&s, "a");
  sb_file(&s, "a/f", "data");
  sb_link(&s, "a/l", "../f");
  sb_file(&s, "empty", "");
  sb_end(&s);
  r = parse(s.b, s.len, 0, &w, &done, why);
  ok(r == 0 && done, "a valid stream parses to its end");
  is_str(w.log, "h[root]d[]755d[a]755f[a/f]644/4l[a/l]777->../f"
                "f[empty]644/4E",
         "... with its events in order");
  r = parse(s.b, s.len, 1, &w1, &done, why);
  ok(r == 0 && done && strcmp(w.log, w1.log) == 0,
     "... the same when it comes byte by byte");
  r = parse(s.b, s.len - 1, 0, &w1, &done, why);
  ok(r == 0 && !done, "... without its last byte it is not done");
  free(s.b);
  memset(&s, 0, sizeof s);

  /* a chunk of exactly 1 MiB is fine */
  {
    char *mb = calloc(1, DSEC_COPY_CHUNK);
    sb_head(&s, "f");
    sb_entry_n(&s, 'f', 0644, "", 0);
    sb_u32(&s, DSEC_COPY_CHUNK);
    sb_put(&s, mb, DSEC_COPY_CHUNK);
    sb_u32(&s, 0);
    sb_end(&s);
    r = parse(s.b, s.len, 0, &w, &done, why);
    ok(r == 0 && done && w.data == DSEC_COPY_CHUNK,
       "a chunk of DSEC_COPY_CHUNK bytes is taken");
    free(mb);
    free(s.b);
    memset(&s, 0, sizeof s);
  }

  /* the refusals */
  sb_put(&s, "DSECCP\0\2", 8);
  sb_u8(&s, 'h');
  sb_u32(&s, 0);
  sb_dir(&s, "");
  sb_end(&s);
  refused(&s, "not a copy stream", "bad magic");

  sb_put(&s, "GIF89a..", 8);
  refused(&s, "not a copy stream", "another format");

  sb_magic(&s);
  sb_dir(&s, "");
  sb_end(&s);
  refused(&s, "no header", "an entry before the header");

  sb_magic(&s);
  sb_end(&s);
  refused(&s, "no header", "the end before the header");

  sb_head(&s, "r");
  sb_end(&s);
  refused(&s, "nothing in it", "no root");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_file(&s, "../escape", "x");
  sb_end(&s);
  refused(&s, "a bad path", "a path with ..");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_dir(&s, "a");
  sb_file(&s, "a/../../escape", "x");
  sb_end(&s);
  refused(&s, "a bad path", "a path with .. inside");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_file(&s, "/etc/passwd", "x");
  sb_end(&s);
  refused(&s, "a bad path", "an absolute path");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_dir(&s, "a");
  sb_file(&s, "a//b", "x");
  sb_end(&s);
  refused(&s, "a bad path", "an empty component");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_file(&s, "a/", "x");
  sb_end(&s);
  refused(&s, "a bad path", "a trailing slash");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_file(&s, "./a", "x");
  sb_end(&s);
  refused(&s, "a bad path", "a . component");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_entry_n(&s, 'f', 0644, "a\0b", 3);
  sb_u32(&s, 0);
  sb_end(&s);
  refused(&s, "NUL", "a NUL in a path");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_entry_n(&s, 'l', 0777, "l", 1);
  sb_u32(&s, 3);
  sb_put(&s, "a\0b", 3);
  sb_end(&s);
  refused(&s, "NUL", "a NUL in a link target");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_entry_n(&s, 'l', 0777, "l", 1);
  sb_u32(&s, 0);
  sb_end(&s);
  refused(&s, "a bad link target", "an empty link target");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_dir(&s, "");
  sb_end(&s);
  refused(&s, "a bad path", "a second root");

  sb_head(&s, "r");
  sb_file(&s, "", "root");
  sb_file(&s, "a", "x");
  sb_end(&s);
  refused(&s, "a bad path", "an entry below a root that is a file");

  sb_head(&s, "r");
  sb_link(&s, "", "/");
  sb_file(&s, "etc/passwd", "x");
  sb_end(&s);
  refused(&s, "a bad path", "an entry below a root that is a link");

  sb_head(&s, "r");
  sb_file(&s, "a", "x");
  sb_end(&s);
  refused(&s, "not the root", "a first entry that is not the root");

  sb_head(&s, "r");
  sb_entry_n(&s, 'f', 0644, "", 0);
  sb_u32(&s, DSEC_COPY_CHUNK + 1);
  refused(&s, "a chunk is too large", "a chunk over 1 MiB");

  sb_head(&s, "r");
  sb_entry_n(&s, 'f', 0644, "", 0);
  sb_u32(&s, 0xffffffffu);
  refused(&s, "a chunk is too large", "a chunk of 4 GiB");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_end(&s);
  sb_u8(&s, 'e');
  refused(&s, "data after its end", "a byte after the end");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_end(&s);
  sb_dir(&s, "late");
  refused(&s, "data after its end", "an entry after the end");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_u8(&s, 'h');
  sb_u32(&s, 1);
  sb_put(&s, "x", 1);
  sb_end(&s);
  refused(&s, "unknown kind", "a second header");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_entry_n(&s, 'c', 0644, "dev", 3);
  sb_end(&s);
  refused(&s, "unknown kind", "an entry of another kind (a device)");

  sb_magic(&s);
  sb_u8(&s, 'h');
  sb_u32(&s, 2);
  sb_put(&s, "..", 2);
  sb_dir(&s, "");
  sb_end(&s);
  refused(&s, "a bad name", "a name of ..");

  sb_head(&s, "a/b");
  sb_dir(&s, "");
  sb_end(&s);
  refused(&s, "a bad name", "a name with a slash");

  sb_magic(&s);
  sb_u8(&s, 'h');
  sb_u32(&s, 3);
  sb_put(&s, "a\0b", 3);
  sb_dir(&s, "");
  sb_end(&s);
  refused(&s, "a bad name", "a name with a NUL");

  sb_magic(&s);
  sb_u8(&s, 'h');
  sb_u32(&s, 100000);
  refused(&s, "the name is too long", "a name too long");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_u8(&s, 'f');
  sb_u32(&s, 0644);
  sb_u32(&s, 0);
  sb_u32(&s, 0);
  sb_u32(&s, 0);
  sb_u32(&s, 0);
  sb_u32(&s, 0);
  sb_u32(&s, DSEC_COPY_PATH_MAX + 1);
  refused(&s, "a path is too long", "a path too long");

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_entry_n(&s, 'l', 0777, "l", 1);
  sb_u32(&s, DSEC_COPY_PATH_MAX + 1);
  refused(&s, "a bad link target", "a link target too long");

  /* cut short: the parser is not done, the receiver says so */
  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_entry_n(&s, 'f', 0644, "f", 1);
  sb_u32(&s, 10);
  sb_put(&s, "only5", 5);
  r = parse(s.b, s.len, 0, &w, &done, why);
  ok(r == 0 && !done, "a stream cut short in a file is not done");
  mkdir_or_bail(P("cut"), 0755);
  r = receive_bytes(s.b, s.len, P("cut"), 0, why);
  ok(r < 0 && strstr(why, "cut short"), "... dsec_copy_receive: %s", why);
  ok(!exists(P("cut/r/f")) && count_temps(P("cut/r")) == 0,
     "... the file is not made and its temporary file is gone");
  free(s.b);
  memset(&s, 0, sizeof s);

  r = receive_bytes("", 0, P("cut"), 0, why);
  ok(r < 0 && strstr(why, "cut short"), "an empty stream: %s", why);
}

/* A receiver never writes outside its destination: not through a link the
 * stream made, nor through one that was there. */
static void test_never_outside(void)
{
  char why[DSEC_COPY_WHY];
  struct sbuf s = { 0 };
  int r;

  mkdir_or_bail(P("outside"), 0755);
  put_str(P("outside/file"), "outside\n");

  /* the stream's own link, then a path through it */
  mkdir_or_bail(P("out1"), 0755);
  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_link(&s, "a", P("outside"));
  sb_file(&s, "a/b", "pwned");
  sb_end(&s);
  r = receive_bytes(s.b, s.len, P("out1"), 0, why);
  ok(r < 0 && strstr(why, "a link or a file is in the way"),
     "a link, then a file below it: refused (%s)", why);
  ok(!exists(P("outside/b")), "... nothing made where the link points");
  ok(is_link_to(P("out1/r/a"), P("outside")), "... the link itself is there");
  free(s.b);
  memset(&s, 0, sizeof s);

  /* the same to a relative target climbing out, and as a directory entry */
  mkdir_or_bail(P("out2"), 0755);
  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_link(&s, "a", "../../outside");
  sb_dir(&s, "a");
  sb_file(&s, "a/c", "pwned");
  sb_end(&s);
  r = receive_bytes(s.b, s.len, P("out2"), 0, why);
  ok(r < 0 && strstr(why, "something else is there"),
     "a link, then a directory of its name: refused (%s)", why);
  ok(!exists(P("outside/c")), "... nothing made where the link points");
  free(s.b);
  memset(&s, 0, sizeof s);

  /* a link that was in the destination already, in the way of a directory */
  mkdir_or_bail(P("out3"), 0755);
  mkdir_or_bail(P("out3/r"), 0755);
  symlink_or_bail(P("outside"), P("out3/r/a"));
  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_dir(&s, "a");
  sb_file(&s, "a/d", "pwned");
  sb_end(&s);
  r = receive_bytes(s.b, s.len, P("out3"), 0, why);
  ok(r < 0, "a link planted where a directory goes: refused (%s)", why);
  ok(!exists(P("outside/d")), "... nothing made where the link points");
  free(s.b);
  memset(&s, 0, sizeof s);

  /* ... and in the way of a file: the link is replaced, not followed */
  mkdir_or_bail(P("out4"), 0755);
  symlink_or_bail(P("outside/file"), P("out4/f"));
  sb_head(&s, "f");
  sb_file(&s, "", "new\n");
  sb_end(&s);
  r = receive_bytes(s.b, s.len, P("out4/f"), 0, why);
  ok(r == 0, "a file over a planted link to a file");
  is_str(slurp(P("outside/file")), "outside\n",
         "... what the link pointed to is untouched");
  ok(!is_link_to(P("out4/f"), P("outside/file")) &&
         strcmp(slurp(P("out4/f")), "new\n") == 0,
     "... the link was replaced by the file");
  free(s.b);
  memset(&s, 0, sizeof s);

  /* a link as the stream's root, then (refused) entries below it */
  mkdir_or_bail(P("out5"), 0755);
  sb_head(&s, "r");
  sb_link(&s, "", P("outside"));
  sb_file(&s, "e", "pwned");
  sb_end(&s);
  r = receive_bytes(s.b, s.len, P("out5"), 0, why);
  ok(r < 0 && !exists(P("outside/e")),
     "a root that is a link, then a file below: refused, nothing outside");

  /* a deep stream: a link far down, then a path through it */
  free(s.b);
  memset(&s, 0, sizeof s);
  mkdir_or_bail(P("out6"), 0755);
  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_dir(&s, "x");
  sb_dir(&s, "x/y");
  sb_link(&s, "x/y/z", "/");
  {
    /* through / to this test's directory (so a failure is cleaned up) */
    char path[4200];
    snprintf(path, sizeof path, "x/y/z%s/escaped", tmp);
    sb_file(&s, path, "pwned");
  }
  sb_end(&s);
  r = receive_bytes(s.b, s.len, P("out6"), 0, why);
  ok(r < 0 && !exists(P("escaped")),
     "a link to / deep down, then a path through it: refused (%s)", why);
  free(s.b);
  is_int(count_entries(P("outside")), 1, "the outside directory holds only "
                                         "what it held");
}

int main(void)
{
  tmp = tap_tmpdir("test-copy");
  umask(022);

  test_round_trip();
  test_files_and_links();
  test_owners();
  test_parser();
  test_never_outside();
  return done_testing();
}
