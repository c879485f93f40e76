/* The supervisor core shared by every backend: see engine.h. */
#include <config.h>

#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>


#include "cgroup.h"
#include "copy.h"
#include "crash.h"
#include "digest.h"
#include "fsutil.h"
#include "log.h"
#include "process.h"
#include "sandbox.h"
#include "store.h"

static double now_ms(void) { return dsec_now_ms(); }

/* ---- the process */

void dsec_engine_init(struct dsec_engine *e, struct dsec_container_opts *o,
                      const struct dsec_backend_ops *ops, void *backend)
{
  struct dsec_error *err = NULL;

  memset(e, 0, sizeof *e);
  e->id = o->id;
  e->ops = ops;
  e->b = backend;
  e->spec_json = o->spec;
  e->dir = dsec_sandbox_dir(o->id);
  e->run = dsec_sandbox_run_dir(o->id);
  e->epfd = e->sfd = e->lsock = e->run_fd = e->events_fd = -1;
  e->service_log_fd = e->world_pidfd = -1;
  e->traj.fd = -1;
  e->ready_fd = o->ready_fd;
  e->start_ms = e->last_activity_ms = now_ms();

  dsec_supervisor_begin(e->dir, &e->mask);
  /* the event loop's, made now: a backend adds what it watches as it
   * sets the sandbox up */
  e->epfd = epoll_create1(EPOLL_CLOEXEC);
  e->sfd = signalfd(-1, &e->mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (e->epfd < 0 || e->sfd < 0) {
    dsec_fail(&err, errno, "cannot set up the event loop");
    dsec_engine_fail(e, err);
  }
  {
    _cleanup_free_ char *title = xasprintf("dsec-supervise %s", o->id);
    dsec_set_cmdline(title);
  }
  if (dsec_spec_parse(o->spec, &e->spec, &err) < 0)
    dsec_engine_fail(e, err);
  e->base_env = dsec_exec_base_env(o->spec, o->environment, e->spec->uid);
  {
    _cleanup_free_ char *tp = xasprintf("%s/trajectory.jsonl", e->dir);
    _cleanup_free_ char *ep = xasprintf("%s/events.jsonl", e->dir);
    e->traj.fd = open(tp, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    e->events_fd = open(ep, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (e->traj.fd < 0 || e->events_fd < 0) {
      dsec_fail(&err, errno, "cannot open the sandbox's files");
      dsec_engine_fail(e, err);
    }
    dsec_traj_load(&e->traj);
  }
  {
    /* the budget counts what the file holds and what earlier supervisors
     * of this sandbox dropped */
    _cleanup_json_ json_t *old = dsec_sandbox_state_read(o->id, NULL);
    e->audit = dsec_audit_new(e->events_fd, e->id, o->spec, old);
  }
}

_Noreturn void dsec_engine_fail(struct dsec_engine *e, struct dsec_error *err)
{
  dsec_supervisor_report(e->ready_fd,
                         json_pack("{s:b, s:s, s:i, s:i}", "ok", false, "error",
                                   err ? err->msg : "unknown error", "status",
                                   err ? err->status : 1, "errno",
                                   err ? err->errnum : 0));
  if (e->ops && e->ops->stop)
    e->ops->stop(e);
  if (e->cg)
    dsec_cgroup_destroy(e->cg, NULL);
  _exit(1);
}

/* ---- the event loop's bookkeeping */

int dsec_engine_watch(struct dsec_engine *e, int fd, uint32_t events,
                      struct dsec_watch *w)
{
  struct epoll_event ev = { .events = events, .data.ptr = w };
  return epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev);
}

void dsec_engine_bury(struct dsec_engine *e, void *p)
{
  e->graves = xrealloc(e->graves, sizeof *e->graves * (e->ngraves + 1));
  e->graves[e->ngraves++] = p;
}

void dsec_engine_event(struct dsec_engine *e, json_t *ev)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  dsec_audit_append(e->audit, ev, &err);
  json_decref(ev);
}

void dsec_engine_event_first(struct dsec_engine *e, json_t *ev,
                             enum dsec_audit_kind kind, const void *key,
                             size_t len)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  dsec_audit_append_first(e->audit, ev, kind, key, len, &err);
  json_decref(ev);
}

void dsec_engine_write_state(struct dsec_engine *e)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  /* what the audit log holds and dropped: a later supervisor of this
   * sandbox goes on counting from here */
  json_object_set_new(e->state, "audit", dsec_audit_status(e->audit));
  if (dsec_sandbox_state_write(e->id, e->state, &err) < 0)
    dsec_warn("cannot write state: %s", err->msg);
}

struct dsec_job *dsec_engine_job(struct dsec_engine *e, uint64_t xid)
{
  for (size_t i = 0; i < e->njobs; i++)
    if (e->jobs[i]->xid == xid)
      return e->jobs[i];
  return NULL;
}

/* ---- clients */

static void client_next(struct dsec_engine *e, struct dsec_client *cl);

/* An answer goes whole: the socket blocks for it (SO_SNDTIMEO bounds a
 * client that stops reading to 10 s). */
static void client_write(struct dsec_client *cl, json_t *rec)
{
  if (cl)
    dsec_ctl_write(cl->c.fd, rec);
}

static void reply_error(struct dsec_client *cl, const char *msg, int status)
{
  if (cl)
    dsec_ctl_reply_error(cl->c.fd, msg, status);
}

static void client_close(struct dsec_engine *e, struct dsec_client *cl)
{
  for (size_t i = 0; i < e->nclients; i++)
    if (e->clients[i] == cl) {
      e->clients[i] = e->clients[--e->nclients];
      break;
    }
  if (cl->job)
    cl->job->cl = NULL; /* the job finishes and is recorded all the same */
  if (cl->c.fd >= 0)
    close(cl->c.fd);
  cl->c.fd = -1;
  dsec_ctl_close_fds(&cl->c);
  cl->w.dead = true;
  free(cl->c.in);
  cl->c.in = NULL;
  dsec_engine_bury(e, cl);
}

static void client_readable(struct dsec_engine *e, void *p, uint32_t events)
{
  struct dsec_client *cl = p;
  (void) events;
  if (dsec_ctl_read(&cl->c) < 0) {
    client_close(e, cl);
    return;
  }
  if (cl->c.eof)
    epoll_ctl(e->epfd, EPOLL_CTL_DEL, cl->c.fd, NULL);
  client_next(e, cl);
}

static void accept_clients(struct dsec_engine *e, void *p, uint32_t events)
{
  (void) p, (void) events;
  for (;;) {
    int fd = dsec_ctl_accept(e->lsock);
    struct dsec_client *cl;
    if (fd < 0)
      return;
    cl = xzalloc(sizeof *cl);
    cl->c.fd = fd;
    cl->w = (struct dsec_watch){ client_readable, cl, false };
    e->clients = xrealloc(e->clients, sizeof *e->clients * (e->nclients + 1));
    e->clients[e->nclients++] = cl;
    dsec_engine_watch(e, fd, EPOLLIN, &cl->w);
  }
}

/* ---- execs */

#define COPY_PIPE_SIZE (1 << 20)

static void session_output(struct dsec_session *s, int no, const char *buf,
                           size_t n);
static void copy_out_data(struct dsec_job *j, const char *buf, size_t n);
static bool copy_out_tee(struct dsec_capture *c);
static void copy_resume(struct dsec_engine *e, struct dsec_job *j);

/* What a world's service writes, in service.log within its budget; what
 * goes beyond is counted. */
static void service_log(struct dsec_engine *e, const char *buf, size_t n)
{
  if (e->service_log_fd < 0)
    return;
  if (e->service_log_bytes < DSEC_SERVICE_LOG_MAX) {
    size_t w = n;
    if (e->service_log_bytes + w > DSEC_SERVICE_LOG_MAX)
      w = (size_t) (DSEC_SERVICE_LOG_MAX - e->service_log_bytes);
    dsec_write_all(e->service_log_fd, buf, w, NULL);
  }
  e->service_log_bytes += n;
}

/* Output of an exec: kept within the cap; a streaming client gets what
 * the cap keeps, no more (the result counts the rest).  A session's
 * shell's output is its commands'. */
static void capture_add(struct dsec_job *j, struct dsec_capture *c,
                        const char *buf, size_t n)
{
  uint64_t before = c->k.total;
  if (j->daemon) {
    /* a service's output goes to its log, kept to the budget */
    service_log(j->daemon, buf, n);
    return;
  }
  if (j->shell) {
    if (j->sess)
      session_output(j->sess, c == &j->err, buf, n);
    return;
  }
  if (j->copy && c == &j->out) {
    copy_out_data(j, buf, n);
    return;
  }
  dsec_guest_capture_add(&c->k, buf, n, (size_t) j->cap);
  /* a copy's job streams for a VM's agent, never to the client */
  if (j->stream && j->cl && !j->copy && n > 0 && before < j->cap) {
    size_t send = (uint64_t) n < j->cap - before ? n : (size_t) (j->cap - before);
    json_t *m = dsec_exec_output(c->name, buf, send);
    client_write(j->cl, m);
    json_decref(m);
  }
}

/* Closes fd, out of the epoll set first: a closed descriptor leaves the
 * set only once no process has it, and a child forked meanwhile (an
 * exclusive exec's, until it closes what it inherited) may: its events
 * would then come for a watch already freed. */
static void close_watched(struct dsec_engine *e, int fd)
{
  epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL);
  close(fd);
}

static void capture_read(struct dsec_engine *e, struct dsec_capture *c)
{
  static char buf[1u << 18];
  if (c->fd < 0)
    return;
  if (c->job->copy && c == &c->job->out && copy_out_tee(c))
    return;
  for (;;) {
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0 || errno != EAGAIN) {
        close_watched(e, c->fd);
        c->fd = -1;
      }
      return;
    }
    capture_add(c->job, c, buf, (size_t) n);
  }
}

static void capture_readable(struct dsec_engine *e, void *p, uint32_t events)
{
  (void) e, (void) events;
  capture_read(e, p);
}

