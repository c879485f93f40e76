/* Unit tests for libcommon/log.c: the text and JSON formats on stderr,
 * debug records only when enabled, the environment, and dsec_log_error's
 * return value.  Output is captured by pointing fds 1 and 2 at files. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "tap.h"

static int tmpfd = -1;

struct capture {
  int saved_out, saved_err;
  int out, err;
};

static int capture_file(const char *name)
{
  int fd = openat(tmpfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    bail_out("cannot create %s", name);
  return fd;
}

static void capture_begin(struct capture *c)
{
  fflush(stdout);
  c->out = capture_file("stdout");
  c->err = capture_file("stderr");
  c->saved_out = dup(STDOUT_FILENO);
  c->saved_err = dup(STDERR_FILENO);
  if (c->saved_out < 0 || c->saved_err < 0 ||
      dup2(c->out, STDOUT_FILENO) < 0 || dup2(c->err, STDERR_FILENO) < 0)
    bail_out("cannot redirect stdout and stderr");
}

static char *read_back(int fd)
{
  off_t len = lseek(fd, 0, SEEK_END);
  char *buf = xmalloc((size_t) len + 1);
  ssize_t n = pread(fd, buf, (size_t) len, 0);
  buf[n > 0 ? n : 0] = '\0';
  close(fd);
  return buf;
}

/* Restores fds 1 and 2 and returns what went to stderr (new string);
 * anything on stdout is a failed test. */
static char *capture_end(struct capture *c)
{
  char *out;

  fflush(stdout);
  dup2(c->saved_out, STDOUT_FILENO);
  dup2(c->saved_err, STDERR_FILENO);
  close(c->saved_out);
  close(c->saved_err);
  out = read_back(c->out);
  if (*out)
    ok(0, "nothing goes to stdout, got: %s", out);
  free(out);
  return read_back(c->err);
}

/* Captures one dsec_log call's stderr. */
#define CAPTURE(result, call) \
  do { \
    struct capture c_; \
    capture_begin(&c_); \
    call; \
    (result) = capture_end(&c_); \
  } while (0)

static void check_log(const char *got, const char *want, const char *what)
{
  is_str(got, want, "%s", what);
}

static void test_text(void)
{
  char *s;

  CAPTURE(s, dsec_log(DSEC_LOG_ERROR, 0, "cannot %s", "mount"));
  check_log(s, "dsec-demo: cannot mount\n", "text error: \"prog: msg\"");
  free(s);
  CAPTURE(s, dsec_log(DSEC_LOG_ERROR, ENOENT, "cannot open %s", "x"));
  check_log(s, "dsec-demo: cannot open x: No such file or directory\n",
            "text error with errno appends strerror");
  free(s);
  CAPTURE(s, dsec_warn("low on %s", "disk"));
  check_log(s, "dsec-demo: warning: low on disk\n", "text warning");
  free(s);
  CAPTURE(s, dsec_info("pulled %d layers", 3));
  check_log(s, "dsec-demo: pulled 3 layers\n", "text info");
  free(s);
}

static void test_debug(void)
{
  char *s;

  dsec_log_set_debug(false);
  ok(!dsec_log_debug_enabled(), "debug is off after set_debug(false)");
  CAPTURE(s, dsec_debug("hidden %d", 1));
  check_log(s, "", "dsec_debug writes nothing when off");
  free(s);
  CAPTURE(s, dsec_log(DSEC_LOG_DEBUG, 0, "hidden"));
  check_log(s, "", "dsec_log at debug level writes nothing when off");
  free(s);

  dsec_log_set_debug(true);
  ok(dsec_log_debug_enabled(), "debug is on after set_debug(true)");
  CAPTURE(s, dsec_debug("shown %d", 2));
  check_log(s, "dsec-demo: debug: shown 2\n", "dsec_debug writes when on");
  free(s);
  dsec_log_set_debug(false);
}

/* Parses the captured text as exactly one JSON object ending in \n. */
static json_t *one_record(const char *s, const char *what)
{
  size_t len = strlen(s);
  json_error_t jerr;
  json_t *j;

  ok(len > 0 && s[len - 1] == '\n' && strchr(s, '\n') == s + len - 1,
     "%s: exactly one line", what);
  j = json_loadb(s, len, 0, &jerr);
  ok(json_is_object(j), "%s: a JSON object", what);
  if (!j)
    diag("  got: %s", s);
  return j;
}

static const char *field(json_t *j, const char *k)
{
  return json_string_value(json_object_get(j, k));
}

