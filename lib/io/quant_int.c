/* quant_int.c - the integer weight-only formats dequantized at load (see
 * quant_internal.h): AWQ gemm, GPTQ (v1 and v2 checkpoints, desc_act's
 * g_idx) and compressed-tensors pack-quantized int4/int8.
 *
 * Every format stores small unsigned integers packed into I32 words,
 * value k of a word in bits [bits*k, bits*(k+1)) (AWQ shuffles which
 * column goes in which nibble), with one scale and zero point per group
 * of `in` and output row. Each format is unpacked in one place, its
 * _view function, into the canonical struct atlas_quant_int (quant.h):
 * a byte a value in W's row-major order and zero points and scales
 * [out, groups] with the format's offsets folded into the zeros. The
 * dequantizers are that view expanded, W[o][i] = (q - z) * s, exact in
 * FP32: |q - z| <= 2^8 and a 16-bit scale have a product of at most 24
 * significant bits. The view takes a byte a weight while it lives.
 *
 * Tensor data sit at any alignment in the mmap (the header has any
 * length), so words are read with memcpy. Every tensor's shape is
 * checked against out and in before it is indexed, and the safetensors
 * reader guarantees nbytes = numel * element size. */
#include "quant_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

static const enum atlas_dtype dt_i32[] = {ATLAS_DTYPE_I32};
static const enum atlas_dtype dt_shape[] = {ATLAS_DTYPE_I64, ATLAS_DTYPE_I32};
static const enum atlas_dtype dt_scale[] = {ATLAS_DTYPE_F16, ATLAS_DTYPE_BF16, ATLAS_DTYPE_F32};

/* True when st holds prefix.suffix. */
static bool has(const struct atlas_st *st, const char *prefix, const char *suffix)
{
	char name[1024];
	int n = snprintf(name, sizeof(name), "%s.%s", prefix, suffix);
	return n > 0 && (size_t)n < sizeof(name) && atlas_st_find(st, name);
}

/* The tensor prefix.suffix, which must be there, as 2-D [d0, d1];
 * NULL with the shared helper's message naming it otherwise. */
static const struct atlas_tensor_info *get2(const struct atlas_st *st, const char *prefix,
					    const char *suffix, const enum atlas_dtype *dts,
					    int ndt, int64_t d0, int64_t d1)
{
	const int64_t dims[2] = {d0, d1};
	return atlas_quant_tensor(st, prefix, suffix, true, dts, ndt, 2, dims);
}

/* Word i of an I32 tensor (its shape already checked to hold i). */
static uint32_t word(const struct atlas_tensor_info *t, int64_t i)
{
	uint32_t w;
	memcpy(&w, (const char *)t->data + 4 * i, 4);
	return w;
}

/* Element i of an I32 or I64 tensor. */
static int64_t int_at(const struct atlas_tensor_info *t, int64_t i)
{
	if (t->dtype == ATLAS_DTYPE_I64) {
		int64_t v;
		memcpy(&v, (const char *)t->data + 8 * i, 8);
		return v;
	}
	int32_t v;
	memcpy(&v, (const char *)t->data + 4 * i, 4);
	return v;
}

/* A last guard before indexing: t holds at least n elements. */
static int need(const struct atlas_tensor_info *t, int64_t n)
{
	if (n < 0 || t->nbytes / atlas_dtype_size(t->dtype) < (uint64_t)n)
		return atlas_error(ATLAS_EFORMAT, "'%s': %zu bytes, expected %lld elements",
				   t->name, t->nbytes, (long long)n);
	return 0;
}

/* min(a, b) for the loop bounds of the blocked unpacking */
static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* s[o * ng + r] for the scales t [ng, out] (AWQ, GPTQ: stored the other
 * way round), read in their order. */
static void scales_transposed(const struct atlas_tensor_info *t, int64_t ng, int64_t out, float *s)
{
	for (int64_t r = 0; r < ng; r++)
		for (int64_t o = 0; o < out; o++)
			s[o * ng + r] = atlas_quant_scale(t, r * out + o);
}

/* The group of each input column [in] into *out (malloc'd, the caller
 * frees) from the g_idx tensor, each value checked to lie in [0,
 * groups); *out stays NULL when there is no g_idx or it says i / g for
 * every i (most desc_act=false checkpoints write that one out). */
