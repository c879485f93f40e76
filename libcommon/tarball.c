#include <config.h>

#include "tarball.h"

#include <archive.h>
#include <archive_entry.h>
#include "archive-lazy.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <iconv.h>
#include <langinfo.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include "fsutil.h"
#include "json.h"
#include "log.h"

#define CHUNK (256 * 1024)

const char *dsec_compression_sniff(const unsigned char *b, size_t n,
                                   const char **unsupported)
{
  static const struct {
    const char *name;
    const char *magic;
    size_t len;
    bool supported;
  } magics[] = {
    { "gzip", "\x1f\x8b", 2, true },
    { "zstd", "\x28\xb5\x2f\xfd", 4, true },
    { "xz", "\xfd" "7zXZ\0", 6, true },
    { "bzip2", "BZh", 3, false },
    { "lz4", "\x04\x22\x4d\x18", 4, false },
    { "lzip", "LZIP", 4, false },
    { "compress", "\x1f\x9d", 2, false },
    { "lzma", "\x5d\x00\x00", 3, false },
  };

  if (unsupported)
    *unsupported = NULL;
  for (size_t i = 0; i < ARRAY_SIZE(magics); i++)
    if (n >= magics[i].len && memcmp(b, magics[i].magic, magics[i].len) == 0) {
      if (magics[i].supported)
        return magics[i].name;
      if (unsupported)
        *unsupported = magics[i].name;
      return NULL;
    }
  /* A tar stream has "ustar" at offset 257; anything else that is not a
   * known compression is left for the tar reader to judge. */
  return "none";
}

/* Stage 1: the bytes of the file, hashed as read. */
struct src {
  int fd;
  struct dsec_sha256 *hash;
  uint64_t n;
  unsigned char *buf;
  size_t primed; /* bytes already in buf from sniffing */
  int errnum;
};

static la_ssize_t src_read(struct archive *a, void *ud, const void **out)
{
  struct src *s = ud;
  ssize_t r;

  if (s->primed) {
    r = (ssize_t) s->primed;
    s->primed = 0;
  } else {
    do
      r = read(s->fd, s->buf, CHUNK);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
      /* the errno read before the call: its first call looks libarchive
       * up (archive-lazy.h) */
      s->errnum = errno;
      archive_set_error(a, s->errnum, "read failed");
      return -1;
    }
  }
  if (s->hash)
    dsec_sha256_update(s->hash, s->buf, (size_t) r);
  s->n += (uint64_t) r;
  *out = s->buf;
  return r;
}

/* Stage 2: the decompressed stream, hashed (diff_id) and bounded.  gzip
 * goes through zlib, which checks each member's CRC (libarchive's gzip
 * reader does not, and for a plain tarball that CRC is the only integrity
 * check there is); zstd and xz through libarchive's raw reader. */
struct mid {
  struct archive *raw;
  struct src *src;
  bool gzip;
  bool z_init, z_end, src_eof;
  z_stream z;
  struct dsec_sha256 *hash;
  uint64_t n;
  uint64_t max;
  unsigned char *buf;
  bool bomb;
  bool raw_failed;
};

static la_ssize_t gzip_read(struct archive *a, struct mid *m)
{
  for (;;) {
    size_t produced;
    int zr;

    if (m->z.avail_in == 0 && !m->src_eof) {
      const void *b;
      la_ssize_t r = src_read(a, m->src, &b);
      if (r < 0)
        return -1;
      if (r == 0)
        m->src_eof = true;
      m->z.next_in = (Bytef *) b;
      m->z.avail_in = (uInt) r;
    }
    if (m->z_end) {
      if (m->z.avail_in == 0) {
        if (m->src_eof)
          return 0;
        continue;
      }
      if (m->z.next_in[0] != 0x1f) {
        /* trailing bytes after the last member (padding): ignored, as
         * gzip(1) does; they are hashed with the rest of the file */
        m->z.avail_in = 0;
        continue;
      }
      inflateReset(&m->z);
      m->z_end = false;
    }
    m->z.next_out = m->buf;
    m->z.avail_out = CHUNK;
    zr = inflate(&m->z, Z_NO_FLUSH);
    produced = CHUNK - m->z.avail_out;
    if (zr == Z_STREAM_END)
      m->z_end = true;
    else if (zr == Z_BUF_ERROR && m->z.avail_in == 0 && m->src_eof) {
      archive_set_error(a, EINVAL, "truncated gzip stream");
      return -1;
    } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
      archive_set_error(a, EINVAL, "corrupt gzip stream: %s",
                        m->z.msg ? m->z.msg : "inflate failed");
      return -1;
    }
    if (produced)
      return (la_ssize_t) produced;
    if (m->z.avail_in == 0 && m->src_eof && !m->z_end) {
      archive_set_error(a, EINVAL, "truncated gzip stream");
      return -1;
    }
  }
}

static la_ssize_t mid_read(struct archive *a, void *ud, const void **out)
{
  struct mid *m = ud;
  la_ssize_t r = m->gzip ? gzip_read(a, m)
                         : archive_read_data(m->raw, m->buf, CHUNK);

  if (r < 0) {
    m->raw_failed = true;
    if (!m->gzip) {
      const char *msg = archive_error_string(m->raw);
      archive_set_error(a, archive_errno(m->raw), "%s",
                        msg ? msg : "cannot decompress the stream");
    }
    return -1;
  }
  m->n += (uint64_t) r;
  if (m->n > m->max) {
    m->bomb = true;
    archive_set_error(a, EFBIG, "uncompressed stream exceeds the limit");
    return -1;
  }
  if (m->hash)
    dsec_sha256_update(m->hash, m->buf, (size_t) r);
  *out = m->buf;
  return r;
}

/* What check_entry found a member to be. */
enum member {
  MEMBER_PLAIN,
  MEMBER_ROOT,     /* "." or "./": the layer's top directory */
  MEMBER_WHITEOUT, /* .wh.NAME: NAME is deleted */
  MEMBER_OPAQUE,   /* .wh..wh..opq: the directory hides lower layers */
  MEMBER_DEVICE,   /* a device node: counted, never written */
};

/* Cleans a member path: strips "./" and "/" runs; rejects absolute paths,
 * "..", empty names and non-printable bytes.  Returns a new string ("" for
 * the top directory). */
static char *clean_path(const char *raw, const char *what, const char *orig,
                        struct dsec_error **err)
{
  size_t n = strlen(raw);
  char *out = xmalloc(n + 1);
  size_t o = 0;
  const char *p = raw;

  if (raw[0] == '/') {
    free(out);
    dsec_bad_input(err, "member `%s`: %s is an absolute path", orig, what);
    return NULL;
  }
  while (*p) {
    const char *end = strchr(p, '/');
    size_t len = end ? (size_t) (end - p) : strlen(p);

    if (len == 2 && p[0] == '.' && p[1] == '.') {
      free(out);
      dsec_bad_input(err, "member `%s`: %s contains `..`", orig, what);
      return NULL;
    }
    if (len > 0 && !(len == 1 && p[0] == '.')) {
      if (o)
        out[o++] = '/';
      memcpy(out + o, p, len);
      o += len;
    }
    p += len;
    while (*p == '/')
      p++;
  }
  out[o] = '\0';
  for (size_t i = 0; i < o; i++)
    if ((unsigned char) out[i] < 0x20 || out[i] == 0x7f) {
      free(out);
      dsec_bad_input(err, "member `%s`: control character in %s", orig, what);
      return NULL;
    }
  return out;
}

