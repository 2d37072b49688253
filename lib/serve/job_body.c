/* job_body.c - the JSON pieces of generation responses: text as valid
 * UTF-8, log-probabilities (chat and completions shapes), finish
 * reasons, usage (OpenAI over all choices, Anthropic) and the whole
 * body of a non-streaming response with every choice. */
#include <stdlib.h>
#include <string.h>

#include "../core/utf8.h"
#include "job.h"

json_object *job_utf8(const char *p, size_t n)
{
	struct sbuf b = {0};
	size_t i = 0;
	while (i < n) {
		uint32_t cp;
		int k = atlas_utf8_decode((const unsigned char *)p + i, n - i, &cp);
		if (k > 0) {
			sbuf_add(&b, p + i, (size_t)k);
			i += (size_t)k;
		} else {
			sbuf_add(&b, "\xef\xbf\xbd", 3);
			i++;
		}
	}
	json_object *o = json_object_new_string_len(b.p ? b.p : "", (int)b.len);
	sbuf_free(&b);
	return o;
}

static json_object *token_bytes(const char *p, size_t n)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(a, json_object_new_int((unsigned char)p[i]));
	return a;
}

static const char *piece(struct job *j, int32_t id, size_t *len)
{
	const char *p = atlas_tok_piece(j->srv->tok, id, len);
	if (!p) {
		*len = 0;
		return "";
	}
	return p;
}

json_object *job_chat_lp(struct job *j, const struct atlas_sched_token *t)
{
	size_t n;
	const char *p = piece(j, t->id, &n);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "token", job_utf8(p, n));
	json_object_object_add(o, "logprob", json_object_new_double(t->logprob));
	json_object_object_add(o, "bytes", token_bytes(p, n));
	json_object *top = json_object_new_array();
	for (int k = 0; k < t->n_top && k < j->logprobs; k++) {
		const char *q = piece(j, t->top_id[k], &n);
		json_object *e = json_object_new_object();
		json_object_object_add(e, "token", job_utf8(q, n));
		json_object_object_add(e, "logprob", json_object_new_double(t->top_lp[k]));
		json_object_object_add(e, "bytes", token_bytes(q, n));
		json_object_array_add(top, e);
	}
	json_object_object_add(o, "top_logprobs", top);
	return o;
}

void job_completion_lp_add(struct job *j, json_object *lp, const struct atlas_sched_chunk *c,
			   size_t *offset)
{
	json_object *tokens, *tlp, *top, *off;
	json_object_object_get_ex(lp, "tokens", &tokens);
	json_object_object_get_ex(lp, "token_logprobs", &tlp);
	json_object_object_get_ex(lp, "top_logprobs", &top);
	json_object_object_get_ex(lp, "text_offset", &off);
	for (size_t i = 0; i < c->n; i++) {
		const struct atlas_sched_token *t = &c->tok[i];
		if (t->id < 0)
			continue;
		size_t n;
		const char *p = piece(j, t->id, &n);
		json_object_array_add(tokens, job_utf8(p, n));
		json_object_array_add(tlp, json_object_new_double(t->logprob));
		json_object *m = json_object_new_object();
		for (int k = 0; k < t->n_top && k < j->logprobs; k++) {
			const char *q = piece(j, t->top_id[k], &n);
			json_object *ks = job_utf8(q, n);
			json_object_object_add(m, json_object_get_string(ks),
					       json_object_new_double(t->top_lp[k]));
			json_object_put(ks);
		}
		json_object_array_add(top, m);
		json_object_array_add(off, json_object_new_int64((int64_t)*offset));
		*offset += n;
	}
}

json_object *job_completion_lp_new(void)
{
	json_object *lp = json_object_new_object();
	json_object_object_add(lp, "tokens", json_object_new_array());
	json_object_object_add(lp, "token_logprobs", json_object_new_array());
	json_object_object_add(lp, "top_logprobs", json_object_new_array());
	json_object_object_add(lp, "text_offset", json_object_new_array());
	return lp;
}

const char *job_openai_finish(const struct atlas_sreq_result *r)
{
	return r->finish == ATLAS_FINISH_LENGTH ? "length" : "stop";
}

