/* api_embed.c - POST /v1/embeddings for embedding models (OpenAI's shape).
 *
 * An embedding model is one whose directory declares sentence-transformers
 * pooling (modules.json with a Pooling module; lib/io/config.h): each
 * input is one scheduler request in pooling mode (scheduler.h), prefilled
 * like a prompt and pooled on the host as its chunks come back, so
 * embedding requests batch with each other like generations do and a
 * vector never depends on its batch-mates (the server runs the backend
 * batch-invariant). A generation model gets a 400 here, and an embedding
 * model a 400 on the generation routes (serve_refuse_embedding): it has
 * no output head.
 *
 * The request: "input" a string, a list of strings, a token-id list or a
 * list of token-id lists (strings are tokenized with the special tokens
 * the tokenizer adds, as sentence-transformers does); "encoding_format"
 * "float" (default) or "base64" (the float32 values' little-endian
 * bytes); "dimensions" keeps the first N values (Matryoshka) and, when
 * the model's vectors are normalized, normalizes what is kept; "model"
 * and "user" are ignored, as on the other routes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "serve_internal.h"

#define EMBED_MAX_INPUTS 2048 /* OpenAI's limit on inputs per request */
#define EMBED_WAIT_MS 100     /* slices of waiting between disconnect checks */

/* One input, tokenized. */
struct embed_in {
	int32_t *ids;	      /* its token ids (owned) */
	int64_t n;	      /* how many */
	struct atlas_sreq *r; /* its scheduler request, while held */
	bool done;	      /* the request finished */
};

/* A parsed request. */
struct embed_req {
	struct embed_in *in; /* the inputs, in order (owned) */
	int n_in;	     /* entries in in */
	bool base64;	     /* encoding_format "base64" */
	int64_t dims;	     /* values per vector to return */
};

static void embed_req_free(struct embed_req *q)
{
	for (int i = 0; i < q->n_in; i++) {
		atlas_sreq_release(q->in[i].r); /* cancels it if still running */
		free(q->in[i].ids);
	}
	free(q->in);
	memset(q, 0, sizeof(*q));
}

int serve_refuse_embedding(struct conn *c)
{
	struct atlas_server *s = c->srv;
	const struct atlas_embed_config *ec = atlas_session_embed(s->ses);
	if (ec->pooling == ATLAS_POOL_NONE)
		return 0;
	serve_reply_error(c, 400, "model", "model_is_embedding",
			  "the model '%s' is an embedding model (%s pooling, no output head): it "
			  "cannot generate; use /v1/embeddings",
			  s->served_name, atlas_pooling_name(ec->pooling));
	return 1;
}

/* A new input slot at the end of q's list; NULL with e set. */
static struct embed_in *push_input(struct embed_req *q, struct serve_err *e)
{
	struct embed_in *in = realloc(q->in, (size_t)(q->n_in + 1) * sizeof(*in));
	if (!in) {
		serve_err_set(e, 500, NULL, NULL, "out of memory");
		return NULL;
	}
	q->in = in;
	memset(&in[q->n_in], 0, sizeof(*in));
	return &in[q->n_in++];
}

/* The context and vocabulary checks of one input's ids. */
static int check_len(struct atlas_server *s, const struct embed_in *in, const char *where,
		     struct serve_err *e)
{
	if (in->n <= 0)
		return serve_err_set(e, 400, "input", "invalid_value", "%s is empty (no tokens)",
				     where);
	if (in->n > s->ctx)
		return serve_err_set(e, 400, "input", "context_length_exceeded",
				     "%s has %lld tokens, more than the context of %lld", where,
				     (long long)in->n, (long long)s->ctx);
	return 0;
}

