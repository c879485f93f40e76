/* The copy stream of dsec-run cp: files and trees between the host and a
 * sandbox, one format both ways and on every backend.
 *
 * Compiled into libcommon and into the static dsec-agent (libc only: it
 * never prints and returns its errors in a buffer).  Not tar: the agent
 * cannot link libarchive statically, and a stream that knows only
 * directories, regular files and symbolic links, with every path
 * relative and checked, leaves a receiver nothing to get wrong.
 *
 *   magic    "DSECCP\0\1"
 *   'h'      u32 len, the source's name (its base name; "" for its
 *            contents: SRC/. as in cp)
 *   entries  u8 kind ('d', 'f' or 'l'), u32 mode (07777), u32 uid, u32 gid,
 *            s64 mtime seconds, u32 nanoseconds, u32 len, path ("" for the
 *            root, then "a/b" below it; no "", "." or ".." component);
 *            a link: u32 len, target; a file: chunks of u32 len (at most
 *            1 MiB) and data, ended by a chunk of 0
 *   'e'      the end
 *
 * Numbers are big-endian.  A directory comes before what is in it. */
#ifndef DSEC_COPY_H
#define DSEC_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DSEC_COPY_MAGIC "DSECCP\0\1"
#define DSEC_COPY_PATH_MAX 4096
#define DSEC_COPY_CHUNK (1u << 20)

struct dsec_copy_entry {
  int kind;            /* 'd', 'f' or 'l' */
  const char *path;    /* "" for the root */
  uint32_t mode, uid, gid;
  int64_t mtime_s;
  uint32_t mtime_ns;
  const char *target;  /* a link's, else NULL */
};

/* Where a reason goes: DSEC_COPY_WHY bytes. */
#define DSEC_COPY_WHY 512

/* What a parser calls, in the stream's order; each returns 0, or -1 with
 * its reason in the why buffer it was made with. */
struct dsec_copy_ops {
  int (*name)(void *ud, const char *name);
  int (*entry)(void *ud, const struct dsec_copy_entry *e);
  int (*data)(void *ud, const char *buf, size_t n);
  int (*file_end)(void *ud);
  int (*end)(void *ud);
};

struct dsec_copy_parser;

/* A parser fed with dsec_copy_parse, its reasons in why; NULL when out of
 * memory. */
struct dsec_copy_parser *dsec_copy_parser_new(const struct dsec_copy_ops *ops,
                                              void *ud, char *why);
/* Feeds n bytes: 0, or -1 (a malformed stream or a failed call). */
int dsec_copy_parse(struct dsec_copy_parser *p, const char *buf, size_t n);
/* The stream ended with 'e'. */
bool dsec_copy_parser_done(const struct dsec_copy_parser *p);
void dsec_copy_parser_free(struct dsec_copy_parser *p);

/* Writes src (a file, a link, or a tree; "dir/." or "dir/" for a
 * directory's contents) as a copy stream to out.  Nothing is followed
 * below src; what is neither a directory, a regular file nor a link
 * (devices, fifos, sockets) is left out and counted in *skipped.  0, or
 * -1 with why (DSEC_COPY_WHY bytes). */
int dsec_copy_send(int out, const char *src, uint64_t *skipped, char *why);

/* What a receiver keeps of an entry beyond its permission bits and times. */
#define DSEC_COPY_KEEP_OWNER 1u /* its uid and gid */
#define DSEC_COPY_KEEP_SETID 2u /* setuid, setgid and sticky bits */
#define DSEC_COPY_PARENTS 4u    /* DST's missing parents are made (0755) */

/* Reads a copy stream from in and makes it at dst, as cp would: into dst
 * when dst is a directory, else as dst.  Below dst nothing is followed:
 * a link in the way of a path is an error, an existing file is replaced
 * whole (written beside it, then renamed over it).  What is made belongs
 * to the stream's owners (DSEC_COPY_KEEP_OWNER), else to uid:gid, else
 * ((uid_t) -1) to the writer.  0, or -1 with why. */
int dsec_copy_receive(int in, const char *dst, unsigned keep, uid_t uid,
                      gid_t gid, char *why);

/* The same, for a stream whose name (its 'h' header) must be name: the
 * one dsec_copy_source_name gives its source (a copy out of a sandbox,
 * whose stream its guest could otherwise name as it likes). */
int dsec_copy_receive_as(int in, const char *dst, unsigned keep, uid_t uid,
                         gid_t gid, const char *name, char *why);
/* The name a source's stream gives (new string; "" for its contents),
 * or NULL when out of memory. */
char *dsec_copy_source_name(const char *src);

/* The same as a set of ops, for a stream that comes otherwise (its
 * reasons in why); the end (the "end" op) sets the directories' modes. */
struct dsec_copy_sink;
struct dsec_copy_sink *dsec_copy_sink_new(const char *dst, unsigned keep,
                                          uid_t uid, gid_t gid, char *why);
extern const struct dsec_copy_ops dsec_copy_sink_ops;
void dsec_copy_sink_free(struct dsec_copy_sink *s);

#endif
