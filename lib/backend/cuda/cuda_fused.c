/* cuda_fused.c - the host side of atlas_decode_fused
 * (kernels/sm90/common/decode_fused.cu): the whole layer stack of a
 * one-token decode step in one launch.
 *
 * fused_prepare decides whether a model fits the kernel (BF16 weights,
 * F8B ones whose scale blocks are powers of two (at least 128 columns
 * wide) or whole dimensions, or
 * W4B ones whose groups are powers of two of at least 128 columns or
 * whole rows,
 * head size 128, at most 8 query heads per kv head, D, F and H*hd
 * multiples of ATLAS_FD_SLICE, 16-byte aligned weights and norm weights,
 * no more kv heads than SMs; MoE layers: BF16, no shared expert, one
 * shape, top_k <= 16, expert widths a multiple of 256: moe_misfit) and
 * sizes the launch (atlas_decode_fused_moe for a model with MoE layers,
 * which also gets their expert pointer table, the router logits and the
 * experts-read counter): one block per SM, and
 * as many ring stages as the shared memory holds after the x area (any
 * product's x, the norm's x and weights side by side, or the attention
 * scratch) and the row partial sums (the most rows any block owns in any
 * product, times the slices of a row). It uploads the per-layer pointer
 * table and allocates the attention partials and the barrier counters
 * (zeroed; the kernel leaves them zero), outside the arena so that a
 * later model on the same backend does not move them. fused_decode is then one launch whose
 * arguments never change: a decode graph records it once.
 */
#include "cuda_internal.h"
#include "kernel_args.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "../../core/log.h"

struct cuda_fused {
	struct atlas_fd_args args;
	struct atlas_fd_layer *d_layers; /* device [n_layers] */
	const void **d_ex;		 /* device [MoE layers][3E]: expert pointers */
	float *d_lg;			 /* device [E]: router logits */
	float *d_part;			 /* attention partials */
	unsigned *d_sync;		 /* barrier and split counters */
	unsigned long long *d_trace;	 /* ATLAS_CUDA_FD_TRACE: phase times (fd_mark) */
	int moe_layers;			 /* (for the trace's report) */
	int kid;			 /* ATLAS_CK_DECODE_FUSED or _MOE */
	unsigned grid;			 /* blocks: one per SM */
	size_t smem;			 /* dynamic shared memory */
};

static int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* The first MoE layer's description, or NULL (a dense model). */
static const struct atlas_moe_desc *first_moe(const struct atlas_fused_desc *d)
{
	for (int64_t l = 0; l < d->n_layers; l++)
		if (d->layers[l].moe)
			return d->layers[l].moe;
	return NULL;
}

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/* The most partial sums (rows x slices) a block keeps in any product
 * (an MoE layer's: the router's rows, the gate and up pieces, the top_k
 * down pieces; and its routing scratch, 2 E floats). */
static int64_t part_floats(const struct atlas_fused_desc *d, int64_t G)
{
	const int64_t S = ATLAS_FD_SLICE, nq = d->H * d->hd, nkv = d->Hkv * d->hd;
	int64_t n = ceil_div(nq + 2 * nkv, G) * (d->D / S); /* q, k, v */
	n = max64(n, ceil_div(d->D, G) * (nq / S));	    /* o */
	n = max64(n, 2 * ceil_div(d->F, G) * (d->D / S));    /* gate, up */
	n = max64(n, ceil_div(d->D, G) * (d->F / S));	    /* down */
	const struct atlas_moe_desc *m = first_moe(d);
	if (m) {
		const int64_t Fe = m->F, k = m->top_k;
		const int64_t nsf = Fe % S ? Fe / ATLAS_FD_SLICE_S : Fe / S;
		n = max64(n, ceil_div(m->n_experts, G) * (d->D / S));
		n = max64(n, 2 * ceil_div(k * Fe, G) * (d->D / S));
		n = max64(n, k * ceil_div(d->D, G) * nsf);
		n = max64(n, 2 * m->n_experts);
	}
	return (n + 3) & ~(int64_t)3;
}

