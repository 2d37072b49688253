/* cuda_internal.h - private state of the CUDA backend, shared by cuda.c
 * (device, kernels, memory) and cuda_ops.c (the ops). The only place
 * outside kernels/ that includes CUDA headers. */
#ifndef ATLAS_BACKEND_CUDA_INTERNAL_H
#define ATLAS_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "../backend.h"
#include "../kernel_registry.h"

/* The entry points of kernels/ABI.md, in lookup order. */
enum atlas_cuda_kernel {
	ATLAS_CK_EMBED,
	ATLAS_CK_RMSNORM,
	ATLAS_CK_ADD_RMSNORM,
	ATLAS_CK_GEMV,
	ATLAS_CK_GEMM,
	ATLAS_CK_GEMM_F32,
	ATLAS_CK_ROPE,
	ATLAS_CK_KV_STORE,
	ATLAS_CK_ATTENTION,
	ATLAS_CK_SWIGLU,
	ATLAS_CK_ADD,
	ATLAS_CK_TO_F32,
	ATLAS_CK_SAMPLE,
	ATLAS_CK_FILL,
	ATLAS_CK_ATT_PART,
	ATLAS_CK_GEMM_TC,      /* cuda_gemm.c: wgmma + TMA tensor-core GEMM */
	ATLAS_CK_GEMM_TC_F32,
	ATLAS_CK_ATT_PREFILL,  /* cuda_attn.c: flash-attention prefill */
	ATLAS_CK_QK_ROPE_STORE,
	ATLAS_CK_GEMV_TC8,     /* gemv_tc.cu: T <= 8, 16, 32, 64 */
	ATLAS_CK_GEMV_TC16,
	ATLAS_CK_GEMV_TC32,
	ATLAS_CK_GEMV_TC64,
	ATLAS_CK_GEMV_BULK,    /* gemv_bulk.cu: T <= 2, TMA bulk copies */
	ATLAS_CK_GEMM_TC_REDUCE, /* gemm_tc.cu: the split-K partials summed */
	ATLAS_CK_DECODE_FUSED, /* decode_fused.cu: a one-token step's layers */
	ATLAS_CK_DECODE_FUSED_MOE, /* the same with MoE layers */
	ATLAS_CK_ARGMAX,       /* sample.cu: greedy rows over many blocks */
	ATLAS_CK_MASK_LOGITS,  /* sample.cu: grammar masks applied to logits */
	ATLAS_CK_MOE_ROUTE,    /* moe.cu: softmax, top-k, assignments grouped by expert */
	ATLAS_CK_MOE_GEMV8,    /* moe.cu: the expert products, 8/16/32/64 tokens a pass */
	ATLAS_CK_MOE_GEMV16,
	ATLAS_CK_MOE_GEMV32,
	ATLAS_CK_MOE_GEMV64,
	ATLAS_CK_MOE_GEMV_ANY, /* moe.cu: the expert products, any weight dtype */
	ATLAS_CK_MOE_COMBINE,  /* moe.cu: weighted sum of a token's experts */
	ATLAS_CK_MOE_GATHER,   /* moe.cu: x rows in group order (grouped GEMM) */
	ATLAS_CK_MOE_GEMM_TC,  /* gemm_tc.cu: the grouped wgmma GEMM of MoE prefill */
	ATLAS_CK_GEMM_INV,     /* gemm_inv.cu: batch-invariant GEMM (the GEMV's sums), */
	ATLAS_CK_GEMM_INV_T64, /* tiles of 128, 64 and 32 tokens, and the */
	ATLAS_CK_GEMM_INV_T32, /* merge of its split form */
	ATLAS_CK_GEMM_INV_REDUCE,
	ATLAS_CK_GEMM_TC_INV,  /* gemm_tc.cu: the invariant GEMM's sums on wgmma */
	ATLAS_CK_GEMV_TC8_F8,  /* gemv_tc.cu: the same on F8B weights */
	ATLAS_CK_GEMV_TC16_F8,
	ATLAS_CK_GEMV_TC32_F8,
	ATLAS_CK_GEMV_TC64_F8,
	ATLAS_CK_F8B_DEQUANT,  /* f8b.cu: an F8B weight as BF16 */
	ATLAS_CK_GEMV_F8,      /* linear.cu: atlas_gemv for F8B at T = 1 */
	ATLAS_CK_GEMV_TC8_W4,  /* gemv_tc.cu: the same on W4B weights */
	ATLAS_CK_GEMV_TC16_W4,
	ATLAS_CK_GEMV_TC32_W4,
	ATLAS_CK_GEMV_TC64_W4,
	ATLAS_CK_W4B_DEQUANT,  /* f8b.cu: a W4B weight as BF16 */
	ATLAS_CK_GEMV_W4,      /* linear.cu: atlas_gemv for W4B at T = 1 */
	ATLAS_CK_KV_STORE_Q,   /* kv.cu: K and V rows into an fp8 or q4 cache */
	ATLAS_CK_QK_ROPE_STORE_Q, /* rope.cu: the attention prologue, the same */
	ATLAS_CK_ATT_PART_FP8, /* attention.cu: split-K over an fp8 cache */
	ATLAS_CK_ATT_PART_Q4,  /* attention.cu: split-K over a q4 cache */
	ATLAS_CK_KV_DEQUANT,   /* kv.cu: a prefill's fp8 / q4 rows as BF16 */
	ATLAS_CK_GEMM_TC_F8,   /* gemm_tc.cu: the W8A8 FP8 wgmma GEMM */
	ATLAS_CK_MOE_GEMV1,    /* linear.cu: the expert products on CUDA cores (decode) */
	ATLAS_CK_FP8_ACT_QUANT, /* f8b.cu: its activations as FP8 */
	ATLAS_CK_GEMV_TC8_FP4, /* gemv_tc.cu: the tensor-core GEMV on FP4B (NVFP4) */
	ATLAS_CK_GEMV_TC16_FP4,
	ATLAS_CK_GEMV_TC32_FP4,
	ATLAS_CK_GEMV_TC64_FP4,
	ATLAS_CK_FP4B_DEQUANT, /* f8b.cu: an FP4B weight as BF16 */
	ATLAS_CK_GEMV_FP4,     /* linear.cu: atlas_gemv for FP4B at T = 1 */
	ATLAS_CK_ATT_INV_PREFILL, /* attention_inv.cu: batch-invariant attention, */
	ATLAS_CK_ATT_INV_SPLIT,   /* its prefill form, its split form and the */
	ATLAS_CK_ATT_INV_MERGE,   /* split form's merge */
	ATLAS_CK_ROPE_PARTIAL, /* hybrid.cu: rope of the first rd dims */
	ATLAS_CK_ATTN_GATE,    /* hybrid.cu: gated attention's split and gate */
	ATLAS_CK_GDN_CONV,     /* hybrid.cu: the DeltaNet's causal conv */
	ATLAS_CK_GDN_RULE16,   /* hybrid.cu: its delta rule, dk 16/32/64/128 */
	ATLAS_CK_GDN_RULE32,
	ATLAS_CK_GDN_RULE64,
	ATLAS_CK_GDN_RULE128,
	ATLAS_CK_COUNT,
};

