/* JSON in and out on top of jansson.  Output: one compact object per line,
 * written with its newline in one write.  Input: duplicate keys rejected,
 * sizes bounded, each field's type checked with a message that names it. */
#ifndef DSEC_JSON_H
#define DSEC_JSON_H

#include <jansson.h>
#include <stdbool.h>

#include "error.h"

/* Writes obj as one compact line to fd (stdout for dsec_json_print).  Does
 * not steal obj. */
int dsec_json_write_line(int fd, json_t *obj, struct dsec_error **err);
int dsec_json_print(json_t *obj, struct dsec_error **err);
/* Same, and drops the reference to obj (convenient with json_pack). */
int dsec_json_print_new(json_t *obj, struct dsec_error **err);

/* Parses one document; errors are bad input naming what (the source) and
 * where.  Returns a new reference. */
json_t *dsec_json_parse(const char *buf, size_t len, const char *what,
                        struct dsec_error **err);
/* Reads and parses a file ("-" for stdin), at most max bytes. */
json_t *dsec_json_load_path(const char *path, size_t max,
                            struct dsec_error **err);

/* Typed field access: a missing optional field gives def / NULL; a field
 * of the wrong type is bad input naming `what.key`.  Borrowed. */
int dsec_json_get_string(json_t *obj, const char *key, bool required,
                         const char *what, const char **out,
                         struct dsec_error **err);
int dsec_json_get_int(json_t *obj, const char *key, bool required,
                      const char *what, json_int_t *out,
                      struct dsec_error **err);
int dsec_json_get_object(json_t *obj, const char *key, bool required,
                         const char *what, json_t **out,
                         struct dsec_error **err);
int dsec_json_get_array(json_t *obj, const char *key, bool required,
                        const char *what, json_t **out,
                        struct dsec_error **err);

/* A JSON array of strings from a NULL-terminated vector (new ref). */
json_t *dsec_json_strv(char *const *v);

/* A JSON string of len bytes that may not be UTF-8 (command output, argv
 * read from a process): invalid sequences become U+FFFD (new ref). */
json_t *dsec_json_utf8(const char *buf, size_t len);

static inline void dsec_json_decrefp(json_t **j)
{
  if (*j)
    json_decref(*j);
}
#define _cleanup_json_ _cleanup_(dsec_json_decrefp)

#endif
