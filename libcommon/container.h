/* The container and fncall backends: a per-sandbox supervisor process that
 * owns the cgroups, the mounts (in a mount namespace of its own), the
 * sandbox's init (PID 1 of new user, mount, pid, net, ipc, uts, cgroup and
 * time namespaces) and the exec socket.  See container.c for the steps. */
#ifndef DSEC_CONTAINER_H
#define DSEC_CONTAINER_H

#include <stdbool.h>
#include <sys/types.h>

#include "json.h"

struct dsec_container_opts {
  const char *id;
  json_t *spec;        /* validated spec */
  json_t *environment; /* composed environment (dsec_compose) */
  char **layers;       /* materialised layer directories, bottom to top */
  size_t n_layers;
  int ready_fd;        /* the supervisor writes one JSON line here */
  /* dsec-vm only */
  const char *restore;   /* a memory snapshot to restore instead of booting */
  const char *disk_from; /* a writable disk to start from (a fork's copy) */
};

/* The supervisor: sets the sandbox up, reports on ready_fd, serves until
 * the sandbox ends, then exits.  Never returns. */
_Noreturn void dsec_supervisor_main(struct dsec_container_opts *o);

#endif
