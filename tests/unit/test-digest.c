/* Unit tests for libcommon/digest.c: sha256 in the OCI "sha256:<hex>"
 * form, one-shot, streamed and from a file, digest validation, and
 * base64. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"
#include "tap.h"

#define SHA256_EMPTY \
  "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA256_ABC \
  "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA256_BC \
  "sha256:1e0bbd6c686ba050b8eb03ffeedc64fdc9d80947fce821abbe5d6dc8d252c5ac"
/* FIPS 180-2 test vector: one million 'a'. */
#define SHA256_MILLION_A \
  "sha256:cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"

#define MIB (1024 * 1024)

static const char *tmp;

/* Hashes buf through the streaming interface in chunks of odd, varying
 * sizes, so that updates straddle the 64-byte block boundary. */
static void sha256_chunked(const unsigned char *buf, size_t len,
                           char out[DSEC_DIGEST_LEN + 1])
{
  static const size_t sizes[] = { 1, 3, 7, 13, 63, 65, 127, 4093, 65537 };
  struct dsec_sha256 *h = dsec_sha256_new();
  size_t off = 0;

  for (size_t i = 0; off < len; i++) {
    size_t n = sizes[i % ARRAY_SIZE(sizes)];
    if (n > len - off)
      n = len - off;
    dsec_sha256_update(h, buf + off, n);
    dsec_sha256_update(h, buf + off, 0); /* empty updates change nothing */
    off += n;
  }
  dsec_sha256_final(h, out);
}

static void test_known_vectors(void)
{
  char d[DSEC_DIGEST_LEN + 1];
  struct dsec_sha256 *h;

  memset(d, 'x', sizeof d);
  dsec_sha256_buf("", 0, d);
  is_str(d, SHA256_EMPTY, "sha256 of the empty string");
  is_int(strlen(d), DSEC_DIGEST_LEN, "digest is %d characters",
         DSEC_DIGEST_LEN);

  dsec_sha256_buf("abc", 3, d);
  is_str(d, SHA256_ABC, "sha256 of \"abc\"");

  h = dsec_sha256_new();
  dsec_sha256_update(h, "a", 1);
  dsec_sha256_update(h, "bc", 2);
  dsec_sha256_final(h, d);
  is_str(d, SHA256_ABC, "streamed \"a\" + \"bc\" equals one-shot \"abc\"");

  h = dsec_sha256_new();
  dsec_sha256_final(h, d);
  is_str(d, SHA256_EMPTY, "streamed nothing is the empty digest");

  /* A hasher that is dropped without final must not leak or crash. */
  h = dsec_sha256_new();
  dsec_sha256_update(h, "abc", 3);
  dsec_sha256_free(h);
  dsec_sha256_free(NULL);
  ok(1, "dsec_sha256_free of a live hasher and of NULL");
}

static void test_large_buffers(void)
{
  unsigned char *buf = xmalloc(MIB);
  char one[DSEC_DIGEST_LEN + 1], chunked[DSEC_DIGEST_LEN + 1];

  memset(buf, 'a', 1000000);
  sha256_chunked(buf, 1000000, chunked);
  is_str(chunked, SHA256_MILLION_A,
         "one million 'a' in odd-sized chunks (FIPS 180-2 vector)");

  for (size_t i = 0; i < MIB; i++)
    buf[i] = (unsigned char) ((i * 31 + i / 251) & 0xff);
  dsec_sha256_buf(buf, MIB, one);
  sha256_chunked(buf, MIB, chunked);
  is_str(chunked, one, "1 MiB in odd-sized chunks equals one-shot");
  ok(strcmp(one, SHA256_MILLION_A) != 0 && strcmp(one, SHA256_EMPTY) != 0,
     "different content gives a different digest");

  buf[MIB / 2] ^= 1;
  dsec_sha256_buf(buf, MIB, chunked);
  ok(strcmp(one, chunked) != 0, "one flipped bit changes the digest");
  free(buf);
}

