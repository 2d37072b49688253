/* test-spec.c - speculative decoding: prompt-lookup drafts, and
 * on the CPU backend that the scheduler's speculative steps give exactly
 * plain decoding's output, greedy (one request or many, with preemption
 * and with the prefix cache) and seeded, that drafts never take a
 * decode's token, and that grammars mask drafts, with every KV block
 * back in the pool afterwards. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/engine/generate.h"
#include "../../lib/engine/grammar.h"
#include "../../lib/engine/sampler.h"
#include "../../lib/engine/scheduler.h"
#include "../../lib/engine/spec.h"
#include "../../lib/io/safetensors.h"
#include "../../lib/tok/tok.h"
#include "harness.h"

static void test_ngram_draft(void)
{
	int32_t out[8];
	/* ... 1 2 3 [7 8 9] ... 1 2 3: the latest match of the 3-gram */
	const int32_t h1[] = {1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 9, 0, 1, 2, 3};
	CHECK_EQ_INT(atlas_ngram_draft(h1, 16, 3, 1, 4, out), 4);
	CHECK_EQ_INT(out[0], 7);
	CHECK_EQ_INT(out[1], 8);
	CHECK_EQ_INT(out[2], 9);
	CHECK_EQ_INT(out[3], 0);
	/* k limits the draft; the tokens up to the end may be drafted */
	CHECK_EQ_INT(atlas_ngram_draft(h1, 16, 3, 1, 2, out), 2);
	CHECK_EQ_INT(out[1], 8);
	/* the longest suffix first: the 2-gram 5 6 occurs later than 4 5 6 */
	const int32_t h2[] = {4, 5, 6, 10, 11, 5, 6, 20, 4, 5, 6};
	CHECK_EQ_INT(atlas_ngram_draft(h2, 11, 3, 2, 3, out), 3);
	CHECK_EQ_INT(out[0], 10);
	CHECK_EQ_INT(atlas_ngram_draft(h2, 11, 2, 2, 3, out), 3);
	CHECK_EQ_INT(out[0], 20);
	/* a match that ends where the history ends proposes what followed */
	const int32_t h3[] = {7, 7, 7, 7};
	CHECK_EQ_INT(atlas_ngram_draft(h3, 4, 2, 1, 5, out), 1);
	CHECK_EQ_INT(out[0], 7);
	/* no match, too short a history, no room */
	const int32_t h4[] = {1, 2, 3, 4, 5};
	CHECK_EQ_INT(atlas_ngram_draft(h4, 5, 3, 1, 4, out), 0);
	CHECK_EQ_INT(atlas_ngram_draft(h1, 1, 3, 1, 4, out), 0);
	CHECK_EQ_INT(atlas_ngram_draft(h1, 16, 3, 1, 0, out), 0);
	/* settings: defaults filled, bad ranges refused, modes by name */
	struct atlas_spec_params p = {.mode = ATLAS_SPEC_NGRAM};
	CHECK_EQ_INT(atlas_spec_check(&p), 0);
	CHECK_EQ_INT(p.num_draft, ATLAS_SPEC_DEFAULT_DRAFT);
	CHECK(p.ngram_min >= 1 && p.ngram_min <= p.ngram_max);
	p.num_draft = ATLAS_SPEC_MAX_DRAFT + 1;
	CHECK_EQ_INT(atlas_spec_check(&p), ATLAS_EINVAL);
	p = (struct atlas_spec_params){.mode = ATLAS_SPEC_NGRAM, .ngram_min = 3, .ngram_max = 2};
	CHECK_EQ_INT(atlas_spec_check(&p), ATLAS_EINVAL);
	enum atlas_spec_mode m;
	CHECK_EQ_INT(atlas_spec_parse("ngram", &m), 0);
	CHECK_EQ_INT(m, ATLAS_SPEC_NGRAM);
	CHECK_EQ_INT(atlas_spec_parse("mtp", &m), 0);
	CHECK_EQ_INT(m, ATLAS_SPEC_MTP);
	CHECK_STR(atlas_spec_name(m), "mtp");
	CHECK_EQ_INT(atlas_spec_parse("draft", &m), 0);
	CHECK_EQ_INT(m, ATLAS_SPEC_DRAFT);
	CHECK_STR(atlas_spec_name(m), "draft");
	CHECK_EQ_INT(atlas_spec_parse("bogus", &m), ATLAS_EINVAL);
}

static char path[512];

/* Golden fixture `name` with these step limits and pool. */
static struct atlas_model *load_golden(struct atlas_backend *be, const char *name, int64_t seqs,
				       int64_t tokens, int64_t blocks, int64_t block_size)
{
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_seqs = seqs;
	p.max_tokens = tokens;
	p.kv_blocks = blocks;
	p.block_size = block_size;
	snprintf(path, sizeof(path), "%s/tests/fixtures/golden/%s", harness_srcdir(), name);
	return atlas_model_load(path, be, &p);
}

static struct atlas_model *load(struct atlas_backend *be, int64_t seqs, int64_t tokens,
				int64_t blocks, int64_t block_size)
{
	return load_golden(be, "qwen3-bf16", seqs, tokens, blocks, block_size);
}

#define NREQ 6
#define PLEN 24
#define MAXGEN 40

