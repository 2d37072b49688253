/* cuda_ops.c - the ops of the CUDA backend: argument checks and launch
 * shapes for the kernels of kernels/ABI.md. Every op only queues work on
 * the backend's stream. */
#include "cuda_internal.h"

#include <stdint.h>

#include "../../core/error.h"

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

static int check_wdt(enum atlas_dtype wdt, const char *op)
{
	if (wdt == ATLAS_DTYPE_F32 || wdt == ATLAS_DTYPE_F16 || wdt == ATLAS_DTYPE_BF16)
		return 0;
	return atlas_error(ATLAS_EUNSUPPORTED, "cuda %s: unsupported weight dtype '%s'", op,
			   atlas_dtype_name(wdt));
}

static int op_embed(struct atlas_backend *be, void *out, const void *table, enum atlas_dtype wdt,
		    const int32_t *ids, int64_t T, int64_t D)
{
	int w = (int)wdt;
	long long t = T, d = D;
	void *args[] = {&out, &table, &w, &ids, &t, &d};
	if (check_wdt(wdt, "embed"))
		return ATLAS_EUNSUPPORTED;
	return atlas_cuda_launch(be->ctx, ATLAS_CK_EMBED, (unsigned)T, 1, 256, 0, args);
}

static int op_rmsnorm(struct atlas_backend *be, void *out, const void *x, const void *w,
		      enum atlas_dtype wdt, int64_t R, int64_t D, float eps)
{
	int wd = (int)wdt;
	long long r = R, d = D;
	void *args[] = {&out, &x, &w, &wd, &r, &d, &eps};
	if (check_wdt(wdt, "rmsnorm"))
		return ATLAS_EUNSUPPORTED;
	return atlas_cuda_launch(be->ctx, ATLAS_CK_RMSNORM, (unsigned)R, 1, 256, 0, args);
}

static int op_add_rmsnorm(struct atlas_backend *be, void *res, const void *x, void *out,
			  const void *w, enum atlas_dtype wdt, int64_t R, int64_t D, float eps)
{
	int wd = (int)wdt;
	long long r = R, d = D;
	void *args[] = {&res, &x, &out, &w, &wd, &r, &d, &eps};
	if (check_wdt(wdt, "add_rmsnorm"))
		return ATLAS_EUNSUPPORTED;
	return atlas_cuda_launch(be->ctx, ATLAS_CK_ADD_RMSNORM, (unsigned)R, 1, 256, 0, args);
}

/* Output features per block of atlas_gemv: the most (fewest blocks, no
 * split of K) that still gives every SM four blocks or more; fewer
 * features per block split K across the block's warps instead. */
static int gemv_rows_per_block(const struct cuda_ctx *c, int64_t N)
{
	int rpb = 8;
	while (rpb > 1 && CEIL_DIV(N, rpb) < 4 * (int64_t)(c->sms > 0 ? c->sms : 132))
		rpb /= 2;
	return rpb;
}

static int op_matmul(struct atlas_backend *be, void *out, const void *x, const void *w,
		     const void *bias, enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	int wd = (int)wdt;
	long long t = T, n = N, k = K;
	int rpb = gemv_rows_per_block(be->ctx, N);
	void *args[] = {&out, &x, &w, &bias, &wd, &t, &n, &k, &rpb};
	if (check_wdt(wdt, "matmul"))
		return ATLAS_EUNSUPPORTED;
	if (T <= 0 || N <= 0)
		return 0;
	if (T <= 8 && !be->batch_invariant) /* gemv and gemm sum in different orders */
		return atlas_cuda_launch(be->ctx, ATLAS_CK_GEMV, (unsigned)CEIL_DIV(N, rpb), 1, 256,
					 0, args);
	return atlas_cuda_launch(be->ctx, ATLAS_CK_GEMM, (unsigned)CEIL_DIV(N, 64),
				 (unsigned)CEIL_DIV(T, 64), 256, 0, args);
}

