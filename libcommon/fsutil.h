/* File helpers.  Every state file is written to a temporary name, fsync'd,
 * renamed over the final name, and its directory fsync'd: a crash at any
 * point leaves the old file or the new one, never a mix. */
#ifndef DSEC_FSUTIL_H
#define DSEC_FSUTIL_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

int dsec_write_all(int fd, const void *buf, size_t len,
                   struct dsec_error **err);
/* Reads all of fd, failing (bad input) past max bytes.  Returns a new
 * NUL-terminated buffer; *len excludes the NUL. */
char *dsec_read_fd(int fd, size_t max, size_t *len, struct dsec_error **err);
char *dsec_read_file_at(int dirfd, const char *path, size_t max, size_t *len,
                        struct dsec_error **err);

/* Temp file "<name>.tmp-<random>" created O_EXCL next to name.  Returns
 * the fd; *tmpname is new. */
int dsec_open_tmp_at(int dirfd, const char *name, mode_t mode, char **tmpname,
                     struct dsec_error **err);
/* fsync(fd), rename tmpname over name, fsync the directory. */
int dsec_commit_tmp_at(int dirfd, int fd, const char *tmpname,
                       const char *name, struct dsec_error **err);
int dsec_write_file_atomic(int dirfd, const char *name, const void *buf,
                           size_t len, mode_t mode, struct dsec_error **err);
/* Temp and rename without the fsyncs: readers see the old file or the new
 * one, but a host crash may lose (or empty) the new one.  For state that
 * a crash makes moot anyway (a running sandbox's), on hot paths. */
int dsec_write_file_replace(int dirfd, const char *name, const void *buf,
                            size_t len, mode_t mode, struct dsec_error **err);

int dsec_fsync_dir(int dirfd, struct dsec_error **err);
/* mkdir -p relative to dirfd; existing directories are fine. */
int dsec_mkdir_p(int dirfd, const char *path, mode_t mode,
                 struct dsec_error **err);
/* Opens path (relative to dirfd) as an O_DIRECTORY|O_PATH-free dirfd,
 * creating it (mkdir -p) when create is set. */
int dsec_open_dir_at(int dirfd, const char *path, bool create,
                     struct dsec_error **err);
/* rm -rf of dirfd/name without following symlinks or crossing mounts;
 * a missing name is not an error. */
int dsec_rm_rf_at(int dirfd, const char *name, struct dsec_error **err);
/* The same for what is in the directory dirfd/name, which stays, empty. */
int dsec_rm_rf_children_at(int dirfd, const char *name,
                           struct dsec_error **err);

/* dirfd/name as a directory stream (its own descriptor), or NULL with
 * errno set. */
DIR *dsec_opendir_at(int dirfd, const char *name);
/* Bytes allocated on disk under dirfd/name (st_blocks * 512), not
 * crossing mounts; a hardlinked file counts once per name. */
int64_t dsec_disk_usage_at(int dirfd, const char *name);

/* Copies until EOF; *copied gets the byte count when not NULL. */
int dsec_copy_fd(int in, int out, uint64_t *copied, struct dsec_error **err);

/* Canonical absolute path of an existing file (realpath), new string. */
char *dsec_abspath(const char *path, struct dsec_error **err);

/* A loop device on backing_fd (direct I/O where the file system allows;
 * read-only when asked), detached automatically when its last user goes.
 * Returns the device path (new) and, in *loop_fd, a descriptor that must
 * stay open until the device is mounted (or autoclear detaches it at
 * once). */
char *dsec_loop_attach(int backing_fd, bool read_only, int *loop_fd,
                       struct dsec_error **err);

/* A user namespace with the given uid_map and gid_map lines (new fd), for
 * an idmapped mount: made by a child that lives only until it is opened. */
int dsec_userns_with_maps(const char *uid_map, const char *gid_map,
                          struct dsec_error **err);

/* A new tmpfs as a detached mount (new fd, close-on-exec; nosuid, nodev,
 * noexec) with the options size, nr_inodes and mode, each left to the
 * kernel's default where NULL; or -1 with errno. */
int dsec_tmpfs_new(const char *size, const char *nr_inodes, const char *mode);

/* Whether path is in use by a mount (it appears in mountinfo, the text of
 * /proc/self/mountinfo, or NULL) or backs a loop device. */
bool dsec_path_in_use(const char *mountinfo, const char *path);

#endif
