/* Diagnostics on stderr: a line of text prefixed with the program's name,
 * or one JSON record per line with --log-format=json / DSEC_LOG_FORMAT.
 * The program name, format and level are the only process-wide settings. */
#ifndef DSEC_LOG_H
#define DSEC_LOG_H

#include <stdbool.h>

#include "error.h"

enum dsec_log_level {
  DSEC_LOG_ERROR,
  DSEC_LOG_WARNING,
  DSEC_LOG_INFO,
  DSEC_LOG_DEBUG,
};

enum dsec_log_format {
  DSEC_LOG_TEXT,
  DSEC_LOG_JSON,
};

/* Reads DSEC_LOG_FORMAT and DSEC_DEBUG. */
void dsec_log_init(const char *prog);
const char *dsec_log_prog(void);
/* Returns -1 for an unknown name. */
int dsec_log_set_format_name(const char *name);
void dsec_log_set_debug(bool on);
bool dsec_log_debug_enabled(void);

void dsec_log(enum dsec_log_level level, int errnum, const char *fmt, ...)
  _printf_(3, 4);

#define dsec_debug(...) \
  do { \
    if (dsec_log_debug_enabled()) \
      dsec_log(DSEC_LOG_DEBUG, 0, __VA_ARGS__); \
  } while (0)
#define dsec_warn(...) dsec_log(DSEC_LOG_WARNING, 0, __VA_ARGS__)
#define dsec_info(...) dsec_log(DSEC_LOG_INFO, 0, __VA_ARGS__)

/* Logs err as one error record and returns its exit status. */
int dsec_log_error(const struct dsec_error *err);

#endif
