#include <config.h>

#include "digest.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lazylib.h"

/* libcrypto is loaded when first used, not when a program starts: the
 * dynamic linker's relocations make ~400 KiB of its pages private to
 * every process that maps it, and each sandbox's supervisor (and its
 * init, which shares them) would carry them while it hardly ever hashes
 * anything.  Nothing but this file calls it (see lazylib.h). */
static struct {
  __typeof__(EVP_MD_CTX_new) *md_ctx_new;
  __typeof__(EVP_MD_CTX_free) *md_ctx_free;
  __typeof__(EVP_sha256) *sha256;
  __typeof__(EVP_DigestInit_ex) *init;
  __typeof__(EVP_DigestUpdate) *update;
  __typeof__(EVP_DigestFinal_ex) *final;
} crypto;

static void crypto_load(void)
{
  void *lib = dsec_lib_open(DSEC_LIBCRYPTO);

#define CRYPTO_SYM(field, name)                                               \
  crypto.field = (__typeof__(crypto.field)) dsec_lib_sym(lib, DSEC_LIBCRYPTO, \
                                                         name)
  CRYPTO_SYM(md_ctx_new, "EVP_MD_CTX_new");
  CRYPTO_SYM(md_ctx_free, "EVP_MD_CTX_free");
  CRYPTO_SYM(sha256, "EVP_sha256");
  CRYPTO_SYM(init, "EVP_DigestInit_ex");
  CRYPTO_SYM(update, "EVP_DigestUpdate");
  CRYPTO_SYM(final, "EVP_DigestFinal_ex");
#undef CRYPTO_SYM
}

static void crypto_need(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, crypto_load);
}

void dsec_digest_preload(void)
{
  char d[DSEC_DIGEST_LEN + 1];
  /* a first digest also reads OpenSSL's configuration and sets up its
   * providers, from the host's files */
  dsec_sha256_buf("", 0, d);
}

struct dsec_sha256 {
  EVP_MD_CTX *ctx;
};

struct dsec_sha256 *dsec_sha256_new(void)
{
  struct dsec_sha256 *h = xzalloc(sizeof *h);
  crypto_need();
  h->ctx = crypto.md_ctx_new();
  if (!h->ctx || crypto.init(h->ctx, crypto.sha256(), NULL) != 1)
    abort(); /* only fails for lack of memory */
  return h;
}

void dsec_sha256_update(struct dsec_sha256 *h, const void *buf, size_t len)
{
  if (len && crypto.update(h->ctx, buf, len) != 1)
    abort();
}

void dsec_sha256_final(struct dsec_sha256 *h, char out[DSEC_DIGEST_LEN + 1])
{
  static const char hex[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;

  if (crypto.final(h->ctx, md, &n) != 1 || n != 32)
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
  crypto.md_ctx_free(h->ctx);
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

/* Base64 is ours, not libcrypto's: exec output and input are encoded in
 * every supervisor that streams, which would otherwise load libcrypto for
 * that alone. */
static const char b64_alphabet[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *dsec_base64_encode(const void *buf, size_t len)
{
  const unsigned char *in = buf;
  char *b64 = xmalloc(4 * ((len + 2) / 3) + 1), *o = b64;

  for (size_t i = 0; i < len; i += 3) {
    uint32_t v = (uint32_t) in[i] << 16;
    if (i + 1 < len)
      v |= (uint32_t) in[i + 1] << 8;
    if (i + 2 < len)
      v |= in[i + 2];
    *o++ = b64_alphabet[v >> 18];
    *o++ = b64_alphabet[(v >> 12) & 63];
    *o++ = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
    *o++ = i + 2 < len ? b64_alphabet[v & 63] : '=';
  }
  *o = '\0';
  return b64;
}

static int b64_value(unsigned char c)
{
  const char *p = c ? strchr(b64_alphabet, c) : NULL;
  return p ? (int) (p - b64_alphabet) : -1;
}

unsigned char *dsec_base64_decode(const char *b64, size_t *len)
{
  size_t n = strlen(b64), pad = 0;
  unsigned char *out, *o;

  *len = 0;
  /* as EVP_DecodeBlock did: white space around it is no part of it */
  while (n && strchr(" \t\r\n", b64[n - 1]))
    n--;
  while (n && strchr(" \t\r\n", *b64))
    b64++, n--;
  if (n % 4)
    return NULL;
  if (n && b64[n - 1] == '=')
    pad = n >= 2 && b64[n - 2] == '=' ? 2 : 1;
  o = out = xmalloc(n / 4 * 3 + 1);
  for (size_t i = 0; i < n; i += 4) {
    bool last = i + 4 == n;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; k++) {
      int d = b64_value((unsigned char) b64[i + k]);
      if (d < 0 && !(last && k >= 4 - pad)) {
        free(out);
        return NULL;
      }
      v = v << 6 | (uint32_t) (d < 0 ? 0 : d);
    }
    *o++ = (unsigned char) (v >> 16);
    if (!last || pad < 2)
      *o++ = (unsigned char) (v >> 8);
    if (!last || pad < 1)
      *o++ = (unsigned char) v;
  }
  *len = (size_t) (o - out);
  return out;
}
