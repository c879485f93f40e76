/* Landlock as the second layer of `protect` (issue #4), and the scopes.
 *
 * Landlock only grants: a ruleset handles some rights, and a rule grants
 * some of them beneath a directory (or on one file); there is no deny
 * rule.  So "every write but to the protected paths" is spelt out, from
 * the file system as it is when the rules are made:
 *
 *   - the rights handled are the write class: writing and truncating a
 *     file, device ioctls, making, removing and reparenting entries.
 *     Reading and executing are not handled: they stay allowed
 *     everywhere.
 *   - every directory above a protected path (its ancestors, / included)
 *     gets the directory rights only: make, remove, refer.  They reach
 *     into the protected path too, where the read-only bind mount answers
 *     first (EROFS); the rights to write or truncate a file's content do
 *     not reach it.
 *   - every other entry of an ancestor (a sibling of the way down to a
 *     protected path) gets every handled right beneath it: a directory
 *     all of them, a file the file rights.  Symbolic links get none: an
 *     open follows them, and their target's own path decides.
 *   - a protected path, and everything beneath it, gets nothing.
 *
 * The rules are made once every mount is: a rule holds the inode it was
 * made on, the root of the topmost mount there, and Landlock's walk up
 * from a mount skips the directory the mount covers.
 *
 * Rules hold inodes, so an entry keeps its rights when renamed, and a rule
 * on any name of an inode reaches all its names: an entry that is another
 * name of a protected path or an ancestor gets no rule, nor does a file
 * with more than one link (it may be a name of a protected file).  The cost
 * of having no deny rule: a file or directory that is directly in an
 * ancestor but was not there when the rules were made (created later,
 * moved or linked in from elsewhere, or deleted and made again) gets the
 * ancestors' rights only: it can be made, renamed and removed, but no
 * file at or beneath it can be opened for writing or truncated (EACCES).
 * dsec-run(1) SECURITY says so.
 *
 * Below ABI 2 the kernel refuses every rename or link across directories
 * of a domain that handles file system rights (EXDEV); below ABI 3
 * truncate(2) and open(O_TRUNC) are not checked; below ABI 5 device
 * ioctls are not; below ABI 6 there are no scopes. */
#include <config.h>

#include "landlock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef HAVE_LINUX_LANDLOCK_H
#include <linux/landlock.h>
#endif

/* The UAPI values (stable), for headers older than the running kernel. */
#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif
#ifndef LANDLOCK_RULE_PATH_BENEATH
#define LANDLOCK_RULE_PATH_BENEATH 1
#endif
#ifndef LANDLOCK_ACCESS_FS_WRITE_FILE
#define LANDLOCK_ACCESS_FS_WRITE_FILE (1ULL << 1)
#define LANDLOCK_ACCESS_FS_REMOVE_DIR (1ULL << 4)
#define LANDLOCK_ACCESS_FS_REMOVE_FILE (1ULL << 5)
#define LANDLOCK_ACCESS_FS_MAKE_CHAR (1ULL << 6)
#define LANDLOCK_ACCESS_FS_MAKE_DIR (1ULL << 7)
#define LANDLOCK_ACCESS_FS_MAKE_REG (1ULL << 8)
#define LANDLOCK_ACCESS_FS_MAKE_SOCK (1ULL << 9)
#define LANDLOCK_ACCESS_FS_MAKE_FIFO (1ULL << 10)
#define LANDLOCK_ACCESS_FS_MAKE_BLOCK (1ULL << 11)
#define LANDLOCK_ACCESS_FS_MAKE_SYM (1ULL << 12)
#endif
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

/* struct landlock_ruleset_attr as of ABI 6; older kernels get the prefix
 * they know (handled_access_net came with ABI 4, scoped with ABI 6). */
struct ll_ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

