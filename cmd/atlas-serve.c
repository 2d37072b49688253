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
#include <sys/resource.h>
#include <time.h>

#include "../lib/core/error.h"
#include "../lib/core/log.h"
#include "../lib/core/threads.h"
#include "../lib/model/tp_group.h"
#include "../lib/serve/server.h"
#include "../lib/serve/toolcall.h"
#include "../lib/tok/chat.h"
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
	"                             x-api-key: KEY); may be repeated\n"
	"      --api-key-file FILE    read keys from FILE, one a line ('#' comments)\n"
	"      --max-body BYTES       largest request body (default 33554432)\n"
	"      --max-connections N    open connections (default 8192)\n"
	"      --max-connections-per-ip N\n"
	"                             open connections per client address\n"
	"                             (default 256; 0 = no limit)\n"
	"      --timeout SECONDS      close a connection that sends nothing for\n"
	"                             this long (default 30; 0 = never); answers\n"
	"                             in progress are not cut\n"
	"      --shutdown-timeout SECONDS\n"
	"                             on SIGTERM/SIGINT, let requests in flight\n"
	"                             finish for this long (default 30), then end\n"
	"                             them with an error; a second signal ends\n"
	"                             them at once\n"
	"      --allowed-origins LIST comma-separated origins browsers may call\n"
	"                             from (CORS), e.g. http://localhost:3000, or\n"
	"                             '*'; default none: requests that carry an\n"
	"                             Origin are refused\n"
	"\n"
	"Limits (429 with Retry-After when exceeded; default: none):\n"
	"      --max-concurrent-requests N\n"
	"                             POST requests handled at once\n"
	"      --rate-limit-rpm N     requests per minute per API key (per client\n"
	"                             address without keys)\n"
	"      --rate-limit-tpm N     prompt plus generated tokens per minute per\n"
	"                             API key (or client address)\n"
	"\n"
	"Chat template (it comes with the model; a request whose render passes a\n"
	"limit gets a 400):\n"
	"      --template-max-steps N evaluation steps per render (default 10000000)\n"
	"      --template-max-output BYTES\n"
	"                             bytes of the rendered prompt and of any one\n"
	"                             string built (default 64MiB)\n"
	"      --template-max-memory BYTES\n"
	"                             bytes a render may hold at once (default\n"
	"                             512MiB)\n"
	"\n"
	"Agents:\n"
	"      --tool-parser NAME     the model's tool-call syntax: hermes,\n"
	"                             qwen3_coder, llama3_json, mistral or none\n"
	"                             (default: detected from the chat template)\n"
	"      --reasoning-budget N   most tokens of thought (<think>) before the\n"
	"                             end marker is inserted (default: no limit)\n"
	"\n"
	"Batching:\n"
	"      --max-seqs N           requests in one step (default 16)\n"
	"      --max-batch-tokens N   tokens in one step, decodes plus prefill\n"
	"                             chunks (default 512)\n"
	"      --kv-blocks N          KV cache blocks of 16 tokens (default: enough\n"
	"                             for --max-seqs full contexts)\n"
	"      --kv-dtype FMT         the KV cache's format: auto (the activation\n"
	"                             type: f32 on the CPU, bf16 on CUDA), bf16,\n"
	"                             fp8 (E4M3, a scale per token and head) or q4\n"
	"                             (4-bit, a scale per 32 values); default auto\n"
	"      --no-prefix-cache      recompute every prompt (default: reuse the KV\n"
	"                             blocks of prompt prefixes seen before)\n"
	"      --speculative MODE     speculative decoding: none (default), ngram\n"
	"                             (drafts looked up in each request's prompt and\n"
	"                             output), draft (drafts from --draft-model) or\n"
	"                             mtp (from the checkpoint's MTP head, mtp.*),\n"
	"                             verified in its step; a grammar masks drafts\n"
	"                             too; reasoning requests do not speculate\n"
	"      --draft-model M        the draft model (same tokenizer; a directory or\n"
	"                             a cached repo id); implies --speculative draft\n"
	"      --num-draft K          drafts a step with --speculative, 1..16\n"
	"                             (default 4)\n"
	"      --no-batch-invariant   the fastest kernels for each step's shape; a\n"
	"                             request's tokens and logprobs may then depend\n"
	"                             on what it is batched with (default: bit for\n"
	"                             bit what it gets alone, at some speed)\n"
	"\n"
	"Other:\n"
	"  -v, --verbose              log model loading and device choice\n"
	"  -h, --help                 show this help\n"
	"  -V, --version              show the version\n";

