/* sched_req.c - one request's life in the scheduler: submission, the
 * token chosen after each step (with its log-probabilities), the output
 * queue its submitter drains, finishing and release. See scheduler.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/error.h"
#include "../core/clock.h"
#include "grammar.h"
#include "sched_internal.h"

/* Let go of the grammar: the matcher, the mask and the reference. */
static void release_grammar(struct atlas_sreq *r)
{
	atlas_grammar_matcher_free(r->gm);
	r->gm = NULL;
	free(r->mask);
	r->mask = NULL;
	if (r->gen.grammar)
		atlas_grammar_free(r->gen.grammar);
	r->gen.grammar = NULL;
}

/* Free what only plain memory holds (the engine has let go already). */
static void sreq_free(struct atlas_sreq *r)
{
	release_grammar(r);
	pthread_cond_destroy(&r->cv);
	free(r->acc);
	free(r->emb);
	free(r->hist);
	free(r->out);
	free(r->text);
	free(r);
}

void atlas_sreq_unref(struct atlas_sreq *r)
{
	if (--r->refs == 0)
		sreq_free(r);
}

int atlas_sched_submit(struct atlas_sched *s, const struct atlas_sreq_params *p,
		       struct atlas_sreq **out)
{
	*out = NULL;
	if (p->n_prompt <= 0)
		return atlas_error(ATLAS_EINVAL, "the prompt is empty (no tokens)");
	if (p->n_prompt > s->ctx)
		return atlas_error(ATLAS_ERANGE,
				   "the prompt has %lld tokens, more than the context of %lld",
				   (long long)p->n_prompt, (long long)s->ctx);
	int64_t B = atlas_model_block_size(s->m), total = atlas_model_kv_blocks_total(s->m);
	if ((p->n_prompt + B) / B > total)
		return atlas_error(ATLAS_ERANGE,
				   "the prompt of %lld tokens needs more KV cache blocks than the pool's %lld",
				   (long long)p->n_prompt, (long long)total);
	bool embed = p->pool != ATLAS_POOL_NONE;
	if (!embed && p->gen.max_tokens <= 0)
		return atlas_error(ATLAS_EINVAL, "max_tokens must be > 0");
	if (!embed && p->top_logprobs > ATLAS_SCHED_MAX_TOP)
		return atlas_error(ATLAS_EINVAL, "top_logprobs must be at most %d",
				   ATLAS_SCHED_MAX_TOP);
	for (int64_t i = 0; i < p->n_prompt; i++)
		if (p->prompt[i] < 0 || p->prompt[i] >= s->V)
			return atlas_error(ATLAS_ERANGE,
					   "token id %d is outside the vocabulary (0..%lld)",
					   p->prompt[i], (long long)s->V - 1);
	struct atlas_sreq *r = calloc(1, sizeof(*r));
	if (!r)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	pthread_cond_init(&r->cv, NULL);
	r->s = s;
	r->refs = 2;
	r->h_step = -1; /* no hidden rows yet (sched_mtp.c) */
	r->n_prompt = r->n_hist = p->n_prompt;
	r->gen = p->gen;
	if (embed) {
		/* nothing is generated: no limits, sampling, stops or grammar */
		memset(&r->gen, 0, sizeof(r->gen));
		r->pool = p->pool;
		r->normalize = p->normalize;
	}
	r->gen.stop = NULL;
	r->gen.n_stop = 0;
	r->gen.grammar = NULL; /* set below, with its reference */
	r->thinking = p->gen.reasoning && p->gen.start_in_reasoning;
	/* no more tokens than the context can follow the prompt with */
	if (r->gen.max_tokens > s->ctx - p->n_prompt + 1)
		r->gen.max_tokens = s->ctx - p->n_prompt + 1;
	r->top = embed ? -1 : p->top_logprobs;
	/* sample on the backend unless the host needs the logits: penalties
	 * (the token history) or log-probabilities; both paths draw the same
	 * uniforms, so the choice never changes a token */
	r->dev = !embed && atlas_model_can_sample(s->m) && p->top_logprobs < 0 &&
		 !atlas_sampler_uses_history(&p->gen.sampling);
	r->res.stop_index = -1;
	r->res.n_prompt = p->n_prompt;
	r->hist = malloc((size_t)(p->n_prompt + r->gen.max_tokens) * sizeof(int32_t));
	int rc = r->hist ? 0 : atlas_error(ATLAS_ENOMEM, "out of memory");
	if (!rc && embed && (!(r->acc = calloc((size_t)s->D, sizeof(double))) ||
			     !(r->emb = calloc((size_t)s->D, sizeof(float)))))
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
	if (!rc && !embed && !(r->smp = atlas_sampler_new(&p->gen.sampling, s->V)))
		rc = ATLAS_EINVAL;
	if (!rc)
		rc = atlas_stopper_init(&r->stopper, s->tok, embed ? NULL : p->gen.stop,
					s->tok && !embed ? p->gen.n_stop : 0);
	if (!rc && !embed && p->gen.grammar) {
		r->gen.grammar = atlas_grammar_ref(p->gen.grammar);
		if (!(r->gm = atlas_grammar_matcher_new(p->gen.grammar)))
			rc = ATLAS_ENOMEM;
	}
	if (!rc && !embed && (p->gen.grammar || (p->gen.reasoning && p->gen.reasoning_budget > 0)) &&
	    !(r->mask = malloc((size_t)((s->V + 31) / 32) * sizeof(uint32_t))))
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
	if (rc) {
		atlas_sampler_free(r->smp);
		atlas_stopper_release(&r->stopper);
		sreq_free(r);
		return rc;
	}
	memcpy(r->hist, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
	r->t_submit = atlas_now();

	pthread_mutex_lock(&s->mu);
	if (s->stopping) {
		pthread_mutex_unlock(&s->mu);
		atlas_sampler_free(r->smp);
		atlas_stopper_release(&r->stopper);
		sreq_free(r);
		return atlas_error(ATLAS_EIO, "the server is shutting down");
	}
	if (embed && !s->hid &&
	    !(s->hid = malloc((size_t)(s->budget * s->D) * sizeof(float)))) {
		/* the step's hidden rows: made once, at the first embedding request */
		pthread_mutex_unlock(&s->mu);
		atlas_stopper_release(&r->stopper);
		sreq_free(r);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	if (s->n_waiting == s->cap_waiting) {
		int64_t cap = s->cap_waiting ? 2 * s->cap_waiting : 64;
		struct atlas_sreq **w = realloc(s->waiting, (size_t)cap * sizeof(*w));
		if (!w) {
			pthread_mutex_unlock(&s->mu);
			atlas_sampler_free(r->smp);
			atlas_stopper_release(&r->stopper);
			sreq_free(r);
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		}
		s->waiting = w;
		s->cap_waiting = cap;
	}
	s->waiting[s->n_waiting++] = r;
	s->st.waiting = s->n_waiting;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	*out = r;
	return 0;
}

/* Append one output token with its text (under s->mu). */
static int publish(struct atlas_sreq *r, const struct atlas_sched_token *t,
		   const char *text, size_t len)
{
	if (r->n_out == r->cap_out) {
		size_t cap = r->cap_out ? 2 * r->cap_out : 16;
		struct atlas_sched_token *o = realloc(r->out, cap * sizeof(*o));
		if (!o)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		r->out = o;
		r->cap_out = cap;
	}
	if (r->len_text + len + 1 > r->cap_text) {
		size_t cap = r->cap_text ? 2 * r->cap_text : 256;
		while (cap < r->len_text + len + 1)
			cap *= 2;
		char *b = realloc(r->text, cap);
		if (!b)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		r->text = b;
		r->cap_text = cap;
	}
	struct atlas_sched_token *o = &r->out[r->n_out++];
	*o = *t;
	o->text_off = r->len_text;
	o->text_len = len;
	memcpy(r->text + r->len_text, text, len);
	r->len_text += len;
	r->text[r->len_text] = '\0';
	return 0;
}

void atlas_sreq_finish(struct atlas_sched *s, struct atlas_sreq *r, enum atlas_finish f,
		       int rc, const char *msg)
{
	if (!rc && f != ATLAS_FINISH_STOP && f != ATLAS_FINISH_CANCELLED) {
		const char *text;
		size_t len;
		struct atlas_sched_token t = {.id = -1};
		rc = atlas_stopper_finish(&r->stopper, &text, &len);
		if (!rc && len)
			rc = publish(r, &t, text, len);
		if (rc)
			msg = atlas_errmsg();
	}
	if (r->seq) {
		atlas_seq_free(r->seq);
		r->seq = NULL;
	}
	if (r->dseq) {
		atlas_seq_free(r->dseq);
		r->dseq = NULL;
	}
	atlas_sampler_free(r->smp);
	r->smp = NULL;
	release_grammar(r);
	r->res.stop_index = r->stopper.matched;
	atlas_stopper_release(&r->stopper);
	r->res.rc = rc;
	if (rc)
		snprintf(r->res.error, sizeof(r->res.error), "%s", msg ? msg : "engine failure");
	r->res.finish = f;
	r->res.n_gen = r->n_gen;
	r->res.preemptions = r->preemptions;
	r->res.ttft_s = r->t_first > 0 ? r->t_first - r->t_submit : 0;
	r->res.total_s = atlas_now() - r->t_submit;
	r->done = true;
	pthread_cond_broadcast(&r->cv);
	if (--r->refs == 0)
		sreq_free(r);
}

bool atlas_gen_is_eos(const struct atlas_gen_params *p, int32_t id)
{
	for (int i = 0; i < p->n_eos; i++)
		if (p->eos_ids[i] == id)
			return true;
	return false;
}

/* Log-sum-exp of raw logits and the `top` most likely ids (best first,
 * lowest id on ties). */
static double top_logprobs(const float *x, int64_t V, int top, struct atlas_sched_token *t)
{
	float mx = -INFINITY;
	for (int64_t i = 0; i < V; i++)
		if (x[i] > mx)
			mx = x[i];
	double sum = 0;
	for (int64_t i = 0; i < V; i++)
		sum += exp((double)x[i] - mx);
	double lse = mx + log(sum);
	int n = 0;
	for (int64_t i = 0; i < V && top > 0; i++) {
		if (n == top && x[i] <= x[t->top_id[n - 1]])
			continue;
		int j = n < top ? n++ : n - 1;
		while (j > 0 && x[t->top_id[j - 1]] < x[i]) {
			t->top_id[j] = t->top_id[j - 1];
			j--;
		}
		t->top_id[j] = (int32_t)i;
	}
	t->n_top = n;
	for (int k = 0; k < n; k++)
		t->top_lp[k] = (float)(x[t->top_id[k]] - lse);
	return lse;
}

static bool emit(struct atlas_sched *s, struct atlas_sreq *r, int32_t id,
		 struct atlas_sched_token *t);

void atlas_sreq_advance(struct atlas_sched *s, struct atlas_sreq *r, float *logits)
{
	struct atlas_sched_token t = {.id = -1};
	double lse = 0;
	if (r->top >= 0) {
		memcpy(s->raw, logits, (size_t)s->V * sizeof(float));
		lse = top_logprobs(s->raw, s->V, r->top, &t);
	}
	if (r->mask_rc) {
		/* the grammar allows nothing more (1) or failed (< 0): this
		 * step's token is not used */
		int rc = r->mask_rc;
		r->mask_rc = 0;
		if (rc > 0)
			atlas_sreq_finish(s, r, ATLAS_FINISH_EOS, 0, NULL);
		else
			atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, rc, r->mask_err);
		return;
	}
	if (r->masked && !r->dev)
		atlas_sample_mask(logits, s->V, r->mask);
	int32_t id = r->dev ? r->next
			    : atlas_sampler_sample(r->smp, logits, r->hist, r->n_hist, r->n_gen);
	if (r->masked && (id < 0 || id >= s->V || !(r->mask[id / 32] >> (id % 32) & 1))) {
		s->st.tokens_generated++;
		atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED,
				  atlas_error(ATLAS_EINVAL, "token %d was drawn against the grammar mask", id),
				  atlas_errmsg());
		return;
	}
	if (r->top >= 0 && id >= 0 && id < s->V)
		t.logprob = (float)(s->raw[id] - lse);
	emit(s, r, id, &t);
}

