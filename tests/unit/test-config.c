/* test-config.c - config.json and generation_config.json parsing: real
 * model configs in both transformers spellings (tests/fixtures/config),
 * defaults, nulls, and every kind of bad field. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "harness.h"
#include "../../lib/core/error.h"
#include "../../lib/io/config.h"
#include "../../lib/io/file.h"

/* Parse tests/fixtures/config/`name`; returns the parse result. */
static int load_fixture(const char *name, struct atlas_config *c)
{
	char path[512], *text;
	size_t len;
	int rc;

	snprintf(path, sizeof(path), "%s/tests/fixtures/config/%s", harness_srcdir(), name);
	rc = atlas_file_read(path, &text, &len);
	CHECK_EQ_INT(rc, 0);
	if (rc)
		return rc;
	rc = atlas_config_parse(text, name, c);
	free(text);
	return rc;
}

/* A model directory under the tmpdir holding `file` with `text`. */
static char *model_dir(const char *name, const char *file, const char *text)
{
	size_t n = strlen(harness_tmpdir()) + strlen(name) + 2;
	char *d = malloc(n);
	snprintf(d, n, "%s/%s", harness_tmpdir(), name);
	mkdir(d, 0755);
	if (file)
		free(harness_write(d, file, text, strlen(text)));
	return d;
}

#define BASE                                                                                       \
	"\"model_type\":\"llama\",\"vocab_size\":1000,\"hidden_size\":64,"                         \
	"\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4"

/* Parse BASE plus `extra` (a JSON fragment starting with ','). */
static int parse_with(const char *extra, struct atlas_config *c)
{
	char buf[2048];
	snprintf(buf, sizeof(buf), "{" BASE "%s}", extra);
	atlas_error_clear();
	return atlas_config_parse(buf, "cfg", c);
}

/* `extra` must be refused with `code` and a message containing `msg`. */
static void bad(const char *extra, int code, const char *msg)
{
	struct atlas_config c;
	int rc = parse_with(extra, &c);
	CHECK_EQ_INT(rc, code);
	CHECK_CONTAINS(atlas_errmsg(), msg);
	if (rc != code || !strstr(atlas_errmsg(), msg))
		printf("# (input: %s)\n", extra);
}

static void test_llama31(void)
{
	struct atlas_config c;
	CHECK_EQ_INT(load_fixture("llama-3.1-8b.json", &c), 0);
	CHECK_STR(c.model_type, "llama");
	CHECK_STR(c.architecture, "LlamaForCausalLM");
	CHECK_EQ_INT(c.vocab_size, 128256);
	CHECK_EQ_INT(c.hidden_size, 4096);
	CHECK_EQ_INT(c.intermediate_size, 14336);
	CHECK_EQ_INT(c.num_layers, 32);
	CHECK_EQ_INT(c.num_heads, 32);
	CHECK_EQ_INT(c.num_kv_heads, 8);
	CHECK_EQ_INT(c.head_dim, 128);
	CHECK_EQ_INT(c.max_position, 131072);
	CHECK_NEAR(c.rms_eps, 1e-5, 1e-12);
	CHECK_NEAR(c.rope_theta, 500000, 0);
	CHECK_EQ_INT(c.rope_type, ATLAS_ROPE_LLAMA3);
	CHECK_NEAR(c.rope_factor, 8, 0);
	CHECK_NEAR(c.rope_low_freq_factor, 1, 0);
	CHECK_NEAR(c.rope_high_freq_factor, 4, 0);
	CHECK_EQ_INT(c.rope_original_max_position, 8192);
	CHECK(!c.tie_embeddings);
	CHECK(!c.attention_bias);
	CHECK(!c.mlp_bias);
	CHECK_STR(c.hidden_act, "silu");
	CHECK_EQ_INT(c.dtype, ATLAS_DTYPE_BF16);
	CHECK_EQ_INT(c.sliding_window, 0);
	CHECK_EQ_INT(c.bos_id, 128000);
	CHECK_EQ_INT(c.n_eos, 3);
	CHECK_EQ_INT(c.eos_ids[0], 128001);
	CHECK_EQ_INT(c.eos_ids[1], 128008);
	CHECK_EQ_INT(c.eos_ids[2], 128009);
}

