/* test-model.c - the generic decoder's sequencing, through the mock
 * backend (which records every op), and its refusals: unknown
 * architecture, shape mismatch, context overflow, bad token ids. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/model/model.h"
#include "harness.h"

static char path[512];

static const char *golden(const char *name)
{
	snprintf(path, sizeof(path), "%s/tests/fixtures/golden/%s", harness_srcdir(), name);
	return path;
}

/* Count recorded calls starting with `prefix`. */
static int count(struct atlas_backend *be, const char *prefix)
{
	int n = 0;
	for (int64_t i = 0; i < atlas_backend_mock_count(be); i++)
		n += !strncmp(atlas_backend_mock_call(be, i), prefix, strlen(prefix));
	return n;
}

static void test_qwen3_op_sequence(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	struct atlas_model *m = atlas_model_load(golden("qwen3"), be, NULL);
	CHECK(m != NULL);
	if (!m)
		return;
	CHECK_STR(atlas_model_family(m), "qwen3");
	struct atlas_seq *s = atlas_seq_new(m);
	float *logits = malloc(1088 * 3 * sizeof(float));
	int32_t ids[3] = {5, 6, 7};
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 3, logits, false), 0);
	/* hidden 64, 4 heads x 32, 2 kv heads, intermediate 160, 2 layers */
	static const char *want[] = {
		"embed T=3 D=64",
		"rmsnorm R=3 D=64",
		"matmul T=3 N=128 K=64",
		"matmul T=3 N=64 K=64",
		"matmul T=3 N=64 K=64",
		"rmsnorm R=12 D=32",      /* q_norm over each head */
		"rmsnorm R=6 D=32",       /* k_norm */
		"rope T=3 H=4 hd=32",
		"rope T=3 H=2 hd=32",
		"kv_store T=3 row=64",    /* K and V rows into the paged cache */
		"attention T=3 pos0=0 H=4 Hkv=2 hd=32 seqs=1",
		"matmul T=3 N=64 K=128",
		"add_rmsnorm R=3 D=64",
		"matmul T=3 N=160 K=64",
		"matmul T=3 N=160 K=64",
		"swiglu T=3 F=160",
		"matmul T=3 N=64 K=160",
		"add_rmsnorm R=3 D=64",   /* layer 1 starts with the fused residual */
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		CHECK_STR(atlas_backend_mock_call(be, (int64_t)i), want[i]);
	int64_t n = atlas_backend_mock_count(be);
	/* embed, 2 layers of 16 ops, final norm + last-row gather + FP32 logits */
	CHECK_EQ_INT(n, 1 + 2 * 16 + 3);
	CHECK_STR(atlas_backend_mock_call(be, n - 2), "copy bytes=256");        /* last row only */
	CHECK_STR(atlas_backend_mock_call(be, n - 1), "logits T=1 N=1088 K=64");
	CHECK_EQ_INT(atlas_seq_len(s), 3);

	/* decode continues at position 3 */
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 1, logits, false), 0);
	CHECK_EQ_INT(count(be, "attention T=1 pos0=3 "), 2);
	/* all-logits mode projects every row */
	atlas_seq_reset(s);
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 3, logits, true), 0);
	CHECK_EQ_INT(count(be, "logits T=3 N=1088 K=64"), 1);
	free(logits);
	atlas_seq_free(s);
	atlas_model_free(m);
	be->destroy(be);
}

