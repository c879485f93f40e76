#include <config.h>

#include "layer.h"

#include <archive.h>
#include <archive_entry.h>
#include "archive-lazy.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zstd.h>

#include "fsutil.h"
#include "lock.h"
#include "log.h"
#include "process.h"

static int writer_write(void *ud, const void *buf, size_t len,
                        struct dsec_error **err)
{
  return dsec_blob_writer_write(ud, buf, len, err);
}

/* A private temporary directory under the store's tmp/ (new path). */
static char *store_mkdtemp(struct dsec_store *s, const char *what,
                           struct dsec_error **err)
{
  char *path = xasprintf("%s/tmp/%s-XXXXXX", s->path, what);
  if (!mkdtemp(path)) {
    dsec_fail(err, errno, "cannot create a temporary directory");
    free(path);
    return NULL;
  }
  return path;
}

static void rm_tree_abs(const char *path)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  if (path && dsec_rm_rf_at(AT_FDCWD, path, &e) < 0)
    dsec_warn("cannot remove %s: %s", path, e->msg);
}

/* Builds a .git of the work tree's current commit only: a depth-1 fetch
 * of HEAD into a fresh repository, so history, other refs, reflogs and
 * unreachable objects are not carried into the layer (agents read answers
 * from future commits).  Returns the new repository's path. */
static char *scrub_git(struct dsec_store *s, const char *dir,
                       struct dsec_error **err)
{
  _cleanup_free_ char *tmp = NULL;
  _cleanup_free_ char *abs = NULL;
  _cleanup_free_ char *url = NULL;
  _cleanup_free_ char *branch = NULL;
  _cleanup_free_ char *gitdir = NULL;
  _cleanup_free_ char *safe = NULL;
  struct stat st;
  int ret;

  gitdir = xasprintf("%s/.git", dir);
  if (lstat(gitdir, &st) < 0 || !S_ISDIR(st.st_mode)) {
    dsec_bad_input(err, "--scrub-git: %s has no .git directory", dir);
    return NULL;
  }
  abs = dsec_abspath(dir, err);
  if (!abs)
    return NULL;
  tmp = store_mkdtemp(s, "git", err);
  if (!tmp)
    return NULL;
  url = xasprintf("file://%s", abs);
  safe = xasprintf("safe.directory=%s", abs);
  {
    char *argv[] = { GIT_PROG, "-c", safe, "-C", abs, "symbolic-ref", "-q",
                     "HEAD", NULL };
    _cleanup_error_ struct dsec_error *e = NULL;
    if (dsec_run_program(argv, NULL, &branch, &e) == 0)
      branch[strcspn(branch, "\n")] = '\0';
    else
      branch = NULL; /* detached HEAD */
  }
  {
    char *init[] = { GIT_PROG, "init", "-q", tmp, NULL };
    char *fetch[] = { GIT_PROG, "-c", safe, "-C", tmp, "fetch", "-q",
                      "--depth=1", "--no-tags", "--no-recurse-submodules",
                      url, "HEAD", NULL };
    ret = dsec_run_program(init, NULL, NULL, err);
    if (ret == 0)
      ret = dsec_run_program(fetch, NULL, NULL, err);
  }
  if (ret == 0) {
    if (branch && *branch) {
      char *upd[] = { GIT_PROG, "-C", tmp, "update-ref", branch, "FETCH_HEAD",
                      NULL };
      char *sym[] = { GIT_PROG, "-C", tmp, "symbolic-ref", "HEAD", branch,
                      NULL };
      ret = dsec_run_program(upd, NULL, NULL, err);
      if (ret == 0)
        ret = dsec_run_program(sym, NULL, NULL, err);
    } else {
      char *upd[] = { GIT_PROG, "-C", tmp, "update-ref", "--no-deref", "HEAD",
                      "FETCH_HEAD", NULL };
      ret = dsec_run_program(upd, NULL, NULL, err);
    }
  }
  if (ret == 0) {
    char *rt[] = { GIT_PROG, "-C", tmp, "read-tree", "HEAD", NULL };
    char *rf[] = { GIT_PROG, "-C", tmp, "reflog", "expire", "--expire=now",
                   "--all", NULL };
    ret = dsec_run_program(rt, NULL, NULL, err);
    if (ret == 0)
      ret = dsec_run_program(rf, NULL, NULL, err);
  }
  if (ret == 0) {
    _cleanup_free_ char *fh = xasprintf("%s/.git/FETCH_HEAD", tmp);
    _cleanup_free_ char *logs = xasprintf("%s/.git/logs", tmp);
    _cleanup_free_ char *hooks = xasprintf("%s/.git/hooks", tmp);
    unlink(fh);
    rm_tree_abs(logs);
    rm_tree_abs(hooks);
  }
  if (ret < 0) {
    rm_tree_abs(tmp);
    dsec_error_wrap(err, "--scrub-git");
    return NULL;
  }
  return steal_pointer(&tmp);
}

int dsec_layer_create(struct dsec_store *s,
                      const struct dsec_layer_create_opts *o, json_t **record,
                      struct dsec_error **err)
{
  _cleanup_free_ char *name = NULL;
  _cleanup_free_ char *version = NULL;
  _cleanup_free_ char *gitrepo = NULL;
  _cleanup_close_ int gc = -1;
  json_t *meta = NULL;
  bool cached = false;
  int ret;

  if (o->name && dsec_ref_split(o->name, &name, &version, err) < 0)
    return dsec_error_wrap(err, "--name");
  gc = dsec_store_lock_gc(s, false, err);
  if (gc < 0)
    return -1;