static void stdin_writable(struct dsec_engine *e, void *p, uint32_t events)
{
  struct dsec_job *j = p;
  (void) events;
  while (j->stdin_off < j->stdin_len) {
    ssize_t n = write(j->in_fd, j->stdin_data + j->stdin_off,
                      j->stdin_len - j->stdin_off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    if (n < 0)
      break; /* EPIPE: the command does not read its input */
    j->stdin_off += (size_t) n;
  }
  epoll_ctl(e->epfd, EPOLL_CTL_DEL, j->in_fd, NULL);
  j->in_armed = false;
  if (j->keep_stdin && j->stdin_off == j->stdin_len && !j->in_eof) {
    /* all written: more may come (job_input) */
    j->stdin_off = j->stdin_len = 0;
    if (j->copy)
      copy_resume(e, j);
    return;
  }
  close(j->in_fd);
  j->in_fd = -1;
  j->w_in.dead = true;
}

/* No more input for a job that kept its stdin open: closed once what
 * waits is written. */
static void job_input(struct dsec_engine *e, struct dsec_job *j,
                      const char *buf, size_t len);

static void job_input_end(struct dsec_engine *e, struct dsec_job *j)
{
  if (j->in_eof)
    return;
  j->in_eof = true;
  if (e->ops->input) {
    e->ops->input(e, j, NULL, 0);
    return;
  }
  if (j->tty) {
    /* the end of a terminal's input, as a person says it: ^D (typed
     * once what waits is; kept until the terminal comes) */
    job_input(e, j, "\004", 1);
    return;
  }
  if (!j->in_armed && j->in_fd >= 0) {
    close(j->in_fd);
    j->in_fd = -1;
  }
}

/* What waits to be written to a job's stdin (or, through ops->input, to
 * be taken by it). */
static size_t job_backlog(struct dsec_engine *e, struct dsec_job *j)
{
  return e->ops->input ? (size_t) j->in_flight : j->stdin_len - j->stdin_off;
}

/* More input for a job that keeps its stdin open (a session's shell). */
static void job_input(struct dsec_engine *e, struct dsec_job *j,
                      const char *buf, size_t len)
{
  if (e->ops->input) {
    j->in_flight += len;
    e->ops->input(e, j, buf, len);
    return;
  }
  if (j->in_fd < 0 && !(j->tty && !j->tty_up))
    return; /* the shell is gone: its end answers */
  if (j->stdin_off > 0 && j->stdin_off == j->stdin_len)
    j->stdin_off = j->stdin_len = 0;
  j->stdin_data = xrealloc(j->stdin_data, j->stdin_len + len);
  memcpy(j->stdin_data + j->stdin_len, buf, len);
  j->stdin_len += len;
  if (j->in_fd < 0)
    return; /* a terminal still to come: typed when it does */
  if (!j->in_armed) {
    j->w_in = (struct dsec_watch){ stdin_writable, j, false };
    j->in_armed = dsec_engine_watch(e, j->in_fd, EPOLLOUT, &j->w_in) == 0;
  }
}

void dsec_job_pipes(struct dsec_engine *e, struct dsec_job *j, int out,
                    int err, int in)
{
  const char *data = json_string_value(json_object_get(j->req, "stdin"));
  size_t len = data ? strlen(data) : 0;

  j->out.fd = out;
  j->err.fd = err;
  if (j->copy) {
    /* a copy's stream: fewer, larger reads and writes */
    fcntl(j->keep_stdin ? in : out, F_SETPIPE_SZ, COPY_PIPE_SIZE);
  }
  fcntl(out, F_SETFL, O_NONBLOCK);
  fcntl(err, F_SETFL, O_NONBLOCK);
  j->out.w = (struct dsec_watch){ capture_readable, &j->out, false };
  j->err.w = (struct dsec_watch){ capture_readable, &j->err, false };
  dsec_engine_watch(e, out, EPOLLIN, &j->out.w);
  dsec_engine_watch(e, err, EPOLLIN, &j->err.w);
  if (j->tty) {
    /* the terminal's master comes later (dsec_job_tty): input goes there */
    close(in);
    if (len > 0) {
      bool nl = data[len - 1] == '\n';
      j->stdin_data = xmalloc(len + 2);
      memcpy(j->stdin_data, data, len);
      /* then the end of input, as a terminal says it: ^D at a line's
       * start (a second one ends a partial line first) */
      j->stdin_data[len] = j->stdin_data[len + 1] = '\004';
      j->stdin_len = len + (nl ? 1 : 2);
    }
  } else if (j->keep_stdin) {
    j->in_fd = in;
    fcntl(in, F_SETFL, O_NONBLOCK);
  } else if (len > 0) {
    j->stdin_data = xmalloc(len);
    memcpy(j->stdin_data, data, len);
    j->stdin_len = len;
    j->in_fd = in;
    fcntl(in, F_SETFL, O_NONBLOCK);
    j->w_in = (struct dsec_watch){ stdin_writable, j, false };
    dsec_engine_watch(e, in, EPOLLOUT, &j->w_in);
  } else
    close(in);
}

void dsec_job_output(struct dsec_engine *e, struct dsec_job *j, int stream,
                     const char *buf, size_t len, uint64_t total)
{
  struct dsec_capture *c = stream == 2 ? &j->err : &j->out;
  (void) e;
  capture_add(j, c, buf, len);
  if (total > c->k.total)
    c->k.total = total;
}

void dsec_job_tty(struct dsec_engine *e, struct dsec_job *j, int fd,
                  int slave)
{
  j->tty_up = true;
  if (j->tty_slave >= 0)
    close(j->tty_slave);
  j->tty_slave = slave;
  if (j->out.fd >= 0) {
    epoll_ctl(e->epfd, EPOLL_CTL_DEL, j->out.fd, NULL);
    close(j->out.fd);
  }
  fcntl(fd, F_SETFL, O_NONBLOCK);
  j->out.fd = fd;
  j->out.w = (struct dsec_watch){ capture_readable, &j->out, false };
  dsec_engine_watch(e, fd, EPOLLIN, &j->out.w);
  if (j->in_fd >= 0) {
    if (j->in_armed)
      epoll_ctl(e->epfd, EPOLL_CTL_DEL, j->in_fd, NULL);
    close(j->in_fd);
    j->in_armed = false;
  }
  j->in_fd = -1;
  if (j->stdin_len > j->stdin_off || j->keep_stdin) {
    j->in_fd = dup(fd);
    if (j->in_fd >= 0 && j->stdin_len > j->stdin_off) {
      j->w_in = (struct dsec_watch){ stdin_writable, j, false };
      j->in_armed = dsec_engine_watch(e, j->in_fd, EPOLLOUT, &j->w_in) == 0;
    }
  }
  /* what the input said before the terminal came */
  if (j->keep_stdin && j->stdin_len == j->stdin_off)
    j->stdin_off = j->stdin_len = 0;
}

static void copy_free(struct dsec_engine *e, struct dsec_job *j);

static void job_free(struct dsec_engine *e, struct dsec_job *j)
{
  if (j->copy)
    copy_free(e, j);
  if (e->ops->job_free)
    e->ops->job_free(e, j);
  if (j->out.fd >= 0)
    close_watched(e, j->out.fd);
  if (j->err.fd >= 0)
    close_watched(e, j->err.fd);
  if (j->in_fd >= 0)
    close_watched(e, j->in_fd);
  if (j->tty_slave >= 0)
    close(j->tty_slave);
  j->out.fd = j->err.fd = j->in_fd = j->tty_slave = -1;
  j->out.w.dead = j->err.w.dead = j->w_in.dead = true;
  free(j->out.k.data);
  free(j->err.k.data);
  free(j->stdin_data);
  json_decref(j->req);
  j->out.k.data = j->err.k.data = j->stdin_data = NULL;
  j->req = NULL;
  dsec_engine_bury(e, j);
}

static void session_shell_ended(struct dsec_engine *e, struct dsec_job *j,
                                const struct dsec_job_end *end);
static void copy_finish(struct dsec_engine *e, struct dsec_job *j,
                        const struct dsec_job_end *end);
static bool copy_defer(struct dsec_job *j, const struct dsec_job_end *end);

static void jobs_remove(struct dsec_engine *e, struct dsec_job *j)
{
  for (size_t i = 0; i < e->njobs; i++)
    if (e->jobs[i] == j) {
      e->jobs[i] = e->jobs[--e->njobs];
      break;
    }
}

static void service_ended(struct dsec_engine *e, struct dsec_job *j,
                          const struct dsec_job_end *end);

/* How long a terminal's last output is waited for when a process the
 * command left behind still holds the terminal: TTY_DRAIN_MS after the
 * last that came, TTY_DRAIN_MAX_MS in all. */
#define TTY_DRAIN_MS 20
#define TTY_DRAIN_MAX_MS 200

/* A terminal's last output.  What the command wrote before it ended can
 * still be on its way to the master (the kernel moves it in a worker).
 * While we hold the other end, a read waits for that move and then says
 * EAGAIN, never EIO: so the master is read to EAGAIN first, and only then
 * is our end let go.  It is then read until it says that no process holds
 * the other end any more (EIO), and no longer than the above when one
 * still does: such a process's output after its command ended is not the
 * command's (a terminal's session ends with its command, as ssh's). */
static void tty_drain(struct dsec_engine *e, struct dsec_job *j)
{
  double start = now_ms(), until = start + TTY_DRAIN_MS;
  capture_read(e, &j->out);
  if (j->tty_slave >= 0) {
    close(j->tty_slave);
    j->tty_slave = -1;
  }
  for (;;) {
    struct pollfd p;
    double left;
    uint64_t before = j->out.k.total;
    capture_read(e, &j->out);
    if (j->out.k.total > before) {
      until = now_ms() + TTY_DRAIN_MS;
      if (until > start + TTY_DRAIN_MAX_MS)
        until = start + TTY_DRAIN_MAX_MS;
    }
    left = until - now_ms();
    if (j->out.fd < 0 || left <= 0)
      return;
    p = (struct pollfd){ j->out.fd, POLLIN, 0 };
    if (poll(&p, 1, dsec_ceil_int(left)) == 0)
      return;
  }
}

void dsec_job_finish(struct dsec_engine *e, struct dsec_job *j,
                     const struct dsec_job_end *end)
{
  json_t *res;
  int code, sig = 0;

  if (j->tty_up)
    tty_drain(e, j);
  else
    capture_read(e, &j->out);
  capture_read(e, &j->err);
  if (j->daemon) {
    service_ended(e, j, end);
    return;
  }
  if (j->shell) {
    /* a session's shell: its command (if one ran) answers */
    jobs_remove(e, j);
    e->nshells--;
    session_shell_ended(e, j, end);
    job_free(e, j);
    return;
  }
  if (j->copy) {
    if (!copy_defer(j, end))
      copy_finish(e, j, end);
    return;
  }
  if (end->error)
    code = DSEC_EXIT_INTERNAL;
  else if (j->timed_out)
    code = DSEC_EXIT_TIMEOUT, sig = j->kill_sig ? j->kill_sig : SIGKILL;
  else if (WIFSIGNALED(end->status))
    sig = WTERMSIG(end->status), code = 128 + sig;
  else
    code = WEXITSTATUS(end->status);
  res = dsec_exec_result(e->id, j->seq, code, sig, j->out.k.data, j->out.k.len,
                         j->out.k.total, j->err.k.data, j->err.k.len,
                         j->err.k.total,
                         j->timed_out, end->oom && sig == SIGKILL,
                         now_ms() - j->start);
  if (end->error)
    json_object_set_new(res, "error", json_string(end->error));
  if (end->extra)
    json_object_update(res, end->extra);
  if (e->exec_extra)
    json_object_update_missing(res, e->exec_extra);
  {
    _cleanup_error_ struct dsec_error *err = NULL;
    if (dsec_traj_append(&e->traj, j->seq, j->req, res, !j->volatile_result,
                         &err) < 0) {
      /* the result cannot be made durable: say so instead of lying */
      json_object_set_new(res, "exit_code", json_integer(DSEC_EXIT_INTERNAL));
      json_object_set_new(res, "error",
                          json_string("cannot record the result in the "
                                      "trajectory"));
    }
  }
  dsec_exec_events(e->audit, j->req, res,
                   j->out.k.total - j->out.k.len + j->err.k.total - j->err.k.len);
  /* a session's command has no backend job of its own */
  if (e->ops->exec_done && !j->sess)
    e->ops->exec_done(e, j, res);
  client_write(j->cl, res);
  dsec_crash_point("answered");
  json_decref(res);
  jobs_remove(e, j);
  e->last_activity_ms = now_ms();
  {
    struct dsec_client *cl = j->cl;
    if (cl)
      cl->job = NULL;
    job_free(e, j);
    if (cl)
      client_next(e, cl);
  }
}

/* A request with a seq: replayed from the trajectory when recorded (1),
 * refused when it conflicts (-1), run when it is the next one (0). */
static int traj_check(struct dsec_engine *e, struct dsec_client *cl,
                      json_t *req)
{
  json_int_t *running = xzalloc(sizeof *running * (e->njobs + 1));
  size_t n = 0;
  const char *conflict;
  json_t *out = NULL;
  int r;

  for (size_t i = 0; i < e->njobs; i++)
    if (e->jobs[i]->seq)
      running[n++] = json_integer_value(e->jobs[i]->seq);
  r = dsec_traj_check(&e->traj, req, running, n, &out, &conflict);
  free(running);
  if (r == 0)
    return 0;
  if (r > 0)
    json_object_set_new(out, "id", json_string(e->id));
  client_write(cl, out);
  json_decref(out);
  if (conflict)
    dsec_engine_event(e, json_pack("{s:s, s:O, s:s}", "type",
                                   "replay_conflict", "seq",
                                   json_object_get(req, "seq"), "field",
                                   conflict));
  else if (r > 0) {
    dsec_engine_event(e, json_pack("{s:s, s:O}", "type", "replay", "seq",
                                   json_object_get(req, "seq")));
    e->last_activity_ms = now_ms();
  }
  return r;
}

static struct dsec_job *job_new(struct dsec_engine *e)
{
  struct dsec_job *j = xzalloc(sizeof *j);
  j->xid = ++e->next_xid;
  j->out.fd = j->err.fd = j->in_fd = j->tty_slave = -1;
  j->out.job = j->err.job = j;
  j->out.name = "stdout";
  j->err.name = "stderr";
  return j;
}

static void jobs_add(struct dsec_engine *e, struct dsec_job *j)
{
  e->jobs = xrealloc(e->jobs, sizeof *e->jobs * (e->njobs + 1));
  e->jobs[e->njobs++] = j;
}

/* Hands job j (in e->jobs) to the backend: 0, or -1 and *err. */
static int job_launch(struct dsec_engine *e, struct dsec_job *j,
                      struct dsec_error **err)
{
  json_t *msg;
  int r;

  msg = json_pack("{s:s, s:I, s:O, s:o, s:O, s:i, s:i}", "op", "exec", "xid",
                  (json_int_t) j->xid, "argv", json_object_get(j->req, "cmd"),
                  "env", dsec_exec_env(e->base_env,
                                       json_object_get(j->req, "env")),
                  "cwd", json_object_get(j->req, "workdir"), "uid",
                  (int) e->spec->uid, "gid", (int) e->spec->gid);
  if (j->keep_stdin)
    json_object_set_new(msg, "keep_stdin", json_true());
  if (j->tty) {
    json_t *size = json_object_get(j->req, "tty_size");
    json_object_set_new(msg, "tty", json_true());
    json_object_set(msg, "cols", json_array_get(size, 0));
    json_object_set(msg, "rows", json_array_get(size, 1));
  }
  r = e->ops->exec(e, j, msg, err);
  json_decref(msg);
  return r;
}

/* What a backend's failure to start a command says. */
static char *launch_error(struct dsec_error *err)
{
  return xasprintf("%s%s%s", err ? err->msg : "cannot start the command",
                   err && err->errnum ? ": " : "",
                   err && err->errnum ? strerror(err->errnum) : "");
}

static bool session_command(struct dsec_engine *e, struct dsec_client *cl,
                            struct dsec_job *j, json_t *req);

static void job_start(struct dsec_engine *e, struct dsec_client *cl,
                      json_t *req)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  struct dsec_job *j;
  char *why = NULL;
  double timeout;

  if (dsec_exec_request_check(req, &why) < 0) {
    reply_error(cl, why, DSEC_EXIT_INPUT);
    free(why);
    return;
  }
  if (json_is_true(json_object_get(req, "exclusive")) && e->ops->no_exclusive) {
    reply_error(cl, e->ops->no_exclusive, DSEC_EXIT_INPUT);
    return;
  }
  j = job_new(e);
  j->stream = json_is_true(json_object_get(req, "stream"));
  /* its caller removes the sandbox next (run --rm): a sync would only
   * make durable what is deleted a moment later */
  j->volatile_result = json_is_false(json_object_get(req, "durable"));
  /* what the trajectory records: the request as it will run */
  j->req = dsec_exec_request_record(req, e->spec->workdir, &j->cap);
  j->seq = json_object_get(j->req, "seq");
  if (j->seq && traj_check(e, cl, j->req) != 0) {
    json_decref(j->req);
    free(j);
    return;
  }
  timeout = json_number_value(json_object_get(j->req, "timeout_s"));
  j->cl = cl;
  j->start = now_ms();
  j->deadline = timeout > 0 ? j->start + timeout * 1000 : 0;
  e->last_activity_ms = j->start;
  j->tty = json_is_true(json_object_get(j->req, "tty"));
  if (json_is_true(json_object_get(j->req, "interactive"))) {
    /* its client types and resizes while it runs (client_next) */
    j->interactive = j->keep_stdin = j->stream = true;
  }
  if (json_object_get(j->req, "session")) {
    if (session_command(e, cl, j, req))
      cl->job = j;
    return;
  }
  cl->job = j;
  jobs_add(e, j);
  if (job_launch(e, j, &err) < 0) {
    _cleanup_free_ char *what = launch_error(err);
    struct dsec_job_end end = { .error = what };
    dsec_job_finish(e, j, &end);
  }
}