static void test_qwen25(void)
{
	struct atlas_config c;
	CHECK_EQ_INT(load_fixture("qwen2.5-7b-instruct.json", &c), 0);
	CHECK_STR(c.model_type, "qwen2");
	CHECK_STR(c.architecture, "Qwen2ForCausalLM");
	CHECK_EQ_INT(c.vocab_size, 152064);
	CHECK_EQ_INT(c.hidden_size, 3584);
	CHECK_EQ_INT(c.num_heads, 28);
	CHECK_EQ_INT(c.num_kv_heads, 4);
	CHECK_EQ_INT(c.head_dim, 128);
	CHECK_EQ_INT(c.max_position, 32768);
	CHECK_NEAR(c.rope_theta, 1e6, 0);
	CHECK_EQ_INT(c.rope_type, ATLAS_ROPE_DEFAULT);
	/* use_sliding_window: false wins over sliding_window: 131072 */
	CHECK_EQ_INT(c.sliding_window, 0);
	/* qwen2's QKV bias is the model layer's business, not the file's */
	CHECK(!c.attention_bias);
	CHECK_EQ_INT(c.bos_id, 151643);
	CHECK_EQ_INT(c.n_eos, 1);
	CHECK_EQ_INT(c.eos_ids[0], 151645);
}

static void test_mistral(void)
{
	struct atlas_config c;
	CHECK_EQ_INT(load_fixture("mistral-7b-v0.1.json", &c), 0);
	CHECK_STR(c.model_type, "mistral");
	CHECK_EQ_INT(c.sliding_window, 4096);
	CHECK_NEAR(c.rope_theta, 10000, 0);
	CHECK_EQ_INT(c.rope_type, ATLAS_ROPE_DEFAULT);
	CHECK_EQ_INT(c.vocab_size, 32000);
	CHECK_EQ_INT(c.head_dim, 128);
	CHECK_EQ_INT(c.bos_id, 1);
	CHECK_EQ_INT(c.n_eos, 1);
	CHECK_EQ_INT(c.eos_ids[0], 2);
}

/* transformers 4.x and 5.x files of the same model: identical structs. */
static void test_v4_v5_identical(void)
{
	struct atlas_config a, b;
	CHECK_EQ_INT(load_fixture("qwen3-8b.json", &a), 0);
	CHECK_EQ_INT(load_fixture("qwen3-8b-v5.json", &b), 0);
	CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	CHECK_STR(b.model_type, "qwen3");
	CHECK_EQ_INT(b.head_dim, 128);
	CHECK_EQ_INT(b.num_layers, 36);
	CHECK_EQ_INT(b.intermediate_size, 12288);
	CHECK_NEAR(b.rope_theta, 1e6, 0);
	CHECK_EQ_INT(b.rope_type, ATLAS_ROPE_DEFAULT);
	CHECK_EQ_INT(b.dtype, ATLAS_DTYPE_BF16);
	CHECK_EQ_INT(b.sliding_window, 0);
	CHECK_EQ_INT(b.max_position, 40960);

	CHECK_EQ_INT(load_fixture("llama-3.1-8b.json", &a), 0);
	CHECK_EQ_INT(load_fixture("llama-3.1-8b-v5.json", &b), 0);
	CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	CHECK_EQ_INT(b.rope_type, ATLAS_ROPE_LLAMA3);
	CHECK_NEAR(b.rope_theta, 500000, 0);
	CHECK_EQ_INT(b.rope_original_max_position, 8192);
}

static void test_yarn(void)
{
	struct atlas_config c;
	atlas_error_clear();
	CHECK_EQ_INT(load_fixture("yarn-rope.json", &c), ATLAS_EUNSUPPORTED);
	CHECK_CONTAINS(atlas_errmsg(),
		       "rope type 'yarn' is not supported (supported: default, linear, llama3)");
	CHECK_CONTAINS(atlas_errmsg(), "yarn-rope.json");
	bad(",\"rope_parameters\":{\"rope_type\":\"dynamic\",\"factor\":2}", ATLAS_EUNSUPPORTED,
	    "rope type 'dynamic' is not supported");
	bad(",\"rope_scaling\":{\"rope_type\":\"longrope\"}", ATLAS_EUNSUPPORTED,
	    "cfg: rope_scaling: rope type 'longrope'");
	bad(",\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\"}}",
	    ATLAS_EUNSUPPORTED, "per attention type");
}

