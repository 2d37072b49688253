/* test-cuda-ops.c - every op of the CUDA backend against the CPU backend
 * (the reference) on random inputs of several shapes, odd sizes included.
 *
 * Inputs are drawn once, rounded to BF16 (the CUDA activation type) and
 * given to both backends, so the only differences are the GPU's BF16
 * outputs and its summation order. Every GPU output buffer is poisoned
 * with NaN before the op runs, so an element the kernel forgot to write
 * fails. Reported per case: max abs error and relative L2 error
 * ||gpu - cpu|| / ||cpu||; BF16 ops must stay under 1e-2, NaN never
 * passes. Prints TAP and a summary table (one line per case) to stdout.
 * Needs a GPU: without one it prints a skip line and exits 0. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/backend/kvq.h"
#include "../../lib/core/error.h"
#include "../unit/harness.h"

#define TOL 1e-2
#define ATLAS_MOE_TEST_MAXE 128

static struct atlas_backend *cpu, *gpu;
static uint64_t rng = 0x243f6a8885a308d3ull;
static double worst;

static float rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	uint64_t r = rng * 0x2545f4914f6cdd1dull;
	return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* n random values rounded to BF16 (as float), scaled. */
static float *rnd_bf(int64_t n, float scale)
{
	float *p = malloc((size_t)n * sizeof(float));
	for (int64_t i = 0; i < n; i++)
		p[i] = atlas_bf16_to_f32(atlas_f32_to_bf16(rnd() * scale));
	return p;
}

/* An input for both backends: CPU gets floats, GPU gets BF16. */
struct buf {
	float *h;     /* host floats (also the CPU backend's memory) */
	void *d;      /* GPU memory, BF16 */
	int64_t n;    /* elements */
};

static struct buf mkbuf(int64_t n, float scale)
{
	struct buf b = {rnd_bf(n, scale), gpu->alloc(gpu, (size_t)n * 2), n};
	uint16_t *t = malloc((size_t)n * 2);
	for (int64_t i = 0; i < n; i++)
		t[i] = atlas_f32_to_bf16(b.h[i]);
	gpu->upload(gpu, b.d, t, (size_t)n * 2);
	free(t);
	return b;
}

static void poison(struct buf *b)
{
	uint16_t *t = malloc((size_t)b->n * 2);
	for (int64_t i = 0; i < b->n; i++)
		t[i] = 0x7fc0; /* BF16 NaN */
	gpu->upload(gpu, b->d, t, (size_t)b->n * 2);
	for (int64_t i = 0; i < b->n; i++)
		b->h[i] = NAN;
	free(t);
}

static void freebuf(struct buf *b)
{
	free(b->h);
	gpu->free(gpu, b->d);
}

/* Weights of dtype wdt, the same bits on both sides; GPU copy uploaded. */
struct wbuf {
	void *h;      /* host */
	const void *d; /* GPU */
	enum atlas_dtype dt;
};

static struct wbuf mkw(enum atlas_dtype dt, int64_t n, float scale)
{
	struct wbuf w = {malloc((size_t)n * atlas_dtype_size(dt)), NULL, dt};
	for (int64_t i = 0; i < n; i++) {
		float f = rnd() * scale;
		if (dt == ATLAS_DTYPE_BF16)
			((uint16_t *)w.h)[i] = atlas_f32_to_bf16(f);
		else if (dt == ATLAS_DTYPE_F16)
			((uint16_t *)w.h)[i] = atlas_f32_to_f16(f);
		else
			((float *)w.h)[i] = f;
	}
	w.d = gpu->weight_upload(gpu, w.h, (size_t)n * atlas_dtype_size(dt));
	return w;
}

static void freew(struct wbuf *w)
{
	gpu->weight_release(gpu, w->d);
	free(w->h);
}

/* Compare GPU buffer against CPU floats; print a table line; CHECK. */
static void compare_tol(const char *what, const struct buf *g, const float *ref, int64_t n,
			double tol);

static void compare(const char *what, const struct buf *g, const float *ref, int64_t n)
{
	compare_tol(what, g, ref, n, TOL);
}

/* The same within relative L2 error tol. */
static void compare_tol(const char *what, const struct buf *g, const float *ref, int64_t n,
			double tol)
{
	float *out = malloc((size_t)n * sizeof(float));
	int rc = gpu->to_f32(gpu, out, g->d, n);
	double maxabs = 0, d2 = 0, r2 = 0;
	int64_t nans = 0;
	for (int64_t i = 0; i < n && !rc; i++) {
		if (isnan(out[i]) || isnan(ref[i])) {
			nans++;
			continue;
		}
		double d = fabs((double)out[i] - ref[i]);
		maxabs = d > maxabs ? d : maxabs;
		d2 += d * d;
		r2 += (double)ref[i] * ref[i];
	}
	double l2 = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
	int ok = !rc && nans == 0 && l2 < tol;
	printf("# %-58s max_abs %-10.3g rel_l2 %-10.3g nan %-4lld %s\n", what, maxabs, l2,
	       (long long)nans, ok ? "ok" : "FAIL");
	if (rc)
		printf("# %s\n", atlas_errmsg());
	if (l2 > worst || nans)
		worst = nans ? INFINITY : l2;
	CHECK(ok);
	free(out);
}

static const enum atlas_dtype wdts[] = {ATLAS_DTYPE_BF16, ATLAS_DTYPE_F16, ATLAS_DTYPE_F32};
static const char *wname(enum atlas_dtype d)
{
	return atlas_dtype_name(d);
}

/* One matmul on both backends, compared; `tag` names the path it is
 * meant to reach. */
static void check_matmul(int64_t T, int64_t N, int64_t K, enum atlas_dtype dt, int bias,
			 const char *tag)
{
	struct buf x = mkbuf(T * K, 1.0f), o = mkbuf(T * N, 1.0f);
	struct wbuf w = mkw(dt, N * K, 1.0f / sqrtf((float)K));
	struct wbuf b = bias ? mkw(dt, N, 0.5f) : (struct wbuf){0};
	float *ref = malloc((size_t)(T * N) * 4);
	char what[128];
	poison(&o);
	CHECK_EQ_INT(cpu->matmul(cpu, ref, x.h, w.h, bias ? b.h : NULL, dt, T, N, K), 0);
	CHECK_EQ_INT(gpu->matmul(gpu, o.d, x.d, w.d, bias ? b.d : NULL, dt, T, N, K), 0);
	snprintf(what, sizeof(what), "matmul%s T=%lld N=%lld K=%lld %s%s", tag, (long long)T,
		 (long long)N, (long long)K, wname(dt), bias ? " bias" : "");
	compare(what, &o, ref, T * N);
	freebuf(&x);
	freebuf(&o);
	freew(&w);
	if (bias)
		freew(&b);
	free(ref);
}

static void test_matmul(void)
{
	static const int64_t shapes[][3] = {
		{1, 64, 64}, {1, 67, 61}, {3, 1024, 1024}, {8, 300, 129}, {1, 4096, 1024},
		{9, 128, 64}, {64, 256, 512}, {130, 67, 61}, {200, 1000, 333}, {512, 2048, 1024},
		/* decode GEMV split-K choices: 8, 4, 2 and 1 features per block,
		 * a K tail after the unrolled loop, odd K on the scalar path */
		{1, 1024, 4096}, {4, 4096, 1032}, {2, 2304, 12288}, {8, 8192, 520}, {5, 1500, 777},
		/* the tensor-core GEMM (BF16 weights, larger T): one exact tile;
		 * T, N and K tails (K % 64 == 8); odd T and odd N (unpaired
		 * stores); 16 K slices (the stage ring wraps); 144 tiles of
		 * 128 x 256 (the wide tile) */
		{128, 256, 64}, {200, 1000, 520}, {77, 999, 72}, {256, 768, 1024}, {1030, 3842, 72},
	};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (size_t d = 0; d < 3; d++)
			for (int bias = 0; bias < 2; bias++) {
				int64_t T = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
				if (bias && d == 2 && N > 1000)
					continue;
				check_matmul(T, N, K, wdts[d], bias, "");
			}
}

static void test_norms(void)
{
	static const int64_t shapes[][2] = {{1, 64}, {3, 4096}, {37, 130}, {256, 128}, {5, 1000}};
	for (size_t s = 0; s < 5; s++)
		for (size_t d = 0; d < 3; d++) {
			int64_t R = shapes[s][0], D = shapes[s][1];
			struct buf x = mkbuf(R * D, 2.0f), o = mkbuf(R * D, 1.0f), res = mkbuf(R * D, 1.0f);
			struct wbuf w = mkw(wdts[d], D, 1.5f);
			float *ref = malloc((size_t)(R * D) * 4), *rres = malloc((size_t)(R * D) * 4);
			char what[128];
			poison(&o);
			CHECK_EQ_INT(cpu->rmsnorm(cpu, ref, x.h, w.h, wdts[d], R, D, 1e-6f), 0);
			CHECK_EQ_INT(gpu->rmsnorm(gpu, o.d, x.d, w.d, wdts[d], R, D, 1e-6f), 0);
			snprintf(what, sizeof(what), "rmsnorm R=%lld D=%lld %s", (long long)R, (long long)D,
				 wname(wdts[d]));
			compare(what, &o, ref, R * D);
			/* fused residual: both the updated residual and the output */
			memcpy(rres, res.h, (size_t)(R * D) * 4);
			poison(&o);
			CHECK_EQ_INT(cpu->add_rmsnorm(cpu, rres, x.h, ref, w.h, wdts[d], R, D, 1e-6f), 0);
			CHECK_EQ_INT(gpu->add_rmsnorm(gpu, res.d, x.d, o.d, w.d, wdts[d], R, D, 1e-6f), 0);
			snprintf(what, sizeof(what), "add_rmsnorm R=%lld D=%lld %s (out)", (long long)R,
				 (long long)D, wname(wdts[d]));
			compare(what, &o, ref, R * D);
			snprintf(what, sizeof(what), "add_rmsnorm R=%lld D=%lld %s (residual)", (long long)R,
				 (long long)D, wname(wdts[d]));
			compare(what, &res, rres, R * D);
			freebuf(&x);
			freebuf(&o);
			freebuf(&res);
			freew(&w);
			free(ref);
			free(rres);
		}
}

static void test_elementwise(void)
{
	for (int64_t n = 1; n <= 300000; n = n * 37 + 5) {
		struct buf g = mkbuf(n, 6.0f), u = mkbuf(n, 1.0f), o = mkbuf(n, 1.0f);
		float *ref = malloc((size_t)n * 4);
		char what[96];
		poison(&o);
		CHECK_EQ_INT(cpu->swiglu(cpu, ref, g.h, u.h, 1, n), 0);
		CHECK_EQ_INT(gpu->swiglu(gpu, o.d, g.d, u.d, 1, n), 0);
		snprintf(what, sizeof(what), "swiglu n=%lld", (long long)n);
		compare(what, &o, ref, n);
		memcpy(ref, u.h, (size_t)n * 4);
		CHECK_EQ_INT(cpu->add(cpu, ref, g.h, n), 0);
		CHECK_EQ_INT(gpu->add(gpu, u.d, g.d, n), 0);
		snprintf(what, sizeof(what), "add n=%lld", (long long)n);
		compare(what, &u, ref, n);
		freebuf(&g);
		freebuf(&u);
		freebuf(&o);
		free(ref);
	}
}

static void test_embed(void)
{
	const int64_t V = 1000, D = 67, T = 33;
	int32_t ids[33], *dids = gpu->alloc(gpu, sizeof(ids));
	for (int t = 0; t < T; t++)
		ids[t] = (t * 131 + 7) % V;
	gpu->upload(gpu, dids, ids, sizeof(ids));
	for (size_t d = 0; d < 3; d++) {
		struct wbuf tab = mkw(wdts[d], V * D, 1.0f);
		struct buf o = mkbuf(T * D, 1.0f);
		float *ref = malloc((size_t)(T * D) * 4);
		char what[64];
		poison(&o);
		CHECK_EQ_INT(cpu->embed(cpu, ref, tab.h, wdts[d], ids, T, D), 0);
		CHECK_EQ_INT(gpu->embed(gpu, o.d, tab.d, wdts[d], dids, T, D), 0);
		snprintf(what, sizeof(what), "embed T=%lld D=%lld %s", (long long)T, (long long)D,
			 wname(wdts[d]));
		compare(what, &o, ref, T * D);
		freebuf(&o);
		freew(&tab);
		free(ref);
	}
	gpu->free(gpu, dids);
}

static void test_rope(void)
{
	static const int64_t shapes[][3] = {{1, 16, 128}, {7, 4, 64}, {130, 8, 32}, {3, 2, 256}};
	for (size_t s = 0; s < 4; s++) {
		int64_t T = shapes[s][0], H = shapes[s][1], hd = shapes[s][2];
		int32_t *pos = malloc((size_t)T * 4), *dpos = gpu->alloc(gpu, (size_t)T * 4);
		float *freq = malloc((size_t)hd / 2 * 4), *dfreq = gpu->alloc(gpu, (size_t)hd / 2 * 4);
		for (int64_t t = 0; t < T; t++)
			pos[t] = (int32_t)(t * 37 + 5);
		for (int64_t i = 0; i < hd / 2; i++)
			freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)hd);
		gpu->upload(gpu, dpos, pos, (size_t)T * 4);
		gpu->upload(gpu, dfreq, freq, (size_t)hd / 2 * 4);
		struct buf x = mkbuf(T * H * hd, 1.0f);
		char what[64];
		CHECK_EQ_INT(cpu->rope(cpu, x.h, pos, freq, T, H, hd), 0);
		CHECK_EQ_INT(gpu->rope(gpu, x.d, dpos, dfreq, T, H, hd), 0);
		snprintf(what, sizeof(what), "rope T=%lld H=%lld hd=%lld", (long long)T, (long long)H,
			 (long long)hd);
		compare(what, &x, x.h, T * H * hd);
		freebuf(&x);
		free(pos);
		free(freq);
		gpu->free(gpu, dpos);
		gpu->free(gpu, dfreq);
	}
}

/* kv_store then paged attention, nseq sequences of T new tokens each at
 * positions pos0.., blocks of B rows in scrambled order. */
/* check_attention in batch-invariant mode (test_attention_inv): also
 * every token attended alone (T = 1) gives the bits it got in the batch. */
static int att_inv;

