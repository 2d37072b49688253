/* sched_internal.h - the scheduler's private structures, shared by
 * scheduler.c (queues, batching, the engine loop) and sched_req.c (a
 * request's life: submission, sampling, output, release). */
#ifndef ATLAS_ENGINE_SCHED_INTERNAL_H
#define ATLAS_ENGINE_SCHED_INTERNAL_H

#include <pthread.h>

#include "sampler.h"
#include "scheduler.h"
#include "stopper.h"

struct atlas_sreq {
	struct atlas_sched *s;         /* owner */
	int refs;                      /* submitter + engine (under s->mu) */
	pthread_cond_t cv;             /* signalled on new output (with s->mu) */

	/* input, fixed at submission */
	int64_t n_prompt;              /* prompt tokens at the front of hist */
	struct atlas_gen_params gen;   /* limits, EOS ids, sampling (stop moved to stopper) */
	int top;                       /* top_logprobs, -1 when not asked */
	double t_submit;               /* monotonic seconds at submission */

	/* engine thread only */
	int32_t *hist;                 /* prompt then generated ids */
	int64_t n_hist;                /* ids in hist */
	int64_t n_gen;                 /* generated ids in hist */
	struct atlas_seq *seq;         /* KV sequence while admitted, else NULL */
	struct atlas_sampler *smp;     /* per-request sampler (its own seed) */
	bool dev;                      /* sampled on the backend: only ids cross */
	struct atlas_sample_args args; /* the device draw of the current step */
	int32_t next;                  /* the id the backend sampled */
	struct atlas_stopper stopper;  /* stop strings and held text */
	struct atlas_grammar_matcher *gm; /* position in gen.grammar, or NULL */
	uint32_t *mask;                /* [(V + 31) / 32] this step's allowed tokens */
	bool masked;                   /* mask applies to this step's draw */
	int mask_rc;                   /* atlas_sreq_prepare_mask's outcome this step */
	char mask_err[160];            /* and its message, when it failed */
	bool thinking;                 /* inside the reasoning (gen.reasoning) */
	int64_t n_think;               /* tokens of reasoning so far */
	enum atlas_pooling pool;       /* embedding request: how to pool (else NONE) */
	bool normalize;                /* embedding: L2-normalize the result */
	double *acc;                   /* embedding: [D] the running sum (mean) or the
				        * row kept (first, last); NULL otherwise */
	float *emb;                    /* embedding: [D] the result, set when done */
	bool pooled;                   /* emb holds the finished vector */
	int64_t preemptions;           /* times preempted */
	int64_t draft;                 /* drafts in this step's item (hist past n_hist);
				        * with a draft model, the most it may make
				        * until atlas_sched_draft has run */
	struct atlas_seq *dseq;        /* the draft model's sequence: a prefix of hist
				        * (plus drafts while a step runs), or NULL */
	/* --speculative mtp: where the target's last step left this
	 * request's hidden rows (atlas_model_hidden_rows, valid while
	 * h_step is s->fwd_steps) */
	int64_t h_step;                /* the target step they come from, -1: none */
	int64_t h_row;                 /* the first row of its item in that step */
	int64_t h_pos;                 /* the position of that row */
	int64_t h_n;                   /* rows of its item */
	int64_t step_item;             /* its item in the step being built, -1:
				        * none (sched_mtp.c) */
	int spec_fails;                /* steps in a row whose drafts all failed */
	int spec_skip;                 /* steps to go before drafting again */
	double t_first;                /* time of the first token, 0 before */

	/* shared, under s->mu */
	bool cancelled;                /* the submitter gave up */
	bool done;                     /* finished; res is valid */
	struct atlas_sreq_result res;  /* outcome */
	struct atlas_sched_token *out; /* output not taken yet */
	size_t n_out, cap_out;         /* of out */
	char *text;                    /* text of out */
	size_t len_text, cap_text;     /* of text */
};

struct atlas_sched {
	struct atlas_model *m;         /* the model (engine thread only) */
	const struct atlas_tok *tok;   /* tokenizer, may be NULL */
	int64_t V;                     /* vocabulary size */
	int64_t ctx;                   /* context per sequence */
	int64_t max_seqs;              /* sequences per step */
	int64_t budget;                /* tokens per step */
	bool prefix;                   /* prefix caching on (scheduler.h) */
	struct atlas_spec_params spec; /* speculative decoding (mode NONE: off) */

