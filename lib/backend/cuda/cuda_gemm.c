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
#include <stdlib.h>
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
	int64_t rows, cols;       /* its shape (row-major BF16, or FP8 bytes) */
	uint32_t box_rows;        /* rows per TMA box */
	int f8;                   /* 1: bytes (FP8), boxes 128 wide */
	CUtensorMap map;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct map_entry cache[TCG_CACHE];
static int cache_next;

/* *m = the map of BF16 matrix p [rows, cols] (row stride cols), boxes of
 * box_rows x 64 elements, or (f8) of FP8 bytes, boxes of box_rows x 128;
 * 128-byte swizzle, zero fill out of bounds. */
static int get_map8(const struct cuda_ctx *c, const void *p, int64_t rows, int64_t cols,
		    uint32_t box_rows, int f8, CUtensorMap *m)
{
	int rc = 0;
	pthread_mutex_lock(&cache_lock);
	for (int i = 0; i < TCG_CACHE; i++) {
		const struct map_entry *e = &cache[i];
		if (e->c == c && e->p == p && e->rows == rows && e->cols == cols &&
		    e->box_rows == box_rows && e->f8 == f8) {
			*m = e->map;
			pthread_mutex_unlock(&cache_lock);
			return 0;
		}
	}
	cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
	cuuint64_t stride[1] = {(cuuint64_t)cols * (f8 ? 1 : 2)}; /* bytes, a multiple of 16 */
	cuuint32_t box[2] = {f8 ? 2 * TCG_BK : TCG_BK, box_rows};
	cuuint32_t estride[2] = {1, 1};
	CUresult r = encode_tiled(m, f8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
				  2, (void *)p, dim, stride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
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
		e->f8 = f8;
		e->map = *m;
	}
	pthread_mutex_unlock(&cache_lock);
	return rc;
}

static int get_map(const struct cuda_ctx *c, const void *p, int64_t rows, int64_t cols,
		   uint32_t box_rows, CUtensorMap *m)
{
	return get_map8(c, p, rows, cols, box_rows, 0, m);
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
 * one wave of 96 blocks), each at least 1024 columns of K (16 K slices
 * of 64, 8 of the FP8 form's 128: a block's setup is a few
 * microseconds), the partials within gemm_ws. 1: no split. */
