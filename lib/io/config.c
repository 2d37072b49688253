/* config.c - parse config.json and generation_config.json (see config.h).
 *
 * Only the generic fields are read here, with transformers' defaults;
 * family knowledge (which families always carry a QKV bias, ...) belongs
 * in lib/model. The transformers 4.x spellings (rope_theta + rope_scaling,
 * torch_dtype) and 5.x ones (rope_parameters, dtype) give identical
 * structs, so nothing above this file needs to know which wrote a file. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "../core/error.h"
#include "file.h"
#include "json_util.h"

/* A required positive integer. */
static int req_int(struct json_object *o, const char *key, const char *where, int64_t *out)
{
	int rc = atlas_json_int(o, key, where, out);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return atlas_error(ATLAS_EFORMAT, "%s: missing required field '%s'", where, key);
	if (*out <= 0)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: field '%s' must be positive (got %" PRId64 ")", where, key,
				   *out);
	return 0;
}

/* An optional positive integer; *out keeps its default when absent. */
static int opt_int(struct json_object *o, const char *key, const char *where, int64_t *out)
{
	int rc = atlas_json_int(o, key, where, out);
	if (rc < 0)
		return rc;
	if (rc > 0 && *out <= 0)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: field '%s' must be positive (got %" PRId64 ")", where, key,
				   *out);
	return 0;
}

/* An optional number > 0 (or >= 0 when zero_ok). */
static int opt_num(struct json_object *o, const char *key, const char *where, double *out,
		   bool zero_ok)
{
	int rc = atlas_json_double(o, key, where, out);
	if (rc < 0)
		return rc;
	if (rc > 0 && (!isfinite(*out) || *out < 0 || (!zero_ok && *out == 0)))
		return atlas_error(ATLAS_EFORMAT, "%s: field '%s' must be %s (got %g)", where, key,
				   zero_ok ? "non-negative" : "positive", *out);
	return 0;
}

/* Copy a string field into a fixed buffer, refusing silent truncation. */
static int copy_str(const char *where, const char *key, const char *s, char *dst, size_t n)
{
	if (strlen(s) >= n)
		return atlas_error(ATLAS_EFORMAT, "%s: field '%s' is too long ('%s')", where, key,
				   s);
	strcpy(dst, s);
	return 0;
}

/* A token id: an integer in [0, INT32_MAX]. */
static int check_id(const char *where, const char *key, int64_t v, int32_t *out)
{
	if (v < 0 || v > INT32_MAX)
		return atlas_error(ATLAS_EFORMAT, "%s: field '%s' has an invalid token id %" PRId64,
				   where, key, v);
	*out = (int32_t)v;
	return 0;
}

/* "bos_token_id": int or null; -1 when absent. */
static int parse_bos(struct json_object *o, const char *where, int32_t *bos)
{
	int64_t v;
	int rc = atlas_json_int(o, "bos_token_id", where, &v);
	*bos = -1;
	if (rc <= 0)
		return rc;
	return check_id(where, "bos_token_id", v, bos);
}

/* "eos_token_id": an int, a list of ints, or absent/null (n = 0). */
static int parse_eos(struct json_object *o, const char *where, int32_t *ids, int *n)
{
	const char *key = "eos_token_id";
	struct json_object *v;
	size_t len;

	*n = 0;
	if (!json_object_object_get_ex(o, key, &v) || !v)
		return 0;
	if (json_object_is_type(v, json_type_int)) {
		*n = 1;
		return check_id(where, key, json_object_get_int64(v), &ids[0]);
	}
	if (!json_object_is_type(v, json_type_array))
		return atlas_error(ATLAS_EFORMAT,
				   "%s: field '%s' must be an integer or a list of integers", where,
				   key);
	len = json_object_array_length(v);
	if (len > ATLAS_MAX_EOS)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: field '%s' has %zu ids, at most %d are supported", where,
				   key, len, ATLAS_MAX_EOS);
	for (size_t i = 0; i < len; i++) {
		struct json_object *e = json_object_array_get_idx(v, i);
		int rc;
		if (!e || !json_object_is_type(e, json_type_int))
			return atlas_error(
			    ATLAS_EFORMAT,
			    "%s: field '%s' must be an integer or a list of integers", where, key);
		rc = check_id(where, key, json_object_get_int64(e), &ids[i]);
		if (rc)
			return rc;
	}
	*n = (int)len;
	return 0;
}

/* rope_scaling (4.x) or rope_parameters (5.x): the same keys either way,
 * except that 5.x also carries rope_theta inside. */
static int parse_rope(struct json_object *r, const char *where, const char *field,
		      struct atlas_config *c)
{
	char w[600];
	const char *type = "default";
	int rc;

