/* job.c - one generation request from submission to its last byte:
 * each choice (n for each prompt) is its own scheduler request; their
 * output is taken as it comes and becomes the JSON body of a
 * non-streaming response (job_body.c) or the SSE stream (job_stream.c).
 *
 * A job runs in its request's worker thread (http.c), never in one of
 * libmicrohttpd's pool threads, which serve every other connection. The
 * worker waits for output in short slices; between them it checks
 * whether the client has gone (a disconnect cancels every choice and
 * frees their KV blocks at once) and whether shutdown has cut the job.
 * Stream bytes reach libmicrohttpd through j->wire: its reader suspends
 * the connection while the wire is empty and the worker resumes it when
 * it adds bytes. */
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
		/* the client left, shutdown cut it, or another choice failed:
		 * what we know so far, with the times as they were */
		ch->res.finish = ATLAS_FINISH_CANCELLED;
		ch->res.n_prompt = j->prompts[ch->prompt].n;
		ch->res.n_gen = ch->n_gen;
		ch->res.ttft_s = ch->t_first > 0 ? ch->t_first - j->t0 : 0;
		ch->res.total_s = serve_now() - j->t0;
	}
	serve_metrics_done(&j->srv->metrics, &ch->res);
	serve_limits_charge(&j->srv->limits, j->client, ch->res.n_gen);
	char id[96];
	if (j->n_ch > 1)
		snprintf(id, sizeof(id), "%s[%d]", j->id, ch->index);
	else
		snprintf(id, sizeof(id), "%s", j->id);
	const struct atlas_sreq_result *r = &ch->res;
	char why[48] = "";
	if (!ch->done && j->why)
		snprintf(why, sizeof(why), " (%s)", j->why);
	serve_log("%s: prompt %lld tokens (%lld cached), generated %lld tokens, ttft %.1f ms, "
		  "total %.1f ms, finish %s%s%s%s",
		  id, (long long)r->n_prompt, (long long)r->n_cached, (long long)r->n_gen,
		  r->ttft_s * 1e3, r->total_s * 1e3,
		  r->finish == ATLAS_FINISH_EOS ? "eos" : atlas_finish_name(r->finish), why,
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
	if (c.n && ch->t_first == 0)
		ch->t_first = serve_now();
	if (ch->tp) {
		/* the splitter takes the text; logprobs go on as before */
		job_agent_text(j, ch, c.text, c.text_len);
		c.text_len = 0;
	}
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
		if (!ch->res.rc && ch->res.finish == ATLAS_FINISH_CANCELLED) {
			/* the engine dropped it (stopping): an error, never a finish */
			ch->res.rc = ATLAS_EIO;
			snprintf(ch->res.error, sizeof(ch->res.error),
				 "the request was cancelled by the server");
		}
		ch->n_gen = ch->res.n_gen;
		ch->done = true;
		job_agent_end(j, ch);
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

/* Log and release (cancel) every choice still held, with j->why. */
static void end_choices(struct job *j, const char *why)
{
	if (why && !j->why)
		j->why = why;
	for (int i = 0; i < j->n_ch; i++) {
		struct job_choice *ch = &j->ch[i];
		if (ch->r && !ch->done)
			log_done(j, ch);
		atlas_sreq_release(ch->r); /* cancels it if still running */
		ch->r = NULL;
	}
}

static void job_free(struct job *j)
{
	if (!j)
		return;
	end_choices(j, NULL);
	for (int i = 0; i < j->n_ch; i++) {
		sbuf_free(&j->ch[i].text);
		json_object_put(j->ch[i].lp);
		job_agent_free_choice(&j->ch[i]);
	}
	json_object_put(j->tools);
	free(j->ch);
	for (int i = 0; i < j->n_stop; i++)
		free(j->stops[i]);
	for (int i = 0; i < j->n_prompts; i++) {
		free(j->prompts[i].ids);
		free(j->prompts[i].echo);
	}
	free(j->prompts);
	sbuf_free(&j->out);
	sbuf_free(&j->wire);
	pthread_mutex_destroy(&j->mu);
	free(j);
}

/* Drop one holder's reference; the last frees the job. */
static void job_unref(struct job *j)
{
	pthread_mutex_lock(&j->mu);
	bool last = --j->refs == 0;
	pthread_mutex_unlock(&j->mu);
	if (last)
		job_free(j);
}

static bool is_cut(struct job *j)
{
	return __atomic_load_n(&j->srv->cut, __ATOMIC_ACQUIRE);
}

/* --- streams ------------------------------------------------------------ */

/* Move the worker's new bytes to the wire (`last`: no more will come) and
 * wake the reader if it waits. */
static void flush(struct job *j, bool last)
{
	struct MHD_Connection *wake = NULL;
	pthread_mutex_lock(&j->mu);
	if (j->out.len && !j->closed)
		sbuf_add(&j->wire, j->out.p, j->out.len);
	j->out.len = 0;
	if (last)
		j->eof = true;
	if (j->waiting && (j->wire_pos < j->wire.len || j->eof || j->abort)) {
		j->waiting = false;
		wake = j->mc;
	}
	pthread_mutex_unlock(&j->mu);
	/* only this thread resumes a waiting reader, so the connection stays
	 * suspended (and alive) until this call */
	if (wake)
		MHD_resume_connection(wake);
}

/* Has the client gone? MHD saw it (the response was freed), or the
 * connection, suspended while the reader waits, has hung up; then the
 * reader is woken to end the response with an error. */
static bool stream_gone(struct job *j, bool poll_socket)
{
	pthread_mutex_lock(&j->mu);
	bool gone = j->closed;
	struct MHD_Connection *mc = j->waiting ? j->mc : NULL; /* suspended: ours to look at */
	pthread_mutex_unlock(&j->mu);
	if (!gone && poll_socket && mc && serve_client_gone(mc)) {
		pthread_mutex_lock(&j->mu);
		j->abort = true;
		pthread_mutex_unlock(&j->mu);
		gone = true;
	}
	return gone;
}

/* MHD's reader (a pool thread): hand over wire bytes, or suspend the
 * connection until the worker adds some; never blocks. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct job *j = cls;
	ssize_t n = 0;
	pthread_mutex_lock(&j->mu);
	if (j->abort) {
		n = MHD_CONTENT_READER_END_WITH_ERROR;
	} else if (j->wire_pos < j->wire.len) {
		size_t k = j->wire.len - j->wire_pos;
		if (k > max)
			k = max;
		memcpy(buf, j->wire.p + j->wire_pos, k);
		j->wire_pos += k;
		if (j->wire_pos == j->wire.len)
			j->wire.len = j->wire_pos = 0;
		n = (ssize_t)k;
	} else if (j->eof) {
		n = MHD_CONTENT_READER_END_OF_STREAM;
	} else {
		j->waiting = true;
		MHD_suspend_connection(j->mc);
	}
	pthread_mutex_unlock(&j->mu);
	return n;
}

static void stream_free(void *cls)
{
	struct job *j = cls;
	pthread_mutex_lock(&j->mu);
	j->closed = true;
	j->waiting = false;
	j->mc = NULL;
	pthread_mutex_unlock(&j->mu);
	job_unref(j);
}

/* The worker's part of a stream once the connection is handed back: pump
 * tokens to the wire until the stream ends, the client goes or shutdown
 * cuts it (an error event). */
static void stream_run(struct job *j)
{
	while (j->phase != 2) {
		if (is_cut(j)) {
			job_stream_cut(j, "the server is shutting down; the response is incomplete");
			end_choices(j, "server shutdown");
			break;
		}
		int got = pump(j, WAIT_MS);
		if (j->out.len)
			flush(j, false);
		if (stream_gone(j, !got)) {
			end_choices(j, NULL); /* logged as plain "cancelled" */
			break;
		}
	}
	end_choices(j, NULL);
	flush(j, true);
}

/* --- jobs --------------------------------------------------------------- */

/* A job for g's prompts (taken from g) with g->n choices each, nothing
 * submitted yet. NULL when out of memory. */
static struct job *job_new(struct atlas_server *s, enum job_kind kind, struct serve_gen *g)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	pthread_mutex_init(&j->mu, NULL);
	j->refs = 1;
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
	job_agent_take(j, g);
	for (int i = 0; i < j->n_ch; i++) {
		struct job_choice *ch = &j->ch[i];
		ch->index = i;
		ch->prompt = i / n;
		ch->first = i % n == 0;
		ch->lp_off = j->prompts[ch->prompt].echo_len;
		if (j->logprobs >= 0 && !j->stream)
			ch->lp =
			    kind == JOB_CHAT ? json_object_new_array() : job_completion_lp_new();
		if (job_agent_start(j, ch)) {
			job_free(j);
			return NULL;
		}
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
	j->t0 = serve_now();
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
	int64_t prompt = 0;
	for (int i = 0; i < j->n_prompts; i++)
		prompt += j->prompts[i].n;
	serve_limits_charge(&j->srv->limits, j->client, prompt);
	return 0;
}

/* Answer a stream: the response goes to MHD with the opening events on
 * the wire, then this worker pumps the rest. Takes j. */
static enum MHD_Result run_stream(struct conn *c, struct job *j)
{
	j->refs = 2; /* this worker and MHD's response */
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
								   stream_read, j, stream_free);
	if (!r) {
		j->refs = 1;
		job_unref(j);
		return serve_reply_error(c, 500, NULL, NULL, "out of memory");
	}
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	job_stream_start(j);
	flush(j, false);
	enum MHD_Result mr = serve_queue(c, 200, r);
	serve_handoff(c); /* c is MHD's again */
	stream_run(j);
	job_unref(j);
	return mr;
}

