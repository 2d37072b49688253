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
