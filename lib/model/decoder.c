/* decoder.c - the generic decoder: load and check weights.
 *
 * One pre-norm transformer for every family; family.h flags switch the
 * differences (QKV bias, q/k norm, sliding window, a mixture-of-experts
 * MLP in the layers the config makes sparse: moe.c binds those). The
 * forward pass reads like the paper:
 *
 *   x = embed(ids)
 *   for each layer:
 *     h = rmsnorm(x)                      (fused with the residual add)
 *     q, k, v = h Wq, h Wk, h Wv          (+ biases; + per-head norm)
 *     rope(q, k); append k, v to the cache
 *     x += attention(q, cache) Wo
 *     h = rmsnorm(x)
 *     x += (silu(h Wg) * h Wu) Wd
 *   logits = rmsnorm(x) Wlm
 *
 * This file loads; forward.c runs the steps and kvpool.c keeps the paged
 * KV cache. Every buffer is allocated at load, none per step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/kvq.h"
#include "../comm/comm.h"
#include "../core/error.h"
#include "../core/log.h"
#include "decoder_internal.h"
#include "rope.h"
#include "tensors.h"

void atlas_model_default_params(struct atlas_model_params *p)
{
	*p = (struct atlas_model_params){0};
}

int atlas_model_rank(const struct atlas_model *m)
{
	return m->comm->rank;
}

int atlas_model_world(const struct atlas_model *m)
{
	return m->comm->world;
}

const struct atlas_config *atlas_model_config(const struct atlas_model *m)
{
	return &m->cfg;
}

const struct atlas_embed_config *atlas_model_embed_config(const struct atlas_model *m)
{
	return &m->emb;
}

const char *atlas_model_family(const struct atlas_model *m)
{
	return m->fam->name;
}

int64_t atlas_model_max_context(const struct atlas_model *m)
{
	return m->max_ctx;
}

int64_t atlas_model_max_seqs(const struct atlas_model *m)
{
	return m->max_seqs;
}

int64_t atlas_model_max_tokens(const struct atlas_model *m)
{
	return m->max_tokens;
}

int64_t atlas_model_weight_bytes(const struct atlas_model *m)
{
	int64_t n = (int64_t)(m->norm.nbytes + m->lm_head.nbytes);
	const struct weight *w;
	for (int64_t l = 0; l < m->cfg.num_layers; l++) {
		const struct layer *L = &m->layers[l];
		const struct weight *all[] = {&L->ln1, &L->ln2, &L->wq, &L->wk, &L->wv,
			&L->wo, &L->bq, &L->bk, &L->bv, &L->bo, &L->qn, &L->kn, &L->wg,
			&L->wu, &L->wd, &L->bg, &L->bu, &L->bd};
		for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
			w = all[i];
			n += (int64_t)w->nbytes;
		}
		n += atlas_moe_bytes_per_token(m, l) + atlas_hybrid_bytes_per_token(m, l);
	}
	return n;
}

/* A slice of a checkpoint matrix [d0, d1] (or vector [d0]): rows
 * [r0, r0 + nr) and columns [c0, c0 + nc). nr = d0, nc = d1: the whole. */
struct slice {
	int64_t r0, nr, c0, nc;
};

/* Hand rows/columns `sl` of tensor t to the backend. Whole rows are a
 * pointer offset into the mmap (zero copy); a column slice is strided,
 * so it is packed once into [nr, nc] host memory, which the model keeps
 * only when the backend uses it in place. */
static int upload_slice(struct atlas_model *m, struct weight *w,
			const struct atlas_tensor_info *t, int64_t d1, const struct slice *sl)
{
	size_t es = atlas_dtype_size(t->dtype);
	int64_t cols = d1 < 0 ? 1 : d1;
	const char *src = (const char *)t->data + (size_t)sl->r0 * (size_t)cols * es;
	size_t bytes = (size_t)sl->nr * (size_t)sl->nc * es;
	void *host = NULL;
	if (sl->nc != cols) {
		if (!(host = malloc(bytes ? bytes : 1)))
			return atlas_error(ATLAS_ENOMEM, "out of memory packing '%s'", t->name);
		size_t rb = (size_t)sl->nc * es;
		for (int64_t r = 0; r < sl->nr; r++)
			memcpy((char *)host + (size_t)r * rb,
			       src + ((size_t)r * (size_t)cols + (size_t)sl->c0) * es, rb);
		src = host;
	}
	w->p = m->be->weight_upload(m->be, src, bytes);
	if (!w->p) {
		free(host);
		return atlas_error_wrap(ATLAS_ENOMEM, "cannot load tensor '%s'", t->name);
	}
	if (host && w->p != host)
		free(host); /* the backend made its own copy */
	else
		w->own = host;
	w->dtype = t->dtype;
	w->nbytes = bytes;
	return 0;
}

/* Find tensor `name`, check its shape is [d0] or [d0, d1] (d1 < 0: 1-D)
 * and its dtype is one the backend reads, and hand the slice `sl` of it
 * (NULL: all of it) to the backend. An absent tensor is an error when
 * `required`, else leaves w empty. */
/* upload_slice of t, whose data is a malloc'd host buffer made for this
 * weight (dequantized or converted): the backend may use whole rows in
 * place (the CPU), and then the buffer lives as long as the weight;
 * otherwise it is freed here. */
static int upload_host(struct atlas_model *m, struct weight *w, const struct atlas_tensor_info *t,
		       int64_t d1, const struct slice *sl)
{
	int rc = upload_slice(m, w, t, d1, sl);
	const char *buf = t->data;
	if (!rc && (const char *)w->p >= buf && (const char *)w->p < buf + t->nbytes && !w->own)
		w->own = (void *)t->data;
	else
		free((void *)t->data);
	return rc;
}

/* Tensor t (a plain float dtype) converted to dt (F32 or BF16) on the
 * host and handed over as upload_slice hands it (slice sl of it). */
static int upload_converted(struct atlas_model *m, struct weight *w,
			    const struct atlas_tensor_info *t, int64_t d1, const struct slice *sl,
			    enum atlas_dtype dt)
{
	const size_t bytes = (size_t)t->numel * atlas_dtype_size(dt);
	void *buf = malloc(bytes ? bytes : 1);
	if (!buf)
		return atlas_error(ATLAS_ENOMEM, "out of memory converting '%s'", t->name);
	atlas_dtype_convert(buf, dt, t->data, t->dtype, t->numel);
	struct atlas_tensor_info c = *t;
	c.dtype = dt;
	c.data = buf;
	c.nbytes = bytes;
	return upload_host(m, w, &c, d1, sl);
}

/* Matrix `name` [d0, d1] stored quantized: dequantized (lib/io/quant.h)
 * into host memory in the activation type (FP32 on the CPU backend: exact
 * for every format; BF16 elsewhere) and handed over as bind_slice hands a
 * plain tensor. 1 when it was, 0 when the weight is stored plainly, or a
 * negative error naming the tensor. */
static int bind_quantized(struct atlas_model *m, struct weight *w, const char *name,
			  int64_t d0, int64_t d1, const struct slice *sl)
{
	const enum atlas_dtype dt =
	    m->be->act_dtype == ATLAS_DTYPE_F32 ? ATLAS_DTYPE_F32 : ATLAS_DTYPE_BF16;
	const size_t bytes = (size_t)d0 * (size_t)d1 * atlas_dtype_size(dt);
	void *buf = malloc(bytes ? bytes : 1);
	if (!buf)
		return atlas_error(ATLAS_ENOMEM, "out of memory dequantizing '%s'", name);
	int rc = atlas_quant_dequant(&m->quant, m->st, name, d0, d1, dt, buf);
	if (rc <= 0) {
		free(buf);
		return rc;
	}
	struct atlas_tensor_info t = {.name = name, .dtype = dt, .ndim = 2, .shape = {d0, d1},
				      .numel = d0 * d1, .data = buf, .nbytes = bytes,
				      .file = "(dequantized)"};
	struct slice all = {0, d0, 0, d1};
	rc = upload_host(m, w, &t, d1, sl ? sl : &all);
	return rc ? rc : 1;
}

