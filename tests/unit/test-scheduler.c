/* test-scheduler.c - continuous batching: the make-up of each step on
 * the mock backend (decodes first, chunked prefill within the token
 * budget, admission only with free blocks), and on the CPU backend that
 * every request gets exactly what it gets alone (greedy and seeded
 * sampling), through preemption and cancellation, with every KV block
 * back in the pool afterwards. Also the stop-string piece (stopper). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/engine/generate.h"
#include "../../lib/engine/grammar.h"
#include "../../lib/engine/scheduler.h"
#include "../../lib/engine/stopper.h"
#include "../../lib/tok/tok.h"
#include "harness.h"

static char path[512];

static const char *model_dir(const char *rel)
{
	snprintf(path, sizeof(path), "%s/%s", harness_srcdir(), rel);
	return path;
}

static struct atlas_model *load(struct atlas_backend *be, int64_t seqs, int64_t tokens,
				int64_t blocks, int64_t block_size)
{
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_seqs = seqs;
	p.max_tokens = tokens;
	p.kv_blocks = blocks;
	p.block_size = block_size;
	/* a small golden model: the op shapes below are its shapes */
	return atlas_model_load(model_dir("tests/fixtures/golden/qwen3-bf16"), be, &p);
}

static struct atlas_sreq_params req(const int32_t *prompt, int64_t n, int64_t max_tokens,
				    double temperature, uint64_t seed)
{
	struct atlas_sreq_params p = {.prompt = prompt, .n_prompt = n, .top_logprobs = -1};
	p.gen.max_tokens = max_tokens;
	p.gen.ignore_eos = true;
	atlas_sampler_default_params(&p.gen.sampling);
	p.gen.sampling.temperature = temperature;
	p.gen.sampling.seed = seed;
	return p;
}

/* Count mock calls starting with `prefix`. */
static int count(struct atlas_backend *be, const char *prefix)
{
	int n = 0;
	for (int64_t i = 0; i < atlas_backend_mock_count(be); i++)
		n += !strncmp(atlas_backend_mock_call(be, i), prefix, strlen(prefix));
	return n;
}

/* Drain all output of r into ids (n set); returns the finished result. */
static void drain(struct atlas_sreq *r, int32_t *ids, int64_t *n, struct atlas_sreq_result *res)
{
	struct atlas_sched_chunk c;
	*n = 0;
	for (;;) {
		atlas_sreq_take(r, 0, &c);
		for (size_t i = 0; i < c.n; i++)
			if (c.tok[i].id >= 0)
				ids[(*n)++] = c.tok[i].id;
		bool done = c.done;
		atlas_sched_chunk_free(&c);
		if (done)
			break;
	}
	atlas_sreq_result(r, res);
}

/* The steps' shapes: a long prompt is cut into budget-sized chunks, and
 * a running decode is never held back by it. */
