/* attention_prefill.cu - causal grouped-query attention for prefill (many
 * query tokens per sequence) on tensor cores, FlashAttention-2 style,
 * reading K and V from the paged cache. Same contract as atlas_attention
 * (kernels/ABI.md): token t of sequence seq_of[t] at position p sees the
 * keys max(0, p-window+1)..p of its sequence, key j at cache row
 * block_tables[seq*max_blocks + j/block_size]*block_size + j%block_size,
 * query head h reads kv head h / (H / Hkv).
 *
 * Launch: grid (ceil(T/64), H), block 128 (exactly), hd 64 or 128, q,
 * kc, vc and out 16-byte aligned (the host, cuda_attn.c, checks all of
 * it; anything else traps). Block (x, h) computes query head h of the 64
 * tokens of query tile ceil(T/64)-1-x (the longest rows start first);
 * warp w owns rows 16w..16w+15 of the tile.
 *
 * Per block:
 *  - Q: the tile's 64 rows of head h are copied to shared memory
 *    (cp.async, rows past T zero-filled) and each warp loads its 16 rows
 *    as mma A fragments (ldmatrix.x4) that stay in registers.
 *  - Passes: the tile's rows may belong to several sequences (any seq_of
 *    and pos are allowed), so the block makes one pass per distinct
 *    sequence present, in increasing sequence order. Warp 0 finds the
 *    pass's sequence and the key range [kmin, kmax] that its rows see;
 *    rows of other sequences are masked out for the whole pass (their
 *    softmax state does not change: an all -inf row of a tile leaves
 *    m, l and O as they are, no NaN). The common case, one run of
 *    consecutive positions of one sequence, is a single pass.
 *  - Key tiles of 64 keys from kmin: the cache row of every key of the
 *    tile is resolved through the block table once (64 threads) into a
 *    double-buffered array of element offsets in shared memory, then K
 *    and V rows are copied as 16-byte cp.async chunks into one K and one
 *    V buffer (rows padded by 16 bytes, so ldmatrix's 8 row addresses hit
 *    distinct banks); keys past kmax are zero-filled. The FA2 overlap:
 *    V(j) is in flight while S = Q K(j)^T and the softmax run, K(j+1)
 *    while O += P V(j) runs.
 *  - S = Q K^T: mma.sync m16n8k16 BF16 -> FP32, K fragments by ldmatrix
 *    (K rows are the B operand's columns). Scores are scaled by
 *    scale * log2(e) and the softmax uses exp2.
 *  - Masking: a tile every row of the pass sees entirely (all valid rows
 *    in the pass's sequence, lo <= first key, last key <= p) skips it;
 *    otherwise each score is checked against its row's sequence, lo and
 *    p. A warp none of whose rows sees any key of the tile skips the
 *    tile's math (causal diagonal, windows, other sequences).
 *  - Online softmax in FP32 on the accumulator fragments: row max by quad
 *    shuffles, each thread keeps a partial row sum (reduced at the end);
 *    P is packed to BF16 A fragments straight from the S accumulators
 *    (the C layout of two n-tiles is the A layout of one k-step), and
 *    O += P V by mma.sync with V fragments from ldmatrix.trans.
 *  - Output: O / l per row, BF16.
 *
 * Shared memory (static): K and V buffers 2 * 64 * (hd + 8) * 2 bytes
 * (34,816 at hd 128; Q is staged in the V buffer before the first V
 * tile), 1 KiB of key offsets, a few words of pass state.
 *
 * Results: probabilities are rounded to BF16 before the P V product (as
 * FlashAttention does); the sum l is taken from the FP32 values. The
 * summation order differs from atlas_attention's, so outputs agree to
 * BF16 rounding, not bit for bit. Rows whose cache rows between a pass's
 * kmin and kmax hold non-finite values would see NaN through 0 * NaN:
 * the cache holds finite values for every key of a sequence up to its
 * last position (kv_store writes them before attention runs).
 */
#include "common.cuh"

#include <limits.h>

#define AP_BM 64     /* query rows per block: 16 per warp */
#define AP_BN 64     /* keys per tile */
#define AP_PAD 8     /* bf16 elements of padding per shared row (16 bytes) */
#define AP_MAXHD 128 /* largest head size */
#define AP_THREADS 128

/* log2(e): softmax in base 2 */
#define AP_LOG2E 1.4426950408889634f

/* Shared state of the block (besides the K/V buffers). */
struct ap_shared {
	long long offs[2][AP_BN]; /* element offset of each key row of a tile; -1: none */
	int cur, kmin, kmax;      /* the pass: sequence, key range its rows see */
	int maxlo, minp, full;    /* largest lo, smallest p; all valid rows in the pass */
};

/* Copy one 64-row tile (row i from base + offs[i], or zeros where offs[i]
 * < 0) into buf [AP_BN][HD + AP_PAD]. */