/* Whether m keeps FP8 matrices at one byte a weight (ATLAS_DTYPE_F8B)
 * instead of dequantizing them: an FP8 checkpoint on a backend whose
 * matmul ops take F8B, unsplit (one rank), unless ATLAS_FP8_NATIVE=0
 * asks for the dequantized path (to compare the two). Decided once, at
 * load, into m->f8b. */
static bool f8b_native(const struct atlas_model *m)
{
	const char *e = getenv("ATLAS_FP8_NATIVE");
	return m->be->f8b_weights && (!m->comm || m->comm->world == 1) &&
	       (m->quant.method == ATLAS_QUANT_FP8 || m->quant.method == ATLAS_QUANT_CT_FP8) &&
	       !(e && !strcmp(e, "0"));
}

/* Hand the host blob (malloc'd, `bytes` long) of matrix `name` to the
 * backend as w, of dtype dt; the blob is freed or kept (a host backend
 * uses it in place). 1, or < 0 on error. */
static int upload_blob(struct atlas_model *m, struct weight *w, char *blob, int64_t bytes,
		       enum atlas_dtype dt, const char *name)
{
	w->p = m->be->weight_upload(m->be, blob, (size_t)bytes);
	if (!w->p) {
		free(blob);
		return atlas_error_wrap(ATLAS_ENOMEM, "cannot load tensor '%s'", name);
	}
	if (w->p == blob)
		w->own = blob; /* used in place (host backends) */
	else
		free(blob);
	w->dtype = dt;
	w->nbytes = (size_t)bytes;
	return 1;
}

/* Matrix `name` [d0, d1] of an FP8 checkpoint handed over as an F8B blob
 * (backend.h): its bytes as stored and its scales as FP32. 1 when it
 * was; 0 when it is not stored as FP8 or its layout does not suit the
 * kernels (a scale block neither a multiple of 32 columns nor the whole
 * row, or rows not a multiple of 8 bytes): dequantized then; < 0 on
 * error. */
static int bind_f8b(struct atlas_model *m, struct weight *w, const char *name, int64_t d0,
		    int64_t d1)
{
	struct atlas_quant_f8 v;
	int rc = atlas_quant_f8_view(&m->quant, m->st, name, d0, d1, &v);
	if (rc <= 0)
		return rc;
	const int64_t bytes = atlas_f8b_bytes(d0, d1, v.bo, v.bi);
	char head[ATLAS_F8B_HEAD];
	if (d1 % 8 || atlas_f8b_init(head, d0, d1, v.bo, v.bi))
		return 0;
	char *blob = malloc((size_t)bytes);
	if (!blob)
		return atlas_error(ATLAS_ENOMEM, "out of memory loading '%s'", name);
	memcpy(blob, head, sizeof(head));
	memcpy(blob + ATLAS_F8B_HEAD, v.q, (size_t)(d0 * d1));
	atlas_quant_f8_scales(&v, d0, d1, (float *)(blob + atlas_f8b_scale_off(d0, d1)));
	return upload_blob(m, w, blob, bytes, ATLAS_DTYPE_F8B, name);
}

/* Whether m keeps 4-bit integer matrices at half a byte a weight
 * (ATLAS_DTYPE_W4B): a 4-bit AWQ, GPTQ or compressed-tensors
 * pack-quantized checkpoint on a backend whose matmul ops take W4B,
 * unsplit and without act order (GPTQ desc_act: its g_idx scatters a
 * group's columns, so the model is dequantized), unless
 * ATLAS_W4_NATIVE=0. Decided once, at load, into m->w4b. */
static bool w4b_native(const struct atlas_model *m)
{
	const char *e = getenv("ATLAS_W4_NATIVE");
	const enum atlas_quant_method q = m->quant.method;
	return m->be->w4b_weights && (!m->comm || m->comm->world == 1) && m->quant.bits == 4 &&
	       !m->quant.desc_act &&
	       (q == ATLAS_QUANT_AWQ || q == ATLAS_QUANT_GPTQ || q == ATLAS_QUANT_CT_INT) &&
	       !(e && !strcmp(e, "0"));
}

/* Pack the view v of a 4-bit matrix [d0, d1] into the W4B blob (host
 * memory of atlas_w4b_bytes) whose head is already written. */
static void pack_w4b(char *blob, const struct atlas_quant_int *v, int64_t d0, int64_t d1)
{
	uint8_t *q = (uint8_t *)blob + ATLAS_W4B_HEAD;
	uint8_t *z = (uint8_t *)blob + atlas_w4b_z_off(d0, d1);
	uint16_t *s = (uint16_t *)(blob + atlas_w4b_s_off(d0, d1, v->g));
	for (int64_t i = 0; i < d0 * d1 / 2; i++)
		q[i] = (uint8_t)((v->q[2 * i] & 15) | (v->q[2 * i + 1] & 15) << 4);
	for (int64_t i = 0; i < d0 * v->ng; i++) {
		z[i] = (uint8_t)v->z[i];
		s[i] = atlas_f32_to_bf16(v->s[i]); /* FP16 scales (AWQ, GPTQ) rounded */
	}
}

/* Matrix `name` [d0, d1] of a 4-bit checkpoint handed over as a W4B
 * blob (backend.h). 1 when it was; 0 when it is not stored as 4-bit
 * integers or its layout does not suit the kernels (rows not a multiple
 * of 32 columns, groups neither a multiple of 32 columns nor the row,
 * an act-order g_idx, a zero point above 128): dequantized then;
 * < 0 on error. */
static int bind_w4b(struct atlas_model *m, struct weight *w, const char *name, int64_t d0,
		    int64_t d1)
{
	struct atlas_quant_int v;
	int rc = atlas_quant_int_view(&m->quant, m->st, name, d0, d1, &v);
	if (rc <= 0)
		return rc;
	char head[ATLAS_W4B_HEAD];
	bool fits = v.bits == 4 && !v.grp && !atlas_w4b_init(head, d0, d1, v.g);
	for (int64_t i = 0; fits && i < d0 * v.ng; i++)
		fits = v.z[i] >= 0 && v.z[i] <= 128;
	if (!fits) {
		atlas_quant_int_free(&v);
		m->w4b_dequant++;
		return 0;
	}
	const int64_t bytes = atlas_w4b_bytes(d0, d1, v.g);
	char *blob = malloc((size_t)bytes);
	if (!blob) {
		atlas_quant_int_free(&v);
		return atlas_error(ATLAS_ENOMEM, "out of memory loading '%s'", name);
	}
	memcpy(blob, head, sizeof(head));
	pack_w4b(blob, &v, d0, d1);
	atlas_quant_int_free(&v);
	m->w4b_kept++;
	return upload_blob(m, w, blob, bytes, ATLAS_DTYPE_W4B, name);
}

/* Whether m keeps NVFP4 matrices as stored (ATLAS_DTYPE_FP4B, 0.5625
 * bytes a weight): an NVFP4 checkpoint on a backend whose matmul ops
 * take FP4B, unsplit, unless ATLAS_FP4_NATIVE=0. Decided once, at load,
 * into m->fp4b. */
static bool fp4b_native(const struct atlas_model *m)
{
	const char *e = getenv("ATLAS_FP4_NATIVE");
	return m->be->fp4b_weights && (!m->comm || m->comm->world == 1) &&
	       (m->quant.method == ATLAS_QUANT_NVFP4 || m->quant.method == ATLAS_QUANT_CT_NVFP4) &&
	       !(e && !strcmp(e, "0"));
}

/* Matrix `name` [d0, d1] of an NVFP4 checkpoint handed over as an FP4B
 * blob (backend.h): its packed values and scale bytes as stored, the
 * global multiplier in the head. 1 when it was; 0 when it is not stored
 * as NVFP4 or its rows are not a multiple of 32 columns (dequantized
 * then); < 0 on error. */
