/* api_openai.c - POST /v1/chat/completions and POST /v1/completions:
 * the request's prompt (chat template; text, token ids or a list of
 * either) and options, then the shared generation job (job.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_internal.h"

enum MHD_Result serve_chat_completions(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	struct serve_gen g;
	if (!serve_ready(c) || serve_refuse_embedding(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e);
	if (!b)
		return serve_reply_err(c, &e);
	if (serve_parse_gen(s, b, JOB_CHAT, &g, &e) || serve_agent_parse(s, b, JOB_CHAT, &g, &e) ||
	    serve_chat_prompt(s, b, &g, &e)) {
		serve_gen_free(&g);
		json_object_put(b);
		return serve_reply_err(c, &e);
	}
	serve_agent_apply(s, &g);
	enum MHD_Result rc = serve_run_job(c, JOB_CHAT, &g);
	json_object_put(b);
	return rc;
}

/* A token-id list into g's prompt. */
static int prompt_ids(struct atlas_server *s, json_object *a, struct serve_gen *g,
		      struct serve_err *e)
{
	size_t n = json_object_array_length(a);
	free(g->prompt_ids);
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
					     "a token-id list in 'prompt' must hold only integers");
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

/* One prompt (a string or a token-id list) onto g's list; its text is
 * kept for echo. */
static int add_prompt(struct atlas_server *s, json_object *p, struct serve_gen *g,
		      struct serve_err *e)
{
	if (json_object_is_type(p, json_type_string)) {
		const char *text = json_object_get_string(p);
		size_t len = (size_t)json_object_get_string_len(p);
		if (serve_set_prompt_text(s, g, text, len, true, e))
			return -1;
		return serve_gen_push_prompt(g, g->echo ? text : NULL, len, e);
	}
	if (prompt_ids(s, p, g, e))
		return -1;
	char *text = NULL;
	size_t len = 0;
	if (g->echo &&
	    atlas_tok_decode(s->tok, g->prompt_ids, (size_t)g->sp.n_prompt, &text, &len))
		return serve_err_set(e, 400, "prompt", "invalid_value",
				     "cannot decode the prompt for 'echo'");
	int rc = serve_gen_push_prompt(g, text, len, e);
	free(text);
	return rc;
}

/* 'prompt': a string, a token-id list, a list of strings or a list of
 * token-id lists, into g's prompt list. */
static int parse_prompts(struct atlas_server *s, json_object *b, struct serve_gen *g,
			 struct serve_err *e)
{
	json_object *p;
	if (!json_object_object_get_ex(b, "prompt", &p) || !p)
		return serve_err_set(e, 400, "prompt", "missing_field", "'prompt' is required");
	if (json_object_is_type(p, json_type_string))
		return add_prompt(s, p, g, e);
	if (!json_object_is_type(p, json_type_array))
		return serve_err_set(e, 400, "prompt", "invalid_type",
				     "'prompt' must be a string, a list of token ids, "
				     "a list of strings or a list of token-id lists");
	size_t n = json_object_array_length(p);
	if (!n)
		return serve_err_set(e, 400, "prompt", "invalid_value",
				     "'prompt' is an empty list");
	json_object *first = json_object_array_get_idx(p, 0);
	if (!json_object_is_type(first, json_type_string) &&
	    !json_object_is_type(first, json_type_array))
		return add_prompt(s, p, g, e); /* one list of ids */
	if (n * (size_t)g->n > SERVE_MAX_CHOICES)
		return serve_err_set(e, 400, "prompt", "invalid_value",
				     "%zu prompts with n = %d make %zu choices, more than %d", n,
				     g->n, n * (size_t)g->n, SERVE_MAX_CHOICES);
	for (size_t i = 0; i < n; i++) {
		json_object *v = json_object_array_get_idx(p, i);
		if (!json_object_is_type(v, json_type_string) &&
		    !json_object_is_type(v, json_type_array))
			return serve_err_set(e, 400, "prompt", "invalid_type",
					     "'prompt[%zu]' must be a string or a list of token ids "
					     "(as 'prompt[0]' is)", i);
		if (add_prompt(s, v, g, e)) {
			char msg[sizeof(e->msg)];
			snprintf(msg, sizeof(msg), "%s", e->msg);
			snprintf(e->msg, sizeof(e->msg), "'prompt[%zu]': %s", i, msg);
			return -1;
		}
	}
	return 0;
}

enum MHD_Result serve_completions(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	struct serve_gen g;
	if (!serve_ready(c) || serve_refuse_embedding(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e);
	if (!b)
		return serve_reply_err(c, &e);
	if (serve_parse_gen(s, b, JOB_COMPLETION, &g, &e) ||
	    serve_agent_parse(s, b, JOB_COMPLETION, &g, &e) || parse_prompts(s, b, &g, &e)) {
		serve_gen_free(&g);
		json_object_put(b);
		return serve_reply_err(c, &e);
	}
	serve_agent_apply(s, &g);
	enum MHD_Result mr = serve_run_job(c, JOB_COMPLETION, &g);
	json_object_put(b);
	return mr;
}