/* Why the MoE layers do not fit the kernel, or NULL: BF16, no shared
 * expert, every MoE layer of one shape (the launch's E, top_k, Fe), at
 * most ATLAS_FD_MAXK experts a token, an expert width of a multiple of
 * ATLAS_FD_SLICE_S, the chosen experts' rows within g, aligned weights. */
static const char *moe_misfit(const struct cuda_ctx *c, const struct atlas_fused_desc *d)
{
	const struct atlas_moe_desc *m0 = first_moe(d);
	if (!m0)
		return NULL;
	if (!c->fused_moe)
		return "an MoE model with ATLAS_CUDA_FUSED_MOE=0";
	if (!c->kern[ATLAS_CK_DECODE_FUSED_MOE])
		return "the kernel target lacks atlas_decode_fused_moe";
	if (d->wdt != ATLAS_DTYPE_BF16)
		return "MoE layers whose weights are not BF16";
	if (m0->top_k < 1 || m0->top_k > ATLAS_FD_MAXK || m0->top_k > m0->n_experts ||
	    m0->n_experts > ATLAS_MOE_MAX_E)
		return "an MoE layer's expert count or top_k";
	if (m0->F % ATLAS_FD_SLICE_S || m0->F > 65536)
		return "an expert width that is not a multiple of 256 (or above 65536)";
	if (m0->top_k * m0->F > d->g_cap)
		return "the chosen experts' rows do not fit the g buffer";
	if (m0->D != d->D)
		return "an MoE layer's width is not the model's";
	for (int64_t l = 0; l < d->n_layers; l++) {
		const struct atlas_moe_desc *m = d->layers[l].moe;
		if (!m)
			continue;
		if (m->Fs || m->sg)
			return "a shared expert";
		if (m->n_experts != m0->n_experts || m->top_k != m0->top_k || m->F != m0->F ||
		    m->norm_topk != m0->norm_topk || m->wdt != ATLAS_DTYPE_BF16)
			return "MoE layers of different shapes";
		if (!m->router || !aligned16(m->router))
			return "a router is missing or not 16-byte aligned";
		for (int64_t e = 0; e < m->n_experts; e++)
			if (!m->wg[e] || !m->wu[e] || !m->wd[e] || !aligned16(m->wg[e]) ||
			    !aligned16(m->wu[e]) || !aligned16(m->wd[e]))
				return "an expert weight is missing or not 16-byte aligned";
	}
	return NULL;
}

/* Why a model does not fit, or NULL when it does. */
static const char *misfit(const struct cuda_ctx *c, const struct atlas_fused_desc *d)
{
	const int64_t S = ATLAS_FD_SLICE;
	if (!c->fused)
		return "ATLAS_CUDA_FUSED=0";
	if (!c->kern[ATLAS_CK_DECODE_FUSED])
		return "the kernel target lacks atlas_decode_fused";
	if (d->wdt != ATLAS_DTYPE_BF16 && d->wdt != ATLAS_DTYPE_F8B && d->wdt != ATLAS_DTYPE_W4B)
		return "weights are not BF16, F8B or W4B";
	/* FP8 is faster fused than op by op (H100: 3.98 against 4.39 ms a
	 * Qwen3-8B step); 4-bit is not (4.40 against 4.15): opt-in */
	if (d->wdt == ATLAS_DTYPE_F8B && c->fused_quant < 1)
		return "F8B weights with ATLAS_CUDA_FUSED_QUANT=0";
	if (d->wdt == ATLAS_DTYPE_W4B && c->fused_quant < 2)
		return "W4B weights without ATLAS_CUDA_FUSED_QUANT=1";
	if (d->nwdt != ATLAS_DTYPE_BF16 && d->nwdt != ATLAS_DTYPE_F16 && d->nwdt != ATLAS_DTYPE_F32)
		return "norm weight type";
	if (d->hd != ATLAS_FD_HD)
		return "head size is not 128";
	if (d->Hkv < 1 || d->H % d->Hkv || d->H / d->Hkv > ATLAS_FD_MAXG)
		return "more than 8 query heads per kv head";
	if (d->D % S || d->F % S || (d->H * d->hd) % S || d->D > 65536 || d->F > 65536 ||
	    d->H * d->hd > 65536)
		return "hidden, intermediate or q size not a multiple of 1024";
	if (d->Hkv > c->sms)
		return "more kv heads than SMs";
	if (d->window < 0)
		return "a negative sliding window";
	if (d->n_layers < 1 || d->n_layers > 1024)
		return "layer count";
	const char *why = moe_misfit(c, d);
	if (why)
		return why;
	for (int64_t l = 0; l < d->n_layers; l++) {
		const struct atlas_fused_layer *L = &d->layers[l];
		const void *w[] = {L->wq, L->wk, L->wv, L->wo, L->wg, L->wu, L->wd};
		for (size_t i = 0; i < (L->moe ? 4 : sizeof(w) / sizeof(w[0])); i++)
			if (!w[i] || !aligned16(w[i]))
				return "a weight is missing or not 16-byte aligned";
		if (!L->ln1 || !L->ln2 || !L->qn != !L->kn || !L->kc || !L->vc)
			return "a norm or cache pointer is missing";
		if (!aligned16(L->ln1) || !aligned16(L->ln2))
			return "a norm weight is not 16-byte aligned";
	}
	if (!aligned16(d->x) || !aligned16(d->att) || !aligned16(d->g) || !aligned16(d->v))
		return "an activation buffer is not 16-byte aligned";
	return NULL;
}