static int bind_fp4b(struct atlas_model *m, struct weight *w, const char *name, int64_t d0,
		     int64_t d1)
{
	struct atlas_quant_fp4 v;
	int rc = atlas_quant_fp4_view(&m->quant, m->st, name, d0, d1, &v);
	if (rc <= 0)
		return rc;
	char head[ATLAS_FP4B_HEAD];
	if (atlas_fp4b_init(head, d0, d1, v.gm))
		return 0;
	const int64_t bytes = atlas_fp4b_bytes(d0, d1);
	char *blob = malloc((size_t)bytes);
	if (!blob)
		return atlas_error(ATLAS_ENOMEM, "out of memory loading '%s'", name);
	memcpy(blob, head, sizeof(head));
	memcpy(blob + ATLAS_FP4B_HEAD, v.q, (size_t)(d0 * d1 / 2));
	memcpy(blob + atlas_fp4b_s_off(d0, d1), v.s, (size_t)(d0 * (d1 / 16)));
	return upload_blob(m, w, blob, bytes, ATLAS_DTYPE_FP4B, name);
}

static int bind_slice(struct atlas_model *m, struct weight *w, const char *name,
		      int64_t d0, int64_t d1, int required, const struct slice *sl)
{
	const struct atlas_tensor_info *t = atlas_st_find(m->st, name);
	memset(w, 0, sizeof(*w));
	if (m->quant.method != ATLAS_QUANT_NONE && d1 >= 0 &&
	    (!t || (t->dtype != ATLAS_DTYPE_F32 && t->dtype != ATLAS_DTYPE_F16 &&
		    t->dtype != ATLAS_DTYPE_BF16))) {
		const bool whole = !sl || (sl->r0 == 0 && sl->nr == d0 && sl->c0 == 0 && sl->nc == d1);
		int rc = !whole || m->blob_off ? 0
			 : m->f8b	       ? bind_f8b(m, w, name, d0, d1)
			 : m->w4b	       ? bind_w4b(m, w, name, d0, d1)
			 : m->fp4b	       ? bind_fp4b(m, w, name, d0, d1)
					       : 0;
		if (!rc)
			rc = bind_quantized(m, w, name, d0, d1, sl);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	if (!t) {
		if (!required)
			return 0;
		return atlas_error(ATLAS_EFORMAT, "tensor '%s' is missing from the checkpoint", name);
	}
	int ndim = d1 < 0 ? 1 : 2;
	if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
		char got[128] = "", want[64];
		size_t off = 0;
		for (int i = 0; i < t->ndim && off < sizeof(got) - 24; i++)
			off += (size_t)snprintf(got + off, sizeof(got) - off, "%s%lld",
						i ? ", " : "", (long long)t->shape[i]);
		if (ndim == 1)
			snprintf(want, sizeof(want), "%lld", (long long)d0);
		else
			snprintf(want, sizeof(want), "%lld, %lld", (long long)d0, (long long)d1);
		return atlas_error(ATLAS_EFORMAT,
				   "tensor '%s' in '%s' has shape [%s], but config.json implies [%s]",
				   name, t->file, got, want);
	}
	if (t->dtype != ATLAS_DTYPE_F32 && t->dtype != ATLAS_DTYPE_F16 &&
	    t->dtype != ATLAS_DTYPE_BF16)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "tensor '%s' has dtype %s; supported here: F32, F16, BF16",
				   name, atlas_dtype_name(t->dtype));
	struct slice all = {0, d0, 0, d1 < 0 ? 1 : d1};
	/* a quantized checkpoint's projection biases follow their matrices'
	 * dequantized dtype (the matmul op takes one dtype for both) */
	const enum atlas_dtype qdt =
	    m->be->act_dtype == ATLAS_DTYPE_F32 ? ATLAS_DTYPE_F32 : ATLAS_DTYPE_BF16;
	const size_t nl = strlen(name);
	if (m->quant.method != ATLAS_QUANT_NONE && d1 < 0 && t->dtype != qdt && nl > 5 &&
	    nl < 250 && !strcmp(name + nl - 5, ".bias")) {
		char wn[256];
		snprintf(wn, sizeof(wn), "%.*s.weight", (int)(nl - 5), name);
		if (atlas_quant_stored_bytes(&m->quant, m->st, wn) > 0)
			return upload_converted(m, w, t, d1, sl ? sl : &all, qdt);
	}
	return upload_slice(m, w, t, d1, sl ? sl : &all);
}

static int bind(struct atlas_model *m, struct weight *w, const char *name,
		int64_t d0, int64_t d1, int required)
{
	return bind_slice(m, w, name, d0, d1, required, NULL);
}

int atlas_decoder_bind(struct atlas_model *m, struct weight *w, const char *name, int64_t d0,
		       int64_t d1, int required)
{
	return bind_slice(m, w, name, d0, d1, required, NULL);
}

int atlas_decoder_bind_dtype(struct atlas_model *m, struct weight *w, const char *name,
			     int64_t d0, int64_t d1, enum atlas_dtype dt)
{
	const struct atlas_tensor_info *t = atlas_st_find(m->st, name);
	int ndim = d1 < 0 ? 1 : 2;
	if (!t || (t->dtype != ATLAS_DTYPE_F32 && t->dtype != ATLAS_DTYPE_F16 &&
		   t->dtype != ATLAS_DTYPE_BF16) || t->dtype == dt ||
	    (dt != ATLAS_DTYPE_F32 && dt != ATLAS_DTYPE_BF16) || t->ndim != ndim ||
	    t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1))
		return bind_slice(m, w, name, d0, d1, 1, NULL); /* checks and refuses as usual */
	memset(w, 0, sizeof(*w));
	struct slice all = {0, d0, 0, d1 < 0 ? 1 : d1};
	return upload_converted(m, w, t, d1, &all, dt);
}

int atlas_decoder_bind_f32(struct atlas_model *m, struct weight *w, const char *name,
			   const int64_t *shape, int ndim, float add)
{
	const struct atlas_tensor_info *t = atlas_st_find(m->st, name);
	memset(w, 0, sizeof(*w));
	if (!t)
		return atlas_error(ATLAS_EFORMAT, "tensor '%s' is missing from the checkpoint", name);
	bool same = t->ndim == ndim;
	int64_t n = 1;
	for (int i = 0; i < ndim; i++) {
		same = same && t->shape[i] == shape[i];
		n *= shape[i];
	}
	if (!same)
		return atlas_error(ATLAS_EFORMAT,
				   "tensor '%s' in '%s' has a shape unlike the %d-D one config.json "
				   "implies (%lld elements)", name, t->file, ndim, (long long)n);
	if (t->dtype != ATLAS_DTYPE_F32 && t->dtype != ATLAS_DTYPE_F16 &&
	    t->dtype != ATLAS_DTYPE_BF16)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "tensor '%s' has dtype %s; supported here: F32, F16, BF16", name,
				   atlas_dtype_name(t->dtype));
	float *buf = malloc((size_t)n * sizeof(float) + 1);
	if (!buf)
		return atlas_error(ATLAS_ENOMEM, "out of memory converting '%s'", name);
	atlas_dtype_convert(buf, ATLAS_DTYPE_F32, t->data, t->dtype, n);
	for (int64_t i = 0; i < n; i++)
		buf[i] += add;
	struct atlas_tensor_info c = {.name = name, .dtype = ATLAS_DTYPE_F32, .ndim = 1,
				      .shape = {n}, .numel = n, .data = buf,
				      .nbytes = (size_t)n * sizeof(float), .file = t->file};
	struct slice all = {0, n, 0, 1};
	return upload_host(m, w, &c, -1, &all);
}

