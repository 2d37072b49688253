/* rope.cu - atlas_rope: rotate-half (GPT-NeoX / Hugging Face) rotary
 * embedding of q or k in place.
 *
 * grid T*H, block hd/2 (hd <= 512 keeps the block within 256 threads;
 * a smaller block loops): block (t, h) rotates head h of token t, thread i
 * the pair (i, i + hd/2). As transformers computes it: the angle
 * (float)pos[t] * inv_freq[i], its cosine and sine in FP32 (the accurate
 * cosf/sinf, not the fast intrinsics: angles reach 1e5 rad at long
 * context). Cost: 4 * hd bytes per head, plus a sincos per pair.
 */
#include "common.cuh"
#include "kvq.cuh"

/* Block (t, h) of atlas_rope and atlas_rope_partial: the first rd dims of
 * head h of token t rotated, pairs (i, i + rd/2). */
static __device__ __forceinline__ void rope_head(bf16 *x, const int *pos, const float *inv_freq,
						 long long T, long long H, long long hd, long long rd)
{
	const long long th = blockIdx.x;
	if (th >= T * H)
		return;
	const long long half = rd / 2;
	const float p = (float)pos[th / H];
	bf16 *v = x + th * hd;
	for (long long i = threadIdx.x; i < half; i += blockDim.x) {
		float s, c;
		sincosf(p * inv_freq[i], &s, &c);
		float x0 = atlas_bf(v[i]), x1 = atlas_bf(v[i + half]);
		v[i] = atlas_tobf(x0 * c - x1 * s);
		v[i + half] = atlas_tobf(x1 * c + x0 * s);
	}
}

extern "C" __global__ void atlas_rope(bf16 *x, const int *pos, const float *inv_freq, long long T,
				      long long H, long long hd)
{
	ATLAS_PDL_ENTRY();
	rope_head(x, pos, inv_freq, T, H, hd, hd);
}

/* Partial rotary embedding (hybrid models): atlas_rope on the first rd
 * dims of each head, the rest untouched; grid T*H, block rd/2. */
extern "C" __global__ void atlas_rope_partial(bf16 *x, const int *pos, const float *inv_freq,
					      long long T, long long H, long long hd, long long rd)
{
	ATLAS_PDL_ENTRY();
	rope_head(x, pos, inv_freq, T, H, hd, rd);
}

/* atlas_qk_rope_store: the attention prologue of one step in one launch.
 * For the T tokens (rows of q [T,H,hd], k and v [T,Hkv,hd]): the per-head
 * RMS norm of q and k (Qwen3's q_norm/k_norm; skipped when qn/kn are
 * NULL), the rotary embedding of q and k, q written back in place, k and
 * v written to their cache rows slot[t] of kc, vc ([n_slots, Hkv*hd]).
 * Rounding as the separate ops round: the normed value is rounded to
 * bf16, then rotated, then rounded again.
 *
 * grid ceil(T*(H+2*Hkv)/8), block 256: one warp per head row (q heads,
 * then k heads, then v heads of each token); lane i holds the pairs
 * (j, j + hd/2) for j = i, i + 32, ... (hd even, hd <= 2 * 32 * QRS_PAIRS). */
#define QRS_PAIRS 4

/* Q: the cache is quantized (format kvf, kvq.cuh): k and v head rows go
 * through the warp's shared row xs and kvq_store_head instead of being
 * copied; kc and vc are then rows of kvq_row_bytes bytes. */
