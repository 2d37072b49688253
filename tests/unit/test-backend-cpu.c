/* test-backend-cpu.c - every op of the CPU backend against a naive
 * double-precision reference written here, on random inputs in [-1, 1]
 * (never zero), for F32, F16 and BF16 weights, odd shapes, both matmul
 * paths (GEMV and tiled), both kernel sets (portable and AVX2 where the
 * CPU has it) and the default all-cores thread pool. Output buffers are
 * poisoned with NaN before each call so an element the op forgot to
 * write fails the check. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../lib/backend/backend.h"
#include "../../lib/backend/cpu/cpu.h"
#include "../../lib/core/error.h"
#include "../../lib/core/threads.h"
#include "harness.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1], never 0 (xorshift64*). */
static float rnd(void)
{
	for (;;) {
		rng ^= rng >> 12;
		rng ^= rng << 25;
		rng ^= rng >> 27;
		uint64_t r = rng * 0x2545f4914f6cdd1dull;
		float f = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
		if (fabsf(f) > 1e-4f)
			return f;
	}
}

static float *rnd_f32(int64_t n)
{
	float *p = malloc((size_t)n * sizeof(float));
	for (int64_t i = 0; i < n; i++)
		p[i] = rnd();
	return p;
}

static void poison(float *p, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = NAN;
}

/* Random weights stored as dt; *ref gets their exact values as double. */
static void *rnd_weights(enum atlas_dtype dt, int64_t n, double **ref)
{
	void *w = malloc((size_t)n * atlas_dtype_size(dt));
	*ref = malloc((size_t)n * sizeof(double));
	for (int64_t i = 0; i < n; i++) {
		float f = rnd();
		if (dt == ATLAS_DTYPE_BF16) {
			uint16_t h = atlas_f32_to_bf16(f);
			((uint16_t *)w)[i] = h;
			f = atlas_bf16_to_f32(h);
		} else if (dt == ATLAS_DTYPE_F16) {
			uint16_t h = atlas_f32_to_f16(f);
			((uint16_t *)w)[i] = h;
			f = atlas_f16_to_f32(h);
		} else {
			((float *)w)[i] = f;
		}
		(*ref)[i] = f;
	}
	return w;
}

/* max |out - ref| / max |ref|; a NaN (unwritten) output gives infinity. */
static double rel_err(const float *out, const double *ref, int64_t n)
{
	double md = 0, mr = 0;
	for (int64_t i = 0; i < n; i++) {
		if (isnan(out[i]))
			return INFINITY;
		double d = fabs(out[i] - ref[i]);
		if (d > md)
			md = d;
		if (fabs(ref[i]) > mr)
			mr = fabs(ref[i]);
	}
	return mr > 0 ? md / mr : md;
}

#define CHECK_REL(out, ref, n, what)                                                               \
	do {                                                                                       \
		double e_ = rel_err(out, ref, n);                                                  \
		if (!(e_ < 1e-5))                                                                  \
			harness_fail(__FILE__, __LINE__, "%s: relative error %g", what, e_);       \
	} while (0)

static const enum atlas_dtype wdts[] = {
    ATLAS_DTYPE_F32,
    ATLAS_DTYPE_F16,
    ATLAS_DTYPE_BF16,
};

/* --- matmul ----------------------------------------------------------- */

static void check_matmul(struct atlas_backend *be, enum atlas_dtype dt, int64_t T, int64_t N,
			 int64_t K, int with_bias)
{
	double *wr, *br = NULL;
	void *w = rnd_weights(dt, N * K, &wr);
	void *b = with_bias ? rnd_weights(dt, N, &br) : NULL;
	float *x = rnd_f32(T * K), *out = malloc((size_t)(T * N) * sizeof(float));
	double *ref = malloc((size_t)(T * N) * sizeof(double));
	char what[128];

	for (int64_t t = 0; t < T; t++)
		for (int64_t n = 0; n < N; n++) {
			double s = br ? br[n] : 0;
			for (int64_t k = 0; k < K; k++)
				s += (double)x[t * K + k] * wr[n * K + k];
			ref[t * N + n] = s;
		}
	poison(out, T * N);
	snprintf(what, sizeof(what), "matmul %s isa=%d T=%lld N=%lld K=%lld%s",
		 atlas_dtype_name(dt), (int)atlas_cpu_isa_get(), (long long)T, (long long)N,
		 (long long)K, with_bias ? " bias" : "");
	CHECK_EQ_INT(be->matmul(be, out, x, w, b, dt, T, N, K), 0);
	CHECK_REL(out, ref, T * N, what);
	free(w);
	free(wr);
	free(b);
	free(br);
	free(x);
	free(out);
	free(ref);
}