static void check_attention(int64_t T, int64_t pos0, int64_t H, int64_t Hkv, int64_t hd,
			    int64_t window, int64_t nseq, int64_t B)
{
	int64_t S = pos0 + T, nb = (S + B - 1) / B, row = Hkv * hd, slots = nseq * nb * B;
	int64_t nt = nseq * T;
	struct buf kc = mkbuf(slots * row, 1.0f), vc = mkbuf(slots * row, 1.0f);
	struct buf k = mkbuf(nt * row, 1.0f), v = mkbuf(nt * row, 1.0f);
	struct buf q = mkbuf(nt * H * hd, 1.0f), o = mkbuf(nt * H * hd, 1.0f);
	int32_t *tab = malloc((size_t)(nseq * nb) * 4), *seq = malloc((size_t)nt * 4);
	int32_t *pos = malloc((size_t)nt * 4), *slot = malloc((size_t)nt * 4);
	/* a permutation of the blocks: the multiplier must be coprime with
	 * their count */
	int64_t mul = 5;
	for (;; mul++) {
		int64_t a = mul, b = nseq * nb;
		while (b) {
			int64_t r = a % b;
			a = b, b = r;
		}
		if (a == 1)
			break;
	}
	for (int64_t s = 0; s < nseq; s++)
		for (int64_t i = 0; i < nb; i++)
			tab[s * nb + i] = (int32_t)(((i * nseq + s) * mul + 3) % (nseq * nb));
	for (int64_t s = 0; s < nseq; s++)
		for (int64_t t = 0; t < T; t++) {
			int64_t p = pos0 + t;
			seq[s * T + t] = (int32_t)s;
			pos[s * T + t] = (int32_t)p;
			slot[s * T + t] = (int32_t)(tab[s * nb + p / B] * B + p % B);
		}
	int32_t *dtab = gpu->alloc(gpu, (size_t)(nseq * nb) * 4), *dseq = gpu->alloc(gpu, (size_t)nt * 4);
	int32_t *dpos = gpu->alloc(gpu, (size_t)nt * 4), *dslot = gpu->alloc(gpu, (size_t)nt * 4);
	gpu->upload(gpu, dtab, tab, (size_t)(nseq * nb) * 4);
	gpu->upload(gpu, dseq, seq, (size_t)nt * 4);
	gpu->upload(gpu, dpos, pos, (size_t)nt * 4);
	gpu->upload(gpu, dslot, slot, (size_t)nt * 4);
	char what[128];
	CHECK_EQ_INT(cpu->kv_store(cpu, kc.h, vc.h, k.h, v.h, slot, nt, Hkv, hd), 0);
	CHECK_EQ_INT(gpu->kv_store(gpu, kc.d, vc.d, k.d, v.d, dslot, nt, Hkv, hd), 0);
	snprintf(what, sizeof(what), "kv_store T=%lld row=%lld", (long long)nt, (long long)row);
	compare(what, &kc, kc.h, slots * row);
	struct atlas_kv_batch hb = {seq, pos, tab, nseq, nb, B, S};
	struct atlas_kv_batch db = {dseq, dpos, dtab, nseq, nb, B, S};
	float *ref = malloc((size_t)(nt * H * hd) * 4);
	float scale = 1.0f / sqrtf((float)hd);
	poison(&o);
	CHECK_EQ_INT(cpu->attention(cpu, ref, q.h, kc.h, vc.h, &hb, nt, H, Hkv, hd, window, scale), 0);
	CHECK_EQ_INT(gpu->attention(gpu, o.d, q.d, kc.d, vc.d, &db, nt, H, Hkv, hd, window, scale), 0);
	snprintf(what, sizeof(what), "attention T=%lld pos0=%lld H=%lld Hkv=%lld hd=%lld w=%lld seqs=%lld",
		 (long long)T, (long long)pos0, (long long)H, (long long)Hkv, (long long)hd,
		 (long long)window, (long long)nseq);
	compare(what, &o, ref, nt * H * hd);
	/* a second run gives the same bits: the split-K merge does not depend
	 * on which block finishes last, and the first run left its counters
	 * zero */
	uint16_t *o1 = malloc((size_t)(nt * H * hd) * 2), *o2 = malloc((size_t)(nt * H * hd) * 2);
	CHECK_EQ_INT(gpu->download(gpu, o1, o.d, (size_t)(nt * H * hd) * 2), 0);
	CHECK_EQ_INT(gpu->attention(gpu, o.d, q.d, kc.d, vc.d, &db, nt, H, Hkv, hd, window, scale), 0);
	CHECK_EQ_INT(gpu->download(gpu, o2, o.d, (size_t)(nt * H * hd) * 2), 0);
	CHECK(memcmp(o1, o2, (size_t)(nt * H * hd) * 2) == 0);
	if (att_inv) {
		/* each token alone: its own position, the same cache, and
		 * its own key count as the step's longest (fewer splits
		 * launched than the batch's: the partition must not change) */
		int64_t diff = 0;
		float most = 0.0f; /* the largest |alone - batch| of an element */
		for (int64_t i = 0; i < nt; i++) {
			struct atlas_kv_batch d1 = {dseq + i, dpos + i, dtab, nseq, nb, B, pos[i] + 1};
			CHECK_EQ_INT(gpu->attention(gpu, o.d, (const char *)q.d + (size_t)(i * H * hd) * 2,
						    kc.d, vc.d, &d1, 1, H, Hkv, hd, window, scale),
				     0);
			CHECK_EQ_INT(gpu->download(gpu, o2, o.d, (size_t)(H * hd) * 2), 0);
			diff += memcmp(o2, o1 + i * H * hd, (size_t)(H * hd) * 2) != 0;
			for (int64_t e = 0; e < H * hd; e++) {
				const float d = fabsf(atlas_bf16_to_f32(o2[e]) -
						      atlas_bf16_to_f32(o1[i * H * hd + e]));
				most = d > most || d != d ? d : most;
			}
		}
		printf("# invariant %s: %lld of %lld tokens differ from alone (largest difference %g)\n",
		       what, (long long)diff, (long long)nt, most);
		CHECK(diff == 0);
	}
	free(o1);
	free(o2);
	freebuf(&kc);
	freebuf(&vc);
	freebuf(&k);
	freebuf(&v);
	freebuf(&q);
	freebuf(&o);
	free(tab);
	free(seq);
	free(pos);
	free(slot);
	free(ref);
	gpu->free(gpu, dtab);
	gpu->free(gpu, dseq);
	gpu->free(gpu, dpos);
	gpu->free(gpu, dslot);
}

static void test_attention(void)
{
	check_attention(1, 0, 8, 2, 64, 0, 1, 16);
	check_attention(17, 0, 4, 2, 32, 0, 1, 16);    /* prefill */
	check_attention(1, 300, 32, 8, 128, 0, 4, 16); /* decode batch, Qwen3-8B heads */
	check_attention(9, 13, 4, 1, 16, 6, 3, 7);     /* chunked prefill, MQA, window */
	check_attention(130, 0, 16, 8, 128, 0, 1, 16);
	check_attention(2, 2000, 8, 8, 96, 0, 2, 16);
	/* split-K: long contexts (32 splits), several sequences, windows,
	 * GQA 32/8 hd 128, MQA (two groups of 8 heads), a group of 12 heads
	 * (8 + 4), hd 256, more tokens than one launch's partials hold, and
	 * hd % 8 != 0 (the one-block-per-head fallback) */
	check_attention(1, 4999, 32, 8, 128, 0, 2, 16);
	check_attention(1, 700, 32, 8, 128, 0, 6, 16);
	check_attention(2, 3000, 16, 4, 64, 1000, 3, 32);
	check_attention(5, 1200, 32, 8, 128, 0, 2, 16);
	check_attention(1, 2500, 16, 1, 128, 0, 2, 16);
	check_attention(3, 100, 12, 1, 64, 0, 1, 16);
	check_attention(1, 600, 8, 2, 256, 0, 1, 16);
	check_attention(300, 0, 32, 8, 128, 0, 1, 16);
	check_attention(3, 40, 4, 2, 20, 0, 2, 16);
	/* one launch with the merge in the part kernel: tokens with one
	 * split (the block writes out itself) and with two in one launch,
	 * 8..9 splits, a group of 4 heads (G 4) with window-limited splits,
	 * hd 256 with a full group of 8 (two output vectors per thread) with
	 * one split and with 19, and decode batches of 64 and 40 sequences
	 * (T >= 64 but few tokens per sequence: split-K, not the flash
	 * kernel, which would make one pass per sequence per query tile) */
	check_attention(1, 20, 32, 8, 128, 0, 1, 16);
	check_attention(7, 28, 32, 8, 128, 0, 8, 16);
	check_attention(48, 230, 8, 2, 128, 0, 1, 16);
	check_attention(1, 900, 16, 4, 128, 100, 5, 16);
	check_attention(1, 10, 16, 2, 256, 0, 1, 16);
	check_attention(1, 600, 16, 2, 256, 0, 1, 16);
	check_attention(1, 300, 32, 8, 128, 0, 64, 16);
	check_attention(2, 150, 8, 2, 64, 0, 40, 16);
	/* flash-attention prefill (tensor cores, 64-token query tiles) once
	 * the op routes long batches to it: one sequence from position 0
	 * (Qwen3-8B heads), two sequences of 200 (a tile straddles them), a
	 * chunk at position 300 (the diagonal crosses key tiles), a window
	 * (tiles masked from below), hd 64 with block size 7, MQA, and three
	 * sequences with a window and odd block size at hd 64 */
	check_attention(256, 0, 32, 8, 128, 0, 1, 16);
	check_attention(200, 0, 32, 8, 128, 0, 2, 16);
	check_attention(64, 300, 32, 8, 128, 0, 1, 16);
	check_attention(150, 100, 16, 4, 128, 48, 1, 16);
	check_attention(130, 5, 8, 2, 64, 0, 2, 7);
	check_attention(96, 0, 8, 1, 128, 0, 1, 16);
	check_attention(70, 20, 8, 4, 64, 30, 3, 5);
	/* and the short chunks it takes since the threshold is 16 tokens:
	 * the 24-token tail of a prompt whose first 2,000 tokens came from
	 * the prefix cache, 16 tokens from position 0, and two sequences of
	 * 20 tokens at hd 64 */
	check_attention(24, 2000, 32, 8, 128, 0, 1, 16);
	check_attention(16, 0, 32, 8, 128, 0, 1, 16);
	check_attention(20, 100, 8, 2, 64, 0, 2, 16);
}

/* A quantized cache (kvq.h) on both sides: nrows rows of rb bytes, the
 * host's in h, the GPU's at d. */
struct qbuf {
	uint8_t *h;
	void *d;
	int64_t nrows, rb;
};

static struct qbuf mkq(enum atlas_kv_dtype kvf, int64_t nrows, int64_t Hkv, int64_t hd)
{
	struct qbuf b = {NULL, NULL, nrows, atlas_kv_row_bytes(kvf, 2, Hkv, hd)};
	b.h = calloc((size_t)(nrows * b.rb), 1);
	b.d = gpu->alloc(gpu, (size_t)(nrows * b.rb));
	gpu->upload(gpu, b.d, b.h, (size_t)(nrows * b.rb));
	return b;
}

static void freeq(struct qbuf *b)
{
	free(b->h);
	gpu->free(gpu, b->d);
}

/* The GPU's cache against the host's: bytes that differ, and the
 * dequantized rows' relative L2 difference. exact: every byte must
 * match (the store kernels write the host reference's bytes for the
 * same BF16 inputs); else the inputs went through different norm and
 * rope arithmetic, so a code may flip to its neighbour where a value
 * sits near a rounding boundary: at most 10% of the bytes may differ
 * and the rows must agree to 5e-2 (one fp8 step is ~6% of a value, one
 * q4 level ~30% of the block's RMS; a wrong scale, layout or rotation
 * moves them by 100%). On the H100 the norm cases gave 2-6% of bytes
 * and 0.012-0.030. */
static void compare_q(const char *what, enum atlas_kv_dtype kvf, const struct qbuf *b,
		      int64_t Hkv, int64_t hd, int exact)
{
	size_t n = (size_t)(b->nrows * b->rb);
	uint8_t *g = malloc(n);
	int rc = gpu->download(gpu, g, b->d, n);
	int64_t diff = 0;
	for (size_t i = 0; i < n && !rc; i++)
		diff += g[i] != b->h[i];
	double d2 = 0, r2 = 0;
	float *x = malloc((size_t)hd * 4), *y = malloc((size_t)hd * 4);
	for (int64_t r = 0; r < b->nrows && !rc; r++)
		for (int64_t h = 0; h < Hkv; h++) {
			atlas_kv_dequant_head(kvf, g + r * b->rb, Hkv, hd, h, x);
			atlas_kv_dequant_head(kvf, b->h + r * b->rb, Hkv, hd, h, y);
			for (int64_t i = 0; i < hd; i++) {
				d2 += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
				r2 += (double)y[i] * y[i];
			}
		}
	double l2 = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
	int ok = !rc && (exact ? diff == 0 : l2 < 5e-2 && diff * 10 <= (int64_t)n);
	printf("# %-58s bytes_differ %-8lld rel_l2 %-10.3g %s\n", what, (long long)diff, l2,
	       ok ? "ok" : "FAIL");
	CHECK(ok);
	free(g);
	free(x);
	free(y);
}

/* kv_store and paged attention over a cache in format kvf: nseq
 * sequences of pos0 + T tokens (all stored; the last T attend), blocks
 * of B rows in scrambled order. The stored bytes must be the host's;
 * the attention must match the CPU's over the same cache (both read the
 * same dequantized rows) and repeat bit for bit; with inv, batch
 * invariance as in check_attention. */
