/* A client of the OCI distribution API (registries such as Docker's
 * distribution, Harbor, GHCR) on libcurl: manifests and blobs over HTTPS,
 * or plain HTTP when insecure is set, with the bearer-token and basic auth
 * flows.  Blobs are fetched in parallel straight into store blob writers. */
#ifndef DSEC_REGISTRY_H
#define DSEC_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "refs.h"
#include "store.h"

struct dsec_registry;

/* insecure: use http:// instead of https:// (no TLS at all). */
int dsec_registry_open(const struct dsec_image_ref *ref, bool insecure,
                       struct dsec_registry **out, struct dsec_error **err);
void dsec_registry_free(struct dsec_registry *r);

/* GET /v2/<repo>/manifests/<reference> (a tag or a digest), accepting OCI
 * index/manifest and Docker manifest list/v2 schema 2.  Returns the body
 * exactly as served (*body new, NUL-terminated, *len without the NUL) and
 * its Content-Type (*media_type new, parameters stripped).  An unknown
 * manifest or repository (404, MANIFEST_UNKNOWN, NAME_UNKNOWN) is bad
 * input; transport and server errors are failures.  Bodies over 4 MiB are
 * refused. */
int dsec_registry_get_manifest(struct dsec_registry *r, const char *reference,
                               char **body, size_t *len, char **media_type,
                               struct dsec_error **err);

/* One blob to fetch.  The caller opens `writer`; the fetch writes into it
 * (after dsec_blob_writer_set_limit(writer, size), so a blob larger than
 * declared fails as bad input) and leaves finishing and committing to the
 * caller.  On return `err` holds this blob's error, if any. */
struct dsec_fetch {
  const char *digest;
  uint64_t size;
  struct dsec_blob_writer *writer;
  struct dsec_error *err;
};

/* Fetches blobs, at most `parallel` at a time (curl multi), following
 * redirects (without forwarding credentials to another host).  Shows a
 * progress display on stderr when stderr is a terminal.  Returns 0 when
 * every fetch succeeded, -1 otherwise (each failed fetch's err is set, and
 * *err gets the first). */
int dsec_registry_fetch_blobs(struct dsec_registry *r, struct dsec_fetch *v,
                              size_t n, int parallel, struct dsec_error **err);

#endif
