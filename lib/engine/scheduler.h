/* scheduler.h - continuous batching over one model.
 *
 * One engine thread owns the model and calls atlas_sched_run (or, in
 * tests, atlas_sched_step); any thread submits requests and reads their
 * output. Each step runs one forward pass over: every running request
 * that is decoding (one token each), then chunks of prompts still being
 * prefilled, within a token budget (max_batch_tokens) and a sequence
 * limit (max_seqs). A waiting request is admitted only when the KV pool
 * has blocks for its whole prompt. When a decode cannot get a block the
 * newest running request is preempted: its blocks go back to the pool
 * and it waits at the head of the queue to recompute its prompt and the
 * tokens it already generated, which it keeps (so its output is never
 * corrupted). Each request has its own sampler, seeded per request, and
 * the model gives each sequence the logits it would get alone, so a
 * response does not depend on what else is in the batch.
 *
 * Chunked prefill: a step is built decodes first (every running request
 * that is decoding gets its one token), then chunks of prompts still
 * being prefilled in the order they were admitted, then new requests,
 * all within the token budget (max_batch_tokens). A long prompt thus
 * advances by at most a budget's worth of tokens a step and never holds
 * a decode back: a decoding request's time per token is at most one
 * step of max_batch_tokens tokens, whatever arrives. Lower the budget
 * to bound that step (and the time per token under prefill load); raise
 * it for faster first tokens of long prompts.
 *
 * Prefix caching (prefix_cache): at admission a request takes the KV
 * blocks of the longest cached prefix of its tokens (model.h) and only
 * the rest is computed; after every step the blocks a step filled are
 * published for later requests. A request whose first block a running
 * request is still computing waits for it (n choices of one prompt).
 * Output never depends on the cache: the cached rows are the rows the
 * request would have computed.
 *
 * Embedding requests (atlas_sreq_params.pool): the prompt is prefilled
 * chunk by chunk like any other, each chunk's final hidden states come
 * back to the host (atlas_batch_item.hidden) and are pooled as they
 * arrive (a sum for mean pooling, the first or the last row), and the
 * request finishes when its last chunk is in, with no token sampled and
 * none output: the vector is read with atlas_sreq_embedding. Such a
 * request never attaches to the prefix cache, whose blocks hold keys
 * and values but not the hidden states it would need; the blocks it
 * computes are still published for later requests.
 *
 * Speculative decoding (spec): a decoding request's item carries its
 * last token and up to num_draft drafts (spec.h), with the logits of
 * every row; the drafts are verified in order by the request's sampler,
 * its KV rows past the accepted ones are dropped before the step's
 * blocks are published, and the step emits 1..num_draft + 1 tokens.
 * Output, greedy or seeded, equals plain decoding's wherever a row's
 * logits do not depend on how many rows its step holds (batch-invariant
 * mode; the CPU's default kernels in practice). Drafts take only the
 * token budget and blocks the step's decodes leave. With a draft model
 * the drafts are made after the step is built and before it runs: the
 * draft model catches up on the request's new tokens and decodes the
 * drafts greedily, all speculating requests batched in each of its
 * passes (sched_draft.c).
 *
 * A request is shared by its submitter and the engine: the submitter
 * takes output with atlas_sreq_take and ends its interest with
 * atlas_sreq_release, which also cancels the request if it is still
 * running (its blocks are freed at the engine's next step). */
#ifndef ATLAS_ENGINE_SCHEDULER_H
#define ATLAS_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../model/model.h"
#include "../tok/tok.h"
#include "generate.h"
#include "spec.h"

#define ATLAS_SCHED_MAX_TOP 20 /* most top_logprobs per token */

struct atlas_sched_params {
	int64_t max_seqs;         /* sequences in one step; 0 = the model's */
	int64_t max_batch_tokens; /* tokens in one step; 0 = the model's */
	bool prefix_cache;        /* share KV blocks of equal prompt prefixes
				   * (atlas_model_set_prefix_cache) */
	/* Speculative decoding (spec.h): a decoding request that is not in
	 * reasoning mode proposes drafts and verifies them in its step (a
	 * grammar cuts and masks them); at most ATLAS_SCHED_SPEC_SEQS
	 * requests a step do. */
	struct atlas_spec_params spec;
	/* With spec.mode ATLAS_SPEC_DRAFT: the draft model (not owned; it
	 * must outlive the scheduler and share the target's tokenizer). Its
	 * step limits must be at least the scheduler's sequence limit, and
	 * its KV pool holds each speculating request's draft sequence, which
	 * follows the request's accepted tokens (sched_draft.c). */
	struct atlas_model *draft;
};

#define ATLAS_SCHED_SPEC_SEQS 16 /* requests that speculate in one step, at most */

struct atlas_sched; /* opaque */
struct atlas_sreq;  /* opaque: one request */

/* What a request asks for. Everything is copied at submission. */
struct atlas_sreq_params {
	const int32_t *prompt;       /* prompt ids */
	int64_t n_prompt;            /* how many (>= 1) */
	struct atlas_gen_params gen; /* max_tokens, EOS ids, stop strings, sampling */
	int top_logprobs;            /* -1: no logprobs; else alternatives per token (<= 20) */
	enum atlas_pooling pool;     /* ATLAS_POOL_NONE: generate (gen, top_logprobs);
				      * else an embedding request: pool the prompt's
				      * final hidden states so (gen and top_logprobs
				      * are ignored) */
	bool normalize;              /* embedding: L2-normalize the pooled vector */
};