/* Most kernel launches one profile records (a decode step of a 64-layer
 * model is ~1,000). */
#define ATLAS_CUDA_PROF_MAX 16384

/* Models one backend may load over its life (each keeps its arena until
 * the backend is destroyed): test-golden loads every fixture, 27 today. */
#define ATLAS_CUDA_MAX_ARENAS 64

/* The scale blocks of an F8B weight the backend holds (from its head, as
 * it was uploaded): the W8A8 GEMM's host side needs them without reading
 * device memory. */
struct cuda_f8meta {
	const void *p; /* the blob in device memory; NULL: a free entry */
	int bo, bi;
};

struct cuda_ctx {
	int dev;                      /* device ordinal */
	int sms;                      /* streaming multiprocessors: sizes split-K grids */
	char arch[16];                /* "sm90" */
	char gpu_name[128];           /* "NVIDIA H200" */
	cudaStream_t stream;          /* all work goes here */
	cudaLibrary_t lib;            /* the loaded kernel target */
	int lib_loaded;               /* lib is valid */
	const struct atlas_kernel_blob *blob; /* the target's registry entry */
	char target[64];              /* its name, "sm90/common" */
	cudaKernel_t kern[ATLAS_CK_COUNT]; /* entry points */
	/* the most dynamic shared memory a kernel was given beyond its
	 * table value (fused_prepare, per model: the attribute is the
	 * kernel's, so the largest of every model on this backend stands,
	 * and load_target gives it again to a reloaded kernel); 0: none */
	size_t smem_set[ATLAS_CK_COUNT];
	const char *last_kernel;      /* for error messages */
	char *arena;                  /* the current arena: one allocation per model */
	size_t arena_size, arena_used; /* bytes */
	char *old_arenas[ATLAS_CUDA_MAX_ARENAS]; /* arenas of earlier models, freed at
				       * destroy */
	size_t old_sizes[ATLAS_CUDA_MAX_ARENAS]; /* their sizes */
	int n_old;                    /* entries in old_arenas */
	size_t outside;               /* bytes allocated outside the arena */
	float *f32_stage;             /* to_f32 staging */
	size_t f32_cap;               /* its bytes */
	float *d_args;                /* sample args, [n, 5] */
	unsigned long long *d_amx;    /* atlas_argmax: [64] keys, then [64]
				       * unsigned counters; zero between launches */
	size_t args_cap;              /* its bytes */
	void *d_mask;                 /* grammar masks of a sample launch: row
				       * indices, then their mask words */
	size_t mask_cap;              /* its bytes */
	float *d_scratch;             /* sample scratch */
	size_t scratch_cap;           /* its bytes */
	float *att_part;              /* split-K attention partials: a fixed size,
				       * allocated at creation so that a graph
				       * capture never sees it move */
	size_t att_cap;               /* its bytes */
	int *att_cnt;                 /* split-K attention: finished splits per
				       * (token, kv head, head group) of a launch,
				       * zero between launches (the kernel's last
				       * block resets its counter); allocated with
				       * att_part, for the same reason */
	size_t att_cnt_cap;           /* its bytes */
	float *gemm_ws;               /* split-K partials of the wgmma GEMM:
				       * fixed (graphs record it), NULL = no
				       * split-K */
	size_t gemm_ws_cap;           /* its bytes */
	int capturing;                /* a graph capture is open on stream */
	int gemv_mode;                /* ATLAS_CUDA_GEMV: 0 default, 1 "fma" (the
				       * CUDA-core GEMV up to T = 8), 2 "tc" (the
				       * tensor-core GEMV from T = 1), 3 "bulk"
				       * (the bulk-copy GEMV up to T = 2) */
	int gemv_pre;                 /* atlas_gemv at T = 1 loads before its PDL
				       * wait (ATLAS_CUDA_GEMV_PRE=0: not) */
	int att_minkeys;              /* ATLAS_CUDA_ATT_MINKEYS: keys per split of
				       * decode attention at least (>= 32; 0: the
				       * fixed 32); not used in batch-invariant mode */
	int att_splits;               /* ATLAS_CUDA_ATT_SPLITS: splits a decode
				       * token's attention takes at most (1..32;
				       * 0: by batch size); not in batch-invariant
				       * mode */
	int no_split_k;               /* ATLAS_CUDA_SPLITK=0: the wgmma GEMM never
				       * splits K */
	int att_inv;                  /* batch-invariant BF16 attention on
				       * tensor cores (attention_inv.cu), the
				       * default; ATLAS_CUDA_ATT_INV=0: the
				       * split-K kernel (H100, 512-token
				       * prefill 19.1 against 34.2 ms) */
	int att_tc;                   /* ATLAS_CUDA_ATT_TC=1 (opt-in, an A/B
				       * until measured): decode steps outside
				       * batch-invariant mode over a BF16 cache
				       * take attention_inv.cu's split form (the
				       * tensor cores) instead of split-K */
	int flash_min_t;              /* ATLAS_CUDA_FLASH_MIN_T: fewest tokens T for
				       * the flash prefill attention (default
				       * ATLAS_CUDA_FLASH_MIN_T; A/B runs) */
	int tc_min_t;                 /* ATLAS_CUDA_TC_MIN_T: fewest rows T for
				       * the wgmma GEMM (default ATLAS_CUDA_TC_MIN_T;
				       * fewer take the GEMVs) */
	int inv_min_t;                /* ATLAS_CUDA_INV_MIN_T: fewest rows T for
				       * atlas_gemm_inv in batch-invariant mode
				       * (default ATLAS_CUDA_INV_MIN_T; fewer take
				       * the tensor-core GEMV, with the same sums) */
	int inv_wg_min_t;             /* ATLAS_CUDA_INV_WG_MIN_T: fewest rows T for
				       * atlas_gemm_tc_inv (the same sums on wgmma) */
	int f8_gemv_max_t;            /* ATLAS_CUDA_F8_GEMV_MAX_T: most rows T of an
				       * F8B product on the FP8 GEMV (default
				       * ATLAS_CUDA_F8_GEMV_MAX_T); more take the
				       * BF16 GEMMs on a dequantized copy */
	int f8_fma_max_t;             /* ATLAS_CUDA_F8_FMA_MAX_T: most rows T of an
				       * F8B, W4B or FP4B product on its T = 1
				       * GEMV (atlas_gemv_f8, _w4, _fp4) outside
				       * batch-invariant mode (1, the default; 0:
				       * never, for A/B runs) */
	void *kvq_ws;                 /* a prefill's quantized KV rows as BF16
				       * for the flash kernel (grows at the first
				       * long prefill; never in a graph capture) */
	size_t kvq_ws_cap;            /* its bytes */
	void *f8_ws;                  /* those copies (grows at the first long
				       * product; never inside a graph capture) */
	size_t f8_ws_cap;             /* its bytes */
	void *f8x_ws;                 /* W8A8: a product's FP8 activations and
				       * their scales (grows like f8_ws) */
	size_t f8x_ws_cap;            /* its bytes */
	int w8a8;                     /* ATLAS_FP8_W8A8=1: F8B products of at least
				       * w8a8_min_t rows quantize x to FP8 and take
				       * atlas_gemm_tc_f8 outside batch-invariant
				       * mode */
	int w8a8_min_t;               /* ATLAS_CUDA_W8A8_MIN_T (default
				       * ATLAS_CUDA_W8A8_MIN_T) */
	struct cuda_f8meta *f8meta;   /* F8B blobs uploaded so far */
	int n_f8meta, f8meta_cap;     /* entries used, allocated */
	int moe_rpb;                  /* ATLAS_CUDA_MOE_RPB (1, 2, 4, 8): warp tiles
				       * (atlas_moe_gemv1: rows) per block of the
				       * expert GEMVs, else 0 (by shape) */
	int moe_gemv1;                /* the expert products of small decode steps
				       * on atlas_moe_gemv1 outside batch-invariant
				       * mode (ATLAS_CUDA_MOE_GEMV1=0: not) */
	int moe_gemm_min_t;           /* ATLAS_CUDA_MOE_GEMM_MIN_T: fewest tokens for
				       * the moe op's grouped wgmma GEMM (default
				       * ATLAS_CUDA_MOE_GEMM_MIN_T) */
	unsigned char skip[ATLAS_CK_COUNT]; /* ATLAS_CUDA_SKIP: kernels not
				       * launched at all (timing decompositions
				       * only: the results are garbage) */
	int gemv_rpb;                 /* ATLAS_CUDA_GEMV_RPB (1, 2, 4, 8): rows per
				       * block of atlas_gemv, else 0 (chosen by N) */
	int fused;                    /* offer the fused one-token layer stack
				       * (ATLAS_CUDA_FUSED=0: not) */
	int fused_quant;              /* ATLAS_CUDA_FUSED_QUANT: 0 BF16 weights
				       * only in the fused kernel, 1 (default)
				       * F8B too, 2 (=1) W4B too */
	int fused_moe;                /* MoE models' one-token steps through
				       * the fused kernel too
				       * (ATLAS_CUDA_FUSED_MOE=0: not) */
	int fd_trace;                   /* ATLAS_CUDA_FD_TRACE=1 */
	int fused_mode;               /* ATLAS_CUDA_FUSED_MODE: its timing-only
				       * variants (atlas_fd_args.mode) */
	int pdl;                      /* launch with programmatic dependent launch
				       * (ATLAS_CUDA_PDL=0 turns it off) */
	int prof_on;                  /* time every launch (profile op) */
	int prof_n;                   /* launches timed so far */
	cudaEvent_t *prof_ev;         /* [2 * ATLAS_CUDA_PROF_MAX] start/stop pairs */
	unsigned char *prof_k;        /* [ATLAS_CUDA_PROF_MAX] kernel of each pair */
	struct cuda_moe_tab *moe_tabs; /* device copies of MoE layers' expert
				       * pointer arrays (cuda_moe.c) */
	int moe_ntabs, moe_tabs_cap;  /* entries used, allocated */
	unsigned long long *moe_reads; /* device: [0] experts read (the
				       * moe_experts_read op), [1] atlas_moe_route's
				       * finished-block counter (zero between
				       * launches); NULL until the first moe op */
};