/* Take token `id` as r's next (t: its log-probabilities when asked):
 * reasoning, grammar, EOS, history, stop strings, output, limits (under
 * s->mu). Returns false when r finished. */
static bool emit(struct atlas_sched *s, struct atlas_sreq *r, int32_t id,
		 struct atlas_sched_token *t)
{
	if (r->t_first == 0)
		r->t_first = atlas_now();
	s->st.tokens_generated++;
	bool thought = false; /* id is reasoning (or its markers): no grammar */
	if (r->gen.reasoning) {
		if (r->thinking) {
			thought = true;
			if (id == r->gen.think_end)
				r->thinking = false;
			else
				r->n_think++;
		} else if (r->n_gen == 0 && id == r->gen.think_start) {
			thought = r->thinking = true;
		}
	}
	if (r->gm && !thought && atlas_grammar_accept(r->gm, id)) {
		atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED,
				  atlas_error(ATLAS_EINVAL, "token %d does not fit the grammar", id),
				  atlas_errmsg());
		return false;
	}
	if (!r->gen.ignore_eos && atlas_gen_is_eos(&r->gen, id)) {
		atlas_sreq_finish(s, r, ATLAS_FINISH_EOS, 0, NULL);
		return false;
	}
	t->id = id;
	r->hist[r->n_hist++] = id;
	r->n_gen++;
	const char *text;
	size_t len;
	bool stopped;
	int rc = atlas_stopper_push(&r->stopper, id, &text, &len, &stopped);
	if (!rc)
		rc = publish(r, t, text, len);
	if (rc) {
		atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, rc, atlas_errmsg());
		return false;
	}
	pthread_cond_broadcast(&r->cv);
	if (stopped)
		atlas_sreq_finish(s, r, ATLAS_FINISH_STOP, 0, NULL);
	else if (r->gm && !r->thinking && atlas_grammar_must_end(r->gm))
		atlas_sreq_finish(s, r, ATLAS_FINISH_EOS, 0, NULL); /* the grammar is complete */
	else if (r->n_gen >= r->gen.max_tokens || r->n_hist > s->ctx)
		atlas_sreq_finish(s, r, ATLAS_FINISH_LENGTH, 0, NULL);
	else
		return true;
	return false;
}

