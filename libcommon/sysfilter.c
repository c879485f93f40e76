#include <config.h>

#include "sysfilter.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <zlib.h>

#include "fsutil.h"
#include "store.h"

/* Kernel attack surface a sandboxed agent has no use for.  Each is EPERM,
 * like a missing capability, so programs take their usual fallback. */
const char *const dsec_seccomp_denied[] = {
  /* keyrings are not namespaced */
  "add_key", "keyctl", "request_key",
  /* bpf, perf and userfaultfd are the usual kernel exploit primitives */
  "bpf", "perf_event_open", "userfaultfd",
  /* io_uring bypasses seccomp for the operations it runs */
  "io_uring_setup", "io_uring_enter", "io_uring_register",
  "kexec_load", "kexec_file_load", "init_module", "finit_module",
  "delete_module", "create_module", "query_module", "get_kernel_syms",
  /* file handles open files by inode, past mount boundaries */
  "open_by_handle_at", "name_to_handle_at",
  /* the mount family: the sandbox's mounts are fixed */
  "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree",
  "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
  /* namespaces: no nested user namespaces, no joining others */
  "setns",
  "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
  "acct", "swapon", "swapoff", "reboot", "syslog", "lookup_dcookie",
  "quotactl", "quotactl_fd", "iopl", "ioperm", "vm86", "vm86old",
  "nfsservctl", "uselib", "pciconfig_read", "pciconfig_write",
  "pciconfig_iobase", "settimeofday", "clock_settime", "clock_adjtime",
  "adjtimex", "stime", "fanotify_init", "lsm_set_self_attr",
  NULL,
};

/* ioctl commands matched on their low 16 bits (type and number), whatever
 * the direction and size bits say. */
static const struct {
  unsigned long cmd16;
  int errnum;
} denied_ioctls[] = {
  /* TIOCSTI/TIOCLINUX: typing into a terminal outside the sandbox */
  { 0x5412, EPERM },
  { 0x541c, EPERM },
  /* XFS_IOC_SWAPEXT and XFS_IOC_EXCHANGE_RANGE: extent swaps past
   * permissions (seen in production) */
  { 0x586d, EPERM },
  { 0x5881, EPERM },
  /* FICLONE, FICLONERANGE, FIDEDUPERANGE: share extents with protected
   * files.  EOPNOTSUPP makes cp --reflink=auto copy instead. */
  { 0x9409, EOPNOTSUPP },
  { 0x940d, EOPNOTSUPP },
  { 0x9436, EOPNOTSUPP },
};

/* Sockets: the families a program in a sandbox uses.  Every other one
 * (AF_PACKET, AF_VSOCK, AF_ALG, AF_BLUETOOTH, AF_XDP, the netlink families
 * but route ...) is kernel attack surface or a way past the network
 * policy. */
const int dsec_seccomp_socket_families[] = { AF_UNIX, AF_INET, AF_INET6,
                                             AF_NETLINK, -1 };

int dsec_seccomp_denial_errno(int nr, unsigned long arg1)
{
  if (nr == SCMP_SYS(socket) || nr == SCMP_SYS(socketpair))
    return EAFNOSUPPORT;
  if (nr == SCMP_SYS(ioctl))
    for (size_t i = 0; i < sizeof denied_ioctls / sizeof denied_ioctls[0]; i++)
      if ((arg1 & 0xffffUL) == denied_ioctls[i].cmd16)
        return denied_ioctls[i].errnum;
  return EPERM;
}

const char *dsec_seccomp_name(int nr)
{
  static __thread char buf[32];
  char *n = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
  if (!n) {
    snprintf(buf, sizeof buf, "syscall_%d", nr);
    return buf;
  }
  snprintf(buf, sizeof buf, "%s", n);
  free(n);
  return buf;
}

static bool family_allowed(int f)
{
  for (size_t i = 0; dsec_seccomp_socket_families[i] >= 0; i++)
    if (dsec_seccomp_socket_families[i] == f)
      return true;
  return false;
}

