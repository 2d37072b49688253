/* atlas-serve - OpenAI- and Anthropic-compatible HTTP server with
 * continuous batching.
 *
 *   atlas-serve [-m MODEL] [--host ADDR] [--port N] [options]
 *
 * Flags, usage and calls into libatlas only; the server is lib/serve,
 * the scheduler lib/engine/scheduler.c. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/core/error.h"
#include "../lib/core/log.h"
#include "../lib/core/threads.h"
#include "../lib/model/tp_group.h"
#include "../lib/serve/server.h"
#include "common.h"

static const char usage_text[] =
	"usage: atlas-serve [options]\n"
	"\n"
	"Serve a model over HTTP: OpenAI chat completions and completions,\n"
	"Anthropic messages, tokenize/detokenize, /health and /metrics.\n"
	"Logs go to stderr, one line per completed request.\n"
	"\n"
	"Model and device:\n"
	"  -m, --model MODEL          model directory or Hub id org/name[@rev]\n"
	"                             (default: the small model shipped with Atlas)\n"
	"      --served-model-name N  the model's name in the API (default: the\n"
	"                             model directory's name)\n"
	"      --device DEV           auto, cpu or cuda[:N] (default auto)\n"
	"  -c, --ctx-size N           context per sequence (default: the model's,\n"
	"                             at most 4096)\n"
	"  -t, --threads N            CPU threads (default: all cores)\n"
	"      --tp N                 tensor parallelism over N ranks, one thread\n"
	"                             each (default 1; the CPU for now)\n"
	"\n"
	"Network:\n"
	"      --host ADDR            address to bind (default 127.0.0.1)\n"
	"  -p, --port N               TCP port (default 8888; 0 = any free port)\n"
	"      --api-key KEY          require KEY (Authorization: Bearer KEY or\n"
	"                             x-api-key: KEY)\n"
	"      --api-key-file FILE    read the key from the first line of FILE\n"
	"      --max-body BYTES       largest request body (default 33554432)\n"
	"\n"
	"Batching:\n"
	"      --max-seqs N           requests in one step (default 16)\n"
	"      --max-batch-tokens N   tokens in one step, decodes plus prefill\n"
	"                             chunks (default 512)\n"
	"      --kv-blocks N          KV cache blocks of 16 tokens (default: enough\n"
	"                             for --max-seqs full contexts)\n"
	"      --no-prefix-cache      recompute every prompt (default: reuse the KV\n"
	"                             blocks of prompt prefixes seen before)\n"
	"\n"
	"Other:\n"
	"  -v, --verbose              log model loading and device choice\n"
	"  -h, --help                 show this help\n"
	"  -V, --version              show the version\n";

enum { OPT_HOST = 256, OPT_DEVICE, OPT_MAX_SEQS, OPT_MAX_BATCH, OPT_KV_BLOCKS, OPT_API_KEY,
	OPT_API_KEY_FILE, OPT_MAX_BODY, OPT_SERVED_NAME, OPT_TP, OPT_NO_PREFIX_CACHE };

static const struct option longopts[] = {
	{"model", required_argument, NULL, 'm'},
	{"ctx-size", required_argument, NULL, 'c'},
	{"threads", required_argument, NULL, 't'},
	{"port", required_argument, NULL, 'p'},
	{"host", required_argument, NULL, OPT_HOST},
	{"device", required_argument, NULL, OPT_DEVICE},
	{"max-seqs", required_argument, NULL, OPT_MAX_SEQS},
	{"max-batch-tokens", required_argument, NULL, OPT_MAX_BATCH},
	{"kv-blocks", required_argument, NULL, OPT_KV_BLOCKS},
	{"no-prefix-cache", no_argument, NULL, OPT_NO_PREFIX_CACHE},
	{"api-key", required_argument, NULL, OPT_API_KEY},
	{"api-key-file", required_argument, NULL, OPT_API_KEY_FILE},
	{"max-body", required_argument, NULL, OPT_MAX_BODY},
	{"served-model-name", required_argument, NULL, OPT_SERVED_NAME},
	{"tp", required_argument, NULL, OPT_TP},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

/* The first line of `path`, without its newline; exits 1 on failure. */
static char *read_key_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	if (!f) {
		cmd_error("cannot open '%s': %s", path, strerror(errno));
		exit(1);
	}
	ssize_t n = getline(&line, &cap, f);
	fclose(f);
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	if (n <= 0) {
		cmd_error("the key file '%s' is empty", path);
		exit(1);
	}
	return line;
}

