/* test-quant-write.c - the round-to-nearest quantizers of quant_write.c
 * read back by the loader's dequantizers: random matrices (rows of
 * different magnitudes, partial edge blocks) quantized by the writers,
 * stored in tiny safetensors files in the Hub layouts, dequantized with
 * atlas_quant_dequant; every element within the format's rounding bound
 * (fp8: half an E4M3 step, 2^-4 of the element or 2^-10 of the scale in
 * the subnormals; int4: half the scale; NVFP4: half the E2M1 grid
 * spacing times the scale), and quantize(dequantize(quantize(W))) ==
 * quantize(W) byte for byte for fp8 and int4. Also the E4M3 encoder on
 * every code, its ties and saturation, and the scheme names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "../../lib/core/dtype.h"
#include "../../lib/core/error.h"
#include "../../lib/io/quant.h"
#include "../../lib/io/quant_write.h"
#include "../../lib/io/safetensors.h"

/* The n tensors as one safetensors file in the tmpdir, opened; the
 * caller closes it. */
static struct atlas_st *st_build(const struct harness_tensor *t, int n)
{
	static int seq;
	char name[64];
	snprintf(name, sizeof(name), "w%d.safetensors", seq++);
	char *path = harness_write_st(name, t, n);
	struct atlas_st *st = atlas_st_open(path);
	if (!st)
		harness_fail(__FILE__, __LINE__, "cannot open %s: %s", path, atlas_errmsg());
	free(path);
	return st;
}

static uint64_t rng = 88172645463325252ull;

