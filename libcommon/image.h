/* Images and layers in the store: importing layer blobs (verified and
 * checked member by member before they become visible), OCI/Docker
 * manifests and configs, image records and composed environments. */
#ifndef DSEC_IMAGE_H
#define DSEC_IMAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "tarball.h"
#include "refs.h"
#include "store.h"

#define DSEC_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define DSEC_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define DSEC_MT_OCI_CONFIG "application/vnd.oci.image.config.v1+json"
#define DSEC_MT_OCI_LAYER "application/vnd.oci.image.layer.v1.tar"
#define DSEC_MT_DOCKER_LIST \
  "application/vnd.docker.distribution.manifest.list.v2+json"
#define DSEC_MT_DOCKER_MANIFEST \
  "application/vnd.docker.distribution.manifest.v2+json"
#define DSEC_MT_DOCKER_CONFIG "application/vnd.docker.container.image.v1+json"
#define DSEC_MT_DOCKER_LAYER "application/vnd.docker.image.rootfs.diff.tar"

#define DSEC_MANIFEST_MAX (4u << 20)
#define DSEC_CONFIG_MAX (8u << 20)

struct dsec_descriptor {
  char *media_type;
  char digest[DSEC_DIGEST_LEN + 1];
  uint64_t size;
};

struct dsec_manifest {
  struct dsec_descriptor config;
  struct dsec_descriptor *layers;
  size_t n_layers;
};
void dsec_manifest_clear(struct dsec_manifest *m);

/* True for an index or a Docker manifest list. */
bool dsec_media_type_is_index(const char *mt);

/* Parses an image manifest (OCI or Docker v2 schema 2); media_type may be
 * NULL (then taken from the body).  Bad input names `what`. */
int dsec_manifest_parse(const char *buf, size_t len, const char *media_type,
                        const char *what, struct dsec_manifest *m,
                        struct dsec_error **err);
/* Picks the manifest for platform ("os/arch[/variant]", NULL: linux/amd64)
 * from an index or manifest list. */
int dsec_index_pick(const char *buf, size_t len, const char *platform,
                    const char *what, struct dsec_descriptor *out,
                    struct dsec_error **err);

/* The layer media type for a compression ("none", "gzip", ...). */
const char *dsec_layer_media_type(const char *compression);

/* What a manifest and a config say a layer is; each field may be unknown
 * (NULL, or -1 for the size).  A layer that differs is refused before it
 * becomes visible in the store. */
struct dsec_layer_expect {
  const char *digest;
  int64_t size;
  const char *diff_id;
  const char *media_type; /* NULL: named after its compression */
};

/* Imports a layer whose bytes are in a blob writer (the writer is always
 * consumed): finishes it, checks it against x (may be NULL) and every
 * member against p, then writes the layer's metadata and commits the
 * blob.  *meta (optional) gets the layer record (new ref); *existed
 * (optional) is set when the store had the blob already. */
int dsec_layer_import_writer(struct dsec_store *s, struct dsec_blob_writer *w,
                             const struct dsec_layer_expect *x,
                             const struct dsec_tar_policy *p, json_t **meta,
                             bool *existed, struct dsec_error **err);
/* Same, reading fd to EOF; when x names a digest the store has already,
 * nothing is read and *cached is set. */
int dsec_layer_import_fd(struct dsec_store *s, int fd,
                         const struct dsec_layer_expect *x,
                         const struct dsec_tar_policy *p, json_t **meta,
                         bool *cached, struct dsec_error **err);
/* The layer's metadata record if the store has the layer (blob and meta),
 * else NULL without error.  New ref. */
json_t *dsec_layer_meta(struct dsec_store *s, const char *digest);

/* A config blob for a single rootfs tarball with no config of its own. */
char *dsec_image_default_config(const char *const *diff_ids, size_t n);

/* Stores manifest and config (config verified against the manifest),
 * writes the image record, tags it with every name in names (NAME,
 * NAME:TAG or NAME@VERSION; NULL-terminated, may be NULL) and remembers
 * source (canonical, may be NULL).  The layers must be imported already.
 * *record gets the image record (new ref). */
int dsec_image_commit(struct dsec_store *s, const char *manifest, size_t mlen,
                      const char *config, size_t clen, const char *source,
                      const char *const *names, json_t **record,
                      struct dsec_error **err);

/* The stored image record of an image digest (new ref). */
json_t *dsec_image_record(struct dsec_store *s, const char *digest,
                          struct dsec_error **err);

/* The environment a backend boots: the image's layers bottom to top, then
 * each extra layer (an image given as a layer adds all of its layers), and
 * the image's config.  New ref. */
json_t *dsec_compose(struct dsec_store *s, const char *image,
                     const char *const *layers, size_t n,
                     struct dsec_error **err);

#endif
