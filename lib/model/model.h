/* model.h - dense decoder-only transformers loaded from HF checkpoints.
 *
 * atlas_model_load reads config.json, picks the family from model_type /
 * architectures (llama, mistral, qwen2, qwen3), checks every tensor's
 * presence, dtype and shape against the config, and hands the weights to
 * the backend. The KV cache is one pool of fixed-size blocks owned by the
 * model; a sequence (struct atlas_seq) holds a block table that grows as
 * tokens are appended and gives its blocks back when reset or freed. A
 * forward step runs tokens of one or several sequences together
 * (continuous batching); results never depend on what else is in the
 * batch. */
#ifndef ATLAS_MODEL_H
#define ATLAS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../io/config.h"

struct atlas_model; /* opaque */
struct atlas_seq;   /* opaque: one sequence's KV cache and length */
struct atlas_comm;  /* lib/comm/comm.h */

struct atlas_model_params {
	int64_t max_context; /* tokens per sequence; 0 = min(config max, 4096) */
	int64_t max_seqs;    /* sequences in one forward step; 0 = 1 */
	int64_t max_tokens;  /* tokens in one forward step; 0 = 128 */
	int64_t block_size;  /* tokens per KV block; 0 = 16 */
	int64_t kv_blocks;   /* blocks in the pool; 0 = enough for max_seqs full sequences */
	enum atlas_kv_dtype kv_dtype; /* the cache's element format (--kv-dtype;
			      * lib/backend/kvq.h); 0 = the activation type */
	/* Tensor parallelism: load the model as rank comm->rank of
	 * comm->world (not owned; must outlive the model). NULL: one rank.
	 * Rank r keeps heads [r*H/P, (r+1)*H/P) of q/k/v (kv heads likewise,
	 * or the one kv head its q heads read when Hkv < P), the matching
	 * columns of o, rows [r*F/P, ...) of gate/up and those columns of
	 * down; o and down biases on rank 0 only; norms, embeddings and the
	 * output head whole (lib/comm/README-tp.md); a mixture-of-experts
	 * layer's router and experts whole too (rank 0 computes the layer,
	 * lib/model/README-moe.md). Needs H % P == 0,
	 * Hkv % P == 0 or P % Hkv == 0, and F % P == 0. Every rank must be
	 * loaded with the same parameters. */
	struct atlas_comm *comm;
	/* atlas_model_synthetic only: the linear layers' weight format, NULL
	 * or "bf16", "fp8-block" (FP8 E4M3 with a scale per 128 x 128
	 * block, as Qwen3-FP8 stores them; kept as F8B where the backend
	 * takes it, else refused) or "w4a16" (4-bit with zero points and
	 * scales per 128 columns, as W4B; the same rule) */
	const char *synthetic_quant;
};

void atlas_model_default_params(struct atlas_model_params *p);

/* The multi-token prediction (MTP) head of the checkpoint in `dir`,
 * whose trunk `target` was loaded from it (and must outlive the head),
 * as a model of its own for --speculative mtp (lib/engine/README-spec.md):
 * one full-attention decoder layer (mtp.layers.0) with its own KV pool
 * sized by p, over fc([rmsnorm_e(embed(t)), rmsnorm_h(h)]) where h is the
 * target's final-normed hidden state of the token before t; its
 * mtp.norm, then the target's output head. Embeddings and head are the
 * target's (not loaded twice). A checkpoint without mtp.* weights, or
 * with an MTP head Atlas does not run (more than one layer, tensor
 * parallelism), is refused naming what is missing. */
struct atlas_model *atlas_model_load_mtp(const char *dir, struct atlas_model *target,
					 const struct atlas_model_params *p);
/* Whether m is an MTP head (its steps read atlas_batch_item.hid). */
bool atlas_model_is_mtp(const struct atlas_model *m);
/* The final-normed hidden states of the rows of m's last step (its
 * items' tokens end to end), in backend memory of the activation type,
 * row_bytes apart: what an MTP head reads. Valid until m's next step. */
const void *atlas_model_hidden_rows(const struct atlas_model *m, size_t *row_bytes);

/* Load the model in directory `dir` onto backend `be` (which must outlive
 * the model). Returns a model owned by the caller (atlas_model_free) or
 * NULL with a message naming the file/tensor/field at fault. */
struct atlas_model *atlas_model_load(const char *dir, struct atlas_backend *be,
				     const struct atlas_model_params *p);
void atlas_model_free(struct atlas_model *m);

