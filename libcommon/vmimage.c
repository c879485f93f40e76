#include <config.h>

#include "vmimage.h"

#include <archive.h>
#include <archive_entry.h>
#include "archive-lazy.h"
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "fsutil.h"
#include "json.h"
#include "lock.h"
#include "log.h"

/* Part of every key: bump it whenever what is built from the same inputs
 * changes (the initramfs layout, the module list, the extraction). */
#define VM_FORMAT "dsec-vm-boot/2"

#define KERNEL_MAX ((size_t) 1 << 30) /* room for an unstripped vmlinux */
#define AGENT_MAX ((size_t) 256 << 20)
#define MODULE_MAX ((size_t) 64 << 20)
#define MODDB_MAX ((size_t) 64 << 20) /* modules.dep, modules.builtin */
#define INDEX_MAX ((size_t) 1 << 20)
#define INDEX_ENTRIES 16
/* A bzImage's setup code, with the release string in it, is at most 64
 * sectors long. */
#define SETUP_MAX (64 * 512)
/* The note that announces a PVH entry point (xen/interface/elfnote.h). */
#define XEN_ELFNOTE_PHYS32_ENTRY 18

/* The drivers and filesystems the guest needs; their dependencies come
 * from modules.dep. */
static const char *const guest_modules[] = {
  /* ext4, jbd2 and libcrc32c only soft-depend on a crc32c implementation
   * (modules.softdep names an alias, not a module): it goes first */
  "crc32c_generic",
  "virtio_mmio", /* microvm */
  "virtio_pci",  /* q35 */
  "virtio_blk",
  "virtio_console",
  "virtio_balloon",
  "virtio_pmem",
  "nd_pmem",
  "erofs",
  "overlay",
  "ext4",
};

/* Loaded when the kernel has them: QEMU's pvpanic device (ACPI
 * QEMU0001), so that a guest's kernel panic reaches the host through the
 * monitor; without it a panic reads as a reboot. */
static const char *const guest_modules_optional[] = {
  "pvpanic_mmio",
};

static uint16_t le16(const unsigned char *p)
{
  return (uint16_t) (p[0] | p[1] << 8);
}

static uint32_t le32(const unsigned char *p)
{
  return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
         (uint32_t) p[3] << 24;
}

/* ---- the kernel */

struct kernel {
  char *path; /* the file QEMU would otherwise be given */
  char *release;
  char *moddir;
  bool elf;
  /* of errors about it: bad input when the user chose it through the
   * environment, a failure when it is the host's */
  int status;
};

static void kernel_clear(struct kernel *k)
{
  free(k->path);
  free(k->release);
  free(k->moddir);
}

enum kernel_kind {
  KERNEL_UNKNOWN,
  KERNEL_BZIMAGE,
  KERNEL_ELF,
};

/* What p, the start of a kernel file (its setup code at least), is.  For
 * a bzImage *release (new, or NULL) is the first word of the string that
 * the kernel_version field (0x20e) points to, 0x200 bytes on:
 * "6.1.0-57-amd64 (debian-kernel@...) #1 SMP ...". */
static enum kernel_kind kernel_probe(const unsigned char *p, size_t len,
                                     char **release)
{
  size_t setup, ver, end;

  *release = NULL;
  if (len >= SELFMAG && memcmp(p, ELFMAG, SELFMAG) == 0)
    return KERNEL_ELF;
  /* 2.08 is the first protocol with payload_offset and payload_length */
  if (len < 0x250 || memcmp(p + 0x202, "HdrS", 4) != 0 ||
      le16(p + 0x206) < 0x208)
    return KERNEL_UNKNOWN;
  setup = (size_t) ((p[0x1f1] ? p[0x1f1] : 4) + 1) * 512;
  ver = le16(p + 0x20e);
  if (ver == 0)
    return KERNEL_BZIMAGE;
  ver += 0x200;
  if (setup > len)
    setup = len;
  for (end = ver; end < setup && p[end] != ' ' && p[end] != '\0'; end++)
    ;
  if (end < setup && end > ver)
    *release = xstrndup((const char *) p + ver, end - ver);
  return KERNEL_BZIMAGE;
}

/* It names a directory under /lib/modules. */
static bool release_valid(const char *r)
{
  size_t n = strlen(r);

  if (n == 0 || n > 128 || strcmp(r, ".") == 0 || strcmp(r, "..") == 0)
    return false;
  for (; *r; r++)
    if (*r <= ' ' || *r > '~' || *r == '/')
      return false;
  return true;
}

static int probe_file(const char *path, int status, enum kernel_kind *kind,
                      char **release, struct dsec_error **err)
{
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  unsigned char head[SETUP_MAX];
  ssize_t n;

  *kind = KERNEL_UNKNOWN;
  *release = NULL;
  if (fd < 0)
    return dsec_error_set(err, status, errno, "cannot open %s", path);
  n = pread(fd, head, sizeof head, 0);
  if (n < 0)
    return dsec_error_set(err, status, errno, "cannot read %s", path);
  *kind = kernel_probe(head, (size_t) n, release);
  return 0;
}

/* "vmlinux-6.1.0-57-amd64" -> "6.1.0-57-amd64" (new), else NULL. */
static char *release_from_name(const char *path)
{
  const char *b = strrchr(path, '/');

  b = b ? b + 1 : path;
  if ((dsec_str_has_prefix(b, "vmlinux-") ||
       dsec_str_has_prefix(b, "vmlinuz-")) &&
      b[8])
    return xstrdup(b + 8);
  return NULL;
}

static int kernel_from_env(struct kernel *k, const char *env,
                           struct dsec_error **err)
{
  const char *mods = getenv("DSEC_VM_MODULES");
  const char *relenv = getenv("DSEC_VM_RELEASE");
  _cleanup_free_ char *rel = NULL;
  enum kernel_kind kind;
  int ret;

  k->status = DSEC_EXIT_INPUT;
  k->path = realpath(env, NULL);
  if (!k->path)
    return dsec_error_set(err, DSEC_EXIT_INPUT, errno, "DSEC_VM_KERNEL=%s",
                          env);
  ret = probe_file(k->path, DSEC_EXIT_INPUT, &kind, &rel, err);
  if (ret < 0)
    return dsec_error_wrap(err, "DSEC_VM_KERNEL");
  if (kind == KERNEL_UNKNOWN)
    return dsec_bad_input(err,
                          "DSEC_VM_KERNEL=%s is neither a bzImage nor an "
                          "ELF vmlinux",
                          env);
  k->elf = kind == KERNEL_ELF;
  if (k->elf) {
    /* a vmlinux has no header to read the release from; its name may
     * have it where the symlink pointing at it does not, or the reverse */
    if (relenv && *relenv)
      rel = xstrdup(relenv);
    else
      rel = release_from_name(env);
    if (!rel)
      rel = release_from_name(k->path);
    if (!rel)
      return dsec_bad_input(err,
                            "cannot tell the release of DSEC_VM_KERNEL=%s: "
                            "name it vmlinux-<release> or set "
                            "DSEC_VM_RELEASE",
                            env);
  } else if (!rel)
    return dsec_bad_input(err, "DSEC_VM_KERNEL=%s: its header has no release",
                          env);
  if (!release_valid(rel))
    return dsec_bad_input(err, "DSEC_VM_KERNEL=%s: invalid release \"%s\"",
                          env, rel);
  k->moddir = mods && *mods ? xstrdup(mods)
                            : xasprintf("/lib/modules/%s", rel);
  k->release = steal_pointer(&rel);
  return 0;
}

