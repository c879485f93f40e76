/* The sandbox's seccomp filter, built once with libseccomp and exported as
 * BPF so that each exec installs it with one prctl(). */
#ifndef DSEC_SYSFILTER_H
#define DSEC_SYSFILTER_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

struct dsec_bpf {
  struct sock_filter *insns;
  unsigned short len;
  /* a template (dsec_seccomp_cached with a token): the two instructions
   * that compare the token's high and low words, which
   * dsec_seccomp_set_token patches; 0 where not a template */
  unsigned short tok_hi, tok_lo;
};

/* What a filter does beyond the default list. */
enum {
  /* denied calls go to a user-notification listener (which answers them
   * with the same errors and records them); without, they fail at once */
  DSEC_SECCOMP_NOTIFY = 1 << 0,
  /* no setuid or setgid bit can be set (chmod, or a mode given to
   * open/creat/mknod): a sandbox with a read-write mount would otherwise
   * leave set-id files of the mount's owner on the host */
  DSEC_SECCOMP_NO_SETID = 1 << 1,
};

/* Builds the default filter: see sysfilter.c for the list and the
 * reasons; flags as above. */
int dsec_seccomp_build(struct dsec_bpf *out, unsigned flags,
                       struct dsec_error **err);
/* The same, where an execve whose fourth argument (unused by the kernel)
 * is token is not notified: the exec's own start, which its starter
 * reports itself.  token is a secret of the starter's (random, non-zero;
 * 0: none), never in reach of what runs in the sandbox. */
int dsec_seccomp_build_token(struct dsec_bpf *out, unsigned flags,
                             uint64_t token, struct dsec_error **err);
/* The same filters, compiled once per build and host: from dir's cache
 * of them (e.g. $DSEC_RUN/seccomp, made 0700) when it holds this build's
 * for flags, else compiled and put there (temp and rename; a file that is
 * torn, corrupt or of another build or kernel is compiled again).  With
 * token set, a template for dsec_seccomp_set_token: the filter of
 * dsec_seccomp_build_token with a placeholder token.  libseccomp takes
 * ~1 ms to compile one, every sandbox needs two, and they differ only in
 * the token.  The directory and its files are used only where they are
 * the caller's own and nobody else's to write.  Returns 1 (from the
 * cache), 0 (compiled) or -1 (error; a cache that cannot be written is
 * no error; EPROTO with a token: no template to be had, from this
 * libseccomp or without a cache: compile each filter instead). */
int dsec_seccomp_cached(struct dsec_bpf *out, unsigned flags, bool token,
                        const char *dir, struct dsec_error **err);
/* The token a template holds (its words are found by value, so they are
 * ones no other instruction of the filter holds: checked). */
#define DSEC_SECCOMP_TOKEN_PLACEHOLDER 0x64736563746f6b6eULL /* "dsectokn" */
/* Puts token into a copy of template (from dsec_seccomp_cached with a
 * token): out is then what dsec_seccomp_build_token would compile.  -1
 * (EINVAL) where template is not one. */
int dsec_seccomp_set_token(struct dsec_bpf *out, const struct dsec_bpf *tmpl,
                           uint64_t token, struct dsec_error **err);
/* Installs it on the calling thread (needs no_new_privs or CAP_SYS_ADMIN);
 * async-signal-safe, for use between fork and exec.  With listener set,
 * returns the new listener fd (a filter built with notify). */
int dsec_seccomp_install(const struct dsec_bpf *f, bool listener);

/* The error a denied call gets: EPERM, EOPNOTSUPP for the reflink ioctls
 * (so cp falls back to copying), EAFNOSUPPORT for a socket family. */
int dsec_seccomp_denial_errno(int nr, unsigned long arg1);
/* A name for a denied call, e.g. "keyctl" or "ioctl" (static). */
const char *dsec_seccomp_name(int nr);
void dsec_bpf_clear(struct dsec_bpf *f);

/* The denied system calls, for documentation and tests (NULL-terminated). */
extern const char *const dsec_seccomp_denied[];
/* The socket families a sandbox may open (AF_NETLINK: NETLINK_ROUTE only);
 * -1-terminated. */
extern const int dsec_seccomp_socket_families[];

#endif
