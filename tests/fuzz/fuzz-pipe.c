/* fuzz-pipe.c - libFuzzer entry point for the atlas-run pipe formats
 * (lib/engine/pipe.c).
 *
 * Each input is one line, given to the length-aware parsers in a buffer
 * of exactly its size (so ASan sees any read past the length) and to the
 * C-string parsers NUL-terminated; both must agree when the line has no
 * NUL byte, ids must be in range, and a line with a NUL byte must be
 * refused. The line is also written as a JSON string, which must parse
 * back (strict JSON) and round-trip exactly when it is UTF-8. */
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/utf8.h"
#include "../../lib/engine/pipe.h"

static void check_ids(int rc, const int32_t *ids, size_t n)
{
	if (rc)
		return;
	if (n && !ids)
		abort();
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0)
			abort();
}

static void same_ids(int rc1, const int32_t *a, size_t na, int rc2, const int32_t *b, size_t nb)
{
	if (rc1 != rc2 || (!rc1 && (na != nb || (na && memcmp(a, b, na * sizeof(*a))))))
		abort();
}

static int is_utf8(const uint8_t *s, size_t len)
{
	uint32_t cp;
	for (size_t i = 0; i < len;) {
		int k = atlas_utf8_decode(s + i, len - i, &cp);
		if (!k)
			return 0;
		i += (size_t)k;
	}
	return 1;
}

/* atlas_json_write_string's output must be strict JSON, equal to the
 * input when that is UTF-8. */
static void check_write(const uint8_t *data, size_t size)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct json_tokener *tok;
	struct json_object *o;

	if (!f)
		return;
	atlas_json_write_string(f, (const char *)data, size);
	fclose(f);
	tok = json_tokener_new();
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	o = json_tokener_parse_ex(tok, buf, (int)len + 1);
	if (!o || !json_object_is_type(o, json_type_string))
		abort();
	if (is_utf8(data, size) && ((size_t)json_object_get_string_len(o) != size ||
				    memcmp(json_object_get_string(o), data, size)))
		abort();
	json_object_put(o);
	json_tokener_free(tok);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *exact = malloc(size ? size : 1), *cstr = malloc(size + 1);
	int has_nul = memchr(data, '\0', size) != NULL;
	int32_t *a, *b;
	size_t na, nb;
	int rc1, rc2;

	if (!exact || !cstr)
		abort();
	memcpy(exact, data, size);
	memcpy(cstr, data, size);
	cstr[size] = '\0';

	rc1 = atlas_idline_parse_n(exact, size, &a, &na);
	check_ids(rc1, a, na);
	if (has_nul && !rc1)
		abort();
	if (!rc1 && !na && a)
		abort();
	if (!has_nul) {
		rc2 = atlas_idline_parse(cstr, &b, &nb);
		same_ids(rc1, a, na, rc2, b, nb);
		free(b);
	}
	free(a);

	rc1 = atlas_idline_parse_json_n(exact, size, "ids", &a, &na);
	check_ids(rc1, a, na);
	if (has_nul && !rc1)
		abort();
	if (!has_nul) {
		rc2 = atlas_idline_parse_json(cstr, "ids", &b, &nb);
		same_ids(rc1, a, na, rc2, b, nb);
		free(b);
	}
	free(a);

	for (int k = 0; k < 2; k++) {
		const char *key = k ? "prompt" : "text";
		char *s1 = NULL, *s2 = NULL;
		size_t l1 = 0, l2 = 0;
		rc1 = atlas_jsonl_get_string_n(exact, size, key, &s1, &l1);
		if (!rc1 && (has_nul || s1[l1] != '\0'))
			abort();
		if (!has_nul) {
			rc2 = atlas_jsonl_get_string(cstr, key, &s2, &l2);
			if (rc1 != rc2 || (!rc1 && (l1 != l2 || memcmp(s1, s2, l1))))
				abort();
			if (!rc2)
				free(s2);
		}
		if (!rc1)
			free(s1);
	}

	check_write(data, size);
	free(exact);
	free(cstr);
	return 0;
}
