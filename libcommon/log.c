#include <config.h>

#include "log.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *log_prog = "dsec";
static enum dsec_log_format log_format = DSEC_LOG_TEXT;
static bool log_debug;

static const char *const level_names[] = {
  [DSEC_LOG_ERROR] = "error",
  [DSEC_LOG_WARNING] = "warning",
  [DSEC_LOG_INFO] = "info",
  [DSEC_LOG_DEBUG] = "debug",
};

void dsec_log_init(const char *prog)
{
  const char *s;

  if (prog) {
    const char *slash = strrchr(prog, '/');
    log_prog = slash ? slash + 1 : prog;
  }
  s = getenv("DSEC_LOG_FORMAT");
  if (s && *s)
    dsec_log_set_format_name(s);
  s = getenv("DSEC_DEBUG");
  if (s && *s && strcmp(s, "0") != 0)
    log_debug = true;
}

const char *dsec_log_prog(void) { return log_prog; }

int dsec_log_set_format_name(const char *name)
{
  if (strcmp(name, "text") == 0)
    log_format = DSEC_LOG_TEXT;
  else if (strcmp(name, "json") == 0)
    log_format = DSEC_LOG_JSON;
  else
    return -1;
  return 0;
}

void dsec_log_set_debug(bool on) { log_debug = on; }
bool dsec_log_debug_enabled(void) { return log_debug; }

/* One write per record, so records from concurrent processes sharing a
 * stderr do not interleave. */
static void emit(const char *buf, size_t len)
{
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, buf, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    buf += n;
    len -= (size_t) n;
  }
}

static void log_msg(enum dsec_log_level level, int errnum, const char *msg)
{
  if (level == DSEC_LOG_DEBUG && !log_debug)
    return;

  if (log_format == DSEC_LOG_JSON) {
    json_t *rec = json_pack("{s:s, s:s, s:s}", "level", level_names[level],
                            "msg", msg, "prog", log_prog);
    char *line;
    if (!rec)
      return;
    if (errnum) {
      json_object_set_new(rec, "errno", json_integer(errnum));
      json_object_set_new(rec, "error", json_string(strerror(errnum)));
    }
    line = json_dumps(rec, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(rec);
    if (line) {
      char *l = xasprintf("%s\n", line);
      emit(l, strlen(l));
      free(l);
      free(line);
    }
    return;
  }

  {
    const char *prefix = level == DSEC_LOG_WARNING ? "warning: "
                         : level == DSEC_LOG_DEBUG ? "debug: "
                                                   : "";
    char *l = errnum ? xasprintf("%s: %s%s: %s\n", log_prog, prefix, msg,
                                 strerror(errnum))
                     : xasprintf("%s: %s%s\n", log_prog, prefix, msg);
    emit(l, strlen(l));
    free(l);
  }
}

void dsec_log(enum dsec_log_level level, int errnum, const char *fmt, ...)
{
  va_list ap;
  char *msg;

  if (level == DSEC_LOG_DEBUG && !log_debug)
    return;
  va_start(ap, fmt);
  if (vasprintf(&msg, fmt, ap) < 0)
    msg = NULL;
  va_end(ap);
  log_msg(level, errnum, msg ? msg : fmt);
  free(msg);
}

int dsec_log_error(const struct dsec_error *err)
{
  if (!err) {
    log_msg(DSEC_LOG_ERROR, 0, "unknown error");
    return DSEC_EXIT_FAILURE;
  }
  log_msg(DSEC_LOG_ERROR, err->errnum, err->msg);
  return err->status;
}
