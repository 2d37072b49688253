/* api_anthropic.c - POST /v1/messages (Anthropic Messages) and
 * /v1/messages/count_tokens: the system prompt, the messages (text,
 * tool_use and tool_result blocks), tools, tool_choice and thinking become
 * an OpenAI-shaped chat request for the template (and agent.c);
 * generation and the response shapes are in job.c. */
#include <string.h>

#include "serve_internal.h"

/* Text of an Anthropic text block list item, or NULL with e set. */
static const char *block_type(json_object *blk, size_t i, const char *where, struct serve_err *e)
{
	json_object *type;
	if (!json_object_is_type(blk, json_type_object) ||
	    !json_object_object_get_ex(blk, "type", &type) ||
	    !json_object_is_type(type, json_type_string)) {
		serve_err_set(e, 400, where, "invalid_type", "'%s[%zu]' must be a content block with a 'type'",
			      where, i);
		return NULL;
	}
	return json_object_get_string(type);
}

static int text_of(json_object *blk, size_t i, const char *where, struct sbuf *b,
		   struct serve_err *e)
{
	json_object *text;
	if (!json_object_object_get_ex(blk, "text", &text) ||
	    !json_object_is_type(text, json_type_string))
		return serve_err_set(e, 400, where, "invalid_type", "'%s[%zu].text' must be a string",
				     where, i);
	sbuf_add(b, json_object_get_string(text), (size_t)json_object_get_string_len(text));
	return 0;
}

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
		json_object *blk = json_object_array_get_idx(v, i);
		const char *t = block_type(blk, i, where, e);
		if (!t) {
			sbuf_free(&b);
			return NULL;
		}
		if (strcmp(t, "text")) {
			serve_err_set(e, 400, where, "unsupported_value",
				      "content blocks of type '%s' are not supported here (only 'text')", t);
			sbuf_free(&b);
			return NULL;
		}
		if (text_of(blk, i, where, &b, e)) {
			sbuf_free(&b);
			return NULL;
		}
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

/* An assistant turn's blocks: text (joined), tool_use (tool calls);
 * thinking blocks are history the template does not take. */
static int assistant_turn(json_object *list, json_object *content, size_t mi, struct serve_err *e)
{
	struct sbuf text = {0};
	json_object *calls = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(content); i++) {
		json_object *blk = json_object_array_get_idx(content, i), *id, *name, *input;
		const char *t = block_type(blk, i, "messages", e);
		if (!t)
			goto fail;
		if (!strcmp(t, "text")) {
			if (text_of(blk, i, "messages", &text, e))
				goto fail;
		} else if (!strcmp(t, "tool_use")) {
			if (!json_object_object_get_ex(blk, "id", &id) ||
			    !json_object_is_type(id, json_type_string) ||
			    !json_object_object_get_ex(blk, "name", &name) ||
			    !json_object_is_type(name, json_type_string)) {
				serve_err_set(e, 400, "messages", "invalid_value",
					      "'messages[%zu].content[%zu]': a tool_use block needs a string "
					      "'id' and 'name'", mi, i);
				goto fail;
			}
			if (!json_object_object_get_ex(blk, "input", &input) || !input)
				input = NULL;
			json_object *fn = json_object_new_object(), *c = json_object_new_object();
			json_object_object_add(fn, "name", json_object_get(name));
			json_object_object_add(fn, "arguments",
					       input ? json_object_get(input) : json_object_new_object());
			json_object_object_add(c, "id", json_object_get(id));
			json_object_object_add(c, "type", json_object_new_string("function"));
			json_object_object_add(c, "function", fn);
			json_object_array_add(calls, c);
		} else if (strcmp(t, "thinking") && strcmp(t, "redacted_thinking")) {
			serve_err_set(e, 400, "messages", "unsupported_value",
				      "'messages[%zu]': assistant content blocks of type '%s' are not supported",
				      mi, t);
			goto fail;
		}
	}
	json_object *m = message("assistant", json_object_new_string_len(text.p ? text.p : "",
									  (int)text.len));
	if (json_object_array_length(calls))
		json_object_object_add(m, "tool_calls", calls);
	else
		json_object_put(calls);
	json_object_array_add(list, m);
	sbuf_free(&text);
	return 0;
fail:
	sbuf_free(&text);
	json_object_put(calls);
	return -1;
}

/* A user turn's blocks: each tool_result becomes a "tool" message (in
 * order), the text blocks one user message after them. */