const char *job_anthropic_stop(const struct atlas_sreq_result *r)
{
	switch (r->finish) {
	case ATLAS_FINISH_LENGTH:
		return "max_tokens";
	case ATLAS_FINISH_STOP:
		return "stop_sequence";
	default:
		return "end_turn";
	}
}

json_object *job_stop_sequence(struct job *j, const struct job_choice *ch)
{
	int si = ch->res.stop_index;
	if (ch->res.finish != ATLAS_FINISH_STOP || si < 0 || si >= j->n_stop)
		return NULL;
	return json_object_new_string(j->stops[si]);
}

json_object *job_usage_openai(struct job *j)
{
	int64_t prompt = 0, gen = 0, cached = 0;
	for (int i = 0; i < j->n_ch; i++) {
		const struct job_choice *ch = &j->ch[i];
		gen += ch->n_gen;
		if (!ch->first)
			continue;
		prompt += j->prompts[ch->prompt].n;
		cached += ch->done ? ch->res.n_cached : 0;
	}
	json_object *u = json_object_new_object();
	json_object_object_add(u, "prompt_tokens", json_object_new_int64(prompt));
	json_object_object_add(u, "completion_tokens", json_object_new_int64(gen));
	json_object_object_add(u, "total_tokens", json_object_new_int64(prompt + gen));
	json_object *d = json_object_new_object();
	json_object_object_add(d, "cached_tokens", json_object_new_int64(cached));
	json_object_object_add(u, "prompt_tokens_details", d);
	return u;
}

json_object *job_usage_anthropic(struct job *j, bool start)
{
	const struct job_choice *ch = &j->ch[0];
	int64_t prompt = j->prompts[0].n, cached = !start && ch->done ? ch->res.n_cached : 0;
	json_object *u = json_object_new_object();
	/* Anthropic's input_tokens are the ones not read from the cache */
	json_object_object_add(u, "input_tokens", json_object_new_int64(prompt - cached));
	json_object_object_add(u, "cache_creation_input_tokens", json_object_new_int64(0));
	json_object_object_add(u, "cache_read_input_tokens", json_object_new_int64(cached));
	json_object_object_add(u, "output_tokens", json_object_new_int64(ch->n_gen));
	return u;
}

json_object *job_openai_head(struct job *j, const char *object)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "id", json_object_new_string(j->id));
	json_object_object_add(o, "object", json_object_new_string(object));
	json_object_object_add(o, "created", json_object_new_int64(j->srv->created));
	json_object_object_add(o, "model", json_object_new_string(j->srv->served_name));
	return o;
}

static json_object *anthropic_body(struct job *j)
{
	struct job_choice *ch = &j->ch[0];
	json_object *o = json_object_new_object();
	json_object_object_add(o, "id", json_object_new_string(j->id));
	json_object_object_add(o, "type", json_object_new_string("message"));
	json_object_object_add(o, "role", json_object_new_string("assistant"));
	json_object_object_add(o, "model", json_object_new_string(j->srv->served_name));
	json_object *content = json_object_new_array(), *blk;
	if (ch->reasoning.len) {
		blk = json_object_new_object();
		json_object_object_add(blk, "type", json_object_new_string("thinking"));
		json_object_object_add(blk, "thinking", job_utf8(ch->reasoning.p, ch->reasoning.len));
		json_object_object_add(blk, "signature", json_object_new_string(""));
		json_object_array_add(content, blk);
	}
	if (ch->text.len || !ch->n_ended) {
		blk = json_object_new_object();
		json_object_object_add(blk, "type", json_object_new_string("text"));
		json_object_object_add(blk, "text",
				       job_utf8(ch->text.p ? ch->text.p : "", ch->text.len));
		json_object_array_add(content, blk);
	}
	for (int i = 0; i < ch->n_calls; i++) {
		const struct job_call *c = &ch->calls[i];
		char id[64];
		if (!c->ended)
			continue; /* cut by max_tokens: not a call */
		job_anthropic_id(c->id, id, sizeof(id));
		json_object *input = c->args.p ? json_tokener_parse(c->args.p) : NULL;
		if (!input || !json_object_is_type(input, json_type_object)) {
			json_object_put(input);
			input = json_object_new_object();
		}
		blk = json_object_new_object();
		json_object_object_add(blk, "type", json_object_new_string("tool_use"));
		json_object_object_add(blk, "id", json_object_new_string(id));
		json_object_object_add(blk, "name", json_object_new_string(c->name ? c->name : ""));
		json_object_object_add(blk, "input", input);
		json_object_array_add(content, blk);
	}
	json_object_object_add(o, "content", content);
	json_object_object_add(o, "stop_reason", json_object_new_string(job_stop_anthropic(ch)));
	json_object_object_add(o, "stop_sequence", job_stop_sequence(j, ch));
	json_object_object_add(o, "usage", job_usage_anthropic(j, false));
	return o;
}

