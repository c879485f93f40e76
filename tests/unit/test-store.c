/* Unit tests for libcommon/store.c: the store's layout, writing blobs
 * (verified, size-limited, concurrent writers of one blob), reading them
 * back with corruption detected, and the store-wide gc lock. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "lock.h"
#include "store.h"
#include "tap.h"

static const char *tmp;

/* Regular entries of dfd (dot files aside), -1 when it cannot be read. */
static int count_entries(int dfd)
{
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  struct dirent *de;
  int n = 0;

  if (!d)
    return -1;
  while ((de = readdir(d)))
    if (de->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

static void check_clean(struct dsec_store *s, int blobs, const char *what)
{
  is_int(count_entries(s->blobs_fd), blobs, "%s: %d blob%s in blobs/", what,
         blobs, blobs == 1 ? "" : "s");
  is_int(count_entries(s->tmp_fd), 0, "%s: nothing left in tmp/", what);
}

static void check_status(struct dsec_error **err, int status, const char *what)
{
  is_int(*err ? (*err)->status : -1, status, "%s: status %d", what, status);
  if (*err)
    diag("  %s", (*err)->msg);
  dsec_error_free(*err);
  *err = NULL;
}

static struct dsec_store *open_store(const char *path)
{
  struct dsec_error *err = NULL;
  struct dsec_store *s = NULL;

  setenv("DSEC_STORE", path, 1);
  if (dsec_store_open(&s, &err) < 0)
    bail_out("cannot open the store %s: %s", path, err->msg);
  return s;
}

static void test_open(void)
{
  static const char *const dirs[] = {
    "blobs/sha256", "images", "layers", "refs", "sources", "tmp", "locks",
  };
  struct dsec_error *err = NULL;
  char *path = xasprintf("%s/new/store", tmp);
  struct dsec_store *s = NULL, *again = NULL;
  int missing = 0;

  setenv("DSEC_STORE", path, 1);
  is_int(dsec_store_open(&s, &err), 0, "store_open of a new directory");
  is_str(s ? s->path : NULL, path, "... keeps its absolute path");
  for (size_t i = 0; s && i < ARRAY_SIZE(dirs); i++) {
    struct stat st;
    if (fstatat(s->fd, dirs[i], &st, 0) < 0 || !S_ISDIR(st.st_mode)) {
      diag("  missing %s", dirs[i]);
      missing++;
    }
  }
  ok(s && missing == 0, "... and makes its layout");
  ok(s && s->blobs_fd >= 0 && s->tmp_fd >= 0 && s->locks_fd >= 0,
     "... with a descriptor on each directory");
  is_int(dsec_store_open(&again, &err), 0, "store_open of an existing store");
  dsec_store_free(again);
  dsec_store_free(s);
  dsec_store_free(NULL);
  free(path);

  s = NULL;
  setenv("DSEC_STORE", "relative/store", 1);
  is_int(dsec_store_open(&s, &err), -1, "store_open of a relative path fails");
  ok(s == NULL, "... without a store");
  check_status(&err, DSEC_EXIT_USAGE, "relative DSEC_STORE");

  path = xasprintf("%s/afile", tmp);
  if (close(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0)
    bail_out("cannot create %s", path);
  setenv("DSEC_STORE", path, 1);
  is_int(dsec_store_open(&s, &err), -1, "store_open of a regular file fails");
  check_status(&err, DSEC_EXIT_FAILURE, "store on a file");
  free(path);
}

static void test_writer(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  struct dsec_blob_writer *w = NULL;
  const char *content = "hello, store";
  char want[DSEC_DIGEST_LEN + 1], got[DSEC_DIGEST_LEN + 1] = "";
  bool existed = true;
  char *back, *path;
  size_t len = 0;
  int fd;
  struct stat st;

  dsec_sha256_buf(content, strlen(content), want);
  ok(!dsec_store_has_blob(s, want), "the blob is not there yet");
  is_int(dsec_blob_writer_open(s, &w, &err), 0, "blob_writer_open");
  is_int(count_entries(s->tmp_fd), 1, "... a temp file in tmp/");
  ok(dsec_blob_writer_write(w, "hello, ", 7, &err) == 0 &&
     dsec_blob_writer_write(w, "store", 5, &err) == 0,
     "blob_writer_write in two pieces");
  is_int(dsec_blob_writer_size(w), 12, "... size counts them");
  is_int(dsec_blob_writer_finish(w, want, got, &err), 0,
         "blob_writer_finish with the right expected digest");
  is_str(got, want, "... gives the digest");

  fd = dsec_blob_writer_fd(w, &err);
  back = fd >= 0 ? dsec_read_fd(fd, 100, &len, &err) : NULL;
  is_str(back, content, "blob_writer_fd reads the finished data from 0");
  free(back);
  if (fd >= 0)
    close(fd);

  is_int(dsec_blob_writer_commit(w, &existed, &err), 0, "blob_writer_commit");
  ok(!existed, "... the blob is new");
  ok(dsec_store_has_blob(s, want), "... and now in the store");
  check_clean(s, 1, "after commit");

  back = dsec_store_read_blob(s, want, 100, &len, &err);
  ok(back && len == 12 && strcmp(back, content) == 0,
     "store_read_blob gives the content");
  free(back);
  is_int(dsec_store_verify_blob(s, want, &err), 0, "store_verify_blob");
  path = dsec_store_blob_path(s, want);
  ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0444,
     "the blob is at blob_path, read-only (0444)");
  ok(dsec_str_has_suffix(path, dsec_digest_hex(want)) &&
     strstr(path, "/blobs/sha256/"),
     "... named blobs/sha256/<hex>");
  free(path);
  ok(err == NULL, "no error so far");
}

static void test_writer_mismatch(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  struct dsec_blob_writer *w = NULL;
  char wrong[DSEC_DIGEST_LEN + 1], actual[DSEC_DIGEST_LEN + 1];
  int before = count_entries(s->blobs_fd);

  dsec_sha256_buf("something else", 14, wrong);
  dsec_sha256_buf("mismatch", 8, actual);
  dsec_blob_writer_open(s, &w, &err);
  dsec_blob_writer_write(w, "mismatch", 8, &err);
  is_int(dsec_blob_writer_finish(w, wrong, NULL, &err), -1,
         "blob_writer_finish with a wrong expected digest fails");
  ok(err && strstr(err->msg, wrong) && strstr(err->msg, actual),
     "... naming both digests");
  check_status(&err, DSEC_EXIT_INPUT, "digest mismatch");
  dsec_blob_writer_abort(w);
  check_clean(s, before, "after abort");
  ok(!dsec_store_has_blob(s, wrong) && !dsec_store_has_blob(s, actual),
     "... neither digest is in the store");

  is_int(dsec_store_put_blob(s, "mismatch", 8, wrong, NULL, NULL, &err), -1,
         "store_put_blob with a wrong expected digest fails");
  check_status(&err, DSEC_EXIT_INPUT, "put_blob mismatch");
  check_clean(s, before, "after put_blob mismatch");
}

static void test_writer_limit(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  struct dsec_blob_writer *w = NULL;
  int before = count_entries(s->blobs_fd);

  dsec_blob_writer_open(s, &w, &err);
  dsec_blob_writer_set_limit(w, 10);
  is_int(dsec_blob_writer_write(w, "12345678", 8, &err), 0,
         "with a limit of 10, writing 8 bytes is fine");
  is_int(dsec_blob_writer_write(w, "90", 2, &err), 0,
         "... and 2 more, exactly the limit");
  is_int(dsec_blob_writer_write(w, "X", 1, &err), -1,
         "... one byte more fails");
  ok(err && strstr(err->msg, "10"), "... the message gives the limit");
  check_status(&err, DSEC_EXIT_INPUT, "over the limit");
  is_int(dsec_blob_writer_size(w), 10, "... and the size stays at 10");
  dsec_blob_writer_abort(w);
  check_clean(s, before, "after abort");

  dsec_blob_writer_open(s, &w, &err);
  dsec_blob_writer_set_limit(w, 4);
  is_int(dsec_blob_writer_write(w, "too big", 7, &err), -1,
         "a single write over the limit fails");
  check_status(&err, DSEC_EXIT_INPUT, "single write over the limit");
  dsec_blob_writer_abort(w);
  dsec_blob_writer_abort(NULL);
  check_clean(s, before, "after abort");
}

static void test_two_writers(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  struct dsec_blob_writer *w1 = NULL, *w2 = NULL;
  char d1[DSEC_DIGEST_LEN + 1] = "", d2[DSEC_DIGEST_LEN + 1] = "";
  bool existed1 = true, existed2 = false;
  int before = count_entries(s->blobs_fd);

  ok(dsec_blob_writer_open(s, &w1, &err) == 0 &&
     dsec_blob_writer_open(s, &w2, &err) == 0,
     "two writers open at once");
  is_int(count_entries(s->tmp_fd), 2, "... with two temp files");
  dsec_blob_writer_write(w1, "same content", 12, &err);
  dsec_blob_writer_write(w2, "same content", 12, &err);
  dsec_blob_writer_finish(w1, NULL, d1, &err);
  dsec_blob_writer_finish(w2, NULL, d2, &err);
  is_str(d2, d1, "both finish with one digest");
  is_int(dsec_blob_writer_commit(w1, &existed1, &err), 0, "first commit");
  ok(!existed1, "... the blob is new");
  is_int(dsec_blob_writer_commit(w2, &existed2, &err), 0, "second commit");
  ok(existed2, "... reports existed");
  check_clean(s, before + 1, "after both commits");
  ok(err == NULL, "no error");
}

static void test_commit_unfinished(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  struct dsec_blob_writer *w = NULL;
  int before = count_entries(s->blobs_fd);

  dsec_blob_writer_open(s, &w, &err);
  dsec_blob_writer_write(w, "half", 4, &err);
  is_int(dsec_blob_writer_commit(w, NULL, &err), -1,
         "commit before finish fails");
  ok(err && err->errnum == EINVAL, "... with EINVAL");
  check_status(&err, DSEC_EXIT_FAILURE, "commit before finish");
  check_clean(s, before, "after a refused commit");
}

static void test_corrupt_blob(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  char d[DSEC_DIGEST_LEN + 1];
  char *path, *back;
  int fd;

  if (dsec_store_put_blob(s, "pristine", 8, NULL, d, NULL, &err) < 0)
    bail_out("cannot put a blob: %s", err->msg);
  path = dsec_store_blob_path(s, d);
  if (chmod(path, 0644) < 0 ||
      (fd = open(path, O_WRONLY | O_CLOEXEC)) < 0 ||
      pwrite(fd, "P", 1, 0) != 1 || close(fd) < 0)
    bail_out("cannot modify %s", path);
  free(path);

  back = dsec_store_read_blob(s, d, 100, NULL, &err);
  ok(back == NULL, "store_read_blob of a modified blob fails");
  ok(err && strstr(err->msg, d) && strstr(err->msg, "corrupt"),
     "... saying the blob named by its digest is corrupt");
  check_status(&err, DSEC_EXIT_INPUT, "corrupt blob");
  free(back);
  is_int(dsec_store_verify_blob(s, d, &err), -1,
         "store_verify_blob of a modified blob fails");
  check_status(&err, DSEC_EXIT_INPUT, "verify corrupt blob");

  ok(dsec_store_read_blob(s, d, 3, NULL, &err) == NULL,
     "store_read_blob over max fails");
  check_status(&err, DSEC_EXIT_INPUT, "blob over max");
}

static void test_missing_blob(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  char d[DSEC_DIGEST_LEN + 1];

  dsec_sha256_buf("never stored", 12, d);
  ok(!dsec_store_has_blob(s, d), "has_blob of a missing blob is false");
  ok(!dsec_store_has_blob(s, "sha256:bad"), "has_blob of a bad digest is false");
  is_int(dsec_store_open_blob(s, d, &err), -1, "open_blob of a missing blob");
  ok(err && err->errnum == ENOENT, "... ENOENT");
  check_status(&err, DSEC_EXIT_INPUT, "missing blob");
  is_int(dsec_store_open_blob(s, "sha256:../../etc/passwd", &err), -1,
         "open_blob of an invalid digest");
  check_status(&err, DSEC_EXIT_INPUT, "invalid digest");
  ok(dsec_store_read_blob(s, d, 100, NULL, &err) == NULL,
     "read_blob of a missing blob fails");
  check_status(&err, DSEC_EXIT_INPUT, "read missing blob");
}

static void test_put_blob(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  char want[DSEC_DIGEST_LEN + 1], d[DSEC_DIGEST_LEN + 1] = "";
  bool existed = true;
  int before = count_entries(s->blobs_fd);
  char *back;

  dsec_sha256_buf("{\"put\":1}", 9, want);
  is_int(dsec_store_put_blob(s, "{\"put\":1}", 9, want, d, &existed, &err), 0,
         "store_put_blob with the expected digest");
  is_str(d, want, "... gives the digest");
  ok(!existed, "... the blob is new");
  back = dsec_store_read_blob(s, want, 100, NULL, &err);
  is_str(back, "{\"put\":1}", "... and readable");
  free(back);

  existed = false;
  is_int(dsec_store_put_blob(s, "{\"put\":1}", 9, want, NULL, &existed, &err),
         0, "store_put_blob again, expected given");
  ok(existed, "... reports existed");
  existed = false;
  is_int(dsec_store_put_blob(s, "{\"put\":1}", 9, NULL, d, &existed, &err), 0,
         "store_put_blob again, no expected digest");
  ok(existed, "... reports existed");
  check_clean(s, before + 1, "after three puts of one blob");
  ok(err == NULL, "no error");
}

/* A non-blocking probe of the gc lock, as another opener would see it:
 * 0 if it could be taken, else the errno. */
static int probe_gc(struct dsec_store *s, enum dsec_lock_mode mode)
{
  struct dsec_error *err = NULL;
  int fd = dsec_lock_at(s->locks_fd, "gc", mode, true, &err);
  int e = fd >= 0 ? 0 : err ? err->errnum : -1;
  if (fd >= 0)
    close(fd);
  dsec_error_free(err);
  return e;
}

static void test_gc_lock(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  int sh1 = dsec_store_lock_gc(s, false, &err);
  int sh2 = dsec_store_lock_gc(s, false, &err);
  int ex;

  ok(sh1 >= 0 && sh2 >= 0, "two shared gc locks at once");
  is_int(probe_gc(s, DSEC_LOCK_EXCLUSIVE), EWOULDBLOCK,
         "... keep out an exclusive one");
  close(sh1);
  is_int(probe_gc(s, DSEC_LOCK_EXCLUSIVE), EWOULDBLOCK,
         "... while either is held");
  close(sh2);

  ex = dsec_store_lock_gc(s, true, &err);
  ok(ex >= 0, "an exclusive gc lock once they are gone");
  is_int(probe_gc(s, DSEC_LOCK_SHARED), EWOULDBLOCK,
         "... keeps out a shared one");
  is_int(probe_gc(s, DSEC_LOCK_EXCLUSIVE), EWOULDBLOCK,
         "... and another exclusive one");
  close(ex);
  is_int(probe_gc(s, DSEC_LOCK_SHARED), 0, "released, shared is free again");
  ok(faccessat(s->locks_fd, "gc", F_OK, 0) == 0, "the lock is locks/gc");
  ok(err == NULL, "no error");
}

static void test_blob_lock(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  char d[DSEC_DIGEST_LEN + 1];
  char *name;
  int fd, probe;

  dsec_sha256_buf("layer", 5, d);
  fd = dsec_store_lock(s, "layer", d, &err);
  ok(fd >= 0, "store_lock of a layer");
  name = xasprintf("layer-%s", dsec_digest_hex(d));
  probe = dsec_lock_at(s->locks_fd, name, DSEC_LOCK_SHARED, true, &err);
  ok(probe < 0 && err && err->errnum == EWOULDBLOCK,
     "... is exclusive, on locks/layer-<hex>");
  if (probe >= 0)
    close(probe);
  free(name);
  if (fd >= 0)
    close(fd);
  dsec_error_free(err);
}

int main(void)
{
  struct dsec_store *s;
  char *path;

  tmp = tap_tmpdir("test-store");
  test_open();

  path = xasprintf("%s/store", tmp);
  s = open_store(path);
  free(path);
  test_writer(s);
  test_writer_mismatch(s);
  test_writer_limit(s);
  test_two_writers(s);
  test_commit_unfinished(s);
  test_corrupt_blob(s);
  test_missing_blob(s);
  test_put_blob(s);
  test_gc_lock(s);
  test_blob_lock(s);
  dsec_store_free(s);
  return done_testing();
}
