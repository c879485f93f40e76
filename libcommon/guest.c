/* The guest side shared by the container's init and dsec-agent: see
 * guest.h.  libc and jansson only (dsec-agent is static). */
#define _GNU_SOURCE
#include "guest.h"

#include <alloca.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/mount.h>
#include <net/if.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "copy.h"
#include "exitcodes.h"

extern char **environ;

static int say(char *why, size_t len, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static int say(char *why, size_t len, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return -1;
}

int dsec_guest_bind_ro(const char *path)
{
  struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                         MOUNT_ATTR_NODEV };
  int t = (int) syscall(SYS_open_tree, AT_FDCWD, path,
                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  int r;
  if (t < 0)
    return -1;
  r = (int) syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH | AT_RECURSIVE,
                    &attr, sizeof attr);
  if (r == 0)
    r = (int) syscall(SYS_move_mount, t, "", AT_FDCWD, path,
                      MOVE_MOUNT_F_EMPTY_PATH);
  close(t);
  return r;
}

int dsec_guest_protect(json_t *protect, char *why, size_t len,
                       bool *bad_input)
{
  json_t *v;
  size_t i;

  *bad_input = false;
  json_array_foreach(protect, i, v)
  {
    const char *p = json_string_value(v);
    char a[4096];
    struct stat st;

    if (!p || *p != '/' || strlen(p) >= sizeof a) {
      *bad_input = true;
      return say(why, len, "protect: invalid path");
    }
    if (lstat(p, &st) < 0) {
      *bad_input = true;
      return say(why, len, "protect: %s does not exist in the sandbox", p);
    }
    /* a symbolic link on the way could be pointed elsewhere later (it is
     * not the protected tree): the path must be the real one.  Every
     * directory above it becomes a mount point (bound onto itself, still
     * writable). */
    snprintf(a, sizeof a, "%s", p);
    for (char *slash = a; slash;) {
      struct stat ls;
      slash = strchr(slash + 1, '/');
      if (slash)
        *slash = '\0';
      if (lstat(a, &ls) == 0 && S_ISLNK(ls.st_mode)) {
        *bad_input = true;
        return say(why, len, "protect: %s runs through the symbolic link %s: "
                             "protect the path it leads to", p, a);
      }
      if (slash) {
        if (mount(a, a, NULL, MS_BIND | MS_REC, NULL) < 0)
          return say(why, len, "cannot pin %s (a parent of %s): %s", a, p,
                     strerror(errno));
        *slash = '/';
      }
    }
    if (dsec_guest_bind_ro(p) < 0)
      return say(why, len, "cannot protect %s: %s", p, strerror(errno));
  }
  return 0;
}

int dsec_guest_hide(json_t *hide, const char *scratch, char *why, size_t len)
{
  char empty[4096];
  json_t *v;
  size_t i;

  snprintf(empty, sizeof empty, "%s/.dsec-hidden", scratch);
  json_array_foreach(hide, i, v)
  {
    const char *p = json_string_value(v);
    struct stat st;
    if (!p || lstat(p, &st) < 0)
      continue; /* nothing there to hide */
    if (S_ISDIR(st.st_mode)) {
      if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "size=0,mode=000") < 0)
        return say(why, len, "cannot hide %s: %s", p, strerror(errno));
    } else {
      /* an empty, unreadable, unwritable file in its place */
      int fd = open(empty, O_CREAT | O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0000);
      int e;
      if (fd >= 0)
        close(fd);
      if (mount(empty, p, NULL, MS_BIND, NULL) < 0 ||
          mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                                 MS_NODEV | MS_NOEXEC, NULL) < 0) {
        e = errno;
        unlink(empty);
        return say(why, len, "cannot hide %s: %s", p, strerror(e));
      }
      unlink(empty);
    }
  }
  return 0;
}

void dsec_guest_loopback_up(void)
{
  struct ifreq ifr;
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  close(s);
}