/* socket() and socketpair() of a family not allowed.  The family is an
 * int: compared on the low 32 bits only, so high garbage cannot slip one
 * past (the kernel ignores it).  Families are below 64 (AF_MAX). */
static int deny_socket_families(scmp_filter_ctx ctx, uint32_t deny)
{
  int r = 0;
  for (int f = 0; f < 64 && r == 0; f++) {
    if (family_allowed(f))
      continue;
    r = seccomp_rule_add(ctx, deny, SCMP_SYS(socket), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffUL, f));
    if (r == 0)
      r = seccomp_rule_add(ctx, deny, SCMP_SYS(socketpair), 1,
                           SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffUL, f));
  }
  /* netlink: route only (addresses, links, routes: what getaddrinfo and
   * ip use); a non-zero protocol in the low 32 bits is another family */
  if (r == 0)
    r = seccomp_rule_add(ctx, deny, SCMP_SYS(socket), 2,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffUL, AF_NETLINK),
                         SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE));
  return r;
}

/* A mode argument with a set-id bit. */
static int deny_setid_mode(scmp_filter_ctx ctx, uint32_t deny, int nr,
                           unsigned arg)
{
  static const unsigned long bits[] = { S_ISUID, S_ISGID };
  int r = 0;
  if (nr < 0)
    return 0; /* not on this architecture */
  for (size_t i = 0; i < ARRAY_SIZE(bits) && r == 0; i++) {
    struct scmp_arg_cmp c = { arg, SCMP_CMP_MASKED_EQ, bits[i], bits[i] };
    r = seccomp_rule_add_array(ctx, deny, nr, 1, &c);
  }
  return r;
}

/* The same when flags (argument flag_arg) create a file. */
static int deny_setid_create(scmp_filter_ctx ctx, uint32_t deny, int nr,
                             unsigned flag_arg, unsigned mode_arg)
{
  static const unsigned long bits[] = { S_ISUID, S_ISGID };
  static const unsigned long creates[] = { O_CREAT, __O_TMPFILE };
  int r = 0;
  for (size_t i = 0; i < ARRAY_SIZE(bits) && r == 0; i++)
    for (size_t k = 0; k < ARRAY_SIZE(creates) && r == 0; k++) {
      struct scmp_arg_cmp c[2] = {
        { flag_arg, SCMP_CMP_MASKED_EQ, creates[k], creates[k] },
        { mode_arg, SCMP_CMP_MASKED_EQ, bits[i], bits[i] },
      };
      r = seccomp_rule_add_array(ctx, deny, nr, 2, c);
    }
  return r;
}

static int deny_setid(scmp_filter_ctx ctx, uint32_t deny)
{
  int fchmodat2 = seccomp_syscall_resolve_name("fchmodat2");
  int r = 0;
#ifdef __x86_64__
  if (fchmodat2 < 0)
    fchmodat2 = 452; /* Linux 6.6; older libseccomp tables lack it */
#endif
  if (r == 0)
    r = deny_setid_mode(ctx, deny, SCMP_SYS(chmod), 1);
  if (r == 0)
    r = deny_setid_mode(ctx, deny, SCMP_SYS(fchmod), 1);
  if (r == 0)
    r = deny_setid_mode(ctx, deny, SCMP_SYS(fchmodat), 2);
  if (r == 0)
    r = deny_setid_mode(ctx, deny, fchmodat2, 2);
  if (r == 0)
    r = deny_setid_mode(ctx, deny, SCMP_SYS(creat), 1);
  if (r == 0)
    r = deny_setid_mode(ctx, deny, SCMP_SYS(mknod), 1);
  if (r == 0)
    r = deny_setid_mode(ctx, deny, SCMP_SYS(mknodat), 2);
  if (r == 0)
    r = deny_setid_create(ctx, deny, SCMP_SYS(open), 1, 2);
  if (r == 0)
    r = deny_setid_create(ctx, deny, SCMP_SYS(openat), 2, 3);
  /* openat2 passes its mode in memory the filter cannot read: ENOSYS, and
   * callers fall back to openat (libc does not use it for open) */
  if (r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0);
  return r;
}

