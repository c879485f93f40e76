#include <config.h>

#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"
#include "log.h"

void dsec_manifest_clear(struct dsec_manifest *m)
{
  free(m->config.media_type);
  for (size_t i = 0; i < m->n_layers; i++)
    free(m->layers[i].media_type);
  free(m->layers);
  memset(m, 0, sizeof *m);
}

bool dsec_media_type_is_index(const char *mt)
{
  return mt && (strcmp(mt, DSEC_MT_OCI_INDEX) == 0 ||
                strcmp(mt, DSEC_MT_DOCKER_LIST) == 0);
}

static bool layer_media_type_ok(const char *mt)
{
  return dsec_str_has_prefix(mt, DSEC_MT_OCI_LAYER) ||
         dsec_str_has_prefix(mt, "application/vnd.oci.image.layer.nondistributable.v1.tar") ||
         dsec_str_has_prefix(mt, DSEC_MT_DOCKER_LAYER) ||
         strcmp(mt, "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip") == 0;
}

static int parse_descriptor(json_t *j, const char *what,
                            struct dsec_descriptor *d,
                            struct dsec_error **err)
{
  const char *mt, *digest;
  json_int_t size = -1;

  if (!json_is_object(j))
    return dsec_bad_input(err, "%s: a descriptor must be an object", what);
  if (dsec_json_get_string(j, "mediaType", true, what, &mt, err) < 0 ||
      dsec_json_get_string(j, "digest", true, what, &digest, err) < 0 ||
      dsec_json_get_int(j, "size", true, what, &size, err) < 0)
    return -1;
  if (!dsec_digest_valid(digest))
    return dsec_bad_input(err, "%s: unsupported or invalid digest `%s`", what,
                          digest);
  if (size < 0)
    return dsec_bad_input(err, "%s: negative size", what);
  d->media_type = xstrdup(mt);
  strcpy(d->digest, digest);
  d->size = (uint64_t) size;
  return 0;
}

int dsec_manifest_parse(const char *buf, size_t len, const char *media_type,
                        const char *what, struct dsec_manifest *m,
                        struct dsec_error **err)
{
  _cleanup_json_ json_t *j = dsec_json_parse(buf, len, what, err);
  json_t *cfg, *layers;
  json_int_t version = 0;
  const char *mt = NULL;
  struct dsec_manifest out = { 0 };

  if (!j)
    return -1;
  if (!json_is_object(j))
    return dsec_bad_input(err, "%s: a manifest must be a JSON object", what);
  if (dsec_json_get_int(j, "schemaVersion", true, what, &version, err) < 0 ||
      dsec_json_get_string(j, "mediaType", false, what, &mt, err) < 0 ||
      dsec_json_get_object(j, "config", true, what, &cfg, err) < 0 ||
      dsec_json_get_array(j, "layers", true, what, &layers, err) < 0)
    return -1;
  if (version != 2)
    return dsec_bad_input(err, "%s: unsupported schemaVersion %lld", what,
                          (long long) version);
  if (!mt)
    mt = media_type;
  if (mt && strcmp(mt, DSEC_MT_OCI_MANIFEST) != 0 &&
      strcmp(mt, DSEC_MT_DOCKER_MANIFEST) != 0)
    return dsec_bad_input(err, "%s: unsupported manifest media type `%s`",
                          what, mt);
  if (parse_descriptor(cfg, what, &out.config, err) < 0)
    goto fail;
  if (out.config.size > DSEC_CONFIG_MAX) {
    dsec_bad_input(err, "%s: config of %llu bytes is too large", what,
                   (unsigned long long) out.config.size);
    goto fail;
  }
  out.n_layers = json_array_size(layers);
  if (out.n_layers > 1024) {
    dsec_bad_input(err, "%s: more than 1024 layers", what);
    goto fail;
  }
  out.layers = xzalloc(sizeof *out.layers * (out.n_layers ? out.n_layers : 1));
  for (size_t i = 0; i < out.n_layers; i++) {
    if (parse_descriptor(json_array_get(layers, i), what, &out.layers[i],
                         err) < 0)
      goto fail;
    if (!layer_media_type_ok(out.layers[i].media_type)) {
      dsec_bad_input(err, "%s: layer %zu has unsupported media type `%s`",
                     what, i, out.layers[i].media_type);
      goto fail;
    }
  }
  *m = out;
  return 0;
fail:
  dsec_manifest_clear(&out);
  return -1;
}

