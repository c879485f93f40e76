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
