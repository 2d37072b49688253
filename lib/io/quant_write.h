/* quant_write.h - round-to-nearest quantization of a plain matrix into
 * the Hub layouts quant.h reads (issue 19, "writing them"), for
 * atlas-load convert --quant. Each writer takes W [out, in] as FP32
 * row-major and fills caller-owned arrays of the sizes given; the
 * results dequantize with atlas_quant_dequant to within the format's
 * rounding bound:
 *   fp8 block/channel: q = E4M3(W / s) (nearest even, saturating at
 *     448), s = amax(block) / 448 rounded up to BF16 (so no element
 *     saturates and dequantize then quantize gives the same bytes back)
 *   int4 (compressed-tensors pack-quantized, symmetric): q =
 *     clamp(round(W / s), -8, 7), s = amax(group) / 7 rounded up to
 *     BF16, stored q + 8, eight to an I32 word, low bits first
 *   NVFP4 (compressed-tensors): global g = 448 * 6 / amax(W) (F32, it
 *     divides), per 16 values s = E4M3(amax / 6 * g), code = nearest E2M1
 *     of W * g / s (ties to even), two codes a byte, low nibble first
 * An all-zero block gets scale 1 (fp8, int4) or 0 (NVFP4) and codes 0. */
#ifndef ATLAS_IO_QUANT_WRITE_H
#define ATLAS_IO_QUANT_WRITE_H

#include <stdint.h>

#include "../core/dtype.h"

enum atlas_quant_scheme {
	ATLAS_QSCHEME_NONE = 0,
	ATLAS_QSCHEME_FP8_BLOCK,   /* quant_method fp8, 128x128 blocks, BF16 weight_scale_inv */
	ATLAS_QSCHEME_FP8_CHANNEL, /* compressed-tensors float-quantized, channel, BF16 [out, 1] */
	ATLAS_QSCHEME_W4A16,       /* compressed-tensors pack-quantized int4 sym, group 128 */
	ATLAS_QSCHEME_NVFP4,       /* compressed-tensors nvfp4-pack-quantized */
};

/* "fp8-block", "fp8-channel", "w4a16", "nvfp4": 0 and *out, or
 * ATLAS_EINVAL with a message listing the names. */
int atlas_quant_scheme_parse(const char *s, enum atlas_quant_scheme *out);
/* The spelling above (static string; "none" for NONE). */
const char *atlas_quant_scheme_name(enum atlas_quant_scheme s);

/* q [out, in], scale [ceil(out/bo), ceil(in/bi)] BF16 bits (edge blocks
 * partial). The channel scheme is bo = 1, bi = in. */
void atlas_quant_write_fp8(const float *w, int64_t out, int64_t in, int64_t bo, int64_t bi,
			   uint8_t *q, uint16_t *scale);

/* packed [out, in/8] I32, scale [out, in/g] BF16 bits; needs g > 0,
 * g % 8 == 0 and in % g == 0 (ATLAS_EINVAL otherwise, nothing written). */
int atlas_quant_write_int4(const float *w, int64_t out, int64_t in, int64_t g, int32_t *packed,
			   uint16_t *scale);

/* packed [out, in/2] U8, scale [out, in/16] F8_E4M3, *global_scale;
 * needs in % 16 == 0 (ATLAS_EINVAL otherwise). */
int atlas_quant_write_nvfp4(const float *w, int64_t out, int64_t in, uint8_t *packed,
			    uint8_t *scale, float *global_scale);

#endif