static void test_family_flags(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	float logits[1024];
	int32_t id = 3;
	/* qwen2: biases on q, k, v; no q/k norm */
	struct atlas_model *m = atlas_model_load(golden("qwen2"), be, NULL);
	CHECK(m != NULL);
	if (m) {
		struct atlas_seq *s = atlas_seq_new(m);
		atlas_backend_mock_reset(be);
		CHECK_EQ_INT(atlas_model_forward(m, s, &id, 1, logits, false), 0);
		CHECK_EQ_INT(count(be, "matmul T=1 N=64 K=64 bias"), 2 * 1);   /* q per layer */
		CHECK_EQ_INT(count(be, "matmul T=1 N=32 K=64 bias"), 2 * 2);   /* k, v */
		CHECK_EQ_INT(count(be, "rmsnorm R=4 "), 0);
		atlas_seq_free(s);
		atlas_model_free(m);
	}
	/* llama3: no biases anywhere */
	m = atlas_model_load(golden("llama3"), be, NULL);
	CHECK(m != NULL);
	if (m) {
		struct atlas_seq *s = atlas_seq_new(m);
		atlas_backend_mock_reset(be);
		CHECK_EQ_INT(atlas_model_forward(m, s, &id, 1, logits, false), 0);
		for (int64_t i = 0; i < atlas_backend_mock_count(be); i++)
			CHECK(!strstr(atlas_backend_mock_call(be, i), "bias"));
		atlas_seq_free(s);
		atlas_model_free(m);
	}
	be->destroy(be);
}

static void test_refusals(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_context = 8;
	struct atlas_model *m = atlas_model_load(golden("llama3"), be, &p);
	CHECK(m != NULL);
	if (m) {
		struct atlas_seq *s = atlas_seq_new(m);
		float logits[1024];
		int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
		CHECK_EQ_INT(atlas_model_forward(m, s, ids, 9, logits, false), ATLAS_ERANGE);
		CHECK_CONTAINS(atlas_errmsg(), "context");
		CHECK_EQ_INT(atlas_seq_len(s), 0);
		int32_t bad[2] = {1, 1024};
		CHECK_EQ_INT(atlas_model_forward(m, s, bad, 2, logits, false), ATLAS_ERANGE);
		CHECK_CONTAINS(atlas_errmsg(), "token id 1024");
		CHECK_EQ_INT(atlas_seq_len(s), 0);
		CHECK_EQ_INT(atlas_model_forward(m, s, ids, 8, logits, false), 0);
		CHECK_EQ_INT(atlas_model_forward(m, s, ids, 1, logits, false), ATLAS_ERANGE);
		atlas_seq_free(s);
		atlas_model_free(m);
	}

	/* unknown architecture: named, with the supported list */
	const char *tmp = harness_tmpdir();
	char cfg[1024];
	snprintf(cfg, sizeof(cfg), "%s/neox", tmp);
	mkdir(cfg, 0755);
	const char *neox = "{\"model_type\": \"gpt_neox\", \"architectures\": [\"GPTNeoXForCausalLM\"],"
			   "\"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 16,"
			   "\"num_hidden_layers\": 1, \"num_attention_heads\": 2}";
	free(harness_write(cfg, "config.json", neox, strlen(neox)));
	m = atlas_model_load(cfg, be, NULL);
	CHECK(m == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "GPTNeoXForCausalLM");
	CHECK_CONTAINS(atlas_errmsg(), "llama, mistral, qwen2, qwen3");

	/* config says a different MLP width than the tensors have */
	char dir[1100], cmd[2400];
	snprintf(dir, sizeof(dir), "%s/wide", tmp);
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s' && sed -i 's/\"intermediate_size\": 160/\"intermediate_size\": 170/' '%s/config.json'",
		 golden("llama3"), dir, dir);
	CHECK_EQ_INT(system(cmd), 0);
	m = atlas_model_load(dir, be, NULL);
	CHECK(m == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "model.layers.0.mlp.gate_proj.weight");
	CHECK_CONTAINS(atlas_errmsg(), "[160, 64]");
	CHECK_CONTAINS(atlas_errmsg(), "[170, 64]");
	be->destroy(be);
}

/* A batch of sequences gives each one exactly the logits it gets alone,
 * whatever else is in the step (CPU backend, golden llama3). */
