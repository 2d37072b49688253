/* http.c - the HTTP side of atlas-serve: the libmicrohttpd daemon (one
 * thread per connection, so a handler may wait for its generation), the
 * request body with its size limit, API keys, routing with 404/405, and
 * JSON replies. The engine thread (model load, scheduler) is in
 * server.c. */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

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

static enum MHD_Result queue(struct conn *c, unsigned status, struct MHD_Response *r)
{
	if (!r)
		return MHD_NO;
	enum MHD_Result rc = MHD_queue_response(c->mc, status, r);
	MHD_destroy_response(r);
	c->answered = true;
	serve_metrics_status(&c->srv->metrics, status);
	return rc;
}

enum MHD_Result serve_reply_text(struct conn *c, unsigned status, const char *ctype,
				 const char *text, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)text,
								 MHD_RESPMEM_MUST_COPY);
	if (r)
		MHD_add_response_header(r, "Content-Type", ctype);
	return queue(c, status, r);
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
	case 404: return "not_found_error";
	case 405: return "invalid_request_error";
	case 413: return "request_too_large";
	case 503: return api == API_ANTHROPIC ? "overloaded_error" : "service_unavailable";
	default: return api == API_ANTHROPIC ? "api_error" : "server_error";
	}
}

static enum MHD_Result reply_error_msg(struct conn *c, unsigned status, const char *param,
				       const char *code, const char *msg)
{
	json_object *err = json_object_new_object();
	json_object_object_add(err, "message", json_object_new_string(msg));
	json_object_object_add(err, "type", json_object_new_string(error_type(c->api, status)));
	json_object_object_add(err, "param", param ? json_object_new_string(param) : NULL);
	json_object_object_add(err, "code", code ? json_object_new_string(code) : NULL);
	json_object *o = json_object_new_object();
	if (c->api == API_ANTHROPIC)
		json_object_object_add(o, "type", json_object_new_string("error"));
	json_object_object_add(o, "error", err);
	return serve_reply_json(c, status, o);
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
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return false;
	struct pollfd pf = {.fd = ci->connect_fd, .events = POLLRDHUP};
	if (poll(&pf, 1, 0) <= 0)
		return false;
	return (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

/* Constant-time comparison of the offered key with the server's. */
static bool key_matches(const char *want, const char *got)
{
	size_t wl = strlen(want), gl = strlen(got);
	unsigned char diff = (unsigned char)(wl != gl);
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
	return diff == 0;
}

static bool authorized(struct conn *c)
{
	const char *key = c->srv->api_key;
	if (!key)
		return true;
	const char *auth = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Authorization");
	const char *xkey = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "x-api-key");
	bool ok = false;
	if (auth && !strncasecmp(auth, "Bearer ", 7))
		ok |= key_matches(key, auth + 7);
	if (xkey)
		ok |= key_matches(key, xkey);
	return ok;
}

/* The routes: path, method, handler (POST handlers read c->body). */
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
	{"/v1/models", "GET", models_all, API_OPENAI},
	{"/tokenize", "POST", serve_tokenize, API_OPENAI},
	{"/detokenize", "POST", serve_detokenize, API_OPENAI},
	{"/health", "GET", serve_health, API_OPENAI},
	{"/metrics", "GET", serve_metrics_route, API_OPENAI},
};

static enum MHD_Result dispatch(struct conn *c, const char *url, const char *method)
{
	bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (strcmp(url, routes[i].path))
			continue;
		c->api = routes[i].api;
		if (strcmp(method, routes[i].method) && !(is_get && !strcmp(routes[i].method, "GET"))) {
			return serve_reply_error(c, 405, NULL, "method_not_allowed",
						 "method %s is not allowed on '%s' (use %s)",
						 method, url, routes[i].method);
		}
		return routes[i].fn(c);
	}
	if (!strncmp(url, "/v1/models/", 11)) {
		if (!is_get)
			return serve_reply_error(c, 405, NULL, "method_not_allowed",
						 "method %s is not allowed on '%s' (use GET)", method, url);
		return serve_models(c, url + 11);
	}
	return serve_reply_error(c, 404, NULL, "not_found", "no route for %s '%s'", method, url);
}

static bool known_path(const char *url)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (!strcmp(url, routes[i].path))
			return true;
	return !strncmp(url, "/v1/models/", 11);
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
		c->api = !strcmp(url, "/v1/messages") ? API_ANTHROPIC : API_OPENAI;
		*con_cls = c;
		/* refuse early what needs no body: unknown routes, keys, size */
		if (!known_path(url))
			return dispatch(c, url, method);
		if (strcmp(url, "/health") && !authorized(c))
			return serve_reply_error(c, 401, NULL, "invalid_api_key",
						 "a valid API key is required (Authorization: Bearer KEY or x-api-key)");
		const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > s->p.max_body)
			return serve_reply_error(c, 413, NULL, "request_too_large",
						 "the request body of %s bytes is over the limit of %zu",
						 cl, s->p.max_body);
		return MHD_YES;
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
	sbuf_free(&c->body);
	free(c);
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	serve_log("http: %s", msg);
}

int atlas_serve_http_start(struct atlas_server *s, const struct sockaddr *addr, bool v6)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
			 MHD_USE_POLL | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
	s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
				  MHD_OPTION_SOCK_ADDR, addr,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)256 * 1024,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
				  MHD_OPTION_END);
	if (!s->mhd)
		return atlas_error(ATLAS_EIO, "cannot listen on '%s' port %d (in use, or not an address here?)",
				   s->p.host, s->p.port);
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : s->p.port;
	return 0;
}
