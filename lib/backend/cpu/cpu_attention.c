/* cpu_attention.c - causal (optionally sliding-window) grouped-query
 * attention of a batch of tokens against the paged KV cache, and the
 * store of new K/V rows into it, on the CPU. The cache is f32 (auto), or
 * bf16, fp8 or q4 (be->kv_dtype, kvq.h): the reference of each format,
 * a key or value row dequantized as it is read.
 *
 * Each (query, head) pair is independent, so they are the unit of
 * parallel work. For one pair: scores over the visible keys, softmax
 * with the max subtracted, then the probability-weighted sum of values,
 * all in FP32. Scores live in a per-task buffer: on the stack for short
 * contexts, else malloc'd once per task (not per pair).
 */
#include "cpu.h"
#include "../kvq.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "../../core/threads.h"

/* Scores kept on the stack up to this many keys (16 KiB). */
#define STACK_KEYS 4096

/* One attention call. */
struct attn_job {
	float *out;	    /* [T,H,hd] */
	const float *q;	    /* [T,H,hd] */
	const float *kc;    /* [n_slots,Hkv,hd] (auto), or rows of rb bytes */
	const float *vc;    /* likewise */
	enum atlas_kv_dtype kvdt; /* the cache's format */
	int64_t rb;         /* bytes of a cache row */
	const struct atlas_kv_batch *b; /* token positions and block tables */
	int64_t H, Hkv, hd; /* heads, kv heads, head size */
	int64_t window;	    /* keys visible per query, 0 = all */
	int64_t maxkeys;    /* most keys any query sees */
	float scale;	    /* score multiplier, usually 1/sqrt(hd) */
	atomic_int failed;  /* set when a task could not get its buffer */
};

static inline __attribute__((always_inline)) float dot(const float *a, const float *b, int64_t n)
{
	float s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[i + j] * b[i + j];
	for (; i < n; i++)
		s[0] += a[i] * b[i];
	return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

/* Built twice on x86-64 (AVX2+FMA and baseline), picked at load by the
 * dynamic linker, so the inner loops get 8-wide FMAs where the CPU has
 * them and the binary still runs everywhere. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ATTN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ATTN_CLONES
#endif

/* out [hd] for query t of head h; sc has room for the visible keys. */
ATTN_CLONES static void attend(const struct attn_job *j, int64_t t, int64_t h, float *sc)
{
	const int64_t hd = j->hd, ld = j->Hkv * hd, bs = j->b->block_size;
	const int64_t p = j->b->pos[t], kvh = h / (j->H / j->Hkv);
	const int32_t *table = j->b->block_tables + (int64_t)j->b->seq_of[t] * j->b->max_blocks;
	int64_t lo = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
	const float *qv = j->q + (t * j->H + h) * hd;
	const float *kb = j->kc + kvh * hd, *vb = j->vc + kvh * hd;
	float *o = j->out + (t * j->H + h) * hd;
	int64_t n = p - lo + 1;
#define ROW(key) ((int64_t)table[(key) / bs] * bs + (key) % bs)

	float mx = -INFINITY;
	for (int64_t i = 0; i < n; i++) {
		sc[i] = j->scale * dot(qv, kb + ROW(lo + i) * ld, hd);
		if (sc[i] > mx)
			mx = sc[i];
	}
	float sum = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		sc[i] = expf(sc[i] - mx);
		sum += sc[i];
	}
	float inv = 1.0f / sum;
	for (int64_t d = 0; d < hd; d++)
		o[d] = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		const float *v = vb + ROW(lo + i) * ld;
		float pr = sc[i] * inv;
		for (int64_t d = 0; d < hd; d++)
			o[d] += pr * v[d];
	}
}
#undef ROW

/* Head kvh of cache row r as FP32 (a quantized cache's q4 rows stay
 * rotated). */
static void cache_head(const struct attn_job *j, const void *pool, int64_t r, int64_t kvh,
		       float *out)
{
	const char *row = (const char *)pool + r * j->rb;
	if (j->kvdt == ATLAS_KV_BF16) {
		const uint16_t *b = (const uint16_t *)row + kvh * j->hd;
		for (int64_t d = 0; d < j->hd; d++)
			out[d] = atlas_bf16_to_f32(b[d]);
		return;
	}
	atlas_kv_dequant_head(j->kvdt, row, j->Hkv, j->hd, kvh, out);
}

/* attend() for a bf16, fp8 or q4 cache; w has room for 3 * hd floats:
 * the (rotated) query, a key or value row, the (rotated) output. */
static void attend_q(const struct attn_job *j, int64_t t, int64_t h, float *sc, float *w)
{
	const int64_t hd = j->hd, bs = j->b->block_size;
	const int64_t p = j->b->pos[t], kvh = h / (j->H / j->Hkv);
	const int32_t *table = j->b->block_tables + (int64_t)j->b->seq_of[t] * j->b->max_blocks;
	int64_t lo = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
	float *qv = w, *row = w + hd, *acc = w + 2 * hd;
	float *o = j->out + (t * j->H + h) * hd;
	const bool rot = j->kvdt == ATLAS_KV_Q4;
	int64_t n = p - lo + 1;
#define ROW(key) ((int64_t)table[(key) / bs] * bs + (key) % bs)

	memcpy(qv, j->q + (t * j->H + h) * hd, (size_t)hd * sizeof(float));
	if (rot)
		atlas_kv_rotate(qv, hd);
	float mx = -INFINITY;
	for (int64_t i = 0; i < n; i++) {
		cache_head(j, j->kc, ROW(lo + i), kvh, row);
		sc[i] = j->scale * dot(qv, row, hd);
		if (sc[i] > mx)
			mx = sc[i];
	}
	float sum = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		sc[i] = expf(sc[i] - mx);
		sum += sc[i];
	}
	float inv = 1.0f / sum;
	for (int64_t d = 0; d < hd; d++)
		acc[d] = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		cache_head(j, j->vc, ROW(lo + i), kvh, row);
		float pr = sc[i] * inv;
		for (int64_t d = 0; d < hd; d++)
			acc[d] += pr * row[d];
	}
	if (rot)
		atlas_kv_rotate(acc, hd);
	memcpy(o, acc, (size_t)hd * sizeof(float));