/* ---- sessions
 *
 * A session is a shell (bash where the image has it, else sh) started on
 * its first command and kept: its working directory, environment,
 * variables and functions persist.  Each command is an exec of the
 * engine's own: recorded, replayed, capped and timed like any other.  It
 * goes to the shell's stdin as one line,
 *
 *   command eval 'LINE' </dev/null; printf '\036dsec:M:%d\036' "$?";
 *   printf '\036dsec:M\036' >&2
 *
 * with a marker M fresh for each command: what comes on the shell's
 * stdout and stderr before the marker is the command's output, and the
 * marker carries its status.  `command eval` keeps a syntax error from
 * ending the shell; </dev/null keeps the command from reading the next
 * ones.  At its deadline the command's processes (the shell's process
 * group) get SIGINT, which the shell itself traps; one that does not end
 * within SESSION_GRACE_MS is killed with the shell, and the answer says
 * the session was lost.  The shell is the sandbox's like everything
 * else: what ran in it earlier can change what a later command does
 * (score with plain execs). */

#define SESSION_GRACE_MS 2000
#define SHELL_CAP ((uint64_t) 1 << 62)

struct dsec_session {
  char *name;
  struct dsec_engine *e;
  struct dsec_job *shell;  /* NULL: lost (its shell ended unasked) */
  struct dsec_job **cmds;  /* [0] runs once started, the rest wait */
  size_t ncmds;
  bool started;            /* cmds[0] went to the shell */
  char mark[33];           /* its marker */
  char *hold[2];           /* what may begin the marker, per stream */
  size_t nhold[2];
  bool seen[2];            /* the marker came on stdout, stderr */
  int status;              /* as the stdout marker says */
  double kill_at;          /* interrupted: killed (and lost) from then */
  bool removed;            /* session rm: out of the table */
  const char *lost;        /* why its shell is gone (static) */
  uint64_t commands;
  char *created;
};

static const char *const shell_argv[] = {
  "/bin/sh", "-c",
  "if command -v bash >/dev/null 2>&1; then exec bash --noprofile --norc; "
  "fi; exec /bin/sh",
};

/* The shell's first input: SIGINT interrupts a command, not the shell
 * (a trap, not an ignored signal: commands get the default). */
static const char shell_prelude[] =
  "trap true INT\n"
  "if [ -n \"${BASH_VERSION-}\" ]; then shopt -s expand_aliases; fi\n";

size_t dsec_engine_busy(const struct dsec_engine *e)
{
  return e->njobs - e->nshells;
}

static struct dsec_session *session_find(struct dsec_engine *e,
                                         const char *name)
{
  for (size_t i = 0; i < e->nsessions; i++)
    if (strcmp(e->sessions[i]->name, name) == 0)
      return e->sessions[i];
  return NULL;
}

/* state.json names the sessions and their shells' jobs: a supervisor
 * that follows this one adopts them (a VM restored with its memory) or
 * reports them lost. */
static void sessions_state_set(struct dsec_engine *e)
{
  json_t *all = json_object();
  for (size_t i = 0; i < e->nsessions; i++) {
    struct dsec_session *s = e->sessions[i];
    json_object_set_new(all, s->name,
                        json_pack("{s:o, s:s}", "xid",
                                  s->shell ? json_integer((json_int_t) s->shell->xid)
                                           : json_null(),
                                  "created", s->created));
  }
  json_object_set_new(e->state, "sessions", all);
}

static void sessions_state(struct dsec_engine *e)
{
  sessions_state_set(e);
  dsec_engine_write_state(e);
}

static void session_free(struct dsec_session *s)
{
  free(s->name);
  free(s->cmds);
  free(s->hold[0]);
  free(s->hold[1]);
  free(s->created);
  free(s);
}

static void session_unlist(struct dsec_engine *e, struct dsec_session *s)
{
  for (size_t i = 0; i < e->nsessions; i++)
    if (e->sessions[i] == s) {
      e->sessions[i] = e->sessions[--e->nsessions];
      break;
    }
  s->removed = true;
  sessions_state(e);
}

static struct dsec_session *session_add(struct dsec_engine *e,
                                        const char *name, const char *created)
{
  struct dsec_session *s = xzalloc(sizeof *s);
  s->name = xstrdup(name);
  s->e = e;
  s->created = created ? xstrdup(created) : dsec_time_rfc3339();
  e->sessions = xrealloc(e->sessions, sizeof *e->sessions * (e->nsessions + 1));
  e->sessions[e->nsessions++] = s;
  return s;
}

/* The shell's job, for session s; workdir and env from req (the first
 * command's). */
static struct dsec_job *shell_job(struct dsec_engine *e, struct dsec_session *s,
                                  uint64_t xid)
{
  struct dsec_job *j = job_new(e);
  if (xid) {
    j->xid = xid;
    if (xid > e->next_xid)
      e->next_xid = xid;
  }
  j->shell = true;
  j->keep_stdin = true;
  j->stream = true;
  j->cap = SHELL_CAP;
  j->sess = s;
  jobs_add(e, j);
  e->nshells++;
  s->shell = j;
  return j;
}

static int session_start_shell(struct dsec_engine *e, struct dsec_session *s,
                               json_t *req, struct dsec_error **err)
{
  struct dsec_job *j = shell_job(e, s, 0);
  json_t *argv = json_array();

  for (size_t i = 0; i < ARRAY_SIZE(shell_argv); i++)
    json_array_append_new(argv, json_string(shell_argv[i]));
  j->req = json_pack("{s:o, s:s, s:O, s:O, s:i, s:I}", "cmd", argv, "stdin",
                     "", "workdir", json_object_get(req, "workdir"), "env",
                     json_object_get(req, "env"), "timeout_s", 0,
                     "max_output_bytes", (json_int_t) SHELL_CAP);
  j->start = now_ms();
  if (job_launch(e, j, err) < 0) {
    jobs_remove(e, j);
    e->nshells--;
    s->shell = NULL;
    j->sess = NULL;
    job_free(e, j);
    return -1;
  }
  job_input(e, j, shell_prelude, sizeof shell_prelude - 1);
  sessions_state(e);
  return 0;
}

/* The line that runs cmd in the shell, with marker m. */
static char *session_line(const char *cmd, const char *m)
{
  size_t n = strlen(cmd), o = 0;
  char *q = xmalloc(n * 4 + 1);
  char *line;
  for (size_t i = 0; i < n; i++) {
    if (cmd[i] == '\'') {
      memcpy(q + o, "'\\''", 4);
      o += 4;
    } else
      q[o++] = cmd[i];
  }
  q[o] = '\0';
  line = xasprintf("command eval '%s' </dev/null; "
                   "printf '\\036dsec:%s:%%d\\036' \"$?\"; "
                   "printf '\\036dsec:%s\\036' >&2\n",
                   q, m, m);
  free(q);
  return line;
}

/* The next command goes to the shell. */
static void session_dispatch(struct dsec_engine *e, struct dsec_session *s)
{
  struct dsec_job *j;
  unsigned char r[16];
  _cleanup_free_ char *line = NULL;
  double timeout;

  if (s->started || s->ncmds == 0 || !s->shell)
    return;
  j = s->cmds[0];
  if (getrandom(r, sizeof r, 0) != (ssize_t) sizeof r) {
    /* not secret, only not to be guessed by chance */
    uint64_t x = (uint64_t) now_ms() * 1000003u ^ j->xid;
    for (size_t i = 0; i < sizeof r; i++, x = x * 6364136223846793005u + 1)
      r[i] = (unsigned char) (x >> 56);
  }
  for (size_t i = 0; i < sizeof r; i++)
    snprintf(s->mark + 2 * i, 3, "%02x", r[i]);
  s->seen[0] = s->seen[1] = false;
  s->status = 0;
  s->started = true;
  s->commands++;
  timeout = json_number_value(json_object_get(j->req, "timeout_s"));
  j->start = now_ms();
  j->deadline = timeout > 0 ? j->start + timeout * 1000 : 0;
  line = session_line(json_string_value(json_array_get(
                        json_object_get(j->req, "cmd"), 0)),
                      s->mark);
  job_input(e, s->shell, line, strlen(line));
}

static void cmd_extra_finish(struct dsec_engine *e, struct dsec_job *j,
                             struct dsec_job_end *end, bool lost)
{
  _cleanup_json_ json_t *extra = json_pack("{s:O}", "session",
                                           json_object_get(j->req, "session"));
  if (lost)
    json_object_set_new(extra, "session_lost", json_true());
  if (end->extra)
    json_object_update(extra, end->extra);
  end->extra = extra;
  dsec_job_finish(e, j, end);
}

/* Both markers came: the command is answered, the next one goes. */
static void session_command_done(struct dsec_engine *e, struct dsec_session *s)
{
  struct dsec_job *j = s->cmds[0];
  struct dsec_job_end end = { .status = (s->status & 0xff) << 8 };

  memmove(s->cmds, s->cmds + 1, sizeof *s->cmds * --s->ncmds);
  s->started = false;
  s->kill_at = 0;
  for (int i = 0; i < 2; i++) {
    free(s->hold[i]);
    s->hold[i] = NULL;
    s->nhold[i] = 0;
  }
  cmd_extra_finish(e, j, &end, false);
  session_dispatch(e, s);
}

/* Bytes of the running command's output (no: 0 stdout, 1 stderr) go to
 * its capture. */