static int cmp_version_desc(const void *a, const void *b)
{
  return strverscmp(*(char *const *) b, *(char *const *) a);
}

/* The newest /boot/vmlinuz-<version> whose modules are installed: a
 * kernel package whose modules were removed, or one installed without
 * them, cannot run the guest. */
static int kernel_from_boot(struct kernel *k, struct dsec_error **err)
{
  _cleanup_closedir_ DIR *d = opendir("/boot");
  struct dirent *de;
  char **v = NULL;
  size_t n = 0;
  bool found = false;

  k->status = DSEC_EXIT_FAILURE;
  while (d && (de = readdir(d))) {
    if (!dsec_str_has_prefix(de->d_name, "vmlinuz-") || !de->d_name[8])
      continue;
    v = xrealloc(v, (n + 1) * sizeof *v);
    v[n++] = xstrdup(de->d_name + 8);
  }
  if (n > 1)
    qsort(v, n, sizeof *v, cmp_version_desc);
  for (size_t i = 0; i < n && !found; i++) {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_free_ char *path = xasprintf("/boot/vmlinuz-%s", v[i]);
    _cleanup_free_ char *rel = NULL;
    _cleanup_free_ char *dep = NULL;
    enum kernel_kind kind;

    if (probe_file(path, DSEC_EXIT_FAILURE, &kind, &rel, &e) < 0 ||
        kind == KERNEL_UNKNOWN) {
      dsec_debug("guest kernel: skipping %s: %s", path,
                 e ? e->msg : "not a kernel");
      continue;
    }
    if (!rel)
      rel = xstrdup(v[i]);
    dep = xasprintf("/lib/modules/%s/modules.dep", rel);
    if (!release_valid(rel) || access(dep, R_OK) < 0) {
      dsec_debug("guest kernel: skipping %s: no %s", path, dep);
      continue;
    }
    k->elf = kind == KERNEL_ELF;
    k->moddir = xasprintf("/lib/modules/%s", rel);
    k->release = steal_pointer(&rel);
    k->path = steal_pointer(&path);
    found = true;
  }
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
  if (!found)
    return dsec_fail(err, 0, "no guest kernel: install linux-image-amd64 or "
                             "set DSEC_VM_KERNEL");
  return 0;
}

/* ---- ELF */

/* An x86-64 ELF image with sane program headers; *eh gets its header. */
static bool elf64_x86(const unsigned char *p, size_t len, Elf64_Ehdr *eh)
{
  if (len < sizeof *eh || memcmp(p, ELFMAG, SELFMAG) != 0)
    return false;
  memcpy(eh, p, sizeof *eh);
  return eh->e_ident[EI_CLASS] == ELFCLASS64 &&
         eh->e_ident[EI_DATA] == ELFDATA2LSB && eh->e_machine == EM_X86_64 &&
         eh->e_phentsize == sizeof(Elf64_Phdr) && eh->e_phoff <= len &&
         eh->e_phnum <= (len - eh->e_phoff) / sizeof(Elf64_Phdr);
}

static void elf64_phdr(const unsigned char *p, const Elf64_Ehdr *eh, size_t i,
                       Elf64_Phdr *ph)
{
  memcpy(ph, p + eh->e_phoff + i * sizeof *ph, sizeof *ph);
}

/* QEMU boots an ELF kernel only through its PVH entry point, which the
 * kernel announces in a Xen note (CONFIG_PVH). */
static bool elf_has_pvh(const unsigned char *p, size_t len,
                        const Elf64_Ehdr *eh)
{
  for (size_t i = 0; i < eh->e_phnum; i++) {
    Elf64_Phdr ph;
    size_t off, end;

    elf64_phdr(p, eh, i, &ph);
    if (ph.p_type != PT_NOTE || ph.p_offset > len ||
        ph.p_filesz > len - ph.p_offset)
      continue;
    off = ph.p_offset;
    end = off + ph.p_filesz;
    while (end - off >= 12) {
      size_t namesz = le32(p + off), descsz = le32(p + off + 4);
      uint32_t type = le32(p + off + 8);
      size_t name = off + 12;
      size_t nsz = (namesz + 3) & ~(size_t) 3, dsz = (descsz + 3) & ~(size_t) 3;

      if (nsz > end - name || dsz > end - name - nsz)
        break;
      if (namesz == 4 && memcmp(p + name, "Xen", 4) == 0 &&
          type == XEN_ELFNOTE_PHYS32_ENTRY)
        return true;
      off = name + nsz + dsz;
    }
  }
  return false;
}

/* ---- decompression */

struct buf {
  unsigned char *p;
  size_t len;
};

/* Decompresses in, whatever its compression: libarchive's raw format
 * over its xz, zstd, gzip, lz4, lzma and bzip2 filters, each built in
 * (never one of libarchive's external programs, which it would look up in
 * PATH).  hint (0: unknown) sizes the buffer; more than max bytes fail. */
static int decompress(const void *in, size_t len, size_t hint, size_t max,
                      const char *what, int status, struct buf *out,
                      struct dsec_error **err)
{
  struct archive *a = archive_read_new();
  struct archive_entry *e;
  /* one byte more than expected, so the read that finds the end does not
   * first grow the buffer */
  size_t cap = hint && hint < max ? hint + 1 : (size_t) 1 << 20, n = 0;
  unsigned char *p = NULL;
  int ret = -1;

  if (archive_read_support_filter_xz(a) != ARCHIVE_OK ||
      archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
      archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
      archive_read_support_filter_lz4(a) != ARCHIVE_OK ||
      archive_read_support_filter_lzma(a) != ARCHIVE_OK ||
      archive_read_support_filter_bzip2(a) != ARCHIVE_OK) {
    dsec_error_set(err, DSEC_EXIT_FAILURE, 0, "cannot decompress %s: this "
                   "libarchive lacks a built-in decompressor: %s", what,
                   archive_error_string(a));
    goto out;
  }
  archive_read_support_format_raw(a);
  if (archive_read_open_memory(a, in, len) != ARCHIVE_OK ||
      archive_read_next_header(a, &e) != ARCHIVE_OK) {
    dsec_error_set(err, status, 0, "cannot decompress %s: %s", what,
                   archive_error_string(a));
    goto out;
  }
  if (archive_filter_code(a, 0) == ARCHIVE_FILTER_NONE) {
    dsec_error_set(err, status, 0, "cannot decompress %s: unknown compression",
                   what);
    goto out;
  }
  p = xmalloc(cap);
  for (;;) {
    la_ssize_t r;
    if (n == cap) {
      if (cap >= max) {
        dsec_error_set(err, status, 0, "%s decompresses to more than %zu bytes",
                       what, max);
        goto out;
      }
      cap = cap > max / 2 ? max : cap * 2;
      p = xrealloc(p, cap);
    }
    r = archive_read_data(a, p + n, cap - n);
    if (r < 0) {
      dsec_error_set(err, status, 0, "cannot decompress %s: %s", what,
                     archive_error_string(a));
      goto out;
    }
    if (r == 0)
      break;
    n += (size_t) r;
  }
  out->p = steal_pointer(&p);
  out->len = n;
  ret = 0;
out:
  free(p);
  archive_read_free(a);
  return ret;
}

