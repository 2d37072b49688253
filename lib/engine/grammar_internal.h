/* grammar_internal.h - what grammar_schema.c and grammar_regex.c share:
 * a growable text buffer that remembers its first failure (so the
 * converters can emit text without checking every append), the GBNF
 * spelling of code points, and the regex-to-expression converter that a
 * JSON schema's "pattern" reuses. */
#ifndef ATLAS_ENGINE_GRAMMAR_INTERNAL_H
#define ATLAS_ENGINE_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gbuf {
	char *p;    /* the text, NUL-terminated while not failed */
	size_t n;   /* bytes used */
	size_t cap; /* bytes allocated */
	int err;    /* first failure (ATLAS_ENOMEM, or a limit), 0 if none */
};

/* Appends; on failure they set b->err and do nothing more. */
void gbuf_add(struct gbuf *b, const char *s, size_t n);
void gbuf_puts(struct gbuf *b, const char *s);
void gbuf_printf(struct gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Code point cp as it may appear inside a GBNF "literal" or [class]. */
void gbuf_cp(struct gbuf *b, uint32_t cp);
/* Bytes s[n] as a GBNF "literal" (quotes included). */
void gbuf_literal(struct gbuf *b, const char *s, size_t n);

/* Append to b a GBNF expression (no rule definition, may be wrapped in
 * parentheses) matching exactly the strings of regex `re`. With
 * json_string, the strings are matched as the inside of a JSON string
 * literal: '"', '\\' and control characters are matched in their escaped
 * forms. 0, or an ATLAS_E* code with a message. */
int atlas_regex_expr(struct gbuf *b, const char *re, bool json_string);

#endif
