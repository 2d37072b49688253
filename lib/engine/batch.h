/* batch.h - many prompts through the scheduler at once, output in input
 * order (atlas-run -f, --jsonl, the pipe stage generate).
 *
 * The driver pulls prompts from the caller, keeps up to `parallel` of
 * them in the scheduler, runs the scheduler's steps on the caller's
 * thread, and hands each prompt's tokens back strictly in input order:
 * prompt i's tokens stream as soon as prompts 0..i-1 have ended, the
 * tokens of later prompts wait in memory meanwhile. Each prompt is a
 * scheduler request of its own, so its output is what it would be alone
 * (scheduler.h). An input the caller could not turn into a prompt (a bad
 * line) takes its place in the order and is reported there; the others
 * still run. */
#ifndef ATLAS_ENGINE_BATCH_H
#define ATLAS_ENGINE_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "generate.h"
#include "scheduler.h"

/* One input, filled by the caller's next(). */
struct atlas_batch_input {
	int32_t *ids;          /* prompt ids, malloc'd; the driver frees them */
	int64_t n;             /* how many */
	bool bad;              /* the input is unusable: `error` says why */
	char error[256];       /* message for a bad input */
	void *tag;             /* the caller's, handed back in done() */
};

/* How one input ended. */
struct atlas_batch_end {
	int64_t index;         /* 0-based position in the input */
	int rc;                /* 0, or the ATLAS_E* code (bad input: ATLAS_EINVAL) */
	const char *error;     /* message when rc != 0 */
	struct atlas_gen_stats st; /* its numbers when rc == 0 */
	void *tag;             /* from the input */
};

struct atlas_batch_io {
	/* The next input: 1 with *in filled, 0 at the end of the input, or a
	 * negative code to stop reading (what was read still completes). */
	int (*next)(void *ud, struct atlas_batch_input *in);
	/* A token of input `index` (in input order; `tag` from its input),
	 * as atlas_token_cb. */
	void (*token)(void *ud, int64_t index, void *tag, int32_t id, const char *text,
		      size_t len);
	/* Input `index` ended (after its last token). */
	void (*done)(void *ud, const struct atlas_batch_end *e);
	/* Optional: called after every step with inputs ended and read so
	 * far, whether the input is exhausted, and tokens generated. */
	void (*progress)(void *ud, int64_t done, int64_t read, bool eof, int64_t tokens);
	void *ud;
};

/* Totals of a run. */
struct atlas_batch_totals {
	int64_t inputs;        /* inputs read */
	int64_t failed;        /* of those, bad or failed */
	int64_t prompt_tokens; /* prompt tokens of the good ones */
	int64_t cached_tokens; /* of those, found in the prefix cache */
	int64_t gen_tokens;    /* tokens generated */
	double wall_s;         /* first read to last end, seconds */
};

/* Run every input of `io` with generation settings `gp` on `s`, at most
 * `parallel` (>= 1) at once, the caller's thread being the engine thread
 * (no atlas_sched_run may be running). Returns 0 when every input
 * completed (totals in *tot, may be NULL), ATLAS_EINVAL when some input
 * was bad or failed (each was reported through done()), or the negative
 * code next() returned. */
int atlas_batch_generate(struct atlas_sched *s, const struct atlas_gen_params *gp,
			 int64_t parallel, const struct atlas_batch_io *io,
			 struct atlas_batch_totals *tot);

#endif
