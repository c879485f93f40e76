/* Landlock (landlock(7)): the second layer of `protect`, and the signal
 * and abstract unix socket scopes.  The kernel's ABI is found at run time
 * and every right it lacks is left out and reported, never pretended.
 * See landlock.c for which rights go where, and what that costs. */
#ifndef DSEC_LANDLOCK_H
#define DSEC_LANDLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "json.h"

/* The ABI levels dsec uses: below them, these are missing. */
#define DSEC_LANDLOCK_ABI_REFER 2
#define DSEC_LANDLOCK_ABI_TRUNCATE 3
#define DSEC_LANDLOCK_ABI_IOCTL_DEV 5
#define DSEC_LANDLOCK_ABI_SCOPES 6

struct dsec_landlock {
  int abi;            /* the kernel's Landlock ABI (>= 1) */
  uint64_t fs;        /* file system rights handled; 0 without protect */
  uint64_t scoped;    /* LANDLOCK_SCOPE_* (ABI 6) */
  char **protect;     /* protected real paths, sorted, none beneath another */
  size_t n_protect;
  char **ancestors;   /* every directory above one of them, "/" included */
  size_t n_ancestors;
  size_t n_rules;     /* rules the last dsec_landlock_apply() made */
  struct dsec_landlock_inode {
    dev_t dev;
    ino_t ino;
  } *kept;            /* the protected paths' and ancestors' inodes */
  size_t n_kept;
};

/* The kernel's Landlock ABI, or 0 when it has none to give: then *why is
 * set (new string) to the reason, ENOSYS (not built in) or EOPNOTSUPP
 * (not enabled at boot) named. */
int dsec_landlock_abi(char **why);

/* The write-class file system rights that abi can handle, and the scopes
 * it has. */
uint64_t dsec_landlock_fs_rights(int abi);
uint64_t dsec_landlock_scopes(int abi);

/* Plans the rules for abi (>= 1) and the protected paths (a JSON array
 * of absolute paths, borrowed) as the calling process sees its file
 * system: each is resolved with realpath(3); one that does not exist
 * (ENOENT, ENOTDIR: covered by a mount) is left out.  Fills *ll, which
 * dsec_landlock_clear() empties. */
int dsec_landlock_plan(struct dsec_landlock *ll, int abi, json_t *protect,
                       struct dsec_error **err);

/* Builds the planned ruleset from the file system as it is now (a rule
 * holds the root of the mount it is made on: make them after mounting)
 * and restricts the calling thread with it: a Landlock domain that every
 * process it starts keeps.  Needs no_new_privs or CAP_SYS_ADMIN in the
 * caller's user namespace.  Returns 1 when a domain was made, 0 when the
 * plan has nothing to enforce (no protected path, no scopes), < 0 on
 * failure. */
int dsec_landlock_apply(struct dsec_landlock *ll, struct dsec_error **err);

/* What the plan enforces, for the sandbox's record (new reference):
 * {"abi", "rules", "protect", "handled", "scoped", "missing"}. */
json_t *dsec_landlock_to_json(const struct dsec_landlock *ll);

void dsec_landlock_clear(struct dsec_landlock *ll);

#endif