static void check_attention_q(enum atlas_kv_dtype kvf, int64_t T, int64_t pos0, int64_t H,
			      int64_t Hkv, int64_t hd, int64_t window, int64_t nseq, int64_t B,
			      int inv)
{
	int64_t S = pos0 + T, nb = (S + B - 1) / B, row = Hkv * hd, slots = nseq * nb * B;
	int64_t nt = nseq * T, na = nseq * S;
	struct qbuf kc = mkq(kvf, slots, Hkv, hd), vc = mkq(kvf, slots, Hkv, hd);
	/* K spread per channel (a few channels 8x the others, as real keys
	 * have), V plain */
	struct buf k = mkbuf(na * row, 1.0f), v = mkbuf(na * row, 1.0f);
	for (int64_t i = 0; i < na * row; i++)
		if ((i % hd) % 37 == 5)
			k.h[i] = atlas_bf16_to_f32(atlas_f32_to_bf16(k.h[i] * 8.0f));
	{
		uint16_t *t = malloc((size_t)(na * row) * 2);
		for (int64_t i = 0; i < na * row; i++)
			t[i] = atlas_f32_to_bf16(k.h[i]);
		gpu->upload(gpu, k.d, t, (size_t)(na * row) * 2);
		free(t);
	}
	struct buf q = mkbuf(nt * H * hd, 1.0f), o = mkbuf(nt * H * hd, 1.0f);
	int32_t *tab = malloc((size_t)(nseq * nb) * 4), *seq = malloc((size_t)nt * 4);
	int32_t *pos = malloc((size_t)nt * 4), *slot = malloc((size_t)na * 4);
	int64_t mul = 5;
	for (;; mul++) {
		int64_t a = mul, b = nseq * nb;
		while (b) {
			int64_t r = a % b;
			a = b, b = r;
		}
		if (a == 1)
			break;
	}
	for (int64_t s = 0; s < nseq; s++)
		for (int64_t i = 0; i < nb; i++)
			tab[s * nb + i] = (int32_t)(((i * nseq + s) * mul + 3) % (nseq * nb));
	for (int64_t s = 0; s < nseq; s++) {
		for (int64_t p = 0; p < S; p++)
			slot[s * S + p] = (int32_t)(tab[s * nb + p / B] * B + p % B);
		for (int64_t t = 0; t < T; t++) {
			seq[s * T + t] = (int32_t)s;
			pos[s * T + t] = (int32_t)(pos0 + t);
		}
	}
	int32_t *dtab = gpu->alloc(gpu, (size_t)(nseq * nb) * 4), *dseq = gpu->alloc(gpu, (size_t)nt * 4);
	int32_t *dpos = gpu->alloc(gpu, (size_t)nt * 4), *dslot = gpu->alloc(gpu, (size_t)na * 4);
	gpu->upload(gpu, dtab, tab, (size_t)(nseq * nb) * 4);
	gpu->upload(gpu, dseq, seq, (size_t)nt * 4);
	gpu->upload(gpu, dpos, pos, (size_t)nt * 4);
	gpu->upload(gpu, dslot, slot, (size_t)na * 4);
	cpu->kv_dtype = kvf;
	gpu->kv_dtype = kvf;
	char what[160];
	CHECK_EQ_INT(cpu->kv_store(cpu, kc.h, vc.h, k.h, v.h, slot, na, Hkv, hd), 0);
	CHECK_EQ_INT(gpu->kv_store(gpu, kc.d, vc.d, k.d, v.d, dslot, na, Hkv, hd), 0);
	snprintf(what, sizeof(what), "kv_store %s T=%lld Hkv=%lld hd=%lld K", atlas_kv_dtype_name(kvf),
		 (long long)na, (long long)Hkv, (long long)hd);
	compare_q(what, kvf, &kc, Hkv, hd, 1);
	what[strlen(what) - 1] = 'V';
	compare_q(what, kvf, &vc, Hkv, hd, 1);
	struct atlas_kv_batch hb = {seq, pos, tab, nseq, nb, B, S};
	struct atlas_kv_batch db = {dseq, dpos, dtab, nseq, nb, B, S};
	float *ref = malloc((size_t)(nt * H * hd) * 4);
	float scale = 1.0f / sqrtf((float)hd);
	poison(&o);
	CHECK_EQ_INT(cpu->attention(cpu, ref, q.h, kc.h, vc.h, &hb, nt, H, Hkv, hd, window, scale), 0);
	CHECK_EQ_INT(gpu->attention(gpu, o.d, q.d, kc.d, vc.d, &db, nt, H, Hkv, hd, window, scale), 0);
	snprintf(what, sizeof(what), "attention %s T=%lld pos0=%lld H=%lld Hkv=%lld hd=%lld w=%lld seqs=%lld%s",
		 atlas_kv_dtype_name(kvf), (long long)T, (long long)pos0, (long long)H, (long long)Hkv,
		 (long long)hd, (long long)window, (long long)nseq, inv ? " inv" : "");
	compare(what, &o, ref, nt * H * hd);
	uint16_t *o1 = malloc((size_t)(nt * H * hd) * 2), *o2 = malloc((size_t)(nt * H * hd) * 2);
	CHECK_EQ_INT(gpu->download(gpu, o1, o.d, (size_t)(nt * H * hd) * 2), 0);
	CHECK_EQ_INT(gpu->attention(gpu, o.d, q.d, kc.d, vc.d, &db, nt, H, Hkv, hd, window, scale), 0);
	CHECK_EQ_INT(gpu->download(gpu, o2, o.d, (size_t)(nt * H * hd) * 2), 0);
	CHECK(memcmp(o1, o2, (size_t)(nt * H * hd) * 2) == 0);
	if (inv) {
		gpu->batch_invariant = true;
		CHECK_EQ_INT(gpu->attention(gpu, o.d, q.d, kc.d, vc.d, &db, nt, H, Hkv, hd, window,
					    scale),
			     0);
		CHECK_EQ_INT(gpu->download(gpu, o1, o.d, (size_t)(nt * H * hd) * 2), 0);
		int64_t diff = 0;
		for (int64_t i = 0; i < nt; i++) {
			struct atlas_kv_batch d1 = {dseq + i, dpos + i, dtab, nseq, nb, B, pos[i] + 1};
			CHECK_EQ_INT(gpu->attention(gpu, o.d, (const char *)q.d + (size_t)(i * H * hd) * 2,
						    kc.d, vc.d, &d1, 1, H, Hkv, hd, window, scale),
				     0);
			CHECK_EQ_INT(gpu->download(gpu, o2, o.d, (size_t)(H * hd) * 2), 0);
			diff += memcmp(o2, o1 + i * H * hd, (size_t)(H * hd) * 2) != 0;
		}
		gpu->batch_invariant = false;
		printf("# invariant %s: %lld of %lld tokens differ from alone\n", what,
		       (long long)diff, (long long)nt);
		CHECK(diff == 0);
	}
	cpu->kv_dtype = ATLAS_KV_AUTO;
	gpu->kv_dtype = ATLAS_KV_AUTO;
	free(o1);
	free(o2);
	freeq(&kc);
	freeq(&vc);
	freebuf(&k);
	freebuf(&v);
	freebuf(&q);
	freebuf(&o);
	free(tab);
	free(seq);
	free(pos);
	free(slot);
	free(ref);
	gpu->free(gpu, dtab);
	gpu->free(gpu, dseq);
	gpu->free(gpu, dpos);
	gpu->free(gpu, dslot);
}

/* The fp8 and q4 caches: stores, decode steps (one split and split-K
 * with the merge), several sequences, GQA 32/8 and MQA, windows, hd
 * 64, 128 and 256 (q4's whole range; fp8 also 96 and 16), prefill
 * chunks (the split-K kernel takes them too: the flash kernel reads
 * BF16 only), odd block sizes, and batch invariance. */
static void test_kvq(void)
{
	static const enum atlas_kv_dtype fmts[] = {ATLAS_KV_FP8, ATLAS_KV_Q4};
	for (int f = 0; f < 2; f++) {
		enum atlas_kv_dtype kvf = fmts[f];
		check_attention_q(kvf, 1, 0, 8, 2, 64, 0, 1, 16, 0);
		check_attention_q(kvf, 1, 300, 32, 8, 128, 0, 4, 16, 0);
		check_attention_q(kvf, 1, 4999, 32, 8, 128, 0, 2, 16, 1);
		check_attention_q(kvf, 2, 3000, 16, 4, 64, 1000, 3, 32, 0);
		check_attention_q(kvf, 1, 2500, 16, 1, 128, 0, 2, 16, 0);
		check_attention_q(kvf, 3, 100, 12, 1, 64, 0, 1, 16, 0);
		check_attention_q(kvf, 1, 600, 8, 2, 256, 0, 1, 16, 1);
		check_attention_q(kvf, 1, 300, 32, 8, 128, 0, 64, 16, 0);
		check_attention_q(kvf, 7, 28, 32, 8, 128, 0, 8, 16, 0);
		check_attention_q(kvf, 200, 0, 32, 8, 128, 0, 2, 16, 1);
		check_attention_q(kvf, 70, 20, 8, 4, 64, 30, 3, 5, 1);
		/* prefill chunks outside batch-invariant mode: the flash kernel
		 * over the rows dequantized to BF16 (atlas_kv_dequant; hd 64 and
		 * 128), a chunk after 2,000 cached tokens, two sequences of 150
		 * at hd 64 with odd blocks, a window, and hd 256 (the split-K
		 * kernel: the flash kernel takes 64 and 128 only) */
		check_attention_q(kvf, 256, 0, 32, 8, 128, 0, 1, 16, 0);
		check_attention_q(kvf, 64, 2000, 32, 8, 128, 0, 1, 16, 0);
		check_attention_q(kvf, 150, 5, 8, 2, 64, 0, 2, 7, 0);
		check_attention_q(kvf, 150, 100, 16, 4, 128, 48, 1, 16, 0);
		check_attention_q(kvf, 40, 30, 8, 2, 256, 0, 1, 16, 0);
	}
	check_attention_q(ATLAS_KV_FP8, 2, 2000, 8, 8, 96, 0, 2, 16, 0);
	check_attention_q(ATLAS_KV_FP8, 9, 13, 4, 1, 16, 6, 3, 7, 0);
	/* qk_rope_store into a quantized cache (the fused kernel's _q form):
	 * q as the plain ops give it, the cache rows as the host stores the
	 * BF16-rounded roped k */
	static const int64_t rshapes[][4] = {/* T, H, Hkv, hd */
					     {1, 32, 8, 128}, {5, 4, 2, 64}, {3, 16, 1, 256},
					     {130, 8, 2, 64}};
	char what[160];
	for (int f = 0; f < 2; f++)
		for (size_t sh = 0; sh < sizeof(rshapes) / sizeof(rshapes[0]); sh++)
			for (int norm = 0; norm < 2; norm++) {
				enum atlas_kv_dtype kvf = fmts[f];
				int64_t T = rshapes[sh][0], H = rshapes[sh][1], Hkv = rshapes[sh][2];
				int64_t hd = rshapes[sh][3], row = Hkv * hd, slots = 2 * T + 3;
				int32_t *pos = malloc((size_t)T * 4), *slot = malloc((size_t)T * 4);
				int32_t *dpos = gpu->alloc(gpu, (size_t)T * 4);
				int32_t *dslot = gpu->alloc(gpu, (size_t)T * 4);
				float *freq = malloc((size_t)hd / 2 * 4);
				float *dfreq = gpu->alloc(gpu, (size_t)hd / 2 * 4);
				for (int64_t t = 0; t < T; t++) {
					pos[t] = (int32_t)(t * 53 + 11);
					slot[t] = (int32_t)(slots - 1 - 2 * t);
				}
				for (int64_t i = 0; i < hd / 2; i++)
					freq[i] = 1.0f / powf(1e6f, (float)(2 * i) / (float)hd);
				gpu->upload(gpu, dpos, pos, (size_t)T * 4);
				gpu->upload(gpu, dslot, slot, (size_t)T * 4);
				gpu->upload(gpu, dfreq, freq, (size_t)hd / 2 * 4);
				struct buf q = mkbuf(T * H * hd, 2.0f), k = mkbuf(T * row, 2.0f);
				struct buf v = mkbuf(T * row, 1.0f);
				struct qbuf kc = mkq(kvf, slots, Hkv, hd), vc = mkq(kvf, slots, Hkv, hd);
				struct wbuf qn = mkw(ATLAS_DTYPE_BF16, hd, 1.0f);
				struct wbuf kn = mkw(ATLAS_DTYPE_BF16, hd, 1.0f);
				gpu->kv_dtype = kvf;
				cpu->kv_dtype = kvf;
				CHECK_EQ_INT(gpu->qk_rope_store(gpu, q.d, k.d, v.d, norm ? qn.d : NULL,
								norm ? kn.d : NULL, ATLAS_DTYPE_BF16,
								1e-6f, dpos, dfreq, kc.d, vc.d, dslot, T,
								H, Hkv, hd),
					     0);
				if (norm) {
					CHECK_EQ_INT(cpu->rmsnorm(cpu, q.h, q.h, qn.h, ATLAS_DTYPE_BF16,
								  T * H, hd, 1e-6f),
						     0);
					CHECK_EQ_INT(cpu->rmsnorm(cpu, k.h, k.h, kn.h, ATLAS_DTYPE_BF16,
								  T * Hkv, hd, 1e-6f),
						     0);
				}
				CHECK_EQ_INT(cpu->rope(cpu, q.h, pos, freq, T, H, hd), 0);
				CHECK_EQ_INT(cpu->rope(cpu, k.h, pos, freq, T, Hkv, hd), 0);
				for (int64_t i = 0; i < T * row; i++)
					k.h[i] = atlas_bf16_to_f32(atlas_f32_to_bf16(k.h[i]));
				CHECK_EQ_INT(cpu->kv_store(cpu, kc.h, vc.h, k.h, v.h, slot, T, Hkv, hd), 0);
				snprintf(what, sizeof(what), "qk_rope_store %s T=%lld H=%lld Hkv=%lld hd=%lld%s",
					 atlas_kv_dtype_name(kvf), (long long)T, (long long)H,
					 (long long)Hkv, (long long)hd, norm ? " norm" : "");
				compare(what, &q, q.h, T * H * hd);
				compare_q(what, kvf, &kc, Hkv, hd, 0);
				compare_q(what, kvf, &vc, Hkv, hd, 1);
				gpu->kv_dtype = ATLAS_KV_AUTO;
				cpu->kv_dtype = ATLAS_KV_AUTO;
				freebuf(&q);
				freebuf(&k);
				freebuf(&v);
				freeq(&kc);
				freeq(&vc);
				freew(&qn);
				freew(&kn);
				free(pos);
				free(slot);
				free(freq);
				gpu->free(gpu, dpos);
				gpu->free(gpu, dslot);
				gpu->free(gpu, dfreq);
			}
	/* a head size the format cannot hold is refused, not misread */
	gpu->kv_dtype = ATLAS_KV_Q4;
	CHECK(gpu->kv_store(gpu, NULL, NULL, NULL, NULL, NULL, 1, 1, 96) != 0);
	gpu->kv_dtype = ATLAS_KV_AUTO;
}