/* Prompts that repeat themselves (so drafts come from the first token). */
static void make_prompts(int32_t p[NREQ][PLEN])
{
	for (int i = 0; i < NREQ; i++)
		for (int j = 0; j < PLEN; j++)
			p[i][j] = (int32_t)(((j % (5 + i)) * 41 + i * 13 + 3) % 900);
}

/* Run the NREQ prompts on scheduler params sp (all at once, or one by
 * one when serial) at temperature temp; outputs to got, stats to *st. */
static void run_all(struct atlas_model *m, const struct atlas_sched_params *sp, bool serial,
		    double temp, int top, int32_t got[NREQ][MAXGEN], float lp[NREQ][MAXGEN],
		    struct atlas_sched_stats *st)
{
	int32_t prompts[NREQ][PLEN];
	make_prompts(prompts);
	struct atlas_sched *s = atlas_sched_new(m, NULL, sp);
	CHECK(s != NULL);
	if (!s)
		return;
	struct atlas_sreq *r[NREQ];
	for (int i = 0; i < NREQ; i++) {
		struct atlas_sreq_params rp = {.prompt = prompts[i], .n_prompt = PLEN - i,
					       .top_logprobs = top};
		rp.gen.max_tokens = MAXGEN;
		rp.gen.ignore_eos = true;
		atlas_sampler_default_params(&rp.gen.sampling);
		rp.gen.sampling.temperature = temp;
		rp.gen.sampling.seed = 11 + (uint64_t)i;
		CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r[i]), 0);
		while (serial && atlas_sched_step(s) == 1)
			;
	}
	while (atlas_sched_step(s) == 1)
		;
	for (int i = 0; i < NREQ; i++) {
		struct atlas_sched_chunk c;
		int64_t n = 0;
		bool fin = false;
		for (;;) {
			/* the steps have run out: everything must be there */
			if (!atlas_sreq_take(r[i], 0, &c)) {
				CHECK(!"a request did not finish");
				break;
			}
			for (size_t k = 0; k < c.n; k++)
				if (c.tok[k].id >= 0 && n < MAXGEN) {
					lp[i][n] = c.tok[k].logprob;
					got[i][n++] = c.tok[k].id;
				}
			fin = c.done;
			atlas_sched_chunk_free(&c);
			if (fin)
				break;
		}
		struct atlas_sreq_result res = {.rc = -1};
		if (fin)
			atlas_sreq_result(r[i], &res);
		CHECK_EQ_INT(res.rc, 0);
		CHECK_EQ_INT(n, MAXGEN);
		atlas_sreq_release(r[i]);
	}
	atlas_sched_get_stats(s, st);
	CHECK_EQ_INT(st->running, 0);
	CHECK_EQ_INT(st->kv_blocks_free, atlas_model_kv_blocks_total(m));
	atlas_sched_free(s);
}

/* Greedy with n-gram drafts equals greedy without, token for token:
 * alone, batched, with preemption (a small pool), with the prefix cache
 * warm. In batch-invariant mode the logprobs are the same bits too (a
 * row's logits do not depend on its step's rows); otherwise the CPU's
 * multi-row products may round the last bits differently. */
static void test_spec_greedy_equals_plain(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	static int32_t want[NREQ][MAXGEN], got[NREQ][MAXGEN];
	static float wlp[NREQ][MAXGEN], glp[NREQ][MAXGEN];
	struct atlas_sched_stats st;
	for (int cfg = 0; cfg < 3; cfg++) {
		/* 6 requests of up to 64 tokens need 16 blocks of 4 each: 40
		 * blocks force preemptions */
		const bool pool = cfg == 1, inv = cfg == 2;
		be->batch_invariant = inv;
		struct atlas_model *m = load(be, NREQ, 64, pool ? 40 : 0, 4);
		CHECK(m != NULL);
		if (!m)
			break;
		struct atlas_sched_params plain = {.max_seqs = NREQ, .max_batch_tokens = 64};
		run_all(m, &plain, true, 0.0, 3, want, wlp, &st);
		CHECK_EQ_INT(st.spec_steps, 0);
		for (int k = 1; k <= 5; k += 4) {
			struct atlas_sched_params sp = plain;
			sp.spec = (struct atlas_spec_params){.mode = ATLAS_SPEC_NGRAM, .num_draft = k};
			for (int serial = 1; serial >= 0; serial--) {
				memset(got, 0xff, sizeof(got));
				run_all(m, &sp, serial, 0.0, 3, got, glp, &st);
				CHECK(!memcmp(got, want, sizeof(want)));
				double dmax = 0;
				for (int i = 0; i < NREQ; i++)
					for (int j = 0; j < MAXGEN; j++)
						dmax = fmax(dmax, fabs(glp[i][j] - wlp[i][j]));
				if (inv)
					CHECK(!memcmp(glp, wlp, sizeof(wlp)));
				else
					CHECK(dmax < 1e-4);
				CHECK(st.spec_drafted > 0);
				CHECK(st.spec_accepted > 0);
				CHECK(st.spec_accepted <= st.spec_drafted);
				CHECK(st.spec_tokens > st.spec_steps); /* more than one a step */
				if (pool && !serial)
					CHECK(st.preemptions > 0);
			}
			/* the prefix cache: the second round finds the first's blocks */
			sp.prefix_cache = true;
			for (int round = 0; round < 2; round++) {
				run_all(m, &sp, false, 0.0, 3, got, glp, &st);
				CHECK(!memcmp(got, want, sizeof(want)));
				if (round == 1)
					CHECK(st.prefix_hit_tokens > 0);
			}
		}
		atlas_model_free(m);
	}
	be->destroy(be);
}

