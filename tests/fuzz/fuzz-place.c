/* Fuzz target: dsec-place's planner (cmd/dsec-place/place.c), which reads
 * node inventories and sandbox requests that trainers and other nodes
 * wrote.  The input is the nodes' JSON Lines, a NUL byte, then the
 * requests' (no NUL: no requests).  Beyond memory errors and undefined
 * behaviour it checks: a refusal has a message and writes nothing; a plan
 * is one JSON object per line, each an "assignment" (to a node of the
 * input, with a score from 0 to 1) or "unplaced" (with a reason); the
 * same input gives the same plan. */
#define _GNU_SOURCE
#include <config.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "place.h"
#include "utils.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

/* bounds of the harness, not of the planner: plans of a few sandboxes */
#define SANDBOXES_MAX 2000

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  /* no store to resolve image names in */
  setenv("DSEC_STORE", "/nonexistent/dsec-fuzz-store", 1);
  setenv("DSEC_ROOT", "/nonexistent/dsec-fuzz-root", 1);
  return 0;
}

static int memfd_of(const char *name, const void *p, size_t len)
{
  int fd = memfd_create(name, MFD_CLOEXEC);
  CHECK(fd >= 0);
  CHECK(len == 0 || write(fd, p, len) == (ssize_t) len);
  CHECK(lseek(fd, 0, SEEK_SET) == 0);
  return fd;
}

/* The sandboxes the requests ask for, as far as the harness can tell (a
 * line it cannot read counts as one). */
static uint64_t asked(const char *p, size_t len)
{
  uint64_t total = 0;
  while (len > 0) {
    const char *nl = memchr(p, '\n', len);
    size_t l = nl ? (size_t) (nl - p) : len;
    json_t *j = json_loadb(p, l, 0, NULL);
    json_t *c = json_object_get(j, "count");
    if (json_is_integer(c) && json_integer_value(c) > 0)
      total += (uint64_t) json_integer_value(c);
    else
      total++;
    json_decref(j);
    p += l;
    len -= l;
    if (nl) {
      p++;
      len--;
    }
  }
  return total;
}

static char *plan(int nfd, int rfd, int *ret, size_t *len)
{
  char npath[64], rpath[64];
  struct dsec_error *err = NULL;
  int out = memfd_create("plan", MFD_CLOEXEC);
  char *buf;
  off_t end;

  CHECK(out >= 0);
  snprintf(npath, sizeof npath, "/proc/self/fd/%d", nfd);
  snprintf(rpath, sizeof rpath, "/proc/self/fd/%d", rfd);
  CHECK(lseek(nfd, 0, SEEK_SET) == 0 && lseek(rfd, 0, SEEK_SET) == 0);
  *ret = dsec_place_plan(npath, rpath, out, &err);
  CHECK(*ret == 0 || (err && err->msg && *err->msg));
  dsec_error_free(err);
  end = lseek(out, 0, SEEK_END);
  CHECK(end >= 0);
  buf = xmalloc((size_t) end + 1);
  CHECK(pread(out, buf, (size_t) end, 0) == end);
  buf[end] = '\0';
  *len = (size_t) end;
  close(out);
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *in = (const char *) data;
  const char *sep = memchr(in, '\0', size);
  size_t nlen = sep ? (size_t) (sep - in) : size;
  const char *req = sep ? sep + 1 : in + size;
  size_t rlen = size - nlen - (sep ? 1 : 0);
  _cleanup_free_ char *a = NULL;
  _cleanup_free_ char *b = NULL;
  size_t alen, blen, lines = 0;
  int nfd, rfd, ra, rb;
  char *line, *save;

  if (size > (1u << 20) || asked(req, rlen) > SANDBOXES_MAX)
    return 0;
  nfd = memfd_of("nodes", in, nlen);
  rfd = memfd_of("requests", req, rlen);
  a = plan(nfd, rfd, &ra, &alen);
  b = plan(nfd, rfd, &rb, &blen);
  close(nfd);
  close(rfd);
  CHECK(ra == rb && alen == blen && memcmp(a, b, alen) == 0);
  if (ra < 0) {
    CHECK(alen == 0);
    return 0;
  }
  CHECK(alen == 0 || a[alen - 1] == '\n');
  for (line = strtok_r(a, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    json_t *j = json_loads(line, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    CHECK(j && type);
    CHECK(json_is_integer(json_object_get(j, "index")));
    if (strcmp(type, "assignment") == 0) {
      double score = json_number_value(json_object_get(j, "score"));
      CHECK(json_is_string(json_object_get(j, "node")));
      CHECK(score >= 0 && score <= 1.0000001);
      CHECK(json_is_integer(json_object_get(j, "fetch_bytes")));
    } else {
      CHECK(strcmp(type, "unplaced") == 0);
      CHECK(json_is_string(json_object_get(j, "reason")));
    }
    json_decref(j);
    lines++;
  }
  CHECK(lines <= SANDBOXES_MAX);
  return 0;
}
