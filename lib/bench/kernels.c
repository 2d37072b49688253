/* kernels.c - atlas-bench kernels: every op of the backend table at the
 * sizes a named model gives it, each call timed after a warm-up (median
 * of N), with the bytes it must move and the FLOPs it must do, so each
 * time becomes GB/s, TFLOP/s and a fraction of the ceilings measured in
 * the same run. Buffers hold random values (speed does not depend on
 * them); one set is made per backend, sized for the largest call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "bench.h"

/* The buffers of one backend. */
struct bufs {
	struct atlas_backend *be; /* owner of everything below */
	void *x, *y, *z, *res;    /* activations [Tmax, widest] */
	void *w;                  /* the largest weight matrix, BF16 */
	void *nw;                 /* a norm weight [D], BF16 */
	int32_t *ids, *pos, *slot, *seq_of, *tables, *sampled; /* int32 arrays */
	float *inv_freq;          /* [hd/2] */
	float *logits;            /* [V] FP32 */
	void *kc, *vc;            /* KV cache [n_slots, kvd] */
	int64_t blocks;           /* blocks of the one sequence */
};

/* One timed call. */
struct call {
	const char *op, *what; /* op name and which use */
	int64_t T, N, K;       /* sizes (matmul: T, N, K; others: T and a width in N) */
};

static const char ops_list[] =
	"embed, rmsnorm, add_rmsnorm, matmul, logits, rope, kv_store, attention, swiglu, add, sample";

const char *atlas_bench_kernel_ops(void)
{
	return ops_list;
}

static void bufs_free(struct bufs *b)
{
	struct atlas_backend *be = b->be;
	void *all[] = {b->x, b->y, b->z, b->res, b->w, b->nw, b->ids, b->pos, b->slot,
		       b->seq_of, b->tables, b->sampled, b->inv_freq, b->logits, b->kc, b->vc};
	for (size_t i = 0; be && i < sizeof(all) / sizeof(all[0]); i++)
		be->free(be, all[i]);
	memset(b, 0, sizeof(*b));
}

static int upload_i32(struct atlas_backend *be, int32_t **dst, const int32_t *src, int64_t n)
{
	*dst = be->alloc(be, (size_t)n * 4);
	if (!*dst)
		return atlas_error(ATLAS_ENOMEM, "cannot allocate %lld ids", (long long)n);
	return be->upload(be, *dst, src, (size_t)n * 4);
}

