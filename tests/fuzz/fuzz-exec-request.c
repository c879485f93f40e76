/* Fuzz target: the exec requests a supervisor reads from its socket
 * (libcommon/ctl.c splits them into lines, libcommon/exec.c checks and
 * records them and keeps the trajectory that replays them by seq).  The
 * input is what a client sent, as it arrives: any bytes, one request per
 * line.  Beyond memory errors and undefined behaviour it checks what the
 * engine relies on: a refused request says why; the record of an accepted
 * one is accepted again and has the fields the engine reads (cmd, stdin,
 * workdir, env, timeout_s, max_output_bytes), its environment merges into
 * "K=V" strings; a request with a seq that is the next one is run and
 * recorded, and the same record sent again is answered from the
 * trajectory (replayed, the same result) without running. */
#define _GNU_SOURCE
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctl.h"
#include "exec.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

static void one(struct dsec_traj *t, json_t *req)
{
  _cleanup_json_ json_t *rec = NULL;
  _cleanup_json_ json_t *env = NULL;
  _cleanup_json_ json_t *base = NULL;
  _cleanup_json_ json_t *out = NULL;
  _cleanup_json_ json_t *res = NULL;
  _cleanup_error_ struct dsec_error *err = NULL;
  _cleanup_free_ char *why = NULL;
  const char *conflict;
  uint64_t cap;
  json_t *seq, *v;
  size_t i;
  int r;

  if (dsec_exec_request_check(req, &why) < 0) {
    CHECK(why && *why);
    return;
  }
  rec = dsec_exec_request_record(req, "/", &cap);
  CHECK(rec);
  CHECK(cap <= (64u << 20));
  CHECK(dsec_exec_request_check(rec, &why) == 0);
  CHECK(json_is_array(json_object_get(rec, "cmd")));
  CHECK(json_is_string(json_object_get(rec, "stdin")));
  CHECK(json_is_string(json_object_get(rec, "workdir")));
  CHECK(json_is_object(json_object_get(rec, "env")));
  CHECK(json_is_number(json_object_get(rec, "timeout_s")));
  /* an accepted "durable": false goes without a seq, and is not recorded */
  CHECK(!json_is_false(json_object_get(req, "durable")) ||
        !json_is_integer(json_object_get(req, "seq")));
  CHECK(!json_object_get(rec, "durable"));
  base = json_pack("{s:s, s:s}", "PATH", "/bin", "HOME", "/");
  env = dsec_exec_env(base, json_object_get(rec, "env"));
  CHECK(json_is_array(env));
  json_array_foreach(env, i, v)
  {
    const char *s = json_string_value(v);
    CHECK(s && strchr(s, '=') && s[0] != '=');
  }

  seq = json_object_get(rec, "seq");
  if (!seq)
    return;
  r = dsec_traj_check(t, rec, NULL, 0, &out, &conflict);
  if (r < 0) {
    CHECK(json_is_object(out));
    return;
  }
  if (r > 0) {
    CHECK(json_is_true(json_object_get(out, "replayed")));
    return;
  }
  res = dsec_exec_result("sb-fuzz", seq, 0, 0, "out", 3, 3, "", 0, 0, false,
                         false, 1.0);
  CHECK(res);
  /* not synced: what is fuzzed is the record and its replay */
  if (dsec_traj_append(t, seq, rec, res, false, &err) < 0)
    return;
  json_decref(out);
  out = NULL;
  /* the same request again: from the trajectory, not run */
  r = dsec_traj_check(t, rec, NULL, 0, &out, &conflict);
  CHECK(r == 1);
  CHECK(json_is_true(json_object_get(out, "replayed")));
  CHECK(json_equal(json_object_get(out, "stdout"), json_object_get(res, "stdout")));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct dsec_ctl_client c = { .fd = -1 };
  struct dsec_traj t = { .fd = -1 };
  json_t *req;

  if (size > (1u << 20))
    return 0;
  t.fd = memfd_create("trajectory", MFD_CLOEXEC);
  CHECK(t.fd >= 0);
  c.in = malloc(size + 1);
  CHECK(c.in);
  memcpy(c.in, data, size);
  c.len = c.cap = size;
  while (dsec_ctl_next(&c, &req) == 1) {
    one(&t, req);
    json_decref(req);
  }
  /* a resumed sandbox indexes its trajectory again: the same entries */
  {
    struct dsec_traj again = { .fd = t.fd };
    dsec_traj_load(&again);
    CHECK(again.n == t.n);
    dsec_traj_free(&again);
  }
  dsec_traj_free(&t);
  close(t.fd);
  free(c.in);
  return 0;
}
