/* test-golden.c - every golden model against the logits and greedy
 * tokens that transformers produced for the same weights
 * (tests/fixtures/golden, made by scripts/gen-golden.py).
 *
 * On the CPU backend (FP32 activations; the default): max |ours - ref| /
 * max |ref| under 1e-4 for every case, and all 32 greedy tokens
 * identical. With ATLAS_TEST_DEVICE=cuda (BF16 activations; run by
 * make gpu-test): relative L2 error ||ours - ref|| / ||ref|| under 2e-2
 * (3e-2 for mixture-of-experts models: TOL_L2_MOE; 0.25 for hybrid
 * linear-attention models, TOL_L2_HYBRID), and the first 16
 * greedy tokens identical.
 *
 * Mixture-of-experts fixtures (scripts/gen-moe-golden.py) run where the
 * backend has the moe op (the CPU and CUDA backends); a backend without
 * it must refuse them at load, and they are skipped there. The hybrid
 * linear-attention fixtures (scripts/gen-hybrid-golden.py) likewise need
 * the deltanet op (the CPU backend's today).
 *
 * A fixture whose expected.json has "model_dir" (a path relative to the
 * repository root, e.g. "models/default") holds only expected.json and the
 * logits files; the weights are loaded from that directory, so the
 * default model is a fixture without a second copy of it. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/engine/generate.h"
#include "../../lib/engine/scheduler.h"
#include "../../lib/model/model.h"
#include "harness.h"

#define TOL 1e-4      /* FP32 activations: max relative error */
#define TOL_L2 2e-2   /* BF16 activations: relative L2 error */
/* BF16 activations, mixture-of-experts models: a router decision that
 * float64 makes by a small margin can go the other way in BF16 for one
 * token of one layer (seen on the H200: qwen3-moe's 7-token case at
 * 0.022 while its other cases stay under 0.009) */
#define TOL_L2_MOE 3e-2
/* BF16 activations, hybrid linear-attention models: their random-weight
 * fixtures are ill-conditioned in BF16 (the DeltaNet's gated norm rescales
 * o = S^T q whatever its size, so rounding in q . k shows at full scale):
 * transformers itself in BF16 lands at relative L2 0.027-0.114 from the
 * float64 reference on qwen3-next-bf16 and 0.088-0.206 on qwen3-5-moe, per
 * case, against 0.008-0.011 on qwen3-bf16 (H200, scripts/hybrid-bf16-gap.py,
 * bench/h200-2026-12-07-hybrid); Atlas on CUDA: 0.044-0.112 and
 * 0.043-0.199. The greedy tokens must still match (GREEDY_BF16). */
#define TOL_L2_HYBRID 0.25
#define GREEDY_BF16 16 /* BF16: greedy tokens that must match */

static struct atlas_backend *be;
static int bf16;          /* the backend computes in BF16 */
static char dir[512];     /* fixture directory of the current test */
static char mdir[1100];   /* model directory: dir, or its "model_dir" */
static double worst;      /* worst relative error over all models */

/* Ids reported by atlas_generate's callback. */
struct collect {
	int32_t v[64]; /* ids in order */
	size_t n;      /* count */
};

static int collect_cb(void *ud, int32_t id, const char *text, size_t len)
{
	struct collect *c = ud;
	(void)text;
	(void)len;
	if (id >= 0 && c->n < 64)
		c->v[c->n++] = id;
	return 0;
}

static int models_found;

static void test_fixtures_present(void)
{
	/* an empty run proves nothing */
	CHECK(models_found >= 8);
}

static float *read_floats(const char *path, size_t n)
{
	FILE *f = fopen(path, "rb");
	float *v = malloc(n * sizeof(float));
	if (!f || fread(v, sizeof(float), n, f) != n) {
		if (f)
			fclose(f);
		free(v);
		return NULL;
	}
	fclose(f);
	return v;
}