template <bool Q>
static __device__ __forceinline__ void
qk_rope_store(bf16 *q, const bf16 *k, const bf16 *v, const void *qn, const void *kn, int nwdt,
	      float eps, const int *pos, const float *inv_freq, void *kc, void *vc, const int *slot,
	      long long T, long long H, long long Hkv, long long hd, int kvf, float *xs)
{
	const int lane = threadIdx.x & 31;
	const long long per = H + 2 * Hkv;
	const long long r = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
	if (r >= T * per)
		return;
	const long long t = r / per, j = r % per, half = hd / 2, row = Hkv * hd;
	const long long s = slot[t];
	const long long rb = Q ? kvq_row_bytes(kvf, Hkv, hd) : 0;
	if (j >= H + Hkv) { /* a v head: copy to the cache */
		if (s < 0)
			return;
		const long long h = j - H - Hkv;
		const bf16 *src = v + t * row + h * hd;
		if (Q) {
			for (long long i = lane; i < hd; i += 32)
				xs[i] = atlas_bf(src[i]);
			__syncwarp();
			kvq_store_head(xs, (int)hd, (unsigned char *)vc + s * rb, h, Hkv, kvf, lane);
			return;
		}
		bf16 *dst = (bf16 *)vc + s * row + h * hd;
		for (long long i = lane; i < hd; i += 32)
			dst[i] = src[i];
		return;
	}
	const bool isq = j < H;
	const long long h = isq ? j : j - H;
	const bf16 *src = isq ? q + (t * H + h) * hd : k + t * row + h * hd;
	const void *nw = isq ? qn : kn;
	float x0[QRS_PAIRS], x1[QRS_PAIRS];
#pragma unroll
	for (int u = 0; u < QRS_PAIRS; u++) {
		const long long i = lane + 32 * u;
		x0[u] = i < half ? atlas_bf(src[i]) : 0.0f;
		x1[u] = i < half ? atlas_bf(src[i + half]) : 0.0f;
	}
	if (!isq && s < 0)
		return; /* uniform across the warp: no shuffle is skipped by half of it */
	atlas_head_norm_rope<QRS_PAIRS>(x0, x1, hd, nw, nwdt, eps, (float)pos[t], inv_freq);
	if (Q && !isq) {
		/* the rounding the BF16 cache would get, then the format's */
#pragma unroll
		for (int u = 0; u < QRS_PAIRS; u++) {
			const long long i = lane + 32 * u;
			if (i < half) {
				xs[i] = atlas_bf(atlas_tobf(x0[u]));
				xs[i + half] = atlas_bf(atlas_tobf(x1[u]));
			}
		}
		__syncwarp();
		kvq_store_head(xs, (int)hd, (unsigned char *)kc + s * rb, h, Hkv, kvf, lane);
		return;
	}
	bf16 *dst = isq ? q + (t * H + h) * hd : (bf16 *)kc + s * row + h * hd;
#pragma unroll
	for (int u = 0; u < QRS_PAIRS; u++) {
		const long long i = lane + 32 * u;
		if (i < half) {
			dst[i] = atlas_tobf(x0[u]);
			dst[i + half] = atlas_tobf(x1[u]);
		}
	}
}

extern "C" __global__ void __launch_bounds__(256)
    atlas_qk_rope_store(bf16 *q, const bf16 *k, const bf16 *v, const void *qn, const void *kn,
			int nwdt, float eps, const int *pos, const float *inv_freq, bf16 *kc,
			bf16 *vc, const int *slot, long long T, long long H, long long Hkv,
			long long hd)
{
	ATLAS_PDL_ENTRY();
	qk_rope_store<false>(q, k, v, qn, kn, nwdt, eps, pos, inv_freq, kc, vc, slot, T, H, Hkv, hd,
			     0, NULL);
}

/* atlas_qk_rope_store_q: the same into a cache in format kvf (fp8 or q4,
 * kvq.cuh); k and v rows are rounded to bf16 first, as the separate ops
 * (rope, then atlas_kv_store_q of the bf16 rows) would store them. hd a
 * multiple of 16 (fp8) or a power of two 64..256 (q4). */
extern "C" __global__ void __launch_bounds__(256)
    atlas_qk_rope_store_q(bf16 *q, const bf16 *k, const bf16 *v, const void *qn, const void *kn,
			  int nwdt, float eps, const int *pos, const float *inv_freq, void *kc,
			  void *vc, const int *slot, long long T, long long H, long long Hkv,
			  long long hd, int kvf)
{
	ATLAS_PDL_ENTRY();
	__shared__ float xs[8][256];
	if (hd > 256)
		return;
	qk_rope_store<true>(q, k, v, qn, kn, nwdt, eps, pos, inv_freq, kc, vc, slot, T, H, Hkv, hd,
			    kvf, xs[threadIdx.x >> 5]);
}
