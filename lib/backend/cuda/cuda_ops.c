/* cuda_ops.c - the ops of the CUDA backend: argument checks and launch
 * shapes for the kernels of kernels/ABI.md. Every op only queues work on
 * the backend's stream. */
#include "cuda_internal.h"
#include "../kvq.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "kernel_args.h"

static int check_wdt(enum atlas_dtype wdt, const char *op)
{
	if (wdt == ATLAS_DTYPE_F32 || wdt == ATLAS_DTYPE_F16 || wdt == ATLAS_DTYPE_BF16)
		return 0;
	return atlas_error(ATLAS_EUNSUPPORTED, "cuda %s: unsupported weight dtype '%s'", op,
			   atlas_dtype_name(wdt));
}

/* The weight dtypes of the matmul ops: check_wdt's and the quantized
 * blobs (F8B, W4B, FP4B). */
static int check_mm_wdt(const struct atlas_backend *be, enum atlas_dtype wdt, const char *op)
{
	if ((wdt == ATLAS_DTYPE_F8B && be->f8b_weights) || (wdt == ATLAS_DTYPE_W4B && be->w4b_weights) ||
	    (wdt == ATLAS_DTYPE_FP4B && be->fp4b_weights))
		return 0;
	return check_wdt(wdt, op);
}

/* A quantized blob (backend.h): the ops convert it in their kernels, or
 * expand it to BF16 for the long products. */
