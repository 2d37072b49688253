/* attention_inv.cuh - the machinery of the batch-invariant tensor-core
 * attention (attention_inv.cu): its prefill body (ai_prefill<HD>:
 * the flash kernel's layout with keys split in absolute positions), the
 * per-tile arithmetic its split form shares with it (ai_scores, ai_pv,
 * ai_close), and tile copies through the block table. The ldmatrix, mma,
 * exp2 and BF16-packing leaves are common.cuh's, as the flash kernel's
 * are; its tile and pass code (ap_ names in attention_prefill.cu) stays
 * its own, the code verified on a GPU, until the shared body (one for
 * both, as commit 90916e2 has it) has run there: sharing the body
 * changed the flash kernel's PTX. (The kernels are compiled as one
 * translation unit per target: scripts/build-kernels.sh.) */
#ifndef ATLAS_ATTENTION_INV_CUH
#define ATLAS_ATTENTION_INV_CUH

#include "common.cuh"

#include <limits.h>

#define AI_BN 64 /* keys a tile */
#define AI_PAD 8 /* bf16 elements of padding a shared row (16 bytes: ldmatrix's
		  * 8 row addresses fall in distinct banks) */

/* log2(e): softmax in base 2 */
#define AI_LOG2E 1.4426950408889634f

/* Copy one AI_BN-row tile (row i from base + offs[i], or zeros where
 * offs[i] < 0) into buf [AI_BN][HD + AI_PAD], 16 bytes a cp.async, by
 * threads 0 .. NT-1. */
template <int HD, int NT>
static __device__ __forceinline__ void ai_load_tile(bf16 *buf, const bf16 *base,
						    const long long *offs, int tid)
{
	constexpr int CH = HD / 8; /* 16-byte chunks a row */
	constexpr int LDS = HD + AI_PAD;
#pragma unroll
	for (int i = 0; i < AI_BN * CH / NT; i++) {
		const int c = tid + i * NT;
		const int r = c / CH, ch = c % CH;
		const long long o = offs[r];
		const bf16 *src = o >= 0 ? base + o + ch * 8 : base;
		atlas_cp16(atlas_smem_addr(buf + r * LDS + ch * 8), src, o >= 0 ? 16 : 0);
	}
}

/* Element offsets of the keys j0 .. j0+AI_BN-1 of sequence row `table`
 * (keys outside [kmin, kmax]: -1), written by threads 0 .. nt-1. */
static __device__ __forceinline__ void ai_offsets(long long *offs, const int *table, int j0,
						  int kmin, int kmax, int bs, long long ld,
						  long long kvoff, int tid, int nt)
{
	for (int i = tid; i < AI_BN; i += nt) {
		const int key = j0 + i;
		long long o = -1;
		if (key >= kmin && key <= kmax)
			o = ((long long)table[key / bs] * bs + key % bs) * ld + kvoff;
		offs[i] = o;
	}
}

/* The 64 query rows of head h of tokens t0.. into buf [64][HD + AI_PAD]
 * (rows past T zeroed), by threads 0 .. NT-1, as one cp.async group. */
template <int HD, int NT>
static __device__ __forceinline__ void ai_stage_q(bf16 *buf, const bf16 *q, long long t0, long long T,
						  long long H, long long h, int tid)
{
	constexpr int CH = HD / 8, LDS = HD + AI_PAD;
#pragma unroll
	for (int i = 0; i < 64 * CH / NT; i++) {
		const int c = tid + i * NT;
		const int r = c / CH, ch = c % CH;
		const bool ok = t0 + r < T;
		const bf16 *src = ok ? q + ((t0 + r) * H + h) * HD + ch * 8 : q;
		atlas_cp16(atlas_smem_addr(buf + r * LDS + ch * 8), src, ok ? 16 : 0);
	}
	atlas_cp_commit();
}

/* Sequence, position and first visible key of tokens t and t + 8 (rows
 * past T: sequence -1, in no pass). */
static __device__ __forceinline__ void ai_rows(int (&rseq)[2], int (&rp)[2], int (&rlo)[2],
					       const int *seq_of, const int *pos, long long t,
					       long long T, long long window)
{
#pragma unroll
	for (int e = 0; e < 2; e++, t += 8) {
		rseq[e] = -1;
		rp[e] = -1;
		rlo[e] = 0;
		if (t < T) {
			rseq[e] = seq_of[t];
			rp[e] = pos[t];
			rlo[e] = window > 0 && rp[e] - window + 1 > 0 ? (int)(rp[e] - window + 1) : 0;
		}
	}
}