static int bufs_init(struct bufs *b, struct atlas_backend *be, const struct atlas_config *c,
		     int64_t Tmax, int64_t context, uint64_t seed)
{
	int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
	int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
	int64_t wide = D > F ? D : F, wmax = V * D;
	size_t a = atlas_dtype_size(be->act_dtype);
	int rc = 0;
	memset(b, 0, sizeof(*b));
	b->be = be;
	wide = wide > qd ? wide : qd;
	wmax = wmax > F * D ? wmax : F * D;
	b->blocks = (context + 15) / 16;
	size_t act = (size_t)(Tmax * wide) * a, kv = (size_t)(b->blocks * 16 * kvd) * a;
	b->x = be->alloc(be, act), b->y = be->alloc(be, act), b->z = be->alloc(be, act);
	b->res = be->alloc(be, act);
	b->w = be->alloc(be, (size_t)wmax * 2), b->nw = be->alloc(be, (size_t)D * 2);
	b->inv_freq = be->alloc(be, (size_t)hd * 2), b->logits = be->alloc(be, (size_t)V * 4);
	b->kc = be->alloc(be, kv), b->vc = be->alloc(be, kv);
	b->sampled = be->alloc(be, 4);
	if (!b->x || !b->y || !b->z || !b->res || !b->w || !b->nw || !b->inv_freq || !b->logits ||
	    !b->kc || !b->vc || !b->sampled)
		return atlas_error(ATLAS_ENOMEM, "%s: cannot allocate the benchmark buffers",
				   be->name);
	rc = be->fill_random(be, b->w, ATLAS_DTYPE_BF16, wmax, seed, -0.05f, 0.05f);
	if (!rc)
		rc = be->fill_random(be, b->nw, ATLAS_DTYPE_BF16, D, seed + 1, 0.9f, 1.1f);
	if (!rc)
		rc = be->fill_random(be, b->x, be->act_dtype, Tmax * wide, seed + 2, -1, 1);
	if (!rc)
		rc = be->fill_random(be, b->z, be->act_dtype, Tmax * wide, seed + 3, -1, 1);
	if (!rc)
		rc = be->fill_random(be, b->res, be->act_dtype, Tmax * wide, seed + 4, -1, 1);
	if (!rc)
		rc = be->fill_random(be, b->kc, be->act_dtype, b->blocks * 16 * kvd, seed + 5, -1, 1);
	if (!rc)
		rc = be->fill_random(be, b->vc, be->act_dtype, b->blocks * 16 * kvd, seed + 6, -1, 1);
	if (!rc)
		rc = be->fill_random(be, b->logits, ATLAS_DTYPE_F32, V, seed + 7, -4, 4);
	int32_t *h = malloc((size_t)(Tmax > b->blocks ? Tmax : b->blocks) * 4 * 5);
	float *f = malloc((size_t)hd * 2);
	if (!h || !f)
		rc = rc ? rc : atlas_error(ATLAS_ENOMEM, "out of memory");
	for (int64_t i = 0; !rc && i < Tmax; i++)
		h[i] = (int32_t)((i * 7919 + (int64_t)seed) % V);
	if (!rc)
		rc = upload_i32(be, &b->ids, h, Tmax);
	for (int64_t i = 0; !rc && i < Tmax; i++) /* the last Tmax positions of the context */
		h[i] = (int32_t)(context - Tmax + i);
	if (!rc)
		rc = upload_i32(be, &b->pos, h, Tmax);
	if (!rc)
		rc = upload_i32(be, &b->slot, h, Tmax);
	for (int64_t i = 0; !rc && i < Tmax; i++)
		h[i] = 0;
	if (!rc)
		rc = upload_i32(be, &b->seq_of, h, Tmax);
	for (int64_t i = 0; !rc && i < b->blocks; i++)
		h[i] = (int32_t)i;
	if (!rc)
		rc = upload_i32(be, &b->tables, h, b->blocks);
	for (int64_t i = 0; !rc && i < hd / 2; i++)
		f[i] = powf((float)c->rope_theta, -2.0f * (float)i / (float)hd);
	if (!rc)
		rc = be->upload(be, b->inv_freq, f, (size_t)(hd / 2) * 4);
	free(h);
	free(f);
	return rc;
}