static void test_batch_matches_alone(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_seqs = 4;
	p.block_size = 4; /* several blocks per sequence */
	struct atlas_model *m = atlas_model_load(golden("llama3"), be, &p);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	const int64_t V = 1024;
	int32_t prompts[3][9] = {{5, 9, 13, 200, 7, 8, 1, 2, 3}, {44, 45}, {900, 1, 1, 1, 77}};
	int64_t lens[3] = {9, 2, 5};
	float *alone = malloc(3 * V * sizeof(float)), *batch = malloc(3 * V * sizeof(float));
	/* alone: prompt, then one more token */
	for (int i = 0; i < 3; i++) {
		struct atlas_seq *s = atlas_seq_new(m);
		CHECK_EQ_INT(atlas_model_forward(m, s, prompts[i], lens[i], alone + i * V, false), 0);
		int32_t next = 17 + i;
		CHECK_EQ_INT(atlas_model_forward(m, s, &next, 1, alone + i * V, false), 0);
		atlas_seq_free(s);
	}
	/* together: all prompts in one step, then the three decode tokens in one step */
	struct atlas_seq *seqs[3];
	struct atlas_batch_item it[3];
	for (int i = 0; i < 3; i++) {
		seqs[i] = atlas_seq_new(m);
		it[i] = (struct atlas_batch_item){.seq = seqs[i], .ids = prompts[i], .n = lens[i]};
	}
	CHECK_EQ_INT(atlas_model_forward_batch(m, it, 3), 0);
	int32_t nexts[3] = {17, 18, 19};
	for (int i = 0; i < 3; i++)
		it[i] = (struct atlas_batch_item){.seq = seqs[i], .ids = &nexts[i], .n = 1, .logits = batch + i * V};
	CHECK_EQ_INT(atlas_model_forward_batch(m, it, 3), 0);
	double maxd = 0;
	for (int64_t i = 0; i < 3 * V; i++)
		maxd = fmax(maxd, fabs((double)alone[i] - batch[i]));
	CHECK(maxd < 1e-5);
	CHECK_EQ_INT(atlas_seq_len(seqs[0]), 10);
	CHECK_EQ_INT(atlas_seq_blocks(seqs[0]), 3);
	/* freeing a sequence gives its blocks back */
	int64_t before = atlas_model_kv_blocks_free(m);
	atlas_seq_free(seqs[0]);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), before + 3);
	atlas_seq_free(seqs[1]);
	atlas_seq_free(seqs[2]);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), atlas_model_kv_blocks_total(m));
	free(alone);
	free(batch);
	atlas_model_free(m);
	be->destroy(be);
}

/* The fused one-token layer stack (backend.h fused_*), offered by the
 * backend: the model prepares it once at load with a whole description,
 * runs each one-token step through it (embed, fused_decode, then the
 * final add_rmsnorm and the logits), never a longer step or a
 * batch-invariant one, and releases it with the model; with FP32
 * activations it is not asked at all. */
/* The recorded uploads, downloads and syncs since the last reset, as one
 * string ("U S U D ..."). */
static void copies(struct atlas_backend *be, char *out, size_t cap)
{
	size_t n = 0;
	out[0] = 0;
	for (int64_t i = 0; i < atlas_backend_mock_count(be) && n + 3 < cap; i++) {
		const char *l = atlas_backend_mock_call(be, i);
		const char *c = !strncmp(l, "upload", 6)     ? "U"
				: !strncmp(l, "download", 8) ? "D"
				: !strcmp(l, "sync")	     ? "S"
							     : NULL;
		if (c)
			n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " " : "", c);
	}
}

/* With page-locked staging (a backend that offers host_alloc), a copy
 * reads the host buffer when it runs, not when it is queued: a step that
 * follows one without a download (a chunk of a long prompt) must wait
 * for the queue before it rewrites the step metadata; a step after a
 * download need not. */
