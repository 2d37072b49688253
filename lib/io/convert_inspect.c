/* convert_inspect.c - the checkpoint summary atlas-load inspect prints
 * (see convert.h): counts per dtype, tokenizer type, chat template, and a
 * mixture-of-experts config's experts and dense layers. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/error.h"
#include "config.h"
#include "convert.h"
#include "file.h"
#include "json_util.h"
#include "safetensors.h"

/* Parse `dir`/`name` as a JSON object; NULL (no message) if absent or bad. */
static struct json_object *read_json(const char *dir, const char *name)
{
	char *p = atlas_path_join(dir, name), *text = NULL;
	size_t len;
	struct json_object *o = NULL;
	if (p && !atlas_file_read(p, &text, &len))
		o = atlas_json_parse_object(text, len, p);
	free(text);
	free(p);
	atlas_error_clear();
	return o;
}

int atlas_ckpt_inspect(const char *dir, struct atlas_ckpt_info *out)
{
	struct atlas_st *st = atlas_st_open(dir);
	const char *last_file = NULL;
	memset(out, 0, sizeof(*out));
	if (!st)
		return ATLAS_EFORMAT;
	out->n_tensors = atlas_st_count(st);
	for (int64_t i = 0; i < out->n_tensors; i++) {
		const struct atlas_tensor_info *t = atlas_st_get(st, i);
		out->n_params += t->numel;
		if (!strncmp(t->name, "mtp.", 4)) {
			out->mtp_tensors++;
			out->mtp_params += t->numel;
		}
		out->n_bytes += (int64_t)t->nbytes;
		out->params_by_dtype[t->dtype] += t->numel;
		if (!last_file || strcmp(last_file, t->file)) {
			/* files are contiguous in file order */
			out->n_files++;
			last_file = t->file;
		}
	}
	atlas_st_close(st);

	struct json_object *tok = read_json(dir, "tokenizer.json"), *model = NULL;
	const char *type = NULL;
	if (tok && atlas_json_object(tok, "model", "tokenizer.json", &model) == 1 &&
	    atlas_json_string(model, "type", "tokenizer.json", &type) == 1)
		snprintf(out->tokenizer_type, sizeof(out->tokenizer_type), "%s", type);
	json_object_put(tok);
	atlas_error_clear();

	struct json_object *tc = read_json(dir, "tokenizer_config.json");
	out->chat_template = tc && json_object_object_get_ex(tc, "chat_template", NULL);
	json_object_put(tc);
	char *jinja = atlas_path_join(dir, "chat_template.jinja");
	if (jinja && access(jinja, R_OK) == 0)
		out->chat_template = true;
	free(jinja);
	return 0;
}

/* Layers [a, b] as "a" or "a-b", after ", " unless first. */
static void put_range(FILE *f, int64_t a, int64_t b, bool first)
{
	fprintf(f, "%s%lld", first ? "" : ", ", (long long)a);
	if (b > a)
		fprintf(f, "-%lld", (long long)b);
}

char *atlas_ckpt_moe_text(const struct atlas_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	bool first = true;
	if (c->num_experts <= 0)
		return NULL;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fprintf(f, "experts:         %lld per sparse layer, top %lld, expert width %lld\n",
		(long long)c->num_experts, (long long)c->experts_per_tok,
		(long long)c->moe_intermediate_size);
	if (c->shared_expert_intermediate_size > 0)
		fprintf(f, "shared expert:   width %lld\n",
			(long long)c->shared_expert_intermediate_size);
	fprintf(f, "dense layers:    ");
	for (int64_t l = 0, a = -1; l <= c->num_layers; l++) {
		bool dense = l < c->num_layers && !atlas_config_layer_is_moe(c, l);
		if (dense && a < 0)
			a = l;
		if (!dense && a >= 0) {
			put_range(f, a, l - 1, first);
			first = false;
			a = -1;
		}
	}
	fprintf(f, "%s\n", first ? "none" : "");
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

struct json_object *atlas_ckpt_moe_json(const struct atlas_config *c)
{
	if (c->num_experts <= 0)
		return NULL;
	struct json_object *o = json_object_new_object(), *dense = json_object_new_array();
	json_object_object_add(o, "experts", json_object_new_int64(c->num_experts));
	json_object_object_add(o, "top_k", json_object_new_int64(c->experts_per_tok));
	json_object_object_add(o, "expert_width", json_object_new_int64(c->moe_intermediate_size));
	json_object_object_add(o, "shared_expert_width",
			       c->shared_expert_intermediate_size > 0
				       ? json_object_new_int64(c->shared_expert_intermediate_size)
				       : NULL);
	json_object_object_add(o, "norm_topk_prob", json_object_new_boolean(c->norm_topk_prob));
	for (int64_t l = 0; l < c->num_layers; l++)
		if (!atlas_config_layer_is_moe(c, l))
			json_object_array_add(dense, json_object_new_int64(l));
	json_object_object_add(o, "dense_layers", dense);
	return o;
}

char *atlas_ckpt_hybrid_text(const struct atlas_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	bool first = true;
	if (c->n_linear <= 0)
		return NULL;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fprintf(f, "linear attn:     ");
	for (int64_t l = 0, a = -1; l <= c->num_layers; l++) {
		bool lin = l < c->num_layers && atlas_config_layer_is_linear(c, l);
		if (lin && a < 0)
			a = l;
		if (!lin && a >= 0) {
			put_range(f, a, l - 1, first);
			first = false;
			a = -1;
		}
	}
	fprintf(f, " (Gated DeltaNet, %lld/%lld heads of %lld/%lld, conv %lld)\n",
		(long long)c->lin_k_heads, (long long)c->lin_v_heads, (long long)c->lin_k_dim,
		(long long)c->lin_v_dim, (long long)c->lin_conv);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

struct json_object *atlas_ckpt_hybrid_json(const struct atlas_config *c)
{
	if (c->n_linear <= 0)
		return NULL;
	struct json_object *o = json_object_new_object(), *ls = json_object_new_array();
	for (int64_t l = 0; l < c->num_layers; l++)
		if (atlas_config_layer_is_linear(c, l))
			json_object_array_add(ls, json_object_new_int64(l));
	json_object_object_add(o, "layers", ls);
	json_object_object_add(o, "key_heads", json_object_new_int64(c->lin_k_heads));
	json_object_object_add(o, "value_heads", json_object_new_int64(c->lin_v_heads));
	json_object_object_add(o, "key_head_dim", json_object_new_int64(c->lin_k_dim));
	json_object_object_add(o, "value_head_dim", json_object_new_int64(c->lin_v_dim));
	json_object_object_add(o, "conv_width", json_object_new_int64(c->lin_conv));
	return o;
}
