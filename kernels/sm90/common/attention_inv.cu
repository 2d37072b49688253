/* attention_inv.cu - batch-invariant attention on tensor cores: a row's
 * output (token t, query head h) has the same bits however the step is
 * made up (prefill chunk or decode token, alone or in a batch of any
 * size, any chunking of its prompt). Same contract as atlas_attention
 * (kernels/ABI.md); the host (cuda_attn.c) takes it for batch-invariant
 * steps over a BF16 cache with hd 64 or 128 and at most 16 query heads a
 * kv head, for every T, so that prefill and decode never mix families.
 *
 * The partition is fixed in absolute key positions. Keys come in tiles
 * of AI_BN (64) from key 0 and in splits of AI_SPLIT (128, two tiles)
 * from key 0. For one row:
 *  - within a split, tiles in order: S = q K^T on mma.sync (m16n8k16,
 *    the dims in k16 steps in order), scaled by scale log2(e), masked,
 *    online softmax in base 2 with a thread's partial row sum, P rounded
 *    to BF16, O += P V on mma.sync (keys in k16 steps in order): the
 *    flash kernel's arithmetic (attention_prefill.cu), ai_scores and
 *    ai_pv below;
 *  - the split's (m, l, o) are folded into the row's running total
 *    (M, L, O) in split order (ai_fold): M' = max(M, m), a = 2^(M - M'),
 *    b = 2^(m - M'), L' = l b + L a, O' = o b + O a;
 *  - out = bf16(O (1 / L)).
 * A tile a row sees nothing of leaves its state as it was, and a split it
 * sees nothing of is not folded, so the tiles and splits a kernel visits
 * beyond a row's own keys do not touch its bits. mma rows are
 * independent (the c0 probe, bench/h200-2026-12-04-inv: a k16 step's bits
 * are a function of its 16 products and the accumulator), so which rows
 * share a warp does not either. Every operation of the shared arithmetic
 * is written with explicit rounding (__fmul_rn, __fadd_rn, fmaf): the
 * compiler cannot contract it differently in the two kernels.
 *
 * Two forms of that one arithmetic:
 *  - atlas_attention_inv_prefill (many tokens of a sequence: prefill
 *    chunks): grid (ceil(T/64), H), block 128; the flash kernel's layout
 *    (64 tokens of one query head a block, 16 a warp, passes per
 *    sequence), with tiles aligned to key 0 and the split's state folded
 *    into the running total at every split boundary, in registers.
 *  - atlas_attention_inv_split + atlas_attention_inv_merge (decode, or
 *    any T): block (token, kv head, z) of one warp takes splits z, z +
 *    Z, ... of the token; its 16 rows are the kv head's query heads
 *    (zeros past H / Hkv); each split's (m, l, o) goes to part (FP32:
 *    [T, H, splits, hd] o, then [T, H, splits, 2] m and l); the merge
 *    (block (t, h), a thread a dim) folds them in split order.
 */
#include "common.cuh"
#include "attention_inv.cuh"

#include <limits.h>

#define AI_MAXG 16 /* split kernel: query heads a kv head (one warp's rows) */

extern "C" __global__ void __launch_bounds__(AI_THREADS)
atlas_attention_inv_prefill(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
			    const int *seq_of, const int *pos, const int *block_tables,
			    long long max_blocks, long long block_size, long long T, long long H,
			    long long Hkv, long long hd, long long window, float scale)
{
	ATLAS_PDL_ENTRY();
	ai_prefill_entry(out, q, kc, vc, seq_of, pos, block_tables, max_blocks, block_size, T, H,
				 Hkv, hd, window, scale);
}

/* --- split form ----------------------------------------------------- */

/* Number of splits of a token at position p: those from the one holding
 * its first visible key lo to the one holding p (*sf: the first's index
 * from key 0). */
static __device__ __forceinline__ long long ai_nsplit(long long p, long long window, long long *lo,
						      long long *sf)
{
	*lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	*sf = *lo / AI_SPLIT;
	return p / AI_SPLIT - *sf + 1;
}

