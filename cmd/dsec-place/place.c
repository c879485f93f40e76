/* dsec-place: a node's inventory (probe) and the placement of sandbox
 * requests on nodes (plan).  See place.h for the rules. */
#include <config.h>

#include "place.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "digest.h"
#include "fsutil.h"
#include "image.h"
#include "layermount.h"
#include "log.h"
#include "refs.h"
#include "sandbox.h"
#include "spec.h"
#include "store.h"
#include "vm.h"

/* ---- small containers ------------------------------------------------ */

/* A string -> int map with open addressing; keys are owned. */
struct strmap {
  char **keys;
  int *vals;
  size_t cap, n;
};

static uint64_t hash_bytes(const char *s)
{
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (; *s; s++) {
    h ^= (unsigned char) *s;
    h *= 0x100000001b3ull;
  }
  return h;
}

static void strmap_grow(struct strmap *m)
{
  size_t cap = m->cap ? m->cap * 2 : 64;
  char **keys = xzalloc(cap * sizeof *keys);
  int *vals = xmalloc(cap * sizeof *vals);

  for (size_t i = 0; i < m->cap; i++) {
    size_t j;
    if (!m->keys[i])
      continue;
    for (j = hash_bytes(m->keys[i]) & (cap - 1); keys[j]; j = (j + 1) & (cap - 1))
      ;
    keys[j] = m->keys[i];
    vals[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = keys;
  m->vals = vals;
  m->cap = cap;
}

/* The value of key; when absent, key is added with val (and *added set). */
static int strmap_intern(struct strmap *m, const char *key, int val,
                         bool *added)
{
  size_t j;

  if ((m->n + 1) * 2 > m->cap)
    strmap_grow(m);
  for (j = hash_bytes(key) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1))
    if (strcmp(m->keys[j], key) == 0) {
      if (added)
        *added = false;
      return m->vals[j];
    }
  m->keys[j] = xstrdup(key);
  m->vals[j] = val;
  m->n++;
  if (added)
    *added = true;
  return val;
}

static void strmap_clear(struct strmap *m)
{
  for (size_t i = 0; i < m->cap; i++)
    free(m->keys[i]);
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

/* A uint64 -> int64 counter map (spread group x node -> sandboxes). */
struct countmap {
  uint64_t *keys; /* key + 1; 0 is empty */
  int64_t *vals;
  size_t cap, n;
};

static size_t countmap_slot(const struct countmap *m, uint64_t key)
{
  uint64_t h = (key + 1) * 0x9e3779b97f4a7c15ull;
  size_t j = (size_t) (h >> 17) & (m->cap - 1);
  while (m->keys[j] && m->keys[j] != key + 1)
    j = (j + 1) & (m->cap - 1);
  return j;
}

static int64_t countmap_get(const struct countmap *m, uint64_t key)
{
  size_t j;
  if (!m->cap)
    return 0;
  j = countmap_slot(m, key);
  return m->keys[j] ? m->vals[j] : 0;
}

static void countmap_add(struct countmap *m, uint64_t key, int64_t v)
{
  size_t j;
  if ((m->n + 1) * 2 > m->cap) {
    struct countmap g = { 0 };
    g.cap = m->cap ? m->cap * 2 : 1024;
    g.keys = xzalloc(g.cap * sizeof *g.keys);
    g.vals = xmalloc(g.cap * sizeof *g.vals);
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) {
        size_t k = countmap_slot(&g, m->keys[i] - 1);
        g.keys[k] = m->keys[i];
        g.vals[k] = m->vals[i];
      }
    g.n = m->n;
    free(m->keys);
    free(m->vals);
    *m = g;
  }
  j = countmap_slot(m, key);
  if (!m->keys[j]) {
    m->keys[j] = key + 1;
    m->vals[j] = 0;
    m->n++;
  }
  m->vals[j] += v;
}

/* ---- the planner's model --------------------------------------------- */

enum {
  BACKEND_FNCALL = 1 << 0,
  BACKEND_CONTAINER = 1 << 1,
  BACKEND_MICROVM = 1 << 2,
  BACKEND_VM = 1 << 3,
};

static const struct {
  const char *name;
  unsigned bit;
} backend_names[] = {
  { "fncall", BACKEND_FNCALL },
  { "container", BACKEND_CONTAINER },
  { "microvm", BACKEND_MICROVM },
  { "vm", BACKEND_VM },
};

static unsigned backend_bit(const char *name)
{
  for (size_t i = 0; i < ARRAY_SIZE(backend_names); i++)
    if (strcmp(backend_names[i].name, name) == 0)
      return backend_names[i].bit;
  return 0;
}

enum { CLASS_LATENCY, CLASS_BESTEFFORT };

struct pnode {
  char *name;
  char *name_json;      /* the name as a JSON string, quoted */
  int64_t lat_mcpu_cap; /* budgets, milli-CPUs and MB */
  int64_t lat_mem_cap;
  int64_t all_mcpu_cap;
  int64_t all_mem_cap;
  double lat_mcpu_inv, lat_mem_inv; /* 1e6 / each budget */
  double all_mcpu_inv, all_mem_inv;
  int64_t lat_mcpu, lat_mem; /* committed by latency sandboxes */
  int64_t all_mcpu, all_mem; /* committed by all */
  unsigned backends;
  bool burst;
  int *held; /* layer ids the inventory lists */
  size_t n_held;
  uint64_t *cache; /* bitset of layer ids held, after loading */
  /* layers the host has mounted (its inventory says "mounted" for a
   * layer: then a held layer that is not is cold, its pages to read) */
  bool mounts_known;
  int *mounted_ids;
  size_t n_mounted;
  uint64_t *mounted; /* bitset, after loading */
};

struct preq {
  char *rid_json;
  int64_t count;
  unsigned backend;
  int cls;
  int64_t mcpu, mem;
  int *layers; /* layer ids of the image and the extra layers, unique */
  size_t n_layers;
  int group; /* spread group, -1 for none */
  int64_t spread_max;
};

/* What an image or layer reference stands for: layer ids (cached per
 * reference, many requests share an image). */
struct refinfo {
  int *layers;
  size_t n;
};

struct planner {
  struct dsec_store *store; /* NULL without a local store */
  struct strmap node_names;
  struct pnode *nodes;
  size_t n_nodes, cap_nodes;

  struct strmap layer_ids;
  int64_t *layer_size; /* -1 unknown */
  size_t n_layers, cap_layers;

  struct strmap refs;
  struct refinfo *refinfo;
  size_t n_refs, cap_refs;

  struct strmap rids;
  struct preq *reqs;
  size_t n_reqs, cap_reqs;
  int64_t total;

  struct strmap groups;
  int64_t *group_total;
  size_t n_groups, cap_groups;
  struct countmap spread; /* group * n_nodes + node -> sandboxes */
};

#define GROW(arr, n, cap)                                   \
  do {                                                      \
    if ((n) == (cap)) {                                     \
      (cap) = (cap) ? (cap) * 2 : 16;                       \
      (arr) = xrealloc((arr), (cap) * sizeof *(arr));       \
    }                                                       \
  } while (0)

static void planner_free(struct planner *p)
{
  for (size_t i = 0; i < p->n_nodes; i++) {
    free(p->nodes[i].name);
    free(p->nodes[i].name_json);
    free(p->nodes[i].held);
    free(p->nodes[i].cache);
    free(p->nodes[i].mounted_ids);
    free(p->nodes[i].mounted);
  }
  free(p->nodes);
  for (size_t i = 0; i < p->n_reqs; i++) {
    free(p->reqs[i].rid_json);
    free(p->reqs[i].layers);
  }
  free(p->reqs);
  for (size_t i = 0; i < p->n_refs; i++)
    free(p->refinfo[i].layers);
  free(p->refinfo);
  free(p->layer_size);
  free(p->group_total);
  free(p->spread.keys);
  free(p->spread.vals);
  strmap_clear(&p->node_names);
  strmap_clear(&p->layer_ids);
  strmap_clear(&p->refs);
  strmap_clear(&p->rids);
  strmap_clear(&p->groups);
  dsec_store_free(p->store);
}

/* The id of layer digest; a known size is remembered (the largest given
 * wins, so that the order of the input does not matter). */
static int layer_id(struct planner *p, const char *digest, int64_t size)
{
  bool added;
  int id = strmap_intern(&p->layer_ids, digest, (int) p->n_layers, &added);
  if (added) {
    GROW(p->layer_size, p->n_layers, p->cap_layers);
    p->layer_size[p->n_layers++] = -1;
  }
  if (size > p->layer_size[id])
    p->layer_size[id] = size;
  return id;
}

static char *json_quote(const char *s)
{
  json_t *j = json_string(s);
  char *out = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
  json_decref(j);
  if (!out)
    abort(); /* only fails on OOM: s is valid UTF-8 from jansson */
  return out;
}

/* ---- reading JSON Lines ---------------------------------------------- */

struct lines {
  FILE *f;
  bool own;
  const char *label; /* the path, or "stdin" */
  char *buf;
  size_t size;
  size_t lineno;
};

static int lines_open(struct lines *l, const char *path,
                      struct dsec_error **err)
{
  memset(l, 0, sizeof *l);
  if (strcmp(path, "-") == 0) {
    l->f = stdin;
    l->label = "stdin";
    return 0;
  }
  l->f = fopen(path, "re");
  if (!l->f)
    return dsec_error_set(err,
                          errno == ENOENT || errno == ENOTDIR ||
                              errno == EISDIR
                            ? DSEC_EXIT_INPUT
                            : DSEC_EXIT_FAILURE,
                          errno, "cannot open %s", path);
  l->own = true;
  l->label = path;
  return 0;
}

static void lines_close(struct lines *l)
{
  if (l->own && l->f)
    fclose(l->f);
  free(l->buf);
  l->f = NULL;
  l->buf = NULL;
}

/* The next non-blank line as a JSON object: 1, 0 at the end, -1 on error
 * (naming FILE:LINE).  *obj is a new ref. */
static int lines_next(struct lines *l, json_t **obj, struct dsec_error **err)
{
  ssize_t n;
  char what[64 + 4096];

  for (;;) {
    errno = 0;
    n = getline(&l->buf, &l->size, l->f);
    if (n < 0) {
      if (ferror(l->f))
        return dsec_fail(err, errno, "cannot read %s", l->label);
      return 0;
    }
    l->lineno++;
    if ((size_t) n > DSEC_PLACE_LINE_MAX)
      return dsec_bad_input(err, "%s:%zu: line longer than %u bytes",
                            l->label, l->lineno, DSEC_PLACE_LINE_MAX);
    if (strspn(l->buf, " \t\r\n") == (size_t) n)
      continue;
    snprintf(what, sizeof what, "%s:%zu", l->label, l->lineno);
    *obj = dsec_json_parse(l->buf, (size_t) n, what, err);
    if (!*obj)
      return -1;
    if (!json_is_object(*obj)) {
      json_decref(*obj);
      *obj = NULL;
      return dsec_bad_input(err, "%s: not a JSON object", what);
    }
    return 1;
  }
}

/* A non-negative number field in milli-units (CPUs); def when absent. */
static int get_mcpu(json_t *o, const char *key, const char *what,
                    const char *field, bool positive, int64_t def,
                    int64_t *out, struct dsec_error **err)
{
  json_t *v = json_object_get(o, key);
  double d;

  if (!v || json_is_null(v)) {
    if (def < 0)
      return dsec_bad_input(err, "%s: missing field `%s`", what, field);
    *out = def;
    return 0;
  }
  d = json_is_number(v) ? json_number_value(v) : -1;
  if (d < 0 || (positive && d <= 0) || d > 1e7)
    return dsec_bad_input(err, "%s: field `%s` must be a number %s", what,
                          field, positive ? "above 0" : "from 0");
  *out = (int64_t) (d * 1000 + 0.5);
  if (positive && *out == 0)
    *out = 1;
  return 0;
}

/* An integer field from min to max; def when absent (-1: required). */
static int get_int(json_t *o, const char *key, const char *what,
                   const char *field, int64_t min, int64_t max, int64_t def,
                   int64_t *out, struct dsec_error **err)
{
  json_t *v = json_object_get(o, key);
  json_int_t i;

  if (!v || json_is_null(v)) {
    if (def < 0)
      return dsec_bad_input(err, "%s: missing field `%s`", what, field);
    *out = def;
    return 0;
  }
  if (json_is_integer(v))
    i = json_integer_value(v);
  else if (json_is_real(v) && json_real_value(v) >= -0x1p63 &&
           json_real_value(v) < 0x1p63 &&
           json_real_value(v) == (double) (json_int_t) json_real_value(v))
    i = (json_int_t) json_real_value(v);
  else
    return dsec_bad_input(err, "%s: field `%s` must be an integer", what,
                          field);
  if (i < min || i > max)
    return dsec_bad_input(err, "%s: field `%s` must be from %" PRId64
                               " to %" PRId64,
                          what, field, min, max);
  *out = i;
  return 0;
}

/* ---- node inventories -------------------------------------------------- */

static int parse_committed(json_t *c, const char *what, struct pnode *n,
                           struct dsec_error **err)
{
  static const char *const classes[] = { "latency", "besteffort" };
  char field[64];

  if (!c || json_is_null(c))
    return 0;
  if (!json_is_object(c))
    return dsec_bad_input(err, "%s: field `committed` must be an object",
                          what);
  for (size_t k = 0; k < ARRAY_SIZE(classes); k++) {
    json_t *o = json_object_get(c, classes[k]);
    int64_t mcpu, mem, count;
    if (!o || json_is_null(o))
      continue;
    if (!json_is_object(o))
      return dsec_bad_input(err, "%s: field `committed.%s` must be an object",
                            what, classes[k]);
    snprintf(field, sizeof field, "committed.%s.cpus", classes[k]);
    if (get_mcpu(o, "cpus", what, field, false, 0, &mcpu, err) < 0)
      return -1;
    snprintf(field, sizeof field, "committed.%s.memory_mb", classes[k]);
    if (get_int(o, "memory_mb", what, field, 0, INT64_C(1) << 40, 0, &mem,
                err) < 0)
      return -1;
    snprintf(field, sizeof field, "committed.%s.count", classes[k]);
    if (get_int(o, "count", what, field, 0, INT64_C(1) << 40, 0, &count,
                err) < 0)
      return -1;
    if (k == CLASS_LATENCY) {
      n->lat_mcpu += mcpu;
      n->lat_mem += mem;
    }
    n->all_mcpu += mcpu;
    n->all_mem += mem;
  }
  return 0;
}

static int parse_node(struct planner *p, json_t *o, const char *what,
                      struct dsec_error **err)
{
  struct pnode n = { 0 };
  _cleanup_free_ int *held = NULL;
  const char *type = NULL, *name = NULL;
  json_t *a, *v, *labels;
  int64_t mcpu, mem;
  size_t i;
  bool added;

  if (dsec_json_get_string(o, "type", false, what, &type, err) < 0)
    return -1;
  if (type && strcmp(type, "node") != 0)
    return dsec_bad_input(err, "%s: field `type` must be \"node\"", what);
  if (dsec_json_get_string(o, "node", true, what, &name, err) < 0)
    return -1;
  if (!*name || strlen(name) > 255)
    return dsec_bad_input(err, "%s: field `node` must be 1 to 255 characters",
                          what);
  if (get_mcpu(o, "cpus", what, "cpus", true, -1, &mcpu, err) < 0 ||
      get_int(o, "memory_mb", what, "memory_mb", 1, INT64_C(1) << 40, -1,
              &mem, err) < 0)
    return -1;

  a = json_object_get(o, "backends");
  if (!a || json_is_null(a))
    n.backends = BACKEND_FNCALL | BACKEND_CONTAINER;
  else if (!json_is_array(a))
    return dsec_bad_input(err, "%s: field `backends` must be an array of "
                               "strings", what);
  else
    json_array_foreach(a, i, v)
    {
      if (!json_is_string(v))
        return dsec_bad_input(err, "%s: field `backends[%zu]` must be a "
                                   "string", what, i);
      /* a backend this version does not know is one it cannot place on */
      n.backends |= backend_bit(json_string_value(v));
    }

  a = json_object_get(o, "layers");
  if (a && !json_is_null(a)) {
    if (!json_is_array(a))
      return dsec_bad_input(err, "%s: field `layers` must be an array", what);
    held = xmalloc((json_array_size(a) + 1) * sizeof *held);
    n.mounted_ids = xmalloc((json_array_size(a) + 1) * sizeof *n.mounted_ids);
    json_array_foreach(a, i, v)
    {
      const char *digest = NULL;
      int64_t size;
      char field[64];
      if (!json_is_object(v))
        return dsec_bad_input(err, "%s: field `layers[%zu]` must be an "
                                   "object", what, i);
      snprintf(field, sizeof field, "layers[%zu].size", i);
      digest = json_string_value(json_object_get(v, "digest"));
      if (!digest || !dsec_digest_valid(digest))
        return dsec_bad_input(err, "%s: field `layers[%zu].digest` must be "
                                   "a sha256:<hex> digest", what, i);
      if (get_int(v, "size", what, field, 0, INT64_C(1) << 50, 0, &size,
                  err) < 0)
        return -1;
      held[n.n_held++] = layer_id(p, digest, size);
      if (json_object_get(v, "mounted")) {
        n.mounts_known = true;
        if (json_is_true(json_object_get(v, "mounted")))
          n.mounted_ids[n.n_mounted++] = held[n.n_held - 1];
      }
    }
  }

  if (parse_committed(json_object_get(o, "committed"), what, &n, err) < 0)
    return -1;

  labels = json_object_get(o, "labels");
  if (labels && !json_is_null(labels) && !json_is_object(labels))
    return dsec_bad_input(err, "%s: field `labels` must be an object", what);
  v = json_object_get(labels, "pool");
  n.burst = json_is_string(v) && strcmp(json_string_value(v), "burst") == 0;

  strmap_intern(&p->node_names, name, (int) p->n_nodes, &added);
  if (!added)
    return dsec_bad_input(err, "%s: node `%s` is listed twice", what, name);
  n.lat_mcpu_cap = mcpu * DSEC_PLACE_LATENCY_CPU_PCT / 100;
  n.lat_mem_cap = mem * DSEC_PLACE_LATENCY_MEM_PCT / 100;
  n.all_mcpu_cap = mcpu * DSEC_PLACE_TOTAL_CPU_PCT / 100;
  n.all_mem_cap = mem * DSEC_PLACE_TOTAL_MEM_PCT / 100;
  n.lat_mcpu_inv = 1e6 / (double) n.lat_mcpu_cap;
  n.lat_mem_inv = 1e6 / (double) n.lat_mem_cap;
  n.all_mcpu_inv = 1e6 / (double) n.all_mcpu_cap;
  n.all_mem_inv = 1e6 / (double) n.all_mem_cap;
  n.held = steal_pointer(&held);
  n.name = xstrdup(name);
  n.name_json = json_quote(name);
  GROW(p->nodes, p->n_nodes, p->cap_nodes);
  p->nodes[p->n_nodes++] = n;
  return 0;
}

static int cmp_node(const void *a, const void *b)
{
  return strcmp(((const struct pnode *) a)->name,
                ((const struct pnode *) b)->name);
}

typedef int parse_fn(struct planner *p, json_t *o, const char *what,
                     struct dsec_error **err);

/* Each JSON line of PATH ("-": stdin) through PARSE, named "FILE:LINE"
 * in its errors. */
static int load_lines(struct planner *p, const char *path, parse_fn *parse,
                      struct dsec_error **err)
{
  struct lines l;
  int ret;

  if (lines_open(&l, path, err) < 0)
    return -1;
  for (;;) {
    json_t *o = NULL;
    char what[64 + 4096];
    ret = lines_next(&l, &o, err);
    if (ret <= 0)
      break;
    snprintf(what, sizeof what, "%s:%zu", l.label, l.lineno);
    ret = parse(p, o, what, err);
    json_decref(o);
    if (ret < 0)
      break;
  }
  lines_close(&l);
  return ret < 0 ? -1 : 0;
}

static int load_nodes(struct planner *p, const char *path,
                      struct dsec_error **err)
{
  if (load_lines(p, path, parse_node, err) < 0)
    return -1;
  if (p->n_nodes == 0)
    return dsec_bad_input(err, "%s: no nodes",
                          strcmp(path, "-") == 0 ? "stdin" : path);
  /* the tie-break order, whatever the order of the input */
  qsort(p->nodes, p->n_nodes, sizeof *p->nodes, cmp_node);
  return 0;
}

/* ---- requests ---------------------------------------------------------- */

static void refinfo_add(struct refinfo *r, int id)
{
  for (size_t i = 0; i < r->n; i++)
    if (r->layers[i] == id)
      return;
  r->layers = xrealloc(r->layers, (r->n + 1) * sizeof *r->layers);
  r->layers[r->n++] = id;
}

/* The layers a reference stands for, through the local store when it
 * knows the reference; a digest it does not know is taken for a layer
 * (a node may list it); anything else has unknown layers (none). */
static const struct refinfo *resolve_ref(struct planner *p, const char *ref)
{
  bool added;
  int idx = strmap_intern(&p->refs, ref, (int) p->n_refs, &added);
  struct refinfo r = { 0 };
  char digest[DSEC_DIGEST_LEN + 1];
  enum dsec_kind kind = DSEC_KIND_NONE;
  struct dsec_error *e = NULL;

  if (!added)
    return &p->refinfo[idx];
  if (p->store && dsec_store_resolve(p->store, ref, digest, &kind, &e) == 0) {
    if (kind == DSEC_KIND_IMAGE) {
      json_t *img = dsec_image_record(p->store, digest, &e);
      json_t *v;
      size_t i;
      json_array_foreach(json_object_get(img, "layers"), i, v)
      {
        const char *d = json_string_value(json_object_get(v, "digest"));
        json_t *s = json_object_get(v, "size");
        if (d)
          refinfo_add(&r, layer_id(p, d,
                                   json_is_integer(s) ? json_integer_value(s)
                                                      : -1));
      }
      json_decref(img);
    } else {
      json_t *meta = dsec_layer_meta(p->store, digest);
      json_t *s = json_object_get(meta, "size");
      refinfo_add(&r, layer_id(p, digest,
                               json_is_integer(s) ? json_integer_value(s) : -1));
      json_decref(meta);
    }
  } else if (dsec_digest_valid(ref)) {
    refinfo_add(&r, layer_id(p, ref, -1));
  }
  if (e) {
    dsec_debug("%s: layers unknown here: %s", ref, e->msg);
    dsec_error_free(e);
  }
  GROW(p->refinfo, p->n_refs, p->cap_refs);
  p->refinfo[p->n_refs++] = r;
  return &p->refinfo[idx];
}

static int parse_request(struct planner *p, json_t *o, const char *what,
                         struct dsec_error **err)
{
  struct preq r = { 0 };
  struct refinfo all = { 0 };
  const char *rid = NULL, *spread = NULL, *s;
  json_t *spec = NULL, *res, *v;
  size_t i;
  bool added;

  if (dsec_json_get_string(o, "rid", true, what, &rid, err) < 0)
    return -1;
  if (!*rid)
    return dsec_bad_input(err, "%s: field `rid` must not be empty", what);
  if (get_int(o, "count", what, "count", 1, DSEC_PLACE_COUNT_MAX, 1, &r.count,
              err) < 0 ||
      dsec_json_get_object(o, "spec", true, what, &spec, err) < 0 ||
      dsec_json_get_string(o, "spread", false, what, &spread, err) < 0 ||
      get_int(o, "spread_max", what, "spread_max", 1, DSEC_PLACE_TOTAL_MAX, 0,
              &r.spread_max, err) < 0)
    return -1;
  if (spread && !*spread)
    return dsec_bad_input(err, "%s: field `spread` must not be empty", what);
  if (r.spread_max && !spread)
    return dsec_bad_input(err, "%s: field `spread_max` needs `spread`", what);
  if (dsec_spec_validate(spec, err) < 0)
    return dsec_error_wrap(err, "%s", what);
  strmap_intern(&p->rids, rid, 0, &added);
  if (!added)
    return dsec_bad_input(err, "%s: field `rid`: `%s` is used twice", what,
                          rid);
  if (p->total + r.count > DSEC_PLACE_TOTAL_MAX)
    return dsec_bad_input(err, "%s: more than %d sandboxes in all", what,
                          DSEC_PLACE_TOTAL_MAX);

  r.backend = backend_bit(json_string_value(json_object_get(spec, "backend")));
  res = json_object_get(spec, "resources");
  s = json_string_value(json_object_get(res, "class"));
  r.cls = s && strcmp(s, "besteffort") == 0 ? CLASS_BESTEFFORT : CLASS_LATENCY;
  /* a task world is one request: the agent's resources and layers and
   * every service's, summed (its class is the agent's) */
  {
    json_t *svcs = json_object_get(spec, "services"), *m;
    size_t n = json_array_size(svcs);
    for (size_t j = 0; j <= n; j++) {
      json_t *mem = spec;
      int64_t mc;
      if (j > 0)
        mem = json_array_get(svcs, j - 1);
      res = json_object_get(mem, "resources");
      v = json_object_get(res, "cpus");
      mc = v ? (int64_t) (json_number_value(v) * 1000 + 0.5)
             : DSEC_PLACE_DEFAULT_CPUS * 1000;
      r.mcpu += mc ? mc : 1;
      v = json_object_get(res, "memory_mb");
      r.mem += v ? json_integer_value(v) : DSEC_PLACE_DEFAULT_MEMORY_MB;
      /* the image's layers, then the extra ones */
      {
        const struct refinfo *img =
          resolve_ref(p, json_string_value(json_object_get(mem, "image")));
        for (size_t k = 0; k < img->n; k++)
          refinfo_add(&all, img->layers[k]);
      }
      json_array_foreach(json_object_get(mem, "layers"), i, m)
      {
        const struct refinfo *l = resolve_ref(p, json_string_value(m));
        for (size_t k = 0; k < l->n; k++)
          refinfo_add(&all, l->layers[k]);
      }
    }
  }
  r.layers = all.layers;
  r.n_layers = all.n;

  r.group = -1;
  if (spread) {
    r.group = strmap_intern(&p->groups, spread, (int) p->n_groups, &added);
    if (added) {
      GROW(p->group_total, p->n_groups, p->cap_groups);
      p->group_total[p->n_groups++] = 0;
    }
    p->group_total[r.group] += r.count;
  }
  r.rid_json = json_quote(rid);
  p->total += r.count;
  GROW(p->reqs, p->n_reqs, p->cap_reqs);
  p->reqs[p->n_reqs++] = r;
  return 0;
}

static int load_requests(struct planner *p, const char *path,
                         struct dsec_error **err)
{
  return load_lines(p, path, parse_request, err);
}

/* ---- output ------------------------------------------------------------ */

/* Lines are gathered and written in blocks of whole lines: a reader never
 * sees half a record, and 100,000 lines do not cost 100,000 writes. */
struct outbuf {
  int fd;
  char *buf;
  size_t len, cap;
};

static int out_flush(struct outbuf *o, struct dsec_error **err)
{
  int ret = 0;
  if (o->len)
    ret = dsec_write_all(o->fd, o->buf, o->len, err);
  o->len = 0;
  if (ret < 0)
    return dsec_error_wrap(err, "cannot write the plan");
  return 0;
}

static int out_printf(struct outbuf *o, struct dsec_error **err,
                      const char *fmt, ...) _printf_(3, 4);
static int out_printf(struct outbuf *o, struct dsec_error **err,
                      const char *fmt, ...)
{
  va_list ap;
  int n;

  for (;;) {
    va_start(ap, fmt);
    n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0)
      return dsec_fail(err, errno, "cannot format the plan");
    if ((size_t) n < o->cap - o->len)
      break;
    if (o->len) {
      if (out_flush(o, err) < 0)
        return -1;
    } else {
      o->cap = (size_t) n + 1;
      o->buf = xrealloc(o->buf, o->cap);
    }
  }
  o->len += (size_t) n;
  return 0;
}

