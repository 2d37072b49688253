/* cuda_moe.c - the moe op of the CUDA backend: the kernels of moe.cu in
 * order (route, group, gate/up, down, combine; the shared expert through
 * the dense ops), with launch shapes that depend only on T and the
 * layer's shapes, so a decode graph can record the op.
 *
 * The kernels find an expert's matrices through a device copy of the
 * layer's pointer arrays (struct atlas_moe_desc holds host arrays). The
 * copy is made the first time a layer runs, outside any capture (a
 * model's first forward is a prefill, never captured), and checked
 * against the host arrays on every call, so a new model whose arrays
 * reuse an old address is never read through stale pointers.
 */
#include "cuda_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "../../core/log.h"
#include "kernel_args.h"

/* gemm_tc.cu's tile rows and block */
#define TCG_BM_ROWS 128
#define TCG_THREADS_MOE 384

/* One layer's pointer arrays: the host copy they were made from and
 * the device copy [3E] (gate, up, down). */
struct cuda_moe_tab {
	const void *const *key; /* the desc's wg array */
	const void **host;      /* [3E] the pointers uploaded */
	void **dev;             /* [3E] on the device */
	int64_t E;
	struct atlas_tmap *maps; /* NULL, or [3E] on the device: TMA maps of
				  * every expert's gate, up, down (grouped GEMM) */
	int bn_gu, bn_d;        /* their tile widths */
	int64_t F, D;           /* the shapes they were made for */
};

void atlas_cuda_moe_release(struct cuda_ctx *c)
{
	for (int i = 0; i < c->moe_ntabs; i++) {
		free(c->moe_tabs[i].host);
		cudaFree(c->moe_tabs[i].dev);
		if (c->moe_tabs[i].maps)
			cudaFree(c->moe_tabs[i].maps);
	}
	free(c->moe_tabs);
	c->moe_tabs = NULL;
	c->moe_ntabs = c->moe_tabs_cap = 0;
	if (c->moe_reads)
		cudaFree(c->moe_reads);
	c->moe_reads = NULL;
}

static int same_ptrs(const struct cuda_moe_tab *t, const struct atlas_moe_desc *d)
{
	const int64_t E = d->n_experts;
	return t->E == E && !memcmp(t->host, d->wg, (size_t)E * sizeof(void *)) &&
	       !memcmp(t->host + E, d->wu, (size_t)E * sizeof(void *)) &&
	       !memcmp(t->host + 2 * E, d->wd, (size_t)E * sizeof(void *));
}

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* Tile width of the grouped GEMM for N output columns. */
static int moe_bn(int64_t N)
{
	return N >= 512 ? 256 : 128;
}

/* The TMA maps of every expert of t (grouped GEMM), when the experts are
 * BF16 with TMA-friendly shapes and the GPU has the kernel; otherwise
 * t->maps stays NULL and prefill takes the GEMVs. */
static void expert_maps(struct cuda_ctx *c, struct cuda_moe_tab *t, const struct atlas_moe_desc *d)
{
	const int64_t E = d->n_experts;
	if (t->maps) {
		cudaFree(t->maps);
		t->maps = NULL;
	}
	if (d->wdt != ATLAS_DTYPE_BF16 || d->D % 8 || d->F % 8 || !c->kern[ATLAS_CK_MOE_GEMM_TC] ||
	    !c->kern[ATLAS_CK_MOE_GATHER] || d->D > INT32_MAX / 2 || d->F > INT32_MAX / 2)
		return;
	for (int64_t e = 0; e < E; e++)
		if (!aligned16(d->wg[e]) || !aligned16(d->wu[e]) || !aligned16(d->wd[e]))
			return;
	struct atlas_tmap *h = malloc((size_t)(3 * E) * sizeof(*h));
	if (!h)
		return;
	t->bn_gu = moe_bn(d->F);
	t->bn_d = moe_bn(d->D);
	int rc = 0;
	for (int64_t e = 0; e < E && !rc; e++)
		if ((rc = atlas_cuda_tmap(c, d->wg[e], d->F, d->D, (uint32_t)t->bn_gu, &h[e])) ||
		    (rc = atlas_cuda_tmap(c, d->wu[e], d->F, d->D, (uint32_t)t->bn_gu, &h[E + e])))
			break;
		else
			rc = atlas_cuda_tmap(c, d->wd[e], d->D, d->F, (uint32_t)t->bn_d, &h[2 * E + e]);
	if (!rc && cudaMalloc((void **)&t->maps, (size_t)(3 * E) * sizeof(*h)) == cudaSuccess &&
	    cudaMemcpy(t->maps, h, (size_t)(3 * E) * sizeof(*h), cudaMemcpyHostToDevice) == cudaSuccess) {
		t->F = d->F;
		t->D = d->D;
	} else {
		cudaGetLastError();
		if (t->maps)
			cudaFree(t->maps);
		t->maps = NULL;
		atlas_error_clear();
		atlas_debug("moe: grouped GEMM off for a layer (no tensor maps)");
	}
	free(h);
}

