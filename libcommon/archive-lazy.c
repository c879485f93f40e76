#include <config.h>

#include "archive-lazy.h"

#include <pthread.h>

#include "lazylib.h"

static void *lib;

static void archive_open(void)
{
  lib = dsec_lib_open(DSEC_LIBARCHIVE);
}

void dsec_archive_load(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, archive_open);
}

void *dsec_archive_sym(const char *name)
{
  dsec_archive_load();
  return dsec_lib_sym(lib, DSEC_LIBARCHIVE, name);
}
