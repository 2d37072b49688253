/* mock.c - a backend that records its op calls and computes nothing.
 *
 * Unit tests of the model and engine sequencing run on it: they check
 * the list of recorded lines ("matmul T=1 N=64 K=32 bias") instead of
 * numbers. Memory is real (calloc'd host memory, weights used in place)
 * so callers can still read and write their buffers; memory operations
 * are not recorded because their order is an implementation detail.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "../backend.h"

/* The recorded calls. */
struct mock_ctx {
	char **lines; /* lines[0..n), each malloc'd */
	int64_t n;    /* lines recorded */
	int64_t cap;  /* room in lines */
};

/* Append one formatted line; ATLAS_ENOMEM if it cannot be stored. */
static int record(struct atlas_backend *be, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int record(struct atlas_backend *be, const char *fmt, ...)
{
	struct mock_ctx *c = be->ctx;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (c->n == c->cap) {
		int64_t cap = c->cap ? c->cap * 2 : 64;
		char **l = realloc(c->lines, (size_t)cap * sizeof(*l));
		if (!l)
			return atlas_error(ATLAS_ENOMEM, "mock: cannot record a call");
		c->lines = l;
		c->cap = cap;
	}
	char *s = strdup(buf);
	if (!s)
		return atlas_error(ATLAS_ENOMEM, "mock: cannot record a call");
	c->lines[c->n++] = s;
	return 0;
}

void atlas_backend_mock_reset(struct atlas_backend *be)
{
	struct mock_ctx *c = be->ctx;
	for (int64_t i = 0; i < c->n; i++)
		free(c->lines[i]);
	c->n = 0;
}

int64_t atlas_backend_mock_count(const struct atlas_backend *be)
{
	const struct mock_ctx *c = be->ctx;
	return c->n;
}

const char *atlas_backend_mock_call(const struct atlas_backend *be, int64_t i)
{
	const struct mock_ctx *c = be->ctx;
	return i >= 0 && i < c->n ? c->lines[i] : NULL;
}

static void mock_destroy(struct atlas_backend *be)
{
	struct mock_ctx *c = be->ctx;
	atlas_backend_mock_reset(be);
	free(c->lines);
	free(c);
	free(be);
}

static void *mock_alloc(struct atlas_backend *be, size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);
	if (!p)
		atlas_error(ATLAS_ENOMEM, "mock: cannot allocate %zu bytes", bytes);
	return p;
}

static void mock_free(struct atlas_backend *be, void *p)
{
	free(p);
}

static const void *mock_weight_upload(struct atlas_backend *be, const void *host, size_t bytes)
{
	return host;
}

static void mock_weight_release(struct atlas_backend *be, const void *w)
{
}

static int mock_memcpy(struct atlas_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memmove(dst, src, bytes);
	return 0;
}

static int mock_copy(struct atlas_backend *be, void *dst, const void *src, size_t bytes)
{
	return record(be, "copy bytes=%zu", bytes);
}

static int mock_sync(struct atlas_backend *be)
{
	return 0;
}

static int mock_embed(struct atlas_backend *be, void *out, const void *table, enum atlas_dtype wdt,
		      const int32_t *ids, int64_t T, int64_t D)
{
	return record(be, "embed T=%lld D=%lld", (long long)T, (long long)D);
}

static int mock_rmsnorm(struct atlas_backend *be, void *out, const void *x, const void *w,
			enum atlas_dtype wdt, int64_t R, int64_t D, float eps)
{
	return record(be, "rmsnorm R=%lld D=%lld", (long long)R, (long long)D);
}

static int mock_add_rmsnorm(struct atlas_backend *be, void *res, const void *x, void *out,
			    const void *w, enum atlas_dtype wdt, int64_t R, int64_t D, float eps)
{
	return record(be, "add_rmsnorm R=%lld D=%lld", (long long)R, (long long)D);
}

static int mock_matmul(struct atlas_backend *be, void *out, const void *x, const void *w,
		       const void *bias, enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	return record(be, "matmul T=%lld N=%lld K=%lld%s", (long long)T, (long long)N, (long long)K,
		      bias ? " bias" : "");
}

static int mock_rope(struct atlas_backend *be, void *x, const int32_t *pos, const float *inv_freq,
		     int64_t T, int64_t H, int64_t hd)
{
	return record(be, "rope T=%lld H=%lld hd=%lld", (long long)T, (long long)H, (long long)hd);
}