/* The device pointer array of d's experts (and their TMA maps), uploaded
 * when missing or stale (never during a capture: that fails the capture,
 * and the model then runs the step op by op). */
static struct cuda_moe_tab *expert_table(struct cuda_ctx *c, const struct atlas_moe_desc *d)
{
	const int64_t E = d->n_experts;
	struct cuda_moe_tab *t = NULL;
	for (int i = 0; i < c->moe_ntabs && !t; i++)
		if (c->moe_tabs[i].key == d->wg)
			t = &c->moe_tabs[i];
	if (t && same_ptrs(t, d) && t->F == d->F && t->D == d->D)
		return t;
	if (c->capturing) {
		atlas_error(ATLAS_EUNSUPPORTED,
			    "cuda moe: a layer's expert table is made outside a graph capture");
		return NULL;
	}
	if (!t) {
		if (c->moe_ntabs == c->moe_tabs_cap) {
			int cap = c->moe_tabs_cap ? 2 * c->moe_tabs_cap : 64;
			struct cuda_moe_tab *nt = realloc(c->moe_tabs, (size_t)cap * sizeof(*nt));
			if (!nt) {
				atlas_error(ATLAS_ENOMEM, "out of memory");
				return NULL;
			}
			c->moe_tabs = nt;
			c->moe_tabs_cap = cap;
		}
		t = &c->moe_tabs[c->moe_ntabs++];
		*t = (struct cuda_moe_tab){.key = d->wg};
	}
	if (t->E != E) {
		free(t->host);
		cudaFree(t->dev);
		t->dev = NULL;
		t->host = malloc((size_t)(3 * E) * sizeof(void *));
		if (!t->host || cudaMalloc((void **)&t->dev, (size_t)(3 * E) * sizeof(void *)) != cudaSuccess) {
			cudaGetLastError();
			free(t->host);
			t->host = NULL;
			t->dev = NULL;
			t->E = 0;
			atlas_error(ATLAS_ENOMEM, "cuda moe: cannot allocate an expert table");
			return NULL;
		}
		t->E = E;
	}
	memcpy(t->host, d->wg, (size_t)E * sizeof(void *));
	memcpy(t->host + E, d->wu, (size_t)E * sizeof(void *));
	memcpy(t->host + 2 * E, d->wd, (size_t)E * sizeof(void *));
	if (atlas_cuda_check(c, cudaMemcpyAsync(t->dev, t->host, (size_t)(3 * E) * sizeof(void *),
						cudaMemcpyHostToDevice, c->stream),
			     "expert table upload") ||
	    atlas_cuda_check(c, cudaStreamSynchronize(c->stream), "expert table upload"))
		return NULL;
	t->F = d->F;
	t->D = d->D;
	expert_maps(c, t, d);
	return t;
}

/* Warp tiles per block of the expert products: a function of the
 * matrix's shape (and the GPU) only, never of T, so that a token's sum
 * order does not change with the batch (moe.cu). The most (fewest
 * blocks, K split over the fewest warps) that still gives a one-token
 * step a block per SM over its top_k experts. On the H200 (Qwen3-30B-A3B
 * shape, ATLAS_CUDA_MOE_RPB=1/2/4/8) batch-1 steps took 5.08 / 4.76 /
 * 4.47 / 4.71 ms and batch-8 steps 13.8 / 11.4 / 11.1 / 11.5 ms; this rule
 * gives 4 for both of its products (it gave 2 when it asked for two
 * blocks per SM): bench/h200-2026-12-03-moe c7. */
static int moe_rpb(const struct cuda_ctx *c, int64_t N, int fpt, int64_t top_k)
{
	if (c->moe_rpb) /* ATLAS_CUDA_MOE_RPB: a fixed choice, for A/B runs */
		return c->moe_rpb;
	int rpb = 8;
	const int64_t want = c->sms > 0 ? c->sms : 132;
	while (rpb > 1 && CEIL_DIV(N, (int64_t)fpt * rpb) * top_k < want)
		rpb /= 2;
	return rpb;
}

