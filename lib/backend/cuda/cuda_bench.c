/* cuda_bench.c - the CUDA backend's optional speed and benchmark ops:
 * random fill on the device, CUDA graph capture and replay, per-kernel
 * timing with events, and the two ceilings (copy bandwidth, BF16 matrix
 * rate; cuBLASLt as a baseline when libcublasLt.so.13 loads).
 *
 * cuBLASLt is reached with dlopen, never linked: it is a measured
 * baseline only, and binaries must start without it. */
#include "cuda_internal.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"

/* --- random fill ----------------------------------------------------- */

static int op_fill_random(struct atlas_backend *be, void *dst, enum atlas_dtype dt, int64_t n,
			  uint64_t seed, float lo, float hi)
{
	int wdt = (int)dt;
	long long nn = n;
	unsigned long long s = seed;
	void *args[] = {&dst, &wdt, &nn, &s, &lo, &hi};
	if (dt != ATLAS_DTYPE_F32 && dt != ATLAS_DTYPE_F16 && dt != ATLAS_DTYPE_BF16 &&
	    dt != ATLAS_DTYPE_F8_E4M3 && dt != ATLAS_DTYPE_U8)
		return atlas_error(ATLAS_EUNSUPPORTED, "cuda fill_random: unsupported dtype '%s'",
				   atlas_dtype_name(dt));
	if (n <= 0)
		return 0;
	int64_t blocks = CEIL_DIV(n, 256);
	if (blocks > 65535 * 8)
		blocks = 65535 * 8; /* grid-stride beyond */
	return atlas_cuda_launch(be->ctx, ATLAS_CK_FILL, (unsigned)blocks, 1, 256, 0, args);
}

/* --- graphs ------------------------------------------------------------ */

static int op_capture_begin(struct atlas_backend *be)
{
	struct cuda_ctx *c = be->ctx;
	if (c->capturing)
		return atlas_error(ATLAS_EINVAL, "cuda: a capture is already open");
	int rc = atlas_cuda_check(
	    c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), "begin capture");
	if (!rc)
		c->capturing = 1;
	return rc;
}

static void *op_capture_end(struct atlas_backend *be)
{
	struct cuda_ctx *c = be->ctx;
	cudaGraph_t g = NULL;
	cudaGraphExec_t x = NULL;
	if (!c->capturing) {
		atlas_error(ATLAS_EINVAL, "cuda: no capture is open");
		return NULL;
	}
	c->capturing = 0;
	if (atlas_cuda_check(c, cudaStreamEndCapture(c->stream, &g), "end capture"))
		return NULL;
	cudaError_t e = cudaGraphInstantiate(&x, g, 0);
	cudaGraphDestroy(g);
	if (atlas_cuda_check(c, e, "graph instantiate"))
		return NULL;
	return x;
}

static int op_replay(struct atlas_backend *be, void *graph)
{
	struct cuda_ctx *c = be->ctx;
	return atlas_cuda_check(c, cudaGraphLaunch((cudaGraphExec_t)graph, c->stream),
				"graph launch");
}