/* Path components, for resolving symlink targets lexically. */
struct comps {
  char **v;
  size_t n, cap;
};

static void comps_push(struct comps *c, const char *s, size_t len)
{
  if (c->n == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 16;
    c->v = xrealloc(c->v, sizeof *c->v * c->cap);
  }
  c->v[c->n++] = xstrndup(s, len);
}

static void comps_clear(struct comps *c)
{
  for (size_t i = 0; i < c->n; i++)
    free(c->v[i]);
  c->n = 0;
}

static char *comps_join(const struct comps *c)
{
  size_t len = 1;
  char *out, *o;
  for (size_t i = 0; i < c->n; i++)
    len += strlen(c->v[i]) + 1;
  out = o = xmalloc(len);
  *o = '\0';
  for (size_t i = 0; i < c->n; i++)
    o += sprintf(o, "%s%s", i ? "/" : "", c->v[i]);
  return out;
}

/* Walks target from the directory in c, through the layer's earlier
 * symlinks (links: path -> target).  Returns true when it climbs above the
 * layer's top.  Absolute targets resolve inside the sandbox's root (as
 * every image's /etc/alternatives links do): they never escape. */
static bool walk_escapes(json_t *links, struct comps *c, const char *target,
                         int *hops)
{
  const char *p = target;

  if (target[0] == '/')
    return false;
  while (*p) {
    const char *end = strchr(p, '/');
    size_t len = end ? (size_t) (end - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') {
      if (c->n == 0)
        return true;
      free(c->v[--c->n]);
    } else if (len > 0 && !(len == 1 && p[0] == '.')) {
      _cleanup_free_ char *joined = NULL;
      const char *next;
      comps_push(c, p, len);
      joined = comps_join(c);
      next = json_string_value(json_object_get(links, joined));
      if (next) {
        if (++*hops > 40)
          return true; /* a loop: refuse rather than guess */
        free(c->v[--c->n]);
        if (next[0] == '/')
          return false;
        if (walk_escapes(links, c, next, hops))
          return true;
      }
    }
    p += len;
    while (*p == '/')
      p++;
  }
  return false;
}

static bool symlink_escapes(json_t *links, const char *path, const char *target)
{
  struct comps c = { 0 };
  const char *p = path;
  int hops = 0;
  bool r;

  /* start in the link's directory */
  for (const char *slash; (slash = strchr(p, '/')); p = slash + 1)
    comps_push(&c, p, (size_t) (slash - p));
  r = walk_escapes(links, &c, target, &hops);
  comps_clear(&c);
  free(c.v);
  return r;
}

/* The first earlier symlink member that path goes through, or NULL. */
static const char *through_symlink(json_t *links, const char *path)
{
  _cleanup_free_ char *p = xstrdup(path);
  for (char *slash = strchr(p, '/'); slash; slash = strchr(slash + 1, '/')) {
    json_t *hit;
    *slash = '\0';
    hit = json_object_get(links, p);
    *slash = '/';
    if (hit) {
      static __thread char which[4096];
      snprintf(which, sizeof which, "%.*s", (int) (slash - p), p);
      return which;
    }
  }
  return NULL;
}

/* What the walk over a stream's members carries from one to the next. */
struct walk {
  const struct dsec_tar_policy *p;
  json_t *links;       /* symlink members so far: path -> target */
  char **protect;      /* the policy's protect paths, cleaned ("" none) */
  size_t nprotect;
  uint64_t apparent;   /* rewrite: the members' sizes so far */
  uint64_t max;        /* bound on the stream (and, rewriting, on sizes) */
  bool rewrite;
  struct dsec_tar_stats *st;
};

static bool overlay_xattr(const char *name)
{
  /* user.overlay.overlay.* (what overlayfs makes of a user.overlay.*
   * xattr set through it) is matched by the prefix as well */
  return dsec_str_has_prefix(name, "trusted.overlay.") ||
         dsec_str_has_prefix(name, "user.overlay.");
}

/* Removes the xattrs for which drop(name) holds; returns how many names
 * went (a pax header may give one twice, as SCHILY.xattr and as
 * LIBARCHIVE.xattr: counted once). */
static uint64_t remove_xattrs(struct archive_entry *e,
                              bool (*drop)(const char *name))
{
  const char *name;
  const void *value;
  size_t size;
  struct archive_entry *keep = NULL;
  _cleanup_json_ json_t *names = json_object();
  uint64_t n;

  archive_entry_xattr_reset(e);
  while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK)
    if (drop(name))
      json_object_set_new(names, name, json_true());
  n = json_object_size(names);
  if (n == 0)
    return 0;
  keep = archive_entry_new();
  archive_entry_xattr_reset(e);
  while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK)
    if (!drop(name))
      archive_entry_xattr_add_entry(keep, name, value, size);
  archive_entry_xattr_clear(e);
  archive_entry_xattr_reset(keep);
  while (archive_entry_xattr_next(keep, &name, &value, &size) == ARCHIVE_OK)
    archive_entry_xattr_add_entry(e, name, value, size);
  archive_entry_free(keep);
  return n;
}

static bool caps_xattr(const char *name)
{
  return strcmp(name, "security.capability") == 0;
}

/* The first xattr of e for which match(name) holds, or NULL. */
static const char *find_xattr(struct archive_entry *e,
                              bool (*match)(const char *name))
{
  const char *name;
  const void *value;
  size_t size;

  archive_entry_xattr_reset(e);
  while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK)
    if (match(name))
      return name;
  return NULL;
}

