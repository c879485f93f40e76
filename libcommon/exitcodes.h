/* Exit statuses shared by every dsec program; each man page lists them. */
#ifndef DSEC_EXITCODES_H
#define DSEC_EXITCODES_H

#define DSEC_EXIT_OK 0
#define DSEC_EXIT_FAILURE 1   /* the operation failed */
#define DSEC_EXIT_USAGE 2     /* bad command line */
#define DSEC_EXIT_INPUT 3     /* bad input: spec, archive, manifest, JSON */
#define DSEC_EXIT_SEQUENCE 4  /* exec: a seq that conflicts with the trajectory */

/* exec and run pass the command's own status through and use these for
 * what is not the command's (as env(1), timeout(1) and podman do). */
#define DSEC_EXIT_TIMEOUT 124
#define DSEC_EXIT_INTERNAL 125
#define DSEC_EXIT_CANNOT_EXEC 126
#define DSEC_EXIT_NOT_FOUND 127

#endif
