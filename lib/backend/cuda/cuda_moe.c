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
#include "kernel_args.h"

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* One layer's pointer arrays: the host copy they were made from and
 * the device copy [3E] (gate, up, down). */
struct cuda_moe_tab {
	const void *const *key; /* the desc's wg array */
	const void **host;      /* [3E] the pointers uploaded */
	void **dev;             /* [3E] on the device */
	int64_t E;
};

void atlas_cuda_moe_release(struct cuda_ctx *c)
{
	for (int i = 0; i < c->moe_ntabs; i++) {
		free(c->moe_tabs[i].host);
		cudaFree(c->moe_tabs[i].dev);
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

/* The device pointer array of d's experts, uploaded when missing or
 * stale (never during a capture: that fails the capture, and the model
 * then runs the step op by op). */
static void *const *expert_table(struct cuda_ctx *c, const struct atlas_moe_desc *d)
{
	const int64_t E = d->n_experts;
	struct cuda_moe_tab *t = NULL;
	for (int i = 0; i < c->moe_ntabs && !t; i++)
		if (c->moe_tabs[i].key == d->wg)
			t = &c->moe_tabs[i];
	if (t && same_ptrs(t, d))
		return t->dev;
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
	return t->dev;
}

/* Warp tiles per block of the expert products: a function of the
 * matrix's shape (and the GPU) only, never of T, so that a token's sum
 * order does not change with the batch (moe.cu). The most (fewest
 * blocks, K split over the fewest warps) that still gives a one-token
 * step two blocks per SM over its top_k experts. */
static int moe_rpb(const struct cuda_ctx *c, int64_t N, int fpt, int64_t top_k)
{
	int rpb = 8;
	const int64_t want = 2 * (int64_t)(c->sms > 0 ? c->sms : 132);
	while (rpb > 1 && CEIL_DIV(N, (int64_t)fpt * rpb) * top_k < want)
		rpb /= 2;
	return rpb;
}

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* One expert product over every chosen expert: out [T k, N] from x
 * (rows a / xdiv) and the weights w0 (and w1 with swiglu) of the table. */
static int expert_gemv(struct cuda_ctx *c, const struct atlas_moe_desc *d, void *out,
		       const void *x, const void *const *w0, const void *const *w1, int64_t N,
		       int64_t K, int xdiv, int swiglu, const int *list, const int *off,
		       const int *act, int64_t T)
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
	const int fpt = swiglu ? 8 : 16;
	a.rpb = moe_rpb(c, N, fpt, d->top_k);
	/* a group has at most T tokens: the narrowest pass that holds them */
	const int nt8 = T <= 8 ? 1 : T <= 16 ? 2 : T <= 32 ? 4 : 8;
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
	void *const *tab = expert_table(c, d);
	if (!tab)
		return c->capturing ? ATLAS_EUNSUPPORTED : ATLAS_EIO;
	if (!c->moe_reads && !c->capturing) {
		if (cudaMalloc((void **)&c->moe_reads, sizeof(*c->moe_reads)) != cudaSuccess ||
		    cudaMemsetAsync(c->moe_reads, 0, sizeof(*c->moe_reads), c->stream) != cudaSuccess) {
			cudaGetLastError();
			c->moe_reads = NULL; /* not counted */
		}
	}
	/* the scratch regions (atlas_moe_scratch_bytes) */
	char *p = scratch;
	int *ids = carve(&p, (size_t)(T * K) * 4);
	float *wts = carve(&p, (size_t)(T * K) * 4);
	float *sgl = carve(&p, (size_t)T * 4);
	int *off = carve(&p, (size_t)(E + 1) * 4);
	int *act = carve(&p, (size_t)(E + 1) * 4);
	int *list = carve(&p, (size_t)(T * K) * 4);
	void *h = carve(&p, (size_t)(T * K * F) * 2);
	void *y = carve(&p, (size_t)(T * K * D) * 2);
	void *hs = Fs ? carve(&p, (size_t)(T * Fs) * 2) : NULL;
	void *us = Fs ? carve(&p, (size_t)(T * Fs) * 2) : NULL;
	void *ys = Fs ? carve(&p, (size_t)(T * D) * 2) : NULL;

	int rc;
	{
		int wdt = (int)d->wdt, e = (int)E, k = (int)K, norm = d->norm_topk;
		long long t = T, dd = D;
		const void *sgate = Fs ? d->sgate : NULL;
		void *args[] = {&x, (void *)&d->router, &sgate, &wdt, &t, &e, &dd, &k, &norm,
				&ids, &wts, &sgl};
		if ((rc = atlas_cuda_launch(c, ATLAS_CK_MOE_ROUTE, (unsigned)T, 1, 256, 0, args)))
			return rc;
	}
	{
		long long n = T * K;
		int e = (int)E;
		void *args[] = {&ids, &n, &e, &off, &list, &act, &c->moe_reads};
		if ((rc = atlas_cuda_launch(c, ATLAS_CK_MOE_GROUP, 1, 1, ATLAS_MOE_GROUP_THREADS, 0,
					    args)))
			return rc;
	}
	if ((rc = expert_gemv(c, d, h, x, (const void *const *)tab, (const void *const *)tab + E,
			      F, D, (int)K, 1, list, off, act, T)) ||
	    (rc = expert_gemv(c, d, y, h, (const void *const *)tab + 2 * E, NULL, D, F, 1, 0,
			      list, off, act, T)))
		return rc;
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
