/* Unit tests for libcommon/sysfilter.c's cache of compiled filters: a
 * template with a token put in is, instruction for instruction, what
 * libseccomp compiles for that token; the cache is read back, and a cache
 * file that is torn, corrupt, of another build or of other flags is
 * compiled again, never used. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "sysfilter.h"
#include "tap.h"

static bool same(const struct dsec_bpf *a, const struct dsec_bpf *b)
{
  return a->len == b->len && a->len > 0 &&
         memcmp(a->insns, b->insns, a->len * sizeof *a->insns) == 0;
}

/* The template for flags with token put in equals the compiled filter. */
static bool token_matches(const struct dsec_bpf *tmpl, unsigned flags,
                          uint64_t token)
{
  struct dsec_error *err = NULL;
  struct dsec_bpf want = { 0 }, got = { 0 };
  bool r;

  if (dsec_seccomp_build_token(&want, flags, token, &err) < 0 ||
      dsec_seccomp_set_token(&got, tmpl, token, &err) < 0) {
    diag("%s", err ? err->msg : "?");
    dsec_error_free(err);
    dsec_bpf_clear(&want);
    return false;
  }
  r = same(&want, &got);
  dsec_bpf_clear(&want);
  dsec_bpf_clear(&got);
  return r;
}

static void test_tokens(const char *dir)
{
  static const unsigned flagsets[] = {
    DSEC_SECCOMP_NOTIFY, DSEC_SECCOMP_NOTIFY | DSEC_SECCOMP_NO_SETID
  };
  /* words of zero, equal words, all ones, a syscall number, the
   * placeholder's own words swapped */
  static const uint64_t edges[] = {
    1, 0xffffffff00000000ULL, 0x0000000100000000ULL, 0x1234567812345678ULL,
    UINT64_MAX, 59, 0x6e6b6f7463657364ULL,
  };

  for (size_t f = 0; f < ARRAY_SIZE(flagsets); f++) {
    struct dsec_error *err = NULL;
    struct dsec_bpf tmpl = { 0 };
    bool all = true;
    int r = dsec_seccomp_cached(&tmpl, flagsets[f], true, dir, &err);

    ok(r == 0 && tmpl.len > 0 && tmpl.tok_hi != tmpl.tok_lo,
       "flags %u: a template is compiled (nothing cached yet)", flagsets[f]);
    for (size_t i = 0; i < ARRAY_SIZE(edges); i++)
      if (!token_matches(&tmpl, flagsets[f], edges[i])) {
        diag("token %#llx differs", (unsigned long long) edges[i]);
        all = false;
      }
    ok(all, "flags %u: edge tokens put in are what libseccomp compiles",
       flagsets[f]);
    all = true;
    for (int i = 0; i < 40; i++) {
      uint64_t t;
      if (getrandom(&t, sizeof t, 0) != (ssize_t) sizeof t)
        bail_out("getrandom");
      if (t && !token_matches(&tmpl, flagsets[f], t)) {
        diag("token %#llx differs", (unsigned long long) t);
        all = false;
      }
    }
    ok(all, "flags %u: 40 random tokens put in are what libseccomp compiles",
       flagsets[f]);
    dsec_bpf_clear(&tmpl);
    dsec_error_free(err);
  }
}

/* dsec_seccomp_cached's result: 1 cached, 0 compiled; *same_as tells
 * whether the filter is the compiled one. */
static int cached(const char *dir, unsigned flags, bool token, bool *same_as)
{
  struct dsec_error *err = NULL;
  struct dsec_bpf f = { 0 }, want = { 0 };
  int r = dsec_seccomp_cached(&f, flags, token, dir, &err);

  if (r >= 0 &&
      (token ? dsec_seccomp_build_token(&want, flags,
                                        DSEC_SECCOMP_TOKEN_PLACEHOLDER, &err)
             : dsec_seccomp_build(&want, flags, &err)) < 0)
    r = -1;
  *same_as = r >= 0 && same(&f, &want);
  if (r < 0)
    diag("%s", err ? err->msg : "?");
  dsec_bpf_clear(&f);
  dsec_bpf_clear(&want);
  dsec_error_free(err);
  return r;
}

