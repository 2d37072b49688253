/* sched_draft.c - speculative decoding's drafts from a draft model.
 *
 * Each speculating request keeps a sequence in the draft model's KV pool
 * (r->dseq) that holds a prefix of its tokens. When a step is built, the
 * requests that may draft (r->draft > 0, the most they may make) are
 * served in passes of the draft model, all of them batched in each pass:
 *
 *   catch-up  the tokens the draft sequence lacks, up to and including
 *             the request's last one (its whole prompt the first time,
 *             less what the draft model's prefix cache holds; one or two
 *             tokens a step after that), in chunks within the draft
 *             model's token budget; the pass that feeds a request's last
 *             token gives its logits, and draft 0 from them;
 *   drafting  one token each: draft j - 1 in, the logits of draft j out.
 *
 * A draft is the argmax of the draft model's logits, after the request's
 * penalties (the lowest id on a tie), among the tokens the request's
 * grammar allows after the drafts before it, so it is a point mass and the target's verification keeps
 * the output distribution exact (spec.h). Drafting stops at k drafts, at
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

/* One request's drafting in this step. */
struct dwork {
	struct atlas_sreq *r;
	int64_t item;     /* its item in the target's step */
	int64_t k;        /* the most drafts it may make */
	int64_t nd;       /* drafts made */
	bool live;        /* still drafting */
	struct atlas_grammar_matcher *g; /* its grammar after the drafts so far */
};

static bool is_eos(const struct atlas_sreq *r, int32_t id)
{
	for (int i = 0; i < r->gen.n_eos; i++)
		if (r->gen.eos_ids[i] == id)
			return true;
	return false;
}

/* Take draft w->nd from the draft model's logits row (greedy after the
 * request's penalties, under its grammar); stops w where drafting must
 * end. */
static void pick(struct atlas_sched *s, struct dwork *w, float *row)
{
	struct atlas_sreq *r = w->r;
	int64_t V = s->dV < s->V ? s->dV : s->V; /* ids the target knows */
	const uint32_t *mask = NULL;
	/* the penalties the target's sampler applies (its repetition
	 * penalty above all: a draft without it is often refused) */
	if (s->dV >= s->V && atlas_sampler_uses_history(&r->gen.sampling))
		atlas_sampler_penalize(r->smp, row, r->hist, r->n_hist + w->nd, r->n_gen + w->nd);
	if (w->g) {
		if (atlas_grammar_fill_mask(w->g, s->dmask) <= 0) {
			w->live = false; /* nothing allowed, or a failure: no draft */
			return;
		}
		mask = s->dmask;
	}
	int32_t best = -1;
	float bv = 0;
	for (int64_t i = 0; i < V; i++) {
		if (mask && !(mask[i / 32] >> (i % 32) & 1))
			continue;
		if (best < 0 || row[i] > bv) {
			best = (int32_t)i;
			bv = row[i];
		}
	}
	if (best < 0 || bv != bv) { /* nothing allowed, or NaN logits */
		w->live = false;
		return;
	}
	if (w->g && atlas_grammar_accept(w->g, best)) {
		w->live = false;
		return;
	}
	r->hist[r->n_hist + w->nd++] = best;
	if (w->nd >= w->k || is_eos(r, best) || (w->g && atlas_grammar_must_end(w->g)))
		w->live = false;
}

/* Run one pass of the draft model over its ditems[0, n). */
static int pass(struct atlas_sched *s, int64_t n)
{
	return n ? atlas_model_forward_batch(s->dm, s->ditems, n) : 0;
}

/* Set up w for r: its draft sequence, the prefix it can attach, and how
 * many drafts the draft pool has blocks for (*dfree blocks left). */
static void start(struct atlas_sched *s, struct dwork *w, int64_t *dfree)
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
	int64_t k = w->k;
	/* it feeds its catch-up and every draft but the last */
	while (k > 0 && atlas_seq_blocks_needed(r->dseq, c + k - 1) > *dfree)
		k--;
	if (k <= 0)
		return;
	if (atlas_seq_len(r->dseq) + c + k - 1 > atlas_model_max_context(s->dm))
		return; /* (a draft model with a shorter context: no drafts) */
	*dfree -= atlas_seq_blocks_needed(r->dseq, c + k - 1);
	w->k = k;
	w->live = true;
	if (r->gm && !(w->g = atlas_grammar_matcher_copy(r->gm)))
		w->live = false;
}