int atlas_decoder_bind_rows(struct atlas_model *m, struct weight *w, int n_src,
			    const char *const *names, const int64_t *rows, int64_t d1,
			    const int64_t *map, int64_t n)
{
	enum { MAX_SRC = 4 };
	const enum atlas_dtype qdt =
	    m->be->act_dtype == ATLAS_DTYPE_F32 ? ATLAS_DTYPE_F32 : ATLAS_DTYPE_BF16;
	const void *src[MAX_SRC] = {0};
	void *deq[MAX_SRC] = {0};
	enum atlas_dtype sdt[MAX_SRC];
	int64_t base[MAX_SRC + 1] = {0};
	int rc = 0;
	memset(w, 0, sizeof(*w));
	if (n_src < 1 || n_src > MAX_SRC)
		return atlas_error(ATLAS_EINVAL, "bind_rows: %d sources", n_src);
	/* each source as a plain matrix: mmapped, or dequantized */
	for (int i = 0; i < n_src && !rc; i++) {
		base[i + 1] = base[i] + rows[i];
		const size_t qb = (size_t)(rows[i] * d1) * atlas_dtype_size(qdt);
		if (m->quant.method != ATLAS_QUANT_NONE &&
		    atlas_quant_stored_bytes(&m->quant, m->st, names[i]) > 0) {
			if (!(deq[i] = malloc(qb ? qb : 1))) {
				rc = atlas_error(ATLAS_ENOMEM, "out of memory dequantizing '%s'", names[i]);
				break;
			}
			int q = atlas_quant_dequant(&m->quant, m->st, names[i], rows[i], d1, qdt, deq[i]);
			if (q < 0) {
				rc = q;
				break;
			}
			if (q > 0) {
				src[i] = deq[i];
				sdt[i] = qdt;
				continue;
			}
		}
		const struct atlas_tensor_info *t = atlas_st_find(m->st, names[i]);
		if (!t)
			rc = atlas_error(ATLAS_EFORMAT, "tensor '%s' is missing from the checkpoint",
					 names[i]);
		else if (t->ndim != 2 || t->shape[0] != rows[i] || t->shape[1] != d1)
			rc = atlas_error(ATLAS_EFORMAT,
					 "tensor '%s' in '%s' is not the [%lld, %lld] matrix config.json "
					 "implies", names[i], t->file, (long long)rows[i], (long long)d1);
		else if (t->dtype != ATLAS_DTYPE_F32 && t->dtype != ATLAS_DTYPE_F16 &&
			 t->dtype != ATLAS_DTYPE_BF16)
			rc = atlas_error(ATLAS_EUNSUPPORTED,
					 "tensor '%s' has dtype %s; supported here: F32, F16, BF16",
					 names[i], atlas_dtype_name(t->dtype));
		else {
			src[i] = t->data;
			sdt[i] = t->dtype;
		}
	}
	/* one dtype: the sources' own when they agree, else the dequantized one */
	enum atlas_dtype dt = sdt[0];
	for (int i = 1; !rc && i < n_src; i++)
		if (sdt[i] != dt)
			dt = qdt;
	const size_t es = rc ? 0 : atlas_dtype_size(dt), rb = (size_t)d1 * es;
	char *buf = rc ? NULL : malloc((size_t)n * rb + 1);
	if (!rc && !buf)
		rc = atlas_error(ATLAS_ENOMEM, "out of memory packing '%s'", names[0]);
	for (int64_t r = 0; !rc && r < n; r++) {
		int i = 0;
		if (map[r] < 0 || map[r] >= base[n_src]) {
			rc = atlas_error(ATLAS_EINVAL, "bind_rows: row %lld of %lld", (long long)map[r],
					 (long long)base[n_src]);
			break;
		}
		while (map[r] >= base[i + 1])
			i++;
		const int64_t sr = map[r] - base[i];
		const char *row = (const char *)src[i] + (size_t)sr * (size_t)d1 * atlas_dtype_size(sdt[i]);
		if (sdt[i] == dt)
			memcpy(buf + (size_t)r * rb, row, rb);
		else
			atlas_dtype_convert(buf + (size_t)r * rb, dt, row, sdt[i], d1);
	}
	for (int i = 0; i < n_src; i++)
		free(deq[i]);
	if (rc) {
		free(buf);
		return rc;
	}
	struct atlas_tensor_info c = {.name = names[0], .dtype = dt, .ndim = 2, .shape = {n, d1},
				      .numel = n * d1, .data = buf, .nbytes = (size_t)n * rb,
				      .file = "(gathered)"};
	struct slice all = {0, n, 0, d1};
	return upload_host(m, w, &c, d1, &all);
}

static int bind_layer(struct atlas_model *m, int64_t l)
{
	const struct atlas_config *c = &m->cfg;
	struct layer *L = &m->layers[l];
	int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
	int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
	int qkv_bias = m->fam->qkv_bias || c->attention_bias;
	int o_bias = c->attention_bias;
	/* this rank's slices (README-tp.md): q/k/v and gate/up by rows, o and
	 * down by columns; 1-D slices of biases and vectors alike */
	const struct slice q_rows = {m->q0 * hd, m->H_loc * hd, 0, D};
	const struct slice kv_rows = {m->kv0 * hd, m->Hkv_loc * hd, 0, D};
	const struct slice f_rows = {m->f0, m->F_loc, 0, D};
	const struct slice o_cols = {0, D, m->q0 * hd, m->H_loc * hd};
	const struct slice d_cols = {0, D, m->f0, m->F_loc};
	const struct slice qb = {m->q0 * hd, m->H_loc * hd, 0, 1};
	const struct slice kvb = {m->kv0 * hd, m->Hkv_loc * hd, 0, 1};
	const struct slice fb = {m->f0, m->F_loc, 0, 1};
	/* the o and down biases are added once, by rank 0, before the sums */
	const int first = m->comm->rank == 0;
	char n[160];
	int rc = 0;
#define B(field, suffix, d0, d1, req, sl) \
	do { \
		snprintf(n, sizeof(n), "%slayers.%lld.%s", m->tprefix, (long long)l, suffix); \
		if (!rc) rc = bind_slice(m, &L->field, n, d0, d1, req, sl); \
	} while (0)
	/* zero-centred norms (Qwen3-Next) are bound as their FP32 scale 1 + w */
#define NORM(field, suffix, d0) \
	do { \
		snprintf(n, sizeof(n), "%slayers.%lld.%s", m->tprefix, (long long)l, suffix); \
		if (!rc) \
			rc = m->fam->zero_norm \
				 ? atlas_decoder_bind_f32(m, &L->field, n, (const int64_t[]){d0}, 1, 1.0f) \
				 : bind_slice(m, &L->field, n, d0, -1, 1, NULL); \
	} while (0)
	NORM(ln1, "input_layernorm.weight", D);
	NORM(ln2, "post_attention_layernorm.weight", D);
	if (atlas_config_layer_is_linear(c, l)) {
		/* a Gated DeltaNet instead of attention (hybrid.c) */
		if (!rc)
			rc = atlas_hybrid_bind_layer(m, l);
		goto mlp;
	}
	/* gated attention: each head's query rows then its gate rows (one
	 * rank: hybrid models do not split) */
	const struct slice qg_rows = {0, 2 * qd, 0, D};
	if (m->fam->gated_attn)
		B(wq, "self_attn.q_proj.weight", 2 * qd, D, 1, &qg_rows);
	else
		B(wq, "self_attn.q_proj.weight", qd, D, 1, &q_rows);
	B(wk, "self_attn.k_proj.weight", kvd, D, 1, &kv_rows);
	B(wv, "self_attn.v_proj.weight", kvd, D, 1, &kv_rows);
	B(wo, "self_attn.o_proj.weight", D, qd, 1, &o_cols);
	B(bq, "self_attn.q_proj.bias", qd, -1, qkv_bias, &qb);
	B(bk, "self_attn.k_proj.bias", kvd, -1, qkv_bias, &kvb);
	B(bv, "self_attn.v_proj.bias", kvd, -1, qkv_bias, &kvb);
	if (first)
		B(bo, "self_attn.o_proj.bias", D, -1, o_bias, NULL);
	if (m->fam->qk_norm) {
		NORM(qn, "self_attn.q_norm.weight", hd);
		NORM(kn, "self_attn.k_norm.weight", hd);
	}
mlp:
	if (m->moe && atlas_config_layer_is_moe(c, l)) {
		if (!rc)
			rc = atlas_moe_bind_layer(m, l);
	} else {
		B(wg, "mlp.gate_proj.weight", F, D, 1, &f_rows);
		B(wu, "mlp.up_proj.weight", F, D, 1, &f_rows);
		B(wd, "mlp.down_proj.weight", D, F, 1, &d_cols);
		B(bg, "mlp.gate_proj.bias", F, -1, c->mlp_bias, &fb);
		B(bu, "mlp.up_proj.bias", F, -1, c->mlp_bias, &fb);
		if (first)
			B(bd, "mlp.down_proj.bias", D, -1, c->mlp_bias, NULL);
	}
#undef B
#undef NORM
	/* a bias and its matrix must agree in dtype: the matmul op takes one */
	const struct weight *pairs[][2] = {{&L->wq, &L->bq}, {&L->wk, &L->bk},
		{&L->wv, &L->bv}, {&L->wo, &L->bo}, {&L->wg, &L->bg}, {&L->wu, &L->bu},
		{&L->wd, &L->bd}};
	for (size_t i = 0; !rc && i < sizeof(pairs) / sizeof(pairs[0]); i++)
		if (pairs[i][1]->p && pairs[i][1]->dtype != pairs[i][0]->dtype)
			rc = atlas_error(ATLAS_EUNSUPPORTED,
					 "layer %lld: a bias with a dtype unlike its weight's is not supported",
					 (long long)l);
	return rc;
}

