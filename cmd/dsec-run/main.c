/* dsec-run: the function-call and container backends. */
#include <config.h>

#include "runcmd.h"

int main(int argc, char **argv)
{
  return dsec_runcmd_main(argc, argv, false);
}
