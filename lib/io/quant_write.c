/* quant_write.c - round-to-nearest quantizers for atlas-load convert
 * --quant (see quant_write.h): FP8 E4M3 with block scales, symmetric
 * int4 with group scales, NVFP4 with a global and per-16 E4M3 scales,
 * each in the exact layout quant_fp.c and quant_int.c read back. */
#include "quant_write.h"

#include <math.h>
#include <string.h>

#include "../core/dtype.h"
#include "../core/error.h"

static const char *const scheme_names[] = {"none", "fp8-block", "fp8-channel", "w4a16", "nvfp4"};

int atlas_quant_scheme_parse(const char *s, enum atlas_quant_scheme *out)
{
	for (int i = 1; i < (int)(sizeof(scheme_names) / sizeof(*scheme_names)); i++)
		if (!strcmp(s, scheme_names[i])) {
			*out = (enum atlas_quant_scheme)i;
			return 0;
		}
	return atlas_error(ATLAS_EINVAL,
			   "unknown quantization '%s' (expected fp8-block, fp8-channel, w4a16 or "
			   "nvfp4)",
			   s);
}

const char *atlas_quant_scheme_name(enum atlas_quant_scheme s)
{
	return s >= 0 && s <= ATLAS_QSCHEME_NVFP4 ? scheme_names[s] : "none";
}

/* Positive finite x as the smallest BF16 >= x (its bits). */
static uint16_t bf16_up(float x)
{
	uint16_t b = atlas_f32_to_bf16(x);
	if (atlas_bf16_to_f32(b) < x)
		b++;
	return b;
}

void atlas_quant_write_fp8(const float *w, int64_t out, int64_t in, int64_t bo, int64_t bi,
			   uint8_t *q, uint16_t *scale)
{
	int64_t nbr = (out + bo - 1) / bo, nbc = (in + bi - 1) / bi;
	for (int64_t br = 0; br < nbr; br++)
		for (int64_t bc = 0; bc < nbc; bc++) {
			int64_t r0 = br * bo, r1 = r0 + bo < out ? r0 + bo : out;
			int64_t c0 = bc * bi, c1 = c0 + bi < in ? c0 + bi : in;
			float amax = 0.0f;
			for (int64_t r = r0; r < r1; r++)
				for (int64_t c = c0; c < c1; c++)
					amax = fmaxf(amax, fabsf(w[r * in + c]));
			uint16_t sb = amax > 0.0f ? bf16_up(amax / 448.0f) : 0x3F80; /* 1.0 */
			float s = atlas_bf16_to_f32(sb);
			scale[br * nbc + bc] = sb;
			for (int64_t r = r0; r < r1; r++)
				for (int64_t c = c0; c < c1; c++)
					q[r * in + c] = atlas_f32_to_f8e4m3(w[r * in + c] / s);
		}
}

int atlas_quant_write_int4(const float *w, int64_t out, int64_t in, int64_t g, int32_t *packed,
			   uint16_t *scale)
{
	if (g <= 0 || g % 8 || in % g)
		return atlas_error(ATLAS_EINVAL, "int4: group %lld does not fit in %lld", (long long)g,
				   (long long)in);
	int64_t ng = in / g;
	for (int64_t r = 0; r < out; r++)
		for (int64_t k = 0; k < ng; k++) {
			const float *x = w + r * in + k * g;
			float amax = 0.0f;
			for (int64_t j = 0; j < g; j++)
				amax = fmaxf(amax, fabsf(x[j]));
			uint16_t sb = amax > 0.0f ? bf16_up(amax / 7.0f) : 0x3F80;
			float s = atlas_bf16_to_f32(sb);
			scale[r * ng + k] = sb;
			for (int64_t j = 0; j < g; j += 8) {
				uint32_t word = 0;
				for (int b = 0; b < 8; b++) {
					float v = rintf(x[j + b] / s);
					v = v < -8.0f ? -8.0f : v > 7.0f ? 7.0f : v;
					word |= (uint32_t)((int)v + 8) << (4 * b);
				}
				int32_t sw;
				memcpy(&sw, &word, 4);
				packed[(r * in + k * g + j) / 8] = sw;
			}
		}
	return 0;
}

/* |x| (in units of the scale) as the nearest E2M1 magnitude code 0..7,
 * ties to the even code (0, 1.0, 2.0, 4.0), above 6 saturating. */
static int e2m1_code(float a)
{
	if (a <= 0.25f)
		return 0;
	if (a < 0.75f)
		return 1;
	if (a <= 1.25f)
		return 2;
	if (a < 1.75f)
		return 3;
	if (a <= 2.5f)
		return 4;
	if (a < 3.5f)
		return 5;
	if (a <= 5.0f)
		return 6;
	return 7;
}

int atlas_quant_write_nvfp4(const float *w, int64_t out, int64_t in, uint8_t *packed,
			    uint8_t *scale, float *global_scale)
{
	if (in % 16)
		return atlas_error(ATLAS_EINVAL, "nvfp4: in %lld is not a multiple of 16",
				   (long long)in);
	float amax = 0.0f;
	for (int64_t i = 0; i < out * in; i++)
		amax = fmaxf(amax, fabsf(w[i]));
	float gs = amax > 0.0f ? 448.0f * 6.0f / amax : 1.0f;
	*global_scale = gs;
	int64_t ng = in / 16;
	for (int64_t r = 0; r < out; r++)
		for (int64_t k = 0; k < ng; k++) {
			const float *x = w + r * in + k * 16;
			float ga = 0.0f;
			for (int j = 0; j < 16; j++)
				ga = fmaxf(ga, fabsf(x[j]));
			uint8_t sc = atlas_f32_to_f8e4m3(ga / 6.0f * gs);
			float s = atlas_f8e4m3_to_f32(sc) / gs; /* the loader's scale */
			scale[r * ng + k] = sc;
			for (int j = 0; j < 16; j += 2) {
				int c[2];
				for (int b = 0; b < 2; b++) {
					float v = x[j + b];
					c[b] = s > 0.0f ? e2m1_code(fabsf(v) / s) : 0;
					if (c[b] && v < 0.0f)
						c[b] |= 8;
				}
				packed[r * (in / 2) + k * 8 + j / 2] = (uint8_t)(c[0] | (c[1] << 4));
			}
		}
	return 0;
}
