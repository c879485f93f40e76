/* Fuzz target: what a registry (or an OCI layout, a docker archive)
 * serves and dsec-pull parses before anything is fetched: image manifests
 * (dsec_manifest_parse), indexes and manifest lists (dsec_index_pick), and
 * the references naming them (dsec_image_ref_parse, dsec_ref_split).  The
 * input's first byte picks the Content-Type the registry claimed and the
 * platform asked for; the rest is the body, and, as a string, a reference.
 * Beyond memory errors and undefined behaviour it checks: a refusal has a
 * message; a parsed manifest's config and layers have valid sha256
 * digests, layer media types dsec reads, at most 1024 layers and a config
 * within DSEC_CONFIG_MAX; a picked manifest has a valid digest; a parsed
 * reference has a registry and a repository, and a split one a valid
 * name and version. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "image.h"
#include "refs.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

static const char *const media_types[] = {
  NULL, DSEC_MT_OCI_MANIFEST, DSEC_MT_DOCKER_MANIFEST, DSEC_MT_OCI_INDEX,
  DSEC_MT_DOCKER_LIST, "application/json", "text/html",
};
static const char *const platforms[] = {
  NULL, "linux/amd64", "linux/arm64/v8", "linux/arm/v7", "windows/amd64",
  "linux", "/", "//",
};

static void errcheck(int r, struct dsec_error **err)
{
  CHECK(r == 0 || (*err && (*err)->msg && *(*err)->msg));
  dsec_error_free(*err);
  *err = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct dsec_error *err = NULL;
  struct dsec_manifest m = { 0 };
  struct dsec_descriptor d = { 0 };
  struct dsec_image_ref ref = { 0 };
  const char *body;
  const char *mt;
  const char *platform;
  char *s, *name = NULL, *version = NULL;
  size_t len;
  int r;

  if (size < 1 || size > DSEC_MANIFEST_MAX)
    return 0;
  mt = media_types[data[0] % (sizeof media_types / sizeof *media_types)];
  platform = platforms[(data[0] >> 3) % (sizeof platforms / sizeof *platforms)];
  body = (const char *) data + 1;
  len = size - 1;

  r = dsec_manifest_parse(body, len, mt, "fuzz", &m, &err);
  errcheck(r, &err);
  if (r == 0) {
    CHECK(dsec_digest_valid(m.config.digest) && m.config.media_type);
    CHECK(m.config.size <= DSEC_CONFIG_MAX && m.n_layers <= 1024);
    for (size_t i = 0; i < m.n_layers; i++)
      CHECK(dsec_digest_valid(m.layers[i].digest) && m.layers[i].media_type);
    dsec_manifest_clear(&m);
  }
  r = dsec_index_pick(body, len, platform, "fuzz", &d, &err);
  errcheck(r, &err);
  if (r == 0) {
    CHECK(dsec_digest_valid(d.digest) && d.media_type);
    free(d.media_type);
  }

  if (len > 4096)
    return 0;
  s = malloc(len + 1);
  CHECK(s);
  memcpy(s, body, len);
  s[len] = '\0';
  r = dsec_image_ref_parse(s, &ref, &err);
  errcheck(r, &err);
  if (r == 0) {
    char *full = dsec_image_ref_name(&ref);
    CHECK(ref.registry && *ref.registry && ref.repository && *ref.repository);
    CHECK(ref.tag || ref.digest);
    CHECK(!ref.digest || dsec_digest_valid(ref.digest));
    CHECK(full);
    free(full);
    dsec_image_ref_clear(&ref);
  }
  r = dsec_ref_split(s, &name, &version, &err);
  errcheck(r, &err);
  if (r == 0) {
    CHECK(dsec_ref_name_valid(name) && dsec_ref_version_valid(version));
    free(name);
    free(version);
  }
  free(s);
  return 0;
}
