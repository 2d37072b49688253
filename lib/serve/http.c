/* http.c - the HTTP side of atlas-serve: the libmicrohttpd daemon (epoll
 * in a small pool of threads, so thousands of idle connections cost only
 * their sockets; the gate in server.c hands it the connections), the
 * syntax check of a first request head for the gate, the checks on a
 * request head (origin, API key, framing, size, rate limits), the body
 * with its size limit, routing with 404/405/415, CORS, and JSON replies. POST routes run in a worker
 * thread each while their connection is suspended, so a long generation
 * never holds a pool thread. The engine thread (model load, scheduler)
 * is in server.c. */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "../core/error.h"
#include "serve_internal.h"

int sbuf_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int sbuf_printf(struct sbuf *b, const char *fmt, ...)
{
	char small[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return atlas_error(ATLAS_EINVAL, "bad format");
	if ((size_t)n < sizeof(small))
		return sbuf_add(b, small, (size_t)n);
	char *big = malloc((size_t)n + 1);
	if (!big)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	int rc = sbuf_add(b, big, (size_t)n);
	free(big);
	return rc;
}

void sbuf_free(struct sbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void serve_log(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "atlas-serve: %s\n", line);
}

void serve_new_id(struct atlas_server *s, const char *prefix, char *out, size_t cap)
{
	uint64_t n = __atomic_add_fetch(&s->next_id, 1, __ATOMIC_RELAXED);
	snprintf(out, cap, "%s%08llx%06llx", prefix, (unsigned long long)s->created & 0xffffffffull,
		 (unsigned long long)n);
}

double serve_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The headers every reply gets: CORS for an allowed origin, Retry-After,
 * Connection: close on a framing error or while stopping. */
static void common_headers(struct conn *c, struct MHD_Response *r)
{
	struct atlas_server *s = c->srv;
	if (c->origin) {
		MHD_add_response_header(r, "Access-Control-Allow-Origin", c->origin);
		MHD_add_response_header(r, "Vary", "Origin");
	}
	if (c->retry_after) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%u", c->retry_after);
		MHD_add_response_header(r, "Retry-After", ra);
	}
	if (c->close || __atomic_load_n(&s->quiesced, __ATOMIC_ACQUIRE))
		MHD_add_response_header(r, "Connection", "close");
}

enum MHD_Result serve_queue(struct conn *c, unsigned status, struct MHD_Response *r)
{
	if (!r)
		return MHD_NO;
	common_headers(c, r);
	c->answered = true;
	c->status = status;
	serve_metrics_status(&c->srv->metrics, status);
	if (c->worker) {
		/* a worker thread: the pool thread queues it after the handoff */
		if (c->pending)
			MHD_destroy_response(c->pending);
		c->pending = r;
		c->pending_status = status;
		return MHD_YES;
	}
	if (!c->mc) {
		/* parse-only (fuzzing): nobody to send it to */
		MHD_destroy_response(r);
		return MHD_YES;
	}
	enum MHD_Result rc = MHD_queue_response(c->mc, status, r);
	MHD_destroy_response(r);
	return rc;
}

enum MHD_Result serve_reply_text(struct conn *c, unsigned status, const char *ctype,
				 const char *text, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)text,
								 MHD_RESPMEM_MUST_COPY);
	if (r)
		MHD_add_response_header(r, "Content-Type", ctype);
	return serve_queue(c, status, r);
}