/* path (cleaned, "" the top) is prot or below it. */
static bool at_or_below(const char *path, const char *prot)
{
  size_t n = strlen(prot);
  return strncmp(path, prot, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* path is a directory above prot ("" is above everything). */
static bool above(const char *path, const char *prot)
{
  size_t n = strlen(path);
  if (n == 0)
    return *prot != '\0';
  return strncmp(prot, path, n) == 0 && prot[n] == '/';
}

/* A checkpoint never carries a change to a protected path: what the
 * member at path (of kind, type) would change is checked against each. */
static int check_protect(const struct walk *w, const char *path,
                         enum member kind, mode_t type, bool hardlink,
                         const char *raw, struct dsec_error **err)
{
  _cleanup_free_ char *target = NULL;
  const char *slash = strrchr(path, '/');

  if (kind == MEMBER_WHITEOUT)
    target = slash ? xasprintf("%.*s/%s", (int) (slash - path), path,
                               slash + 5)
                   : xstrdup(path + 4);
  else if (kind == MEMBER_OPAQUE)
    target = slash ? xstrndup(path, (size_t) (slash - path)) : xstrdup("");
  else
    target = xstrdup(path);
  for (size_t i = 0; i < w->nprotect; i++) {
    const char *prot = w->protect[i];
    if (kind == MEMBER_ROOT)
      continue;
    if (kind == MEMBER_WHITEOUT && (at_or_below(target, prot) ||
                                    above(target, prot)))
      return dsec_bad_input(err, "member `%s` deletes /%s, which holds or "
                                 "is the protected path /%s", raw, target,
                            prot);
    if (kind == MEMBER_OPAQUE && (at_or_below(target, prot) ||
                                  above(target, prot)))
      return dsec_bad_input(err, "member `%s` makes /%s opaque, which holds "
                                 "or is the protected path /%s", raw, target,
                            prot);
    if (kind == MEMBER_PLAIN) {
      if (at_or_below(target, prot))
        return dsec_bad_input(err, "member `%s` is at or below the protected "
                                   "path /%s", raw, prot);
      if (above(target, prot) && (type != AE_IFDIR || hardlink))
        return dsec_bad_input(err, "member `%s` replaces /%s, a parent of "
                                   "the protected path /%s, with a "
                                   "non-directory", raw, target, prot);
    }
  }
  return 0;
}

static int check_entry(struct walk *w, struct archive_entry *e, char **clean,
                       enum member *kind, struct dsec_error **err)
{
  const struct dsec_tar_policy *p = w->p;
  json_t *links = w->links;
  const char *raw = archive_entry_pathname(e);
  const char *hl = archive_entry_hardlink(e);
  mode_t type = archive_entry_filetype(e);
  mode_t mode = archive_entry_mode(e);
  _cleanup_free_ char *path = NULL;
  const char *base;
  int ret;

  if (!raw || !*raw)
    return dsec_bad_input(err, "member with an empty name");
  path = clean_path(raw, "its path", raw, err);
  if (!path)
    return -1;
  {
    /* overlayfs's own metadata: only overlayfs may make it, never a
     * tarball (a redirect or an opaque marker of the layer's choosing) */
    const char *x = find_xattr(e, overlay_xattr);
    if (x && !p->strip_overlay)
      return dsec_bad_input(err, "member `%s`: overlay metadata (xattr %s) "
                                 "on untrusted input", raw, x);
    if (x)
      w->st->stripped_overlay_xattrs += remove_xattrs(e, overlay_xattr);
  }
  if (!*path) {
    if (type != AE_IFDIR)
      return dsec_bad_input(err, "member `%s`: the top is not a directory",
                            raw);
    *kind = MEMBER_ROOT;
    *clean = steal_pointer(&path);
    return 0;
  }
  {
    const char *via = through_symlink(links, path);
    if (via)
      return dsec_bad_input(err, "member `%s` goes through the symlink `%s`",
                            raw, via);
  }

  if (hl) {
    _cleanup_free_ char *t = clean_path(hl, "its hardlink target", raw, err);
    if (!t)
      return -1;
    if (!*t)
      return dsec_bad_input(err, "member `%s`: hardlink to the top", raw);
    if (through_symlink(links, t))
      return dsec_bad_input(err, "member `%s`: hardlink target goes through "
                                 "the symlink `%s`", raw,
                            through_symlink(links, t));
  } else {
    switch (type) {
    case AE_IFREG:
    case AE_IFDIR:
    case AE_IFIFO:
      break;
    case AE_IFLNK: {
      const char *t = archive_entry_symlink(e);
      if (!t || !*t)
        return dsec_bad_input(err, "member `%s`: symlink without a target",
                              raw);
      if (symlink_escapes(links, path, t))
        return dsec_bad_input(err, "member `%s`: symlink target `%s` points "
                                   "out of the layer", raw, t);
      break;
    }
    case AE_IFCHR:
    case AE_IFBLK:
      if (p->refuse_devices)
        return dsec_bad_input(err, "member `%s`: device nodes are not allowed "
                                   "in a sandbox's layer", raw);
      /* an image's /dev (a sandbox gets its own): counted and dropped,
       * never made on the host nor in an image */
      w->st->device_nodes++;
      *kind = MEMBER_DEVICE;
      *clean = steal_pointer(&path);
      return 0;
    case AE_IFSOCK:
      return dsec_bad_input(err, "member `%s`: sockets are not allowed in a "
                                 "layer", raw);
    default:
      return dsec_bad_input(err, "member `%s`: unknown file type 0%o", raw,
                            (unsigned) type);
    }
  }

  if (type == AE_IFREG) {
    /* kept in the blob, counted; what a layer becomes on the host (a
     * directory) strips them unless the operator trusted the layer
     * (keep_setuid), an EROFS image keeps them: they act only in a
     * sandbox's user namespace, under no_new_privs.  A hardlink's mode
     * is its target's: stripped alike, counted once. */
    bool strip = p->strip_setuid && !p->keep_setuid;
    bool caps = find_xattr(e, caps_xattr) != NULL;
    if (mode & (S_ISUID | S_ISGID)) {
      uint64_t *uid = strip ? &w->st->stripped_setuid : &w->st->setuid_files;
      uint64_t *gid = strip ? &w->st->stripped_setgid : &w->st->setgid_files;
      if (!hl && (mode & S_ISUID))
        (*uid)++;
      if (!hl && (mode & S_ISGID))
        (*gid)++;
      if (strip)
        archive_entry_set_perm(e, mode & ~(mode_t) (S_ISUID | S_ISGID) &
                                    07777);
    }
    if (caps && strip)
      w->st->stripped_capabilities += remove_xattrs(e, caps_xattr);
    else if (caps && !hl)
      w->st->capability_files++;
  }

  base = strrchr(path, '/');
  base = base ? base + 1 : path;
  *kind = MEMBER_PLAIN;
  if (strncmp(base, ".wh.", 4) == 0) {
    if (strcmp(base, ".wh..wh..opq") == 0)
      *kind = MEMBER_OPAQUE;
    else if (base[4] == '\0' || strcmp(base + 4, ".") == 0 ||
             strcmp(base + 4, "..") == 0)
      return dsec_bad_input(err, "member `%s`: malformed whiteout", raw);
    else
      *kind = MEMBER_WHITEOUT;
    if (type != AE_IFREG || hl || archive_entry_size(e) != 0)
      return dsec_bad_input(err, "member `%s`: a whiteout must be an empty "
                                 "regular file", raw);
  }
  ret = check_protect(w, path, *kind, type, hl != NULL, raw, err);
  if (ret < 0)
    return ret;
  if (w->rewrite && !hl && type == AE_IFREG) {
    /* a sparse file's holes are written out (as holes) too: bounded */
    la_int64_t size = archive_entry_size(e);
    w->apparent += size > 0 ? (uint64_t) size : 0;
    if (w->apparent > w->max)
      return dsec_bad_input(err, "member `%s`: the members' sizes exceed the "
                                 "limit of %llu bytes", raw,
                            (unsigned long long) w->max);
  }
  /* later members see this one: a symlink is recorded, anything else at
   * the same path replaces it */
  if (type == AE_IFLNK && !hl)
    json_object_set_new(links, path, json_string(archive_entry_symlink(e)));
  else if (json_object_size(links))
    json_object_del(links, path);
  *clean = steal_pointer(&path);
  return 0;
}

struct pipeline {
  struct src src;
  struct mid mid;
  struct archive *raw;
  struct archive *tar;
};

static void pipeline_close(struct pipeline *pl)
{
  if (pl->tar)
    archive_read_free(pl->tar);
  if (pl->raw)
    archive_read_free(pl->raw);
  if (pl->mid.z_init)
    inflateEnd(&pl->mid.z);
  dsec_sha256_free(pl->src.hash);
  dsec_sha256_free(pl->mid.hash);
  free(pl->src.buf);
  free(pl->mid.buf);
  memset(pl, 0, sizeof *pl);
}

/* hashed: the digests of what is read are wanted (not by a rewrite,
 * whose output is what gets stored, and hashed) */
static int pipeline_open(struct pipeline *pl, int fd,
                         const struct dsec_tar_policy *p, bool hashed,
                         struct dsec_tar_stats *st, struct dsec_error **err)
{
  const char *unsupported;
  struct archive_entry *e;
  ssize_t r;

  memset(pl, 0, sizeof *pl);
  pl->src.fd = fd;
  pl->src.hash = hashed ? dsec_sha256_new() : NULL;
  pl->src.buf = xmalloc(CHUNK);
  pl->mid.hash = hashed ? dsec_sha256_new() : NULL;
  pl->mid.buf = xmalloc(CHUNK);
  pl->mid.max = p->max_size ? p->max_size : DSEC_DEFAULT_MAX_SIZE;

  do
    r = read(fd, pl->src.buf, CHUNK);
  while (r < 0 && errno == EINTR);
  if (r < 0)
    return dsec_fail(err, errno, "read failed");
  if (r == 0)
    return dsec_bad_input(err, "empty file: not a tar archive");
  pl->src.primed = (size_t) r;
  st->compression = dsec_compression_sniff(pl->src.buf, (size_t) r,
                                           &unsupported);
  if (!st->compression)
    return dsec_bad_input(err, "unsupported compression: %s (dsec reads "
                               "tar, gzip, zstd and xz)", unsupported);

  pl->mid.src = &pl->src;
  if (strcmp(st->compression, "gzip") == 0) {
    pl->mid.gzip = true;
    if (inflateInit2(&pl->mid.z, 16 + MAX_WBITS) != Z_OK)
      return dsec_fail(err, ENOMEM, "zlib");
    pl->mid.z_init = true;
  } else {
    const char *msg;
    pl->raw = archive_read_new();
    pl->mid.raw = pl->raw;
    /* built in or not at all: without libzstd or liblzma, libarchive
     * would run zstd or xz from PATH, which in an extraction is the
     * chroot's, the layer's own */
    if (archive_read_support_filter_zstd(pl->raw) != ARCHIVE_OK ||
        archive_read_support_filter_xz(pl->raw) != ARCHIVE_OK)
      return dsec_fail(err, 0, "this libarchive has no built-in zstd or xz "
                               "decompressor: %s",
                       archive_error_string(pl->raw));
    archive_read_support_format_raw(pl->raw);
    if (archive_read_open(pl->raw, &pl->src, NULL, src_read, NULL) !=
          ARCHIVE_OK ||
        archive_read_next_header(pl->raw, &e) != ARCHIVE_OK) {
      msg = archive_error_string(pl->raw);
      return dsec_bad_input(err, "cannot read the stream: %s",
                            msg ? msg : "unreadable");
    }
  }

  pl->tar = archive_read_new();
  archive_read_support_format_tar(pl->tar);
  if (archive_read_open(pl->tar, &pl->mid, NULL, mid_read, NULL) !=
      ARCHIVE_OK) {
    const char *msg = archive_error_string(pl->tar);
    if (pl->mid.bomb)
      return dsec_bad_input(err, "uncompressed size exceeds the limit of %llu "
                                 "bytes (a decompression bomb? raise it with "
                                 "--max-size)",
                            (unsigned long long) pl->mid.max);
    if (pl->src.errnum)
      return dsec_fail(err, pl->src.errnum, "read failed");
    return dsec_bad_input(err, "not a tar archive: %s",
                          msg ? msg : "unreadable");
  }
  return 0;
}

static int pipeline_error(struct pipeline *pl, struct archive *a,
                          const char *member, struct dsec_error **err)
{
  const char *msg = archive_error_string(a);
  if (pl->src.errnum)
    return dsec_fail(err, pl->src.errnum, "read failed");
  if (pl->mid.bomb)
    return dsec_bad_input(err, "uncompressed size exceeds the limit of %llu "
                               "bytes (a decompression bomb? raise it with "
                               "--max-size)",
                          (unsigned long long) pl->mid.max);
  if (member)
    return dsec_bad_input(err, "member `%s`: %s", member,
                          msg ? msg : "read error");
  return dsec_bad_input(err, "%s", msg ? msg : "cannot read the archive");
}

/* After the tar end marker: consume and hash the rest, so both digests
 * cover the whole input. */
static int pipeline_drain(struct pipeline *pl, struct dsec_tar_stats *st,
                          struct dsec_error **err)
{
  const void *b;
  for (;;) {
    la_ssize_t r = mid_read(pl->tar, &pl->mid, &b);
    if (r < 0)
      return pipeline_error(pl, pl->tar, NULL, err);
    if (r == 0)
      break;
  }
  for (;;) {
    ssize_t r = read(pl->src.fd, pl->src.buf, CHUNK);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return dsec_fail(err, errno, "read failed");
    }
    if (r == 0)
      break;
    if (pl->src.hash)
      dsec_sha256_update(pl->src.hash, pl->src.buf, (size_t) r);
    pl->src.n += (uint64_t) r;
  }
  if (pl->src.hash)
    dsec_sha256_final(pl->src.hash, st->digest);
  pl->src.hash = NULL;
  if (pl->mid.hash)
    dsec_sha256_final(pl->mid.hash, st->diff_id);
  pl->mid.hash = NULL;
  st->size = pl->src.n;
  st->uncompressed_size = pl->mid.n;
  return 0;
}

/* Reads the current member's data; with disk set, writes it there, with
 * tw set, into that archive (holes as zeros, which the pax writer keeps
 * as holes of a sparse member). */
static int copy_data(struct pipeline *pl, struct archive *disk,
                     struct archive *tw, la_int64_t size, const char *member,
                     struct dsec_error **err)
{
  static const char zeros[65536];
  la_int64_t done = 0;

  for (;;) {
    const void *buf;
    size_t n;
    la_int64_t off;
    int r = archive_read_data_block(pl->tar, &buf, &n, &off);
    if (r == ARCHIVE_EOF)
      break;
    if (r < ARCHIVE_OK)
      return pipeline_error(pl, pl->tar, member, err);
    if (disk && archive_write_data_block(disk, buf, n, off) < ARCHIVE_OK)
      return dsec_fail(err, archive_errno(disk), "member `%s`: %s", member,
                       archive_error_string(disk));
    if (!tw)
      continue;
    if (off < done)
      return dsec_bad_input(err, "member `%s`: its data blocks overlap",
                            member);
    for (; done < off; ) {
      size_t k = off - done < (la_int64_t) sizeof zeros ? (size_t) (off - done)
                                                       : sizeof zeros;
      if (archive_write_data(tw, zeros, k) < 0)
        return dsec_fail(err, archive_errno(tw), "member `%s`: %s", member,
                         archive_error_string(tw));
      done += (la_int64_t) k;
    }
    if (n && archive_write_data(tw, buf, n) < 0)
      return dsec_fail(err, archive_errno(tw), "member `%s`: %s", member,
                       archive_error_string(tw));
    done += (la_int64_t) n;
  }
  /* a hole at the end */
  while (tw && done < size) {
    size_t k = size - done < (la_int64_t) sizeof zeros ? (size_t) (size - done)
                                                      : sizeof zeros;
    if (archive_write_data(tw, zeros, k) < 0)
      return dsec_fail(err, archive_errno(tw), "member `%s`: %s", member,
                       archive_error_string(tw));
    done += (la_int64_t) k;
  }
  return 0;
}

/* The walk shared by scan and extract. */
struct opaque_list {
  char **v;
  size_t n;
};

/* Reads every member of fd and checks it; with disk, extracts it (opaque
 * directories collected in opq); with tw, writes it to that archive. */
static int run_pipeline(int fd, const struct dsec_tar_policy *p,
                        struct archive *disk, struct opaque_list *opq,
                        struct archive *tw, struct dsec_tar_stats *st,
                        struct dsec_error **err)
{
  struct pipeline pl;
  _cleanup_json_ json_t *links = json_object();
  struct walk w = { .p = p, .links = links, .rewrite = tw != NULL, .st = st };
  int ret;

  memset(st, 0, sizeof *st);
  for (const char *const *x = p->protect; x && *x; x++) {
    char *c = clean_path(*x + (**x == '/'), "a protected path", *x, err);
    if (!c) {
      ret = -1;
      goto out_prot;
    }
    w.protect = xrealloc(w.protect, sizeof *w.protect * (w.nprotect + 1));
    w.protect[w.nprotect++] = c;
  }
  ret = pipeline_open(&pl, fd, p, tw == NULL, st, err);
  w.max = pl.mid.max;
  if (ret < 0)
    goto out;

  for (;;) {
    struct archive_entry *e;
    _cleanup_free_ char *path = NULL;
    enum member kind = MEMBER_PLAIN;
    int r = archive_read_next_header(pl.tar, &e);

    if (r == ARCHIVE_EOF)
      break;
    if (r < ARCHIVE_WARN) {
      ret = pipeline_error(&pl, pl.tar, NULL, err);
      goto out;
    }
    if (++st->entries > DSEC_MAX_ENTRIES) {
      ret = dsec_bad_input(err, "more than %llu members",
                           (unsigned long long) DSEC_MAX_ENTRIES);
      goto out;
    }
    ret = check_entry(&w, e, &path, &kind, err);
    if (ret < 0)
      goto out;
    if (kind == MEMBER_DEVICE && (tw || disk)) {
      ret = copy_data(&pl, NULL, NULL, 0, path, err);
      if (ret < 0)
        goto out;
      continue;
    }

    if (tw) {
      if (kind == MEMBER_ROOT) {
        ret = copy_data(&pl, NULL, NULL, 0, path, err);
        if (ret < 0)
          goto out;
        continue;
      }
      archive_entry_set_pathname(e, path);
      if (archive_entry_hardlink(e)) {
        _cleanup_free_ char *t =
          clean_path(archive_entry_hardlink(e), "", path, NULL);
        archive_entry_set_hardlink(e, t);
      }
      archive_entry_set_uname(e, NULL);
      archive_entry_set_gname(e, NULL);
      archive_entry_unset_atime(e);
      archive_entry_unset_ctime(e);
      archive_entry_unset_birthtime(e);
      if (archive_write_header(tw, e) < ARCHIVE_WARN) {
        ret = dsec_fail(err, archive_errno(tw), "member `%s`: %s", path,
                        archive_error_string(tw));
        goto out;
      }
    }
    if (disk) {
      char *slash = strrchr(path, '/');
      switch (kind) {
      case MEMBER_ROOT:
        archive_entry_set_pathname(e, ".");
        break;
      case MEMBER_OPAQUE:
        opq->v = xrealloc(opq->v, sizeof *opq->v * (opq->n + 1));
        opq->v[opq->n++] = slash ? xstrndup(path, (size_t) (slash - path))
                                 : xstrdup(".");
        continue;
      case MEMBER_WHITEOUT: {
        _cleanup_free_ char *target =
          slash ? xasprintf("%.*s/%s", (int) (slash - path), path, slash + 5)
                : xstrdup(path + 4);
        archive_entry_set_pathname(e, target);
        archive_entry_set_filetype(e, AE_IFCHR);
        archive_entry_set_perm(e, 0);
        archive_entry_set_rdev(e, 0);
        archive_entry_set_size(e, 0);
        archive_entry_xattr_clear(e);
        break;
      }
      case MEMBER_PLAIN:
      case MEMBER_DEVICE: /* (skipped above) */
        archive_entry_set_pathname(e, path);
        if (archive_entry_hardlink(e)) {
          _cleanup_free_ char *t =
            clean_path(archive_entry_hardlink(e), "", path, NULL);
          archive_entry_set_hardlink(e, t);
        }
        break;
      }
      if (archive_write_header(disk, e) < ARCHIVE_WARN) {
        ret = dsec_fail(err, archive_errno(disk), "member `%s`: %s", path,
                        archive_error_string(disk));
        goto out;
      }
    }
    ret = copy_data(&pl, disk, tw, archive_entry_size(e), path, err);
    if (ret < 0)
      goto out;
    if (disk && archive_write_finish_entry(disk) < ARCHIVE_WARN) {
      ret = dsec_fail(err, archive_errno(disk), "member `%s`: %s", path,
                      archive_error_string(disk));
      goto out;
    }
  }
  ret = pipeline_drain(&pl, st, err);

out:
  pipeline_close(&pl);
out_prot:
  for (size_t i = 0; i < w.nprotect; i++)
    free(w.protect[i]);
  free(w.protect);
  return ret;
}

int dsec_tar_scan(int fd, const struct dsec_tar_policy *p,
                  struct dsec_tar_stats *st, struct dsec_error **err)
{
  return run_pipeline(fd, p, NULL, NULL, NULL, st, err);
}

struct out_cb {
  dsec_write_fn fn;
  void *ud;
  struct dsec_error **err;
};

static la_ssize_t out_write(struct archive *a, void *ud, const void *buf,
                            size_t len)
{
  struct out_cb *o = ud;
  if (o->fn(o->ud, buf, len, o->err) < 0) {
    archive_set_error(a, EIO, "%s", (*o->err) ? (*o->err)->msg : "write failed");
    return -1;
  }
  return (la_ssize_t) len;
}

/* A pax archive writing to out (zstd-compressed when zstd is set). */
static struct archive *writer_open(struct out_cb *out, bool zstd,
                                   struct dsec_error **err)
{
  struct archive *w = archive_write_new();
  archive_write_set_format_pax_restricted(w);
  archive_write_set_bytes_in_last_block(w, 1);
  if (zstd) {
    archive_write_add_filter_zstd(w);
    archive_write_set_filter_option(w, "zstd", "compression-level", "3");
  }
  if (archive_write_open(w, out, NULL, out_write, NULL) != ARCHIVE_OK) {
    dsec_fail(err, archive_errno(w), "cannot start archive: %s",
              archive_error_string(w));
    archive_write_free(w);
    return NULL;
  }
  return w;
}

int dsec_tar_rewrite(int fd, const struct dsec_tar_policy *p,
                     dsec_write_fn fn, void *ud, bool zstd,
                     struct dsec_tar_stats *st, struct dsec_error **err)
{
  struct out_cb out = { fn, ud, err };
  struct dsec_error *e = NULL;
  struct archive *w;
  int ret;

  /* errors of the writer's callback land in e, the walk's in err */
  out.err = &e;
  w = writer_open(&out, zstd, err);
  if (!w)
    return -1;
  ret = run_pipeline(fd, p, NULL, NULL, w, st, err);
  if (ret == 0 && archive_write_close(w) != ARCHIVE_OK)
    ret = dsec_fail(err, archive_errno(w), "cannot finish archive: %s",
                    archive_error_string(w));
  archive_write_free(w);
  if (ret < 0 && e) {
    /* the output failed first: that is the error */
    dsec_error_free(*err);
    *err = e;
  } else
    dsec_error_free(e);
  return ret;
}

void dsec_tar_preload(void)
{
  /* kept open: a converter that is not built in stays loaded (glibc
   * would unload it on the last close, and look it up again later, in
   * the root of that moment) */
  static iconv_t to_utf8 = (iconv_t) -1, from_utf8 = (iconv_t) -1;
  const char *here = nl_langinfo(CODESET);

  dsec_archive_load();
  if (to_utf8 == (iconv_t) -1)
    to_utf8 = iconv_open("UTF-8", here);
  if (from_utf8 == (iconv_t) -1)
    from_utf8 = iconv_open(here, "UTF-8");
}

/* The extracting child: confined to the target by chroot when root (by
 * its cwd and libarchive's SECURE_* checks otherwise), it writes one JSON
 * result to the pipe. */
static _Noreturn void extract_child(int fd, const char *target,
                                    const struct dsec_tar_policy *p,
                                    const char *expected_digest, int result_fd)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  struct opaque_list opq = { 0 };
  struct dsec_tar_stats st;
  struct archive *disk = NULL;
  bool root = geteuid() == 0;
  int flags = ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
              ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SPARSE |
              ARCHIVE_EXTRACT_UNLINK;
  json_t *res;
  int ret;

  umask(022);
  /* the digests and libarchive's name conversions happen inside the
   * chroot, whose libraries and configuration are the image's */
  dsec_digest_preload();
  dsec_tar_preload();
  if (chdir(target) < 0) {
    ret = dsec_fail(&err, errno, "cannot enter %s", target);
    goto done;
  }
  if (root) {
    /* confined by chroot, and the checks have refused "..", absolute
     * paths and members under a symlink: libarchive's own per-component
     * checks (SECURE_*) would only cost a stat per path component */
    if (chroot(".") < 0) {
      ret = dsec_fail(&err, errno, "cannot confine extraction to %s", target);
      goto done;
    }
    flags |= ARCHIVE_EXTRACT_OWNER;
  } else
    flags |= ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
             ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS;
  disk = archive_write_disk_new();
  archive_write_disk_set_options(disk, flags);

  {
    /* overlay metadata a layer brought along is dropped, never written:
     * only the opaque markers below are ours */
    struct dsec_tar_policy ep = *p;
    ep.strip_overlay = true;
    ret = run_pipeline(fd, &ep, disk, &opq, NULL, &st, &err);
  }
  if (ret == 0 && archive_write_close(disk) < ARCHIVE_WARN)
    ret = dsec_fail(&err, archive_errno(disk), "cannot finish extraction: %s",
                    archive_error_string(disk));
  for (size_t i = 0; ret == 0 && i < opq.n; i++) {
    int dfd = open(opq.v[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && errno == ENOENT) {
      if (dsec_mkdir_p(AT_FDCWD, opq.v[i], 0755, &err) < 0) {
        ret = -1;
        break;
      }
      dfd = open(opq.v[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    /* both namespaces as root: a container's overlay reads user.*
     * (userxattr), a VM guest's trusted.* */
    if (dfd < 0 || (root && fsetxattr(dfd, "trusted.overlay.opaque", "y", 1,
                                      0) < 0) ||
        fsetxattr(dfd, "user.overlay.opaque", "y", 1, 0) < 0)
      ret = dsec_fail(&err, errno, "cannot mark %s opaque", opq.v[i]);
    if (dfd >= 0)
      close(dfd);
  }
  /* the blob first (what was read), then what it unpacked to */
  if (ret == 0 && expected_digest && strcmp(expected_digest, st.digest) != 0)
    ret = dsec_bad_input(&err, "blob %s is corrupt: its content hashes to %s",
                         expected_digest, st.digest);
  if (ret == 0 && p->diff_id && strcmp(p->diff_id, st.diff_id) != 0)
    ret = dsec_bad_input(&err, "layer is corrupt: its content hashes to %s, "
                               "not its diff_id %s", st.diff_id, p->diff_id);
  if (ret == 0 && !p->no_sync) {
    /* the caller renames the tree into place only once it is durable */
    int dfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || syncfs(dfd) < 0)
      ret = dsec_fail(&err, errno, "cannot sync the extracted tree");
    if (dfd >= 0)
      close(dfd);
  }

done:
  if (disk)
    archive_write_free(disk);
  if (ret < 0)
    res = json_pack("{s:i, s:i, s:s}", "status", err->status, "errno",
                    err->errnum, "msg", err->msg);
  else
    res = json_pack("{s:i, s:s, s:s, s:I, s:I, s:I, s:s}", "status", 0,
                    "digest", st.digest, "diff_id", st.diff_id, "size",
                    (json_int_t) st.size, "uncompressed_size",
                    (json_int_t) st.uncompressed_size, "entries",
                    (json_int_t) st.entries, "compression", st.compression);
  if (ret == 0) {
    const struct { const char *k; uint64_t v; } counts[] = {
      { "setuid_files", st.setuid_files },
      { "setgid_files", st.setgid_files },
      { "capability_files", st.capability_files },
      { "stripped_setuid", st.stripped_setuid },
      { "stripped_setgid", st.stripped_setgid },
      { "stripped_capabilities", st.stripped_capabilities },
      { "device_nodes", st.device_nodes },
    };
    for (size_t i = 0; i < ARRAY_SIZE(counts); i++)
      json_object_set_new(res, counts[i].k,
                          json_integer((json_int_t) counts[i].v));
  }
  dsec_json_write_line(result_fd, res, NULL);
  _exit(ret < 0 ? 1 : 0);
}

int dsec_tar_extract(int fd, const char *target,
                     const struct dsec_tar_policy *p,
                     const char *expected_digest, struct dsec_tar_stats *st,
                     struct dsec_error **err)
{
  _cleanup_free_ char *out = NULL;
  _cleanup_json_ json_t *res = NULL;
  int pfd[2];
  pid_t pid;
  int status;
  size_t len;
  json_int_t code = 1;
  const char *s;

  if (pipe2(pfd, O_CLOEXEC) < 0)
    return dsec_fail(err, errno, "pipe");
  /* once here, not in each child (materialise extracts a layer each) */
  dsec_archive_load();
  pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    return dsec_fail(err, errno, "fork");
  }
  if (pid == 0) {
    close(pfd[0]);
    extract_child(fd, target, p, expected_digest, pfd[1]);
  }
  close(pfd[1]);
  out = dsec_read_fd(pfd[0], 1 << 20, &len, err);
  close(pfd[0]);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (!out)
    return -1;
  if (len == 0 || !(res = json_loadb(out, len, 0, NULL)))
    return dsec_fail(err, 0, "extraction into %s died (status 0x%x)", target,
                     status);
  dsec_json_get_int(res, "status", true, "extraction", &code, NULL);
  if (code != 0) {
    json_int_t errnum = 0;
    dsec_json_get_int(res, "errno", false, "extraction", &errnum, NULL);
    s = json_string_value(json_object_get(res, "msg"));
    return dsec_error_set(err, (int) code, (int) errnum, "%s",
                          s ? s : "extraction failed");
  }
  memset(st, 0, sizeof *st);
  s = json_string_value(json_object_get(res, "digest"));
  snprintf(st->digest, sizeof st->digest, "%s", s ? s : "");
  s = json_string_value(json_object_get(res, "diff_id"));
  snprintf(st->diff_id, sizeof st->diff_id, "%s", s ? s : "");
  st->size = (uint64_t) json_integer_value(json_object_get(res, "size"));
  st->uncompressed_size =
    (uint64_t) json_integer_value(json_object_get(res, "uncompressed_size"));
  st->entries = (uint64_t) json_integer_value(json_object_get(res, "entries"));
#define COUNT(f) st->f = (uint64_t) json_integer_value(json_object_get(res, #f))
  COUNT(setuid_files);
  COUNT(setgid_files);
  COUNT(capability_files);
  COUNT(stripped_setuid);
  COUNT(stripped_setgid);
  COUNT(stripped_capabilities);
  COUNT(device_nodes);
#undef COUNT
  s = json_string_value(json_object_get(res, "compression"));
  st->compression = !s                       ? "none"
                    : strcmp(s, "gzip") == 0 ? "gzip"
                    : strcmp(s, "zstd") == 0 ? "zstd"
                    : strcmp(s, "xz") == 0   ? "xz"
                                             : "none";
  if (expected_digest && strcmp(expected_digest, st->digest) != 0)
    return dsec_bad_input(err, "blob %s is corrupt: its content hashes to %s",
                          expected_digest, st->digest);
  return 0;
}

/* Creating archives. */
struct creator {
  struct archive *w;
  struct archive *disk;
  struct archive_entry_linkresolver *links;
  const struct dsec_tar_source *src;
  struct dsec_tar_create_stats *cs;
};

static bool excluded(const struct dsec_tar_source *s, const char *rel,
                     const char *name)
{
  for (const char *const *x = s->exclude; x && *x; x++)
    if (strcmp(*x, rel) == 0)
      return true;
  return s->exclude_name && strcmp(s->exclude_name, name) == 0;
}

static int write_entry(struct creator *c, struct archive_entry *e, int fd,
                       struct dsec_error **err)
{
  struct archive_entry *spare = NULL;

  archive_entry_linkify(c->links, &e, &spare);
  for (struct archive_entry *cur = e; cur; cur = spare, spare = NULL) {
    if (archive_write_header(c->w, cur) < ARCHIVE_WARN)
      return dsec_fail(err, archive_errno(c->w), "%s: %s",
                       archive_entry_pathname(cur),
                       archive_error_string(c->w));
    c->cs->entries++;
    if (cur == e && fd >= 0 && archive_entry_size(cur) > 0) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0)
        if (archive_write_data(c->w, buf, (size_t) n) < 0)
          return dsec_fail(err, archive_errno(c->w), "%s: %s",
                           archive_entry_pathname(cur),
                           archive_error_string(c->w));
      if (n < 0)
        return dsec_fail(err, errno, "cannot read %s",
                         archive_entry_pathname(cur));
    }
    if (cur != e)
      archive_entry_free(cur);
  }
  return 0;
}

