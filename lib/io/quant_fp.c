/* quant_fp.c - the floating-point quantized formats dequantized at load:
 * FP8 E4M3 with block, channel or tensor scales (quant_method "fp8",
 * compressed-tensors float-quantized) and NVFP4 (E2M1 pairs with an FP8
 * scale per 16 values and an F32 global scale, as ModelOpt and
 * compressed-tensors store it). Each checks the module's tensors by name
 * before reading a byte (atlas_quant_tensor) and writes W [out, in] as
 * FP32; see quant.h for the layouts. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/error.h"
#include "quant_internal.h"

static const enum atlas_dtype dt_f8[] = {ATLAS_DTYPE_F8_E4M3};
static const enum atlas_dtype dt_u8[] = {ATLAS_DTYPE_U8};
static const enum atlas_dtype dt_float[] = {ATLAS_DTYPE_BF16, ATLAS_DTYPE_F32, ATLAS_DTYPE_F16};

static int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

/* Tensor prefix.suffix or NULL, no checks and no message. */
static const struct atlas_tensor_info *find(const struct atlas_st *st, const char *prefix,
					    const char *suffix)
{
	char name[512];
	int n = snprintf(name, sizeof(name), "%s.%s", prefix, suffix);
	if (n < 0 || (size_t)n >= sizeof(name))
		return NULL;
	return atlas_st_find(st, name);
}

static int64_t nbytes(const struct atlas_tensor_info *t)
{
	return t ? (int64_t)t->nbytes : 0;
}

/* The module's one-element scale prefix.suffix (shape [] or [1], a float
 * dtype) checked; NULL with a message naming it otherwise. */
static const struct atlas_tensor_info *scalar(const struct atlas_st *st, const char *prefix,
					      const char *suffix, const enum atlas_dtype *dts,
					      int ndt)
{
	static const int64_t one[1] = {1};
	const struct atlas_tensor_info *t = find(st, prefix, suffix);
	if (t && t->ndim > 1) {
		atlas_error(ATLAS_EFORMAT,
			    "tensor '%s.%s' has %d dimensions; expected shape [] or [1]", prefix,
			    suffix, t->ndim);
		return NULL;
	}
	/* [] or [1]: check against the one of the two the file has */
	return atlas_quant_tensor(st, prefix, suffix, true, dts, ndt, t && t->ndim == 0 ? 0 : 1,
				  one);
}

/* dst [out, in] = f8(w[r][c]) * s[r / bo][c / bi], s [ceil(out/bo),
 * ceil(in/bi)] row-major (edge blocks partial). w holds out * in bytes
 * and s that many blocks: the caller checked both shapes. */
static void f8_blocks(const uint8_t *w, const struct atlas_tensor_info *s, int64_t out, int64_t in,
		      int64_t bo, int64_t bi, float *dst)
{
	float lut[256];
	int64_t nbc = ceil_div(in, bi);
	for (int i = 0; i < 256; i++)
		lut[i] = atlas_f8e4m3_to_f32((uint8_t)i);
	for (int64_t r = 0; r < out; r++) {
		const uint8_t *wr = w + r * in;
		float *dr = dst + r * in;
		for (int64_t cb = 0; cb < nbc; cb++) {
			float sc = atlas_quant_scale(s, (r / bo) * nbc + cb);
			int64_t c1 = (cb + 1) * bi < in ? (cb + 1) * bi : in;
			for (int64_t c = cb * bi; c < c1; c++)
				dr[c] = lut[wr[c]] * sc;
		}
	}
}

/* The F8_E4M3 weight prefix.weight [out, in] checked, or NULL with a
 * message. */
static const struct atlas_tensor_info *f8_weight(const struct atlas_st *st, const char *prefix,
						 int64_t out, int64_t in)
{
	const int64_t dims[2] = {out, in};
	return atlas_quant_tensor(st, prefix, "weight", true, dt_f8, 1, 2, dims);
}

/* 0 when the module is plain (no `scale` tensor and a weight that is
 * not F8), 1 when it is stored as FP8, an error for an F8 weight
 * without its scale. */
static int f8_stored(const struct atlas_st *st, const char *prefix, const char *scale)
{
	const struct atlas_tensor_info *w = find(st, prefix, "weight");
	if (find(st, prefix, scale))
		return 1;
	if (!w || w->dtype != ATLAS_DTYPE_F8_E4M3)
		return 0;
	return atlas_error(ATLAS_EFORMAT,
			   "tensor '%s.%s' is missing beside the F8_E4M3 weight '%s.weight'",
			   prefix, scale, prefix);
}

