/* backend.h - the ops table every compute backend implements.
 *
 * A backend is a struct of function pointers plus a context, filled with
 * designated initializers. lib/model and lib/engine reach memory and
 * compute only through it, so the CPU backend (the reference), the CUDA
 * backend (the fast one) and the mock backend (records calls for unit
 * tests) are interchangeable.
 *
 * Conventions:
 *  - Pointers passed to ops are backend memory (from alloc, or returned
 *    by weight_upload). On the CPU backend that is plain host memory.
 *  - Activations are `act_dtype` (F32 on the CPU, BF16 on CUDA); weights
 *    and biases keep the dtype they were stored in (`wdt` arguments).
 *  - Matrices are row-major. Shapes are given in the comments as [rows,
 *    cols]; a weight of a linear layer is [N, K] as in PyTorch (y = x W^T).
 *  - Every op returns 0 or a negative ATLAS_E* code with a message set.
 *    Ops may run asynchronously; download() and sync() wait.
 */
#ifndef ATLAS_BACKEND_H
#define ATLAS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"

/* Where the tokens of one forward step live in the paged KV cache. All
 * pointers are backend memory; sizes are host values. */
struct atlas_kv_batch {
	const int32_t *seq_of;       /* [T] row of block_tables of each token */
	const int32_t *pos;          /* [T] absolute position of each token */
	const int32_t *block_tables; /* [n_seq, max_blocks] cache block ids */
	int64_t n_seq;               /* rows of block_tables */
	int64_t max_blocks;          /* row stride of block_tables */
	int64_t block_size;          /* tokens per cache block */
	int64_t max_keys;            /* most keys any token sees (<= max_blocks*block_size) */
};

/* The element format of the paged KV cache (--kv-dtype; kvq.h has the
 * row layouts and the host reference of each). A backend's kv_store and
 * attention ops read and write the cache in be->kv_dtype. */
enum atlas_kv_dtype {
	ATLAS_KV_AUTO = 0, /* the activation type: F32 on the CPU, BF16 on CUDA */
	ATLAS_KV_BF16,     /* BF16 */
	ATLAS_KV_FP8,      /* FP8 E4M3, an FP32 scale per (token, kv head) row */
	ATLAS_KV_Q4,       /* 4-bit codes of a Hadamard-rotated row, an F16
			    * scale per 32 values */
};

/* A weight of dtype ATLAS_DTYPE_F8B: an [N, K] matrix of FP8 E4M3 values
 * q with an FP32 scale per [bo, bi] block, as one blob of backend memory
 * (what an FP8 checkpoint stores, kept at one byte a weight so that decode
 * streams half the bytes of BF16):
 *   bytes 0..255                          this head
 *   bytes 256 ..                          q [N, K] row-major
 *   bytes scale_off ..                    s [ceil(N/bo), nbc] FP32
 * and the matrix the ops multiply by is, element by element,
 *   W[n][k] = bf16(f32(q[n][k]) * s[n / bo][k / bi])
 * rounded to nearest even: exactly the BF16 matrix that dequantizing at
 * load gives (lib/io/quant.h), so a backend's F8B products equal its BF16
 * products of that matrix bit for bit. bi is a multiple of 32 or covers
 * the whole row (bi >= K): the kernels' 32-column chunks then never
 * straddle a scale. Only the matmul, matmul_multi and matmul_swiglu ops
 * of a backend with f8b_weights take it; biases beside it are BF16. */
#define ATLAS_F8B_MAGIC 0x42384641u /* "AF8B" */
#define ATLAS_F8B_HEAD 256
struct atlas_f8b_head {
	uint32_t magic;
	int32_t bo, bi;            /* scale block: rows, columns */
	int32_t nbc;               /* scale blocks per block row: ceil(K / bi) */
	int64_t N, K;
	int64_t scale_off;         /* byte offset of s from the blob start */
};

/* Offset of the scales and the whole blob's size. */
static inline int64_t atlas_f8b_scale_off(int64_t N, int64_t K)
{
	return ATLAS_F8B_HEAD + ((N * K + 255) & ~(int64_t)255);
}
static inline int64_t atlas_f8b_bytes(int64_t N, int64_t K, int64_t bo, int64_t bi)
{
	return atlas_f8b_scale_off(N, K) + ((N + bo - 1) / bo) * ((K + bi - 1) / bi) * 4;
}
/* Fill the head of blob (atlas_f8b_bytes(N, K, bo, bi) bytes of host
 * memory); the caller writes q and s where it says. -1 when bi is
 * neither a multiple of 32 nor >= K (or a dimension is not positive). */
int atlas_f8b_init(void *blob, int64_t N, int64_t K, int64_t bo, int64_t bi);
/* Row n of a host F8B blob as BF16 (K values): the reference the kernels
 * must reproduce. */
void atlas_f8b_row_bf16(const void *blob, int64_t n, uint16_t *out);