/* The ELF image inside a bzImage.  The setup header gives the compressed
 * payload's place: payload_offset (0x248) and payload_length (0x24c),
 * from the protected-mode code after the setup sectors.  The build
 * appends the uncompressed size to the payload (scripts/Makefile.lib
 * size_append), which the decompressor must not see. */
static int bzimage_extract(const unsigned char *p, size_t len,
                           const char *path, int status, struct buf *elf,
                           struct dsec_error **err)
{
  size_t base = (size_t) ((p[0x1f1] ? p[0x1f1] : 4) + 1) * 512;
  size_t off = le32(p + 0x248), plen = le32(p + 0x24c), want;
  _cleanup_free_ char *what = xasprintf("the kernel payload of %s", path);
  int ret;

  if (plen < 8 || base > len || off > len - base || plen > len - base - off)
    return dsec_error_set(err, status, 0,
                          "the setup header of %s gives no payload within "
                          "its %zu bytes (offset %zu, length %zu)",
                          path, len, base + off, plen);
  want = le32(p + base + off + plen - 4);
  ret = decompress(p + base + off, plen - 4, want, KERNEL_MAX, what, status,
                   elf, err);
  if (ret < 0)
    return ret;
  if (elf->len != want) {
    free(elf->p);
    elf->p = NULL;
    return dsec_error_set(err, status, 0,
                          "%s decompresses to %zu bytes, not the %zu it "
                          "declares",
                          what, elf->len, want);
  }
  return 0;
}

/* ---- modules */

struct modent {
  char *name; /* normalised: no directory or suffix, '-' as '_' */
  char *path; /* as in modules.dep */
  char *deps; /* the rest of its line */
  int mark;   /* topological sort: 0 new, 1 being placed, 2 placed */
};

struct moddb {
  char *dep;     /* modules.dep, cut up in place */
  char *builtin; /* modules.builtin */
  struct modent *v;
  size_t n;
  char **builtins;
  size_t nbuiltins;
};

static void moddb_clear(struct moddb *db)
{
  for (size_t i = 0; i < db->n; i++)
    free(db->v[i].name);
  for (size_t i = 0; i < db->nbuiltins; i++)
    free(db->builtins[i]);
  free(db->v);
  free(db->builtins);
  free(db->dep);
  free(db->builtin);
}

/* "kernel/fs/ext4/ext4.ko.xz" -> "ext4", as modprobe names modules (new). */
static char *module_name(const char *path, size_t len)
{
  const char *b = path + len;
  char *name, *ko;

  while (b > path && b[-1] != '/')
    b--;
  name = xstrndup(b, len - (size_t) (b - path));
  ko = strstr(name, ".ko");
  if (ko && (ko[3] == '\0' || ko[3] == '.'))
    *ko = '\0';
  for (char *c = name; *c; c++)
    if (*c == '-')
      *c = '_';
  return name;
}

static void moddb_parse(struct moddb *db)
{
  char *line = db->dep;

  while (line && *line) {
    char *nl = strchr(line, '\n');
    char *colon;
    if (nl)
      *nl = '\0';
    colon = strchr(line, ':');
    if (colon) {
      *colon = '\0';
      db->v = xrealloc(db->v, (db->n + 1) * sizeof *db->v);
      db->v[db->n++] = (struct modent) {
        .name = module_name(line, (size_t) (colon - line)),
        .path = line,
        .deps = colon + 1,
      };
    }
    line = nl ? nl + 1 : NULL;
  }
  line = db->builtin;
  while (line && *line) {
    size_t len = strcspn(line, "\n");
    if (len) {
      db->builtins = xrealloc(db->builtins,
                              (db->nbuiltins + 1) * sizeof *db->builtins);
      db->builtins[db->nbuiltins++] = module_name(line, len);
    }
    line += len + (line[len] == '\n');
  }
}

static struct modent *moddb_find(struct moddb *db, const char *name)
{
  for (size_t i = 0; i < db->n; i++)
    if (strcmp(db->v[i].name, name) == 0)
      return &db->v[i];
  return NULL;
}

static bool moddb_builtin(struct moddb *db, const char *name)
{
  for (size_t i = 0; i < db->nbuiltins; i++)
    if (strcmp(db->builtins[i], name) == 0)
      return true;
  return false;
}

struct order {
  struct modent **v;
  size_t n;
};

/* Appends name to o after what it depends on (depth first); built-in
 * modules need no loading. */
static int place(struct moddb *db, const char *name, const char *needed_by,
                 const char *moddir, int status, struct order *o,
                 struct dsec_error **err)
{
  struct modent *m = moddb_find(db, name);
  _cleanup_free_ char *deps = NULL;
  char **v = NULL;
  size_t n = 0;
  int ret = 0;

  if (!m) {
    if (moddb_builtin(db, name))
      return 0;
    if (needed_by)
      return dsec_error_set(err, status, 0,
                            "kernel module %s (needed by %s) is neither in "
                            "%s/modules.dep nor built in",
                            name, needed_by, moddir);
    return dsec_error_set(err, status, 0,
                          "kernel module %s is neither in %s/modules.dep nor "
                          "built in",
                          name, moddir);
  }
  if (m->mark == 2)
    return 0;
  if (m->mark == 1)
    return dsec_error_set(err, status, 0,
                          "%s/modules.dep: %s depends on itself", moddir,
                          name);
  m->mark = 1;
  deps = xstrdup(m->deps);
  for (char *save = NULL, *t = strtok_r(deps, " \t", &save); t;
       t = strtok_r(NULL, " \t", &save)) {
    v = xrealloc(v, (n + 1) * sizeof *v);
    v[n++] = module_name(t, strlen(t));
  }
  /* modprobe loads the listed dependencies last to first */
  for (size_t i = n; i-- > 0 && ret == 0;)
    ret = place(db, v[i], name, moddir, status, o, err);
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
  if (ret < 0)
    return ret;
  m->mark = 2;
  o->v = xrealloc(o->v, (o->n + 1) * sizeof *o->v);
  o->v[o->n++] = m;
  return 0;
}

/* ---- the inputs, read once: what is hashed is what is built from */

struct blob {
  char *path;
  unsigned char *data;
  size_t len;
  struct stat st;
  char digest[DSEC_DIGEST_LEN + 1];
};

static void blob_clear(struct blob *b)
{
  free(b->path);
  free(b->data);
}

static unsigned char *read_file(const char *path, size_t max, struct stat *st,
                                size_t *len, int status,
                                struct dsec_error **err)
{
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  unsigned char *buf;