/* A score in millionths as a JSON number: 1, 0, 0.25, 0.812345. */
static void format_score(char out[16], int64_t ppm)
{
  int len;
  if (ppm >= 1000000) {
    strcpy(out, "1");
    return;
  }
  if (ppm <= 0) {
    strcpy(out, "0");
    return;
  }
  len = snprintf(out, 16, "0.%06d", (int) ppm);
  while (len > 2 && out[len - 1] == '0')
    out[--len] = '\0';
}

/* ---- planning ---------------------------------------------------------- */

static inline bool bit_test(const uint64_t *set, int i)
{
  return set[i >> 6] & (UINT64_C(1) << (i & 63));
}

static inline void bit_set(uint64_t *set, int i)
{
  set[i >> 6] |= UINT64_C(1) << (i & 63);
}

/* used / cap in millionths, at most a million.  A multiplication by the
 * reciprocal, not a division: this runs for every node and sandbox, and
 * the same input still gives the same result. */
static inline int64_t ratio_ppm(int64_t used, int64_t cap, double inv)
{
  if (used >= cap)
    return 1000000;
  return (int64_t) ((double) used * inv);
}

static bool fits_empty(const struct pnode *n, const struct preq *r)
{
  if (r->mcpu > n->all_mcpu_cap || r->mem > n->all_mem_cap)
    return false;
  if (r->cls == CLASS_LATENCY &&
      (r->mcpu > n->lat_mcpu_cap || r->mem > n->lat_mem_cap))
    return false;
  return true;
}