static int groups_of(const struct atlas_tensor_info *g_idx, int64_t in, int64_t g, int64_t groups,
		     int32_t **out)
{
	*out = NULL;
	if (!g_idx)
		return 0;
	int32_t *grp = malloc(sizeof(int32_t) * (size_t)in);
	if (!grp)
		return atlas_error(ATLAS_ENOMEM, "out of memory for %lld group indices",
				   (long long)in);
	bool seq = true;
	for (int64_t i = 0; i < in; i++) {
		int64_t v = int_at(g_idx, i);
		if (v < 0 || v >= groups) {
			free(grp);
			return atlas_error(
			    ATLAS_EFORMAT,
			    "'%s': group %lld of input %lld is out of range [0, %lld)", g_idx->name,
			    (long long)v, (long long)i, (long long)groups);
		}
		grp[i] = (int32_t)v;
		seq = seq && v == i / g;
	}
	if (seq)
		free(grp);
	else
		*out = grp;
	return 0;
}

/* The optional group-index tensor prefix.suffix as I32 [in]: *out is
 * NULL when it is absent. */
static int opt_g_idx(const struct atlas_st *st, const char *prefix, const char *suffix, int64_t in,
		     const struct atlas_tensor_info **out)
{
	*out = NULL;
	if (!has(st, prefix, suffix))
		return 0;
	const int64_t dims[1] = {in};
	*out = atlas_quant_tensor(st, prefix, suffix, true, dt_i32, 1, 1, dims);
	if (!*out)
		return ATLAS_EFORMAT;
	return need(*out, in);
}

/* --- the view -------------------------------------------------------- */

void atlas_quant_int_free(struct atlas_quant_int *v)
{
	free(v->q);
	free(v->grp);
	free(v->z);
	free(v->s);
	memset(v, 0, sizeof(*v));
}

/* v's arrays for W [out, in] in ng groups of g (v->grp set before, or
 * NULL); on failure everything in *v is freed and the message names
 * prefix.what. */
static int view_alloc(struct atlas_quant_int *v, int bits, int64_t out, int64_t in, int64_t g,
		      int64_t ng, const char *prefix, const char *what)
{
	v->bits = bits;
	v->g = g;
	v->ng = ng;
	v->q = malloc((size_t)(out * in));
	v->z = malloc(sizeof(int16_t) * (size_t)(out * ng));
	v->s = malloc(sizeof(float) * (size_t)(out * ng));
	if (!v->q || !v->z || !v->s) {
		atlas_quant_int_free(v);
		return atlas_error(ATLAS_ENOMEM, "'%s.%s': out of memory", prefix, what);
	}
	return 0;
}

void atlas_quant_int_dequant(const struct atlas_quant_int *v, int64_t out, int64_t in, float *dst)
{
	for (int64_t o = 0; o < out; o++) {
		const uint8_t *q = v->q + o * in;
		const int16_t *z = v->z + o * v->ng;
		const float *s = v->s + o * v->ng;
		float *d = dst + o * in;
		if (v->grp) {
			for (int64_t i = 0; i < in; i++)
				d[i] = (float)(q[i] - z[v->grp[i]]) * s[v->grp[i]];
			continue;
		}
		/* sequential groups: one zero and scale over a run of columns */
		for (int64_t r = 0; r < v->ng; r++) {
			const int zr = z[r];
			const float sr = s[r];
			for (int64_t i = r * v->g, i1 = min64(i + v->g, in); i < i1; i++)
				d[i] = (float)(q[i] - zr) * sr;
		}
	}
}

/* W from the format's view, then the view freed. */
static int expand(int rc, struct atlas_quant_int *v, int64_t out, int64_t in, float *dst)
{
	if (rc == 1)
		atlas_quant_int_dequant(v, out, in, dst);
	atlas_quant_int_free(v);
	return rc;
}

/* --- AWQ gemm -------------------------------------------------------- */

/* Column 8p + j of a packed word lives in nibble awq_rev[j]: AutoAWQ
 * packs nibble k from column [0, 2, 4, 6, 1, 3, 5, 7][k] (vLLM's
 * AWQ_REVERSE_ORDER undoes it). */
