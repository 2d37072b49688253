/* test-sampler.c - greedy, temperature, top-k/p, min-p, penalties and
 * the seeded RNG, checked against hand-computed expectations. */
#include <math.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/engine/sampler.h"
#include "harness.h"

static struct atlas_sampler_params defaults(void)
{
	struct atlas_sampler_params p;
	atlas_sampler_default_params(&p);
	return p;
}

static int32_t draw(struct atlas_sampler *s, const float *src, int n)
{
	float l[16];
	memcpy(l, src, (size_t)n * sizeof(float));
	return atlas_sampler_sample(s, l, NULL, 0, 0);
}

static void test_greedy(void)
{
	struct atlas_sampler_params p = defaults();
	p.temperature = 0;
	struct atlas_sampler *s = atlas_sampler_new(&p, 5);
	float l[5] = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f};
	CHECK_EQ_INT(draw(s, l, 5), 1); /* tie: lowest id */
	atlas_sampler_free(s);
}

/* Frequencies of each id over many draws. */
static void freqs(struct atlas_sampler_params p, const float *l, int n, double *f, int draws)
{
	struct atlas_sampler *s = atlas_sampler_new(&p, n);
	memset(f, 0, (size_t)n * sizeof(double));
	for (int i = 0; i < draws; i++)
		f[draw(s, l, n)] += 1.0 / draws;
	atlas_sampler_free(s);
}

static void test_distribution(void)
{
	float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
	double f[3];
	freqs(defaults(), l, 3, f, 40000);
	CHECK_NEAR(f[0], 0.5, 0.015);
	CHECK_NEAR(f[1], 0.3, 0.015);
	CHECK_NEAR(f[2], 0.2, 0.015);
	/* temperature 0.5 squares the odds: 25:9:4 */
	struct atlas_sampler_params p = defaults();
	p.temperature = 0.5;
	freqs(p, l, 3, f, 40000);
	CHECK_NEAR(f[0], 25.0 / 38, 0.015);
	CHECK_NEAR(f[2], 4.0 / 38, 0.015);
}

static void test_filters(void)
{
	float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
	double f[4];
	struct atlas_sampler_params p = defaults();
	p.top_k = 2; /* renormalized 0.5:0.3 */
	freqs(p, l, 4, f, 20000);
	CHECK(f[2] == 0 && f[3] == 0);
	CHECK_NEAR(f[0], 0.625, 0.02);
	p = defaults();
	p.top_p = 0.6; /* 0.5 < 0.6 <= 0.8: keeps two */
	freqs(p, l, 4, f, 20000);
	CHECK(f[2] == 0 && f[3] == 0 && f[1] > 0.3);
	p = defaults();
	p.top_p = 0.85; /* keeps three */
	freqs(p, l, 4, f, 20000);
	CHECK(f[2] > 0.1 && f[3] == 0);
	p = defaults();
	p.min_p = 0.5; /* floor 0.25: keeps 0.5 and 0.3 */
	freqs(p, l, 4, f, 20000);
	CHECK(f[1] > 0.3 && f[2] == 0 && f[3] == 0);
	p = defaults();
	p.top_k = 1;
	p.temperature = 5;
	freqs(p, l, 4, f, 1000);
	CHECK_NEAR(f[0], 1.0, 1e-9);
}

/* Ties at the k-th place keep the lower ids, as the CUDA sampler does. */
static void test_topk_ties(void)
{
	float l[6] = {1, 2, 2, 2, 0, 2};
	for (int i = 0; i < 200; i++) {
		struct atlas_sample_args a = {1.0f, 2, 1.0f, 0.0f, (float)i / 200, NULL};
		float x[6];
		char scratch[6 * 8];
		memcpy(x, l, sizeof(x));
		int32_t id = atlas_sample_pick(x, 6, &a, scratch);
		CHECK(id == 1 || id == 2);
	}
}