static bool fits_now(const struct pnode *n, const struct preq *r)
{
  if (n->all_mcpu + r->mcpu > n->all_mcpu_cap ||
      n->all_mem + r->mem > n->all_mem_cap)
    return false;
  if (r->cls == CLASS_LATENCY &&
      (n->lat_mcpu + r->mcpu > n->lat_mcpu_cap ||
       n->lat_mem + r->mem > n->lat_mem_cap))
    return false;
  return true;
}

/* The share of the class's budget in use once r is placed, in millionths. */
static int64_t load_ppm(const struct pnode *n, const struct preq *r)
{
  int64_t l = ratio_ppm(n->all_mcpu + r->mcpu, n->all_mcpu_cap,
                        n->all_mcpu_inv);
  int64_t m = ratio_ppm(n->all_mem + r->mem, n->all_mem_cap, n->all_mem_inv);
  if (m > l)
    l = m;
  if (r->cls == CLASS_LATENCY) {
    m = ratio_ppm(n->lat_mcpu + r->mcpu, n->lat_mcpu_cap, n->lat_mcpu_inv);
    if (m > l)
      l = m;
    m = ratio_ppm(n->lat_mem + r->mem, n->lat_mem_cap, n->lat_mem_inv);
    if (m > l)
      l = m;
  }
  return l;
}