/* log2 of a scale block of b along a dimension of n, 31 for one that
 * covers it, or -1 (not a power of two). */
static int block_shift(int64_t b, int64_t n)
{
	if (b >= n)
		return 31;
	for (int i = 0; i < 31; i++)
		if ((int64_t)1 << i == b)
			return i;
	return -1;
}

/* An F8B or W4B launch: layer l's scale (and zero-point) pointers and
 * block shifts from the blobs' heads (device memory, read back once per
 * matrix at prepare), or why not. */
static const char *quant_layer(const struct atlas_fused_desc *d, int64_t l, struct atlas_fd_layer *h)
{
	const struct atlas_fused_layer *L = &d->layers[l];
	const void *w[7] = {L->wq, L->wk, L->wv, L->wo, L->wg, L->wu, L->wd};
	const int64_t nq = d->H * d->hd, nkv = d->Hkv * d->hd;
	const int64_t N[7] = {nq, nkv, nkv, d->D, d->F, d->F, d->D};
	const int64_t K[7] = {d->D, d->D, d->D, nq, d->D, d->D, d->F};
	for (int i = 0; i < 7; i++) {
		union {
			struct atlas_f8b_head f;
			struct atlas_w4b_head q;
		} hd;
		if (cudaMemcpy(&hd, w[i], sizeof(hd), cudaMemcpyDeviceToHost) != cudaSuccess) {
			cudaGetLastError();
			return "a quantized weight's head could not be read";
		}
		if (d->wdt == ATLAS_DTYPE_F8B) {
			if (hd.f.magic != ATLAS_F8B_MAGIC || hd.f.N != N[i] || hd.f.K != K[i])
				return "an F8B head does not match the layer's shape";
			const int so = block_shift(hd.f.bo, hd.f.N), si = block_shift(hd.f.bi, hd.f.K);
			if (so < 0 || si < 0 || (si < 31 && si < 7))
				return "an F8B scale block is not a power of two of at least 128 columns";
			if (hd.f.scale_off != atlas_f8b_scale_off(hd.f.N, hd.f.K))
				return "an F8B head's scale offset";
			h->sc[i] = (const char *)w[i] + hd.f.scale_off;
			h->sbo[i] = (unsigned char)so;
			h->sbi[i] = (unsigned char)si;
		} else {
			if (hd.q.magic != ATLAS_W4B_MAGIC || hd.q.N != N[i] || hd.q.K != K[i])
				return "a W4B head does not match the layer's shape";
			const int si = block_shift(hd.q.g, hd.q.K);
			if (si < 0 || (si < 31 && si < 7))
				return "a W4B group is not a power of two of at least 128 columns";
			if (hd.q.ng != (hd.q.K + hd.q.g - 1) / hd.q.g ||
			    hd.q.z_off != atlas_w4b_z_off(hd.q.N, hd.q.K) ||
			    hd.q.s_off != atlas_w4b_s_off(hd.q.N, hd.q.K, hd.q.g))
				return "a W4B head's offsets";
			h->sc[i] = (const char *)w[i] + hd.q.s_off;
			h->zp[i] = (const unsigned char *)w[i] + hd.q.z_off;
			h->sbi[i] = (unsigned char)si;
		}
	}
	return NULL;
}