/* Owners as the sandbox sees them: host id - shift (ids outside the
 * range become nobody). */
static void shift_ids(struct archive_entry *e, unsigned shift)
{
  la_int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
  archive_entry_set_uid(e, uid >= shift && uid - shift < 65536 ? uid - shift
                                                               : 65534);
  archive_entry_set_gid(e, gid >= shift && gid - shift < 65536 ? gid - shift
                                                               : 65534);
}

/* Only overlayfs sets these on an upper directory: a sandbox that sets
 * user.overlay.opaque through the overlay gets an escaped
 * user.overlay.overlay.opaque, which is not matched. */
static bool is_opaque(int dfd)
{
  char v[4];
  ssize_t n = fgetxattr(dfd, "trusted.overlay.opaque", v, sizeof v);
  if (n <= 0)
    n = fgetxattr(dfd, "user.overlay.opaque", v, sizeof v);
  return n > 0 && v[0] == 'y';
}

/* An empty regular file (a whiteout marker) named arcname. */
static int add_marker(struct creator *c, const char *arcname,
                      const struct stat *like, struct dsec_error **err)
{
  struct archive_entry *e = archive_entry_new();
  int ret;
  archive_entry_copy_pathname(e, arcname);
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0);
  archive_entry_set_size(e, 0);
  /* a file of its own: not a hardlink of the previous marker */
  archive_entry_set_nlink(e, 1);
  archive_entry_set_mtime(e, like->st_mtim.tv_sec, like->st_mtim.tv_nsec);
  ret = write_entry(c, e, -1, err);
  archive_entry_free(e);
  return ret;
}

