/* Host id ranges, one per sandbox.  A sandbox's root and the ids under it
 * map to a range of 65536 host ids that no other sandbox (and no host
 * user) has, so sandboxes share no files, no signals and no per-user
 * kernel limits (inotify, mqueue, pending signals, fanotify groups) with
 * each other or with host root.
 *
 *   $DSEC_ROOT/ids/<slot>        the id of the sandbox holding range <slot>
 *   $DSEC_ROOT/sandboxes/<id>/ids  the slot that sandbox holds
 *
 * A slot is taken by linking a complete file under its name (link(2)
 * fails if it exists), so concurrent creates never share one; rm frees it
 * and dsec-reap collects the slots of sandboxes that are gone.  The
 * ranges come from /etc/subuid's "dsec" (else "root") entry when it holds
 * at least one range, else from 0x30000000 up (49152 ranges). */
#ifndef DSEC_IDRANGE_H
#define DSEC_IDRANGE_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

#define DSEC_IDRANGE_SIZE 65536u

struct dsec_idrange {
  uid_t base;     /* the first host id (the sandbox's root) */
  uid_t count;    /* DSEC_IDRANGE_SIZE */
  unsigned slot;
};

/* The range sandbox id holds, taking a free one on first use (the same
 * range for its whole life: resumes keep it). */
int dsec_idrange_acquire(const char *id, struct dsec_idrange *r,
                         struct dsec_error **err);

/* The range id holds, without taking one: 0, or -1 when it holds none. */
int dsec_idrange_lookup(const char *id, struct dsec_idrange *r);

/* Frees id's range (when it still holds it). */
void dsec_idrange_release(const char *id);

/* Slots whose sandbox is gone (no directory, or a directory that names
 * another slot), made more than min_age_s ago: each is passed to fn with
 * its slot file's name; with remove, it is freed too.  Returns the count. */
int dsec_idrange_collect(unsigned min_age_s, bool remove,
                         void (*fn)(void *ud, const char *slot,
                                    const char *owner),
                         void *ud);

/* Where the ranges start and how many there are (for tests and docs). */
void dsec_idrange_pool(uid_t *first, unsigned *nslots);

#endif
