/* The front end shared by dsec-run and dsec-vm: every verb, its options
 * and its JSON output.  A program's main() only says which backends it
 * serves. */
#ifndef DSEC_RUNCMD_H
#define DSEC_RUNCMD_H

#include <stdbool.h>

/* vm: serve the microvm and vm backends (dsec-vm) instead of fncall and
 * container (dsec-run). */
int dsec_runcmd_main(int argc, char **argv, bool vm);

#endif
