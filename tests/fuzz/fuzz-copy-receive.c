/* Fuzz target: dsec_copy_receive (libcommon/copy.c), the receiver that
 * makes a copy stream at a destination, as dsec-run does on the host for
 * a copy out of a sandbox.  Each input is received into an empty
 * directory, dst, beside a directory, outside, that holds one file; with
 * links in the stream aimed at it ("../outside", "../../outside" ...) or
 * at "/", the receiver must still never make, change or remove anything
 * but below dst: afterwards outside holds its one file, unchanged, and
 * the directory above holds dst and outside only.  A failure has a
 * reason.  dst is emptied after each input (without following links).
 *
 * A receiver broken so that it follows a link could write anywhere the
 * fuzzer points it ("/" is a seed), as root: so the target first confines
 * its writes with Landlock to beneath its own directory and the
 * directories on its command line (libFuzzer's corpus and artifact
 * directories, and TMPDIR for -merge).  Without Landlock it says so on stderr and goes on.
 * Confined, it could not remove its own directory: a parent process that
 * stays outside waits for it and does. */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "copy.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

static char base[64], dst[96], outside[96], canary[128];
static struct stat canary_st;

/* rm -rf that follows no link and empties read-only directories */
static void rm_rf_at(int dfd, const char *name)
{
  struct stat st;
  struct dirent *de;
  DIR *d;
  int fd;

  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return;
  if (!S_ISDIR(st.st_mode)) {
    unlinkat(dfd, name, 0);
    return;
  }
  if (fchmodat(dfd, name, 0700, 0) < 0) {
    /* removal below fails and says nothing: the checks catch it */
  }
  fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && (d = fdopendir(fd))) {
    while ((de = readdir(d)))
      if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
        rm_rf_at(dirfd(d), de->d_name);
    closedir(d);
  } else if (fd >= 0)
    close(fd);
  unlinkat(dfd, name, AT_REMOVEDIR);
}

/* The names in directory path, in one string ("a/b/" for a and b). */
static void names(const char *path, char *out, size_t cap)
{
  DIR *d = opendir(path);
  struct dirent *de;
  char *v[8];
  size_t n = 0;
  CHECK(d);
  out[0] = '\0';
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
      CHECK(n < 8);
      v[n++] = strdup(de->d_name);
    }
  closedir(d);
  for (size_t i = 0; i < n; i++)
    for (size_t k = i + 1; k < n; k++)
      if (strcmp(v[k], v[i]) < 0) {
        char *t = v[i];
        v[i] = v[k];
        v[k] = t;
      }
  for (size_t i = 0; i < n; i++) {
    snprintf(out + strlen(out), cap - strlen(out), "%s/", v[i]);
    free(v[i]);
  }
}

/* ---- Landlock, by its system calls (the UAPI values are stable) */

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#define LL_VERSION 1u           /* LANDLOCK_CREATE_RULESET_VERSION */
#define LL_PATH_BENEATH 1       /* LANDLOCK_RULE_PATH_BENEATH */
#define LL_WRITE_ABI1 0x1ff2ull /* write_file, remove_*, make_* */
#define LL_REFER (1ull << 13)   /* ABI 2 */
#define LL_TRUNCATE (1ull << 14) /* ABI 3 */

struct ll_attr {
  uint64_t handled_access_fs;
};

struct ll_beneath {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

static void allow(int ruleset, uint64_t rights, const char *dir)
{
  struct ll_beneath b = { rights, -1 };
  struct stat st;
  if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
    return;
  b.parent_fd = open(dir, O_PATH | O_CLOEXEC);
  CHECK(b.parent_fd >= 0);
  CHECK(syscall(SYS_landlock_add_rule, ruleset, LL_PATH_BENEATH, &b, 0) == 0);
  close(b.parent_fd);
}

/* Writes beneath base and the directories of the command line only. */
static void confine(int argc, char **argv)
{
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_VERSION);
  struct ll_attr a = { LL_WRITE_ABI1 };
  int rs;

