/* loadgen.c - streaming completion requests through libcurl, one easy
 * handle (one connection) per request, `concurrency` threads taking
 * requests from a shared counter. The SSE stream is cut into events at
 * blank lines; each "data:" event with a choice is one output token (the
 * usage chunk, when sent, corrects the count), "[DONE]" ends it. */
#include "loadgen.h"

#include <curl/curl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "bench.h"

/* One request's stream state. */
struct req {
	char *buf;              /* bytes not yet cut into events */
	size_t len, cap;        /* used and allocated */
	double t0, first, last; /* send time, first and last token times */
	int64_t tokens;         /* tokens seen */
	int64_t usage;          /* completion_tokens of the usage chunk, or -1 */
	bool done;              /* "[DONE]" seen */
	char err[160];          /* an error event's message */
};

/* The shared state of one level. */
struct level {
	const struct atlas_loadgen_params *p; /* parameters */
	atomic_llong next;      /* next request index */
	pthread_mutex_t mu;     /* guards the fields below */
	double *ttft, *tpot, *e2e; /* per ok request */
	int64_t ok, errors, tokens; /* counts */
	char first_error[160];  /* first failure */
};

static void event(struct req *q, const char *data)
{
	if (!strcmp(data, "[DONE]")) {
		q->done = true;
		return;
	}
	json_object *o = json_tokener_parse(data), *v, *u;
	if (!o)
		return;
	if (json_object_object_get_ex(o, "error", &v) && !q->err[0])
		snprintf(q->err, sizeof(q->err), "%s", json_object_to_json_string(v));
	if (json_object_object_get_ex(o, "choices", &v) && json_object_array_length(v) > 0) {
		double t = atlas_bench_now_ms();
		if (!q->tokens)
			q->first = t;
		q->last = t;
		q->tokens++;
	}
	if (json_object_object_get_ex(o, "usage", &v) && v &&
	    json_object_object_get_ex(v, "completion_tokens", &u))
		q->usage = json_object_get_int64(u);
	json_object_put(o);
}

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
	struct req *q = ud;
	size_t add = sz * n;
	if (q->len + add + 1 > q->cap) {
		size_t cap = (q->len + add + 1) * 2;
		char *nb = realloc(q->buf, cap);
		if (!nb)
			return 0;
		q->buf = nb, q->cap = cap;
	}
	memcpy(q->buf + q->len, p, add);
	q->len += add;
	q->buf[q->len] = 0;
	char *s = q->buf, *end;
	while ((end = strstr(s, "\n\n"))) { /* one event per blank line */
		*end = 0;
		for (char *line = s; line && *line;) {
			char *nl = strchr(line, '\n');
			if (nl)
				*nl = 0;
			if (!strncmp(line, "data:", 5))
				event(q, line + 5 + (line[5] == ' '));
			line = nl ? nl + 1 : NULL;
		}
		s = end + 2;
	}
	q->len -= (size_t)(s - q->buf);
	memmove(q->buf, s, q->len + 1);
	return add;
}

static char *body(const struct atlas_loadgen_params *p, int64_t idx)
{
	json_object *o = json_object_new_object(), *a = json_object_new_array();
	uint64_t st = p->seed * 0x9e3779b97f4a7c15ull + (uint64_t)idx * 7919 + 1;
	for (int64_t i = 0; i < p->prompt; i++) {
		st = st * 6364136223846793005ull + 1442695040888963407ull;
		json_object_array_add(a, json_object_new_int64((int64_t)((st >> 33) %
									  (uint64_t)p->vocab)));
	}
	json_object *so = json_object_new_object();
	json_object_object_add(so, "include_usage", json_object_new_boolean(1));
	json_object_object_add(o, "model", json_object_new_string(p->model ? p->model : ""));
	json_object_object_add(o, "prompt", a);
	json_object_object_add(o, "max_tokens", json_object_new_int64(p->output));
	json_object_object_add(o, "temperature", json_object_new_double(0));
	json_object_object_add(o, "ignore_eos", json_object_new_boolean(1));
	json_object_object_add(o, "stream", json_object_new_boolean(1));
	json_object_object_add(o, "stream_options", so);
	char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return s;
}

