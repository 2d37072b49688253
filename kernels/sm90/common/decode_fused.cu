/* decode_fused.cu - atlas_decode_fused: every layer of a one-token decode
 * step in one launch (a "megakernel" for batch 1).
 *
 * Why: a batch-1 step reads every weight byte once, so its floor is the
 * weight bytes over the HBM bandwidth. Run as ~7 kernels a layer, each
 * kernel boundary drains the memory pipeline (the last blocks' tail, the
 * next kernel's first round trips): on the H200 the GEMV launches of a
 * Qwen3-8B step alone ran at ~81% of the copy rate, and the small kernels
 * between them added ~0.75 ms. Here one resident block per SM streams its
 * share of every matrix of every layer, in order, through a ring of
 * shared-memory stages filled by bulk copies; the data dependencies
 * between the products (a grid-wide barrier between phases) stall only
 * the arithmetic, while the copy engine keeps filling the ring with the
 * next phase's weights (which never depend on the activations).
 *
 * Launch: grid = one block per SM (all resident: 1 block fits per SM and
 * the grid is no larger than the SM count), block ATLAS_FD_THREADS = 8
 * consumer warps + 1 producer warp, dynamic shared memory
 * nst * ATLAS_FD_CHUNK (the ring) + xs_bytes (x of the phase, bf16; the
 * attention scratch) + part_cap floats (row partial sums) + 2 * nst
 * mbarriers. struct atlas_fd_args (kernel_args.h).
 *
 * Work split: in each product block b owns output rows [N*b/G, N*(b+1)/G)
 * (q, k and v as one matrix of (H + 2 Hkv) hd rows; gate and up the same
 * rows of each). Its rows are contiguous in memory, so the producer lane
 * streams them as chunks of ATLAS_FD_CHUNK bytes, the segments of every
 * layer back to back (7 per layer: q, k, v pieces, o, gate, up, down).
 * Consumer warp w dots the w-th ATLAS_FD_SLICE columns of each chunk
 * with x (every K is a multiple of the slice, so a slice never straddles
 * rows) and stores the warp sum in part[row][slice]; at the end of a
 * phase each row's slices are added in slice order: deterministic, and
 * independent of timing.
 *
 * Per layer (h the residual stream, a bf16 vector in global memory):
 *   A  xn = rmsnorm(h) ln1 (every block, into shared memory); q, k, v
 *      rows (+ biases), rounded to bf16 as the matmul op rounds them
 *   -- grid barrier
 *   B  attention: item (kv head g, split s) for blocks < Hkv * S: the
 *      group's q heads normed and rotated (qk_rope_store's arithmetic),
 *      the block whose split holds the new key normalizes and rotates k
 *      and stores k and v in the cache, then online softmax over the
 *      split's keys; S > 1: partials, and the last split of a kv head to
 *      finish (a counter) merges them in split order
 *   -- grid barrier
 *   C  o rows; h[n] = bf16(h[n] + bf16(o[n])) for the block's own rows
 *   -- grid barrier
 *   D  xn = rmsnorm(h) ln2; gate and up rows, silu(g) u as matmul_swiglu
 *      rounds it
 *   -- grid barrier
 *   E  down rows; h[n] += them (the last layer writes them to o instead:
 *      the caller's final add_rmsnorm adds them, as the unfused step does)
 *   -- grid barrier (not after the last layer)
 * Activations written inside the launch are read with ld.global.cg or
 * cp.async.cg (L2, never a stale L1 line). The barrier: one counter, each
 * block adds 1 (red.release) and waits (ld.acquire) for the next multiple
 * of G; the last block to exit zeroes it. The weights stream evict-first
 * in L2, so everything else a phase reads stays there: the KV rows asked
 * in at the start of each layer, the activations, the counters.
 *
 * FP8 checkpoints (wfmt ATLAS_FD_F8B): the seven matrices are F8B blobs,
 * streamed as their FP8 bytes (half the BF16 stream; a chunk then holds 16
 * slices, two a consumer warp), dotted on the tensor cores against x as
 * scaled FP16 (fd_x_f16, fd_consume_f8), their scales read beside them
 * through L1. 4-bit checkpoints (ATLAS_FD_W4B): W4B blobs, a quarter of
 * the BF16 stream, dotted on the tensor cores (fd_consume_w4). (On CUDA
 * cores, FP8 to FP32 and an FMA a weight, twice the weights a byte that
 * BF16 has left 8 consumer warps short of the stream: the fused FP8 step
 * was no faster than op by op.)
 * Everything else is the same.
 *
 * MoE layers (BF16 launches; fd_moe): D becomes the router's rows (FP32
 * logits to global memory), then every block routes from the same
 * logits (moe_topk, moe.cu's) and its producer, which waited on an
 * mbarrier for that, streams the block's share of the chosen experts'
 * gate and up rows (features j Fe .. of slot j), and after a barrier its
 * rows of each chosen expert's down matrix, dotted with that expert's
 * SwiGLU row and combined in slot order. An expert width that is not a
 * multiple of FD_SLICE (768) takes slices of ATLAS_FD_SLICE_S columns.
 *
 * Programmatic dependent launch: the producer starts streaming at once
 * (weights never change); the consumers wait for the previous kernel.
 */
#include <cuda_fp8.h>

#include "common.cuh"
#include "moe_topk.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#define FD_CHUNK ATLAS_FD_CHUNK
#define FD_CHUNK_E (ATLAS_FD_CHUNK / 2) /* bf16 elements per chunk */
#define FD_SLICE ATLAS_FD_SLICE
#define FD_HD ATLAS_FD_HD
#define FD_TILE ATLAS_FD_TILE
#define FD_NSEG 7 /* weight segments per dense layer */
#define FD_PST ATLAS_FD_PSTRIDE /* floats per attention partial: hd, then m and l */
/* bytes into the attention scratch of the K tile ([TILE][HD] bf16, the V
 * tile right after it): past the group's queries and scores
 * (ATLAS_FD_ATT_SCRATCH) */
#define FD_KT_OFF (ATLAS_FD_MAXG * (FD_HD + FD_TILE) * 4)
/* attention partials a merge loads at once: as many as the 168 registers
 * a thread of a 9-warp block can have allow without spills (ptxas -v) */
#define FD_MB 12

static_assert(FD_CHUNK_E == 8 * FD_SLICE, "one slice per consumer warp per chunk");
static_assert(ATLAS_F8B_HEAD_BYTES == ATLAS_W4B_HEAD_BYTES, "fd_get: one blob head size");
static_assert(FD_HD == 128 && FD_TILE == 32, "attention lane mappings");
static_assert(2 * ATLAS_FD_MAXG == 16, "the score reduction: 16 (key, head) pairs a pass");

/* Consumer-only barrier (the producer warp never joins). */
static __device__ __forceinline__ void fd_bar(void)
{
	asm volatile("bar.sync 1, 256;" ::: "memory");
}

/* One weight segment of a block: rows rows of K columns from w (bytes:
 * BF16 or, in an F8B launch, FP8 values), whose partial sums go to rows
 * pbase.. of part; F8B: row n0 of the matrix first, its scales sc with
 * blocks of 2^sbo rows and 2^sbi columns. */
struct fd_seg {
	const char *w;
	int rows, K, pbase; /* (ints: seven of them stay live all layer long) */
	int n0;
	int xoff; /* x of the product: xs + xoff (an MoE down piece's expert) */
	const void *sc;
	const unsigned char *zp;
	int sbo, sbi;
};

/* Bytes of n weights (n even) in the launch's format. */
static __device__ __forceinline__ long long fd_bytes(const atlas_fd_args &a, long long n)
{
	return a.wfmt == ATLAS_FD_W4B ? n / 2 : a.wfmt == ATLAS_FD_F8B ? n : 2 * n;
}

/* Rows [*r0, *r1) of an n-row product owned by this block (32-bit
 * arithmetic: n <= 3 * 65536 and the grid <= 1024 keep n * b below 2^32). */
static __device__ __forceinline__ void fd_rows(long long n, long long *r0, long long *r1)
{
	*r0 = (unsigned)n * blockIdx.x / gridDim.x;
	*r1 = (unsigned)n * (blockIdx.x + 1) / gridDim.x;
}

/* Weight segments of layer L: q, k, v, o, gate, up, down; an MoE
 * layer's are q, k, v, o, the router, then for each chosen expert j <
 * topk its piece of the gate rows, then the up pieces, then the down
 * pieces (fd_get). */
static __device__ __forceinline__ int fd_nseg(const atlas_fd_args &a, const atlas_fd_layer &L)
{
	return L.ex ? 5 + 3 * a.topk : FD_NSEG;
}

/* Segment idx of an MoE layer from 4 on: the router's rows [E, D]; gate
 * and up pieces: the block's rows of the topk * Fe features (expert slot
 * j's features j Fe .. + Fe), gate rows at part rows 0.., up rows after
 * them, as a dense layer's; down piece j: the block's rows of expert j's
 * [D, Fe], dotted with x[j Fe ..] (xoff), at part rows j (r1 - r0) ..
 * ids: the layer's chosen experts (ascending). */