static int make_file(const char *name, const char *content)
{
  int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int fd = openat(dfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  close(dfd);
  if (fd < 0 || write(fd, content, strlen(content)) != (ssize_t) strlen(content))
    bail_out("cannot write %s/%s", tmp, name);
  return fd;
}

static void test_sha256_fd(void)
{
  struct dsec_error *err = NULL;
  char d[DSEC_DIGEST_LEN + 1];
  uint64_t size = 12345;
  int fd = make_file("abc", "abc");
  int dfd;

  lseek(fd, 0, SEEK_SET);
  is_int(dsec_sha256_fd(fd, d, &size, &err), 0, "dsec_sha256_fd succeeds");
  is_str(d, SHA256_ABC, "dsec_sha256_fd hashes the file");
  is_int(size, 3, "dsec_sha256_fd reports the size");

  lseek(fd, 1, SEEK_SET);
  dsec_sha256_fd(fd, d, &size, &err);
  is_str(d, SHA256_BC, "dsec_sha256_fd hashes from the current offset");
  is_int(size, 2, "size counts from the current offset");

  dsec_sha256_fd(fd, d, NULL, &err);
  is_str(d, SHA256_EMPTY, "at EOF the digest is the empty one (size NULL ok)");
  close(fd);

  /* read(2) of a directory fails with EISDIR: the error path. */
  dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  is_int(dsec_sha256_fd(dfd, d, &size, &err), -1,
         "dsec_sha256_fd of a directory fails");
  ok(err && err->status == DSEC_EXIT_FAILURE && err->errnum == EISDIR,
     "... with status 1 and errno EISDIR");
  close(dfd);
  dsec_error_free(err);
}

static void test_digest_valid(void)
{
  const char *good = SHA256_ABC;
  char buf[128];

  ok(dsec_digest_valid(good), "valid: sha256 + 64 lowercase hex");
  is_str(dsec_digest_hex(good), good + 7, "dsec_digest_hex skips \"sha256:\"");

  snprintf(buf, sizeof buf, "sha256:%s", "BA7816BF8F01CFEA414140DE5DAE2223"
                                         "B00361A396177A9CB410FF61F20015AD");
  ok(!dsec_digest_valid(buf), "invalid: uppercase hex");
  snprintf(buf, sizeof buf, "%.70s", good);
  ok(!dsec_digest_valid(buf), "invalid: 63 hex digits");
  snprintf(buf, sizeof buf, "%s0", good);
  ok(!dsec_digest_valid(buf), "invalid: 65 hex digits");
  snprintf(buf, sizeof buf, "sha512:%s", good + 7);
  ok(!dsec_digest_valid(buf), "invalid: sha512 algorithm");
  snprintf(buf, sizeof buf, "SHA256:%s", good + 7);
  ok(!dsec_digest_valid(buf), "invalid: algorithm in uppercase");
  ok(!dsec_digest_valid(good + 7), "invalid: bare hex without algorithm");
  snprintf(buf, sizeof buf, "sha256:%.63sg", good + 7);
  ok(!dsec_digest_valid(buf), "invalid: non-hex digit 'g'");
  ok(!dsec_digest_valid(""), "invalid: empty string");
  ok(!dsec_digest_valid("sha256:"), "invalid: algorithm only");
  ok(!dsec_digest_valid(NULL), "invalid: NULL");
}

/* RFC 4648's test vectors, both ways, and what is not base64. */
static void test_base64(void)
{
  static const char *const vec[][2] = {
    { "", "" },         { "f", "Zg==" },         { "fo", "Zm8=" },
    { "foo", "Zm9v" },  { "foob", "Zm9vYg==" },  { "fooba", "Zm9vYmE=" },
    { "foobar", "Zm9vYmFy" },
  };
  static const char *const bad[] = {
    "Zg=", "Zm9vY", "Zm9v!mFy", "Z===", "=Zm9", "Zm=v", "Zg==Zg==", "Zm9v\nYmFy",
  };
  const unsigned char bytes[] = { 0x00, 0xff, 0xfe, 0x80, 0x3f, 0x0a };
  unsigned char *out;
  size_t len;
  char *b64;

  for (size_t i = 0; i < sizeof vec / sizeof *vec; i++) {
    b64 = dsec_base64_encode(vec[i][0], strlen(vec[i][0]));
    is_str(b64, vec[i][1], "encode \"%s\"", vec[i][0]);
    free(b64);
    out = dsec_base64_decode(vec[i][1], &len);
    ok(out && len == strlen(vec[i][0]) && memcmp(out, vec[i][0], len) == 0,
       "decode \"%s\"", vec[i][1]);
    free(out);
  }
  b64 = dsec_base64_encode(bytes, sizeof bytes);
  out = dsec_base64_decode(b64, &len);
  ok(out && len == sizeof bytes && memcmp(out, bytes, len) == 0,
     "bytes that are not text round-trip (%s)", b64);
  free(out);
  free(b64);
  out = dsec_base64_decode(" Zm9v\n", &len);
  ok(out && len == 3 && memcmp(out, "foo", 3) == 0,
     "white space around it is ignored");
  free(out);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    len = 7;
    out = dsec_base64_decode(bad[i], &len);
    ok(!out && len == 0, "not base64: \"%s\"", bad[i]);
    free(out);
  }
}

int main(void)
{
  tmp = tap_tmpdir("test-digest");
  test_known_vectors();
  test_large_buffers();
  test_sha256_fd();
  test_digest_valid();
  test_base64();
  return done_testing();
}
