/* attention_inv.cu - batch-invariant attention on tensor cores: a row's
 * output (token t, query head h) has the same bits however the step is
 * made up (prefill chunk or decode token, alone or in a batch of any
 * size, any chunking of its prompt). Same contract as atlas_attention
 * (kernels/ABI.md); the host (cuda_attn.c) takes it for batch-invariant
 * steps over a BF16 cache with hd 64 or 128 and at most 16 query heads a
 * kv head, for every T, so that prefill and decode never mix families.
 *
 * The partition is fixed in absolute key positions. Keys come in tiles
 * of AP_BN (64) from key 0 and in splits of AI_SPLIT (128, two tiles)
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
#include "attention_mma.cuh"

#include <limits.h>

#define AI_SPLIT 128 /* keys a split: AI_SPLIT / AP_BN tiles, aligned to key 0 */
#define AI_BM 64     /* prefill: query tokens a block, 16 a warp */
#define AI_THREADS 128
#define AI_MAXG 16 /* split kernel: query heads a kv head (one warp's rows) */
#define AI_MAXHD 128

static_assert(AI_SPLIT % AP_BN == 0, "a split is whole tiles");

/* A warp's softmax state over one split for its thread's two rows (g and
 * g + 8 of the warp's 16): o unnormalized (the thread's columns 8n + 2
 * tig, + 1), m the largest log2-scaled score so far, l the thread's part
 * of the row sum. */
template <int HD> struct ai_state {
	float o[HD / 8][4];
	float m[2], l[2];
};

template <int HD> static __device__ __forceinline__ void ai_reset(ai_state<HD> &st)
{
#pragma unroll
	for (int n = 0; n < HD / 8; n++)
		st.o[n][0] = st.o[n][1] = st.o[n][2] = st.o[n][3] = 0.0f;
	st.m[0] = st.m[1] = -INFINITY;
	st.l[0] = st.l[1] = 0.0f;
}

/* One tile's scores and softmax update: S = Q K^T (qf: the warp's A
 * fragments; ks_lane: this lane's ldmatrix address in the K tile), times
 * sl2; where masked, key j0 + c is kept for row e only if lo[e] <= key <=
 * hi[e]. Leaves the tile's probabilities (2^(s - m), FP32) in s. */
template <int HD>
static __device__ __forceinline__ void ai_scores(ai_state<HD> &st, float (&s)[AP_BN / 8][4],
						 const uint32_t (&qf)[HD / 16][4], uint32_t ks_lane,
						 int j0, bool masked, const int (&lo)[2],
						 const int (&hi)[2], float sl2, int tig)
{
	constexpr int KS = HD / 16, NS = AP_BN / 8, NO = HD / 8, LDS = HD + AP_PAD;
#pragma unroll
	for (int n = 0; n < NS; n++)
		s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < KS; kk++) {
#pragma unroll
		for (int np = 0; np < NS / 2; np++) {
			uint32_t b[4];
			ap_ldsm4(b, ks_lane + (np * 16 * LDS + kk * 16) * 2);
			ap_mma(s[2 * np], qf[kk], b[0], b[1]);
			ap_mma(s[2 * np + 1], qf[kk], b[2], b[3]);
		}
	}
	/* element (n, i): row g + 8 (i >> 1), key j0 + 8n + 2 tig + (i & 1) */
#pragma unroll
	for (int n = 0; n < NS; n++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			float x = __fmul_rn(s[n][i], sl2);
			if (masked) {
				const int e = i >> 1, key = j0 + n * 8 + tig * 2 + (i & 1);
				x = key >= lo[e] && key <= hi[e] ? x : -INFINITY;
			}
			s[n][i] = x;
		}
#pragma unroll
	for (int e = 0; e < 2; e++) {
		float mx = -INFINITY;
#pragma unroll
		for (int n = 0; n < NS; n++)
			mx = fmaxf(mx, fmaxf(s[n][2 * e], s[n][2 * e + 1]));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		const float mn = fmaxf(st.m[e], mx);
		/* a row with no visible key so far keeps m = -inf: subtract 0
		 * instead, so every exp2 is of -inf (0) */
		const float mu = mn == -INFINITY ? 0.0f : mn;
		const float corr = ap_exp2(__fsub_rn(st.m[e], mu));
		st.m[e] = mn;
		float sum = 0.0f;
#pragma unroll
		for (int n = 0; n < NS; n++) {
			s[n][2 * e] = ap_exp2(__fsub_rn(s[n][2 * e], mu));
			s[n][2 * e + 1] = ap_exp2(__fsub_rn(s[n][2 * e + 1], mu));
			sum = __fadd_rn(sum, __fadd_rn(s[n][2 * e], s[n][2 * e + 1]));
		}
		st.l[e] = fmaf(st.l[e], corr, sum);
#pragma unroll
		for (int n = 0; n < NO; n++) {
			st.o[n][2 * e] = __fmul_rn(st.o[n][2 * e], corr);
			st.o[n][2 * e + 1] = __fmul_rn(st.o[n][2 * e + 1], corr);
		}
	}
}