/* The parsed config; owned by the model. */
const struct atlas_config *atlas_model_config(const struct atlas_model *m);
/* Family name ("qwen3", ...); static string. */
const char *atlas_model_family(const struct atlas_model *m);
/* Context capacity of a sequence. */
int64_t atlas_model_max_context(const struct atlas_model *m);
/* Bytes of weights read per decode step (all matrices but the embedding
 * table, plus the output head), for roofline arithmetic. */
int64_t atlas_model_weight_bytes(const struct atlas_model *m);
/* For a mixture-of-experts model, whose batched steps read as many
 * experts as their rows route to: the bytes of one routed expert (gate,
 * up and down; every sparse layer's experts are the same size), and the
 * part of atlas_model_weight_bytes that is routed experts (top_k in each
 * sparse layer). A step that reads X (layer, expert) pairs reads
 * weight_bytes - routed_bytes + X * expert_bytes. 0 for a dense model. */
int64_t atlas_model_expert_bytes(const struct atlas_model *m);
int64_t atlas_model_routed_bytes(const struct atlas_model *m);

/* A model of the shape `cfg` (a family by cfg->model_type, as from
 * config.json) whose weights are random values the backend makes itself
 * (be->fill_random; nothing is read from disk): for speed measurements
 * at real shapes. All weights are BF16 (the linear layers' FP8 with
 * p->synthetic_quant "fp8-block", 4-bit with "w4a16", NVFP4 with "nvfp4"):
 * matrices uniform with unit output
 * variance, norms 1. `seed` picks the values. Same ownership and
 * parameters as atlas_model_load; NULL with a message, e.g. when the
 * backend cannot fill. */
struct atlas_model *atlas_model_synthetic(const struct atlas_config *cfg,
					  struct atlas_backend *be,
					  const struct atlas_model_params *p, uint64_t seed);

/* A synthetic MTP head for `target` (atlas_model_load_mtp's, with random
 * weights at the target's shapes, made as atlas_model_synthetic makes
 * them): atlas-bench's measure of a speculative step. */
struct atlas_model *atlas_model_synthetic_mtp(struct atlas_model *target,
					      const struct atlas_model_params *p, uint64_t seed);

/* Decode steps (one token per sequence) are recorded once per batch size
 * and replayed when the backend can (CUDA graphs); on by default. Off:
 * every step runs op by op (needed for per-kernel profiling). */
void atlas_model_set_graphs(struct atlas_model *m, bool on);

/* Tensor parallelism: rank 0 is driven by the caller as usual (forward,
 * forward_batch, generate, the scheduler); before each step it
 * broadcasts the step's shape and token metadata. Every other rank
 * calls atlas_model_follow, which runs the same layers on its slice
 * (the collectives meet rank 0's) until rank 0 calls
 * atlas_model_stop_followers, and returns 0 then (or an error, after
 * which the group is unusable). Only rank 0 computes logits and samples.
 * With one rank, follow is an error and stop_followers does nothing. */
int atlas_model_follow(struct atlas_model *m);
int atlas_model_stop_followers(struct atlas_model *m);
/* This model's rank and world size (0 and 1 without a comm). */
int atlas_model_rank(const struct atlas_model *m);
int atlas_model_world(const struct atlas_model *m);

/* The model's sentence-transformers pooling, read at load (modules.json
 * and its Pooling module's config): pooling ATLAS_POOL_NONE for a
 * generation model. An embedding model (pooling set) has no output head:
 * a step that asks it for logits or a sampled token fails with
 * ATLAS_EUNSUPPORTED; its steps give hidden states (atlas_batch_item).
 * Owned by the model. */
const struct atlas_embed_config *atlas_model_embed_config(const struct atlas_model *m);

/* Pick the backend's kernels for this model's family and weight type
 * again (be->specialize, which atlas_model_load does). The kernel set is
 * the backend's: after a second model of another family loads on the
 * same backend (a draft model), this gives the first its own kernels
 * back; every kernel set runs every family, so the second still runs.
 * 0 or a negative ATLAS_E*. */
int atlas_model_specialize(struct atlas_model *m);

/* Comma-separated list of supported families; static string. */
const char *atlas_model_supported(void);

/* A new empty sequence for `m` (holding no blocks yet), or NULL. Owned
 * by the caller; free it before the model. */
struct atlas_seq *atlas_seq_new(struct atlas_model *m);
void atlas_seq_free(struct atlas_seq *s);
/* Tokens held so far. */
int64_t atlas_seq_len(const struct atlas_seq *s);
/* Forget all tokens and give the blocks back to the pool. */
void atlas_seq_reset(struct atlas_seq *s);

