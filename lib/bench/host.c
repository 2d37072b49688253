/* host.c - what atlas-bench needs from a backend that the CPU backend
 * lacks: random fill of its (host) memory for synthetic models, and its
 * two ceilings (a threaded memcpy, its own matmul op) timed here with the
 * monotonic clock. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/error.h"
#include "../core/threads.h"
#include "../core/clock.h"

double atlas_bench_now_ms(void)
{
	return atlas_now() * 1e3;
}

struct fill {
	void *dst;              /* destination */
	enum atlas_dtype dt;    /* its element type */
	uint64_t seed;          /* hash key */
	float lo, span;         /* value range lo .. lo + span */
};

/* A 64-bit mix (splitmix64's finalizer) of (seed, index). */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void fill_range(void *ctx, int64_t b, int64_t e)
{
	const struct fill *f = ctx;
	for (int64_t i = b; i < e; i++) {
		double u = (double)(mix(f->seed ^ ((uint64_t)i * 0xd1b54a32d192ed03ull)) >> 11) /
			   9007199254740992.0;
		float v = f->lo + f->span * (float)u;
		if (f->dt == ATLAS_DTYPE_F32)
			((float *)f->dst)[i] = v;
		else if (f->dt == ATLAS_DTYPE_BF16)
			((uint16_t *)f->dst)[i] = atlas_f32_to_bf16(v);
		else
			((uint16_t *)f->dst)[i] = atlas_f32_to_f16(v);
	}
}

static int host_fill(struct atlas_backend *be, void *dst, enum atlas_dtype dt, int64_t n,
		     uint64_t seed, float lo, float hi)
{
	struct fill f = {dst, dt, mix(seed), lo, hi - lo};
	if (dt != ATLAS_DTYPE_F32 && dt != ATLAS_DTYPE_F16 && dt != ATLAS_DTYPE_BF16)
		return atlas_error(ATLAS_EUNSUPPORTED, "host fill: unsupported dtype '%s'",
				   atlas_dtype_name(dt));
	if (n > 0)
		atlas_parallel_for(n, 1 << 16, fill_range, &f);
	return 0;
}

void atlas_bench_prepare(struct atlas_backend *be)
{
	if (!be->fill_random && !strcmp(be->name, "cpu"))
		be->fill_random = host_fill;
}

struct copy {
	char *dst;              /* destination */
	const char *src;        /* source */
};

static void copy_range(void *ctx, int64_t b, int64_t e)
{
	const struct copy *c = ctx;
	memcpy(c->dst + b * 4096, c->src + b * 4096, (size_t)(e - b) * 4096);
}

/* Copy bandwidth of the host: best of 5 threaded copies of `bytes`. */
static int host_copy_gbs(int64_t bytes, double *out)
{
	int64_t pages = bytes / 4096 > 0 ? bytes / 4096 : 1;
	char *a = malloc((size_t)pages * 4096), *b = malloc((size_t)pages * 4096);
	double best = 1e30;
	if (!a || !b) {
		free(a);
		free(b);
		return atlas_error(ATLAS_ENOMEM, "cannot allocate %lld bytes to copy",
				   (long long)bytes);
	}
	memset(a, 1, (size_t)pages * 4096);
	memset(b, 2, (size_t)pages * 4096); /* touch every page before timing */
	struct copy c = {b, a};
	for (int i = 0; i < 6; i++) {
		double t0 = atlas_bench_now_ms();
		atlas_parallel_for(pages, 64, copy_range, &c);
		double ms = atlas_bench_now_ms() - t0;
		if (i > 0 && ms < best)
			best = ms;
	}
	*out = 2.0 * (double)pages * 4096 / (best / 1e3) / 1e9;
	free(a);
	free(b);
	return 0;
}

/* The backend's matmul at T = N = K = n with BF16 weights: best of 3. */
static int backend_gemm_tflops(struct atlas_backend *be, int64_t n, double *out)
{
	size_t act = atlas_dtype_size(be->act_dtype);
	void *x = be->alloc(be, (size_t)(n * n) * act), *y = be->alloc(be, (size_t)(n * n) * act);
	void *w = be->alloc(be, (size_t)(n * n) * 2);
	int rc = (!x || !y || !w) ? atlas_error(ATLAS_ENOMEM, "cannot allocate a %lld^3 product",
						(long long)n)
				  : 0;
	double best = 1e30;
	if (!rc && be->fill_random)
		rc = be->fill_random(be, w, ATLAS_DTYPE_BF16, n * n, 1, -0.1f, 0.1f);
	for (int i = 0; i < 4 && !rc; i++) {
		double t0 = atlas_bench_now_ms();
		rc = be->matmul(be, y, x, w, NULL, ATLAS_DTYPE_BF16, n, n, n);
		if (!rc)
			rc = be->sync(be);
		double ms = atlas_bench_now_ms() - t0;
		if (i > 0 && ms < best)
			best = ms;
	}
	if (!rc)
		*out = 2.0 * (double)n * (double)n * (double)n / (best / 1e3) / 1e12;
	be->free(be, x);
	be->free(be, y);
	be->free(be, w);
	return rc;
}

int atlas_bench_ceilings(struct atlas_backend *be, int64_t copy_bytes, int64_t gemm_n,
			 struct atlas_bench_ceilings *out)
{
	double v = 0;
	int rc;
	memset(out, 0, sizeof(*out));
	out->copy_bytes = copy_bytes;
	out->gemm_n = gemm_n;
	if (!be->measure) {
		atlas_bench_prepare(be);
		snprintf(out->cublaslt_note, sizeof(out->cublaslt_note),
			 "no cuBLASLt on backend '%s'", be->name);
		if ((rc = host_copy_gbs(copy_bytes, &out->copy_gbs)))
			return atlas_error_wrap(rc, "cannot measure the copy bandwidth");
		if ((rc = backend_gemm_tflops(be, gemm_n, &out->gemm_tflops)))
			return atlas_error_wrap(rc, "cannot measure the matrix rate");
		return 0;
	}
	if (!be->measure(be, "runtime", 0, &v))
		out->runtime_version = (int)v;
	if ((rc = be->measure(be, "copy", copy_bytes, &out->copy_gbs)))
		return atlas_error_wrap(rc, "cannot measure the copy bandwidth");
	if ((rc = be->measure(be, "gemm", gemm_n, &out->gemm_tflops)))
		return atlas_error_wrap(rc, "cannot measure the matrix rate");
	if (be->measure(be, "gemm-cublaslt", gemm_n, &out->cublaslt_tflops)) {
		out->cublaslt_tflops = 0;
		snprintf(out->cublaslt_note, sizeof(out->cublaslt_note), "%s", atlas_errmsg());
	}
	return 0;
}
