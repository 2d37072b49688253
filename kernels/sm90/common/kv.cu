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
#include "kvq.cuh"

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

/* atlas_kv_store_q: the same into a cache in format kvf (fp8 or q4,
 * kvq.cuh: rows of kvq_row_bytes bytes), the bytes the host reference
 * (lib/backend/kvq.c) writes for the rows' values. grid ceil(T*2*Hkv/8),
 * block 256: one warp per (token, K or V, kv head) row; hd <= 256 and as
 * the format needs. */
extern "C" __global__ void __launch_bounds__(256)
    atlas_kv_store_q(void *kc, void *vc, const bf16 *k, const bf16 *v, const int *slot, long long T,
		     long long Hkv, long long hd, int kvf)
{
	ATLAS_PDL_ENTRY();
	__shared__ float xs[8][256];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const long long r = (long long)blockIdx.x * 8 + w;
	if (r >= T * 2 * Hkv || hd > 256)
		return; /* uniform across the warp */
	const long long t = r / (2 * Hkv), j = r % (2 * Hkv), h = j % Hkv;
	const bool isv = j >= Hkv;
	const long long s = slot[t];
	if (s < 0)
		return;
	const bf16 *src = (isv ? v : k) + (t * Hkv + h) * hd;
	for (long long i = lane; i < hd; i += 32)
		xs[w][i] = atlas_bf(src[i]);
	__syncwarp();
	kvq_store_head(xs[w], (int)hd, (unsigned char *)(isv ? vc : kc) + s * kvq_row_bytes(kvf, Hkv, hd),
		       h, Hkv, kvf, lane);
}
