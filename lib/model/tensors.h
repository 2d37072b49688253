/* tensors.h - the tensors a dense decoder family reads from a checkpoint,
 * with the shapes config.json implies. atlas-load validate and
 * atlas-doctor check a checkpoint against this list without loading it;
 * it mirrors what decoder.c binds (a unit test keeps the two in step by
 * loading every golden model). */
#ifndef ATLAS_MODEL_TENSORS_H
#define ATLAS_MODEL_TENSORS_H

#include <stdbool.h>
#include <stdint.h>

#include "../io/config.h"
#include "family.h"

struct atlas_expected_tensor {
	const char *name;      /* "model.layers.0.self_attn.q_proj.weight"; valid during the callback */
	int ndim;              /* 1, 2, or 3 (a conv weight) */
	int64_t shape[3];      /* [rows], [rows, cols] or [rows, 1, width] */
	bool required;         /* false: an optional bias, checked only when present */
	const char *weight_of; /* for a bias: the matrix it must match in dtype, else NULL */
};

/* Called once per tensor; a non-zero return stops the walk and is
 * returned by atlas_model_expected_tensors. */
typedef int (*atlas_expected_tensor_fn)(void *arg, const struct atlas_expected_tensor *t);

/* Walk every tensor the decoder reads for config `c` of family `fam`, in
 * load order (embedding, final norm, output head unless tied, then each
 * layer). Returns 0, or the callback's first non-zero value. */
int atlas_model_expected_tensors(const struct atlas_config *c, const struct atlas_family *fam,
				 atlas_expected_tensor_fn fn, void *arg);

/* The same walk for a checkpoint whose decoder tensors carry `prefix`
 * ("model." as a CausalLM stores them, "" as a base model such as
 * Qwen3-Embedding's Qwen3Model does: "embed_tokens.weight",
 * "layers.0.…", "norm.weight"); `embedding`: an embedding model, whose
 * output head is never read (listed as optional when untied, so that a
 * CausalLM export's lm_head.weight is no surprise).
 * atlas_model_expected_tensors is this with "model." and false. */
int atlas_model_expected_tensors_at(const struct atlas_config *c, const struct atlas_family *fam,
				    const char *prefix, bool embedding,
				    atlas_expected_tensor_fn fn, void *arg);

/* The config of an MTP head beside a model of config c: c's, with one
 * full-attention layer, whose MLP is dense when `dense` (else sparse
 * where c has experts). */
void atlas_mtp_config(const struct atlas_config *c, bool dense, struct atlas_config *out);

struct atlas_st;
/* A checkpoint's multi-token prediction head (mtp.*, --speculative mtp):
 * false when `st` has no mtp.fc.weight; else *out is the head's config,
 * c's with one full-attention layer, whose MLP is sparse when the
 * checkpoint has its router (mtp.layers.0.mlp.gate.weight). */
bool atlas_model_mtp_config(const struct atlas_config *c, const struct atlas_st *st,
			    struct atlas_config *out);
/* Walk the head's tensors for its config mc (atlas_model_mtp_config):
 * mtp.fc.weight [D, 2D], the pre-fc norms of the embedding and the
 * hidden state, mtp.norm, then layer 0 under "mtp.". */
int atlas_model_expected_mtp_tensors(const struct atlas_config *mc,
				     const struct atlas_family *fam,
				     atlas_expected_tensor_fn fn, void *arg);

/* The prefix of the decoder's tensor names in checkpoint `st`:
 * "model.language_model." when it has that embedding (a composite
 * vision-language checkpoint's language model), "" when it has
 * "embed_tokens.weight" and not "model.embed_tokens.weight" (a base
 * model's layout), else "model.". Static string. The loader (decoder.c)
 * and the validator both ask here, so they agree. */
const char *atlas_model_tensor_prefix(const struct atlas_st *st);

/* Severity of a finding of atlas_model_validate. */
enum atlas_finding {
	ATLAS_FINDING_WARNING = 1, /* odd but loadable: an unexpected tensor */
	ATLAS_FINDING_PROBLEM = 2, /* the model will not load or will compute wrong */
};

/* Receives each finding as one line of text (no newline). */
typedef void (*atlas_finding_fn)(void *arg, enum atlas_finding level, const char *msg);

/* Check the checkpoint in `dir` against its config.json without loading
 * it: config parses and its family is supported, the sentence-transformers
 * pooling config (if any) is one Atlas computes, shards are consistent,
 * every tensor the family needs is present with the implied shape and a
 * supported dtype, biases match their matrices' dtypes; tensors nobody
 * reads are warnings. Every finding goes to `fn`; the walk goes on past
 * problems so the caller gets the whole list. Returns the number of
 * problems (0: loadable), or ATLAS_ENOMEM. */
int atlas_model_validate(const char *dir, atlas_finding_fn fn, void *arg);

#endif
