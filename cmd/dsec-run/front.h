/* The front end of dsec-run and dsec-vm: every verb, its options and its
 * JSON output, for the four backends.  A program's main() says what it
 * serves. */
#ifndef DSEC_FRONT_H
#define DSEC_FRONT_H

#include <stdbool.h>

struct dsec_front {
  const char *default_backend; /* of a spec that names none */
  /* dsec-vm: the microvm and vm backends alone, and a suspend always
   * releases (the whole VM to a file) */
  bool vm_only;
};

int dsec_front_main(int argc, char **argv, const struct dsec_front *front);

#endif