/* Seeded sampling with drafts gives the tokens it gives without, token
 * for token: a row is sampled with the request's next uniform as a plain
 * step would, and the draft is kept when they agree (batch-invariant
 * mode, so the rows' logits are the same bits). Alone or batched alike. */
static void test_spec_seeded(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true;
	struct atlas_model *m = load(be, NREQ, 64, 0, 4);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	static int32_t a[NREQ][MAXGEN], b[NREQ][MAXGEN], c[NREQ][MAXGEN];
	static float lp[NREQ][MAXGEN];
	struct atlas_sched_stats st;
	struct atlas_sched_params plain = {.max_seqs = NREQ, .max_batch_tokens = 64};
	struct atlas_sched_params sp = plain;
	sp.spec = (struct atlas_spec_params){.mode = ATLAS_SPEC_NGRAM, .num_draft = 4};
	run_all(m, &plain, true, 0.8, -1, a, lp, &st);
	run_all(m, &sp, true, 0.8, -1, b, lp, &st);
	CHECK(st.spec_accepted > 0);
	CHECK(!memcmp(a, b, sizeof(a)));
	run_all(m, &sp, false, 0.8, -1, c, lp, &st);
	CHECK(!memcmp(a, c, sizeof(a)));
	atlas_model_free(m);
	be->destroy(be);
}

/* A draft model's drafts: greedy output equals plain decoding's, alone,
 * batched, with preemption (small pools in both models) and with the
 * prefix cache (the draft model's too), whether the drafts are good (the
 * model itself as its own draft: in batch-invariant mode every draft is
 * the target's token, so every one is accepted) or mostly bad (another
 * small model of the vocabulary's size); seeded output too; and every draft
 * sequence's blocks go back to the draft pool. */