static int op_logits(struct atlas_backend *be, float *out, const void *x, const void *w,
		     enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	int wd = (int)wdt;
	long long t = T, n = N, k = K;
	const void *bias = NULL;
	int rpb = gemv_rows_per_block(be->ctx, N);
	void *args[] = {&out, &x, &w, &bias, &wd, &t, &n, &k, &rpb};
	if (check_wdt(wdt, "logits"))
		return ATLAS_EUNSUPPORTED;
	if (T <= 0 || N <= 0)
		return 0;
	if (T <= 8 && !be->batch_invariant) /* gemv and gemm sum in different orders */
		return atlas_cuda_launch(be->ctx, ATLAS_CK_GEMV_F32, (unsigned)CEIL_DIV(N, rpb), 1,
					 256, 0, args);
	return atlas_cuda_launch(be->ctx, ATLAS_CK_GEMM_F32, (unsigned)CEIL_DIV(N, 64),
				 (unsigned)CEIL_DIV(T, 64), 256, 0, args);
}

static int op_rope(struct atlas_backend *be, void *x, const int32_t *pos, const float *inv_freq,
		   int64_t T, int64_t H, int64_t hd)
{
	long long t = T, h = H, d = hd;
	void *args[] = {&x, &pos, &inv_freq, &t, &h, &d};
	if (hd % 2 || hd > 1024)
		return atlas_error(ATLAS_EINVAL, "cuda rope: head_dim %lld is not supported",
				   (long long)hd);
	return atlas_cuda_launch(be->ctx, ATLAS_CK_ROPE, (unsigned)(T * H), 1, (unsigned)(hd / 2), 0,
				 args);
}

static int op_kv_store(struct atlas_backend *be, void *kc, void *vc, const void *k, const void *v,
		       const int32_t *slot, int64_t T, int64_t row)
{
	long long t = T, r = row;
	void *args[] = {&kc, &vc, &k, &v, &slot, &t, &r};
	return atlas_cuda_launch(be->ctx, ATLAS_CK_KV_STORE, (unsigned)T, 1, 256, 0, args);
}

/* Split-K attention: a token's keys go in at most ATT_SPLITS ranges of at
 * least ATT_MIN_KEYS keys (fixed constants, so a token's partition
 * depends only on its own position, never on the batch or on max_keys:
 * batch invariance, and graph replays as the context grows). With 32
 * splits a decode token of Qwen3-8B shape (8 kv heads) spreads over up
 * to 256 blocks; ATT_SPLITS <= ATT_MIN_KEYS keeps every split non-empty. */
#define ATT_SPLITS 32
#define ATT_MIN_KEYS 32

static int op_attention(struct atlas_backend *be, void *out, const void *q, const void *kc,
			const void *vc, const struct atlas_kv_batch *b, int64_t T, int64_t H,
			int64_t Hkv, int64_t hd, int64_t window, float scale)
{
	struct cuda_ctx *c = be->ctx;
	long long mb = b->max_blocks, bs = b->block_size, t = T, h = H, hk = Hkv, d = hd, wdw = window;
	const int32_t *seq = b->seq_of, *pos = b->pos, *tab = b->block_tables;
	if (hd > 256 || Hkv <= 0 || H % Hkv)
		return atlas_error(ATLAS_EINVAL, "cuda attention: H=%lld Hkv=%lld hd=%lld not supported",
				   (long long)H, (long long)Hkv, (long long)hd);
	/* tokens per launch pair: their partials must fit in att_part */
	const size_t per_tok = (size_t)H * ATT_SPLITS * (size_t)(hd + 2) * sizeof(float);
	const int64_t tg = c->att_part ? (int64_t)(c->att_cap / per_tok) : 0;
	const int split = hd % 8 == 0 && tg > 0 && ((uintptr_t)kc & 15) == 0 &&
			  ((uintptr_t)vc & 15) == 0;
	if (!split) { /* the same for every token of these shapes */
		void *args[] = {&out, &q, &kc, &vc, &seq, &pos, &tab, &mb, &bs, &t, &h, &hk, &d, &wdw,
				&scale};
		return atlas_cuda_launch(c, ATLAS_CK_ATTENTION, (unsigned)(T * H), 1, 128, 0, args);
	}
	long long splits = ATT_SPLITS, minkeys = ATT_MIN_KEYS;
	const int64_t ngrp = CEIL_DIV(H / Hkv, 8); /* query heads of a kv head, 8 per block */
	for (int64_t t0 = 0; t0 < T; t0 += tg) {
		long long n = T - t0 < tg ? T - t0 : tg;
		const char *qq = (const char *)q + (size_t)(t0 * H * hd) * 2;
		char *oo = (char *)out + (size_t)(t0 * H * hd) * 2;
		const int32_t *sq = seq + t0, *ps = pos + t0;
		void *pargs[] = {&c->att_part, &qq, &kc, &vc, &sq, &ps, &tab, &mb, &bs, &n, &h, &hk,
				 &d, &wdw, &scale, &splits, &minkeys};
		void *cargs[] = {&oo, &c->att_part, &ps, &n, &h, &d, &wdw, &splits, &minkeys};
		int rc = atlas_cuda_launch(c, ATLAS_CK_ATT_PART,
					   (unsigned)(n * Hkv * ngrp * ATT_SPLITS), 1, 128, 0, pargs);
		if (!rc)
			rc = atlas_cuda_launch(c, ATLAS_CK_ATT_COMBINE, (unsigned)(n * H), 1, 128, 0,
					       cargs);
		if (rc)
			return rc;
	}
	return 0;
}

