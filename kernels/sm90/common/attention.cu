/* attention.cu - causal grouped-query attention of T tokens against the
 * paged KV cache, online softmax in FP32. Two forms:
 *
 * Split-K ("flash-decoding"; the host's choice whenever hd % 8 == 0,
 * hd <= 256 and q, out and the cache are 16-byte aligned):
 * atlas_attention_part, one launch, grid T * Hkv * ceil(G/8) * splits
 * (G = H/Hkv), block 128. Block (token, kv head, group of up to 8 of its
 * query heads, split) computes the unnormalized output and the (max,
 * sum) of the softmax over one contiguous range of the token's keys for
 * the group's heads, reading each K/V row of the range once for all of
 * them (16-byte loads); the last block of a (token, kv head, group) to
 * finish (a counter per group, zeroed again by that block) merges the
 * splits in split order and writes out. A token with one split writes
 * out directly. The merge's result depends only on the partials, never
 * on which block is last, and the partition of a token's keys depends
 * only on its own key count and the two constants the host passes
 * (att_split), never on the batch: a token gets the same bits whatever
 * else is in the batch, and every launch argument depends only on T
 * (decode steps are replayed as CUDA graphs while positions grow: blocks
 * past a token's split count exit at once).
 *
 * Why one launch and why these lane mappings: at decode batch 1 (a few
 * hundred keys) the work is a few MB and the cost is latency, a launch
 * and the chains of dependent memory round trips: the fused merge saves
 * the second launch and reads all the splits' (max, sum) pairs and
 * partial vectors in parallel; scores are summed over the warp by one
 * reduce-scatter per 4 keys instead of a 5-shuffle reduction per (key,
 * head); a tile's V rows are copied to shared memory (cp.async, one
 * round trip) while its K rows are scored.
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
 * of partials per (token, head, split) written and read back (L2) when
 * a token has more than one split.
 */
#include "common.cuh"
#include "kvq.cuh"

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

#define ATT_TILE 32     /* keys per step of atlas_attention_part */
#define ATT_GH 8        /* query heads per block (a kv head's group, 8 at a time) */
#define ATT_KPW 8       /* keys each warp loads before scoring (loads in flight) */
#define ATT_VPT 2       /* (head, 8-dim vector) output pairs per thread: 8 * 32 / 128 */
#define ATT_MAXSPLIT 64 /* largest `splits`: the merge reads two per lane */
#define ATT_MPF 8       /* splits' partial vectors a thread loads before merging them */

/* The lane mappings below are written for these (and blockDim.x 128:
 * 4 warps score 8 keys each per tile, half a warp updates one head). */
static_assert(ATT_TILE == 32 && ATT_GH == 8 && ATT_KPW == 8, "split-K lane mappings");

