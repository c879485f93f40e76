/* Unit tests for libcommon/json.c: parsing (duplicate keys and malformed
 * input are bad input naming where), typed getters, and the one compact
 * line per object that goes out. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"
#include "json.h"
#include "tap.h"

static const char *tmp;

/* Checks a bad-input error whose message contains each of the NULL-ended
 * words, then frees and clears it. */
static void check_bad_input(struct dsec_error **err, const char *what, ...)
{
  struct dsec_error *e = *err;
  const char *missing = NULL;
  va_list ap;

  is_int(e ? e->status : -1, DSEC_EXIT_INPUT, "%s: status 3", what);
  va_start(ap, what);
  for (const char *w; (w = va_arg(ap, const char *));)
    if (!missing && (!e || !strstr(e->msg, w)))
      missing = w;
  va_end(ap);
  ok(e && !missing, "%s: the message names what and where", what);
  if (e)
    diag("  %s", e->msg);
  if (missing)
    diag("  missing \"%s\"", missing);
  dsec_error_free(e);
  *err = NULL;
}

static json_t *parse(const char *text, struct dsec_error **err)
{
  return dsec_json_parse(text, strlen(text), "spec.json", err);
}

static void test_parse(void)
{
  struct dsec_error *err = NULL;
  json_t *j;

  j = parse("{\"a\": 1, \"b\": [true, null]}", &err);
  ok(j && json_is_object(j) && json_integer_value(json_object_get(j, "a")) == 1,
     "a valid object parses");
  ok(err == NULL, "... with no error");
  json_decref(j);

  j = parse("{\"a\": 1,\n \"b\": 2,\n \"a\": 3}", &err);
  ok(j == NULL, "a duplicate key is rejected");
  check_bad_input(&err, "duplicate key", "spec.json", "line 3", "duplicate",
                  NULL);

  j = parse("{\"outer\": {\"k\": 1, \"k\": 1}}", &err);
  ok(j == NULL, "a duplicate key in a nested object is rejected");
  check_bad_input(&err, "nested duplicate", "line", NULL);

  j = parse("{\"a\": 1,\n\"b\": }", &err);
  ok(j == NULL, "a missing value is rejected");
  check_bad_input(&err, "missing value", "spec.json", "line 2", NULL);

  j = parse("{\"a\": 1", &err);
  ok(j == NULL, "an unterminated object is rejected");
  check_bad_input(&err, "unterminated", "line", NULL);

  j = parse("{} {}", &err);
  ok(j == NULL, "trailing data after the document is rejected");
  check_bad_input(&err, "trailing data", "line", NULL);

  j = parse("", &err);
  ok(j == NULL, "empty input is rejected");
  check_bad_input(&err, "empty input", "line", NULL);

  j = dsec_json_parse("{\"a\": \"x\0y\"}", 12, "nul.json", &err);
  ok(j == NULL, "a raw NUL byte is rejected");
  check_bad_input(&err, "NUL byte", "nul.json", NULL);
}

static void test_get_string(json_t *obj)
{
  struct dsec_error *err = NULL;
  const char *s = "unset";

  is_int(dsec_json_get_string(obj, "name", true, "spec", &s, &err), 0,
         "get_string of a present string");
  is_str(s, "box", "... gives it");
  s = "unset";
  is_int(dsec_json_get_string(obj, "nope", false, "spec", &s, &err), 0,
         "get_string of a missing optional field");
  ok(s == NULL, "... gives NULL");
  s = "unset";
  is_int(dsec_json_get_string(obj, "nothing", false, "spec", &s, &err), 0,
         "get_string of an optional null");
  ok(s == NULL, "... gives NULL");
  ok(err == NULL, "no error so far");

  is_int(dsec_json_get_string(obj, "nope", true, "spec", &s, &err), -1,
         "get_string of a missing required field fails");
  check_bad_input(&err, "missing required", "spec", "`nope`", "missing",
                  NULL);
  is_int(dsec_json_get_string(obj, "nothing", true, "spec", &s, &err), -1,
         "get_string of a required null fails");
  check_bad_input(&err, "required null", "`nothing`", NULL);
  is_int(dsec_json_get_string(obj, "cpus", true, "spec", &s, &err), -1,
         "get_string of an integer fails");
  check_bad_input(&err, "string wrong type", "spec", "`cpus`", "a string",
                  NULL);
}