/* Launch kernel k on the backend's stream, grid (gx, gy), 1-D blocks;
 * errors name the kernel. A zero-sized grid is a no-op. */
int atlas_cuda_launch(struct cuda_ctx *c, enum atlas_cuda_kernel k, unsigned gx, unsigned gy,
		      unsigned block, size_t smem, void **args);
/* The same with a grid z dimension. */
int atlas_cuda_launch_z(struct cuda_ctx *c, enum atlas_cuda_kernel k, unsigned gx, unsigned gy,
			unsigned gz, unsigned block, size_t smem, void **args);
/* 0, or ATLAS_EIO naming `what`, the CUDA error and the last kernel. */
int atlas_cuda_check(struct cuda_ctx *c, cudaError_t e, const char *what);
/* Make *buf hold at least `need` bytes of device memory (grows rarely). */
int atlas_cuda_scratch(struct atlas_backend *be, void **buf, size_t *cap, size_t need);
/* Weight rows per block of atlas_gemv (and atlas_moe_gemv1): the most
 * (fewest blocks, no split of K) that still gives every SM four blocks or
 * more; fewer rows per block split K across the block's warps instead.
 * `rows` counts every weight row of the launch (all segments; gate and
 * up rows with swiglu); at least min; `fixed` (an ATLAS_CUDA_*_RPB
 * switch, 0 when unset) wins when it is at least min. */
