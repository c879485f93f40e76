/* The audit log of a sandbox, sandboxes/<id>/events.jsonl, with a byte
 * budget that a flood can neither overrun nor use to hide what matters
 * (issue #12).  Every writer of the file goes through here: both
 * supervisors (container.c, vm.c), the proxy's reporter threads
 * (proxy.c), the exec and checkpoint records (exec.c) and dsec-run's
 * one-off records (dsec_event_append).
 *
 * The file never grows past max_bytes (the spec's audit.max_bytes, 64 MiB
 * by default), counting what it held before (a resumed sandbox, a second
 * writer): each append takes an flock on the file and reads its size.
 * The budget is split from the top down:
 *
 *   M - life    .. M            lifecycle records only (created, resumed,
 *                               suspended, checkpoint, died, expired,
 *                               forked, claimed) and the final
 *                               audit_summary;
 *   M - life - 2 KiB .. M-life  the log's own notices: the one
 *                               audit_truncated record, audit_seen_full;
 *   .. - novel                  first sightings: the first start of a
 *                               program path, the first denial of a
 *                               syscall (per ioctl request for ioctl) or
 *                               masked file, the first refusal of a host;
 *   0 .. the rest               every record.
 *
 * with life = max(16 KiB, M/64) and novel = max(16 KiB, M/8).  A record
 * that does not fit where its kind may go is dropped and counted by type;
 * the first drop writes audit_truncated.  Records are bounded before they
 * are written: argv to DSEC_AUDIT_ARGV_MAX arguments, DSEC_AUDIT_ARG_MAX
 * bytes each and DSEC_AUDIT_ARGV_BYTES in all ("argv_truncated": true),
 * any other string field to DSEC_AUDIT_STRING_MAX ("<field>_truncated":
 * true), and a record past DSEC_AUDIT_RECORD_MAX is replaced by a stub
 * ("record_truncated": true).  Sizes are of the text as written (JSON
 * escapes included), cut at a character boundary. */
#ifndef DSEC_AUDIT_H
#define DSEC_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json.h"

#define DSEC_AUDIT_MAX_BYTES_DEFAULT (64LL << 20)
#define DSEC_AUDIT_MAX_BYTES_MIN 65536LL
#define DSEC_AUDIT_MAX_BYTES_MAX (1LL << 30)

#define DSEC_AUDIT_ARGV_MAX 64      /* arguments kept of an argv */
#define DSEC_AUDIT_ARG_MAX 1024     /* bytes kept of one argument */
#define DSEC_AUDIT_ARGV_BYTES 8192  /* bytes kept of all arguments */
#define DSEC_AUDIT_STRING_MAX 4096  /* bytes kept of another string field */
#define DSEC_AUDIT_RECORD_MAX 16384 /* bytes of a record, newline included */

/* What a first sighting is of.  Each kind remembers a bounded number of
 * keys (as keyed 64-bit hashes): past the bound, a new key is no longer a
 * first sighting (it gets the rate limits and the routine budget) and one
 * audit_seen_full record says so. */
enum dsec_audit_kind {
  DSEC_AUDIT_PROGRAM, /* a program path (4096 remembered) */
  DSEC_AUDIT_SYSCALL, /* a denied syscall number (1024) */
  DSEC_AUDIT_IOCTL,   /* a denied ioctl request, by type and number (1024) */
  DSEC_AUDIT_MASKED,  /* a masked file opened (64) */
  DSEC_AUDIT_HOST,    /* a host the proxy refused (1024) */
  DSEC_AUDIT_NKINDS
};

struct dsec_audit;

/* The spec's audit.max_bytes, or the default. */
int64_t dsec_audit_max_bytes(json_t *spec);

/* A sandbox's log open on fd (events.jsonl, O_APPEND; borrowed, as are id
 * and spec, for the log's life).  state is the sandbox's state as an
 * earlier supervisor left it (or NULL): the counts of what was dropped
 * go on from its "audit".  New; thread-safe. */
struct dsec_audit *dsec_audit_new(int fd, const char *id, json_t *spec,
                                  json_t *state);
void dsec_audit_free(struct dsec_audit *a);

/* Whether key (len bytes) of kind has not been recorded yet, and can
 * still be remembered. */
bool dsec_audit_is_new(struct dsec_audit *a, enum dsec_audit_kind kind,
                       const void *key, size_t len);

/* Appends ev (borrowed, not changed) with "time" and "sandbox" added and
 * its fields bounded.  1 written, 0 dropped (counted), -1 and *err when
 * the file cannot be written. */
int dsec_audit_append(struct dsec_audit *a, json_t *ev,
                      struct dsec_error **err);
/* The same for the first sighting of key of kind (dsec_audit_is_new said
 * so): it may use the first sightings' reserve, gets "first": true, and
 * key is remembered. */
int dsec_audit_append_first(struct dsec_audit *a, json_t *ev,
                            enum dsec_audit_kind kind, const void *key,
                            size_t len, struct dsec_error **err);

/* {"bytes", "max_bytes", "dropped": {TYPE: N, ...}, "truncated"} (new). */
json_t *dsec_audit_status(struct dsec_audit *a);

/* The supervisor ends: an audit_summary record with the counts, when
 * anything was dropped (from the lifecycle reserve, if it fits). */
void dsec_audit_finish(struct dsec_audit *a);

/* One record from outside a supervisor (fd may be -1: the file is
 * opened), under the budget of the sandbox's spec.json.  As
 * dsec_audit_append; drops are not counted anywhere but the return. */
int dsec_audit_append_once(int fd, const char *id, json_t *ev,
                           struct dsec_error **err);

/* The "audit" of inspect for a sandbox without a live supervisor (new):
 * saved (the state's "audit", or NULL) with bytes read from the file and
 * max_bytes from spec. */
json_t *dsec_audit_status_file(const char *id, json_t *spec, json_t *saved);

/* argv (an array of strings, borrowed) bounded as the log bounds it
 * (new); *truncated set when anything was cut. */
json_t *dsec_audit_argv(json_t *argv, bool *truncated);

#endif
