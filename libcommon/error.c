#include <config.h>

#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsec_error_setv(struct dsec_error **err, int status, int errnum,
                    const char *fmt, va_list ap)
{
  struct dsec_error *e;
  char *msg;

  if (!err || *err)
    return -1;
  if (vasprintf(&msg, fmt, ap) < 0)
    msg = xstrdup("(out of memory formatting an error)");
  e = xzalloc(sizeof *e);
  e->status = status ? status : DSEC_EXIT_FAILURE;
  e->errnum = errnum;
  e->msg = msg;
  *err = e;
  return -1;
}

int dsec_error_set(struct dsec_error **err, int status, int errnum,
                   const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  dsec_error_setv(err, status, errnum, fmt, ap);
  va_end(ap);
  return -1;
}

int dsec_error_wrap(struct dsec_error **err, const char *fmt, ...)
{
  va_list ap;
  char *ctx;

  if (!err || !*err)
    return -1;
  va_start(ap, fmt);
  if (vasprintf(&ctx, fmt, ap) < 0)
    ctx = NULL;
  va_end(ap);
  if (ctx) {
    char *msg = xasprintf("%s: %s", ctx, (*err)->msg);
    free((*err)->msg);
    (*err)->msg = msg;
    free(ctx);
  }
  return -1;
}

void dsec_error_free(struct dsec_error *err)
{
  if (!err)
    return;
  free(err->msg);
  free(err);
}
