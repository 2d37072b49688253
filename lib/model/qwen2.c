/* qwen2.c - the Qwen2 / Qwen2.5 family: Llama's layout with biases on
 * the q, k and v projections (not on o). */
#include "family.h"

#include "../core/error.h"

static const char *const types[] = {"qwen2", NULL};
/* Qwen2Model: the base model (gte-Qwen2 embedding models) */
static const char *const archs[] = {"Qwen2ForCausalLM", "Qwen2Model", NULL};

static int check(const struct atlas_config *c)
{
	/* Qwen2 windows only the layers past max_window_layers; none of the
	 * released checkpoints turn it on. */
	if (c->sliding_window > 0)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "qwen2 with use_sliding_window true is not supported");
	return 0;
}

const struct atlas_family atlas_family_qwen2 = {
	.name = "qwen2",
	.model_types = types,
	.architectures = archs,
	.qkv_bias = true,
	.check = check,
};
