/* attention_prefill.cu - causal grouped-query attention for prefill (many
 * query tokens per sequence) on tensor cores, FlashAttention-2 style,
 * reading K and V from the paged cache. Same contract as atlas_attention
 * (kernels/ABI.md): token t of sequence seq_of[t] at position p sees the
 * keys max(0, p-window+1)..p of its sequence, key j at cache row
 * block_tables[seq*max_blocks + j/block_size]*block_size + j%block_size,
 * query head h reads kv head h / (H / Hkv).
 *
 * Launch: grid (ceil(T/64), H), block 128 (exactly), hd 64 or 128, q,
 * kc, vc and out 16-byte aligned (the host, cuda_attn.c, checks all of
 * it; anything else traps). Block (x, h) computes query head h of the 64
 * tokens of query tile ceil(T/64)-1-x (the longest rows start first);
 * warp w owns rows 16w..16w+15 of the tile.
 *
 * Per block:
 *  - Q: the tile's 64 rows of head h are copied to shared memory
 *    (cp.async, rows past T zero-filled) and each warp loads its 16 rows
 *    as mma A fragments (ldmatrix.x4) that stay in registers.
 *  - Passes: the tile's rows may belong to several sequences (any seq_of
 *    and pos are allowed), so the block makes one pass per distinct
 *    sequence present, in increasing sequence order. Warp 0 finds the
 *    pass's sequence and the key range [kmin, kmax] that its rows see;
 *    rows of other sequences are masked out for the whole pass (their
 *    softmax state does not change: an all -inf row of a tile leaves
 *    m, l and O as they are, no NaN). The common case, one run of
 *    consecutive positions of one sequence, is a single pass.
 *  - Key tiles of 64 keys from kmin: the cache row of every key of the
 *    tile is resolved through the block table once (64 threads) into a
 *    double-buffered array of element offsets in shared memory, then K
 *    and V rows are copied as 16-byte cp.async chunks into one K and one
 *    V buffer (rows padded by 16 bytes, so ldmatrix's 8 row addresses hit
 *    distinct banks); keys past kmax are zero-filled. The FA2 overlap:
 *    V(j) is in flight while S = Q K(j)^T and the softmax run, K(j+1)
 *    while O += P V(j) runs.
 *  - S = Q K^T: mma.sync m16n8k16 BF16 -> FP32, K fragments by ldmatrix
 *    (K rows are the B operand's columns). Scores are scaled by
 *    scale * log2(e) and the softmax uses exp2.
 *  - Masking: a tile every row of the pass sees entirely (all valid rows
 *    in the pass's sequence, lo <= first key, last key <= p) skips it;
 *    otherwise each score is checked against its row's sequence, lo and
 *    p. A warp none of whose rows sees any key of the tile skips the
 *    tile's math (causal diagonal, windows, other sequences).
 *  - Online softmax in FP32 on the accumulator fragments: row max by quad
 *    shuffles, each thread keeps a partial row sum (reduced at the end);
 *    P is packed to BF16 A fragments straight from the S accumulators
 *    (the C layout of two n-tiles is the A layout of one k-step), and
 *    O += P V by mma.sync with V fragments from ldmatrix.trans.
 *  - Output: O / l per row, BF16.
 *
 * Shared memory (static): K and V buffers 2 * 64 * (hd + 8) * 2 bytes
 * (34,816 at hd 128; Q is staged in the V buffer before the first V
 * tile), 1 KiB of key offsets, a few words of pass state.
 *
 * Results: probabilities are rounded to BF16 before the P V product (as
 * FlashAttention does); the sum l is taken from the FP32 values. The
 * summation order differs from atlas_attention's, so outputs agree to
 * BF16 rounding, not bit for bit. Rows whose cache rows between a pass's
 * kmin and kmax hold non-finite values would see NaN through 0 * NaN:
 * the cache holds finite values for every key of a sequence up to its
 * last position (kv_store writes them before attention runs).
 */
#include "common.cuh"
#include "attention_mma.cuh"

#include <limits.h>

extern "C" __global__ void __launch_bounds__(AP_THREADS)
atlas_attention_prefill(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
			const int *seq_of, const int *pos, const int *block_tables,
			long long max_blocks, long long block_size, long long T, long long H,
			long long Hkv, long long hd, long long window, float scale)
{
	ATLAS_PDL_ENTRY();
	ap_prefill_entry<false>(out, q, kc, vc, seq_of, pos, block_tables, max_blocks, block_size, T, H,
				 Hkv, hd, window, scale);
}