/* Batch-invariant mode: attention of a batch (prefill chunks, several
 * sequences, windows) gives each token the bits it gets alone; the
 * result is also checked against the CPU as in test_attention. */
static void test_attention_inv(void)
{
	gpu->batch_invariant = true;
	att_inv = 1;
	check_attention(300, 0, 32, 8, 128, 0, 1, 16);
	check_attention(64, 700, 32, 8, 128, 0, 2, 16);
	check_attention(40, 2000, 16, 4, 64, 300, 2, 16);
	check_attention(1, 5000, 32, 8, 128, 0, 3, 16);
	check_attention(20, 100, 8, 2, 256, 0, 2, 7);
	/* more sequences, a context of many aligned splits, odd block
	 * sizes */
	check_attention(24, 100, 32, 8, 128, 0, 3, 16);
	check_attention(100, 1000, 16, 2, 128, 0, 1, 7);
	check_attention(17, 129, 8, 8, 64, 0, 2, 16);
	att_inv = 0;
	gpu->batch_invariant = false;
}

/* Device sampling picks what the host reference picks for the same
 * logits (BF16-representable) and the same uniform. */
static void test_sample(void)
{
	const int64_t V = 5000, n = 6;
	struct buf l = mkbuf(n * V, 4.0f);
	float *dl = gpu->alloc(gpu, (size_t)(n * V) * 4); /* the sampler reads FP32 logits */
	gpu->upload(gpu, dl, l.h, (size_t)(n * V) * 4);
	struct atlas_sample_args a[6] = {
		{0, 0, 1, 0, 0.5f, NULL},	 {1.0f, 0, 1, 0, 0.3f, NULL},
		{0.7f, 40, 1, 0, 0.9f, NULL},	 {1.0f, 0, 0.9f, 0, 0.42f, NULL},
		{1.2f, 0, 1, 0.05f, 0.77f, NULL}, {0.8f, 20, 0.95f, 0.02f, 0.01f, NULL},
	};
	int32_t want[6], got[6], *dids = gpu->alloc(gpu, sizeof(got));
	CHECK_EQ_INT(cpu->sample(cpu, want, l.h, n, V, a), 0);
	CHECK_EQ_INT(gpu->sample(gpu, dids, dl, n, V, a), 0);
	CHECK_EQ_INT(gpu->download(gpu, got, dids, sizeof(got)), 0);
	for (int i = 0; i < n; i++) {
		printf("# sample row %d (T=%.2f k=%d p=%.2f min_p=%.2f u=%.2f): cpu %d gpu %d %s\n", i,
		       a[i].temperature, a[i].top_k, a[i].top_p, a[i].min_p, a[i].u, want[i], got[i],
		       want[i] == got[i] ? "ok" : "FAIL");
		CHECK_EQ_INT(got[i], want[i]);
	}
	/* grammar masks (atlas_mask_logits first): rows 0, 2, 3 and 5 keep
	 * about one token in ten, rows 1 and 4 stay unmasked; the device picks
	 * what the host picks, and only allowed tokens (the logits buffer is
	 * uploaded again: the mask writes -inf into it) */
	const int64_t W = (V + 31) / 32;
	uint32_t *mk = calloc((size_t)(4 * W), 4);
	uint64_t st = 12345;
	for (int64_t i = 0; i < 4 * W * 32; i++) {
		st = st * 6364136223846793005ull + 1442695040888963407ull;
		if ((st >> 33) % 10 == 0)
			mk[i / 32] |= 1u << (i % 32);
	}
	a[0].mask = mk, a[2].mask = mk + W, a[3].mask = mk + 2 * W, a[5].mask = mk + 3 * W;
	gpu->upload(gpu, dl, l.h, (size_t)(n * V) * 4);
	CHECK_EQ_INT(cpu->sample(cpu, want, l.h, n, V, a), 0);
	CHECK_EQ_INT(gpu->sample(gpu, dids, dl, n, V, a), 0);
	CHECK_EQ_INT(gpu->download(gpu, got, dids, sizeof(got)), 0);
	for (int i = 0; i < n; i++) {
		printf("# masked sample row %d: cpu %d gpu %d %s\n", i, want[i], got[i],
		       want[i] == got[i] ? "ok" : "FAIL");
		CHECK_EQ_INT(got[i], want[i]);
		if (a[i].mask)
			CHECK(a[i].mask[got[i] / 32] >> (got[i] % 32) & 1);
	}
	free(mk);
	freebuf(&l);
	gpu->free(gpu, dl);
	gpu->free(gpu, dids);
}

/* Rows that are all greedy take atlas_argmax (many blocks a row): the
 * host's pick on rows with ties, NaN, -0 against +0, an all-NaN row, a
 * row starting off 16-byte alignment and a vocabulary of real size; run
 * twice, since the kernel leaves its counters for the next launch. */
static void test_sample_greedy(void)
{
	const int64_t Vs[] = {151936, 5003, 7};
	for (size_t vi = 0; vi < sizeof(Vs) / sizeof(Vs[0]); vi++) {
		const int64_t V = Vs[vi], n = 6;
		float *h = rnd_bf(n * V, 4.0f);
		h[1 * V + V / 3] = h[1 * V + V - 1] = 9.0f; /* a tie: the lower wins */
		for (int64_t i = 1; i < V; i++) /* NaN all over (not first: the host */
			h[2 * V + i] = NAN;	/* reference keeps a NaN it starts with) */
		h[2 * V] = -2.0f;
		h[2 * V + V / 2] = -1.0f;
		for (int64_t i = 0; i < V; i++) /* -0 and +0 tie at the top */
			h[3 * V + i] = -1.0f;
		h[3 * V + V - 1] = 0.0f;
		h[3 * V + 1] = -0.0f;
		for (int64_t i = 0; i < V; i++)
			h[4 * V + i] = NAN;
		h[5 * V] = 100.0f; /* the first element wins */
		float *dl = gpu->alloc(gpu, (size_t)(n * V) * 4);
		gpu->upload(gpu, dl, h, (size_t)(n * V) * 4);
		struct atlas_sample_args a[6];
		memset(a, 0, sizeof(a)); /* greedy */
		int32_t want[6], got[6], *dids = gpu->alloc(gpu, sizeof(got));
		CHECK_EQ_INT(cpu->sample(cpu, want, h, n, V, a), 0);
		for (int rep = 0; rep < 2; rep++) {
			CHECK_EQ_INT(gpu->sample(gpu, dids, dl, n, V, a), 0);
			CHECK_EQ_INT(gpu->download(gpu, got, dids, sizeof(got)), 0);
			for (int i = 0; i < n; i++) {
				if (got[i] != want[i])
					printf("# greedy V=%lld row %d: cpu %d gpu %d FAIL\n", (long long)V,
					       i, want[i], got[i]);
				CHECK_EQ_INT(got[i], want[i]);
			}
		}
		printf("# greedy V=%lld: rows %d %d %d %d %d %d\n", (long long)V, want[0], want[1],
		       want[2], want[3], want[4], want[5]);
		free(h);
		gpu->free(gpu, dl);
		gpu->free(gpu, dids);
	}
}

/* The output head in FP32: compared element for element at FP32 rounding. */
static void test_logits(void)
{
	/* the last two reach the tensor-core GEMM: 128 x 128 tiles with
	 * tails; 128 x 256 tiles, T/N/K tails and a stage ring that wraps */
	static const int64_t shapes[][3] = {{1, 1000, 64},    {3, 5003, 128},   {40, 1088, 64},
					    {1, 151936, 1024}, {77, 1000, 520}, {1100, 3900, 328}};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int64_t T = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
		struct buf x = mkbuf(T * K, 1.0f);
		struct wbuf w = mkw(ATLAS_DTYPE_BF16, N * K, 4.0f / sqrtf((float)K));
		float *ref = malloc((size_t)(T * N) * 4), *got = malloc((size_t)(T * N) * 4);
		float *d = gpu->alloc(gpu, (size_t)(T * N) * 4);
		CHECK_EQ_INT(cpu->logits(cpu, ref, x.h, w.h, ATLAS_DTYPE_BF16, T, N, K), 0);
		CHECK_EQ_INT(gpu->logits(gpu, d, x.d, w.d, ATLAS_DTYPE_BF16, T, N, K), 0);
		CHECK_EQ_INT(gpu->download(gpu, got, d, (size_t)(T * N) * 4), 0);
		double maxd = 0, maxr = 0;
		for (int64_t i = 0; i < T * N; i++) {
			double e = fabs((double)got[i] - ref[i]);
			maxd = e > maxd || isnan(e) ? e : maxd;
			maxr = fmax(maxr, fabs(ref[i]));
		}
		printf("# %-58s max_rel %-10.3g %s\n", "logits (FP32 out)", maxd / maxr,
		       maxd / maxr < 1e-5 ? "ok" : "FAIL");
		CHECK(maxd / maxr < 1e-5);
		freebuf(&x);
		freew(&w);
		free(ref);
		free(got);
		gpu->free(gpu, d);
	}
}

/* Random fill: in range, deterministic per seed, different across seeds,
 * mean near the middle, in all three dtypes. */
static void test_fill(void)
{
	const int64_t n = 100003;
	for (size_t d = 0; d < 3; d++) {
		size_t es = atlas_dtype_size(wdts[d]);
		void *a = gpu->alloc(gpu, (size_t)n * es), *b = gpu->alloc(gpu, (size_t)n * es);
		unsigned char *ha = malloc((size_t)n * es), *hb = malloc((size_t)n * es);
		CHECK_EQ_INT(gpu->fill_random(gpu, a, wdts[d], n, 42, -0.5f, 1.5f), 0);
		CHECK_EQ_INT(gpu->fill_random(gpu, b, wdts[d], n, 42, -0.5f, 1.5f), 0);
		CHECK_EQ_INT(gpu->download(gpu, ha, a, (size_t)n * es), 0);
		CHECK_EQ_INT(gpu->download(gpu, hb, b, (size_t)n * es), 0);
		CHECK(memcmp(ha, hb, (size_t)n * es) == 0);
		double sum = 0;
		int in_range = 1;
		for (int64_t i = 0; i < n; i++) {
			float v = wdts[d] == ATLAS_DTYPE_BF16 ? atlas_bf16_to_f32(((uint16_t *)ha)[i])
				: wdts[d] == ATLAS_DTYPE_F16 ? atlas_f16_to_f32(((uint16_t *)ha)[i])
				: ((float *)ha)[i];
			in_range &= v >= -0.5f && v <= 1.5f;
			sum += v;
		}
		CHECK(in_range);
		CHECK_NEAR(sum / (double)n, 0.5, 0.02);
		CHECK_EQ_INT(gpu->fill_random(gpu, b, wdts[d], n, 43, -0.5f, 1.5f), 0);
		CHECK_EQ_INT(gpu->download(gpu, hb, b, (size_t)n * es), 0);
		CHECK(memcmp(ha, hb, (size_t)n * es) != 0);
		printf("# fill_random %-46s mean %.4f %s\n", wname(wdts[d]), sum / (double)n,
		       in_range ? "ok" : "FAIL");
		gpu->free(gpu, a);
		gpu->free(gpu, b);
		free(ha);
		free(hb);
	}
}

/* A recorded matmul + add replayed after its input changed gives the
 * bits an eager run gives; and recording runs nothing. */
static void test_graph(void)
{
	const int64_t T = 3, N = 1000, K = 512;
	struct buf x = mkbuf(T * K, 1.0f), o = mkbuf(T * N, 1.0f), y = mkbuf(T * N, 1.0f);
	struct wbuf w = mkw(ATLAS_DTYPE_BF16, N * K, 1.0f / sqrtf((float)K));
	uint16_t *a = malloc((size_t)(T * N) * 2), *b = malloc((size_t)(T * N) * 2);
	poison(&o);
	CHECK_EQ_INT(gpu->capture_begin(gpu), 0);
	CHECK_EQ_INT(gpu->matmul(gpu, o.d, x.d, w.d, NULL, ATLAS_DTYPE_BF16, T, N, K), 0);
	CHECK_EQ_INT(gpu->add(gpu, o.d, y.d, T * N), 0);
	void *g = gpu->capture_end(gpu);
	CHECK(g != NULL);
	CHECK_EQ_INT(gpu->download(gpu, a, o.d, (size_t)(T * N) * 2), 0);
	CHECK_EQ_INT(a[0], 0x7fc0); /* still the poison: nothing ran */
	struct buf x2 = mkbuf(T * K, 1.0f);
	CHECK_EQ_INT(gpu->copy(gpu, x.d, x2.d, (size_t)(T * K) * 2), 0);
	CHECK_EQ_INT(gpu->replay(gpu, g), 0);
	CHECK_EQ_INT(gpu->download(gpu, a, o.d, (size_t)(T * N) * 2), 0);
	CHECK_EQ_INT(gpu->matmul(gpu, o.d, x2.d, w.d, NULL, ATLAS_DTYPE_BF16, T, N, K), 0);
	CHECK_EQ_INT(gpu->add(gpu, o.d, y.d, T * N), 0);
	CHECK_EQ_INT(gpu->download(gpu, b, o.d, (size_t)(T * N) * 2), 0);
	CHECK(memcmp(a, b, (size_t)(T * N) * 2) == 0);
	printf("# %-58s %s\n", "graph replay equals eager", memcmp(a, b, (size_t)(T * N) * 2) ? "FAIL" : "ok");
	gpu->graph_free(gpu, g);
	freebuf(&x);
	freebuf(&x2);
	freebuf(&o);
	freebuf(&y);
	freew(&w);
	free(a);
	free(b);
}

/* The fused ops against the plain CPU ops they stand for: matmul_multi
 * (q, k, v), matmul_swiglu (gate, up, swiglu) and qk_rope_store (q/k
 * norm, rope, kv_store), on the GEMV path (T <= 8) and the GEMM path. */
