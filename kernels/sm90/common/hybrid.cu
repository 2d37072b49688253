/* hybrid.cu - the ops of hybrid linear-attention models (qwen3_next,
 * qwen3_5_moe; lib/model/README-hybrid.md): gated attention's query split
 * and output gate, and the Gated DeltaNet in its recurrent form (their
 * partial rotary embedding is rope.cu's atlas_rope_partial).
 *
 * The DeltaNet runs each sequence (item) from its own state, token by
 * token, in FP32, as the CPU reference does, so a row's bits depend on
 * its sequence alone: not on its batch-mates nor on how its prompt was
 * cut into steps. Two launches a layer:
 *  - atlas_gdn_conv: grid (ceil(C/128), items), block 128, a thread per
 *    channel: the causal depthwise conv of the q, k, v channels over the
 *    item's rows from the window in its state, SiLU, FP32 out to a
 *    scratch [T, C];
 *  - atlas_gdn_rule: grid (Hv, items), block >= dv (a multiple of 32):
 *    thread j keeps column j of the head's state S [dk, dv] in registers
 *    (DK of them, a template) for all the item's rows; per row the block
 *    l2-normalises q and k (two block sums), then per column: decay,
 *    S^T k, the delta, the update and o = S^T q in two passes over the
 *    column, then the gated norm over dv (a block sum) and the bf16
 *    output. The state goes back to memory once, at the end.
 * Items are in device memory, uploaded by the model once a step, and
 * every pointer and size a launch takes is fixed for a model and a number
 * of items, so a decode step of a hybrid model is recorded and replayed
 * as a CUDA graph like any other. Prefill is sequential in the
 * tokens here; a chunked, tensor-core form is the next step.
 */
#include "common.cuh"

/* One item, backend.h's struct atlas_gdn_item (every field 8 bytes). */
struct gdn_item {
	long long row0, n;   /* first row in the step, rows */
	float *state;        /* the sequence's whole state; the layer's at + off */
	float *snap;         /* laid out as state, or NULL */
	long long snap_at;   /* copy the state after this many rows; 0: none */
	long long fresh;     /* start from zero */
};

#define GDN_MAX_K 8 /* the conv widths the kernel takes (the host checks) */

/* qg [T, H, 2 hd]: per head the query then the gate. apply 0: y [T,H,hd]
 * = the queries; 1: y *= sigmoid(the gates). grid ceil(T*H*hd/256),
 * block 256. */
extern "C" __global__ void atlas_attn_gate(bf16 *y, const bf16 *qg, long long T, long long H,
					   long long hd, int apply)
{
	ATLAS_PDL_ENTRY();
	const long long n = T * H * hd, stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		const long long r = i / hd, c = i % hd;
		if (apply) {
			const float g = atlas_bf(qg[r * 2 * hd + hd + c]);
			y[i] = atlas_tobf(atlas_bf(y[i]) / (1.0f + expf(-g)));
		} else {
			y[i] = qg[r * 2 * hd + c];
		}
	}
}

extern "C" __global__ void atlas_gdn_conv(const bf16 *qkvz, float *conv, const gdn_item *items,
					  long long off, const float *conv_w, long long C, long long W,
					  long long K)
{
	ATLAS_PDL_ENTRY();
	const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	const gdn_item it = items[blockIdx.y];
	if (c >= C)
		return;
	float win[GDN_MAX_K], w[GDN_MAX_K];
	float *st = it.state + off + c * (K - 1);
	for (int k = 0; k < GDN_MAX_K; k++) {
		win[k] = k < K - 1 && !it.fresh ? st[k] : 0.0f;
		w[k] = k < K ? conv_w[c * K + k] : 0.0f;
	}
	for (long long t = 0; t < it.n; t++) {
		const long long row = it.row0 + t;
		const float x = atlas_bf(qkvz[row * W + c]);
		float y = 0.0f;
		for (int k = 0; k < GDN_MAX_K; k++)
			if (k < K - 1)
				y += w[k] * win[k];
		y += w[K - 1] * x;
		for (int k = 0; k + 1 < GDN_MAX_K; k++)
			if (k < K - 2)
				win[k] = win[k + 1];
		win[K - 2] = x;
		conv[row * C + c] = y / (1.0f + expf(-y));
		if (t + 1 == it.snap_at)
			for (int k = 0; k < GDN_MAX_K; k++)
				if (k < K - 1)
					it.snap[off + c * (K - 1) + k] = win[k];
	}
	for (int k = 0; k < GDN_MAX_K; k++)
		if (k < K - 1)
			st[k] = win[k];
}