/* Run request idx; on failure fill err. */
static void one(struct level *L, int64_t idx)
{
	const struct atlas_loadgen_params *p = L->p;
	struct req q = {.usage = -1};
	char url[1024], auth[512], err[CURL_ERROR_SIZE] = "";
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	char *b = body(p, idx);
	long code = 0;
	CURL *c = curl_easy_init();
	snprintf(url, sizeof(url), "%s/v1/completions", p->url);
	if (p->api_key) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", p->api_key);
		h = curl_slist_append(h, auth);
	}
	CURLcode cr = CURLE_OUT_OF_MEMORY;
	if (c && b && h) {
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, b);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &q);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)p->timeout_s);
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
		curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
		q.t0 = atlas_bench_now_ms();
		cr = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	}
	double end = atlas_bench_now_ms();
	char why[160] = "";
	if (cr != CURLE_OK)
		snprintf(why, sizeof(why), "%s", err[0] ? err : curl_easy_strerror(cr));
	else if (code != 200)
		snprintf(why, sizeof(why), "HTTP %ld: %.120s", code, q.buf ? q.buf : "");
	else if (q.err[0])
		snprintf(why, sizeof(why), "%s", q.err);
	else if (!q.done || !q.tokens)
		snprintf(why, sizeof(why), "the stream ended without [DONE] or tokens");
	int64_t toks = q.usage >= 0 ? q.usage : q.tokens;
	pthread_mutex_lock(&L->mu);
	if (why[0]) {
		if (!L->errors)
			snprintf(L->first_error, sizeof(L->first_error), "%s", why);
		L->errors++;
	} else {
		L->ttft[L->ok] = q.first - q.t0;
		L->tpot[L->ok] = toks > 1 ? (q.last - q.first) / (double)(toks - 1) : 0;
		L->e2e[L->ok] = end - q.t0;
		L->tokens += toks;
		L->ok++;
	}
	pthread_mutex_unlock(&L->mu);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	free(b);
	free(q.buf);
}

static void *worker(void *arg)
{
	struct level *L = arg;
	for (;;) {
		long long i = atomic_fetch_add(&L->next, 1);
		if (i >= L->p->requests)
			return NULL;
		one(L, i);
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n]. */
static double pct(const double *v, int64_t n, double q)
{
	if (n <= 0)
		return 0;
	int64_t k = (int64_t)(q / 100.0 * (double)n + 0.999999);
	k = k < 1 ? 1 : k > n ? n : k;
	return v[k - 1];
}

int atlas_loadgen_probe(const char *url, int64_t timeout_s, long *status)
{
	char u[1024], err[CURL_ERROR_SIZE] = "";
	CURL *c = curl_easy_init();
	if (!c)
		return atlas_error(ATLAS_ENOMEM, "cannot start libcurl");
	snprintf(u, sizeof(u), "%s/health", url);
	curl_easy_setopt(c, CURLOPT_URL, u);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)timeout_s);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, NULL);
	FILE *null = fopen("/dev/null", "w");
	curl_easy_setopt(c, CURLOPT_WRITEDATA, null);
	CURLcode cr = curl_easy_perform(c);
	*status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(c);
	if (null)
		fclose(null);
	if (cr != CURLE_OK)
		return atlas_error(ATLAS_EIO, "cannot reach '%s': %s", url,
				   err[0] ? err : curl_easy_strerror(cr));
	return 0;
}

