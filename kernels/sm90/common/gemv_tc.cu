/* gemv_tc.cu - the decode linear layer on tensor cores: out[T,N] =
 * x[T,K] W^T (+ bias) for BF16 weights and 1 <= T <= 64, each weight byte
 * read once per call (the bandwidth-bound regime of decode at batch 1..64).
 *
 * The product is an mma.sync m16n8k16 GEMM with A = 16 weight rows
 * (row-major, as W is stored) and B = 8 rows of x (x [T,K] is B in
 * column-major form). Each lane copies 16 contiguous bytes of a 32-wide
 * chunk into its warp's shared-memory ring (lane (g = lane/4, c = lane%4)
 * copies W[n0+g][k0+8c .. +8], W[n0+g+8][...] and x[t0+g][...] for each
 * 8 tokens), and the warp reads them back across lanes so that k-step s
 * of the chunk sums exactly k0+16s .. k0+16s+15: lane (g, c) takes the 8
 * bytes k0+16s+4c .. +4 of rows g and g+8 and of token g:
 *   A regs a0 = row g k+0..1, a1 = row g+8 k+0..1, a2 = row g k+2..3,
 *   a3 = row g+8 k+2..3; B regs b0 = token g k+0..1, b1 = k+2..3
 * (the PTX m16n8k16 layouts: a0/a2 hold row g, columns 2c..2c+1 and
 * 2c+8..2c+9; b0/b1 hold column g, rows 2c..2c+1 and 2c+8..2c+9).
 * Why those k sets: the tensor cores add one k-step's 16 products and the
 * accumulator in a way that does not depend on which slot holds which
 * product (tests/gpu/probe-mma-order.cu checks it on the GPU at hand, as
 * well as wgmma giving mma.sync's bits), so a row's bits depend only on
 * which k each step sums and on the chain of steps. Contiguous k-steps of
 * 16 are what wgmma takes from a K-major shared-memory tile, so the
 * wgmma GEMM (gemm_tc.cu, invariant form) can give a row these bits too.
 *
 * Launch: struct atlas_gemv_args as atlas_gemv (segments: q, k and v in
 * one launch; swiglu: a warp's rows 0..7 are gate rows, 8..15 the up rows
 * of the same features, so one lane holds g and u of an output); dynamic
 * shared memory ATLAS_GTC_SMEM(NT8) (kernel_args.h). Block of 8 warps =
 * a.rpb warp tiles of 16 rows (8 features with swiglu) times 8/rpb warps
 * splitting K into contiguous ranges of 32-wide chunks; the partial sums
 * meet in shared memory and are added in warp order (deterministic; a
 * row's sum order depends on neither T nor its place among the rows, which
 * batch-invariant mode relies on). Within its range a warp keeps one
 * accumulator chain (a row's chunks in ascending order): gemm_inv.cu
 * repeats exactly this order (ranges, chains, merge) for longer T, so the
 * two kernels give a row the same bits. NT8 = token tiles of 8 (T <= 8 * NT8),
 * one entry point per NT8 so that small T keeps few registers.
 *
 * Bytes in flight: each warp streams its chunks through a ring of
 * ATLAS_GTC_STAGES(NT8) stages of cp.async copies (the compiler cannot
 * sink asynchronous copies next to their use, as it may plain loads), so
 * every lane keeps S chunks of weights (S * 32 bytes) in flight. The
 * weight copies of the first S chunks are issued before waiting for the
 * previous kernel (programmatic dependent launch): weights never change.
 */
#include "common.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#include <cuda_fp8.h>

/* FP8 weights (ATLAS_DTYPE_F8B, lib/backend/backend.h): the same kernel
 * with one byte a weight. Lane (g, c) copies the 8 bytes k0+8c..+7 of
 * rows g and g+8 (into the first half of its 16-byte unit of the slot),
 * so k-step s's bytes k0+16s+4c..+3 sit in unit 2s + (c >> 1), half
 * c & 1, as the BF16 kernel's do; the lane turns its 4 values of a row
 * into BF16 as bf16(f32(q) * scale) (the matrix the dequantizing loader
 * would make) and feeds the same mma. Every sum is then the BF16 kernel's
 * for that matrix, bit for bit, and with it the invariant GEMMs' on the
 * dequantized copy that longer products take (cuda_ops.c). A row's scale
 * changes at most once a chunk (blocks are a multiple of 32 columns, or
 * the whole row); the next block's scales are loaded a block ahead. */