void atlas_sreq_advance_spec(struct atlas_sched *s, struct atlas_sreq *r, float *logits)
{
	const int64_t d = r->draft, V = s->V;
	struct atlas_sched_token t[ATLAS_SPEC_MAX_DRAFT + 1];
	int32_t ids[ATLAS_SPEC_MAX_DRAFT + 1];
	int64_t m = 0, acc = 0;
	if (r->mask_rc) {
		/* the grammar allowed nothing more, or failed, at the first
		 * row: the plain path ends r as it would without drafts */
		r->draft = 0;
		atlas_sreq_advance(s, r, logits);
		return;
	}
	/* a grammar's mask at row j > 0: after the drafts before j, on a
	 * copy of the matcher (row 0's is r->mask, computed for the step) */
	struct atlas_grammar_matcher *g = NULL;
	/* verify in order: row j's context is the history with the drafts
	 * before j, which are all accepted when j is reached */
	for (int64_t j = 0; j <= d; j++) {
		float *row = logits + j * V;
		double lse = 0;
		t[m] = (struct atlas_sched_token){.id = -1};
		if (r->top >= 0) {
			memcpy(s->raw, row, (size_t)V * sizeof(float));
			lse = top_logprobs(s->raw, V, r->top, &t[m]);
		}
		/* (the log-probabilities are the raw logits', as without drafts) */
		if (r->gm) {
			const uint32_t *mask = r->masked ? r->mask : NULL;
			if (j > 0) {
				/* drafts were cut where the grammar refuses one or
				 * must end, so these hold; a failure (memory, a
				 * limit) stops the verification here: what was
				 * accepted stands, the next step goes on from it */
				if (!g && !(g = atlas_grammar_matcher_copy(r->gm)))
					break;
				if (atlas_grammar_accept(g, ids[j - 1]) || atlas_grammar_must_end(g) ||
				    atlas_grammar_fill_mask(g, s->spec_mask) <= 0)
					break;
				mask = s->spec_mask;
			}
			atlas_sample_mask(row, V, mask);
		}
		int32_t draft = j < d ? r->hist[r->n_hist + j] : -1;
		/* the token this row gives without drafts (the request's next
		 * uniform, as a plain step draws it); the draft is accepted when
		 * they agree. For a fixed draft that is acceptance with
		 * probability p(draft) and, otherwise, a draw from p without
		 * the draft: the standard rule, and seeded output token for
		 * token what it is without speculation */
		int32_t id = atlas_sampler_sample(r->smp, row, r->hist, r->n_hist + j, r->n_gen + j);
		if (r->top >= 0)
			t[m].logprob = (float)(s->raw[id] - lse);
		ids[m++] = id;
		if (id != draft)
			break;
		acc++;
	}
	atlas_grammar_matcher_free(g);
	/* back off where drafts keep failing: after f steps in a row with
	 * none accepted, skip 2^(f-1) - 1 steps (at most 15) before the next
	 * lookup; an accepted draft resets it */
	if (acc) {
		r->spec_fails = 0;
	} else if (d > 0) {
		r->spec_fails += r->spec_fails < 5;
		r->spec_skip = (1 << (r->spec_fails - 1)) - 1;
	}
	r->res.spec_steps++;
	r->res.spec_drafted += d;
	r->res.spec_accepted += acc;
	s->st.spec_steps++;
	s->st.spec_drafted += d;
	s->st.spec_accepted += acc;
	r->draft = 0;
	/* the cache keeps the last token and every decided one but the
	 * last, which is the next step's input (m - 1 = acc, or acc - 1
	 * when the verification stopped on an accepted draft) */
	int rc = atlas_seq_truncate(r->seq, r->n_hist + m - 1);
	if (rc) {
		atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, rc, atlas_errmsg());
		return;
	}
	if (s->prefix)
		atlas_seq_publish_prefix(r->seq, r->hist);
	if (r->dseq)
		atlas_sched_draft_keep(s, r, r->n_hist + m - 1);
	for (int64_t j = 0; j < m; j++) {
		s->st.spec_tokens++;
		if (!emit(s, r, ids[j], &t[j]))
			break;
	}
}