static void test_get_int(json_t *obj)
{
  struct dsec_error *err = NULL;
  json_int_t n = 42;

  is_int(dsec_json_get_int(obj, "cpus", true, "spec", &n, &err), 0,
         "get_int of an integer");
  is_int(n, 3, "... gives it");
  is_int(dsec_json_get_int(obj, "neg", true, "spec", &n, &err), 0,
         "get_int of a negative integer");
  is_int(n, -7, "... gives it");
  n = 0;
  is_int(dsec_json_get_int(obj, "whole", true, "spec", &n, &err), 0,
         "get_int accepts 3.0");
  is_int(n, 3, "... as 3");
  n = 42;
  is_int(dsec_json_get_int(obj, "nope", false, "spec", &n, &err), 0,
         "get_int of a missing optional field");
  is_int(n, 42, "... leaves the default alone");
  ok(err == NULL, "no error so far");

  is_int(dsec_json_get_int(obj, "frac", true, "spec", &n, &err), -1,
         "get_int rejects 3.5");
  check_bad_input(&err, "3.5", "spec", "`frac`", "an integer", NULL);
  is_int(dsec_json_get_int(obj, "huge", true, "spec", &n, &err), -1,
         "get_int rejects 1e19, out of range");
  check_bad_input(&err, "1e19", "`huge`", NULL);
  is_int(dsec_json_get_int(obj, "vast", true, "spec", &n, &err), -1,
         "get_int rejects -6e40, out of range (found by fuzzing)");
  check_bad_input(&err, "-6e40", "`vast`", NULL);
  is_int(dsec_json_get_int(obj, "name", true, "spec", &n, &err), -1,
         "get_int rejects a string");
  check_bad_input(&err, "int wrong type", "`name`", "an integer", NULL);
  is_int(dsec_json_get_int(obj, "nope", true, "spec", &n, &err), -1,
         "get_int of a missing required field fails");
  check_bad_input(&err, "int missing", "`nope`", NULL);
  is_int(n, 42, "failed calls leave the output alone");
}

static void test_get_object_array(json_t *obj)
{
  struct dsec_error *err = NULL;
  json_t *v = NULL;

  is_int(dsec_json_get_object(obj, "resources", true, "spec", &v, &err), 0,
         "get_object of an object");
  ok(json_is_object(v), "... gives it");
  is_int(dsec_json_get_array(obj, "layers", true, "spec", &v, &err), 0,
         "get_array of an array");
  ok(json_is_array(v) && json_array_size(v) == 2, "... gives it");
  v = obj;
  is_int(dsec_json_get_array(obj, "nope", false, "spec", &v, &err), 0,
         "get_array of a missing optional field");
  ok(v == NULL, "... gives NULL");

  is_int(dsec_json_get_object(obj, "layers", true, "spec", &v, &err), -1,
         "get_object of an array fails");
  check_bad_input(&err, "object wrong type", "`layers`", "an object", NULL);
  is_int(dsec_json_get_array(obj, "resources", true, "spec", &v, &err), -1,
         "get_array of an object fails");
  check_bad_input(&err, "array wrong type", "`resources`", "an array", NULL);
}

static void test_getters(void)
{
  struct dsec_error *err = NULL;
  json_t *obj = parse("{\"name\": \"box\", \"cpus\": 3, \"neg\": -7, "
                      "\"whole\": 3.0, \"frac\": 3.5, \"huge\": 1e19, "
                      "\"vast\": -6e40, "
                      "\"nothing\": null, \"resources\": {\"pids\": 1}, "
                      "\"layers\": [\"a\", \"b\"]}",
                      &err);
  if (!obj)
    bail_out("cannot parse the getters' input: %s", err->msg);
  test_get_string(obj);
  test_get_int(obj);
  test_get_object_array(obj);
  json_decref(obj);
}