int dsec_seccomp_build(struct dsec_bpf *out, unsigned flags,
                       struct dsec_error **err)
{
  return dsec_seccomp_build_token(out, flags, 0, err);
}

int dsec_seccomp_build_token(struct dsec_bpf *out, unsigned flags,
                             uint64_t token, struct dsec_error **err)
{
  bool notify = flags & DSEC_SECCOMP_NOTIFY;
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  uint32_t deny = notify ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(EPERM);
  char *buf = NULL;
  size_t len = 0;
  int r = 0;

  if (!ctx)
    return dsec_fail(err, ENOMEM, "seccomp_init failed");
  /* 32-bit and x32 system calls are not in the filter's arch: killed */
  seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  /* a binary tree of the system calls instead of a list: every exec
   * installs the filter, and the kernel then runs it for each system call
   * number to build its cache of always-allowed calls (under a spin lock);
   * down a list that is ~200 instructions per number, down the tree ~15
   * (the install went from ~150 to ~95 us here) */
  seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  for (const char *const *n = dsec_seccomp_denied; *n && r == 0; n++) {
    int nr = seccomp_syscall_resolve_name(*n);
    if (nr == __NR_SCMP_ERROR || nr < 0)
      continue; /* not on this architecture */
    r = seccomp_rule_add(ctx, deny, nr, 0);
  }
  /* unshare/clone of a new user namespace: its root would get every
   * capability over new mounts and network objects */
  if (r == 0)
    r = seccomp_rule_add(ctx, deny, SCMP_SYS(unshare), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                 CLONE_NEWUSER));
  if (r == 0)
    r = seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                 CLONE_NEWUSER));
  /* clone3 passes its flags in memory the filter cannot read: ENOSYS makes
   * libc fall back to clone, which is checked above (not an attack, so
   * not notified: libc tries it for every thread) */
  if (r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  for (size_t i = 0; i < sizeof denied_ioctls / sizeof denied_ioctls[0] && r == 0;
       i++)
    r = seccomp_rule_add(ctx, notify ? SCMP_ACT_NOTIFY
                                     : SCMP_ACT_ERRNO(denied_ioctls[i].errnum),
                         SCMP_SYS(ioctl), 1,
                         SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffUL,
                                 denied_ioctls[i].cmd16));
  if (r == 0)
    r = deny_socket_families(ctx, notify ? SCMP_ACT_NOTIFY
                                         : SCMP_ACT_ERRNO(EAFNOSUPPORT));
  if (r == 0 && (flags & DSEC_SECCOMP_NO_SETID))
    r = deny_setid(ctx, deny);
  /* with a listener, every program start is reported too (and let run):
   * the audit trail's "process" events */
  if (notify && r == 0 && token)
    r = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(execve), 1,
                         SCMP_A3(SCMP_CMP_NE, token));
  else if (notify && r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(execve), 0);
  if (notify && r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(execveat), 0);
  if (r < 0) {
    seccomp_release(ctx);
    return dsec_fail(err, -r, "cannot build the seccomp filter");
  }
  {
    int fd = memfd_create("dsec-seccomp", MFD_CLOEXEC);
    off_t size;
    if (fd < 0 || seccomp_export_bpf(ctx, fd) < 0 ||
        (size = lseek(fd, 0, SEEK_END)) <= 0) {
      int e = errno;
      if (fd >= 0)
        close(fd);
      seccomp_release(ctx);
      return dsec_fail(err, e, "cannot export the seccomp filter");
    }
    len = (size_t) size;
    buf = xmalloc(len);
    if (pread(fd, buf, len, 0) != (ssize_t) len) {
      int e = errno;
      close(fd);
      free(buf);
      seccomp_release(ctx);
      return dsec_fail(err, e, "cannot read the seccomp filter");
    }
    close(fd);
  }
  seccomp_release(ctx);
  out->insns = (struct sock_filter *) buf;
  out->len = (unsigned short) (len / sizeof(struct sock_filter));
  return 0;
}

