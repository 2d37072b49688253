/* common.cuh - device helpers shared by every kernel file of a target:
 * weight loads in any weight dtype, bf16 packing, warp and block
 * reductions.
 *
 * All .cu files of one target are compiled as one translation unit (the
 * Makefile's umbrella file includes each of them), so everything here is
 * `static __device__` or a template, behind one include guard, and the
 * .cu files keep their own helpers static too.
 */
#ifndef ATLAS_KERNELS_COMMON_CUH
#define ATLAS_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// enum atlas_dtype numbers of the weight dtypes the kernels accept.
#define ATLAS_WDT_F32 0
#define ATLAS_WDT_F16 1
#define ATLAS_WDT_BF16 2
#define ATLAS_WDT_F8_E4M3 3
#define ATLAS_WDT_U8 5
#define ATLAS_WDT_F8B 8 /* blobs of lib/backend/backend.h (matmul ops only) */
#define ATLAS_WDT_W4B 9 /* the same, 4-bit */
#define ATLAS_WDT_FP4B 10 /* the same, NVFP4 */

/* NVFP4 (ATLAS_DTYPE_FP4B, lib/backend/backend.h): W = bf16(f32(e2m1 *
 * f32(f8(s) * gm))). A group's scale as the kernels use it: f32(f8(s) *
 * gm) times 2^14 (exact: atlas_fp4b_init keeps |gm| under 2^100), the
 * factor atlas_fp4x2 leaves out. */
static __device__ __forceinline__ float atlas_fp4_scale(uint8_t s, float gm)
{
	const __half_raw hr = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)s, __NV_E4M3);
	const float f = __half2float(__half(hr)) * gm;
	return f * 16384.0f;
}

/* The E2M1 nibbles at bits 0..3 and 16..19 of p as floats e2m1 * 2^-14,
 * exactly: the magnitude bits (exponent, mantissa) shifted into FP16's
 * exponent and mantissa give e2m1 * 2^-14 (0.5 as the subnormal 2^-15),
 * the sign bit into bit 15. Times atlas_fp4_scale's value the product
 * is the real e2m1 * f32(f8 * gm), rounded once: the reference's FP32. */
static __device__ __forceinline__ float2 atlas_fp4x2(uint32_t p)
{
	const uint32_t h = ((p & 0x00070007u) << 9) | ((p & 0x00080008u) << 12);
	return __half22float2(*(const __half2 *)&h);
}

// Element i of a weight array in dtype wdt, as float.
static __device__ __forceinline__ float atlas_wload(const void *w, int wdt, long long i)
{
	if (wdt == ATLAS_WDT_BF16)
		return __bfloat162float(((const bf16 *)w)[i]);
	if (wdt == ATLAS_WDT_F16)
		return __half2float(((const __half *)w)[i]);
	return ((const float *)w)[i];
}

// Size in bytes of one weight element.
static __device__ __forceinline__ int atlas_wsize(int wdt)
{
	return wdt == ATLAS_WDT_F32 ? 4 : 2;
}

static __device__ __forceinline__ float atlas_bf(bf16 v)
{
	return __bfloat162float(v);
}

static __device__ __forceinline__ bf16 atlas_tobf(float v)
{
	return __float2bfloat16_rn(v);
}

