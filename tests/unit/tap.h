/* A tiny TAP producer for the C unit tests, header-only.
 *
 *   plan(N) or done_testing() at the end;  ok(cond, fmt, ...);
 *   is_int(got, want, fmt, ...);  is_str(got, want, fmt, ...);
 *   diag(fmt, ...);  skip(n, fmt, ...);  skip_all(fmt, ...) skips the whole file;
 *   bail_out(fmt, ...) for a broken setup.
 *
 * tap_tmpdir() makes the program's private directory under /tmp and removes
 * it at exit, also after a failure; only the process that made it removes
 * it, so a forked child leaving by exit() does not.  Children should leave
 * by _exit() anyway: TAP lines belong to the parent. */
#ifndef DSEC_TAP_H
#define DSEC_TAP_H

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAP_UNUSED_ __attribute__((unused))
#define TAP_PRINTF_(a, b) __attribute__((format(printf, a, b)))

static int tap_planned = -1;
static int tap_count;
static int tap_failed;
static char tap_dir[64];
static pid_t tap_dir_owner;

TAP_UNUSED_ static void plan(int n)
{
  tap_planned = n;
  printf("1..%d\n", n);
  fflush(stdout);
}

/* Each line of msg as a TAP comment. */
TAP_UNUSED_ static void tap_comment(const char *msg)
{
  const char *p = msg;
  while (*p) {
    const char *nl = strchr(p, '\n');
    int n = nl ? (int) (nl - p) : (int) strlen(p);
    printf("# %.*s\n", n, p);
    p += n + (nl ? 1 : 0);
  }
  fflush(stdout);
}

TAP_UNUSED_ TAP_PRINTF_(1, 2) static void diag(const char *fmt, ...)
{
  va_list ap;
  char *msg = NULL;

  va_start(ap, fmt);
  if (vasprintf(&msg, fmt, ap) < 0)
    msg = NULL;
  va_end(ap);
  tap_comment(msg ? msg : fmt);
  free(msg);
}

TAP_UNUSED_ TAP_PRINTF_(4, 0) static int
tap_vok(const char *file, int line, int cond, const char *fmt, va_list ap)
{
  tap_count++;
  printf("%sok %d - ", cond ? "" : "not ", tap_count);
  vprintf(fmt, ap);
  printf("\n");
  if (!cond) {
    tap_failed++;
    diag("  Failed test at %s line %d.", file, line);
  }
  fflush(stdout);
  return cond;
}

TAP_UNUSED_ TAP_PRINTF_(4, 5) static int
tap_ok_at(const char *file, int line, int cond, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cond = tap_vok(file, line, cond, fmt, ap);
  va_end(ap);
  return cond;
}

TAP_UNUSED_ TAP_PRINTF_(5, 6) static int
tap_is_int_at(const char *file, int line, long long got, long long want,
              const char *fmt, ...)
{
  va_list ap;
  int cond = got == want;
  va_start(ap, fmt);
  tap_vok(file, line, cond, fmt, ap);
  va_end(ap);
  if (!cond)
    diag("         got: %lld\n    expected: %lld", got, want);
  return cond;
}

TAP_UNUSED_ TAP_PRINTF_(5, 6) static int
tap_is_str_at(const char *file, int line, const char *got, const char *want,
              const char *fmt, ...)
{
  va_list ap;
  int cond = (got && want) ? strcmp(got, want) == 0 : got == want;
  va_start(ap, fmt);
  tap_vok(file, line, cond, fmt, ap);
  va_end(ap);
  if (!cond)
    diag("         got: %s%s%s\n    expected: %s%s%s", got ? "'" : "",
         got ? got : "NULL", got ? "'" : "", want ? "'" : "",
         want ? want : "NULL", want ? "'" : "");
  return cond;
}

#define ok(cond, ...) tap_ok_at(__FILE__, __LINE__, (cond) ? 1 : 0, __VA_ARGS__)
#define is_int(got, want, ...) \
  tap_is_int_at(__FILE__, __LINE__, (long long) (got), (long long) (want), \
                __VA_ARGS__)
#define is_str(got, want, ...) \
  tap_is_str_at(__FILE__, __LINE__, (got), (want), __VA_ARGS__)

/* Reports n tests as skipped. */
TAP_UNUSED_ TAP_PRINTF_(2, 3) static void skip(int n, const char *fmt, ...)
{
  va_list ap;
  char *why = NULL;

  va_start(ap, fmt);
  if (vasprintf(&why, fmt, ap) < 0)
    why = NULL;
  va_end(ap);
  for (int i = 0; i < n; i++)
    printf("ok %d # skip %s\n", ++tap_count, why ? why : fmt);
  fflush(stdout);
  free(why);
}

TAP_UNUSED_ TAP_PRINTF_(1, 2) static _Noreturn void skip_all(const char *fmt,
                                                              ...)
{
  va_list ap;
  printf("1..0 # SKIP ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  exit(0); /* "1..0 # SKIP" is a skip for tap-driver.sh */
}

TAP_UNUSED_ TAP_PRINTF_(1, 2) static _Noreturn void bail_out(const char *fmt,
                                                              ...)
{
  va_list ap;
  printf("Bail out! ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  exit(1);
}

/* Prints the plan when none was given; returns the exit status for main. */
TAP_UNUSED_ static int done_testing(void)
{
  if (tap_planned < 0)
    printf("1..%d\n", tap_count);
  else if (tap_planned != tap_count) {
    diag("Looks like you planned %d tests but ran %d.", tap_planned,
         tap_count);
    fflush(stdout);
    return 1;
  }
  if (tap_failed)
    diag("Looks like you failed %d test%s of %d.", tap_failed,
         tap_failed == 1 ? "" : "s", tap_count);
  fflush(stdout);
  return tap_failed ? 1 : 0;
}

/* rm -rf that also empties read-only directories; independent of
 * libcommon so that the tests of dsec_rm_rf_at do not clean up with it. */
TAP_UNUSED_ static void tap_rm_rf_at(int dfd, const char *name)
{
  struct stat st;
  struct dirent *de;
  DIR *d;
  int fd;

  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return;
  if (!S_ISDIR(st.st_mode)) {
    unlinkat(dfd, name, 0);
    return;
  }
  if (fchmodat(dfd, name, 0700, 0) < 0) {
    /* not ours: removal below fails and leaves it, nothing else to do */
  }
  fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && (d = fdopendir(fd))) {
    while ((de = readdir(d)))
      if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
        tap_rm_rf_at(dirfd(d), de->d_name);
    closedir(d);
  } else if (fd >= 0)
    close(fd);
  unlinkat(dfd, name, AT_REMOVEDIR);
}

TAP_UNUSED_ static void tap_tmpdir_cleanup(void)
{
  if (tap_dir[0] && getpid() == tap_dir_owner)
    tap_rm_rf_at(AT_FDCWD, tap_dir);
}

/* The program's private directory (absolute path, borrowed). */
TAP_UNUSED_ static const char *tap_tmpdir(const char *prog)
{
  if (tap_dir[0])
    return tap_dir;
  snprintf(tap_dir, sizeof tap_dir, "/tmp/dsec-%s.XXXXXX", prog);
  if (!mkdtemp(tap_dir)) {
    tap_dir[0] = '\0';
    bail_out("cannot make a temporary directory");
  }
  tap_dir_owner = getpid();
  atexit(tap_tmpdir_cleanup);
  return tap_dir;
}

#endif
