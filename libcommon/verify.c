#include <config.h>

#include "verify.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"
#include "image.h"
#include "layer.h"
#include "lock.h"

/* A directory in store/tmp younger than this may be a tree being made
 * (they carry no lock); with repair the gc lock keeps every maker out. */
#define TMP_DIR_STALE_S 60
#define EROFS_SUPER_OFFSET 1024
#define EROFS_SUPER_MAGIC 0xE0F5E1E2u
/* see ROOTFS_MARKERS in layer.c: written once rootfs/ is complete */
#define ROOTFS_DONE "rootfs.opaque-user"
#define TRASH_PREFIX ".trash-"

struct verify {
  struct dsec_store *s;
  const struct dsec_verify_opts *o;
  dsec_verify_emit_fn emit;
  void *ud;
  struct dsec_verify_counts *c;
  json_t *bad;       /* blobs found corrupt or missing: digest -> true */
  json_t *layers_ok; /* digest -> true */
  json_t *images_ok; /* digest -> true */
  json_t *reported;  /* digests with a finding already */
  json_t *used;      /* digest -> the sandbox using it */
  char *mountinfo;
  time_t now;
};

/* What a repair does: remove a thing, or complete it. */
typedef int (*fix_fn)(struct verify *v, int dirfd, const char *name,
                      struct dsec_error **err);

static bool is_tmp_name(const char *name)
{
  return strstr(name, ".tmp-") != NULL;
}

/* One finding: fixed first when repairing and a fix is given (would is
 * then "remove" or "complete"), else reported with what a repair would
 * do (or "none: WHY" when fix is NULL). */
static int finding(struct verify *v, const char *what, const char *id,
                   const char *problem, const char *would, fix_fn fix,
                   int dirfd, const char *name, struct dsec_error **err)
{
  _cleanup_free_ char *action = NULL;
  json_t *rec;
  int ret;

  v->c->findings++;
  if (fix && v->o->repair) {
    _cleanup_error_ struct dsec_error *e = NULL;
    if (fix(v, dirfd, name, &e) < 0) {
      action = xasprintf("failed: %s%s%s", e && e->msg ? e->msg : "?",
                         e && e->errnum ? ": " : "",
                         e && e->errnum ? strerror(e->errnum) : "");
      v->c->remaining++;
    } else {
      action = xasprintf("%sd", strcmp(would, "remove") == 0 ? "remove"
                                                             : "complete");
      v->c->repaired++;
    }
  } else {
    action = xstrdup(would);
    v->c->remaining++;
  }
  rec = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "finding", "what",
                  what, "id", id, "problem", problem, "repair", action);
  ret = v->emit(rec, v->ud, err);
  json_decref(rec);
  return ret;
}

static int fix_unlink(struct verify *v, int dirfd, const char *name,
                      struct dsec_error **err)
{
  (void) v;
  if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove %s", name);
  return dsec_fsync_dir(dirfd, err);
}

static int fix_rm_rf(struct verify *v, int dirfd, const char *name,
                     struct dsec_error **err)
{
  (void) v;
  return dsec_rm_rf_at(dirfd, name, err);
}

