/* job.c - one generation request from submission to its last byte:
 * each choice (n for each prompt) is its own scheduler request; their
 * output is taken as it comes and becomes the JSON body of a
 * non-streaming response (job_body.c) or the SSE stream
 * (job_stream.c). The handler thread waits for output in short slices
 * and checks whether the client has gone, so a disconnect cancels every
 * choice (and frees their KV blocks) at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "job.h"

/* Slices of waiting between disconnect checks; shorter with several
 * choices, since the one waited on may be queued while the others run. */
#define WAIT_MS 100
#define WAIT_MANY_MS 10

static void log_done(struct job *j, struct job_choice *ch)
{
	if (ch->logged)
		return;
	ch->logged = true;
	if (!ch->done) {
		/* the client left first, or another choice failed: what we know so far */
		ch->res.finish = ATLAS_FINISH_CANCELLED;
		ch->res.n_prompt = j->prompts[ch->prompt].n;
		ch->res.n_gen = ch->n_gen;
	}
	serve_metrics_done(&j->srv->metrics, &ch->res);
	char id[96];
	if (j->n_ch > 1)
		snprintf(id, sizeof(id), "%s[%d]", j->id, ch->index);
	else
		snprintf(id, sizeof(id), "%s", j->id);
	const struct atlas_sreq_result *r = &ch->res;
	serve_log("%s: prompt %lld tokens (%lld cached), generated %lld tokens, ttft %.1f ms, "
		  "total %.1f ms, finish %s%s%s",
		  id, (long long)r->n_prompt, (long long)r->n_cached, (long long)r->n_gen,
		  r->ttft_s * 1e3, r->total_s * 1e3,
		  r->finish == ATLAS_FINISH_EOS ? "eos" : atlas_finish_name(r->finish),
		  r->rc ? ", error: " : "", r->rc ? r->error : "");
}

/* Every choice has finished, or one has failed (the rest are not waited for). */
static bool finished(const struct job *j)
{
	return j->n_done == j->n_ch || j->failed >= 0;
}

/* Take what the engine produced for ch (waiting up to timeout_ms) and
 * turn it into stream bytes or accumulated text. Returns 1 if anything
 * came. */
static int take(struct job *j, struct job_choice *ch, int timeout_ms)
{
	struct atlas_sched_chunk c;
	if (!atlas_sreq_take(ch->r, timeout_ms, &c))
		return 0;
	for (size_t i = 0; i < c.n; i++)
		ch->n_gen += c.tok[i].id >= 0;
	if (j->stream) {
		job_stream_tokens(j, ch, &c);
	} else {
		sbuf_add(&ch->text, c.text ? c.text : "", c.text_len);
		if (j->logprobs >= 0 && j->kind == JOB_CHAT) {
			for (size_t i = 0; i < c.n; i++)
				if (c.tok[i].id >= 0)
					json_object_array_add(ch->lp, job_chat_lp(j, &c.tok[i]));
		} else if (j->logprobs >= 0) {
			job_completion_lp_add(j, ch->lp, &c, &ch->lp_off);
		}
	}
	if (c.done) {
		atlas_sreq_result(ch->r, &ch->res);
		ch->n_gen = ch->res.n_gen;
		ch->done = true;
		j->n_done++;
		if (ch->res.rc && j->failed < 0)
			j->failed = (int)(ch - j->ch);
		log_done(j, ch);
		if (j->stream)
			job_stream_choice_end(j, ch);
	}
	atlas_sched_chunk_free(&c);
	return 1;
}

/* Take the output of every choice; when none has any, wait up to
 * timeout_ms on one (the one that produced last: it is running).
 * Closes the stream once finished. Returns 1 if anything came. */
static int pump(struct job *j, int timeout_ms)
{
	int got = 0;
	for (int i = 0; i < j->n_ch && !finished(j); i++) {
		if (!j->ch[i].done && take(j, &j->ch[i], 0)) {
			got = 1;
			j->wait_on = i;
		}
	}
	if (!got && !finished(j)) {
		int w = j->wait_on;
		while (j->ch[w].done)
			w = (w + 1) % j->n_ch;
		j->wait_on = w;
		got = take(j, &j->ch[w],
			   j->n_ch > 1 && timeout_ms > WAIT_MANY_MS ? WAIT_MANY_MS : timeout_ms);
	}
	if (j->stream && j->phase == 1 && finished(j))
		job_stream_end(j);
	return got;
}

