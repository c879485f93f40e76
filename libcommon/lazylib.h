#ifndef DSEC_LAZYLIB_H
#define DSEC_LAZYLIB_H

/* Libraries loaded on first use (dlopen), not at a program's start:
 * libcrypto (digest.c) and libarchive (archive-lazy.c).  Each is loaded
 * by its SONAME, which configure finds, while the process's root is still
 * the host's.  One that cannot be loaded, or lacks a function, is a
 * broken installation: the process aborts with a message, as the
 * dynamic linker would have stopped it at its start. */

/* The handle of soname, loaded now (RTLD_NOW, RTLD_LOCAL). */
void *dsec_lib_open(const char *soname);
/* The address of name in lib (from soname). */
void *dsec_lib_sym(void *lib, const char *soname, const char *name);

#endif