static void test_draft_model(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true;
	static int32_t want[NREQ][MAXGEN], got[NREQ][MAXGEN];
	static float wlp[NREQ][MAXGEN], glp[NREQ][MAXGEN];
	struct atlas_sched_stats st;
	for (int pool = 0; pool < 2; pool++) {
		struct atlas_model *m = load(be, NREQ, 64, pool ? 40 : 0, 4);
		struct atlas_model *same = load(be, NREQ, 64, pool ? 40 : 0, 4);
		/* another model with the vocabulary's size: a small llama */
		struct atlas_model *rnd = load_golden(be, "llama3", NREQ, 64, pool ? 40 : 0, 4);
		CHECK(m && same && rnd);
		if (!m || !same || !rnd) {
			atlas_model_free(m);
			atlas_model_free(same);
			atlas_model_free(rnd);
			break;
		}
		struct atlas_sched_params plain = {.max_seqs = NREQ, .max_batch_tokens = 64};
		run_all(m, &plain, true, 0.0, 3, want, wlp, &st);
		for (int which = 0; which < 2; which++) {
			struct atlas_model *dm = which ? rnd : same;
			struct atlas_sched_params sp = plain;
			sp.spec = (struct atlas_spec_params){.mode = ATLAS_SPEC_DRAFT, .num_draft = 4};
			sp.draft = dm;
			for (int serial = 1; serial >= 0; serial--) {
				memset(got, 0xff, sizeof(got));
				run_all(m, &sp, serial, 0.0, 3, got, glp, &st);
				CHECK(!memcmp(got, want, sizeof(want)));
				CHECK(!memcmp(glp, wlp, sizeof(wlp)));
				CHECK(st.spec_drafted > 0);
				CHECK(st.spec_accepted <= st.spec_drafted);
				if (!which && !pool) {
					/* its own draft: every draft is its token */
					CHECK_EQ_INT(st.spec_accepted, st.spec_drafted);
					CHECK(st.spec_tokens > 3 * st.spec_steps);
				}
				if (which)
					CHECK(st.spec_accepted < st.spec_drafted);
				if (pool && !serial)
					CHECK(st.preemptions > 0);
				CHECK_EQ_INT(atlas_model_kv_blocks_free(dm), atlas_model_kv_blocks_total(dm));
				printf("# draft %s%s%s: %lld of %lld accepted, %lld tokens in %lld steps\n",
				       which ? "another model" : "itself", pool ? ", small pools" : "",
				       serial ? ", serial" : "", (long long)st.spec_accepted,
				       (long long)st.spec_drafted, (long long)st.spec_tokens,
				       (long long)st.spec_steps);
			}
			sp.prefix_cache = true;
			for (int round = 0; round < 2; round++) {
				run_all(m, &sp, false, 0.0, 3, got, glp, &st);
				CHECK(!memcmp(got, want, sizeof(want)));
				if (round == 1)
					CHECK(st.prefix_hit_tokens > 0);
			}
			/* the draft model's own cache kept the prompts' blocks */
			CHECK(atlas_model_kv_blocks_cached(dm) > 0);
			atlas_model_set_prefix_cache(dm, false);
			CHECK_EQ_INT(atlas_model_kv_blocks_free(dm), atlas_model_kv_blocks_total(dm));
		}
		/* seeded: the plain tokens, with either draft */
		static int32_t a[NREQ][MAXGEN], b[NREQ][MAXGEN];
		run_all(m, &plain, true, 0.8, -1, a, glp, &st);
		for (int which = 0; which < 2 && !pool; which++) {
			struct atlas_sched_params sp = plain;
			sp.spec = (struct atlas_spec_params){.mode = ATLAS_SPEC_DRAFT, .num_draft = 3};
			sp.draft = which ? rnd : same;
			run_all(m, &sp, false, 0.8, -1, b, glp, &st);
			CHECK(st.spec_drafted > 0);
			CHECK(!memcmp(a, b, sizeof(a)));
		}
		atlas_model_free(rnd);
		atlas_model_free(same);
		atlas_model_free(m);
	}
	/* vocabularies of other sizes (padding): a draft model with more rows
	 * than the model (qwen3: 1,088 against 1,024), and a model with more
	 * than its draft; output still the plain one */
	for (int big_draft = 0; big_draft < 2; big_draft++) {
		const char *a = "qwen3-bf16", *b = "qwen3";
		struct atlas_model *tm = load_golden(be, big_draft ? a : b, NREQ, 64, 0, 4);
		struct atlas_model *dmv = load_golden(be, big_draft ? b : a, NREQ, 64, 0, 4);
		CHECK(tm && dmv);
		if (tm && dmv) {
			CHECK(atlas_model_config(dmv)->vocab_size != atlas_model_config(tm)->vocab_size);
			struct atlas_sched_params plain = {.max_seqs = NREQ, .max_batch_tokens = 64};
			struct atlas_sched_params sp = plain;
			sp.spec = (struct atlas_spec_params){.mode = ATLAS_SPEC_DRAFT, .num_draft = 4};
			sp.draft = dmv;
			run_all(tm, &plain, false, 0.0, -1, want, wlp, &st);
			run_all(tm, &sp, false, 0.0, -1, got, glp, &st);
			CHECK(!memcmp(got, want, sizeof(want)));
			CHECK(st.spec_drafted > 0);
		}
		atlas_model_free(dmv);
		atlas_model_free(tm);
	}
	/* no draft model given: refused */
	struct atlas_model *m = load(be, NREQ, 64, 0, 4);
	CHECK(m != NULL);
	struct atlas_sched_params sp = {.spec = {.mode = ATLAS_SPEC_DRAFT}};
	CHECK(m && !atlas_sched_new(m, NULL, &sp));
	CHECK_CONTAINS(atlas_errmsg(), "draft model");
	/* nor one whose steps cannot hold the sequences that may draft */
	struct atlas_model *small = load(be, 2, 64, 0, 4);
	sp = (struct atlas_sched_params){.max_seqs = NREQ, .spec = {.mode = ATLAS_SPEC_DRAFT},
					 .draft = small};
	CHECK(m && small && !atlas_sched_new(m, NULL, &sp));
	CHECK_CONTAINS(atlas_errmsg(), "step limits");
	atlas_model_free(small);
	atlas_model_free(m);
	be->destroy(be);
}

/* Drafts take only what every decode has left: with a token budget of
 * one a sequence, a step of NREQ decodes has none to spare, so every
 * request that is decoding gets a token in every step (none waits while
 * another's drafts run, none is preempted), and the outputs are the
 * plain ones. */
static void test_spec_leaves_decodes_alone(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, NREQ, NREQ, 0, 4);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	static int32_t a[NREQ][MAXGEN];
	static float lp[NREQ][MAXGEN];
	struct atlas_sched_stats st;
	struct atlas_sched_params plain = {.max_seqs = NREQ, .max_batch_tokens = NREQ};
	run_all(m, &plain, false, 0.0, -1, a, lp, &st);
	struct atlas_sched_params sp = plain;
	sp.spec = (struct atlas_spec_params){.mode = ATLAS_SPEC_NGRAM, .num_draft = 4};
	struct atlas_sched *s = atlas_sched_new(m, NULL, &sp);
	int32_t prompts[NREQ][PLEN];
	make_prompts(prompts);
	struct atlas_sreq *r[NREQ];
	int64_t got[NREQ] = {0};
	bool done[NREQ] = {false};
	for (int i = 0; i < NREQ; i++) {
		struct atlas_sreq_params rp = {.prompt = prompts[i], .n_prompt = PLEN - i,
					       .top_logprobs = -1};
		rp.gen.max_tokens = MAXGEN;
		rp.gen.ignore_eos = true;
		atlas_sampler_default_params(&rp.gen.sampling);
		rp.gen.sampling.temperature = 0;
		CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r[i]), 0);
	}
	int starved = 0;
	while (atlas_sched_step(s) == 1) {
		for (int i = 0; i < NREQ; i++) {
			struct atlas_sched_chunk c;
			if (done[i])
				continue;
			if (!atlas_sreq_take(r[i], 0, &c)) {
				starved += got[i] > 0; /* nothing new at all */
				continue;
			}
			int64_t before = got[i];
			for (size_t k = 0; k < c.n; k++)
				if (c.tok[k].id >= 0) {
					CHECK(got[i] < MAXGEN && c.tok[k].id == a[i][got[i]]);
					got[i]++;
				}
			/* a request that had begun decoding and is not done got a
			 * token this step */
			if (before > 0 && got[i] == before && !c.done)
				starved++;
			done[i] = c.done;
			atlas_sched_chunk_free(&c);
		}
	}
	CHECK_EQ_INT(starved, 0);
	atlas_sched_get_stats(s, &st);
	CHECK(st.spec_drafted > 0); /* once some requests have finished */
	CHECK_EQ_INT(st.preemptions, 0);
	for (int i = 0; i < NREQ; i++) {
		CHECK(done[i]);
		CHECK_EQ_INT(got[i], MAXGEN);
		atlas_sreq_release(r[i]);
	}
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

