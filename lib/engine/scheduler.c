/* scheduler.c - continuous batching: the queues, the make-up of each
 * step (decodes first, then chunked prefill within the token budget,
 * admission only when the KV pool has room, preemption of the newest
 * request when a decode cannot grow) and the engine loop. See
 * scheduler.h; a request's own bookkeeping is in sched_req.c. */
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "grammar.h"
#include "sched_internal.h"

struct atlas_sched *atlas_sched_new(struct atlas_model *m, const struct atlas_tok *tok,
				    const struct atlas_sched_params *p)
{
	int64_t ms = p && p->max_seqs > 0 ? p->max_seqs : atlas_model_max_seqs(m);
	int64_t mt = p && p->max_batch_tokens > 0 ? p->max_batch_tokens : atlas_model_max_tokens(m);
	if (ms > atlas_model_max_seqs(m) || mt > atlas_model_max_tokens(m)) {
		atlas_error(ATLAS_EINVAL,
			    "the scheduler's limits (%lld sequences, %lld tokens) exceed the model's (%lld, %lld)",
			    (long long)ms, (long long)mt, (long long)atlas_model_max_seqs(m),
			    (long long)atlas_model_max_tokens(m));
		return NULL;
	}
	if (mt < ms) {
		atlas_error(ATLAS_EINVAL,
			    "the step's token budget (%lld) must be at least its sequence limit (%lld)",
			    (long long)mt, (long long)ms);
		return NULL;
	}
	struct atlas_spec_params spec = p ? p->spec : (struct atlas_spec_params){0};
	if (spec.mode != ATLAS_SPEC_NONE && atlas_spec_check(&spec))
		return NULL;
	const bool mtp = spec.mode == ATLAS_SPEC_MTP;
	struct atlas_model *dm = spec.mode == ATLAS_SPEC_DRAFT || mtp ? p->draft : NULL;
	if (spec.mode == ATLAS_SPEC_DRAFT || mtp) {
		/* an MTP head catches up every item's request in one pass */
		int64_t want = mtp ? ms : ms < ATLAS_SCHED_SPEC_SEQS ? ms : ATLAS_SCHED_SPEC_SEQS;
		if (!dm || (mtp && !atlas_model_is_mtp(dm))) {
			atlas_error(ATLAS_EINVAL, "speculative decoding with %s needs it",
				    mtp ? "an MTP head" : "a draft model");
			return NULL;
		}
		if (atlas_model_max_seqs(dm) < want || atlas_model_max_tokens(dm) < want ||
		    (mtp && atlas_model_max_tokens(dm) < mt)) {
			atlas_error(ATLAS_EINVAL,
				    "the draft model's step limits (%lld sequences, %lld tokens) are "
				    "below the %lld sequences that may draft in one step",
				    (long long)atlas_model_max_seqs(dm),
				    (long long)atlas_model_max_tokens(dm), (long long)want);
			return NULL;
		}
	}
	struct atlas_sched *s = calloc(1, sizeof(*s));
	if (!s)
		goto nomem;
	s->spec = spec;
	s->rows_cap = ms + (spec.mode != ATLAS_SPEC_NONE ? (int64_t)spec.num_draft *
				    (ms < ATLAS_SCHED_SPEC_SEQS ? ms : ATLAS_SCHED_SPEC_SEQS) : 0);
	s->m = m;
	s->tok = tok;
	s->V = atlas_model_config(m)->vocab_size;
	s->D = atlas_model_config(m)->hidden_size;
	s->ctx = atlas_model_max_context(m);
	s->max_seqs = ms;
	s->budget = mt;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work, NULL);
	s->running = calloc((size_t)ms, sizeof(*s->running));
	s->items = calloc((size_t)ms, sizeof(*s->items));
	s->item_req = calloc((size_t)ms, sizeof(*s->item_req));
	s->logits = malloc((size_t)(s->rows_cap * s->V) * sizeof(float));
	if (spec.mode != ATLAS_SPEC_NONE &&
	    !(s->spec_mask = malloc((size_t)((s->V + 31) / 32) * sizeof(uint32_t)))) {
		atlas_sched_free(s);
		goto nomem;
	}
	if (dm) {
		s->dm = dm;
		s->mtp = mtp;
		s->dV = atlas_model_config(dm)->vocab_size;
		s->dlogits = malloc((size_t)(ATLAS_SCHED_SPEC_SEQS * s->dV) * sizeof(float));
		s->ditems = calloc((size_t)(ms > ATLAS_SCHED_SPEC_SEQS ? ms : ATLAS_SCHED_SPEC_SEQS),
				   sizeof(*s->ditems));
		s->dmask_words = ((s->dV > s->V ? s->dV : s->V) + 31) / 32;
		s->dmask = malloc((size_t)(ATLAS_SCHED_SPEC_SEQS * s->dmask_words) * sizeof(uint32_t));
		if (mtp)
			s->mtp_run = calloc((size_t)ms, sizeof(*s->mtp_run));
		if (!s->dlogits || !s->ditems || !s->dmask || (mtp && !s->mtp_run)) {
			atlas_sched_free(s);
			goto nomem;
		}
	}
	s->raw = malloc((size_t)s->V * sizeof(float));
	if (!s->running || !s->items || !s->item_req || !s->logits || !s->raw) {
		atlas_sched_free(s);
		goto nomem;
	}
	s->prefix = p && p->prefix_cache;
	atlas_model_set_prefix_cache(m, s->prefix);
	if (s->dm)
		atlas_model_set_prefix_cache(s->dm, s->prefix);
	s->st.kv_blocks_total = atlas_model_kv_blocks_total(m);
	s->st.kv_blocks_free = atlas_model_kv_blocks_free(m);
	return s;
