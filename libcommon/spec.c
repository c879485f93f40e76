#include <config.h>

#include "spec.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "cli.h"
#include "proxy-parse.h"
#include "refs.h"

char *dsec_sandbox_path_clean(const char *p)
{
  size_t n = strlen(p);
  char *out, *o;

  if (p[0] != '/' || n > 4096)
    return NULL;
  out = xmalloc(n + 2);
  o = out;
  while (*p) {
    const char *end;
    size_t len;
    while (*p == '/')
      p++;
    if (!*p)
      break;
    end = strchr(p, '/');
    len = end ? (size_t) (end - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') {
      free(out);
      return NULL;
    }
    if (!(len == 1 && p[0] == '.')) {
      *o++ = '/';
      memcpy(o, p, len);
      o += len;
    }
    p += len;
  }
  if (o == out)
    *o++ = '/';
  *o = '\0';
  for (const char *c = out; *c; c++)
    if ((unsigned char) *c < 0x20) {
      free(out);
      return NULL;
    }
  return out;
}

int dsec_parse_user(const char *s, uid_t *uid, gid_t *gid)
{
  _cleanup_free_ char *u = xstrdup(s);
  char *colon = strchr(u, ':');
  uint64_t a, b;

  if (colon)
    *colon = '\0';
  if (dsec_parse_uint(u, 65535, &a) < 0)
    return -1;
  b = a;
  if (colon && dsec_parse_uint(colon + 1, 65535, &b) < 0)
    return -1;
  *uid = (uid_t) a;
  *gid = (gid_t) b;
  return 0;
}

json_t *dsec_parse_mount(const char *s, struct dsec_error **err)
{
  _cleanup_free_ char *m = xstrdup(s);
  char *dst = strchr(m, ':');
  char *opt;
  bool ro = false;
  json_t *j;

  if (!dst || dst == m) {
    dsec_bad_input(err, "--mount `%s`: use SRC:DST[:ro]", s);
    return NULL;
  }
  *dst++ = '\0';
  opt = strchr(dst, ':');
  if (opt) {
    *opt++ = '\0';
    if (strcmp(opt, "ro") == 0)
      ro = true;
    else if (strcmp(opt, "rw") != 0) {
      dsec_bad_input(err, "--mount `%s`: unknown option `%s` (ro or rw)", s,
                     opt);
      return NULL;
    }
  }
  j = json_pack("{s:s, s:s, s:b}", "source", m, "target", dst, "ro", ro);
  if (!j)
    dsec_bad_input(err, "--mount: a path that is not UTF-8");
  return j;
}

void dsec_spec_set(json_t *spec, const char *path, json_t *value)
{
  const char *dot = strchr(path, '.');
  if (!dot) {
    json_object_set_new(spec, path, value);
    return;
  }
  {
    _cleanup_free_ char *head = xstrndup(path, (size_t) (dot - path));
    json_t *sub = json_object_get(spec, head);
    if (!json_is_object(sub)) {
      sub = json_object();
      json_object_set_new(spec, head, sub);
    }
    dsec_spec_set(sub, dot + 1, value);
  }
}

void dsec_spec_append(json_t *spec, const char *key, json_t *value)
{
  json_t *a = json_object_get(spec, key);
  if (!json_is_array(a)) {
    a = json_array();
    json_object_set_new(spec, key, a);
  }
  json_array_append_new(a, value);
}

/* Rejects keys of obj not in allowed (NULL-terminated). */
static int only_keys(json_t *obj, const char *what, const char *const *allowed,
                     struct dsec_error **err)
{
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v)
  {
    bool ok = false;
    for (const char *const *a = allowed; *a; a++)
      ok |= strcmp(*a, key) == 0;
    if (!ok)
      return dsec_bad_input(err, "spec: unknown field `%s%s%s`", what,
                            *what ? "." : "", key);
  }
  return 0;
}

static int want_type(json_t *v, json_type t, const char *field,
                     const char *tname, struct dsec_error **err)
{
  if (!v || json_typeof(v) != t)
    return dsec_bad_input(err, "spec: `%s` must be %s", field, tname);
  return 0;
}