int atlas_decoder_set_parallel(struct atlas_model *m, struct atlas_comm *comm)
{
	const struct atlas_config *c = &m->cfg;
	if (!comm) {
		if (!(comm = atlas_comm_single_new()))
			return ATLAS_ENOMEM;
		m->own_comm = true;
	}
	m->comm = comm;
	int64_t P = comm->world, r = comm->rank;
	int64_t H = c->num_heads, Hkv = c->num_kv_heads, F = c->intermediate_size;
	if (P < 1 || r < 0 || r >= P)
		return atlas_error(ATLAS_EINVAL, "rank %lld of a world of %lld", (long long)r,
				   (long long)P);
	if (H % P)
		return atlas_error(ATLAS_EINVAL,
				   "tensor parallelism over %lld ranks needs num_attention_heads (%lld) "
				   "to be a multiple of %lld",
				   (long long)P, (long long)H, (long long)P);
	if (Hkv % P && P % Hkv)
		return atlas_error(ATLAS_EINVAL,
				   "tensor parallelism over %lld ranks needs num_key_value_heads (%lld) "
				   "to be a multiple or a divisor of %lld",
				   (long long)P, (long long)Hkv, (long long)P);
	if (F % P)
		return atlas_error(ATLAS_EINVAL,
				   "tensor parallelism over %lld ranks needs intermediate_size (%lld) "
				   "to be a multiple of %lld",
				   (long long)P, (long long)F, (long long)P);
	m->H_loc = H / P;
	m->q0 = r * m->H_loc;
	/* Hkv < P: the q heads of a rank all read one kv head (H/P divides
	 * H/Hkv), kept by every rank that needs it */
	m->Hkv_loc = Hkv >= P ? Hkv / P : 1;
	m->kv0 = Hkv >= P ? r * m->Hkv_loc : r * Hkv / P;
	m->F_loc = F / P;
	m->f0 = r * m->F_loc;
	return 0;
}

int atlas_decoder_size(struct atlas_model *m, const struct atlas_model_params *p)
{
	const struct atlas_config *c = &m->cfg;
	m->max_ctx = p && p->max_context > 0 ? p->max_context
		: (c->max_position < 4096 ? c->max_position : 4096);
	m->max_seqs = p && p->max_seqs > 0 ? p->max_seqs : 1;
	m->max_tokens = p && p->max_tokens > 0 ? p->max_tokens : 128;
	m->block_size = p && p->block_size > 0 ? p->block_size : 16;
	m->max_blocks = (m->max_ctx + m->block_size - 1) / m->block_size;
	m->n_blocks = p && p->kv_blocks > 0 ? p->kv_blocks : m->max_seqs * m->max_blocks;
	/* the cache's format: the backend's ops read it from be->kv_dtype;
	 * BF16 is the activation type on a BF16 backend */
	m->kv_dt = p ? p->kv_dtype : ATLAS_KV_AUTO;
	if (m->kv_dt == ATLAS_KV_BF16 && m->be->act_dtype == ATLAS_DTYPE_BF16)
		m->kv_dt = ATLAS_KV_AUTO;
	if ((unsigned)m->kv_dt > ATLAS_KV_Q4)
		return atlas_error(ATLAS_EINVAL, "unknown KV cache format %d", (int)m->kv_dt);
	int rc = atlas_kv_check(m->kv_dt, c->head_dim);
	if (rc)
		return rc;
	m->be->kv_dtype = m->kv_dt;
	m->kv_row = (size_t)atlas_kv_row_bytes(m->kv_dt, m->act, m->Hkv_loc, c->head_dim);
	return 0;
}

int atlas_decoder_check_config(const struct atlas_config *c, const struct atlas_family *fam)
{
	if (strcmp(c->hidden_act, "silu") && strcmp(c->hidden_act, "swish"))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "hidden_act '%s' is not supported (supported: silu)", c->hidden_act);
	if (c->head_dim % 2)
		return atlas_error(ATLAS_EFORMAT, "head_dim %lld must be even for RoPE",
				   (long long)c->head_dim);
	if (c->num_heads % c->num_kv_heads)
		return atlas_error(ATLAS_EFORMAT,
				   "num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
				   (long long)c->num_heads, (long long)c->num_kv_heads);
	return fam->check ? fam->check(c) : 0;
}

/* The moe op's scratch for max_tokens rows (0: a dense model). */
static size_t moe_scratch_bytes(const struct atlas_model *m)
{
	const struct atlas_config *c = &m->cfg;
	if (!m->fam->moe || c->num_experts <= 0)
		return 0;
	const struct atlas_moe_desc d = {
	    .n_experts = c->num_experts, .top_k = c->experts_per_tok, .D = c->hidden_size,
	    .F = c->moe_intermediate_size, .Fs = m->fam->moe->shared_expert ? c->shared_expert_intermediate_size : 0,
	};
	return atlas_moe_scratch_bytes(&d, m->max_tokens);
}

#define ALLOC(ptr, bytes) \
	do { \
		if (!((ptr) = m->be->alloc(m->be, (bytes)))) \
			goto nomem; \
	} while (0)

int atlas_decoder_alloc_buffers(struct atlas_model *m)
{
	const struct atlas_config *c = &m->cfg;
	size_t a = m->act;
	int64_t qd = m->H_loc * c->head_dim, kvd = m->Hkv_loc * c->head_dim;
	size_t hd2 = (size_t)c->head_dim / 2;
	float *freq = calloc(hd2 ? hd2 : 1, sizeof(float));
	if (!freq)
		goto nomem;
	ALLOC(m->x, m->max_tokens * c->hidden_size * a);
	ALLOC(m->h, m->max_tokens * c->hidden_size * a);
	ALLOC(m->o, m->max_tokens * c->hidden_size * a);
	ALLOC(m->q, m->max_tokens * qd * a);
	ALLOC(m->att, m->max_tokens * qd * a);
	ALLOC(m->k, m->max_tokens * kvd * a);
	ALLOC(m->v, m->max_tokens * kvd * a);
	ALLOC(m->g, m->max_tokens * m->F_loc * a);
	ALLOC(m->u, m->max_tokens * m->F_loc * a);
	ALLOC(m->logits, m->max_tokens * c->vocab_size * sizeof(float));
	ALLOC(m->sel, m->max_seqs * c->hidden_size * a);
	ALLOC(m->inv_freq, hd2 * sizeof(float));
	if (m->fam->gated_attn)
		ALLOC(m->qg, m->max_tokens * 2 * qd * a);
	if (c->n_linear) {
		const int64_t Hv = c->lin_v_heads, Z = Hv * c->lin_v_dim;
		const int64_t C = 2 * c->lin_k_heads * c->lin_k_dim + Z;
		ALLOC(m->qkvz, m->max_tokens * (C + Z) * a);
		ALLOC(m->ba, m->max_tokens * 2 * Hv * a);
		ALLOC(m->lin_o, m->max_tokens * Z * a);
		ALLOC(m->h_keep, m->max_tokens * c->hidden_size * a);
		ALLOC(m->d_gdn, m->max_seqs * sizeof(*m->d_gdn));
		ALLOC(m->gdn_scratch, m->max_tokens * C * sizeof(float));
		if (!(m->h_gdn = calloc((size_t)m->max_seqs, sizeof(*m->h_gdn))))
			goto nomem;
	}
	if (m->mtp) {
		const size_t zb = (size_t)(m->max_tokens * c->hidden_size) * a;
		ALLOC(m->mtp_hid, zb);
		ALLOC(m->mtp_zero, zb);
		void *z = calloc(1, zb);
		int rc = z ? m->be->upload(m->be, m->mtp_zero, z, zb) : ATLAS_ENOMEM;
		free(z);
		if (rc)
			goto nomem;
	}
	if (moe_scratch_bytes(m))
		ALLOC(m->moe_scratch, moe_scratch_bytes(m));
	if (moe_scratch_bytes(m) && m->comm->rank > 0)
		ALLOC(m->moe_zero, m->max_tokens * c->hidden_size * a);
	atlas_rope_inv_freq(c, freq);
	if (m->be->upload(m->be, m->inv_freq, freq, hd2 * sizeof(float))) {
		free(freq);
		return ATLAS_EIO;
	}
	free(freq);
	return 0;
nomem:
	free(freq);
	return atlas_error(ATLAS_ENOMEM, "cannot allocate activation buffers");
}