	snprintf(w, sizeof(w), "%s: %s", where, field);
	rc = atlas_json_string(r, "rope_type", w, &type);
	if (rc == 0)
		rc = atlas_json_string(r, "type", w, &type);
	if (rc < 0)
		return rc;
	if (rc == 0 && json_object_object_get_ex(r, "full_attention", NULL))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: rope parameters per attention type are not supported", w);
	if (!strcmp(type, "default"))
		c->rope_type = ATLAS_ROPE_DEFAULT;
	else if (!strcmp(type, "linear"))
		c->rope_type = ATLAS_ROPE_LINEAR;
	else if (!strcmp(type, "llama3"))
		c->rope_type = ATLAS_ROPE_LLAMA3;
	else
		return atlas_error(
		    ATLAS_EUNSUPPORTED,
		    "%s: rope type '%s' is not supported (supported: default, linear, llama3)", w,
		    type);
	if ((rc = opt_num(r, "rope_theta", w, &c->rope_theta, false)))
		return rc;
	if (c->rope_type == ATLAS_ROPE_DEFAULT)
		return 0;

	/* linear and llama3 need a factor; llama3 needs its band too. */
	rc = atlas_json_double(r, "factor", w, &c->rope_factor);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return atlas_error(ATLAS_EFORMAT, "%s: missing field 'factor' for rope type '%s'",
				   w, type);
	if (!isfinite(c->rope_factor) || c->rope_factor <= 0)
		return atlas_error(ATLAS_EFORMAT, "%s: field 'factor' must be positive (got %g)", w,
				   c->rope_factor);
	if (c->rope_type != ATLAS_ROPE_LLAMA3)
		return 0;
	static const char *const need[] = {"low_freq_factor", "high_freq_factor",
					   "original_max_position_embeddings"};
	for (int i = 0; i < 3; i++)
		if (!json_object_object_get_ex(r, need[i], NULL))
			return atlas_error(ATLAS_EFORMAT,
					   "%s: missing field '%s' for rope type 'llama3'", w,
					   need[i]);
	if ((rc = opt_num(r, need[0], w, &c->rope_low_freq_factor, false)) ||
	    (rc = opt_num(r, need[1], w, &c->rope_high_freq_factor, false)) ||
	    (rc = opt_int(r, need[2], w, &c->rope_original_max_position)))
		return rc;
	if (c->rope_high_freq_factor <= c->rope_low_freq_factor)
		return atlas_error(
		    ATLAS_EFORMAT,
		    "%s: high_freq_factor (%g) must be larger than low_freq_factor (%g)", w,
		    c->rope_high_freq_factor, c->rope_low_freq_factor);
	return 0;
}

/* Model shape: the required sizes and the derived head layout. */
static int parse_shape(struct json_object *o, const char *where, struct atlas_config *c)
{
	int rc;

	if ((rc = req_int(o, "vocab_size", where, &c->vocab_size)) ||
	    (rc = req_int(o, "hidden_size", where, &c->hidden_size)) ||
	    (rc = req_int(o, "intermediate_size", where, &c->intermediate_size)) ||
	    (rc = req_int(o, "num_hidden_layers", where, &c->num_layers)) ||
	    (rc = req_int(o, "num_attention_heads", where, &c->num_heads)))
		return rc;
	c->num_kv_heads = c->num_heads;
	c->head_dim = 0;
	c->max_position = 2048;
	if ((rc = opt_int(o, "num_key_value_heads", where, &c->num_kv_heads)) ||
	    (rc = opt_int(o, "head_dim", where, &c->head_dim)) ||
	    (rc = opt_int(o, "max_position_embeddings", where, &c->max_position)))
		return rc;
	if (c->num_heads % c->num_kv_heads)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: num_attention_heads (%" PRId64
				   ") is not a multiple of num_key_value_heads (%" PRId64 ")",
				   where, c->num_heads, c->num_kv_heads);
	if (!c->head_dim) {
		if (c->hidden_size % c->num_heads)
			return atlas_error(ATLAS_EFORMAT,
					   "%s: hidden_size (%" PRId64
					   ") is not a multiple of num_attention_heads (%" PRId64
					   ") and head_dim is not given",
					   where, c->hidden_size, c->num_heads);
		c->head_dim = c->hidden_size / c->num_heads;
	}
	return 0;
}