/* First visible key of a token at position p. */
static __device__ __forceinline__ long long att_lo(long long p, long long window)
{
	return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* The partition of nk keys: *ns splits of *per keys (the last may be
 * shorter): as many splits as ceil(nk / minkeys), at most `splits`;
 * aligned (batch-invariant mode, where splits covers every context of
 * the cache): splits of exactly minkeys keys from the first, so split s
 * and its tiles of 32 keys cover the same positions for every token.
 * With splits <= minkeys no split is empty. It depends on nothing but
 * the token's own key count, so a token's bits do not depend on the
 * batch. */
static __device__ __forceinline__ void att_split(long long nk, long long splits,
						 long long minkeys, int aligned, long long *ns,
						 long long *per)
{
	long long n = (nk + minkeys - 1) / minkeys;
	if (aligned && n <= splits) {
		/* aligned: split s holds keys s * minkeys .. (the last one
		 * shorter), the same keys for every token that sees them */
		*ns = n < 1 ? 1 : n;
		*per = minkeys;
		return;
	}
	if (n > splits)
		n = splits;
	if (n < 1)
		n = 1;
	*ns = n;
	*per = (nk + n - 1) / n;
}

/* The r-th (head, 8-dim vector) pair thread tid owns in the value, merge
 * and store loops (pair tid + 128 r of gn heads x nv vectors): false when
 * it is past the group's pairs. */
static __device__ __forceinline__ bool att_pair(int tid, int r, int gn, int nv, int *g, int *v)
{
	const int pi = tid + r * 128;
	*g = pi / nv, *v = pi - *g * nv;
	return pi < gn * nv;
}

/* c ? a : b, opaque to the compiler: a C select of two array elements
 * becomes a select of their addresses, which puts the array in local
 * memory. */
static __device__ __forceinline__ float att_sel(int c, float a, float b)
{
	float r;
	asm("{\n\t.reg .pred p;\n\tsetp.ne.s32 p, %3, 0;\n\tselp.f32 %0, %1, %2, p;\n\t}"
	    : "=f"(r)
	    : "f"(a), "f"(b), "r"(c));
	return r;
}

/* One step of att_reduce_scatter32: lanes exchange halves of v[0..2O)
 * with the lane O away; each keeps its half (the upper one where lane
 * bit O is set) plus the partner's copy of it, in v[0..O). */
template <int O>
static __device__ __forceinline__ void att_rs_step(float (&v)[32], int lane)
{
	const int up = lane & O;
#pragma unroll
	for (int k = 0; k < O; k++) {
		const float lo = v[k], hi = v[k + O];
		const float send = att_sel(up, lo, hi), keep = att_sel(up, hi, lo);
		v[k] = keep + __shfl_xor_sync(0xffffffffu, send, O);
	}
}

/* Sum over the warp of 32 values per lane, scattered: lane l returns
 * the total of v[l]. Five halving steps of 16, 8, 4, 2, 1 independent
 * shuffles (31 in all) instead of 32 reductions of 5 dependent ones;
 * v is clobbered. */
static __device__ __forceinline__ float att_reduce_scatter32(float (&v)[32], int lane)
{
	att_rs_step<16>(v, lane);
	att_rs_step<8>(v, lane);
	att_rs_step<4>(v, lane);
	att_rs_step<2>(v, lane);
	att_rs_step<1>(v, lane);
	return v[0];
}

/* Dot product of 8 query dims (a, b) with 8 key dims. */
static __device__ __forceinline__ float att_dot8(float4 a, float4 b, const float *k)
{
	float d = a.x * k[0];
	d = fmaf(a.y, k[1], d);
	d = fmaf(a.z, k[2], d);
	d = fmaf(a.w, k[3], d);
	d = fmaf(b.x, k[4], d);
	d = fmaf(b.y, k[5], d);
	d = fmaf(b.z, k[6], d);
	return fmaf(b.w, k[7], d);
}

/* d[4g + u] = the lane's partial dot product of query head g with key
 * u (dims 8 lane .. + 8), for heads g < NH; zero for the others. */
template <int NH>
static __device__ __forceinline__ void att_dots(float (&d)[32], const float (*qs)[ATT_MAXHD],
						const float (&kf)[4][8], int lane)
{
#pragma unroll
	for (int g = 0; g < ATT_GH; g++) {
		if (g >= NH) {
#pragma unroll
			for (int u = 0; u < 4; u++)
				d[4 * g + u] = 0.0f;
			continue;
		}
		const float4 qa = *(const float4 *)&qs[g][lane * 8];
		const float4 qb = *(const float4 *)&qs[g][lane * 8 + 4];
#pragma unroll
		for (int u = 0; u < 4; u++)
			d[4 * g + u] = att_dot8(qa, qb, kf[u]);
	}
}

/* Eight floats, bf16-rounded, to 16-byte aligned p. */
static __device__ __forceinline__ void att_store8(bf16 *p, const float *o)
{
	*(uint4 *)p = atlas_pack8(o);
}

/* Eight floats to shared memory (q4: the output row before it is
 * rotated back). */
static __device__ __forceinline__ void att_stage8(float *p, const float *o)
{
	*(float4 *)p = make_float4(o[0], o[1], o[2], o[3]);
	*(float4 *)(p + 4) = make_float4(o[4], o[5], o[6], o[7]);
}

/* q4: the gn staged output rows in qs rotated back (the rotation is its
 * own inverse), then stored to out (gn rows of hd) by the threads that
 * own their pairs. Every thread of the block calls it. */
static __device__ void att_unrotate_store(bf16 *out, float (*qs)[ATT_MAXHD], int gn, int hd,
					  int nv, int tid)
{
	__syncthreads();
	kvq_rotate(&qs[0][0], gn, ATT_MAXHD, hd, tid, 128, kvq_syncthreads());
#pragma unroll
	for (int r = 0; r < ATT_VPT; r++) {
		int g, v;
		if (att_pair(tid, r, gn, nv, &g, &v))
			att_store8(out + (long long)g * hd + v * 8, qs[g] + v * 8);
	}
}

/* 4 bytes global -> shared, asynchronously (cp.async.ca: the sizes below
 * 16 need the L1 form). */
static __device__ __forceinline__ void kvq_cp4(void *s, const void *g)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(
			 (unsigned)__cvta_generic_to_shared(s)),
		     "l"(g)
		     : "memory");
}

