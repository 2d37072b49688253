/* decoder_internal.h - the model's private state, shared by decoder.c
 * (loading), kvpool.c (the paged KV cache and sequences) and forward.c
 * (the forward step). Nothing outside lib/model includes this. */
#ifndef ATLAS_MODEL_DECODER_INTERNAL_H
#define ATLAS_MODEL_DECODER_INTERNAL_H

#include "../comm/comm.h"
#include "../io/quant.h"
#include "../io/safetensors.h"
#include "family.h"
#include "model.h"

struct weight {
	const void *p;          /* backend pointer, NULL if absent */
	enum atlas_dtype dtype; /* as stored */
	size_t nbytes;          /* bytes (this rank's slice) */
	void *own;              /* host copy the model packed (a column slice)
				 * that the backend uses in place, freed after
				 * weight_release; NULL otherwise */
};

struct layer {
	struct weight ln1, ln2;         /* input / post-attention norms [D] */
	struct weight wq, wk, wv, wo;   /* [H*hd, D], [Hkv*hd, D] x2, [D, H*hd] */
	struct weight bq, bk, bv, bo;   /* biases, or absent */
	struct weight qn, kn;           /* q/k norms [hd] (Qwen3) */
	struct weight wg, wu, wd;       /* [F, D], [F, D], [D, F] */
	struct weight bg, bu, bd;       /* MLP biases, or absent */
};

/* A layer's mixture-of-experts MLP (moe.c), bound in place of the dense
 * wg/wu/wd in the layers the config makes sparse. */
struct moe_layer {
	struct atlas_moe_desc d;        /* what the backend's moe op reads
					 * (d.n_experts 0: a dense layer) */
	const void **ptrs;              /* host [3 * E]: d.wg, d.wu, d.wd point
					 * at its thirds (into the fused
					 * tensors when the checkpoint has them) */
	struct weight router;           /* [E, D] */
	struct weight sg, su, sd, sgate; /* shared expert [Fs, D] x2, [D, Fs],
					 * gate [1, D], or absent */
	struct weight *w;               /* host [nw]: the expert tensors bound
					 * (3 per expert, or the 2 fused ones) */
	int64_t nw;                     /* entries of w */
};

/* A linear-attention (Gated DeltaNet) layer of a hybrid model (hybrid.c),
 * bound in place of the attention weights of layers[l]. */
struct lin_layer {
	struct weight qkvz;             /* [C + Hv dv, D]: q, k, v, z rows */
	struct weight ba;               /* [2 Hv, D]: b, a rows */
	struct weight out;              /* [D, Hv dv] */
	struct weight conv, A_log, dt_bias, norm; /* FP32 (atlas_gdn_desc) */
	struct atlas_gdn_desc d;        /* what the deltanet op reads */
	int64_t state_off;              /* floats into a sequence's state */
};

/* Words of the step header that rank 0 broadcasts before every step
 * (forward.c): op, items, tokens, max_keys, then the shapes the ranks
 * must share, the rest zero. */
#define ATLAS_STEP_HDR 16
/* the most bytes of step metadata forward.c moves in one copy, gaps and all */
#define ATLAS_META_ONE_COPY 32768

/* One cached block of the prefix cache (prefix.c); node b is block b.
 * Its key is (parent, its block_size tokens), so the path from the root
 * spells the tokens from position 0. */
struct atlas_pnode {
	int32_t parent;           /* block before it, -1: the first block */
	int32_t child;            /* first child, -1: none */
	int32_t prev, next;       /* siblings under the same parent, -1: none */
	int32_t hnext;            /* next node in its hash bucket, -1: none */
	int32_t lru_prev, lru_next; /* the idle list (cached, no sequence holds
				     * it), oldest first; -1 at the ends */
	uint32_t hash;            /* of the key */
	uint32_t gen;             /* bumped each time it leaves the cache, so a
				   * sequence can tell a node it remembers is gone */
	bool cached;              /* in the tree (else the other fields are stale) */
	int32_t snap;             /* a hybrid model's snapshot slot holding the
				   * recurrent state after this block's last
				   * token, -1: none */
};

/* A hybrid model's snapshot slots (prefix.c): recurrent states at block
 * boundaries, kept beside the cached blocks. */
struct atlas_psnap {
	float *state;             /* backend [m->state_floats], allocated on
				   * first use */
	int32_t node;             /* the node it belongs to, -1: free */
	uint64_t used;            /* tick of its last store or attach (LRU) */
};

/* The prefix cache: a tree of nodes keyed by (parent, tokens), found
 * through one hash table; host memory only. */