static int32_t *ids_of(json_object *arr, size_t *n)
{
	*n = json_object_array_length(arr);
	int32_t *v = malloc((*n ? *n : 1) * sizeof(int32_t));
	for (size_t i = 0; i < *n; i++)
		v[i] = json_object_get_int(json_object_array_get_idx(arr, i));
	return v;
}

static double tol_l2(const struct atlas_model *m)
{
	const struct atlas_config *c = atlas_model_config(m);
	return c->n_linear > 0 ? TOL_L2_HYBRID : c->num_experts > 0 ? TOL_L2_MOE : TOL_L2;
}

static void check_logits(struct atlas_model *m, json_object *c)
{
	json_object *ids_j, *file_j, *shape_j;
	CHECK(json_object_object_get_ex(c, "ids", &ids_j));
	CHECK(json_object_object_get_ex(c, "logits", &file_j));
	CHECK(json_object_object_get_ex(c, "shape", &shape_j));
	size_t n;
	int32_t *ids = ids_of(ids_j, &n);
	int64_t V = json_object_get_int64(json_object_array_get_idx(shape_j, 1));
	CHECK_EQ_INT(V, atlas_model_config(m)->vocab_size);
	char path[700];
	snprintf(path, sizeof(path), "%s/%s", dir, json_object_get_string(file_j));
	float *ref = read_floats(path, n * (size_t)V);
	float *out = malloc(n * (size_t)V * sizeof(float));
	CHECK(ref != NULL);
	struct atlas_seq *s = atlas_seq_new(m);
	int rc = atlas_model_forward(m, s, ids, (int64_t)n, out, true);
	CHECK_EQ_INT(rc, 0);
	if (rc)
		printf("# %s\n", atlas_errmsg());
	if (ref && !rc) {
		double maxdiff = 0, maxref = 0, d2 = 0, r2 = 0;
		for (size_t i = 0; i < n * (size_t)V; i++) {
			double d = fabs((double)out[i] - ref[i]);
			if (!(d <= maxdiff))
				maxdiff = isnan(d) ? INFINITY : d;
			if (fabs(ref[i]) > maxref)
				maxref = fabs(ref[i]);
			d2 += isnan(d) ? INFINITY : d * d;
			r2 += (double)ref[i] * ref[i];
		}
		double rel = maxdiff / maxref, l2 = sqrt(d2 / r2);
		double score = bf16 ? l2 : rel;
		if (score > worst)
			worst = score;
		printf("# %s: %zu tokens, max relative logit error %.3g, relative L2 %.3g\n", dir,
		       n, rel, l2);
		CHECK(bf16 ? l2 < tol_l2(m) : rel < TOL);
	}
	/* the same logits, one token at a time through the KV cache */
	if (!rc && n > 1) {
		atlas_seq_reset(s);
		float *last = malloc((size_t)V * sizeof(float));
		double maxdiff = 0, maxref = 0;
		for (size_t t = 0; t < n; t++) {
			CHECK_EQ_INT(atlas_model_forward(m, s, ids + t, 1, last, false), 0);
			for (int64_t i = 0; ref && i < V; i++) {
				double d = fabs((double)last[i] - ref[t * (size_t)V + (size_t)i]);
				maxdiff = d > maxdiff || isnan(d) ? d : maxdiff;
				maxref = fmax(maxref, fabs(ref[t * (size_t)V + (size_t)i]));
			}
		}
		CHECK(maxdiff / maxref < (bf16 ? 10 * tol_l2(m) : TOL));
		free(last);
	}
	atlas_seq_free(s);
	free(ids);
	free(ref);
	free(out);
}

