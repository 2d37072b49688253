/* linear.cu - the linear layer out[T,N] = x[T,K] W^T + bias, W [N,K] and
 * bias [N] in wdt (bias may be NULL), x and out bf16, FP32 accumulation.
 *
 * atlas_gemv (decode, T <= 8, any weight dtype; BF16 weights take the
 * tensor-core gemv_tc.cu instead from T = 2; atlas_gemv_f8 and
 * atlas_gemv_w4: F8B and W4B blobs at T = 1, the latter 16 rows a block
 * on the tensor cores): one struct atlas_gemv_args (up to three
 * products of one x, or gate/up with the SwiGLU epilogue), grid = blocks
 * of all products, block 256, rpb weight rows per block and 8/rpb warps
 * splitting each row's K (the host picks rpb so the grid covers the SMs
 * several times). Each warp streams its share of the weight row once, 16
 * bytes per lane per load with 4 (8 at T = 1) loads in flight when
 * K % 8 == 0 and W is 16-byte aligned (else element by element), and
 * keeps one accumulator per row of x. Bandwidth bound: N*K*sizeof(wdt)
 * bytes of weights per call. Larger T is handled in groups of 8 rows
 * (each group re-reads W).
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
#include "../../../lib/backend/cuda/kernel_args.h"

#include <cuda_fp8.h>

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

/* atlas_gemv_f8's 16-byte loads in flight per lane (-D for A/B runs): on
 * the H200 a Qwen3-8B FP8 batch-1 step took 3.90 ms with 4 against 4.06
 * with 8 (bench/h200-2026-12-04-fp8/NOTES.md). */
#ifndef GEMV_F8_UNROLL
#define GEMV_F8_UNROLL 4
#endif

/* Eight weights as loaded: 16 bytes (bf16, f16) or 32 (f32), unpacked
 * only when used, so the loads in flight cost 4 (or 8) registers each. */
struct gemv_raw {
	uint4 a, b;
};

template <int WDT>
static __device__ __forceinline__ gemv_raw gemv_load(const void *w, long long i)
{
	gemv_raw r;
	if (WDT == ATLAS_WDT_F32) {
		const uint4 *p = (const uint4 *)((const float *)w + i);
		r.a = __ldg(p);
		r.b = __ldg(p + 1);
	} else {
		/* weights are read once: no L1 allocation, and L2 fetches whole
		 * 256-byte blocks (on the H200 a Qwen3-8B batch-1 step took
		 * 5.20 ms with these hints against 5.28 with plain __ldg) */
		const uint4 *p = (const uint4 *)((const bf16 *)w + i);
		asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
			     : "=r"(r.a.x), "=r"(r.a.y), "=r"(r.a.z), "=r"(r.a.w)
			     : "l"(p));
		r.b = make_uint4(0, 0, 0, 0);
	}
	return r;
}

template <int WDT>
static __device__ __forceinline__ void gemv_unpack(const gemv_raw &r, float *f)
{
	if (WDT == ATLAS_WDT_BF16) {
		atlas_unpack8(r.a, f);
	} else if (WDT == ATLAS_WDT_F16) {
		union {
			uint4 u;
			__half h[8];
		} v;
		v.u = r.a;
#pragma unroll
		for (int j = 0; j < 8; j++)
			f[j] = __half2float(v.h[j]);
	} else {
		f[0] = __uint_as_float(r.a.x), f[1] = __uint_as_float(r.a.y);
		f[2] = __uint_as_float(r.a.z), f[3] = __uint_as_float(r.a.w);
		f[4] = __uint_as_float(r.b.x), f[5] = __uint_as_float(r.b.y);
		f[6] = __uint_as_float(r.b.z), f[7] = __uint_as_float(r.b.w);
	}
}

/* acc[t] += the dot product of eight weights with x[t, k..k+7], t < nt. */
template <int WDT, int MT>
static __device__ __forceinline__ void gemv_fma8(float (&acc)[MT], const gemv_raw &r,
						 const bf16 *x, long long K, long long k, int nt)
{
	float wf[8];
	gemv_unpack<WDT>(r, wf);
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

/* One warp's share of out[t0.., n]: acc[t] += x[t, k] w[n, k] over the
 * k-slices of 256 columns numbered ks, ks + wpr, ks + 2*wpr, ... from
 * this lane's column k on (8 consecutive columns of every slice). x comes from global
 * memory (L1 hits after the first warp of the block reads it). */
template <int WDT, int MT, int U>
static __device__ __forceinline__ void gemv_vec(float (&acc)[MT], const bf16 *x,
						const void *w, long long n, long long K, int nt,
						int ks, int wpr, long long k)
{
	const long long step = (long long)wpr * 256;
	const long long wo = n * K;
	for (; k + (U - 1) * step < K; k += U * step) {
		gemv_raw r[U];
#pragma unroll
		for (int u = 0; u < U; u++)
			r[u] = gemv_load<WDT>(w, wo + k + u * step);
#pragma unroll
		for (int u = 0; u < U; u++)
			gemv_fma8<WDT, MT>(acc, r[u], x, K, k + u * step, nt);
	}
	for (; k < K; k += step)
		gemv_fma8<WDT, MT>(acc, gemv_load<WDT>(w, wo + k), x, K, k, nt);
}

/* acc[t] += sc * (sixteen FP8 weights . x[t, k..k+15]), t < nt. */
template <int MT>
static __device__ __forceinline__ void gemv_fma16_f8(float (&acc)[MT], uint4 r, float sc,
						     const bf16 *x, long long K, long long k, int nt)
{
	float wf[16];
	const uint32_t wv[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const __half2_raw lo =
		    __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(wv[i] & 0xffff), __NV_E4M3);
		const __half2_raw hi =
		    __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(wv[i] >> 16), __NV_E4M3);
		const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
		wf[4 * i] = a.x, wf[4 * i + 1] = a.y, wf[4 * i + 2] = b.x, wf[4 * i + 3] = b.y;
	}