/* Rope base and scaling from either spelling; 5.x wins when both exist. */
static int parse_rope_fields(struct json_object *o, const char *where, struct atlas_config *c)
{
	struct json_object *r;
	int rc;

	c->rope_theta = 10000.0;
	c->rope_type = ATLAS_ROPE_DEFAULT;
	c->rope_factor = 1.0;
	if ((rc = opt_num(o, "rope_theta", where, &c->rope_theta, false)))
		return rc;
	rc = atlas_json_object(o, "rope_parameters", where, &r);
	if (rc > 0)
		return parse_rope(r, where, "rope_parameters", c);
	if (rc == 0)
		rc = atlas_json_object(o, "rope_scaling", where, &r);
	if (rc > 0)
		return parse_rope(r, where, "rope_scaling", c);
	return rc;
}

/* Names, flags, dtype and window. */
static int parse_misc(struct json_object *o, const char *where, struct atlas_config *c)
{
	struct json_object *arr;
	const char *s;
	bool use_sw = true;
	int rc;

	rc = atlas_json_string(o, "model_type", where, &s);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return atlas_error(ATLAS_EFORMAT, "%s: missing required field 'model_type'", where);
	if ((rc = copy_str(where, "model_type", s, c->model_type, sizeof(c->model_type))))
		return rc;
	if ((rc = atlas_json_array(o, "architectures", where, &arr)) < 0)
		return rc;
	if (rc > 0 && json_object_array_length(arr) > 0) {
		struct json_object *e = json_object_array_get_idx(arr, 0);
		if (!e || !json_object_is_type(e, json_type_string))
			return atlas_error(ATLAS_EFORMAT,
					   "%s: field 'architectures' must be a list of strings",
					   where);
		if ((rc = copy_str(where, "architectures", json_object_get_string(e),
				   c->architecture, sizeof(c->architecture))))
			return rc;
	}

	c->rms_eps = 1e-6;
	if ((rc = opt_num(o, "rms_norm_eps", where, &c->rms_eps, false)) ||
	    (rc = atlas_json_bool(o, "tie_word_embeddings", where, &c->tie_embeddings)) < 0 ||
	    (rc = atlas_json_bool(o, "attention_bias", where, &c->attention_bias)) < 0 ||
	    (rc = atlas_json_bool(o, "mlp_bias", where, &c->mlp_bias)) < 0)
		return rc;

	/* Gemma writes the one it uses as hidden_activation. */
	s = "silu";
	if ((rc = atlas_json_string(o, "hidden_activation", where, &s)) == 0)
		rc = atlas_json_string(o, "hidden_act", where, &s);
	if (rc < 0 || (rc = copy_str(where, "hidden_act", s, c->hidden_act, sizeof(c->hidden_act))))
		return rc;

	c->dtype = ATLAS_DTYPE_F32;
	const char *key = "dtype";
	if ((rc = atlas_json_string(o, key, where, &s)) == 0) {
		key = "torch_dtype";
		rc = atlas_json_string(o, key, where, &s);
	}
	if (rc < 0)
		return rc;
	if (rc > 0 && atlas_dtype_parse_torch(s, &c->dtype))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: field '%s': dtype '%s' is not supported (supported: "
				   "bfloat16, float16, float32)",
				   where, key, s);

	if ((rc = atlas_json_int(o, "sliding_window", where, &c->sliding_window)) < 0 ||
	    (rc = atlas_json_bool(o, "use_sliding_window", where, &use_sw)) < 0)
		return rc;
	if (c->sliding_window < 0)
		return atlas_error(ATLAS_EFORMAT, "%s: field 'sliding_window' must not be negative",
				   where);
	if (!use_sw)
		c->sliding_window = 0;
	return 0;
}

/* Routing variants of other MoE families (DeepSeek V2/V3, ...) that
 * Atlas does not compute: refused by name rather than run as plain
 * softmax top-k, which would give plausible but wrong output. A field
 * set to its neutral value (softmax, greedy, 1 group, no shared experts,
 * scale 1, no leading dense layers) is accepted. */
static int refuse_moe_variants(struct json_object *o, const char *where)
{
	const char *s;
	int64_t n;
	double d;
	int rc;
	if ((rc = atlas_json_string(o, "scoring_func", where, &s)) < 0)
		return rc;
	if (rc > 0 && strcmp(s, "softmax"))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: MoE routing with scoring_func '%s' is not supported "
				   "(supported: softmax top-k)", where, s);
	if ((rc = atlas_json_string(o, "topk_method", where, &s)) < 0)
		return rc;
	if (rc > 0 && strcmp(s, "greedy"))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: MoE routing with topk_method '%s' is not supported "
				   "(supported: softmax top-k)", where, s);
	static const char *const counts[] = {"n_group", "topk_group"};
	for (int i = 0; i < 2; i++) {
		if ((rc = atlas_json_int(o, counts[i], where, &n)) < 0)
			return rc;
		if (rc > 0 && n > 1)
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "%s: grouped MoE routing (%s %" PRId64 ") is not supported",
					   where, counts[i], n);
	}
	static const char *const zeros[] = {"n_shared_experts", "first_k_dense_replace"};
	for (int i = 0; i < 2; i++) {
		if ((rc = atlas_json_int(o, zeros[i], where, &n)) < 0)
			return rc;
		if (rc > 0 && n != 0)
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "%s: MoE field '%s' (%" PRId64 ") is not supported", where,
					   zeros[i], n);
	}
	if ((rc = atlas_json_double(o, "routed_scaling_factor", where, &d)) < 0)
		return rc;
	if (rc > 0 && d != 1.0)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: MoE field 'routed_scaling_factor' (%g) is not supported", where,
				   d);
	return 0;
}

