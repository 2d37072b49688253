/* pipe.c - parse and write the pipe-stage line formats (see pipe.h). */
#include "pipe.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/utf8.h"

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* ATLAS_EFORMAT if the `len` bytes at `line` hold a NUL byte. */
static int check_nul(const char *line, size_t len)
{
	const char *z = memchr(line, '\0', len);
	if (z)
		return atlas_error(ATLAS_EFORMAT, "the line has a NUL byte at byte %zu (of %zu)",
				   (size_t)(z - line) + 1, len);
	return 0;
}

int atlas_idline_parse_n(const char *line, size_t len, int32_t **ids, size_t *n)
{
	size_t cap = 0, cnt = 0, i = 0;
	int32_t *v = NULL;
	int rc;
	*ids = NULL;
	*n = 0;
	if ((rc = check_nul(line, len)))
		return rc;
	for (;;) {
		while (i < len && is_space(line[i]))
			i++;
		if (i == len)
			break;
		size_t w = i;
		int64_t x = 0;
		while (i < len && line[i] >= '0' && line[i] <= '9' && x <= INT32_MAX)
			x = x * 10 + (line[i++] - '0');
		if (i == w || x > INT32_MAX || (i < len && !is_space(line[i]))) {
			size_t wl = 0;
			while (w + wl < len && !is_space(line[w + wl]) && wl < 40)
				wl++;
			free(v);
			return atlas_error(ATLAS_EFORMAT, "'%.*s' is not a token id", (int)wl,
					   line + w);
		}
		if (cnt == cap) {
			cap = cap ? cap * 2 : 64;
			int32_t *nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				return atlas_error(ATLAS_ENOMEM, "out of memory");
			}
			v = nv;
		}
		v[cnt++] = (int32_t)x;
	}
	*ids = v;
	*n = cnt;
	return 0;
}

int atlas_idline_parse(const char *line, int32_t **ids, size_t *n)
{
	return atlas_idline_parse_n(line, strlen(line), ids, n);
}

/* Parse `len` bytes as one JSON object followed by nothing but
 * whitespace, and find its field `key`. *root is the caller's. */
static int parse_obj(const char *line, size_t len, const char *key, json_object **root,
		     json_object **val)
{
	struct json_tokener *tok;
	size_t end = 0;
	int rc;

	*root = NULL;
	if ((rc = check_nul(line, len)))
		return rc;
	if (len > INT32_MAX)
		return atlas_error(ATLAS_EFORMAT, "the line is too long (%zu bytes)", len);
	if (!(tok = json_tokener_new()))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	*root = json_tokener_parse_ex(tok, line, (int)len);
	if (*root)
		end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!*root || !json_object_is_type(*root, json_type_object)) {
		json_object_put(*root);
		*root = NULL;
		return atlas_error(ATLAS_EFORMAT, "not a JSON object");
	}
	while (end < len && is_space(line[end]))
		end++;
	if (end < len) {
		json_object_put(*root);
		*root = NULL;
		return atlas_error(ATLAS_EFORMAT, "text after the JSON object (byte %zu)", end + 1);
	}
	if (!json_object_object_get_ex(*root, key, val)) {
		json_object_put(*root);
		*root = NULL;
		return atlas_error(ATLAS_EFORMAT, "missing field '%s'", key);
	}
	return 0;
}

int atlas_idline_parse_json_n(const char *line, size_t len, const char *key, int32_t **ids,
			      size_t *n)
{
	json_object *root, *arr;
	int rc = parse_obj(line, len, key, &root, &arr);
	*ids = NULL;
	*n = 0;
	if (rc)
		return rc;
	if (!json_object_is_type(arr, json_type_array)) {
		json_object_put(root);
		return atlas_error(ATLAS_EFORMAT, "field '%s' must be an array of token ids", key);
	}
	size_t cnt = json_object_array_length(arr);
	int32_t *v = malloc((cnt ? cnt : 1) * sizeof(*v));
	if (!v) {
		json_object_put(root);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < cnt; i++) {
		json_object *e = json_object_array_get_idx(arr, i);
		int64_t x = json_object_get_int64(e);
		if (!json_object_is_type(e, json_type_int) || x < 0 || x > INT32_MAX) {
			free(v);
			json_object_put(root);
			return atlas_error(ATLAS_EFORMAT, "field '%s': element %zu is not a token id",
					   key, i);
		}
		v[i] = (int32_t)x;
	}
	json_object_put(root);
	*ids = v;
	*n = cnt;
	return 0;
}

int atlas_idline_parse_json(const char *line, const char *key, int32_t **ids, size_t *n)
{
	return atlas_idline_parse_json_n(line, strlen(line), key, ids, n);
}

int atlas_jsonl_get_string_n(const char *line, size_t len, const char *key, char **out,
			     size_t *olen)
{
	json_object *root, *s;
	int rc = parse_obj(line, len, key, &root, &s);
	if (rc)
		return rc;
	if (!json_object_is_type(s, json_type_string)) {
		json_object_put(root);
		return atlas_error(ATLAS_EFORMAT, "field '%s' must be a string", key);
	}
	*olen = (size_t)json_object_get_string_len(s);
	*out = malloc(*olen + 1);
	if (!*out) {
		json_object_put(root);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	memcpy(*out, json_object_get_string(s), *olen);
	(*out)[*olen] = '\0';
	json_object_put(root);
	return 0;
}

int atlas_jsonl_get_string(const char *line, const char *key, char **out, size_t *len)
{
	return atlas_jsonl_get_string_n(line, strlen(line), key, out, len);
}

void atlas_json_write_string(FILE *f, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	fputc('"', f);
	for (size_t i = 0; i < len;) {
		unsigned char ch = u[i];
		uint32_t cp;
		int n;
		if (ch == '"' || ch == '\\') {
			fputc('\\', f);
			fputc(ch, f);
			i++;
		} else if (ch == '\n') { fputs("\\n", f); i++; }
		else if (ch == '\r') { fputs("\\r", f); i++; }
		else if (ch == '\t') { fputs("\\t", f); i++; }
		else if (ch < 0x20) { fprintf(f, "\\u%04x", ch); i++; }
		else if ((n = atlas_utf8_decode(u + i, len - i, &cp)) > 0) {
			fwrite(u + i, 1, (size_t)n, f);
			i += (size_t)n;
		} else { /* a stray byte: its Latin-1 reading */
			fprintf(f, "\\u%04x", ch);
			i++;
		}
	}
	fputc('"', f);
}