#pragma unroll
	for (int t = 0; t < MT; t++) {
		if (t < nt) {
			float xf[16], d = 0.0f;
			atlas_unpack8(__ldg((const uint4 *)(x + t * K + k)), xf);
			atlas_unpack8(__ldg((const uint4 *)(x + t * K + k + 8)), xf + 8);
#pragma unroll
			for (int j = 0; j < 16; j++)
				d = fmaf(xf[j], wf[j], d);
			acc[t] = fmaf(d, sc, acc[t]);
		}
	}
}

/* The FP8 form of gemv_vec for an F8B blob (lib/backend/backend.h): 16
 * weights a lane a load (slices of 512 columns), each 16 sharing one
 * scale (blocks are a multiple of 32 columns or the whole row), which
 * multiplies their dot product. Not the tensor-core GEMV's sums: the
 * host uses it outside batch-invariant mode only. */
template <int MT, int U>
static __device__ __forceinline__ void gemv_vec_f8(float (&acc)[MT], const bf16 *x,
						   const void *blob, long long n, long long K, int nt,
						   int wpr, long long k)
{
	const atlas_f8b_head_k *h = (const atlas_f8b_head_k *)blob;
	const uint8_t *q = (const uint8_t *)blob + ATLAS_F8B_HEAD_BYTES + n * K;
	const float *sr = (const float *)((const char *)blob + h->scale_off) + (n / h->bo) * h->nbc;
	/* 32-bit divisions (K < 2^31): a 64-bit one costs a call per load */
	const unsigned bi = (unsigned)h->bi;
	const long long step = (long long)wpr * 512;
	for (; k + (U - 1) * step < K; k += U * step) {
		uint4 r[U];
#pragma unroll
		for (int u = 0; u < U; u++)
			asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
				     : "=r"(r[u].x), "=r"(r[u].y), "=r"(r[u].z), "=r"(r[u].w)
				     : "l"(q + k + u * step));
#pragma unroll
		for (int u = 0; u < U; u++)
			gemv_fma16_f8<MT>(acc, r[u], __ldg(sr + (unsigned)(k + u * step) / bi), x, K, k + u * step,
					  nt);
	}
	for (; k < K; k += step)
		gemv_fma16_f8<MT>(acc, __ldg((const uint4 *)(q + k)), __ldg(sr + (unsigned)k / bi), x,
				  K, k, nt);
}

/* acc += sc * (32 4-bit weights (q - z) . x[k..k+31]): r's nibble j is
 * column k + j; zf = 2^23 + z, so (2^23 + q) - zf is q - z exactly. */
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
 * against weight row n into red[slot][t]. */
template <int MT>
static __device__ __forceinline__ void gemv_rows(float (*red)[GEMV_MAXT], int slot, const bf16 *xt,
						 const void *w, int wdt, long long n, bool live,
						 long long K, int nt, int ks, int wpr, bool vec)
{
	const int lane = threadIdx.x & 31;
	float acc[MT];
#pragma unroll
	for (int t = 0; t < MT; t++)
		acc[t] = 0.0f;
	if (live) {
		/* one row of x: twice the loads in flight (registers allow it;
		 * four times was slower on the H200: 5.63 against 5.44 ms per
		 * Qwen3-8B decode step) */
		constexpr int U = MT == 1 ? 2 * GEMV_UNROLL : GEMV_UNROLL;
		const long long kl = (long long)ks * 256 + lane * 8;
		if (vec && wdt == ATLAS_WDT_BF16)
			gemv_vec<ATLAS_WDT_BF16, MT, U>(acc, xt, w, n, K, nt, ks, wpr, kl);
		else if (vec && wdt == ATLAS_WDT_F16)
			gemv_vec<ATLAS_WDT_F16, MT, U>(acc, xt, w, n, K, nt, ks, wpr, kl);
		else if (vec && wdt == ATLAS_WDT_F32)
			gemv_vec<ATLAS_WDT_F32, MT, U>(acc, xt, w, n, K, nt, ks, wpr, kl);
		else
			gemv_scalar<MT>(acc, xt, w, wdt, n, K, nt, ks, wpr);
	}
#pragma unroll
	for (int t = 0; t < MT; t++) {
		float s = atlas_warp_sum(acc[t]);
		if (lane == 0)
			red[slot][t] = s;
	}
}

/* The block's place in a launch of atlas_gemv: which product (segment),
 * and the first output feature of the block within it. */
struct gemv_where {
	const struct atlas_gemv_seg *seg;
	long long n0;
};

static __device__ __forceinline__ gemv_where gemv_locate(const atlas_gemv_args &a)
{
	long long b = blockIdx.x;
	const int fpb = a.swiglu ? a.rpb / 2 : a.rpb; /* output features per block */
	int s = 0;
	for (; s < a.nseg - 1; s++) {
		const long long nb = (a.seg[s].N + fpb - 1) / fpb;
		if (b < nb)
			break;
		b -= nb;
	}
	gemv_where r = {&a.seg[s], b * fpb};
	return r;
}

