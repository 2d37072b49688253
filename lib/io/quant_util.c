/* quant_util.c - the checked tensor lookup and scale reads the format
 * dequantizers share (quant_internal.h); apart from quant.c so that a
 * format file links without the dispatcher. */
#include <stdio.h>
#include <string.h>

#include "../core/error.h"
#include "quant_internal.h"

const struct atlas_tensor_info *atlas_quant_tensor(const struct atlas_st *st, const char *prefix,
						   const char *suffix, bool required,
						   const enum atlas_dtype *dts, int ndt, int ndim,
						   const int64_t *dims)
{
	char name[512];
	if ((size_t)snprintf(name, sizeof(name), "%s.%s", prefix, suffix) >= sizeof(name)) {
		atlas_error(ATLAS_EFORMAT, "tensor name '%s.%s' is too long", prefix, suffix);
		return NULL;
	}
	const struct atlas_tensor_info *t = atlas_st_find(st, name);
	if (!t) {
		if (required)
			atlas_error(ATLAS_EFORMAT, "tensor '%s' is missing from the checkpoint", name);
		return NULL;
	}
	bool dt_ok = false;
	for (int i = 0; i < ndt; i++)
		dt_ok |= t->dtype == dts[i];
	if (!dt_ok) {
		char want[128] = "";
		size_t off = 0;
		for (int i = 0; i < ndt && off < sizeof(want) - 16; i++)
			off += (size_t)snprintf(want + off, sizeof(want) - off, "%s%s", i ? ", " : "",
						atlas_dtype_name(dts[i]));
		atlas_error(ATLAS_EFORMAT, "tensor '%s' has dtype %s; expected %s", name,
			    atlas_dtype_name(t->dtype), want);
		return NULL;
	}
	bool shape_ok = t->ndim == ndim;
	for (int i = 0; shape_ok && i < ndim; i++)
		shape_ok = dims[i] < 0 || t->shape[i] == dims[i];
	if (!shape_ok) {
		char got[160] = "", want[160] = "";
		size_t a = 0, b = 0;
		for (int i = 0; i < t->ndim && a < sizeof(got) - 24; i++)
			a += (size_t)snprintf(got + a, sizeof(got) - a, "%s%lld", i ? ", " : "",
					      (long long)t->shape[i]);
		for (int i = 0; i < ndim && b < sizeof(want) - 24; i++) {
			if (dims[i] < 0)
				b += (size_t)snprintf(want + b, sizeof(want) - b, "%s*", i ? ", " : "");
			else
				b += (size_t)snprintf(want + b, sizeof(want) - b, "%s%lld", i ? ", " : "",
						      (long long)dims[i]);
		}
		atlas_error(ATLAS_EFORMAT, "tensor '%s' has shape [%s]; expected [%s]", name, got,
			    want);
		return NULL;
	}
	return t;
}

float atlas_quant_scale(const struct atlas_tensor_info *t, int64_t i)
{
	const unsigned char *p = t->data;
	switch (t->dtype) {
	case ATLAS_DTYPE_F32: {
		float f;
		memcpy(&f, p + 4 * i, 4);
		return f;
	}
	case ATLAS_DTYPE_F16: {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		return atlas_f16_to_f32(h);
	}
	case ATLAS_DTYPE_BF16: {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		return atlas_bf16_to_f32(h);
	}
	case ATLAS_DTYPE_F8_E4M3:
		return atlas_f8e4m3_to_f32(p[i]);
	default:
		return 0.0f;
	}
}

