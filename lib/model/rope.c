/* rope.c - RoPE inverse frequencies, including Llama 3 scaling.
 *
 * Llama 3 keeps high frequencies (wavelength under orig/high_freq_factor),
 * divides low ones (wavelength over orig/low_freq_factor) by factor, and
 * blends in between. transformers does this in float32; so do we, so the
 * rounding matches. */
#include "rope.h"

#include <math.h>

void atlas_rope_inv_freq(const struct atlas_config *c, float *inv_freq)
{
	/* partial rotary embedding: frequencies of the rotated dims only */
	int64_t hd = c->rotary_dim > 0 ? c->rotary_dim : c->head_dim;
	for (int64_t i = 0; i < hd / 2; i++) {
		float expo = (float)(2 * i) / (float)hd;
		float f = 1.0f / powf((float)c->rope_theta, expo);
		if (c->rope_type == ATLAS_ROPE_LINEAR) {
			f /= (float)c->rope_factor;
		} else if (c->rope_type == ATLAS_ROPE_LLAMA3) {
			float factor = (float)c->rope_factor;
			float lo = (float)c->rope_low_freq_factor;
			float hi = (float)c->rope_high_freq_factor;
			float orig = (float)c->rope_original_max_position;
			float wavelen = 2.0f * (float)M_PI / f;
			float scaled = wavelen > orig / lo ? f / factor : f;
			if (!(wavelen < orig / hi) && !(wavelen > orig / lo)) {
				float smooth = (orig / wavelen - lo) / (hi - lo);
				scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
			}
			f = scaled;
		}
		inv_freq[i] = f;
	}
}
