#ifndef DSEC_ARCHIVE_LAZY_H
#define DSEC_ARCHIVE_LAZY_H

/* libarchive, loaded when first used instead of when a program starts.
 * It brings libxml2, ICU, libstdc++, nettle and more along, and the
 * dynamic linker's relocations make ~280 KiB of their pages private to
 * every process that maps them: each sandbox's supervisor and init (and
 * every dsec-run exec) carried them, while only pulls, layers,
 * checkpoints and a VM's boot files need them.
 *
 * Included after <archive.h> and <archive_entry.h> by the files that call
 * libarchive: each function they use is named here, and each call goes
 * through a pointer that call site looks up once.  A function missing
 * from this list fails the link (libarchive is not linked), never the
 * run.  A process that leaves the host's root (chroot) loads it first
 * (dsec_tar_preload): the library is looked up in the root of the moment.
 * A libarchive missing at run time is a broken installation: the process
 * aborts with a message, as it would have at its start. */

/* Loads libarchive (once); aborts if it cannot. */
void dsec_archive_load(void);
/* The address of libarchive's function name, loading it first. */
void *dsec_archive_sym(const char *name);

/* f, looked up once per call site */
#define DSEC_AR(f)                                                            \
  (*({                                                                        \
    static __typeof__(&f) dsec_ar_p;                                          \
    __typeof__(&f) dsec_ar_q = __atomic_load_n(&dsec_ar_p, __ATOMIC_ACQUIRE); \
    if (!dsec_ar_q) {                                                         \
      dsec_ar_q = (__typeof__(&f)) dsec_archive_sym(#f);                      \
      __atomic_store_n(&dsec_ar_p, dsec_ar_q, __ATOMIC_RELEASE);              \
    }                                                                         \
    dsec_ar_q;                                                                \
  }))

#define archive_entry_copy_pathname DSEC_AR(archive_entry_copy_pathname)
#define archive_entry_copy_sourcepath DSEC_AR(archive_entry_copy_sourcepath)
#define archive_entry_copy_stat DSEC_AR(archive_entry_copy_stat)
#define archive_entry_copy_symlink DSEC_AR(archive_entry_copy_symlink)
#define archive_entry_filetype DSEC_AR(archive_entry_filetype)
#define archive_entry_free DSEC_AR(archive_entry_free)
#define archive_entry_gid DSEC_AR(archive_entry_gid)
#define archive_entry_hardlink DSEC_AR(archive_entry_hardlink)
#define archive_entry_linkify DSEC_AR(archive_entry_linkify)
#define archive_entry_linkresolver_free DSEC_AR(archive_entry_linkresolver_free)
#define archive_entry_linkresolver_new DSEC_AR(archive_entry_linkresolver_new)
#define archive_entry_linkresolver_set_strategy DSEC_AR(archive_entry_linkresolver_set_strategy)
#define archive_entry_mode DSEC_AR(archive_entry_mode)
#define archive_entry_new DSEC_AR(archive_entry_new)
#define archive_entry_pathname DSEC_AR(archive_entry_pathname)
#define archive_entry_set_filetype DSEC_AR(archive_entry_set_filetype)
#define archive_entry_set_gid DSEC_AR(archive_entry_set_gid)
#define archive_entry_set_gname DSEC_AR(archive_entry_set_gname)
#define archive_entry_set_hardlink DSEC_AR(archive_entry_set_hardlink)
#define archive_entry_set_ino DSEC_AR(archive_entry_set_ino)
#define archive_entry_set_mode DSEC_AR(archive_entry_set_mode)
#define archive_entry_set_mtime DSEC_AR(archive_entry_set_mtime)
#define archive_entry_set_nlink DSEC_AR(archive_entry_set_nlink)
#define archive_entry_set_pathname DSEC_AR(archive_entry_set_pathname)
#define archive_entry_set_perm DSEC_AR(archive_entry_set_perm)
#define archive_entry_set_rdev DSEC_AR(archive_entry_set_rdev)
#define archive_entry_set_rdevmajor DSEC_AR(archive_entry_set_rdevmajor)
#define archive_entry_set_rdevminor DSEC_AR(archive_entry_set_rdevminor)
#define archive_entry_set_size DSEC_AR(archive_entry_set_size)
#define archive_entry_set_uid DSEC_AR(archive_entry_set_uid)
#define archive_entry_set_uname DSEC_AR(archive_entry_set_uname)
#define archive_entry_size DSEC_AR(archive_entry_size)
#define archive_entry_symlink DSEC_AR(archive_entry_symlink)
#define archive_entry_uid DSEC_AR(archive_entry_uid)
#define archive_entry_unset_atime DSEC_AR(archive_entry_unset_atime)
#define archive_entry_unset_birthtime DSEC_AR(archive_entry_unset_birthtime)
#define archive_entry_unset_ctime DSEC_AR(archive_entry_unset_ctime)
#define archive_entry_xattr_add_entry DSEC_AR(archive_entry_xattr_add_entry)
#define archive_entry_xattr_clear DSEC_AR(archive_entry_xattr_clear)
#define archive_entry_xattr_next DSEC_AR(archive_entry_xattr_next)
#define archive_entry_xattr_reset DSEC_AR(archive_entry_xattr_reset)
#define archive_errno DSEC_AR(archive_errno)
#define archive_error_string DSEC_AR(archive_error_string)
#define archive_filter_code DSEC_AR(archive_filter_code)
#define archive_format DSEC_AR(archive_format)
#define archive_read_data DSEC_AR(archive_read_data)
#define archive_read_data_block DSEC_AR(archive_read_data_block)
#define archive_read_disk_entry_from_file DSEC_AR(archive_read_disk_entry_from_file)
#define archive_read_disk_new DSEC_AR(archive_read_disk_new)
#define archive_read_disk_set_symlink_physical DSEC_AR(archive_read_disk_set_symlink_physical)
#define archive_read_free DSEC_AR(archive_read_free)
#define archive_read_new DSEC_AR(archive_read_new)
#define archive_read_next_header DSEC_AR(archive_read_next_header)
#define archive_read_open DSEC_AR(archive_read_open)
#define archive_read_open_fd DSEC_AR(archive_read_open_fd)
#define archive_read_open_filename DSEC_AR(archive_read_open_filename)
#define archive_read_open_memory DSEC_AR(archive_read_open_memory)
#define archive_read_support_filter_bzip2 DSEC_AR(archive_read_support_filter_bzip2)
#define archive_read_support_filter_gzip DSEC_AR(archive_read_support_filter_gzip)
#define archive_read_support_filter_lz4 DSEC_AR(archive_read_support_filter_lz4)
#define archive_read_support_filter_lzma DSEC_AR(archive_read_support_filter_lzma)
#define archive_read_support_filter_xz DSEC_AR(archive_read_support_filter_xz)
#define archive_read_support_filter_zstd DSEC_AR(archive_read_support_filter_zstd)
#define archive_read_support_format_raw DSEC_AR(archive_read_support_format_raw)
#define archive_read_support_format_tar DSEC_AR(archive_read_support_format_tar)
#define archive_set_error DSEC_AR(archive_set_error)
#define archive_write_add_filter_gzip DSEC_AR(archive_write_add_filter_gzip)
#define archive_write_add_filter_none DSEC_AR(archive_write_add_filter_none)
#define archive_write_add_filter_zstd DSEC_AR(archive_write_add_filter_zstd)
#define archive_write_close DSEC_AR(archive_write_close)
#define archive_write_data DSEC_AR(archive_write_data)
#define archive_write_data_block DSEC_AR(archive_write_data_block)
#define archive_write_disk_new DSEC_AR(archive_write_disk_new)
#define archive_write_disk_set_options DSEC_AR(archive_write_disk_set_options)
#define archive_write_finish_entry DSEC_AR(archive_write_finish_entry)
#define archive_write_free DSEC_AR(archive_write_free)
#define archive_write_header DSEC_AR(archive_write_header)
#define archive_write_new DSEC_AR(archive_write_new)
#define archive_write_open DSEC_AR(archive_write_open)
#define archive_write_open_fd DSEC_AR(archive_write_open_fd)
#define archive_write_set_bytes_in_last_block DSEC_AR(archive_write_set_bytes_in_last_block)
#define archive_write_set_filter_option DSEC_AR(archive_write_set_filter_option)
#define archive_write_set_format_cpio_newc DSEC_AR(archive_write_set_format_cpio_newc)
#define archive_write_set_format_pax_restricted DSEC_AR(archive_write_set_format_pax_restricted)

#endif
