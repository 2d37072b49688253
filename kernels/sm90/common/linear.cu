/* linear.cu - the linear layer out[T,N] = x[T,K] W^T + bias, W [N,K] and
 * bias [N] in wdt (bias may be NULL), x and out bf16, FP32 accumulation.
 *
 * atlas_gemv (decode, T <= 8): grid ceil(N/rpb), block 256, rpb output
 * features per block and 8/rpb warps splitting each feature's K (the host
 * picks rpb so the grid covers the SMs several times). Each warp streams
 * its share of the weight row once, 16 bytes per lane per load with
 * GEMV_UNROLL loads in flight when K % 8 == 0 and W is 16-byte aligned
 * (else element by element), and keeps one accumulator per row of x.
 * Bandwidth bound: N*K*sizeof(wdt) bytes of weights per call. Larger T is
 * handled in groups of 8 rows (each group re-reads W).
 *
 * atlas_gemm (prefill, any T): grid (ceil(N/64), ceil(T/64)), block 256,
 * one 64x64 output tile per block. BF16 weights go through the tensor
 * cores (nvcuda::wmma 16x16x16 bf16 fragments, FP32 accumulators); F16
 * and F32 weights take a shared-memory tiled FP32-FMA loop. Tails in T, N
 * and K are zero-filled in shared memory and masked in the epilogue,
 * which also adds the bias. 2*T*N*K FLOPs; W is re-read ceil(T/64) times.
 */
#include <mma.h>

#include "common.cuh"

/* Output stores: BF16 activations, or FP32 (the logits). */
static __device__ __forceinline__ void lin_store(bf16 *p, float v)
{
	*p = atlas_tobf(v);
}

static __device__ __forceinline__ void lin_store(float *p, float v)
{
	*p = v;
}

/* Rows of x per pass of atlas_gemv: each pass re-reads W. */
#define GEMV_MAXT 8
/* 16-byte weight loads each lane issues before it uses any: enough bytes
 * in flight per SM to cover HBM latency (Little's law). */
#define GEMV_UNROLL 4

/* One warp's share of out[t0.., n]: acc[t] += x[t, k] w[n, k] over the
 * k-slices of 256 columns numbered ks, ks + wpr, ks + 2*wpr, ...; each
 * lane takes 8 consecutive columns of every slice. x comes from global
 * memory (L1 hits after the first warp of the block reads it). */
template <int WDT, int MT>
static __device__ __forceinline__ void gemv_vec(float (&acc)[MT], const bf16 *x,
						const void *w, long long n, long long K, int nt,
						int ks, int wpr)
{
	const int lane = threadIdx.x & 31;
	const long long step = (long long)wpr * 256;
	const long long wo = n * K;
	long long k = (long long)ks * 256 + lane * 8;
	for (; k + (GEMV_UNROLL - 1) * step < K; k += GEMV_UNROLL * step) {
		float wf[GEMV_UNROLL][8];
#pragma unroll
		for (int u = 0; u < GEMV_UNROLL; u++)
			atlas_wload8<WDT>(w, wo + k + u * step, wf[u]);
#pragma unroll
		for (int u = 0; u < GEMV_UNROLL; u++) {
#pragma unroll
			for (int t = 0; t < MT; t++) {
				if (t < nt) {
					float xf[8];
					atlas_unpack8(__ldg((const uint4 *)(x + t * K + k + u * step)), xf);
#pragma unroll
					for (int j = 0; j < 8; j++)
						acc[t] = fmaf(xf[j], wf[u][j], acc[t]);
				}
			}
		}
	}
	for (; k < K; k += step) {
		float wf[8];
		atlas_wload8<WDT>(w, wo + k, wf);
#pragma unroll
		for (int t = 0; t < MT; t++) {
			if (t < nt) {
				float xf[8];
				atlas_unpack8(__ldg((const uint4 *)(x + t * K + k)), xf);
#pragma unroll
				for (int j = 0; j < 8; j++)
					acc[t] = fmaf(xf[j], wf[j], acc[t]);
			}
		}
	}
}

