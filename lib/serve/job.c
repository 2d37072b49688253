/* job.c - one generation from submission to its last byte: the JSON
 * body of a non-streaming response, or the SSE stream (OpenAI chunks or
 * Anthropic events) written as tokens arrive. The handler thread waits
 * for output in short slices and checks whether the client has gone, so
 * a disconnect cancels the request (and frees its KV blocks) at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "serve_internal.h"
#include "../core/utf8.h"

#define WAIT_MS 100 /* slice of waiting between disconnect checks */

struct job {
	struct atlas_server *srv;     /* the server */
	struct MHD_Connection *mc;    /* the client */
	struct atlas_sreq *r;         /* the scheduled request */
	enum job_kind kind;           /* chat, completion, messages */
	char id[64];                  /* response id */
	bool stream;                  /* SSE */
	bool include_usage;           /* usage chunk at the end (OpenAI stream) */
	int logprobs;                 /* -1, or alternatives per token */
	char *stops[SERVE_MAX_STOP];  /* stop strings (copies, for stop_sequence) */
	int n_stop;                   /* entries in stops */
	char *echo;                   /* completions echo: the prompt text */
	size_t echo_len;              /* bytes of echo */
	int64_t n_prompt;             /* prompt tokens */
	int64_t n_gen;                /* tokens seen so far */
	int phase;                    /* stream: 0 nothing sent, 1 sending, 2 last bytes queued */
	bool done;                    /* the request finished; res valid */
	bool logged;                  /* the log line was written */
	struct atlas_sreq_result res; /* outcome */
	struct sbuf out;              /* stream bytes not yet handed to MHD */
	size_t out_pos;               /* bytes of out already handed over */
	struct sbuf text;             /* non-stream: all text */
	json_object *lp;              /* non-stream logprobs: chat content list or completion object */
	size_t lp_off;                /* completions logprobs: text offset of the next token */
};

/* Text as valid UTF-8 for JSON: invalid bytes become U+FFFD. */
static json_object *utf8_string(const char *p, size_t n)
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

/* OpenAI chat logprobs entry of one token. */
static json_object *chat_lp_entry(struct job *j, const struct atlas_sched_token *t)
{
	size_t n;
	const char *p = piece(j, t->id, &n);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "token", utf8_string(p, n));
	json_object_object_add(o, "logprob", json_object_new_double(t->logprob));
	json_object_object_add(o, "bytes", token_bytes(p, n));
	json_object *top = json_object_new_array();
	for (int k = 0; k < t->n_top && k < j->logprobs; k++) {
		const char *q = piece(j, t->top_id[k], &n);
		json_object *e = json_object_new_object();
		json_object_object_add(e, "token", utf8_string(q, n));
		json_object_object_add(e, "logprob", json_object_new_double(t->top_lp[k]));
		json_object_object_add(e, "bytes", token_bytes(q, n));
		json_object_array_add(top, e);
	}
	json_object_object_add(o, "top_logprobs", top);
	return o;
}

/* Completions logprobs: append the tokens of a chunk to the four lists. */
static void completion_lp_add(struct job *j, json_object *lp, const struct atlas_sched_chunk *c,
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
		json_object_array_add(tokens, utf8_string(p, n));
		json_object_array_add(tlp, json_object_new_double(t->logprob));
		json_object *m = json_object_new_object();
		for (int k = 0; k < t->n_top && k < j->logprobs; k++) {
			const char *q = piece(j, t->top_id[k], &n);
			json_object *ks = utf8_string(q, n);
			json_object_object_add(m, json_object_get_string(ks),
					       json_object_new_double(t->top_lp[k]));
			json_object_put(ks);
		}
		json_object_array_add(top, m);
		json_object_array_add(off, json_object_new_int64((int64_t)*offset));
		*offset += n;
	}
}

static json_object *completion_lp_new(void)
{
	json_object *lp = json_object_new_object();
	json_object_object_add(lp, "tokens", json_object_new_array());
	json_object_object_add(lp, "token_logprobs", json_object_new_array());
	json_object_object_add(lp, "top_logprobs", json_object_new_array());
	json_object_object_add(lp, "text_offset", json_object_new_array());
	return lp;
}

