/* Bringing an image into the store from any source dsec-pull reads. */
#ifndef DSEC_PULL_H
#define DSEC_PULL_H

#include <stdbool.h>

#include "image.h"

struct dsec_pull_opts {
  const char *name;     /* an extra NAME[:TAG|@VERSION], or NULL */
  const char *platform; /* "os/arch[/variant]", NULL: linux/amd64 */
  bool insecure;        /* plain HTTP to the registry */
  int parallel;         /* concurrent layer downloads, 0: default (4) */
  struct dsec_tar_policy policy;
};

/* SOURCE is REGISTRY/REPO[:TAG|@DIGEST], oci:DIR[:TAG],
 * docker-archive:FILE or tar:FILE.  *record gets the image record with
 * each layer's "cached" and the "source" (new ref). */
int dsec_pull(struct dsec_store *s, const char *source,
              const struct dsec_pull_opts *o, json_t **record,
              struct dsec_error **err);

#endif
