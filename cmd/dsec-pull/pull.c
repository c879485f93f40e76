#include <config.h>

#include "pull.h"

#include <archive.h>
#include <archive_entry.h>
#include "archive-lazy.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"
#include "layer.h"
#include "log.h"
#include "registry.h"

/* A descriptor as the image manifest lists it. */
static json_t *descriptor_json(const char *mt, const char *digest,
                               uint64_t size)
{
  return json_pack("{s:s, s:s, s:I}", "mediaType", mt, "digest", digest,
                   "size", (json_int_t) size);
}

/* An OCI manifest for layers already in the store (their metadata gives
 * digest, size and media type) and a config blob. */
static char *build_manifest(struct dsec_store *s, const char *config_mt,
                            const char *config, char *const *layers, size_t n)
{
  char cd[DSEC_DIGEST_LEN + 1];
  json_t *ls = json_array();
  json_t *m;
  char *text;

  dsec_sha256_buf(config, strlen(config), cd);
  for (size_t i = 0; i < n; i++) {
    _cleanup_json_ json_t *meta = dsec_layer_meta(s, layers[i]);
    json_array_append_new(
      ls, descriptor_json(json_string_value(json_object_get(meta, "media_type")),
                          layers[i],
                          (uint64_t) json_integer_value(
                            json_object_get(meta, "size"))));
  }
  m = json_pack("{s:i, s:s, s:o, s:o}", "schemaVersion", 2, "mediaType",
                DSEC_MT_OCI_MANIFEST, "config",
                descriptor_json(config_mt, cd, strlen(config)), "layers", ls);
  text = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(m);
  return text;
}

/* Names an image gets: the one the source implies and --name. */
struct names {
  const char *v[3];
  size_t n;
};

static void names_add(struct names *ns, const char *name)
{
  if (name && ns->n < ARRAY_SIZE(ns->v) - 1)
    ns->v[ns->n++] = name;
  ns->v[ns->n] = NULL;
}

static void mark_cached(json_t *record, const bool *cached, size_t n)
{
  json_t *layers = json_object_get(record, "layers");
  for (size_t i = 0; i < n && i < json_array_size(layers); i++)
    json_object_set_new(json_array_get(layers, i), "cached",
                        json_boolean(cached[i]));
}

/* The diff_id the config gives layer i, or NULL. */
static const char *config_diff_id(json_t *cfg, size_t i)
{
  return json_string_value(json_array_get(
    json_object_get(json_object_get(cfg, "rootfs"), "diff_ids"), i));
}

/* Imports one layer of a local source, checked against its descriptor
 * and the config's diff_id before it becomes visible. */
static int import_layer_fd(struct dsec_store *s, int fd,
                           const struct dsec_descriptor *d, const char *diff_id,
                           const struct dsec_tar_policy *p, bool *cached,
                           struct dsec_error **err)
{
  const struct dsec_layer_expect x = { d->digest, (int64_t) d->size, diff_id,
                                       d->media_type };
  return dsec_layer_import_fd(s, fd, &x, p, NULL, cached, err);
}

static int pull_tar(struct dsec_store *s, const char *path,
                    const struct dsec_pull_opts *o, const char *canonical,
                    struct names *ns, json_t **record, struct dsec_error **err)
{
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  _cleanup_json_ json_t *meta = NULL;
  _cleanup_free_ char *config = NULL;
  _cleanup_free_ char *manifest = NULL;
  char digest[DSEC_DIGEST_LEN + 1];
  const char *diff_id;
  char *layers[1] = { digest };
  bool cached = false;

  if (fd < 0)
    return dsec_error_set(err, errno == ENOENT ? DSEC_EXIT_INPUT
                                               : DSEC_EXIT_FAILURE,
                          errno, "cannot open %s", path);
  if (dsec_layer_import_fd(s, fd, NULL, &o->policy, &meta, &cached, err) < 0)
    return dsec_error_wrap(err, "%s", path);
  snprintf(digest, sizeof digest, "%s",
           json_string_value(json_object_get(meta, "digest")));
  diff_id = json_string_value(json_object_get(meta, "diff_id"));
  config = dsec_image_default_config(&diff_id, 1);
  manifest = build_manifest(s, DSEC_MT_OCI_CONFIG, config, layers, 1);
  if (dsec_image_commit(s, manifest, strlen(manifest), config, strlen(config),
                        canonical, ns->v, record, err) < 0)
    return -1;
  mark_cached(*record, &cached, 1);
  return 0;
}

