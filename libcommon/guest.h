/* The guest side: what runs inside a sandbox, one source for every
 * backend.  Compiled into libcommon for the container's init
 * (container.c) and into the static dsec-agent, PID 1 of a VM's guest, so
 * it uses libc and jansson only, never prints, and returns its errors.
 *
 * protect and hide are made the same way in both, a failure of either is
 * fatal to the sandbox's setup, and every exec starts the same way: a new
 * session, every signal disposition and the mask at their defaults (a
 * SIGPIPE ignored by its parent would reach the command), no core dumps,
 * the request's descriptors at 0-2 and nothing else, 126 for a working
 * directory it cannot enter or a file it cannot execute, 127 for a
 * command not found, 125 when dsec cannot set it up. */
#ifndef DSEC_GUEST_H
#define DSEC_GUEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

/* Makes each path of protect (an array of strings, absolute, clean)
 * readable but unchangeable: a read-only, nosuid, nodev bind of itself,
 * recursive, with every directory above it a mount point of its own (the
 * kernel refuses to rename or remove a mount point, so no parent can be
 * moved away and replaced by a look-alike, and a link out of it crosses
 * mounts).  A path that does not exist, or that runs through a symbolic
 * link (which could later be pointed elsewhere), is the spec's mistake.
 * 0, or -1 with why (len bytes) and *bad_input set for the spec's
 * mistakes. */
int dsec_guest_protect(json_t *protect, char *why, size_t len,
                       bool *bad_input);

/* Covers each path of hide: a directory by an empty read-only tmpfs of
 * mode 000, a file by an empty file of mode 000 (made in scratch, a
 * writable directory, and removed once bound).  A missing path is left
 * alone.  0, or -1 with why. */
int dsec_guest_hide(json_t *hide, const char *scratch, char *why, size_t len);

/* A recursive read-only, nosuid, nodev bind of path onto itself: 0 or -1
 * (errno). */
int dsec_guest_bind_ro(const char *path);

/* Brings the loopback interface up. */
void dsec_guest_loopback_up(void);

/* How an exec starts (dsec_guest_exec). */
struct dsec_guest_exec {
  char *const *argv;
  char *const *envp;
  const char *cwd;          /* NULL: where we are */
  uid_t uid;
  gid_t gid;
  int fds[3];               /* become the command's 0, 1 and 2 */
  int keep;                 /* a descriptor left open at 3 (the backend's
                             * channel, for drop), or -1 */
  /* After the descriptors, before the working directory: namespaces of
   * the exec's own (may be NULL). */
  void (*enter)(void *ud, const char *cwd);
  /* The switch to uid:gid and whatever else the backend takes away
   * (capabilities, a seccomp filter); exits 125 itself when it cannot.
   * NULL: supplementary groups, gid and uid only. */
  void (*drop)(void *ud, uid_t uid, gid_t gid);
  /* Just before execve (may be NULL). */
  void (*last)(void *ud);
  void *ud;
  /* Instead of argv[0], one of dsec's own (the exec message's "builtin"):
   *   copy_in DST KEEP UID GID   a copy stream on stdin made at DST
   *                              (dsec_copy_receive; UID -1: as written)
   *   copy_out SRC               SRC as a copy stream on stdout
   * Its error is one line on stderr, its status 1. */
  const char *builtin;
  /* A terminal's other end (the exec message's "tty_path", allocated by
   * the parent with dsec_guest_openpty): stdin, stdout and stderr, and
   * the controlling terminal; fds are then closed unused.  NULL: none. */
  const char *tty;
  /* Non-zero: the fourth argument of the command's execve (see
   * dsec_seccomp_build_token), and started (if set) is told of each
   * execve of the command before it is made. */
  uint64_t token;
  void (*started)(void *ud, const char *path, char *const argv[]);
  /* The process already had dsec_guest_exec_reset. */
  bool reset;
  /* With keep: listener (above 3: 0 to 2 are filled first) is left open
   * at 4 too, close-on-exec, for the backend to hand over (a seccomp
   * filter's listener installed ahead). */
  bool keep_listener;
  int listener;
};

/* What dsec_guest_exec does first, for a process made ready ahead of its
 * request: default signal dispositions, none blocked, a session of its
 * own, no core dumps (exits 125 when it cannot). */
void dsec_guest_exec_reset(void);

/* A pseudo-terminal for an exec: its master (close-on-exec, non-blocking)
 * and the path of its other end in path (len bytes), given to uid:gid,
 * cols x rows.  -1 with errno. */
int dsec_guest_openpty(uid_t uid, gid_t gid, unsigned cols, unsigned rows,
                       char *path, size_t len);

/* Fills argv, envp, cwd, uid and gid of x from an exec message (its
 * "argv", "env", "cwd", "uid" and "gid"; the strings stay msg's). */
void dsec_guest_exec_from(struct dsec_guest_exec *x, json_t *msg);

/* In a child that is to become the command: never returns. */
_Noreturn void dsec_guest_exec(const struct dsec_guest_exec *x);
/* What dsec_guest_exec does after x->enter: the working directory,
 * x->drop, x->last and the command.  For an enter that goes on in another
 * process (a child it starts on a stack of its own). */
_Noreturn void dsec_guest_exec_finish(const struct dsec_guest_exec *x);

/* The host's messages to the agent: a JSON header line, then stdin_len
 * bytes (0 to DSEC_GUEST_STDIN_MAX) of payload.  dsec_guest_next takes the
 * next whole one from buf (len bytes received, not consumed yet) and
 * returns how many bytes it took, 0 when none is complete yet.  *req is
 * its header (new), NULL for one that is no JSON (skipped, no payload);
 * *bad is set for one whose stdin_len is out of range (skipped with its
 * header only: *req says whose it was).  The payload is the *plen bytes
 * after the header's newline.  A header without its newline past
 * DSEC_GUEST_HEADER_MAX bytes is garbage: all of buf is taken. */
#define DSEC_GUEST_HEADER_MAX (4u << 20)
#define DSEC_GUEST_STDIN_MAX (64LL << 20)
size_t dsec_guest_next(const char *buf, size_t len, json_t **req, size_t *plen,
                       bool *bad);

/* Output kept up to a cap, and counted past it. */
struct dsec_guest_capture {
  char *data;
  size_t len;
  unsigned long long total;
};
/* Adds n bytes of buf (at most cap kept): how many of them were kept. */
size_t dsec_guest_capture_add(struct dsec_guest_capture *c, const char *buf,
                              size_t n, size_t cap);

#endif