static void test_chunked_prefill_on_mock(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	struct atlas_model *m = load(be, 4, 8, 0, 4);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	struct atlas_sched_params sp = {.max_seqs = 4, .max_batch_tokens = 8};
	struct atlas_sched *s = atlas_sched_new(m, NULL, &sp);
	int32_t shortp[3] = {1, 2, 3}, longp[20];
	for (int i = 0; i < 20; i++)
		longp[i] = 10 + i;
	struct atlas_sreq *a, *b;
	struct atlas_sreq_params pa = req(shortp, 3, 5, 0, 0), pb = req(longp, 20, 2, 0, 0);
	CHECK_EQ_INT(atlas_sched_submit(s, &pa, &a), 0);
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_sched_step(s), 1); /* a's prompt */
	CHECK_EQ_INT(count(be, "embed T=3 "), 1);
	CHECK_EQ_INT(atlas_sched_submit(s, &pb, &b), 0);
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_sched_step(s), 1); /* a decodes + 7 of b's prompt */
	CHECK_EQ_INT(count(be, "embed T=8 "), 1);
	CHECK_EQ_INT(count(be, "attention T=8 pos0=3 H=4 Hkv=2 hd=32 seqs=2"), 4);
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_sched_step(s), 1); /* a + 7 more */
	CHECK_EQ_INT(count(be, "embed T=8 "), 1);
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_sched_step(s), 1); /* a + the last 6 of b */
	CHECK_EQ_INT(count(be, "embed T=7 "), 1);
	struct atlas_sched_stats st;
	atlas_sched_get_stats(s, &st);
	CHECK_EQ_INT(st.running, 2);
	CHECK_EQ_INT(st.steps, 4);
	while (atlas_sched_step(s) == 1)
		;
	int32_t ids[16];
	int64_t n;
	struct atlas_sreq_result res;
	drain(a, ids, &n, &res);
	CHECK_EQ_INT(n, 5);
	CHECK_EQ_INT(res.finish, ATLAS_FINISH_LENGTH);
	CHECK_EQ_INT(res.n_prompt, 3);
	drain(b, ids, &n, &res);
	CHECK_EQ_INT(n, 2);
	atlas_sreq_release(a);
	atlas_sreq_release(b);
	atlas_sched_get_stats(s, &st);
	CHECK_EQ_INT(st.running, 0);
	CHECK_EQ_INT(st.kv_blocks_free, st.kv_blocks_total);
	/* refusals */
	struct atlas_sreq *r;
	int32_t big[4096] = {0};
	struct atlas_sreq_params pbig = req(big, atlas_model_max_context(m) + 1, 1, 0, 0);
	CHECK_EQ_INT(atlas_sched_submit(s, &pbig, &r), ATLAS_ERANGE);
	CHECK_CONTAINS(atlas_errmsg(), "more than the context");
	struct atlas_sreq_params pempty = req(shortp, 0, 1, 0, 0);
	CHECK_EQ_INT(atlas_sched_submit(s, &pempty, &r), ATLAS_EINVAL);
	int32_t bad = 5000;
	struct atlas_sreq_params pbad = req(&bad, 1, 1, 0, 0);
	CHECK_EQ_INT(atlas_sched_submit(s, &pbad, &r), ATLAS_ERANGE);
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

/* Admission waits for blocks: with a pool of 6 blocks of 4 tokens, a
 * second 16-token prompt cannot start while the first holds 5 blocks. */
