/* job_stream.c - the SSE stream of a generation: OpenAI chunks (one
 * choice each, the choices interleaved as their tokens arrive, each
 * with its own finish chunk; then the usage chunk and [DONE] once) or
 * Anthropic's event sequence; a failed or cut stream ends with an error
 * event instead. Only appends to j->out; job.c hands the bytes to
 * libmicrohttpd. */
#include <string.h>

#include "job.h"
#include "toolcall.h"

static void sse(struct job *j, const char *event, json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE);
	if (event)
		sbuf_printf(&j->out, "event: %s\n", event);
	sbuf_add(&j->out, "data: ", 6);
	sbuf_add(&j->out, s, strlen(s));
	sbuf_add(&j->out, "\n\n", 2);
	json_object_put(o);
}

/* An OpenAI stream chunk with one choice (NULL: no choices, usage). */
static json_object *chunk_obj(struct job *j, json_object *choice)
{
	json_object *o =
	    job_openai_head(j, j->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion");
	json_object *ch = json_object_new_array();
	if (choice)
		json_object_array_add(ch, choice);
	json_object_object_add(o, "choices", ch);
	if (j->include_usage)
		json_object_object_add(o, "usage", choice ? NULL : job_usage_openai(j));
	return o;
}

static json_object *choice_obj(struct job *j, struct job_choice *ch, json_object *delta_or_text,
			       json_object *logprobs, const char *finish)
{
	json_object *c = json_object_new_object();
	json_object_object_add(c, "index", json_object_new_int(ch->index));
	if (j->kind == JOB_CHAT)
		json_object_object_add(c, "delta", delta_or_text);
	else
		json_object_object_add(c, "text", delta_or_text);
	json_object_object_add(c, "logprobs", logprobs);
	json_object_object_add(c, "finish_reason", finish ? json_object_new_string(finish) : NULL);
	return c;
}

/* Anthropic content blocks: open one of `kind` (text, thinking, tool_use
 * with its id and name) as the next index, or close the open one. */
static void block_open(struct job *j, struct job_choice *ch, int kind, const char *id,
		       const char *name)
{
	json_object *cb = json_object_new_object(), *e = json_object_new_object();
	if (kind == ATLAS_TOOLEV_REASONING) {
		json_object_object_add(cb, "type", json_object_new_string("thinking"));
		json_object_object_add(cb, "thinking", json_object_new_string(""));
	} else if (kind == ATLAS_TOOLEV_CALL) {
		char aid[64];
		job_anthropic_id(id ? id : "", aid, sizeof(aid));
		json_object_object_add(cb, "type", json_object_new_string("tool_use"));
		json_object_object_add(cb, "id", json_object_new_string(aid));
		json_object_object_add(cb, "name", json_object_new_string(name ? name : ""));
		json_object_object_add(cb, "input", json_object_new_object());
	} else {
		json_object_object_add(cb, "type", json_object_new_string("text"));
		json_object_object_add(cb, "text", json_object_new_string(""));
	}
	ch->blk = ch->n_blk++;
	ch->blk_kind = kind;
	json_object_object_add(e, "type", json_object_new_string("content_block_start"));
	json_object_object_add(e, "index", json_object_new_int(ch->blk));
	json_object_object_add(e, "content_block", cb);
	sse(j, "content_block_start", e);
}

static void block_close(struct job *j, struct job_choice *ch)
{
	if (ch->blk < 0)
		return;
	json_object *e = json_object_new_object();
	json_object_object_add(e, "type", json_object_new_string("content_block_stop"));
	json_object_object_add(e, "index", json_object_new_int(ch->blk));
	sse(j, "content_block_stop", e);
	ch->blk = -1;
}

static void block_delta(struct job *j, struct job_choice *ch, const char *type, const char *key,
			const char *p, size_t n)
{
	json_object *d = json_object_new_object(), *e = json_object_new_object();
	json_object_object_add(d, "type", json_object_new_string(type));
	json_object_object_add(d, key, job_utf8(p, n));
	json_object_object_add(e, "type", json_object_new_string("content_block_delta"));
	json_object_object_add(e, "index", json_object_new_int(ch->blk));
	json_object_object_add(e, "delta", d);
	sse(j, "content_block_delta", e);
}

static void anthropic_event(struct job *j, struct job_choice *ch, const struct atlas_toolev *ev)
{
	switch (ev->kind) {
	case ATLAS_TOOLEV_CONTENT:
	case ATLAS_TOOLEV_REASONING:
		if (!ev->len)
			return;
		if (ch->blk < 0 || ch->blk_kind != (int)ev->kind) {
			block_close(j, ch);
			block_open(j, ch, ev->kind, NULL, NULL);
		}
		if (ev->kind == ATLAS_TOOLEV_CONTENT)
			block_delta(j, ch, "text_delta", "text", ev->text, ev->len);
		else
			block_delta(j, ch, "thinking_delta", "thinking", ev->text, ev->len);
		return;
	case ATLAS_TOOLEV_CALL:
		block_close(j, ch);
		block_open(j, ch, ATLAS_TOOLEV_CALL, ev->id, ev->name);
		return;
	case ATLAS_TOOLEV_ARGS:
		if (ch->blk >= 0 && ch->blk_kind == ATLAS_TOOLEV_CALL && ev->len)
			block_delta(j, ch, "input_json_delta", "partial_json", ev->text, ev->len);
		return;
	case ATLAS_TOOLEV_CALL_END:
		block_close(j, ch);
		return;
	}
}

/* OpenAI: each event is a delta chunk of its choice. */
static void openai_event(struct job *j, struct job_choice *ch, const struct atlas_toolev *ev)
{
	json_object *d = json_object_new_object();
	switch (ev->kind) {
	case ATLAS_TOOLEV_CONTENT:
		json_object_object_add(d, "content", job_utf8(ev->text, ev->len));
		break;
	case ATLAS_TOOLEV_REASONING:
		json_object_object_add(d, "reasoning_content", job_utf8(ev->text, ev->len));
		json_object_object_add(d, "reasoning", job_utf8(ev->text, ev->len));
		break;
	case ATLAS_TOOLEV_CALL:
	case ATLAS_TOOLEV_ARGS: {
		json_object *tc = json_object_new_object(), *fn = json_object_new_object();
		json_object *list = json_object_new_array();
		json_object_object_add(tc, "index", json_object_new_int(ev->index));
		if (ev->kind == ATLAS_TOOLEV_CALL) {
			json_object_object_add(tc, "id", json_object_new_string(ev->id ? ev->id : ""));
			json_object_object_add(tc, "type", json_object_new_string("function"));
			json_object_object_add(fn, "name", json_object_new_string(ev->name ? ev->name : ""));
			json_object_object_add(fn, "arguments", json_object_new_string(""));
		} else {
			json_object_object_add(fn, "arguments", job_utf8(ev->text, ev->len));
		}
		json_object_object_add(tc, "function", fn);
		json_object_array_add(list, tc);
		json_object_object_add(d, "tool_calls", list);
		break;
	}
	case ATLAS_TOOLEV_CALL_END:
		json_object_put(d);
		return;
	}
	if ((ev->kind == ATLAS_TOOLEV_CONTENT || ev->kind == ATLAS_TOOLEV_REASONING ||
	     ev->kind == ATLAS_TOOLEV_ARGS) && !ev->len) {
		json_object_put(d);
		return;
	}
	sse(j, NULL, chunk_obj(j, choice_obj(j, ch, d, NULL, NULL)));
}

void job_stream_event(struct job *j, struct job_choice *ch, const struct atlas_toolev *ev)
{
	if (j->kind == JOB_MESSAGES)
		anthropic_event(j, ch, ev);
	else
		openai_event(j, ch, ev);
}

static void anthropic_start(struct job *j)
{
	json_object *m = json_object_new_object();
	json_object_object_add(m, "id", json_object_new_string(j->id));
	json_object_object_add(m, "type", json_object_new_string("message"));
	json_object_object_add(m, "role", json_object_new_string("assistant"));
	json_object_object_add(m, "content", json_object_new_array());
	json_object_object_add(m, "model", json_object_new_string(j->srv->served_name));
	json_object_object_add(m, "stop_reason", NULL);
	json_object_object_add(m, "stop_sequence", NULL);
	json_object_object_add(m, "usage", job_usage_anthropic(j, true));
	json_object *e = json_object_new_object();
	json_object_object_add(e, "type", json_object_new_string("message_start"));
	json_object_object_add(e, "message", m);
	sse(j, "message_start", e);
	/* plain text opens its one block at once; split output opens blocks
	 * as their kinds arrive (job_stream_event) */
	if (!j->ch[0].tp)
		block_open(j, &j->ch[0], ATLAS_TOOLEV_CONTENT, NULL, NULL);
	e = json_object_new_object();
	json_object_object_add(e, "type", json_object_new_string("ping"));
	sse(j, "ping", e);
}

void job_stream_start(struct job *j)
{
	if (j->kind == JOB_MESSAGES) {
		anthropic_start(j);
	} else {
		for (int i = 0; i < j->n_ch; i++) {
			struct job_choice *ch = &j->ch[i];
			const struct serve_prompt *p = &j->prompts[ch->prompt];
			if (j->kind == JOB_CHAT) {
				json_object *d = json_object_new_object();
				json_object_object_add(d, "role",
						       json_object_new_string("assistant"));
				json_object_object_add(d, "content", json_object_new_string(""));
				sse(j, NULL, chunk_obj(j, choice_obj(j, ch, d, NULL, NULL)));
			} else if (p->echo_len) {
				json_object *t = job_utf8(p->echo, p->echo_len);
				sse(j, NULL, chunk_obj(j, choice_obj(j, ch, t, NULL, NULL)));
			}
		}
	}
	j->phase = 1;
}

void job_stream_tokens(struct job *j, struct job_choice *ch, const struct atlas_sched_chunk *c)
{
	bool any_lp = false;
	for (size_t i = 0; i < c->n; i++)
		any_lp |= c->tok[i].id >= 0;
	any_lp &= j->logprobs >= 0;
	if (!c->text_len && !any_lp)
		return;
	if (j->kind == JOB_MESSAGES) {
		json_object *d = json_object_new_object();
		json_object_object_add(d, "type", json_object_new_string("text_delta"));
		json_object_object_add(d, "text", job_utf8(c->text, c->text_len));
		json_object *e = json_object_new_object();
		json_object_object_add(e, "type", json_object_new_string("content_block_delta"));
		json_object_object_add(e, "index", json_object_new_int(0));
		json_object_object_add(e, "delta", d);
		sse(j, "content_block_delta", e);
		return;
	}
	json_object *lp = NULL;
	if (any_lp && j->kind == JOB_CHAT) {
		json_object *content = json_object_new_array();
		for (size_t i = 0; i < c->n; i++)
			if (c->tok[i].id >= 0)
				json_object_array_add(content, job_chat_lp(j, &c->tok[i]));
		lp = json_object_new_object();
		json_object_object_add(lp, "content", content);
	} else if (any_lp) {
		lp = job_completion_lp_new();
		job_completion_lp_add(j, lp, c, &ch->lp_off);
	}
	json_object *body = job_utf8(c->text, c->text_len);
	if (j->kind == JOB_CHAT) {
		json_object *d = json_object_new_object();
		json_object_object_add(d, "content", body);
		body = d;
	}
	sse(j, NULL, chunk_obj(j, choice_obj(j, ch, body, lp, NULL)));
}

void job_stream_choice_end(struct job *j, struct job_choice *ch)
{
	if (j->kind == JOB_MESSAGES || ch->res.rc)
		return;
	json_object *body =
	    j->kind == JOB_CHAT ? json_object_new_object() : json_object_new_string("");
	sse(j, NULL, chunk_obj(j, choice_obj(j, ch, body, NULL, job_finish_openai(ch))));
}

/* An error event; the stream ends with it (no [DONE]: a client must not
 * take a cut stream for a finished one). */
static void stream_error(struct job *j, const char *msg, const char *type)
{
	json_object *err = json_object_new_object();
	json_object_object_add(err, "message", json_object_new_string(msg));
	json_object_object_add(err, "type", json_object_new_string(type));
	json_object_object_add(err, "param", NULL);
	json_object_object_add(err, "code", NULL);
	json_object *o = json_object_new_object();
	if (j->kind == JOB_MESSAGES)
		json_object_object_add(o, "type", json_object_new_string("error"));
	json_object_object_add(o, "error", err);
	sse(j, j->kind == JOB_MESSAGES ? "error" : NULL, o);
}

static void anthropic_end(struct job *j)
{
	struct job_choice *ch = &j->ch[0];
	if (!ch->n_blk) /* nothing came: one empty text block */
		block_open(j, ch, ATLAS_TOOLEV_CONTENT, NULL, NULL);
	block_close(j, ch);
	json_object *d = json_object_new_object(), *e;
	json_object_object_add(d, "stop_reason", json_object_new_string(job_stop_anthropic(ch)));
	json_object_object_add(d, "stop_sequence", job_stop_sequence(j, ch));
	e = json_object_new_object();
	json_object_object_add(e, "type", json_object_new_string("message_delta"));
	json_object_object_add(e, "delta", d);
	json_object_object_add(e, "usage", job_usage_anthropic(j, false));
	sse(j, "message_delta", e);
	e = json_object_new_object();
	json_object_object_add(e, "type", json_object_new_string("message_stop"));
	sse(j, "message_stop", e);
}

void job_stream_end(struct job *j)
{
	if (j->failed >= 0) {
		stream_error(j, j->ch[j->failed].res.error,
			     j->kind == JOB_MESSAGES ? "api_error" : "server_error");
	} else if (j->kind == JOB_MESSAGES) {
		anthropic_end(j);
	} else {
		if (j->include_usage)
			sse(j, NULL, chunk_obj(j, NULL));
		sbuf_add(&j->out, "data: [DONE]\n\n", 14);
	}
	j->phase = 2;
}

void job_stream_cut(struct job *j, const char *msg)
{
	if (j->phase == 0)
		job_stream_start(j);
	stream_error(j, msg, j->kind == JOB_MESSAGES ? "overloaded_error" : "service_unavailable");
	j->phase = 2;
}