static void op_graph_free(struct atlas_backend *be, void *graph)
{
	if (graph)
		cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

/* --- per-kernel timing ------------------------------------------------- */

static int op_profile(struct atlas_backend *be, bool on)
{
	struct cuda_ctx *c = be->ctx;
	if (on && !c->prof_ev) {
		c->prof_ev = calloc(2 * ATLAS_CUDA_PROF_MAX, sizeof(*c->prof_ev));
		c->prof_k = calloc(ATLAS_CUDA_PROF_MAX, 1);
		if (!c->prof_ev || !c->prof_k)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		for (int i = 0; i < 2 * ATLAS_CUDA_PROF_MAX; i++)
			if (cudaEventCreate(&c->prof_ev[i]) != cudaSuccess) {
				/* keep the ones made: release frees non-NULL events */
				return atlas_error(ATLAS_EIO, "cannot create CUDA events");
			}
	}
	if (on)
		c->prof_n = 0;
	c->prof_on = on;
	return 0;
}

static int op_profile_report(struct atlas_backend *be, struct atlas_kernel_time *rows, int max)
{
	struct cuda_ctx *c = be->ctx;
	int nrows = 0, slot[ATLAS_CK_COUNT];
	for (int k = 0; k < ATLAS_CK_COUNT; k++)
		slot[k] = -1;
	int rc = atlas_cuda_check(c, cudaStreamSynchronize(c->stream), "profile");
	if (rc)
		return rc;
	for (int i = 0; i < c->prof_n; i++) {
		int k = c->prof_k[i];
		float ms = 0;
		if (cudaEventElapsedTime(&ms, c->prof_ev[2 * i], c->prof_ev[2 * i + 1]) != cudaSuccess)
			return atlas_error(ATLAS_EIO, "cannot read kernel timings");
		if (slot[k] < 0) {
			if (nrows == max)
				continue;
			slot[k] = nrows;
			rows[nrows++] = (struct atlas_kernel_time){atlas_cuda_kernel_name(k), 0, 0};
		}
		rows[slot[k]].calls++;
		rows[slot[k]].ms += ms;
	}
	return nrows;
}

/* --- ceilings ---------------------------------------------------------- */

/* Best time in ms of `reps` timed repetitions of fn(arg) on the stream,
 * after one untimed warm-up. */
static int best_ms(struct cuda_ctx *c, int (*fn)(void *), void *arg, int reps, double *best)
{
	cudaEvent_t a, b;
	int rc;
	if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess)
		return atlas_error(ATLAS_EIO, "cannot create CUDA events");
	*best = 1e30;
	if ((rc = fn(arg)))
		goto out;
	for (int i = 0; i < reps; i++) {
		float ms = 0;
		cudaEventRecord(a, c->stream);
		if ((rc = fn(arg)))
			goto out;
		cudaEventRecord(b, c->stream);
		if ((rc = atlas_cuda_check(c, cudaEventSynchronize(b), "timing")))
			goto out;
		cudaEventElapsedTime(&ms, a, b);
		if (ms < *best)
			*best = ms;
	}
out:
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return rc;
}

struct copy_job {
	struct cuda_ctx *c; /* backend */
	void *dst, *src;    /* device buffers */
	size_t bytes;       /* each */
};

static int copy_once(void *arg)
{
	struct copy_job *j = arg;
	return atlas_cuda_check(j->c, cudaMemcpyAsync(j->dst, j->src, j->bytes,
						      cudaMemcpyDeviceToDevice, j->c->stream),
				"copy");
}

static int measure_copy(struct atlas_backend *be, int64_t size, double *out)
{
	struct cuda_ctx *c = be->ctx;
	struct copy_job j = {c, NULL, NULL, (size_t)size};
	double ms;
	int rc;
	if (cudaMalloc(&j.src, j.bytes) != cudaSuccess || cudaMalloc(&j.dst, j.bytes) != cudaSuccess) {
		cudaGetLastError();
		cudaFree(j.src);
		return atlas_error(ATLAS_ENOMEM, "cannot allocate 2 x %lld MiB to measure copies",
				   (long long)(size >> 20));
	}
	cudaMemsetAsync(j.src, 1, j.bytes, c->stream);
	rc = best_ms(c, copy_once, &j, 10, &ms);
	cudaFree(j.src);
	cudaFree(j.dst);
	if (!rc)
		*out = 2.0 * (double)size / (ms * 1e-3) / 1e9;
	return rc;
}

struct gemm_job {
	struct atlas_backend *be; /* backend */
	void *out, *x, *w;        /* [n, n] bf16 each */
	int64_t n;                /* T = N = K */
};

static int gemm_once(void *arg)
{
	struct gemm_job *j = arg;
	return j->be->matmul(j->be, j->out, j->x, j->w, NULL, ATLAS_DTYPE_BF16, j->n, j->n, j->n);
}

/* Three [n, n] BF16 matrices outside the arena, x and w random. */
static int gemm_buffers(struct atlas_backend *be, int64_t n, void **o, void **x, void **w)
{
	size_t bytes = (size_t)(n * n) * 2;
	*o = *x = *w = NULL;
	if (cudaMalloc(o, bytes) != cudaSuccess || cudaMalloc(x, bytes) != cudaSuccess ||
	    cudaMalloc(w, bytes) != cudaSuccess) {
		cudaGetLastError();
		cudaFree(*o);
		cudaFree(*x);
		return atlas_error(ATLAS_ENOMEM, "cannot allocate 3 x %lld MiB to measure a GEMM",
				   (long long)(bytes >> 20));
	}
	int rc = op_fill_random(be, *x, ATLAS_DTYPE_BF16, n * n, 1, -1.0f, 1.0f);
	return rc ? rc : op_fill_random(be, *w, ATLAS_DTYPE_BF16, n * n, 2, -0.05f, 0.05f);
}