/* Bytes of tensor t this rank holds (bind_layer's slices). */
static size_t rank_bytes(const struct atlas_model *m, const struct atlas_tensor_info *t)
{
	const struct atlas_config *c = &m->cfg;
	size_t b = t->nbytes, pl = strlen(m->tprefix);
	if (strncmp(t->name, m->tprefix, pl) || strncmp(t->name + pl, "layers.", 7))
		return b;
	/* MoE weights are whole on every rank (forward.c) */
	if (strstr(t->name, ".experts.") || strstr(t->name, ".shared_expert") ||
	    strstr(t->name, "mlp.gate.") || strstr(t->name, "block_sparse_moe."))
		return b;
	if (strstr(t->name, ".q_proj.") || strstr(t->name, ".o_proj.weight"))
		return b / (size_t)c->num_heads * (size_t)m->H_loc;
	if (strstr(t->name, ".k_proj.") || strstr(t->name, ".v_proj."))
		return b / (size_t)c->num_kv_heads * (size_t)m->Hkv_loc;
	if (strstr(t->name, ".gate_proj.") || strstr(t->name, ".up_proj.") ||
	    strstr(t->name, ".down_proj.weight"))
		return b / (size_t)c->intermediate_size * (size_t)m->F_loc;
	return b;
}

/* Tell the backend how much memory the model will take (weights,
 * activations, KV pool, staging), so it can reserve one arena and report
 * a shortfall up front; and which kernels suit it. */
static int size_memory(struct atlas_model *m)
{
	const struct atlas_config *c = &m->cfg;
	struct atlas_backend *be = m->be;
	size_t a = m->act, pad = 256, w = 0;
	int64_t qd = m->H_loc * c->head_dim, kvd = m->Hkv_loc * c->head_dim;
	enum atlas_dtype wdt = ATLAS_DTYPE_BF16;
	const bool native = m->f8b;
	int64_t f8max = 0;
	for (int64_t i = 0; i < atlas_st_count(m->st); i++) {
		const struct atlas_tensor_info *t = atlas_st_get(m->st, i);
		/* an MTP head (mtp.*) is its own model (atlas_model_load_mtp),
		 * which holds only those */
		if (m->mtp != !strncmp(t->name, "mtp.", 4))
			continue;
		w += rank_bytes(m, t) + pad;
		/* a quantized matrix takes its dequantized size: up to 8 values
		 * a stored int32, 2 an NVFP4 byte, 1 an FP8 byte */
		if (m->quant.method != ATLAS_QUANT_NONE && t->ndim == 2) {
			const size_t per = t->dtype == ATLAS_DTYPE_I32 ? 8
					   : t->dtype == ATLAS_DTYPE_U8 ? 2
					   : t->dtype == ATLAS_DTYPE_F8_E4M3 ? 1 : 0;
			/* an F8B matrix stays as stored, with its scales as
			 * FP32 (the scale tensors' own bytes at most twice
			 * over) and the backend's BF16 copies of the widest
			 * pair (gate and up) for products longer than its
			 * GEMV takes; experts (the moe op) are dequantized */
			if (native && t->dtype == ATLAS_DTYPE_F8_E4M3 && !strstr(t->name, ".experts.")) {
				f8max = t->numel > f8max ? t->numel : f8max;
				continue;
			}
			if (native && t->dtype != ATLAS_DTYPE_F8_E4M3 && strstr(t->name, "scale"))
				w += 2 * rank_bytes(m, t);
			/* a W4B matrix likewise: packed values as stored (8 a
			 * word), zero points a byte and scales FP32 (at most
			 * twice their stored bytes) */
			if (m->w4b && t->dtype == ATLAS_DTYPE_I32 && !strstr(t->name, ".experts.") &&
			    (strstr(t->name, "qweight") || strstr(t->name, "weight_packed"))) {
				f8max = 8 * t->numel > f8max ? 8 * t->numel : f8max;
				continue;
			}
			if (m->w4b && !strstr(t->name, ".experts.") &&
			    (strstr(t->name, "scale") || strstr(t->name, "zero"))) {
				w += 2 * rank_bytes(m, t);
				continue;
			}
			/* an FP4B matrix stays as stored: packed values and
			 * their F8 scales */
			if (m->fp4b && !strstr(t->name, ".experts.") &&
			    (t->dtype == ATLAS_DTYPE_U8 || t->dtype == ATLAS_DTYPE_F8_E4M3)) {
				if (t->dtype == ATLAS_DTYPE_U8)
					f8max = 2 * t->numel > f8max ? 2 * t->numel : f8max;
				continue;
			}
			w += rank_bytes(m, t) / (t->dtype == ATLAS_DTYPE_I32 ? 4 : 1) * per * a;
		}
		if (t->ndim == 2 && (t->dtype == ATLAS_DTYPE_F32 || t->dtype == ATLAS_DTYPE_F16 ||
				     t->dtype == ATLAS_DTYPE_BF16))
			wdt = t->dtype; /* the matrices' type names the kernel target */
	}
	size_t rows = (size_t)m->max_tokens;
	size_t act = rows * a * (size_t)(3 * c->hidden_size + 2 * qd + 2 * kvd +
					 2 * m->F_loc) +
		     rows * 4 * (size_t)c->vocab_size +
		     (size_t)m->max_seqs * (size_t)c->hidden_size * a + moe_scratch_bytes(m) +
		     16 * pad;
	if (m->fam->gated_attn)
		act += rows * a * (size_t)(2 * qd);
	if (m->mtp)
		act += rows * a * (size_t)(2 * c->hidden_size);
	if (c->n_linear)
		act += rows * a * (size_t)(2 * c->lin_k_heads * c->lin_k_dim +
					   3 * c->lin_v_heads * c->lin_v_dim + 2 * c->lin_v_heads +
					   c->hidden_size) +
		       rows * 4 * (size_t)(2 * c->lin_k_heads * c->lin_k_dim +
					   c->lin_v_heads * c->lin_v_dim) +
		       (size_t)m->max_seqs * sizeof(struct atlas_gdn_item) + 2 * pad;
	size_t kv = 2 * (size_t)c->num_layers * (size_t)(m->n_blocks * m->block_size) * m->kv_row;
	size_t meta = (size_t)(ATLAS_STEP_HDR + 4 * (m->max_tokens + 63) +
			       m->max_seqs * (m->max_blocks + 1)) * 4 + 8 * pad;
	/* to_f32 staging and sampling scratch grow on first use */
	size_t scratch = rows * (size_t)c->vocab_size * 4 + 64 * 2 * (size_t)c->vocab_size * 4 + 4 * pad;
	size_t total = w + act + kv + meta + scratch + (size_t)c->head_dim * 4 + pad +
		       (size_t)f8max * 4 + (f8max ? 2 * pad : 0);
	if (be->reserve) {
		int rc = be->reserve(be, total);
		if (rc)
			return rc;
	}
	m->kern_quant = wdt == ATLAS_DTYPE_F32 ? "f32" : wdt == ATLAS_DTYPE_F16 ? "f16" : "bf16";
	return atlas_model_specialize(m);
}