  if (fd < 0) {
    dsec_error_set(err, status, errno, "cannot open %s", path);
    return NULL;
  }
  if (fstat(fd, st) < 0) {
    dsec_error_set(err, status, errno, "cannot stat %s", path);
    return NULL;
  }
  if (!S_ISREG(st->st_mode)) {
    dsec_error_set(err, status, 0, "%s is not a regular file", path);
    return NULL;
  }
  buf = (unsigned char *) dsec_read_fd(fd, max, len, err);
  if (!buf)
    dsec_error_wrap(err, "%s", path);
  return buf;
}

static int blob_read(struct blob *b, const char *path, size_t max, int status,
                     struct dsec_error **err)
{
  b->path = xstrdup(path);
  b->data = read_file(path, max, &b->st, &b->len, status, err);
  if (!b->data)
    return -1;
  dsec_sha256_buf(b->data, b->len, b->digest);
  return 0;
}

struct inputs {
  struct blob kernel;
  struct blob agent;
  char *dep_path;
  char *builtin_path;
  struct stat dep_st;
  struct stat builtin_st;
  bool has_builtin;
  struct moddb db;
  struct order order;
  struct blob *mods; /* the files of order.v[i] */
  char key[DSEC_DIGEST_LEN + 1];
};

static void inputs_clear(struct inputs *in)
{
  blob_clear(&in->kernel);
  blob_clear(&in->agent);
  for (size_t i = 0; in->mods && i < in->order.n; i++)
    blob_clear(&in->mods[i]);
  free(in->mods);
  free(in->order.v);
  moddb_clear(&in->db);
  free(in->dep_path);
  free(in->builtin_path);
}

/* The agent runs as /init in an initramfs that holds nothing else: an
 * x86-64 executable that needs no dynamic loader, or the kernel panics
 * with "No working init found". */
static int agent_check(const struct blob *b, struct dsec_error **err)
{
  Elf64_Ehdr eh;

  if (!elf64_x86(b->data, b->len, &eh) ||
      (eh.e_type != ET_EXEC && eh.e_type != ET_DYN))
    return dsec_fail(err, 0, "agent %s is not an x86-64 executable", b->path);
  for (size_t i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    elf64_phdr(b->data, &eh, i, &ph);
    if (ph.p_type == PT_INTERP)
      return dsec_fail(err, 0,
                       "agent %s is dynamically linked, but the guest has no "
                       "libraries: link it statically",
                       b->path);
  }
  return 0;
}

static int inputs_read(struct inputs *in, const struct kernel *k,
                       const char *agent_path, struct dsec_error **err)
{
  _cleanup_free_ char *rel = NULL;
  enum kernel_kind kind;
  struct dsec_sha256 *h;
  size_t len;
  int ret;

  ret = blob_read(&in->kernel, k->path, KERNEL_MAX, k->status, err);
  if (ret < 0)
    return ret;
  /* the file may have been replaced since it was chosen by its header */
  kind = kernel_probe(in->kernel.data, in->kernel.len, &rel);
  if (kind == KERNEL_UNKNOWN || (kind == KERNEL_ELF) != k->elf ||
      (kind == KERNEL_BZIMAGE && (!rel || strcmp(rel, k->release) != 0)))
    return dsec_fail(err, EAGAIN, "%s changed while it was read", k->path);

  ret = blob_read(&in->agent, agent_path, AGENT_MAX, DSEC_EXIT_FAILURE, err);
  if (ret < 0)
    return dsec_error_wrap(err, "agent");
  ret = agent_check(&in->agent, err);
  if (ret < 0)
    return ret;

  in->dep_path = xasprintf("%s/modules.dep", k->moddir);
  in->db.dep = (char *) read_file(in->dep_path, MODDB_MAX, &in->dep_st, &len,
                                  k->status, err);
  if (!in->db.dep)
    return dsec_error_wrap(err, "the modules of kernel %s", k->release);
  /* without it nothing is built in: every module has to be a file */
  in->builtin_path = xasprintf("%s/modules.builtin", k->moddir);
  if (access(in->builtin_path, F_OK) == 0) {
    in->db.builtin = (char *) read_file(in->builtin_path, MODDB_MAX,
                                        &in->builtin_st, &len, k->status, err);
    if (!in->db.builtin)
      return dsec_error_wrap(err, "the modules of kernel %s", k->release);
    in->has_builtin = true;
  }
  moddb_parse(&in->db);
  for (size_t i = 0; i < ARRAY_SIZE(guest_modules); i++) {
    ret = place(&in->db, guest_modules[i], NULL, k->moddir, k->status,
                &in->order, err);
    if (ret < 0)
      return ret;
  }
  for (size_t i = 0; i < ARRAY_SIZE(guest_modules_optional); i++) {
    const char *name = guest_modules_optional[i];
    if (!moddb_find(&in->db, name) && !moddb_builtin(&in->db, name))
      continue;
    ret = place(&in->db, name, NULL, k->moddir, k->status, &in->order, err);
    if (ret < 0)
      return ret;
  }
  in->mods = xzalloc((in->order.n + 1) * sizeof *in->mods);
  for (size_t i = 0; i < in->order.n; i++) {
    const char *p = in->order.v[i]->path;
    _cleanup_free_ char *path = p[0] == '/' ? xstrdup(p)
                                            : xasprintf("%s/%s", k->moddir, p);
    ret = blob_read(&in->mods[i], path, MODULE_MAX, k->status, err);
    if (ret < 0)
      return dsec_error_wrap(err, "kernel module %s", in->order.v[i]->name);
  }

  h = dsec_sha256_new();
  {
    _cleanup_free_ char *head = xasprintf(VM_FORMAT "\nkernel %s\nagent %s\n",
                                          in->kernel.digest, in->agent.digest);
    dsec_sha256_update(h, head, strlen(head));
  }
  for (size_t i = 0; i < in->order.n; i++) {
    _cleanup_free_ char *line = xasprintf("module %s %s\n",
                                          in->order.v[i]->name,
                                          in->mods[i].digest);
    dsec_sha256_update(h, line, strlen(line));
  }
  dsec_sha256_final(h, in->key);
  return 0;
}

/* ---- the index: stat -> key */

/* What tells that a file changed without reading it: a new inode (a
 * package upgrade renames a new file in) or a new ctime (any write, even
 * one that puts the mtime back). */
#define STAMP_LEN 128
static void stamp(const struct stat *st, char out[STAMP_LEN])
{
  snprintf(out, STAMP_LEN, "%llx:%llx:%llx:%lld.%09ld:%lld.%09ld",
           (unsigned long long) st->st_dev, (unsigned long long) st->st_ino,
           (unsigned long long) st->st_size, (long long) st->st_mtim.tv_sec,
           st->st_mtim.tv_nsec, (long long) st->st_ctim.tv_sec,
           st->st_ctim.tv_nsec);
}

static void stamp_path(const char *path, char out[STAMP_LEN])
{
  struct stat st;

  if (stat(path, &st) < 0)
    snprintf(out, STAMP_LEN, "-");
  else
    stamp(&st, out);
}