static int measure_gemm(struct atlas_backend *be, int64_t n, double *out)
{
	struct gemm_job j = {be, NULL, NULL, NULL, n};
	double ms;
	int rc = gemm_buffers(be, n, &j.out, &j.x, &j.w);
	if (!rc)
		rc = best_ms(be->ctx, gemm_once, &j, 5, &ms);
	cudaFree(j.out);
	cudaFree(j.x);
	cudaFree(j.w);
	if (!rc)
		*out = 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) / 1e12;
	return rc;
}

/* The cuBLASLt entry points used, found with dlsym. */
struct lt_api {
	cublasStatus_t (*create)(cublasLtHandle_t *);
	cublasStatus_t (*destroy)(cublasLtHandle_t);
	cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
	cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
	cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
				   const void *, size_t);
	cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t,
					int64_t);
	cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
	cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *);
	cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
	cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
				   const void *, size_t);
	cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
				    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
				    cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
				    cublasLtMatmulHeuristicResult_t *, int *);
	cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
				 cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t,
				 const void *, const void *, cublasLtMatrixLayout_t, void *,
				 cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t,
				 cudaStream_t);
};

/* One cuBLASLt product, ready to run: out = x w^T as row-major [n, n]
 * matrices, i.e. column-major out^T = op(w^T) x^T with op = transpose. */
struct lt_job {
	struct cuda_ctx *c;                /* backend */
	const struct lt_api *api;          /* entry points */
	cublasLtHandle_t h;                /* library handle */
	cublasLtMatmulDesc_t desc;         /* the operation */
	cublasLtMatrixLayout_t la, lb, lc; /* w, x, out */
	cublasLtMatmulHeuristicResult_t algo; /* the chosen algorithm */
	void *ws;                          /* workspace */
	size_t ws_bytes;                   /* its size */
	void *out, *x, *w;                 /* matrices */
};

static int lt_once(void *arg)
{
	struct lt_job *j = arg;
	float one = 1.0f, zero = 0.0f;
	cublasStatus_t s = j->api->matmul(j->h, j->desc, &one, j->w, j->la, j->x, j->lb, &zero,
					  j->out, j->lc, j->out, j->lc, &j->algo.algo, j->ws,
					  j->ws_bytes, j->c->stream);
	return s == CUBLAS_STATUS_SUCCESS ? 0
					  : atlas_error(ATLAS_EIO, "cublasLtMatmul failed: status %d",
							(int)s);
}

static int lt_load(void **dl, struct lt_api *a)
{
	*dl = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
	if (!*dl)
		return atlas_error(ATLAS_ENOTFOUND, "libcublasLt.so.13 is not installed");
	void **slots[] = {(void **)&a->create, (void **)&a->destroy, (void **)&a->desc_create,
			  (void **)&a->desc_destroy, (void **)&a->desc_set,
			  (void **)&a->layout_create, (void **)&a->layout_destroy,
			  (void **)&a->pref_create, (void **)&a->pref_destroy, (void **)&a->pref_set,
			  (void **)&a->heuristic, (void **)&a->matmul};
	static const char *const names[] = {
	    "cublasLtCreate", "cublasLtDestroy", "cublasLtMatmulDescCreate",
	    "cublasLtMatmulDescDestroy", "cublasLtMatmulDescSetAttribute",
	    "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy",
	    "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
	    "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulAlgoGetHeuristic",
	    "cublasLtMatmul"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!(*slots[i] = dlsym(*dl, names[i])))
			return atlas_error(ATLAS_ENOTFOUND, "libcublasLt.so.13 lacks '%s'", names[i]);
	return 0;
}

