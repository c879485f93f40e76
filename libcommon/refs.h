/* Names for store objects.  A ref is NAME@VERSION (images also NAME:TAG);
 * NAME is slash-separated components of [A-Za-z0-9._-] (the first may carry
 * a registry's host:port), VERSION is [A-Za-z0-9_][A-Za-z0-9._-]*.  Refs live
 * in store/refs/NAME/VERSION; a pulled image is also found by its source
 * reference (store/sources/) and by its digest. */
#ifndef DSEC_REFS_H
#define DSEC_REFS_H

#include <stdbool.h>

#include "store.h"

enum dsec_kind {
  DSEC_KIND_NONE,
  DSEC_KIND_IMAGE,
  DSEC_KIND_LAYER,
};

const char *dsec_kind_name(enum dsec_kind k);

bool dsec_ref_name_valid(const char *name);
bool dsec_ref_version_valid(const char *version);

/* Splits "NAME@VERSION", "NAME:TAG" or "NAME" (version "latest") and checks
 * both parts; bad input otherwise.  New strings. */
int dsec_ref_split(const char *ref, char **name, char **version,
                   struct dsec_error **err);

/* A registry reference: [HOST[:PORT]/]REPO[:TAG][@sha256:...].  Without a
 * host it is Docker Hub's (docker.io, library/ for one component). */
struct dsec_image_ref {
  char *registry;   /* "docker.io", "127.0.0.1:5000" */
  char *repository; /* "library/busybox" */
  char *tag;        /* NULL when only a digest was given */
  char *digest;     /* NULL unless @sha256:... */
};
int dsec_image_ref_parse(const char *s, struct dsec_image_ref *out,
                         struct dsec_error **err);
void dsec_image_ref_clear(struct dsec_image_ref *r);
/* "REGISTRY/REPOSITORY", the name a pulled image is tagged with. */
char *dsec_image_ref_name(const struct dsec_image_ref *r);

int dsec_ref_set(struct dsec_store *s, const char *name, const char *version,
                 enum dsec_kind kind, const char *digest,
                 struct dsec_error **err);
/* Returns 1 and fills digest/kind when the ref exists, 0 when not. */
int dsec_ref_get(struct dsec_store *s, const char *name, const char *version,
                 char digest[DSEC_DIGEST_LEN + 1], enum dsec_kind *kind,
                 struct dsec_error **err);
/* Returns 1 when removed, 0 when there was no such ref. */
int dsec_ref_rm(struct dsec_store *s, const char *name, const char *version,
                struct dsec_error **err);
/* Every ref as {"type":"ref","name","version","kind","digest","created"},
 * sorted by name then version (new array). */
json_t *dsec_ref_list(struct dsec_store *s, struct dsec_error **err);

/* Source references ("oci:/abs/dir:tag", "tar:/abs/file", "docker-archive:
 * /abs/file", or a registry name) remembered for the image they gave. */
char *dsec_source_canonical(const char *source, struct dsec_error **err);
/* Splits the part after "oci:" into DIR and TAG (NULL without one). */
void dsec_oci_split(const char *spec, char **dir, char **tag);
int dsec_source_set(struct dsec_store *s, const char *canonical,
                    const char *digest, struct dsec_error **err);

/* What a store object is, from its metadata. */
enum dsec_kind dsec_store_kind(struct dsec_store *s, const char *digest);

/* Resolves what a user typed: a digest (or a unique hex prefix of 12+
 * digits), NAME@VERSION, NAME:TAG, NAME, or a source reference.  Unknown is
 * bad input ("no image or layer ..."). */
int dsec_store_resolve(struct dsec_store *s, const char *ref,
                       char digest[DSEC_DIGEST_LEN + 1], enum dsec_kind *kind,
                       struct dsec_error **err);

#endif
