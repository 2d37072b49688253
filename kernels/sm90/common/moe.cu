/* moe.cu - the mixture-of-experts MLP (the moe op of backend.h), as
 * kernels whose launch shapes depend only on T and the layer's shapes (so
 * a decode graph can record them). The host (cuda_moe.c) runs:
 *
 *   the logits op      FP32 router logits [T, E] over many blocks (and the
 *                      shared expert's gate logit)
 *   atlas_moe_route    a warp a token: FP32 softmax over all E experts, the
 *                      top k (ties to the lower index) sorted ascending,
 *                      their weights (renormalised when asked); the last
 *                      block to finish groups the T * k (token, expert)
 *                      assignments by expert (a counting sort), lists the
 *                      experts chosen at all in ascending order, counts the
 *                      experts read and, for prefill, writes the grouped
 *                      GEMM's tile table
 *   atlas_moe_gemv*    decode (and every T in batch-invariant mode): block
 *                      (row tile, slot) takes the slot-th chosen expert and
 *                      multiplies its weight rows with every token of its
 *                      group, so an expert chosen by several tokens of the
 *                      step is read once (per 8 * NT8 tokens); gate and up
 *                      with swiglu into h [T * k, F], then down into
 *                      y [T * k, D]; atlas_moe_gemv_any for other dtypes
 *                      (outside batch-invariant mode, steps of about one
 *                      token a group take atlas_moe_gemv1, linear.cu:
 *                      the same products on CUDA cores)
 *   atlas_moe_gather + atlas_moe_gemm_tc (gemm_tc.cu)
 *                      prefill outside batch-invariant mode: x in group
 *                      order, then wgmma tiles of one expert's rows each
 *   atlas_moe_combine  one block per token: the k rows of y weighted and
 *                      added in ascending expert order (+ the shared
 *                      expert, scaled by the sigmoid of its gate)
 *
 * Batch invariance: in that mode every (token, expert) product is a
 * tensor-core GEMV shaped as gemv_tc.cu's, whose sum order for a row depends on
 * neither the number of tokens nor a token's place among them, and the
 * host fixes rows per block from the weight's shape alone; routing and
 * the combine are per token. A token's output therefore does not depend
 * on its batch-mates. The order of tokens inside a group (set by atomics)
 * changes nothing.
 */
#include "common.cuh"
#include "moe_topk.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#define MOE_THREADS 256

/* x . w over D elements by one warp (x bf16, w in wdt). BF16 weights
 * with D % 8 == 0 and 16-byte alignment: lane l takes the 8-element
 * groups l, l + 32, ...; otherwise elements l, l + 32, ... Fixed order. */
static __device__ __forceinline__ float moe_dot(const bf16 *x, const void *w, int wdt, long long D,
						int lane)
{
	float s = 0.0f;
	if (wdt == ATLAS_WDT_BF16 && D % 8 == 0 && atlas_aligned(x, 16) && atlas_aligned(w, 16)) {
		for (long long k = (long long)lane * 8; k < D; k += 256) {
			float a[8], b[8];
			atlas_unpack8(*(const uint4 *)(x + k), a);
			atlas_unpack8(__ldg((const uint4 *)((const bf16 *)w + k)), b);
#pragma unroll
			for (int i = 0; i < 8; i++)
				s = fmaf(a[i], b[i], s);
		}
	} else {
		for (long long k = lane; k < D; k += 32)
			s = fmaf(atlas_bf(x[k]), atlas_wload(w, wdt, k), s);
	}
	return atlas_warp_sum(s);
}

/* Exclusive prefix sum of v over the block's threads (blockDim.x a
 * multiple of 32, at most 1024); *total gets the sum. ws: 32 ints. */
static __device__ int moe_scan(int v, int *ws, int *total)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	int inc = v;
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		const int u = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += u;
	}
	if (lane == 31)
		ws[warp] = inc;
	__syncthreads();
	if (warp == 0) {
		int w = lane < nw ? ws[lane] : 0;
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) {
			const int u = __shfl_up_sync(0xffffffffu, w, o);
			if (lane >= o)
				w += u;
		}
		ws[lane] = w; /* inclusive over warps */
	}
	__syncthreads();
	*total = ws[nw - 1];
	const int r = (warp ? ws[warp - 1] : 0) + inc - v;
	__syncthreads(); /* ws may be reused */
	return r;
}