/* A NULL-terminated vector of an array's strings (borrowed), or NULL. */
static char **strv(json_t *a)
{
  size_t n = json_array_size(a);
  char **v = calloc(n + 1, sizeof *v);
  for (size_t i = 0; v && i < n; i++)
    v[i] = (char *) json_string_value(json_array_get(a, i));
  return v;
}

size_t dsec_guest_next(const char *buf, size_t len, json_t **req, size_t *plen,
                       bool *bad)
{
  const char *nl = len ? memchr(buf, '\n', len) : NULL;
  json_int_t sl;
  size_t hl;
  json_t *m;

  *req = NULL;
  *plen = 0;
  *bad = false;
  if (!nl)
    /* garbage: dropped rather than grown without end */
    return len > DSEC_GUEST_HEADER_MAX ? len : 0;
  hl = (size_t) (nl - buf);
  m = json_loadb(buf, hl, 0, NULL);
  sl = json_integer_value(json_object_get(m, "stdin_len"));
  if (sl < 0 || sl > DSEC_GUEST_STDIN_MAX) {
    /* not something the host sends: the header alone is dropped */
    *req = m;
    *bad = true;
    return hl + 1;
  }
  if (!m)
    return hl + 1;
  if (len - hl - 1 < (size_t) sl) {
    json_decref(m);
    return 0; /* the payload is still coming */
  }
  *req = m;
  *plen = (size_t) sl;
  return hl + 1 + (size_t) sl;
}

void dsec_guest_exec_from(struct dsec_guest_exec *x, json_t *msg)
{
  x->argv = strv(json_object_get(msg, "argv"));
  x->envp = strv(json_object_get(msg, "env"));
  x->cwd = json_string_value(json_object_get(msg, "cwd"));
  x->uid = (uid_t) json_integer_value(json_object_get(msg, "uid"));
  x->gid = (gid_t) json_integer_value(json_object_get(msg, "gid"));
  x->builtin = json_string_value(json_object_get(msg, "builtin"));
  x->tty = json_string_value(json_object_get(msg, "tty_path"));
}

int dsec_guest_openpty(uid_t uid, gid_t gid, unsigned cols, unsigned rows,
                       char *path, size_t len)
{
  struct winsize ws = { .ws_row = (unsigned short) rows,
                        .ws_col = (unsigned short) cols };
  int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0)
    return -1;
  if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, path, len) != 0) {
    int e = errno;
    close(m);
    errno = e;
    return -1;
  }
  /* the command's own, as a login's is (programs reopen /dev/tty) */
  if (chown(path, uid, gid) < 0) {
    /* a root without the capability: the terminal stays root's */
  }
  ioctl(m, TIOCSWINSZ, &ws);
  fcntl(m, F_SETFL, O_NONBLOCK);
  return m;
}

/* dsec's own commands (see guest.h): their status. */
static int builtin(const struct dsec_guest_exec *x)
{
  char why[DSEC_COPY_WHY];
  int argc = 0;
  int r;

  while (x->argv[argc])
    argc++;
  if (strcmp(x->builtin, "copy_in") == 0 && argc == 5) {
    long long u = strtoll(x->argv[3], NULL, 10);
    long long g = strtoll(x->argv[4], NULL, 10);
    r = dsec_copy_receive(0, x->argv[1], (unsigned) atoi(x->argv[2]),
                          u < 0 ? (uid_t) -1 : (uid_t) u,
                          g < 0 ? (gid_t) -1 : (gid_t) g, why);
  } else if (strcmp(x->builtin, "copy_out") == 0 && argc == 2) {
    uint64_t skipped = 0;
    r = dsec_copy_send(1, x->argv[1], &skipped, why);
  } else {
    snprintf(why, sizeof why, "unknown builtin %s", x->builtin);
    r = -1;
  }
  if (r < 0) {
    dprintf(2, "%s\n", why);
    return 1;
  }
  return 0;
}