struct ll_path_beneath {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

static const struct {
  uint64_t bit;
  const char *name;
  int abi;
} fs_rights[] = {
  { LANDLOCK_ACCESS_FS_WRITE_FILE, "write_file", 1 },
  { LANDLOCK_ACCESS_FS_TRUNCATE, "truncate", DSEC_LANDLOCK_ABI_TRUNCATE },
  { LANDLOCK_ACCESS_FS_IOCTL_DEV, "ioctl_dev", DSEC_LANDLOCK_ABI_IOCTL_DEV },
  { LANDLOCK_ACCESS_FS_MAKE_REG, "make_reg", 1 },
  { LANDLOCK_ACCESS_FS_MAKE_DIR, "make_dir", 1 },
  { LANDLOCK_ACCESS_FS_MAKE_SYM, "make_sym", 1 },
  { LANDLOCK_ACCESS_FS_MAKE_SOCK, "make_sock", 1 },
  { LANDLOCK_ACCESS_FS_MAKE_FIFO, "make_fifo", 1 },
  { LANDLOCK_ACCESS_FS_MAKE_CHAR, "make_char", 1 },
  { LANDLOCK_ACCESS_FS_MAKE_BLOCK, "make_block", 1 },
  { LANDLOCK_ACCESS_FS_REMOVE_FILE, "remove_file", 1 },
  { LANDLOCK_ACCESS_FS_REMOVE_DIR, "remove_dir", 1 },
  { LANDLOCK_ACCESS_FS_REFER, "refer", DSEC_LANDLOCK_ABI_REFER },
};

static const struct {
  uint64_t bit;
  const char *name;
  int abi;
} scopes[] = {
  { LANDLOCK_SCOPE_SIGNAL, "signal", DSEC_LANDLOCK_ABI_SCOPES },
  { LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, "abstract_unix_socket",
    DSEC_LANDLOCK_ABI_SCOPES },
};

/* The rights that mean something on a file (the rest are a directory's:
 * they act on its entries). */
#define FILE_RIGHTS (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | \
                     LANDLOCK_ACCESS_FS_IOCTL_DEV)

int dsec_landlock_abi(char **why)
{
  long v = syscall(SYS_landlock_create_ruleset, NULL, 0,
                   LANDLOCK_CREATE_RULESET_VERSION);
  int e = errno;

  if (v > 0)
    return v > INT_MAX ? INT_MAX : (int) v;
  if (e == ENOSYS)
    *why = xstrdup("the kernel has no Landlock (landlock_create_ruleset: "
                   "ENOSYS)");
  else if (e == EOPNOTSUPP)
    *why = xstrdup("Landlock is not enabled: it is not in the kernel's "
                   "lsm= list at boot (landlock_create_ruleset: EOPNOTSUPP)");
  else
    *why = xasprintf("landlock_create_ruleset: %s", strerror(e));
  return 0;
}

uint64_t dsec_landlock_fs_rights(int abi)
{
  uint64_t r = 0;
  for (size_t i = 0; i < ARRAY_SIZE(fs_rights); i++)
    if (abi >= fs_rights[i].abi)
      r |= fs_rights[i].bit;
  return r;
}

uint64_t dsec_landlock_scopes(int abi)
{
  uint64_t r = 0;
  for (size_t i = 0; i < ARRAY_SIZE(scopes); i++)
    if (abi >= scopes[i].abi)
      r |= scopes[i].bit;
  return r;
}

void dsec_landlock_clear(struct dsec_landlock *ll)
{
  for (size_t i = 0; i < ll->n_protect; i++)
    free(ll->protect[i]);
  for (size_t i = 0; i < ll->n_ancestors; i++)
    free(ll->ancestors[i]);
  free(ll->protect);
  free(ll->ancestors);
  free(ll->kept);
  memset(ll, 0, sizeof *ll);
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *) a, *(char *const *) b);
}

static bool in_sorted(char **v, size_t n, const char *s)
{
  return n > 0 && bsearch(&s, v, n, sizeof *v, cmp_str) != NULL;
}

