/* gemv_bulk.cu - atlas_gemv_bulk: the batch-1 (and 2) decode linear layer
 * with the weights streamed by the copy engine (TMA bulk copies), for BF16
 * weights: out[T,N] = x[T,K] W^T (+ bias), T <= 2.
 *
 * Why: a GEMV reads every weight byte once, so it runs at the rate the SMs
 * keep HBM busy. Loads issued by threads need registers per byte in
 * flight and compete with the arithmetic for issue slots; a bulk copy is
 * one instruction per 2 KiB, and the bytes land in shared memory with an
 * mbarrier counting them.
 *
 * Launch: the struct atlas_gemv_args of atlas_gemv (segments, swiglu,
 * out_f32), grid min(SMs, groups), block 288 = 8 consumer warps + 1
 * producer warp, dynamic shared memory atlas_gbk_smem(T, K) (kernel_args.h).
 * The weight rows of all segments, concatenated, form groups of 8 rows
 * (swiglu: rows 0..3 of a group are gate rows f..f+3 and rows 4..7 the up
 * rows of the same features); block b takes groups [b*G/grid,
 * (b+1)*G/grid). Work item = (group, chunk of GBK_KC columns): 8 row
 * slices, one per consumer warp. Items go through a ring of GBK_STAGES
 * stages with a full and an empty mbarrier each: lane 0 of the producer
 * waits for the stage to be empty, arms the full barrier with the item's
 * byte count and issues one cp.async.bulk per row slice; consumer warp w
 * waits for the full barrier, dots its row slice with x (staged in shared
 * memory once per block), and arrives on the empty barrier. At the end of
 * a group each warp reduces its row (shuffles) and writes it: sum order
 * fixed, so results are deterministic.
 *
 * Programmatic dependent launch: the producer streams weights before the
 * previous kernel has finished (they never change); the consumers wait
 * for it before they read x.
 */
#include "common.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#define GBK_STAGES ATLAS_GBK_STAGES
#define GBK_KC ATLAS_GBK_KC

/* Where virtual row v (0..rows-1) of the launch lives: its segment and
 * row in it; swiglu: v = 8 * group + j, feature 4 * group + (j & 3) of
 * gate (j < 4) or up. */
static __device__ __forceinline__ const bf16 *gbk_row(const atlas_gemv_args &a, long long v,
						      int *seg, long long *n)
{
	if (a.swiglu) {
		const long long f = (v >> 3) * 4 + (v & 3);
		const int s = (int)((v >> 2) & 1);
		*seg = s, *n = f;
		return f < a.seg[0].N ? (const bf16 *)a.seg[s].w + f * a.K : NULL;
	}
	for (int s = 0; s < a.nseg; s++) {
		if (v < a.seg[s].N) {
			*seg = s, *n = v;
			return (const bf16 *)a.seg[s].w + v * a.K;
		}
		v -= a.seg[s].N;
	}
	*seg = 0, *n = 0;
	return NULL;
}