/* One expert product over every chosen expert: out [T k, N] from x
 * (rows a / xdiv) and the weights w0 (and w1 with swiglu) of the table. */
static int expert_gemv(struct cuda_ctx *c, const struct atlas_moe_desc *d, void *out,
		       const void *x, const void *const *w0, const void *const *w1, int64_t N,
		       int64_t K, int xdiv, int swiglu, const int *list, const int *off,
		       const int *act, int64_t T, bool inv)
{
	struct atlas_moe_args a = {
	    .x = x, .out = out, .w0 = w0, .w1 = w1, .list = list, .off = off, .act = act,
	    .N = N, .K = K, .E = (int)d->n_experts, .wdt = (int)d->wdt, .xdiv = xdiv,
	    .swiglu = swiglu,
	};
	void *args[] = {&a};
	const int64_t slots = d->n_experts < T * d->top_k ? d->n_experts : T * d->top_k;
	const int tc = d->wdt == ATLAS_DTYPE_BF16 && K % 8 == 0 && aligned16(x) &&
		       c->kern[ATLAS_CK_MOE_GEMV8] && c->kern[ATLAS_CK_MOE_GEMV16] &&
		       c->kern[ATLAS_CK_MOE_GEMV32] && c->kern[ATLAS_CK_MOE_GEMV64];
	if (!tc) /* every weight row of every expert is 16-byte aligned only in BF16 arenas */
		return atlas_cuda_launch(c, ATLAS_CK_MOE_GEMV_ANY, (unsigned)CEIL_DIV(N, 8),
					 (unsigned)slots, 256, 0, args);
	if (!inv && c->moe_gemv1 && c->kern[ATLAS_CK_MOE_GEMV1] && T * d->top_k <= d->n_experts) {
		/* groups of about one token (decode) outside batch-invariant
		 * mode: the CUDA-core form, rows per block as for atlas_gemv
		 * over the top_k experts' rows */
		a.rpb = atlas_cuda_gemv_rpb(c, (swiglu ? 2 : 1) * N * d->top_k, swiglu ? 2 : 1,
					    c->moe_rpb);
		const int64_t fpb = swiglu ? a.rpb / 2 : a.rpb;
		return atlas_cuda_launch(c, ATLAS_CK_MOE_GEMV1, (unsigned)CEIL_DIV(N, fpb),
					 (unsigned)slots, 256, 0, args);
	}
	const int fpt = swiglu ? 8 : 16;
	a.rpb = moe_rpb(c, N, fpt, d->top_k);
	/* passes of 8 * nt8 tokens: the narrowest that holds an average
	 * group (a larger group takes more passes, its weights then coming
	 * from L2; the sum order is the same either way) */
	const int64_t avg = CEIL_DIV(T * d->top_k, d->n_experts);
	const int nt8 = avg <= 8 ? 1 : avg <= 16 ? 2 : avg <= 32 ? 4 : 8;
	const enum atlas_cuda_kernel k = nt8 == 1 ? ATLAS_CK_MOE_GEMV8 : nt8 == 2 ? ATLAS_CK_MOE_GEMV16
				       : nt8 == 4 ? ATLAS_CK_MOE_GEMV32 : ATLAS_CK_MOE_GEMV64;
	return atlas_cuda_launch(c, k, (unsigned)CEIL_DIV(N, (int64_t)fpt * a.rpb), (unsigned)slots,
				 256, ATLAS_GTC_SMEM(nt8), args);
}

/* Carve n bytes, 256-aligned, off *p. */
static void *carve(char **p, size_t n)
{
	void *r = *p;
	*p += (n + 255) & ~(size_t)255;
	return r;
}

