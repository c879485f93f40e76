/* dsec-place: print this node's inventory, or place sandbox requests on
 * nodes. */
#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "log.h"
#include "place.h"

enum {
  OPT_NODES = DSEC_OPT_FIRST_PRIVATE,
};

static const struct option long_options[] = {
  { "nodes", required_argument, NULL, OPT_NODES },
  DSEC_COMMON_LONG_OPTIONS,
  { NULL, 0, NULL, 0 },
};

static void help(void)
{
  fputs("Usage: dsec-place [OPTION]... COMMAND [ARG]...\n"
        "Take a node's inventory, or place sandbox requests on nodes.\n"
        "\n"
        "Commands:\n"
        "  probe                        print this node's inventory as JSON\n"
        "  place --nodes FILE [REQUESTS]\n"
        "                               print one assignment per sandbox of "
        "the\n"
        "                               requests (JSON Lines; - or none: "
        "stdin)\n"
        "\n"
        "Options:\n"
        "      --debug            print debug records on stderr\n"
        "  -h, --help             show this help and exit\n"
        "      --log-format=FMT   diagnostics as text (default) or json\n"
        "      --nodes=FILE       (place) node inventories as JSON Lines "
        "(- for stdin)\n"
        "      --version          show the version and exit\n"
        "\n"
        "Exit status: 0 ok, 1 failed, 2 usage, 3 bad input.\n",
        stdout);
}

enum command { CMD_NONE, CMD_PROBE, CMD_PLACE };

struct options {
  enum command cmd;
  const char *nodes;
  const char *requests;
};

static int parse_args(int argc, char **argv, struct options *o, bool *exit_now)
{
  int opt, status = 0, nargs;
  const char *cmd;

  /* options may come before or after the command (getopt permutes) */
  while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    if (dsec_cli_common_option(opt, optarg, help, exit_now, &status)) {
      if (*exit_now)
        return status;
      continue;
    }
    switch (opt) {
    case OPT_NODES:
      o->nodes = optarg;
      break;
    default:
      return DSEC_EXIT_USAGE;
    }
  }
  if (optind >= argc)
    return dsec_usage_error("missing COMMAND");
  cmd = argv[optind];
  nargs = argc - optind - 1;
  if (strcmp(cmd, "probe") == 0) {
    o->cmd = CMD_PROBE;
    if (o->nodes)
      return dsec_usage_error("option --nodes does not apply to probe");
    if (nargs > 0)
      return dsec_usage_error("probe: too many arguments");
  } else if (strcmp(cmd, "place") == 0) {
    o->cmd = CMD_PLACE;
    if (!o->nodes)
      return dsec_usage_error("place: --nodes FILE is required");
    if (nargs > 1)
      return dsec_usage_error("place: too many arguments");
    o->requests = nargs ? argv[optind + 1] : "-";
    if (strcmp(o->nodes, "-") == 0 && strcmp(o->requests, "-") == 0)
      return dsec_usage_error("place: the nodes and the requests cannot both "
                              "be stdin");
  } else
    return dsec_usage_error("unknown command `%s`", cmd);
  return 0;
}

int main(int argc, char **argv)
{
  struct dsec_error *err = NULL;
  struct options o = { 0 };
  json_t *node = NULL;
  bool exit_now = false;
  int status;

  dsec_cli_init(argc, argv);
  status = parse_args(argc, argv, &o, &exit_now);
  if (status || exit_now)
    return dsec_cli_finish(status);

  if (o.cmd == CMD_PROBE) {
    node = dsec_place_probe(&err);
    if (!node || dsec_json_print(node, &err) < 0)
      status = dsec_cli_error(steal_pointer(&err));
  } else if (dsec_place_plan(o.nodes, o.requests, STDOUT_FILENO, &err) < 0)
    status = dsec_cli_error(steal_pointer(&err));
  json_decref(node);
  return dsec_cli_finish(status);
}