/* A weight of dtype ATLAS_DTYPE_W4B: an [N, K] matrix of 4-bit unsigned
 * integers q with a zero point z (uint8) and a BF16 scale s per row and
 * group of g columns, as one blob of backend memory (what the W4A16
 * checkpoints store: AWQ, GPTQ, compressed-tensors pack-quantized; kept
 * at half a byte a weight):
 *   bytes 0..255                          this head
 *   bytes 256 ..                          q [N, K/2]: byte j of a row holds
 *                                         column 2j in its low nibble and
 *                                         column 2j+1 in its high one
 *   bytes z_off ..                        z [N, ng] uint8, 0..128
 *   bytes s_off ..                        s [N, ng] BF16
 * and the matrix the ops multiply by is, element by element,
 *   W[n][k] = bf16(f32(q[n][k] - z[n][k / g]) * s[n][k / g])
 * rounded to nearest even: q - z is an integer of at most 8 bits and s
 * a BF16, so their product is exact in FP32 and W is one correctly
 * rounded BF16 multiply of exact operands (the kernels dequantize a pair
 * of weights by a mask, a subtraction and a multiply). Checkpoints with
 * BF16 scales (compressed-tensors) give exactly the BF16 matrix that
 * dequantizing at load gives (lib/io/quant.h); AWQ's and GPTQ's FP16
 * scales are rounded to BF16 (as Marlin does for BF16 models: a relative
 * change of at most 2^-9 per group). A backend's W4B products equal its
 * BF16 products of W bit for bit (in batch-invariant mode; outside it, a
 * batch-1 product has its own sums). K is a multiple of 32; g is a
 * multiple of 32 or covers the whole row (g >= K); z <= 128 (4-bit
 * checkpoints store 0..16: the kernels form q - z as BF16 128 + q minus
 * 128 + z, exact up to 256). Only the matmul ops of a backend
 * with w4b_weights take it; biases beside it are BF16. */
#define ATLAS_W4B_MAGIC 0x42345741u /* "AW4B" */
#define ATLAS_W4B_HEAD 256
struct atlas_w4b_head {
	uint32_t magic;
	int32_t g;                 /* columns a group: a multiple of 32, or >= K */
	int32_t ng;                /* groups a row: ceil(K / g) */
	int32_t pad;
	int64_t N, K;
	int64_t z_off, s_off;      /* byte offsets of z and s from the blob start */
};

static inline int64_t atlas_w4b_z_off(int64_t N, int64_t K)
{
	return ATLAS_W4B_HEAD + ((N * K / 2 + 255) & ~(int64_t)255);
}
static inline int64_t atlas_w4b_s_off(int64_t N, int64_t K, int64_t g)
{
	return atlas_w4b_z_off(N, K) + ((N * ((K + g - 1) / g) + 255) & ~(int64_t)255);
}
static inline int64_t atlas_w4b_bytes(int64_t N, int64_t K, int64_t g)
{
	return atlas_w4b_s_off(N, K, g) + N * ((K + g - 1) / g) * 2;
}
/* Fill the head of blob (atlas_w4b_bytes(N, K, g) bytes of host memory);
 * the caller writes q, z and s where it says. -1 when K is not a
 * multiple of 32, g neither a multiple of 32 nor >= K, or a dimension
 * not positive. */
int atlas_w4b_init(void *blob, int64_t N, int64_t K, int64_t g);
/* Row n of a host W4B blob as BF16 (K values): the reference the kernels
 * must reproduce. */
void atlas_w4b_row_bf16(const void *blob, int64_t n, uint16_t *out);

/* A weight of dtype ATLAS_DTYPE_FP4B: an [N, K] matrix of E2M1 (FP4)
 * values q with an F8_E4M3 scale s per row and 16 columns and an FP32
 * global multiplier gm, as one blob of backend memory (NVFP4 as ModelOpt
 * and compressed-tensors store it, kept at 0.5625 bytes a weight):
 *   bytes 0..255                          this head (gm in it)
 *   bytes 256 ..                          q [N, K/2]: byte j of a row holds
 *                                         column 2j in its low nibble and
 *                                         column 2j+1 in its high one
 *   bytes s_off ..                        s [N, K/16] F8_E4M3
 * and the matrix the ops multiply by is, element by element,
 *   W[n][k] = bf16(f32(e2m1(q[n][k]) * f32(f8(s[n][k/16]) * gm)))
 * each product rounded to FP32 in that order, then to BF16: exactly the
 * BF16 matrix that dequantizing at load gives (lib/io/quant.h,
 * atlas_quant_fp4_dequant), so a backend's FP4B products equal its BF16
 * products of that matrix bit for bit (in batch-invariant mode). K is a
 * multiple of 32 (the kernels' chunks hold two scale groups). The
 * kernels form e2m1(q) exactly as the FP16 number e2m1 * 2^-14 (the
 * nibble's magnitude bits shifted into FP16's exponent and mantissa) and
 * multiply its FP32 value by f32(f8(s) * gm) * 2^14, which rounds the
 * same real product. Only the matmul ops of a backend with fp4b_weights
 * take it; biases beside it are BF16. */