/* A grammar applies to drafts and verification: drafts it refuses are
 * cut, each row is masked by the grammar's state after the drafts
 * before it, and the constrained output (greedy, with logprobs) equals
 * the output without drafts, batched with a free request. */
static void test_spec_grammar(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true;
	snprintf(path, sizeof(path), "%s/models/default", harness_srcdir());
	struct atlas_tok *tok = atlas_tok_load(path);
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	mp.max_seqs = 4;
	mp.max_tokens = 64;
	struct atlas_model *m = tok ? atlas_model_load(path, be, &mp) : NULL;
	CHECK(m != NULL);
	if (!m) {
		atlas_tok_free(tok);
		be->destroy(be);
		return;
	}
	int64_t V = atlas_model_config(m)->vocab_size;
	int32_t eos = atlas_tok_eos(tok);
	struct atlas_grammar_vocab *gv = atlas_grammar_vocab_new(tok, V, &eos, 1);
	char *text = atlas_regex_grammar("(ab|cd|e f){10}!", "");
	struct atlas_grammar *g = text ? atlas_grammar_compile(text, strlen(text), gv) : NULL;
	free(text);
	CHECK(g != NULL);
	int32_t p[6] = {100, 200, 300, 400, 100, 200};
	int32_t out[3][2][64];
	float lp[3][2][64];
	int64_t n[3][2] = {{0}};
	int64_t drafted = 0, accepted = 0, dm_drafted = 0, dm_accepted = 0;
	/* the draft model: the model itself, loaded again */
	struct atlas_model *dm = atlas_model_load(path, be, &mp);
	CHECK(dm != NULL);
	for (int spec = 0; spec < 3 && dm; spec++) {
		static const enum atlas_spec_mode modes[3] = {ATLAS_SPEC_NONE, ATLAS_SPEC_NGRAM,
							      ATLAS_SPEC_DRAFT};
		struct atlas_sched_params sp = {.spec = {.mode = modes[spec], .num_draft = 4},
						.draft = dm};
		struct atlas_sched *s = atlas_sched_new(m, tok, &sp);
		struct atlas_sreq *r[2];
		for (int k = 0; k < 2; k++) {
			struct atlas_sreq_params rp = {.prompt = p, .n_prompt = 6, .top_logprobs = 2};
			rp.gen.max_tokens = k ? 60 : 30;
			atlas_sampler_default_params(&rp.gen.sampling);
			rp.gen.sampling.temperature = 0;
			rp.gen.eos_ids[0] = eos;
			rp.gen.n_eos = 1;
			rp.gen.ignore_eos = !k;
			rp.gen.grammar = k ? g : NULL;
			CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r[k]), 0);
		}
		while (atlas_sched_step(s) == 1)
			;
		for (int k = 0; k < 2; k++) {
			struct atlas_sched_chunk c;
			bool fin = false;
			while (!fin && atlas_sreq_take(r[k], 0, &c)) {
				for (size_t i = 0; i < c.n; i++)
					if (c.tok[i].id >= 0 && n[spec][k] < 64) {
						lp[spec][k][n[spec][k]] = c.tok[i].logprob;
						out[spec][k][n[spec][k]++] = c.tok[i].id;
					}
				fin = c.done;
				atlas_sched_chunk_free(&c);
			}
			CHECK(fin);
			struct atlas_sreq_result res;
			atlas_sreq_result(r[k], &res);
			CHECK_EQ_INT(res.rc, 0);
			if (k)
				CHECK_EQ_INT(res.finish, ATLAS_FINISH_EOS);
			atlas_sreq_release(r[k]);
		}
		struct atlas_sched_stats st;
		atlas_sched_get_stats(s, &st);
		if (spec == 1) {
			drafted = st.spec_drafted;
			accepted = st.spec_accepted;
		} else if (spec == 2) {
			dm_drafted = st.spec_drafted;
			dm_accepted = st.spec_accepted;
		}
		atlas_sched_free(s);
	}
	for (int spec = 1; spec < 3; spec++)
		for (int k = 0; k < 2; k++) {
			CHECK_EQ_INT(n[spec][k], n[0][k]);
			CHECK(!memcmp(out[spec][k], out[0][k], sizeof(int32_t) * (size_t)n[0][k]));
			CHECK(!memcmp(lp[spec][k], lp[0][k], sizeof(float) * (size_t)n[0][k]));
		}
	/* the draft model drafts under the grammar: its own greedy tokens,
	 * every one accepted */
	printf("# draft model under a grammar: %lld drafts, %lld accepted\n",
	       (long long)dm_drafted, (long long)dm_accepted);
	CHECK(dm_drafted > 0);
	CHECK_EQ_INT(dm_accepted, dm_drafted);
	atlas_model_free(dm);
	char *txt = NULL;
	size_t len = 0;
	CHECK_EQ_INT(atlas_tok_decode(tok, out[1][1], (size_t)n[1][1], &txt, &len), 0);
	CHECK(txt && len > 0 && txt[len - 1] == '!');
	printf("# constrained: %s (%lld drafts, %lld accepted)\n", txt ? txt : "",
	       (long long)drafted, (long long)accepted);
	free(txt);
	CHECK(accepted > 0);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), atlas_model_kv_blocks_total(m));
	atlas_grammar_free(g);
	atlas_grammar_vocab_free(gv);
	atlas_model_free(m);
	atlas_tok_free(tok);
	be->destroy(be);
}