/* The mixture-of-experts fields (all absent in a dense model). */
static int parse_moe(struct json_object *o, const char *where, struct atlas_config *c)
{
	struct json_object *arr;
	const char *key = "num_experts";
	int rc;

	c->decoder_sparse_step = 1;
	if ((rc = refuse_moe_variants(o, where)))
		return rc;
	if ((rc = atlas_json_int(o, key, where, &c->num_experts)) == 0) {
		key = "num_local_experts";
		rc = atlas_json_int(o, key, where, &c->num_experts);
	}
	if (rc < 0)
		return rc;
	if (c->num_experts < 0)
		return atlas_error(ATLAS_EFORMAT, "%s: field '%s' must not be negative", where, key);
	if (!c->num_experts)
		return 0;
	if ((rc = req_int(o, "num_experts_per_tok", where, &c->experts_per_tok)))
		return rc;
	if (c->experts_per_tok > c->num_experts)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: num_experts_per_tok (%" PRId64 ") is greater than %s (%" PRId64
				   ")", where, c->experts_per_tok, key, c->num_experts);
	if (c->num_experts > ATLAS_MAX_EXPERTS || c->experts_per_tok > ATLAS_MAX_TOP_K)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: %" PRId64 " experts, top %" PRId64 ": at most %d experts and "
				   "top %d are supported", where, c->num_experts, c->experts_per_tok,
				   ATLAS_MAX_EXPERTS, ATLAS_MAX_TOP_K);
	c->moe_intermediate_size = c->intermediate_size;
	if ((rc = opt_int(o, "moe_intermediate_size", where, &c->moe_intermediate_size)) ||
	    (rc = opt_int(o, "decoder_sparse_step", where, &c->decoder_sparse_step)) ||
	    (rc = atlas_json_bool(o, "norm_topk_prob", where, &c->norm_topk_prob)) < 0)
		return rc;
	rc = atlas_json_int(o, "shared_expert_intermediate_size", where,
			    &c->shared_expert_intermediate_size);
	if (rc < 0)
		return rc;
	if (c->shared_expert_intermediate_size < 0)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: field 'shared_expert_intermediate_size' must not be negative",
				   where);
	if ((rc = atlas_json_array(o, "mlp_only_layers", where, &arr)) < 0)
		return rc;
	for (size_t i = 0; rc > 0 && i < json_object_array_length(arr); i++) {
		struct json_object *e = json_object_array_get_idx(arr, i);
		int64_t l = e && json_object_is_type(e, json_type_int) ? json_object_get_int64(e) : -1;
		if (l < 0 || l >= c->num_layers || l >= ATLAS_MAX_MLP_ONLY)
			return atlas_error(ATLAS_EFORMAT,
					   "%s: field 'mlp_only_layers' must list layer indices "
					   "0..%" PRId64, where,
					   (c->num_layers < ATLAS_MAX_MLP_ONLY ? c->num_layers
									       : ATLAS_MAX_MLP_ONLY) - 1);
		c->mlp_only[l / 64] |= (uint64_t)1 << (l % 64);
	}
	return 0;
}

/* partial_rotary_factor: top level or in rope_parameters (5.x writes
 * both), in (0, 1]; rotary_dim = int(head_dim * factor), even. */
static int parse_rotary(struct json_object *o, const char *where, struct atlas_config *c)
{
	struct json_object *r;
	double f = 1.0;
	int rc = opt_num(o, "partial_rotary_factor", where, &f, false);
	if (!rc && atlas_json_object(o, "rope_parameters", where, &r) > 0)
		rc = opt_num(r, "partial_rotary_factor", where, &f, false);
	if (rc)
		return rc;
	if (f > 1.0)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: field 'partial_rotary_factor' must be at most 1 (got %g)", where, f);
	c->rotary_dim = (int64_t)((double)c->head_dim * f);
	if (c->rotary_dim < 2 || c->rotary_dim % 2)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: partial_rotary_factor %g of head_dim %" PRId64
				   " gives %" PRId64 " rotary dims; an even number of at least 2 is needed",
				   where, f, c->head_dim, c->rotary_dim);
	return 0;
}