#define ATLAS_FP4B_MAGIC 0x42344641u /* "AF4B" */
#define ATLAS_FP4B_HEAD 256
struct atlas_fp4b_head {
	uint32_t magic;
	int32_t g;                 /* columns a scale: 16 */
	int32_t ng;                /* scales a row: K / 16 */
	float gm;                  /* the global multiplier */
	int64_t N, K;
	int64_t s_off;             /* byte offset of s from the blob start */
};

static inline int64_t atlas_fp4b_s_off(int64_t N, int64_t K)
{
	return ATLAS_FP4B_HEAD + ((N * K / 2 + 255) & ~(int64_t)255);
}
static inline int64_t atlas_fp4b_bytes(int64_t N, int64_t K)
{
	return atlas_fp4b_s_off(N, K) + N * (K / 16);
}
/* Fill the head of blob (atlas_fp4b_bytes(N, K) bytes of host memory);
 * the caller writes q and s where it says. -1 when K is not a multiple
 * of 32, a dimension is not positive or |gm| is not below 2^100 (the
 * kernels scale f8 * gm by 2^14 and need it exact: such a matrix is
 * dequantized at load instead). */
int atlas_fp4b_init(void *blob, int64_t N, int64_t K, float gm);
/* Row n of a host FP4B blob as BF16 (K values): the reference the
 * kernels must reproduce. */
void atlas_fp4b_row_bf16(const void *blob, int64_t n, uint16_t *out);

struct atlas_moe_desc;

/* One layer of the fused one-token decode (fused_prepare): backend
 * pointers, the layout of the plain ops. */
struct atlas_fused_layer {
	const void *wq, *wk, *wv;    /* [H*hd, D], [Hkv*hd, D] x2, in wdt */
	const void *bq, *bk, *bv;    /* [N] in wdt, or NULL */
	const void *wo, *wg, *wu, *wd; /* [D, H*hd], [F, D] x2, [D, F], in wdt */
	const void *ln1, *ln2;       /* [D] in nwdt */
	const void *qn, *kn;         /* [hd] in nwdt, or both NULL (no q/k norm) */
	void *kc, *vc;               /* the layer's K and V pools [n_slots, Hkv*hd] */
	/* an MoE layer: its moe op description (wg, wu, wd then NULL), or
	 * NULL for a dense layer; the backend may refuse what it lacks */
	const struct atlas_moe_desc *moe;
};

/* A model's whole layer stack for fused_prepare: shapes, weights, the
 * activation buffers (one row of each is used) and the backend copies of
 * the step metadata (row 0 of each: the step's one token). */
struct atlas_fused_desc {
	int64_t n_layers, D, F, H, Hkv, hd, window;
	enum atlas_dtype wdt, nwdt;
	float eps, scale;
	const struct atlas_fused_layer *layers; /* host array [n_layers] */
	void *x, *o;                 /* residual stream; the last MLP output */
	void *q, *k, *v, *att, *g;   /* scratch rows: H*hd, Hkv*hd x2, H*hd, F */
	int64_t g_cap;               /* elements g holds (an MoE layer's top_k
				      * expert rows may need more than F) */
	const int32_t *pos, *seq_of, *slot, *block_tables;
	int64_t max_blocks, block_size; /* the attention op's meaning (atlas_kv_batch) */
	const float *inv_freq;       /* [hd/2] */
};

/* One layer's mixture-of-experts MLP for the moe op: shapes and backend
 * pointers, no family names (lib/model/README-moe.md). Every matrix is
 * [N, K] as for matmul, in wdt. */
struct atlas_moe_desc {
	int64_t n_experts;      /* E, experts in the layer */
	int64_t top_k;          /* experts each token goes through, <= E */
	int64_t D;              /* model width */
	int64_t F;              /* each expert's MLP width */
	int64_t Fs;             /* the shared expert's width, 0: none */
	bool norm_topk;         /* renormalise the top-k weights to sum 1 */
	enum atlas_dtype wdt;   /* dtype of every matrix below */
	const void *router;     /* [E, D] */
	const void *const *wg;  /* host array [E] of expert gate matrices [F, D] */
	const void *const *wu;  /* host array [E] of expert up matrices [F, D] */
	const void *const *wd;  /* host array [E] of expert down matrices [D, F] */
	const void *sg, *su, *sd; /* shared expert [Fs, D] x2, [D, Fs]; NULL if Fs 0 */
	const void *sgate;      /* the shared expert's gate [1, D]; NULL if Fs 0 */
};

/* One Gated DeltaNet layer (a linear-attention layer of a hybrid model,
 * lib/model/README-hybrid.md) for the deltanet op: shapes and the
 * layer's small weights, all FP32 in backend memory. */
