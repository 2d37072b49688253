/* test-quant-fp.c - the FP8 and NVFP4 dequantizers of quant_fp.c on tiny
 * safetensors files written here: exact values against hand-picked
 * bytes (F8 0x38 = 1, 0x40 = 2, 0xC0 = -2; E2M1 nibbles with the low
 * nibble first and negative codes) and against a direct computation
 * over every element, partial edge blocks (200 x 130 in 128 x 128
 * blocks), per-tensor, channel, group and block scales, the
 * compressed-tensors NVFP4 global scale dividing where ModelOpt's
 * multiplies, plain modules left alone (0), the stored byte counts, and
 * the refusals (wrong scale shape or dtype, an F8 weight without its
 * scale, NVFP4 in not a multiple of 16), each naming the tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/io/quant_internal.h"

/* --- writing safetensors ------------------------------------------- */

/* The n tensors as one safetensors file in the tmpdir, opened; the
 * caller closes it. */
static struct atlas_st *st_build(const struct harness_tensor *t, int n)
{
	static int seq;
	char name[64];
	snprintf(name, sizeof(name), "q%d.safetensors", seq++);
	char *path = harness_write_st(name, t, n);
	struct atlas_st *st = atlas_st_open(path);
	if (!st)
		harness_fail(__FILE__, __LINE__, "cannot open %s: %s", path, atlas_errmsg());
	free(path);
	return st;
}

/* --- the formats by direct computation ----------------------------- */

/* F8 byte (r, c) of the test weights: every code but the NaNs 0x7f and
 * 0xff, both signs. */
static uint8_t f8_at(int64_t r, int64_t c)
{
	uint8_t b = (uint8_t)((r * 7 + c * 3) % 0x7f);
	return (r + c) & 1 ? (uint8_t)(b | 0x80) : b;
}

static float e2m1(int v)
{
	static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
	return v & 8 ? -mag[v & 7] : mag[v & 7];
}

/* The F8 weight [out, in] with three hand-set bytes. */
static uint8_t *f8_weight(int64_t out, int64_t in)
{
	uint8_t *w = malloc((size_t)(out * in));
	for (int64_t r = 0; r < out; r++)
		for (int64_t c = 0; c < in; c++)
			w[r * in + c] = f8_at(r, c);
	w[0] = 0x38;			   /* 1.0 */
	w[(out - 1) * in + in - 1] = 0x40; /* 2.0 */
	if (out > 130)
		w[130 * in + 5] = 0xC0; /* -2.0 */
	return w;
}

/* dst must equal f8(w[r][c]) * s[r / bo][c / bi] exactly. */
static void check_blocks(const float *dst, const uint8_t *w, const float *s, int64_t out,
			 int64_t in, int64_t bo, int64_t bi)
{
	int64_t nbc = (in + bi - 1) / bi, bad = 0;
	for (int64_t r = 0; r < out; r++)
		for (int64_t c = 0; c < in; c++) {
			float want =
			    atlas_f8e4m3_to_f32(w[r * in + c]) * s[(r / bo) * nbc + c / bi];
			if (dst[r * in + c] != want && bad++ < 5)
				harness_fail(__FILE__, __LINE__, "W[%lld][%lld] = %g, expected %g",
					     (long long)r, (long long)c, (double)dst[r * in + c],
					     (double)want);
		}
	CHECK_EQ_INT(bad, 0);
}