static const char *openai_finish(const struct atlas_sreq_result *r)
{
	return r->finish == ATLAS_FINISH_LENGTH ? "length" : "stop";
}

static const char *anthropic_stop(const struct atlas_sreq_result *r)
{
	switch (r->finish) {
	case ATLAS_FINISH_LENGTH: return "max_tokens";
	case ATLAS_FINISH_STOP: return "stop_sequence";
	default: return "end_turn";
	}
}

static json_object *usage_openai(struct job *j)
{
	json_object *u = json_object_new_object();
	json_object_object_add(u, "prompt_tokens", json_object_new_int64(j->n_prompt));
	json_object_object_add(u, "completion_tokens", json_object_new_int64(j->n_gen));
	json_object_object_add(u, "total_tokens", json_object_new_int64(j->n_prompt + j->n_gen));
	return u;
}

static json_object *usage_anthropic(struct job *j, bool output_only)
{
	json_object *u = json_object_new_object();
	if (!output_only)
		json_object_object_add(u, "input_tokens", json_object_new_int64(j->n_prompt));
	json_object_object_add(u, "output_tokens", json_object_new_int64(j->n_gen));
	return u;
}

/* The head shared by OpenAI objects. */
static json_object *openai_head(struct job *j, const char *object)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "id", json_object_new_string(j->id));
	json_object_object_add(o, "object", json_object_new_string(object));
	json_object_object_add(o, "created", json_object_new_int64(j->srv->created));
	json_object_object_add(o, "model", json_object_new_string(j->srv->served_name));
	return o;
}

static void log_done(struct job *j)
{
	if (j->logged)
		return;
	j->logged = true;
	if (!j->done) {
		/* the client left first: what we know so far */
		j->res.finish = ATLAS_FINISH_CANCELLED;
		j->res.n_prompt = j->n_prompt;
		j->res.n_gen = j->n_gen;
	}
	serve_metrics_done(&j->srv->metrics, &j->res);
	serve_log("%s: prompt %lld tokens, generated %lld tokens, ttft %.1f ms, total %.1f ms, finish %s%s%s",
		  j->id, (long long)j->res.n_prompt, (long long)j->res.n_gen, j->res.ttft_s * 1e3,
		  j->res.total_s * 1e3,
		  j->res.finish == ATLAS_FINISH_EOS ? "eos" : atlas_finish_name(j->res.finish),
		  j->res.rc ? ", error: " : "", j->res.rc ? j->res.error : "");
}

/* --- streaming --------------------------------------------------------- */

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
	json_object *o = openai_head(j, j->kind == JOB_CHAT ? "chat.completion.chunk"
							  : "text_completion");
	json_object *ch = json_object_new_array();
	if (choice)
		json_object_array_add(ch, choice);
	json_object_object_add(o, "choices", ch);
	if (j->include_usage)
		json_object_object_add(o, "usage", choice ? NULL : usage_openai(j));
	return o;
}

static json_object *choice_obj(struct job *j, json_object *delta_or_text, json_object *logprobs,
			       const char *finish)
{
	json_object *c = json_object_new_object();
	json_object_object_add(c, "index", json_object_new_int(0));
	if (j->kind == JOB_CHAT)
		json_object_object_add(c, "delta", delta_or_text);
	else
		json_object_object_add(c, "text", delta_or_text);
	json_object_object_add(c, "logprobs", logprobs);
	json_object_object_add(c, "finish_reason", finish ? json_object_new_string(finish) : NULL);
	return c;
}

