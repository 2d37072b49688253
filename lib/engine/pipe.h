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

/* Parse a line of ids ("12 7 99", spaces or tabs, trailing newline ok).
 * Sets *ids (malloc'd, owned by the caller; NULL when n is 0) and *n.
 * ATLAS_EFORMAT with a message quoting the bad word. */
int atlas_idline_parse(const char *line, int32_t **ids, size_t *n);

/* Parse a JSONL object's array field `key` of ids ({"ids": [1, 2]}). */
int atlas_idline_parse_json(const char *line, const char *key, int32_t **ids,
			    size_t *n);

/* Parse a JSONL object's string field `key` ({"text": "..."}) into a
 * malloc'd buffer (*out, *len; may contain NUL bytes). */
int atlas_jsonl_get_string(const char *line, const char *key, char **out,
			   size_t *len);

/* Write `len` bytes as a JSON string literal (quotes included). A byte
 * that is not part of valid UTF-8 is written as \u00XX (its Latin-1
 * reading), so the output stays valid JSON and the byte stays visible. */
void atlas_json_write_string(FILE *f, const char *s, size_t len);

#endif