static void test_broken_fixtures(void)
{
	struct atlas_config c;
	char *d = model_dir("nohidden", NULL, NULL), *src, *text;
	size_t len;
	char path[512], want[512];

	snprintf(path, sizeof(path), "%s/tests/fixtures/config/missing-hidden-size.json",
		 harness_srcdir());
	CHECK_EQ_INT(atlas_file_read(path, &text, &len), 0);
	src = harness_write(d, "config.json", text, len);
	free(text);
	CHECK_EQ_INT(atlas_config_load(d, &c), ATLAS_EFORMAT);
	snprintf(want, sizeof(want), "config.json in '%s': missing required field 'hidden_size'",
		 d);
	CHECK_STR(atlas_errmsg(), want);
	free(src);
	free(d);

	atlas_error_clear();
	CHECK_EQ_INT(load_fixture("hidden-size-string.json", &c), ATLAS_EFORMAT);
	CHECK_STR(atlas_errmsg(),
		  "hidden-size-string.json: field 'hidden_size' must be an integer");
}

static void test_load_dir(void)
{
	struct atlas_config c;
	char *d = model_dir("cfgdir", "config.json", "{" BASE ",\"num_key_value_heads\":2}");
	CHECK_EQ_INT(atlas_config_load(d, &c), 0);
	CHECK_EQ_INT(c.num_kv_heads, 2);
	CHECK_EQ_INT(c.vocab_size, 1000);
	free(d);

	d = model_dir("nocfg", NULL, NULL);
	CHECK_EQ_INT(atlas_config_load(d, &c), ATLAS_ENOTFOUND);
	CHECK_CONTAINS(atlas_errmsg(), "config.json");
	CHECK_CONTAINS(atlas_errmsg(), d);
	free(d);

	d = model_dir("badjson", "config.json", "{\"model_type\": \"llama\",");
	CHECK_EQ_INT(atlas_config_load(d, &c), ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "config.json in '");
	CHECK_CONTAINS(atlas_errmsg(), "invalid JSON");
	free(d);
}

static void test_defaults(void)
{
	struct atlas_config c;
	CHECK_EQ_INT(parse_with("", &c), 0);
	CHECK_STR(c.model_type, "llama");
	CHECK_STR(c.architecture, "");
	CHECK_EQ_INT(c.num_kv_heads, 4);
	CHECK_EQ_INT(c.head_dim, 16);
	CHECK_EQ_INT(c.max_position, 2048);
	CHECK_NEAR(c.rms_eps, 1e-6, 1e-15);
	CHECK_NEAR(c.rope_theta, 10000, 0);
	CHECK_EQ_INT(c.rope_type, ATLAS_ROPE_DEFAULT);
	CHECK_NEAR(c.rope_factor, 1, 0);
	CHECK(!c.tie_embeddings);
	CHECK(!c.attention_bias);
	CHECK(!c.mlp_bias);
	CHECK_STR(c.hidden_act, "silu");
	CHECK_EQ_INT(c.dtype, ATLAS_DTYPE_F32);
	CHECK_EQ_INT(c.sliding_window, 0);
	CHECK_EQ_INT(c.bos_id, -1);
	CHECK_EQ_INT(c.n_eos, 0);

	/* null means "absent" for every optional field */
	CHECK_EQ_INT(
	    parse_with(",\"head_dim\":null,\"num_key_value_heads\":null,"
		       "\"bos_token_id\":null,\"eos_token_id\":null,\"sliding_window\":null,"
		       "\"rope_scaling\":null,\"rope_parameters\":null,\"rope_theta\":null,"
		       "\"torch_dtype\":null,\"architectures\":[],\"hidden_act\":null",
		       &c),
	    0);
	CHECK_EQ_INT(c.head_dim, 16);
	CHECK_EQ_INT(c.num_kv_heads, 4);
	CHECK_EQ_INT(c.bos_id, -1);
	CHECK_EQ_INT(c.n_eos, 0);
	CHECK_NEAR(c.rope_theta, 10000, 0);
	CHECK_EQ_INT(c.dtype, ATLAS_DTYPE_F32);
	CHECK_STR(c.hidden_act, "silu");
}

