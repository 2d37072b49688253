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
 * rendering then fails with ATLAS_EINVAL and that message. */
#ifndef ATLAS_TOK_CHAT_H
#define ATLAS_TOK_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "tok.h"

struct json_object; /* json-c */

/* Does the tokenizer have a chat template? */
bool atlas_chat_has_template(const struct atlas_tok *tok);

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

#endif