static __device__ __forceinline__ void atlas_cp8_ca(void *s, const void *p, bool ok)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(
			 (unsigned)__cvta_generic_to_shared(s)),
		     "l"(p), "r"(ok ? 8 : 0)
		     : "memory");
}

/* Four values (a: k + 0..1, b: k + 2..3) times sc, rounded to BF16, as
 * the A registers of one row of a k-step. */
static __device__ __forceinline__ uint2 bf16x4_scaled(float2 a, float2 b, float sc)
{
	const __nv_bfloat162 x = __floats2bfloat162_rn(a.x * sc, a.y * sc);
	const __nv_bfloat162 y = __floats2bfloat162_rn(b.x * sc, b.y * sc);
	uint2 r;
	r.x = *(const uint32_t *)&x;
	r.y = *(const uint32_t *)&y;
	return r;
}

/* 4 E4M3 values (byte i = k + i) times sc, as the A registers of one row
 * of a k-step: .x = k+0..1, .y = k+2..3, BF16 pairs (low half first). */
static __device__ __forceinline__ uint2 f8x4_bf16(uint32_t q, float sc)
{
	const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(q & 0xffff), __NV_E4M3);
	const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(q >> 16), __NV_E4M3);
	return bf16x4_scaled(__half22float2(__half2(lo)), __half22float2(__half2(hi)), sc);
}

/* 4-bit weights (ATLAS_DTYPE_W4B): the same again with half a byte a
 * weight. Lane (g, c) copies the 4 bytes of columns k0+8c..+7 of rows g
 * and g + 8 (the first quarter of its unit), so k-step s's columns
 * k0+16s+4c..+3 are the 2 bytes at 2 * (c & 1) in unit 2s + (c >> 1);
 * the lane makes them W = bf16(f32(q - z) * s), the blob's matrix
 * (backend.h): a nibble pair masked into BF16 128 + q (BF16's ulp at 128
 * is 1), one BF16x2 subtraction of 128 + z (exact: z <= 128) and one
 * BF16x2 multiply by the BF16 scale (the exact product rounded once). */
static __device__ __forceinline__ void atlas_cp4_ca(void *s, const void *p, bool ok)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(
			 (unsigned)__cvta_generic_to_shared(s)),
		     "l"(p), "r"(ok ? 4 : 0)
		     : "memory");
}

/* 4 nibbles (column k + i in bits 4i..4i+3) as the A registers of one
 * row of a k-step: zz = BF16 128 + z twice, ss the group's BF16 scale
 * twice. t = h | h << 12 puts nibbles 0 and 1 at bits 0 and 16, and
 * nibbles 2 and 3 at bits 8 and 24. */
static __device__ __forceinline__ uint2 w4x4_bf16(uint32_t h, uint32_t zz, uint32_t ss)
{
	const uint32_t t = h | h << 12;
	const uint32_t m0 = (t & 0x000f000fu) | 0x43004300u;
	const uint32_t m1 = ((t >> 8) & 0x000f000fu) | 0x43004300u;
	const __nv_bfloat162 z2 = *(const __nv_bfloat162 *)&zz, s2 = *(const __nv_bfloat162 *)&ss;
	const __nv_bfloat162 x = __hmul2(__hsub2(*(const __nv_bfloat162 *)&m0, z2), s2);
	const __nv_bfloat162 y = __hmul2(__hsub2(*(const __nv_bfloat162 *)&m1, z2), s2);
	uint2 r;
	r.x = *(const uint32_t *)&x;
	r.y = *(const uint32_t *)&y;
	return r;
}