static double uniform(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

/* W [out, in]: Gaussian, each row with its own magnitude (2^-8 .. 2^4),
 * a few exact zeros and one all-zero row. */
static float *random_matrix(int64_t out, int64_t in)
{
	float *w = malloc((size_t)(out * in) * sizeof(float));
	for (int64_t r = 0; r < out; r++) {
		double mag = ldexp(1.0, (int)(r % 13) - 8);
		for (int64_t c = 0; c < in; c++) {
			double g = sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
			w[r * in + c] = r == 3 ? 0.0f : (c % 97 == 5) ? 0.0f : (float)(g * mag);
		}
	}
	return w;
}

static void quant_parse(const char *qc, struct atlas_quant *q)
{
	char cfg[1024];
	snprintf(cfg, sizeof(cfg), "{\"quantization_config\": %s}", qc);
	CHECK_EQ_INT(atlas_quant_parse(cfg, NULL, "config.json", q), 0);
}

static const char ct_fp8_channel[] =
	"{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "
	"\"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, "
	"\"type\": \"float\", \"strategy\": \"channel\", \"symmetric\": true}}}, \"ignore\": "
	"[\"lm_head\"]}";

/* fp8 with blocks bo x bi (bi = in: the channel scheme) on W [out, in]:
 * quantize, dequantize through the loader, check the bound and the
 * round trip. */
static void fp8_case(int64_t out, int64_t in, int64_t bo, int64_t bi)
{
	bool channel = bo == 1 && bi == in;
	int64_t nbr = (out + bo - 1) / bo, nbc = (in + bi - 1) / bi;
	float *w = random_matrix(out, in), *d = malloc((size_t)(out * in) * sizeof(float));
	uint8_t *q = malloc((size_t)(out * in)), *q2 = malloc((size_t)(out * in));
	uint16_t *s = malloc((size_t)(nbr * nbc) * 2), *s2 = malloc((size_t)(nbr * nbc) * 2);
	struct atlas_quant qt;
	char qc[256];

	atlas_quant_write_fp8(w, out, in, bo, bi, q, s);
	if (channel)
		quant_parse(ct_fp8_channel, &qt);
	else {
		snprintf(qc, sizeof(qc),
			 "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": "
			 "[%lld, %lld]}",
			 (long long)bo, (long long)bi);
		quant_parse(qc, &qt);
	}
	const struct harness_tensor t[] = {
		{"m.weight", "F8_E4M3", 2, {out, in}, q, (size_t)(out * in)},
		{channel ? "m.weight_scale" : "m.weight_scale_inv", "BF16", 2,
		 {channel ? out : nbr, channel ? 1 : nbc}, s, (size_t)(nbr * nbc) * 2},
	};
	struct atlas_st *st = st_build(t, 2);
	CHECK_EQ_INT(atlas_quant_dequant(&qt, st, "m.weight", out, in, ATLAS_DTYPE_F32, d), 1);
	int64_t bad = 0, saturated = 0;
	for (int64_t r = 0; r < out; r++)
		for (int64_t c = 0; c < in; c++) {
			float sc = atlas_bf16_to_f32(s[(r / bo) * nbc + c / bi]);
			double x = w[r * in + c], err = fabs(d[r * in + c] - x);
			double bound = fmax(fabs(x) * 0x1p-4, sc * 0x1p-10) * (1 + 1e-6);
			bad += err > bound;
			saturated += (q[r * in + c] & 0x7f) == 0x7e && fabs(x / sc) > 448.0;
		}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(saturated, 0);
	/* the all-zero row: codes 0 */
	CHECK_EQ_INT(q[3 * in] | q[3 * in + in - 1], 0);
	atlas_quant_write_fp8(d, out, in, bo, bi, q2, s2);
	CHECK(!memcmp(q, q2, (size_t)(out * in)));
	CHECK(!memcmp(s, s2, (size_t)(nbr * nbc) * 2));
	atlas_st_close(st);
	atlas_quant_free(&qt);
	free(w), free(d), free(q), free(q2), free(s), free(s2);
}

static void test_fp8_block(void)
{
	fp8_case(200, 300, 128, 128); /* partial edge blocks both ways */
	fp8_case(256, 128, 128, 128);
}

static void test_fp8_channel(void)
{
	fp8_case(70, 96, 1, 96);
}

static void test_int4(void)
{
	const int64_t out = 40, in = 384, g = 128, ng = in / g;
	float *w = random_matrix(out, in), *d = malloc((size_t)(out * in) * sizeof(float));
	int32_t *p = malloc((size_t)(out * in / 8) * 4), *p2 = malloc((size_t)(out * in / 8) * 4);
	uint16_t *s = malloc((size_t)(out * ng) * 2), *s2 = malloc((size_t)(out * ng) * 2);
	const int64_t shape[2] = {out, in};
	struct atlas_quant qt;

	CHECK_EQ_INT(atlas_quant_write_int4(w, out, in, g, p, s), 0);
	quant_parse("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", "
		    "\"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], \"weights\": "
		    "{\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"group\", \"group_size\": "
		    "128, \"symmetric\": true}}}, \"ignore\": [\"lm_head\"]}",
		    &qt);
	const struct harness_tensor t[] = {
		{"m.weight_packed", "I32", 2, {out, in / 8}, p, (size_t)(out * in / 8) * 4},
		{"m.weight_scale", "BF16", 2, {out, ng}, s, (size_t)(out * ng) * 2},
		{"m.weight_shape", "I64", 1, {2, 0}, shape, sizeof(shape)},
	};
	struct atlas_st *st = st_build(t, 3);
	CHECK_EQ_INT(atlas_quant_dequant(&qt, st, "m.weight", out, in, ATLAS_DTYPE_F32, d), 1);
	int64_t bad = 0;
	for (int64_t r = 0; r < out; r++)
		for (int64_t c = 0; c < in; c++) {
			double sc = atlas_bf16_to_f32(s[r * ng + c / g]);
			bad += fabs(d[r * in + c] - w[r * in + c]) > sc / 2 * (1 + 1e-6);
		}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(atlas_quant_write_int4(d, out, in, g, p2, s2), 0);
	CHECK(!memcmp(p, p2, (size_t)(out * in / 8) * 4));
	CHECK(!memcmp(s, s2, (size_t)(out * ng) * 2));
	/* a group that does not divide in is refused */
	CHECK_EQ_INT(atlas_quant_write_int4(w, out, 100, g, p2, s2), ATLAS_EINVAL);
	atlas_st_close(st);
	atlas_quant_free(&qt);
	free(w), free(d), free(p), free(p2), free(s), free(s2);
}

static void test_nvfp4(void)
{
	const int64_t out = 48, in = 256, ng = in / 16;
	float *w = random_matrix(out, in), *d = malloc((size_t)(out * in) * sizeof(float)), gs;
	uint8_t *p = malloc((size_t)(out * in / 2)), *s = malloc((size_t)(out * ng));
	struct atlas_quant qt;

	/* keep the rows within 2^4 of each other: NVFP4's E4M3 block scales
	 * span the whole matrix from one global scale */
	for (int64_t i = 0; i < out * in; i++)
		w[i] *= (float)ldexp(1.0, -(int)((i / in) % 13) / 3);
	CHECK_EQ_INT(atlas_quant_write_nvfp4(w, out, in, p, s, &gs), 0);
	quant_parse("{\"quant_method\": \"compressed-tensors\", \"format\": "
		    "\"nvfp4-pack-quantized\", \"config_groups\": {\"group_0\": {\"targets\": "
		    "[\"Linear\"], \"weights\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": "
		    "\"tensor_group\", \"group_size\": 16, \"symmetric\": true}}}}",
		    &qt);
	const struct harness_tensor t[] = {
		{"m.weight_packed", "U8", 2, {out, in / 2}, p, (size_t)(out * in / 2)},
		{"m.weight_scale", "F8_E4M3", 2, {out, ng}, s, (size_t)(out * ng)},
		{"m.weight_global_scale", "F32", 1, {1, 0}, &gs, 4},
	};
	struct atlas_st *st = st_build(t, 3);
	CHECK_EQ_INT(atlas_quant_dequant(&qt, st, "m.weight", out, in, ATLAS_DTYPE_F32, d), 1);
	int64_t bad = 0;
	double amax = 0;
	for (int64_t i = 0; i < out * in; i++)
		amax = fmax(amax, fabs(w[i]));
	CHECK_NEAR(gs, 448.0 * 6.0 / amax, 1e-3 * gs);
	for (int64_t r = 0; r < out; r++)
		for (int64_t c = 0; c < in; c++) {
			double sc = atlas_f8e4m3_to_f32(s[r * ng + c / 16]) / gs;
			double x = fabs(w[r * in + c]) / sc;
			double half_gap = x < 2 ? 0.25 : x < 4 ? 0.5 : 1.0;
			bad += fabs(d[r * in + c] - w[r * in + c]) > half_gap * sc * (1 + 1e-5);
		}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(atlas_quant_write_nvfp4(w, out, 24, p, s, &gs), ATLAS_EINVAL);
	atlas_st_close(st);
	atlas_quant_free(&qt);
	free(w), free(d), free(p), free(s);
}

static void test_f8_encoder(void)
{
	int bad = 0;
	for (int c = 0; c < 256; c++) {
		if ((c & 0x7f) == 0x7f)
			continue;
		bad += atlas_f32_to_f8e4m3(atlas_f8e4m3_to_f32((uint8_t)c)) != c;
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(1000.0f), 0x7e);
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(-1e30f), 0xfe);
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(460.0f), 0x7e);
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(1.0625f), 0x38);   /* tie: 1.0 (even) */
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(1.1875f), 0x3a);   /* tie: 1.25 (even) */
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(0x1p-10f), 0x00);  /* tie below the subnormal 2^-9 */
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(0x1.8p-9f), 0x02); /* 1.5 * 2^-9: tie to 2 * 2^-9 */
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(0x1.f8p-7f), 0x08); /* rounds up to the smallest normal */
	CHECK_EQ_INT(atlas_f32_to_f8e4m3(NAN), 0x7f);
}

static void test_scheme_names(void)
{
	enum atlas_quant_scheme s;
	static const char *const names[] = {"fp8-block", "fp8-channel", "w4a16", "nvfp4"};
	for (int i = 0; i < 4; i++) {
		CHECK_EQ_INT(atlas_quant_scheme_parse(names[i], &s), 0);
		CHECK_STR(atlas_quant_scheme_name(s), names[i]);
	}
	CHECK_EQ_INT(atlas_quant_scheme_parse("int3", &s), ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "unknown quantization 'int3'");
}

int main(void)
{
	RUN(test_fp8_block);
	RUN(test_fp8_channel);
	RUN(test_int4);
	RUN(test_nvfp4);
	RUN(test_f8_encoder);
	RUN(test_scheme_names);
	return harness_done();
}