struct atlas_prefix {
	bool on;                  /* atlas_model_set_prefix_cache */
	struct atlas_pnode *nodes; /* [n_blocks], indexed by block id */
	int32_t *tokens;          /* [n_blocks * block_size]: each node's tokens */
	int32_t *buckets;         /* [n_buckets] first node of each chain, -1: none */
	uint32_t mask;            /* n_buckets - 1 (a power of two >= n_blocks) */
	int32_t root;             /* first node whose parent is -1, -1: none */
	int32_t lru_head, lru_tail; /* the idle list's ends, -1: empty */
	int64_t n_idle;           /* nodes on the idle list (counted free) */
	int32_t *stack;           /* [n_blocks] scratch for walking a subtree */
	struct atlas_psnap *snaps; /* [n_snaps] (hybrid models), or NULL */
	int64_t n_snaps;          /* slots at most */
	int64_t snaps_live;       /* slots holding a node's state */
	int64_t snaps_alloc;      /* slots with memory */
	uint64_t tick;            /* of the snapshot LRU */
};

struct atlas_model {
	struct atlas_config cfg;          /* parsed config.json */
	/* tensor parallelism: this rank's share of the heads and MLP rows
	 * (world 1: all of them). Rank r holds q heads [q0, q0 + H_loc), kv
	 * heads [kv0, kv0 + Hkv_loc) (one replicated head when Hkv < world),
	 * intermediate rows [f0, f0 + F_loc) of gate/up and columns of down. */
	struct atlas_comm *comm;          /* never NULL once loaded */
	bool own_comm;                    /* comm is the model's single comm */
	int64_t H_loc, Hkv_loc, F_loc;    /* heads, kv heads, MLP rows here */
	int64_t q0, kv0, f0;              /* first of each on this rank */
	const struct atlas_family *fam;   /* family flags */
	const char *kern_quant;           /* the weight type its kernels were picked for
					   * (be->specialize), static string */
	struct atlas_backend *be;         /* not owned */
	struct atlas_st *st;              /* the mmapped checkpoint */
	struct atlas_quant quant;         /* its quantization (method NONE: none):
					   * quantized weights are dequantized at
					   * load (lib/io/quant.h) */
	int64_t max_ctx;                  /* tokens per sequence */
	int64_t max_seqs;                 /* sequences per step */
	int64_t max_tokens;               /* tokens per step (activation rows) */
	struct weight embed, norm, lm_head; /* lm_head may alias embed; absent
					   * (p NULL) in an embedding model */
	const char *tprefix;              /* of the decoder's tensor names: "model."
					   * or "" (a base model's checkpoint;
					   * atlas_model_tensor_prefix) */
	struct atlas_embed_config emb;    /* sentence-transformers pooling; pooling
					   * NONE for a generation model */
	struct layer *layers;             /* [num_layers] */
	struct lin_layer *lin;            /* [num_layers] for a hybrid family
					   * (attention layers have lin[l].qkvz.p
					   * NULL), else NULL */
	int64_t state_floats;             /* FP32 recurrent state a sequence of a
					   * hybrid model holds (all its linear
					   * layers), 0 otherwise */
	void *qkvz, *ba, *lin_o;          /* hybrid activations, max_tokens rows */
	bool rows_read;                   /* an MTP head reads this model's hidden
					   * rows between steps (a cut keeps them) */
	void *h_keep;                     /* hybrid models: backend [max_tokens,
					   * hidden] act, where a cut's replay keeps
					   * the last step's hidden rows (kvpool.c) */
	void *qg;                         /* gated attention's q projection
					   * [max_tokens, H, 2 hd], or NULL */
	struct atlas_gdn_item *h_gdn;     /* host [max_seqs]: the step's items
					   * for the deltanet op (step() fills
					   * them, a snapshot included: prefix.c) */
	struct atlas_gdn_item *d_gdn;     /* backend copy, uploaded once a step */
	float *gdn_scratch;               /* backend FP32 [max_tokens, C] */
	int64_t gdn_n;                    /* items of the step being run */
	struct moe_layer *moe;            /* [num_layers] for an MoE family (dense
					   * layers have moe[l].d.n_experts 0),
					   * else NULL */
	void *moe_scratch;                /* backend, atlas_moe_scratch_bytes
					   * for max_tokens rows, or NULL */
	void *moe_zero;                   /* backend zeros [max_tokens, D] act:
					   * a rank > 0's share of an MoE layer's
					   * output (forward.c), or NULL */
	float *inv_freq;                  /* backend [hd/2] */
	size_t act;                       /* bytes per activation element */
	/* activation buffers, max_tokens rows each */
	void *x, *h, *q, *k, *v, *att, *o, *g, *u, *sel;
	float *logits;                    /* backend [max_tokens, V], FP32 always */
	/* KV pool: K then V, each [num_layers][n_blocks * block_size] rows
	 * of kv_row bytes (Hkv*hd values in format kv_dt, kvq.h) */
	void *kv;                         /* backend */
	enum atlas_kv_dtype kv_dt;        /* the cache's format (--kv-dtype) */
	size_t kv_row;                    /* bytes of one token's K (or V) row */
	int64_t block_size;               /* tokens per block */
	int64_t n_blocks;                 /* blocks in the pool */
	int64_t max_blocks;               /* blocks per sequence at most */
	int32_t *free_list;               /* host stack of plain free block ids
					   * (holding nothing anyone will read) */
	int64_t n_free;                   /* entries on free_list (the blocks a
					   * step can take are these plus
					   * prefix.n_idle: atlas_model_kv_blocks_free) */
	int32_t *refs;                    /* host [n_blocks]: sequences whose table
					   * holds each block */
	struct atlas_prefix prefix;       /* the prefix cache (prefix.c) */
	/* per-step token metadata: host staging and backend copies, each one
	 * block laid out [hdr ATLAS_STEP_HDR | ids | pos | seq | slot (each
	 * meta_stride) | tables (max_seqs * max_blocks)], so that the header
	 * and the ids go up in one copy and other ranks get the metadata in
	 * three broadcasts (forward.c) */
	int32_t *h_meta, *d_meta;         /* the blocks (host, backend) */
	bool meta_inflight;               /* h_meta may still be read by an upload
					   * queued since the last download (page-
					   * locked staging is read when the copy
					   * runs, not when it is queued) */
	int64_t meta_stride;              /* entries from ids to pos etc.: max_tokens
					   * rounded up to 64 (arrays stay 64-byte aligned) */
	int32_t *h_hdr, *d_hdr;           /* [ATLAS_STEP_HDR] step header */
	int32_t *h_ids, *h_pos, *h_seq, *h_slot; /* host [max_tokens] */
	int32_t *h_tables;                /* host [max_seqs, max_blocks] */
	int32_t *d_ids, *d_pos, *d_seq, *d_slot, *d_tables; /* backend, same shapes */
	int32_t *d_out;                   /* backend [max_seqs]: sampled ids */
	int32_t *h_out;                   /* host [max_seqs] */
	struct atlas_sample_args *h_args; /* host [max_seqs] */
	atlas_sample_hook hook;           /* before a device draw (model.h) */
	void *hook_ud;                    /* its argument */
	/* recorded decode steps (forward.c), by batch size */
	void **graphs;                    /* [max_seqs + 1] backend graphs, or NULL */
	bool no_graphs;                   /* run every step op by op */
	void *fused;                      /* the backend's fused one-token layer
					   * stack (fused_prepare), or NULL */
	bool synthetic;                   /* weights from the backend's random fill */
	bool f8b;                         /* linear layers are F8B (backend.h): an
					   * FP8 checkpoint on a backend that takes
					   * them, or synthetic.c's --quant fp8-block */
	bool w4b;                         /* linear layers are W4B (backend.h): a
					   * 4-bit weight-only checkpoint (AWQ, GPTQ,
					   * compressed-tensors) on a backend that
					   * takes them, or --quant w4a16 */
	bool fp4b;                        /* linear layers are FP4B (backend.h): an
					   * NVFP4 checkpoint on a backend that takes
					   * them, or --quant nvfp4 */
	int w4b_kept, w4b_dequant;        /* matrices bound as W4B, and those of a
					   * w4b model dequantized instead (a layout
					   * the kernels do not take) */
	/* an MTP head (atlas_model_load_mtp): one decoder layer whose input
	 * is fc([rmsnorm(embed(id)), rmsnorm(hidden)]) (forward.c) */
	bool mtp;                         /* this model is one */
	bool head_borrowed;               /* embed and lm_head are the target's
					   * (not released here) */
	struct weight fc_e, fc_h;         /* mtp.fc's columns [0, D) (the
					   * embedding's) and [D, 2D) (the hidden
					   * state's), each [D, D] */
	struct weight pre_e, pre_h;       /* pre_fc_norm_embedding / _hidden [D] */
	void *mtp_hid;                    /* backend [max_tokens, D] act: the
					   * step's hidden rows, gathered */
	void *mtp_zero;                   /* backend [max_tokens, D] act zeros:
					   * rows whose hidden state is unknown */
	bool blob_off;                    /* bind dequantizes quantized matrices even
					   * where the backend takes F8B / W4B / FP4B (moe.c:
					   * the moe op does not) */
};

