#include <config.h>

#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crash.h"
#include "fsutil.h"
#include "lock.h"

static char *env_dir(const char *var, const char *root_default,
                     const char *xdg, const char *xdg_fallback)
{
  const char *v = getenv(var);
  const char *home;

  if (v && *v)
    return xstrdup(v);
  if (geteuid() == 0)
    return xstrdup(root_default);
  v = getenv(xdg);
  if (v && *v == '/')
    return xasprintf("%s/dsec", v);
  home = getenv("HOME");
  if (xdg_fallback && home && *home)
    return xasprintf("%s/%s/dsec", home, xdg_fallback);
  return xasprintf("/tmp/dsec-%u", (unsigned) geteuid());
}

char *dsec_root_dir(void)
{
  return env_dir("DSEC_ROOT", "/var/lib/dsec", "XDG_DATA_HOME",
                 ".local/share");
}

char *dsec_run_dir(void)
{
  return env_dir("DSEC_RUN", "/run/dsec", "XDG_RUNTIME_DIR", NULL);
}

int dsec_private_dir(const char *path, struct dsec_error **err)
{
  _cleanup_free_ char *parent = xstrdup(path);
  char *slash = strrchr(parent, '/');
  struct stat st;

  /* made already, mostly: a lookup, not a mkdir per component */
  if (lstat(path, &st) < 0) {
    if (errno != ENOENT)
      return dsec_fail(err, errno, "cannot stat %s", path);
    if (slash && slash != parent) {
      *slash = '\0';
      if (dsec_mkdir_p(AT_FDCWD, parent, 0755, err) < 0)
        return -1;
    }
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
      return dsec_fail(err, errno, "cannot create %s", path);
    if (lstat(path, &st) < 0)
      return dsec_fail(err, errno, "cannot stat %s", path);
  }
  if (!S_ISDIR(st.st_mode))
    return dsec_fail(err, ENOTDIR, "%s is not a directory", path);
  if (st.st_uid == geteuid() && (st.st_mode & 077) &&
      chmod(path, st.st_mode & 0700) < 0)
    return dsec_fail(err, errno, "cannot make %s private", path);
  return 0;
}

void dsec_store_free(struct dsec_store *s)
{
  if (!s)
    return;
  int *fds[] = { &s->fd,        &s->blobs_fd, &s->images_fd, &s->layers_fd,
                 &s->refs_fd,   &s->sources_fd, &s->tmp_fd,  &s->locks_fd };
  for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
    if (*fds[i] >= 0)
      close(*fds[i]);
  free(s->path);
  free(s);
}

int dsec_store_open(struct dsec_store **out, struct dsec_error **err)
{
  struct dsec_store *s = xzalloc(sizeof *s);
  const char *env = getenv("DSEC_STORE");
  _cleanup_free_ char *root = NULL;
  _cleanup_free_ char *path = NULL;
  struct {
    int *fd;
    const char *name;
  } dirs[] = {
    { &s->blobs_fd, "blobs/sha256" }, { &s->images_fd, "images" },
    { &s->layers_fd, "layers" },      { &s->refs_fd, "refs" },
    { &s->sources_fd, "sources" },    { &s->tmp_fd, "tmp" },
    { &s->locks_fd, "locks" },
  };

  s->fd = s->blobs_fd = s->images_fd = s->layers_fd = s->refs_fd =
    s->sources_fd = s->tmp_fd = s->locks_fd = -1;

  if (env && *env)
    path = xstrdup(env);
  else {
    root = dsec_root_dir();
    path = xasprintf("%s/store", root);
  }
  if (path[0] != '/') {
    dsec_store_free(s);
    return dsec_error_set(err, DSEC_EXIT_USAGE, 0,
                          "store path must be absolute: %s", path);
  }
  if ((root && dsec_private_dir(root, err) < 0) ||
      dsec_private_dir(path, err) < 0)
    goto fail;
  s->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s->fd < 0) {
    dsec_fail(err, errno, "cannot open store %s", path);
    goto fail;
  }
  for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
    *dirs[i].fd = dsec_open_dir_at(s->fd, dirs[i].name, true, err);
    if (*dirs[i].fd < 0)
      goto fail;
  }
  s->path = steal_pointer(&path);
  *out = s;
  return 0;

fail:
  dsec_error_wrap(err, "cannot open the store");
  dsec_store_free(s);
  return -1;
}