/* Layer l is linear attention. */
static int mark_linear(struct atlas_config *c, int64_t l, const char *where)
{
	if (l >= ATLAS_MAX_MLP_ONLY)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: linear-attention layers past %d are not supported", where,
				   ATLAS_MAX_MLP_ONLY - 1);
	c->linear[l / 64] |= (uint64_t)1 << (l % 64);
	c->n_linear++;
	return 0;
}

/* The hybrid fields: which layers are linear attention, and its shapes. */
static int parse_hybrid(struct json_object *o, const char *where, struct atlas_config *c)
{
	struct json_object *arr;
	int64_t interval = 0;
	int rc;
	if ((rc = atlas_json_array(o, "layer_types", where, &arr)) < 0)
		return rc;
	if (rc > 0) {
		if ((int64_t)json_object_array_length(arr) != c->num_layers)
			return atlas_error(ATLAS_EFORMAT,
					   "%s: field 'layer_types' has %zu entries for %" PRId64
					   " layers", where, json_object_array_length(arr), c->num_layers);
		for (int64_t l = 0; l < c->num_layers; l++) {
			struct json_object *e = json_object_array_get_idx(arr, (size_t)l);
			const char *t = e && json_object_is_type(e, json_type_string)
					    ? json_object_get_string(e) : "";
			if (!strcmp(t, "full_attention"))
				continue;
			if (strcmp(t, "linear_attention"))
				return atlas_error(ATLAS_EUNSUPPORTED,
						   "%s: layer_types[%" PRId64 "] '%s' is not supported "
						   "(supported: full_attention, linear_attention)", where, l, t);
			if ((rc = mark_linear(c, l, where)))
				return rc;
		}
	} else {
		if ((rc = opt_int(o, "full_attention_interval", where, &interval)))
			return rc;
		for (int64_t l = 0; interval > 1 && l < c->num_layers; l++)
			if ((l + 1) % interval && (rc = mark_linear(c, l, where)))
				return rc;
	}
	/* the multi-token prediction head's layers (mtp.*): Qwen3-Next
	 * spells the count num_nextn_predict_layers, Qwen3.5
	 * mtp_num_hidden_layers */
	if ((rc = opt_int(o, "num_nextn_predict_layers", where, &c->mtp_layers)) ||
	    (!c->mtp_layers && (rc = opt_int(o, "mtp_num_hidden_layers", where, &c->mtp_layers))))
		return rc;
	if (c->mtp_layers < 0 || c->mtp_layers > 64)
		return atlas_error(ATLAS_EFORMAT, "%s: %" PRId64 " MTP layers (0..64)", where,
				   c->mtp_layers);
	if (!c->n_linear)
		return 0;
	c->lin_conv = 4;
	if ((rc = req_int(o, "linear_num_key_heads", where, &c->lin_k_heads)) ||
	    (rc = req_int(o, "linear_num_value_heads", where, &c->lin_v_heads)) ||
	    (rc = req_int(o, "linear_key_head_dim", where, &c->lin_k_dim)) ||
	    (rc = req_int(o, "linear_value_head_dim", where, &c->lin_v_dim)) ||
	    (rc = opt_int(o, "linear_conv_kernel_dim", where, &c->lin_conv)))
		return rc;
	if (c->lin_v_heads % c->lin_k_heads)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: linear_num_value_heads (%" PRId64 ") is not a multiple of "
				   "linear_num_key_heads (%" PRId64 ")", where, c->lin_v_heads,
				   c->lin_k_heads);
	if (c->lin_k_heads > 4096 || c->lin_v_heads > 4096 || c->lin_k_dim > 4096 ||
	    c->lin_v_dim > 4096 || c->lin_conv > 64)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: linear attention of %" PRId64 "/%" PRId64 " heads of %" PRId64
				   "/%" PRId64 " dims, conv %" PRId64 " is past the limits (4096 heads "
				   "and dims, conv 64)", where, c->lin_k_heads, c->lin_v_heads,
				   c->lin_k_dim, c->lin_v_dim, c->lin_conv);
	return 0;
}

bool atlas_config_layer_is_linear(const struct atlas_config *c, int64_t l)
{
	return c->n_linear > 0 && l >= 0 && l < c->num_layers && l < ATLAS_MAX_MLP_ONLY &&
	       (c->linear[l / 64] >> (l % 64) & 1);
}

