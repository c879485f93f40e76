/* The container and fncall backends: a per-sandbox supervisor process that
 * owns the cgroups, the mounts (in a mount namespace of its own), the
 * sandbox's init (PID 1 of new user, mount, pid, net, ipc, uts, cgroup and
 * time namespaces), and runs the engine (engine.h) with the container's
 * operations.  See container.c for the steps. */
#ifndef DSEC_CONTAINER_H
#define DSEC_CONTAINER_H

#include "engine.h"

/* The supervisor: sets the sandbox up, reports on ready_fd, serves until
 * the sandbox ends, then exits.  Never returns. */
_Noreturn void dsec_supervisor_main(struct dsec_container_opts *o);

#endif