static void cmd_emit(struct dsec_session *s, int no, const char *buf, size_t n)
{
  struct dsec_job *j = s->cmds[0];
  if (n)
    capture_add(j, no ? &j->err : &j->out, buf, n);
}

/* The shell's output: the running command's, up to its marker; between
 * commands (a background process's), dropped. */
static void session_output(struct dsec_session *s, int no, const char *buf,
                           size_t n)
{
  char pat[64];
  size_t plen;
  _cleanup_free_ char *joined = NULL;
  const char *d = buf;
  size_t len = n;

  if (!s->started || s->seen[no])
    return;
  plen = (size_t) snprintf(pat, sizeof pat, "\036dsec:%s", s->mark);
  if (s->nhold[no]) {
    joined = xmalloc(s->nhold[no] + n);
    memcpy(joined, s->hold[no], s->nhold[no]);
    memcpy(joined + s->nhold[no], buf, n);
    d = joined;
    len = s->nhold[no] + n;
    free(s->hold[no]);
    s->hold[no] = NULL;
    s->nhold[no] = 0;
  }
  while (len > 0) {
    const char *at = memmem(d, len, pat, plen);
    size_t keep = 0;
    if (!at) {
      /* what may begin the marker waits for the next read */
      for (size_t k = len < plen - 1 ? len : plen - 1; k > 0; k--)
        if (memcmp(d + len - k, pat, k) == 0) {
          keep = k;
          break;
        }
      cmd_emit(s, no, d, len - keep);
      if (keep) {
        s->hold[no] = xmalloc(keep);
        memcpy(s->hold[no], d + len - keep, keep);
        s->nhold[no] = keep;
      }
      return;
    }
    {
      const char *t = at + plen, *end = d + len;
      const char *close = NULL;
      bool ok = false;
      int status = 0;
      if (no == 1) {
        close = t < end ? t : NULL;
        ok = close && *close == '\036';
      } else if (t < end) {
        close = memchr(t, '\036', (size_t) (end - t));
        if (close && *t == ':' && close - t >= 2 && close - t <= 4) {
          ok = true;
          for (const char *p = t + 1; p < close; p++)
            if (*p < '0' || *p > '9')
              ok = false;
            else
              status = status * 10 + (*p - '0');
        }
      }
      if (!close && end - t < 8) {
        /* the marker's end is still to come */
        cmd_emit(s, no, d, (size_t) (at - d));
        s->nhold[no] = (size_t) (end - at);
        s->hold[no] = xmalloc(s->nhold[no]);
        memcpy(s->hold[no], at, s->nhold[no]);
        return;
      }
      if (!ok) {
        /* not the marker after all: output, and look on */
        cmd_emit(s, no, d, (size_t) (at - d) + 1);
        len -= (size_t) (at - d) + 1;
        d = at + 1;
        continue;
      }
      cmd_emit(s, no, d, (size_t) (at - d));
      s->seen[no] = true;
      if (no == 0)
        s->status = status;
      /* what follows is a background process's: dropped */
      if (s->seen[0] && s->seen[1])
        session_command_done(s->e, s);
      return;
    }
  }
}

/* The shell of a session ended: the command it ran (if any) answers with
 * the shell's status and session_lost; waiting ones are refused; the
 * session is gone.  Ended with no command running, it stays listed as
 * lost until a command or session rm learns of it. */
static void session_shell_ended(struct dsec_engine *e, struct dsec_job *j,
                                const struct dsec_job_end *end)
{
  struct dsec_session *s = j->sess;
  struct dsec_job **cmds;
  size_t n;

  j->sess = NULL;
  if (!s)
    return;
  s->shell = NULL;
  if (s->ncmds == 0 && !s->removed) {
    s->lost = "its shell ended";
    dsec_engine_event(e, json_pack("{s:s, s:s, s:s}", "type", "session_lost",
                                   "session", s->name, "cause", s->lost));
    sessions_state(e);
    return;
  }
  cmds = s->cmds;
  n = s->ncmds;
  s->cmds = NULL;
  s->ncmds = 0;
  if (!s->removed)
    session_unlist(e, s);
  for (size_t i = 0; i < n; i++) {
    struct dsec_job *c = cmds[i];
    if (i == 0 && s->started) {
      struct dsec_job_end ce = *end;
      for (int k = 0; k < 2; k++)
        if (s->nhold[k] && !s->seen[k])
          capture_add(c, k ? &c->err : &c->out, s->hold[k], s->nhold[k]);
      cmd_extra_finish(e, c, &ce, true);
    } else {
      struct dsec_client *cl = c->cl;
      _cleanup_json_ json_t *r =
        json_pack("{s:s, s:s, s:i, s:b, s:s}", "type", "error", "error",
                  "the session's shell ended before the command ran",
                  "exit_code", DSEC_EXIT_INTERNAL, "session_lost", true,
                  "session", s->name);
      client_write(cl, r);
      jobs_remove(e, c);
      if (cl)
        cl->job = NULL;
      job_free(e, c);
      if (cl)
        client_next(e, cl);
    }
  }
  free(cmds);
  session_free(s);
}

/* A command for a session (j, its request recorded; req as sent): queued
 * in its session, started with its shell on first use.  False when it
 * was answered at once. */
static bool session_command(struct dsec_engine *e, struct dsec_client *cl,
                            struct dsec_job *j, json_t *req)
{
  const char *name = json_string_value(json_object_get(j->req, "session"));
  struct dsec_session *s = session_find(e, name);
  _cleanup_error_ struct dsec_error *err = NULL;

  if (s && !s->shell) {
    /* lost: said once, then the name is free again */
    _cleanup_free_ char *msg =
      xasprintf("session %s was lost (%s); its next command starts a new one",
                name, s->lost ? s->lost : "its shell ended");
    json_t *r = json_pack("{s:s, s:s, s:i, s:b, s:s}", "type", "error",
                          "error", msg, "exit_code", DSEC_EXIT_INTERNAL,
                          "session_lost", true, "session", name);
    client_write(cl, r);
    json_decref(r);
    session_unlist(e, s);
    session_free(s);
    goto answered;
  }
  if (s && (json_object_get(req, "workdir") || json_object_size(
              json_object_get(req, "env")) > 0)) {
    reply_error(cl, "a session keeps its own working directory and "
                "environment: cd and export in it (workdir and env apply "
                "to its first command)", DSEC_EXIT_INPUT);
    goto answered;
  }
  j->cl = cl;
  jobs_add(e, j);
  if (!s) {
    s = session_add(e, name, NULL);
    if (session_start_shell(e, s, j->req, &err) < 0) {
      _cleanup_free_ char *what = launch_error(err);
      struct dsec_job_end end = { .error = what };
      session_unlist(e, s);
      session_free(s);
      j->sess = NULL;
      cl->job = j; /* finish answers it and goes on with cl */
      dsec_job_finish(e, j, &end);
      return false;
    }
  }
  j->sess = s;
  s->cmds = xrealloc(s->cmds, sizeof *s->cmds * (s->ncmds + 1));
  s->cmds[s->ncmds++] = j;
  j->deadline = 0; /* from when it starts */
  session_dispatch(e, s);
  return true;

answered:
  json_decref(j->req);
  free(j);
  return false;
}

/* Its deadline passed: SIGINT to the shell's process group (the command's
 * processes; the shell traps it); killed with the shell after a grace. */
static void session_deadline(struct dsec_engine *e, struct dsec_job *j)
{
  struct dsec_session *s = j->sess;
  j->timed_out = true;
  j->kill_sig = SIGINT;
  if (!s || !s->shell)
    return;
  e->ops->signal(e, s->shell, SIGINT);
  s->kill_at = now_ms() + SESSION_GRACE_MS;
}

static json_t *sessions_list(struct dsec_engine *e)
{
  json_t *all = json_array();
  for (size_t i = 0; i < e->nsessions; i++) {
    struct dsec_session *s = e->sessions[i];
    json_array_append_new(all, json_pack("{s:s, s:s, s:s, s:I, s:I}", "name",
                                         s->name, "state",
                                         !s->shell ? "lost"
                                         : s->ncmds ? "busy"
                                                    : "idle",
                                         "created", s->created, "commands",
                                         (json_int_t) s->commands, "queued",
                                         (json_int_t) (s->ncmds > 1
                                                         ? s->ncmds - 1
                                                         : 0)));
  }
  return json_pack("{s:s, s:s, s:o}", "type", "sessions", "id", e->id,
                   "sessions", all);
}

/* session rm: its shell and what runs in it are killed (the command
 * running answers session_lost); the name is free at once. */
static json_t *session_remove(struct dsec_engine *e, const char *name)
{
  struct dsec_session *s = name ? session_find(e, name) : NULL;
  struct dsec_error *err = NULL;

  if (!s) {
    dsec_fail(&err, 0, "no session %s in sandbox %s", name ? name : "",
              e->id);
    return dsec_ctl_op_error(err);
  }
  session_unlist(e, s);
  if (s->shell)
    e->ops->signal(e, s->shell, SIGKILL);
  else
    session_free(s);
  return json_pack("{s:s, s:s, s:s}", "type", "session_removed", "id", e->id,
                   "name", name);
}

/* A new supervisor of this sandbox: the sessions of the one before it
 * live on when the processes did (adopted: the shells' jobs go on under
 * their numbers), else they are lost. */
static void sessions_adopt(struct dsec_engine *e, json_t *old)
{
  const char *name;
  json_t *v;

  json_object_foreach(json_object_get(old, "sessions"), name, v)
  {
    struct dsec_session *s;
    json_int_t xid = json_integer_value(json_object_get(v, "xid"));
    if (!dsec_session_name_ok(name) || session_find(e, name))
      continue;
    s = session_add(e, name,
                    json_string_value(json_object_get(v, "created")));
    if (e->keeps_processes && xid > 0) {
      struct dsec_job *j = shell_job(e, s, (uint64_t) xid);
      j->req = json_pack("{s:[s], s:s}", "cmd", "/bin/sh", "stdin", "");
      j->start = now_ms();
    } else {
      s->lost = "the sandbox was released: its processes ended";
      dsec_engine_event(e, json_pack("{s:s, s:s, s:s}", "type",
                                     "session_lost", "session", name, "cause",
                                     s->lost));
    }
  }
  sessions_state_set(e);
}


/* ---- copies (dsec-run cp)
 *
 * A copy is a job of dsec's own builtins (see guest.h) in the sandbox, as
 * its root: copy_in makes a copy stream at its destination, copy_out
 * writes its source as one.  The stream passes through here between the
 * job and the client's pipe (passed with the request), and is read as it
 * passes: checked, counted, and hashed into the copy's digest (its
 * entries' kinds, modes, paths, link targets and data; not owners or
 * times).  A copy out is bounded by the sandbox's disk limit.  Each copy
 * is a trajectory record; an upload at a recorded seq is read, not made:
 * the same digest replays the recorded answer, another is a conflict. */

#define COPY_BACKLOG_MAX (2u << 20)  /* a copy in waits for the sandbox */
#define COPY_WINDOW_MAX (16u << 20)  /* ... for a guest (acknowledged) */
#define COPY_WRITE_TIMEOUT_MS 60000  /* a client that stops reading */
#define COPY_PEND_MAX (16u << 20)    /* a guest's output kept for it */

struct dsec_copy_job {
  struct dsec_engine *e;
  bool in;                 /* upload */
  int fd;                  /* the client's pipe */
  struct dsec_watch w;
  bool watching, eof, bad;
  struct dsec_copy_parser *p;
  struct dsec_sha256 *h;
  uint64_t bytes, files, limit;
  char why[DSEC_COPY_WHY];
  json_t *recorded;        /* an upload at a recorded seq: its answer */
  bool replayed;           /* a download at a recorded seq: run again */
  /* a copy out whose client reads slower than the job writes: the job's
   * stdout is not read meanwhile (stalled), or, where output comes
   * unasked (a guest's), what waits for the client (pend) */
  bool stalled;
  char *pend;
  size_t npend;
  bool ended;              /* the job ended first: its end, for when the
                            * client has everything */
  struct dsec_job_end end;
  char *end_error;
};

static void h_u32(struct dsec_sha256 *h, uint32_t v)
{
  unsigned char b[4] = { v >> 24, v >> 16, v >> 8, v };
  dsec_sha256_update(h, b, 4);
}

static int hash_entry(void *ud, const struct dsec_copy_entry *en)
{
  struct dsec_copy_job *c = ud;
  unsigned char k = (unsigned char) en->kind;
  dsec_sha256_update(c->h, &k, 1);
  h_u32(c->h, en->mode);
  dsec_sha256_update(c->h, en->path, strlen(en->path) + 1);
  if (en->target)
    dsec_sha256_update(c->h, en->target, strlen(en->target) + 1);
  if (en->kind == 'f')
    c->files++;
  return 0;
}

