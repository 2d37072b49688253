/* cuda_attn.c - the host side of the flash-attention prefill kernel
 * (kernels/sm90/common/attention_prefill.cu, atlas_attention_prefill):
 * causal GQA attention of T query tokens against the paged KV cache on
 * tensor cores, one block per (64-token query tile, query head).
 *
 * The kernel takes the attention op's arguments as they are (backend.h);
 * this file only decides whether the shape is its own: head size 64 or
 * 128, H a multiple of Hkv, q, out, kc and vc 16-byte aligned, block size
 * and grid within the kernel's int arithmetic. Any seq_of / pos mix is
 * correct (a query tile whose tokens belong to several sequences makes one
 * pass per sequence); prefill chunks, runs of consecutive positions of one
 * sequence, are the fast case. The caller uses it only for T large enough
 * that tiles of 64 tokens fill the GPU (decode keeps the split-K kernel). */
#include "cuda_internal.h"
#include "../../core/log.h"

#include <limits.h>
#include <stdint.h>

#define ATT_PF_BM 64 /* query tokens per block (kernel's AP_BM) */
#define ATT_PF_THREADS 128

int atlas_cuda_attention_prefill(struct cuda_ctx *c, void *out, const void *q, const void *kc,
				 const void *vc, const struct atlas_kv_batch *b, int64_t T,
				 int64_t H, int64_t Hkv, int64_t hd, int64_t window, float scale)
{
	if (T <= 0 || (hd != 64 && hd != 128) || Hkv <= 0 || H <= 0 || H % Hkv || H > 65535)
		return 0;
	if (((uintptr_t)out | (uintptr_t)q | (uintptr_t)kc | (uintptr_t)vc) & 15)
		return 0;
	if (b->block_size < 1 || b->block_size > INT_MAX || b->max_blocks < 1 ||
	    (T + ATT_PF_BM - 1) / ATT_PF_BM > INT_MAX || window < 0)
		return 0;
	long long mb = b->max_blocks, bs = b->block_size, t = T, h = H, hk = Hkv, d = hd,
		  wdw = window;
	const int32_t *seq = b->seq_of, *pos = b->pos, *tab = b->block_tables;
	void *args[] = {&out, &q, &kc, &vc, &seq, &pos, &tab, &mb, &bs, &t, &h, &hk, &d, &wdw,
			&scale};
	int rc = atlas_cuda_launch(c, ATLAS_CK_ATT_PREFILL, (unsigned)((T + ATT_PF_BM - 1) / ATT_PF_BM),
				   (unsigned)H, ATT_PF_THREADS, 0, args);
	return rc ? rc : 1;
}

/* Batch-invariant attention (kernels/sm90/common/attention_inv.cu): a
 * row's bits do not depend on the step around it, and its prefill form
 * and split form give the same bits, so the choice between them below
 * is free to follow speed. Its shapes: a BF16 cache, hd 64 or 128, at
 * most 16 query heads a kv head, 16-byte aligned q, out and cache, and
 * the kernels present; they do not depend on T, so an engine's steps
 * never mix this family with the split-K kernel's. 1 when done, 0 when
 * the shape is not its own, or an error. The caller decides whether the
 * family is on (ATLAS_CUDA_ATT_INV in batch-invariant mode; outside it,
 * ATLAS_CUDA_ATT_TC sends decode steps, those the flash kernel does not
 * take, to the split form: it is correct for any step). */
#define ATT_INV_SPLIT 128 /* attention_inv.cu's AI_SPLIT */
#define ATT_INV_MAXG 16
#define ATT_INV_ZMAX 64 /* split kernel: blocks a (token, kv head) at most */

int atlas_cuda_attention_inv(struct cuda_ctx *c, void *out, const void *q, const void *kc,
			     const void *vc, const struct atlas_kv_batch *b, int64_t T, int64_t H,
			     int64_t Hkv, int64_t hd, int64_t window, float scale)
{
	if (!c->kern[ATLAS_CK_ATT_INV_PREFILL] || !c->kern[ATLAS_CK_ATT_INV_SPLIT] ||
	    !c->kern[ATLAS_CK_ATT_INV_MERGE] || !c->att_part)
		return 0;
	if (T <= 0 || (hd != 64 && hd != 128) || Hkv <= 0 || H <= 0 || H % Hkv ||
	    H / Hkv > ATT_INV_MAXG || H > 65535 || window < 0)
		return 0;
	if (((uintptr_t)out | (uintptr_t)q | (uintptr_t)kc | (uintptr_t)vc) & 15)
		return 0;
	if (b->block_size < 1 || b->max_blocks < 1 || b->max_blocks * b->block_size > INT_MAX)
		return 0;
	long long mb = b->max_blocks, bs = b->block_size, hh = H, hk = Hkv, d = hd, wdw = window;
	const int32_t *seq = b->seq_of, *pos = b->pos, *tab = b->block_tables;
	/* prefill chunks (runs of one sequence's tokens): 64 tokens of a
	 * query head a block */
	if (T >= c->flash_min_t && T >= 16 * b->n_seq && (T + ATT_PF_BM - 1) / ATT_PF_BM <= INT_MAX) {
		long long t = T;
		void *args[] = {&out, &q, &kc, &vc, &seq, &pos, &tab, &mb, &bs, &t, &hh, &hk, &d, &wdw,
				&scale};
		int rc = atlas_cuda_launch(c, ATLAS_CK_ATT_INV_PREFILL,
					   (unsigned)((T + ATT_PF_BM - 1) / ATT_PF_BM), (unsigned)H,
					   ATT_PF_THREADS, 0, args);
		return rc ? rc : 1;
	}
	/* split form: room in part for every split of the longest context
	 * the step can hold (a captured step is replayed as contexts grow:
	 * the cache's), a token's splits over at most ATT_INV_ZMAX blocks */
	const int64_t keys = c->capturing || b->max_keys <= 0 ? b->max_blocks * b->block_size
							      : b->max_keys;
	long long splits = (keys + ATT_INV_SPLIT - 1) / ATT_INV_SPLIT;
	if (splits < 1)
		splits = 1;
	const unsigned z = (unsigned)(splits < ATT_INV_ZMAX ? splits : ATT_INV_ZMAX);
	const size_t per_tok = (size_t)H * (size_t)splits * (size_t)(hd + 2) * sizeof(float);
	const int64_t tg = (int64_t)(c->att_cap / per_tok);
	if (tg < 1) {
		atlas_debug("invariant attention: %lld splits a token do not fit the partials",
			    splits);
		return 0;
	}
	for (int64_t t0 = 0; t0 < T; t0 += tg) {
		long long n = T - t0 < tg ? T - t0 : tg;
		const char *qq = (const char *)q + (size_t)(t0 * H * hd) * 2;
		char *oo = (char *)out + (size_t)(t0 * H * hd) * 2;
		const int32_t *sq = seq + t0, *ps = pos + t0;
		void *a1[] = {&c->att_part, &qq, &kc, &vc, &sq, &ps, &tab, &mb, &bs, &n, &hh, &hk, &d,
			      &wdw, &scale, &splits};
		int rc = atlas_cuda_launch(c, ATLAS_CK_ATT_INV_SPLIT, (unsigned)(n * Hkv), z, 32, 0, a1);
		if (rc)
			return rc;
		void *a2[] = {&oo, &c->att_part, &ps, &n, &hh, &d, &wdw, &splits};
		rc = atlas_cuda_launch(c, ATLAS_CK_ATT_INV_MERGE, (unsigned)(n * H), 1, (unsigned)hd, 0,
				       a2);
		if (rc)
			return rc;
	}
	return 1;
}