static int measure_cublaslt(struct atlas_backend *be, int64_t n, double *out)
{
	struct cuda_ctx *c = be->ctx;
	struct lt_api api;
	struct lt_job j = {.c = c, .api = &api, .ws_bytes = (size_t)64 << 20};
	cublasLtMatmulPreference_t pref = NULL;
	void *dl = NULL;
	double ms = 0;
	int found = 0, rc = lt_load(&dl, &api);
	if (rc)
		goto out;
	if ((rc = gemm_buffers(be, n, &j.out, &j.x, &j.w)))
		goto out;
	if (cudaMalloc(&j.ws, j.ws_bytes) != cudaSuccess) {
		cudaGetLastError();
		rc = atlas_error(ATLAS_ENOMEM, "cannot allocate the cuBLASLt workspace");
		goto out;
	}
	cublasOperation_t tn = CUBLAS_OP_T, nn = CUBLAS_OP_N;
	if (api.create(&j.h) != CUBLAS_STATUS_SUCCESS ||
	    api.desc_create(&j.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
	    api.desc_set(j.desc, CUBLASLT_MATMUL_DESC_TRANSA, &tn, sizeof(tn)) ||
	    api.desc_set(j.desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn)) ||
	    api.layout_create(&j.la, CUDA_R_16BF, (uint64_t)n, (uint64_t)n, n) ||
	    api.layout_create(&j.lb, CUDA_R_16BF, (uint64_t)n, (uint64_t)n, n) ||
	    api.layout_create(&j.lc, CUDA_R_16BF, (uint64_t)n, (uint64_t)n, n) ||
	    api.pref_create(&pref) ||
	    api.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &j.ws_bytes,
			 sizeof(j.ws_bytes)) ||
	    api.heuristic(j.h, j.desc, j.la, j.lb, j.lc, j.lc, pref, 1, &j.algo, &found) ||
	    found < 1) {
		rc = atlas_error(ATLAS_EIO, "cuBLASLt has no BF16 algorithm for %lld^3",
				 (long long)n);
		goto out;
	}
	rc = best_ms(c, lt_once, &j, 5, &ms);
	if (!rc)
		*out = 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) / 1e12;
out:
	if (dl) {
		cudaStreamSynchronize(c->stream);
		if (pref)
			api.pref_destroy(pref);
		if (j.la)
			api.layout_destroy(j.la);
		if (j.lb)
			api.layout_destroy(j.lb);
		if (j.lc)
			api.layout_destroy(j.lc);
		if (j.desc)
			api.desc_destroy(j.desc);
		if (j.h)
			api.destroy(j.h);
		dlclose(dl);
	}
	cudaFree(j.ws);
	cudaFree(j.out);
	cudaFree(j.x);
	cudaFree(j.w);
	return rc;
}

static int op_measure(struct atlas_backend *be, const char *what, int64_t size, double *out)
{
	struct cuda_ctx *c = be->ctx;
	int rc;
	if (c->capturing)
		return atlas_error(ATLAS_EINVAL, "cuda: cannot measure during a capture");
	if ((rc = atlas_cuda_check(c, cudaStreamSynchronize(c->stream), "measure")))
		return rc;
	if (!strcmp(what, "runtime")) {
		int v = 0;
		cudaRuntimeGetVersion(&v);
		*out = v;
		return 0;
	}
	if (size <= 0)
		return atlas_error(ATLAS_EINVAL, "measure '%s': size must be positive", what);
	if (!strcmp(what, "copy"))
		return measure_copy(be, size, out);
	if (!strcmp(what, "gemm"))
		return measure_gemm(be, size, out);
	if (!strcmp(what, "gemm-cublaslt"))
		return measure_cublaslt(be, size, out);
	return atlas_error(ATLAS_EINVAL, "unknown measurement '%s' (copy, gemm, gemm-cublaslt, runtime)",
			   what);
}

void atlas_cuda_bench_init(struct atlas_backend *be)
{
	be->fill_random = op_fill_random;
	be->capture_begin = op_capture_begin;
	be->capture_end = op_capture_end;
	be->replay = op_replay;
	be->graph_free = op_graph_free;
	be->profile = op_profile;
	be->profile_report = op_profile_report;
	be->measure = op_measure;
}

void atlas_cuda_bench_release(struct cuda_ctx *c)
{
	if (c->prof_ev) {
		for (int i = 0; i < 2 * ATLAS_CUDA_PROF_MAX; i++)
			if (c->prof_ev[i])
				cudaEventDestroy(c->prof_ev[i]);
		free(c->prof_ev);
	}
	free(c->prof_k);
	c->prof_ev = NULL;
	c->prof_k = NULL;
}
