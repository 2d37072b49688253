/* sampler.c - logits processors and the seeded draw (see sampler.h).
 *
 * Filters work on a candidate list sorted by logit once top-k, top-p or
 * min-p need it; greedy is a single argmax pass and touches nothing. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../core/error.h"

struct atlas_sampler {
	struct atlas_sampler_params p; /* as given */
	int64_t n_vocab;               /* logits length */
	uint64_t rng[4];               /* xoshiro256** state */
	void *cands;                   /* scratch for atlas_sample_pick [n_vocab * 8 bytes] */
	int32_t *counts;               /* scratch [n_vocab]: generated counts */
	uint8_t *seen;                 /* scratch [n_vocab]: in context */
};

void atlas_sampler_default_params(struct atlas_sampler_params *p)
{
	p->temperature = 1.0;
	p->top_k = 0;
	p->top_p = 1.0;
	p->min_p = 0.0;
	p->repetition_penalty = 1.0;
	p->presence_penalty = 0.0;
	p->frequency_penalty = 0.0;
	p->seed = 0;
}

int atlas_sampler_check(const struct atlas_sampler_params *p)
{
	if (!(p->temperature >= 0) || !isfinite(p->temperature))
		return atlas_error(ATLAS_EINVAL, "temperature must be >= 0");
	if (p->top_k < 0)
		return atlas_error(ATLAS_EINVAL, "top_k must be >= 0");
	if (!(p->top_p > 0 && p->top_p <= 1))
		return atlas_error(ATLAS_EINVAL, "top_p must be in (0, 1]");
	if (!(p->min_p >= 0 && p->min_p <= 1))
		return atlas_error(ATLAS_EINVAL, "min_p must be in [0, 1]");
	if (!(p->repetition_penalty > 0) || !isfinite(p->repetition_penalty))
		return atlas_error(ATLAS_EINVAL, "repetition_penalty must be > 0");
	if (!(fabs(p->presence_penalty) <= 2))
		return atlas_error(ATLAS_EINVAL, "presence_penalty must be in [-2, 2]");
	if (!(fabs(p->frequency_penalty) <= 2))
		return atlas_error(ATLAS_EINVAL, "frequency_penalty must be in [-2, 2]");
	return 0;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

/* Uniform double in [0, 1). */
static double next_unit(uint64_t *s)
{
	return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

struct atlas_sampler *atlas_sampler_new(const struct atlas_sampler_params *p,
					int64_t n_vocab)
{
	if (atlas_sampler_check(p))
		return NULL;
	struct atlas_sampler *s = calloc(1, sizeof(*s));
	if (!s)
		goto nomem;
	s->p = *p;
	s->n_vocab = n_vocab;
	uint64_t x = p->seed;
	for (int i = 0; i < 4; i++)
		s->rng[i] = splitmix(&x);
	s->cands = malloc((size_t)n_vocab * 8);
	s->counts = calloc((size_t)n_vocab, sizeof(*s->counts));
	s->seen = calloc((size_t)n_vocab, 1);
	if (!s->cands || !s->counts || !s->seen)
		goto nomem;
	return s;
nomem:
	atlas_sampler_free(s);
	atlas_error(ATLAS_ENOMEM, "out of memory");
	return NULL;
}

void atlas_sampler_free(struct atlas_sampler *s)
{
	if (!s)
		return;
	free(s->cands);
	free(s->counts);
	free(s->seen);
	free(s);
}

static void penalties(struct atlas_sampler *s, float *logits,
		      const int32_t *ctx, int64_t n_ctx, int64_t n_gen)
{
	const struct atlas_sampler_params *p = &s->p;
	if (p->repetition_penalty != 1.0) {
		float rp = (float)p->repetition_penalty;
		for (int64_t i = 0; i < n_ctx; i++) {
			int32_t id = ctx[i];
			if (id < 0 || id >= s->n_vocab || s->seen[id])
				continue;
			s->seen[id] = 1;
			logits[id] = logits[id] > 0 ? logits[id] / rp : logits[id] * rp;
		}
		for (int64_t i = 0; i < n_ctx; i++)
			if (ctx[i] >= 0 && ctx[i] < s->n_vocab)
				s->seen[ctx[i]] = 0;
	}
	if (p->presence_penalty != 0.0 || p->frequency_penalty != 0.0) {
		const int32_t *gen = ctx + n_ctx - n_gen;
		for (int64_t i = 0; i < n_gen; i++)
			if (gen[i] >= 0 && gen[i] < s->n_vocab)
				s->counts[gen[i]]++;
		for (int64_t i = 0; i < n_gen; i++) {
			int32_t id = gen[i];
			if (id < 0 || id >= s->n_vocab || !s->counts[id])
				continue;
			logits[id] -= (float)(p->presence_penalty +
					      p->frequency_penalty * s->counts[id]);
			s->counts[id] = 0;
		}
	}
}

void atlas_sampler_penalize(struct atlas_sampler *s, float *logits, const int32_t *context,
			    int64_t n_context, int64_t n_generated)
{
	if (n_generated > n_context)
		n_generated = n_context;
	penalties(s, logits, context, n_context, n_generated);
}

bool atlas_sampler_uses_history(const struct atlas_sampler_params *p)
{
	return p->repetition_penalty != 1.0 || p->presence_penalty != 0.0 ||
	       p->frequency_penalty != 0.0;
}

int atlas_sampler_args(struct atlas_sampler *s, struct atlas_sample_args *a)
{
	const struct atlas_sampler_params *p = &s->p;
	a->temperature = (float)p->temperature;
	a->top_k = p->top_k > INT32_MAX ? INT32_MAX : (int32_t)p->top_k;
	a->top_p = (float)p->top_p;
	a->min_p = (float)p->min_p;
	a->mask = NULL;
	a->u = (float)next_unit(s->rng);
	if (a->u >= 1.0f) /* float rounding of a double just under 1 */
		a->u = 0.99999994f;
	return !atlas_sampler_uses_history(p);
}

int32_t atlas_sampler_sample(struct atlas_sampler *s, float *logits,
			     const int32_t *context, int64_t n_context,
			     int64_t n_generated)
{
	struct atlas_sample_args a;
	if (n_generated > n_context)
		n_generated = n_context;
	penalties(s, logits, context, n_context, n_generated);
	atlas_sampler_args(s, &a);
	return atlas_sample_pick(logits, s->n_vocab, &a, s->cands);
}
