/* Advisory locks with flock(2): a lock belongs to the open file, so it is
 * released when the holder exits, even by kill -9. */
#ifndef DSEC_LOCK_H
#define DSEC_LOCK_H

#include <stdbool.h>

#include "error.h"

enum dsec_lock_mode {
  DSEC_LOCK_SHARED,
  DSEC_LOCK_EXCLUSIVE,
};

/* Opens (creating) dirfd/name and locks it, waiting unless nonblock.
 * Returns the fd holding the lock; close it to unlock.  With nonblock and
 * the lock held elsewhere, returns -1 with errno-only error EWOULDBLOCK
 * (status DSEC_EXIT_FAILURE). */
int dsec_lock_at(int dirfd, const char *name, enum dsec_lock_mode mode,
                 bool nonblock, struct dsec_error **err);

#endif
