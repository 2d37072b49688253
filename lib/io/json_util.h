/* json_util.h - typed field getters over json-c for the lib/io parsers.
 *
 * Each getter looks up `key` in object `obj` and distinguishes three
 * cases, so callers can apply defaults without repeating type checks:
 *   1  the field is present with the right type; *out is set
 *   0  the field is absent or JSON null; *out is left alone
 *  <0  the field has the wrong type: ATLAS_EFORMAT with the message
 *      "WHERE: field 'KEY' must be an integer" (WHERE names the file). */
#ifndef ATLAS_IO_JSON_UTIL_H
#define ATLAS_IO_JSON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_object;

/* An integer (a JSON number written without fraction or exponent). */
int atlas_json_int(struct json_object *obj, const char *key, const char *where, int64_t *out);
/* Any JSON number, integer or not. */
int atlas_json_double(struct json_object *obj, const char *key, const char *where, double *out);
int atlas_json_bool(struct json_object *obj, const char *key, const char *where, bool *out);
/* *out points into `obj` and lives as long as it does. */
int atlas_json_string(struct json_object *obj, const char *key, const char *where,
		      const char **out);
/* *out is borrowed from `obj` (no reference taken). */
int atlas_json_object(struct json_object *obj, const char *key, const char *where,
		      struct json_object **out);
int atlas_json_array(struct json_object *obj, const char *key, const char *where,
		     struct json_object **out);

/* Parse `len` bytes of `text` (text[len] must be readable and '\0') as
 * one JSON object; only whitespace or NUL bytes may follow it. Returns a
 * new object owned by the caller (json_object_put), or NULL with an
 * ATLAS_EFORMAT message "WHERE: ..." saying what is wrong and where. */
struct json_object *atlas_json_parse_object(const char *text, size_t len, const char *where);

#endif