static __device__ void fd_get_moe(const atlas_fd_args &a, const atlas_fd_layer &L, int idx,
				  const int *ids, fd_seg &s)
{
	long long r0, r1;
	if (idx == 4) {
		fd_rows(a.E, &r0, &r1);
		s.w = (const char *)L.wr + 2 * r0 * (long long)a.D;
		s.rows = (int)(r1 - r0);
		s.K = a.D;
		s.n0 = (int)r0;
		return;
	}
	const int k = a.topk;
	int j = idx - 5;
	if (j < 2 * k) {
		const bool up = j >= k;
		j -= up ? k : 0;
		fd_rows((long long)k * a.Fe, &r0, &r1);
		const long long lo = (long long)j * a.Fe, hi = lo + a.Fe;
		const long long a0 = r0 > lo ? r0 : lo, a1 = r1 < hi ? r1 : hi;
		s.K = a.D;
		if (a1 > a0) {
			const char *w = (const char *)L.ex[(up ? a.E : 0) + ids[j]];
			s.w = w + 2 * (a0 - lo) * (long long)a.D;
			s.rows = (int)(a1 - a0);
			s.pbase = (int)(a0 - r0) + (up ? (int)(r1 - r0) : 0);
			s.n0 = (int)(a0 - lo);
		}
		return;
	}
	j -= 2 * k;
	fd_rows(a.D, &r0, &r1);
	s.w = (const char *)L.ex[2 * a.E + ids[j]] + 2 * r0 * (long long)a.Fe;
	s.rows = (int)(r1 - r0);
	s.K = a.Fe;
	s.pbase = j * (int)(r1 - r0);
	s.n0 = (int)r0;
	s.xoff = j * a.Fe;
}

/* Segment idx (0..fd_nseg - 1) of layer L for this block (ids: an MoE
 * layer's chosen experts, read from segment 5 on). */
template <bool MOE = false>
static __device__ fd_seg fd_get(const atlas_fd_args &a, const atlas_fd_layer &L, int idx,
				const int *ids = NULL)
{
	fd_seg s = {NULL, 0, 0, 0, 0, 0, NULL, NULL, 0, 0};
	long long r0, r1;
	/* the blob head (F8B and W4B: the same size) */
	const long long hb = a.wfmt == ATLAS_FD_BF16 ? 0 : ATLAS_F8B_HEAD_BYTES;
	if (a.wfmt != ATLAS_FD_BF16 && idx < FD_NSEG)
		s.sc = L.sc[idx], s.zp = L.zp[idx], s.sbo = L.sbo[idx], s.sbi = L.sbi[idx];
	if (MOE && L.ex && idx >= 4) {
		fd_get_moe(a, L, idx, ids, s);
		return s;
	}
	if (idx < 3) {
		const long long nq = (long long)a.H * FD_HD, nkv = (long long)a.Hkv * FD_HD;
		fd_rows(nq + 2 * nkv, &r0, &r1);
		const long long lo = idx == 0 ? 0 : idx == 1 ? nq : nq + nkv;
		const long long hi = idx == 0 ? nq : idx == 1 ? nq + nkv : nq + 2 * nkv;
		const void *w = idx == 0 ? L.wq : idx == 1 ? L.wk : L.wv;
		const long long a0 = r0 > lo ? r0 : lo, a1 = r1 < hi ? r1 : hi;
		s.K = a.D;
		if (a1 > a0) {
			s.w = (const char *)w + hb + fd_bytes(a, (a0 - lo) * a.D);
			s.rows = (int)(a1 - a0);
			s.pbase = (int)(a0 - r0);
			s.n0 = (int)(a0 - lo);
		}
	} else if (idx == 3) {
		fd_rows(a.D, &r0, &r1);
		s.w = (const char *)L.wo + hb + fd_bytes(a, r0 * ((long long)a.H * FD_HD));
		s.rows = (int)(r1 - r0);
		s.K = a.H * FD_HD;
		s.n0 = (int)r0;
	} else if (idx < 6) {
		fd_rows(a.F, &r0, &r1);
		s.w = (const char *)(idx == 4 ? L.wg : L.wu) + hb + fd_bytes(a, r0 * (long long)a.D);
		s.rows = (int)(r1 - r0);
		s.K = a.D;
		s.pbase = idx == 4 ? 0 : (int)(r1 - r0);
		s.n0 = (int)r0;
	} else {
		fd_rows(a.D, &r0, &r1);
		s.w = (const char *)L.wd + hb + fd_bytes(a, r0 * (long long)a.F);
		s.rows = (int)(r1 - r0);
		s.K = a.F;
		s.n0 = (int)r0;
	}
	return s;
}

/* A walk over this block's weight chunks in stream order: layer l,
 * segment idx, byte offset off in it; an MoE layer's expert pieces wait
 * for the consumers' routing (ids, and the mbarrier rt they arrive on
 * once an MoE layer; routed: the layer whose routing was waited for). */
struct fd_walk {
	int l, idx;
	long long off, bytes;
	const char *w;
	const int *ids;
	unsigned long long *rt;
	int routed;
	unsigned rph;
};

/* Move w to its next chunk (or to the first one, from l = 0, idx = -1);
 * false at the end of the stream. */
template <bool MOE>
static __device__ bool fd_next(const atlas_fd_args &a, fd_walk &w)
{
	if (w.idx >= 0 && (w.off += FD_CHUNK) < w.bytes)
		return true;
	for (;;) {
		if (++w.idx == (MOE ? fd_nseg(a, a.layers[w.l]) : FD_NSEG)) {
			w.idx = 0;
			if (++w.l == a.n_layers)
				return false;
		}
		const atlas_fd_layer &L = a.layers[w.l];
		if (MOE && L.ex && w.idx == 5 && w.routed != w.l) {
			/* the experts are known once the consumers have routed */
			atlas_mbar_wait(w.rt, w.rph);
			w.rph ^= 1;
			w.routed = w.l;
		}
		const fd_seg s = fd_get<MOE>(a, L, w.idx, w.ids);
		w.bytes = fd_bytes(a, (long long)s.rows * s.K);
		w.w = s.w;
		w.off = 0;
		if (w.bytes > 0)
			return true;
	}
}

/* Bytes of the chunk w is at. */
static __device__ __forceinline__ unsigned fd_chunk_bytes(const fd_walk &w)
{
	const long long r = w.bytes - w.off;
	return (unsigned)(r < FD_CHUNK ? r : FD_CHUNK);
}

/* The producer lane: every chunk of every segment of every layer, in the
 * consumers' order, each into the next ring stage once it is free. (Asking
 * the chunks past the ring into L2 ahead of their copy was slower on the
 * H200: 4.92 ms a step with 2 or 4 chunks ahead, 4.85 with 8, 6.3 with 16,
 * against 4.75 with none. Asking only while the ring is full, when HBM
 * would otherwise idle, was slower too, on an H100: FP8 3.97 ms a step
 * with none, 4.90 / 5.07 / 5.96 with 8 / 16 / 32 chunks; BF16 5.74
 * against 6.11 / 6.40 / 8.29.) */
template <bool MOE>
static __device__ void fd_produce(const atlas_fd_args &a, unsigned char *ring,
				  unsigned long long *full, unsigned long long *empty,
				  const int *ids, unsigned long long *rt)
{
	int st = 0;
	unsigned ph = 0;
	fd_walk w = {0, -1, 0, 0, NULL, ids, rt, -1, 0};
	/* the weights are read once a step: evict-first in L2, so that they
	 * do not push out the KV rows asked in ahead of phase B, the
	 * activations and the counters the barriers poll (the whole stream
	 * passes through the 50 MB L2 every ~12 us). H200, Qwen3-8B batch 1:
	 * 4.24 -> 4.17 ms a step; at a 2048-token context 5.02 -> 4.82. */
	const unsigned long long pol = atlas_policy_evict_first();
	for (long long cc = 0; fd_next<MOE>(a, w); cc++) {
		if (cc >= a.nst)
			atlas_mbar_wait(&empty[st], ph ^ 1);
		const unsigned n = fd_chunk_bytes(w);
		atlas_mbar_expect(&full[st], n);
		atlas_bulk_copy_hint(ring + (size_t)st * FD_CHUNK, w.w + w.off, n, &full[st], pol);
		if (++st == a.nst)
			st = 0, ph ^= 1;
	}
}

/* The consumers' place in the ring. */
struct fd_ring {
	unsigned char *ring;
	unsigned long long *full, *empty;
	int st;
	unsigned ph;
};

/* A lane's share of an SL-column slice's dot product (BF16 weights w
 * and x, 8 columns a lane a pass, SL / 256 passes), added to acc in
 * column order. */
template <int SL>
static __device__ __forceinline__ float fd_dot(const uint4 *w, const uint4 *x, int lane, float acc)
{
#pragma unroll
	for (int i = 0; i < SL / 256; i++) {
		float wf[8], xf[8];
		atlas_unpack8(w[i * 32 + lane], wf);
		atlas_unpack8(x[i * 32 + lane], xf);
#pragma unroll
		for (int e = 0; e < 8; e++)
			acc = fmaf(xf[e], wf[e], acc);
	}
	return acc;
}

/* Consume one segment: part[(pbase + row) * (K / SLICE) + slice] = the
 * dot product of that slice of the row with xs. Every consumer warp
 * waits for and releases every chunk (the empty barriers count 8). (A
 * software-pipelined version, the previous chunk's shuffles between this
 * chunk's loads and FMAs, four FMA chains, was slower on the H200: 5.12
 * against 4.75 ms a Qwen3-8B step.) */
static __device__ void fd_consume_bf16(const atlas_fd_args &a, fd_ring &r, const fd_seg &s,
				       const bf16 *xs, float *part)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int nsl = s.K / FD_SLICE;		    /* slices a row */
	const long long total = (long long)s.rows * nsl; /* slices of the segment */
	/* this warp's slice of the chunk: row, slice in it (kept by adding,
	 * not dividing: a 64-bit division per chunk cost as much as the dot
	 * product) */
	long long row = warp / nsl;
	int sl = warp % nsl;
	for (long long q0 = 0; q0 < total; q0 += 8) {
		atlas_mbar_wait(&r.full[r.st], r.ph);
		if (q0 + warp < total && a.mode != 3) {
			const uint4 *w = (const uint4 *)(r.ring + (size_t)r.st * FD_CHUNK) + warp * (FD_SLICE / 8);
			const uint4 *x = (const uint4 *)(xs + (long long)sl * FD_SLICE);
			float acc = fd_dot<FD_SLICE>(w, x, lane, 0.0f);
			acc = atlas_warp_sum(acc);
			if (lane == 0)
				part[(s.pbase + row) * nsl + sl] = acc;
		}
		__syncwarp();
		if (lane == 0)
			atlas_mbar_arrive(&r.empty[r.st]);
		if (++r.st == a.nst)
			r.st = 0, r.ph ^= 1;
		for (sl += 8; sl >= nsl; sl -= nsl)
			row++;
	}
}

