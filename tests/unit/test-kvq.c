/* test-kvq.c - the KV cache formats (lib/backend/kvq.h): names, row
 * sizes and the head_dim rules; the fp8 and q4 codes against values
 * worked out by hand (E4M3 saturation, nibble order, scale placement);
 * the Hadamard rotation's orthonormality; the error of each format on
 * Gaussian rows; and the CPU backend's attention over a cache in each
 * format against a double-precision reference over the cache's
 * dequantized rows (so the q4 path's rotation of q and of the output is
 * checked, not only the codes). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/backend/cpu/cpu.h"
#include "../../lib/backend/kvq.h"
#include "../../lib/core/dtype.h"
#include "../../lib/core/error.h"
#include "harness.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double unif(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

/* Standard normal (Box-Muller). */
static float gauss(void)
{
	double u = unif(), v = unif();
	return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

static void test_names_and_sizes(void)
{
	enum atlas_kv_dtype k = ATLAS_KV_AUTO;
	CHECK_EQ_INT(atlas_kv_dtype_parse("fp8", &k), 0);
	CHECK_EQ_INT(k, ATLAS_KV_FP8);
	CHECK_EQ_INT(atlas_kv_dtype_parse("q4", &k), 0);
	CHECK_EQ_INT(k, ATLAS_KV_Q4);
	CHECK_EQ_INT(atlas_kv_dtype_parse("bf16", &k), 0);
	CHECK_EQ_INT(k, ATLAS_KV_BF16);
	CHECK_EQ_INT(atlas_kv_dtype_parse("auto", &k), 0);
	CHECK_EQ_INT(k, ATLAS_KV_AUTO);
	CHECK_EQ_INT(atlas_kv_dtype_parse("q5", &k), -1);
	CHECK_EQ_INT(atlas_kv_dtype_parse(NULL, &k), -1);
	CHECK_STR(atlas_kv_dtype_name(ATLAS_KV_Q4), "q4");
	/* Qwen3-8B: 8 kv heads of 128 */
	CHECK_EQ_INT(atlas_kv_row_bytes(ATLAS_KV_AUTO, 2, 8, 128), 2048);
	CHECK_EQ_INT(atlas_kv_row_bytes(ATLAS_KV_AUTO, 4, 8, 128), 4096);
	CHECK_EQ_INT(atlas_kv_row_bytes(ATLAS_KV_BF16, 4, 8, 128), 2048);
	CHECK_EQ_INT(atlas_kv_row_bytes(ATLAS_KV_FP8, 2, 8, 128), 32 + 1024);
	CHECK_EQ_INT(atlas_kv_row_bytes(ATLAS_KV_Q4, 2, 8, 128), 64 + 512);
	/* scale areas pad to 16 bytes: 3 heads of fp8 scales are 12 bytes */
	CHECK_EQ_INT(atlas_kv_scale_bytes(ATLAS_KV_FP8, 3, 64), 16);
	CHECK_EQ_INT(atlas_kv_scale_bytes(ATLAS_KV_Q4, 1, 64), 16);
	CHECK_EQ_INT(atlas_kv_check(ATLAS_KV_Q4, 128), 0);
	CHECK_EQ_INT(atlas_kv_check(ATLAS_KV_Q4, 96), ATLAS_EUNSUPPORTED);
	CHECK_CONTAINS(atlas_errmsg(), "power of two");
	CHECK_EQ_INT(atlas_kv_check(ATLAS_KV_Q4, 512), ATLAS_EUNSUPPORTED);
	CHECK_EQ_INT(atlas_kv_check(ATLAS_KV_Q4, 32), ATLAS_EUNSUPPORTED);
	CHECK_EQ_INT(atlas_kv_check(ATLAS_KV_FP8, 80), 0);
	CHECK_EQ_INT(atlas_kv_check(ATLAS_KV_FP8, 24), ATLAS_EUNSUPPORTED);
	CHECK_EQ_INT(atlas_kv_check(ATLAS_KV_AUTO, 6), 0);
}

static void test_fp8_codes(void)
{
	/* two heads of 16: the first's amax 2 goes to 448 (scale 2/448), the
	 * second is all zero (scale 1, codes 0) */
	float x[32] = {2.0f, -1.0f, 0.5f, 0.0f, -2.0f, 1.5f, 0.25f, 1e-6f};
	uint8_t row[16 + 32];
	memset(row, 0xAB, sizeof(row));
	atlas_kv_quant_row(ATLAS_KV_FP8, x, 2, 16, row);
	float s[2];
	memcpy(s, row, 8);
	CHECK(s[0] == 2.0f / 448.0f);
	CHECK(s[1] == 1.0f);
	const uint8_t *q = row + 16;
	CHECK_EQ_INT(q[0], 0x7E);        /* 448 */
	CHECK_EQ_INT(q[1], 0x80 | 0x76); /* -224 = -1.75 * 2^7 */
	CHECK_EQ_INT(q[2], 0x6E);        /* 112 = 1.75 * 2^6 */
	CHECK_EQ_INT(q[3], 0);
	CHECK_EQ_INT(q[4], 0xFE);        /* -448 */
	for (int i = 8; i < 32; i++)
		CHECK_EQ_INT(q[i], 0);
	float out[16];
	atlas_kv_dequant_head(ATLAS_KV_FP8, row, 2, 16, 0, out);
	CHECK(out[0] == 2.0f && out[1] == -1.0f && out[2] == 0.5f && out[4] == -2.0f);
	CHECK_NEAR(out[5], 1.5, 1.5 / 16);
	CHECK(out[7] == 0.0f); /* 1e-6 * 224 is below E4M3's smallest subnormal / 2 */
	/* the encoder saturates and keeps NaN */
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(1e6f), 0x7E);
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(-500.0f), 0xFE);
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(NAN), 0x7F);
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(0x1p-9f), 1); /* smallest subnormal */
}