bool dsec_store_has_blob(struct dsec_store *s, const char *digest)
{
  struct stat st;
  return dsec_digest_valid(digest) &&
         fstatat(s->blobs_fd, dsec_digest_hex(digest), &st, 0) == 0 &&
         S_ISREG(st.st_mode);
}

int dsec_store_open_blob(struct dsec_store *s, const char *digest,
                         struct dsec_error **err)
{
  int fd;
  if (!dsec_digest_valid(digest))
    return dsec_bad_input(err, "invalid digest: %s", digest);
  fd = openat(s->blobs_fd, dsec_digest_hex(digest),
              O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return dsec_error_set(err,
                          errno == ENOENT ? DSEC_EXIT_INPUT : DSEC_EXIT_FAILURE,
                          errno, "blob %s", digest);
  return fd;
}

char *dsec_store_blob_path(struct dsec_store *s, const char *digest)
{
  return xasprintf("%s/blobs/sha256/%s", s->path, dsec_digest_hex(digest));
}

char *dsec_store_read_blob(struct dsec_store *s, const char *digest,
                           size_t max, size_t *len, struct dsec_error **err)
{
  _cleanup_close_ int fd = dsec_store_open_blob(s, digest, err);
  char got[DSEC_DIGEST_LEN + 1];
  char *buf;
  size_t n;

  if (fd < 0)
    return NULL;
  buf = dsec_read_fd(fd, max, &n, err);
  if (!buf) {
    dsec_error_wrap(err, "blob %s", digest);
    return NULL;
  }
  dsec_sha256_buf(buf, n, got);
  if (strcmp(got, digest) != 0) {
    free(buf);
    dsec_bad_input(err, "blob %s is corrupt: its content hashes to %s",
                   digest, got);
    return NULL;
  }
  if (len)
    *len = n;
  return buf;
}

int dsec_store_verify_blob(struct dsec_store *s, const char *digest,
                           struct dsec_error **err)
{
  _cleanup_close_ int fd = dsec_store_open_blob(s, digest, err);
  char got[DSEC_DIGEST_LEN + 1];

  if (fd < 0)
    return -1;
  if (dsec_sha256_fd(fd, got, NULL, err) < 0)
    return dsec_error_wrap(err, "blob %s", digest);
  if (strcmp(got, digest) != 0)
    return dsec_bad_input(err, "blob %s is corrupt: its content hashes to %s",
                          digest, got);
  return 0;
}

struct dsec_blob_writer {
  struct dsec_store *store;
  int fd;
  char *tmpname;
  struct dsec_sha256 *hash;
  uint64_t size;
  uint64_t limit;
  char digest[DSEC_DIGEST_LEN + 1];
  bool finished;
};

int dsec_blob_writer_open(struct dsec_store *s, struct dsec_blob_writer **out,
                          struct dsec_error **err)
{
  struct dsec_blob_writer *w;
  char *tmp = NULL;
  int fd = dsec_open_tmp_at(s->tmp_fd, "blob", 0644, &tmp, err);

  if (fd < 0)
    return fd;
  /* The writer holds a lock on its temp file so that a collector can tell
   * a live write from a crash's leftover. */
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int e = errno;
    unlinkat(s->tmp_fd, tmp, 0);
    free(tmp);
    close(fd);
    return dsec_fail(err, e, "cannot lock a temporary blob");
  }
  w = xzalloc(sizeof *w);
  w->store = s;
  w->fd = fd;
  w->tmpname = tmp;
  w->hash = dsec_sha256_new();
  *out = w;
  return 0;
}

void dsec_blob_writer_set_limit(struct dsec_blob_writer *w, uint64_t limit)
{
  w->limit = limit;
}

int dsec_blob_writer_write(struct dsec_blob_writer *w, const void *buf,
                           size_t len, struct dsec_error **err)
{
  if (w->limit && w->size + len > w->limit)
    return dsec_bad_input(err, "blob is larger than its declared size of "
                               "%llu bytes",
                          (unsigned long long) w->limit);
  if (dsec_write_all(w->fd, buf, len, err) < 0)
    return dsec_error_wrap(err, "cannot write blob");
  dsec_sha256_update(w->hash, buf, len);
  w->size += len;
  return 0;
}

uint64_t dsec_blob_writer_size(struct dsec_blob_writer *w) { return w->size; }