/* Output feature r of a block, row t of x, from the warps' partial sums
 * in red (wpr warps a weight row, added in warp order: deterministic):
 * the sum, or with swiglu (rows 2r and 2r + 1 the gate and up rows)
 * silu(g) u, g and u rounded to bf16 first as the unfused matmul and
 * swiglu ops round them. */
static __device__ __forceinline__ float gemv_out(float (*red)[GEMV_MAXT], int r, int t, int wpr,
						 bool swiglu)
{
	float s = 0.0f;
	if (!swiglu) {
		for (int i = 0; i < wpr; i++)
			s += red[r * wpr + i][t];
		return s;
	}
	float u = 0.0f;
	for (int i = 0; i < wpr; i++)
		s += red[(2 * r) * wpr + i][t];
	for (int i = 0; i < wpr; i++)
		u += red[(2 * r + 1) * wpr + i][t];
	s = atlas_bf(atlas_tobf(s));
	u = atlas_bf(atlas_tobf(u));
	return s / (1.0f + expf(-s)) * u;
}

/* The block's outputs of rows t0..t0+nt-1 of x from the warps' partial
 * sums in red (added in warp order: deterministic), with the bias or the
 * SwiGLU epilogue (g and u rounded to bf16 first, as the unfused matmul
 * and swiglu ops round them). Every thread of the block must call it. */
static __device__ __forceinline__ void gemv_finish(const atlas_gemv_args &a, const gemv_where &g,
						   float (*red)[GEMV_MAXT], int rpb, int wpr,
						   long long t0, int nt)
{
	const long long N = g.seg->N;
	__syncthreads();
	const int outs = a.swiglu ? rpb / 2 : rpb; /* features this block writes */
	if ((int)threadIdx.x < outs * nt) {
		const int r = threadIdx.x / nt, t = threadIdx.x % nt;
		const long long nn = g.n0 + r;
		if (nn < N) {
			float s = gemv_out(red, r, t, wpr, a.swiglu);
			if (!a.swiglu && g.seg->bias)
				s += atlas_wload(g.seg->bias,
						 a.wdt == ATLAS_WDT_F8B || a.wdt == ATLAS_WDT_W4B ||
							     a.wdt == ATLAS_WDT_FP4B
						     ? ATLAS_WDT_BF16
						     : a.wdt,
						 nn);
			const long long o = (t0 + t) * N + nn;
			if (a.out_f32)
				((float *)g.seg->out)[o] = s;
			else
				((bf16 *)g.seg->out)[o] = atlas_tobf(s);
		}
	}
}

/* atlas_gemv: block of 8 warps; a.rpb weight rows per block (1, 2, 4 or
 * 8), so 8 / rpb warps split the K dimension of each row: when N is small
 * against the SM count the host picks a small rpb so that every SM still
 * streams weights with many loads in flight (split-K without atomics:
 * the partial sums meet in shared memory, in a fixed order).
 *
 * Segments: the blocks of seg[0] come first, then those of seg[1], ...
 * (the q, k and v projections of one x in one launch). SwiGLU mode: the
 * block's rows alternate gate row n, up row n (seg[0].w, seg[1].w) and the
 * output is silu(g) * u, with g and u rounded to bf16 first as the
 * unfused matmul + swiglu ops round them.
 *
 * Programmatic dependent launch: the weights never change, so at T = 1
 * (a.pre) each warp issues its first loads before the wait for the
 * previous kernel: a block resident while the small kernels before it
 * run has its first bytes on the way. */
extern "C" __global__ void __launch_bounds__(256, 3) atlas_gemv(const __grid_constant__ atlas_gemv_args a)
{
	__shared__ float red[8][GEMV_MAXT]; /* per-warp partial sums */
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int rpb = a.rpb == 1 || a.rpb == 2 || a.rpb == 4 || a.rpb == 8 ? a.rpb : 8;
	const int wpr = 8 / rpb, ks = warp % wpr, row = warp / wpr;
	const gemv_where g = gemv_locate(a);
	const long long K = a.K, N = g.seg->N;
	/* this warp's weight row */
	const void *w;
	long long n;
	if (a.swiglu) {
		w = a.seg[row & 1].w;
		n = g.n0 + row / 2;
	} else {
		w = g.seg->w;
		n = g.n0 + row;
	}
	const bool live = n < N;
	const bool vec = K % 8 == 0 && atlas_aligned(w, 16) && atlas_aligned(a.x, 16) &&
			 (a.wdt != ATLAS_WDT_F32 || atlas_aligned(w, 32));
	/* batch 1, BF16: the warp's first GEMV_PRE loads go out before the
	 * wait (weights never change), so a block resident while the previous
	 * kernels finish has its first bytes on the way */
	constexpr int U1 = 2 * GEMV_UNROLL;
	const long long step1 = (long long)wpr * 256, k1 = (long long)ks * 256 + lane * 8;
	const bool pre = a.pre && a.T == 1 && live && vec && a.wdt == ATLAS_WDT_BF16 &&
			 k1 + (U1 - 1) * step1 < K;
	gemv_raw r1[U1];
	if (pre) {
#pragma unroll
		for (int u = 0; u < U1; u++)
			r1[u] = gemv_load<ATLAS_WDT_BF16>(w, n * K + k1 + u * step1);
	}
	ATLAS_PDL_ENTRY();
	if (a.T == 1) { /* uniform across the block */
		if (pre) {
			float acc[1] = {0.0f};
			const bf16 *x = (const bf16 *)a.x;
#pragma unroll
			for (int u = 0; u < U1; u++)
				gemv_fma8<ATLAS_WDT_BF16, 1>(acc, r1[u], x, K, k1 + u * step1, 1);
			gemv_vec<ATLAS_WDT_BF16, 1, U1>(acc, x, w, n, K, 1, ks, wpr,
							 k1 + U1 * step1);
			const float sum = atlas_warp_sum(acc[0]);
			if (lane == 0)
				red[warp][0] = sum;
		} else {
			gemv_rows<1>(red, warp, (const bf16 *)a.x, w, a.wdt, n, live, K, 1, ks, wpr,
				     vec);
		}
		gemv_finish(a, g, red, rpb, wpr, 0, 1);
		return;
	}

	for (long long t0 = 0; t0 < a.T; t0 += GEMV_MAXT) {
		const int nt = a.T - t0 < GEMV_MAXT ? (int)(a.T - t0) : GEMV_MAXT;
		const bf16 *xt = (const bf16 *)a.x + t0 * K;
		if (nt == 1) /* the last row: one accumulator, fewer registers */
			gemv_rows<1>(red, warp, xt, w, a.wdt, n, live, K, nt, ks, wpr, vec);
		else
			gemv_rows<GEMV_MAXT>(red, warp, xt, w, a.wdt, n, live, K, nt, ks, wpr, vec);
		gemv_finish(a, g, red, rpb, wpr, t0, nt);
		__syncthreads(); /* red is reused by the next group of rows */
	}
}

