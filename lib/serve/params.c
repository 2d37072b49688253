/* params.c - request bodies into generation parameters: JSON parsing,
 * typed fields (a wrong type is a 400 naming the field; unknown fields
 * are ignored), sampling defaults from generation_config.json, stop
 * strings, and prompts from text or through the chat template. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/error.h"
#include "../tok/chat.h"
#include "serve_internal.h"
#include "toolcall.h"

int serve_err_set(struct serve_err *e, unsigned status, const char *param, const char *code,
		  const char *fmt, ...)
{
	va_list ap;
	e->status = status;
	e->param = param;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -1;
}

json_object *serve_parse_body(struct conn *c, struct serve_err *e)
{
	if (!c->body.len) {
		serve_err_set(e, 400, NULL, "invalid_json", "the request body is empty (a JSON object is expected)");
		return NULL;
	}
	json_tokener *t = json_tokener_new();
	json_object *o = json_tokener_parse_ex(t, c->body.p, (int)c->body.len);
	enum json_tokener_error je = json_tokener_get_error(t);
	size_t off = t->char_offset;
	json_tokener_free(t);
	if (!o || je != json_tokener_success) {
		json_object_put(o);
		serve_err_set(e, 400, NULL, "invalid_json", "malformed JSON in the request body at byte %zu: %s",
			      off, json_tokener_error_desc(je == json_tokener_success ? json_tokener_continue : je));
		return NULL;
	}
	for (size_t i = off; i < c->body.len; i++)
		if (!strchr(" \t\r\n", c->body.p[i])) {
			json_object_put(o);
			serve_err_set(e, 400, NULL, "invalid_json",
				      "malformed JSON in the request body: text after the object at byte %zu", i);
			return NULL;
		}
	if (!json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		serve_err_set(e, 400, NULL, "invalid_json", "the request body must be a JSON object");
		return NULL;
	}
	return o;
}

/* Field getters: 1 present, 0 absent or null, -1 wrong type (e set). */
static int get_num(json_object *o, const char *k, double *out, struct serve_err *e)
{
	json_object *v;
	if (!json_object_object_get_ex(o, k, &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return serve_err_set(e, 400, k, "invalid_type", "'%s' must be a number", k);
	*out = json_object_get_double(v);
	return 1;
}

static int get_int(json_object *o, const char *k, int64_t *out, struct serve_err *e)
{
	json_object *v;
	if (!json_object_object_get_ex(o, k, &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_int)) {
		double d = json_object_is_type(v, json_type_double) ? json_object_get_double(v) : 0.5;
		if (d != floor(d) || fabs(d) > 9e15)
			return serve_err_set(e, 400, k, "invalid_type", "'%s' must be an integer", k);
	}
	*out = json_object_get_int64(v);
	return 1;
}

static int get_bool(json_object *o, const char *k, bool *out, struct serve_err *e)
{
	json_object *v;
	if (!json_object_object_get_ex(o, k, &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_boolean))
		return serve_err_set(e, 400, k, "invalid_type", "'%s' must be a boolean", k);
	*out = json_object_get_boolean(v);
	return 1;
}

/* Range check helper. */
static int range(struct serve_err *e, const char *k, double v, double lo, double hi)
{
	if (v < lo || v > hi || isnan(v))
		return serve_err_set(e, 400, k, "invalid_value", "'%s' must be in [%g, %g], not %g",
				     k, lo, hi, v);
	return 0;
}

static int parse_stop(json_object *o, const char *k, struct serve_gen *g, struct serve_err *e)
{
	json_object *v;
	if (!json_object_object_get_ex(o, k, &v) || !v)
		return 0;
	if (json_object_is_type(v, json_type_string)) {
		g->stop[g->n_stop++] = json_object_get_string(v);
		return 0;
	}
	if (!json_object_is_type(v, json_type_array))
		return serve_err_set(e, 400, k, "invalid_type", "'%s' must be a string or a list of strings", k);
	size_t n = json_object_array_length(v);
	if (n > SERVE_MAX_STOP)
		return serve_err_set(e, 400, k, "invalid_value", "'%s' has %zu entries, at most %d allowed",
				     k, n, SERVE_MAX_STOP);
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(v, i);
		if (!json_object_is_type(s, json_type_string))
			return serve_err_set(e, 400, k, "invalid_type",
					     "'%s' must be a string or a list of strings", k);
		if (json_object_get_string_len(s))
			g->stop[g->n_stop++] = json_object_get_string(s);
	}
	return 0;
}

/* logprobs, top_logprobs (chat), logprobs as a count and echo (completions). */
static int parse_logprobs(json_object *b, int kind, struct serve_gen *g, struct serve_err *e)
{
	int64_t iv;
	int r;
	if (kind == JOB_CHAT) {
		bool on = false;
		if (get_bool(b, "logprobs", &on, e) < 0 || (r = get_int(b, "top_logprobs", &iv, e)) < 0)
			return -1;
		if (r && (iv < 0 || iv > ATLAS_SCHED_MAX_TOP))
			return serve_err_set(e, 400, "top_logprobs", "invalid_value",
					     "'top_logprobs' must be in [0, %d]", ATLAS_SCHED_MAX_TOP);
		if (r && iv > 0 && !on)
			return serve_err_set(e, 400, "top_logprobs", "invalid_value",
					     "'top_logprobs' needs 'logprobs': true");
		g->logprobs = on ? (r ? (int)iv : 0) : -1;
	} else if (kind == JOB_COMPLETION) {
		if ((r = get_int(b, "logprobs", &iv, e)) < 0)
			return -1;
		if (r && (iv < 0 || iv > ATLAS_SCHED_MAX_TOP))
			return serve_err_set(e, 400, "logprobs", "invalid_value",
					     "'logprobs' must be in [0, %d]", ATLAS_SCHED_MAX_TOP);
		g->logprobs = r ? (int)iv : -1;
		if (get_bool(b, "echo", &g->echo, e) < 0)
			return -1;
	}
	return 0;
}

int serve_parse_gen(struct atlas_server *s, json_object *b, int kind, struct serve_gen *g,
		    struct serve_err *e)
{
	bool anthropic = kind == JOB_MESSAGES;
	struct atlas_sampler_params *sp = &g->sp.gen.sampling;
	memset(g, 0, sizeof(*g));
	g->logprobs = -1;
	g->sp.top_logprobs = -1;
	/* the model's defaults, as every program gets them (session.h):
	 * sampling, max_tokens and the EOS set; the request overrides */
	g->sp.gen = s->gen_defaults;
	sp->seed = (uint64_t)time(NULL) ^ ((uint64_t)__atomic_add_fetch(&s->next_id, 1, __ATOMIC_RELAXED) << 32);

	int64_t iv;
	double dv;
	int r;
	if ((r = get_int(b, "max_tokens", &iv, e)) < 0)
		return -1;
	if (r == 0 && !anthropic && (r = get_int(b, "max_completion_tokens", &iv, e)) < 0)
		return -1;
	if (r) {
		if (iv < 1)
			return serve_err_set(e, 400, "max_tokens", "invalid_value",
					     "'max_tokens' must be at least 1, not %lld", (long long)iv);
		g->sp.gen.max_tokens = iv;
		g->max_tokens_given = true;
	} else if (anthropic) {
		return serve_err_set(e, 400, "max_tokens", "missing_field", "'max_tokens' is required");
	}
	if ((r = get_num(b, "temperature", &dv, e)) < 0)
		return -1;
	if (r && range(e, "temperature", dv, 0, 100))
		return -1;
	if (r)
		sp->temperature = dv;
	if ((r = get_num(b, "top_p", &dv, e)) < 0)
		return -1;
	if (r && (dv <= 0 || dv > 1))
		return serve_err_set(e, 400, "top_p", "invalid_value", "'top_p' must be in (0, 1], not %g", dv);
	if (r)
		sp->top_p = dv;
	if ((r = get_int(b, "top_k", &iv, e)) < 0)
		return -1;
	if (r && iv < -1)
		return serve_err_set(e, 400, "top_k", "invalid_value", "'top_k' must be >= 0 (or -1 for off)");
	if (r)
		sp->top_k = iv < 0 ? 0 : iv;
	if ((r = get_num(b, "min_p", &dv, e)) < 0 || (r && range(e, "min_p", dv, 0, 1)))
		return -1;
	if (r)
		sp->min_p = dv;
	if ((r = get_num(b, "presence_penalty", &dv, e)) < 0 ||
	    (r && range(e, "presence_penalty", dv, -2, 2)))
		return -1;
	if (r)
		sp->presence_penalty = dv;
	if ((r = get_num(b, "frequency_penalty", &dv, e)) < 0 ||
	    (r && range(e, "frequency_penalty", dv, -2, 2)))
		return -1;
	if (r)
		sp->frequency_penalty = dv;
	if ((r = get_num(b, "repetition_penalty", &dv, e)) < 0)
		return -1;
	if (r && !(dv > 0 && dv <= 100))
		return serve_err_set(e, 400, "repetition_penalty", "invalid_value",
				     "'repetition_penalty' must be in (0, 100], not %g", dv);
	if (r)
		sp->repetition_penalty = dv;
	if ((r = get_int(b, "seed", &iv, e)) < 0)
		return -1;
	if (r)
		sp->seed = (uint64_t)iv;
	g->n = 1;
	if (!anthropic && (r = get_int(b, "n", &iv, e)) < 0)
		return -1;
	if (!anthropic && r && (iv < 1 || iv > SERVE_MAX_N))
		return serve_err_set(e, 400, "n", "invalid_value",
				     "'n' must be in [1, %d], not %lld", SERVE_MAX_N, (long long)iv);
	if (!anthropic && r)
		g->n = (int)iv;
	if (parse_stop(b, anthropic ? "stop_sequences" : "stop", g, e))
		return -1;
	if (get_bool(b, "stream", &g->stream, e) < 0)
		return -1;
	if (get_bool(b, "ignore_eos", &g->sp.gen.ignore_eos, e) < 0)
		return -1;
	json_object *so;
	if (json_object_object_get_ex(b, "stream_options", &so) && so) {
		if (!json_object_is_type(so, json_type_object))
			return serve_err_set(e, 400, "stream_options", "invalid_type",
					     "'stream_options' must be an object");
		if (get_bool(so, "include_usage", &g->include_usage, e) < 0) {
			e->param = "stream_options.include_usage";
			snprintf(e->msg, sizeof(e->msg), "'stream_options.include_usage' must be a boolean");
			return -1;
		}
	}
	if (parse_logprobs(b, kind, g, e))
		return -1;
	g->sp.gen.stop = g->stop;
	g->sp.gen.n_stop = g->n_stop;
	if (atlas_sampler_check(sp))
		return serve_err_set(e, 400, NULL, "invalid_value", "%s", atlas_errmsg());
	return 0;
}

int serve_check_prompt(struct atlas_server *s, struct serve_gen *g, struct serve_err *e)
{
	if (g->sp.n_prompt <= 0)
		return serve_err_set(e, 400, "prompt", "invalid_value", "the prompt is empty (no tokens)");
	if (g->sp.n_prompt > s->ctx)
		return serve_err_set(e, 400, NULL, "context_length_exceeded",
				     "the prompt has %lld tokens, more than the context of %lld",
				     (long long)g->sp.n_prompt, (long long)s->ctx);
	return 0;
}

int serve_set_prompt_text(struct atlas_server *s, struct serve_gen *g, const char *text,
			  size_t len, bool add_special, struct serve_err *e)
{
	size_t n;
	free(g->prompt_ids);
	g->prompt_ids = NULL;
	if (atlas_tok_encode(s->tok, text, len, add_special, &g->prompt_ids, &n))
		return serve_err_set(e, 400, "prompt", "invalid_value", "cannot tokenize the prompt: %s",
				     atlas_errmsg());
	g->sp.prompt = g->prompt_ids;
	g->sp.n_prompt = (int64_t)n;
	return serve_check_prompt(s, g, e);
}

/* Check the messages' shape before the template sees them. */
static int check_messages(json_object *req, struct serve_err *e)
{
	json_object *msgs;
	if (!json_object_object_get_ex(req, "messages", &msgs) || !msgs)
		return serve_err_set(e, 400, "messages", "missing_field", "'messages' is required");
	if (!json_object_is_type(msgs, json_type_array))
		return serve_err_set(e, 400, "messages", "invalid_type", "'messages' must be a list");
	size_t n = json_object_array_length(msgs);
	if (!n)
		return serve_err_set(e, 400, "messages", "invalid_value", "'messages' is empty");
	for (size_t i = 0; i < n; i++) {
		json_object *m = json_object_array_get_idx(msgs, i), *role, *content;
		if (!json_object_is_type(m, json_type_object))
			return serve_err_set(e, 400, "messages", "invalid_type",
					     "'messages[%zu]' must be an object", i);
		if (!json_object_object_get_ex(m, "role", &role) ||
		    !json_object_is_type(role, json_type_string))
			return serve_err_set(e, 400, "messages", "invalid_type",
					     "'messages[%zu].role' must be a string", i);
		if (json_object_object_get_ex(m, "content", &content) && content &&
		    !json_object_is_type(content, json_type_string) &&
		    !json_object_is_type(content, json_type_array))
			return serve_err_set(e, 400, "messages", "invalid_type",
					     "'messages[%zu].content' must be a string or a list of parts", i);
	}
	return 0;
}

/* Does the prompt end with a finished thought (</think> and blanks)?
 * Templates write an empty one when thinking is off (Qwen3's
 * enable_thinking=false); the answer then comes without thought. */
static bool think_closed(const char *p, size_t n)
{
	while (n && strchr(" \t\r\n", p[n - 1]))
		n--;
	return n >= 8 && !memcmp(p + n - 8, "</think>", 8);
}

int serve_chat_prompt(struct atlas_server *s, json_object *req, struct serve_gen *g,
		      struct serve_err *e)
{
	if (check_messages(req, e))
		return -1;
	char *text;
	size_t len;
	int rc = atlas_chat_render(s->tok, req, &text, &len);
	if (rc == ATLAS_ENOTFOUND)
		return serve_err_set(e, 400, "messages", "no_chat_template",
				     "the model has no chat template: %s", atlas_errmsg());
	if (rc)
		return serve_err_set(e, 400, "messages", "invalid_value",
				     "cannot apply the chat template: %s", atlas_errmsg());
	g->ag.start_in_reasoning = g->ag.reasoning && atlas_reasoning_open_in_prompt(text, len);
	if (g->ag.reasoning && think_closed(text, len))
		g->ag.reasoning = false; /* thinking off: the template wrote an empty thought */
	rc = serve_set_prompt_text(s, g, text, len, false, e);
	free(text);
	if (rc && e->param && !strcmp(e->param, "prompt"))
		e->param = "messages";
	return rc;
}

int serve_gen_push_prompt(struct serve_gen *g, const char *echo, size_t echo_len,
			  struct serve_err *e)
{
	struct serve_prompt *ps = realloc(g->prompts, (size_t)(g->n_prompts + 1) * sizeof(*ps));
	if (!ps)
		return serve_err_set(e, 500, NULL, NULL, "out of memory");
	g->prompts = ps;
	struct serve_prompt *p = &ps[g->n_prompts];
	memset(p, 0, sizeof(*p));
	if (echo && !(p->echo = malloc(echo_len + 1)))
		return serve_err_set(e, 500, NULL, NULL, "out of memory");
	if (echo) {
		memcpy(p->echo, echo, echo_len);
		p->echo[echo_len] = '\0';
		p->echo_len = echo_len;
	}
	p->ids = g->prompt_ids;
	p->n = g->sp.n_prompt;
	g->n_prompts++;
	g->prompt_ids = NULL;
	g->sp.prompt = NULL;
	g->sp.n_prompt = 0;
	return 0;
}

void serve_gen_free(struct serve_gen *g)
{
	serve_agent_free(&g->ag);
	free(g->prompt_ids);
	g->prompt_ids = NULL;
	for (int i = 0; i < g->n_prompts; i++) {
		free(g->prompts[i].ids);
		free(g->prompts[i].echo);
	}
	free(g->prompts);
	g->prompts = NULL;
	g->n_prompts = 0;
}
