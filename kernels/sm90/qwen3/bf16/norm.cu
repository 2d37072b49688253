/* norm.cu (qwen3/bf16) - atlas_rmsnorm and atlas_add_rmsnorm for Qwen3,
 * shadowing common/norm.cu: same entry points, same launch (grid R, block
 * 256; block 32 also valid for D <= 256), same results within bf16
 * rounding (only the order of the FP32 sum differs).
 *
 * Qwen3 normalizes every q and k head (rows of head_dim 128, R = T * H)
 * besides the hidden rows (D 1024..5120). Both are made single pass: each
 * thread loads its 16-byte vectors of the row into registers once, the
 * sum of squares is reduced, and the same registers are scaled and
 * stored, so x (and res) cross memory once instead of twice. Rows of at
 * most 256 elements are done by warp 0 alone with a shuffle reduction
 * (no shared memory, no barrier); the other warps leave at once. Rows
 * that are not a multiple of 8, misaligned or longer than NORM_VPT
 * vectors per thread take the two-pass element loop of common/.
 */
#include "../../common/common.cuh"

#define NORM_VPT 4 /* 16-byte vectors per thread: D <= 8192 at block 256 */

/* Scale eight values by inv and the weights w[i..i+8), pack to bf16. */
static __device__ __forceinline__ uint4 qn_scale8(const float *v, const void *w, int wdt,
						  bool wvec, long long i, float inv)
{
	float wf[8], o[8];
	if (wvec) {
		atlas_wload8<ATLAS_WDT_BF16>(w, i, wf);
	} else {
#pragma unroll
		for (int j = 0; j < 8; j++)
			wf[j] = atlas_wload(w, wdt, i + j);
	}
#pragma unroll
	for (int j = 0; j < 8; j++)
		o[j] = v[j] * inv * wf[j];
	return atlas_pack8(o);
}

/* The row in registers: x (and res) vectors loaded, the residual sum
 * rounded and stored when res != NULL; returns this thread's sum of
 * squares. Vector v of this thread is vector first + v * step of the row. */
static __device__ __forceinline__ float qn_load(uint4 (&rv)[NORM_VPT], bf16 *res, const bf16 *x,
						long long nv, long long first, long long step)
{
	float ss = 0.0f;
#pragma unroll
	for (int v = 0; v < NORM_VPT; v++) {
		const long long i = first + v * step;
		if (i >= nv)
			break;
		uint4 a = ((const uint4 *)x)[i];
		float f[8];
		atlas_unpack8(a, f);
		if (res) {
			float r[8];
			atlas_unpack8(((const uint4 *)res)[i], r);
#pragma unroll
			for (int j = 0; j < 8; j++)
				f[j] += r[j];
			a = atlas_pack8(f);
			((uint4 *)res)[i] = a;
			atlas_unpack8(a, f); /* the sum of squares sees the stored res */
		}
		rv[v] = a;
#pragma unroll
		for (int j = 0; j < 8; j++)
			ss = fmaf(f[j], f[j], ss);
	}
	return ss;
}

static __device__ __forceinline__ void qn_store(const uint4 (&rv)[NORM_VPT], bf16 *out,
						const void *w, int wdt, long long nv,
						long long first, long long step, float inv)
{
	const bool wvec = wdt == ATLAS_WDT_BF16 && atlas_aligned(w, 16);
#pragma unroll
	for (int v = 0; v < NORM_VPT; v++) {
		const long long i = first + v * step;
		if (i >= nv)
			break;
		float f[8];
		atlas_unpack8(rv[v], f);
		((uint4 *)out)[i] = qn_scale8(f, w, wdt, wvec, i * 8, inv);
	}
}

/* The two-pass element loop, as common/norm.cu, for the rows the
 * vector paths do not take. */
static __device__ void qn_generic(bf16 *res, const bf16 *x, bf16 *out, const void *w, int wdt,
				  long long D, float eps, float *tmp)
{
	const bf16 *v = res ? res : x;
	float ss = 0.0f;
	for (long long i = threadIdx.x; i < D; i += blockDim.x) {
		float f = atlas_bf(x[i]);
		if (res) {
			bf16 s = atlas_tobf(atlas_bf(res[i]) + f);
			res[i] = s;
			f = atlas_bf(s);
		}
		ss += f * f;
	}
	ss = atlas_block_sum(ss, tmp);
	const float inv = 1.0f / sqrtf(ss / (float)D + eps);
	for (long long i = threadIdx.x; i < D; i += blockDim.x)
		out[i] = atlas_tobf(atlas_bf(v[i]) * inv * atlas_wload(w, wdt, i));
}

/* One row; res == NULL for plain rmsnorm. */
static __device__ __forceinline__ void qn_row(bf16 *res, const bf16 *x, bf16 *out, const void *w,
					      int wdt, long long D, float eps, float *tmp)
{
	const bool vec = D % 8 == 0 && atlas_aligned(x, 16) && atlas_aligned(out, 16) &&
			 (!res || atlas_aligned(res, 16));
	const long long nv = D / 8;
	uint4 rv[NORM_VPT];
	if (vec && nv <= 32) {
		/* warp 0 alone: one vector per lane */
		if (threadIdx.x >= 32)
			return;
		float ss = atlas_warp_sum(qn_load(rv, res, x, nv, threadIdx.x, 32));
		const float inv = 1.0f / sqrtf(ss / (float)D + eps);
		qn_store(rv, out, w, wdt, nv, threadIdx.x, 32, inv);
	} else if (vec && nv <= (long long)NORM_VPT * blockDim.x) {
		float ss = atlas_block_sum(qn_load(rv, res, x, nv, threadIdx.x, blockDim.x), tmp);
		const float inv = 1.0f / sqrtf(ss / (float)D + eps);
		qn_store(rv, out, w, wdt, nv, threadIdx.x, blockDim.x, inv);
	} else {
		qn_generic(res, x, out, w, wdt, D, eps, tmp);
	}
}

extern "C" __global__ void atlas_rmsnorm(bf16 *out, const bf16 *x, const void *w, int wdt,
					 long long R, long long D, float eps)
{
	ATLAS_PDL_ENTRY();
	__shared__ float tmp[32];
	const long long r = blockIdx.x;
	if (r >= R)
		return;
	qn_row(NULL, x + r * D, out + r * D, w, wdt, D, eps, tmp);
}

extern "C" __global__ void atlas_add_rmsnorm(bf16 *res, const bf16 *x, bf16 *out, const void *w,
					     int wdt, long long R, long long D, float eps)
{
	ATLAS_PDL_ENTRY();
	__shared__ float tmp[32];
	const long long r = blockIdx.x;
	if (r >= R)
		return;
	qn_row(res + r * D, x + r * D, out + r * D, w, wdt, D, eps, tmp);
}