static void test_fields(void)
{
	struct atlas_config c;
	CHECK_EQ_INT(parse_with(",\"tie_word_embeddings\":true,\"attention_bias\":true,"
				"\"mlp_bias\":true,\"hidden_act\":\"gelu\","
				"\"hidden_activation\":\"gelu_pytorch_tanh\",\"head_dim\":32,"
				"\"dtype\":\"float16\",\"torch_dtype\":\"bfloat16\","
				"\"sliding_window\":512,\"use_sliding_window\":true,"
				"\"eos_token_id\":7,\"bos_token_id\":0",
				&c),
		     0);
	CHECK(c.tie_embeddings);
	CHECK(c.attention_bias);
	CHECK(c.mlp_bias);
	CHECK_STR(c.hidden_act, "gelu_pytorch_tanh");
	CHECK_EQ_INT(c.head_dim, 32);
	CHECK_EQ_INT(c.dtype, ATLAS_DTYPE_F16); /* 5.x "dtype" wins */
	CHECK_EQ_INT(c.sliding_window, 512);
	CHECK_EQ_INT(c.n_eos, 1);
	CHECK_EQ_INT(c.eos_ids[0], 7);
	CHECK_EQ_INT(c.bos_id, 0);

	CHECK_EQ_INT(parse_with(",\"torch_dtype\":\"float32\",\"eos_token_id\":[]", &c), 0);
	CHECK_EQ_INT(c.dtype, ATLAS_DTYPE_F32);
	CHECK_EQ_INT(c.n_eos, 0);
}

static void test_rope_variants(void)
{
	struct atlas_config c;
	/* the older 4.x key "type" */
	CHECK_EQ_INT(parse_with(",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.5}", &c), 0);
	CHECK_EQ_INT(c.rope_type, ATLAS_ROPE_LINEAR);
	CHECK_NEAR(c.rope_factor, 2.5, 0);
	/* 5.x linear with theta inside */
	CHECK_EQ_INT(parse_with(",\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":4,"
				"\"rope_theta\":20000}",
				&c),
		     0);
	CHECK_EQ_INT(c.rope_type, ATLAS_ROPE_LINEAR);
	CHECK_NEAR(c.rope_factor, 4, 0);
	CHECK_NEAR(c.rope_theta, 20000, 0);
	/* both present: rope_parameters wins */
	CHECK_EQ_INT(
	    parse_with(",\"rope_theta\":1,\"rope_scaling\":{\"type\":\"linear\",\"factor\":2},"
		       "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":77.0}",
		       &c),
	    0);
	CHECK_EQ_INT(c.rope_type, ATLAS_ROPE_DEFAULT);
	CHECK_NEAR(c.rope_theta, 77, 0);
	CHECK_NEAR(c.rope_factor, 1, 0);
	/* 5.x without theta inside keeps the top-level one */
	CHECK_EQ_INT(
	    parse_with(",\"rope_theta\":1234,\"rope_parameters\":{\"rope_type\":\"default\"}", &c),
	    0);
	CHECK_NEAR(c.rope_theta, 1234, 0);
	/* "default" ignores a stray factor (4.x and 5.x agree) */
	CHECK_EQ_INT(parse_with(",\"rope_scaling\":{\"rope_type\":\"default\",\"factor\":3}", &c),
		     0);
	CHECK_NEAR(c.rope_factor, 1, 0);

	bad(",\"rope_scaling\":{\"type\":\"linear\"}", ATLAS_EFORMAT,
	    "cfg: rope_scaling: missing field 'factor' for rope type 'linear'");
	bad(",\"rope_scaling\":{\"type\":\"linear\",\"factor\":0}", ATLAS_EFORMAT,
	    "field 'factor' must be positive");
	bad(",\"rope_scaling\":{\"type\":\"linear\",\"factor\":\"2\"}", ATLAS_EFORMAT,
	    "rope_scaling: field 'factor' must be a number");
	bad(",\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8,\"high_freq_factor\":4,"
	    "\"original_max_position_embeddings\":8192}",
	    ATLAS_EFORMAT,
	    "rope_parameters: missing field 'low_freq_factor' for rope type 'llama3'");
	bad(",\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
	    "\"high_freq_factor\":1,\"original_max_position_embeddings\":8192}",
	    ATLAS_EFORMAT, "high_freq_factor (1) must be larger than low_freq_factor (4)");
	bad(",\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
	    "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192.5}",
	    ATLAS_EFORMAT, "field 'original_max_position_embeddings' must be an integer");
	bad(",\"rope_scaling\":{\"rope_type\":5}", ATLAS_EFORMAT,
	    "field 'rope_type' must be a string");
	bad(",\"rope_scaling\":\"linear\"", ATLAS_EFORMAT,
	    "cfg: field 'rope_scaling' must be an object");
	bad(",\"rope_parameters\":[1]", ATLAS_EFORMAT, "field 'rope_parameters' must be an object");
	bad(",\"rope_theta\":-5", ATLAS_EFORMAT, "field 'rope_theta' must be positive");
	bad(",\"rope_theta\":\"1e4\"", ATLAS_EFORMAT, "field 'rope_theta' must be a number");
}

