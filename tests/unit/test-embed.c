/* test-embed.c - embedding models: the tiny Qwen3 embedding model of
 * tests/fixtures/embed/qwen3-embed (scripts/gen-embed-golden.py: the
 * Hub's Qwen3-Embedding layout, BF16 weights, float64 references) run
 * on the CPU backend through the scheduler's pooling requests. Token ids
 * equal the reference's; last-token and mean pooling (the latter through
 * a copy of the fixture whose pooling config says mean) match the float64
 * vectors; a batch of inputs, a chunked prefill and the prefix cache give
 * the vectors each input gets alone; the "model."-prefixed layout with a
 * CausalLM architecture loads to the same vectors; the pooling configs
 * Atlas cannot compute are refused by name; and the model refuses to
 * generate. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/engine/scheduler.h"
#include "../../lib/io/config.h"
#include "../../lib/model/model.h"
#include "../../lib/model/tensors.h"
#include "../../lib/tok/tok.h"
#include "harness.h"

/* Error bounds against the float64 reference. The model computes with
 * the same BF16 weights in FP32 (the CPU backend's activations and
 * accumulators), so the difference is FP32 rounding, amplified by this
 * fixture's deliberately large random weights (std 0.15, so the layers
 * matter) through attention: measured on the 4 cases, max abs diff per
 * value 9e-8 for the one-token input (plain FP32 rounding), 3e-5 for 4-5
 * tokens and 2.4e-4 for the 16-token one, cosine at worst 1 - 2.8e-7
 * (mean pooling: 6.9e-5, 1 - 3.2e-8). The bounds leave 4x (abs) and 35x
 * (cosine) over that; a wrong row, op, pooling or normalization moves
 * values by 1e-2 and more. */
#define MAX_ABS 1e-3
#define MIN_COS (1 - 1e-5)

#define MAX_CASES 16
#define MAX_D 256
#define MAX_IDS 256

struct ecase {
	char input[256];      /* the text */
	int32_t ids[MAX_IDS]; /* its ids with special tokens */
	int n_ids;	      /* how many */
	double last[MAX_D];   /* reference, last-token pooling, normalized */
	double mean[MAX_D];   /* reference, mean pooling, normalized */
};

static struct ecase cases[MAX_CASES];
static int n_cases;
static int64_t D;			/* the vectors' size */
static char fx[512];			/* the fixture directory */
static double worst_abs, worst_cos = 1; /* over every comparison, for the log */

static int load_expected(void)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/tests/fixtures/embed/qwen3-embed", harness_srcdir());
	/* absolute: the fixture copies link to its files */
	if (!realpath(path, fx))
		snprintf(fx, sizeof(fx), "%s", path);
	snprintf(path, sizeof(path), "%s/expected.json", fx);
	json_object *o = json_object_from_file(path), *cs;
	if (!o || !json_object_object_get_ex(o, "cases", &cs)) {
		harness_fail(__FILE__, __LINE__, "cannot read '%s'", path);
		json_object_put(o);
		return -1;
	}
	n_cases = (int)json_object_array_length(cs);
	if (n_cases > MAX_CASES)
		n_cases = MAX_CASES;
	for (int i = 0; i < n_cases; i++) {
		json_object *c = json_object_array_get_idx(cs, i), *v;
		struct ecase *e = &cases[i];
		json_object_object_get_ex(c, "input", &v);
		snprintf(e->input, sizeof(e->input), "%s", json_object_get_string(v));
		json_object_object_get_ex(c, "ids", &v);
		e->n_ids = (int)json_object_array_length(v);
		for (int k = 0; k < e->n_ids && k < MAX_IDS; k++)
			e->ids[k] = json_object_get_int(json_object_array_get_idx(v, k));
		json_object_object_get_ex(c, "last", &v);
		D = (int64_t)json_object_array_length(v);
		for (int64_t k = 0; k < D && k < MAX_D; k++)
			e->last[k] = json_object_get_double(json_object_array_get_idx(v, k));
		json_object_object_get_ex(c, "mean", &v);
		for (int64_t k = 0; k < D && k < MAX_D; k++)
			e->mean[k] = json_object_get_double(json_object_array_get_idx(v, k));
	}
	json_object_put(o);
	return n_cases > 0 && D > 0 && D <= MAX_D ? 0 : -1;
}

struct run {
	int64_t seqs;	/* model and scheduler sequences per step */
	int64_t tokens; /* and tokens per step */
	bool prefix;	/* prefix cache on */
};

/* Embed cases[which[0..n)] in one scheduler over the model in `dir` (all
 * submitted at once) into out [n, D]. 0, or -1 after a failed check. */
