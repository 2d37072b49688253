/* sched_mtp.c - speculative decoding's drafts from the checkpoint's
 * multi-token prediction (MTP) head (--speculative mtp).
 *
 * The head (atlas_model_load_mtp) is a one-layer model with its own KV
 * cache. Its entry i pairs token i + 1 with the target's final-normed
 * hidden state of token i, at position i, and its logits there predict
 * token i + 2. So a request's head sequence (r->dseq) holds entries
 * 0 .. n_hist - 2 once it has caught up: every token but the first, each
 * with the hidden state the target computed for the token before it.
 *
 * Hidden states are not kept: the target's last step leaves its rows in
 * backend memory (atlas_model_hidden_rows) until its next step, and
 * atlas_sched_mtp, which runs between building a step and running it,
 * reads them there. atlas_sched_mtp_note records, after each target
 * step, where each request's rows lie (r->h_*). A step then goes:
 *
 *   catch-up  every running request (that may ever draft: not an
 *             embedding or reasoning request; with an item in this step
 *             or not) feeds its head sequence the entries its last step
 *             confirmed: tokens hist[len + 1 ..], hidden rows from the
 *             target's last step; all in one pass.
 *             Entries whose hidden state no step left (tokens that came
 *             from the target's prefix cache, or a request the pass had
 *             no room for) take zeros: a draft from them is worse, never
 *             wrong, since the target verifies every draft. A request
 *             that drafts this step gets draft 0 from its last entry.
 *   drafting  draft j - 1 in, paired with the head's own output hidden
 *             state of the entry before (the head's rows of the last
 *             pass), draft j out; one token each.
 *
 * Drafts are made and verified as a draft model's (sched_draft.c): the
 * argmax after the request's penalties, under its grammar. After the
 * passes the head sequence is cut back to its confirmed entries (the
 * draft entries hold the head's own hidden states, not the target's).
 * With the prefix cache on, a new head sequence attaches the head's
 * cached entries, keyed by the tokens fed (hist + 1), and publishes the
 * ones it confirms; the key lacks token 0, on which the hidden states
 * also depend, so a hit after another first token gives other entries:
 * again worse drafts, never other output. */
#include <string.h>

#include "../core/log.h"
#include "grammar.h"
#include "sched_internal.h"

/* Whether r may ever draft, and so feeds its head sequence. */
static bool follows(const struct atlas_sreq *r)
{
	return !r->pool && !r->gen.reasoning;
}

void atlas_sched_mtp_note(struct atlas_sched *s, int64_t n)
{
	s->fwd_steps++;
	for (int64_t i = 0, row = 0; i < n; row += s->items[i].n, i++) {
		struct atlas_sreq *r = s->item_req[i];
		r->h_step = s->fwd_steps;
		r->h_row = row;
		r->h_pos = s->items[i].ids - r->hist;
		r->h_n = s->items[i].n;
	}
}

/* The head entries r can have now: one per token the target has run
 * whose next token is known. */
static int64_t head_limit(const struct atlas_sreq *r)
{
	int64_t run = atlas_seq_len(r->seq);
	return run < r->n_hist - 1 ? run : r->n_hist - 1;
}

/* Request r's catch-up: its head sequence up to head_limit entries,
 * zeros before the rows its last step left. Fills the item; returns how
 * many entries (0: none to feed). */
static int64_t catch_item(struct atlas_sched *s, struct atlas_sreq *r, struct atlas_batch_item *it)
{
	int64_t len = atlas_seq_len(r->dseq), limit = head_limit(r);
	int64_t c = limit - len;
	if (c <= 0)
		return 0;
	*it = (struct atlas_batch_item){.seq = r->dseq, .ids = r->hist + len + 1, .n = c,
					.hid_zeros = c};
	/* the rows of the target's last step, where they cover the end */
	if (r->h_step == s->fwd_steps && r->h_pos + r->h_n >= limit && r->h_pos < limit) {
		size_t rb;
		const char *rows = atlas_model_hidden_rows(s->m, &rb);
		int64_t from = r->h_pos > len ? r->h_pos : len;
		it->hid = rows + (size_t)(r->h_row + from - r->h_pos) * rb;
		it->hid_zeros = from - len;
	}
	return c;
}

/* A head sequence for r, at most `limit` entries: new ones attach the
 * head's prefix cache. False when none can be had. */
static bool head_seq(struct atlas_sched *s, struct atlas_sreq *r, int64_t limit)
{
	if (!r->dseq && !(r->dseq = atlas_seq_new(s->dm)))
		return false;
	if (atlas_seq_len(r->dseq) > limit)
		atlas_seq_reset(r->dseq); /* (never: it holds confirmed entries) */
	if (!atlas_seq_len(r->dseq) && atlas_model_prefix_cache(s->dm) && limit > 0)
		atlas_seq_attach_prefix(r->dseq, r->hist + 1, limit);
	return true;
}