static int is_blob(int wdt)
{
	return wdt == ATLAS_DTYPE_F8B || wdt == ATLAS_DTYPE_W4B || wdt == ATLAS_DTYPE_FP4B;
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

int atlas_cuda_gemv_rpb(const struct cuda_ctx *c, int64_t rows, int min, int fixed)
{
	if (fixed >= min) /* an ATLAS_CUDA_*_RPB choice, for A/B runs */
		return fixed;
	int rpb = 8;
	while (rpb > min && CEIL_DIV(rows, rpb) < 4 * (int64_t)(c->sms > 0 ? c->sms : 132))
		rpb /= 2;
	return rpb;
}

/* The decode-sized products of BF16 weights go to atlas_gemv (T = 1) or
 * the tensor-core GEMV (gemv_tc.cu, T = 2..ATLAS_CUDA_TC_MIN_T-1), other
 * weights to atlas_gemv (T <= 8), the rest to the GEMMs. In batch-invariant mode a row must get
 * the same bits whatever T is, so BF16 products of every T take the
 * tensor-core GEMV's sum order (its order does not depend on T or on a
 * row's place): the GEMV itself up to 16 rows, atlas_gemm_inv (the same
 * sums, GEMM-shaped) beyond, and from 33 rows atlas_gemm_tc_inv (the
 * same sums on wgmma) where it takes the shape; other weights take the
 * wmma/FMA GEMM. */
enum gemv_kind { GEMV_NONE, GEMV_FMA, GEMV_TC, GEMV_BULK };

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* W8A8 (ATLAS_FP8_W8A8=1): F8B products of w8a8_min_t rows or more
 * outside batch-invariant mode quantize x to FP8 and take the FP8 wgmma
 * GEMM (atlas_cuda_gemm_f8) instead of the weight-only paths. */
static int w8a8_wants(const struct atlas_backend *be, int wdt, int64_t T)
{
	const struct cuda_ctx *c = be->ctx;
	return c->w8a8 && !be->batch_invariant && wdt == ATLAS_DTYPE_F8B && T >= c->w8a8_min_t;
}

static enum gemv_kind gemv_pick(const struct atlas_backend *be, const struct atlas_gemv_args *a)
{
	const struct cuda_ctx *c = be->ctx;
	if (is_blob(a->wdt)) {
		/* the FP8 / 4-bit GEMV (up to f8_gemv_max_t rows; beyond, a
		 * BF16 copy and the GEMMs): in either mode, as it gives the
		 * BF16 GEMV's bits for the dequantized matrix */
		const enum atlas_cuda_kernel fma = a->wdt == ATLAS_DTYPE_W4B    ? ATLAS_CK_GEMV_W4
						   : a->wdt == ATLAS_DTYPE_FP4B ? ATLAS_CK_GEMV_FP4
										: ATLAS_CK_GEMV_F8;
		int ok = a->T <= c->f8_gemv_max_t && a->K % 8 == 0 && aligned16(a->x);
		for (int i = 0; i < a->nseg; i++)
			ok = ok && aligned16(a->seg[i].w);
		/* outside batch-invariant mode the fewest rows take the T = 1
		 * GEMV's FP8 / 4-bit / NVFP4 form (its own sums) */
		if (ok && !be->batch_invariant && a->T <= c->f8_fma_max_t && a->K % 16 == 0 &&
		    c->gemv_mode != 2 && c->kern[fma])
			return GEMV_FMA;
		return ok ? GEMV_TC : GEMV_NONE;
	}
	int bf = a->wdt == ATLAS_DTYPE_BF16 && a->K % 8 == 0 && aligned16(a->x);
	for (int i = 0; i < a->nseg; i++)
		bf = bf && aligned16(a->seg[i].w);
	const int tc = bf && c->kern[ATLAS_CK_GEMV_TC8] && c->kern[ATLAS_CK_GEMV_TC16] &&
		       c->kern[ATLAS_CK_GEMV_TC32] && c->kern[ATLAS_CK_GEMV_TC64];
	if (be->batch_invariant)
		return tc ? GEMV_TC : GEMV_NONE;
	/* ATLAS_CUDA_GEMV picks one kernel for the small T it can take
	 * (A/B measurements). By default T = 1 takes the CUDA-core GEMV and
	 * T = 2..64 the tensor-core one: on the H200, a Qwen3-8B decode step
	 * at batch 1 took 5.46 ms with the CUDA-core GEMV, 7.21 ms with the
	 * tensor-core one and 12.55 ms with the bulk-copy one; at batch 8 the
	 * tensor-core GEMV took 7.6 ms against 19.5 ms. A T = 1 kernel that
	 * split every launch's rows evenly over exactly the resident blocks
	 * (no tail wave) tied with atlas_gemv (5.50 against 5.45 ms) and lost
	 * badly once it also copied 64 KiB a block to shared memory before its
	 * PDL wait (6.61 ms): bench/h200-2026-12-02-f/NOTES.md */
	const int bulk = bf && c->kern[ATLAS_CK_GEMV_BULK] &&
			 a->T * a->K * 2 <= (int64_t)(ATLAS_GBK_SMEM_MAX - ATLAS_GBK_SMEM(0, 0));
	if (c->gemv_mode == 1 && a->T <= 8)
		return GEMV_FMA;
	if (c->gemv_mode == 3 && bulk && a->T <= 2)
		return GEMV_BULK;
	if (tc && a->T <= 64 && a->T < c->tc_min_t && (a->T >= 2 || c->gemv_mode == 2))
		return GEMV_TC;
	return a->T <= 8 ? GEMV_FMA : GEMV_NONE;
}

/* The products of a through atlas_gemm_inv in one launch: the tensor-core
 * GEMV's sums (a->rpb as gemv_launch chose it for these weights, so the
 * same K ranges) at GEMM speed (gemm_inv.cu), or from c->inv_wg_min_t
 * rows through its wgmma form atlas_gemm_tc_inv (gemm_tc.cu) where that
 * takes the shape. The token tile follows T
 * (32, 64 or 128); when the row tiles would leave SMs idle (a decode
 * batch) and there are several K ranges, each range gets its own blocks
 * and atlas_gemm_inv_reduce merges them (the partials in gemm_ws): the
 * same bits either way. 1 when it launched, 0 when it does not take the
 * call, < 0 on error. */
static int gemm_inv_launch(struct cuda_ctx *c, const struct atlas_gemv_args *a)
{
	const int v = a->T <= 32 ? 2 : a->T <= 64 ? 1 : 0;
	static const enum atlas_cuda_kernel kv[3] = {ATLAS_CK_GEMM_INV, ATLAS_CK_GEMM_INV_T64,
						     ATLAS_CK_GEMM_INV_T32};
	/* the wgmma form's tiles, when it takes these products */
	const int64_t wgt = a->T >= c->inv_wg_min_t ? atlas_cuda_gemm_tc_inv_tiles(c, a) : 0;
	if (!wgt && (a->T < c->inv_min_t || a->K <= 0 || !c->kern[kv[v]]))
		return 0;
	const int64_t bm = ATLAS_GINV_BM(v), bt = ATLAS_GINV_BT(v);
	struct atlas_ginv_args g = {
	    .x = a->x,
	    .T = a->T,
	    .K = a->K,
	    .nseg = a->swiglu ? 1 : a->nseg,
	    .wpr = 8 / a->rpb,
	    .swiglu = a->swiglu,
	    .out_f32 = a->out_f32,
	};
	int64_t bx = 0, rows = 0;
	for (int i = 0; i < g.nseg; i++) {
		g.w[i] = a->seg[i].w;
		g.bias[i] = a->swiglu ? NULL : a->seg[i].bias;
		g.out[i] = a->seg[i].out;
		g.N[i] = a->seg[i].N;
		g.nbx[i] = (int)CEIL_DIV(g.N[i], a->swiglu ? bm / 2 : bm);
		g.ws_off[i] = rows; /* times T * ranges below */
		bx += g.nbx[i];
		rows += a->swiglu ? 2 * g.N[i] : g.N[i];
	}
	if (a->swiglu)
		g.w[1] = a->seg[1].w;
	const int64_t by = CEIL_DIV(a->T, bt), sms = c->sms > 0 ? c->sms : 132;
	const int64_t nch = CEIL_DIV(a->K, 32), cpw = CEIL_DIV(nch, g.wpr);
	const int64_t ranges = CEIL_DIV(nch, cpw);
	/* split by K range when the tiles leave SMs idle: the wgmma form's
	 * block fills an SM (its shared memory), so half the SMs or fewer;
	 * two of gemm_inv's fit, so fewer than two a SM */
	int64_t bz = 1;
	if (ranges > 1 && (wgt ? 2 * wgt <= sms : bx * by < 2 * sms) && c->gemm_ws &&
	    c->kern[ATLAS_CK_GEMM_INV_REDUCE] && (size_t)(ranges * a->T * rows) * 4 <= c->gemm_ws_cap) {
		g.ws = c->gemm_ws;
		bz = ranges;
		for (int i = 0; i < g.nseg; i++)
			g.ws_off[i] *= a->T * ranges; /* [range][T][rows] per product */
	}
	void *args[] = {&g};
	int rc = wgt ? atlas_cuda_gemm_tc_inv(c, a, g.ws, g.ws_off, (int)bz)
		     : atlas_cuda_launch_z(c, kv[v], (unsigned)bx, (unsigned)by, (unsigned)bz, 256,
					   ATLAS_GINV_SMEM(v), args);
	if (rc || !g.ws)
		return rc ? rc : 1;
	int64_t most = 0;
	for (int i = 0; i < g.nseg; i++)
		most = g.N[i] > most ? g.N[i] : most;
	int64_t rb = CEIL_DIV(a->T * most, 256);
	rc = atlas_cuda_launch(c, ATLAS_CK_GEMM_INV_REDUCE, (unsigned)(rb < 4096 ? rb : 4096),
			       (unsigned)g.nseg, 256, 0, args);
	return rc ? rc : 1;
}

/* Launch atlas_gemv or atlas_gemv_tc* for the segments in a. */
static int gemv_launch(struct cuda_ctx *c, struct atlas_gemv_args *a, enum gemv_kind kind)
{
	int64_t blocks = 0, rows = 0;
	for (int i = 0; i < a->nseg; i++)
		rows += a->seg[i].N;
	if (a->swiglu)
		rows = 2 * a->seg[0].N;
	void *args[] = {a};
	if (kind == GEMV_BULK) {
		/* one block per SM at most: each streams a contiguous run of
		 * 8-row groups through its copy ring */
		const int64_t groups = a->swiglu ? CEIL_DIV(a->seg[0].N, 4) : CEIL_DIV(rows, 8);
		const int64_t sms = c->sms > 0 ? c->sms : 132;
		return atlas_cuda_launch(c, ATLAS_CK_GEMV_BULK,
					 (unsigned)(groups < sms ? groups : sms), 1, 288,
					 ATLAS_GBK_SMEM(a->T, a->K), args);
	}
	if (kind == GEMV_TC) {
		/* warp tiles of 16 rows per block: the most that still gives
		 * every SM four blocks, else 1 (then 8 warps split K) */
		const int64_t fpt = a->swiglu ? 8 : 16;
		const int64_t want = 4 * (int64_t)(c->sms > 0 ? c->sms : 132);
		a->rpb = 8;
		while (a->rpb > 1 && CEIL_DIV(rows, 16 * a->rpb) < want)
			a->rpb /= 2;
		for (int i = 0; i < (a->swiglu ? 1 : a->nseg); i++)
			blocks += CEIL_DIV(a->seg[i].N, fpt * a->rpb);
		const int inv = is_blob(a->wdt) ? 0 : gemm_inv_launch(c, a);
		if (inv)
			return inv < 0 ? inv : 0;
		const enum atlas_cuda_kernel k0 = a->wdt == ATLAS_DTYPE_F8B    ? ATLAS_CK_GEMV_TC8_F8
						  : a->wdt == ATLAS_DTYPE_W4B  ? ATLAS_CK_GEMV_TC8_W4
						  : a->wdt == ATLAS_DTYPE_FP4B ? ATLAS_CK_GEMV_TC8_FP4
									       : ATLAS_CK_GEMV_TC8;
		/* rows in groups of 64 (more only in batch-invariant mode) */
		const int64_t T = a->T;
		const char *x0 = a->x;
		char *o0[ATLAS_GEMV_MAXSEG];
		for (int i = 0; i < a->nseg; i++)
			o0[i] = a->seg[i].out;
		for (int64_t t0 = 0; t0 < T; t0 += 64) {
			const int64_t n = T - t0 < 64 ? T - t0 : 64;
			const int lg = n <= 8 ? 0 : n <= 16 ? 1 : n <= 32 ? 2 : 3;
			const enum atlas_cuda_kernel k = (enum atlas_cuda_kernel)(k0 + lg);
			a->T = n;
			a->x = x0 + (size_t)(t0 * a->K) * 2;
			for (int i = 0; i < a->nseg; i++)
				if (o0[i])
					a->seg[i].out = o0[i] + (size_t)(t0 * a->seg[i].N) *
								    (a->out_f32 ? 4 : 2);
			int rc = atlas_cuda_launch(c, k, (unsigned)blocks, 1, 256,
						   ATLAS_GTC_SMEM(1 << lg), args);
			if (rc)
				return rc;
		}
		return 0;
	}
	/* atlas_gemv_w4 and _fp4 take 16 rows a block (the mma's), the
	 * others 1..8 */
	a->rpb = a->wdt == ATLAS_DTYPE_W4B || a->wdt == ATLAS_DTYPE_FP4B
		     ? 16
		     : atlas_cuda_gemv_rpb(c, rows, a->swiglu ? 2 : 1, c->gemv_rpb);
	a->pre = c->gemv_pre;
	const int64_t fpb = a->swiglu ? a->rpb / 2 : a->rpb;
	for (int i = 0; i < (a->swiglu ? 1 : a->nseg); i++)
		blocks += CEIL_DIV(a->seg[i].N, fpb);
	const enum atlas_cuda_kernel k = a->wdt == ATLAS_DTYPE_F8B    ? ATLAS_CK_GEMV_F8
					 : a->wdt == ATLAS_DTYPE_W4B  ? ATLAS_CK_GEMV_W4
					 : a->wdt == ATLAS_DTYPE_FP4B ? ATLAS_CK_GEMV_FP4
								      : ATLAS_CK_GEMV;
	return atlas_cuda_launch(c, k, (unsigned)blocks, 1, 256, 0, args);
}

/* The blob weights w[0..n) (F8B, W4B or FP4B as wdt says, [N[i], K]
 * each) as BF16 copies in c->f8_ws (atlas_f8b_dequant, atlas_w4b_dequant,
 * atlas_fp4b_dequant), their
 * pointers in bw: the products longer than the quantized GEMVs take then
 * run the BF16 paths on the matrix they multiply by (the same bits in
 * batch-invariant mode). */
static int f8_expand(struct atlas_backend *be, enum atlas_dtype wdt, int n, const void *const *w,
		     const int64_t *N, int64_t K, const void **bw)
{
	struct cuda_ctx *c = be->ctx;
	const enum atlas_cuda_kernel dq = wdt == ATLAS_DTYPE_W4B    ? ATLAS_CK_W4B_DEQUANT
					  : wdt == ATLAS_DTYPE_FP4B ? ATLAS_CK_FP4B_DEQUANT
								    : ATLAS_CK_F8B_DEQUANT;
	size_t off[ATLAS_GEMV_MAXSEG], need = 0;
	for (int i = 0; i < n; i++) {
		off[i] = need;
		need += ((size_t)(N[i] * K) * 2 + 255) & ~(size_t)255;
	}
	if (!c->kern[dq])
		return atlas_error(ATLAS_EUNSUPPORTED, "cuda: kernel target %s has no %s", c->target,
				   atlas_cuda_kernel_name(dq));
	if (need > c->f8_ws_cap && c->capturing)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "cuda: a quantized product of more than %d rows cannot be captured "
				   "before one has run",
				   c->f8_gemv_max_t);
	int rc = atlas_cuda_scratch(be, &c->f8_ws, &c->f8_ws_cap, need);
	if (rc)
		return atlas_error_wrap(rc, "cuda: no memory for the BF16 copies of quantized weights "
					    "(%zu bytes)", need);
	const int64_t sms = c->sms > 0 ? c->sms : 132;
	for (int i = 0; i < n; i++) {
		void *dst = (char *)c->f8_ws + off[i];
		const void *src = w[i];
		const int64_t blocks = N[i] < 16 * sms ? N[i] : 16 * sms; /* rows a block */
		void *args[] = {&src, &dst};
		if ((rc = atlas_cuda_launch(c, dq, (unsigned)blocks, 1, 256, 0, args)))
			return rc;
		bw[i] = dst;
	}
	return 0;
}

