/* pipe.c - parse and write the pipe-stage line formats (see pipe.h). */
#include "pipe.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/utf8.h"

int atlas_idline_parse(const char *line, int32_t **ids, size_t *n)
{
	size_t cap = 0, cnt = 0;
	int32_t *v = NULL;
	const char *p = line;
	*ids = NULL;
	*n = 0;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long long x = strtoll(p, &end, 10);
		if (end == p || errno || x < 0 || x > INT32_MAX ||
		    (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n')) {
			int wl = 0;
			while (p[wl] && p[wl] != ' ' && p[wl] != '\t' && p[wl] != '\n' && wl < 40)
				wl++;
			free(v);
			return atlas_error(ATLAS_EFORMAT, "'%.*s' is not a token id", wl, p);
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
		p = end;
	}
	*ids = v;
	*n = cnt;
	return 0;
}

static int parse_obj(const char *line, const char *key, json_object **root,
		     json_object **val)
{
	*root = json_tokener_parse(line);
	if (!*root || !json_object_is_type(*root, json_type_object)) {
		json_object_put(*root);
		return atlas_error(ATLAS_EFORMAT, "not a JSON object");
	}
	if (!json_object_object_get_ex(*root, key, val)) {
		json_object_put(*root);
		return atlas_error(ATLAS_EFORMAT, "missing field '%s'", key);
	}
	return 0;
}

int atlas_idline_parse_json(const char *line, const char *key, int32_t **ids,
			    size_t *n)
{
	json_object *root, *arr;
	int rc = parse_obj(line, key, &root, &arr);
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

int atlas_jsonl_get_string(const char *line, const char *key, char **out, size_t *len)
{
	json_object *root, *s;
	int rc = parse_obj(line, key, &root, &s);
	if (rc)
		return rc;
	if (!json_object_is_type(s, json_type_string)) {
		json_object_put(root);
		return atlas_error(ATLAS_EFORMAT, "field '%s' must be a string", key);
	}
	*len = (size_t)json_object_get_string_len(s);
	*out = malloc(*len + 1);
	if (!*out) {
		json_object_put(root);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	memcpy(*out, json_object_get_string(s), *len);
	(*out)[*len] = '\0';
	json_object_put(root);
	return 0;
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