static float *fresh(int64_t n)
{
	float *d = malloc(sizeof(float) * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		d[i] = 12345.0f;
	return d;
}

/* rc must be an error whose message holds `a` (and `b` when not NULL). */
/* The FP8 formats as the loader's dequantizer uses them: view, then W. */
static int fp8_to(int rc, const struct atlas_quant_f8 *v, int64_t out, int64_t in, float *d)
{
	if (rc == 1)
		atlas_quant_f8_dequant(v, out, in, d);
	return rc;
}

static int fp8(const struct atlas_quant *q, const struct atlas_st *st, const char *p,
	       int64_t out, int64_t in, float *d)
{
	struct atlas_quant_f8 v;
	return fp8_to(atlas_quant_fp8(q, st, p, out, in, &v), &v, out, in, d);
}

static int ct_fp8(const struct atlas_quant *q, const struct atlas_st *st, const char *p,
		  int64_t out, int64_t in, float *d)
{
	struct atlas_quant_f8 v;
	return fp8_to(atlas_quant_ct_fp8(q, st, p, out, in, &v), &v, out, in, d);
}

static void expect_err(int rc, const char *a, const char *b)
{
	CHECK(rc < 0);
	if (getenv("TEST_VERBOSE"))
		printf("# %s\n", atlas_errmsg());
	CHECK_CONTAINS(atlas_errmsg(), a);
	if (b)
		CHECK_CONTAINS(atlas_errmsg(), b);
}

#define P "model.layers.0.mlp.down_proj"

/* --- fp8 (quant_method "fp8") -------------------------------------- */

static void test_fp8_block_partial(void)
{
	const int64_t out = 200, in = 130;
	uint8_t *w = f8_weight(out, in);
	float s[4] = {0.5f, 2.0f, 4.0f, 0.25f}; /* [2, 2] */
	uint16_t sb[4];
	for (int i = 0; i < 4; i++)
		sb[i] = atlas_f32_to_bf16(s[i]);
	struct atlas_quant q = {.method = ATLAS_QUANT_FP8, .block = {128, 128}};

	for (int bf16 = 0; bf16 < 2; bf16++) {
		struct harness_tensor t[] = {
		    {P ".weight", "F8_E4M3", 2, {out, in}, w, (size_t)(out * in)},
		    {P ".weight_scale_inv",
		     bf16 ? "BF16" : "F32",
		     2,
		     {2, 2},
		     bf16 ? (const void *)sb : (const void *)s,
		     bf16 ? sizeof(sb) : sizeof(s)},
		};
		struct atlas_st *st = st_build(t, 2);
		float *d = fresh(out * in);
		CHECK_EQ_INT(fp8(&q, st, P, out, in, d), 1);
		CHECK(d[0] == 0.5f);			   /* 0x38 = 1 in block (0, 0) */
		CHECK(d[(out - 1) * in + in - 1] == 0.5f); /* 0x40 = 2 in block (1, 1) */
		CHECK(d[130 * in + 5] == -8.0f);	   /* 0xC0 = -2 in block (1, 0) */
		/* 0x38 at (0, 128): block (0, 1) */
		CHECK(atlas_f8e4m3_to_f32(w[128]) * 2.0f == d[128]);
		check_blocks(d, w, s, out, in, 128, 128);
		CHECK_EQ_INT(atlas_quant_fp_bytes(&q, st, P), out * in + (bf16 ? 8 : 16));
		free(d);
		atlas_st_close(st);
	}
	free(w);
}

/* The F8B blob the GPU loader makes (lib/backend/backend.h) from the
 * view of an FP8 weight: its rows read back as BF16 equal the BF16
 * dequantization of the loader's reference path element for element
 * (partial edge blocks in both directions: out 200, in 330 with 128 x 128
 * blocks); a scale block neither a multiple of 32 columns nor the whole
 * row is refused, so that the weight is dequantized instead. */
static void test_fp8_blob(void)
{
	const int64_t out = 200, in = 330;
	uint8_t *w = f8_weight(out, in);
	float s[6] = {0.5f, 2.0f, 4.0f, 0.25f, 1.0f, 8.0f}; /* [2, 3] */
	struct atlas_quant q = {.method = ATLAS_QUANT_FP8, .block = {128, 128}};
	struct harness_tensor t[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, (size_t)(out * in)},
	    {P ".weight_scale_inv", "F32", 2, {2, 3}, s, sizeof(s)},
	};
	struct atlas_st *st = st_build(t, 2);
	struct atlas_quant_f8 v;
	CHECK_EQ_INT(atlas_quant_f8_view(&q, st, P ".weight", out, in, &v), 1);
	CHECK(v.bo == 128 && v.bi == 128 && v.q == (const uint8_t *)atlas_st_find(st, P ".weight")->data);
	const int64_t bytes = atlas_f8b_bytes(out, in, v.bo, v.bi);
	CHECK_EQ_INT(bytes, ATLAS_F8B_HEAD + 66048 + 6 * 4); /* 66000 rounded up to 256 */
	char *blob = malloc((size_t)bytes);
	CHECK_EQ_INT(atlas_f8b_init(blob, out, in, v.bo, v.bi), 0);
	memcpy(blob + ATLAS_F8B_HEAD, v.q, (size_t)(out * in));
	atlas_quant_f8_scales(&v, out, in, (float *)(blob + atlas_f8b_scale_off(out, in)));
	uint16_t *ref = malloc((size_t)(out * in) * 2), *row = malloc((size_t)in * 2);
	CHECK_EQ_INT(atlas_quant_dequant(&q, st, P ".weight", out, in, ATLAS_DTYPE_BF16, ref), 1);
	int64_t diff = 0;
	for (int64_t r = 0; r < out; r++) {
		atlas_f8b_row_bf16(blob, r, row);
		diff += memcmp(row, ref + r * in, (size_t)in * 2) != 0;
	}
	CHECK_EQ_INT(diff, 0);
	/* blocks the kernels take: multiples of 32 columns, or the row */
	CHECK_EQ_INT(atlas_f8b_init(blob, out, in, 1, 64), 0);
	CHECK_EQ_INT(atlas_f8b_init(blob, out, in, 7, in), 0);
	CHECK_EQ_INT(atlas_f8b_init(blob, out, in, 7, 1000), 0);
	CHECK(atlas_f8b_init(blob, out, in, 128, 48) < 0);
	CHECK(atlas_f8b_init(blob, out, in, 0, 128) < 0);
	CHECK(atlas_f8b_init(blob, 0, in, 128, 128) < 0);
	/* not FP8: no view */
	struct atlas_quant awq = {.method = ATLAS_QUANT_AWQ, .bits = 4, .group_size = 128};
	CHECK_EQ_INT(atlas_quant_f8_view(&awq, st, P ".weight", out, in, &v), 0);
	free(blob);
	free(ref);
	free(row);
	atlas_st_close(st);
	free(w);
}