static json_t *input_new(const char *path, const struct stat *st)
{
  char s[STAMP_LEN] = "-";

  if (st)
    stamp(st, s);
  return json_pack("{s:s, s:s}", "path", path, "stat", s);
}

/* Every file the entry was built from, the kernel, agent and
 * modules.dep first (what the lookup matches on). */
static json_t *index_entry(const struct inputs *in)
{
  json_t *v = json_array();

  json_array_append_new(v, input_new(in->kernel.path, &in->kernel.st));
  json_array_append_new(v, input_new(in->agent.path, &in->agent.st));
  json_array_append_new(v, input_new(in->dep_path, &in->dep_st));
  json_array_append_new(v, input_new(in->builtin_path, in->has_builtin
                                                         ? &in->builtin_st
                                                         : NULL));
  for (size_t i = 0; i < in->order.n; i++)
    json_array_append_new(v, input_new(in->mods[i].path, &in->mods[i].st));
  return json_pack("{s:s, s:s, s:o}", "key", in->key, "kernel_digest",
                   in->kernel.digest, "inputs", v);
}

/* The index, or an empty one: it only saves hashing, so a missing, torn
 * or unknown file costs a re-hash, never an error. */
static json_t *index_load(int vm_fd)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  _cleanup_free_ char *buf = NULL;
  json_t *j = NULL;
  size_t len;

  buf = dsec_read_file_at(vm_fd, "index.json", INDEX_MAX, &len, &e);
  if (buf)
    j = json_loadb(buf, len, 0, NULL);
  if (!json_is_array(json_object_get(j, "entries"))) {
    json_decref(j);
    j = json_pack("{s:i, s:[]}", "version", 1, "entries");
  }
  return j;
}

static bool input_is(json_t *inputs, size_t i, const char *path)
{
  const char *p = json_string_value(
    json_object_get(json_array_get(inputs, i), "path"));
  return p && strcmp(p, path) == 0;
}

static const char *entry_key(json_t *e)
{
  const char *key = json_string_value(json_object_get(e, "key"));
  return key && dsec_digest_valid(key) ? key : NULL;
}

