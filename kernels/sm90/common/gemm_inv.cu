/* gemm_inv.cu - atlas_gemm_inv: the batch-invariant GEMM. out[T,N] =
 * x[T,K] W^T (+ bias, or swiglu of a gate and an up product) for BF16
 * weights and any T, giving every row exactly the bits the tensor-core
 * GEMV (gemv_tc.cu) gives it, at GEMM speed.
 *
 * Why: in batch-invariant mode a row's bits must not depend on the step
 * it is in: how many rows there are, how its prompt was chunked. The GEMV
 * has that property (a row's sum order is fixed by the weight's shape),
 * but it reads x once per 16 weight rows, so a long prefill step through
 * it is bound by L2 reads. This kernel stages weight and x tiles in
 * shared memory and reuses each fragment across a 64 x 32 warp tile, and
 * repeats the GEMV's arithmetic instruction for instruction:
 *  - the same mma.sync m16n8k16 steps: k-step s of a 32-wide chunk sums
 *    k0 + 16s .. + 16 (lane (g, c) takes the 8 bytes k0 + 16s + 4c .. + 4
 *    for rows g and g + 8 and for token g; see gemv_tc.cu);
 *  - the same K ranges: the chunks split into wpr contiguous ranges of
 *    ceil(chunks / wpr) (wpr = the GEMV's 8 / rpb, which the host derives
 *    from the weight's shape alone), one accumulator chain per range in
 *    ascending chunk order, starting from zero;
 *  - the same merge: 0 + range 0 + range 1 + ... in range order (empty
 *    trailing ranges add +0 too), then the bias, or the swiglu of the
 *    bf16-rounded gate and up, then one rounding.
 * The hardware is deterministic, so equal instructions on equal operands
 * give equal bits: tests/gpu/test-cuda-ops.c (test_invariant) checks rows
 * of this kernel against the same rows through the GEMV.
 *
 * Launch: struct atlas_ginv_args (kernel_args.h), block 256, dynamic
 * shared memory ATLAS_GINV_SMEM(v). Three tile shapes, one entry point
 * each (v): atlas_gemm_inv 128 weight rows x 128 tokens (warps 2 x 4, 64 x
 * 32 each), _t64 128 x 64 (4 x 2 warps of 32 x 32), _t32 256 x 32 (8 x 1
 * warps of 32 x 32): the host picks by T, so a decode batch does not pay
 * for a prefill's token tile. Grid (Σ row tiles of the products, ceil(T /
 * BT), 1 or the number of K ranges). With swiglu a block's rows are BM/2
 * features: each 16-row m-tile holds 8 gate rows then the 8 up rows of
 * the same features, as a GEMV warp tile does, so one lane ends with the
 * gate and up sums of an output. K goes in tiles of 64 (two chunks)
 * through a ring of ATLAS_GINV_STAGES cp.async stages. K % 8 == 0, x and
 * W 16-byte aligned.
 *
 * Split mode (ws set; few row tiles, as in a decode batch of 17..64): block
 * z computes only range z's chain and stores it, unmerged, to ws;
 * atlas_gemm_inv_reduce then merges the ranges in order and applies the
 * epilogue, the arithmetic the one-pass form does in registers. Both
 * forms give the same bits.
 *
 * Shared memory: a stage is the W tile then the x tile, rows of 128
 * bytes; 16-byte unit u of row r sits at unit u ^ s(r) of the row,
 * s(r) = (r & 1) << 2 | (r >> 1) & 3 (chosen when lanes read whole
 * units; with the 8-byte reads of a k-step, a half warp's four rows meet
 * two ways in the banks at worst).
 */
#include "common.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#define GI_S ATLAS_GINV_STAGES

static __device__ __forceinline__ int gi_at(int r, int u)
{
	return r * 8 + (u ^ (((r & 1) << 2) | ((r >> 1) & 3)));
}

