/* dtype.h - element types of tensors in checkpoints and on backends,
 * and scalar conversions to float. */
#ifndef ATLAS_CORE_DTYPE_H
#define ATLAS_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum atlas_dtype {
	ATLAS_DTYPE_F32 = 0,
	ATLAS_DTYPE_F16,
	ATLAS_DTYPE_BF16,
	ATLAS_DTYPE_F8_E4M3,
	ATLAS_DTYPE_I8,
	ATLAS_DTYPE_U8,
	ATLAS_DTYPE_I32,
	ATLAS_DTYPE_I64,
	ATLAS_DTYPE_F8B,   /* not a file dtype: a backend weight of FP8 E4M3
			    * values with FP32 block scales, one blob
			    * (lib/backend/backend.h, struct atlas_f8b_head) */
	ATLAS_DTYPE_W4B,   /* not a file dtype either: 4-bit integers with
			    * zero points and FP32 group scales (struct
			    * atlas_w4b_head) */
	ATLAS_DTYPE_FP4B,  /* nor this: E2M1 values with an F8_E4M3 scale per
			    * 16 and an FP32 global scale, NVFP4 as stored
			    * (struct atlas_fp4b_head) */
	ATLAS_DTYPE_COUNT,
};

/* Bytes per element. */
size_t atlas_dtype_size(enum atlas_dtype t);
/* The safetensors spelling ("F32", "BF16", ...). Static string. */
const char *atlas_dtype_name(enum atlas_dtype t);
/* Parse a safetensors dtype string; returns 0 and sets *out, or -1
 * (F8B, W4B and FP4B are not: no file can claim them). */
int atlas_dtype_parse(const char *s, enum atlas_dtype *out);
/* Parse a torch dtype name as config.json spells it ("bfloat16",
 * "float16", "float32"); returns 0 and sets *out, or -1. */
int atlas_dtype_parse_torch(const char *s, enum atlas_dtype *out);

static inline float atlas_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Round-to-nearest-even; NaN stays NaN. */
static inline uint16_t atlas_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float atlas_f16_to_f32(uint16_t h);
uint16_t atlas_f32_to_f16(float f);
float atlas_f8e4m3_to_f32(uint8_t v);
/* An E2M1 value (FP4: bit 3 the sign, bits 1-2 the exponent, bit 0 the
 * mantissa; NVFP4's element) as float: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}. */
static inline float atlas_e2m1_to_f32(unsigned v)
{
	static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
	return (v & 8) ? -mag[v & 7] : mag[v & 7];
}
/* FP32 to F8_E4M3 (the "fn" variant: no infinities), round to nearest
 * even, saturating at +-448; NaN gives 0x7F (as CUDA's
 * __nv_cvt_float_to_fp8 with __NV_SATFINITE). */
uint8_t atlas_f32_to_f8e4m3(float f);
/* n elements of src (F32, F16 or BF16) into dst in d (F32, F16 or BF16),
 * rounding to nearest even; a plain copy when the dtypes agree. */
void atlas_dtype_convert(void *dst, enum atlas_dtype d, const void *src, enum atlas_dtype s,
			 int64_t n);

#endif
