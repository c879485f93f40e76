/* Writes the seeds of the copy stream's fuzz targets (copy-stream and
 * copy-receive) into CORPUS-DIR/copy-stream/ and CORPUS-DIR/copy-receive/:
 * streams that dsec_copy_send made of small trees (the code dsec-run and
 * the sandbox's builtins send with), pieces and corruptions of them, and
 * hostile streams made by hand, one for each way a stream may try to
 * reach outside its destination (tests/fuzz/README).  The seeds are
 * committed; run it again after changing it:
 *   make tests/fuzz/mkseeds-copy && tests/fuzz/mkseeds-copy tests/fuzz/corpus
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "copy.h"

static const char *corpus;
static char tmp[64];

static void die(const char *what)
{
  fprintf(stderr, "mkseeds-copy: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Writes a seed of both targets. */
static void seed(const char *name, const void *buf, size_t len)
{
  static const char *const targets[] = { "copy-stream", "copy-receive" };
  for (size_t i = 0; i < 2; i++) {
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", corpus, targets[i]);
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
      die(path);
    snprintf(path, sizeof path, "%s/%s/seed-%s", corpus, targets[i], name);
    if (!(f = fopen(path, "wb")) || fwrite(buf, 1, len, f) != len ||
        fclose(f) != 0)
      die(path);
  }
}

static const char *T(const char *name)
{
  static char bufs[4][512];
  static int next;
  char *b = bufs[next++ % 4];
  snprintf(b, sizeof bufs[0], "%s/%s", tmp, name);
  return b;
}

static void put(const char *name, const char *data, mode_t mode)
{
  int fd = open(T(name), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, data, strlen(data)) != (ssize_t) strlen(data) ||
      fchmod(fd, mode) < 0)
    die(name);
  close(fd);
}

/* The stream of src (made by dsec_copy_send) as a seed, and, with
 * variants, pieces and corruptions of it. */
static void from_send(const char *name, const char *src, int variants)
{
  int fd = memfd_create("s", MFD_CLOEXEC);
  char why[DSEC_COPY_WHY], n2[256];
  struct stat st;
  char *b;
  size_t len;

  if (fd < 0)
    die("memfd_create");
  if (dsec_copy_send(fd, T(src), NULL, why) < 0) {
    fprintf(stderr, "mkseeds-copy: %s\n", why);
    exit(1);
  }
  if (fstat(fd, &st) < 0 || !(b = malloc((size_t) st.st_size)) ||
      pread(fd, b, (size_t) st.st_size, 0) != st.st_size)
    die("read back");
  close(fd);
  len = (size_t) st.st_size;
  seed(name, b, len);
  if (variants) {
    snprintf(n2, sizeof n2, "%s-cut-half", name);
    seed(n2, b, len / 2);
    snprintf(n2, sizeof n2, "%s-cut-last", name);
    seed(n2, b, len - 1);
    snprintf(n2, sizeof n2, "%s-trailing", name);
    {
      char *c = malloc(len + 1);
      memcpy(c, b, len);
      c[len] = 'e';
      seed(n2, c, len + 1);
      free(c);
    }
    snprintf(n2, sizeof n2, "%s-bad-magic", name);
    b[7] = 2;
    seed(n2, b, len);
  }
  free(b);
}

/* ---- streams by hand */

struct sbuf {
  char b[8192];
  size_t len;
};

