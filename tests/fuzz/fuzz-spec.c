/* Fuzz target: the sandbox spec (libcommon/spec.c), which dsec-run and
 * serve read from any caller.  The input is a spec as JSON; beyond memory
 * errors it checks what the engine relies on: a refusal has a message; an
 * accepted spec written back (dsec_spec_to_json) is accepted again and
 * comes back the same (defaults filled in); its paths (workdir, mount targets, protect, hide)
 * are clean sandbox paths.  The input as a string also goes through the
 * command line's parsers: dsec_sandbox_path_clean (absolute, no "..",
 * no "//", "." or control bytes, the same when cleaned again),
 * dsec_parse_user (0..65535) and dsec_parse_mount. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

static void check_clean_path(const char *p)
{
  _cleanup_free_ char *again = NULL;
  CHECK(p && p[0] == '/');
  CHECK(!strstr(p, "//") && !strstr(p, "/./") && !strstr(p, "/../"));
  CHECK(strcmp(p, "/") == 0 || p[strlen(p) - 1] != '/');
  again = dsec_sandbox_path_clean(p);
  CHECK(again && strcmp(again, p) == 0);
}

static void check_strv(const struct dsec_strv *v, bool paths)
{
  for (size_t i = 0; i < v->n; i++) {
    CHECK(v->v[i]);
    if (paths)
      check_clean_path(v->v[i]);
  }
}

static void strings(const uint8_t *data, size_t size)
{
  _cleanup_free_ char *s = malloc(size + 1);
  _cleanup_free_ char *clean = NULL;
  _cleanup_json_ json_t *m = NULL;
  _cleanup_error_ struct dsec_error *err = NULL;
  uid_t uid;
  gid_t gid;

  CHECK(s);
  memcpy(s, data, size);
  s[size] = '\0';
  clean = dsec_sandbox_path_clean(s);
  if (clean)
    check_clean_path(clean);
  if (dsec_parse_user(s, &uid, &gid) == 0)
    CHECK(uid <= 65535 && gid <= 65535);
  m = dsec_parse_mount(s, &err);
  CHECK(m || (err && err->msg));
  if (m)
    CHECK(json_is_string(json_object_get(m, "source")) &&
          json_is_string(json_object_get(m, "target")));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  _cleanup_json_ json_t *j = NULL;
  _cleanup_json_ json_t *back = NULL;
  _cleanup_json_ json_t *again = NULL;
  _cleanup_json_ json_t *copy = NULL;
  _cleanup_error_ struct dsec_error *err = NULL;
  _cleanup_spec_ struct dsec_spec *s = NULL;
  _cleanup_spec_ struct dsec_spec *s2 = NULL;

  if (size > DSEC_SPEC_MAX)
    return 0;
  strings(data, size);
  j = json_loadb((const char *) data, size, JSON_REJECT_DUPLICATES, NULL);
  if (!j)
    return 0;
  if (dsec_spec_parse(j, &s, &err) < 0) {
    CHECK(err && err->msg && *err->msg);
    return 0;
  }
  check_clean_path(s->workdir);
  for (size_t i = 0; i < s->n_mounts; i++) {
    CHECK(s->mounts[i].source);
    check_clean_path(s->mounts[i].target);
  }
  check_strv(&s->layers, false);
  check_strv(&s->protect, true);
  check_strv(&s->hide, true);
  CHECK(s->image && json_is_object(s->env) && json_is_object(s->labels));
  CHECK(s->ttl_s >= 0 && s->idle_timeout_s >= 0 && s->resources.cpus >= 0);

  back = dsec_spec_to_json(s);
  CHECK(back);
  copy = json_deep_copy(back);
  if (dsec_spec_parse(copy, &s2, &err) < 0)
    abort(); /* the engine writes spec.json back and reads it again */
  /* and says the same as the spec it was read from, defaults filled in */
  again = dsec_spec_to_json(s2);
  CHECK(json_equal(copy, again));
  return 0;
}
