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
 *  - the same mma.sync m16n8k16 with the same operands in the same slots
 *    (lane (g, c) takes the 16 bytes k0 + 8c .. + 8 of a 32-wide chunk
 *    for rows g and g + 8 and for token g; uint4 words x, y feed k-step 0
 *    and z, w k-step 1; see gemv_tc.cu);
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
 * Launch: struct atlas_ginv_args (kernel_args.h), grid (ceil(N / 128)
 * (swiglu: ceil(N / 64)), ceil(T / 128)), block 256, dynamic shared
 * memory ATLAS_GINV_SMEM. Block tile 128 weight rows x 128 tokens (with
 * swiglu, 64 features: each 16-row m-tile holds 8 gate rows then the 8 up
 * rows of the same features, as a GEMV warp tile does, so one lane ends
 * with the gate and up sums of an output); warps 2 (rows) x 4 (tokens),
 * 64 x 32 each. K goes in tiles of 64 (two chunks) through a ring of
 * ATLAS_GINV_STAGES cp.async stages. K % 8 == 0, x and W 16-byte aligned.
 *
 * Shared memory: a stage is the W tile then the x tile, 128 rows of 128
 * bytes each; 16-byte unit u of row r sits at unit u ^ s(r) of the row,
 * s(r) = (r & 1) << 2 | (r >> 1) & 3, so the eight lanes of a quarter warp
 * (rows 2i and 2i + 1, units c = 0..3 of one chunk) read eight distinct
 * bank groups.
 */
#include "common.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#define GI_BM 128 /* weight rows per block tile */
#define GI_BT 128 /* tokens per block tile */
#define GI_S ATLAS_GINV_STAGES
#define GI_TILE (128 * 8) /* uint4 units of one 128 x 64 tile */

static __device__ __forceinline__ int gi_at(int r, int u)
{
	return r * 8 + (u ^ (((r & 1) << 2) | ((r >> 1) & 3)));
}

extern "C" __global__ void __launch_bounds__(256, 1)
	atlas_gemm_inv(const __grid_constant__ atlas_ginv_args a)
{
	extern __shared__ uint4 gi_smem[];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, c = lane & 3;
	const int wm = warp & 1, wt = warp >> 1; /* rows wm * 64 .., tokens wt * 32 .. */
	const long long K = a.K, T = a.T, N = a.N;
	const long long t0 = (long long)blockIdx.y * GI_BT;
	const long long nch = (K + 31) / 32, nkt = (nch + 1) / 2;
	const long long cpw = (nch + a.wpr - 1) / a.wpr;
	const bf16 *w = (const bf16 *)a.w, *wu = (const bf16 *)a.wu, *x = (const bf16 *)a.x;

	/* the loader: thread tid copies unit u = tid & 7 of tile rows
	 * (tid >> 3) + 32 j, j = 0..3, of both tiles */
	const int u = tid & 7;
	const bf16 *wsrc[4], *xsrc[4];
	bool wok[4], xok[4];
#pragma unroll
	for (int j = 0; j < 4; j++) {
		const int r = (tid >> 3) + 32 * j;
		long long f;
		const bf16 *base = w;
		if (a.swiglu) {
			f = (long long)blockIdx.x * 64 + (r >> 4) * 8 + (r & 7);
			base = (r & 8) ? wu : w;
		} else {
			f = (long long)blockIdx.x * GI_BM + r;
		}
		wok[j] = f < N;
		wsrc[j] = base + (wok[j] ? f : 0) * K + 8 * u;
		xok[j] = t0 + r < T;
		xsrc[j] = x + (xok[j] ? t0 + r : 0) * K + 8 * u;
	}
	ATLAS_PDL_ENTRY();
	auto load = [&](long long kt, int st) {
		const long long k = kt * 64 + 8 * u;
		const bool kok = kt < nkt && k < K;
		uint4 *W = gi_smem + st * 2 * GI_TILE, *X = W + GI_TILE;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int r = (tid >> 3) + 32 * j;
			const bool ow = kok && wok[j], ox = kok && xok[j];
			atlas_cp16_cg(W + gi_at(r, u), ow ? wsrc[j] + kt * 64 : w, ow);
			atlas_cp16_ca(X + gi_at(r, u), ox ? xsrc[j] + kt * 64 : x, ox);
		}
		atlas_cp_commit();
	};
