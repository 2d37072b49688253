/* kvq.c - the KV cache formats' host reference (layouts in kvq.h). */
#include "kvq.h"

#include <math.h>
#include <string.h>

#include "../core/dtype.h"
#include "../core/error.h"

/* The 16-level Lloyd-Max quantizer of N(0, 1) (Max, 1960): levels and
 * the midpoints between them. The CUDA copy is in kvq.cuh. */
const float atlas_kv_q4_level[16] = {
    -2.7326f, -2.0690f, -1.6181f, -1.2562f, -0.9424f, -0.6568f, -0.3881f, -0.1284f,
    0.1284f,  0.3881f,  0.6568f,  0.9424f,  1.2562f,  1.6181f,  2.0690f,  2.7326f,
};
const float atlas_kv_q4_thresh[15] = {
    -2.4008f, -1.8435f, -1.4371f, -1.0993f, -0.7996f, -0.5224f, -0.2582f, 0.0f,
    0.2582f,  0.5224f,  0.7996f,  1.0993f,  1.4371f,  1.8435f,  2.4008f,
};

static const char *const names[] = {
    [ATLAS_KV_AUTO] = "auto", [ATLAS_KV_BF16] = "bf16", [ATLAS_KV_FP8] = "fp8",
    [ATLAS_KV_Q4] = "q4",
};

int atlas_kv_dtype_parse(const char *s, enum atlas_kv_dtype *out)
{
	for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
		if (s && !strcmp(s, names[i])) {
			*out = (enum atlas_kv_dtype)i;
			return 0;
		}
	return -1;
}

const char *atlas_kv_dtype_name(enum atlas_kv_dtype k)
{
	return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

int atlas_kv_check(enum atlas_kv_dtype k, int64_t hd)
{
	if (k == ATLAS_KV_FP8 && (hd <= 0 || hd % 16))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "--kv-dtype fp8 needs a head_dim that is a multiple of 16, not %lld",
				   (long long)hd);
	if (k == ATLAS_KV_Q4 && (hd < 64 || hd > 256 || (hd & (hd - 1))))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "--kv-dtype q4 needs a head_dim that is a power of two from 64 to "
				   "256 (the Hadamard rotation), not %lld",
				   (long long)hd);
	return 0;
}

int64_t atlas_kv_scale_bytes(enum atlas_kv_dtype k, int64_t Hkv, int64_t hd)
{
	int64_t b = k == ATLAS_KV_FP8 ? Hkv * 4 : k == ATLAS_KV_Q4 ? Hkv * hd / ATLAS_KV_Q4_BLOCK * 2 : 0;
	return (b + 15) / 16 * 16;
}

int64_t atlas_kv_row_bytes(enum atlas_kv_dtype k, size_t act_size, int64_t Hkv, int64_t hd)
{
	switch (k) {
	case ATLAS_KV_BF16: return Hkv * hd * 2;
	case ATLAS_KV_FP8: return atlas_kv_scale_bytes(k, Hkv, hd) + Hkv * hd;
	case ATLAS_KV_Q4: return atlas_kv_scale_bytes(k, Hkv, hd) + Hkv * hd / 2;
	default: return Hkv * hd * (int64_t)act_size;
	}
}

void atlas_kv_rotate(float *x, int64_t n)
{
	for (int64_t h = 1; h < n; h *= 2)
		for (int64_t i = 0; i < n; i++)
			if (!(i & h)) {
				const float a = x[i], b = x[i + h];
				x[i] = a + b;
				x[i + h] = a - b;
			}
	const float r = (float)(1.0 / sqrt((double)n));
	for (int64_t i = 0; i < n; i++)
		x[i] *= r;
}

/* One head of an fp8 row: its scale and codes. */
static void fp8_head(const float *x, int64_t hd, float *scale, uint8_t *q)
{
	float amax = 0.0f;
	for (int64_t i = 0; i < hd; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	float s = 1.0f, inv = 1.0f;
	if (amax > 0.0f && isfinite(amax)) {
		s = amax / ATLAS_KV_FP8_MAX;
		inv = ATLAS_KV_FP8_MAX / amax;
	}
	*scale = s;
	for (int64_t i = 0; i < hd; i++)
		q[i] = atlas_f32_to_f8e4m3(x[i] * inv);
}

/* One block of 32 rotated values: its F16 scale and 16 bytes of codes. */
static void q4_block(const float *y, uint16_t *scale, uint8_t *q)
{
	float ss = 0.0f;
	for (int j = 0; j < ATLAS_KV_Q4_BLOCK; j++)
		ss = fmaf(y[j], y[j], ss);
	float s = sqrtf(ss * (1.0f / ATLAS_KV_Q4_BLOCK));
	if (!(s <= 65504.0f))
		s = isnan(s) ? 0.0f : 65504.0f;
	const uint16_t h = atlas_f32_to_f16(s);
	const float sd = atlas_f16_to_f32(h);
	const float inv = sd > 0.0f ? 1.0f / sd : 0.0f;
	*scale = h;
	for (int j = 0; j < ATLAS_KV_Q4_BLOCK; j += 2) {
		uint8_t c[2];
		for (int u = 0; u < 2; u++) {
			const float v = y[j + u] * inv;
			int n = 0;
			for (int i = 0; i < 15; i++)
				n += atlas_kv_q4_thresh[i] < v;
			c[u] = (uint8_t)n;
		}
		q[j / 2] = (uint8_t)(c[0] | c[1] << 4);
	}
}

void atlas_kv_quant_row(enum atlas_kv_dtype k, const float *x, int64_t Hkv, int64_t hd,
			void *row)
{
	uint8_t *data = (uint8_t *)row + atlas_kv_scale_bytes(k, Hkv, hd);
	if (k == ATLAS_KV_FP8) {
		float *sc = row;
		for (int64_t h = 0; h < Hkv; h++)
			fp8_head(x + h * hd, hd, &sc[h], data + h * hd);
		return;
	}
	if (k != ATLAS_KV_Q4)
		return;
	uint16_t *sc = row;
	float y[256];
	const int64_t nb = hd / ATLAS_KV_Q4_BLOCK;
	for (int64_t h = 0; h < Hkv; h++) {
		memcpy(y, x + h * hd, (size_t)hd * sizeof(float));
		atlas_kv_rotate(y, hd);
		for (int64_t b = 0; b < nb; b++)
			q4_block(y + b * ATLAS_KV_Q4_BLOCK, &sc[h * nb + b],
				 data + h * hd / 2 + b * ATLAS_KV_Q4_BLOCK / 2);
	}
}

void atlas_kv_dequant_head(enum atlas_kv_dtype k, const void *row, int64_t Hkv, int64_t hd,
			   int64_t h, float *out)
{
	const uint8_t *data = (const uint8_t *)row + atlas_kv_scale_bytes(k, Hkv, hd);
	if (k == ATLAS_KV_FP8) {
		const float s = ((const float *)row)[h];
		for (int64_t i = 0; i < hd; i++)
			out[i] = atlas_f8e4m3_to_f32(data[h * hd + i]) * s;
		return;
	}
	const int64_t nb = hd / ATLAS_KV_Q4_BLOCK;
	const uint16_t *sc = (const uint16_t *)row + h * nb;
	const uint8_t *q = data + h * hd / 2;
	for (int64_t i = 0; i < hd; i++) {
		const float s = atlas_f16_to_f32(sc[i / ATLAS_KV_Q4_BLOCK]);
		out[i] = atlas_kv_q4_level[(q[i / 2] >> (4 * (i & 1))) & 15] * s;
	}
}