enum { OPT_HOST = 256, OPT_DEVICE, OPT_MAX_SEQS, OPT_MAX_BATCH, OPT_KV_BLOCKS, OPT_API_KEY,
	OPT_API_KEY_FILE, OPT_MAX_BODY, OPT_SERVED_NAME, OPT_TP, OPT_NO_PREFIX_CACHE,
	OPT_SPEC, OPT_NUM_DRAFT, OPT_DRAFT_MODEL,
	OPT_MAX_CONNS, OPT_MAX_CONNS_IP, OPT_TIMEOUT, OPT_SHUTDOWN_TIMEOUT, OPT_ORIGINS,
	OPT_MAX_CONCURRENT, OPT_RPM, OPT_TPM, OPT_TMPL_STEPS, OPT_TMPL_OUTPUT, OPT_TMPL_MEMORY,
	OPT_TOOL_PARSER, OPT_REASONING_BUDGET, OPT_NO_BATCH_INVARIANT, OPT_KV_DTYPE };

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
	{"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
	{"no-prefix-cache", no_argument, NULL, OPT_NO_PREFIX_CACHE},
	{"speculative", required_argument, NULL, OPT_SPEC},
	{"draft-model", required_argument, NULL, OPT_DRAFT_MODEL},
	{"num-draft", required_argument, NULL, OPT_NUM_DRAFT},
	{"no-batch-invariant", no_argument, NULL, OPT_NO_BATCH_INVARIANT},
	{"api-key", required_argument, NULL, OPT_API_KEY},
	{"api-key-file", required_argument, NULL, OPT_API_KEY_FILE},
	{"max-body", required_argument, NULL, OPT_MAX_BODY},
	{"max-connections", required_argument, NULL, OPT_MAX_CONNS},
	{"max-connections-per-ip", required_argument, NULL, OPT_MAX_CONNS_IP},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"shutdown-timeout", required_argument, NULL, OPT_SHUTDOWN_TIMEOUT},
	{"allowed-origins", required_argument, NULL, OPT_ORIGINS},
	{"max-concurrent-requests", required_argument, NULL, OPT_MAX_CONCURRENT},
	{"rate-limit-rpm", required_argument, NULL, OPT_RPM},
	{"rate-limit-tpm", required_argument, NULL, OPT_TPM},
	{"template-max-steps", required_argument, NULL, OPT_TMPL_STEPS},
	{"template-max-output", required_argument, NULL, OPT_TMPL_OUTPUT},
	{"template-max-memory", required_argument, NULL, OPT_TMPL_MEMORY},
	{"tool-parser", required_argument, NULL, OPT_TOOL_PARSER},
	{"reasoning-budget", required_argument, NULL, OPT_REASONING_BUDGET},
	{"served-model-name", required_argument, NULL, OPT_SERVED_NAME},
	{"tp", required_argument, NULL, OPT_TP},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

/* The keys so far (each owned). */
struct keys {
	char **v;                     /* the keys */
	int n;                        /* how many */
};

/* Append a copy of key; exits 2 on an empty key, 1 when out of memory. */
static void add_key(struct keys *k, const char *key, const char *where)
{
	if (!*key)
		cmd_usage_error("%s: the key is empty", where);
	char **v = realloc(k->v, (size_t)(k->n + 1) * sizeof(char *));
	if (!v || !(v[k->n] = strdup(key))) {
		cmd_error("out of memory");
		exit(1);
	}
	k->v = v;
	k->n++;
}

/* The keys of `path`, one a line (blank lines and '#' comments skipped);
 * exits 1 on failure. */
