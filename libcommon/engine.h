/* The sandbox engine: the supervisor core every backend plugs into.
 *
 * One supervisor process per sandbox runs the engine.  The engine owns
 * what is the same for every backend: the exec socket and its clients
 * (requests answered in order, objects freed only after the event batch
 * that closed them), the execs in flight (checked and recorded requests,
 * output kept within the cap and streamed to a client that asked, results
 * recorded in the trajectory before they are answered, replays), the
 * timers (ttl, idle, each exec's deadline), the state file and the audit
 * log, the report to the creator, checkpoint, suspend and resume, and the
 * end of the sandbox.
 *
 * A backend (container.c for container and fncall, vm.c for microvm and
 * vm) sets the sandbox up, then hands over to dsec_engine_serve() with a
 * small table of operations: how an exec starts, how processes are
 * signalled and frozen, how the writable layer is streamed for a
 * checkpoint, how everything stops.  What a backend watches of its own
 * (init's socket, a seccomp listener, QEMU's monitor and agent) it adds
 * to the engine's event loop with dsec_engine_watch(). */
#ifndef DSEC_ENGINE_H
#define DSEC_ENGINE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "audit.h"
#include "ctl.h"
#include "exec.h"
#include "guest.h"
#include "json.h"
#include "proxy.h"
#include "spec.h"

struct dsec_engine;
struct dsec_job;
struct dsec_cgroup;
struct dsec_session;
struct dsec_copy_job;

/* What the creator (dsec-run create) hands a new supervisor. */
struct dsec_container_opts {
  const char *id;
  json_t *spec;        /* validated spec */
  json_t *environment; /* composed environment (dsec_compose) */
  char **layers;       /* materialised layers (directories or EROFS images),
                        * bottom to top */
  size_t n_layers;
  /* container, fncall: the layers' EROFS images as detached mounts
   * (layermount.h), n_layers of them (-1: that layer is a directory),
   * then the host's shared sysfs (-1: the sandbox mounts its own), then
   * the template mount namespace (-1: init pivot_roots); or NULL */
  int *layer_fds;
  int ready_fd;        /* the supervisor writes one JSON line here */
  /* microvm and vm */
  const char *restore;   /* a memory snapshot to restore instead of booting */
  const char *disk_from; /* a writable disk to start from (a fork's copy) */
};

/* Something in the event loop: fn is called with the epoll events. */
struct dsec_watch {
  void (*fn)(struct dsec_engine *e, void *p, uint32_t events);
  void *p;
  bool dead; /* its object is gone: events still queued for it are dropped */
};

/* One output stream of an exec: what the cap keeps, and the count. */
struct dsec_capture {
  struct dsec_guest_capture k;
  int fd;                 /* a pipe the engine reads, or -1 */
  struct dsec_watch w;
  struct dsec_job *job;
  const char *name;       /* "stdout" or "stderr" */
};

struct dsec_client {
  struct dsec_ctl_client c;
  struct dsec_watch w;
  struct dsec_job *job;   /* the exec it waits for */
};

struct dsec_job {
  uint64_t xid;           /* the engine's number for it */
  struct dsec_client *cl; /* who waits for the result, or NULL */
  json_t *req;            /* the request as recorded */
  json_t *seq;            /* borrowed from req, or NULL */
  uint64_t cap;           /* bytes kept per stream */
  bool stream;            /* output records as the output comes */
  bool volatile_result;   /* "durable": false: the record is not synced */
  double start, deadline; /* ms; deadline 0: none */
  bool timed_out;         /* its deadline passed (the backend ends it) */
  bool deadline_passed;   /* the engine told the backend so, once */
  struct dsec_capture out, err;
  int in_fd;              /* stdin pipe the engine writes, or -1 */
  struct dsec_watch w_in;
  char *stdin_data;
  size_t stdin_len, stdin_off;
  bool keep_stdin;        /* more input comes later (a session's shell) */
  bool in_armed;          /* w_in is in the event loop */
  bool in_eof;            /* no more input: closed once written */
  uint64_t in_flight;     /* given to ops->input, not yet taken (acked) */
  struct dsec_copy_job *copy; /* a copy in or out (dsec-run cp) */
  bool tty;               /* on a terminal: its master is out.fd (and in_fd) */
  bool interactive;       /* its client sends input and resizes as it runs */
  bool tty_up;            /* the terminal's master has come (dsec_job_tty) */
  int tty_slave;          /* the terminal's other end, held until the command
                           * ended and its output was read, or -1 */
  /* a world's service's command: its engine (the job is also a shell, so
   * idle timers do not count it; its output goes to service.log), or NULL */
  struct dsec_engine *daemon;
  int kill_sig;           /* what ended it at its deadline (0: SIGKILL) */
  /* sessions: a shell (shell true, a backend job), or a command run in
   * one (the engine's own: no backend job, priv NULL) */
  struct dsec_session *sess;
  bool shell;
  void *priv;             /* the backend's (freed by ops->job_free) */
};