int atlas_cuda_gemv_rpb(const struct cuda_ctx *c, int64_t rows, int min, int fixed);
const char *atlas_cuda_kernel_name(enum atlas_cuda_kernel k);
/* Bytes of gemm_ws per SM: two 128 x 256 FP32 tiles (the split-K GEMM
 * keeps its partials within it: 34 MiB on 132 SMs). */
#define ATLAS_CUDA_GEMM_WS_PER_SM ((size_t)2 * 128 * 256 * 4)
/* Bytes of att_part: the attention op runs tokens in groups that fit. */
#define ATLAS_CUDA_ATT_SCRATCH ((size_t)64 << 20)
/* Most bytes of kvq_ws: a prefill over a quantized cache whose rows
 * need more (e.g. more than 8 sequences of 32k tokens of Qwen3-8B shape)
 * runs on the split-K kernel instead. */
#define ATLAS_CUDA_KVQ_WS_MAX ((size_t)2 << 30)
/* Bytes of att_cnt: one int per (token, kv head, group of 8 query heads)
 * of a launch, at most one per (token, query head); 256 KiB covers every
 * group of tokens whose partials fit in att_part (at least 32 splits of
 * 10 floats per query head), so it never shrinks a group. */
#define ATLAS_CUDA_ATT_COUNTERS ((size_t)256 << 10)

