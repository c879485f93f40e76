/* Unit tests for libcommon/error.c: filling, wrapping and freeing errors,
 * the first error winning, and the exit status each kind maps to. */
#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "error.h"
#include "tap.h"

static void test_set_and_free(void)
{
  struct dsec_error *err = NULL;

  is_int(dsec_error_set(&err, DSEC_EXIT_USAGE, EINVAL, "bad %s #%d", "flag", 7),
         -1, "dsec_error_set returns -1");
  ok(err != NULL, "it fills *err");
  if (!err)
    return;
  is_int(err->status, DSEC_EXIT_USAGE, "status kept");
  is_int(err->errnum, EINVAL, "errnum kept");
  is_str(err->msg, "bad flag #7", "message formatted");
  dsec_error_free(err);
  dsec_error_free(NULL);
  ok(1, "dsec_error_free of an error and of NULL");

  is_int(dsec_error_set(NULL, DSEC_EXIT_FAILURE, 0, "nobody listens"), -1,
         "dsec_error_set with a NULL err returns -1");

  err = NULL;
  dsec_error_set(&err, 0, 0, "no status given");
  is_int(err ? err->status : -1, DSEC_EXIT_FAILURE,
         "status 0 becomes DSEC_EXIT_FAILURE");
  dsec_error_free(err);
}

static void test_first_error_wins(void)
{
  struct dsec_error *err = NULL;

  dsec_bad_input(&err, "the cause");
  is_int(dsec_fail(&err, ENOENT, "a consequence"), -1,
         "a second error still returns -1");
  is_str(err->msg, "the cause", "the first message is kept");
  is_int(err->status, DSEC_EXIT_INPUT, "the first status is kept");
  is_int(err->errnum, 0, "the first errnum is kept");
  dsec_error_free(err);
}

static void test_wrap(void)
{
  struct dsec_error *err = NULL;

  is_int(dsec_error_wrap(&err, "context"), -1,
         "wrap without an error returns -1");
  ok(err == NULL, "... and creates none");
  is_int(dsec_error_wrap(NULL, "context"), -1, "wrap of NULL returns -1");

  dsec_fail(&err, EACCES, "cannot open %s", "x");
  is_int(dsec_error_wrap(&err, "layer %d", 2), -1, "wrap returns -1");
  is_str(err->msg, "layer 2: cannot open x", "wrap prefixes \"context: \"");
  dsec_error_wrap(&err, "pull");
  is_str(err->msg, "pull: layer 2: cannot open x",
         "wrapping twice nests outermost first");
  is_int(err->errnum, EACCES, "errnum survives wrapping");
  is_int(err->status, DSEC_EXIT_FAILURE, "status survives wrapping");
  dsec_error_free(err);
}

static void test_status_mapping(void)
{
  struct dsec_error *err = NULL;

  dsec_fail(&err, EIO, "disk");
  is_int(err->status, 1, "dsec_fail maps to status 1");
  is_int(err->errnum, EIO, "dsec_fail keeps errnum");
  dsec_error_free(err);

  err = NULL;
  dsec_bad_input(&err, "line %d: field `%s`", 3, "cmd");
  is_int(err->status, 3, "dsec_bad_input maps to status 3");
  is_int(err->errnum, 0, "dsec_bad_input has no errnum");
  is_str(err->msg, "line 3: field `cmd`", "dsec_bad_input formats");
  dsec_error_free(err);
}

static int set_via_v(struct dsec_error **err, const char *fmt, ...)
{
  va_list ap;
  int ret;
  va_start(ap, fmt);
  ret = dsec_error_setv(err, DSEC_EXIT_INPUT, ERANGE, fmt, ap);
  va_end(ap);
  return ret;
}

static void test_setv_and_cleanup(void)
{
  struct dsec_error *err = NULL;

  is_int(set_via_v(&err, "%s=%d", "n", 42), -1, "dsec_error_setv returns -1");
  is_str(err ? err->msg : NULL, "n=42", "dsec_error_setv formats");
  is_int(err ? err->errnum : 0, ERANGE, "dsec_error_setv keeps errnum");
  dsec_error_free(err);

  {
    _cleanup_error_ struct dsec_error *scoped = NULL;
    dsec_fail(&scoped, 0, "freed at the end of the scope");
  }
  {
    _cleanup_error_ struct dsec_error *never = NULL;
  }
  ok(1, "_cleanup_error_ frees a set and an unset error");
}

int main(void)
{
  test_set_and_free();
  test_first_error_wins();
  test_wrap();
  test_status_mapping();
  test_setv_and_cleanup();
  return done_testing();
}