/* atlas_moe_gemv1: the expert products of the moe op (moe.cu's contract,
 * struct atlas_moe_args; BF16 experts, K % 8 == 0, 16-byte aligned rows)
 * as atlas_gemv computes a batch-1 product, for decode steps outside
 * batch-invariant mode whose groups are about one token (the tensor-core
 * atlas_moe_gemv* pads each group to 8 tokens and streams through a
 * per-warp cp.async ring; on dense weights atlas_gemv is the faster of
 * the two at T = 1). Block (x, slot): the slot-th chosen expert's rows
 * x rpb .., 8 / rpb warps splitting each row's K (SwiGLU: rows pair gate
 * and up of one feature, as atlas_gemv's do); a lane issues all its
 * loads of a 256-column slice round (up to MOE1_UNROLL) before it uses
 * any, so a short row (768 columns: 3 loads a lane) still has its bytes
 * in flight together. Each token of the group in turn (a group of
 * several re-reads the rows, from L2); partial sums added in warp order,
 * then the SwiGLU epilogue (g and u rounded to bf16 first) or none, out
 * bf16 at the assignment's row. Not atlas_moe_gemv*'s sums: the host
 * uses it outside batch-invariant mode only. */
#define MOE1_UNROLL 8

extern "C" __global__ void __launch_bounds__(256, 3) atlas_moe_gemv1(const __grid_constant__ atlas_moe_args a)
{
	__shared__ float red[8][GEMV_MAXT]; /* column 0: the token in hand */
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int rpb = a.rpb == 1 || a.rpb == 2 || a.rpb == 4 || a.rpb == 8 ? a.rpb : 8;
	const int wpr = 8 / rpb, ks = warp % wpr, row = warp / wpr;
	const int fpb = a.swiglu ? rpb / 2 : rpb; /* features a block writes */
	const long long K = a.K, N = a.N;
	ATLAS_PDL_ENTRY();
	int e, g0, gn;
	if (!atlas_moe_group(a, &e, &g0, &gn))
		return;
	const long long f0 = (long long)blockIdx.x * fpb;
	const long long n = f0 + (a.swiglu ? row / 2 : row);
	const bf16 *w = (const bf16 *)(a.swiglu && (row & 1) ? a.w1[e] : a.w0[e]) + n * K;
	const bool live = n < N;
	const long long step = (long long)wpr * 256;
	for (int t = 0; t < gn; t++) {
		const int asg = a.list[g0 + t];
		const bf16 *x = (const bf16 *)a.x + (long long)(asg / a.xdiv) * K;
		float acc[1] = {0.0f};
		for (long long k = (long long)ks * 256 + lane * 8; live && k < K;
		     k += MOE1_UNROLL * step) {
			gemv_raw r[MOE1_UNROLL];
#pragma unroll
			for (int u = 0; u < MOE1_UNROLL; u++)
				if (k + u * step < K)
					r[u] = gemv_load<ATLAS_WDT_BF16>(w, k + u * step);
#pragma unroll
			for (int u = 0; u < MOE1_UNROLL; u++)
				if (k + u * step < K)
					gemv_fma8<ATLAS_WDT_BF16, 1>(acc, r[u], x, K, k + u * step, 1);
		}
		const float sum = atlas_warp_sum(acc[0]);
		if (lane == 0)
			red[warp][0] = sum;
		__syncthreads();
		if ((int)threadIdx.x < fpb && f0 + threadIdx.x < N) {
			const int r = threadIdx.x;
			((bf16 *)a.out)[(long long)asg * N + f0 + r] =
			    atlas_tobf(gemv_out(red, r, 0, wpr, a.swiglu));
		}
		__syncthreads(); /* red is rewritten for the next token */
	}
}

/* atlas_gemv_f8: atlas_gemv for F8B blobs at T = 1 (outside
 * batch-invariant mode; K % 16 == 0, 16-byte aligned x), its own entry
 * so that the FP8 path's registers do not weigh on atlas_gemv's. Same
 * grid, segments, SwiGLU pairing and epilogue (biases BF16). */