/* A range's chain into the running total, and a new chain from zero. */
template <int MI>
static __device__ __forceinline__ void gi_fold(float (&tot)[MI][4][4], float (&acc)[MI][4][4])
{
#pragma unroll
	for (int i = 0; i < MI; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				tot[i][j][e] += acc[i][j][e];
				acc[i][j][e] = 0.0f;
			}
}

/* 0 + range 0 + ... + range ranges-1 of one output's split-form partials
 * (stride apart), then +0 for each empty range up to wpr. */
static __device__ __forceinline__ float gi_merge(const float *p, long long stride,
						 long long ranges, int wpr)
{
	float v = 0.0f;
	for (long long q = 0; q < ranges; q++)
		v += p[q * stride];
	for (long long q = ranges; q < wpr; q++)
		v += 0.0f;
	return v;
}

/* WM x WT warps, each MI m16 tiles (16 MI weight rows) x 32 tokens. */
template <int WM, int WT, int MI>
static __device__ __forceinline__ void ginv_impl(const atlas_ginv_args &a)
{
	constexpr int BM = 16 * MI * WM, BT = 32 * WT;
	constexpr int LW = BM / 32, LX = BT / 32; /* rows each thread copies */
	extern __shared__ uint4 gi_smem[];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, c = lane & 3;
	const int wm = warp % WM, wt = warp / WM;

	/* the block's product and row tile */
	int s = 0;
	long long bx = blockIdx.x;
	while (s < a.nseg - 1 && bx >= a.nbx[s]) {
		bx -= a.nbx[s];
		s++;
	}
	const long long K = a.K, T = a.T, N = a.N[s];
	const long long t0 = (long long)blockIdx.y * BT;
	/* chunk counts fit an int (K < 2^36); 32-bit counters keep 64-bit
	 * division out of the loop */
	const int nch = (int)((K + 31) / 32), cpw = (nch + a.wpr - 1) / a.wpr;
	/* this block's chunks: all of them, or (split) range z's */
	int c0 = 0, c1 = nch;
	if (a.ws) {
		c0 = (int)blockIdx.z * cpw;
		c1 = c0 + cpw < nch ? c0 + cpw : nch;
	}
	const int kt0 = c0 / 2, kt1 = (c1 + 1) / 2;
	const bf16 *w = (const bf16 *)a.w[s], *x = (const bf16 *)a.x;
	const bf16 *wu = a.swiglu ? (const bf16 *)a.w[1] : w;

	/* the loader: thread tid copies unit u = tid & 7 of tile rows
	 * (tid >> 3) + 32 j of both tiles */
	const int u = tid & 7;
	const bf16 *wsrc[LW], *xsrc[LX];
	bool wok[LW], xok[LX];
#pragma unroll
	for (int j = 0; j < LW; j++) {
		const int r = (tid >> 3) + 32 * j;
		long long f;
		const bf16 *base = w;
		if (a.swiglu) {
			f = bx * (BM / 2) + (r >> 4) * 8 + (r & 7);
			base = (r & 8) ? wu : w;
		} else {
			f = bx * BM + r;
		}
		wok[j] = f < N;
		wsrc[j] = base + (wok[j] ? f : 0) * K + 8 * u;
	}
#pragma unroll
	for (int j = 0; j < LX; j++) {
		const int r = (tid >> 3) + 32 * j;
		xok[j] = t0 + r < T;
		xsrc[j] = x + (xok[j] ? t0 + r : 0) * K + 8 * u;
	}
	ATLAS_PDL_ENTRY();
	auto load = [&](int kt, int st) {
		const long long k = (long long)kt * 64 + 8 * u;
		const bool kok = kt < kt1 && k < K;
		uint4 *W = gi_smem + st * (BM + BT) * 8, *X = W + BM * 8;
#pragma unroll
		for (int j = 0; j < LW; j++) {
			const bool ok = kok && wok[j];
			atlas_cp16_cg(W + gi_at((tid >> 3) + 32 * j, u), ok ? wsrc[j] + k - 8 * u : w, ok);
		}
#pragma unroll
		for (int j = 0; j < LX; j++) {
			const bool ok = kok && xok[j];
			atlas_cp16_ca(X + gi_at((tid >> 3) + 32 * j, u), ok ? xsrc[j] + k - 8 * u : x, ok);
		}
		atlas_cp_commit();
	};
#pragma unroll
	for (int st = 0; st < GI_S - 1; st++)
		load(kt0 + st, st);

	float acc[MI][4][4], tot[MI][4][4];
#pragma unroll
	for (int i = 0; i < MI; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[i][j][e] = tot[i][j][e] = 0.0f;

	int st = 0, fold = c0 + cpw; /* the stage of tile kt; the next range's first chunk */
	for (int kt = kt0; kt < kt1; kt++) {
		atlas_cp_wait<GI_S - 2>();
		__syncthreads(); /* stage kt landed for all; stage kt - 1 is free */
		load(kt + GI_S - 1, st == 0 ? GI_S - 1 : st - 1);
		const uint4 *W = gi_smem + st * (BM + BT) * 8, *X = W + BM * 8;
		st = st + 1 == GI_S ? 0 : st + 1;
#pragma unroll
		for (int cs = 0; cs < 2; cs++) {
			const int ch = kt * 2 + cs;
			if (ch < c0 || ch >= c1)
				continue;
			if (ch == fold) {
				fold += cpw;
				gi_fold<MI>(tot, acc); /* a new range */
			}
#pragma unroll
			for (int ks = 0; ks < 2; ks++) {
				/* k-step ks of the chunk: lane (g, c) takes the 8 bytes
				 * 16ks + 4c .. + 4 (half c & 1 of unit 2ks + c / 2) */
				const int un = cs * 4 + 2 * ks + (c >> 1), hf = c & 1;
				uint2 wa[MI], wb[MI], xb[4];
#pragma unroll
				for (int i = 0; i < MI; i++) {
					const int r = (wm * MI + i) * 16 + g;
					wa[i] = ((const uint2 *)(W + gi_at(r, un)))[hf];
					wb[i] = ((const uint2 *)(W + gi_at(r + 8, un)))[hf];
				}
#pragma unroll
				for (int j = 0; j < 4; j++)
					xb[j] = ((const uint2 *)(X + gi_at(wt * 32 + j * 8 + g, un)))[hf];
#pragma unroll
				for (int i = 0; i < MI; i++)
#pragma unroll
					for (int j = 0; j < 4; j++)
						atlas_mma_bf16(acc[i][j], wa[i].x, wb[i].x, wa[i].y, wb[i].y,
							       xb[j].x, xb[j].y);
			}
		}
	}
	atlas_cp_wait<0>();

	/* C fragment: [0..1] = row g, tokens 2c and 2c + 1; [2..3] = row g + 8 */
	if (a.ws) {
		/* split: range z's chain, unmerged, for atlas_gemm_inv_reduce */
		const long long rows = a.swiglu ? 2 * N : N;
		float *ws = a.ws + a.ws_off[s] + (long long)blockIdx.z * T * rows;
#pragma unroll
		for (int i = 0; i < MI; i++)
#pragma unroll
			for (int j = 0; j < 4; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const long long t = t0 + wt * 32 + j * 8 + 2 * c + (e & 1);
					const int h = e >> 1; /* row g or g + 8 */
					long long f;
					if (a.swiglu)
						f = bx * (BM / 2) + (wm * MI + i) * 8 + g + (h ? N : 0);
					else
						f = bx * BM + (wm * MI + i) * 16 + g + 8 * h;
					if (t < T && (a.swiglu ? f - (h ? N : 0) : f) < N)
						ws[t * rows + f] = acc[i][j][e];
				}
		return;
	}
	/* the last non-empty range, then the empty ones (the GEMV adds their
	 * zero partials too) */
	const int ranges = cpw > 0 ? (nch + cpw - 1) / cpw : 0;
#pragma unroll
	for (int i = 0; i < MI; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float v = tot[i][j][e];
				if (ranges > 0)
					v += acc[i][j][e];
				for (int q = ranges; q < a.wpr; q++)
					v += 0.0f;
				tot[i][j][e] = v;
			}
#pragma unroll
	for (int i = 0; i < MI; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const long long t = t0 + wt * 32 + j * 8 + 2 * c + e;
				if (t >= T)
					continue;
				if (a.swiglu) {
					const long long f = bx * (BM / 2) + (wm * MI + i) * 8 + g;
					if (f >= N)
						continue;
					float v = atlas_bf(atlas_tobf(tot[i][j][e]));
					const float up = atlas_bf(atlas_tobf(tot[i][j][2 + e]));
					v = v / (1.0f + expf(-v)) * up;
					((bf16 *)a.out[0])[t * N + f] = atlas_tobf(v);
					continue;
				}
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const long long f = bx * BM + (wm * MI + i) * 16 + g + 8 * h;
					if (f >= N)
						continue;
					float v = tot[i][j][2 * h + e];
					if (a.bias[s])
						v += atlas_bf(((const bf16 *)a.bias[s])[f]);
					if (a.out_f32)
						((float *)a.out[s])[t * N + f] = v;
					else
						((bf16 *)a.out[s])[t * N + f] = atlas_tobf(v);
				}
			}
}

