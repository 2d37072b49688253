/* tensors.c - enumerate the tensors of a dense decoder (see tensors.h).
 * Keep in step with bind_layer() and atlas_model_load() in decoder.c:
 * tests/unit/test-tensors.c loads every golden model and checks that
 * this list and the loader agree. */
#include "tensors.h"

#include <stdio.h>

/* Emit one tensor; d1 < 0 makes it 1-D. */
static int emit(atlas_expected_tensor_fn fn, void *arg, const char *name, int64_t d0,
		int64_t d1, bool required, const char *weight_of)
{
	struct atlas_expected_tensor t = {
		.name = name, .ndim = d1 < 0 ? 1 : 2, .shape = {d0, d1 < 0 ? 0 : d1},
		.required = required, .weight_of = weight_of,
	};
	return fn(arg, &t);
}

static int layer(const struct atlas_config *c, const struct atlas_family *fam, int64_t l,
		 atlas_expected_tensor_fn fn, void *arg)
{
	int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
	int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
	bool qkv_bias = fam->qkv_bias || c->attention_bias, o_bias = c->attention_bias;
	char n[160], w[160];
	int rc = 0;
	/* X: a tensor; XB: a bias of the matrix `mat` */
#define X(suffix, d0, d1, req) \
	do { \
		snprintf(n, sizeof(n), "model.layers.%lld.%s", (long long)l, suffix); \
		if (!rc) rc = emit(fn, arg, n, d0, d1, req, NULL); \
	} while (0)
#define XB(mat, d0, req) \
	do { \
		snprintf(n, sizeof(n), "model.layers.%lld.%s.bias", (long long)l, mat); \
		snprintf(w, sizeof(w), "model.layers.%lld.%s.weight", (long long)l, mat); \
		if (!rc) rc = emit(fn, arg, n, d0, -1, req, w); \
	} while (0)
	X("input_layernorm.weight", D, -1, true);
	X("post_attention_layernorm.weight", D, -1, true);
	X("self_attn.q_proj.weight", qd, D, true);
	X("self_attn.k_proj.weight", kvd, D, true);
	X("self_attn.v_proj.weight", kvd, D, true);
	X("self_attn.o_proj.weight", D, qd, true);
	XB("self_attn.q_proj", qd, qkv_bias);
	XB("self_attn.k_proj", kvd, qkv_bias);
	XB("self_attn.v_proj", kvd, qkv_bias);
	XB("self_attn.o_proj", D, o_bias);
	if (fam->qk_norm) {
		X("self_attn.q_norm.weight", hd, -1, true);
		X("self_attn.k_norm.weight", hd, -1, true);
	}
	X("mlp.gate_proj.weight", F, D, true);
	X("mlp.up_proj.weight", F, D, true);
	X("mlp.down_proj.weight", D, F, true);
	XB("mlp.gate_proj", F, c->mlp_bias);
	XB("mlp.up_proj", F, c->mlp_bias);
	XB("mlp.down_proj", D, c->mlp_bias);
#undef X
#undef XB
	return rc;
}

int atlas_model_expected_tensors(const struct atlas_config *c, const struct atlas_family *fam,
				 atlas_expected_tensor_fn fn, void *arg)
{
	int rc = emit(fn, arg, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, true,
		      NULL);
	if (!rc)
		rc = emit(fn, arg, "model.norm.weight", c->hidden_size, -1, true, NULL);
	if (!rc && !c->tie_embeddings)
		rc = emit(fn, arg, "lm_head.weight", c->vocab_size, c->hidden_size, true, NULL);
	for (int64_t l = 0; !rc && l < c->num_layers; l++)
		rc = layer(c, fam, l, fn, arg);
	return rc;
}