/* The grouping of the n = T * K assignments by expert, by a whole block
 * of ATLAS_MOE_GROUP_THREADS (>= E) threads, from ids (read through L2:
 * other blocks wrote them): off [E + 1] the start of each expert's group
 * in list, list [n] the assignments (t * K + j) of each group (in no set
 * order), act [E] the chosen experts ascending and act[E] their count;
 * *reads += that count. With tiles non-NULL also the grouped GEMM's tile
 * table: for expert e and j < ceil(count / 128) an entry e << 16 | j,
 * and *ntiles = the number of entries. */
static __device__ void moe_group_body(const int *ids, long long n, int E, int *off, int *list,
				      int *act, unsigned long long *reads, int *tiles,
				      int *ntiles)
{
	__shared__ int cnt[ATLAS_MOE_MAX_E], cur[ATLAS_MOE_MAX_E], ws[32];
	const int e = threadIdx.x;
	if (e < E)
		cnt[e] = 0;
	__syncthreads();
	for (long long i = threadIdx.x; i < n; i += blockDim.x)
		atomicAdd(&cnt[__ldcg(ids + i)], 1);
	__syncthreads();
	const int c = e < E ? cnt[e] : 0;
	int total, nact;
	const int o = moe_scan(c, ws, &total);
	const int a = moe_scan(c > 0, ws, &nact);
	if (e < E) {
		off[e] = o;
		cur[e] = o;
		if (c > 0)
			act[a] = e;
	}
	if (e == 0) {
		off[E] = total;
		act[E] = nact;
		if (reads)
			atomicAdd(reads, (unsigned long long)nact);
	}
	if (tiles) {
		const int nt = (c + 127) / 128;
		int tt;
		const int t0 = moe_scan(nt, ws, &tt);
		for (int j = 0; j < nt; j++)
			tiles[t0 + j] = e << 16 | j;
		if (e == 0)
			*ntiles = tt;
	}
	__syncthreads();
	for (long long i = threadIdx.x; i < n; i += blockDim.x)
		list[atomicAdd(&cur[__ldcg(ids + i)], 1)] = (int)i;
}

/* Routing and grouping in one launch. Block b routes tokens 32 b .. (a
 * warp each) from the FP32 router logits lg [T, E] into ids, wts [T, K];
 * the last block to finish (a counter, *done, zero between launches and
 * left zero) then groups every token's assignments (moe_group_body's
 * outputs). Grid ceil(T / 32), block ATLAS_MOE_GROUP_THREADS (1024),
 * dynamic shared memory 32 * E floats. */
extern "C" __global__ void __launch_bounds__(ATLAS_MOE_GROUP_THREADS)
atlas_moe_route(const float *lg, long long T, int E, int K, int norm, int *ids, float *wts,
		int *off, int *list, int *act, unsigned long long *reads, int *tiles, int *ntiles,
		int *done)
{
	extern __shared__ float moe_p[];
	__shared__ int last;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const long long t = (long long)blockIdx.x * 32 + warp;
	ATLAS_PDL_ENTRY();
	if (t < T)
		moe_topk(lg + t * E, E, K, norm, moe_p + (long long)warp * E, ids + t * K,
			 wts + t * K, lane);
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence(); /* this block's ids before its count */
		last = atomicAdd(done, 1) == (int)gridDim.x - 1;
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence(); /* every block's ids after their counts */
	moe_group_body(ids, T * K, E, off, list, act, reads, tiles, ntiles);
	if (threadIdx.x == 0)
		*done = 0;
}

/* The expert products, gemv_tc.cu's tensor-core GEMV (its comment has
 * the fragment layout) with two changes: the weight is the slot-th chosen
 * expert's (blockIdx.y), and token column t of a pass is assignment
 * list[off[e] + c0 + t], whose x row is assignment / xdiv (the token for
 * gate and up, the assignment's own h row for down). A group of more than
 * 8 * NT8 tokens takes several passes over the weights. The sum order of
 * a (row, token) has gemv_tc's shape: chunks of 32 columns split into
 * wpr contiguous ranges, ranges added in warp order; its k-steps keep
 * the lanes' own 16-byte pieces (k-step s sums k0 + 8c + 4s .. + 4 over
 * c), which only the MoE path uses, so it needs no other kernel's bits. */
