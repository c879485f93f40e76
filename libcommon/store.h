/* The content-addressed store:
 *
 *   $DSEC_STORE (default $DSEC_ROOT/store)
 *     blobs/sha256/<hex>     immutable blobs, verified on write
 *     images/<hex>.json      image record of manifest <hex> (derived cache)
 *     layers/<hex>/          meta.json, rootfs/ or layer.erofs when materialised
 *     refs/<name>/<version>  name -> digest (JSON)
 *     sources/<hex>          source reference -> image digest (JSON)
 *     tmp/                   blobs being written; locked by their writer
 *     locks/                 one lock file per blob or layer being made
 *
 * Many processes may use one store at once: a blob appears under its final
 * name only complete and verified (written to tmp/, fsync'd, linked into
 * place without replacing), and whoever makes a blob or a layer holds its
 * lock, so concurrent pulls of one image neither corrupt nor duplicate. */
#ifndef DSEC_STORE_H
#define DSEC_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"
#include "json.h"

struct dsec_store {
  char *path; /* absolute path of the store directory */
  int fd;
  int blobs_fd;
  int images_fd;
  int layers_fd;
  int refs_fd;
  int sources_fd;
  int tmp_fd;
  int locks_fd;
};

/* $DSEC_ROOT, else /var/lib/dsec as root, else $XDG_DATA_HOME/dsec
 * (~/.local/share/dsec).  New strings. */
char *dsec_root_dir(void);
/* $DSEC_RUN, else /run/dsec as root, else $XDG_RUNTIME_DIR/dsec. */
char *dsec_run_dir(void);

/* Makes path a directory only its owner reaches (0700), creating it and
 * its parents (0755) when missing, and taking group and other access away
 * from one we own.  $DSEC_ROOT, $DSEC_RUN and the store are such
 * directories: what is in them (extracted layers, a sandbox's files, lock
 * files) is no other user's business. */
int dsec_private_dir(const char *path, struct dsec_error **err);

/* Opens the store, creating its directories (private, see above). */
int dsec_store_open(struct dsec_store **out, struct dsec_error **err);
void dsec_store_free(struct dsec_store *s);
static inline void dsec_store_freep(struct dsec_store **s)
{
  dsec_store_free(*s);
}
#define _cleanup_store_ _cleanup_(dsec_store_freep)

/* Blobs. */
bool dsec_store_has_blob(struct dsec_store *s, const char *digest);
/* Read-only fd on the blob; ENOENT is bad input ("no such blob"). */
int dsec_store_open_blob(struct dsec_store *s, const char *digest,
                         struct dsec_error **err);
/* New string: the blob's absolute path. */
char *dsec_store_blob_path(struct dsec_store *s, const char *digest);
/* Reads a small blob (manifest, config) and verifies its digest. */
char *dsec_store_read_blob(struct dsec_store *s, const char *digest,
                           size_t max, size_t *len, struct dsec_error **err);
/* Hashes the whole blob and fails, naming it, when it does not match. */
int dsec_store_verify_blob(struct dsec_store *s, const char *digest,
                           struct dsec_error **err);

/* Writing a blob: open, write (hashing as it goes), then finish (checks
 * the digest and an expected size), optionally read it back through
 * dsec_blob_writer_fd() to validate its content, then commit, which links
 * it into place.  Commit and abort free the writer. */
struct dsec_blob_writer;
int dsec_blob_writer_open(struct dsec_store *s, struct dsec_blob_writer **out,
                          struct dsec_error **err);
/* Fails (bad input) once more than `limit` bytes are written (0: none). */
void dsec_blob_writer_set_limit(struct dsec_blob_writer *w, uint64_t limit);
int dsec_blob_writer_write(struct dsec_blob_writer *w, const void *buf,
                           size_t len, struct dsec_error **err);
uint64_t dsec_blob_writer_size(struct dsec_blob_writer *w);
/* expected may be NULL; a mismatch is bad input naming both digests. */
int dsec_blob_writer_finish(struct dsec_blob_writer *w, const char *expected,
                            char digest[DSEC_DIGEST_LEN + 1],
                            struct dsec_error **err);
/* A read-only fd at offset 0 on the finished data (new fd). */
int dsec_blob_writer_fd(struct dsec_blob_writer *w, struct dsec_error **err);
/* *existed is set when the store already had the blob. */
int dsec_blob_writer_commit(struct dsec_blob_writer *w, bool *existed,
                            struct dsec_error **err);
void dsec_blob_writer_abort(struct dsec_blob_writer *w);

/* Stores a small in-memory blob. */
int dsec_store_put_blob(struct dsec_store *s, const void *buf, size_t len,
                        const char *expected, char digest[DSEC_DIGEST_LEN + 1],
                        bool *existed, struct dsec_error **err);

/* Lock for making the blob or layer <digest> (exclusive, waits). */
int dsec_store_lock(struct dsec_store *s, const char *what,
                    const char *digest, struct dsec_error **err);

/* Store-wide lock: shared for writers that add references (pull, create,
 * tag), exclusive for removal, so a collector never removes what a writer
 * is about to reference. */
int dsec_store_lock_gc(struct dsec_store *s, bool exclusive,
                       struct dsec_error **err);

/* The same lock in a store's locks directory (locks_fd), for who holds no
 * store handle; with nonblock, a lock held otherwise fails at once
 * (EWOULDBLOCK) instead of waiting. */
int dsec_store_lock_gc_at(int locks_fd, bool exclusive, bool nonblock,
                          struct dsec_error **err);

#endif