static void test_fused(void)
{
	static const int64_t mshapes[][4] = {/* T, N0, N1, K */
					     {1, 4096, 1024, 4096}, {3, 256, 64, 520},
					     {8, 1000, 77, 129},    {1, 2048, 512, 1024},
					     {70, 512, 128, 256},   {30, 600, 40, 264},
					     {1, 300, 40, 136},
					     /* one wgmma launch for all three, split
					      * along K (tiles leave SMs idle) */
					     {32, 1024, 256, 2048}, {9, 520, 72, 4096},
					     /* 3 K ranges of an odd 9 x 77: the next
					      * product's partials need padding to
					      * stay 16-byte aligned */
					     {9, 77, 40, 3072}};
	char what[128];
	/* plain matmuls at decode sizes, with K and N tails: the tensor-core
	 * GEMV (T <= 16; every T in test_invariant) and from T = 17 the wgmma
	 * GEMM split along K (2 to 16 ranges); the rest of the decode shapes
	 * are in test_matmul */
	static const int64_t tshapes[][3] = {{2, 1000, 520},  {12, 300, 136}, {20, 4096, 1024},
					     {33, 77, 2056},  {48, 2048, 1024}, {64, 129, 4104},
					     {7, 151, 12288}, {1, 6144, 4096},
					     /* T = 1: fewer rows than SMs, a K tail, a
					      * large N */
					     {1, 5, 136}, {1, 1500, 264}, {1, 110000, 64}};
	for (size_t s = 0; s < sizeof(tshapes) / sizeof(tshapes[0]); s++)
		for (int bias = 0; bias < 2; bias++)
			check_matmul(tshapes[s][0], tshapes[s][1], tshapes[s][2], ATLAS_DTYPE_BF16, bias,
				     " (gemv_tc)");
	for (size_t s = 0; s < sizeof(mshapes) / sizeof(mshapes[0]); s++)
		for (int bias = 0; bias < 2; bias++) {
			int64_t T = mshapes[s][0], K = mshapes[s][3];
			int64_t Ns[3] = {mshapes[s][1], mshapes[s][2], mshapes[s][2]};
			struct buf x = mkbuf(T * K, 1.0f), o[3];
			struct wbuf w[3], b[3];
			void *outs[3];
			const void *ws[3], *bs[3];
			for (int i = 0; i < 3; i++) {
				o[i] = mkbuf(T * Ns[i], 1.0f);
				poison(&o[i]);
				w[i] = mkw(ATLAS_DTYPE_BF16, Ns[i] * K, 1.0f / sqrtf((float)K));
				b[i] = bias ? mkw(ATLAS_DTYPE_BF16, Ns[i], 0.5f) : (struct wbuf){0};
				outs[i] = o[i].d, ws[i] = w[i].d, bs[i] = bias ? b[i].d : NULL;
			}
			CHECK_EQ_INT(gpu->matmul_multi(gpu, 3, outs, x.d, ws, bs, ATLAS_DTYPE_BF16, T, Ns,
						       K),
				     0);
			for (int i = 0; i < 3; i++) {
				float *ref = malloc((size_t)(T * Ns[i]) * 4);
				CHECK_EQ_INT(cpu->matmul(cpu, ref, x.h, w[i].h, bias ? b[i].h : NULL,
							 ATLAS_DTYPE_BF16, T, Ns[i], K),
					     0);
				snprintf(what, sizeof(what), "matmul_multi[%d] T=%lld N=%lld K=%lld%s", i,
					 (long long)T, (long long)Ns[i], (long long)K, bias ? " bias" : "");
				compare(what, &o[i], ref, T * Ns[i]);
				free(ref);
				freebuf(&o[i]);
				freew(&w[i]);
				if (bias)
					freew(&b[i]);
			}
			freebuf(&x);
		}

	static const int64_t sshapes[][3] = {{1, 12288, 4096}, {2, 1000, 333}, {8, 3072, 1024},
					     {1, 77, 64},       {100, 384, 256}, {40, 1000, 512},
					     {1, 1000, 264},    {24, 3000, 4096}};
	for (size_t s = 0; s < sizeof(sshapes) / sizeof(sshapes[0]); s++) {
		int64_t T = sshapes[s][0], F = sshapes[s][1], K = sshapes[s][2];
		struct buf x = mkbuf(T * K, 1.0f), o = mkbuf(T * F, 1.0f), up = mkbuf(T * F, 1.0f);
		struct wbuf wg = mkw(ATLAS_DTYPE_BF16, F * K, 1.0f / sqrtf((float)K));
		struct wbuf wu = mkw(ATLAS_DTYPE_BF16, F * K, 1.0f / sqrtf((float)K));
		float *g = malloc((size_t)(T * F) * 4), *u = malloc((size_t)(T * F) * 4);
		poison(&o);
		CHECK_EQ_INT(gpu->matmul_swiglu(gpu, o.d, x.d, wg.d, wu.d, ATLAS_DTYPE_BF16, T, F, K,
						up.d),
			     0);
		CHECK_EQ_INT(cpu->matmul(cpu, g, x.h, wg.h, NULL, ATLAS_DTYPE_BF16, T, F, K), 0);
		CHECK_EQ_INT(cpu->matmul(cpu, u, x.h, wu.h, NULL, ATLAS_DTYPE_BF16, T, F, K), 0);
		CHECK_EQ_INT(cpu->swiglu(cpu, g, g, u, T, F), 0);
		snprintf(what, sizeof(what), "matmul_swiglu T=%lld F=%lld K=%lld", (long long)T,
			 (long long)F, (long long)K);
		compare(what, &o, g, T * F);
		free(g);
		free(u);
		freebuf(&x);
		freebuf(&o);
		freebuf(&up);
		freew(&wg);
		freew(&wu);
	}

	static const int64_t rshapes[][4] = {/* T, H, Hkv, hd */
					     {1, 32, 8, 128}, {5, 4, 2, 64}, {3, 16, 1, 256},
					     {130, 8, 2, 32}, {2, 6, 3, 20}};
	for (size_t s = 0; s < sizeof(rshapes) / sizeof(rshapes[0]); s++)
		for (int norm = 0; norm < 2; norm++) {
			int64_t T = rshapes[s][0], H = rshapes[s][1], Hkv = rshapes[s][2];
			int64_t hd = rshapes[s][3], row = Hkv * hd, slots = 2 * T + 3;
			int32_t *pos = malloc((size_t)T * 4), *slot = malloc((size_t)T * 4);
			int32_t *dpos = gpu->alloc(gpu, (size_t)T * 4);
			int32_t *dslot = gpu->alloc(gpu, (size_t)T * 4);
			float *freq = malloc((size_t)hd / 2 * 4);
			float *dfreq = gpu->alloc(gpu, (size_t)hd / 2 * 4);
			for (int64_t t = 0; t < T; t++) {
				pos[t] = (int32_t)(t * 53 + 11);
				slot[t] = (int32_t)(slots - 1 - 2 * t); /* distinct, scattered */
			}
			for (int64_t i = 0; i < hd / 2; i++)
				freq[i] = 1.0f / powf(1e6f, (float)(2 * i) / (float)hd);
			gpu->upload(gpu, dpos, pos, (size_t)T * 4);
			gpu->upload(gpu, dslot, slot, (size_t)T * 4);
			gpu->upload(gpu, dfreq, freq, (size_t)hd / 2 * 4);
			struct buf q = mkbuf(T * H * hd, 2.0f), k = mkbuf(T * row, 2.0f);
			struct buf v = mkbuf(T * row, 1.0f);
			struct buf kc = mkbuf(slots * row, 1.0f), vc = mkbuf(slots * row, 1.0f);
			struct wbuf qn = mkw(ATLAS_DTYPE_BF16, hd, 1.0f), kn = mkw(ATLAS_DTYPE_BF16, hd, 1.0f);
			CHECK_EQ_INT(gpu->qk_rope_store(gpu, q.d, k.d, v.d, norm ? qn.d : NULL,
							norm ? kn.d : NULL, ATLAS_DTYPE_BF16, 1e-6f, dpos,
							dfreq, kc.d, vc.d, dslot, T, H, Hkv, hd),
				     0);
			if (norm) {
				CHECK_EQ_INT(cpu->rmsnorm(cpu, q.h, q.h, qn.h, ATLAS_DTYPE_BF16, T * H, hd,
							  1e-6f),
					     0);
				CHECK_EQ_INT(cpu->rmsnorm(cpu, k.h, k.h, kn.h, ATLAS_DTYPE_BF16, T * Hkv,
							  hd, 1e-6f),
					     0);
			}
			CHECK_EQ_INT(cpu->rope(cpu, q.h, pos, freq, T, H, hd), 0);
			CHECK_EQ_INT(cpu->rope(cpu, k.h, pos, freq, T, Hkv, hd), 0);
			CHECK_EQ_INT(cpu->kv_store(cpu, kc.h, vc.h, k.h, v.h, slot, T, Hkv, hd), 0);
			snprintf(what, sizeof(what), "qk_rope_store T=%lld H=%lld Hkv=%lld hd=%lld%s",
				 (long long)T, (long long)H, (long long)Hkv, (long long)hd,
				 norm ? " norm" : "");
			compare(what, &q, q.h, T * H * hd);
			compare(what, &kc, kc.h, slots * row);
			compare(what, &vc, vc.h, slots * row);
			freebuf(&q);
			freebuf(&k);
			freebuf(&v);
			freebuf(&kc);
			freebuf(&vc);
			freew(&qn);
			freew(&kn);
			free(pos);
			free(slot);
			free(freq);
			gpu->free(gpu, dpos);
			gpu->free(gpu, dslot);
			gpu->free(gpu, dfreq);
		}
}

/* One product in batch-invariant mode for rows x[0..T) (T = 1: one row
 * alone): kind 0 matmul, 1 matmul with bias, 2 logits (FP32 out),
 * 3 matmul_multi (q, k, v: N, N/4, N/4 with biases), 4 matmul_swiglu.
 * out[i] gets product i's rows; es = bytes per element. */
static void inv_run(int kind, const void *x, const struct wbuf *w, const struct wbuf *b,
		    void *const *out, void *scratch, int64_t T, const int64_t *Ns, int64_t K)
{
	if (kind <= 1)
		CHECK_EQ_INT(gpu->matmul(gpu, out[0], x, w[0].d, kind ? b[0].d : NULL,
					 ATLAS_DTYPE_BF16, T, Ns[0], K),
			     0);
	else if (kind == 2)
		CHECK_EQ_INT(gpu->logits(gpu, out[0], x, w[0].d, ATLAS_DTYPE_BF16, T, Ns[0], K), 0);
	else if (kind == 3) {
		const void *ws[3] = {w[0].d, w[1].d, w[2].d}, *bs[3] = {b[0].d, b[1].d, b[2].d};
		CHECK_EQ_INT(gpu->matmul_multi(gpu, 3, out, x, ws, bs, ATLAS_DTYPE_BF16, T, Ns, K), 0);
	} else
		CHECK_EQ_INT(gpu->matmul_swiglu(gpu, out[0], x, w[0].d, w[1].d, ATLAS_DTYPE_BF16, T,
						Ns[0], K, scratch),
			     0);
}

/* Batch-invariant mode: every row of a product gets the same bits as the
 * same row computed alone (T = 1, the tensor-core GEMV), for T across the
 * GEMV (T <= 16), atlas_gemm_inv (T >= 17; its three token tiles, its
 * split form, N and K tails, every K-range count 1..8) and, from T = 128,
 * atlas_gemm_tc_inv (wgmma) where the chunk counts let it take them. */
static void check_invariant(int kind, int64_t T, int64_t N, int64_t K)
{
	static const char *const names[] = {"matmul", "matmul+bias", "logits", "matmul_multi",
					    "matmul_swiglu"};
	const int np = kind == 3 ? 3 : 1, nw = kind == 3 ? 3 : kind == 4 ? 2 : 1;
	const size_t es = kind == 2 ? 4 : 2;
	int64_t Ns[3] = {N, kind == 3 ? N / 4 : N, kind == 3 ? N / 4 : N};
	struct buf x = mkbuf(T * K, 1.0f), scratch = mkbuf(T * N, 1.0f);
	struct wbuf w[3] = {{0}}, b[3] = {{0}};
	void *all_d[3] = {NULL}, *one_d[3] = {NULL};
	for (int i = 0; i < nw; i++) {
		w[i] = mkw(ATLAS_DTYPE_BF16, Ns[i] * K, 1.0f / sqrtf((float)K));
		if (kind == 1 || kind == 3)
			b[i] = mkw(ATLAS_DTYPE_BF16, Ns[i], 0.5f);
	}
	for (int i = 0; i < np; i++) {
		all_d[i] = gpu->alloc(gpu, (size_t)(T * Ns[i]) * es);
		one_d[i] = gpu->alloc(gpu, (size_t)Ns[i] * es);
	}
	inv_run(kind, x.d, w, b, all_d, scratch.d, T, Ns, K);
	char *all[3] = {NULL}, *one = malloc((size_t)Ns[0] * es);
	for (int i = 0; i < np; i++) {
		all[i] = malloc((size_t)(T * Ns[i]) * es);
		CHECK_EQ_INT(gpu->download(gpu, all[i], all_d[i], (size_t)(T * Ns[i]) * es), 0);
	}
	/* every row of product 0; the other products' rows at t = 0 and
	 * every 7th (one call gives all products) */
	int64_t diff = 0;
	for (int64_t t = 0; t < T; t++) {
		inv_run(kind, (const char *)x.d + (size_t)(t * K) * 2, w, b, one_d, scratch.d, 1, Ns,
			K);
		for (int i = 0; i < (t == 0 || t % 7 == 3 ? np : 1); i++) {
			CHECK_EQ_INT(gpu->download(gpu, one, one_d[i], (size_t)Ns[i] * es), 0);
			diff += memcmp(one, all[i] + (size_t)(t * Ns[i]) * es, (size_t)Ns[i] * es) != 0;
		}
	}
	for (int i = 0; i < np; i++)
		free(all[i]);
	free(one);
	printf("# invariant %s T=%lld N=%lld K=%lld: %lld row(s) differ from alone\n", names[kind],
	       (long long)T, (long long)N, (long long)K, (long long)diff);
	CHECK(diff == 0);
	for (int i = 0; i < np; i++) {
		gpu->free(gpu, all_d[i]);
		gpu->free(gpu, one_d[i]);
	}
	for (int i = 0; i < nw; i++) {
		freew(&w[i]);
		if (b[i].h)
			freew(&b[i]);
	}
	freebuf(&x);
	freebuf(&scratch);
}

