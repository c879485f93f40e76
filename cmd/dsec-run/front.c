#include <config.h>

#include "front.h"

#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <sys/ioctl.h>
#include <unistd.h>


#include "audit.h"
#include "cgroup.h"
#include "cli.h"
#include "copy.h"
#include "client.h"
#include "container.h"
#include "crash.h"
#include "digest.h"
#include "vm.h"
#include "fsutil.h"
#include "image.h"
#include "layermount.h"
#include "process.h"
#include "lock.h"
#include "log.h"
#include "sandbox.h"
#include "spec.h"

enum {
  OPT_SPEC = DSEC_OPT_FIRST_PRIVATE,
  OPT_IMAGE,
  OPT_LAYER,
  OPT_BACKEND,
  OPT_CPUS,
  OPT_MEMORY,
  OPT_PIDS,
  OPT_DISK,
  OPT_MOUNT,
  OPT_PMEM,
  OPT_PROTECT,
  OPT_HIDE,
  OPT_ENV,
  OPT_WORKDIR,
  OPT_USER,
  OPT_LABEL,
  OPT_TTL,
  OPT_IDLE_TIMEOUT,
  OPT_NAME,
  OPT_SEQ,
  OPT_TIMEOUT,
  OPT_STDIN,
  OPT_MAX_OUTPUT,
  OPT_REQUESTS,
  OPT_RM,
  OPT_ATTACH,
  OPT_RESULT,
  OPT_ALL,
  OPT_FORCE,
  OPT_FOLLOW,
  OPT_RELEASE,
  OPT_COUNT,
  OPT_SIZE,
  OPT_EXCLUSIVE,
  OPT_STREAM,
  OPT_SESSION,
  OPT_ARCHIVE,
  OPT_TTY,
  OPT_TTY_SIZE,
  OPT_SERVICE,
  OPT_END,
};

static const struct option long_options[] = {
  { "all", no_argument, NULL, OPT_ALL },
  { "archive", no_argument, NULL, OPT_ARCHIVE },
  { "attach", no_argument, NULL, OPT_ATTACH },
  { "backend", required_argument, NULL, OPT_BACKEND },
  { "count", required_argument, NULL, OPT_COUNT },
  { "cpus", required_argument, NULL, OPT_CPUS },
  { "disk", required_argument, NULL, OPT_DISK },
  { "env", required_argument, NULL, OPT_ENV },
  { "exclusive", no_argument, NULL, OPT_EXCLUSIVE },
  { "follow", no_argument, NULL, OPT_FOLLOW },
  { "force", no_argument, NULL, OPT_FORCE },
  { "hide", required_argument, NULL, OPT_HIDE },
  { "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
  { "image", required_argument, NULL, OPT_IMAGE },
  { "label", required_argument, NULL, OPT_LABEL },
  { "layer", required_argument, NULL, OPT_LAYER },
  { "max-output", required_argument, NULL, OPT_MAX_OUTPUT },
  { "memory", required_argument, NULL, OPT_MEMORY },
  { "mount", required_argument, NULL, OPT_MOUNT },
  { "name", required_argument, NULL, OPT_NAME },
  { "pids", required_argument, NULL, OPT_PIDS },
  { "release", no_argument, NULL, OPT_RELEASE },
  { "pmem", no_argument, NULL, OPT_PMEM },
  { "protect", required_argument, NULL, OPT_PROTECT },
  { "requests", required_argument, NULL, OPT_REQUESTS },
  { "result", required_argument, NULL, OPT_RESULT },
  { "rm", no_argument, NULL, OPT_RM },
  { "seq", required_argument, NULL, OPT_SEQ },
  { "service", required_argument, NULL, OPT_SERVICE },
  { "session", required_argument, NULL, OPT_SESSION },
  { "size", required_argument, NULL, OPT_SIZE },
  { "spec", required_argument, NULL, OPT_SPEC },
  { "stdin", required_argument, NULL, OPT_STDIN },
  { "stream", no_argument, NULL, OPT_STREAM },
  { "timeout", required_argument, NULL, OPT_TIMEOUT },
  { "ttl", required_argument, NULL, OPT_TTL },
  { "tty", no_argument, NULL, OPT_TTY },
  { "tty-size", required_argument, NULL, OPT_TTY_SIZE },
  { "user", required_argument, NULL, OPT_USER },
  { "workdir", required_argument, NULL, OPT_WORKDIR },
  DSEC_COMMON_LONG_OPTIONS,
  { NULL, 0, NULL, 0 },
};

static void help(const struct dsec_front *front)
{
  const char *p = dsec_log_prog();
  printf("Usage: %s COMMAND [OPTION]... [ARG]...\n"
         "Create sandboxes, run commands in them, and remove them; every\n"
         "answer is one JSON object per line on stdout.\n"
         "\n"
         "Commands:\n"
         "  create [CREATE OPTION]...            create a sandbox, print its "
         "record\n"
         "  exec [EXEC OPTION]... ID -- CMD...   run CMD in sandbox ID\n"
         "  exec ID --requests FILE|-            run JSON Lines requests in "
         "order\n"
         "  run [CREATE OPTION]... [--rm] [--attach] [--timeout S] -- CMD...\n"
         "                                       create, exec (and remove)\n"
         "  ps [--all] [--label K=V]...          list sandboxes\n"
         "  inspect ID                           everything about a sandbox\n"
         "  events [--follow] ID                 the sandbox's audit events\n"
         "  trajectory [--follow] ID             every exec and its result\n"
         "  rm [--force] ID...                   stop and remove sandboxes\n"
         "  checkpoint [--name NAME@VERSION] ID  its writable layer as a layer\n"
         "%s"
         "  fork [--count N] ID                  N new sandboxes from its state\n"
         "  pool [CREATE OPTION]... [--size N]   keep N sandboxes of a spec ready\n"
         "                                       for create to claim\n"
         "  serve                                JSON Lines requests on stdin,\n"
         "                                       answers with their rid on stdout\n"
         "  kill ID [SIGNAL]                     signal every process in it\n"
         "  shell ID [-- CMD...]                 an interactive shell (or CMD) on a\n"
         "                                       terminal in the sandbox\n"
         "  cp [-a] [--seq N] SRC DST            copy files in or out: one side is\n"
         "                                       ID:PATH\n"
         "  session ls ID [NAME]                 the sandbox's sessions\n"
         "  session rm ID [NAME]                 end a session (all without NAME)\n"
         "\n"
         "Create options (a flag overrides the same field of --spec):\n"
         "      --backend=B        %s\n"
         "      --cpus=N           CPU quota, in CPUs\n"
         "      --disk=MB          size of the writable layer\n"
         "      --env=K=V          environment variable (repeatable)\n"
         "      --hide=PATH        make PATH invisible (repeatable)\n"
         "      --idle-timeout=S   end the sandbox after S seconds without "
         "exec\n"
         "      --image=REF        the image (a name or sha256:digest)\n"
         "      --label=K=V        label (repeatable)\n"
         "      --layer=REF        a layer on top of the image (repeatable)\n"
         "      --memory=MB        memory limit\n"
         "      --mount=SRC:DST[:ro]  bind mount a host path (repeatable)\n"
         "      --name=NAME        a name to use instead of the id (checkpoint:\n"
         "                         the layer's NAME@VERSION)\n"
         "      --pids=N           process limit\n"
         "      --pmem             layers as virtio-pmem devices with DAX, sharing\n"
         "                         the host's page cache (backend vm only)\n"
         "      --protect=PATH     keep PATH readable but unchangeable "
         "(repeatable)\n"
         "      --spec=FILE        the sandbox spec as JSON (- for stdin)\n"
         "      --ttl=S            end the sandbox after S seconds\n"
         "      --user=UID:GID     user commands run as\n"
         "      --workdir=DIR      working directory of commands\n"
         "\n"
         "Exec and run options:\n"
         "      --attach           (run) stream output instead of printing "
         "JSON\n"
         "      --exclusive        (exec) beyond the reach of every process "
         "earlier\n"
         "                         execs left running (for a grader)\n"
         "      --max-output=BYTES output kept per stream (default 1 MiB)\n"
         "      --requests=FILE    exec requests as JSON Lines (- for stdin)\n"
         "      --result=FILE      (run) also write the JSON result to FILE\n"
         "      --rm               (run) remove the sandbox afterwards\n"
         "      --seq=N            the request's sequence number\n"
         "      --service=NAME     (exec) run in the world's service NAME "
         "instead of\n"
         "                         its agent\n"
         "      --session=NAME     (exec) run the command line in the persistent\n"
         "                         shell NAME (made on first use): cd, export,\n"
         "                         variables and functions persist\n"
         "      --size=N           (pool) how many to keep ready (default 4)\n"
         "      --stdin=FILE       the command's standard input\n"
         "      --stream           (exec) output records as the output comes, "
         "then\n"
         "                         the result\n"
         "      --timeout=S        kill the command after S seconds\n"
         "      --tty              (exec) run the command on a terminal\n"
         "      --tty-size=CxR     (exec) the terminal's columns and rows "
         "(80x24)\n"
         "\n"
         "Other options:\n"
         "  -a, --archive          (cp) also keep owners and setuid bits of what\n"
         "                         goes in\n"
         "      --all              (ps) include ended sandboxes\n"
         "      --count=N          (fork) how many sandboxes (default 1)\n"
         "      --debug            print debug records on stderr\n"
         "      --follow           (events, trajectory) wait for more\n"
         "      --force            (rm) kill at once; a missing ID is no "
         "error\n"
         "  -h, --help             show this help and exit\n"
         "      --log-format=FMT   diagnostics as text (default) or json\n"
         "      --release          (suspend) checkpoint, then free memory and\n"
         "                         processes\n"
         "      --version          show the version and exit\n"
         "\n"
         "Exit status: 0 ok, 1 failed, 2 usage, 3 bad input; exec and run "
         "pass the\ncommand's status through (128+N for signal N), with 124 "
         "timed out, 125 dsec\nfailed, 126 cannot execute, 127 not found.\n",
         p,
         front->vm_only
           ? "  suspend ID                           the whole VM to a file, "
             "QEMU ends\n"
             "  resume ID                            restore it, processes "
             "and all\n"
           : "  suspend [--release] ID               freeze it (--release: "
             "checkpoint\n"
             "                                       and free everything)\n"
             "  resume ID                            thaw, or boot from the "
             "checkpoint\n",
         front->vm_only ? "microvm (default) or vm"
                        : "container (default), fncall, microvm or vm");
}

struct verb;

struct opts {
  const struct dsec_front *front;
  const struct verb *verb;
  json_t *spec;        /* flags as a spec fragment */
  const char *spec_file;
  json_t *exec;        /* exec request fields from flags */
  const char *stdin_file;
  const char *requests;
  const char *result_file;
  bool rm, attach, all, force, follow, release, archive;
  int count;
  const char *layer_name;
  json_t *label_filter;
  char **args;
  int nargs;
  char **cmd;
  int ncmd;
};

static int set_uint(json_t *spec, const char *path, const char *arg,
                    const char *opt, uint64_t max)
{
  uint64_t v;
  if (dsec_parse_uint(arg, max, &v) < 0)
    return dsec_usage_error("--%s takes a whole number up to %llu", opt,
                            (unsigned long long) max);
  dsec_spec_set(spec, path, json_integer((json_int_t) v));
  return 0;
}

static int parse_kv(const char *arg, const char *opt, char **k, char **v)
{
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg)
    return dsec_usage_error("--%s takes KEY=VALUE", opt);
  *k = xstrndup(arg, (size_t) (eq - arg));
  *v = xstrdup(eq + 1);
  return 0;
}

/* The options of a verb, a bit per OPT_* code. */
#define O(x) (1ULL << ((x) - OPT_SPEC))
#define CREATE_OPTS                                                          \
  (O(OPT_SPEC) | O(OPT_IMAGE) | O(OPT_LAYER) | O(OPT_BACKEND) |              \
   O(OPT_CPUS) | O(OPT_MEMORY) | O(OPT_PIDS) | O(OPT_DISK) | O(OPT_MOUNT) |  \
   O(OPT_PROTECT) | O(OPT_HIDE) | O(OPT_USER) | O(OPT_TTL) |                 \
   O(OPT_IDLE_TIMEOUT) | O(OPT_PMEM) | O(OPT_LABEL) | O(OPT_ENV) |           \
   O(OPT_WORKDIR))
#define EXEC_OPTS                                                            \
  (O(OPT_TIMEOUT) | O(OPT_MAX_OUTPUT) | O(OPT_STDIN) | O(OPT_SEQ))

/* A verb: its handler, the options it takes, how many sandbox ids (or
 * other arguments) and whether a command follows "--".  *status is the
 * exit status of a verb that passes a command's through (exec, run). */
struct verb {
  const char *name;
  int (*run)(struct opts *o, int *status, struct dsec_error **err);
  uint64_t options;
  int min_args, max_args; /* max -1: any number */
  enum { NO_CMD, MAY_CMD, NEEDS_CMD } cmd;
  bool passes_status;
  const char *args_usage; /* for a wrong count */
};

static const struct verb *find_verb(const char *name);

static int parse(int argc, char **argv, struct opts *o, bool *exit_now)
{
  int opt, status = 0;
  int first = 1;

  /* global options, then the verb */
  while (first < argc && argv[first][0] == '-' && strcmp(argv[first], "--")) {
    const char *a = argv[first];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      help(o->front);
      *exit_now = true;
      return 0;
    }
    if (strcmp(a, "--version") == 0) {
      printf("%s %s\n", dsec_log_prog(), PACKAGE_VERSION);
      *exit_now = true;
      return 0;
    }
    if (strcmp(a, "--debug") == 0)
      dsec_log_set_debug(true);
    else if (dsec_str_has_prefix(a, "--log-format=")) {
      if (dsec_log_set_format_name(a + 13) < 0)
        return dsec_usage_error("unknown log format `%s`", a + 13);
    } else if (strcmp(a, "--log-format") == 0 && first + 1 < argc) {
      if (dsec_log_set_format_name(argv[++first]) < 0)
        return dsec_usage_error("unknown log format `%s`", argv[first]);
    } else
      return dsec_usage_error("unknown option `%s` before the command", a);
    first++;
  }
  if (first >= argc)
    return dsec_usage_error("missing COMMAND");
  o->verb = find_verb(argv[first]);
  if (!o->verb)
    return dsec_usage_error("unknown command `%s`", argv[first]);

  o->spec = json_object();
  o->exec = json_object();
  o->label_filter = json_object();
  /* the command after "--" is not ours to parse: options are looked for
   * only before it (getopt would move "--" when it permutes) */
  {
    int dd = first + 1;
    while (dd < argc && strcmp(argv[dd], "--") != 0)
      dd++;
    if (dd < argc) {
      o->cmd = argv + dd + 1;
      o->ncmd = argc - dd - 1;
    }
    argc = dd;
  }
  optind = first + 1;
  while ((opt = getopt_long(argc, argv, "ha", long_options, NULL)) != -1) {
    char *k = NULL, *v = NULL;
    if (opt == 'a')
      opt = OPT_ARCHIVE;
    if (opt == 'h') {
      help(o->front);
      *exit_now = true;
      return 0;
    }
    if (dsec_cli_common_option(opt, optarg, NULL, exit_now, &status)) {
      if (*exit_now)
        return status;
      continue;
    }
    if (opt == '?')
      return DSEC_EXIT_USAGE;
    if (opt >= OPT_SPEC && opt < OPT_END && !(o->verb->options & O(opt))) {
      for (const struct option *lo = long_options; lo->name; lo++)
        if (lo->val == opt)
          return dsec_usage_error("%s: option --%s does not apply",
                                  o->verb->name, lo->name);
    }
    if (optarg && opt != OPT_SPEC && opt != OPT_STDIN &&
        opt != OPT_REQUESTS && opt != OPT_RESULT && opt != OPT_MOUNT) {
      /* a value that goes into the spec or the request (not a host file
       * named, nor --mount, checked with the spec) must be UTF-8:
       * json_string refuses it, and --protect or --hide would be left out
       * without a word */
      json_t *t = json_string(optarg);
      if (!t)
        for (const struct option *lo = long_options; lo->name; lo++)
          if (lo->val == opt)
            return dsec_usage_error("--%s: a value that is not UTF-8",
                                    lo->name);
      json_decref(t);
    }
    switch (opt) {
    case OPT_SPEC:
      o->spec_file = optarg;
      break;
    case OPT_IMAGE:
      dsec_spec_set(o->spec, "image", json_string(optarg));
      break;
    case OPT_LAYER:
      dsec_spec_append(o->spec, "layers", json_string(optarg));
      break;
    case OPT_BACKEND:
      dsec_spec_set(o->spec, "backend", json_string(optarg));
      break;
    case OPT_CPUS: {
      char *end;
      double c = strtod(optarg, &end);
      if (*end || !(c > 0) || c > 4096)
        return dsec_usage_error("--cpus takes a number above 0");
      dsec_spec_set(o->spec, "resources.cpus", json_real(c));
      break;
    }
    case OPT_MEMORY:
      if (set_uint(o->spec, "resources.memory_mb", optarg, "memory", 1 << 24))
        return DSEC_EXIT_USAGE;
      break;
    case OPT_PIDS:
      if (set_uint(o->spec, "resources.pids", optarg, "pids", 1 << 22))
        return DSEC_EXIT_USAGE;
      break;
    case OPT_DISK:
      if (set_uint(o->spec, "resources.disk_mb", optarg, "disk", 1 << 24))
        return DSEC_EXIT_USAGE;
      break;
    case OPT_MOUNT: {
      _cleanup_error_ struct dsec_error *e = NULL;
      json_t *m = dsec_parse_mount(optarg, &e);
      if (!m)
        return dsec_usage_error("%s", e->msg);
      dsec_spec_append(o->spec, "mounts", m);
      break;
    }
    case OPT_PMEM:
      json_object_set_new(o->spec, "pmem", json_true());
      break;
    case OPT_PROTECT:
      dsec_spec_append(o->spec, "protect", json_string(optarg));
      break;
    case OPT_HIDE:
      dsec_spec_append(o->spec, "hide", json_string(optarg));
      break;
    case OPT_ENV:
      if (parse_kv(optarg, "env", &k, &v))
        return DSEC_EXIT_USAGE;
      if (strcmp(o->verb->name, "exec") == 0 ||
          strcmp(o->verb->name, "shell") == 0) {
        json_t *env = json_object_get(o->exec, "env");
        if (!env)
          json_object_set_new(o->exec, "env", env = json_object());
        json_object_set_new(env, k, json_string(v));
      } else {
        json_t *env = json_object_get(o->spec, "env");
        if (!env)
          json_object_set_new(o->spec, "env", env = json_object());
        json_object_set_new(env, k, json_string(v));
      }
      free(k);
      free(v);
      break;
    case OPT_WORKDIR:
      if (strcmp(o->verb->name, "exec") == 0 ||
          strcmp(o->verb->name, "shell") == 0)
        json_object_set_new(o->exec, "workdir", json_string(optarg));
      else
        dsec_spec_set(o->spec, "workdir", json_string(optarg));
      break;
    case OPT_USER:
      dsec_spec_set(o->spec, "user", json_string(optarg));
      break;
    case OPT_LABEL:
      if (parse_kv(optarg, "label", &k, &v))
        return DSEC_EXIT_USAGE;
      if (strcmp(o->verb->name, "ps") == 0)
        json_object_set_new(o->label_filter, k, json_string(v));
      else {
        json_t *l = json_object_get(o->spec, "labels");
        if (!l)
          json_object_set_new(o->spec, "labels", l = json_object());
        json_object_set_new(l, k, json_string(v));
      }
      free(k);
      free(v);
      break;
    case OPT_TTL:
      if (set_uint(o->spec, "ttl_s", optarg, "ttl", INT32_MAX))
        return DSEC_EXIT_USAGE;
      break;
    case OPT_IDLE_TIMEOUT:
      if (set_uint(o->spec, "idle_timeout_s", optarg, "idle-timeout", INT32_MAX))
        return DSEC_EXIT_USAGE;
      break;
    case OPT_NAME:
      if (strcmp(o->verb->name, "checkpoint") == 0)
        o->layer_name = optarg;
      else
        dsec_spec_set(o->spec, "name", json_string(optarg));
      break;
    case OPT_RELEASE:
      o->release = true;
      break;
    case OPT_SIZE: {
      uint64_t n;
      if (dsec_parse_uint(optarg, 4096, &n) < 0 || n == 0)
        return dsec_usage_error("--size takes 1 to 4096");
      o->count = (int) n;
      break;
    }
    case OPT_COUNT: {
      uint64_t n;
      if (dsec_parse_uint(optarg, 1024, &n) < 0 || n == 0)
        return dsec_usage_error("--count takes 1 to 1024");
      o->count = (int) n;
      break;
    }
    case OPT_SEQ:
      if (set_uint(o->exec, "seq", optarg, "seq", INT64_MAX >> 1))
        return DSEC_EXIT_USAGE;
      break;
    case OPT_TIMEOUT: {
      char *end;
      double t = strtod(optarg, &end);
      if (*end || !(t >= 0) || t > 1e9)
        return dsec_usage_error("--timeout takes seconds (a number)");
      json_object_set_new(o->exec, "timeout_s", json_real(t));
      break;
    }
    case OPT_MAX_OUTPUT: {
      uint64_t b;
      if (dsec_parse_size(optarg, &b) < 0 || b > (64ULL << 20))
        return dsec_usage_error("--max-output takes a size up to 64M");
      json_object_set_new(o->exec, "max_output_bytes", json_integer((json_int_t) b));
      break;
    }
    case OPT_STDIN:
      o->stdin_file = optarg;
      break;
    case OPT_EXCLUSIVE:
      json_object_set_new(o->exec, "exclusive", json_true());
      break;
    case OPT_STREAM:
      json_object_set_new(o->exec, "stream", json_true());
      break;
    case OPT_ARCHIVE:
      o->archive = true;
      break;
    case OPT_TTY:
      json_object_set_new(o->exec, "tty", json_true());
      break;
    case OPT_TTY_SIZE: {
      unsigned long c = 0, r = 0;
      char *end = NULL;
      /* digits only: strtoul (and sscanf's %u) would take a sign or
       * leading blanks, and -4294967216 wraps to 80 */
      if (isdigit((unsigned char) optarg[0])) {
        c = strtoul(optarg, &end, 10);
        if (*end == 'x' && isdigit((unsigned char) end[1]))
          r = strtoul(end + 1, &end, 10);
        else
          end = NULL;
      }
      if (!end || *end || c < 1 || r < 1 || c > 10000 || r > 10000)
        return dsec_usage_error("--tty-size takes COLSxROWS, as 120x40");
      json_object_set_new(o->exec, "tty_size", json_pack("[i, i]", (int) c,
                                                         (int) r));
      json_object_set_new(o->exec, "tty", json_true());
      break;
    }
    case OPT_SESSION:
      if (!dsec_session_name_ok(optarg))
        return dsec_usage_error("--session takes a name of 1 to 64 letters, "
                                "digits, `.`, `_` or `-`");
      json_object_set_new(o->exec, "session", json_string(optarg));
      break;
    case OPT_SERVICE:
      if (!dsec_service_name_ok(optarg) && strcmp(optarg, "agent") != 0)
        return dsec_usage_error("--service takes a service's name (1 to 32 "
                                "of [a-z0-9-], a letter first) or `agent`");
      json_object_set_new(o->exec, "service", json_string(optarg));
      break;
    case OPT_REQUESTS:
      o->requests = optarg;
      break;
    case OPT_RM:
      o->rm = true;
      break;
    case OPT_ATTACH:
      o->attach = true;
      break;
    case OPT_RESULT:
      o->result_file = optarg;
      break;
    case OPT_ALL:
      o->all = true;
      break;
    case OPT_FORCE:
      o->force = true;
      break;
    case OPT_FOLLOW:
      o->follow = true;
      break;
    default:
      return DSEC_EXIT_USAGE;
    }
  }
  o->args = argv + optind;
  o->nargs = argc - optind;
  /* every combination is checked before any work */
  if (o->nargs < o->verb->min_args ||
      (o->verb->max_args >= 0 && o->nargs > o->verb->max_args))
    return dsec_usage_error("%s", o->verb->args_usage);
  if (o->cmd && o->verb->cmd == NO_CMD)
    return dsec_usage_error("%s takes no command", o->verb->name);
  if (o->verb->cmd == NEEDS_CMD && o->ncmd == 0)
    return dsec_usage_error("%s: give the command after --", o->verb->name);
  if (strcmp(o->verb->name, "exec") == 0) {
    if (!o->requests == (o->ncmd == 0))
      return dsec_usage_error("exec: give either -- CMD... or --requests");
    if (o->requests && (json_object_size(o->exec) -
                            (json_object_get(o->exec, "service") ? 1 : 0) ||
                        o->stdin_file))
      return dsec_usage_error("exec: --requests carries its own fields");
  }
  if (strcmp(o->verb->name, "fork") == 0 && o->count == 0)
    o->count = 1;
  if (strcmp(o->verb->name, "pool") == 0 && o->count == 0)
    o->count = 4;
  return 0;
}