/* The n products of one x through the tensor-core GEMM in one launch:
 * 1 when it launched, 0 when it does not take them, < 0 on error. */
static int gemm_tc(struct atlas_backend *be, int n, void *const *out, int out_f32, const void *x,
		   const void *const *w, const void *const *bias, enum atlas_dtype wdt, int64_t T,
		   const int64_t *N, int64_t K)
{
	struct cuda_ctx *c = be->ctx;
	if (be->batch_invariant || wdt != ATLAS_DTYPE_BF16 || T < c->tc_min_t ||
	    !c->kern[out_f32 ? ATLAS_CK_GEMM_TC_F32 : ATLAS_CK_GEMM_TC])
		return 0;
	return atlas_cuda_gemm_tc(c, n, out, out_f32, x, w, bias, T, N, K);
}

/* One product through the GEMM kernels (any T): the tensor-core GEMM when
 * it takes the shape, else the wmma/FMA tile kernel. */
static int gemm_one(struct atlas_backend *be, void *out, int out_f32, const void *x,
		    const void *w, const void *bias, enum atlas_dtype wdt, int64_t T, int64_t N,
		    int64_t K)
{
	struct cuda_ctx *c = be->ctx;
	int rc = gemm_tc(be, 1, &out, out_f32, x, &w, &bias, wdt, T, &N, K);
	if (rc)
		return rc < 0 ? rc : 0;
	int wd = (int)wdt;
	long long t = T, n = N, k = K;
	void *args[] = {&out, &x, &w, &bias, &wd, &t, &n, &k};
	return atlas_cuda_launch(c, out_f32 ? ATLAS_CK_GEMM_F32 : ATLAS_CK_GEMM,
				 (unsigned)CEIL_DIV(N, 64), (unsigned)CEIL_DIV(T, 64), 256, 0, args);
}