static int mock_kv_store(struct atlas_backend *be, void *kc, void *vc, const void *k,
			 const void *v, const int32_t *slot, int64_t T, int64_t Hkv, int64_t hd)
{
	return record(be, "kv_store T=%lld row=%lld", (long long)T, (long long)(Hkv * hd));
}

/* pos0 is the first token's position (mock memory is host memory, so
 * the batch description can be read here). */
static int mock_attention(struct atlas_backend *be, void *out, const void *q, const void *kc,
			  const void *vc, const struct atlas_kv_batch *b, int64_t T, int64_t H,
			  int64_t Hkv, int64_t hd, int64_t window, float scale)
{
	return record(be, "attention T=%lld pos0=%lld H=%lld Hkv=%lld hd=%lld seqs=%lld",
		      (long long)T, T > 0 ? (long long)b->pos[0] : -1LL, (long long)H,
		      (long long)Hkv, (long long)hd, (long long)b->n_seq);
}

static int mock_logits(struct atlas_backend *be, float *out, const void *x, const void *w,
		       enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	return record(be, "logits T=%lld N=%lld K=%lld", (long long)T, (long long)N, (long long)K);
}

static int mock_moe(struct atlas_backend *be, void *out, const void *x,
		    const struct atlas_moe_desc *d, int64_t T, void *scratch)
{
	return record(be, "moe T=%lld E=%lld k=%lld F=%lld", (long long)T, (long long)d->n_experts,
		      (long long)d->top_k, (long long)d->F);
}

static int mock_sample(struct atlas_backend *be, int32_t *ids, const float *logits, int64_t n,
		       int64_t V, const struct atlas_sample_args *args)
{
	for (int64_t i = 0; i < n; i++) { /* the lowest allowed id */
		const uint32_t *mk = args[i].mask;
		int64_t id = 0;
		while (mk && id < V && !(mk[id / 32] >> (id % 32) & 1))
			id++;
		ids[i] = (int32_t)(id < V ? id : 0);
	}
	return record(be, "sample n=%lld V=%lld", (long long)n, (long long)V);
}

static int mock_reserve(struct atlas_backend *be, size_t bytes)
{
	return record(be, "reserve bytes=%zu", bytes);
}

static int mock_swiglu(struct atlas_backend *be, void *out, const void *gate, const void *up,
		       int64_t T, int64_t F)
{
	return record(be, "swiglu T=%lld F=%lld", (long long)T, (long long)F);
}

static int mock_add(struct atlas_backend *be, void *y, const void *x, int64_t n)
{
	return record(be, "add n=%lld", (long long)n);
}

static int mock_to_f32(struct atlas_backend *be, float *host, const void *src, int64_t n)
{
	if (n > 0)
		memset(host, 0, (size_t)n * sizeof(float));
	return record(be, "to_f32 n=%lld", (long long)n);
}

/* The fused one-token layer stack (optional ops, atlas_backend_mock_offer_fused):
 * prepare records the shapes and checks that the description is whole
 * and consistent (every layer's weights, norms and its own K and V pools,
 * the step metadata and scratch rows present), so the model side of the
 * contract can be tested without a GPU. */
static void *mock_fused_prepare(struct atlas_backend *be, const struct atlas_fused_desc *d)
{
	const char *bad = NULL;
	for (int64_t l = 0; l < d->n_layers && !bad; l++) {
		const struct atlas_fused_layer *L = &d->layers[l];
		if (!L->wq || !L->wk || !L->wv || !L->wo ||
		    (L->moe ? L->wg || L->wu || L->wd || !L->moe->router || !L->moe->wg
			    : !L->wg || !L->wu || !L->wd))
			bad = "weight";
		else if (L->moe && L->moe->top_k * L->moe->F > d->g_cap)
			bad = "g";
		else if (!L->ln1 || !L->ln2 || !L->qn != !L->kn)
			bad = "norm";
		else if (!L->kc || !L->vc || L->kc == L->vc ||
			 (l > 0 && (L->kc == d->layers[l - 1].kc || L->vc == d->layers[l - 1].vc)))
			bad = "cache";
	}
	if (!bad && (!d->x || !d->o || !d->q || !d->k || !d->v || !d->att || !d->g))
		bad = "activations";
	if (!bad && (!d->pos || !d->seq_of || !d->slot || !d->block_tables || !d->inv_freq ||
		     d->max_blocks < 1 || d->block_size < 1))
		bad = "metadata";
	int nmoe = 0;
	for (int64_t l = 0; l < d->n_layers; l++)
		nmoe += d->layers[l].moe != NULL;
	if (record(be, "fused_prepare layers=%lld D=%lld F=%lld H=%lld Hkv=%lld hd=%lld window=%lld "
		   "qk_norm=%d bias=%d moe=%d%s%s",
		   (long long)d->n_layers, (long long)d->D, (long long)d->F, (long long)d->H,
		   (long long)d->Hkv, (long long)d->hd, (long long)d->window,
		   d->n_layers > 0 && d->layers[0].qn != NULL,
		   d->n_layers > 0 && d->layers[0].bq != NULL, nmoe, bad ? " BAD " : "", bad ? bad : ""))
		return NULL;
	return malloc(1);
}