static int embed(const char *dir, const struct run *rp, const int *which, int n, float *out)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	be->batch_invariant = true; /* as the server runs it */
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	mp.max_seqs = rp->seqs;
	mp.max_tokens = rp->tokens;
	struct atlas_model *m = atlas_model_load(dir, be, &mp);
	CHECK(m != NULL);
	if (!m) {
		fprintf(stderr, "# %s\n", atlas_errmsg());
		be->destroy(be);
		return -1;
	}
	const struct atlas_embed_config *ec = atlas_model_embed_config(m);
	struct atlas_sched_params sp = {
	    .max_seqs = rp->seqs, .max_batch_tokens = rp->tokens, .prefix_cache = rp->prefix};
	struct atlas_sched *s = atlas_sched_new(m, NULL, &sp);
	struct atlas_sreq *r[MAX_CASES * 2] = {0};
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		struct atlas_sreq_params p = {.prompt = cases[which[i]].ids,
					      .n_prompt = cases[which[i]].n_ids,
					      .top_logprobs = -1,
					      .pool = ec->pooling,
					      .normalize = ec->normalize};
		CHECK_EQ_INT(rc = atlas_sched_submit(s, &p, &r[i]), 0);
	}
	while (!rc && atlas_sched_step(s) == 1)
		;
	for (int i = 0; i < n && !rc; i++) {
		struct atlas_sreq_result res;
		atlas_sreq_result(r[i], &res);
		CHECK_EQ_INT(res.rc, 0);
		CHECK_EQ_INT(res.n_gen, 0);
		CHECK_EQ_INT(res.n_cached, 0); /* never attached to the prefix cache */
		CHECK_EQ_INT(atlas_sreq_embedding(r[i], out + i * D, D), D);
	}
	for (int i = 0; i < n; i++)
		atlas_sreq_release(r[i]);
	struct atlas_sched_stats st;
	atlas_sched_get_stats(s, &st);
	CHECK_EQ_INT(st.tokens_generated, 0);
	CHECK_EQ_INT(st.kv_blocks_free, st.kv_blocks_total);
	atlas_sched_free(s);
	atlas_model_free(m);
	be->destroy(be);
	return rc ? -1 : 0;
}

/* v against the float64 reference: cosine and largest difference. */
static void compare(const float *v, const double *ref, const char *what, int i)
{
	double dot = 0, nv = 0, nr = 0, mx = 0;
	for (int64_t d = 0; d < D; d++) {
		dot += v[d] * ref[d];
		nv += (double)v[d] * v[d];
		nr += ref[d] * ref[d];
		mx = fmax(mx, fabs(v[d] - ref[d]));
	}
	double cos = dot / sqrt(nv * nr);
	worst_abs = fmax(worst_abs, mx);
	worst_cos = fmin(worst_cos, cos);
	printf("# %s pooling, case %d (%d tokens): max abs diff %.3g, cosine 1 - %.3g\n", what, i,
	       cases[i].n_ids, mx, 1 - cos);
	if (mx > MAX_ABS || !(cos > MIN_COS))
		harness_fail(__FILE__, __LINE__,
			     "%s pooling of case %d ('%s'): max abs diff %g, "
			     "cosine %.12f",
			     what, i, cases[i].input, mx, cos);
}