/* Shapes that hit the GEMV (T <= 4) and tiled paths, tails of the 8-wide
 * vectors, of the 32-row and 256-column tiles and of the register
 * blocks, and sizes large enough to be split over threads. */
static void matmul_all(struct atlas_backend *be)
{
	static const int64_t shapes[][3] = {
	    {1, 1, 1},	    {1, 37, 45},     {2, 19, 8},   {3, 67, 129},  {4, 130, 264},
	    {1, 1000, 517}, {3, 1000, 517},  {5, 33, 257}, {37, 45, 300}, {37, 200, 517},
	    {130, 70, 517}, {130, 257, 260}, {7, 9, 3},
	};
	for (size_t d = 0; d < sizeof(wdts) / sizeof(wdts[0]); d++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			check_matmul(be, wdts[d], shapes[s][0], shapes[s][1], shapes[s][2],
				     (int)(s % 2));
}

static void test_matmul(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	enum atlas_cpu_isa best = atlas_cpu_isa_get();
	CHECK(atlas_threads_count() >= 1);
	matmul_all(be);
	if (best != ATLAS_CPU_ISA_GENERIC) {
		CHECK_EQ_INT(atlas_cpu_isa_set(ATLAS_CPU_ISA_GENERIC), ATLAS_CPU_ISA_GENERIC);
		matmul_all(be);
		atlas_cpu_isa_set(best);
	} else {
		printf("# AVX2 kernels not available; portable kernels only\n");
	}
	be->destroy(be);
}

/* Batch-invariant mode: every row of a T-row matmul (the tiled_inv
 * kernels past the GEMV's 4 rows) equals, bit for bit, the row computed
 * alone (the GEMV), with tails of K (8-wide vectors, 512-wide tiles), of
 * N (16-row tiles, 4-row blocks) and of T (128-row passes, 3-row blocks). */
static void inv_rows(struct atlas_backend *be, enum atlas_dtype dt, int64_t T, int64_t N, int64_t K)
{
	double *wr, *br;
	void *w = rnd_weights(dt, N * K, &wr), *b = rnd_weights(dt, N, &br);
	float *x = rnd_f32(T * K), *all = malloc((size_t)(T * N) * sizeof(float));
	float *one = malloc((size_t)N * sizeof(float));
	int64_t diff = 0;
	CHECK_EQ_INT(be->matmul(be, all, x, w, b, dt, T, N, K), 0);
	for (int64_t t = 0; t < T; t++) {
		CHECK_EQ_INT(be->matmul(be, one, x + t * K, w, b, dt, 1, N, K), 0);
		diff += memcmp(one, all + t * N, (size_t)N * sizeof(float)) != 0;
	}
	if (diff)
		printf("# invariant matmul %s isa=%d T=%lld N=%lld K=%lld: %lld rows differ\n",
		       atlas_dtype_name(dt), (int)atlas_cpu_isa_get(), (long long)T, (long long)N,
		       (long long)K, (long long)diff);
	CHECK(diff == 0);
	free(w);
	free(wr);
	free(b);
	free(br);
	free(x);
	free(all);
	free(one);
}

static void test_matmul_invariant(void)
{
	static const int64_t shapes[][3] = {{5, 33, 257},  {37, 45, 300}, {70, 200, 1100},
					    {33, 17, 1024}, {6, 70, 13},   {100, 64, 520}, {300, 40, 520}};
	struct atlas_backend *be = atlas_backend_cpu_new();
	enum atlas_cpu_isa best = atlas_cpu_isa_get();
	be->batch_invariant = true;
	for (int pass = 0; pass < (best != ATLAS_CPU_ISA_GENERIC ? 2 : 1); pass++) {
		if (pass)
			atlas_cpu_isa_set(ATLAS_CPU_ISA_GENERIC);
		matmul_all(be); /* and still correct */
		for (size_t d = 0; d < sizeof(wdts) / sizeof(wdts[0]); d++)
			for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
				inv_rows(be, wdts[d], shapes[i][0], shapes[i][1], shapes[i][2]);
	}
	atlas_cpu_isa_set(best);
	be->destroy(be);
}

static void test_matmul_k0_and_empty(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	float bias[3] = {0.5f, -1.0f, 2.0f}, out[6], x[1];
	poison(out, 6);
	CHECK_EQ_INT(be->matmul(be, out, x, x, bias, ATLAS_DTYPE_F32, 2, 3, 0), 0);
	CHECK(out[0] == 0.5f && out[4] == -1.0f && out[5] == 2.0f);
	CHECK_EQ_INT(be->matmul(be, out, x, x, NULL, ATLAS_DTYPE_F32, 0, 3, 4), 0);
	CHECK_EQ_INT(be->matmul(be, out, x, x, NULL, ATLAS_DTYPE_F32, -1, 3, 4), ATLAS_EINVAL);
	be->destroy(be);
}

static void test_f16_inline_conversion(void)
{
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float a = atlas_cpu_f16((uint16_t)h), b = atlas_f16_to_f32((uint16_t)h);
		if (isnan(b) ? !isnan(a) : memcmp(&a, &b, 4) != 0)
			bad++;
	}
	CHECK_EQ_INT(bad, 0);
}