static int hash_data(void *ud, const char *buf, size_t n)
{
  struct dsec_copy_job *c = ud;
  dsec_sha256_update(c->h, buf, n);
  c->bytes += n;
  if (c->limit && c->bytes > c->limit) {
    snprintf(c->why, sizeof c->why, "the copy is larger than the sandbox's "
             "disk limit");
    return -1;
  }
  return 0;
}

static int hash_file_end(void *ud)
{
  struct dsec_copy_job *c = ud;
  h_u32(c->h, 0xffffffffu);
  return 0;
}

static const struct dsec_copy_ops hash_ops = {
  NULL, hash_entry, hash_data, hash_file_end, NULL,
};

static void copy_watch(struct dsec_copy_job *c, bool on)
{
  if (on == c->watching || c->fd < 0)
    return;
  if (on)
    c->watching = dsec_engine_watch(c->e, c->fd, EPOLLIN, &c->w) == 0;
  else {
    epoll_ctl(c->e->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    c->watching = false;
  }
}

static void copy_free(struct dsec_engine *e, struct dsec_job *j)
{
  struct dsec_copy_job *c = j->copy;
  free(c->pend);
  free(c->end_error);
  c->pend = c->end_error = NULL;
  copy_watch(c, false);
  if (c->fd >= 0)
    close(c->fd);
  c->w.dead = true;
  dsec_copy_parser_free(c->p);
  dsec_sha256_free(c->h);
  json_decref(c->recorded);
  j->copy = NULL;
  dsec_engine_bury(e, c); /* its watch may be in this batch */
}

static void copy_unstall(struct dsec_job *j);

/* The stream went wrong (why says): the job is ended, its answer says so. */
static void copy_refuse(struct dsec_job *j)
{
  struct dsec_copy_job *c = j->copy;
  if (c->bad)
    return;
  c->bad = true;
  copy_watch(c, false);
  /* what the job still writes is read (and dropped) to its end */
  copy_unstall(j);
  free(c->pend);
  c->pend = NULL;
  c->npend = 0;
  if (!c->recorded)
    c->e->ops->signal(c->e, j, SIGKILL);
}

static void copy_answer(struct dsec_engine *e, struct dsec_job *j, json_t *res)
{
  struct dsec_client *cl = j->cl;
  client_write(cl, res);
  json_decref(res);
  jobs_remove(e, j);
  e->last_activity_ms = now_ms();
  if (cl)
    cl->job = NULL;
  job_free(e, j);
  if (cl)
    client_next(e, cl);
}

static json_t *copy_error(struct dsec_job *j, const char *msg, int code)
{
  return json_pack("{s:s, s:s, s:i, s:s, s:O}", "type", "error", "error", msg,
                   "exit_code", code, "direction", j->copy->in ? "in" : "out",
                   "path", json_object_get(j->req, j->copy->in ? "dst" : "src"));
}

/* An upload at a recorded seq, read to its end: the same digest replays
 * the recorded answer, another is a conflict. */
static void copy_replay_done(struct dsec_engine *e, struct dsec_job *j)
{
  struct dsec_copy_job *c = j->copy;
  char digest[DSEC_DIGEST_LEN + 1];
  const char *was = json_string_value(json_object_get(c->recorded, "digest"));
  json_t *res;

  dsec_sha256_final(c->h, digest);
  c->h = NULL;
  if (c->bad || !dsec_copy_parser_done(c->p)) {
    copy_answer(e, j, copy_error(j, c->bad ? c->why : "the copy stream was "
                                 "cut short", DSEC_EXIT_FAILURE));
    return;
  }
  if (!was || strcmp(was, digest) != 0) {
    _cleanup_free_ char *msg =
      xasprintf("seq %lld differs from the recorded copy (digest)",
                (long long) json_integer_value(j->seq));
    dsec_engine_event(e, json_pack("{s:s, s:O, s:s}", "type",
                                   "replay_conflict", "seq", j->seq, "field",
                                   "digest"));
    res = json_pack("{s:s, s:s, s:O, s:i}", "type", "error", "error", msg,
                    "seq", j->seq, "exit_code", DSEC_EXIT_SEQUENCE);
  } else {
    dsec_engine_event(e, json_pack("{s:s, s:O}", "type", "replay", "seq",
                                   j->seq));
    res = json_incref(c->recorded);
    json_object_set_new(res, "id", json_string(e->id));
  }
  copy_answer(e, j, res);
}

static void copy_readable(struct dsec_engine *e, void *p, uint32_t events);

/* The job's stdin took what tee left waiting: the client's pipe again. */
static void copy_tee_writable(struct dsec_engine *e, void *p, uint32_t events)
{
  struct dsec_job *j = p;
  epoll_ctl(e->epfd, EPOLL_CTL_DEL, j->in_fd, NULL);
  j->in_armed = false;
  copy_watch(j->copy, true);
  copy_readable(e, j, events);
}

/* An upload from the client's pipe straight to the job's stdin pipe (a
 * container's): tee(2) gives the job the pages and leaves them to be read
 * here, so the supervisor checks and hashes what the job gets without
 * copying it on.  1: handled; 0: the plain way (read, then write). */
static int copy_tee(struct dsec_engine *e, struct dsec_job *j, char *buf,
                    size_t cap)
{
  struct dsec_copy_job *c = j->copy;

  if (c->recorded || e->ops->input || j->in_fd < 0 || job_backlog(e, j) > 0)
    return 0;
  for (int rounds = 0; rounds < 16; rounds++) {
    ssize_t n = tee(c->fd, j->in_fd, cap, SPLICE_F_NONBLOCK);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN) {
      struct pollfd pf = { j->in_fd, POLLOUT, 0 };
      if (poll(&pf, 1, 0) == 1 && (pf.revents & POLLOUT))
        return 1; /* the client's pipe is empty: wait for it */
      /* the job's is full: wait for it instead */
      copy_watch(c, false);
      j->w_in = (struct dsec_watch){ copy_tee_writable, j, false };
      j->in_armed = dsec_engine_watch(e, j->in_fd, EPOLLOUT, &j->w_in) == 0;
      return 1;
    }
    if (n < 0)
      return 0; /* not pipes after all */
    if (n == 0) {
      copy_watch(c, false);
      c->eof = true;
      job_input_end(e, j);
      return 1;
    }
    /* what the job got, now taken from the client's pipe */
    for (size_t got = 0; got < (size_t) n;) {
      ssize_t r = read(c->fd, buf + got, (size_t) n - got);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0) {
        snprintf(c->why, sizeof c->why, "the copy stream broke: %s",
                 r < 0 ? strerror(errno) : "cut short");
        copy_refuse(j);
        return 1;
      }
      got += (size_t) r;
    }
    if (dsec_copy_parse(c->p, buf, (size_t) n) < 0) {
      copy_refuse(j);
      return 1;
    }
  }
  return 1;
}

/* The client's pipe of an upload: read as the job takes it. */
static void copy_readable(struct dsec_engine *e, void *p, uint32_t events)
{
  struct dsec_job *j = p;
  struct dsec_copy_job *c = j->copy;
  static char buf[1u << 20];
  (void) events;

  if (c->watching && copy_tee(e, j, buf, sizeof buf))
    return;
  for (int rounds = 0; rounds < 16 && c->watching; rounds++) {
    ssize_t n;
    if (!c->recorded &&
        job_backlog(e, j) > (e->ops->input ? COPY_WINDOW_MAX : COPY_BACKLOG_MAX)) {
      copy_watch(c, false); /* stdin_writable resumes it */
      return;
    }
    n = read(c->fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    if (n <= 0) {
      copy_watch(c, false);
      c->eof = true;
      if (c->recorded)
        copy_replay_done(e, j);
      else
        job_input_end(e, j);
      return;
    }
    if (dsec_copy_parse(c->p, buf, (size_t) n) < 0) {
      copy_refuse(j);
      if (c->recorded)
        copy_replay_done(e, j);
      return;
    }
    if (!c->recorded)
      job_input(e, j, buf, (size_t) n);
  }
}

static void copy_resume(struct dsec_engine *e, struct dsec_job *j)
{
  (void) e;
  if (!j->copy->eof && !j->copy->bad)
    copy_watch(j->copy, true);
}

void dsec_job_input_taken(struct dsec_engine *e, struct dsec_job *j,
                          uint64_t n)
{
  j->in_flight -= n < j->in_flight ? n : j->in_flight;
  if (j->copy && !j->copy->watching && j->in_flight <= COPY_WINDOW_MAX / 2)
    copy_resume(e, j);
}

/* Waits for the client's pipe to take more: false when it does not
 * within the timeout (the copy is refused). */
static bool copy_out_wait(struct dsec_job *j)
{
  struct pollfd pf = { j->copy->fd, POLLOUT, 0 };
  int r;
  do
    r = poll(&pf, 1, COPY_WRITE_TIMEOUT_MS);
  while (r < 0 && errno == EINTR);
  if (r > 0 && !(pf.revents & (POLLERR | POLLHUP)))
    return true;
  snprintf(j->copy->why, sizeof j->copy->why, r > 0
           ? "the client is gone" : "the client stopped reading the copy");
  copy_refuse(j);
  return false;
}

static void copy_finish(struct dsec_engine *e, struct dsec_job *j,
                        const struct dsec_job_end *end);

/* The client's pipe takes more: what waited goes, the job's stdout is read
 * again, and a job that ended meanwhile is answered once all is out. */
static void copy_client_writable(struct dsec_engine *e, void *p,
                                 uint32_t events)
{
  struct dsec_job *j = p;
  struct dsec_copy_job *c = j->copy;

  if (!(events & EPOLLOUT) && (events & (EPOLLERR | EPOLLHUP))) {
    snprintf(c->why, sizeof c->why, "the client is gone");
    copy_refuse(j);
  }
  while (!c->bad && c->npend > 0) {
    ssize_t w = write(c->fd, c->pend, c->npend);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno == EAGAIN)
      return;
    if (w <= 0) {
      snprintf(c->why, sizeof c->why, "the client is gone: %s",
               w < 0 ? strerror(errno) : "closed");
      copy_refuse(j);
      break;
    }
    memmove(c->pend, c->pend + w, c->npend - (size_t) w);
    c->npend -= (size_t) w;
  }
  copy_watch(c, false);
  copy_unstall(j);
  if (c->ended && !c->stalled && c->npend == 0)
    copy_finish(e, j, &c->end);
}

/* A copy out whose job ended before its client had all of it: answered
 * when it has (true), else now (false). */
static bool copy_defer(struct dsec_job *j, const struct dsec_job_end *end)
{
  struct dsec_copy_job *c = j->copy;
  if (c->bad || (!c->stalled && c->npend == 0))
    return false;
  c->ended = true;
  c->end = *end;
  c->end.error = end->error ? (c->end_error = xstrdup(end->error)) : NULL;
  c->end.extra = NULL;
  return true;
}

/* The job's stdout waits for the client's pipe to take more. */
static void copy_stall(struct dsec_job *j)
{
  struct dsec_copy_job *c = j->copy;
  if (c->stalled || c->fd < 0)
    return;
  if (j->out.fd >= 0)
    epoll_ctl(c->e->epfd, EPOLL_CTL_DEL, j->out.fd, NULL);
  c->stalled = true;
  copy_watch(c, false);
  c->w = (struct dsec_watch){ copy_client_writable, j, false };
  c->watching = dsec_engine_watch(c->e, c->fd, EPOLLOUT, &c->w) == 0;
}

static void copy_unstall(struct dsec_job *j)
{
  struct dsec_copy_job *c = j->copy;
  if (!c->stalled)
    return;
  c->stalled = false;
  if (j->out.fd >= 0) {
    j->out.w = (struct dsec_watch){ capture_readable, &j->out, false };
    dsec_engine_watch(c->e, j->out.fd, EPOLLIN, &j->out.w);
    capture_read(c->e, &j->out);
  }
}

/* A copy out from the job's stdout pipe (a container's) straight to the
 * client's pipe: tee(2) gives the client the pages, then they are read
 * here to be checked and hashed.  False: the plain way (read, write). */