/* Reads blobs/<alg>/<hex> of an OCI layout, bounded and verified. */
static char *layout_read_blob(int dfd, const char *digest, size_t max,
                              size_t *len, struct dsec_error **err)
{
  _cleanup_free_ char *path = NULL;
  char got[DSEC_DIGEST_LEN + 1];
  char *buf;

  if (!dsec_digest_valid(digest)) {
    dsec_bad_input(err, "unsupported digest `%s`", digest);
    return NULL;
  }
  path = xasprintf("blobs/sha256/%s", dsec_digest_hex(digest));
  buf = dsec_read_file_at(dfd, path, max, len, err);
  if (!buf)
    return NULL;
  dsec_sha256_buf(buf, *len, got);
  if (strcmp(got, digest) != 0) {
    free(buf);
    dsec_bad_input(err, "blob %s does not match its digest (content is %s)",
                   digest, got);
    return NULL;
  }
  return buf;
}

/* The manifest of an index.json entry chosen by tag (or the only one). */
static int layout_pick(int dfd, const char *tag, const char *platform,
                       struct dsec_descriptor *out, struct dsec_error **err)
{
  _cleanup_free_ char *idx = NULL;
  _cleanup_json_ json_t *j = NULL;
  json_t *ms, *m, *chosen = NULL;
  size_t len, i;