static int want_uint(json_t *obj, const char *key, const char *field,
                     json_int_t min, json_int_t max, struct dsec_error **err)
{
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    json_object_del(obj, key);
    return 0;
  }
  /* a whole real within range (checked first: converting one outside it
   * is undefined) */
  if (json_is_real(v) && json_real_value(v) >= -0x1p63 &&
      json_real_value(v) < 0x1p63 &&
      json_real_value(v) == (double) (json_int_t) json_real_value(v))
    json_object_set_new(obj, key, json_integer((json_int_t) json_real_value(v)));
  v = json_object_get(obj, key);
  if (!json_is_integer(v) || json_integer_value(v) < min ||
      json_integer_value(v) > max)
    return dsec_bad_input(err, "spec: `%s` must be an integer from %lld to "
                               "%lld",
                          field, (long long) min, (long long) max);
  return 0;
}

static int want_string_array(json_t *spec, const char *key, bool paths,
                             struct dsec_error **err)
{
  json_t *a = json_object_get(spec, key);
  json_t *v;
  size_t i;

  if (!a || json_is_null(a)) {
    json_object_set_new(spec, key, json_array());
    return 0;
  }
  if (want_type(a, JSON_ARRAY, key, "an array of strings", err) < 0)
    return -1;
  if (json_array_size(a) > 1024)
    return dsec_bad_input(err, "spec: `%s` has more than 1024 entries", key);
  json_array_foreach(a, i, v)
  {
    if (!json_is_string(v) || !*json_string_value(v))
      return dsec_bad_input(err, "spec: `%s[%zu]` must be a non-empty string",
                            key, i);
    if (paths) {
      _cleanup_free_ char *c = dsec_sandbox_path_clean(json_string_value(v));
      if (!c || strcmp(c, "/") == 0)
        return dsec_bad_input(err, "spec: `%s[%zu]` must be an absolute path "
                                   "below / without `..`",
                              key, i);
      json_array_set_new(a, i, json_string(c));
    }
  }
  return 0;
}

static int check_resources(json_t *spec, struct dsec_error **err)
{
  static const char *const keys[] = { "cpus",   "memory_mb", "pids",
                                      "disk_mb", "class",    NULL };
  json_t *r = json_object_get(spec, "resources");
  json_t *v;

  if (!r || json_is_null(r)) {
    r = json_object();
    json_object_set_new(spec, "resources", r);
  }
  if (want_type(r, JSON_OBJECT, "resources", "an object", err) < 0 ||
      only_keys(r, "resources", keys, err) < 0)
    return -1;
  v = json_object_get(r, "cpus");
  if (v && !json_is_null(v)) {
    if (!json_is_number(v) || json_number_value(v) <= 0 ||
        json_number_value(v) > 4096)
      return dsec_bad_input(err, "spec: `resources.cpus` must be a number "
                                 "above 0");
  } else
    json_object_del(r, "cpus");
  if (want_uint(r, "memory_mb", "resources.memory_mb", 4, 1 << 24, err) < 0 ||
      want_uint(r, "pids", "resources.pids", 1, 1 << 22, err) < 0 ||
      want_uint(r, "disk_mb", "resources.disk_mb", 1, 1 << 24, err) < 0)
    return -1;
  v = json_object_get(r, "class");
  if (!v || json_is_null(v))
    json_object_set_new(r, "class", json_string("latency"));
  else if (!json_is_string(v) || (strcmp(json_string_value(v), "latency") != 0 &&
                                  strcmp(json_string_value(v), "besteffort") != 0))
    return dsec_bad_input(err, "spec: `resources.class` must be \"latency\" "
                               "or \"besteffort\"");
  return 0;
}

static int check_network(json_t *spec, struct dsec_error **err)
{
  static const char *const keys[] = { "mode", "allow", "deny", NULL };
  json_t *n = json_object_get(spec, "network");
  const char *mode;

  if (!n || json_is_null(n)) {
    json_object_set_new(spec, "network", json_pack("{s:s}", "mode", "none"));
    return 0;
  }
  if (want_type(n, JSON_OBJECT, "network", "an object", err) < 0 ||
      only_keys(n, "network", keys, err) < 0)
    return -1;
  mode = json_string_value(json_object_get(n, "mode"));
  if (!json_object_get(n, "mode"))
    json_object_set_new(n, "mode", json_string(mode = "none"));
  if (!mode || (strcmp(mode, "none") != 0 && strcmp(mode, "proxy") != 0))
    return dsec_bad_input(err, "spec: `network.mode` must be \"none\" or "
                               "\"proxy\"");
  if (want_string_array(n, "allow", false, err) < 0 ||
      want_string_array(n, "deny", false, err) < 0)
    return dsec_error_wrap(err, "network");
  for (int k = 0; k < 2; k++) {
    const char *key = k ? "deny" : "allow";
    json_t *v;
    size_t i;
    /* an entry the proxy cannot read would match nothing: a deny entry
     * that silently denies nothing is worse than a refused spec */
    json_array_foreach(json_object_get(n, key), i, v)
    {
      struct dsec_proxy_entry e;
      const char *why;
      if (dsec_proxy_entry_parse(json_string_value(v), &e, &why) < 0)
        return dsec_bad_input(err, "spec: `network.%s[%zu]`: %s", key, i, why);
    }
  }
  if (strcmp(mode, "none") == 0 && json_array_size(json_object_get(n, "allow")))
    return dsec_bad_input(err, "spec: `network.allow` needs mode \"proxy\"");
  return 0;
}

