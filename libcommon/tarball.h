/* Layer tarballs from untrusted sources.  One pass decompresses (none,
 * gzip, zstd, xz), hashes the compressed and the uncompressed stream,
 * and checks every member against the policy below; extraction runs the
 * same checks and writes through libarchive's secure disk writer in a
 * child process confined to the target directory. */
#ifndef DSEC_TARBALL_H
#define DSEC_TARBALL_H

#include <stdbool.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"

#define DSEC_DEFAULT_MAX_SIZE (64ULL << 30) /* uncompressed bytes */
#define DSEC_MAX_ENTRIES 10000000ULL

struct dsec_tar_policy {
  uint64_t max_size;  /* bound on the uncompressed stream; 0: default */
  bool keep_setuid;   /* keep setuid/setgid files and file capabilities */
  bool no_sync;       /* extraction: a throwaway tree, not synced to disk */
  const char *diff_id; /* extraction: the uncompressed stream must hash to
                        * this (NULL: unchecked) */
};

struct dsec_tar_stats {
  char digest[DSEC_DIGEST_LEN + 1];  /* of the bytes read (the blob) */
  char diff_id[DSEC_DIGEST_LEN + 1]; /* of the uncompressed tar stream */
  uint64_t size;                     /* bytes read */
  uint64_t uncompressed_size;
  uint64_t entries;
  const char *compression; /* "none", "gzip", "zstd", "xz" (static) */
};

/* Reads fd to EOF, checking every member.  Violations are bad input with
 * a message naming the member. */
int dsec_tar_scan(int fd, const struct dsec_tar_policy *p,
                  struct dsec_tar_stats *st, struct dsec_error **err);

/* Extracts fd into the empty directory target (an absolute path),
 * converting OCI whiteouts into overlayfs whiteouts (a 0/0 character device;
 * opaque directories get the trusted.overlay.opaque xattr as root,
 * user.overlay.opaque otherwise).  When expected_digest is set, the bytes
 * read must hash to it or the extraction fails naming the blob.  Keeps
 * ownership (as root), modes, times, xattrs, hardlinks and sparse files. */
int dsec_tar_extract(int fd, const char *target, const struct dsec_tar_policy *p,
                     const char *expected_digest, struct dsec_tar_stats *st,
                     struct dsec_error **err);

/* Writes trees as one tar stream to out (pax, zstd-compressed when zstd
 * is set): each source's tree under its prefix ("" for the top), entries
 * in sorted order, hardlinks kept, sockets skipped, user and group names
 * left out.  Paths in a source's exclude list (relative to its dir,
 * NULL-terminated, may be NULL) are left out with everything below. */
struct dsec_tar_source {
  const char *dir;
  const char *prefix;
  const char *const *exclude;
  const char *exclude_name; /* a file name left out wherever it is */
  /* an overlayfs upper directory (a sandbox's changes): its whiteouts (0/0
   * character devices) become OCI .wh. files, its opaque directories
   * (trusted. or user.overlay.opaque) get .wh..wh..opq, overlay xattrs
   * are dropped */
  bool overlay_upper;
  /* subtracted from every owner and group: the upper of a sandbox whose
   * root is host id N holds files of N + their id inside */
  unsigned id_shift;
};
typedef int (*dsec_write_fn)(void *ud, const void *buf, size_t len,
                             struct dsec_error **err);
int dsec_tar_create(const struct dsec_tar_source *src, size_t n,
                    dsec_write_fn out, void *ud, bool zstd,
                    struct dsec_error **err);

/* The compression a file starts with, from its magic bytes: "none",
 * "gzip", "zstd", "xz", or NULL for a compression dsec does not read
 * (named in *unsupported when known, e.g. "bzip2"). */
const char *dsec_compression_sniff(const unsigned char *buf, size_t len,
                                   const char **unsupported);

#endif
