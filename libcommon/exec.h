/* The exec protocol both supervisors speak (container.c for the container
 * and fncall backends, vm.c for microvm and vm): how a request is checked
 * and recorded, and the trajectory that replays recorded results by seq. */
#ifndef DSEC_EXEC_H
#define DSEC_EXEC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "json.h"

struct dsec_audit;

/* 0 when req is a well-formed exec request, else -1 and *why (new). */
int dsec_exec_request_check(json_t *req, char **why);
/* A session's name: 1 to 64 of [A-Za-z0-9._-]. */
bool dsec_session_name_ok(const char *name);

/* The request as it will run and as the trajectory records it: cmd,
 * stdin, workdir (default_workdir when the request has none), env,
 * timeout_s, max_output_bytes (*cap, 1 MiB by default) and seq (new). */
json_t *dsec_exec_request_record(json_t *req, const char *default_workdir,
                                 uint64_t *cap);

/* The environment of an exec as "K=V" strings: the base (image config and
 * spec) overridden by the request's (new array). */
json_t *dsec_exec_env(json_t *base, json_t *req_env);

/* The environment every exec starts from (new object): the image's
 * config, PATH and HOME defaults, the proxy variables in proxy mode, then
 * the spec's env. */
json_t *dsec_exec_base_env(json_t *spec, json_t *environment, uid_t uid);

/* The trajectory: trajectory.jsonl, one record per exec (and checkpoint),
 * indexed by seq so a re-sent seq is answered from the file. */
struct dsec_traj {
  int fd;            /* O_RDWR | O_APPEND, owned by the caller */
  struct dsec_traj_entry {
    off_t off;
    size_t len;
  } *e;               /* record seq_base + i */
  size_t n;
  json_int_t seq_base;
  json_t *last_seq;   /* the last seq recorded, or NULL */
};

/* Indexes what fd holds already (a sandbox resumed with its log). */
void dsec_traj_load(struct dsec_traj *t);
void dsec_traj_free(struct dsec_traj *t);

/* Decides what to do with a request that has a seq.  running lists the
 * seqs of execs in flight.  Returns 0 to run it (it is the next one),
 * 1 to replay (*out = the recorded result, new ref, marked replayed), and
 * -1 to refuse (*out = an error reply with exit_code 4; *conflict = the
 * field that differs from the record, or NULL). */
int dsec_traj_check(struct dsec_traj *t, json_t *req, const json_int_t *running,
                    size_t nrunning, json_t **out, const char **conflict);

/* Appends an exec record (seq, request, result) and, when sync,
 * fdatasyncs it; -1 when it cannot be written (or made durable). */
int dsec_traj_append(struct dsec_traj *t, json_t *seq, json_t *req,
                     json_t *res, bool sync, struct dsec_error **err);

/* A checkpoint, for both supervisors.  The sandbox's writable layer
 * reaches the host only as a tar stream that a producer writes from the
 * sandbox's own side (a helper in the container's user namespace, the
 * guest agent), imported as an untrusted tarball is (dsec-layer create
 * --tar -) with the checkpoint's policy: setuid/setgid bits, file
 * capabilities and overlay metadata removed and counted, device nodes
 * refused, and no change to a protected path (the checkpoint fails).
 *
 * The producer writes the whole stream to fd and returns 0, or -1 with
 * *err set; *stats (new, may stay NULL) gets what it counted
 * ("skipped_whiteout_names").  It must not close fd: the import sees the
 * end of the stream only once the producer succeeded. */
struct dsec_checkpoint_opts {
  const char *name;  /* tag NAME@VERSION, or NULL */
  json_t *protect;   /* the spec's protect paths (borrowed), or NULL */
  uint64_t max_size; /* bound on the stream; 0: dsec-layer's default */
};
typedef int (*dsec_checkpoint_producer)(void *ud, int fd, json_t **stats,
                                        struct dsec_error **err);
/* The layer record (new, with the stripped_* counts) or NULL; *stats
 * (new) the producer's counts. */
json_t *dsec_checkpoint_import(const struct dsec_checkpoint_opts *o,
                               dsec_checkpoint_producer produce, void *ud,
                               json_t **stats, struct dsec_error **err);
/* Records a checkpoint: the trajectory (synced), a "checkpoint" event
 * (with the counts of layer and stats), state's "checkpoint"; it returns
 * the answer to the client (new), or NULL when the trajectory cannot take
 * it. */
json_t *dsec_checkpoint_record(struct dsec_traj *t, struct dsec_audit *audit,
                               const char *id, json_t *state, json_t *layer,
                               json_t *stats, bool consistent,
                               struct dsec_error **err);

/* A piece of an exec's output as the record a client streaming it gets
 * (new): {"type":"output","fd":1|2,"stream":"stdout"|"stderr","data":
 * text,"data_b64":bytes}. */
json_t *dsec_exec_output(const char *stream, const char *buf, size_t len);

/* The result record of an exec, as both backends answer it (new). */
json_t *dsec_exec_result(const char *id, json_t *seq, int exit_code, int sig,
                         const char *out, size_t out_len, uint64_t out_total,
                         const char *err, size_t err_len, uint64_t err_total,
                         bool timed_out, bool oom, double duration_ms);

/* Appends the audit events of a finished exec (req as recorded, res its
 * result, dropped the output bytes beyond the cap) to the sandbox's audit
 * log: "exec" (its argv bounded, see audit.h), and a "limit" event for a
 * timeout, an OOM kill or dropped output. */
void dsec_exec_events(struct dsec_audit *audit, json_t *req, json_t *res,
                      uint64_t dropped);

#endif