static int check_mounts(json_t *spec, struct dsec_error **err)
{
  static const char *const keys[] = { "source", "target", "ro", NULL };
  json_t *a = json_object_get(spec, "mounts");
  json_t *m;
  size_t i;

  if (!a || json_is_null(a)) {
    json_object_set_new(spec, "mounts", json_array());
    return 0;
  }
  if (want_type(a, JSON_ARRAY, "mounts", "an array", err) < 0)
    return -1;
  if (json_array_size(a) > 256)
    return dsec_bad_input(err, "spec: more than 256 mounts");
  json_array_foreach(a, i, m)
  {
    const char *src, *dst;
    json_t *ro;
    _cleanup_free_ char *csrc = NULL;
    _cleanup_free_ char *cdst = NULL;
    if (!json_is_object(m))
      return dsec_bad_input(err, "spec: `mounts[%zu]` must be an object", i);
    if (only_keys(m, "mounts[]", keys, err) < 0)
      return -1;
    src = json_string_value(json_object_get(m, "source"));
    dst = json_string_value(json_object_get(m, "target"));
    ro = json_object_get(m, "ro");
    if (!src || !dst)
      return dsec_bad_input(err, "spec: `mounts[%zu]` needs `source` and "
                                 "`target` strings", i);
    if (ro && !json_is_boolean(ro))
      return dsec_bad_input(err, "spec: `mounts[%zu].ro` must be a boolean", i);
    if (src[0] != '/' || !(csrc = dsec_sandbox_path_clean(src)))
      return dsec_bad_input(err, "spec: `mounts[%zu].source` must be an "
                                 "absolute host path without `..`", i);
    cdst = dsec_sandbox_path_clean(dst);
    if (!cdst || strcmp(cdst, "/") == 0)
      return dsec_bad_input(err, "spec: `mounts[%zu].target` must be an "
                                 "absolute path below / without `..`", i);
    json_object_set_new(m, "source", json_string(csrc));
    json_object_set_new(m, "target", json_string(cdst));
    json_object_set_new(m, "ro", json_boolean(json_is_true(ro)));
  }
  return 0;
}

static int check_env(json_t *spec, struct dsec_error **err)
{
  json_t *e = json_object_get(spec, "env");
  const char *k;
  json_t *v;

  if (!e || json_is_null(e)) {
    json_object_set_new(spec, "env", json_object());
    return 0;
  }
  if (want_type(e, JSON_OBJECT, "env", "an object of strings", err) < 0)
    return -1;
  if (json_object_size(e) > 4096)
    return dsec_bad_input(err, "spec: `env` has more than 4096 entries");
  json_object_foreach(e, k, v)
  {
    if (!*k || strchr(k, '='))
      return dsec_bad_input(err, "spec: invalid environment name `%s`", k);
    if (!json_is_string(v))
      return dsec_bad_input(err, "spec: `env.%s` must be a string", k);
  }
  return 0;
}

/* audit: the byte budget of events.jsonl (audit.h) */
static int check_audit(json_t *spec, struct dsec_error **err)
{
  static const char *const keys[] = { "max_bytes", NULL };
  json_t *a = json_object_get(spec, "audit");

  if (!a || json_is_null(a)) {
    a = json_object();
    json_object_set_new(spec, "audit", a);
  }
  if (want_type(a, JSON_OBJECT, "audit", "an object", err) < 0 ||
      only_keys(a, "audit", keys, err) < 0 ||
      want_uint(a, "max_bytes", "audit.max_bytes", DSEC_AUDIT_MAX_BYTES_MIN,
                DSEC_AUDIT_MAX_BYTES_MAX, err) < 0)
    return -1;
  if (!json_object_get(a, "max_bytes"))
    json_object_set_new(a, "max_bytes",
                        json_integer(DSEC_AUDIT_MAX_BYTES_DEFAULT));
  return 0;
}