static int check_dims(const char *prefix, int64_t out, int64_t in)
{
	if (out <= 0 || in <= 0)
		return atlas_error(ATLAS_EINVAL, "'%s.weight': bad shape [%lld, %lld]", prefix,
				   (long long)out, (long long)in);
	return 0;
}

void atlas_quant_f8_dequant(const struct atlas_quant_f8 *v, int64_t out, int64_t in, float *dst)
{
	f8_blocks(v->q, v->s, out, in, v->bo, v->bi, dst);
}

void atlas_quant_f8_scales(const struct atlas_quant_f8 *v, int64_t out, int64_t in, float *dst)
{
	const int64_t n = ceil_div(out, v->bo) * ceil_div(in, v->bi);
	for (int64_t i = 0; i < n; i++)
		dst[i] = atlas_quant_scale(v->s, i);
}

/* *v = the module's values w and scales s in blocks of bo x bi; 1. */
static int f8_view(struct atlas_quant_f8 *v, const struct atlas_tensor_info *w,
		   const struct atlas_tensor_info *s, int64_t bo, int64_t bi)
{
	*v = (struct atlas_quant_f8){w->data, s, bo, bi};
	return 1;
}

int atlas_quant_fp8(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		    int64_t out, int64_t in, struct atlas_quant_f8 *v)
{
	const struct atlas_tensor_info *w, *s;
	int64_t bo = q->block[0], bi = q->block[1];
	int rc = f8_stored(st, prefix, "weight_scale_inv");
	if (rc <= 0)
		return rc;
	if ((rc = check_dims(prefix, out, in)) < 0)
		return rc;
	if (!(w = f8_weight(st, prefix, out, in)))
		return ATLAS_EFORMAT;
	if (bo == 0 && bi == 0) {
		/* per-tensor */
		if (!(s = scalar(st, prefix, "weight_scale_inv", dt_float, 3)))
			return ATLAS_EFORMAT;
		return f8_view(v, w, s, out, in);
	}
	if (bo <= 0 || bi <= 0)
		return atlas_error(ATLAS_EINVAL, "'%s.weight_scale_inv': bad block %lldx%lld",
				   prefix, (long long)bo, (long long)bi);
	const int64_t sd[2] = {ceil_div(out, bo), ceil_div(in, bi)};
	if (!(s = atlas_quant_tensor(st, prefix, "weight_scale_inv", true, dt_float, 3, 2, sd)))
		return ATLAS_EFORMAT;
	return f8_view(v, w, s, bo, bi);
}

int atlas_quant_ct_fp8(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		       int64_t out, int64_t in, struct atlas_quant_f8 *v)
{
	const struct atlas_tensor_info *w, *s;
	int64_t bo, bi;
	int rc = f8_stored(st, prefix, "weight_scale");
	if (rc <= 0)
		return rc;
	if ((rc = check_dims(prefix, out, in)) < 0)
		return rc;
	if (!(w = f8_weight(st, prefix, out, in)))
		return ATLAS_EFORMAT;
	if (q->strategy == ATLAS_QS_TENSOR) {
		if (!(s = scalar(st, prefix, "weight_scale", dt_float, 3)))
			return ATLAS_EFORMAT;
		return f8_view(v, w, s, out, in);
	}
	if (q->strategy == ATLAS_QS_CHANNEL) {
		/* [out, 1] as compressed-tensors writes it; [out] too */
		const struct atlas_tensor_info *f = find(st, prefix, "weight_scale");
		const int64_t sd[2] = {out, 1};
		int nd = f && f->ndim == 1 ? 1 : 2;
		if (!(s = atlas_quant_tensor(st, prefix, "weight_scale", true, dt_float, 3, nd,
					     sd)))
			return ATLAS_EFORMAT;
		return f8_view(v, w, s, 1, in);
	}
	if (q->strategy == ATLAS_QS_GROUP) /* a group of `in` is a 1 x g block */
		bo = 1, bi = q->group_size;
	else if (q->strategy == ATLAS_QS_BLOCK)
		bo = q->block[0], bi = q->block[1];
	else
		return atlas_error(ATLAS_EUNSUPPORTED, "'%s.weight_scale': unknown strategy %d",
				   prefix, (int)q->strategy);
	if (bo <= 0 || bi <= 0)
		return atlas_error(ATLAS_EINVAL, "'%s.weight_scale': bad block %lldx%lld", prefix,
				   (long long)bo, (long long)bi);
	const int64_t sd[2] = {ceil_div(out, bo), ceil_div(in, bi)};
	if (!(s = atlas_quant_tensor(st, prefix, "weight_scale", true, dt_float, 3, 2, sd)))
		return ATLAS_EFORMAT;
	return f8_view(v, w, s, bo, bi);
}