enum reach {
  REACH_NONE,    /* no node offers the backend */
  REACH_BACKEND, /* ... but it is larger than each of them */
  REACH_SIZE,    /* ... fits an empty one, but all are full */
  REACH_ROOM,    /* ... has room, but the spread bound is reached */
};

static const char *const reach_reason[] = { "backend", "too_large",
                                            "capacity", "spread" };

/* A layer in a node's store that its host has not mounted weighs this
 * fraction of its size: no byte to fetch or write, but a new mount and a
 * cold page cache (containers and fncall sandboxes read the one host
 * mount of a layer), where a mounted one has its hot pages in memory. */
#define COLD_LAYER_DIV 4

static int plan_request(struct planner *p, const struct preq *r,
                        struct outbuf *o, int64_t *fetch, size_t *cand,
                        struct dsec_error **err)
{
  _cleanup_free_ int64_t *cold = xzalloc(p->n_nodes * sizeof *cold);
  size_t n_cand = 0, n_regular = 0;
  int64_t known = 0, cap = INT64_MAX;
  double known_inv;
  enum reach reach = REACH_NONE;

  for (size_t k = 0; k < r->n_layers; k++)
    if (p->layer_size[r->layers[k]] > 0)
      known += p->layer_size[r->layers[k]];

  known_inv = known ? 1e6 / (double) known : 0;

