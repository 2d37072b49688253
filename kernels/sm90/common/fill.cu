/* fill.cu - atlas_fill_random: random weights made on the device, for
 * benchmarks at real model shapes (speed does not depend on the values,
 * and generating 16 GB on the host and copying it would take minutes).
 *
 * Element i of out (dtype wdt) gets lo + (hi - lo) * u_i with u_i uniform
 * in [0, 1), from a counter-based hash of (seed, i): the result depends
 * only on (seed, i), never on the launch shape, so any grid fills the
 * same values. grid min(ceil(n/256), 65535*8), block 256, grid-stride.
 */
#include "common.cuh"

#include <cuda_fp8.h>

/* splitmix64's finalizer: a bijective 64-bit mix. */
static __device__ __forceinline__ unsigned long long fill_mix(unsigned long long z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

extern "C" __global__ void atlas_fill_random(void *out, int wdt, long long n,
					     unsigned long long seed, float lo, float hi)
{
	ATLAS_PDL_ENTRY();
	const long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		unsigned long long h = fill_mix(seed * 0x9e3779b97f4a7c15ull + (unsigned long long)i);
		float u = (float)(h >> 40) * (1.0f / 16777216.0f); /* 24 bits: [0, 1) */
		float v = lo + (hi - lo) * u;
		if (wdt == ATLAS_WDT_BF16)
			((bf16 *)out)[i] = atlas_tobf(v);
		else if (wdt == ATLAS_WDT_F16)
			((__half *)out)[i] = __float2half_rn(v);
		else if (wdt == ATLAS_WDT_F8_E4M3) /* rounded to nearest, saturated */
			((__nv_fp8_storage_t *)out)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
		else if (wdt == ATLAS_WDT_U8) /* rounded down, clamped to 0..255 */
			((unsigned char *)out)[i] = (unsigned char)fminf(fmaxf(floorf(v), 0.0f), 255.0f);
		else
			((float *)out)[i] = v;
	}
}
