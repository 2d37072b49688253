/* fuzz-load.c - libFuzzer entry point for loading a checkpoint's tensors
 * (lib/model: decoder.c, hybrid.c, moe.c, tensors.c), the MTP head's
 * included.
 *
 * Each input is written as the model.safetensors of a directory whose
 * config.json is fixed: a tiny Qwen3-Next (hidden 16, a Gated DeltaNet
 * layer and a gated-attention layer, two experts and a shared one) with
 * an MTP head. atlas_model_validate, atlas_model_load and
 * atlas_model_load_mtp on the CPU backend must each take it or refuse it
 * with a message, never crash, read out of bounds or leak; a model that
 * loads runs a step of three tokens, and its head one of two entries
 * from the trunk's hidden rows. Seed: the valid checkpoint of that
 * config (tests/fuzz/corpus/load, scripts/gen-fuzz-load-seed.py, which
 * prints the config below). See README. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/backend/backend.h"
#include "../../lib/model/model.h"
#include "../../lib/model/tensors.h"

static const char config[] =
    "{\"architectures\":[\"Qwen3NextForCausalLM\"],\"model_type\":\"qwen3_next\",\"vocab_size\":32,\"hidden_size\":16,\"intermediate_size\":16,\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":8,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,\"partial_rotary_factor\":0.5,\"hidden_act\":\"silu\",\"layer_types\":[\"linear_attention\",\"full_attention\"],\"linear_num_key_heads\":1,\"linear_num_value_heads\":2,\"linear_key_head_dim\":8,\"linear_value_head_dim\":8,\"linear_conv_kernel_dim\":4,\"num_experts\":2,\"num_experts_per_tok\":1,\"moe_intermediate_size\":8,\"shared_expert_intermediate_size\":8,\"norm_topk_prob\":true,\"decoder_sparse_step\":1,\"mlp_only_layers\":[],\"num_nextn_predict_layers\":1,\"tie_word_embeddings\":false,\"eos_token_id\":1,\"dtype\":\"bfloat16\"}";

static char dir[64], st_path[96], cfg_path[96];
static struct atlas_backend *be;

static void cleanup(void)
{
	unlink(st_path);
	unlink(cfg_path);
	rmdir(dir);
	if (be)
		be->destroy(be);
}

static int put(const char *path, const void *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	if (size && fwrite(data, 1, size, f) != size) {
		fclose(f);
		return -1;
	}
	return fclose(f);
}

static void on_finding(void *arg, enum atlas_finding level, const char *msg)
{
	(void)arg;
	(void)level;
	if (!msg || !memchr(msg, '\0', 4096))
		abort(); /* a finding is a terminated line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/fuzz-load-%d-XXXXXX", (int)getpid());
		if (!mkdtemp(dir))
			abort();
		snprintf(st_path, sizeof(st_path), "%s/model.safetensors", dir);
		snprintf(cfg_path, sizeof(cfg_path), "%s/config.json", dir);
		if (put(cfg_path, config, sizeof(config) - 1) || !(be = atlas_backend_cpu_new()))
			abort();
		atexit(cleanup);
	}
	if (put(st_path, data, size))
		abort();
	atlas_model_validate(dir, on_finding, NULL);
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_context = 16;
	p.max_tokens = 8;
	struct atlas_model *m = atlas_model_load(dir, be, &p);
	if (!m)
		return 0;
	const int32_t ids[3] = {1, 5, 30};
	struct atlas_seq *s = atlas_seq_new(m);
	struct atlas_batch_item it = {.seq = s, .ids = ids, .n = 3};
	int rc = s ? atlas_model_forward_batch(m, &it, 1) : -1;
	struct atlas_model *h = atlas_model_load_mtp(dir, m, &p);
	if (h && !rc) {
		float lg[2 * 32];
		struct atlas_seq *q = atlas_seq_new(h);
		struct atlas_batch_item hi = {.seq = q, .ids = ids + 1, .n = 2, .logits = lg,
					      .n_logits = 2, .hid = atlas_model_hidden_rows(m, NULL)};
		if (q && atlas_model_forward_batch(h, &hi, 1))
			abort(); /* a head that loaded runs */
		atlas_seq_free(q);
	}
	atlas_model_free(h);
	atlas_seq_free(s);
	atlas_model_free(m);
	return 0;
}