int atlas_model_specialize(struct atlas_model *m)
{
	struct atlas_backend *be = m->be;
	if (!be->specialize || !m->kern_quant)
		return 0;
	return be->specialize(be, m->fam->name, m->kern_quant);
}

/* What a backend or a split needs for a hybrid family's parts: an error
 * naming the missing op, or 0. */
static int hybrid_refused(const struct atlas_model *m)
{
	const struct atlas_config *c = &m->cfg;
	const struct atlas_backend *be = m->be;
	const char *what = c->n_linear && !be->deltanet		       ? "linear-attention layers"
			   : m->fam->gated_attn && (!be->gate_split || !be->gate_apply)
			       ? "gated attention"
			   : c->rotary_dim && c->rotary_dim != c->head_dim && !be->rope_partial
			       ? "partial rotary embedding"
									       : NULL;
	if (what)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "'%s' has %s, which backend '%s' does not run yet (use --device cpu)",
				   m->fam->name, what, be->name);
	if ((c->n_linear || m->fam->gated_attn) && m->comm->world > 1)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "'%s' cannot be split over %d ranks: tensor parallelism of hybrid "
				   "models is not supported", m->fam->name, m->comm->world);
	if (c->n_linear && !m->fam->hybrid)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "'%s' has linear-attention layers (layer_types), which its family "
				   "does not have", m->fam->name);
	return 0;
}

/* An empty model on backend be, or NULL (said). */
static struct atlas_model *model_new(struct atlas_backend *be)
{
	struct atlas_model *m = calloc(1, sizeof(*m));
	if (!m) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	m->be = be;
	m->act = atlas_dtype_size(be->act_dtype);
	return m;
}

struct atlas_model *atlas_model_load(const char *dir, struct atlas_backend *be,
				     const struct atlas_model_params *p)
{
	struct atlas_model *m = model_new(be);
	int rc;
	if (!m)
		return NULL;
	if (atlas_config_load(dir, &m->cfg))
		goto fail;
	const struct atlas_config *c = &m->cfg;
	if (!(m->fam = atlas_family_find(c)) || atlas_decoder_check_config(c, m->fam) ||
	    atlas_decoder_set_parallel(m, p ? p->comm : NULL))
		goto fail;
	if (atlas_decoder_size(m, p))
		goto fail;
	if (m->fam->moe && !be->moe) {
		atlas_error(ATLAS_EUNSUPPORTED,
			    "'%s' is a mixture-of-experts model and backend '%s' has no MoE op "
			    "(use --device cpu)",
			    m->fam->name, be->name);
		goto fail;
	}
	if (m->fam->moe && be->moe_max_experts && c->num_experts > be->moe_max_experts) {
		atlas_error(ATLAS_EUNSUPPORTED,
			    "'%s' has %lld experts a layer; backend '%s' runs at most %d "
			    "(use --device cpu)", m->fam->name, (long long)c->num_experts,
			    be->name, be->moe_max_experts);
		goto fail;
	}
	if (hybrid_refused(m))
		goto fail;
	if (m->max_ctx > c->max_position)
		atlas_warn("context %lld is longer than the model's max_position_embeddings %lld; "
			   "output past that is untested territory for the model",
			   (long long)m->max_ctx, (long long)c->max_position);
	if (atlas_embed_config_load(dir, &m->emb))
		goto fail;
	if (m->emb.pooling && m->emb.dim > 0 && m->emb.dim != c->hidden_size) {
		atlas_error(ATLAS_EFORMAT, "the pooling config's word_embedding_dimension %lld "
			    "is not hidden_size %lld", (long long)m->emb.dim,
			    (long long)c->hidden_size);
		goto fail;
	}
	if (atlas_quant_load(dir, &m->quant))
		goto fail;
	if (!(m->st = atlas_st_open(dir)))
		goto fail;
	m->f8b = f8b_native(m);
	m->w4b = w4b_native(m);
	m->fp4b = fp4b_native(m);
	if (m->f8b)
		atlas_info("quantized checkpoint (%s): linear layers kept in FP8 (F8B, one byte a "
			   "weight), the rest dequantized to BF16", m->quant.name);
	else if (m->w4b)
		atlas_info("quantized checkpoint (%s): linear layers kept in 4 bits (W4B, half a "
			   "byte a weight), the rest dequantized to BF16", m->quant.name);
	else if (m->fp4b)
		atlas_info("quantized checkpoint (%s): linear layers kept in NVFP4 (FP4B, 0.5625 "
			   "bytes a weight), the rest dequantized to BF16", m->quant.name);
	else if (m->quant.method != ATLAS_QUANT_NONE)
		atlas_info("quantized checkpoint (%s): weights dequantized to %s at load", m->quant.name,
			   be->act_dtype == ATLAS_DTYPE_F32 ? "F32" : "BF16");
	m->tprefix = atlas_model_tensor_prefix(m->st);
	if (size_memory(m))
		goto fail;
	m->layers = calloc((size_t)c->num_layers, sizeof(*m->layers));
	if (m->fam->moe)
		m->moe = calloc((size_t)c->num_layers, sizeof(*m->moe));
	if (c->n_linear)
		m->lin = calloc((size_t)c->num_layers, sizeof(*m->lin));
	if (!m->layers || (m->fam->moe && !m->moe) || (c->n_linear && !m->lin)) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		goto fail;
	}
	char name[96];
	snprintf(name, sizeof(name), "%sembed_tokens.weight", m->tprefix);
	rc = bind(m, &m->embed, name, c->vocab_size, c->hidden_size, 1);
	snprintf(name, sizeof(name), "%snorm.weight", m->tprefix);
	if (!rc && m->fam->zero_norm)
		rc = atlas_decoder_bind_f32(m, &m->norm, name, (const int64_t[]){c->hidden_size}, 1,
					    1.0f);
	else if (!rc)
		rc = bind(m, &m->norm, name, c->hidden_size, -1, 1);
	/* an embedding model pools hidden states and never reads a head (a
	 * CausalLM export may still carry one: it stays unread) */
	if (!rc && m->emb.pooling == ATLAS_POOL_NONE && c->tie_embeddings)
		m->lm_head = m->embed;
	else if (!rc && m->emb.pooling == ATLAS_POOL_NONE &&
		 !atlas_st_find(m->st, "lm_head.weight") && !strstr(c->architecture, "ForCausalLM"))
		rc = atlas_error(ATLAS_EFORMAT,
				 "'%s' is a base model without an output head (no lm_head.weight) "
				 "and has no sentence-transformers pooling (modules.json with a "
				 "Pooling module): it can neither generate nor embed",
				 c->architecture[0] ? c->architecture : c->model_type);
	else if (!rc && m->emb.pooling == ATLAS_POOL_NONE)
		rc = bind(m, &m->lm_head, "lm_head.weight", c->vocab_size, c->hidden_size, 1);
	for (int64_t l = 0; !rc && l < c->num_layers; l++)
		rc = bind_layer(m, l);
	if (rc || atlas_decoder_alloc_buffers(m) || atlas_kvpool_init(m))
		goto fail;
	atlas_forward_fused_setup(m);
	atlas_info("loaded %s%s model from '%s': %lld layers, hidden %lld, %lld heads (%lld kv), vocab %lld, context %lld",
		   m->fam->name, m->emb.pooling ? " embedding" : "", dir, (long long)c->num_layers, (long long)c->hidden_size,
		   (long long)c->num_heads, (long long)c->num_kv_heads,
		   (long long)c->vocab_size, (long long)m->max_ctx);
	if (c->n_linear)
		atlas_info("hybrid: %lld of %lld layers are Gated DeltaNet (%lld/%lld heads of "
			   "%lld/%lld), %lld KiB of recurrent state a sequence",
			   (long long)c->n_linear, (long long)c->num_layers,
			   (long long)c->lin_k_heads, (long long)c->lin_v_heads,
			   (long long)c->lin_k_dim, (long long)c->lin_v_dim,
			   (long long)(m->state_floats * 4 >> 10));
	if (m->moe)
		atlas_info("mixture of experts: %lld experts, top %lld, expert width %lld%s",
			   (long long)c->num_experts, (long long)c->experts_per_tok,
			   (long long)c->moe_intermediate_size,
			   m->fam->moe->shared_expert ? ", a shared expert" : "");
	if (m->comm->world > 1)
		atlas_info("tensor-parallel rank %d of %d: q heads %lld.., kv heads %lld.. (%lld), "
			   "MLP rows %lld..%lld", m->comm->rank, m->comm->world, (long long)m->q0,
			   (long long)m->kv0, (long long)m->Hkv_loc, (long long)m->f0,
			   (long long)(m->f0 + m->F_loc - 1));
	atlas_info("KV cache: %lld blocks of %lld tokens, %s (%lld MiB)", (long long)m->n_blocks,
		   (long long)m->block_size,
		   m->kv_dt ? atlas_kv_dtype_name(m->kv_dt) : atlas_dtype_name(be->act_dtype),
		   (long long)((2 * c->num_layers * m->n_blocks * m->block_size *
				(int64_t)m->kv_row) >> 20));
	if (m->w4b_dequant)
		atlas_info("W4B: %d of %d linear matrices kept in 4 bits; %d dequantized (act-order "
			   "groups, groups not a multiple of 32 columns, or rows not a multiple of 32)",
			   m->w4b_kept, m->w4b_kept + m->w4b_dequant, m->w4b_dequant);
	atlas_info("weights read per token: %lld bytes", (long long)atlas_model_weight_bytes(m));
	return m;
