/* hub_http.c - GET with manual redirects, retries and clear failures for
 * the Hub client (see hub_internal.h).
 *
 * Redirects are followed here rather than by curl so the Authorization
 * header is attached only while the URL's scheme, host and port are the
 * endpoint's: a resolve URL of an LFS file redirects to a CDN that must
 * never see the token. */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "../core/error.h"
#include "../core/sha256.h"
#include "hub_internal.h"

/* The state of one exchange, shared by curl's callbacks. */
struct exchange {
	CURL *curl;              /* the handle */
	struct hub_sink *sink;   /* body destination for 2xx */
	struct hub_result *res;  /* headers of the current response */
	size_t err_len;          /* bytes in res->err_body */
};

static long status_of(CURL *c)
{
	long code = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	return code;
}

static void copy_value(char *dst, size_t n, const char *v, size_t vlen)
{
	while (vlen && isspace((unsigned char)*v))
		v++, vlen--;
	while (vlen && isspace((unsigned char)v[vlen - 1]))
		vlen--;
	if (vlen >= n)
		vlen = n - 1;
	memcpy(dst, v, vlen);
	dst[vlen] = '\0';
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
	struct exchange *x = arg;
	struct hub_result *r = x->res;
	size_t len = size * n;
	char val[256];
	const char *colon = memchr(data, ':', len);

	if (len >= 5 && !strncmp(data, "HTTP/", 5)) {
		/* a new response (after a redirect): forget the last one's headers */
		r->retry_after = -1;
		r->error_code[0] = r->error_msg[0] = '\0';
		r->range_start = -1;
		return len;
	}
	if (!colon)
		return len;
	size_t klen = (size_t)(colon - data);
	copy_value(val, sizeof(val), colon + 1, len - klen - 1);
	if (klen == 11 && !strncasecmp(data, "retry-after", 11))
		r->retry_after = isdigit((unsigned char)val[0]) ? atoi(val) : 1;
	else if (klen == 12 && !strncasecmp(data, "x-error-code", 12))
		copy_value(r->error_code, sizeof(r->error_code), val, strlen(val));
	else if (klen == 15 && !strncasecmp(data, "x-error-message", 15))
		copy_value(r->error_msg, sizeof(r->error_msg), val, strlen(val));
	else if (klen == 13 && !strncasecmp(data, "content-range", 13) &&
		 !strncasecmp(val, "bytes ", 6))
		r->range_start = strtoll(val + 6, NULL, 10);
	return len;
}

static size_t to_memory(struct hub_sink *s, const char *data, size_t len)
{
	if (s->len + len > s->max)
		return 0;
	if (s->len + len + 1 > s->cap) {
		size_t cap = (s->cap ? s->cap * 2 : 4096);
		while (cap < s->len + len + 1)
			cap *= 2;
		char *b = realloc(s->buf, cap);
		if (!b)
			return 0;
		s->buf = b, s->cap = cap;
	}
	memcpy(s->buf + s->len, data, len);
	s->len += len;
	s->buf[s->len] = '\0';
	return len;
}

static size_t to_file(struct hub_sink *s, const char *data, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = write(s->fd, data + done, len - done);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			s->write_errno = errno;
			return 0;
		}
		done += (size_t)w;
	}
	if (s->sha)
		atlas_sha256_update(s->sha, data, len);
	s->got += (int64_t)len;
	if (s->progress)
		s->progress(s->progress_arg, s->offset + s->got, s->total);
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct exchange *x = arg;
	size_t len = size * n;
	long st = status_of(x->curl);

	if (st >= 300 && st < 400)
		return len; /* a redirect's body: ignored */
	if (st < 200 || st >= 300) {
		/* keep the start of an error body for the message */
		size_t room = sizeof(x->res->err_body) - 1 - x->err_len;
		size_t take = len < room ? len : room;
		memcpy(x->res->err_body + x->err_len, data, take);
		x->err_len += take;
		x->res->err_body[x->err_len] = '\0';
		return len;
	}
	if (st == 200 && x->sink->fd >= 0 && x->sink->offset > 0 && x->sink->got == 0) {
		/* asked for a range, got the whole file: start over */
		if (ftruncate(x->sink->fd, 0) || lseek(x->sink->fd, 0, SEEK_SET) < 0) {
			x->sink->write_errno = errno;
			return 0;
		}
		x->sink->offset = 0;
		if (x->sink->sha)
			atlas_sha256_init(x->sink->sha);
	}
	return x->sink->fd >= 0 ? to_file(x->sink, data, len) : to_memory(x->sink, data, len);
}

/* scheme://host:port of `url` into buf; 0 or -1. */
static int origin(const char *url, char *buf, size_t n)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL;
	int rc = -1;

	if (u && !curl_url_set(u, CURLUPART_URL, url, 0) &&
	    !curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) &&
	    !curl_url_get(u, CURLUPART_HOST, &host, 0) &&
	    !curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT)) {
		snprintf(buf, n, "%s://%s:%s", scheme, host, port);
		for (char *p = buf; *p; p++)
			*p = (char)tolower((unsigned char)*p);
		rc = 0;
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return rc;
}