static int cmp_names(const void *a, const void *b)
{
  return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The names in directory dfd, sorted (new, NULL-terminated). */
static char **list_dir(int dfd, size_t *count, struct dsec_error **err)
{
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd < 0 ? NULL : fdopendir(fd);
  char **v = NULL;
  size_t n = 0;
  struct dirent *de;

  if (!d) {
    if (fd >= 0)
      close(fd);
    dsec_fail(err, errno, "cannot read a directory");
    return NULL;
  }
  errno = 0;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    v = xrealloc(v, sizeof *v * (n + 2));
    v[n++] = xstrdup(de->d_name);
    errno = 0;
  }
  if (errno) {
    dsec_fail(err, errno, "cannot read a directory");
    for (size_t i = 0; i < n; i++)
      free(v[i]);
    free(v);
    closedir(d);
    return NULL;
  }
  closedir(d);
  if (!v)
    v = xzalloc(sizeof *v);
  v[n] = NULL;
  qsort(v, n, sizeof *v, cmp_names);
  *count = n;
  return v;
}

/* The tree of directory dfd (rel below the source's dir).  Every name is
 * looked up in its own directory's descriptor, without following a
 * symlink, and the file opened is the one that was stat'ed: a tree that
 * changes under us (a sandbox's writable layer) makes the walk fail, it
 * never leads it elsewhere. */
