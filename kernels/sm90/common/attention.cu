/* attention.cu - causal grouped-query attention of T tokens against the
 * paged KV cache, online softmax in FP32. Two forms:
 *
 * Split-K ("flash-decoding"; the host's choice whenever hd % 8 == 0,
 * hd <= 256 and the cache is 16-byte aligned): atlas_attention_part,
 * grid T * Hkv * ceil(G/8) * splits (G = H/Hkv), block 128, computes for
 * each (token, kv head, group of up to 8 of its query heads, split) the
 * unnormalized output and the (max, sum) of the softmax over one
 * contiguous range of the token's keys, reading each K/V row of the range
 * once for all the group's query heads (16-byte loads); then
 * atlas_attention_combine, grid T * H, block 128, merges the splits of
 * each (token, head) in split order. The partition of a token's keys
 * depends only on its own key count and the two constants the host
 * passes (att_split), never on the batch: a token gets the same bits
 * whatever else is in the batch, and every launch argument depends only
 * on T (decode steps are replayed as CUDA graphs while positions grow:
 * blocks past a token's split count exit at once).
 *
 * atlas_attention (the fallback for other shapes): grid T*H, block 128
 * (hd <= 2 * blockDim.x, so hd <= 256 at the ABI's block): block (t, h)
 * computes out[t, h, :] for query head h of token t at position p, over
 * the keys max(0, p-window+1)..p of its sequence, read from kv head h /
 * (H / Hkv). Keys go in chunks of ATT_CHUNK: their cache offsets are
 * resolved through the block table into shared memory, each warp scores
 * keys (one key per warp at a time, the lanes splitting the head
 * dimension, a shuffle reduction), then every thread rescales its
 * running output (thread i owns dims i and i + blockDim.x) by the new
 * maximum and adds the chunk's probability-weighted values.
 *
 * Cost: split-K reads each visible K/V row once per (token, kv head,
 * group of 8 query heads): 4 * hd * keys bytes, plus 4 * (hd + 2) bytes
 * of partials per (token, head, split) written and read back (L2).
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
	ATLAS_PDL_ENTRY();
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

/* --- split-K ------------------------------------------------------- */

#define ATT_TILE 32   /* keys per step of atlas_attention_part: one per lane */
#define ATT_GH 8      /* query heads per block (a kv head's group, 8 at a time) */
#define ATT_KPW 8     /* keys each warp loads before scoring (loads in flight) */
#define ATT_VPT 2     /* (head, 8-dim vector) output pairs per thread: 8 * 32 / 128 */
#define ATT_MAXSPLIT 64 /* largest `splits` the combine kernel accepts */

