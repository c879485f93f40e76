/* Running a helper program (git, mkfs.erofs) and waiting for it. */
#ifndef DSEC_PROCESS_H
#define DSEC_PROCESS_H

#include <stdbool.h>

#include "error.h"

/* Runs argv[0] (looked up in PATH) in cwd (NULL: ours) with stdin from
 * /dev/null and every other descriptor closed.  Its stdout goes to *out
 * (new, NUL-terminated, at most 1 MiB) when out is set, else is dropped.
 * A non-zero exit is a failure whose message ends with the program's
 * stderr (last 4 KiB). */
int dsec_run_program(char *const argv[], const char *cwd, char **out,
                     struct dsec_error **err);

/* The path of another dsec program: next to ours (/proc/self/exe), else
 * its bare name for a PATH search.  New string. */
char *dsec_sibling_program(const char *name);

/* Whether an executable prog is in $PATH (or the default path). */
bool dsec_in_path(const char *prog);

#endif
