/* quant.h - quantized checkpoints as the Hub stores them: the method
 * from config.json's quantization_config (or ModelOpt's
 * hf_quant_config.json), and each quantized linear weight turned back
 * into a plain matrix at load ("dequantize at load": the reference path,
 * correct on every backend), or handed to the backend as stored: FP8
 * (atlas_quant_f8_view: the model packs it as an F8B blob, backend.h),
 * NVFP4 (atlas_quant_fp4_view: an FP4B blob) and the integer formats
 * unpacked (atlas_quant_int_view: the model packs
 * 4-bit ones as a W4B blob), for backends whose matmul ops take them.
 *
 * Formats (issue 19), each a set of tensors beside or instead of
 * X.weight, for a weight W [out, in]:
 *   fp8 block (quant_method "fp8", weight_block_size [bo, bi]):
 *     X.weight F8_E4M3 [out, in], X.weight_scale_inv BF16/F32
 *     [ceil(out/bo), ceil(in/bi)]; W = q * s[r / bo][c / bi]
 *   compressed-tensors float-quantized FP8 (strategy tensor, channel or
 *     block): X.weight F8_E4M3, X.weight_scale [1] / [out, 1] / blocks
 *   AWQ gemm: X.qweight I32 [in, out/8] (nibble order 0,4,1,5,2,6,3,7),
 *     X.qzeros I32 [in/g, out/8], X.scales F16 [in/g, out]
 *   GPTQ: X.qweight I32 [in/(32/bits), out], X.qzeros I32
 *     [groups, out/(32/bits)], X.scales F16 [groups, out], X.g_idx I32
 *     [in] (desc_act)
 *   compressed-tensors pack-quantized int4: X.weight_packed I32
 *     [out, in/8], X.weight_scale [out, in/g], X.weight_zero_point I32
 *     [out/8, in/g] (asymmetric), X.weight_shape
 *   NVFP4 (ModelOpt, compressed-tensors nvfp4-pack-quantized): E2M1
 *     pairs in U8 [out, in/2], an F8_E4M3 scale per 16 values and an F32
 *     global scale
 * Anything else is refused at load by name. */
#ifndef ATLAS_IO_QUANT_H
#define ATLAS_IO_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/dtype.h"

struct atlas_st;
struct atlas_tensor_info;

enum atlas_quant_method {
	ATLAS_QUANT_NONE = 0,
	ATLAS_QUANT_FP8,      /* quant_method "fp8": block-wise (or per-tensor) F8_E4M3 */
	ATLAS_QUANT_CT_FP8,   /* compressed-tensors "float-quantized" / "naive-quantized" FP8 */
	ATLAS_QUANT_AWQ,      /* quant_method "awq", version "gemm" */
	ATLAS_QUANT_GPTQ,     /* quant_method "gptq" */
	ATLAS_QUANT_CT_INT,   /* compressed-tensors "pack-quantized" int4/int8 */
	ATLAS_QUANT_NVFP4,    /* ModelOpt NVFP4 */
	ATLAS_QUANT_CT_NVFP4, /* compressed-tensors "nvfp4-pack-quantized" */
};

/* compressed-tensors weight strategies */
enum atlas_quant_strategy {
	ATLAS_QS_TENSOR = 0,
	ATLAS_QS_CHANNEL,
	ATLAS_QS_GROUP,
	ATLAS_QS_BLOCK,
};

#define ATLAS_QUANT_MAX_IGNORE 256

