/* dsec-vm: the microVM and full-VM backends, behind dsec-run's verbs. */
#include <config.h>

#include "runcmd.h"

int main(int argc, char **argv)
{
  return dsec_runcmd_main(argc, argv, true);
}
