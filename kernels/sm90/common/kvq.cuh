/* kvq.cuh - the quantized KV cache formats on the device (layouts and
 * rules in lib/backend/kvq.h; this file must write the bytes the host
 * reference writes): format numbers, the q4 codebook, the Hadamard
 * rotation of rows in shared memory, and the store of one head row by a
 * warp.
 */
#ifndef ATLAS_KERNELS_KVQ_CUH
#define ATLAS_KERNELS_KVQ_CUH

#include <cuda_fp8.h>

#include "common.cuh"

// enum atlas_kv_dtype numbers (backend.h); 0 and 1 are BF16 on CUDA.
#define KVQ_FP8 2
#define KVQ_Q4 3
#define KVQ_Q4_BLOCK 32

// The 16-level Lloyd-Max quantizer of N(0, 1) and its thresholds
// (kvq.c's tables, the same literals).
static __constant__ float kvq_level[16] = {
    -2.7326f, -2.0690f, -1.6181f, -1.2562f, -0.9424f, -0.6568f, -0.3881f, -0.1284f,
    0.1284f,  0.3881f,  0.6568f,  0.9424f,  1.2562f,  1.6181f,  2.0690f,  2.7326f,
};
static __constant__ float kvq_thresh[15] = {
    -2.4008f, -1.8435f, -1.4371f, -1.0993f, -0.7996f, -0.5224f, -0.2582f, 0.0f,
    0.2582f,  0.5224f,  0.7996f,  1.0993f,  1.4371f,  1.8435f,  2.4008f,
};

// Bytes of a row's scale area and of the whole row (kvq.h).
static __device__ __forceinline__ long long kvq_scale_bytes(int kvf, long long Hkv, long long hd)
{
	const long long b = kvf == KVQ_FP8 ? Hkv * 4 : Hkv * hd / KVQ_Q4_BLOCK * 2;
	return (b + 15) / 16 * 16;
}
static __device__ __forceinline__ long long kvq_row_bytes(int kvf, long long Hkv, long long hd)
{
	return kvq_scale_bytes(kvf, Hkv, hd) + (kvf == KVQ_FP8 ? Hkv * hd : Hkv * hd / 2);
}

// x = Hadamard(x) / sqrt(hd) for `rows` rows of stride ld floats in
// shared memory, by `n` threads (index tid); each butterfly is the one
// the host's serial loop does (a + b, a - b of the same two values), so
// the result has the host's bits. Ends with `sync`.
template <typename Sync>
static __device__ __forceinline__ void kvq_rotate(float *x, int rows, int ld, int hd, int tid,
						  int n, Sync sync)
{
	const int half = hd / 2;
	for (int h = 1; h < hd; h <<= 1) {
		for (int k = tid; k < rows * half; k += n) {
			const int r = k / half, b = k - r * half;
			const int i = r * ld + (b / h) * 2 * h + (b % h);
			const float a = x[i], c = x[i + h];
			x[i] = a + c;
			x[i + h] = a - c;
		}
		sync();
	}
	const float s = (float)(1.0 / sqrt((double)hd));
	for (int k = tid; k < rows * hd; k += n) {
		const int r = k / hd;
		x[r * ld + k - r * hd] *= s;
	}
	sync();
}

struct kvq_syncwarp {
	__device__ void operator()() const { __syncwarp(); }
};
struct kvq_syncthreads {
	__device__ void operator()() const { __syncthreads(); }
};

// One head row x[0..hd) (FP32 in the warp's own shared memory; clobbered)
// stored as head h of the cache row at `row` in format kvf, by one warp.
static __device__ void kvq_store_head(float *x, int hd, unsigned char *row, long long h,
				      long long Hkv, int kvf, int lane)
{
	unsigned char *data = row + kvq_scale_bytes(kvf, Hkv, hd);
	if (kvf == KVQ_FP8) {
		float amax = 0.0f;
		for (int i = lane; i < hd; i += 32)
			amax = fmaxf(amax, fabsf(x[i]));
		amax = atlas_warp_max(amax);
		float s = 1.0f, inv = 1.0f;
		if (amax > 0.0f && isfinite(amax)) {
			s = amax / 448.0f;
			inv = 448.0f / amax;
		}
		if (lane == 0)
			((float *)row)[h] = s;
		for (int i = lane; i < hd; i += 32)
			data[h * hd + i] = (unsigned char)__nv_cvt_float_to_fp8(x[i] * inv, __NV_SATFINITE,
										   __NV_E4M3);
		return;
	}
	kvq_rotate(x, 1, hd, hd, lane, 32, kvq_syncwarp());
	/* lane b codes block b, serially, as the host does */
	const int nb = hd / KVQ_Q4_BLOCK;
	if (lane >= nb)
		return;
	const float *y = x + lane * KVQ_Q4_BLOCK;
	float ss = 0.0f;
	for (int j = 0; j < KVQ_Q4_BLOCK; j++)
		ss = fmaf(y[j], y[j], ss);
	float s = sqrtf(ss * (1.0f / KVQ_Q4_BLOCK));
	if (!(s <= 65504.0f))
		s = isnan(s) ? 0.0f : 65504.0f;
	const __half sh = __float2half_rn(s);
	const float sd = __half2float(sh);
	const float inv = sd > 0.0f ? 1.0f / sd : 0.0f;
	((__half *)row)[h * nb + lane] = sh;
	uint32_t w[4];
#pragma unroll
	for (int q = 0; q < 4; q++) {
		uint32_t word = 0;
#pragma unroll
		for (int u = 0; u < 8; u++) {
			const float v = y[q * 8 + u] * inv;
			int c = 0;
#pragma unroll
			for (int i = 0; i < 15; i++)
				c += kvq_thresh[i] < v;
			word |= (uint32_t)c << (4 * u);
		}
		w[q] = word;
	}
	*(uint4 *)(data + h * hd / 2 + lane * KVQ_Q4_BLOCK / 2) = make_uint4(w[0], w[1], w[2], w[3]);
}

// Eight fp8 codes (8 bytes, dims 8v..8v+7) times s.
static __device__ __forceinline__ void kvq_unpack8_fp8(uint2 u, float s, float *f)
{
	const uint32_t w[2] = {u.x, u.y};
#pragma unroll
	for (int q = 0; q < 2; q++)
#pragma unroll
		for (int b = 0; b < 4; b += 2) {
			const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
			    (__nv_fp8x2_storage_t)((w[q] >> (8 * b)) & 0xffffu), __NV_E4M3);
			const float2 p = __half22float2(*(const __half2 *)&h);
			f[4 * q + b] = p.x * s;
			f[4 * q + b + 1] = p.y * s;
		}
}

// Eight q4 codes (4 bytes) as levels times s, the levels from lv (a
// shared-memory copy of kvq_level: the codes differ by lane).
static __device__ __forceinline__ void kvq_unpack8_q4(uint32_t u, float s, const float *lv, float *f)
{
#pragma unroll
	for (int j = 0; j < 8; j++)
		f[j] = lv[(u >> (4 * j)) & 15u] * s;
}

#endif