bool dsec_service_name_ok(const char *n)
{
  size_t len = n ? strlen(n) : 0;
  if (len == 0 || len > 32 || !islower((unsigned char) n[0]))
    return false;
  for (size_t i = 0; i < len; i++)
    if (!islower((unsigned char) n[i]) && !isdigit((unsigned char) n[i]) &&
        n[i] != '-')
      return false;
  return strcmp(n, "agent") != 0 && strcmp(n, "localhost") != 0;
}

/* A non-empty array of strings at obj[key] (field names it). */
static int want_argv(json_t *obj, const char *key, const char *field,
                     struct dsec_error **err)
{
  json_t *a = json_object_get(obj, key), *v;
  size_t i;
  if (!json_is_array(a) || json_array_size(a) == 0 ||
      json_array_size(a) > 4096)
    return dsec_bad_input(err, "spec: `%s` must be a non-empty array of "
                               "strings", field);
  json_array_foreach(a, i, v)
    if (!json_is_string(v))
      return dsec_bad_input(err, "spec: `%s[%zu]` must be a string", field, i);
  return 0;
}

/* ready: {"tcp": PORT} or {"cmd": [...]}, and "timeout_s" (default 60). */
static int check_ready(json_t *svc, const char *field, struct dsec_error **err)
{
  static const char *const keys[] = { "tcp", "cmd", "timeout_s", NULL };
  json_t *r = json_object_get(svc, "ready");
  _cleanup_free_ char *f = xasprintf("%s.ready", field);
  _cleanup_free_ char *ft = xasprintf("%s.ready.timeout_s", field);
  _cleanup_free_ char *fp = xasprintf("%s.ready.tcp", field);
  _cleanup_free_ char *fc = xasprintf("%s.ready.cmd", field);

  if (!r || json_is_null(r)) {
    json_object_del(svc, "ready");
    return 0;
  }
  if (want_type(r, JSON_OBJECT, f, "an object", err) < 0 ||
      only_keys(r, f, keys, err) < 0 ||
      want_uint(r, "tcp", fp, 1, 65535, err) < 0 ||
      want_uint(r, "timeout_s", ft, 1, 3600, err) < 0)
    return -1;
  if (json_object_get(r, "cmd") && want_argv(r, "cmd", fc, err) < 0)
    return -1;
  if (!json_object_get(r, "tcp") == !json_object_get(r, "cmd"))
    return dsec_bad_input(err, "spec: `%s` needs one of `tcp` and `cmd`", f);
  if (!json_object_get(r, "timeout_s"))
    json_object_set_new(r, "timeout_s",
                        json_integer(DSEC_SERVICE_READY_TIMEOUT_S));
  return 0;
}

/* services: each a sandbox of its own in the agent's world, checked as a
 * spec of its own would be (its fields, with the same defaults). */
static int check_services(json_t *spec, struct dsec_error **err)
{
  static const char *const keys[] = { "name", "image", "layers", "cmd",
                                      "env", "workdir", "user", "resources",
                                      "ready", "protect", "hide", NULL };
  json_t *a = json_object_get(spec, "services"), *svc;
  size_t i;

  if (!a || json_is_null(a) ||
      (json_is_array(a) && json_array_size(a) == 0)) {
    json_object_del(spec, "services");
    return 0;
  }
  if (want_type(a, JSON_ARRAY, "services", "an array of objects", err) < 0)
    return -1;
  if (json_array_size(a) > DSEC_SERVICES_MAX)
    return dsec_bad_input(err, "spec: more than %d services",
                          DSEC_SERVICES_MAX);
  json_array_foreach(a, i, svc)
  {
    _cleanup_free_ char *field = xasprintf("services[%zu]", i);
    _cleanup_free_ char *fcmd = xasprintf("services[%zu].cmd", i);
    const char *name = json_string_value(json_object_get(svc, "name"));
    _cleanup_json_ json_t *sub = NULL;
    if (!json_is_object(svc))
      return dsec_bad_input(err, "spec: `%s` must be an object", field);
    if (only_keys(svc, field, keys, err) < 0)
      return -1;
    if (!dsec_service_name_ok(name))
      return dsec_bad_input(err, "spec: `%s.name` must be 1 to 32 characters "
                                 "[a-z0-9-] starting with a letter, not "
                                 "\"agent\" or \"localhost\"", field);
    for (size_t k = 0; k < i; k++)
      if (strcmp(json_string_value(json_object_get(json_array_get(a, k),
                                                   "name")), name) == 0)
        return dsec_bad_input(err, "spec: two services are named `%s`", name);
    if (want_argv(svc, "cmd", fcmd, err) < 0 || check_ready(svc, field, err) < 0)
      return -1;
    /* the rest as a spec of its own says it, defaults filled in */
    sub = json_pack("{s:O*, s:O*, s:O*, s:O*, s:O*, s:O*, s:O*, s:O*}",
                    "image", json_object_get(svc, "image"), "layers",
                    json_object_get(svc, "layers"), "env",
                    json_object_get(svc, "env"), "workdir",
                    json_object_get(svc, "workdir"), "user",
                    json_object_get(svc, "user"), "resources",
                    json_object_get(svc, "resources"), "protect",
                    json_object_get(svc, "protect"), "hide",
                    json_object_get(svc, "hide"));
    if (dsec_spec_validate(sub, err) < 0)
      return dsec_error_wrap(err, "%s (%s)", field, name);
    {
      static const char *const copied[] = { "image", "layers", "env",
                                            "workdir", "user", "resources",
                                            "protect", "hide" };
      for (size_t k = 0; k < ARRAY_SIZE(copied); k++)
        json_object_set(svc, copied[k], json_object_get(sub, copied[k]));
    }
  }
  return 0;
}