extern "C" __global__ void __launch_bounds__(256, 3) atlas_gemv_f8(const __grid_constant__ atlas_gemv_args a)
{
	__shared__ float red[8][GEMV_MAXT];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int rpb = a.rpb == 1 || a.rpb == 2 || a.rpb == 4 || a.rpb == 8 ? a.rpb : 8;
	const int wpr = 8 / rpb, ks = warp % wpr, row = warp / wpr;
	const gemv_where g = gemv_locate(a);
	const long long K = a.K, N = g.seg->N;
	const void *w = a.swiglu ? a.seg[row & 1].w : g.seg->w;
	const long long n = a.swiglu ? g.n0 + row / 2 : g.n0 + row;
	float acc[1] = {0.0f};
	/* the weights never change: the warp's first loads go to L2 before
	 * the wait for the previous kernel (as atlas_gemv's a.pre loads) */
	const long long k0 = (long long)ks * 512 + lane * 16;
	if (n < N) {
		const char *q = (const char *)w + ATLAS_F8B_HEAD_BYTES + n * K;
#pragma unroll
		for (int u = 0; u < GEMV_F8_UNROLL; u++)
			if (k0 + u * wpr * 512LL < K)
				asm volatile("prefetch.global.L2 [%0];" ::"l"(q + k0 + u * wpr * 512LL));
	}
	ATLAS_PDL_ENTRY();
	if (n < N)
		gemv_vec_f8<1, GEMV_F8_UNROLL>(acc, (const bf16 *)a.x, w, n, K, 1, wpr, k0);
	const float sum = atlas_warp_sum(acc[0]);
	if (lane == 0)
		red[warp][0] = sum;
	gemv_finish(a, g, red, rpb, wpr, 0, 1);
}

/* atlas_gemv_w4: atlas_gemv for W4B blobs at T = 1 (outside
 * batch-invariant mode; K % 32 == 0 as every W4B, 16-byte aligned x),
 * on the tensor cores: the CUDA-core form spent five instructions a
 * weight (unpack, zero point, FMA, x) and ran at a third of the copy
 * rate. A block is 16 weight rows (8 features in SwiGLU mode: lane group
 * gq's row gq of the gate, row gq of the up matrix in the mma's rows gq
 * and gq + 8) and its 8 warps split K in chunks of 128 columns (warp w:
 * chunks w, w + 8, ...). In a chunk lane t reads 16 bytes of each of its
 * two rows (columns 32t..32t+31, one group's: groups are multiples of 32
 * columns) and 64 bytes of x. Nibbles p and p + 4 of a word become one
 * BF16 pair 128 + q by a mask and an OR (BF16 has an ulp of 1 at 128),
 * and one BF16 subtraction of 128 + z gives q - z exactly (z <= 128);
 * x is paired to match (bytes permuted), and every column of B carries
 * the same x, so column 0 of D is the product. Mma k-slots 2t.. and
 * 2t+8.. are the lane's own pairs: any order of k is a dot product.
 * Scales (BF16): where a chunk lies in one group (g a multiple of 128,
 * or the row) the chunk's FP32 sum is multiplied by the scale; otherwise
 * (g 32 or 64) A is multiplied by it, giving W's own BF16 values.
 * Its own sums: batch-invariant mode takes the tensor-core GEMV. */
#ifndef GEMV_W4_UNROLL
#define GEMV_W4_UNROLL 4
#endif

static __device__ __forceinline__ unsigned w4_bf2(float a, float b)
{
	const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
	return *(const unsigned *)&v;
}

/* Nibbles p and p + 4 of w as BF16 (q - z) [* s] (zz: 128 + z twice). */
static __device__ __forceinline__ unsigned w4_pair(unsigned w, int p, unsigned zz, unsigned ss,
						   bool pre)
{
	const unsigned m = ((w >> (4 * p)) & 0x000f000fu) | 0x43004300u;
	__nv_bfloat162 v = __hsub2(*(const __nv_bfloat162 *)&m, *(const __nv_bfloat162 *)&zz);
	if (pre)
		v = __hmul2(v, *(const __nv_bfloat162 *)&ss);
	return *(const unsigned *)&v;
}

/* One 128-column chunk of the lane's rows (words r0, r1) against x from
 * column col (x zero where !ok) into d. */
static __device__ __forceinline__ void w4_chunk(float (&d)[4], const uint4 &r0, const uint4 &r1,
						const bf16 *x, long long col, bool ok, unsigned zz0,
						unsigned zz1, unsigned ss0, unsigned ss1, bool pre)
{
	uint4 xv[4];
#pragma unroll
	for (int i = 0; i < 4; i++)
		xv[i] = ok ? __ldg((const uint4 *)(x + col + 8 * i)) : make_uint4(0, 0, 0, 0);
	const unsigned a[4] = {r0.x, r0.y, r0.z, r0.w}, b[4] = {r1.x, r1.y, r1.z, r1.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		/* x pairs (8i + p, 8i + p + 4), as the nibble pairs */
		const unsigned x0 = __byte_perm(xv[i].x, xv[i].z, 0x5410);
		const unsigned x1 = __byte_perm(xv[i].x, xv[i].z, 0x7632);
		const unsigned x2 = __byte_perm(xv[i].y, xv[i].w, 0x5410);
		const unsigned x3 = __byte_perm(xv[i].y, xv[i].w, 0x7632);
		atlas_mma_bf16(d, w4_pair(a[i], 0, zz0, ss0, pre), w4_pair(b[i], 0, zz1, ss1, pre),
			       w4_pair(a[i], 1, zz0, ss0, pre), w4_pair(b[i], 1, zz1, ss1, pre), x0, x1);
		atlas_mma_bf16(d, w4_pair(a[i], 2, zz0, ss0, pre), w4_pair(b[i], 2, zz1, ss1, pre),
			       w4_pair(a[i], 3, zz0, ss0, pre), w4_pair(b[i], 3, zz1, ss1, pre), x2, x3);
	}
}

