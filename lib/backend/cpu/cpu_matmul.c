/* cpu_matmul.c - out[T,N] = x[T,K] W^T + bias on the CPU: argument
 * checks, the split over threads, and the portable kernels.
 *
 * The matmul is where decode time goes. Two shapes of work:
 *  - decode (T <= 4): a GEMV that streams each weight row from memory
 *    once for all T rows of x; bandwidth bound, so the kernel converts
 *    the weights inline and keeps several accumulators in flight.
 *  - prefill (T larger): tiles of 16 weight rows x 512 columns are
 *    converted to f32 once into an L1-sized buffer and reused by every
 *    row of x, so each weight byte leaves memory once per matmul.
 * With be->batch_invariant, steps longer than the GEMV's rows take the
 * "tiled_inv" kernels: the GEMV's exact sums (lanes kept in memory across
 * K tiles), so a row's bits never depend on the step's length (chunked
 * prefill, prefix-cache hits, batch-mates), at tiled speed.
 * Work is split over output features N with atlas_parallel_for. The
 * AVX2 versions of both kernels are in cpu_matmul_avx2.c.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "../../core/threads.h"

/* Lanes of partial sums per dot product: independent accumulators let
 * the compiler vectorize without reassociating the FP32 sum itself. */
#define LANES 8

static inline void dot_lanes(float *a, const float *x, const float *w, int64_t n)
{
	int64_t k = 0;
	for (; k + LANES <= n; k += LANES)
		for (int j = 0; j < LANES; j++)
			a[j] += x[k + j] * w[k + j];
	for (; k < n; k++)
		a[0] += x[k] * w[k];
}