static void test_staging_reuse(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	atlas_backend_mock_offer_host(be);
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_tokens = 2; /* a 5-token prompt: three steps */
	struct atlas_model *m = atlas_model_load(golden("qwen3"), be, &p);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	CHECK_EQ_INT(count(be, "host_alloc "), 2); /* the metadata, the sampled ids */
	struct atlas_seq *s = atlas_seq_new(m);
	float *logits = malloc(1088 * sizeof(float));
	int32_t ids[5] = {5, 6, 7, 8, 9}, tok = -1;
	char got[128];
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 5, logits, false), 0);
	copies(be, got, sizeof(got));
	/* chunks of 2, 2, 1: the second and third wait first; the third
	 * brings the logits back */
	CHECK_STR(got, "U S U S U D");
	atlas_backend_mock_reset(be);
	const struct atlas_sample_args greedy = {0};
	CHECK_EQ_INT(atlas_model_forward_sample(m, s, ids, 1, &greedy, &tok), 0);
	copies(be, got, sizeof(got));
	CHECK_STR(got, "U D"); /* the last step downloaded: no wait */
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 1, NULL, false), 0);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 1, NULL, false), 0);
	copies(be, got, sizeof(got));
	CHECK_STR(got, "U S U"); /* no logits, no download: the next one waits */
	free(logits);
	atlas_seq_free(s);
	atlas_backend_mock_reset(be);
	atlas_model_free(m);
	CHECK_EQ_INT(count(be, "host_free"), 2);
	be->destroy(be);
}

/* Logits of the prompt 5, 6, 7, 8 (the last token's) from m, in *out
 * (V floats, malloc'd). */
static int last_logits(struct atlas_model *m, float **out)
{
	const int64_t V = atlas_model_config(m)->vocab_size;
	struct atlas_seq *s = atlas_seq_new(m);
	int32_t ids[4] = {5, 6, 7, 8};
	*out = malloc((size_t)V * sizeof(float));
	int rc = atlas_model_forward(m, s, ids, 4, *out, false);
	atlas_seq_free(s);
	return rc;
}

/* The last logits of model b (a blob path: F8B or W4B) against those of
 * a (dequantized at load): within 1e-2 relative L2, not equal (W was
 * rounded to BF16: the blob path really ran), the same argmax. */
static void blob_logits(struct atlas_model *a, struct atlas_model *b, const char *what)
{
	float *la = NULL, *lb = NULL;
	CHECK_EQ_INT(last_logits(a, &la), 0);
	CHECK_EQ_INT(last_logits(b, &lb), 0);
	const int64_t V = atlas_model_config(a)->vocab_size;
	double d2 = 0, r2 = 0;
	int64_t ia = 0, ib = 0;
	for (int64_t i = 0; la && lb && i < V; i++) {
		d2 += (double)(la[i] - lb[i]) * (la[i] - lb[i]);
		r2 += (double)la[i] * la[i];
		ia = la[i] > la[ia] ? i : ia;
		ib = lb[i] > lb[ib] ? i : ib;
	}
	printf("# %s: blob logits against dequantized: relative L2 %.3g, argmax %lld / %lld\n",
	       what, r2 > 0 ? sqrt(d2 / r2) : -1.0, (long long)ia, (long long)ib);
	CHECK(r2 > 0 && sqrt(d2 / r2) < 1e-2);
	CHECK(d2 > 0);
	CHECK_EQ_INT(ia, ib);
	free(la);
	free(lb);
}

/* Fixture fx on a plain CPU backend, on one whose matmuls take the
 * blob format that *flag enables, and on that one with env=0 (the
 * dequantized load): the blob model reads fewer weight bytes, the env=0
 * one as many as the plain one, and the blob model's logits are the
 * dequantized model's up to the BF16 rounding of W the format defines. */