static void read_key_file(struct keys *k, const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int before = k->n;
	if (!f) {
		cmd_error("cannot open '%s': %s", path, strerror(errno));
		exit(1);
	}
	while ((n = getline(&line, &cap, f)) >= 0) {
		while (n > 0 && strchr("\r\n \t", line[n - 1]))
			line[--n] = '\0';
		char *p = line + strspn(line, " \t");
		if (*p && *p != '#')
			add_key(k, p, "--api-key-file");
	}
	free(line);
	fclose(f);
	if (k->n == before) {
		cmd_error("the key file '%s' is empty", path);
		exit(1);
	}
}

/* Let the process open what --max-connections asks for: raise the soft
 * file-descriptor limit up to the hard one, and lower the connection
 * limit (with a warning) when even that is too low. */
static void fit_fd_limit(struct atlas_server_params *p)
{
	struct rlimit rl;
	const rlim_t spare = 128; /* model files, logs, the listening socket */
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	rlim_t want = (rlim_t)p->max_connections + spare;
	if (rl.rlim_cur < want) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < want) {
		int fit = rl.rlim_cur > 2 * spare ? (int)(rl.rlim_cur - spare) : (int)(rl.rlim_cur / 2);
		fprintf(stderr, "atlas-serve: warning: %llu file descriptors allowed (ulimit -n); "
			"--max-connections lowered from %d to %d\n",
			(unsigned long long)rl.rlim_cur, p->max_connections, fit);
		p->max_connections = fit;
	}
}

static void free_keys(struct keys *k)
{
	for (int i = 0; i < k->n; i++)
		free(k->v[i]);
	free(k->v);
}

/* After the first signal: stop accepting and wait up to timeout_s for the
 * requests in flight (a second signal stops waiting); atlas_server_stop
 * then ends the rest with errors. */
static void drain(struct atlas_server *srv, int sig, int timeout_s, const sigset_t *sigs)
{
	struct timespec t0, now, slice = {0, 50 * 1000000L};
	atlas_server_quiesce(srv);
	int64_t n = atlas_server_in_flight(srv);
	fprintf(stderr, "atlas-serve: %s, stopping: %lld requests in flight, waiting up to %d s\n",
		sig == SIGINT ? "interrupted" : "terminated", (long long)n, timeout_s);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		double waited = (double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) * 1e-9;
		if (!(n = atlas_server_in_flight(srv))) {
			fprintf(stderr, "atlas-serve: drained in %.2f s\n", waited);
			return;
		}
		if (waited >= timeout_s) {
			fprintf(stderr, "atlas-serve: %lld requests still in flight after %d s\n",
				(long long)n, timeout_s);
			return;
		}
		if (sigtimedwait(sigs, NULL, &slice) > 0) {
			fprintf(stderr, "atlas-serve: second signal: %lld requests still in flight\n",
				(long long)n);
			return;
		}
	}
}