struct atlas_seq {
	struct atlas_model *m; /* owner model */
	int32_t *blocks;       /* block table [m->max_blocks] */
	int64_t n_blocks;      /* entries in use */
	int64_t len;           /* tokens in the cache */
	/* publishing (prefix.c): blocks [0, n_pub) are in the tree or known
	 * to be there under another block id; pub_node is the tree node of
	 * block n_pub - 1, valid while its gen is still pub_gen */
	int64_t n_pub;         /* leading blocks already published */
	int32_t pub_node;      /* node of block n_pub - 1, -1: none */
	uint32_t pub_gen;      /* pub_node's gen when it was recorded */
	float *state;          /* backend [m->state_floats]: a hybrid model's
			        * recurrent state after token len - 1 (stale
			        * while len is 0), else NULL */
	/* cutting a hybrid sequence back (atlas_seq_truncate): the state
	 * before its last step of several tokens (or the one-token step that
	 * found none to extend), and the tokens appended since, which a cut
	 * replays from there */
	float *saved;          /* backend [m->state_floats], or NULL */
	int64_t saved_len;     /* len when saved was taken; -1: none */
	int32_t *tail;         /* host [m->max_tokens + ATLAS_TAIL_MORE] */
	int64_t n_tail;        /* tokens in tail */
	/* the prefix cache's snapshot of the state at the last block
	 * boundary the last step reached (prefix.c publishes it) */
	float *pend;           /* backend [m->state_floats], or NULL */
	int64_t pend_len;      /* the boundary (tokens), -1: none */
	int64_t snap_want;     /* a boundary where the cache's match of this
			        * sequence's prompt ended without a snapshot
			        * (its branch point): the step that reaches it
			        * snapshots there rather than at its last
			        * boundary; 0: none */
};

