/* f8b.cu - atlas_f8b_dequant, atlas_w4b_dequant and atlas_fp4b_dequant: a quantized weight
 * blob (lib/backend/backend.h) as BF16. atlas_f8b_dequant: an
 * ATLAS_DTYPE_F8B weight (lib/backend/
 * backend.h) written out as its BF16 matrix, W[n][k] = bf16(f32(q) *
 * s[n / bo][k / bi]), for the products too long for the FP8 GEMV
 * (cuda_ops.c), which then run the BF16 GEMMs on the copy: the same
 * matrix the GEMV multiplies by, so the same bits in batch-invariant mode.
 *
 * Launch: grid ≤ N blocks of 256 threads, block b taking rows b, b +
 * gridDim.x, ...; a thread converts groups of 8 weights of its row (K is
 * a multiple of 8), so no index needs a 64-bit division; args (const void
 * *blob, bf16 *out).
 *
 * atlas_fp8_act_quant: the activations of a W8A8 product
 * (atlas_gemm_tc_f8) as FP8 E4M3, a scale per row and 128 columns:
 * s = amax / 448 over the group (1 when it is all zeros), q =
 * e4m3_satfinite(x * (448 / amax)). Args (const bf16 *x, uint8 *q, float
 * *xs, long long T, long long K), x and q [T, K] (K a multiple of 8, x
 * 16-byte aligned), xs [T][ceil(K / 128)]; a half warp a group, 16
 * groups a block of 256, any grid (grid-stride).
 *
 * atlas_w4b_dequant: an ATLAS_DTYPE_W4B weight the same way, W[n][k] =
 * bf16(f32(q - z[n][k / g]) * f32(s[n][k / g])) (s BF16), 8 weights (4 bytes) a thread
 * per step (K is a multiple of 32); same launch and arguments.
 *
 * atlas_fp4b_dequant: an ATLAS_DTYPE_FP4B (NVFP4) weight the same way,
 * W[n][k] = bf16(f32(e2m1(q) * f32(f8(s[n][k / 16]) * gm))), 8 weights
 * (4 bytes) a thread per step (K is a multiple of 32); same launch and
 * arguments.
 */
#include "common.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#include <cuda_fp8.h>

extern "C" __global__ void atlas_f8b_dequant(const void *blob, bf16 *out)
{
	const atlas_f8b_head_k *h = (const atlas_f8b_head_k *)blob;
	const long long N = h->N, K = h->K;
	const unsigned bo = (unsigned)h->bo, bi = (unsigned)h->bi, k8 = (unsigned)(K / 8);
	const uint8_t *q = (const uint8_t *)blob + ATLAS_F8B_HEAD_BYTES;
	const float *s = (const float *)((const char *)blob + h->scale_off);
	ATLAS_PDL_ENTRY();
	for (long long r = blockIdx.x; r < N; r += gridDim.x) {
		const float *sr = s + (unsigned)r / bo * h->nbc;
		const uint2 *qr = (const uint2 *)(q + r * K);
		uint4 *orow = (uint4 *)(out + r * K);
		for (unsigned i = threadIdx.x; i < k8; i += blockDim.x) {
			const float sc = sr[8 * i / bi];
			const uint2 v = qr[i];
			__align__(16) bf16 o[8];
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const uint32_t w = j < 4 ? v.x : v.y;
				const __half_raw hr = __nv_cvt_fp8_to_halfraw(
				    (__nv_fp8_storage_t)((w >> (8 * (j & 3))) & 0xff), __NV_E4M3);
				o[j] = __float2bfloat16_rn(__half2float(__half(hr)) * sc);
			}
			orow[i] = *(const uint4 *)o;
		}
	}
}