template <int DK>
static __device__ __forceinline__ void
gdn_rule(const float *conv, const bf16 *qkvz, const bf16 *ba, bf16 *out, const gdn_item *items,
	 long long off, const float *A_log, const float *dt_bias, const float *norm_w, long long Hk,
	 long long Hv, long long dv, long long C, long long W, long long K, float eps)
{
	__shared__ float q[DK], k[DK], tmp[32];
	const long long h = blockIdx.x, kh = h / (Hv / Hk);
	const gdn_item it = items[blockIdx.y];
	const int j = threadIdx.x;
	const bool col = j < dv;
	const long long soff = off + C * (K - 1) + h * DK * dv; /* S of head h */
	float *S = it.state + soff;
	float s[DK];
#pragma unroll
	for (int i = 0; i < DK; i++)
		s[i] = col && !it.fresh ? S[(long long)i * dv + j] : 0.0f;
	const float A = expf(A_log[h]), dtb = dt_bias[h];
	const float w = col ? norm_w[j] : 0.0f;
	const float qs = rsqrtf((float)DK);
	for (long long t = 0; t < it.n; t++) {
		const long long row = it.row0 + t;
		const float *x = conv + row * C;
		float qv = 0.0f, kv = 0.0f;
		if (j < DK) {
			qv = x[kh * DK + j];
			kv = x[Hk * DK + kh * DK + j];
		}
		const float sq = atlas_block_sum(qv * qv, tmp);
		const float sk = atlas_block_sum(kv * kv, tmp);
		if (j < DK) {
			q[j] = qv * (1.0f / sqrtf(sq + 1e-6f)) * qs;
			k[j] = kv * (1.0f / sqrtf(sk + 1e-6f));
		}
		__syncthreads();
		const float b = atlas_bf(ba[row * 2 * Hv + h]);
		const float a = atlas_bf(ba[row * 2 * Hv + Hv + h]) + dtb;
		const float beta = 1.0f / (1.0f + expf(-b));
		const float decay = expf(-A * (a > 20.0f ? a : log1pf(expf(a))));
		float o = 0.0f;
		if (col) {
			const float v = x[2 * Hk * DK + h * dv + j];
			float mem = 0.0f;
#pragma unroll
			for (int i = 0; i < DK; i++) {
				s[i] *= decay;
				mem += s[i] * k[i];
			}
			const float u = (v - mem) * beta;
#pragma unroll
			for (int i = 0; i < DK; i++) {
				s[i] += k[i] * u;
				o += s[i] * q[i];
			}
			if (t + 1 == it.snap_at) {
#pragma unroll
				for (int i = 0; i < DK; i++)
					it.snap[soff + (long long)i * dv + j] = s[i];
			}
		}
		const float ss = atlas_block_sum(o * o, tmp);
		if (col) {
			const float z = atlas_bf(qkvz[row * W + C + h * dv + j]);
			const float r = 1.0f / sqrtf(ss / (float)dv + eps);
			out[row * Hv * dv + h * dv + j] = atlas_tobf(o * r * w * (z / (1.0f + expf(-z))));
		}
		__syncthreads(); /* q and k are rewritten by the next row */
	}
	if (col) {
#pragma unroll
		for (int i = 0; i < DK; i++)
			S[(long long)i * dv + j] = s[i];
	}
}

#define GDN_RULE(DK)                                                                              \
	extern "C" __global__ void atlas_gdn_rule_##DK(                                           \
	    const float *conv, const bf16 *qkvz, const bf16 *ba, bf16 *out, const gdn_item *items, \
	    long long off, const float *A_log, const float *dt_bias, const float *norm_w,          \
	    long long Hk, long long Hv, long long dv, long long C, long long W, long long K,       \
	    float eps)                                                                            \
	{                                                                                         \
		ATLAS_PDL_ENTRY();                                                                \
		gdn_rule<DK>(conv, qkvz, ba, out, items, off, A_log, dt_bias, norm_w, Hk, Hv, dv, \
			     C, W, K, eps);                                                       \
	}
GDN_RULE(16)
GDN_RULE(32)
GDN_RULE(64)
GDN_RULE(128)