static void test_bad_types(void)
{
	bad(",\"vocab_size\":\"1000\"", ATLAS_EFORMAT,
	    "cfg: field 'vocab_size' must be an integer");
	bad(",\"num_hidden_layers\":2.0", ATLAS_EFORMAT,
	    "field 'num_hidden_layers' must be an integer");
	bad(",\"model_type\":3", ATLAS_EFORMAT, "field 'model_type' must be a string");
	bad(",\"tie_word_embeddings\":\"yes\"", ATLAS_EFORMAT,
	    "field 'tie_word_embeddings' must be true or false");
	bad(",\"attention_bias\":1", ATLAS_EFORMAT, "field 'attention_bias' must be true or false");
	bad(",\"rms_norm_eps\":\"x\"", ATLAS_EFORMAT, "field 'rms_norm_eps' must be a number");
	bad(",\"eos_token_id\":\"2\"", ATLAS_EFORMAT,
	    "field 'eos_token_id' must be an integer or a list of integers");
	bad(",\"eos_token_id\":[1,\"2\"]", ATLAS_EFORMAT,
	    "field 'eos_token_id' must be an integer or a list of integers");
	bad(",\"eos_token_id\":[1,2,3,4,5,6,7,8,9]", ATLAS_EFORMAT,
	    "field 'eos_token_id' has 9 ids, at most 8");
	bad(",\"eos_token_id\":-3", ATLAS_EFORMAT, "invalid token id -3");
	bad(",\"bos_token_id\":[1]", ATLAS_EFORMAT, "field 'bos_token_id' must be an integer");
	bad(",\"bos_token_id\":4294967296", ATLAS_EFORMAT,
	    "field 'bos_token_id' has an invalid token id");
	bad(",\"architectures\":\"LlamaForCausalLM\"", ATLAS_EFORMAT,
	    "field 'architectures' must be an array");
	bad(",\"architectures\":[1]", ATLAS_EFORMAT,
	    "field 'architectures' must be a list of strings");
	bad(",\"hidden_act\":[\"silu\"]", ATLAS_EFORMAT, "field 'hidden_act' must be a string");
	bad(",\"sliding_window\":true", ATLAS_EFORMAT, "field 'sliding_window' must be an integer");
	bad(",\"use_sliding_window\":0", ATLAS_EFORMAT,
	    "field 'use_sliding_window' must be true or false");
	bad(",\"torch_dtype\":5", ATLAS_EFORMAT, "field 'torch_dtype' must be a string");
	bad(",\"hidden_act\":\"a_name_that_is_far_too_long_for_the_field\"", ATLAS_EFORMAT,
	    "field 'hidden_act' is too long");
}

