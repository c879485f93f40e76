/* Layer operations behind dsec-layer: create, materialise, inspect,
 * export and removal with reference checks. */
#ifndef DSEC_LAYER_H
#define DSEC_LAYER_H

#include <stdbool.h>

#include "image.h"

struct dsec_layer_create_opts {
  const char *dir;   /* a directory ... */
  const char *tar;   /* ... or a tarball ("-" for stdin) */
  const char *name;  /* NAME@VERSION or NULL */
  bool scrub_git;    /* with dir: keep only the current commit of .git */
  bool overlay_upper; /* with dir: an overlayfs upper (a sandbox's changes) */
  unsigned id_shift;  /* with dir: subtracted from owners and groups */
  struct dsec_tar_policy policy;
};

/* *record gets the layer record, with "name" when tagged and "cached". */
int dsec_layer_create(struct dsec_store *s,
                      const struct dsec_layer_create_opts *o, json_t **record,
                      struct dsec_error **err);

enum dsec_layer_format {
  DSEC_FORMAT_DIR,   /* layers/<hex>/rootfs/ */
  DSEC_FORMAT_EROFS, /* layers/<hex>/layer.erofs */
};

/* Makes the layer available as a read-only tree once per store (lazily,
 * under the layer's lock, so concurrent callers wait and share it); the
 * blob is verified on the way.  *path (new) is the tree or image; *made
 * tells whether this call made it. */
int dsec_layer_materialise(struct dsec_store *s, const char *digest,
                           enum dsec_layer_format fmt, char **path,
                           bool *made, struct dsec_error **err);

/* Everything known about an image or layer (new ref). */
json_t *dsec_store_inspect(struct dsec_store *s, const char *ref,
                           struct dsec_error **err);

/* Writes a layer as tar.zst, or an image as a docker-archive/OCI layout tar
 * (zstd when file ends in .zst, gzip in .gz), to file ("-": stdout),
 * atomically. */
int dsec_store_export(struct dsec_store *s, const char *ref, const char *file,
                      json_t **record, struct dsec_error **err);

/* Removes a name, or an object with its names.  An object another one
 * needs (a layer of an image, anything a sandbox uses) is kept unless
 * force; an object whose name is removed goes too once nothing names or
 * needs it.  Each removal is appended to removed as a record. */
int dsec_store_rm(struct dsec_store *s, const char *ref, bool force,
                  json_t *removed, struct dsec_error **err);

/* Digests in use by sandboxes under $DSEC_ROOT/sandboxes (each
 * sandboxes/<id>/environment.json lists its image and layers, and
 * state.json its last checkpoint): an object with digests as keys (new
 * ref). */
json_t *dsec_sandbox_references(struct dsec_error **err);

/* The same, leaving out the sandboxes whose ids are keys of skip (a
 * dry run's sandboxes to be removed). */
json_t *dsec_sandbox_references_except(const json_t *skip,
                                       struct dsec_error **err);

#endif
