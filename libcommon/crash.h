/* Crash points, for the crash tests (tests/crash.bats): the programs call
 * dsec_crash_point() at their durable steps (a temporary file written, its
 * fsync, its rename; a fork or exec; a record appended), and under a test
 * environment it kills the process there.
 *
 *   DSEC_CRASH_LIST=FILE  each point reached, by any process of the run,
 *                         appends "ROLE NAME" to FILE (ROLE: the program,
 *                         "supervisor", or "serve" for dsec-run serve and
 *                         its requests' processes); the points of a run are
 *                         numbered in that order across its processes
 *   DSEC_CRASH_AT=N       the process reaching point N (counting from 1,
 *                         with DSEC_CRASH_LIST) raises SIGKILL on itself
 *   DSEC_CRASH_AT=NAME    any process reaching a point NAME does
 *   DSEC_CRASH_AT='ROLE NAME#K'  the process reaching the point that
 *                         makes "ROLE NAME" the list's Kth such line does
 *                         (what the processes of a run do at once may
 *                         come in either order, each one's steps not)
 *
 * Points are named for the step just done: a temporary file written is
 * named after the file it becomes ("state.json"), then "synced" and
 * "renamed"; "blob written", "blob linked"; "exec" (before a fork and
 * exec); "trajectory written", "trajectory synced", "answered"; ...
 *
 * Without either variable a point costs one getenv, once per process. */
#ifndef DSEC_CRASH_H
#define DSEC_CRASH_H

void dsec_crash_point(const char *name);

/* Names this process's role in the list (a forked supervisor says
 * "supervisor"); a static string. */
void dsec_crash_role(const char *role);

/* The same, for a process whose forks act for it under its role (serve
 * and the process of each of its requests): a kill at a point one of
 * them reaches kills this process first, then the fork, as a kill of
 * the whole of it would.  A fork that names a role of its own
 * (dsec_crash_role) leaves the group. */
void dsec_crash_group(const char *role);

#endif