/* One input: a string or a token-id list (`where` names it in messages). */
static int add_input(struct atlas_server *s, json_object *v, const char *where, struct embed_req *q,
		     struct serve_err *e)
{
	struct embed_in *in = push_input(q, e);
	if (!in)
		return -1;
	if (json_object_is_type(v, json_type_string)) {
		size_t len = (size_t)json_object_get_string_len(v), n = 0;
		if (!len)
			return serve_err_set(e, 400, "input", "invalid_value",
					     "%s is an empty string", where);
		if (atlas_tok_encode(s->tok, json_object_get_string(v), len, true, &in->ids, &n))
			return serve_err_set(e, 400, "input", "invalid_value",
					     "cannot tokenize %s: %s", where, atlas_errmsg());
		in->n = (int64_t)n;
		return check_len(s, in, where, e);
	}
	if (!json_object_is_type(v, json_type_array))
		return serve_err_set(e, 400, "input", "invalid_type",
				     "%s must be a string or a list of token ids", where);
	size_t n = json_object_array_length(v);
	int64_t V = atlas_tok_vocab_size(s->tok), Vm = atlas_model_config(s->model)->vocab_size;
	if (Vm < V)
		V = Vm;
	if (!(in->ids = malloc((n ? n : 1) * sizeof(int32_t))))
		return serve_err_set(e, 500, NULL, NULL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_object *t = json_object_array_get_idx(v, i);
		if (!json_object_is_type(t, json_type_int))
			return serve_err_set(e, 400, "input", "invalid_type",
					     "a token-id list in %s must hold only integers",
					     where);
		int64_t id = json_object_get_int64(t);
		if (id < 0 || id >= V)
			return serve_err_set(
			    e, 400, "input", "invalid_value",
			    "token id %lld in %s is outside the vocabulary (0..%lld)",
			    (long long)id, where, (long long)V - 1);
		in->ids[i] = (int32_t)id;
	}
	in->n = (int64_t)n;
	return check_len(s, in, where, e);
}

/* "input": a string, a token-id list, or a list of either (one kind). */
static int parse_input(struct atlas_server *s, json_object *b, struct embed_req *q,
		       struct serve_err *e)
{
	json_object *p;
	if (!json_object_object_get_ex(b, "input", &p) || !p)
		return serve_err_set(e, 400, "input", "missing_field", "'input' is required");
	if (json_object_is_type(p, json_type_string))
		return add_input(s, p, "'input'", q, e);
	if (!json_object_is_type(p, json_type_array))
		return serve_err_set(e, 400, "input", "invalid_type",
				     "'input' must be a string, a list of strings, a list of token "
				     "ids or a list of token-id lists");
	size_t n = json_object_array_length(p);
	if (!n)
		return serve_err_set(e, 400, "input", "invalid_value", "'input' is an empty list");
	json_object *first = json_object_array_get_idx(p, 0);
	bool strings = json_object_is_type(first, json_type_string);
	if (!strings && !json_object_is_type(first, json_type_array))
		return add_input(s, p, "'input'", q, e); /* one list of token ids */
	if (n > EMBED_MAX_INPUTS)
		return serve_err_set(e, 400, "input", "invalid_value",
				     "'input' has %zu entries, more than %d", n, EMBED_MAX_INPUTS);
	for (size_t i = 0; i < n; i++) {
		json_object *v = json_object_array_get_idx(p, i);
		char where[48];
		snprintf(where, sizeof(where), "'input[%zu]'", i);
		if (json_object_is_type(v, json_type_string) != strings ||
		    json_object_is_type(v, json_type_array) == strings)
			return serve_err_set(e, 400, "input", "invalid_type",
					     "%s must be %s (as 'input[0]' is)", where,
					     strings ? "a string" : "a list of token ids");
		if (add_input(s, v, where, q, e))
			return -1;
	}
	return 0;
}

/* encoding_format and dimensions. */
static int parse_options(struct atlas_server *s, json_object *b, struct embed_req *q,
			 struct serve_err *e)
{
	json_object *v;
	int64_t D = atlas_model_config(s->model)->hidden_size;
	q->dims = D;
	if (json_object_object_get_ex(b, "encoding_format", &v) && v) {
		const char *f = json_object_get_string(v);
		if (!json_object_is_type(v, json_type_string))
			return serve_err_set(e, 400, "encoding_format", "invalid_type",
					     "'encoding_format' must be a string");
		if (!strcmp(f, "base64"))
			q->base64 = true;
		else if (strcmp(f, "float"))
			return serve_err_set(
			    e, 400, "encoding_format", "invalid_value",
			    "'encoding_format' must be 'float' or 'base64', not '%.40s'", f);
	}
	if (json_object_object_get_ex(b, "dimensions", &v) && v) {
		if (!json_object_is_type(v, json_type_int))
			return serve_err_set(e, 400, "dimensions", "invalid_type",
					     "'dimensions' must be an integer");
		int64_t d = json_object_get_int64(v);
		if (d < 1 || d > D)
			return serve_err_set(
			    e, 400, "dimensions", "invalid_value",
			    "'dimensions' must be in [1, %lld] (the model's hidden "
			    "size), not %lld",
			    (long long)D, (long long)d);
		q->dims = d;
	}
	return 0;
}

