/* kvq.h - the element formats of the paged KV cache (--kv-dtype), and
 * their host reference: the CPU backend stores and reads the cache with
 * these functions, and the CUDA kernels (kernels/sm90/common/kvq.cuh)
 * must write the same bytes for the same input row.
 *
 * A cache row is one token of one layer's K (or V) pool: Hkv heads of hd
 * values. Its bytes, atlas_kv_row_bytes(), are
 *
 *   auto, bf16   Hkv * hd elements of the activation type (auto) or BF16
 *   fp8          a scale area of Hkv FP32 scales, padded to 16 bytes, then
 *                Hkv * hd FP8 E4M3 codes, head by head:
 *                  x[h][i] = f32(e4m3[h][i]) * scale[h]
 *                scale[h] = amax_h / 448 (the head's largest magnitude at
 *                the top of E4M3's range; 1 for an all-zero head), the
 *                codes E4M3(x * (448 / amax_h)), nearest even, saturating
 *   q4           a scale area of Hkv * hd / 32 F16 scales, padded to 16
 *                bytes, then Hkv * hd / 2 bytes of 4-bit codes, head by
 *                head, dim 2j in the low nibble of byte j, 2j + 1 in the
 *                high one. A head's row y is first rotated,
 *                  y = Hadamard(x) / sqrt(hd)     (orthonormal, its own
 *                                                  inverse; hd a power of 2)
 *                then each block of 32 values is coded against a 16-level
 *                Lloyd-Max codebook of the unit normal (what a rotated row
 *                looks like, outlier channels spread over all of them)
 *                scaled by the block's RMS s (F16): y[i] = level[code] * s.
 *                Attention reads rotated keys and values: the rotation of
 *                q cancels in q.k (R is orthonormal), and the output,
 *                a sum of rotated values, is rotated back at the end.
 *
 * Why a scale per (token, head) rather than one per (layer, head): it is
 * computed from the row alone, at write time, so a token's cache bytes
 * depend on nothing else (batch invariance, warm prefix caches equal to
 * cold), need no calibration, and cost 4 bytes per 128 (3%).
 *
 * Measured error against a BF16 cache (tests/unit/test-kvq-model: the
 * shipped model teacher-forced over 244 tokens of text, each format
 * against auto; the test bounds each number):
 *
 *                 top-1 equal   mean KL    perplexity
 *   bf16, CPU       100%        2.8e-6      -0.00%
 *   fp8,  CPU       97.1%       6.9e-4      +0.49%
 *   q4,   CPU       92.2%       6.3e-3      -0.04%
 *   fp8,  CUDA      96.7-97.1%  6.3-6.6e-4  +0.35-0.39%  (H100)
 *   q4,   CUDA      93.0%       6.4-6.5e-3  -0.54%       (H100)
 *
 * Greedy 64-token answers to 40 prompts on CUDA (scripts/gpu-kvq-bench.sh)
 * stay equal to auto's for 62 bytes on average with fp8 and 35 with q4.
 * The rotation halves q4's error: the same test with it left out (same
 * codebook and block scales, a one-off build) gave top-1 91.8% and mean
 * KL 1.23e-2 on the CPU. Outlier channels of K otherwise set their
 * blocks' scales; rotated, a block's values look like the unit normal the
 * codebook is fitted to.
 *
 * Every sum below runs in the order written (serial, FP32, fmaf), so the
 * CUDA store can reproduce the bytes exactly. */
#ifndef ATLAS_BACKEND_KVQ_H
#define ATLAS_BACKEND_KVQ_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define ATLAS_KV_Q4_BLOCK 32   /* values per q4 scale */
#define ATLAS_KV_FP8_MAX 448.0f /* largest finite E4M3 */

/* "auto", "bf16", "fp8", "q4": 0 and *out, or -1. */
int atlas_kv_dtype_parse(const char *s, enum atlas_kv_dtype *out);
/* The spelling parse takes; static string. */
const char *atlas_kv_dtype_name(enum atlas_kv_dtype k);
/* A quantized format (fp8, q4). */
static inline int atlas_kv_quantized(enum atlas_kv_dtype k)
{
	return k == ATLAS_KV_FP8 || k == ATLAS_KV_Q4;
}

/* 0 when format k can hold heads of hd values, else ATLAS_EUNSUPPORTED
 * with a message naming the rule (q4: hd a power of two, 64 to 256; fp8:
 * hd a multiple of 16: every row, head and scale area then starts on 16
 * bytes, the kernels' copy size, and a head's q4 scales fill whole
 * 4-byte words). */
int atlas_kv_check(enum atlas_kv_dtype k, int64_t hd);

/* Bytes of the scale area at the start of a row (0 for auto and bf16). */
int64_t atlas_kv_scale_bytes(enum atlas_kv_dtype k, int64_t Hkv, int64_t hd);
/* Bytes of one cache row; act_size is sizeof the activation type. */
int64_t atlas_kv_row_bytes(enum atlas_kv_dtype k, size_t act_size, int64_t Hkv, int64_t hd);

/* The q4 codebook: levels of the unit normal's 16-level Lloyd-Max
 * quantizer, ascending (code 0 = most negative), and the 15 decision
 * thresholds between them (midpoints): code = #{thresholds < v}. */
extern const float atlas_kv_q4_level[16];
extern const float atlas_kv_q4_thresh[15];

/* In place: x = Hadamard(x) / sqrt(n), n a power of two (Sylvester
 * order, butterflies of span 1, 2, 4, ... as a serial loop does them). */
void atlas_kv_rotate(float *x, int64_t n);

/* Quantize one cache row: x [Hkv * hd] FP32 (the head rows) to row
 * (atlas_kv_row_bytes bytes) in format fp8 or q4. */
void atlas_kv_quant_row(enum atlas_kv_dtype k, const float *x, int64_t Hkv, int64_t hd,
			void *row);
/* Head h of a quantized row as FP32 (hd values), as stored: for q4 in
 * the rotated space (atlas_kv_rotate gives the original back). */
void atlas_kv_dequant_head(enum atlas_kv_dtype k, const void *row, int64_t Hkv, int64_t hd,
			   int64_t h, float *out);

#endif