// True when p is aligned to `a` bytes (a power of two).
static __device__ __forceinline__ bool atlas_aligned(const void *p, unsigned a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

// 16 bytes of eight bf16 values, for vectorized loads and stores.
union atlas_bf16x8 {
	uint4 u;       // the raw 16 bytes
	bf16 h[8];     // as bf16 values
};

// Unpack eight bf16 values to float.
static __device__ __forceinline__ void atlas_unpack8(uint4 u, float *f)
{
	atlas_bf16x8 v;
	v.u = u;
#pragma unroll
	for (int i = 0; i < 8; i++)
		f[i] = __bfloat162float(v.h[i]);
}

// Pack eight floats to bf16 (round to nearest even).
static __device__ __forceinline__ uint4 atlas_pack8(const float *f)
{
	atlas_bf16x8 v;
#pragma unroll
	for (int i = 0; i < 8; i++)
		v.h[i] = __float2bfloat16_rn(f[i]);
	return v.u;
}

// Eight consecutive weights starting at element i, as float. The caller
// guarantees the 16-byte (bf16/f16) or 32-byte (f32: two 16-byte loads)
// alignment of element i.
template <int WDT>
static __device__ __forceinline__ void atlas_wload8(const void *w, long long i, float *f)
{
	if (WDT == ATLAS_WDT_BF16) {
		atlas_unpack8(__ldg((const uint4 *)((const bf16 *)w + i)), f);
	} else if (WDT == ATLAS_WDT_F16) {
		union {
			uint4 u;
			__half h[8];
		} v;
		v.u = __ldg((const uint4 *)((const __half *)w + i));
#pragma unroll
		for (int j = 0; j < 8; j++)
			f[j] = __half2float(v.h[j]);
	} else {
		const float4 *p = (const float4 *)((const float *)w + i);
		float4 a = __ldg(p), b = __ldg(p + 1);
		f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
		f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
	}
}

// --- tensor-core and async-copy building blocks -------------------------

// d += A (16x16 bf16, row-major fragments a0..a3) * B (16x8 bf16, column
// fragments b0, b1), FP32 accumulators: mma.sync m16n8k16 (the PTX
// fragment layouts; gemv_tc.cu and moe.cu describe how they load them).
static __device__ __forceinline__ void atlas_mma_bf16(float (&d)[4], unsigned a0, unsigned a1,
						      unsigned a2, unsigned a3, unsigned b0,
						      unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ldmatrix.x4 (and its .trans form): four 8x8 b16 matrices from shared
// memory, row addresses given by lanes 0-7, 8-15, 16-23, 24-31, into
// the mma fragment layout (attention_prefill.cu, attention_inv.cuh).
static __device__ __forceinline__ void atlas_ldsm4(uint32_t *r, uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

static __device__ __forceinline__ void atlas_ldsm4t(uint32_t *r, uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

// 2^x (ex2.approx: relative error ~2^-22; 2^-inf = 0).
static __device__ __forceinline__ float atlas_exp2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

// Two floats as a bf16x2 register: lo in the low half (the lower column).
static __device__ __forceinline__ uint32_t atlas_pack_bf16x2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&v;
}

// The same with FP16 operands (decode_fused.cu's FP8 consumer: E4M3
// converts to FP16 exactly).
static __device__ __forceinline__ void atlas_mma_f16(float (&d)[4], unsigned a0, unsigned a1,
						     unsigned a2, unsigned a3, unsigned b0,
						     unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 bytes from global p to shared s, asynchronously (cp.async); when ok
// is false nothing is read and s gets zeros. cg: skip L1 (weights); ca:
// may stay in L1 (activations other warps of the SM read too).
static __device__ __forceinline__ void atlas_cp16_cg(void *s, const void *p, bool ok)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
			 (unsigned)__cvta_generic_to_shared(s)),
		     "l"(p), "r"(ok ? 16 : 0)
		     : "memory");
}

static __device__ __forceinline__ void atlas_cp16_ca(void *s, const void *p, bool ok)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(
			 (unsigned)__cvta_generic_to_shared(s)),
		     "l"(p), "r"(ok ? 16 : 0)
		     : "memory");
}

// --- programmatic dependent launch --------------------------------------
// The host launches most kernels with the PDL attribute (kernels/ABI.md):
// such a kernel may start while the previous one in the stream is still
// running, so it must call atlas_pdl_wait() before it touches memory that
// earlier kernels write (only immutable weights may be read before), and
// every block must reach the wait, even one that exits early: a grid
// completes only after its waits return, which is what makes the chain
// transitive. atlas_pdl_launch() lets the next kernel's blocks be
// scheduled as soon as every block of this grid has called it. Both are
// no-ops for a kernel launched without the attribute.
static __device__ __forceinline__ void atlas_pdl_wait(void)
{
	asm volatile("griddepcontrol.wait;" ::: "memory");
}