enum MHD_Result serve_reply_json(struct conn *c, unsigned status, json_object *obj)
{
	size_t len;
	const char *s = json_object_to_json_string_length(
		obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	enum MHD_Result rc = serve_reply_text(c, status, "application/json", s, len);
	json_object_put(obj);
	return rc;
}

static const char *error_type(enum serve_api api, unsigned status)
{
	switch (status) {
	case 400: return "invalid_request_error";
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 405: return "invalid_request_error";
	case 413: return "request_too_large";
	case 429: return "rate_limit_error";
	case 501: return "invalid_request_error";
	case 503: return api == API_ANTHROPIC ? "overloaded_error" : "service_unavailable";
	case 505: return "invalid_request_error";
	default:
		if (status >= 400 && status < 500)
			return "invalid_request_error";
		return api == API_ANTHROPIC ? "api_error" : "server_error";
	}
}

json_object *serve_error_body(enum serve_api api, unsigned status, const char *param,
			      const char *code, const char *msg)
{
	json_object *err = json_object_new_object();
	json_object_object_add(err, "message", json_object_new_string(msg));
	json_object_object_add(err, "type", json_object_new_string(error_type(api, status)));
	json_object_object_add(err, "param", param ? json_object_new_string(param) : NULL);
	json_object_object_add(err, "code", code ? json_object_new_string(code) : NULL);
	json_object *o = json_object_new_object();
	if (api == API_ANTHROPIC)
		json_object_object_add(o, "type", json_object_new_string("error"));
	json_object_object_add(o, "error", err);
	return o;
}

static enum MHD_Result reply_error_msg(struct conn *c, unsigned status, const char *param,
				       const char *code, const char *msg)
{
	return serve_reply_json(c, status, serve_error_body(c->api, status, param, code, msg));
}

enum MHD_Result serve_reply_error(struct conn *c, unsigned status, const char *param,
				  const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return reply_error_msg(c, status, param, code, msg);
}

enum MHD_Result serve_reply_err(struct conn *c, const struct serve_err *e)
{
	return reply_error_msg(c, e->status, e->param, e->code, e->msg);
}

int serve_ready(struct conn *c)
{
	struct atlas_server *s = c->srv;
	pthread_mutex_lock(&s->mu);
	int st = s->state;
	pthread_mutex_unlock(&s->mu);
	if (st == 1)
		return 1;
	serve_reply_error(c, 503, NULL, NULL,
			  st == 0 ? "the model is still loading" : "the server is not available");
	return 0;
}

bool serve_client_gone(struct MHD_Connection *mc)
{
	if (!mc)
		return false;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return false;
	struct pollfd pf = {.fd = ci->connect_fd, .events = POLLRDHUP};
	if (poll(&pf, 1, 0) <= 0)
		return false;
	return (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

static const char *header(struct conn *c, const char *name)
{
	return c->mc ? MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, name) : NULL;
}

/* --- who may call: keys, origins ---------------------------------------- */

/* Constant-time comparison of the offered key with one of the server's. */
static bool key_matches(const char *want, const char *got)
{
	size_t wl = strlen(want), gl = strlen(got);
	unsigned char diff = (unsigned char)(wl != gl);
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
	return diff == 0;
}

/* The index of the key the request offers, -1 for none or a wrong one.
 * Every key is compared, so the time does not say which one matched. */
static int key_index(struct conn *c)
{
	struct atlas_server *s = c->srv;
	const char *auth = header(c, "Authorization");
	const char *xkey = header(c, "x-api-key");
	int found = -1;
	for (int i = 0; i < s->n_api_keys; i++) {
		bool ok = false;
		if (auth && !strncasecmp(auth, "Bearer ", 7))
			ok |= key_matches(s->api_keys[i], auth + 7);
		if (xkey)
			ok |= key_matches(s->api_keys[i], xkey);
		if (ok && found < 0)
			found = i;
	}
	return found;
}

/* Who the rate limits count this request against: its key, or without
 * keys its address. */
static void set_client(struct conn *c, int key)
{
	if (key >= 0) {
		snprintf(c->client, sizeof(c->client), "key %d", key);
		return;
	}
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	char host[INET6_ADDRSTRLEN] = "?";
	if (ci && ci->client_addr) {
		const struct sockaddr *sa = ci->client_addr;
		if (sa->sa_family == AF_INET)
			inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, host,
				  sizeof(host));
		else if (sa->sa_family == AF_INET6)
			inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, host,
				  sizeof(host));
	}
	snprintf(c->client, sizeof(c->client), "addr %s", host);
}

/* The origin as --allowed-origins lists it, or NULL. */
static const char *allowed_origin(struct atlas_server *s, const char *origin)
{
	for (int i = 0; i < s->n_origins; i++) {
		if (!strcmp(s->origins[i], "*"))
			return "*";
		if (!strcasecmp(s->origins[i], origin))
			return s->origins[i];
	}
	return NULL;
}

/* Is the body declared JSON? application/json, parameters such as charset
 * allowed. Every other type is refused, curl -d's default
 * application/x-www-form-urlencoded included: a web page can send that (and
 * text/plain, multipart/form-data) without a CORS preflight. */