int dsec_index_pick(const char *buf, size_t len, const char *platform,
                    const char *what, struct dsec_descriptor *out,
                    struct dsec_error **err)
{
  _cleanup_json_ json_t *j = dsec_json_parse(buf, len, what, err);
  _cleanup_free_ char *want = xstrdup(platform ? platform : "linux/amd64");
  char *want_os = want, *want_arch, *want_variant;
  json_t *manifests;

  if (!j)
    return -1;
  want_arch = strchr(want, '/');
  if (!want_arch)
    return dsec_error_set(err, DSEC_EXIT_USAGE, 0,
                          "invalid platform `%s`: use OS/ARCH[/VARIANT]", want);
  *want_arch++ = '\0';
  want_variant = strchr(want_arch, '/');
  if (want_variant)
    *want_variant++ = '\0';

  if (!json_is_object(j) ||
      dsec_json_get_array(j, "manifests", true, what, &manifests, err) < 0)
    return dsec_bad_input(err, "%s: an index must be an object with "
                               "`manifests`", what);
  for (size_t i = 0; i < json_array_size(manifests); i++) {
    json_t *m = json_array_get(manifests, i);
    json_t *plat = json_object_get(m, "platform");
    const char *os = json_string_value(json_object_get(plat, "os"));
    const char *arch = json_string_value(json_object_get(plat, "architecture"));
    const char *variant = json_string_value(json_object_get(plat, "variant"));

    if (!os || !arch || strcmp(os, want_os) != 0 || strcmp(arch, want_arch) != 0)
      continue;
    if (want_variant && (!variant || strcmp(variant, want_variant) != 0))
      continue;
    return parse_descriptor(m, what, out, err);
  }
  return dsec_bad_input(err, "%s: no manifest for platform %s", what,
                        platform ? platform : "linux/amd64");
}

const char *dsec_layer_media_type(const char *compression)
{
  if (strcmp(compression, "gzip") == 0)
    return DSEC_MT_OCI_LAYER "+gzip";
  if (strcmp(compression, "zstd") == 0)
    return DSEC_MT_OCI_LAYER "+zstd";
  if (strcmp(compression, "xz") == 0)
    return DSEC_MT_OCI_LAYER "+xz";
  return DSEC_MT_OCI_LAYER;
}

static int write_layer_meta(struct dsec_store *s,
                            const struct dsec_tar_stats *st,
                            const char *media_type,
                            const struct dsec_tar_policy *p, json_t **meta,
                            struct dsec_error **err)
{
  _cleanup_close_ int dfd = -1;
  _cleanup_free_ char *text = NULL;
  _cleanup_free_ char *now = dsec_time_rfc3339();
  json_t *rec;
  int ret;

  dfd = dsec_open_dir_at(s->layers_fd, dsec_digest_hex(st->digest), true,
                         err);
  if (dfd < 0)
    return -1;
  rec = json_pack("{s:s, s:s, s:I, s:s, s:s, s:I, s:I, s:s, s:b, s:s}", "type",
                  "layer", "digest", st->digest, "size", (json_int_t) st->size,
                  "media_type", media_type, "diff_id", st->diff_id,
                  "uncompressed_size", (json_int_t) st->uncompressed_size,
                  "entries", (json_int_t) st->entries, "compression",
                  st->compression, "keep_setuid", p->keep_setuid, "created",
                  now);
  /* kept in the blob: acted on when the layer is materialised (setuid
   * and capabilities only inside EROFS images, device nodes never) */
  json_object_set_new(rec, "setuid_files",
                      json_integer((json_int_t) st->setuid_files));
  json_object_set_new(rec, "setgid_files",
                      json_integer((json_int_t) st->setgid_files));
  json_object_set_new(rec, "capability_files",
                      json_integer((json_int_t) st->capability_files));
  json_object_set_new(rec, "device_nodes",
                      json_integer((json_int_t) st->device_nodes));
  text = json_dumps(rec, JSON_COMPACT);
  ret = dsec_write_file_atomic(dfd, "meta.json", text, strlen(text), 0644,
                               err);
  if (ret < 0 || !meta)
    json_decref(rec);
  else
    *meta = rec;
  return ret;
}

