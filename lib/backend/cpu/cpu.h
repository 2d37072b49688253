/* cpu.h - private declarations shared by the files of the CPU backend.
 *
 * The CPU backend is the reference implementation of every op: FP32
 * activations, weights read in the dtype they were stored in (F32, F16,
 * BF16) and converted on the fly, FP32 accumulation everywhere. The
 * matmul has a portable C kernel set and an x86-64 AVX2+FMA+F16C set
 * picked at run time, so one binary runs on any x86-64 (and any other
 * architecture) and uses the vector units where they exist.
 */
#ifndef ATLAS_BACKEND_CPU_H
#define ATLAS_BACKEND_CPU_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../backend.h"

/* The CPU backend's state (be->ctx), never NULL once made. The ops run
 * on the caller's thread (plus the pool), one caller per backend, so the
 * counter needs no atomics. */
struct atlas_cpu_ctx {
	bool copy_weights;      /* ATLAS_CPU_COPY_WEIGHTS=1: weight_upload
				 * copies into huge pages (cpu.c) */
	int64_t experts_read;   /* (moe call, distinct expert) pairs since the
				 * last moe_experts_read (cpu_moe.c) */
};

/* Kernel sets of the matmul. */
enum atlas_cpu_isa {
	ATLAS_CPU_ISA_GENERIC = 0, /* portable C, auto-vectorized */
	ATLAS_CPU_ISA_AVX2 = 1,	   /* x86-64 AVX2 + FMA + F16C intrinsics */
};

/* The kernel set in use (the best this CPU supports unless forced). */
enum atlas_cpu_isa atlas_cpu_isa_get(void);
/* Force a kernel set for the whole process (tests use it to cover the
 * portable path); a set this CPU cannot run falls back to GENERIC.
 * Returns the set now in use. Not for use while ops are running. */
enum atlas_cpu_isa atlas_cpu_isa_set(enum atlas_cpu_isa isa);
/* Whether this CPU can run the AVX2 set (always false off x86-64). */
int atlas_cpu_has_avx2(void);

/* 0 if wdt is a weight dtype the CPU ops read (F32, F16, BF16), else
 * ATLAS_EUNSUPPORTED with a message naming `op`. */
int atlas_cpu_check_wdt(enum atlas_dtype wdt, const char *op);

/* IEEE half -> float without branches, so loops over it vectorize:
 * placing the 15 exponent+mantissa bits at the bottom of a float's
 * exponent field gives the value times 2^-112 for normal and subnormal
 * halves alike, so one exact multiply rebiases it; infinities and NaNs
 * (exponent 31) are rebuilt from their mantissa. */
static inline float atlas_cpu_f16(uint16_t h)
{
	uint32_t em = h & 0x7fffu, u, r;
	float f, scale;
	u = em << 13;
	memcpy(&f, &u, 4);
	u = 0x77800000u; /* 2^112 */
	memcpy(&scale, &u, 4);
	f *= scale;
	memcpy(&r, &f, 4);
	if (em >= 0x7c00u)
		r = 0x7f800000u | (em & 0x3ffu) << 13;
	r |= (uint32_t)(h & 0x8000u) << 16;
	memcpy(&f, &r, 4);
	return f;
}

/* Element i of a weight vector stored as wdt (F32, F16 or BF16; the
 * caller checked). For the ops that are not hot. */
static inline float atlas_cpu_wload(const void *w, enum atlas_dtype wdt, int64_t i)
{
	if (wdt == ATLAS_DTYPE_BF16)
		return atlas_bf16_to_f32(((const uint16_t *)w)[i]);
	if (wdt == ATLAS_DTYPE_F16)
		return atlas_cpu_f16(((const uint16_t *)w)[i]);
	return ((const float *)w)[i];
}

/* Convert n weights starting at element `off` of w into dst[n] (F32). */
void atlas_cpu_convert(float *dst, const void *w, enum atlas_dtype wdt, int64_t off, int64_t n);

/* The ops (shapes and semantics in backend.h). */
int atlas_cpu_matmul(struct atlas_backend *be, void *out, const void *x, const void *w,
		     const void *bias, enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K);