extern "C" __global__ void __launch_bounds__(256, 2) atlas_gemv_w4(const __grid_constant__ atlas_gemv_args a)
{
	__shared__ float red[128][GEMV_MAXT];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int gq = lane >> 2, t = lane & 3;
	const gemv_where g = gemv_locate(a); /* a.rpb is 16 */
	const long long K = a.K, N = g.seg->N, nch = (K + 127) / 128;
	const void *w0 = a.swiglu ? a.seg[0].w : g.seg->w, *w1 = a.swiglu ? a.seg[1].w : g.seg->w;
	const long long n0 = g.n0 + gq, n1 = a.swiglu ? n0 : n0 + 8;
	const bool l0 = n0 < N, l1 = n1 < N;
	const char *q0 = (const char *)w0 + ATLAS_W4B_HEAD_BYTES + (l0 ? n0 : 0) * (K / 2);
	const char *q1 = (const char *)w1 + ATLAS_W4B_HEAD_BYTES + (l1 ? n1 : 0) * (K / 2);
	/* the weights never change: the first loads go to L2 before the
	 * wait for the previous kernel */
#pragma unroll
	for (int u = 0; u < GEMV_W4_UNROLL; u++) {
		const long long col = (warp + 8LL * u) * 128 + t * 32;
		if (col < K && l0)
			asm volatile("prefetch.global.L2 [%0];" ::"l"(q0 + col / 2));
		if (col < K && l1)
			asm volatile("prefetch.global.L2 [%0];" ::"l"(q1 + col / 2));
	}
	ATLAS_PDL_ENTRY();
	const atlas_w4b_head_k *h0 = (const atlas_w4b_head_k *)w0, *h1 = (const atlas_w4b_head_k *)w1;
	const unsigned g0 = (unsigned)h0->g, g1 = (unsigned)h1->g;
	/* FP32 scales after each chunk where a chunk is one group */
	const bool pre = !((g0 % 128 == 0 || h0->ng == 1) && (g1 % 128 == 0 || h1->ng == 1));
	const unsigned short *s0 =
	    (const unsigned short *)((const char *)w0 + h0->s_off) + (l0 ? n0 : 0) * h0->ng;
	const unsigned short *s1 =
	    (const unsigned short *)((const char *)w1 + h1->s_off) + (l1 ? n1 : 0) * h1->ng;
	const uint8_t *z0 = (const uint8_t *)w0 + h0->z_off + (l0 ? n0 : 0) * h0->ng;
	const uint8_t *z1 = (const uint8_t *)w1 + h1->z_off + (l1 ? n1 : 0) * h1->ng;
	const bf16 *x = (const bf16 *)a.x;
	float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc0 = 0.0f, acc1 = 0.0f;
	for (long long c0 = warp; c0 < nch; c0 += 8 * GEMV_W4_UNROLL) {
		uint4 r0[GEMV_W4_UNROLL], r1[GEMV_W4_UNROLL];
#pragma unroll
		for (int u = 0; u < GEMV_W4_UNROLL; u++) {
			const long long col = (c0 + 8 * u) * 128 + t * 32;
			r0[u] = r1[u] = make_uint4(0, 0, 0, 0);
			if (col < K && l0)
				asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
					     : "=r"(r0[u].x), "=r"(r0[u].y), "=r"(r0[u].z), "=r"(r0[u].w)
					     : "l"(q0 + col / 2));
			if (col < K && l1)
				asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
					     : "=r"(r1[u].x), "=r"(r1[u].y), "=r"(r1[u].z), "=r"(r1[u].w)
					     : "l"(q1 + col / 2));
		}
#pragma unroll
		for (int u = 0; u < GEMV_W4_UNROLL; u++) {
			const long long c = c0 + 8 * u, col = c * 128 + t * 32;
			if (c >= nch) /* the same for the whole warp: mma.sync needs every lane */
				break;
			const bool ok = col < K;
			const unsigned i0 = ok ? (unsigned)col / g0 : 0, i1 = ok ? (unsigned)col / g1 : 0;
			const float zf0 = l0 && ok ? (float)__ldg(z0 + i0) : 0.0f;
			const float zf1 = l1 && ok ? (float)__ldg(z1 + i1) : 0.0f;
			/* BF16 scales (0 for a dead row or column) */
			const unsigned sb0 = l0 && ok ? __ldg(s0 + i0) : 0u;
			const unsigned sb1 = l1 && ok ? __ldg(s1 + i1) : 0u;
			const float sf0 = __uint_as_float(sb0 << 16), sf1 = __uint_as_float(sb1 << 16);
			const unsigned zz0 = w4_bf2(128.0f + zf0, 128.0f + zf0);
			const unsigned zz1 = w4_bf2(128.0f + zf1, 128.0f + zf1);
			if (pre) {
				w4_chunk(d, r0[u], r1[u], x, col, ok, zz0, zz1, sb0 | sb0 << 16,
					 sb1 | sb1 << 16, true);
			} else {
				float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
				w4_chunk(e, r0[u], r1[u], x, col, ok, zz0, zz1, 0, 0, false);
				/* lanes t of a row share its group: one scale */
				acc0 = fmaf(sf0, e[0], acc0);
				acc1 = fmaf(sf1, e[2], acc1);
			}
		}
	}
	if (pre)
		acc0 = d[0], acc1 = d[2];
	/* d's columns are equal (every column of B is x): lane t == 0 of
	 * each group writes rows gq and gq + 8 (gate and up of feature gq in
	 * SwiGLU mode, where gemv_finish pairs rows 2r and 2r + 1) */
	if (t == 0) {
		red[(a.swiglu ? 2 * gq : gq) * 8 + warp][0] = acc0;
		red[(a.swiglu ? 2 * gq + 1 : gq + 8) * 8 + warp][0] = acc1;
	}
	gemv_finish(a, g, red, 16, 8, 0, 1);
}