static void test_bad_values(void)
{
	struct atlas_config c;
	bad(",\"hidden_size\":0", ATLAS_EFORMAT, "field 'hidden_size' must be positive (got 0)");
	bad(",\"vocab_size\":-1", ATLAS_EFORMAT, "field 'vocab_size' must be positive (got -1)");
	bad(",\"num_key_value_heads\":3", ATLAS_EFORMAT,
	    "num_attention_heads (4) is not a multiple of num_key_value_heads (3)");
	bad(",\"num_key_value_heads\":8", ATLAS_EFORMAT,
	    "is not a multiple of num_key_value_heads (8)");
	bad(",\"num_key_value_heads\":0", ATLAS_EFORMAT,
	    "field 'num_key_value_heads' must be positive");
	bad(",\"head_dim\":-2", ATLAS_EFORMAT, "field 'head_dim' must be positive");
	bad(",\"max_position_embeddings\":0", ATLAS_EFORMAT,
	    "field 'max_position_embeddings' must be positive");
	bad(",\"rms_norm_eps\":0", ATLAS_EFORMAT, "field 'rms_norm_eps' must be positive");
	bad(",\"sliding_window\":-1", ATLAS_EFORMAT, "field 'sliding_window' must not be negative");
	bad(",\"torch_dtype\":\"float64\"", ATLAS_EUNSUPPORTED,
	    "field 'torch_dtype': dtype 'float64' is not supported");
	bad(",\"dtype\":\"int8\"", ATLAS_EUNSUPPORTED,
	    "field 'dtype': dtype 'int8' is not supported");

	/* hidden not divisible by heads is fine with an explicit head_dim */
	atlas_error_clear();
	CHECK_EQ_INT(
	    atlas_config_parse("{\"model_type\":\"x\",\"vocab_size\":10,\"hidden_size\":30,"
			       "\"intermediate_size\":8,\"num_hidden_layers\":1,"
			       "\"num_attention_heads\":4}",
			       "cfg", &c),
	    ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(),
		       "hidden_size (30) is not a multiple of num_attention_heads (4)");
	CHECK_EQ_INT(
	    atlas_config_parse("{\"model_type\":\"x\",\"vocab_size\":10,\"hidden_size\":30,"
			       "\"intermediate_size\":8,\"num_hidden_layers\":1,"
			       "\"num_attention_heads\":4,\"head_dim\":8}",
			       "cfg", &c),
	    0);
	CHECK_EQ_INT(c.head_dim, 8);

	/* each required field, when missing, is named */
	static const char *req[] = {"model_type",	 "vocab_size",
				    "hidden_size",	 "intermediate_size",
				    "num_hidden_layers", "num_attention_heads"};
	static const char *val[] = {"\"llama\"", "1000", "64", "128", "2", "4"};
	for (int skip = 0; skip < 6; skip++) {
		char buf[512], want[128];
		size_t n = (size_t)sprintf(buf, "{");
		for (int i = 0; i < 6; i++)
			if (i != skip)
				n += (size_t)sprintf(buf + n, "%s\"%s\":%s", n > 1 ? "," : "",
						     req[i], val[i]);
		sprintf(buf + n, "}");
		CHECK_EQ_INT(atlas_config_parse(buf, "cfg", &c), ATLAS_EFORMAT);
		sprintf(want, "cfg: missing required field '%s'", req[skip]);
		CHECK_STR(atlas_errmsg(), want);
	}
	CHECK_EQ_INT(atlas_config_parse("[1]", "cfg", &c), ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "cfg: JSON is not an object");
	CHECK_EQ_INT(atlas_config_parse("", "cfg", &c), ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "invalid JSON");
}