/* The head of model m (loaded from `path`) with m's limits. */
static struct atlas_model *load_head(struct atlas_model *m)
{
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_seqs = atlas_model_max_seqs(m);
	p.max_tokens = atlas_model_max_tokens(m);
	p.kv_blocks = atlas_model_kv_blocks_total(m);
	p.block_size = atlas_model_block_size(m);
	return atlas_model_load_mtp(path, m, &p);
}

/* MTP heads (--speculative mtp): the checkpoint's own head drafts (the
 * random head of qwen3-next-bf16, the echo head of qwen3-5-moe: both
 * almost never right) and the output, greedy or seeded, is plain
 * decoding's, logprobs and all: alone, batched, with preemption (small
 * pools in the model and the head) and with the prefix cache (the
 * head's too); every head block goes back. */
static void test_mtp(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true;
	static int32_t want[NREQ][MAXGEN], got[NREQ][MAXGEN];
	static float wlp[NREQ][MAXGEN], glp[NREQ][MAXGEN];
	struct atlas_sched_stats st;
	static const char *const names[] = {"qwen3-next-bf16", "qwen3-5-moe"};
	for (int f = 0; f < 2; f++)
		for (int pool = 0; pool < 2; pool++) {
			struct atlas_model *m = load_golden(be, names[f], NREQ, 64, pool ? 40 : 0, 4);
			struct atlas_model *h = m ? load_head(m) : NULL;
			CHECK(m && h);
			if (!m || !h) {
				atlas_model_free(m);
				continue;
			}
			struct atlas_sched_params plain = {.max_seqs = NREQ, .max_batch_tokens = 64};
			run_all(m, &plain, true, 0.0, 3, want, wlp, &st);
			struct atlas_sched_params sp = plain;
			sp.spec = (struct atlas_spec_params){.mode = ATLAS_SPEC_MTP, .num_draft = 4};
			sp.draft = h;
			for (int serial = 1; serial >= 0; serial--) {
				memset(got, 0xff, sizeof(got));
				run_all(m, &sp, serial, 0.0, 3, got, glp, &st);
				CHECK(!memcmp(got, want, sizeof(want)));
				CHECK(!memcmp(glp, wlp, sizeof(wlp)));
				CHECK(st.spec_drafted > 0);
				CHECK(st.spec_accepted <= st.spec_drafted);
				if (pool && !serial)
					CHECK(st.preemptions > 0);
				CHECK_EQ_INT(atlas_model_kv_blocks_free(h), atlas_model_kv_blocks_total(h));
				printf("# mtp %s%s%s: %lld of %lld accepted; head entries %lld from "
				       "hidden states, %lld from zeros\n", names[f],
				       pool ? ", small pools" : "", serial ? ", serial" : "",
				       (long long)st.spec_accepted, (long long)st.spec_drafted,
				       (long long)st.mtp_entries, (long long)st.mtp_blind);
				/* every entry from the state its token left (the
				 * prompts and outputs, all but each one's last) */
				CHECK(st.mtp_entries > 0);
				if (!pool)
					CHECK_EQ_INT(st.mtp_blind, 0);
			}
			if (!pool) {
				/* (the trunk's cache hits only where it holds a state
				 * snapshot, which these short prompts leave at their
				 * end: README-hybrid.md; the head's cache has no such
				 * limit) */
				sp.prefix_cache = true;
				for (int round = 0; round < 2; round++) {
					run_all(m, &sp, false, 0.0, 3, got, glp, &st);
					CHECK(!memcmp(got, want, sizeof(want)));
				}
				/* the head kept the prompts' entries */
				CHECK(atlas_model_kv_blocks_cached(h) > 0);
				atlas_model_set_prefix_cache(h, false);
				CHECK_EQ_INT(atlas_model_kv_blocks_free(h), atlas_model_kv_blocks_total(h));
				static int32_t a[NREQ][MAXGEN], b[NREQ][MAXGEN];
				sp.prefix_cache = false;
				run_all(m, &plain, true, 0.8, -1, a, glp, &st);
				run_all(m, &sp, false, 0.8, -1, b, glp, &st);
				CHECK(st.spec_drafted > 0);
				CHECK(!memcmp(a, b, sizeof(a)));
			}
			/* a head is needed, and a draft model is not one */
			sp.draft = NULL;
			CHECK(!atlas_sched_new(m, NULL, &sp));
			CHECK_CONTAINS(atlas_errmsg(), "MTP head");
			atlas_model_free(h);
			atlas_model_free(m);
		}
	be->destroy(be);
}