static __device__ __forceinline__ void atlas_pdl_launch(void)
{
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The usual entry of a kernel: let the next kernel launch, then wait for
// the previous one. Triggering first is safe (the next kernel's wait
// returns only when this whole grid has completed, and this grid completes
// only after every block's wait returned) and lets the next kernel's
// blocks take free SM slots, and issue their weight loads, while this one
// still runs. (Measured against wait-then-trigger on the H200: the same
// batch-1 step time, bench/h200-2026-12-02-f p1.)
#define ATLAS_PDL_ENTRY() \
	do { \
		atlas_pdl_launch(); \
		atlas_pdl_wait(); \
	} while (0)

// Ask L2 for `bytes` (a multiple of 16) at p (16-byte aligned) without
// waiting: one instruction for a whole slice (sm_90 bulk prefetch).
static __device__ __forceinline__ void atlas_prefetch_l2(const void *p, unsigned bytes)
{
	if (bytes)
		asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes)
			     : "memory");
}

// --- cp.async (sm_80+) ---------------------------------------------------
// 16 bytes global -> shared (dst a shared-window address), asynchronously;
// src_bytes 0 writes zeros and reads nothing.
static __device__ __forceinline__ void atlas_cp16(uint32_t dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
		     "r"(src_bytes)
		     : "memory");
}

static __device__ __forceinline__ void atlas_cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most N of this thread's committed groups are pending.
template <int N>
static __device__ __forceinline__ void atlas_cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// --- mbarriers and bulk copies (sm_90) -----------------------------------
// A ring of shared-memory stages filled by cp.async.bulk: the producer
// arms a stage's mbarrier with the bytes it will copy (expect), the copy
// engine completes them; consumers wait for the phase (parity) and
// arrive on the stage's "empty" barrier when done with it.

static __device__ __forceinline__ unsigned atlas_smem_addr(const void *p)
{
	return (unsigned)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void atlas_mbar_wait(unsigned long long *bar, unsigned parity)
{
	asm volatile("{\n\t.reg .pred P1;\n"
		     "ATLAS_MBAR_WAIT:\n\t"
		     "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
		     "@P1 bra ATLAS_MBAR_DONE;\n\t"
		     "bra ATLAS_MBAR_WAIT;\n"
		     "ATLAS_MBAR_DONE:\n\t}" ::"r"(atlas_smem_addr(bar)),
		     "r"(parity)
		     : "memory");
}

static __device__ __forceinline__ void atlas_mbar_arrive(unsigned long long *bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(atlas_smem_addr(bar)) : "memory");
}

static __device__ __forceinline__ void atlas_mbar_expect(unsigned long long *bar, unsigned bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(atlas_smem_addr(bar)),
		     "r"(bytes)
		     : "memory");
}

static __device__ __forceinline__ void atlas_bulk_copy(void *dst, const void *src, unsigned bytes,
						unsigned long long *bar)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
		     "[%0], [%1], %2, [%3];" ::"r"(atlas_smem_addr(dst)),
		     "l"(src), "r"(bytes), "r"(atlas_smem_addr(bar))
		     : "memory");
}

// The same with an L2 cache policy (from atlas_policy_evict_first): a
// stream read once (decode weights) need not push out what is read again.
static __device__ __forceinline__ void atlas_bulk_copy_hint(void *dst, const void *src,
							    unsigned bytes, unsigned long long *bar,
							    unsigned long long policy)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
		     "[%0], [%1], %2, [%3], %4;" ::"r"(atlas_smem_addr(dst)),
		     "l"(src), "r"(bytes), "r"(atlas_smem_addr(bar)), "l"(policy)
		     : "memory");
}

// An L2 policy: lines this access brings in are the first to go.
static __device__ __forceinline__ unsigned long long atlas_policy_evict_first(void)
{
	unsigned long long p;
	asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
	return p;
}

// --- reductions --------------------------------------------------------
// Block reductions need blockDim.x to be a multiple of 32 (every launch
// shape of kernels/ABI.md is) and must be reached by every thread.