static int user_turn(json_object *list, json_object *content, size_t mi, struct serve_err *e)
{
	struct sbuf text = {0};
	for (size_t i = 0; i < json_object_array_length(content); i++) {
		json_object *blk = json_object_array_get_idx(content, i), *id, *res;
		const char *t = block_type(blk, i, "messages", e);
		if (!t)
			goto fail;
		if (!strcmp(t, "text")) {
			if (text_of(blk, i, "messages", &text, e))
				goto fail;
			continue;
		}
		if (strcmp(t, "tool_result")) {
			serve_err_set(e, 400, "messages", "unsupported_value",
				      "'messages[%zu]': user content blocks of type '%s' are not supported",
				      mi, t);
			goto fail;
		}
		if (!json_object_object_get_ex(blk, "tool_use_id", &id) ||
		    !json_object_is_type(id, json_type_string)) {
			serve_err_set(e, 400, "messages", "invalid_value",
				      "'messages[%zu].content[%zu]': a tool_result block needs a string "
				      "'tool_use_id'", mi, i);
			goto fail;
		}
		json_object *r = NULL;
		if (!json_object_object_get_ex(blk, "content", &res) || !res)
			r = json_object_new_string("");
		else if (!(r = block_text(res, "messages", e)))
			goto fail;
		json_object *m = message("tool", r);
		json_object_object_add(m, "tool_call_id", json_object_get(id));
		json_object_array_add(list, m);
	}
	if (text.len || !json_object_array_length(content))
		json_object_array_add(list, message("user", json_object_new_string_len(
								text.p ? text.p : "", (int)text.len)));
	sbuf_free(&text);
	return 0;
fail:
	sbuf_free(&text);
	return -1;
}

/* Anthropic tools ({name, description, input_schema}) in OpenAI's shape. */
static int tools_of(json_object *b, json_object *out, struct serve_err *e)
{
	json_object *tools, *list;
	if (!json_object_object_get_ex(b, "tools", &tools) || !tools)
		return 0;
	if (!json_object_is_type(tools, json_type_array))
		return serve_err_set(e, 400, "tools", "invalid_type", "'tools' must be a list");
	list = json_object_new_array();
	json_object_object_add(out, "tools", list);
	for (size_t i = 0; i < json_object_array_length(tools); i++) {
		json_object *t = json_object_array_get_idx(tools, i), *name, *desc, *schema;
		if (!json_object_is_type(t, json_type_object) ||
		    !json_object_object_get_ex(t, "name", &name) ||
		    !json_object_is_type(name, json_type_string))
			return serve_err_set(e, 400, "tools", "invalid_type",
					     "'tools[%zu]' must be an object with a string 'name'", i);
		if (!json_object_object_get_ex(t, "input_schema", &schema) || !schema ||
		    !json_object_is_type(schema, json_type_object))
			return serve_err_set(e, 400, "tools", "invalid_type",
					     "'tools[%zu].input_schema' must be an object (a JSON schema)", i);
		json_object *fn = json_object_new_object(), *w = json_object_new_object();
		json_object_object_add(fn, "name", json_object_get(name));
		if (json_object_object_get_ex(t, "description", &desc) && desc)
			json_object_object_add(fn, "description", json_object_get(desc));
		json_object_object_add(fn, "parameters", json_object_get(schema));
		json_object_object_add(w, "type", json_object_new_string("function"));
		json_object_object_add(w, "function", fn);
		json_object_array_add(list, w);
	}
	return 0;
}

/* Field `key` of b as an object with a string "type": 1 with *obj and *t
 * set, 0 when absent (or null), -1 with e set when malformed. */
static int typed_field(json_object *b, const char *key, json_object **obj, const char **t,
		       struct serve_err *e)
{
	json_object *type;
	if (!json_object_object_get_ex(b, key, obj) || !*obj)
		return 0;
	if (!json_object_is_type(*obj, json_type_object) ||
	    !json_object_object_get_ex(*obj, "type", &type) ||
	    !json_object_is_type(type, json_type_string))
		return serve_err_set(e, 400, key, "invalid_type", "'%s' must be an object with a 'type'",
				     key);
	*t = json_object_get_string(type);
	return 1;
}

/* tool_choice {type: auto|any|tool|none, name, disable_parallel_tool_use}
 * as OpenAI's tool_choice and parallel_tool_calls. */