int atlas_cuda_moe(struct atlas_backend *be, void *out, const void *x,
		   const struct atlas_moe_desc *d, int64_t T, void *scratch)
{
	struct cuda_ctx *c = be->ctx;
	const int64_t E = d->n_experts, K = d->top_k, D = d->D, F = d->F, Fs = d->Fs;
	if (d->wdt != ATLAS_DTYPE_F32 && d->wdt != ATLAS_DTYPE_F16 && d->wdt != ATLAS_DTYPE_BF16)
		return atlas_error(ATLAS_EUNSUPPORTED, "cuda moe: unsupported weight dtype '%s'",
				   atlas_dtype_name(d->wdt));
	if (T < 0 || E < 1 || K < 1 || K > E || D < 1 || F < 1 || Fs < 0 ||
	    (Fs && (!d->sg || !d->su || !d->sd || !d->sgate)))
		return atlas_error(ATLAS_EINVAL,
				   "cuda moe: bad description T=%lld E=%lld top_k=%lld D=%lld F=%lld "
				   "Fs=%lld", (long long)T, (long long)E, (long long)K, (long long)D,
				   (long long)F, (long long)Fs);
	if (E > ATLAS_MOE_MAX_E || K > ATLAS_MOE_MAX_K)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "cuda moe: %lld experts, top %lld; this backend takes at most %d "
				   "experts and top %d", (long long)E, (long long)K, ATLAS_MOE_MAX_E,
				   ATLAS_MOE_MAX_K);
	if (T == 0)
		return 0;
	if (T * K > INT32_MAX / 2)
		return atlas_error(ATLAS_EINVAL, "cuda moe: %lld rows is too many for one call",
				   (long long)T);
	struct cuda_moe_tab *tb = expert_table(c, d);
	if (!tb)
		return c->capturing ? ATLAS_EUNSUPPORTED : ATLAS_EIO;
	const void *const *tab = (const void *const *)tb->dev;
	if (!c->moe_reads && c->capturing)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "cuda moe: the first moe op runs outside a capture");
	int rc = atlas_cuda_moe_counters(c);
	if (rc)
		return rc;
	/* prefill-sized steps take the grouped wgmma GEMM (not in
	 * batch-invariant mode: its sum order is not the GEMV's) */
	const int64_t R = T * K;
	const int gemm = tb->maps && !be->batch_invariant && T >= c->moe_gemm_min_t &&
			 aligned16(x) && R + 2 * (int64_t)TCG_BM_ROWS <= INT32_MAX;
	/* the scratch regions (atlas_moe_scratch_bytes) */
	char *p = scratch;
	float *lg = carve(&p, (size_t)(T * E) * 4);
	int *ids = carve(&p, (size_t)R * 4);
	float *wts = carve(&p, (size_t)R * 4);
	float *sgl = carve(&p, (size_t)T * 4);
	int *off = carve(&p, (size_t)(E + 1) * 4);
	int *act = carve(&p, (size_t)(E + 1) * 4);
	int *list = carve(&p, (size_t)R * 4);
	void *h = carve(&p, (size_t)(R * F) * 2);
	void *u = carve(&p, (size_t)(R * F) * 2);
	void *y = carve(&p, (size_t)(R * D) * 2);
	int *tiles = carve(&p, (size_t)(R / TCG_BM_ROWS + E + 2) * 4);
	void *hs = Fs ? carve(&p, (size_t)(T * Fs) * 2) : NULL;
	void *us = Fs ? carve(&p, (size_t)(T * Fs) * 2) : NULL;
	void *ys = Fs ? carve(&p, (size_t)(T * D) * 2) : NULL;
	int *ntiles = tiles + R / TCG_BM_ROWS + E + 1;
	const int64_t max_tiles = (R + TCG_BM_ROWS - 1) / TCG_BM_ROWS + (E < R ? E : R);

	/* router logits (and the shared expert's gate logit) in FP32 by the
	 * logits op (many blocks, where one block a token would read the
	 * router with one SM), then routing and grouping in one launch */
	if ((rc = be->logits(be, lg, x, d->router, d->wdt, T, E, D)) ||
	    (Fs && (rc = be->logits(be, sgl, x, d->sgate, d->wdt, T, 1, D))))
		return rc;
	{
		long long t = T;
		int e = (int)E, k = (int)K, norm = d->norm_topk;
		int *tl = gemm ? tiles : NULL, *done = (int *)(c->moe_reads + 1);
		void *args[] = {&lg, &t, &e, &k, &norm, &ids, &wts, &off, &list, &act,
				&c->moe_reads, &tl, &ntiles, &done};
		if ((rc = atlas_cuda_launch(c, ATLAS_CK_MOE_ROUTE, (unsigned)CEIL_DIV(T, 32), 1,
					    ATLAS_MOE_GROUP_THREADS, (size_t)(32 * E) * 4, args)))
			return rc;
	}
	if (gemm) {
		/* x in group order (into y, dead until the down product), gate
		 * and up as two segments of one grouped GEMM, swiglu, down with
		 * its rows scattered back to assignment order */
		{
			long long n = R, dd = D;
			int k = (int)K;
			void *args[] = {&y, &x, &list, &n, &k, &dd};
			if ((rc = atlas_cuda_launch(c, ATLAS_CK_MOE_GATHER, (unsigned)R, 1, 256, 0, args)))
				return rc;
		}
		struct atlas_tcg_args a;
		memset(&a, 0, sizeof(a));
		if ((rc = atlas_cuda_tmap_cached(c, y, R, D, TCG_BM_ROWS, &a.map_x)))
			return rc;
		a.out[0] = h, a.out[1] = u;
		a.N[0] = a.N[1] = F;
		a.ny[0] = a.ny[1] = (int)CEIL_DIV(F, tb->bn_gu);
		a.T = R, a.K = D, a.nseg = 2, a.bn = tb->bn_gu;
		a.gmap = tb->maps, a.tiles = tiles, a.ntiles = ntiles, a.off = off, a.E = (int)E;
		void *args[] = {&a};
		if ((rc = atlas_cuda_launch(c, ATLAS_CK_MOE_GEMM_TC, (unsigned)max_tiles,
					    (unsigned)(2 * a.ny[0]), TCG_THREADS_MOE, ATLAS_TCG_SMEM, args)) ||
		    (rc = be->swiglu(be, h, h, u, R, F)))
			return rc;
		memset(&a, 0, sizeof(a));
		if ((rc = atlas_cuda_tmap_cached(c, h, R, F, TCG_BM_ROWS, &a.map_x)))
			return rc;
		a.out[0] = y;
		a.N[0] = D;
		a.ny[0] = (int)CEIL_DIV(D, tb->bn_d);
		a.T = R, a.K = F, a.nseg = 1, a.bn = tb->bn_d;
		a.gmap = tb->maps + 2 * E, a.tiles = tiles, a.ntiles = ntiles, a.off = off;
		a.rowmap = list, a.E = (int)E;
		if ((rc = atlas_cuda_launch(c, ATLAS_CK_MOE_GEMM_TC, (unsigned)max_tiles,
					    (unsigned)a.ny[0], TCG_THREADS_MOE, ATLAS_TCG_SMEM, args)))
			return rc;
	} else if ((rc = expert_gemv(c, d, h, x, tab, tab + E, F, D, (int)K, 1, list, off, act,
				     T, be->batch_invariant)) ||
		   (rc = expert_gemv(c, d, y, h, tab + 2 * E, NULL, D, F, 1, 0, list, off, act,
				     T, be->batch_invariant))) {
		return rc;
	}
	if (Fs) {
		if ((rc = be->matmul_swiglu(be, hs, x, d->sg, d->su, d->wdt, T, Fs, D, us)) ||
		    (rc = be->matmul(be, ys, hs, d->sd, NULL, d->wdt, T, D, Fs)))
			return rc;
	}
	long long t = T, dd = D;
	int k = (int)K;
	void *args[] = {&out, &y, &wts, &ys, &sgl, &t, &k, &dd};
	return atlas_cuda_launch(c, ATLAS_CK_MOE_COMBINE, (unsigned)T, 1, 256, 0, args);
}