int atlas_quant_nvfp4(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		      int64_t out, int64_t in, struct atlas_quant_fp4 *v)
{
	bool ct = q->method == ATLAS_QUANT_CT_NVFP4;
	/* ModelOpt keeps the name `weight`, compressed-tensors renames it */
	const char *wname = ct ? "weight_packed" : "weight";
	const char *gname = ct ? "weight_global_scale" : "weight_scale_2";
	const struct atlas_tensor_info *w = find(st, prefix, wname), *s, *g;
	int rc;

	if (!find(st, prefix, "weight_scale") && !find(st, prefix, gname) &&
	    (ct ? !w : !w || w->dtype != ATLAS_DTYPE_U8))
		return 0;
	if ((rc = check_dims(prefix, out, in)) < 0)
		return rc;
	if (in % 16)
		return atlas_error(ATLAS_EFORMAT,
				   "'%s.%s': NVFP4 needs in a multiple of 16 (the group), got %lld",
				   prefix, wname, (long long)in);
	const int64_t wd[2] = {out, in / 2}, sd[2] = {out, in / 16};
	if (!(w = atlas_quant_tensor(st, prefix, wname, true, dt_u8, 1, 2, wd)) ||
	    !(s = atlas_quant_tensor(st, prefix, "weight_scale", true, dt_f8, 1, 2, sd)) ||
	    !(g = scalar(st, prefix, gname, dt_float, 3)))
		return ATLAS_EFORMAT;

	/* compressed-tensors stores the divisor: vLLM turns it into
	 * ModelOpt's multiplier weight_scale_2 as 1 / weight_global_scale */
	float gs = atlas_quant_scale(g, 0);
	if (!isfinite(gs) || (ct && gs == 0.0f))
		return atlas_error(ATLAS_EFORMAT, "'%s.%s' is %g, expected finite%s", prefix, gname,
				   (double)gs, ct ? " and non-zero" : "");
	v->q = w->data;
	v->s = s->data;
	v->gm = ct ? 1.0f / gs : gs;
	return 1;
}

void atlas_quant_fp4_dequant(const struct atlas_quant_fp4 *v, int64_t out, int64_t in, float *dst)
{
	/* per group of 16: (f8(scale) times the global multiplier) first, then
	 * times e2m1, the order of vLLM's reference dequantization */
	const int64_t ng = in / 16;
	for (int64_t r = 0; r < out; r++) {
		for (int64_t k = 0; k < ng; k++) {
			const float sc = atlas_f8e4m3_to_f32(v->s[r * ng + k]) * v->gm;
			const uint8_t *p = v->q + r * (in / 2) + k * 8;
			float *d = dst + r * in + k * 16;
			for (int j = 0; j < 8; j++) {
				d[2 * j] = atlas_e2m1_to_f32(p[j] & 15) * sc;
				d[2 * j + 1] = atlas_e2m1_to_f32(p[j] >> 4) * sc;
			}
		}
	}
}

int64_t atlas_quant_fp_bytes(const struct atlas_quant *q, const struct atlas_st *st,
			     const char *prefix)
{
	switch (q->method) {
	case ATLAS_QUANT_FP8:
		if (!find(st, prefix, "weight_scale_inv"))
			return 0;
		return nbytes(find(st, prefix, "weight")) +
		       nbytes(find(st, prefix, "weight_scale_inv"));
	case ATLAS_QUANT_CT_FP8:
		if (!find(st, prefix, "weight_scale"))
			return 0;
		return nbytes(find(st, prefix, "weight")) +
		       nbytes(find(st, prefix, "weight_scale"));
	case ATLAS_QUANT_NVFP4:
		if (!find(st, prefix, "weight_scale"))
			return 0;
		return nbytes(find(st, prefix, "weight")) +
		       nbytes(find(st, prefix, "weight_scale")) +
		       nbytes(find(st, prefix, "weight_scale_2"));
	case ATLAS_QUANT_CT_NVFP4:
		if (!find(st, prefix, "weight_packed"))
			return 0;
		return nbytes(find(st, prefix, "weight_packed")) +
		       nbytes(find(st, prefix, "weight_scale")) +
		       nbytes(find(st, prefix, "weight_global_scale"));
	default:
		return 0;
	}
}
