/* convert_inspect.c - the checkpoint summary atlas-load inspect prints
 * (see convert.h): counts per dtype, tokenizer type, chat template. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/error.h"
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
