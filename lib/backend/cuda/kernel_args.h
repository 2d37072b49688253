/* kernel_args.h - parameter blocks of the kernels that take one struct by
 * value (kernels/ABI.md), shared by the host code (C) and the kernels
 * (CUDA C++), so both see one layout. */
#ifndef ATLAS_BACKEND_CUDA_KERNEL_ARGS_H
#define ATLAS_BACKEND_CUDA_KERNEL_ARGS_H

/* One product of atlas_gemv: out[T,N] = x[T,K] W^T + bias. */
struct atlas_gemv_seg {
	const void *w;    /* [N, K] in wdt */
	const void *bias; /* [N] in wdt, or NULL */
	void *out;        /* [T, N], bf16 or (out_f32) float */
	long long N;      /* output features */
};

#define ATLAS_GEMV_MAXSEG 3

/* The head of an ATLAS_DTYPE_F8B weight blob as the kernels read it:
 * struct atlas_f8b_head of lib/backend/backend.h, field for field (cuda.c
 * checks that they agree). q starts ATLAS_F8B_HEAD_BYTES into the blob. */
#define ATLAS_F8B_HEAD_BYTES 256
struct atlas_f8b_head_k {
	unsigned magic;
	int bo, bi, nbc;
	long long N, K, scale_off;
};

/* The head of an ATLAS_DTYPE_W4B weight blob as the kernels read it:
 * struct atlas_w4b_head of backend.h (cuda.c checks that they agree);
 * q starts ATLAS_W4B_HEAD_BYTES into the blob, K / 2 bytes a row. */
#define ATLAS_W4B_HEAD_BYTES 256
struct atlas_w4b_head_k {
	unsigned magic;
	int g, ng, pad;
	long long N, K, z_off, s_off;
};

/* The head of an ATLAS_DTYPE_FP4B weight blob as the kernels read it:
 * struct atlas_fp4b_head of backend.h (cuda.c checks that they agree);
 * q starts ATLAS_FP4B_HEAD_BYTES into the blob, K / 2 bytes a row, the
 * F8 scales at s_off, K / 16 bytes a row. */
#define ATLAS_FP4B_HEAD_BYTES 256
struct atlas_fp4b_head_k {
	unsigned magic;
	int g, ng;
	float gm;
	long long N, K, s_off;
};

struct atlas_gemv_args {
	struct atlas_gemv_seg seg[ATLAS_GEMV_MAXSEG]; /* the products, in block order */
	const void *x; /* [T, K] bf16, shared by every segment */
	long long T, K;
	int nseg;    /* 1..ATLAS_GEMV_MAXSEG */
	int wdt;     /* weight (and bias) dtype, enum atlas_dtype numbering
		      * (atlas_gemv_tc*_f8: F8B blobs, *_w4: W4B blobs;
		      * BF16 biases) */
	int rpb;     /* weight rows per block: 1, 2, 4 or 8 (>= 2 with swiglu) */
	int swiglu;  /* 1: seg[0] = gate, seg[1] = up (same N, no bias);
		      * seg[0].out = silu(g) * u */
	int out_f32; /* outputs are float (the logits) */
	int pre;     /* atlas_gemv at T = 1, BF16: issue the first loads
		      * before the PDL wait */
};

#ifdef __cplusplus
#define ATLAS_ALIGN64 alignas(64)
#else
#define ATLAS_ALIGN64 _Alignas(64)
#endif

#define ATLAS_TCG_MAXSEG 3

/* A CUtensorMap as a kernel parameter sees it: 128 opaque bytes. */
struct atlas_tmap {
	ATLAS_ALIGN64 unsigned long long w[16];
};

/* atlas_gemm_tc*: the products of one x in one launch (q, k and v; gate
 * and up). Grid y goes to segment 0's ny[0] column tiles, then segment
 * 1's, ...; split-K partials of segment s start at element ws_off[s] of
 * ws (z-th split at ws_off[s] + z * T * N[s]). */