  if (o->tar && (o->policy.strip_setuid || o->policy.strip_overlay)) {
    /* what the policy strips cannot stay in the blob: the stream is
     * written anew (zstd), then imported as any tarball is, and the
     * strict checks must find nothing left to strip */
    _cleanup_close_ int fd = strcmp(o->tar, "-") == 0
                               ? dup(STDIN_FILENO)
                               : open(o->tar, O_RDONLY | O_CLOEXEC);
    struct dsec_blob_writer *w = NULL;
    struct dsec_tar_stats st;
    struct dsec_tar_policy strict = o->policy, pol = o->policy;
    const struct dsec_layer_expect x = { NULL, -1, NULL,
                                         DSEC_MT_OCI_LAYER "+zstd" };

    if (fd < 0)
      return dsec_error_set(err, errno == ENOENT ? DSEC_EXIT_INPUT
                                                 : DSEC_EXIT_FAILURE,
                            errno, "cannot open %s", o->tar);
    /* a sandbox's upper directory: its device nodes are refused */
    pol.refuse_devices = strict.refuse_devices = o->policy.strip_overlay;
    strict.strip_setuid = strict.strip_overlay = false;
    ret = dsec_blob_writer_open(s, &w, err);
    if (ret == 0) {
      ret = dsec_tar_rewrite(fd, &pol, writer_write, w, true, &st, err);
      if (ret < 0)
        dsec_blob_writer_abort(w);
      else
        ret = dsec_layer_import_writer(s, w, &x, &strict, &meta, &cached, err);
    }
    if (ret < 0)
      return dsec_error_wrap(err, "%s", o->tar);
    json_object_set_new(meta, "stripped_setuid",
                        json_integer((json_int_t) st.stripped_setuid));
    json_object_set_new(meta, "stripped_setgid",
                        json_integer((json_int_t) st.stripped_setgid));
    json_object_set_new(meta, "stripped_capabilities",
                        json_integer((json_int_t) st.stripped_capabilities));
    json_object_set_new(meta, "stripped_overlay_xattrs",
                        json_integer((json_int_t) st.stripped_overlay_xattrs));
  } else if (o->tar) {
    _cleanup_close_ int fd = strcmp(o->tar, "-") == 0
                               ? dup(STDIN_FILENO)
                               : open(o->tar, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return dsec_error_set(err, errno == ENOENT ? DSEC_EXIT_INPUT
                                                 : DSEC_EXIT_FAILURE,
                            errno, "cannot open %s", o->tar);
    ret = dsec_layer_import_fd(s, fd, NULL, &o->policy, &meta, &cached, err);
    if (ret < 0)
      return dsec_error_wrap(err, "%s", o->tar);
  } else {
    struct dsec_blob_writer *w = NULL;
    /* with --scrub-git, every .git (nested repositories and submodules
     * too) is left out and the top one replaced by its scrubbed copy */
    struct dsec_tar_source src[2] = {
      { o->dir, "", NULL, o->scrub_git ? ".git" : NULL, o->overlay_upper,
        o->id_shift },
      { NULL, ".git", NULL, NULL, false, 0 },
    };
    size_t nsrc = 1;
    struct dsec_tar_create_stats cs;
    struct stat st;

    if (stat(o->dir, &st) < 0 || !S_ISDIR(st.st_mode))
      return dsec_error_set(err, DSEC_EXIT_INPUT, errno,
                            "%s is not a directory", o->dir);
    if (o->scrub_git) {
      _cleanup_free_ char *dotgit = NULL;
      gitrepo = scrub_git(s, o->dir, err);
      if (!gitrepo)
        return -1;
      dotgit = xasprintf("%s/.git", gitrepo);
      src[1].dir = xstrdup(dotgit);
      nsrc = 2;
    }
    ret = dsec_blob_writer_open(s, &w, err);
    if (ret == 0) {
      ret = dsec_tar_create(src, nsrc, writer_write, w, true, &cs, err);
      if (ret < 0)
        dsec_blob_writer_abort(w);
      else
      {
        const struct dsec_layer_expect x = { NULL, -1, NULL,
                                             DSEC_MT_OCI_LAYER "+zstd" };
        ret = dsec_layer_import_writer(s, w, &x, &o->policy, &meta, &cached,
                                       err);
      }
    }
    free((char *) src[1].dir);
    rm_tree_abs(gitrepo);
    if (ret < 0)
      return dsec_error_wrap(err, "%s", o->dir);
    if (o->overlay_upper)
      json_object_set_new(meta, "skipped_whiteout_names",
                          json_integer((json_int_t) cs.skipped_whiteout_names));
  }

  if (name) {
    ret = dsec_ref_set(s, name, version, DSEC_KIND_LAYER,
                       json_string_value(json_object_get(meta, "digest")), err);
    if (ret < 0) {
      json_decref(meta);
      return ret;
    }
    json_object_set_new(meta, "name", json_sprintf("%s@%s", name, version));
  }
  json_object_set_new(meta, "cached", json_boolean(cached));
  *record = meta;
  return 0;
}

static int clean_stale(int dfd, const char *prefix)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(dfd, ".");
  struct dirent *de;

  while (d && (de = readdir(d)))
    if (dsec_str_has_prefix(de->d_name, prefix)) {
      _cleanup_error_ struct dsec_error *e = NULL;
      dsec_rm_rf_at(dfd, de->d_name, &e);
    }
  return 0;
}

/* clean_stale in a directory others write in (/dev/shm): only
 * directories of our own euid go, a link or another's entry stays. */
static void clean_own_stale(int dfd, const char *prefix)
{
  _cleanup_closedir_ DIR *d = dsec_opendir_at(dfd, ".");
  struct dirent *de;

  while (d && (de = readdir(d))) {
    struct stat st;
    if (dsec_str_has_prefix(de->d_name, prefix) &&
        fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode) && st.st_uid == geteuid()) {
      _cleanup_error_ struct dsec_error *e = NULL;
      dsec_rm_rf_at(dfd, de->d_name, &e);
    }
  }
}

/* /dev/shm (an fd on it), when a layer's scratch tree fits there: a
 * tmpfs whose free space, and the memory available, are each at least
 * twice the layer's uncompressed size (plus 256 MiB of memory); else -1.
 * DSEC_EROFS_SCRATCH=disk keeps the tree in the store. */
static int scratch_in_memory(json_t *meta)
{
  const char *how = getenv("DSEC_EROFS_SCRATCH");
  uint64_t need = (uint64_t) json_integer_value(
    json_object_get(meta, "uncompressed_size"));
  _cleanup_free_ char *mi = NULL;
  const char *avail;
  struct statfs sf;
  int fd;

  if ((how && strcmp(how, "disk") == 0) || need == 0)
    return -1;
  fd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  mi = dsec_read_file_at(AT_FDCWD, "/proc/meminfo", 1 << 16, NULL, NULL);
  avail = mi ? strstr(mi, "MemAvailable:") : NULL;
  if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC ||
      (uint64_t) sf.f_bavail * (uint64_t) sf.f_bsize / 2 < need || !avail ||
      strtoull(avail + 13, NULL, 10) * 1024 / 2 < need + (128ull << 20)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Extracts the layer's blob into a new directory under dfd (named
 * "<base>.tmp-XXXXXX"), verifying the blob.  Returns the name (new).
 *
 * A tree for an EROFS image (base "erofs-tree") keeps setuid/setgid bits
 * and file capabilities, which then act only inside sandboxes: it is a
 * private scratch area (a 0700 directory, the image's root in tree/
 * below it) that is gone once the image is built.  Any other tree is one
 * the host sees (rootfs/): those go, unless the layer was trusted with
 * --keep-setuid.  Device nodes are never made.  st (optional) gets what
 * the extraction counted. */