static void allow_only(uint32_t *mask, int64_t V, int32_t id)
{
	memset(mask, 0, (size_t)((V + 31) / 32) * sizeof(uint32_t));
	if (id >= 0 && id < V)
		mask[id / 32] |= 1u << (id % 32);
}

int atlas_sreq_prepare_mask(struct atlas_sched *s, struct atlas_sreq *r)
{
	const struct atlas_gen_params *g = &r->gen;
	r->masked = false;
	if (r->thinking) {
		/* the budget spent: only the end marker may come */
		if (g->reasoning_budget > 0 && r->n_think >= g->reasoning_budget &&
		    g->think_end >= 0 && g->think_end < s->V) {
			allow_only(r->mask, s->V, g->think_end);
			r->masked = true;
		}
		return 0;
	}
	if (!r->gm)
		return 0;
	int64_t n = atlas_grammar_fill_mask(r->gm, r->mask);
	if (n < 0)
		return (int)n; /* the grammar cannot go on (a limit): an error */
	if (g->reasoning && r->n_gen == 0 && g->think_start >= 0 && g->think_start < s->V) {
		/* the answer may begin with thought, before the grammar applies */
		r->mask[g->think_start / 32] |= 1u << (g->think_start % 32);
		n++;
	}
	if (n == 0)
		return 1;
	r->masked = true;
	return 0;
}