/* Submit every input; on a failure the ones submitted are released by
 * embed_req_free and e says why. */
static int submit(struct atlas_server *s, struct embed_req *q, struct serve_err *e)
{
	const struct atlas_embed_config *ec = atlas_session_embed(s->ses);
	struct atlas_sreq_params sp = {
	    .top_logprobs = -1, .pool = ec->pooling, .normalize = ec->normalize};
	for (int i = 0; i < q->n_in; i++) {
		sp.prompt = q->in[i].ids;
		sp.n_prompt = q->in[i].n;
		int rc = atlas_sched_submit(s->sched, &sp, &q->in[i].r);
		if (!rc)
			continue;
		q->in[i].r = NULL;
		return serve_err_set(e,
				     rc == ATLAS_EIO	  ? 503
				     : rc == ATLAS_ENOMEM ? 500
							  : 400,
				     rc == ATLAS_ERANGE ? "input" : NULL,
				     rc == ATLAS_ERANGE ? "context_length_exceeded"
				     : rc == ATLAS_EIO	? "server_shutting_down"
							: NULL,
				     "'input[%d]': %s", i, atlas_errmsg());
	}
	return 0;
}

/* Wait for every input's vector. 0; 1 when the client went away (nobody
 * to answer); -1 with e set (shutdown, an engine failure). The client is
 * looked for every EMBED_WAIT_MS, whether or not vectors keep coming: a
 * long list finishes input by input, and a client that left should free
 * the engine from the rest at once. */
static int wait_all(struct conn *c, struct embed_req *q, struct serve_err *e)
{
	struct atlas_server *s = c->srv;
	double next_check = serve_now() + EMBED_WAIT_MS / 1e3;
	for (int i = 0; i < q->n_in; i++) {
		struct embed_in *in = &q->in[i];
		while (!in->done) {
			if (__atomic_load_n(&s->cut, __ATOMIC_ACQUIRE))
				return serve_err_set(e, 503, NULL, "server_shutting_down",
						     "the server is shutting down; the request was "
						     "cancelled");
			struct atlas_sched_chunk ch;
			atlas_sreq_take(in->r, EMBED_WAIT_MS, &ch);
			in->done = ch.done;
			atlas_sched_chunk_free(&ch);
			if (serve_now() < next_check)
				continue;
			next_check = serve_now() + EMBED_WAIT_MS / 1e3;
			/* the connection is suspended while this worker runs: ours to poll */
			if (serve_client_gone(c->mc))
				return 1;
		}
		struct atlas_sreq_result res;
		atlas_sreq_result(in->r, &res);
		if (res.rc)
			return serve_err_set(e, 500, NULL, NULL, "embedding failed: %s", res.error);
		if (res.finish == ATLAS_FINISH_CANCELLED)
			return serve_err_set(e, 503, NULL, "server_shutting_down",
					     "the request was cancelled by the server");
	}
	return 0;
}

/* `n` floats as a base64 string of their little-endian float32 bytes
 * (what OpenAI's clients decode with Float32Array / numpy frombuffer). */
static json_object *base64_floats(const float *v, int64_t n)
{
	static const char abc[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t nb = (size_t)n * 4, out = 0;
	unsigned char *b = malloc(nb ? nb : 1);
	char *t = malloc((nb + 2) / 3 * 4 + 1);
	json_object *o = NULL;
	if (!b || !t)
		goto done;
	for (int64_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &v[i], 4);
		for (int k = 0; k < 4; k++)
			b[i * 4 + k] = (unsigned char)(u >> (8 * k));
	}
	for (size_t i = 0; i < nb; i += 3) {
		size_t k = nb - i < 3 ? nb - i : 3;
		uint32_t w = (uint32_t)b[i] << 16 | (k > 1 ? (uint32_t)b[i + 1] << 8 : 0) |
			     (k > 2 ? b[i + 2] : 0);
		t[out++] = abc[w >> 18];
		t[out++] = abc[(w >> 12) & 63];
		t[out++] = k > 1 ? abc[(w >> 6) & 63] : '=';
		t[out++] = k > 2 ? abc[w & 63] : '=';
	}
	t[out] = '\0';
	o = json_object_new_string_len(t, (int)out);
done:
	free(b);
	free(t);
	return o;
}

/* The "embedding" value of one vector `v` of the model's full size: its
 * first q->dims values, normalized again when truncated and the model's
 * vectors are normalized. NULL when out of memory. */