/* How an exec ended, as the backend tells the engine. */
struct dsec_job_end {
  int status;        /* a wait status */
  bool oom;          /* killed for memory */
  const char *error; /* dsec failed to run it (exit code 125), or NULL */
  json_t *extra;     /* fields added to the result before it is recorded
                      * (borrowed), or NULL */
};

struct dsec_backend_ops {
  /* Starts job j; msg (borrowed) holds argv, env, cwd, uid, gid and xid.
   * The backend later reports output (dsec_job_pipes or dsec_job_output)
   * and the end (dsec_job_finish).  0, or -1 and *err: the exec fails
   * with exit code 125. */
  int (*exec)(struct dsec_engine *e, struct dsec_job *j, json_t *msg,
              struct dsec_error **err);
  /* j's deadline passed; NULL: the engine marks it timed out and sends
   * it SIGKILL (signal). */
  void (*deadline)(struct dsec_engine *e, struct dsec_job *j);
  /* sig to the processes of exec j, or of the whole sandbox (j NULL). */
  void (*signal)(struct dsec_engine *e, struct dsec_job *j, int sig);
  /* Freezes or thaws every process; NULL or -1: cannot (suspend without
   * release is then refused). */
  int (*freeze)(struct dsec_engine *e, bool frozen, struct dsec_error **err);
  /* Writes the writable layer as a tar stream (see dsec_checkpoint_import);
   * NULL: the sandbox has no state to checkpoint.  A producer that keeps
   * the sandbox still itself says so with "frozen" in its stats; else the
   * engine freezes around it. */
  dsec_checkpoint_producer checkpoint;
  bool checkpoint_freezes; /* the producer keeps the sandbox still */
  /* suspend --release where the backend keeps more than a checkpoint (a
   * VM's memory): the answer, *ended when the sandbox is to end as
   * released; NULL: a checkpoint is taken and the sandbox ends. */
  json_t *(*release)(struct dsec_engine *e, bool *ended);
  /* The "snapshot" op (a VM fork's memory and disk); NULL: unknown op. */
  json_t *(*snapshot)(struct dsec_engine *e);
  /* Called after a result is recorded (events of its own), may be NULL. */
  void (*exec_done)(struct dsec_engine *e, struct dsec_job *j, json_t *res);
  /* Frees j->priv, may be NULL. */
  void (*job_free)(struct dsec_engine *e, struct dsec_job *j);
  /* A child of the supervisor may have exited (SIGCHLD): reap yours. */
  void (*child)(struct dsec_engine *e);
  /* The backend's next timer (ms from now, -1 none) and its firing. */
  int (*next_timer)(struct dsec_engine *e);
  void (*timers)(struct dsec_engine *e);
  /* Stops every process of the sandbox (the end); then cleanup after
   * the state is written, may be NULL (after_end: not called when the
   * one who asked for the end was told it is done, see
   * dsec_engine_end). */
  void (*stop)(struct dsec_engine *e);
  void (*after_end)(struct dsec_engine *e);
  /* The last of the end, once whoever asked for it has its answer:
   * what need not delay that answer (may be NULL).  Our exit still
   * waits for it, and a remover waits for our exit. */
  void (*epilogue)(struct dsec_engine *e);
  /* More input for job j, started with "keep_stdin" (a session's shell,
   * a copy in), buf NULL for its end; NULL: the engine writes the stdin
   * pipe given to dsec_job_pipes. */
  int (*input)(struct dsec_engine *e, struct dsec_job *j, const char *buf,
               size_t len);
  /* An interactive exec's terminal is now cols x rows; NULL: the engine
   * sets it on the master it was given (dsec_job_tty). */
  void (*resize)(struct dsec_engine *e, struct dsec_job *j, unsigned cols,
                 unsigned rows);
  /* Why this backend cannot run exclusive execs (refused as bad input),
   * or NULL. */
  const char *no_exclusive;
};

