/* qwen3.c - the dense Qwen3 family: Llama's layout with an RMSNorm over
 * each head of q and k (q_norm, k_norm, weight [head_dim]) before RoPE,
 * and head_dim independent of hidden_size / num_heads. */
#include "family.h"

#include "../core/error.h"

static const char *const types[] = {"qwen3", NULL};
/* Qwen3Model: the base model with no LM head, as Qwen3-Embedding ships */
static const char *const archs[] = {"Qwen3ForCausalLM", "Qwen3Model", NULL};

static int check(const struct atlas_config *c)
{
	if (c->sliding_window > 0)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "qwen3 with use_sliding_window true is not supported");
	return 0;
}

const struct atlas_family atlas_family_qwen3 = {
	.name = "qwen3",
	.model_types = types,
	.architectures = archs,
	.qk_norm = true,
	.check = check,
};
