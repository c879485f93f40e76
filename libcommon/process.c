#include <config.h>

#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crash.h"
#include "exitcodes.h"

#define OUT_MAX (1u << 20)
#define ERR_KEEP 4096

static _Noreturn void child(char *const argv[], const char *cwd, int in_fd,
                            int out_fd, int err_fd)
{
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);

  if (null < 0 || dup2(in_fd >= 0 ? in_fd : null, STDIN_FILENO) < 0 ||
      dup2(out_fd >= 0 ? out_fd : null, STDOUT_FILENO) < 0 ||
      dup2(err_fd, STDERR_FILENO) < 0)
    _exit(127);
  /* every inherited descriptor beyond the three is closed */
  syscall(SYS_close_range, 3U, ~0U, 0U);
  if (cwd && chdir(cwd) < 0) {
    dprintf(STDERR_FILENO, "cannot enter %s: %s\n", cwd, strerror(errno));
    _exit(126);
  }
  {
    /* a supervisor has its signals blocked (signalfd): not its child */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
  }
  signal(SIGPIPE, SIG_DFL);
  execvp(argv[0], argv);
  dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

int dsec_program_start(char *const argv[], const char *cwd, int in_fd,
                       bool want_out, struct dsec_program *p,
                       struct dsec_error **err)
{
  int op[2] = { -1, -1 }, ep[2];

  p->pid = -1;
  p->out_fd = p->err_fd = -1;
  p->argv0 = argv[0];
  dsec_crash_point("exec");
  if (pipe2(ep, O_CLOEXEC) < 0)
    return dsec_fail(err, errno, "pipe");
  if (want_out && pipe2(op, O_CLOEXEC) < 0) {
    close(ep[0]);
    close(ep[1]);
    return dsec_fail(err, errno, "pipe");
  }
  p->pid = fork();
  if (p->pid < 0) {
    int e = errno;
    close(ep[0]);
    close(ep[1]);
    if (want_out) {
      close(op[0]);
      close(op[1]);
    }
    return dsec_fail(err, e, "fork");
  }
  if (p->pid == 0)
    child(argv, cwd, in_fd, want_out ? op[1] : -1, ep[1]);
  close(ep[1]);
  p->err_fd = ep[0];
  if (want_out) {
    close(op[1]);
    p->out_fd = op[0];
  }
  return 0;
}