static void test_json(void)
{
  char *s;
  json_t *j;

  is_int(dsec_log_set_format_name("json"), 0, "set_format_name(\"json\")");
  CAPTURE(s, dsec_log(DSEC_LOG_ERROR, EACCES, "cannot open %s", "\"f\"\n"));
  j = one_record(s, "json error");
  is_str(field(j, "level"), "error", "json: level");
  is_str(field(j, "msg"), "cannot open \"f\"\n", "json: msg, escaped");
  is_str(field(j, "prog"), "dsec-demo", "json: prog");
  is_int(json_integer_value(json_object_get(j, "errno")), EACCES,
         "json: errno");
  is_str(field(j, "error"), "Permission denied", "json: error text");
  json_decref(j);
  free(s);

  CAPTURE(s, dsec_warn("careful"));
  j = one_record(s, "json warning");
  is_str(field(j, "level"), "warning", "json warning: level");
  ok(json_object_get(j, "errno") == NULL, "json without errno has no errno");
  json_decref(j);
  free(s);

  CAPTURE(s, dsec_debug("hidden"));
  check_log(s, "", "json: no debug record when off");
  free(s);
  dsec_log_set_debug(true);
  CAPTURE(s, dsec_debug("shown"));
  j = one_record(s, "json debug");
  is_str(field(j, "level"), "debug", "json debug: level");
  json_decref(j);
  free(s);
  dsec_log_set_debug(false);

  is_int(dsec_log_set_format_name("xml"), -1,
         "set_format_name of an unknown name fails");
  CAPTURE(s, dsec_info("still json"));
  ok(s[0] == '{', "... and leaves the format alone");
  free(s);
  is_int(dsec_log_set_format_name("text"), 0, "set_format_name(\"text\")");
}

static void test_log_error(void)
{
  struct dsec_error *err = NULL;
  char *s;
  int status = -1;
  json_t *j;

  dsec_bad_input(&err, "line %d: bad field", 4);
  CAPTURE(s, status = dsec_log_error(err));
  is_int(status, DSEC_EXIT_INPUT, "log_error of bad input returns 3");
  check_log(s, "dsec-demo: line 4: bad field\n", "... and logs the message");
  free(s);
  dsec_error_free(err);

  err = NULL;
  dsec_fail(&err, EIO, "cannot write");
  dsec_log_set_format_name("json");
  CAPTURE(s, status = dsec_log_error(err));
  is_int(status, DSEC_EXIT_FAILURE, "log_error of a failure returns 1");
  j = one_record(s, "json log_error");
  is_str(field(j, "level"), "error", "... one error record");
  is_int(json_integer_value(json_object_get(j, "errno")), EIO,
         "... with the error's errno");
  json_decref(j);
  free(s);
  dsec_error_free(err);
  dsec_log_set_format_name("text");

  CAPTURE(s, status = dsec_log_error(NULL));
  is_int(status, DSEC_EXIT_FAILURE, "log_error(NULL) returns 1");
  check_log(s, "dsec-demo: unknown error\n", "... and says so");
  free(s);
}

static void test_environment(void)
{
  char *s;

  setenv("DSEC_LOG_FORMAT", "json", 1);
  setenv("DSEC_DEBUG", "0", 1);
  dsec_log_init(NULL);
  is_str(dsec_log_prog(), "dsec-demo", "log_init(NULL) keeps the name");
  ok(!dsec_log_debug_enabled(), "DSEC_DEBUG=0 leaves debug off");
  CAPTURE(s, dsec_info("x"));
  ok(s[0] == '{', "DSEC_LOG_FORMAT=json selects JSON");
  free(s);

  setenv("DSEC_LOG_FORMAT", "text", 1);
  setenv("DSEC_DEBUG", "1", 1);
  dsec_log_init("other");
  ok(dsec_log_debug_enabled(), "DSEC_DEBUG=1 turns debug on");
  CAPTURE(s, dsec_debug("y"));
  check_log(s, "other: debug: y\n", "DSEC_LOG_FORMAT=text selects text");
  free(s);
  unsetenv("DSEC_LOG_FORMAT");
  unsetenv("DSEC_DEBUG");
  dsec_log_set_debug(false);
}

int main(void)
{
  tmpfd = open(tap_tmpdir("test-log"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tmpfd < 0)
    bail_out("cannot open the temporary directory");
  unsetenv("DSEC_LOG_FORMAT");
  unsetenv("DSEC_DEBUG");
  dsec_log_init("/usr/libexec/dsec-demo");
  is_str(dsec_log_prog(), "dsec-demo", "log_init keeps the basename");

  test_text();
  test_debug();
  test_json();
  test_log_error();
  test_environment();
  close(tmpfd);
  return done_testing();
}
