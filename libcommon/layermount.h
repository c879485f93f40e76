/* Layers' EROFS images mounted once per host and shared by every container
 * and fncall sandbox that uses them.  There is no daemon: the mount of a
 * layer belongs to the node's $DSEC_RUN, made on first use under a lock,
 * kept while sandboxes use it, and unmounted by dsec-reap when none does.
 *
 *   $DSEC_RUN/layers/              a mount point of its own (a private bind
 *                                  mount of itself): a supervisor drops
 *                                  its copy of every host layer mount with
 *                                  one detach
 *   $DSEC_RUN/layers/<hex>/lock    flock: shared while a sandbox takes its
 *                                  clone, exclusive to mount or unmount
 *   $DSEC_RUN/layers/<hex>/mnt     the image, read-only, nosuid, nodev
 *   $DSEC_RUN/layers/<hex>/mount.json  what is mounted there, and how
 *
 * A sandbox takes a detached clone of the host mount (open_tree with
 * OPEN_TREE_CLONE), which its supervisor idmaps and attaches in its own
 * mount namespace: the clone keeps the file system alive, so the host
 * mount can go while sandboxes still run from it.  The image is mounted
 * from the file itself where the kernel can (erofs over a file, Linux
 * 6.12), else through a read-only loop device that detaches itself when
 * its last mount goes (LO_FLAGS_AUTOCLEAR). */
#ifndef DSEC_LAYERMOUNT_H
#define DSEC_LAYERMOUNT_H

#include <stdbool.h>

#include "error.h"
#include "json.h"

/* A detached clone (new fd, close-on-exec) of this host's mount of the
 * layer digest's EROFS image (an absolute path), mounted first if it is
 * not.  A file system just mounted is checked for idmapped mounts.
 * *backing (optional) gets "file" or "loop" (static). */
int dsec_layer_mount_clone(const char *digest, const char *image,
                           const char **backing, struct dsec_error **err);

/* The sysfs that container and fncall sandboxes show at /sys, mounted
 * once per host like a layer, at $DSEC_RUN/layers/sysfs/mnt: from a
 * network namespace of its own that nothing joins, read-only.  The mount
 * holds only a passive reference to that namespace, which goes with the
 * child that made it, and its loopback with it: class/net lists nothing.  One superblock for every sandbox
 * instead of one each: each superblock takes a shrinker id, and every
 * memory cgroup on the host keeps 1 KiB per 64 of the most ids ever used,
 * so a file system per sandbox costs memory that grows with the square of
 * the density.  A detached clone (new fd), mounted first if it is not;
 * dsec-reap unmounts it (dsec_layer_unmount with DSEC_SYSFS_DIR) when no
 * sandbox is left. */
#define DSEC_SYSFS_DIR "sysfs"
int dsec_sysfs_mount_clone(struct dsec_error **err);
bool dsec_sysfs_mounted(const char *run);

/* The tmpfs that holds the /dev of container and fncall sandboxes, each
 * in a directory of its own named by its id, mounted once per host like
 * the sysfs, at $DSEC_RUN/layers/dev/mnt (nosuid, nodev, noexec, 0700):
 * a superblock fewer per sandbox, for the reason the sysfs is shared
 * (and each is one more list for the kernel to walk when a memory cgroup
 * goes).  No inode limit, and the host's memory for a size: a limit of
 * its own would be one every sandbox shares; what a sandbox writes in
 * its /dev/shm counts in its memory cgroup, so only sandboxes with a
 * memory limit get a directory here (dsec-run's front decides).
 * dsec_devfs_clone makes
 * mnt/<id> empty and returns a detached clone of it (new fd), mounting
 * the tmpfs first if it is not; dsec_sandbox_remove_files removes the
 * directory, dsec-reap the ones no sandbox has and the mount when no
 * sandbox is left. */
#define DSEC_DEVFS_DIR "dev"
int dsec_devfs_clone(const char *id, struct dsec_error **err);
bool dsec_devfs_mounted(const char *run);

/* The template mount namespace that container and fncall sandboxes
 * start from, made once per host like the sysfs and pinned at
 * $DSEC_RUN/layers/rootns/mnt (its namespace file bound there): its root
 * is a read-only tmpfs, empty but for e, an empty directory, and h, on
 * which e is bound read-only, covering a proc and a sysfs (of pid and network namespaces that
 * ended with the process that made them).  A sandbox's supervisor copies
 * it and stacks the sandbox's root on the copy's root: the kernel then
 * lets init mount a proc and a sysfs of its own (it allows one only
 * where one is already fully visible: the hidden ones are, to it), and
 * no path leads below the sandbox's root (".." stops at the root of a
 * namespace's first mount, which the sandbox's root covers).  What the
 * sandbox gains: its namespace never holds the host's mounts, so init
 * needs no pivot_root (which walks every thread on the host) and no
 * detach of the old root (an RCU grace period).  An nsfs descriptor of
 * it (new fd), made first if it is not; dsec-reap unmounts it when no
 * sandbox is left. */
#define DSEC_ROOTNS_DIR "rootns"
int dsec_rootns_open(struct dsec_error **err);
bool dsec_rootns_mounted(const char *run);

/* In a supervisor's own mount namespace, once its layers are attached:
 * drops its copy of every host layer mount (they would keep those file
 * systems, and their loop devices, alive as long as the sandbox). */
void dsec_layer_mounts_detach(const char *run);

/* The host's layer mounts under run ($DSEC_RUN): an array of
 * {"digest", "path", "image", "backing", "device", "mounted"} (new). */
json_t *dsec_layer_mounts_list(const char *run);

/* Unmounts the host mount of the layer hex (64 hex digits, or
 * DSEC_SYSFS_DIR, DSEC_DEVFS_DIR or DSEC_ROOTNS_DIR) under run, unless
 * someone holds its lock (then *busy, and nothing is done).
 * Sandboxes running from it keep their clones; a loop device under it
 * detaches itself once the last of them goes. */
int dsec_layer_unmount(const char *run, const char *hex, bool *busy,
                       struct dsec_error **err);

/* Once no layer is mounted under run/layers (and none is being mounted),
 * undoes its bind mount.  Returns 1 when it did, 0 when there was nothing
 * to do or a layer is mounted. */
int dsec_layer_unbind(const char *run, struct dsec_error **err);

/* The hot set of a layer's EROFS image: the pages of the image file that
 * this host has in its page cache, read by the sandboxes that ran from it
 * (mincore), kept beside the image as erofs.hot, JSON
 * {"size": N, "page": 4096, "bytes": B, "ranges": [[OFFSET, LENGTH], ...]}.
 * Noted when a sandbox stops, replaced only when the new set is larger by
 * a quarter (it never shrinks to what one short-lived sandbox read);
 * prefetched (POSIX_FADV_WILLNEED, asynchronous) when a host mounts the
 * image, so that the first sandbox on a host whose cache is cold reads
 * its files with the disk already at work on them, as a trace-driven
 * prefetch does.  A store shared by nodes shares the record.  Both are
 * best effort: a failure is logged under DSEC_DEBUG and ignored. */
void dsec_layer_hot_note(const char *image);
void dsec_layer_hot_prefetch(const char *image);

#endif
