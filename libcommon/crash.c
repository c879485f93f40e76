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

#include "utils.h"

/* Process-wide by nature (a test hook read once from the environment);
 * a forked child inherits it and keeps counting in the shared file. */
static struct {
  bool read;
  const char *at;   /* DSEC_CRASH_AT */
  const char *list; /* DSEC_CRASH_LIST */
  const char *role;
} crash;

void dsec_crash_role(const char *role)
{
  crash.role = role;
}

/* Appends the point to the list under its lock and returns its number
 * (1, 2, ...), or 0 when the list cannot be written. */
static long list_append(const char *name)
{
  int fd = open(crash.list, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  long n = 1;
  char buf[4096];
  ssize_t r;
  char *line;

  if (fd < 0)
    return 0;
  while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
    ;
  /* the number is one more than the lines already there */
  for (off_t off = 0; (r = pread(fd, buf, sizeof buf, off)) > 0; off += r)
    for (ssize_t i = 0; i < r; i++)
      n += buf[i] == '\n';
  line = xasprintf("%s %s\n",
                   crash.role ? crash.role : program_invocation_short_name,
                   name);
  if (write(fd, line, strlen(line)) < 0)
    n = 0;
  free(line);
  close(fd); /* unlocks */
  return n;
}

void dsec_crash_point(const char *name)
{
  long n = 0;

  if (!crash.read) {
    crash.at = getenv("DSEC_CRASH_AT");
    crash.list = getenv("DSEC_CRASH_LIST");
    crash.read = true;
  }
  if (!crash.at && !crash.list)
    return;
  if (crash.list)
    n = list_append(name);
  if (!crash.at)
    return;
  if (strcmp(crash.at, name) == 0 ||
      (n > 0 && strtol(crash.at, NULL, 10) == n))
    raise(SIGKILL);
}
