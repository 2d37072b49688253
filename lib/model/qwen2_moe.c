/* qwen2_moe.c - Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Qwen2's
 * attention (q/k/v biases) with a mixture-of-experts MLP plus a shared
 * expert that every token goes through, scaled by
 * sigmoid(x . shared_expert_gate). */
#include "family.h"

#include "../core/error.h"

static const char *const types[] = {"qwen2_moe", NULL};
static const char *const archs[] = {"Qwen2MoeForCausalLM", NULL};

static const struct atlas_moe_family moe = {
	.block = "mlp",
	.gate = "gate_proj",
	.up = "up_proj",
	.down = "down_proj",
	.shared_expert = true,
};

static int check(const struct atlas_config *c)
{
	if (c->sliding_window > 0)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "qwen2_moe with use_sliding_window true is not supported");
	if (c->num_experts <= 0)
		return atlas_error(ATLAS_EFORMAT, "qwen2_moe config without num_experts");
	if (c->shared_expert_intermediate_size <= 0)
		return atlas_error(ATLAS_EFORMAT,
				   "qwen2_moe config without shared_expert_intermediate_size");
	return 0;
}

const struct atlas_family atlas_family_qwen2_moe = {
	.name = "qwen2_moe",
	.model_types = types,
	.architectures = archs,
	.qkv_bias = true,
	.moe = &moe,
	.check = check,
};