/* Run T tokens `ids` at positions len..len+T-1 of `s`, appending them to
 * its cache (in steps of at most max_tokens). Writes logits to host
 * memory: [T, vocab] when all_logits, else [vocab] for the last token
 * only (logits may be NULL then). ATLAS_ERANGE when an id is out of the
 * vocabulary or the context would overflow, ATLAS_ENOMEM when the pool
 * has too few free blocks; on error nothing is appended. */
int atlas_model_forward(struct atlas_model *m, struct atlas_seq *s,
			const int32_t *ids, int64_t T, float *logits,
			bool all_logits);

/* One sequence's share of a batched step. */
struct atlas_batch_item {
	struct atlas_seq *seq; /* the sequence the tokens are appended to */
	const int32_t *ids;    /* its new tokens */
	int64_t n;             /* how many (>= 1) */
	float *logits;         /* host [vocab] for its last token, or NULL */
	int64_t n_logits;      /* with logits: rows for the last n_logits tokens
				* ([n_logits, vocab], 1..n; 0 means 1), as a
				* speculative step's verification needs */
	const struct atlas_sample_args *sample; /* or: sample its next token on
				  the backend with these settings ... */
	int32_t *token;        /* ... into this host int (with sample) */
	float *hidden;         /* or NULL: host [n, hidden_size] FP32, the final-
				* normed hidden states of all n tokens (what an
				* embedding model pools); such a step runs op by op */
	/* An MTP head's input (atlas_model_load_mtp): token t of the item is
	 * paired with the hidden state of the token before it. The first
	 * hid_zeros tokens take zeros (a state nobody computed); the other
	 * n - hid_zeros come from hid, backend rows [n - hid_zeros,
	 * hidden_size] in the activation type (atlas_model_hidden_rows of
	 * the target or of the head itself). Ignored by other models. */
	const void *hid;
	int64_t hid_zeros;
};

/* Can the model's backend sample on the device (atlas_model_forward_sample)? */
bool atlas_model_can_sample(const struct atlas_model *m);

/* Like atlas_model_forward without logits, but the token after the last
 * one is sampled on the backend with `args` (be->sample must exist) and
 * only its id comes back, in *token. */
int atlas_model_forward_sample(struct atlas_model *m, struct atlas_seq *s,
			       const int32_t *ids, int64_t T,
			       const struct atlas_sample_args *args, int32_t *token);

/* One forward step over several sequences: at most max_seqs items, each
 * sequence at most once, at most max_tokens tokens in all. Errors as
 * atlas_model_forward; on error no sequence changes. */
int atlas_model_forward_batch(struct atlas_model *m,
			      const struct atlas_batch_item *items, int64_t n);

/* Called by a step that samples on the backend once the step's work is
 * queued and before the draw: host work that the draw needs (grammar
 * masks, which it may write into the items' sample args' mask fields)
 * then overlaps the device's. NULL: none. */
typedef void (*atlas_sample_hook)(void *ud);
void atlas_model_set_sample_hook(struct atlas_model *m, atlas_sample_hook fn, void *ud);

/* KV pool: total blocks, free blocks, tokens per block. */
int64_t atlas_model_kv_blocks_total(const struct atlas_model *m);
int64_t atlas_model_kv_blocks_free(const struct atlas_model *m);
int64_t atlas_model_block_size(const struct atlas_model *m);
/* Limits of one step (from the params). */
int64_t atlas_model_max_seqs(const struct atlas_model *m);
int64_t atlas_model_max_tokens(const struct atlas_model *m);
/* Drop the tokens of `s` past its first `len` (speculative decoding's
 * rejected drafts): its length becomes len and blocks past it go back to
 * the pool. Only tokens a step appended since the last
 * atlas_seq_publish_prefix may go: len must not fall below what was
 * published (ATLAS_EINVAL, nothing changes). A hybrid model's sequence
 * (atlas_model_recurrent) goes back into its last step of several tokens
 * (and the one-token steps after it) by restoring the recurrent state
 * saved before that step and running the kept tokens again, which gives
 * the same bits; further back is ATLAS_EUNSUPPORTED. */
int atlas_seq_truncate(struct atlas_seq *s, int64_t len);
/* Whether m's sequences carry recurrent state beside their KV cache (a
 * hybrid linear-attention model, lib/model/README-hybrid.md). */
