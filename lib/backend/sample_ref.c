/* sample_ref.c - the reference sampling algorithm (atlas_sample_pick),
 * shared by the host sampler (lib/engine/sampler.c) and the CPU backend's
 * sample op; the CUDA kernel atlas_sample follows the same steps, so a
 * given uniform u picks the same token on every backend.
 *
 * Order as in transformers: temperature, top-k, top-p, min-p. Candidates
 * are sorted only when a filter needs the order; greedy is one pass. */
#include <math.h>
#include <stdlib.h>

#include "backend.h"

struct cand {
	float logit; /* processed logit */
	int32_t id;  /* token id */
};

static int32_t argmax(const float *x, int64_t n)
{
	int64_t best = 0;
	for (int64_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return (int32_t)best;
}

/* a comes before b: larger logit, or the same logit and a lower id. */
static int before(const struct cand *a, const struct cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit < y->logit ? 1 : -1;
	return x->id - y->id;
}


void atlas_sample_mask(float *logits, int64_t V, const uint32_t *mask)
{
	if (!mask)
		return;
	for (int64_t w = 0; w * 32 < V; w++) {
		uint32_t bits = mask[w];
		if (bits == 0xffffffffu)
			continue;
		int64_t end = w * 32 + 32 < V ? w * 32 + 32 : V;
		for (int64_t i = w * 32; i < end; i++)
			if (!(bits >> (i & 31) & 1))
				logits[i] = -INFINITY;
	}
}

int32_t atlas_sample_pick(float *logits, int64_t n, const struct atlas_sample_args *a,
			  void *scratch)
{
	atlas_sample_mask(logits, n, a->mask);
	if (a->temperature == 0.0f)
		return argmax(logits, n);

	/* candidates: all tokens, or the k best when top-k narrows first */
	struct cand *c = scratch;
	for (int64_t i = 0; i < n; i++) {
		c[i].logit = logits[i] / a->temperature;
		c[i].id = (int32_t)i;
	}
	int64_t k = n;
	if (a->top_k > 0 && a->top_k < n)
		k = a->top_k;
	if (k < n || a->top_p < 1.0f || a->min_p > 0.0f) {
		if (k < n) {
			/* partial selection: keep the k largest, then sort them */
			int64_t lo = 0, hi = n - 1;
			/* quickselect in the total order (logit descending, id
			 * ascending), so ties at the k-th place keep the lower ids
			 * on every backend */
			while (lo < hi) {
				struct cand pivot = c[(lo + hi) / 2];
				int64_t i = lo, j = hi;
				while (i <= j) {
					while (before(&c[i], &pivot)) i++;
					while (before(&pivot, &c[j])) j--;
					if (i <= j) {
						struct cand t = c[i];
						c[i++] = c[j];
						c[j--] = t;
					}
				}
				if (k - 1 <= j) hi = j;
				else if (k - 1 >= i) lo = i;
				else break;
			}
		}
		qsort(c, (size_t)k, sizeof(*c), cmp_cand);
	}
	/* softmax over the survivors */
	float mx = c[0].logit;
	for (int64_t i = 1; i < k; i++)
		if (c[i].logit > mx)
			mx = c[i].logit;
	double sum = 0;
	float *prob = logits; /* reuse: logits are consumed */
	for (int64_t i = 0; i < k; i++) {
		prob[i] = expf(c[i].logit - mx);
		sum += prob[i];
	}
	if (a->top_p < 1.0f) { /* smallest prefix with mass >= top_p, keep >= 1 */
		double acc = 0;
		int64_t keep = k;
		for (int64_t i = 0; i < k; i++) {
			acc += prob[i] / sum;
			if (acc >= a->top_p) {
				keep = i + 1;
				break;
			}
		}
		k = keep;
	}
	if (a->min_p > 0.0f) { /* drop tokens under min_p * p(top) */
		float floor_p = a->min_p * prob[0];
		int64_t keep = 1;
		while (keep < k && prob[keep] >= floor_p)
			keep++;
		k = keep;
	}
	sum = 0;
	for (int64_t i = 0; i < k; i++)
		sum += prob[i];
	double r = (double)a->u * sum, acc = 0;
	for (int64_t i = 0; i < k; i++) {
		acc += prob[i];
		if (r < acc)
			return c[i].id;
	}
	while (k > 1 && prob[k - 1] == 0.0f) /* rounding: never a masked-out token */
		k--;
	return c[k - 1].id;
}