template <int HD>
static __device__ __forceinline__ void ap_load_tile(bf16 *buf, const bf16 *base,
						    const long long *offs, int tid)
{
	constexpr int CH = HD / 8; /* 16-byte chunks per row */
	constexpr int LDS = HD + AP_PAD;
#pragma unroll
	for (int i = 0; i < AP_BN * CH / AP_THREADS; i++) {
		const int c = tid + i * AP_THREADS;
		const int r = c / CH, ch = c % CH;
		const long long o = offs[r];
		const bf16 *src = o >= 0 ? base + o + ch * 8 : base;
		atlas_cp16(atlas_smem_addr(buf + r * LDS + ch * 8), src, o >= 0 ? 16 : 0);
	}
}

/* Element offsets of the keys j0 .. j0+AP_BN-1 of sequence row `table`
 * (keys past kmax: -1), written by threads 0 .. AP_BN-1. */
static __device__ __forceinline__ void ap_offsets(long long *offs, const int *table, int j0,
						  int kmax, int bs, long long ld, long long kvoff,
						  int tid)
{
	if (tid < AP_BN) {
		const int key = j0 + tid;
		long long o = -1;
		if (key <= kmax)
			o = ((long long)table[key / bs] * bs + key % bs) * ld + kvoff;
		offs[tid] = o;
	}
}

