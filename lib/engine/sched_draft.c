/* sched_draft.c - speculative decoding's drafts from a draft model.
 *
 * Each speculating request keeps a sequence in the draft model's KV pool
 * (r->dseq) that holds a prefix of its tokens. When a step is built, the
 * requests that may draft (r->draft > 0, the most they may make) are
 * served in passes of the draft model, all of them batched in each pass:
 *
 *   catch-up  the tokens the draft sequence lacks, up to and including
 *             the request's last one (its whole prompt the first time,
 *             less what the draft model's prefix cache holds; one to k + 1
 *             tokens a step after that), in one pass within the draft
 *             model's token budget: a request whose last token comes in
 *             it gets draft 0 from it; one with more to catch up than the
 *             pass holds goes on in the next steps and drafts nothing
 *             until it is level, so a step's drafting is one catch-up
 *             pass and k - 1 one-token passes whatever arrives;
 *   drafting  one token each: draft j - 1 in, draft j out.
 *
 * A draft is the argmax of the draft model's logits, after the request's
 * penalties (the lowest id on a tie), among the tokens the request's
 * grammar allows after the drafts before it. Where the request has no
 * penalties the draft model's backend draws it (a greedy, masked draw:
 * only the id crosses to the host); else its logits row comes back and
 * the host applies the penalties first. It is a point mass, so the
 * target's verification keeps the output distribution exact (spec.h).
 * Drafting stops at k drafts, at
 * an end-of-sequence id, where the grammar must end or allows nothing,
 * and at an id past the target's vocabulary. The last draft is never fed,
 * so after the passes the draft sequence holds the request's tokens and
 * its drafts but the last; once the target has verified them,
 * atlas_sched_draft_keep cuts it back to the confirmed tokens.
 *
 * The draft model's blocks: a request's draft sequence takes what its
 * catch-up and drafts need from the draft pool; where the pool is short,
 * the request drafts fewer tokens or none this step. With the draft
 * model's prefix cache on (the scheduler's setting), a new draft
 * sequence attaches the cached prefix of the request's tokens, and its
 * caught-up blocks (confirmed tokens only, never a draft) are published. */
#include <string.h>

#include "../core/error.h"
#include "../core/log.h"
#include "grammar.h"
#include "sched_internal.h"

/* Ask item `it` of a pass for w's next draft: its grammar's mask, then a
 * greedy draw on the device or a logits row (`row`). False when the
 * grammar allows nothing more (or fails): w stops, and the item asks for
 * neither. */
bool atlas_dwork_want(struct atlas_sched *s, struct atlas_dwork *w, struct atlas_batch_item *it,
		      float *row)
{
	const uint32_t *mask = NULL;
	if (w->g) {
		memset(w->mask, 0, (size_t)s->dmask_words * sizeof(uint32_t));
		if (atlas_grammar_fill_mask(w->g, w->mask) <= 0) {
			w->live = false;
			return false;
		}
		mask = w->mask;
	}
	if (w->dev) {
		w->args = (struct atlas_sample_args){.temperature = 0, .top_p = 1, .mask = mask};
		it->sample = &w->args;
		it->token = &w->tok;
	} else {
		it->logits = row;
	}
	return true;
}

/* Take draft w->nd from a pass: the device's id, or the argmax of the
 * logits row after the request's penalties (the lowest id on a tie)
 * among the ids its grammar allows; stops w where drafting must end. */
void atlas_dwork_take(struct atlas_sched *s, struct atlas_dwork *w, float *row)
{
	struct atlas_sreq *r = w->r;
	int64_t V = s->dV < s->V ? s->dV : s->V; /* ids the target knows */
	int32_t best = w->tok;
	if (!w->dev) {
		/* the penalties the target's sampler applies (its repetition
		 * penalty above all: a draft without it is often refused) */
		if (s->dV >= s->V && atlas_sampler_uses_history(&r->gen.sampling))
			atlas_sampler_penalize(r->smp, row, r->hist, r->n_hist + w->nd,
					       r->n_gen + w->nd);
		/* the reference greedy pick: the mask, then the argmax */
		const struct atlas_sample_args greedy = {.top_p = 1, .mask = w->g ? w->mask : NULL};
		best = atlas_sample_pick(row, V, &greedy, NULL);
		if (best >= 0 && row[best] != row[best])
			best = -1; /* NaN logits */
	}
	if (best < 0 || best >= V || (w->g && atlas_grammar_accept(w->g, best))) {
		w->live = false; /* nothing allowed, an id the target lacks, a failure */
		return;
	}
	r->hist[r->n_hist + w->nd++] = best;
	if (w->nd >= w->k || atlas_gen_is_eos(&r->gen, best) ||
	    (w->g && atlas_grammar_must_end(w->g)))
		w->live = false;
}