static void blob_native(const char *fx, bool *(*flag)(struct atlas_backend *), const char *env,
			const char *fmt)
{
	struct atlas_backend *plain = atlas_backend_cpu_new(), *nb = atlas_backend_cpu_new();
	*flag(nb) = true;
	struct atlas_model *a = atlas_model_load(golden(fx), plain, NULL);
	struct atlas_model *b = atlas_model_load(golden(fx), nb, NULL);
	setenv(env, "0", 1);
	struct atlas_model *c = atlas_model_load(golden(fx), nb, NULL);
	unsetenv(env);
	CHECK(a && b && c);
	if (a && b && c) {
		const int64_t wa = atlas_model_weight_bytes(a), wb = atlas_model_weight_bytes(b);
		printf("# %s: weight bytes %lld dequantized, %lld as %s\n", fx, (long long)wa,
		       (long long)wb, fmt);
		CHECK(wa - wb > 100000);
		CHECK_EQ_INT(atlas_model_weight_bytes(c), wa);
		blob_logits(a, b, fx);
	}
	atlas_model_free(a);
	atlas_model_free(b);
	atlas_model_free(c);
	plain->destroy(plain);
	nb->destroy(nb);
}

static bool *f8b_flag(struct atlas_backend *be)
{
	return &be->f8b_weights;
}

static bool *fp4b_flag(struct atlas_backend *be)
{
	return &be->fp4b_weights;
}

/* An FP8 checkpoint on a backend that takes F8B blobs (the CUDA path;
 * here the CPU's reference matmul for them) keeps its linear layers at
 * one byte a weight (55,296 linear weights: FP32 dequantized, 4 bytes,
 * against 1 byte plus a head and scales per matrix), and gives the
 * logits of the dequantized model up to the BF16 rounding of W that F8B
 * defines; ATLAS_FP8_NATIVE=0 asks for the dequantized load instead. */
static void test_fp8_native(void)
{
	blob_native("quant-fp8", f8b_flag, "ATLAS_FP8_NATIVE", "F8B");
	blob_native("quant-ct-fp8", f8b_flag, "ATLAS_FP8_NATIVE", "F8B");
}

/* A 4-bit GPTQ checkpoint (groups of 32, no act order) on a backend that
 * takes W4B blobs keeps the matrices whose rows are a multiple of 32
 * columns at half a byte a weight (q, k, v, o, gate, up: the 80-wide
 * down projection is dequantized), with the logits of the dequantized
 * model up to the BF16 rounding of W; ATLAS_W4_NATIVE=0 and a layout
 * the kernels do not take (groups of 16) load dequantized. */
static void test_w4_native(void)
{
	struct atlas_backend *plain = atlas_backend_cpu_new(), *w4 = atlas_backend_cpu_new();
	w4->w4b_weights = true;
	struct atlas_model *a = atlas_model_load(golden("quant-gptq-g32"), plain, NULL);
	struct atlas_model *b = atlas_model_load(golden("quant-gptq-g32"), w4, NULL);
	setenv("ATLAS_W4_NATIVE", "0", 1);
	struct atlas_model *c = atlas_model_load(golden("quant-gptq-g32"), w4, NULL);
	unsetenv("ATLAS_W4_NATIVE");
	struct atlas_model *d = atlas_model_load(golden("quant-ct-w4a16"), plain, NULL);
	struct atlas_model *e = atlas_model_load(golden("quant-ct-w4a16"), w4, NULL);
	CHECK(a && b && c && d && e);
	if (a && b && c && d && e) {
		/* 45,056 weights in W4B: 4 bytes (F32) to half a byte, plus a
		 * head, zero points and scales per matrix */
		const int64_t wa = atlas_model_weight_bytes(a), wb = atlas_model_weight_bytes(b);
		printf("# quant-gptq-g32: weight bytes %lld dequantized, %lld with W4B\n",
		       (long long)wa, (long long)wb);
		CHECK(wa - wb > 120000);
		CHECK_EQ_INT(atlas_model_weight_bytes(c), wa);
		CHECK_EQ_INT(atlas_model_weight_bytes(e), atlas_model_weight_bytes(d));
		blob_logits(a, b, "quant-gptq-g32");
	}
	atlas_model_free(a);
	atlas_model_free(b);
	atlas_model_free(c);
	atlas_model_free(d);
	atlas_model_free(e);
	plain->destroy(plain);
	w4->destroy(w4);
}

