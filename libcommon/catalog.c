/* Reading the store: layer metadata, image records, and the environment
 * a backend boots.  Kept apart from the importers so that a program that
 * only reads (dsec-run) does not load the archive libraries. */
#include <config.h>

#include "image.h"

#include <fcntl.h>
#include <string.h>

#include "fsutil.h"

json_t *dsec_layer_meta(struct dsec_store *s, const char *digest)
{
  _cleanup_free_ char *path = NULL;
  _cleanup_free_ char *buf = NULL;
  size_t len;

  if (!dsec_digest_valid(digest) || !dsec_store_has_blob(s, digest))
    return NULL;
  path = xasprintf("%s/meta.json", dsec_digest_hex(digest));
  buf = dsec_read_file_at(s->layers_fd, path, 1 << 20, &len, NULL);
  if (!buf)
    return NULL;
  return json_loadb(buf, len, 0, NULL);
}

json_t *dsec_image_record(struct dsec_store *s, const char *digest,
                          struct dsec_error **err)
{
  _cleanup_free_ char *file = NULL;
  _cleanup_free_ char *buf = NULL;
  size_t len;

  if (!dsec_digest_valid(digest)) {
    dsec_bad_input(err, "invalid digest %s", digest);
    return NULL;
  }
  file = xasprintf("%s.json", dsec_digest_hex(digest));
  buf = dsec_read_file_at(s->images_fd, file, DSEC_MANIFEST_MAX, &len, err);
  if (!buf)
    return NULL;
  return dsec_json_parse(buf, len, file, err);
}

static int add_layers(json_t *out, json_t *layers, const char *from,
                      const char *ref)
{
  json_t *v;
  size_t i;
  json_array_foreach(layers, i, v)
  {
    json_t *l = json_copy(v);
    json_object_set_new(l, "from", json_string(from));
    json_object_set_new(l, "ref", json_string(ref));
    json_array_append_new(out, l);
  }
  return 0;
}

json_t *dsec_compose(struct dsec_store *s, const char *image,
                     const char *const *extra, size_t n,
                     struct dsec_error **err)
{
  char digest[DSEC_DIGEST_LEN + 1];
  enum dsec_kind kind;
  _cleanup_json_ json_t *img = NULL;
  json_t *layers, *out;

  if (dsec_store_resolve(s, image, digest, &kind, err) < 0)
    return NULL;
  if (kind != DSEC_KIND_IMAGE) {
    dsec_bad_input(err, "`%s` is a layer, not an image", image);
    return NULL;
  }
  img = dsec_image_record(s, digest, err);
  if (!img)
    return NULL;
  layers = json_array();
  add_layers(layers, json_object_get(img, "layers"), "image", image);
  for (size_t i = 0; i < n; i++) {
    char d[DSEC_DIGEST_LEN + 1];
    enum dsec_kind k;
    if (dsec_store_resolve(s, extra[i], d, &k, err) < 0) {
      json_decref(layers);
      return NULL;
    }
    if (k == DSEC_KIND_IMAGE) {
      _cleanup_json_ json_t *other = dsec_image_record(s, d, err);
      if (!other) {
        json_decref(layers);
        return NULL;
      }
      add_layers(layers, json_object_get(other, "layers"), "layer", extra[i]);
    } else {
      _cleanup_json_ json_t *meta = dsec_layer_meta(s, d);
      if (!meta) {
        json_decref(layers);
        dsec_bad_input(err, "layer %s is not in the store", d);
        return NULL;
      }
      json_array_append_new(
        layers, json_pack("{s:s, s:O, s:O, s:O, s:s, s:s}", "digest", d,
                          "size", json_object_get(meta, "size"), "media_type",
                          json_object_get(meta, "media_type"), "diff_id",
                          json_object_get(meta, "diff_id"), "from", "layer",
                          "ref", extra[i]));
    }
  }
  /* A layer twice in the stack (a fork's checkpoint and its own, both of
   * an unchanged sandbox) is kept at its top place only: the view is the
   * same, and overlayfs refuses a layer that overlaps another. */
  for (size_t i = json_array_size(layers); i-- > 0;) {
    const char *di = json_string_value(
      json_object_get(json_array_get(layers, i), "digest"));
    for (size_t k = i + 1; di && k < json_array_size(layers); k++)
      if (strcmp(di, json_string_value(json_object_get(
                       json_array_get(layers, k), "digest")) ?: "") == 0) {
        json_array_remove(layers, i);
        break;
      }
  }
  out = json_pack("{s:s, s:{s:s, s:s, s:O}, s:o, s:O}", "type", "environment",
                  "image", "digest", digest, "ref", image, "platform",
                  json_object_get(img, "platform"), "layers", layers, "config",
                  json_object_get(img, "config"));
  return out;
}
