/* dsec-layer: build, name, inspect, export, compose and materialise layers
 * and images in the local store. */
#include <config.h>

#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "layer.h"
#include "log.h"
#include "verify.h"

enum {
  OPT_DIR = DSEC_OPT_FIRST_PRIVATE,
  OPT_TAR,
  OPT_NAME,
  OPT_SCRUB_GIT,
  OPT_KEEP_SETUID,
  OPT_MAX_SIZE,
  OPT_FORCE,
  OPT_FORMAT,
  OPT_OVERLAY_UPPER,
  OPT_ID_SHIFT,
  OPT_STRIP_SETUID,
  OPT_STRIP_OVERLAY,
  OPT_PROTECT,
  OPT_REPAIR,
};

static const struct option long_options[] = {
  { "dir", required_argument, NULL, OPT_DIR },
  { "tar", required_argument, NULL, OPT_TAR },
  { "name", required_argument, NULL, OPT_NAME },
  { "scrub-git", no_argument, NULL, OPT_SCRUB_GIT },
  { "keep-setuid", no_argument, NULL, OPT_KEEP_SETUID },
  { "max-size", required_argument, NULL, OPT_MAX_SIZE },
  { "force", no_argument, NULL, OPT_FORCE },
  { "format", required_argument, NULL, OPT_FORMAT },
  { "overlay-upper", no_argument, NULL, OPT_OVERLAY_UPPER },
  { "id-shift", required_argument, NULL, OPT_ID_SHIFT },
  { "strip-setuid", no_argument, NULL, OPT_STRIP_SETUID },
  { "strip-overlay", no_argument, NULL, OPT_STRIP_OVERLAY },
  { "protect", required_argument, NULL, OPT_PROTECT },
  { "repair", no_argument, NULL, OPT_REPAIR },
  DSEC_COMMON_LONG_OPTIONS,
  { NULL, 0, NULL, 0 },
};

static void help(void)
{
  fputs("Usage: dsec-layer [OPTION]... COMMAND [ARG]...\n"
        "Build, name, inspect and compose layers and images in the store.\n"
        "\n"
        "Commands:\n"
        "  create (--dir DIR | --tar FILE) [--name NAME@VERSION] [--scrub-git]\n"
        "         [--keep-setuid | --strip-setuid] [--strip-overlay]\n"
        "         [--protect PATH]... [--max-size SIZE] [--overlay-upper]\n"
        "         [--id-shift N]\n"
        "                               make a layer from a directory or a "
        "tarball\n"
        "  tag REF NAME@VERSION         name an image or a layer\n"
        "  ls                           list images and layers\n"
        "  inspect REF                  print everything known about REF\n"
        "  rm [--force] REF...          remove names, images or layers\n"
        "  export REF FILE              write a layer as tar.zst, an image as "
        "an archive\n"
        "  compose IMAGE [LAYER]...     print the environment a backend boots\n"
        "  materialise [--format dir|erofs] REF...\n"
        "                               make layers ready to mount\n"
        "  verify [--repair]            check the whole store\n"
        "\n"
        "Options:\n"
        "      --debug            print debug records on stderr\n"
        "      --dir=DIR          (create) the layer's content\n"
        "      --force            (rm) remove even what is named or used by "
        "an image\n"
        "      --format=FMT       (materialise) dir (default) or erofs\n"
        "  -h, --help             show this help and exit\n"
        "      --id-shift=N       (create) subtract N from owners and groups\n"
        "      --keep-setuid      (create) keep setuid bits and file "
        "capabilities\n"
        "      --log-format=FMT   diagnostics as text (default) or json\n"
        "      --max-size=SIZE    (create) bound on the uncompressed size\n"
        "      --name=NAME        (create) name the layer NAME@VERSION\n"
        "      --overlay-upper    (create) DIR is an overlayfs upper dir: its\n"
        "                         whiteouts become OCI whiteouts\n"
        "      --protect=PATH     (create) refuse a layer that would change "
        "PATH\n"
        "      --repair           (verify) fix what can be fixed safely\n"
        "      --scrub-git        (create) keep only the current commit of "
        ".git\n"
        "      --strip-overlay    (create) with --tar, remove overlay "
        "metadata xattrs\n"
        "      --strip-setuid     (create) with --tar, remove setuid/setgid "
        "bits and file\n"
        "                         capabilities instead of refusing them\n"
        "      --tar=FILE         (create) the layer's content as a tarball\n"
        "      --version          show the version and exit\n"
        "\n"
        "Exit status: 0 ok, 1 failed (verify: the store is not "
        "consistent), 2 usage,\n"
        "3 bad input.\n",
        stdout);
}

