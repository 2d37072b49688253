/* generate.h - run one prompt to completion, synchronously.
 *
 * atlas_generate is a thin driver over the scheduler (scheduler.h): it
 * submits the prompt and runs the scheduler's steps on the caller's
 * thread until the request ends, an end-of-sequence id, a stop string,
 * max_tokens or the context limit. Each token reaches the caller through
 * a callback, with the text it completes (UTF-8 safe, held back while it
 * could still turn into a stop string). There is no other generation
 * loop: atlas-run, the server and the benchmarks all go through the
 * scheduler's step. */
#ifndef ATLAS_ENGINE_GENERATE_H
#define ATLAS_ENGINE_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "../model/model.h"
#include "../tok/tok.h"
#include "sampler.h"

enum atlas_finish {
	ATLAS_FINISH_LENGTH = 0, /* max_tokens or the context filled up */
	ATLAS_FINISH_EOS,        /* an end-of-sequence id was sampled */
	ATLAS_FINISH_STOP,       /* a stop string appeared */
	ATLAS_FINISH_CANCELLED,  /* the callback asked to stop */
};

/* "length", "stop" (for EOS and stop strings), "cancelled". */
const char *atlas_finish_name(enum atlas_finish f);

struct atlas_gen_params {
	int64_t max_tokens;        /* most tokens to generate (> 0) */
	bool ignore_eos;           /* keep going past EOS ids */
	int32_t eos_ids[16];       /* ids that end the sequence */
	int n_eos;                 /* entries in eos_ids */
	const char *const *stop;   /* stop strings (not owned), or NULL */
	int n_stop;                /* entries in stop */
	struct atlas_sampler_params sampling; /* sampler settings */

	/* Grammar-constrained decoding (grammar.h): the output must match
	 * `grammar` (NULL: unconstrained), compiled for a vocabulary of the
	 * model's vocab_size. A request takes its own reference
	 * (atlas_grammar_ref) at submission, so the caller may drop its one
	 * at any time. EOS ids are allowed only where the grammar can end, and
	 * the request stops (finish "stop") where it must end. */
	struct atlas_grammar *grammar;
	/* Reasoning: with `reasoning`, output between think_start and
	 * think_end (token ids) is thought, not answer. The grammar applies
	 * after it (at the first step, think_start is allowed besides the
	 * grammar's tokens); start_in_reasoning: the prompt left think_start
	 * open; reasoning_budget > 0: after that many tokens of thought only
	 * think_end may come (thinking is cut short by inserting the marker). */
	bool reasoning;
	bool start_in_reasoning;
	int32_t think_start, think_end;
	int64_t reasoning_budget;
};

struct atlas_gen_stats {
	int64_t n_prompt;          /* prompt tokens */
	int64_t n_cached;          /* of those, found in the prefix cache */
	int64_t n_gen;             /* tokens generated (EOS not counted) */
	int64_t n_decode;          /* single-token forward passes run */
	double prompt_s;           /* prefill time, seconds */
	double gen_s;              /* time after the first token, seconds */
	double ttft_s;             /* start to first token, seconds */
	enum atlas_finish finish;  /* why it stopped */
	int64_t spec_steps;        /* speculative steps (drafts verified) */
	int64_t spec_drafted;      /* draft tokens proposed */
	int64_t spec_accepted;     /* of those, accepted */
};

/* Called once per generated token (EOS excluded) with its id and the text
 * it releases (len may be 0; text is not NUL-terminated). Return non-zero
 * to stop. After the last token, text still held back (a partial stop
 * string that never completed) comes in one more call with id -1. With a
 * scheduler made without a tokenizer, text is always empty and stop
 * strings are ignored. */
typedef int (*atlas_token_cb)(void *ud, int32_t id, const char *text, size_t len);

struct atlas_sched;
struct atlas_sreq_result;

/* Generate from `prompt` (n tokens, n >= 1) on the scheduler `s`, whose
 * engine thread the caller is for the duration (no atlas_sched_run may be
 * running). Returns 0 (see stats->finish) or a negative ATLAS_E*:
 * ATLAS_EINVAL for an empty prompt, ATLAS_ERANGE for a prompt that does
 * not fit the context or the KV pool or holds an id outside the
 * vocabulary, or the error of a failed step. */
int atlas_generate(struct atlas_sched *s, const int32_t *prompt, int64_t n,
		   const struct atlas_gen_params *p, atlas_token_cb cb, void *ud,
		   struct atlas_gen_stats *stats);

/* Stats of a finished request; n_decode: one-token steps after the first token. */
void atlas_gen_stats_from(struct atlas_gen_stats *st, const struct atlas_sreq_result *res,
			  int64_t n_decode);

#endif