template <int HD>
static __device__ __forceinline__ void
ai_split(bf16 *smem, bf16 *qs, long long *offs, float *part, const bf16 *q, const bf16 *kc,
	 const bf16 *vc, const int *seq_of, const int *pos, const int *block_tables,
	 long long max_blocks, int bs, long long T, long long H, long long Hkv, long long window,
	 float scale, long long splits)
{
	constexpr int LDS = HD + AI_PAD, CH = HD / 8, NO = HD / 8;
	bf16 *ks = smem, *vs = smem + AI_BN * LDS;
	const int lane = threadIdx.x, g = lane >> 2, tig = lane & 3;
	const long long t = blockIdx.x / Hkv, kvh = blockIdx.x % Hkv;
	const int G = (int)(H / Hkv);
	const long long p = pos[t];
	long long lo, sf;
	const long long ns = ai_nsplit(p, window, &lo, &sf);
	if ((long long)blockIdx.y >= ns)
		return;
	const long long ld = Hkv * HD, kvoff = kvh * HD;
	const float sl2 = __fmul_rn(scale, AI_LOG2E);
	const uint32_t ks_lane = ai_ks_lane<HD>(ks, lane), vs_lane = ai_vs_lane<HD>(vs, lane);

	/* the kv head's query rows -> qs (zeros past G), in flight with the
	 * first tile's copies; their A fragments once they landed */
#pragma unroll
	for (int i = 0; i < 16 * CH / 32; i++) {
		const int c = lane + i * 32;
		const int r = c / CH, ch = c % CH;
		const bf16 *src = r < G ? q + (t * H + kvh * G + r) * HD + ch * 8 : q;
		atlas_cp16(atlas_smem_addr(qs + r * LDS + ch * 8), src, r < G ? 16 : 0);
	}
	atlas_cp_commit();
	uint32_t qf[HD / 16][4];
	bool have_q = false;

	const int *table = block_tables + (long long)seq_of[t] * max_blocks;
	const int vlo[2] = {(int)lo, (int)lo}, vhi[2] = {(int)p, (int)p};
	for (long long s = blockIdx.y; s < ns; s += gridDim.y) {
		/* the split's key rows (outside [lo, p]: none); its second
		 * tile asked into L2 while the first is copied */
		const long long k0 = (sf + s) * AI_SPLIT;
#pragma unroll
		for (int u = 0; u < AI_SPLIT / AI_BN; u++)
			ai_offsets(offs + u * AI_BN, table, (int)(k0 + u * AI_BN), (int)lo, (int)p, bs, ld,
				   kvoff, lane, 32);
		__syncwarp();
		for (int i = AI_BN + lane; i < AI_SPLIT; i += 32)
			if (offs[i] >= 0) {
				atlas_prefetch_l2(kc + offs[i], HD * 2);
				atlas_prefetch_l2(vc + offs[i], HD * 2);
			}
		ai_state<HD> st;
		ai_reset(st);
		for (int u = 0; u < AI_SPLIT / AI_BN; u++) {
			const long long j0 = k0 + u * AI_BN, jl = j0 + AI_BN - 1;
			if (j0 > p || jl < lo)
				continue; /* the row sees nothing of this tile: no change */
			ai_load_tile<HD, 32>(ks, kc, offs + u * AI_BN, lane);
			atlas_cp_commit();
			ai_load_tile<HD, 32>(vs, vc, offs + u * AI_BN, lane);
			atlas_cp_commit();
			atlas_cp_wait<1>(); /* the queries and K landed */
			__syncwarp();
			if (!have_q) {
				ai_qfrag<HD>(qf, qs, 0, lane);
				have_q = true;
			}
			float sc[AI_BN / 8][4];
			ai_scores<HD>(st, sc, qf, ks_lane, (int)j0, !(j0 >= lo && jl <= p), vlo, vhi, sl2,
				      tig);
			atlas_cp_wait<0>(); /* V landed */
			__syncwarp();
			ai_pv<HD>(st, sc, vs_lane);
			__syncwarp(); /* ks and vs free for the next tile */
		}
		/* the split's rows: o, then (m, l) */
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const float ls = ai_quad_sum(st.l[e]);
			const int r = g + 8 * e;
			if (r >= G)
				continue;
			const long long row = (t * H + kvh * G + r) * splits + s;
			float *po = part + row * HD + tig * 2;
#pragma unroll
			for (int n = 0; n < NO; n++)
				*(float2 *)(po + n * 8) = make_float2(st.o[n][2 * e], st.o[n][2 * e + 1]);
			if (tig == 0)
				*(float2 *)(part + T * H * splits * HD + row * 2) = make_float2(st.m[e], ls);
		}
		__syncwarp(); /* offs free for the next split */
	}
}

extern "C" __global__ void __launch_bounds__(32)
atlas_attention_inv_split(float *part, const bf16 *q, const bf16 *kc, const bf16 *vc,
			  const int *seq_of, const int *pos, const int *block_tables,
			  long long max_blocks, long long block_size, long long T, long long H,
			  long long Hkv, long long hd, long long window, float scale, long long splits)
{
	ATLAS_PDL_ENTRY();
	__shared__ __align__(128) bf16 smem[2 * AI_BN * (AI_MAXHD + AI_PAD)];
	__shared__ __align__(16) bf16 qs[16 * (AI_MAXHD + AI_PAD)];
	__shared__ long long offs[AI_SPLIT];
	if (blockDim.x != 32 || block_size < 1 || block_size > INT_MAX || Hkv < 1 || H % Hkv ||
	    H / Hkv > AI_MAXG || !atlas_aligned(q, 16) || !atlas_aligned(kc, 16) ||
	    !atlas_aligned(vc, 16) || !atlas_aligned(part, 16))
		__trap(); /* the host never launches these */
	if (hd == 128)
		ai_split<128>(smem, qs, offs, part, q, kc, vc, seq_of, pos, block_tables, max_blocks,
			      (int)block_size, T, H, Hkv, window, scale, splits);
	else if (hd == 64)
		ai_split<64>(smem, qs, offs, part, q, kc, vc, seq_of, pos, block_tables, max_blocks,
			     (int)block_size, T, H, Hkv, window, scale, splits);
	else
		__trap();
}

/* out[t, h] from the splits atlas_attention_inv_split left in part:
 * block (t, h) = blockIdx.x = t H + h, thread d = dim d (blockDim.x = hd),
 * folded in split order. */
extern "C" __global__ void __launch_bounds__(AI_MAXHD)
atlas_attention_inv_merge(bf16 *out, const float *part, const int *pos, long long T, long long H,
			  long long hd, long long window, long long splits)
{
	ATLAS_PDL_ENTRY();
	const long long row = blockIdx.x, t = row / H;
	const int d = threadIdx.x;
	if (t >= T || d >= hd)
		return;
	long long lo, sf;
	const long long ns = ai_nsplit(pos[t], window, &lo, &sf);
	const float *po = part + row * splits * hd + d;
	const float2 *pm = (const float2 *)(part + T * H * splits * hd) + row * splits;
	float M = -INFINITY, L = 0.0f, O = 0.0f;
	for (long long s = 0; s < ns; s++) {
		const float2 ml = pm[s];
		float a, b;
		if (ai_fold(M, L, ml.x, ml.y, a, b))
			O = ai_fold_o(O, po[s * hd], a, b);
	}
	out[row * hd + d] = __float2bfloat16_rn(__fmul_rn(O, ai_inv(L)));
}