nomem:
	atlas_error(ATLAS_ENOMEM, "out of memory");
	return NULL;
}

void atlas_sched_free(struct atlas_sched *s)
{
	if (!s)
		return;
	atlas_model_set_sample_hook(s->m, NULL, NULL);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->work);
	free(s->waiting);
	free(s->running);
	free(s->items);
	free(s->item_req);
	free(s->logits);
	free(s->spec_mask);
	free(s->dlogits);
	free(s->ditems);
	free(s->mtp_run);
	free(s->dmask);
	free(s->raw);
	free(s->hid);
	free(s);
}

/* Remove entry i of a list, keeping the order. */
static void list_remove(struct atlas_sreq **list, int64_t *n, int64_t i)
{
	memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof(*list));
	(*n)--;
}

/* Put r back at the head of the waiting queue (preempted: it goes
 * first). The queue always has room: it never holds more than were
 * submitted, and r left it once. */
static void push_front(struct atlas_sched *s, struct atlas_sreq *r)
{
	memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof(*s->waiting));
	s->waiting[0] = r;
	s->n_waiting++;
}

/* Preempt running entry i: its blocks go back, it will recompute. */
static void preempt(struct atlas_sched *s, int64_t i)
{
	struct atlas_sreq *r = s->running[i];
	atlas_seq_reset(r->seq);
	if (r->dseq)
		atlas_seq_reset(r->dseq);
	r->preemptions++;
	s->st.preemptions++;
	list_remove(s->running, &s->n_running, i);
	push_front(s, r);
}

/* Finish the requests whose submitter has gone (under s->mu). */
static void reap_cancelled(struct atlas_sched *s)
{
	for (int64_t i = s->n_running - 1; i >= 0; i--)
		if (s->running[i]->cancelled) {
			struct atlas_sreq *r = s->running[i];
			list_remove(s->running, &s->n_running, i);
			atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, 0, NULL);
		}
	for (int64_t i = s->n_waiting - 1; i >= 0; i--)
		if (s->waiting[i]->cancelled) {
			struct atlas_sreq *r = s->waiting[i];
			list_remove(s->waiting, &s->n_waiting, i);
			atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, 0, NULL);
		}
}

