/* Unit tests for libcommon/refs.c: the name and version rules, splitting
 * refs, parsing registry references, canonical source references, refs
 * in a real store, and resolving what a user typed. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "refs.h"
#include "tap.h"

static const char *tmp;
static char *tmp_real; /* realpath of tmp */

/* s with control and non-ASCII bytes as \xNN, for a one-line test name
 * (static buffer). */
static const char *printable(const char *s)
{
  static char buf[1100];
  size_t n = 0;

  for (; *s && n + 5 < sizeof buf; s++) {
    unsigned char c = (unsigned char) *s;
    if (c < 0x20 || c >= 0x7f)
      n += (size_t) snprintf(buf + n, sizeof buf - n, "\\x%02x", c);
    else
      buf[n++] = (char) c;
  }
  buf[n] = '\0';
  return buf;
}

/* ---- names and versions ---- */

static void test_name_rules(void)
{
  static const char *const good[] = {
    "python", "task/django-1234", "127.0.0.1:5000/x", "localhost:5000/a/b",
    "a_b", "_x", "A.b-c", "x/y.z/w", "9", "registry.example.com/ns/app",
  };
  static const char *const bad[] = {
    "", ".", "..", "/abs", "a//b", "a/", "-x", "a/-x", "a/.hidden",
    "x/../y", "a:b", "a/b:c", "host:/x", ":5000/x", "a:b:c/x", "a b",
    "a@b", "caf\xc3\xa9", "a\\b", "a\nb",
  };
  char name[300];

  for (size_t i = 0; i < ARRAY_SIZE(good); i++)
    ok(dsec_ref_name_valid(good[i]), "name \"%s\" is valid", good[i]);
  for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
    ok(!dsec_ref_name_valid(bad[i]), "name \"%s\" is invalid",
       printable(bad[i]));

  memset(name, 'n', 255);
  name[255] = '\0';
  ok(dsec_ref_name_valid(name), "a 255-character name is valid");
  name[255] = 'n';
  name[256] = '\0';
  ok(!dsec_ref_name_valid(name), "a 256-character name is invalid");
}

static void test_version_rules(void)
{
  static const char *const good[] = {
    "latest", "v2", "3.11", "_x", "1.0-rc.1", "A", "sha-1",
  };
  static const char *const bad[] = {
    "", ".x", "-x", "a/b", "a:b", "a@b", "a b", "..",
  };
  char v[200];

  for (size_t i = 0; i < ARRAY_SIZE(good); i++)
    ok(dsec_ref_version_valid(good[i]), "version \"%s\" is valid", good[i]);
  for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
    ok(!dsec_ref_version_valid(bad[i]), "version \"%s\" is invalid", bad[i]);
  memset(v, 'v', 128);
  v[128] = '\0';
  ok(dsec_ref_version_valid(v), "a 128-character version is valid");
  v[128] = 'v';
  v[129] = '\0';
  ok(!dsec_ref_version_valid(v), "a 129-character version is invalid");
}

/* ---- dsec_ref_split ---- */

static void check_split(const char *ref, const char *name, const char *version)
{
  struct dsec_error *err = NULL;
  char *n = NULL, *v = NULL;
  int ret = dsec_ref_split(ref, &n, &v, &err);

  ok(ret == 0 && n && v && strcmp(n, name) == 0 && strcmp(v, version) == 0,
     "split \"%s\" -> \"%s\" @ \"%s\"", ref, name, version);
  if (ret == 0 && (strcmp(n, name) != 0 || strcmp(v, version) != 0))
    diag("  got \"%s\" @ \"%s\"", n, v);
  if (err)
    diag("  %s", err->msg);
  free(n);
  free(v);
  dsec_error_free(err);
}

static void check_split_fails(const char *ref)
{
  struct dsec_error *err = NULL;
  char *n = NULL, *v = NULL;
  int ret = dsec_ref_split(ref, &n, &v, &err);

  ok(ret == -1 && err && err->status == DSEC_EXIT_INPUT && !n && !v,
     "split \"%s\" is bad input, outputs untouched", ref);
  free(n);
  free(v);
  dsec_error_free(err);
}