/* Writes obj with dsec_json_write_line into a pipe and returns all that
 * came out (new string). */
static char *write_line_through_pipe(json_t *obj, int *ret)
{
  struct dsec_error *err = NULL;
  int pfd[2];
  char *out;

  if (pipe2(pfd, O_CLOEXEC) < 0)
    bail_out("pipe");
  *ret = dsec_json_write_line(pfd[1], obj, &err);
  close(pfd[1]);
  out = dsec_read_fd(pfd[0], 1 << 16, NULL, &err);
  close(pfd[0]);
  dsec_error_free(err);
  return out;
}

static void test_write_line(void)
{
  struct dsec_error *err = NULL;
  json_t *obj = json_pack("{s:s, s:i, s:[i,i], s:{s:b}, s:s}", "type", "ref",
                          "n", 3, "list", 1, 2, "nested", "ok", 1, "text",
                          "two\nlines");
  char *out;
  int ret = -1, devnull;

  out = write_line_through_pipe(obj, &ret);
  is_int(ret, 0, "write_line succeeds");
  is_str(out, "{\"type\":\"ref\",\"n\":3,\"list\":[1,2],\"nested\":{\"ok\":true},"
              "\"text\":\"two\\nlines\"}\n",
         "write_line writes the object compact, in order, ending in \\n");
  ok(out && strchr(out, '\n') == out + strlen(out) - 1,
     "... exactly one line (a newline in a string is escaped)");
  ok(obj->refcount == 1, "write_line does not steal the object");
  free(out);
  json_decref(obj);

  obj = json_array();
  out = write_line_through_pipe(obj, &ret);
  is_str(out, "[]\n", "write_line of an empty array");
  free(out);

  devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  is_int(dsec_json_write_line(devnull, obj, &err), -1,
         "write_line to a read-only descriptor fails");
  ok(err && err->status == DSEC_EXIT_FAILURE && err->errnum == EBADF,
     "... with status 1 and EBADF");
  close(devnull);
  dsec_error_free(err);
  json_decref(obj);
}

static void test_load_path_and_strv(void)
{
  struct dsec_error *err = NULL;
  char *path = xasprintf("%s/in.json", tmp);
  char *missing = xasprintf("%s/missing.json", tmp);
  char *const v[] = { "a", "b c", NULL };
  json_t *j;
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

  if (fd < 0 || write(fd, "{\"k\": \"v\"}\n", 11) != 11)
    bail_out("cannot write %s", path);
  close(fd);
  j = dsec_json_load_path(path, 100, &err);
  ok(j && json_object_get(j, "k"), "load_path reads and parses a file");
  json_decref(j);
  ok(dsec_json_load_path(path, 5, &err) == NULL,
     "load_path of a file over max fails");
  check_bad_input(&err, "over max", "in.json", NULL);
  ok(dsec_json_load_path(missing, 100, &err) == NULL,
     "load_path of a missing file fails");
  check_bad_input(&err, "missing file", "missing.json", NULL);

  j = dsec_json_strv(v);
  ok(json_array_size(j) == 2 &&
     strcmp(json_string_value(json_array_get(j, 1)), "b c") == 0,
     "json_strv makes an array of the strings");
  json_decref(j);
  j = dsec_json_strv(NULL);
  ok(json_is_array(j) && json_array_size(j) == 0, "json_strv of NULL is []");
  json_decref(j);
  free(path);
  free(missing);
}

int main(void)
{
  tmp = tap_tmpdir("test-json");
  test_parse();
  test_getters();
  test_write_line();
  test_load_path_and_strv();
  return done_testing();
}
