/* dtype.c - dtype names, sizes and scalar conversions (see dtype.h). */
#include "dtype.h"

#include <math.h>

static const struct {
	const char *name;
	size_t size;
} info[ATLAS_DTYPE_COUNT] = {
	[ATLAS_DTYPE_F32] = {"F32", 4},
	[ATLAS_DTYPE_F16] = {"F16", 2},
	[ATLAS_DTYPE_BF16] = {"BF16", 2},
	[ATLAS_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
	[ATLAS_DTYPE_I8] = {"I8", 1},
	[ATLAS_DTYPE_U8] = {"U8", 1},
	[ATLAS_DTYPE_I32] = {"I32", 4},
	[ATLAS_DTYPE_I64] = {"I64", 8},
	[ATLAS_DTYPE_F8B] = {"F8B", 1},
	[ATLAS_DTYPE_W4B] = {"W4B", 1},
	[ATLAS_DTYPE_FP4B] = {"FP4B", 1},
};

size_t atlas_dtype_size(enum atlas_dtype t)
{
	return (unsigned)t < ATLAS_DTYPE_COUNT ? info[t].size : 0;
}

const char *atlas_dtype_name(enum atlas_dtype t)
{
	return (unsigned)t < ATLAS_DTYPE_COUNT ? info[t].name : "?";
}

int atlas_dtype_parse(const char *s, enum atlas_dtype *out)
{
	for (int i = 0; i < ATLAS_DTYPE_COUNT; i++) {
		if (i != ATLAS_DTYPE_F8B && i != ATLAS_DTYPE_W4B && i != ATLAS_DTYPE_FP4B &&
		    !strcmp(s, info[i].name)) {
			*out = (enum atlas_dtype)i;
			return 0;
		}
	}
	return -1;
}

int atlas_dtype_parse_torch(const char *s, enum atlas_dtype *out)
{
	if (!strncmp(s, "torch.", 6))
		s += 6;
	if (!strcmp(s, "bfloat16")) *out = ATLAS_DTYPE_BF16;
	else if (!strcmp(s, "float16") || !strcmp(s, "half")) *out = ATLAS_DTYPE_F16;
	else if (!strcmp(s, "float32") || !strcmp(s, "float")) *out = ATLAS_DTYPE_F32;
	else return -1;
	return 0;
}

float atlas_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31;
	int exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff, u;
	float f;
	if (exp == 0x1f) {
		u = sign | 0x7f800000u | (man << 13);
	} else if (exp == 0) {
		f = ldexpf((float)man, -24);
		return sign ? -f : f;
	} else {
		u = sign | ((uint32_t)(exp - 15 + 127) << 23) | (man << 13);
	}
	memcpy(&f, &u, 4);
	return f;
}

uint16_t atlas_f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return sign | 0x7e00;
	if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
		return sign | 0x7c00;
	if (a < 0x38800000u) { /* subnormal or zero in half */
		float af;
		memcpy(&af, &a, 4);
		return sign | (uint16_t)lrintf(af * 16777216.0f);
	}
	uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
	return sign | (uint16_t)(r >> 13);
}

uint8_t atlas_f32_to_f8e4m3(float f)
{
	if (isnan(f))
		return 0x7F;
	uint8_t sign = signbit(f) ? 0x80 : 0;
	float a = fabsf(f);
	if (a >= 448.0f)
		return sign | 0x7E;
	if (a < 0x1p-6f) /* subnormal: m / 8 * 2^-6; m = 8 is the smallest normal */
		return sign | (uint8_t)lrintf(a * 0x1p9f);
	int e;
	frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1) */
	e -= 1;        /* a = 1.m * 2^e */
	long m = lrintf((ldexpf(a, -e) - 1.0f) * 8.0f);
	if (m == 8)
		m = 0, e++;
	int code = ((e + 7) << 3) | (int)m;
	return sign | (uint8_t)(code > 0x7E ? 0x7E : code);
}

float atlas_f8e4m3_to_f32(uint8_t v)
{
	int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
	float f;
	if (exp == 0xf && man == 7)
		return NAN;
	if (exp == 0)
		f = ldexpf((float)man, -9);
	else
		f = ldexpf(1.0f + man / 8.0f, exp - 7);
	return sign ? -f : f;
}

static float load_one(const void *p, enum atlas_dtype d, int64_t i)
{
	switch (d) {
	case ATLAS_DTYPE_F32: {
		float f;
		memcpy(&f, (const char *)p + 4 * i, 4);
		return f;
	}
	case ATLAS_DTYPE_F16: {
		uint16_t h;
		memcpy(&h, (const char *)p + 2 * i, 2);
		return atlas_f16_to_f32(h);
	}
	default: {
		uint16_t h;
		memcpy(&h, (const char *)p + 2 * i, 2);
		return atlas_bf16_to_f32(h);
	}
	}
}

void atlas_dtype_convert(void *dst, enum atlas_dtype d, const void *src, enum atlas_dtype s, int64_t n)
{
	if (d == s) {
		memcpy(dst, src, (size_t)n * atlas_dtype_size(d));
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		float f = load_one(src, s, i);
		if (d == ATLAS_DTYPE_F32) {
			memcpy((char *)dst + 4 * i, &f, 4);
		} else {
			uint16_t h = d == ATLAS_DTYPE_F16 ? atlas_f32_to_f16(f) : atlas_f32_to_bf16(f);
			memcpy((char *)dst + 2 * i, &h, 2);
		}
	}
}