int main(int argc, char **argv)
{
	struct atlas_server_params p = {.port = 8888, .device = "auto"};
	const char *model = NULL;
	char *key = NULL;
	int c;
	cmd_name = "atlas-serve";
	while ((c = getopt_long(argc, argv, "m:c:t:p:vhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': model = optarg; break;
		case 'c': p.ctx = cmd_parse_int("--ctx-size", optarg, 1, 1 << 24); break;
		case 't': atlas_threads_set((int)cmd_parse_int("--threads", optarg, 1, 256)); break;
		case 'p': p.port = (int)cmd_parse_int("--port", optarg, 0, 65535); break;
		case OPT_HOST: p.host = optarg; break;
		case OPT_DEVICE: p.device = optarg; break;
		case OPT_MAX_SEQS: p.max_seqs = cmd_parse_int("--max-seqs", optarg, 1, 4096); break;
		case OPT_MAX_BATCH:
			p.max_batch_tokens = cmd_parse_int("--max-batch-tokens", optarg, 1, 1 << 20);
			break;
		case OPT_KV_BLOCKS: p.kv_blocks = cmd_parse_int("--kv-blocks", optarg, 1, 1 << 28); break;
		case OPT_NO_PREFIX_CACHE: p.no_prefix_cache = true; break;
		case OPT_API_KEY:
			free(key);
			key = strdup(optarg);
			break;
		case OPT_API_KEY_FILE:
			free(key);
			key = read_key_file(optarg);
			break;
		case OPT_MAX_BODY:
			p.max_body = (size_t)cmd_parse_int("--max-body", optarg, 1, (int64_t)1 << 40);
			break;
		case OPT_SERVED_NAME: p.served_name = optarg; break;
		case OPT_TP: p.tp = (int)cmd_parse_int("--tp", optarg, 1, 256); break;
		case 'v': atlas_log_set_level(ATLAS_LOG_INFO); break;
		case 'h': fputs(usage_text, stdout); return 0;
		case 'V': cmd_print_version(); return 0;
		default: fprintf(stderr, "Try 'atlas-serve --help' for more information.\n"); return 2;
		}
	}
	if (optind < argc)
		cmd_usage_error("unexpected argument '%s'", argv[optind]);
	if (key && !*key)
		cmd_usage_error("--api-key: the key is empty");
	int64_t seqs = p.max_seqs ? p.max_seqs : 16, toks = p.max_batch_tokens ? p.max_batch_tokens : 512;
	if (toks < seqs)
		cmd_usage_error("--max-batch-tokens (%lld) must be at least --max-seqs (%lld)",
				(long long)toks, (long long)seqs);
	p.api_key = key;
	/* a device that cannot run the ranks fails before the port is bound */
	if (p.tp > 1 && atlas_tp_check_device(p.device, p.tp)) {
		free(key);
		return cmd_lib_error();
	}

	char *dir = cmd_resolve_model(model);
	if (!dir)
		return 1;
	p.model_dir = dir;

	/* SIGINT/SIGTERM end the server; they are taken by sigwait below */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct atlas_server *srv = atlas_server_start(&p);
	if (!srv) {
		free(dir);
		free(key);
		return cmd_lib_error();
	}
	fprintf(stderr, "atlas-serve: listening on http://%s:%d (loading the model)\n",
		p.host ? p.host : "127.0.0.1", atlas_server_port(srv));
	int rc = 0;
	if (atlas_server_wait_ready(srv)) {
		rc = cmd_lib_error();
	} else {
		fprintf(stderr, "atlas-serve: ready\n");
		int sig;
		sigwait(&sigs, &sig);
		fprintf(stderr, "atlas-serve: %s, stopping\n", sig == SIGINT ? "interrupted" : "terminated");
	}
	atlas_server_stop(srv);
	free(dir);
	free(key);
	return rc;
}