static void test_admission_waits_for_blocks(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	struct atlas_model *m = load(be, 4, 64, 6, 4);
	if (!m) {
		CHECK(m != NULL);
		be->destroy(be);
		return;
	}
	struct atlas_sched *s = atlas_sched_new(m, NULL, NULL);
	int32_t p[16] = {0};
	struct atlas_sreq *a, *b;
	struct atlas_sreq_params pa = req(p, 16, 3, 0, 0);
	CHECK_EQ_INT(atlas_sched_submit(s, &pa, &a), 0);
	CHECK_EQ_INT(atlas_sched_submit(s, &pa, &b), 0);
	CHECK_EQ_INT(atlas_sched_step(s), 1);
	struct atlas_sched_stats st;
	atlas_sched_get_stats(s, &st);
	CHECK_EQ_INT(st.running, 1);
	CHECK_EQ_INT(st.waiting, 1);
	CHECK_EQ_INT(st.kv_blocks_free, 2);
	while (atlas_sched_step(s) == 1)
		;
	atlas_sched_get_stats(s, &st);
	CHECK_EQ_INT(st.running + st.waiting, 0);
	CHECK_EQ_INT(st.kv_blocks_free, 6);
	CHECK_EQ_INT(st.preemptions, 0);
	atlas_sreq_release(a);
	atlas_sreq_release(b);
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

#define NREQ 8
#define MAXGEN 24

/* Collects the ids atlas_generate reports. */
struct collect {
	int32_t *ids; /* destination */
	int n;        /* ids so far */
};

static int on_id(void *ud, int32_t id, const char *text, size_t len)
{
	struct collect *c = ud;
	if (id >= 0 && c->n < MAXGEN)
		c->ids[c->n++] = id;
	return 0;
}

/* Each request alone, through the single-sequence generation loop. */
static void alone(struct atlas_model *m, int32_t prompts[NREQ][12], const int64_t *lens,
		  double temp, int32_t want[NREQ][MAXGEN])
{
	for (int i = 0; i < NREQ; i++) {
		struct atlas_sched *q = atlas_sched_new(m, NULL, NULL);
		struct atlas_sreq_params rp = req(prompts[i], lens[i], MAXGEN, temp, 7 + (uint64_t)i);
		struct collect c = {want[i], 0};
		CHECK_EQ_INT(atlas_generate(q, prompts[i], lens[i], &rp.gen, on_id, &c, NULL), 0);
		CHECK_EQ_INT(c.n, MAXGEN);
		atlas_sched_free(q);
	}
}

/* Batched (with preemption when the pool is small) equals alone. */
static void batched_equals_alone(double temp, int64_t kv_blocks, bool expect_preempt)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, NREQ, 32, kv_blocks, 4);
	if (!m) {
		CHECK(m != NULL);
		be->destroy(be);
		return;
	}
	int32_t prompts[NREQ][12];
	int64_t lens[NREQ];
	for (int i = 0; i < NREQ; i++) {
		lens[i] = 3 + i;
		for (int j = 0; j < 12; j++)
			prompts[i][j] = (int32_t)((i * 97 + j * 31 + 5) % 1000);
	}
	int32_t want[NREQ][MAXGEN], got[NREQ][MAXGEN];
	alone(m, prompts, lens, temp, want);

	struct atlas_sched_params sp = {.max_seqs = NREQ, .max_batch_tokens = 32};
	struct atlas_sched *s = atlas_sched_new(m, NULL, &sp);
	struct atlas_sreq *r[NREQ];
	for (int i = 0; i < NREQ; i++) {
		struct atlas_sreq_params rp = req(prompts[i], lens[i], MAXGEN, temp, 7 + (uint64_t)i);
		CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r[i]), 0);
	}
	int steps = 0;
	while (atlas_sched_step(s) == 1)
		steps++;
	struct atlas_sched_stats st;
	atlas_sched_get_stats(s, &st);
	if (expect_preempt)
		CHECK(st.preemptions > 0);
	else
		CHECK_EQ_INT(st.preemptions, 0);
	for (int i = 0; i < NREQ; i++) {
		int64_t n;
		struct atlas_sreq_result res;
		drain(r[i], got[i], &n, &res);
		CHECK_EQ_INT(n, MAXGEN);
		CHECK_EQ_INT(res.rc, 0);
		CHECK(!memcmp(got[i], want[i], sizeof(want[i])));
		atlas_sreq_release(r[i]);
	}
	CHECK(steps < NREQ * (MAXGEN + 1)); /* they did share steps */
	CHECK_EQ_INT(st.running, 0);
	CHECK_EQ_INT(st.kv_blocks_free, atlas_model_kv_blocks_total(m));
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

static void test_greedy_batched_equals_alone(void)
{
	batched_equals_alone(0.0, 0, false);
}

static void test_seeded_sampling_batched_equals_alone(void)
{
	batched_equals_alone(0.9, 0, false);
}

static void test_preemption_keeps_outputs(void)
{
	/* 8 requests of up to 10 + 24 tokens need ~9 blocks each; 30 blocks
	 * force preemptions */
	batched_equals_alone(0.0, 30, true);
}

/* A released request is cancelled: its blocks come back at the next step. */
static void test_cancel_frees_blocks(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, 4, 32, 0, 4);
	if (!m) {
		CHECK(m != NULL);
		be->destroy(be);
		return;
	}
	struct atlas_sched *s = atlas_sched_new(m, NULL, NULL);
	int32_t p[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	struct atlas_sreq *a, *b;
	struct atlas_sreq_params rp = req(p, 10, 100, 0, 0);
	CHECK_EQ_INT(atlas_sched_submit(s, &rp, &a), 0);
	CHECK_EQ_INT(atlas_sched_submit(s, &rp, &b), 0);
	for (int i = 0; i < 5; i++)
		CHECK_EQ_INT(atlas_sched_step(s), 1);
	int64_t total = atlas_model_kv_blocks_total(m);
	CHECK(atlas_model_kv_blocks_free(m) < total);
	atlas_sreq_release(a);
	CHECK_EQ_INT(atlas_sched_step(s), 1);
	struct atlas_sched_stats st;
	atlas_sched_get_stats(s, &st);
	CHECK_EQ_INT(st.running, 1);
	atlas_sreq_release(b);
	CHECK_EQ_INT(atlas_sched_step(s), 0);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), total);
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