/* --- norms ------------------------------------------------------------ */

static void ref_norm(double *ref, const double *v, const double *w, int64_t R, int64_t D,
		     double eps)
{
	for (int64_t r = 0; r < R; r++) {
		double ss = 0;
		for (int64_t i = 0; i < D; i++)
			ss += v[r * D + i] * v[r * D + i];
		double inv = 1.0 / sqrt(ss / (double)D + eps);
		for (int64_t i = 0; i < D; i++)
			ref[r * D + i] = v[r * D + i] * inv * w[i];
	}
}

static void check_rmsnorm(struct atlas_backend *be, enum atlas_dtype dt, int64_t R, int64_t D,
			  int in_place)
{
	double *wr;
	void *w = rnd_weights(dt, D, &wr);
	float *x = rnd_f32(R * D), *out = in_place ? x : malloc((size_t)(R * D) * 4);
	double *v = malloc((size_t)(R * D) * 8), *ref = malloc((size_t)(R * D) * 8);
	for (int64_t i = 0; i < R * D; i++)
		v[i] = x[i];
	ref_norm(ref, v, wr, R, D, 1e-6);
	if (!in_place)
		poison(out, R * D);
	CHECK_EQ_INT(be->rmsnorm(be, out, x, w, dt, R, D, 1e-6f), 0);
	CHECK_REL(out, ref, R * D, "rmsnorm");
	if (!in_place)
		free(out);
	free(w);
	free(wr);
	free(x);
	free(v);
	free(ref);
}

static void test_rmsnorm(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	static const int64_t shapes[][2] = {{1, 64}, {3, 517}, {37, 7}, {130, 517}};
	for (size_t d = 0; d < 3; d++)
		for (size_t s = 0; s < 4; s++)
			check_rmsnorm(be, wdts[d], shapes[s][0], shapes[s][1], (int)(s % 2));
	be->destroy(be);
}

static void check_add_rmsnorm(struct atlas_backend *be, enum atlas_dtype dt, int64_t R, int64_t D)
{
	double *wr;
	void *w = rnd_weights(dt, D, &wr);
	float *res = rnd_f32(R * D), *x = rnd_f32(R * D);
	float *out = malloc((size_t)(R * D) * 4);
	double *v = malloc((size_t)(R * D) * 8), *ref = malloc((size_t)(R * D) * 8);
	for (int64_t i = 0; i < R * D; i++)
		v[i] = (double)res[i] + x[i];
	ref_norm(ref, v, wr, R, D, 1e-5);
	poison(out, R * D);
	CHECK_EQ_INT(be->add_rmsnorm(be, res, x, out, w, dt, R, D, 1e-5f), 0);
	CHECK_REL(out, ref, R * D, "add_rmsnorm out");
	CHECK_REL(res, v, R * D, "add_rmsnorm res");
	free(w);
	free(wr);
	free(res);
	free(x);
	free(out);
	free(v);
	free(ref);
}

static void test_add_rmsnorm(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	for (size_t d = 0; d < 3; d++) {
		check_add_rmsnorm(be, wdts[d], 1, 96);
		check_add_rmsnorm(be, wdts[d], 37, 45);
		check_add_rmsnorm(be, wdts[d], 130, 517);
	}
	be->destroy(be);
}

/* --- rope ------------------------------------------------------------- */