struct atlas_tcg_args {
	struct atlas_tmap map[ATLAS_TCG_MAXSEG]; /* W of each segment: dims {K, N}, box {64, bn} */
	struct atlas_tmap map_x;                 /* x: dims {K, T}, box {64, 128} */
	void *out[ATLAS_TCG_MAXSEG];             /* [T, N] bf16 (float for _f32) */
	const void *bias[ATLAS_TCG_MAXSEG];      /* [N] BF16 or NULL */
	long long N[ATLAS_TCG_MAXSEG];
	long long ws_off[ATLAS_TCG_MAXSEG];
	float *ws;                               /* split-K partials, or NULL */
	long long T, K;
	int ny[ATLAS_TCG_MAXSEG];
	int nseg, bn;                            /* bn: tile width, 128 or 256 */
	int out_f32;                             /* atlas_gemm_tc_reduce, atlas_gemm_tc_inv */
	int wpr;                                 /* atlas_gemm_tc_inv: the GEMV's K ranges */
	int swiglu;                              /* atlas_gemm_tc_inv: maps 0, 1 = gate, up
						  * (boxes of 64 rows); out = silu(g) u */
	int splits;                              /* atlas_gemm_tc_reduce only */
	/* atlas_moe_gemm_tc only (grouped: one expert's rows a tile): */
	const struct atlas_tmap *gmap;           /* device [nseg][E]: segment s of expert e
						  * at gmap[s * E + e] (map[] unused) */
	const int *tiles;                        /* [grid x]: tile i is e << 16 | j, rows
						  * off[e] + 128 j .. of expert e */
	const int *ntiles;                       /* tiles in use; blocks past it exit */
	const int *off;                          /* [E + 1]: expert e's rows of x and out */
	const int *rowmap;                       /* NULL, or the out row of each x row */
	int E;
	/* atlas_gemm_tc_f8 only (W8A8: map_x and map[] are FP8 bytes, boxes
	 * {128, 128}): */
	const float *xs;                         /* [T][nkx] scale of each row's 128
						  * columns (atlas_fp8_act_quant) */
	const float *wsc[ATLAS_TCG_MAXSEG];      /* each F8B blob's scales
						  * [ceil(N / wbo)][wnbc] */
	int wbo[ATLAS_TCG_MAXSEG], wbi[ATLAS_TCG_MAXSEG], wnbc[ATLAS_TCG_MAXSEG];
	int wcol[ATLAS_TCG_MAXSEG];              /* 1: wbo is not a multiple of 128
						  * (so wbi covers K): scales by
						  * column in the epilogue */
	int nkx;                                 /* ceil(K / 128) */
};

/* atlas_gemm_tc*: dynamic shared memory of a block (1 KiB of alignment
 * slack, 192 KiB of pipeline stages, the mbarriers), either tile width. */
#define ATLAS_TCG_SMEM (1024 + 196608 + 256)

/* atlas_gemv_tc*: stages of each warp's cp.async ring and the dynamic
 * shared memory of a block (8 warps; a stage holds 2 weight and nt8 x
 * fragments of 16 bytes per lane), by token tiles of 8 (nt8 = 1, 2, 4, 8). */
#define ATLAS_GTC_STAGES(nt8) ((nt8) <= 2 ? 8 : 4)
#define ATLAS_GTC_SMEM(nt8) (8 * ATLAS_GTC_STAGES(nt8) * (2 + (nt8)) * 32 * 16)

/* atlas_gemm_inv* (gemm_inv.cu): the batch-invariant GEMM, the GEMV's
 * (gemv_tc.cu) sum order at any T, for up to 3 products of one x. Grid x
 * goes to product 0's nbx[0] row tiles, then product 1's, ...; grid z:
 * 1, or (ws set) one block per K range, whose chain sums go to ws for
 * atlas_gemm_inv_reduce. */
struct atlas_ginv_args {
	const void *x;            /* [T, K] bf16 */
	const void *w[3];         /* [N, K] bf16 (swiglu: w[0] gate, w[1] up) */
	const void *bias[3];      /* [N] bf16 or NULL (never with swiglu) */
	void *out[3];             /* [T, N] bf16, or float with out_f32 */
	long long N[3];
	long long ws_off[3];      /* product s's partials at ws + ws_off[s]:
				   * [range][T][rows], rows = N (swiglu: 2N,
				   * the up rows after the gate rows) */
	float *ws;                /* NULL: whole K per block */
	long long T, K;
	int nbx[3];               /* row tiles (grid x blocks) of each product */
	int nseg;                 /* products (swiglu: 1) */
	int wpr;                  /* K ranges: the GEMV's 8 / rpb for these weights */
	int swiglu;               /* out = silu(round(x Wg^T)) * round(x Wu^T) */
	int out_f32;
};

/* atlas_gemm_inv (tile 128 weight rows x 128 tokens), _t64 (128 x 64)
 * and _t32 (256 x 32): rows per block tile, tokens per block tile,
 * cp.async stages and dynamic shared memory (a stage: the tile's W rows
 * and x rows, 128 bytes each). */