static void sb_put(struct sbuf *s, const void *p, size_t n)
{
  if (s->len + n > sizeof s->b) {
    fprintf(stderr, "mkseeds-copy: a seed too long\n");
    exit(1);
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

static void sb_head(struct sbuf *s, const char *name)
{
  s->len = 0;
  sb_put(s, DSEC_COPY_MAGIC, 8);
  sb_u8(s, 'h');
  sb_u32(s, (uint32_t) strlen(name));
  sb_put(s, name, strlen(name));
}

static void sb_entry(struct sbuf *s, int kind, uint32_t mode, const char *path)
{
  sb_u8(s, kind);
  sb_u32(s, mode);
  sb_u32(s, 1000);
  sb_u32(s, 1000);
  sb_u32(s, 0);
  sb_u32(s, 1700000000u);
  sb_u32(s, 5);
  sb_u32(s, (uint32_t) strlen(path));
  sb_put(s, path, strlen(path));
}

static void sb_dir(struct sbuf *s, const char *path)
{
  sb_entry(s, 'd', 0755, path);
}

static void sb_file(struct sbuf *s, const char *path, const char *data)
{
  sb_entry(s, 'f', 0644, path);
  if (*data) {
    sb_u32(s, (uint32_t) strlen(data));
    sb_put(s, data, strlen(data));
  }
  sb_u32(s, 0);
}

static void sb_link(struct sbuf *s, const char *path, const char *target)
{
  sb_entry(s, 'l', 0777, path);
  sb_u32(s, (uint32_t) strlen(target));
  sb_put(s, target, strlen(target));
}

static void sb_end(struct sbuf *s)
{
  sb_u8(s, 'e');
}

static void by_hand(void)
{
  struct sbuf s;

  /* a root named r lands at dst/r: ../../outside from dst/r/a is outside */
  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_link(&s, "a", "../../outside");
  sb_file(&s, "a/pwned", "x");
  sb_end(&s);
  seed("hostile-link-then-file", s.b, s.len);

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_link(&s, "a", "../../outside");
  sb_dir(&s, "a");
  sb_file(&s, "a/pwned", "x");
  sb_end(&s);
  seed("hostile-link-then-dir", s.b, s.len);

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_link(&s, "a", "../../outside/canary");
  sb_file(&s, "a", "overwritten");
  sb_end(&s);
  seed("hostile-file-over-link", s.b, s.len);

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_dir(&s, "x");
  sb_link(&s, "x/up", "/");
  sb_file(&s, "x/up/tmp/pwned", "x");
  sb_end(&s);
  seed("hostile-link-to-root", s.b, s.len);

  sb_head(&s, "");
  sb_dir(&s, "");
  sb_link(&s, "b", "../outside");
  sb_file(&s, "b/pwned", "x");
  sb_end(&s);
  seed("hostile-contents-link", s.b, s.len);

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_file(&s, "../outside/pwned", "x");
  sb_end(&s);
  seed("hostile-dotdot", s.b, s.len);

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_file(&s, "/tmp/pwned", "x");
  sb_end(&s);
  seed("hostile-absolute", s.b, s.len);

  sb_head(&s, "..");
  sb_dir(&s, "");
  sb_file(&s, "outside/pwned", "x");
  sb_end(&s);
  seed("hostile-name-dotdot", s.b, s.len);

  sb_head(&s, "r");
  sb_link(&s, "", "../outside");
  sb_file(&s, "pwned", "x");
  sb_end(&s);
  seed("hostile-root-link", s.b, s.len);

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_dir(&s, "");
  sb_end(&s);
  seed("second-root", s.b, s.len);

  sb_head(&s, "r");
  sb_dir(&s, "");
  sb_entry(&s, 'f', 06755, "suid");
  sb_u32(&s, 2);
  sb_put(&s, "#!", 2);
  sb_u32(&s, 0);
  sb_end(&s);
  seed("setuid", s.b, s.len);

  sb_head(&s, "r");
  sb_entry(&s, 'f', 0644, "");
  sb_u32(&s, DSEC_COPY_CHUNK + 1);
  seed("chunk-too-large", s.b, s.len);
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: mkseeds-copy CORPUS-DIR\n");
    return 2;
  }
  corpus = argv[1];
  snprintf(tmp, sizeof tmp, "/tmp/dsec-mkseeds.XXXXXX");
  if (!mkdtemp(tmp))
    die("mkdtemp");
  umask(022);

  put("file", "hello, world\n", 0644);
  put("empty", "", 0600);
  if (mkdir(T("tree"), 0755) < 0 || mkdir(T("tree/sub"), 0750) < 0 ||
      mkdir(T("tree/sub/deeper"), 0700) < 0 || mkdir(T("tree/empty"), 0755) < 0)
    die("mkdir");
  put("tree/a.txt", "a\n", 0644);
  put("tree/run.sh", "#!/bin/sh\necho hi\n", 04755);
  put("tree/sub/b.bin", "\x00\x01\x02\xff\xfe", 0600);
  put("tree/sub/deeper/zero", "", 0444);
  if (symlink("a.txt", T("tree/rel")) < 0 || symlink("/etc", T("tree/abs")) < 0 ||
      symlink("../../nowhere", T("tree/sub/dangling")) < 0 ||
      symlink("tree", T("link")) < 0)
    die("symlink");

  /* fixed times: the same seeds every time */
  {
    static const char *const all[] = {
      "file", "empty", "tree/a.txt", "tree/run.sh", "tree/sub/b.bin",
      "tree/sub/deeper/zero", "tree/rel", "tree/abs", "tree/sub/dangling",
      "link", "tree/sub/deeper", "tree/sub", "tree/empty", "tree",
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
      struct timespec ts[2] = { { 1700000000 + (time_t) i, 1000 * (long) i },
                                { 1700000000 + (time_t) i, 1000 * (long) i } };
      if (utimensat(AT_FDCWD, T(all[i]), ts, AT_SYMLINK_NOFOLLOW) < 0)
        die(all[i]);
    }
  }
  from_send("file", "file", 1);
  from_send("empty-file", "empty", 0);
  from_send("tree", "tree", 1);
  from_send("contents", "tree/.", 0);
  from_send("link", "link", 0);
  from_send("link-followed", "link/", 0);
  by_hand();

  /* the tree, as the test's temporary files, goes */
  {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
      return 1;
  }
  return 0;
}