template <int MT>
static __device__ __forceinline__ void gbk_impl(const atlas_gemv_args &a)
{
	extern __shared__ __align__(128) unsigned char gbk_smem[];
	__shared__ __align__(8) unsigned long long full[GBK_STAGES], empty[GBK_STAGES];
	__shared__ float sw[8][MT]; /* swiglu: each warp's row sums */
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const long long K = a.K;
	bf16 *ring = (bf16 *)gbk_smem;              /* [STAGES][8][KC] */
	bf16 *xs = ring + (size_t)GBK_STAGES * 8 * GBK_KC; /* [MT][K] */
	long long rows = 0;
	if (a.swiglu) {
		rows = ((a.seg[0].N + 3) / 4) * 8;
	} else {
		for (int s = 0; s < a.nseg; s++)
			rows += a.seg[s].N;
	}
	const long long groups = (rows + 7) / 8;
	const long long g0 = groups * blockIdx.x / gridDim.x;
	const long long g1 = groups * (blockIdx.x + 1) / gridDim.x;
	const long long nk = (K + GBK_KC - 1) / GBK_KC;
	const long long items = (g1 - g0) * nk;

	if (threadIdx.x == 0) {
		for (int s = 0; s < GBK_STAGES; s++) {
			asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(atlas_smem_addr(&full[s])));
			asm volatile("mbarrier.init.shared::cta.b64 [%0], 8;" ::"r"(atlas_smem_addr(&empty[s])));
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	__syncthreads();

	if (warp == 8) { /* the producer */
		if (lane == 0) {
			for (long long i = 0; i < items; i++) {
				const int st = (int)(i % GBK_STAGES);
				const long long use = i / GBK_STAGES;
				if (use > 0)
					atlas_mbar_wait(&empty[st], (unsigned)((use - 1) & 1));
				const long long grp = g0 + i / nk, k0 = (i % nk) * GBK_KC;
				const long long len = K - k0 < GBK_KC ? K - k0 : GBK_KC;
				const bf16 *src[8];
				unsigned bytes = 0;
				for (int r = 0; r < 8; r++) {
					int s;
					long long n;
					src[r] = grp * 8 + r < rows ? gbk_row(a, grp * 8 + r, &s, &n) : NULL;
					if (src[r])
						bytes += (unsigned)(len * 2);
				}
				atlas_mbar_expect(&full[st], bytes);
				for (int r = 0; r < 8; r++)
					if (src[r])
						atlas_bulk_copy(ring + ((size_t)st * 8 + r) * GBK_KC, src[r] + k0,
							 (unsigned)(len * 2), &full[st]);
			}
		}
		atlas_pdl_launch();
		return;
	}

	/* consumers: x into shared memory once the previous kernel is done */
	ATLAS_PDL_ENTRY();
	{
		const uint4 *xg = (const uint4 *)a.x;
		uint4 *xd = (uint4 *)xs;
		for (long long i = threadIdx.x; i < MT * K / 8; i += 256)
			xd[i] = xg[i];
	}
	asm volatile("bar.sync 1, 256;" ::: "memory");

	float acc[MT];
#pragma unroll
	for (int t = 0; t < MT; t++)
		acc[t] = 0.0f;
	for (long long i = 0; i < items; i++) {
		const int st = (int)(i % GBK_STAGES);
		const long long grp = g0 + i / nk, kc = i % nk, k0 = kc * GBK_KC;
		const long long len = K - k0 < GBK_KC ? K - k0 : GBK_KC;
		const long long v = grp * 8 + warp;
		int seg = 0;
		long long n = 0;
		const bool live = v < rows && gbk_row(a, v, &seg, &n) != NULL;
		atlas_mbar_wait(&full[st], (unsigned)((i / GBK_STAGES) & 1));
		if (live) {
			const uint4 *w = (const uint4 *)(ring + ((size_t)st * 8 + warp) * GBK_KC);
			for (long long e = lane; e < len / 8; e += 32) {
				float wf[8];
				atlas_unpack8(w[e], wf);
#pragma unroll
				for (int t = 0; t < MT; t++) {
					float xf[8];
					atlas_unpack8(((const uint4 *)(xs + t * K + k0))[e], xf);
#pragma unroll
					for (int j = 0; j < 8; j++)
						acc[t] = fmaf(xf[j], wf[j], acc[t]);
				}
			}
		}
		__syncwarp();
		if (lane == 0)
			atlas_mbar_arrive(&empty[st]);
		if (kc != nk - 1)
			continue;
		/* the group's last chunk: finish this warp's row */
#pragma unroll
		for (int t = 0; t < MT; t++) {
			acc[t] = atlas_warp_sum(acc[t]);
		}
		if (a.swiglu) {
			if (lane == 0) {
#pragma unroll
				for (int t = 0; t < MT; t++)
					sw[warp][t] = acc[t];
			}
			asm volatile("bar.sync 1, 256;" ::: "memory");
			if (warp < 4 && live && lane < MT) {
				float gv = 0.0f, uv = 0.0f;
#pragma unroll
				for (int t = 0; t < MT; t++)
					if (t == lane)
						gv = sw[warp][t], uv = sw[warp + 4][t];
				gv = atlas_bf(atlas_tobf(gv));
				uv = atlas_bf(atlas_tobf(uv));
				const float o = gv / (1.0f + expf(-gv)) * uv;
				const long long off = (long long)lane * a.seg[0].N + n;
				if (a.out_f32)
					((float *)a.seg[0].out)[off] = o;
				else
					((bf16 *)a.seg[0].out)[off] = atlas_tobf(o);
			}
			asm volatile("bar.sync 1, 256;" ::: "memory"); /* sw is reused */
		} else if (live && lane < MT) {
			float o = 0.0f;
#pragma unroll
			for (int t = 0; t < MT; t++)
				if (t == lane)
					o = acc[t];
			if (a.seg[seg].bias)
				o += atlas_bf(((const bf16 *)a.seg[seg].bias)[n]);
			const long long off = (long long)lane * a.seg[seg].N + n;
			if (a.out_f32)
				((float *)a.seg[seg].out)[off] = o;
			else
				((bf16 *)a.seg[seg].out)[off] = atlas_tobf(o);
		}
#pragma unroll
		for (int t = 0; t < MT; t++)
			acc[t] = 0.0f;
	}
}

extern "C" __global__ void __launch_bounds__(288) atlas_gemv_bulk(const __grid_constant__ atlas_gemv_args a)
{
	if (a.T <= 1)
		gbk_impl<1>(a);
	else
		gbk_impl<2>(a);
}
