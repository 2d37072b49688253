/* norm.cu - atlas_rmsnorm and atlas_add_rmsnorm, the baseline versions.
 *
 * grid R, block 256 (any multiple of 32 works): block r normalizes row r.
 * Two passes over the row: the sum of squares (a block reduction), then
 * out = x * rsqrt(mean + eps) * w. Each element is read and written by the
 * same thread in both passes, which is what makes out aliasing x (either
 * op) or res (add_rmsnorm) safe. Cost: ~3 * 2 * D bytes per row plus the
 * weight (read from L2 after the first rows).
 */
#include "common.cuh"

/* out[i] = v[i] * inv * w[i] for this thread's elements of one row. */
static __device__ __forceinline__ void norm_scale(bf16 *o, const bf16 *v, const void *w, int wdt,
						  long long D, float inv)
{
	for (long long i = threadIdx.x; i < D; i += blockDim.x)
		o[i] = atlas_tobf(atlas_bf(v[i]) * inv * atlas_wload(w, wdt, i));
}

extern "C" __global__ void atlas_rmsnorm(bf16 *out, const bf16 *x, const void *w, int wdt,
					 long long R, long long D, float eps)
{
	ATLAS_PDL_ENTRY();
	__shared__ float tmp[32];
	const long long r = blockIdx.x;
	if (r >= R)
		return;
	const bf16 *v = x + r * D;
	float ss = 0.0f;
	for (long long i = threadIdx.x; i < D; i += blockDim.x) {
		float f = atlas_bf(v[i]);
		ss += f * f;
	}
	ss = atlas_block_sum(ss, tmp);
	const float inv = 1.0f / sqrtf(ss / (float)D + eps);
	norm_scale(out + r * D, v, w, wdt, D, inv);
}

extern "C" __global__ void atlas_add_rmsnorm(bf16 *res, const bf16 *x, bf16 *out, const void *w,
					     int wdt, long long R, long long D, float eps)
{
	ATLAS_PDL_ENTRY();
	__shared__ float tmp[32];
	const long long r = blockIdx.x;
	if (r >= R)
		return;
	bf16 *rv = res + r * D;
	const bf16 *xv = x + r * D;
	float ss = 0.0f;
	for (long long i = threadIdx.x; i < D; i += blockDim.x) {
		/* the sum of squares sees the residual as stored (bf16) */
		bf16 s = atlas_tobf(atlas_bf(rv[i]) + atlas_bf(xv[i]));
		rv[i] = s;
		float f = atlas_bf(s);
		ss += f * f;
	}
	ss = atlas_block_sum(ss, tmp);
	const float inv = 1.0f / sqrtf(ss / (float)D + eps);
	norm_scale(out + r * D, rv, w, wdt, D, inv);
}