/* world: what a service's spec says of its world (set by the creator). */
static int check_world(json_t *spec, struct dsec_error **err)
{
  static const char *const keys[] = { "agent", "service", "cmd", "names",
                                      NULL };
  json_t *w = json_object_get(spec, "world"), *v;
  size_t i;

  if (!w || json_is_null(w)) {
    json_object_del(spec, "world");
    return 0;
  }
  if (want_type(w, JSON_OBJECT, "world", "an object", err) < 0 ||
      only_keys(w, "world", keys, err) < 0)
    return -1;
  if (!json_is_string(json_object_get(w, "agent")) ||
      strlen(json_string_value(json_object_get(w, "agent"))) > 64 ||
      !dsec_service_name_ok(json_string_value(json_object_get(w, "service"))))
    return dsec_bad_input(err, "spec: `world` needs `agent` (an id) and "
                               "`service` (a service name)");
  if (want_argv(w, "cmd", "world.cmd", err) < 0 ||
      want_argv(w, "names", "world.names", err) < 0)
    return -1;
  json_array_foreach(json_object_get(w, "names"), i, v)
    if (strcmp(json_string_value(v), "agent") != 0 &&
        !dsec_service_name_ok(json_string_value(v)))
      return dsec_bad_input(err, "spec: `world.names[%zu]` is no service name",
                            i);
  if (json_object_get(spec, "services"))
    return dsec_bad_input(err, "spec: a service cannot have services");
  return 0;
}