/* tokens of one-token steps a hybrid sequence may append after a step
 * of several and still be cut back into it (a draft model's passes) */
#define ATLAS_TAIL_MORE 64

/* kvpool.c, for forward.c: a hybrid sequence is about to append ids[0..n)
 * in one step; keep what atlas_seq_truncate needs to cut back into it. */
int atlas_seq_note_step(struct atlas_seq *s, const int32_t *ids, int64_t n);

/* forward.c: release the recorded decode steps and the fused stack. */
void atlas_forward_release(struct atlas_model *m);
/* forward.c: offer the loaded model to the backend's fused one-token
 * layer stack (m->fused stays NULL when it does not fit). */
void atlas_forward_fused_setup(struct atlas_model *m);

/* decoder.c: the load steps a synthetic model (synthetic.c) shares. */
int atlas_decoder_check_config(const struct atlas_config *c, const struct atlas_family *fam);
/* Take comm (NULL: a single comm the model owns) and set this rank's
 * share of heads and MLP rows; a clear error when the world size does
 * not divide them. */
int atlas_decoder_set_parallel(struct atlas_model *m, struct atlas_comm *comm);
/* Context, sequences, tokens per step and KV blocks of m from p (NULL or
 * zero fields: the defaults) and m->cfg. */
int atlas_decoder_size(struct atlas_model *m, const struct atlas_model_params *p);
int atlas_decoder_alloc_buffers(struct atlas_model *m);
/* An MTP head for target (atlas_model_load_mtp, atlas_model_synthetic_mtp):
 * a model marked as one, on target's backend and family, with no
 * graphs; then, once its config and sizes are set, its one layer (and
 * MoE slot) allocated and the target's embeddings and head borrowed. */
struct atlas_model *atlas_decoder_mtp_new(struct atlas_model *target);
int atlas_decoder_mtp_parts(struct atlas_model *m, struct atlas_model *target);

/* decoder.c, for moe.c: bind tensor `name` of shape [d0] or [d0, d1]
 * (d1 < 0: 1-D) whole into w, an error naming it when it is missing
 * (and required), of another shape or of a dtype the backend cannot
 * read; and give a weight back. */
int atlas_decoder_bind(struct atlas_model *m, struct weight *w, const char *name, int64_t d0,
		       int64_t d1, int required);
/* atlas_decoder_bind, the tensor converted to dt (F32 or BF16) on the way
 * when it is stored in another float dtype: an MoE layer of a quantized
 * checkpoint, whose dequantized experts and plain router must share one
 * dtype (moe.c). */
int atlas_decoder_bind_dtype(struct atlas_model *m, struct weight *w, const char *name,
			     int64_t d0, int64_t d1, enum atlas_dtype dt);
void atlas_decoder_release(struct atlas_model *m, struct weight *w);

