/* sha256 digests with OpenSSL's EVP interface (libcrypto, loaded on first
 * use: digest.c), in the OCI form "sha256:<64 lowercase hex>", and
 * base64. */
#ifndef DSEC_DIGEST_H
#define DSEC_DIGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "error.h"

#define DSEC_SHA256_HEX_LEN 64
#define DSEC_DIGEST_LEN (7 + DSEC_SHA256_HEX_LEN) /* "sha256:" + hex */

struct dsec_sha256;

struct dsec_sha256 *dsec_sha256_new(void);
void dsec_sha256_update(struct dsec_sha256 *h, const void *buf, size_t len);
/* Writes "sha256:<hex>" (DSEC_DIGEST_LEN + 1 bytes) and frees h. */
void dsec_sha256_final(struct dsec_sha256 *h, char out[DSEC_DIGEST_LEN + 1]);
void dsec_sha256_free(struct dsec_sha256 *h);

void dsec_sha256_buf(const void *buf, size_t len,
                     char out[DSEC_DIGEST_LEN + 1]);
/* Hashes fd from its current offset to EOF. */
int dsec_sha256_fd(int fd, char out[DSEC_DIGEST_LEN + 1], uint64_t *size,
                   struct dsec_error **err);

/* Base64 (RFC 4648, padded), as exec output and input carry bytes.
 * encode returns a new string; decode a new buffer of *len bytes, or NULL
 * (and *len 0) where b64 is not base64; white space around it is
 * ignored. */
char *dsec_base64_encode(const void *buf, size_t len);
unsigned char *dsec_base64_decode(const char *b64, size_t *len);

/* Loads and sets up libcrypto now (it is loaded on first use): for a
 * process about to leave the host's root that digests afterwards. */
void dsec_digest_preload(void);

/* True for "sha256:" followed by exactly 64 lowercase hex digits. */
bool dsec_digest_valid(const char *digest);
/* True for exactly 64 lowercase hex digits (a digest's hex part, as the
 * store names its objects).  Inline: callers format what passed into
 * digest-sized buffers, and the compiler then knows its length. */
static inline bool dsec_digest_hex_valid(const char *hex)
{
  return hex && strlen(hex) == DSEC_SHA256_HEX_LEN &&
         strspn(hex, "0123456789abcdef") == DSEC_SHA256_HEX_LEN;
}
/* The hex part of a valid digest (borrowed, points into digest). */
const char *dsec_digest_hex(const char *digest);

#endif
