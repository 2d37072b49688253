/* qwen3_5_moe.c - the text model of Qwen3.5 MoE (model_type
 * qwen3_5_moe_text): Qwen3-Next's hybrid layers, norms and MoE, with the
 * DeltaNet's projections stored apart and plain (in_proj_qkv, in_proj_z,
 * in_proj_b, in_proj_a) instead of fused and grouped by key head
 * (README-hybrid.md). */
#include "family.h"

static const char *const types[] = {"qwen3_5_moe_text", NULL};
static const char *const archs[] = {"Qwen3_5MoeForCausalLM", NULL};

static const struct atlas_moe_family moe = {
	.block = "mlp",
	.gate = "gate_proj",
	.up = "up_proj",
	.down = "down_proj",
	.shared_expert = true,
};

static const struct atlas_hybrid_family hybrid = {.grouped = false};

static int check(const struct atlas_config *c)
{
	return atlas_hybrid_check(c, "qwen3_5_moe_text");
}

const struct atlas_family atlas_family_qwen3_5_moe = {
	.name = "qwen3_5_moe_text",
	.model_types = types,
	.architectures = archs,
	.qk_norm = true,
	.moe = &moe,
	.zero_norm = true,
	.gated_attn = true,
	.hybrid = &hybrid,
	.check = check,
};
