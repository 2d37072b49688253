/* config.h - the parts of config.json and generation_config.json that
 * Atlas uses, parsed with json-c from either shape seen in the wild:
 * transformers 4.x (`rope_theta`, `rope_scaling`, `torch_dtype`) and 5.x
 * (`rope_parameters`, `dtype`). */
#ifndef ATLAS_IO_CONFIG_H
#define ATLAS_IO_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/dtype.h"

#define ATLAS_MAX_EOS 8
/* layers that mlp_only_layers can name (bits of atlas_config.mlp_only) */
#define ATLAS_MAX_MLP_ONLY 256
/* the most experts per layer and per token a config may ask for */
#define ATLAS_MAX_EXPERTS 65536
#define ATLAS_MAX_TOP_K 64

enum atlas_rope_type {
	ATLAS_ROPE_DEFAULT = 0, /* plain RoPE */
	ATLAS_ROPE_LINEAR,      /* positions divided by factor */
	ATLAS_ROPE_LLAMA3,      /* Llama 3.x frequency-dependent scaling */
};

struct atlas_config {
	char model_type[64];        /* config "model_type", e.g. "qwen3" */
	char composite[64];         /* a composite checkpoint's top-level model_type
				     * ("qwen3_5_moe"), whose text_config gave the
				     * rest; "" otherwise */
	char architecture[128];     /* first of "architectures", or "" */
	int64_t vocab_size;         /* rows of the embedding */
	int64_t hidden_size;        /* model width D */
	int64_t intermediate_size;  /* MLP width F */
	int64_t num_layers;         /* "num_hidden_layers" */
	int64_t num_heads;          /* "num_attention_heads" */
	int64_t num_kv_heads;       /* "num_key_value_heads" (default num_heads) */
	int64_t head_dim;           /* "head_dim" (default hidden/heads) */
	int64_t max_position;       /* "max_position_embeddings" */
	double rms_eps;             /* "rms_norm_eps" */
	double rope_theta;          /* base; 4.x top-level or 5.x rope_parameters */
	enum atlas_rope_type rope_type; /* from rope_scaling / rope_parameters */
	double rope_factor;         /* scaling factor (linear, llama3) */
	double rope_low_freq_factor;  /* llama3 */
	double rope_high_freq_factor; /* llama3 */
	int64_t rope_original_max_position; /* llama3 */
	bool tie_embeddings;        /* "tie_word_embeddings" (default false) */
	bool attention_bias;        /* q/k/v (and o) biases, "attention_bias" */
	bool mlp_bias;              /* "mlp_bias" */
	char hidden_act[32];        /* "hidden_act"/"hidden_activation" */
	enum atlas_dtype dtype;     /* "dtype" or "torch_dtype" (default F32) */
	int64_t sliding_window;     /* 0 when absent/null/disabled */
	int32_t bos_id;             /* "bos_token_id", -1 if absent */
	int32_t eos_ids[ATLAS_MAX_EOS]; /* "eos_token_id" (int or list) */
	int n_eos;                  /* entries in eos_ids */
	/* mixture of experts (lib/model/README-moe.md); num_experts 0: dense */
	int64_t num_experts;        /* "num_experts" or "num_local_experts" */
	int64_t experts_per_tok;    /* "num_experts_per_tok" (top k) */
	int64_t moe_intermediate_size; /* "moe_intermediate_size": each expert's
				     * MLP width (default intermediate_size, as
				     * Mixtral sizes its experts) */
	bool norm_topk_prob;        /* renormalise the top-k weights to sum 1 */
	int64_t decoder_sparse_step; /* layer l is MoE when (l+1) % step == 0
				     * (default 1) and l is not mlp_only */
	uint64_t mlp_only[ATLAS_MAX_MLP_ONLY / 64]; /* "mlp_only_layers" as bits */
	int64_t shared_expert_intermediate_size; /* Qwen2-MoE's shared expert, 0: none */
	/* rotary embedding on the first rotary_dim dims of each head only:
	 * int(head_dim * "partial_rotary_factor") (top level or in
	 * rope_parameters); head_dim when absent */
	int64_t rotary_dim;
	/* hybrid linear-attention models (lib/model/README-hybrid.md): the
	 * layers whose "layer_types" entry is "linear_attention" (else every
	 * layer l with (l + 1) % "full_attention_interval" != 0, when the
	 * interval is given) run a Gated DeltaNet instead of attention;
	 * n_linear 0: none */
	uint64_t linear[ATLAS_MAX_MLP_ONLY / 64]; /* those layers as bits */
	int64_t n_linear;           /* how many */
	int64_t lin_k_heads;        /* "linear_num_key_heads" */
	int64_t lin_v_heads;        /* "linear_num_value_heads" (a multiple) */
	int64_t lin_k_dim;          /* "linear_key_head_dim" */
	int64_t lin_v_dim;          /* "linear_value_head_dim" */
	int64_t lin_conv;           /* "linear_conv_kernel_dim" (default 4) */
	/* layers of the multi-token prediction head a checkpoint may carry
	 * (mtp.*, --speculative mtp): "num_nextn_predict_layers" (Qwen3-Next)
	 * or "mtp_num_hidden_layers" (Qwen3.5); 0 when absent */
	int64_t mtp_layers;
};

