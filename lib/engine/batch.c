/* batch.c - the ordered multi-prompt driver (see batch.h): a window of
 * slots in input order, each a scheduler request or a bad input, whose
 * output is buffered until the slot reaches the head of the window. */
#include "batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "../core/error.h"

/* Tokens of a slot waiting for their turn. */
struct slot {
	struct atlas_sreq *r;          /* the request, NULL for a bad input or once done */
	struct atlas_batch_input in;   /* the input (ids freed after submission) */
	int rc;                        /* failure code: bad input, submit or engine error */
	char error[256];               /* its message */
	bool done;                     /* ended; result below is valid */
	bool started;                  /* a token has come out */
	int64_t n_decode;              /* one-token steps after the first token */
	struct atlas_sreq_result res;  /* outcome */
	struct atlas_sched_token *tok; /* buffered tokens */
	size_t n_tok, cap_tok;         /* of tok */
	char *text;                    /* their text */
	size_t len_text, cap_text;     /* of text */
};

/* Append a chunk's tokens to the slot's buffer. 0 or ATLAS_ENOMEM. */
static int buffer(struct slot *sl, const struct atlas_sched_chunk *c)
{
	if (sl->n_tok + c->n > sl->cap_tok) {
		size_t cap = sl->cap_tok ? sl->cap_tok : 16;
		while (cap < sl->n_tok + c->n)
			cap *= 2;
		struct atlas_sched_token *t = realloc(sl->tok, cap * sizeof(*t));
		if (!t)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		sl->tok = t;
		sl->cap_tok = cap;
	}
	if (sl->len_text + c->text_len + 1 > sl->cap_text) {
		size_t cap = sl->cap_text ? sl->cap_text : 256;
		while (cap < sl->len_text + c->text_len + 1)
			cap *= 2;
		char *b = realloc(sl->text, cap);
		if (!b)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		sl->text = b;
		sl->cap_text = cap;
	}
	for (size_t i = 0; i < c->n; i++) {
		sl->tok[sl->n_tok] = c->tok[i];
		sl->tok[sl->n_tok++].text_off += sl->len_text;
	}
	if (c->text_len)
		memcpy(sl->text + sl->len_text, c->text, c->text_len);
	sl->len_text += c->text_len;
	return 0;
}

/* Hand the buffered tokens of the head slot to the caller. */
static void emit(const struct atlas_batch_io *io, int64_t index, struct slot *sl)
{
	for (size_t i = 0; i < sl->n_tok; i++)
		io->token(io->ud, index, sl->in.tag, sl->tok[i].id, sl->text + sl->tok[i].text_off,
			  sl->tok[i].text_len);
	sl->n_tok = 0;
	sl->len_text = 0;
}

static void slot_release(struct slot *sl)
{
	if (sl->r)
		atlas_sreq_release(sl->r);
	free(sl->in.ids);
	free(sl->tok);
	free(sl->text);
	memset(sl, 0, sizeof(*sl));
}

/* Take the slot's new output; mark it done with its result. */
static void collect(struct slot *sl)
{
	struct atlas_sched_chunk c;
	if (!sl->r || sl->done)
		return;
	atlas_sreq_take(sl->r, 0, &c);
	if (c.n)
		sl->started = true;
	if (buffer(sl, &c) && !sl->rc) {
		sl->rc = ATLAS_ENOMEM;
		snprintf(sl->error, sizeof(sl->error), "%s", atlas_errmsg());
	}
	if (c.done) {
		atlas_sreq_result(sl->r, &sl->res);
		atlas_sreq_release(sl->r);
		sl->r = NULL;
		sl->done = true;
		if (sl->res.rc && !sl->rc) {
			sl->rc = sl->res.rc;
			snprintf(sl->error, sizeof(sl->error), "%s", sl->res.error);
		}
	}
	atlas_sched_chunk_free(&c);
}

int atlas_batch_generate(struct atlas_sched *s, const struct atlas_gen_params *gp,
			 int64_t parallel, const struct atlas_batch_io *io,
			 struct atlas_batch_totals *tot)
{
	/* the window: inputs [head, head + n) in a ring of `cap` slots; at
	 * most `parallel` hold a running request, and finished ones wait for
	 * their turn in at most as many more */
	int64_t cap = parallel < 1 ? 2 : 2 * parallel, head = 0, n = 0, running = 0;
	struct slot *w = calloc((size_t)cap, sizeof(*w));
	struct atlas_batch_totals t = {0};
	bool eof = false;
	int rc = 0, stop_rc = 0;
	if (!w)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if (parallel < 1)
		parallel = 1;
	double t0 = atlas_now();
	for (;;) {
		/* 1. fill the window */
		while (!eof && n < cap && running < parallel) {
			struct slot *sl = &w[(head + n) % cap];
			memset(sl, 0, sizeof(*sl));
			int r = io->next(io->ud, &sl->in);
			if (r <= 0) {
				eof = true;
				stop_rc = r;
				break;
			}
			n++;
			t.inputs++;
			if (sl->in.bad) {
				sl->rc = ATLAS_EINVAL;
				snprintf(sl->error, sizeof(sl->error), "%s", sl->in.error);
				sl->done = true;
				continue;
			}
			struct atlas_sreq_params rp = {.prompt = sl->in.ids, .n_prompt = sl->in.n,
						       .gen = *gp, .top_logprobs = -1};
			if (atlas_sched_submit(s, &rp, &sl->r)) {
				sl->rc = ATLAS_EINVAL;
				snprintf(sl->error, sizeof(sl->error), "%s", atlas_errmsg());
				sl->done = true;
			} else {
				running++;
			}
			free(sl->in.ids);
			sl->in.ids = NULL;
		}
		if (!n)
			break;
		/* 2. one step, then everybody's output */
		int sr = running ? atlas_sched_step(s) : 0;
		for (int64_t i = 0; i < n; i++) {
			struct slot *sl = &w[(head + i) % cap];
			if (sl->done)
				continue;
			if (sl->started)
				sl->n_decode++;
			collect(sl);
			if (sl->done)
				running--;
		}
		if (sr == 0 && running > 0) {
			/* nothing ran although requests wait: cannot happen with a
			 * scheduler of our own; do not spin */
			rc = atlas_error(ATLAS_EIO, "the scheduler stalled with %lld requests queued",
					 (long long)running);
			break;
		}
		/* 3. the head's tokens go out; ended heads leave the window */
		while (n) {
			struct slot *sl = &w[head % cap];
			emit(io, head, sl);
			if (!sl->done)
				break;
			struct atlas_batch_end e = {.index = head, .rc = sl->rc,
						    .error = sl->rc ? sl->error : NULL,
						    .tag = sl->in.tag};
			if (!sl->rc) {
				atlas_gen_stats_from(&e.st, &sl->res, sl->n_decode);
				t.prompt_tokens += e.st.n_prompt;
				t.cached_tokens += e.st.n_cached;
				t.gen_tokens += e.st.n_gen;
			} else {
				t.failed++;
			}
			io->done(io->ud, &e);
			slot_release(sl);
			head++;
			n--;
		}
		if (io->progress)
			io->progress(io->ud, head, t.inputs, eof, t.gen_tokens);
	}
	for (int64_t i = 0; i < n; i++)
		slot_release(&w[(head + i) % cap]);
	free(w);
	t.wall_s = atlas_now() - t0;
	if (tot)
		*tot = t;
	if (rc)
		return rc;
	if (stop_rc < 0)
		return stop_rc;
	return t.failed ? atlas_error(ATLAS_EINVAL, "%lld of %lld inputs failed",
				      (long long)t.failed, (long long)t.inputs)
			: 0;
}
