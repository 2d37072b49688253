/* test-invariance.c - batch invariance end to end, on the shipped model:
 * with be->batch_invariant set (as atlas-serve sets it), a sequence's
 * logits do not depend, bit for bit, on how its prompt was chunked or on
 * what else is in its steps.
 *  - a 700-token prompt prefilled in one step, in chunks of 512, 100 and
 *    64, and one token at a time gives the same logits at every position
 *    (so the same KV rows: every later position reads them);
 *  - a sequence decoded alone and in batches of 7, 32 and 64 (the others
 *    at other positions, one step mixing in prefill chunks) gives the
 *    same logits at every step.
 * The CPU backend by default; ATLAS_TEST_DEVICE=cuda runs it on the GPU
 * (scripts/gpu-test.sh). ATLAS_TEST_NO_INVARIANT=1 runs it with the mode
 * off, to see it fail where the backend's fast paths depend on the batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/io/config.h"
#include "../../lib/model/model.h"
#include "harness.h"

static struct atlas_backend *be;
static struct atlas_model *m;
static int64_t V;

#define PROMPT 700

/* Token i of a pseudo-random stream `seed` in [0, V). */
static int32_t tok(uint64_t seed, int64_t i)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull;
	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 29;
	return (int32_t)(x % (uint64_t)V);
}

/* Rows [0, n) of got equal rows of want, bit for bit: the count that do not. */
static int64_t rows_differ(const float *want, const float *got, int64_t n)
{
	int64_t d = 0;
	for (int64_t i = 0; i < n; i++)
		d += memcmp(want + i * V, got + i * V, (size_t)V * sizeof(float)) != 0;
	return d;
}

static void test_chunked_prefill(void)
{
	int32_t ids[PROMPT];
	for (int64_t i = 0; i < PROMPT; i++)
		ids[i] = tok(1, i);
	float *ref = malloc((size_t)(PROMPT * V) * sizeof(float));
	float *got = malloc((size_t)(PROMPT * V) * sizeof(float));
	struct atlas_seq *s = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, PROMPT, ref, true), 0);
	atlas_seq_free(s);
	static const int64_t chunks[] = {512, 100, 64, 1};
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		s = atlas_seq_new(m);
		for (int64_t p = 0; p < PROMPT; p += chunks[c]) {
			int64_t n = PROMPT - p < chunks[c] ? PROMPT - p : chunks[c];
			CHECK_EQ_INT(atlas_model_forward(m, s, ids + p, n, got + p * V, true), 0);
		}
		atlas_seq_free(s);
		int64_t d = rows_differ(ref, got, PROMPT);
		printf("# prefill in chunks of %lld: %lld of %d positions differ from one step\n",
		       (long long)chunks[c], (long long)d, PROMPT);
		CHECK(d == 0);
	}
	free(ref);
	free(got);
}

#define STEPS 6
#define APROMPT 50

/* Sequence A (a 50-token prompt, then STEPS fed tokens) in steps with
 * nb - 1 others; its logits at each step into out[STEPS][V]. The others
 * have prompts of 1..300 tokens; at step 2 each takes a 15-token chunk
 * instead of one token (a prefill mixed into a decode step). */
static void run_a(int nb, float *out)
{
	struct atlas_seq *seqs[64];
	struct atlas_batch_item it[64];
	int32_t a_ids[APROMPT], nexts[64], chunk[64][15];
	static int32_t prompts[64][300];
	for (int i = 0; i < APROMPT; i++)
		a_ids[i] = tok(2, i);
	for (int b = 0; b < nb; b++) {
		seqs[b] = atlas_seq_new(m);
		int64_t n = b == 0 ? APROMPT : 1 + (b * 97) % 300;
		for (int64_t i = 0; i < n && b; i++)
			prompts[b][i] = tok(100 + (uint64_t)b, i);
		it[b] = (struct atlas_batch_item){.seq = seqs[b], .ids = b ? prompts[b] : a_ids, .n = n};
	}
	/* the prompts: in one step with A, or (too many tokens for one
	 * step) each alone */
	int64_t total = 0;
	for (int b = 0; b < nb; b++)
		total += it[b].n;
	if (total <= atlas_model_max_tokens(m)) {
		CHECK_EQ_INT(atlas_model_forward_batch(m, it, nb), 0);
	} else {
		for (int b = 0; b < nb; b++)
			CHECK_EQ_INT(atlas_model_forward_batch(m, &it[b], 1), 0);
	}
	for (int st = 0; st < STEPS; st++) {
		for (int b = 0; b < nb; b++) {
			nexts[b] = tok(200 + (uint64_t)b, st);
			it[b] = (struct atlas_batch_item){.seq = seqs[b], .ids = &nexts[b], .n = 1};
			if (st == 2 && b) {
				for (int i = 0; i < 15; i++)
					chunk[b][i] = tok(300 + (uint64_t)b, i);
				it[b].ids = chunk[b];
				it[b].n = 15;
			}
		}
		it[0].logits = out + st * V;
		CHECK_EQ_INT(atlas_model_forward_batch(m, it, nb), 0);
	}
	for (int b = 0; b < nb; b++)
		atlas_seq_free(seqs[b]);
}

static void test_batch_sizes(void)
{
	float *alone = malloc((size_t)(STEPS * V) * sizeof(float));
	float *got = malloc((size_t)(STEPS * V) * sizeof(float));
	run_a(1, alone);
	static const int sizes[] = {7, 32, 64};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		memset(got, 0, (size_t)(STEPS * V) * sizeof(float));
		run_a(sizes[i], got);
		int64_t d = rows_differ(alone, got, STEPS);
		printf("# decode in batches of %d: %lld of %d steps differ from alone\n", sizes[i],
		       (long long)d, STEPS);
		CHECK(d == 0);
	}
	free(alone);
	free(got);
}

int main(void)
{
	const char *dev = getenv("ATLAS_TEST_DEVICE");
	be = atlas_backend_open(dev ? dev : "cpu");
	if (!be) {
		printf("not ok 1 - open device '%s': %s\n", dev ? dev : "cpu", atlas_errmsg());
		return 1;
	}
	const char *off = getenv("ATLAS_TEST_NO_INVARIANT");
	be->batch_invariant = !(off && *off == '1');
	printf("# device %s, batch-invariant %s\n", be->name, be->batch_invariant ? "on" : "off");
	char dir[1100];
	snprintf(dir, sizeof(dir), "%s/models/default", harness_srcdir());
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_seqs = 64;
	p.max_tokens = 1024;
	p.max_context = 1024;
	p.kv_blocks = 64 * 24 + 64; /* 64 sequences of up to 384 tokens, and the 700 */
	m = atlas_model_load(dir, be, &p);
	if (!m) {
		printf("not ok 1 - load %s: %s\n", dir, atlas_errmsg());
		be->destroy(be);
		return 1;
	}
	V = atlas_model_config(m)->vocab_size;
	RUN(test_chunked_prefill);
	RUN(test_batch_sizes);
	atlas_model_free(m);
	be->destroy(be);
	return harness_done();
}
