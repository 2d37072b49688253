/* chat.h - chat templates: the Jinja `chat_template` of tokenizer_config.json
 * rendered as transformers' apply_chat_template does (Python Jinja2
 * semantics are the ground truth).
 *
 * OWNERSHIP NOTE (for the helpers working in lib/tok at the same time):
 * this header and its implementation (lib/tok/chat.c, lib/tok/jinja*.c,
 * tests/unit/test-jinja*.c, tests/unit/test-chat*.c, tests/fixtures/chat/)
 * belong to the chat-template work; the tokenizer work does not edit them.
 *
 * The template is parsed once, when the tokenizer loads (a construct the
 * interpreter cannot handle is a load-time error naming it and its line),
 * and rendered per request. A template may call raise_exception(msg):
 * rendering then fails with ATLAS_EINVAL and that message. Rendering is
 * bounded by the limits of atlas_chat_set_limits (process-wide). */
#ifndef ATLAS_TOK_CHAT_H
#define ATLAS_TOK_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok.h"

struct json_object; /* json-c */

/* Does the tokenizer have a chat template? */
bool atlas_chat_has_template(const struct atlas_tok *tok);

/* The chat template's text, or NULL (no template); owned by the tokenizer. */
const char *atlas_chat_template_source(const struct atlas_tok *tok);

/* Render the chat template with the variables of `request`, a JSON object
 * shaped like an OpenAI request body: "messages" (required: an array of
 * {"role", "content", ...} objects, content a string or a list of
 * {"type": "text", "text": ...} parts), optional "tools",
 * "add_generation_prompt" (default true), and any other keys (e.g.
 * "enable_thinking"), all passed to the template as variables, plus
 * bos_token / eos_token from the tokenizer config. On success returns 0
 * and sets *out (malloc'd, NUL-terminated, owned by the caller) and *len.
 * Errors: ATLAS_ENOTFOUND (no template), ATLAS_EINVAL (bad request shape
 * or raise_exception, with its message). Thread-safe. */
int atlas_chat_render(const struct atlas_tok *tok, struct json_object *request,
		      char **out, size_t *len);

/* What one render of a chat template may spend (the template comes with
 * the model, so it is untrusted). A render that passes a limit fails with
 * ATLAS_EINVAL and a message naming the limit and the template line. A
 * zero member means its default. */
struct atlas_chat_limits {
	int64_t max_steps; /* evaluation steps (one per expression, statement,
			      loop iteration, and per 64 bytes copied); default
			      10,000,000 */
	size_t max_output; /* bytes of the output and of any one string the
			      template builds; default 64 MiB */
	size_t max_memory; /* bytes a render may hold at once; default 512 MiB */
};

/* Set the limits of every later atlas_chat_render in the process (NULL:
 * the defaults). Meant to be called once at startup, before requests are
 * served; it is nevertheless safe against concurrent renders, each of
 * which uses the limits set when it starts. Cannot fail. */
void atlas_chat_set_limits(const struct atlas_chat_limits *lim);

#endif