/* Run one call; the attention rows see `context` keys. */
static int run(struct bufs *b, const struct atlas_config *c, const struct call *k,
	       int64_t context)
{
	struct atlas_backend *be = b->be;
	int64_t D = c->hidden_size, hd = c->head_dim, T = k->T;
	float eps = (float)c->rms_eps;
	if (!strcmp(k->op, "embed"))
		return be->embed(be, b->y, b->w, ATLAS_DTYPE_BF16, b->ids, T, D);
	if (!strcmp(k->op, "rmsnorm"))
		return be->rmsnorm(be, b->y, b->x, b->nw, ATLAS_DTYPE_BF16, T, D, eps);
	if (!strcmp(k->op, "add_rmsnorm"))
		return be->add_rmsnorm(be, b->res, b->x, b->y, b->nw, ATLAS_DTYPE_BF16, T, D, eps);
	if (!strcmp(k->op, "matmul"))
		return be->matmul(be, b->y, b->x, b->w, NULL, ATLAS_DTYPE_BF16, T, k->N, k->K);
	if (!strcmp(k->op, "logits"))
		return be->logits(be, b->logits, b->x, b->w, ATLAS_DTYPE_BF16, T, k->N, k->K);
	if (!strcmp(k->op, "rope"))
		return be->rope(be, b->y, b->pos, b->inv_freq, T, c->num_heads, hd);
	if (!strcmp(k->op, "kv_store"))
		return be->kv_store(be, b->kc, b->vc, b->x, b->z, b->slot, T, c->num_kv_heads, hd);
	if (!strcmp(k->op, "attention")) {
		struct atlas_kv_batch kb = {b->seq_of, b->pos, b->tables, 1, b->blocks, 16, context};
		return be->attention(be, b->y, b->x, b->kc, b->vc, &kb, T, c->num_heads,
				     c->num_kv_heads, hd, 0, 1.0f / sqrtf((float)hd));
	}
	if (!strcmp(k->op, "swiglu"))
		return be->swiglu(be, b->y, b->x, b->z, T, k->N);
	if (!strcmp(k->op, "add"))
		return be->add(be, b->y, b->x, T * k->N);
	if (!strcmp(k->op, "sample")) {
		struct atlas_sample_args g = {0};
		return be->sample(be, b->sampled, b->logits, T, k->N, &g);
	}
	return atlas_error(ATLAS_EINVAL, "unknown op '%s'", k->op);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median time of `reps` calls after one warm-up: device events through
 * the profile ops when the backend has them, else the clock and a sync. */
static int time_call(struct bufs *b, const struct atlas_config *c, const struct call *k,
		     int64_t context, int64_t reps, double *ms)
{
	struct atlas_backend *be = b->be;
	double *t = calloc((size_t)reps, sizeof(double));
	bool events = be->profile && be->profile_report;
	int rc = t ? run(b, c, k, context) : atlas_error(ATLAS_ENOMEM, "out of memory");
	if (!rc)
		rc = be->sync(be);
	for (int64_t i = 0; i < reps && !rc; i++) {
		if (events) {
			struct atlas_kernel_time rows[16];
			rc = be->profile(be, true);
			if (!rc)
				rc = run(b, c, k, context);
			int n = rc ? rc : be->profile_report(be, rows, 16);
			rc = n < 0 ? n : 0;
			for (int j = 0; j < n; j++)
				t[i] += rows[j].ms;
			be->profile(be, false);
		} else {
			double t0 = atlas_bench_now_ms();
			rc = run(b, c, k, context);
			if (!rc)
				rc = be->sync(be);
			t[i] = atlas_bench_now_ms() - t0;
		}
	}
	if (!rc) {
		qsort(t, (size_t)reps, sizeof(double), cmp_d);
		*ms = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
	}
	free(t);
	return rc;
}

/* Bytes and FLOPs the call must move and do at the least. */
static void cost(const struct atlas_config *c, const struct call *k, size_t a, int64_t context,
		 double *bytes, double *flops)
{
	double T = (double)k->T, N = (double)k->N, K = (double)k->K, A = (double)a;
	double D = (double)c->hidden_size, qd = (double)(c->num_heads * c->head_dim);
	double kvd = (double)(c->num_kv_heads * c->head_dim);
	*flops = 0;
	if (!strcmp(k->op, "embed")) {
		*bytes = T * D * (2 + A);
	} else if (!strcmp(k->op, "rmsnorm")) {
		*bytes = 2 * T * D * A + 2 * D, *flops = 4 * T * D;
	} else if (!strcmp(k->op, "add_rmsnorm")) {
		*bytes = 4 * T * D * A + 2 * D, *flops = 5 * T * D;
	} else if (!strcmp(k->op, "matmul")) {
		*bytes = 2 * N * K + T * K * A + T * N * A, *flops = 2 * T * N * K;
	} else if (!strcmp(k->op, "logits")) {
		*bytes = 2 * N * K + T * K * A + T * N * 4, *flops = 2 * T * N * K;
	} else if (!strcmp(k->op, "rope")) {
		*bytes = 2 * T * qd * A, *flops = 3 * T * qd;
	} else if (!strcmp(k->op, "kv_store")) {
		*bytes = 4 * T * kvd * A;
	} else if (!strcmp(k->op, "attention")) {
		double C = (double)context, keys = T * C - T * (T - 1) / 2;
		*bytes = 2 * C * kvd * A + 2 * T * qd * A, *flops = 4 * qd * keys;
	} else if (!strcmp(k->op, "swiglu")) {
		*bytes = 3 * T * N * A, *flops = 5 * T * N;
	} else if (!strcmp(k->op, "add")) {
		*bytes = 3 * T * N * A, *flops = T * N;
	} else { /* sample */
		*bytes = T * N * 4 + 4 * T, *flops = T * N;
	}
}

/* The calls of one forward step of T tokens, then the output head once. */
static int plan(const struct atlas_config *c, const int64_t *tokens, int nt, struct call *out,
		int max)
{
	int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
	int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
	int n = 0;
	for (int i = 0; i < nt; i++) {
		int64_t T = tokens[i];
		const char *w = T == 1 ? "decode" : "prefill";
		struct call step[] = {
			{"embed", w, T, D, 0},         {"rmsnorm", w, T, D, 0},
			{"add_rmsnorm", w, T, D, 0},   {"matmul", "q", T, qd, D},
			{"matmul", "k/v", T, kvd, D},  {"matmul", "o", T, D, qd},
			{"matmul", "gate/up", T, F, D}, {"matmul", "down", T, D, F},
			{"rope", w, T, qd, 0},         {"kv_store", w, T, kvd, 0},
			{"attention", w, T, qd, 0},    {"swiglu", w, T, F, 0},
			{"add", w, T, D, 0},
		};
		for (size_t j = 0; j < sizeof(step) / sizeof(step[0]) && n < max; j++)
			out[n++] = step[j];
	}
	if (n + 2 <= max) {
		out[n++] = (struct call){"logits", "head", 1, c->vocab_size, D};
		out[n++] = (struct call){"sample", "greedy", 1, c->vocab_size, 0};
	}
	return n;
}

static void shape_text(const struct call *k, int64_t context, char *s, size_t n)
{
	if (!strcmp(k->op, "matmul") || !strcmp(k->op, "logits"))
		snprintf(s, n, "T=%lld N=%lld K=%lld", (long long)k->T, (long long)k->N,
			 (long long)k->K);
	else if (!strcmp(k->op, "attention"))
		snprintf(s, n, "T=%lld keys=%lld", (long long)k->T, (long long)context);
	else
		snprintf(s, n, "T=%lld n=%lld", (long long)k->T, (long long)k->N);
}

int atlas_bench_kernels(struct atlas_backend *be, struct atlas_backend *base,
			const struct atlas_config *cfg, const struct atlas_bench_ceilings *ceil,
			const struct atlas_bench_kernels_params *p, struct atlas_bench_kernel *rows,
			int max)
{
	struct call calls[64];
	struct bufs b, bb;
	int64_t Tmax = 1, ctx = p->context;
	int nc = plan(cfg, p->tokens, p->n_tokens, calls, 64), n = 0, rc;
	for (int i = 0; i < p->n_tokens; i++)
		Tmax = p->tokens[i] > Tmax ? p->tokens[i] : Tmax;
	ctx = ctx > Tmax ? ctx : Tmax;
	atlas_bench_prepare(be);
	if (!be->fill_random)
		return atlas_error(ATLAS_EUNSUPPORTED, "backend '%s' cannot fill buffers", be->name);
	memset(&bb, 0, sizeof(bb));
	rc = bufs_init(&b, be, cfg, Tmax, ctx, p->seed);
	if (!rc && base) {
		atlas_bench_prepare(base);
		rc = bufs_init(&bb, base, cfg, Tmax, ctx, p->seed);
	}
	for (int i = 0; i < nc && !rc && n < max; i++) {
		const struct call *k = &calls[i];
		if (p->filter && !strstr(k->op, p->filter))
			continue;
		if (!strcmp(k->op, "sample") && !be->sample)
			continue;
		struct atlas_bench_kernel *r = &rows[n];
		memset(r, 0, sizeof(*r));
		snprintf(r->op, sizeof(r->op), "%s", k->op);
		snprintf(r->what, sizeof(r->what), "%s", k->what);
		shape_text(k, ctx, r->shape, sizeof(r->shape));
		r->tokens = k->T;
		r->base_ms = -1;
		if ((rc = time_call(&b, cfg, k, ctx, p->reps, &r->ms)))
			break;
		cost(cfg, k, atlas_dtype_size(be->act_dtype), ctx, &r->bytes, &r->flops);
		r->gbs = r->bytes / (r->ms / 1e3) / 1e9;
		r->tflops = r->flops / (r->ms / 1e3) / 1e12;
		double fb = ceil->copy_gbs > 0 ? r->gbs / ceil->copy_gbs : 0;
		const double rate = atlas_bench_matrix_rate(ceil);
		double fc = rate > 0 ? r->tflops / rate : 0;
		r->roofline = fb > fc ? fb : fc;
		if (base && (strcmp(k->op, "sample") || base->sample))
			rc = time_call(&bb, cfg, k, ctx, p->reps < 3 ? p->reps : 3, &r->base_ms);
		n++;
	}
	bufs_free(&b);
	bufs_free(&bb);
	if (rc)
		return atlas_error_wrap(rc, "kernels on '%s'", be->name);
	return n;
}
