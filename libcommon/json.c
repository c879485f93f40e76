#include <config.h>

#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"

int dsec_json_write_line(int fd, json_t *obj, struct dsec_error **err)
{
  _cleanup_free_ char *s = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(10));
  _cleanup_free_ char *line = NULL;
  size_t len;

  if (!s)
    return dsec_fail(err, ENOMEM, "cannot encode JSON");
  len = strlen(s);
  line = xmalloc(len + 2);
  memcpy(line, s, len);
  line[len++] = '\n';
  line[len] = '\0';
  return dsec_write_all(fd, line, len, err);
}

int dsec_json_print(json_t *obj, struct dsec_error **err)
{
  int ret = dsec_json_write_line(STDOUT_FILENO, obj, err);
  if (ret < 0)
    return dsec_error_wrap(err, "cannot write to stdout");
  return 0;
}

int dsec_json_print_new(json_t *obj, struct dsec_error **err)
{
  int ret;
  if (!obj)
    return dsec_fail(err, ENOMEM, "cannot build JSON output");
  ret = dsec_json_print(obj, err);
  json_decref(obj);
  return ret;
}

json_t *dsec_json_parse(const char *buf, size_t len, const char *what,
                        struct dsec_error **err)
{
  json_error_t jerr;
  json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!j) {
    dsec_bad_input(err, "%s: invalid JSON at line %d, column %d: %s", what,
                   jerr.line, jerr.column, jerr.text);
    return NULL;
  }
  return j;
}

json_t *dsec_json_load_path(const char *path, size_t max,
                            struct dsec_error **err)
{
  _cleanup_free_ char *buf = NULL;
  size_t len;

  if (strcmp(path, "-") == 0)
    buf = dsec_read_fd(STDIN_FILENO, max, &len, err);
  else
    buf = dsec_read_file_at(AT_FDCWD, path, max, &len, err);
  if (!buf)
    return NULL;
  return dsec_json_parse(buf, len, strcmp(path, "-") ? path : "stdin", err);
}

static int get_typed(json_t *obj, const char *key, bool required,
                     const char *what, json_type type, const char *tname,
                     json_t **out, struct dsec_error **err)
{
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    if (required)
      return dsec_bad_input(err, "%s: missing field `%s`", what, key);
    *out = NULL;
    return 0;
  }
  /* a real is an integer when it is whole and within range (checked
   * first: converting one outside it is undefined) */
  if (json_typeof(v) != type &&
      !(type == JSON_INTEGER && json_is_real(v) &&
        json_real_value(v) >= -0x1p63 && json_real_value(v) < 0x1p63 &&
        json_real_value(v) == (double) (json_int_t) json_real_value(v)))
    return dsec_bad_input(err, "%s: field `%s` must be %s", what, key, tname);
  *out = v;
  return 0;
}

int dsec_json_get_string(json_t *obj, const char *key, bool required,
                         const char *what, const char **out,
                         struct dsec_error **err)
{
  json_t *v = NULL;
  int ret = get_typed(obj, key, required, what, JSON_STRING, "a string", &v,
                      err);
  if (ret < 0)
    return ret;
  *out = v ? json_string_value(v) : NULL;
  return 0;
}

int dsec_json_get_int(json_t *obj, const char *key, bool required,
                      const char *what, json_int_t *out,
                      struct dsec_error **err)
{
  json_t *v = NULL;
  int ret = get_typed(obj, key, required, what, JSON_INTEGER, "an integer",
                      &v, err);
  if (ret < 0)
    return ret;
  if (v)
    *out = json_is_integer(v) ? json_integer_value(v)
                              : (json_int_t) json_real_value(v);
  return 0;
}

int dsec_json_get_object(json_t *obj, const char *key, bool required,
                         const char *what, json_t **out,
                         struct dsec_error **err)
{
  return get_typed(obj, key, required, what, JSON_OBJECT, "an object", out,
                   err);
}

int dsec_json_get_array(json_t *obj, const char *key, bool required,
                        const char *what, json_t **out,
                        struct dsec_error **err)
{
  return get_typed(obj, key, required, what, JSON_ARRAY, "an array", out,
                   err);
}

json_t *dsec_json_strv(char *const *v)
{
  json_t *a = json_array();
  for (; v && *v; v++)
    json_array_append_new(a, json_string(*v));
  return a;
}

json_t *dsec_json_utf8(const char *buf, size_t len)
{
  char *out = xmalloc(len * 3 + 1);
  size_t o = 0;
  json_t *j;

  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char) buf[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3
                                              : (c >> 3) == 30  ? 4 : 0;
    bool ok = n > 0 && i + n <= len;
    for (size_t k = 1; ok && k < n; k++)
      ok = ((unsigned char) buf[i + k] >> 6) == 2;
    if (ok && n == 2 && c < 0xc2)
      ok = false; /* overlong */
    if (ok && n == 3) {
      unsigned cp = ((c & 15u) << 12) | (((unsigned char) buf[i + 1] & 63u) << 6) |
                    ((unsigned char) buf[i + 2] & 63u);
      ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
    }
    if (ok && n == 4) {
      unsigned cp = ((c & 7u) << 18) | (((unsigned char) buf[i + 1] & 63u) << 12) |
                    (((unsigned char) buf[i + 2] & 63u) << 6) |
                    ((unsigned char) buf[i + 3] & 63u);
      ok = cp >= 0x10000 && cp <= 0x10ffff;
    }
    if (ok) {
      memcpy(out + o, buf + i, n);
      o += n;
      i += n;
    } else {
      memcpy(out + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    }
  }
  j = json_stringn(out, o);
  free(out);
  return j;
}