static bool entry_present(int vm_fd, const char *key)
{
  struct stat st;
  return fstatat(vm_fd, dsec_digest_hex(key), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(st.st_mode);
}

/* The key of an entry in place built from these very files, unchanged
 * since (borrowed from idx), or NULL. */
static const char *index_find(json_t *idx, int vm_fd, const char *kernel,
                              const char *agent, const char *dep)
{
  json_t *e;
  size_t i;

  json_array_foreach(json_object_get(idx, "entries"), i, e)
  {
    json_t *inputs = json_object_get(e, "inputs");
    const char *key = entry_key(e);
    json_t *in;
    size_t j;
    bool same = true;

    if (!key || !input_is(inputs, 0, kernel) || !input_is(inputs, 1, agent) ||
        !input_is(inputs, 2, dep))
      continue;
    json_array_foreach(inputs, j, in)
    {
      const char *path = json_string_value(json_object_get(in, "path"));
      const char *was = json_string_value(json_object_get(in, "stat"));
      char now[STAMP_LEN];
      if (!path || !was) {
        same = false;
        break;
      }
      stamp_path(path, now);
      if (strcmp(now, was) != 0) {
        same = false;
        break;
      }
    }
    if (same && entry_present(vm_fd, key))
      return key;
  }
  return NULL;
}

/* Removes the entries of dirfd named prefix* (what crashed writers left). */
static void remove_prefixed(int dirfd, const char *prefix)
{
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_closedir_ DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  struct dirent *de;

  if (fd >= 0 && !d)
    close(fd);
  while (d && (de = readdir(d)))
    if (dsec_str_has_prefix(de->d_name, prefix))
      dsec_rm_rf_at(dirfd, de->d_name, NULL);
}

/* Records entry, replacing any for the same kernel, agent and modules,
 * dropping those no longer in place and keeping the newest
 * INDEX_ENTRIES.  Under a lock, so concurrent builders of different
 * entries do not drop each other's. */
static int index_add(struct dsec_store *s, int vm_fd, json_t *entry,
                     struct dsec_error **err)
{
  _cleanup_json_ json_t *idx = NULL;
  _cleanup_json_ json_t *keep = json_array();
  _cleanup_close_ int lock = -1;
  _cleanup_free_ char *text = NULL;
  json_t *inputs = json_object_get(entry, "inputs");
  json_t *e;
  size_t i;

  lock = dsec_lock_at(s->locks_fd, "vm-index", DSEC_LOCK_EXCLUSIVE, false, err);
  if (lock < 0)
    return -1;
  remove_prefixed(vm_fd, "index.json.tmp-");
  idx = index_load(vm_fd);
  json_array_foreach(json_object_get(idx, "entries"), i, e)
  {
    json_t *in = json_object_get(e, "inputs");
    const char *key = entry_key(e);
    const char *p[3];
    for (size_t j = 0; j < 3; j++)
      p[j] = json_string_value(
        json_object_get(json_array_get(inputs, j), "path"));
    if (!key || !entry_present(vm_fd, key) ||
        (input_is(in, 0, p[0]) && input_is(in, 1, p[1]) &&
         input_is(in, 2, p[2])))
      continue;
    json_array_append(keep, e);
  }
  json_array_append(keep, entry);
  while (json_array_size(keep) > INDEX_ENTRIES)
    json_array_remove(keep, 0);
  json_object_set(idx, "entries", keep);
  text = json_dumps(idx, JSON_COMPACT);
  if (!text)
    abort();
  /* no fsync: losing it to a crash only costs a re-hash */
  return dsec_write_file_replace(vm_fd, "index.json", text, strlen(text),
                                 0644, err);
}

/* ---- building an entry */

static int write_new(int dfd, const char *name, const void *buf, size_t len,
                     struct dsec_error **err)
{
  _cleanup_close_ int fd = openat(dfd, name,
                                  O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                                  0444);
  if (fd < 0)
    return dsec_fail(err, errno, "cannot create %s", name);
  if (dsec_write_all(fd, buf, len, err) < 0)
    return dsec_error_wrap(err, "%s", name);
  if (fsync(fd) < 0)
    return dsec_fail(err, errno, "cannot sync %s", name);
  return 0;
}

/* vmlinux: hard-linked from an entry of the same kernel when the index
 * knows one (a new agent makes a new entry far more often than a new
 * kernel does, and each copy is tens of megabytes); else the ELF image
 * itself, or the one inside the bzImage. */
static int write_kernel(int vm_fd, int dfd, json_t *idx,
                        const struct inputs *in, const struct kernel *k,
                        struct dsec_error **err)
{
  struct buf x = { 0 };
  const unsigned char *p = in->kernel.data;
  size_t len = in->kernel.len;
  Elf64_Ehdr eh;
  json_t *e;
  size_t i;
  int ret = 0;

  json_array_foreach(json_object_get(idx, "entries"), i, e)
  {
    const char *kd = json_string_value(json_object_get(e, "kernel_digest"));
    const char *key = entry_key(e);
    _cleanup_free_ char *src = NULL;
    if (!key || !kd || strcmp(kd, in->kernel.digest) != 0)
      continue;
    src = xasprintf("%s/vmlinux", dsec_digest_hex(key));
    if (linkat(vm_fd, src, dfd, "vmlinux", 0) == 0)
      return 0;
  }

  if (!k->elf) {
    ret = bzimage_extract(p, len, k->path, k->status, &x, err);
    if (ret < 0)
      return ret;
    p = x.p;
    len = x.len;
  }
  if (!elf64_x86(p, len, &eh))
    ret = dsec_error_set(err, k->status, 0,
                         "%s: the kernel is not an x86-64 ELF image", k->path);
  else if (!elf_has_pvh(p, len, &eh))
    ret = dsec_error_set(err, k->status, 0,
                         "%s has no PVH entry point (CONFIG_PVH), so QEMU "
                         "cannot boot it uncompressed",
                         k->path);
  else
    ret = write_new(dfd, "vmlinux", p, len, err);
  free(x.p);
  return ret;
}

struct cpio {
  struct archive *a;
  unsigned ino;
};

/* Adds one entry owned by root with mtime 0: the same inputs give the
 * same bytes. */
static int cpio_add(struct cpio *c, const char *name, mode_t mode,
                    unsigned rmajor, unsigned rminor, const void *data,
                    size_t len, struct dsec_error **err)
{
  struct archive_entry *e = archive_entry_new();
  int ret = 0;

  if (!e)
    abort();
  archive_entry_set_pathname(e, name);
  archive_entry_set_mode(e, mode);
  archive_entry_set_uid(e, 0);
  archive_entry_set_gid(e, 0);
  archive_entry_set_mtime(e, 0, 0);
  archive_entry_set_ino(e, ++c->ino);
  archive_entry_set_nlink(e, S_ISDIR(mode) ? 2 : 1);
  archive_entry_set_rdevmajor(e, rmajor);
  archive_entry_set_rdevminor(e, rminor);
  archive_entry_set_size(e, (la_int64_t) len);
  if (archive_write_header(c->a, e) != ARCHIVE_OK ||
      (len && archive_write_data(c->a, data, len) != (la_ssize_t) len))
    ret = dsec_fail(err, archive_errno(c->a), "cannot write %s: %s", name,
                    archive_error_string(c->a));
  archive_entry_free(e);
  return ret;
}

/* A module as the guest's finit_module() wants it: plain ELF. */
static int module_data(const struct blob *b, const char *name, int status,
                       struct buf *out, bool *owned, struct dsec_error **err)
{
  *owned = false;
  out->p = b->data;
  out->len = b->len;
  if (!dsec_str_has_suffix(b->path, ".ko")) {
    int ret = decompress(b->data, b->len, 0, MODULE_MAX, b->path, status,
                         out, err);
    if (ret < 0)
      return ret;
    *owned = true;
  }
  if (out->len < SELFMAG || memcmp(out->p, ELFMAG, SELFMAG) != 0) {
    if (*owned)
      free(out->p);
    *owned = false;
    return dsec_error_set(err, status, 0, "kernel module %s (%s) is not ELF",
                          name, b->path);
  }
  return 0;
}

/* /init is the agent; /lib/modules holds the modules as <name>.ko and
 * "order", their file names one a line in load order; the directories
 * are the agent's mount points. */
static int write_initramfs(int dfd, const struct inputs *in, int status,
                           struct dsec_error **err)
{
  static const char *const dirs[] = { "dev", "lib", "lib/modules", "mnt",
                                      "newroot", "proc", "sys" };
  _cleanup_close_ int fd = -1;
  _cleanup_free_ char *order = xstrdup("");
  struct cpio c = { .a = archive_write_new() };
  int ret = 0;

  if (!c.a)
    abort();
  fd = openat(dfd, "initramfs.cpio", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
              0444);
  if (fd < 0) {
    archive_write_free(c.a);
    return dsec_fail(err, errno, "cannot create initramfs.cpio");
  }
  archive_write_set_format_cpio_newc(c.a);
  archive_write_add_filter_none(c.a);
  /* no padding to a 10 KiB block: bytes the kernel would only skip */
  archive_write_set_bytes_in_last_block(c.a, 1);
  if (archive_write_open_fd(c.a, fd) != ARCHIVE_OK)
    ret = dsec_fail(err, archive_errno(c.a), "cannot write initramfs.cpio: %s",
                    archive_error_string(c.a));
  for (size_t i = 0; i < ARRAY_SIZE(dirs) && ret == 0; i++)
    ret = cpio_add(&c, dirs[i], S_IFDIR | 0755, 0, 0, NULL, 0, err);
  /* the kernel opens /dev/console as init's stdin, stdout and stderr
   * before it runs it: without the node the agent starts with none */
  if (ret == 0)
    ret = cpio_add(&c, "dev/console", S_IFCHR | 0600, 5, 1, NULL, 0, err);
  if (ret == 0)
    ret = cpio_add(&c, "init", S_IFREG | 0755, 0, 0, in->agent.data,
                   in->agent.len, err);
  for (size_t i = 0; i < in->order.n && ret == 0; i++) {
    const char *name = in->order.v[i]->name;
    _cleanup_free_ char *path = xasprintf("lib/modules/%s.ko", name);
    char *o = order;
    struct buf m;
    bool owned;

    ret = module_data(&in->mods[i], name, status, &m, &owned, err);
    if (ret < 0)
      break;
    ret = cpio_add(&c, path, S_IFREG | 0644, 0, 0, m.p, m.len, err);
    if (owned)
      free(m.p);
    order = xasprintf("%s%s.ko\n", o, name);
    free(o);
  }
  if (ret == 0)
    ret = cpio_add(&c, "lib/modules/order", S_IFREG | 0644, 0, 0, order,
                   strlen(order), err);
  if (ret == 0 && archive_write_close(c.a) != ARCHIVE_OK)
    ret = dsec_fail(err, archive_errno(c.a), "cannot write initramfs.cpio: %s",
                    archive_error_string(c.a));
  archive_write_free(c.a);
  if (ret == 0 && fsync(fd) < 0)
    ret = dsec_fail(err, errno, "cannot sync initramfs.cpio");
  return ret;
}

static int write_boot_json(int dfd, const struct inputs *in,
                           const struct kernel *k, struct dsec_error **err)
{
  _cleanup_json_ json_t *j = NULL;
  _cleanup_free_ char *text = NULL;
  _cleanup_free_ char *line = NULL;
  json_t *mods = json_array();

  for (size_t i = 0; i < in->order.n; i++)
    json_array_append_new(mods, json_string(in->order.v[i]->name));
  j = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s}", "format", VM_FORMAT,
                "release", k->release, "source", k->path, "modules", mods,
                "kernel_digest", in->kernel.digest, "agent_digest",
                in->agent.digest);
  text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  if (!text)
    abort();
  line = xasprintf("%s\n", text);
  return write_new(dfd, "boot.json", line, strlen(line), err);
}

/* Builds the entry in "<hex>.tmp-*" next to where it goes, everything
 * synced, and renames it into place whole. */
