/* Small helpers every file uses: cleanup attributes and allocators that
 * abort only on out-of-memory. */
#ifndef DSEC_UTILS_H
#define DSEC_UTILS_H

#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(dsec_freep)
#define _cleanup_close_ _cleanup_(dsec_closep)
#define _cleanup_fclose_ _cleanup_(dsec_fclosep)
#define _cleanup_closedir_ _cleanup_(dsec_closedirp)
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _unused_ __attribute__((unused))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void dsec_freep(void *p) { free(*(void **) p); }

static inline void dsec_closep(int *fd)
{
  if (*fd >= 0)
    close(*fd);
}

static inline void dsec_fclosep(FILE **f)
{
  if (*f)
    fclose(*f);
}

static inline void dsec_closedirp(DIR **d)
{
  if (*d)
    closedir(*d);
}

/* Hand a resource over: returns *pp and clears it so cleanup skips it. */
static inline void *dsec_steal_pointer(void *pp)
{
  void **p = pp;
  void *v = *p;
  *p = NULL;
  return v;
}
#define steal_pointer(pp) dsec_steal_pointer(pp)

static inline int dsec_steal_fd(int *fd)
{
  int v = *fd;
  *fd = -1;
  return v;
}

/* Out-of-memory is the one failure that aborts. */
void *xmalloc(size_t n);
void *xzalloc(size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) _printf_(1, 2);

bool dsec_str_has_prefix(const char *s, const char *prefix);
bool dsec_str_has_suffix(const char *s, const char *suffix);

/* RFC 3339 UTC time with milliseconds, e.g. 2026-11-30T10:32:00.123Z. */
char *dsec_time_rfc3339(void);
/* Monotonic clock in milliseconds. */
double dsec_now_ms(void);
/* ms to a tenth, as records give durations (not libm's round: a program
 * that needs no libm loads none, see configure.ac) */
static inline double dsec_ms1(double ms)
{
  return ms < 0 ? -(double) (long long) (-ms * 10 + 0.5) / 10
                : (double) (long long) (ms * 10 + 0.5) / 10;
}
/* the least int >= x, for x within int's range */
static inline int dsec_ceil_int(double x)
{
  int i = (int) x;
  return i < x ? i + 1 : i;
}

#endif
