/* Unit tests for libcommon/landlock.c: the rights and scopes of each ABI,
 * the plan (protected paths resolved, covered ones dropped, ancestors),
 * its report, and, on a kernel with Landlock, what the rules allow in a
 * child restricted with them, for every ABI up to the kernel's: with no
 * read-only mount in the way, this is Landlock alone.  Needs no root (the
 * child sets no_new_privs). */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "landlock.h"
#include "tap.h"

static char top[PATH_MAX];       /* the test's directory, resolved */
static char base[PATH_MAX + 16]; /* the tree of the current test, in top */

static char *at(const char *name)
{
  static char buf[4][PATH_MAX + 64];
  static int i;
  i = (i + 1) % 4;
  snprintf(buf[i], sizeof buf[i], "%s/%s", base, name);
  return buf[i];
}

static void make(const char *name, const char *content)
{
  int fd = open(at(name), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, content, strlen(content)) < 0 || close(fd) < 0)
    bail_out("cannot make %s", name);
}

/* A fresh tree in top/NAME, the current one from now on:
 *   prot/f, prot/inner/   a protected directory
 *   pfile                 a protected file, with a second name oldalias
 *   plink -> pfile
 *   sib/old               a sibling directory
 *   old.txt               a sibling file */
static void make_tree(const char *name)
{
  snprintf(base, sizeof base, "%s/%s", top, name);
  if (mkdir(base, 0755) < 0 || mkdir(at("prot"), 0755) < 0 ||
      mkdir(at("prot/inner"), 0755) < 0 || mkdir(at("sib"), 0755) < 0 ||
      symlink("pfile", at("plink")) < 0)
    bail_out("cannot set up %s", base);
  make("prot/f", "protected\n");
  make("pfile", "protected\n");
  make("sib/old", "old\n");
  make("old.txt", "old\n");
  if (link(at("pfile"), at("oldalias")) < 0)
    bail_out("cannot link in %s", base);
}

static bool has(json_t *a, const char *s)
{
  json_t *v;
  size_t i;
  json_array_foreach(a, i, v)
  {
    if (strcmp(json_string_value(v), s) == 0)
      return true;
  }
  return false;
}

static void test_rights(void)
{
  uint64_t r1 = dsec_landlock_fs_rights(1), r2 = dsec_landlock_fs_rights(2);
  uint64_t r3 = dsec_landlock_fs_rights(3), r5 = dsec_landlock_fs_rights(5);

  ok(r1 != 0 && (r1 & r2) == r1 && (r2 & r3) == r2 && (r3 & r5) == r3,
     "each ABI handles what the one before did");
  ok(r2 != r1 && r3 != r2 && r5 != r3, "ABI 2, 3 and 5 each add a right");
  is_int(dsec_landlock_fs_rights(4), r3, "ABI 4 adds no file system right");
  is_int(dsec_landlock_fs_rights(7), r5, "ABI 6 and 7 add none either");
  is_int(dsec_landlock_scopes(5), 0, "no scopes before ABI 6");
  is_int(__builtin_popcountll(dsec_landlock_scopes(6)), 2,
         "ABI 6: the signal and abstract unix socket scopes");
}

static void test_plan(void)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  json_t *protect = json_pack("[s, s, s, s, s]", at("prot/inner"), at("prot"),
                              at("missing/x"), at("plink"), at("pfile"));
  struct dsec_landlock ll;
  int r;

  r = dsec_landlock_plan(&ll, 3, protect, &err);
  is_int(r, 0, "plan");
  if (r < 0) {
    diag("%s", err->msg);
    json_decref(protect);
    return;
  }
  is_int(ll.n_protect, 2, "a path beneath another, a missing one and a "
                          "symbolic link to another are left out");
  is_str(ll.n_protect > 0 ? ll.protect[0] : NULL, at("pfile"), "sorted: pfile");
  is_str(ll.n_protect > 1 ? ll.protect[1] : NULL, at("prot"), "then prot");
  /* "/", then every directory down to base */
  {
    size_t want = 1;
    for (const char *p = strchr(base + 1, '/'); p; p = strchr(p + 1, '/'))
      want++;
    want++; /* base itself */
    is_int(ll.n_ancestors, want, "the ancestors: / and each directory down "
                                 "to the test's");
  }
  is_str(ll.n_ancestors > 0 ? ll.ancestors[0] : NULL, "/", "/ is one");
  ok(ll.n_ancestors > 0 && strcmp(ll.ancestors[ll.n_ancestors - 1], base) == 0,
     "the test's directory is one");
  {
    json_t *j = dsec_landlock_to_json(&ll);
    json_t *handled = json_object_get(j, "handled");
    json_t *missing = json_object_get(j, "missing");
    is_int(json_integer_value(json_object_get(j, "abi")), 3, "report: abi");
    is_str(json_string_value(json_object_get(j, "rules")), "protect",
           "report: rules are protect");
    ok(has(handled, "write_file") && has(handled, "truncate") &&
         has(handled, "refer") && !has(handled, "ioctl_dev"),
       "report: ABI 3 handles write_file, truncate, refer, not ioctl_dev");
    ok(json_array_size(missing) == 3 && has(missing, "ioctl_dev") &&
         has(missing, "signal") && has(missing, "abstract_unix_socket"),
       "report: ABI 3 misses ioctl_dev and the two scopes");
    is_int(json_array_size(json_object_get(j, "scoped")), 0,
           "report: no scopes on ABI 3");
    is_int(json_array_size(json_object_get(j, "protect")), 2,
           "report: the protected paths");
    json_decref(j);
  }
  dsec_landlock_clear(&ll);
  json_decref(protect);

  protect = json_array();
  dsec_landlock_plan(&ll, 7, protect, &err);
  {
    json_t *j = dsec_landlock_to_json(&ll);
    is_str(json_string_value(json_object_get(j, "rules")), "scopes",
           "without protect, ABI 7: scopes only");
    ok(ll.fs == 0 && json_array_size(json_object_get(j, "handled")) == 0,
       "... and no file system right handled");
    json_decref(j);
  }
  dsec_landlock_clear(&ll);
  dsec_landlock_plan(&ll, 5, protect, &err);
  {
    json_t *j = dsec_landlock_to_json(&ll);
    is_str(json_string_value(json_object_get(j, "rules")), "none",
           "without protect, ABI 5: nothing to enforce");
    json_decref(j);
  }
  dsec_landlock_clear(&ll);
  json_decref(protect);
}