static bool json_body(struct conn *c, const char **ct_out)
{
	static const char json[] = "application/json";
	const char *ct = header(c, "Content-Type");
	*ct_out = ct ? ct : "";
	if (!ct)
		return false;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	size_t n = sizeof(json) - 1;
	return !strncasecmp(ct, json, n) && (!ct[n] || strchr("; \t", ct[n]));
}

/* --- routes ------------------------------------------------------------- */

/* The routes: path, method, handler (POST handlers read c->body and run
 * in a worker thread). */
struct route {
	const char *path;             /* exact path */
	const char *method;           /* "GET" or "POST" */
	enum MHD_Result (*fn)(struct conn *c);
	enum serve_api api;           /* error shape */
};

static enum MHD_Result models_all(struct conn *c)
{
	return serve_models(c, NULL);
}

static const struct route routes[] = {
	{"/v1/chat/completions", "POST", serve_chat_completions, API_OPENAI},
	{"/v1/completions", "POST", serve_completions, API_OPENAI},
	{"/v1/messages", "POST", serve_messages, API_ANTHROPIC},
	{"/v1/messages/count_tokens", "POST", serve_count_tokens, API_ANTHROPIC},
	{"/v1/embeddings", "POST", serve_embeddings, API_OPENAI},
	{"/v1/models", "GET", models_all, API_OPENAI},
	{"/tokenize", "POST", serve_tokenize, API_OPENAI},
	{"/detokenize", "POST", serve_detokenize, API_OPENAI},
	{"/health", "GET", serve_health, API_OPENAI},
	{"/metrics", "GET", serve_metrics_route, API_OPENAI},
};
#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))

static const struct route *find_route(const char *url)
{
	for (size_t i = 0; i < N_ROUTES; i++)
		if (!strcmp(url, routes[i].path))
			return &routes[i];
	return NULL;
}

static bool known_path(const char *url)
{
	return find_route(url) || !strncmp(url, "/v1/models/", 11);
}

static bool is_post_route(const char *url)
{
	const struct route *r = find_route(url);
	return r && !strcmp(r->method, "POST");
}

/* A worker thread runs one POST route while its connection is suspended. */
struct serve_worker {
	struct conn *c;               /* the request, until handed back */
	enum MHD_Result (*fn)(struct conn *c); /* its route */
	bool handed;                  /* c went back to MHD (serve_handoff) */
};

static void worker_exit(struct atlas_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->n_workers--;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void serve_handoff(struct conn *c)
{
	struct serve_worker *w = c->worker;
	struct MHD_Connection *mc = c->mc;
	c->worker = NULL;
	w->handed = true;
	/* the pool thread now calls on_request, which queues c->pending (or
	 * closes the connection when there is none) */
	MHD_resume_connection(mc);
}

static void *worker_main(void *arg)
{
	struct serve_worker *w = arg;
	struct atlas_server *s = w->c->srv;
	w->fn(w->c);
	if (!w->handed)
		serve_handoff(w->c);
	free(w);
	worker_exit(s);
	return NULL;
}

/* Run fn in a worker thread: libmicrohttpd's pool threads serve every
 * other connection meanwhile. Refused with 429 over --max-concurrent-requests. */
static enum MHD_Result start_worker(struct conn *c, enum MHD_Result (*fn)(struct conn *c))
{
	struct atlas_server *s = c->srv;
	pthread_mutex_lock(&s->mu);
	bool busy = s->p.max_concurrent > 0 && s->n_workers >= s->p.max_concurrent;
	if (!busy)
		s->n_workers++;
	pthread_mutex_unlock(&s->mu);
	if (busy) {
		c->retry_after = 1;
		return serve_reply_error(c, 429, NULL, "too_many_requests",
					 "the server is handling %d requests, its limit "
					 "(--max-concurrent-requests); retry later", s->p.max_concurrent);
	}
	struct serve_worker *w = calloc(1, sizeof(*w));
	pthread_attr_t at;
	pthread_t t;
	int rc = -1;
	if (w) {
		w->c = c;
		w->fn = fn;
		c->worker = w;
		c->deferred = true;
		MHD_suspend_connection(c->mc);
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&t, &at, worker_main, w);
		pthread_attr_destroy(&at);
		if (rc) {
			c->worker = NULL;
			c->deferred = false;
			MHD_resume_connection(c->mc);
		}
	}
	if (rc) {
		free(w);
		worker_exit(s);
		return serve_reply_error(c, 503, NULL, NULL, "cannot start a handler thread");
	}
	return MHD_YES;
}