/* Changes bytes of the cache file at path (offset off) and makes its
 * checksum (at 8, of all that follows it) hold again. */
static void poke_valid(const char *path, long off, const void *bytes, size_t n)
{
  char buf[65536];
  int fd = open(path, O_RDWR);
  ssize_t len = fd < 0 ? -1 : pread(fd, buf, sizeof buf, 0);
  uint32_t crc;

  if (len < 40 || off + (long) n > len)
    bail_out("unexpected cache file %s", path);
  memcpy(buf + off, bytes, n);
  crc = (uint32_t) crc32(0L, (const unsigned char *) buf + 12,
                         (uInt) (len - 12));
  memcpy(buf + 8, &crc, 4);
  if (pwrite(fd, buf, (size_t) len, 0) != len)
    bail_out("pwrite");
  close(fd);
}

/* Changes the file at offset off (from its end where negative). */
static void poke(const char *path, long off, const void *bytes, size_t n)
{
  int fd = open(path, O_RDWR);
  off_t at = off < 0 ? lseek(fd, off, SEEK_END) : (off_t) off;
  if (fd < 0 || at < 0 || pwrite(fd, bytes, n, at) != (ssize_t) n)
    bail_out("cannot change %s", path);
  close(fd);
}

static void test_cache(const char *dir)
{
  unsigned flags = DSEC_SECCOMP_NO_SETID;
  char path[512];
  struct stat st;
  bool eq;

  snprintf(path, sizeof path, "%s/filter-%x.bpf", dir, flags);
  is_int(cached(dir, flags, false, &eq), 0, "plain: compiled the first time");
  ok(eq, "plain: the compiled filter");
  ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600,
     "plain: cached in %s, mode 0600", path);
  ok(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700,
     "the cache's directory is private (0700)");
  is_int(cached(dir, flags, false, &eq), 1, "plain: read back the second time");
  ok(eq, "plain: what was read is the compiled filter");

  /* one instruction changed: the checksum no longer holds */
  poke(path, -3, "\x7f", 1);
  is_int(cached(dir, flags, false, &eq), 0, "a corrupt file is compiled again");
  ok(eq, "... into the compiled filter");
  is_int(cached(dir, flags, false, &eq), 1, "... and rewritten");

  /* torn: a crash before the data reached the disk */
  if (truncate(path, 40) < 0)
    bail_out("truncate");
  is_int(cached(dir, flags, false, &eq), 0, "a torn file is compiled again");
  ok(eq, "... into the compiled filter");

  /* another build's: the key (after the 24 bytes of the header) says
   * "build <id>"; its first letter changed, the checksum (at 8, of what
   * follows it) made to hold */
  poke_valid(path, 24, "B", 1);
  is_int(cached(dir, flags, false, &eq), 0,
         "another build's file is compiled again");
  is_int(cached(dir, flags, false, &eq), 1, "... and rewritten");

  /* another's to write, or no regular file: not read */
  if (chmod(path, 0620) < 0)
    bail_out("chmod");
  is_int(cached(dir, flags, false, &eq), 0,
         "a file the group may write is not read");
  ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600,
     "... and is replaced by one of mode 0600");
  if (unlink(path) < 0 || mkfifo(path, 0600) < 0)
    bail_out("mkfifo");
  is_int(cached(dir, flags, false, &eq), 0,
         "a FIFO in the file's place is not read (nor waited on)");
  ok(stat(path, &st) == 0 && S_ISREG(st.st_mode), "... and is replaced");

  /* a file of other flags under this name */
  {
    char other[512];
    snprintf(other, sizeof other, "%s/filter-%x.bpf", dir,
             DSEC_SECCOMP_NOTIFY);
    is_int(cached(dir, DSEC_SECCOMP_NOTIFY, false, &eq), 0,
           "notify: compiled the first time");
    if (rename(other, path) < 0)
      bail_out("rename");
    is_int(cached(dir, flags, false, &eq), 0,
           "a file of other flags is compiled again");
    ok(eq, "... into the filter of these flags");
  }

  /* the template is cached like the others */
  is_int(cached(dir, DSEC_SECCOMP_NOTIFY, true, &eq), 0,
         "template: compiled the first time");
  ok(eq, "template: the filter with the placeholder");
  is_int(cached(dir, DSEC_SECCOMP_NOTIFY, true, &eq), 1,
         "template: read back the second time");
  ok(eq, "template: what was read is the compiled one");
  {
    struct dsec_error *err = NULL;
    struct dsec_bpf tmpl = { 0 };
    uint64_t t = 0x0123456789abcdefULL;
    char tpath[512];
    uint16_t idx[2];
    ok(dsec_seccomp_cached(&tmpl, DSEC_SECCOMP_NOTIFY, true, dir, &err) == 1 &&
         token_matches(&tmpl, DSEC_SECCOMP_NOTIFY, t),
       "template: the one read back, its token put in, is what libseccomp "
       "compiles for that token");
    /* its instructions' places in the header (at 20) swapped, the
     * checksum made to hold */
    snprintf(tpath, sizeof tpath, "%s/filter-%x.bpf", dir,
             DSEC_SECCOMP_NOTIFY | (1U << 31));
    idx[0] = tmpl.tok_lo;
    idx[1] = tmpl.tok_hi;
    poke_valid(tpath, 20, idx, sizeof idx);
    dsec_bpf_clear(&tmpl);
    is_int(cached(dir, DSEC_SECCOMP_NOTIFY, true, &eq), 0,
           "template: a file whose token places are wrong is compiled again");
    ok(eq, "... into the template");
    dsec_error_free(err);
  }
  /* a directory others may write: not used, and no template without it */
  {
    struct dsec_error *err = NULL;
    struct dsec_bpf f = { 0 };
    if (chmod(dir, 0777) < 0)
      bail_out("chmod");
    is_int(cached(dir, flags, false, &eq), 0,
           "in a directory others may write, nothing is read");
    ok(dsec_seccomp_cached(&f, DSEC_SECCOMP_NOTIFY, true, dir, &err) < 0 &&
         err && err->errnum == EPROTO && !f.insns,
       "... and a template is not made there (EPROTO: init compiles its own)");
    if (chmod(dir, 0700) < 0)
      bail_out("chmod");
    dsec_error_free(err);
  }
}

