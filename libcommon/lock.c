#include <config.h>

#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

int dsec_lock_at(int dirfd, const char *name, enum dsec_lock_mode mode,
                 bool nonblock, struct dsec_error **err)
{
  int op = (mode == DSEC_LOCK_EXCLUSIVE ? LOCK_EX : LOCK_SH) |
           (nonblock ? LOCK_NB : 0);
  int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                  0600);

  if (fd < 0)
    return dsec_fail(err, errno, "cannot open lock %s", name);
  while (flock(fd, op) < 0) {
    int e = errno;
    if (e == EINTR)
      continue;
    close(fd);
    if (e == EWOULDBLOCK)
      return dsec_fail(err, e, "%s is locked", name);
    return dsec_fail(err, e, "cannot lock %s", name);
  }
  return fd;
}