template <int NT8>
static __device__ __forceinline__ void moe_gemv_impl(const atlas_moe_args &a)
{
	__shared__ float red[8][16][8 * NT8 + 1];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int rpb = a.rpb == 1 || a.rpb == 2 || a.rpb == 4 || a.rpb == 8 ? a.rpb : 8;
	const int wpr = 8 / rpb, ks = warp % wpr, tile = warp / wpr;
	const int fpt = a.swiglu ? 8 : 16;
	const long long K = a.K, N = a.N;
	ATLAS_PDL_ENTRY();
	int e, g0, gn;
	if (!atlas_moe_group(a, &e, &g0, &gn))
		return;
	const long long b = blockIdx.x;
	const long long f0 = (b * rpb + tile) * fpt;
	const bf16 *wr0, *wr1;
	bool ok0, ok1;
	if (a.swiglu) {
		ok0 = ok1 = f0 + g < N;
		wr0 = (const bf16 *)a.w0[e] + (ok0 ? f0 + g : 0) * K;
		wr1 = (const bf16 *)a.w1[e] + (ok1 ? f0 + g : 0) * K;
	} else {
		ok0 = f0 + g < N;
		ok1 = f0 + g + 8 < N;
		wr0 = (const bf16 *)a.w0[e] + (ok0 ? f0 + g : 0) * K;
		wr1 = (const bf16 *)a.w0[e] + (ok1 ? f0 + g + 8 : 0) * K;
	}
	const long long nch = (K + 31) / 32;
	const long long cpw = (nch + wpr - 1) / wpr;
	const long long ch0 = ks * cpw, ch1 = ch0 + cpw < nch ? ch0 + cpw : nch;
	constexpr int S = ATLAS_GTC_STAGES(NT8);
	extern __shared__ uint4 moe_ring[];
	uint4 *ring = moe_ring + (size_t)warp * S * (2 + NT8) * 32 + lane;
	const bf16 *x = (const bf16 *)a.x;

	for (int c0 = 0; c0 < gn; c0 += 8 * NT8) {
		/* x rows of this lane's token columns g, 8 + g, ... (-1: none) */
		int xrow[NT8];
#pragma unroll
		for (int j = 0; j < NT8; j++) {
			const int t = c0 + 8 * j + g;
			xrow[j] = t < gn ? a.list[g0 + t] / a.xdiv : -1;
		}
		/* (a macro, not a lambda: a lambda capturing xrow puts it on the
		 * stack) */
#define MOE_ISSUE(CH, ST) \
	do { \
		const long long k_ = (CH) * 32 + 8 * c; \
		const bool kok_ = (CH) < ch1 && k_ < K; \
		uint4 *r_ = ring + (ST) * (2 + NT8) * 32; \
		atlas_cp16_cg(r_, kok_ && ok0 ? wr0 + k_ : wr0, kok_ && ok0); \
		atlas_cp16_cg(r_ + 32, kok_ && ok1 ? wr1 + k_ : wr1, kok_ && ok1); \
		_Pragma("unroll") for (int j_ = 0; j_ < NT8; j_++) { \
			const bool ok_ = kok_ && xrow[j_] >= 0; \
			atlas_cp16_cg(r_ + (2 + j_) * 32, ok_ ? x + (long long)xrow[j_] * K + k_ : x, ok_); \
		} \
	} while (0)
#pragma unroll
		for (int st = 0; st < S; st++) {
			MOE_ISSUE(ch0 + st, st);
			asm volatile("cp.async.commit_group;" ::: "memory");
		}
		float acc[2][NT8][4];
#pragma unroll
		for (int p = 0; p < 2; p++)
#pragma unroll
			for (int j = 0; j < NT8; j++)
				acc[p][j][0] = acc[p][j][1] = acc[p][j][2] = acc[p][j][3] = 0.0f;
		/* chunks alternate between two accumulators (two independent mma
		 * chains); unrolled by two so that the choice is static and acc
		 * stays in registers */
		int st = 0;
#define MOE_STEP(P, CH) \
	do { \
		asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory"); \
		const uint4 *r_ = ring + st * (2 + NT8) * 32; \
		const uint4 wa_ = r_[0], wb_ = r_[32]; \
		_Pragma("unroll") for (int j_ = 0; j_ < NT8; j_++) { \
			const uint4 xb_ = r_[(2 + j_) * 32]; \
			atlas_mma_bf16(acc[P][j_], wa_.x, wb_.x, wa_.y, wb_.y, xb_.x, xb_.y); \
			atlas_mma_bf16(acc[P][j_], wa_.z, wb_.z, wa_.w, wb_.w, xb_.z, xb_.w); \
		} \
		MOE_ISSUE((CH) + S, st); \
		asm volatile("cp.async.commit_group;" ::: "memory"); \
		st = st + 1 == S ? 0 : st + 1; \
	} while (0)
		for (long long ch = ch0; ch < ch1; ch += 2) {
			MOE_STEP(0, ch);
			if (ch + 1 < ch1)
				MOE_STEP(1, ch + 1);
		}
#undef MOE_STEP
		asm volatile("cp.async.wait_group 0;" ::: "memory");
#pragma unroll
		for (int j = 0; j < NT8; j++)
#pragma unroll
			for (int q = 0; q < 4; q++)
				acc[0][j][q] += acc[1][j][q];
#pragma unroll
		for (int j = 0; j < NT8; j++) {
			red[warp][g][8 * j + 2 * c] = acc[0][j][0];
			red[warp][g][8 * j + 2 * c + 1] = acc[0][j][1];
			red[warp][g + 8][8 * j + 2 * c] = acc[0][j][2];
			red[warp][g + 8][8 * j + 2 * c + 1] = acc[0][j][3];
		}
		__syncthreads();
		const int tt = gn - c0 < 8 * NT8 ? gn - c0 : 8 * NT8;
		const int per = fpt * tt;
		for (int i = threadIdx.x; i < rpb * per; i += blockDim.x) {
			const int tl = i / per, r = (i % per) / tt, t = i % tt;
			const long long f = (b * rpb + tl) * fpt + r;
			if (f >= N)
				continue;
			float v = 0.0f;
			for (int q = 0; q < wpr; q++)
				v += red[tl * wpr + q][r][t];
			if (a.swiglu) {
				float u = 0.0f;
				for (int q = 0; q < wpr; q++)
					u += red[tl * wpr + q][r + 8][t];
				v = atlas_bf(atlas_tobf(v));
				u = atlas_bf(atlas_tobf(u));
				v = v / (1.0f + expf(-v)) * u;
			}
			((bf16 *)a.out)[(long long)a.list[g0 + c0 + t] * N + f] = atlas_tobf(v);
		}
		__syncthreads(); /* red is rewritten by the next pass */
	}
#undef MOE_ISSUE
}

extern "C" __global__ void __launch_bounds__(256, 2) atlas_moe_gemv8(const __grid_constant__ atlas_moe_args a)
{
	moe_gemv_impl<1>(a);
}

extern "C" __global__ void __launch_bounds__(256, 2) atlas_moe_gemv16(const __grid_constant__ atlas_moe_args a)
{
	moe_gemv_impl<2>(a);
}

extern "C" __global__ void __launch_bounds__(256, 2) atlas_moe_gemv32(const __grid_constant__ atlas_moe_args a)
{
	moe_gemv_impl<4>(a);
}

extern "C" __global__ void __launch_bounds__(256, 2) atlas_moe_gemv64(const __grid_constant__ atlas_moe_args a)
{
	moe_gemv_impl<8>(a);
}

/* xg[r] = x[list[r] / K] for r < n (the grouped GEMM's rows of x, in
 * group order). Grid n, block 256; D % 8 == 0, 16-byte aligned rows. */
extern "C" __global__ void __launch_bounds__(MOE_THREADS)
atlas_moe_gather(bf16 *xg, const bf16 *x, const int *list, long long n, int K, long long D)
{
	const long long r = blockIdx.x;
	ATLAS_PDL_ENTRY();
	if (r >= n)
		return;
	const uint4 *src = (const uint4 *)(x + (long long)(list[r] / K) * D);
	uint4 *dst = (uint4 *)(xg + r * D);
	for (long long i = threadIdx.x; i < D / 8; i += MOE_THREADS)
		dst[i] = src[i];
}

/* Any weight dtype, any alignment: warp w of block (x, slot) computes
 * feature x * 8 + w for every token of the group, one token at a time,
 * lane-strided over K (the fallback for F32 and F16 experts, and for
 * shapes the tensor-core kernel does not take). The same contract as
 * atlas_moe_gemv*, with a.wdt. */
extern "C" __global__ void __launch_bounds__(256) atlas_moe_gemv_any(const __grid_constant__ atlas_moe_args a)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	ATLAS_PDL_ENTRY();
	int e, g0, gn;
	if (!atlas_moe_group(a, &e, &g0, &gn))
		return;
	const long long f = (long long)blockIdx.x * 8 + warp, K = a.K;
	if (f >= a.N)
		return;
	const int ws = atlas_wsize(a.wdt);
	const void *w0 = (const char *)a.w0[e] + f * K * ws;
	const void *w1 = a.swiglu ? (const char *)a.w1[e] + f * K * ws : NULL;
	for (int t = 0; t < gn; t++) {
		const int asg = a.list[g0 + t];
		const bf16 *xr = (const bf16 *)a.x + (long long)(asg / a.xdiv) * K;
		float v = moe_dot(xr, w0, a.wdt, K, lane);
		if (a.swiglu) {
			float u = moe_dot(xr, w1, a.wdt, K, lane);
			v = atlas_bf(atlas_tobf(v));
			u = atlas_bf(atlas_tobf(u));
			v = v / (1.0f + expf(-v)) * u;
		}
		if (lane == 0)
			((bf16 *)a.out)[(long long)asg * a.N + f] = atlas_tobf(v);
	}
}