fail:
	atlas_error_wrap(ATLAS_EFORMAT, "cannot load model '%s'", dir);
	atlas_model_free(m);
	return NULL;
}

struct atlas_model *atlas_decoder_mtp_new(struct atlas_model *target)
{
	struct atlas_model *m = model_new(target->be);
	if (!m)
		return NULL;
	m->mtp = true;
	m->head_borrowed = true;
	m->fam = target->fam;
	m->no_graphs = true; /* its steps gather hidden rows from pointers */
	target->rows_read = true;
	return m;
}

int atlas_decoder_mtp_parts(struct atlas_model *m, struct atlas_model *target)
{
	m->layers = calloc(1, sizeof(*m->layers));
	if (m->fam->moe)
		m->moe = calloc(1, sizeof(*m->moe));
	if (!m->layers || (m->fam->moe && !m->moe))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	m->embed = target->embed;
	m->lm_head = target->lm_head;
	return 0;
}

struct atlas_model *atlas_model_load_mtp(const char *dir, struct atlas_model *target,
					 const struct atlas_model_params *p)
{
	struct atlas_model *m = atlas_decoder_mtp_new(target);
	int rc;
	if (!m)
		return NULL;
	if (target->comm->world > 1) {
		atlas_error(ATLAS_EUNSUPPORTED, "an MTP head with tensor parallelism is not in "
			    "Atlas yet");
		goto fail;
	}
	if (!(m->st = atlas_st_open(dir)))
		goto fail;
	if (!atlas_st_find(m->st, "mtp.fc.weight")) {
		atlas_error(ATLAS_EFORMAT, "--speculative mtp needs the checkpoint's multi-token "
			    "prediction head (the mtp.* tensors Qwen3-Next and Qwen3.5 carry), "
			    "and this one has none (no mtp.fc.weight)");
		goto fail;
	}
	if (target->cfg.mtp_layers > 1) {
		atlas_error(ATLAS_EUNSUPPORTED, "the checkpoint's MTP head has %lld layers; Atlas "
			    "runs heads of one", (long long)target->cfg.mtp_layers);
		goto fail;
	}
	atlas_model_mtp_config(&target->cfg, m->st, &m->cfg);
	if (atlas_decoder_set_parallel(m, NULL) ||
	    atlas_decoder_size(m, p) || atlas_quant_load(dir, &m->quant))
		goto fail;
	const struct atlas_config *c = &m->cfg;
	m->f8b = f8b_native(m);
	m->w4b = w4b_native(m);
	m->fp4b = fp4b_native(m);
	m->tprefix = "mtp.";
	if (size_memory(m))
		goto fail;
	if (atlas_decoder_mtp_parts(m, target))
		goto fail;
	const int64_t D = c->hidden_size;
	const int64_t d1[] = {D};
	const struct slice e_cols = {0, D, 0, D}, h_cols = {0, D, D, D};
	const char *norms[] = {"mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight",
			       "mtp.pre_fc_norm_hidden.weight"};
	struct weight *nw[] = {&m->norm, &m->pre_e, &m->pre_h};
	rc = 0;
	for (int i = 0; !rc && i < 3; i++)
		rc = m->fam->zero_norm ? atlas_decoder_bind_f32(m, nw[i], norms[i], d1, 1, 1.0f)
				       : bind(m, nw[i], norms[i], D, -1, 1);
	if (!rc)
		rc = bind_slice(m, &m->fc_e, "mtp.fc.weight", D, 2 * D, 1, &e_cols);
	if (!rc)
		rc = bind_slice(m, &m->fc_h, "mtp.fc.weight", D, 2 * D, 1, &h_cols);
	if (rc || bind_layer(m, 0) || atlas_decoder_alloc_buffers(m) || atlas_kvpool_init(m))
		goto fail;
	atlas_info("loaded the MTP head of '%s': one layer%s, KV cache %lld blocks of %lld tokens",
		   dir, m->moe && m->moe[0].d.n_experts ? " with experts" : "",
		   (long long)m->n_blocks, (long long)m->block_size);
	/* the backend's kernels are the target's again */
	if (atlas_model_specialize(target))
		goto fail;
	return m;
fail:
	atlas_error_wrap(ATLAS_EFORMAT, "cannot load the MTP head of '%s'", dir);
	atlas_model_free(m);
	return NULL;
}

bool atlas_model_is_mtp(const struct atlas_model *m)
{
	return m->mtp;
}

static void release(struct atlas_model *m, struct weight *w)
{
	if (w->p)
		m->be->weight_release(m->be, w->p);
	free(w->own);
	w->p = NULL;
	w->own = NULL;
}

void atlas_decoder_release(struct atlas_model *m, struct weight *w)
{
	release(m, w);
}

void atlas_model_free(struct atlas_model *m)
{
	if (!m)
		return;
	struct atlas_backend *be = m->be;
	atlas_forward_release(m);
	if (m->layers) {
		for (int64_t l = 0; l < m->cfg.num_layers; l++) {
			struct weight *w = (struct weight *)&m->layers[l];
			for (size_t i = 0; i < sizeof(struct layer) / sizeof(struct weight); i++)
				release(m, &w[i]);
		}
		free(m->layers);
	}
	atlas_moe_release(m);
	atlas_hybrid_release(m);
	free(m->h_gdn);
	if (!m->head_borrowed) {
		if (m->lm_head.p != m->embed.p)
			release(m, &m->lm_head);
		release(m, &m->embed);
	}
	release(m, &m->norm);
	release(m, &m->fc_e);
	release(m, &m->fc_h);
	release(m, &m->pre_e);
	release(m, &m->pre_h);
	atlas_kvpool_release(m);
	void *bufs[] = {m->x, m->h, m->q, m->k, m->v, m->att, m->o, m->g, m->u,
		m->logits, m->sel, m->inv_freq, m->moe_scratch, m->moe_zero, m->qg, m->qkvz,
		m->ba, m->lin_o, m->d_gdn, m->gdn_scratch, m->mtp_hid, m->mtp_zero, m->h_keep};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (bufs[i])
			be->free(be, bufs[i]);
	atlas_st_close(m->st);
	atlas_quant_free(&m->quant);
	if (m->own_comm)
		m->comm->destroy(m->comm);
	free(m);
}