static int pick_splits(const struct cuda_ctx *c, int64_t tiles, int64_t T, int64_t Nsum,
		       int64_t nk, int bk)
{
	const int64_t sms = c->sms > 0 ? c->sms : 132;
	if (!c->gemm_ws || !c->kern[ATLAS_CK_GEMM_TC_REDUCE] || c->no_split_k || tiles * 2 > sms)
		return 1;
	int64_t s = sms / tiles;
	if (s > nk * bk / 1024)
		s = nk * bk / 1024;
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

/* Launch kernel k (atlas_gemm_tc*, its a.T, a.nseg, a.N set) over
 * ceil(T / 128) x ny tiles, split over K (nk slices of bk columns) when the tiles leave
 * SMs idle, then atlas_gemm_tc_reduce: 1, or a negative code. */
static int launch_split(struct cuda_ctx *c, enum atlas_cuda_kernel k, struct atlas_tcg_args *a,
			int64_t ny, int64_t Nsum, int64_t nk, int bk)
{
	const int n = a->nseg;
	const int64_t T = a->T, mt = (T + TCG_BM - 1) / TCG_BM;
	a->splits = pick_splits(c, mt * ny, T, Nsum, nk, bk);
	if (a->splits > 1) {
		a->ws = c->gemm_ws;
		int64_t off = 0;
		for (int i = 0; i < n; i++) {
			a->ws_off[i] = off;
			/* rounded up to 4 floats: every segment's partials start
			 * 16-byte aligned (float2 stores, float4 reduce loads) */
			off += ((int64_t)a->splits * T * a->N[i] + 3) & ~(int64_t)3;
		}
	}
	void *args[] = {a};
	int rc = atlas_cuda_launch_z(c, k, (unsigned)mt, (unsigned)ny, (unsigned)a->splits,
				     TCG_THREADS, ATLAS_TCG_SMEM, args);
	if (!rc && a->splits > 1) {
		int64_t most = 0;
		for (int i = 0; i < n; i++)
			most = T * a->N[i] > most ? T * a->N[i] : most;
		const int64_t blocks = ((most + 3) / 4 + 255) / 256;
		rc = atlas_cuda_launch(c, ATLAS_CK_GEMM_TC_REDUCE,
				       (unsigned)(blocks < 4096 ? blocks : 4096), (unsigned)n, 256, 0,
				       args);
	}
	return rc < 0 ? rc : 1;
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
	return launch_split(c, out_f32 ? ATLAS_CK_GEMM_TC_F32 : ATLAS_CK_GEMM_TC, &a, ny, Nsum,
			    (K + TCG_BK - 1) / TCG_BK, TCG_BK);
}

/* --- W8A8 --------------------------------------------------------------- */

void atlas_cuda_f8meta_note(struct cuda_ctx *c, const void *dst, const void *src, size_t bytes)
{
	struct atlas_f8b_head h;
	if (bytes < sizeof(h))
		return;
	memcpy(&h, src, sizeof(h));
	if (h.magic != ATLAS_F8B_MAGIC || h.bo < 1 || h.bi < 1)
		return;
	/* the blob's own entry (a rewrite), else a free one */
	int slot = -1;
	for (int i = 0; i < c->n_f8meta; i++) {
		if (c->f8meta[i].p == dst) {
			slot = i;
			break;
		}
		if (slot < 0 && !c->f8meta[i].p)
			slot = i;
	}
	if (slot < 0) {
		if (c->n_f8meta == c->f8meta_cap) {
			const int cap = c->f8meta_cap ? 2 * c->f8meta_cap : 256;
			struct cuda_f8meta *m = realloc(c->f8meta, (size_t)cap * sizeof(*m));
			if (!m)
				return; /* the blob then takes the weight-only paths */
			c->f8meta = m;
			c->f8meta_cap = cap;
		}
		slot = c->n_f8meta++;
	}
	c->f8meta[slot] = (struct cuda_f8meta){dst, h.bo, h.bi};
}

void atlas_cuda_f8meta_drop(struct cuda_ctx *c, const void *p)
{
	for (int i = 0; i < c->n_f8meta; i++)
		if (c->f8meta[i].p == p)
			c->f8meta[i].p = NULL;
}

static const struct cuda_f8meta *f8meta_find(const struct cuda_ctx *c, const void *p)
{
	for (int i = 0; i < c->n_f8meta; i++)
		if (c->f8meta[i].p == p)
			return &c->f8meta[i];
	return NULL;
}

int atlas_cuda_gemm_f8(struct atlas_backend *be, int n, void *const *out, const void *x,
		       const void *const *w, const void *const *bias, int64_t T, const int64_t *N,
		       int64_t K)
{
	struct cuda_ctx *c = be->ctx;
	if (n < 1 || n > ATLAS_TCG_MAXSEG || T < 1 || K < 16 || K % 16 || T > INT32_MAX - TCG_BM ||
	    K > INT32_MAX - 2 * TCG_BK || ((uintptr_t)x & 15) || !c->kern[ATLAS_CK_GEMM_TC_F8] ||
	    !c->kern[ATLAS_CK_FP8_ACT_QUANT] || !tmap_ready(c))
		return 0;
	struct atlas_tcg_args a;
	memset(&a, 0, sizeof(a));
	const int64_t nkx = (K + 127) / 128;
	int64_t ny = 0, Nsum = 0;
	for (int i = 0; i < n; i++) {
		const struct cuda_f8meta *f = f8meta_find(c, w[i]);
		if (!f || N[i] < 1 || N[i] > (int64_t)65535 * 128)
			return 0;
		const int whole = f->bi >= K; /* one scale across each row */
		if (!(f->bi % 128 == 0 || whole) || !(f->bo % 128 == 0 || whole))
			return 0;
		a.wsc[i] = (const float *)((const char *)w[i] + atlas_f8b_scale_off(N[i], K));
		a.wbo[i] = f->bo;
		a.wbi[i] = f->bi;
		a.wnbc[i] = (int)((K + f->bi - 1) / f->bi);
		a.wcol[i] = f->bo % 128 != 0;
		a.ny[i] = (int)((N[i] + 127) / 128);
		ny += a.ny[i];
		Nsum += N[i];
	}
	if (ny > 65535)
		return 0;
	/* x as FP8 codes, then their scales */
	const size_t qbytes = ((size_t)(T * K) + 255) & ~(size_t)255;
	const size_t need = qbytes + (size_t)(T * nkx) * 4;
	if (need > c->f8x_ws_cap && c->capturing)
		return 0; /* the weight-only paths, until one has run outside a capture */
	int rc = atlas_cuda_scratch(be, &c->f8x_ws, &c->f8x_ws_cap, need);
	if (rc)
		return atlas_error_wrap(rc, "cuda: no memory for FP8 activations (%zu bytes)", need);
	uint8_t *xq = c->f8x_ws;
	float *xs = (float *)((char *)c->f8x_ws + qbytes);
	{
		long long t = T, k = K;
		void *qargs[] = {&x, &xq, &xs, &t, &k};
		const int64_t blocks = (T * nkx + 15) / 16;
		if ((rc = atlas_cuda_launch(c, ATLAS_CK_FP8_ACT_QUANT,
					    (unsigned)(blocks < 65535 ? blocks : 65535), 1, 256, 0,
					    qargs)))
			return rc;
	}
	CUtensorMap m;
	if ((rc = get_map8(c, xq, T, K, TCG_BM, 1, &m)))
		return rc;
	memcpy(&a.map_x, &m, sizeof(m));
	for (int i = 0; i < n; i++) {
		if ((rc = get_map8(c, (const char *)w[i] + ATLAS_F8B_HEAD, N[i], K, 128, 1, &m)))
			return rc;
		memcpy(&a.map[i], &m, sizeof(m));
		a.N[i] = N[i];
		a.out[i] = out[i];
		a.bias[i] = bias ? bias[i] : NULL;
	}
	a.T = T, a.K = K, a.nseg = n, a.bn = 128, a.xs = xs, a.nkx = (int)nkx;
	return launch_split(c, ATLAS_CK_GEMM_TC_F8, &a, ny, Nsum, nkx, 2 * TCG_BK);
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