static int add_tree(struct creator *c, int dfd, const char *rel,
                    struct dsec_error **err)
{
  size_t n = 0;
  char **names = list_dir(dfd, &n, err);
  int ret = 0;

  if (!names)
    return dsec_error_wrap(err, "%s/%s", c->src->dir, rel);
  for (size_t i = 0; i < n && ret == 0; i++) {
    const char *name = names[i];
    _cleanup_free_ char *childrel = NULL;
    _cleanup_free_ char *full = NULL;
    _cleanup_free_ char *arcname = NULL;
    _cleanup_close_ int fd = -1;
    struct archive_entry *e;
    struct stat st;

    childrel = *rel ? xasprintf("%s/%s", rel, name) : xstrdup(name);
    if (excluded(c->src, childrel, name))
      continue;
    if (c->src->overlay_upper && strncmp(name, ".wh.", 4) == 0) {
      /* a name the sandbox chose: as an OCI member it would be a
       * whiteout (of a protected path, say) in whoever resumes it */
      c->cs->skipped_whiteout_names++;
      continue;
    }
    full = xasprintf("%s/%s", c->src->dir, childrel);
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      ret = dsec_fail(err, errno, "cannot stat %s", full);
      continue;
    }
    if (S_ISSOCK(st.st_mode))
      continue;
    if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
      /* no blocking on a fifo swapped in, no symlink followed, and the
       * same file that was stat'ed */
      struct stat fst;
      fd = openat(dfd, name,
                  O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC |
                    (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0));
      if (fd < 0 || fstat(fd, &fst) < 0 ||
          (fst.st_mode & S_IFMT) != (st.st_mode & S_IFMT) ||
          fst.st_ino != st.st_ino || fst.st_dev != st.st_dev) {
        ret = dsec_fail(err, fd < 0 ? errno : ESTALE,
                        "%s changed while it was read", full);
        continue;
      }
    }
    arcname = *c->src->prefix ? xasprintf("%s/%s", c->src->prefix, childrel)
                              : xstrdup(childrel);
    if (c->src->overlay_upper && S_ISCHR(st.st_mode) && st.st_rdev == 0) {
      /* an overlay whiteout: the OCI form is an empty .wh.NAME */
      _cleanup_free_ char *wh = NULL;
      char *slash = strrchr(arcname, '/');
      wh = slash ? xasprintf("%.*s/.wh.%s", (int) (slash - arcname), arcname,
                             slash + 1)
                 : xasprintf(".wh.%s", arcname);
      ret = add_marker(c, wh, &st, err);
      continue;
    }
    e = archive_entry_new();
    archive_entry_copy_pathname(e, arcname);
    archive_entry_copy_sourcepath(e, full);
    if (S_ISLNK(st.st_mode)) {
      /* read here, in its directory: libarchive would go by path */
      char target[PATH_MAX];
      ssize_t tl = readlinkat(dfd, name, target, sizeof target);
      if (tl < 0 || (size_t) tl >= sizeof target) {
        ret = dsec_fail(err, tl < 0 ? errno : ENAMETOOLONG,
                        "cannot read the symlink %s", full);
        archive_entry_free(e);
        continue;
      }
      target[tl] = '\0';
      archive_entry_copy_stat(e, &st);
      archive_entry_copy_symlink(e, target);
    } else if (archive_read_disk_entry_from_file(c->disk, e, fd, &st) <
               ARCHIVE_WARN) {
      ret = dsec_fail(err, archive_errno(c->disk), "%s: %s", full,
                      archive_error_string(c->disk));
      archive_entry_free(e);
      continue;
    }
    archive_entry_unset_atime(e);
    archive_entry_unset_ctime(e);
    archive_entry_unset_birthtime(e);
    archive_entry_set_uname(e, NULL);
    archive_entry_set_gname(e, NULL);
    if (c->src->id_shift)
      shift_ids(e, c->src->id_shift);
    if (c->src->overlay_upper)
      remove_xattrs(e, overlay_xattr);
    ret = write_entry(c, e, S_ISREG(st.st_mode) ? fd : -1, err);
    archive_entry_free(e);
    if (ret == 0 && S_ISDIR(st.st_mode) && c->src->overlay_upper &&
        is_opaque(fd)) {
      _cleanup_free_ char *opq = xasprintf("%s/.wh..wh..opq", arcname);
      ret = add_marker(c, opq, &st, err);
    }
    if (ret == 0 && S_ISDIR(st.st_mode))
      ret = add_tree(c, fd, childrel, err);
  }
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
  return ret;
}

