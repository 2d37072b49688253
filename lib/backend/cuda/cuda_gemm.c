/* cuda_gemm.c - the host side of the tensor-core GEMM
 * (kernels/sm90/common/gemm_tc.cu): shape checks, tile choice, TMA tensor
 * maps, launch.
 *
 * The kernel reads x and W through TMA tensor maps (CUtensorMap, 128
 * bytes each, passed by value as __grid_constant__ kernel parameters, so
 * a graph capture copies them with the launch). They are encoded with
 * the driver's cuTensorMapEncodeTiled, reached through
 * cudaGetDriverEntryPointByVersion: libatlas never links libcuda. Only
 * <cuda.h>'s types are used here.
 *
 * Encoded maps are kept in a small round-robin cache keyed by (context,
 * address, rows, columns, box rows): a prefill step reuses the same
 * weights and activation buffers every layer and every step. An entry
 * describes memory, not ownership, so a freed and reused address with
 * the same shape still gets a correct map. */
#include "cuda_internal.h"

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../../core/error.h"
#include "kernel_args.h"

/* Tile rows (T) and the K slice of one pipeline stage (gemm_tc.cu). */
#define TCG_BM 128
#define TCG_BK 64
#define TCG_THREADS 384
#define TCG_CACHE 64

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
				    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
				    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
				    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static pthread_once_t encode_once = PTHREAD_ONCE_INIT;
static encode_tiled_fn encode_tiled; /* NULL: the driver lacks it (no TMA GEMM) */

static void encode_load(void)
{
	void *fn = NULL;
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
	if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
					     cudaEnableDefault, &q) == cudaSuccess &&
	    q == cudaDriverEntryPointSuccess)
		encode_tiled = (encode_tiled_fn)fn;
	else
		cudaGetLastError(); /* not sticky; leave no error for the next check */
}

struct map_entry {
	const struct cuda_ctx *c; /* NULL: empty slot */
	const void *p;            /* the matrix */
	int64_t rows, cols;       /* its shape (row-major BF16) */
	uint32_t box_rows;        /* rows per TMA box */
	CUtensorMap map;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct map_entry cache[TCG_CACHE];
static int cache_next;

/* *m = the map of BF16 matrix p [rows, cols] (row stride cols), boxes of
 * box_rows x 64 elements, 128-byte swizzle, zero fill out of bounds. */
static int get_map(const struct cuda_ctx *c, const void *p, int64_t rows, int64_t cols,
		   uint32_t box_rows, CUtensorMap *m)
{
	int rc = 0;
	pthread_mutex_lock(&cache_lock);
	for (int i = 0; i < TCG_CACHE; i++) {
		const struct map_entry *e = &cache[i];
		if (e->c == c && e->p == p && e->rows == rows && e->cols == cols &&
		    e->box_rows == box_rows) {
			*m = e->map;
			pthread_mutex_unlock(&cache_lock);
			return 0;
		}
	}
	cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
	cuuint64_t stride[1] = {(cuuint64_t)cols * 2}; /* bytes, a multiple of 16 */
	cuuint32_t box[2] = {TCG_BK, box_rows};
	cuuint32_t estride[2] = {1, 1};
	CUresult r = encode_tiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dim, stride, box,
				  estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
				  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
				  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS) {
		rc = atlas_error(ATLAS_EIO,
				 "cuTensorMapEncodeTiled failed (error %d) for a %lld x %lld matrix",
				 (int)r, (long long)rows, (long long)cols);
	} else {
		struct map_entry *e = &cache[cache_next];
		cache_next = (cache_next + 1) % TCG_CACHE;
		e->c = c;
		e->p = p;
		e->rows = rows;
		e->cols = cols;
		e->box_rows = box_rows;
		e->map = *m;
	}
	pthread_mutex_unlock(&cache_lock);
	return rc;
}

static int tmap_ready(const struct cuda_ctx *c)
{
	if (strcmp(c->arch, "sm90") != 0)
		return 0; /* the kernels are sm_90a code (Hopper only) */
	pthread_once(&encode_once, encode_load);
	return encode_tiled != NULL;
}

int atlas_cuda_tmap(const struct cuda_ctx *c, const void *p, int64_t rows, int64_t cols,
		    uint32_t box_rows, void *out)
{
	if (!tmap_ready(c))
		return ATLAS_EUNSUPPORTED;
	cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
	cuuint64_t stride[1] = {(cuuint64_t)cols * 2};
	cuuint32_t box[2] = {TCG_BK, box_rows};
	cuuint32_t estride[2] = {1, 1};
	CUresult r = encode_tiled((CUtensorMap *)out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p,
				  dim, stride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
				  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
				  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS)
		return atlas_error(ATLAS_EIO,
				   "cuTensorMapEncodeTiled failed (error %d) for a %lld x %lld matrix",
				   (int)r, (long long)rows, (long long)cols);
	return 0;
}