/* One execve of the command's, told first, with the token. */
static void exec_one(const struct dsec_guest_exec *x, const char *path,
                     char *const argv[], char *const envp[])
{
  if (!x->token) {
    execve(path, argv, envp);
    return;
  }
  if (x->started)
    x->started(x->ud, path, argv);
  syscall(SYS_execve, path, argv, envp, (unsigned long) x->token, 0UL, 0UL);
}

/* A script without #!: /bin/sh FILE ARGS..., as execvp runs it. */
static void exec_script(const struct dsec_guest_exec *x, const char *file,
                        char *const argv[], char *const envp[])
{
  size_t n = 0;
  char **sh;

  while (argv[n])
    n++;
  sh = alloca(sizeof *sh * (n + 2));
  sh[0] = (char *) "/bin/sh";
  sh[1] = (char *) file;
  for (size_t i = 1; i <= n; i++)
    sh[i + 1] = argv[i];
  exec_one(x, sh[0], sh, envp);
  errno = ENOEXEC;
}

/* execvp(3) with the same results (the error of the last candidate, EACCES
 * when one was found but could not run, a script without #! run by
 * /bin/sh), but without an execve for each directory of PATH where the
 * program is not: every execve in a sandbox is a round trip to the
 * supervisor (seccomp notification, for the audit of program starts), so
 * a stat(2) skips the candidates that do not exist.  No allocation: it
 * runs in a child that shares its parent's memory. */
static void exec_search(const struct dsec_guest_exec *x, char *const argv[],
                        char *const envp[])
{
  const char *file = argv[0], *path = NULL, *p;
  size_t flen = strlen(file);
  bool eacces = false;

  if (!*file) {
    errno = ENOENT;
    return;
  }
  if (strchr(file, '/')) {
    struct stat st;
    /* (what execve would say, without a start to report) */
    if (x->started && stat(file, &st) < 0 &&
        (errno == ENOENT || errno == ENOTDIR))
      return;
    exec_one(x, file, argv, envp);
    if (errno == ENOEXEC)
      exec_script(x, file, argv, envp);
    return;
  }
  for (char *const *e = envp; *e; e++)
    if (strncmp(*e, "PATH=", 5) == 0) {
      path = *e + 5;
      break;
    }
  if (!path)
    path = "/bin:/usr/bin"; /* glibc's default */
  if (flen >= PATH_MAX) {
    errno = ENAMETOOLONG;
    return;
  }
  for (p = path;; p++) {
    const char *end = strchrnul(p, ':');
    size_t dlen = (size_t) (end - p);
    char cand[PATH_MAX + 1];
    struct stat st;

    if (dlen + 1 + flen < sizeof cand) {
      if (dlen) {
        memcpy(cand, p, dlen);
        cand[dlen++] = '/';
      }
      memcpy(cand + dlen, file, flen + 1);
      /* not there: no execve (what execve would say is ENOENT or
       * ENOTDIR, which execvp skips too); anything else, execve tells */
      if (stat(cand, &st) < 0 && (errno == ENOENT || errno == ENOTDIR))
        errno = ENOENT;
      else {
        exec_one(x, cand, argv, envp);
        switch (errno) {
        case ENOEXEC:
          /* execvp's fallback: a script without #! goes to the shell */
          exec_script(x, cand, argv, envp);
          return;
        case EACCES:
          eacces = true;
          break;
        case ENOENT: case ENOTDIR: case ESTALE: case ENODEV: case ETIMEDOUT:
          break;
        default:
          return;
        }
      }
    }
    if (!*end)
      break;
    p = end;
  }
  errno = eacces ? EACCES : ENOENT;
}