/* Tokens of r not yet in its KV cache. */
static int64_t pending(const struct atlas_sreq *r)
{
	return r->n_hist - (r->seq ? atlas_seq_len(r->seq) : 0);
}

/* The most of `k` tokens r's sequence can take with `free` more blocks
 * from the pool (a shared last block it must copy counts as one). */
static int64_t fits(const struct atlas_sched *s, const struct atlas_sreq *r, int64_t k,
		    int64_t free)
{
	int64_t B = atlas_model_block_size(s->m);
	int64_t f = (atlas_seq_blocks(r->seq) + free) * B - atlas_seq_len(r->seq);
	if (k > f)
		k = f;
	while (k > 0 && atlas_seq_blocks_needed(r->seq, k) > free)
		k -= k > B ? B : 1;
	return k > 0 ? k : 0;
}

/* Is a running request still computing the first block of r's prompt?
 * Then r waits for it to be published instead of computing it again
 * (n choices of one prompt, a burst of requests with one system
 * prompt): each step publishes what it computed. */
static bool sibling_prefilling(const struct atlas_sched *s, const struct atlas_sreq *r)
{
	int64_t B = atlas_model_block_size(s->m);
	if (!s->prefix || r->pool || r->n_hist <= B)
		return false; /* an embedding request never attaches: no need to wait */
	for (int64_t i = 0; i < s->n_running; i++) {
		const struct atlas_sreq *o = s->running[i];
		if (pending(o) > 1 && o->n_hist > B &&
		    !memcmp(o->hist, r->hist, (size_t)B * sizeof(int32_t)))
			return true;
	}
	return false;
}

/* Add r's next k tokens to the step; d > 0: a decode (k == 1) with d
 * drafts at r->hist[n_hist..], verified from the logits of all 1 + d rows. */
static void add_item(struct atlas_sched *s, int64_t *n, struct atlas_sreq *r, int64_t k,
		     int64_t d)
{
	int64_t len = atlas_seq_len(r->seq);
	bool last = len + k == r->n_hist;
	s->items[*n] = (struct atlas_batch_item){.seq = r->seq, .ids = r->hist + len, .n = k + d};
	r->draft = d;
	if (d > 0) {
		s->items[*n].logits = s->logits + s->rows * s->V;
		s->items[*n].n_logits = 1 + d;
		s->rows += 1 + d;
	} else if (r->pool) {
		/* every row of every chunk: the pooling reads them all */
		s->items[*n].hidden = s->hid + s->hid_rows * s->D;
		s->hid_rows += k;
	} else if (last && r->dev) {
		atlas_sched_item_draw(r, &s->items[*n]);
	} else if (last) {
		s->items[*n].logits = s->logits + s->rows++ * s->V;
	}
	s->item_req[*n] = r;
	(*n)++;
}

void atlas_sched_item_draw(struct atlas_sreq *r, struct atlas_batch_item *it)
{
	/* the backend samples: one id comes back instead of a logits row */
	atlas_sampler_args(r->smp, &r->args);
	it->logits = NULL;
	it->n_logits = 0;
	it->sample = &r->args;
	it->token = &r->next;
}

/* Drafts for decoding request r this step (spec.h), written after its
 * history (r->hist[n_hist..]): at most the configured number, the room
 * its output and the context have left, `budget` tokens, and as many as
 * `free` blocks hold besides its one token's. Returns how many. With a
 * draft model this is the most it may make: atlas_sched_draft makes
 * them once the step is built. */