static void test_fp8_per_tensor(void)
{
	const int64_t out = 3, in = 5;
	uint8_t *w = f8_weight(out, in);
	float s = 3.0f;
	struct atlas_quant q = {.method = ATLAS_QUANT_FP8};
	for (int nd = 0; nd < 2; nd++) {
		struct harness_tensor t[] = {
		    {P ".weight", "F8_E4M3", 2, {out, in}, w, (size_t)(out * in)},
		    {P ".weight_scale_inv", "F32", nd, {1}, &s, 4},
		};
		struct atlas_st *st = st_build(t, 2);
		float *d = fresh(out * in);
		CHECK_EQ_INT(fp8(&q, st, P, out, in, d), 1);
		CHECK(d[0] == 3.0f);
		CHECK(d[out * in - 1] == 6.0f);
		check_blocks(d, w, &s, out, in, out, in);
		free(d);
		atlas_st_close(st);
	}
	free(w);
}

static void test_fp8_plain_and_refusals(void)
{
	const int64_t out = 4, in = 4;
	uint8_t *w = f8_weight(out, in);
	uint16_t plain[16] = {0};
	float s1 = 1.0f, s4[4] = {1, 1, 1, 1};
	struct atlas_quant q = {.method = ATLAS_QUANT_FP8, .block = {2, 2}};
	float *d = fresh(out * in);

	/* a plain BF16 weight, no scale: 0 and dst untouched */
	struct harness_tensor tp[] = {{P ".weight", "BF16", 2, {out, in}, plain, sizeof(plain)}};
	struct atlas_st *st = st_build(tp, 1);
	CHECK_EQ_INT(fp8(&q, st, P, out, in, d), 0);
	CHECK(d[0] == 12345.0f);
	CHECK_EQ_INT(atlas_quant_fp_bytes(&q, st, P), 0);
	atlas_st_close(st);

	/* an F8 weight without its scale */
	struct harness_tensor tm[] = {{P ".weight", "F8_E4M3", 2, {out, in}, w, 16}};
	st = st_build(tm, 1);
	atlas_error_clear();
	expect_err(fp8(&q, st, P, out, in, d), "'" P ".weight_scale_inv'", NULL);
	atlas_st_close(st);

	/* blocks of 2 x 2 need a [2, 2] scale, not [4, 1] */
	struct harness_tensor tw[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, 16},
	    {P ".weight_scale_inv", "F32", 2, {4, 1}, s4, 16},
	};
	st = st_build(tw, 2);
	atlas_error_clear();
	expect_err(fp8(&q, st, P, out, in, d), P ".weight_scale_inv", NULL);
	atlas_st_close(st);

	/* per-tensor wants [] or [1], not [4] */
	q.block[0] = q.block[1] = 0;
	struct harness_tensor tt[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, 16},
	    {P ".weight_scale_inv", "F32", 1, {4}, s4, 16},
	};
	st = st_build(tt, 2);
	atlas_error_clear();
	expect_err(fp8(&q, st, P, out, in, d), P ".weight_scale_inv", NULL);
	atlas_st_close(st);

	/* the weight's shape must be the [out, in] asked for */
	struct harness_tensor ts[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, 16},
	    {P ".weight_scale_inv", "F32", 0, {0}, &s1, 4},
	};
	st = st_build(ts, 2);
	atlas_error_clear();
	expect_err(fp8(&q, st, P, out, 8, d), "'" P ".weight'", NULL);
	/* a scale beside a weight that is not F8 */
	atlas_st_close(st);
	struct harness_tensor tb[] = {
	    {P ".weight", "BF16", 2, {out, in}, plain, sizeof(plain)},
	    {P ".weight_scale_inv", "F32", 0, {0}, &s1, 4},
	};
	st = st_build(tb, 2);
	atlas_error_clear();
	expect_err(fp8(&q, st, P, out, in, d), "'" P ".weight'", "F8_E4M3");
	atlas_st_close(st);
	free(d);
	free(w);
}