struct options {
  const char *cmd;
  char **args;
  int nargs;
  struct dsec_layer_create_opts create;
  const char **protect; /* --protect, NULL-terminated */
  size_t nprotect;
  bool force;
  bool repair;
  bool format_set;
  enum dsec_layer_format format;
};

/* Which options each command takes. */
static bool option_allowed(const char *cmd, int opt)
{
  switch (opt) {
  case OPT_DIR:
  case OPT_TAR:
  case OPT_NAME:
  case OPT_SCRUB_GIT:
  case OPT_KEEP_SETUID:
  case OPT_MAX_SIZE:
  case OPT_OVERLAY_UPPER:
  case OPT_ID_SHIFT:
  case OPT_STRIP_SETUID:
  case OPT_STRIP_OVERLAY:
  case OPT_PROTECT:
    return strcmp(cmd, "create") == 0;
  case OPT_FORCE:
    return strcmp(cmd, "rm") == 0;
  case OPT_FORMAT:
    return strcmp(cmd, "materialise") == 0 || strcmp(cmd, "materialize") == 0;
  case OPT_REPAIR:
    return strcmp(cmd, "verify") == 0;
  default:
    return true;
  }
}

static const struct {
  const char *name;
  int min_args, max_args;
} commands[] = {
  { "create", 0, 0 },  { "tag", 2, 2 },     { "ls", 0, 0 },
  { "inspect", 1, 1 }, { "rm", 1, 1024 },   { "export", 2, 2 },
  { "compose", 1, 1024 }, { "materialise", 1, 1024 },
  { "materialize", 1, 1024 }, { "verify", 0, 0 },
};