/* atlas_gemv_fp4: atlas_gemv for FP4B (NVFP4) blobs at T = 1 outside
 * batch-invariant mode, on the tensor cores, in atlas_gemv_w4's frame:
 * 16 weight rows a block (8 SwiGLU features), 8 warps splitting K in
 * 128-column chunks, lane t reading 16 bytes (32 columns, scale groups
 * 2t and 2t + 1 of the chunk) of each of its two rows. The tensor-core
 * GEMV spends most of its time turning E2M1 into scaled BF16 for 8
 * padded token columns; here a nibble becomes its exact BF16 value by
 * table lookups (prmt: the high and the low byte of BF16 by the 3
 * magnitude bits, the sign by prmt's sign-replicate mode) and the scale
 * multiplies FP32 sums instead: column n of B carries x only in the
 * k-slots of lane n % 4 (zero elsewhere), so D's columns 0..3 are the
 * four lanes' partial sums, each within one scale group over four mma
 * steps (the lane's 16 columns of that group), then times that group's
 * FP32 scale f8 * gm. Its own sums (W's BF16 rounding is not taken):
 * batch-invariant mode takes the tensor-core GEMV. */
#ifndef GEMV_FP4_UNROLL
#define GEMV_FP4_UNROLL 4
#endif

/* PTX prmt in its default mode: a selector nibble with bit 3 set gives
 * the selected byte's sign replicated (__byte_perm masks selectors with
 * 0x7777 first). */
static __device__ __forceinline__ unsigned fp4_prmt(unsigned a, unsigned b, unsigned s)
{
	unsigned d;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
	return d;
}

/* Eight E2M1 nibbles (column i at bits 4i..4i+3) as four BF16 pairs
 * (columns 0-1, 2-3, 4-5, 6-7), exactly. */
static __device__ __forceinline__ void fp4_bf16x8(unsigned u, unsigned (&w)[4])
{
	/* BF16 of 0, 0.5, 1, 1.5, 2, 3, 4, 6: high and low bytes by the
	 * magnitude bits */
	const unsigned th0 = 0x3F3F3F00u, th1 = 0x40404040u;
	const unsigned tl0 = 0xC0800000u, tl1 = 0xC0804000u;
	const unsigned m = u & 0x77777777u;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const unsigned sm = h ? m >> 16 : m, sf = h ? u >> 16 : u;
		const unsigned hi = fp4_prmt(th0, th1, sm), lo = fp4_prmt(tl0, tl1, sm);
		/* a selector nibble with bit 3 (the sign) set replicates the
		 * msb of 0x80 (0xff), else copies it: bit 0 says negative */
		const unsigned neg = fp4_prmt(0x80808080u, 0x80808080u, sf);
		const unsigned hs = hi | ((neg << 7) & 0x80808080u);
		w[2 * h] = fp4_prmt(lo, hs, 0x5140);
		w[2 * h + 1] = fp4_prmt(lo, hs, 0x7362);
	}
}

/* Four F8_E4M3 scales (bytes of v) times gm, as floats. */
static __device__ __forceinline__ void fp4_scales(unsigned v, float gm, float (&s)[4])
{
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const __half2_raw hr =
		    __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v >> (16 * i)), __NV_E4M3);
		const float2 f = __half22float2(*(const __half2 *)&hr);
		s[2 * i] = f.x * gm;
		s[2 * i + 1] = f.y * gm;
	}
}