int dsec_spec_validate(json_t *spec, struct dsec_error **err)
{
  static const char *const keys[] = {
    "backend", "image",    "layers", "resources",   "network",
    "mounts",  "protect",  "hide",   "env",         "workdir",
    "user",    "ttl_s",    "idle_timeout_s",        "idle_action",
    "labels",  "name",     "pmem",  "audit", "services", "world", NULL,
  };
  const char *s;
  json_t *v;

  if (!json_is_object(spec))
    return dsec_bad_input(err, "spec: must be a JSON object");
  if (only_keys(spec, "", keys, err) < 0)
    return -1;

  v = json_object_get(spec, "backend");
  if (!v || json_is_null(v))
    json_object_set_new(spec, "backend", json_string("container"));
  s = json_string_value(json_object_get(spec, "backend"));
  if (!s || (strcmp(s, "container") != 0 && strcmp(s, "fncall") != 0 &&
             strcmp(s, "microvm") != 0 && strcmp(s, "vm") != 0))
    return dsec_bad_input(err, "spec: `backend` must be one of fncall, "
                               "container, microvm, vm");

  s = json_string_value(json_object_get(spec, "image"));
  if (!s || !*s)
    return dsec_bad_input(err, "spec: `image` is required (a name or "
                               "sha256:<digest>)");
  if (want_string_array(spec, "layers", false, err) < 0 ||
      check_resources(spec, err) < 0 || check_network(spec, err) < 0 ||
      check_mounts(spec, err) < 0 ||
      want_string_array(spec, "protect", true, err) < 0 ||
      want_string_array(spec, "hide", true, err) < 0 || check_env(spec, err) < 0 ||
      check_audit(spec, err) < 0 || check_services(spec, err) < 0 ||
      check_world(spec, err) < 0)
    return -1;
  s = json_string_value(json_object_get(spec, "backend"));
  if (json_object_get(spec, "services") &&
      (strcmp(s, "microvm") == 0 || strcmp(s, "vm") == 0))
    return dsec_bad_input(err, "spec: `services` need a container or fncall "
                               "agent: a world around a %s (its NIC on the "
                               "world's network, services as containers next "
                               "to it) is not implemented", s);
  if (json_object_get(spec, "services") &&
      strcmp(json_string_value(json_object_get(spec, "idle_action")) ?: "",
             "suspend") == 0)
    return dsec_bad_input(err, "spec: `idle_action` \"suspend\" of a world "
                               "is not implemented (the agent's supervisor "
                               "would release the agent alone)");
  if (json_object_get(spec, "world") && strcmp(s, "container") != 0)
    return dsec_bad_input(err, "spec: a service runs as a container");
  v = json_object_get(spec, "pmem");
  if (v && !json_is_boolean(v))
    return dsec_bad_input(err, "spec: `pmem` must be true or false");
  if (json_is_true(v) &&
      strcmp(json_string_value(json_object_get(spec, "backend")), "vm") != 0)
    return dsec_bad_input(err, "spec: `pmem` needs backend vm (virtio-pmem is "
                               "a PCI device)");

  v = json_object_get(spec, "workdir");
  if (!v || json_is_null(v))
    json_object_set_new(spec, "workdir", json_string("/"));
  else {
    _cleanup_free_ char *c =
      json_is_string(v) ? dsec_sandbox_path_clean(json_string_value(v)) : NULL;
    if (!c)
      return dsec_bad_input(err, "spec: `workdir` must be an absolute path "
                                 "without `..`");
    json_object_set_new(spec, "workdir", json_string(c));
  }

  v = json_object_get(spec, "user");
  if (!v || json_is_null(v))
    json_object_set_new(spec, "user", json_string("0:0"));
  else {
    uid_t u;
    gid_t g;
    if (!json_is_string(v) || dsec_parse_user(json_string_value(v), &u, &g) < 0)
      return dsec_bad_input(err, "spec: `user` must be \"UID:GID\" with "
                                 "numbers from 0 to 65535");
    json_object_set_new(spec, "user", json_sprintf("%u:%u", u, g));
  }

  if (want_uint(spec, "ttl_s", "ttl_s", 0, INT32_MAX, err) < 0 ||
      want_uint(spec, "idle_timeout_s", "idle_timeout_s", 0, INT32_MAX, err) < 0)
    return -1;
  v = json_object_get(spec, "idle_action");
  if (!v || json_is_null(v))
    json_object_set_new(spec, "idle_action", json_string("remove"));
  else if (!json_is_string(v) ||
           (strcmp(json_string_value(v), "remove") != 0 &&
            strcmp(json_string_value(v), "suspend") != 0))
    return dsec_bad_input(err, "spec: `idle_action` must be \"remove\" or "
                               "\"suspend\"");

  v = json_object_get(spec, "labels");
  if (!v || json_is_null(v))
    json_object_set_new(spec, "labels", json_object());
  else {
    const char *k;
    json_t *lv;
    if (!json_is_object(v))
      return dsec_bad_input(err, "spec: `labels` must be an object");
    json_object_foreach(v, k, lv)
    {
      if (json_is_object(lv) || json_is_array(lv))
        return dsec_bad_input(err, "spec: `labels.%s` must be a string, "
                                   "number or boolean", k);
    }
  }

  v = json_object_get(spec, "name");
  if (v && !json_is_null(v)) {
    const char *n = json_string_value(v);
    size_t len = n ? strlen(n) : 0;
    if (!n || len == 0 || len > 64 || !isalnum((unsigned char) n[0]))
      return dsec_bad_input(err, "spec: `name` must be 1 to 64 characters "
                                 "[A-Za-z0-9_.-], starting with a letter or "
                                 "digit");
    for (size_t i = 0; i < len; i++)
      if (!isalnum((unsigned char) n[i]) && n[i] != '_' && n[i] != '.' &&
          n[i] != '-')
        return dsec_bad_input(err, "spec: invalid character in `name`");
    if (dsec_str_has_prefix(n, "sb-"))
      return dsec_bad_input(err, "spec: a `name` may not start with \"sb-\"");
  } else
    json_object_del(spec, "name");
  return 0;
}

