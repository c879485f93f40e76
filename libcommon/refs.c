#include <config.h>

#include "refs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"

#define REF_MAX 4096

const char *dsec_kind_name(enum dsec_kind k)
{
  switch (k) {
  case DSEC_KIND_IMAGE:
    return "image";
  case DSEC_KIND_LAYER:
    return "layer";
  default:
    return "none";
  }
}

static enum dsec_kind kind_from_name(const char *s)
{
  if (s && strcmp(s, "image") == 0)
    return DSEC_KIND_IMAGE;
  if (s && strcmp(s, "layer") == 0)
    return DSEC_KIND_LAYER;
  return DSEC_KIND_NONE;
}

static bool component_char(char c)
{
  return isalnum((unsigned char) c) || c == '.' || c == '_' || c == '-';
}

bool dsec_ref_name_valid(const char *name)
{
  const char *p = name;
  bool first = true;
  size_t len = strlen(name);

  if (len == 0 || len > 255)
    return false;
  for (;;) {
    const char *end = strchr(p, '/');
    size_t n = end ? (size_t) (end - p) : strlen(p);
    bool colon = false;

    if (n == 0 || p[0] == '.' || p[0] == '-')
      return false;
    for (size_t i = 0; i < n; i++) {
      /* host:port is allowed in the first of several components */
      if (p[i] == ':' && first && end && !colon && i > 0 && i + 1 < n) {
        colon = true;
        continue;
      }
      if (!component_char(p[i]))
        return false;
    }
    if (!end)
      return true;
    p = end + 1;
    first = false;
  }
}

bool dsec_ref_version_valid(const char *v)
{
  size_t n = strlen(v);
  if (n == 0 || n > 128 || !(isalnum((unsigned char) v[0]) || v[0] == '_'))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!component_char(v[i]))
      return false;
  return true;
}

int dsec_ref_split(const char *ref, char **name, char **version,
                   struct dsec_error **err)
{
  const char *at = strchr(ref, '@');
  const char *slash = strrchr(ref, '/');
  const char *colon = strrchr(ref, ':');
  _cleanup_free_ char *n = NULL;
  _cleanup_free_ char *v = NULL;

  if (at) {
    n = xstrndup(ref, (size_t) (at - ref));
    v = xstrdup(at + 1);
  } else if (colon && (!slash || colon > slash)) {
    n = xstrndup(ref, (size_t) (colon - ref));
    v = xstrdup(colon + 1);
  } else {
    n = xstrdup(ref);
    v = xstrdup("latest");
  }
  if (!dsec_ref_name_valid(n))
    return dsec_bad_input(err, "invalid name `%s`: use components of "
                               "letters, digits, '.', '_' and '-' "
                               "separated by '/'", n);
  if (!dsec_ref_version_valid(v))
    return dsec_bad_input(err, "invalid version `%s` in `%s`", v, ref);
  *name = steal_pointer(&n);
  *version = steal_pointer(&v);
  return 0;
}

void dsec_image_ref_clear(struct dsec_image_ref *r)
{
  free(r->registry);
  free(r->repository);
  free(r->tag);
  free(r->digest);
  memset(r, 0, sizeof *r);
}

int dsec_image_ref_parse(const char *s, struct dsec_image_ref *out,
                         struct dsec_error **err)
{
  struct dsec_image_ref r = { 0 };
  _cleanup_free_ char *rest = NULL;
  char *at, *slash, *colon, *name;

  if (!*s || strlen(s) > REF_MAX)
    return dsec_bad_input(err, "invalid image reference `%s`", s);
  rest = xstrdup(s);
  at = strchr(rest, '@');
  if (at) {
    *at = '\0';
    if (!dsec_digest_valid(at + 1))
      return dsec_bad_input(err, "invalid digest in `%s`", s);
    r.digest = xstrdup(at + 1);
  }
  slash = strrchr(rest, '/');
  colon = strrchr(rest, ':');
  if (colon && (!slash || colon > slash)) {
    *colon = '\0';
    r.tag = xstrdup(colon + 1);
    if (!dsec_ref_version_valid(r.tag)) {
      dsec_image_ref_clear(&r);
      return dsec_bad_input(err, "invalid tag in `%s`", s);
    }
  } else if (!r.digest)
    r.tag = xstrdup("latest");