/* ---- create */

static bool is_vm_backend(const char *b)
{
  return b && (strcmp(b, "microvm") == 0 || strcmp(b, "vm") == 0);
}

/* A spec as this front end takes it: valid, and of a backend it serves
 * (dsec-run serves the four, dsec-vm the VMs). */
static int front_check(const struct dsec_front *front, json_t *spec,
                       struct dsec_error **err)
{
  const char *backend;
  if (dsec_spec_validate(spec, err) < 0)
    return -1;
  backend = json_string_value(json_object_get(spec, "backend"));
  if (front->vm_only && !is_vm_backend(backend))
    return dsec_bad_input(err, "backend `%s` is served by dsec-run", backend);
  return 0;
}

static json_t *build_spec(struct opts *o, struct dsec_error **err)
{
  json_t *spec;
  if (o->spec_file) {
    spec = dsec_json_load_path(o->spec_file, DSEC_SPEC_MAX, err);
    if (!spec)
      return NULL;
    if (!json_is_object(spec)) {
      json_decref(spec);
      dsec_bad_input(err, "spec: must be a JSON object");
      return NULL;
    }
  } else
    spec = json_object();
  /* flags override the spec; list flags add to its lists */
  {
    const char *k;
    json_t *v;
    json_object_foreach(o->spec, k, v)
    {
      json_t *cur = json_object_get(spec, k);
      if (json_is_object(v) && json_is_object(cur))
        json_object_update(cur, v);
      else if (json_is_array(v) && json_is_array(cur))
        json_array_extend(cur, v);
      else
        json_object_set(spec, k, v);
    }
  }
  if (!json_object_get(spec, "backend"))
    json_object_set_new(spec, "backend",
                        json_string(o->front->default_backend));
  if (front_check(o->front, spec, err) < 0) {
    json_decref(spec);
    return NULL;
  }
  return spec;
}

static json_t *sandbox_record(const char *id, json_t *st)
{
  json_t *r = json_pack("{s:s, s:s}", "type", "sandbox", "id", id);
  static const char *const keys[] = { "name",    "state",   "backend",
                                      "created", "ended",   "cause",
                                      "init_pid", "supervisor_pid",
                                      "audit_unavailable",
                                      "landlock_unavailable", "accelerator",
                                      "kernel", "layer_format",
                                      "erofs_unavailable", "core_sched",
                                      "core_sched_unavailable", "damon",
                                      "damon_unavailable", NULL };
  json_t *why = json_object_get(json_object_get(st, "cgroup"), "unavailable");
  for (const char *const *k = keys; *k; k++) {
    json_t *v = json_object_get(st, *k);
    if (v)
      json_object_set(r, *k, v);
  }
  /* limits that could not be applied are said, never silently dropped */
  if (why)
    json_object_set(r, "limits_unavailable", why);
  return r;
}

/* The directory of a materialised layer.  The first use of a layer on this
 * store materialises it through dsec-layer: that cold path needs the
 * archive libraries, which dsec-run does not load (every exec pays for
 * each library a program loads). */
static char *layer_dir(struct dsec_store *s, const char *digest, bool erofs,
                       struct dsec_error **err)
{
  char *path = xasprintf("%s/layers/%s/%s", s->path, dsec_digest_hex(digest),
                         erofs ? "layer.erofs" : "rootfs");
  _cleanup_free_ char *prog = NULL;

  if (access(path, F_OK) == 0)
    return path;
  prog = dsec_sibling_program("dsec-layer");
  {
    char *argv[] = { prog, "materialise", "--format", erofs ? "erofs" : "dir",
                     (char *) digest, NULL };
    _cleanup_free_ char *out = NULL;
    if (dsec_run_program(argv, NULL, &out, err) < 0 || access(path, F_OK) < 0) {
      free(path);
      if (err && !*err)
        dsec_fail(err, errno, "layer %s was not materialised", digest);
      dsec_error_wrap(err, "layer %s", digest);
      return NULL;
    }
  }
  return path;
}

/* Why a container or fncall sandbox created now cannot run from its
 * layers' EROFS images (new string), or NULL when it may try. */
static char *erofs_unavailable(void)
{
  const char *force = getenv("DSEC_LAYER_FORMAT");
  if (force && strcmp(force, "dir") == 0)
    return xstrdup("DSEC_LAYER_FORMAT=dir");
  if (geteuid() != 0)
    return xstrdup("rootless (mounting erofs needs root)");
  return NULL;
}

/* The layers of a container or fncall sandbox (env's, bottom to top):
 * each layer's EROFS image mounted once on this host and cloned for the
 * sandbox (fds[i]), nothing extracted; where that cannot be done (no
 * erofs, no idmapped mounts of it, rootless, or told so), directories,
 * with the reason in env's "erofs_unavailable".  paths[i] get the image
 * or directory of each. */
static int container_layers(struct dsec_store *s, json_t *env, char **paths,
                            int *fds, struct dsec_error **err)
{
  json_t *ls = json_object_get(env, "layers"), *l;
  _cleanup_free_ char *why = erofs_unavailable();
  const char *backing = "file";
  size_t i, n = json_array_size(ls);

  for (i = 0; i < n && !why; i++) {
    const char *d = json_string_value(json_object_get(json_array_get(ls, i),
                                                      "digest"));
    _cleanup_error_ struct dsec_error *e = NULL;
    const char *b = NULL;
    paths[i] = layer_dir(s, d, true, &e);
    if (paths[i])
      fds[i] = dsec_layer_mount_clone(d, paths[i], &b, &e);
    if (fds[i] < 0)
      why = xstrdup(e && e->msg ? e->msg : "erofs");
    else if (strcmp(b, "loop") == 0)
      backing = "loop";
  }
  if (why) {
    for (i = 0; i < n; i++) {
      if (fds[i] >= 0)
        close(fds[i]);
      fds[i] = -1;
      free(paths[i]);
      paths[i] = NULL;
    }
  }
  json_array_foreach(ls, i, l)
  {
    if (why) {
      paths[i] = layer_dir(s, json_string_value(json_object_get(l, "digest")),
                           false, err);
      if (!paths[i])
        return -1;
    }
    json_object_set_new(l, "path", json_string(paths[i]));
    json_object_set_new(l, "format", json_string(why ? "dir" : "erofs"));
  }
  json_object_set_new(env, "layer_format", json_string(why ? "dir" : "erofs"));
  if (why) {
    json_object_set_new(env, "erofs_unavailable", json_string(why));
    dsec_debug("layers as directories: %s", why);
  } else
    json_object_set_new(env, "erofs_backing", json_string(backing));
  return 0;
}

/* A host-wide mount (layermount.h) a container or fncall sandbox takes
 * its own of, from open, in *fd; or -1 where there is none, told so with
 * var=own (the environment variable), rootless, or it cannot be made.
 * env says which: env[key] shared or "own", and why in env[why]. */
static void container_host_mount(json_t *env, const char *var, const char *key,
                                 const char *shared, const char *why,
                                 int (*open)(struct dsec_error **), int *fd)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  const char *want = getenv(var);

  if (want && strcmp(want, "own") == 0) {
    *fd = -1;
    dsec_error_set(&e, DSEC_EXIT_FAILURE, 0, "%s=own", var);
  } else
    *fd = open(&e);
  json_object_set_new(env, key, json_string(*fd >= 0 ? shared : "own"));
  if (*fd < 0) {
    json_object_set_new(env, why, json_string(e && e->msg ? e->msg : key));
    dsec_debug("%s of the sandbox's own: %s", key, e ? e->msg : "");
  }
}

/* The /sys of a container or fncall sandbox: a clone of the host's
 * shared sysfs, or (-1) one the sandbox mounts itself ("sysfs": "shared"
 * or "own", "sysfs_unshared"); its mount namespace: a copy of the
 * template, or (-1) one its init pivot_roots out of, copied from the
 * host's ("mount_ns": "template" or "own", "mount_ns_own"). */
static void container_sysfs(json_t *env, int *fd)
{
  container_host_mount(env, "DSEC_SYSFS", "sysfs", "shared", "sysfs_unshared",
                       dsec_sysfs_mount_clone, fd);
}

static void container_mount_ns(json_t *env, int *fd)
{
  container_host_mount(env, "DSEC_MOUNT_NS", "mount_ns", "template",
                       "mount_ns_own", dsec_rootns_open, fd);
}

/* The /dev of container or fncall sandbox id: a clone of its directory in
 * the host's shared tmpfs, or (-1) a tmpfs of its own ("dev": "shared" or
 * "own", "dev_unshared").  Only a sandbox with a memory limit shares it:
 * what it writes in /dev/shm is bounded by that limit alone. */
static void container_dev(json_t *env, json_t *spec, const char *id, int *fd)
{
  _cleanup_error_ struct dsec_error *e = NULL;
  const char *want = getenv("DSEC_DEV");

  *fd = -1;
  if (want && strcmp(want, "own") == 0)
    dsec_error_set(&e, DSEC_EXIT_FAILURE, 0, "DSEC_DEV=own");
  else if (!json_object_get(json_object_get(spec, "resources"), "memory_mb"))
    dsec_error_set(&e, DSEC_EXIT_FAILURE, 0,
                   "no memory limit (resources.memory_mb)");
  else
    *fd = dsec_devfs_clone(id, &e);
  json_object_set_new(env, "dev", json_string(*fd >= 0 ? "shared" : "own"));
  if (*fd < 0) {
    json_object_set_new(env, "dev_unshared",
                        json_string(e && e->msg ? e->msg : "dev"));
    dsec_debug("dev of the sandbox's own: %s", e ? e->msg : "");
  }
}

/* Creates the sandbox; *id gets its id. */
/* ---- warm pools
 *
 * $DSEC_ROOT/pools/<key>/ holds a pool's spec and, under ready/, one empty
 * file per idle sandbox it keeps.  <key> is the sha256 of the spec as
 * validated, without name and labels: a create whose spec has the same
 * key claims a ready sandbox by renaming its file (one claimer wins), and
 * gets it named and labelled as it asked. */

static char *pools_dir(void)
{
  _cleanup_free_ char *root = dsec_root_dir();
  return xasprintf("%s/pools", root);
}

/* The text a pool's key is the sha256 of: the validated spec without name
 * and labels, compact, keys sorted (new string). */
