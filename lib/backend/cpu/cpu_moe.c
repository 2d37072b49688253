/* cpu_moe.c - the mixture-of-experts MLP on the CPU (the moe op of
 * backend.h): the reference the model's goldens and every faster MoE
 * kernel are checked against.
 *
 * Row by row, as transformers computes a Qwen2/Qwen3-MoE or Mixtral
 * sparse block for one token: router logits, softmax over every expert in
 * FP32, the top k (the lower index wins a tie), optional renormalisation,
 * then each chosen expert's SwiGLU MLP, summed by ascending expert index
 * with its weight; Qwen2-MoE's shared expert is added last, scaled by a
 * sigmoid gate. Every product is the matmul op with T = 1 (the GEMV,
 * split over threads along N), so a row's bits depend on that row only:
 * batch-invariant by construction. Only the chosen experts' weights are
 * read; the backend counts the distinct experts each call chose
 * (moe_experts_read) for the benchmarks' bytes-read floor.
 */
#include "cpu.h"

#include <math.h>

#include "../../core/error.h"

/* The k largest of p[E] into sel[k], ties to the lower index, then sorted
 * ascending (the order transformers adds expert outputs in). */
static void top_k(const float *p, int64_t E, int64_t k, int32_t *sel)
{
	for (int64_t j = 0; j < k; j++) {
		int64_t best = -1;
		for (int64_t e = 0; e < E; e++) {
			int taken = 0;
			for (int64_t i = 0; i < j && !taken; i++)
				taken = sel[i] == e;
			if (!taken && (best < 0 || p[e] > p[best]))
				best = e;
		}
		sel[j] = (int32_t)best;
	}
	for (int64_t j = 1; j < k; j++)
		for (int64_t i = j; i > 0 && sel[i - 1] > sel[i]; i--) {
			int32_t t = sel[i];
			sel[i] = sel[i - 1];
			sel[i - 1] = t;
		}
}

/* acc[D] += scale * down(silu(gate x) * up x) for one row x[K = D];
 * g, u: scratch [F]; y: scratch [D]. */
static int mlp_row(struct atlas_backend *be, float *acc, const float *x, const void *wg,
		   const void *wu, const void *wd, enum atlas_dtype wdt, int64_t D, int64_t F,
		   float scale, float *g, float *u, float *y)
{
	int rc;
	if ((rc = atlas_cpu_matmul(be, g, x, wg, NULL, wdt, 1, F, D)) ||
	    (rc = atlas_cpu_matmul(be, u, x, wu, NULL, wdt, 1, F, D)))
		return rc;
	for (int64_t i = 0; i < F; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
	if ((rc = atlas_cpu_matmul(be, y, g, wd, NULL, wdt, 1, D, F)))
		return rc;
	for (int64_t i = 0; i < D; i++)
		acc[i] += scale * y[i];
	return 0;
}

/* Top k of at most this many experts per token (the selection lives on
 * the stack; config.c refuses more: ATLAS_MAX_TOP_K). */
#define MAX_TOP_K 64
/* At most this many experts per layer (config.c's ATLAS_MAX_EXPERTS):
 * the call's set of chosen experts is a bitmap on the stack (8 KiB). */
#define MAX_EXPERTS 65536

/* Mark sel[k] in the bitmap `seen`; how many were not marked yet. */
static int64_t mark(uint64_t *seen, const int32_t *sel, int64_t k)
{
	int64_t fresh = 0;
	for (int64_t j = 0; j < k; j++) {
		uint64_t bit = 1ull << (sel[j] % 64);
		fresh += !(seen[sel[j] / 64] & bit);
		seen[sel[j] / 64] |= bit;
	}
	return fresh;
}

/* The count is of distinct experts per call, not of (row, expert)
 * pairs: a backend that batches an expert's rows reads its weights once
 * per call, which is what the benchmarks' floor assumes, even though
 * this reference computes row by row. */
int64_t atlas_cpu_moe_experts_read(struct atlas_backend *be)
{
	struct atlas_cpu_ctx *cx = be->ctx;
	int64_t n = cx->experts_read;
	cx->experts_read = 0;
	return n;
}

int atlas_cpu_moe(struct atlas_backend *be, void *out, const void *x,
		  const struct atlas_moe_desc *d, int64_t T, void *scratch)
{
	const int64_t E = d->n_experts, K = d->top_k, D = d->D, F = d->F, Fs = d->Fs;
	int rc = atlas_cpu_check_wdt(d->wdt, "moe");
	if (rc)
		return rc;
	if (T < 0 || E < 1 || E > MAX_EXPERTS || K < 1 || K > E || K > MAX_TOP_K || D < 1 ||
	    F < 1 || Fs < 0 ||
	    (Fs && (!d->sg || !d->su || !d->sd || !d->sgate)))
		return atlas_error(ATLAS_EINVAL,
				   "cpu moe: bad description T=%lld E=%lld top_k=%lld D=%lld F=%lld "
				   "Fs=%lld", (long long)T, (long long)E, (long long)K,
				   (long long)D, (long long)F, (long long)Fs);
	const int64_t fmax = F > Fs ? F : Fs;
	float *p = scratch, *g = p + E, *u = g + fmax, *y = u + fmax;
	uint64_t seen[MAX_EXPERTS / 64];
	int64_t distinct = 0;
	memset(seen, 0, (size_t)((E + 63) / 64) * sizeof(seen[0]));
	for (int64_t t = 0; t < T; t++) {
		const float *xt = (const float *)x + t * D;
		float *acc = (float *)out + t * D;
		int32_t sel[MAX_TOP_K];
		/* router logits, then softmax over every expert */
		if ((rc = atlas_cpu_matmul(be, p, xt, d->router, NULL, d->wdt, 1, E, D)))
			return rc;
		float mx = p[0], sum = 0.0f, ksum = 0.0f;
		for (int64_t e = 1; e < E; e++)
			mx = p[e] > mx ? p[e] : mx;
		for (int64_t e = 0; e < E; e++)
			sum += p[e] = expf(p[e] - mx);
		for (int64_t e = 0; e < E; e++)
			p[e] /= sum;
		top_k(p, E, K, sel);
		distinct += mark(seen, sel, K);
		for (int64_t j = 0; j < K; j++)
			ksum += p[sel[j]];
		memset(acc, 0, (size_t)D * sizeof(float));
		for (int64_t j = 0; j < K; j++) {
			int32_t e = sel[j];
			float w = d->norm_topk ? p[e] / ksum : p[e];
			if ((rc = mlp_row(be, acc, xt, d->wg[e], d->wu[e], d->wd[e], d->wdt, D, F, w,
					  g, u, y)))
				return rc;
		}
		if (Fs) {
			float s;
			if ((rc = atlas_cpu_matmul(be, &s, xt, d->sgate, NULL, d->wdt, 1, 1, D)))
				return rc;
			s = 1.0f / (1.0f + expf(-s));
			if ((rc = mlp_row(be, acc, xt, d->sg, d->su, d->sd, d->wdt, D, Fs, s, g, u, y)))
				return rc;
		}
	}
	((struct atlas_cpu_ctx *)be->ctx)->experts_read += distinct;
	return 0;
}