static int linear(struct atlas_backend *be, void *out, int out_f32, const void *x, const void *w,
		  const void *bias, enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	if (out_f32 ? check_wdt(wdt, "logits") : check_mm_wdt(be, wdt, "matmul"))
		return ATLAS_EUNSUPPORTED;
	if (T <= 0 || N <= 0)
		return 0;
	if (w8a8_wants(be, wdt, T) && !out_f32) {
		int rc = atlas_cuda_gemm_f8(be, 1, &out, x, &w, &bias, T, &N, K);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	struct atlas_gemv_args a = {0};
	a.seg[0] = (struct atlas_gemv_seg){w, bias, out, N};
	a.nseg = 1;
	a.x = x, a.T = T, a.K = K, a.wdt = (int)wdt, a.out_f32 = out_f32;
	enum gemv_kind kind = gemv_pick(be, &a);
	if (kind != GEMV_NONE)
		return gemv_launch(be->ctx, &a, kind);
	if (is_blob(wdt)) {
		const void *bw;
		int rc = f8_expand(be, wdt, 1, &w, &N, K, &bw);
		return rc ? rc : linear(be, out, out_f32, x, bw, bias, ATLAS_DTYPE_BF16, T, N, K);
	}
	return gemm_one(be, out, out_f32, x, w, bias, wdt, T, N, K);
}

static int op_matmul(struct atlas_backend *be, void *out, const void *x, const void *w,
		     const void *bias, enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	return linear(be, out, 0, x, w, bias, wdt, T, N, K);
}

static int op_logits(struct atlas_backend *be, float *out, const void *x, const void *w,
		     enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	return linear(be, out, 1, x, w, NULL, wdt, T, N, K);
}

static int op_matmul_multi(struct atlas_backend *be, int n, void *const *out, const void *x,
			   const void *const *w, const void *const *bias, enum atlas_dtype wdt,
			   int64_t T, const int64_t *N, int64_t K)
{
	if (n < 1 || n > ATLAS_GEMV_MAXSEG)
		return atlas_error(ATLAS_EINVAL, "cuda matmul_multi: %d products (1..%d)", n,
				   ATLAS_GEMV_MAXSEG);
	if (check_mm_wdt(be, wdt, "matmul"))
		return ATLAS_EUNSUPPORTED;
	if (T <= 0)
		return 0;
	struct atlas_gemv_args a = {0};
	a.nseg = n;
	a.x = x, a.T = T, a.K = K, a.wdt = (int)wdt;
	for (int i = 0; i < n; i++) {
		if (N[i] <= 0)
			return atlas_error(ATLAS_EINVAL, "cuda matmul_multi: product %d has N=%lld", i,
					   (long long)N[i]);
		a.seg[i] = (struct atlas_gemv_seg){w[i], bias ? bias[i] : NULL, out[i], N[i]};
	}
	if (w8a8_wants(be, wdt, T)) {
		int rc = atlas_cuda_gemm_f8(be, n, out, x, w, bias, T, N, K);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	enum gemv_kind kind = gemv_pick(be, &a);
	if (kind == GEMV_NONE && is_blob(wdt)) {
		const void *bw[ATLAS_GEMV_MAXSEG];
		int rc = f8_expand(be, wdt, n, w, N, K, bw);
		return rc ? rc : op_matmul_multi(be, n, out, x, bw, bias, ATLAS_DTYPE_BF16, T, N, K);
	}
	if (kind == GEMV_NONE) {
		int rc = gemm_tc(be, n, out, 0, x, w, bias, wdt, T, N, K);
		if (rc)
			return rc < 0 ? rc : 0;
		for (int i = 0; i < n; i++) {
			rc = N[i] > 0 ? gemm_one(be, out[i], 0, x, w[i], bias ? bias[i] : NULL,
						     wdt, T, N[i], K)
					  : 0;
			if (rc)
				return rc;
		}
		return 0;
	}
	return gemv_launch(be->ctx, &a, kind);
}

static int op_matmul_swiglu(struct atlas_backend *be, void *out, const void *x, const void *wg,
			    const void *wu, enum atlas_dtype wdt, int64_t T, int64_t F, int64_t K,
			    void *up_scratch)
{
	if (check_mm_wdt(be, wdt, "matmul"))
		return ATLAS_EUNSUPPORTED;
	if (T <= 0 || F <= 0)
		return 0;
	struct atlas_gemv_args a = {0};
	a.seg[0] = (struct atlas_gemv_seg){wg, NULL, out, F};
	a.seg[1] = (struct atlas_gemv_seg){wu, NULL, NULL, F};
	a.nseg = 2, a.swiglu = 1;
	a.x = x, a.T = T, a.K = K, a.wdt = (int)wdt;
	const void *const w2[2] = {wg, wu};
	const int64_t N2[2] = {F, F};
	if (w8a8_wants(be, wdt, T)) {
		void *const o2[2] = {out, up_scratch};
		int rc = atlas_cuda_gemm_f8(be, 2, o2, x, w2, NULL, T, N2, K);
		if (rc)
			return rc < 0 ? rc : be->swiglu(be, out, out, up_scratch, T, F);
	}
	enum gemv_kind kind = gemv_pick(be, &a);
	if (kind == GEMV_NONE && is_blob(wdt)) {
		const void *bw[2];
		int rc = f8_expand(be, wdt, 2, w2, N2, K, bw);
		return rc ? rc : op_matmul_swiglu(be, out, x, bw[0], bw[1], ATLAS_DTYPE_BF16, T, F, K,
						  up_scratch);
	}
	if (kind == GEMV_NONE) {
		/* gate and up in one launch when the tensor-core GEMM takes them */
		void *const outs[2] = {out, up_scratch};
		const void *const ws[2] = {wg, wu};
		const int64_t Ns[2] = {F, F};
		int rc = gemm_tc(be, 2, outs, 0, x, ws, NULL, wdt, T, Ns, K);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			rc = gemm_one(be, out, 0, x, wg, NULL, wdt, T, F, K);
			if (!rc)
				rc = gemm_one(be, up_scratch, 0, x, wu, NULL, wdt, T, F, K);
			if (rc)
				return rc;
		}
		return be->swiglu(be, out, out, up_scratch, T, F);
	}
	return gemv_launch(be->ctx, &a, kind);
}

static int op_qk_rope_store(struct atlas_backend *be, void *q, void *k, const void *v,
			    const void *qn, const void *kn, enum atlas_dtype nwdt, float eps,
			    const int32_t *pos, const float *inv_freq, void *kc, void *vc,
			    const int32_t *slot, int64_t T, int64_t H, int64_t Hkv, int64_t hd)
{
	if (hd % 2 || hd > 256 || (qn && check_wdt(nwdt, "qk_rope_store"))) {
		/* the separate ops (any even hd up to 1024) */
		int rc = 0;
		if (qn)
			rc = be->rmsnorm(be, q, q, qn, nwdt, T * H, hd, eps);
		if (!rc && kn)
			rc = be->rmsnorm(be, k, k, kn, nwdt, T * Hkv, hd, eps);
		if (!rc)
			rc = be->rope(be, q, pos, inv_freq, T, H, hd);
		if (!rc)
			rc = be->rope(be, k, pos, inv_freq, T, Hkv, hd);
		return rc ? rc : be->kv_store(be, kc, vc, k, v, slot, T, Hkv, hd);
	}
	int wd = (int)nwdt, kvf = (int)be->kv_dtype;
	long long t = T, h = H, hk = Hkv, d = hd;
	void *args[] = {&q, &k, &v, &qn, &kn, &wd, &eps, &pos, &inv_freq, &kc, &vc, &slot,
			&t, &h, &hk, &d, &kvf};
	if (atlas_kv_quantized(be->kv_dtype)) {
		int rc = atlas_kv_check(be->kv_dtype, hd);
		return rc ? rc : atlas_cuda_launch(be->ctx, ATLAS_CK_QK_ROPE_STORE_Q,
						   (unsigned)CEIL_DIV(T * (H + 2 * Hkv), 8), 1, 256,
						   0, args);
	}
	return atlas_cuda_launch(be->ctx, ATLAS_CK_QK_ROPE_STORE,
				 (unsigned)CEIL_DIV(T * (H + 2 * Hkv), 8), 1, 256, 0, args);
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
		       const int32_t *slot, int64_t T, int64_t Hkv, int64_t hd)
{
	long long t = T, r = Hkv * hd;
	if (atlas_kv_quantized(be->kv_dtype)) {
		/* one warp per (token, K or V, kv head) row (kv.cu) */
		long long hk = Hkv, d = hd;
		int kvf = (int)be->kv_dtype, rc = atlas_kv_check(be->kv_dtype, hd);
		void *args[] = {&kc, &vc, &k, &v, &slot, &t, &hk, &d, &kvf};
		return rc ? rc : atlas_cuda_launch(be->ctx, ATLAS_CK_KV_STORE_Q,
						   (unsigned)CEIL_DIV(T * 2 * Hkv, 8), 1, 256, 0, args);
	}
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
/* Outside batch-invariant mode a decode token may take up to 64 splits
 * (attention.cu's ATT_MAXSPLIT): the partition need not be fixed there. */
#define ATT_SPLITS_DECODE 64
#define ATT_MIN_KEYS 32

/* Batch-invariant mode: keys per split at least ATT_INV_MIN_KEYS, and at
 * most as many splits as the longest context this cache holds needs
 * (both constant for an engine, so a token's partition still depends on
 * its own position alone). Longer splits cut the blocks and merges of a
 * long prefill (each block's fixed cost: query, block table, partials,
 * counter) but give a short decode context fewer blocks. On the H200
 * (Qwen3-8B shape, 512-token context; bench/h200-2026-12-03-inv, 32 keys
 * in c6, the others in c8) 32, 128, 256 and 512 keys gave batch-1 decode
 * steps of 5.71, 5.76, 6.14 and 6.64 ms, batch 64 15.99, 14.85, 14.68,
 * 14.64 ms, and 2048-token prefills of 468, 436, 424 and 416 ms: 128. */
#define ATT_INV_MIN_KEYS 128

/* A prefill step over a quantized cache (kvq.h) on the flash kernel: the
 * rows its sequences attend to, dequantized into BF16 scratch laid out
 * n_seq x ceil(max_keys / B) blocks (atlas_kv_dequant, which also writes
 * that layout's block table after the scratch), then the flash kernel
 * over the scratch. The keys are the stored ones, so the result is the
 * split-K kernel's up to summation order and the BF16 rounding of the
 * dequantized rows (not used in batch-invariant mode, as for BF16).
 * 1 when done, 0 when the step cannot go this way (shapes, no kernel,
 * inside a capture, or no memory: the split-K kernel then runs it), or
 * an error. */
static int attention_prefill_q(struct atlas_backend *be, void *out, const void *q, const void *kc,
			       const void *vc, const struct atlas_kv_batch *b, int64_t T, int64_t H,
			       int64_t Hkv, int64_t hd, int64_t window, float scale)
{
	struct cuda_ctx *c = be->ctx;
	if (c->capturing || !c->kern[ATLAS_CK_KV_DEQUANT] || !c->kern[ATLAS_CK_ATT_PREFILL] ||
	    (hd != 64 && hd != 128) || b->max_keys <= 0 || b->n_seq <= 0 || b->block_size <= 0)
		return 0;
	const int64_t B = b->block_size, nblk = CEIL_DIV(b->max_keys, B);
	const size_t half = (size_t)(b->n_seq * nblk * B * Hkv * hd) * 2;
	const size_t need = 2 * half + (size_t)(b->n_seq * nblk) * sizeof(int32_t);
	if (need > ATLAS_CUDA_KVQ_WS_MAX || atlas_cuda_scratch(be, &c->kvq_ws, &c->kvq_ws_cap, need))
		return 0; /* the split-K kernel reads the cache itself */
	void *ko = c->kvq_ws, *vo = (char *)c->kvq_ws + half;
	int32_t *tab = (int32_t *)((char *)c->kvq_ws + 2 * half);
	long long t = T, mb = b->max_blocks, bs = B, nb = nblk, hk = Hkv, d = hd;
	int kvf = (int)be->kv_dtype;
	const int32_t *seq = b->seq_of, *pos = b->pos, *btab = b->block_tables;
	void *args[] = {&ko, &vo, &tab, &kc, &vc, &seq, &pos, &btab, &t, &mb, &bs, &nb, &hk, &d, &kvf};
	int rc = atlas_cuda_launch(c, ATLAS_CK_KV_DEQUANT, (unsigned)CEIL_DIV(nblk * B, 8),
				    (unsigned)b->n_seq, 256, 0, args);
	if (rc)
		return rc;
	struct atlas_kv_batch b2 = *b;
	b2.block_tables = tab;
	b2.max_blocks = nblk;
	return atlas_cuda_attention_prefill(c, out, q, ko, vo, &b2, T, H, Hkv, hd, window, scale);
}

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
	/* prefill-like steps: the tensor-core flash kernel (not in
	 * batch-invariant mode: a token's keys are then summed in another
	 * order than the split-K kernel sums them). It makes one pass per
	 * sequence present in a 64-token query tile, so it needs long runs of
	 * one sequence's tokens (16+ per sequence on average): a decode batch
	 * of 64 sequences would cost it 64 passes per tile, and split-K does
	 * such a batch in one launch */
	/* a quantized cache (kvq.h) is read by the split-K kernel's fp8 and
	 * q4 forms only */
	const bool quant = atlas_kv_quantized(be->kv_dtype);
	if (quant && atlas_kv_check(be->kv_dtype, hd))
		return ATLAS_EUNSUPPORTED;
	/* batch-invariant mode over a BF16 cache: the tensor-core kernels
	 * whose prefill and decode forms give a token the same bits */
	if (!quant && be->batch_invariant && c->att_inv) {
		int rc = atlas_cuda_attention_inv(c, out, q, kc, vc, b, T, H, Hkv, hd, window, scale);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	if (quant && !be->batch_invariant && T >= c->flash_min_t && T >= 16 * b->n_seq) {
		int rc = attention_prefill_q(be, out, q, kc, vc, b, T, H, Hkv, hd, window, scale);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	if (!quant && !be->batch_invariant && T >= c->flash_min_t && T >= 16 * b->n_seq &&
	    c->kern[ATLAS_CK_ATT_PREFILL]) {
		int rc = atlas_cuda_attention_prefill(c, out, q, kc, vc, b, T, H, Hkv, hd, window,
						      scale);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	/* decode steps outside batch-invariant mode: the invariant family's
	 * split form when asked (ATLAS_CUDA_ATT_TC=1, an A/B against
	 * split-K: scores and value sums on the tensor cores, a warp per
	 * (token, kv head, 128 keys)) */
	if (!quant && !be->batch_invariant && c->att_tc) {
		int rc = atlas_cuda_attention_inv(c, out, q, kc, vc, b, T, H, Hkv, hd, window, scale);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	/* tokens per launch: their partials must fit in att_part, their
	 * counters (one per token, kv head and group of 8 query heads) in
	 * att_cnt */
	const int64_t ngrp = CEIL_DIV(H / Hkv, 8);
	long long splits = ATT_SPLITS, minkeys = ATT_MIN_KEYS;
	if (be->batch_invariant) {
		minkeys = c->att_minkeys > 0 ? c->att_minkeys : ATT_INV_MIN_KEYS;
		int64_t most = CEIL_DIV(b->max_blocks * b->block_size, minkeys);
		/* outside a graph capture, no more splits than this step's
		 * longest context needs: a token's partition (ceil(keys /
		 * minkeys) splits) never reaches the cap either way, so its
		 * bits are the same, and a prefill launches far fewer blocks
		 * that would exit at once (a captured decode step keeps the
		 * cache's count: it is replayed as the context grows) */
		if (!c->capturing && b->max_keys > 0 && CEIL_DIV(b->max_keys, minkeys) < most)
			most = CEIL_DIV(b->max_keys, minkeys);
		splits = most < 1 ? 1 : most < ATT_SPLITS ? most : ATT_SPLITS;
	}
	if (!be->batch_invariant) {
		/* a batch whose (token, kv head, group) blocks already cover
		 * the SMs needs fewer splits, and every block of the grid costs
		 * a slot even when it exits at once (its token has fewer
		 * splits): about 3 blocks an SM, a power of two >= 2, a
		 * function of T alone (graph replays). On the H200 (Qwen3-8B,
		 * 256 tokens generated) the best fixed counts were 8, 2 and 2
		 * splits at batch 8, 32 and 64 (7.24, 8.53, 9.59 ms a step),
		 * against 7.39, 9.16 and 10.76 with 32. Up to ATT_SPLITS_DECODE
		 * (64): on the H100 a batch-1 step at a 32k context (Qwen3-8B
		 * shape, op by op) took 10.2 ms with 64 splits and 13.7 with 32
		 * (bench/h100-2026-12-05-kvq). */
		const int64_t base = T * Hkv * ngrp, want = CEIL_DIV(3 * (int64_t)c->sms, base);
		splits = 2;
		while (splits < want && splits < ATT_SPLITS_DECODE)
			splits *= 2;
		/* outside a capture, no more than the step's longest context
		 * uses (ns = min(splits, ceil(keys / minkeys)) is the same for
		 * every token either way: the same bits, fewer empty blocks) */
		if (c->att_minkeys > 0)
			minkeys = c->att_minkeys; /* A/B runs (ATLAS_CUDA_ATT_MINKEYS) */
		if (!c->capturing && b->max_keys > 0) {
			long long need = 2;
			while (need < CEIL_DIV(b->max_keys, minkeys) && need < splits)
				need *= 2;
			if (need < splits)
				splits = need;
		}
		if (c->att_splits > 0)
			splits = c->att_splits; /* A/B runs (ATLAS_CUDA_ATT_SPLITS) */
	}
	const size_t per_tok = (size_t)H * (size_t)splits * (size_t)(hd + 2) * sizeof(float);
	int64_t tg = c->att_part && c->att_cnt ? (int64_t)(c->att_cap / per_tok) : 0;
	const int64_t tg_cnt = (int64_t)(c->att_cnt_cap / sizeof(int) / (size_t)(Hkv * ngrp));
	if (tg > tg_cnt)
		tg = tg_cnt;
	const int split = hd % 8 == 0 && tg > 0 &&
			  (((uintptr_t)q | (uintptr_t)out | (uintptr_t)kc | (uintptr_t)vc) & 15) == 0;
	if (!split && quant)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "cuda attention: a %s KV cache needs 16-byte aligned q, out and cache",
				   atlas_kv_dtype_name(be->kv_dtype));
	if (!split) { /* the same for every token of these shapes */
		void *args[] = {&out, &q, &kc, &vc, &seq, &pos, &tab, &mb, &bs, &t, &h, &hk, &d, &wdw,
				&scale};
		return atlas_cuda_launch(c, ATLAS_CK_ATTENTION, (unsigned)(T * H), 1, 128, 0, args);
	}
	/* one launch per group of tokens: the kernel's last block of each
	 * (token, kv head, group) merges the splits (attention.cu) */
	/* batch-invariant mode: splits aligned to key 0 (split s = keys s *
	 * minkeys ..), the same positions for every token */
	int aligned = be->batch_invariant;
	for (int64_t t0 = 0; t0 < T; t0 += tg) {
		long long n = T - t0 < tg ? T - t0 : tg;
		const char *qq = (const char *)q + (size_t)(t0 * H * hd) * 2;
		char *oo = (char *)out + (size_t)(t0 * H * hd) * 2;
		const int32_t *sq = seq + t0, *ps = pos + t0;
		void *args[] = {&oo, &c->att_part, &c->att_cnt, &qq, &kc, &vc, &sq, &ps, &tab, &mb,
				&bs, &n, &h, &hk, &d, &wdw, &scale, &splits, &minkeys, &aligned};
		const enum atlas_cuda_kernel kid = !quant ? ATLAS_CK_ATT_PART
						   : be->kv_dtype == ATLAS_KV_FP8 ? ATLAS_CK_ATT_PART_FP8
						   : ATLAS_CK_ATT_PART_Q4;
		int rc = atlas_cuda_launch(c, kid, (unsigned)(n * Hkv * ngrp * splits), 1, 128, 0, args);
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
	/* 8 elements per thread on the vector path (act.cu) */
	const int vec = n % 8 == 0 && ((uintptr_t)out & 15) == 0 && ((uintptr_t)gate & 15) == 0 &&
			((uintptr_t)up & 15) == 0;
	return atlas_cuda_launch(be->ctx, ATLAS_CK_SWIGLU, (unsigned)CEIL_DIV(vec ? n / 8 : n, 256),
				 1, 256, 0, args);
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

/* The grammar masks of rows [i0, i0 + m) applied to their logits in place
 * (atlas_mask_logits): one upload of the masked rows' indices and words,
 * one launch. Rows without a mask are left alone. */
static int mask_rows(struct atlas_backend *be, const float *logits, int64_t i0, int64_t m,
		     int64_t V, const struct atlas_sample_args *a)
{
	struct cuda_ctx *c = be->ctx;
	int32_t rows[64];
	int nm = 0;
	for (int64_t i = 0; i < m; i++)
		if (a[i0 + i].mask)
			rows[nm++] = (int32_t)(i0 + i);
	if (!nm)
		return 0;
	if (!c->kern[ATLAS_CK_MASK_LOGITS])
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "kernel target %s has no atlas_mask_logits (grammar masks)", c->target);
	long long W = (V + 31) / 32;
	size_t head = 64 * sizeof(int32_t), bytes = head + (size_t)nm * (size_t)W * 4;
	uint32_t *stage = malloc(bytes);
	if (!stage)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	memcpy(stage, rows, (size_t)nm * sizeof(int32_t));
	for (int k = 0; k < nm; k++)
		memcpy((char *)stage + head + (size_t)k * W * 4, a[rows[k]].mask, (size_t)W * 4);
	int rc = atlas_cuda_scratch(be, &c->d_mask, &c->mask_cap, bytes);
	if (!rc)
		rc = be->upload(be, c->d_mask, stage, bytes);
	free(stage);
	if (rc)
		return rc;
	float *lg = (float *)logits; /* the model's logits scratch: writable */
	long long v = V;
	const int32_t *d_rows = c->d_mask;
	const uint32_t *d_words = (const uint32_t *)((char *)c->d_mask + head);
	void *args[] = {&lg, &v, &d_rows, &d_words, &W};
	return atlas_cuda_launch(c, ATLAS_CK_MASK_LOGITS, (unsigned)CEIL_DIV(W, 256), (unsigned)nm,
				 256, 0, args);
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
		if ((rc = mask_rows(be, logits, i0, m, V, a)))
			return rc;
		int greedy = c->kern[ATLAS_CK_ARGMAX] != NULL;
		for (int64_t i = 0; i < m; i++)
			greedy &= a[i0 + i].temperature == 0.0f;
		if (greedy) { /* every row argmax: many blocks a row, no args */
			if (!c->d_amx && !(c->d_amx = be->alloc(be, 64 * 12))) /* (zeroed) */
				return ATLAS_ENOMEM;
			int32_t *out = ids + i0;
			const float *rows = logits + i0 * V;
			unsigned *done = (unsigned *)(c->d_amx + 64);
			void *args[] = {&out, &rows, &v, &c->d_amx, &done};
			/* blocks of 8192 logits: one round of 16-byte loads each */
			long long nb = (V + 8191) / 8192;
			if (nb > 128)
				nb = 128;
			if ((rc = atlas_cuda_launch(c, ATLAS_CK_ARGMAX, (unsigned)nb, (unsigned)m, 256, 0,
						    args)))
				return rc;
			continue;
		}
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
	be->matmul_multi = op_matmul_multi;
	be->matmul_swiglu = op_matmul_swiglu;
	be->qk_rope_store = op_qk_rope_store;
	be->rope = op_rope;
	be->kv_store = op_kv_store;
	be->attention = op_attention;
	be->swiglu = op_swiglu;
	be->add = op_add;
	be->to_f32 = op_to_f32;
	be->sample = op_sample;
	be->moe = atlas_cuda_moe;
	be->moe_experts_read = atlas_cuda_moe_experts_read;
	be->moe_max_experts = ATLAS_MOE_MAX_E;
	be->fused_prepare = atlas_cuda_fused_prepare;
	be->fused_decode = atlas_cuda_fused_decode;
	be->fused_release = atlas_cuda_fused_release;
}