#pragma unroll
	for (int st = 0; st < GI_S - 1; st++)
		load(st, st);

	float acc[4][4][4], tot[4][4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[i][j][e] = tot[i][j][e] = 0.0f;

	for (long long kt = 0; kt < nkt; kt++) {
		atlas_cp_wait<GI_S - 2>();
		__syncthreads(); /* stage kt landed for all; stage kt - 1 is free */
		load(kt + GI_S - 1, (int)((kt + GI_S - 1) % GI_S));
		const uint4 *W = gi_smem + (kt % GI_S) * 2 * GI_TILE, *X = W + GI_TILE;
#pragma unroll
		for (int cs = 0; cs < 2; cs++) {
			const long long ch = kt * 2 + cs;
			if (ch >= nch)
				break;
			if (ch > 0 && ch % cpw == 0) {
				/* a new range: its chain starts from zero */
#pragma unroll
				for (int i = 0; i < 4; i++)
#pragma unroll
					for (int j = 0; j < 4; j++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							tot[i][j][e] += acc[i][j][e];
							acc[i][j][e] = 0.0f;
						}
			}
			uint4 wa[4], wb[4], xb[4];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const int r = wm * 64 + i * 16 + g;
				wa[i] = W[gi_at(r, cs * 4 + c)];
				wb[i] = W[gi_at(r + 8, cs * 4 + c)];
			}
#pragma unroll
			for (int j = 0; j < 4; j++)
				xb[j] = X[gi_at(wt * 32 + j * 8 + g, cs * 4 + c)];
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++) {
					atlas_mma_bf16(acc[i][j], wa[i].x, wb[i].x, wa[i].y, wb[i].y,
						       xb[j].x, xb[j].y);
					atlas_mma_bf16(acc[i][j], wa[i].z, wb[i].z, wa[i].w, wb[i].w,
						       xb[j].z, xb[j].w);
				}
		}
	}
	atlas_cp_wait<0>();

	/* the last non-empty range, then the empty ones (the GEMV adds their
	 * zero partials too) */
	const long long ranges = cpw > 0 ? (nch + cpw - 1) / cpw : 0;
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float v = tot[i][j][e];
				if (ranges > 0)
					v += acc[i][j][e];
				for (long long q = ranges; q < a.wpr; q++)
					v += 0.0f;
				tot[i][j][e] = v;
			}

	/* C fragment: [0..1] = row g, tokens 2c and 2c + 1; [2..3] = row g + 8 */
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const long long t = t0 + wt * 32 + j * 8 + 2 * c + e;
				if (t >= T)
					continue;
				if (a.swiglu) {
					const long long f = (long long)blockIdx.x * 64 + (wm * 4 + i) * 8 + g;
					if (f >= N)
						continue;
					float v = atlas_bf(atlas_tobf(tot[i][j][e]));
					const float up = atlas_bf(atlas_tobf(tot[i][j][2 + e]));
					v = v / (1.0f + expf(-v)) * up;
					((bf16 *)a.out)[t * N + f] = atlas_tobf(v);
					continue;
				}
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const long long f = (long long)blockIdx.x * GI_BM + wm * 64 + i * 16 + g + 8 * h;
					if (f >= N)
						continue;
					float v = tot[i][j][2 * h + e];
					if (a.bias)
						v += atlas_bf(((const bf16 *)a.bias)[f]);
					if (a.out_f32)
						((float *)a.out)[t * N + f] = v;
					else
						((bf16 *)a.out)[t * N + f] = atlas_tobf(v);
				}
			}
}
