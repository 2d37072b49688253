/* server.h - atlas-serve's HTTP server: OpenAI- and Anthropic-compatible
 * endpoints over libmicrohttpd, in front of the continuous-batching
 * scheduler.
 *
 * atlas_server_start binds the socket and starts answering at once
 * (/health says 503 while loading); the model is loaded by the engine
 * thread, which then runs the scheduler until atlas_server_stop. */
#ifndef ATLAS_SERVE_SERVER_H
#define ATLAS_SERVE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../engine/spec.h"

struct atlas_server_params {
	const char *host;             /* address to bind; NULL = 127.0.0.1 */
	int port;                     /* TCP port; 0 = any free port */
	const char *model_dir;        /* resolved model directory */
	const char *device;           /* "auto", "cpu", "cuda[:N]" */
	const char *served_name;      /* model name in the API; NULL = the directory's name */
	int64_t ctx;                  /* context per sequence; 0 = the model's (at most 4096) */
	int64_t max_seqs;             /* sequences per step; 0 = 16 */
	int64_t max_batch_tokens;     /* tokens per step; 0 = 512 */
	int64_t kv_blocks;            /* KV pool blocks; 0 = enough for max_seqs full sequences */
	enum atlas_kv_dtype kv_dtype; /* --kv-dtype: the KV cache's element format
				       * (lib/backend/kvq.h); 0 = auto, the
				       * activation type. A model whose head_dim
				       * the format cannot hold fails to load */
	const char *const *api_keys;  /* accepted keys (a request needs one of them) */
	int n_api_keys;               /* entries in api_keys; 0 = no key needed */
	size_t max_body;              /* largest request body; 0 = 32 MiB */
	/* HTTP limits: the daemon polls every connection with epoll from a few
	 * threads, so idle connections cost a file descriptor and a little
	 * memory; generation requests run in their own threads. */
	int max_connections;          /* open connections (one more is closed at
				       * once); 0 = 8192 */
	int max_connections_per_ip;   /* per client address; 0 = no limit */
	int timeout_s;                /* a connection that sends nothing for this long
				       * (idle, or a body stalled), or whose first
				       * request head has not come whole by then, is
				       * closed; 0 = never. Requests being answered
				       * are not cut: streams wait for tokens */
	int max_concurrent;           /* requests handled at once (POST routes); more
				       * get 429 with Retry-After; 0 = no limit */
	double rate_limit_rpm;        /* requests per minute per API key (or client
				       * address without keys); 0 = no limit */
	double rate_limit_tpm;        /* prompt plus generated tokens per minute per
				       * key or address; 0 = no limit */
	const char *allowed_origins;  /* comma-separated origins ("https://a.example",
				       * or "*") a browser may call from (CORS); NULL =
				       * none: requests with an Origin are refused */
	bool no_prefix_cache;         /* --no-prefix-cache: recompute every prompt */
	struct atlas_spec_params spec; /* --speculative, --num-draft (spec.h);
				       * mode ATLAS_SPEC_NONE: off */
	const char *draft_model_dir;  /* --draft-model, resolved (ATLAS_SPEC_DRAFT) */
	bool no_batch_invariant;      /* --no-batch-invariant: the fastest kernels for
				       * each step's shape; a request's tokens and
				       * logprobs may then depend on its batch-mates.
				       * false (the default): they never do */
	int tp;                       /* tensor-parallel ranks; 0 or 1 = one. More:
				       * thread ranks on the CPU (lib/model/tp_group.h),
				       * rank 0 runs the scheduler, the others follow */
	const char *tool_parser;      /* tool-call syntax ("hermes", "qwen3_coder",
				       * "llama3_json", "mistral", "none"); NULL =
				       * detected from the chat template */
	int64_t reasoning_budget;     /* most tokens of thought before </think> is
				       * inserted; 0 = no limit */
};

struct atlas_server; /* opaque */

/* Defaults: 127.0.0.1:8888, device auto, 8192 connections, 256 per
 * address, 30 s timeout, no rate limits; the rest 0 (see each field). */
void atlas_server_default_params(struct atlas_server_params *p);

/* Start listening and loading. Returns the server (owned by the caller,
 * atlas_server_stop frees it) or NULL with a message (cannot bind...). */
struct atlas_server *atlas_server_start(const struct atlas_server_params *p);
/* The port it listens on (useful with port 0). */
int atlas_server_port(const struct atlas_server *s);
/* Wait until the model is loaded: 0 when ready, or the negative ATLAS_E*
 * code of the load failure with its message. */
int atlas_server_wait_ready(struct atlas_server *s);
/* Begin a graceful shutdown: close the listening socket and answer new
 * requests on open connections with 503 (Connection: close); requests in
 * flight go on. Any thread; idempotent. */
void atlas_server_quiesce(struct atlas_server *s);
/* Requests in flight: from their first header line to their last byte
 * (streams included). Idle keep-alive connections are not counted. */
int64_t atlas_server_in_flight(struct atlas_server *s);
/* Stop: quiesce, end the requests still running (a stream gets an error
 * event, never a normal finish; a non-streaming request a 503 error),
 * wait briefly for those replies to go out, then stop the engine, close
 * every connection, unload and free. NULL is a no-op. */
void atlas_server_stop(struct atlas_server *s);

#endif