	pthread_mutex_t mu;            /* guards queues, request shared state, stats */
	pthread_cond_t work;           /* signalled on submit, cancel, stop */
	bool stopping;                 /* atlas_sched_stop was called */
	struct atlas_sreq **waiting;   /* queue, head first */
	int64_t n_waiting, cap_waiting; /* of waiting */
	struct atlas_sreq **running;   /* admitted, oldest first */
	int64_t n_running;             /* of running (<= max_seqs) */
	struct atlas_sched_stats st;   /* monitoring numbers */

	/* step scratch (engine thread only) */
	struct atlas_batch_item *items; /* [max_seqs] */
	struct atlas_sreq **item_req;  /* [max_seqs] request of each item */
	float *logits;                 /* [rows_cap, V]: a row per logits item, n_logits
				        * rows per speculating one */
	int64_t rows_cap;              /* max_seqs + num_draft * ATLAS_SCHED_SPEC_SEQS */
	int64_t rows;                  /* rows of logits the step being built uses */
	uint32_t *spec_mask;           /* [(V + 31) / 32] a grammar's mask at a draft's
				        * row past the first (with spec) */
	float *raw;                    /* [V] logits before the sampler, for logprobs */
	int64_t n_items;               /* items of the step being run */
	int64_t D;                     /* hidden size (embedding rows) */
	float *hid;                    /* [budget, D] embedding requests' hidden rows
				        * of a step, allocated by the first such
				        * submission (under mu), then fixed */
	int64_t hid_rows;              /* rows of hid the step being built uses */
	bool masks_done;               /* its grammar masks are computed */

	/* draft model (spec.mode ATLAS_SPEC_DRAFT, or the MTP head with
	 * ATLAS_SPEC_MTP; engine thread only) */
	struct atlas_model *dm;        /* the draft model, or NULL */
	bool mtp;                      /* dm is the target's MTP head (sched_mtp.c) */
	struct atlas_sreq **mtp_run;   /* [max_seqs] the running requests, copied */
	int64_t fwd_steps;             /* the target's steps run (for h_step) */
	int64_t dV;                    /* its vocabulary size (its logits' rows) */
	float *dlogits;                /* [ATLAS_SCHED_SPEC_SEQS, dV] one pass's rows */
	struct atlas_batch_item *ditems; /* [max(max_seqs, ATLAS_SCHED_SPEC_SEQS)] one
				        * pass's items */
	uint32_t *dmask;               /* [ATLAS_SCHED_SPEC_SEQS, dmask_words] grammars'
				        * masks for the next drafts */
	int64_t dmask_words;           /* (max(V, dV) + 31) / 32 */
	bool dwarned;                  /* a draft pass failed and said so */
};

/* sched_req.c: is id one of p's end-of-sequence ids? */
bool atlas_gen_is_eos(const struct atlas_gen_params *p, int32_t id);
/* scheduler.c: make item `it` (r's one token, the last it lacks) draw
 * its next token on the backend (r->dev): only the id comes back, into
 * r->next. */
void atlas_sched_item_draw(struct atlas_sreq *r, struct atlas_batch_item *it);
/* sched_draft.c: with a draft model, make the drafts of the step just
 * built (s->items[0, n)): for each item whose request has draft > 0 (the
 * most it may make), bring its draft sequence up to the request's
 * tokens, decode up to that many drafts greedily into r->hist[n_hist..]
 * (masked by its grammar, stopping at an end-of-sequence id), then set
 * r->draft and the item's rows to what was made. A failure of the draft
 * model only costs the drafts (logged once). Engine thread, without
 * s->mu. */
void atlas_sched_draft(struct atlas_sched *s, int64_t n);
/* sched_mtp.c: atlas_sched_draft with the MTP head as the draft model:
 * every item's request (that may ever draft) first brings the head's
 * sequence up to its confirmed tokens from the hidden rows the last step
 * left (s->fwd_steps, r->h_*), then the requests that may draft make
 * their drafts. */
void atlas_sched_mtp(struct atlas_sched *s, int64_t n);
/* sched_mtp.c: after a target step of items s->items[0, n), note where
 * each MTP request's hidden rows lie. */
void atlas_sched_mtp_note(struct atlas_sched *s, int64_t n);

