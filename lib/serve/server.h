/* server.h - atlas-serve's HTTP server: OpenAI- and Anthropic-compatible
 * endpoints over libmicrohttpd, in front of the continuous-batching
 * scheduler.
 *
 * atlas_server_start binds the socket and starts answering at once
 * (/health says 503 while loading); the model is loaded by the engine
 * thread, which then runs the scheduler until atlas_server_stop. */
#ifndef ATLAS_SERVE_SERVER_H
#define ATLAS_SERVE_SERVER_H

#include <stddef.h>
#include <stdint.h>

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
	const char *api_key;          /* required key, or NULL for none */
	size_t max_body;              /* largest request body; 0 = 32 MiB */
	bool no_prefix_cache;         /* --no-prefix-cache: recompute every prompt */
	int tp;                       /* tensor-parallel ranks; 0 or 1 = one. More:
				       * thread ranks on the CPU (lib/model/tp_group.h),
				       * rank 0 runs the scheduler, the others follow */
};

struct atlas_server; /* opaque */

/* Start listening and loading. Returns the server (owned by the caller,
 * atlas_server_stop frees it) or NULL with a message (cannot bind...). */
struct atlas_server *atlas_server_start(const struct atlas_server_params *p);
/* The port it listens on (useful with port 0). */
int atlas_server_port(const struct atlas_server *s);
/* Wait until the model is loaded: 0 when ready, or the negative ATLAS_E*
 * code of the load failure with its message. */
int atlas_server_wait_ready(struct atlas_server *s);
/* Stop answering, cancel what is running, unload, free. */
void atlas_server_stop(struct atlas_server *s);

#endif
