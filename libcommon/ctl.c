/* The supervisor's side of the exec socket. */
#include <config.h>

#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "exitcodes.h"
#include "utils.h"

#define REQUEST_MAX (64u << 20)

int dsec_ctl_listen(int run_fd, const char *run_dir, struct dsec_error **err)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

  if (fd < 0)
    return dsec_fail(err, errno, "socket");
  /* through the directory's fd: a long $DSEC_RUN still fits sun_path */
  snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/ctl.sock",
           run_fd);
  unlinkat(run_fd, "ctl.sock", 0);
  if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 ||
      fchmodat(run_fd, "ctl.sock", 0600, 0) < 0 || listen(fd, 128) < 0) {
    int e = errno;
    close(fd);
    return dsec_fail(err, e, "cannot listen on %s/ctl.sock", run_dir);
  }
  return fd;
}

int dsec_ctl_accept(int lsock)
{
  int fd = accept4(lsock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  struct timeval tv = { 10, 0 };
  if (fd >= 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

int dsec_ctl_read(struct dsec_ctl_client *c)
{
  for (;;) {
    ssize_t n;
    if (c->len + 65536 > c->cap) {
      if (c->cap > REQUEST_MAX) {
        dsec_ctl_reply_error(c->fd, "request too large", DSEC_EXIT_INPUT);
        return -1;
      }
      c->cap = c->cap ? c->cap * 2 : 131072;
      c->in = xrealloc(c->in, c->cap);
    }
    {
      /* a copy's pipe comes with its request */
      union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * 4)];
      } cb;
      struct iovec iov = { c->in + c->len, c->cap - c->len };
      struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                           .msg_control = cb.b, .msg_controllen = sizeof cb.b };
      n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
      for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; h;
           h = CMSG_NXTHDR(&mh, h)) {
        size_t nf;
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
          continue;
        nf = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nf; i++) {
          int fd;
          memcpy(&fd, CMSG_DATA(h) + i * sizeof fd, sizeof fd);
          if (c->nfds < ARRAY_SIZE(c->fds))
            c->fds[c->nfds++] = fd;
          else
            close(fd);
        }
      }
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return 0;
    if (n <= 0) {
      c->eof = true;
      return 0;
    }
    c->len += (size_t) n;
  }
}

int dsec_ctl_take_fd(struct dsec_ctl_client *c)
{
  int fd;
  if (c->nfds == 0)
    return -1;
  fd = c->fds[0];
  memmove(c->fds, c->fds + 1, sizeof *c->fds * --c->nfds);
  return fd;
}

void dsec_ctl_close_fds(struct dsec_ctl_client *c)
{
  while (c->nfds > 0)
    close(c->fds[--c->nfds]);
}

int dsec_ctl_next(struct dsec_ctl_client *c, json_t **req)
{
  for (;;) {
    char *nl = c->in ? memchr(c->in, '\n', c->len) : NULL;
    json_error_t jerr;
    size_t linelen;
    json_t *r;

    if (!nl)
      return 0;
    linelen = (size_t) (nl - c->in);
    r = json_loadb(c->in, linelen, JSON_REJECT_DUPLICATES, &jerr);
    memmove(c->in, nl + 1, c->len - linelen - 1);
    c->len -= linelen + 1;
    if (linelen == 0)
      continue;
    if (!r || !json_is_object(r)) {
      _cleanup_free_ char *msg = xasprintf("invalid request: %s",
                                           r ? "not an object" : jerr.text);
      dsec_ctl_reply_error(c->fd, msg, DSEC_EXIT_INPUT);
      json_decref(r);
      continue;
    }
    *req = r;
    return 1;
  }
}

void dsec_ctl_write(int fd, json_t *rec)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  int fl;
  if (fd < 0)
    return;
  fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  dsec_json_write_line(fd, rec, &e);
  fcntl(fd, F_SETFL, fl);
}

void dsec_ctl_reply_error(int fd, const char *msg, int status)
{
  json_t *r = json_pack("{s:s, s:s, s:i}", "type", "error", "error", msg,
                        "exit_code", status);
  dsec_ctl_write(fd, r);
  json_decref(r);
}

json_t *dsec_ctl_op_error(struct dsec_error *e)
{
  json_t *r = json_pack("{s:s, s:s, s:i}", "type", "error", "error",
                        e ? e->msg : "failed", "exit_code",
                        e && e->status ? e->status : DSEC_EXIT_FAILURE);
  dsec_error_free(e);
  return r;
}

void dsec_supervisor_begin(const char *dir, sigset_t *mask)
{
  signal(SIGPIPE, SIG_IGN);
  sigemptyset(mask);
  sigaddset(mask, SIGCHLD);
  sigaddset(mask, SIGTERM);
  sigaddset(mask, SIGINT);
  sigaddset(mask, SIGHUP);
  sigprocmask(SIG_BLOCK, mask, NULL);
  prctl(PR_SET_NAME, "dsec-supervise");
  dsec_supervisor_stdio(dir);
}

void dsec_supervisor_stdio(const char *dir)
{
  _cleanup_free_ char *log = xasprintf("%s/supervisor.log", dir);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  dup2(null, 0);
  dup2(null, 1);
  dup2(lfd >= 0 ? lfd : null, 2);
  if (lfd >= 0)
    close(lfd);
  close(null);
}

void dsec_supervisor_report(int fd, json_t *msg)
{
  if (fd >= 0) {
    _cleanup_error_ struct dsec_error *e = NULL;
    dsec_json_write_line(fd, msg, &e);
  }
  json_decref(msg);
}