static char *extract_tmp(struct dsec_store *s, int dfd, const char *dir,
                         const char *base, const char *digest, json_t *meta,
                         struct dsec_tar_stats *stp, struct dsec_error **err)
{
  _cleanup_free_ char *name = NULL;
  _cleanup_free_ char *path = NULL;
  _cleanup_free_ char *top = NULL;
  _cleanup_close_ int fd = -1;
  struct dsec_tar_policy p = { 0 };
  struct dsec_tar_stats st;
  bool scratch = strstr(base, "erofs-tree") != NULL;
  uint64_t r;

  (void) s;

  if (getrandom(&r, sizeof r, 0) != sizeof r)
    r = (uint64_t) getpid();
  name = xasprintf("%s.tmp-%016llx", base, (unsigned long long) r);
  if (mkdirat(dfd, name, scratch ? 0700 : 0755) < 0) {
    dsec_fail(err, errno, "cannot create %s", name);
    return NULL;
  }
  top = xasprintf("%s/%s", dir, name);
  /* mkdir's mode went through the umask; the root must be 0755 */
  if (scratch) {
    path = xasprintf("%s/tree", top);
    if (mkdir(path, 0755) < 0) {
      dsec_fail(err, errno, "cannot create %s", path);
      goto fail;
    }
  } else
    path = xstrdup(top);
  if (chmod(path, 0755) < 0) {
    dsec_fail(err, errno, "cannot set the mode of %s", path);
    goto fail;
  }
  fd = dsec_store_open_blob(s, digest, err);
  if (fd < 0)
    goto fail;
  p.keep_setuid = json_is_true(json_object_get(meta, "keep_setuid"));
  p.strip_setuid = !scratch;
  p.diff_id = json_string_value(json_object_get(meta, "diff_id"));
  /* a tree made only to build an EROFS image is thrown away after */
  p.no_sync = scratch;
  /* the size it had at import bounds it now */
  p.max_size = (uint64_t) json_integer_value(
    json_object_get(meta, "uncompressed_size"));
  if (p.max_size == 0)
    p.max_size = DSEC_DEFAULT_MAX_SIZE;
  if (dsec_tar_extract(fd, path, &p, digest, &st, err) < 0)
    goto fail;
  if (stp)
    *stp = st;
  return steal_pointer(&name);
fail:
  dsec_error_wrap(err, "layer %s", digest);
  rm_tree_abs(top);
  return NULL;
}

/* The compression of new EROFS images: lz4 unless DSEC_EROFS_COMPRESSION
 * says none, lz4 or lz4hc (see dsec-layer(1) for the measurements behind
 * the choice). */
static const char *erofs_compression(void)
{
  const char *c = getenv("DSEC_EROFS_COMPRESSION");
  if (c && (strcmp(c, "none") == 0 || strcmp(c, "lz4hc") == 0))
    return c;
  return "lz4";
}

/* Builds layer.erofs from tree, published only complete and never over
 * an image that is there (a node of a shared store may have it mounted:
 * replacing the file would pull it from under that mount). */
static int make_erofs(struct dsec_store *s, int dfd, const char *digest,
                      const char *tree, const struct dsec_tar_stats *xs,
                      struct dsec_error **err)
{
  _cleanup_free_ char *tmpname = NULL;
  _cleanup_free_ char *tmppath = NULL;
  _cleanup_free_ char *text = NULL;
  _cleanup_free_ char *now = dsec_time_rfc3339();
  _cleanup_close_ int fd = -1;
  const char *comp = erofs_compression();
  _cleanup_free_ char *zopt = xasprintf("-z%s", comp);
  double t0 = dsec_now_ms();
  struct stat st;
  json_t *rec;
  int ret;

  fd = dsec_open_tmp_at(dfd, "layer.erofs", 0444, &tmpname, err);
  if (fd < 0)
    return -1;
  tmppath = xasprintf("%s/layers/%s/%s", s->path, dsec_digest_hex(digest),
                      tmpname);
  {
    /* data blocks aligned (noinline_data), so that the uncompressed files
     * of an image can be mapped with DAX by the VM backends; per-file
     * times kept; lz4 in 4 KiB clusters (the default) */
    char *argv[] = { MKFS_EROFS, "--quiet", "-Enoinline_data",
                     "--preserve-mtime", zopt, tmppath, (char *) tree, NULL };
    if (strcmp(comp, "none") == 0) {
      argv[4] = tmppath;
      argv[5] = (char *) tree;
      argv[6] = NULL;
    }
    ret = dsec_run_program(argv, NULL, NULL, err);
  }
  if (ret == 0 && (fsync(fd) < 0 || fstat(fd, &st) < 0))
    ret = dsec_fail(err, errno, "cannot sync %s", tmppath);
  if (ret < 0) {
    unlinkat(dfd, tmpname, 0);
    return dsec_error_wrap(err, "cannot build the EROFS image of %s", digest);
  }
  /* written, not read: its pages leave the cache (clean after the fsync),
   * so that what sandboxes read of it is what the cache shows afterwards,
   * the image's hot set (layermount.h), and a pull of many images does
   * not push out what the host's sandboxes use */
  (void) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  /* what it holds, beside it (written first: an image is never without) */
  rec = json_pack("{s:s, s:I, s:s, s:f, s:I, s:I, s:I, s:I}", "compression",
                  comp, "size", (json_int_t) st.st_size, "built", now,
                  "build_ms", dsec_ms1(dsec_now_ms() - t0),
                  "setuid_files", (json_int_t) xs->setuid_files,
                  "setgid_files", (json_int_t) xs->setgid_files,
                  "capability_files", (json_int_t) xs->capability_files,
                  "dropped_device_nodes", (json_int_t) xs->device_nodes);
  text = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  ret = dsec_write_file_atomic(dfd, "layer.erofs.json", text, strlen(text),
                               0644, err);
  if (ret == 0 && linkat(dfd, tmpname, dfd, "layer.erofs", 0) < 0 &&
      errno != EEXIST)
    ret = dsec_fail(err, errno, "cannot move the EROFS image of %s into "
                                "place", digest);
  unlinkat(dfd, tmpname, 0);
  if (ret == 0)
    ret = dsec_fsync_dir(dfd, err);
  return ret;
}

/* A directory layer made by this version carries both opaque markers
 * (trusted.overlay.opaque and user.overlay.opaque); this file beside
 * rootfs/ says so.  Containers mount their overlays with userxattr, which
 * reads only the second. */