bool atlas_config_layer_is_moe(const struct atlas_config *c, int64_t l)
{
	if (c->num_experts <= 0 || l < 0 || l >= c->num_layers)
		return false;
	if (l < ATLAS_MAX_MLP_ONLY && (c->mlp_only[l / 64] >> (l % 64) & 1))
		return false;
	return c->decoder_sparse_step <= 1 || (l + 1) % c->decoder_sparse_step == 0;
}

static int parse_model(struct json_object *o, const char *name, struct atlas_config *out)
{
	int rc;
	if (!(rc = parse_misc(o, name, out)) && !(rc = parse_shape(o, name, out)) &&
	    !(rc = parse_rope_fields(o, name, out)) && !(rc = parse_bos(o, name, &out->bos_id)) &&
	    !(rc = parse_eos(o, name, out->eos_ids, &out->n_eos)) &&
	    !(rc = parse_moe(o, name, out)) && !(rc = parse_rotary(o, name, out)))
		rc = parse_hybrid(o, name, out);
	return rc;
}

/* Composite (vision-language) checkpoints whose language model Atlas runs
 * from its text_config: the model_type at the top, then the text model's */
static const char *const composites[] = {"qwen3_5_moe", NULL};

int atlas_config_parse(const char *json, const char *name, struct atlas_config *out)
{
	struct json_object *o, *t = NULL;
	const char *top = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	o = atlas_json_parse_object(json, strlen(json), name);
	if (!o)
		return ATLAS_EFORMAT;
	if (atlas_json_string(o, "model_type", name, &top) > 0)
		for (int i = 0; composites[i]; i++)
			if (!strcmp(top, composites[i]) && atlas_json_object(o, "text_config", name, &t) <= 0)
				t = NULL;
	if (!t || !top) {
		rc = parse_model(o, name, out);
		json_object_put(o);
		return rc;
	}
	/* the text model's fields, with the top level's architecture and (when
	 * the text model leaves it out) tie_word_embeddings */
	char where[600];
	snprintf(where, sizeof(where), "%s: text_config", name);
	rc = parse_model(t, where, out);
	struct json_object *arr;
	if (!rc && !out->architecture[0] && atlas_json_array(o, "architectures", name, &arr) > 0 &&
	    json_object_array_length(arr) > 0 &&
	    json_object_is_type(json_object_array_get_idx(arr, 0), json_type_string))
		rc = copy_str(name, "architectures",
			      json_object_get_string(json_object_array_get_idx(arr, 0)),
			      out->architecture, sizeof(out->architecture));
	if (!rc && !json_object_object_get_ex(t, "tie_word_embeddings", NULL) &&
	    atlas_json_bool(o, "tie_word_embeddings", name, &out->tie_embeddings) < 0)
		rc = ATLAS_EFORMAT;
	if (!rc)
		snprintf(out->composite, sizeof(out->composite), "%s", top);
	json_object_put(o);
	return rc;
}

int atlas_config_load(const char *dir, struct atlas_config *out)
{
	char *path = atlas_path_join(dir, "config.json"), *text, *name;
	size_t len;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!path)
		return ATLAS_ENOMEM;
	rc = atlas_file_read(path, &text, &len);
	free(path);
	if (rc)
		return rc;
	if (strlen(text) != len) {
		free(text);
		return atlas_error(ATLAS_EFORMAT, "config.json in '%s': contains a NUL byte", dir);
	}
	if (asprintf(&name, "config.json in '%s'", dir) < 0) {
		free(text);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	rc = atlas_config_parse(text, name, out);
	free(name);
	free(text);
	return rc;
}

void atlas_gen_config_defaults(struct atlas_gen_config *out)
{
	memset(out, 0, sizeof(*out));
	out->do_sample = false;
	out->temperature = 1.0;
	out->top_k = 50;
	out->top_p = 1.0;
	out->min_p = 0.0;
	out->repetition_penalty = 1.0;
	out->max_new_tokens = -1;
	out->bos_id = -1;
	out->n_eos = 0;
}

/* An optional integer >= 0; *out keeps its default when absent. */
static int opt_count(struct json_object *o, const char *key, const char *where, int64_t *out)
{
	int64_t v;
	int rc = atlas_json_int(o, key, where, &v);
	if (rc <= 0)
		return rc;
	if (v < 0)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: field '%s' must not be negative (got %" PRId64 ")", where,
				   key, v);
	*out = v;
	return 0;
}