/* Fewest tokens for which attention takes the flash prefill kernel (with
 * at least 16 tokens per sequence in the step, op_attention). A prompt
 * whose first 2,000 tokens come from the prefix cache runs its last 24 as
 * one step: on the H200 (Qwen3-8B shape) that step took 15.5 ms with the
 * split-K decode kernel, which reads every key once per query token, and
 * 10.4 ms with the flash kernel (threshold 16 or 1 alike; 64 before):
 * bench/h200-2026-12-03-session/c3. */
#define ATLAS_CUDA_FLASH_MIN_T 16
/* Fewest tokens T for which the moe op's expert products take the
 * grouped wgmma GEMM rather than the grouped tensor-core GEMV (outside
 * batch-invariant mode). A guess until measured: at 128 tokens and top 8
 * of 128 experts each expert averages 8 rows, a sixteenth of a tile. */
#define ATLAS_CUDA_MOE_GEMM_MIN_T 128

/* Fewest rows T for which a matmul goes to the tensor-core GEMM (fewer:
 * the GEMVs); ATLAS_CUDA_TC_MIN_T overrides it for A/B runs. On the H200
 * at Qwen3-8B shapes the wgmma GEMM beat the tensor-core GEMV from T = 32
 * on (q: 28.6 against 38.1 us, gate: 52 against 108 us; at T = 64 q 27.9
 * against 75 us) and lost at T = 16 (all five products: 215 against 206
 * us); decode steps at batch 32 and 64 went from 16.8 / 45.1 ms to 11.7 /
 * 26.9 ms. With split-K (cuda_gemm.c) it won at T = 16-17 too (q 23.3,
 * gate 53.6, down 43.8 us against 26.2, 69.8, 68.3; batch 16 took 10.6 ms
 * a step on the GEMV) but not at T = 8 (q 18.3, gate 51.5 us on the
 * GEMV): hence 9. */