struct dsec_engine {
  const char *id;
  char *dir, *run;            /* sandboxes/<id>, $DSEC_RUN/<id> */
  struct dsec_spec *spec;     /* typed */
  json_t *spec_json;          /* as given, validated (borrowed) */
  json_t *state;              /* state.json (owned) */
  json_t *base_env;           /* every exec's environment before its own */
  int epfd, sfd, lsock, run_fd, events_fd, ready_fd;
  sigset_t mask;              /* what the signalfd reads */
  struct dsec_client **clients;
  size_t nclients;
  struct dsec_job **jobs;     /* execs, session commands and shells */
  size_t njobs, nshells;
  struct dsec_session **sessions;
  size_t nsessions;
  json_t *exec_extra;         /* fields every exec's result carries (a VM's
                               * accelerator), or NULL */
  bool keeps_processes;       /* restored with its processes (a VM's
                               * memory): earlier sessions live on */
  uint64_t next_xid;
  double start_ms, last_activity_ms;
  bool suspended;             /* frozen: execs wait for resume */
  bool released;              /* suspend --release: the end is "suspended" */
  bool removing;              /* shutdown for rm: the end is not recorded */
  struct dsec_client *ender;  /* who asked for the end (a shutdown for
                               * rm): told "stopped" once it is done, or
                               * NULL */
  struct dsec_cgroup *cg;     /* the backend's, destroyed at the end */
  struct dsec_traj traj;
  struct dsec_audit *audit;
  struct dsec_proxy *proxy;   /* network proxy mode, else NULL */
  struct dsec_net_events net;
  void **graves;              /* freed after the event batch */
  size_t ngraves;
  const struct dsec_backend_ops *ops;
  void *b;                    /* the backend's state */
  struct dsec_watch w_listen, w_signal;
  /* a task world's service: its command's output (service.log, within
   * DSEC_SERVICE_LOG_MAX), and the agent's supervisor, whose end (but a
   * release) ends the service */
  int service_log_fd;
  uint64_t service_log_bytes;
  int world_pidfd;
  struct dsec_watch w_world;
};

#define DSEC_SERVICE_LOG_MAX (1u << 20)

/* Sets up what every supervisor has before its backend starts the
 * sandbox: the process (name, signals, standard streams), the sandbox's
 * and run directories, the typed spec, the trajectory and the audit log.
 * Exits through the failure report when that cannot be done. */
void dsec_engine_init(struct dsec_engine *e, struct dsec_container_opts *o,
                      const struct dsec_backend_ops *ops, void *backend);

/* Reports the failure to the creator, lets the backend clean up (stop),
 * removes the cgroup, exits 1. */
_Noreturn void dsec_engine_fail(struct dsec_engine *e, struct dsec_error *err);

/* The sandbox runs: its state (the backend's fields, stolen, added to
 * the common ones), event (stolen: "created", or "resumed") in the audit
 * log, the report to the creator, then the event loop until the end.
 * Never returns. */
_Noreturn void dsec_engine_serve(struct dsec_engine *e, json_t *fields,
                                 json_t *event);

/* The end: every process stops, the waiting clients get an error, the
 * state is written (state, cause), the event recorded, exit 0. */
_Noreturn void dsec_engine_end(struct dsec_engine *e, const char *state,
                               const char *cause);

/* Adds fd to the event loop; w must live until it is marked dead. */
int dsec_engine_watch(struct dsec_engine *e, int fd, uint32_t events,
                      struct dsec_watch *w);
/* Frees p after the current event batch. */
void dsec_engine_bury(struct dsec_engine *e, void *p);

/* Audit records (ev stolen); _first for a first sighting of key. */
void dsec_engine_event(struct dsec_engine *e, json_t *ev);
void dsec_engine_event_first(struct dsec_engine *e, json_t *ev,
                             enum dsec_audit_kind kind, const void *key,
                             size_t len);
void dsec_engine_write_state(struct dsec_engine *e);

/* What runs: the jobs but sessions' idle shells. */
size_t dsec_engine_busy(const struct dsec_engine *e);

/* A job by the engine's number, or NULL. */
struct dsec_job *dsec_engine_job(struct dsec_engine *e, uint64_t xid);

/* The exec's output comes on these pipes (the engine reads them and
 * writes the request's stdin); the descriptors are taken. */
void dsec_job_pipes(struct dsec_engine *e, struct dsec_job *j, int out,
                    int err, int in);
/* n bytes of the input given to ops->input were taken by the command
 * (a guest's acknowledgement): a copy in sends more. */
void dsec_job_input_taken(struct dsec_engine *e, struct dsec_job *j,
                          uint64_t n);
/* The exec runs on a terminal whose master is fd (taken): its output is
 * read from it, its input written to it.  slave (taken, or -1) is the
 * terminal's other end, held so that the master never reports the end
 * (EIO) while the command's last output is still on its way. */
void dsec_job_tty(struct dsec_engine *e, struct dsec_job *j, int fd,
                  int slave);
/* Output that came otherwise (a guest's answer): kept within the cap,
 * streamed to a client that asked; total is the stream's whole size
 * (more than len when the guest kept only the cap). */
void dsec_job_output(struct dsec_engine *e, struct dsec_job *j, int stream,
                     const char *buf, size_t len, uint64_t total);
/* The exec ended: what is left on its pipes is read, the result built,
 * recorded and answered, the job freed. */
void dsec_job_finish(struct dsec_engine *e, struct dsec_job *j,
                     const struct dsec_job_end *end);

#endif