/* Logprobs: the chosen greedy token is the best alternative, values <= 0. */
static void test_logprobs(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, 2, 32, 0, 16);
	if (!m) {
		CHECK(m != NULL);
		be->destroy(be);
		return;
	}
	struct atlas_sched *s = atlas_sched_new(m, NULL, NULL);
	int32_t p[3] = {5, 6, 7};
	struct atlas_sreq *r;
	struct atlas_sreq_params rp = req(p, 3, 4, 0, 0);
	rp.top_logprobs = 5;
	CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r), 0);
	while (atlas_sched_step(s) == 1)
		;
	struct atlas_sched_chunk c;
	CHECK_EQ_INT(atlas_sreq_take(r, 0, &c), 1);
	CHECK_EQ_INT(c.n, 4);
	for (size_t i = 0; i < c.n; i++) {
		CHECK_EQ_INT(c.tok[i].n_top, 5);
		CHECK_EQ_INT(c.tok[i].top_id[0], c.tok[i].id);
		CHECK_NEAR(c.tok[i].top_lp[0], c.tok[i].logprob, 1e-6);
		CHECK(c.tok[i].logprob <= 0);
		CHECK(c.tok[i].top_lp[1] <= c.tok[i].top_lp[0]);
		CHECK(c.tok[i].top_lp[4] <= c.tok[i].top_lp[3]);
	}
	atlas_sched_chunk_free(&c);
	atlas_sreq_release(r);
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

/* The stopper holds a possible stop string back and cuts before it. */
static void test_stopper(void)
{
	struct atlas_tok *tok = atlas_tok_load(model_dir("models/default"));
	CHECK(tok != NULL);
	if (!tok)
		return;
	int32_t *ids;
	size_t n;
	const char *src = "Once upon a time there was a cat";
	CHECK_EQ_INT(atlas_tok_encode(tok, src, strlen(src), false, &ids, &n), 0);
	const char *stops[] = {"there w", "zzz"};
	struct atlas_stopper st;
	CHECK_EQ_INT(atlas_stopper_init(&st, tok, stops, 2), 0);
	char out[256] = "";
	size_t len = 0;
	bool stopped = false;
	for (size_t i = 0; i < n && !stopped; i++) {
		const char *t;
		size_t l;
		CHECK_EQ_INT(atlas_stopper_push(&st, ids[i], &t, &l, &stopped), 0);
		memcpy(out + len, t, l);
		len += l;
		out[len] = '\0';
		if (!stopped)
			CHECK(!strstr(out, "there"));
	}
	CHECK(stopped);
	CHECK_STR(out, "Once upon a time ");
	CHECK_EQ_INT(st.matched, 0);
	atlas_stopper_release(&st);
	/* no stop string: everything comes out, the tail at finish */
	CHECK_EQ_INT(atlas_stopper_init(&st, tok, stops + 1, 1), 0);
	len = 0;
	for (size_t i = 0; i < n; i++) {
		const char *t;
		size_t l;
		CHECK_EQ_INT(atlas_stopper_push(&st, ids[i], &t, &l, &stopped), 0);
		memcpy(out + len, t, l);
		len += l;
	}
	const char *t;
	size_t l;
	CHECK_EQ_INT(atlas_stopper_finish(&st, &t, &l), 0);
	memcpy(out + len, t, l);
	len += l;
	out[len] = '\0';
	CHECK_STR(out, src);
	atlas_stopper_release(&st);
	free(ids);
	atlas_tok_free(tok);
}