static int64_t make_drafts(struct atlas_sched *s, struct atlas_sreq *r, int64_t budget,
			   int64_t free)
{
	/* (not with reasoning: a grammar starts after the thought, and a
	 * budget's mask depends on its count) */
	if (s->spec.mode == ATLAS_SPEC_NONE || r->pool || r->gen.reasoning)
		return 0;
	int64_t k = s->spec.num_draft;
	if (k > r->gen.max_tokens - r->n_gen - 1)
		k = r->gen.max_tokens - r->n_gen - 1; /* the last token needs no draft */
	if (k > s->ctx - r->n_hist)
		k = s->ctx - r->n_hist;
	if (k > budget)
		k = budget;
	if (k <= 0)
		return 0;
	if (r->spec_skip > 0) {
		r->spec_skip--; /* backing off after failed drafts */
		return 0;
	}
	int64_t d = s->dm ? k
			  : atlas_ngram_draft(r->hist, r->n_hist, s->spec.ngram_max,
					      s->spec.ngram_min, k, r->hist + r->n_hist);
	if (d > 0 && r->gm && !s->dm) {
		/* a grammar: only drafts it allows can be accepted, and none
		 * after one where it must end */
		struct atlas_grammar_matcher *g = atlas_grammar_matcher_copy(r->gm);
		int64_t ok = 0;
		while (g && ok < d && !atlas_grammar_accept(g, r->hist[r->n_hist + ok]))
			if (ok++, atlas_grammar_must_end(g))
				break;
		atlas_grammar_matcher_free(g);
		d = ok;
	}
	while (d > 0 && atlas_seq_blocks_needed(r->seq, 1 + d) > free)
		d--;
	return d;
}