int hub_get(struct atlas_hub *h, const char *url, struct hub_sink *sink, struct hub_result *res)
{
	char home[512], here[512], auth[1100], range[64], *next = NULL;
	struct exchange x = {.sink = sink, .res = res};
	int rc = 0;

	memset(res, 0, sizeof(*res));
	res->retry_after = -1;
	res->range_start = -1;
	if (!(x.curl = curl_easy_init())) {
		res->curl_code = CURLE_FAILED_INIT;
		snprintf(res->curl_msg, sizeof(res->curl_msg), "cannot initialize libcurl");
		return -1;
	}
	if (origin(h->endpoint, home, sizeof(home)))
		home[0] = '\0';
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", h->token ? h->token : "");
	char *cur = strdup(url);
	for (int hop = 0; cur && hop <= 10; hop++) {
		struct curl_slist *hdrs = NULL;
		char errbuf[CURL_ERROR_SIZE] = "";
		CURL *c = x.curl;

		curl_easy_reset(c);
		curl_easy_setopt(c, CURLOPT_URL, cur);
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)h->stall_s);
		curl_easy_setopt(c, CURLOPT_USERAGENT, "atlas/" ATLAS_VERSION);
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
		if (h->token && home[0] && !origin(cur, here, sizeof(here)) && !strcmp(here, home))
			hdrs = curl_slist_append(hdrs, auth);
		if (sink->fd >= 0 && sink->offset > 0) {
			snprintf(range, sizeof(range), "Range: bytes=%lld-", (long long)sink->offset);
			hdrs = curl_slist_append(hdrs, range);
		}
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
		x.err_len = 0;
		res->err_body[0] = '\0';
		CURLcode cc = curl_easy_perform(c);
		curl_slist_free_all(hdrs);
		res->status = status_of(c);
		if (cc != CURLE_OK) {
			res->curl_code = cc;
			snprintf(res->curl_msg, sizeof(res->curl_msg), "%s",
				 errbuf[0] ? errbuf : curl_easy_strerror(cc));
			rc = -1;
			break;
		}
		if (res->status < 300 || res->status >= 400)
			break;
		char *loc = NULL;
		curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc);
		if (!loc) {
			/* a 3xx without Location: report it as the final status */
			break;
		}
		next = strdup(loc);
		free(cur);
		cur = next;
	}
	free(cur);
	curl_easy_cleanup(x.curl);
	return rc;
}

bool hub_transient(const struct hub_result *r, int rc)
{
	if (rc) {
		switch (r->curl_code) {
		case CURLE_COULDNT_CONNECT:
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_OPERATION_TIMEDOUT:
		case CURLE_PARTIAL_FILE:
		case CURLE_RECV_ERROR:
		case CURLE_SEND_ERROR:
		case CURLE_GOT_NOTHING:
		case CURLE_HTTP2:
		case CURLE_HTTP2_STREAM:
		case CURLE_SSL_CONNECT_ERROR:
			return true;
		default:
			return false;
		}
	}
	return r->status == 408 || r->status == 429 || r->status >= 500;
}

void hub_backoff(const struct atlas_hub *h, const struct hub_result *r, int attempt)
{
	int64_t ms;

	if (r->retry_after >= 0)
		ms = (int64_t)(r->retry_after > 60 ? 60 : r->retry_after) * 1000;
	else {
		ms = h->backoff_ms;
		for (int i = 0; i < attempt && ms < 30000; i++)
			ms *= 2;
		if (ms > 30000)
			ms = 30000;
	}
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

int hub_fail(const struct atlas_hub *h, const struct hub_result *r, int rc, const char *what,
	     const char *url)
{
	const char *detail = r->error_msg[0] ? r->error_msg : "";

	if (rc)
		return atlas_error(ATLAS_EIO, "cannot download %s from '%s': %s", what, url,
				   r->curl_msg);
	switch (r->status) {
	case 401:
	case 403:
		return atlas_error(ATLAS_EIO,
				   "access to %s denied (HTTP %ld%s%s): the repository is gated, "
				   "private or does not exist; accept its terms on the Hub and %s",
				   what, r->status, r->error_code[0] ? ", " : "", r->error_code,
				   h->token ? "check that the token given (HF_TOKEN or --token-file) "
					      "has access to it"
					    : "pass a token with HF_TOKEN=... or --token-file FILE");
	case 404:
		if (!strcmp(r->error_code, "RevisionNotFound"))
			return atlas_error(ATLAS_ENOTFOUND, "no such revision: %s (HTTP 404)", what);
		if (!strcmp(r->error_code, "EntryNotFound"))
			return atlas_error(ATLAS_ENOTFOUND, "no such file: %s (HTTP 404)", what);
		return atlas_error(ATLAS_ENOTFOUND,
				   "not found: %s (HTTP 404%s%s): check the repository id and "
				   "revision",
				   what, r->error_code[0] ? ", " : "", r->error_code);
	default:
		return atlas_error(ATLAS_EIO, "cannot download %s: HTTP %ld%s%s", what, r->status,
				   detail[0] ? ": " : "", detail);
	}
}

char *hub_escape(const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;
	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (isalnum(ch) || strchr("-._~", ch) || (keep_slash && ch == '/')) {
			*o++ = (char)ch;
		} else {
			*o++ = '%';
			*o++ = hex[ch >> 4];
			*o++ = hex[ch & 15];
		}
	}
	*o = '\0';
	return out;
}