extern "C" __global__ void __launch_bounds__(256, 2) atlas_gemv_fp4(const __grid_constant__ atlas_gemv_args a)
{
	__shared__ float red[128][GEMV_MAXT];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int gq = lane >> 2, t = lane & 3, tt = t & 1;
	const gemv_where g = gemv_locate(a); /* a.rpb is 16 */
	const long long K = a.K, N = g.seg->N, nch = (K + 127) / 128;
	const void *w0 = a.swiglu ? a.seg[0].w : g.seg->w, *w1 = a.swiglu ? a.seg[1].w : g.seg->w;
	const long long n0 = g.n0 + gq, n1 = a.swiglu ? n0 : n0 + 8;
	const bool l0 = n0 < N, l1 = n1 < N;
	const char *q0 = (const char *)w0 + ATLAS_FP4B_HEAD_BYTES + (l0 ? n0 : 0) * (K / 2);
	const char *q1 = (const char *)w1 + ATLAS_FP4B_HEAD_BYTES + (l1 ? n1 : 0) * (K / 2);
	/* the weights never change: the first loads go to L2 before the
	 * wait for the previous kernel */
#pragma unroll
	for (int u = 0; u < GEMV_FP4_UNROLL; u++) {
		const long long col = (warp + 8LL * u) * 128 + t * 32;
		if (col < K && l0)
			asm volatile("prefetch.global.L2 [%0];" ::"l"(q0 + col / 2));
		if (col < K && l1)
			asm volatile("prefetch.global.L2 [%0];" ::"l"(q1 + col / 2));
	}
	ATLAS_PDL_ENTRY();
	const atlas_fp4b_head_k *h0 = (const atlas_fp4b_head_k *)w0, *h1 = (const atlas_fp4b_head_k *)w1;
	const float gm0 = h0->gm, gm1 = h1->gm;
	/* lane t < 2 holds D columns 2t, 2t + 1: the partial sums of lanes
	 * 2t and 2t + 1, whose groups are 4t .. 4t + 3 of a chunk (lanes 2
	 * and 3 repeat lanes 0 and 1) */
	const uint8_t *s0 = (const uint8_t *)w0 + h0->s_off + (l0 ? n0 : 0) * h0->ng + 4 * tt;
	const uint8_t *s1 = (const uint8_t *)w1 + h1->s_off + (l1 ? n1 : 0) * h1->ng + 4 * tt;
	const bf16 *x = (const bf16 *)a.x;
	const bool xl = t == (gq & 3); /* this lane's B column takes x */
	float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (long long c0 = warp; c0 < nch; c0 += 8 * GEMV_FP4_UNROLL) {
		uint4 r0[GEMV_FP4_UNROLL], r1[GEMV_FP4_UNROLL];
#pragma unroll
		for (int u = 0; u < GEMV_FP4_UNROLL; u++) {
			const long long col = (c0 + 8 * u) * 128 + t * 32;
			r0[u] = r1[u] = make_uint4(0, 0, 0, 0);
			if (col < K && l0)
				asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
					     : "=r"(r0[u].x), "=r"(r0[u].y), "=r"(r0[u].z), "=r"(r0[u].w)
					     : "l"(q0 + col / 2));
			if (col < K && l1)
				asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
					     : "=r"(r1[u].x), "=r"(r1[u].y), "=r"(r1[u].z), "=r"(r1[u].w)
					     : "l"(q1 + col / 2));
		}
#pragma unroll
		for (int u = 0; u < GEMV_FP4_UNROLL; u++) {
			const long long c = c0 + 8 * u, col = c * 128 + t * 32;
			if (c >= nch) /* the same for the whole warp: mma.sync needs every lane */
				break;
			/* a chunk's 8 groups start at group 8c; this lane's four
			 * (lanes 2tt, 2tt + 1's) in two halves, each only where
			 * its lane's columns are inside K (2-byte loads: a row's
			 * scales start at an even offset, K / 16 being even) */
			const long long sc = c * 128 + 64 * tt;
			const unsigned v0 = sc < K ? (unsigned)__ldg((const unsigned short *)(s0 + 8 * c)) : 0u;
			const unsigned v1 = sc + 32 < K ? (unsigned)__ldg((const unsigned short *)(s0 + 8 * c + 2)) : 0u;
			const unsigned v2 = sc < K ? (unsigned)__ldg((const unsigned short *)(s1 + 8 * c)) : 0u;
			const unsigned v3 = sc + 32 < K ? (unsigned)__ldg((const unsigned short *)(s1 + 8 * c + 2)) : 0u;
			float sc0[4], sc1[4];
			fp4_scales(l0 ? v0 | v1 << 16 : 0u, gm0, sc0);
			fp4_scales(l1 ? v2 | v3 << 16 : 0u, gm1, sc1);
			uint4 xv[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				xv[i] = xl && col < K ? __ldg((const uint4 *)(x + col + 8 * i))
						      : make_uint4(0, 0, 0, 0);
			const unsigned ra[4] = {r0[u].x, r0[u].y, r0[u].z, r0[u].w};
			const unsigned rb[4] = {r1[u].x, r1[u].y, r1[u].z, r1[u].w};
#pragma unroll
			for (int hf = 0; hf < 2; hf++) {
				/* words 2hf, 2hf + 1: this lane's columns of group
				 * 2t + hf, four mma steps */
				float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
				for (int i = 2 * hf; i < 2 * hf + 2; i++) {
					unsigned wa[4], wb[4];
					fp4_bf16x8(ra[i], wa);
					fp4_bf16x8(rb[i], wb);
					atlas_mma_bf16(d, wa[0], wb[0], wa[1], wb[1], xv[i].x, xv[i].y);
					atlas_mma_bf16(d, wa[2], wb[2], wa[3], wb[3], xv[i].z, xv[i].w);
				}
				/* d: rows gq, gq + 8 x columns 2t, 2t + 1, i.e. lanes
				 * 2tt, 2tt + 1's sums of groups 4tt + hf, 4tt + 2 + hf */
				acc[0] = fmaf(sc0[hf], d[0], acc[0]);
				acc[1] = fmaf(sc0[2 + hf], d[1], acc[1]);
				acc[2] = fmaf(sc1[hf], d[2], acc[2]);
				acc[3] = fmaf(sc1[2 + hf], d[3], acc[3]);
			}
		}
	}
	/* row gq: lanes t = 0, 1's two sums each (lanes 2, 3 hold copies) */
	float v0 = acc[0] + acc[1], v1 = acc[2] + acc[3];
	v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
	v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
	if (t == 0) {
		red[(a.swiglu ? 2 * gq : gq) * 8 + warp][0] = v0;
		red[(a.swiglu ? 2 * gq + 1 : gq + 8) * 8 + warp][0] = v1;
	}
	gemv_finish(a, g, red, 16, 8, 0, 1);
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
	ATLAS_PDL_ENTRY();
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
	ATLAS_PDL_ENTRY();
	if (wdt == ATLAS_WDT_BF16)
		gemm_wmma(smem, out, x, (const bf16 *)w, bias, wdt, T, N, K);
	else
		gemm_fma(smem, out, x, w, bias, wdt, T, N, K);
}