#define ATLAS_CUDA_TC_MIN_T 9

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* Fewest rows T for which a batch-invariant matmul goes to atlas_gemm_inv
 * (fewer: the tensor-core GEMV; both give a row the same bits, so this is
 * a speed choice only); ATLAS_CUDA_INV_MIN_T overrides it for A/B runs. */
#define ATLAS_CUDA_INV_MIN_T 17

/* Fewest rows T for which a batch-invariant matmul goes to the wgmma form
 * of those sums (atlas_gemm_tc_inv; fewer: atlas_gemm_inv or the GEMV,
 * the same bits); ATLAS_CUDA_INV_WG_MIN_T overrides it for A/B runs. On
 * the H200 at the Qwen3-8B shape, invariant decode steps at batch 32 / 64
 * took 9.77 / 15.87 ms with 128, 9.76 / 13.30 with 33 and 11.34 / 13.32
 * with 17 (bench/h200-2026-12-04-inv/NOTES.md): hence 33. */
#define ATLAS_CUDA_INV_WG_MIN_T 33

/* Most rows of an F8B product on the FP8 GEMV: up to 64 it streams the
 * weights once per 64 rows at one byte each; beyond, a dequantized BF16
 * copy (three bytes a weight of traffic, once) feeds the GEMMs. */
#define ATLAS_CUDA_F8_GEMV_MAX_T 64
/* Fewest rows of a W8A8 product (below, the FP8 GEMVs). */
#define ATLAS_CUDA_W8A8_MIN_T 16

/* The batch-invariant products of a (BF16, a->rpb as the tensor-core GEMV
 * chose it) through atlas_gemm_tc_inv: _tiles gives its 128 x 128 tiles,
 * or 0 when it does not take the shape; the launch returns 0 or < 0 on
 * error. ws NULL: merged results to the outputs; else range z's chains
 * (z < splits, the K range count) to ws at ws_off[product] + z T rows,
 * for atlas_gemm_inv_reduce. */
struct atlas_gemv_args;
int64_t atlas_cuda_gemm_tc_inv_tiles(const struct cuda_ctx *c, const struct atlas_gemv_args *a);
int atlas_cuda_gemm_tc_inv(struct cuda_ctx *c, const struct atlas_gemv_args *a, float *ws,
			   const long long *ws_off, int splits);

/* The tensor-core GEMM (cuda_gemm.c): out[i][T,N[i]] = x[T,K] w[i][N[i],K]^T
 * + bias[i] for n (1..ATLAS_TCG_MAXSEG) products of one x in one launch,
 * BF16 W and x; out BF16 (out_f32 0) or FP32 (out_f32 1); bias NULL or
 * per product (entries may be NULL). Returns 1 when it launched, 0 when
 * the shape or alignment is not its own (the caller then uses another
 * kernel), a negative code on a CUDA error. */