/* qwen3-5-moe made a bigram model into dir `name` of the tmpdir: every
 * mixer and MLP of the trunk adds zero (their output projections are
 * zeros), so the next token depends on the last one only,
 * argmax(head(norm(embed(t)))); and its echo head, given fc's embedding
 * half as the identity and the trunk's final norm, computes that same
 * function of its input token. */
static int write_bigram(const char *name)
{
	char src[600];
	snprintf(src, sizeof(src), "%s/tests/fixtures/golden/qwen3-5-moe", harness_srcdir());
	struct atlas_st *st = atlas_st_open(src);
	if (!st)
		return -1;
	const int64_t n = atlas_st_count(st);
	struct harness_tensor *t = calloc((size_t)n, sizeof(*t));
	void **own = calloc((size_t)n, sizeof(void *));
	const struct atlas_tensor_info *fin = atlas_st_find(st, "model.norm.weight");
	for (int64_t i = 0; i < n; i++) {
		const struct atlas_tensor_info *x = atlas_st_get(st, i);
		t[i] = (struct harness_tensor){.name = x->name, .dtype = atlas_dtype_name(x->dtype),
					       .ndim = x->ndim, .data = x->data, .len = x->nbytes};
		for (int d = 0; d < x->ndim && d < 3; d++)
			t[i].shape[d] = x->shape[d];
		if (strstr(x->name, "out_proj.weight") || strstr(x->name, "o_proj.weight") ||
		    strstr(x->name, "down_proj.weight")) {
			t[i].data = own[i] = calloc(1, x->nbytes);
		} else if (!strcmp(x->name, "mtp.fc.weight")) {
			float *w = calloc(1, x->nbytes);
			for (int64_t r = 0; r < x->shape[0]; r++)
				w[r * x->shape[1] + r] = 1.0f; /* [I | 0] */
			t[i].data = own[i] = w;
		} else if (!strcmp(x->name, "mtp.norm.weight")) {
			t[i].data = fin->data;
		}
	}
	char rel[256], cfg[700];
	snprintf(rel, sizeof(rel), "%s/model.safetensors", name);
	snprintf(cfg, sizeof(cfg), "%s/%s", harness_tmpdir(), name);
	mkdir(cfg, 0755);
	char *out = harness_write_st(rel, t, (int)n);
	snprintf(cfg, sizeof(cfg), "%s/config.json", src);
	FILE *f = fopen(cfg, "rb");
	char buf[8192];
	size_t len = f ? fread(buf, 1, sizeof(buf), f) : 0;
	if (f)
		fclose(f);
	snprintf(rel, sizeof(rel), "%s/%s", harness_tmpdir(), name);
	char *cout = len ? harness_write(rel, "config.json", buf, len) : NULL;
	int rc = out && cout ? 0 : -1;
	free(out);
	free(cout);
	for (int64_t i = 0; i < n; i++)
		free(own[i]);
	free(own);
	free(t);
	atlas_st_close(st);
	return rc;
}

/* The bigram model's head is always right: nearly every draft is
 * accepted and a step gives about 1 + K tokens, the output still the
 * plain one (the acceptance paths: a catch-up of several rows a step). */
static void test_mtp_accepts(void)
{
	CHECK_EQ_INT(write_bigram("bigram"), 0);
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true;
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_seqs = NREQ;
	p.max_tokens = 64;
	p.block_size = 4;
	snprintf(path, sizeof(path), "%s/bigram", harness_tmpdir());
	struct atlas_model *m = atlas_model_load(path, be, &p);
	struct atlas_model *h = m ? load_head(m) : NULL;
	CHECK(m && h);
	if (m && h) {
		static int32_t want[NREQ][MAXGEN], got[NREQ][MAXGEN];
		static float wlp[NREQ][MAXGEN], glp[NREQ][MAXGEN];
		struct atlas_sched_stats st;
		struct atlas_sched_params plain = {.max_seqs = NREQ, .max_batch_tokens = 64};
		run_all(m, &plain, true, 0.0, -1, want, wlp, &st);
		struct atlas_sched_params sp = plain;
		sp.spec = (struct atlas_spec_params){.mode = ATLAS_SPEC_MTP, .num_draft = 4};
		sp.draft = h;
		for (int serial = 1; serial >= 0; serial--) {
			run_all(m, &sp, serial, 0.0, -1, got, glp, &st);
			CHECK(!memcmp(got, want, sizeof(want)));
			printf("# bigram mtp%s: %lld of %lld accepted, %lld tokens in %lld steps\n",
			       serial ? ", serial" : "", (long long)st.spec_accepted,
			       (long long)st.spec_drafted, (long long)st.spec_tokens,
			       (long long)st.spec_steps);
			CHECK(st.spec_drafted > 0);
			CHECK(st.spec_accepted * 10 >= st.spec_drafted * 9);
			CHECK(st.spec_tokens > 3 * st.spec_steps);
		}
	}
	atlas_model_free(h);
	atlas_model_free(m);
	be->destroy(be);
}