/* out = attention of each (token t, query head h) over its keys: a
 * token's keys go in ns = min(splits, ceil(nk / minkeys)) ranges; block
 * (t, kv head, group of <= 8 of its query heads, split s < ns) computes
 * the unnormalized output and (max, sum) of range s for the group's
 * heads, and the last block of a (t, kv head, group) to finish merges
 * them (below). part: [T, H, splits, hd] outputs, then [T, H, splits, 2]
 * (max, sum) pairs, FP32; cnt: [T * Hkv * ceil(G/8)] zeros, left zero.
 * Needs hd % 8 == 0, hd <= ATT_MAXHD, splits <= ATT_MAXSPLIT, q, out, kc
 * and vc 16-byte aligned, blockDim.x == 128 (else the block writes
 * nothing). */
/* 4 blocks an SM: at most 128 registers (168 unbounded, 3 blocks an SM;
 * on the H200 a batch-64 step's attention went from 3.54 to 3.13 ms with
 * this and the early exit below together) */
/* KVF: the cache's format, 0 (BF16) or KVQ_FP8 / KVQ_Q4 (kvq.cuh): a
 * row of a quantized cache is rb bytes, a key or value vector of 8 dims
 * is 8 (fp8) or 4 (q4) bytes scaled by its head's (fp8) or block's (q4)
 * scale; with q4 the group's query rows are rotated in shared memory
 * before the keys are scored and the outputs rotated back before they
 * are stored (partials stay rotated: the merge is linear). */
