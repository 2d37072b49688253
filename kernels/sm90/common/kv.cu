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

/* atlas_kv_dequant: the rows a prefill step's sequences attend to, from a
 * cache in format kvf (fp8 or q4) to BF16 scratch in the original space
 * (q4 rows rotated back), so the tensor-core flash kernel can read them:
 * sequence s's key j (j < its keys: the largest pos + 1 of its tokens in
 * seq_of/pos, T tokens) goes to row s * nblk * B + j of ko / vo (Hkv * hd
 * BF16 each), rows past its keys up to nblk * B are zeroed, and tab_out
 * [n_seq, nblk] gets the identity table (s * nblk + i) of that layout.
 * grid (ceil(nblk * B / 8), n_seq), block 256: one warp per row, head
 * rows of K then V in turn; hd <= 256 and as the format needs. */
extern "C" __global__ void __launch_bounds__(256)
    atlas_kv_dequant(bf16 *ko, bf16 *vo, int *tab_out, const void *kc, const void *vc,
		     const int *seq_of, const int *pos, const int *tab, long long T,
		     long long max_blocks, long long B, long long nblk, long long Hkv,
		     long long hd, int kvf)
{
	ATLAS_PDL_ENTRY();
	__shared__ float xs[8][256];
	__shared__ __align__(16) float lv[16];
	__shared__ int len;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const long long s = blockIdx.y;
	if (tid == 0)
		len = 0;
	if (tid < 16)
		lv[tid] = kvq_level[tid];
	__syncthreads();
	int mine = 0;
	for (long long t = tid; t < T; t += blockDim.x)
		if (seq_of[t] == s && pos[t] + 1 > mine)
			mine = pos[t] + 1;
	mine = __reduce_max_sync(0xffffffffu, mine);
	if (lane == 0 && mine > 0)
		atomicMax(&len, mine);
	if (blockIdx.x == 0)
		for (long long i = tid; i < nblk; i += blockDim.x)
			tab_out[s * nblk + i] = (int)(s * nblk + i);
	__syncthreads();
	const long long j = (long long)blockIdx.x * 8 + w;
	if (j >= nblk * B || hd > 256)
		return; /* uniform across the warp */
	const long long row = Hkv * hd, dst = (s * nblk * B + j) * row;
	if (j >= len) {
		for (long long i = lane; i < row; i += 32) {
			ko[dst + i] = __float2bfloat16(0.0f);
			vo[dst + i] = __float2bfloat16(0.0f);
		}
		return;
	}
	const long long blk = tab[s * max_blocks + j / B];
	const long long rb = kvq_row_bytes(kvf, Hkv, hd), sb = kvq_scale_bytes(kvf, Hkv, hd);
	const long long off = (blk * B + j % B) * rb;
	for (int u = 0; u < 2; u++) {
		const unsigned char *r = (const unsigned char *)(u ? vc : kc) + off;
		bf16 *o = (u ? vo : ko) + dst;
		for (long long h = 0; h < Hkv; h++) {
			float *x = xs[w];
			if (kvf == KVQ_FP8) {
				const float sc = ((const float *)r)[h];
				for (long long i = lane; i < hd; i += 32)
					o[h * hd + i] = __float2bfloat16(
					    __half2float(__half(__nv_cvt_fp8_to_halfraw(
						(__nv_fp8_storage_t)r[sb + h * hd + i], __NV_E4M3))) * sc);
				continue;
			}
			const __half *sc = (const __half *)r + h * (hd / KVQ_Q4_BLOCK);
			for (long long i = lane; i < hd; i += 32) {
				const unsigned char c = r[sb + (h * hd + i) / 2];
				x[i] = lv[(c >> (4 * (i & 1))) & 15] * __half2float(sc[i / KVQ_Q4_BLOCK]);
			}
			__syncwarp();
			kvq_rotate(x, 1, (int)hd, (int)hd, lane, 32, kvq_syncwarp());
			for (long long i = lane; i < hd; i += 32)
				o[h * hd + i] = __float2bfloat16(x[i]);
			__syncwarp();
		}
	}
}