static char *pool_text(json_t *spec)
{
  json_t *k = json_deep_copy(spec);
  char *text;
  json_object_del(k, "name");
  json_object_del(k, "labels");
  text = json_dumps(k, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
  json_decref(k);
  return text;
}

/* The pool key of a validated spec (new string, 64 hex digits). */
static char *pool_key(json_t *spec)
{
  _cleanup_free_ char *text = pool_text(spec);
  char d[DSEC_DIGEST_LEN + 1];
  dsec_sha256_buf(text, strlen(text), d);
  return xstrdup(dsec_digest_hex(d));
}

/* The key of the pool kept for spec, or NULL.  A pool writes its
 * pool_text to KEY/key.json, and a create compares its own with each
 * pool's rather than hashing it: the hash would load libcrypto (and read
 * openssl.cnf) in every create, which took longer than all the rest of a
 * claim (6.7 against 2.8 ms). */
static char *pool_find(const char *pools, json_t *spec)
{
  _cleanup_closedir_ DIR *d = opendir(pools);
  _cleanup_free_ char *text = NULL;
  struct dirent *de;
  size_t len;

  if (!d)
    return NULL;
  text = pool_text(spec);
  len = strlen(text);
  while ((de = readdir(d))) {
    _cleanup_free_ char *path = NULL;
    _cleanup_free_ char *kept = NULL;
    _cleanup_error_ struct dsec_error *e = NULL;
    size_t n = 0;
    if (!dsec_digest_hex_valid(de->d_name))
      continue;
    path = xasprintf("%s/key.json", de->d_name);
    kept = dsec_read_file_at(dirfd(d), path, len + 1, &n, &e);
    if (kept && n == len && memcmp(kept, text, len) == 0)
      return xstrdup(de->d_name);
  }
  return NULL;
}

static json_t *read_json_in(const char *id, const char *file);
static int create_any(json_t *spec, char **id_out, json_t **record,
                      struct dsec_error **err);
static json_t *world_members(const char *agent);
static bool world_is(const char *id);
static int exec_route(char **id, json_t *req, struct dsec_error **err);
static json_t *supervisor_op(const char *id, json_t *req,
                             struct dsec_error **err);
static int world_remove(const char *agent, bool force, struct dsec_error **err);
static json_t *world_states(const char *agent);
static int world_refuse_member(const char *id, const char *verb,
                               struct dsec_error **err);

/* Claims a ready sandbox of the pool for spec, if there is one: it gets
 * spec's name and labels.  Returns 1 with *id_out and *record, 0 when no
 * pool has one. */
static int pool_claim(json_t *spec, char **id_out, json_t **record,
                      struct dsec_error **err)
{
  _cleanup_free_ char *pools = pools_dir();
  _cleanup_free_ char *key = NULL;
  _cleanup_free_ char *ready = NULL;
  _cleanup_free_ char *claimed = NULL;
  _cleanup_closedir_ DIR *d = NULL;
  struct dirent *de;

  if (!(key = pool_find(pools, spec)))
    return 0;
  ready = xasprintf("%s/%s/ready", pools, key);
  claimed = xasprintf("%s/%s/claimed", pools, key);
  if (!(d = opendir(ready)))
    return 0;
  mkdir(claimed, 0700);
  while ((de = readdir(d))) {
    _cleanup_free_ char *from = NULL;
    _cleanup_free_ char *to = NULL;
    _cleanup_json_ json_t *st = NULL;
    _cleanup_error_ struct dsec_error *e = NULL;
    const char *state;

    if (!dsec_sandbox_id_valid(de->d_name))
      continue;
    from = xasprintf("%s/%s", ready, de->d_name);
    to = xasprintf("%s/%s", claimed, de->d_name);
    if (rename(from, to) < 0)
      continue; /* another create took it */
    unlink(to);
    st = dsec_sandbox_status(de->d_name, &e);
    state = st ? json_string_value(json_object_get(st, "state")) : NULL;
    if (!state || strcmp(state, "running") != 0) {
      dsec_sandbox_stop(de->d_name, true, NULL);
      continue;
    }
    {
      /* it is the caller's now: its name and labels */
      _cleanup_json_ json_t *was = read_json_in(de->d_name, "spec.json");
      _cleanup_free_ char *dir = dsec_sandbox_dir(de->d_name);
      _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      char *text;
      const char *name = json_string_value(json_object_get(spec, "name"));
      if (!was || dfd < 0)
        continue;
      if (name && dsec_sandbox_name_claim(name, de->d_name, err) < 0) {
        /* put it back for someone else */
        int fd = open(from, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        if (fd >= 0)
          close(fd);
        return -1;
      }
      json_object_set(was, "labels", json_object_get(spec, "labels"));
      if (name)
        json_object_set_new(was, "name", json_string(name));
      text = json_dumps(was, JSON_COMPACT | JSON_REAL_PRECISION(10));
      dsec_write_file_replace(dfd, "spec.json", text, strlen(text), 0644, NULL);
      free(text);
      if (name) {
        json_object_set_new(st, "name", json_string(name));
        dsec_sandbox_state_write(de->d_name, st, NULL);
      }
    }
    *record = sandbox_record(de->d_name, st);
    json_object_set_new(*record, "pool", json_string(key));
    *id_out = xstrdup(de->d_name);
    {
      _cleanup_error_ struct dsec_error *ee = NULL;
      json_t *ev = json_pack("{s:s, s:s}", "type", "claimed", "pool", key);
      dsec_event_append(-1, de->d_name, ev, &ee);
      json_decref(ev);
    }
    return 1;
  }
  return 0;
}

/* Creates a sandbox from a validated spec (stolen).  With reuse_id, boots
 * that existing sandbox again (resume of a released one): same id,
 * directory, trajectory and name; a fresh writable layer. */
/* restore and disk_from (dsec-vm): a memory snapshot to start from and
 * the writable disk that goes with it. */
static int create_sandbox(json_t *spec_in, const char *reuse_id,
                          const char *restore, const char *disk_from,
                          char **id_out, json_t **record,
                          struct dsec_error **err)
{
  _cleanup_json_ json_t *spec = spec_in;
  _cleanup_json_ json_t *env = NULL;
  _cleanup_free_ char *id = NULL;
  _cleanup_free_ char *dir = NULL;
  struct dsec_store *store = NULL;
  _cleanup_close_ int gc = -1;
  char **layers = NULL;
  int *layer_fds = NULL;
  size_t n_layers = 0;
  const char *backend;
  bool vm;
  int ret = -1, pfd[2] = { -1, -1 }, gofd[2] = { -1, -1 };
  pid_t pid = -1;

  if (!spec)
    return -1;
  backend = json_string_value(json_object_get(spec, "backend"));
  vm = is_vm_backend(backend);
  if (vm && json_array_size(json_object_get(spec, "mounts")) > 0)
    return dsec_bad_input(err, "a VM cannot have host paths bound into it "
                               "(mounts); put them in a layer");
  if (!vm && geteuid() != 0) {
    /* rootless: one id is ours to map (root inside is us outside), and
     * loop devices are root's */
    uid_t u;
    gid_t g;
    dsec_parse_user(json_string_value(json_object_get(spec, "user")), &u, &g);
    if (u != 0 || g != 0)
      return dsec_bad_input(err, "rootless sandboxes run as 0:0 (only our own "
                                 "id is mapped)");
    if (json_object_get(json_object_get(spec, "resources"), "disk_mb"))
      return dsec_fail(err, EPERM, "a disk limit needs root (loop devices)");
  }
  {
    json_t *m;
    size_t i;
    json_array_foreach(json_object_get(spec, "mounts"), i, m)
    {
      struct stat st;
      const char *src = json_string_value(json_object_get(m, "source"));
      if (stat(src, &st) < 0)
        return dsec_error_set(err, DSEC_EXIT_INPUT, errno,
                              "mount source %s", src);
    }
  }

  /* the environment: compose and materialise the layers */
  if (dsec_store_open(&store, err) < 0)
    return -1;
  /* the store's gc lock, shared, until environment.json is in place: a
   * collector never removes a layer this sandbox is about to use */
  gc = dsec_store_lock_gc(store, false, err);
  if (gc < 0)
    goto out;
  {
    json_t *ls = json_object_get(spec, "layers");
    size_t n = json_array_size(ls);
    const char **names = xzalloc(sizeof *names * (n + 1));
    json_t *l;
    size_t i;
    for (i = 0; i < n; i++)
      names[i] = json_string_value(json_array_get(ls, i));
    env = dsec_compose(store, json_string_value(json_object_get(spec, "image")),
                       names, n, err);
    free(names);
    if (!env)
      goto out;
    n_layers = json_array_size(json_object_get(env, "layers"));
    layers = xzalloc(sizeof *layers * (n_layers + 1));
    if (!vm) {
      layer_fds = xmalloc(sizeof *layer_fds * (n_layers + 3));
      for (i = 0; i < n_layers + 3; i++)
        layer_fds[i] = -1;
      if (container_layers(store, env, layers, layer_fds, err) < 0)
        goto out;
      container_sysfs(env, &layer_fds[n_layers]);
      container_mount_ns(env, &layer_fds[n_layers + 1]);
    } else
      json_array_foreach(json_object_get(env, "layers"), i, l)
      {
        layers[i] = layer_dir(store,
                              json_string_value(json_object_get(l, "digest")),
                              vm, err);
        if (!layers[i])
          goto out;
        json_object_set_new(l, "path", json_string(layers[i]));
      }
  }

  /* The supervisor is forked first and waits for "go": the state file
   * names it from the start, so whoever finds the directory (ps, rm, the
   * reaper) can tell a live creation from a dead one.  The directory
   * appears complete or not at all (made under a temporary name). */
  id = reuse_id ? xstrdup(reuse_id) : dsec_sandbox_new_id();
  dir = dsec_sandbox_dir(id);
  if (layer_fds)
    container_dev(env, spec, id, &layer_fds[n_layers + 2]);
  if (pipe2(pfd, O_CLOEXEC) < 0 || pipe2(gofd, O_CLOEXEC) < 0) {
    dsec_fail(err, errno, "pipe");
    goto out;
  }
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid < 0) {
    dsec_fail(err, errno, "fork");
    goto out;
  }
  if (pid == 0) {
    dsec_crash_role("supervisor");
    struct dsec_container_opts co = {
      .id = id, .spec = spec, .environment = env, .layers = layers,
      .n_layers = n_layers, .ready_fd = pfd[1], .restore = restore,
      .disk_from = disk_from, .layer_fds = layer_fds,
    };
    char go;
    close(pfd[0]);
    close(gofd[1]);
    /* the supervisor outlives us: it is the sandbox's owner, not a
     * daemon (one per sandbox, gone with it) */
    setsid();
    if (read(gofd[0], &go, 1) != 1) {
      /* the creation was abandoned, or its creator died (killed between
       * making the directory under its temporary name and the rename):
       * that name is this creation's alone, and goes with it */
      if (!reuse_id) {
        _cleanup_free_ char *parent = dsec_sandboxes_dir();
        _cleanup_free_ char *tmp = xasprintf("%s/.tmp-%s", parent, id);
        dsec_rm_rf_at(AT_FDCWD, tmp, NULL);
      }
      _exit(0);
    }
    close(gofd[0]);
    close(gc); /* the lock is the creation's, not the supervisor's */
    dsec_store_free(store);
    /* nothing of the creator's leaks into the supervisor (serve has pipes
     * of other requests open): the ready pipe becomes fd 3, the rest go */
    if (dup2(pfd[1], 3) < 0)
      _exit(1);
    /* and the layers' mounts 4, 5, ..., then the sysfs's, the template
     * mount namespace's and /dev's (first out of that range) */
    for (size_t i = 0; layer_fds && i < n_layers + 3; i++)
      if (layer_fds[i] >= 0 &&
          (layer_fds[i] = fcntl(layer_fds[i], F_DUPFD_CLOEXEC,
                                7 + (int) n_layers)) < 0)
        _exit(1);
    for (size_t i = 0; layer_fds && i < n_layers + 3; i++)
      if (layer_fds[i] >= 0 &&
          (layer_fds[i] = dup3(layer_fds[i], 4 + (int) i, O_CLOEXEC)) < 0)
        _exit(1);
    syscall(SYS_close_range, 4U + (unsigned) (layer_fds ? n_layers + 3 : 0),
            ~0U, 0U);
    /* the slots of layers that came as directories (no mount), or of no
     * sysfs, template or /dev, held the creator's descriptors: a pipe of
     * serve's kept open there would never see its end */
    for (size_t i = 0; layer_fds && i < n_layers + 3; i++)
      if (layer_fds[i] < 0)
        close(4 + (int) i);
    co.ready_fd = 3;
    if (vm)
      dsec_vm_supervisor_main(&co);
    dsec_supervisor_main(&co);
  }
  close(gofd[0]);
  gofd[0] = -1;
  dsec_crash_point("supervisor forked");
  {
    _cleanup_free_ char *parent = dsec_sandboxes_dir();
    _cleanup_free_ char *tmpdir = NULL;
    _cleanup_close_ int dfd = -1;
    _cleanup_free_ char *now = dsec_time_rfc3339();
    char *text;
    json_t *st;

    if (dsec_mkdir_p(AT_FDCWD, parent, 0700, err) < 0)
      goto abandon;
    /* a resumed sandbox keeps its directory; its writable layer was taken
     * into its checkpoint and starts empty */
    tmpdir = reuse_id ? xstrdup(dir) : xasprintf("%s/.tmp-%s", parent, id);
    if (reuse_id) {
      static const char *const gone[] = { "upper", "work", "upper.img" };
      for (size_t i = 0; i < ARRAY_SIZE(gone); i++) {
        _cleanup_free_ char *p = xasprintf("%s/%s", dir, gone[i]);
        if (dsec_rm_rf_at(AT_FDCWD, p, err) < 0)
          goto abandon;
      }
    } else if (mkdir(tmpdir, 0700) < 0) {
      dsec_fail(err, errno, "cannot create %s", tmpdir);
      goto abandon;
    }
    dfd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    text = json_dumps(spec, JSON_COMPACT | JSON_REAL_PRECISION(10));
    ret = dfd < 0 ? dsec_fail(err, errno, "cannot open %s", tmpdir)
                  : dsec_write_file_replace(dfd, "spec.json", text,
                                            strlen(text), 0644, err);
    free(text);
    if (ret == 0) {
      text = json_dumps(env, JSON_COMPACT);
      ret = dsec_write_file_replace(dfd, "environment.json", text,
                                    strlen(text), 0644, err);
      free(text);
    }
    st = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I}", "type", "sandbox", "id",
                   id, "state", "creating", "created", now, "supervisor_pid",
                   (int) pid, "supervisor_start",
                   (json_int_t) dsec_process_starttime(pid));
    if (reuse_id) {
      /* a resumed sandbox keeps the time it was first created, the
       * counts of what its audit log dropped, and its sessions (adopted
       * where its processes live on, else reported lost) */
      _cleanup_json_ json_t *old = dsec_sandbox_state_read(id, NULL);
      static const char *const kept[] = { "audit", "sessions" };
      static const char *const from[] = { "checkpoint", "snapshot" };
      if (json_is_string(json_object_get(old, "created")))
        json_object_set(st, "created", json_object_get(old, "created"));
      for (size_t k = 0; k < ARRAY_SIZE(kept); k++)
        if (json_is_object(json_object_get(old, kept[k])))
          json_object_set(st, kept[k], json_object_get(old, kept[k]));
      /* and what it resumes from: a resume killed before its supervisor
       * runs leaves it released (dsec_sandbox_status), not dead */
      json_object_set_new(st, "resuming", json_true());
      for (size_t k = 0; k < ARRAY_SIZE(from); k++)
        if (json_is_string(json_object_get(old, from[k])))
          json_object_set(st, from[k], json_object_get(old, from[k]));
    }
    if (ret == 0) {
      text = json_dumps(st, JSON_COMPACT);
      ret = dsec_write_file_replace(dfd, "state.json", text, strlen(text),
                                    0644, err);
      free(text);
    }
    json_decref(st);
    if (ret == 0 && !reuse_id && rename(tmpdir, dir) < 0)
      ret = dsec_fail(err, errno, "cannot create %s", dir);
    if (ret == 0)
      dsec_crash_point("directory made");
    if (ret < 0) {
      if (!reuse_id)
        dsec_rm_rf_at(AT_FDCWD, tmpdir, NULL);
      goto abandon;
    }
    close(dsec_steal_fd(&gc)); /* the sandbox references its layers now */
    ret = -1;
    if (!reuse_id && json_object_get(spec, "name") &&
        dsec_sandbox_name_claim(json_string_value(json_object_get(spec, "name")),
                                id, err) < 0) {
      json_object_del(spec, "name");
      close(gofd[1]);
      gofd[1] = -1;
      waitpid(pid, NULL, 0);
      goto fail_dir;
    }
  }
  if (write(gofd[1], "g", 1) != 1) {
    dsec_fail(err, errno, "the supervisor is gone");
    goto fail_dir;
  }
  close(gofd[1]);
  gofd[1] = -1;
  close(pfd[1]);
  pfd[1] = -1;
  dsec_crash_point("go");
  {
    _cleanup_free_ char *line = NULL;
    _cleanup_json_ json_t *ready = NULL;
    _cleanup_json_ json_t *st = NULL;
    size_t len;
    line = dsec_read_fd(pfd[0], 1 << 16, &len, err);
    if (!line)
      goto fail_dir;
    ready = json_loadb(line, len, 0, NULL);
    if (!ready) {
      dsec_fail(err, 0, "the supervisor died while creating the sandbox");
      kill(pid, SIGKILL);
      goto fail_dir;
    }
    if (!json_is_true(json_object_get(ready, "ok"))) {
      int status = (int) json_integer_value(json_object_get(ready, "status"));
      dsec_error_set(err, status ? status : DSEC_EXIT_FAILURE,
                     (int) json_integer_value(json_object_get(ready, "errno")),
                     "%s", json_string_value(json_object_get(ready, "error")));
      waitpid(pid, NULL, WNOHANG);
      goto fail_dir;
    }
    st = dsec_sandbox_state_read(id, err);
    if (!st)
      goto out;
    *record = sandbox_record(id, st);
    {
      json_t *r = json_object_get(spec, "resources");
      json_t *why = json_object_get(*record, "limits_unavailable");
      if (why && (json_object_get(r, "memory_mb") || json_object_get(r, "pids") ||
                  json_object_get(r, "cpus")))
        dsec_warn("%s: the limits asked for are not applied: %s", id,
                  json_string_value(why));
      why = json_object_get(*record, "landlock_unavailable");
      if (why && json_array_size(json_object_get(spec, "protect")))
        dsec_warn("%s: protect is enforced without Landlock: %s", id,
                  json_string_value(why));
    }
  }
  *id_out = steal_pointer(&id);
  ret = 0;
  goto out;

abandon:
  /* the supervisor sees EOF on "go" and leaves, having made nothing */
  if (gofd[1] >= 0) {
    close(gofd[1]);
    gofd[1] = -1;
  }
  if (pid > 0)
    waitpid(pid, NULL, 0);
  goto out;
fail_dir:
  if (reuse_id) {
    /* a failed resume leaves the sandbox released, its trajectory and
     * checkpoint intact, for another try */
    _cleanup_json_ json_t *old = dsec_sandbox_state_read(id, NULL);
    json_t *st = json_pack("{s:s, s:s, s:s, s:b, s:s}", "type", "sandbox",
                           "id", id, "state", "suspended", "released", true,
                           "cause", "resume failed");
    if (old && json_object_get(old, "checkpoint"))
      json_object_set(st, "checkpoint", json_object_get(old, "checkpoint"));
    if (old && json_object_get(old, "snapshot"))
      json_object_set(st, "snapshot", json_object_get(old, "snapshot"));
    if (old && json_object_get(old, "created"))
      json_object_set(st, "created", json_object_get(old, "created"));
    if (old && json_object_get(old, "audit"))
      json_object_set(st, "audit", json_object_get(old, "audit"));
    {
      struct dsec_cgroup *cg = dsec_cgroup_for_id(id);
      dsec_cgroup_destroy(cg, NULL);
      dsec_cgroup_free(cg);
    }
    dsec_sandbox_state_write(id, st, NULL);
    json_decref(st);
  } else {
    /* whatever the supervisor made before it failed or died (cgroups, by
     * the id) goes with the directory */
    _cleanup_error_ struct dsec_error *e = NULL;
    if (dsec_sandbox_stop(id, true, &e) < 0)
      dsec_sandbox_remove_files(id, spec);
  }
out:
  for (int i = 0; i < 2; i++) {
    if (pfd[i] >= 0)
      close(pfd[i]);
    if (gofd[i] >= 0)
      close(gofd[i]);
  }
  for (size_t i = 0; layers && i < n_layers; i++)
    free(layers[i]);
  free(layers);
  for (size_t i = 0; layer_fds && i < n_layers + 3; i++)
    if (layer_fds[i] >= 0)
      close(layer_fds[i]);
  free(layer_fds);
  dsec_store_free(store);
  return ret;
}

static int do_create(struct opts *o, char **id_out, json_t **record,
                     struct dsec_error **err)
{
  json_t *spec = build_spec(o, err);
  int r;
  if (!spec)
    return -1;
  /* a warm pool of the same spec hands one over at once (a world is
   * never pooled) */
  r = json_object_get(spec, "services") ? 0
                                        : pool_claim(spec, id_out, record, err);
  if (r != 0) {
    json_decref(spec);
    return r < 0 ? -1 : 0;
  }
  return create_any(spec, id_out, record, err);
}

/* ---- exec */

static int exit_status_of(json_t *res)
{
  const char *type = json_string_value(json_object_get(res, "type"));
  json_int_t code = json_integer_value(json_object_get(res, "exit_code"));
  if (type && strcmp(type, "error") == 0)
    return code ? (int) code : DSEC_EXIT_INTERNAL;
  if (code < 0 || code > 255)
    return DSEC_EXIT_INTERNAL;
  return (int) code;
}

static json_t *exec_request(struct opts *o, struct dsec_error **err)
{
  json_t *req = json_deep_copy(o->exec);
  json_t *cmd = json_array();
  if (json_object_get(req, "session")) {
    /* one command line: the words joined, as ssh does */
    size_t n = 1;
    char *line, *p;
    for (int i = 0; i < o->ncmd; i++)
      n += strlen(o->cmd[i]) + 1;
    p = line = xzalloc(n);
    for (int i = 0; i < o->ncmd; i++)
      p = stpcpy(stpcpy(p, i ? " " : ""), o->cmd[i]);
    json_array_append_new(cmd, json_string(line));
    free(line);
  } else
    for (int i = 0; i < o->ncmd; i++)
      json_array_append_new(cmd, json_string(o->cmd[i]));
  json_object_set_new(req, "cmd", cmd);
  if (o->stdin_file) {
    size_t len;
    char *data = strcmp(o->stdin_file, "-") == 0
                   ? dsec_read_fd(STDIN_FILENO, 64u << 20, &len, err)
                   : dsec_read_file_at(AT_FDCWD, o->stdin_file, 64u << 20, &len,
                                       err);
    if (!data) {
      json_decref(req);
      return NULL;
    }
    json_object_set_new(req, "stdin", json_stringn(data, len));
    free(data);
    if (!json_object_get(req, "stdin")) {
      json_decref(req);
      dsec_bad_input(err, "--stdin: the input must be UTF-8 text");
      return NULL;
    }
  }
  return req;
}

static int connect_running(const char *id, struct dsec_conn **c,
                           struct dsec_error **err)
{
  _cleanup_json_ json_t *st = dsec_sandbox_status(id, err);
  const char *state;
  if (!st)
    return -1;
  state = json_string_value(json_object_get(st, "state"));
  /* a frozen sandbox's supervisor still answers (resume, rm, status) */
  if (!state || (strcmp(state, "running") != 0 &&
                 !(strcmp(state, "suspended") == 0 &&
                   !json_is_true(json_object_get(st, "released")))))
    return dsec_error_set(err, DSEC_EXIT_INTERNAL, 0,
                          "sandbox %s is %s%s%s", id, state ? state : "unknown",
                          json_object_get(st, "cause") ? ": " : "",
                          json_object_get(st, "cause")
                            ? json_string_value(json_object_get(st, "cause"))
                            : "");
  return dsec_conn_open(id, c, err);
}