static void test_q4_unpack(void)
{
	/* one head of 64: scales 2 and 0.5 (F16), byte j holds dims 2j (low
	 * nibble) and 2j + 1 (high) */
	uint8_t row[16 + 32] = {0};
	const uint16_t sc[2] = {atlas_f32_to_f16(2.0f), atlas_f32_to_f16(0.5f)};
	memcpy(row, sc, 4);
	row[16] = 0x21; /* dim 0 code 1, dim 1 code 2 */
	row[17] = 0xF0; /* dim 2 code 0, dim 3 code 15 */
	row[16 + 16] = 0x0F; /* dim 32 code 15 (second block), dim 33 code 0 */
	float out[64];
	atlas_kv_dequant_head(ATLAS_KV_Q4, row, 1, 64, 0, out);
	CHECK(out[0] == atlas_kv_q4_level[1] * 2.0f);
	CHECK(out[1] == atlas_kv_q4_level[2] * 2.0f);
	CHECK(out[2] == atlas_kv_q4_level[0] * 2.0f);
	CHECK(out[3] == atlas_kv_q4_level[15] * 2.0f);
	CHECK(out[4] == atlas_kv_q4_level[0] * 2.0f);
	CHECK(out[32] == atlas_kv_q4_level[15] * 0.5f);
	CHECK(out[33] == atlas_kv_q4_level[0] * 0.5f);
	/* the codebook is symmetric and its thresholds are the midpoints */
	for (int i = 0; i < 16; i++)
		CHECK(atlas_kv_q4_level[i] == -atlas_kv_q4_level[15 - i]);
	for (int i = 0; i < 15; i++)
		CHECK_NEAR(atlas_kv_q4_thresh[i],
			   (atlas_kv_q4_level[i] + atlas_kv_q4_level[i + 1]) / 2, 1e-4);
}

static void test_rotation(void)
{
	/* a unit vector along dim 3 becomes a row of +-1/sqrt(n) with the
	 * Sylvester signs (-1)^popcount(i & 3), and back */
	float x[64] = {0};
	x[3] = 1.0f;
	atlas_kv_rotate(x, 64);
	int ok = 1;
	for (int i = 0; i < 64; i++)
		ok &= fabsf(x[i] - (__builtin_popcount(i & 3) % 2 ? -0.125f : 0.125f)) < 1e-7f;
	CHECK(ok);
	atlas_kv_rotate(x, 64);
	for (int i = 0; i < 64; i++)
		ok &= fabsf(x[i] - (i == 3)) < 1e-6f;
	CHECK(ok);
	/* norm preserved on a random row */
	float y[128];
	double n0 = 0, n1 = 0;
	for (int i = 0; i < 128; i++)
		y[i] = gauss(), n0 += (double)y[i] * y[i];
	atlas_kv_rotate(y, 128);
	for (int i = 0; i < 128; i++)
		n1 += (double)y[i] * y[i];
	CHECK_NEAR(n1 / n0, 1.0, 1e-5);
}

/* Relative RMS error of format k on nrows Gaussian head rows of hd, one
 * channel scaled by `outlier` (keys have such channels). */