static __device__ __forceinline__ float atlas_warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ double atlas_warp_sum_d(double v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float atlas_warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// Sum of v over the block, returned to every thread. `tmp` is 32 floats
// of shared memory; the function synchronizes before reusing it, so one
// buffer serves successive calls.
static __device__ __forceinline__ float atlas_block_sum(float v, float *tmp)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nw = (blockDim.x + 31) >> 5;
	v = atlas_warp_sum(v);
	__syncthreads(); // earlier readers of tmp are done
	if (lane == 0)
		tmp[warp] = v;
	__syncthreads();
	v = lane < nw ? tmp[lane] : 0.0f;
	return atlas_warp_sum(v);
}

static __device__ __forceinline__ double atlas_block_sum_d(double v, double *tmp)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nw = (blockDim.x + 31) >> 5;
	v = atlas_warp_sum_d(v);
	__syncthreads();
	if (lane == 0)
		tmp[warp] = v;
	__syncthreads();
	v = lane < nw ? tmp[lane] : 0.0;
	return atlas_warp_sum_d(v);
}

static __device__ __forceinline__ float atlas_block_max(float v, float *tmp)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nw = (blockDim.x + 31) >> 5;
	v = atlas_warp_max(v);
	__syncthreads();
	if (lane == 0)
		tmp[warp] = v;
	__syncthreads();
	v = lane < nw ? tmp[lane] : -INFINITY;
	return atlas_warp_max(v);
}

// --- one attention head's q/k prologue --------------------------------
// Per-head RMS norm (nw NULL: none; the result rounded to bf16, as the
// rmsnorm op rounds it) and rotate-half rotary embedding at position p of
// one head row of hd values, by one warp: on entry x0[u], x1[u] hold dims
// i and i + hd/2 of the row (i = lane + 32 u; zero where i >= hd/2), on
// return the rotated values, not yet rounded. The angle is (float)p *
// inv_freq[i] with the accurate sincosf (angles reach 1e5 rad). Shared by
// atlas_qk_rope_store and atlas_decode_fused so that both compute the
// same bits.
template <int PAIRS>
static __device__ __forceinline__ void atlas_head_norm_rope(float (&x0)[PAIRS], float (&x1)[PAIRS],
							     long long hd, const void *nw, int nwdt,
							     float eps, float p,
							     const float *inv_freq)
{
	const int lane = threadIdx.x & 31;
	const long long half = hd / 2;
	if (nw) {
		float ss = 0.0f;
#pragma unroll
		for (int u = 0; u < PAIRS; u++)
			ss += x0[u] * x0[u] + x1[u] * x1[u];
		ss = atlas_warp_sum(ss);
		const float inv = 1.0f / sqrtf(ss / (float)hd + eps);
#pragma unroll
		for (int u = 0; u < PAIRS; u++) {
			const long long i = lane + 32 * u;
			if (i < half) {
				x0[u] = atlas_bf(atlas_tobf(x0[u] * inv * atlas_wload(nw, nwdt, i)));
				x1[u] = atlas_bf(atlas_tobf(x1[u] * inv * atlas_wload(nw, nwdt, i + half)));
			}
		}
	}
#pragma unroll
	for (int u = 0; u < PAIRS; u++) {
		const long long i = lane + 32 * u;
		if (i < half) {
			float sn, cs;
			sincosf(p * inv_freq[i], &sn, &cs);
			const float r0 = x0[u] * cs - x1[u] * sn;
			const float r1 = x1[u] * cs + x0[u] * sn;
			x0[u] = r0, x1[u] = r1;
		}
	}
}

/* The moe op's expert blocks (moe.cu; a is its struct atlas_moe_args):
 * grid row blockIdx.y works for the slot-th chosen expert, *e, whose
 * assignments are list[*g0 .. *g0 + *gn). False when fewer experts were
 * chosen this step (the block has nothing to do). */
template <typename MoeArgs>
static __device__ __forceinline__ bool atlas_moe_group(const MoeArgs &a, int *e, int *g0, int *gn)
{
	const int slot = blockIdx.y;
	if (slot >= a.act[a.E])
		return false;
	*e = a.act[slot];
	*g0 = a.off[*e];
	*gn = a.off[*e + 1] - *g0;
	return true;
}

#endif