/* O += P V for the tile (vs_lane: this lane's ldmatrix.trans address in
 * the V tile), P rounded to BF16 straight from the score fragments. */
template <int HD>
static __device__ __forceinline__ void ai_pv(ai_state<HD> &st, const float (&s)[AP_BN / 8][4],
					     uint32_t vs_lane)
{
	constexpr int NO = HD / 8, LDS = HD + AP_PAD;
#pragma unroll
	for (int kk = 0; kk < AP_BN / 16; kk++) {
		uint32_t a[4];
		a[0] = ap_pack(s[2 * kk][0], s[2 * kk][1]);
		a[1] = ap_pack(s[2 * kk][2], s[2 * kk][3]);
		a[2] = ap_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
		a[3] = ap_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
		for (int np = 0; np < NO / 2; np++) {
			uint32_t b[4];
			ap_ldsm4t(b, vs_lane + (kk * 16 * LDS + np * 16) * 2);
			ap_mma(st.o[2 * np], a, b[0], b[1]);
			ap_mma(st.o[2 * np + 1], a, b[2], b[3]);
		}
	}
}

/* A row's sum over its quad (every lane of the quad gets the same bits:
 * (l0 + l1) + (l2 + l3), the adds commute). */
static __device__ __forceinline__ float ai_quad_sum(float l)
{
	l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
	return __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
}

/* Fold a split (m, l: its max and whole row sum) into the running total
 * (M, L); a and b: the weights of the total's and the split's o. False
 * for a split the row saw nothing of (nothing to fold). */
static __device__ __forceinline__ bool ai_fold(float &M, float &L, float m, float l, float &a,
					       float &b)
{
	if (m == -INFINITY)
		return false;
	const float mn = fmaxf(M, m);
	a = ap_exp2(__fsub_rn(M, mn)); /* M = -inf: 0 */
	b = ap_exp2(__fsub_rn(m, mn));
	L = fmaf(l, b, __fmul_rn(L, a));
	M = mn;
	return true;
}

static __device__ __forceinline__ float ai_fold_o(float O, float o, float a, float b)
{
	return fmaf(o, b, __fmul_rn(O, a));
}

/* 1 / L (0 for a row that saw no key) */
static __device__ __forceinline__ float ai_inv(float L)
{
	return L > 0.0f ? __fdiv_rn(1.0f, L) : 0.0f;
}

/* The thread's rows' split folded into their totals (M, L, O), and the
 * split state reset. Every lane of the warp calls it (shuffles). */
template <int HD>
static __device__ __forceinline__ void ai_close(ai_state<HD> &st, float (&M)[2], float (&L)[2],
						float (&O)[HD / 8][4])
{
#pragma unroll
	for (int e = 0; e < 2; e++) {
		const float ls = ai_quad_sum(st.l[e]);
		float a, b;
		if (ai_fold(M[e], L[e], st.m[e], ls, a, b)) {
#pragma unroll
			for (int n = 0; n < HD / 8; n++) {
				O[n][2 * e] = ai_fold_o(O[n][2 * e], st.o[n][2 * e], a, b);
				O[n][2 * e + 1] = ai_fold_o(O[n][2 * e + 1], st.o[n][2 * e + 1], a, b);
			}
		}
	}
	ai_reset(st);
}

/* This lane's ldmatrix row addresses in a K tile (non-transposed:
 * matrices (keys 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)
 * of a 16-key, 16-dim block) and a V tile (transposed: (keys 0-7, dims
 * 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)); byte addresses. */
template <int HD> static __device__ __forceinline__ uint32_t ai_ks_lane(const bf16 *ks, int lane)
{
	return ap_smem(ks) + (((lane & 7) + ((lane >> 4) << 3)) * (HD + AP_PAD) + ((lane >> 3) & 1) * 8) * 2;
}

template <int HD> static __device__ __forceinline__ uint32_t ai_vs_lane(const bf16 *vs, int lane)
{
	return ap_smem(vs) + (((lane & 7) + ((lane >> 3) & 1) * 8) * (HD + AP_PAD) + (lane >> 4) * 8) * 2;
}