static json_object *openai_choice(struct job *j, struct job_choice *ch)
{
	json_object *c = json_object_new_object();
	json_object_object_add(c, "index", json_object_new_int(ch->index));
	json_object *lp = NULL;
	if (ch->lp && j->kind == JOB_CHAT) {
		lp = json_object_new_object();
		json_object_object_add(lp, "content", json_object_get(ch->lp));
	} else if (ch->lp) {
		lp = json_object_get(ch->lp);
	}
	if (j->kind == JOB_CHAT) {
		json_object *m = json_object_new_object();
		json_object_object_add(m, "role", json_object_new_string("assistant"));
		json_object_object_add(m, "content",
				       ch->n_ended && !ch->text.len
					   ? NULL
					   : job_utf8(ch->text.p ? ch->text.p : "", ch->text.len));
		if (ch->reasoning.len) {
			/* both names are in use by clients */
			json_object_object_add(m, "reasoning_content",
					       job_utf8(ch->reasoning.p, ch->reasoning.len));
			json_object_object_add(m, "reasoning",
					       job_utf8(ch->reasoning.p, ch->reasoning.len));
		}
		if (ch->n_ended) {
			json_object *calls = json_object_new_array();
			for (int i = 0; i < ch->n_calls; i++) {
				const struct job_call *tc = &ch->calls[i];
				if (!tc->ended)
					continue; /* cut by max_tokens: not a call */
				json_object *fn = json_object_new_object(), *o = json_object_new_object();
				json_object_object_add(fn, "name", json_object_new_string(tc->name ? tc->name : ""));
				json_object_object_add(fn, "arguments",
						       tc->args.len ? job_utf8(tc->args.p, tc->args.len)
								    : json_object_new_string("{}"));
				json_object_object_add(o, "id", json_object_new_string(tc->id));
				json_object_object_add(o, "type", json_object_new_string("function"));
				json_object_object_add(o, "function", fn);
				json_object_array_add(calls, o);
			}
			json_object_object_add(m, "tool_calls", calls);
		}
		json_object_object_add(c, "message", m);
	} else {
		const struct serve_prompt *p = &j->prompts[ch->prompt];
		struct sbuf all = {0};
		sbuf_add(&all, p->echo ? p->echo : "", p->echo_len);
		sbuf_add(&all, ch->text.p ? ch->text.p : "", ch->text.len);
		json_object_object_add(c, "text", job_utf8(all.p ? all.p : "", all.len));
		sbuf_free(&all);
	}
	json_object_object_add(c, "logprobs", lp);
	json_object_object_add(c, "finish_reason", json_object_new_string(job_finish_openai(ch)));
	return c;
}

json_object *job_final_body(struct job *j)
{
	if (j->kind == JOB_MESSAGES)
		return anthropic_body(j);
	json_object *o =
	    job_openai_head(j, j->kind == JOB_CHAT ? "chat.completion" : "text_completion");
	json_object *choices = json_object_new_array();
	for (int i = 0; i < j->n_ch; i++)
		json_object_array_add(choices, openai_choice(j, &j->ch[i]));
	json_object_object_add(o, "choices", choices);
	json_object_object_add(o, "usage", job_usage_openai(j));
	return o;
}
