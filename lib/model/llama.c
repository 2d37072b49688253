/* llama.c - the Llama family (Llama 2/3.x and look-alikes): the plain
 * pre-norm decoder, optional attention/MLP biases from the config,
 * Llama 3 RoPE scaling handled by rope.c. */
#include "family.h"

static const char *const types[] = {"llama", NULL};
/* LlamaModel: the base model, as embedding models built on Llama ship */
static const char *const archs[] = {"LlamaForCausalLM", "LlamaModel", NULL};

const struct atlas_family atlas_family_llama = {
	.name = "llama",
	.model_types = types,
	.architectures = archs,
};
