/* convert.h - write a checkpoint in another float dtype as a new
 * Hugging Face directory, and summarize a checkpoint for atlas-load. */
#ifndef ATLAS_IO_CONVERT_H
#define ATLAS_IO_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "quant_write.h"

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

/* atlas_convert, and with `scheme` not NONE the linear weights of the
 * decoder layers (2-D "..._proj" and Mixtral's w1/w2/w3 under
 * "layers.") quantized round-to-nearest (quant_write.h) into the Hub
 * layout of the scheme, each weight becoming 2-3 tensors:
 *   fp8-block    quant_method "fp8", weight_block_size [128, 128]:
 *                X.weight F8_E4M3 [out, in], X.weight_scale_inv BF16
 *                [ceil(out/128), ceil(in/128)] (as Qwen3-FP8)
 *   fp8-channel  compressed-tensors float-quantized, strategy channel:
 *                X.weight F8_E4M3, X.weight_scale BF16 [out, 1]
 *   w4a16        compressed-tensors pack-quantized int4, symmetric,
 *                group 128: X.weight_packed I32 [out, in/8] (values +8),
 *                X.weight_scale BF16 [out, in/128], X.weight_shape I64 [2]
 *   nvfp4        compressed-tensors nvfp4-pack-quantized:
 *                X.weight_packed U8 [out, in/2], X.weight_scale F8_E4M3
 *                [out, in/16], X.weight_global_scale F32 [1] (divides)
 * Everything else (embeddings, norms, lm_head, routers, biases, and a
 * linear weight whose `in` is not a multiple of the group: 128 for
 * w4a16, 16 for nvfp4) is converted to dt as atlas_convert does; the
 * modules of the layers left so, and lm_head, are listed in the config's
 * ignore (modules_to_not_convert for fp8-block). config.json gets the
 * quantization_config block. A source that is already quantized is
 * refused with its scheme's name (ATLAS_EUNSUPPORTED). */
int atlas_convert_quant(const char *src, const char *out, enum atlas_dtype dt,
			enum atlas_quant_scheme scheme, int64_t max_shard_bytes, int *n_shards);

/* Progress of the converts that follow: fn(arg, done, total) after each
 * output tensor is written, in bytes of output (NULL: none). For a
 * terminal display (atlas-load); one convert at a time per process. */
typedef void (*atlas_convert_progress_fn)(void *arg, int64_t done, int64_t total);
void atlas_convert_set_progress(atlas_convert_progress_fn fn, void *arg);

/* What atlas-load inspect shows about a checkpoint directory. */
struct atlas_ckpt_info {
	int64_t n_tensors;                     /* tensors in all shards */
	int64_t n_params;                      /* sum of element counts */
	int64_t n_bytes;                       /* sum of tensor bytes */
	int64_t params_by_dtype[ATLAS_DTYPE_COUNT]; /* elements per dtype */
	int64_t n_files;                       /* safetensors files */
	int64_t mtp_tensors, mtp_params;       /* of a multi-token prediction
						* head (mtp.*), 0 when none */
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
/* What inspect shows of a hybrid config's linear-attention layers: the
 * line "linear attn:" (which layers, as ranges, and the Gated DeltaNet's
 * heads and sizes), malloc'd, caller frees; NULL without such layers. */
char *atlas_ckpt_hybrid_text(const struct atlas_config *c);
/* The same as a new JSON object {"layers" [indices], "key_heads",
 * "value_heads", "key_head_dim", "value_head_dim", "conv_width"}, or
 * NULL. */
struct json_object *atlas_ckpt_hybrid_json(const struct atlas_config *c);

#endif