/* ---- compiled once per build and host */

#define TOKEN_PLACEHOLDER DSEC_SECCOMP_TOKEN_PLACEHOLDER

/* A cache file: this header, the key (what made the filter: the build,
 * libseccomp, the kernel), then the instructions. */
struct cache_hdr {
  char magic[8];         /* "DSECBPF1" */
  uint32_t crc;          /* zlib crc32 of all that follows this field */
  uint32_t flags;        /* the filter's flags, with CACHE_TOKEN */
  uint16_t key_len;
  uint16_t len;          /* instructions */
  uint16_t tok_hi, tok_lo;
};

_Static_assert(sizeof(struct cache_hdr) == 24, "the cache's header is 24 bytes");

#define CACHE_TOKEN (1U << 31)
#define CACHE_MAX (sizeof(struct cache_hdr) + 1024 + BPF_MAXINSNS * 8)

/* The GNU build id of a loaded object, as hex into out (129 bytes); ""
 * where it has none. */
static void object_build_id(const struct dl_phdr_info *info, char *out)
{
  out[0] = '\0';
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    const char *p = (const char *) (info->dlpi_addr + ph->p_vaddr);
    const char *end = p + ph->p_memsz;
    if (ph->p_type != PT_NOTE)
      continue;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *n = (const ElfW(Nhdr) *) p;
      const unsigned char *desc =
        (const unsigned char *) p + sizeof *n + ((n->n_namesz + 3) & ~3U);
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
          memcmp(p + sizeof *n, "GNU", 4) == 0 && n->n_descsz <= 64 &&
          (const char *) desc + n->n_descsz <= end) {
        for (unsigned k = 0; k < n->n_descsz; k++)
          sprintf(out + 2 * k, "%02x", desc[k]);
        return;
      }
      p = (const char *) desc + ((n->n_descsz + 3) & ~3U);
    }
  }
}

struct build_ids {
  bool first;
  char program[129], libseccomp[129];
};

static int note_build_id(struct dl_phdr_info *info, size_t size, void *data)
{
  struct build_ids *b = data;
  const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  (void) size;
  /* the first object is the program; a libseccomp of its own is the
   * other thing the filters depend on (linked in, the program's id
   * covers it) */
  if (b->first) {
    object_build_id(info, b->program);
    b->first = false;
  } else if (strncmp(slash ? slash + 1 : info->dlpi_name ? info->dlpi_name : "",
                     "libseccomp.so", 13) == 0)
    object_build_id(info, b->libseccomp);
  return 0;
}

/* What the filters of this process depend on: the program's build (its
 * GNU build id), libseccomp's (its version, and its build id where it is
 * a shared library: a distribution's update keeps the version), the
 * kernel.  NULL where the program has no build id: nothing is cached
 * then.  Made once per process (a create takes two filters). */
static const char *cache_key(void)
{
  static char *key;
  static bool made;
  struct build_ids b = { .first = true };
  const struct scmp_version *v = seccomp_version();
  struct utsname u;

  if (made)
    return key;
  made = true;
  dl_iterate_phdr(note_build_id, &b);
  if (b.program[0] && uname(&u) == 0)
    key = xasprintf("build %s libseccomp %u.%u.%u %s kernel %s %s %s",
                    b.program, v ? v->major : 0, v ? v->minor : 0,
                    v ? v->micro : 0,
                    b.libseccomp[0] ? b.libseccomp : "static", u.release,
                    u.version, u.machine);
  return key;
}

/* The two instructions comparing the placeholder's words, each the only
 * instruction with its value; false where there are not. */