/* BF16 128 + z and a BF16 scale bit pattern, each twice in a word. */
static __device__ __forceinline__ uint32_t w4_zz(uint8_t z)
{
	const __nv_bfloat162 v = __float2bfloat162_rn(128.0f + (float)z);
	return *(const uint32_t *)&v;
}

static __device__ __forceinline__ uint32_t w4_ss(unsigned short s)
{
	return (uint32_t)s | (uint32_t)s << 16;
}

/* NVFP4 weights (ATLAS_DTYPE_FP4B): the 4-bit kernel's copies and reads,
 * each nibble made W = bf16(f32(e2m1 * f32(f8(s) * gm))), the blob's
 * matrix (backend.h): atlas_fp4x2 gives e2m1 * 2^-14 exactly, times the
 * group's scale * 2^14 (atlas_fp4_scale) the reference's FP32 product,
 * rounded to BF16. A chunk of 32 columns holds two scale groups, one a
 * k-step: the lane loads the pair of F8 scale bytes of rows g and g + 8
 * a chunk ahead and converts them where they are used. */
static __device__ __forceinline__ uint2 fp4x4_bf16(uint32_t h, float sc)
{
	const uint32_t t = h | h << 12; /* as w4x4_bf16 */
	return bf16x4_scaled(atlas_fp4x2(t), atlas_fp4x2(t >> 8), sc);
}

/* Weight formats of gtc_impl. */
#define GTC_BF16 0
#define GTC_F8 1
#define GTC_W4 2
#define GTC_FP4 3

