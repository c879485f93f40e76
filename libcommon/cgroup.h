/* Per-sandbox cgroups on cgroup v2, v1, or a hybrid of both: each
 * controller is used where the kernel gives it (v2 when the unified tree
 * has it, else its v1 hierarchy).  A sandbox's cgroups are
 * <hierarchy>/dsec/<id>; their paths are kept in the sandbox's state so
 * that `rm` can remove them after a supervisor died. */
#ifndef DSEC_CGROUP_H
#define DSEC_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "json.h"

enum dsec_cg_ctrl {
  DSEC_CG_MEMORY,
  DSEC_CG_PIDS,
  DSEC_CG_CPU,
  DSEC_CG_FREEZER,
  DSEC_CG_N,
};

struct dsec_cgroup {
  char *path[DSEC_CG_N]; /* directory per controller, NULL if unavailable */
  bool v2[DSEC_CG_N];
  char *unavailable;     /* why limits are missing (rootless), or NULL */
  int oom_fd;            /* the file counting OOM kills, opened once (0: not yet) */
};

/* Creates the cgroups and applies resources (the spec's object). */
int dsec_cgroup_create(const char *id, json_t *resources,
                       struct dsec_cgroup **out, struct dsec_error **err);
int dsec_cgroup_attach(struct dsec_cgroup *cg, pid_t pid,
                       struct dsec_error **err);
/* A process that moves itself into the cgroups: fds[c] (or -1) is the
 * file, one per hierarchy, that it writes "0" to (dsec_cgroup_join).  On
 * v1 that is "tasks", which moves the calling thread only, without
 * write-locking the host-wide rwsem that a move of a whole process takes
 * (whose first taking after a quiet spell waits for an RCU grace period,
 * 6-18 ms here): the process must be single-threaded then, as a freshly
 * forked one is.  On v2, "cgroup.procs".  The files are opened by the
 * caller, and the kernel checks the opener's credentials and cgroup
 * namespace (Linux 5.16, and the stable kernels with the fix for
 * CVE-2021-4197), so the process may have dropped its own by then. */
int dsec_cgroup_join_open(struct dsec_cgroup *cg, int fds[DSEC_CG_N],
                          struct dsec_error **err);
/* The move, and the files closed; -1 with errno set on a failure, and
 * *failed (if not NULL) the controller whose file refused it. */
int dsec_cgroup_join(int fds[DSEC_CG_N], int *failed);
void dsec_cgroup_join_close(int fds[DSEC_CG_N]);
/* A controller's name: "memory", "pids", "cpu", "freezer". */
const char *dsec_cgroup_ctrl_name(int c);
/* Core scheduling for a latency-class sandbox: gives pid's thread group
 * (and whatever it forks from now on) a core-scheduling cookie of its
 * own (prctl PR_SCHED_CORE), so that no task of another cookie, a
 * best-effort sandbox's or another sandbox's, runs on an SMT sibling of
 * a core it runs on.  Returns 1 when done; 0 when this host cannot (no
 * SMT siblings, a kernel without CONFIG_SCHED_CORE), with *why (new);
 * -1 on another failure, with *why too. */
int dsec_core_sched_isolate(pid_t pid, char **why);

/* OOM kills so far in the memory cgroup (-1 if unknown). */
int64_t dsec_cgroup_oom_kills(struct dsec_cgroup *cg);
/* Times the pids limit refused a fork so far (-1 if unknown). */
int64_t dsec_cgroup_pids_max_hits(struct dsec_cgroup *cg);
/* Bytes of memory charged to the sandbox (-1 if unknown). */
int64_t dsec_cgroup_memory_current(struct dsec_cgroup *cg);
int dsec_cgroup_freeze(struct dsec_cgroup *cg, bool frozen,
                       struct dsec_error **err);
/* Kills every process in the sandbox's cgroups (SIGKILL until empty). */
void dsec_cgroup_kill_all(struct dsec_cgroup *cg);
/* Removes the directories (killing what is left); missing ones are fine. */
int dsec_cgroup_destroy(struct dsec_cgroup *cg, struct dsec_error **err);
void dsec_cgroup_free(struct dsec_cgroup *cg);

/* {"memory":{"path":..,"version":1},...} and back (new/owned). */
json_t *dsec_cgroup_to_json(struct dsec_cgroup *cg);
struct dsec_cgroup *dsec_cgroup_from_json(json_t *j);
/* The cgroups a sandbox id has on this machine, whatever its state file
 * says (new). */
struct dsec_cgroup *dsec_cgroup_for_id(const char *id);

#endif