static void check_greedy(struct atlas_model *m, json_object *g)
{
	json_object *p_j, *t_j;
	CHECK(json_object_object_get_ex(g, "prompt", &p_j));
	CHECK(json_object_object_get_ex(g, "tokens", &t_j));
	size_t np, nt;
	int32_t *prompt = ids_of(p_j, &np), *want = ids_of(t_j, &nt);
	struct atlas_gen_params gp = {.max_tokens = (int64_t)nt, .ignore_eos = true};
	atlas_sampler_default_params(&gp.sampling);
	gp.sampling.temperature = 0;
	struct atlas_seq *s = atlas_seq_new(m);
	struct atlas_gen_stats st;
	struct collect col = {.n = 0};
	int32_t *got = col.v;
	struct atlas_sched *sc = atlas_sched_new(m, NULL, NULL);
	CHECK_EQ_INT(atlas_generate(sc, prompt, (int64_t)np, &gp, collect_cb, &col, &st), 0);
	atlas_sched_free(sc);
	size_t ngot = col.n;
	CHECK_EQ_INT(ngot, nt);
	size_t must = bf16 && nt > GREEDY_BF16 ? GREEDY_BF16 : nt, agree = 0;
	while (agree < ngot && agree < nt && got[agree] == want[agree])
		agree++;
	int same = ngot == nt && agree >= must;
	printf("# greedy: first %zu of %zu tokens identical (%zu required)\n", agree, nt, must);
	if (!same) {
		printf("# greedy tokens differ:\n#  want");
		for (size_t i = 0; i < nt; i++) printf(" %d", want[i]);
		printf("\n#  got ");
		for (size_t i = 0; i < ngot; i++) printf(" %d", got[i]);
		printf("\n");
	}
	CHECK(same);
	atlas_seq_free(s);
	free(prompt);
	free(want);
}

static void test_model(void)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/expected.json", dir);
	json_object *exp = json_object_from_file(path);
	CHECK(exp != NULL);
	if (!exp)
		return;
	json_object *md;
	if (json_object_object_get_ex(exp, "model_dir", &md))
		snprintf(mdir, sizeof(mdir), "%s/%s", harness_srcdir(), json_object_get_string(md));
	else
		snprintf(mdir, sizeof(mdir), "%s", dir);
	struct atlas_model *m = atlas_model_load(mdir, be, NULL);
	if (!m)
		printf("# %s\n", atlas_errmsg());
	if (!m && !be->moe && strstr(atlas_errmsg(), "has no MoE op")) {
		/* a mixture-of-experts fixture on a backend without the op:
		 * refused as documented, nothing to compare */
		printf("# skip: backend '%s' has no MoE op\n", be->name);
		json_object_put(exp);
		return;
	}
	if (!m && !be->deltanet && strstr(atlas_errmsg(), "does not run yet")) {
		/* a hybrid linear-attention fixture on a backend without
		 * its ops (README-hybrid.md): refused by name, skipped */
		printf("# skip: backend '%s' has no Gated DeltaNet op\n", be->name);
		json_object_put(exp);
		return;
	}
	CHECK(m != NULL);
	json_object *cases, *g;
	if (m && json_object_object_get_ex(exp, "cases", &cases))
		for (size_t i = 0; i < json_object_array_length(cases); i++)
			check_logits(m, json_object_array_get_idx(cases, i));
	if (m && json_object_object_get_ex(exp, "greedy", &g))
		check_greedy(m, g);
	atlas_model_free(m);
	json_object_put(exp);
}

int main(void)
{
	const char *dev = getenv("ATLAS_TEST_DEVICE");
	be = atlas_backend_open(dev ? dev : "cpu");
	if (!be) {
		printf("not ok 1 - open device '%s': %s\n", dev, atlas_errmsg());
		return 1;
	}
	bf16 = be->act_dtype == ATLAS_DTYPE_BF16;
	printf("# device %s (%s activations)\n", be->name, bf16 ? "BF16" : "FP32");
	models_found = harness_each_golden(dir, sizeof(dir), test_model);
	RUN(test_fixtures_present);
	printf("# worst %s over all models: %.3g (limit %g%s)\n",
	       bf16 ? "relative L2 logit error" : "relative logit error", worst, bf16 ? TOL_L2 : TOL,
	       bf16 ? ", 3e-2 for MoE models, 0.25 for hybrid models" : "");
	be->destroy(be);
	return harness_done();
}