template <int NT8, int FMT>
static __device__ __forceinline__ void gtc_impl(const atlas_gemv_args &a)
{
	__shared__ float red[8][16][8 * NT8 + 1]; /* per-warp partial tiles (+1: banks) */
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int rpb = a.rpb == 1 || a.rpb == 2 || a.rpb == 4 || a.rpb == 8 ? a.rpb : 8;
	const int wpr = 8 / rpb, ks = warp % wpr, tile = warp / wpr;
	const int fpt = a.swiglu ? 8 : 16; /* output features per warp tile */
	const long long K = a.K, T = a.T;

	/* the block's segment and first feature */
	long long b = blockIdx.x;
	int s = 0;
	for (; s < a.nseg - 1 && !a.swiglu; s++) {
		const long long nb = (a.seg[s].N + fpt * rpb - 1) / (fpt * rpb);
		if (b < nb)
			break;
		b -= nb;
	}
	const long long N = a.seg[s].N;
	const long long f0 = (b * rpb + tile) * fpt; /* first feature of this warp's tile */
	/* weight rows of lane: g and g + 8 of the tile (the blobs of F8) */
	const char *wb0, *wb1;
	long long r0, r1;
	bool ok0, ok1;
	if (a.swiglu) {
		ok0 = ok1 = f0 + g < N;
		r0 = r1 = ok0 ? f0 + g : 0;
		wb0 = (const char *)a.seg[0].w, wb1 = (const char *)a.seg[1].w;
	} else {
		ok0 = f0 + g < N;
		ok1 = f0 + g + 8 < N;
		r0 = ok0 ? f0 + g : 0, r1 = ok1 ? f0 + g + 8 : 0;
		wb0 = wb1 = (const char *)a.seg[s].w;
	}
	const bf16 *wr0 = (const bf16 *)wb0 + r0 * K, *wr1 = (const bf16 *)wb1 + r1 * K;
	/* F8: K bytes a row; W4, FP4: K / 2 */
	const long long qk = FMT == GTC_W4 || FMT == GTC_FP4 ? K / 2 : K;
	const uint8_t *qr0 = (const uint8_t *)wb0 + ATLAS_F8B_HEAD_BYTES + r0 * qk;
	const uint8_t *qr1 = (const uint8_t *)wb1 + ATLAS_F8B_HEAD_BYTES + r1 * qk;
	/* this warp's chunks: a contiguous range */
	const long long nch = (K + 31) / 32;
	const long long cpw = (nch + wpr - 1) / wpr;
	const long long ch0 = ks * cpw, ch1 = ch0 + cpw < nch ? ch0 + cpw : nch;

	/* The warp's ring of S stages in dynamic shared memory, one chunk per
	 * stage: slot i of stage st at (st * (2 + NT8) + i) * 32 uint4s (slots
	 * 0, 1: weight rows g and g + 8; 2 + j: x tile j), lane (g, c)'s 16
	 * bytes at uint4 4g + (c ^ sw(g)) of the slot, sw(g) = g & 2: rows g
	 * and g + 2 of a half warp's 8-byte reads then fall in different banks.
	 * After cp.async.wait_group (per thread) a __syncwarp makes every
	 * lane's copies visible to the warp, and another one before a stage is
	 * refilled keeps the copies from overtaking the reads. */
	constexpr int S = ATLAS_GTC_STAGES(NT8);
	extern __shared__ uint4 gtc_ring[];
	uint4 *const wring = gtc_ring + (size_t)warp * S * (2 + NT8) * 32;
	uint4 *ring = wring + 4 * g + (c ^ (g & 2));
	const bf16 *x = (const bf16 *)a.x;
	/* weights are immutable: the first stages may load before the wait */
	auto issue_w = [&](long long ch, int st) {
		const long long k = ch * 32 + 8 * c;
		const bool kok = ch < ch1 && k < K;
		uint4 *r = ring + st * (2 + NT8) * 32;
		if (FMT == GTC_F8) {
			atlas_cp8_ca(r, kok && ok0 ? qr0 + k : qr0, kok && ok0);
			atlas_cp8_ca(r + 32, kok && ok1 ? qr1 + k : qr1, kok && ok1);
		} else if (FMT == GTC_W4 || FMT == GTC_FP4) {
			atlas_cp4_ca(r, kok && ok0 ? qr0 + k / 2 : qr0, kok && ok0);
			atlas_cp4_ca(r + 32, kok && ok1 ? qr1 + k / 2 : qr1, kok && ok1);
		} else {
			atlas_cp16_cg(r, kok && ok0 ? wr0 + k : wr0, kok && ok0);
			atlas_cp16_cg(r + 32, kok && ok1 ? wr1 + k : wr1, kok && ok1);
		}
	};
	auto issue_x = [&](long long ch, int st) {
		const long long k = ch * 32 + 8 * c;
		const bool kok = ch < ch1 && k < K;
		uint4 *r = ring + (st * (2 + NT8) + 2) * 32;
#pragma unroll
		for (int j = 0; j < NT8; j++) {
			const long long t = 8 * j + g;
			const bool ok = kok && t < T;
			atlas_cp16_ca(r + j * 32, ok ? x + t * K + k : x, ok);
		}
	};
#pragma unroll
	for (int st = 0; st < S; st++)
		issue_w(ch0 + st, st);
	/* F8: the scale rows of rows g and g + 8, the chunks per scale block
	 * (cpb), the block of the current chunk and the next one's scales */
	const float *sr0 = nullptr, *sr1 = nullptr;
	long long cpb = 1, cb = 0, nb = 0, nbc = 1;
	float sc0 = 1.0f, sc1 = 1.0f, nx0 = 1.0f, nx1 = 1.0f;
	/* W4: the zero points and BF16 scales of rows g and g + 8, as the
	 * words w4x4_bf16 takes: this group's (zz, ss) and the next one's */
	const uint8_t *zr0 = nullptr, *zr1 = nullptr;
	const unsigned short *wr0s = nullptr, *wr1s = nullptr;
	uint32_t zz0 = 0, zz1 = 0, nzz0 = 0, nzz1 = 0, ss0 = 0, ss1 = 0, nss0 = 0, nss1 = 0;
	if (FMT == GTC_W4) {
		const atlas_w4b_head_k *h0 = (const atlas_w4b_head_k *)wb0;
		const atlas_w4b_head_k *h1 = (const atlas_w4b_head_k *)wb1;
		nbc = h0->ng;
		cpb = h0->g >= K ? nch : h0->g / 32;
		wr0s = (const unsigned short *)(wb0 + h0->s_off) + r0 * nbc;
		wr1s = (const unsigned short *)(wb1 + h1->s_off) + r1 * nbc;
		zr0 = (const uint8_t *)(wb0 + h0->z_off) + r0 * nbc;
		zr1 = (const uint8_t *)(wb1 + h1->z_off) + r1 * nbc;
		cb = ch0 / cpb;
		nb = (cb + 1) * cpb;
		if (ch0 < ch1) {
			ss0 = w4_ss(__ldg(wr0s + cb)), ss1 = w4_ss(__ldg(wr1s + cb));
			zz0 = w4_zz(__ldg(zr0 + cb)), zz1 = w4_zz(__ldg(zr1 + cb));
			if (cb + 1 < nbc) {
				nss0 = w4_ss(__ldg(wr0s + cb + 1)), nss1 = w4_ss(__ldg(wr1s + cb + 1));
				nzz0 = w4_zz(__ldg(zr0 + cb + 1)), nzz1 = w4_zz(__ldg(zr1 + cb + 1));
			}
		}
	}
	/* FP4: the F8 scale pairs (groups 2 ch and 2 ch + 1) of rows g and
	 * g + 8, raw, the next chunk's loaded a chunk ahead; each blob's
	 * global multiplier (swiglu: gate and up have their own) */
	const unsigned short *fs0 = nullptr, *fs1 = nullptr;
	unsigned fp0 = 0, fp1 = 0;
	float gm0 = 0.0f, gm1 = 0.0f;
	if (FMT == GTC_FP4) {
		const atlas_fp4b_head_k *h0 = (const atlas_fp4b_head_k *)wb0;
		const atlas_fp4b_head_k *h1 = (const atlas_fp4b_head_k *)wb1;
		gm0 = h0->gm, gm1 = h1->gm;
		fs0 = (const unsigned short *)(wb0 + h0->s_off) + r0 * (h0->ng / 2);
		fs1 = (const unsigned short *)(wb1 + h1->s_off) + r1 * (h1->ng / 2);
		if (ch0 < ch1)
			fp0 = __ldg(fs0 + ch0), fp1 = __ldg(fs1 + ch0);
	}
	if (FMT == GTC_F8) {
		const atlas_f8b_head_k *h0 = (const atlas_f8b_head_k *)wb0;
		const atlas_f8b_head_k *h1 = (const atlas_f8b_head_k *)wb1;
		nbc = h0->nbc;
		cpb = h0->bi >= K ? nch : h0->bi / 32;
		sr0 = (const float *)(wb0 + h0->scale_off) + (r0 / h0->bo) * nbc;
		sr1 = (const float *)(wb1 + h1->scale_off) + (r1 / h1->bo) * nbc;
		cb = ch0 / cpb;
		nb = (cb + 1) * cpb;
		if (ch0 < ch1) {
			sc0 = __ldg(sr0 + cb), sc1 = __ldg(sr1 + cb);
			if (cb + 1 < nbc)
				nx0 = __ldg(sr0 + cb + 1), nx1 = __ldg(sr1 + cb + 1);
		}
	}
	ATLAS_PDL_ENTRY();
	/* prologue: stage st = chunk ch0 + st; group st holds its x (and,
	 * for st = 0, every weight copy above) */
#pragma unroll
	for (int st = 0; st < S; st++) {
		issue_x(ch0 + st, st);
		asm volatile("cp.async.commit_group;" ::: "memory");
	}

	/* one accumulator chain per range: the order gemm_inv.cu repeats */
	float acc[NT8][4];
#pragma unroll
	for (int j = 0; j < NT8; j++)
		acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
	int st = 0;
	/* lane (g, c)'s 8 bytes of k-step s in a slot: half c & 1 of unit
	 * 2s + (c >> 1) of row g, where the swizzle put it */
	const int rd0 = (4 * g + ((c >> 1) ^ (g & 2))) * 2 + (c & 1);
	const int rd1 = (4 * g + ((2 + (c >> 1)) ^ (g & 2))) * 2 + (c & 1);
	for (long long ch = ch0; ch < ch1; ch++) {
		asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
		__syncwarp();
		const uint2 *r = (const uint2 *)(wring + st * (2 + NT8) * 32);
		uint2 wa0, wb0, wa1, wb1;
		if (FMT == GTC_W4) {
			if (ch == nb) { /* into the next group */
				cb++;
				nb += cpb;
				ss0 = nss0, ss1 = nss1, zz0 = nzz0, zz1 = nzz1;
				if (cb + 1 < nbc) {
					nss0 = w4_ss(__ldg(wr0s + cb + 1));
					nss1 = w4_ss(__ldg(wr1s + cb + 1));
					nzz0 = w4_zz(__ldg(zr0 + cb + 1));
					nzz1 = w4_zz(__ldg(zr1 + cb + 1));
				}
			}
			/* 2-byte reads: unit 2s + (c >> 1), bytes 2 (c & 1) .. +1 */
			const uint16_t *r16 = (const uint16_t *)r;
			const int u0 = 4 * g + ((c >> 1) ^ (g & 2)), u1 = 4 * g + ((2 + (c >> 1)) ^ (g & 2));
			wa0 = w4x4_bf16(r16[8 * u0 + (c & 1)], zz0, ss0);
			wb0 = w4x4_bf16(r16[256 + 8 * u0 + (c & 1)], zz1, ss1);
			wa1 = w4x4_bf16(r16[8 * u1 + (c & 1)], zz0, ss0);
			wb1 = w4x4_bf16(r16[256 + 8 * u1 + (c & 1)], zz1, ss1);
		} else if (FMT == GTC_FP4) {
			const unsigned c0 = fp0, c1 = fp1;
			if (ch + 1 < ch1)
				fp0 = __ldg(fs0 + ch + 1), fp1 = __ldg(fs1 + ch + 1);
			const uint16_t *r16 = (const uint16_t *)r;
			const int u0 = 4 * g + ((c >> 1) ^ (g & 2)), u1 = 4 * g + ((2 + (c >> 1)) ^ (g & 2));
			/* k-step 0: group 2 ch (the low scale byte), k-step 1: 2 ch + 1 */
			wa0 = fp4x4_bf16(r16[8 * u0 + (c & 1)], atlas_fp4_scale(c0 & 0xff, gm0));
			wb0 = fp4x4_bf16(r16[256 + 8 * u0 + (c & 1)], atlas_fp4_scale(c1 & 0xff, gm1));
			wa1 = fp4x4_bf16(r16[8 * u1 + (c & 1)], atlas_fp4_scale(c0 >> 8, gm0));
			wb1 = fp4x4_bf16(r16[256 + 8 * u1 + (c & 1)], atlas_fp4_scale(c1 >> 8, gm1));
		} else if (FMT == GTC_F8) {
			if (ch == nb) { /* into the next scale block */
				cb++;
				nb += cpb;
				sc0 = nx0, sc1 = nx1;
				if (cb + 1 < nbc)
					nx0 = __ldg(sr0 + cb + 1), nx1 = __ldg(sr1 + cb + 1);
			}
			/* 4-byte reads: unit 2s + (c >> 1), half c & 1 */
			const uint32_t *r32 = (const uint32_t *)r;
			wa0 = f8x4_bf16(r32[2 * rd0 - (c & 1)], sc0);
			wb0 = f8x4_bf16(r32[128 + 2 * rd0 - (c & 1)], sc1);
			wa1 = f8x4_bf16(r32[2 * rd1 - (c & 1)], sc0);
			wb1 = f8x4_bf16(r32[128 + 2 * rd1 - (c & 1)], sc1);
		} else {
			wa0 = r[rd0], wb0 = r[64 + rd0], wa1 = r[rd1], wb1 = r[64 + rd1];
		}
#pragma unroll
		for (int j = 0; j < NT8; j++) {
			const uint2 x0 = r[(2 + j) * 64 + rd0], x1 = r[(2 + j) * 64 + rd1];
			atlas_mma_bf16(acc[j], wa0.x, wb0.x, wa0.y, wb0.y, x0.x, x0.y);
			atlas_mma_bf16(acc[j], wa1.x, wb1.x, wa1.y, wb1.y, x1.x, x1.y);
		}
		/* refill this stage (its values are in registers, consumed by the
		 * mmas above) with chunk ch + S, once every lane has read it */
		__syncwarp();
		issue_w(ch + S, st);
		issue_x(ch + S, st);
		asm volatile("cp.async.commit_group;" ::: "memory");
		st = st + 1 == S ? 0 : st + 1;
	}
	asm volatile("cp.async.wait_group 0;" ::: "memory");

	/* C fragment: acc[j][0..1] = (row g, tokens 8j+2c, +1), [2..3] = row g+8 */
#pragma unroll
	for (int j = 0; j < NT8; j++) {
		red[warp][g][8 * j + 2 * c] = acc[j][0];
		red[warp][g][8 * j + 2 * c + 1] = acc[j][1];
		red[warp][g + 8][8 * j + 2 * c] = acc[j][2];
		red[warp][g + 8][8 * j + 2 * c + 1] = acc[j][3];
	}
	__syncthreads();
	const int tt = (int)(T < 8 * NT8 ? T : 8 * NT8);
	const int per = fpt * tt; /* outputs of one warp tile */
	for (int i = threadIdx.x; i < rpb * per; i += blockDim.x) {
		const int tl = i / per, r = (i % per) / tt, t = i % tt;
		const long long f = (b * rpb + tl) * fpt + r;
		if (f >= N)
			continue;
		float v = 0.0f;
		for (int q = 0; q < wpr; q++) /* fixed order: deterministic */
			v += red[tl * wpr + q][r][t];
		if (a.swiglu) {
			float u = 0.0f;
			for (int q = 0; q < wpr; q++)
				u += red[tl * wpr + q][r + 8][t];
			v = atlas_bf(atlas_tobf(v));
			u = atlas_bf(atlas_tobf(u));
			v = v / (1.0f + expf(-v)) * u;
		} else if (a.seg[s].bias) {
			v += atlas_bf(((const bf16 *)a.seg[s].bias)[f]);
		}
		const long long o = (long long)t * N + f;
		if (a.out_f32)
			((float *)a.seg[s].out)[o] = v;
		else
			((bf16 *)a.seg[s].out)[o] = atlas_tobf(v);
	}
}