static void test_invariant(void)
{
	static const int64_t shapes[][4] = {
	    /* kind, T, N, K: the GEMV (T <= 16) */
	    {0, 5, 1000, 520},	 {0, 16, 4096, 1024},
	    /* atlas_gemm_inv's 32- and 64-token tiles, split by K range
	     * (few row tiles) and not */
	    {0, 20, 4096, 1024}, {0, 64, 300, 256},  {1, 17, 2048, 4104},
	    {2, 30, 5000, 256},	 {3, 40, 1024, 1024}, {4, 24, 3000, 1024},
	    {4, 60, 12288, 4096}, {1, 33, 151936 / 8, 1024},
	    /* atlas_gemm_inv: a token tail, an N tail, K tails (K % 32,
	     * an odd chunk count), 1 to 8 K ranges, several token tiles */
	    {0, 65, 129, 4104},	 {1, 100, 2048, 1032}, {0, 300, 1000, 520},
	    {1, 517, 4096, 1024}, {0, 129, 151936 / 16, 2048}, {0, 200, 8, 72},
	    {0, 150, 6144, 4096}, {2, 130, 5000, 256},  {2, 80, 151936, 128},
	    {3, 150, 1024, 1024}, {3, 70, 4096, 4096},  {4, 200, 3000, 1024},
	    {4, 90, 12288, 4096}, {4, 66, 77, 136},
	    /* atlas_gemm_tc_inv (T >= 128, even chunk and range counts):
	     * Qwen3-8B's products at a 512-token prefill, a K tail inside
	     * the last chunk, token and row tails, the logits */
	    {3, 512, 4096, 4096}, {4, 512, 12288, 4096}, {0, 512, 4096, 12288},
	    {1, 300, 2000, 2040}, {2, 130, 151936 / 4, 4096}, {4, 129, 100, 1024},
	    /* its split form (half the SMs or fewer busy): each product kind */
	    {1, 128, 2048, 4096}, {4, 130, 1000, 1024}, {2, 128, 4000, 4096},
	    {3, 128, 1024, 1024}};
	gpu->batch_invariant = true;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		check_invariant((int)shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
	gpu->batch_invariant = false;
}

/* An F8B weight [N, K] with [bo, bi] scale blocks (random E4M3 values,
 * no NaN; scales 2^-8..2^-5 times 1..2): the blob on the GPU and the
 * BF16 matrix it stands for (atlas_f8b_row_bf16) on the GPU too. */
struct f8w {
	const void *blob, *bf;
};

static struct f8w f8_make_h(int64_t N, int64_t K, int64_t bo, int64_t bi, char **keep);

static struct f8w f8_make(int64_t N, int64_t K, int64_t bo, int64_t bi)
{
	return f8_make_h(N, K, bo, bi, NULL);
}

/* The same, the host blob handed to *keep (free it) when keep is set. */
static struct f8w f8_make_h(int64_t N, int64_t K, int64_t bo, int64_t bi, char **keep)
{
	const int64_t bytes = atlas_f8b_bytes(N, K, bo, bi);
	char *blob = calloc(1, (size_t)bytes);
	CHECK_EQ_INT(atlas_f8b_init(blob, N, K, bo, bi), 0);
	uint8_t *q = (uint8_t *)blob + ATLAS_F8B_HEAD;
	for (int64_t i = 0; i < N * K; i++) {
		uint8_t v = (uint8_t)((rnd() + 1.0f) * 127.99f);
		q[i] = (v & 0x7f) == 0x7f ? (uint8_t)(v ^ 1) : v;
	}
	float *sc = (float *)(blob + atlas_f8b_scale_off(N, K));
	const int64_t ns = ((N + bo - 1) / bo) * ((K + bi - 1) / bi);
	for (int64_t i = 0; i < ns; i++)
		sc[i] = ldexpf(1.5f + 0.5f * rnd(), -8 + (int)(i % 4));
	uint16_t *bf = malloc((size_t)(N * K) * 2);
	for (int64_t n = 0; n < N; n++)
		atlas_f8b_row_bf16(blob, n, bf + n * K);
	struct f8w w = {gpu->weight_upload(gpu, blob, (size_t)bytes),
			gpu->weight_upload(gpu, bf, (size_t)(N * K) * 2)};
	if (keep)
		*keep = blob;
	else
		free(blob);
	free(bf);
	return w;
}

/* A W4B weight [N, K] with groups of g along K: random nibbles, zero
 * points 0..15 (GPTQ's and AWQ's range; the format takes 0..128), BF16
 * scales 2^-6..2^-3 times 1..2; the blob and its BF16 matrix on the GPU. */
static struct f8w w4_make(int64_t N, int64_t K, int64_t g)
{
	const int64_t bytes = atlas_w4b_bytes(N, K, g), ng = (K + g - 1) / g;
	char *blob = calloc(1, (size_t)bytes);
	CHECK_EQ_INT(atlas_w4b_init(blob, N, K, g), 0);
	uint8_t *q = (uint8_t *)blob + ATLAS_W4B_HEAD;
	for (int64_t i = 0; i < N * K / 2; i++)
		q[i] = (uint8_t)((rnd() + 1.0f) * 127.99f);
	uint8_t *z = (uint8_t *)blob + atlas_w4b_z_off(N, K);
	uint16_t *sc = (uint16_t *)(blob + atlas_w4b_s_off(N, K, g));
	for (int64_t i = 0; i < N * ng; i++) {
		z[i] = (uint8_t)((rnd() + 1.0f) * 7.99f);
		sc[i] = atlas_f32_to_bf16(ldexpf(1.5f + 0.5f * rnd(), -6 + (int)(i % 4)));
	}
	uint16_t *bf = malloc((size_t)(N * K) * 2);
	for (int64_t n = 0; n < N; n++)
		atlas_w4b_row_bf16(blob, n, bf + n * K);
	struct f8w w = {gpu->weight_upload(gpu, blob, (size_t)bytes),
			gpu->weight_upload(gpu, bf, (size_t)(N * K) * 2)};
	free(blob);
	free(bf);
	return w;
}

/* An FP4B (NVFP4) weight [N, K]: random E2M1 pairs, F8 scales (random
 * E4M3 codes 0x20..0x5f: 2^-4..~2^4, and their negatives for a quarter
 * of the groups), the global multiplier gm; the blob and its BF16
 * matrix on the GPU. */
static struct f8w fp4_make(int64_t N, int64_t K, float gm)
{
	const int64_t bytes = atlas_fp4b_bytes(N, K);
	char *blob = calloc(1, (size_t)bytes);
	CHECK_EQ_INT(atlas_fp4b_init(blob, N, K, gm), 0);
	uint8_t *q = (uint8_t *)blob + ATLAS_FP4B_HEAD;
	for (int64_t i = 0; i < N * K / 2; i++)
		q[i] = (uint8_t)((rnd() + 1.0f) * 127.99f);
	uint8_t *sc = (uint8_t *)blob + atlas_fp4b_s_off(N, K);
	for (int64_t i = 0; i < N * (K / 16); i++)
		sc[i] = (uint8_t)(0x20 + (int)((rnd() + 1.0f) * 31.99f)) | (i % 4 == 3 ? 0x80 : 0);
	uint16_t *bf = malloc((size_t)(N * K) * 2);
	for (int64_t n = 0; n < N; n++)
		atlas_fp4b_row_bf16(blob, n, bf + n * K);
	struct f8w w = {gpu->weight_upload(gpu, blob, (size_t)bytes),
			gpu->weight_upload(gpu, bf, (size_t)(N * K) * 2)};
	free(blob);
	free(bf);
	return w;
}

/* One product of kind 0 (matmul), 1 (+ BF16 bias), 3 (matmul_multi:
 * q, k, v with biases) or 4 (matmul_swiglu) with the F8B weights (f8)
 * or their BF16 matrices. */
static int f8_run(int kind, enum atlas_dtype blobdt, int f8, const struct f8w *w,
		  const void *const *bias, void *const *out, const void *x, void *scratch, int64_t T,
		  const int64_t *Ns, int64_t K)
{
	const enum atlas_dtype dt = f8 ? blobdt : ATLAS_DTYPE_BF16;
	const void *ws[3];
	for (int i = 0; i < 3; i++)
		ws[i] = f8 ? w[i].blob : w[i].bf;
	if (kind <= 1)
		return gpu->matmul(gpu, out[0], x, ws[0], kind ? bias[0] : NULL, dt, T, Ns[0], K);
	if (kind == 3)
		return gpu->matmul_multi(gpu, 3, out, x, ws, bias, dt, T, Ns, K);
	return gpu->matmul_swiglu(gpu, out[0], x, ws[0], ws[1], dt, T, Ns[0], K, scratch);
}

/* F8B (bi > 0: [bo, bi] scale blocks), W4B (bi == 0: groups of bo) or
 * FP4B (bi < 0: global multiplier 2^-bo / 3) products against the BF16 products of the matrices they stand for:
 * in batch-invariant mode the same bits (the blob's GEMV up to 64 rows,
 * the dequantized copy on the BF16 GEMMs beyond, each the BF16 path's
 * sums), otherwise within TOL (T = 1 takes another BF16 kernel). */
static void check_f8b(int kind, int64_t T, int64_t N, int64_t K, int64_t bo, int64_t bi)
{
	const bool w4 = bi == 0, f4 = bi < 0;
	const enum atlas_dtype blobdt = w4 ? ATLAS_DTYPE_W4B : f4 ? ATLAS_DTYPE_FP4B : ATLAS_DTYPE_F8B;
	static const char *const names[] = {"matmul", "matmul+bias", "", "matmul_multi",
					    "matmul_swiglu"};
	const int np = kind == 3 ? 3 : 1, nw = kind == 3 ? 3 : kind == 4 ? 2 : 1;
	const int64_t Ns[3] = {N, kind == 3 ? N / 4 : N, kind == 3 ? N / 4 : N};
	struct buf x = mkbuf(T * K, 1.0f), scratch = mkbuf(T * N, 1.0f);
	struct f8w w[3] = {{0}};
	struct wbuf b[3] = {{0}};
	const void *bias[3] = {NULL};
	for (int i = 0; i < nw; i++)
		w[i] = w4   ? w4_make(Ns[i], K, bo)
		       : f4 ? fp4_make(Ns[i], K, ldexpf(1.0f / 3.0f, -(int)bo))
			    : f8_make(Ns[i], K, bo, bi);
	for (int i = 0; i < 3 && (kind == 1 || kind == 3); i++) {
		b[i] = mkw(ATLAS_DTYPE_BF16, Ns[i], 0.5f);
		bias[i] = b[i].d;
	}
	for (int inv = 0; inv < 2; inv++) {
		gpu->batch_invariant = inv;
		struct buf o8[3], ob[3];
		void *p8[3] = {NULL}, *pb[3] = {NULL};
		for (int i = 0; i < np; i++) {
			o8[i] = mkbuf(T * Ns[i], 1.0f), ob[i] = mkbuf(T * Ns[i], 1.0f);
			poison(&o8[i]);
			p8[i] = o8[i].d, pb[i] = ob[i].d;
		}
		CHECK_EQ_INT(f8_run(kind, blobdt, 1, w, bias, p8, x.d, scratch.d, T, Ns, K), 0);
		CHECK_EQ_INT(f8_run(kind, blobdt, 0, w, bias, pb, x.d, scratch.d, T, Ns, K), 0);
		for (int i = 0; i < np; i++) {
			char what[128];
			if (w4)
				snprintf(what, sizeof(what), "w4b %s%s T=%lld N=%lld K=%lld g%lld [%d]",
					 names[kind], inv ? " inv" : "", (long long)T,
					 (long long)Ns[i], (long long)K, (long long)bo, i);
			else if (f4)
				snprintf(what, sizeof(what), "fp4b %s%s T=%lld N=%lld K=%lld [%d]",
					 names[kind], inv ? " inv" : "", (long long)T,
					 (long long)Ns[i], (long long)K, i);
			else
				snprintf(what, sizeof(what),
					 "f8b %s%s T=%lld N=%lld K=%lld blk %lldx%lld [%d]",
					 names[kind], inv ? " inv" : "", (long long)T,
					 (long long)Ns[i], (long long)K, (long long)bo,
					 (long long)bi, i);
			const size_t nb = (size_t)(T * Ns[i]) * 2;
			char *h8 = malloc(nb), *hb = malloc(nb);
			CHECK_EQ_INT(gpu->download(gpu, h8, o8[i].d, nb), 0);
			CHECK_EQ_INT(gpu->download(gpu, hb, ob[i].d, nb), 0);
			if (inv) {
				int64_t diff = 0;
				for (size_t e = 0; e < nb / 2; e++)
					diff += ((uint16_t *)h8)[e] != ((uint16_t *)hb)[e];
				printf("# %-58s %lld of %lld differ from BF16\n", what, (long long)diff,
				       (long long)(nb / 2));
				CHECK(diff == 0);
			} else {
				float *ref = malloc(nb * 2);
				for (size_t e = 0; e < nb / 2; e++)
					ref[e] = atlas_bf16_to_f32(((uint16_t *)hb)[e]);
				compare(what, &o8[i], ref, T * Ns[i]);
				free(ref);
			}
			free(h8);
			free(hb);
			freebuf(&o8[i]);
			freebuf(&ob[i]);
		}
	}
	gpu->batch_invariant = false;
	for (int i = 0; i < nw; i++) {
		gpu->weight_release(gpu, w[i].blob);
		gpu->weight_release(gpu, w[i].bf);
	}
	for (int i = 0; i < 3; i++)
		if (b[i].h)
			freew(&b[i]);
	freebuf(&x);
	freebuf(&scratch);
}

static void test_f8b(void)
{
	/* kind, T, N, K, bo, bi: 128x128 blocks (Qwen3-FP8) with partial
	 * edge blocks in both directions, 32x32 (the golden fixture's),
	 * per channel (bo 1, bi the row), per tensor; T across the FP8
	 * GEMV's token tiles and beyond 64 (the dequantized copy) */
	static const int64_t cases[][6] = {
	    {0, 1, 4096, 4096, 128, 128},  {1, 1, 300, 320, 128, 128},
	    {0, 5, 200, 4104, 128, 128},   {3, 3, 1024, 1024, 128, 128},
	    {4, 1, 1536, 1024, 128, 128},  {4, 8, 3000, 4096, 128, 128},
	    {1, 16, 150, 520, 32, 32},     {3, 24, 512, 512, 32, 32},
	    {0, 33, 4096, 1024, 1, 1024},  {4, 64, 768, 2048, 1, 2048},
	    {0, 2, 777, 4104, 777, 4104},  {1, 65, 2048, 1032, 128, 128},
	    {3, 130, 1024, 1024, 128, 128}, {4, 200, 3000, 1024, 128, 128},
	    {0, 512, 4096, 4096, 128, 128}, {4, 100, 80, 64, 32, 32}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_f8b((int)cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4],
			  cases[i][5]);
}

/* W8A8 (ATLAS_FP8_W8A8=1, atlas_gemm_tc_f8): F8B products of 16 rows or
 * more, outside batch-invariant mode, quantize x per row and 128 columns
 * (s = amax / 448, q = e4m3(x * (448 / amax))). The reference repeats
 * that quantization here and sums exactly (double): out = sum over K of
 * s_x q_x s_w q_w (+ bias; swiglu from the BF16-rounded gate and up, as
 * the op rounds them). Within W8A8_TOL, well under the ~2% that
 * quantizing x costs, so a weight-only fallback fails too. */
#define W8A8_TOL 4e-3

struct w8a8_x {
	int64_t T, K, nkx;
	uint8_t *q; /* [T, K] codes */
	float *s;   /* [T][nkx] scales */
	float lut[256];
};

static void w8a8_quant(struct w8a8_x *qx, const float *x, int64_t T, int64_t K)
{
	qx->T = T, qx->K = K, qx->nkx = (K + 127) / 128;
	qx->q = malloc((size_t)(T * K));
	qx->s = malloc((size_t)(T * qx->nkx) * sizeof(float));
	for (int i = 0; i < 256; i++)
		qx->lut[i] = atlas_f8e4m3_to_f32((uint8_t)i);
	for (int64_t t = 0; t < T; t++)
		for (int64_t kb = 0; kb < qx->nkx; kb++) {
			const int64_t k0 = kb * 128, k1 = k0 + 128 < K ? k0 + 128 : K;
			float m = 0.0f;
			for (int64_t k = k0; k < k1; k++)
				m = fmaxf(m, fabsf(x[t * K + k]));
			const float r = m > 0.0f ? 448.0f / m : 1.0f;
			for (int64_t k = k0; k < k1; k++)
				qx->q[t * K + k] = atlas_f32_to_f8e4m3(x[t * K + k] * r);
			qx->s[t * qx->nkx + kb] = m > 0.0f ? m / 448.0f : 1.0f;
		}
}

/* Row t of x times row n of F8B host blob, exactly. */
static double w8a8_dot(const struct w8a8_x *qx, const char *blob, int64_t t, int64_t n)
{
	const struct atlas_f8b_head *h = (const struct atlas_f8b_head *)blob;
	const int64_t K = qx->K;
	const uint8_t *q = (const uint8_t *)blob + ATLAS_F8B_HEAD + n * K;
	const float *sw = (const float *)(blob + h->scale_off) + n / h->bo * h->nbc;
	double v = 0;
	for (int64_t kb = 0; kb < qx->nkx; kb++) {
		const int64_t k0 = kb * 128, k1 = k0 + 128 < K ? k0 + 128 : K;
		double d = 0;
		for (int64_t k = k0; k < k1; k++)
			d += (double)qx->lut[qx->q[t * K + k]] * qx->lut[q[k]] * sw[k / h->bi];
		v += d * qx->s[t * qx->nkx + kb];
	}
	return v;
}

static float bfr(double v)
{
	return atlas_bf16_to_f32(atlas_f32_to_bf16((float)v));
}

static void check_w8a8(int kind, int64_t T, int64_t N, int64_t K, int64_t bo, int64_t bi)
{
	static const char *const names[] = {"matmul", "matmul+bias", "", "matmul_multi",
					    "matmul_swiglu"};
	const int np = kind == 3 ? 3 : 1, nw = kind == 3 ? 3 : kind == 4 ? 2 : 1;
	const int64_t Ns[3] = {N, kind == 3 ? N / 4 : N, kind == 3 ? N / 4 : N};
	struct buf x = mkbuf(T * K, 1.0f), scratch = mkbuf(T * N, 1.0f);
	struct f8w w[3] = {{0}};
	char *hb[3] = {NULL};
	struct wbuf b[3] = {{0}};
	const void *bias[3] = {NULL};
	for (int i = 0; i < nw; i++)
		w[i] = f8_make_h(Ns[i], K, bo, bi, &hb[i]);
	for (int i = 0; i < 3 && (kind == 1 || kind == 3); i++) {
		b[i] = mkw(ATLAS_DTYPE_BF16, Ns[i], 0.5f);
		bias[i] = b[i].d;
	}
	struct w8a8_x qx;
	w8a8_quant(&qx, x.h, T, K);
	struct buf o[3];
	void *po[3] = {NULL};
	for (int i = 0; i < np; i++) {
		o[i] = mkbuf(T * Ns[i], 1.0f);
		poison(&o[i]);
		po[i] = o[i].d;
	}
	CHECK_EQ_INT(f8_run(kind, ATLAS_DTYPE_F8B, 1, w, bias, po, x.d, scratch.d, T, Ns, K), 0);
	for (int i = 0; i < np; i++) {
		float *ref = malloc((size_t)(T * Ns[i]) * sizeof(float));
		const uint16_t *bh = b[i].h ? (const uint16_t *)b[i].h : NULL;
		for (int64_t t = 0; t < T; t++)
			for (int64_t n = 0; n < Ns[i]; n++) {
				double v = w8a8_dot(&qx, hb[i], t, n);
				if (kind == 4) {
					const float g = bfr(v), u = bfr(w8a8_dot(&qx, hb[1], t, n));
					v = g / (1.0f + expf(-g)) * u;
				} else if (bh) {
					v += atlas_bf16_to_f32(bh[n]);
				}
				ref[t * Ns[i] + n] = (float)v;
			}
		char what[128];
		snprintf(what, sizeof(what), "w8a8 %s T=%lld N=%lld K=%lld blk %lldx%lld [%d]",
			 names[kind], (long long)T, (long long)Ns[i], (long long)K, (long long)bo,
			 (long long)bi, i);
		compare_tol(what, &o[i], ref, T * Ns[i], W8A8_TOL);
		free(ref);
		freebuf(&o[i]);
	}
	for (int i = 0; i < nw; i++) {
		gpu->weight_release(gpu, w[i].blob);
		gpu->weight_release(gpu, w[i].bf);
		free(hb[i]);
	}
	for (int i = 0; i < 3; i++)
		if (b[i].h)
			freew(&b[i]);
	free(qx.q);
	free(qx.s);
	freebuf(&x);
	freebuf(&scratch);
}

/* The W8A8 cases on a second backend opened with ATLAS_FP8_W8A8=1:
 * 128 x 128 blocks with partial edge blocks (N 3000, K 1040), a scale
 * per channel (bo 1, bi the row), T from 16 (split K) across several
 * 128-row tiles; every op form. */
static void test_w8a8(void)
{
	struct atlas_backend *g0 = gpu;
	setenv("ATLAS_FP8_W8A8", "1", 1);
	gpu = atlas_backend_open("cuda");
	unsetenv("ATLAS_FP8_W8A8");
	CHECK(gpu != NULL);
	if (!gpu) {
		gpu = g0;
		return;
	}
	static const int64_t cases[][6] = {
	    {0, 16, 1024, 1024, 128, 128},  {1, 100, 3000, 1024, 128, 128},
	    {3, 64, 2048, 4096, 128, 128},  {4, 130, 1536, 1024, 128, 128},
	    {0, 200, 1024, 2048, 1, 2048},  {1, 300, 768, 1040, 128, 128},
	    {0, 33, 512, 4096, 128, 128},   {0, 520, 512, 1024, 128, 128}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_w8a8((int)cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4],
			   cases[i][5]);
	gpu->destroy(gpu);
	gpu = g0;
}

/* W4B: groups of 128 (the usual GPTQ/AWQ/compressed-tensors size), 32
 * and a whole row (group_size -1), a partial last group (K 4128 is
 * not a multiple of 128); T across the 4-bit GEMV's token tiles (1, 8,
 * 16, 32, 64) and beyond 64 (the dequantized copy); the golden
 * fixture's shapes. */
static void test_w4b(void)
{
	static const int64_t cases[][5] = {
	    {0, 1, 4096, 4096, 128},  {1, 1, 300, 320, 32},	 {0, 1, 4096, 12288, 128},
	    {0, 5, 200, 4128, 128},   {3, 3, 1024, 1024, 128}, {4, 1, 1536, 1024, 128},
	    {4, 8, 3000, 4096, 128},  {1, 16, 150, 512, 32},	 {3, 24, 512, 512, 32},
	    {0, 33, 4096, 1024, 1024}, {4, 64, 768, 2048, 2048}, {0, 2, 777, 4128, 4128},
	    {1, 65, 2048, 1024, 128}, {3, 130, 1024, 1024, 128}, {4, 200, 3000, 1024, 128},
	    {0, 512, 4096, 4096, 128}, {4, 100, 80, 64, 32},	 {0, 7, 64, 4128, 128}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_f8b((int)cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4], 0);
}

/* FP4B (NVFP4): T across the tensor-core GEMV's token tiles (1, 8, 16,
 * 32, 64; T = 1 outside batch-invariant mode takes atlas_gemv_fp4, K
 * with a last chunk of 32, 64 and 128 columns) and beyond 64 (the
 * dequantized copy), every op form, global multipliers 2^-3 / 3
 * (W about +-1), 2^-8 / 3 and 2^-12 / 3 (a third is never exact: f8 * gm
 * rounds, as checkpoints' do). */
static void test_fp4b(void)
{
	static const int64_t cases[][5] = {
	    {0, 1, 4096, 4096, 3},   {1, 1, 300, 320, 8},    {0, 1, 4096, 12288, 3},
	    {0, 5, 200, 4128, 3},    {3, 3, 1024, 1024, 3},  {4, 1, 1536, 1024, 3},
	    {4, 8, 3000, 4096, 3},   {1, 16, 150, 512, 12}, {3, 24, 512, 512, 3},
	    {0, 33, 4096, 1024, 3},  {4, 64, 768, 2048, 3},  {0, 2, 777, 4128, 3},
	    {1, 65, 2048, 1024, 3},  {3, 130, 1024, 1024, 3}, {4, 200, 3000, 1024, 3},
	    {0, 512, 4096, 4096, 3}, {4, 100, 80, 64, 3},    {0, 7, 64, 4128, 3},
	    {0, 1, 777, 4128, 3},    {3, 1, 1024, 1056, 8},  {4, 1, 100, 96, 3}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_f8b((int)cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4], -1);
}

/* One MoE layer's weights on both backends. The router rows are one-hot
 * with a power-of-two value, so every logit is exact on both backends
 * (the CPU's x is the GPU's BF16 x): they choose the same experts, and
 * the comparison measures the expert products and their sum, not a
 * routing flip of a near tie. */
struct moe_case {
	struct atlas_moe_desc hd, gd; /* CPU (host pointers), GPU (device) */
	struct wbuf router, sgate, w[3][ATLAS_MOE_TEST_MAXE], s[3];
	const void *hp[3][ATLAS_MOE_TEST_MAXE], *gp[3][ATLAS_MOE_TEST_MAXE];
};

static void moe_make(struct moe_case *m, int64_t E, int64_t K, int64_t D, int64_t F, int64_t Fs,
		     bool norm, enum atlas_dtype dt)
{
	memset(m, 0, sizeof(*m));
	float *r = calloc((size_t)(E * D), sizeof(float));
	for (int64_t e = 0; e < E; e++)
		r[e * D + (e * 7) % D] = (float)(1 << (e % 4));
	m->router = (struct wbuf){malloc((size_t)(E * D) * atlas_dtype_size(dt)), NULL, dt};
	for (int64_t i = 0; i < E * D; i++) {
		if (dt == ATLAS_DTYPE_BF16)
			((uint16_t *)m->router.h)[i] = atlas_f32_to_bf16(r[i]);
		else if (dt == ATLAS_DTYPE_F16)
			((uint16_t *)m->router.h)[i] = atlas_f32_to_f16(r[i]);
		else
			((float *)m->router.h)[i] = r[i];
	}
	m->router.d = gpu->weight_upload(gpu, m->router.h, (size_t)(E * D) * atlas_dtype_size(dt));
	free(r);
	for (int64_t e = 0; e < E; e++)
		for (int i = 0; i < 3; i++) {
			m->w[i][e] = mkw(dt, F * D, 1.0f / sqrtf((float)(i == 2 ? F : D)));
			m->hp[i][e] = m->w[i][e].h;
			m->gp[i][e] = m->w[i][e].d;
		}
	if (Fs) {
		for (int i = 0; i < 3; i++)
			m->s[i] = mkw(dt, Fs * D, 1.0f / sqrtf((float)(i == 2 ? Fs : D)));
		m->sgate = mkw(dt, D, 1.0f / sqrtf((float)D));
	}
	m->hd = (struct atlas_moe_desc){
	    .n_experts = E, .top_k = K, .D = D, .F = F, .Fs = Fs, .norm_topk = norm, .wdt = dt,
	    .router = m->router.h, .wg = m->hp[0], .wu = m->hp[1], .wd = m->hp[2],
	    .sg = m->s[0].h, .su = m->s[1].h, .sd = m->s[2].h, .sgate = m->sgate.h};
	m->gd = m->hd;
	m->gd.router = m->router.d;
	m->gd.wg = m->gp[0], m->gd.wu = m->gp[1], m->gd.wd = m->gp[2];
	m->gd.sg = m->s[0].d, m->gd.su = m->s[1].d, m->gd.sd = m->s[2].d, m->gd.sgate = m->sgate.d;
}

static void moe_free(struct moe_case *m)
{
	freew(&m->router);
	for (int64_t e = 0; e < m->hd.n_experts; e++)
		for (int i = 0; i < 3; i++)
			freew(&m->w[i][e]);
	if (m->hd.Fs) {
		for (int i = 0; i < 3; i++)
			freew(&m->s[i]);
		freew(&m->sgate);
	}
}

/* The moe op against the CPU's; then each row computed alone must give
 * the same bits as in the batch (batch invariance), and a one-row call
 * reads exactly top_k experts. */
static void test_moe(void)
{
	static const struct {
		int64_t E, K, D, F, Fs, T;
		bool norm;
		enum atlas_dtype dt;
	} cs[] = {
	    {16, 4, 256, 96, 0, 1, true, ATLAS_DTYPE_BF16},
	    {128, 8, 512, 128, 0, 7, true, ATLAS_DTYPE_BF16},
	    {60, 4, 256, 64, 0, 37, false, ATLAS_DTYPE_BF16},
	    {8, 2, 264, 200, 0, 70, true, ATLAS_DTYPE_BF16},
	    {4, 2, 128, 64, 0, 300, true, ATLAS_DTYPE_BF16},
	    {16, 4, 256, 96, 160, 9, false, ATLAS_DTYPE_BF16},
	    {8, 2, 100, 52, 0, 5, true, ATLAS_DTYPE_BF16}, /* K % 8 != 0: the any-dtype kernel */
	    {8, 2, 128, 64, 48, 3, true, ATLAS_DTYPE_F32},
	    {8, 3, 128, 64, 0, 11, false, ATLAS_DTYPE_F16},
	    /* decode shapes: the Qwen3-30B-A3B layer at T = 1, and wider
	     * experts than the model */
	    {128, 8, 512, 256, 0, 1, true, ATLAS_DTYPE_BF16},
	    {128, 8, 2048, 768, 0, 1, true, ATLAS_DTYPE_BF16},
	    {128, 8, 512, 256, 0, 8, true, ATLAS_DTYPE_BF16},
	    {64, 4, 1024, 512, 0, 5, false, ATLAS_DTYPE_BF16},
	    {8, 2, 512, 1792, 0, 3, true, ATLAS_DTYPE_BF16},
	    /* T >= 128: the grouped wgmma GEMM outside batch-invariant mode */
	    {128, 8, 512, 256, 0, 200, true, ATLAS_DTYPE_BF16},
	    {8, 2, 1024, 768, 0, 600, true, ATLAS_DTYPE_BF16},
	    {16, 4, 256, 96, 160, 130, false, ATLAS_DTYPE_BF16},
	};
	for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
		const int64_t T = cs[i].T, D = cs[i].D;
		struct moe_case *m = malloc(sizeof(*m));
		moe_make(m, cs[i].E, cs[i].K, D, cs[i].F, cs[i].Fs, cs[i].norm, cs[i].dt);
		struct buf x = mkbuf(T * D, 1.0f), o = mkbuf(T * D, 1.0f), o1 = mkbuf(D, 1.0f);
		float *ref = malloc((size_t)(T * D) * 4);
		void *hs = malloc(atlas_moe_scratch_bytes(&m->hd, T));
		void *gs = gpu->alloc(gpu, atlas_moe_scratch_bytes(&m->gd, T));
		char what[160];
		poison(&o);
		CHECK_EQ_INT(cpu->moe(cpu, ref, x.h, &m->hd, T, hs), 0);
		CHECK_EQ_INT(gpu->moe(gpu, o.d, x.d, &m->gd, T, gs), 0);
		snprintf(what, sizeof(what), "moe T=%lld E=%lld k=%lld D=%lld F=%lld Fs=%lld%s %s",
			 (long long)T, (long long)cs[i].E, (long long)cs[i].K, (long long)D,
			 (long long)cs[i].F, (long long)cs[i].Fs, cs[i].norm ? " norm" : "",
			 wname(cs[i].dt));
		compare(what, &o, ref, T * D);
		/* batch-invariant mode: the batch again (the GEMV path at every
		 * T), then each row alone must give the same bits */
		gpu->batch_invariant = true;
		poison(&o);
		CHECK_EQ_INT(gpu->moe(gpu, o.d, x.d, &m->gd, T, gs), 0);
		snprintf(what + strlen(what), sizeof(what) - strlen(what), " invariant");
		compare(what, &o, ref, T * D);
		uint16_t *all = malloc((size_t)(T * D) * 2), *one = malloc((size_t)D * 2);
		int64_t diff = 0;
		CHECK_EQ_INT(gpu->download(gpu, all, o.d, (size_t)(T * D) * 2), 0);
		for (int64_t t = 0; t < T; t++) {
			const void *xt = (const char *)x.d + (size_t)(t * D) * 2;
			CHECK_EQ_INT(gpu->moe_experts_read(gpu) >= 0, 1);
			CHECK_EQ_INT(gpu->moe(gpu, o1.d, xt, &m->gd, 1, gs), 0);
			if (t == 0 && !cs[i].Fs)
				CHECK_EQ_INT((int)gpu->moe_experts_read(gpu), (int)cs[i].K);
			CHECK_EQ_INT(gpu->download(gpu, one, o1.d, (size_t)D * 2), 0);
			diff += memcmp(one, all + t * D, (size_t)D * 2) != 0;
		}
		gpu->batch_invariant = false;
		printf("# moe T=%lld: %lld rows differ from the row alone\n", (long long)T,
		       (long long)diff);
		CHECK(diff == 0);
		free(all);
		free(one);
		free(ref);
		free(hs);
		gpu->free(gpu, gs);
		freebuf(&x);
		freebuf(&o);
		freebuf(&o1);
		moe_free(m);
		free(m);
	}
}