/* out[t] = sum over j (ascending expert) of wts[t, j] * y[t * K + j]
 * (+ sigmoid(sgl[t]) * ys[t] when ys is non-NULL), in FP32, rounded once.
 * Grid T, block 256. */
extern "C" __global__ void __launch_bounds__(MOE_THREADS)
atlas_moe_combine(bf16 *out, const bf16 *y, const float *wts, const bf16 *ys, const float *sgl,
		  long long T, int K, long long D)
{
	const long long t = blockIdx.x;
	ATLAS_PDL_ENTRY();
	const float sg = ys ? 1.0f / (1.0f + expf(-sgl[t])) : 0.0f;
	const bool vec = D % 8 == 0 && atlas_aligned(out, 16) && atlas_aligned(y, 16) &&
			 (!ys || atlas_aligned(ys, 16));
	if (!vec) {
		for (long long d = threadIdx.x; d < D; d += MOE_THREADS) {
			float acc = 0.0f;
			for (int j = 0; j < K; j++)
				acc += wts[t * K + j] * atlas_bf(y[(t * K + j) * D + d]);
			if (ys)
				acc += sg * atlas_bf(ys[t * D + d]);
			out[t * D + d] = atlas_tobf(acc);
		}
		return;
	}
	for (long long d = threadIdx.x * 8LL; d < D; d += MOE_THREADS * 8LL) {
		float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, v[8];
		for (int j = 0; j < K; j++) {
			const float w = wts[t * K + j];
			atlas_unpack8(*(const uint4 *)(y + ((t * K + j) * D + d)), v);
#pragma unroll
			for (int i = 0; i < 8; i++)
				acc[i] += w * v[i];
		}
		if (ys) {
			atlas_unpack8(*(const uint4 *)(ys + (t * D + d)), v);
#pragma unroll
			for (int i = 0; i < 8; i++)
				acc[i] += sg * v[i];
		}
		*(uint4 *)(out + (t * D + d)) = atlas_pack8(acc);
	}
}