/* ---- the typed spec */

static const char *const backend_names[] = {
  [DSEC_BACKEND_FNCALL] = "fncall",
  [DSEC_BACKEND_CONTAINER] = "container",
  [DSEC_BACKEND_MICROVM] = "microvm",
  [DSEC_BACKEND_VM] = "vm",
};

const char *dsec_backend_name(enum dsec_backend b)
{
  return (size_t) b < ARRAY_SIZE(backend_names) ? backend_names[b] : "?";
}

static void strv_from(struct dsec_strv *v, json_t *a)
{
  json_t *x;
  size_t i;
  v->n = json_array_size(a);
  v->v = xzalloc(sizeof *v->v * (v->n + 1));
  json_array_foreach(a, i, x)
    v->v[i] = xstrdup(json_string_value(x));
}

static json_t *strv_json(const struct dsec_strv *v)
{
  json_t *a = json_array();
  for (size_t i = 0; i < v->n; i++)
    json_array_append_new(a, json_string(v->v[i]));
  return a;
}

static void strv_clear(struct dsec_strv *v)
{
  for (size_t i = 0; i < v->n; i++)
    free(v->v[i]);
  free(v->v);
  v->v = NULL;
  v->n = 0;
}

int dsec_spec_parse(json_t *json, struct dsec_spec **out,
                    struct dsec_error **err)
{
  struct dsec_spec *s;
  json_t *r, *n, *m, *v;
  const char *b;
  size_t i;

  if (dsec_spec_validate(json, err) < 0)
    return -1;
  s = xzalloc(sizeof *s);
  b = json_string_value(json_object_get(json, "backend"));
  for (i = 0; i < ARRAY_SIZE(backend_names); i++)
    if (strcmp(b, backend_names[i]) == 0)
      s->backend = (enum dsec_backend) i;
  s->image = xstrdup(json_string_value(json_object_get(json, "image")));
  strv_from(&s->layers, json_object_get(json, "layers"));

  r = json_object_get(json, "resources");
  s->resources.cpus = json_number_value(json_object_get(r, "cpus"));
  s->resources.memory_mb = json_integer_value(json_object_get(r, "memory_mb"));
  s->resources.pids = json_integer_value(json_object_get(r, "pids"));
  s->resources.disk_mb = json_integer_value(json_object_get(r, "disk_mb"));
  s->resources.klass =
    strcmp(json_string_value(json_object_get(r, "class")), "besteffort") == 0
      ? DSEC_CLASS_BESTEFFORT
      : DSEC_CLASS_LATENCY;

  n = json_object_get(json, "network");
  s->network.mode = strcmp(json_string_value(json_object_get(n, "mode")),
                           "proxy") == 0
                      ? DSEC_NET_PROXY
                      : DSEC_NET_NONE;
  strv_from(&s->network.allow, json_object_get(n, "allow"));
  strv_from(&s->network.deny, json_object_get(n, "deny"));
  s->network.json = json_deep_copy(n);

  s->n_mounts = json_array_size(json_object_get(json, "mounts"));
  s->mounts = xzalloc(sizeof *s->mounts * (s->n_mounts + 1));
  json_array_foreach(json_object_get(json, "mounts"), i, m)
  {
    s->mounts[i].source = xstrdup(json_string_value(json_object_get(m, "source")));
    s->mounts[i].target = xstrdup(json_string_value(json_object_get(m, "target")));
    s->mounts[i].ro = json_is_true(json_object_get(m, "ro"));
  }
  strv_from(&s->protect, json_object_get(json, "protect"));
  strv_from(&s->hide, json_object_get(json, "hide"));
  s->env = json_deep_copy(json_object_get(json, "env"));
  s->workdir = xstrdup(json_string_value(json_object_get(json, "workdir")));
  dsec_parse_user(json_string_value(json_object_get(json, "user")), &s->uid,
                  &s->gid);
  s->ttl_s = json_integer_value(json_object_get(json, "ttl_s"));
  s->idle_timeout_s = json_integer_value(json_object_get(json, "idle_timeout_s"));
  s->idle_action = strcmp(json_string_value(json_object_get(json, "idle_action")),
                          "suspend") == 0
                     ? DSEC_IDLE_SUSPEND
                     : DSEC_IDLE_REMOVE;
  s->labels = json_deep_copy(json_object_get(json, "labels"));
  v = json_object_get(json, "name");
  s->name = json_is_string(v) ? xstrdup(json_string_value(v)) : NULL;
  s->pmem = json_is_true(json_object_get(json, "pmem"));
  s->audit_max_bytes = json_integer_value(
    json_object_get(json_object_get(json, "audit"), "max_bytes"));
  v = json_object_get(json, "services");
  s->services = v ? json_deep_copy(v) : NULL;
  v = json_object_get(json, "world");
  if (v) {
    s->world.agent = xstrdup(json_string_value(json_object_get(v, "agent")));
    s->world.service = xstrdup(json_string_value(json_object_get(v, "service")));
    strv_from(&s->world.cmd, json_object_get(v, "cmd"));
    strv_from(&s->world.names, json_object_get(v, "names"));
  }
  *out = s;
  return 0;
}