  name = rest;
  slash = strchr(name, '/');
  if (slash && (memchr(name, '.', (size_t) (slash - name)) ||
                memchr(name, ':', (size_t) (slash - name)) ||
                strncmp(name, "localhost/", 10) == 0)) {
    r.registry = xstrndup(name, (size_t) (slash - name));
    name = slash + 1;
  } else
    r.registry = xstrdup("docker.io");
  if (strcmp(r.registry, "docker.io") == 0 && !strchr(name, '/'))
    r.repository = xasprintf("library/%s", name);
  else
    r.repository = xstrdup(name);

  for (const char *p = r.repository; *p; p++)
    if (isupper((unsigned char) *p)) {
      dsec_image_ref_clear(&r);
      return dsec_bad_input(err, "invalid repository in `%s`: must be "
                                 "lowercase", s);
    }
  {
    _cleanup_free_ char *full = dsec_image_ref_name(&r);
    if (!dsec_ref_name_valid(full) || strchr(r.registry, '/')) {
      dsec_image_ref_clear(&r);
      return dsec_bad_input(err, "invalid image reference `%s`", s);
    }
  }
  *out = r;
  return 0;
}

char *dsec_image_ref_name(const struct dsec_image_ref *r)
{
  return xasprintf("%s/%s", r->registry, r->repository);
}

static char *ref_path(const char *name, const char *version)
{
  return xasprintf("%s/%s", name, version);
}

int dsec_ref_set(struct dsec_store *s, const char *name, const char *version,
                 enum dsec_kind kind, const char *digest,
                 struct dsec_error **err)
{
  _cleanup_free_ char *path = ref_path(name, version);
  _cleanup_free_ char *now = dsec_time_rfc3339();
  _cleanup_free_ char *text = NULL;
  _cleanup_close_ int dfd = -1;
  json_t *rec;

  if (!dsec_ref_name_valid(name) || !dsec_ref_version_valid(version))
    return dsec_bad_input(err, "invalid name %s@%s", name, version);
  if (!dsec_digest_valid(digest))
    return dsec_bad_input(err, "invalid digest for %s@%s", name, version);
  dfd = dsec_open_dir_at(s->refs_fd, name, true, err);
  if (dfd < 0) {
    if (err && *err && ((*err)->errnum == ENOTDIR || (*err)->errnum == EEXIST))
      (*err)->status = DSEC_EXIT_INPUT;
    return dsec_error_wrap(err, "cannot tag %s@%s (a name cannot also be "
                                "the version of a shorter name)",
                           name, version);
  }
  rec = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "ref", "name",
                  name, "version", version, "kind", dsec_kind_name(kind),
                  "digest", digest, "created", now);
  text = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  if (dsec_write_file_atomic(dfd, version, text, strlen(text), 0644, err) < 0)
    return dsec_error_wrap(err, "cannot tag %s@%s", name, version);
  return 0;
}

static json_t *read_ref_at(int dirfd, const char *file, const char *what,
                           struct dsec_error **err)
{
  _cleanup_free_ char *buf = NULL;
  size_t len;
  json_t *j;
  const char *d;

  buf = dsec_read_file_at(dirfd, file, REF_MAX, &len, err);
  if (!buf)
    return NULL;
  j = dsec_json_parse(buf, len, what, err);
  if (!j)
    return NULL;
  if (dsec_json_get_string(j, "digest", true, what, &d, err) < 0 ||
      !dsec_digest_valid(d)) {
    json_decref(j);
    dsec_bad_input(err, "ref %s: invalid digest", what);
    return NULL;
  }
  return j;
}