/* fd_consume_bf16 for an MoE layer's products: SL-column slices (FD_SLICE,
 * or ATLAS_FD_SLICE_S where K is not a multiple of it), CS / 8 of them a
 * warp a chunk, and x at xs + s.xoff (a down piece's expert). */
template <int SL>
static __device__ void fd_consume_bf16_moe(const atlas_fd_args &a, fd_ring &r, const fd_seg &s,
				       const bf16 *xs, float *part)
{
	constexpr int CS = FD_CHUNK_E / SL; /* slices a chunk */
	constexpr int NJ = CS / 8;	   /* a warp's slices of a chunk: warp + 8j */
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int nsl = s.K / SL;			    /* slices a row */
	const long long total = (long long)s.rows * nsl; /* slices of the segment */
	/* this warp's first slice of the chunk: row, slice in it (kept by
	 * adding, not dividing: a 64-bit division per chunk cost as much as
	 * the dot product) */
	long long row = warp / nsl;
	int sl = warp % nsl;
	const bf16 *xb = xs + s.xoff;
	for (long long q0 = 0; q0 < total; q0 += CS) {
		atlas_mbar_wait(&r.full[r.st], r.ph);
		long long rj[NJ];
		int sj[NJ];
		float acc[NJ];
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			rj[j] = row, sj[j] = sl, acc[j] = 0.0f;
			if (q0 + warp + 8 * j < total && a.mode != 3) {
				const uint4 *w = (const uint4 *)(r.ring + (size_t)r.st * FD_CHUNK) +
						 (warp + 8 * j) * (SL / 8);
				const uint4 *x = (const uint4 *)(xb + (long long)sl * SL);
				acc[j] = fd_dot<SL>(w, x, lane, 0.0f);
			}
			for (sl += 8; sl >= nsl; sl -= nsl)
				row++;
		}
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			acc[j] = atlas_warp_sum(acc[j]);
			if (lane == 0 && q0 + warp + 8 * j < total && a.mode != 3)
				part[(s.pbase + rj[j]) * nsl + sj[j]] = acc[j];
		}
		__syncwarp();
		if (lane == 0)
			atlas_mbar_arrive(&r.empty[r.st]);
		if (++r.st == a.nst)
			r.st = 0, r.ph ^= 1;
	}
}

/* A consumer warp's place in a segment: its next chunk's first slice at
 * (row, sl) (slice q0 of the segment's total), and the steps (rows and
 * slices) from one of its slices to the one 8 later and from one chunk
 * to the next: once a segment, so that no division or loop is left per
 * chunk (the per-chunk bookkeeping, 64-bit and in loops, had been a
 * third of the 4-bit consumer's instructions: Nsight Compute, H100). */
struct fd_cur {
	int q0, total, nsl, row, sl;
	int r8, s8, cr, cs; /* steps of 8 slices and of a chunk */
};

static __device__ __forceinline__ fd_cur fd_cur_init(const fd_seg &s, int per_chunk)
{
	const int warp = threadIdx.x >> 5, nsl = s.K / FD_SLICE;
	return fd_cur{0,	       s.rows * nsl,	      nsl,	      warp / nsl, warp % nsl,
		      8 / nsl, 8 % nsl, per_chunk / nsl, per_chunk % nsl};
}

/* (row, sl) moved on by (dr, ds) slices' worth, ds < nsl */
static __device__ __forceinline__ void fd_step(int nsl, int &row, int &sl, int dr, int ds)
{
	row += dr, sl += ds;
	if (sl >= nsl)
		sl -= nsl, row++;
}

/* A chunk's slices (warp + 8j, j < NJ) for this warp: rows, slices, and
 * whether they exist (warp-uniform: mma.sync needs every lane); with
 * the per-slice values the consumer asks for a chunk ahead of their use
 * (F8B: the diagonal lane's block scale; W4B: the zero point and, on the
 * diagonal, the BF16 scale of this lane's subgroup). */
template <int NJ> struct fd_chunk {
	int rj[NJ], sj[NJ];
	bool ok[NJ];
	unsigned z[NJ], sc[NJ]; /* as loaded: F32 bits (F8B), BF16 bits (W4B) */
};

template <int NJ>
static __device__ __forceinline__ void fd_ask(const atlas_fd_args &a, const fd_seg &s,
					      const fd_cur &u, int ng, bool diag, fd_chunk<NJ> &m)
{
	const int warp = threadIdx.x >> 5, n = (threadIdx.x & 31) >> 2;
	int row = u.row, sl = u.sl;
#pragma unroll
	for (int j = 0; j < NJ; j++) {
		if (j)
			fd_step(u.nsl, row, sl, u.r8, u.s8);
		m.rj[j] = row, m.sj[j] = sl;
		m.ok[j] = u.q0 + warp + 8 * j < u.total && a.mode != 3;
		const unsigned col = (unsigned)(sl * FD_SLICE + n * 128);
		const unsigned cb = s.sbi >= 31 ? 0u : col >> s.sbi;
		if (a.wfmt == ATLAS_FD_F8B) {
			/* scales [N / 2^sbo][ng] floats */
			const unsigned gi = ((unsigned)(s.n0 + row) >> s.sbo) * (unsigned)ng + cb;
			m.z[j] = 0;
			m.sc[j] = m.ok[j] && diag ? __float_as_uint(__ldg((const float *)s.sc + gi)) : 0u;
		} else {
			/* zero points and BF16 scales [N][ng] */
			const unsigned gi = (unsigned)(s.n0 + row) * (unsigned)ng + cb;
			m.z[j] = m.ok[j] ? __ldg(s.zp + gi) : 0u;
			/* (raw: a shift here waited for the load at once, the
			 * 4-bit step's largest stall, Nsight Compute) */
			m.sc[j] = m.ok[j] && diag ? __ldg((const unsigned short *)s.sc + gi) : 0u;
		}
	}
}

/* The diagonal element C[n][n] of a product's rows 0..7 (c0, c1 of lane
 * 4n + n / 2) or of its rows 8..15 (c2, c3), by select (an indexed array
 * would live in local memory). */
static __device__ __forceinline__ float fd_diag(const float (&c)[4], int n, bool hi)
{
	return hi ? ((n & 1) ? c[3] : c[2]) : ((n & 1) ? c[1] : c[0]);
}

/* fd_consume for an F8B launch, on the tensor cores: a chunk holds 16
 * slices of 1024 FP8 columns, two a warp (warp and warp + 8), dotted
 * together so that their mma chains overlap. As in fd_consume_w4, a
 * slice is 8 subgroups of 128 columns, each within one scale block
 * (blocks of at least 128 columns, or the row: cuda_fused.c), and an
 * m16n8k16 product takes 16 columns of every subgroup: B's column n the
 * weights of subgroup n (E4M3 to FP16 is exact), A's rows n and n + 8
 * its x, so that a diagonal gathers subgroup n's dot product. x is FP16
 * here, scaled by 1 / xsc and its 16-byte units swizzled (fd_x_f16).
 * Lane (n = lane / 4, t = lane % 4) holds subgroup n's operands: at step
 * b the 16 weights at column 64 bb + 16 t, bb = (b + n) % 2 (one 16-byte
 * load; the rotation puts each 8 lanes' loads in distinct banks), and
 * their x as two 16-byte loads, each one A fragment as it stands: its
 * words 0 and 2 (columns 0, 1 and 4, 5 of the 8) are rows n's, paired
 * with those columns' weights in one product whose diagonal C[n][n] is
 * kept; words 1 and 3 (columns 2, 3, 6, 7) are rows n + 8's, paired with
 * theirs in a second product (its own accumulators) whose C[n + 8][n] is
 * kept. (x in rows n only, zeros in rows n + 8, cost four register moves
 * a product.) When 8 slices are whole rows (nsl divides 8: q, k, v, gate,
 * up of Qwen3-8B) a warp's two slices share their x loads. The
 * diagonal's lane scales the sum by the block's scale (asked for a chunk
 * ahead); the warp sum of the 8 is the slice's partial. Each block's
 * products are summed in FP32, then scaled: as atlas_gemv_f8 does, not
 * the BF16 sums of the dequantized matrix (the host uses the fused
 * kernel outside batch-invariant mode only). */