static int choice_of(json_object *b, json_object *out, struct serve_err *e)
{
	json_object *tc, *name, *dp;
	const char *t;
	int r = typed_field(b, "tool_choice", &tc, &t, e);
	if (r <= 0)
		return r;
	if (!strcmp(t, "auto") || !strcmp(t, "none")) {
		json_object_object_add(out, "tool_choice", json_object_new_string(t));
	} else if (!strcmp(t, "any")) {
		json_object_object_add(out, "tool_choice", json_object_new_string("required"));
	} else if (!strcmp(t, "tool")) {
		if (!json_object_object_get_ex(tc, "name", &name) ||
		    !json_object_is_type(name, json_type_string))
			return serve_err_set(e, 400, "tool_choice", "invalid_value",
					     "'tool_choice' of type \"tool\" needs a string 'name'");
		json_object *fn = json_object_new_object(), *o = json_object_new_object();
		json_object_object_add(fn, "name", json_object_get(name));
		json_object_object_add(o, "type", json_object_new_string("function"));
		json_object_object_add(o, "function", fn);
		json_object_object_add(out, "tool_choice", o);
	} else {
		return serve_err_set(e, 400, "tool_choice", "invalid_value",
				     "'tool_choice.type' must be auto, any, tool or none, not \"%s\"", t);
	}
	if (json_object_object_get_ex(tc, "disable_parallel_tool_use", &dp) && dp &&
	    json_object_is_type(dp, json_type_boolean))
		json_object_object_add(out, "parallel_tool_calls",
				       json_object_new_boolean(!json_object_get_boolean(dp)));
	return 0;
}

/* thinking {type: enabled, budget_tokens} | {type: disabled}. */
static int thinking_of(json_object *b, json_object *out, struct serve_gen *g, struct serve_err *e)
{
	json_object *th, *budget;
	const char *t;
	int r = typed_field(b, "thinking", &th, &t, e);
	if (r <= 0)
		return r;
	if (!strcmp(t, "disabled")) {
		json_object_object_add(out, "enable_thinking", json_object_new_boolean(0));
		return 0;
	}
	if (strcmp(t, "enabled") && strcmp(t, "adaptive"))
		return serve_err_set(e, 400, "thinking", "invalid_value",
				     "'thinking.type' must be \"enabled\" or \"disabled\"");
	json_object_object_add(out, "enable_thinking", json_object_new_boolean(1));
	if (json_object_object_get_ex(th, "budget_tokens", &budget) && budget) {
		if (!json_object_is_type(budget, json_type_int) || json_object_get_int64(budget) < 1)
			return serve_err_set(e, 400, "thinking", "invalid_value",
					     "'thinking.budget_tokens' must be a positive integer");
		if (g)
			g->ag.reasoning_budget = json_object_get_int64(budget);
	}
	return 0;
}

json_object *serve_anthropic_chat(json_object *b, struct serve_gen *g, struct serve_err *e)
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
		if (json_object_is_type(content, json_type_array)) {
			int rc = !strcmp(r, "user") ? user_turn(list, content, i, e)
						    : assistant_turn(list, content, i, e);
			if (rc)
				goto fail;
			continue;
		}
		json_object *t = block_text(content, "messages", e);
		if (!t)
			goto fail;
		json_object_array_add(list, message(r, t));
	}
	if (tools_of(b, out, e) || choice_of(b, out, e) || thinking_of(b, out, g, e))
		goto fail;
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
	if (!serve_ready(c) || serve_refuse_embedding(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e);
	if (!b)
		return serve_reply_err(c, &e);
	json_object *chat = NULL;
	int rc = serve_parse_gen(s, b, JOB_MESSAGES, &g, &e);
	if (!rc && !(chat = serve_anthropic_chat(b, &g, &e)))
		rc = -1;
	if (!rc)
		rc = serve_agent_parse(s, chat, JOB_MESSAGES, &g, &e);
	if (!rc)
		rc = serve_chat_prompt(s, chat, &g, &e);
	json_object_put(chat);
	if (rc) {
		serve_gen_free(&g);
		json_object_put(b);
		return serve_reply_err(c, &e);
	}
	serve_agent_apply(s, &g);
	enum MHD_Result mr = serve_run_job(c, JOB_MESSAGES, &g);
	json_object_put(b);
	return mr;
}

/* POST /v1/messages/count_tokens: the prompt's tokens as /v1/messages
 * would render them (system, messages, tools, thinking), without
 * generating; equal to that request's usage.input_tokens when nothing of
 * it is in the prefix cache (the input tokens Anthropic counts exclude
 * cache reads). max_tokens is not needed. */
enum MHD_Result serve_count_tokens(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	struct serve_gen g;
	if (!serve_ready(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e);
	if (!b)
		return serve_reply_err(c, &e);
	memset(&g, 0, sizeof(g));
	json_object *chat = serve_anthropic_chat(b, &g, &e);
	int rc = chat ? 0 : -1;
	if (!rc)
		rc = serve_agent_parse(s, chat, JOB_MESSAGES, &g, &e);
	if (!rc)
		rc = serve_chat_prompt(s, chat, &g, &e);
	json_object_put(chat);
	json_object_put(b);
	if (rc) {
		serve_gen_free(&g);
		return serve_reply_err(c, &e);
	}
	json_object *o = json_object_new_object();
	json_object_object_add(o, "input_tokens", json_object_new_int64(g.sp.n_prompt));
	serve_gen_free(&g);
	return serve_reply_json(c, 200, o);
}
