/* dsec-run: the front end for the four backends (fncall and container
 * itself, microvm and vm with dsec-vm's code). */
#include <config.h>

#include "front.h"

int main(int argc, char **argv)
{
  static const struct dsec_front front = { "container", false };
  return dsec_front_main(argc, argv, &front);
}