/* The operations a restricted child tries, and the errno each must get
 * (0: it works). */
enum { OP_PROT_W, OP_PFILE_W, OP_OLDALIAS_W, OP_PFILE_TRUNC, OP_PROT_CREATE, OP_SIB_W,
       OP_SIB_NEW, OP_OLD_W, OP_FRESH_W, OP_FRESH_MADE, OP_MKDIR,
       OP_NEWDIR_W, OP_RENAME_SIB, OP_SIB2_W, OP_LINK, OP_ALIAS_W,
       OP_REPARENT, OP_DEVNULL, OP_SIGNAL, OP_N };

static const char *const op_names[OP_N] = {
  "open(O_WRONLY) of a file in a protected directory",
  "open(O_WRONLY) of a protected file",
  "open(O_WRONLY) of an older second name of it, in an ancestor",
  "truncate(2) of a protected file",
  "O_CREAT|O_WRONLY in a protected directory (made, not writable)",
  "open(O_WRONLY) of an old file in a sibling directory",
  "O_CREAT|O_WRONLY in a sibling directory",
  "open(O_WRONLY) of an old file directly in an ancestor",
  "O_CREAT|O_WRONLY of a new file directly in an ancestor",
  "... which was made all the same",
  "mkdir in an ancestor",
  "O_CREAT|O_WRONLY in a new directory of an ancestor",
  "rename of a sibling directory within the ancestor",
  "open(O_WRONLY) in the renamed sibling",
  "link(2) of a protected file beside it",
  "open(O_WRONLY) of that second name",
  "rename of a new ancestor file into a sibling (gains rights)",
  "open(O_WRONLY) of /dev/null",
  "kill(parent, 0) out of the domain",
};

static int try_open(const char *path, int flags)
{
  int fd = open(path, flags | O_CLOEXEC, 0644);
  if (fd < 0)
    return errno;
  close(fd);
  return 0;
}

static void restricted_child(json_t *protect, int abi, int out)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  struct dsec_landlock ll;
  int res[OP_N];

  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
      dsec_landlock_plan(&ll, abi, protect, &err) < 0 ||
      dsec_landlock_apply(&ll, &err) != 1) {
    dprintf(2, "restrict: %s\n", err ? err->msg : strerror(errno));
    _exit(2);
  }
  res[OP_PROT_W] = try_open(at("prot/f"), O_WRONLY);
  res[OP_PFILE_W] = try_open(at("pfile"), O_WRONLY);
  res[OP_OLDALIAS_W] = try_open(at("oldalias"), O_WRONLY);
  res[OP_PFILE_TRUNC] = truncate(at("pfile"), 0) < 0 ? errno : 0;
  res[OP_PROT_CREATE] = try_open(at("prot/new"), O_WRONLY | O_CREAT);
  res[OP_SIB_W] = try_open(at("sib/old"), O_WRONLY);
  res[OP_SIB_NEW] = try_open(at("sib/new"), O_WRONLY | O_CREAT);
  res[OP_OLD_W] = try_open(at("old.txt"), O_WRONLY);
  res[OP_FRESH_W] = try_open(at("fresh"), O_WRONLY | O_CREAT);
  res[OP_FRESH_MADE] = access(at("fresh"), F_OK) < 0 ? errno : 0;
  res[OP_MKDIR] = mkdir(at("newdir"), 0755) < 0 ? errno : 0;
  res[OP_NEWDIR_W] = try_open(at("newdir/f"), O_WRONLY | O_CREAT);
  res[OP_RENAME_SIB] = rename(at("sib"), at("sib2")) < 0 ? errno : 0;
  res[OP_SIB2_W] = try_open(at("sib2/old"), O_WRONLY);
  rename(at("sib2"), at("sib"));
  res[OP_LINK] = link(at("pfile"), at("palias")) < 0 ? errno : 0;
  res[OP_ALIAS_W] = try_open(at("palias"), O_WRONLY);
  res[OP_REPARENT] = rename(at("fresh"), at("sib/fresh")) < 0 ? errno : 0;
  res[OP_DEVNULL] = try_open("/dev/null", O_WRONLY);
  res[OP_SIGNAL] = kill(getppid(), 0) < 0 ? errno : 0;
  if (write(out, res, sizeof res) != (ssize_t) sizeof res)
    _exit(3);
  _exit(0);
}

