/* Stream connections multiplexed over one channel (see netmux.h). */
#include <config.h>

#include "netmux.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { F_OPEN = 1, F_DATA = 2, F_CLOSE = 3 };
#define HDR 9
#define FRAME_MAX 65536
#define CONN_OUT_MAX (1u << 20) /* a peer that does not read loses its stream */
#define CHAN_OUT_HIGH (1u << 20) /* past this, connections are not read */
#define BUFFERED_MAX (16u << 20) /* past this, the channel is not read */
#define CONNS_MAX 256

struct buf {
  char *p;
  size_t len, cap;
};

struct conn {
  uint32_t id;
  int fd;
  struct buf out;   /* for fd */
  bool closing;     /* the other side closed: close once out is written */
};

struct mux {
  int chan;
  struct buf in, out; /* from and for the channel */
  struct conn *c[CONNS_MAX];
  size_t n;
  uint32_t next_id;
};

static bool buf_add(struct buf *b, const void *p, size_t len)
{
  if (b->len + len > b->cap) {
    size_t cap = b->cap ? b->cap : 65536;
    char *q;
    while (cap < b->len + len)
      cap *= 2;
    q = realloc(b->p, cap);
    if (!q)
      return false;
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, len);
  b->len += len;
  return true;
}

static void buf_drop(struct buf *b, size_t n)
{
  memmove(b->p, b->p + n, b->len - n);
  b->len -= n;
}

static void put32(unsigned char *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char) (v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
  return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
         (uint32_t) p[3] << 24;
}

static void frame(struct mux *m, int type, uint32_t id, const void *data,
                  size_t len)
{
  unsigned char h[HDR];
  h[0] = (unsigned char) type;
  put32(h + 1, id);
  put32(h + 5, (uint32_t) len);
  if (!buf_add(&m->out, h, HDR) || (len && !buf_add(&m->out, data, len)))
    m->out.len = 0; /* out of memory: the streams break, the VM does not */
}

static struct conn *find(struct mux *m, uint32_t id)
{
  for (size_t i = 0; i < m->n; i++)
    if (m->c[i]->id == id)
      return m->c[i];
  return NULL;
}

static void conn_free(struct mux *m, struct conn *c)
{
  for (size_t i = 0; i < m->n; i++)
    if (m->c[i] == c) {
      m->c[i] = m->c[--m->n];
      break;
    }
  close(c->fd);
  free(c->out.p);
  free(c);
}