struct atlas_gdn_desc {
	int64_t Hk, Hv;         /* key heads, value heads (a multiple of Hk) */
	int64_t dk, dv;         /* key and value head sizes */
	int64_t K;              /* the causal conv's width (>= 2) */
	float eps;              /* of the gated output norm */
	const float *conv_w;    /* [C, K], C = 2 Hk dk + Hv dv: the depthwise
				 * conv over q, k, v's channels in that order */
	const float *A_log;     /* [Hv] */
	const float *dt_bias;   /* [Hv] */
	const float *norm_w;    /* [dv] the gated norm's weight (plain) */
};

/* One sequence's rows in a deltanet call, in backend memory (the model
 * uploads a step's items once; every layer's call reads them, so a
 * recorded step replays with the next step's items): rows [row0, row0 + n)
 * of the step, and the sequence's recurrent state for all its layers,
 * backend FP32, where the layer's part starts `off` floats in: the conv
 * state [C, K-1] (the last K-1 inputs of each channel, oldest first) then
 * the delta-rule state [Hv, dk, dv]. Every field is 8 bytes, so the layout
 * is the same in C and CUDA. */
struct atlas_gdn_item {
	int64_t row0;           /* its first row in the step */
	int64_t n;              /* rows (tokens) of this sequence */
	float *state;           /* the sequence's whole state */
	float *snap;            /* the same layout: a prefix-cache snapshot */
	int64_t snap_at;        /* 1..n: also copy the layer's state after this
				 * many rows to snap (+ off); 0: none */
	int64_t fresh;          /* nonzero: the sequence's first tokens, its
				 * state taken as zero (whatever it holds) */
};

/* Floats of one sequence's state for one Gated DeltaNet layer. */
static inline int64_t atlas_gdn_state_floats(const struct atlas_gdn_desc *d)
{
	return (2 * d->Hk * d->dk + d->Hv * d->dv) * (d->K - 1) + d->Hv * d->dk * d->dv;
}

/* Scratch bytes the moe op needs for T rows, on any backend: the CPU's
 * FP32 router probabilities, gate and up rows of the widest MLP and the
 * sum, or the CUDA op's routing (FP32 logits, ids, weights, groups, GEMM
 * tiles), its
 * bf16 expert rows h and u [T k, F] and y [T k, D] and the shared
 * expert's rows, each region 256-byte aligned; whichever is larger. */
static inline size_t atlas_moe_scratch_bytes(const struct atlas_moe_desc *d, int64_t T)
{
	const size_t t = (size_t)T, k = (size_t)d->top_k, e = (size_t)d->n_experts;
	const size_t D = (size_t)d->D, F = (size_t)d->F, Fs = (size_t)d->Fs;
	const size_t f = F > Fs ? F : Fs;
	const size_t cpu = t * (e + 2 * f + D) * sizeof(float);
	const size_t gpu = 12 * t * k + 4 * t * (e + 1) + 8 * (e + 1) + 2 * t * k * (2 * F + D) +
			   2 * t * (2 * Fs + D) + 4 * (t * k / 128 + e + 2) + 16 * 256;
	return cpu > gpu ? cpu : gpu;
}

/* One row's sampling settings for the on-device sampler. The uniform u
 * comes from the host's seeded generator, so a backend's choice equals
 * the host sampler's for the same logits (see atlas_sample_pick). */
struct atlas_sample_args {
	float temperature; /* 0 = greedy (argmax, lowest id on ties) */
	int32_t top_k;     /* 0 = off */
	float top_p;       /* 1 = off */
	float min_p;       /* 0 = off */
	float u;           /* uniform in [0, 1) */
	const uint32_t *mask; /* NULL, or host words [(V + 31) / 32]: token i is
			       * allowed when bit i % 32 of word i / 32 is set
			       * (grammar-constrained decoding); the others are
			       * never drawn, as if their logits were -inf */
};

/* One row of a per-kernel timing report (the optional profile ops). */
struct atlas_kernel_time {
	const char *name; /* kernel entry point, static string */
	int64_t calls;    /* launches timed */
	double ms;        /* device time of all of them, milliseconds */
};

struct atlas_backend {
	const char *name;           /* "cpu", "cuda", "mock" */
	void *ctx;                  /* backend private state */
	enum atlas_dtype act_dtype; /* element type of activations */
	bool batch_invariant;       /* set by the caller: every op must give a row
				     * the same bits whatever else is in the batch
				     * (one kernel per op for all T, no T-dependent
				     * paths); the server sets it */
	enum atlas_kv_dtype kv_dtype; /* set by the model before it allocates
				     * its cache: the format kv_store writes and
				     * attention reads (kvq.h) */
	bool f8b_weights;           /* matmul, matmul_multi and matmul_swiglu take
				     * ATLAS_DTYPE_F8B weights: FP8 checkpoints
				     * then load at one byte a weight instead of
				     * dequantized */
	bool w4b_weights;           /* the same for ATLAS_DTYPE_W4B: 4-bit
				     * weight-only checkpoints at half a byte */
	bool fp4b_weights;          /* the same for ATLAS_DTYPE_FP4B: NVFP4
				     * checkpoints at 0.5625 bytes a weight */
	int moe_max_experts;        /* the most experts a layer may have for the
				     * moe op (0: no limit); models with more are
				     * refused at load */

