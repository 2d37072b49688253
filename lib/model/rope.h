/* rope.h - rotary embedding frequencies for a config. */
#ifndef ATLAS_MODEL_ROPE_H
#define ATLAS_MODEL_ROPE_H

#include "../io/config.h"

/* Fill inv_freq[hd/2] with the per-pair frequencies, scaling folded in
 * (linear: divided by factor; llama3: frequency-dependent), as
 * transformers computes them. */
void atlas_rope_inv_freq(const struct atlas_config *c, float *inv_freq);

#endif