static void test_split(void)
{
  check_split("python@3.11", "python", "3.11");
  check_split("task/django-1234@v2", "task/django-1234", "v2");
  check_split("python:3.11", "python", "3.11");
  check_split("python", "python", "latest");
  check_split("127.0.0.1:5000/repo:tag", "127.0.0.1:5000/repo", "tag");
  check_split("127.0.0.1:5000/repo", "127.0.0.1:5000/repo", "latest");
  check_split("127.0.0.1:5000/repo@v1", "127.0.0.1:5000/repo", "v1");

  check_split_fails("python@");
  check_split_fails("@v1");
  check_split_fails("a@b@c");
  check_split_fails("a@b/c");
  check_split_fails("../x@v1");
  check_split_fails("/abs:v1");
  check_split_fails("a:b:c");
  check_split_fails("x:.bad");
  check_split_fails("");
}

/* ---- dsec_image_ref_parse ---- */

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void check_image(const char *s, const char *registry,
                        const char *repository, const char *tag,
                        const char *digest)
{
  struct dsec_error *err = NULL;
  struct dsec_image_ref r = { 0 };
  int ret = dsec_image_ref_parse(s, &r, &err);

  if (!ok(ret == 0, "image ref \"%s\" parses", s)) {
    diag("  %s", err ? err->msg : "(no error)");
    dsec_error_free(err);
    return;
  }
  ok(r.registry && strcmp(r.registry, registry) == 0 && r.repository &&
     strcmp(r.repository, repository) == 0 &&
     (tag ? r.tag && strcmp(r.tag, tag) == 0 : !r.tag) &&
     (digest ? r.digest && strcmp(r.digest, digest) == 0 : !r.digest),
     "... registry %s, repository %s, tag %s, digest %s", registry,
     repository, tag ? tag : "NULL", digest ? "set" : "NULL");
  dsec_image_ref_clear(&r);
}

static void check_image_fails(const char *s, const char *why)
{
  struct dsec_error *err = NULL;
  struct dsec_image_ref r = { 0 };

  ok(dsec_image_ref_parse(s, &r, &err) == -1 && err &&
     err->status == DSEC_EXIT_INPUT,
     "image ref \"%s\" is bad input (%s)", s, why);
  if (err)
    diag("  %s", err->msg);
  dsec_error_free(err);
}

static void test_image_ref(void)
{
  struct dsec_image_ref r = { 0 };
  struct dsec_error *err = NULL;
  char *name;

  check_image("busybox", "docker.io", "library/busybox", "latest", NULL);
  check_image("busybox:1.36", "docker.io", "library/busybox", "1.36", NULL);
  check_image("user/app:v1", "docker.io", "user/app", "v1", NULL);
  check_image("docker.io/busybox", "docker.io", "library/busybox", "latest",
              NULL);
  check_image("quay.io/org/app", "quay.io", "org/app", "latest", NULL);
  check_image("127.0.0.1:5000/x:tag", "127.0.0.1:5000", "x", "tag", NULL);
  check_image("127.0.0.1:5000/x", "127.0.0.1:5000", "x", "latest", NULL);
  check_image("localhost/x", "localhost", "x", "latest", NULL);
  check_image("localhost:5000/ns/x", "localhost:5000", "ns/x", "latest", NULL);
  check_image("busybox@sha256:" HEX64, "docker.io", "library/busybox", NULL,
              "sha256:" HEX64);
  check_image("busybox:1.36@sha256:" HEX64, "docker.io", "library/busybox",
              "1.36", "sha256:" HEX64);

  check_image_fails("Busybox", "uppercase");
  check_image_fails("quay.io/Org/app", "uppercase repository");
  check_image_fails("busybox@sha256:0123", "short digest");
  check_image_fails("busybox@sha256:" "0123456789ABCDEF0123456789ABCDEF"
                    "0123456789ABCDEF0123456789ABCDEF",
                    "uppercase digest");
  check_image_fails("busybox:", "empty tag");
  check_image_fails("busybox:-x", "bad tag");
  check_image_fails("a//b", "empty component");
  check_image_fails("", "empty");

  dsec_image_ref_parse("quay.io/org/app:1", &r, &err);
  name = r.registry ? dsec_image_ref_name(&r) : NULL;
  is_str(name, "quay.io/org/app", "image_ref_name is REGISTRY/REPOSITORY");
  free(name);
  dsec_image_ref_clear(&r);
  ok(!r.registry && !r.repository && !r.tag && !r.digest,
     "image_ref_clear empties the struct");
  dsec_error_free(err);
}

/* ---- dsec_source_canonical ---- */