/* Prefix caching: prompts sharing a 10-token prefix (blocks of 4), run
 * twice through one scheduler, with a pool so small that cached blocks
 * are evicted and running requests preempted: every output equals the
 * request alone without the cache, the second round finds its prefix in
 * the cache, and every block is back in the pool at the end. */
static void test_prefix_cache_under_pressure(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, NREQ, 32, 24, 4);
	if (!m) {
		CHECK(m != NULL);
		be->destroy(be);
		return;
	}
	int32_t prompts[NREQ][12];
	int64_t lens[NREQ];
	for (int i = 0; i < NREQ; i++) {
		lens[i] = 11 + i % 2;
		for (int j = 0; j < 12; j++)
			prompts[i][j] = j < 10 ? (int32_t)(j * 37 + 11) : (int32_t)(i * 53 + j);
	}
	int32_t want[NREQ][MAXGEN], got[NREQ][MAXGEN];
	alone(m, prompts, lens, 0.8, want);

	struct atlas_sched_params sp = {.max_seqs = NREQ, .max_batch_tokens = 32,
					.prefix_cache = true};
	struct atlas_sched *s = atlas_sched_new(m, NULL, &sp);
	for (int round = 0; round < 2; round++) {
		struct atlas_sreq *r[NREQ];
		for (int i = 0; i < NREQ; i++) {
			struct atlas_sreq_params rp = req(prompts[i], lens[i], MAXGEN, 0.8, 7 + (uint64_t)i);
			CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r[i]), 0);
		}
		while (atlas_sched_step(s) == 1)
			;
		int64_t cached = 0;
		for (int i = 0; i < NREQ; i++) {
			int64_t n;
			struct atlas_sreq_result res;
			drain(r[i], got[i], &n, &res);
			CHECK_EQ_INT(n, MAXGEN);
			CHECK_EQ_INT(res.rc, 0);
			CHECK(!memcmp(got[i], want[i], sizeof(want[i])));
			cached += res.n_cached;
			atlas_sreq_release(r[i]);
		}
		if (round == 1)
			CHECK(cached >= 8); /* at least the shared two blocks once */
	}
	struct atlas_sched_stats st;
	atlas_sched_get_stats(s, &st);
	CHECK(st.preemptions > 0);
	CHECK(st.prefix_hit_tokens > 0);
	CHECK_EQ_INT(st.prefix_hit_tokens + st.prefix_miss_tokens, st.prompt_tokens);
	CHECK_EQ_INT(st.running, 0);
	CHECK_EQ_INT(st.kv_blocks_free, atlas_model_kv_blocks_total(m));
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

/* A grammar constrains its own request only: two constrained requests
 * batched with a free one give text that matches, end when the grammar is
 * complete, and the free one gets what it gets alone. */