/* The head's confirmed entries of r once its drafts are made. */
static int64_t confirmed(const struct atlas_sreq *r, int64_t nd)
{
	(void)nd;
	return r->n_hist - 1;
}

void atlas_sched_mtp(struct atlas_sched *s, int64_t n)
{
	struct atlas_dwork w[ATLAS_SCHED_SPEC_SEQS];
	int64_t nw = 0, m = 0, rows = 0, tok = atlas_model_max_tokens(s->dm);
	int64_t dfree = atlas_model_kv_blocks_free(s->dm);
	int64_t at[ATLAS_SCHED_SPEC_SEQS]; /* the catch-up item of each w */
	int64_t blind = 0;                 /* entries fed zeros */

	/* the running requests, those without an item in this step too (a
	 * prompt whose next chunk waits for budget: the rows of its last
	 * chunk are there now and gone after this step); only this thread
	 * changes the list, under mu */
	pthread_mutex_lock(&s->mu);
	const int64_t nr = s->n_running;
	memcpy(s->mtp_run, s->running, (size_t)nr * sizeof(*s->running));
	pthread_mutex_unlock(&s->mu);
	for (int64_t i = 0; i < nr; i++)
		s->mtp_run[i]->step_item = -1;
	for (int64_t i = 0; i < n; i++)
		s->item_req[i]->step_item = i;

	/* catch-up: one pass over every running request */
	for (int64_t q = 0; q < nr; q++) {
		struct atlas_sreq *r = s->mtp_run[q];
		const int64_t i = r->step_item;
		struct atlas_dwork *x =
		    i >= 0 && r->draft > 0 && nw < ATLAS_SCHED_SPEC_SEQS ? &w[nw] : NULL;
		if (x)
			*x = (struct atlas_dwork){.r = r, .item = i, .k = r->draft};
		if (!follows(r) || !head_seq(s, r, head_limit(r))) {
			nw += x != NULL;
			continue;
		}
		int64_t before = atlas_model_kv_blocks_free(s->dm);
		struct atlas_batch_item *it = &s->ditems[m];
		int64_t c = catch_item(s, r, it);
		dfree -= before - atlas_model_kv_blocks_free(s->dm); /* (an attach) */
		/* a request drafts when its catch-up reaches its last token */
		int64_t k = x && c > 0 && atlas_seq_len(r->dseq) + c == r->n_hist - 1 ? x->k : 0;
		while (k > 0 && atlas_seq_blocks_needed(r->dseq, c + k - 1) > dfree)
			k--;
		if (c <= 0 || c > tok || atlas_seq_blocks_needed(r->dseq, c + (k ? k - 1 : 0)) > dfree) {
			nw += x != NULL;
			continue; /* no room: its rows are lost (zeros next time) */
		}
		dfree -= atlas_seq_blocks_needed(r->dseq, c + (k ? k - 1 : 0));
		tok -= c;
		blind += it->hid_zeros;
		if (x) {
			x->k = k;
			x->live = k > 0 && atlas_dwork_setup(s, x, nw);
			x->hrow = rows + c - 1;
			if (x->live && atlas_dwork_want(s, x, it, s->dlogits + nw * s->dV))
				at[nw] = m;
			else
				at[nw] = -1;
			nw++;
		}
		rows += c;
		m++;
	}
	if (atlas_dwork_pass(s, m, w, nw)) {
		/* (the counts: the engine thread writes st under mu) */
		pthread_mutex_lock(&s->mu);
		s->st.mtp_entries += rows - blind;
		s->st.mtp_blind += blind;
		pthread_mutex_unlock(&s->mu);
		/* confirmed entries: later requests may share them */
		for (int64_t q = 0; atlas_model_prefix_cache(s->dm) && q < nr; q++) {
			struct atlas_sreq *r = s->mtp_run[q];
			if (r->dseq && follows(r))
				atlas_seq_publish_prefix(r->dseq, r->hist + 1);
		}
		for (int64_t i = 0; i < nw; i++)
			if (w[i].live && at[i] >= 0)
				atlas_dwork_take(s, &w[i], s->ditems[at[i]].logits);
			else
				w[i].live = false;
	}

	/* drafting: draft j - 1 and the head's hidden row before it in,
	 * draft j out */
	atlas_dwork_passes(s, w, nw);
	atlas_dwork_finish(s, w, nw, confirmed);
}
