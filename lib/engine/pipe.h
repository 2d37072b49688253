/* pipe.h - the text formats of the atlas-run pipe stages.
 *
 * Plain: one document per line, token ids in decimal separated by single
 * spaces. JSONL: one object per line, {"ids": [...]} or {"text": "..."}.
 * See DESIGN.md ("The pipe format"). */
#ifndef ATLAS_ENGINE_PIPE_H
#define ATLAS_ENGINE_PIPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Parse a line of ids ("12 7 99": decimal ids in [0, INT32_MAX]
 * separated by spaces or tabs; a trailing CR/LF is fine) of `len` bytes;
 * line[len] need not be readable. Sets *ids (malloc'd, owned by the
 * caller; NULL when n is 0) and *n. ATLAS_EFORMAT with a message quoting
 * the bad word, or saying where a NUL byte is (a line read with getline
 * may hold one, and it must not end the line early); ATLAS_ENOMEM. */
int atlas_idline_parse_n(const char *line, size_t len, int32_t **ids, size_t *n);

/* The same for a NUL-terminated line (it cannot see past a NUL byte:
 * read lines go to atlas_idline_parse_n with their length). */
int atlas_idline_parse(const char *line, int32_t **ids, size_t *n);

/* Parse a JSONL object of `len` bytes and its array field `key` of ids
 * ({"ids": [1, 2]}) into *ids (malloc'd, owned by the caller) and *n.
 * Only whitespace may follow the object. ATLAS_EFORMAT (not one JSON
 * object, a NUL byte, the field missing or not ids), ATLAS_ENOMEM. */
int atlas_idline_parse_json_n(const char *line, size_t len, const char *key,
			      int32_t **ids, size_t *n);
/* The same for a NUL-terminated line. */
int atlas_idline_parse_json(const char *line, const char *key, int32_t **ids,
			    size_t *n);

/* Parse a JSONL object of `len` bytes and its string field `key`
 * ({"text": "..."}) into a malloc'd buffer owned by the caller (*out,
 * *olen; it may contain NUL bytes from \u0000 and is NUL-terminated).
 * Errors as atlas_idline_parse_json_n. */
int atlas_jsonl_get_string_n(const char *line, size_t len, const char *key, char **out,
			     size_t *olen);
/* The same for a NUL-terminated line. */
int atlas_jsonl_get_string(const char *line, const char *key, char **out,
			   size_t *len);

/* Write `len` bytes as a JSON string literal (quotes included). A byte
 * that is not part of valid UTF-8 is written as \u00XX (its Latin-1
 * reading), so the output stays valid JSON and the byte stays visible. */
void atlas_json_write_string(FILE *f, const char *s, size_t len);

#endif
