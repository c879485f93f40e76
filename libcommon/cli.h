/* What every dsec program's main() shares: the common options, usage
 * errors, size parsing and checking stdout at exit. */
#ifndef DSEC_CLI_H
#define DSEC_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

/* Option codes of the options every program takes. */
enum {
  DSEC_OPT_LOG_FORMAT = 0x1000,
  DSEC_OPT_DEBUG,
  DSEC_OPT_VERSION,
  DSEC_OPT_HELP,
  DSEC_OPT_FIRST_PRIVATE, /* programs number their own long options from here */
};

#define DSEC_COMMON_LONG_OPTIONS \
  { "log-format", required_argument, NULL, DSEC_OPT_LOG_FORMAT }, \
  { "debug", no_argument, NULL, DSEC_OPT_DEBUG }, \
  { "version", no_argument, NULL, DSEC_OPT_VERSION }, \
  { "help", no_argument, NULL, 'h' }

/* Sets up logging from argv[0] and the environment. */
void dsec_cli_init(int argc, char **argv);

/* Handles a common option: returns 1 when it was one (and *exit_now is set
 * with *status for --help/--version/bad values), 0 when it was not. */
int dsec_cli_common_option(int opt, const char *arg, void (*help)(void),
                           bool *exit_now, int *status);

/* Prints "PROG: msg" and the --help hint on stderr; returns 2. */
int dsec_usage_error(const char *fmt, ...) _printf_(1, 2);

/* Parses a byte size: digits with an optional K, M, G or T suffix (powers
 * of 1024, an optional trailing "B" or "iB").  -1 on bad input. */
int dsec_parse_size(const char *s, uint64_t *out);
/* Parses a non-negative integer up to max. */
int dsec_parse_uint(const char *s, uint64_t max, uint64_t *out);

/* Flushes and closes stdout; a failure (e.g. a full disk) turns status
 * into a failure with a message. */
int dsec_cli_finish(int status);

/* Logs err and returns its exit status. */
int dsec_cli_error(struct dsec_error *err);

#endif