static void check_rope(struct atlas_backend *be, int64_t T, int64_t H, int64_t hd)
{
	int64_t n = T * H * hd, half = hd / 2;
	float *x = rnd_f32(n), *inv = malloc((size_t)half * 4);
	int32_t *pos = malloc((size_t)T * 4);
	double *ref = malloc((size_t)n * 8);
	for (int64_t i = 0; i < half; i++)
		inv[i] = (float)pow(10000.0, -2.0 * (double)i / (double)hd);
	for (int64_t t = 0; t < T; t++)
		pos[t] = (int32_t)(fabsf(rnd()) * 5000);
	for (int64_t t = 0; t < T; t++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < half; i++) {
				/* the angle is an FP32 product by contract */
				double a = (float)pos[t] * inv[i];
				const float *xh = x + (t * H + h) * hd;
				double x0 = xh[i], x1 = xh[i + half];
				ref[(t * H + h) * hd + i] = x0 * cos(a) - x1 * sin(a);
				ref[(t * H + h) * hd + i + half] = x1 * cos(a) + x0 * sin(a);
			}
	CHECK_EQ_INT(be->rope(be, x, pos, inv, T, H, hd), 0);
	CHECK_REL(x, ref, n, "rope");
	free(x);
	free(inv);
	free(pos);
	free(ref);
}

static void test_rope(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	check_rope(be, 1, 8, 64);
	check_rope(be, 3, 4, 128);
	check_rope(be, 37, 3, 6);
	check_rope(be, 130, 8, 64);
	float x[3];
	int32_t pos[1] = {0};
	CHECK_EQ_INT(be->rope(be, x, pos, x, 1, 1, 3), ATLAS_EINVAL);
	be->destroy(be);
}

/* --- attention -------------------------------------------------------- */

/* nseq sequences, each with T new tokens at positions pos0..pos0+T-1 and
 * its own random cache of S = pos0+T keys, stored in a paged cache of
 * blocks of 7 rows in a scrambled order; tokens of all sequences run in
 * one batch. The reference reads each sequence's logical cache. */
static void check_attention(struct atlas_backend *be, int64_t T, int64_t pos0, int64_t H,
			    int64_t Hkv, int64_t hd, int64_t window, int64_t nseq)
{
	const int64_t B = 7, S = pos0 + T, row = Hkv * hd, nb = (S + B - 1) / B;
	int64_t n = nseq * T * H * hd, slots = nseq * nb * B;
	float *q = rnd_f32(n), *kc = rnd_f32(slots * row), *vc = rnd_f32(slots * row);
	float *out = malloc((size_t)n * 4), scale = 1.0f / sqrtf((float)hd);
	double *ref = malloc((size_t)n * 8), *p = malloc((size_t)S * 8);
	int32_t *tables = malloc((size_t)(nseq * nb) * 4);
	int32_t *seq_of = malloc((size_t)(nseq * T) * 4), *pos = malloc((size_t)(nseq * T) * 4);
	char what[160];

	/* block i of sequence s lives in physical block (i*nseq + s) scrambled */
	for (int64_t s = 0; s < nseq; s++)
		for (int64_t i = 0; i < nb; i++)
			tables[s * nb + i] = (int32_t)(((i * nseq + s) * 5 + 3) % (nseq * nb));
	for (int64_t s = 0; s < nseq; s++)
		for (int64_t t = 0; t < T; t++) {
			seq_of[s * T + t] = (int32_t)s;
			pos[s * T + t] = (int32_t)(pos0 + t);
		}
#define KROW(s, j) ((int64_t)tables[(s) * nb + (j) / B] * B + (j) % B)
	for (int64_t s = 0; s < nseq; s++)
		for (int64_t t = 0; t < T; t++)
			for (int64_t h = 0; h < H; h++) {
				int64_t pt = pos0 + t, kh = h / (H / Hkv), qi = ((s * T + t) * H + h) * hd;
				int64_t lo = window && pt - window + 1 > 0 ? pt - window + 1 : 0;
				double mx = -INFINITY, sum = 0;
				for (int64_t j = lo; j <= pt; j++) {
					double sc = 0;
					for (int64_t d = 0; d < hd; d++)
						sc += (double)q[qi + d] * kc[KROW(s, j) * row + kh * hd + d];
					p[j] = sc * scale;
					mx = p[j] > mx ? p[j] : mx;
				}
				for (int64_t j = lo; j <= pt; j++)
					sum += p[j] = exp(p[j] - mx);
				for (int64_t d = 0; d < hd; d++) {
					double o = 0;
					for (int64_t j = lo; j <= pt; j++)
						o += p[j] / sum * vc[KROW(s, j) * row + kh * hd + d];
					ref[qi + d] = o;
				}
			}
#undef KROW
	struct atlas_kv_batch kb = {.seq_of = seq_of, .pos = pos, .block_tables = tables,
				    .n_seq = nseq, .max_blocks = nb, .block_size = B, .max_keys = S};
	poison(out, n);
	snprintf(what, sizeof(what),
		 "attention T=%lld pos0=%lld H=%lld Hkv=%lld hd=%lld window=%lld seqs=%lld",
		 (long long)T, (long long)pos0, (long long)H, (long long)Hkv, (long long)hd,
		 (long long)window, (long long)nseq);
	CHECK_EQ_INT(be->attention(be, out, q, kc, vc, &kb, nseq * T, H, Hkv, hd, window, scale), 0);
	CHECK_REL(out, ref, n, what);
	/* a token whose position is past its block table is refused */
	pos[0] = (int32_t)(nb * B);
	kb.max_keys = nb * B + 1;
	CHECK_EQ_INT(be->attention(be, out, q, kc, vc, &kb, nseq * T, H, Hkv, hd, window, scale),
		     ATLAS_EINVAL);
	free(q);
	free(kc);
	free(vc);
	free(out);
	free(ref);
	free(p);
	free(tables);
	free(seq_of);
	free(pos);
}