/* FP32 floats both backends read: host copy h, device copy d. */
static float *f32_dev(const float *h, int64_t n)
{
	float *d = gpu->alloc(gpu, (size_t)n * 4);
	gpu->upload(gpu, d, h, (size_t)n * 4);
	return d;
}

/* Relative L2 of a device FP32 array against the CPU's. */
static void compare_f32(const char *what, const float *d, const float *ref, int64_t n)
{
	float *got = malloc((size_t)n * 4);
	CHECK_EQ_INT(gpu->download(gpu, got, d, (size_t)n * 4), 0);
	double d2 = 0, r2 = 0;
	for (int64_t i = 0; i < n; i++) {
		d2 += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
		r2 += (double)ref[i] * ref[i];
	}
	double l2 = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
	printf("# %-58s rel_l2 %-10.3g %s\n", what, l2, l2 < TOL ? "ok" : "FAIL");
	CHECK(l2 < TOL);
	free(got);
}

/* The hybrid models' ops (hybrid.cu) against the CPU's: partial rope, the
 * attention gate, and the Gated DeltaNet over three items (fresh, with a
 * state, one row) with a snapshot, for the fixtures' shape (dk 16) and
 * Qwen3-Next's (dk = dv = 128); outputs, states and snapshots. */
static void test_hybrid(void)
{
	static const int64_t rs[][4] = {{7, 4, 16, 4}, {33, 8, 128, 32}};
	for (size_t s = 0; s < 2; s++) {
		int64_t T = rs[s][0], H = rs[s][1], hd = rs[s][2], rd = rs[s][3];
		int32_t *pos = malloc((size_t)T * 4), *dpos = gpu->alloc(gpu, (size_t)T * 4);
		float *freq = malloc((size_t)rd / 2 * 4);
		for (int64_t t = 0; t < T; t++)
			pos[t] = (int32_t)(t * 37 + 5);
		for (int64_t i = 0; i < rd / 2; i++)
			freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)rd);
		gpu->upload(gpu, dpos, pos, (size_t)T * 4);
		float *dfreq = f32_dev(freq, rd / 2);
		struct buf x = mkbuf(T * H * hd, 1.0f);
		char what[96];
		CHECK_EQ_INT(cpu->rope_partial(cpu, x.h, pos, freq, T, H, hd, rd), 0);
		CHECK_EQ_INT(gpu->rope_partial(gpu, x.d, dpos, dfreq, T, H, hd, rd), 0);
		snprintf(what, sizeof(what), "rope_partial T=%lld H=%lld hd=%lld rd=%lld", (long long)T,
			 (long long)H, (long long)hd, (long long)rd);
		compare(what, &x, x.h, T * H * hd);
		struct buf qg = mkbuf(T * H * 2 * hd, 2.0f), q = mkbuf(T * H * hd, 1.0f);
		CHECK_EQ_INT(cpu->gate_split(cpu, q.h, qg.h, T, H, hd), 0);
		CHECK_EQ_INT(gpu->gate_split(gpu, q.d, qg.d, T, H, hd), 0);
		compare("gate_split", &q, q.h, T * H * hd);
		CHECK_EQ_INT(cpu->gate_apply(cpu, x.h, qg.h, T, H, hd), 0);
		CHECK_EQ_INT(gpu->gate_apply(gpu, x.d, qg.d, T, H, hd), 0);
		compare("gate_apply", &x, x.h, T * H * hd);
		freebuf(&x);
		freebuf(&qg);
		freebuf(&q);
		free(pos);
		free(freq);
		gpu->free(gpu, dpos);
		gpu->free(gpu, dfreq);
	}
	static const int64_t gs[][5] = {{2, 4, 16, 16, 4}, {4, 8, 128, 128, 4}};
	for (size_t s = 0; s < 2; s++) {
		const int64_t Hk = gs[s][0], Hv = gs[s][1], dk = gs[s][2], dv = gs[s][3], K = gs[s][4];
		const int64_t C = 2 * Hk * dk + Hv * dv, W = C + Hv * dv;
		const int64_t ns[3] = {40, 5, 1}, T = 46;
		float *conv = rnd_bf(C * K, 0.5f), *alog = rnd_bf(Hv, 1.0f), *dtb = rnd_bf(Hv, 1.0f);
		float *nw = rnd_bf(dv, 1.0f);
		for (int64_t i = 0; i < dv; i++)
			nw[i] += 1.0f;
		struct atlas_gdn_desc hd_ = {Hk, Hv, dk, dv, K, 1e-6f, conv, alog, dtb, nw};
		struct atlas_gdn_desc dd = hd_;
		dd.conv_w = f32_dev(conv, C * K);
		dd.A_log = f32_dev(alog, Hv);
		dd.dt_bias = f32_dev(dtb, Hv);
		dd.norm_w = f32_dev(nw, dv);
		/* each item's state holds a layer before this one (off floats)
		 * that the op must leave alone */
		const int64_t sf = atlas_gdn_state_floats(&hd_), off = 64;
		struct atlas_gdn_item hi[3], di[3];
		float *hs[3], *ds[3], *hsn, *dsn;
		for (int i = 0, row = 0; i < 3; row += (int)ns[i], i++) {
			hs[i] = rnd_bf(off + sf, 0.3f);
			ds[i] = f32_dev(hs[i], off + sf);
			hi[i] = (struct atlas_gdn_item){.row0 = row, .n = ns[i], .state = hs[i],
							.fresh = i == 0};
			di[i] = hi[i];
			di[i].state = ds[i];
		}
		hsn = calloc((size_t)(off + sf), 4);
		dsn = f32_dev(hsn, off + sf);
		hi[0].snap_at = di[0].snap_at = 17;
		hi[0].snap = hsn;
		di[0].snap = dsn;
		struct atlas_gdn_item *ditems = gpu->alloc(gpu, sizeof(di));
		gpu->upload(gpu, ditems, di, sizeof(di));
		float *hscr = malloc((size_t)(T * C) * 4), *dscr = gpu->alloc(gpu, (size_t)(T * C) * 4);
		struct buf qkvz = mkbuf(T * W, 1.0f), ba = mkbuf(T * 2 * Hv, 1.0f);
		struct buf out = mkbuf(T * Hv * dv, 1.0f);
		poison(&out);
		CHECK_EQ_INT(cpu->deltanet(cpu, out.h, qkvz.h, ba.h, &hd_, hi, 3, off, hscr), 0);
		CHECK_EQ_INT(gpu->deltanet(gpu, out.d, qkvz.d, ba.d, &dd, ditems, 3, off, dscr), 0);
		char what[96];
		snprintf(what, sizeof(what), "deltanet Hk=%lld Hv=%lld dk=%lld dv=%lld out",
			 (long long)Hk, (long long)Hv, (long long)dk, (long long)dv);
		compare(what, &out, out.h, T * Hv * dv);
		for (int i = 0; i < 3; i++) {
			snprintf(what, sizeof(what), "deltanet dk=%lld state of item %d (%lld rows)",
				 (long long)dk, i, (long long)ns[i]);
			compare_f32(what, ds[i], hs[i], off + sf);
		}
		snprintf(what, sizeof(what), "deltanet dk=%lld snapshot after 17 rows", (long long)dk);
		compare_f32(what, dsn, hsn, off + sf);
		gpu->free(gpu, ditems);
		gpu->free(gpu, dscr);
		free(hscr);
		for (int i = 0; i < 3; i++) {
			free(hs[i]);
			gpu->free(gpu, ds[i]);
		}
		free(hsn);
		gpu->free(gpu, dsn);
		freebuf(&qkvz);
		freebuf(&ba);
		freebuf(&out);
		gpu->free(gpu, (void *)dd.conv_w);
		gpu->free(gpu, (void *)dd.A_log);
		gpu->free(gpu, (void *)dd.dt_bias);
		gpu->free(gpu, (void *)dd.norm_w);
		free(conv);
		free(alog);
		free(dtb);
		free(nw);
	}
}