static void test_not_template(const char *dir)
{
  struct dsec_error *err = NULL;
  struct dsec_bpf plain = { 0 }, out = { 0 };

  if (dsec_seccomp_cached(&plain, DSEC_SECCOMP_NOTIFY, false, dir, &err) < 0)
    bail_out("%s", err->msg);
  ok(dsec_seccomp_set_token(&out, &plain, 42, &err) < 0 && err &&
       err->errnum == EINVAL && !out.insns,
     "a token cannot be put into a filter that is no template (EINVAL)");
  dsec_bpf_clear(&plain);
  dsec_error_free(err);
}

static void test_no_dir(void)
{
  struct dsec_error *err = NULL;
  struct dsec_bpf f = { 0 };
  /* a cache that cannot be made is no error: the filter is compiled */
  int r = dsec_seccomp_cached(&f, 0, false, "/proc/version/seccomp", &err);
  ok(r == 0 && f.len > 0, "where the cache cannot be made, compiled");
  dsec_bpf_clear(&f);
  dsec_error_free(err);
}

int main(void)
{
  const char *tmp = tap_tmpdir("test-sysfilter");
  char dir[256], dir2[256];

  snprintf(dir, sizeof dir, "%s/seccomp", tmp);
  snprintf(dir2, sizeof dir2, "%s/seccomp2", tmp);
  test_tokens(dir);
  test_cache(dir2);
  test_not_template(dir);
  test_no_dir();
  return done_testing();
}