static bool find_token(const struct dsec_bpf *f, uint64_t token,
                       unsigned short *hi, unsigned short *lo)
{
  unsigned nhi = 0, nlo = 0;
  for (unsigned i = 0; i < f->len; i++) {
    const struct sock_filter *in = &f->insns[i];
    if (in->k == (uint32_t) (token >> 32))
      nhi++, *hi = (unsigned short) i;
    if (in->k == (uint32_t) token)
      nlo++, *lo = (unsigned short) i;
  }
  return nhi == 1 && nlo == 1 &&
         f->insns[*hi].code == (BPF_JMP | BPF_JEQ | BPF_K) &&
         f->insns[*lo].code == (BPF_JMP | BPF_JEQ | BPF_K);
}

static void patch_token(struct dsec_bpf *f, uint64_t token)
{
  f->insns[f->tok_hi].k = (uint32_t) (token >> 32);
  f->insns[f->tok_lo].k = (uint32_t) token;
}

static bool same_filter(const struct dsec_bpf *a, const struct dsec_bpf *b)
{
  return a->len == b->len &&
         memcmp(a->insns, b->insns, a->len * sizeof *a->insns) == 0;
}

/* Compiles the template: the filter with the placeholder, whose token
 * instructions, patched with another token, must give what libseccomp
 * compiles for that one. */
static int compile_template(struct dsec_bpf *out, unsigned flags,
                            struct dsec_error **err)
{
  const uint64_t other = ~TOKEN_PLACEHOLDER;
  struct dsec_bpf check = { 0 };
  bool ok;

  if (dsec_seccomp_build_token(out, flags, TOKEN_PLACEHOLDER, err) < 0)
    return -1;
  if (dsec_seccomp_build_token(&check, flags, other, err) < 0) {
    dsec_bpf_clear(out);
    return -1;
  }
  ok = find_token(out, TOKEN_PLACEHOLDER, &out->tok_hi, &out->tok_lo);
  if (ok) {
    patch_token(out, other);
    ok = same_filter(out, &check);
    patch_token(out, TOKEN_PLACEHOLDER);
  }
  dsec_bpf_clear(&check);
  if (!ok) {
    dsec_bpf_clear(out);
    return dsec_fail(err, EPROTO, "libseccomp compiles the exec token "
                                  "into a filter of another shape");
  }
  return 0;
}

static uint32_t cache_crc(const struct cache_hdr *h, size_t len)
{
  const unsigned char *after = (const unsigned char *) &h->crc + sizeof h->crc;
  return (uint32_t) crc32(0L, after,
                          (uInt) (len - (size_t) (after -
                                                  (const unsigned char *) h)));
}

/* The cached filter of name, or false. */
/* fd is ours alone to write (the cache is trusted for where it is: a
 * file someone else could write is not read, nor written to). */
static bool ours(int fd, mode_t type)
{
  struct stat st;
  return fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == type &&
         st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

static bool cache_read(int dfd, const char *name, const char *key,
                       uint32_t flags, struct dsec_bpf *out)
{
  _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW |
                                               O_NONBLOCK | O_CLOEXEC);
  _cleanup_free_ char *buf = NULL;
  struct cache_hdr h;
  size_t klen = strlen(key);
  ssize_t n;

  if (fd < 0 || !ours(fd, S_IFREG))
    return false;
  buf = xmalloc(CACHE_MAX);
  if ((n = read(fd, buf, CACHE_MAX)) < (ssize_t) sizeof h)
    return false;
  memcpy(&h, buf, sizeof h);
  if (memcmp(h.magic, "DSECBPF1", 8) != 0 || h.flags != flags ||
      h.key_len != klen || h.len == 0 || h.len > BPF_MAXINSNS ||
      (size_t) n != sizeof h + klen + h.len * sizeof(struct sock_filter) ||
      memcmp(buf + sizeof h, key, klen) != 0 ||
      cache_crc((struct cache_hdr *) buf, (size_t) n) != h.crc)
    return false;
  out->len = h.len;
  out->insns = xmalloc(h.len * sizeof *out->insns);
  memcpy(out->insns, buf + sizeof h + klen, h.len * sizeof *out->insns);
  if (flags & CACHE_TOKEN) {
    if (!find_token(out, TOKEN_PLACEHOLDER, &out->tok_hi, &out->tok_lo) ||
        out->tok_hi != h.tok_hi || out->tok_lo != h.tok_lo) {
      dsec_bpf_clear(out);
      return false;
    }
  }
  return true;
}