int dsec_ref_get(struct dsec_store *s, const char *name, const char *version,
                 char digest[DSEC_DIGEST_LEN + 1], enum dsec_kind *kind,
                 struct dsec_error **err)
{
  _cleanup_free_ char *path = NULL;
  _cleanup_json_ json_t *j = NULL;
  struct stat st;

  if (!dsec_ref_name_valid(name) || !dsec_ref_version_valid(version))
    return 0;
  path = ref_path(name, version);
  if (fstatat(s->refs_fd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
      !S_ISREG(st.st_mode))
    return 0;
  j = read_ref_at(s->refs_fd, path, path, err);
  if (!j)
    return -1;
  strcpy(digest, json_string_value(json_object_get(j, "digest")));
  if (kind)
    *kind = kind_from_name(json_string_value(json_object_get(j, "kind")));
  return 1;
}

int dsec_ref_rm(struct dsec_store *s, const char *name, const char *version,
                struct dsec_error **err)
{
  _cleanup_free_ char *path = NULL;
  _cleanup_free_ char *dir = NULL;

  if (!dsec_ref_name_valid(name) || !dsec_ref_version_valid(version))
    return 0;
  path = ref_path(name, version);
  dir = xstrdup(name);
  if (unlinkat(s->refs_fd, path, 0) < 0) {
    if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR)
      return 0;
    return dsec_fail(err, errno, "cannot remove ref %s@%s", name, version);
  }
  /* Drop now-empty name directories, innermost first. */
  for (;;) {
    char *slash;
    if (unlinkat(s->refs_fd, dir, AT_REMOVEDIR) < 0)
      break;
    slash = strrchr(dir, '/');
    if (!slash)
      break;
    *slash = '\0';
  }
  dsec_fsync_dir(s->refs_fd, NULL);
  return 1;
}

static int list_walk(int dirfd, const char *prefix, json_t *out,
                     struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int fd = openat(dirfd, prefix ? prefix : ".",
                  O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

  if (fd < 0)
    return dsec_fail(err, errno, "cannot read refs");
  d = fdopendir(fd);
  if (!d) {
    close(fd);
    return dsec_fail(err, errno, "cannot read refs");
  }
  while ((de = readdir(d))) {
    _cleanup_free_ char *path = NULL;
    struct stat st;

    if (de->d_name[0] == '.' || strstr(de->d_name, ".tmp-"))
      continue;
    path = prefix ? xasprintf("%s/%s", prefix, de->d_name)
                  : xstrdup(de->d_name);
    if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      if (list_walk(dirfd, path, out, err) < 0)
        return -1;
    } else if (S_ISREG(st.st_mode)) {
      _cleanup_error_ struct dsec_error *e = NULL;
      json_t *j = read_ref_at(dirfd, path, path, &e);
      if (j)
        json_array_append_new(out, j);
    }
  }
  return 0;
}

static int ref_cmp(const void *a, const void *b)
{
  json_t *x = *(json_t *const *) a, *y = *(json_t *const *) b;
  const char *nx = json_string_value(json_object_get(x, "name"));
  const char *ny = json_string_value(json_object_get(y, "name"));
  int c = strcmp(nx ? nx : "", ny ? ny : "");
  if (c)
    return c;
  nx = json_string_value(json_object_get(x, "version"));
  ny = json_string_value(json_object_get(y, "version"));
  return strcmp(nx ? nx : "", ny ? ny : "");
}

json_t *dsec_ref_list(struct dsec_store *s, struct dsec_error **err)
{
  json_t *all = json_array();
  json_t *sorted;
  size_t n;
  json_t **v;

  if (list_walk(s->refs_fd, NULL, all, err) < 0) {
    json_decref(all);
    return NULL;
  }
  n = json_array_size(all);
  v = xmalloc(sizeof *v * (n ? n : 1));
  for (size_t i = 0; i < n; i++)
    v[i] = json_array_get(all, i);
  qsort(v, n, sizeof *v, ref_cmp);
  sorted = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append(sorted, v[i]);
  free(v);
  json_decref(all);
  return sorted;
}