  /* candidates: the backend, and room when empty; regular nodes first */
  for (int burst = 0; burst < 2; burst++)
    for (size_t i = 0; i < p->n_nodes; i++) {
      struct pnode *n = &p->nodes[i];
      if (n->burst != (bool) burst || !(n->backends & r->backend))
        continue;
      if (reach < REACH_BACKEND)
        reach = REACH_BACKEND;
      if (!fits_empty(n, r))
        continue;
      reach = REACH_SIZE;
      cand[n_cand++] = i;
      n_regular += !burst;
      fetch[i] = 0;
      cold[i] = 0;
      for (size_t k = 0; k < r->n_layers; k++) {
        int id = r->layers[k];
        if (p->layer_size[id] > 0 && !bit_test(n->cache, id))
          fetch[i] += p->layer_size[id];
        else if (p->layer_size[id] > 0 && n->mounts_known &&
                 !bit_test(n->mounted, id))
          cold[i] += p->layer_size[id] / COLD_LAYER_DIV;
      }
    }

  if (r->group >= 0) {
    int64_t total = p->group_total[r->group];
    int64_t spread_nodes = n_regular ? (int64_t) n_regular
                                     : (int64_t) n_cand;
    if (r->spread_max)
      cap = r->spread_max;
    else if (spread_nodes)
      cap = (total + spread_nodes - 1) / spread_nodes;
    if (cap < 1)
      cap = 1;
  }