static const int ALL[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static void test_ids(void)
{
	struct atlas_tok *tok = atlas_tok_load(fx);
	CHECK(tok != NULL);
	for (int i = 0; tok && i < n_cases; i++) {
		int32_t *ids = NULL;
		size_t n = 0;
		CHECK_EQ_INT(
		    atlas_tok_encode(tok, cases[i].input, strlen(cases[i].input), true, &ids, &n),
		    0);
		CHECK_EQ_INT(n, cases[i].n_ids);
		CHECK(n == (size_t)cases[i].n_ids &&
		      !memcmp(ids, cases[i].ids, n * sizeof(int32_t)));
		free(ids);
	}
	atlas_tok_free(tok);
}

/* The fixture loads as an embedding model: last-token pooling, then L2
 * normalization; it validates clean; and it cannot generate. */
static void test_load_and_refuse_generation(void)
{
	struct atlas_embed_config ec;
	CHECK_EQ_INT(atlas_embed_config_load(fx, &ec), 0);
	CHECK_EQ_INT(ec.pooling, ATLAS_POOL_LAST);
	CHECK(ec.normalize);
	CHECK_EQ_INT(ec.dim, D);
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = atlas_model_load(fx, be, NULL);
	CHECK(m != NULL);
	if (m) {
		CHECK_STR(atlas_model_family(m), "qwen3");
		CHECK_EQ_INT(atlas_model_embed_config(m)->pooling, ATLAS_POOL_LAST);
		struct atlas_seq *sq = atlas_seq_new(m);
		float *logits = malloc((size_t)atlas_model_config(m)->vocab_size * sizeof(float));
		CHECK_EQ_INT(
		    atlas_model_forward(m, sq, cases[0].ids, cases[0].n_ids, logits, false),
		    ATLAS_EUNSUPPORTED);
		CHECK_CONTAINS(atlas_errmsg(), "no output head");
		CHECK_EQ_INT(atlas_seq_len(sq), 0);
		free(logits);
		atlas_seq_free(sq);
		atlas_model_free(m);
	}
	be->destroy(be);
}

static void count_finding(void *arg, enum atlas_finding level, const char *msg)
{
	int *n = arg;
	n[level == ATLAS_FINDING_PROBLEM]++;
	fprintf(stderr, "# finding: %s\n", msg);
}

static void test_validate(void)
{
	int n[2] = {0, 0};
	CHECK_EQ_INT(atlas_model_validate(fx, count_finding, n), 0);
	CHECK_EQ_INT(n[0], 0); /* no unexpected tensor */
	CHECK_EQ_INT(n[1], 0);
}

static void test_last_token(void)
{
	float out[MAX_CASES * MAX_D];
	struct run rp = {.seqs = 1, .tokens = 64};
	for (int i = 0; i < n_cases; i++)
		if (!embed(fx, &rp, &ALL[i], 1, out))
			compare(out, cases[i].last, "last-token", i);
}

/* A fixture copy in tmp/name: links to every file but those written. */
static const char *fixture_copy(const char *name, const char *pool_json)
{
	static char dir[600];
	static const char *files[] = {"config.json",	"model.safetensors",
				      "tokenizer.json", "tokenizer_config.json",
				      "modules.json",	NULL};
	snprintf(dir, sizeof(dir), "%s/%s", harness_tmpdir(), name);
	mkdir(dir, 0755);
	for (int i = 0; files[i]; i++) {
		char from[700], to[700];
		snprintf(from, sizeof(from), "%s/%s", fx, files[i]);
		snprintf(to, sizeof(to), "%s/%s", dir, files[i]);
		if (symlink(from, to) && errno != EEXIST)
			harness_fail(__FILE__, __LINE__, "cannot link '%s'", to);
	}
	char sub[700];
	snprintf(sub, sizeof(sub), "%s/1_Pooling", dir);
	mkdir(sub, 0755);
	free(harness_write(sub, "config.json", pool_json, strlen(pool_json)));
	return dir;
}

/* A pooling config with the boolean fields `mode` (the others absent,
 * which sentence-transformers reads as false). */
#define POOL_JSON(mode) "{\"word_embedding_dimension\": 64, " mode ", \"include_prompt\": true}"

static void test_mean(void)
{
	const char *dir = fixture_copy("mean", POOL_JSON("\"pooling_mode_mean_tokens\": true"));
	struct atlas_embed_config ec;
	CHECK_EQ_INT(atlas_embed_config_load(dir, &ec), 0);
	CHECK_EQ_INT(ec.pooling, ATLAS_POOL_MEAN);
	float out[MAX_CASES * MAX_D];
	struct run rp = {.seqs = 1, .tokens = 64};
	for (int i = 0; i < n_cases; i++)
		if (!embed(dir, &rp, &ALL[i], 1, out))
			compare(out, cases[i].mean, "mean", i);
	/* mean over chunks (2 tokens a step) is the mean over the whole */
	struct run chunked = {.seqs = 1, .tokens = 2};
	float whole[MAX_D];
	for (int i = 0; i < n_cases; i++)
		if (!embed(dir, &rp, &ALL[i], 1, whole) && !embed(dir, &chunked, &ALL[i], 1, out))
			for (int64_t d = 0; d < D; d++)
				CHECK_NEAR(out[d], whole[d], 1e-6);
}

/* cls pooling is the first token's state, which (causal attention) is
 * the last-token vector of that token alone. */
static void test_cls(void)
{
	const char *dir = fixture_copy("cls", POOL_JSON("\"pooling_mode_cls_token\": true"));
	float out[MAX_D], first[MAX_D];
	struct run rp = {.seqs = 1, .tokens = 64};
	struct ecase save = cases[0];
	if (embed(dir, &rp, &ALL[1], 1, out))
		return;
	cases[0].n_ids = 1;
	cases[0].ids[0] = cases[1].ids[0];
	int rc = embed(fx, &rp, &ALL[0], 1, first);
	cases[0] = save;
	if (rc)
		return;
	for (int64_t d = 0; d < D; d++)
		CHECK_NEAR(out[d], first[d], 1e-6);
}

/* Batched, the inputs get exactly the bits they get alone (batch-
 * invariant CPU backend); and with the prefix cache on, repeating an
 * input computes it again to the same vector. */
static void test_batch_invariance(void)
{
	float alone[MAX_CASES * MAX_D], batch[MAX_CASES * 2 * MAX_D];
	struct run one = {.seqs = 1, .tokens = 64},
		   many = {.seqs = 8, .tokens = 64, .prefix = true};
	for (int i = 0; i < n_cases; i++)
		if (embed(fx, &one, &ALL[i], 1, alone + i * D))
			return;
	int twice[MAX_CASES * 2];
	for (int i = 0; i < 2 * n_cases; i++)
		twice[i] = i % n_cases;
	if (embed(fx, &many, twice, 2 * n_cases, batch))
		return;
	for (int i = 0; i < 2 * n_cases; i++)
		if (memcmp(batch + i * D, alone + (i % n_cases) * D, (size_t)D * sizeof(float)))
			harness_fail(__FILE__, __LINE__, "case %d batched differs from alone",
				     i % n_cases);
}

/* Rewrite the fixture's safetensors with "model." before every decoder
 * tensor name (a CausalLM export's layout) into dir. */
static int prefixed_weights(const char *dir)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/model.safetensors", fx);
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc((size_t)size);
	int rc = b && fread(b, 1, (size_t)size, f) == (size_t)size ? 0 : -1;
	fclose(f);
	uint64_t hl = 0;
	for (int i = 0; !rc && i < 8; i++)
		hl |= (uint64_t)b[i] << (8 * i);
	char *htext = rc || hl > (uint64_t)size - 8 ? NULL : calloc(hl + 1, 1);
	if (htext)
		memcpy(htext, b + 8, hl);
	json_object *h = htext ? json_tokener_parse(htext) : NULL, *nh = json_object_new_object();
	free(htext);
	if (h) {
		json_object_object_foreach(h, k, v)
		{
			char name[300];
			snprintf(name, sizeof(name), "%s%s",
				 strcmp(k, "__metadata__") && strcmp(k, "lm_head.weight") ? "model."
											  : "",
				 k);
			json_object_object_add(nh, name, json_object_get(v));
		}
	}
	const char *text = json_object_to_json_string_ext(nh, JSON_C_TO_STRING_PLAIN);
	size_t tl = strlen(text), pad = (8 - tl % 8) % 8;
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	f = h ? fopen(path, "wb") : NULL;
	if (f) {
		uint64_t nl = tl + pad;
		unsigned char len8[8];
		for (int i = 0; i < 8; i++)
			len8[i] = (unsigned char)(nl >> (8 * i));
		fwrite(len8, 1, 8, f);
		fwrite(text, 1, tl, f);
		fwrite("        ", 1, pad, f);
		fwrite(b + 8 + hl, 1, (size_t)size - 8 - hl, f);
		rc = fclose(f) ? -1 : 0;
	} else {
		rc = -1;
	}
	json_object_put(nh);
	json_object_put(h);
	free(b);
	return rc;
}