static char *abs_nocheck(const char *path)
{
  char *r = realpath(path, NULL);
  char cwd[PATH_MAX];

  if (r)
    return r;
  if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
    return xstrdup(path);
  return xasprintf("%s/%s", cwd, path);
}

void dsec_oci_split(const char *spec, char **dir, char **tag)
{
  char *d = xstrdup(spec);
  char *colon = strrchr(d, ':');
  char *slash = strrchr(d, '/');
  struct stat st;

  *tag = NULL;
  /* DIR:TAG, unless DIR with its colon names an existing directory */
  if (colon && (!slash || colon > slash) && stat(d, &st) < 0) {
    *colon = '\0';
    *tag = xstrdup(colon + 1);
  }
  *dir = d;
}

char *dsec_source_canonical(const char *source, struct dsec_error **err)
{
  if (dsec_str_has_prefix(source, "oci:")) {
    _cleanup_free_ char *dir = NULL;
    _cleanup_free_ char *tag = NULL;
    _cleanup_free_ char *abs = NULL;
    dsec_oci_split(source + 4, &dir, &tag);
    abs = abs_nocheck(*dir ? dir : ".");
    return tag ? xasprintf("oci:%s:%s", abs, tag) : xasprintf("oci:%s", abs);
  }
  if (dsec_str_has_prefix(source, "tar:")) {
    _cleanup_free_ char *abs = abs_nocheck(source + 4);
    return xasprintf("tar:%s", abs);
  }
  if (dsec_str_has_prefix(source, "docker-archive:")) {
    _cleanup_free_ char *abs = abs_nocheck(source + 15);
    return xasprintf("docker-archive:%s", abs);
  }
  {
    struct dsec_image_ref r;
    char *out;
    if (dsec_image_ref_parse(source, &r, err) < 0)
      return NULL;
    if (r.digest)
      out = xasprintf("%s/%s@%s", r.registry, r.repository, r.digest);
    else
      out = xasprintf("%s/%s:%s", r.registry, r.repository, r.tag);
    dsec_image_ref_clear(&r);
    return out;
  }
}

int dsec_source_set(struct dsec_store *s, const char *canonical,
                    const char *digest, struct dsec_error **err)
{
  char key[DSEC_DIGEST_LEN + 1];
  _cleanup_free_ char *text = NULL;
  json_t *rec;

  dsec_sha256_buf(canonical, strlen(canonical), key);
  rec = json_pack("{s:s, s:s, s:s}", "type", "source", "source", canonical,
                  "digest", digest);
  text = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  return dsec_write_file_atomic(s->sources_fd, dsec_digest_hex(key), text,
                                strlen(text), 0644, err);
}

static int source_get(struct dsec_store *s, const char *canonical,
                      char digest[DSEC_DIGEST_LEN + 1])
{
  char key[DSEC_DIGEST_LEN + 1];
  _cleanup_error_ struct dsec_error *e = NULL;
  _cleanup_json_ json_t *j = NULL;

  dsec_sha256_buf(canonical, strlen(canonical), key);
  if (faccessat(s->sources_fd, dsec_digest_hex(key), F_OK, 0) < 0)
    return 0;
  j = read_ref_at(s->sources_fd, dsec_digest_hex(key), canonical, &e);
  if (!j)
    return 0;
  strcpy(digest, json_string_value(json_object_get(j, "digest")));
  return 1;
}

enum dsec_kind dsec_store_kind(struct dsec_store *s, const char *digest)
{
  _cleanup_free_ char *img = NULL;
  _cleanup_free_ char *lay = NULL;

  if (!dsec_digest_valid(digest))
    return DSEC_KIND_NONE;
  img = xasprintf("%s.json", dsec_digest_hex(digest));
  if (faccessat(s->images_fd, img, F_OK, 0) == 0)
    return DSEC_KIND_IMAGE;
  lay = xasprintf("%s/meta.json", dsec_digest_hex(digest));
  if (faccessat(s->layers_fd, lay, F_OK, 0) == 0)
    return DSEC_KIND_LAYER;
  return DSEC_KIND_NONE;
}

