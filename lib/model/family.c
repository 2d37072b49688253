/* family.c - the table of supported decoder families. */
#include "family.h"

#include <string.h>

#include "../core/error.h"
#include "model.h"

static const struct atlas_family *const families[] = {
	&atlas_family_llama,
	&atlas_family_mistral,
	&atlas_family_qwen2,
	&atlas_family_qwen3,
	&atlas_family_qwen3_moe,
	&atlas_family_qwen2_moe,
	&atlas_family_mixtral,
	&atlas_family_qwen3_next,
	&atlas_family_qwen3_5_moe,
};
#define NFAM (sizeof(families) / sizeof(families[0]))

static int in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (!strcmp(*list, s))
			return 1;
	return 0;
}

const char *atlas_model_supported(void)
{
	return "llama, mistral, qwen2, qwen3, qwen3_moe, qwen2_moe, mixtral, qwen3_next, "
	       "qwen3_5_moe_text";
}

const struct atlas_family *atlas_family_find(const struct atlas_config *c)
{
	for (size_t i = 0; i < NFAM; i++)
		if (in_list(families[i]->model_types, c->model_type))
			return families[i];
	for (size_t i = 0; i < NFAM; i++)
		if (c->architecture[0] && in_list(families[i]->architectures, c->architecture))
			return families[i];
	atlas_error(ATLAS_EUNSUPPORTED,
		    "unsupported architecture '%s' (model_type '%s'); supported: %s",
		    c->architecture[0] ? c->architecture : c->model_type,
		    c->model_type, atlas_model_supported());
	return NULL;
}