int atlas_cpu_embed(struct atlas_backend *be, void *out, const void *table, enum atlas_dtype wdt,
		    const int32_t *ids, int64_t T, int64_t D);
int atlas_cpu_rmsnorm(struct atlas_backend *be, void *out, const void *x, const void *w,
		      enum atlas_dtype wdt, int64_t R, int64_t D, float eps);
int atlas_cpu_add_rmsnorm(struct atlas_backend *be, void *res, const void *x, void *out,
			  const void *w, enum atlas_dtype wdt, int64_t R, int64_t D, float eps);
int atlas_cpu_rope(struct atlas_backend *be, void *x, const int32_t *pos, const float *inv_freq,
		   int64_t T, int64_t H, int64_t hd);
int atlas_cpu_rope_partial(struct atlas_backend *be, void *x, const int32_t *pos,
			   const float *inv_freq, int64_t T, int64_t H, int64_t hd, int64_t rd);
int atlas_cpu_gate_split(struct atlas_backend *be, void *q, const void *qg, int64_t T, int64_t H,
			 int64_t hd);
int atlas_cpu_gate_apply(struct atlas_backend *be, void *att, const void *qg, int64_t T,
			 int64_t H, int64_t hd);
int atlas_cpu_deltanet(struct atlas_backend *be, void *out, const void *qkvz, const void *ba,
		       const struct atlas_gdn_desc *d, const struct atlas_gdn_item *items,
		       int64_t n_items, int64_t off, float *scratch);
int atlas_cpu_kv_store(struct atlas_backend *be, void *kc, void *vc, const void *k,
		       const void *v, const int32_t *slot, int64_t T, int64_t Hkv, int64_t hd);
int atlas_cpu_attention(struct atlas_backend *be, void *out, const void *q, const void *kc,
			const void *vc, const struct atlas_kv_batch *b, int64_t T, int64_t H,
			int64_t Hkv, int64_t hd, int64_t window, float scale);
int atlas_cpu_swiglu(struct atlas_backend *be, void *out, const void *gate, const void *up,
		     int64_t T, int64_t F);
int atlas_cpu_add(struct atlas_backend *be, void *y, const void *x, int64_t n);
int atlas_cpu_moe(struct atlas_backend *be, void *out, const void *x,
		  const struct atlas_moe_desc *d, int64_t T, void *scratch);
int64_t atlas_cpu_moe_experts_read(struct atlas_backend *be);

/* Matmul kernels over rows [n0, n1) of W. x [T,K] f32, out [T,N] f32,
 * W [N,K] and bias [N] (or NULL) in wdt. "gemv" streams W once for all T
 * rows of x (T <= ATLAS_CPU_GEMV_MAX_T); "tiled" converts tiles of W to
 * f32 and reuses each for all T rows. */
#define ATLAS_CPU_GEMV_MAX_T 4
struct atlas_cpu_mm {
	float *out;	      /* [T,N] f32 result */
	const float *x;	      /* [T,K] f32 input */
	const void *w;	      /* [N,K] weights in wdt */
	const void *bias;     /* [N] in wdt, or NULL */
	enum atlas_dtype wdt; /* dtype of w and bias */
	int64_t T, N, K;      /* shapes */
};
void atlas_cpu_gemv_generic(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1);
void atlas_cpu_tiled_generic(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1);
/* "tiled_inv": the gemv kernel's exact sums for any T (batch-invariant
 * mode), tiled like "tiled" */
void atlas_cpu_tiled_inv_generic(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1);
#if defined(__x86_64__)
void atlas_cpu_gemv_avx2(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1);
void atlas_cpu_tiled_avx2(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1);
void atlas_cpu_tiled_inv_avx2(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1);
#endif

/* Weight rows per tile of the tiled kernels (the unit of parallel work)
 * and the K extent of one tile: 16 x 512 f32 = 32 KiB, an L1's worth,
 * reused for every row of x. */
#define ATLAS_CPU_TILE_N 16
#define ATLAS_CPU_TILE_K 512

#endif