	/* --- lifetime and memory --------------------------------------- */

	/* Free the backend and everything it allocated. */
	void (*destroy)(struct atlas_backend *be);
	/* Allocate `bytes` of backend memory (zeroed). NULL on failure. */
	void *(*alloc)(struct atlas_backend *be, size_t bytes);
	/* Free memory from alloc. NULL ok. */
	void (*free)(struct atlas_backend *be, void *p);
	/* Make `bytes` of host weight data usable by ops. May return `host`
	 * itself (CPU: zero copy, so the mmap must outlive the backend's use)
	 * or a copy. NULL on failure. Release with weight_release. */
	const void *(*weight_upload)(struct atlas_backend *be, const void *host,
				     size_t bytes);
	void (*weight_release)(struct atlas_backend *be, const void *w);
	/* Optional: `bytes` of zeroed host memory that upload and download
	 * move fastest (CUDA: page-locked, so a copy is one DMA the call
	 * does not wait for). NULL on failure; free with host_free. Without
	 * them, callers use calloc and free. */
	void *(*host_alloc)(struct atlas_backend *be, size_t bytes);
	void (*host_free)(struct atlas_backend *be, void *p);
	/* Host -> backend copy of `bytes`. From host_alloc memory the copy
	 * may read src after the call returns: rewrite src only after a
	 * download or sync. */
	int (*upload)(struct atlas_backend *be, void *dst, const void *src,
		      size_t bytes);
	/* Backend -> host copy; waits for pending work. */
	int (*download)(struct atlas_backend *be, void *dst, const void *src,
			size_t bytes);
	/* Backend -> backend copy. */
	int (*copy)(struct atlas_backend *be, void *dst, const void *src,
		    size_t bytes);
	/* Wait for all queued work. */
	int (*sync)(struct atlas_backend *be);

	/* --- ops of the dense decoder ------------------------------------ */

	/* out[T,D] = table[ids[t], :]; table [V,D] in wdt; ids [T] int32 in
	 * backend memory, each already checked to be < V. */
	int (*embed)(struct atlas_backend *be, void *out, const void *table,
		     enum atlas_dtype wdt, const int32_t *ids, int64_t T,
		     int64_t D);
	/* out[R,D] = x / rms(x) * w, rms over each row; w [D] in wdt.
	 * out may alias x (in place). */
	int (*rmsnorm)(struct atlas_backend *be, void *out, const void *x,
		       const void *w, enum atlas_dtype wdt, int64_t R,
		       int64_t D, float eps);
	/* Fused residual: res[R,D] += x[R,D]; out = rmsnorm(res) * w. */
	int (*add_rmsnorm)(struct atlas_backend *be, void *res, const void *x,
			   void *out, const void *w, enum atlas_dtype wdt,
			   int64_t R, int64_t D, float eps);
	/* out[T,N] = x[T,K] W^T + bias; W [N,K] and bias [N] (or NULL) in
	 * wdt. FP32 accumulation. */
	int (*matmul)(struct atlas_backend *be, void *out, const void *x,
		      const void *w, const void *bias, enum atlas_dtype wdt,
		      int64_t T, int64_t N, int64_t K);
	/* The output head: out[T,N] = x[T,K] W^T in FP32 (host float layout
	 * in backend memory), whatever the activation type, so that logits
	 * keep full precision for sampling. */
	int (*logits)(struct atlas_backend *be, float *out, const void *x,
		      const void *w, enum atlas_dtype wdt, int64_t T, int64_t N,
		      int64_t K);
	/* Rotary embedding in place, rotate-half (GPT-NeoX/HF) layout:
	 * x [T,H,hd]; pos [T] int32 in backend memory; inv_freq [hd/2] f32 in
	 * backend memory (scaling already folded in). */
	int (*rope)(struct atlas_backend *be, void *x, const int32_t *pos,
		    const float *inv_freq, int64_t T, int64_t H, int64_t hd);
	/* Store the K and V rows of T tokens into the paged cache: row t of
	 * k, v ([T, Hkv*hd] each, act_dtype) goes to cache row slot[t] of kc,
	 * vc, in be->kv_dtype (rows of atlas_kv_row_bytes bytes, kvq.h);
	 * slot [T] int32 in backend memory. */
	int (*kv_store)(struct atlas_backend *be, void *kc, void *vc, const void *k,
			const void *v, const int32_t *slot, int64_t T, int64_t Hkv,
			int64_t hd);
	/* Causal attention of the T tokens of a batch against the paged KV
	 * cache (which already holds their own keys and values): token t of
	 * sequence b->seq_of[t] at position p = b->pos[t] sees the keys at
	 * positions max(0, p-window+1)..p of its sequence (window 0 = all),
	 * key j being cache row block_tables[seq][j / block_size] *
	 * block_size + j % block_size. q, out [T,H,hd]; kc, vc
	 * [n_slots, Hkv, hd] in be->kv_dtype (kvq.h: a quantized cache is
	 * dequantized as it is read; with q4, q is rotated as the keys were
	 * and the output rotated back, so the op's meaning is unchanged).
	 * GQA: head h reads kv head h / (H/Hkv). */
	int (*attention)(struct atlas_backend *be, void *out, const void *q,
			 const void *kc, const void *vc,
			 const struct atlas_kv_batch *b, int64_t T, int64_t H,
			 int64_t Hkv, int64_t hd, int64_t window, float scale);
	/* out[T,F] = silu(gate) * up; gate, up [T,F]. out may alias gate. */
	int (*swiglu)(struct atlas_backend *be, void *out, const void *gate,
		      const void *up, int64_t T, int64_t F);
	/* y[n] += x[n]. */
	int (*add)(struct atlas_backend *be, void *y, const void *x, int64_t n);
	/* Download n activations as float (converting from act_dtype). */
	int (*to_f32)(struct atlas_backend *be, float *host, const void *src,
		      int64_t n);
	/* Optional (NULL: the host samples): ids[i] = the token drawn from row
	 * i of the FP32 logits [n,V] (from the logits op) with args[i] (host
	 * array); ids [n] in backend memory, so only ids cross to the host. */
	int (*sample)(struct atlas_backend *be, int32_t *ids, const float *logits,
		      int64_t n, int64_t V, const struct atlas_sample_args *args);
	/* Optional: size the backend's memory arena before a model loads
	 * (CUDA: one allocation for weights, activations and KV cache). */
	int (*reserve)(struct atlas_backend *be, size_t bytes);
	/* Optional: the model is known; choose kernels for its family and
	 * weight type ("bf16", "f16", "f32"), falling back to common ones. */
	int (*specialize)(struct atlas_backend *be, const char *family, const char *quant);