static void stream_start(struct job *j)
{
	if (j->kind == JOB_MESSAGES) {
		json_object *m = json_object_new_object();
		json_object_object_add(m, "id", json_object_new_string(j->id));
		json_object_object_add(m, "type", json_object_new_string("message"));
		json_object_object_add(m, "role", json_object_new_string("assistant"));
		json_object_object_add(m, "content", json_object_new_array());
		json_object_object_add(m, "model", json_object_new_string(j->srv->served_name));
		json_object_object_add(m, "stop_reason", NULL);
		json_object_object_add(m, "stop_sequence", NULL);
		json_object_object_add(m, "usage", usage_anthropic(j, false));
		json_object *e = json_object_new_object();
		json_object_object_add(e, "type", json_object_new_string("message_start"));
		json_object_object_add(e, "message", m);
		sse(j, "message_start", e);
		e = json_object_new_object();
		json_object *cb = json_object_new_object();
		json_object_object_add(cb, "type", json_object_new_string("text"));
		json_object_object_add(cb, "text", json_object_new_string(""));
		json_object_object_add(e, "type", json_object_new_string("content_block_start"));
		json_object_object_add(e, "index", json_object_new_int(0));
		json_object_object_add(e, "content_block", cb);
		sse(j, "content_block_start", e);
		e = json_object_new_object();
		json_object_object_add(e, "type", json_object_new_string("ping"));
		sse(j, "ping", e);
	} else if (j->kind == JOB_CHAT) {
		json_object *d = json_object_new_object();
		json_object_object_add(d, "role", json_object_new_string("assistant"));
		json_object_object_add(d, "content", json_object_new_string(""));
		sse(j, NULL, chunk_obj(j, choice_obj(j, d, NULL, NULL)));
	} else if (j->echo_len) {
		sse(j, NULL, chunk_obj(j, choice_obj(j, utf8_string(j->echo, j->echo_len), NULL, NULL)));
	}
	j->phase = 1;
}

static void stream_tokens(struct job *j, const struct atlas_sched_chunk *c)
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
		json_object_object_add(d, "text", utf8_string(c->text, c->text_len));
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
				json_object_array_add(content, chat_lp_entry(j, &c->tok[i]));
		lp = json_object_new_object();
		json_object_object_add(lp, "content", content);
	} else if (any_lp) {
		lp = completion_lp_new();
		completion_lp_add(j, lp, c, &j->lp_off);
	}
	json_object *body = utf8_string(c->text, c->text_len);
	if (j->kind == JOB_CHAT) {
		json_object *d = json_object_new_object();
		json_object_object_add(d, "content", body);
		body = d;
	}
	sse(j, NULL, chunk_obj(j, choice_obj(j, body, lp, NULL)));
}

static void stream_end(struct job *j)
{
	if (j->res.rc) {
		json_object *err = json_object_new_object();
		json_object_object_add(err, "message", json_object_new_string(j->res.error));
		json_object_object_add(err, "type", json_object_new_string(
			j->kind == JOB_MESSAGES ? "api_error" : "server_error"));
		json_object_object_add(err, "param", NULL);
		json_object_object_add(err, "code", NULL);
		json_object *o = json_object_new_object();
		if (j->kind == JOB_MESSAGES)
			json_object_object_add(o, "type", json_object_new_string("error"));
		json_object_object_add(o, "error", err);
		sse(j, j->kind == JOB_MESSAGES ? "error" : NULL, o);
		if (j->kind != JOB_MESSAGES)
			sbuf_add(&j->out, "data: [DONE]\n\n", 14);
		j->phase = 2;
		return;
	}
	if (j->kind == JOB_MESSAGES) {
		json_object *e = json_object_new_object();
		json_object_object_add(e, "type", json_object_new_string("content_block_stop"));
		json_object_object_add(e, "index", json_object_new_int(0));
		sse(j, "content_block_stop", e);
		json_object *d = json_object_new_object();
		json_object_object_add(d, "stop_reason", json_object_new_string(anthropic_stop(&j->res)));
		int si = j->res.stop_index;
		json_object_object_add(d, "stop_sequence", j->res.finish == ATLAS_FINISH_STOP && si >= 0 &&
					   si < j->n_stop ? json_object_new_string(j->stops[si]) : NULL);
		e = json_object_new_object();
		json_object_object_add(e, "type", json_object_new_string("message_delta"));
		json_object_object_add(e, "delta", d);
		json_object_object_add(e, "usage", usage_anthropic(j, true));
		sse(j, "message_delta", e);
		e = json_object_new_object();
		json_object_object_add(e, "type", json_object_new_string("message_stop"));
		sse(j, "message_stop", e);
	} else {
		json_object *body = j->kind == JOB_CHAT ? json_object_new_object()
							: json_object_new_string("");
		sse(j, NULL, chunk_obj(j, choice_obj(j, body, NULL, openai_finish(&j->res))));
		if (j->include_usage)
			sse(j, NULL, chunk_obj(j, NULL));
		sbuf_add(&j->out, "data: [DONE]\n\n", 14);
	}
	j->phase = 2;
}