int atlas_cuda_tmap_cached(const struct cuda_ctx *c, const void *p, int64_t rows, int64_t cols,
			   uint32_t box_rows, void *out)
{
	if (!tmap_ready(c))
		return ATLAS_EUNSUPPORTED;
	return get_map(c, p, rows, cols, box_rows, (CUtensorMap *)out);
}

/* Tile width: 256 columns unless 128 x 256 tiles would not give every SM
 * one; then 128 (twice the blocks). */
static int pick_bn(const struct cuda_ctx *c, int64_t T, int64_t N)
{
	int64_t tiles = ((T + TCG_BM - 1) / TCG_BM) * ((N + 255) / 256);
	return tiles < (c->sms > 0 ? c->sms : 132) ? 128 : 256;
}

/* K ranges of the split-K GEMM. One block fits an SM (its shared memory):
 * when the tiles leave SMs idle, as many ranges as keep the blocks within
 * one wave (tiles x splits <= SMs; more waves measured slower: the gate
 * product at T = 64 took 54.9 us split 4 ways in 3 waves against 45.2 in
 * one wave of 96 blocks), each at least 16 K slices (a block's setup is
 * a few microseconds), the partials within gemm_ws. 1: no split. */
static int pick_splits(const struct cuda_ctx *c, int64_t tiles, int64_t T, int64_t Nsum,
		       int64_t K)
{
	const int64_t sms = c->sms > 0 ? c->sms : 132;
	if (!c->gemm_ws || !c->kern[ATLAS_CK_GEMM_TC_REDUCE] || c->no_split_k || tiles * 2 > sms)
		return 1;
	int64_t s = sms / tiles;
	const int64_t nk = (K + TCG_BK - 1) / TCG_BK;
	if (s > nk / 16)
		s = nk / 16;
	/* each segment's partials start 16-byte aligned: up to 3 floats of
	 * padding a segment */
	while (s > 1 && ((size_t)(s * T * Nsum) + 3 * ATLAS_TCG_MAXSEG) * 4 > c->gemm_ws_cap)
		s--;
	return s > 1 ? (int)s : 1;
}

/* a's tensor maps: x [T, K] (boxes of TCG_BM rows) and the n weights
 * w[i] [N[i], K] (boxes of box_rows), and a.N. */
static int set_maps(const struct cuda_ctx *c, struct atlas_tcg_args *a, const void *x, int64_t T,
		    int64_t K, int n, const void *const *w, const int64_t *N, uint32_t box_rows)
{
	CUtensorMap m;
	int rc = get_map(c, x, T, K, TCG_BM, &m);
	if (rc)
		return rc;
	memcpy(&a->map_x, &m, sizeof(m));
	for (int i = 0; i < n; i++) {
		if ((rc = get_map(c, w[i], N[i], K, box_rows, &m)))
			return rc;
		memcpy(&a->map[i], &m, sizeof(m));
		a->N[i] = N[i];
	}
	return 0;
}

int atlas_cuda_gemm_tc(struct cuda_ctx *c, int n, void *const *out, int out_f32, const void *x,
		       const void *const *w, const void *const *bias, int64_t T, const int64_t *N,
		       int64_t K)
{
	/* TMA needs 16-byte aligned bases and row strides; coordinates are
	 * int32; grid y (all segments' N tiles) is at most 65535 */
	if (n < 1 || n > ATLAS_TCG_MAXSEG || T < 1 || K < 1 || K % 8 || T > INT32_MAX - TCG_BM ||
	    K > INT32_MAX - TCG_BK || ((uintptr_t)x & 15))
		return 0;
	int64_t Nsum = 0;
	for (int i = 0; i < n; i++) {
		if (N[i] < 1 || N[i] > (int64_t)65535 * 128 || ((uintptr_t)w[i] & 15))
			return 0;
		Nsum += N[i];
	}
	if (strcmp(c->arch, "sm90") != 0)
		return 0; /* the kernel is sm_90a code (Hopper only) */
	pthread_once(&encode_once, encode_load);
	if (!encode_tiled)
		return 0;
	struct atlas_tcg_args a;
	memset(&a, 0, sizeof(a));
	int bn = pick_bn(c, T, Nsum);
	int64_t ny = 0;
	for (int i = 0; i < n; i++) {
		a.ny[i] = (int)((N[i] + bn - 1) / bn);
		ny += a.ny[i];
	}
	if (ny > 65535)
		return 0;
	int rc = set_maps(c, &a, x, T, K, n, w, N, (uint32_t)bn);
	if (rc)
		return rc;
	for (int i = 0; i < n; i++) {
		a.out[i] = out[i];
		a.bias[i] = bias ? bias[i] : NULL;
	}
	a.T = T, a.K = K, a.nseg = n, a.bn = bn, a.out_f32 = out_f32;
	const int64_t mt = (T + TCG_BM - 1) / TCG_BM;
	a.splits = pick_splits(c, mt * ny, T, Nsum, K);
	if (a.splits > 1) {
		a.ws = c->gemm_ws;
		int64_t off = 0;
		for (int i = 0; i < n; i++) {
			a.ws_off[i] = off;
			/* rounded up to 4 floats: every segment's partials start
			 * 16-byte aligned (float2 stores, float4 reduce loads) */
			off += ((int64_t)a.splits * T * N[i] + 3) & ~(int64_t)3;
		}
	}
	void *args[] = {&a};
	rc = atlas_cuda_launch_z(c, out_f32 ? ATLAS_CK_GEMM_TC_F32 : ATLAS_CK_GEMM_TC, (unsigned)mt,
				 (unsigned)ny, (unsigned)a.splits, TCG_THREADS, ATLAS_TCG_SMEM, args);
	if (!rc && a.splits > 1) {
		int64_t most = 0;
		for (int i = 0; i < n; i++)
			most = T * N[i] > most ? T * N[i] : most;
		const int64_t blocks = ((most + 3) / 4 + 255) / 256;
		rc = atlas_cuda_launch(c, ATLAS_CK_GEMM_TC_REDUCE,
				       (unsigned)(blocks < 4096 ? blocks : 4096), (unsigned)n, 256, 0,
				       args);
	}
	return rc < 0 ? rc : 1;
}

