#include <config.h>

#include "digest.h"

#include <errno.h>
#include <openssl/evp.h>
#include <string.h>
#include <unistd.h>

struct dsec_sha256 {
  EVP_MD_CTX *ctx;
};

struct dsec_sha256 *dsec_sha256_new(void)
{
  struct dsec_sha256 *h = xzalloc(sizeof *h);
  h->ctx = EVP_MD_CTX_new();
  if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1)
    abort(); /* only fails for lack of memory */
  return h;
}

void dsec_sha256_update(struct dsec_sha256 *h, const void *buf, size_t len)
{
  if (len && EVP_DigestUpdate(h->ctx, buf, len) != 1)
    abort();
}

void dsec_sha256_final(struct dsec_sha256 *h, char out[DSEC_DIGEST_LEN + 1])
{
  static const char hex[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;

  if (EVP_DigestFinal_ex(h->ctx, md, &n) != 1 || n != 32)
    abort();
  memcpy(out, "sha256:", 7);
  for (unsigned i = 0; i < n; i++) {
    out[7 + 2 * i] = hex[md[i] >> 4];
    out[7 + 2 * i + 1] = hex[md[i] & 15];
  }
  out[DSEC_DIGEST_LEN] = '\0';
  dsec_sha256_free(h);
}

void dsec_sha256_free(struct dsec_sha256 *h)
{
  if (!h)
    return;
  EVP_MD_CTX_free(h->ctx);
  free(h);
}

void dsec_sha256_buf(const void *buf, size_t len,
                     char out[DSEC_DIGEST_LEN + 1])
{
  struct dsec_sha256 *h = dsec_sha256_new();
  dsec_sha256_update(h, buf, len);
  dsec_sha256_final(h, out);
}

int dsec_sha256_fd(int fd, char out[DSEC_DIGEST_LEN + 1], uint64_t *size,
                   struct dsec_error **err)
{
  struct dsec_sha256 *h = dsec_sha256_new();
  char buf[1 << 16];
  uint64_t total = 0;

  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      dsec_sha256_free(h);
      return dsec_fail(err, errno, "read failed");
    }
    if (n == 0)
      break;
    dsec_sha256_update(h, buf, (size_t) n);
    total += (uint64_t) n;
  }
  dsec_sha256_final(h, out);
  if (size)
    *size = total;
  return 0;
}

bool dsec_digest_valid(const char *digest)
{
  return digest && strncmp(digest, "sha256:", 7) == 0 &&
         dsec_digest_hex_valid(digest + 7);
}

const char *dsec_digest_hex(const char *digest) { return digest + 7; }
