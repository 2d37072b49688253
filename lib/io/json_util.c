/* json_util.c - typed json-c getters with field-naming errors (see
 * json_util.h). */
#include "json_util.h"

#include <json-c/json.h>

#include "../core/error.h"

/* Shared lookup: 0 when absent/null, 1 when of type `t`, error otherwise.
 * `what` completes "must be ..." in the message. */
static int get_typed(struct json_object *obj, const char *key, const char *where, enum json_type t,
		     const char *what, struct json_object **v)
{
	if (!json_object_object_get_ex(obj, key, v) || !*v)
		return 0;
	if (!json_object_is_type(*v, t))
		return atlas_error(ATLAS_EFORMAT, "%s: field '%s' must be %s", where, key, what);
	return 1;
}

int atlas_json_int(struct json_object *obj, const char *key, const char *where, int64_t *out)
{
	struct json_object *v;
	int rc = get_typed(obj, key, where, json_type_int, "an integer", &v);
	if (rc == 1)
		*out = json_object_get_int64(v);
	return rc;
}

int atlas_json_double(struct json_object *obj, const char *key, const char *where, double *out)
{
	struct json_object *v;
	if (!json_object_object_get_ex(obj, key, &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return atlas_error(ATLAS_EFORMAT, "%s: field '%s' must be a number", where, key);
	*out = json_object_get_double(v);
	return 1;
}

int atlas_json_bool(struct json_object *obj, const char *key, const char *where, bool *out)
{
	struct json_object *v;
	int rc = get_typed(obj, key, where, json_type_boolean, "true or false", &v);
	if (rc == 1)
		*out = json_object_get_boolean(v);
	return rc;
}

int atlas_json_string(struct json_object *obj, const char *key, const char *where, const char **out)
{
	struct json_object *v;
	int rc = get_typed(obj, key, where, json_type_string, "a string", &v);
	if (rc == 1)
		*out = json_object_get_string(v);
	return rc;
}

int atlas_json_object(struct json_object *obj, const char *key, const char *where,
		      struct json_object **out)
{
	struct json_object *v;
	int rc = get_typed(obj, key, where, json_type_object, "an object", &v);
	if (rc == 1)
		*out = v;
	return rc;
}

int atlas_json_array(struct json_object *obj, const char *key, const char *where,
		     struct json_object **out)
{
	struct json_object *v;
	int rc = get_typed(obj, key, where, json_type_array, "an array", &v);
	if (rc == 1)
		*out = v;
	return rc;
}

struct json_object *atlas_json_parse_object(const char *text, size_t len, const char *where)
{
	struct json_tokener *tok;
	struct json_object *obj;
	enum json_tokener_error err;
	size_t end;

	if (len > (size_t)INT32_MAX - 1) {
		atlas_error(ATLAS_EFORMAT, "%s: JSON text too large (%zu bytes)", where, len);
		return NULL;
	}
	tok = json_tokener_new();
	if (!tok) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	/* Include the terminating NUL so a top-level value that ends at the
	 * end of the text (a bare number) is complete rather than pending. */
	obj = json_tokener_parse_ex(tok, text, (int)len + 1);
	err = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!obj && err == json_tokener_success) { /* the text was "null" */
		atlas_error(ATLAS_EFORMAT, "%s: JSON is not an object", where);
		return NULL;
	}
	if (!obj) {
		if (err == json_tokener_continue || end >= len)
			atlas_error(ATLAS_EFORMAT, "%s: invalid JSON: unexpected end of text",
				    where);
		else
			atlas_error(ATLAS_EFORMAT, "%s: invalid JSON at byte %zu: %s", where, end,
				    json_tokener_error_desc(err));
		return NULL;
	}
	if (!json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		atlas_error(ATLAS_EFORMAT, "%s: JSON is not an object", where);
		return NULL;
	}
	for (size_t i = end; i < len; i++) {
		char c = text[i];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\0') {
			json_object_put(obj);
			atlas_error(
			    ATLAS_EFORMAT,
			    "%s: invalid JSON at byte %zu: unexpected text after the object", where,
			    i);
			return NULL;
		}
	}
	return obj;
}