  for (int64_t idx = 0; idx < r->count; idx++) {
    size_t best = SIZE_MAX;
    int64_t best_score = -1;
    enum reach got = reach;
    struct pnode *n;
    char score[16];

    for (size_t c = 0; c < n_cand; c++) {
      size_t i = cand[c];
      int64_t cached, sc;

      n = &p->nodes[i];
      /* a burst node only when no regular node could take it */
      if (c == n_regular && best != SIZE_MAX)
        break;
      if (!fits_now(n, r))
        continue;
      if (got < REACH_ROOM)
        got = REACH_ROOM;
      if (r->group >= 0 &&
          countmap_get(&p->spread,
                       (uint64_t) r->group * p->n_nodes + i) >= cap)
        continue;
      cached = known ? (int64_t) ((double) (known - fetch[i] - cold[i]) *
                                  known_inv)
                     : 1000000;
      sc = (6 * cached + 4 * (1000000 - load_ppm(n, r))) / 10;
      if (sc > best_score) { /* strict: ties keep the first name */
        best_score = sc;
        best = i;
      }
    }

    if (best == SIZE_MAX) {
      /* nothing changed: the rest of the request has no place either */
      for (; idx < r->count; idx++) {
        if (out_printf(o, err,
                       "{\"type\":\"unplaced\",\"rid\":%s,\"index\":%" PRId64
                       ",\"reason\":\"%s\"}\n",
                       r->rid_json, idx, reach_reason[got]) < 0)
          return -1;
        if (o->len > (1u << 16) && out_flush(o, err) < 0)
          return -1;
      }
      break;
    }

    n = &p->nodes[best];
    format_score(score, best_score);
    if (out_printf(o, err,
                   "{\"type\":\"assignment\",\"rid\":%s,\"index\":%" PRId64
                   ",\"node\":%s,\"score\":%s,\"fetch_bytes\":%" PRId64 "}\n",
                   r->rid_json, idx, n->name_json, score, fetch[best]) < 0)
      return -1;
    n->all_mcpu += r->mcpu;
    n->all_mem += r->mem;
    if (r->cls == CLASS_LATENCY) {
      n->lat_mcpu += r->mcpu;
      n->lat_mem += r->mem;
    }
    if (r->group >= 0)
      countmap_add(&p->spread, (uint64_t) r->group * p->n_nodes + best, 1);
    /* the node fetches the layers once: later sandboxes find them */
    for (size_t k = 0; k < r->n_layers; k++) {
      bit_set(n->cache, r->layers[k]);
      bit_set(n->mounted, r->layers[k]);
    }
    fetch[best] = 0;
    cold[best] = 0;
    if (o->len > (1u << 16) && out_flush(o, err) < 0)
      return -1;
  }
  return 0;
}

/* The local store, only when it exists: planning never creates one. */
static int open_store_if_any(struct dsec_store **out, struct dsec_error **err)
{
  const char *env = getenv("DSEC_STORE");
  _cleanup_free_ char *root = NULL;
  _cleanup_free_ char *path = NULL;
  struct stat st;

  *out = NULL;
  if (env && *env)
    path = xstrdup(env);
  else {
    root = dsec_root_dir();
    path = xasprintf("%s/store", root);
  }
  if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
    return 0;
  return dsec_store_open(out, err);
}

