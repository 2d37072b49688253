/* qwen3_next.c - Qwen3-Next (Qwen3-Next-80B-A3B): a hybrid of Gated
 * DeltaNet layers and gated attention layers (q/k norm, partial rotary
 * embedding, a sigmoid output gate), zero-centred RMSNorm weights, and a
 * mixture-of-experts MLP with a shared expert (README-hybrid.md). Its
 * DeltaNet projections are fused and grouped by key head. */
#include "family.h"

static const char *const types[] = {"qwen3_next", NULL};
static const char *const archs[] = {"Qwen3NextForCausalLM", NULL};

static const struct atlas_moe_family moe = {
	.block = "mlp",
	.gate = "gate_proj",
	.up = "up_proj",
	.down = "down_proj",
	.shared_expert = true,
};

static const struct atlas_hybrid_family hybrid = {.grouped = true};

static int check(const struct atlas_config *c)
{
	return atlas_hybrid_check(c, "qwen3_next");
}

const struct atlas_family atlas_family_qwen3_next = {
	.name = "qwen3_next",
	.model_types = types,
	.architectures = archs,
	.qk_norm = true,
	.moe = &moe,
	.zero_norm = true,
	.gated_attn = true,
	.hybrid = &hybrid,
	.check = check,
};