struct atlas_quant {
	enum atlas_quant_method method;
	int bits;               /* 4 or 8 */
	int group_size;         /* elements of `in` sharing a scale (AWQ, GPTQ,
				 * CT group, NVFP4 16); -1: the whole row (GPTQ) */
	int block[2];           /* FP8 block [bo, bi]; 0, 0: not block-wise */
	enum atlas_quant_strategy strategy; /* compressed-tensors */
	bool sym;               /* GPTQ / CT int: symmetric (no zero points) */
	bool desc_act;          /* GPTQ: g_idx gives each input row's group */
	bool gptq_v2;           /* GPTQ checkpoint_format "gptq_v2": zeros stored as is
				 * (v1 stores zero - 1) */
	int n_ignore;           /* modules left unquantized: names, or "re:REGEX" */
	char *ignore[ATLAS_QUANT_MAX_IGNORE];
	void *re[ATLAS_QUANT_MAX_IGNORE]; /* regex_t of a "re:" entry, compiled at
					   * parse (NULL for the others) */
	char name[64];          /* for messages: "fp8 block 128x128", "awq w4 g128", ... */
};

/* Read the quantization of the model in `dir` into *q (method NONE when
 * there is none). An unknown quant_method, bits other than 4 or 8, or a
 * combination this file does not dequantize is refused by name
 * (ATLAS_EUNSUPPORTED); a malformed block is ATLAS_EFORMAT. */
int atlas_quant_load(const char *dir, struct atlas_quant *q);
/* The same from the text of config.json (and of hf_quant_config.json,
 * NULL when absent); `where` names the file in messages. */
int atlas_quant_parse(const char *config_json, const char *hf_quant_json, const char *where,
		      struct atlas_quant *q);
void atlas_quant_free(struct atlas_quant *q);

/* True when module `module` ("model.layers.0.mlp.gate", no ".weight")
 * is listed as not quantized (exact names, or "re:" regular expressions
 * matched against the whole name, as compressed-tensors writes them). */
bool atlas_quant_ignored(const struct atlas_quant *q, const char *module);

/* The weight `name` ("....down_proj.weight") of shape [out, in] as a
 * plain matrix: when st holds it quantized (the tensors above, found
 * from the module's prefix), dequantize it into dst (out * in elements
 * of dt, F32 or BF16; F32 is exact for every format) and return 1. When
 * it is stored plainly (or the model is not quantized), return 0 and
 * leave dst alone. A quantized set with a missing or misshapen tensor,
 * packed data of the wrong length, a group size that does not divide
 * `in`, or an out-of-range g_idx is refused with the tensor's name. */
int atlas_quant_dequant(const struct atlas_quant *q, const struct atlas_st *st, const char *name,
			int64_t out, int64_t in, enum atlas_dtype dt, void *dst);

/* An FP8 weight [out, in] as stored: q holds out * in E4M3 bytes (in the
 * checkpoint's mapping), s a scale per [bo, bi] block (ceil(out/bo) x
 * ceil(in/bi), row-major; a per-tensor scale is one block of the whole
 * matrix, a per-channel one blocks of [1, in]), and W = q * s. */
struct atlas_quant_f8 {
	const uint8_t *q;
	const struct atlas_tensor_info *s;
	int64_t bo, bi;
};

/* The weight `name` [out, in] of an FP8 checkpoint (methods fp8 and
 * compressed-tensors FP8) as stored, checked as atlas_quant_dequant
 * checks it: 1 with *v filled; 0 when it is not stored as FP8 (another
 * method, an ignored module, a plain tensor); a negative error naming
 * the tensor. */
int atlas_quant_f8_view(const struct atlas_quant *q, const struct atlas_st *st, const char *name,
			int64_t out, int64_t in, struct atlas_quant_f8 *v);
/* v's scales as FP32 into dst (ceil(out/bo) * ceil(in/bi) values), and
 * W itself as FP32 into dst (out * in values). */
void atlas_quant_f8_scales(const struct atlas_quant_f8 *v, int64_t out, int64_t in, float *dst);
void atlas_quant_f8_dequant(const struct atlas_quant_f8 *v, int64_t out, int64_t in, float *dst);