static __device__ void fd_consume_f8(const atlas_fd_args &a, fd_ring &r, const fd_seg &s,
				     const bf16 *xs, float *part, float xsc)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int n = lane >> 2, t = lane & 3;
	const int ng = s.sbi >= 31 ? 1 : (int)(((long long)s.K + (1ll << s.sbi) - 1) >> s.sbi);
	const bool diag = t == (n >> 1); /* this lane holds C[n][n] */
	const uint4 *xu = (const uint4 *)xs;
	fd_cur u = fd_cur_init(s, 16);
	const bool share = 8 % u.nsl == 0; /* a warp's slices at the same columns */
	fd_chunk<2> cur, nxt;
	fd_ask<2>(a, s, u, ng, diag, cur);
	for (; u.q0 < u.total; u.q0 += 16) {
		fd_step(u.nsl, u.row, u.sl, u.cr, u.cs);
		u.q0 += 16; /* (the next chunk's, asked for now) */
		fd_ask<2>(a, s, u, ng, diag, nxt);
		u.q0 -= 16;
		atlas_mbar_wait(&r.full[r.st], r.ph);
		if (cur.ok[0]) {
			float c[2][2][4] = {};
#pragma unroll
			for (int b = 0; b < 2; b++) {
				const int bb = (b + n) & 1;
				uint4 x0, x1;
#pragma unroll
				for (int j = 0; j < 2; j++) {
					/* an invalid second slice reads the first's operands (in
					 * the chunk), its sums never stored */
					const int jj = cur.ok[1] ? j : 0;
					const int sx = cur.ok[1] ? cur.sj[j] : cur.sj[0];
					const uint4 wv = *(const uint4 *)(r.ring + (size_t)r.st * FD_CHUNK +
									  (warp + 8 * jj) * FD_SLICE + n * 128 +
									  bb * 64 + t * 16);
					if (j == 0 || !share) {
						/* x units v and v + 1 (the 16 columns), swizzled */
						const unsigned v =
						    (unsigned)(sx * FD_SLICE + n * 128 + bb * 64 + t * 16) / 8;
						x0 = xu[v ^ (n & 1)], x1 = xu[(v + 1) ^ (n & 1)];
					}
					const unsigned wq[4] = {wv.x, wv.y, wv.z, wv.w};
					unsigned lo[4], hi[4]; /* byte pairs 0, 1 and 2, 3 of each word */
#pragma unroll
					for (int i = 0; i < 4; i++) {
						const __half2_raw l = __nv_cvt_fp8x2_to_halfraw2(
						    (__nv_fp8x2_storage_t)(wq[i] & 0xffff), __NV_E4M3);
						const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
						    (__nv_fp8x2_storage_t)(wq[i] >> 16), __NV_E4M3);
						lo[i] = *(const unsigned *)&l, hi[i] = *(const unsigned *)&h;
					}
					atlas_mma_f16(c[j][0], x0.x, x0.y, x0.z, x0.w, lo[0], lo[1]);
					atlas_mma_f16(c[j][1], x0.x, x0.y, x0.z, x0.w, hi[0], hi[1]);
					atlas_mma_f16(c[j][0], x1.x, x1.y, x1.z, x1.w, lo[2], lo[3]);
					atlas_mma_f16(c[j][1], x1.x, x1.y, x1.z, x1.w, hi[2], hi[3]);
				}
			}
			float v[2];
#pragma unroll
			for (int j = 0; j < 2; j++)
				v[j] = diag ? (fd_diag(c[j][0], n, false) + fd_diag(c[j][1], n, true)) *
						  (__uint_as_float(cur.sc[j]) * xsc)
					    : 0.0f;
#pragma unroll
			for (int o = 16; o > 0; o >>= 1) {
				v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
				v[1] += __shfl_xor_sync(0xffffffffu, v[1], o);
			}
			if (lane == 0) {
				part[(s.pbase + cur.rj[0]) * u.nsl + cur.sj[0]] = v[0];
				if (cur.ok[1])
					part[(s.pbase + cur.rj[1]) * u.nsl + cur.sj[1]] = v[1];
			}
		}
		__syncwarp();
		if (lane == 0)
			atlas_mbar_arrive(&r.empty[r.st]);
		if (++r.st == a.nst)
			r.st = 0, r.ph ^= 1;
		cur = nxt;
	}
}

/* fd_consume for a W4B launch, on the tensor cores: a chunk holds 32
 * slices of 1024 4-bit columns (512 bytes), four a warp (warp + 8j).
 * A slice is 8 subgroups of 128 columns, each within one group (groups
 * are powers of two of at least 128 columns, or the row). An m16n8k16
 * product takes 16 columns of every subgroup: B's column n the weights
 * of subgroup n, A's rows n and n + 8 its x, so that a diagonal gathers
 * subgroup n's dot product; 16 products cover the slice. Lane (n = lane
 * / 4, t = lane % 4) holds subgroup n's operands: at step b one 4-byte
 * word of weights (8 columns, nibble pairs (p, p + 4) as BF16 128 + q,
 * exactly; the zero point comes off at the end, times the subgroup's x
 * sum) and those columns' x, stored in the pairs' order (fd_x_w4) so
 * that the 16-byte load is an A fragment as it stands: words 0 and 2
 * (pairs 0 and 2) rows n's, in a product with weight pairs 0 and 2 whose
 * C[n][n] is kept, words 1 and 3 rows n + 8's, in a second product with
 * pairs 1 and 3 (its own accumulators) whose C[n + 8][n] is kept. Steps
 * go round (b + (n / 2 ^ n % 2)) % 4 so that the 32 lanes' words fall in
 * 32 banks and each 8 lanes' x loads (a 16-byte load is served 8 lanes
 * at a time) in distinct ones. The diagonal's lane scales it by the
 * group's BF16 scale; the warp sum of the 8 is the slice's partial.
 * A warp's four slices go one after another (two slices' products at
 * once, or their x loads shared, spilled and was slower: 4.60 against
 * 4.40 ms a Qwen3-8B step on an H100), their warp sums together at the
 * end; the scales and zero points are asked for a chunk ahead (the
 * segment's asked into L2 at its start). */
static __device__ void fd_consume_w4(const atlas_fd_args &a, fd_ring &r, const fd_seg &s,
				     const bf16 *xs, float *part)
{
	const float *xsum = (const float *)(xs + s.K); /* fd_x_w4 */
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int n = lane >> 2, t = lane & 3;
	const int ng = s.sbi >= 31 ? 1 : (int)(((long long)s.K + (1ll << s.sbi) - 1) >> s.sbi);
	const bool diag = t == (n >> 1); /* this lane holds C[n][n] */
	if (s.rows > 0 && threadIdx.x < 2 && a.mode != 3) {
		const long long g0 = (long long)s.n0 * ng, gn = (long long)s.rows * ng;
		/* (the bulk prefetch takes 16-byte pieces: the range rounded out) */
		const size_t b0 = threadIdx.x ? (size_t)s.sc + 2 * g0 : (size_t)s.zp + g0;
		const size_t b1 = b0 + (threadIdx.x ? 2 * gn : gn);
		atlas_prefetch_l2((const void *)(b0 & ~(size_t)15),
				  (unsigned)(((b1 + 15) & ~(size_t)15) - (b0 & ~(size_t)15)));
	}
	fd_cur u = fd_cur_init(s, 32);
	fd_chunk<4> cur, nxt;
	fd_ask<4>(a, s, u, ng, diag, cur);
	for (; u.q0 < u.total; u.q0 += 32) {
		fd_step(u.nsl, u.row, u.sl, u.cr, u.cs);
		u.q0 += 32; /* (the next chunk's, asked for now) */
		fd_ask<4>(a, s, u, ng, diag, nxt);
		u.q0 -= 32;
		atlas_mbar_wait(&r.full[r.st], r.ph);
		/* the slices one after another (each with two accumulator
		 * sets); their warp sums together at the end */
		float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
		for (int j = 0; j < 4; j++) {
			if (!cur.ok[j])
				break;
			float c[2][4] = {};
			const unsigned col0 = (unsigned)(cur.sj[j] * FD_SLICE + n * 128);
#pragma unroll
			for (int b0 = 0; b0 < 4; b0++) {
				const int b = (b0 + ((n >> 1) ^ (n & 1))) & 3;
				const unsigned w = *(const unsigned *)(r.ring + (size_t)r.st * FD_CHUNK +
								       (warp + 8 * j) * (FD_SLICE / 2) + n * 64 +
								       b * 16 + 4 * t);
				const uint4 xv = *(const uint4 *)(xs + col0 + b * 32 + 8 * t);
				unsigned q[4];
#pragma unroll
				for (int p = 0; p < 4; p++)
					q[p] = ((w >> (4 * p)) & 0x000f000fu) | 0x43004300u;
				atlas_mma_bf16(c[0], xv.x, xv.y, xv.z, xv.w, q[0], q[2]);
				atlas_mma_bf16(c[1], xv.x, xv.y, xv.z, xv.w, q[1], q[3]);
			}
			/* sum (128 + q) x - (128 + z) sum x = sum (q - z) x */
			const float d = fd_diag(c[0], n, false) + fd_diag(c[1], n, true);
			v[j] = diag ? (d - (128.0f + (float)cur.z[j]) * xsum[cur.sj[j] * 8 + n]) *
					  __uint_as_float(cur.sc[j] << 16)
				    : 0.0f;
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1)
#pragma unroll
			for (int j = 0; j < 4; j++)
				v[j] += __shfl_xor_sync(0xffffffffu, v[j], o);
		if (lane == 0)
#pragma unroll
			for (int j = 0; j < 4; j++)
				if (cur.ok[j])
					part[(s.pbase + cur.rj[j]) * u.nsl + cur.sj[j]] = v[j];
		__syncwarp();
		if (lane == 0)
			atlas_mbar_arrive(&r.empty[r.st]);
		if (++r.st == a.nst)
			r.st = 0, r.ph ^= 1;
		cur = nxt;
	}
}

/* xsc: x's scale in an F8B launch (fd_x_f16) */
static __device__ __forceinline__ void fd_consume(const atlas_fd_args &a, fd_ring &r,
						  const fd_seg &s, const bf16 *xs, float *part,
						  float xsc)
{
	if (a.wfmt == ATLAS_FD_F8B)
		fd_consume_f8(a, r, s, xs, part, xsc);
	else if (a.wfmt == ATLAS_FD_W4B)
		fd_consume_w4(a, r, s, xs, part);
	else
		fd_consume_bf16(a, r, s, xs, part);
}

/* fd_consume in an MoE layer (BF16 launches): a K that is not a multiple
 * of FD_SLICE (an expert's width) takes the narrow slices. */
static __device__ __forceinline__ void fd_consume_moe(const atlas_fd_args &a, fd_ring &r,
						      const fd_seg &s, const bf16 *xs, float *part)
{
	if (s.K % FD_SLICE == 0)
		fd_consume_bf16_moe<FD_SLICE>(a, r, s, xs, part);
	else
		fd_consume_bf16_moe<ATLAS_FD_SLICE_S>(a, r, s, xs, part);
}

/* Slices a row of K columns has in a BF16 launch (fd_consume). */
static __device__ __forceinline__ int fd_nsl(int K)
{
	return K % FD_SLICE == 0 ? K / FD_SLICE : K / ATLAS_FD_SLICE_S;
}

