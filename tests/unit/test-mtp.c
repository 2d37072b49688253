/* test-mtp.c - a checkpoint's multi-token prediction head as a model
 * (atlas_model_load_mtp) on the CPU backend: what it computes, checked by
 * hand on the echo head of tests/fixtures/golden/qwen3-5-moe (whose layer
 * adds nothing: scripts/add-mtp-head.py), rows of zeros where no hidden
 * state is known, its cache fed in chunks giving the one-shot bits, and
 * the refusals. The engine's use of it is in test-spec.c (test_mtp). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/backend/backend.h"
#include "../../lib/bench/bench.h"
#include "../../lib/core/error.h"
#include "../../lib/io/config.h"
#include "../../lib/io/safetensors.h"
#include "../../lib/model/model.h"
#include "../../lib/model/tensors.h"
#include "harness.h"

static char dir[512];

static struct atlas_model *load(struct atlas_backend *be, const char *name)
{
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_tokens = 64;
	p.max_seqs = 2;
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/%s", harness_srcdir(), name);
	return atlas_model_load(dir, be, &p);
}

/* Token i of a made-up prompt. */
static int32_t tok(int i)
{
	return (int32_t)((i * 37 + 11) % 1000);
}

/* The trunk's final-normed hidden rows of n made-up tokens, copied to
 * the host (FP32 on the CPU backend). */
static float *trunk_rows(struct atlas_model *m, int n)
{
	int32_t ids[64];
	for (int i = 0; i < n; i++)
		ids[i] = tok(i);
	struct atlas_seq *s = atlas_seq_new(m);
	struct atlas_batch_item it = {.seq = s, .ids = ids, .n = n};
	CHECK_EQ_INT(atlas_model_forward_batch(m, &it, 1), 0);
	size_t rb;
	const void *rows = atlas_model_hidden_rows(m, &rb);
	CHECK_EQ_INT(rb, (size_t)atlas_model_config(m)->hidden_size * sizeof(float));
	float *h = malloc((size_t)n * rb);
	memcpy(h, rows, (size_t)n * rb);
	atlas_seq_free(s);
	return h;
}

/* x * (1 + w) / rms(x), in double. */
static void norm(double *y, const double *x, const float *w, int64_t D, double eps)
{
	double ss = 0;
	for (int64_t d = 0; d < D; d++)
		ss += x[d] * x[d];
	double r = 1.0 / sqrt(ss / (double)D + eps);
	for (int64_t d = 0; d < D; d++)
		y[d] = x[d] * r * (1.0 + (double)w[d]);
}

/* The echo head: its logits are lm_head(norm_n(norm_h(h))) for the
 * trunk's row h of the token before; rows with no hidden state (zeros)
 * give zero logits. */
static void test_head_by_hand(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, "qwen3-5-moe");
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	struct atlas_model *h = atlas_model_load_mtp(dir, m, NULL);
	CHECK(h != NULL);
	CHECK(h && atlas_model_is_mtp(h) && !atlas_model_is_mtp(m));
	const struct atlas_config *c = atlas_model_config(m);
	const int64_t D = c->hidden_size, V = c->vocab_size;
	CHECK_EQ_INT(c->mtp_layers, 1);
	enum { N = 24 };
	float *rows = trunk_rows(m, N);
	float *lg = malloc((size_t)(N * V) * sizeof(float));
	struct atlas_st *st = atlas_st_open(dir);
	CHECK(st != NULL);
	if (h && st) {
		int32_t ids[N];
		for (int i = 0; i < N; i++)
			ids[i] = tok(i);
		/* entry i: token i + 1 with the row of token i */
		struct atlas_seq *s = atlas_seq_new(h);
		struct atlas_batch_item it = {.seq = s, .ids = ids + 1, .n = N - 1, .logits = lg,
					      .n_logits = N - 1, .hid = rows};
		CHECK_EQ_INT(atlas_model_forward_batch(h, &it, 1), 0);
		const float *lm = atlas_st_find(st, "lm_head.weight")->data;
		const float *wh = atlas_st_find(st, "mtp.pre_fc_norm_hidden.weight")->data;
		const float *wn = atlas_st_find(st, "mtp.norm.weight")->data;
		double *u = malloc((size_t)D * sizeof(double)), *y = malloc((size_t)D * sizeof(double));
		double worst = 0;
		for (int i = 0; i < N - 1; i++) {
			for (int64_t d = 0; d < D; d++)
				y[d] = rows[(size_t)i * (size_t)D + (size_t)d];
			norm(u, y, wh, D, c->rms_eps);
			norm(y, u, wn, D, c->rms_eps);
			double big = 0, err = 0;
			for (int64_t v = 0; v < V; v++) {
				double ref = 0;
				for (int64_t d = 0; d < D; d++)
					ref += (double)lm[v * D + d] * y[d];
				big = fmax(big, fabs(ref));
				err = fmax(err, fabs(ref - (double)lg[(size_t)i * (size_t)V + (size_t)v]));
			}
			worst = fmax(worst, err / big);
		}
		printf("# echo head against the formula: worst relative error %.3g\n", worst);
		CHECK(worst < 1e-4);
		/* no hidden state at all: zeros in, and (fc's embedding half
		 * being zero) zero logits out */
		atlas_seq_reset(s);
		it.hid = NULL;
		CHECK_EQ_INT(atlas_model_forward_batch(h, &it, 1), 0);
		double mx = 0;
		for (int64_t k = 0; k < (N - 1) * V; k++)
			mx = fmax(mx, fabs(lg[k]));
		CHECK(mx == 0);
		atlas_seq_free(s);
		free(u);
		free(y);
	}
	atlas_st_close(st);
	free(lg);
	free(rows);
	atlas_model_free(h);
	atlas_model_free(m);
	be->destroy(be);
}