static void test_gen_config(void)
{
	struct atlas_gen_config g;
	char *d = model_dir("gen-none", NULL, NULL);

	atlas_error_clear();
	CHECK_EQ_INT(atlas_gen_config_load(d, &g), 0);
	CHECK_STR(atlas_errmsg(), "");
	CHECK(!g.do_sample);
	CHECK_NEAR(g.temperature, 1, 0);
	CHECK_EQ_INT(g.top_k, 50);
	CHECK_NEAR(g.top_p, 1, 0);
	CHECK_NEAR(g.min_p, 0, 0);
	CHECK_NEAR(g.repetition_penalty, 1, 0);
	CHECK_EQ_INT(g.max_new_tokens, -1);
	CHECK_EQ_INT(g.bos_id, -1);
	CHECK_EQ_INT(g.n_eos, 0);
	free(d);

	/* Qwen3-8B's generation_config.json */
	d = model_dir("gen-qwen3", "generation_config.json",
		      "{\"bos_token_id\": 151643, \"do_sample\": true,\n"
		      " \"eos_token_id\": [151645, 151643], \"pad_token_id\": 151643,\n"
		      " \"temperature\": 0.6, \"top_k\": 20, \"top_p\": 0.95,\n"
		      " \"transformers_version\": \"4.51.0\"}\n");
	CHECK_EQ_INT(atlas_gen_config_load(d, &g), 0);
	CHECK(g.do_sample);
	CHECK_NEAR(g.temperature, 0.6, 1e-12);
	CHECK_EQ_INT(g.top_k, 20);
	CHECK_NEAR(g.top_p, 0.95, 1e-12);
	CHECK_NEAR(g.min_p, 0, 0);
	CHECK_NEAR(g.repetition_penalty, 1, 0);
	CHECK_EQ_INT(g.max_new_tokens, -1);
	CHECK_EQ_INT(g.bos_id, 151643);
	CHECK_EQ_INT(g.n_eos, 2);
	CHECK_EQ_INT(g.eos_ids[0], 151645);
	CHECK_EQ_INT(g.eos_ids[1], 151643);
	free(d);

	d = model_dir("gen-more", "generation_config.json",
		      "{\"min_p\": 0.05, \"repetition_penalty\": 1.1, \"max_new_tokens\": 256,"
		      " \"max_length\": 4096, \"eos_token_id\": 2, \"temperature\": null,"
		      " \"top_k\": null, \"do_sample\": null}");
	CHECK_EQ_INT(atlas_gen_config_load(d, &g), 0);
	CHECK_NEAR(g.min_p, 0.05, 1e-12);
	CHECK_NEAR(g.repetition_penalty, 1.1, 1e-12);
	CHECK_EQ_INT(g.max_new_tokens, 256);
	CHECK_EQ_INT(g.n_eos, 1);
	CHECK_EQ_INT(g.eos_ids[0], 2);
	CHECK_NEAR(g.temperature, 1, 0);
	CHECK_EQ_INT(g.top_k, 50);
	CHECK(!g.do_sample);
	free(d);

	static const struct {
		const char *json, *msg;
	} bads[] = {
	    {"{\"temperature\": ", "invalid JSON"},
	    {"[]", "JSON is not an object"},
	    {"{\"temperature\": \"hot\"}", "field 'temperature' must be a number"},
	    {"{\"do_sample\": 1}", "field 'do_sample' must be true or false"},
	    {"{\"top_k\": 2.5}", "field 'top_k' must be an integer"},
	    {"{\"top_k\": -1}", "field 'top_k' must not be negative"},
	    {"{\"max_new_tokens\": -5}", "field 'max_new_tokens' must not be negative"},
	    {"{\"top_p\": 1.5}", "field 'top_p' must be at most 1"},
	    {"{\"top_p\": 0}", "field 'top_p' must be positive"},
	    {"{\"min_p\": 2}", "field 'min_p' must be at most 1"},
	    {"{\"temperature\": -1}", "field 'temperature' must be non-negative"},
	    {"{\"repetition_penalty\": 0}", "field 'repetition_penalty' must be positive"},
	    {"{\"eos_token_id\": {}}", "field 'eos_token_id' must be an integer or a list"},
	};
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		char name[32];
		sprintf(name, "gen-bad%zu", i);
		d = model_dir(name, "generation_config.json", bads[i].json);
		CHECK_EQ_INT(atlas_gen_config_load(d, &g), ATLAS_EFORMAT);
		CHECK_CONTAINS(atlas_errmsg(), "generation_config.json in '");
		CHECK_CONTAINS(atlas_errmsg(), bads[i].msg);
		free(d);
	}
	struct atlas_gen_config def;
	atlas_gen_config_defaults(&def);
	CHECK_EQ_INT(def.top_k, 50);
	CHECK_EQ_INT(def.max_new_tokens, -1);
}

/* Hybrid fields: the layer pattern from layer_types or
 * full_attention_interval, the linear-attention sizes, partial rotary
 * embedding, a composite config's text_config, and the refusals. */