static void test_grammar_in_batch(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true; /* the free request batched = alone */
	struct atlas_tok *tok = atlas_tok_load(model_dir("models/default"));
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	mp.max_seqs = 4;
	mp.max_tokens = 64;
	struct atlas_model *m = tok ? atlas_model_load(model_dir("models/default"), be, &mp) : NULL;
	CHECK(m != NULL);
	if (!m) {
		atlas_tok_free(tok);
		be->destroy(be);
		return;
	}
	int64_t V = atlas_model_config(m)->vocab_size;
	int32_t eos = atlas_tok_eos(tok);
	struct atlas_grammar_vocab *gv = atlas_grammar_vocab_new(tok, V, &eos, 1);
	char *text = atlas_regex_grammar("(ab|cd|e f){3}!", "");
	struct atlas_grammar *g = text ? atlas_grammar_compile(text, strlen(text), gv) : NULL;
	free(text);
	CHECK(g != NULL);
	int32_t p[4] = {100, 200, 300, 400}, alone[32], ids[3][32];
	int64_t n_alone, n[3];
	struct atlas_sreq_result res[3];
	struct atlas_sched *s = atlas_sched_new(m, tok, NULL);
	struct atlas_sreq *r[3];
	struct atlas_sreq_params free_rp = req(p, 4, 12, 1.0, 9);
	CHECK_EQ_INT(atlas_sched_submit(s, &free_rp, &r[0]), 0);
	while (atlas_sched_step(s) == 1)
		;
	drain(r[0], alone, &n_alone, &res[0]);
	atlas_sreq_release(r[0]);
	for (int k = 0; k < 3; k++) {
		struct atlas_sreq_params rp = req(p, 4, k ? 40 : 12, 1.0, k ? 20 + k : 9);
		if (k) {
			rp.gen.grammar = g;
			rp.gen.ignore_eos = false;
			rp.gen.eos_ids[0] = eos;
			rp.gen.n_eos = 1;
		}
		CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r[k]), 0);
	}
	atlas_grammar_free(g); /* the requests hold their own references */
	while (atlas_sched_step(s) == 1)
		;
	for (int k = 0; k < 3; k++) {
		drain(r[k], ids[k], &n[k], &res[k]);
		atlas_sreq_release(r[k]);
	}
	CHECK_EQ_INT(n[0], n_alone);
	CHECK(!memcmp(ids[0], alone, sizeof(int32_t) * (size_t)n_alone));
	for (int k = 1; k < 3; k++) {
		char *out = NULL;
		size_t len = 0;
		CHECK_EQ_INT(atlas_tok_decode(tok, ids[k], (size_t)n[k], &out, &len), 0);
		CHECK_EQ_INT(res[k].finish, ATLAS_FINISH_EOS);
		CHECK_EQ_INT(res[k].rc, 0);
		/* three of ab / cd / "e f", then "!" */
		size_t i = 0;
		int parts = 0;
		while (out && i < len && parts < 3) {
			if (!strncmp(out + i, "ab", 2) || !strncmp(out + i, "cd", 2))
				i += 2;
			else if (!strncmp(out + i, "e f", 3))
				i += 3;
			else
				break;
			parts++;
		}
		CHECK_EQ_INT(parts, 3);
		CHECK(out && i + 1 == len && out[i] == '!');
		if (out)
			printf("# constrained output %d: %s\n", k, out);
		free(out);
	}
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), atlas_model_kv_blocks_total(m));
	atlas_sched_free(s);
	atlas_grammar_vocab_free(gv);
	atlas_model_free(m);
	atlas_tok_free(tok);
	be->destroy(be);
}

/* The reasoning budget: after N tokens of thought only the end marker may
 * come (ids 100 and 101 stand in for <think> and </think>). */
static void test_reasoning_budget(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, 2, 32, 0, 16);
	if (!m) {
		CHECK(m != NULL);
		be->destroy(be);
		return;
	}
	struct atlas_sched *s = atlas_sched_new(m, NULL, NULL);
	int32_t p[3] = {5, 6, 7}, ids[16];
	for (int64_t budget = 1; budget <= 4; budget++) {
		struct atlas_sreq *r;
		struct atlas_sreq_params rp = req(p, 3, 10, 1.0, 77 + (uint64_t)budget);
		rp.gen.reasoning = true;
		rp.gen.start_in_reasoning = true;
		rp.gen.think_start = 100;
		rp.gen.think_end = 101;
		rp.gen.reasoning_budget = budget;
		CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r), 0);
		while (atlas_sched_step(s) == 1)
			;
		int64_t n;
		struct atlas_sreq_result res;
		drain(r, ids, &n, &res);
		atlas_sreq_release(r);
		CHECK_EQ_INT(n, 10);
		int64_t end = -1;
		for (int64_t i = 0; i < n && end < 0; i++)
			if (ids[i] == 101)
				end = i;
		CHECK(end >= 0 && end <= budget); /* the end marker by then */
	}
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

int main(void)
{
	RUN(test_chunked_prefill_on_mock);
	RUN(test_admission_waits_for_blocks);
	RUN(test_greedy_batched_equals_alone);
	RUN(test_seeded_sampling_batched_equals_alone);
	RUN(test_preemption_keeps_outputs);
	RUN(test_cancel_frees_blocks);
	RUN(test_logprobs);
	RUN(test_stopper);
	RUN(test_prefix_cache_under_pressure);
	RUN(test_grammar_in_batch);
	RUN(test_reasoning_budget);
	return harness_done();
}
