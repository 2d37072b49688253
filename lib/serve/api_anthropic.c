/* api_anthropic.c - POST /v1/messages (Anthropic Messages): the system
 * prompt and messages (text blocks) become the chat template's messages;
 * generation and the response shapes are in job.c. */
#include <string.h>

#include "serve_internal.h"

/* Text of an Anthropic content value: a string or a list of text blocks. */
static json_object *block_text(json_object *v, const char *where, struct serve_err *e)
{
	if (json_object_is_type(v, json_type_string))
		return json_object_get(v);
	if (!json_object_is_type(v, json_type_array)) {
		serve_err_set(e, 400, where, "invalid_type", "'%s' must be a string or a list of content blocks",
			      where);
		return NULL;
	}
	struct sbuf b = {0};
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		json_object *blk = json_object_array_get_idx(v, i), *type, *text;
		if (!json_object_is_type(blk, json_type_object) ||
		    !json_object_object_get_ex(blk, "type", &type) ||
		    !json_object_is_type(type, json_type_string)) {
			sbuf_free(&b);
			serve_err_set(e, 400, where, "invalid_type", "'%s[%zu]' must be a content block with a 'type'",
				      where, i);
			return NULL;
		}
		if (strcmp(json_object_get_string(type), "text")) {
			serve_err_set(e, 400, where, "unsupported_value",
				      "content blocks of type '%s' are not supported (only 'text')",
				      json_object_get_string(type));
			sbuf_free(&b);
			return NULL;
		}
		if (!json_object_object_get_ex(blk, "text", &text) ||
		    !json_object_is_type(text, json_type_string)) {
			sbuf_free(&b);
			serve_err_set(e, 400, where, "invalid_type", "'%s[%zu].text' must be a string", where, i);
			return NULL;
		}
		sbuf_add(&b, json_object_get_string(text), (size_t)json_object_get_string_len(text));
	}
	json_object *o = json_object_new_string_len(b.p ? b.p : "", (int)b.len);
	sbuf_free(&b);
	return o;
}

static json_object *message(const char *role, json_object *content)
{
	json_object *m = json_object_new_object();
	json_object_object_add(m, "role", json_object_new_string(role));
	json_object_object_add(m, "content", content);
	return m;
}

/* The chat-template request for an Anthropic body, or NULL with e set. */
static json_object *to_chat(json_object *b, struct serve_err *e)
{
	json_object *msgs, *sys, *out = json_object_new_object(), *list = json_object_new_array();
	json_object_object_add(out, "messages", list);
	json_object_object_add(out, "add_generation_prompt", json_object_new_boolean(1));
	if (json_object_object_get_ex(b, "system", &sys) && sys) {
		json_object *t = block_text(sys, "system", e);
		if (!t)
			goto fail;
		json_object_array_add(list, message("system", t));
	}
	if (!json_object_object_get_ex(b, "messages", &msgs) || !msgs) {
		serve_err_set(e, 400, "messages", "missing_field", "'messages' is required");
		goto fail;
	}
	if (!json_object_is_type(msgs, json_type_array)) {
		serve_err_set(e, 400, "messages", "invalid_type", "'messages' must be a list");
		goto fail;
	}
	for (size_t i = 0; i < json_object_array_length(msgs); i++) {
		json_object *m = json_object_array_get_idx(msgs, i), *role, *content;
		if (!json_object_is_type(m, json_type_object) ||
		    !json_object_object_get_ex(m, "role", &role) ||
		    !json_object_is_type(role, json_type_string)) {
			serve_err_set(e, 400, "messages", "invalid_type",
				      "'messages[%zu]' must be an object with a string 'role'", i);
			goto fail;
		}
		const char *r = json_object_get_string(role);
		if (strcmp(r, "user") && strcmp(r, "assistant")) {
			serve_err_set(e, 400, "messages", "invalid_value",
				      "'messages[%zu].role' must be 'user' or 'assistant', not '%s'", i, r);
			goto fail;
		}
		if (!json_object_object_get_ex(m, "content", &content) || !content) {
			serve_err_set(e, 400, "messages", "missing_field",
				      "'messages[%zu].content' is required", i);
			goto fail;
		}
		json_object *t = block_text(content, "messages", e);
		if (!t)
			goto fail;
		json_object_array_add(list, message(r, t));
	}
	return out;
fail:
	json_object_put(out);
	return NULL;
}

enum MHD_Result serve_messages(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	struct serve_gen g;
	if (!serve_ready(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e);
	if (!b)
		return serve_reply_err(c, &e);
	json_object *chat = NULL;
	int rc = serve_parse_gen(s, b, JOB_MESSAGES, &g, &e);
	if (!rc && !(chat = to_chat(b, &e)))
		rc = -1;
	if (!rc)
		rc = serve_chat_prompt(s, chat, &g, &e);
	json_object_put(chat);
	if (rc) {
		serve_gen_free(&g);
		json_object_put(b);
		return serve_reply_err(c, &e);
	}
	enum MHD_Result mr = serve_run_job(c, JOB_MESSAGES, &g);
	json_object_put(b);
	return mr;
}
