#include <config.h>

#include "idrange.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"
#include "sandbox.h"
#include "store.h"

#define DEFAULT_FIRST 0x30000000u
#define DEFAULT_SLOTS 49152u /* up to 0xf0000000 */
#define ID_MAX 0xfffffffeu   /* (uid_t) -1 is no id */

void dsec_idrange_pool(uid_t *first, unsigned *nslots)
{
  /* a subordinate range of "dsec" (or root) in /etc/subuid, else a range
   * far above ordinary users */
  static const char *const users[] = { "dsec", "root" };
  _cleanup_free_ char *buf = dsec_read_file_at(AT_FDCWD, "/etc/subuid",
                                               1 << 20, NULL, NULL);
  *first = DEFAULT_FIRST;
  *nslots = DEFAULT_SLOTS;
  for (size_t u = 0; buf && u < ARRAY_SIZE(users); u++) {
    size_t n = strlen(users[u]);
    for (char *line = buf; line && *line;) {
      char *nl = strchr(line, '\n');
      unsigned long b, c;
      if (strncmp(line, users[u], n) == 0 && line[n] == ':' &&
          sscanf(line + n + 1, "%lu:%lu", &b, &c) == 2 &&
          c >= DSEC_IDRANGE_SIZE && b > 0 && b < ID_MAX) {
        unsigned long fit = (ID_MAX - b) / DSEC_IDRANGE_SIZE;
        c /= DSEC_IDRANGE_SIZE;
        *first = (uid_t) b;
        *nslots = (unsigned) (c < fit ? c : fit);
        return;
      }
      line = nl ? nl + 1 : NULL;
    }
  }
}

static int ids_dir(bool create, struct dsec_error **err)
{
  _cleanup_free_ char *root = dsec_root_dir();
  _cleanup_free_ char *path = xasprintf("%s/ids", root);
  if (create && dsec_mkdir_p(AT_FDCWD, path, 0700, err) < 0)
    return -1;
  return dsec_open_dir_at(AT_FDCWD, path, false, err);
}

/* The sandbox id a slot file names (new), or NULL. */
static char *slot_owner(int dfd, const char *name)
{
  char *s = dsec_read_file_at(dfd, name, 64, NULL, NULL);
  if (s)
    s[strcspn(s, "\n")] = '\0';
  if (s && !dsec_sandbox_id_valid(s)) {
    free(s);
    return NULL;
  }
  return s;
}

static void fill(struct dsec_idrange *r, unsigned slot)
{
  uid_t first;
  unsigned n;
  dsec_idrange_pool(&first, &n);
  r->slot = slot;
  r->base = first + (uid_t) slot * DSEC_IDRANGE_SIZE;
  r->count = DSEC_IDRANGE_SIZE;
}

/* The slot sandboxes/<id>/ids names, or -1. */
static long recorded_slot(const char *id)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *path = xasprintf("%s/ids", dir);
  _cleanup_free_ char *s = dsec_read_file_at(AT_FDCWD, path, 32, NULL, NULL);
  char *end;
  long v;
  if (!s)
    return -1;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno || end == s || v < 0 || (*end && *end != '\n'))
    return -1;
  return v;
}

int dsec_idrange_lookup(const char *id, struct dsec_idrange *r)
{
  _cleanup_close_ int dfd = ids_dir(false, NULL);
  _cleanup_free_ char *owner = NULL;
  long slot = recorded_slot(id);
  uid_t first;
  unsigned n;
  char name[24];

  dsec_idrange_pool(&first, &n);
  if (slot < 0 || (unsigned long) slot >= n || dfd < 0)
    return -1;
  snprintf(name, sizeof name, "%ld", slot);
  owner = slot_owner(dfd, name);
  if (!owner || strcmp(owner, id) != 0)
    return -1;
  fill(r, (unsigned) slot);
  return 0;
}

int dsec_idrange_acquire(const char *id, struct dsec_idrange *r,
                         struct dsec_error **err)
{
  _cleanup_close_ int dfd = -1;
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_close_ int sfd = -1;
  uid_t first;
  unsigned n, start;
  char name[24];
  long got = -1;

  if (dsec_idrange_lookup(id, r) == 0)
    return 0;
  dsec_idrange_pool(&first, &n);
  if (n == 0)
    return dsec_fail(err, ERANGE, "no host id range to give sandboxes");
  dfd = ids_dir(true, err);
  if (dfd < 0)
    return -1;
  if (getrandom(&start, sizeof start, 0) != sizeof start)
    start = (unsigned) getpid();
  /* a random start: with thousands of ranges taken, a free one is still
   * found in a try or two, and concurrent creates rarely race for one */
  for (unsigned k = 0; k < n && got < 0; k++) {
    unsigned slot = (start + k) % n;
    int fd;
    snprintf(name, sizeof name, "%u", slot);
    fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                0600);
    if (fd < 0) {
      if (errno == EEXIST)
        continue;
      return dsec_fail(err, errno, "cannot take host id range %u", slot);
    }
    {
      _cleanup_free_ char *line = xasprintf("%s\n", id);
      int r2 = dsec_write_all(fd, line, strlen(line), err);
      close(fd);
      if (r2 < 0) {
        unlinkat(dfd, name, 0);
        return -1;
      }
    }
    got = slot;
  }
  if (got < 0)
    return dsec_fail(err, EAGAIN, "every host id range (%u) is taken", n);
  /* the sandbox names its slot: rm and resumes find it without a scan */
  sfd = dsec_open_dir_at(AT_FDCWD, dir, false, err);
  if (sfd < 0 ||
      dsec_write_file_replace(sfd, "ids", name, strlen(name), 0600, err) < 0) {
    unlinkat(dfd, name, 0);
    return -1;
  }
  fill(r, (unsigned) got);
  return 0;
}

void dsec_idrange_release(const char *id)
{
  _cleanup_close_ int dfd = ids_dir(false, NULL);
  _cleanup_free_ char *owner = NULL;
  long slot = recorded_slot(id);
  char name[24];

  if (slot < 0 || dfd < 0)
    return;
  snprintf(name, sizeof name, "%ld", slot);
  owner = slot_owner(dfd, name);
  if (owner && strcmp(owner, id) == 0)
    unlinkat(dfd, name, 0);
}

int dsec_idrange_collect(unsigned min_age_s, bool remove,
                         void (*fn)(void *ud, const char *slot,
                                    const char *owner),
                         void *ud)
{
  _cleanup_close_ int dfd = ids_dir(false, NULL);
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  time_t now = time(NULL);
  int count = 0;
  int fd;

  if (dfd < 0)
    return 0;
  fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || !(d = fdopendir(fd))) {
    if (fd >= 0)
      close(fd);
    return 0;
  }
  while ((de = readdir(d))) {
    _cleanup_free_ char *owner = NULL;
    struct stat st;
    char *end;
    long slot;
    bool gone;

    errno = 0;
    slot = strtol(de->d_name, &end, 10);
    if (errno || end == de->d_name || *end || slot < 0)
      continue;
    if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        (now - st.st_mtime) < (time_t) min_age_s)
      continue; /* being taken: its sandbox names it in a moment */
    owner = slot_owner(dfd, de->d_name);
    gone = !owner || recorded_slot(owner) != slot;
    if (!gone)
      continue;
    if (fn)
      fn(ud, de->d_name, owner);
    if (remove)
      unlinkat(dfd, de->d_name, 0);
    count++;
  }
  return count;
}
