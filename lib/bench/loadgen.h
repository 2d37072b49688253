/* loadgen.h - the load generator of atlas-bench serve: streaming
 * /v1/completions requests with token-array prompts against an
 * OpenAI-compatible server, one thread and one connection per request in
 * flight, and the latency percentiles of a concurrency level. */
#ifndef ATLAS_BENCH_LOADGEN_H
#define ATLAS_BENCH_LOADGEN_H

#include <stdint.h>

struct atlas_loadgen_params {
	const char *url;        /* server base, e.g. "http://127.0.0.1:8888" */
	const char *model;      /* "model" field of the requests */
	const char *api_key;    /* Bearer key, or NULL */
	int64_t concurrency;    /* requests in flight */
	int64_t requests;       /* requests in all */
	int64_t prompt;         /* prompt tokens per request */
	int64_t output;         /* max_tokens (ignore_eos) */
	int64_t vocab;          /* prompt ids are drawn from [0, vocab) */
	int64_t timeout_s;      /* per request */
	uint64_t seed;          /* prompt ids */
};

struct atlas_loadgen_result {
	int64_t concurrency, requests, prompt, output; /* the parameters */
	int64_t ok, errors;     /* requests that finished / failed */
	char first_error[160];  /* the first failure's reason, or "" */
	int64_t tokens;         /* generated tokens of the ok requests */
	double wall_s;          /* first request sent to last one done */
	double throughput;      /* tokens / wall_s */
	double req_s;           /* ok / wall_s */
	double ttft_p50, ttft_p90, ttft_p99; /* ms to the first token */
	double tpot_p50, tpot_p99; /* ms per output token after the first */
	double e2e_p50;         /* ms per request */
};

/* GET url/health: 0 if the server answers at all (any HTTP status),
 * ATLAS_EIO with curl's reason if it cannot be reached. */
int atlas_loadgen_probe(const char *url, int64_t timeout_s, long *status);

/* GET url/metrics (with a Bearer api_key when not NULL) and the value of
 * the metric `name` without labels: 1 with *value set, 0 when the server
 * answers without that line (not atlas-serve, or an older one), or
 * ATLAS_EIO with curl's reason when it cannot be reached. */
int atlas_loadgen_metric(const char *url, const char *api_key, const char *name,
			 int64_t timeout_s, double *value);

/* One concurrency level. 0 (errors counted in the result), or a negative
 * code if the threads could not start. */
int atlas_loadgen_run(const struct atlas_loadgen_params *p, struct atlas_loadgen_result *r);

#endif