bool atlas_model_recurrent(const struct atlas_model *m);
/* Bytes of recurrent state one sequence of m holds (0: none); a step
 * reads and writes all of it for each of its sequences. */
int64_t atlas_model_state_bytes(const struct atlas_model *m);
/* Blocks `s` would need to take from the pool to append n more tokens. */
int64_t atlas_seq_blocks_needed(const struct atlas_seq *s, int64_t n);
/* Blocks `s` holds now. */
int64_t atlas_seq_blocks(const struct atlas_seq *s);

/* --- prefix caching (lib/model/prefix.c) ----------------------------------
 *
 * Blocks of computed KV rows are kept after their sequences let go and
 * found again by their token content: a block is keyed by its B tokens
 * and its parent (the block before it in the sequence, keyed the same
 * way back to position 0), so a match is exact, never a hash guess.
 * Blocks are reference-counted: a block in several sequences' tables
 * is shared; one no sequence holds but the cache still knows is
 * "cached" and counts as free (atlas_model_kv_blocks_free), and it is
 * evicted, least recently let go first, only when a sequence needs a
 * block and no plain free one is left; evicting a block also forgets
 * the blocks cached after it (never a block a sequence holds: those
 * just stop being findable). A sequence never writes into a block
 * another sequence or the cache still uses: before it appends to a
 * shared, partly used block (one atlas_seq_attach_prefix shared), that
 * block is copied (copy on write), one block more for the step that
 * appends, counted by atlas_seq_blocks_needed. Off by default; with
 * tensor parallelism (world > 1) there is no copy on write, so a match
 * stops at the last whole block. All of it is host bookkeeping on the
 * driving rank (rank 0), whose block tables the other ranks follow.
 * A hybrid model (atlas_model_recurrent) needs the recurrent state at
 * the end of a shared prefix too: each step snapshots a sequence's
 * state at the last block boundary it reaches, publishing keeps the
 * snapshot beside the block it ends (a few slots, recycled least
 * recently used first), and attaching stops at the deepest whole block
 * with a snapshot and restores it (never a partial block).
 *
 * Use: on admission, attach the prompt to the empty sequence, then ask
 * atlas_seq_blocks_needed(s, n - attached) and compute ids[attached..n);
 * after each step that appended, publish. A request that is not run
 * after all gives its shared blocks back with atlas_seq_reset. */

/* Turn prefix caching on or off. Off forgets every cached block (the
 * unused ones become plain free; sequences keep what they hold); on
 * again starts empty, and a running sequence's next publish puts its
 * whole blocks back. */
void atlas_model_set_prefix_cache(struct atlas_model *m, bool on);
bool atlas_model_prefix_cache(const struct atlas_model *m);

/* On an empty sequence: share the longest cached prefix of ids[0..n),
 * at most n - 1 tokens (one token is always left to compute, for its
 * logits): whole blocks, then (one rank only) the leading tokens of the
 * cached block that matches most of what is left. The sequence's length
 * becomes the number returned (0: no match, caching off, n < 2, or s
 * not empty). It takes no plain free block, but cached blocks it shares
 * that no one held stop counting as free, so read
 * atlas_model_kv_blocks_free after it. A shared partial block is copied
 * when s first appends to it (counted by atlas_seq_blocks_needed). */
int64_t atlas_seq_attach_prefix(struct atlas_seq *s, const int32_t *ids, int64_t n);

/* Make the whole blocks of s that hold ids[0..atlas_seq_len(s)) findable
 * by later atlas_seq_attach_prefix calls. `ids` are the tokens of s
 * from position 0 (at least atlas_seq_len(s) of them). Call after a
 * step has computed them (the device work may still be queued: later
 * steps run after it); cheap when no block filled up since the last
 * call. A block whose content the cache already has (another sequence
 * computed it in parallel) is not published twice: s keeps its own copy
 * until it lets go. A no-op when caching is off. */
void atlas_seq_publish_prefix(struct atlas_seq *s, const int32_t *ids);

/* Blocks that hold cached content no sequence uses (a part of
 * atlas_model_kv_blocks_free). */
int64_t atlas_model_kv_blocks_cached(const struct atlas_model *m);
/* A hybrid model's prefix-cache snapshots of the recurrent state: how
 * many cached blocks have one, and (*bytes, when not NULL) the memory of
 * the snapshot slots allocated. 0 for other models. */
int64_t atlas_model_prefix_snapshots(const struct atlas_model *m, int64_t *bytes);

#endif