static const int awq_rev[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/* qweight I32 [in, out/8], qzeros I32 [in/g, out/8], scales [in/g, out]. */
int atlas_quant_awq_view(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
			 int64_t out, int64_t in, struct atlas_quant_int *v)
{
	memset(v, 0, sizeof(*v));
	if (!has(st, prefix, "qweight"))
		return 0;
	if (q->bits != 4)
		return atlas_error(ATLAS_EUNSUPPORTED, "'%s.qweight': awq with %d bits (only 4)",
				   prefix, q->bits);
	if (out <= 0 || in <= 0 || out % 8)
		return atlas_error(ATLAS_EFORMAT,
				   "'%s.qweight': awq needs out (%lld) a positive multiple of 8",
				   prefix, (long long)out);
	int64_t g = q->group_size == -1 ? in : q->group_size;
	if (g <= 0 || in % g)
		return atlas_error(ATLAS_EFORMAT,
				   "'%s.scales': group size %d does not divide in %lld", prefix,
				   q->group_size, (long long)in);
	int64_t ng = in / g, pw = out / 8;
	const struct atlas_tensor_info *qw = get2(st, prefix, "qweight", dt_i32, 1, in, pw);
	if (!qw)
		return ATLAS_EFORMAT;
	const struct atlas_tensor_info *qz = get2(st, prefix, "qzeros", dt_i32, 1, ng, pw);
	if (!qz)
		return ATLAS_EFORMAT;
	const struct atlas_tensor_info *sc = get2(st, prefix, "scales", dt_scale, 3, ng, out);
	if (!sc)
		return ATLAS_EFORMAT;
	int rc;
	if ((rc = need(qw, in * pw)) || (rc = need(qz, ng * pw)) || (rc = need(sc, ng * out)))
		return rc;
	if ((rc = view_alloc(v, 4, out, in, g, ng, prefix, "qzeros")))
		return rc;

	scales_transposed(sc, ng, out, v->s);
	for (int64_t r = 0; r < ng; r++)
		for (int64_t p = 0; p < pw; p++) {
			uint32_t w = word(qz, r * pw + p);
			for (int j = 0; j < 8; j++)
				v->z[(8 * p + j) * ng + r] =
				    (int16_t)((w >> (4 * awq_rev[j])) & 15u);
		}
	/* A word holds 8 rows of W at one column i: 64 columns at a time
	 * keep the writes to those rows within a cache line each. */
	for (int64_t i0 = 0; i0 < in; i0 += 64) {
		int64_t i1 = min64(i0 + 64, in);
		for (int64_t p = 0; p < pw; p++)
			for (int64_t i = i0; i < i1; i++) {
				uint32_t w = word(qw, i * pw + p);
				uint8_t *col = v->q + 8 * p * in + i;
				for (int j = 0; j < 8; j++)
					col[j * in] = (uint8_t)((w >> (4 * awq_rev[j])) & 15u);
			}
	}
	return 1;
}

int atlas_quant_awq(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		    int64_t out, int64_t in, float *dst)
{
	struct atlas_quant_int v;
	return expand(atlas_quant_awq_view(q, st, prefix, out, in, &v), &v, out, in, dst);
}

/* --- GPTQ ------------------------------------------------------------ */

/* qweight I32 [in/pack, out] packed along in, qzeros I32 [groups,
 * out/pack] packed along out, scales [groups, out], g_idx I32 [in]
 * optional. groups = ceil(in / g): AutoGPTQ sizes its buffers so and
 * gives input i group i / g, a partial last group included. */
int atlas_quant_gptq_view(const struct atlas_quant *q, const struct atlas_st *st,
			  const char *prefix, int64_t out, int64_t in, struct atlas_quant_int *v)
{
	memset(v, 0, sizeof(*v));
	if (!has(st, prefix, "qweight"))
		return 0;
	if (q->bits != 4 && q->bits != 8)
		return atlas_error(ATLAS_EUNSUPPORTED, "'%s.qweight': gptq with %d bits (4 or 8)",
				   prefix, q->bits);
	int bits = q->bits, pack = 32 / bits;
	uint32_t mask = (1u << bits) - 1;
	if (out <= 0 || in <= 0 || in % pack || out % pack)
		return atlas_error(ATLAS_EFORMAT,
				   "'%s.qweight': %d-bit gptq needs out (%lld) and in (%lld) "
				   "positive multiples of %d",
				   prefix, bits, (long long)out, (long long)in, pack);
	int64_t g = q->group_size == -1 ? in : q->group_size;
	if (g <= 0)
		return atlas_error(ATLAS_EFORMAT, "'%s.scales': group size %d", prefix,
				   q->group_size);
	/* a group wider than the row is the row (the view's g says so) */
	g = min64(g, in);
	int64_t ng = (in + g - 1) / g, pin = in / pack, pout = out / pack;
	const struct atlas_tensor_info *qw = get2(st, prefix, "qweight", dt_i32, 1, pin, out);
	if (!qw)
		return ATLAS_EFORMAT;
	const struct atlas_tensor_info *qz = get2(st, prefix, "qzeros", dt_i32, 1, ng, pout);
	if (!qz)
		return ATLAS_EFORMAT;
	const struct atlas_tensor_info *sc = get2(st, prefix, "scales", dt_scale, 3, ng, out);
	if (!sc)
		return ATLAS_EFORMAT;
	const struct atlas_tensor_info *gi;
	int rc = opt_g_idx(st, prefix, "g_idx", in, &gi);
	if (rc)
		return rc;
	if (q->desc_act && !gi)
		return atlas_error(ATLAS_EFORMAT, "'%s.g_idx' is missing (desc_act is set)",
				   prefix);
	if ((rc = need(qw, pin * out)) || (rc = need(qz, ng * pout)) || (rc = need(sc, ng * out)))
		return rc;
	if ((rc = groups_of(gi, in, g, ng, &v->grp)) ||
	    (rc = view_alloc(v, bits, out, in, g, ng, prefix, "qzeros")))
		return rc;

	scales_transposed(sc, ng, out, v->s);
	/* v1 checkpoints (AutoGPTQ) store zero - 1. */
	int zoff = q->gptq_v2 ? 0 : 1;
	for (int64_t r = 0; r < ng; r++)
		for (int64_t p = 0; p < pout; p++) {
			uint32_t w = word(qz, r * pout + p);
			for (int k = 0; k < pack; k++)
				v->z[(p * pack + k) * ng + r] =
				    (int16_t)((int)((w >> (bits * k)) & mask) + zoff);
		}
	/* A word holds `pack` consecutive columns of one row o: 64 rows at a
	 * time keep the rows being written in cache while r walks along them. */
	for (int64_t o0 = 0; o0 < out; o0 += 64) {
		int64_t o1 = min64(o0 + 64, out);
		for (int64_t r = 0; r < pin; r++)
			for (int64_t o = o0; o < o1; o++) {
				uint32_t w = word(qw, r * out + o);
				uint8_t *d = v->q + o * in + r * pack;
				for (int k = 0; k < pack; k++)
					d[k] = (uint8_t)((w >> (bits * k)) & mask);
			}
	}
	return 1;
}

int atlas_quant_gptq(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		     int64_t out, int64_t in, float *dst)
{
	struct atlas_quant_int v;
	return expand(atlas_quant_gptq_view(q, st, prefix, out, in, &v), &v, out, in, dst);
}

/* --- compressed-tensors pack-quantized ------------------------------- */

/* weight_shape, when present, must say [out, in]. */
static int ct_check_shape(const struct atlas_st *st, const char *prefix, int64_t out, int64_t in)
{
	if (!has(st, prefix, "weight_shape"))
		return 0;
	const int64_t dims[1] = {2};
	const struct atlas_tensor_info *t =
	    atlas_quant_tensor(st, prefix, "weight_shape", true, dt_shape, 2, 1, dims);
	if (!t)
		return ATLAS_EFORMAT;
	int rc = need(t, 2);
	if (rc)
		return rc;
	if (int_at(t, 0) != out || int_at(t, 1) != in)
		return atlas_error(ATLAS_EFORMAT,
				   "'%s.weight_shape' is [%lld, %lld], expected "
				   "[%lld, %lld]",
				   prefix, (long long)int_at(t, 0), (long long)int_at(t, 1),
				   (long long)out, (long long)in);
	return 0;
}

/* weight_packed I32 [out, ceil(in/pack)] packed along in (the last word
 * of a row padded), weight_scale [out, groups], weight_zero_point I32
 * [ceil(out/pack), groups] packed along out when asymmetric, values and
 * zero points stored + 2^(bits-1) (the view keeps them so, and gives a
 * symmetric weight the zero 2^(bits-1)); weight_g_idx I32 [in] optional
 * (actorder "group"). groups = in / g, or 1 for strategy channel. */
int atlas_quant_ct_int_view(const struct atlas_quant *q, const struct atlas_st *st,
			    const char *prefix, int64_t out, int64_t in, struct atlas_quant_int *v)
{
	memset(v, 0, sizeof(*v));
	if (!has(st, prefix, "weight_packed"))
		return 0;
	if (q->bits != 4 && q->bits != 8)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "'%s.weight_packed': pack-quantized with %d bits (4 or 8)",
				   prefix, q->bits);
	if (q->strategy != ATLAS_QS_GROUP && q->strategy != ATLAS_QS_CHANNEL)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "'%s.weight_scale': pack-quantized int needs strategy group or "
				   "channel",
				   prefix);
	if (out <= 0 || in <= 0)
		return atlas_error(ATLAS_EFORMAT, "'%s.weight_packed': empty shape [%lld, %lld]",
				   prefix, (long long)out, (long long)in);
	int bits = q->bits, pack = 32 / bits, half = 1 << (bits - 1);
	uint32_t mask = (1u << bits) - 1;
	int64_t g = q->strategy == ATLAS_QS_GROUP ? q->group_size : in;
	if (g <= 0 || in % g)
		return atlas_error(ATLAS_EFORMAT,
				   "'%s.weight_scale': group size %d does not divide in %lld",
				   prefix, q->group_size, (long long)in);
	int64_t ng = in / g, pin = (in + pack - 1) / pack, pout = (out + pack - 1) / pack;
	int rc = ct_check_shape(st, prefix, out, in);
	if (rc)
		return rc;
	const struct atlas_tensor_info *wp = get2(st, prefix, "weight_packed", dt_i32, 1, out, pin);
	if (!wp)
		return ATLAS_EFORMAT;
	const struct atlas_tensor_info *ws = get2(st, prefix, "weight_scale", dt_scale, 3, out, ng);
	if (!ws)
		return ATLAS_EFORMAT;
	const struct atlas_tensor_info *wz = NULL;
	if (!q->sym) {
		wz = get2(st, prefix, "weight_zero_point", dt_i32, 1, pout, ng);
		if (!wz)
			return ATLAS_EFORMAT;
		if ((rc = need(wz, pout * ng)))
			return rc;
	}
	const struct atlas_tensor_info *gi;
	if ((rc = opt_g_idx(st, prefix, "weight_g_idx", in, &gi)))
		return rc;
	if ((rc = need(wp, out * pin)) || (rc = need(ws, out * ng)))
		return rc;
	if ((rc = groups_of(gi, in, g, ng, &v->grp)) ||
	    (rc = view_alloc(v, bits, out, in, g, ng, prefix, "weight_scale")))
		return rc;

	for (int64_t k = 0; k < out * ng; k++)
		v->s[k] = atlas_quant_scale(ws, k);
	/* z [out, groups]: row o of W's zeros is field o % pack of row o / pack. */
	for (int64_t o = 0; o < out; o++)
		for (int64_t r = 0; r < ng; r++)
			v->z[o * ng + r] =
			    wz ? (int16_t)((word(wz, (o / pack) * ng + r) >> (bits * (o % pack))) &
					   mask)
			       : (int16_t)half;
	for (int64_t o = 0; o < out; o++)
		for (int64_t p = 0; p < pin; p++) {
			uint32_t w = word(wp, o * pin + p);
			for (int k = 0; k < pack && p * pack + k < in; k++)
				v->q[o * in + p * pack + k] = (uint8_t)((w >> (bits * k)) & mask);
		}
	return 1;
}