template <int HD>
static __device__ __forceinline__ void
ap_body(bf16 *smem, ap_shared &sh, bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
	const int *seq_of, const int *pos, const int *block_tables, long long max_blocks, int bs,
	long long T, long long H, long long Hkv, long long window, float scale)
{
	constexpr int LDS = HD + AP_PAD; /* shared row stride, elements */
	constexpr int CH = HD / 8;       /* 16-byte chunks per row */
	constexpr int KS = HD / 16;      /* k-steps of Q K^T */
	constexpr int NO = HD / 8;       /* 8-column n-tiles of O */
	constexpr int NS = AP_BN / 8;    /* 8-key n-tiles of S */
	bf16 *ks = smem, *vs = smem + AP_BN * LDS;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tig = lane & 3; /* mma groupID, thread in group */
	const long long t0 = (long long)(gridDim.x - 1 - blockIdx.x) * AP_BM;
	const long long h = blockIdx.y;
	const long long kvh = h / (H / Hkv), ld = Hkv * HD, kvoff = kvh * HD;
	const float sl2 = scale * AP_LOG2E;
	/* this lane's ldmatrix row address in the K tile (non-transposed:
	 * matrices (keys 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)
	 * of a 16-key, 16-dim block) and in the V tile (transposed: (keys 0-7,
	 * dims 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)); byte addresses */
	const uint32_t ks_lane =
	    atlas_smem_addr(ks) + (((lane & 7) + ((lane >> 4) << 3)) * LDS + ((lane >> 3) & 1) * 8) * 2;
	const uint32_t vs_lane =
	    atlas_smem_addr(vs) + (((lane & 7) + ((lane >> 3) & 1) * 8) * LDS + (lane >> 4) * 8) * 2;

	/* Q tile -> vs (rows past T zeroed), then A fragments */
#pragma unroll
	for (int i = 0; i < AP_BM * CH / AP_THREADS; i++) {
		const int c = tid + i * AP_THREADS;
		const int r = c / CH, ch = c % CH;
		const bool ok = t0 + r < T;
		const bf16 *src = ok ? q + ((t0 + r) * H + h) * HD + ch * 8 : q;
		atlas_cp16(atlas_smem_addr(vs + r * LDS + ch * 8), src, ok ? 16 : 0);
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
	uint32_t qf[KS][4];
#pragma unroll
	for (int kk = 0; kk < KS; kk++)
		atlas_ldsm4(qf[kk], atlas_smem_addr(vs + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8));

	float o[NO][4];
#pragma unroll
	for (int n = 0; n < NO; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	float m[2] = {-INFINITY, -INFINITY}; /* running max of scaled scores */
	float l[2] = {0.0f, 0.0f};           /* this thread's part of the row sums */

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
		/* does this thread's row e take part in this pass? */
		const bool in0 = rseq[0] == cur, in1 = rseq[1] == cur;

		ap_offsets(sh.offs[0], table, kmin, kmax, bs, ld, kvoff, tid);
		__syncthreads();
		ap_load_tile<HD>(ks, kc, sh.offs[0], tid);
		atlas_cp_commit();

		int it = 0;
		for (int j0 = kmin; j0 <= kmax; j0 += AP_BN, it++) {
			const bool more = kmax - j0 >= AP_BN; /* another tile follows */
			const int jl = j0 + AP_BN - 1;      /* last key of the tile */
			ap_load_tile<HD>(vs, vc, sh.offs[it & 1], tid);
			atlas_cp_commit();
			if (more)
				ap_offsets(sh.offs[(it + 1) & 1], table, j0 + AP_BN, kmax, bs, ld,
					   kvoff, tid);
			/* does any row of the warp see a key of this tile? */
			const bool see = (in0 && rlo[0] <= jl && rp[0] >= j0) ||
					 (in1 && rlo[1] <= jl && rp[1] >= j0);
			const bool active = __any_sync(0xffffffffu, see);
			const bool masked = !(full && j0 >= maxlo && jl <= minp);
			atlas_cp_wait<1>(); /* K(it) landed */
			__syncthreads();

			float s[NS][4];
			if (active) {
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
				/* scale, mask, online softmax; element (n, i): row g + 8 * (i >> 1),
				 * key j0 + 8n + 2 tig + (i & 1) */
#pragma unroll
				for (int n = 0; n < NS; n++)
#pragma unroll
					for (int i = 0; i < 4; i++) {
						float x = s[n][i] * sl2;
						if (masked) {
							const int e = i >> 1;
							const int key = j0 + n * 8 + tig * 2 + (i & 1);
							const bool vis = (e ? in1 : in0) && key >= rlo[e] &&
									 key <= rp[e];
							x = vis ? x : -INFINITY;
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
					const float mn = fmaxf(m[e], mx);
					/* a row with no visible key so far keeps m = -inf:
					 * subtract 0 instead, so every exp2 is of -inf (0) */
					const float mu = mn == -INFINITY ? 0.0f : mn;
					const float corr = atlas_exp2(m[e] - mu);
					m[e] = mn;
					float sum = 0.0f;
#pragma unroll
					for (int n = 0; n < NS; n++) {
						s[n][2 * e] = atlas_exp2(s[n][2 * e] - mu);
						s[n][2 * e + 1] = atlas_exp2(s[n][2 * e + 1] - mu);
						sum += s[n][2 * e] + s[n][2 * e + 1];
					}
					l[e] = l[e] * corr + sum;
#pragma unroll
					for (int n = 0; n < NO; n++) {
						o[n][2 * e] *= corr;
						o[n][2 * e + 1] *= corr;
					}
				}
			}
			atlas_cp_wait<0>(); /* V(it) landed */
			__syncthreads(); /* and every warp is done with ks */
			if (more) {
				ap_load_tile<HD>(ks, kc, sh.offs[(it + 1) & 1], tid);
				atlas_cp_commit();
			}
			if (active) {
#pragma unroll
				for (int kk = 0; kk < AP_BN / 16; kk++) {
					uint32_t a[4];
					a[0] = atlas_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
					a[1] = atlas_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
					a[2] = atlas_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
					a[3] = atlas_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
					for (int np = 0; np < NO / 2; np++) {
						uint32_t b[4];
						atlas_ldsm4t(b, vs_lane + (kk * 16 * LDS + np * 16) * 2);
						atlas_mma_bf16(o[2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
						atlas_mma_bf16(o[2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
					}
				}
			}
			__syncthreads(); /* every warp is done with vs */
		}
	}

	/* out = O / l; rows past T are not written */
#pragma unroll
	for (int e = 0; e < 2; e++) {
		float lt = l[e];
		lt += __shfl_xor_sync(0xffffffffu, lt, 1);
		lt += __shfl_xor_sync(0xffffffffu, lt, 2);
		const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
		const long long t = t0 + warp * 16 + g + e * 8;
		if (t < T) {
			bf16 *orow = out + (t * H + h) * HD + tig * 2;
#pragma unroll
			for (int n = 0; n < NO; n++)
				*(__nv_bfloat162 *)(orow + n * 8) =
				    __floats2bfloat162_rn(o[n][2 * e] * inv, o[n][2 * e + 1] * inv);
		}
	}
}

extern "C" __global__ void __launch_bounds__(AP_THREADS)
atlas_attention_prefill(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
			const int *seq_of, const int *pos, const int *block_tables,
			long long max_blocks, long long block_size, long long T, long long H,
			long long Hkv, long long hd, long long window, float scale)
{
	ATLAS_PDL_ENTRY();
	__shared__ __align__(128) bf16 smem[2 * AP_BN * (AP_MAXHD + AP_PAD)];
	__shared__ ap_shared sh;
	if (blockDim.x != AP_THREADS || block_size < 1 || block_size > INT_MAX || Hkv < 1 ||
	    H % Hkv || !atlas_aligned(q, 16) || !atlas_aligned(kc, 16) || !atlas_aligned(vc, 16) ||
	    !atlas_aligned(out, 16))
		__trap(); /* the host never launches these */
	if (hd == 128)
		ap_body<128>(smem, sh, out, q, kc, vc, seq_of, pos, block_tables, max_blocks,
			     (int)block_size, T, H, Hkv, window, scale);
	else if (hd == 64)
		ap_body<64>(smem, sh, out, q, kc, vc, seq_of, pos, block_tables, max_blocks,
			    (int)block_size, T, H, Hkv, window, scale);
	else
		__trap();
}