/* The "model."-prefixed names with architectures Qwen3ForCausalLM and the
 * same pooling files: the same model, the same vectors. */
static void test_prefixed_causal_lm(void)
{
	char dir[600], path[700];
	snprintf(dir, sizeof(dir), "%s/prefixed", harness_tmpdir());
	mkdir(dir, 0755);
	CHECK_EQ_INT(prefixed_weights(dir), 0);
	static const char *links[] = {"tokenizer.json", "tokenizer_config.json", "modules.json",
				      "1_Pooling", NULL};
	for (int i = 0; links[i]; i++) {
		char from[700];
		snprintf(from, sizeof(from), "%s/%s", fx, links[i]);
		snprintf(path, sizeof(path), "%s/%s", dir, links[i]);
		if (symlink(from, path) && errno != EEXIST)
			harness_fail(__FILE__, __LINE__, "cannot link '%s'", path);
	}
	snprintf(path, sizeof(path), "%s/config.json", fx);
	json_object *cfg = json_object_from_file(path);
	CHECK(cfg != NULL);
	if (!cfg)
		return;
	json_object *arch = json_object_new_array();
	json_object_array_add(arch, json_object_new_string("Qwen3ForCausalLM"));
	json_object_object_add(cfg, "architectures", arch);
	const char *text = json_object_to_json_string(cfg);
	free(harness_write(dir, "config.json", text, strlen(text)));
	json_object_put(cfg);

	int n[2] = {0, 0};
	CHECK_EQ_INT(atlas_model_validate(dir, count_finding, n), 0);
	CHECK_EQ_INT(n[0], 0);
	float a[MAX_D], b[MAX_D];
	struct run rp = {.seqs = 1, .tokens = 64};
	if (!embed(dir, &rp, &ALL[1], 1, a) && !embed(fx, &rp, &ALL[1], 1, b))
		CHECK(!memcmp(a, b, (size_t)D * sizeof(float)));
}

