/* convert.h - write a checkpoint in another float dtype as a new
 * Hugging Face directory, and summarize a checkpoint for atlas-load. */
#ifndef ATLAS_IO_CONVERT_H
#define ATLAS_IO_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/dtype.h"

/* Read the checkpoint in `src` and write `out` (created; it must not
 * exist or be empty): float tensors (F32, F16, BF16) converted to `dt`
 * (round to nearest even), others copied; shards of at most
 * `max_shard_bytes` (a bigger tensor gets a shard of its own) named as
 * transformers names them, with model.safetensors.index.json when there
 * is more than one; config.json with its dtype updated; tokenizer,
 * generation and chat-template files copied. Every file is written
 * under a temporary name and renamed. *n_shards gets the shard count.
 * Returns 0 or a negative code with a message naming the file. */
int atlas_convert(const char *src, const char *out, enum atlas_dtype dt,
		  int64_t max_shard_bytes, int *n_shards);

/* What atlas-load inspect shows about a checkpoint directory. */
struct atlas_ckpt_info {
	int64_t n_tensors;                     /* tensors in all shards */
	int64_t n_params;                      /* sum of element counts */
	int64_t n_bytes;                       /* sum of tensor bytes */
	int64_t params_by_dtype[ATLAS_DTYPE_COUNT]; /* elements per dtype */
	int64_t n_files;                       /* safetensors files */
	char tokenizer_type[32];               /* tokenizer.json model.type ("BPE"), or "" */
	bool chat_template;                    /* tokenizer_config.json or chat_template.jinja */
};

/* Fill *out for `dir`. Returns 0, or a negative code with a message
 * (unreadable checkpoint). A missing tokenizer leaves the fields empty. */
int atlas_ckpt_inspect(const char *dir, struct atlas_ckpt_info *out);

struct atlas_config;
struct json_object;
/* What inspect shows of a mixture-of-experts config: the lines
 * "experts:", "shared expert:" (when there is one) and "dense layers:"
 * (the layers mlp_only_layers or decoder_sparse_step leave dense, as
 * ranges, or "none"), malloc'd, caller frees; NULL for a dense config or
 * out of memory. */
char *atlas_ckpt_moe_text(const struct atlas_config *c);
/* The same as a new JSON object {"experts", "top_k", "expert_width",
 * "shared_expert_width" (null: none), "norm_topk_prob" (the config's;
 * Mixtral renormalises whatever it says), "dense_layers" [indices]}
 * owned by the caller, or NULL for a dense config. */
struct json_object *atlas_ckpt_moe_json(const struct atlas_config *c);

#endif