static void fail(struct atlas_sched *s, struct dwork *w, int64_t nw)
{
	if (!s->dwarned)
		atlas_warn("the draft model failed (%s); steps go on without its drafts",
			   atlas_errmsg());
	s->dwarned = true;
	for (int64_t i = 0; i < nw; i++) {
		w[i].live = false;
		w[i].nd = 0;
	}
}

void atlas_sched_draft(struct atlas_sched *s, int64_t n)
{
	struct dwork w[ATLAS_SCHED_SPEC_SEQS];
	int64_t nw = 0, dfree = atlas_model_kv_blocks_free(s->dm);
	for (int64_t i = 0; i < n && nw < ATLAS_SCHED_SPEC_SEQS; i++)
		if (s->item_req[i]->draft > 0) {
			w[nw] = (struct dwork){.r = s->item_req[i], .item = i,
					       .k = s->item_req[i]->draft};
			start(s, &w[nw], &dfree);
			nw++;
		}
	int64_t budget = atlas_model_max_tokens(s->dm), seqs = atlas_model_max_seqs(s->dm);

	/* catch-up, in chunks within the draft model's budget; a request's
	 * last token comes with its logits and gives draft 0 */
	for (;;) {
		int64_t m = 0, tok = budget, at[ATLAS_SCHED_SPEC_SEQS];
		for (int64_t i = 0; i < nw && tok > 0 && m < seqs; i++) {
			struct atlas_sreq *r = w[i].r;
			if (!w[i].live || w[i].nd)
				continue;
			int64_t len = atlas_seq_len(r->dseq), c = r->n_hist - len;
			int64_t t = c < tok ? c : tok;
			s->ditems[m] = (struct atlas_batch_item){
				.seq = r->dseq, .ids = r->hist + len, .n = t,
				.logits = t == c ? s->dlogits + m * s->dV : NULL};
			at[m++] = i;
			tok -= t;
		}
		if (!m)
			break;
		if (pass(s, m)) {
			fail(s, w, nw);
			break;
		}
		for (int64_t j = 0; j < m; j++) {
			struct dwork *x = &w[at[j]];
			if (!s->ditems[j].logits)
				continue;
			/* caught up: its tokens are confirmed, later requests may
			 * share them */
			if (atlas_model_prefix_cache(s->dm))
				atlas_seq_publish_prefix(x->r->dseq, x->r->hist);
			pick(s, x, s->ditems[j].logits);
			if (!x->nd)
				x->live = false;
		}
	}

	/* drafting: draft j - 1 in, draft j out */
	for (;;) {
		int64_t m = 0, at[ATLAS_SCHED_SPEC_SEQS];
		for (int64_t i = 0; i < nw; i++) {
			if (!w[i].live)
				continue;
			struct atlas_sreq *r = w[i].r;
			s->ditems[m] = (struct atlas_batch_item){
				.seq = r->dseq, .ids = r->hist + r->n_hist + w[i].nd - 1, .n = 1,
				.logits = s->dlogits + m * s->dV};
			at[m++] = i;
		}
		if (!m)
			break;
		if (pass(s, m)) {
			fail(s, w, nw);
			break;
		}
		for (int64_t j = 0; j < m; j++)
			pick(s, &w[at[j]], s->ditems[j].logits);
	}

	/* the step's items verify what was made */
	for (int64_t i = 0; i < nw; i++) {
		struct atlas_sreq *r = w[i].r;
		struct atlas_batch_item *it = &s->items[w[i].item];
		atlas_grammar_matcher_free(w[i].g);
		r->draft = w[i].nd;
		it->n = 1 + w[i].nd;
		it->n_logits = 1 + w[i].nd;
		/* drafts it fed but will not verify (a failed pass): gone */
		if (r->dseq && atlas_seq_len(r->dseq) > r->n_hist + w[i].nd - (w[i].nd > 0))
			atlas_sched_draft_keep(s, r, r->n_hist);
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