#define ATLAS_GINV_BM(v) ((v) == 2 ? 256 : 128)
#define ATLAS_GINV_BT(v) ((v) == 0 ? 128 : (v) == 1 ? 64 : 32)
#define ATLAS_GINV_STAGES 4
#define ATLAS_GINV_SMEM(v) (ATLAS_GINV_STAGES * (ATLAS_GINV_BM(v) + ATLAS_GINV_BT(v)) * 128)

/* moe.cu: the most experts a layer may have and choose per token on the
 * CUDA backend (routing keeps a token's probabilities in shared memory;
 * the grouping gives each expert a thread), and atlas_moe_route's
 * block. */
#define ATLAS_MOE_MAX_E 1024
#define ATLAS_MOE_MAX_K 64
#define ATLAS_MOE_GROUP_THREADS 1024

/* atlas_moe_gemv*: the expert products of one moe op (moe.cu). Block
 * (row tile x, slot y) multiplies the rows of expert act[y] (when y <
 * act[E]) with the x rows of its group's assignments. Dynamic shared
 * memory ATLAS_GTC_SMEM(nt8), as atlas_gemv_tc*. */
struct atlas_moe_args {
	const void *x;           /* bf16 [*, K]: row a / xdiv for assignment a */
	void *out;               /* bf16 [T * top_k, N]: row a for assignment a */
	const void *const *w0;   /* device array [E]: gate (swiglu) or the matrix, [N, K] bf16 */
	const void *const *w1;   /* device array [E]: up (swiglu), else NULL */
	const int *list;         /* assignments grouped by expert (atlas_moe_route) */
	const int *off;          /* [E + 1]: expert e's group is list[off[e] .. off[e + 1]) */
	const int *act;          /* [E + 1]: chosen experts ascending, act[E] their count */
	long long N, K;          /* output rows (features with swiglu), columns */
	int E;                   /* experts in the layer */
	int wdt;                 /* weight dtype (atlas_moe_gemv_any; the others take BF16) */
	int xdiv;                /* top_k for gate/up (x is per token), 1 for down */
	int rpb;                 /* warp tiles per block: 1, 2, 4 or 8 */
	int swiglu;              /* 1: out = silu(x w0^T) * (x w1^T), 8 features a warp tile */
};

/* atlas_gemv_bulk: stages of its bulk-copy ring, columns per row slice,
 * and its dynamic shared memory for T rows of x of K columns (T <= 2). */
#define ATLAS_GBK_STAGES 8
#define ATLAS_GBK_KC 1024
#define ATLAS_GBK_SMEM(T, K) (ATLAS_GBK_STAGES * 8 * ATLAS_GBK_KC * 2 + (T) * (K) * 2)
/* the most any launch asks for (the host falls back above it) */
#define ATLAS_GBK_SMEM_MAX (ATLAS_GBK_STAGES * 8 * ATLAS_GBK_KC * 2 + 65536)

/* atlas_decode_fused (decode_fused.cu): every layer of a one-token decode
 * step in one launch. Weights stream through a ring of nst stages of
 * ATLAS_FD_CHUNK bytes; consumer warps take ATLAS_FD_SLICE columns of a
 * chunk each, so every K is a multiple of it. */
#define ATLAS_FD_CHUNK 16384
#define ATLAS_FD_SLICE 1024
/* a BF16 launch's products whose K is not a multiple of ATLAS_FD_SLICE
 * (an MoE layer's expert width: 768 in Qwen3-30B-A3B) take slices of
 * this many columns, four a consumer warp a chunk */
#define ATLAS_FD_SLICE_S 256
#define ATLAS_FD_MAXK 16    /* an MoE layer's experts a token at most */
#define ATLAS_FD_MAXST 16   /* ring stages at most */
#define ATLAS_FD_HD 128     /* the head size it takes */
#define ATLAS_FD_MAXG 8     /* query heads per kv head at most */
#define ATLAS_FD_MAXSPLIT 32 /* attention splits per kv head at most */
#define ATLAS_FD_TILE 32    /* keys per attention step */
#define ATLAS_FD_PSTRIDE (ATLAS_FD_HD + 4) /* floats per attention partial (16-byte rows) */
#define ATLAS_FD_TRACE 12    /* phases a layer of ATLAS_CUDA_FD_TRACE */
#define ATLAS_FD_THREADS 288 /* 8 consumer warps + 1 producer warp */
/* bytes of the attention scratch at the start of the x area: q of the
 * group [MAXG][HD] and scores [MAXG][TILE] as float, a tile's K and V
 * rows [TILE][HD] bf16 each */