static void check_canonical(const char *source, const char *want)
{
  struct dsec_error *err = NULL;
  char *got = dsec_source_canonical(source, &err);

  is_str(got, want, "canonical \"%s\"", source);
  if (err)
    diag("  %s", err->msg);
  free(got);
  dsec_error_free(err);
}

static void test_source_canonical(void)
{
  struct dsec_error *err = NULL;
  char *want, *dir;

  if (mkdir("layout", 0755) < 0 ||
      mkdir("with:colon", 0755) < 0)
    bail_out("cannot prepare %s", tmp);
  if (close(open("img.tar", O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0)
    bail_out("cannot create img.tar");

  check_canonical("oci:/nonexistent/dir:v1", "oci:/nonexistent/dir:v1");
  check_canonical("oci:/nonexistent/dir", "oci:/nonexistent/dir");
  dir = xasprintf("%s/layout", tmp);
  want = xasprintf("oci:%s/layout", tmp_real);
  {
    char *src = xasprintf("oci:%s", dir);
    check_canonical(src, want);
    free(src);
  }
  check_canonical("oci:layout", want);
  free(want);
  want = xasprintf("oci:%s/layout:v2", tmp_real);
  check_canonical("oci:./layout:v2", want);
  free(want);
  want = xasprintf("oci:%s/with:colon", tmp_real);
  check_canonical("oci:with:colon", want);
  free(want);
  want = xasprintf("oci:%s/missing:v3", tmp_real);
  check_canonical("oci:missing:v3", want);
  free(want);
  free(dir);

  want = xasprintf("tar:%s/img.tar", tmp_real);
  check_canonical("tar:img.tar", want);
  check_canonical("tar:./layout/../img.tar", want);
  free(want);
  check_canonical("tar:/abs/rootfs.tar.gz", "tar:/abs/rootfs.tar.gz");
  want = xasprintf("docker-archive:%s/img.tar", tmp_real);
  check_canonical("docker-archive:img.tar", want);
  free(want);

  check_canonical("busybox", "docker.io/library/busybox:latest");
  check_canonical("busybox:1.36", "docker.io/library/busybox:1.36");
  check_canonical("busybox@sha256:" HEX64,
                  "docker.io/library/busybox@sha256:" HEX64);
  check_canonical("127.0.0.1:5000/x:1", "127.0.0.1:5000/x:1");
  ok(dsec_source_canonical("Busybox", &err) == NULL && err &&
     err->status == DSEC_EXIT_INPUT,
     "canonical of an invalid registry reference is bad input");
  dsec_error_free(err);
}

/* ---- refs in a store ---- */

static struct dsec_store *open_store(void)
{
  struct dsec_error *err = NULL;
  struct dsec_store *s = NULL;
  char *path = xasprintf("%s/store", tmp);

  setenv("DSEC_STORE", path, 1);
  free(path);
  if (dsec_store_open(&s, &err) < 0)
    bail_out("cannot open the store: %s", err->msg);
  return s;
}

static void digest_of(const char *text, char d[DSEC_DIGEST_LEN + 1])
{
  dsec_sha256_buf(text, strlen(text), d);
}

static void check_get(struct dsec_store *s, const char *name,
                      const char *version, const char *digest,
                      enum dsec_kind kind)
{
  struct dsec_error *err = NULL;
  char d[DSEC_DIGEST_LEN + 1] = "";
  enum dsec_kind k = DSEC_KIND_NONE;
  int ret = dsec_ref_get(s, name, version, d, &k, &err);

  if (!digest) {
    is_int(ret, 0, "ref_get %s@%s: no such ref", name, version);
  } else {
    is_int(ret, 1, "ref_get %s@%s finds it", name, version);
    ok(strcmp(d, digest) == 0 && k == kind, "... with its digest and kind %s",
       dsec_kind_name(kind));
  }
  dsec_error_free(err);
}

static void check_set_fails(struct dsec_store *s, const char *name,
                            const char *version, const char *digest,
                            int status, const char *what)
{
  struct dsec_error *err = NULL;

  is_int(dsec_ref_set(s, name, version, DSEC_KIND_IMAGE, digest, &err), -1,
         "ref_set %s@%s fails (%s)", name, version, what);
  is_int(err ? err->status : -1, status, "... with status %d", status);
  if (err)
    diag("  %s", err->msg);
  dsec_error_free(err);
}

static void test_ref_set_get(struct dsec_store *s, const char *d1,
                             const char *d2)
{
  struct dsec_error *err = NULL;
  json_t *rec;
  const char *created;
  char *path;

  is_int(dsec_ref_set(s, "python", "3.11", DSEC_KIND_LAYER, d1, &err), 0,
         "ref_set python@3.11");
  ok(faccessat(s->refs_fd, "python/3.11", F_OK, 0) == 0,
     "... stored as refs/python/3.11");
  path = xasprintf("%s/store/refs/python/3.11", tmp);
  rec = dsec_json_load_path(path, 4096, &err);
  free(path);
  ok(rec && strcmp(json_string_value(json_object_get(rec, "type")), "ref") == 0 &&
     strcmp(json_string_value(json_object_get(rec, "kind")), "layer") == 0 &&
     strcmp(json_string_value(json_object_get(rec, "digest")), d1) == 0,
     "... a JSON record with type, kind and digest");
  created = rec ? json_string_value(json_object_get(rec, "created")) : NULL;
  ok(created && strlen(created) == 24 && created[23] == 'Z',
     "... and an RFC 3339 UTC creation time");
  json_decref(rec);
  check_get(s, "python", "3.11", d1, DSEC_KIND_LAYER);

  dsec_ref_set(s, "python", "3.11", DSEC_KIND_IMAGE, d2, &err);
  check_get(s, "python", "3.11", d2, DSEC_KIND_IMAGE);
  ok(dsec_ref_set(s, "task/django-1234", "v2", DSEC_KIND_LAYER, d1, &err) == 0 &&
     dsec_ref_set(s, "127.0.0.1:5000/x", "latest", DSEC_KIND_IMAGE, d1,
                  &err) == 0 &&
     dsec_ref_set(s, "python", "3.9", DSEC_KIND_LAYER, d2, &err) == 0,
     "ref_set of nested and registry names");
  check_get(s, "task/django-1234", "v2", d1, DSEC_KIND_LAYER);
  check_get(s, "127.0.0.1:5000/x", "latest", d1, DSEC_KIND_IMAGE);
  check_get(s, "python", "3.12", NULL, 0);
  check_get(s, "nobody", "1", NULL, 0);
  check_get(s, "task", "django-1234", NULL, 0);
  check_get(s, "../store/refs/python", "3.11", NULL, 0);
  ok(err == NULL, "no error so far");

  check_set_fails(s, "..", "v1", d1, DSEC_EXIT_INPUT, "invalid name");
  check_set_fails(s, "python", ".v", d1, DSEC_EXIT_INPUT, "invalid version");
  check_set_fails(s, "python/3.11", "x", d1, DSEC_EXIT_INPUT,
                  "the name is already a version");
  check_set_fails(s, "bad-digest", "v1", "sha256:nothex", DSEC_EXIT_INPUT,
                  "a digest ref_get would refuse");
}

static void test_ref_corrupt(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  char d[DSEC_DIGEST_LEN + 1];

  dsec_mkdir_p(s->refs_fd, "broken", 0755, &err);
  dsec_write_file_atomic(s->refs_fd, "broken/v1", "{\"digest\": 1,", 13, 0644,
                         &err);
  is_int(dsec_ref_get(s, "broken", "v1", d, NULL, &err), -1,
         "ref_get of a corrupt ref fails");
  is_int(err ? err->status : -1, DSEC_EXIT_INPUT, "... as bad input");
  dsec_error_free(err);
}

static void test_ref_list(struct dsec_store *s)
{
  static const char *const want[] = {
    "127.0.0.1:5000/x@latest", "python@3.11", "python@3.9",
    "task/django-1234@v2",
  };
  struct dsec_error *err = NULL;
  json_t *list, *rec;
  size_t i;
  char got[512] = "";
  int fd;

  /* leftovers that are not refs: a temp file and a corrupt file */
  fd = openat(s->refs_fd, "python/3.11.tmp-0123", O_WRONLY | O_CREAT, 0644);
  if (fd >= 0)
    close(fd);

  list = dsec_ref_list(s, &err);
  ok(json_is_array(list), "ref_list gives an array");
  json_array_foreach(list, i, rec)
  {
    size_t n = strlen(got);
    snprintf(got + n, sizeof got - n, "%s%s@%s", n ? " " : "",
             json_string_value(json_object_get(rec, "name")),
             json_string_value(json_object_get(rec, "version")));
  }
  is_int(json_array_size(list), ARRAY_SIZE(want),
         "... of every valid ref, skipping temp and corrupt files");
  for (i = 0; i < ARRAY_SIZE(want) && i < json_array_size(list); i++) {
    char *nv;
    rec = json_array_get(list, i);
    nv = xasprintf("%s@%s", json_string_value(json_object_get(rec, "name")),
                   json_string_value(json_object_get(rec, "version")));
    is_str(nv, want[i], "ref_list[%zu] in name, version order", i);
    free(nv);
  }
  if (json_array_size(list) != ARRAY_SIZE(want))
    diag("  got: %s", got);
  rec = json_array_get(list, 0);
  is_str(json_string_value(json_object_get(rec, "type")), "ref",
         "records have type \"ref\"");
  json_decref(list);
  unlinkat(s->refs_fd, "python/3.11.tmp-0123", 0);
  dsec_error_free(err);
}

static void test_ref_rm(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  int fd;

  is_int(dsec_ref_rm(s, "python", "3.9", &err), 1, "ref_rm python@3.9");
  check_get(s, "python", "3.9", NULL, 0);
  is_int(dsec_ref_rm(s, "python", "3.9", &err), 0, "ref_rm again finds none");
  ok(faccessat(s->refs_fd, "python/3.11", F_OK, 0) == 0,
     "... python@3.11 is still there");
  is_int(dsec_ref_rm(s, "task/django-1234", "v2", &err), 1,
         "ref_rm task/django-1234@v2");
  ok(faccessat(s->refs_fd, "task", F_OK, AT_SYMLINK_NOFOLLOW) < 0,
     "... and its now empty name directories");
  is_int(dsec_ref_rm(s, "task", "django-1234", &err), 0,
         "ref_rm of a name's directory is not a ref");
  ok(err == NULL, "no error so far");

  /* an invalid name must not reach outside refs/ */
  if (mkdirat(s->fd, "outside", 0755) < 0)
    bail_out("mkdir outside");
  fd = openat(s->fd, "outside/keep", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    bail_out("create outside/keep");
  close(fd);
  ok(dsec_ref_rm(s, "../outside", "keep", &err) <= 0,
     "ref_rm of an invalid name removes nothing");
  ok(faccessat(s->fd, "outside/keep", F_OK, 0) == 0,
     "... a file outside refs/ survives");
  dsec_error_free(err);
}

/* ---- dsec_store_resolve ---- */

static void add_image(struct dsec_store *s, const char *hex)
{
  char *name = xasprintf("%s.json", hex);
  struct dsec_error *err = NULL;
  if (dsec_write_file_atomic(s->images_fd, name, "{}", 2, 0644, &err) < 0)
    bail_out("cannot add image %s", hex);
  free(name);
}

static void add_layer(struct dsec_store *s, const char *hex)
{
  char *meta = xasprintf("%s/meta.json", hex);
  struct dsec_error *err = NULL;
  if (dsec_mkdir_p(s->layers_fd, hex, 0755, &err) < 0 ||
      dsec_write_file_atomic(s->layers_fd, meta, "{}", 2, 0644, &err) < 0)
    bail_out("cannot add layer %s", hex);
  free(meta);
}

static void check_resolve(struct dsec_store *s, const char *ref,
                          const char *digest, enum dsec_kind kind)
{
  struct dsec_error *err = NULL;
  char d[DSEC_DIGEST_LEN + 1] = "";
  enum dsec_kind k = DSEC_KIND_NONE;

  is_int(dsec_store_resolve(s, ref, d, &k, &err), 0, "resolve \"%.40s\"", ref);
  ok(strcmp(d, digest) == 0 && k == kind, "... to %.19s..., a%s %s", digest,
     kind == DSEC_KIND_IMAGE ? "n" : "", dsec_kind_name(kind));
  if (err)
    diag("  %s", err->msg);
  dsec_error_free(err);
}

static void check_unresolved(struct dsec_store *s, const char *ref,
                             const char *why)
{
  struct dsec_error *err = NULL;
  char d[DSEC_DIGEST_LEN + 1] = "untouched";

  is_int(dsec_store_resolve(s, ref, d, NULL, &err), -1,
         "resolve \"%.40s\" fails (%s)", ref, why);
  ok(err && err->status == DSEC_EXIT_INPUT && strcmp(d, "untouched") == 0,
     "... bad input, digest untouched");
  if (err)
    diag("  %s", err->msg);
  dsec_error_free(err);
}

static void test_resolve(struct dsec_store *s)
{
  struct dsec_error *err = NULL;
  char img[DSEC_DIGEST_LEN + 1], lay[DSEC_DIGEST_LEN + 1];
  char prefix[13], *with_name, *canon;
  const char *amb1 = "abcdefabcdef0000000000000000000000000000000000000000000000000000";
  const char *amb2 = "abcdefabcdef1111111111111111111111111111111111111111111111111111";

  digest_of("an image", img);
  digest_of("a layer", lay);
  add_image(s, dsec_digest_hex(img));
  add_layer(s, dsec_digest_hex(lay));
  is_int(dsec_store_kind(s, img), DSEC_KIND_IMAGE, "store_kind of an image");
  is_int(dsec_store_kind(s, lay), DSEC_KIND_LAYER, "store_kind of a layer");

  check_resolve(s, img, img, DSEC_KIND_IMAGE);
  check_resolve(s, lay, lay, DSEC_KIND_LAYER);
  snprintf(prefix, sizeof prefix, "%s", dsec_digest_hex(img));
  check_resolve(s, prefix, img, DSEC_KIND_IMAGE);
  check_resolve(s, dsec_digest_hex(lay), lay, DSEC_KIND_LAYER);
  with_name = xasprintf("whatever@%s", lay);
  check_resolve(s, with_name, lay, DSEC_KIND_LAYER);
  free(with_name);

  add_image(s, amb1);
  add_layer(s, amb2);
  check_unresolved(s, "abcdefabcdef", "ambiguous prefix");
  {
    char d[DSEC_DIGEST_LEN + 1];
    snprintf(d, sizeof d, "sha256:%s", amb2);
    check_resolve(s, "abcdefabcdef1", d, DSEC_KIND_LAYER);
  }

  dsec_ref_set(s, "mylayer", "v1", DSEC_KIND_LAYER, lay, &err);
  dsec_ref_set(s, "mylayer", "latest", DSEC_KIND_LAYER, lay, &err);
  check_resolve(s, "mylayer@v1", lay, DSEC_KIND_LAYER);
  check_resolve(s, "mylayer:v1", lay, DSEC_KIND_LAYER);
  check_resolve(s, "mylayer", lay, DSEC_KIND_LAYER);

  canon = dsec_source_canonical("busybox", &err);
  dsec_source_set(s, canon, img, &err);
  free(canon);
  check_resolve(s, "busybox", img, DSEC_KIND_IMAGE);
  check_resolve(s, "docker.io/library/busybox:latest", img, DSEC_KIND_IMAGE);
  canon = dsec_source_canonical("tar:img.tar", &err);
  dsec_source_set(s, canon, img, &err);
  free(canon);
  check_resolve(s, "tar:./img.tar", img, DSEC_KIND_IMAGE);
  ok(err == NULL, "no error setting refs and sources");

  prefix[11] = '\0';
  check_unresolved(s, prefix, "11 digits are not a prefix");
  check_unresolved(s, "nosuchname", "unknown name");
  check_unresolved(s, "mylayer@v9", "unknown version");
  check_unresolved(s, "sha256:" HEX64, "unknown digest");
  check_unresolved(s, "sha256:0123", "invalid digest");
  check_unresolved(s, "tar:other.tar", "unknown source");
  check_unresolved(s, "", "empty");
  dsec_error_free(err);
}

static void test_store_refs(void)
{
  struct dsec_store *s = open_store();
  char d1[DSEC_DIGEST_LEN + 1], d2[DSEC_DIGEST_LEN + 1];

  digest_of("one", d1);
  digest_of("two", d2);
  test_ref_set_get(s, d1, d2);
  test_ref_corrupt(s);
  test_ref_list(s);
  test_ref_rm(s);
  test_resolve(s);
  dsec_store_free(s);
}

int main(void)
{
  tmp = tap_tmpdir("test-refs");
  tmp_real = realpath(tmp, NULL);
  /* relative source references are tested from here */
  if (!tmp_real || chdir(tmp) < 0)
    bail_out("cannot use %s", tmp);
  test_name_rules();
  test_version_rules();
  test_split();
  test_image_ref();
  test_source_canonical();
  test_store_refs();
  free(tmp_real);
  return done_testing();
}
