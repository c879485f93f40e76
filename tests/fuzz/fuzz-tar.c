/* Fuzz target: the member checks of untrusted layer tarballs
 * (libcommon/tarball.c: dsec_tar_scan, what dsec-pull and dsec-layer run
 * on every blob, and dsec_tar_rewrite, what a checkpoint's and dsec-layer
 * create's streams go through).  The input is the blob (tar, or gzip, zstd
 * or xz of it).  Beyond memory errors and undefined behaviour it checks: a
 * refusal has a message; what a rewrite (setuid bits and capabilities
 * stripped) wrote passes the scan again with the same policy, with no more
 * members than the input, no setuid or setgid file, no file capability and
 * no device node left; the scan and the rewrite agree on the members they
 * counted. */
#define _GNU_SOURCE
#include <config.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tarball.h"
#include "utils.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

#define OUT_MAX (64u << 20)

struct buf {
  char *p;
  size_t len;
};

static int collect(void *ud, const void *p, size_t len, struct dsec_error **err)
{
  struct buf *b = ud;
  if (b->len + len > OUT_MAX)
    return dsec_fail(err, EFBIG, "output too large");
  b->p = xrealloc(b->p, b->len + len + 1);
  memcpy(b->p + b->len, p, len);
  b->len += len;
  return 0;
}

static int memfd_of(const void *p, size_t len)
{
  int fd = memfd_create("tar", MFD_CLOEXEC);
  CHECK(fd >= 0);
  CHECK(len == 0 || write(fd, p, len) == (ssize_t) len);
  CHECK(lseek(fd, 0, SEEK_SET) == 0);
  return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static const char *const protect[] = { "/grader", "/task/tests", NULL };
  struct dsec_tar_policy p = { .max_size = 16u << 20, .protect = protect };
  struct dsec_tar_policy strip = p;
  struct dsec_tar_stats st = { 0 }, rst = { 0 }, ost = { 0 };
  struct dsec_error *err = NULL;
  struct buf out = { 0 };
  int fd = memfd_of(data, size), ofd;
  int scanned, rewritten;

  scanned = dsec_tar_scan(fd, &p, &st, &err);
  CHECK(scanned == 0 || (err && err->msg && *err->msg));
  dsec_error_free(err);
  err = NULL;

  strip.strip_setuid = true;
  strip.strip_overlay = true;
  CHECK(lseek(fd, 0, SEEK_SET) == 0);
  rewritten = dsec_tar_rewrite(fd, &strip, collect, &out, false, &rst, &err);
  close(fd);
  CHECK(rewritten == 0 || (err && err->msg && *err->msg));
  dsec_error_free(err);
  err = NULL;
  if (scanned == 0 && rewritten == 0)
    CHECK(st.entries == rst.entries);
  if (rewritten == 0) {
    ofd = memfd_of(out.p, out.len);
    if (dsec_tar_scan(ofd, &p, &ost, &err) < 0)
      abort(); /* what dsec wrote, dsec refuses */
    CHECK(ost.entries <= rst.entries);
    CHECK(ost.setuid_files == 0 && ost.setgid_files == 0);
    CHECK(ost.capability_files == 0 && ost.device_nodes == 0);
    close(ofd);
  }
  free(out.p);
  return 0;
}
