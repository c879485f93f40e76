/* Running a helper program (git, mkfs.erofs) and waiting for it. */
#ifndef DSEC_PROCESS_H
#define DSEC_PROCESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

/* Runs argv[0] (looked up in PATH) in cwd (NULL: ours) with stdin from
 * /dev/null and every other descriptor closed.  Its stdout goes to *out
 * (new, NUL-terminated, at most 1 MiB) when out is set, else is dropped.
 * A non-zero exit is a failure whose message ends with the program's
 * stderr (last 4 KiB). */
int dsec_run_program(char *const argv[], const char *cwd, char **out,
                     struct dsec_error **err);

/* The same in two steps, for a program that reads a stream we write
 * meanwhile: dsec_program_start runs it with stdin from in_fd (-1:
 * /dev/null) and its stdout kept when want_out; dsec_program_finish
 * collects stdout (*out, as above) and stderr, waits for it and judges
 * its status as dsec_run_program does.  With status_passthrough, an exit
 * status 3 (bad input) is kept as the error's status, with the program's
 * own message.  dsec_program_exited tells whether it ended already
 * (without collecting it); dsec_program_kill sends it SIGKILL. */
struct dsec_program {
  pid_t pid;
  int out_fd, err_fd;
  const char *argv0;
  bool status_passthrough;
};
int dsec_program_start(char *const argv[], const char *cwd, int in_fd,
                       bool want_out, struct dsec_program *p,
                       struct dsec_error **err);
int dsec_program_finish(struct dsec_program *p, char **out,
                        struct dsec_error **err);
bool dsec_program_exited(struct dsec_program *p);
void dsec_program_kill(struct dsec_program *p);

/* The path of another dsec program: next to ours (/proc/self/exe), else
 * its bare name for a PATH search.  New string. */
char *dsec_sibling_program(const char *name);

/* Whether an executable prog is in $PATH (or the default path). */
bool dsec_in_path(const char *prog);

/* Overwrites the process's command line with title (within the space the
 * original one had), for ps. */
void dsec_set_cmdline(const char *title);

/* The same in two steps, for a process whose /proc is not the host's by
 * the time it retitles itself (nor its children's, which share the
 * area's address): where the area is, read from /proc/self/stat (start
 * and end 0 when it cannot be), and the title written there. */
struct dsec_cmdline_area {
  unsigned long start, end;
};
void dsec_cmdline_area(struct dsec_cmdline_area *a);
void dsec_set_cmdline_at(const struct dsec_cmdline_area *a, const char *title);

#endif