static double format_error(enum atlas_kv_dtype k, int64_t hd, float outlier)
{
	const int64_t H = 4, nrows = 64;
	float *x = malloc((size_t)(H * hd) * sizeof(float)), *o = malloc((size_t)hd * sizeof(float));
	uint8_t *row = malloc((size_t)atlas_kv_row_bytes(k, 4, H, hd));
	double err = 0, ref = 0;
	for (int64_t r = 0; r < nrows; r++) {
		for (int64_t i = 0; i < H * hd; i++)
			x[i] = gauss() * (i % hd == 5 ? outlier : 1.0f);
		atlas_kv_quant_row(k, x, H, hd, row);
		for (int64_t h = 0; h < H; h++) {
			atlas_kv_dequant_head(k, row, H, hd, h, o);
			if (k == ATLAS_KV_Q4)
				atlas_kv_rotate(o, hd);
			for (int64_t i = 0; i < hd; i++) {
				double d = (double)o[i] - x[h * hd + i];
				err += d * d;
				ref += (double)x[h * hd + i] * x[h * hd + i];
			}
		}
	}
	free(x);
	free(o);
	free(row);
	return sqrt(err / ref);
}

static void test_format_error(void)
{
	/* E4M3 has 3 mantissa bits: relative error ~2^-4 / sqrt(3) per value */
	double e8 = format_error(ATLAS_KV_FP8, 128, 1.0f);
	CHECK(e8 > 0.01 && e8 < 0.04);
	/* 16-level Lloyd-Max on N(0,1): MSE 0.0095, relative RMS ~0.097 */
	double e4 = format_error(ATLAS_KV_Q4, 128, 1.0f);
	CHECK(e4 > 0.07 && e4 < 0.12);
	/* an outlier channel 20x the others: the rotation spreads it, so the
	 * error stays that of a Gaussian row */
	double e4o = format_error(ATLAS_KV_Q4, 128, 20.0f);
	CHECK(e4o < 0.12);
	double e4s = format_error(ATLAS_KV_Q4, 64, 1.0f);
	CHECK(e4s > 0.07 && e4s < 0.13);
	printf("# relative RMS error: fp8 %.4f, q4 %.4f (outlier channel %.4f, hd 64 %.4f)\n",
		     e8, e4, e4o, e4s);
}

/* The CPU attention over a cache in format k (rows stored with the
 * backend's kv_store) against a double reference over the dequantized
 * (and, for q4, rotated back) rows: a paged cache of blocks of 5 rows,
 * one sequence, T new tokens at positions pos0.. */
