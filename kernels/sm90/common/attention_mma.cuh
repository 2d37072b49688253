/* attention_mma.cuh - the tensor-core pieces both flash-attention
 * kernels use (attention_prefill.cu, attention_inv.cu): ldmatrix loads,
 * the m16n8k16 BF16 product, base-2 exponentials and BF16 packing. One
 * definition, so that the invariant kernels' arithmetic is the same code
 * wherever it runs. (The kernels are compiled as one translation unit per
 * target: see scripts/build-kernels.sh.) */
#ifndef ATLAS_ATTENTION_MMA_CUH
#define ATLAS_ATTENTION_MMA_CUH

#include "common.cuh"

#define AP_BN 64 /* keys a tile */
#define AP_PAD 8 /* bf16 elements of padding a shared row (16 bytes: ldmatrix's
		  * 8 row addresses fall in distinct banks) */

/* log2(e): softmax in base 2 */
#define AP_LOG2E 1.4426950408889634f

static __device__ __forceinline__ uint32_t ap_smem(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void ap_ldsm4(uint32_t *r, uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

static __device__ __forceinline__ void ap_ldsm4t(uint32_t *r, uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

/* d += a b: A 16x16 row-major (4 regs), B 16x8 column-major (2 regs),
 * D 16x8 FP32 (4 regs). */
static __device__ __forceinline__ void ap_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 2^x (ex2.approx: relative error ~2^-22; 2^-inf = 0). */
static __device__ __forceinline__ float ap_exp2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

/* Two floats as a bf16x2 register: lo in the low half (the lower column). */
static __device__ __forceinline__ uint32_t ap_pack(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&v;
}

/* Copy one AP_BN-row tile (row i from base + offs[i], or zeros where
 * offs[i] < 0) into buf [AP_BN][HD + AP_PAD], 16 bytes a cp.async, by
 * threads 0 .. NT-1. */
template <int HD, int NT>
static __device__ __forceinline__ void ap_load_tile(bf16 *buf, const bf16 *base,
						    const long long *offs, int tid)
{
	constexpr int CH = HD / 8; /* 16-byte chunks a row */
	constexpr int LDS = HD + AP_PAD;
#pragma unroll
	for (int i = 0; i < AP_BN * CH / NT; i++) {
		const int c = tid + i * NT;
		const int r = c / CH, ch = c % CH;
		const long long o = offs[r];
		const bf16 *src = o >= 0 ? base + o + ch * 8 : base;
		atlas_cp16(ap_smem(buf + r * LDS + ch * 8), src, o >= 0 ? 16 : 0);
	}
}

/* Element offsets of the keys j0 .. j0+AP_BN-1 of sequence row `table`
 * (keys outside [kmin, kmax]: -1), written by threads 0 .. nt-1. */
static __device__ __forceinline__ void ap_offsets(long long *offs, const int *table, int j0,
						  int kmin, int kmax, int bs, long long ld,
						  long long kvoff, int tid, int nt)
{
	for (int i = tid; i < AP_BN; i += nt) {
		const int key = j0 + i;
		long long o = -1;
		if (key >= kmin && key <= kmax)
			o = ((long long)table[key / bs] * bs + key % bs) * ld + kvoff;
		offs[i] = o;
	}
}

#endif