bool dsec_program_exited(struct dsec_program *p)
{
  siginfo_t si = { 0 };
  /* WNOWAIT: the status stays for dsec_program_finish */
  return p->pid > 0 &&
         waitid(P_PID, (id_t) p->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         si.si_pid == p->pid;
}

void dsec_program_kill(struct dsec_program *p)
{
  if (p->pid > 0)
    kill(p->pid, SIGKILL);
}

int dsec_program_finish(struct dsec_program *p, char **out,
                        struct dsec_error **err)
{
  _cleanup_free_ char *obuf = NULL;
  char ebuf[ERR_KEEP + 1];
  size_t olen = 0, elen = 0;
  int status;

  if (p->out_fd >= 0)
    obuf = xmalloc(OUT_MAX + 1);
  {
    struct pollfd pf[2] = { { p->err_fd, POLLIN, 0 }, { p->out_fd, POLLIN, 0 } };
    int open_fds = p->out_fd >= 0 ? 2 : 1;
    while (open_fds > 0) {
      if (poll(pf, 2, -1) < 0) {
        if (errno == EINTR)
          continue;
        break;
      }
      for (int i = 0; i < 2; i++) {
        char tmp[4096];
        ssize_t n;
        if (pf[i].fd < 0 || !pf[i].revents)
          continue;
        n = read(pf[i].fd, tmp, sizeof tmp);
        if (n <= 0) {
          close(pf[i].fd);
          pf[i].fd = -1;
          open_fds--;
          continue;
        }
        if (i == 0) {
          /* keep the last ERR_KEEP bytes of stderr */
          if ((size_t) n >= ERR_KEEP) {
            memcpy(ebuf, tmp + n - ERR_KEEP, ERR_KEEP);
            elen = ERR_KEEP;
          } else {
            if (elen + (size_t) n > ERR_KEEP) {
              size_t drop = elen + (size_t) n - ERR_KEEP;
              memmove(ebuf, ebuf + drop, elen - drop);
              elen -= drop;
            }
            memcpy(ebuf + elen, tmp, (size_t) n);
            elen += (size_t) n;
          }
        } else if (olen + (size_t) n <= OUT_MAX) {
          memcpy(obuf + olen, tmp, (size_t) n);
          olen += (size_t) n;
        }
      }
    }
    for (int i = 0; i < 2; i++)
      if (pf[i].fd >= 0)
        close(pf[i].fd);
    p->err_fd = p->out_fd = -1;
  }
  while (waitpid(p->pid, &status, 0) < 0)
    if (errno != EINTR) {
      p->pid = -1;
      return dsec_fail(err, errno, "waitpid");
    }
  p->pid = -1;
  ebuf[elen] = '\0';
  while (elen > 0 && (ebuf[elen - 1] == '\n' || ebuf[elen - 1] == ' '))
    ebuf[--elen] = '\0';
  if (WIFSIGNALED(status))
    return dsec_fail(err, 0, "%s killed by signal %d%s%s", p->argv0,
                     WTERMSIG(status), elen ? ": " : "", ebuf);
  if (WEXITSTATUS(status) != 0) {
    /* a dsec program's own message: "prog: what went wrong" */
    const char *msg = ebuf;
    const char *base = strrchr(p->argv0, '/');
    size_t pl;
    base = base ? base + 1 : p->argv0;
    pl = strlen(base);
    if (strncmp(msg, base, pl) == 0 && msg[pl] == ':' && msg[pl + 1] == ' ')
      msg += pl + 2;
    if (p->status_passthrough && WEXITSTATUS(status) == DSEC_EXIT_INPUT)
      return dsec_error_set(err, DSEC_EXIT_INPUT, 0, "%s", msg);
    return dsec_fail(err, 0, "%s failed with status %d%s%s", p->argv0,
                     WEXITSTATUS(status), elen ? ": " : "", ebuf);
  }
  if (out) {
    obuf[olen] = '\0';
    *out = steal_pointer(&obuf);
  }
  return 0;
}

int dsec_run_program(char *const argv[], const char *cwd, char **out,
                     struct dsec_error **err)
{
  struct dsec_program p = { 0 };
  if (dsec_program_start(argv, cwd, -1, out != NULL, &p, err) < 0)
    return -1;
  return dsec_program_finish(&p, out, err);
}

char *dsec_sibling_program(const char *name)
{
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  char *prog;

  if (n > 0) {
    char *slash;
    self[n] = '\0';
    slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      prog = xasprintf("%s/%s", self, name);
      if (access(prog, X_OK) == 0)
        return prog;
      free(prog);
    }
  }
  return xstrdup(name);
}

bool dsec_in_path(const char *prog)
{
  const char *path = getenv("PATH");
  _cleanup_free_ char *copy = xstrdup(path && *path ? path
                                                   : "/usr/local/bin:/usr/bin:/bin");
  char *save = NULL;

  for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    _cleanup_free_ char *f = xasprintf("%s/%s", *d ? d : ".", prog);
    struct stat st;
    if (stat(f, &st) == 0 && S_ISREG(st.st_mode) && access(f, X_OK) == 0)
      return true;
  }
  return false;
}

/* Overwrites our command line (inherited from the dsec-run that forked
 * us) with title, within the space the original one had: `ps` and
 * `pkill -f` then see what this process is, not its creator's command. */
void dsec_cmdline_area(struct dsec_cmdline_area *a)
{
  char buf[1024], *p;
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;

  *a = (struct dsec_cmdline_area){ 0, 0 };
  if (fd >= 0)
    close(fd);
  if (n <= 0)
    return;
  buf[n] = '\0';
  p = strrchr(buf, ')');
  if (!p)
    return;
  /* fields 48 and 49: arg_start, arg_end (field 3 follows the ')') */
  p += 2;
  for (int field = 3; field < 48 && p; field++) {
    p = strchr(p, ' ');
    if (p)
      p++;
  }
  if (!p || sscanf(p, "%lu %lu", &a->start, &a->end) != 2 || a->end <= a->start)
    *a = (struct dsec_cmdline_area){ 0, 0 };
}

void dsec_set_cmdline_at(const struct dsec_cmdline_area *a, const char *title)
{
  size_t len = a->end - a->start;
  size_t t = strlen(title);
  char *area = (char *) (uintptr_t) a->start;

  if (a->end <= a->start)
    return;
  if (t >= len)
    t = len - 1;
  memcpy(area, title, t);
  memset(area + t, 0, len - t);
}

void dsec_set_cmdline(const char *title)
{
  struct dsec_cmdline_area a;
  dsec_cmdline_area(&a);
  dsec_set_cmdline_at(&a, title);
}
