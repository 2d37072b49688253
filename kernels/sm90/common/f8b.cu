/* f8b.cu - atlas_f8b_dequant: an ATLAS_DTYPE_F8B weight (lib/backend/
 * backend.h) written out as its BF16 matrix, W[n][k] = bf16(f32(q) *
 * s[n / bo][k / bi]), for the products too long for the FP8 GEMV
 * (cuda_ops.c), which then run the BF16 GEMMs on the copy: the same
 * matrix the GEMV multiplies by, so the same bits in batch-invariant mode.
 *
 * Launch: grid-stride over groups of 8 weights (K is a multiple of 8),
 * block 256; args (const void *blob, bf16 *out).
 */
#include "common.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#include <cuda_fp8.h>

extern "C" __global__ void atlas_f8b_dequant(const void *blob, bf16 *out)
{
	const atlas_f8b_head_k *h = (const atlas_f8b_head_k *)blob;
	const long long K = h->K, n8 = h->N * K / 8;
	const uint8_t *q = (const uint8_t *)blob + ATLAS_F8B_HEAD_BYTES;
	const float *s = (const float *)((const char *)blob + h->scale_off);
	ATLAS_PDL_ENTRY();
	const long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += stride) {
		const long long e = i * 8, r = e / K, k = e % K;
		const float sc = s[(unsigned)r / (unsigned)h->bo * h->nbc + (unsigned)k / (unsigned)h->bi];
		const uint2 v = *(const uint2 *)(q + e);
		__align__(16) bf16 o[8];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const uint32_t w = j < 4 ? v.x : v.y;
			const __half_raw hr =
			    __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)((w >> (8 * (j & 3))) & 0xff), __NV_E4M3);
			o[j] = __float2bfloat16_rn(__half2float(__half(hr)) * sc);
		}
		*(uint4 *)(out + e) = *(const uint4 *)o;
	}
}