static int op_swiglu(struct atlas_backend *be, void *out, const void *gate, const void *up,
		     int64_t T, int64_t F)
{
	long long n = T * F;
	void *args[] = {&out, &gate, &up, &n};
	return atlas_cuda_launch(be->ctx, ATLAS_CK_SWIGLU, (unsigned)CEIL_DIV(n, 256), 1, 256, 0,
				 args);
}

static int op_add(struct atlas_backend *be, void *y, const void *x, int64_t n)
{
	long long nn = n;
	void *args[] = {&y, &x, &nn};
	return atlas_cuda_launch(be->ctx, ATLAS_CK_ADD, (unsigned)CEIL_DIV(n, 256), 1, 256, 0, args);
}

static int op_to_f32(struct atlas_backend *be, float *host, const void *src, int64_t n)
{
	struct cuda_ctx *c = be->ctx;
	long long nn = n;
	if (n <= 0)
		return 0;
	int rc = atlas_cuda_scratch(be, (void **)&c->f32_stage, &c->f32_cap, (size_t)n * 4);
	if (rc)
		return rc;
	void *args[] = {&c->f32_stage, &src, &nn};
	rc = atlas_cuda_launch(c, ATLAS_CK_TO_F32, (unsigned)CEIL_DIV(n, 256), 1, 256, 0, args);
	return rc ? rc : be->download(be, host, c->f32_stage, (size_t)n * 4);
}

static int op_sample(struct atlas_backend *be, int32_t *ids, const float *logits, int64_t n,
		     int64_t V, const struct atlas_sample_args *a)
{
	struct cuda_ctx *c = be->ctx;
	float hostargs[5 * 64];
	long long v = V;
	int rc;
	for (int64_t i0 = 0; i0 < n; i0 += 64) { /* rows in groups of 64 */
		int64_t m = n - i0 < 64 ? n - i0 : 64;
		for (int64_t i = 0; i < m; i++) {
			hostargs[5 * i + 0] = a[i0 + i].temperature;
			hostargs[5 * i + 1] = (float)a[i0 + i].top_k;
			hostargs[5 * i + 2] = a[i0 + i].top_p;
			hostargs[5 * i + 3] = a[i0 + i].min_p;
			hostargs[5 * i + 4] = a[i0 + i].u;
		}
		if ((rc = atlas_cuda_scratch(be, (void **)&c->d_args, &c->args_cap, 5 * 64 * 4)) ||
		    (rc = atlas_cuda_scratch(be, (void **)&c->d_scratch, &c->scratch_cap,
					     (size_t)(64 * 2 * V) * 4)) ||
		    (rc = be->upload(be, c->d_args, hostargs, (size_t)(5 * m) * 4)))
			return rc;
		int32_t *out = ids + i0;
		const float *rows = logits + i0 * V;
		void *args[] = {&out, &rows, &v, &c->d_args, &c->d_scratch};
		if ((rc = atlas_cuda_launch(c, ATLAS_CK_SAMPLE, (unsigned)m, 1, 1024, 0, args)))
			return rc;
	}
	return 0;
}

void atlas_cuda_ops_init(struct atlas_backend *be)
{
	be->embed = op_embed;
	be->rmsnorm = op_rmsnorm;
	be->add_rmsnorm = op_add_rmsnorm;
	be->matmul = op_matmul;
	be->logits = op_logits;
	be->rope = op_rope;
	be->kv_store = op_kv_store;
	be->attention = op_attention;
	be->swiglu = op_swiglu;
	be->add = op_add;
	be->to_f32 = op_to_f32;
	be->sample = op_sample;
}