static int build_entry(struct dsec_store *s, int vm_fd, json_t *idx,
                       const struct inputs *in, const struct kernel *k,
                       struct dsec_error **err)
{
  const char *hex = dsec_digest_hex(in->key);
  _cleanup_free_ char *tmp = xasprintf("%s/vm/%s.tmp-XXXXXX", s->path, hex);
  _cleanup_close_ int dfd = -1;
  const char *name;
  int ret = 0;

  if (!mkdtemp(tmp))
    return dsec_fail(err, errno, "cannot create a directory in %s/vm",
                     s->path);
  name = strrchr(tmp, '/') + 1;
  dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    ret = dsec_fail(err, errno, "cannot open %s", tmp);
  /* mkdtemp's 0700 would keep an unprivileged QEMU out */
  if (ret == 0 && fchmod(dfd, 0755) < 0)
    ret = dsec_fail(err, errno, "cannot chmod %s", tmp);
  if (ret == 0)
    ret = write_kernel(vm_fd, dfd, idx, in, k, err);
  if (ret == 0)
    ret = write_initramfs(dfd, in, k->status, err);
  if (ret == 0)
    ret = write_boot_json(dfd, in, k, err);
  if (ret == 0)
    ret = dsec_fsync_dir(dfd, err);
  if (ret == 0 && renameat(vm_fd, name, vm_fd, hex) < 0)
    ret = dsec_fail(err, errno, "cannot move %s into place", hex);
  if (ret < 0) {
    dsec_rm_rf_at(vm_fd, name, NULL);
    return ret;
  }
  return dsec_fsync_dir(vm_fd, err);
}

/* Removes the "<hex>.tmp-*" directories of builders that died: a live
 * builder holds the lock of its key.  Best effort. */
static void sweep_stale(struct dsec_store *s, int vm_fd)
{
  int fd = openat(vm_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_closedir_ DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  struct dirent *de;

  if (fd >= 0 && !d)
    close(fd);
  while (d && (de = readdir(d))) {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_close_ int lock = -1;
    _cleanup_free_ char *lockname = NULL;
    const char *t = strstr(de->d_name, ".tmp-");

    if (!t || t - de->d_name != DSEC_SHA256_HEX_LEN)
      continue;
    lockname = xasprintf("vm-%.*s", DSEC_SHA256_HEX_LEN, de->d_name);
    lock = dsec_lock_at(s->locks_fd, lockname, DSEC_LOCK_EXCLUSIVE, true, &e);
    if (lock < 0)
      continue;
    dsec_debug("removing %s/vm/%s, left by a builder that died", s->path,
               de->d_name);
    dsec_rm_rf_at(vm_fd, de->d_name, NULL);
  }
}

/* Hashes every input and builds the entry unless it is in place. */
static int prepare_cold(struct dsec_store *s, int vm_fd, json_t *idx,
                        const struct kernel *k, const char *agent_path,
                        char key[DSEC_DIGEST_LEN + 1], struct dsec_error **err)
{
  _cleanup_(inputs_clear) struct inputs in = { 0 };
  _cleanup_error_ struct dsec_error *e = NULL;
  _cleanup_json_ json_t *entry = NULL;
  _cleanup_close_ int lock = -1;
  int ret;

  ret = inputs_read(&in, k, agent_path, err);
  if (ret < 0)
    return ret;
  if (!entry_present(vm_fd, in.key)) {
    sweep_stale(s, vm_fd);
    lock = dsec_store_lock(s, "vm", in.key, err);
    if (lock < 0)
      return -1;
    /* whoever held the lock may just have built it, or died trying */
    if (!entry_present(vm_fd, in.key)) {
      _cleanup_free_ char *stale = xasprintf("%s.tmp-",
                                             dsec_digest_hex(in.key));
      remove_prefixed(vm_fd, stale);
      dsec_debug("building the guest boot files of %s in %s/vm/%s", k->path,
                 s->path, dsec_digest_hex(in.key));
      ret = build_entry(s, vm_fd, idx, &in, k, err);
      if (ret < 0)
        return dsec_error_wrap(err, "cannot build the guest boot files");
    }
  }
  entry = index_entry(&in);
  if (index_add(s, vm_fd, entry, &e) < 0)
    dsec_debug("cannot update %s/vm/index.json: %s", s->path, e->msg);
  memcpy(key, in.key, DSEC_DIGEST_LEN + 1);
  return 0;
}

int dsec_vm_boot_prepare(struct dsec_store *s, const char *agent_path,
                         struct dsec_vm_boot *out, struct dsec_error **err)
{
  _cleanup_(kernel_clear) struct kernel k = { 0 };
  _cleanup_close_ int vm_fd = -1;
  _cleanup_json_ json_t *idx = NULL;
  _cleanup_free_ char *dep = NULL;
  const char *env = getenv("DSEC_VM_KERNEL");
  char key[DSEC_DIGEST_LEN + 1];
  const char *hit;
  int ret;

  ret = env && *env ? kernel_from_env(&k, env, err)
                    : kernel_from_boot(&k, err);
  if (ret < 0)
    return ret;
  vm_fd = dsec_open_dir_at(s->fd, "vm", true, err);
  if (vm_fd < 0)
    return -1;
  dep = xasprintf("%s/modules.dep", k.moddir);
  idx = index_load(vm_fd);
  hit = index_find(idx, vm_fd, k.path, agent_path, dep);
  if (hit)
    memcpy(key, hit, sizeof key);
  else {
    ret = prepare_cold(s, vm_fd, idx, &k, agent_path, key, err);
    if (ret < 0)
      return ret;
  }
  out->kernel = xasprintf("%s/vm/%s/vmlinux", s->path, dsec_digest_hex(key));
  out->initramfs = xasprintf("%s/vm/%s/initramfs.cpio", s->path,
                             dsec_digest_hex(key));
  out->release = steal_pointer(&k.release);
  out->source = steal_pointer(&k.path);
  return 0;
}

void dsec_vm_boot_free(struct dsec_vm_boot *b)
{
  if (!b)
    return;
  free(b->kernel);
  free(b->initramfs);
  free(b->release);
  free(b->source);
  b->kernel = b->initramfs = b->release = b->source = NULL;
}

/* ---- pmem images */

#define PMEM_ALIGN (2u << 20)
#define PFN_MODE_RAM 1

/* The nvdimm info blocks' checksum: a Fletcher-64 over little-endian
 * 32-bit words, with the checksum field zero. */
static uint64_t nd_fletcher64(const unsigned char *p, size_t len)
{
  uint32_t lo = 0;
  uint64_t hi = 0;
  for (size_t i = 0; i + 4 <= len; i += 4) {
    lo += le32(p + i);
    hi += lo;
  }
  return hi << 32 | lo;
}

static void put_le16(unsigned char *p, uint16_t v)
{
  p[0] = (unsigned char) v;
  p[1] = (unsigned char) (v >> 8);
}

static void put_le32(unsigned char *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char) (v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v)
{
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char) (v >> (8 * i));
}

/* The pfn info block (struct nd_pfn_sb, version 1.2, at 4 KiB into the
 * namespace): data at 2 MiB, 2 MiB aligned, memmap in RAM.  The parent
 * uuid stays zero: a virtio-pmem namespace has no label, hence no uuid. */
