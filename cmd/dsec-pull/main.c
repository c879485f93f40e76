/* dsec-pull: bring an image into the local store and print its record. */
#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "log.h"
#include "pull.h"

enum {
  OPT_NAME = DSEC_OPT_FIRST_PRIVATE,
  OPT_INSECURE,
  OPT_PLATFORM,
  OPT_KEEP_SETUID,
  OPT_MAX_SIZE,
  OPT_PARALLEL,
};

static const struct option long_options[] = {
  { "name", required_argument, NULL, OPT_NAME },
  { "insecure", no_argument, NULL, OPT_INSECURE },
  { "platform", required_argument, NULL, OPT_PLATFORM },
  { "keep-setuid", no_argument, NULL, OPT_KEEP_SETUID },
  { "max-size", required_argument, NULL, OPT_MAX_SIZE },
  { "parallel", required_argument, NULL, OPT_PARALLEL },
  DSEC_COMMON_LONG_OPTIONS,
  { NULL, 0, NULL, 0 },
};

static void help(void)
{
  fputs("Usage: dsec-pull [OPTION]... SOURCE\n"
        "Bring an image into the local store and print its record as JSON.\n"
        "\n"
        "SOURCE is one of:\n"
        "  REGISTRY/REPO[:TAG|@DIGEST]  an OCI distribution registry\n"
        "  oci:DIR[:TAG]                an OCI image layout directory\n"
        "  docker-archive:FILE          docker save / podman save output\n"
        "  tar:FILE                     a rootfs tarball (.tar, .gz, .zst, .xz)\n"
        "\n"
        "Options:\n"
        "      --debug            print debug records on stderr\n"
        "  -h, --help             show this help and exit\n"
        "      --insecure         talk plain HTTP to the registry\n"
        "      --keep-setuid      keep setuid/setgid bits and file capabilities\n"
        "      --log-format=FMT   diagnostics as text (default) or json\n"
        "      --max-size=SIZE    bound on a layer's uncompressed size "
        "(default 64G)\n"
        "      --name=NAME        also name the image NAME[:TAG|@VERSION]\n"
        "      --parallel=N       concurrent layer downloads (default 4)\n"
        "      --platform=OS/ARCH platform to pick from an index "
        "(default linux/amd64)\n"
        "      --version          show the version and exit\n"
        "\n"
        "Exit status: 0 ok, 1 failed, 2 usage, 3 bad input.\n",
        stdout);
}

struct options {
  const char *source;
  struct dsec_pull_opts pull;
};

static int parse_args(int argc, char **argv, struct options *o, bool *exit_now)
{
  int opt, status = 0;
  uint64_t v;

  while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    if (dsec_cli_common_option(opt, optarg, help, exit_now, &status))
      if (*exit_now)
        return status;
    switch (opt) {
    case OPT_NAME:
      o->pull.name = optarg;
      break;
    case OPT_INSECURE:
      o->pull.insecure = true;
      break;
    case OPT_PLATFORM:
      if (!strchr(optarg, '/'))
        return dsec_usage_error("--platform takes OS/ARCH[/VARIANT]");
      o->pull.platform = optarg;
      break;
    case OPT_KEEP_SETUID:
      o->pull.policy.keep_setuid = true;
      break;
    case OPT_MAX_SIZE:
      if (dsec_parse_size(optarg, &o->pull.policy.max_size) < 0 ||
          o->pull.policy.max_size == 0)
        return dsec_usage_error("invalid --max-size `%s`", optarg);
      break;
    case OPT_PARALLEL:
      if (dsec_parse_uint(optarg, 64, &v) < 0 || v == 0)
        return dsec_usage_error("--parallel takes 1 to 64");
      o->pull.parallel = (int) v;
      break;
    case '?':
      return DSEC_EXIT_USAGE;
    default:
      break;
    }
  }
  if (optind + 1 != argc)
    return dsec_usage_error(optind == argc ? "missing SOURCE"
                                           : "too many arguments");
  o->source = argv[optind];
  return 0;
}

int main(int argc, char **argv)
{
  struct dsec_error *err = NULL;
  struct dsec_store *store = NULL;
  struct options o = { 0 };
  json_t *record = NULL;
  bool exit_now = false;
  int status;

  dsec_cli_init(argc, argv);
  status = parse_args(argc, argv, &o, &exit_now);
  if (status || exit_now)
    return dsec_cli_finish(status);

  if (dsec_store_open(&store, &err) < 0 ||
      dsec_pull(store, o.source, &o.pull, &record, &err) < 0 ||
      dsec_json_print(record, &err) < 0)
    status = dsec_cli_error(steal_pointer(&err));
  json_decref(record);
  dsec_store_free(store);
  return dsec_cli_finish(status);
}
