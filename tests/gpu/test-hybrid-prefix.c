/* test-hybrid-prefix.c - the prefix cache of a hybrid model on the GPU
 * (issue 23): on the Qwen3.5-35B-A3B-like synthetic shape, in
 * batch-invariant mode, four prompts share a 2,000-token prefix and have
 * 24 tokens each of their own. The first runs cold and publishes its
 * blocks with a state snapshot at its last whole block (2,016 tokens, past
 * the shared part); the second matches 125 blocks without a snapshot,
 * runs cold too and snapshots at that branch point (2,000); the last two
 * attach the prefix and prefill only the rest. Checks:
 *  - prompts 2 and 3 attach 2,000 tokens (125 blocks of 16), and every
 *    prompt's first token equals the one a cold run of it gives;
 *  - time to first token: warm at most 20% of cold (the goal),
 *    printed with both times.
 * It needs a GPU with room for the shape (about 70 GB); it skips without
 * a CUDA device. ATLAS_HYBRID_SHAPE picks another atlas-bench shape. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/bench/bench.h"
#include "../../lib/core/error.h"
#include "../../lib/model/model.h"
#include "../unit/harness.h"

#define PREFIX 2000
#define OWN 24
#define N 4

static struct atlas_backend *be;
static struct atlas_model *m;

static int32_t tok(uint64_t seed, int64_t i, int64_t V)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull;
	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 29;
	return (int32_t)(x % (uint64_t)V);
}

/* Prompt k: the shared prefix, then OWN tokens of its own. */
static void prompt(int k, int32_t *ids, int64_t V)
{
	for (int64_t i = 0; i < PREFIX; i++)
		ids[i] = tok(1, i, V);
	for (int64_t i = 0; i < OWN; i++)
		ids[PREFIX + i] = tok(100 + (uint64_t)k, i, V);
}

/* Run ids on a fresh sequence (attaching what the cache has when warm);
 * its first token, the time to it and the tokens attached. */
static int32_t first_token(const int32_t *ids, bool warm, double *ms, int64_t *hit)
{
	struct atlas_sample_args greedy = {0};
	struct atlas_seq *s = atlas_seq_new(m);
	int32_t t = -1;
	CHECK_EQ_INT(be->sync(be), 0);
	double t0 = atlas_bench_now_ms();
	*hit = warm ? atlas_seq_attach_prefix(s, ids, PREFIX + OWN) : 0;
	CHECK_EQ_INT(atlas_model_forward_sample(m, s, ids + *hit, PREFIX + OWN - *hit, &greedy, &t),
		     0);
	*ms = atlas_bench_now_ms() - t0;
	atlas_seq_publish_prefix(s, ids);
	atlas_seq_free(s);
	return t;
}

static void test_ttft(void)
{
	const int64_t V = atlas_model_config(m)->vocab_size;
	int32_t *ids = malloc((PREFIX + OWN) * sizeof(int32_t));
	double cold[N], warm[N];
	int32_t tc[N], tw[N];
	int64_t hit;
	/* cold runs with the cache off (nothing attached), then the cache on:
	 * prompt 0 publishes, 1..3 attach */
	for (int k = 0; k < N; k++) {
		prompt(k, ids, V);
		tc[k] = first_token(ids, false, &cold[k], &hit);
	}
	atlas_model_set_prefix_cache(m, true);
	prompt(0, ids, V);
	tw[0] = first_token(ids, true, &warm[0], &hit);
	CHECK_EQ_INT(hit, 0);
	double worst = 0;
	for (int k = 1; k < N; k++) {
		prompt(k, ids, V);
		tw[k] = first_token(ids, true, &warm[k], &hit);
		printf("# prompt %d: %lld of %d tokens cached; first token cold %.1f ms, warm %.1f ms "
		       "(%.1f%%); token %s\n", k, (long long)hit, PREFIX + OWN, cold[k], warm[k],
		       100.0 * warm[k] / cold[k], tw[k] == tc[k] ? "equal" : "DIFFERS");
		CHECK_EQ_INT(hit, k == 1 ? 0 : PREFIX);
		CHECK_EQ_INT(tw[k], tc[k]);
		if (k > 1)
			worst = warm[k] / cold[k] > worst ? warm[k] / cold[k] : worst;
	}
	int64_t bytes = 0;
	/* (before the printf: its arguments are read in no set order) */
	const int64_t snaps = atlas_model_prefix_snapshots(m, &bytes);
	printf("# warm / cold time to first token: worst %.1f%% (goal at most 20%%); %lld "
	       "snapshots, %lld MiB\n", 100.0 * worst, (long long)snaps, (long long)(bytes >> 20));
	CHECK(worst <= 0.2);
	CHECK_EQ_INT(tw[0], tc[0]);
	free(ids);
}

int main(void)
{
	be = atlas_backend_open("cuda");
	if (!be) {
		printf("1..0 # skip no CUDA device: %s\n", atlas_errmsg());
		return 0;
	}
	be->batch_invariant = true;
	const char *shape = getenv("ATLAS_HYBRID_SHAPE");
	struct atlas_config cfg;
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	mp.max_seqs = 1;
	mp.max_tokens = 2048;
	mp.max_context = 2048 + 64;
	mp.kv_blocks = 4 * (2048 + 64) / 16; /* room for the cached prefix and a prompt */
	if (atlas_bench_shape(shape ? shape : "qwen3.5-35b-a3b", &cfg) ||
	    !(m = atlas_model_synthetic(&cfg, be, &mp, 1))) {
		printf("not ok 1 - synthetic model: %s\n", atlas_errmsg());
		be->destroy(be);
		return 1;
	}
	printf("# %s, batch-invariant\n", shape ? shape : "qwen3.5-35b-a3b");
	RUN(test_ttft);
	atlas_model_free(m);
	be->destroy(be);
	return harness_done();
}