/* The random head of qwen3-next-bf16, its entries fed in one step or in
 * chunks (each with its rows, the first with rows of zeros before them):
 * the same logits, bit for bit (batch-invariant mode). */
static void test_head_chunks(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true;
	struct atlas_model *m = load(be, "qwen3-next-bf16");
	struct atlas_model *h = m ? atlas_model_load_mtp(dir, m, NULL) : NULL;
	CHECK(m && h);
	if (!m || !h) {
		atlas_model_free(m);
		be->destroy(be);
		return;
	}
	const int64_t D = atlas_model_config(m)->hidden_size, V = atlas_model_config(m)->vocab_size;
	enum { N = 41, Z = 3 };
	float *rows = trunk_rows(m, N);
	/* the one-shot rows: the first Z of them zeros */
	float *zrows = malloc((size_t)(N * D) * sizeof(float));
	memcpy(zrows, rows, (size_t)(N * D) * sizeof(float));
	memset(zrows, 0, (size_t)(Z * D) * sizeof(float));
	int32_t ids[N];
	for (int i = 0; i < N; i++)
		ids[i] = tok(i);
	float *one = malloc((size_t)(N * V) * sizeof(float));
	float *parts = malloc((size_t)(N * V) * sizeof(float));
	struct atlas_seq *s = atlas_seq_new(h);
	struct atlas_batch_item it = {.seq = s, .ids = ids + 1, .n = N - 1, .logits = one,
				      .n_logits = N - 1, .hid = zrows};
	CHECK_EQ_INT(atlas_model_forward_batch(h, &it, 1), 0);
	atlas_seq_reset(s);
	static const int chunk[] = {5, 1, 13, 20, 1};
	for (int k = 0, at = 0; k < 5; at += chunk[k++]) {
		it = (struct atlas_batch_item){.seq = s, .ids = ids + 1 + at, .n = chunk[k],
					       .logits = parts + (size_t)at * (size_t)V,
					       .n_logits = chunk[k],
					       .hid = rows + (size_t)(at ? at : Z) * (size_t)D,
					       .hid_zeros = at ? 0 : Z};
		CHECK_EQ_INT(atlas_model_forward_batch(h, &it, 1), 0);
	}
	CHECK_EQ_INT(atlas_seq_len(s), N - 1);
	CHECK(!memcmp(one, parts, (size_t)((N - 1) * V) * sizeof(float)));
	/* a bad count of zero rows is refused, nothing appended or taken */
	const int64_t free0 = atlas_model_kv_blocks_free(h);
	it = (struct atlas_batch_item){.seq = s, .ids = ids, .n = 9, .hid = rows, .hid_zeros = 10};
	CHECK_EQ_INT(atlas_model_forward_batch(h, &it, 1), ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "10 zero rows in an item of 9 tokens");
	CHECK_EQ_INT(atlas_seq_len(s), N - 1);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(h), free0);
	atlas_seq_free(s);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(h), atlas_model_kv_blocks_total(h));
	free(one);
	free(parts);
	free(rows);
	free(zrows);
	atlas_model_free(h);
	atlas_model_free(m);
	be->destroy(be);
}