/* A layer's directory: out of sight first (see dsec-reap), then gone. */
static int fix_layer(struct verify *v, int dirfd, const char *hex,
                     struct dsec_error **err)
{
  _cleanup_free_ char *trash = xasprintf("%s%s", TRASH_PREFIX, hex);
  (void) v;
  if (dsec_rm_rf_at(dirfd, trash, err) < 0)
    return -1;
  if (renameat(dirfd, hex, dirfd, trash) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove layer %s", hex);
  dsec_fsync_dir(dirfd, NULL);
  return dsec_rm_rf_at(dirfd, trash, err);
}

/* An EROFS image and its record (dirfd is the layer's directory). */
static int fix_erofs(struct verify *v, int dirfd, const char *name,
                     struct dsec_error **err)
{
  (void) v;
  (void) name;
  if (unlinkat(dirfd, "layer.erofs", 0) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove layer.erofs");
  if (unlinkat(dirfd, "layer.erofs.json", 0) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove layer.erofs.json");
  /* the hot set of the image removed (layermount.h) */
  if (unlinkat(dirfd, "erofs.hot", 0) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove erofs.hot");
  return dsec_fsync_dir(dirfd, err);
}

/* An extracted tree without its completion marker: completed as a
 * materialisation would (under the layer's lock). */
static int fix_rootfs(struct verify *v, int dirfd, const char *hex,
                      struct dsec_error **err)
{
  _cleanup_free_ char *path = NULL;
  char digest[DSEC_DIGEST_LEN + 1];
  bool made;
  (void) dirfd;
  snprintf(digest, sizeof digest, "sha256:%s", hex);
  return dsec_layer_materialise(v->s, digest, DSEC_FORMAT_DIR, &path, &made,
                                err);
}

/* A ref file under refs/ (name is NAME/VERSION): removed with the name's
 * directories it leaves empty. */
static int fix_ref(struct verify *v, int dirfd, const char *path,
                   struct dsec_error **err)
{
  _cleanup_free_ char *dir = xstrdup(path);
  (void) v;
  if (unlinkat(dirfd, path, 0) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove ref %s", path);
  for (;;) {
    char *slash = strrchr(dir, '/');
    if (!slash)
      break;
    *slash = '\0';
    if (unlinkat(dirfd, dir, AT_REMOVEDIR) < 0)
      break;
  }
  return dsec_fsync_dir(dirfd, err);
}

/* Younger than min_age_s. */
static bool young(struct verify *v, int dirfd, const char *name)
{
  struct stat st;
  return v->o->min_age_s > 0 &&
         fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         v->now - st.st_mtime < v->o->min_age_s;
}

/* Partial objects left alone: all with no_partial, else the young. */
static bool too_young(struct verify *v, int dirfd, const char *name)
{
  return v->o->no_partial || young(v, dirfd, name);
}

/* Whether path is mounted, under a mount or backing a loop device. */
static bool path_mounted(struct verify *v, const char *path)
{
  return dsec_path_in_use(v->mountinfo, path);
}

/* "none: ..." when the layer hex cannot go (a sandbox uses it, or it is
 * mounted), else NULL. */
static char *layer_busy(struct verify *v, const char *hex)
{
  char digest[DSEC_DIGEST_LEN + 1];
  _cleanup_free_ char *path = xasprintf("%s/layers/%s", v->s->path, hex);
  const char *sb;

  snprintf(digest, sizeof digest, "sha256:%s", hex);
  sb = json_string_value(json_object_get(v->used, digest));
  if (sb)
    return xasprintf("none: sandbox %s uses it", sb);
  if (path_mounted(v, path))
    return xstrdup("none: it is mounted");
  return NULL;
}

/* ---- blobs */

static int check_blobs(struct verify *v, struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(v->s->blobs_fd, ".");
  struct dirent *de;
  int ret = 0;

  if (!d)
    return dsec_fail(err, errno, "cannot read the store's blobs");
  while (ret == 0 && (de = readdir(d))) {
    _cleanup_free_ char *id = NULL;
    char digest[DSEC_DIGEST_LEN + 1], got[DSEC_DIGEST_LEN + 1];
    struct stat st;

    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    id = xasprintf("%s/blobs/sha256/%s", v->s->path, de->d_name);
    if (is_tmp_name(de->d_name)) {
      if (!too_young(v, v->s->blobs_fd, de->d_name))
        ret = finding(v, "tmp", id, "partial object", "remove", fix_rm_rf,
                      v->s->blobs_fd, de->d_name, err);
      continue;
    }
    if (!dsec_digest_hex_valid(de->d_name)) {
      ret = finding(v, "blob", id, "not a blob's name", "remove", fix_rm_rf,
                    v->s->blobs_fd, de->d_name, err);
      continue;
    }
    snprintf(digest, sizeof digest, "sha256:%s", de->d_name);
    v->c->blobs++;
    if (fstatat(v->s->blobs_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISREG(st.st_mode)) {
      json_object_set_new(v->bad, digest, json_true());
      json_object_set_new(v->reported, digest, json_true());
      ret = finding(v, "blob", digest, "not a regular file", "remove",
                    fix_rm_rf, v->s->blobs_fd, de->d_name, err);
      continue;
    }
    if (v->o->quick)
      continue;
    {
      _cleanup_close_ int fd = openat(v->s->blobs_fd, de->d_name,
                                      O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      _cleanup_error_ struct dsec_error *e = NULL;
      _cleanup_free_ char *why = NULL;
      if (fd < 0 || dsec_sha256_fd(fd, got, NULL, &e) < 0)
        why = xasprintf("cannot be read: %s",
                        fd < 0 ? strerror(errno)
                               : (e && e->errnum ? strerror(e->errnum) : "?"));
      else if (strcmp(got, digest) != 0)
        why = xasprintf("corrupt: its content hashes to %s", got);
      if (why) {
        json_object_set_new(v->bad, digest, json_true());
        json_object_set_new(v->reported, digest, json_true());
        ret = finding(v, "blob", digest, why, "remove", fix_unlink,
                      v->s->blobs_fd, de->d_name, err);
      }
    }
  }
  return ret;
}

/* The blob is there and sound (as far as this run has seen). */
static bool blob_ok(struct verify *v, const char *digest)
{
  return digest && dsec_digest_valid(digest) &&
         !json_object_get(v->bad, digest) && dsec_store_has_blob(v->s, digest);
}

/* ---- layers */

/* Temporary entries inside a layer's directory belong to a
 * materialisation holding the layer's lock: checked only when the lock is
 * free (taken, waiting, when repairing). */
static int check_layer_tmp(struct verify *v, int dfd, const char *hex,
                           struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(dfd, ".");
  _cleanup_close_ int lock = -1;
  _cleanup_free_ char *lockname = xasprintf("layer-%s", hex);
  struct dirent *de;
  bool any = false;
  int ret = 0;

  while (d && (de = readdir(d)))
    if (is_tmp_name(de->d_name))
      any = true;
  if (!any)
    return 0;
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    lock = dsec_lock_at(v->s->locks_fd, lockname, DSEC_LOCK_EXCLUSIVE,
                        !v->o->repair, &e);
    if (lock < 0)
      return 0; /* being made */
  }
  rewinddir(d);
  while (ret == 0 && (de = readdir(d))) {
    _cleanup_free_ char *id = NULL;
    if (!is_tmp_name(de->d_name) || too_young(v, dfd, de->d_name))
      continue;
    id = xasprintf("%s/layers/%s/%s", v->s->path, hex, de->d_name);
    ret = finding(v, "tmp", id, "partial object", "remove", fix_rm_rf, dfd,
                  de->d_name, err);
  }
  return ret;
}

/* An EROFS image: its record beside it, the size it gives, the
 * superblock's magic. */
static char *erofs_problem(int dfd)
{
  _cleanup_free_ char *buf = NULL;
  _cleanup_json_ json_t *rec = NULL;
  _cleanup_close_ int fd = -1;
  unsigned char sb[4];
  uint32_t magic;
  struct stat st;
  size_t len;

  fd = openat(dfd, "layer.erofs", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) < 0)
    return xasprintf("cannot be read: %s", strerror(errno));
  if (!S_ISREG(st.st_mode))
    return xstrdup("not a regular file");
  buf = dsec_read_file_at(dfd, "layer.erofs.json", 1 << 16, &len, NULL);
  if (!buf)
    return xstrdup("its record layer.erofs.json is missing");
  rec = json_loadb(buf, len, 0, NULL);
  if (!json_is_object(rec) ||
      !json_is_integer(json_object_get(rec, "size")))
    return xstrdup("its record layer.erofs.json does not parse");
  if (json_integer_value(json_object_get(rec, "size")) != (json_int_t) st.st_size)
    return xasprintf("it is %lld bytes, its record says %lld",
                     (long long) st.st_size,
                     (long long) json_integer_value(json_object_get(rec, "size")));
  if (pread(fd, sb, sizeof sb, EROFS_SUPER_OFFSET) != (ssize_t) sizeof sb)
    return xstrdup("too short for an EROFS superblock");
  magic = (uint32_t) sb[0] | (uint32_t) sb[1] << 8 | (uint32_t) sb[2] << 16 |
          (uint32_t) sb[3] << 24;
  if (magic != EROFS_SUPER_MAGIC)
    return xasprintf("no EROFS superblock (magic %08x)", magic);
  return NULL;
}

static int check_layer(struct verify *v, const char *hex,
                       struct dsec_error **err)
{
  _cleanup_close_ int dfd = -1;
  _cleanup_free_ char *buf = NULL;
  _cleanup_free_ char *why = NULL;
  _cleanup_json_ json_t *meta = NULL;
  char digest[DSEC_DIGEST_LEN + 1];
  struct stat st;
  size_t len;
  int ret;

  snprintf(digest, sizeof digest, "sha256:%s", hex);
  v->c->layers++;
  dfd = openat(v->s->layers_fd, hex,
               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    why = xasprintf("cannot be opened: %s", strerror(errno));
  else {
    ret = check_layer_tmp(v, dfd, hex, err);
    if (ret < 0)
      return ret;
    buf = dsec_read_file_at(dfd, "meta.json", 1 << 20, &len, NULL);
    if (!buf)
      why = xstrdup("no layer record (meta.json)");
    else if (!(meta = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL)) ||
             !json_is_object(meta))
      why = xstrdup("its record meta.json does not parse");
    else if (!json_is_string(json_object_get(meta, "digest")) ||
             strcmp(json_string_value(json_object_get(meta, "digest")),
                    digest) != 0 ||
             !json_is_string(json_object_get(meta, "diff_id")))
      why = xstrdup("its record meta.json is not this layer's");
    else if (json_object_get(v->bad, digest))
      why = xstrdup("its blob is damaged");
    else if (!dsec_store_has_blob(v->s, digest)) {
      if (young(v, v->s->layers_fd, hex))
        return 0;
      why = xstrdup("its blob is missing (an import cut short)");
    }
  }
  if (why) {
    _cleanup_free_ char *busy = layer_busy(v, hex);
    json_object_set_new(v->reported, digest, json_true());
    return finding(v, "layer", digest, why, busy ? busy : "remove",
                   busy ? NULL : fix_layer, v->s->layers_fd, hex, err);
  }
  json_object_set_new(v->layers_ok, digest, json_true());

  if (fstatat(dfd, "rootfs", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      faccessat(dfd, ROOTFS_DONE, F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
    _cleanup_free_ char *id = xasprintf("%s/layers/%s/rootfs", v->s->path,
                                        hex);
    ret = finding(v, "rootfs", id, "extracted tree not marked complete",
                  "complete", fix_rootfs, v->s->layers_fd, hex, err);
    if (ret < 0)
      return ret;
  }
  if (fstatat(dfd, "layer.erofs", &st, AT_SYMLINK_NOFOLLOW) == 0) {
    _cleanup_free_ char *problem = erofs_problem(dfd);
    if (problem) {
      _cleanup_free_ char *id = xasprintf("%s/layers/%s/layer.erofs",
                                          v->s->path, hex);
      bool mounted = path_mounted(v, id);
      ret = finding(v, "erofs", id, problem,
                    mounted ? "none: it is mounted" : "remove",
                    mounted ? NULL : fix_erofs, dfd, "layer.erofs", err);
      if (ret < 0)
        return ret;
    }
  }
  return 0;
}

static int check_layers(struct verify *v, struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(v->s->layers_fd, ".");
  struct dirent *de;
  int ret = 0;

  if (!d)
    return dsec_fail(err, errno, "cannot read the store's layers");
  while (ret == 0 && (de = readdir(d))) {
    _cleanup_free_ char *id = NULL;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    id = xasprintf("%s/layers/%s", v->s->path, de->d_name);
    if ((is_tmp_name(de->d_name) ||
         dsec_str_has_prefix(de->d_name, TRASH_PREFIX)) &&
        too_young(v, v->s->layers_fd, de->d_name))
      continue;
    if (is_tmp_name(de->d_name) ||
        dsec_str_has_prefix(de->d_name, TRASH_PREFIX))
      ret = finding(v, "tmp", id, "partial object", "remove", fix_rm_rf,
                    v->s->layers_fd, de->d_name, err);
    else if (dsec_digest_hex_valid(de->d_name))
      ret = check_layer(v, de->d_name, err);
  }
  return ret;
}

/* ---- images */

static char *image_problem(struct verify *v, const char *digest,
                           const char *file)
{
  _cleanup_free_ char *buf = NULL;
  _cleanup_json_ json_t *img = NULL;
  const char *cfg;
  json_t *l;
  size_t len, i;

  buf = dsec_read_file_at(v->s->images_fd, file, DSEC_MANIFEST_MAX, &len, NULL);
  if (!buf || !(img = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL)) ||
      !json_is_object(img) || !json_is_array(json_object_get(img, "layers")))
    return xstrdup("its record does not parse");
  if (!json_is_string(json_object_get(img, "digest")) ||
      strcmp(json_string_value(json_object_get(img, "digest")), digest) != 0)
    return xstrdup("its record is not this image's");
  if (!blob_ok(v, digest))
    return xstrdup("its manifest blob is missing or damaged");
  cfg = json_string_value(json_object_get(img, "config_digest"));
  if (!blob_ok(v, cfg))
    return xasprintf("its config blob %s is missing or damaged",
                     cfg ? cfg : "?");
  json_array_foreach(json_object_get(img, "layers"), i, l)
  {
    const char *ld = json_string_value(json_object_get(l, "digest"));
    if (!ld || !json_object_get(v->layers_ok, ld))
      return xasprintf("its layer %s is missing or damaged", ld ? ld : "?");
  }
  return NULL;
}

static int check_images(struct verify *v, struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(v->s->images_fd, ".");
  struct dirent *de;
  int ret = 0;

  if (!d)
    return dsec_fail(err, errno, "cannot read the store's images");
  while (ret == 0 && (de = readdir(d))) {
    char digest[DSEC_DIGEST_LEN + 1];
    _cleanup_free_ char *why = NULL;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (is_tmp_name(de->d_name)) {
      _cleanup_free_ char *id = xasprintf("%s/images/%s", v->s->path,
                                          de->d_name);
      if (too_young(v, v->s->images_fd, de->d_name))
        continue;
      ret = finding(v, "tmp", id, "partial object", "remove", fix_rm_rf,
                    v->s->images_fd, de->d_name, err);
      continue;
    }
    if (strlen(de->d_name) != DSEC_SHA256_HEX_LEN + 5 ||
        !dsec_str_has_suffix(de->d_name, ".json"))
      continue;
    snprintf(digest, sizeof digest, "sha256:%.64s", de->d_name);
    if (!dsec_digest_valid(digest))
      continue;
    v->c->images++;
    why = image_problem(v, digest, de->d_name);
    if (!why) {
      json_object_set_new(v->images_ok, digest, json_true());
      continue;
    }
    json_object_set_new(v->reported, digest, json_true());
    ret = finding(v, "image", digest, why, "remove", fix_unlink,
                  v->s->images_fd, de->d_name, err);
  }
  return ret;
}

/* ---- names */

/* What a ref or source record names, when it is sound. */
static char *name_problem(struct verify *v, int dirfd, const char *path,
                          bool source)
{
  _cleanup_free_ char *buf = NULL;
  _cleanup_json_ json_t *j = NULL;
  const char *d, *kind;
  size_t len;

  buf = dsec_read_file_at(dirfd, path, 1 << 20, &len, NULL);
  if (!buf || !(j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL)) ||
      !json_is_object(j))
    return xstrdup("its record does not parse");
  d = json_string_value(json_object_get(j, "digest"));
  if (!d || !dsec_digest_valid(d))
    return xstrdup("its record has no valid digest");
  kind = source ? "image" : json_string_value(json_object_get(j, "kind"));
  if (kind && strcmp(kind, "layer") == 0) {
    if (!json_object_get(v->layers_ok, d))
      return xasprintf("names layer %s, which the store does not have", d);
  } else if (!json_object_get(v->images_ok, d))
    return xasprintf("names image %s, which the store does not have", d);
  return NULL;
}

static int check_refs_in(struct verify *v, const char *prefix,
                         struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(v->s->refs_fd, prefix ? prefix : ".");
  struct dirent *de;
  int ret = 0;

  if (!d)
    return dsec_fail(err, errno, "cannot read the store's refs");
  while (ret == 0 && (de = readdir(d))) {
    _cleanup_free_ char *path = NULL;
    _cleanup_free_ char *why = NULL;
    struct stat st;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    path = prefix ? xasprintf("%s/%s", prefix, de->d_name)
                  : xstrdup(de->d_name);
    if (is_tmp_name(de->d_name)) {
      _cleanup_free_ char *id = xasprintf("%s/refs/%s", v->s->path, path);
      if (too_young(v, v->s->refs_fd, path))
        continue;
      ret = finding(v, "tmp", id, "partial object", "remove", fix_rm_rf,
                    v->s->refs_fd, path, err);
      continue;
    }
    if (fstatat(v->s->refs_fd, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      ret = check_refs_in(v, path, err);
      continue;
    }
    v->c->refs++;
    why = S_ISREG(st.st_mode) ? name_problem(v, v->s->refs_fd, path, false)
                              : xstrdup("not a regular file");
    if (why) {
      /* NAME/VERSION shown as NAME@VERSION */
      _cleanup_free_ char *id = xstrdup(path);
      char *slash = strrchr(id, '/');
      if (slash)
        *slash = '@';
      ret = finding(v, "ref", id, why, "remove", fix_ref, v->s->refs_fd, path,
                    err);
    }
  }
  return ret;
}

static int check_sources(struct verify *v, struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(v->s->sources_fd, ".");
  struct dirent *de;
  int ret = 0;

  if (!d)
    return dsec_fail(err, errno, "cannot read the store's sources");
  while (ret == 0 && (de = readdir(d))) {
    _cleanup_free_ char *id = NULL;
    _cleanup_free_ char *why = NULL;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    id = xasprintf("%s/sources/%s", v->s->path, de->d_name);
    if (is_tmp_name(de->d_name)) {
      if (!too_young(v, v->s->sources_fd, de->d_name))
        ret = finding(v, "tmp", id, "partial object", "remove", fix_rm_rf,
                      v->s->sources_fd, de->d_name, err);
      continue;
    }
    v->c->sources++;
    why = name_problem(v, v->s->sources_fd, de->d_name, true);
    if (why)
      ret = finding(v, "source", id, why, "remove", fix_unlink,
                    v->s->sources_fd, de->d_name, err);
  }
  return ret;
}

/* ---- the VMs' boot files (vmimage.c)
 *
 * store/vm/<key>/ holds boot.json, vmlinux and initramfs.cpio, built in
 * <key>.tmp-* under the store lock vm-<key> and renamed into place whole;
 * store/vm/index.json says which inputs made which key (a cache: a key
 * it does not find is built again). */

static int vm_lock(struct verify *v, const char *name, struct dsec_error **err)
{
  _cleanup_free_ char *lockname = xasprintf("vm-%.*s", DSEC_SHA256_HEX_LEN,
                                            name);
  return dsec_lock_at(v->s->locks_fd, lockname, DSEC_LOCK_EXCLUSIVE, true, err);
}

/* An entry, or what a builder that died left: removed under its key's
 * lock (held: it is being built now, and is left). */
static int fix_vm_entry(struct verify *v, int dirfd, const char *name,
                        struct dsec_error **err)
{
  _cleanup_close_ int lock = vm_lock(v, name, err);
  if (lock < 0)
    return dsec_error_wrap(err, "its builder holds its lock");
  return dsec_rm_rf_at(dirfd, name, err);
}

/* What is wrong with the entry hex (new string), or NULL. */
static char *vm_entry_problem(int vm_fd, const char *hex)
{
  static const char *const files[] = { "vmlinux", "initramfs.cpio" };
  _cleanup_close_ int dfd = openat(vm_fd, hex, O_RDONLY | O_DIRECTORY |
                                                 O_NOFOLLOW | O_CLOEXEC);
  _cleanup_free_ char *buf = NULL;
  _cleanup_json_ json_t *j = NULL;
  const char *fmt;

  if (dfd < 0)
    return xasprintf("not a directory that opens: %s", strerror(errno));
  buf = dsec_read_file_at(dfd, "boot.json", 1 << 20, NULL, NULL);
  if (!buf)
    return xstrdup("its boot.json is missing");
  j = json_loads(buf, 0, NULL);
  fmt = json_string_value(json_object_get(j, "format"));
  if (!fmt || !dsec_str_has_prefix(fmt, "dsec-vm-boot/") ||
      !json_is_string(json_object_get(j, "kernel_digest")))
    return xstrdup("its boot.json is not a boot record");
  for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
    struct stat st;
    if (fstatat(dfd, files[i], &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISREG(st.st_mode) || st.st_size == 0)
      return xasprintf("its %s is missing or empty", files[i]);
  }
  return NULL;
}

static int check_vm(struct verify *v, struct dsec_error **err)
{
  _cleanup_close_ int vm_fd = openat(v->s->fd, "vm", O_RDONLY | O_DIRECTORY |
                                                       O_NOFOLLOW | O_CLOEXEC);
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int ret = 0;

  if (vm_fd < 0)
    return errno == ENOENT ? 0 : dsec_fail(err, errno, "cannot open %s/vm",
                                           v->s->path);
  d = dsec_opendir_at(vm_fd, ".");
  if (!d)
    return dsec_fail(err, errno, "cannot read %s/vm", v->s->path);
  while (ret == 0 && (de = readdir(d))) {
    _cleanup_free_ char *id = xasprintf("%s/vm/%s", v->s->path, de->d_name);
    _cleanup_free_ char *why = NULL;
    if (is_tmp_name(de->d_name) && strlen(de->d_name) > DSEC_SHA256_HEX_LEN) {
      /* a live builder holds its key's lock */
      int lock = vm_lock(v, de->d_name, NULL);
      if (lock < 0)
        continue;
      close(lock);
      if (!too_young(v, vm_fd, de->d_name))
        ret = finding(v, "tmp", id, "partial object", "remove", fix_vm_entry,
                      vm_fd, de->d_name, err);
    } else if (dsec_digest_hex_valid(de->d_name)) {
      v->c->vm_boot++;
      why = vm_entry_problem(vm_fd, de->d_name);
      if (why)
        ret = finding(v, "vm-boot", id, why, "remove", fix_vm_entry, vm_fd,
                      de->d_name, err);
    } else if (strcmp(de->d_name, "index.json") == 0) {
      _cleanup_free_ char *buf = dsec_read_file_at(vm_fd, "index.json", 64 << 20,
                                                   NULL, NULL);
      _cleanup_json_ json_t *j = buf ? json_loads(buf, 0, NULL) : NULL;
      if (!json_is_array(json_object_get(j, "entries")))
        ret = finding(v, "vm-boot", id, "the index does not parse",
                      "remove", fix_unlink, vm_fd, "index.json", err);
    }
  }
  return ret;
}

/* ---- store/tmp and what sandboxes use */

/* Blobs being written hold a lock on their file; an unlocked one is a
 * crash's leftover. */
static int check_tmp(struct verify *v, struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(v->s->tmp_fd, ".");
  struct dirent *de;
  time_t now = time(NULL);
  int ret = 0;

  while (ret == 0 && d && (de = readdir(d))) {
    _cleanup_free_ char *id = NULL;
    _cleanup_close_ int fd = -1;
    struct stat st;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (fstatat(v->s->tmp_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    if (S_ISREG(st.st_mode)) {
      fd = openat(v->s->tmp_fd, de->d_name,
                  O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
        continue; /* its writer is alive */
    } else if (!v->o->repair && now - st.st_mtime < TMP_DIR_STALE_S)
      continue;
    if (now - st.st_mtime < v->o->min_age_s)
      continue;
    id = xasprintf("%s/tmp/%s", v->s->path, de->d_name);
    ret = finding(v, "tmp", id, "partial object", "remove", fix_rm_rf,
                  v->s->tmp_fd, de->d_name, err);
  }
  return ret;
}

static int check_used(struct verify *v, struct dsec_error **err)
{
  const char *digest;
  json_t *sb;
  int ret = 0;

  json_object_foreach(v->used, digest, sb)
  {
    _cleanup_free_ char *why = NULL;
    if (ret < 0)
      break;
    if (json_object_get(v->layers_ok, digest) ||
        json_object_get(v->images_ok, digest) ||
        json_object_get(v->reported, digest))
      continue;
    why = xasprintf("uses %s, which the store does not have", digest);
    ret = finding(v, "sandbox", json_string_value(sb), why,
                  "none: only a new pull or layer create brings it back",
                  NULL, -1, NULL, err);
  }
  return ret;
}

int dsec_store_verify(struct dsec_store *s, const struct dsec_verify_opts *o,
                      dsec_verify_emit_fn emit, void *ud,
                      struct dsec_verify_counts *c, struct dsec_error **err)
{
  struct verify v = { .s = s, .o = o, .emit = emit, .ud = ud, .c = c };
  int ret;

  memset(c, 0, sizeof *c);
  v.now = time(NULL);
  v.used = dsec_sandbox_references(err);
  if (!v.used)
    return -1;
  v.bad = json_object();
  v.layers_ok = json_object();
  v.images_ok = json_object();
  v.reported = json_object();
  v.mountinfo = dsec_read_file_at(AT_FDCWD, "/proc/self/mountinfo", 64 << 20,
                                  NULL, NULL);
  /* the order matters: what a record needs is judged before the record,
   * so that a repair removes the records a removed object leaves broken */
  if (!o->no_partial)
    ret = check_tmp(&v, err);
  else
    ret = 0;
  if (ret == 0)
    ret = check_blobs(&v, err);
  if (ret == 0)
    ret = check_layers(&v, err);
  if (ret == 0)
    ret = check_images(&v, err);
  if (ret == 0)
    ret = check_refs_in(&v, NULL, err);
  if (ret == 0)
    ret = check_sources(&v, err);
  if (ret == 0)
    ret = check_vm(&v, err);
  if (ret == 0)
    ret = check_used(&v, err);
  json_decref(v.used);
  json_decref(v.bad);
  json_decref(v.layers_ok);
  json_decref(v.images_ok);
  json_decref(v.reported);
  free(v.mountinfo);
  return ret;
}
