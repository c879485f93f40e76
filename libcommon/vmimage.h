/* Guest boot artefacts for dsec-vm: the kernel QEMU loads with -kernel
 * and the initramfs it loads with -initrd.
 *
 *   <store>/vm/<hex>/      one entry per set of inputs (key sha256:<hex>)
 *     vmlinux              the uncompressed kernel (ELF, PVH entry point)
 *     initramfs.cpio       newc, uncompressed: /init (the agent), the
 *                          guest's modules and /lib/modules/order
 *     boot.json            {"release", "source", "modules": [...], ...}
 *   <store>/vm/index.json  input file stamps -> key, so a warm call
 *                          hashes nothing
 *
 * The key hashes the content of every input (kernel, agent, modules), so
 * an entry never changes once in place; it is built under the store lock
 * "vm-<hex>" in "<hex>.tmp-*" and renamed into place complete. */
#ifndef DSEC_VMIMAGE_H
#define DSEC_VMIMAGE_H

#include <time.h>

#include "error.h"
#include "store.h"

struct dsec_vm_boot {
  char *kernel;    /* uncompressed ELF vmlinux, cached in the store */
  char *initramfs; /* uncompressed cpio (newc), cached in the store */
  char *release;   /* kernel release, e.g. "6.1.0-57-amd64" */
  char *source;    /* the kernel file it came from */
};

/* Finds the guest kernel, and builds (once per store, cached) the
 * uncompressed vmlinux and an initramfs holding agent (as /init) and the
 * modules the guest needs.  Concurrent callers wait for one builder.
 *
 * The kernel is $DSEC_VM_KERNEL (a bzImage or an ELF vmlinux; for an ELF
 * the release is $DSEC_VM_RELEASE or the part of its name after
 * "vmlinux-"), with modules in $DSEC_VM_MODULES (default
 * /lib/modules/<release>); otherwise the newest /boot/vmlinuz-* that has
 * /lib/modules/<release>/modules.dep.  A DSEC_VM_* setting that is wrong
 * is bad input; no kernel at all, a module the guest needs that is
 * missing, or an agent that is not a static x86-64 executable is a
 * failure.
 *
 * agent must be a statically linked executable: the initramfs holds
 * nothing else.  On success every field of *out is a new string (free
 * them with dsec_vm_boot_free()); on failure *out is untouched. */
int dsec_vm_boot_prepare(struct dsec_store *s, const char *agent_path,
                         struct dsec_vm_boot *out, struct dsec_error **err);

/* The pmem image of a materialised EROFS layer (new path): layer.pmem
 * beside layer.erofs, made once per store.  A virtio-pmem device shows
 * the guest the whole file; for DAX the guest's nd_pmem needs a pfn info
 * block (an "fsdax" namespace whose memmap lives in RAM) and the data
 * 2 MiB aligned, so the file is a 2 MiB header holding that block, the
 * EROFS image, and padding to a 2 MiB multiple.  *uuid gets the image's
 * EROFS volume uuid as 32 hex digits, which is how the guest tells its
 * pmem devices apart. */
char *dsec_vm_pmem_image(struct dsec_store *s, const char *erofs_path,
                         char uuid[33], struct dsec_error **err);

/* The EROFS volume uuid of an image as 32 hex digits. */
int dsec_erofs_uuid(const char *path, char uuid[33], struct dsec_error **err);

/* The boot entries no create will use again: directories of <store>/vm/
 * that the index no longer lists (their kernel, agent or modules
 * changed), older than min_age seconds (a builder renames its entry in
 * before it indexes it).  An array of {"key", "bytes", "mtime"} (new). */
json_t *dsec_vm_boot_unused(struct dsec_store *s, time_t min_age);
/* Removes such an entry, under the index lock and the entry's own, if
 * the index still does not list it. */
int dsec_vm_boot_remove(struct dsec_store *s, const char *key,
                        struct dsec_error **err);

/* Frees the strings of *b (not b itself) and clears them. */
void dsec_vm_boot_free(struct dsec_vm_boot *b);

#endif