/* An NVFP4 checkpoint (ModelOpt and compressed-tensors) on a backend
 * that takes FP4B blobs keeps the matrices whose rows are a multiple of
 * 32 columns as stored (E2M1 pairs and F8 scales: 0.5625 bytes a weight),
 * with the logits of the dequantized model up to the BF16 rounding of W
 * that FP4B defines; ATLAS_FP4_NATIVE=0 loads dequantized. */
static void test_fp4_native(void)
{
	blob_native("quant-nvfp4", fp4b_flag, "ATLAS_FP4_NATIVE", "FP4B");
	blob_native("quant-ct-nvfp4", fp4b_flag, "ATLAS_FP4_NATIVE", "FP4B");
}

static void test_fused_selection(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	be->act_dtype = ATLAS_DTYPE_BF16;
	atlas_backend_mock_offer_fused(be);
	struct atlas_model *m = atlas_model_load(golden("qwen3"), be, NULL);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	/* hidden 64, 4 heads x 32, 2 kv heads, intermediate 160, 2 layers */
	CHECK_EQ_INT(count(be, "fused_prepare "), 1);
	CHECK_EQ_INT(count(be, "fused_prepare layers=2 D=64 F=160 H=4 Hkv=2 hd=32 window=0 "
			       "qk_norm=1 bias=0 moe=0"),
		     1);
	for (int64_t i = 0; i < atlas_backend_mock_count(be); i++)
		CHECK(!strstr(atlas_backend_mock_call(be, i), "BAD"));
	struct atlas_seq *s = atlas_seq_new(m);
	float *logits = malloc(1088 * sizeof(float));
	int32_t ids[3] = {5, 6, 7};
	/* a prompt of 3 tokens: op by op */
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 3, logits, false), 0);
	CHECK_EQ_INT(count(be, "fused_decode"), 0);
	CHECK_EQ_INT(count(be, "attention T=3 "), 2);
	/* one token: the fused stack */
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 1, logits, false), 0);
	static const char *want[] = {
	    "embed T=1 D=64",   "fused_decode", "add_rmsnorm R=1 D=64",
	    "copy bytes=128", /* the last row, bf16 */
	    "logits T=1 N=1088 K=64",
	};
	CHECK_EQ_INT(atlas_backend_mock_count(be), (int64_t)(sizeof(want) / sizeof(want[0])));
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		CHECK_STR(atlas_backend_mock_call(be, (int64_t)i), want[i]);
	CHECK_EQ_INT(atlas_seq_len(s), 4);
	/* batch-invariant mode: op by op again */
	be->batch_invariant = true;
	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 1, logits, false), 0);
	CHECK_EQ_INT(count(be, "fused_decode"), 0);
	CHECK_EQ_INT(count(be, "attention T=1 pos0=4 "), 2);
	be->batch_invariant = false;
	free(logits);
	atlas_seq_free(s);
	atlas_backend_mock_reset(be);
	atlas_model_free(m);
	CHECK_EQ_INT(count(be, "fused_release"), 1);
	be->destroy(be);

	/* an MoE model (layers 0 and 2 MoE, layer 1 dense): its MoE layers go
	 * to the backend as their moe op descriptions, the dense one as
	 * before; a one-token step is the fused op alone */
	be = atlas_backend_mock_new();
	be->act_dtype = ATLAS_DTYPE_BF16;
	atlas_backend_mock_offer_fused(be);
	m = atlas_model_load(golden("qwen3-moe"), be, NULL);
	CHECK(m != NULL);
	if (m) {
		CHECK_EQ_INT(count(be, "fused_prepare layers=3 D=64 F=96 H=4 Hkv=2 hd=32 window=0 "
				       "qk_norm=1 bias=0 moe=2"),
			     1);
		for (int64_t i = 0; i < atlas_backend_mock_count(be); i++)
			CHECK(!strstr(atlas_backend_mock_call(be, i), "BAD"));
		s = atlas_seq_new(m);
		logits = malloc(1088 * sizeof(float));
		CHECK_EQ_INT(atlas_model_forward(m, s, ids, 3, logits, false), 0);
		atlas_backend_mock_reset(be);
		CHECK_EQ_INT(atlas_model_forward(m, s, ids, 1, logits, false), 0);
		CHECK_EQ_INT(count(be, "fused_decode"), 1);
		CHECK_EQ_INT(count(be, "moe "), 0);
		free(logits);
		atlas_seq_free(s);
		atlas_model_free(m);
	}
	be->destroy(be);

	/* FP32 activations (the CPU backend's): never prepared */
	be = atlas_backend_mock_new();
	atlas_backend_mock_offer_fused(be);
	m = atlas_model_load(golden("qwen3"), be, NULL);
	CHECK(m != NULL);
	CHECK_EQ_INT(count(be, "fused_prepare"), 0);
	atlas_model_free(m);
	be->destroy(be);
}

