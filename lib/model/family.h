/* family.h - what distinguishes one decoder family from another.
 *
 * The generic decoder (decoder.c) reads these flags; each family is one
 * small file (llama.c, mistral.c, qwen2.c, qwen3.c, and the mixture-of-
 * experts ones qwen3_moe.c, qwen2_moe.c, mixtral.c, and the hybrid
 * linear-attention ones qwen3_next.c, qwen3_5_moe.c) defining its struct,
 * and family.c lists them. Adding a family is one file and one line in
 * that list; a new MoE variant is described in README-moe.md. */
#ifndef ATLAS_MODEL_FAMILY_H
#define ATLAS_MODEL_FAMILY_H

#include <stdbool.h>

#include "../io/config.h"

/* Where a family keeps the tensors of a mixture-of-experts MLP and how it
 * routes. The decoder binds the names (per expert, as the Hub ships them,
 * or the 3-D fused tensors transformers 5 may write) and hands the backend
 * only shapes and pointers (atlas_moe_desc): no backend knows families.
 * Which layers are MoE is the config's business
 * (atlas_config_layer_is_moe). */
struct atlas_moe_family {
	const char *block;      /* module of the MoE MLP under layers.L: "mlp" */
	const char *alt_block;  /* another spelling accepted, or NULL (Mixtral's
				 * "block_sparse_moe" on the Hub, "mlp" as
				 * transformers 5 renames it) */
	const char *gate, *up, *down; /* each expert's projections under
				 * experts.E: "gate_proj", "up_proj",
				 * "down_proj" (Mixtral: "w1", "w3", "w2") */
	bool always_norm;       /* renormalise the top-k weights whatever
				 * norm_topk_prob says (Mixtral) */
	bool shared_expert;     /* a shared expert (shared_expert.{gate,up,
				 * down}_proj, width shared_expert_intermediate_
				 * size) added to every token, scaled by
				 * sigmoid(x . shared_expert_gate) (Qwen2-MoE) */
};

/* How a hybrid family (lib/model/README-hybrid.md) stores its Gated
 * DeltaNet projections; which layers are linear attention is the
 * config's business (atlas_config_layer_is_linear). hybrid.c binds both
 * layouts into one: qkvz rows q, k, v, z (each head after head) and ba
 * rows b, a. */
struct atlas_hybrid_family {
	bool grouped;           /* in_proj_qkvz and in_proj_ba, grouped by key
				 * head: per key head dk of q, dk of k, then
				 * Hv/Hk heads each of v and z (b and a the
				 * same) (Qwen3-Next); else in_proj_qkv,
				 * in_proj_z, in_proj_b and in_proj_a, plain
				 * (Qwen3.5) */
};

struct atlas_family {
	const char *name;                   /* "qwen3" */
	const char *const *model_types;     /* config model_type values, NULL-terminated */
	const char *const *architectures;   /* "architectures" values, NULL-terminated */
	bool qkv_bias;      /* q/k/v projections always carry a bias (Qwen2) */
	bool qk_norm;       /* per-head RMSNorm of q and k before RoPE (Qwen3) */
	bool use_window;    /* honour config sliding_window in attention (Mistral) */
	const struct atlas_moe_family *moe; /* the MoE MLP of the layers the config
				 * makes sparse; NULL: a dense family */
	bool zero_norm;     /* RMSNorm weights are stored zero-centred: the
			     * scale is 1 + w (Qwen3-Next's layer, final and
			     * q/k norms) */
	bool gated_attn;    /* q_proj is twice as wide: per head the query,
			     * then a gate; attention's output is multiplied
			     * by sigmoid(gate) before o_proj (Qwen3-Next) */
	const struct atlas_hybrid_family *hybrid; /* the linear-attention
			     * layers' layout; NULL: attention only */
	/* Family-specific refusals of a parsed config; 0 or ATLAS_E* with a
	 * message. May be NULL. */
	int (*check)(const struct atlas_config *c);
};

extern const struct atlas_family atlas_family_llama;
extern const struct atlas_family atlas_family_mistral;
extern const struct atlas_family atlas_family_qwen2;
extern const struct atlas_family atlas_family_qwen3;
extern const struct atlas_family atlas_family_qwen3_moe;
extern const struct atlas_family atlas_family_qwen2_moe;
extern const struct atlas_family atlas_family_mixtral;
extern const struct atlas_family atlas_family_qwen3_next;
extern const struct atlas_family atlas_family_qwen3_5_moe;

/* hybrid.c: the refusals the hybrid families share (a sliding window; no
 * linear-attention layers), naming `family`. */
int atlas_hybrid_check(const struct atlas_config *c, const char *family);

/* The family for a config (by model_type, then by architectures), or
 * NULL with a message that lists the supported ones. */
const struct atlas_family *atlas_family_find(const struct atlas_config *c);

#endif