/* Any K and alignment: element by element, the same slice split. */
template <int MT>
static __device__ __forceinline__ void gemv_scalar(float (&acc)[MT], const bf16 *x,
						   const void *w, int wdt, long long n, long long K,
						   int nt, int ks, int wpr)
{
	const int lane = threadIdx.x & 31;
	for (long long k = (long long)ks * 32 + lane; k < K; k += (long long)wpr * 32) {
		float wf = atlas_wload(w, wdt, n * K + k);
#pragma unroll
		for (int t = 0; t < MT; t++)
			if (t < nt)
				acc[t] = fmaf(atlas_bf(x[t * K + k]), wf, acc[t]);
	}
}

/* One warp's partial sums of rows 0..nt-1 of x (MT >= nt registers)
 * into red[warp][t]. */
template <int MT>
static __device__ __forceinline__ void gemv_rows(float (*red)[GEMV_MAXT], const bf16 *xt,
						 const void *w, int wdt, long long n, long long N,
						 long long K, int nt, int ks, int wpr, bool vec)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	float acc[MT];
#pragma unroll
	for (int t = 0; t < MT; t++)
		acc[t] = 0.0f;
	if (n < N) {
		if (vec && wdt == ATLAS_WDT_BF16)
			gemv_vec<ATLAS_WDT_BF16, MT>(acc, xt, w, n, K, nt, ks, wpr);
		else if (vec && wdt == ATLAS_WDT_F16)
			gemv_vec<ATLAS_WDT_F16, MT>(acc, xt, w, n, K, nt, ks, wpr);
		else if (vec && wdt == ATLAS_WDT_F32)
			gemv_vec<ATLAS_WDT_F32, MT>(acc, xt, w, n, K, nt, ks, wpr);
		else
			gemv_scalar<MT>(acc, xt, w, wdt, n, K, nt, ks, wpr);
	}
#pragma unroll
	for (int t = 0; t < MT; t++) {
		float s = atlas_warp_sum(acc[t]);
		if (lane == 0)
			red[warp][t] = s;
	}
}

/* Block of 8 warps, `rpb` output features per block (1, 2, 4 or 8), so
 * 8 / rpb warps split the K dimension of each feature: when N is small
 * against the SM count the host picks a small rpb so that every SM still
 * streams weights with many loads in flight (split-K without atomics:
 * the partial sums meet in shared memory). */
template <typename OutT>
static __device__ __forceinline__ void gemv_impl(OutT *out, const bf16 *x, const void *w,
						 const void *bias, int wdt, long long T, long long N,
						 long long K, int rpb)
{
	__shared__ float red[8][GEMV_MAXT]; /* per-warp partial sums */
	const int warp = threadIdx.x >> 5;
	if (rpb != 1 && rpb != 2 && rpb != 4 && rpb != 8)
		rpb = 8;
	const int wpr = 8 / rpb, ks = warp % wpr;
	const long long n = (long long)blockIdx.x * rpb + warp / wpr;
	const bool vec = K % 8 == 0 && atlas_aligned(w, 16) && atlas_aligned(x, 16) &&
			 (wdt != ATLAS_WDT_F32 || atlas_aligned(w, 32));

	for (long long t0 = 0; t0 < T; t0 += GEMV_MAXT) {
		const int nt = T - t0 < GEMV_MAXT ? (int)(T - t0) : GEMV_MAXT;
		const bf16 *xt = x + t0 * K;
		if (nt == 1) /* decode at batch 1: one accumulator, fewer registers */
			gemv_rows<1>(red, xt, w, wdt, n, N, K, nt, ks, wpr, vec);
		else
			gemv_rows<GEMV_MAXT>(red, xt, w, wdt, n, N, K, nt, ks, wpr, vec);
		__syncthreads();
		if ((int)threadIdx.x < rpb * nt) {
			const int r = threadIdx.x / nt, t = threadIdx.x % nt;
			const long long nn = (long long)blockIdx.x * rpb + r;
			if (nn < N) {
				float s = 0.0f;
				for (int i = 0; i < wpr; i++) /* fixed order: deterministic */
					s += red[r * wpr + i][t];
				const float b = bias ? atlas_wload(bias, wdt, nn) : 0.0f;
				lin_store(out + (t0 + t) * N + nn, b + s);
			}
		}
		__syncthreads(); /* red is reused by the next group of rows */
	}
}