/* A warp's 16 query rows (row r at buf + (16 w + r) LDS) as A fragments. */
template <int HD>
static __device__ __forceinline__ void ai_qfrag(uint32_t (&qf)[HD / 16][4], const bf16 *buf, int warp,
						int lane)
{
#pragma unroll
	for (int kk = 0; kk < HD / 16; kk++)
		ap_ldsm4(qf[kk], ap_smem(buf + (warp * 16 + (lane & 15)) * (HD + AP_PAD) + kk * 16 +
					 (lane >> 4) * 8));
}

/* --- prefill form --------------------------------------------------- */

struct ai_shared {
	long long offs[2][AP_BN]; /* element offset of each key row of a tile; -1: none */
	int cur, kmin, kmax;      /* the pass: sequence, key range its rows see */
	int maxlo, minp, full;    /* largest lo, smallest p; all valid rows in the pass */
};

template <int HD>
static __device__ __forceinline__ void
ai_prefill(bf16 *smem, ai_shared &sh, bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
	   const int *seq_of, const int *pos, const int *block_tables, long long max_blocks, int bs,
	   long long T, long long H, long long Hkv, long long window, float scale)
{
	constexpr int LDS = HD + AP_PAD, CH = HD / 8, NO = HD / 8;
	bf16 *ks = smem, *vs = smem + AP_BN * LDS;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tig = lane & 3;
	const long long t0 = (long long)(gridDim.x - 1 - blockIdx.x) * AI_BM;
	const long long h = blockIdx.y;
	const long long kvh = h / (H / Hkv), ld = Hkv * HD, kvoff = kvh * HD;
	const float sl2 = __fmul_rn(scale, AP_LOG2E);
	const uint32_t ks_lane = ai_ks_lane<HD>(ks, lane), vs_lane = ai_vs_lane<HD>(vs, lane);

	/* Q tile -> vs (rows past T zeroed), then A fragments */
#pragma unroll
	for (int i = 0; i < AI_BM * CH / AI_THREADS; i++) {
		const int c = tid + i * AI_THREADS;
		const int r = c / CH, ch = c % CH;
		const bool ok = t0 + r < T;
		const bf16 *src = ok ? q + ((t0 + r) * H + h) * HD + ch * 8 : q;
		atlas_cp16(ap_smem(vs + r * LDS + ch * 8), src, ok ? 16 : 0);
	}
	atlas_cp_commit();

	/* this thread's two rows: g and g + 8 of the warp's 16 */
	int rseq[2], rp[2], rlo[2];
#pragma unroll
	for (int e = 0; e < 2; e++) {
		const long long t = t0 + warp * 16 + g + e * 8;
		rseq[e] = -1; /* no row: in no pass */
		rp[e] = -1;
		rlo[e] = 0;
		if (t < T) {
			rseq[e] = seq_of[t];
			rp[e] = pos[t];
			rlo[e] = window > 0 && rp[e] - window + 1 > 0 ? (int)(rp[e] - window + 1) : 0;
		}
	}
	atlas_cp_wait<0>();
	__syncthreads();
	uint32_t qf[HD / 16][4];
	ai_qfrag<HD>(qf, vs, warp, lane);

	ai_state<HD> st;
	ai_reset(st);
	float O[NO][4];
#pragma unroll
	for (int n = 0; n < NO; n++)
		O[n][0] = O[n][1] = O[n][2] = O[n][3] = 0.0f;
	float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};

	int prev = -1; /* sequence of the previous pass */
	for (;;) {
		__syncthreads(); /* vs (Q) consumed; the previous pass's state read */
		if (warp == 0) {
			/* rows lane and lane + 32 of the tile */
			int s2[2], p2[2], lo2[2];
			bool v2[2];
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const long long t = t0 + lane + e * 32;
				v2[e] = t < T;
				s2[e] = v2[e] ? seq_of[t] : -1;
				p2[e] = v2[e] ? pos[t] : 0;
				lo2[e] = window > 0 && p2[e] - window + 1 > 0 ? (int)(p2[e] - window + 1) : 0;
			}
			int cur = INT_MAX;
#pragma unroll
			for (int e = 0; e < 2; e++)
				if (v2[e] && s2[e] > prev && s2[e] < cur)
					cur = s2[e];
			for (int x = 16; x > 0; x >>= 1)
				cur = min(cur, __shfl_xor_sync(0xffffffffu, cur, x));
			int kmin = INT_MAX, kmax = -1, maxlo = -1, minp = INT_MAX, nv = 0, nc = 0;
#pragma unroll
			for (int e = 0; e < 2; e++) {
				nv += v2[e];
				if (v2[e] && s2[e] == cur) {
					nc++;
					kmin = min(kmin, lo2[e]);
					kmax = max(kmax, p2[e]);
					maxlo = max(maxlo, lo2[e]);
					minp = min(minp, p2[e]);
				}
			}
			for (int x = 16; x > 0; x >>= 1) {
				kmin = min(kmin, __shfl_xor_sync(0xffffffffu, kmin, x));
				kmax = max(kmax, __shfl_xor_sync(0xffffffffu, kmax, x));
				maxlo = max(maxlo, __shfl_xor_sync(0xffffffffu, maxlo, x));
				minp = min(minp, __shfl_xor_sync(0xffffffffu, minp, x));
				nv += __shfl_xor_sync(0xffffffffu, nv, x);
				nc += __shfl_xor_sync(0xffffffffu, nc, x);
			}
			if (lane == 0) {
				sh.cur = cur;
				sh.kmin = kmin;
				sh.kmax = kmax;
				sh.maxlo = maxlo;
				sh.minp = minp;
				sh.full = nc == nv;
			}
		}
		__syncthreads();
		const int cur = sh.cur;
		if (cur == INT_MAX)
			break; /* every sequence of the tile is done (uniform) */
		const int kmin = sh.kmin, kmax = sh.kmax, maxlo = sh.maxlo, minp = sh.minp;
		const bool full = sh.full;
		prev = cur;
		const int *table = block_tables + (long long)cur * max_blocks;
		/* the keys row e sees in this pass (none for rows of other
		 * sequences) */
		const bool in0 = rseq[0] == cur, in1 = rseq[1] == cur;
		const int vlo[2] = {rlo[0], rlo[1]};
		const int vhi[2] = {in0 ? rp[0] : -1, in1 ? rp[1] : -1};
		/* tiles from the split that holds kmin: aligned to key 0 */
		const int kst = kmin / AI_SPLIT * AI_SPLIT;

		ap_offsets(sh.offs[0], table, kst, kmin, kmax, bs, ld, kvoff, tid, AI_THREADS);
		__syncthreads();
		ap_load_tile<HD, AI_THREADS>(ks, kc, sh.offs[0], tid);
		atlas_cp_commit();

		int it = 0;
		for (int j0 = kst; j0 <= kmax; j0 += AP_BN, it++) {
			if (j0 > kst && j0 % AI_SPLIT == 0)
				ai_close<HD>(st, M, L, O); /* a split boundary */
			const bool more = kmax - j0 >= AP_BN; /* another tile follows */
			const int jl = j0 + AP_BN - 1;      /* last key of the tile */
			ap_load_tile<HD, AI_THREADS>(vs, vc, sh.offs[it & 1], tid);
			atlas_cp_commit();
			if (more)
				ap_offsets(sh.offs[(it + 1) & 1], table, j0 + AP_BN, kmin, kmax, bs, ld,
					   kvoff, tid, AI_THREADS);
			/* does any row of the warp see a key of this tile? */
			const bool see = (in0 && rlo[0] <= jl && rp[0] >= j0) ||
					 (in1 && rlo[1] <= jl && rp[1] >= j0);
			const bool active = __any_sync(0xffffffffu, see);
			const bool masked = !(full && j0 >= maxlo && jl <= minp);
			atlas_cp_wait<1>(); /* K(it) landed */
			__syncthreads();

			float s[AP_BN / 8][4];
			if (active)
				ai_scores<HD>(st, s, qf, ks_lane, j0, masked, vlo, vhi, sl2, tig);
			atlas_cp_wait<0>(); /* V(it) landed */
			__syncthreads();        /* and every warp is done with ks */
			if (more) {
				ap_load_tile<HD, AI_THREADS>(ks, kc, sh.offs[(it + 1) & 1], tid);
				atlas_cp_commit();
			}
			if (active)
				ai_pv<HD>(st, s, vs_lane);
			__syncthreads(); /* every warp is done with vs */
		}
		ai_close<HD>(st, M, L, O);
	}

	/* out = O / L; rows past T are not written */