/* One entry point per token tile count and weight format. */
#define GTC_ENTRY(name, nt8, fmt)                                                              \
	extern "C" __global__ void __launch_bounds__(256) name(const __grid_constant__ atlas_gemv_args a) \
	{                                                                                      \
		gtc_impl<nt8, fmt>(a);                                                         \
	}

GTC_ENTRY(atlas_gemv_tc8, 1, GTC_BF16)
GTC_ENTRY(atlas_gemv_tc16, 2, GTC_BF16)
GTC_ENTRY(atlas_gemv_tc32, 4, GTC_BF16)
GTC_ENTRY(atlas_gemv_tc64, 8, GTC_BF16)
GTC_ENTRY(atlas_gemv_tc8_f8, 1, GTC_F8)
GTC_ENTRY(atlas_gemv_tc16_f8, 2, GTC_F8)
GTC_ENTRY(atlas_gemv_tc32_f8, 4, GTC_F8)
GTC_ENTRY(atlas_gemv_tc64_f8, 8, GTC_F8)
GTC_ENTRY(atlas_gemv_tc8_w4, 1, GTC_W4)
GTC_ENTRY(atlas_gemv_tc16_w4, 2, GTC_W4)
GTC_ENTRY(atlas_gemv_tc32_w4, 4, GTC_W4)
GTC_ENTRY(atlas_gemv_tc64_w4, 8, GTC_W4)
GTC_ENTRY(atlas_gemv_tc8_fp4, 1, GTC_FP4)
GTC_ENTRY(atlas_gemv_tc16_fp4, 2, GTC_FP4)
GTC_ENTRY(atlas_gemv_tc32_fp4, 4, GTC_FP4)
GTC_ENTRY(atlas_gemv_tc64_fp4, 8, GTC_FP4)
