#include <config.h>

#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

void dsec_cli_init(int argc, char **argv)
{
  dsec_log_init(argc > 0 ? argv[0] : "dsec");
}

int dsec_cli_common_option(int opt, const char *arg, void (*help)(void),
                           bool *exit_now, int *status)
{
  switch (opt) {
  case DSEC_OPT_LOG_FORMAT:
    if (dsec_log_set_format_name(arg) < 0) {
      *status = dsec_usage_error("unknown log format `%s` (text or json)", arg);
      *exit_now = true;
    }
    return 1;
  case DSEC_OPT_DEBUG:
    dsec_log_set_debug(true);
    return 1;
  case DSEC_OPT_VERSION:
    printf("%s %s\n", dsec_log_prog(), PACKAGE_VERSION);
    *status = DSEC_EXIT_OK;
    *exit_now = true;
    return 1;
  case 'h':
    help();
    *status = DSEC_EXIT_OK;
    *exit_now = true;
    return 1;
  default:
    return 0;
  }
}

int dsec_usage_error(const char *fmt, ...)
{
  va_list ap;
  char *msg;

  va_start(ap, fmt);
  if (vasprintf(&msg, fmt, ap) < 0)
    msg = NULL;
  va_end(ap);
  dsec_log(DSEC_LOG_ERROR, 0, "%s (try '%s --help')", msg ? msg : fmt,
           dsec_log_prog());
  free(msg);
  return DSEC_EXIT_USAGE;
}

int dsec_parse_uint(const char *s, uint64_t max, uint64_t *out)
{
  char *end;
  unsigned long long v;

  if (!s || !*s || *s == '-' || *s == '+')
    return -1;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || *end || v > max)
    return -1;
  *out = v;
  return 0;
}

int dsec_parse_size(const char *s, uint64_t *out)
{
  char *end;
  unsigned long long v;
  int shift = 0;

  if (!s || !*s || *s == '-' || *s == '+')
    return -1;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || end == s)
    return -1;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  case 't': case 'T': shift = 40; end++; break;
  default: break;
  }
  if (shift && *end == 'i')
    end++;
  if (*end == 'B')
    end++;
  if (*end)
    return -1;
  if (shift && v > (UINT64_MAX >> shift))
    return -1;
  *out = (uint64_t) v << shift;
  return 0;
}

int dsec_cli_finish(int status)
{
  /* a write error on stdout (EPIPE aside) must not pass for success */
  if (fflush(stdout) != 0 || ferror(stdout) || close(STDOUT_FILENO) < 0) {
    if (errno != EPIPE && errno != EBADF) {
      dsec_log(DSEC_LOG_ERROR, errno, "write error on stdout");
      if (status == 0)
        status = DSEC_EXIT_FAILURE;
    }
  }
  return status;
}

int dsec_cli_error(struct dsec_error *err)
{
  int status = dsec_log_error(err);
  dsec_error_free(err);
  return status;
}