int atlas_sreq_take(struct atlas_sreq *r, int timeout_ms, struct atlas_sched_chunk *out)
{
	struct atlas_sched *s = r->s;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->mu);
	if (!r->n_out && !r->done && timeout_ms != 0) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		if (timeout_ms > 0) {
			dl.tv_sec += timeout_ms / 1000;
			dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
			if (dl.tv_nsec >= 1000000000L) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000L;
			}
		}
		while (!r->n_out && !r->done) {
			if (timeout_ms < 0)
				pthread_cond_wait(&r->cv, &s->mu);
			else if (pthread_cond_timedwait(&r->cv, &s->mu, &dl) == ETIMEDOUT)
				break;
		}
	}
	out->tok = r->out;
	out->n = r->n_out;
	out->text = r->text;
	out->text_len = r->len_text;
	out->done = r->done;
	r->out = NULL;
	r->text = NULL;
	r->n_out = r->cap_out = r->len_text = r->cap_text = 0;
	pthread_mutex_unlock(&s->mu);
	return out->n || out->done;
}

void atlas_sched_chunk_free(struct atlas_sched_chunk *c)
{
	free(c->tok);
	free(c->text);
	memset(c, 0, sizeof(*c));
}

void atlas_sreq_result(struct atlas_sreq *r, struct atlas_sreq_result *out)
{
	pthread_mutex_lock(&r->s->mu);
	*out = r->res;
	pthread_mutex_unlock(&r->s->mu);
}

