/* Errors travel up as a struct dsec_error filled by the function that
 * failed; callers add context with dsec_error_wrap() and only main()
 * prints.  Functions return < 0 (or NULL) on failure. */
#ifndef DSEC_ERROR_H
#define DSEC_ERROR_H

#include "exitcodes.h"
#include "utils.h"

struct dsec_error {
  int status; /* the exit status this error maps to (DSEC_EXIT_*) */
  int errnum; /* errno at the failure, 0 if none */
  char *msg;  /* owned */
};

/* Fill *err (if err and *err is still NULL) and return -1.  When *err is
 * already set the first error wins: it is the cause. */
int dsec_error_set(struct dsec_error **err, int status, int errnum,
                   const char *fmt, ...) _printf_(4, 5);
int dsec_error_setv(struct dsec_error **err, int status, int errnum,
                    const char *fmt, va_list ap);

/* Prefix "context: " to the message of *err; returns -1. */
int dsec_error_wrap(struct dsec_error **err, const char *fmt, ...) _printf_(2, 3);

void dsec_error_free(struct dsec_error *err);
static inline void dsec_error_freep(struct dsec_error **e)
{
  dsec_error_free(*e);
}
#define _cleanup_error_ _cleanup_(dsec_error_freep)

/* Shorthands for the two common kinds. */
#define dsec_fail(err, errnum, ...) \
  dsec_error_set((err), DSEC_EXIT_FAILURE, (errnum), __VA_ARGS__)
#define dsec_bad_input(err, ...) \
  dsec_error_set((err), DSEC_EXIT_INPUT, 0, __VA_ARGS__)

#endif