#undef ROW
}

static void attn_range(void *ctx, int64_t b, int64_t e)
{
	struct attn_job *j = ctx;
	float stack[STACK_KEYS];
	float *sc = stack;
	if (j->maxkeys > STACK_KEYS) {
		sc = malloc((size_t)j->maxkeys * sizeof(float));
		if (!sc) {
			atomic_store(&j->failed, 1);
			return;
		}
	}
	float *w = NULL;
	if (j->kvdt != ATLAS_KV_AUTO && !(w = malloc((size_t)(3 * j->hd) * sizeof(float)))) {
		atomic_store(&j->failed, 1);
		if (sc != stack)
			free(sc);
		return;
	}
	for (int64_t i = b; i < e; i++) {
		if (w)
			attend_q(j, i / j->H, i % j->H, sc, w);
		else
			attend(j, i / j->H, i % j->H, sc);
	}
	free(w);
	if (sc != stack)
		free(sc);
}

int atlas_cpu_kv_store(struct atlas_backend *be, void *kc, void *vc, const void *k,
		       const void *v, const int32_t *slot, int64_t T, int64_t Hkv, int64_t hd)
{
	if (T < 0 || Hkv <= 0 || hd <= 0 || atlas_kv_check(be->kv_dtype, hd))
		return atlas_error(ATLAS_EINVAL, "cpu kv_store: bad shape T=%lld Hkv=%lld hd=%lld for a %s cache",
				   (long long)T, (long long)Hkv, (long long)hd,
				   atlas_kv_dtype_name(be->kv_dtype));
	const enum atlas_kv_dtype kd = be->kv_dtype;
	const int64_t row = Hkv * hd;
	const size_t rb = (size_t)atlas_kv_row_bytes(kd, sizeof(float), Hkv, hd);
	for (int64_t t = 0; t < T; t++) {
		if (slot[t] < 0)
			return atlas_error(ATLAS_EINVAL, "cpu kv_store: negative slot %d", slot[t]);
		const float *src[2] = {(const float *)k + t * row, (const float *)v + t * row};
		char *dst[2] = {(char *)kc + (size_t)slot[t] * rb, (char *)vc + (size_t)slot[t] * rb};
		for (int u = 0; u < 2; u++) {
			if (kd == ATLAS_KV_AUTO) {
				memcpy(dst[u], src[u], rb);
			} else if (kd == ATLAS_KV_BF16) {
				for (int64_t i = 0; i < row; i++) {
					uint16_t b = atlas_f32_to_bf16(src[u][i]);
					memcpy(dst[u] + 2 * i, &b, 2);
				}
			} else {
				atlas_kv_quant_row(kd, src[u], Hkv, hd, dst[u]);
			}
		}
	}
	return 0;
}

int atlas_cpu_attention(struct atlas_backend *be, void *out, const void *q, const void *kc,
			const void *vc, const struct atlas_kv_batch *b, int64_t T, int64_t H,
			int64_t Hkv, int64_t hd, int64_t window, float scale)
{
	if (T < 0 || H <= 0 || Hkv <= 0 || hd <= 0 || window < 0 || H % Hkv || !b ||
	    b->block_size <= 0 || b->max_keys < 0)
		return atlas_error(
		    ATLAS_EINVAL, "cpu attention: bad shape T=%lld H=%lld Hkv=%lld hd=%lld window=%lld",
		    (long long)T, (long long)H, (long long)Hkv, (long long)hd, (long long)window);
	if (atlas_kv_check(be->kv_dtype, hd))
		return ATLAS_EUNSUPPORTED;
	for (int64_t t = 0; t < T; t++)
		if (b->pos[t] < 0 || b->pos[t] >= b->max_keys || b->seq_of[t] < 0 ||
		    b->seq_of[t] >= b->n_seq || b->pos[t] / b->block_size >= b->max_blocks)
			return atlas_error(ATLAS_EINVAL,
					   "cpu attention: token %lld (sequence %d, position %d) is outside "
					   "the batch's block tables", (long long)t, b->seq_of[t], b->pos[t]);
	struct attn_job j = {
	    .out = out,
	    .q = q,
	    .kc = kc,
	    .vc = vc,
	    .kvdt = be->kv_dtype,
	    .rb = atlas_kv_row_bytes(be->kv_dtype, sizeof(float), Hkv, hd),
	    .b = b,
	    .H = H,
	    .Hkv = Hkv,
	    .hd = hd,
	    .window = window,
	    .maxkeys = b->max_keys,
	    .scale = scale,
	};
	if (window > 0 && window < j.maxkeys)
		j.maxkeys = window;
	atomic_init(&j.failed, 0);
	/* one pair costs ~4*keys*hd flops; aim for tasks of ~64K */
	int64_t grain = 65536 / (4 * j.maxkeys * hd + 1) + 1;
	atlas_parallel_for(T * H, grain, attn_range, &j);
	if (atomic_load(&j.failed))
		return atlas_error(ATLAS_ENOMEM,
				   "cpu attention: cannot allocate scores for %lld keys",
				   (long long)j.maxkeys);
	return 0;
}