static bool copy_out_tee(struct dsec_capture *cap)
{
  struct dsec_job *j = cap->job;
  struct dsec_copy_job *c = j->copy;
  static char buf[1u << 20];

  if (c->bad || c->fd < 0)
    return false;
  for (int rounds = 0; rounds < 16; rounds++) {
    ssize_t n = tee(cap->fd, c->fd, sizeof buf, SPLICE_F_NONBLOCK);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN) {
      struct pollfd pf = { c->fd, POLLOUT, 0 };
      if (poll(&pf, 1, 0) == 1 && pf.revents == POLLOUT)
        return true; /* the job's pipe is empty: wait for it */
      /* the client's is full: the job's waits until it is not (the
       * supervisor serves everything else meanwhile) */
      copy_stall(j);
      return true;
    }
    if (n < 0)
      return rounds == 0 ? false : true;
    if (n == 0) {
      /* the job's end of its stdout */
      close(cap->fd);
      cap->fd = -1;
      return true;
    }
    for (size_t got = 0; got < (size_t) n;) {
      ssize_t r = read(cap->fd, buf + got, (size_t) n - got);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        return true;
      got += (size_t) r;
    }
    if (dsec_copy_parse(c->p, buf, (size_t) n) < 0) {
      copy_refuse(j);
      return true;
    }
  }
  return true;
}

/* A copy out's stream, as the job writes it: checked, hashed, bounded,
 * then on to the client (which it waits for). */