/* Set up w for r: its draft sequence, the prefix it can attach, and how
 * many drafts the draft pool has blocks for (*dfree blocks left). */
static void start(struct atlas_sched *s, struct atlas_dwork *first, struct atlas_dwork *w, int64_t *dfree)
{
	struct atlas_sreq *r = w->r;
	w->live = false;
	if (!r->dseq && !(r->dseq = atlas_seq_new(s->dm)))
		return;
	if (atlas_seq_len(r->dseq) > r->n_hist)
		atlas_seq_reset(r->dseq); /* (never: it holds a prefix of hist) */
	if (!atlas_seq_len(r->dseq) && atlas_model_prefix_cache(s->dm)) {
		int64_t before = atlas_model_kv_blocks_free(s->dm);
		atlas_seq_attach_prefix(r->dseq, r->hist, r->n_hist);
		*dfree -= before - atlas_model_kv_blocks_free(s->dm);
	}
	int64_t c = r->n_hist - atlas_seq_len(r->dseq); /* >= 1: the last token */
	int64_t k = c >= 1 ? w->k : 0;
	/* it feeds its catch-up and every draft but the last */
	while (k > 0 && atlas_seq_blocks_needed(r->dseq, c + k - 1) > *dfree)
		k--;
	if (k <= 0)
		return;
	if (atlas_seq_len(r->dseq) + c + k - 1 > atlas_model_max_context(s->dm))
		return; /* (a draft model with a shorter context: no drafts) */
	*dfree -= atlas_seq_blocks_needed(r->dseq, c + k - 1);
	w->k = k;
	w->live = atlas_dwork_setup(s, w, w - first);
}

bool atlas_dwork_setup(struct atlas_sched *s, struct atlas_dwork *w, int64_t i)
{
	struct atlas_sreq *r = w->r;
	w->dev = atlas_model_can_sample(s->dm) && !atlas_sampler_uses_history(&r->gen.sampling);
	w->mask = s->dmask + (size_t)i * (size_t)s->dmask_words;
	w->g = NULL;
	return !r->gm || (w->g = atlas_grammar_matcher_copy(r->gm));
}

/* Run a pass of the draft model over its ditems[0, m). False when there
 * was nothing to run, or when it failed: then no request drafts this
 * step (said once). */
bool atlas_dwork_pass(struct atlas_sched *s, int64_t m, struct atlas_dwork *w, int64_t nw)
{
	if (!m)
		return false;
	if (!atlas_model_forward_batch(s->dm, s->ditems, m))
		return true;
	if (!s->dwarned)
		atlas_warn("the draft model failed (%s); steps go on without its drafts",
			   atlas_errmsg());
	s->dwarned = true;
	for (int64_t i = 0; i < nw; i++) {
		w[i].live = false;
		w[i].nd = 0;
	}
	return false;
}

/* The catch-up pass: the tokens each request's draft sequence lacks, as
 * many as the draft model's budget holds, first come first. A request
 * whose last token comes in it gets draft 0 from it; one with more to
 * catch up goes on next step and drafts nothing this one. */
static void catch_up(struct atlas_sched *s, struct atlas_dwork *w, int64_t nw)
{
	int64_t m = 0, tok = atlas_model_max_tokens(s->dm), seqs = atlas_model_max_seqs(s->dm);
	int64_t at[ATLAS_SCHED_SPEC_SEQS];
	bool want[ATLAS_SCHED_SPEC_SEQS];
	for (int64_t i = 0; i < nw && tok > 0 && m < seqs; i++) {
		struct atlas_sreq *r = w[i].r;
		if (!w[i].live)
			continue;
		int64_t len = atlas_seq_len(r->dseq), c = r->n_hist - len, t = c < tok ? c : tok;
		s->ditems[m] = (struct atlas_batch_item){.seq = r->dseq, .ids = r->hist + len, .n = t};
		want[m] = t == c && atlas_dwork_want(s, &w[i], &s->ditems[m], s->dlogits + m * s->dV);
		at[m++] = i;
		tok -= t;
	}
	if (!atlas_dwork_pass(s, m, w, nw))
		return;
	for (int64_t i = 0; i < nw; i++)
		if (w[i].live && atlas_seq_len(w[i].r->dseq) < w[i].r->n_hist)
			w[i].live = false; /* not caught up yet: next step */
	for (int64_t j = 0; j < m; j++) {
		struct atlas_dwork *x = &w[at[j]];
		if (atlas_seq_len(x->r->dseq) == x->r->n_hist && atlas_model_prefix_cache(s->dm))
			/* caught up: its tokens are confirmed, later requests
			 * may share them */
			atlas_seq_publish_prefix(x->r->dseq, x->r->hist);
		if (want[j])
			atlas_dwork_take(s, x, s->ditems[j].logits);
		if (!x->nd)
			x->live = false;
	}
}