int64_t atlas_cuda_gemm_tc_inv_tiles(const struct cuda_ctx *c, const struct atlas_gemv_args *g)
{
	const int n = g->swiglu ? 2 : g->nseg;
	if (!c->kern[ATLAS_CK_GEMM_TC_INV] || g->T < 1 || g->K < 1 || g->K % 8 ||
	    g->T > INT32_MAX - TCG_BM || g->K > INT32_MAX - TCG_BK || ((uintptr_t)g->x & 15) ||
	    n > ATLAS_TCG_MAXSEG || !tmap_ready(c))
		return 0;
	/* the kernel folds ranges between 64-wide K slices and runs every
	 * k-step of a slice: the chunks of 32 and of a range must be even */
	const int64_t nch = CEIL_DIV(g->K, 32), cpw = CEIL_DIV(nch, 8 / g->rpb);
	if (nch % 2 || cpw % 2)
		return 0;
	int64_t ny = 0;
	for (int i = 0; i < n; i++) {
		if (g->seg[i].N < 1 || g->seg[i].N > (int64_t)65535 * 64 || ((uintptr_t)g->seg[i].w & 15))
			return 0;
		if (!g->swiglu || i == 0) /* swiglu: 64 features (gate and up rows) a tile */
			ny += CEIL_DIV(g->seg[i].N, g->swiglu ? 64 : 128);
	}
	return ny > 65535 ? 0 : ny * CEIL_DIV(g->T, TCG_BM);
}

int atlas_cuda_gemm_tc_inv(struct cuda_ctx *c, const struct atlas_gemv_args *g, float *ws,
			   const long long *ws_off, int splits)
{
	const int n = g->swiglu ? 2 : g->nseg;
	struct atlas_tcg_args a;
	memset(&a, 0, sizeof(a));
	a.wpr = 8 / g->rpb;
	a.swiglu = g->swiglu;
	a.out_f32 = g->out_f32;
	a.T = g->T, a.K = g->K, a.bn = 128;
	a.nseg = g->swiglu ? 1 : n;
	a.ws = ws;
	int64_t ny = 0;
	for (int i = 0; i < a.nseg; i++) {
		a.ny[i] = (int)CEIL_DIV(g->seg[i].N, g->swiglu ? 64 : 128);
		ny += a.ny[i];
		a.ws_off[i] = ws ? ws_off[i] : 0;
	}
	const void *w[ATLAS_TCG_MAXSEG];
	int64_t N[ATLAS_TCG_MAXSEG];
	for (int i = 0; i < n; i++) {
		w[i] = g->seg[i].w;
		N[i] = g->seg[i].N;
		a.out[i] = g->seg[i].out;
		a.bias[i] = g->swiglu ? NULL : g->seg[i].bias;
	}
	int rc = set_maps(c, &a, g->x, g->T, g->K, n, w, N, g->swiglu ? 64 : 128);
	if (rc)
		return rc;
	void *args[] = {&a};
	return atlas_cuda_launch_z(c, ATLAS_CK_GEMM_TC_INV, (unsigned)CEIL_DIV(g->T, TCG_BM),
				   (unsigned)ny, (unsigned)(ws ? splits : 1), TCG_THREADS,
				   ATLAS_TCG_SMEM, args);
}