/* sched_draft.c, for sched_mtp.c: one request's drafting in a step. */
struct atlas_dwork {
	struct atlas_sreq *r;
	int64_t item;     /* its item in the target's step */
	int64_t k;        /* the most drafts it may make */
	int64_t nd;       /* drafts made */
	bool live;        /* still drafting */
	bool dev;         /* the draft model's backend draws the argmax (no
			   * penalties to apply): only ids cross */
	struct atlas_grammar_matcher *g; /* its grammar after the drafts so far */
	uint32_t *mask;   /* its grammar's mask for the next draft (with g) */
	struct atlas_sample_args args; /* the device draw (greedy, masked) */
	int32_t tok;      /* the id it drew */
	int64_t hrow;     /* MTP: the draft model's row of its last token in
			   * the last pass */
};
/* Set w (entry i of the step's drafting) up to draft: the device draw
 * or the host argmax, its mask buffer, a copy of its grammar; false
 * (w not live) when its grammar cannot be copied. */
bool atlas_dwork_setup(struct atlas_sched *s, struct atlas_dwork *w, int64_t i);
/* Ask item `it` of a pass for w's next draft into logits row `row` (or
 * a device draw); false when the grammar allows nothing more (w stops). */
bool atlas_dwork_want(struct atlas_sched *s, struct atlas_dwork *w, struct atlas_batch_item *it,
		      float *row);
/* Take w's next draft from a pass (the device's id or the argmax of
 * `row`); stops w where drafting must end. */
void atlas_dwork_take(struct atlas_sched *s, struct atlas_dwork *w, float *row);
/* Run a pass of the draft model over s->ditems[0, m): false when there
 * was nothing to run or it failed (then no request drafts: w[0, nw)
 * stop with none made). */
bool atlas_dwork_pass(struct atlas_sched *s, int64_t m, struct atlas_dwork *w, int64_t nw);
/* The one-token passes after the first draft: draft j - 1 in, draft j
 * out, every live w batched in each pass, until none is live. */
void atlas_dwork_passes(struct atlas_sched *s, struct atlas_dwork *w, int64_t nw);
/* Hand w[0, nw)'s drafts to their items in the step, then cut each
 * draft sequence back to keep(r, nd) tokens (the grammars are freed). */
void atlas_dwork_finish(struct atlas_sched *s, struct atlas_dwork *w, int64_t nw,
			int64_t (*keep)(const struct atlas_sreq *r, int64_t nd));

/* sched_draft.c: after r's drafts were verified with `keep` tokens of
 * its history confirmed (r->hist[0, keep)), drop the rest from its draft
 * sequence. */
void atlas_sched_draft_keep(struct atlas_sched *s, struct atlas_sreq *r, int64_t keep);

/* sched_req.c: after a step, take the next token of `r` (sampled on the
 * backend into r->next, or here from `logits`) and publish it (under
 * s->mu, held by the caller); finishes r when it is complete. */
void atlas_sreq_advance(struct atlas_sched *s, struct atlas_sreq *r, float *logits);
/* sched_req.c: after a step whose item for r held r->draft drafts (at
 * r->hist[n_hist..]) and [draft + 1, V] logits: verify them, drop the
 * rejected rows from r's sequence, publish its blocks, then the tokens
 * (under s->mu, held by the caller); may finish r. */
void atlas_sreq_advance_spec(struct atlas_sched *s, struct atlas_sreq *r, float *logits);
/* sched_req.c: before a step that samples r, set r->mask and r->masked
 * (grammar, reasoning budget). Engine thread, without s->mu. Returns 0; 1
 * when the grammar allows nothing more (r should stop); or a negative
 * ATLAS_E* with a message when the grammar cannot compute a mask (r ends
 * with that error). */
int atlas_sreq_prepare_mask(struct atlas_sched *s, struct atlas_sreq *r);
/* sched_mask.c: the masks of every sampling item of the step being run
 * (s->items[0, n_items)), spread over the thread pool; sets each
 * request's mask, masked, mask_rc (and mask_err) and its device args. */
void atlas_sched_masks(struct atlas_sched *s);
/* sched_req.c: after a step, fold the hidden rows of item `it` (r's
 * chunk, just appended) into r's pooling; once r's whole prompt is in,
 * the vector is made and r finishes (under s->mu, held by the caller). */
void atlas_sreq_pool(struct atlas_sched *s, struct atlas_sreq *r,
		     const struct atlas_batch_item *it);
/* Finish `r` (under s->mu): release its sequence, sampler and stopper,
 * publish the outcome, drop the engine's reference. rc/msg for errors. */
/* Drop a reference to r (under s->mu), freeing it with the last. */
void atlas_sreq_unref(struct atlas_sreq *r);
void atlas_sreq_finish(struct atlas_sched *s, struct atlas_sreq *r, enum atlas_finish f,
		       int rc, const char *msg);

#endif