/* An exec whose request asked for "stream": every output record is
 * printed as it comes, then *res gets the result. */
static int exec_streamed(const char *id, json_t *req, json_t **res,
                         struct dsec_error **err)
{
  struct dsec_conn *c = NULL;

  if (connect_running(id, &c, err) < 0 || dsec_conn_send(c, req, err) < 0) {
    (*err)->status = (*err)->status == DSEC_EXIT_INPUT ? DSEC_EXIT_INPUT
                                                      : DSEC_EXIT_INTERNAL;
    dsec_conn_close(c);
    return -1;
  }
  for (;;) {
    json_t *m = dsec_conn_recv(c, err);
    if (!m) {
      (*err)->status = DSEC_EXIT_INTERNAL;
      dsec_conn_close(c);
      return -1;
    }
    if (strcmp(json_string_value(json_object_get(m, "type")) ?: "", "output")) {
      *res = m;
      dsec_conn_close(c);
      return 0;
    }
    if (dsec_json_print_new(m, err) < 0) {
      dsec_conn_close(c);
      return -1;
    }
  }
}

static int exec_one(const char *id, json_t *req, json_t **res,
                    struct dsec_error **err)
{
  struct dsec_conn *c = NULL;

  if (json_is_true(json_object_get(req, "stream")))
    return exec_streamed(id, req, res, err);
  if (connect_running(id, &c, err) < 0) {
    (*err)->status = (*err)->status == DSEC_EXIT_INPUT ? DSEC_EXIT_INPUT
                                                      : DSEC_EXIT_INTERNAL;
    return -1;
  }
  *res = dsec_conn_call(c, req, err);
  dsec_conn_close(c);
  if (!*res) {
    (*err)->status = DSEC_EXIT_INTERNAL;
    return -1;
  }
  return 0;
}

/* run --attach: the command's output as it comes, on our stdout and
 * stderr; *res gets the final result. */
static int exec_attached(const char *id, json_t *req, json_t **res,
                         struct dsec_error **err)
{
  struct dsec_conn *c = NULL;
  int ret = connect_running(id, &c, err);

  if (ret < 0) {
    (*err)->status = DSEC_EXIT_INTERNAL;
    return -1;
  }
  if (dsec_conn_send(c, req, err) < 0)
    goto fail;
  for (;;) {
    json_t *m = dsec_conn_recv(c, err);
    const char *type, *b64;
    if (!m)
      goto fail;
    type = json_string_value(json_object_get(m, "type"));
    if (!type || strcmp(type, "output") != 0) {
      *res = m;
      dsec_conn_close(c);
      return 0;
    }
    b64 = json_string_value(json_object_get(m, "data_b64"));
    if (b64) {
      size_t len = 0;
      unsigned char *out = dsec_base64_decode(b64, &len);
      if (len > 0)
        dsec_write_all(strcmp(json_string_value(json_object_get(m, "stream")),
                              "stderr") == 0
                         ? STDERR_FILENO
                         : STDOUT_FILENO,
                       out, len, NULL);
      free(out);
    }
    json_decref(m);
  }
fail:
  (*err)->status = DSEC_EXIT_INTERNAL;
  dsec_conn_close(c);
  return -1;
}

static int do_requests(const char *id, const char *file, int *status,
                       struct dsec_error **err)
{
  FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "re");
  struct dsec_conn *c = NULL;
  char *line = NULL;
  size_t cap = 0, sent = 0;
  ssize_t n;
  int ret = 0, lineno = 0;

  if (!in)
    return dsec_error_set(err, errno == ENOENT ? DSEC_EXIT_INPUT
                                               : DSEC_EXIT_FAILURE,
                          errno, "cannot open %s", file);
  if (connect_running(id, &c, err) < 0) {
    if (in != stdin)
      fclose(in);
    return -1;
  }
  /* one request at a time: the answer is printed before the next is read,
   * so a trainer can stream requests through a pipe */
  while ((n = getline(&line, &cap, in)) > 0) {
    _cleanup_json_ json_t *req = NULL;
    _cleanup_json_ json_t *res = NULL;
    lineno++;
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
      line[--n] = '\0';
    if (n == 0)
      continue;
    req = dsec_json_parse(line, (size_t) n, "request", err);
    if (!req || !json_is_object(req)) {
      if (req)
        dsec_bad_input(err, "request: must be a JSON object");
      dsec_error_wrap(err, "%s line %d", file, lineno);
      ret = -1;
      break;
    }
    if (json_object_get(req, "service")) {
      /* a line for a world's service goes there */
      _cleanup_free_ char *tid = xstrdup(id);
      if (exec_route(&tid, req, err) < 0) {
        dsec_error_wrap(err, "%s line %d", file, lineno);
        ret = -1;
        break;
      }
      if (exec_one(tid, req, &res, err) < 0) {
        ret = -1;
        break;
      }
    } else
      res = dsec_conn_call(c, req, err);
    if (!res) {
      (*err)->status = DSEC_EXIT_INTERNAL;
      ret = -1;
      break;
    }
    sent++;
    *status = exit_status_of(res);
    if (dsec_json_print(res, err) < 0) {
      ret = -1;
      break;
    }
  }
  free(line);
  dsec_conn_close(c);
  if (in != stdin)
    fclose(in);
  return ret;
}

/* ---- rm, kill, ps, inspect, events */

static int do_rm(struct opts *o, struct dsec_error **err)
{
  int ret = 0;
  for (int i = 0; i < o->nargs; i++) {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[i], &e);
    if (!id) {
      if (o->force)
        continue;
      if (!*err)
        *err = steal_pointer(&e);
      ret = -1;
      continue;
    }
    {
      /* a world goes as one: its services, then its agent */
      _cleanup_json_ json_t *members = world_members(id);
      /* (--force takes a service alone: what is left of a world) */
      if ((!o->force && world_refuse_member(id, "rm", &e) < 0) ||
          (members ? world_remove(id, o->force, &e)
                   : dsec_sandbox_stop(id, o->force, &e)) < 0) {
        if (!*err)
          *err = steal_pointer(&e);
        ret = -1;
        continue;
      }
      if (dsec_json_print_new(json_pack("{s:s, s:s, s:O*}", "type", "removed",
                                        "id", id, "services", members),
                              err) < 0)
        return -1;
    }
  }
  return ret;
}

static int parse_signal(const char *s)
{
  static const struct {
    const char *name;
    int sig;
  } sigs[] = { { "HUP", SIGHUP },   { "INT", SIGINT },   { "QUIT", SIGQUIT },
               { "KILL", SIGKILL }, { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 },
               { "TERM", SIGTERM }, { "CONT", SIGCONT }, { "STOP", SIGSTOP },
               { "ALRM", SIGALRM } };
  uint64_t n;
  if (dsec_str_has_prefix(s, "SIG"))
    s += 3;
  for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
    if (strcasecmp(s, sigs[i].name) == 0)
      return sigs[i].sig;
  if (dsec_parse_uint(s, NSIG - 1, &n) == 0 && n > 0)
    return (int) n;
  return -1;
}

static int do_kill(struct opts *o, struct dsec_error **err)
{
  _cleanup_free_ char *id = NULL;
  struct dsec_conn *c = NULL;
  int sig = o->nargs > 1 ? parse_signal(o->args[1]) : SIGKILL;
  json_t *req, *res;

  if (sig < 0)
    return dsec_error_set(err, DSEC_EXIT_USAGE, 0, "unknown signal `%s`",
                          o->args[1]);
  id = dsec_sandbox_resolve(o->args[0], err);
  if (!id)
    return -1;
  if (connect_running(id, &c, err) < 0) {
    /* kill is not an exec: its failures are plain failures */
    if ((*err)->status == DSEC_EXIT_INTERNAL)
      (*err)->status = DSEC_EXIT_FAILURE;
    return -1;
  }
  req = json_pack("{s:s, s:i}", "op", "kill", "signal", sig);
  res = dsec_conn_call(c, req, err);
  dsec_conn_close(c);
  if (res && world_is(id)) {
    /* and every service of the world */
    _cleanup_json_ json_t *members = world_members(id);
    json_t *m, *svcs = json_array();
    size_t i;
    json_array_foreach(members, i, m)
    {
      _cleanup_error_ struct dsec_error *e = NULL;
      json_t *r = supervisor_op(json_string_value(json_object_get(m, "id")),
                                req, &e);
      if (!r)
        r = json_pack("{s:s, s:s}", "type", "error", "error", e->msg);
      json_object_set(r, "service", json_object_get(m, "name"));
      json_array_append_new(svcs, r);
    }
    json_object_set_new(res, "services", svcs);
  }
  json_decref(req);
  if (!res)
    return -1;
  return dsec_json_print_new(res, err);
}

static json_t *read_json_in(const char *id, const char *file)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *path = xasprintf("%s/%s", dir, file);
  _cleanup_free_ char *buf = dsec_read_file_at(AT_FDCWD, path, 16u << 20, NULL,
                                               NULL);
  return buf ? json_loads(buf, 0, NULL) : NULL;
}

static bool labels_match(json_t *spec, json_t *filter)
{
  json_t *labels = json_object_get(spec, "labels");
  const char *k;
  json_t *want;
  json_object_foreach(filter, k, want)
  {
    json_t *have = json_object_get(labels, k);
    _cleanup_free_ char *text = NULL;
    if (!have)
      return false;
    text = json_is_string(have) ? xstrdup(json_string_value(have))
                                : json_dumps(have, JSON_ENCODE_ANY);
    if (strcmp(text, json_string_value(want)) != 0)
      return false;
  }
  return true;
}

/* The sandboxes ps shows, as records (new array). */
static json_t *ps_list(struct opts *o, struct dsec_error **err)
{
  _cleanup_json_ json_t *ids = dsec_sandbox_list(err);
  json_t *out, *v;
  size_t i;

  if (!ids)
    return NULL;
  out = json_array();
  json_array_foreach(ids, i, v)
  {
    const char *id = json_string_value(v);
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_json_ json_t *st = dsec_sandbox_status(id, &e);
    _cleanup_json_ json_t *spec = read_json_in(id, "spec.json");
    const char *state;
    json_t *rec;
    if (!st)
      continue; /* being created or removed right now */
    state = json_string_value(json_object_get(st, "state"));
    if (!o->all && state && strcmp(state, "running") != 0 &&
        strcmp(state, "creating") != 0 && strcmp(state, "suspended") != 0)
      continue;
    if (!labels_match(spec, o->label_filter))
      continue;
    /* a world is shown once: its agent's line lists its services */
    if (json_object_get(spec, "world"))
      continue;
    rec = sandbox_record(id, st);
    if (json_object_get(spec, "services"))
      json_object_set_new(rec, "services", world_states(id));
    if (!json_object_get(rec, "name") && json_object_get(spec, "name"))
      json_object_set(rec, "name", json_object_get(spec, "name"));
    json_object_set(rec, "image", json_object_get(spec, "image"));
    json_object_set(rec, "labels", json_object_get(spec, "labels"));
    json_array_append_new(out, rec);
  }
  return out;
}

static int do_ps(struct opts *o, struct dsec_error **err)
{
  _cleanup_json_ json_t *list = ps_list(o, err);
  json_t *rec;
  size_t i;

  if (!list)
    return -1;
  json_array_foreach(list, i, rec)
  {
    if (dsec_json_print(rec, err) < 0)
      return -1;
  }
  return 0;
}

static int do_inspect(struct opts *o, struct dsec_error **err)
{
  _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[0], err);
  json_t *st, *rec;
  bool audit_live = false;

  if (!id)
    return -1;
  st = dsec_sandbox_status(id, err);
  if (!st)
    return -1;
  rec = json_copy(st);
  json_decref(st);
  json_object_set_new(rec, "type", json_string("sandbox"));
  json_object_set_new(rec, "spec", read_json_in(id, "spec.json"));
  json_object_set_new(rec, "environment", read_json_in(id, "environment.json"));
  {
    json_t *spec = json_object_get(rec, "spec");
    json_object_set(rec, "limits", json_object_get(spec, "resources"));
  }
  if (strcmp(json_string_value(json_object_get(rec, "state")), "running") == 0) {
    struct dsec_conn *c = NULL;
    _cleanup_error_ struct dsec_error *e = NULL;
    if (dsec_conn_open(id, &c, &e) == 0) {
      json_t *req = json_pack("{s:s}", "op", "status");
      json_t *live = dsec_conn_call(c, req, &e);
      json_decref(req);
      if (live) {
        json_object_set(rec, "memory_bytes", json_object_get(live, "memory_bytes"));
        json_object_set(rec, "execs_running",
                        json_object_get(live, "execs_running"));
        if (json_is_object(json_object_get(live, "audit"))) {
          json_object_set(rec, "audit", json_object_get(live, "audit"));
          audit_live = true;
        }
        json_decref(live);
      }
      dsec_conn_close(c);
    }
  }
  if (!audit_live)
    /* what the last supervisor counted, with the file's size now */
    json_object_set_new(rec, "audit",
                        dsec_audit_status_file(id, json_object_get(rec, "spec"),
                                               json_object_get(rec, "audit")));
  {
    _cleanup_free_ char *dir = dsec_sandbox_dir(id);
    json_object_set_new(rec, "dir", json_string(dir));
  }
  if (json_object_get(json_object_get(rec, "spec"), "services"))
    json_object_set_new(rec, "services", world_states(id));
  return dsec_json_print_new(rec, err);
}

/* A world's events: every member's, in the order of their times (each
 * record carries its member's "service"). */
struct event_line {
  char *time;
  char *line;
  size_t n, seq;
};

static int event_line_cmp(const void *a, const void *b)
{
  const struct event_line *x = a, *y = b;
  int c = strcmp(x->time, y->time);
  return c ? c : x->seq < y->seq ? -1 : 1;
}

/* The complete lines of id's events.jsonl from *off on (advanced past
 * them), appended to *lines. */
static void world_events_read(const char *id, off_t *off,
                              struct event_line **lines, size_t *n)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *path = xasprintf("%s/events.jsonl", dir);
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  _cleanup_free_ char *buf = NULL;
  size_t len = 0, cap = 0, start = 0;
  ssize_t r;

  if (fd < 0 || lseek(fd, *off, SEEK_SET) < 0)
    return;
  for (;;) {
    if (cap - len < 65536)
      buf = xrealloc(buf, cap = cap * 2 + 65536);
    r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    len += (size_t) r;
  }
  for (size_t i = 0; i < len; i++) {
    json_t *ev;
    const char *t;
    if (buf[i] != '\n')
      continue;
    ev = json_loadb(buf + start, i - start, 0, NULL);
    t = json_string_value(json_object_get(ev, "time"));
    *lines = xrealloc(*lines, sizeof **lines * (*n + 1));
    (*lines)[*n] = (struct event_line){ xstrdup(t ? t : ""),
                                        xstrndup(buf + start, i + 1 - start),
                                        i + 1 - start, *n };
    (*n)++;
    json_decref(ev);
    start = i + 1;
  }
  *off += (off_t) start;
}

/* The world's events (every member's) in the order of their times, and
 * with follow what comes next, until the agent has ended. */
static int world_events(const char *agent, bool follow,
                        struct dsec_error **err)
{
  _cleanup_json_ json_t *offs = json_object();

  for (;;) {
    _cleanup_json_ json_t *members = world_members(agent);
    _cleanup_json_ json_t *ids = json_array();
    _cleanup_json_ json_t *st = dsec_sandbox_status(agent, NULL);
    const char *state = json_string_value(json_object_get(st, "state"));
    bool ended = !state || (strcmp(state, "running") != 0 &&
                            strcmp(state, "creating") != 0 &&
                            strcmp(state, "suspended") != 0);
    struct event_line *lines = NULL;
    size_t n = 0, i;
    json_t *m;
    int ret = 0;

    json_array_append_new(ids, json_string(agent));
    json_array_foreach(members, i, m)
      json_array_append(ids, json_object_get(m, "id"));
    json_array_foreach(ids, i, m)
    {
      const char *id = json_string_value(m);
      off_t off = (off_t) json_integer_value(json_object_get(offs, id));
      world_events_read(id, &off, &lines, &n);
      json_object_set_new(offs, id, json_integer((json_int_t) off));
    }
    qsort(lines, n, sizeof *lines, event_line_cmp);
    for (i = 0; i < n; i++) {
      if (ret == 0 &&
          dsec_write_all(STDOUT_FILENO, lines[i].line, lines[i].n, err) < 0)
        ret = -1;
      free(lines[i].time);
      free(lines[i].line);
    }
    free(lines);
    if (ret < 0 || !follow || ended)
      return ret;
    usleep(100000);
  }
}

/* events and trajectory: a sandbox's JSON Lines file, and with --follow
 * what is appended until the sandbox ends. */
static int do_log(struct opts *o, const char *file, struct dsec_error **err)
{
  _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[0], err);
  _cleanup_free_ char *dir = NULL;
  _cleanup_free_ char *path = NULL;
  _cleanup_close_ int fd = -1;
  char buf[65536];

  if (!id)
    return -1;
  if (strcmp(file, "events.jsonl") == 0 && world_is(id))
    return world_events(id, o->follow, err);
  dir = dsec_sandbox_dir(id);
  path = xasprintf("%s/%s", dir, file);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT)
    return dsec_fail(err, errno, "cannot open %s", path);
  for (;;) {
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf) : 0;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return dsec_fail(err, errno, "cannot read %s", path);
    }
    if (n > 0) {
      if (dsec_write_all(STDOUT_FILENO, buf, (size_t) n, err) < 0)
        return -1;
      continue;
    }
    if (!o->follow)
      return 0;
    {
      /* follow until the sandbox has ended and everything is read */
      _cleanup_error_ struct dsec_error *e = NULL;
      _cleanup_json_ json_t *st = dsec_sandbox_status(id, &e);
      const char *state = st ? json_string_value(json_object_get(st, "state"))
                             : NULL;
      if (!state || (strcmp(state, "running") != 0 &&
                     strcmp(state, "creating") != 0 &&
                     strcmp(state, "suspended") != 0)) {
        if (fd >= 0)
          while ((n = read(fd, buf, sizeof buf)) > 0)
            if (dsec_write_all(STDOUT_FILENO, buf, (size_t) n, err) < 0)
              return -1;
        return 0;
      }
    }
    if (fd < 0)
      fd = open(path, O_RDONLY | O_CLOEXEC);
    usleep(100000);
  }
}

/* ---- run */

static int write_result_file(const char *file, json_t *res,
                             struct dsec_error **err)
{
  _cleanup_free_ char *text = json_dumps(res, JSON_COMPACT |
                                                 JSON_REAL_PRECISION(10));
  _cleanup_free_ char *line = xasprintf("%s\n", text);
  return dsec_write_file_atomic(AT_FDCWD, file, line, strlen(line), 0644, err);
}