template <int KVF>
static __device__ __forceinline__ void
attention_part(bf16 *out, float *part, int *cnt, const bf16 *q, const void *kc, const void *vc,
	       const int *seq_of, const int *pos, const int *block_tables, long long max_blocks,
	       long long block_size, long long T, long long H, long long Hkv, long long hd,
	       long long window, float scale, long long splits, long long minkeys, int aligned)
{
	__shared__ __align__(16) float qs[ATT_GH][ATT_MAXHD]; /* the group's query rows */
	__shared__ float ps[ATT_GH][ATT_TILE];  /* scores of the tile, then probabilities */
	__shared__ long long offs[ATT_TILE];    /* element offset of each key's row */
	__shared__ __align__(16) bf16 vs[ATT_TILE][ATT_MAXHD]; /* the tile's V rows */
	__shared__ float ms[ATT_GH], ls[ATT_GH]; /* running max and sum per head */
	__shared__ float cs[ATT_GH];             /* this tile's rescale of each head */
	__shared__ float wt[ATT_GH][ATT_MAXSPLIT]; /* merge: weight of each split */
	__shared__ float lt[ATT_GH][ATT_MAXSPLIT]; /* merge: softmax sum of each split */
	__shared__ int last;                     /* this block is the group's last split */
	__shared__ __align__(16) unsigned char vsc[ATT_TILE][16]; /* quantized: the V rows' scales */
	/* fp8: the tile's V codes as copied, widened into vs once all landed */
	__shared__ __align__(16) unsigned char vq[KVF == KVQ_FP8 ? ATT_TILE : 1][ATT_MAXHD];
	__shared__ float lv[16];                 /* q4: the codebook */
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int nwarps = blockDim.x >> 5;
	if (blockDim.x != 128 || hd % 8 || hd > ATT_MAXHD || splits < 1 || splits > ATT_MAXSPLIT ||
	    minkeys < 1)
		return;
	const long long G = H / Hkv, ngrp = (G + ATT_GH - 1) / ATT_GH;
	const long long grp = blockIdx.x / splits; /* (token, kv head, head group): its counter */
	const long long s = blockIdx.x % splits;
	const long long hg = grp % ngrp, kvh = grp / ngrp % Hkv, t = grp / ngrp / Hkv;
	if (t >= T)
		return;
	const int gn = G - hg * ATT_GH < ATT_GH ? (int)(G - hg * ATT_GH) : ATT_GH;
	const long long h0 = kvh * G + hg * ATT_GH; /* first query head of the block */
	const int nv = (int)(hd / 8); /* 16-byte vectors per row, <= 32 */
	/* a block past its token's split count exits before it loads
	 * anything else (a load in flight would hold its slot) */
	const long long p = pos[t], lo = att_lo(p, window), nk = p - lo + 1;
	long long ns, per;
	att_split(nk, splits, minkeys, aligned, &ns, &per);
	if (s >= ns)
		return; /* this token has fewer splits: uniform for the block */
	/* the group's query rows, 16 bytes a thread (zeros past gn and hd: the
	 * scores below run all 8 heads and 32 lanes), in flight while the
	 * block table is read */
	uint4 qv[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int i = tid + r * 128, g = i >> 5, v = i & 31;
		qv[r] = make_uint4(0u, 0u, 0u, 0u);
		if (g < gn && v < nv)
			qv[r] = __ldg((const uint4 *)(q + (t * H + h0 + g) * hd) + v);
	}
	const int *table = block_tables + (long long)seq_of[t] * max_blocks;
	const long long k0 = s * per, k1 = k0 + per < nk ? k0 + per : nk;
	/* a key's row: element offset offs * ld (BF16), or byte offset
	 * offs (quantized), of its row; the head's data then at db bytes
	 * past it and its scales at sb */
	const long long ld = KVF ? 1 : Hkv * hd;
	const long long rb = KVF ? kvq_row_bytes(KVF, Hkv, hd) : 0;
	const long long db = KVF ? kvq_scale_bytes(KVF, Hkv, hd) + kvh * (KVF == KVQ_FP8 ? hd : hd / 2)
				 : 0;
	const long long sb = KVF == KVQ_FP8 ? kvh * 4 : kvh * (hd / KVQ_Q4_BLOCK) * 2;
	const unsigned rowb = (unsigned)(KVF == 0 ? hd * 2 : KVF == KVQ_FP8 ? hd : hd / 2); /* bytes of a head's K or V row */
	const unsigned char *kcb = (const unsigned char *)kc, *vcb = (const unsigned char *)vc;
	if (KVF == KVQ_Q4 && tid < 16)
		lv[tid] = kvq_level[tid];

#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int i = tid + r * 128, g = i >> 5, v = i & 31;
		float f[8];
		atlas_unpack8(qv[r], f);
		*(float4 *)&qs[g][v * 8] = make_float4(f[0], f[1], f[2], f[3]);
		*(float4 *)&qs[g][v * 8 + 4] = make_float4(f[4], f[5], f[6], f[7]);
	}
	if (tid < ATT_GH) {
		ms[tid] = -INFINITY;
		ls[tid] = 0.0f;
	}
	if (KVF == KVQ_Q4) {
		__syncthreads(); /* qs written */
		kvq_rotate(&qs[0][0], ATT_GH, ATT_MAXHD, (int)hd, tid, 128, kvq_syncthreads());
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
		/* threads 0..31 resolve the tile's rows, threads 32..63 send the
		 * next tile's K and V rows to L2 */
		if (tid < 2 * ATT_TILE && j0 + tid < k1) {
			const long long key = lo + j0 + tid;
			const long long rowi = (long long)table[key / block_size] * block_size + key % block_size;
			const long long off = KVF ? rowi * rb : rowi * ld + kvh * hd;
			if (tid < ATT_TILE) {
				offs[tid] = off;
			} else if (KVF) {
				atlas_prefetch_l2(kcb + off + db, rowb);
				atlas_prefetch_l2(vcb + off + db, rowb);
			} else {
				atlas_prefetch_l2((const bf16 *)kc + off, rowb);
				atlas_prefetch_l2((const bf16 *)vc + off, rowb);
			}
		}
		__syncthreads();
		/* the tile's V rows into shared memory, in flight while the
		 * scores are computed (16 bytes a copy; on the H200 loading them
		 * 8 rows at a time in the value loop left a batch-64 step's
		 * attention latency-bound) */
		if (KVF == 0) {
			for (int i = tid; i < nc * nv; i += 128) {
				const int r = i / nv, v = i - r * nv;
				atlas_cp16((uint32_t)__cvta_generic_to_shared(&vs[r][v * 8]),
					   (const bf16 *)vc + offs[r] + v * 8, 16);
			}
		} else {
			/* the head's data, 16 bytes a copy, to the start of row r of
			 * vs; its scales (4 bytes fp8, hd/16 q4) to vsc[r] */
			const int nq = (int)(rowb / 16), nsc = KVF == KVQ_FP8 ? 1 : (int)(hd / 64);
			for (int i = tid; i < nc * (nq + nsc); i += 128) {
				const int r = i / (nq + nsc), c = i - r * (nq + nsc);
				if (c < nq)
					atlas_cp16((uint32_t)__cvta_generic_to_shared(
						       (KVF == KVQ_FP8 ? vq[r] : (unsigned char *)vs[r]) + c * 16),
						   vcb + offs[r] + db + c * 16, 16);
				else
					kvq_cp4(&vsc[r][(c - nq) * 4], vcb + offs[r] + sb + (c - nq) * 4);
			}
		}
		atlas_cp_commit();
		/* scores: warp w takes keys w + 4u (u < 8), all loads first; lane
		 * l holds dims 8l..8l+7 of each; per 4 keys the lane's 32 partial
		 * dot products (8 heads x 4 keys) are summed over the warp by one
		 * reduce-scatter, leaving lane l the score of head l/4, key l%4 */
		for (int i0 = warp; i0 < nc; i0 += nwarps * ATT_KPW) {
			uint4 kr[ATT_KPW];
			float ks[ATT_KPW]; /* quantized: each key's scale for this lane's dims */
#pragma unroll
			for (int u = 0; u < ATT_KPW; u++) {
				const int i = i0 + u * nwarps;
				kr[u] = make_uint4(0u, 0u, 0u, 0u);
				ks[u] = 0.0f;
				if (i < nc && lane < nv) {
					if (KVF == 0) {
						kr[u] = __ldg((const uint4 *)((const bf16 *)kc + offs[i]) + lane);
					} else if (KVF == KVQ_FP8) {
						const uint2 w = __ldg((const uint2 *)(kcb + offs[i] + db) + lane);
						kr[u].x = w.x, kr[u].y = w.y;
						ks[u] = __ldg((const float *)(kcb + offs[i] + sb));
					} else {
						kr[u].x = __ldg((const uint32_t *)(kcb + offs[i] + db) + lane);
						ks[u] = __half2float(__ldg((const __half *)(kcb + offs[i] + sb) + lane / 4));
					}
				}
			}
#pragma unroll
			for (int c = 0; c < ATT_KPW / 4; c++) {
				if (i0 + 4 * c * nwarps >= nc)
					continue; /* uniform across the warp */
				float kf[4][8], d[32];
#pragma unroll
				for (int u = 0; u < 4; u++) {
					if (KVF == 0)
						atlas_unpack8(kr[4 * c + u], kf[u]);
					else if (KVF == KVQ_FP8)
						kvq_unpack8_fp8(make_uint2(kr[4 * c + u].x, kr[4 * c + u].y),
								ks[4 * c + u], kf[u]);
					else
						kvq_unpack8_q4(kr[4 * c + u].x, ks[4 * c + u], lv, kf[u]);
				}
				/* with 4 heads or fewer in the group (Qwen3-8B has 4),
				 * heads 4..7 score zero without their dot products; the
				 * reduce-scatter never mixes heads, so the others' bits
				 * are unchanged */
				if (gn > ATT_GH / 2)
					att_dots<ATT_GH>(d, qs, kf, lane);
				else
					att_dots<ATT_GH / 2>(d, qs, kf, lane);
				const float sc = att_reduce_scatter32(d, lane);
				const int g = lane >> 2, i = i0 + (4 * c + (lane & 3)) * nwarps;
				if (g < gn && i < nc)
					ps[g][i] = scale * sc;
			}
		}
		__syncthreads();
		/* softmax update: half-warp hw = 2 * warp + lane / 16 takes head
		 * hw, lane j = lane % 16 keys j and j + 16 of the tile: the two
		 * heads of a warp reduce at once (4 shuffles each for max, sum) */
		{
			const int g = 2 * warp + (lane >> 4), j = lane & 15;
			const bool in0 = g < gn && j < nc, in1 = g < gn && j + 16 < nc;
			const float s0 = in0 ? ps[g][j] : -INFINITY;
			const float s1 = in1 ? ps[g][j + 16] : -INFINITY;
			const float mo = ms[g];
			float mx = fmaxf(s0, s1);
#pragma unroll
			for (int o = 8; o > 0; o >>= 1)
				mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
			const float cm = fmaxf(mo, mx);
			const float e0 = in0 ? expf(s0 - cm) : 0.0f;
			const float e1 = in1 ? expf(s1 - cm) : 0.0f;
			float sum = e0 + e1;
#pragma unroll
			for (int o = 8; o > 0; o >>= 1)
				sum += __shfl_xor_sync(0xffffffffu, sum, o);
			__syncwarp(); /* every lane has read ms[g] */
			if (in0)
				ps[g][j] = e0;
			if (in1)
				ps[g][j + 16] = e1;
			if (g < gn && j == 0) {
				const float corr = cm == mo ? 1.0f : expf(mo - cm);
				cs[g] = corr;
				ls[g] = ls[g] * corr + sum;
				ms[g] = cm;
			}
		}
		atlas_cp_wait<0>(); /* this thread's V copies landed; the barrier: everyone's */
		__syncthreads();
		if (KVF == KVQ_FP8) {
			/* E4M3 codes to BF16 (exact), once a key for all the group's
			 * heads rather than once a head in the value loop, which is
			 * then the BF16 one (H100, 32k context, batch 1: 11.17 ms a
			 * step, against 10.30 for a BF16 cache in the same call) */
			for (int i = tid; i < nc * nv; i += 128) {
				const int r = i / nv, v = i - r * nv;
				float f[8];
				kvq_unpack8_fp8(*((const uint2 *)vq[r] + v), 1.0f, f);
				*((uint4 *)vs[r] + v) = atlas_pack8(f);
			}
			__syncthreads();
		}
		/* values: thread owns pairs (head g, vector v), pair = tid + r*128 */
#pragma unroll
		for (int r = 0; r < ATT_VPT; r++) {
			int g, v;
			if (!att_pair(tid, r, gn, nv, &g, &v))
				continue;
			const float corr = cs[g];
#pragma unroll
			for (int j = 0; j < 8; j++)
				acc[r][j] *= corr;
			/* V rows from shared memory (the tile's cp.async copies);
			 * a quantized row's scale goes into the probability */
			for (int i = 0; i < nc; i++) {
				float vf[8];
				float pr = ps[g][i];
				if (KVF == 0) {
					atlas_unpack8(*((const uint4 *)vs[i] + v), vf);
				} else if (KVF == KVQ_FP8) {
					pr *= *(const float *)vsc[i];
					atlas_unpack8(*((const uint4 *)vs[i] + v), vf);
				} else {
					pr *= __half2float(*((const __half *)vsc[i] + v / 4));
					kvq_unpack8_q4(*((const uint32_t *)vs[i] + v), 1.0f, lv, vf);
				}
#pragma unroll
				for (int j = 0; j < 8; j++)
					acc[r][j] = fmaf(pr, vf[j], acc[r][j]);
			}
		}
	}
	__syncthreads(); /* ms, ls final (also when the range was empty) */
	const long long hs = (t * H + h0) * splits; /* (t, h0, split 0) */

	if (ns == 1) {
		/* the token's only split: out straight from the registers, with
		 * the merge's arithmetic for one split (M = m, w = 1 unless m is
		 * -inf, L = fmaf(l, w, 0), weight w * (1 / L), o = fmaf(acc,
		 * weight, 0)), so the bits are those a merge would give */
#pragma unroll
		for (int r = 0; r < ATT_VPT; r++) {
			int g, v;
			if (!att_pair(tid, r, gn, nv, &g, &v))
				continue;
			const float m = ms[g], M = fmaxf(-INFINITY, m);
			const float w = m == -INFINITY ? 0.0f : expf(m - M);
			const float wg = w * (1.0f / fmaf(ls[g], w, 0.0f));
			float o[8];
#pragma unroll
			for (int j = 0; j < 8; j++)
				o[j] = fmaf(acc[r][j], wg, 0.0f);
			if (KVF == KVQ_Q4)
				att_stage8(qs[g] + v * 8, o);
			else
				att_store8(out + (t * H + h0 + g) * hd + v * 8, o);
		}
		if (KVF == KVQ_Q4)
			att_unrotate_store(out + (t * H + h0) * hd, qs, gn, (int)hd, nv, tid);
		return;
	}

	/* partials of split s */
