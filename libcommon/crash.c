#include <config.h>

#include "crash.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "utils.h"

/* Process-wide by nature (a test hook read once from the environment);
 * a forked child inherits it and keeps counting in the shared file. */
static struct {
  bool read;
  const char *at;   /* DSEC_CRASH_AT */
  const char *list; /* DSEC_CRASH_LIST */
  const char *role;
  pid_t leader; /* dsec_crash_group's process, 0 without */
} crash;

void dsec_crash_role(const char *role)
{
  crash.role = role;
  crash.leader = 0;
}

void dsec_crash_group(const char *role)
{
  crash.role = role;
  crash.leader = getpid();
}

/* Appends line (with its newline) to the list under its lock; *n gets
 * its number (1, 2, ...) and *k how many times it is there now, both 0
 * when the list cannot be written. */
static void list_append(const char *line, long *n, long *k)
{
  int fd = open(crash.list, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  size_t len = strlen(line);
  char *buf;
  size_t got;

  *n = *k = 0;
  if (fd < 0)
    return;
  while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
    ;
  buf = dsec_read_fd(fd, 64 << 20, &got, NULL);
  if (buf && write(fd, line, len) == (ssize_t) len) {
    *n = *k = 1;
    for (char *p = buf; *p; p = strchr(p, '\n') + 1) {
      if (!strchr(p, '\n'))
        break;
      (*n)++;
      *k += strncmp(p, line, len) == 0;
    }
  }
  free(buf);
  close(fd); /* unlocks */
}

void dsec_crash_point(const char *name)
{
  _cleanup_free_ char *line = NULL;
  const char *hash;
  long n = 0, k = 0;

  if (!crash.read) {
    crash.at = getenv("DSEC_CRASH_AT");
    crash.list = getenv("DSEC_CRASH_LIST");
    crash.read = true;
  }
  if (!crash.at && !crash.list)
    return;
  line = xasprintf("%s %s\n",
                   crash.role ? crash.role : program_invocation_short_name,
                   name);
  if (crash.list)
    list_append(line, &n, &k);
  if (!crash.at)
    return;
  hash = strrchr(crash.at, '#');
  if (strcmp(crash.at, name) == 0 ||
      (n > 0 && strtol(crash.at, NULL, 10) == n) ||
      (k > 0 && hash && strtol(hash + 1, NULL, 10) == k &&
       strncmp(crash.at, line, (size_t) (hash - crash.at)) == 0 &&
       line[hash - crash.at] == '\n')) {
    if (crash.leader > 0 && crash.leader != getpid())
      kill(crash.leader, SIGKILL);
    raise(SIGKILL);
  }
}