static int n_problems;
static char last_problem[512];

static void on_finding(void *arg, enum atlas_finding level, const char *msg)
{
	(void)arg;
	if (level == ATLAS_FINDING_PROBLEM) {
		n_problems++;
		snprintf(last_problem, sizeof(last_problem), "%s", msg);
	}
}

/* qwen3-next-bf16 with its head's k_proj cut to half its rows, into the
 * tmpdir's `name`; returns the directory or NULL. */
static char *write_misshapen(const char *name)
{
	char src[600];
	snprintf(src, sizeof(src), "%s/tests/fixtures/golden/qwen3-next-bf16", harness_srcdir());
	struct atlas_st *st = atlas_st_open(src);
	if (!st)
		return NULL;
	const int64_t n = atlas_st_count(st);
	struct harness_tensor *t = calloc((size_t)n, sizeof(*t));
	for (int64_t i = 0; i < n; i++) {
		const struct atlas_tensor_info *x = atlas_st_get(st, i);
		t[i] = (struct harness_tensor){.name = x->name, .dtype = atlas_dtype_name(x->dtype),
					       .ndim = x->ndim, .data = x->data, .len = x->nbytes};
		for (int d = 0; d < x->ndim && d < 3; d++)
			t[i].shape[d] = x->shape[d];
		if (!strcmp(x->name, "mtp.layers.0.self_attn.k_proj.weight")) {
			t[i].shape[0] /= 2;
			t[i].len /= 2;
		}
	}
	char rel[300], *d = malloc(700);
	snprintf(d, 700, "%s/%s", harness_tmpdir(), name);
	mkdir(d, 0755);
	snprintf(rel, sizeof(rel), "%s/model.safetensors", name);
	char *a = harness_write_st(rel, t, (int)n);
	FILE *f = NULL;
	char cfg[700], buf[8192];
	snprintf(cfg, sizeof(cfg), "%s/config.json", src);
	size_t len = (f = fopen(cfg, "rb")) ? fread(buf, 1, sizeof(buf), f) : 0;
	if (f)
		fclose(f);
	char *b = len ? harness_write(d, "config.json", buf, len) : NULL;
	if (!a || !b) {
		free(d);
		d = NULL;
	}
	free(a);
	free(b);
	free(t);
	atlas_st_close(st);
	return d;
}

/* A misshapen head: validate names the tensor, loading the head fails
 * naming it, the trunk loads as before. */
static void test_misshapen(void)
{
	char *d = write_misshapen("misshapen");
	CHECK(d != NULL);
	if (!d)
		return;
	n_problems = 0;
	CHECK_EQ_INT(atlas_model_validate(d, on_finding, NULL), 1);
	CHECK_CONTAINS(last_problem, "mtp.layers.0.self_attn.k_proj.weight");
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = atlas_model_load(d, be, NULL);
	CHECK(m != NULL);
	CHECK(m && !atlas_model_load_mtp(d, m, NULL));
	CHECK_CONTAINS(atlas_errmsg(), "mtp.layers.0.self_attn.k_proj.weight");
	CHECK_CONTAINS(atlas_errmsg(), "has shape [16, 64]");
	atlas_model_free(m);
	be->destroy(be);
	free(d);
}

/* A hybrid model's cut replays tokens (kvpool.c): with a head attached,
 * the hidden rows of the step before it, which the head reads next,
 * survive it. */
static void test_rows_survive_cut(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, "qwen3-next-bf16");
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	struct atlas_model *h = atlas_model_load_mtp(dir, m, NULL);
	CHECK(h != NULL);
	int32_t ids[16];
	for (int i = 0; i < 16; i++)
		ids[i] = tok(i);
	struct atlas_seq *a = atlas_seq_new(m), *b = atlas_seq_new(m);
	struct atlas_batch_item it[2] = {{.seq = a, .ids = ids, .n = 10},
					 {.seq = b, .ids = ids + 3, .n = 7}};
	CHECK_EQ_INT(atlas_model_forward_batch(m, it, 2), 0);
	/* b's one token first, then a's four (a verification's rows) */
	it[0] = (struct atlas_batch_item){.seq = b, .ids = ids + 10, .n = 1};
	it[1] = (struct atlas_batch_item){.seq = a, .ids = ids + 10, .n = 4};
	CHECK_EQ_INT(atlas_model_forward_batch(m, it, 2), 0);
	size_t rb;
	const void *rows = atlas_model_hidden_rows(m, &rb);
	void *before = malloc(5 * rb);
	memcpy(before, rows, 5 * rb);
	/* a keeps two of its four: the state goes back and two tokens run again */
	CHECK_EQ_INT(atlas_seq_truncate(a, 12), 0);
	CHECK_EQ_INT(atlas_seq_len(a), 12);
	CHECK(!memcmp(atlas_model_hidden_rows(m, NULL), before, 5 * rb));
	free(before);
	atlas_seq_free(a);
	atlas_seq_free(b);
	atlas_model_free(h);
	atlas_model_free(m);
	be->destroy(be);
}