static int do_run(struct opts *o, int *status, struct dsec_error **err)
{
  _cleanup_free_ char *id = NULL;
  _cleanup_json_ json_t *rec = NULL;
  _cleanup_json_ json_t *req = NULL;
  json_t *res = NULL;
  int ret;

  req = exec_request(o, err);
  if (!req)
    return -1;
  if (do_create(o, &id, &rec, err) < 0) {
    if ((*err)->status == DSEC_EXIT_FAILURE)
      (*err)->status = DSEC_EXIT_INTERNAL;
    return -1;
  }
  if (o->attach)
    json_object_set_new(req, "stream", json_true());
  /* --rm removes the sandbox, its trajectory with it, as soon as this
   * exec ends: syncing its record first would make durable what is
   * deleted a moment later (a seq is another matter: always synced) */
  if (o->rm && !json_is_integer(json_object_get(req, "seq")))
    json_object_set_new(req, "durable", json_false());
  ret = o->attach ? exec_attached(id, req, &res, err)
                  : exec_one(id, req, &res, err);
  if (ret == 0) {
    *status = exit_status_of(res);
    if (o->result_file && write_result_file(o->result_file, res, err) < 0)
      ret = -1;
    if (ret == 0 && o->attach) {
      const char *type = json_string_value(json_object_get(res, "type"));
      if (type && strcmp(type, "error") == 0)
        dsec_log(DSEC_LOG_ERROR, 0, "%s",
                 json_string_value(json_object_get(res, "error")));
    } else if (ret == 0)
      ret = dsec_json_print(res, err);
    json_decref(res);
  }
  if (o->rm) {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_json_ json_t *members = world_members(id);
    if ((members ? world_remove(id, false, &e)
                 : dsec_sandbox_stop(id, false, &e)) < 0 && ret == 0) {
      *err = steal_pointer(&e);
      ret = -1;
    }
  }
  return ret;
}

/* ---- checkpoint, suspend, resume, fork */

/* One op on a running sandbox's supervisor; its answer (new ref), an
 * error record being turned into *err. */
static json_t *supervisor_op(const char *id, json_t *req,
                             struct dsec_error **err)
{
  struct dsec_conn *c = NULL;
  json_t *res;
  const char *type;

  if (connect_running(id, &c, err) < 0) {
    if ((*err)->status == DSEC_EXIT_INTERNAL)
      (*err)->status = DSEC_EXIT_FAILURE;
    return NULL;
  }
  res = dsec_conn_call(c, req, err);
  dsec_conn_close(c);
  if (!res)
    return NULL;
  type = json_string_value(json_object_get(res, "type"));
  if (type && strcmp(type, "error") == 0) {
    json_int_t code = json_integer_value(json_object_get(res, "exit_code"));
    dsec_error_set(err, code ? (int) code : DSEC_EXIT_FAILURE, 0, "%s",
                   json_string_value(json_object_get(res, "error")));
    json_decref(res);
    return NULL;
  }
  return res;
}

/* ---- task worlds
 *
 * A world is an agent sandbox (a spec with "services") and one container
 * sandbox per service (a spec with "world": its agent, its name, its
 * command), every member in the agent's network namespace, each with
 * everything else of its own.  sandboxes/<agent>/world.json lists the
 * members, {"type":"world","agent":ID,"services":[{"name":N,"id":ID}]},
 * written by whoever creates the world as each member is made, so that
 * rm and the reaper find every one even of a creation cut short. */

#define WORLD_LOG_TAIL 2048

/* The members of world agent (new array of {"name","id"}), or NULL when
 * agent is no world's agent. */
static json_t *world_members(const char *agent)
{
  _cleanup_json_ json_t *spec = read_json_in(agent, "spec.json");
  _cleanup_json_ json_t *w = NULL;
  json_t *m;
  if (!json_object_get(spec, "services"))
    return NULL;
  w = read_json_in(agent, "world.json");
  m = json_object_get(w, "services");
  return json_is_array(m) ? json_incref(m) : json_array();
}

/* Whether id is a world's agent. */
static bool world_is(const char *id)
{
  _cleanup_json_ json_t *m = world_members(id);
  return m != NULL;
}

static int world_write(const char *agent, json_t *members,
                       struct dsec_error **err)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(agent);
  _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_json_ json_t *w = json_pack("{s:s, s:s, s:O}", "type", "world",
                                       "agent", agent, "services", members);
  _cleanup_free_ char *text = json_dumps(w, JSON_COMPACT);
  if (dfd < 0)
    return dsec_fail(err, errno, "cannot open %s", dir);
  return dsec_write_file_replace(dfd, "world.json", text, strlen(text), 0644,
                                 err);
}

/* A verb that acts on a whole world is refused on one of its services
 * while the world's agent is there (bad input). */
static int world_refuse_member(const char *id, const char *verb,
                               struct dsec_error **err)
{
  _cleanup_json_ json_t *spec = read_json_in(id, "spec.json");
  json_t *w = json_object_get(spec, "world");
  const char *agent = json_string_value(json_object_get(w, "agent"));
  _cleanup_free_ char *dir = NULL;
  if (!agent || !dsec_sandbox_id_valid(agent))
    return 0;
  dir = dsec_sandbox_dir(agent);
  if (access(dir, F_OK) < 0)
    return 0; /* its world is gone: what is left goes alone */
  return dsec_bad_input(err, "sandbox %s is service `%s` of world %s: %s the "
                             "world (its agent's id)", id,
                        json_string_value(json_object_get(w, "service")),
                        agent, verb);
}

/* The member of world agent named name ("agent": the sandbox itself,
 * world or not), new
 * id; bad input when there is none. */
static char *world_member(const char *agent, const char *name,
                          struct dsec_error **err)
{
  _cleanup_json_ json_t *members = world_members(agent);
  json_t *m;
  size_t i;
  if (strcmp(name, "agent") == 0)
    return xstrdup(agent);
  if (!members) {
    dsec_bad_input(err, "sandbox %s is no world (its spec has no services)",
                   agent);
    return NULL;
  }
  json_array_foreach(members, i, m)
    if (strcmp(json_string_value(json_object_get(m, "name")) ?: "", name) == 0)
      return xstrdup(json_string_value(json_object_get(m, "id")));
  dsec_bad_input(err, "world %s has no service `%s`", agent, name);
  return NULL;
}

/* Stops and removes every member of world agent, the agent last.  Each
 * member's failure is warned about; the first is the answer. */
static int world_remove(const char *agent, bool force, struct dsec_error **err)
{
  _cleanup_json_ json_t *members = world_members(agent);
  json_t *m;
  size_t i;
  int ret = 0;

  json_array_foreach(members, i, m)
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    const char *id = json_string_value(json_object_get(m, "id"));
    _cleanup_json_ json_t *st = id ? dsec_sandbox_status(id, NULL) : NULL;
    if (!st)
      continue; /* gone already */
    if (dsec_sandbox_stop(id, force, &e) < 0) {
      dsec_warn("world %s: service %s: %s", agent,
                json_string_value(json_object_get(m, "name")), e->msg);
      if (!*err)
        *err = steal_pointer(&e);
      ret = -1;
    }
  }
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    if (dsec_sandbox_stop(agent, force, &e) < 0) {
      if (!*err)
        *err = steal_pointer(&e);
      ret = -1;
    }
  }
  return ret;
}

/* A service's spec from its entry in the agent's spec (new, sharing
 * nothing with either). */
static json_t *service_spec(json_t *agent_spec, json_t *svc, const char *agent)
{
  json_t *names = json_array(), *s;
  _cleanup_json_ json_t *shared = NULL;
  size_t i;
  json_array_append_new(names, json_string("agent"));
  json_array_foreach(json_object_get(agent_spec, "services"), i, s)
    json_array_append(names, json_object_get(s, "name"));
  shared = json_pack(
    "{s:s, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O,"
    " s:{s:s, s:O, s:O, s:o}}",
    "backend", "container", "image", json_object_get(svc, "image"), "layers",
    json_object_get(svc, "layers"), "env", json_object_get(svc, "env"),
    "workdir", json_object_get(svc, "workdir"), "user",
    json_object_get(svc, "user"), "resources", json_object_get(svc, "resources"),
    "protect", json_object_get(svc, "protect"), "hide",
    json_object_get(svc, "hide"), "network",
    json_object_get(agent_spec, "network"), "labels",
    json_object_get(agent_spec, "labels"), "audit",
    json_object_get(agent_spec, "audit"), "world", "agent", agent, "service",
    json_object_get(svc, "name"), "cmd", json_object_get(svc, "cmd"), "names",
    names);
  return json_deep_copy(shared);
}

/* The last of what a service wrote (new string, maybe empty). */
static char *service_log_tail(const char *id)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *path = xasprintf("%s/service.log", dir);
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  char buf[WORLD_LOG_TAIL + 1];
  off_t end;
  ssize_t n;
  if (fd < 0)
    return xstrdup("");
  end = lseek(fd, 0, SEEK_END);
  if (end > WORLD_LOG_TAIL)
    lseek(fd, end - WORLD_LOG_TAIL, SEEK_SET);
  else
    lseek(fd, 0, SEEK_SET);
  n = read(fd, buf, WORLD_LOG_TAIL);
  buf[n > 0 ? n : 0] = '\0';
  /* the message is text: what is not printable ASCII shows as '?' */
  for (ssize_t i = 0; i < n; i++)
    if ((unsigned char) buf[i] >= 0x7f ||
        ((unsigned char) buf[i] < 0x20 && buf[i] != '\n' && buf[i] != '\t'))
      buf[i] = '?';
  return xstrdup(buf);
}

/* Whether the world's network (the agent's init's namespace) takes a
 * connection on 127.0.0.1:port now: tried by a child in that namespace,
 * so that we never leave our own. */
