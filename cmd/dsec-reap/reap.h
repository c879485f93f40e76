/* Garbage collection behind dsec-reap: sandboxes that are over (expired,
 * died, stopped, past their ttl, left behind by training progress), what
 * crashes leave (supervisors without a directory, mounts, run
 * directories, cgroups, names, temporary files), and store objects that
 * nothing references (mark and sweep under the store's gc lock).
 *
 * Safe to run concurrently with itself and with dsec-run, dsec-pull and
 * dsec-layer:
 *   - reapers take $DSEC_ROOT/reap.lock exclusively (waiting), so two
 *     started at once do the work once: the second finds it done;
 *   - every removal tolerates what vanished meanwhile (a dsec-run rm of
 *     the same sandbox), and goes in an order that a kill -9 at any point
 *     leaves state the next run recognises and finishes;
 *   - store objects are marked and swept under the gc lock held
 *     exclusively, while writers that add references (pull, layer create,
 *     tag, dsec-run create until its environment.json is written) hold it
 *     shared, so nothing about to be referenced is swept.
 * With dry_run nothing is changed and no lock but the gc lock (shared) is
 * taken. */
#ifndef DSEC_REAP_H
#define DSEC_REAP_H

#include <stdbool.h>
#include <stdint.h>

#include "json.h"

struct dsec_reap_opts {
  bool dry_run;
  bool all;             /* store: remove every unreferenced object */
  bool store_max_set;   /* store: remove the oldest ... */
  uint64_t store_max;   /* ... until the store takes at most this (bytes) */
  bool min_step_set;    /* sandboxes whose labels.step is below min_step */
  int64_t min_step;
  bool suspend_idle_set; /* freeze running sandboxes without an exec ... */
  uint64_t suspend_idle; /* ... for this many seconds */
};

/* Called with each record as it happens (borrowed); a failure stops the
 * collection. */
typedef int (*dsec_reap_emit_fn)(json_t *record, void *ud,
                                 struct dsec_error **err);

/* A trainer's progress file, {"step": N, "keep_steps": K}: *min_step is
 * N - K.  Bad input names the file and the field. */
int dsec_reap_progress_read(const char *file, int64_t *min_step,
                            struct dsec_error **err);

/* Collects, calling emit for every {"type":"reap",...} record, and sets
 * *summary to the {"type":"summary",...} record (new ref).  An object that
 * cannot be removed is a record with action "failed" (counted in the
 * summary's "failed"), not an error; errors are what stops the run (the
 * root, the store or a lock that cannot be opened, emit failing). */
int dsec_reap(const struct dsec_reap_opts *o, dsec_reap_emit_fn emit,
              void *ud, json_t **summary, struct dsec_error **err);

#endif