int dsec_place_plan(const char *nodes_path, const char *requests_path,
                    int out_fd, struct dsec_error **err)
{
  struct planner p = { 0 };
  struct outbuf o = { .fd = out_fd };
  _cleanup_free_ int64_t *fetch = NULL;
  _cleanup_free_ size_t *cand = NULL;
  size_t words;
  int ret = -1;

  if (strcmp(nodes_path, "-") == 0 && strcmp(requests_path, "-") == 0)
    return dsec_error_set(err, DSEC_EXIT_USAGE, 0,
                          "the nodes and the requests cannot both be stdin");
  if (open_store_if_any(&p.store, err) < 0 ||
      load_nodes(&p, nodes_path, err) < 0 ||
      load_requests(&p, requests_path, err) < 0)
    goto out;

  /* every layer id is known now: each node's cache becomes a bitset */
  words = (p.n_layers + 63) / 64 + 1;
  for (size_t i = 0; i < p.n_nodes; i++) {
    struct pnode *n = &p.nodes[i];
    n->cache = xzalloc(words * sizeof *n->cache);
    for (size_t k = 0; k < n->n_held; k++)
      bit_set(n->cache, n->held[k]);
    n->mounted = xzalloc(words * sizeof *n->mounted);
    for (size_t k = 0; k < n->n_mounted; k++)
      bit_set(n->mounted, n->mounted_ids[k]);
  }
  fetch = xzalloc(p.n_nodes * sizeof *fetch);
  cand = xmalloc(p.n_nodes * sizeof *cand);
  o.cap = 1 << 17;
  o.buf = xmalloc(o.cap);
  for (size_t i = 0; i < p.n_reqs; i++)
    if (plan_request(&p, &p.reqs[i], &o, fetch, cand, err) < 0)
      goto out;
  if (out_flush(&o, err) < 0)
    goto out;
  ret = 0;
out:
  free(o.buf);
  planner_free(&p);
  return ret;
}

/* ---- probe ------------------------------------------------------------- */

/* Child of the container check: exits 0 when an unprivileged user
 * namespace with a mount namespace can mount an overlay, which is what
 * dsec-run's container and fncall backends need, as root or not. */
static int check_container_child(void)
{
  char map[64];
  int fd;
  uid_t uid = getuid();
  gid_t gid = getgid();
  static const char *const dirs[] = { "/tmp/l", "/tmp/u", "/tmp/w", "/tmp/m" };

  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
    return 10;
  fd = open("/proc/self/setgroups", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, "deny", 4) != 4)
      return 11;
    close(fd);
  }
  snprintf(map, sizeof map, "0 %u 1", (unsigned) uid);
  fd = open("/proc/self/uid_map", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, map, strlen(map)) != (ssize_t) strlen(map))
    return 12;
  close(fd);
  snprintf(map, sizeof map, "0 %u 1", (unsigned) gid);
  fd = open("/proc/self/gid_map", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, map, strlen(map)) != (ssize_t) strlen(map))
    return 13;
  close(fd);
  if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0)
    return 14;
  /* a tmpfs over /tmp, private to this namespace, holds the overlay */
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k") < 0)
    return 15;
  for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
    if (mkdir(dirs[i], 0755) < 0)
      return 16;
  if (mount("overlay", "/tmp/m", "overlay", 0,
            "lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w") < 0)
    return 17;
  return 0;
}

static bool container_works(void)
{
  int status;
  pid_t pid = fork();

  if (pid < 0)
    return false;
  if (pid == 0)
    _exit(check_container_child());
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return false;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    dsec_debug("no container backend: user namespace and overlay check "
               "failed at step %d",
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return false;
  }
  return true;
}

static int64_t mem_total_mb(void)
{
  _cleanup_fclose_ FILE *f = fopen("/proc/meminfo", "re");
  char line[256];
  unsigned long long kb;

  if (!f)
    return 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
      return (int64_t) (kb / 1024);
  return 0;
}

/* $DSEC_ROOT/node.json: {"labels":{...}, "cpus":N, "memory_mb":N}, all
 * optional; a missing file is an empty one.  *out is a new ref. */
