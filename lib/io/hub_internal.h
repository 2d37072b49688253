/* hub_internal.h - the HTTP layer shared by the Hub client files:
 * one GET with manual redirects (the token stays on the endpoint's
 * host), retried with backoff on transient failures. */
#ifndef ATLAS_IO_HUB_INTERNAL_H
#define ATLAS_IO_HUB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hub.h"

struct atlas_hub {
	char *endpoint;      /* base URL without trailing '/' */
	char *token;         /* bearer token or NULL */
	int retries;         /* retries after the first attempt */
	int backoff_ms;      /* first backoff */
	int stall_s;         /* idle-transfer abort */
};

/* Where a response body goes. Exactly one of the two sinks is used. */
struct hub_sink {
	/* memory sink (API calls) */
	char *buf;           /* malloc'd body, NUL-terminated */
	size_t len, cap;     /* used and allocated bytes */
	size_t max;          /* refuse bodies larger than this */
	/* file sink (downloads); fd < 0 means memory */
	int fd;              /* open for writing at `offset` */
	int64_t offset;      /* bytes already in the file before this response */
	int64_t got;         /* bytes of this response written */
	void *sha;           /* struct atlas_sha256 * to update, or NULL */
	int write_errno;     /* errno of a failed write (ENOSPC: disk full) */
	atlas_hub_progress_fn progress; /* may be NULL */
	void *progress_arg;  /* its argument */
	int64_t total;       /* expected full size, for progress */
};

/* What one attempt ended with. */
struct hub_result {
	long status;           /* final HTTP status, 0 if none */
	int curl_code;         /* CURLcode of the transfer */
	char curl_msg[256];    /* curl's error text */
	int retry_after;       /* Retry-After seconds, -1 if absent */
	char error_code[64];   /* X-Error-Code header ("GatedRepo", ...) */
	char error_msg[256];   /* X-Error-Message header */
	int64_t range_start;   /* first byte of a 206 Content-Range, -1 if none */
	char err_body[512];    /* start of an error response's body */
};

/* One GET of `url` (following up to 10 redirects by hand), the body of
 * a 2xx response into `sink`, resuming at sink->offset with a Range
 * header when it is > 0. Fills *res; returns 0 when the exchange
 * completed (any status), -1 when curl failed (res->curl_code). */
int hub_get(struct atlas_hub *h, const char *url, struct hub_sink *sink, struct hub_result *res);

/* Whether an attempt's outcome is worth retrying. */
bool hub_transient(const struct hub_result *r, int rc);

/* Sleep before retry number `attempt` (0-based): Retry-After when the
 * server sent one (at most 60 s), else backoff_ms * 2^attempt, at most 30 s. */
void hub_backoff(const struct atlas_hub *h, const struct hub_result *r, int attempt);

/* Set the message for a failed request of `what` ("'org/name'" ...). */
int hub_fail(const struct atlas_hub *h, const struct hub_result *r, int rc, const char *what,
	     const char *url);

/* `s` percent-encoded, keeping '/' when keep_slash; malloc'd or NULL. */
char *hub_escape(const char *s, bool keep_slash);

#endif
