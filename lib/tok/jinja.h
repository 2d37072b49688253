/* jinja.h - a Jinja2 template interpreter for chat templates.
 *
 * Parses a template once into an AST (the whitespace rules are those of
 * transformers' environment: trim_blocks and lstrip_blocks on, one
 * trailing newline of the source dropped) and renders it any number of
 * times, from any number of threads, with variables given as a json-c
 * object. Values follow Python semantics (str(), repr(), json.dumps with
 * ensure_ascii=False) because Python Jinja2 is the reference. Only
 * lib/tok/chat.c (and tests/fuzz/fuzz-jinja.c) use this header. */
#ifndef ATLAS_TOK_JINJA_H
#define ATLAS_TOK_JINJA_H

#include <stddef.h>
#include <stdint.h>

struct json_object;
struct atlas_jinja; /* a parsed template, immutable */

/* Parse `len` bytes of template source. On success returns 0 and sets
 * *out (owned by the caller, atlas_jinja_free). On failure returns
 * ATLAS_EFORMAT (syntax error) or ATLAS_EUNSUPPORTED (a construct this
 * interpreter does not have) with a message naming the line. */
int atlas_jinja_parse(const char *src, size_t len, struct atlas_jinja **out);
void atlas_jinja_free(struct atlas_jinja *t);

/* A template comes with the model, so it is untrusted: parsing refuses
 * blocks, brackets and chained operators nested deeper than
 * ATLAS_JINJA_MAX_PARSE_DEPTH (ATLAS_EUNSUPPORTED), rendering stops at
 * ATLAS_JINJA_MAX_EVAL_DEPTH nested evaluations (macro calls included)
 * and refuses values (lists, dicts) nested deeper than
 * ATLAS_JINJA_MAX_VALUE_DEPTH, so no template overflows the stack. The
 * templates of Qwen3, Llama 3, Gemma 3 and DeepSeek V3 need at most 24
 * levels of the first two. */
#define ATLAS_JINJA_MAX_PARSE_DEPTH 256
#define ATLAS_JINJA_MAX_EVAL_DEPTH 1024
#define ATLAS_JINJA_MAX_VALUE_DEPTH 256

/* What one render may spend, so that no template can loop, build or
 * search its way to a hang or an out-of-memory kill. A render that
 * passes a limit fails with ATLAS_EINVAL and a message naming the limit
 * and the template line, e.g. "chat template line 3: template render
 * exceeded 10000000 steps". The defaults are over ten times what the
 * Qwen3 template needs for a 1,000-turn, 2.6 MB tool-calling
 * conversation (0.7 million steps, 22 MB of memory). */
struct atlas_jinja_limits {
	int64_t max_steps; /* evaluation steps: one per expression, statement, loop
			      iteration and list item built, and one per 64 bytes
			      copied, written or searched; default 10,000,000 */
	size_t max_output; /* bytes of the output and of any one string the
			      template builds; default 64 MiB */
	size_t max_memory; /* bytes the render may hold at once (values, buffers);
			      default 512 MiB */
};

/* The defaults above. */
struct atlas_jinja_limits atlas_jinja_default_limits(void);

/* Render with the members of `vars` (a JSON object, not modified) as
 * top-level variables, within the default limits. On success returns 0
 * and sets *out (malloc'd, NUL-terminated, owned by the caller) and
 * *len. Errors: ATLAS_EINVAL for a runtime error or a passed limit
 * (message names the template line), or a call of raise_exception
 * (message: "chat template: " and its text); ATLAS_ENOMEM. */
int atlas_jinja_render(const struct atlas_jinja *t, struct json_object *vars, char **out,
		       size_t *len);

/* The same within `lim` (NULL: the defaults; a zero member: its default). */
int atlas_jinja_render_limited(const struct atlas_jinja *t, struct json_object *vars,
			       const struct atlas_jinja_limits *lim, char **out, size_t *len);

#endif