extern "C" __global__ void __launch_bounds__(256, 1)
	atlas_gemm_inv(const __grid_constant__ atlas_ginv_args a)
{
	ginv_impl<2, 4, 4>(a);
}

extern "C" __global__ void __launch_bounds__(256, 1)
	atlas_gemm_inv_t64(const __grid_constant__ atlas_ginv_args a)
{
	ginv_impl<4, 2, 2>(a);
}

extern "C" __global__ void __launch_bounds__(256, 1)
	atlas_gemm_inv_t32(const __grid_constant__ atlas_ginv_args a)
{
	ginv_impl<8, 1, 2>(a);
}

/* Split mode's second pass: grid (any, nseg), block 256, grid-stride over
 * product blockIdx.y's T x N outputs: 0 + range 0 + range 1 + ... (the
 * ranges past the last non-empty one add +0, as in the GEMV), then the
 * bias or the swiglu, then the rounding: atlas_gemm_inv's epilogue. */
extern "C" __global__ void atlas_gemm_inv_reduce(const __grid_constant__ atlas_ginv_args a)
{
	ATLAS_PDL_ENTRY();
	const int s = blockIdx.y;
	const long long T = a.T, N = a.N[s], rows = a.swiglu ? 2 * N : N;
	const long long nch = (a.K + 31) / 32, cpw = (nch + a.wpr - 1) / a.wpr;
	const long long ranges = cpw > 0 ? (nch + cpw - 1) / cpw : 0;
	const float *ws = a.ws + a.ws_off[s];
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < T * N;
	     i += (long long)gridDim.x * blockDim.x) {
		const long long t = i / N, f = i % N;
		float v = gi_merge(ws + t * rows + f, T * rows, ranges, a.wpr);
		if (a.swiglu) {
			float up = gi_merge(ws + t * rows + N + f, T * rows, ranges, a.wpr);
			v = atlas_bf(atlas_tobf(v));
			up = atlas_bf(atlas_tobf(up));
			v = v / (1.0f + expf(-v)) * up;
			((bf16 *)a.out[0])[i] = atlas_tobf(v);
			continue;
		}
		if (a.bias[s])
			v += atlas_bf(((const bf16 *)a.bias[s])[f]);
		if (a.out_f32)
			((float *)a.out[s])[i] = v;
		else
			((bf16 *)a.out[s])[i] = atlas_tobf(v);
	}
}