static void pfn_info_block(unsigned char sb[4096], uint64_t total,
                           const unsigned char uuid[16])
{
  memset(sb, 0, 4096);
  memcpy(sb, "NVDIMM_PFN_INFO\0", 16);
  memcpy(sb + 16, uuid, 16);
  put_le16(sb + 52, 1);                           /* version_major */
  put_le16(sb + 54, 2);                           /* version_minor */
  put_le64(sb + 56, PMEM_ALIGN);                  /* dataoff */
  put_le64(sb + 64, (total - PMEM_ALIGN) / 4096); /* npfns */
  put_le32(sb + 72, PFN_MODE_RAM);                /* mode */
  put_le32(sb + 84, PMEM_ALIGN);                  /* align */
  put_le64(sb + 4088, nd_fletcher64(sb, 4096));   /* checksum */
}

int dsec_erofs_uuid(const char *path, char uuid[33], struct dsec_error **err)
{
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  unsigned char sb[64];
  if (fd < 0 || pread(fd, sb, sizeof sb, 1024) != (ssize_t) sizeof sb)
    return dsec_fail(err, errno ? errno : EIO, "cannot read %s", path);
  if (le32(sb) != 0xe0f5e1e2u)
    return dsec_bad_input(err, "%s is not an EROFS image", path);
  for (int i = 0; i < 16; i++)
    snprintf(uuid + 2 * i, 3, "%02x", sb[48 + i]);
  return 0;
}

char *dsec_vm_pmem_image(struct dsec_store *s, const char *erofs_path,
                         char uuid[33], struct dsec_error **err)
{
  _cleanup_free_ char *dir = xstrdup(erofs_path);
  _cleanup_free_ char *path = NULL;
  _cleanup_free_ char *tmpname = NULL;
  _cleanup_close_ int dfd = -1;
  _cleanup_close_ int in = -1;
  _cleanup_close_ int out = -1;
  _cleanup_close_ int lock = -1;
  unsigned char sb[4096], id[16];
  struct stat st;
  uint64_t total;
  char *slash = strrchr(dir, '/');

  if (!slash)
    return dsec_bad_input(err, "%s: not a path", erofs_path), NULL;
  *slash = '\0';
  path = xasprintf("%s/layer.pmem", dir);
  if (dsec_erofs_uuid(erofs_path, uuid, err) < 0)
    return NULL;
  if (access(path, F_OK) == 0)
    return steal_pointer(&path);
  /* one maker per layer; the others wait and find it made */
  lock = dsec_store_lock(s, "pmem", strrchr(dir, '/') + 1, err);
  if (lock < 0)
    return NULL;
  if (access(path, F_OK) == 0)
    return steal_pointer(&path);
  dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  in = open(erofs_path, O_RDONLY | O_CLOEXEC);
  if (dfd < 0 || in < 0 || fstat(in, &st) < 0) {
    dsec_fail(err, errno, "cannot open %s", erofs_path);
    return NULL;
  }
  total = (PMEM_ALIGN + (uint64_t) st.st_size + PMEM_ALIGN - 1) /
          PMEM_ALIGN * PMEM_ALIGN;
  for (int i = 0; i < 16; i++)
    sscanf(uuid + 2 * i, "%2hhx", &id[i]);
  pfn_info_block(sb, total, id);
  out = dsec_open_tmp_at(dfd, "layer.pmem", 0444, &tmpname, err);
  if (out < 0)
    return NULL;
  if (pwrite(out, sb, sizeof sb, 4096) != (ssize_t) sizeof sb ||
      ftruncate(out, (off_t) total) < 0) {
    dsec_fail(err, errno, "cannot write %s", path);
    goto fail;
  }
  {
    loff_t from = 0, to = PMEM_ALIGN;
    while (from < st.st_size) {
      ssize_t n = copy_file_range(in, &from, out, &to,
                                  (size_t) (st.st_size - from), 0);
      if (n <= 0) {
        dsec_fail(err, n < 0 ? errno : EIO, "cannot copy %s", erofs_path);
        goto fail;
      }
    }
  }
  if (dsec_commit_tmp_at(dfd, out, tmpname, "layer.pmem", err) < 0)
    goto fail;
  return steal_pointer(&path);
fail:
  unlinkat(dfd, tmpname, 0);
  return NULL;
}

/* ---- collection (dsec-reap) */

static bool index_lists(json_t *idx, const char *key)
{
  json_t *e;
  size_t i;
  json_array_foreach(json_object_get(idx, "entries"), i, e)
  {
    const char *k = entry_key(e);
    if (k && strcmp(k, key) == 0)
      return true;
  }
  return false;
}

json_t *dsec_vm_boot_unused(struct dsec_store *s, time_t min_age)
{
  json_t *out = json_array();
  _cleanup_close_ int vm_fd = openat(s->fd, "vm", O_RDONLY | O_DIRECTORY |
                                                    O_CLOEXEC);
  _cleanup_json_ json_t *idx = NULL;
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;
  time_t now = time(NULL);
  int fd;

  if (vm_fd < 0)
    return out;
  idx = index_load(vm_fd);
  fd = openat(vm_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  d = fd >= 0 ? fdopendir(fd) : NULL;
  if (fd >= 0 && !d)
    close(fd);
  while (d && (de = readdir(d))) {
    char key[DSEC_DIGEST_LEN + 1];
    struct stat st;
    if (strlen(de->d_name) != 64 || strspn(de->d_name, "0123456789abcdef") != 64)
      continue;
    snprintf(key, sizeof key, "sha256:%s", de->d_name);
    if (index_lists(idx, key) ||
        fstatat(vm_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISDIR(st.st_mode) || now - st.st_mtime < min_age)
      continue;
    json_array_append_new(out, json_pack("{s:s, s:I, s:I}", "key", key,
                                         "bytes",
                                         (json_int_t) dsec_disk_usage_at(vm_fd,
                                                                         de->d_name),
                                         "mtime", (json_int_t) st.st_mtime));
  }
  return out;
}

int dsec_vm_boot_remove(struct dsec_store *s, const char *key,
                        struct dsec_error **err)
{
  _cleanup_close_ int vm_fd = openat(s->fd, "vm", O_RDONLY | O_DIRECTORY |
                                                    O_CLOEXEC);
  _cleanup_close_ int ilock = -1;
  _cleanup_close_ int elock = -1;
  _cleanup_json_ json_t *idx = NULL;

  if (vm_fd < 0)
    return errno == ENOENT ? 0 : dsec_fail(err, errno, "cannot open the store's vm/");
  ilock = dsec_lock_at(s->locks_fd, "vm-index", DSEC_LOCK_EXCLUSIVE, false, err);
  if (ilock < 0)
    return -1;
  elock = dsec_store_lock(s, "vm", key, err);
  if (elock < 0)
    return -1;
  idx = index_load(vm_fd);
  if (index_lists(idx, key))
    return 0; /* in use again */
  return dsec_rm_rf_at(vm_fd, dsec_digest_hex(key), err);
}