extern "C" __global__ void atlas_gemv(bf16 *out, const bf16 *x, const void *w, const void *bias,
				      int wdt, long long T, long long N, long long K, int rpb)
{
	gemv_impl(out, x, w, bias, wdt, T, N, K, rpb);
}

/* The same with FP32 output: the logits, so sampling sees full precision. */
extern "C" __global__ void atlas_gemv_f32(float *out, const bf16 *x, const void *w,
					  const void *bias, int wdt, long long T, long long N,
					  long long K, int rpb)
{
	gemv_impl(out, x, w, bias, wdt, T, N, K, rpb);
}

/* --- gemm ---------------------------------------------------------- */

#define GEMM_BM 64  /* rows of x (tokens) per tile */
#define GEMM_BN 64  /* rows of W (output features) per tile */
#define GEMM_BK 32  /* K per shared-memory step, tensor-core path */
#define GEMM_PAD 8  /* bf16 row padding: keeps wmma pointers 32-byte aligned */
#define GEMM_LDS (GEMM_BK + GEMM_PAD)
#define GEMM_LDC (GEMM_BN + 4)
#define GEMM_FK 16  /* K per shared-memory step, FP32-FMA path */
#define GEMM_FLD (GEMM_BM + 4)

/* Shared memory of either path, in bytes. */
#define GEMM_SMEM_WMMA (2 * GEMM_BM * GEMM_LDS * 2 + GEMM_BM * GEMM_LDC * 4)
#define GEMM_SMEM_FMA (2 * GEMM_FK * GEMM_FLD * 4)
#define GEMM_SMEM (GEMM_SMEM_WMMA > GEMM_SMEM_FMA ? GEMM_SMEM_WMMA : GEMM_SMEM_FMA)

/* One 64x32 bf16 tile of a [rows, K] matrix into shared memory (row
 * stride GEMM_LDS), rows r0.., columns k0..; out-of-range elements are 0.
 * 256 threads, 8 elements each. */
static __device__ __forceinline__ void gemm_load_tile(bf16 *s, const bf16 *g, long long rows,
						      long long K, long long r0, long long k0,
						      bool vec)
{
	for (int i = threadIdx.x; i < GEMM_BM * GEMM_BK / 8; i += blockDim.x) {
		const int r = i / (GEMM_BK / 8), c = (i % (GEMM_BK / 8)) * 8;
		const long long gr = r0 + r, gk = k0 + c;
		bf16 *d = s + r * GEMM_LDS + c;
		if (vec && gr < rows && gk < K) {
			/* K % 8 == 0: the whole vector is inside the row */
			*(uint4 *)d = __ldg((const uint4 *)(g + gr * K + gk));
		} else {
#pragma unroll
			for (int j = 0; j < 8; j++)
				d[j] = gr < rows && gk + j < K ? g[gr * K + gk + j]
							      : atlas_tobf(0.0f);
		}
	}
}

template <typename OutT>
static __device__ void gemm_wmma(unsigned char *smem, OutT *out, const bf16 *x, const bf16 *w,
				 const void *bias, int wdt, long long T, long long N, long long K)
{
	using namespace nvcuda;
	bf16 *as = (bf16 *)smem;
	bf16 *bs = as + GEMM_BM * GEMM_LDS;
	float *cs = (float *)(bs + GEMM_BN * GEMM_LDS);
	const long long n0 = (long long)blockIdx.x * GEMM_BN, t0 = (long long)blockIdx.y * GEMM_BM;
	const int warp = threadIdx.x >> 5;
	const int wm = warp & 3;  /* 16-row slab of the tile */
	const int wn = warp >> 2; /* 32-column slab of the tile */
	const bool xvec = K % 8 == 0 && atlas_aligned(x, 16);
	const bool wvec = K % 8 == 0 && atlas_aligned(w, 16);

	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
	wmma::fill_fragment(acc[0], 0.0f);
	wmma::fill_fragment(acc[1], 0.0f);
	for (long long k0 = 0; k0 < K; k0 += GEMM_BK) {
		gemm_load_tile(as, x, T, K, t0, k0, xvec);
		gemm_load_tile(bs, w, N, K, n0, k0, wvec);
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < GEMM_BK; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
			wmma::load_matrix_sync(a, as + wm * 16 * GEMM_LDS + kk, GEMM_LDS);
#pragma unroll
			for (int f = 0; f < 2; f++) {
				/* B(k, n) = W[n, k]: W's rows read as a column-major B */
				wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
				wmma::load_matrix_sync(b, bs + (wn * 32 + f * 16) * GEMM_LDS + kk,
						       GEMM_LDS);
				wmma::mma_sync(acc[f], a, b, acc[f]);
			}
		}
		__syncthreads();
	}