/* Shared state of the block (besides the K/V buffers). */
struct ai_shared {
	long long offs[2][AI_BN]; /* element offset of each key row of a tile; -1: none */
	int cur, kmin, kmax;      /* the pass: sequence, key range its rows see */
	int maxlo, minp, full;    /* largest lo, smallest p; all valid rows in the pass */
};

/* Warp 0 of a prefill block: the next pass over the query tile of 64
 * tokens from t0 (the smallest sequence above prev present in it) into
 * sh: that sequence (INT_MAX when none is left), the key range its rows
 * see, their largest lo and smallest p, and whether every valid row of
 * the tile belongs to it. */
static __device__ __forceinline__ void ai_next_pass(ai_shared &sh, const int *seq_of, const int *pos,
						    long long t0, long long T, long long window,
						    int prev, int lane)
{
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

#define AI_SPLIT 128 /* keys a split: AI_SPLIT / AI_BN tiles, aligned to key 0 */
#define AI_BM 64      /* prefill: query tokens a block, 16 a warp */
#define AI_THREADS 128 /* prefill: threads a block */
#define AI_MAXHD 128   /* largest head size */

static_assert(AI_SPLIT % AI_BN == 0, "a split is whole tiles");

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
static __device__ __forceinline__ void ai_scores(ai_state<HD> &st, float (&s)[AI_BN / 8][4],
						 const uint32_t (&qf)[HD / 16][4], uint32_t ks_lane,
						 int j0, bool masked, const int (&lo)[2],
						 const int (&hi)[2], float sl2, int tig)
{
	constexpr int KS = HD / 16, NS = AI_BN / 8, NO = HD / 8, LDS = HD + AI_PAD;
#pragma unroll
	for (int n = 0; n < NS; n++)
		s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < KS; kk++) {
#pragma unroll
		for (int np = 0; np < NS / 2; np++) {
			uint32_t b[4];
			atlas_ldsm4(b, ks_lane + (np * 16 * LDS + kk * 16) * 2);
			atlas_mma_bf16(s[2 * np], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
			atlas_mma_bf16(s[2 * np + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
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
		const float corr = atlas_exp2(__fsub_rn(st.m[e], mu));
		st.m[e] = mn;
		float sum = 0.0f;
#pragma unroll
		for (int n = 0; n < NS; n++) {
			s[n][2 * e] = atlas_exp2(__fsub_rn(s[n][2 * e], mu));
			s[n][2 * e + 1] = atlas_exp2(__fsub_rn(s[n][2 * e + 1], mu));
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
static __device__ __forceinline__ void ai_pv(ai_state<HD> &st, const float (&s)[AI_BN / 8][4],
					     uint32_t vs_lane)
{
	constexpr int NO = HD / 8, LDS = HD + AI_PAD;
#pragma unroll
	for (int kk = 0; kk < AI_BN / 16; kk++) {
		uint32_t a[4];
		a[0] = atlas_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
		a[1] = atlas_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
		a[2] = atlas_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
		a[3] = atlas_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
		for (int np = 0; np < NO / 2; np++) {
			uint32_t b[4];
			atlas_ldsm4t(b, vs_lane + (kk * 16 * LDS + np * 16) * 2);
			atlas_mma_bf16(st.o[2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
			atlas_mma_bf16(st.o[2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
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
	a = atlas_exp2(__fsub_rn(M, mn)); /* M = -inf: 0 */
	b = atlas_exp2(__fsub_rn(m, mn));
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
	return atlas_smem_addr(ks) + (((lane & 7) + ((lane >> 4) << 3)) * (HD + AI_PAD) + ((lane >> 3) & 1) * 8) * 2;
}

template <int HD> static __device__ __forceinline__ uint32_t ai_vs_lane(const bf16 *vs, int lane)
{
	return atlas_smem_addr(vs) + (((lane & 7) + ((lane >> 3) & 1) * 8) * (HD + AI_PAD) + (lane >> 4) * 8) * 2;
}

/* A warp's 16 query rows (row r at buf + (16 w + r) LDS) as A fragments. */
template <int HD>
static __device__ __forceinline__ void ai_qfrag(uint32_t (&qf)[HD / 16][4], const bf16 *buf, int warp,
						int lane)
{
#pragma unroll
	for (int kk = 0; kk < HD / 16; kk++)
		atlas_ldsm4(qf[kk], atlas_smem_addr(buf + (warp * 16 + (lane & 15)) * (HD + AI_PAD) + kk * 16 +
					 (lane >> 4) * 8));
}

/* --- prefill form --------------------------------------------------- */

template <int HD>
static __device__ __forceinline__ void
ai_prefill(bf16 *smem, ai_shared &sh, bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
	   const int *seq_of, const int *pos, const int *block_tables, long long max_blocks, int bs,
	   long long T, long long H, long long Hkv, long long window, float scale)
{
	constexpr int LDS = HD + AI_PAD, NO = HD / 8;
	bf16 *ks = smem, *vs = smem + AI_BN * LDS;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tig = lane & 3;
	const long long t0 = (long long)(gridDim.x - 1 - blockIdx.x) * AI_BM;
	const long long h = blockIdx.y;
	const long long kvh = h / (H / Hkv), ld = Hkv * HD, kvoff = kvh * HD;
	const float sl2 = __fmul_rn(scale, AI_LOG2E);
	const uint32_t ks_lane = ai_ks_lane<HD>(ks, lane), vs_lane = ai_vs_lane<HD>(vs, lane);

	/* Q tile -> vs (rows past T zeroed), then A fragments; this thread's
	 * two rows: g and g + 8 of the warp's 16 */
	ai_stage_q<HD, AI_THREADS>(vs, q, t0, T, H, h, tid);
	int rseq[2], rp[2], rlo[2];
	ai_rows(rseq, rp, rlo, seq_of, pos, t0 + warp * 16 + g, T, window);
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
		if (warp == 0)
			ai_next_pass(sh, seq_of, pos, t0, T, window, prev, lane);
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
		/* tiles from the split that holds kmin, aligned to key 0 */
		const int kst = kmin / AI_SPLIT * AI_SPLIT;

		ai_offsets(sh.offs[0], table, kst, kmin, kmax, bs, ld, kvoff, tid, AI_THREADS);
		__syncthreads();
		ai_load_tile<HD, AI_THREADS>(ks, kc, sh.offs[0], tid);
		atlas_cp_commit();

		int it = 0;
		for (int j0 = kst; j0 <= kmax; j0 += AI_BN, it++) {
			if (j0 > kst && j0 % AI_SPLIT == 0)
				ai_close<HD>(st, M, L, O); /* a split boundary */
			const bool more = kmax - j0 >= AI_BN; /* another tile follows */
			const int jl = j0 + AI_BN - 1;      /* last key of the tile */
			ai_load_tile<HD, AI_THREADS>(vs, vc, sh.offs[it & 1], tid);
			atlas_cp_commit();
			if (more)
				ai_offsets(sh.offs[(it + 1) & 1], table, j0 + AI_BN, kmin, kmax, bs, ld,
					   kvoff, tid, AI_THREADS);
			/* does any row of the warp see a key of this tile? */
			const bool see = (in0 && rlo[0] <= jl && rp[0] >= j0) ||
					 (in1 && rlo[1] <= jl && rp[1] >= j0);
			const bool active = __any_sync(0xffffffffu, see);
			const bool masked = !(full && j0 >= maxlo && jl <= minp);
			atlas_cp_wait<1>(); /* K(it) landed */
			__syncthreads();

			float s[AI_BN / 8][4];
			if (active)
				ai_scores<HD>(st, s, qf, ks_lane, j0, masked, vlo, vhi, sl2, tig);
			atlas_cp_wait<0>(); /* V(it) landed */
			__syncthreads();        /* and every warp is done with ks */
			if (more) {
				ai_load_tile<HD, AI_THREADS>(ks, kc, sh.offs[(it + 1) & 1], tid);
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
				    __fmul_rn(O[n][2 * e], inv),
				    __fmul_rn(O[n][2 * e + 1], inv));
		}
	}
}

/* The body of atlas_attention_inv_prefill, after its PDL wait. */
static __device__ __forceinline__ void
ai_prefill_entry(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, const int *seq_of,
		 const int *pos, const int *block_tables, long long max_blocks, long long block_size,
		 long long T, long long H, long long Hkv, long long hd, long long window, float scale)
{
	__shared__ __align__(128) bf16 smem[2 * AI_BN * (AI_MAXHD + AI_PAD)];
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

#endif