static bool world_port_open(int world_ns, int port)
{
  struct sockaddr_in sa = { .sin_family = AF_INET,
                            .sin_port = htons((uint16_t) port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  int status;
  pid_t pid = fork();
  if (pid < 0)
    return false;
  if (pid == 0) {
    int s;
    if (setns(world_ns, CLONE_NEWNET) < 0)
      _exit(1);
    s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    _exit(s >= 0 && connect(s, (struct sockaddr *) &sa, sizeof sa) == 0 ? 0
                                                                        : 1);
  }
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Waits until service svc (sandbox id) of world agent is ready, as its
 * spec's "ready" says, within its timeout; else why not, with the end of
 * its output. */
static int service_wait_ready(const char *agent, const char *id, json_t *svc,
                              struct dsec_error **err)
{
  json_t *ready = json_object_get(svc, "ready");
  const char *name = json_string_value(json_object_get(svc, "name"));
  int port = (int) json_integer_value(json_object_get(ready, "tcp"));
  json_int_t timeout = json_integer_value(json_object_get(ready, "timeout_s"));
  double deadline = dsec_now_ms() + (double) timeout * 1000;
  _cleanup_close_ int world_ns = -1;
  _cleanup_free_ char *why = NULL;
  _cleanup_free_ char *tail = NULL;

  if (!ready)
    return 0;
  if (port) {
    _cleanup_json_ json_t *st = dsec_sandbox_status(agent, err);
    _cleanup_free_ char *p = NULL;
    if (!st)
      return -1;
    p = xasprintf("/proc/%d/ns/net",
                  (int) json_integer_value(json_object_get(st, "init_pid")));
    world_ns = open(p, O_RDONLY | O_CLOEXEC);
    if (world_ns < 0)
      return dsec_fail(err, errno, "cannot open the world's network");
  }
  for (;;) {
    _cleanup_json_ json_t *st = dsec_sandbox_status(id, NULL);
    const char *state = json_string_value(json_object_get(st, "state"));
    json_t *ex = json_object_get(st, "service_exited");
    if (!state || strcmp(state, "running") != 0) {
      why = xasprintf("its sandbox is %s", state ? state : "gone");
      break;
    }
    if (ex) {
      _cleanup_free_ char *t = json_dumps(ex, JSON_COMPACT);
      why = xasprintf("its command ended %s", t);
      break;
    }
    if (port && world_port_open(world_ns, port))
      return 0;
    if (!port) {
      _cleanup_error_ struct dsec_error *e = NULL;
      _cleanup_json_ json_t *res = NULL;
      double left = (deadline - dsec_now_ms()) / 1000;
      json_t *req = json_pack("{s:O, s:f, s:i}", "cmd",
                              json_object_get(ready, "cmd"), "timeout_s",
                              left > 0.1 ? left : 0.1, "max_output_bytes", 4096);
      int r = exec_one(id, req, &res, &e);
      json_decref(req);
      if (r == 0 && json_integer_value(json_object_get(res, "exit_code")) == 0 &&
          !json_object_get(res, "error"))
        return 0;
    }
    if (dsec_now_ms() >= deadline) {
      why = xasprintf("not ready within %lld s (%s)", (long long) timeout,
                      port ? "its tcp port takes no connection"
                           : "its ready command did not exit 0");
      break;
    }
    usleep(port ? 20000 : 100000);
  }
  tail = service_log_tail(id);
  return dsec_fail(err, 0, "service %s: %s; its output: %s", name, why,
                   *tail ? tail : "(none)");
}

/* Creates a world from the agent's validated spec (stolen): the agent,
 * then each service, then waits for every service to be ready.  layers,
 * or NULL: an extra layer per member ({"agent": D, NAME: D}, a fork's
 * checkpoints).  On failure every member is removed. */
static int create_world(json_t *spec_in, json_t *layers, char **id_out,
                        json_t **record, struct dsec_error **err)
{
  _cleanup_json_ json_t *spec = spec_in;
  _cleanup_json_ json_t *members = json_array();
  _cleanup_free_ char *agent = NULL;
  _cleanup_json_ json_t *rec = NULL;
  json_t *svcs = json_object_get(spec, "services"), *svc;
  size_t i;

  if (geteuid() != 0)
    return dsec_fail(err, EPERM, "a world needs root (its services join the "
                                 "agent's network namespace)");
  if (json_object_get(layers, "agent"))
    dsec_spec_append(spec, "layers",
                     json_incref(json_object_get(layers, "agent")));
  if (create_sandbox(json_incref(spec), NULL, NULL, NULL, &agent, &rec, err) <
      0)
    return -1;
  if (world_write(agent, members, err) < 0)
    goto fail;
  json_array_foreach(svcs, i, svc)
  {
    const char *name = json_string_value(json_object_get(svc, "name"));
    json_t *ms = service_spec(spec, svc, agent), *mrec = NULL;
    _cleanup_free_ char *mid = NULL;
    if (json_object_get(layers, name))
      dsec_spec_append(ms, "layers", json_incref(json_object_get(layers, name)));
    if (dsec_spec_validate(ms, err) < 0) {
      json_decref(ms);
      goto fail;
    }
    if (create_sandbox(ms, NULL, NULL, NULL, &mid, &mrec, err) < 0) {
      dsec_error_wrap(err, "service %s", name);
      goto fail;
    }
    json_decref(mrec);
    json_array_append_new(members, json_pack("{s:s, s:s}", "name", name, "id",
                                             mid));
    if (world_write(agent, members, err) < 0)
      goto fail;
  }
  json_array_foreach(svcs, i, svc)
  {
    const char *id = json_string_value(
      json_object_get(json_array_get(members, i), "id"));
    if (service_wait_ready(agent, id, svc, err) < 0)
      goto fail;
  }
  json_object_set(rec, "services", members);
  *record = steal_pointer(&rec);
  *id_out = steal_pointer(&agent);
  return 0;
fail:
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    world_remove(agent, true, &e);
  }
  return -1;
}

/* Creates a sandbox or, from a spec with services, a world (spec
 * stolen). */
static int create_any(json_t *spec, char **id_out, json_t **record,
                      struct dsec_error **err)
{
  if (json_object_get(spec, "world")) {
    json_decref(spec);
    return dsec_bad_input(err, "spec: `world` is set by dsec-run for a "
                               "world's services, not given");
  }
  if (json_object_get(spec, "services"))
    return create_world(spec, NULL, id_out, record, err);
  return create_sandbox(spec, NULL, NULL, NULL, id_out, record, err);
}

/* An exec request's "service" (taken out of req): *id, a world's agent,
 * becomes that member's id. */
static int exec_route(char **id, json_t *req, struct dsec_error **err)
{
  const char *name = json_string_value(json_object_get(req, "service"));
  char *member;
  if (!json_object_get(req, "service"))
    return 0;
  if (!name)
    return dsec_bad_input(err, "request: `service` must be a string");
  member = world_member(*id, name, err);
  if (!member)
    return -1;
  json_object_del(req, "service");
  free(*id);
  *id = member;
  return 0;
}

/* The members' states, for ps and inspect (new array). */
static json_t *world_states(const char *agent)
{
  _cleanup_json_ json_t *members = world_members(agent);
  json_t *out = json_array(), *m;
  size_t i;
  json_array_foreach(members, i, m)
  {
    const char *id = json_string_value(json_object_get(m, "id"));
    _cleanup_json_ json_t *st = dsec_sandbox_status(id, NULL);
    json_t *r = json_pack("{s:O, s:O, s:s}", "name", json_object_get(m, "name"),
                          "id", json_object_get(m, "id"), "state",
                          st ? json_string_value(json_object_get(st, "state"))
                             : "gone");
    if (json_object_get(st, "service_exited"))
      json_object_set(r, "service_exited",
                      json_object_get(st, "service_exited"));
    json_array_append_new(out, r);
  }
  return out;
}

/* An op of the supervisors of every member of world agent, the agent
 * first (or last: reverse); answers in order, agent's first.  On a
 * failure, undo (if not NULL) goes to the members that took op. */
static json_t *world_op(const char *agent, json_t *req, bool reverse,
                        json_t *undo, struct dsec_error **err)
{
  _cleanup_json_ json_t *members = world_members(agent);
  _cleanup_json_ json_t *ids = json_array();
  json_t *answers = json_array();
  size_t n, i;

  json_array_append_new(ids, json_string(agent));
  for (i = 0; i < json_array_size(members); i++)
    json_array_append(ids, json_object_get(json_array_get(members, i), "id"));
  n = json_array_size(ids);
  for (size_t k = 0; k < n; k++) {
    size_t at = reverse ? n - 1 - k : k;
    const char *id = json_string_value(json_array_get(ids, at));
    json_t *res = supervisor_op(id, req, err);
    if (!res) {
      dsec_error_wrap(err, "%s %s", at ? "service" : "agent",
                      at ? json_string_value(json_object_get(
                             json_array_get(members, at - 1), "name"))
                         : id);
      for (size_t b = 0; undo && b < k; b++) {
        size_t u = reverse ? n - 1 - b : b;
        _cleanup_error_ struct dsec_error *e = NULL;
        json_decref(supervisor_op(json_string_value(json_array_get(ids, u)),
                                  undo, &e));
      }
      json_decref(answers);
      return NULL;
    }
    if (at)
      json_object_set(res, "service",
                      json_object_get(json_array_get(members, at - 1), "name"));
    if (reverse)
      json_array_insert_new(answers, 0, res);
    else
      json_array_append_new(answers, res);
  }
  return answers;
}

/* The agent's answer of world_op's answers (new), with the services'
 * under "services". */
static json_t *world_answer(json_t *answers)
{
  json_t *rec = json_copy(json_array_get(answers, 0));
  json_t *svcs = json_array();
  for (size_t i = 1; i < json_array_size(answers); i++)
    json_array_append(svcs, json_array_get(answers, i));
  json_object_set_new(rec, "services", svcs);
  return rec;
}

/* ---- shell */

/* An interactive exec on a terminal, the way podman exec -it is: our
 * terminal in raw mode, keys to the sandbox's terminal, its output to
 * ours, our window's size to it; the command's status is ours. */
static int do_shell(struct opts *o, int *status, struct dsec_error **err)
{
  static const char *const sh[] = {
    "/bin/sh", "-c",
    "if command -v bash >/dev/null 2>&1; then exec bash -il; fi; exec sh -il",
  };
  _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[0], err);
  _cleanup_json_ json_t *req = NULL;
  struct dsec_conn *c = NULL;
  struct winsize ws = { .ws_row = 24, .ws_col = 80 };
  struct termios saved, raw;
  bool term = isatty(STDIN_FILENO), in_open = true, raw_set = false;
  sigset_t mask, old;
  int sfd = -1, ret = -1;
  json_t *cmd = json_array(), *env;

  if (!id)
    return -1;
  if (o->ncmd)
    for (int i = 0; i < o->ncmd; i++)
      json_array_append_new(cmd, json_string(o->cmd[i]));
  else
    for (size_t i = 0; i < ARRAY_SIZE(sh); i++)
      json_array_append_new(cmd, json_string(sh[i]));
  if (term)
    ioctl(STDIN_FILENO, TIOCGWINSZ, &ws);
  req = json_deep_copy(o->exec);
  json_object_set_new(req, "op", json_string("exec"));
  json_object_set_new(req, "cmd", cmd);
  json_object_set_new(req, "tty", json_true());
  json_object_set_new(req, "interactive", json_true());
  json_object_set_new(req, "tty_size", json_pack("[i, i]", ws.ws_col ? ws.ws_col : 80,
                                                 ws.ws_row ? ws.ws_row : 24));
  env = json_object_get(req, "env");
  if (!env)
    json_object_set_new(req, "env", env = json_object());
  if (!json_object_get(env, "TERM"))
    json_object_set_new(env, "TERM", json_string(getenv("TERM") ?: "xterm"));
  if (connect_running(id, &c, err) < 0 || dsec_conn_send(c, req, err) < 0) {
    dsec_conn_close(c);
    return -1;
  }
  sigemptyset(&mask);
  sigaddset(&mask, SIGWINCH);
  sigprocmask(SIG_BLOCK, &mask, &old);
  /* non-blocking: every pending resize is read, then the loop goes on */
  sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (term && tcgetattr(STDIN_FILENO, &saved) == 0) {
    raw = saved;
    cfmakeraw(&raw);
    raw_set = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  for (;;) {
    struct pollfd pf[3] = { { dsec_conn_fd(c), POLLIN, 0 },
                            { sfd, POLLIN, 0 },
                            { in_open ? STDIN_FILENO : -1, POLLIN, 0 } };
    if (!dsec_conn_pending(c) && poll(pf, 3, -1) < 0) {
      if (errno == EINTR)
        continue;
      dsec_fail(err, errno, "poll");
      break;
    }
    if (pf[2].revents) {
      char buf[4096];
      ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      json_t *m;
      if (n <= 0) {
        in_open = false;
        m = json_pack("{s:s, s:b}", "op", "input", "eof", true);
      } else {
        char *b64 = dsec_base64_encode(buf, (size_t) n);
        m = json_pack("{s:s, s:s}", "op", "input", "data_b64", b64);
        free(b64);
      }
      if (dsec_conn_send(c, m, err) < 0) {
        json_decref(m);
        break;
      }
      json_decref(m);
    }
    if (pf[1].revents) {
      struct signalfd_siginfo si;
      json_t *m;
      while (read(sfd, &si, sizeof si) == sizeof si)
        ;
      if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0) {
        m = json_pack("{s:s, s:i, s:i}", "op", "resize", "cols",
                      (int) ws.ws_col, "rows", (int) ws.ws_row);
        dsec_conn_send(c, m, NULL);
        json_decref(m);
      }
    }
    if (pf[0].revents || dsec_conn_pending(c)) {
      json_t *m = dsec_conn_recv(c, err);
      const char *type, *b64;
      if (!m)
        break;
      type = json_string_value(json_object_get(m, "type")) ?: "";
      if (strcmp(type, "output") == 0) {
        b64 = json_string_value(json_object_get(m, "data_b64"));
        if (b64) {
          size_t len = 0;
          unsigned char *out = dsec_base64_decode(b64, &len);
          if (len > 0)
            dsec_write_all(STDOUT_FILENO, out, len, NULL);
          free(out);
        }
        json_decref(m);
        continue;
      }
      if (strcmp(type, "error") == 0) {
        json_int_t code = json_integer_value(json_object_get(m, "exit_code"));
        dsec_error_set(err, code ? (int) code : DSEC_EXIT_INTERNAL, 0, "%s",
                       json_string_value(json_object_get(m, "error")));
      } else {
        *status = exit_status_of(m);
        ret = 0;
      }
      json_decref(m);
      break;
    }
  }
  if (raw_set)
    tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (sfd >= 0)
    close(sfd);
  dsec_conn_close(c);
  return ret;
}

/* ---- cp */

/* The sandbox side of a cp argument, ID:PATH: the id (new), *path set;
 * NULL when arg is a host path (it has no colon before its first slash).
 * An ID that names no sandbox is an error (*err): a host path with a
 * colon is written ./NAME:X. */
static char *cp_side(const char *arg, const char **path, struct dsec_error **err)
{
  const char *colon = strchr(arg, ':');
  const char *slash = strchr(arg, '/');
  _cleanup_free_ char *name = NULL;

  if (!colon || colon == arg || (slash && slash < colon))
    return NULL;
  name = xstrndup(arg, (size_t) (colon - arg));
  *path = colon + 1;
  if (!**path) {
    dsec_bad_input(err, "%s: give a path after the colon", arg);
    return NULL;
  }
  return dsec_sandbox_resolve(name, err);
}

/* The supervisor's answer to a copy, with what this side saw: a local
 * failure (why) is the cause unless the stream only broke because the
 * other side stopped, or was cut short because it failed. */
static int cp_answer(struct dsec_conn *c, int local, const char *why,
                     json_t *extra, struct dsec_error **err)
{
  json_t *res = dsec_conn_recv(c, err);
  const char *type;

  if (!res)
    return -1;
  type = json_string_value(json_object_get(res, "type"));
  if (type && strcmp(type, "error") == 0) {
    json_int_t code = json_integer_value(json_object_get(res, "exit_code"));
    if (local < 0 && !strstr(why, "cut short") &&
        !strstr(why, "cannot write the copy stream"))
      dsec_fail(err, 0, "%s", why);
    else
      dsec_error_set(err, code ? (int) code : DSEC_EXIT_FAILURE, 0, "%s",
                     json_string_value(json_object_get(res, "error")));
    json_decref(res);
    return -1;
  }
  if (local < 0) {
    json_decref(res);
    return dsec_fail(err, 0, "%s", why);
  }
  if (extra)
    json_object_update(res, extra);
  return dsec_json_print_new(res, err);
}

/* host src -> sandbox id:dst, streamed as it is read (as the caller). */
static int copy_in(const char *id, const char *src, const char *dst,
                   bool archive, json_t *seq, struct dsec_error **err)
{
  struct dsec_conn *c = NULL;
  char why[DSEC_COPY_WHY] = "";
  uint64_t skipped = 0;
  int p[2], r;
  json_t *req;

  if (connect_running(id, &c, err) < 0)
    return -1;
  if (pipe2(p, O_CLOEXEC) < 0) {
    dsec_conn_close(c);
    return dsec_fail(err, errno, "pipe");
  }
  req = json_pack("{s:s, s:s, s:b}", "op", "upload", "dst", dst, "archive",
                  archive);
  if (seq)
    json_object_set(req, "seq", seq);
  r = dsec_conn_send_fd(c, req, p[0], err);
  json_decref(req);
  close(p[0]);
  if (r < 0) {
    close(p[1]);
    dsec_conn_close(c);
    return -1;
  }
  r = dsec_copy_send(p[1], src, &skipped, why);
  close(p[1]);
  {
    _cleanup_json_ json_t *extra = json_pack("{s:I}", "skipped",
                                             (json_int_t) skipped);
    r = cp_answer(c, r, why, extra, err);
  }
  dsec_conn_close(c);
  return r;
}

/* Where a copy out would go on the host can take it: DST a directory we
 * may write in, or a new name in one.  Checked before the copy is asked
 * for, so that a copy the host side cannot make is not recorded as made
 * (what fails later, a full disk, still is: the sandbox's side sent it). */
static int host_dst_check(const char *dst, struct dsec_error **err)
{
  _cleanup_free_ char *copy = xstrdup(dst);
  struct stat st;
  char *slash;
  size_t n = strlen(copy);

  if (stat(dst, &st) == 0 && S_ISDIR(st.st_mode))
    return access(dst, W_OK | X_OK) == 0
             ? 0
             : dsec_fail(err, errno, "cannot write in %s", dst);
  if (n > 0 && copy[n - 1] == '/')
    return dsec_fail(err, 0, "%s: no such directory", dst);
  slash = strrchr(copy, '/');
  if (slash)
    *slash = '\0';
  {
    const char *parent = !slash ? "." : slash == copy ? "/" : copy;
    if (stat(parent, &st) < 0)
      return dsec_fail(err, errno, "%s", parent);
    if (!S_ISDIR(st.st_mode))
      return dsec_fail(err, ENOTDIR, "%s", parent);
    if (access(parent, W_OK | X_OK) < 0)
      return dsec_fail(err, errno, "cannot write in %s", parent);
  }
  return 0;
}

/* sandbox id:src -> host dst, written as it comes (as the caller: never
 * setuid, never a device). */
static int copy_out(const char *id, const char *src, const char *dst,
                    json_t *seq, struct dsec_error **err)
{
  struct dsec_conn *c = NULL;
  char why[DSEC_COPY_WHY] = "";
  int p[2], r;
  json_t *req;

  if (host_dst_check(dst, err) < 0 || connect_running(id, &c, err) < 0)
    return -1;
  if (pipe2(p, O_CLOEXEC) < 0) {
    dsec_conn_close(c);
    return dsec_fail(err, errno, "pipe");
  }
  req = json_pack("{s:s, s:s}", "op", "download", "src", src);
  if (seq)
    json_object_set(req, "seq", seq);
  r = dsec_conn_send_fd(c, req, p[1], err);
  json_decref(req);
  close(p[1]);
  if (r < 0) {
    close(p[0]);
    dsec_conn_close(c);
    return -1;
  }
  {
    /* the stream names what it holds as SRC's name, or it is refused */
    _cleanup_free_ char *name = dsec_copy_source_name(src);
    r = dsec_copy_receive_as(p[0], dst, 0, (uid_t) -1, (gid_t) -1,
                             name ? name : "", why);
  }
  close(p[0]);
  r = cp_answer(c, r, why, NULL, err);
  dsec_conn_close(c);
  return r;
}

static int do_cp(struct opts *o, struct dsec_error **err)
{
  const char *spath = NULL, *dpath = NULL;
  _cleanup_free_ char *sid = cp_side(o->args[0], &spath, err);
  _cleanup_free_ char *did = NULL;
  json_t *seq = json_object_get(o->exec, "seq");

  if (!sid && *err)
    return -1;
  did = cp_side(o->args[1], &dpath, err);
  if (!did && *err)
    return -1;
  if ((sid != NULL) == (did != NULL))
    return dsec_error_set(err, DSEC_EXIT_USAGE, 0,
                          "cp: one side is a sandbox's ID:PATH, the other a "
                          "path on the host");
  if (sid && o->archive)
    return dsec_error_set(err, DSEC_EXIT_USAGE, 0,
                          "cp: -a is for copies in (what comes out is "
                          "yours)");
  return sid ? copy_out(sid, spath, o->args[1], seq, err)
             : copy_in(did, o->args[0], dpath, o->archive, seq, err);
}

/* ---- sessions */

/* session ls ID [NAME], session rm ID [NAME]: the sandbox's sessions, or
 * the one named; rm without NAME ends them all.  One record per line. */
static int do_session(struct opts *o, const char *what, const char *id_arg,
                      const char *name, struct dsec_error **err)
{
  _cleanup_free_ char *id = NULL;
  _cleanup_json_ json_t *list = NULL;
  json_t *all, *one;
  size_t i;

  if (strcmp(what, "ls") != 0 && strcmp(what, "rm") != 0)
    return dsec_error_set(err, DSEC_EXIT_USAGE, 0,
                          "session: give ls or rm, then the sandbox ID");
  if (name && !dsec_session_name_ok(name))
    return dsec_bad_input(err, "`%s` is not a session name", name);
  (void) o;
  id = dsec_sandbox_resolve(id_arg, err);
  if (!id)
    return -1;
  if (strcmp(what, "rm") == 0 && name) {
    json_t *r = supervisor_op(id, json_pack("{s:s, s:s}", "op", "session_rm",
                                            "name", name), err);
    return r ? dsec_json_print_new(r, err) : -1;
  }
  list = supervisor_op(id, json_pack("{s:s}", "op", "sessions"), err);
  if (!list)
    return -1;
  all = json_object_get(list, "sessions");
  if (strcmp(what, "ls") == 0) {
    if (name) {
      json_t *keep = json_array();
      json_array_foreach(all, i, one)
        if (strcmp(json_string_value(json_object_get(one, "name")) ?: "",
                   name) == 0)
          json_array_append(keep, one);
      if (json_array_size(keep) == 0) {
        json_decref(keep);
        return dsec_fail(err, 0, "no session %s in sandbox %s", name, id);
      }
      json_object_set_new(list, "sessions", keep);
    }
    return dsec_json_print(list, err);
  }
  json_array_foreach(all, i, one)
  {
    const char *n = json_string_value(json_object_get(one, "name"));
    json_t *r = supervisor_op(id, json_pack("{s:s, s:s}", "op", "session_rm",
                                            "name", n ?: ""), err);
    if (!r || dsec_json_print_new(r, err) < 0)
      return -1;
  }
  return 0;
}

/* The checkpoint a fork or resume starts from: a new one of a running
 * sandbox, or the one a released sandbox left.  New string. */
static char *checkpoint_of(const char *id, struct dsec_error **err)
{
  _cleanup_json_ json_t *st = dsec_sandbox_status(id, err);
  const char *state;

  if (!st)
    return NULL;
  state = json_string_value(json_object_get(st, "state"));
  if (state && strcmp(state, "suspended") == 0 &&
      json_is_true(json_object_get(st, "released"))) {
    const char *d = json_string_value(json_object_get(st, "checkpoint"));
    if (!d) {
      dsec_fail(err, 0, "sandbox %s was released without a checkpoint", id);
      return NULL;
    }
    return xstrdup(d);
  }
  {
    json_t *req = json_pack("{s:s}", "op", "checkpoint");
    _cleanup_json_ json_t *res = supervisor_op(id, req, err);
    json_decref(req);
    if (!res)
      return NULL;
    return xstrdup(json_string_value(json_object_get(
      json_object_get(res, "layer"), "digest")));
  }
}

/* The sandbox's spec with a checkpoint stacked on its layers (new ref). */
static json_t *spec_with_layer(const char *id, const char *digest,
                               struct dsec_error **err)
{
  json_t *spec = read_json_in(id, "spec.json");
  if (!spec) {
    dsec_fail(err, 0, "sandbox %s has no readable spec", id);
    return NULL;
  }
  dsec_spec_append(spec, "layers", json_string(digest));
  if (dsec_spec_validate(spec, err) < 0) {
    json_decref(spec);
    return NULL;
  }
  return spec;
}

/* One checkpoint per member of world agent, taken with every member
 * frozen (unless the world is suspended already): answers as world_op's,
 * the agent's first. */
static json_t *world_checkpoint(const char *agent, struct dsec_error **err)
{
  _cleanup_json_ json_t *st = dsec_sandbox_status(agent, err);
  _cleanup_json_ json_t *freeze =
    json_pack("{s:s, s:b}", "op", "suspend", "release", false);
  _cleanup_json_ json_t *thaw = json_pack("{s:s}", "op", "resume");
  _cleanup_json_ json_t *cp = json_pack("{s:s}", "op", "checkpoint");
  json_t *frozen = NULL, *answers;
  bool was = st && strcmp(json_string_value(json_object_get(st, "state")) ?: "",
                          "suspended") == 0;

  if (!st)
    return NULL;
  if (json_is_true(json_object_get(st, "released")))
    return dsec_fail(err, 0, "world %s is released", agent), NULL;
  if (!was) {
    frozen = world_op(agent, freeze, false, thaw, err);
    if (!frozen)
      return NULL;
    json_decref(frozen);
  }
  answers = world_op(agent, cp, false, NULL, err);
  if (!was) {
    _cleanup_error_ struct dsec_error *e = NULL;
    json_decref(world_op(agent, thaw, true, NULL, &e));
  }
  return answers;
}

static int do_checkpoint(struct opts *o, struct dsec_error **err)
{
  _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[0], err);
  json_t *req, *res;
  if (!id || world_refuse_member(id, "checkpoint", err) < 0)
    return -1;
  if (world_is(id)) {
    _cleanup_json_ json_t *answers = NULL;
    if (o->layer_name)
      return dsec_bad_input(err, "checkpoint --name of a world is not "
                                 "implemented (a world gives a layer per "
                                 "member; tag them with dsec-layer tag)");
    answers = world_checkpoint(id, err);
    return answers ? dsec_json_print_new(world_answer(answers), err) : -1;
  }
  req = json_pack("{s:s}", "op", "checkpoint");
  if (o->layer_name)
    json_object_set_new(req, "name", json_string(o->layer_name));
  res = supervisor_op(id, req, err);
  json_decref(req);
  if (!res)
    return -1;
  return dsec_json_print_new(res, err);
}

/* Waits (5 s at most) until the supervisor of id, which is ending, has
 * exited. */
static void supervisor_wait_gone(const char *id)
{
  _cleanup_json_ json_t *st = dsec_sandbox_status(id, NULL);
  pid_t sup = (pid_t) json_integer_value(json_object_get(st, "supervisor_pid"));
  uint64_t start = (uint64_t) json_integer_value(
    json_object_get(st, "supervisor_start"));
  for (int i = 0; i < 1000 && dsec_process_alive(sup, start); i++)
    usleep(5000);
}

static int do_suspend(struct opts *o, struct dsec_error **err)
{
  _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[0], err);
  json_t *req, *res;
  if (!id)
    return -1;
  if (o->front->vm_only)
    o->release = true; /* dsec-vm's suspend always frees it: memory to a file */
  if (world_refuse_member(id, "suspend", err) < 0)
    return -1;
  if (world_is(id)) {
    /* frozen together: the agent first, then each service */
    _cleanup_json_ json_t *freeze =
      json_pack("{s:s, s:b}", "op", "suspend", "release", false);
    _cleanup_json_ json_t *thaw = json_pack("{s:s}", "op", "resume");
    _cleanup_json_ json_t *answers = NULL;
    answers = world_op(id, freeze, false, thaw, err);
    if (answers && o->release) {
      /* then each released, the services first: a checkpoint each, every
       * process gone; resume boots the world again from them */
      _cleanup_json_ json_t *release =
        json_pack("{s:s, s:b}", "op", "suspend", "release", true);
      _cleanup_json_ json_t *frozen = steal_pointer(&answers);
      json_t *a;
      size_t i;
      answers = world_op(id, release, true, NULL, err);
      json_array_foreach(answers, i, a)
        supervisor_wait_gone(json_string_value(json_object_get(a, "id")));
    }
    return answers ? dsec_json_print_new(world_answer(answers), err) : -1;
  }
  req = json_pack("{s:s, s:b}", "op", "suspend", "release", o->release);
  res = supervisor_op(id, req, err);
  json_decref(req);
  if (!res)
    return -1;
  if (o->release)
    /* the supervisor tears the sandbox down after answering: wait */
    supervisor_wait_gone(id);
  return dsec_json_print_new(res, err);
}

/* A VM suspended to a memory snapshot: restored from it, processes and
 * all; the snapshot goes once the VM runs again. */
