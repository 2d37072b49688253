/* act.cu - the element-wise ops: atlas_swiglu, atlas_add, atlas_to_f32.
 *
 * grid ceil(n/256), block 256, one element per thread (a grid-stride loop
 * keeps them correct for a smaller grid). All in FP32 with one rounding
 * to bf16 at the end. Pure bandwidth: swiglu 6 bytes, add 6 bytes, to_f32
 * 6 bytes per element.
 */
#include "common.cuh"

/* out = silu(gate) * up; out may alias gate (or up): each element is
 * read before it is written, by the same thread. When n % 8 == 0 and the
 * three pointers are 16-byte aligned (every prefill of the dense
 * families), each thread takes 8 elements with 16-byte loads and stores
 * (the grid then covers n / 8 groups; the host launches ceil(n/256)
 * blocks either way, the grid-stride loop takes the rest). */
extern "C" __global__ void atlas_swiglu(bf16 *out, const bf16 *gate, const bf16 *up, long long n)
{
	ATLAS_PDL_ENTRY();
	const long long stride = (long long)gridDim.x * blockDim.x;
	const long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (n % 8 == 0 && atlas_aligned(out, 16) && atlas_aligned(gate, 16) &&
	    atlas_aligned(up, 16)) {
		for (long long i = i0; i < n / 8; i += stride) {
			float g[8], u[8];
			atlas_unpack8(((const uint4 *)gate)[i], g);
			atlas_unpack8(((const uint4 *)up)[i], u);
#pragma unroll
			for (int j = 0; j < 8; j++)
				g[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
			((uint4 *)out)[i] = atlas_pack8(g);
		}
		return;
	}
	for (long long i = i0; i < n; i += stride) {
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