/* A unique object whose digest starts with hex (12 or more digits). */
static int resolve_prefix(struct dsec_store *s, const char *hex,
                          char digest[DSEC_DIGEST_LEN + 1],
                          struct dsec_error **err)
{
  int dirs[] = { s->images_fd, s->layers_fd };
  size_t n = strlen(hex);
  int found = 0;

  for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
    int fd = openat(dirs[i], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_closedir_ DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;

    if (!d) {
      if (fd >= 0)
        close(fd);
      continue;
    }
    while ((de = readdir(d))) {
      char cand[DSEC_DIGEST_LEN + 1];
      if (strncmp(de->d_name, hex, n) != 0 ||
          strlen(de->d_name) < DSEC_SHA256_HEX_LEN)
        continue;
      snprintf(cand, sizeof cand, "sha256:%.64s", de->d_name);
      if (!dsec_digest_valid(cand))
        continue;
      if (found && strcmp(cand, digest) != 0)
        return dsec_bad_input(err, "`%s` is ambiguous", hex);
      strcpy(digest, cand);
      found = 1;
    }
  }
  return found;
}

int dsec_store_resolve(struct dsec_store *s, const char *ref,
                       char digest[DSEC_DIGEST_LEN + 1], enum dsec_kind *kind,
                       struct dsec_error **err)
{
  char d[DSEC_DIGEST_LEN + 1];
  enum dsec_kind k = DSEC_KIND_NONE;
  int found = 0;
  size_t len = strlen(ref);

  if (len == 0 || len > REF_MAX)
    return dsec_bad_input(err, "invalid reference `%s`", ref);

  if (dsec_str_has_prefix(ref, "sha256:")) {
    if (!dsec_digest_valid(ref))
      return dsec_bad_input(err, "invalid digest `%s`", ref);
    strcpy(d, ref);
    found = dsec_store_kind(s, d) != DSEC_KIND_NONE;
  } else if (strchr(ref, '@') && dsec_digest_valid(strchr(ref, '@') + 1)) {
    strcpy(d, strchr(ref, '@') + 1);
    found = dsec_store_kind(s, d) != DSEC_KIND_NONE;
  } else if (dsec_str_has_prefix(ref, "oci:") ||
             dsec_str_has_prefix(ref, "tar:") ||
             dsec_str_has_prefix(ref, "docker-archive:")) {
    _cleanup_free_ char *c = dsec_source_canonical(ref, err);
    if (!c)
      return -1;
    found = source_get(s, c, d);
  } else {
    _cleanup_free_ char *name = NULL;
    _cleanup_free_ char *version = NULL;
    _cleanup_error_ struct dsec_error *e = NULL;

    if (len >= 12 && len <= DSEC_SHA256_HEX_LEN &&
        strspn(ref, "0123456789abcdef") == len) {
      found = resolve_prefix(s, ref, d, err);
      if (found < 0)
        return -1;
    }
    if (!found && dsec_ref_split(ref, &name, &version, &e) == 0) {
      found = dsec_ref_get(s, name, version, d, &k, err);
      if (found < 0)
        return -1;
    }
    if (!found) {
      /* a registry reference, as pulled: docker.io/library/busybox:latest */
      _cleanup_free_ char *c = NULL;
      _cleanup_error_ struct dsec_error *e2 = NULL;
      c = dsec_source_canonical(ref, &e2);
      if (c)
        found = source_get(s, c, d);
    }
  }
  if (!found)
    return dsec_bad_input(err, "no image or layer `%s` in the store", ref);
  if (k == DSEC_KIND_NONE)
    k = dsec_store_kind(s, d);
  if (k == DSEC_KIND_NONE)
    return dsec_bad_input(err, "`%s` names %s, which is not in the store",
                          ref, d);
  memcpy(digest, d, sizeof d);
  if (kind)
    *kind = k;
  return 0;
}
