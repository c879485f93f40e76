/* The sandbox spec (see DESIGN.md "One spec, four backends"): parsed from
 * JSON, merged with command-line flags (a flag overrides the spec), and
 * validated strictly: unknown and duplicate keys are rejected, every field
 * is type- and range-checked, and an error names the field. */
#ifndef DSEC_SPEC_H
#define DSEC_SPEC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "json.h"

#define DSEC_SPEC_MAX (1u << 20)

/* Checks spec (an object) and fills in defaults in place: backend
 * "container", resources.class "latency", network {"mode":"none"}, env {},
 * workdir "/", user "0:0", layers/mounts/protect/hide [], labels {},
 * audit {"max_bytes": 64 MiB}.
 * Bad input otherwise. */
int dsec_spec_validate(json_t *spec, struct dsec_error **err);

/* The spec as the engine reads it: parsed and validated once
 * (dsec_spec_parse), written back to JSON from here (spec.json, pool
 * keys, the guest's setup), never read as a JSON tree by a backend. */
enum dsec_backend {
  DSEC_BACKEND_FNCALL,
  DSEC_BACKEND_CONTAINER,
  DSEC_BACKEND_MICROVM,
  DSEC_BACKEND_VM,
};

enum dsec_class { DSEC_CLASS_LATENCY, DSEC_CLASS_BESTEFFORT };
enum dsec_net_mode { DSEC_NET_NONE, DSEC_NET_PROXY };
enum dsec_idle_action { DSEC_IDLE_REMOVE, DSEC_IDLE_SUSPEND };

/* A list of strings (owned). */
struct dsec_strv {
  char **v;
  size_t n;
};

struct dsec_mount {
  char *source; /* host path */
  char *target; /* path in the sandbox */
  bool ro;
};

struct dsec_spec {
  enum dsec_backend backend;
  char *image;
  struct dsec_strv layers;      /* on the image, last on top */
  struct {
    double cpus;                /* 0: no quota */
    int64_t memory_mb;          /* 0: none of these limits */
    int64_t pids;
    int64_t disk_mb;
    enum dsec_class klass;
  } resources;
  struct {
    enum dsec_net_mode mode;
    struct dsec_strv allow, deny;
    json_t *json;               /* the object, for the proxy (owned) */
  } network;
  struct dsec_mount *mounts;
  size_t n_mounts;
  struct dsec_strv protect, hide;
  json_t *env;                  /* object of strings (owned) */
  char *workdir;
  uid_t uid;
  gid_t gid;
  int64_t ttl_s, idle_timeout_s; /* 0: none */
  enum dsec_idle_action idle_action;
  json_t *labels;               /* object of scalars (owned) */
  char *name;                   /* NULL: none */
  bool pmem;
  int64_t audit_max_bytes;
  /* a task world's agent: its services, as validated (owned), or NULL */
  json_t *services;
  /* a task world's service (else every field NULL or empty): its world's
   * agent (an id), its own name, its command, and the names of every
   * member (for /etc/hosts) */
  struct {
    char *agent, *service;
    struct dsec_strv cmd, names;
  } world;
};

#define DSEC_SERVICES_MAX 16
#define DSEC_SERVICE_READY_TIMEOUT_S 60

/* A service's name: 1 to 32 of [a-z0-9-], a letter first, neither
 * "agent" nor "localhost". */
bool dsec_service_name_ok(const char *n);

/* Validates json (in place, as dsec_spec_validate) and parses it: *out
 * is new (free with dsec_spec_free). */
int dsec_spec_parse(json_t *json, struct dsec_spec **out,
                    struct dsec_error **err);
/* The spec as JSON, every default spelled out (new). */
json_t *dsec_spec_to_json(const struct dsec_spec *s);
void dsec_spec_free(struct dsec_spec *s);
static inline void dsec_spec_freep(struct dsec_spec **s)
{
  dsec_spec_free(*s);
}
#define _cleanup_spec_ _cleanup_(dsec_spec_freep)

/* "fncall", "container", "microvm", "vm" (static). */
const char *dsec_backend_name(enum dsec_backend b);
/* Whether QEMU carries the backend out (microvm, vm). */
static inline bool dsec_backend_is_vm(enum dsec_backend b)
{
  return b == DSEC_BACKEND_MICROVM || b == DSEC_BACKEND_VM;
}
/* Whether the spec has a read-write mount. */
bool dsec_spec_has_rw_mount(const struct dsec_spec *s);

/* Sets spec[path] = value where path is "a" or "a.b" (creating objects);
 * steals value. */
void dsec_spec_set(json_t *spec, const char *path, json_t *value);
/* Appends value (stolen) to the array spec[key], creating it. */
void dsec_spec_append(json_t *spec, const char *key, json_t *value);

/* Parses "UID[:GID]" (0..65535 each); gid defaults to uid. */
int dsec_parse_user(const char *s, uid_t *uid, gid_t *gid);
/* Parses "SRC:DST[:ro|:rw]" into a mount object (new ref). */
json_t *dsec_parse_mount(const char *s, struct dsec_error **err);

/* A path inside the sandbox: absolute, no "..", no NUL, at most 4096
 * bytes; returns it normalised (no "//", no trailing "/", no "." parts),
 * new string, or NULL. */
char *dsec_sandbox_path_clean(const char *p);

#endif