int atlas_quant_ct_int(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		       int64_t out, int64_t in, float *dst)
{
	struct atlas_quant_int v;
	return expand(atlas_quant_ct_int_view(q, st, prefix, out, in, &v), &v, out, in, dst);
}

/* --- stored size ----------------------------------------------------- */

int64_t atlas_quant_int_bytes(const struct atlas_quant *q, const struct atlas_st *st,
			      const char *prefix)
{
	static const char *const awq[] = {"qweight", "qzeros", "scales", NULL};
	static const char *const gptq[] = {"qweight", "qzeros", "scales", "g_idx", NULL};
	static const char *const ct[] = {"weight_packed", "weight_scale", "weight_zero_point",
					 "weight_shape",  "weight_g_idx", NULL};
	const char *const *sfx = q->method == ATLAS_QUANT_AWQ	   ? awq
				 : q->method == ATLAS_QUANT_GPTQ   ? gptq
				 : q->method == ATLAS_QUANT_CT_INT ? ct
								   : NULL;
	if (!sfx || !has(st, prefix, sfx[0]))
		return 0;
	int64_t bytes = 0;
	for (int k = 0; sfx[k]; k++) {
		char name[1024];
		int n = snprintf(name, sizeof(name), "%s.%s", prefix, sfx[k]);
		const struct atlas_tensor_info *t =
		    n > 0 && (size_t)n < sizeof(name) ? atlas_st_find(st, name) : NULL;
		if (t)
			bytes += (int64_t)t->nbytes;
	}
	return bytes;
}