/* A synthetic hybrid model and its synthetic head (random weights made
 * on the host: atlas_bench_prepare) through atlas-bench's measure of a
 * speculative step: every part timed, the break-even the ratio of the
 * step's cost to a plain step's, the speed-up growing with acceptance;
 * every head block back. */
static void test_spec_cost(void)
{
	setenv("ATLAS_CPU_COPY_WEIGHTS", "1", 1);
	struct atlas_backend *be = atlas_backend_cpu_new();
	unsetenv("ATLAS_CPU_COPY_WEIGHTS");
	atlas_bench_prepare(be);
	struct atlas_config c;
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/qwen3-next-bf16", harness_srcdir());
	CHECK_EQ_INT(atlas_config_load(dir, &c), 0);
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_tokens = 16;
	p.max_context = 96;
	struct atlas_model *m = atlas_model_synthetic(&c, be, &p, 3);
	struct atlas_model *h = m ? atlas_model_synthetic_mtp(m, &p, 4) : NULL;
	CHECK(m && h);
	if (m && h) {
		struct atlas_bench_spec r;
		CHECK_EQ_INT(atlas_bench_run_spec(m, h, 3, 12, 4, &r), 0);
		printf("# synthetic head, K = 3: step %.3f ms, verify %.3f ms, head %.3f ms, "
		       "break-even %.2f tokens a step\n", r.step_ms, r.verify_ms, r.head_ms,
		       r.breakeven);
		CHECK(r.step_ms > 0 && r.verify_ms > 0 && r.head_ms > 0);
		CHECK_NEAR(r.spec_ms, r.verify_ms + r.head_ms, 1e-9);
		CHECK_NEAR(r.breakeven, r.spec_ms / r.step_ms, 1e-9);
		CHECK(r.speedup[0] < r.speedup[1] && r.speedup[1] < r.speedup[2]);
		/* at 90%: (1 - 0.9^4) / 0.1 = 3.439 tokens a step */
		CHECK_NEAR(r.speedup[2] * r.breakeven, 3.439, 1e-9);
		CHECK_EQ_INT(atlas_bench_run_spec(m, h, 3, 2, 4, &r), ATLAS_EINVAL);
		CHECK_EQ_INT(atlas_model_kv_blocks_free(h), atlas_model_kv_blocks_total(h));
	}
	atlas_model_free(h);
	atlas_model_free(m);
	be->destroy(be);
}

/* A checkpoint without mtp.* has no head to load, by name. */
static void test_refusals(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, "qwen3-bf16");
	CHECK(m != NULL);
	CHECK(m && !atlas_model_load_mtp(dir, m, NULL));
	CHECK_CONTAINS(atlas_errmsg(), "cannot load the MTP head of");
	CHECK_CONTAINS(atlas_errmsg(), "no mtp.fc.weight");
	atlas_model_free(m);
	struct atlas_config c;
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/qwen3-next-bf16", harness_srcdir());
	CHECK_EQ_INT(atlas_config_load(dir, &c), 0);
	CHECK_EQ_INT(c.mtp_layers, 1);
	CHECK_EQ_INT(atlas_config_parse("{\"model_type\":\"qwen3_next\",\"vocab_size\":8,"
					"\"hidden_size\":8,\"intermediate_size\":8,"
					"\"num_hidden_layers\":1,\"num_attention_heads\":1,"
					"\"num_nextn_predict_layers\":99}", "c", &c),
		     ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "MTP layers");
	be->destroy(be);
}

int main(void)
{
	RUN(test_head_by_hand);
	RUN(test_head_chunks);
	RUN(test_rows_survive_cut);
	RUN(test_spec_cost);
	RUN(test_refusals);
	RUN(test_misshapen);
	return harness_done();
}
