/* quant_internal.h - the per-format dequantizers behind
 * atlas_quant_dequant (quant.c dispatches; quant_fp.c: FP8 and NVFP4;
 * quant_int.c: AWQ, GPTQ, compressed-tensors int). Each takes the
 * module prefix ("model.layers.0.mlp.down_proj", no ".weight"), checks
 * every tensor it reads (present, dtype, shape, lengths) naming it in
 * the error, and writes W [out, in] as FP32 into dst. Returns 1 when the
 * module is stored in its format, 0 when its tensors are absent (the
 * caller loads X.weight as a plain tensor), a negative error otherwise. */
#ifndef ATLAS_IO_QUANT_INTERNAL_H
#define ATLAS_IO_QUANT_INTERNAL_H

#include "quant.h"
#include "safetensors.h"

/* The FP8 formats find the module's tensors and describe them in *v
 * (atlas_quant_f8_dequant then writes W) */
int atlas_quant_fp8(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		    int64_t out, int64_t in, struct atlas_quant_f8 *v);
int atlas_quant_ct_fp8(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		       int64_t out, int64_t in, struct atlas_quant_f8 *v);
/* NVFP4 likewise (atlas_quant_fp4_dequant writes W) */
int atlas_quant_nvfp4(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		      int64_t out, int64_t in, struct atlas_quant_fp4 *v);
/* The integer formats unpack the module's tensors into *v (see struct
 * atlas_quant_int; *v zeroed unless 1 is returned), and the three after
 * them write W from that view */
int atlas_quant_awq_view(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
			 int64_t out, int64_t in, struct atlas_quant_int *v);
int atlas_quant_gptq_view(const struct atlas_quant *q, const struct atlas_st *st,
			  const char *prefix, int64_t out, int64_t in, struct atlas_quant_int *v);
int atlas_quant_ct_int_view(const struct atlas_quant *q, const struct atlas_st *st,
			    const char *prefix, int64_t out, int64_t in, struct atlas_quant_int *v);
int atlas_quant_awq(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		    int64_t out, int64_t in, float *dst);
int atlas_quant_gptq(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		     int64_t out, int64_t in, float *dst);
int atlas_quant_ct_int(const struct atlas_quant *q, const struct atlas_st *st, const char *prefix,
		       int64_t out, int64_t in, float *dst);

/* Bytes of the module's stored tensors in the format (0: not stored so). */
int64_t atlas_quant_fp_bytes(const struct atlas_quant *q, const struct atlas_st *st,
			     const char *prefix);
int64_t atlas_quant_int_bytes(const struct atlas_quant *q, const struct atlas_st *st,
			      const char *prefix);

/* Tensor prefix + suffix, checked: present (else NULL with no error
 * when !required), dtype one of the `ndt` in dts, shape ndim dims equal
 * to dims (a dim < 0 is not checked); on a mismatch NULL with an
 * ATLAS_EFORMAT message naming the tensor and what was expected. */
const struct atlas_tensor_info *atlas_quant_tensor(const struct atlas_st *st, const char *prefix,
						   const char *suffix, bool required,
						   const enum atlas_dtype *dts, int ndt, int ndim,
						   const int64_t *dims);
/* A scale element of a float tensor (F32, F16, BF16 or F8_E4M3) as float. */
float atlas_quant_scale(const struct atlas_tensor_info *t, int64_t i);

#endif