static int mock_fused_decode(struct atlas_backend *be, void *fused)
{
	return record(be, "fused_decode%s", fused ? "" : " NULL");
}

static void mock_fused_release(struct atlas_backend *be, void *fused)
{
	free(fused);
	record(be, "fused_release");
}

/* Page-locked host staging and the copies that use it (optional ops,
 * atlas_backend_mock_offer_host): recorded, so that tests see when the
 * model waits for the queue before it rewrites its staging. */
static void *mock_host_alloc(struct atlas_backend *be, size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);
	if (p && record(be, "host_alloc bytes=%zu", bytes)) {
		free(p);
		return NULL;
	}
	return p;
}

static void mock_host_free(struct atlas_backend *be, void *p)
{
	if (p)
		record(be, "host_free");
	free(p);
}

static int mock_upload_rec(struct atlas_backend *be, void *dst, const void *src, size_t bytes)
{
	mock_memcpy(be, dst, src, bytes);
	return record(be, "upload bytes=%zu", bytes);
}

static int mock_download_rec(struct atlas_backend *be, void *dst, const void *src, size_t bytes)
{
	mock_memcpy(be, dst, src, bytes);
	return record(be, "download bytes=%zu", bytes);
}

static int mock_sync_rec(struct atlas_backend *be)
{
	return record(be, "sync");
}

void atlas_backend_mock_offer_host(struct atlas_backend *be)
{
	be->host_alloc = mock_host_alloc;
	be->host_free = mock_host_free;
	be->upload = mock_upload_rec;
	be->download = mock_download_rec;
	be->sync = mock_sync_rec;
}

void atlas_backend_mock_offer_fused(struct atlas_backend *be)
{
	be->fused_prepare = mock_fused_prepare;
	be->fused_decode = mock_fused_decode;
	be->fused_release = mock_fused_release;
}

struct atlas_backend *atlas_backend_mock_new(void)
{
	struct atlas_backend *be = calloc(1, sizeof(*be));
	struct mock_ctx *c = calloc(1, sizeof(*c));
	if (!be || !c) {
		free(be);
		free(c);
		atlas_error(ATLAS_ENOMEM, "mock: cannot allocate the backend");
		return NULL;
	}
	*be = (struct atlas_backend){
	    .name = "mock",
	    .ctx = c,
	    .act_dtype = ATLAS_DTYPE_F32,
	    .destroy = mock_destroy,
	    .alloc = mock_alloc,
	    .free = mock_free,
	    .weight_upload = mock_weight_upload,
	    .weight_release = mock_weight_release,
	    .upload = mock_memcpy,
	    .download = mock_memcpy,
	    .copy = mock_copy,
	    .sync = mock_sync,
	    .embed = mock_embed,
	    .rmsnorm = mock_rmsnorm,
	    .add_rmsnorm = mock_add_rmsnorm,
	    .matmul = mock_matmul,
	    .rope = mock_rope,
	    .kv_store = mock_kv_store,
	    .attention = mock_attention,
	    .sample = mock_sample,
	    .logits = mock_logits,
	    .moe = mock_moe,
	    .reserve = mock_reserve,
	    .swiglu = mock_swiglu,
	    .add = mock_add,
	    .to_f32 = mock_to_f32,
	};
	return be;
}