static void copy_out_data(struct dsec_job *j, const char *buf, size_t n)
{
  struct dsec_copy_job *c = j->copy;
  if (c->bad)
    return;
  if (dsec_copy_parse(c->p, buf, n) < 0) {
    copy_refuse(j);
    return;
  }
  while (n > 0) {
    ssize_t w = c->npend ? -1 : write(c->fd, buf, n);
    if (w < 0 && !c->npend && errno == EINTR)
      continue;
    if (c->npend || (w < 0 && errno == EAGAIN)) {
      /* kept for the client, up to a bound; past it we wait for it here
       * (a guest's output comes unasked) */
      if (c->npend + n > COPY_PEND_MAX) {
        while (c->npend > 0 && !c->bad) {
          ssize_t f;
          if (!copy_out_wait(j))
            return;
          f = write(c->fd, c->pend, c->npend);
          if (f < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
          if (f <= 0) {
            snprintf(c->why, sizeof c->why, "the client is gone");
            copy_refuse(j);
            return;
          }
          memmove(c->pend, c->pend + f, c->npend - (size_t) f);
          c->npend -= (size_t) f;
        }
        continue;
      }
      c->pend = xrealloc(c->pend, c->npend + n);
      memcpy(c->pend + c->npend, buf, n);
      c->npend += n;
      if (!c->watching) {
        c->w = (struct dsec_watch){ copy_client_writable, j, false };
        c->watching = dsec_engine_watch(c->e, c->fd, EPOLLOUT, &c->w) == 0;
      }
      return;
    }
    if (w <= 0) {
      snprintf(c->why, sizeof c->why, "the client is gone: %s",
               w < 0 ? strerror(errno) : "closed");
      copy_refuse(j);
      return;
    }
    buf += w;
    n -= (size_t) w;
  }
}

/* The job ended: the answer, recorded when the copy was made. */
static void copy_finish(struct dsec_engine *e, struct dsec_job *j,
                        const struct dsec_job_end *end)
{
  struct dsec_copy_job *c = j->copy;
  bool ok = !end->error && WIFEXITED(end->status) &&
            WEXITSTATUS(end->status) == 0 && !c->bad &&
            dsec_copy_parser_done(c->p);
  char digest[DSEC_DIGEST_LEN + 1];
  const char *path = json_string_value(json_object_get(j->req,
                                                       c->in ? "dst" : "src"));
  json_t *res;

  if (c->fd >= 0) {
    /* the client's end of a copy out sees its end now */
    copy_watch(c, false);
    close(c->fd);
    c->fd = -1;
  }
  if (!ok) {
    /* the builtin's own words, else ours */
    _cleanup_free_ char *msg = NULL;
    size_t len = j->err.k.len;
    while (len > 0 && (j->err.k.data[len - 1] == '\n'))
      len--;
    if (c->bad)
      msg = xstrdup(c->why[0] ? c->why : "the copy stream was refused");
    else if (end->error)
      msg = xstrdup(end->error);
    else if (len > 0)
      msg = xstrndup(j->err.k.data, len);
    else if (WIFSIGNALED(end->status))
      msg = xasprintf("the copy was killed by signal %d",
                      WTERMSIG(end->status));
    else if (WEXITSTATUS(end->status) != 0)
      msg = xasprintf("the copy failed with status %d",
                      WEXITSTATUS(end->status));
    else
      msg = xstrdup("the copy stream was cut short");
    copy_answer(e, j, copy_error(j, msg, DSEC_EXIT_FAILURE));
    return;
  }
  dsec_sha256_final(c->h, digest);
  c->h = NULL;
  res = json_pack("{s:s, s:s, s:O, s:s, s:s, s:I, s:I, s:s, s:f, s:b}", "type",
                  "copied", "id", e->id, "seq", j->seq ? j->seq : json_null(),
                  "direction", c->in ? "in" : "out", "path", path, "bytes",
                  (json_int_t) c->bytes, "files", (json_int_t) c->files,
                  "digest", digest, "duration_ms",
                  dsec_ms1(now_ms() - j->start), "replayed",
                  c->replayed);
  if (!c->replayed) {
    _cleanup_error_ struct dsec_error *err = NULL;
    if (dsec_traj_append(&e->traj, j->seq, j->req, res, true, &err) < 0) {
      json_decref(res);
      copy_answer(e, j, copy_error(j, "cannot record the copy in the "
                                   "trajectory", DSEC_EXIT_INTERNAL));
      return;
    }
  }
  dsec_engine_event(e, json_pack("{s:s, s:O, s:s, s:s, s:I, s:I, s:s}", "type",
                                 "copy", "seq", j->seq ? j->seq : json_null(),
                                 "direction", c->in ? "in" : "out", "path",
                                 path, "bytes", (json_int_t) c->bytes, "files",
                                 (json_int_t) c->files, "digest", digest));
  copy_answer(e, j, res);
}

/* A path an fncall call sees only in its own scratch (its /tmp, /dev/shm
 * and working directory are made afresh per call), relative ones from
 * the working directory; read lexically, as the call would name it. */
static bool fncall_scratch(struct dsec_engine *e, const char *path)
{
  static const char *const scratch[] = { "/tmp", "/dev/shm" };
  const char *wd = e->spec->workdir ? e->spec->workdir : "/";
  _cleanup_free_ char *abs = path[0] == '/' ? xstrdup(path)
                                            : xasprintf("%s/%s", wd, path);
  _cleanup_free_ char *clean = xmalloc(strlen(abs) + 2);
  size_t n = 0;

  /* "." and ".." resolved, slashes squeezed */
  for (const char *c = abs; *c;) {
    const char *end = strchrnul(c, '/');
    size_t len = (size_t) (end - c);
    if (len == 0 || (len == 1 && c[0] == '.')) {
      /* nothing */
    } else if (len == 2 && c[0] == '.' && c[1] == '.') {
      while (n > 0 && clean[--n] != '/')
        ;
    } else {
      clean[n++] = '/';
      memcpy(clean + n, c, len);
      n += len;
    }
    c = *end ? end + 1 : end;
  }
  if (n == 0)
    clean[n++] = '/';
  clean[n] = '\0';
  for (size_t i = 0; i < ARRAY_SIZE(scratch); i++) {
    size_t l = strlen(scratch[i]);
    if (strncmp(clean, scratch[i], l) == 0 && (!clean[l] || clean[l] == '/'))
      return true;
  }
  if (strcmp(wd, "/") != 0) {
    size_t l = strlen(wd);
    while (l > 1 && wd[l - 1] == '/')
      l--;
    if (strncmp(clean, wd, l) == 0 && (!clean[l] || clean[l] == '/'))
      return true;
  }
  return false;
}

/* upload {dst, archive, seq} or download {src, seq}, the client's pipe
 * passed with it. */
static void copy_start(struct dsec_engine *e, struct dsec_client *cl,
                       json_t *req, bool in)
{
  _cleanup_error_ struct dsec_error *err = NULL;
  const char *key = in ? "dst" : "src";
  json_t *path = json_object_get(req, key);
  json_t *seq = json_object_get(req, "seq");
  bool archive = json_is_true(json_object_get(req, "archive"));
  int fd = dsec_ctl_take_fd(&cl->c);
  struct dsec_copy_job *c;
  struct dsec_job *j;
  json_t *rec, *msg, *argv;
  int r;

  if (fd < 0) {
    reply_error(cl, "a copy's pipe comes with its request (dsec-run cp)",
                DSEC_EXIT_INPUT);
    return;
  }
  if (!json_is_string(path) || json_string_length(path) == 0 ||
      strlen(json_string_value(path)) != json_string_length(path) ||
      json_string_length(path) > DSEC_COPY_PATH_MAX) {
    _cleanup_free_ char *m = xasprintf("`%s` must be a path", key);
    close(fd);
    reply_error(cl, m, DSEC_EXIT_INPUT);
    return;
  }
  if ((seq && !json_is_null(seq) &&
       (!json_is_integer(seq) || json_integer_value(seq) < 0)) ||
      (json_object_get(req, "archive") &&
       !json_is_boolean(json_object_get(req, "archive")))) {
    close(fd);
    reply_error(cl, "`seq` must be a non-negative integer and `archive` "
                "true or false", DSEC_EXIT_INPUT);
    return;
  }
  if (in && e->spec->backend == DSEC_BACKEND_FNCALL &&
      fncall_scratch(e, json_string_value(path))) {
    /* each call gets these afresh: a copy there would be gone at once */
    close(fd);
    reply_error(cl, "an fncall sandbox keeps nothing between calls in /tmp, "
                "/dev/shm or its working directory: copy into a read-write "
                "mount, or use a container", DSEC_EXIT_INPUT);
    return;
  }
  rec = json_pack("{s:s, s:O}", "op", in ? "upload" : "download", key, path);
  if (in)
    json_object_set_new(rec, "archive", json_boolean(archive));
  if (json_is_integer(seq))
    json_object_set(rec, "seq", seq);

  c = xzalloc(sizeof *c);
  c->e = e;
  c->in = in;
  c->fd = fd;
  c->h = dsec_sha256_new();
  c->p = dsec_copy_parser_new(&hash_ops, c, c->why);
  if (!in && e->spec->resources.disk_mb > 0)
    c->limit = ((uint64_t) e->spec->resources.disk_mb << 20) + (16u << 20);
  j = job_new(e);
  j->req = rec;
  j->seq = json_object_get(rec, "seq");
  j->copy = c;
  j->cl = cl;
  j->start = now_ms();
  c->w = (struct dsec_watch){ copy_readable, j, false };
  fcntl(fd, F_SETFL, O_NONBLOCK);
  fcntl(fd, F_SETPIPE_SZ, COPY_PIPE_SIZE);

  if (j->seq) {
    json_int_t *running = xzalloc(sizeof *running * (e->njobs + 1));
    size_t n = 0;
    const char *conflict;
    json_t *out = NULL;
    for (size_t i = 0; i < e->njobs; i++)
      if (e->jobs[i]->seq)
        running[n++] = json_integer_value(e->jobs[i]->seq);
    r = dsec_traj_check(&e->traj, rec, running, n, &out, &conflict);
    free(running);
    if (r < 0) {
      if (conflict)
        dsec_engine_event(e, json_pack("{s:s, s:O, s:s}", "type",
                                       "replay_conflict", "seq", j->seq,
                                       "field", conflict));
      client_write(cl, out);
      json_decref(out);
      job_free(e, j);
      return;
    }
    if (r > 0 && in) {
      /* read, not made: the digest decides */
      c->recorded = out;
      cl->job = j;
      jobs_add(e, j);
      copy_watch(c, true);
      return;
    }
    json_decref(out);
    c->replayed = r > 0;
  }

  cl->job = j;
  jobs_add(e, j);
  j->keep_stdin = in;
  j->stream = !in;
  j->cap = in ? 65536 : SHELL_CAP;
  /* keep: owners and setuid bits (-a), and DST's parents are made */
  argv = in ? json_pack("[s, O, s, s, s]", "copy_in", path,
                        archive ? "7" : "4", "-1", "-1")
            : json_pack("[s, O]", "copy_out", path);
  if (in && !archive) {
    /* not kept: what comes in is the sandbox's user's */
    char u[24], g[24];
    snprintf(u, sizeof u, "%u", (unsigned) e->spec->uid);
    snprintf(g, sizeof g, "%u", (unsigned) e->spec->gid);
    json_array_set_new(argv, 3, json_string(u));
    json_array_set_new(argv, 4, json_string(g));
  }
  msg = json_pack("{s:s, s:I, s:o, s:[], s:s, s:i, s:i, s:s}", "op", "exec",
                  "xid", (json_int_t) j->xid, "argv", argv, "env", "cwd",
                  e->spec->workdir, "uid", 0, "gid", 0, "builtin",
                  in ? "copy_in" : "copy_out");
  if (in) {
    json_object_set_new(msg, "keep_stdin", json_true());
    /* a guest says what it took: no more than a window is sent ahead */
    json_object_set_new(msg, "stdin_acks", json_true());
  }
  r = e->ops->exec(e, j, msg, &err);
  json_decref(msg);
  if (r < 0) {
    _cleanup_free_ char *what = launch_error(err);
    struct dsec_job_end end = { .error = what };
    dsec_job_finish(e, j, &end);
    return;
  }
  if (in)
    copy_watch(c, true);
}

/* ---- checkpoint, suspend, resume */

/* The writable layer as a layer in the store, taken with the sandbox
 * still (frozen by the engine, or by the producer itself): streamed by
 * the backend's producer from the sandbox's side, imported as an
 * untrusted tarball.  The trajectory records the seq it follows. */
static json_t *engine_checkpoint(struct dsec_engine *e, const char *name)
{
  struct dsec_error *err = NULL;
  _cleanup_json_ json_t *layer = NULL;
  _cleanup_json_ json_t *stats = NULL;
  int64_t mb = e->spec->resources.disk_mb;
  struct dsec_checkpoint_opts co = {
    name, json_object_get(e->spec_json, "protect"),
    /* a disk-limited layer's stream cannot be much more than the disk */
    mb > 0 ? ((uint64_t) mb << 21) + (16u << 20) : 0,
  };
  bool frozen = false;
  json_t *r;

  if (!e->ops->checkpoint) {
    dsec_bad_input(&err, "an %s sandbox has no state to checkpoint",
                   dsec_backend_name(e->spec->backend));
    return dsec_ctl_op_error(err);
  }
  if (e->ops->checkpoint_freezes && dsec_engine_busy(e) > 0) {
    dsec_fail(&err, EBUSY, "execs are running; checkpoint when they end");
    return dsec_ctl_op_error(err);
  }
  if (!e->ops->checkpoint_freezes)
    frozen = e->suspended ||
             (e->ops->freeze && e->ops->freeze(e, true, NULL) == 0);
  layer = dsec_checkpoint_import(&co, e->ops->checkpoint, e, &stats, &err);
  if (frozen && !e->suspended)
    e->ops->freeze(e, false, NULL);
  if (!layer)
    return dsec_ctl_op_error(err);
  if (json_is_true(json_object_get(stats, "frozen")))
    frozen = true;
  json_object_del(stats, "frozen");
  r = dsec_checkpoint_record(&e->traj, e->audit, e->id, e->state, layer, stats,
                             frozen, &err);
  if (!r)
    return dsec_ctl_op_error(err);
  dsec_engine_write_state(e);
  return r;
}

/* suspend: frozen (processes and memory kept), or released (everything
 * goes but what resume needs: a checkpoint, or what the backend keeps). */
static json_t *engine_suspend(struct dsec_engine *e, bool release)
{
  struct dsec_error *err = NULL;

  if (release && e->ops->release) {
    bool ended = false;
    json_t *r = e->ops->release(e, &ended);
    e->released = ended;
    /* released on disk before the answer: a kill while we tear down
     * leaves it resumable (dsec_sandbox_release_cut) */
    if (ended)
      dsec_engine_write_state(e);
    return r;
  }
  if (release) {
    json_t *cp = engine_checkpoint(e, NULL);
    const char *type = json_string_value(json_object_get(cp, "type"));
    if (!type || strcmp(type, "checkpoint") != 0)
      return cp;
    json_object_set_new(e->state, "released", json_true());
    e->released = true;
    dsec_engine_write_state(e);
    json_object_set_new(cp, "type", json_string("suspended"));
    json_object_set_new(cp, "released", json_true());
    dsec_engine_event(e, json_pack("{s:s, s:b}", "type", "suspended",
                                   "released", true));
    return cp;
  }
  if (!e->suspended &&
      (!e->ops->freeze || e->ops->freeze(e, true, &err) < 0)) {
    if (!err)
      dsec_fail(&err, ENOTSUP, "cannot freeze here: use --release");
    return dsec_ctl_op_error(err);
  }
  e->suspended = true;
  json_object_set_new(e->state, "state", json_string("suspended"));
  dsec_engine_write_state(e);
  dsec_engine_event(e, json_pack("{s:s, s:b}", "type", "suspended", "released",
                                 false));
  return json_pack("{s:s, s:s, s:b}", "type", "suspended", "id", e->id,
                   "released", false);
}

static json_t *engine_resume(struct dsec_engine *e)
{
  if (e->suspended) {
    e->ops->freeze(e, false, NULL);
    e->suspended = false;
    e->last_activity_ms = now_ms();
    json_object_set_new(e->state, "state", json_string("running"));
    dsec_engine_write_state(e);
    dsec_engine_event(e, json_pack("{s:s, s:s}", "type", "resumed", "from",
                                   "freezer"));
  }
  return json_pack("{s:s, s:s, s:s}", "type", "resumed", "id", e->id, "state",
                   "running");
}

static json_t *engine_status(struct dsec_engine *e)
{
  json_t *st = json_copy(e->state);
  int64_t mem = e->cg ? dsec_cgroup_memory_current(e->cg) : -1;
  if (mem >= 0)
    json_object_set_new(st, "memory_bytes", json_integer(mem));
  json_object_set_new(st, "execs_running",
                      json_integer((json_int_t) dsec_engine_busy(e)));
  json_object_set_new(st, "sessions", json_integer((json_int_t) e->nsessions));
  json_object_set_new(st, "audit", dsec_audit_status(e->audit));
  return st;
}

static void copy_start(struct dsec_engine *e, struct dsec_client *cl,
                       json_t *req, bool in);

/* What the client of an interactive exec sends while it runs: input
 * ({"op":"input","data_b64":..} or "eof": true, a ^D) and the
 * terminal's size ({"op":"resize","cols":C,"rows":R}).  Nothing is
 * answered: the exec's output and result are the answers. */
static void interactive_input(struct dsec_engine *e, struct dsec_job *j,
                              const char *op, json_t *req)
{
  if (op && strcmp(op, "input") == 0) {
    const char *b64 = json_string_value(json_object_get(req, "data_b64"));
    const char *text = json_string_value(json_object_get(req, "data"));
    if (b64) {
      size_t len = 0;
      unsigned char *buf = dsec_base64_decode(b64, &len);
      if (len > 0)
        job_input(e, j, (const char *) buf, len);
      free(buf);
    } else if (text && *text)
      job_input(e, j, text, strlen(text));
    if (json_is_true(json_object_get(req, "eof")))
      job_input(e, j, "\004", 1);
  } else if (op && strcmp(op, "resize") == 0) {
    json_int_t c = json_integer_value(json_object_get(req, "cols"));
    json_int_t r = json_integer_value(json_object_get(req, "rows"));
    if (c < 1 || c > 10000 || r < 1 || r > 10000)
      return;
    if (e->ops->resize)
      e->ops->resize(e, j, (unsigned) c, (unsigned) r);
    else if (j->tty && j->out.fd >= 0) {
      struct winsize ws = { .ws_row = (unsigned short) r,
                            .ws_col = (unsigned short) c };
      ioctl(j->out.fd, TIOCSWINSZ, &ws);
    }
  } else if (op && strcmp(op, "signal") == 0) {
    json_int_t sig = json_integer_value(json_object_get(req, "signal"));
    if (sig > 0 && sig < NSIG)
      e->ops->signal(e, j, (int) sig);
  }
}

/* Handles the complete lines a client sent, one at a time: the next waits
 * until the current exec is answered, so results come back in order. */
static void client_next(struct dsec_engine *e, struct dsec_client *cl)
{
  while (!cl->job || cl->job->interactive) {
    json_t *req, *r = NULL;
    const char *op;

    if (dsec_ctl_next(&cl->c, &req) == 0) {
      if (cl->c.eof && !cl->job)
        client_close(e, cl);
      else if (cl->c.eof)
        job_input_end(e, cl->job); /* the typing ends; the exec goes on */
      return;
    }
    op = json_string_value(json_object_get(req, "op"));
    if (cl->job) {
      interactive_input(e, cl->job, op, req);
      json_decref(req);
      continue;
    }
    if (!op || strcmp(op, "exec") == 0) {
      if (e->suspended)
        reply_error(cl, "the sandbox is suspended (resume it first)",
                    DSEC_EXIT_INTERNAL);
      else
        job_start(e, cl, req);
    } else if (strcmp(op, "kill") == 0) {
      json_int_t sig = json_integer_value(json_object_get(req, "signal"));
      sig = sig > 0 && sig < NSIG ? sig : SIGKILL;
      e->ops->signal(e, NULL, (int) sig);
      r = json_pack("{s:s, s:s, s:I}", "type", "killed", "id", e->id, "signal",
                    sig);
    } else if (strcmp(op, "status") == 0) {
      r = engine_status(e);
    } else if (strcmp(op, "checkpoint") == 0) {
      r = engine_checkpoint(e, json_string_value(json_object_get(req, "name")));
    } else if (strcmp(op, "suspend") == 0) {
      r = engine_suspend(e, json_is_true(json_object_get(req, "release")));
    } else if (strcmp(op, "resume") == 0) {
      r = engine_resume(e);
    } else if (strcmp(op, "upload") == 0 || strcmp(op, "download") == 0) {
      if (e->suspended) {
        /* refused: the pipe that came with it goes (its client then sees
         * its end) */
        int fd = dsec_ctl_take_fd(&cl->c);
        if (fd >= 0)
          close(fd);
        reply_error(cl, "the sandbox is suspended (resume it first)",
                    DSEC_EXIT_FAILURE);
      } else
        copy_start(e, cl, req, op[0] == 'u');
    } else if (strcmp(op, "sessions") == 0) {
      r = sessions_list(e);
    } else if (strcmp(op, "session_rm") == 0) {
      r = session_remove(e, json_string_value(json_object_get(req, "name")));
    } else if (strcmp(op, "snapshot") == 0 && e->ops->snapshot) {
      r = e->ops->snapshot(e);
    } else if (strcmp(op, "shutdown") == 0) {
      e->removing = json_is_true(json_object_get(req, "remove"));
      r = json_pack("{s:s, s:s}", "type", "stopping", "id", e->id);
      client_write(cl, r);
      json_decref(r);
      json_decref(req);
      /* rm waits for "stopped" (dsec_sandbox_stop), not for our exit */
      if (e->removing)
        e->ender = cl;
      dsec_engine_end(e, "stopped", "removed");
    } else {
      reply_error(cl, "unknown op", DSEC_EXIT_INPUT);
    }
    if (r) {
      client_write(cl, r);
      json_decref(r);
    }
    json_decref(req);
    if (e->released)
      dsec_engine_end(e, "suspended", "released");
  }
}

/* ---- the end */

_Noreturn void dsec_engine_end(struct dsec_engine *e, const char *state,
                               const char *cause)
{
  _cleanup_free_ char *now = dsec_time_rfc3339();
  _cleanup_error_ struct dsec_error *err = NULL;

  /* a frozen process does not die of SIGKILL until thawed */
  if (e->suspended && e->ops->freeze)
    e->ops->freeze(e, false, NULL);
  if (e->ops->stop)
    e->ops->stop(e);
  if (e->cg && dsec_cgroup_destroy(e->cg, &err) < 0) {
    dsec_warn("%s", err->msg);
    /* not "stopped": rm then waits for our exit and destroys what is
     * left itself, or says why it cannot */
    e->ender = NULL;
  }
  /* answer whoever still waits */
  for (size_t i = 0; i < e->njobs; i++)
    reply_error(e->jobs[i]->cl, cause ? cause : state, DSEC_EXIT_INTERNAL);
  json_object_set_new(e->state, "state", json_string(state));
  json_object_set_new(e->state, "ended", json_string(now));
  if (cause)
    json_object_set_new(e->state, "cause", json_string(cause));
  /* for rm, which removes the state and the events next, the end is
   * neither written nor synced (a sandbox whose rm dies after this shows
   * as died: its supervisor is gone) */
  if (!e->removing)
    dsec_engine_write_state(e);
  if (strcmp(state, "died") == 0 || strcmp(state, "expired") == 0) {
    json_t *ev = json_pack("{s:s, s:s}", "type", state, "cause",
                           cause ? cause : state);
    /* the guest's last words, labelled as such (never the cause) */
    if (json_object_get(e->state, "console_tail"))
      json_object_set(ev, "console_tail",
                      json_object_get(e->state, "console_tail"));
    dsec_engine_event(e, ev);
  }
  dsec_audit_finish(e->audit);
  if (e->run_fd >= 0)
    unlinkat(e->run_fd, "ctl.sock", 0);
  if (!e->removing)
    fsync(e->events_fd);
  /* rm learns that the end is done: the sandbox's processes and cgroups
   * are gone (else it is not told, above).  What is left is our own exit (our mount namespace, the
   * fanotify group's release), which it need not wait for: so no
   * after_end either, whose point is to spare a waiter that release. */
  if (e->ender) {
    json_t *r = json_pack("{s:s, s:s}", "type", "stopped", "id", e->id);
    client_write(e->ender, r);
    json_decref(r);
  } else if (e->ops->after_end)
    e->ops->after_end(e);
  if (e->ops->epilogue)
    e->ops->epilogue(e);
  _exit(0);
}

static void engine_signal(struct dsec_engine *e, void *p, uint32_t events)
{
  struct signalfd_siginfo si;
  bool child = false;
  (void) p, (void) events;
  while (read(e->sfd, &si, sizeof si) == sizeof si) {
    if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT ||
        si.ssi_signo == SIGHUP)
      dsec_engine_end(e, "stopped", "supervisor terminated");
    if (si.ssi_signo == SIGCHLD)
      child = true;
  }
  if (child && e->ops->child)
    e->ops->child(e);
}