static void check_attention_format(enum atlas_kv_dtype k, int64_t T, int64_t pos0, int64_t H,
				   int64_t Hkv, int64_t hd, int64_t window)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->kv_dtype = k;
	const int64_t B = 5, S = pos0 + T, nb = (S + B - 1) / B, row = Hkv * hd;
	const int64_t rb = atlas_kv_row_bytes(k, 4, Hkv, hd), slots = nb * B;
	float *kv = malloc((size_t)(S * row) * 4), *vv = malloc((size_t)(S * row) * 4);
	for (int64_t i = 0; i < S * row; i++)
		kv[i] = gauss() * (i % hd == 7 ? 8.0f : 1.0f), vv[i] = gauss();
	uint8_t *kc = calloc((size_t)(slots * rb), 1), *vc = calloc((size_t)(slots * rb), 1);
	int32_t *tab = malloc((size_t)nb * 4), *slot = malloc((size_t)S * 4);
	int32_t *seq = calloc((size_t)T, 4), *pos = malloc((size_t)T * 4);
	for (int64_t i = 0; i < nb; i++)
		tab[i] = (int32_t)((i * 3 + 1) % nb);
	if (nb % 3 == 0)
		for (int64_t i = 0; i < nb; i++)
			tab[i] = (int32_t)(nb - 1 - i);
	for (int64_t p = 0; p < S; p++)
		slot[p] = (int32_t)(tab[p / B] * B + p % B);
	for (int64_t t = 0; t < T; t++)
		pos[t] = (int32_t)(pos0 + t);
	CHECK_EQ_INT(be->kv_store(be, kc, vc, kv, vv, slot, S, Hkv, hd), 0);
	/* the rows as the cache holds them, in the original space */
	float *kd = malloc((size_t)(S * row) * 4), *vd = malloc((size_t)(S * row) * 4);
	for (int64_t p = 0; p < S; p++)
		for (int64_t h = 0; h < Hkv; h++) {
			float *ko = kd + p * row + h * hd, *vo = vd + p * row + h * hd;
			const uint8_t *kr = kc + slot[p] * rb, *vr = vc + slot[p] * rb;
			if (k == ATLAS_KV_BF16) {
				for (int64_t i = 0; i < hd; i++) {
					ko[i] = atlas_bf16_to_f32(((const uint16_t *)kr)[h * hd + i]);
					vo[i] = atlas_bf16_to_f32(((const uint16_t *)vr)[h * hd + i]);
				}
				continue;
			}
			atlas_kv_dequant_head(k, kr, Hkv, hd, h, ko);
			atlas_kv_dequant_head(k, vr, Hkv, hd, h, vo);
			if (k == ATLAS_KV_Q4) {
				atlas_kv_rotate(ko, hd);
				atlas_kv_rotate(vo, hd);
			}
		}
	float *q = malloc((size_t)(T * H * hd) * 4), *out = malloc((size_t)(T * H * hd) * 4);
	for (int64_t i = 0; i < T * H * hd; i++)
		q[i] = gauss() * 0.5f;
	const float scale = 1.0f / sqrtf((float)hd);
	struct atlas_kv_batch kb = {.seq_of = seq, .pos = pos, .block_tables = tab, .n_seq = 1,
				    .max_blocks = nb, .block_size = B, .max_keys = S};
	CHECK_EQ_INT(be->attention(be, out, q, kc, vc, &kb, T, H, Hkv, hd, window, scale), 0);
	double err = 0, ref = 0;
	double *p = malloc((size_t)S * 8);
	for (int64_t t = 0; t < T; t++)
		for (int64_t h = 0; h < H; h++) {
			const int64_t pt = pos0 + t, kh = h / (H / Hkv);
			const int64_t lo = window && pt - window + 1 > 0 ? pt - window + 1 : 0;
			double mx = -INFINITY, sum = 0;
			for (int64_t j = lo; j <= pt; j++) {
				double sc = 0;
				for (int64_t d = 0; d < hd; d++)
					sc += (double)q[(t * H + h) * hd + d] * kd[j * row + kh * hd + d];
				p[j] = sc * scale;
				mx = p[j] > mx ? p[j] : mx;
			}
			for (int64_t j = lo; j <= pt; j++)
				sum += p[j] = exp(p[j] - mx);
			for (int64_t d = 0; d < hd; d++) {
				double o = 0;
				for (int64_t j = lo; j <= pt; j++)
					o += p[j] / sum * vd[j * row + kh * hd + d];
				double e = out[(t * H + h) * hd + d] - o;
				err += e * e, ref += o * o;
			}
		}
	char what[128];
	snprintf(what, sizeof(what), "%s attention T=%lld pos0=%lld H=%lld Hkv=%lld hd=%lld w=%lld",
		 atlas_kv_dtype_name(k), (long long)T, (long long)pos0, (long long)H, (long long)Hkv,
		 (long long)hd, (long long)window);
	const double rel = sqrt(err / ref);
	if (!(rel < 1e-5))
		harness_fail(__FILE__, __LINE__, "%s: relative L2 error %g against the dequantized cache",
			     what, rel);
	free(p);
	free(kv);
	free(vv);
	free(kc);
	free(vc);
	free(kd);
	free(vd);
	free(q);
	free(out);
	free(tab);
	free(slot);
	free(seq);
	free(pos);
	be->destroy(be);
}

static void test_attention_formats(void)
{
	const enum atlas_kv_dtype ks[] = {ATLAS_KV_BF16, ATLAS_KV_FP8, ATLAS_KV_Q4};
	for (int i = 0; i < 3; i++) {
		check_attention_format(ks[i], 1, 0, 4, 2, 64, 0);
		check_attention_format(ks[i], 3, 17, 8, 2, 64, 0);
		check_attention_format(ks[i], 9, 40, 6, 3, 128, 12);
		check_attention_format(ks[i], 2, 30, 4, 4, 256, 0);
	}
	/* a head_dim the format cannot hold is refused by the ops */
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->kv_dtype = ATLAS_KV_Q4;
	float x[48] = {0};
	int32_t slot[1] = {0};
	CHECK(be->kv_store(be, x, x, x, x, slot, 1, 1, 48) < 0);
	be->destroy(be);
}

int main(void)
{
	RUN(test_names_and_sizes);
	RUN(test_fp8_codes);
	RUN(test_q4_unpack);
	RUN(test_rotation);
	RUN(test_format_error);
	RUN(test_attention_formats);
	return harness_done();
}