static int read_node_json(json_t **out, struct dsec_error **err)
{
  _cleanup_free_ char *root = dsec_root_dir();
  _cleanup_free_ char *path = xasprintf("%s/node.json", root);
  _cleanup_free_ char *buf = NULL;
  _cleanup_json_ json_t *j = NULL;
  struct dsec_error *e = NULL;
  json_t *labels;
  size_t len;
  int64_t unused;

  buf = dsec_read_file_at(AT_FDCWD, path, 1 << 20, &len, &e);
  if (!buf) {
    if (e && e->errnum == ENOENT) {
      dsec_error_free(e);
      *out = json_object();
      return 0;
    }
    *err = e;
    return -1;
  }
  j = dsec_json_parse(buf, len, path, err);
  if (!j)
    return -1;
  if (!json_is_object(j))
    return dsec_bad_input(err, "%s: not a JSON object", path);
  labels = json_object_get(j, "labels");
  if (labels && !json_is_null(labels) && !json_is_object(labels))
    return dsec_bad_input(err, "%s: field `labels` must be an object", path);
  if (get_mcpu(j, "cpus", path, "cpus", true, 0, &unused, err) < 0 ||
      get_int(j, "memory_mb", path, "memory_mb", 1, INT64_C(1) << 40, 0,
              &unused, err) < 0)
    return -1;
  *out = steal_pointer(&j);
  return 0;
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The layers materialised in the store (rootfs/ or layer.erofs next to
 * meta.json), sorted by digest.  No store, no layers. */
static json_t *probe_layers(struct dsec_error **err)
{
  const char *env = getenv("DSEC_STORE");
  _cleanup_free_ char *root = NULL;
  _cleanup_free_ char *dir = NULL;
  _cleanup_closedir_ DIR *d = NULL;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  _cleanup_json_ json_t *mounted = NULL;
  json_t *out;
  int dfd;

  if (env && *env) {
    if (env[0] != '/') {
      dsec_error_set(err, DSEC_EXIT_USAGE, 0,
                     "store path must be absolute: %s", env);
      return NULL;
    }
    dir = xasprintf("%s/layers", env);
  } else {
    root = dsec_root_dir();
    dir = xasprintf("%s/store/layers", root);
  }
  out = json_array();
  {
    /* the layers this host has mounted (containers and fncall sandboxes
     * run from those mounts) */
    _cleanup_free_ char *run = dsec_run_dir();
    _cleanup_json_ json_t *ms = dsec_layer_mounts_list(run);
    json_t *m;
    size_t k;
    mounted = json_object();
    json_array_foreach(ms, k, m)
    {
      const char *dg = json_string_value(json_object_get(m, "digest"));
      if (dg)
        json_object_set_new(mounted, dg, json_true());
    }
  }
  d = opendir(dir);
  if (!d) {
    if (errno == ENOENT)
      return out;
    json_decref(out);
    dsec_fail(err, errno, "cannot read %s", dir);
    return NULL;
  }
  dfd = dirfd(d);
  while ((de = readdir(d))) {
    if (strlen(de->d_name) != DSEC_SHA256_HEX_LEN ||
        strspn(de->d_name, "0123456789abcdef") != DSEC_SHA256_HEX_LEN)
      continue;
    GROW(names, n, cap);
    names[n++] = xstrdup(de->d_name);
  }
  if (n)
    qsort(names, n, sizeof *names, cmp_str);
  for (size_t i = 0; i < n; i++) {
    _cleanup_free_ char *meta_path = xasprintf("%s/meta.json", names[i]);
    _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", names[i]);
    _cleanup_free_ char *erofs = xasprintf("%s/layer.erofs", names[i]);
    _cleanup_free_ char *buf = NULL;
    json_t *meta, *size;
    size_t len;

    if (faccessat(dfd, rootfs, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
        faccessat(dfd, erofs, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    buf = dsec_read_file_at(dfd, meta_path, 1 << 20, &len, NULL);
    meta = buf ? json_loadb(buf, len, 0, NULL) : NULL;
    size = json_object_get(meta, "size");
    if (json_is_integer(size)) {
      json_t *l = json_pack("{s:s+, s:I}", "digest", "sha256:", names[i],
                            "size", json_integer_value(size));
      json_object_set_new(
        l, "mounted",
        json_boolean(json_object_get(mounted, json_string_value(json_object_get(
                                                l, "digest")))));
      json_array_append_new(out, l);
    }
    json_decref(meta);
  }
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
  return out;
}

static json_t *cpus_json(int64_t mcpu)
{
  if (mcpu % 1000 == 0)
    return json_integer(mcpu / 1000);
  return json_real((double) mcpu / 1000);
}

/* What the live sandboxes (creating, running or stopping, with their
 * supervisor alive) have committed, per class, from their specs. */
static json_t *probe_committed(struct dsec_error **err)
{
  _cleanup_json_ json_t *ids = dsec_sandbox_list(err);
  int64_t mcpu[2] = { 0, 0 }, mem[2] = { 0, 0 }, count[2] = { 0, 0 };
  json_t *v;
  size_t i;

  if (!ids)
    return NULL;
  json_array_foreach(ids, i, v)
  {
    const char *id = json_string_value(v);
    _cleanup_free_ char *dir = dsec_sandbox_dir(id);
    _cleanup_free_ char *buf = NULL;
    struct dsec_error *e = NULL;
    json_t *st, *spec, *res, *x;
    const char *state, *cls;
    size_t len;
    int k;

    /* a sandbox being made or removed meanwhile may lack its files */
    st = dsec_sandbox_status(id, &e);
    state = json_string_value(json_object_get(st, "state"));
    if (!state || (strcmp(state, "running") != 0 &&
                   strcmp(state, "creating") != 0 &&
                   strcmp(state, "stopping") != 0)) {
      json_decref(st);
      dsec_error_free(e);
      continue;
    }
    json_decref(st);
    {
      _cleanup_free_ char *path = xasprintf("%s/spec.json", dir);
      buf = dsec_read_file_at(AT_FDCWD, path, DSEC_SPEC_MAX, &len, NULL);
    }
    spec = buf ? json_loadb(buf, len, 0, NULL) : NULL;
    if (!spec)
      continue;
    res = json_object_get(spec, "resources");
    cls = json_string_value(json_object_get(res, "class"));
    k = cls && strcmp(cls, "besteffort") == 0 ? CLASS_BESTEFFORT
                                               : CLASS_LATENCY;
    x = json_object_get(res, "cpus");
    mcpu[k] += json_is_number(x) ? (int64_t) (json_number_value(x) * 1000 + 0.5)
                                 : DSEC_PLACE_DEFAULT_CPUS * 1000;
    x = json_object_get(res, "memory_mb");
    mem[k] += json_is_integer(x) ? json_integer_value(x)
                                 : DSEC_PLACE_DEFAULT_MEMORY_MB;
    count[k]++;
    json_decref(spec);
  }
  return json_pack("{s:{s:o, s:I, s:I}, s:{s:o, s:I, s:I}}", "latency",
                   "cpus", cpus_json(mcpu[0]), "memory_mb", (json_int_t) mem[0],
                   "count", (json_int_t) count[0], "besteffort", "cpus",
                   cpus_json(mcpu[1]), "memory_mb", (json_int_t) mem[1],
                   "count", (json_int_t) count[1]);
}

json_t *dsec_place_probe(struct dsec_error **err)
{
  _cleanup_json_ json_t *conf = NULL;
  _cleanup_json_ json_t *layers = NULL;
  _cleanup_json_ json_t *committed = NULL;
  const char *name = getenv("SLURMD_NODENAME");
  json_t *backends, *v, *labels;
  const char *accel = "none";
  struct utsname u;
  int64_t mcpu, mem;
  long n;

  if (read_node_json(&conf, err) < 0)
    return NULL;
  if (!name || !*name) {
    if (uname(&u) < 0) {
      dsec_fail(err, errno, "cannot get the host name");
      return NULL;
    }
    name = u.nodename;
  }

  n = sysconf(_SC_NPROCESSORS_ONLN);
  mcpu = (n > 0 ? n : 1) * 1000;
  v = json_object_get(conf, "cpus");
  if (json_is_number(v))
    mcpu = (int64_t) (json_number_value(v) * 1000 + 0.5);
  mem = mem_total_mb();
  v = json_object_get(conf, "memory_mb");
  if (v && !json_is_null(v))
    mem = json_is_integer(v) ? json_integer_value(v)
                             : (int64_t) json_number_value(v);

  layers = probe_layers(err);
  if (!layers)
    return NULL;
  committed = probe_committed(err);
  if (!committed)
    return NULL;

  backends = json_array();
  if (container_works()) {
    json_array_append_new(backends, json_string("fncall"));
    json_array_append_new(backends, json_string("container"));
  }
  if (dsec_vm_available()) {
    /* what dsec-vm would use: KVM only when it works */
    accel = dsec_vm_accelerator();
    json_array_append_new(backends, json_string("microvm"));
    json_array_append_new(backends, json_string("vm"));
  }

  labels = json_object_get(conf, "labels");
  return json_pack("{s:s, s:s, s:o, s:I, s:o, s:s, s:O, s:O, s:o}", "type",
                   "node", "node", name, "cpus", cpus_json(mcpu), "memory_mb",
                   (json_int_t) mem, "backends", backends, "accel", accel,
                   "layers", layers, "committed", committed, "labels",
                   labels ? json_incref(labels) : json_object());
}