int atlas_cuda_moe_counters(struct cuda_ctx *c)
{
	if (c->moe_reads)
		return 0;
	if (cudaMalloc((void **)&c->moe_reads, 2 * sizeof(*c->moe_reads)) != cudaSuccess ||
	    cudaMemsetAsync(c->moe_reads, 0, 2 * sizeof(*c->moe_reads), c->stream) != cudaSuccess) {
		cudaGetLastError();
		c->moe_reads = NULL;
		return atlas_error(ATLAS_ENOMEM, "cuda moe: cannot allocate its counters");
	}
	return 0;
}

int64_t atlas_cuda_moe_experts_read(struct atlas_backend *be)
{
	struct cuda_ctx *c = be->ctx;
	unsigned long long n = 0;
	if (!c->moe_reads)
		return 0;
	if (atlas_cuda_check(c, cudaMemcpyAsync(&n, c->moe_reads, sizeof(n), cudaMemcpyDeviceToHost,
						c->stream),
			     "expert count") ||
	    atlas_cuda_check(c, cudaMemsetAsync(c->moe_reads, 0, sizeof(n), c->stream),
			     "expert count") ||
	    atlas_cuda_check(c, cudaStreamSynchronize(c->stream), "expert count"))
		return -1;
	return (int64_t)n;
}
