/* test-tensors.c - the expected-tensor list (lib/model/tensors.c) agrees
 * with what the decoder binds: for every golden model each enumerated
 * tensor exists with that shape, every tensor of the file is enumerated,
 * the model loads, and validate finds nothing; then broken copies give
 * precise findings. */
#include <stdio.h>
#include <stdlib.h>

#include "../../lib/backend/backend.h"
#include "../../lib/io/config.h"
#include "../../lib/io/safetensors.h"
#include "../../lib/model/family.h"
#include "../../lib/model/model.h"
#include "../../lib/model/tensors.h"
#include "harness.h"

static const char *const goldens[] = {"llama3", "llama3-hf4", "llama-tied", "mistral",
	"qwen2", "qwen3", "qwen3-bf16", "qwen3-hf4"};

struct walk {
	struct atlas_st *st;    /* the golden checkpoint */
	const char *model;      /* golden name, for messages */
	int64_t found;          /* enumerated tensors present in the file */
	int64_t bad;            /* missing required or wrong shape */
};

static int visit(void *arg, const struct atlas_expected_tensor *e)
{
	struct walk *w = arg;
	const struct atlas_tensor_info *t = atlas_st_find(w->st, e->name);
	if (!t) {
		if (e->required) {
			w->bad++;
			harness_fail(__FILE__, __LINE__, "%s: '%s' enumerated but absent", w->model,
				     e->name);
		}
		return 0;
	}
	w->found++;
	if (t->ndim != e->ndim || t->shape[0] != e->shape[0] ||
	    (e->ndim == 2 && t->shape[1] != e->shape[1])) {
		w->bad++;
		harness_fail(__FILE__, __LINE__, "%s: '%s' shape differs", w->model, e->name);
	}
	return 0;
}

static void count_finding(void *arg, enum atlas_finding level, const char *msg)
{
	int *n = arg;
	n[level == ATLAS_FINDING_PROBLEM]++;
	fprintf(stderr, "# finding: %s\n", msg);
}

static void test_goldens_agree(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	char dir[512];
	for (size_t i = 0; i < sizeof(goldens) / sizeof(goldens[0]); i++) {
		struct atlas_config c;
		snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/%s", harness_srcdir(), goldens[i]);
		CHECK_EQ_INT(atlas_config_load(dir, &c), 0);
		const struct atlas_family *fam = atlas_family_find(&c);
		struct walk w = {.st = atlas_st_open(dir), .model = goldens[i]};
		CHECK(fam && w.st);
		if (!fam || !w.st)
			continue;
		CHECK_EQ_INT(atlas_model_expected_tensors(&c, fam, visit, &w), 0);
		CHECK_EQ_INT(w.bad, 0);
		/* nothing in the file is left out of the list */
		CHECK_EQ_INT(w.found, atlas_st_count(w.st));
		atlas_st_close(w.st);
		struct atlas_model *m = atlas_model_load(dir, be, NULL);
		CHECK(m != NULL);
		atlas_model_free(m);
		int n[2] = {0, 0};
		CHECK_EQ_INT(atlas_model_validate(dir, count_finding, n), 0);
		CHECK_EQ_INT(n[0], 0);
		CHECK_EQ_INT(n[1], 0);
	}
	be->destroy(be);
}

/* A walk that stops early returns the callback's value. */
static int stop_at_third(void *arg, const struct atlas_expected_tensor *e)
{
	int *n = arg;
	return ++*n == 3 ? 42 : 0;
}

static void test_walk_stops(void)
{
	struct atlas_config c;
	char dir[512];
	int n = 0;
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/qwen3", harness_srcdir());
	CHECK_EQ_INT(atlas_config_load(dir, &c), 0);
	CHECK_EQ_INT(atlas_model_expected_tensors(&c, atlas_family_find(&c), stop_at_third, &n), 42);
	CHECK_EQ_INT(n, 3);
}

static void test_qwen2_biases_required(void)
{
	struct atlas_config c;
	char dir[512];
	struct walk w = {.model = "qwen2"};
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/qwen2", harness_srcdir());
	CHECK_EQ_INT(atlas_config_load(dir, &c), 0);
	w.st = atlas_st_open(dir);
	CHECK(w.st != NULL);
	CHECK(atlas_st_find(w.st, "model.layers.0.self_attn.q_proj.bias") != NULL);
	CHECK_EQ_INT(atlas_model_expected_tensors(&c, &atlas_family_qwen2, visit, &w), 0);
	CHECK_EQ_INT(w.bad, 0);
	atlas_st_close(w.st);
}

static void test_validate_missing_dir(void)
{
	int n[2] = {0, 0};
	CHECK_EQ_INT(atlas_model_validate("/nonexistent/model", count_finding, n), 1);
	CHECK_EQ_INT(n[1], 1);
}

int main(void)
{
	RUN(test_goldens_agree);
	RUN(test_walk_stops);
	RUN(test_qwen2_biases_required);
	RUN(test_validate_missing_dir);
	return harness_done();
}