extern "C" __global__ void atlas_w4b_dequant(const void *blob, bf16 *out)
{
	const atlas_w4b_head_k *h = (const atlas_w4b_head_k *)blob;
	const long long N = h->N, K = h->K;
	const unsigned g = (unsigned)h->g, k8 = (unsigned)(K / 8);
	const uint8_t *q = (const uint8_t *)blob + ATLAS_W4B_HEAD_BYTES;
	const uint8_t *z = (const uint8_t *)blob + h->z_off;
	const bf16 *s = (const bf16 *)((const char *)blob + h->s_off);
	ATLAS_PDL_ENTRY();
	for (long long r = blockIdx.x; r < N; r += gridDim.x) {
		const bf16 *sr = s + r * h->ng;
		const uint8_t *zr = z + r * h->ng;
		const uint32_t *qr = (const uint32_t *)(q + r * (K / 2));
		uint4 *orow = (uint4 *)(out + r * K);
		for (unsigned i = threadIdx.x; i < k8; i += blockDim.x) {
			const unsigned grp = 8 * i / g;
			const float sc = __bfloat162float(sr[grp]), zf = 8388608.0f + zr[grp];
			const uint32_t v = qr[i];
			__align__(16) bf16 o[8];
#pragma unroll
			for (int j = 0; j < 8; j++)
				o[j] = __float2bfloat16_rn(
				    (__int_as_float(0x4b000000 | ((v >> (4 * j)) & 15u)) - zf) * sc);
			orow[i] = *(const uint4 *)o;
		}
	}
}

extern "C" __global__ void atlas_fp4b_dequant(const void *blob, bf16 *out)
{
	const atlas_fp4b_head_k *h = (const atlas_fp4b_head_k *)blob;
	const long long N = h->N, K = h->K;
	const unsigned k8 = (unsigned)(K / 8);
	const float gm = h->gm;
	const uint8_t *q = (const uint8_t *)blob + ATLAS_FP4B_HEAD_BYTES;
	const uint8_t *s = (const uint8_t *)blob + h->s_off;
	ATLAS_PDL_ENTRY();
	for (long long r = blockIdx.x; r < N; r += gridDim.x) {
		const uint8_t *sr = s + r * h->ng;
		const uint32_t *qr = (const uint32_t *)(q + r * (K / 2));
		uint4 *orow = (uint4 *)(out + r * K);
		for (unsigned i = threadIdx.x; i < k8; i += blockDim.x) {
			const float sc = atlas_fp4_scale(sr[i / 2], gm);
			const uint32_t v = qr[i];
			__align__(16) bf16 o[8];
			/* nibbles j and j + 4 at bits 4j and 4j + 16 */
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const float2 f = atlas_fp4x2(v >> (4 * j));
				o[j] = __float2bfloat16_rn(f.x * sc);
				o[j + 4] = __float2bfloat16_rn(f.y * sc);
			}
			orow[i] = *(const uint4 *)o;
		}
	}
}

extern "C" __global__ void atlas_fp8_act_quant(const bf16 *x, uint8_t *q, float *xs, long long T,
					       long long K)
{
	ATLAS_PDL_ENTRY();
	/* a half warp a group: lane l of it takes columns 8l .. 8l + 7 (16
	 * bytes in, 8 out; K % 8 == 0, so all eight or none) */
	const int lane = threadIdx.x & 15;
	const long long nk = (K + 127) / 128, groups = T * nk;
	/* the loop runs per warp (both halves together: the shuffles take
	 * the whole warp), a half past the last group doing nothing */
	for (long long g0 = (long long)blockIdx.x * 16 + (threadIdx.x >> 5) * 2; g0 < groups;
	     g0 += (long long)gridDim.x * 16) {
		const long long g = g0 + ((threadIdx.x >> 4) & 1);
		const bool live = g < groups;
		const long long t = live ? g / nk : 0, kb = live ? g - t * nk : 0;
		const long long k = live ? kb * 128 + 8 * lane : K;
		float v[8];
		if (k < K)
			atlas_unpack8(*(const uint4 *)(x + t * K + k), v);
		else
			for (int i = 0; i < 8; i++)
				v[i] = 0.0f;
		float m = 0.0f;
#pragma unroll
		for (int i = 0; i < 8; i++)
			m = fmaxf(m, fabsf(v[i]));
#pragma unroll
		for (int o = 8; o > 0; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
		const float r = m > 0.0f ? 448.0f / m : 1.0f;
		if (k < K) {
			uint32_t w[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				w[i] = __nv_cvt_float2_to_fp8x2(make_float2(v[2 * i] * r, v[2 * i + 1] * r),
								__NV_SATFINITE, __NV_E4M3);
			*(uint2 *)(q + t * K + k) = make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
		}
		if (lane == 0 && live)
			xs[g] = m > 0.0f ? m / 448.0f : 1.0f;
	}
}