static void test_hybrid(void)
{
	struct atlas_config c;
#define LIN ",\"linear_num_key_heads\":2,\"linear_num_value_heads\":4," \
	    "\"linear_key_head_dim\":16,\"linear_value_head_dim\":8"
	CHECK_EQ_INT(parse_with(",\"layer_types\":[\"linear_attention\",\"full_attention\"]" LIN, &c), 0);
	CHECK_EQ_INT(c.n_linear, 1);
	CHECK(atlas_config_layer_is_linear(&c, 0));
	CHECK(!atlas_config_layer_is_linear(&c, 1));
	CHECK_EQ_INT(c.lin_k_heads, 2);
	CHECK_EQ_INT(c.lin_v_dim, 8);
	CHECK_EQ_INT(c.lin_conv, 4); /* the default width */
	CHECK_EQ_INT(c.rotary_dim, c.head_dim);
	/* every second layer full attention, rotary on a quarter of each head */
	CHECK_EQ_INT(parse_with(",\"full_attention_interval\":2,\"partial_rotary_factor\":0.25,"
				"\"linear_conv_kernel_dim\":3" LIN, &c), 0);
	CHECK_EQ_INT(c.n_linear, 1);
	CHECK(atlas_config_layer_is_linear(&c, 0));
	CHECK_EQ_INT(c.lin_conv, 3);
	CHECK_EQ_INT(c.rotary_dim, 4); /* head_dim 16 */
	CHECK_EQ_INT(parse_with(",\"rope_parameters\":{\"rope_type\":\"default\","
				"\"partial_rotary_factor\":0.5}", &c), 0);
	CHECK_EQ_INT(c.rotary_dim, 8);
	/* a dense config (transformers 5 writes layer_types for every model) */
	CHECK_EQ_INT(parse_with(",\"layer_types\":[\"full_attention\",\"full_attention\"]", &c), 0);
	CHECK_EQ_INT(c.n_linear, 0);
	bad(",\"layer_types\":[\"full_attention\"]", ATLAS_EFORMAT,
	    "field 'layer_types' has 1 entries for 2 layers");
	bad(",\"layer_types\":[\"full_attention\",\"sliding_attention\"]", ATLAS_EUNSUPPORTED,
	    "layer_types[1] 'sliding_attention' is not supported");
	bad(",\"layer_types\":[\"linear_attention\",\"full_attention\"]", ATLAS_EFORMAT,
	    "missing required field 'linear_num_key_heads'");
	bad(",\"full_attention_interval\":2,\"linear_num_key_heads\":3,\"linear_num_value_heads\":4,"
	    "\"linear_key_head_dim\":16,\"linear_value_head_dim\":8", ATLAS_EFORMAT,
	    "is not a multiple of linear_num_key_heads");
	bad(",\"partial_rotary_factor\":1.5", ATLAS_EFORMAT, "must be at most 1");
	bad(",\"partial_rotary_factor\":0.01", ATLAS_EFORMAT, "rotary dims");
	/* Qwen3.5 MoE's composite config: the text model from text_config */
	CHECK_EQ_INT(atlas_config_parse(
			 "{\"model_type\":\"qwen3_5_moe\",\"architectures\":[\"Qwen3_5MoeForConditionalGeneration\"],"
			 "\"tie_word_embeddings\":true,\"vision_config\":{\"depth\":2},\"text_config\":{" BASE
			 ",\"full_attention_interval\":2" LIN "}}", "cfg", &c), 0);
	CHECK_STR(c.model_type, "llama");
	CHECK_STR(c.composite, "qwen3_5_moe");
	CHECK_STR(c.architecture, "Qwen3_5MoeForConditionalGeneration");
	CHECK(c.tie_embeddings);
	CHECK_EQ_INT(c.n_linear, 1);
	/* other composites are not unwrapped: their own model_type decides */
	CHECK_EQ_INT(atlas_config_parse("{\"model_type\":\"llava\",\"text_config\":{" BASE "}}", "cfg",
					&c), ATLAS_EFORMAT);
#undef LIN
}

int main(void)
{
	RUN(test_llama31);
	RUN(test_qwen25);
	RUN(test_mistral);
	RUN(test_v4_v5_identical);
	RUN(test_yarn);
	RUN(test_broken_fixtures);
	RUN(test_load_dir);
	RUN(test_defaults);
	RUN(test_fields);
	RUN(test_rope_variants);
	RUN(test_bad_types);
	RUN(test_bad_values);
	RUN(test_gen_config);
	RUN(test_hybrid);
	return harness_done();
}