static enum MHD_Result dispatch(struct conn *c, const char *url, const char *method)
{
	bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	const struct route *r = find_route(url);
	if (r) {
		c->api = r->api;
		if (strcmp(method, r->method) && !(is_get && !strcmp(r->method, "GET")))
			return serve_reply_error(c, 405, NULL, "method_not_allowed",
						 "method %s is not allowed on '%s' (use %s)",
						 method, url, r->method);
		if (strcmp(r->method, "POST"))
			return r->fn(c);
		const char *ct;
		if (c->body.len && !json_body(c, &ct))
			return serve_reply_error(c, 415, NULL, "unsupported_media_type",
						 "the request body must be JSON, sent with "
						 "'Content-Type: application/json' (not '%.100s')", ct);
		return start_worker(c, r->fn);
	}
	if (!strncmp(url, "/v1/models/", 11)) {
		if (!is_get)
			return serve_reply_error(c, 405, NULL, "method_not_allowed",
						 "method %s is not allowed on '%s' (use GET)", method, url);
		return serve_models(c, url + 11);
	}
	return serve_reply_error(c, 404, NULL, "not_found", "no route for %s '%s'", method, url);
}

/* OPTIONS: a CORS preflight from an allowed origin gets 204 with what it
 * may send; without CORS it is a method like any other. */
static enum MHD_Result preflight(struct conn *c, const char *url)
{
	if (!known_path(url))
		return dispatch(c, url, "OPTIONS");
	const char *want = header(c, "Access-Control-Request-Method");
	if (!c->origin || !want)
		return serve_reply_error(c, 405, NULL, "method_not_allowed",
					 "method OPTIONS is not allowed on '%s' (a CORS preflight "
					 "needs an Origin that --allowed-origins names)", url);
	struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	const char *hdrs = header(c, "Access-Control-Request-Headers");
	MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
	MHD_add_response_header(r, "Access-Control-Allow-Headers",
				hdrs ? hdrs : "Authorization, Content-Type, X-Api-Key, Anthropic-Version");
	MHD_add_response_header(r, "Access-Control-Max-Age", "600");
	return serve_queue(c, 204, r);
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
				    const char *value)
{
	if (!strcasecmp(key, "Content-Length"))
		(*(int *)cls)++;
	return MHD_YES;
}

/* The checks made once the request head is in, before any body: who
 * calls (origin, key), framing, size, rate limits. MHD_YES to go on. */
