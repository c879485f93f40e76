/* dsec-vm: the microVM and full-VM backends, behind dsec-run's verbs, for
 * people who work with VMs alone. */
#include <config.h>

#include "../dsec-run/front.h"

int main(int argc, char **argv)
{
  static const struct dsec_front front = { "microvm", true };
  return dsec_front_main(argc, argv, &front);
}