int atlas_cuda_gemm_tc(struct cuda_ctx *c, int n, void *const *out, int out_f32, const void *x,
		       const void *const *w, const void *const *bias, int64_t T, const int64_t *N,
		       int64_t K);
/* *out = a TMA tensor map of the BF16 matrix p [rows, cols] in boxes of
 * box_rows x 64 (gemm_tc.cu's layout), encoded afresh (not cached: the
 * moe op keeps its experts' maps itself). 0, ATLAS_EUNSUPPORTED when
 * the GPU or driver has no TMA GEMM, or an error. */
int atlas_cuda_tmap(const struct cuda_ctx *c, const void *p, int64_t rows, int64_t cols,
		    uint32_t box_rows, void *out);
/* W8A8 (ATLAS_FP8_W8A8=1): the n products of BF16 x by F8B blobs w[i] as
 * atlas_gemm_tc does them, x quantized to FP8 with a scale per row and
 * 128 columns (atlas_fp8_act_quant), then atlas_gemm_tc_f8. The same
 * return convention; 0 also for blobs whose scale blocks it cannot take
 * (rows not a multiple of 128 unless a scale spans the whole row; columns
 * neither a multiple of 128 nor the whole row). */
int atlas_cuda_gemm_f8(struct atlas_backend *be, int n, void *const *out, const void *x,
		       const void *const *w, const void *const *bias, int64_t T, const int64_t *N,
		       int64_t K);
/* Note an upload of `bytes` from host src to device dst: an F8B blob's
 * head (its first bytes) records the blob's scale blocks. */
void atlas_cuda_f8meta_note(struct cuda_ctx *c, const void *dst, const void *src, size_t bytes);
/* Forget the blob at p (released). */
void atlas_cuda_f8meta_drop(struct cuda_ctx *c, const void *p);

/* The same tile geometry's map through gemm_tc's cache (activations
 * whose address repeats every layer). */
int atlas_cuda_tmap_cached(const struct cuda_ctx *c, const void *p, int64_t rows, int64_t cols,
			   uint32_t box_rows, void *out);

/* Flash-attention prefill (cuda_attn.c), the attention op's contract
 * (backend.h); the same return convention as atlas_cuda_gemm_tc. */
int atlas_cuda_attention_inv(struct cuda_ctx *c, void *out, const void *q, const void *kc,
			     const void *vc, const struct atlas_kv_batch *b, int64_t T, int64_t H,
			     int64_t Hkv, int64_t hd, int64_t window, float scale);
int atlas_cuda_attention_prefill(struct cuda_ctx *c, void *out, const void *q, const void *kc,
				 const void *vc, const struct atlas_kv_batch *b, int64_t T,
				 int64_t H, int64_t Hkv, int64_t hd, int64_t window, float scale);

/* The fused one-token layer stack (cuda_fused.c): the backend.h ops
 * fused_prepare, fused_decode and fused_release. */
void *atlas_cuda_fused_prepare(struct atlas_backend *be, const struct atlas_fused_desc *d);
int atlas_cuda_fused_decode(struct atlas_backend *be, void *fused);
void atlas_cuda_fused_release(struct atlas_backend *be, void *fused);

/* The moe op and its expert-read counter (cuda_moe.c), and freeing what
 * they hold at destroy. */
int atlas_cuda_moe(struct atlas_backend *be, void *out, const void *x,
		   const struct atlas_moe_desc *d, int64_t T, void *scratch);
/* The experts-read counters (c->moe_reads), allocated once; 0 or an error. */
int atlas_cuda_moe_counters(struct cuda_ctx *c);
int64_t atlas_cuda_moe_experts_read(struct atlas_backend *be);
void atlas_cuda_moe_release(struct cuda_ctx *c);

/* Fill the op pointers of be. */
void atlas_cuda_ops_init(struct atlas_backend *be);
/* cuda_hybrid.c: the ops of hybrid linear-attention models. */
void atlas_cuda_hybrid_init(struct atlas_backend *be);
/* Fill the optional speed and benchmark ops (cuda_bench.c), and free
 * what they hold at destroy. */
void atlas_cuda_bench_init(struct atlas_backend *be);
void atlas_cuda_bench_release(struct cuda_ctx *c);

#endif