static struct conn *conn_add(struct mux *m, int fd, uint32_t id)
{
  struct conn *c;
  if (m->n == CONNS_MAX || !(c = calloc(1, sizeof *c))) {
    close(fd);
    return NULL;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  c->fd = fd;
  c->id = id;
  m->c[m->n++] = c;
  return c;
}

/* Ends a connection from this side: the other is told. */
static void conn_end(struct mux *m, struct conn *c)
{
  frame(m, F_CLOSE, c->id, NULL, 0);
  conn_free(m, c);
}

static void conn_write(struct mux *m, struct conn *c)
{
  while (c->out.len) {
    ssize_t n = write(c->fd, c->out.p, c->out.len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    if (n <= 0) {
      conn_end(m, c);
      return;
    }
    buf_drop(&c->out, (size_t) n);
  }
  if (c->closing)
    conn_free(m, c);
}

static void conn_read(struct mux *m, struct conn *c)
{
  char data[FRAME_MAX];
  ssize_t n = read(c->fd, data, sizeof data);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  if (n <= 0) {
    conn_end(m, c);
    return;
  }
  frame(m, F_DATA, c->id, data, (size_t) n);
}

/* Acts on the whole frames that came in. */
static void chan_frames(struct mux *m, dsec_mux_open_fn on_open, void *ud)
{
  size_t off = 0;
  while (m->in.len - off >= HDR) {
    const unsigned char *h = (const unsigned char *) m->in.p + off;
    uint32_t id = get32(h + 1), len = get32(h + 5);
    struct conn *c;
    if (len > FRAME_MAX) {
      /* not our protocol: drop everything, every stream breaks */
      while (m->n)
        conn_free(m, m->c[0]);
      off = m->in.len;
      break;
    }
    if (m->in.len - off < HDR + len)
      break;
    c = find(m, id);
    if (h[0] == F_OPEN && !c && on_open) {
      int fd = on_open(ud, id);
      if (fd < 0 || !conn_add(m, fd, id))
        frame(m, F_CLOSE, id, NULL, 0);
    } else if (h[0] == F_DATA && c && !c->closing) {
      if (c->out.len + len > CONN_OUT_MAX || !buf_add(&c->out, h + HDR, len))
        conn_end(m, c);
      else
        conn_write(m, c);
    } else if (h[0] == F_CLOSE && c) {
      c->closing = true;
      conn_write(m, c);
    }
    off += HDR + len;
  }
  buf_drop(&m->in, off);
}

/* false when the channel ended (or hung up). */
static bool chan_read(struct mux *m)
{
  char data[FRAME_MAX];
  for (;;) {
    ssize_t n = read(m->chan, data, sizeof data);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return true;
    if (n <= 0)
      return false;
    if (!buf_add(&m->in, data, (size_t) n))
      return false;
  }
}

static bool chan_write(struct mux *m)
{
  while (m->out.len) {
    ssize_t n = write(m->chan, m->out.p, m->out.len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return true;
    if (n <= 0)
      return false;
    buf_drop(&m->out, (size_t) n);
  }
  return true;
}

void dsec_mux_run(int chan, int listen_fd, dsec_mux_open_fn on_open, void *ud,
                  int hup_retry)
{
  struct mux mx = { .chan = chan, .next_id = 1 }, *m = &mx;

  fcntl(chan, F_SETFL, fcntl(chan, F_GETFL) | O_NONBLOCK);
  for (;;) {
    struct pollfd pf[2 + CONNS_MAX];
    struct conn *who[2 + CONNS_MAX];
    nfds_t n = 0;
    bool up = true;
    size_t buffered = m->out.len;

    /* the other side cannot make us hold more than BUFFERED_MAX: past it
     * we stop reading what it sends until the peers have taken theirs */
    for (size_t i = 0; i < m->n; i++)
      buffered += m->c[i]->out.len;
    pf[n++] = (struct pollfd){ chan,
                               (short) ((buffered < BUFFERED_MAX &&
                                         m->out.len < CHAN_OUT_HIGH
                                           ? POLLIN
                                           : 0) |
                                        (m->out.len ? POLLOUT : 0)),
                               0 };
    if (listen_fd >= 0)
      pf[n++] = (struct pollfd){ listen_fd, m->n < CONNS_MAX ? POLLIN : 0, 0 };
    for (size_t i = 0; i < m->n; i++) {
      struct conn *c = m->c[i];
      short ev = (short) ((m->out.len < CHAN_OUT_HIGH && !c->closing ? POLLIN : 0) |
                          (c->out.len ? POLLOUT : 0));
      who[n] = c;
      pf[n++] = (struct pollfd){ c->fd, ev, 0 };
    }
    if (poll(pf, n, -1) < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    if (pf[0].revents & (POLLIN | POLLHUP | POLLERR))
      up = chan_read(m);
    if (up && (pf[0].revents & POLLOUT))
      up = chan_write(m);
    if (!up) {
      /* every stream goes with the channel */
      while (m->n)
        conn_free(m, m->c[0]);
      m->in.len = m->out.len = 0;
      if (!hup_retry)
        break;
      usleep(50000); /* a virtio port whose host is away: wait for it */
      continue;
    }
    chan_frames(m, on_open, ud);
    if (listen_fd >= 0 && (pf[1].revents & POLLIN)) {
      int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0 && conn_add(m, fd, m->next_id))
        frame(m, F_OPEN, m->next_id++, NULL, 0);
    }
    /* connections, by pointer: one may end while another is served */
    for (nfds_t i = listen_fd >= 0 ? 2 : 1; i < n; i++) {
      struct conn *c = who[i];
      bool live = false;
      for (size_t k = 0; k < m->n && !live; k++)
        live = m->c[k] == c;
      if (!live || !pf[i].revents)
        continue;
      if (pf[i].revents & POLLOUT) {
        conn_write(m, c);
        live = false;
        for (size_t k = 0; k < m->n && !live; k++)
          live = m->c[k] == c;
        if (!live)
          continue;
      }
      if (pf[i].revents & (POLLIN | POLLHUP | POLLERR))
        conn_read(m, c);
    }
    chan_write(m);
  }
  free(m->in.p);
  free(m->out.p);
}