static void job_free(struct job *j)
{
	if (!j)
		return;
	for (int i = 0; i < j->n_ch; i++) {
		struct job_choice *ch = &j->ch[i];
		if (ch->r && !ch->done)
			log_done(j, ch);
		atlas_sreq_release(ch->r); /* cancels it if still running */
		sbuf_free(&ch->text);
		json_object_put(ch->lp);
	}
	free(j->ch);
	for (int i = 0; i < j->n_stop; i++)
		free(j->stops[i]);
	for (int i = 0; i < j->n_prompts; i++) {
		free(j->prompts[i].ids);
		free(j->prompts[i].echo);
	}
	free(j->prompts);
	sbuf_free(&j->out);
	free(j);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct job *j = cls;
	while (j->out_pos == j->out.len) {
		j->out.len = j->out_pos = 0;
		if (j->phase == 0) {
			job_stream_start(j);
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

/* A job for g's prompts (taken from g) with g->n choices each, nothing
 * submitted yet. NULL when out of memory. */
static struct job *job_new(struct atlas_server *s, enum job_kind kind, struct serve_gen *g)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->srv = s;
	j->kind = kind;
	j->failed = -1;
	j->stream = g->stream;
	j->include_usage = g->stream && g->include_usage && kind != JOB_MESSAGES;
	j->logprobs = kind == JOB_MESSAGES ? -1 : g->logprobs;
	j->prompts = g->prompts;
	j->n_prompts = g->n_prompts;
	g->prompts = NULL;
	g->n_prompts = 0;
	serve_new_id(s,
		     kind == JOB_CHAT	    ? "chatcmpl-"
		     : kind == JOB_MESSAGES ? "msg_"
					    : "cmpl-",
		     j->id, sizeof(j->id));
	for (int i = 0; i < g->n_stop; i++)
		if ((j->stops[j->n_stop] = strdup(g->stop[i])))
			j->n_stop++;
	int n = kind == JOB_MESSAGES ? 1 : g->n;
	if (!(j->ch = calloc((size_t)j->n_prompts * (size_t)n, sizeof(*j->ch)))) {
		job_free(j);
		return NULL;
	}
	j->n_ch = j->n_prompts * n;
	for (int i = 0; i < j->n_ch; i++) {
		struct job_choice *ch = &j->ch[i];
		ch->index = i;
		ch->prompt = i / n;
		ch->first = i % n == 0;
		ch->lp_off = j->prompts[ch->prompt].echo_len;
		if (j->logprobs >= 0 && !j->stream)
			ch->lp =
			    kind == JOB_CHAT ? json_object_new_array() : job_completion_lp_new();
	}
	return j;
}

/* Submit every choice: choice j of a prompt samples with seed + j. On a
 * failure the choices already submitted are released (cancelled) and e
 * says why. */
static int job_submit(struct job *j, struct serve_gen *g, struct serve_err *e)
{
	uint64_t seed = g->sp.gen.sampling.seed;
	int n = j->n_ch / j->n_prompts;
	g->sp.top_logprobs = j->logprobs;
	for (int i = 0; i < j->n_ch; i++) {
		struct job_choice *ch = &j->ch[i];
		g->sp.prompt = j->prompts[ch->prompt].ids;
		g->sp.n_prompt = j->prompts[ch->prompt].n;
		g->sp.gen.sampling.seed = seed + (uint64_t)(i % n);
		int rc = atlas_sched_submit(j->srv->sched, &g->sp, &ch->r);
		if (!rc)
			continue;
		ch->r = NULL;
		char where[32] = "";
		if (j->n_prompts > 1)
			snprintf(where, sizeof(where), "'prompt[%d]': ", ch->prompt);
		serve_err_set(e,
			      rc == ATLAS_EIO	   ? 503
			      : rc == ATLAS_ENOMEM ? 500
						   : 400,
			      NULL,
			      rc == ATLAS_ERANGE   ? "context_length_exceeded"
			      : rc == ATLAS_EINVAL ? "invalid_value"
						   : NULL,
			      "%s%s", where, atlas_errmsg());
		for (int k = 0; k < i; k++) {
			atlas_sreq_release(j->ch[k].r);
			j->ch[k].r = NULL;
		}
		return -1;
	}
	return 0;
}

enum MHD_Result serve_run_job(struct conn *c, enum job_kind kind, struct serve_gen *g)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	if (!g->n_prompts && serve_gen_push_prompt(g, NULL, 0, &e)) {
		serve_gen_free(g);
		return serve_reply_err(c, &e);
	}
	struct job *j = job_new(s, kind, g);
	if (!j) {
		serve_gen_free(g);
		return serve_reply_error(c, 500, NULL, NULL, "out of memory");
	}
	j->mc = c->mc;
	int rc = job_submit(j, g, &e);
	serve_gen_free(g);
	if (rc) {
		job_free(j);
		return serve_reply_err(c, &e);
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
	while (!finished(j)) {
		if (!pump(j, WAIT_MS) && serve_client_gone(c->mc)) {
			job_free(j); /* cancels; nobody to answer */
			return MHD_NO;
		}
	}
	enum MHD_Result mr;
	if (j->failed >= 0)
		mr = serve_reply_error(c, 500, NULL, NULL, "generation failed: %s",
				       j->ch[j->failed].res.error);
	else
		mr = serve_reply_json(c, 200, job_final_body(j));
	job_free(j);
	return mr;
}