/* Pooling configs: what Atlas computes is read, the rest refused by name. */
static void test_pooling_configs(void)
{
	struct atlas_embed_config ec;
	static const char *refused[][2] = {
	    {"\"pooling_mode_max_tokens\": true", "'max'"},
	    {"\"pooling_mode_weightedmean_tokens\": true", "'weightedmean'"},
	    {"\"pooling_mode_mean_sqrt_len_tokens\": true", "'mean_sqrt_len'"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char json[512];
		snprintf(json, sizeof(json), "{\"pooling_mode_lasttoken\": false, %s}",
			 refused[i][0]);
		char name[16];
		snprintf(name, sizeof(name), "refused%zu", i);
		const char *dir = fixture_copy(name, json);
		CHECK_EQ_INT(atlas_embed_config_load(dir, &ec), ATLAS_EUNSUPPORTED);
		CHECK_CONTAINS(atlas_errmsg(), refused[i][1]);
		CHECK_EQ_INT(ec.pooling, ATLAS_POOL_NONE);
		struct atlas_backend *be = atlas_backend_cpu_new();
		struct atlas_model *m = atlas_model_load(dir, be, NULL);
		CHECK(m == NULL);
		CHECK_CONTAINS(atlas_errmsg(), refused[i][1]);
		atlas_model_free(m);
		be->destroy(be);
	}
	const char *two = fixture_copy("two", POOL_JSON("\"pooling_mode_mean_tokens\": true, "
							"\"pooling_mode_cls_token\": true"));
	CHECK_EQ_INT(atlas_embed_config_load(two, &ec), ATLAS_EUNSUPPORTED);
	const char *none = fixture_copy("none", "{\"pooling_mode_lasttoken\": false}");
	CHECK_EQ_INT(atlas_embed_config_load(none, &ec), ATLAS_EFORMAT);
	/* a generation model has no modules.json: no pooling, no error */
	char dflt[600];
	snprintf(dflt, sizeof(dflt), "%s/models/default", harness_srcdir());
	CHECK_EQ_INT(atlas_embed_config_load(dflt, &ec), 0);
	CHECK_EQ_INT(ec.pooling, ATLAS_POOL_NONE);
	/* a Dense projection would change the vectors: refused */
	char *dir = (char *)fixture_copy("dense", POOL_JSON("\"pooling_mode_mean_tokens\": true"));
	static const char mods[] =
	    "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": "
	    "\"sentence_transformers.models.Transformer\"}, {\"idx\": 1, \"name\": \"1\", "
	    "\"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}, "
	    "{\"idx\": 2, \"name\": \"2\", \"path\": \"2_Dense\", \"type\": "
	    "\"sentence_transformers.models.Dense\"}]";
	char mpath[700];
	snprintf(mpath, sizeof(mpath), "%s/modules.json", dir);
	unlink(mpath);
	free(harness_write(dir, "modules.json", mods, sizeof(mods) - 1));
	CHECK_EQ_INT(atlas_embed_config_load(dir, &ec), ATLAS_EUNSUPPORTED);
	CHECK_CONTAINS(atlas_errmsg(), "Dense");
}

int main(void)
{
	if (load_expected()) {
		harness_fail(__FILE__, __LINE__, "no fixture at '%s'", fx);
		return harness_done();
	}
	RUN(test_ids);
	RUN(test_load_and_refuse_generation);
	RUN(test_validate);
	RUN(test_last_token);
	RUN(test_mean);
	RUN(test_cls);
	RUN(test_batch_invariance);
	RUN(test_prefixed_causal_lm);
	RUN(test_pooling_configs);
	printf("# %d cases, hidden %lld: worst max abs diff %.3g, worst cosine 1 - %.3g "
	       "(bounds %g, 1 - %g)\n",
	       n_cases, (long long)D, worst_abs, 1 - worst_cos, MAX_ABS, 1 - MIN_COS);
	return harness_done();
}