static int resume_vm(const char *id, json_t *st, struct dsec_error **err)
{
  _cleanup_free_ char *dir = dsec_sandbox_dir(id);
  _cleanup_free_ char *snap = xasprintf("%s/%s", dir, json_string_value(
                                          json_object_get(st, "snapshot")));
  _cleanup_free_ char *_id_out = NULL;
  _cleanup_close_ int dfd = -1;
  _cleanup_close_ int lock = -1;
  json_t *spec;
  json_t *rec = NULL;
  double t0 = dsec_now_ms();

  /* one resume at a time: two would start two VMs on one disk */
  dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return dsec_fail(err, errno, "cannot open %s", dir);
  lock = dsec_lock_at(dfd, ".resume.lock", DSEC_LOCK_EXCLUSIVE, true, err);
  if (lock < 0)
    return dsec_error_wrap(err, "sandbox %s is being resumed", id);
  {
    _cleanup_json_ json_t *now = dsec_sandbox_status(id, err);
    if (!now)
      return -1;
    if (strcmp(json_string_value(json_object_get(now, "state")) ?: "",
               "suspended") != 0 || access(snap, F_OK) < 0)
      return dsec_fail(err, 0, "sandbox %s was resumed meanwhile", id);
  }
  spec = read_json_in(id, "spec.json");
  if (!spec)
    return dsec_fail(err, 0, "sandbox %s has no readable spec", id);
  if (dsec_spec_validate(spec, err) < 0) {
    json_decref(spec);
    return -1;
  }
  if (create_sandbox(spec, id, snap, NULL, &_id_out, &rec, err) < 0)
    return -1;
  unlink(snap);
  json_object_set_new(rec, "type", json_string("resumed"));
  json_object_set_new(rec, "from", json_string("snapshot"));
  json_object_set_new(rec, "duration_ms",
                      json_real(dsec_ms1(dsec_now_ms() - t0)));
  return dsec_json_print_new(rec, err);
}

/* A released world booted again: the agent, then each service, each from
 * its checkpoint, then every service ready again.  On a failure, what
 * was booted is released again (the world stays released, for another
 * try). */
static int resume_world(const char *id, json_t *st, struct dsec_error **err)
{
  _cleanup_json_ json_t *members = world_members(id);
  _cleanup_json_ json_t *agent_spec = read_json_in(id, "spec.json");
  _cleanup_json_ json_t *rec = NULL;
  _cleanup_json_ json_t *booted = json_array();
  json_t *m;
  size_t i;
  int ret = -1;

  json_array_foreach(members, i, m)
  {
    _cleanup_json_ json_t *ms =
      dsec_sandbox_status(json_string_value(json_object_get(m, "id")), err);
    if (!ms)
      return -1;
    if (!json_is_true(json_object_get(ms, "released")) ||
        !json_is_string(json_object_get(ms, "checkpoint")))
      return dsec_fail(err, 0, "world %s: service %s is %s, not released", id,
                       json_string_value(json_object_get(m, "name")),
                       json_string_value(json_object_get(ms, "state")) ?: "?");
  }
  {
    _cleanup_free_ char *out = NULL;
    json_t *spec = spec_with_layer(
      id, json_string_value(json_object_get(st, "checkpoint")), err);
    if (!spec || create_sandbox(spec, id, NULL, NULL, &out, &rec, err) < 0)
      return -1;
    json_array_append_new(booted, json_string(id));
  }
  json_array_foreach(members, i, m)
  {
    const char *mid = json_string_value(json_object_get(m, "id"));
    _cleanup_json_ json_t *ms = dsec_sandbox_status(mid, err);
    _cleanup_free_ char *out = NULL;
    json_t *spec, *mrec = NULL;
    if (!ms)
      goto fail;
    spec = spec_with_layer(
      mid, json_string_value(json_object_get(ms, "checkpoint")), err);
    if (!spec || create_sandbox(spec, mid, NULL, NULL, &out, &mrec, err) < 0) {
      dsec_error_wrap(err, "service %s",
                      json_string_value(json_object_get(m, "name")));
      goto fail;
    }
    json_decref(mrec);
    json_array_append_new(booted, json_string(mid));
  }
  json_array_foreach(members, i, m)
  {
    json_t *svc = NULL, *s;
    size_t k;
    json_array_foreach(json_object_get(agent_spec, "services"), k, s)
      if (json_equal(json_object_get(s, "name"), json_object_get(m, "name")))
        svc = s;
    if (svc && service_wait_ready(id, json_string_value(json_object_get(m, "id")),
                                  svc, err) < 0)
      goto fail;
  }
  json_array_foreach(booted, i, m)
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    json_t *ev = json_pack("{s:s, s:s}", "type", "resumed", "from",
                           "checkpoint");
    dsec_event_append(-1, json_string_value(m), ev, &e);
    json_decref(ev);
  }
  json_object_set_new(rec, "type", json_string("resumed"));
  json_object_set(rec, "checkpoint", json_object_get(st, "checkpoint"));
  json_object_set_new(rec, "lost", json_string("processes"));
  json_object_set(rec, "services", members);
  ret = dsec_json_print_new(steal_pointer(&rec), err);
  return ret;
fail:
  {
    _cleanup_json_ json_t *release =
      json_pack("{s:s, s:b}", "op", "suspend", "release", true);
    for (size_t k = json_array_size(booted); k-- > 0;) {
      _cleanup_error_ struct dsec_error *e = NULL;
      const char *b = json_string_value(json_array_get(booted, k));
      json_decref(supervisor_op(b, release, &e));
      supervisor_wait_gone(b);
    }
  }
  return -1;
}

static int do_resume(struct opts *o, struct dsec_error **err)
{
  _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[0], err);
  _cleanup_json_ json_t *st = NULL;
  _cleanup_close_ int dfd = -1;
  _cleanup_close_ int lock = -1;
  _cleanup_free_ char *_id_out = NULL;
  const char *state;
  json_t *spec, *rec = NULL;

  if (!id)
    return -1;
  st = dsec_sandbox_status(id, err);
  if (!st)
    return -1;
  state = json_string_value(json_object_get(st, "state"));
  if (!state || strcmp(state, "suspended") != 0)
    return dsec_fail(err, 0, "sandbox %s is %s, not suspended", id,
                     state ? state : "unknown");
  if (world_refuse_member(id, "resume", err) < 0)
    return -1;
  if (!json_is_true(json_object_get(st, "released")) && world_is(id)) {
    /* the services first, the agent last */
    _cleanup_json_ json_t *thaw = json_pack("{s:s}", "op", "resume");
    _cleanup_json_ json_t *answers = world_op(id, thaw, true, NULL, err);
    return answers ? dsec_json_print_new(world_answer(answers), err) : -1;
  }
  if (!json_is_true(json_object_get(st, "released"))) {
    json_t *req = json_pack("{s:s}", "op", "resume");
    json_t *res = supervisor_op(id, req, err);
    json_decref(req);
    if (!res)
      return -1;
    return dsec_json_print_new(res, err);
  }
  if (json_is_string(json_object_get(st, "snapshot")))
    return resume_vm(id, st, err);
  if (world_is(id))
    return resume_world(id, st, err);
  /* released: booted again from its spec and its checkpoint, by one
   * resume at a time (two would start two supervisors for it) */
  {
    _cleanup_free_ char *dir = dsec_sandbox_dir(id);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
      return dsec_fail(err, errno, "cannot open %s", dir);
    lock = dsec_lock_at(dfd, ".resume.lock", DSEC_LOCK_EXCLUSIVE, true, err);
    if (lock < 0)
      return dsec_error_wrap(err, "sandbox %s is being resumed", id);
    json_decref(st);
    st = dsec_sandbox_status(id, err);
    if (!st)
      return -1;
    if (!json_is_true(json_object_get(st, "released")))
      return dsec_fail(err, 0, "sandbox %s was resumed meanwhile", id);
  }
  spec = spec_with_layer(id, json_string_value(json_object_get(st, "checkpoint")),
                         err);
  if (!spec)
    return -1;
  if (create_sandbox(spec, id, NULL, NULL, &_id_out, &rec, err) < 0)
    return -1;
  json_object_set_new(rec, "type", json_string("resumed"));
  json_object_set(rec, "checkpoint", json_object_get(st, "checkpoint"));
  /* what a released sandbox does not get back */
  json_object_set_new(rec, "lost", json_string("processes"));
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    json_t *ev = json_pack("{s:s, s:s, s:O}", "type", "resumed", "from",
                           "checkpoint", "checkpoint",
                           json_object_get(st, "checkpoint"));
    dsec_event_append(-1, id, ev, &e);
    json_decref(ev);
  }
  return dsec_json_print_new(rec, err);
}

/* The record of a fork that failed: the others go on (partial success
 * is reported per child). */
static int fork_error(int index, const char *parent, const struct dsec_error *e,
                      struct dsec_error **err)
{
  return dsec_json_print_new(json_pack("{s:s, s:i, s:s, s:s, s:i}", "type",
                                       "error", "index", index, "parent",
                                       parent, "error", e ? e->msg : "failed",
                                       "exit_code", e ? e->status : 1),
                             err);
}

/* A VM's forks: one memory snapshot and disk copy of the running VM
 * (paused for it), each fork restored from them with a disk of its own. */
static int fork_vm(const char *id, int count, struct dsec_error **err)
{
  json_t *req = json_pack("{s:s}", "op", "snapshot");
  _cleanup_json_ json_t *snap = supervisor_op(id, req, err);
  const char *file, *disk;
  int failed = 0;

  json_decref(req);
  if (!snap)
    return -1;
  file = json_string_value(json_object_get(snap, "snapshot"));
  disk = json_string_value(json_object_get(snap, "disk"));
  if (!file || !disk)
    return dsec_fail(err, 0, "sandbox %s answered no snapshot to fork from", id);
  for (int i = 0; i < count; i++) {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_free_ char *child = NULL;
    json_t *spec = read_json_in(id, "spec.json");
    json_t *rec = NULL;
    if (spec && dsec_spec_validate(spec, &e) == 0) {
      json_object_del(spec, "name");
      if (create_sandbox(spec, NULL, file, disk, &child, &rec, &e) == 0) {
        json_object_set_new(rec, "index", json_integer(i));
        json_object_set_new(rec, "parent", json_string(id));
        if (dsec_json_print_new(rec, err) < 0) {
          failed = -1;
          break;
        }
        continue;
      }
    } else
      json_decref(spec);
    failed++;
    if (fork_error(i, id, e, err) < 0) {
      failed = -1;
      break;
    }
  }
  unlink(file);
  unlink(disk);
  if (failed < 0)
    return -1;
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    json_t *ev = json_pack("{s:s, s:s, s:i, s:i}", "type", "forked", "from",
                           "snapshot", "count", count, "failed", failed);
    dsec_event_append(-1, id, ev, &e);
    json_decref(ev);
  }
  if (failed)
    return dsec_fail(err, 0, "%d of %d forks failed", failed, count);
  return 0;
}

/* A world's forks: one checkpoint per member, taken with the world
 * frozen; each child is a whole world, every member from its own
 * checkpoint, on a network of its own. */
static int fork_world(const char *id, int count, struct dsec_error **err)
{
  _cleanup_json_ json_t *answers = world_checkpoint(id, err);
  _cleanup_json_ json_t *layers = json_object();
  const char *agent_cp;
  int failed = 0;

  if (!answers)
    return -1;
  agent_cp = json_string_value(json_object_get(
    json_object_get(json_array_get(answers, 0), "layer"), "digest"));
  for (size_t i = 1; i < json_array_size(answers); i++) {
    json_t *a = json_array_get(answers, i);
    json_object_set(layers, json_string_value(json_object_get(a, "service")),
                    json_object_get(json_object_get(a, "layer"), "digest"));
  }
  for (int i = 0; i < count; i++) {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_free_ char *child = NULL;
    json_t *spec = spec_with_layer(id, agent_cp, &e);
    json_t *rec = NULL;
    if (spec) {
      json_object_del(spec, "name");
      if (create_world(spec, layers, &child, &rec, &e) == 0) {
        json_object_set_new(rec, "index", json_integer(i));
        json_object_set_new(rec, "parent", json_string(id));
        json_object_set_new(rec, "checkpoint", json_string(agent_cp));
        json_object_set(rec, "checkpoints", layers);
        if (dsec_json_print_new(rec, err) < 0)
          return -1;
        continue;
      }
    }
    failed++;
    if (fork_error(i, id, e, err) < 0)
      return -1;
  }
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    json_t *ev = json_pack("{s:s, s:s, s:O, s:i, s:i}", "type", "forked",
                           "checkpoint", agent_cp, "checkpoints", layers,
                           "count", count, "failed", failed);
    dsec_event_append(-1, id, ev, &e);
    json_decref(ev);
  }
  if (failed)
    return dsec_fail(err, 0, "%d of %d forks failed", failed, count);
  return 0;
}

static int do_fork(struct opts *o, struct dsec_error **err)
{
  _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[0], err);
  _cleanup_free_ char *cp = NULL;
  int failed = 0;

  if (!id)
    return -1;
  {
    /* a VM forks from a memory snapshot, the others from a checkpoint */
    _cleanup_json_ json_t *spec = read_json_in(id, "spec.json");
    if (is_vm_backend(json_string_value(json_object_get(spec, "backend"))))
      return fork_vm(id, o->count, err);
  }
  if (world_refuse_member(id, "fork", err) < 0)
    return -1;
  if (world_is(id))
    return fork_world(id, o->count, err);
  cp = checkpoint_of(id, err);
  if (!cp)
    return -1;
  for (int i = 0; i < o->count; i++) {
    _cleanup_error_ struct dsec_error *e = NULL;
    _cleanup_free_ char *child = NULL;
    json_t *spec = spec_with_layer(id, cp, &e);
    json_t *rec = NULL;
    if (spec) {
      json_object_del(spec, "name");
      if (create_sandbox(spec, NULL, NULL, NULL, &child, &rec, &e) == 0) {
        json_object_set_new(rec, "index", json_integer(i));
        json_object_set_new(rec, "parent", json_string(id));
        json_object_set_new(rec, "checkpoint", json_string(cp));
        if (dsec_json_print_new(rec, err) < 0)
          return -1;
        continue;
      }
    }
    /* partial success is reported per child */
    failed++;
    if (fork_error(i, id, e, err) < 0)
      return -1;
  }
  {
    _cleanup_error_ struct dsec_error *e = NULL;
    json_t *ev = json_pack("{s:s, s:s, s:i, s:i}", "type", "forked",
                           "checkpoint", cp, "count", o->count, "failed",
                           failed);
    dsec_event_append(-1, id, ev, &e);
    json_decref(ev);
  }
  if (failed)
    return dsec_fail(err, 0, "%d of %d forks failed", failed, o->count);
  return 0;
}

/* ---- serve */

#define SERVE_MAX_INFLIGHT 64

/* One request of serve, run in a child process whose stdout is a pipe:
 * the same code as the verbs, its JSON lines collected by the parent. */
static _Noreturn void serve_child(const struct dsec_front *front, json_t *req)
{
  struct dsec_error *err = NULL;
  struct opts o = { 0 };
  const char *op = json_string_value(json_object_get(req, "op"));
  const char *id_arg = json_string_value(json_object_get(req, "id"));
  char *args[2] = { (char *) id_arg, NULL };
  int ret = 0;

  static const char *const ops[] = { "create", "exec",  "ps",   "inspect",
                                     "rm",     "kill",  "checkpoint",
                                     "suspend", "resume", "fork",
                                     "sessions", "session_rm", "upload",
                                     "download", NULL };
  bool known = false;

  o.front = front;
  o.args = args;
  o.nargs = id_arg ? 1 : 0;
  o.label_filter = json_object();
  for (const char *const *k = ops; op && *k; k++)
    known |= strcmp(*k, op) == 0;
  if (!op)
    ret = dsec_bad_input(&err, "request: missing `op`");
  else if (!known)
    ret = dsec_bad_input(&err, "unknown op `%s`", op);
  else if (strcmp(op, "create") == 0) {
    _cleanup_free_ char *id = NULL;
    json_t *spec = json_deep_copy(json_object_get(req, "spec"));
    json_t *rec = NULL;
    if (json_is_object(spec) && !json_object_get(spec, "backend"))
      json_object_set_new(spec, "backend", json_string(front->default_backend));
    if (!json_is_object(spec)) {
      json_decref(spec);
      ret = dsec_bad_input(&err, "create: `spec` must be an object");
    } else if (front_check(front, spec, &err) < 0) {
      json_decref(spec);
      ret = -1;
    } else {
      int r = json_object_get(spec, "services")
                ? 0
                : pool_claim(spec, &id, &rec, &err);
      if (r != 0)
        json_decref(spec);
      ret = r < 0 ? -1 : r > 0 ? 0 : create_any(spec, &id, &rec, &err);
      if (ret == 0)
        ret = dsec_json_print_new(rec, &err);
    }
  } else if (!id_arg && strcmp(op, "ps") != 0)
    ret = dsec_bad_input(&err, "%s: missing `id`", op);
  else if (strcmp(op, "exec") == 0) {
    _cleanup_free_ char *id = dsec_sandbox_resolve(id_arg, &err);
    json_t *r = json_deep_copy(req), *res = NULL;
    json_object_del(r, "op");
    json_object_del(r, "id");
    json_object_del(r, "rid");
    ret = id && exec_route(&id, r, &err) == 0 ? exec_one(id, r, &res, &err)
                                              : -1;
    json_decref(r);
    if (ret == 0)
      ret = dsec_json_print_new(res, &err);
  } else if (strcmp(op, "ps") == 0) {
    /* one answer per request: the list in one record */
    json_t *list;
    o.all = json_is_true(json_object_get(req, "all"));
    list = ps_list(&o, &err);
    ret = list ? dsec_json_print_new(json_pack("{s:s, s:o}", "type", "ps",
                                               "sandboxes", list),
                                     &err)
               : -1;
  } else if (strcmp(op, "inspect") == 0)
    ret = do_inspect(&o, &err);
  else if (strcmp(op, "rm") == 0) {
    o.force = json_is_true(json_object_get(req, "force"));
    ret = do_rm(&o, &err);
  } else if (strcmp(op, "kill") == 0) {
    char *sig = (char *) json_string_value(json_object_get(req, "signal"));
    char *kargs[3] = { (char *) id_arg, sig, NULL };
    o.args = kargs;
    o.nargs = sig ? 2 : 1;
    ret = do_kill(&o, &err);
  } else if (strcmp(op, "checkpoint") == 0) {
    o.layer_name = json_string_value(json_object_get(req, "name"));
    ret = do_checkpoint(&o, &err);
  } else if (strcmp(op, "suspend") == 0) {
    o.release = json_is_true(json_object_get(req, "release"));
    ret = do_suspend(&o, &err);
  } else if (strcmp(op, "resume") == 0)
    ret = do_resume(&o, &err);
  else if (strcmp(op, "upload") == 0 || strcmp(op, "download") == 0) {
    const char *src = json_string_value(json_object_get(req, "src"));
    const char *dst = json_string_value(json_object_get(req, "dst"));
    json_t *seq = json_object_get(req, "seq");
    _cleanup_free_ char *id = NULL;
    if (!src || !dst || !*src || !*dst)
      ret = dsec_bad_input(&err, "%s: `src` and `dst` must be paths", op);
    else if (seq && !json_is_integer(seq))
      ret = dsec_bad_input(&err, "%s: `seq` must be an integer", op);
    else if (!(id = dsec_sandbox_resolve(id_arg, &err)))
      ret = -1;
    else if (op[0] == 'u')
      ret = copy_in(id, src, dst, json_is_true(json_object_get(req, "archive")),
                    seq, &err);
    else
      ret = copy_out(id, src, dst, seq, &err);
  } else if (strcmp(op, "sessions") == 0 || strcmp(op, "session_rm") == 0) {
    const char *name = json_string_value(json_object_get(req, "name"));
    if (json_object_get(req, "name") && !name)
      ret = dsec_bad_input(&err, "%s: `name` must be a string", op);
    else
      ret = do_session(&o, strcmp(op, "sessions") ? "rm" : "ls", id_arg, name,
                       &err);
  } else if (strcmp(op, "fork") == 0) {
    json_int_t n = json_integer_value(json_object_get(req, "count"));
    o.count = n > 0 && n <= 1024 ? (int) n : 1;
    ret = do_fork(&o, &err);
  } else
    ret = dsec_bad_input(&err, "unknown op `%s`", op);

  if (ret < 0) {
    json_t *e = json_pack("{s:s, s:s, s:i}", "type", "error", "error",
                          err ? err->msg : "failed", "exit_code",
                          err ? err->status : DSEC_EXIT_FAILURE);
    dsec_json_print_new(e, NULL);
  }
  fflush(stdout);
  _exit(0);
}

