/* The supervisor's side of a sandbox's exec socket ($DSEC_RUN/<id>/
 * ctl.sock), shared by the container and VM supervisors: listening,
 * accepting, reading requests (one JSON object per line) and writing
 * answers whole. */
#ifndef DSEC_CTL_H
#define DSEC_CTL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "json.h"

/* A connected client: what it sent that is not consumed yet. */
struct dsec_ctl_client {
  int fd;
  char *in;
  size_t len, cap;
  bool eof;
  int fds[4];     /* descriptors the client passed (SCM_RIGHTS), oldest first */
  size_t nfds;
};

/* Listens on run_dir/ctl.sock (run_fd is that directory, so a long path
 * still fits sun_path; run_dir names it in errors).  Non-blocking. */
int dsec_ctl_listen(int run_fd, const char *run_dir, struct dsec_error **err);

/* The next client, non-blocking, or -1 when none waits.  Its answers
 * are written whole: one that stops reading for 10 s loses them. */
int dsec_ctl_accept(int lsock);

/* Reads what the client sent.  0, or -1 when its request grew past
 * 64 MiB (answered; the caller closes it).  Sets eof at its end. */
int dsec_ctl_read(struct dsec_ctl_client *c);

/* The oldest descriptor the client passed (taken), or -1. */
int dsec_ctl_take_fd(struct dsec_ctl_client *c);
/* Closes the descriptors it passed that no request took. */
void dsec_ctl_close_fds(struct dsec_ctl_client *c);

/* The next request (1, *req a new object), none complete yet (0).  A line
 * that is no JSON object is answered with an error here and skipped. */
int dsec_ctl_next(struct dsec_ctl_client *c, json_t **req);

/* Writes rec as one line, blocking (within SO_SNDTIMEO); not stolen. */
void dsec_ctl_write(int fd, json_t *rec);
void dsec_ctl_reply_error(int fd, const char *msg, int status);

/* An error answer from e (stolen; NULL says "failed"); new. */
json_t *dsec_ctl_op_error(struct dsec_error *e);

/* A supervisor's start: SIGPIPE ignored, SIGCHLD, SIGTERM, SIGINT and
 * SIGHUP blocked (*mask, for a signalfd), named dsec-supervise, its
 * standard streams set as below. */
void dsec_supervisor_begin(const char *dir, sigset_t *mask);

/* The supervisor's standard streams: /dev/null, and stderr appended to
 * dir/supervisor.log. */
void dsec_supervisor_stdio(const char *dir);

/* Writes msg (stolen) as the supervisor's one report line to the creator
 * (fd -1: nobody listens any more). */
void dsec_supervisor_report(int fd, json_t *msg);

#endif
