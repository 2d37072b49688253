/* kv.cu - atlas_kv_store: copy the new K and V rows of T tokens into
 * their slots of the paged KV cache.
 *
 * grid T, block 256: block t copies k[t, :] to kc[slot[t], :] and v[t, :]
 * to vc[slot[t], :] (`row` = Hkv * hd elements each), 16 bytes per thread
 * per step when row % 8 == 0 and all four pointers are 16-byte aligned. A
 * negative slot (rejected by the host) is skipped rather than written out
 * of bounds. Cost: 8 * row bytes per token.
 */
#include "common.cuh"

extern "C" __global__ void atlas_kv_store(bf16 *kc, bf16 *vc, const bf16 *k, const bf16 *v,
					  const int *slot, long long T, long long row)
{
	ATLAS_PDL_ENTRY();
	const long long t = blockIdx.x;
	if (t >= T)
		return;
	const long long s = slot[t];
	if (s < 0)
		return;
	bf16 *kd = kc + s * row, *vd = vc + s * row;
	const bf16 *ks = k + t * row, *vs = v + t * row;
	if (row % 8 == 0 && atlas_aligned(kc, 16) && atlas_aligned(vc, 16) &&
	    atlas_aligned(k, 16) && atlas_aligned(v, 16)) {
		for (long long i = threadIdx.x; i < row / 8; i += blockDim.x) {
			((uint4 *)kd)[i] = ((const uint4 *)ks)[i];
			((uint4 *)vd)[i] = ((const uint4 *)vs)[i];
		}
		return;
	}
	for (long long i = threadIdx.x; i < row; i += blockDim.x) {
		kd[i] = ks[i];
		vd[i] = vs[i];
	}
}
