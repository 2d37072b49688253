/* api_openai.c - POST /v1/chat/completions and POST /v1/completions:
 * the request's prompt (chat template, text or token ids) and options,
 * then the shared generation job (job.c). */
#include <stdlib.h>
#include <string.h>

#include "serve_internal.h"

enum MHD_Result serve_chat_completions(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	struct serve_gen g;
	if (!serve_ready(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e);
	if (!b)
		return serve_reply_err(c, &e);
	if (serve_parse_gen(s, b, JOB_CHAT, &g, &e) || serve_chat_prompt(s, b, &g, &e)) {
		serve_gen_free(&g);
		json_object_put(b);
		return serve_reply_err(c, &e);
	}
	enum MHD_Result rc = serve_run_job(c, JOB_CHAT, &g, NULL, 0);
	json_object_put(b);
	return rc;
}

/* A token-id list into g's prompt. */
static int prompt_ids(struct atlas_server *s, json_object *a, struct serve_gen *g,
		      struct serve_err *e)
{
	size_t n = json_object_array_length(a);
	g->prompt_ids = malloc((n ? n : 1) * sizeof(int32_t));
	if (!g->prompt_ids)
		return serve_err_set(e, 500, NULL, NULL, "out of memory");
	int64_t V = atlas_tok_vocab_size(s->tok), Vm = atlas_model_config(s->model)->vocab_size;
	if (Vm < V)
		V = Vm;
	for (size_t i = 0; i < n; i++) {
		json_object *v = json_object_array_get_idx(a, i);
		if (!json_object_is_type(v, json_type_int))
			return serve_err_set(e, 400, "prompt", "invalid_type",
					     "'prompt' must be a string or a list of token ids");
		int64_t id = json_object_get_int64(v);
		if (id < 0 || id >= V)
			return serve_err_set(e, 400, "prompt", "invalid_value",
					     "token id %lld in 'prompt' is outside the vocabulary (0..%lld)",
					     (long long)id, (long long)V - 1);
		g->prompt_ids[i] = (int32_t)id;
	}
	g->sp.prompt = g->prompt_ids;
	g->sp.n_prompt = (int64_t)n;
	return serve_check_prompt(s, g, e);
}

enum MHD_Result serve_completions(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	struct serve_gen g;
	if (!serve_ready(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e);
	if (!b)
		return serve_reply_err(c, &e);
	const char *echo = NULL;
	size_t echo_len = 0;
	char *echo_owned = NULL;
	json_object *p;
	int rc = serve_parse_gen(s, b, JOB_COMPLETION, &g, &e);
	if (!rc && (!json_object_object_get_ex(b, "prompt", &p) || !p))
		rc = serve_err_set(&e, 400, "prompt", "missing_field", "'prompt' is required");
	/* a list holding one prompt is that prompt */
	if (!rc && json_object_is_type(p, json_type_array) && json_object_array_length(p) == 1) {
		json_object *only = json_object_array_get_idx(p, 0);
		if (json_object_is_type(only, json_type_string) ||
		    json_object_is_type(only, json_type_array))
			p = only;
	}
	if (!rc && json_object_is_type(p, json_type_string)) {
		echo = json_object_get_string(p);
		echo_len = (size_t)json_object_get_string_len(p);
		rc = serve_set_prompt_text(s, &g, echo, echo_len, true, &e);
	} else if (!rc && json_object_is_type(p, json_type_array)) {
		size_t n = json_object_array_length(p);
		json_object *first = n ? json_object_array_get_idx(p, 0) : NULL;
		if (first && (json_object_is_type(first, json_type_string) ||
			      json_object_is_type(first, json_type_array)))
			rc = serve_err_set(&e, 400, "prompt", "unsupported_value",
					   "only one prompt per request is supported, not %zu", n);
		else
			rc = prompt_ids(s, p, &g, &e);
		if (!rc && g.echo) {
			size_t len;
			if (!atlas_tok_decode(s->tok, g.prompt_ids, (size_t)g.sp.n_prompt, &echo_owned, &len)) {
				echo = echo_owned;
				echo_len = len;
			}
		}
	} else if (!rc) {
		rc = serve_err_set(&e, 400, "prompt", "invalid_type",
				   "'prompt' must be a string or a list of token ids");
	}
	if (rc) {
		serve_gen_free(&g);
		json_object_put(b);
		return serve_reply_err(c, &e);
	}
	enum MHD_Result mr = serve_run_job(c, JOB_COMPLETION, &g, g.echo ? echo : NULL,
					   g.echo ? echo_len : 0);
	free(echo_owned);
	json_object_put(b);
	return mr;
}
