/* dsec-reap: collect sandboxes that are over, what crashes left behind,
 * and store objects nothing references; one JSON line per action. */
#include <config.h>

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "log.h"
#include "reap.h"

enum {
  OPT_ALL = DSEC_OPT_FIRST_PRIVATE,
  OPT_DRY_RUN,
  OPT_MIN_STEP,
  OPT_PROGRESS,
  OPT_STORE_MAX,
  OPT_SUSPEND_IDLE,
};

static const struct option long_options[] = {
  { "all", no_argument, NULL, OPT_ALL },
  { "dry-run", no_argument, NULL, OPT_DRY_RUN },
  { "min-step", required_argument, NULL, OPT_MIN_STEP },
  { "progress", required_argument, NULL, OPT_PROGRESS },
  { "store-max", required_argument, NULL, OPT_STORE_MAX },
  { "suspend-idle", required_argument, NULL, OPT_SUSPEND_IDLE },
  DSEC_COMMON_LONG_OPTIONS,
  { NULL, 0, NULL, 0 },
};

static void help(void)
{
  fputs("Usage: dsec-reap [OPTION]...\n"
        "Remove sandboxes that are over, what crashes left behind, and store\n"
        "objects nothing references; print one JSON line per action and a\n"
        "summary.  Safe to run from cron, and concurrently.\n"
        "\n"
        "Options:\n"
        "      --all              remove every unreferenced layer, image and "
        "blob\n"
        "      --debug            print debug records on stderr\n"
        "      --dry-run          print the plan, change nothing\n"
        "  -h, --help             show this help and exit\n"
        "      --log-format=FMT   diagnostics as text (default) or json\n"
        "      --min-step=N       remove sandboxes whose labels.step is below "
        "N\n"
        "      --progress=FILE    the same from a trainer's {\"step\":N,"
        "\"keep_steps\":K}\n"
        "      --store-max=GB     remove unreferenced objects, oldest first, "
        "until\n"
        "                         the store takes at most GB GiB\n"
        "      --suspend-idle=S   suspend running sandboxes without an exec "
        "for S\n"
        "                         seconds\n"
        "      --version          show the version and exit\n"
        "\n"
        "Without --all or --store-max, unreferenced store objects are only "
        "reported.\n"
        "\n"
        "Exit status: 0 ok, 1 failed (or something could not be removed), 2 "
        "usage,\n3 bad input.\n",
        stdout);
}

struct options {
  struct dsec_reap_opts reap;
  const char *progress;
};

static int parse_args(int argc, char **argv, struct options *o, bool *exit_now)
{
  int opt, status = 0;
  uint64_t v;

  while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    if (dsec_cli_common_option(opt, optarg, help, exit_now, &status)) {
      if (*exit_now)
        return status;
      continue;
    }
    switch (opt) {
    case OPT_ALL:
      o->reap.all = true;
      break;
    case OPT_DRY_RUN:
      o->reap.dry_run = true;
      break;
    case OPT_MIN_STEP:
      if (dsec_parse_uint(optarg, INT64_MAX, &v) < 0)
        return dsec_usage_error("--min-step takes a whole number");
      o->reap.min_step_set = true;
      o->reap.min_step = (int64_t) v;
      break;
    case OPT_PROGRESS:
      o->progress = optarg;
      break;
    case OPT_STORE_MAX: {
      char *end;
      double gb = strtod(optarg, &end);
      if (!*optarg || *end || !(gb >= 0) || gb > 1e9)
        return dsec_usage_error("--store-max takes a number of GiB");
      o->reap.store_max_set = true;
      o->reap.store_max = (uint64_t) llround(gb * (double) (1ULL << 30));
      break;
    }
    case OPT_SUSPEND_IDLE:
      if (dsec_parse_uint(optarg, INT32_MAX, &v) < 0)
        return dsec_usage_error("--suspend-idle takes a whole number of "
                                "seconds");
      o->reap.suspend_idle_set = true;
      o->reap.suspend_idle = v;
      break;
    default:
      return DSEC_EXIT_USAGE;
    }
  }
  if (optind < argc)
    return dsec_usage_error("unexpected argument `%s`", argv[optind]);
  if (o->reap.min_step_set && o->progress)
    return dsec_usage_error("--min-step and --progress exclude each other");
  if (o->reap.all && o->reap.store_max_set)
    return dsec_usage_error("--all and --store-max exclude each other");
  return 0;
}

static int emit(json_t *record, void *ud, struct dsec_error **err)
{
  (void) ud;
  return dsec_json_print(record, err);
}

int main(int argc, char **argv)
{
  struct dsec_error *err = NULL;
  struct options o = { 0 };
  json_t *summary = NULL;
  bool exit_now = false;
  int status;

  dsec_cli_init(argc, argv);
  status = parse_args(argc, argv, &o, &exit_now);
  if (status || exit_now)
    return dsec_cli_finish(status);

  if (o.progress &&
      dsec_reap_progress_read(o.progress, &o.reap.min_step, &err) == 0)
    o.reap.min_step_set = true;
  if (!err && dsec_reap(&o.reap, emit, NULL, &summary, &err) == 0 &&
      dsec_json_print(summary, &err) == 0 &&
      json_integer_value(json_object_get(summary, "failed")) > 0)
    dsec_fail(&err, 0, "%lld objects could not be removed (see the records "
                       "with \"action\":\"failed\")",
              (long long) json_integer_value(json_object_get(summary, "failed")));
  if (err)
    status = dsec_cli_error(steal_pointer(&err));
  json_decref(summary);
  return dsec_cli_finish(status);
}