  idx = dsec_read_file_at(dfd, "index.json", DSEC_MANIFEST_MAX, &len, err);
  if (!idx)
    return -1;
  j = dsec_json_parse(idx, len, "index.json", err);
  if (!j)
    return -1;
  if (!json_is_object(j) ||
      dsec_json_get_array(j, "manifests", true, "index.json", &ms, err) < 0)
    return dsec_bad_input(err, "index.json: no `manifests` array");
  json_array_foreach(ms, i, m)
  {
    const char *name = json_string_value(json_object_get(
      json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
    if (tag ? (name && strcmp(name, tag) == 0) : true) {
      if (chosen && !tag)
        return dsec_bad_input(err, "the layout holds several images: name "
                                   "one with oci:DIR:TAG");
      chosen = m;
      if (tag)
        break;
    }
  }
  if (!chosen)
    return tag ? dsec_bad_input(err, "no image tagged `%s` in the layout", tag)
               : dsec_bad_input(err, "the layout holds no image");
  {
    const char *mt = json_string_value(json_object_get(chosen, "mediaType"));
    const char *digest = json_string_value(json_object_get(chosen, "digest"));
    if (!digest || !dsec_digest_valid(digest))
      return dsec_bad_input(err, "index.json: invalid digest");
    if (dsec_media_type_is_index(mt)) {
      _cleanup_free_ char *sub = layout_read_blob(dfd, digest,
                                                  DSEC_MANIFEST_MAX, &len, err);
      if (!sub)
        return -1;
      return dsec_index_pick(sub, len, platform, digest, out, err);
    }
    out->media_type = xstrdup(mt ? mt : DSEC_MT_OCI_MANIFEST);
    strcpy(out->digest, digest);
  }
  return 0;
}

static int pull_oci(struct dsec_store *s, const char *dir, const char *tag,
                    const struct dsec_pull_opts *o, const char *canonical,
                    struct names *ns, json_t **record, struct dsec_error **err)
{
  _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_free_ char *manifest = NULL;
  _cleanup_free_ char *config = NULL;
  _cleanup_free_ bool *cached = NULL;
  _cleanup_json_ json_t *cfg = NULL;
  struct dsec_descriptor pick = { 0 };
  struct dsec_manifest m = { 0 };
  size_t mlen, clen;
  int ret = -1;

  if (dfd < 0)
    return dsec_error_set(err, errno == ENOENT || errno == ENOTDIR
                                 ? DSEC_EXIT_INPUT
                                 : DSEC_EXIT_FAILURE,
                          errno, "cannot open OCI layout %s", dir);
  {
    _cleanup_free_ char *lay = NULL;
    _cleanup_json_ json_t *lj = NULL;
    size_t len;
    lay = dsec_read_file_at(dfd, "oci-layout", 4096, &len, err);
    if (!lay)
      return dsec_error_wrap(err, "%s is not an OCI image layout", dir);
    lj = dsec_json_parse(lay, len, "oci-layout", err);
    if (!lj || !json_is_string(json_object_get(lj, "imageLayoutVersion")))
      return dsec_bad_input(err, "%s/oci-layout: no imageLayoutVersion", dir);
  }
  if (layout_pick(dfd, tag, o->platform, &pick, err) < 0)
    goto out;
  manifest = layout_read_blob(dfd, pick.digest, DSEC_MANIFEST_MAX, &mlen, err);
  if (!manifest ||
      dsec_manifest_parse(manifest, mlen, pick.media_type, pick.digest, &m,
                          err) < 0)
    goto out;
  config = layout_read_blob(dfd, m.config.digest, DSEC_CONFIG_MAX, &clen, err);
  if (!config)
    goto out;
  cfg = dsec_json_parse(config, clen, "image config", err);
  if (!cfg)
    goto out;
  cached = xzalloc(sizeof *cached * (m.n_layers + 1));
  for (size_t i = 0; i < m.n_layers; i++) {
    _cleanup_free_ char *path =
      xasprintf("blobs/sha256/%s", dsec_digest_hex(m.layers[i].digest));
    _cleanup_close_ int lfd = openat(dfd, path, O_RDONLY | O_CLOEXEC);
    _cleanup_json_ json_t *have = dsec_layer_meta(s, m.layers[i].digest);
    if (lfd < 0 && !have) {
      dsec_error_set(err, errno == ENOENT ? DSEC_EXIT_INPUT : DSEC_EXIT_FAILURE,
                     errno, "layer %s missing from the layout",
                     m.layers[i].digest);
      goto out;
    }
    if (import_layer_fd(s, lfd, &m.layers[i], config_diff_id(cfg, i),
                        &o->policy, &cached[i], err) < 0)
      goto out;
  }
  if (dsec_image_commit(s, manifest, mlen, config, clen, canonical, ns->v,
                        record, err) < 0)
    goto out;
  mark_cached(*record, cached, m.n_layers);
  ret = 0;
out:
  free(pick.media_type);
  dsec_manifest_clear(&m);
  return ret;
}

/* docker save / podman save: manifest.json names the config and the layer
 * files inside the archive. */
static struct archive *docker_archive_open(const char *file,
                                           struct dsec_error **err)
{
  struct archive *a = archive_read_new();
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_zstd(a);
  archive_read_support_filter_xz(a);
  archive_read_support_format_tar(a);
  if (archive_read_open_filename(a, file, 1 << 16) != ARCHIVE_OK) {
    dsec_error_set(err, errno == ENOENT ? DSEC_EXIT_INPUT : DSEC_EXIT_INPUT,
                   archive_errno(a), "cannot read %s: %s", file,
                   archive_error_string(a));
    archive_read_free(a);
    return NULL;
  }
  return a;
}

static char *archive_slurp(struct archive *a, size_t max, size_t *len,
                           struct dsec_error **err)
{
  size_t cap = 4096, n = 0;
  char *buf = xmalloc(cap + 1);
  for (;;) {
    la_ssize_t r;
    if (n == cap) {
      if (cap > max) {
        free(buf);
        dsec_bad_input(err, "member larger than %zu bytes", max);
        return NULL;
      }
      cap *= 2;
      buf = xrealloc(buf, cap + 1);
    }
    r = archive_read_data(a, buf + n, cap - n);
    if (r < 0) {
      free(buf);
      dsec_bad_input(err, "%s", archive_error_string(a));
      return NULL;
    }
    if (r == 0)
      break;
    n += (size_t) r;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

static const char *clean_member(const char *p)
{
  while (p[0] == '.' && p[1] == '/')
    p += 2;
  return p;
}

/* Reads the member named `name` (at most max bytes) in one pass over the
 * archive; NULL with *err unset when there is none. */
static char *archive_find(const char *file, const char *name, size_t max,
                          size_t *len, struct dsec_error **err)
{
  struct archive *a = docker_archive_open(file, err);
  struct archive_entry *e;
  char *buf = NULL;

  if (!a)
    return NULL;
  for (;;) {
    int r = archive_read_next_header(a, &e);
    if (r == ARCHIVE_EOF)
      break;
    if (r < ARCHIVE_WARN) {
      dsec_bad_input(err, "%s: %s", file, archive_error_string(a));
      break;
    }
    if (strcmp(clean_member(archive_entry_pathname(e)), clean_member(name)) == 0) {
      buf = archive_slurp(a, max, len, err);
      break;
    }
  }
  archive_read_free(a);
  return buf;
}

static int pull_docker_archive(struct dsec_store *s, const char *file,
                               const struct dsec_pull_opts *o,
                               const char *canonical, struct names *ns,
                               json_t **record, struct dsec_error **err)
{
  struct archive *a = NULL;
  struct archive_entry *e;
  _cleanup_json_ json_t *mj = NULL;
  _cleanup_json_ json_t *cfg = NULL;
  _cleanup_free_ char *config = NULL;
  _cleanup_free_ char *manifest = NULL;
  _cleanup_free_ char **digests = NULL;
  _cleanup_free_ bool *cached = NULL;
  const char *config_path;
  json_t *layer_paths, *first;
  size_t n = 0, clen = 0, len;
  int ret = -1;

  /* pass 1: manifest.json; pass 2: the config; pass 3: the layers, each
   * checked against the config's diff_ids before it is stored */
  {
    _cleanup_free_ char *buf = archive_find(file, "manifest.json",
                                            DSEC_MANIFEST_MAX, &len, err);
    if (!buf)
      return err && *err ? -1
                         : dsec_bad_input(err, "%s: no manifest.json (not a "
                                               "docker save archive)", file);
    mj = dsec_json_parse(buf, len, "manifest.json", err);
    if (!mj)
      return -1;
  }
  first = json_array_get(mj, 0);
  if (!json_is_array(mj) || !first ||
      dsec_json_get_string(first, "Config", true, "manifest.json",
                           &config_path, err) < 0 ||
      dsec_json_get_array(first, "Layers", true, "manifest.json",
                          &layer_paths, err) < 0)
    return dsec_bad_input(err, "%s: manifest.json lacks Config or Layers",
                          file);
  config = archive_find(file, config_path, DSEC_CONFIG_MAX, &clen, err);
  if (!config)
    return err && *err ? -1
                       : dsec_bad_input(err, "%s: config %s missing from the "
                                             "archive", file, config_path);
  cfg = dsec_json_parse(config, clen, "image config", err);
  if (!cfg)
    return -1;
  n = json_array_size(layer_paths);
  digests = xzalloc(sizeof *digests * (n + 1));
  cached = xzalloc(sizeof *cached * (n + 1));

  a = docker_archive_open(file, err);
  if (!a)
    return -1;
  for (;;) {
    const char *path;
    int r = archive_read_next_header(a, &e);
    if (r == ARCHIVE_EOF)
      break;
    if (r < ARCHIVE_WARN) {
      dsec_bad_input(err, "%s: %s", file, archive_error_string(a));
      goto out;
    }
    path = clean_member(archive_entry_pathname(e));
    for (size_t i = 0; i < n; i++) {
      const char *lp = json_string_value(json_array_get(layer_paths, i));
      struct dsec_blob_writer *w = NULL;
      _cleanup_json_ json_t *meta = NULL;
      struct dsec_layer_expect x = { NULL, -1, config_diff_id(cfg, i), NULL };
      char buf[1 << 16];
      la_ssize_t got;

      if (!lp || digests[i] || strcmp(clean_member(lp), path) != 0)
        continue;
      if (dsec_blob_writer_open(s, &w, err) < 0)
        goto out;
      while ((got = archive_read_data(a, buf, sizeof buf)) > 0)
        if (dsec_blob_writer_write(w, buf, (size_t) got, err) < 0)
          break;
      if (got < 0 || (err && *err)) {
        if (got < 0)
          dsec_bad_input(err, "%s: %s", path, archive_error_string(a));
        dsec_blob_writer_abort(w);
        goto out;
      }
      if (dsec_layer_import_writer(s, w, &x, &o->policy, &meta, &cached[i],
                                   err) < 0) {
        dsec_error_wrap(err, "%s", path);
        goto out;
      }
      digests[i] = xstrdup(json_string_value(json_object_get(meta, "digest")));
      /* the same file may be listed twice */
      for (size_t k = i + 1; k < n; k++)
        if (strcmp(clean_member(json_string_value(
                     json_array_get(layer_paths, k))), path) == 0) {
          digests[k] = xstrdup(digests[i]);
          cached[k] = true;
        }
      break;
    }
  }
  for (size_t i = 0; i < n; i++)
    if (!digests[i]) {
      dsec_bad_input(err, "%s: layer %s missing from the archive", file,
                     json_string_value(json_array_get(layer_paths, i)));
      goto out;
    }
  manifest = build_manifest(s, DSEC_MT_OCI_CONFIG, config, digests, n);
  {
    /* the archive's RepoTags name the image too */
    json_t *tags = json_object_get(first, "RepoTags");
    const char *tag = json_string_value(json_array_get(tags, 0));
    _cleanup_free_ char *nm = NULL;
    _cleanup_free_ char *ver = NULL;
    _cleanup_error_ struct dsec_error *e2 = NULL;
    if (tag && dsec_ref_split(tag, &nm, &ver, &e2) == 0)
      names_add(ns, tag);
    if (dsec_image_commit(s, manifest, strlen(manifest), config, clen,
                          canonical, ns->v, record, err) < 0)
      goto out;
  }
  mark_cached(*record, cached, n);
  ret = 0;
out:
  for (size_t i = 0; i < n; i++)
    free(digests[i]);
  if (a)
    archive_read_free(a);
  return ret;
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *) a, *(char *const *) b);
}

static int pull_registry(struct dsec_store *s, const char *source,
                         const struct dsec_pull_opts *o, const char *canonical,
                         struct names *ns, json_t **record,
                         struct dsec_error **err)
{
  struct dsec_image_ref ref = { 0 };
  struct dsec_registry *reg = NULL;
  struct dsec_manifest m = { 0 };
  _cleanup_free_ char *body = NULL;
  _cleanup_free_ char *mt = NULL;
  _cleanup_free_ char *config = NULL;
  _cleanup_free_ char *tagname = NULL;
  _cleanup_free_ bool *cached = NULL;
  _cleanup_free_ struct dsec_fetch *fetch = NULL;
  _cleanup_free_ int *locks = NULL;
  _cleanup_free_ char **order = NULL;
  _cleanup_json_ json_t *cfg = NULL;
  size_t len, clen, nfetch = 0, nlocks = 0;
  char got[DSEC_DIGEST_LEN + 1];
  int ret = -1;

  if (dsec_image_ref_parse(source, &ref, err) < 0)
    return -1;
  if (dsec_registry_open(&ref, o->insecure, &reg, err) < 0)
    goto out;
  if (dsec_registry_get_manifest(reg, ref.digest ? ref.digest : ref.tag, &body,
                                 &len, &mt, err) < 0)
    goto out;
  dsec_sha256_buf(body, len, got);
  if (ref.digest && strcmp(got, ref.digest) != 0) {
    dsec_bad_input(err, "manifest %s: the registry served content hashing to "
                        "%s", ref.digest, got);
    goto out;
  }
  if (dsec_media_type_is_index(mt) ||
      (!mt || !*mt || strcmp(mt, "application/json") == 0)) {
    /* an index, or a body whose type only its mediaType field tells */
    _cleanup_json_ json_t *j = json_loadb(body, len, 0, NULL);
    const char *inner = json_string_value(json_object_get(j, "mediaType"));
    if (dsec_media_type_is_index(mt) || dsec_media_type_is_index(inner) ||
        json_is_array(json_object_get(j, "manifests"))) {
      struct dsec_descriptor pick = { 0 };
      if (dsec_index_pick(body, len, o->platform, source, &pick, err) < 0)
        goto out;
      free(body);
      free(mt);
      body = mt = NULL;
      ret = dsec_registry_get_manifest(reg, pick.digest, &body, &len, &mt, err);
      if (ret == 0) {
        dsec_sha256_buf(body, len, got);
        if (strcmp(got, pick.digest) != 0)
          ret = dsec_bad_input(err, "manifest %s: the registry served content "
                                    "hashing to %s", pick.digest, got);
      }
      free(pick.media_type);
      if (ret < 0)
        goto out;
      ret = -1;
    }
  }
  if (dsec_manifest_parse(body, len, mt, source, &m, err) < 0)
    goto out;

  /* Lock the blobs this pull makes, in one global order so that two pulls
   * sharing layers cannot deadlock; a second pull of the same image waits
   * here and then finds every layer cached. */
  order = xzalloc(sizeof *order * (m.n_layers + 1));
  for (size_t i = 0; i < m.n_layers; i++)
    order[i] = m.layers[i].digest;
  qsort(order, m.n_layers, sizeof *order, cmp_str);
  locks = xmalloc(sizeof *locks * (m.n_layers + 1));
  for (size_t i = 0; i < m.n_layers; i++) {
    if (i > 0 && strcmp(order[i], order[i - 1]) == 0)
      continue;
    locks[nlocks] = dsec_store_lock(s, "blob", order[i], err);
    if (locks[nlocks] < 0)
      goto out;
    nlocks++;
  }

  /* the config first: its diff_ids check each layer before it is stored */
  fetch = xzalloc(sizeof *fetch * (m.n_layers + 1));
  fetch[0].digest = m.config.digest;
  fetch[0].size = m.config.size;
  if (dsec_blob_writer_open(s, &fetch[0].writer, err) < 0)
    goto out;
  dsec_blob_writer_set_limit(fetch[0].writer, m.config.size);
  if (dsec_registry_fetch_blobs(reg, fetch, 1, 1, err) < 0)
    goto out;
  {
    struct dsec_blob_writer *w = steal_pointer(&fetch[0].writer);
    _cleanup_close_ int cfd = -1;
    if (dsec_blob_writer_finish(w, m.config.digest, NULL, err) < 0 ||
        (cfd = dsec_blob_writer_fd(w, err)) < 0) {
      dsec_blob_writer_abort(w);
      dsec_error_wrap(err, "config %s", m.config.digest);
      goto out;
    }
    config = dsec_read_fd(cfd, DSEC_CONFIG_MAX, &clen, err);
    dsec_blob_writer_abort(w); /* dsec_image_commit stores it */
    if (!config || !(cfg = dsec_json_parse(config, clen, "image config", err)))
      goto out;
  }

  /* then every layer not in the store yet, in parallel */
  cached = xzalloc(sizeof *cached * (m.n_layers + 1));
  for (size_t i = 0; i < m.n_layers; i++) {
    _cleanup_json_ json_t *meta = dsec_layer_meta(s, m.layers[i].digest);
    bool dup = false;
    for (size_t k = 0; k < nfetch; k++)
      dup |= strcmp(fetch[k].digest, m.layers[i].digest) == 0;
    cached[i] = meta != NULL;
    if (meta || dup)
      continue;
    fetch[nfetch].digest = m.layers[i].digest;
    fetch[nfetch].size = m.layers[i].size;
    if (dsec_blob_writer_open(s, &fetch[nfetch].writer, err) < 0)
      goto out;
    dsec_blob_writer_set_limit(fetch[nfetch].writer, m.layers[i].size);
    nfetch++;
  }
  if (nfetch > 0 &&
      dsec_registry_fetch_blobs(reg, fetch, nfetch,
                                o->parallel ? o->parallel : 4, err) < 0)
    goto out;
  for (size_t i = 0; i < nfetch; i++) {
    struct dsec_blob_writer *w = steal_pointer(&fetch[i].writer);
    struct dsec_layer_expect x = { fetch[i].digest, (int64_t) fetch[i].size,
                                   NULL, NULL };
    for (size_t k = 0; k < m.n_layers; k++)
      if (strcmp(m.layers[k].digest, fetch[i].digest) == 0) {
        x.media_type = m.layers[k].media_type;
        x.diff_id = config_diff_id(cfg, k);
        break;
      }
    if (dsec_layer_import_writer(s, w, &x, &o->policy, NULL, NULL, err) < 0)
      goto out;
  }

  tagname = ref.tag ? xasprintf("%s/%s:%s", ref.registry, ref.repository,
                                ref.tag)
                    : NULL;
  if (tagname) {
    /* the tagged name goes first */
    ns->v[2] = NULL;
    if (ns->n == 1)
      ns->v[1] = ns->v[0];
    ns->v[0] = tagname;
    ns->n++;
    ns->v[ns->n] = NULL;
  }
  if (dsec_image_commit(s, body, len, config, clen, canonical, ns->v, record,
                        err) < 0)
    goto out;
  mark_cached(*record, cached, m.n_layers);
  ret = 0;
out:
  for (size_t i = 0; fetch && i < nfetch; i++) {
    dsec_blob_writer_abort(fetch[i].writer);
    dsec_error_free(fetch[i].err);
  }
  for (size_t i = 0; i < nlocks; i++)
    close(locks[i]);
  dsec_manifest_clear(&m);
  dsec_registry_free(reg);
  dsec_image_ref_clear(&ref);
  return ret;
}

/* Each layer becomes an EROFS image once per store, here rather than at
 * the first sandbox's start (containers and fncall sandboxes mount them,
 * VMs attach them).  A layer that cannot be converted is said, not an
 * error: dsec-run tries again, or runs it as a directory.  Each layer of
 * the record gets "erofs": whether the store has its image now. */
static void to_erofs(struct dsec_store *s, json_t *record)
{
  const char *force = getenv("DSEC_LAYER_FORMAT");
  json_t *l;
  size_t i;

  if (force && strcmp(force, "dir") == 0)
    return;
  json_array_foreach(json_object_get(record, "layers"), i, l)
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_free_ char *path = NULL;
    const char *d = json_string_value(json_object_get(l, "digest"));
    bool made = false;
    if (dsec_layer_materialise(s, d, DSEC_FORMAT_EROFS, &path, &made, &e) < 0)
      dsec_warn("layer %s stays without an EROFS image: %s", d, e->msg);
    json_object_set_new(l, "erofs", json_boolean(path != NULL));
  }
}

int dsec_pull(struct dsec_store *s, const char *source,
              const struct dsec_pull_opts *o, json_t **record,
              struct dsec_error **err)
{
  _cleanup_free_ char *canonical = NULL;
  _cleanup_free_ char *name = NULL;
  _cleanup_free_ char *version = NULL;
  _cleanup_close_ int gc = -1;
  struct names ns = { { NULL }, 0 };
  int ret;

