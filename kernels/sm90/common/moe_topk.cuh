/* moe_topk.cuh - one token's mixture-of-experts routing by one warp:
 * shared by the moe op's route kernel (moe.cu) and the fused one-token
 * decode (decode_fused.cu), so that both choose the same experts with the
 * same weights from the same logits. */
#ifndef ATLAS_MOE_TOPK_CUH
#define ATLAS_MOE_TOPK_CUH

#include "common.cuh"

/* Token t's routing by one warp from its FP32 router logits lg [E]: ids,
 * wts [K] its experts (ascending) and weights. p: E floats of shared
 * memory for the warp. Softmax over all experts in FP32; top k by k
 * rounds of a warp argmax, a taken expert becoming -1 (probabilities are
 * >= 0), ties to the lower index. */
static __device__ void moe_topk(const float *lg, int E, int K, int norm, float *p, int *ids,
				float *wts, int lane)
{
	float mx = -INFINITY;
	for (int e = lane; e < E; e += 32)
		mx = fmaxf(mx, lg[e]);
	mx = atlas_warp_max(mx);
	float sum = 0.0f;
	for (int e = lane; e < E; e += 32) {
		const float v = expf(lg[e] - mx);
		p[e] = v;
		sum += v;
	}
	sum = atlas_warp_sum(sum);
	for (int e = lane; e < E; e += 32)
		p[e] /= sum;
	__syncwarp();
	int sel = E; /* lane j < K keeps the j-th choice */
	float selp = 0.0f;
	for (int j = 0; j < K; j++) {
		float bv = -2.0f;
		int bi = E;
		for (int e = lane; e < E; e += 32)
			if (p[e] > bv) /* ascending e: the first of equals stays */
				bv = p[e], bi = e;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
			const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
			if (ov > bv || (ov == bv && oi < bi))
				bv = ov, bi = oi;
		}
		if (lane == (j & 31) && j < 32)
			sel = bi, selp = bv;
		if (lane == 0)
			p[bi] = -1.0f;
		__syncwarp();
		if (j >= 32) { /* K > 32: the rest through shared memory below */
			if (lane == 0)
				p[bi] = -2.0f - (float)j; /* remember the order: -2 - j */
			__syncwarp();
		}
	}
	/* ascending expert order (the order the outputs are added in): lane
	 * j's rank is the number of chosen ids below its own */
	if (K <= 32) {
		int rank = 0;
		float ksum = 0.0f;
		for (int j = 0; j < K; j++) {
			const int oj = __shfl_sync(0xffffffffu, sel, j);
			const float pj = __shfl_sync(0xffffffffu, selp, j);
			rank += oj < sel;
			ksum += pj; /* in choice order, the same on every lane */
		}
		if (lane < K) {
			ids[rank] = sel;
			wts[rank] = norm ? selp / ksum : selp;
		}
		return;
	}
	/* K > 32 (rare): lane 0 collects the choices from p's marks */
	if (lane == 0) {
		int n = 0;
		float ksum = 0.0f;
		for (int e = 0; e < E; e++)
			if (p[e] < 0.0f) {
				ids[n] = e;
				n++;
			}
		for (int j = 0; j < n; j++)
			ksum += expf(lg[ids[j]] - mx) / sum;
		for (int j = 0; j < n; j++) {
			const float pj = expf(lg[ids[j]] - mx) / sum;
			wts[j] = norm ? pj / ksum : pj;
		}
	}
}

#endif
