/* attention.cu - atlas_attention: causal grouped-query attention of T
 * tokens against the paged KV cache, online softmax in FP32.
 *
 * grid T*H, block 128 (hd <= 2 * blockDim.x, so hd <= 256 at the ABI's
 * block): block (t, h) computes out[t, h, :] for query head h of token t
 * at position p, over the keys max(0, p-window+1)..p of its sequence,
 * read from kv head h / (H / Hkv). Keys go in chunks of ATT_CHUNK: their
 * cache offsets are resolved through the block table into shared memory,
 * each warp scores keys (one key per warp at a time, the lanes splitting
 * the head dimension, a shuffle reduction), then every thread rescales
 * its running output (thread i owns dims i and i + blockDim.x) by the
 * new maximum and adds the chunk's probability-weighted values.
 *
 * Cost: each (token, head) reads its visible K and V rows once: 4 * hd *
 * keys bytes, so prefill re-reads the cache once per query head (mostly
 * from L2) and decode is bandwidth bound on the KV cache; the next issue
 * replaces this with split-K decode and a tensor-core prefill.
 */
#include "common.cuh"

#define ATT_CHUNK 64 /* keys scored per step */
#define ATT_MAXHD 256 /* largest head size (q staged in shared memory) */
#define ATT_DPT 2     /* output dims per thread: hd <= ATT_DPT * blockDim.x */

extern "C" __global__ void atlas_attention(bf16 *out, const bf16 *q, const bf16 *kc,
					   const bf16 *vc, const int *seq_of, const int *pos,
					   const int *block_tables, long long max_blocks,
					   long long block_size, long long T, long long H,
					   long long Hkv, long long hd, long long window, float scale)
{
	__shared__ float qs[ATT_MAXHD];	       /* the query row, as float */
	__shared__ float ss[ATT_CHUNK];	       /* scores of the chunk's keys */
	__shared__ long long offs[ATT_CHUNK]; /* element offset of each key's row */
	const long long th = blockIdx.x;
	if (th >= T * H || hd > ATT_MAXHD || hd > ATT_DPT * (long long)blockDim.x)
		return;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int nwarps = blockDim.x >> 5;
	const long long t = th / H, h = th % H;
	const long long kvh = h / (H / Hkv), ld = Hkv * hd;
	const long long p = pos[t];
	const long long lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	const long long nk = p - lo + 1;
	const int *table = block_tables + (long long)seq_of[t] * max_blocks;
	const bool pair = hd % 2 == 0 && atlas_aligned(kc, 4);

	for (long long d = threadIdx.x; d < hd; d += blockDim.x)
		qs[d] = atlas_bf(q[th * hd + d]);

	float m = -INFINITY, l = 0.0f;
	float acc[ATT_DPT];
#pragma unroll
	for (int s = 0; s < ATT_DPT; s++)
		acc[s] = 0.0f;

	for (long long j0 = 0; j0 < nk; j0 += ATT_CHUNK) {
		const int nc = nk - j0 < ATT_CHUNK ? (int)(nk - j0) : ATT_CHUNK;
		__syncthreads(); /* the previous chunk's scores are consumed; qs written */
		for (int i = threadIdx.x; i < nc; i += blockDim.x) {
			const long long key = lo + j0 + i;
			const long long row =
			    (long long)table[key / block_size] * block_size + key % block_size;
			offs[i] = row * ld + kvh * hd;
		}
		__syncthreads();
		for (int i = warp; i < nc; i += nwarps) {
			const bf16 *kr = kc + offs[i];
			float s = 0.0f;
			if (pair) {
				for (long long d = lane * 2; d < hd; d += 64) {
					float2 k2 = __bfloat1622float2(*(const __nv_bfloat162 *)(kr + d));
					s = fmaf(qs[d], k2.x, s);
					s = fmaf(qs[d + 1], k2.y, s);
				}
			} else {
				for (long long d = lane; d < hd; d += 32)
					s = fmaf(qs[d], atlas_bf(kr[d]), s);
			}
			s = atlas_warp_sum(s);
			if (lane == 0)
				ss[i] = scale * s;
		}
		__syncthreads();
		/* every thread folds the chunk in: same m and l everywhere */
		float cm = m;
		for (int i = 0; i < nc; i++)
			cm = fmaxf(cm, ss[i]);
		const float corr = cm == m ? 1.0f : expf(m - cm);
		l *= corr;
#pragma unroll
		for (int s = 0; s < ATT_DPT; s++)
			acc[s] *= corr;
		for (int i = 0; i < nc; i++) {
			const float e = expf(ss[i] - cm);
			const bf16 *vr = vc + offs[i];
			l += e;
#pragma unroll
			for (int s = 0; s < ATT_DPT; s++) {
				const long long d = threadIdx.x + (long long)s * blockDim.x;
				if (d < hd)
					acc[s] = fmaf(e, atlas_bf(vr[d]), acc[s]);
			}
		}
		m = cm;
	}
	const float inv = 1.0f / l;
#pragma unroll
	for (int s = 0; s < ATT_DPT; s++) {
		const long long d = threadIdx.x + (long long)s * blockDim.x;
		if (d < hd)
			out[th * hd + d] = atlas_tobf(acc[s] * inv);
	}
}