static int parse_args(int argc, char **argv, struct options *o, bool *exit_now)
{
  int opt, status = 0;
  const char *seen_cmd = NULL;
  int first_arg = -1;

  /* Options may come before or after the command ("+" would stop at it);
   * getopt permutes, so the first non-option is the command. */
  while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    if (dsec_cli_common_option(opt, optarg, help, exit_now, &status)) {
      if (*exit_now)
        return status;
      continue;
    }
    switch (opt) {
    case OPT_DIR:
      o->create.dir = optarg;
      break;
    case OPT_TAR:
      o->create.tar = optarg;
      break;
    case OPT_NAME:
      o->create.name = optarg;
      break;
    case OPT_SCRUB_GIT:
      o->create.scrub_git = true;
      break;
    case OPT_KEEP_SETUID:
      o->create.policy.keep_setuid = true;
      break;
    case OPT_MAX_SIZE:
      if (dsec_parse_size(optarg, &o->create.policy.max_size) < 0 ||
          o->create.policy.max_size == 0)
        return dsec_usage_error("invalid --max-size `%s`", optarg);
      break;
    case OPT_FORCE:
      o->force = true;
      break;
    case OPT_REPAIR:
      o->repair = true;
      break;
    case OPT_OVERLAY_UPPER:
      o->create.overlay_upper = true;
      break;
    case OPT_STRIP_SETUID:
      o->create.policy.strip_setuid = true;
      break;
    case OPT_STRIP_OVERLAY:
      o->create.policy.strip_overlay = true;
      break;
    case OPT_PROTECT:
      if (optarg[0] != '/')
        return dsec_usage_error("--protect takes an absolute path");
      o->protect = xrealloc(o->protect,
                            sizeof *o->protect * (o->nprotect + 2));
      o->protect[o->nprotect++] = optarg;
      o->protect[o->nprotect] = NULL;
      o->create.policy.protect = o->protect;
      break;
    case OPT_ID_SHIFT: {
      uint64_t v;
      if (dsec_parse_uint(optarg, UINT32_MAX, &v) < 0)
        return dsec_usage_error("--id-shift takes a whole number");
      o->create.id_shift = (unsigned) v;
      break;
    }
    case OPT_FORMAT:
      if (strcmp(optarg, "dir") == 0)
        o->format = DSEC_FORMAT_DIR;
      else if (strcmp(optarg, "erofs") == 0)
        o->format = DSEC_FORMAT_EROFS;
      else
        return dsec_usage_error("--format takes dir or erofs");
      o->format_set = true;
      break;
    default:
      return DSEC_EXIT_USAGE;
    }
  }
  if (optind >= argc)
    return dsec_usage_error("missing COMMAND");
  seen_cmd = argv[optind];
  first_arg = optind + 1;
  for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
    if (strcmp(commands[i].name, seen_cmd) == 0) {
      int n = argc - first_arg;
      o->cmd = seen_cmd;
      if (n < commands[i].min_args)
        return dsec_usage_error("%s: missing argument", seen_cmd);
      if (n > commands[i].max_args)
        return dsec_usage_error("%s: too many arguments", seen_cmd);
      o->args = argv + first_arg;
      o->nargs = n;
    }
  if (!o->cmd)
    return dsec_usage_error("unknown command `%s`", seen_cmd);

  /* every option combination is checked before any work */
  {
    static const int all[] = { OPT_DIR,        OPT_TAR,     OPT_NAME,
                               OPT_SCRUB_GIT,  OPT_KEEP_SETUID,
                               OPT_MAX_SIZE,   OPT_FORCE,   OPT_FORMAT,
                               OPT_OVERLAY_UPPER, OPT_ID_SHIFT,
                               OPT_STRIP_SETUID, OPT_STRIP_OVERLAY,
                               OPT_PROTECT,    OPT_REPAIR };
    bool given[] = { o->create.dir,        o->create.tar,
                     o->create.name,       o->create.scrub_git,
                     o->create.policy.keep_setuid,
                     o->create.policy.max_size != 0,
                     o->force,             o->format_set,
                     o->create.overlay_upper, o->create.id_shift != 0,
                     o->create.policy.strip_setuid,
                     o->create.policy.strip_overlay, o->nprotect != 0,
                     o->repair };
    for (size_t i = 0; i < ARRAY_SIZE(all); i++)
      if (given[i] && !option_allowed(o->cmd, all[i]))
        return dsec_usage_error("%s: option --%s does not apply", o->cmd,
                                long_options[i].name);
  }
  if (strcmp(o->cmd, "create") == 0) {
    if (!o->create.dir == !o->create.tar)
      return dsec_usage_error("create: give one of --dir or --tar");
    if ((o->create.scrub_git || o->create.overlay_upper || o->create.id_shift) &&
        !o->create.dir)
      return dsec_usage_error("create: --scrub-git, --overlay-upper and "
                              "--id-shift need --dir");
    if ((o->create.policy.strip_setuid || o->create.policy.strip_overlay) &&
        !o->create.tar)
      return dsec_usage_error("create: --strip-setuid and --strip-overlay "
                              "need --tar");
    if (o->create.policy.strip_setuid && o->create.policy.keep_setuid)
      return dsec_usage_error("create: --keep-setuid and --strip-setuid "
                              "exclude each other");
  }
  return 0;
}