/* decoder.c, for hybrid.c: tensor `name` of `ndim` dims `shape` in any
 * float dtype, converted to FP32 with `add` added to every element (1:
 * a zero-centred norm's scale), bound into w. */
int atlas_decoder_bind_f32(struct atlas_model *m, struct weight *w, const char *name,
			   const int64_t *shape, int ndim, float add);
/* Rows gathered from several matrices [rows[i], d1] (names[i]) into one
 * [n, d1] matrix bound into w: its row r is row map[r] of the sources
 * stacked in order. Quantized sources are dequantized; sources of
 * different dtypes all go to the dequantized type (FP32 on the CPU
 * backend, BF16 elsewhere). */
int atlas_decoder_bind_rows(struct atlas_model *m, struct weight *w, int n_src,
			    const char *const *names, const int64_t *rows, int64_t d1,
			    const int64_t *map, int64_t n);

/* hybrid.c: layer l's linear-attention weights into m->lin[l] (and its
 * state offset), for a layer the config makes linear. */
int atlas_hybrid_bind_layer(struct atlas_model *m, int64_t l);
/* hybrid.c: point m->lin[l].d at the layer's bound (or made) weights and
 * give the layer its share of a sequence's state: the last step of
 * binding a layer, from a checkpoint or made up (synthetic.c). */
void atlas_hybrid_point_desc(struct atlas_model *m, int64_t l);
/* hybrid.c: give back m->lin's weights. */
void atlas_hybrid_release(struct atlas_model *m);
/* hybrid.c: bytes of layer l's linear-attention weights one token reads. */
int64_t atlas_hybrid_bytes_per_token(const struct atlas_model *m, int64_t l);

/* moe.c: layer l's mixture-of-experts weights (when the config makes it
 * sparse) into m->moe[l]; 0, or an error naming the tensor that is
 * missing or has the wrong shape or dtype. m->moe is allocated. */
int atlas_moe_bind_layer(struct atlas_model *m, int64_t l);
/* Point ml->d at the layer's bound tensors (router, the expert pointer
 * arrays, the shared expert), all in wdt: the last step of binding a
 * layer, from a checkpoint (moe.c) or made up (synthetic.c). */
void atlas_moe_point_desc(struct moe_layer *ml, enum atlas_dtype wdt);
/* moe.c: give back m->moe's weights and arrays. */
void atlas_moe_release(struct atlas_model *m);
/* moe.c: bytes of layer l's MoE weights one token reads (router, top_k
 * experts, shared expert). */
int64_t atlas_moe_bytes_per_token(const struct atlas_model *m, int64_t l);

/* kvpool.c: allocate the pool and staging buffers / release them. */
int atlas_kvpool_init(struct atlas_model *m);
void atlas_kvpool_release(struct atlas_model *m);
/* Take blocks so that s can hold `len` tokens, copying a shared, partly
 * used last block first when s appends to it (copy on write); 0, or
 * ATLAS_ENOMEM / ATLAS_ERANGE and then nothing is taken, or the copy's
 * error. */
int atlas_kvpool_reserve(struct atlas_seq *s, int64_t len);
/* Give back the blocks of s past its first n_blocks (a failed step's). */
void atlas_kvpool_shrink(struct atlas_seq *s, int64_t n_blocks);
/* Check the pool's bookkeeping: every block exactly once on the free
 * list, on the idle list or held (refs > 0), the counts, and the tree's
 * links and hash chains. 0, or ATLAS_EINVAL naming the first breach
 * (for tests). */
int atlas_kvpool_check(const struct atlas_model *m);

/* prefix.c, for forward.c: where the step about to append n tokens to
 * hybrid sequence s should snapshot its state for the prefix cache: the
 * number of those tokens after which it reaches its last block boundary
 * within them (0: none, or the cache is off), with s->pend ready for it. */
int64_t atlas_prefix_snap_at(struct atlas_seq *s, int64_t n);

/* prefix.c, for kvpool.c: allocate / free the cache's arrays. */
int atlas_prefix_init(struct atlas_model *m);
void atlas_prefix_release(struct atlas_model *m);
/* Block b is a node of the tree. */
bool atlas_prefix_has(const struct atlas_model *m, int32_t b);
/* Block b, a node, lost its last holder: it becomes idle (counted free,
 * most recently used). */
void atlas_prefix_idle(struct atlas_model *m, int32_t b);
/* Evict the least recently used idle node with its whole subtree: its
 * idle nodes go on the free list, held ones just leave the tree. False
 * when nothing is idle. */
bool atlas_prefix_evict(struct atlas_model *m);
/* The tree's part of atlas_kvpool_check. */
int atlas_prefix_check(const struct atlas_model *m);

#endif
