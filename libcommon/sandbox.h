/* Sandboxes on disk:
 *
 *   $DSEC_ROOT/sandboxes/<id>/   spec.json, environment.json, state.json,
 *                                upper/ work/, trajectory.jsonl, events.jsonl
 *   $DSEC_ROOT/names/<name>      the id a name stands for
 *   $DSEC_RUN/<id>/              ctl.sock, and the mount points the
 *                                supervisor uses in its own mount namespace
 *
 * state.json is written only by the sandbox's supervisor while it lives
 * (atomically), and by `rm` once it is gone; readers take the supervisor's
 * liveness from /proc (pid plus start time), so a kill -9 never leaves a
 * sandbox reported as running. */
#ifndef DSEC_SANDBOX_H
#define DSEC_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "json.h"

#define DSEC_ID_LEN 19 /* "sb-" + 16 hex */

/* New paths. */
char *dsec_sandboxes_dir(void);
char *dsec_sandbox_dir(const char *id);
char *dsec_sandbox_run_dir(const char *id);

/* "sb-" and 16 random hex digits (new). */
char *dsec_sandbox_new_id(void);
bool dsec_sandbox_id_valid(const char *id);

/* Resolves an id, a unique id prefix (4+ characters after "sb-", or 4+ hex
 * digits) or a name to an id (new).  Unknown is bad input. */
char *dsec_sandbox_resolve(const char *arg, struct dsec_error **err);

/* Claims name for id (fails, as bad input, when taken by a live sandbox);
 * release drops it if it still points at id. */
int dsec_sandbox_name_claim(const char *name, const char *id,
                            struct dsec_error **err);
void dsec_sandbox_name_release(const char *name, const char *id);

/* Reads sandboxes/<id>/state.json (new ref), or NULL + error. */
json_t *dsec_sandbox_state_read(const char *id, struct dsec_error **err);
/* Writes it atomically (does not steal). */
int dsec_sandbox_state_write(const char *id, json_t *state,
                             struct dsec_error **err);

/* The state with liveness applied: a sandbox whose state says it runs but
 * whose supervisor is gone is reported "died"; one whose resume was
 * killed before its supervisor ran, released again (new ref). */
json_t *dsec_sandbox_status(const char *id, struct dsec_error **err);

/* A state written by a resume ("creating", "resuming") whose supervisor
 * is gone, with the checkpoint or snapshot it resumed from. */
bool dsec_sandbox_resume_cut(json_t *st);

/* A state written by a supervisor that released the sandbox ("released"
 * with its checkpoint or snapshot, the answer given) and was killed
 * before it could write its end. */
bool dsec_sandbox_release_cut(json_t *st);

/* All sandbox ids, sorted (new array). */
json_t *dsec_sandbox_list(struct dsec_error **err);

/* The start time of pid (clock ticks since boot, /proc/pid/stat field 22),
 * 0 when there is no such process. */
uint64_t dsec_process_starttime(pid_t pid);
bool dsec_process_alive(pid_t pid, uint64_t starttime);

/* Removes the sandbox's directory, its run directory and its name (spec,
 * may be NULL, gives the name).  What cannot be removed is warned about.
 * After dsec_sandbox_remove_background(true), the two directories are
 * moved into DSEC_REMOVING_DIR of $DSEC_ROOT and $DSEC_RUN (out of every
 * listing at once) and removed by a detached process, which holds an
 * flock on each until it is gone: a removal then costs two renames
 * whatever the sandbox wrote.  dsec-reap removes unlocked ones. */
#define DSEC_REMOVING_DIR "removing"
void dsec_sandbox_remove_files(const char *id, json_t *spec);
/* The same, after the process of pidfd after (a supervisor that said it
 * stopped and is exiting) is gone: the remover waits for it (60 s at
 * most), or the caller when the removal is done in place.  after -1: as
 * dsec_sandbox_remove_files. */
void dsec_sandbox_remove_files_after(const char *id, json_t *spec, int after);
void dsec_sandbox_remove_background(bool on);
/* For a caller that exits once its removals are handed over (dsec-run rm
 * and run): the detached remover is its own child, which it waits for
 * only until it has closed the caller's descriptors (no process in
 * between); not for one that lives on (it would keep a zombie each). */
void dsec_sandbox_remove_unwaited(bool on);
/* Stops the sandbox and removes it: asks a running supervisor to shut
 * down (at once with force) and waits until it says it stopped (its
 * processes and cgroups are gone), or for its exit: SIGKILLs it after
 * 5 s; removes the cgroups and processes a dead one left, then the
 * files. */
int dsec_sandbox_stop(const char *id, bool force, struct dsec_error **err);

/* Appends one record to sandboxes/<id>/events.jsonl (fd may be -1: opens
 * the file).  Adds "time" and "sandbox".  For writers other than the
 * supervisor: the record is kept to the budget of the sandbox's
 * spec.json (audit.h; a record that does not fit is dropped, 0 all the
 * same). */
int dsec_event_append(int fd, const char *id, json_t *event,
                      struct dsec_error **err);

/* This boot's id (/proc/sys/kernel/random/boot_id), new, or NULL. */
char *dsec_boot_id(void);

#endif
