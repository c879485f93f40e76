#include <config.h>

#include "lazylib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

void *dsec_lib_open(const char *soname)
{
  void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dsec: cannot load %s: %s\n", soname, dlerror());
    abort();
  }
  return lib;
}

void *dsec_lib_sym(void *lib, const char *soname, const char *name)
{
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "dsec: %s has no %s: %s\n", soname, name, dlerror());
    abort();
  }
  return p;
}
