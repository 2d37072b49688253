/* mistral.c - the Mistral family: Llama's layout plus an optional
 * sliding attention window (sliding_window in config.json). */
#include "family.h"

static const char *const types[] = {"mistral", NULL};
static const char *const archs[] = {"MistralForCausalLM", NULL};

const struct atlas_family atlas_family_mistral = {
	.name = "mistral",
	.model_types = types,
	.architectures = archs,
	.use_window = true,
};