	/* Optional: the mixture-of-experts MLP of one layer (d), each row on
	 * its own, so a row's result does not depend on the others:
	 *   p = softmax(x W_router^T) over all E experts, in FP32
	 *   S = the top_k largest p (ties: the lower expert index)
	 *   w_e = p_e, or p_e / sum over S of p when d->norm_topk
	 *   out = sum over e in S, by ascending e, of w_e * down_e(silu(gate_e x) * up_e x)
	 *       (+ sigmoid(x . sgate) * the shared expert's MLP of x when Fs > 0)
	 * x, out [T, D] in act_dtype (out must not alias x); scratch:
	 * atlas_moe_scratch_bytes(d, T) bytes of backend memory. NULL: the
	 * backend runs no MoE model (the model refuses them at load). */
	int (*moe)(struct atlas_backend *be, void *out, const void *x,
		   const struct atlas_moe_desc *d, int64_t T, void *scratch);
	/* Optional: how many experts' weights the moe op has read since the
	 * last call (each call adds the number of distinct experts its rows
	 * chose: an expert chosen by several rows of one call is read once),
	 * then resets the count; waits for queued work. The benchmarks' floor
	 * for batched MoE decode counts these bytes. NULL: not counted. */
	int64_t (*moe_experts_read)(struct atlas_backend *be);

	/* --- optional: ops of hybrid linear-attention models (NULL: the
	 * backend does not run them; the model refuses them at load) --- */