/* path is base or beneath it. */
static bool at_or_beneath(const char *path, const char *base)
{
  size_t n = strlen(base);
  if (strcmp(base, "/") == 0)
    return true;
  return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Sorts v and drops duplicates (freed). */
static void sort_unique(char **v, size_t *n)
{
  size_t k = 0;
  if (*n == 0)
    return;
  qsort(v, *n, sizeof *v, cmp_str);
  for (size_t i = 1; i < *n; i++) {
    if (strcmp(v[i], v[k]) == 0)
      free(v[i]);
    else
      v[++k] = v[i];
  }
  *n = k + 1;
}

int dsec_landlock_plan(struct dsec_landlock *ll, int abi, json_t *protect,
                       struct dsec_error **err)
{
  struct dsec_landlock p = { .abi = abi };
  size_t n = json_array_size(protect), k = 0;
  json_t *v;
  size_t i;

  p.protect = xzalloc(sizeof *p.protect * (n + 1));
  json_array_foreach(protect, i, v)
  {
    const char *path = json_string_value(v);
    char *real = path ? realpath(path, NULL) : NULL;
    if (!real) {
      if (path && (errno == ENOENT || errno == ENOTDIR))
        continue; /* covered by a mount: nothing there to protect */
      dsec_fail(err, path ? errno : EINVAL, "cannot resolve the protected "
                                            "path %s", path ? path : "?");
      dsec_landlock_clear(&p);
      return -1;
    }
    p.protect[p.n_protect++] = real;
  }
  sort_unique(p.protect, &p.n_protect);
  /* a path beneath another protected one is covered by it */
  for (i = 0; i < p.n_protect; i++) {
    bool covered = false;
    for (size_t j = 0; j < p.n_protect && !covered; j++)
      covered = j != i && p.protect[j] && p.protect[i] &&
                at_or_beneath(p.protect[i], p.protect[j]);
    if (covered) {
      free(p.protect[i]);
      p.protect[i] = NULL;
    }
  }
  for (i = 0; i < p.n_protect; i++)
    if (p.protect[i])
      p.protect[k++] = p.protect[i];
  p.n_protect = k;

  for (i = 0; i < p.n_protect; i++) {
    const char *path = p.protect[i];
    for (const char *s = strchr(path, '/'); s && s[1]; s = strchr(s + 1, '/')) {
      p.ancestors = xrealloc(p.ancestors,
                             sizeof *p.ancestors * (p.n_ancestors + 1));
      p.ancestors[p.n_ancestors++] =
        s == path ? xstrdup("/") : xstrndup(path, (size_t) (s - path));
    }
  }
  sort_unique(p.ancestors, &p.n_ancestors);
  p.fs = p.n_protect ? dsec_landlock_fs_rights(abi) : 0;
  p.scoped = dsec_landlock_scopes(abi);
  *ll = p;
  return 0;
}

static int add_rule(int ruleset, int fd, uint64_t allowed)
{
  struct ll_path_beneath pb = { .allowed_access = allowed, .parent_fd = fd };
  return (int) syscall(SYS_landlock_add_rule, ruleset,
                       LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
}

/* An entry that must not get rights of its own: one that is a protected
 * path or an ancestor under another name (a second mount of the same
 * directory, a hard link), since a rule holds the inode and so reaches
 * every name of it; and any file with more than one link, which may be a
 * name of a file beneath a protected directory. */
static bool is_kept(const struct dsec_landlock *ll, const struct stat *st)
{
  if (!S_ISDIR(st->st_mode) && st->st_nlink > 1)
    return true;
  for (size_t i = 0; i < ll->n_kept; i++)
    if (ll->kept[i].dev == st->st_dev && ll->kept[i].ino == st->st_ino)
      return true;
  return false;
}

/* The rules of one ancestor: the directory rights on it, every right
 * beneath each of its other entries. */
static int add_ancestor(struct dsec_landlock *ll, int ruleset, const char *dir,
                        struct dsec_error **err)
{
  const uint64_t dir_rights = ll->fs & ~FILE_RIGHTS;
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  if (fd < 0)
    return dsec_fail(err, errno, "cannot open %s", dir);
  if (add_rule(ruleset, fd, dir_rights) < 0) {
    int e = errno;
    close(fd);
    return dsec_fail(err, e, "cannot add a Landlock rule for %s", dir);
  }
  ll->n_rules++;
  d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return dsec_fail(err, e, "cannot read %s", dir);
  }
  for (;;) {
    _cleanup_free_ char *path = NULL;
    _cleanup_close_ int cfd = -1;
    struct stat st;
    uint64_t rights;

    errno = 0;
    de = readdir(d);
    if (!de) {
      if (errno)
        return dsec_fail(err, errno, "cannot read %s", dir);
      return 0;
    }
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    path = strcmp(dir, "/") == 0 ? xasprintf("/%s", de->d_name)
                                 : xasprintf("%s/%s", dir, de->d_name);
    if (in_sorted(ll->ancestors, ll->n_ancestors, path) ||
        in_sorted(ll->protect, ll->n_protect, path))
      continue;
    cfd = openat(dirfd(d), de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (cfd < 0) {
      if (errno == ENOENT)
        continue; /* gone meanwhile */
      return dsec_fail(err, errno, "cannot open %s", path);
    }
    if (fstat(cfd, &st) < 0)
      return dsec_fail(err, errno, "cannot stat %s", path);
    if (S_ISLNK(st.st_mode) || is_kept(ll, &st))
      continue;
    rights = S_ISDIR(st.st_mode) ? ll->fs : ll->fs & FILE_RIGHTS;
    if (!rights)
      continue;
    if (add_rule(ruleset, cfd, rights) < 0)
      return dsec_fail(err, errno, "cannot add a Landlock rule for %s", path);
    ll->n_rules++;
  }
}

/* The planned ruleset (a new descriptor), or -2 when it would enforce
 * nothing. */
static int make_ruleset(struct dsec_landlock *ll, struct dsec_error **err)
{
  struct ll_ruleset_attr attr = { .handled_access_fs = ll->fs,
                                  .scoped = ll->scoped };
  size_t size = ll->abi >= DSEC_LANDLOCK_ABI_SCOPES ? sizeof attr
                : ll->abi >= 4 ? 2 * sizeof(uint64_t)
                               : sizeof(uint64_t);
  _cleanup_close_ int ruleset = -1;

  ll->n_rules = 0;
  if (!ll->fs && !ll->scoped)
    return -2;
  free(ll->kept);
  ll->kept = xzalloc(sizeof *ll->kept * (ll->n_protect + ll->n_ancestors + 1));
  ll->n_kept = 0;
  for (size_t i = 0; i < ll->n_protect + ll->n_ancestors; i++) {
    const char *path = i < ll->n_protect ? ll->protect[i]
                                         : ll->ancestors[i - ll->n_protect];
    struct stat st;
    if (stat(path, &st) < 0)
      return dsec_fail(err, errno, "cannot stat %s", path);
    ll->kept[ll->n_kept++] = (struct dsec_landlock_inode){ st.st_dev, st.st_ino };
  }
  ruleset = (int) syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0)
    return dsec_fail(err, errno, "cannot create a Landlock ruleset");
  for (size_t i = 0; i < ll->n_ancestors && ll->fs; i++)
    if (add_ancestor(ll, ruleset, ll->ancestors[i], err) < 0)
      return dsec_error_wrap(err, "Landlock");
  return dsec_steal_fd(&ruleset);
}

int dsec_landlock_apply(struct dsec_landlock *ll, struct dsec_error **err)
{
  _cleanup_close_ int ruleset = make_ruleset(ll, err);

  if (ruleset == -2) {
    ruleset = -1;
    return 0;
  }
  if (ruleset < 0)
    return -1;
  if (syscall(SYS_landlock_restrict_self, ruleset, 0) < 0)
    return dsec_fail(err, errno, "cannot enforce the Landlock ruleset");
  return 1;
}

json_t *dsec_landlock_to_json(const struct dsec_landlock *ll)
{
  json_t *protect = json_array(), *handled = json_array();
  json_t *scoped = json_array(), *missing = json_array();

  for (size_t i = 0; i < ll->n_protect; i++)
    json_array_append_new(protect, json_string(ll->protect[i]));
  for (size_t i = 0; i < ARRAY_SIZE(fs_rights); i++) {
    if (ll->fs & fs_rights[i].bit)
      json_array_append_new(handled, json_string(fs_rights[i].name));
    if (ll->abi < fs_rights[i].abi)
      json_array_append_new(missing, json_string(fs_rights[i].name));
  }
  for (size_t i = 0; i < ARRAY_SIZE(scopes); i++) {
    if (ll->scoped & scopes[i].bit)
      json_array_append_new(scoped, json_string(scopes[i].name));
    if (ll->abi < scopes[i].abi)
      json_array_append_new(missing, json_string(scopes[i].name));
  }
  return json_pack("{s:i, s:s, s:o, s:o, s:o, s:o}", "abi", ll->abi, "rules",
                   ll->fs ? "protect" : ll->scoped ? "scopes" : "none",
                   "protect", protect, "handled", handled, "scoped", scoped,
                   "missing", missing);
}