static void test_kv_store(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	const int64_t T = 5, row = 24, slots = 40;
	float *k = rnd_f32(T * row), *v = rnd_f32(T * row);
	float *kc = malloc((size_t)(slots * row) * 4), *vc = malloc((size_t)(slots * row) * 4);
	int32_t slot[5] = {3, 39, 0, 17, 18};
	poison(kc, slots * row);
	poison(vc, slots * row);
	CHECK_EQ_INT(be->kv_store(be, kc, vc, k, v, slot, T, 3, row / 3), 0);
	int ok = 1, untouched = 1;
	for (int64_t t = 0; t < T; t++)
		for (int64_t i = 0; i < row; i++)
			ok &= kc[slot[t] * row + i] == k[t * row + i] &&
			      vc[slot[t] * row + i] == v[t * row + i];
	untouched = isnan(kc[1 * row]) && isnan(vc[20 * row + 3]);
	CHECK(ok);
	CHECK(untouched);
	free(k);
	free(v);
	free(kc);
	free(vc);
	be->destroy(be);
}

static void test_attention(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	check_attention(be, 1, 0, 8, 2, 64, 0, 1);
	check_attention(be, 3, 5, 8, 2, 64, 0, 1);
	check_attention(be, 3, 5, 8, 2, 64, 4, 1);
	check_attention(be, 37, 20, 8, 2, 40, 16, 1);
	check_attention(be, 130, 0, 4, 4, 17, 0, 1);
	check_attention(be, 1, 30, 8, 2, 32, 0, 5);   /* a decode batch of 5 sequences */
	check_attention(be, 9, 13, 4, 1, 16, 6, 3);   /* chunked prefill of 3, MQA, window */
	check_attention(be, 1, 5000, 8, 2, 16, 0, 1);    /* beyond the stack buffer */
	check_attention(be, 2, 5000, 8, 2, 16, 4500, 1); /* long window */
	float x[4];
	int32_t zero[1] = {0};
	struct atlas_kv_batch kb = {.seq_of = zero, .pos = zero, .block_tables = zero,
				    .n_seq = 1, .max_blocks = 1, .block_size = 4, .max_keys = 1};
	CHECK_EQ_INT(be->attention(be, x, x, x, x, &kb, 1, 3, 2, 4, 0, 1.0f), ATLAS_EINVAL);
	be->destroy(be);
}

/* --- element-wise, embed, memory -------------------------------------- */