/* Row r's dot product from its slices, in slice order. */
static __device__ __forceinline__ float fd_row(const float *part, long long r, int nsl)
{
	float s = 0.0f;
	for (int i = 0; i < nsl; i++)
		s += part[r * nsl + i];
	return s;
}

/* Sum (MAX: maximum) over the 256 consumer threads, to every one of them. */
template <bool MAX = false>
static __device__ __forceinline__ float fd_sum(float v, float *red)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	if (MAX) {
#pragma unroll
		for (int o = 16; o > 0; o >>= 1)
			v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	} else {
		v = atlas_warp_sum(v);
	}
	if (lane == 0)
		red[warp] = v;
	fd_bar();
	float s = MAX ? red[0] : 0.0f;
#pragma unroll
	for (int i = MAX ? 1 : 0; i < 8; i++)
		s = MAX ? fmaxf(s, red[i]) : s + red[i];
	fd_bar(); /* red is reused */
	return s;
}

/* dst[0..n16) = src[0..n16) in 16-byte pieces by cp.async through L2
 * (never a stale L1 line), spread over the consumers; the caller commits
 * and waits. Every piece is in flight at once: one round trip, no
 * registers (a loop of load-store pairs took a round trip per pair the
 * compiler did not unroll). */
static __device__ __forceinline__ void fd_cp_issue(void *dst, const void *src, int n16)
{
	for (int i = threadIdx.x; i < n16; i += 256)
		atlas_cp16(atlas_smem_addr((uint4 *)dst + i), (const uint4 *)src + i, 16);
}

/* xs[0..n) = src (bf16, written earlier in the launch or before it). */
/* In an F8B launch (f8) it returns the largest |x| of this thread's own
 * copies and leaves the barrier to fd_x_f16's reduction. */
static __device__ __forceinline__ float fd_load_x(bf16 *xs, const void *src, int n, bool f8)
{
	fd_cp_issue(xs, src, n / 8);
	atlas_cp_commit();
	atlas_cp_wait<0>();
	float m = 0.0f;
	if (f8) {
		for (int i = threadIdx.x; i < n / 8; i += 256) { /* the same pieces */
			float f[8];
			atlas_unpack8(((const uint4 *)xs)[i], f);
#pragma unroll
			for (int j = 0; j < 8; j++)
				m = fmaxf(m, fabsf(f[j]));
		}
	} else {
		fd_bar();
	}
	return m;
}

/* xs = rmsnorm(h) * w, as atlas_rmsnorm computes it. h and the weights
 * come in by cp.async together (h into xs, w after it: the x area holds
 * D bf16 + D weights, cuda_fused.c), so the norm costs one round trip;
 * the weights were a second one after the sum of squares. */
static __device__ float fd_norm_x(bf16 *xs, const void *h, const void *w, int wdt, int D,
				  float eps, float *red, bool f8)
{
	uint4 *d = (uint4 *)xs;
	unsigned char *ws = (unsigned char *)(xs + D);
	const int n8 = D / 8;
	fd_cp_issue(d, h, n8);
	fd_cp_issue(ws, w, D * atlas_wsize(wdt) / 16);
	atlas_cp_commit();
	atlas_cp_wait<0>();
	float ss = 0.0f;
	for (int i = threadIdx.x; i < n8; i += 256) { /* this thread's own copies */
		float f[8];
		atlas_unpack8(d[i], f);
#pragma unroll
		for (int j = 0; j < 8; j++)
			ss += f[j] * f[j];
	}
	ss = fd_sum(ss, red); /* (its barriers: every thread's copies are in) */
	const float inv = 1.0f / sqrtf(ss / (float)D + eps);
	float m = 0.0f; /* (as fd_load_x: before the BF16 rounding, which adds at most 2^-8) */
	for (int i = threadIdx.x; i < n8; i += 256) {
		float f[8];
		atlas_unpack8(d[i], f);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			f[j] = f[j] * inv * atlas_wload(ws, wdt, (long long)i * 8 + j);
			m = fmaxf(m, fabsf(f[j]));
		}
		d[i] = atlas_pack8(f);
	}
	if (!f8)
		fd_bar();
	return m;
}

/* An F8B launch's x (fd_consume_f8): xs[0..n) rewritten in place as FP16
 * times 2^-E, E such that the largest |x| lands below 2^15, so that every
 * BF16 value within 2^29 of the largest stays exact (FP16 holds its 8
 * bits; smaller ones add less than 2^-29 of the largest term to a dot
 * product). The 16-byte units are swizzled, unit u at u ^ ((u >> 4) & 1):
 * fd_consume_f8's x loads then fall in distinct banks. Returns 2^E. */
static __device__ float fd_x_f16(bf16 *xs, int n, float *red, float m)
{
	uint4 *d = (uint4 *)xs;
	const int nu = n / 8;
	/* m: the largest |x| of the pieces this thread wrote or copied
	 * (fd_norm_x, fd_load_x, which left the barrier to this reduction's) */
	m = fd_sum<true>(m, red); /* (its barriers: every thread's x is in) */
	int e = (int)(__float_as_uint(m) >> 23) - 127 - 14; /* m < 2^(e + 15) */
	e = m > 0.0f ? (e < -100 ? -100 : e > 100 ? 100 : e) : 0;
	const float down = __uint_as_float((unsigned)(127 - e) << 23);
	for (int i = threadIdx.x; i < nu / 2; i += 256) {
		uint4 u[2] = {d[2 * i], d[2 * i + 1]}, h[2];
#pragma unroll
		for (int k = 0; k < 2; k++) {
			float f[8];
			atlas_unpack8(u[k], f);
			unsigned hw[4];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const __half2 v = __floats2half2_rn(f[2 * j] * down, f[2 * j + 1] * down);
				hw[j] = *(const unsigned *)&v;
			}
			h[k] = make_uint4(hw[0], hw[1], hw[2], hw[3]);
		}
		const bool sw = (i >> 3) & 1; /* ((2 i) >> 4) & 1 (selects: no indexed array) */
		d[2 * i] = sw ? h[1] : h[0];
		d[2 * i + 1] = sw ? h[0] : h[1];
	}
	fd_bar();
	return __uint_as_float((unsigned)(127 + e) << 23);
}

/* A W4B launch's x (fd_consume_w4): in each 8 columns of xs[0..n) the
 * order (0, 4, 1, 5, 2, 6, 3, 7), the nibble pairs' order, so that each
 * 32-bit word is an A fragment; and after x (float, at xs + n) the sum of
 * each 128 columns, which the consumer's zero points multiply. A 16-lane
 * half warp a 128 columns, a lane an 8. */
static __device__ void fd_x_w4(bf16 *xs, int n)
{
	uint4 *d = (uint4 *)xs;
	float *xsum = (float *)(xs + n);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	for (int g = 2 * warp + (lane >> 4); g < n / 128; g += 16) {
		const uint4 v = d[g * 16 + (lane & 15)];
		float f[8], s = 0.0f;
		atlas_unpack8(v, f);
#pragma unroll
		for (int j = 0; j < 8; j++)
			s += f[j];
		d[g * 16 + (lane & 15)] = make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632),
						     __byte_perm(v.y, v.w, 0x5410), __byte_perm(v.y, v.w, 0x7632));
#pragma unroll
		for (int o = 8; o > 0; o >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		if ((lane & 15) == 0)
			xsum[g] = s;
	}
	fd_bar();
}

/* x of n columns in xs made ready for the launch's consumer: FP16 scaled
 * (F8B; returns the scale; m from fd_norm_x or fd_load_x), reordered with
 * its sums (W4B), as is (BF16). */
static __device__ __forceinline__ float fd_x_prep(const atlas_fd_args &a, bf16 *xs, int n,
						  float *red, float m)
{
	if (a.wfmt == ATLAS_FD_F8B)
		return fd_x_f16(xs, n, red, m);
	if (a.wfmt == ATLAS_FD_W4B)
		fd_x_w4(xs, n);
	return 1.0f;
}

/* The grid barrier of the consumers (see the file comment): after the
 * block's barrier thread 0 adds its arrival with release semantics (the
 * block's stores before the barrier are ordered before it: the pattern
 * of CUTLASS's generic barrier) and polls with acquire loads. One round
 * trip less than a fence and then an atomicAdd whose old value nobody
 * reads (the H200 timed both the same: 4.24-4.26 ms a Qwen3-8B step). */
static __device__ __forceinline__ void fd_grid_sync(const atlas_fd_args &a, unsigned &target)
{
	fd_bar();
	if (a.mode == 2)
		return;
	if (threadIdx.x == 0) {
		asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.sync) : "memory");
		target += gridDim.x;
		unsigned v;
		do {
			asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(a.sync) : "memory");
		} while ((int)(v - target) < 0);
	}
	fd_bar();
}

/* One head row (hd = 128, written earlier in the launch) rmsnorm'ed with
 * nw (NULL: not) and rotated at position p, by one warp, as
 * atlas_qk_rope_store computes it (atlas_head_norm_rope): lane i returns
 * dims i, i + 32 (first half) and i + 64, i + 96 (second half) in x0[0..1],
 * x1[0..1], rounded to bf16. */
static __device__ __forceinline__ void fd_rope_head(const bf16 *src, const void *nw, int nwdt,
						    float eps, float p, const float *inv_freq,
						    float (&x0)[2], float (&x1)[2])
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int u = 0; u < 2; u++) {
		x0[u] = atlas_bf(__ldcg(src + lane + 32 * u));
		x1[u] = atlas_bf(__ldcg(src + lane + 32 * u + 64));
	}
	atlas_head_norm_rope<2>(x0, x1, FD_HD, nw, nwdt, eps, p, inv_freq);
#pragma unroll
	for (int u = 0; u < 2; u++)
		x0[u] = atlas_bf(atlas_tobf(x0[u])), x1[u] = atlas_bf(atlas_tobf(x1[u]));
}