int dsec_layer_import_writer(struct dsec_store *s, struct dsec_blob_writer *w,
                             const struct dsec_layer_expect *x,
                             const struct dsec_tar_policy *p, json_t **meta,
                             bool *existed, struct dsec_error **err)
{
  static const struct dsec_layer_expect none = { NULL, -1, NULL, NULL };
  char digest[DSEC_DIGEST_LEN + 1];
  struct dsec_tar_stats st;
  _cleanup_close_ int fd = -1;
  const char *media_type;
  int ret;

  if (!x)
    x = &none;
  ret = dsec_blob_writer_finish(w, x->digest, digest, err);
  if (ret < 0)
    goto fail;
  if (x->size >= 0 && dsec_blob_writer_size(w) != (uint64_t) x->size) {
    dsec_bad_input(err, "layer %s is %llu bytes, its descriptor says %lld",
                   digest, (unsigned long long) dsec_blob_writer_size(w),
                   (long long) x->size);
    goto fail;
  }
  fd = dsec_blob_writer_fd(w, err);
  if (fd < 0)
    goto fail;
  ret = dsec_tar_scan(fd, p, &st, err);
  if (ret < 0) {
    dsec_error_wrap(err, "layer %s", digest);
    goto fail;
  }
  if (x->diff_id && strcmp(x->diff_id, st.diff_id) != 0) {
    dsec_bad_input(err, "layer %s: its content (%s) is not the config's "
                        "diff_id %s", digest, st.diff_id, x->diff_id);
    goto fail;
  }
  media_type = x->media_type ? x->media_type
                             : dsec_layer_media_type(st.compression);
  /* metadata first: a layer is visible once its blob is, and a crash in
   * between leaves only metadata, which the next import rewrites */
  ret = write_layer_meta(s, &st, media_type, p, meta, err);
  if (ret < 0)
    goto fail;
  return dsec_blob_writer_commit(w, existed, err);

fail:
  dsec_blob_writer_abort(w);
  return -1;
}

int dsec_layer_import_fd(struct dsec_store *s, int fd,
                         const struct dsec_layer_expect *x,
                         const struct dsec_tar_policy *p, json_t **meta,
                         bool *cached, struct dsec_error **err)
{
  struct dsec_blob_writer *w = NULL;
  _cleanup_close_ int lock = -1;
  char buf[1 << 16];
  json_t *m;

  if (x && x->digest) {
    lock = dsec_store_lock(s, "blob", x->digest, err);
    if (lock < 0)
      return -1;
    m = dsec_layer_meta(s, x->digest);
    if (m) {
      const char *have = json_string_value(json_object_get(m, "diff_id"));
      if (x->diff_id && (!have || strcmp(have, x->diff_id) != 0)) {
        json_decref(m);
        return dsec_bad_input(err, "layer %s: its content (%s) is not the "
                                   "config's diff_id %s", x->digest,
                              have ? have : "?", x->diff_id);
      }
      if (cached)
        *cached = true;
      if (meta)
        *meta = m;
      else
        json_decref(m);
      return 0;
    }
  }
  if (fd < 0)
    return dsec_bad_input(err, "layer %s is missing", x && x->digest ? x->digest
                                                                    : "?");
  if (dsec_blob_writer_open(s, &w, err) < 0)
    return -1;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      dsec_blob_writer_abort(w);
      return dsec_fail(err, errno, "read failed");
    }
    if (n == 0)
      break;
    if (dsec_blob_writer_write(w, buf, (size_t) n, err) < 0) {
      dsec_blob_writer_abort(w);
      return -1;
    }
  }
  return dsec_layer_import_writer(s, w, x, p, meta, cached, err);
}