static void test_seeds(void)
{
	float l[8] = {0, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
	struct atlas_sampler_params p = defaults();
	int32_t a[64], b[64], c[64];
	p.seed = 42;
	struct atlas_sampler *s1 = atlas_sampler_new(&p, 8), *s2 = atlas_sampler_new(&p, 8);
	p.seed = 43;
	struct atlas_sampler *s3 = atlas_sampler_new(&p, 8);
	int differ = 0;
	for (int i = 0; i < 64; i++) {
		a[i] = draw(s1, l, 8);
		b[i] = draw(s2, l, 8);
		c[i] = draw(s3, l, 8);
		CHECK_EQ_INT(a[i], b[i]);
		differ += a[i] != c[i];
	}
	CHECK(differ > 10);
	atlas_sampler_free(s1);
	atlas_sampler_free(s2);
	atlas_sampler_free(s3);
}

static void test_penalties(void)
{
	struct atlas_sampler_params p = defaults();
	p.temperature = 0;
	p.repetition_penalty = 1.5;
	struct atlas_sampler *s = atlas_sampler_new(&p, 3);
	float l[3] = {2.0f, 1.9f, -1.0f};
	int32_t ctx[3] = {0, 0, 2};
	CHECK_EQ_INT(atlas_sampler_sample(s, l, ctx, 3, 0), 1);
	CHECK_NEAR(l[0], 2.0 / 1.5, 1e-6); /* once, though it appears twice */
	CHECK_NEAR(l[2], -1.5, 1e-6);      /* negative logits are multiplied */
	atlas_sampler_free(s);

	/* presence/frequency act on generated tokens only (the last n_gen) */
	p = defaults();
	p.temperature = 0;
	p.presence_penalty = 0.5;
	p.frequency_penalty = 0.25;
	s = atlas_sampler_new(&p, 3);
	float m[3] = {2.0f, 1.5f, 0.0f};
	int32_t ctx2[4] = {1, 0, 0, 2}; /* prompt {1}, generated {0, 0, 2} */
	atlas_sampler_sample(s, m, ctx2, 4, 3);
	CHECK_NEAR(m[0], 2.0 - 0.5 - 2 * 0.25, 1e-6);
	CHECK_NEAR(m[1], 1.5, 1e-6);
	CHECK_NEAR(m[2], -0.75, 1e-6);
	/* state is not left behind: the same call again penalizes the same */
	float m2[3] = {2.0f, 1.5f, 0.0f};
	atlas_sampler_sample(s, m2, ctx2, 4, 3);
	CHECK_NEAR(m2[0], 1.0, 1e-6);
	atlas_sampler_free(s);
}

static void test_bad_params(void)
{
	struct atlas_sampler_params p = defaults();
	p.temperature = -1;
	CHECK(atlas_sampler_new(&p, 4) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "temperature");
	p = defaults();
	p.top_p = 0;
	CHECK_EQ_INT(atlas_sampler_check(&p), ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "top_p");
	p = defaults();
	p.min_p = 1.5;
	CHECK_EQ_INT(atlas_sampler_check(&p), ATLAS_EINVAL);
	p = defaults();
	p.repetition_penalty = 0;
	CHECK_EQ_INT(atlas_sampler_check(&p), ATLAS_EINVAL);
	p = defaults();
	p.top_k = -3;
	CHECK_EQ_INT(atlas_sampler_check(&p), ATLAS_EINVAL);
}

/* A grammar mask: only allowed ids are ever drawn, greedy or not, with
 * every filter; the CPU backend's sample op honours it too. */
static void test_mask(void)
{
	enum { V = 70 };
	float l[V], row[V];
	for (int i = 0; i < V; i++)
		l[i] = (float)((i * 37) % 11) - 5.0f;
	l[3] = 50.0f; /* the best token overall, masked out */
	uint32_t mask[3] = {0, 0, 0};
	int allowed[] = {1, 33, 40, 69};
	for (int k = 0; k < 4; k++)
		mask[allowed[k] / 32] |= 1u << (allowed[k] % 32);
	char scratch[V * 8];
	struct atlas_sample_args a = {.temperature = 0, .top_p = 1, .mask = mask};
	memcpy(row, l, sizeof(row));
	int32_t g = atlas_sample_pick(row, V, &a, scratch);
	int best = 1;
	for (int k = 1; k < 4; k++)
		if (l[allowed[k]] > l[best])
			best = allowed[k];
	CHECK_EQ_INT(g, best);
	float temps[] = {0.5f, 1.0f, 4.0f};
	for (int t = 0; t < 3; t++)
		for (int d = 0; d < 400; d++) {
			a = (struct atlas_sample_args){.temperature = temps[t], .top_k = d % 3 ? 0 : 5,
						       .top_p = d % 2 ? 0.9f : 1.0f,
						       .min_p = d % 5 ? 0.0f : 0.05f,
						       .u = (float)d / 400.0f, .mask = mask};
			memcpy(row, l, sizeof(row));
			int32_t id = atlas_sample_pick(row, V, &a, scratch);
			CHECK(id >= 0 && id < V && (mask[id / 32] >> (id % 32) & 1));
		}
	struct atlas_backend *be = atlas_backend_cpu_new();
	CHECK(be != NULL);
	struct atlas_sample_args two[2] = {
	    {.temperature = 0, .top_p = 1, .mask = mask},
	    {.temperature = 0, .top_p = 1},
	};
	float both[2 * V];
	memcpy(both, l, sizeof(row));
	memcpy(both + V, l, sizeof(row));
	int32_t ids[2];
	CHECK_EQ_INT(be->sample(be, ids, both, 2, V, two), 0);
	CHECK_EQ_INT(ids[0], best);
	CHECK_EQ_INT(ids[1], 3); /* the unmasked row is not affected */
	be->destroy(be);
}

int main(void)
{
	RUN(test_greedy);
	RUN(test_distribution);
	RUN(test_filters);
	RUN(test_topk_ties);
	RUN(test_seeds);
	RUN(test_penalties);
	RUN(test_bad_params);
	RUN(test_mask);
	return harness_done();
}
