/* api_misc.c - the small routes: GET /v1/models (and /v1/models/ID),
 * POST /tokenize, POST /detokenize, GET /health, GET /metrics. */
#include <stdlib.h>
#include <string.h>

#include "../tok/chat.h"
#include "job.h"
#include "serve_internal.h"

static json_object *model_obj(struct atlas_server *s)
{
	json_object *m = json_object_new_object();
	json_object_object_add(m, "id", json_object_new_string(s->served_name));
	json_object_object_add(m, "object", json_object_new_string("model"));
	json_object_object_add(m, "created", json_object_new_int64(s->created));
	json_object_object_add(m, "owned_by", json_object_new_string("atlas"));
	pthread_mutex_lock(&s->mu);
	bool ready = s->state == 1;
	pthread_mutex_unlock(&s->mu);
	if (ready)
		json_object_object_add(m, "max_model_len", json_object_new_int64(s->ctx));
	return m;
}

enum MHD_Result serve_models(struct conn *c, const char *id)
{
	struct atlas_server *s = c->srv;
	if (id) {
		if (strcmp(id, s->served_name))
			return serve_reply_error(c, 404, "model", "model_not_found",
						 "the model '%s' does not exist (this server has '%s')", id,
						 s->served_name);
		return serve_reply_json(c, 200, model_obj(s));
	}
	json_object *o = json_object_new_object(), *data = json_object_new_array();
	json_object_object_add(o, "object", json_object_new_string("list"));
	json_object_array_add(data, model_obj(s));
	json_object_object_add(o, "data", data);
	return serve_reply_json(c, 200, o);
}

enum MHD_Result serve_tokenize(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	struct serve_gen g = {0};
	if (!serve_ready(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e), *p, *v;
	if (!b)
		return serve_reply_err(c, &e);
	bool add_special = true;
	int rc = 0;
	if (json_object_object_get_ex(b, "add_special_tokens", &v) && v) {
		if (!json_object_is_type(v, json_type_boolean))
			rc = serve_err_set(&e, 400, "add_special_tokens", "invalid_type",
					   "'add_special_tokens' must be a boolean");
		else
			add_special = json_object_get_boolean(v);
	}
	if (rc) {
	} else if (json_object_object_get_ex(b, "messages", &v) && v) {
		rc = serve_chat_prompt(s, b, &g, &e);
	} else if (json_object_object_get_ex(b, "prompt", &p) && p) {
		if (!json_object_is_type(p, json_type_string))
			rc = serve_err_set(&e, 400, "prompt", "invalid_type", "'prompt' must be a string");
		else
			rc = serve_set_prompt_text(s, &g, json_object_get_string(p),
						   (size_t)json_object_get_string_len(p), add_special, &e);
		/* tokenizing a long text is fine: only generation needs the context */
		if (rc && e.code && !strcmp(e.code, "context_length_exceeded"))
			rc = 0;
		if (rc && !strcmp(e.msg, "the prompt is empty (no tokens)"))
			rc = 0;
	} else {
		rc = serve_err_set(&e, 400, "prompt", "missing_field", "'prompt' (or 'messages') is required");
	}
	json_object_put(b);
	if (rc) {
		serve_gen_free(&g);
		return serve_reply_err(c, &e);
	}
	json_object *o = json_object_new_object(), *ids = json_object_new_array();
	for (int64_t i = 0; i < g.sp.n_prompt; i++)
		json_object_array_add(ids, json_object_new_int(g.prompt_ids[i]));
	json_object_object_add(o, "tokens", ids);
	json_object_object_add(o, "count", json_object_new_int64(g.sp.n_prompt));
	json_object_object_add(o, "max_model_len", json_object_new_int64(s->ctx));
	serve_gen_free(&g);
	return serve_reply_json(c, 200, o);
}

/* `n` bytes in standard base64 with padding, as a new JSON string. */
static json_object *base64_string(const char *p, size_t n)
{
	static const char abc[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *u = (const unsigned char *)p;
	struct sbuf b = {0};
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)u[i] << 16;
		size_t k = n - i < 3 ? n - i : 3;
		if (k > 1)
			v |= (uint32_t)u[i + 1] << 8;
		if (k > 2)
			v |= u[i + 2];
		char q[4] = {abc[v >> 18], abc[(v >> 12) & 63], k > 1 ? abc[(v >> 6) & 63] : '=',
			     k > 2 ? abc[v & 63] : '='};
		sbuf_add(&b, q, 4);
	}
	json_object *o = json_object_new_string_len(b.p ? b.p : "", (int)b.len);
	sbuf_free(&b);
	return o;
}