int dsec_tar_create(const struct dsec_tar_source *src, size_t n,
                    dsec_write_fn fn, void *ud, bool zstd,
                    struct dsec_tar_create_stats *cs, struct dsec_error **err)
{
  struct dsec_tar_create_stats none;
  struct creator c = { 0 };
  struct out_cb out = { fn, ud, err };
  int ret = 0;

  c.cs = cs ? cs : &none;
  memset(c.cs, 0, sizeof *c.cs);
  c.w = writer_open(&out, zstd, err);
  if (!c.w)
    return -1;
  c.disk = archive_read_disk_new();
  archive_read_disk_set_symlink_physical(c.disk);
  c.links = archive_entry_linkresolver_new();
  archive_entry_linkresolver_set_strategy(c.links, archive_format(c.w));
  for (size_t i = 0; i < n && ret == 0; i++) {
    _cleanup_close_ int dfd =
      open(src[i].dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
      ret = dsec_error_set(err,
                           errno == ENOENT || errno == ENOTDIR ? DSEC_EXIT_INPUT
                                                               : DSEC_EXIT_FAILURE,
                           errno, "cannot open directory %s", src[i].dir);
      break;
    }
    c.src = &src[i];
    if (*src[i].prefix) {
      struct archive_entry *e = archive_entry_new();
      struct stat st;
      fstat(dfd, &st);
      archive_entry_copy_pathname(e, src[i].prefix);
      archive_entry_copy_stat(e, &st);
      archive_entry_unset_atime(e);
      archive_entry_unset_ctime(e);
      ret = write_entry(&c, e, -1, err);
      archive_entry_free(e);
    }
    if (ret == 0)
      ret = add_tree(&c, dfd, "", err);
  }
  if (ret == 0) {
    /* hardlinks whose other names were never seen */
    struct archive_entry *e = NULL, *spare = NULL;
    archive_entry_linkify(c.links, &e, &spare);
    while (e) {
      archive_write_header(c.w, e);
      archive_entry_free(e);
      e = NULL;
      archive_entry_linkify(c.links, &e, &spare);
    }
    if (archive_write_close(c.w) != ARCHIVE_OK)
      ret = dsec_fail(err, archive_errno(c.w), "cannot finish archive: %s",
                      archive_error_string(c.w));
  }
  archive_entry_linkresolver_free(c.links);
  archive_read_free(c.disk);
  archive_write_free(c.w);
  return ret;
}
