/* sampler.h - turn logits into the next token id.
 *
 * Order as in transformers: repetition penalty (over the whole context),
 * presence/frequency penalties (over generated tokens, as OpenAI/vLLM),
 * then temperature, top-k, top-p, min-p, then a draw from a seeded
 * xoshiro256** generator. temperature 0 means greedy (argmax, lowest id
 * on ties). Same seed, params and logits give the same tokens. */
#ifndef ATLAS_ENGINE_SAMPLER_H
#define ATLAS_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

struct atlas_sampler_params {
	double temperature;        /* 0 = greedy */
	int64_t top_k;             /* 0 = disabled */
	double top_p;              /* 1 = disabled */
	double min_p;              /* 0 = disabled */
	double repetition_penalty; /* 1 = disabled; HF semantics */
	double presence_penalty;   /* 0 = disabled; OpenAI semantics */
	double frequency_penalty;  /* 0 = disabled; OpenAI semantics */
	uint64_t seed;             /* RNG seed */
};

void atlas_sampler_default_params(struct atlas_sampler_params *p);

struct atlas_sampler; /* opaque */

/* A sampler for a vocabulary of n_vocab; owned by the caller. NULL with a
 * message on bad params (negative temperature, top_p outside (0,1], ...). */
struct atlas_sampler *atlas_sampler_new(const struct atlas_sampler_params *p,
					int64_t n_vocab);
void atlas_sampler_free(struct atlas_sampler *s);

/* Pick a token. `logits` [n_vocab] is modified in place. `context` holds
 * all tokens so far (prompt then generated); the last n_generated of them
 * are the generated ones. Returns the id (>= 0). */
int32_t atlas_sampler_sample(struct atlas_sampler *s, float *logits,
			     const int32_t *context, int64_t n_context,
			     int64_t n_generated);

/* Apply this sampler's penalties (repetition, presence, frequency) to
 * `logits` ([vocab] of the sampler's size at least) for that context, as
 * atlas_sampler_sample does before it draws; no draw is consumed. A
 * draft model's greedy drafts use it to propose what the penalized
 * target would pick. */
void atlas_sampler_penalize(struct atlas_sampler *s, float *logits, const int32_t *context,
			    int64_t n_context, int64_t n_generated);

/* The settings of the next draw for an on-device sampler, with a fresh
 * uniform from this sampler's generator (so host and device choices
 * match). Returns 1 when the device may sample (no penalties, which need
 * the token history), else 0 (sample on the host with
 * atlas_sampler_sample instead; note that this call consumed a draw). */
struct atlas_sample_args;
int atlas_sampler_args(struct atlas_sampler *s, struct atlas_sample_args *a);

/* Do these settings need the token history (any penalty)? Then sampling
 * must happen on the host, with atlas_sampler_sample. */
bool atlas_sampler_uses_history(const struct atlas_sampler_params *p);

/* Check params; returns 0 or ATLAS_EINVAL with a message naming the field. */
int atlas_sampler_check(const struct atlas_sampler_params *p);

#endif
