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