#pragma unroll
	for (int e = 0; e < 2; e++) {
		const float inv = ai_inv(L[e]);
		const long long t = t0 + warp * 16 + g + e * 8;
		if (t < T) {
			bf16 *orow = out + (t * H + h) * HD + tig * 2;
#pragma unroll
			for (int n = 0; n < NO; n++)
				*(__nv_bfloat162 *)(orow + n * 8) = __floats2bfloat162_rn(
				    __fmul_rn(O[n][2 * e], inv), __fmul_rn(O[n][2 * e + 1], inv));
		}
	}
}

extern "C" __global__ void __launch_bounds__(AI_THREADS)
atlas_attention_inv_prefill(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
			    const int *seq_of, const int *pos, const int *block_tables,
			    long long max_blocks, long long block_size, long long T, long long H,
			    long long Hkv, long long hd, long long window, float scale)
{
	ATLAS_PDL_ENTRY();
	__shared__ __align__(128) bf16 smem[2 * AP_BN * (AI_MAXHD + AP_PAD)];
	__shared__ ai_shared sh;
	if (blockDim.x != AI_THREADS || block_size < 1 || block_size > INT_MAX || Hkv < 1 ||
	    H % Hkv || !atlas_aligned(q, 16) || !atlas_aligned(kc, 16) || !atlas_aligned(vc, 16) ||
	    !atlas_aligned(out, 16))
		__trap(); /* the host never launches these */
	if (hd == 128)
		ai_prefill<128>(smem, sh, out, q, kc, vc, seq_of, pos, block_tables, max_blocks,
				(int)block_size, T, H, Hkv, window, scale);
	else if (hd == 64)
		ai_prefill<64>(smem, sh, out, q, kc, vc, seq_of, pos, block_tables, max_blocks,
			       (int)block_size, T, H, Hkv, window, scale);
	else
		__trap();
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
	constexpr int LDS = HD + AP_PAD, CH = HD / 8, NO = HD / 8;
	bf16 *ks = smem, *vs = smem + AP_BN * LDS;
	const int lane = threadIdx.x, g = lane >> 2, tig = lane & 3;
	const long long t = blockIdx.x / Hkv, kvh = blockIdx.x % Hkv;
	const int G = (int)(H / Hkv);
	const long long p = pos[t];
	long long lo, sf;
	const long long ns = ai_nsplit(p, window, &lo, &sf);
	if ((long long)blockIdx.y >= ns)
		return;
	const long long ld = Hkv * HD, kvoff = kvh * HD;
	const float sl2 = __fmul_rn(scale, AP_LOG2E);
	const uint32_t ks_lane = ai_ks_lane<HD>(ks, lane), vs_lane = ai_vs_lane<HD>(vs, lane);

	/* the kv head's query rows -> qs (zeros past G), in flight with the
	 * first tile's copies; their A fragments once they landed */
#pragma unroll
	for (int i = 0; i < 16 * CH / 32; i++) {
		const int c = lane + i * 32;
		const int r = c / CH, ch = c % CH;
		const bf16 *src = r < G ? q + (t * H + kvh * G + r) * HD + ch * 8 : q;
		atlas_cp16(ap_smem(qs + r * LDS + ch * 8), src, r < G ? 16 : 0);
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
		for (int u = 0; u < AI_SPLIT / AP_BN; u++)
			ap_offsets(offs + u * AP_BN, table, (int)(k0 + u * AP_BN), (int)lo, (int)p, bs, ld,
				   kvoff, lane, 32);
		__syncwarp();
		for (int i = AP_BN + lane; i < AI_SPLIT; i += 32)
			if (offs[i] >= 0) {
				atlas_prefetch_l2(kc + offs[i], HD * 2);
				atlas_prefetch_l2(vc + offs[i], HD * 2);
			}
		ai_state<HD> st;
		ai_reset(st);
		for (int u = 0; u < AI_SPLIT / AP_BN; u++) {
			const long long j0 = k0 + u * AP_BN, jl = j0 + AP_BN - 1;
			if (j0 > p || jl < lo)
				continue; /* the row sees nothing of this tile: no change */
			ap_load_tile<HD, 32>(ks, kc, offs + u * AP_BN, lane);
			atlas_cp_commit();
			ap_load_tile<HD, 32>(vs, vc, offs + u * AP_BN, lane);
			atlas_cp_commit();
			atlas_cp_wait<1>(); /* the queries and K landed */
			__syncwarp();
			if (!have_q) {
				ai_qfrag<HD>(qf, qs, 0, lane);
				have_q = true;
			}
			float sc[AP_BN / 8][4];
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
	__shared__ __align__(128) bf16 smem[2 * AP_BN * (AI_MAXHD + AP_PAD)];
	__shared__ __align__(16) bf16 qs[16 * (AI_MAXHD + AP_PAD)];
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