int main(void)
{
	cpu = atlas_backend_cpu_new();
	/* the FP4B kernels are tested whatever the model-level default (NVFP4
	 * loads dequantized unless ATLAS_FP4_NATIVE=1): without it the backend
	 * refuses FP4B blobs and test_fp4b sees ATLAS_EUNSUPPORTED */
	setenv("ATLAS_FP4_NATIVE", "1", 1);
	gpu = atlas_backend_open("cuda");
	if (!gpu) {
		printf("1..0 # skip no CUDA device: %s\n", atlas_errmsg());
		return 0;
	}
	RUN(test_matmul);
	RUN(test_norms);
	RUN(test_elementwise);
	RUN(test_embed);
	RUN(test_rope);
	RUN(test_attention);
	RUN(test_sample);
	RUN(test_sample_greedy);
	RUN(test_logits);
	RUN(test_fill);
	RUN(test_graph);
	RUN(test_fused);
	RUN(test_invariant);
	RUN(test_attention_inv);
	RUN(test_kvq);
	RUN(test_moe);
	RUN(test_f8b);
	RUN(test_w4b);
	RUN(test_fp4b);
	RUN(test_w8a8);
	RUN(test_hybrid);
	CHECK_EQ_INT(gpu->sync(gpu), 0);
	printf("# worst relative L2 error: %.3g (limit %g)\n", worst, TOL);
	gpu->destroy(gpu);
	cpu->destroy(cpu);
	return harness_done();
}