static enum MHD_Result check_head(struct conn *c, const char *url, const char *method)
{
	struct atlas_server *s = c->srv;
	const char *origin = header(c, "Origin");
	if (origin) {
		if (!(c->origin = allowed_origin(s, origin)))
			return serve_reply_error(c, 403, NULL, "origin_not_allowed",
						 "origin '%.200s' is not allowed (see "
						 "--allowed-origins)", origin);
		if (strcmp(c->origin, "*"))
			c->origin = origin; /* echo it as the browser sent it */
	}
	if (!strcmp(method, "OPTIONS"))
		return preflight(c, url);
	if (!known_path(url))
		return dispatch(c, url, method);
	int key = s->n_api_keys ? key_index(c) : -1;
	if (s->n_api_keys && key < 0 && strcmp(url, "/health"))
		return serve_reply_error(c, 401, NULL, "invalid_api_key",
					 "a valid API key is required (Authorization: Bearer KEY or x-api-key)");
	set_client(c, key);
	/* framing libmicrohttpd lets through: a body must have one length */
	int n_cl = 0;
	MHD_get_connection_values(c->mc, MHD_HEADER_KIND, count_header, &n_cl);
	const char *te = header(c, "Transfer-Encoding");
	const char *cl = header(c, "Content-Length");
	if (n_cl > 1 || (te && cl)) {
		c->close = true;
		return serve_reply_error(c, 400, NULL, "invalid_request",
					 "the request has %s (one body length only)",
					 n_cl > 1 ? "several Content-Length headers"
						  : "both Transfer-Encoding and Content-Length");
	}
	if (te && strcasecmp(te, "chunked")) {
		c->close = true;
		return serve_reply_error(c, 501, NULL, "unsupported_transfer_encoding",
					 "Transfer-Encoding '%.100s' is not supported (only chunked)", te);
	}
	if (cl && strtoull(cl, NULL, 10) > s->p.max_body)
		return serve_reply_error(c, 413, NULL, "request_too_large",
					 "the request body of %.40s bytes is over the limit of %zu",
					 cl, s->p.max_body);
	if (is_post_route(url) && !strcmp(method, "POST")) {
		unsigned wait = serve_limits_admit(&s->limits, c->client);
		if (wait) {
			c->retry_after = wait;
			return serve_reply_error(c, 429, NULL, "rate_limit_exceeded",
						 "rate limit reached (--rate-limit-rpm %g, "
						 "--rate-limit-tpm %g per %s); retry in %u s",
						 s->p.rate_limit_rpm, s->p.rate_limit_tpm,
						 key >= 0 ? "key" : "client address", wait);
		}
	}
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct atlas_server *s = cls;
	struct conn *c = *con_cls;
	if (!c) {
		if (!(c = calloc(1, sizeof(*c))))
			return MHD_NO;
		c->srv = s;
		c->mc = mc;
		c->api = !strncmp(url, "/v1/messages", 12) && (!url[12] || url[12] == '/')
				 ? API_ANTHROPIC
				 : API_OPENAI;
		*con_cls = c;
		pthread_mutex_lock(&s->mu);
		s->n_inflight++;
		c->counted = true;
		bool stopping = s->quiesced;
		pthread_mutex_unlock(&s->mu);
		if (stopping) {
			c->close = true;
			return serve_reply_error(c, 503, NULL, "server_shutting_down",
						 "the server is shutting down");
		}
		return check_head(c, url, method);
	}
	if (c->deferred) {
		/* back from the worker: its reply, or none (close) */
		struct MHD_Response *r = c->pending;
		c->deferred = false;
		c->pending = NULL;
		if (!r)
			return MHD_NO;
		enum MHD_Result rc = MHD_queue_response(mc, c->pending_status, r);
		MHD_destroy_response(r);
		return rc;
	}
	if (c->answered) {
		*upload_size = 0; /* a reply went out early; ignore the rest */
		return MHD_YES;
	}
	if (*upload_size) {
		if (!c->too_large && c->body.len + *upload_size > s->p.max_body)
			c->too_large = true;
		if (!c->too_large && sbuf_add(&c->body, upload, *upload_size))
			return MHD_NO;
		*upload_size = 0;
		return MHD_YES;
	}
	if (c->too_large)
		return serve_reply_error(c, 413, NULL, "request_too_large",
					 "the request body is over the limit of %zu bytes", s->p.max_body);
	return dispatch(c, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct conn *c = *con_cls;
	if (!c)
		return;
	struct atlas_server *s = c->srv;
	if (c->pending)
		MHD_destroy_response(c->pending);
	if (c->counted) {
		pthread_mutex_lock(&s->mu);
		s->n_inflight--;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
	sbuf_free(&c->body);
	free(c);
	*con_cls = NULL;
}

/* The gate (server.c) counted the connection when it took it; its end
 * is counted here. */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	if (toe != MHD_CONNECTION_NOTIFY_CLOSED)
		return;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	serve_gate_closed(cls, ci ? ci->client_addr : NULL);
}

/* libmicrohttpd's messages; a message repeated within a second (a flood
 * of refused connections) is counted, not printed. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static char last[512];
	static double last_t;
	static long repeats;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	double now = serve_now();
	pthread_mutex_lock(&mu);
	if (!strcmp(msg, last) && now - last_t < 1.0) {
		repeats++;
		pthread_mutex_unlock(&mu);
		return;
	}
	long rep = repeats;
	repeats = 0;
	snprintf(last, sizeof(last), "%s", msg);
	last_t = now;
	pthread_mutex_unlock(&mu);
	if (rep)
		serve_log("http: (the last message %ld more times)", rep);
	serve_log("http: %s", msg);
}

/* Pool threads: they only parse, route and copy bytes; anything slow runs
 * in a worker thread. */
#define HTTP_THREADS 4

/* libmicrohttpd without a listening socket: the gate (server.c) hands it
 * the connections whose first request head it has checked. */
int atlas_serve_http_start(struct atlas_server *s)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
			 MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG;
	s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
				  MHD_OPTION_THREAD_POOL_SIZE,
				  (unsigned)(s->p.max_connections < HTTP_THREADS ? s->p.max_connections
										 : HTTP_THREADS),
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_connections,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->p.timeout_s,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				  MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)128 * 1024,
				  MHD_OPTION_END);
	if (!s->mhd)
		return atlas_error(ATLAS_EIO, "cannot start the HTTP daemon");
	return 0;
}

