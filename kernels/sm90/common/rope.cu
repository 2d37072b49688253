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

extern "C" __global__ void atlas_rope(bf16 *x, const int *pos, const float *inv_freq, long long T,
				      long long H, long long hd)
{
	const long long th = blockIdx.x;
	if (th >= T * H)
		return;
	const long long half = hd / 2;
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
