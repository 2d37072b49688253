/* cpu_matmul_avx2.c - the matmul kernels with AVX2 + FMA + F16C
 * intrinsics (x86-64 only; cpu.c checks the CPU before they are used).
 *
 * Only these functions carry the target attribute, so the rest of the
 * library stays baseline x86-64 and the binary runs anywhere. The
 * kernels are written once over (weight dtype, rows of x, rows of W) and
 * instantiated with constants through always_inline, so each instance
 * keeps its accumulators in registers (16 ymm on AVX2).
 */
#include "cpu.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* Eight weights from element i of w, as f32. bf16 -> f32 is a 16-bit
 * shift; f16 uses the F16C converter. */
AVX2 INLINE __m256 ld8(const void *w, enum atlas_dtype dt, int64_t i)
{
	if (dt == ATLAS_DTYPE_BF16) {
		__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
	if (dt == ATLAS_DTYPE_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
	return _mm256_loadu_ps((const float *)w + i);
}

AVX2 INLINE float hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* --- decode: out[0..T, n..n+R) straight from W ------------------------ */

/* out[t, n] = bias + (the lanes of acc summed) + the K % 8 tail, in that
 * order: the end of every dot product of gemv_block and tiled_inv (one
 * function, so both round alike). */
AVX2 INLINE void finish(const struct atlas_cpu_mm *m, enum atlas_dtype dt, int64_t t, int64_t n,
			__m256 acc)
{
	const int64_t K = m->K;
	float s = hsum(acc);
	for (int64_t k = K & ~(int64_t)7; k < K; k++)
		s += m->x[t * K + k] * atlas_cpu_wload(m->w, dt, n * K + k);
	float b = m->bias ? atlas_cpu_wload(m->bias, dt, n) : 0.0f;
	m->out[t * m->N + n] = b + s;
}

AVX2 INLINE void gemv_block(const struct atlas_cpu_mm *m, enum atlas_dtype dt, int T, int R,
			    int64_t n)
{
	const int64_t K = m->K, K8 = K & ~(int64_t)7;
	const float *x = m->x;
	__m256 acc[ATLAS_CPU_GEMV_MAX_T][8];

	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++)
			acc[t][r] = _mm256_setzero_ps();
	for (int64_t k = 0; k < K8; k += 8) {
		__m256 xv[ATLAS_CPU_GEMV_MAX_T];
		for (int t = 0; t < T; t++)
			xv[t] = _mm256_loadu_ps(x + t * K + k);
		for (int r = 0; r < R; r++) {
			__m256 wv = ld8(m->w, dt, (n + r) * K + k);
			for (int t = 0; t < T; t++)
				acc[t][r] = _mm256_fmadd_ps(xv[t], wv, acc[t][r]);
		}
	}
	for (int r = 0; r < R; r++)
		for (int t = 0; t < T; t++)
			finish(m, dt, t, n + r, acc[t][r]);
}

/* Rows of W per block for T rows of x: T*R accumulators, at most 12. */
#define GEMV_FN(name, DT, T, R)                                                                    \
	AVX2 static void name(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)                \
	{                                                                                          \
		int64_t n = n0;                                                                    \
		for (; n + (R) <= n1; n += (R))                                                    \
			gemv_block(m, DT, T, R, n);                                                \
		for (; n < n1; n++)                                                                \
			gemv_block(m, DT, T, 1, n);                                                \
	}
#define GEMV_DT(sfx, DT)                                                                           \
	GEMV_FN(gemv1_##sfx, DT, 1, 8)                                                             \
	GEMV_FN(gemv2_##sfx, DT, 2, 4)                                                             \
	GEMV_FN(gemv3_##sfx, DT, 3, 4)                                                             \
	GEMV_FN(gemv4_##sfx, DT, 4, 3)
GEMV_DT(f32, ATLAS_DTYPE_F32)
GEMV_DT(f16, ATLAS_DTYPE_F16)
GEMV_DT(bf16, ATLAS_DTYPE_BF16)

void atlas_cpu_gemv_avx2(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)
{
	typedef void (*fn_t)(const struct atlas_cpu_mm *, int64_t, int64_t);
	static const fn_t tab[3][ATLAS_CPU_GEMV_MAX_T] = {
	    {gemv1_f32, gemv2_f32, gemv3_f32, gemv4_f32},
	    {gemv1_f16, gemv2_f16, gemv3_f16, gemv4_f16},
	    {gemv1_bf16, gemv2_bf16, gemv3_bf16, gemv4_bf16},
	};
	int d = m->wdt == ATLAS_DTYPE_F32 ? 0 : m->wdt == ATLAS_DTYPE_F16 ? 1 : 2;
	tab[d][m->T - 1](m, n0, n1);
}

/* --- prefill: tiles of W converted once, reused by every row of x ------ */

/* Rows of x and of the tile per micro-kernel: 3 x 4 accumulators plus
 * 3 rows of x and one of W fill the 16 ymm registers. */
#define MT 3
#define NR 4
#define LDT ATLAS_CPU_TILE_K
/* Tiles per pass over a K block of x (x block T x LDT floats in L2). */
#define CHUNK 8

/* acc[i][j] += x[t+i, k0..k0+kb8) . wt[r+j, 0..kb8): one 8-lane FMA chain
 * each, k ascending (micro and micro_inv). */
AVX2 INLINE void chains(const struct atlas_cpu_mm *m, const float *wt, __m256 (*acc)[NR],
			int64_t t, int64_t r, int64_t k0, int64_t kb8, int mt, int nr)
{
	const int64_t K = m->K;
	const float *xp = m->x + t * K + k0;
	const float *wp = wt + r * LDT;
	for (int64_t k = 0; k < kb8; k += 8) {
		__m256 xv[MT];
		for (int i = 0; i < mt; i++)
			xv[i] = _mm256_loadu_ps(xp + i * K + k);
		for (int j = 0; j < nr; j++) {
			__m256 wv = _mm256_load_ps(wp + j * LDT + k);
			for (int i = 0; i < mt; i++)
				acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
		}
	}
}

/* out[t..t+mt, nt+r..nt+r+nr) (+)= x[t.., k0..k0+kb) . wt[r.., 0..kb) */
AVX2 INLINE void micro(const struct atlas_cpu_mm *m, const float *wt, int64_t t, int64_t nt,
		       int64_t r, int64_t k0, int64_t kb, int mt, int nr)
{
	const int64_t K = m->K, kb8 = kb & ~(int64_t)7;
	const float *xp = m->x + t * K + k0;
	const float *wp = wt + r * LDT;
	__m256 acc[MT][NR];

	for (int i = 0; i < mt; i++)
		for (int j = 0; j < nr; j++)
			acc[i][j] = _mm256_setzero_ps();
	chains(m, wt, acc, t, r, k0, kb8, mt, nr);
	for (int i = 0; i < mt; i++) {
		float *o = m->out + (t + i) * m->N + nt + r;
		float s[NR], prev[NR];
		if (nr == NR && kb8 == kb) {
			/* four sums at once: pairwise hadds, then fold halves */
			__m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[i][0], acc[i][1]),
						  _mm256_hadd_ps(acc[i][2], acc[i][3]));
			_mm_storeu_ps(
			    s, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
		} else {
			for (int j = 0; j < nr; j++) {
				s[j] = hsum(acc[i][j]);
				for (int64_t k = kb8; k < kb; k++)
					s[j] += xp[i * K + k] * wp[j * LDT + k];
			}
		}
		for (int j = 0; j < nr; j++)
			prev[j] = k0	    ? o[j]
				  : m->bias ? atlas_cpu_wload(m->bias, m->wdt, nt + r + j)
					    : 0.0f;
		for (int j = 0; j < nr; j++)
			o[j] = prev[j] + s[j];
	}
}

/* wt[r, 0..kb) = W[nt + r, k0..k0+kb) in f32, for r < nb. */
AVX2 INLINE void pack(const struct atlas_cpu_mm *m, enum atlas_dtype dt, float *wt, int64_t nt,
		      int64_t nb, int64_t k0, int64_t kb)
{
	int64_t kb8 = kb & ~(int64_t)7;
	for (int64_t r = 0; r < nb; r++) {
		int64_t base = (nt + r) * m->K + k0;
		for (int64_t k = 0; k < kb8; k += 8)
			_mm256_store_ps(wt + r * LDT + k, ld8(m->w, dt, base + k));
		for (int64_t k = kb8; k < kb; k++)
			wt[r * LDT + k] = atlas_cpu_wload(m->w, dt, base + k);
	}
}

/* All rows of x against one packed tile (any dtype: wt is f32). */
AVX2 static void tile_rows(const struct atlas_cpu_mm *m, const float *wt, int64_t nt, int64_t nb,
			   int64_t k0, int64_t kb)
{
	const int64_t T = m->T;
	int64_t t = 0, r;
	for (; t + MT <= T; t += MT) {
		for (r = 0; r + NR <= nb; r += NR)
			micro(m, wt, t, nt, r, k0, kb, MT, NR);
		for (; r < nb; r++)
			micro(m, wt, t, nt, r, k0, kb, MT, 1);
	}
	if (T - t == 2) {
		for (r = 0; r + NR <= nb; r += NR)
			micro(m, wt, t, nt, r, k0, kb, 2, NR);
		for (; r < nb; r++)
			micro(m, wt, t, nt, r, k0, kb, 2, 1);
	} else if (T - t == 1) {
		for (r = 0; r + NR <= nb; r += NR)
			micro(m, wt, t, nt, r, k0, kb, 1, NR);
		for (; r < nb; r++)
			micro(m, wt, t, nt, r, k0, kb, 1, 1);
	}
}

AVX2 INLINE void tiled(const struct atlas_cpu_mm *m, enum atlas_dtype dt, int64_t n0, int64_t n1)
{
	/* the current tile of W in f32, rows LDT floats apart */
	float wt[ATLAS_CPU_TILE_N * LDT] __attribute__((aligned(64)));
	const int64_t K = m->K;

	/* A chunk of tiles shares each K block of x, which then stays in L2
	 * while the chunk's tiles stream past it. */
	for (int64_t nc = n0; nc < n1; nc += CHUNK * ATLAS_CPU_TILE_N) {
		int64_t nce =
		    n1 - nc < CHUNK * ATLAS_CPU_TILE_N ? n1 : nc + CHUNK * ATLAS_CPU_TILE_N;
		for (int64_t k0 = 0; k0 < K; k0 += LDT) {
			int64_t kb = K - k0 < LDT ? K - k0 : LDT;
			for (int64_t nt = nc; nt < nce; nt += ATLAS_CPU_TILE_N) {
				int64_t nb =
				    nce - nt < ATLAS_CPU_TILE_N ? nce - nt : ATLAS_CPU_TILE_N;
				pack(m, dt, wt, nt, nb, k0, kb);
				tile_rows(m, wt, nt, nb, k0, kb);
			}
		}
	}
}

/* The exported entry point of kernel fn(m, dtype, n0, n1): one instance
 * per weight dtype, so each has its conversion inlined. */
#define BY_DTYPE(fn)                                                                               \
	AVX2 static void fn##_f32(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)            \
	{                                                                                          \
		fn(m, ATLAS_DTYPE_F32, n0, n1);                                                    \
	}                                                                                          \
	AVX2 static void fn##_f16(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)            \
	{                                                                                          \
		fn(m, ATLAS_DTYPE_F16, n0, n1);                                                    \
	}                                                                                          \
	AVX2 static void fn##_bf16(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)           \
	{                                                                                          \
		fn(m, ATLAS_DTYPE_BF16, n0, n1);                                                   \
	}                                                                                          \
	void atlas_cpu_##fn##_avx2(const struct atlas_cpu_mm *m, int64_t n0, int64_t n1)           \
	{                                                                                          \
		if (m->wdt == ATLAS_DTYPE_F32)                                                     \
			fn##_f32(m, n0, n1);                                                       \
		else if (m->wdt == ATLAS_DTYPE_F16)                                                \
			fn##_f16(m, n0, n1);                                                       \
		else                                                                               \
			fn##_bf16(m, n0, n1);                                                      \
	}

BY_DTYPE(tiled)

/* --- batch-invariant prefill: gemv_block's sums, tiled ---------------
 *
 * Every (row of x, row of W) sum is gemv_block's: one 8-lane FMA chain
 * over k = 0, 8, .., K8 - 8 in order, then finish(). The chains of a tile
 * of W and INV_TB rows of x live in memory across the K tiles, so each
 * tile of W is converted once for those rows: a row gets the same bits
 * for any T, as the batch-invariant mode needs, at near the tiled
 * kernel's speed (2 cores, bf16 512 x 3072 x 1024: 29.8 ms against 24.5
 * tiled and 53.5 through the GEMV in groups of 4 rows). */
/* Rows of x per pass over a row tile's K: their x block (INV_TB x K) and
 * chains (INV_TB x 16 vectors, 64 KiB) stay in L2 while the tile's K
 * streams past; W is converted again for each pass. */
#define INV_TB 128

AVX2 INLINE void micro_inv(const struct atlas_cpu_mm *m, const float *wt, __m256 *acc, int64_t t,
			   int64_t r, int64_t k0, int64_t kb, int mt, int nr)
{
	__m256 a[MT][NR];
	for (int i = 0; i < mt; i++)
		for (int j = 0; j < nr; j++)
			a[i][j] = acc[i * ATLAS_CPU_TILE_N + j];
	chains(m, wt, a, t, r, k0, kb & ~(int64_t)7, mt, nr);
	for (int i = 0; i < mt; i++)
		for (int j = 0; j < nr; j++)
			acc[i * ATLAS_CPU_TILE_N + j] = a[i][j];
}

AVX2 INLINE void tiled_inv(const struct atlas_cpu_mm *m, enum atlas_dtype dt, int64_t n0,
			   int64_t n1)
{
	float wt[ATLAS_CPU_TILE_N * LDT] __attribute__((aligned(64)));
	__m256 acc[INV_TB * ATLAS_CPU_TILE_N]; /* [row of x][row of the tile], 64 KiB */
	const int64_t K = m->K, T = m->T;
	for (int64_t t0 = 0; t0 < T; t0 += INV_TB) {
		const int64_t tb = T - t0 < INV_TB ? T - t0 : INV_TB;
		for (int64_t nt = n0; nt < n1; nt += ATLAS_CPU_TILE_N) {
			const int64_t nb = n1 - nt < ATLAS_CPU_TILE_N ? n1 - nt : ATLAS_CPU_TILE_N;
			for (int64_t i = 0; i < tb * ATLAS_CPU_TILE_N; i++)
				acc[i] = _mm256_setzero_ps();
			for (int64_t k0 = 0; k0 < K; k0 += LDT) {
				const int64_t kb = K - k0 < LDT ? K - k0 : LDT;
				pack(m, dt, wt, nt, nb, k0, kb);
				for (int64_t t = 0; t < tb; t += MT) {
					const int mt = tb - t < MT ? (int)(tb - t) : MT;
					__m256 *at = acc + t * ATLAS_CPU_TILE_N;
					int64_t r = 0;
					for (; r + NR <= nb; r += NR)
						micro_inv(m, wt, at + r, t0 + t, r, k0, kb, mt, NR);
					for (; r < nb; r++)
						micro_inv(m, wt, at + r, t0 + t, r, k0, kb, mt, 1);
				}
			}
			for (int64_t t = 0; t < tb; t++)
				for (int64_t r = 0; r < nb; r++)
					finish(m, dt, t0 + t, nt + r, acc[t * ATLAS_CPU_TILE_N + r]);
		}
	}
}

BY_DTYPE(tiled_inv)

#endif