/* {"tokens": [...]} to {"prompt": TEXT}: TEXT is valid UTF-8 whatever
 * the ids decode to (a byte that is not UTF-8, such as half of a
 * character split across tokens, becomes U+FFFD, as in completions);
 * with "bytes_base64": true the exact bytes come too, base64-encoded. */
enum MHD_Result serve_detokenize(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	if (!serve_ready(c))
		return MHD_YES;
	json_object *b = serve_parse_body(c, &e), *t, *f;
	if (!b)
		return serve_reply_err(c, &e);
	bool want_bytes = false;
	if (json_object_object_get_ex(b, "bytes_base64", &f) && f) {
		if (!json_object_is_type(f, json_type_boolean)) {
			json_object_put(b);
			return serve_reply_error(c, 400, "bytes_base64", "invalid_type",
						 "'bytes_base64' must be a boolean");
		}
		want_bytes = json_object_get_boolean(f);
	}
	if (!json_object_object_get_ex(b, "tokens", &t) || !t) {
		json_object_put(b);
		return serve_reply_error(c, 400, "tokens", "missing_field", "'tokens' is required");
	}
	if (!json_object_is_type(t, json_type_array)) {
		json_object_put(b);
		return serve_reply_error(c, 400, "tokens", "invalid_type", "'tokens' must be a list of token ids");
	}
	size_t n = json_object_array_length(t);
	int32_t *ids = malloc((n ? n : 1) * sizeof(int32_t));
	int64_t V = atlas_tok_vocab_size(s->tok);
	for (size_t i = 0; ids && i < n; i++) {
		json_object *v = json_object_array_get_idx(t, i);
		int64_t id = json_object_get_int64(v);
		bool is_int = json_object_is_type(v, json_type_int);
		if (!is_int || id < 0 || id >= V) {
			free(ids);
			json_object_put(b);
			if (!is_int)
				return serve_reply_error(c, 400, "tokens", "invalid_type",
							 "'tokens' must be a list of token ids");
			return serve_reply_error(c, 400, "tokens", "invalid_value",
						 "token id %lld is outside the vocabulary (0..%lld)",
						 (long long)id, (long long)V - 1);
		}
		ids[i] = (int32_t)id;
	}
	json_object_put(b);
	char *text;
	size_t len;
	if (!ids || atlas_tok_decode(s->tok, ids, n, &text, &len)) {
		free(ids);
		return serve_reply_error(c, 400, "tokens", "invalid_value", "cannot decode the tokens");
	}
	free(ids);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "prompt", job_utf8(text, len));
	if (want_bytes)
		json_object_object_add(o, "bytes_base64", base64_string(text, len));
	free(text);
	return serve_reply_json(c, 200, o);
}

enum MHD_Result serve_health(struct conn *c)
{
	struct atlas_server *s = c->srv;
	pthread_mutex_lock(&s->mu);
	int st = s->state;
	pthread_mutex_unlock(&s->mu);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "status", json_object_new_string(
		st == 1 ? "ok" : st == 0 ? "loading" : st == -1 ? "failed" : "stopping"));
	return serve_reply_json(c, st == 1 ? 200 : 503, o);
}

enum MHD_Result serve_metrics_route(struct conn *c)
{
	struct sbuf b = {0};
	if (serve_metrics_render(c->srv, &b)) {
		sbuf_free(&b);
		return serve_reply_error(c, 500, NULL, NULL, "cannot render the metrics");
	}
	enum MHD_Result rc = serve_reply_text(c, 200, "text/plain; version=0.0.4; charset=utf-8",
					      b.p ? b.p : "", b.len);
	sbuf_free(&b);
	return rc;
}