/* Take what the engine produced (waiting up to timeout_ms) and turn it
 * into stream bytes or accumulated text. Returns 1 if anything came. */
static int pump(struct job *j, int timeout_ms)
{
	struct atlas_sched_chunk c;
	if (!atlas_sreq_take(j->r, timeout_ms, &c))
		return 0;
	for (size_t i = 0; i < c.n; i++)
		j->n_gen += c.tok[i].id >= 0;
	if (j->stream) {
		stream_tokens(j, &c);
	} else {
		sbuf_add(&j->text, c.text ? c.text : "", c.text_len);
		if (j->logprobs >= 0 && j->kind == JOB_CHAT) {
			for (size_t i = 0; i < c.n; i++)
				if (c.tok[i].id >= 0)
					json_object_array_add(j->lp, chat_lp_entry(j, &c.tok[i]));
		} else if (j->logprobs >= 0) {
			completion_lp_add(j, j->lp, &c, &j->lp_off);
		}
	}
	if (c.done) {
		atlas_sreq_result(j->r, &j->res);
		j->n_gen = j->res.n_gen;
		j->done = true;
		log_done(j);
		if (j->stream)
			stream_end(j);
	}
	atlas_sched_chunk_free(&c);
	return 1;
}

static void job_free(struct job *j)
{
	if (!j)
		return;
	if (j->r && !j->done)
		log_done(j);
	atlas_sreq_release(j->r);
	for (int i = 0; i < j->n_stop; i++)
		free(j->stops[i]);
	free(j->echo);
	sbuf_free(&j->out);
	sbuf_free(&j->text);
	json_object_put(j->lp);
	free(j);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct job *j = cls;
	while (j->out_pos == j->out.len) {
		j->out.len = j->out_pos = 0;
		if (j->phase == 0) {
			stream_start(j);
			continue;
		}
		if (j->phase == 2)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (!pump(j, WAIT_MS) && serve_client_gone(j->mc))
			return MHD_CONTENT_READER_END_WITH_ERROR; /* job_free cancels */
	}
	size_t n = j->out.len - j->out_pos;
	if (n > max)
		n = max;
	memcpy(buf, j->out.p + j->out_pos, n);
	j->out_pos += n;
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	job_free(cls);
}

/* The complete JSON body of a finished non-streaming job. */
static json_object *final_body(struct job *j)
{
	const char *text = j->text.p ? j->text.p : "";
	if (j->kind == JOB_MESSAGES) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "id", json_object_new_string(j->id));
		json_object_object_add(o, "type", json_object_new_string("message"));
		json_object_object_add(o, "role", json_object_new_string("assistant"));
		json_object_object_add(o, "model", json_object_new_string(j->srv->served_name));
		json_object *content = json_object_new_array(), *blk = json_object_new_object();
		json_object_object_add(blk, "type", json_object_new_string("text"));
		json_object_object_add(blk, "text", utf8_string(text, j->text.len));
		json_object_array_add(content, blk);
		json_object_object_add(o, "content", content);
		json_object_object_add(o, "stop_reason", json_object_new_string(anthropic_stop(&j->res)));
		int si = j->res.stop_index;
		json_object_object_add(o, "stop_sequence", j->res.finish == ATLAS_FINISH_STOP && si >= 0 &&
					   si < j->n_stop ? json_object_new_string(j->stops[si]) : NULL);
		json_object_object_add(o, "usage", usage_anthropic(j, false));
		return o;
	}
	json_object *choice = json_object_new_object();
	json_object_object_add(choice, "index", json_object_new_int(0));
	json_object *lp = NULL;
	if (j->lp) {
		if (j->kind == JOB_CHAT) {
			lp = json_object_new_object();
			json_object_object_add(lp, "content", json_object_get(j->lp));
		} else {
			lp = json_object_get(j->lp);
		}
	}
	if (j->kind == JOB_CHAT) {
		json_object *m = json_object_new_object();
		json_object_object_add(m, "role", json_object_new_string("assistant"));
		json_object_object_add(m, "content", utf8_string(text, j->text.len));
		json_object_object_add(choice, "message", m);
	} else {
		struct sbuf all = {0};
		sbuf_add(&all, j->echo ? j->echo : "", j->echo_len);
		sbuf_add(&all, text, j->text.len);
		json_object_object_add(choice, "text", utf8_string(all.p, all.len));
		sbuf_free(&all);
	}
	json_object_object_add(choice, "logprobs", lp);
	json_object_object_add(choice, "finish_reason", json_object_new_string(openai_finish(&j->res)));
	json_object *o = openai_head(j, j->kind == JOB_CHAT ? "chat.completion" : "text_completion");
	json_object *choices = json_object_new_array();
	json_object_array_add(choices, choice);
	json_object_object_add(o, "choices", choices);
	json_object_object_add(o, "usage", usage_openai(j));
	return o;
}