  if (o->name) {
    if (dsec_ref_split(o->name, &name, &version, err) < 0)
      return dsec_error_wrap(err, "--name");
    names_add(&ns, o->name);
  }
  canonical = dsec_source_canonical(source, err);
  if (!canonical)
    return -1;
  /* Writers hold the store's gc lock shared: a collector never removes
   * blobs between their import and the refs that keep them. */
  gc = dsec_store_lock_gc(s, false, err);
  if (gc < 0)
    return -1;

  if (dsec_str_has_prefix(source, "tar:"))
    ret = pull_tar(s, source + 4, o, canonical, &ns, record, err);
  else if (dsec_str_has_prefix(source, "docker-archive:"))
    ret = pull_docker_archive(s, source + 15, o, canonical, &ns, record, err);
  else if (dsec_str_has_prefix(source, "oci:")) {
    _cleanup_free_ char *dir = NULL;
    _cleanup_free_ char *tag = NULL;
    dsec_oci_split(source + 4, &dir, &tag);
    ret = pull_oci(s, dir, tag, o, canonical, &ns, record, err);
  } else
    ret = pull_registry(s, source, o, canonical, &ns, record, err);
  if (ret < 0)
    return ret;
  json_object_set_new(*record, "source", json_string(canonical));
  to_erofs(s, *record);
  return 0;
}