#pragma unroll
	for (int r = 0; r < ATT_VPT; r++) {
		int g, v;
		if (att_pair(tid, r, gn, nv, &g, &v)) {
			float4 *po = (float4 *)(part + (hs + g * splits + s) * hd + v * 8);
			po[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
			po[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
		}
	}
	float2 *pml = (float2 *)(part + T * H * splits * hd) + hs; /* (t, h0, 0) pairs */
	if (tid < gn)
		pml[tid * splits + s] = make_float2(ms[tid], ls[tid]);
	/* last block finishes: the barrier orders every thread's partial
	 * stores before thread 0's fence, which (cumulative) releases them
	 * to the block that counts the group's last split; that block
	 * fences again before it reads (acquire) and zeroes the counter,
	 * which no other block of this launch touches after it, for the next
	 * launch (graph replays depend on that) */
	__syncthreads();
	if (tid == 0) {
		__threadfence();
		const int done = atomicAdd(&cnt[grp], 1);
		last = done == (int)ns - 1;
		if (last) {
			cnt[grp] = 0;
			__threadfence();
		}
	}
	__syncthreads();
	if (!last)
		return;

	/* merge, as the combine kernel it replaces did, whichever block is
	 * last: M = max_s m_s, w_s = exp(m_s - M) (0 for -inf), L = sum_s
	 * l_s w_s by fmaf in split order, out = sum_s po_s * (w_s / L) by
	 * fmaf in split order. Warp w takes heads w and w + 4: lane l
	 * loads splits l and l + 32 (both heads' pairs in flight at once);
	 * max is exact in any order, L keeps the serial chain (its operands
	 * come from shared memory, ns <= 64 steps). Partials are read from
	 * L2 (__ldcg): other blocks wrote them. */
	float2 mlv[2][2];
#pragma unroll
	for (int r = 0; r < 2; r++)
#pragma unroll
		for (int u = 0; u < 2; u++) {
			const int g = warp + r * nwarps, sp = lane + 32 * u;
			mlv[r][u] = make_float2(-INFINITY, 0.0f);
			if (g < gn && sp < ns)
				mlv[r][u] = __ldcg(pml + g * splits + sp);
		}
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int g = warp + r * nwarps;
		if (g >= gn)
			continue; /* uniform across the warp */
		const float M = atlas_warp_max(fmaxf(mlv[r][0].x, mlv[r][1].x));
		float w[2];
#pragma unroll
		for (int u = 0; u < 2; u++) {
			const int sp = lane + 32 * u;
			w[u] = mlv[r][u].x == -INFINITY ? 0.0f : expf(mlv[r][u].x - M);
			if (sp < ns) {
				wt[g][sp] = w[u];
				lt[g][sp] = mlv[r][u].y;
			}
		}
		__syncwarp();
		float L = 0.0f;
#pragma unroll 4
		for (int sp = 0; sp < ns; sp++)
			L = fmaf(lt[g][sp], wt[g][sp], L);
		const float inv = 1.0f / L;
		__syncwarp(); /* every lane has read wt[g] */
#pragma unroll
		for (int u = 0; u < 2; u++)
			if (lane + 32 * u < ns)
				wt[g][lane + 32 * u] = w[u] * inv;
	}
	__syncthreads();
	/* out: thread owns (head, 8-dim vector) pairs, ATT_MPF splits' vectors
	 * loaded at once */
#pragma unroll
	for (int r = 0; r < ATT_VPT; r++) {
		int g, v;
		if (!att_pair(tid, r, gn, nv, &g, &v))
			continue;
		const float *pg = part + (hs + g * splits) * hd + v * 8;
		float o[8];
#pragma unroll
		for (int j = 0; j < 8; j++)
			o[j] = 0.0f;
		for (int s0 = 0; s0 < ns; s0 += ATT_MPF) {
			float4 pa[ATT_MPF][2];
#pragma unroll
			for (int u = 0; u < ATT_MPF; u++)
				if (s0 + u < ns) {
					pa[u][0] = __ldcg((const float4 *)(pg + (s0 + u) * hd));
					pa[u][1] = __ldcg((const float4 *)(pg + (s0 + u) * hd) + 1);
				}
#pragma unroll
			for (int u = 0; u < ATT_MPF; u++)
				if (s0 + u < ns) {
					const float ws = wt[g][s0 + u];
					o[0] = fmaf(pa[u][0].x, ws, o[0]);
					o[1] = fmaf(pa[u][0].y, ws, o[1]);
					o[2] = fmaf(pa[u][0].z, ws, o[2]);
					o[3] = fmaf(pa[u][0].w, ws, o[3]);
					o[4] = fmaf(pa[u][1].x, ws, o[4]);
					o[5] = fmaf(pa[u][1].y, ws, o[5]);
					o[6] = fmaf(pa[u][1].z, ws, o[6]);
					o[7] = fmaf(pa[u][1].w, ws, o[7]);
				}
		}
		if (KVF == KVQ_Q4)
			att_stage8(qs[g] + v * 8, o);
		else
			att_store8(out + (t * H + h0 + g) * hd + v * 8, o);
	}
	if (KVF == KVQ_Q4)
		att_unrotate_store(out + (t * H + h0) * hd, qs, gn, (int)hd, nv, tid);
}