/* Four consecutive bf16 values at p (8-byte aligned) as float. */
static __device__ __forceinline__ void fd_load4(const bf16 *p, float *f)
{
	const uint2 u = *(const uint2 *)p;
	const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
	const float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
	f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}

/* This block's attention item of a step at position p: kv head g, split
 * s of S, keys [j0, j1) (maybe empty); has false when it has none. The
 * partition depends only on p (and the grid), as every block computes it,
 * so fd_run finds it once a launch. */
struct fd_att_item {
	bool has;
	int g, s, S;
	long long j0, j1;
};

static __device__ __forceinline__ fd_att_item fd_item(const atlas_fd_args &a, long long p)
{
	fd_att_item it = {false, 0, 0, 0, 0, 0};
	const long long lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
	const long long nk = p - lo + 1;
	long long n = (nk + FD_TILE - 1) / FD_TILE, cap = gridDim.x / a.Hkv;
	if (cap > ATLAS_FD_MAXSPLIT)
		cap = ATLAS_FD_MAXSPLIT;
	n = n > cap ? cap : n < 1 ? 1 : n;
	if (blockIdx.x >= a.Hkv * n)
		return it;
	it.has = true;
	it.g = (int)(blockIdx.x / n), it.s = (int)(blockIdx.x % n), it.S = (int)n;
	const long long per = (nk + n - 1) / n;
	it.j0 = lo + it.s * per;
	it.j1 = it.j0 + per < p + 1 ? it.j0 + per : p + 1;
	return it;
}

/* Element offset in the cache of key `key` of kv head g. */
static __device__ __forceinline__ long long fd_key_off(const atlas_fd_args &a, long long seq, int g,
						       long long key)
{
	const int *table = a.tables + seq * a.max_blocks;
	const long long row = (long long)table[key / a.block_size] * a.block_size + key % a.block_size;
	return row * a.Hkv * FD_HD + (long long)g * FD_HD;
}

/* Element offsets in the cache of keys t0 .. t0 + nt - 1 of kv head g
 * (threads < nt; the caller synchronizes). */
static __device__ __forceinline__ void fd_offsets(const atlas_fd_args &a, long long seq, int g,
						  long long t0, int nt, long long *offs)
{
	if ((int)threadIdx.x < nt)
		offs[threadIdx.x] = fd_key_off(a, seq, g, t0 + threadIdx.x);
}

/* At the start of a layer, long before phase B: the first tile's key
 * offsets into offs, and the K and V rows of every key of the item asked
 * into L2, so that phase B finds them there instead of queueing behind
 * the weight stream (at a 2048-token context an item has 4 tiles: the
 * first alone asked for, 4.91 ms a step, all of them 4.82; the weights'
 * evict-first policy keeps them in L2 until phase B). */
static __device__ void fd_att_prefetch(const atlas_fd_args &a, const atlas_fd_layer &L,
				       const fd_att_item &it, long long seq, long long *offs)
{
	const int g = it.g;
	const long long j0 = it.j0, j1 = it.j1;
	if (a.mode == 1 || !it.has)
		return;
	for (long long t = j0 + threadIdx.x; t < j1; t += 256) {
		const long long off = fd_key_off(a, seq, g, t);
		if (t - j0 < FD_TILE)
			offs[t - j0] = off;
		atlas_prefetch_l2((const bf16 *)L.kc + off, FD_HD * 2);
		atlas_prefetch_l2((const bf16 *)L.vc + off, FD_HD * 2);
	}
}

/* The sums over the warp of N values a lane: lane L gets the sum of
 * v[L / (32 / N)] (N a power of 2, <= 32). Recursive halving: each step
 * a lane keeps half its values and adds the partner's copy of that half,
 * N - 1 shuffles in all plus log2(32 / N); v is used up. */
template <int N>
static __device__ __forceinline__ float fd_scatter(float (&v)[N])
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int c = N / 2, o = 16; c >= 1; c >>= 1, o >>= 1) {
		const bool up = lane & o;
#pragma unroll
		for (int k = 0; k < c; k++) {
			const float send = up ? v[k] : v[k + c];
			const float keep = up ? v[k + c] : v[k];
			v[k] = keep + __shfl_xor_sync(0xffffffffu, send, o);
		}
	}
	float r = v[0];
#pragma unroll
	for (int o = 16 / N; o >= 1; o >>= 1)
		r += __shfl_xor_sync(0xffffffffu, r, o);
	return r;
}

/* The K and V rows of keys t0 .. t0 + nt - 1 (offsets in offs) into kt
 * and vt by cp.async, one commit group; the new key's row (at p, when
 * skip_p) is left out: it comes from k and v. 16 pieces of 16 bytes a
 * row, 4 a thread. */
static __device__ __forceinline__ void fd_tile_async(const atlas_fd_layer &L, unsigned char *scratch,
						     const long long *offs, long long t0, int nt,
						     long long p, bool skip_p)
{
	bf16(*kt)[FD_HD] = (bf16(*)[FD_HD])(scratch + FD_KT_OFF);
	bf16(*vt)[FD_HD] = kt + FD_TILE;
#pragma unroll
	for (int u = 0; u < 2 * FD_TILE * 16 / 256; u++) {
		const int i = threadIdx.x + 256 * u, r = (i >> 4) % FD_TILE, c = i & 15;
		const bool isv = i >= FD_TILE * 16;
		if (r < nt && !(skip_p && t0 + r == p))
			atlas_cp16(atlas_smem_addr((uint4 *)(isv ? vt[r] : kt[r]) + c),
				   (const uint4 *)((const bf16 *)(isv ? L.vc : L.kc) + offs[r]) + c, 16);
	}
	atlas_cp_commit();
}

/* Phase A's end, after its last product (x is no longer read): the
 * first tile of this block's attention item asked into shared memory, so
 * that its round trip overlaps the grid barrier before phase B (the rows
 * do not depend on phase A; the new key's does, and is left out). */
static __device__ void fd_att_tile0(const atlas_fd_args &a, const atlas_fd_layer &L,
				    const fd_att_item &it, unsigned char *scratch,
				    const long long *offs, long long p, long long slot)
{
	const long long j0 = it.j0, j1 = it.j1;
	if (a.mode == 1 || !it.has || j0 >= j1)
		return;
	const int nt = j1 - j0 < FD_TILE ? (int)(j1 - j0) : FD_TILE;
	fd_tile_async(L, scratch, offs, j0, nt, p, j0 <= p && p < j1 && slot >= 0);
}

/* Phase B for this block's item, if it has one (see the file comment).
 * Each tile's K and V rows come into shared memory by cp.async, all at
 * once (one round trip); the first tile's went out at the end of phase A
 * (fd_att_tile0), with offsets from fd_att_prefetch. Scores:
 * warp w the keys w, w + 8, ... of the tile for every head of the group;
 * then warp h < G (G = H / Hkv) owns query head g * G + h, lane i its
 * dims 4i..4i+3 of the output (online softmax over the tiles). */