/* Decide this step's items (under s->mu). Returns how many. */
static int64_t build_step(struct atlas_sched *s)
{
	int64_t n = 0, budget = s->budget, free = atlas_model_kv_blocks_free(s->m), n_spec = 0,
		nd = 0;
	s->hid_rows = 0; /* within budget: the step's tokens are at most that */
	s->rows = 0;

	/* 1. every decoding request gets its one token; a decode that finds
	 *    no block preempts the newest running request (maybe itself) */
	for (int64_t i = 0; i < s->n_running && budget > 0; i++) {
		struct atlas_sreq *r = s->running[i];
		if (pending(r) != 1)
			continue;
		int64_t need = atlas_seq_blocks_needed(r->seq, 1);
		while (need > free && s->n_running > 1) {
			int64_t v = s->n_running - 1, before = atlas_model_kv_blocks_free(s->m);
			preempt(s, v);
			/* blocks it shares with others stay taken */
			free += atlas_model_kv_blocks_free(s->m) - before;
			if (v == i)
				break;
		}
		if (i >= s->n_running || s->running[i] != r)
			break; /* r itself was the newest and went back to the queue */
		if (need > free) {
			/* alone and the pool is full: it cannot grow any more */
			list_remove(s->running, &s->n_running, i);
			atlas_sreq_finish(s, r, ATLAS_FINISH_LENGTH, 0, NULL);
			i--;
			continue;
		}
		free -= need;
		budget--;
		s->item_req[nd++] = r; /* its item comes in 1b, at this index */
	}
	/* 1b. then drafts (spec.h) from the budget and blocks every decode
	 *     has left: a speculating request never holds another's token
	 *     back, nor makes it preempt; and only plain free blocks, not
	 *     cached prefixes a rejected draft would evict for nothing */
	int64_t cached = s->spec.mode != ATLAS_SPEC_NONE ? atlas_model_kv_blocks_cached(s->m) : 0;
	for (int64_t j = 0; j < nd; j++) {
		struct atlas_sreq *r = s->item_req[j];
		int64_t need = atlas_seq_blocks_needed(r->seq, 1), d = 0;
		int64_t spare = free - cached > 0 ? free - cached : 0;
		if (n_spec < ATLAS_SCHED_SPEC_SEQS && budget > 0 &&
		    (d = make_drafts(s, r, budget, spare + need)) > 0) {
			n_spec++;
			free -= atlas_seq_blocks_needed(r->seq, 1 + d) - need;
			budget -= d;
		}
		add_item(s, &n, r, 1, d);
	}
	/* 2. prompts part-way through prefill continue, chunk by chunk */
	int64_t reserved = 0;
	for (int64_t i = 0; i < s->n_running; i++) {
		struct atlas_sreq *r = s->running[i];
		int64_t p = pending(r);
		if (p <= 1)
			continue;
		int64_t k = fits(s, r, p < budget ? p : budget, free);
		if (k > 0) {
			free -= atlas_seq_blocks_needed(r->seq, k);
			budget -= k;
			add_item(s, &n, r, k, 0);
		}
		reserved += atlas_seq_blocks_needed(r->seq, p) -
			    (k > 0 ? atlas_seq_blocks_needed(r->seq, k) : 0);
	}
	/* 3. admit waiting requests, oldest first, while their whole prompt
	 *    fits in the blocks nobody else has a claim on */
	int64_t B = atlas_model_block_size(s->m);
	while (s->n_waiting && s->n_running < s->max_seqs && budget > 0) {
		struct atlas_sreq *r = s->waiting[0];
		int64_t p = r->n_hist, need = (p + B - 1) / B;
		if (need > atlas_model_kv_blocks_total(s->m)) {
			/* a preempted request that outgrew the whole pool */
			list_remove(s->waiting, &s->n_waiting, 0);
			atlas_sreq_finish(s, r, ATLAS_FINISH_LENGTH, 0, NULL);
			continue;
		}
		if (sibling_prefilling(s, r))
			break;
		if (!r->seq && !(r->seq = atlas_seq_new(s->m))) {
			list_remove(s->waiting, &s->n_waiting, 0);
			atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, ATLAS_ENOMEM, atlas_errmsg());
			continue;
		}
		/* share the cached blocks of the longest equal prefix; what it
		 * took from the cached-but-free blocks is no longer free */
		int64_t hit = 0, before = atlas_model_kv_blocks_free(s->m);
		/* (not an embedding request: the cached blocks hold no hidden
		 * states, and pooling needs every row) */
		if (s->prefix && !r->pool)
			hit = atlas_seq_attach_prefix(r->seq, r->hist, p);
		free -= before - atlas_model_kv_blocks_free(s->m);
		need = atlas_seq_blocks_needed(r->seq, p - hit);
		if (need > free - reserved) {
			before = atlas_model_kv_blocks_free(s->m);
			atlas_seq_reset(r->seq);
			free += atlas_model_kv_blocks_free(s->m) - before;
			break;
		}
		list_remove(s->waiting, &s->n_waiting, 0);
		s->running[s->n_running++] = r;
		if (!r->preemptions) {
			int64_t h = hit < r->n_prompt ? hit : r->n_prompt;
			s->st.prompt_tokens += r->n_prompt;
			s->st.prefix_hit_tokens += h;
			s->st.prefix_miss_tokens += r->n_prompt - h;
			r->res.n_cached = h;
		}
		p -= hit;
		int64_t k = fits(s, r, p < budget ? p : budget, free - reserved);
		free -= atlas_seq_blocks_needed(r->seq, k);
		reserved += need - atlas_seq_blocks_needed(r->seq, k);
		budget -= k;
		if (k > 0)
			add_item(s, &n, r, k, 0);
	}
	return n;
}

static void update_gauges(struct atlas_sched *s)
{
	s->st.running = s->n_running;
	s->st.waiting = s->n_waiting;
	s->st.kv_blocks_free = atlas_model_kv_blocks_free(s->m);
	s->st.kv_blocks_cached = atlas_model_kv_blocks_cached(s->m);
	s->st.prefix_snapshots = atlas_model_prefix_snapshots(s->m, &s->st.prefix_snapshot_bytes);
}

/* The grammar masks of the step's sampling items (only the engine thread
 * touches a request's grammar, so s->mu is not needed). With device
 * sampling the model calls this once the step's kernels are queued
 * (atlas_model_set_sample_hook), so the host computes masks while the
 * device computes the step; otherwise the step calls it after the
 * forward. A request whose grammar allows nothing more, or fails, keeps
 * the outcome in mask_rc and ends in atlas_sreq_advance. */
static void masks_hook(void *ud)
{
	struct atlas_sched *s = ud;
	if (s->masks_done)
		return;
	s->masks_done = true;
	atlas_sched_masks(s);
}