	/* rope's contract on the first rd dims of each head only (rotate-
	 * half over those: dim i pairs with i + rd/2), the other hd - rd
	 * unchanged; inv_freq [rd/2]. */
	int (*rope_partial)(struct atlas_backend *be, void *x, const int32_t *pos,
			    const float *inv_freq, int64_t T, int64_t H, int64_t hd,
			    int64_t rd);
	/* Gated attention's q projection gives, per head, the query then an
	 * output gate: qg [T, H, 2 hd]. gate_split: q [T, H, hd] = the
	 * queries. gate_apply: att [T, H, hd] *= sigmoid(the gates). */
	int (*gate_split)(struct atlas_backend *be, void *q, const void *qg, int64_t T,
			  int64_t H, int64_t hd);
	int (*gate_apply)(struct atlas_backend *be, void *att, const void *qg, int64_t T,
			  int64_t H, int64_t hd);
	/* The Gated DeltaNet between a linear-attention layer's input and
	 * output projections, each item (sequence) from its own state, token
	 * by token (the recurrent form), so a row's result depends only on
	 * its sequence, never on its batch-mates or how its prompt was cut
	 * into steps:
	 *   x = [q | k | v] of the row's qkvz (C channels)
	 *   c = silu(causal depthwise conv of x over the sequence, width K)
	 *   q, k per key head l2-normalised (x * rsqrt(sum x^2 + 1e-6)),
	 *     q scaled by 1/sqrt(dk); value head h reads key head h / (Hv/Hk)
	 *   beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)
	 *   per value head: S *= exp(g); u = (v - S^T k) beta; S += k u^T;
	 *     o = S^T q
	 *   out = rmsnorm(o) * norm_w * silu(z), per value head
	 * qkvz [T, C + Hv dv] (q, k, v, z, each head after head), ba
	 * [T, 2 Hv] (b then a), out [T, Hv dv], all act_dtype; items:
	 * backend memory [n_items], rows end to end from 0; off: the layer's
	 * part of each item's state; scratch: backend FP32 [T, C]. Each item's
	 * state is updated. */
	int (*deltanet)(struct atlas_backend *be, void *out, const void *qkvz, const void *ba,
			const struct atlas_gdn_desc *d, const struct atlas_gdn_item *items,
			int64_t n_items, int64_t off, float *scratch);

	/* --- optional fused ops (NULL: the model runs the plain ops they
	 * stand for; a backend offers them where one launch beats several) */

	/* n <= 3 products of one x: out[i][T,N[i]] = x[T,K] w[i]^T + bias[i]
	 * (bias NULL, or bias[i] NULL, for none): the q, k, v projections. */
	int (*matmul_multi)(struct atlas_backend *be, int n, void *const *out,
			    const void *x, const void *const *w,
			    const void *const *bias, enum atlas_dtype wdt,
			    int64_t T, const int64_t *N, int64_t K);
	/* out[T,F] = swiglu(x wg^T, x wu^T), as matmul, matmul, swiglu would
	 * compute it (the products rounded to the activation type first);
	 * up_scratch [T,F] is activation memory the op may use. */
	int (*matmul_swiglu)(struct atlas_backend *be, void *out, const void *x,
			     const void *wg, const void *wu, enum atlas_dtype wdt,
			     int64_t T, int64_t F, int64_t K, void *up_scratch);
	/* The attention prologue: q [T,H,hd] and k [T,Hkv,hd] each
	 * rmsnorm'ed per head (qn, kn [hd] in nwdt; NULL: no norm), rotated
	 * (rope's contract), q in place; then k and v stored as kv_store
	 * stores them (k's own buffer may be left unrotated). */
	int (*qk_rope_store)(struct atlas_backend *be, void *q, void *k,
			     const void *v, const void *qn, const void *kn,
			     enum atlas_dtype nwdt, float eps, const int32_t *pos,
			     const float *inv_freq, void *kc, void *vc,
			     const int32_t *slot, int64_t T, int64_t H,
			     int64_t Hkv, int64_t hd);

	/* The layer stack of a one-token step (T = 1) as one fused op.
	 * fused_prepare checks that the backend has a kernel for the
	 * model's shapes and takes what it needs (call it once, outside a
	 * capture); NULL (with no error set) when it does not fit, else a
	 * handle for fused_decode and fused_release. fused_decode: on entry
	 * x holds the step's embedding row; on return x holds the residual
	 * stream before the last layer's MLP output and o that output, as
	 * body() leaves them op by op (the caller's final add_rmsnorm then
	 * finishes the step), the new key and value are in each layer's
	 * cache, and the results equal the plain ops' up to FP32 summation
	 * order (not batch-invariant: callers in that mode do not use it). */
	void *(*fused_prepare)(struct atlas_backend *be, const struct atlas_fused_desc *d);
	int (*fused_decode)(struct atlas_backend *be, void *fused);
	void (*fused_release)(struct atlas_backend *be, void *fused);

	/* --- optional: speed and benchmarking (NULL where unsupported) --- */