void *atlas_cuda_fused_prepare(struct atlas_backend *be, const struct atlas_fused_desc *d)
{
	struct cuda_ctx *c = be->ctx;
	const char *why = misfit(c, d);
	if (why) {
		atlas_debug("fused decode: not used (%s)", why);
		return NULL;
	}
	const int64_t G = c->sms;
	int optin = 0;
	if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->dev) !=
	    cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	/* the x area: any product's x (bf16; in a 4-bit launch, and its sums
	 * by 128 columns), the norm's x and its weights side by side
	 * (fd_norm_x), or the attention scratch */
	const struct atlas_moe_desc *m0 = first_moe(d);
	int64_t xmax = d->D > d->F ? d->D : d->F;
	if (d->H * d->hd > xmax)
		xmax = d->H * d->hd;
	if (m0 && m0->top_k * m0->F > xmax)
		xmax = m0->top_k * m0->F; /* the chosen experts' down x */
	/* (4-bit launches: the x sums of each 128 columns after x, fd_x_w4) */
	int64_t xs_bytes = xmax * 2 + (d->wdt == ATLAS_DTYPE_W4B ? xmax / 32 : 0);
	const int64_t norm_bytes = d->D * (2 + (d->nwdt == ATLAS_DTYPE_F32 ? 4 : 2));
	if (norm_bytes > xs_bytes)
		xs_bytes = norm_bytes;
	if (ATLAS_FD_ATT_SCRATCH > xs_bytes)
		xs_bytes = ATLAS_FD_ATT_SCRATCH;
	xs_bytes = (xs_bytes + 127) & ~(int64_t)127;
	const int64_t part = part_floats(d, G);
	/* 2 KiB for the kernel's static shared memory and alignment */
	const int64_t fixed = xs_bytes + part * 4 + 2 * ATLAS_FD_MAXST * 8 + 2048;
	int64_t nst = ((int64_t)optin - fixed) / ATLAS_FD_CHUNK;
	if (nst > ATLAS_FD_MAXST)
		nst = ATLAS_FD_MAXST;
	if (nst < 4) {
		atlas_debug("fused decode: not used (%lld ring stages fit)", (long long)nst);
		return NULL;
	}
	const size_t smem = (size_t)(nst * ATLAS_FD_CHUNK + xs_bytes + part * 4 + 2 * nst * 8);
	const int kid = m0 ? ATLAS_CK_DECODE_FUSED_MOE : ATLAS_CK_DECODE_FUSED;
	/* the attribute is the kernel's, not this model's: another model on
	 * the backend (a draft model) may have asked for more already, or
	 * ask for less later; the largest stands */
	const size_t want = smem > c->smem_set[kid] ? smem : c->smem_set[kid];
	if (cudaKernelSetAttributeForDevice(c->kern[kid],
					    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)want,
					    c->dev) != cudaSuccess) {
		cudaGetLastError();
		atlas_debug("fused decode: not used (%zu bytes of shared memory refused)", want);
		return NULL;
	}
	c->smem_set[kid] = want;

	struct cuda_fused *f = calloc(1, sizeof(*f));
	struct atlas_fd_layer *h = calloc((size_t)d->n_layers, sizeof(*h));
	const size_t part_bytes =
	    (size_t)d->H * ATLAS_FD_MAXSPLIT * ATLAS_FD_PSTRIDE * sizeof(float);
	const size_t sync_bytes = (size_t)(2 + d->Hkv) * sizeof(unsigned);
	/* MoE layers: every one's expert pointers [3E] in one table */
	int64_t nmoe = 0;
	for (int64_t l = 0; l < d->n_layers; l++)
		nmoe += d->layers[l].moe != NULL;
	const int64_t E = m0 ? m0->n_experts : 0;
	const void **ex = nmoe ? calloc((size_t)(nmoe * 3 * E), sizeof(*ex)) : NULL;
	if (!f || !h || (nmoe && !ex) ||
	    cudaMalloc((void **)&f->d_layers, (size_t)d->n_layers * sizeof(*h)) ||
	    cudaMalloc((void **)&f->d_part, part_bytes) ||
	    cudaMalloc((void **)&f->d_sync, sync_bytes) ||
	    (nmoe && (cudaMalloc((void **)&f->d_ex, (size_t)(nmoe * 3 * E) * sizeof(*ex)) ||
		      cudaMalloc((void **)&f->d_lg, (size_t)E * sizeof(float)) ||
		      atlas_cuda_moe_counters(c)))) {
		cudaGetLastError();
		free(h);
		free(ex);
		atlas_cuda_fused_release(be, f);
		atlas_debug("fused decode: not used (out of memory)");
		return NULL;
	}
	for (int64_t l = 0, im = 0; l < d->n_layers; l++) {
		const struct atlas_fused_layer *L = &d->layers[l];
		h[l] = (struct atlas_fd_layer){L->wq, L->wk, L->wv, L->bq, L->bk,  L->bv,
					       L->wo, L->wg, L->wu, L->wd, L->ln1, L->ln2,
					       L->qn, L->kn, L->kc, L->vc, {0}, {0}, {0}, {0},
					       NULL, NULL};
		if (L->moe) {
			const void **t = ex + im * 3 * E;
			for (int64_t e = 0; e < E; e++)
				t[e] = L->moe->wg[e], t[E + e] = L->moe->wu[e], t[2 * E + e] = L->moe->wd[e];
			h[l].wr = L->moe->router;
			h[l].ex = (const void *const *)(f->d_ex + im * 3 * E);
			im++;
		}
		const char *why8 = d->wdt != ATLAS_DTYPE_BF16 ? quant_layer(d, l, &h[l]) : NULL;
		if (why8) {
			free(h);
			atlas_cuda_fused_release(be, f);
			atlas_debug("fused decode: not used (%s)", why8);
			return NULL;
		}
	}
	f->moe_layers = (int)nmoe;
	const size_t trace_bytes = ((size_t)d->n_layers * ATLAS_FD_TRACE + 1) * sizeof(unsigned long long);
	cudaError_t e = c->fd_trace ? cudaMalloc((void **)&f->d_trace, trace_bytes) : cudaSuccess;
	if (e == cudaSuccess && f->d_trace)
		e = cudaMemset(f->d_trace, 0, trace_bytes);
	if (e == cudaSuccess)
		e = cudaMemcpy(f->d_layers, h, (size_t)d->n_layers * sizeof(*h), cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemset(f->d_sync, 0, sync_bytes);
	if (e == cudaSuccess && nmoe)
		e = cudaMemcpy(f->d_ex, ex, (size_t)(nmoe * 3 * E) * sizeof(*ex), cudaMemcpyHostToDevice);
	free(h);
	free(ex);
	if (e != cudaSuccess) {
		cudaGetLastError();
		atlas_cuda_fused_release(be, f);
		return NULL;
	}
	f->args = (struct atlas_fd_args){
	    .layers = f->d_layers,
	    .x = d->x,
	    .o = d->o,
	    .q = d->q,
	    .k = d->k,
	    .v = d->v,
	    .att = d->att,
	    .g = d->g,
	    .part = f->d_part,
	    .sync = f->d_sync,
	    .pos = d->pos,
	    .seq_of = d->seq_of,
	    .slot = d->slot,
	    .tables = d->block_tables,
	    .inv_freq = d->inv_freq,
	    .max_blocks = d->max_blocks,
	    .block_size = d->block_size,
	    .n_layers = (int)d->n_layers,
	    .D = (int)d->D,
	    .F = (int)d->F,
	    .H = (int)d->H,
	    .Hkv = (int)d->Hkv,
	    .nwdt = (int)d->nwdt,
	    .wfmt = d->wdt == ATLAS_DTYPE_F8B   ? ATLAS_FD_F8B
		    : d->wdt == ATLAS_DTYPE_W4B ? ATLAS_FD_W4B
						: ATLAS_FD_BF16,
	    .window = (int)d->window,
	    .nst = (int)nst,
	    .xs_bytes = (int)xs_bytes,
	    .part_cap = (int)part,
	    .mode = c->fused_mode,
	    .trace = f->d_trace,
	    .eps = d->eps,
	    .scale = d->scale,
	    .E = (int)E,
	    .topk = m0 ? (int)m0->top_k : 0,
	    .Fe = m0 ? (int)m0->F : 0,
	    .norm_topk = m0 && m0->norm_topk,
	    .lg = f->d_lg,
	    .reads = nmoe ? c->moe_reads : NULL,
	};
	f->kid = kid;
	f->grid = (unsigned)G;
	f->smem = smem;
	atlas_info("fused decode: one launch for %lld layers (%lld MoE; %s weights, %u blocks, %lld "
		   "ring stages, %zu KiB shared memory)",
		   (long long)d->n_layers, (long long)nmoe,
		   d->wdt == ATLAS_DTYPE_F8B ? "FP8" : d->wdt == ATLAS_DTYPE_W4B ? "4-bit" : "BF16", f->grid,
		   (long long)nst, smem >> 10);
	return f;
}

