#include <config.h>

#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "crash.h"
#include "fsutil.h"
#include "sandbox.h"

struct dsec_conn {
  int fd;
  char *buf;
  size_t len, cap;
};

int dsec_conn_open(const char *id, struct dsec_conn **out,
                   struct dsec_error **err)
{
  _cleanup_free_ char *run = dsec_sandbox_run_dir(id);
  _cleanup_close_ int dfd = open(run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  struct dsec_conn *c;
  int fd;

  if (dfd < 0)
    return dsec_fail(err, errno, "sandbox %s is not running (no %s)", id, run);
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return dsec_fail(err, errno, "socket");
  /* through the directory's fd: any $DSEC_RUN length fits sun_path */
  snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/ctl.sock", dfd);
  while (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
    int e = errno;
    if (e == EINTR)
      continue;
    close(fd);
    return dsec_fail(err, e, "cannot reach the supervisor of %s", id);
  }
  c = xzalloc(sizeof *c);
  c->fd = fd;
  *out = c;
  return 0;
}

void dsec_conn_close(struct dsec_conn *c)
{
  if (!c)
    return;
  close(c->fd);
  free(c->buf);
  free(c);
}

int dsec_conn_send(struct dsec_conn *c, json_t *req, struct dsec_error **err)
{
  if (dsec_json_write_line(c->fd, req, err) < 0)
    return dsec_error_wrap(err, "cannot send the request");
  return 0;
}

int dsec_conn_send_fd(struct dsec_conn *c, json_t *req, int fd,
                      struct dsec_error **err)
{
  _cleanup_free_ char *text = json_dumps(req, JSON_COMPACT);
  _cleanup_free_ char *line = text ? xasprintf("%s\n", text) : NULL;
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int))];
  } cb;
  struct iovec iov;
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = cb.b, .msg_controllen = sizeof cb.b };
  struct cmsghdr *h;
  size_t len;
  ssize_t n;

  if (!line)
    return dsec_fail(err, ENOMEM, "cannot send the request");
  len = strlen(line);
  iov = (struct iovec){ line, len };
  memset(&cb, 0, sizeof cb);
  h = CMSG_FIRSTHDR(&mh);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &fd, sizeof fd);
  do
    n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return dsec_fail(err, errno, "cannot send the request");
  /* the rest, if the socket took only part */
  if ((size_t) n < len && dsec_write_all(c->fd, line + n, len - (size_t) n,
                                         err) < 0)
    return dsec_error_wrap(err, "cannot send the request");
  return 0;
}

json_t *dsec_conn_recv(struct dsec_conn *c, struct dsec_error **err)
{
  for (;;) {
    char *nl = c->buf ? memchr(c->buf, '\n', c->len) : NULL;
    ssize_t n;
    if (nl) {
      size_t linelen = (size_t) (nl - c->buf);
      /* output may hold NUL bytes (escaped as \u0000) */
      json_error_t jerr;
      json_t *j = json_loadb(c->buf, linelen, JSON_ALLOW_NUL, &jerr);
      if (!j)
        dsec_fail(err, 0, "supervisor answer: invalid JSON: %s", jerr.text);
      memmove(c->buf, nl + 1, c->len - linelen - 1);
      c->len -= linelen + 1;
      return j;
    }
    if (c->cap - c->len < 65536) {
      c->cap = c->cap ? c->cap * 2 : 131072;
      c->buf = xrealloc(c->buf, c->cap);
    }
    n = read(c->fd, c->buf + c->len, c->cap - c->len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      dsec_fail(err, n < 0 ? errno : 0,
                "the supervisor closed the connection (did the sandbox end?)");
      return NULL;
    }
    c->len += (size_t) n;
  }
}

bool dsec_conn_pending(const struct dsec_conn *c)
{
  return c->buf && memchr(c->buf, '\n', c->len);
}

int dsec_conn_fd(const struct dsec_conn *c)
{
  return c->fd;
}

json_t *dsec_conn_call(struct dsec_conn *c, json_t *req,
                       struct dsec_error **err)
{
  if (dsec_conn_send(c, req, err) < 0)
    return NULL;
  dsec_crash_point("request sent");
  return dsec_conn_recv(c, err);
}