int dsec_blob_writer_finish(struct dsec_blob_writer *w, const char *expected,
                            char digest[DSEC_DIGEST_LEN + 1],
                            struct dsec_error **err)
{
  dsec_sha256_final(w->hash, w->digest);
  w->hash = NULL;
  w->finished = true;
  if (expected && strcmp(expected, w->digest) != 0)
    return dsec_bad_input(err, "digest mismatch: expected %s, content is %s",
                          expected, w->digest);
  if (fsync(w->fd) < 0)
    return dsec_fail(err, errno, "cannot sync blob %s", w->digest);
  if (digest)
    memcpy(digest, w->digest, sizeof w->digest);
  return 0;
}

int dsec_blob_writer_fd(struct dsec_blob_writer *w, struct dsec_error **err)
{
  int fd = openat(w->store->tmp_fd, w->tmpname, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return dsec_fail(err, errno, "cannot reopen temporary blob");
  return fd;
}

static void writer_free(struct dsec_blob_writer *w)
{
  if (w->fd >= 0)
    close(w->fd);
  dsec_sha256_free(w->hash);
  free(w->tmpname);
  free(w);
}

int dsec_blob_writer_commit(struct dsec_blob_writer *w, bool *existed,
                            struct dsec_error **err)
{
  struct dsec_store *s = w->store;
  const char *hex = dsec_digest_hex(w->digest);
  bool had = false;
  int ret = 0;

  if (!w->finished) {
    dsec_blob_writer_abort(w);
    return dsec_fail(err, EINVAL, "blob committed before it was finished");
  }
  dsec_crash_point("blob written");
  /* Blobs are read-only once in place. */
  fchmod(w->fd, 0444);
  /* link() never replaces: the first complete copy wins and a concurrent
   * writer of the same content just drops its own. */
  if (linkat(s->tmp_fd, w->tmpname, s->blobs_fd, hex, 0) < 0) {
    if (errno == EEXIST)
      had = true;
    else
      ret = dsec_fail(err, errno, "cannot store blob %s", w->digest);
  }
  dsec_crash_point("blob linked");
  unlinkat(s->tmp_fd, w->tmpname, 0);
  if (ret == 0 && !had)
    ret = dsec_fsync_dir(s->blobs_fd, err);
  writer_free(w);
  if (ret == 0 && existed)
    *existed = had;
  return ret;
}

void dsec_blob_writer_abort(struct dsec_blob_writer *w)
{
  if (!w)
    return;
  unlinkat(w->store->tmp_fd, w->tmpname, 0);
  writer_free(w);
}

int dsec_store_put_blob(struct dsec_store *s, const void *buf, size_t len,
                        const char *expected, char digest[DSEC_DIGEST_LEN + 1],
                        bool *existed, struct dsec_error **err)
{
  struct dsec_blob_writer *w = NULL;
  char d[DSEC_DIGEST_LEN + 1];

  if (expected && dsec_store_has_blob(s, expected)) {
    dsec_sha256_buf(buf, len, d);
    if (strcmp(d, expected) != 0)
      return dsec_bad_input(err, "digest mismatch: expected %s, content is %s",
                            expected, d);
    if (digest)
      memcpy(digest, d, sizeof d);
    if (existed)
      *existed = true;
    return 0;
  }
  if (dsec_blob_writer_open(s, &w, err) < 0)
    return -1;
  if (dsec_blob_writer_write(w, buf, len, err) < 0 ||
      dsec_blob_writer_finish(w, expected, d, err) < 0) {
    dsec_blob_writer_abort(w);
    return -1;
  }
  if (dsec_blob_writer_commit(w, existed, err) < 0)
    return -1;
  if (digest)
    memcpy(digest, d, sizeof d);
  return 0;
}

int dsec_store_lock(struct dsec_store *s, const char *what,
                    const char *digest, struct dsec_error **err)
{
  _cleanup_free_ char *name = xasprintf("%s-%s", what, dsec_digest_hex(digest));
  return dsec_lock_at(s->locks_fd, name, DSEC_LOCK_EXCLUSIVE, false, err);
}

int dsec_store_lock_gc(struct dsec_store *s, bool exclusive,
                       struct dsec_error **err)
{
  return dsec_store_lock_gc_at(s->locks_fd, exclusive, false, err);
}

int dsec_store_lock_gc_at(int locks_fd, bool exclusive, bool nonblock,
                          struct dsec_error **err)
{
  return dsec_lock_at(locks_fd, "gc",
                      exclusive ? DSEC_LOCK_EXCLUSIVE : DSEC_LOCK_SHARED,
                      nonblock, err);
}