#define ROOTFS_MARKERS "rootfs.opaque-user"

static int add_user_opaque(const char *path, const struct stat *st, int flag,
                           struct FTW *ftw)
{
  char v[4];
  (void) st;
  (void) ftw;
  if (flag == FTW_D && lgetxattr(path, "trusted.overlay.opaque", v, sizeof v) > 0 &&
      v[0] == 'y' && lsetxattr(path, "user.overlay.opaque", "y", 1, 0) < 0)
    return -1;
  return 0;
}

/* A rootfs/ extracted by an earlier version has its opaque directories
 * marked in trusted.* only: the user.* marker is added (once, under the
 * layer's lock), or an overlay with userxattr would show the lower
 * layers' entries through them. */
static int upgrade_markers(int dfd, const char *rootfs, struct dsec_error **err)
{
  _cleanup_close_ int fd = -1;
  if (faccessat(dfd, ROOTFS_MARKERS, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    return 0;
  if (geteuid() == 0 &&
      nftw(rootfs, add_user_opaque, 64, FTW_PHYS | FTW_MOUNT) != 0)
    return dsec_fail(err, errno, "cannot mark the opaque directories of %s",
                     rootfs);
  fd = openat(dfd, ROOTFS_MARKERS, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return dsec_fail(err, errno, "cannot create %s", ROOTFS_MARKERS);
  return dsec_fsync_dir(dfd, err);
}

int dsec_layer_materialise(struct dsec_store *s, const char *digest,
                           enum dsec_layer_format fmt, char **path, bool *made,
                           struct dsec_error **err)
{
  _cleanup_json_ json_t *meta = dsec_layer_meta(s, digest);
  _cleanup_close_ int lock = -1;
  _cleanup_close_ int dfd = -1;
  const char *final = fmt == DSEC_FORMAT_EROFS ? "layer.erofs" : "rootfs";
  struct stat st;

  if (!meta)
    return dsec_bad_input(err, "%s is not a layer in the store", digest);
  dfd = dsec_open_dir_at(s->layers_fd, dsec_digest_hex(digest), false, err);
  if (dfd < 0)
    return -1;
  *made = false;
  /* fast path: made before, no lock needed (it appears only complete) */
  if (fstatat(dfd, final, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      (fmt != DSEC_FORMAT_DIR ||
       faccessat(dfd, ROOTFS_MARKERS, F_OK, AT_SYMLINK_NOFOLLOW) == 0))
    goto done;

  lock = dsec_store_lock(s, "layer", digest, err);
  if (lock < 0)
    return -1;
  if (fstatat(dfd, final, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (fmt == DSEC_FORMAT_DIR) {
      _cleanup_free_ char *rootfs = xasprintf("%s/layers/%s/rootfs", s->path,
                                              dsec_digest_hex(digest));
      if (upgrade_markers(dfd, rootfs, err) < 0)
        return -1;
    }
    goto done;
  }
  /* leftovers of a crashed materialisation: we hold the lock */
  clean_stale(dfd, fmt == DSEC_FORMAT_EROFS ? "layer.erofs.tmp-"
                                            : "rootfs.tmp-");

  if (fmt == DSEC_FORMAT_DIR) {
    _cleanup_free_ char *ldir = xasprintf("%s/layers/%s", s->path,
                                          dsec_digest_hex(digest));
    _cleanup_free_ char *tmp = extract_tmp(s, dfd, ldir, "rootfs", digest,
                                           meta, NULL, err);
    if (!tmp)
      return -1;
    if (renameat(dfd, tmp, dfd, "rootfs") < 0) {
      int e = errno;
      dsec_rm_rf_at(dfd, tmp, NULL);
      return dsec_fail(err, e, "cannot move layer %s into place", digest);
    }
    {
      /* extracted with both markers (tarball.c) */
      int m = openat(dfd, ROOTFS_MARKERS, O_WRONLY | O_CREAT | O_CLOEXEC,
                     0644);
      if (m < 0)
        return dsec_fail(err, errno, "cannot create %s", ROOTFS_MARKERS);
      close(m);
    }
    if (dsec_fsync_dir(dfd, err) < 0)
      return -1;
  } else {
    /* from the blob, never from rootfs/: a tree the host sees has no
     * setuid bits, the image keeps them */
    _cleanup_free_ char *tmp = NULL;
    _cleanup_free_ char *tree = NULL;
    _cleanup_free_ char *sdir = NULL;
    _cleanup_free_ char *base = NULL;
    _cleanup_close_ int shm = -1;
    struct dsec_tar_stats xs;
    struct stat sst;
    int sfd = dfd, ret;
    /* named for the store (its directory's device and inode) and the
     * layer: the stale ones we may remove are those of this layer of this
     * store, whose lock we hold; another store's conversion of the same
     * layer at the same time keeps its tree */
    if (fstat(s->fd, &sst) < 0)
      return dsec_fail(err, errno, "cannot stat the store");
    base = xasprintf("dsec-%llx.%llx-%s-erofs-tree",
                     (unsigned long long) sst.st_dev,
                     (unsigned long long) sst.st_ino, dsec_digest_hex(digest));
    clean_stale(dfd, "erofs-tree.tmp-");
    /* the tree is read once by mkfs.erofs and thrown away: in memory
     * (/dev/shm) when it fits, so that a conversion writes the image and
     * nothing else to the disk; in the store otherwise */
    if ((shm = scratch_in_memory(meta)) >= 0) {
      /* what a killed conversion of this layer left (we hold its lock):
       * our own directories only, /dev/shm being everyone's */
      clean_own_stale(shm, base);
      sfd = shm;
      sdir = xstrdup("/dev/shm");
    } else {
      free(base);
      base = xstrdup("erofs-tree");
      sdir = xasprintf("%s/layers/%s", s->path, dsec_digest_hex(digest));
    }
    tmp = extract_tmp(s, sfd, sdir, base, digest, meta, &xs, err);
    if (!tmp)
      return -1;
    tree = xasprintf("%s/%s/tree", sdir, tmp);
    ret = make_erofs(s, dfd, digest, tree, &xs, err);
    dsec_rm_rf_at(sfd, tmp, NULL);
    if (ret < 0)
      return -1;
  }
  *made = true;
done:
  *path = xasprintf("%s/layers/%s/%s", s->path, dsec_digest_hex(digest), final);
  return 0;
}

static json_t *names_of(json_t *refs, const char *digest)
{
  json_t *names = json_array();
  json_t *r;
  size_t i;
  json_array_foreach(refs, i, r)
  {
    if (strcmp(json_string_value(json_object_get(r, "digest")), digest) == 0)
      json_array_append_new(
        names, json_sprintf("%s@%s",
                            json_string_value(json_object_get(r, "name")),
                            json_string_value(json_object_get(r, "version"))));
  }
  return names;
}

static json_t *materialised(struct dsec_store *s, const char *digest)
{
  _cleanup_free_ char *dir = xasprintf("%s/rootfs", dsec_digest_hex(digest));
  _cleanup_free_ char *ero = xasprintf("%s/layer.erofs", dsec_digest_hex(digest));
  _cleanup_free_ char *pmem = xasprintf("%s/layer.pmem", dsec_digest_hex(digest));
  json_t *m = json_array();
  if (faccessat(s->layers_fd, dir, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    json_array_append_new(m, json_string("dir"));
  if (faccessat(s->layers_fd, ero, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    json_array_append_new(m, json_string("erofs"));
  if (faccessat(s->layers_fd, pmem, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    json_array_append_new(m, json_string("pmem"));
  return m;
}

/* Calls fn for every stored image record. */
static int foreach_image(struct dsec_store *s,
                         int (*fn)(json_t *img, void *ud), void *ud)
{
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int fd = openat(s->images_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  if (fd < 0 || !(d = fdopendir(fd))) {
    if (fd >= 0)
      close(fd);
    return 0;
  }
  while ((de = readdir(d))) {
    char digest[DSEC_DIGEST_LEN + 1];
    _cleanup_json_ json_t *img = NULL;
    int r;
    if (!dsec_str_has_suffix(de->d_name, ".json") ||
        strlen(de->d_name) != DSEC_SHA256_HEX_LEN + 5)
      continue;
    snprintf(digest, sizeof digest, "sha256:%.64s", de->d_name);
    img = dsec_image_record(s, digest, NULL);
    if (!img)
      continue;
    r = fn(img, ud);
    if (r)
      return r;
  }
  return 0;
}

struct users {
  const char *digest;
  json_t *images;
};

static int collect_users(json_t *img, void *ud)
{
  struct users *u = ud;
  json_t *l;
  size_t i;
  json_array_foreach(json_object_get(img, "layers"), i, l)
  {
    const char *d = json_string_value(json_object_get(l, "digest"));
    if (d && strcmp(d, u->digest) == 0) {
      json_array_append(u->images, json_object_get(img, "digest"));
      break;
    }
  }
  return 0;
}

static json_t *images_using(struct dsec_store *s, const char *digest)
{
  struct users u = { digest, json_array() };
  foreach_image(s, collect_users, &u);
  return u.images;
}

json_t *dsec_store_inspect(struct dsec_store *s, const char *ref,
                           struct dsec_error **err)
{
  char digest[DSEC_DIGEST_LEN + 1];
  enum dsec_kind kind;
  _cleanup_json_ json_t *refs = NULL;
  json_t *out;

  if (dsec_store_resolve(s, ref, digest, &kind, err) < 0)
    return NULL;
  refs = dsec_ref_list(s, err);
  if (!refs)
    return NULL;
  if (kind == DSEC_KIND_IMAGE) {
    json_t *l;
    size_t i;
    out = dsec_image_record(s, digest, err);
    if (!out)
      return NULL;
    json_object_set_new(out, "refs", names_of(refs, digest));
    json_array_foreach(json_object_get(out, "layers"), i, l)
      json_object_set_new(
        l, "materialised",
        materialised(s, json_string_value(json_object_get(l, "digest"))));
    return out;
  }
  out = dsec_layer_meta(s, digest);
  if (!out) {
    dsec_bad_input(err, "%s is not in the store", digest);
    return NULL;
  }
  json_object_set_new(out, "refs", names_of(refs, digest));
  json_object_set_new(out, "materialised", materialised(s, digest));
  json_object_set_new(out, "used_by", images_using(s, digest));
  {
    /* the EROFS image's record (compression, size, what it keeps) */
    _cleanup_free_ char *f = xasprintf("%s/layer.erofs.json",
                                       dsec_digest_hex(digest));
    _cleanup_free_ char *buf = dsec_read_file_at(s->layers_fd, f, 65536, NULL,
                                                 NULL);
    json_t *e = buf ? json_loads(buf, 0, NULL) : NULL;
    if (json_is_object(e))
      json_object_set_new(out, "erofs", e);
    else
      json_decref(e);
  }
  return out;
}

/* Export. */
struct out_file {
  int fd;
  char *tmp;   /* NULL for stdout */
  int dirfd;
  char *base;
};

static int out_open(const char *file, struct out_file *o,
                    struct dsec_error **err)
{
  _cleanup_free_ char *dir = NULL;
  char *slash;

  memset(o, 0, sizeof *o);
  o->dirfd = -1;
  if (strcmp(file, "-") == 0) {
    o->fd = STDOUT_FILENO;
    return 0;
  }
  dir = xstrdup(file);
  slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
    o->base = xstrdup(slash + 1);
  } else
    o->base = xstrdup(file);
  o->dirfd = open(slash ? (*dir ? dir : "/") : ".",
                  O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (o->dirfd < 0) {
    free(o->base);
    return dsec_error_set(err, DSEC_EXIT_INPUT, errno,
                          "cannot write %s", file);
  }
  o->fd = dsec_open_tmp_at(o->dirfd, o->base, 0644, &o->tmp, err);
  if (o->fd < 0) {
    close(o->dirfd);
    free(o->base);
    return -1;
  }
  return 0;
}

static int out_close(struct out_file *o, bool ok, struct dsec_error **err)
{
  int ret = 0;
  if (!o->tmp)
    return 0;
  if (ok)
    ret = dsec_commit_tmp_at(o->dirfd, o->fd, o->tmp, o->base, err);
  else
    unlinkat(o->dirfd, o->tmp, 0);
  close(o->fd);
  close(o->dirfd);
  free(o->tmp);
  free(o->base);
  return ok ? ret : -1;
}

/* Writes the layer's uncompressed tar stream, zstd-compressed, to fd. */
static int export_layer(struct dsec_store *s, const char *digest, json_t *meta,
                        int fd, struct dsec_error **err)
{
  _cleanup_close_ int in = dsec_store_open_blob(s, digest, err);
  const char *comp = json_string_value(json_object_get(meta, "compression"));
  struct archive *a = NULL;
  struct archive_entry *e;
  ZSTD_CCtx *z = NULL;
  char ibuf[1 << 16], obuf[1 << 16];
  int ret = 0;

  if (in < 0)
    return -1;
  if (comp && strcmp(comp, "zstd") == 0) {
    char got[DSEC_DIGEST_LEN + 1];
    struct dsec_sha256 *h = dsec_sha256_new();
    ssize_t n;
    while ((n = read(in, ibuf, sizeof ibuf)) > 0) {
      dsec_sha256_update(h, ibuf, (size_t) n);
      if (dsec_write_all(fd, ibuf, (size_t) n, err) < 0) {
        dsec_sha256_free(h);
        return -1;
      }
    }
    dsec_sha256_final(h, got);
    if (n < 0)
      return dsec_fail(err, errno, "cannot read blob %s", digest);
    if (strcmp(got, digest) != 0)
      return dsec_bad_input(err, "blob %s is corrupt: its content hashes to %s",
                            digest, got);
    return 0;
  }
  if (dsec_store_verify_blob(s, digest, err) < 0)
    return -1;
  a = archive_read_new();
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_xz(a);
  archive_read_support_filter_zstd(a);
  archive_read_support_format_raw(a);
  z = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, 3);
  if (archive_read_open_fd(a, in, 1 << 16) != ARCHIVE_OK ||
      archive_read_next_header(a, &e) != ARCHIVE_OK) {
    ret = dsec_fail(err, 0, "cannot read blob %s: %s", digest,
                    archive_error_string(a));
    goto out;
  }
  for (bool last = false; !last && ret == 0;) {
    la_ssize_t n = archive_read_data(a, ibuf, sizeof ibuf);
    ZSTD_inBuffer ib = { ibuf, n > 0 ? (size_t) n : 0, 0 };
    if (n < 0) {
      ret = dsec_fail(err, 0, "cannot read blob %s: %s", digest,
                      archive_error_string(a));
      break;
    }
    last = n == 0;
    for (;;) {
      ZSTD_outBuffer ob = { obuf, sizeof obuf, 0 };
      size_t left = ZSTD_compressStream2(z, &ob, &ib,
                                         last ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError(left)) {
        ret = dsec_fail(err, 0, "zstd: %s", ZSTD_getErrorName(left));
        break;
      }
      if (ob.pos && dsec_write_all(fd, obuf, ob.pos, err) < 0) {
        ret = -1;
        break;
      }
      if (last ? left == 0 : ib.pos == ib.size)
        break;
    }
  }
out:
  ZSTD_freeCCtx(z);
  archive_read_free(a);
  return ret;
}

static int tar_add_buf(struct archive *w, const char *name, const void *buf,
                       size_t len, struct dsec_error **err)
{
  struct archive_entry *e = archive_entry_new();
  int ret = 0;
  archive_entry_set_pathname(e, name);
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_size(e, (la_int64_t) len);
  if (archive_write_header(w, e) != ARCHIVE_OK ||
      (len && archive_write_data(w, buf, len) != (la_ssize_t) len))
    ret = dsec_fail(err, archive_errno(w), "%s: %s", name,
                    archive_error_string(w));
  archive_entry_free(e);
  return ret;
}

static int tar_add_blob(struct dsec_store *s, struct archive *w,
                        const char *digest, struct dsec_error **err)
{
  _cleanup_close_ int fd = dsec_store_open_blob(s, digest, err);
  _cleanup_free_ char *name = NULL;
  struct archive_entry *e;
  struct dsec_sha256 *h;
  char buf[1 << 16], got[DSEC_DIGEST_LEN + 1];
  struct stat st;
  ssize_t n;
  int ret = 0;

  if (fd < 0 || fstat(fd, &st) < 0)
    return -1;
  name = xasprintf("blobs/sha256/%s", dsec_digest_hex(digest));
  e = archive_entry_new();
  archive_entry_set_pathname(e, name);
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_size(e, st.st_size);
  if (archive_write_header(w, e) != ARCHIVE_OK)
    ret = dsec_fail(err, archive_errno(w), "%s", archive_error_string(w));
  archive_entry_free(e);
  h = dsec_sha256_new();
  while (ret == 0 && (n = read(fd, buf, sizeof buf)) > 0) {
    dsec_sha256_update(h, buf, (size_t) n);
    if (archive_write_data(w, buf, (size_t) n) != n)
      ret = dsec_fail(err, archive_errno(w), "%s", archive_error_string(w));
  }
  dsec_sha256_final(h, got);
  if (ret == 0 && strcmp(got, digest) != 0)
    ret = dsec_bad_input(err, "blob %s is corrupt: its content hashes to %s",
                         digest, got);
  return ret;
}

static la_ssize_t arch_fd_write(struct archive *a, void *ud, const void *buf,
                                size_t len)
{
  if (dsec_write_all(*(int *) ud, buf, len, NULL) < 0) {
    int e = errno; /* before the call, which may look libarchive up */
    archive_set_error(a, e, "write failed");
    return -1;
  }
  return (la_ssize_t) len;
}

/* An image as a tar that is both an OCI layout and a docker-archive. */
static int export_image(struct dsec_store *s, const char *digest,
                        const char *file, int fd, struct dsec_error **err)
{
  _cleanup_json_ json_t *img = dsec_image_record(s, digest, err);
  _cleanup_free_ char *index = NULL;
  _cleanup_free_ char *dman = NULL;
  struct archive *w;
  json_t *layers, *paths, *l, *tags;
  const char *cfg;
  size_t i, mlen;
  int ret = 0;

  if (!img)
    return -1;
  layers = json_object_get(img, "layers");
  cfg = json_string_value(json_object_get(img, "config_digest"));
  paths = json_array();
  json_array_foreach(layers, i, l)
  {
    const char *ld = json_string_value(json_object_get(l, "digest"));
    json_array_append_new(paths, json_sprintf("blobs/sha256/%s", ld + 7));
  }
  tags = json_array();
  {
    _cleanup_json_ json_t *refs = dsec_ref_list(s, err);
    json_t *r;
    if (!refs) {
      json_decref(tags);
      json_decref(paths);
      return -1;
    }
    json_array_foreach(refs, i, r)
    {
      if (strcmp(json_string_value(json_object_get(r, "digest")), digest) == 0)
        json_array_append_new(
          tags, json_sprintf("%s:%s",
                             json_string_value(json_object_get(r, "name")),
                             json_string_value(json_object_get(r, "version"))));
    }
  }
  {
    json_t *ij = json_pack("{s:i, s:[{s:s, s:s, s:I}]}", "schemaVersion", 2,
                           "manifests", "mediaType", DSEC_MT_OCI_MANIFEST,
                           "digest", digest, "size", (json_int_t) 0);
    json_t *dj = json_pack("[{s:o, s:o, s:o}]", "Config",
                           json_sprintf("blobs/sha256/%s", cfg + 7),
                           "RepoTags", tags, "Layers", paths);
    char *m = dsec_store_read_blob(s, digest, DSEC_MANIFEST_MAX, &mlen, err);
    if (!m) {
      json_decref(ij);
      json_decref(dj);
      return -1;
    }
    free(m);
    json_object_set_new(json_array_get(json_object_get(ij, "manifests"), 0),
                        "size", json_integer((json_int_t) mlen));
    index = json_dumps(ij, JSON_COMPACT);
    dman = json_dumps(dj, JSON_COMPACT);
    json_decref(ij);
    json_decref(dj);
  }
  w = archive_write_new();
  archive_write_set_format_pax_restricted(w);
  if (dsec_str_has_suffix(file, ".zst"))
    archive_write_add_filter_zstd(w);
  else if (dsec_str_has_suffix(file, ".gz"))
    archive_write_add_filter_gzip(w);
  archive_write_set_bytes_in_last_block(w, 1);
  if (archive_write_open(w, &fd, NULL, arch_fd_write, NULL) != ARCHIVE_OK)
    ret = dsec_fail(err, archive_errno(w), "%s", archive_error_string(w));
  if (ret == 0)
    ret = tar_add_buf(w, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}",
                      30, err);
  if (ret == 0)
    ret = tar_add_buf(w, "index.json", index, strlen(index), err);
  if (ret == 0)
    ret = tar_add_buf(w, "manifest.json", dman, strlen(dman), err);
  if (ret == 0)
    ret = tar_add_blob(s, w, digest, err);
  if (ret == 0)
    ret = tar_add_blob(s, w, cfg, err);
  json_array_foreach(layers, i, l)
  {
    if (ret < 0)
      break;
    ret = tar_add_blob(s, w, json_string_value(json_object_get(l, "digest")),
                       err);
  }
  if (ret == 0 && archive_write_close(w) != ARCHIVE_OK)
    ret = dsec_fail(err, archive_errno(w), "%s", archive_error_string(w));
  archive_write_free(w);
  return ret;
}

int dsec_store_export(struct dsec_store *s, const char *ref, const char *file,
                      json_t **record, struct dsec_error **err)
{
  char digest[DSEC_DIGEST_LEN + 1];
  enum dsec_kind kind;
  struct out_file o;
  _cleanup_json_ json_t *meta = NULL;
  int ret;

  if (dsec_store_resolve(s, ref, digest, &kind, err) < 0)
    return -1;
  if (kind == DSEC_KIND_LAYER) {
    meta = dsec_layer_meta(s, digest);
    if (!meta)
      return dsec_bad_input(err, "layer %s is incomplete", digest);
  }
  if (out_open(file, &o, err) < 0)
    return -1;
  ret = kind == DSEC_KIND_LAYER ? export_layer(s, digest, meta, o.fd, err)
                                : export_image(s, digest, file, o.fd, err);
  if (out_close(&o, ret == 0, err) < 0)
    return dsec_error_wrap(err, "export of %s", ref);
  *record = json_pack("{s:s, s:s, s:s, s:s}", "type", "export", "kind",
                      dsec_kind_name(kind), "digest", digest, "file", file);
  return 0;
}

/* Removal. */
json_t *dsec_sandbox_references(struct dsec_error **err)
{
  return dsec_sandbox_references_except(NULL, err);
}

json_t *dsec_sandbox_references_except(const json_t *skip,
                                       struct dsec_error **err)
{
  _cleanup_free_ char *root = dsec_root_dir();
  _cleanup_free_ char *dir = xasprintf("%s/sandboxes", root);
  _cleanup_closedir_ DIR *d = opendir(dir);
  json_t *refs = json_object();
  struct dirent *de;

  if (!d)
    return refs;
  while ((de = readdir(d))) {
    _cleanup_free_ char *path = NULL;
    _cleanup_free_ char *buf = NULL;
    _cleanup_json_ json_t *env = NULL;
    json_t *l;
    size_t len, i;
    const char *img;

    if (de->d_name[0] == '.' || json_object_get(skip, de->d_name))
      continue;
    path = xasprintf("%s/%s/environment.json", dir, de->d_name);
    buf = dsec_read_file_at(AT_FDCWD, path, 16 << 20, &len, NULL);
    if (!buf || !(env = json_loadb(buf, len, 0, NULL)))
      continue;
    img = json_string_value(json_object_get(json_object_get(env, "image"),
                                            "digest"));
    if (img)
      json_object_set_new(refs, img, json_string(de->d_name));
    json_array_foreach(json_object_get(env, "layers"), i, l)
    {
      const char *ld = json_string_value(json_object_get(l, "digest"));
      if (ld)
        json_object_set_new(refs, ld, json_string(de->d_name));
    }
    {
      /* its last checkpoint: what a resume or a fork boots from */
      _cleanup_free_ char *sp = xasprintf("%s/%s/state.json", dir, de->d_name);
      _cleanup_free_ char *sbuf = dsec_read_file_at(AT_FDCWD, sp, 1 << 20,
                                                    &len, NULL);
      _cleanup_json_ json_t *st = sbuf ? json_loadb(sbuf, len, 0, NULL) : NULL;
      const char *cp = json_string_value(json_object_get(st, "checkpoint"));
      if (cp)
        json_object_set_new(refs, cp, json_string(de->d_name));
    }
  }
  (void) err;
  return refs;
}

static void add_removed(json_t *removed, const char *what, const char *id,
                        int64_t freed)
{
  json_array_append_new(removed,
                        json_pack("{s:s, s:s, s:s, s:I}", "type", "removed",
                                  "what", what, "id", id, "freed_bytes",
                                  (json_int_t) freed));
}

static int64_t blob_bytes(struct dsec_store *s, const char *digest)
{
  return dsec_disk_usage_at(s->blobs_fd, dsec_digest_hex(digest));
}

static int remove_layer(struct dsec_store *s, const char *digest,
                        json_t *removed, struct dsec_error **err)
{
  const char *hex = dsec_digest_hex(digest);
  int64_t freed = dsec_disk_usage_at(s->layers_fd, hex) + blob_bytes(s, digest);

  /* metadata first: without it the layer is no longer found */
  if (unlinkat(s->blobs_fd, hex, 0) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove blob %s", digest);
  if (dsec_rm_rf_at(s->layers_fd, hex, err) < 0)
    return dsec_error_wrap(err, "layer %s (is it mounted?)", digest);
  add_removed(removed, "layer", digest, freed);
  return 0;
}

static int drop_sources(struct dsec_store *s, const char *digest)
{
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int fd = openat(s->sources_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  if (fd < 0 || !(d = fdopendir(fd))) {
    if (fd >= 0)
      close(fd);
    return 0;
  }
  while ((de = readdir(d))) {
    _cleanup_free_ char *buf = NULL;
    _cleanup_json_ json_t *j = NULL;
    size_t len;
    const char *dg;
    if (de->d_name[0] == '.')
      continue;
    buf = dsec_read_file_at(s->sources_fd, de->d_name, 65536, &len, NULL);
    if (!buf || !(j = json_loadb(buf, len, 0, NULL)))
      continue;
    dg = json_string_value(json_object_get(j, "digest"));
    if (dg && strcmp(dg, digest) == 0)
      unlinkat(s->sources_fd, de->d_name, 0);
  }
  return 0;
}

struct config_user {
  const char *image;
  const char *config;
  bool used;
};

static int config_used(json_t *img, void *ud)
{
  struct config_user *c = ud;
  const char *d = json_string_value(json_object_get(img, "digest"));
  const char *cfg = json_string_value(json_object_get(img, "config_digest"));
  if (d && cfg && strcmp(d, c->image) != 0 && strcmp(cfg, c->config) == 0)
    c->used = true;
  return 0;
}

static bool named(json_t *refs, const char *digest)
{
  _cleanup_json_ json_t *n = names_of(refs, digest);
  return json_array_size(n) > 0;
}

static int remove_image(struct dsec_store *s, const char *digest, json_t *refs,
                        json_t *sandboxes, json_t *removed,
                        struct dsec_error **err)
{
  _cleanup_json_ json_t *img = dsec_image_record(s, digest, err);
  _cleanup_free_ char *file = xasprintf("%s.json", dsec_digest_hex(digest));
  const char *cfg;
  json_t *l;
  size_t i;
  int64_t freed;

  if (!img)
    return -1;
  cfg = json_string_value(json_object_get(img, "config_digest"));
  freed = blob_bytes(s, digest);
  if (unlinkat(s->images_fd, file, 0) < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot remove image %s", digest);
  drop_sources(s, digest);
  unlinkat(s->blobs_fd, dsec_digest_hex(digest), 0);
  if (cfg && dsec_digest_valid(cfg)) {
    struct config_user cu = { digest, cfg, false };
    foreach_image(s, config_used, &cu);
    if (!cu.used) {
      freed += blob_bytes(s, cfg);
      unlinkat(s->blobs_fd, dsec_digest_hex(cfg), 0);
    }
  }
  add_removed(removed, "image", digest, freed);

  /* its layers, unless something else still needs them */
  json_array_foreach(json_object_get(img, "layers"), i, l)
  {
    const char *ld = json_string_value(json_object_get(l, "digest"));
    _cleanup_json_ json_t *users = NULL;
    if (!ld || !dsec_layer_meta(s, ld))
      continue;
    users = images_using(s, ld);
    if (json_array_size(users) > 0 || named(refs, ld) ||
        json_object_get(sandboxes, ld))
      continue;
    if (remove_layer(s, ld, removed, err) < 0)
      return -1;
  }
  return 0;
}

int dsec_store_rm(struct dsec_store *s, const char *ref, bool force,
                  json_t *removed, struct dsec_error **err)
{
  char digest[DSEC_DIGEST_LEN + 1];
  enum dsec_kind kind = DSEC_KIND_NONE;
  _cleanup_close_ int gc = -1;
  _cleanup_json_ json_t *refs = NULL;
  _cleanup_json_ json_t *sandboxes = NULL;
  _cleanup_free_ char *name = NULL;
  _cleanup_free_ char *version = NULL;
  bool by_name = false;

  gc = dsec_store_lock_gc(s, true, err);
  if (gc < 0)
    return -1;
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    if (!dsec_str_has_prefix(ref, "sha256:") &&
        dsec_ref_split(ref, &name, &version, &e) == 0) {
      int r = dsec_ref_get(s, name, version, digest, &kind, err);
      if (r < 0)
        return -1;
      by_name = r == 1;
    }
  }
  if (!by_name && dsec_store_resolve(s, ref, digest, &kind, err) < 0)
    return -1;
  kind = dsec_store_kind(s, digest);
  sandboxes = dsec_sandbox_references(err);
  refs = dsec_ref_list(s, err);
  if (!refs)
    return -1;

  if (by_name) {
    if (dsec_ref_rm(s, name, version, err) < 0)
      return -1;
    add_removed(removed, "ref", ref, 0);
    json_decref(refs);
    refs = dsec_ref_list(s, err);
    if (!refs)
      return -1;
    /* the object goes with its last name, unless something needs it */
    if (kind == DSEC_KIND_NONE || named(refs, digest) ||
        json_object_get(sandboxes, digest))
      return 0;
    if (kind == DSEC_KIND_LAYER) {
      _cleanup_json_ json_t *users = images_using(s, digest);
      if (json_array_size(users) > 0)
        return 0;
    }
  } else {
    _cleanup_json_ json_t *names = names_of(refs, digest);
    json_t *sb = json_object_get(sandboxes, digest);
    if (sb)
      return dsec_fail(err, EBUSY, "%s is in use by sandbox %s", ref,
                       json_string_value(sb));
    if (json_array_size(names) > 0 && !force) {
      _cleanup_free_ char *first =
        xstrdup(json_string_value(json_array_get(names, 0)));
      return dsec_fail(err, EBUSY, "%s is named %s%s: remove the names or "
                                   "use --force",
                       ref, first, json_array_size(names) > 1 ? " and more"
                                                              : "");
    }
    if (kind == DSEC_KIND_LAYER) {
      _cleanup_json_ json_t *users = images_using(s, digest);
      if (json_array_size(users) > 0 && !force)
        return dsec_fail(err, EBUSY, "layer %s is part of image %s: remove "
                                     "the image or use --force",
                         digest,
                         json_string_value(json_array_get(users, 0)));
    }
    for (size_t i = 0; i < json_array_size(names); i++) {
      _cleanup_free_ char *n = NULL;
      _cleanup_free_ char *v = NULL;
      const char *full = json_string_value(json_array_get(names, i));
      if (dsec_ref_split(full, &n, &v, err) < 0 ||
          dsec_ref_rm(s, n, v, err) < 0)
        return -1;
      add_removed(removed, "ref", full, 0);
    }
    json_decref(refs);
    refs = dsec_ref_list(s, err);
    if (!refs)
      return -1;
  }
  if (kind == DSEC_KIND_IMAGE)
    return remove_image(s, digest, refs, sandboxes, removed, err);
  return remove_layer(s, digest, removed, err);
}