char *dsec_image_default_config(const char *const *diff_ids, size_t n)
{
  json_t *ids = json_array();
  json_t *cfg;
  char *text;

  for (size_t i = 0; i < n; i++)
    json_array_append_new(ids, json_string(diff_ids[i]));
  /* No "created": the same tarball gives the same image digest. */
  cfg = json_pack("{s:s, s:s, s:{s:[s], s:[s]}, s:{s:s, s:o}}",
                  "architecture", "amd64", "os", "linux", "config", "Env",
                  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                  "/sbin:/bin",
                  "Cmd", "/bin/sh", "rootfs", "type", "layers", "diff_ids",
                  ids);
  text = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(cfg);
  return text;
}

/* The part of an image config a backend uses, in dsec's own shape. */
static json_t *config_summary(json_t *cfg)
{
  json_t *c = json_object_get(cfg, "config");
  json_t *env = json_object();
  json_t *out;
  json_t *v;
  size_t i;

  json_array_foreach(json_object_get(c, "Env"), i, v)
  {
    const char *kv = json_string_value(v);
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (eq) {
      _cleanup_free_ char *k = xstrndup(kv, (size_t) (eq - kv));
      json_object_set_new(env, k, json_string(eq + 1));
    }
  }
  out = json_pack("{s:o}", "env", env);
  v = json_object_get(c, "Entrypoint");
  json_object_set_new(out, "entrypoint",
                      json_is_array(v) ? json_copy(v) : json_array());
  v = json_object_get(c, "Cmd");
  json_object_set_new(out, "cmd", json_is_array(v) ? json_copy(v) : json_array());
  v = json_object_get(c, "WorkingDir");
  json_object_set_new(out, "workdir",
                      json_string(json_is_string(v) && *json_string_value(v)
                                    ? json_string_value(v)
                                    : "/"));
  v = json_object_get(c, "User");
  json_object_set_new(out, "user",
                      json_string(json_is_string(v) ? json_string_value(v) : ""));
  v = json_object_get(c, "Labels");
  json_object_set_new(out, "labels",
                      json_is_object(v) ? json_copy(v) : json_object());
  return out;
}

static int check_diff_ids(struct dsec_store *s, json_t *cfg,
                          const struct dsec_manifest *m,
                          struct dsec_error **err)
{
  json_t *ids = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
  if (!json_is_array(ids) || json_array_size(ids) != m->n_layers)
    return dsec_bad_input(err, "config: rootfs.diff_ids does not list the "
                               "manifest's %zu layers", m->n_layers);
  for (size_t i = 0; i < m->n_layers; i++) {
    _cleanup_json_ json_t *meta = dsec_layer_meta(s, m->layers[i].digest);
    const char *want = json_string_value(json_array_get(ids, i));
    const char *have = json_string_value(json_object_get(meta, "diff_id"));
    if (!meta)
      return dsec_fail(err, ENOENT, "layer %s is not in the store",
                       m->layers[i].digest);
    if (!want || !have || strcmp(want, have) != 0)
      return dsec_bad_input(err, "layer %s: its content (%s) is not the "
                                 "config's diff_id %s",
                            m->layers[i].digest, have ? have : "?",
                            want ? want : "?");
  }
  return 0;
}

int dsec_image_commit(struct dsec_store *s, const char *manifest, size_t mlen,
                      const char *config, size_t clen, const char *source,
                      const char *const *names, json_t **record,
                      struct dsec_error **err)
{
  struct dsec_manifest m = { 0 };
  char mdigest[DSEC_DIGEST_LEN + 1];
  _cleanup_json_ json_t *cfg = NULL;
  _cleanup_json_ json_t *rec = NULL;
  _cleanup_free_ char *text = NULL;
  _cleanup_free_ char *file = NULL;
  _cleanup_free_ char *now = dsec_time_rfc3339();
  json_t *layers;
  const char *os, *arch;
  static const char *const kept[] = { "setuid_files", "setgid_files",
                                      "capability_files", "device_nodes" };
  json_int_t totals[4] = { 0 };
  int ret;