static __device__ void fd_attention(const atlas_fd_args &a, const atlas_fd_layer &L,
				    const fd_att_item &it, unsigned char *scratch, long long *offs,
				    long long p, long long seq, long long slot)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int G = a.H / a.Hkv;
	if (!it.has)
		return;
	const int g = it.g, s = it.s, S = it.S;
	const long long j0 = it.j0, j1 = it.j1;
	float(*qs)[FD_HD] = (float(*)[FD_HD])scratch;				 /* [MAXG][HD] */
	float(*sc)[FD_TILE] = (float(*)[FD_TILE])(scratch + ATLAS_FD_MAXG * FD_HD * 4); /* [MAXG][TILE] */
	bf16(*kt)[FD_HD] = (bf16(*)[FD_HD])(scratch + FD_KT_OFF);
	bf16(*vt)[FD_HD] = kt + FD_TILE;
	const long long ld = (long long)a.Hkv * FD_HD;
	const float fp = (float)p;
	const bool mine = j0 <= p && p < j1 && slot >= 0;

	float m = -INFINITY, l = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (long long t0 = j0; t0 < j1; t0 += FD_TILE) {
		const int nt = j1 - t0 < FD_TILE ? (int)(j1 - t0) : FD_TILE;
		/* the tile's K and V rows: the first tile's went out before the
		 * barrier (fd_att_tile0); in it the new key's row comes from k
		 * and v instead */
		if (t0 != j0) {
			fd_bar(); /* the last tile is used up */
			fd_offsets(a, seq, g, t0, nt, offs);
			fd_bar();
			fd_tile_async(L, scratch, offs, t0, nt, p, false);
		} else {
			/* the group's queries; the new key and value into the cache */
			if (warp < G) {
				float x0[2], x1[2];
				fd_rope_head((const bf16 *)a.q + (long long)(g * G + warp) * FD_HD, L.qn,
					     a.nwdt, a.eps, fp, a.inv_freq, x0, x1);
#pragma unroll
				for (int u = 0; u < 2; u++)
					qs[warp][lane + 32 * u] = x0[u], qs[warp][lane + 32 * u + 64] = x1[u];
			}
			if (mine && warp == 7) {
				float x0[2], x1[2];
				fd_rope_head((const bf16 *)a.k + (long long)g * FD_HD, L.kn, a.nwdt, a.eps,
					     fp, a.inv_freq, x0, x1);
				bf16 *dst = (bf16 *)L.kc + slot * ld + (long long)g * FD_HD;
				bf16 *row = p - t0 < FD_TILE ? kt[p - t0] : NULL;
#pragma unroll
				for (int u = 0; u < 2; u++) {
					const int i = lane + 32 * u;
					dst[i] = atlas_tobf(x0[u]), dst[i + 64] = atlas_tobf(x1[u]);
					if (row)
						row[i] = dst[i], row[i + 64] = dst[i + 64];
				}
			}
			if (mine && warp == 6) {
				const uint2 v = __ldcg((const uint2 *)((const bf16 *)a.v + (long long)g * FD_HD) + lane);
				*((uint2 *)((bf16 *)L.vc + slot * ld + (long long)g * FD_HD) + lane) = v;
				if (p - t0 < FD_TILE)
					*((uint2 *)vt[p - t0] + lane) = v;
			}
		}
		atlas_cp_wait<0>();
		fd_bar();
		/* scores: warp w the keys w + 8u (u < 4), lane i dims 4i..4i+3 of
		 * every head; two keys at a time, the 2 x MAXG partial dot
		 * products of a lane are summed over the warp by fd_scatter (16
		 * shuffles, where one sum per key and head took 5 each, in a
		 * chain: 80 for 4 heads) */
#pragma unroll
		for (int u2 = 0; u2 < 2; u2++) {
			float dp[2 * ATLAS_FD_MAXG];
#pragma unroll
			for (int uu = 0; uu < 2; uu++) {
				const int i = warp + 8 * (2 * u2 + uu);
				float kf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
				if (i < nt)
					fd_load4(kt[i] + lane * 4, kf);
#pragma unroll
				for (int h = 0; h < ATLAS_FD_MAXG; h++) {
					float d = 0.0f;
					if (h < G) {
						const float4 qv = *(const float4 *)&qs[h][lane * 4];
						d = qv.x * kf[0] + qv.y * kf[1] + qv.z * kf[2] + qv.w * kf[3];
					}
					dp[uu * ATLAS_FD_MAXG + h] = d;
				}
			}
			const float d = fd_scatter(dp); /* (key, head) lane / 2 */
			const int h = (lane >> 1) % ATLAS_FD_MAXG;
			const int i = warp + 8 * (2 * u2 + (lane >> 1) / ATLAS_FD_MAXG);
			if ((lane & 1) == 0 && h < G && i < nt)
				sc[h][i] = d * a.scale;
		}
		fd_bar();
		/* online softmax: warp h < G owns head h; lane i the weight of
		 * key i, handed to every lane for its dims */
		if (warp < G) {
			const float sv = lane < nt ? sc[warp][lane] : -INFINITY;
			const float mn = fmaxf(m, atlas_warp_max(sv));
			const float corr = expf(m - mn);
			const float e = lane < nt ? expf(sv - mn) : 0.0f;
			l = l * corr + atlas_warp_sum(e);
#pragma unroll
			for (int j = 0; j < 4; j++)
				acc[j] *= corr;
			for (int i = 0; i < nt; i++) {
				const float ei = __shfl_sync(0xffffffffu, e, i);
				float vf[4];
				fd_load4(vt[i] + lane * 4, vf);
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[j] = fmaf(ei, vf[j], acc[j]);
			}
			m = mn;
		}
	}

	const int Si = S;
	if (Si == 1) {
		if (warp < G) {
			bf16 *o = (bf16 *)a.att + (long long)(g * G + warp) * FD_HD + lane * 4;
#pragma unroll
			for (int j = 0; j < 4; j++)
				o[j] = atlas_tobf(acc[j] / l);
		}
		return;
	}
	/* partials, then the last split of the kv head merges */
	if (warp < G) {
		float *pp = a.part + ((long long)(g * G + warp) * ATLAS_FD_MAXSPLIT + s) * FD_PST;
		*(float4 *)(pp + lane * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
		if (lane == 0)
			pp[FD_HD] = m, pp[FD_HD + 1] = l;
	}
	fd_bar();
	__shared__ int last;
	if (threadIdx.x == 0) {
		/* release: the partials stored before the barrier; acquire:
		 * the last sees every other split's (one round trip, where a
		 * fence each side of a plain atomicAdd took three) */
		unsigned old;
		asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
			     : "=r"(old)
			     : "l"(a.sync + 2 + g)
			     : "memory");
		last = old == (unsigned)(Si - 1);
	}
	fd_bar();
	if (!last)
		return;
	if (warp < G) {
		/* every split's m and l (lane i: split i) and the first FD_MB
		 * splits' rows go out together: one round trip for up to FD_MB
		 * splits (a loop of dependent loads took one per split) */
		const float *pp = a.part + (long long)(g * G + warp) * ATLAS_FD_MAXSPLIT * FD_PST;
		const float mi = lane < Si ? __ldcg(pp + lane * FD_PST + FD_HD) : -INFINITY;
		const float li = lane < Si ? __ldcg(pp + lane * FD_PST + FD_HD + 1) : 0.0f;
		float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		float ei = 0.0f, Ls = 0.0f;
		for (int i0 = 0; i0 < Si; i0 += FD_MB) {
			float4 v[FD_MB];
#pragma unroll
			for (int i = 0; i < FD_MB; i++)
				if (i0 + i < Si)
					v[i] = __ldcg((const float4 *)(pp + (i0 + i) * FD_PST) + lane);
			if (i0 == 0) {
				const float M = atlas_warp_max(mi);
				ei = lane < Si ? expf(mi - M) : 0.0f;
				Ls = atlas_warp_sum(li * ei);
			}
#pragma unroll
			for (int i = 0; i < FD_MB; i++)
				if (i0 + i < Si) {
					const float e = __shfl_sync(0xffffffffu, ei, i0 + i);
					o[0] = fmaf(v[i].x, e, o[0]), o[1] = fmaf(v[i].y, e, o[1]);
					o[2] = fmaf(v[i].z, e, o[2]), o[3] = fmaf(v[i].w, e, o[3]);
				}
		}
		bf16 *out = (bf16 *)a.att + (long long)(g * G + warp) * FD_HD + lane * 4;
#pragma unroll
		for (int j = 0; j < 4; j++)
			out[j] = atlas_tobf(o[j] / Ls);
	}
	if (threadIdx.x == 0)
		a.sync[2 + g] = 0;
}

/* A down product's row n (bf16) to the residual h, or (the last layer)
 * to o for the caller's final add_rmsnorm. */
static __device__ __forceinline__ void fd_mlp_out(const atlas_fd_args &a, long long n, bf16 dv,
						  bool lastl)
{
	if (lastl) {
		((bf16 *)a.o)[n] = dv;
	} else {
		bf16 *h = (bf16 *)a.x + n;
		*h = atlas_tobf(atlas_bf(__ldcg(h)) + atlas_bf(dv));
	}
}

/* g[n] = silu(gate) up from the block's part rows i (gate) and rows + i
 * (up), each rounded to bf16 first, as matmul_swiglu rounds them. */
static __device__ __forceinline__ void fd_swiglu_out(const atlas_fd_args &a, const float *part,
						     long long i, long long rows, long long n, int nsl)
{
	const float gv = atlas_bf(atlas_tobf(fd_row(part, i, nsl)));
	const float uv = atlas_bf(atlas_tobf(fd_row(part, rows + i, nsl)));
	((bf16 *)a.g)[n] = atlas_tobf(gv / (1.0f + expf(-gv)) * uv);
}

/* ATLAS_CUDA_FD_TRACE: block 0's thread 0 adds the time since its last
 * mark to trace[l * FD_TRACE + ph], and counts the launch in
 * trace[n_layers * FD_TRACE]. Phases: 0 A's norm, 1 A's products, 2 A's
 * outputs and barrier, 3 B, 4 C's product, 5 C's residual and barrier, 6
 * D (an MoE layer's router and barrier), 7 MoE routing, 8 the gate and
 * up products, 9 SwiGLU and barrier, 10 the down products, 11 their
 * outputs (and barrier). A timing aid: a reduction and a timer read a
 * mark, in one thread. */
#define FD_TRACE ATLAS_FD_TRACE
static __device__ __forceinline__ void fd_mark(const atlas_fd_args &a, int l, int ph,
					       unsigned long long &t)
{
	if (!a.trace || blockIdx.x != 0 || threadIdx.x != 0)
		return;
	unsigned long long now;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
	if (ph >= 0) /* (a reduction: nothing waits for it) */
		atomicAdd(a.trace + l * FD_TRACE + ph, now - t);
	t = now;
}

/* An MoE layer's MLP (BF16 launches), after phase C, for the consumer
 * warps; the moe op's arithmetic (moe.cu) at T = 1:
 *   D  xn = rmsnorm(h) ln2; the router's rows: FP32 logits into lg
 *   -- grid barrier
 *   E  every block routes (moe_topk on the same logits: the same experts
 *      and weights everywhere) into ids, wts and lets its producer go on
 *      to the chosen experts' weights (rt); the block's rows of the topk
 *      * Fe gate and up features: g[j Fe + f] = silu(g) u of slot j, as
 *      the expert GEMVs round it
 *   -- grid barrier
 *   F  the block's rows of every chosen expert's down product (x: its
 *      slot of g), each rounded to bf16, weighted and added in slot
 *      (ascending expert) order, rounded once (atlas_moe_combine); h +=
 *      that (the last layer: to o)
 * Returns with the grid barrier after F done (not after the last layer). */