enum MHD_Result serve_run_job(struct conn *c, enum job_kind kind, struct serve_gen *g,
			      const char *echo_text, size_t echo_len)
{
	struct atlas_server *s = c->srv;
	struct job *j = calloc(1, sizeof(*j));
	if (!j) {
		serve_gen_free(g);
		return serve_reply_error(c, 500, NULL, NULL, "out of memory");
	}
	j->srv = s;
	j->mc = c->mc;
	j->kind = kind;
	j->stream = g->stream;
	j->include_usage = g->stream && g->include_usage && kind != JOB_MESSAGES;
	j->logprobs = kind == JOB_MESSAGES ? -1 : g->logprobs;
	j->n_prompt = g->sp.n_prompt;
	serve_new_id(s, kind == JOB_CHAT ? "chatcmpl-" : kind == JOB_MESSAGES ? "msg_" : "cmpl-",
		     j->id, sizeof(j->id));
	for (int i = 0; i < g->n_stop; i++)
		j->stops[j->n_stop++] = strdup(g->stop[i]);
	if (echo_len && (j->echo = malloc(echo_len + 1))) {
		memcpy(j->echo, echo_text, echo_len);
		j->echo[echo_len] = '\0';
		j->echo_len = echo_len;
	}
	j->lp_off = j->echo_len;
	if (j->logprobs >= 0 && !j->stream)
		j->lp = kind == JOB_CHAT ? json_object_new_array() : completion_lp_new();
	g->sp.top_logprobs = j->logprobs;
	int rc = atlas_sched_submit(s->sched, &g->sp, &j->r);
	serve_gen_free(g);
	if (rc) {
		j->r = NULL;
		job_free(j);
		unsigned st = rc == ATLAS_EIO ? 503 : rc == ATLAS_ENOMEM ? 500 : 400;
		return serve_reply_error(c, st, NULL, NULL, "%s", atlas_errmsg());
	}
	if (j->stream) {
		struct MHD_Response *r = MHD_create_response_from_callback(
			MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, j, stream_free);
		if (!r) {
			job_free(j);
			return MHD_NO;
		}
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		MHD_add_response_header(r, "X-Accel-Buffering", "no");
		enum MHD_Result mr = MHD_queue_response(c->mc, 200, r);
		MHD_destroy_response(r);
		c->answered = true;
		serve_metrics_status(&s->metrics, 200);
		return mr;
	}
	while (!j->done) {
		if (!pump(j, WAIT_MS) && serve_client_gone(c->mc)) {
			job_free(j); /* cancels; nobody to answer */
			return MHD_NO;
		}
	}
	enum MHD_Result mr;
	if (j->res.rc)
		mr = serve_reply_error(c, 500, NULL, NULL, "generation failed: %s", j->res.error);
	else
		mr = serve_reply_json(c, 200, final_body(j));
	job_free(j);
	return mr;
}