/* Answer with one JSON body once every choice has finished. Takes j. */
static enum MHD_Result run_whole(struct conn *c, struct job *j)
{
	enum MHD_Result mr;
	while (!finished(j)) {
		if (is_cut(j)) {
			end_choices(j, "server shutdown");
			job_unref(j);
			return serve_reply_error(c, 503, NULL, "server_shutting_down",
						 "the server is shutting down; the request was cancelled");
		}
		/* the connection is suspended while this worker runs: ours to poll */
		if (!pump(j, WAIT_MS) && serve_client_gone(c->mc)) {
			end_choices(j, NULL); /* logged as plain "cancelled" */
			job_unref(j);
			return MHD_NO; /* nobody to answer */
		}
	}
	if (j->failed >= 0)
		mr = serve_reply_error(c, 500, NULL, NULL, "generation failed: %s",
				       j->ch[j->failed].res.error);
	else
		mr = serve_reply_json(c, 200, job_final_body(j));
	job_unref(j);
	return mr;
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
	if (s->parse_only) {
		/* the fuzzing entry point: everything up to submission */
		serve_gen_free(g);
		job_unref(j);
		return serve_reply_json(c, 200, json_object_new_object());
	}
	j->mc = c->mc;
	snprintf(j->client, sizeof(j->client), "%s", c->client);
	int rc = job_submit(j, g, &e);
	serve_gen_free(g);
	if (rc) {
		job_unref(j);
		return serve_reply_err(c, &e);
	}
	return j->stream ? run_stream(c, j) : run_whole(c, j);
}