static void test_enforced(int abi)
{
  json_t *protect;
  char name[32];
  snprintf(name, sizeof name, "abi%d", abi);
  make_tree(name);
  protect = json_pack("[s, s]", at("prot"), at("pfile"));
  int want[OP_N] = {
    [OP_PROT_W] = EACCES,     [OP_PFILE_W] = EACCES,
    [OP_OLDALIAS_W] = EACCES,
    [OP_PFILE_TRUNC] = abi >= DSEC_LANDLOCK_ABI_TRUNCATE ? EACCES : 0,
    [OP_PROT_CREATE] = EACCES, [OP_FRESH_W] = EACCES,
    [OP_NEWDIR_W] = EACCES,   [OP_ALIAS_W] = EACCES,
    [OP_REPARENT] = EXDEV,
    [OP_SIGNAL] = abi >= DSEC_LANDLOCK_ABI_SCOPES ? EPERM : 0,
  };
  int res[OP_N], p[2], status;
  pid_t pid;

  if (pipe(p) < 0)
    bail_out("pipe");
  fflush(stdout);
  pid = fork();
  if (pid < 0)
    bail_out("fork");
  if (pid == 0) {
    close(p[0]);
    restricted_child(protect, abi, p[1]);
  }
  close(p[1]);
  if (read(p[0], res, sizeof res) != (ssize_t) sizeof res) {
    waitpid(pid, &status, 0);
    close(p[0]);
    ok(0, "the restricted child reported (exit status %d)",
       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    json_decref(protect);
    return;
  }
  close(p[0]);
  waitpid(pid, &status, 0);
  for (int i = 0; i < OP_N; i++)
    if (!is_int(res[i], want[i], "ABI %d: %s: %s", abi, op_names[i],
                want[i] ? strerror(want[i]) : "works"))
      diag("got %s", res[i] ? strerror(res[i]) : "success");
  json_decref(protect);
}

/* Without protect: only the scopes, no file system right is handled. */
static void test_scopes_only(int abi)
{
  pid_t pid;
  int status;

  fflush(stdout);
  pid = fork();
  if (pid < 0)
    bail_out("fork");
  if (pid == 0) {
    struct dsec_error *err = NULL;
    struct dsec_landlock ll;
    json_t *none = json_array();
    int made;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        dsec_landlock_plan(&ll, abi, none, &err) < 0)
      _exit(10);
    made = dsec_landlock_apply(&ll, &err);
    if (made != (abi >= DSEC_LANDLOCK_ABI_SCOPES))
      _exit(11);
    if (try_open(at("scoped-new"), O_WRONLY | O_CREAT) != 0)
      _exit(12);
    if (abi >= DSEC_LANDLOCK_ABI_SCOPES && !(kill(getppid(), 0) < 0 && errno == EPERM))
      _exit(13);
    _exit(0);
  }
  waitpid(pid, &status, 0);
  is_int(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0,
         "without protect: %s, files stay writable",
         abi >= DSEC_LANDLOCK_ABI_SCOPES ? "a domain with the scopes only"
                                         : "no domain");
}

int main(void)
{
  _cleanup_free_ char *why = NULL;
  int abi;

  if (!realpath(tap_tmpdir("landlock"), top))
    bail_out("realpath");
  make_tree("plan");

  test_rights();
  test_plan();
  abi = dsec_landlock_abi(&why);
  if (abi < 1) {
    skip(OP_N + 1, "%s", why);
    return done_testing();
  }
  diag("the kernel's Landlock ABI is %d", abi);
  /* the kernel takes a ruleset of any ABI up to its own: what each lower
   * one drops is seen here too */
  for (int a = 1; a <= abi; a++)
    test_enforced(a);
  make_tree("scopes");
  test_scopes_only(abi);
  return done_testing();
}