	/* Fill n elements of dst (F32, F16, BF16, F8_E4M3 rounded to nearest
	 * and saturated, or U8 rounded down and clamped) with lo + (hi - lo) * u,
	 * u uniform in [0, 1) from a hash of (seed, element index): random
	 * weights made on the device, for benchmarks at real shapes. */
	int (*fill_random)(struct atlas_backend *be, void *dst, enum atlas_dtype dt,
			   int64_t n, uint64_t seed, float lo, float hi);
	/* Record instead of run: after capture_begin the ops that follow are
	 * recorded, not executed (no download or sync may come between);
	 * capture_end returns the recording as an opaque graph owned by the
	 * caller (graph_free), or NULL with a message (capture then ended).
	 * replay queues the recorded work again, reading the same buffers. */
	int (*capture_begin)(struct atlas_backend *be);
	void *(*capture_end)(struct atlas_backend *be);
	int (*replay)(struct atlas_backend *be, void *graph);
	void (*graph_free)(struct atlas_backend *be, void *graph);
	/* Per-kernel device timing: profile(be, true) clears the table and
	 * times every kernel launched until profile(be, false); the report
	 * waits for the work and fills up to max rows, one per kernel name in
	 * first-launch order, returning how many (or a negative code). */
	int (*profile)(struct atlas_backend *be, bool on);
	int (*profile_report)(struct atlas_backend *be, struct atlas_kernel_time *rows,
			      int max);
	/* Measure a ceiling of the device, best of a few timed repetitions:
	 * "copy": device-to-device copy of `size` bytes, *out = GB/s counting
	 * bytes read plus written; "gemm": this backend's BF16 matmul with
	 * T = N = K = size, *out = TFLOP/s; "gemm-cublaslt": the same product
	 * through cuBLASLt when the library loads (ATLAS_ENOTFOUND if not);
	 * "runtime": *out = the CUDA runtime version (e.g. 13000). */
	int (*measure)(struct atlas_backend *be, const char *what, int64_t size,
		       double *out);
};

/* logits[i] = -inf for every token i the mask leaves out (NULL: none). */
void atlas_sample_mask(float *logits, int64_t V, const uint32_t *mask);

/* The reference sampling algorithm, shared by the host sampler and the
 * CPU backend's sample op: the mask (a->mask), then temperature, top-k,
 * top-p, min-p, then the candidate where the running probability mass
 * first exceeds u times the kept mass. `logits` [V] is overwritten;
 * `scratch` holds V * 8 bytes. */
int32_t atlas_sample_pick(float *logits, int64_t V, const struct atlas_sample_args *a,
			  void *scratch);

/* Backend constructors. Each returns a new backend owned by the caller
 * (release with be->destroy(be)) or NULL with a message. */
struct atlas_backend *atlas_backend_cpu_new(void);

/* The CUDA backend on GPU `device` (only in builds with CUDA), or NULL
 * with a message: no driver or GPU, a GPU without kernels in this build. */
struct atlas_backend *atlas_backend_cuda_new(int device);
/* Its kernel target ("sm90/qwen3/bf16") and device memory in use. */
const char *atlas_backend_cuda_target(const struct atlas_backend *be);
size_t atlas_backend_cuda_used(const struct atlas_backend *be);

/* The mock backend records one line per op call ("matmul T=1 N=64 K=32")
 * and computes nothing: alloc gives zeroed host memory, to_f32 writes
 * zeros. For unit tests of model and engine sequencing. */
struct atlas_backend *atlas_backend_mock_new(void);
/* Recorded calls so far (count and line i, owned by the backend). */
int64_t atlas_backend_mock_count(const struct atlas_backend *be);
const char *atlas_backend_mock_call(const struct atlas_backend *be, int64_t i);
void atlas_backend_mock_reset(struct atlas_backend *be);
/* Offer the fused one-token layer-stack ops (recorded as "fused_prepare
 * ...", "fused_decode", "fused_release"; prepare adds " BAD <what>" when
 * the description is incomplete). Call before a model loads; the model
 * uses them only with a BF16 act_dtype, which the caller sets too. */
void atlas_backend_mock_offer_fused(struct atlas_backend *be);
/* Offer host_alloc/host_free and record them, every upload, download and
 * sync ("host_alloc bytes=N", "host_free", "upload bytes=N", "download
 * bytes=N", "sync"). Call before a model loads. */
void atlas_backend_mock_offer_host(struct atlas_backend *be);

/* --- machine facts (for atlas-doctor, atlas-load and logs) ------------ */

struct atlas_gpu_info {
	int index;          /* CUDA device ordinal */
	char name[128];     /* "NVIDIA H200" */
	int cc_major;       /* compute capability, e.g. 9 */
	int cc_minor;       /* e.g. 0 */
	size_t mem_total;   /* bytes */
	size_t mem_free;    /* bytes, 0 if unknown */
};

/* Probe NVIDIA GPUs through the driver loaded at run time (no link-time
 * dependency on libcuda). Fills up to `max` entries and returns the number
 * of GPUs (>= 0); *driver_version gets e.g. 13000 (or 0). Returns
 * ATLAS_ENOTFOUND with a message when no NVIDIA driver can be loaded,
 * another negative code when the driver fails. */
int atlas_gpu_probe(struct atlas_gpu_info *gpus, int max, int *driver_version);

/* The kernel targets compiled into this build, as a static string of
 * "arch/family/quant" entries separated by ", " (e.g.
 * "sm90/common/bf16, sm90/qwen3/bf16"), or "" for a CPU-only build. */
const char *atlas_kernel_targets(void);

/* Pick a backend by name: "cpu", "mock", "auto" (the best available;
 * "cpu" until the CUDA backend exists), "cuda[:N]". NULL with a message
 * for an unknown or unavailable device. */
struct atlas_backend *atlas_backend_open(const char *device);

#endif