  if (abi < 1) {
    fprintf(stderr, "fuzz-copy-receive: no Landlock (%s): writes are not "
            "confined\n", strerror(errno));
    return;
  }
  if (abi >= 2)
    a.handled_access_fs |= LL_REFER;
  if (abi >= 3)
    a.handled_access_fs |= LL_TRUNCATE;
  rs = (int) syscall(SYS_landlock_create_ruleset, &a, sizeof a, 0);
  CHECK(rs >= 0);
  allow(rs, a.handled_access_fs, base);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    size_t skip = strncmp(arg, "-artifact_prefix=", 17) == 0       ? 17
                  : strncmp(arg, "-merge_control_file=", 20) == 0 ? 20
                                                                  : 0;
    if (strcmp(arg, "-merge=1") == 0) {
      /* -merge's control file goes to TMPDIR */
      const char *t = getenv("TMPDIR");
      allow(rs, a.handled_access_fs, t && *t ? t : "/tmp");
    } else if (skip) {
      char dir[4096];
      const char *slash;
      arg += skip;
      slash = strrchr(arg, '/');
      snprintf(dir, sizeof dir, "%.*s", slash ? (int) (slash - arg) : 1,
               slash ? arg : ".");
      if (slash != arg) /* never "/" */
        allow(rs, a.handled_access_fs, dir);
    } else if (arg[0] != '-')
      allow(rs, a.handled_access_fs, arg);
  }
  CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
  CHECK(syscall(SYS_landlock_restrict_self, rs, 0) == 0);
  close(rs);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  const char *t = getenv("TMPDIR");
  int fd;
  snprintf(base, sizeof base, "%s/dsec-fuzz-copy.XXXXXX", t && *t ? t : "/tmp");
  CHECK(mkdtemp(base));
  /* the parent removes base once the fuzzing process is done */
  fflush(NULL);
  {
    pid_t pid = fork();
    int st;
    CHECK(pid >= 0);
    if (pid > 0) {
      while (waitpid(pid, &st, 0) < 0)
        CHECK(errno == EINTR);
      rm_rf_at(AT_FDCWD, base);
      _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
  }
  snprintf(dst, sizeof dst, "%s/dst", base);
  snprintf(outside, sizeof outside, "%s/outside", base);
  snprintf(canary, sizeof canary, "%s/outside/canary", base);
  CHECK(mkdir(dst, 0755) == 0 && mkdir(outside, 0755) == 0);
  fd = open(canary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  CHECK(fd >= 0 && write(fd, "canary\n", 7) == 7);
  close(fd);
  CHECK(lstat(canary, &canary_st) == 0);
  confine(argc ? *argc : 0, argv ? *argv : NULL);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char why[DSEC_COPY_WHY], buf[64], list[256];
  struct stat st;
  int fd, r;

  if (size > (1u << 20))
    return 0;
  if (!base[0])
    LLVMFuzzerInitialize(NULL, NULL);
  fd = memfd_create("stream", MFD_CLOEXEC);
  CHECK(fd >= 0);
  CHECK(size == 0 || write(fd, data, size) == (ssize_t) size);
  CHECK(lseek(fd, 0, SEEK_SET) == 0);
  why[0] = '\0';
  r = dsec_copy_receive(fd, dst, 0, (uid_t) -1, (gid_t) -1, why);
  close(fd);
  CHECK(r == 0 || r == -1);
  if (r < 0)
    CHECK(why[0] != '\0');

  /* nothing outside dst changed */
  names(base, list, sizeof list);
  CHECK(strcmp(list, "dst/outside/") == 0);
  names(outside, list, sizeof list);
  CHECK(strcmp(list, "canary/") == 0);
  CHECK(lstat(canary, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_ino == canary_st.st_ino && st.st_size == 7 &&
        (st.st_mode & 07777) == 0644 &&
        st.st_mtim.tv_sec == canary_st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == canary_st.st_mtim.tv_nsec);
  fd = open(canary, O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 7 &&
        memcmp(buf, "canary\n", 7) == 0);
  close(fd);
  CHECK(lstat(dst, &st) == 0 && S_ISDIR(st.st_mode));

  /* dst empty again, and its own mode back (a merge may have set it) */
  {
    DIR *d = opendir(dst);
    struct dirent *de;
    CHECK(d);
    while ((de = readdir(d)))
      if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
        rm_rf_at(dirfd(d), de->d_name);
    closedir(d);
    CHECK(chmod(dst, 0755) == 0);
  }
  return 0;
}
