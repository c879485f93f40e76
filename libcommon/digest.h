/* sha256 digests with OpenSSL's EVP interface, in the OCI form
 * "sha256:<64 lowercase hex>". */
#ifndef DSEC_DIGEST_H
#define DSEC_DIGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* True for "sha256:" followed by exactly 64 lowercase hex digits. */
bool dsec_digest_valid(const char *digest);
/* The hex part of a valid digest (borrowed, points into digest). */
const char *dsec_digest_hex(const char *digest);

#endif