void atlas_sreq_pool(struct atlas_sched *s, struct atlas_sreq *r,
		     const struct atlas_batch_item *it)
{
	const int64_t D = s->D, len = atlas_seq_len(r->seq), start = len - it->n;
	const float *h = it->hidden;
	if (start == 0)
		memset(r->acc, 0, (size_t)D * sizeof(double)); /* a first chunk (again,
							      * after a preemption) */
	if (r->pool == ATLAS_POOL_MEAN) {
		/* double sums: the mean of thousands of rows keeps FP32's digits */
		for (int64_t t = 0; t < it->n; t++)
			for (int64_t d = 0; d < D; d++)
				r->acc[d] += h[t * D + d];
	} else if (r->pool == ATLAS_POOL_CLS ? start == 0 : len == r->n_hist) {
		const float *row = h + (r->pool == ATLAS_POOL_CLS ? 0 : (it->n - 1) * D);
		for (int64_t d = 0; d < D; d++)
			r->acc[d] = row[d];
	}
	if (len < r->n_hist)
		return; /* more chunks to come */
	double scale = r->pool == ATLAS_POOL_MEAN ? 1.0 / (double)r->n_hist : 1.0;
	if (r->normalize) {
		double ss = 0;
		for (int64_t d = 0; d < D; d++)
			ss += r->acc[d] * r->acc[d];
		/* torch.nn.functional.normalize's eps: a zero vector stays zero */
		scale = 1.0 / fmax(sqrt(ss), 1e-12);
	}
	for (int64_t d = 0; d < D; d++)
		r->emb[d] = (float)(r->acc[d] * scale);
	r->pooled = true;
	if (r->t_first == 0)
		r->t_first = atlas_now();
	atlas_sreq_finish(s, r, ATLAS_FINISH_EOS, 0, NULL);
}

int64_t atlas_sreq_embedding(struct atlas_sreq *r, float *out, int64_t cap)
{
	struct atlas_sched *s = r->s;
	int64_t n = 0;
	pthread_mutex_lock(&s->mu);
	if (r->done && r->pooled) {
		memcpy(out, r->emb, (size_t)(cap < s->D ? cap : s->D) * sizeof(float));
		n = s->D;
	}
	pthread_mutex_unlock(&s->mu);
	return n;
}

void atlas_sreq_release(struct atlas_sreq *r)
{
	if (!r)
		return;
	struct atlas_sched *s = r->s;
	pthread_mutex_lock(&s->mu);
	if (!r->done) {
		r->cancelled = true;
		pthread_cond_signal(&s->work);
	}
	if (--r->refs == 0)
		sreq_free(r);
	pthread_mutex_unlock(&s->mu);
}