int atlas_loadgen_metric(const char *url, const char *api_key, const char *name,
			 int64_t timeout_s, double *value)
{
	char u[1024], auth[512], err[CURL_ERROR_SIZE] = "";
	char *text = NULL;
	size_t len = 0;
	struct curl_slist *h = NULL;
	long status = 0;
	size_t nl = strlen(name);
	int found = 0;
	FILE *f = open_memstream(&text, &len);
	CURL *c = curl_easy_init();
	if (!c || !f) {
		if (c)
			curl_easy_cleanup(c);
		if (f)
			fclose(f);
		free(text);
		return atlas_error(ATLAS_ENOMEM, "cannot start libcurl");
	}
	snprintf(u, sizeof(u), "%s/metrics", url);
	if (api_key) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", api_key);
		h = curl_slist_append(NULL, auth);
	}
	curl_easy_setopt(c, CURLOPT_URL, u);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)timeout_s);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, NULL); /* fwrite into f */
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	CURLcode cr = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	fclose(f);
	if (cr != CURLE_OK) {
		free(text);
		return atlas_error(ATLAS_EIO, "cannot reach '%s': %s", u,
				   err[0] ? err : curl_easy_strerror(cr));
	}
	/* Prometheus text: "NAME VALUE" on a line of its own */
	char *l = status == 200 ? text : NULL;
	while (l && *l && !found) {
		if (!strncmp(l, name, nl) && l[nl] == ' ') {
			char *end;
			*value = strtod(l + nl + 1, &end);
			found = end != l + nl + 1;
		}
		if ((l = strchr(l, '\n')))
			l++;
	}
	free(text);
	return found;
}

int atlas_loadgen_run(const struct atlas_loadgen_params *p, struct atlas_loadgen_result *r)
{
	struct level L = {.p = p};
	int64_t nt = p->concurrency < p->requests ? p->concurrency : p->requests, started = 0;
	pthread_t *th = calloc((size_t)nt, sizeof(*th));
	int rc = 0;
	memset(r, 0, sizeof(*r));
	r->concurrency = p->concurrency, r->requests = p->requests;
	r->prompt = p->prompt, r->output = p->output;
	L.ttft = calloc((size_t)p->requests, sizeof(double));
	L.tpot = calloc((size_t)p->requests, sizeof(double));
	L.e2e = calloc((size_t)p->requests, sizeof(double));
	pthread_mutex_init(&L.mu, NULL);
	if (!th || !L.ttft || !L.tpot || !L.e2e)
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
	double t0 = atlas_bench_now_ms();
	for (; !rc && started < nt; started++)
		if (pthread_create(&th[started], NULL, worker, &L))
			rc = atlas_error(ATLAS_EIO, "cannot start request threads");
	for (int64_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	r->wall_s = (atlas_bench_now_ms() - t0) / 1e3;
	if (!rc) {
		r->ok = L.ok, r->errors = L.errors, r->tokens = L.tokens;
		snprintf(r->first_error, sizeof(r->first_error), "%s", L.first_error);
		r->throughput = r->wall_s > 0 ? (double)L.tokens / r->wall_s : 0;
		r->req_s = r->wall_s > 0 ? (double)L.ok / r->wall_s : 0;
		qsort(L.ttft, (size_t)L.ok, sizeof(double), cmp_d);
		qsort(L.tpot, (size_t)L.ok, sizeof(double), cmp_d);
		qsort(L.e2e, (size_t)L.ok, sizeof(double), cmp_d);
		r->ttft_p50 = pct(L.ttft, L.ok, 50), r->ttft_p90 = pct(L.ttft, L.ok, 90);
		r->ttft_p99 = pct(L.ttft, L.ok, 99);
		r->tpot_p50 = pct(L.tpot, L.ok, 50), r->tpot_p99 = pct(L.tpot, L.ok, 99);
		r->e2e_p50 = pct(L.e2e, L.ok, 50);
	}
	pthread_mutex_destroy(&L.mu);
	free(th);
	free(L.ttft);
	free(L.tpot);
	free(L.e2e);
	return rc;
}
