/* act.cu - the element-wise ops: atlas_swiglu, atlas_add, atlas_to_f32.
 *
 * grid ceil(n/256), block 256, one element per thread (a grid-stride loop
 * keeps them correct for a smaller grid). All in FP32 with one rounding
 * to bf16 at the end. Pure bandwidth: swiglu 6 bytes, add 6 bytes, to_f32
 * 6 bytes per element.
 */
#include "common.cuh"

/* out = silu(gate) * up; out may alias gate (or up): each element is
 * read before it is written, by the same thread. */
extern "C" __global__ void atlas_swiglu(bf16 *out, const bf16 *gate, const bf16 *up, long long n)
{
	ATLAS_PDL_ENTRY();
	const long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		float g = atlas_bf(gate[i]);
		out[i] = atlas_tobf(g / (1.0f + expf(-g)) * atlas_bf(up[i]));
	}
}

extern "C" __global__ void atlas_add(bf16 *y, const bf16 *x, long long n)
{
	ATLAS_PDL_ENTRY();
	const long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		y[i] = atlas_tobf(atlas_bf(y[i]) + atlas_bf(x[i]));
}

extern "C" __global__ void atlas_to_f32(float *out, const bf16 *x, long long n)
{
	ATLAS_PDL_ENTRY();
	const long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		out[i] = atlas_bf(x[i]);
}