/* First visible key of a token at position p. */
static __device__ __forceinline__ long long att_lo(long long p, long long window)
{
	return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* The partition of nk keys: *ns splits of *per keys (the last may be
 * shorter): as many splits as ceil(nk / minkeys), at most `splits`.
 * With splits <= minkeys no split is empty. Both kernels call this, so
 * they agree; it depends on nothing but the token's own key count. */
static __device__ __forceinline__ void att_split(long long nk, long long splits,
						 long long minkeys, long long *ns, long long *per)
{
	long long n = (nk + minkeys - 1) / minkeys;
	if (n > splits)
		n = splits;
	if (n < 1)
		n = 1;
	*ns = n;
	*per = (nk + n - 1) / n;
}

/* part: [T, H, splits, hd] unnormalized outputs, then [T, H, splits, 2]
 * (max, sum) pairs, FP32. Needs hd % 8 == 0, hd <= ATT_MAXHD, kc and vc
 * 16-byte aligned, blockDim.x == 128 (else the block writes nothing). */
extern "C" __global__ void __launch_bounds__(128)
atlas_attention_part(float *part, const bf16 *q, const bf16 *kc, const bf16 *vc,
		     const int *seq_of, const int *pos, const int *block_tables,
		     long long max_blocks, long long block_size, long long T, long long H,
		     long long Hkv, long long hd, long long window, float scale,
		     long long splits, long long minkeys)
{
	ATLAS_PDL_ENTRY();
	__shared__ __align__(16) float qs[ATT_GH][ATT_MAXHD]; /* the group's query rows */
	__shared__ float ps[ATT_GH][ATT_TILE];  /* scores of the tile, then probabilities */
	__shared__ long long offs[ATT_TILE];    /* element offset of each key's row */
	__shared__ float ms[ATT_GH], ls[ATT_GH]; /* running max and sum per head */
	__shared__ float cs[ATT_GH];             /* this tile's rescale of each head */
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int nwarps = blockDim.x >> 5;
	if (blockDim.x != 128 || hd % 8 || hd > ATT_MAXHD || splits < 1 || minkeys < 1)
		return;
	const long long G = H / Hkv, ngrp = (G + ATT_GH - 1) / ATT_GH;
	long long b = blockIdx.x;
	const long long s = b % splits;
	b /= splits;
	const long long hg = b % ngrp;
	b /= ngrp;
	const long long kvh = b % Hkv, t = b / Hkv;
	if (t >= T)
		return;
	const long long p = pos[t], lo = att_lo(p, window), nk = p - lo + 1;
	long long ns, per;
	att_split(nk, splits, minkeys, &ns, &per);
	if (s >= ns)
		return; /* this token has fewer splits: uniform for the block */
	const long long k0 = s * per, k1 = k0 + per < nk ? k0 + per : nk;
	const int gn = G - hg * ATT_GH < ATT_GH ? (int)(G - hg * ATT_GH) : ATT_GH;
	const long long h0 = kvh * G + hg * ATT_GH; /* first query head of the block */
	const int *table = block_tables + (long long)seq_of[t] * max_blocks;
	const long long ld = Hkv * hd;
	const int nv = (int)(hd / 8); /* 16-byte vectors per row, <= 32 */

	for (int i = tid; i < gn * (int)hd; i += blockDim.x) {
		const int g = i / (int)hd, d = i - g * (int)hd;
		qs[g][d] = atlas_bf(q[((t * H) + h0 + g) * hd + d]);
	}
	if (tid < ATT_GH) {
		ms[tid] = -INFINITY;
		ls[tid] = 0.0f;
	}
	float acc[ATT_VPT][8];
#pragma unroll
	for (int r = 0; r < ATT_VPT; r++)
#pragma unroll
		for (int j = 0; j < 8; j++)
			acc[r][j] = 0.0f;

	for (long long j0 = k0; j0 < k1; j0 += ATT_TILE) {
		const int nc = k1 - j0 < ATT_TILE ? (int)(k1 - j0) : ATT_TILE;
		__syncthreads(); /* the previous tile is consumed; qs, ms, ls written */
		if (tid < nc) {
			const long long key = lo + j0 + tid;
			const long long row =
			    (long long)table[key / block_size] * block_size + key % block_size;
			offs[tid] = row * ld + kvh * hd;
		}
		__syncthreads();
		/* scores: warp w takes keys w, w + nwarps, ...; lane l holds
		 * dims 8l..8l+7 of the key; all the warp's loads go first */
		for (int i0 = warp; i0 < nc; i0 += nwarps * ATT_KPW) {
			uint4 kr[ATT_KPW];
#pragma unroll
			for (int u = 0; u < ATT_KPW; u++) {
				const int i = i0 + u * nwarps;
				kr[u] = make_uint4(0u, 0u, 0u, 0u);
				if (i < nc && lane < nv)
					kr[u] = __ldg((const uint4 *)(kc + offs[i]) + lane);
			}
#pragma unroll
			for (int u = 0; u < ATT_KPW; u++) {
				const int i = i0 + u * nwarps; /* uniform across the warp */
				if (i >= nc)
					break;
				float kf[8];
				atlas_unpack8(kr[u], kf);
				for (int g = 0; g < gn; g++) {
					float d = 0.0f;
					if (lane < nv) {
						const float *qg = &qs[g][lane * 8];
#pragma unroll
						for (int j = 0; j < 8; j++)
							d = fmaf(qg[j], kf[j], d);
					}
					d = atlas_warp_sum(d);
					if (lane == 0)
						ps[g][i] = scale * d;
				}
			}
		}
		__syncthreads();
		/* softmax update: warp w takes heads w, w + nwarps, ...; lane i
		 * holds key i of the tile */
		for (int g = warp; g < gn; g += nwarps) {
			const float sc = lane < nc ? ps[g][lane] : -INFINITY;
			const float mo = ms[g];
			const float cm = fmaxf(mo, atlas_warp_max(sc));
			const float e = lane < nc ? expf(sc - cm) : 0.0f;
			const float sum = atlas_warp_sum(e);
			__syncwarp(); /* every lane has read ms[g] */
			ps[g][lane] = e;
			if (lane == 0) {
				const float corr = cm == mo ? 1.0f : expf(mo - cm);
				cs[g] = corr;
				ls[g] = ls[g] * corr + sum;
				ms[g] = cm;
			}
		}
		__syncthreads();
		/* values: thread owns pairs (head g, vector v), pair = tid + r*128 */
#pragma unroll
		for (int r = 0; r < ATT_VPT; r++) {
			const int pi = tid + r * blockDim.x;
			if (pi >= gn * nv)
				continue;
			const int g = pi / nv, v = pi - g * nv;
			const float corr = cs[g];
#pragma unroll
			for (int j = 0; j < 8; j++)
				acc[r][j] *= corr;
			for (int i0 = 0; i0 < nc; i0 += ATT_KPW) {
				uint4 vr[ATT_KPW];
#pragma unroll
				for (int u = 0; u < ATT_KPW; u++)
					if (i0 + u < nc)
						vr[u] = __ldg((const uint4 *)(vc + offs[i0 + u]) + v);
#pragma unroll
				for (int u = 0; u < ATT_KPW; u++) {
					if (i0 + u < nc) {
						float vf[8];
						const float pr = ps[g][i0 + u];
						atlas_unpack8(vr[u], vf);
#pragma unroll
						for (int j = 0; j < 8; j++)
							acc[r][j] = fmaf(pr, vf[j], acc[r][j]);
					}
				}
			}
		}
	}
	__syncthreads(); /* ms, ls final (also when the range was empty) */
	const long long base = (t * H + h0) * splits + s; /* (t, h0, s) */
#pragma unroll
	for (int r = 0; r < ATT_VPT; r++) {
		const int pi = tid + r * blockDim.x;
		if (pi < gn * nv) {
			const int g = pi / nv, v = pi - g * nv;
			float *po = part + (base + (long long)g * splits) * hd + v * 8;
#pragma unroll
			for (int j = 0; j < 8; j++)
				po[j] = acc[r][j];
		}
	}
	if (tid < gn) {
		float *pml = part + T * H * splits * hd + (base + (long long)tid * splits) * 2;
		pml[0] = ms[tid];
		pml[1] = ls[tid];
	}
}

/* out[t, h, :] from the partials of atlas_attention_part (same T, H, hd,
 * window, splits, minkeys): the splits merged in split order. */
extern "C" __global__ void atlas_attention_combine(bf16 *out, const float *part, const int *pos,
						   long long T, long long H, long long hd,
						   long long window, long long splits,
						   long long minkeys)
{
	ATLAS_PDL_ENTRY();
	__shared__ float wt[ATT_MAXSPLIT]; /* weight of each split: exp(m_s - M) / L */
	const long long th = blockIdx.x;
	if (th >= T * H || splits < 1 || splits > ATT_MAXSPLIT || minkeys < 1)
		return;
	const long long t = th / H;
	const long long p = pos[t], nk = p - att_lo(p, window) + 1;
	long long ns, per;
	att_split(nk, splits, minkeys, &ns, &per);
	const float *ml = part + T * H * splits * hd + th * splits * 2;
	if (threadIdx.x == 0) {
		float M = -INFINITY, L = 0.0f;
		for (long long s = 0; s < ns; s++)
			M = fmaxf(M, ml[2 * s]);
		for (long long s = 0; s < ns; s++) {
			wt[s] = ml[2 * s] == -INFINITY ? 0.0f : expf(ml[2 * s] - M);
			L = fmaf(ml[2 * s + 1], wt[s], L);
		}
		const float inv = 1.0f / L;
		for (long long s = 0; s < ns; s++)
			wt[s] *= inv;
	}
	__syncthreads();
	const float *po = part + th * splits * hd;
	for (long long d = threadIdx.x; d < hd; d += blockDim.x) {
		float o = 0.0f;
		for (long long s = 0; s < ns; s++)
			o = fmaf(po[s * hd + d], wt[s], o);
		out[th * hd + d] = atlas_tobf(o);
	}
}