/* Sampling defaults as transformers' GenerationConfig defines them. */
struct atlas_gen_config {
	bool do_sample;             /* false: greedy regardless of temperature */
	double temperature;         /* default 1.0 */
	int64_t top_k;              /* default 50 (0 disables) */
	double top_p;               /* default 1.0 */
	double min_p;               /* default 0 (disabled) */
	double repetition_penalty;  /* default 1.0 */
	int64_t max_new_tokens;     /* -1 if absent */
	int32_t bos_id;             /* -1 if absent */
	int32_t eos_ids[ATLAS_MAX_EOS]; /* eos_token_id (int or list) */
	int n_eos;                  /* entries in eos_ids */
};

/* How an embedding model turns the final hidden states of its tokens into
 * one vector: sentence-transformers' Pooling module (modules.json and the
 * module's config.json, e.g. 1_Pooling/config.json). */
enum atlas_pooling {
	ATLAS_POOL_NONE = 0, /* no pooling declared: not an embedding model */
	ATLAS_POOL_LAST,     /* the last token's state (pooling_mode_lasttoken) */
	ATLAS_POOL_MEAN,     /* the mean over every token (pooling_mode_mean_tokens) */
	ATLAS_POOL_CLS,      /* the first token's state (pooling_mode_cls_token) */
};

/* The sentence-transformers files of a model directory. */
struct atlas_embed_config {
	enum atlas_pooling pooling; /* ATLAS_POOL_NONE: not an embedding model */
	bool normalize;             /* a Normalize module follows: L2-normalize */
	int64_t dim;                /* the Pooling config's word_embedding_dimension,
				     * 0 when absent */
};

/* Read `dir`/modules.json and the config of its Pooling module. No
 * modules.json, or one without a Pooling module: pooling NONE and 0.
 * What Atlas cannot compute is refused by name (ATLAS_EUNSUPPORTED): a
 * pooling mode other than last token, mean or cls (max, weightedmean,
 * mean_sqrt_len), several modes at once, include_prompt false, and
 * modules other than Transformer, Pooling and Normalize (a Dense
 * projection). Malformed files: ATLAS_EFORMAT naming the file. */
int atlas_embed_config_load(const char *dir, struct atlas_embed_config *out);

/* "last-token", "mean", "cls" or "none"; static string. */
const char *atlas_pooling_name(enum atlas_pooling p);

/* Parse `dir`/config.json into *out. Returns 0, or a negative ATLAS_E*
 * with a message naming the file and the field (missing required field,
 * wrong type, value out of range). MoE fields: num_experts_per_tok
 * greater than num_experts, or an mlp_only_layers entry out of range, is
 * ATLAS_EFORMAT; a routing variant Atlas does not compute (DeepSeek's
 * topk_method, n_group / topk_group, scoring_func other than softmax,
 * n_shared_experts, routed_scaling_factor, first_k_dense_replace) is
 * ATLAS_EUNSUPPORTED naming the field. Hybrid fields: a layer_types
 * entry other than "linear_attention" or "full_attention", a list
 * whose length is not num_hidden_layers, or linear-attention layers
 * without their head counts and sizes is ATLAS_EFORMAT. A composite
 * vision-language config Atlas knows (qwen3_5_moe) is read from its
 * text_config (the language model), with the top level's architecture
 * and tie_word_embeddings; `composite` names it. */
int atlas_config_load(const char *dir, struct atlas_config *out);

/* Whether layer l's MLP is a mixture of experts: the model has experts,
 * l is not in mlp_only_layers and (l + 1) is a multiple of
 * decoder_sparse_step (transformers' Qwen2/Qwen3-MoE rule; Mixtral
 * configs leave both at their defaults, so every layer is MoE). */
bool atlas_config_layer_is_moe(const struct atlas_config *c, int64_t l);

/* Whether layer l of a hybrid model is a linear-attention (Gated
 * DeltaNet) layer rather than a full-attention one. */
bool atlas_config_layer_is_linear(const struct atlas_config *c, int64_t l);

/* Same, from a JSON string (`name` is used in messages). */
int atlas_config_parse(const char *json, const char *name, struct atlas_config *out);

/* Parse `dir`/generation_config.json; a missing file gives the defaults
 * and returns 0. Malformed JSON is an error. */
int atlas_gen_config_load(const char *dir, struct atlas_gen_config *out);

/* Fill *out with transformers' defaults. */
void atlas_gen_config_defaults(struct atlas_gen_config *out);

#endif