static void cache_write(int dfd, const char *name, const char *key,
                        uint32_t flags, const struct dsec_bpf *f)
{
  size_t klen = strlen(key), ilen = f->len * sizeof *f->insns;
  size_t len = sizeof(struct cache_hdr) + klen + ilen;
  _cleanup_free_ char *buf = xmalloc(len);
  struct cache_hdr h = { .flags = flags, .key_len = (uint16_t) klen,
                         .len = f->len, .tok_hi = f->tok_hi,
                         .tok_lo = f->tok_lo };

  memcpy(h.magic, "DSECBPF1", 8);
  memcpy(buf, &h, sizeof h);
  memcpy(buf + sizeof h, key, klen);
  memcpy(buf + sizeof h + klen, f->insns, ilen);
  ((struct cache_hdr *) buf)->crc = cache_crc((struct cache_hdr *) buf, len);
  /* a cache: a crash that loses it costs a compile */
  dsec_write_file_replace(dfd, name, buf, len, 0600, NULL);
}

int dsec_seccomp_cached(struct dsec_bpf *out, unsigned flags, bool token,
                        const char *dir, struct dsec_error **err)
{
  const char *key = cache_key();
  _cleanup_free_ char *name = NULL;
  _cleanup_close_ int dfd = -1;
  uint32_t cflags = flags | (token ? CACHE_TOKEN : 0);

  *out = (struct dsec_bpf){ 0 };
  if (key) {
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && errno == ENOENT && dsec_private_dir(dir, NULL) == 0)
      dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd >= 0 && !ours(dfd, S_IFDIR))
      close(dsec_steal_fd(&dfd));
  }
  /* no cache to keep a template in: each init compiles its own, which is
   * one compile, where a template would be three */
  if (dfd < 0 && token)
    return dsec_fail(err, EPROTO, "no cache of seccomp filters at %s", dir);
  name = xasprintf("filter-%x.bpf", cflags);
  if (dfd >= 0 && cache_read(dfd, name, key, cflags, out))
    return 1;
  if ((token ? compile_template(out, flags, err)
             : dsec_seccomp_build(out, flags, err)) < 0)
    return -1;
  if (dfd >= 0)
    cache_write(dfd, name, key, cflags, out);
  return 0;
}

int dsec_seccomp_set_token(struct dsec_bpf *out, const struct dsec_bpf *tmpl,
                           uint64_t token, struct dsec_error **err)
{
  unsigned short hi, lo;

  *out = (struct dsec_bpf){ 0 };
  if (!tmpl->insns || tmpl->tok_hi == tmpl->tok_lo ||
      tmpl->tok_hi >= tmpl->len || tmpl->tok_lo >= tmpl->len ||
      !find_token(tmpl, TOKEN_PLACEHOLDER, &hi, &lo) || hi != tmpl->tok_hi ||
      lo != tmpl->tok_lo)
    return dsec_fail(err, EINVAL, "not a seccomp filter template");
  out->len = tmpl->len;
  out->insns = xmalloc(tmpl->len * sizeof *out->insns);
  memcpy(out->insns, tmpl->insns, tmpl->len * sizeof *out->insns);
  out->tok_hi = tmpl->tok_hi;
  out->tok_lo = tmpl->tok_lo;
  patch_token(out, token);
  return 0;
}

int dsec_seccomp_install(const struct dsec_bpf *f, bool listener)
{
  struct sock_fprog prog = { .len = f->len, .filter = f->insns };
  return (int) syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                       listener ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
}

void dsec_bpf_clear(struct dsec_bpf *f)
{
  free(f->insns);
  *f = (struct dsec_bpf){ 0 };
}