int main(int argc, char **argv)
{
	struct atlas_server_params p;
	struct keys keys = {0};
	struct atlas_chat_limits tmpl = {0}; /* zero: the defaults */
	const char *model = NULL, *draft_model = NULL;
	bool spec_set = false;
	int shutdown_s = 30;
	int c;
	atlas_server_default_params(&p);
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
		case OPT_KV_DTYPE: p.kv_dtype = cmd_parse_kv_dtype("--kv-dtype", optarg); break;
		case OPT_NO_PREFIX_CACHE: p.no_prefix_cache = true; break;
		case OPT_SPEC:
			p.spec.mode = cmd_parse_spec("--speculative", optarg);
			spec_set = true;
			break;
		case OPT_DRAFT_MODEL: draft_model = optarg; break;
		case OPT_NUM_DRAFT:
			p.spec.num_draft = (int)cmd_parse_int("--num-draft", optarg, 1, ATLAS_SPEC_MAX_DRAFT);
			break;
		case OPT_NO_BATCH_INVARIANT: p.no_batch_invariant = true; break;
		case OPT_API_KEY: add_key(&keys, optarg, "--api-key"); break;
		case OPT_API_KEY_FILE: read_key_file(&keys, optarg); break;
		case OPT_MAX_BODY:
			p.max_body = (size_t)cmd_parse_int("--max-body", optarg, 1, (int64_t)1 << 40);
			break;
		case OPT_MAX_CONNS:
			p.max_connections = (int)cmd_parse_int("--max-connections", optarg, 1, 1 << 20);
			break;
		case OPT_MAX_CONNS_IP:
			p.max_connections_per_ip =
			    (int)cmd_parse_int("--max-connections-per-ip", optarg, 0, 1 << 20);
			break;
		case OPT_TIMEOUT: p.timeout_s = (int)cmd_parse_int("--timeout", optarg, 0, 86400); break;
		case OPT_SHUTDOWN_TIMEOUT:
			shutdown_s = (int)cmd_parse_int("--shutdown-timeout", optarg, 0, 86400);
			break;
		case OPT_ORIGINS: p.allowed_origins = optarg; break;
		case OPT_MAX_CONCURRENT:
			p.max_concurrent = (int)cmd_parse_int("--max-concurrent-requests", optarg, 0, 1 << 20);
			break;
		case OPT_RPM:
			p.rate_limit_rpm = (double)cmd_parse_int("--rate-limit-rpm", optarg, 0, 1 << 30);
			break;
		case OPT_TPM:
			p.rate_limit_tpm = (double)cmd_parse_int("--rate-limit-tpm", optarg, 0, (int64_t)1 << 40);
			break;
		case OPT_TMPL_STEPS:
			tmpl.max_steps =
			    cmd_parse_int("--template-max-steps", optarg, 1, (int64_t)1 << 50);
			break;
		case OPT_TMPL_OUTPUT:
			tmpl.max_output =
			    (size_t)cmd_parse_size("--template-max-output", optarg, 1);
			break;
		case OPT_TMPL_MEMORY:
			tmpl.max_memory =
			    (size_t)cmd_parse_size("--template-max-memory", optarg, 1);
			break;
		case OPT_TOOL_PARSER:
			if (atlas_toolfmt_from_name(optarg) < 0)
				cmd_usage_error("--tool-parser: unknown syntax '%s' (hermes, qwen3_coder, "
						"llama3_json, mistral or none)", optarg);
			p.tool_parser = optarg;
			break;
		case OPT_REASONING_BUDGET:
			p.reasoning_budget = cmd_parse_int("--reasoning-budget", optarg, 0, (int64_t)1 << 30);
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
	if (draft_model && !spec_set)
		p.spec.mode = ATLAS_SPEC_DRAFT;
	if (draft_model && p.spec.mode != ATLAS_SPEC_DRAFT)
		cmd_usage_error("--draft-model is for --speculative draft, not %s",
				atlas_spec_name(p.spec.mode));
	if (p.spec.mode == ATLAS_SPEC_DRAFT && !draft_model)
		cmd_usage_error("--speculative draft needs --draft-model M");
	if (p.spec.num_draft && p.spec.mode == ATLAS_SPEC_NONE)
		cmd_usage_error("--num-draft needs --speculative ngram, draft or mtp");
	int64_t seqs = p.max_seqs ? p.max_seqs : 16, toks = p.max_batch_tokens ? p.max_batch_tokens : 512;
	if (toks < seqs)
		cmd_usage_error("--max-batch-tokens (%lld) must be at least --max-seqs (%lld)",
				(long long)toks, (long long)seqs);
	atlas_chat_set_limits(&tmpl);
	p.api_keys = (const char *const *)keys.v;
	p.n_api_keys = keys.n;
	/* a device that cannot run the ranks fails before the port is bound */
	if (p.tp > 1 && atlas_tp_check_device(p.device, p.tp)) {
		free_keys(&keys);
		return cmd_lib_error();
	}

	char *dir = cmd_resolve_model(model);
	if (!dir) {
		free_keys(&keys);
		return 1;
	}
	p.model_dir = dir;
	char *draft_dir = NULL;
	if (draft_model && !(draft_dir = cmd_resolve_model(draft_model))) {
		free(dir);
		free_keys(&keys);
		return 1;
	}
	p.draft_model_dir = draft_dir;
	fit_fd_limit(&p);

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
		free(draft_dir);
		free_keys(&keys);
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
		drain(srv, sig, shutdown_s, &sigs);
	}
	atlas_server_stop(srv);
	free(dir);
	free(draft_dir);
	free_keys(&keys);
	return rc;
}