/* What a draft sequence keeps once its drafts are made: the request's
 * tokens and the drafts it fed (all but the last; none of a failed pass
 * or of a draft refused after it was fed). */
static int64_t fed(const struct atlas_sreq *r, int64_t nd)
{
	return r->n_hist + nd - (nd > 0);
}

void atlas_sched_draft(struct atlas_sched *s, int64_t n)
{
	struct atlas_dwork w[ATLAS_SCHED_SPEC_SEQS];
	int64_t nw = 0, dfree = atlas_model_kv_blocks_free(s->dm);
	for (int64_t i = 0; i < n && nw < ATLAS_SCHED_SPEC_SEQS; i++)
		if (s->item_req[i]->draft > 0) {
			w[nw] = (struct atlas_dwork){.r = s->item_req[i], .item = i,
					       .k = s->item_req[i]->draft};
			start(s, w, &w[nw], &dfree);
			nw++;
		}

	/* catch-up: one pass, so that a step's drafting costs one catch-up
	 * pass and k - 1 one-token passes however long the prompts that
	 * just arrived */
	catch_up(s, w, nw);

	atlas_dwork_passes(s, w, nw);
	atlas_dwork_finish(s, w, nw, fed);
}

void atlas_dwork_passes(struct atlas_sched *s, struct atlas_dwork *w, int64_t nw)
{
	/* draft j - 1 in, draft j out (an MTP head pairs it with its own
	 * hidden row of the entry before, from the last pass) */
	for (;;) {
		size_t rb = 0;
		const char *own = s->mtp ? atlas_model_hidden_rows(s->dm, &rb) : NULL;
		int64_t m = 0, at[ATLAS_SCHED_SPEC_SEQS];
		for (int64_t i = 0; i < nw; i++) {
			if (!w[i].live)
				continue;
			struct atlas_sreq *r = w[i].r;
			s->ditems[m] = (struct atlas_batch_item){
				.seq = r->dseq, .ids = r->hist + r->n_hist + w[i].nd - 1, .n = 1,
				.hid = own ? own + (size_t)w[i].hrow * rb : NULL};
			if (!atlas_dwork_want(s, &w[i], &s->ditems[m], s->dlogits + m * s->dV))
				continue; /* (its grammar allows nothing more: done) */
			w[i].hrow = m;
			at[m++] = i;
		}
		if (!atlas_dwork_pass(s, m, w, nw))
			break;
		for (int64_t j = 0; j < m; j++)
			atlas_dwork_take(s, &w[at[j]], s->ditems[j].logits);
	}
}

void atlas_dwork_finish(struct atlas_sched *s, struct atlas_dwork *w, int64_t nw,
			int64_t (*keep)(const struct atlas_sreq *r, int64_t nd))
{
	/* the step's items verify what was made */
	for (int64_t i = 0; i < nw; i++) {
		struct atlas_sreq *r = w[i].r;
		struct atlas_batch_item *it = &s->items[w[i].item];
		atlas_grammar_matcher_free(w[i].g);
		w[i].g = NULL;
		r->draft = w[i].nd;
		it->n = 1 + w[i].nd;
		it->n_logits = 1 + w[i].nd;
		/* none made: the plain step it would have been (a request the
		 * backend samples for reads r->next, not a logits row) */
		if (!w[i].nd && r->dev)
			atlas_sched_item_draw(r, it);
		atlas_sched_draft_keep(s, r, keep(r, w[i].nd));
	}
}

void atlas_sched_draft_keep(struct atlas_sched *s, struct atlas_sreq *r, int64_t keep)
{
	(void)s;
	if (!r->dseq || atlas_seq_len(r->dseq) <= keep)
		return;
	if (atlas_seq_truncate(r->dseq, keep))
		atlas_seq_reset(r->dseq); /* (cannot: only unpublished drafts go) */
}
