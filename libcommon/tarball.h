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

/* Where a tar stream being written goes: 0, or -1 with *err set. */
typedef int (*dsec_write_fn)(void *ud, const void *buf, size_t len,
                             struct dsec_error **err);

struct dsec_tar_policy {
  uint64_t max_size;  /* bound on the uncompressed stream; 0: default */
  /* the operator trusts the layer's setuid/setgid files and file
   * capabilities: strip_setuid leaves them */
  bool keep_setuid;
  /* setuid/setgid bits and file capabilities (security.capability) are
   * removed and counted (dsec_tar_rewrite, and dsec_tar_extract into a
   * tree the host sees); otherwise they are kept and counted.  Device
   * nodes are counted, and never written (extraction, rewrite). */
  bool strip_setuid;
  /* dsec_tar_rewrite: overlayfs metadata xattrs (trusted.overlay.*,
   * user.overlay.*, escaped or not) are removed and counted, not refused;
   * extraction always drops them */
  bool strip_overlay;
  /* a device node is refused, not dropped: a sandbox's writable layer
   * (a checkpoint) holds none that the sandbox should keep */
  bool refuse_devices;
  /* absolute paths the layer must not change (NULL-terminated, may be
   * NULL): a member at or below one, a non-directory at one of its
   * parents, a whiteout of it or of a parent, an opaque marker on it or
   * on a parent are refused */
  const char *const *protect;
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
  /* what the strip_* policies removed (members, or xattrs) */
  uint64_t stripped_setuid, stripped_setgid, stripped_capabilities;
  uint64_t stripped_overlay_xattrs;
  /* what was kept: setuid, setgid files, files with capabilities */
  uint64_t setuid_files, setgid_files, capability_files;
  uint64_t device_nodes; /* counted, dropped */
};

/* Reads fd to EOF, checking every member.  Violations are bad input with
 * a message naming the member.  Overlay metadata xattrs are refused. */
int dsec_tar_scan(int fd, const struct dsec_tar_policy *p,
                  struct dsec_tar_stats *st, struct dsec_error **err);

/* Reads fd to EOF as dsec_tar_scan does, and writes what passed as a new
 * tar stream to out (pax, zstd-compressed when zstd is set): member paths
 * cleaned, the top directory's own member, user and group names, access
 * and change times left out, and what the strip_* policies say removed
 * (counted in st).  The sizes of the members (sparse files' holes
 * included) are bounded by the policy's max_size as well.  st describes
 * the input stream, without its digests (what is stored, and hashed, is
 * the output). */
int dsec_tar_rewrite(int fd, const struct dsec_tar_policy *p,
                     dsec_write_fn out, void *ud, bool zstd,
                     struct dsec_tar_stats *st, struct dsec_error **err);

/* Extracts fd into the empty directory target (an absolute path),
 * converting OCI whiteouts into overlayfs whiteouts (a 0/0 character device;
 * opaque directories get both trusted.overlay.opaque and
 * user.overlay.opaque as root, so that an overlay mounted with or without
 * userxattr sees them, user.overlay.opaque otherwise).  Overlay metadata
 * xattrs of the members are dropped.  When expected_digest is set, the bytes
 * read must hash to it or the extraction fails naming the blob.  Keeps
 * ownership (as root), modes, times, xattrs, hardlinks and sparse files. */
int dsec_tar_extract(int fd, const char *target, const struct dsec_tar_policy *p,
                     const char *expected_digest, struct dsec_tar_stats *st,
                     struct dsec_error **err);

/* Writes trees as one tar stream to out (pax, zstd-compressed when zstd
 * is set): each source's tree under its prefix ("" for the top), entries
 * in sorted order, hardlinks kept, sockets skipped, user and group names
 * left out.  Paths in a source's exclude list (relative to its dir,
 * NULL-terminated, may be NULL) are left out with everything below.
 * The walk goes from directory descriptor to directory descriptor and
 * never follows a symlink in the tree: a tree that changes meanwhile
 * (a sandbox's) makes it fail, never read elsewhere.  cs (may be NULL)
 * gets what was left out. */
struct dsec_tar_source {
  const char *dir;
  const char *prefix;
  const char *const *exclude;
  const char *exclude_name; /* a file name left out wherever it is */
  /* an overlayfs upper directory (a sandbox's changes): its whiteouts (0/0
   * character devices) become OCI .wh. files, its opaque directories
   * (trusted. or user.overlay.opaque) get .wh..wh..opq, overlay xattrs
   * are dropped, and a file whose own name starts with ".wh." (one the
   * sandbox named so: it would turn into a whiteout) is left out, with
   * everything below it, and counted */
  bool overlay_upper;
  /* subtracted from every owner and group: the upper of a sandbox whose
   * root is host id N holds files of N + their id inside */
  unsigned id_shift;
};
struct dsec_tar_create_stats {
  uint64_t entries;                /* members written */
  uint64_t skipped_whiteout_names; /* overlay_upper: ".wh." names left out */
};
int dsec_tar_create(const struct dsec_tar_source *src, size_t n,
                    dsec_write_fn out, void *ud, bool zstd,
                    struct dsec_tar_create_stats *cs, struct dsec_error **err);

/* Before a process that reads or writes tar streams leaves the host's
 * root (chroot into a tree an image or a sandbox wrote): libarchive
 * converts names with iconv (pax headers are UTF-8), and glibc reads its
 * converters' configuration, and loads the modules it names, from the
 * root of the moment on the first conversion.  A sandbox that put a
 * gconv-modules file and a module of its own in its tree had its code
 * run by the checkpoint's reader that way, outside its seccomp filter
 * and namespaces.  This makes the first conversions, both ways, in the
 * host's root: the configuration is read once per process, and the
 * conversions libarchive asks for (UTF-8 and the C locale's ASCII: dsec
 * sets no locale, and only the tar format is read or written) are
 * glibc's built-in ones, which load no module; both are kept open
 * besides, so a converter that is not built in would stay loaded.  It
 * loads libarchive itself too (archive-lazy.h), from the host's root. */
void dsec_tar_preload(void);

/* The compression a file starts with, from its magic bytes: "none",
 * "gzip", "zstd", "xz", or NULL for a compression dsec does not read
 * (named in *unsupported when known, e.g. "bzip2"). */
const char *dsec_compression_sniff(const unsigned char *buf, size_t len,
                                   const char **unsupported);

#endif
