/* session.h - the one object that opens a model for generation.
 *
 * A session owns everything a generation needs: the tokenizer, the
 * model's generation_config.json, the sampler defaults and the
 * end-of-sequence set drawn from them, the backend (or the thread ranks
 * of a tensor-parallel group), the model with its KV pool, and the
 * continuous-batching scheduler. Every program opens models here and
 * generates through the scheduler's step, so atlas-run -p, -f, the pipe
 * stages, --chat, atlas-serve and atlas-bench run the same code and
 * sample the same way.
 *
 * Opening is two calls, atlas_session_new (the device) and
 * atlas_session_load (tokenizer, model, scheduler), so that a caller
 * can measure the device before the weights take its memory; or one,
 * atlas_session_open. The session is driven by one thread at a time
 * (the scheduler's engine thread); any thread may submit requests to
 * its scheduler (scheduler.h). */
#ifndef ATLAS_ENGINE_SESSION_H
#define ATLAS_ENGINE_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "../io/config.h"
#include "../model/model.h"
#include "spec.h"
#include "../model/tp_group.h"
#include "../tok/tok.h"
#include "generate.h"
#include "scheduler.h"

struct atlas_session_params {
	const char *model_dir;    /* resolved model directory; may be NULL with `build` */
	const char *device;       /* "auto" (or NULL), "cpu", "cuda[:N]" */
	int tp;                   /* tensor-parallel thread ranks; 0 or 1 = one */
	bool no_model;            /* tokenizer only: no backend, model or scheduler */
	bool no_tok;              /* no tokenizer (then no text and no stop strings) */
	struct atlas_model_params model; /* context, step limits, KV pool (comm is
				   * the session's); atlas_session_load may override */
	int64_t sched_max_seqs;   /* scheduler's sequences per step; 0 = the model's */
	int64_t sched_max_tokens; /* scheduler's tokens per step; 0 = the model's */
	bool batch_invariant;     /* a row never depends on its batch-mates
				   * (backend.h batch_invariant; the server's setting) */
	bool prefix_cache;        /* share KV blocks of equal prompt prefixes
				   * (default true) */
	bool no_graphs;           /* run every step op by op (profiling) */
	struct atlas_spec_params spec; /* speculative decoding (spec.h; mode
				   * ATLAS_SPEC_NONE: off, the default) */
	const char *draft_model_dir; /* with spec.mode ATLAS_SPEC_DRAFT: the draft
				   * model's directory (resolved). It must have
				   * the target's tokenizer; it is loaded on the
				   * same device with the target's context and
				   * step limits and a KV pool of as many blocks
				   * (one rank only) */
	/* Build each rank's model instead of loading model_dir (atlas-bench's
	 * random weights at real shapes); NULL = atlas_model_load. */
	atlas_tp_load_fn build;
	void *build_arg;          /* handed to build */
};

struct atlas_session; /* opaque */

void atlas_session_default_params(struct atlas_session_params *p);

/* Open the device: the backend, or a tensor-parallel group's ranks.
 * Parameters are copied (strings must outlive the session). Returns the
 * session (owned by the caller, atlas_session_close) or NULL with a
 * message. With no_model nothing is opened here. */
struct atlas_session *atlas_session_new(const struct atlas_session_params *p);

/* Load the tokenizer, generation_config.json, the model (with `mp`, or
 * the params' model settings when NULL) and the scheduler. 0, or a
 * negative ATLAS_E* with a message naming the file or field at fault.
 * Once only. */
int atlas_session_load(struct atlas_session *s, const struct atlas_model_params *mp);

/* atlas_session_new then atlas_session_load; NULL with a message. */
struct atlas_session *atlas_session_open(const struct atlas_session_params *p);

/* Stop the followers of a group, free the scheduler, model, backend and
 * tokenizer. Every request must have finished or been released and no
 * engine loop may run. NULL is a no-op. */
void atlas_session_close(struct atlas_session *s);

/* Parts, owned by the session (NULL when not opened). */
struct atlas_backend *atlas_session_backend(struct atlas_session *s);
struct atlas_model *atlas_session_model(struct atlas_session *s);
struct atlas_tok *atlas_session_tok(struct atlas_session *s);
/* The draft model (speculative decoding with ATLAS_SPEC_DRAFT), or NULL. */
struct atlas_model *atlas_session_draft(struct atlas_session *s);
struct atlas_sched *atlas_session_sched(struct atlas_session *s);
const struct atlas_gen_config *atlas_session_gen_config(const struct atlas_session *s);
const char *atlas_session_dir(const struct atlas_session *s);
/* The model's embedding settings (sentence-transformers pooling and
 * normalization, read from the model directory at load): pooling
 * ATLAS_POOL_NONE for a generation model, or before the model is
 * loaded. Owned by the session. */
const struct atlas_embed_config *atlas_session_embed(const struct atlas_session *s);
/* An embedding model: it pools hidden states and cannot generate. */
bool atlas_session_is_embedding(const struct atlas_session *s);
/* Tensor-parallel ranks (1 without a group). */
int atlas_session_world(const struct atlas_session *s);

/* The model's generation defaults, as transformers applies them:
 * sampling from generation_config.json (do_sample false means greedy),
 * max_tokens from max_new_tokens (else 256), and the end-of-sequence
 * set: config.json's, generation_config.json's and the tokenizer's EOS,
 * without duplicates. Callers override fields afterwards. */
void atlas_session_gen_defaults(const struct atlas_session *s, struct atlas_gen_params *out);

#endif
