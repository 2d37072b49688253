/* model.h - dense decoder-only transformers loaded from HF checkpoints.
 *
 * atlas_model_load reads config.json, picks the family from model_type /
 * architectures (llama, mistral, qwen2, qwen3), checks every tensor's
 * presence, dtype and shape against the config, and hands the weights to
 * the backend. A sequence (struct atlas_seq) owns one KV cache; forward
 * appends tokens to it and returns logits. */
#ifndef ATLAS_MODEL_H
#define ATLAS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../io/config.h"

struct atlas_model; /* opaque */
struct atlas_seq;   /* opaque: one sequence's KV cache and length */

struct atlas_model_params {
	int64_t max_context; /* KV capacity per sequence; 0 = min(config max, 4096) */
};

void atlas_model_default_params(struct atlas_model_params *p);

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

/* Comma-separated list of supported families; static string. */
const char *atlas_model_supported(void);

/* A new empty sequence for `m`, or NULL. Owned by the caller. */
struct atlas_seq *atlas_seq_new(struct atlas_model *m);
void atlas_seq_free(struct atlas_seq *s);
/* Tokens held so far. */
int64_t atlas_seq_len(const struct atlas_seq *s);
/* Forget all tokens (keeps the memory). */
void atlas_seq_reset(struct atlas_seq *s);

/* Run T tokens `ids` at positions len..len+T-1 of `s`, appending them to
 * its cache. Writes logits to host memory: [T, vocab] when all_logits,
 * else [vocab] for the last token only. ATLAS_ERANGE when an id is out of
 * the vocabulary or the context would overflow (nothing is appended). */
int atlas_model_forward(struct atlas_model *m, struct atlas_seq *s,
			const int32_t *ids, int64_t T, float *logits,
			bool all_logits);

#endif