/* --- compressed-tensors FP8 ---------------------------------------- */

static void test_ct_fp8_strategies(void)
{
	const int64_t out = 200, in = 130;
	uint8_t *w = f8_weight(out, in);
	float *ch = malloc(sizeof(float) * (size_t)out);
	uint16_t *chb = malloc(2 * (size_t)out);
	for (int64_t r = 0; r < out; r++) {
		ch[r] = (float)(r % 7 + 1) * 0.125f;
		chb[r] = atlas_f32_to_bf16(ch[r]);
	}
	float ts = 0.75f, blk[4] = {1.5f, -0.5f, 8.0f, 0.0625f};
	float *d = fresh(out * in);

	/* tensor: [1] and [] */
	struct atlas_quant q = {.method = ATLAS_QUANT_CT_FP8, .strategy = ATLAS_QS_TENSOR};
	for (int nd = 0; nd < 2; nd++) {
		struct harness_tensor t[] = {
		    {P ".weight", "F8_E4M3", 2, {out, in}, w, (size_t)(out * in)},
		    {P ".weight_scale", "F32", nd, {1}, &ts, 4},
		};
		struct atlas_st *st = st_build(t, 2);
		CHECK_EQ_INT(ct_fp8(&q, st, P, out, in, d), 1);
		CHECK(d[0] == 0.75f);
		check_blocks(d, w, &ts, out, in, out, in);
		atlas_st_close(st);
	}

	/* channel: [out, 1] BF16 and [out] */
	q.strategy = ATLAS_QS_CHANNEL;
	for (int nd = 1; nd <= 2; nd++) {
		struct harness_tensor t[] = {
		    {P ".weight", "F8_E4M3", 2, {out, in}, w, (size_t)(out * in)},
		    {P ".weight_scale", "BF16", nd, {out, 1}, chb, 2 * (size_t)out},
		};
		struct atlas_st *st = st_build(t, 2);
		CHECK_EQ_INT(ct_fp8(&q, st, P, out, in, d), 1);
		CHECK(d[0] == 0.125f);				  /* row 0: 1/8 */
		CHECK(d[(out - 1) * in + in - 1] == 2.0f * 0.5f); /* row 199: 199 % 7 + 1 = 4 */
		check_blocks(d, w, ch, out, in, 1, in);
		CHECK_EQ_INT(atlas_quant_fp_bytes(&q, st, P), out * in + 2 * out);
		atlas_st_close(st);
	}

	/* block 128 x 128 with partial edges, and group 64 (a 1 x 64 block) */
	q.strategy = ATLAS_QS_BLOCK;
	q.block[0] = q.block[1] = 128;
	struct harness_tensor tb[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, (size_t)(out * in)},
	    {P ".weight_scale", "F32", 2, {2, 2}, blk, sizeof(blk)},
	};
	struct atlas_st *st = st_build(tb, 2);
	CHECK_EQ_INT(ct_fp8(&q, st, P, out, in, d), 1);
	CHECK(d[130 * in + 5] == -16.0f); /* -2 * 8 */
	CHECK(d[(out - 1) * in + in - 1] == 0.125f);
	check_blocks(d, w, blk, out, in, 128, 128);
	atlas_st_close(st);

	float *gs = malloc(sizeof(float) * (size_t)(out * 3));
	for (int64_t i = 0; i < out * 3; i++)
		gs[i] = (float)(i % 5) - 2.0f;
	q.strategy = ATLAS_QS_GROUP;
	q.group_size = 64;
	struct harness_tensor tg[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, (size_t)(out * in)},
	    {P ".weight_scale", "F32", 2, {out, 3}, gs, sizeof(float) * (size_t)(out * 3)},
	};
	st = st_build(tg, 2);
	CHECK_EQ_INT(ct_fp8(&q, st, P, out, in, d), 1);
	check_blocks(d, w, gs, out, in, 1, 64);
	atlas_st_close(st);
	free(gs);
	free(d);
	free(ch);
	free(chb);
	free(w);
}

