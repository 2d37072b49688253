/* family.h - what distinguishes one dense decoder family from another.
 *
 * The generic decoder (decoder.c) reads these flags; each family is one
 * small file (llama.c, mistral.c, qwen2.c, qwen3.c) defining its struct,
 * and family.c lists them. Adding a dense family is one file and one
 * line in that list. */
#ifndef ATLAS_MODEL_FAMILY_H
#define ATLAS_MODEL_FAMILY_H

#include <stdbool.h>

#include "../io/config.h"

struct atlas_family {
	const char *name;                   /* "qwen3" */
	const char *const *model_types;     /* config model_type values, NULL-terminated */
	const char *const *architectures;   /* "architectures" values, NULL-terminated */
	bool qkv_bias;      /* q/k/v projections always carry a bias (Qwen2) */
	bool qk_norm;       /* per-head RMSNorm of q and k before RoPE (Qwen3) */
	bool use_window;    /* honour config sliding_window in attention (Mistral) */
	/* Family-specific refusals of a parsed config; 0 or ATLAS_E* with a
	 * message. May be NULL. */
	int (*check)(const struct atlas_config *c);
};

extern const struct atlas_family atlas_family_llama;
extern const struct atlas_family atlas_family_mistral;
extern const struct atlas_family atlas_family_qwen2;
extern const struct atlas_family atlas_family_qwen3;

/* The family for a config (by model_type, then by architectures), or
 * NULL with a message that lists the supported ones. */
const struct atlas_family *atlas_family_find(const struct atlas_config *c);

#endif
