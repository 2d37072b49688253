/* pipe.c - parse and write the pipe-stage line formats (see pipe.h). */
#include "pipe.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

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

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
	size_t n;
	uint32_t cp;
	if (s[0] < 0x80) return 1;
	if ((s[0] & 0xe0) == 0xc0) { n = 2; cp = s[0] & 0x1f; }
	else if ((s[0] & 0xf0) == 0xe0) { n = 3; cp = s[0] & 0x0f; }
	else if ((s[0] & 0xf8) == 0xf0) { n = 4; cp = s[0] & 0x07; }
	else return 0;
	if (n > avail) return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80) return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

void atlas_json_write_string(FILE *f, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	fputc('"', f);
	for (size_t i = 0; i < len;) {
		unsigned char ch = u[i];
		size_t n;
		if (ch == '"' || ch == '\\') {
			fputc('\\', f);
			fputc(ch, f);
			i++;
		} else if (ch == '\n') { fputs("\\n", f); i++; }
		else if (ch == '\r') { fputs("\\r", f); i++; }
		else if (ch == '\t') { fputs("\\t", f); i++; }
		else if (ch < 0x20) { fprintf(f, "\\u%04x", ch); i++; }
		else if ((n = utf8_len(u + i, len - i)) > 0) {
			fwrite(u + i, 1, n, f);
			i += n;
		} else { /* a stray byte: its Latin-1 reading */
			fprintf(f, "\\u%04x", ch);
			i++;
		}
	}
	fputc('"', f);
}
