/* The sandbox's seccomp filter, built once with libseccomp and exported as
 * BPF so that each exec installs it with one prctl(). */
#ifndef DSEC_SYSFILTER_H
#define DSEC_SYSFILTER_H

#include <linux/filter.h>

#include "error.h"

struct dsec_bpf {
  struct sock_filter *insns;
  unsigned short len;
};

/* Builds the default filter: see seccomp.c for the list and the reasons. */
int dsec_seccomp_build(struct dsec_bpf *out, struct dsec_error **err);
/* Installs it on the calling thread (needs no_new_privs or CAP_SYS_ADMIN);
 * async-signal-safe, for use between fork and exec. */
int dsec_seccomp_install(const struct dsec_bpf *f);
void dsec_bpf_clear(struct dsec_bpf *f);

/* The denied system calls, for documentation and tests (NULL-terminated). */
extern const char *const dsec_seccomp_denied[];

#endif