static __device__ __forceinline__ void fd_moe(const atlas_fd_args &a, const atlas_fd_layer &L, fd_ring &r,
			      bf16 *xs, float *part, float *red, int *ids, float *wts,
			      unsigned long long *rt, unsigned &target, bool lastl, int l,
			      unsigned long long &t)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, k = a.topk;
	long long r0, r1;
	fd_norm_x(xs, a.x, L.ln2, a.nwdt, a.D, a.eps, red, false);
	fd_consume_moe(a, r, fd_get<true>(a, L, 4), xs, part);
	fd_bar();
	fd_rows(a.E, &r0, &r1);
	for (long long i = threadIdx.x; i < r1 - r0; i += 256)
		a.lg[r0 + i] = fd_row(part, i, a.D / FD_SLICE);
	fd_grid_sync(a, target);
	fd_mark(a, l, 6, t);

	/* (part is free until the gate and up pieces: the logits, then the
	 * softmax's scratch) */
	float *lgs = part, *pp = part + a.E;
	for (int i = threadIdx.x; i < a.E; i += 256)
		lgs[i] = __ldcg(a.lg + i);
	fd_bar();
	if (warp == 0) {
		if (a.mode == 3) { /* timing only: no logits were computed */
			if (lane < k)
				ids[lane] = lane, wts[lane] = 1.0f / (float)k;
		} else {
			moe_topk(lgs, a.E, k, a.norm_topk, pp, ids, wts, lane);
		}
	}
	fd_bar();
	if (threadIdx.x == 0) {
		atlas_mbar_arrive(rt);
		if (blockIdx.x == 0 && a.reads)
			atomicAdd(a.reads, (unsigned long long)k);
	}
	fd_mark(a, l, 7, t);
	for (int j = 0; j < 2 * k; j++)
		fd_consume_moe(a, r, fd_get<true>(a, L, 5 + j, ids), xs, part);
	fd_bar();
	fd_mark(a, l, 8, t);
	fd_rows((long long)k * a.Fe, &r0, &r1);
	for (long long i = threadIdx.x; i < r1 - r0; i += 256)
		fd_swiglu_out(a, part, i, r1 - r0, r0 + i, a.D / FD_SLICE);
	fd_grid_sync(a, target);
	fd_mark(a, l, 9, t);

	fd_load_x(xs, a.g, k * a.Fe, false);
	for (int j = 0; j < k; j++)
		fd_consume_moe(a, r, fd_get<true>(a, L, 5 + 2 * k + j, ids), xs, part);
	fd_bar();
	fd_mark(a, l, 10, t);
	fd_rows(a.D, &r0, &r1);
	const int nsf = fd_nsl(a.Fe);
	for (long long i = threadIdx.x; i < r1 - r0; i += 256) {
		float acc = 0.0f;
		for (int j = 0; j < k; j++)
			acc += wts[j] * atlas_bf(atlas_tobf(fd_row(part, j * (r1 - r0) + i, nsf)));
		fd_mlp_out(a, r0 + i, atlas_tobf(acc), lastl);
	}
	if (!lastl)
		fd_grid_sync(a, target);
	fd_mark(a, l, 11, t);
}

/* The consumer warps: every phase of every layer. */
template <bool MOE>
static __device__ __forceinline__ void fd_run(const atlas_fd_args &a, fd_ring &r, bf16 *xs, float *part,
			      float *red, long long *offs, int *ids, float *wts,
			      unsigned long long *rt)
{
	const long long p = a.pos[0], seq = a.seq_of[0], slot = a.slot[0];
	const fd_att_item it = fd_item(a, p);
	const long long nq = (long long)a.H * FD_HD, nkv = (long long)a.Hkv * FD_HD;
	unsigned target = 0;
	unsigned long long t = 0;
	long long r0, r1;
	const bool f8 = a.wfmt == ATLAS_FD_F8B; /* (fd_x_f16 finishes the x loads) */
	fd_mark(a, 0, -1, t);
	for (int l = 0; l < a.n_layers; l++) {
		const atlas_fd_layer &L = a.layers[l]; /* (a copy held 32 registers all layer) */
		const bool lastl = l == a.n_layers - 1;

		/* A: q, k, v */
		fd_att_prefetch(a, L, it, seq, offs);
		float xsc = fd_x_prep(a, xs, a.D, red,
				      fd_norm_x(xs, a.x, L.ln1, a.nwdt, a.D, a.eps, red, f8));
		fd_mark(a, l, 0, t);
		for (int i = 0; i < 3; i++)
			fd_consume(a, r, fd_get(a, L, i), xs, part, xsc);
		fd_bar();
		fd_mark(a, l, 1, t);
		fd_att_tile0(a, L, it, (unsigned char *)xs, offs, p, slot);
		fd_rows(nq + 2 * nkv, &r0, &r1);
		for (long long i = threadIdx.x; i < r1 - r0; i += 256) {
			const long long vr = r0 + i;
			float v = fd_row(part, i, a.D / FD_SLICE);
			if (vr < nq) {
				if (L.bq)
					v += atlas_bf(((const bf16 *)L.bq)[vr]);
				((bf16 *)a.q)[vr] = atlas_tobf(v);
			} else if (vr < nq + nkv) {
				if (L.bk)
					v += atlas_bf(((const bf16 *)L.bk)[vr - nq]);
				((bf16 *)a.k)[vr - nq] = atlas_tobf(v);
			} else {
				if (L.bv)
					v += atlas_bf(((const bf16 *)L.bv)[vr - nq - nkv]);
				((bf16 *)a.v)[vr - nq - nkv] = atlas_tobf(v);
			}
		}
		fd_grid_sync(a, target);
		fd_mark(a, l, 2, t);

		/* B: attention */
		if (a.mode != 1)
			fd_attention(a, L, it, (unsigned char *)xs, offs, p, seq, slot);
		fd_grid_sync(a, target);
		fd_mark(a, l, 3, t);

		/* C: o, residual */
		xsc = fd_x_prep(a, xs, (int)nq, red, fd_load_x(xs, a.att, (int)nq, f8));
		fd_consume(a, r, fd_get(a, L, 3), xs, part, xsc);
		fd_bar();
		fd_mark(a, l, 4, t);
		fd_rows(a.D, &r0, &r1);
		for (long long i = threadIdx.x; i < r1 - r0; i += 256) {
			bf16 *h = (bf16 *)a.x + r0 + i;
			const float o = atlas_bf(atlas_tobf(fd_row(part, i, (int)(nq / FD_SLICE))));
			*h = atlas_tobf(atlas_bf(__ldcg(h)) + o);
		}
		fd_grid_sync(a, target);
		fd_mark(a, l, 5, t);

		if (MOE && L.ex) {
			fd_moe(a, L, r, xs, part, red, ids, wts, rt, target, lastl, l, t);
			continue;
		}

		/* D: gate, up, SwiGLU */
		xsc = fd_x_prep(a, xs, a.D, red, fd_norm_x(xs, a.x, L.ln2, a.nwdt, a.D, a.eps, red, f8));
		fd_consume(a, r, fd_get(a, L, 4), xs, part, xsc);
		fd_consume(a, r, fd_get(a, L, 5), xs, part, xsc);
		fd_bar();
		fd_mark(a, l, 8, t);
		fd_rows(a.F, &r0, &r1);
		for (long long i = threadIdx.x; i < r1 - r0; i += 256)
			fd_swiglu_out(a, part, i, r1 - r0, r0 + i, a.D / FD_SLICE);
		fd_grid_sync(a, target);
		fd_mark(a, l, 9, t);

		/* E: down, residual (the last layer's output to o) */
		xsc = fd_x_prep(a, xs, a.F, red, fd_load_x(xs, a.g, a.F, f8));
		fd_consume(a, r, fd_get(a, L, 6), xs, part, xsc);
		fd_bar();
		fd_mark(a, l, 10, t);
		fd_rows(a.D, &r0, &r1);
		for (long long i = threadIdx.x; i < r1 - r0; i += 256)
			fd_mlp_out(a, r0 + i, atlas_tobf(fd_row(part, i, a.F / FD_SLICE)), lastl);
		if (!lastl)
			fd_grid_sync(a, target);
		fd_mark(a, l, 11, t);
	}
	if (a.trace && blockIdx.x == 0 && threadIdx.x == 0)
		atomicAdd(a.trace + a.n_layers * FD_TRACE, 1ull);
}

/* The kernel body; MOE: a model with MoE layers (atlas_decode_fused_moe),
 * so that the dense kernel carries none of their code (the registers
 * it would take cost a Qwen3-8B step 1.6% on an H100). */
template <bool MOE> static __device__ __forceinline__ void fd_kernel(const atlas_fd_args &a)
{
	extern __shared__ __align__(1024) unsigned char fd_smem[];
	__shared__ float red[8];
	__shared__ long long offs[FD_TILE]; /* key offsets of an attention tile */
	/* MoE layers: the chosen experts and their weights, and the barrier
	 * on which the consumers tell the producer they are known */
	__shared__ int ids[ATLAS_FD_MAXK];
	__shared__ float wts[ATLAS_FD_MAXK];
	__shared__ __align__(8) unsigned long long rt;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	unsigned char *ring = fd_smem;
	bf16 *xs = (bf16 *)(fd_smem + (size_t)a.nst * FD_CHUNK);
	float *part = (float *)((unsigned char *)xs + a.xs_bytes);
	unsigned long long *full = (unsigned long long *)(part + a.part_cap);
	unsigned long long *empty = full + a.nst;
	if (threadIdx.x == 0) {
		for (int s = 0; s < a.nst; s++) {
			asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(atlas_smem_addr(&full[s])));
			asm volatile("mbarrier.init.shared::cta.b64 [%0], 8;" ::"r"(atlas_smem_addr(&empty[s])));
		}
		if (MOE)
			asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(atlas_smem_addr(&rt)));
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	__syncthreads();
	atlas_pdl_launch();
	if (warp == 8) {
		if (lane == 0)
			fd_produce<MOE>(a, ring, full, empty, ids, &rt);
		return;
	}
	atlas_pdl_wait();
	fd_ring r = {ring, full, empty, 0, 0};
	fd_run<MOE>(a, r, xs, part, red, offs, ids, wts, &rt);
	/* the last block out zeroes the barrier counter for the next launch */
	fd_bar();
	if (threadIdx.x == 0 && a.mode != 2) {
		__threadfence();
		if (atomicAdd(a.sync + 1, 1u) == gridDim.x - 1) {
			a.sync[0] = 0;
			a.sync[1] = 0;
			__threadfence();
		}
	}
}

extern "C" __global__ void __launch_bounds__(ATLAS_FD_THREADS, 1)
    atlas_decode_fused(const __grid_constant__ atlas_fd_args a)
{
	fd_kernel<false>(a);
}

extern "C" __global__ void __launch_bounds__(ATLAS_FD_THREADS, 1)
    atlas_decode_fused_moe(const __grid_constant__ atlas_fd_args a)
{
	fd_kernel<true>(a);
}