#define ATLAS_FD_ATT_SCRATCH (ATLAS_FD_MAXG * (ATLAS_FD_HD + ATLAS_FD_TILE) * 4 + 2 * ATLAS_FD_TILE * ATLAS_FD_HD * 2)

/* One layer's device pointers (weights in the launch's wfmt, biases
 * bf16; norms in nwdt). With wfmt ATLAS_FD_F8B the seven matrices are F8B
 * blobs (lib/backend/backend.h) and the layer also gives, for each in the
 * order q, k, v, o, gate, up, down, its scales (s of the blob, FP32) and
 * the scale block as shifts: row n, column k take s[(n >> sbo) * nbc +
 * (k >> sbi)], nbc = ceil(K / 2^sbi) (blocks that are powers of two; 31
 * for a block that covers the whole dimension). With ATLAS_FD_W4B they
 * are W4B blobs: sc their BF16 scales, zp their zero points, sbi log2 of
 * the group (a power of two, at least 128; 31 for one group a row):
 * row n, column k take s[n * ng + (k >> sbi)], ng = ceil(K / 2^sbi). */
#define ATLAS_FD_BF16 0
#define ATLAS_FD_F8B 1
#define ATLAS_FD_W4B 2
struct atlas_fd_layer {
	const void *wq, *wk, *wv, *bq, *bk, *bv; /* biases may be NULL */
	const void *wo, *wg, *wu, *wd;
	const void *ln1, *ln2, *qn, *kn;         /* qn, kn NULL: no q/k norm */
	void *kc, *vc;                           /* [n_slots, Hkv * hd] each */
	const void *sc[7];                       /* F8B, W4B: the scales */
	const unsigned char *zp[7];              /* W4B: the zero points */
	unsigned char sbo[7], sbi[7];            /* log2 of the block */
	/* an MoE layer (BF16 launches): the router [E, D] and the experts'
	 * pointers, device [3E] (gate [Fe, D] of each, then up, then down
	 * [D, Fe]); NULL for a dense layer (wg, wu, wd) */
	const void *wr;
	const void *const *ex;
};

struct atlas_fd_args {
	const struct atlas_fd_layer *layers; /* device [n_layers] */
	void *x;        /* [D] residual stream: in, and out (before the last MLP) */
	void *o;        /* [D] out: the last layer's MLP output */
	void *q, *k, *v, *att, *g; /* scratch: [H*hd], [Hkv*hd] x2, [H*hd], [F] */
	float *part;    /* attention partials [H][ATLAS_FD_MAXSPLIT][ATLAS_FD_PSTRIDE]:
			 * the unnormalized output, then max and sum */
	unsigned *sync; /* [0] barrier arrivals, [1] blocks done, [2 + g] the
			 * finished splits of kv head g; zero between launches */
	const int *pos, *seq_of, *slot, *tables; /* the step's metadata, row 0 */
	const float *inv_freq; /* [hd / 2] */
	long long max_blocks, block_size;
	int n_layers, D, F, H, Hkv;
	int nwdt;       /* norm weight dtype */
	int window;     /* sliding window, 0 = none */
	int nst;        /* ring stages */
	int xs_bytes;   /* bytes of the x area (>= ATLAS_FD_ATT_SCRATCH) */
	int part_cap;   /* floats of the row partial sums */
	int wfmt;       /* ATLAS_FD_BF16, ATLAS_FD_F8B or ATLAS_FD_W4B */
	int mode;       /* ATLAS_CUDA_FUSED_MODE: 0 normal; timing only: 1 no
			 * attention, 2 no grid barriers, 3 weights only */
	unsigned long long *trace; /* ATLAS_CUDA_FD_TRACE: [n_layers *
				    * ATLAS_FD_TRACE + 1] ns a phase
				    * (decode_fused.cu's fd_mark), launches;
				    * NULL: none */
	float eps, scale;
	/* MoE layers: E experts, topk of them a token (<= ATLAS_FD_MAXK),
	 * each Fe wide (a multiple of ATLAS_FD_SLICE_S), top-k weights
	 * renormalised when norm_topk; lg [E] FP32 router logits; g holds
	 * topk * Fe; reads (may be NULL) += topk a layer */
	int E, topk, Fe, norm_topk;
	float *lg;
	unsigned long long *reads;
};

#endif