int atlas_sched_step(struct atlas_sched *s)
{
	pthread_mutex_lock(&s->mu);
	reap_cancelled(s);
	int64_t n = build_step(s);
	update_gauges(s);
	pthread_mutex_unlock(&s->mu);
	if (!n)
		return 0;
	if (s->mtp)
		atlas_sched_mtp(s, n);
	else if (s->dm)
		atlas_sched_draft(s, n);
	s->n_items = n;
	s->masks_done = false;
	atlas_model_set_sample_hook(s->m, masks_hook, s);

	int rc = atlas_model_forward_batch(s->m, s->items, n);
	if (!rc)
		masks_hook(s); /* when nothing was drawn on the device */

	/* where the step left each request's hidden rows (an MTP head's
	 * next catch-up reads them); a failed step may have overwritten
	 * the last one's */
	if (s->mtp && !rc)
		atlas_sched_mtp_note(s, n);
	else
		s->fwd_steps++;
	pthread_mutex_lock(&s->mu);
	s->st.steps++;
	if (rc) {
		/* a failed step changed no sequence; its requests end with the error */
		const char *msg = atlas_errmsg();
		for (int64_t i = 0; i < n; i++) {
			struct atlas_sreq *r = s->item_req[i];
			for (int64_t j = 0; j < s->n_running; j++)
				if (s->running[j] == r) {
					list_remove(s->running, &s->n_running, j);
					break;
				}
			atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, rc, msg);
		}
	} else {
		/* what the step computed can be found by later prompts (before a
		 * request that ends frees its sequence) */
		for (int64_t i = 0; s->prefix && i < n; i++)
			if (!s->item_req[i]->draft) /* after verification (its rows past
						     * the accepted drafts go first) */
				atlas_seq_publish_prefix(s->items[i].seq, s->item_req[i]->hist);
		/* a request finished below while its submitter has already let
		 * go (cancelled during the forward) would be freed at once, yet
		 * it is still in the running list: hold it until it is out */
		for (int64_t i = 0; i < n; i++)
			s->item_req[i]->refs++;
		for (int64_t i = 0; i < n; i++) {
			struct atlas_sreq *r = s->item_req[i];
			if (s->items[i].hidden)
				atlas_sreq_pool(s, r, &s->items[i]);
			if (!s->items[i].logits && !s->items[i].sample)
				continue;
			if (r->draft)
				atlas_sreq_advance_spec(s, r, s->items[i].logits);
			else
				atlas_sreq_advance(s, r, s->items[i].logits);
		}
		/* drop the finished from the running list */
		for (int64_t j = s->n_running - 1; j >= 0; j--)
			if (s->running[j]->done)
				list_remove(s->running, &s->n_running, j);
		for (int64_t i = 0; i < n; i++)
			atlas_sreq_unref(s->item_req[i]);
	}
	update_gauges(s);
	pthread_mutex_unlock(&s->mu);
	return rc ? rc : 1;
}

void atlas_sched_run(struct atlas_sched *s)
{
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->stopping && !s->n_waiting && !s->n_running)
			pthread_cond_wait(&s->work, &s->mu);
		bool stop = s->stopping;
		if (stop) {
			while (s->n_running) {
				struct atlas_sreq *r = s->running[--s->n_running];
				atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, 0, NULL);
			}
			while (s->n_waiting) {
				struct atlas_sreq *r = s->waiting[--s->n_waiting];
				atlas_sreq_finish(s, r, ATLAS_FINISH_CANCELLED, 0, NULL);
			}
			update_gauges(s);
		}
		pthread_mutex_unlock(&s->mu);
		if (stop)
			return;
		atlas_sched_step(s);
	}
}

void atlas_sched_stop(struct atlas_sched *s)
{
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->work);
	pthread_mutex_unlock(&s->mu);
}

void atlas_sched_get_stats(struct atlas_sched *s, struct atlas_sched_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	pthread_mutex_unlock(&s->mu);
}
