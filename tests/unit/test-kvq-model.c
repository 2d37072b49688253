/* test-kvq-model.c - what each KV cache format (--kv-dtype) costs a real
 * model: the shipped default model reads a fixed text teacher-forced
 * (one forward over all its tokens: every position's attention reads
 * the cache as stored) with the cache in auto (the activation type),
 * bf16, fp8 and q4. Against auto, per format: the share of positions
 * whose top token is the same, the mean KL divergence of the next-token
 * distributions, and the text's perplexity. Each format must stay
 * within its bound (a broken store, scale or rotation moves all three
 * by orders of magnitude). ATLAS_TEST_DEVICE=cuda runs it on the GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/backend/kvq.h"
#include "../../lib/core/error.h"
#include "../../lib/model/model.h"
#include "../../lib/tok/tok.h"
#include "harness.h"

/* Sayings in the style the model was trained on (written for this test). */
static const char text[] =
    "A quiet mind hears the kettle before it sings.\n"
    "\t\t-- Old kitchen proverb\n"
    "You will find the key in the last place you look, because then you "
    "stop looking.\n"
    "Do not count the days; make the days count twice.\n"
    "The man who moves a mountain begins by carrying away small stones, and "
    "he complains about every one of them.\n"
    "\t\t-- Anonymous\n"
    "A good friend is a mirror that tells the truth kindly.\n"
    "Fortune favors the bold, but it sends the bill to the careful.\n"
    "If at first you do not succeed, read the instructions.\n"
    "Your hard work will soon pay off. Until then, it will ask for more.\n"
    "The best time to plant a tree was twenty years ago; the second best time "
    "is after lunch.\n"
    "\t\t-- A tired gardener\n"
    "Every cloud has a silver lining, and every lining has a cloud.\n"
    "He who laughs last has not understood the joke.\n"
    "Life is what happens while you are busy making other plans.\n"
    "You are never too old to learn something foolish.\n";

struct run {
	float *logits; /* [n, V] */
	double nll;    /* mean negative log-likelihood of the text's next tokens */
};

static struct atlas_backend *be;
static struct atlas_tok *tok;
static int32_t *ids;
static size_t n;
static int64_t V;
static struct run ref;
static char mdir[600];

static int forward(enum atlas_kv_dtype kv, struct run *r)
{
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.kv_dtype = kv;
	p.max_tokens = 64; /* several chunks: later ones read earlier ones' cache */
	struct atlas_model *m = atlas_model_load(mdir, be, &p);
	if (!m) {
		printf("# load (%s): %s\n", atlas_kv_dtype_name(kv), atlas_errmsg());
		return -1;
	}
	V = atlas_tok_vocab_size(tok);
	struct atlas_seq *s = atlas_seq_new(m);
	r->logits = malloc(n * (size_t)V * sizeof(float));
	int rc = s && r->logits ? atlas_model_forward(m, s, ids, (int64_t)n, r->logits, true) : -1;
	if (rc)
		printf("# forward (%s): %s\n", atlas_kv_dtype_name(kv), atlas_errmsg());
	r->nll = 0;
	for (size_t t = 0; !rc && t + 1 < n; t++) {
		const float *l = r->logits + t * (size_t)V;
		double mx = -INFINITY, z = 0;
		for (int64_t i = 0; i < V; i++)
			mx = l[i] > mx ? l[i] : mx;
		for (int64_t i = 0; i < V; i++)
			z += exp(l[i] - mx);
		r->nll += -(l[ids[t + 1]] - mx - log(z));
	}
	r->nll /= (double)(n - 1);
	atlas_seq_free(s);
	atlas_model_free(m);
	return rc;
}

/* top-1 agreement, mean KL(ref || r), perplexities; the bounds. */
static void check_format(enum atlas_kv_dtype kv, double min_top1, double max_kl, double max_ppl)
{
	struct run r = {0};
	CHECK_EQ_INT(forward(kv, &r), 0);
	if (!r.logits || !ref.logits) {
		free(r.logits);
		return;
	}
	size_t same = 0;
	double kl = 0;
	double *pa = malloc((size_t)V * sizeof(double)), *pb = malloc((size_t)V * sizeof(double));
	for (size_t t = 0; t < n; t++) {
		const float *a = ref.logits + t * (size_t)V, *b = r.logits + t * (size_t)V;
		int64_t ia = 0, ib = 0;
		double ma = -INFINITY, mb = -INFINITY, za = 0, zb = 0;
		for (int64_t i = 0; i < V; i++) {
			if (a[i] > ma)
				ma = a[i], ia = i;
			if (b[i] > mb)
				mb = b[i], ib = i;
		}
		same += ia == ib;
		for (int64_t i = 0; i < V; i++) {
			za += pa[i] = exp(a[i] - ma);
			zb += pb[i] = exp(b[i] - mb);
		}
		for (int64_t i = 0; i < V; i++) {
			const double p = pa[i] / za, q = pb[i] / zb;
			if (p > 0)
				kl += p * (log(p) - log(q > 1e-300 ? q : 1e-300));
		}
	}
	kl /= (double)n;
	const double top1 = (double)same / (double)n, pr = exp(ref.nll), pf = exp(r.nll);
	printf("# kv %-4s on %s: top-1 equal %5.1f%% (min %.0f%%), mean KL %.2e (max %.0e), "
	       "perplexity %.3f vs %.3f (%+.2f%%, max +%.0f%%)\n",
	       atlas_kv_dtype_name(kv), be->name, 100 * top1, 100 * min_top1, kl, max_kl, pf, pr,
	       100 * (pf / pr - 1), 100 * (max_ppl - 1));
	CHECK(top1 >= min_top1);
	CHECK(kl <= max_kl);
	CHECK(pf <= pr * max_ppl);
	free(pa);
	free(pb);
	free(r.logits);
}

static void test_formats(void)
{
	snprintf(mdir, sizeof(mdir), "%s/models/default", harness_srcdir());
	tok = atlas_tok_load(mdir);
	CHECK(tok != NULL);
	if (!tok)
		return;
	CHECK_EQ_INT(atlas_tok_encode(tok, text, sizeof(text) - 1, false, &ids, &n), 0);
	printf("# %zu tokens of text\n", n);
	CHECK(n > 200);
	CHECK_EQ_INT(forward(ATLAS_KV_AUTO, &ref), 0);
	printf("# auto: perplexity %.3f\n", exp(ref.nll));
	check_format(ATLAS_KV_BF16, 0.97, 1e-3, 1.01);
	check_format(ATLAS_KV_FP8, 0.93, 5e-3, 1.03);
	check_format(ATLAS_KV_Q4, 0.85, 3e-2, 1.10);
	free(ref.logits);
	free(ids);
	atlas_tok_free(tok);
}

int main(void)
{
	const char *dev = getenv("ATLAS_TEST_DEVICE");
	be = atlas_backend_open(dev ? dev : "cpu");
	if (!be) {
		printf("not ok 1 - open device '%s': %s\n", dev, atlas_errmsg());
		return 1;
	}
	RUN(test_formats);
	be->destroy(be);
	return harness_done();
}