json_t *dsec_spec_to_json(const struct dsec_spec *s)
{
  json_t *r = json_object(), *mounts = json_array(), *j;

  if (s->resources.cpus > 0)
    json_object_set_new(r, "cpus", json_real(s->resources.cpus));
  if (s->resources.memory_mb)
    json_object_set_new(r, "memory_mb", json_integer(s->resources.memory_mb));
  if (s->resources.pids)
    json_object_set_new(r, "pids", json_integer(s->resources.pids));
  if (s->resources.disk_mb)
    json_object_set_new(r, "disk_mb", json_integer(s->resources.disk_mb));
  json_object_set_new(r, "class",
                      json_string(s->resources.klass == DSEC_CLASS_BESTEFFORT
                                    ? "besteffort"
                                    : "latency"));
  for (size_t i = 0; i < s->n_mounts; i++)
    json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "source",
                                            s->mounts[i].source, "target",
                                            s->mounts[i].target, "ro",
                                            s->mounts[i].ro));
  j = json_pack("{s:s, s:s, s:o, s:o, s:O, s:o, s:o, s:o, s:O, s:s, s:o, "
                "s:s, s:O, s:o}",
                "backend", dsec_backend_name(s->backend), "image", s->image,
                "layers", strv_json(&s->layers), "resources", r, "network",
                s->network.json, "mounts", mounts, "protect",
                strv_json(&s->protect), "hide", strv_json(&s->hide), "env",
                s->env, "workdir", s->workdir, "user",
                json_sprintf("%u:%u", (unsigned) s->uid, (unsigned) s->gid),
                "idle_action",
                s->idle_action == DSEC_IDLE_SUSPEND ? "suspend" : "remove",
                "labels", s->labels, "audit",
                json_pack("{s:I}", "max_bytes",
                          (json_int_t) s->audit_max_bytes));
  if (s->ttl_s)
    json_object_set_new(j, "ttl_s", json_integer(s->ttl_s));
  if (s->idle_timeout_s)
    json_object_set_new(j, "idle_timeout_s", json_integer(s->idle_timeout_s));
  if (s->name)
    json_object_set_new(j, "name", json_string(s->name));
  if (s->pmem)
    json_object_set_new(j, "pmem", json_true());
  if (s->services)
    json_object_set_new(j, "services", json_deep_copy(s->services));
  if (s->world.agent)
    json_object_set_new(j, "world",
                        json_pack("{s:s, s:s, s:o, s:o}", "agent",
                                  s->world.agent, "service", s->world.service,
                                  "cmd", strv_json(&s->world.cmd), "names",
                                  strv_json(&s->world.names)));
  return j;
}

bool dsec_spec_has_rw_mount(const struct dsec_spec *s)
{
  for (size_t i = 0; i < s->n_mounts; i++)
    if (!s->mounts[i].ro)
      return true;
  return false;
}

void dsec_spec_free(struct dsec_spec *s)
{
  if (!s)
    return;
  free(s->image);
  strv_clear(&s->layers);
  strv_clear(&s->network.allow);
  strv_clear(&s->network.deny);
  json_decref(s->network.json);
  for (size_t i = 0; i < s->n_mounts; i++) {
    free(s->mounts[i].source);
    free(s->mounts[i].target);
  }
  free(s->mounts);
  strv_clear(&s->protect);
  strv_clear(&s->hide);
  json_decref(s->env);
  free(s->workdir);
  json_decref(s->labels);
  free(s->name);
  json_decref(s->services);
  free(s->world.agent);
  free(s->world.service);
  strv_clear(&s->world.cmd);
  strv_clear(&s->world.names);
  free(s);
}