/* One record per stored image and layer, with names. */
static int cmd_ls(struct dsec_store *s, struct dsec_error **err)
{
  _cleanup_json_ json_t *refs = dsec_ref_list(s, err);
  static const char *const dirs[] = { "images", "layers" };

  if (!refs)
    return -1;
  for (size_t k = 0; k < ARRAY_SIZE(dirs); k++) {
    struct dirent **names = NULL;
    _cleanup_free_ char *path = xasprintf("%s/%s", s->path, dirs[k]);
    int n = scandir(path, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
      char digest[DSEC_DIGEST_LEN + 1];
      _cleanup_json_ json_t *rec = NULL;
      _cleanup_error_ struct dsec_error *e = NULL;
      snprintf(digest, sizeof digest, "sha256:%.64s", names[i]->d_name);
      if (dsec_digest_valid(digest) &&
          dsec_store_kind(s, digest) == (k == 0 ? DSEC_KIND_IMAGE
                                                : DSEC_KIND_LAYER))
        rec = dsec_store_inspect(s, digest, &e);
      free(names[i]);
      if (!rec)
        continue;
      if (dsec_json_print(rec, err) < 0) {
        for (int j = i + 1; j < n; j++)
          free(names[j]);
        free(names);
        return -1;
      }
    }
    free(names);
  }
  return 0;
}

static int print_finding(json_t *rec, void *ud, struct dsec_error **err)
{
  (void) ud;
  return dsec_json_print(rec, err);
}

/* verify [--repair]: the findings, a summary, and a failure when the
 * store is not consistent (once repaired, when repairing). */
static int cmd_verify(struct dsec_store *s, bool repair,
                      struct dsec_error **err)
{
  const struct dsec_verify_opts vo = { .repair = repair };
  struct dsec_verify_counts c;
  _cleanup_close_ int gc = -1;
  double t0 = dsec_now_ms();

  /* shared: writers go on while we read; exclusive to repair, so that no
   * writer is between its steps when we remove what looks partial */
  gc = dsec_store_lock_gc(s, repair, err);
  if (gc < 0 || dsec_store_verify(s, &vo, print_finding, NULL, &c, err) < 0)
    return -1;
  if (dsec_json_print_new(
        json_pack("{s:s, s:b, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:I, s:I, "
                  "s:I, s:b, s:f}",
                  "type", "summary", "repair", repair, "checked", "blobs",
                  (json_int_t) c.blobs, "images", (json_int_t) c.images,
                  "layers", (json_int_t) c.layers, "refs",
                  (json_int_t) c.refs, "sources", (json_int_t) c.sources,
                  "vm_boot", (json_int_t) c.vm_boot,
                  "findings", (json_int_t) c.findings, "repaired",
                  (json_int_t) c.repaired, "remaining",
                  (json_int_t) c.remaining, "consistent", c.remaining == 0,
                  "duration_ms", dsec_ms1(dsec_now_ms() - t0)),
        err) < 0)
    return -1;
  if (c.remaining > 0)
    return dsec_fail(err, 0, "the store is not consistent: %lld finding%s "
                             "remain%s",
                     (long long) c.remaining, c.remaining == 1 ? "" : "s",
                     c.remaining == 1 ? "s" : "");
  return 0;
}