static void test_ct_fp8_plain_and_refusals(void)
{
	const int64_t out = 4, in = 4;
	uint8_t *w = f8_weight(out, in);
	float plain[16] = {0}, s4[4] = {1, 1, 1, 1}, s8[8] = {0};
	struct atlas_quant q = {.method = ATLAS_QUANT_CT_FP8, .strategy = ATLAS_QS_CHANNEL};
	float *d = fresh(out * in);

	struct harness_tensor tp[] = {{P ".weight", "F32", 2, {out, in}, plain, sizeof(plain)}};
	struct atlas_st *st = st_build(tp, 1);
	CHECK_EQ_INT(ct_fp8(&q, st, P, out, in, d), 0);
	CHECK(d[0] == 12345.0f);
	atlas_st_close(st);

	struct harness_tensor tm[] = {{P ".weight", "F8_E4M3", 2, {out, in}, w, 16}};
	st = st_build(tm, 1);
	atlas_error_clear();
	expect_err(ct_fp8(&q, st, P, out, in, d), "'" P ".weight_scale'", NULL);
	atlas_st_close(st);

	/* channel wants [out, 1]: [2, 4] is refused */
	struct harness_tensor tw[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, 16},
	    {P ".weight_scale", "F32", 2, {2, 4}, s8, sizeof(s8)},
	};
	st = st_build(tw, 2);
	atlas_error_clear();
	expect_err(ct_fp8(&q, st, P, out, in, d), P ".weight_scale", NULL);
	/* tensor wants one element */
	q.strategy = ATLAS_QS_TENSOR;
	atlas_error_clear();
	expect_err(ct_fp8(&q, st, P, out, in, d), P ".weight_scale", NULL);
	atlas_st_close(st);

	/* an integer scale dtype is refused */
	q.strategy = ATLAS_QS_CHANNEL;
	struct harness_tensor ti[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, 16},
	    {P ".weight_scale", "I32", 2, {4, 1}, s4, sizeof(s4)},
	};
	st = st_build(ti, 2);
	atlas_error_clear();
	expect_err(ct_fp8(&q, st, P, out, in, d), P ".weight_scale", "I32");
	atlas_st_close(st);
	free(d);
	free(w);
}

/* --- NVFP4 --------------------------------------------------------- */

/* NVFP4 [2, 32]: packed [2, 16], F8 scales [2, 2]. Row 0's first bytes
 * are hand-picked; the rest run through every nibble. */
struct nv {
	uint8_t packed[32]; /* U8 [2, 16] */
	uint8_t scale[4];   /* F8_E4M3 [2, 2] */
};

static void nv_init(struct nv *n)
{
	for (int i = 0; i < 32; i++)
		n->packed[i] = (uint8_t)(i * 37 + 11);
	n->packed[0] = 0x2F; /* element 0: 0xF = -6, element 1: 0x2 = 1 */
	n->packed[1] = 0x97; /* element 2: 0x7 = 6, element 3: 0x9 = -0.5 */
	n->packed[2] = 0x80; /* element 4: +0, element 5: -0 */
	n->scale[0] = 0x38;  /* 1 */
	n->scale[1] = 0x40;  /* 2 */
	n->scale[2] = 0xB8;  /* -1 */
	n->scale[3] = 0x30;  /* 0.5 */
}

/* atlas_quant_nvfp4's view dequantized into d (when it gives 1). */
static int nvfp4(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		 int64_t out, int64_t in, float *d)
{
	struct atlas_quant_fp4 v;
	int rc = atlas_quant_nvfp4(q, st, prefix, out, in, &v);
	if (rc == 1)
		atlas_quant_fp4_dequant(&v, out, in, d);
	return rc;
}

/* dst must equal e2m1 * (f8(scale) * g), or e2m1 * (f8(scale) * f32(1 / g))
 * when divide (compressed-tensors' divisor turned into a multiplier). */