/* One generated token as the submitter sees it. */
struct atlas_sched_token {
	int32_t id;              /* the token, or -1: held text released at the end */
	size_t text_off;         /* its released text: offset into the chunk's text */
	size_t text_len;         /* and length (may be 0) */
	float logprob;           /* log-probability of id (when logprobs asked) */
	int n_top;               /* alternatives in top_id / top_lp */
	int32_t top_id[ATLAS_SCHED_MAX_TOP]; /* most likely ids, best first */
	float top_lp[ATLAS_SCHED_MAX_TOP];   /* their log-probabilities */
};

/* Output handed over by atlas_sreq_take; owned by the caller, freed with
 * atlas_sched_chunk_free. */
struct atlas_sched_chunk {
	struct atlas_sched_token *tok; /* new tokens */
	size_t n;                      /* how many */
	char *text;                    /* their text, concatenated */
	size_t text_len;               /* bytes of text */
	bool done;                     /* the request has finished (see result) */
};

/* How a request ended. */
struct atlas_sreq_result {
	int rc;                   /* 0, or the ATLAS_E* code of an engine failure */
	char error[256];          /* message when rc != 0 */
	enum atlas_finish finish; /* why it stopped */
	int stop_index;           /* stop string that matched, or -1 */
	int64_t n_prompt;         /* prompt tokens */
	int64_t n_gen;            /* generated tokens (EOS not counted) */
	int64_t n_cached;         /* prompt tokens found in the prefix cache
				   * (not computed) at first admission */
	int64_t preemptions;      /* times it was preempted and recomputed */
	double ttft_s;            /* submission to first token, seconds */
	double total_s;           /* submission to finish, seconds */
	int64_t spec_steps;       /* its steps that verified drafts */
	int64_t spec_drafted;     /* draft tokens proposed */
	int64_t spec_accepted;    /* of those, accepted */
};

/* Counters and gauges for monitoring. */
struct atlas_sched_stats {
	int64_t running;          /* admitted, holding a sequence */
	int64_t waiting;          /* queued (new or preempted) */
	int64_t kv_blocks_total;  /* blocks in the pool */
	int64_t kv_blocks_free;   /* blocks free now */
	int64_t steps;            /* forward steps run */
	int64_t preemptions;      /* requests preempted so far */
	int64_t tokens_generated; /* tokens sampled so far */
	int64_t prompt_tokens;    /* prompt tokens of admitted requests */
	int64_t prefix_hit_tokens;  /* of those, found in the prefix cache */
	int64_t prefix_miss_tokens; /* of those, computed */
	int64_t kv_blocks_cached; /* free blocks that still hold cached prefixes */
	int64_t prefix_snapshots; /* a hybrid model's cached blocks with a snapshot
				   * of the recurrent state (0 otherwise) */
	int64_t prefix_snapshot_bytes; /* the memory of its snapshot slots */
	int64_t spec_steps;       /* request steps that verified drafts */
	int64_t spec_drafted;     /* draft tokens proposed */
	int64_t spec_accepted;    /* of those, accepted */
	int64_t spec_tokens;      /* tokens those steps emitted (accepted + one each,
				   * less where a request ended inside a step) */
	int64_t mtp_entries;      /* --speculative mtp: entries the head's
				   * sequences were fed from the model's hidden
				   * states ... */
	int64_t mtp_blind;        /* ... and with zeros, no step having left
				   * the token's state (sched_mtp.c) */
};

/* A scheduler over `m` and `tok` (tok may be NULL: no text, no stop
 * strings); both must outlive it. Returns NULL with a message. */
struct atlas_sched *atlas_sched_new(struct atlas_model *m, const struct atlas_tok *tok,
				    const struct atlas_sched_params *p);
/* Free it; all requests must have finished or been released, and the
 * engine loop must have returned. */
void atlas_sched_free(struct atlas_sched *s);

/* Queue a request. On success returns 0 and sets *out (the submitter's
 * reference). ATLAS_EINVAL for an empty prompt or bad sampling params
 * (not checked for an embedding request),
 * ATLAS_ERANGE for a prompt longer than the context or one needing more
 * KV blocks than the pool holds, ATLAS_EIO after atlas_sched_stop. */
int atlas_sched_submit(struct atlas_sched *s, const struct atlas_sreq_params *p,
		       struct atlas_sreq **out);

/* Wait up to timeout_ms (-1: forever) for output, then hand over all
 * output not taken yet. Returns 1 when the chunk holds something (tokens
 * or done), 0 on timeout. */
int atlas_sreq_take(struct atlas_sreq *r, int timeout_ms, struct atlas_sched_chunk *out);
void atlas_sched_chunk_free(struct atlas_sched_chunk *c);
/* The outcome; valid once a chunk said done. */
void atlas_sreq_result(struct atlas_sreq *r, struct atlas_sreq_result *out);
/* An embedding request's vector, once a chunk said done and the result
 * has rc 0: copies min(cap, hidden_size) floats to out and returns
 * hidden_size; 0 for a generation request or one that did not finish
 * its prompt (cancelled, failed). */
int64_t atlas_sreq_embedding(struct atlas_sreq *r, float *out, int64_t cap);
/* Drop the submitter's reference; cancels the request if not done. */
void atlas_sreq_release(struct atlas_sreq *r);

/* Run one step (admit, batch, forward, sample, finish). Returns 1 if it
 * did work, 0 if there was nothing to do, or a negative ATLAS_E* (the
 * requests of a failed step finish with that error). Engine thread only. */
int atlas_sched_step(struct atlas_sched *s);
/* Step until atlas_sched_stop; sleeps while idle. Engine thread only.
 * Requests still queued when it stops finish as cancelled. */
void atlas_sched_run(struct atlas_sched *s);
/* Ask atlas_sched_run to return (any thread). */
void atlas_sched_stop(struct atlas_sched *s);

void atlas_sched_get_stats(struct atlas_sched *s, struct atlas_sched_stats *out);

#endif