static int gen_parse(struct json_object *o, const char *w, struct atlas_gen_config *g)
{
	int rc;

	if ((rc = atlas_json_bool(o, "do_sample", w, &g->do_sample)) < 0 ||
	    (rc = opt_num(o, "temperature", w, &g->temperature, true)) ||
	    (rc = opt_num(o, "top_p", w, &g->top_p, false)) ||
	    (rc = opt_num(o, "min_p", w, &g->min_p, true)) ||
	    (rc = opt_num(o, "repetition_penalty", w, &g->repetition_penalty, false)) ||
	    (rc = opt_count(o, "top_k", w, &g->top_k)) ||
	    (rc = opt_count(o, "max_new_tokens", w, &g->max_new_tokens)) ||
	    (rc = parse_bos(o, w, &g->bos_id)) || (rc = parse_eos(o, w, g->eos_ids, &g->n_eos)))
		return rc;
	if (g->top_p > 1)
		return atlas_error(ATLAS_EFORMAT, "%s: field 'top_p' must be at most 1 (got %g)", w,
				   g->top_p);
	if (g->min_p > 1)
		return atlas_error(ATLAS_EFORMAT, "%s: field 'min_p' must be at most 1 (got %g)", w,
				   g->min_p);
	return 0;
}

int atlas_gen_config_load(const char *dir, struct atlas_gen_config *out)
{
	char *path = atlas_path_join(dir, "generation_config.json"), *text, *name;
	struct json_object *o;
	size_t len;
	int rc;

	atlas_gen_config_defaults(out);
	if (!path)
		return ATLAS_ENOMEM;
	rc = atlas_file_read(path, &text, &len);
	free(path);
	if (rc == ATLAS_ENOTFOUND) {
		atlas_error_clear();
		return 0;
	}
	if (rc)
		return rc;
	if (asprintf(&name, "generation_config.json in '%s'", dir) < 0) {
		free(text);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	o = atlas_json_parse_object(text, len, name);
	free(text);
	if (!o) {
		free(name);
		return ATLAS_EFORMAT;
	}
	rc = gen_parse(o, name, out);
	json_object_put(o);
	free(name);
	return rc;
}

/* --- sentence-transformers pooling (embedding models) ------------------- */

const char *atlas_pooling_name(enum atlas_pooling p)
{
	switch (p) {
	case ATLAS_POOL_LAST:
		return "last-token";
	case ATLAS_POOL_MEAN:
		return "mean";
	case ATLAS_POOL_CLS:
		return "cls";
	default:
		return "none";
	}
}

/* The last dotted component of a module type
 * ("sentence_transformers.models.Pooling" -> "Pooling"). */
static const char *module_kind(const char *type)
{
	const char *dot = strrchr(type, '.');
	return dot ? dot + 1 : type;
}

/* Read `dir`/`name` into a new json-c value (any type). ATLAS_ENOTFOUND
 * when the file does not exist (no message kept then). */
static int read_json(const char *dir, const char *name, struct json_object **out)
{
	char *path = atlas_path_join(dir, name), *text;
	size_t len;
	*out = NULL;
	if (!path)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	int rc = atlas_file_read(path, &text, &len);
	if (rc == ATLAS_ENOTFOUND) {
		atlas_error_clear();
		free(path);
		return rc;
	}
	if (rc) {
		free(path);
		return rc;
	}
	json_tokener *t = json_tokener_new();
	struct json_object *o = t ? json_tokener_parse_ex(t, text, (int)len) : NULL;
	bool ok = o && json_tokener_get_error(t) == json_tokener_success;
	if (t)
		json_tokener_free(t);
	free(text);
	if (!ok) {
		json_object_put(o);
		rc = atlas_error(ATLAS_EFORMAT, "'%s': malformed JSON", path);
		free(path);
		return rc;
	}
	free(path);
	*out = o;
	return 0;
}

/* The Pooling module's config: exactly one mode Atlas computes. Modes
 * it cannot compute are refused by name rather than approximated: a
 * wrong pooling would give plausible vectors that match nothing. */
static int parse_pooling(struct json_object *o, const char *where, struct atlas_embed_config *e)
{
	static const struct {
		const char *key;          /* the boolean field */
		enum atlas_pooling mode;  /* NONE: a mode Atlas refuses */
		const char *name;         /* for messages */
	} modes[] = {
		{"pooling_mode_lasttoken", ATLAS_POOL_LAST, "lasttoken"},
		{"pooling_mode_mean_tokens", ATLAS_POOL_MEAN, "mean"},
		{"pooling_mode_cls_token", ATLAS_POOL_CLS, "cls"},
		{"pooling_mode_max_tokens", ATLAS_POOL_NONE, "max"},
		{"pooling_mode_mean_sqrt_len_tokens", ATLAS_POOL_NONE, "mean_sqrt_len"},
		{"pooling_mode_weightedmean_tokens", ATLAS_POOL_NONE, "weightedmean"},
	};
	const char *chosen = NULL, *s = NULL;
	bool include_prompt = true;
	int rc;
	e->pooling = ATLAS_POOL_NONE;
	/* sentence-transformers also accepts one "pooling_mode" string */
	if ((rc = atlas_json_string(o, "pooling_mode", where, &s)) < 0)
		return rc;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		bool on = false;
		if ((rc = atlas_json_bool(o, modes[i].key, where, &on)) < 0)
			return rc;
		if (!on && !(s && !strcmp(s, modes[i].name)))
			continue;
		if (modes[i].mode == ATLAS_POOL_NONE)
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "%s: pooling mode '%s' is not supported (supported: "
					   "lasttoken, mean, cls)", where, modes[i].name);
		if (chosen && strcmp(chosen, modes[i].name))
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "%s: pooling modes '%s' and '%s' together (a concatenation) "
					   "are not supported; one of lasttoken, mean, cls", where,
					   chosen, modes[i].name);
		chosen = modes[i].name;
		e->pooling = modes[i].mode;
	}
	if (!chosen)
		return atlas_error(ATLAS_EFORMAT, "%s: no pooling mode is set (one of "
				   "pooling_mode_lasttoken, pooling_mode_mean_tokens, "
				   "pooling_mode_cls_token must be true)", where);
	if ((rc = atlas_json_bool(o, "include_prompt", where, &include_prompt)) < 0)
		return rc;
	if (!include_prompt)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: include_prompt false (pooling without the instruction's "
				   "tokens) is not supported", where);
	if ((rc = atlas_json_int(o, "word_embedding_dimension", where, &e->dim)) < 0)
		return rc;
	return 0;
}

