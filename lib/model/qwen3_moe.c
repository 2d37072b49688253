/* qwen3_moe.c - Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's
 * attention (q/k norm, free head_dim) with a mixture-of-experts MLP in
 * the layers the config makes sparse (decoder_sparse_step,
 * mlp_only_layers); the others keep Qwen3's dense MLP. Routing: softmax
 * over all experts, top k, renormalised when norm_topk_prob. */
#include "family.h"

#include "../core/error.h"

static const char *const types[] = {"qwen3_moe", NULL};
static const char *const archs[] = {"Qwen3MoeForCausalLM", NULL};

static const struct atlas_moe_family moe = {
	.block = "mlp",
	.gate = "gate_proj",
	.up = "up_proj",
	.down = "down_proj",
};

static int check(const struct atlas_config *c)
{
	if (c->sliding_window > 0)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "qwen3_moe with use_sliding_window true is not supported");
	if (c->num_experts <= 0)
		return atlas_error(ATLAS_EFORMAT, "qwen3_moe config without num_experts");
	return 0;
}

const struct atlas_family atlas_family_qwen3_moe = {
	.name = "qwen3_moe",
	.model_types = types,
	.architectures = archs,
	.qk_norm = true,
	.moe = &moe,
	.check = check,
};