/* The bigram model's head under a grammar (a regex over the fixture's
 * tokenizer): the head drafts among the tokens the grammar allows after
 * the drafts before, the model verifies under the same masks, and the
 * output is the plain constrained one with nearly every draft kept. */
static void test_mtp_grammar(void)
{
	CHECK_EQ_INT(write_bigram("bigram"), 0);
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true;
	char src[600];
	snprintf(src, sizeof(src), "%s/tests/fixtures/golden/qwen3-5-moe", harness_srcdir());
	struct atlas_tok *tok = atlas_tok_load(src);
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	mp.max_seqs = 4;
	mp.max_tokens = 64;
	snprintf(path, sizeof(path), "%s/bigram", harness_tmpdir());
	struct atlas_model *m = tok ? atlas_model_load(path, be, &mp) : NULL;
	struct atlas_model *h = m ? load_head(m) : NULL;
	CHECK(tok && m && h);
	int32_t eos = tok ? atlas_tok_eos(tok) : -1;
	struct atlas_grammar_vocab *gv =
	    h ? atlas_grammar_vocab_new(tok, atlas_model_config(m)->vocab_size, &eos, 1) : NULL;
	char *text = gv ? atlas_regex_grammar("(ab|cd|e f){6}!", "") : NULL;
	struct atlas_grammar *g = text ? atlas_grammar_compile(text, strlen(text), gv) : NULL;
	free(text);
	CHECK(!h || g);
	int32_t out[2][64], p[5] = {100, 200, 300, 400, 100};
	float lp[2][64];
	int64_t n[2] = {0, 0};
	struct atlas_sched_stats st = {0};
	for (int spec = 0; spec < 2 && g; spec++) {
		struct atlas_sched_params sp = {.spec = {.mode = spec ? ATLAS_SPEC_MTP : ATLAS_SPEC_NONE,
							 .num_draft = 4},
						.draft = spec ? h : NULL};
		struct atlas_sched *s = atlas_sched_new(m, tok, &sp);
		struct atlas_sreq *r;
		struct atlas_sreq_params rp = {.prompt = p, .n_prompt = 5, .top_logprobs = 2};
		rp.gen.max_tokens = 60;
		atlas_sampler_default_params(&rp.gen.sampling);
		rp.gen.sampling.temperature = 0;
		rp.gen.eos_ids[0] = eos;
		rp.gen.n_eos = 1;
		rp.gen.grammar = g;
		CHECK_EQ_INT(atlas_sched_submit(s, &rp, &r), 0);
		while (atlas_sched_step(s) == 1)
			;
		struct atlas_sched_chunk c;
		bool fin = false;
		while (!fin && atlas_sreq_take(r, 0, &c)) {
			for (size_t i = 0; i < c.n; i++)
				if (c.tok[i].id >= 0 && n[spec] < 64) {
					lp[spec][n[spec]] = c.tok[i].logprob;
					out[spec][n[spec]++] = c.tok[i].id;
				}
			fin = c.done;
			atlas_sched_chunk_free(&c);
		}
		struct atlas_sreq_result res = {.rc = -1};
		atlas_sreq_result(r, &res);
		CHECK_EQ_INT(res.rc, 0);
		CHECK_EQ_INT(res.finish, ATLAS_FINISH_EOS);
		atlas_sreq_release(r);
		atlas_sched_get_stats(s, &st);
		atlas_sched_free(s);
	}
	CHECK_EQ_INT(n[1], n[0]);
	CHECK(!memcmp(out[1], out[0], sizeof(int32_t) * (size_t)n[0]));
	CHECK(!memcmp(lp[1], lp[0], sizeof(float) * (size_t)n[0]));
	char *txt = NULL;
	size_t len = 0;
	if (n[0] && !atlas_tok_decode(tok, out[0], (size_t)n[0], &txt, &len))
		printf("# bigram mtp under a grammar: %.*s (%lld drafts, %lld accepted)\n", (int)len,
		       txt, (long long)st.spec_drafted, (long long)st.spec_accepted);
	CHECK(txt && len > 0 && txt[len - 1] == '!');
	free(txt);
	CHECK(st.spec_drafted > 0);
	CHECK(st.spec_accepted * 10 >= st.spec_drafted * 8);
	atlas_grammar_free(g);
	atlas_grammar_vocab_free(gv);
	atlas_model_free(h);
	atlas_model_free(m);
	atlas_tok_free(tok);
	be->destroy(be);
}

int main(void)
{
	RUN(test_ngram_draft);
	RUN(test_spec_greedy_equals_plain);
	RUN(test_spec_seeded);
	RUN(test_spec_leaves_decodes_alone);
	RUN(test_spec_grammar);
	RUN(test_draft_model);
	RUN(test_mtp);
	RUN(test_mtp_accepts);
	RUN(test_mtp_grammar);
	return harness_done();
}
