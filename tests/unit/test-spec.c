/* Unit tests for libcommon/spec.c: the typed spec.  A full spec parses
 * into its fields, defaults are filled in, to_json gives back what parse
 * takes (a round trip is stable), and bad input is refused naming the
 * field. */
#include <config.h>

#include <string.h>

#include "spec.h"
#include "tap.h"

static struct dsec_spec *parse(const char *text, struct dsec_error **err)
{
  json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
  struct dsec_spec *s = NULL;
  if (!j)
    bail_out("bad test JSON: %s", text);
  if (dsec_spec_parse(j, &s, err) < 0)
    s = NULL;
  json_decref(j);
  return s;
}

static void test_full(void)
{
  struct dsec_error *err = NULL;
  struct dsec_spec *s = parse(
    "{\"backend\":\"container\",\"image\":\"python:3.11\","
    "\"layers\":[\"task/a@v2\",\"task/b@1\"],"
    "\"resources\":{\"cpus\":1.5,\"memory_mb\":1024,\"pids\":512,"
    "\"disk_mb\":2048,\"class\":\"besteffort\"},"
    "\"network\":{\"mode\":\"proxy\",\"allow\":[\"pypi.org:443\"],"
    "\"deny\":[\"*.example.com\"]},"
    "\"mounts\":[{\"source\":\"/data//x/\",\"target\":\"/task/./y\",\"ro\":true},"
    "{\"source\":\"/w\",\"target\":\"/work\"}],"
    "\"protect\":[\"/grader/\"],\"hide\":[\"/solutions\"],"
    "\"env\":{\"LANG\":\"C.UTF-8\"},\"workdir\":\"/work\",\"user\":\"1000\","
    "\"ttl_s\":7200,\"idle_timeout_s\":900,\"idle_action\":\"suspend\","
    "\"labels\":{\"job\":\"grpo\",\"step\":4200},\"name\":\"r-1\","
    "\"audit\":{\"max_bytes\":1048576}}",
    &err);

  ok(s != NULL, "a full spec parses%s%s", err ? ": " : "", err ? err->msg : "");
  if (!s)
    return;
  ok(s->backend == DSEC_BACKEND_CONTAINER, "backend");
  is_str(s->image, "python:3.11", "image");
  ok(s->layers.n == 2 && strcmp(s->layers.v[1], "task/b@1") == 0, "layers, in order");
  ok(s->resources.cpus == 1.5 && s->resources.memory_mb == 1024 &&
       s->resources.pids == 512 && s->resources.disk_mb == 2048,
     "resources");
  ok(s->resources.klass == DSEC_CLASS_BESTEFFORT, "class");
  ok(s->network.mode == DSEC_NET_PROXY && s->network.allow.n == 1 &&
       s->network.deny.n == 1,
     "network");
  ok(s->n_mounts == 2, "two mounts");
  is_str(s->mounts[0].source, "/data/x", "a mount's source is cleaned");
  is_str(s->mounts[0].target, "/task/y", "a mount's target is cleaned");
  ok(s->mounts[0].ro && !s->mounts[1].ro, "ro, and rw by default");
  ok(dsec_spec_has_rw_mount(s), "it has a read-write mount");
  is_str(s->protect.v[0], "/grader", "protect is cleaned");
  is_str(json_string_value(json_object_get(s->env, "LANG")), "C.UTF-8", "env");
  ok(s->uid == 1000 && s->gid == 1000, "user 1000 is 1000:1000");
  ok(s->ttl_s == 7200 && s->idle_timeout_s == 900, "timers");
  ok(s->idle_action == DSEC_IDLE_SUSPEND, "idle_action");
  is_int((int) json_integer_value(json_object_get(s->labels, "step")), 4200, "labels");
  is_str(s->name, "r-1", "name");
  ok(s->audit_max_bytes == 1048576, "audit.max_bytes");
  {
    /* the round trip: to_json parses into the same JSON again */
    json_t *a = dsec_spec_to_json(s);
    struct dsec_spec *t = NULL;
    json_t *b;
    ok(dsec_spec_parse(a, &t, &err) == 0, "to_json parses again");
    b = t ? dsec_spec_to_json(t) : NULL;
    ok(b && json_equal(a, b), "and gives the same JSON");
    json_decref(a);
    json_decref(b);
    dsec_spec_free(t);
  }
  dsec_spec_free(s);
}

