/* jinja.h - a Jinja2 template interpreter for chat templates.
 *
 * Parses a template once into an AST (the whitespace rules are those of
 * transformers' environment: trim_blocks and lstrip_blocks on, one
 * trailing newline of the source dropped) and renders it any number of
 * times, from any number of threads, with variables given as a json-c
 * object. Values follow Python semantics (str(), repr(), json.dumps with
 * ensure_ascii=False) because Python Jinja2 is the reference. Only
 * lib/tok/chat.c uses this header. */
#ifndef ATLAS_TOK_JINJA_H
#define ATLAS_TOK_JINJA_H

#include <stddef.h>

struct json_object;
struct atlas_jinja; /* a parsed template, immutable */

/* Parse `len` bytes of template source. On success returns 0 and sets
 * *out (owned by the caller, atlas_jinja_free). On failure returns
 * ATLAS_EFORMAT (syntax error) or ATLAS_EUNSUPPORTED (a construct this
 * interpreter does not have) with a message naming the line. */
int atlas_jinja_parse(const char *src, size_t len, struct atlas_jinja **out);
void atlas_jinja_free(struct atlas_jinja *t);

/* Render with the members of `vars` (a JSON object, not modified) as
 * top-level variables. On success returns 0 and sets *out (malloc'd,
 * NUL-terminated, owned by the caller) and *len. Errors: ATLAS_EINVAL
 * for a runtime error (message names the template line) or a call of
 * raise_exception (message: "chat template: " and its text). */
int atlas_jinja_render(const struct atlas_jinja *t, struct json_object *vars, char **out,
		       size_t *len);

#endif
