#include <config.h>

#include "utils.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Noreturn void oom(void)
{
  /* No allocation here: the message is a constant. */
  static const char msg[] = "dsec: out of memory\n";
  if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0)
    abort();
  abort();
}

void *xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);
  if (!p)
    oom();
  return p;
}

void *xzalloc(size_t n)
{
  void *p = calloc(1, n ? n : 1);
  if (!p)
    oom();
  return p;
}

void *xrealloc(void *p, size_t n)
{
  p = realloc(p, n ? n : 1);
  if (!p)
    oom();
  return p;
}

char *xstrdup(const char *s)
{
  char *p = strdup(s);
  if (!p)
    oom();
  return p;
}

char *xstrndup(const char *s, size_t n)
{
  char *p = strndup(s, n);
  if (!p)
    oom();
  return p;
}

char *xasprintf(const char *fmt, ...)
{
  va_list ap;
  char *p;
  int r;

  va_start(ap, fmt);
  r = vasprintf(&p, fmt, ap);
  va_end(ap);
  if (r < 0)
    oom();
  return p;
}

bool dsec_str_has_prefix(const char *s, const char *prefix)
{
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool dsec_str_has_suffix(const char *s, const char *suffix)
{
  size_t ls = strlen(s), lx = strlen(suffix);
  return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

char *dsec_time_rfc3339(void)
{
  struct timespec ts;
  struct tm tm;

  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  /* not strftime: it reads the time zone (/etc/localtime) first, in
   * every process that writes a record */
  return xasprintf("%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   ts.tv_nsec / 1000000);
}

double dsec_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}