static void test_defaults(void)
{
  struct dsec_error *err = NULL;
  struct dsec_spec *s = parse("{\"image\":\"busybox:1\"}", &err);
  json_t *j;

  ok(s != NULL, "a spec of an image alone parses");
  if (!s)
    return;
  ok(s->backend == DSEC_BACKEND_CONTAINER, "backend container by default");
  ok(s->layers.n == 0 && s->n_mounts == 0 && s->protect.n == 0 && s->hide.n == 0,
     "no layers, mounts, protect or hide");
  ok(s->resources.cpus == 0 && s->resources.memory_mb == 0 &&
       s->resources.klass == DSEC_CLASS_LATENCY,
     "no limits, class latency");
  ok(s->network.mode == DSEC_NET_NONE, "no network");
  is_str(s->workdir, "/", "workdir /");
  ok(s->uid == 0 && s->gid == 0, "user 0:0");
  ok(s->idle_action == DSEC_IDLE_REMOVE && !s->name && !s->pmem,
     "idle_action remove, no name, no pmem");
  ok(s->audit_max_bytes == 64LL << 20, "audit.max_bytes 64 MiB");
  j = dsec_spec_to_json(s);
  ok(!json_object_get(j, "ttl_s") && !json_object_get(j, "name") &&
       !json_object_get(json_object_get(j, "resources"), "memory_mb"),
     "unset fields stay out of the JSON");
  is_str(json_string_value(json_object_get(j, "user")), "0:0",
         "the user is spelled out");
  json_decref(j);
  dsec_spec_free(s);
}

static void test_backends(void)
{
  static const char *const names[] = { "fncall", "container", "microvm", "vm" };
  for (int i = 0; i < 4; i++) {
    struct dsec_error *err = NULL;
    char text[128];
    struct dsec_spec *s;
    snprintf(text, sizeof text, "{\"image\":\"x\",\"backend\":\"%s\"}", names[i]);
    s = parse(text, &err);
    ok(s && (int) s->backend == i && strcmp(dsec_backend_name(s->backend), names[i]) == 0,
       "backend %s", names[i]);
    ok(s && dsec_backend_is_vm(s->backend) == (i >= 2), "%s is%s a VM", names[i],
       i >= 2 ? "" : " not");
    dsec_spec_free(s);
    dsec_error_free(err);
  }
}