void dsec_guest_exec_reset(void)
{
  struct rlimit none = { 0, 0 };
  sigset_t all;

  /* the command's signals as a fresh program expects them */
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  for (int s = 1; s < NSIG; s++)
    signal(s, SIG_DFL);
  setsid();
  /* no core dumps: a crashing program's memory stays in the sandbox (and
   * no disk fills with them); the hard limit too, for good */
  if (setrlimit(RLIMIT_CORE, &none) < 0)
    _exit(DSEC_EXIT_INTERNAL);
}

_Noreturn void dsec_guest_exec(const struct dsec_guest_exec *x)
{
  if (!x->reset)
    dsec_guest_exec_reset();
  if (x->tty) {
    /* the terminal: opened as the session's leader, it is its controlling
     * one */
    int t = open(x->tty, O_RDWR | O_CLOEXEC);
    if (t < 0 || ioctl(t, TIOCSCTTY, 0) < 0 || dup2(t, 0) < 0 ||
        dup2(t, 1) < 0 || dup2(t, 2) < 0)
      _exit(DSEC_EXIT_INTERNAL);
  } else if (dup2(x->fds[0], 0) < 0 || dup2(x->fds[1], 1) < 0 ||
             dup2(x->fds[2], 2) < 0)
    _exit(DSEC_EXIT_INTERNAL);
  /* everything inherited goes, but the backend's channel at 3 (and the
   * listener at 4) */
  if (x->keep >= 0) {
    if (x->keep != 3 && dup2(x->keep, 3) < 0)
      _exit(DSEC_EXIT_INTERNAL);
    if (x->keep_listener &&
        (x->listener <= 3 ||
         (x->listener != 4 && dup3(x->listener, 4, O_CLOEXEC) < 0)))
      _exit(DSEC_EXIT_INTERNAL);
    syscall(SYS_close_range, x->keep_listener ? 5U : 4U, ~0U, 0U);
  } else
    syscall(SYS_close_range, 3U, ~0U, 0U);
  if (!x->argv || !x->argv[0] || !x->envp)
    _exit(DSEC_EXIT_INTERNAL);
  if (x->enter)
    x->enter(x->ud, x->cwd ? x->cwd : "/");
  dsec_guest_exec_finish(x);
}

_Noreturn void dsec_guest_exec_finish(const struct dsec_guest_exec *x)
{
  if (x->cwd && chdir(x->cwd) < 0) {
    dprintf(2, "dsec: cannot enter %s: %s\n", x->cwd, strerror(errno));
    _exit(DSEC_EXIT_CANNOT_EXEC);
  }
  if (x->drop)
    x->drop(x->ud, x->uid, x->gid);
  else if (setgroups(0, NULL) < 0 || setresgid(x->gid, x->gid, x->gid) < 0 ||
           setresuid(x->uid, x->uid, x->uid) < 0) {
    dprintf(2, "dsec: cannot switch to user %u:%u: %s\n", x->uid, x->gid,
            strerror(errno));
    _exit(DSEC_EXIT_INTERNAL);
  }
  if (x->last)
    x->last(x->ud);
  if (x->builtin)
    _exit(builtin(x));
  environ = (char **) x->envp;
  exec_search(x, x->argv, (char *const *) x->envp);
  dprintf(2, "dsec: %s: %s\n", x->argv[0], strerror(errno));
  _exit(errno == ENOENT || errno == ENOTDIR ? DSEC_EXIT_NOT_FOUND
                                            : DSEC_EXIT_CANNOT_EXEC);
}

size_t dsec_guest_capture_add(struct dsec_guest_capture *c, const char *buf,
                              size_t n, size_t cap)
{
  size_t keep = 0;
  if (c->len < cap) {
    char *d;
    keep = n < cap - c->len ? n : cap - c->len;
    d = realloc(c->data, c->len + keep + 1);
    if (!d)
      keep = 0; /* counted, not kept */
    else {
      c->data = d;
      memcpy(c->data + c->len, buf, keep);
      c->len += keep;
    }
  }
  c->total += n;
  return keep;
}