static json_object *embedding_value(struct atlas_server *s, const struct embed_req *q, float *v,
				    int64_t D)
{
	if (q->dims < D && atlas_session_embed(s->ses)->normalize) {
		double ss = 0;
		for (int64_t d = 0; d < q->dims; d++)
			ss += (double)v[d] * v[d];
		double k = 1.0 / fmax(sqrt(ss), 1e-12);
		for (int64_t d = 0; d < q->dims; d++)
			v[d] = (float)(v[d] * k);
	}
	if (q->base64)
		return base64_floats(v, q->dims);
	json_object *a = json_object_new_array_ext((int)q->dims);
	for (int64_t d = 0; a && d < q->dims; d++) {
		/* nine significant digits give back the float32 exactly */
		char num[32];
		snprintf(num, sizeof(num), "%.9g", isfinite(v[d]) ? v[d] : 0.0f);
		json_object_array_add(a, json_object_new_double_s(v[d], num));
	}
	return a;
}

/* The response body: the vectors in input order and the token usage. */
static json_object *response(struct atlas_server *s, struct embed_req *q, int64_t *tokens)
{
	int64_t D = atlas_model_config(s->model)->hidden_size;
	float *v = malloc((size_t)D * sizeof(float));
	json_object *o = json_object_new_object(), *data = json_object_new_array();
	*tokens = 0;
	for (int i = 0; v && i < q->n_in; i++) {
		json_object *item = json_object_new_object();
		memset(v, 0, (size_t)D * sizeof(float));
		atlas_sreq_embedding(q->in[i].r, v, D);
		json_object_object_add(item, "object", json_object_new_string("embedding"));
		json_object_object_add(item, "index", json_object_new_int(i));
		json_object_object_add(item, "embedding", embedding_value(s, q, v, D));
		json_object_array_add(data, item);
		*tokens += q->in[i].n;
	}
	free(v);
	json_object_object_add(o, "object", json_object_new_string("list"));
	json_object_object_add(o, "data", data);
	json_object_object_add(o, "model", json_object_new_string(s->served_name));
	json_object *u = json_object_new_object();
	json_object_object_add(u, "prompt_tokens", json_object_new_int64(*tokens));
	json_object_object_add(u, "total_tokens", json_object_new_int64(*tokens));
	json_object_object_add(o, "usage", u);
	return o;
}

enum MHD_Result serve_embeddings(struct conn *c)
{
	struct atlas_server *s = c->srv;
	struct serve_err e;
	struct embed_req q = {0};
	if (!serve_ready(c))
		return MHD_YES;
	const struct atlas_embed_config *ec = atlas_session_embed(s->ses);
	if (ec->pooling == ATLAS_POOL_NONE)
		return serve_reply_error(
		    c, 400, "model", "model_not_embedding",
		    "the model '%s' is not an embedding model (it has no "
		    "sentence-transformers pooling config: modules.json with a "
		    "Pooling module), so /v1/embeddings is not available",
		    s->served_name);
	json_object *b = serve_parse_body(c, &e);
	if (!b)
		return serve_reply_err(c, &e);
	int rc = parse_input(s, b, &q, &e);
	if (!rc)
		rc = parse_options(s, b, &q, &e);
	json_object_put(b);
	if (!rc && s->parse_only) {
		/* the fuzzing entry point: everything up to submission */
		embed_req_free(&q);
		return serve_reply_json(c, 200, json_object_new_object());
	}
	double t0 = serve_now();
	if (!rc)
		rc = submit(s, &q, &e);
	if (!rc)
		rc = wait_all(c, &q, &e);
	if (rc > 0)
		serve_log("embeddings: the client went away; %d input%s cancelled", q.n_in,
			  q.n_in == 1 ? "" : "s");
	if (rc) {
		embed_req_free(&q);
		return rc > 0 ? MHD_NO : serve_reply_err(c, &e);
	}
	int64_t tokens;
	json_object *o = response(s, &q, &tokens);
	serve_limits_charge(&s->limits, c->client, tokens);
	char id[64];
	serve_new_id(s, "embd-", id, sizeof(id));
	serve_log("%s: %d input%s, %lld token%s, %s pooling, total %.1f ms", id, q.n_in,
		  q.n_in == 1 ? "" : "s", (long long)tokens, tokens == 1 ? "" : "s",
		  atlas_pooling_name(ec->pooling), (serve_now() - t0) * 1e3);
	embed_req_free(&q);
	return serve_reply_json(c, 200, o);
}