/* An NVFP4 weight [out, in] as stored: q holds out * in / 2 bytes, two
 * E2M1 values a byte (column 2j of a row in the low nibble of its byte
 * j), s an F8_E4M3 scale per row and 16 columns ([out, in / 16]), gm the
 * global multiplier: ModelOpt's weight_scale_2, or f32(1 / g) for
 * compressed-tensors' divisor weight_global_scale g (as vLLM turns it
 * into the multiplier). W[o][i] = f32(e2m1(q) * f32(f8(s[o][i/16]) * gm)),
 * each product rounded to FP32 in that order. */
struct atlas_quant_fp4 {
	const uint8_t *q, *s;
	float gm;
};

/* The weight `name` [out, in] of an NVFP4 checkpoint (ModelOpt and
 * compressed-tensors nvfp4-pack-quantized) as stored, checked as
 * atlas_quant_dequant checks it: 1 with *v filled, 0 when it is not
 * stored as NVFP4, a negative error naming the tensor. */
int atlas_quant_fp4_view(const struct atlas_quant *q, const struct atlas_st *st, const char *name,
			 int64_t out, int64_t in, struct atlas_quant_fp4 *v);
/* W itself as FP32 into dst (out * in values, row-major). */
void atlas_quant_fp4_dequant(const struct atlas_quant_fp4 *v, int64_t out, int64_t in, float *dst);

/* An integer weight [out, in] as stored (AWQ, GPTQ, compressed-tensors
 * pack-quantized), unpacked to a byte a value: W[o][i] =
 * (float)(q[o*in + i] - z[o*ng + grp(i)]) * s[o*ng + grp(i)], grp(i) =
 * grp ? grp[i] : i / g. Exactly the FP32 values atlas_quant_dequant
 * gives. Each format's offsets are folded into z: GPTQ v1's stored
 * zero - 1 is z - 1, compressed-tensors' values and zero points are
 * stored + 2^(bits-1) and kept so (a symmetric weight has z =
 * 2^(bits-1)), so q - z is the signed value either way. */
struct atlas_quant_int {
	int bits;     /* 4 or 8 */
	int64_t g;    /* columns a group (in when the whole row is one group;
		       * GPTQ's last group may be partial) */
	int64_t ng;   /* groups a row: ceil(in / g) */
	uint8_t *q;   /* [out * in] one unsigned value a byte, 0 .. 2^bits - 1 */
	int32_t *grp; /* [in] group of each column (act-order), NULL when it
		       * is i / g (a g_idx that says i / g gives NULL too) */
	int16_t *z;   /* [out * ng] zero points, 0 .. 2^bits (GPTQ v1 may
		       * store 2^bits - 1, i.e. a zero of 2^bits) */
	float *s;     /* [out * ng] scales */
};

/* The weight `name` [out, in] of an integer checkpoint (methods awq,
 * gptq and compressed-tensors pack-quantized) unpacked into *v, checked
 * as atlas_quant_dequant checks it: 1 with *v filled, its arrays
 * malloc'd and owned by the caller (atlas_quant_int_free); 0 when it is
 * not stored in an integer format (another method, an ignored module, a
 * plain tensor); a negative error naming the tensor (ATLAS_ENOMEM when
 * the out * in bytes of q cannot be had). On 0 and on error *v is zeroed,
 * so atlas_quant_int_free may be called on it either way. */
int atlas_quant_int_view(const struct atlas_quant *q, const struct atlas_st *st, const char *name,
			 int64_t out, int64_t in, struct atlas_quant_int *v);
/* W itself as FP32 into dst (out * in values, row-major). */
void atlas_quant_int_dequant(const struct atlas_quant_int *v, int64_t out, int64_t in, float *dst);
/* Free v's arrays and zero *v (a zeroed *v is fine). */
void atlas_quant_int_free(struct atlas_quant_int *v);

/* Bytes the weight `name` takes in st as stored (quantized tensors and
 * scales together), 0 when it is not stored quantized. */
int64_t atlas_quant_stored_bytes(const struct atlas_quant *q, const struct atlas_st *st,
				 const char *name);

#endif