/* ATLAS_CUDA_FD_TRACE=1: block 0's mean time a launch in each phase
 * (decode_fused.cu's fd_mark), over the dense and the MoE layers, to
 * stderr (a timing aid: the marks cost a global add each). */
static void trace_report(const struct cuda_fused *f)
{
	enum { NP = ATLAS_FD_TRACE };
	const int L = f->args.n_layers; /* (0 before prepare set the args: no report) */
	unsigned long long *t = calloc((size_t)L * NP + 1, sizeof(*t));
	if (!t || cudaMemcpy(t, f->d_trace, ((size_t)L * NP + 1) * sizeof(*t),
			     cudaMemcpyDeviceToHost) != cudaSuccess || !t[L * NP]) {
		cudaGetLastError();
		free(t);
		return;
	}
	static const char *const names[NP] = {
	    "A norm",	    "A products",    "A out+barrier", "B attention",
	    "C product",    "C out+barrier", "D router",      "routing",
	    "gate/up",	    "swiglu+barrier", "down",	      "down out+barrier"};
	double sum = 0.0;
	fprintf(stderr, "fused decode trace: %llu launches, %d layers (%d MoE); us a launch:\n",
		t[L * NP], L, f->moe_layers);
	for (int ph = 0; ph < NP; ph++) {
		double ns = 0.0;
		for (int l = 0; l < L; l++)
			ns += (double)t[l * NP + ph];
		ns /= (double)t[L * NP];
		sum += ns;
		fprintf(stderr, "  %-18s %9.1f (%.2f a layer)\n", names[ph], ns / 1e3, ns / 1e3 / L);
	}
	fprintf(stderr, "  %-18s %9.1f\n", "all", sum / 1e3);
	free(t);
}

int atlas_cuda_fused_decode(struct atlas_backend *be, void *fused)
{
	struct cuda_ctx *c = be->ctx;
	struct cuda_fused *f = fused;
	void *args[] = {&f->args};
	return atlas_cuda_launch(c, f->kid, f->grid, 1, ATLAS_FD_THREADS, f->smem,
				 args);
}

void atlas_cuda_fused_release(struct atlas_backend *be, void *fused)
{
	(void)be;
	struct cuda_fused *f = fused;
	if (!f)
		return;
	if (f->d_trace)
		trace_report(f);
	cudaFree(f->d_layers);
	cudaFree(f->d_ex);
	cudaFree(f->d_lg);
	cudaFree(f->d_part);
	cudaFree(f->d_sync);
	cudaFree(f->d_trace);
	free(f);
}