/* A pool that runs dry refuses the step and changes nothing. */
static void test_pool_exhaustion(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_seqs = 2;
	p.block_size = 4;
	p.kv_blocks = 3;
	struct atlas_model *m = atlas_model_load(golden("qwen3"), be, &p);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	float logits[1088];
	int32_t ids[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
	struct atlas_seq *a = atlas_seq_new(m), *b = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, a, ids, 9, logits, false), 0); /* 3 blocks */
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 0);
	CHECK_EQ_INT(atlas_model_forward(m, b, ids, 1, logits, false), ATLAS_ENOMEM);
	CHECK_CONTAINS(atlas_errmsg(), "out of KV cache blocks");
	CHECK_EQ_INT(atlas_seq_len(b), 0);
	CHECK_EQ_INT(atlas_seq_blocks_needed(a, 3), 0);
	CHECK_EQ_INT(atlas_seq_blocks_needed(a, 4), 1);
	CHECK_EQ_INT(atlas_model_forward(m, a, ids, 3, logits, false), 0); /* fits block 3 */
	CHECK_EQ_INT(atlas_model_forward(m, a, ids, 1, logits, false), ATLAS_ENOMEM);
	CHECK_EQ_INT(atlas_seq_len(a), 12);
	atlas_seq_reset(a);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 3);
	CHECK_EQ_INT(atlas_model_forward(m, b, ids, 5, logits, false), 0);
	atlas_seq_free(a);
	atlas_seq_free(b);
	atlas_model_free(m);
	be->destroy(be);
}

static void test_weight_bytes(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	struct atlas_model *m = atlas_model_load(golden("qwen3-bf16"), be, NULL);
	CHECK(m != NULL);
	if (m) {
		/* 4 layers x (q 128x128 + k,v 64x128 + o 128x128 + 3 x 384x128
		 * + norms 2x128 + 2x32) + final norm 128 + lm_head 1024x128, BF16 */
		int64_t per_layer = 128 * 128 * 2 + 64 * 128 * 2 + 3 * 384 * 128 + 2 * 128 + 2 * 32;
		CHECK_EQ_INT(atlas_model_weight_bytes(m), 2 * (4 * per_layer + 128 + 1024 * 128));
		atlas_model_free(m);
	}
	be->destroy(be);
}

int main(void)
{
	RUN(test_qwen3_op_sequence);
	RUN(test_family_flags);
	RUN(test_refusals);
	RUN(test_batch_matches_alone);
	RUN(test_fused_selection);
	RUN(test_staging_reuse);
	RUN(test_pool_exhaustion);
	RUN(test_weight_bytes);
	RUN(test_fp8_native);
	RUN(test_w4_native);
	RUN(test_fp4_native);
	return harness_done();
}