#pragma unroll
	for (int f = 0; f < 2; f++)
		wmma::store_matrix_sync(cs + wm * 16 * GEMM_LDC + wn * 32 + f * 16, acc[f], GEMM_LDC,
					wmma::mem_row_major);
	__syncthreads();
	for (int i = threadIdx.x; i < GEMM_BM * GEMM_BN; i += blockDim.x) {
		const int r = i / GEMM_BN, c = i % GEMM_BN;
		const long long t = t0 + r, n = n0 + c;
		if (t < T && n < N) {
			float b = bias ? atlas_wload(bias, wdt, n) : 0.0f;
			lin_store(out + t * N + n, b + cs[r * GEMM_LDC + c]);
		}
	}
}

/* The FP32-FMA tile: each of the 256 threads owns a 4x4 block of the
 * 64x64 output; x and W tiles are staged K-major as float. */
template <typename OutT>
static __device__ void gemm_fma(unsigned char *smem, OutT *out, const bf16 *x, const void *w,
				const void *bias, int wdt, long long T, long long N, long long K)
{
	float *as = (float *)smem;	    /* [GEMM_FK][GEMM_FLD]: x^T tile */
	float *bs = as + GEMM_FK * GEMM_FLD; /* [GEMM_FK][GEMM_FLD]: W^T tile */
	const long long n0 = (long long)blockIdx.x * GEMM_BN, t0 = (long long)blockIdx.y * GEMM_BM;
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
	float acc[4][4] = {};

	for (long long k0 = 0; k0 < K; k0 += GEMM_FK) {
		for (int i = threadIdx.x; i < GEMM_BM * GEMM_FK; i += blockDim.x) {
			const int r = i / GEMM_FK, kk = i % GEMM_FK;
			const long long gk = k0 + kk;
			const long long gt = t0 + r, gn = n0 + r;
			as[kk * GEMM_FLD + r] = gt < T && gk < K ? atlas_bf(x[gt * K + gk]) : 0.0f;
			bs[kk * GEMM_FLD + r] = gn < N && gk < K ? atlas_wload(w, wdt, gn * K + gk)
								 : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < GEMM_FK; kk++) {
			float a[4], b[4];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				a[i] = as[kk * GEMM_FLD + ty * 4 + i];
				b[i] = bs[kk * GEMM_FLD + tx * 4 + i];
			}
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const long long t = t0 + ty * 4 + i;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const long long n = n0 + tx * 4 + j;
			if (t < T && n < N) {
				float b = bias ? atlas_wload(bias, wdt, n) : 0.0f;
				lin_store(out + t * N + n, b + acc[i][j]);
			}
		}
	}
}

extern "C" __global__ void atlas_gemm(bf16 *out, const bf16 *x, const void *w, const void *bias,
				      int wdt, long long T, long long N, long long K)
{
	__shared__ __align__(128) unsigned char smem[GEMM_SMEM];
	if (wdt == ATLAS_WDT_BF16)
		gemm_wmma(smem, out, x, (const bf16 *)w, bias, wdt, T, N, K);
	else
		gemm_fma(smem, out, x, w, bias, wdt, T, N, K);
}

/* The same with FP32 output (the logits). */
extern "C" __global__ void atlas_gemm_f32(float *out, const bf16 *x, const void *w,
					  const void *bias, int wdt, long long T, long long N,
					  long long K)
{
	__shared__ __align__(128) unsigned char smem[GEMM_SMEM];
	if (wdt == ATLAS_WDT_BF16)
		gemm_wmma(smem, out, x, (const bf16 *)w, bias, wdt, T, N, K);
	else
		gemm_fma(smem, out, x, w, bias, wdt, T, N, K);
}