static void check_nv(const float *dst, const struct nv *n, float g, int divide)
{
	int bad = 0;
	for (int r = 0; r < 2; r++)
		for (int c = 0; c < 32; c++) {
			uint8_t b = n->packed[r * 16 + c / 2];
			float f = atlas_f8e4m3_to_f32(n->scale[r * 2 + c / 16]);
			float want = e2m1(c & 1 ? b >> 4 : b & 15) * (divide ? f * (1.0f / g) : f * g);
			if (dst[r * 32 + c] != want && bad++ < 5)
				harness_fail(__FILE__, __LINE__, "W[%d][%d] = %g, expected %g", r,
					     c, (double)dst[r * 32 + c], (double)want);
		}
	CHECK_EQ_INT(bad, 0);
}

static void test_nvfp4_modelopt(void)
{
	struct nv n;
	nv_init(&n);
	float g = 0.5f;
	struct atlas_quant q = {.method = ATLAS_QUANT_NVFP4, .group_size = 16};
	for (int nd = 0; nd < 2; nd++) {
		struct harness_tensor t[] = {
		    {P ".weight", "U8", 2, {2, 16}, n.packed, 32},
		    {P ".weight_scale", "F8_E4M3", 2, {2, 2}, n.scale, 4},
		    {P ".weight_scale_2", "F32", nd, {1}, &g, 4},
		};
		struct atlas_st *st = st_build(t, 3);
		float *d = fresh(64);
		CHECK_EQ_INT(nvfp4(&q, st, P, 2, 32, d), 1);
		CHECK(d[0] == -3.0f); /* -6 * 1 * 0.5 */
		CHECK(d[1] == 0.5f);  /* 1 * 1 * 0.5 */
		CHECK(d[2] == 3.0f);
		CHECK(d[3] == -0.25f);
		CHECK(d[4] == 0.0f && !signbit(d[4]));
		CHECK(d[5] == 0.0f && signbit(d[5]));
		check_nv(d, &n, g, 0);
		CHECK_EQ_INT(atlas_quant_fp_bytes(&q, st, P), 32 + 4 + 4);
		free(d);
		atlas_st_close(st);
	}
}

static void test_nvfp4_ct(void)
{
	struct nv n;
	nv_init(&n);
	float g = 4.0f;
	struct atlas_quant q = {.method = ATLAS_QUANT_CT_NVFP4, .group_size = 16};
	struct harness_tensor t[] = {
	    {P ".weight_packed", "U8", 2, {2, 16}, n.packed, 32},
	    {P ".weight_scale", "F8_E4M3", 2, {2, 2}, n.scale, 4},
	    {P ".weight_global_scale", "F32", 1, {1}, &g, 4},
	};
	struct atlas_st *st = st_build(t, 3);
	float *d = fresh(64);
	CHECK_EQ_INT(nvfp4(&q, st, P, 2, 32, d), 1);
	CHECK(d[0] == -1.5f); /* -6 * 1 / 4: the global scale divides */
	CHECK(d[1] == 0.25f);
	CHECK(d[3] == -0.125f);
	check_nv(d, &n, g, 1);
	CHECK_EQ_INT(atlas_quant_fp_bytes(&q, st, P), 32 + 4 + 4);
	atlas_st_close(st);

	/* a zero global scale would divide by zero */
	float z = 0.0f;
	struct harness_tensor tz[] = {
	    {P ".weight_packed", "U8", 2, {2, 16}, n.packed, 32},
	    {P ".weight_scale", "F8_E4M3", 2, {2, 2}, n.scale, 4},
	    {P ".weight_global_scale", "F32", 0, {0}, &z, 4},
	};
	st = st_build(tz, 3);
	atlas_error_clear();
	expect_err(nvfp4(&q, st, P, 2, 32, d), P ".weight_global_scale", NULL);
	atlas_st_close(st);

	/* a plain weight: 0, nothing written */
	float plain[64] = {0};
	struct harness_tensor tp[] = {{P ".weight", "F32", 2, {2, 32}, plain, sizeof(plain)}};
	st = st_build(tp, 1);
	for (int i = 0; i < 64; i++)
		d[i] = 12345.0f;
	CHECK_EQ_INT(nvfp4(&q, st, P, 2, 32, d), 0);
	CHECK(d[0] == 12345.0f);
	CHECK_EQ_INT(atlas_quant_fp_bytes(&q, st, P), 0);
	q.method = ATLAS_QUANT_NVFP4;
	CHECK_EQ_INT(nvfp4(&q, st, P, 2, 32, d), 0);
	atlas_st_close(st);
	free(d);
}

