/* mixtral.c - Mixtral: Mistral's attention (sliding window when set)
 * with a mixture-of-experts MLP in every layer, experts w1 (gate), w3
 * (up) and w2 (down) under block_sparse_moe, the top-k weights always
 * renormalised. Each expert is intermediate_size wide. */
#include "family.h"

#include "../core/error.h"

static const char *const types[] = {"mixtral", NULL};
static const char *const archs[] = {"MixtralForCausalLM", NULL};

static const struct atlas_moe_family moe = {
	.block = "block_sparse_moe",
	.alt_block = "mlp",
	.gate = "w1",
	.up = "w3",
	.down = "w2",
	.always_norm = true,
};

static int check(const struct atlas_config *c)
{
	if (c->num_experts <= 0)
		return atlas_error(ATLAS_EFORMAT, "mixtral config without num_local_experts");
	return 0;
}

const struct atlas_family atlas_family_mixtral = {
	.name = "mixtral",
	.model_types = types,
	.architectures = archs,
	.use_window = true,
	.moe = &moe,
	.check = check,
};