/* --- request heads, before libmicrohttpd -------------------------------- */

/* The longest request target (414 above it). */
#define MAX_TARGET 16384

/* RFC 9110 tchar: the bytes of methods and header names. */
static bool tchar(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* The line at p[0..n): its length without the end of line (LF, or CRLF),
 * and *next past it; -1 when no LF yet. */
static ssize_t line_at(const char *p, size_t n, size_t *next)
{
	const char *lf = memchr(p, '\n', n);
	if (!lf)
		return -1;
	size_t len = (size_t)(lf - p);
	*next = len + 1;
	return len && p[len - 1] == '\r' ? (ssize_t)len - 1 : (ssize_t)len;
}

static int head_err(struct serve_err *e, unsigned status, const char *code, const char *msg)
{
	return serve_err_set(e, status, NULL, code, "%s", msg);
}

/* One header line (name: value). 0, or -1 with e set. */
static int check_field(struct atlas_server *s, const char *l, size_t len, int *n_cl, bool *te,
		       struct serve_err *e)
{
	size_t k = 0;
	while (k < len && tchar((unsigned char)l[k]))
		k++;
	if (!k || k == len || l[k] != ':')
		return head_err(e, 400, "invalid_request", "a header line is not 'name: value'");
	for (size_t i = k + 1; i < len; i++) {
		unsigned char ch = (unsigned char)l[i];
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return head_err(e, 400, "invalid_request", "a header value holds a control character");
	}
	const char *v = l + k + 1, *end = l + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if (k == 14 && !strncasecmp(l, "Content-Length", 14)) {
		uint64_t x = 0;
		if (v == end)
			return head_err(e, 400, "invalid_request", "Content-Length is empty");
		for (const char *q = v; q < end; q++) {
			if (*q < '0' || *q > '9')
				return head_err(e, 400, "invalid_request",
						"Content-Length is not a number of bytes");
			if (x > (UINT64_MAX - 9) / 10)
				return serve_err_set(e, 413, NULL, "request_too_large",
						     "the request body is over the limit of %zu bytes",
						     s->p.max_body);
			x = x * 10 + (uint64_t)(*q - '0');
		}
		(*n_cl)++;
	} else if (k == 17 && !strncasecmp(l, "Transfer-Encoding", 17)) {
		if ((size_t)(end - v) != 7 || strncasecmp(v, "chunked", 7))
			return head_err(e, 501, "unsupported_transfer_encoding",
					"Transfer-Encoding is not supported (only chunked)");
		*te = true;
	}
	return 0;
}

/* The chunked body whose first bytes are p[0..n): -1 with e set when
 * they already break the framing (chunk-size lines of at most 15 hex
 * digits with optional extensions, data, CRLF), else 0; what has not
 * come yet is libmicrohttpd's to check. */
static int check_chunks(const char *p, size_t n, struct serve_err *e)
{
	size_t off = 0, next = 0;
	for (;;) {
		ssize_t len = line_at(p + off, n - off, &next);
		size_t k = 0;
		uint64_t size = 0;
		const char *l = p + off;
		size_t avail = len < 0 ? n - off : (size_t)len;
		while (k < avail && isxdigit((unsigned char)l[k])) {
			if (k == 15)
				return head_err(e, 400, "invalid_request", "a chunk size is too large");
			size = size * 16 + (uint64_t)(isdigit((unsigned char)l[k]) ? l[k] - '0'
									    : (tolower(l[k]) - 'a' + 10));
			k++;
		}
		if (k < avail && l[k] != ';')
			return head_err(e, 400, "invalid_request", "malformed chunked encoding");
		if (len < 0)
			return 0;
		if (!k)
			return head_err(e, 400, "invalid_request", "malformed chunked encoding");
		if (size == 0)
			return 0; /* the last chunk; trailers follow */
		off += next;
		if (n - off < size + 1)
			return 0;
		off += (size_t)size;
		if (p[off] == '\r') {
			if (n - off < 2)
				return 0;
			off++;
		}
		if (p[off] != '\n')
			return head_err(e, 400, "invalid_request", "malformed chunked encoding");
		off++;
	}
}

int serve_head_check(struct atlas_server *s, const char *p, size_t n, size_t cap,
		     enum serve_api *api, struct serve_err *e)
{
	size_t off = 0, next = 0;
	ssize_t len;
	*api = API_OPENAI;
	/* empty lines before the request line are allowed (RFC 9112 2.2) */
	while ((len = line_at(p + off, n - off, &next)) == 0)
		off += next;
	if (len < 0) {
		if (n - off > MAX_TARGET + 64 || n >= cap)
			return head_err(e, 414, "uri_too_long", "the request line is too long");
		return 0;
	}
	/* METHOD SP target SP HTTP/x.y */
	const char *l = p + off, *end = l + len, *sp1, *sp2;
	size_t m = 0;
	while (l + m < end && tchar((unsigned char)l[m]))
		m++;
	sp1 = l + m;
	if (!m || sp1 == end || *sp1 != ' ')
		return head_err(e, 400, "invalid_request", "malformed request line");
	for (sp2 = sp1 + 1; sp2 < end && *sp2 != ' '; sp2++)
		if ((unsigned char)*sp2 < 0x21 || *sp2 == 0x7f)
			return head_err(e, 400, "invalid_request", "malformed request target");
	size_t tlen = (size_t)(sp2 - sp1 - 1);
	if (!tlen || sp2 == end)
		return head_err(e, 400, "invalid_request", "malformed request line");
	if (tlen > MAX_TARGET)
		return head_err(e, 414, "uri_too_long", "the request target is too long");
	const char *ver = sp2 + 1;
	size_t vlen = (size_t)(end - ver);
	if (vlen != 8 || strncmp(ver, "HTTP/", 5) || ver[6] != '.' || ver[5] < '0' || ver[5] > '9' ||
	    ver[7] < '0' || ver[7] > '9')
		return head_err(e, 400, "invalid_request", "malformed HTTP version in the request line");
	if (strncmp(ver, "HTTP/1.1", 8) && strncmp(ver, "HTTP/1.0", 8))
		return head_err(e, 505, "http_version_not_supported",
				"HTTP version not supported (only 1.0 and 1.1)");
	if (tlen >= 12 && !strncmp(sp1 + 1, "/v1/messages", 12) && (tlen == 12 || sp1[13] == '/'))
		*api = API_ANTHROPIC;
	off += next;
	/* header lines up to the empty line */
	int n_cl = 0;
	bool te = false;
	for (;;) {
		if ((len = line_at(p + off, n - off, &next)) < 0)
			return n >= cap ? head_err(e, 431, "headers_too_large",
						   "the request headers are too large") : 0;
		if (!len)
			break;
		if (p[off] == ' ' || p[off] == '\t')
			return head_err(e, 400, "invalid_request", "folded header lines are not allowed");
		if (check_field(s, p + off, (size_t)len, &n_cl, &te, e))
			return -1;
		off += next;
	}
	if (n_cl > 1 || (te && n_cl))
		return head_err(e, 400, "invalid_request",
				n_cl > 1 ? "the request has several Content-Length headers"
					 : "the request has both Transfer-Encoding and Content-Length");
	off += next;
	if (te && check_chunks(p + off, n - off, e))
		return -1;
	return 1;
}

/* The fuzzing entry point: one POST as a request would make it. */
unsigned serve_parse_only_request(struct atlas_server *s, const char *path, const char *body,
				  size_t len)
{
	const struct route *r = find_route(path);
	if (!r || strcmp(r->method, "POST"))
		return 404;
	struct conn c = {.srv = s, .api = r->api};
	if (sbuf_add(&c.body, body, len))
		return 500;
	r->fn(&c);
	sbuf_free(&c.body);
	return c.status;
}