struct serve_job {
  int fd;
  pid_t pid;
  json_t *rid;
  char *buf;
  size_t len;
  bool answered; /* a record other than output went out */
};

/* Answers of a finished (or progressing) request, with its rid, one
 * write per line. */
static void serve_flush(struct serve_job *j, bool eof)
{
  char *start = j->buf;
  for (;;) {
    size_t left = j->len - (size_t) (start - j->buf);
    char *nl = left ? memchr(start, '\n', left) : NULL; /* buf: NULL at 0 */
    json_t *m;
    if (!nl)
      break;
    m = json_loadb(start, (size_t) (nl - start), JSON_ALLOW_NUL, NULL);
    if (m) {
      bool answer =
        strcmp(json_string_value(json_object_get(m, "type")) ?: "", "output");
      if (answer)
        j->answered = true;
      if (j->rid)
        json_object_set(m, "rid", j->rid);
      dsec_json_print_new(m, NULL);
      if (answer)
        dsec_crash_point("answer written");
    }
    start = nl + 1;
  }
  j->len -= (size_t) (start - j->buf);
  memmove(j->buf, start, j->len);
  if (eof && j->len > 0)
    j->len = 0; /* a partial line from a dead child: dropped */
}

/* Starts one request in a child; its answers come on jobs[*njobs]. */
static int serve_start(const struct dsec_front *front, const char *line,
                       size_t len, int lineno, struct serve_job *jobs,
                       size_t *njobs, struct dsec_error **err)
{
  json_error_t jerr;
  json_t *req;
  int p[2];
  pid_t pid;

  while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
    len--;
  if (len == 0)
    return 0;
  req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!json_is_object(req)) {
    json_t *e = json_pack("{s:s, s:s, s:i, s:i}", "type", "error", "error",
                          req ? "request: must be an object" : jerr.text,
                          "line", lineno, "exit_code", DSEC_EXIT_INPUT);
    json_decref(req);
    dsec_json_print_new(e, NULL);
    return 0;
  }
  if (pipe2(p, O_CLOEXEC) < 0) {
    json_decref(req);
    return dsec_fail(err, errno, "pipe");
  }
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    close(p[0]);
    if (dup2(p[1], STDOUT_FILENO) < 0)
      _exit(1);
    serve_child(front, req);
  }
  close(p[1]);
  if (pid < 0) {
    close(p[0]);
    json_decref(req);
    return dsec_fail(err, errno, "fork");
  }
  jobs[*njobs] = (struct serve_job){ p[0], pid,
                                     json_incref(json_object_get(req, "rid")),
                                     NULL, 0, false };
  (*njobs)++;
  json_decref(req);
  dsec_crash_point("request started");
  return 0;
}

/* serve: JSON Lines requests on standard input, each run in a child as
 * soon as it arrives (up to SERVE_MAX_INFLIGHT at once), answers with
 * their rid as they come.  Standard input is read with read(2) into a
 * buffer of our own: every complete line is started, however many came
 * in one read, and none waits in a stdio buffer that poll cannot see. */
static int do_serve(const struct dsec_front *front, struct dsec_error **err)
{
  struct serve_job jobs[SERVE_MAX_INFLIGHT];
  size_t njobs = 0;
  char *in = NULL;
  size_t inlen = 0, incap = 0;
  bool in_open = true;
  int lineno = 0;

  /* answers are written whole; a reader that goes away ends us */
  setvbuf(stdout, NULL, _IONBF, 0);
  /* a crash test's kill of serve takes its requests' processes too */
  dsec_crash_group("serve");
  while (in_open || njobs > 0 || inlen > 0) {
    struct pollfd pf[SERVE_MAX_INFLIGHT + 1];
    size_t n = 0;
    char *nl;

    /* the lines already read, while there is room */
    while (njobs < SERVE_MAX_INFLIGHT && inlen > 0 &&
           (nl = memchr(in, '\n', inlen))) {
      size_t len = (size_t) (nl - in) + 1;
      lineno++;
      if (serve_start(front, in, len, lineno, jobs, &njobs, err) < 0) {
        free(in);
        return -1;
      }
      memmove(in, in + len, inlen - len);
      inlen -= len;
    }
    if (!in_open && inlen > 0 && njobs < SERVE_MAX_INFLIGHT) {
      /* the last line, without its newline */
      lineno++;
      if (serve_start(front, in, inlen, lineno, jobs, &njobs, err) < 0) {
        free(in);
        return -1;
      }
      inlen = 0;
    }
    if (!in_open && njobs == 0 && inlen == 0)
      break;
    if (in_open && njobs < SERVE_MAX_INFLIGHT)
      pf[n++] = (struct pollfd){ STDIN_FILENO, POLLIN, 0 };
    for (size_t i = 0; i < njobs; i++)
      pf[n++] = (struct pollfd){ jobs[i].fd, POLLIN, 0 };
    if (poll(pf, n, -1) < 0) {
      if (errno == EINTR)
        continue;
      free(in);
      return dsec_fail(err, errno, "poll");
    }
    for (size_t k = 0; k < n; k++) {
      if (!pf[k].revents)
        continue;
      if (pf[k].fd == STDIN_FILENO) {
        ssize_t got;
        if (incap - inlen < 65536) {
          incap = incap ? incap * 2 : 65536;
          in = xrealloc(in, incap);
        }
        got = read(STDIN_FILENO, in + inlen, incap - inlen);
        if (got < 0 && errno == EINTR)
          continue;
        if (got <= 0)
          in_open = false;
        else
          inlen += (size_t) got;
        if (inlen > (64u << 20)) {
          free(in);
          return dsec_bad_input(err, "request line %d is longer than 64 MiB",
                                lineno + 1);
        }
        continue;
      }
      for (size_t i = 0; i < njobs; i++) {
        struct serve_job *j = &jobs[i];
        char buf[65536];
        ssize_t got;
        if (j->fd != pf[k].fd)
          continue;
        got = read(j->fd, buf, sizeof buf);
        if (got > 0) {
          j->buf = xrealloc(j->buf, j->len + (size_t) got);
          memcpy(j->buf + j->len, buf, (size_t) got);
          j->len += (size_t) got;
          serve_flush(j, false);
        } else if (got == 0 || errno != EINTR) {
          int st = 0;
          serve_flush(j, true);
          close(j->fd);
          waitpid(j->pid, &st, 0);
          if (!j->answered) {
            /* its process died first: the request is answered all the
             * same, never left waiting */
            _cleanup_free_ char *why =
              WIFSIGNALED(st)
                ? xasprintf("the request's process was killed by signal %d",
                            WTERMSIG(st))
                : xasprintf("the request's process ended without an answer "
                            "(status %d)", WEXITSTATUS(st));
            json_t *e = json_pack("{s:s, s:s, s:i}", "type", "error", "error",
                                  why, "exit_code", DSEC_EXIT_INTERNAL);
            if (j->rid)
              json_object_set(e, "rid", j->rid);
            dsec_json_print_new(e, NULL);
          }
          json_decref(j->rid);
          free(j->buf);
          jobs[i] = jobs[--njobs];
        }
        break;
      }
    }
  }
  free(in);
  return 0;
}

/* ---- pool: keeps --size sandboxes of a spec ready to be claimed, in
 * the foreground, until SIGINT or SIGTERM; then removes what is left. */
static int pool_ready_count(const char *ready, json_t *alive)
{
  _cleanup_closedir_ DIR *d = opendir(ready);
  struct dirent *de;
  int n = 0;

  if (!d)
    return 0;
  while ((de = readdir(d))) {
    _cleanup_json_ json_t *st = NULL;
    _cleanup_error_ struct dsec_error *e = NULL;
    const char *state;
    if (!dsec_sandbox_id_valid(de->d_name))
      continue;
    st = dsec_sandbox_status(de->d_name, &e);
    state = st ? json_string_value(json_object_get(st, "state")) : NULL;
    if (!state || strcmp(state, "running") != 0) {
      /* died (or expired) while waiting: replaced */
      _cleanup_free_ char *f = xasprintf("%s/%s", ready, de->d_name);
      unlink(f);
      dsec_sandbox_stop(de->d_name, true, NULL);
      continue;
    }
    json_array_append_new(alive, json_string(de->d_name));
    n++;
  }
  return n;
}

static int do_pool(struct opts *o, struct dsec_error **err)
{
  _cleanup_json_ json_t *spec = build_spec(o, err);
  _cleanup_free_ char *pools = pools_dir();
  _cleanup_free_ char *key = NULL;
  _cleanup_free_ char *dir = NULL;
  _cleanup_free_ char *ready = NULL;
  _cleanup_close_ int lock = -1;
  _cleanup_close_ int sfd = -1;
  sigset_t mask;
  int ret = 0;

  if (!spec)
    return -1;
  if (json_object_get(spec, "services") || json_object_get(spec, "world"))
    return dsec_bad_input(err, "pool: a world (a spec with services) is not "
                               "kept in a pool");
  key = pool_key(spec);
  dir = xasprintf("%s/%s", pools, key);
  ready = xasprintf("%s/ready", dir);
  if (dsec_mkdir_p(AT_FDCWD, ready, 0700, err) < 0)
    return -1;
  {
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char *text = json_dumps(spec, JSON_COMPACT | JSON_REAL_PRECISION(10));
    lock = dfd < 0 ? -1 : dsec_lock_at(dfd, "lock", DSEC_LOCK_EXCLUSIVE, true,
                                       err);
    if (lock < 0) {
      free(text);
      if (err && *err && (*err)->errnum == EWOULDBLOCK)
        (*err)->status = DSEC_EXIT_INPUT;
      return dsec_error_wrap(err, "a pool of this spec is already kept");
    }
    ret = dsec_write_file_replace(dfd, "spec.json", text, strlen(text), 0644,
                                  err);
    free(text);
    if (ret < 0)
      return -1;
    /* what a create compares its spec with (pool_find) */
    text = pool_text(spec);
    ret = dsec_write_file_replace(dfd, "key.json", text, strlen(text), 0644,
                                  err);
    free(text);
    if (ret < 0)
      return -1;
  }
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  sfd = signalfd(-1, &mask, SFD_CLOEXEC);
  if (dsec_json_print_new(json_pack("{s:s, s:s, s:i}", "type", "pool", "pool",
                                    key, "size", o->count), err) < 0)
    return -1;

  for (;;) {
    _cleanup_json_ json_t *alive = json_array();
    struct pollfd pf = { sfd, POLLIN, 0 };
    int have;

    /* the supervisors of the sandboxes made here are our children: those
     * that ended (their sandbox claimed and removed) are reaped, or the
     * pool would keep a zombie for each.  Between creates no other child
     * of ours is running */
    while (waitpid(-1, NULL, WNOHANG) > 0)
      ;
    have = pool_ready_count(ready, alive);

    for (; have < o->count; have++) {
      _cleanup_error_ struct dsec_error *e = NULL;
      _cleanup_free_ char *id = NULL;
      json_t *s2 = json_deep_copy(spec), *rec = NULL;
      json_t *labels = json_object_get(s2, "labels");
      json_object_set_new(labels, "dsec.pool", json_string(key));
      if (create_sandbox(s2, NULL, NULL, NULL, &id, &rec, &e) < 0) {
        dsec_log(DSEC_LOG_ERROR, e->errnum, "pool: %s", e->msg);
        break; /* tried again at the next round */
      }
      {
        _cleanup_free_ char *f = xasprintf("%s/%s", ready, id);
        int fd = open(f, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        if (fd >= 0)
          close(fd);
      }
      json_object_set_new(rec, "type", json_string("pooled"));
      json_object_set_new(rec, "pool", json_string(key));
      if (dsec_json_print_new(rec, err) < 0)
        return -1;
    }
    if (poll(&pf, 1, 100) > 0)
      break;
  }

  /* stopping: what nobody claimed goes */
  {
    _cleanup_closedir_ DIR *d = opendir(ready);
    struct dirent *de;
    while (d && (de = readdir(d))) {
      _cleanup_free_ char *f = NULL;
      _cleanup_free_ char *gone = NULL;
      if (!dsec_sandbox_id_valid(de->d_name))
        continue;
      f = xasprintf("%s/%s", ready, de->d_name);
      gone = xasprintf("%s/.stop-%s", dir, de->d_name);
      if (rename(f, gone) < 0)
        continue; /* claimed just now */
      unlink(gone);
      dsec_sandbox_stop(de->d_name, true, NULL);
    }
  }
  dsec_rm_rf_at(AT_FDCWD, dir, NULL);
  return dsec_json_print_new(json_pack("{s:s, s:s}", "type", "pool_stopped",
                                       "pool", key), err);
}

/* ---- the verbs */

static int verb_create(struct opts *o, int *status, struct dsec_error **err)
{
  _cleanup_free_ char *id = NULL;
  json_t *rec = NULL;
  (void) status;
  if (do_create(o, &id, &rec, err) < 0)
    return -1;
  return dsec_json_print_new(rec, err);
}

static int verb_exec(struct opts *o, int *status, struct dsec_error **err)
{
  _cleanup_free_ char *id = dsec_sandbox_resolve(o->args[0], err);
  _cleanup_json_ json_t *req = NULL;
  json_t *res = NULL;
  if (!id || exec_route(&id, o->exec, err) < 0)
    return -1;
  if (o->requests)
    return do_requests(id, o->requests, status, err);
  req = exec_request(o, err);
  if (!req || exec_one(id, req, &res, err) < 0)
    return -1;
  *status = exit_status_of(res);
  return dsec_json_print_new(res, err);
}

#define VERB_NOSTATUS(name, fn)                                             \
  static int verb_##name(struct opts *o, int *status,                       \
                         struct dsec_error **err)                           \
  {                                                                         \
    (void) status;                                                          \
    return fn;                                                              \
  }
VERB_NOSTATUS(ps, do_ps(o, err))
VERB_NOSTATUS(inspect, do_inspect(o, err))
VERB_NOSTATUS(events, do_log(o, "events.jsonl", err))
VERB_NOSTATUS(trajectory, do_log(o, "trajectory.jsonl", err))
VERB_NOSTATUS(rm, do_rm(o, err))
VERB_NOSTATUS(kill, do_kill(o, err))
VERB_NOSTATUS(checkpoint, do_checkpoint(o, err))
VERB_NOSTATUS(suspend, do_suspend(o, err))
VERB_NOSTATUS(resume, do_resume(o, err))
VERB_NOSTATUS(fork, do_fork(o, err))
VERB_NOSTATUS(serve, do_serve(o->front, err))
VERB_NOSTATUS(pool, do_pool(o, err))
VERB_NOSTATUS(cp, do_cp(o, err))
static int verb_shell(struct opts *o, int *status, struct dsec_error **err)
{
  return do_shell(o, status, err);
}
VERB_NOSTATUS(session, do_session(o, o->args[0], o->args[1],
                                  o->nargs > 2 ? o->args[2] : NULL, err))

static const struct verb verbs[] = {
  { "create", verb_create, CREATE_OPTS | O(OPT_NAME), 0, 0, NO_CMD, false,
    "create takes no arguments" },
  { "exec", verb_exec,
    O(OPT_ENV) | O(OPT_WORKDIR) | EXEC_OPTS | O(OPT_REQUESTS) |
      O(OPT_EXCLUSIVE) | O(OPT_STREAM) | O(OPT_SESSION) | O(OPT_TTY) |
      O(OPT_TTY_SIZE) | O(OPT_SERVICE),
    1, 1, MAY_CMD, true, "exec: give one sandbox ID" },
  { "run", do_run,
    CREATE_OPTS | O(OPT_NAME) | EXEC_OPTS | O(OPT_RM) | O(OPT_ATTACH) |
      O(OPT_RESULT),
    0, 0, NEEDS_CMD, true, "run: give the command after --" },
  { "ps", verb_ps, O(OPT_ALL) | O(OPT_LABEL), 0, 0, NO_CMD, false,
    "ps takes no arguments" },
  { "inspect", verb_inspect, 0, 1, 1, NO_CMD, false,
    "inspect: give one sandbox ID" },
  { "events", verb_events, O(OPT_FOLLOW), 1, 1, NO_CMD, false,
    "events: give one sandbox ID" },
  { "trajectory", verb_trajectory, O(OPT_FOLLOW), 1, 1, NO_CMD, false,
    "trajectory: give one sandbox ID" },
  { "rm", verb_rm, O(OPT_FORCE), 1, -1, NO_CMD, false,
    "rm: give at least one sandbox ID" },
  { "kill", verb_kill, 0, 1, 2, NO_CMD, false, "kill: give ID [SIGNAL]" },
  { "checkpoint", verb_checkpoint, O(OPT_NAME), 1, 1, NO_CMD, false,
    "checkpoint: give one sandbox ID" },
  { "suspend", verb_suspend, O(OPT_RELEASE), 1, 1, NO_CMD, false,
    "suspend: give one sandbox ID" },
  { "resume", verb_resume, 0, 1, 1, NO_CMD, false,
    "resume: give one sandbox ID" },
  { "fork", verb_fork, O(OPT_COUNT), 1, 1, NO_CMD, false,
    "fork: give one sandbox ID" },
  { "serve", verb_serve, 0, 0, 0, NO_CMD, false,
    "serve takes no arguments (requests come on standard input)" },
  { "pool", verb_pool, CREATE_OPTS | O(OPT_SIZE), 0, 0, NO_CMD, false,
    "pool takes no arguments" },
  { "shell", verb_shell, O(OPT_ENV) | O(OPT_WORKDIR), 1, 1, MAY_CMD, true,
    "shell: give one sandbox ID" },
  { "cp", verb_cp, O(OPT_ARCHIVE) | O(OPT_SEQ), 2, 2, NO_CMD, false,
    "cp: give SRC and DST (one of them ID:PATH)" },
  { "session", verb_session, 0, 2, 3, NO_CMD, false,
    "session: give ls|rm ID [NAME]" },
};

static const struct verb *find_verb(const char *name)
{
  for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
    if (strcmp(verbs[i].name, name) == 0)
      return &verbs[i];
  return NULL;
}

int dsec_front_main(int argc, char **argv, const struct dsec_front *front)
{
  struct opts o = { .front = front };
  struct dsec_error *err = NULL;
  bool exit_now = false;
  int status, cmd_status = 0;

  dsec_cli_init(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  /* rm answers once the sandbox is stopped and its directories moved
   * aside; what it wrote is removed after (sandbox.h) */
  dsec_sandbox_remove_background(true);
  status = parse(argc, argv, &o, &exit_now);
  if (status || exit_now)
    goto done;
  /* rm and run exit once their removals are handed over: their remover
   * needs no process in between (serve and pool live on) */
  if (strcmp(o.verb->name, "rm") == 0 || strcmp(o.verb->name, "run") == 0)
    dsec_sandbox_remove_unwaited(true);
  if (o.verb->run(&o, &cmd_status, &err) < 0) {
    status = dsec_cli_error(steal_pointer(&err));
    /* exec and run: a failure of dsec itself is 125, bad input stays 3 */
    if (o.verb->passes_status && status == DSEC_EXIT_FAILURE)
      status = DSEC_EXIT_INTERNAL;
  } else
    status = o.verb->passes_status ? cmd_status : 0;
done:
  json_decref(o.spec);
  json_decref(o.exec);
  json_decref(o.label_filter);
  return dsec_cli_finish(status);
}