  ret = dsec_manifest_parse(manifest, mlen, NULL, "manifest", &m, err);
  if (ret < 0)
    return ret;
  cfg = dsec_json_parse(config, clen, "image config", err);
  if (!cfg || !json_is_object(cfg)) {
    ret = dsec_bad_input(err, "image config is not a JSON object");
    goto out;
  }
  ret = check_diff_ids(s, cfg, &m, err);
  if (ret < 0)
    goto out;
  ret = dsec_store_put_blob(s, config, clen, m.config.digest, NULL, NULL, err);
  if (ret < 0) {
    dsec_error_wrap(err, "image config");
    goto out;
  }
  ret = dsec_store_put_blob(s, manifest, mlen, NULL, mdigest, NULL, err);
  if (ret < 0)
    goto out;

  layers = json_array();
  for (size_t i = 0; i < m.n_layers; i++) {
    _cleanup_json_ json_t *meta = dsec_layer_meta(s, m.layers[i].digest);
    json_int_t dev = json_integer_value(json_object_get(meta, "device_nodes"));
    json_array_append_new(
      layers, json_pack("{s:s, s:I, s:s, s:O, s:I}", "digest",
                        m.layers[i].digest, "size",
                        (json_int_t) m.layers[i].size, "media_type",
                        m.layers[i].media_type, "diff_id",
                        json_object_get(meta, "diff_id"), "device_nodes",
                        dev));
    for (size_t k = 0; k < ARRAY_SIZE(kept); k++)
      totals[k] += json_integer_value(json_object_get(meta, kept[k]));
  }
  os = json_string_value(json_object_get(cfg, "os"));
  arch = json_string_value(json_object_get(cfg, "architecture"));
  {
    _cleanup_free_ char *plat =
      xasprintf("%s/%s", os ? os : "linux", arch ? arch : "amd64");
    rec = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:s}", "type", "image",
                    "digest", mdigest, "config_digest", m.config.digest,
                    "platform", plat, "layers", layers, "config",
                    config_summary(cfg), "created", now);
  }
  json_object_set_new(rec, "source", source ? json_string(source) : json_null());
  /* what the image holds that only its EROFS images keep (setuid,
   * setgid, capabilities), and the device nodes no sandbox gets */
  for (size_t k = 0; k < ARRAY_SIZE(kept); k++)
    json_object_set_new(rec, k == 3 ? "dropped_device_nodes" : kept[k],
                        json_integer(totals[k]));
  {
    /* an earlier import of the same image keeps its creation time */
    _cleanup_json_ json_t *old = dsec_image_record(s, mdigest, NULL);
    if (old && json_object_get(old, "created"))
      json_object_set(rec, "created", json_object_get(old, "created"));
  }
  text = json_dumps(rec, JSON_COMPACT);
  file = xasprintf("%s.json", dsec_digest_hex(mdigest));
  ret = dsec_write_file_atomic(s->images_fd, file, text, strlen(text), 0644,
                               err);
  if (ret < 0)
    goto out;

  for (const char *const *n = names; n && *n; n++) {
    _cleanup_free_ char *name = NULL;
    _cleanup_free_ char *version = NULL;
    ret = dsec_ref_split(*n, &name, &version, err);
    if (ret < 0)
      goto out;
    ret = dsec_ref_set(s, name, version, DSEC_KIND_IMAGE, mdigest, err);
    if (ret < 0)
      goto out;
  }
  if (source) {
    ret = dsec_source_set(s, source, mdigest, err);
    if (ret < 0)
      goto out;
  }
  if (record) {
    /* names are not stored in the record (refs are the truth); the
     * caller sees the one it asked for first */
    json_object_set_new(rec, "name",
                        names && names[0] ? json_string(names[0]) : json_null());
    *record = json_incref(rec);
  }
out:
  dsec_manifest_clear(&m);
  return ret;
}