static int run(struct dsec_store *s, struct options *o, struct dsec_error **err)
{
  const char *cmd = o->cmd;

  if (strcmp(cmd, "verify") == 0)
    return cmd_verify(s, o->repair, err);

  if (strcmp(cmd, "create") == 0) {
    json_t *rec = NULL;
    if (dsec_layer_create(s, &o->create, &rec, err) < 0)
      return -1;
    return dsec_json_print_new(rec, err);
  }
  if (strcmp(cmd, "tag") == 0) {
    char digest[DSEC_DIGEST_LEN + 1];
    enum dsec_kind kind;
    _cleanup_free_ char *name = NULL;
    _cleanup_free_ char *version = NULL;
    _cleanup_close_ int gc = -1;
    if (dsec_ref_split(o->args[1], &name, &version, err) < 0)
      return -1;
    gc = dsec_store_lock_gc(s, false, err);
    if (gc < 0 || dsec_store_resolve(s, o->args[0], digest, &kind, err) < 0 ||
        dsec_ref_set(s, name, version, kind, digest, err) < 0)
      return -1;
    return dsec_json_print_new(
      json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "ref", "name", name,
                "version", version, "kind", dsec_kind_name(kind), "digest",
                digest),
      err);
  }
  if (strcmp(cmd, "ls") == 0)
    return cmd_ls(s, err);
  if (strcmp(cmd, "inspect") == 0) {
    json_t *rec = dsec_store_inspect(s, o->args[0], err);
    if (!rec)
      return -1;
    return dsec_json_print_new(rec, err);
  }
  if (strcmp(cmd, "rm") == 0) {
    int ret = 0;
    for (int i = 0; i < o->nargs && ret == 0; i++) {
      _cleanup_json_ json_t *removed = json_array();
      json_t *r;
      size_t k;
      ret = dsec_store_rm(s, o->args[i], o->force, removed, err);
      json_array_foreach(removed, k, r)
      {
        if (dsec_json_print(r, err) < 0)
          return -1;
      }
    }
    return ret;
  }
  if (strcmp(cmd, "export") == 0) {
    json_t *rec = NULL;
    if (dsec_store_export(s, o->args[0], o->args[1], &rec, err) < 0)
      return -1;
    /* the record goes to stderr's side only when the archive is on stdout */
    if (strcmp(o->args[1], "-") == 0) {
      json_decref(rec);
      return 0;
    }
    return dsec_json_print_new(rec, err);
  }
  if (strcmp(cmd, "compose") == 0) {
    json_t *env = dsec_compose(s, o->args[0], (const char *const *) o->args + 1,
                               (size_t) o->nargs - 1, err);
    if (!env)
      return -1;
    return dsec_json_print_new(env, err);
  }
  /* materialise */
  for (int i = 0; i < o->nargs; i++) {
    char digest[DSEC_DIGEST_LEN + 1];
    enum dsec_kind kind;
    _cleanup_json_ json_t *digests = json_array();
    json_t *d;
    size_t k;

    if (dsec_store_resolve(s, o->args[i], digest, &kind, err) < 0)
      return -1;
    if (kind == DSEC_KIND_IMAGE) {
      _cleanup_json_ json_t *img = dsec_image_record(s, digest, err);
      json_t *l;
      if (!img)
        return -1;
      json_array_foreach(json_object_get(img, "layers"), k, l)
        json_array_append(digests, json_object_get(l, "digest"));
    } else
      json_array_append_new(digests, json_string(digest));
    json_array_foreach(digests, k, d)
    {
      _cleanup_free_ char *path = NULL;
      bool made = false;
      double t0 = dsec_now_ms();
      const char *ld = json_string_value(d);
      if (dsec_layer_materialise(s, ld, o->format, &path, &made, err) < 0)
        return -1;
      if (dsec_json_print_new(
            json_pack("{s:s, s:s, s:s, s:s, s:b, s:f}", "type", "materialised",
                      "digest", ld, "format",
                      o->format == DSEC_FORMAT_EROFS ? "erofs" : "dir", "path",
                      path, "made", made, "duration_ms",
                      dsec_ms1(dsec_now_ms() - t0)),
            err) < 0)
        return -1;
    }
  }
  return 0;
}

int main(int argc, char **argv)
{
  struct dsec_error *err = NULL;
  struct dsec_store *store = NULL;
  struct options o = { 0 };
  bool exit_now = false;
  int status;

  dsec_cli_init(argc, argv);
  status = parse_args(argc, argv, &o, &exit_now);
  if (status || exit_now)
    return dsec_cli_finish(status);

  if (dsec_store_open(&store, &err) < 0 || run(store, &o, &err) < 0)
    status = dsec_cli_error(steal_pointer(&err));
  dsec_store_free(store);
  free(o.protect);
  return dsec_cli_finish(status);
}