static inline float sum_lanes(const float *a)
{
	return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

void atlas_cpu_gemv_generic(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)
{
	/* one chunk of a weight row in f32; stays in L1 across the T dots */
	float wb[ATLAS_CPU_TILE_K];
	const int64_t T = m->T, N = m->N, K = m->K;

	for (int64_t n = n0; n < n1; n++) {
		float a[ATLAS_CPU_GEMV_MAX_T][LANES] = {{0}};
		for (int64_t k0 = 0; k0 < K; k0 += ATLAS_CPU_TILE_K) {
			int64_t kb = K - k0 < ATLAS_CPU_TILE_K ? K - k0 : ATLAS_CPU_TILE_K;
			atlas_cpu_convert(wb, m->w, m->wdt, n * K + k0, kb);
			for (int64_t t = 0; t < T; t++)
				dot_lanes(a[t], m->x + t * K + k0, wb, kb);
		}
		float b = m->bias ? atlas_cpu_wload(m->bias, m->wdt, n) : 0.0f;
		for (int64_t t = 0; t < T; t++)
			m->out[t * N + n] = b + sum_lanes(a[t]);
	}
}

void atlas_cpu_tiled_generic(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)
{
	/* the current tile of W in f32: ATLAS_CPU_TILE_N rows of TILE_K */
	float wt[ATLAS_CPU_TILE_N * ATLAS_CPU_TILE_K];
	const int64_t T = m->T, N = m->N, K = m->K;

	for (int64_t nt = n0; nt < n1; nt += ATLAS_CPU_TILE_N) {
		int64_t nb = n1 - nt < ATLAS_CPU_TILE_N ? n1 - nt : ATLAS_CPU_TILE_N;
		for (int64_t k0 = 0; k0 < K; k0 += ATLAS_CPU_TILE_K) {
			int64_t kb = K - k0 < ATLAS_CPU_TILE_K ? K - k0 : ATLAS_CPU_TILE_K;
			for (int64_t r = 0; r < nb; r++)
				atlas_cpu_convert(wt + r * ATLAS_CPU_TILE_K, m->w, m->wdt,
						  (nt + r) * K + k0, kb);
			for (int64_t t = 0; t < T; t++) {
				const float *xt = m->x + t * K + k0;
				float *o = m->out + t * N + nt;
				for (int64_t r = 0; r < nb; r++) {
					float a[LANES] = {0};
					dot_lanes(a, xt, wt + r * ATLAS_CPU_TILE_K, kb);
					float prev = k0 ? o[r]
						     : m->bias
							 ? atlas_cpu_wload(m->bias, m->wdt, nt + r)
							 : 0.0f;
					o[r] = prev + sum_lanes(a);
				}
			}
		}
	}
}

/* Batch-invariant prefill: atlas_cpu_gemv_generic's sums (per row of x
 * and of W: dot_lanes over the same TILE_K chunks in order, then
 * sum_lanes, then the bias), with each tile of W converted once for
 * INV_TB rows of x: the lanes of those sums stay in memory (64 KiB on the
 * stack) across the K tiles. */
#define INV_TB 128

void atlas_cpu_tiled_inv_generic(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)
{
	float wt[ATLAS_CPU_TILE_N * ATLAS_CPU_TILE_K];
	const int64_t T = m->T, N = m->N, K = m->K;
	float a[INV_TB][ATLAS_CPU_TILE_N][LANES];
	for (int64_t t0 = 0; t0 < T; t0 += INV_TB) {
		const int64_t tb = T - t0 < INV_TB ? T - t0 : INV_TB;
		for (int64_t nt = n0; nt < n1; nt += ATLAS_CPU_TILE_N) {
			int64_t nb = n1 - nt < ATLAS_CPU_TILE_N ? n1 - nt : ATLAS_CPU_TILE_N;
			memset(a, 0, (size_t)tb * sizeof(a[0]));
			for (int64_t k0 = 0; k0 < K; k0 += ATLAS_CPU_TILE_K) {
				int64_t kb = K - k0 < ATLAS_CPU_TILE_K ? K - k0 : ATLAS_CPU_TILE_K;
				for (int64_t r = 0; r < nb; r++)
					atlas_cpu_convert(wt + r * ATLAS_CPU_TILE_K, m->w, m->wdt,
							  (nt + r) * K + k0, kb);
				for (int64_t t = 0; t < tb; t++)
					for (int64_t r = 0; r < nb; r++)
						dot_lanes(a[t][r], m->x + (t0 + t) * K + k0,
							  wt + r * ATLAS_CPU_TILE_K, kb);
			}
			for (int64_t r = 0; r < nb; r++) {
				float b = m->bias ? atlas_cpu_wload(m->bias, m->wdt, nt + r) : 0.0f;
				for (int64_t t = 0; t < tb; t++)
					m->out[(t0 + t) * N + nt + r] = b + sum_lanes(a[t][r]);
			}
		}
	}
}

/* One matmul handed to the pool: items are groups of `unit` rows of W. */
struct mm_job {
	struct atlas_cpu_mm m;					   /* the operands */
	void (*fn)(const struct atlas_cpu_mm *, int64_t, int64_t); /* kernel */
	int64_t unit;						   /* rows of W per item */
};

static void mm_range(void *ctx, int64_t b, int64_t e)
{
	const struct mm_job *j = ctx;
	int64_t n1 = e * j->unit < j->m.N ? e * j->unit : j->m.N;
	j->fn(&j->m, b * j->unit, n1);
}

/* A quantized blob (backend.h: F8B, W4B or FP4B) times x: its matrix,
 * W[n][k] = bf16(f32(q) * s), bf16(f32(q - z) * s) or bf16(f32(e2m1(q) *
 * f32(f8(s) * gm))), and its BF16 bias as
 * FP32, then the FP32 product (the reference for the CUDA kernels; a
 * copy of W per call, so a test's path, not a fast one: the CPU backend
 * dequantizes quantized checkpoints at load unless f8b_weights,
 * w4b_weights or fp4b_weights is set). */
static int matmul_blob(struct atlas_backend *be, float *out, const float *x, const void *w,
		       enum atlas_dtype wdt, const void *bias, int64_t T, int64_t N, int64_t K)
{
	int64_t hn, hk;
	bool ok;
	if (wdt == ATLAS_DTYPE_F8B) {
		struct atlas_f8b_head h;
		memcpy(&h, w, sizeof(h));
		ok = h.magic == ATLAS_F8B_MAGIC, hn = h.N, hk = h.K;
	} else if (wdt == ATLAS_DTYPE_W4B) {
		struct atlas_w4b_head h;
		memcpy(&h, w, sizeof(h));
		ok = h.magic == ATLAS_W4B_MAGIC, hn = h.N, hk = h.K;
	} else {
		struct atlas_fp4b_head h;
		memcpy(&h, w, sizeof(h));
		ok = h.magic == ATLAS_FP4B_MAGIC, hn = h.N, hk = h.K;
	}
	if (!ok || hn != N || hk != K)
		return atlas_error(ATLAS_EINVAL, "cpu matmul: a %s weight of [%lld, %lld] used as "
						 "[%lld, %lld]",
				   atlas_dtype_name(wdt), (long long)hn, (long long)hk, (long long)N,
				   (long long)K);
	float *wf = malloc((size_t)(N * K + N) * sizeof(float));
	uint16_t *row = malloc((size_t)K * sizeof(uint16_t));
	if (!wf || !row) {
		free(wf);
		free(row);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	for (int64_t n = 0; n < N; n++) {
		if (wdt == ATLAS_DTYPE_F8B)
			atlas_f8b_row_bf16(w, n, row);
		else if (wdt == ATLAS_DTYPE_W4B)
			atlas_w4b_row_bf16(w, n, row);
		else
			atlas_fp4b_row_bf16(w, n, row);
		for (int64_t k = 0; k < K; k++)
			wf[n * K + k] = atlas_bf16_to_f32(row[k]);
		if (bias)
			wf[N * K + n] = atlas_bf16_to_f32(((const uint16_t *)bias)[n]);
	}
	int rc = atlas_cpu_matmul(be, out, x, wf, bias ? wf + N * K : NULL, ATLAS_DTYPE_F32, T, N, K);
	free(wf);
	free(row);
	return rc;
}

int atlas_cpu_matmul(struct atlas_backend *be, void *out, const void *x, const void *w,
		     const void *bias, enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	if ((wdt == ATLAS_DTYPE_F8B || wdt == ATLAS_DTYPE_W4B || wdt == ATLAS_DTYPE_FP4B) && T > 0 && N > 0 && K > 0)
		return matmul_blob(be, out, x, w, wdt, bias, T, N, K);
	int rc = atlas_cpu_check_wdt(wdt, "matmul");
	if (rc)
		return rc;
	if (T < 0 || N < 0 || K < 0)
		return atlas_error(ATLAS_EINVAL, "cpu matmul: bad shape T=%lld N=%lld K=%lld",
				   (long long)T, (long long)N, (long long)K);
	if (T == 0 || N == 0)
		return 0;
	struct mm_job j = {
	    .m = {out, x, w, bias, wdt, T, N, K},
	};
	if (K == 0) {
		for (int64_t t = 0; t < T; t++)
			for (int64_t n = 0; n < N; n++)
				j.m.out[t * N + n] = bias ? atlas_cpu_wload(bias, wdt, n) : 0.0f;
		return 0;
	}
	int avx2 = atlas_cpu_isa_get() == ATLAS_CPU_ISA_AVX2;
	int64_t grain;
	if (be->batch_invariant && T > ATLAS_CPU_GEMV_MAX_T) {
		/* a row's bits must not depend on the step's length: the
		 * GEMV's sums, tiled (the same order for any T) */
		j.fn = atlas_cpu_tiled_inv_generic;
#if defined(__x86_64__)
		if (avx2)
			j.fn = atlas_cpu_tiled_inv_avx2;
#endif
		j.unit = ATLAS_CPU_TILE_N;
		grain = (65536 / (K * T + 1)) / ATLAS_CPU_TILE_N + 1;
	} else if (T <= ATLAS_CPU_GEMV_MAX_T) {
		j.fn = atlas_cpu_gemv_generic;
#if defined(__x86_64__)
		if (avx2)
			j.fn = atlas_cpu_gemv_avx2;
#endif
		/* 8-row groups match the AVX2 kernel's row blocking; tasks of
		 * at least ~64K multiply-adds so small matmuls stay inline */
		j.unit = 8;
		grain = (65536 / (K * T + 1)) / 8 + 1;
	} else {
		j.fn = atlas_cpu_tiled_generic;
#if defined(__x86_64__)
		if (avx2)
			j.fn = atlas_cpu_tiled_avx2;
#endif
		j.unit = ATLAS_CPU_TILE_N;
		grain = (65536 / (K * T + 1)) / ATLAS_CPU_TILE_N + 1;
	}
	(void)avx2;
	atlas_parallel_for((N + j.unit - 1) / j.unit, grain, mm_range, &j);
	return 0;
}