static void test_bad(void)
{
  static const struct {
    const char *text;
    const char *field; /* in the message */
  } cases[] = {
    { "{\"image\":\"x\",\"nope\":1}", "nope" },
    { "{\"backend\":\"container\"}", "image" },
    { "{\"image\":\"x\",\"backend\":\"docker\"}", "backend" },
    { "{\"image\":\"x\",\"resources\":{\"memory_mb\":2}}", "resources.memory_mb" },
    { "{\"image\":\"x\",\"resources\":{\"cpus\":0}}", "resources.cpus" },
    { "{\"image\":\"x\",\"resources\":{\"class\":\"fast\"}}", "resources.class" },
    { "{\"image\":\"x\",\"resources\":{\"gpus\":1}}", "resources.gpus" },
    { "{\"image\":\"x\",\"network\":{\"mode\":\"host\"}}", "network.mode" },
    { "{\"image\":\"x\",\"network\":{\"allow\":[\"a\"]}}", "network.allow" },
    { "{\"image\":\"x\",\"mounts\":[{\"source\":\"rel\",\"target\":\"/t\"}]}", "mounts[0].source" },
    { "{\"image\":\"x\",\"mounts\":[{\"source\":\"/s\",\"target\":\"/\"}]}", "mounts[0].target" },
    { "{\"image\":\"x\",\"mounts\":[{\"source\":\"/s\",\"target\":\"/t\",\"ro\":1}]}", "mounts[0].ro" },
    { "{\"image\":\"x\",\"protect\":[\"/a/../b\"]}", "protect[0]" },
    { "{\"image\":\"x\",\"hide\":[\"relative\"]}", "hide[0]" },
    { "{\"image\":\"x\",\"env\":{\"A=B\":\"c\"}}", "A=B" },
    { "{\"image\":\"x\",\"env\":{\"A\":1}}", "env.A" },
    { "{\"image\":\"x\",\"workdir\":\"rel\"}", "workdir" },
    { "{\"image\":\"x\",\"user\":\"70000\"}", "user" },
    { "{\"image\":\"x\",\"ttl_s\":-1}", "ttl_s" },
    { "{\"image\":\"x\",\"idle_action\":\"pause\"}", "idle_action" },
    { "{\"image\":\"x\",\"labels\":{\"a\":[1]}}", "labels.a" },
    { "{\"image\":\"x\",\"name\":\"sb-1\"}", "name" },
    { "{\"image\":\"x\",\"pmem\":true}", "pmem" },
    { "{\"image\":\"x\",\"audit\":{\"max_bytes\":10}}", "audit.max_bytes" },
    { "{\"image\":\"x\",\"audit\":{\"bytes\":100000}}", "audit.bytes" },
    { "{\"image\":\"x\",\"services\":{}}", "services" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"agent\",\"image\":\"y\",\"cmd\":[\"s\"]}]}", "services[0].name" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"Db\",\"image\":\"y\",\"cmd\":[\"s\"]}]}", "services[0].name" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"db\",\"image\":\"y\"}]}", "services[0].cmd" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"db\",\"cmd\":[\"s\"]}]}", "image" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"db\",\"image\":\"y\",\"cmd\":[\"s\"],\"ready\":{\"tcp\":0}}]}", "services[0].ready.tcp" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"db\",\"image\":\"y\",\"cmd\":[\"s\"],\"ready\":{\"tcp\":1,\"cmd\":[\"c\"]}}]}", "services[0].ready" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"db\",\"image\":\"y\",\"cmd\":[\"s\"],\"mounts\":[]}]}", "services[0].mounts" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"db\",\"image\":\"y\",\"cmd\":[\"s\"],\"resources\":{\"memory_mb\":1}}]}", "resources.memory_mb" },
    { "{\"image\":\"x\",\"services\":[{\"name\":\"db\",\"image\":\"y\",\"cmd\":[\"s\"]},{\"name\":\"db\",\"image\":\"y\",\"cmd\":[\"s\"]}]}", "two services" },
    { "{\"image\":\"x\",\"backend\":\"microvm\",\"services\":[{\"name\":\"db\",\"image\":\"y\",\"cmd\":[\"s\"]}]}", "services" },
    { "{\"image\":\"x\",\"world\":{\"agent\":\"sb-1\",\"service\":\"db\",\"cmd\":[]}}", "world" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct dsec_error *err = NULL;
    struct dsec_spec *s = parse(cases[i].text, &err);
    ok(!s && err && err->status == DSEC_EXIT_INPUT && strstr(err->msg, cases[i].field),
       "refused, naming %s: %s", cases[i].field, err ? err->msg : "(accepted)");
    dsec_spec_free(s);
    dsec_error_free(err);
  }
}

/* services: defaults filled in per service; a service's own spec (world)
 * parses into the typed fields, and both round-trip through to_json. */
static void test_world(void)
{
  struct dsec_error *err = NULL;
  json_t *j = json_loads(
    "{\"image\":\"x\",\"services\":[{\"name\":\"db\",\"image\":\"y\","
    "\"cmd\":[\"redis-server\"],\"ready\":{\"tcp\":6379}}]}", 0, NULL);
  json_t *svc;
  struct dsec_spec *s = NULL;

  ok(dsec_spec_validate(j, &err) == 0, "a spec with services is valid");
  svc = json_array_get(json_object_get(j, "services"), 0);
  ok(json_integer_value(json_object_get(json_object_get(svc, "ready"),
                                        "timeout_s")) == 60 &&
       json_is_string(json_object_get(svc, "workdir")) &&
       json_is_object(json_object_get(svc, "resources")),
     "a service gets its defaults (ready.timeout_s 60, workdir, resources)");
  ok(dsec_spec_parse(j, &s, &err) == 0 && json_array_size(s->services) == 1 &&
       !s->world.agent,
     "an agent's typed spec has its services, no world");
  dsec_spec_free(s);
  json_decref(j);

  s = parse("{\"image\":\"y\",\"world\":{\"agent\":\"sb-0123456789abcdef\","
            "\"service\":\"db\",\"cmd\":[\"redis-server\",\"--port\",\"1\"],"
            "\"names\":[\"agent\",\"db\"]}}", &err);
  ok(s && strcmp(s->world.agent, "sb-0123456789abcdef") == 0 &&
       strcmp(s->world.service, "db") == 0 && s->world.cmd.n == 3 &&
       s->world.names.n == 2,
     "a service's spec parses its world");
  if (s) {
    json_t *a = dsec_spec_to_json(s), *b;
    struct dsec_spec *t = NULL;
    ok(dsec_spec_parse(a, &t, &err) == 0, "its to_json parses again");
    b = t ? dsec_spec_to_json(t) : NULL;
    ok(b && json_equal(a, b), "and gives the same JSON");
    json_decref(a);
    json_decref(b);
    dsec_spec_free(t);
  }
  dsec_spec_free(s);
  ok(dsec_service_name_ok("db-2") && !dsec_service_name_ok("agent") &&
       !dsec_service_name_ok("2db") && !dsec_service_name_ok("") &&
       !dsec_service_name_ok("a_b"),
     "service names: [a-z][a-z0-9-]*, not agent");
  dsec_error_free(err);
}

int main(void)
{
  test_full();
  test_world();
  test_defaults();
  test_backends();
  test_bad();
  done_testing();
}