/* ---- timers */

static int engine_timeout_ms(struct dsec_engine *e)
{
  double now = now_ms(), next = -1;
  int b = e->ops->next_timer ? e->ops->next_timer(e) : -1;

  if (b >= 0)
    next = now + b;
  for (size_t i = 0; i < e->njobs; i++)
    if (e->jobs[i]->deadline > 0 && !e->jobs[i]->deadline_passed &&
        (next < 0 || e->jobs[i]->deadline < next))
      next = e->jobs[i]->deadline;
  for (size_t i = 0; i < e->nsessions; i++)
    if (e->sessions[i]->kill_at > 0 &&
        (next < 0 || e->sessions[i]->kill_at < next))
      next = e->sessions[i]->kill_at;
  if (e->spec->ttl_s > 0) {
    double t = e->start_ms + (double) e->spec->ttl_s * 1000;
    if (next < 0 || t < next)
      next = t;
  }
  if (e->spec->idle_timeout_s > 0 && dsec_engine_busy(e) == 0 &&
      !e->suspended) {
    double t = e->last_activity_ms + (double) e->spec->idle_timeout_s * 1000;
    if (next < 0 || t < next)
      next = t;
  }
  if (next < 0)
    return -1;
  if (next <= now)
    return 0;
  return next - now + 1 < 3600000 ? (int) (next - now + 1) : 3600000;
}

static void engine_timers(struct dsec_engine *e)
{
  double now = now_ms();

  if (e->ops->timers)
    e->ops->timers(e);
  for (size_t i = 0; i < e->njobs; i++) {
    struct dsec_job *j = e->jobs[i];
    if (j->deadline <= 0 || j->deadline_passed || now < j->deadline)
      continue;
    j->deadline_passed = true;
    if (j->sess) {
      session_deadline(e, j);
      continue;
    }
    if (e->ops->deadline) {
      e->ops->deadline(e, j);
      i = (size_t) -1; /* the list may have changed: look again */
      continue;
    }
    j->timed_out = true;
    e->ops->signal(e, j, SIGKILL);
  }
  for (size_t i = 0; i < e->nsessions; i++) {
    struct dsec_session *s = e->sessions[i];
    if (s->kill_at > 0 && now >= s->kill_at && s->shell) {
      /* the command outlived its interrupt: the shell goes with it */
      s->kill_at = 0;
      if (s->ncmds)
        s->cmds[0]->kill_sig = SIGKILL;
      e->ops->signal(e, s->shell, SIGKILL);
    }
  }
  if (e->spec->ttl_s > 0 && now >= e->start_ms + (double) e->spec->ttl_s * 1000)
    dsec_engine_end(e, "expired", "ttl");
  if (e->spec->idle_timeout_s > 0 && dsec_engine_busy(e) == 0 &&
      !e->suspended &&
      now >= e->last_activity_ms + (double) e->spec->idle_timeout_s * 1000) {
    if (e->spec->idle_action == DSEC_IDLE_SUSPEND) {
      /* idle_action suspend: released, resumable later */
      json_decref(engine_suspend(e, true));
      if (e->released)
        dsec_engine_end(e, "suspended", "idle");
      /* it could not be released: removed as an idle one */
    }
    dsec_engine_end(e, "expired", "idle");
  }
}

/* ---- a task world's service: its command, started with the sandbox,
 * its output in service.log; its end is an event and a state field (the
 * sandbox stays, for the grader to look at); the end of the world's
 * agent is the service's. */

static void service_ended(struct dsec_engine *e, struct dsec_job *j,
                          const struct dsec_job_end *end)
{
  json_t *ex = json_pack("{s:s}", "type", "service_exited");
  if (end->error)
    json_object_set_new(ex, "error", json_string(end->error));
  else if (WIFSIGNALED(end->status))
    json_object_set_new(ex, "signal", json_integer(WTERMSIG(end->status)));
  else
    json_object_set_new(ex, "exit_code",
                        json_integer(WEXITSTATUS(end->status)));
  json_object_set_new(e->state, "service_exited", json_deep_copy(ex));
  json_object_del(json_object_get(e->state, "service_exited"), "type");
  dsec_engine_write_state(e);
  dsec_engine_event(e, ex);
  jobs_remove(e, j);
  e->nshells--;
  j->daemon = NULL;
  job_free(e, j);
}

static int service_start(struct dsec_engine *e, struct dsec_error **err)
{
  _cleanup_free_ char *path = xasprintf("%s/service.log", e->dir);
  struct dsec_job *j;
  json_t *argv = json_array();

  e->service_log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
                           0600);
  if (e->service_log_fd < 0)
    return dsec_fail(err, errno, "cannot open %s", path);
  for (size_t i = 0; i < e->spec->world.cmd.n; i++)
    json_array_append_new(argv, json_string(e->spec->world.cmd.v[i]));
  j = job_new(e);
  j->shell = true;
  j->daemon = e;
  j->cap = SHELL_CAP;
  j->req = json_pack("{s:o, s:s, s:s, s:{}, s:i, s:I}", "cmd", argv, "stdin",
                     "", "workdir", e->spec->workdir, "env", "timeout_s", 0,
                     "max_output_bytes", (json_int_t) SHELL_CAP);
  j->start = now_ms();
  jobs_add(e, j);
  e->nshells++;
  if (job_launch(e, j, err) < 0) {
    jobs_remove(e, j);
    e->nshells--;
    j->daemon = NULL;
    job_free(e, j);
    return dsec_error_wrap(err, "service %s", e->spec->world.service);
  }
  return 0;
}

/* The world's agent's supervisor ended: unless it was released (the
 * world's suspend releases every member itself), the service ends too. */
static void world_agent_gone(struct dsec_engine *e, void *p, uint32_t events)
{
  _cleanup_json_ json_t *st = dsec_sandbox_status(e->spec->world.agent, NULL);
  const char *state = json_string_value(json_object_get(st, "state"));
  (void) p, (void) events;
  epoll_ctl(e->epfd, EPOLL_CTL_DEL, e->world_pidfd, NULL);
  e->w_world.dead = true;
  if (state && strcmp(state, "suspended") == 0 &&
      json_is_true(json_object_get(st, "released")))
    return;
  dsec_engine_end(e, "stopped", "the world's agent ended");
}

static int world_watch(struct dsec_engine *e, struct dsec_error **err)
{
  _cleanup_json_ json_t *st = dsec_sandbox_status(e->spec->world.agent, err);
  pid_t sup;
  uint64_t start;

  if (!st)
    return dsec_error_wrap(err, "the world's agent");
  sup = (pid_t) json_integer_value(json_object_get(st, "supervisor_pid"));
  start = (uint64_t) json_integer_value(json_object_get(st, "supervisor_start"));
  e->world_pidfd = (int) syscall(SYS_pidfd_open, sup, 0);
  if (e->world_pidfd < 0 || !dsec_process_alive(sup, start))
    return dsec_fail(err, errno, "the world's agent %s is gone",
                     e->spec->world.agent);
  fcntl(e->world_pidfd, F_SETFD, FD_CLOEXEC);
  e->w_world = (struct dsec_watch){ world_agent_gone, NULL, false };
  if (dsec_engine_watch(e, e->world_pidfd, EPOLLIN, &e->w_world) < 0)
    return dsec_fail(err, errno, "cannot watch the world's agent");
  return 0;
}

/* ---- serving */

_Noreturn void dsec_engine_serve(struct dsec_engine *e, json_t *fields,
                                 json_t *event)
{
  struct dsec_error *err = NULL;
  _cleanup_free_ char *now = dsec_time_rfc3339();
  _cleanup_free_ char *sock = xasprintf("%s/ctl.sock", e->run);
  struct epoll_event evs[64];

  if (e->run_fd < 0)
    e->run_fd = open(e->run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  e->lsock = e->run_fd < 0 ? dsec_fail(&err, errno, "cannot open %s", e->run)
                           : dsec_ctl_listen(e->run_fd, e->run, &err);
  if (e->lsock < 0)
    dsec_engine_fail(e, err);
  e->w_listen = (struct dsec_watch){ accept_clients, NULL, false };
  e->w_signal = (struct dsec_watch){ engine_signal, NULL, false };
  if (dsec_engine_watch(e, e->lsock, EPOLLIN, &e->w_listen) < 0 ||
      dsec_engine_watch(e, e->sfd, EPOLLIN, &e->w_signal) < 0) {
    dsec_fail(&err, errno, "cannot set up the event loop");
    dsec_engine_fail(e, err);
  }

  {
    /* the creator's time (a resumed sandbox keeps its first one) */
    _cleanup_json_ json_t *old = dsec_sandbox_state_read(e->id, NULL);
    _cleanup_free_ char *boot = dsec_boot_id();
    const char *c = json_string_value(json_object_get(old, "created"));
    e->state = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:s, s:s}", "type",
                         "sandbox", "id", e->id, "state", "running", "backend",
                         dsec_backend_name(e->spec->backend), "supervisor_pid",
                         (int) getpid(), "supervisor_start",
                         (json_int_t) dsec_process_starttime(getpid()),
                         "created", c && *c ? c : now, "socket", sock);
    if (e->cg)
      json_object_set_new(e->state, "cgroup", dsec_cgroup_to_json(e->cg));
    if (e->spec->name)
      json_object_set_new(e->state, "name", json_string(e->spec->name));
    if (boot)
      json_object_set_new(e->state, "boot_id", json_string(boot));
    if (fields) {
      json_object_update(e->state, fields);
      json_decref(fields);
    }
    sessions_adopt(e, old);
  }
  if (e->spec->world.agent &&
      (world_watch(e, &err) < 0 || service_start(e, &err) < 0)) {
    json_decref(event);
    dsec_engine_fail(e, err);
  }
  if (e->spec->world.agent)
    json_object_set_new(e->state, "world",
                        json_pack("{s:s, s:s}", "agent", e->spec->world.agent,
                                  "service", e->spec->world.service));
  dsec_engine_write_state(e);
  dsec_engine_event(e, event);
  /* idle from now on: a boot is not idleness */
  e->last_activity_ms = now_ms();
  dsec_crash_point("ready");
  dsec_supervisor_report(e->ready_fd, json_pack("{s:b}", "ok", true));
  close(e->ready_fd);
  e->ready_fd = -1;

  for (;;) {
    int n = epoll_wait(e->epfd, evs, 64, engine_timeout_ms(e));
    if (n < 0 && errno != EINTR)
      dsec_engine_end(e, "died", "supervisor error");
    for (int i = 0; i < n; i++) {
      struct dsec_watch *w = evs[i].data.ptr;
      if (!w->dead)
        w->fn(e, w->p, evs[i].events);
    }
    for (size_t g = 0; g < e->ngraves; g++)
      free(e->graves[g]);
    e->ngraves = 0;
    engine_timers(e);
  }
}