extern "C" __global__ void __launch_bounds__(128, 4)
atlas_attention_part(bf16 *out, float *part, int *cnt, const bf16 *q, const bf16 *kc,
		     const bf16 *vc, const int *seq_of, const int *pos, const int *block_tables,
		     long long max_blocks, long long block_size, long long T, long long H,
		     long long Hkv, long long hd, long long window, float scale, long long splits,
		     long long minkeys, int aligned)
{
	ATLAS_PDL_ENTRY();
	attention_part<0>(out, part, cnt, q, kc, vc, seq_of, pos, block_tables, max_blocks,
			  block_size, T, H, Hkv, hd, window, scale, splits, minkeys, aligned);
}

/* atlas_attention_part_fp8, _q4: the same over a cache in format fp8 or
 * q4 (kvq.cuh; kc and vc are rows of kvq_row_bytes bytes): the result of
 * atlas_attention_part over the dequantized rows, with the same
 * partition, merge order and determinism. hd as the format needs (fp8 a
 * multiple of 16, q4 a power of two 64..256). */
extern "C" __global__ void __launch_bounds__(128, 4)
atlas_attention_part_fp8(bf16 *out, float *part, int *cnt, const bf16 *q, const void *kc,
			 const void *vc, const int *seq_of, const int *pos, const int *block_tables,
			 long long max_blocks, long long block_size, long long T, long long H,
			 long long Hkv, long long hd, long long window, float scale,
			 long long splits, long long minkeys, int aligned)
{
	ATLAS_PDL_ENTRY();
	if (hd % 16)
		return;
	attention_part<KVQ_FP8>(out, part, cnt, q, kc, vc, seq_of, pos, block_tables, max_blocks,
				block_size, T, H, Hkv, hd, window, scale, splits, minkeys, aligned);
}

extern "C" __global__ void __launch_bounds__(128, 4)
atlas_attention_part_q4(bf16 *out, float *part, int *cnt, const bf16 *q, const void *kc,
			const void *vc, const int *seq_of, const int *pos, const int *block_tables,
			long long max_blocks, long long block_size, long long T, long long H,
			long long Hkv, long long hd, long long window, float scale,
			long long splits, long long minkeys, int aligned)
{
	ATLAS_PDL_ENTRY();
	if (hd < 64 || (hd & (hd - 1)))
		return;
	attention_part<KVQ_Q4>(out, part, cnt, q, kc, vc, seq_of, pos, block_tables, max_blocks,
			       block_size, T, H, Hkv, hd, window, scale, splits, minkeys, aligned);
}