static void test_swiglu_add(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	const int64_t T = 37, F = 1130, n = T * F;
	float *g = rnd_f32(n), *u = rnd_f32(n), *out = malloc((size_t)n * 4);
	double *ref = malloc((size_t)n * 8);
	for (int64_t i = 0; i < n; i++) {
		/* scale the gate so exp() sees a wider range */
		g[i] *= 8;
		ref[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
	}
	poison(out, n);
	CHECK_EQ_INT(be->swiglu(be, out, g, u, T, F), 0);
	CHECK_REL(out, ref, n, "swiglu");
	CHECK_EQ_INT(be->swiglu(be, g, g, u, T, F), 0); /* in place */
	CHECK_REL(g, ref, n, "swiglu in place");
	for (int64_t i = 0; i < n; i++)
		ref[i] = (double)out[i] + u[i];
	CHECK_EQ_INT(be->add(be, out, u, n), 0);
	CHECK_REL(out, ref, n, "add");
	free(g);
	free(u);
	free(out);
	free(ref);
	be->destroy(be);
}

static void test_embed(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	const int64_t V = 50, D = 67, T = 130;
	int32_t ids[130];
	for (int64_t t = 0; t < T; t++)
		ids[t] = (int32_t)((t * 7 + 3) % V);
	for (size_t d = 0; d < 3; d++) {
		double *tr;
		void *tab = rnd_weights(wdts[d], V * D, &tr);
		float *out = malloc((size_t)(T * D) * 4);
		double *ref = malloc((size_t)(T * D) * 8);
		for (int64_t t = 0; t < T; t++)
			for (int64_t i = 0; i < D; i++)
				ref[t * D + i] = tr[ids[t] * D + i];
		poison(out, T * D);
		CHECK_EQ_INT(be->embed(be, out, tab, wdts[d], ids, T, D), 0);
		CHECK(rel_err(out, ref, T * D) == 0);
		free(tab);
		free(tr);
		free(out);
		free(ref);
	}
	be->destroy(be);
}

static void test_memory(void)
{
	struct atlas_backend *be = atlas_backend_open("cpu");
	CHECK(be != NULL);
	if (!be)
		return;
	CHECK_STR(be->name, "cpu");
	CHECK_EQ_INT(be->act_dtype, ATLAS_DTYPE_F32);
	float *a = be->alloc(be, 1000 * sizeof(float));
	float *b = be->alloc(be, 1000 * sizeof(float));
	float host[1000], back[1000];
	CHECK(a && b);
	CHECK(((uintptr_t)a & 63) == 0);
	int zero = 1;
	for (int i = 0; i < 1000; i++) {
		zero &= a[i] == 0.0f;
		host[i] = (float)i * 0.5f;
	}
	CHECK(zero);
	CHECK_EQ_INT(be->upload(be, a, host, sizeof(host)), 0);
	CHECK_EQ_INT(be->copy(be, b, a, sizeof(host)), 0);
	poison(back, 1000);
	CHECK_EQ_INT(be->download(be, back, b, sizeof(host)), 0);
	CHECK(memcmp(back, host, sizeof(host)) == 0);
	poison(back, 1000);
	CHECK_EQ_INT(be->to_f32(be, back, b, 1000), 0);
	CHECK(back[999] == 499.5f && back[1] == 0.5f);
	CHECK_EQ_INT(be->sync(be), 0);
	CHECK(be->weight_upload(be, host, sizeof(host)) == (const void *)host);
	be->weight_release(be, host);
	be->free(be, a);
	be->free(be, b);
	be->free(be, NULL);
	be->destroy(be);
}

static void test_unsupported_dtype(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	float buf[64] = {0};
	int32_t ids[1] = {0};
	atlas_error_clear();
	CHECK_EQ_INT(be->matmul(be, buf, buf, buf, NULL, ATLAS_DTYPE_I8, 1, 4, 4),
		     ATLAS_EUNSUPPORTED);
	CHECK_CONTAINS(atlas_errmsg(), "'I8'");
	CHECK_CONTAINS(atlas_errmsg(), "matmul");
	CHECK_EQ_INT(be->rmsnorm(be, buf, buf, buf, ATLAS_DTYPE_I8, 1, 4, 1e-6f),
		     ATLAS_EUNSUPPORTED);
	CHECK_CONTAINS(atlas_errmsg(), "rmsnorm");
	CHECK_EQ_INT(be->add_rmsnorm(be, buf, buf, buf + 8, buf, ATLAS_DTYPE_F8_E4M3, 1, 4, 1e-6f),
		     ATLAS_EUNSUPPORTED);
	CHECK_CONTAINS(atlas_errmsg(), "'F8_E4M3'");
	CHECK_EQ_INT(be->embed(be, buf, buf, ATLAS_DTYPE_I8, ids, 1, 4), ATLAS_EUNSUPPORTED);
	CHECK_CONTAINS(atlas_errmsg(), "embed");
	be->destroy(be);
}

int main(void)
{
	RUN(test_f16_inline_conversion);
	RUN(test_matmul);
	RUN(test_matmul_invariant);
	RUN(test_matmul_k0_and_empty);
	RUN(test_rmsnorm);
	RUN(test_add_rmsnorm);
	RUN(test_rope);
	RUN(test_attention);
	RUN(test_kv_store);
	RUN(test_swiglu_add);
	RUN(test_embed);
	RUN(test_memory);
	RUN(test_unsupported_dtype);
	return harness_done();
}