/* An NVFP4 weight packed as an FP4B blob (backend.h) gives, row by row,
 * exactly the BF16 matrix the dequantizing loader makes, for both
 * formats (compressed-tensors' divisor as a multiplier); the head takes
 * rows of a multiple of 32 columns only. */
static void test_fp4b_blob(void)
{
	const int64_t out = 37, in = 96;
	uint8_t *pk = malloc((size_t)(out * in / 2)), sc[37 * 6];
	uint32_t x = 12345;
	for (int64_t i = 0; i < out * in / 2; i++)
		pk[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
	for (int i = 0; i < 37 * 6; i++) /* E4M3 codes, NaN (0x7f / 0xff) left out */
		sc[i] = (uint8_t)(((x = x * 1103515245u + 12345u) >> 16) % 0x7f) | (i & 1 ? 0x80 : 0);
	const float gs[2] = {0.0371f, 3.0f};
	for (int ct = 0; ct < 2; ct++) {
		struct atlas_quant q = {.method = ct ? ATLAS_QUANT_CT_NVFP4 : ATLAS_QUANT_NVFP4,
					.group_size = 16};
		struct harness_tensor t[] = {
		    {ct ? P ".weight_packed" : P ".weight", "U8", 2, {out, in / 2}, pk,
		     (size_t)(out * in / 2)},
		    {P ".weight_scale", "F8_E4M3", 2, {out, in / 16}, sc, sizeof(sc)},
		    {ct ? P ".weight_global_scale" : P ".weight_scale_2", "F32", 1, {1}, &gs[ct], 4},
		};
		struct atlas_st *st = st_build(t, 3);
		struct atlas_quant_fp4 v;
		CHECK_EQ_INT(atlas_quant_fp4_view(&q, st, P ".weight", out, in, &v), 1);
		CHECK(v.gm == (ct ? 1.0f / 3.0f : 0.0371f));
		const int64_t bytes = atlas_fp4b_bytes(out, in);
		CHECK_EQ_INT(bytes, ATLAS_FP4B_HEAD + 1792 + 37 * 6); /* 1776 rounded up to 256 */
		char *blob = malloc((size_t)bytes);
		CHECK_EQ_INT(atlas_fp4b_init(blob, out, in, v.gm), 0);
		memcpy(blob + ATLAS_FP4B_HEAD, v.q, (size_t)(out * in / 2));
		memcpy(blob + atlas_fp4b_s_off(out, in), v.s, (size_t)(out * in / 16));
		uint16_t *ref = malloc((size_t)(out * in) * 2), *row = malloc((size_t)in * 2);
		CHECK_EQ_INT(atlas_quant_dequant(&q, st, P ".weight", out, in, ATLAS_DTYPE_BF16, ref), 1);
		int64_t diff = 0, nz = 0;
		for (int64_t r = 0; r < out; r++) {
			atlas_fp4b_row_bf16(blob, r, row);
			diff += memcmp(row, ref + r * in, (size_t)in * 2) != 0;
			for (int64_t k = 0; k < in; k++)
				nz += (row[k] & 0x7fff) != 0;
		}
		CHECK_EQ_INT(diff, 0);
		CHECK(nz > out * in / 2);
		/* column 1 of row 0: the high nibble of byte 0 times group 0's scale */
		atlas_fp4b_row_bf16(blob, 0, row);
		CHECK_EQ_INT(row[1], atlas_f32_to_bf16(atlas_e2m1_to_f32(pk[0] >> 4) *
						       (atlas_f8e4m3_to_f32(sc[0]) * v.gm)));
		CHECK(atlas_fp4b_init(blob, out, 48, 1.0f) < 0);
		CHECK(atlas_fp4b_init(blob, 0, in, 1.0f) < 0);
		CHECK(atlas_fp4b_init(blob, out, in, INFINITY) < 0);
		/* not NVFP4: no view */
		struct atlas_quant f8 = {.method = ATLAS_QUANT_FP8, .block = {128, 128}};
		CHECK_EQ_INT(atlas_quant_fp4_view(&f8, st, P ".weight", out, in, &v), 0);
		free(blob);
		free(ref);
		free(row);
		atlas_st_close(st);
	}
	free(pk);
}

static void test_nvfp4_refusals(void)
{
	struct nv n;
	nv_init(&n);
	float g = 1.0f;
	uint16_t sb[4] = {0};
	float *d = fresh(64);
	struct atlas_quant q = {.method = ATLAS_QUANT_NVFP4, .group_size = 16};

	/* in = 24: not a multiple of 16 */
	struct harness_tensor t24[] = {
	    {P ".weight", "U8", 2, {2, 12}, n.packed, 24},
	    {P ".weight_scale", "F8_E4M3", 2, {2, 2}, n.scale, 4},
	    {P ".weight_scale_2", "F32", 0, {0}, &g, 4},
	};
	struct atlas_st *st = st_build(t24, 3);
	atlas_error_clear();
	expect_err(nvfp4(&q, st, P, 2, 24, d), "'" P ".weight'", "16");
	atlas_st_close(st);

	/* a U8 weight without its scales */
	struct harness_tensor tm[] = {{P ".weight", "U8", 2, {2, 16}, n.packed, 32}};
	st = st_build(tm, 1);
	atlas_error_clear();
	expect_err(nvfp4(&q, st, P, 2, 32, d), "'" P ".weight_scale'", NULL);
	atlas_st_close(st);

	/* BF16 group scales where F8_E4M3 is stored */
	struct harness_tensor tb[] = {
	    {P ".weight", "U8", 2, {2, 16}, n.packed, 32},
	    {P ".weight_scale", "BF16", 2, {2, 2}, sb, 8},
	    {P ".weight_scale_2", "F32", 0, {0}, &g, 4},
	};
	st = st_build(tb, 3);
	atlas_error_clear();
	expect_err(nvfp4(&q, st, P, 2, 32, d), P ".weight_scale", "F8_E4M3");
	atlas_st_close(st);

	/* a packed weight of the wrong width ([2, 8] for in = 32) */
	struct harness_tensor tw[] = {
	    {P ".weight_packed", "U8", 2, {2, 8}, n.packed, 16},
	    {P ".weight_scale", "F8_E4M3", 2, {2, 2}, n.scale, 4},
	    {P ".weight_global_scale", "F32", 0, {0}, &g, 4},
	};
	st = st_build(tw, 3);
	q.method = ATLAS_QUANT_CT_NVFP4;
	atlas_error_clear();
	expect_err(nvfp4(&q, st, P, 2, 32, d), P ".weight_packed", NULL);
	/* and compressed-tensors' in not a multiple of 16 names weight_packed */
	atlas_error_clear();
	expect_err(nvfp4(&q, st, P, 2, 16 + 8, d), "'" P ".weight_packed'", "16");
	atlas_st_close(st);

	/* the global scale missing */
	struct harness_tensor tg[] = {
	    {P ".weight_packed", "U8", 2, {2, 16}, n.packed, 32},
	    {P ".weight_scale", "F8_E4M3", 2, {2, 2}, n.scale, 4},
	};
	st = st_build(tg, 2);
	atlas_error_clear();
	expect_err(nvfp4(&q, st, P, 2, 32, d), P ".weight_global_scale", NULL);
	atlas_st_close(st);
	free(d);
}

/* Through the dispatcher: quant.c finds the module and routes to here. */
static void test_dispatch(void)
{
	const int64_t out = 3, in = 5;
	uint8_t *w = f8_weight(out, in);
	float s = 2.0f;
	struct atlas_quant q = {.method = ATLAS_QUANT_FP8};
	struct harness_tensor t[] = {
	    {P ".weight", "F8_E4M3", 2, {out, in}, w, (size_t)(out * in)},
	    {P ".weight_scale_inv", "F32", 1, {1}, &s, 4},
	};
	struct atlas_st *st = st_build(t, 2);
	float *d = fresh(out * in);
	CHECK_EQ_INT(atlas_quant_dequant(&q, st, P ".weight", out, in, ATLAS_DTYPE_F32, d), 1);
	check_blocks(d, w, &s, out, in, out, in);
	CHECK_EQ_INT(atlas_quant_stored_bytes(&q, st, P ".weight"), out * in + 4);
	free(d);
	atlas_st_close(st);
	free(w);
}

int main(void)
{
	RUN(test_fp8_block_partial);
	RUN(test_fp8_per_tensor);
	RUN(test_fp8_blob);
	RUN(test_fp8_plain_and_refusals);
	RUN(test_ct_fp8_strategies);
	RUN(test_ct_fp8_plain_and_refusals);
	RUN(test_nvfp4_modelopt);
	RUN(test_nvfp4_ct);
	RUN(test_nvfp4_refusals);
	RUN(test_fp4b_blob);
	RUN(test_dispatch);
	return harness_done();
}