int atlas_embed_config_load(const char *dir, struct atlas_embed_config *out)
{
	struct json_object *mods, *pc = NULL;
	char where[512], sub[300];
	int rc;
	memset(out, 0, sizeof(*out));
	rc = read_json(dir, "modules.json", &mods);
	if (rc == ATLAS_ENOTFOUND)
		return 0;
	if (rc)
		return rc;
	snprintf(where, sizeof(where), "modules.json in '%s'", dir);
	if (!json_object_is_type(mods, json_type_array)) {
		json_object_put(mods);
		return atlas_error(ATLAS_EFORMAT, "%s: a list of modules is expected", where);
	}
	const char *pool_path = NULL;
	size_t n = json_object_array_length(mods);
	for (size_t i = 0; i < n && !rc; i++) {
		struct json_object *m = json_object_array_get_idx(mods, i);
		const char *type = NULL, *path = "";
		if (!json_object_is_type(m, json_type_object) ||
		    atlas_json_string(m, "type", where, &type) <= 0 ||
		    atlas_json_string(m, "path", where, &path) < 0) {
			rc = atlas_error(ATLAS_EFORMAT, "%s: module %zu needs a string 'type'", where, i);
			break;
		}
		const char *kind = module_kind(type);
		if (!strcmp(kind, "Pooling"))
			pool_path = path;
		else if (!strcmp(kind, "Normalize"))
			out->normalize = true;
		else if (strcmp(kind, "Transformer"))
			rc = atlas_error(ATLAS_EUNSUPPORTED,
					 "%s: module '%s' is not supported (supported: Transformer, "
					 "Pooling, Normalize)", where, type);
	}
	if (!rc && pool_path) {
		if (!*pool_path || pool_path[0] == '/' || strstr(pool_path, "..") ||
		    strlen(pool_path) > 200)
			rc = atlas_error(ATLAS_EFORMAT, "%s: the Pooling module's path '%s' is not "
					 "a folder of the model", where, pool_path);
		else
			snprintf(sub, sizeof(sub), "%s/config.json", pool_path);
		if (!rc && (rc = read_json(dir, sub, &pc)) == ATLAS_ENOTFOUND)
			rc = atlas_error(ATLAS_EFORMAT, "%s: the Pooling module's '%s' is missing",
					 where, sub);
		if (!rc && !json_object_is_type(pc, json_type_object))
			rc = atlas_error(ATLAS_EFORMAT, "'%s' in '%s' must be a JSON object", sub, dir);
		if (!rc) {
			snprintf(where, sizeof(where), "%s in '%s'", sub, dir);
			rc = parse_pooling(pc, where, out);
		}
	}
	json_object_put(pc);
	json_object_put(mods);
	if (rc || !pool_path)
		memset(out, 0, sizeof(*out)); /* no pooling: not an embedding model */
	return rc;
}
