/* atlas-bench - speed measurements with the roofline beside each number:
 * `kernels` (every backend op at a model's shapes), `decode`, `prefill`
 * and `generate` (in-process, on a model directory or random weights of a
 * named shape), `serve` (a streaming load generator against an
 * OpenAI-compatible server, or atlas-serve started here), `history`.
 * Flags, tables, gates and exit codes only; the measurements are
 * lib/bench. Exit: 0 measured and every gate met, 1 the harness failed
 * (bad flags too), 2 a gate was missed. */
#include <curl/curl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/backend/kvq.h"
#include "../lib/bench/bench.h"
#include "../lib/bench/loadgen.h"
#include "../lib/bench/runs.h"
#include "../lib/core/error.h"
#include "../lib/core/threads.h"
#include "../lib/engine/session.h"
#include "../lib/model/tp_group.h"
#include "../lib/bench/selfserve.h"
#include "common.h"

#define MAX_LIST 16
#define MAX_GATES 32
#define MAX_ROWS 128

static const char usage_text[] =
	"usage: atlas-bench kernels [--shape SHAPE] [--filter OP] [--tokens N,...] [options]\n"
	"       atlas-bench decode|prefill|generate (-m MODEL | --synthetic SHAPE)\n"
	"                   [--batch N,...] [--prompt N,...] [--gen N,...] [options]\n"
	"       atlas-bench serve (--url URL | --self [-m MODEL]) [--concurrency N,...]\n"
	"                   [--prompt N,...] [--gen N,...] [--requests N] [options]\n"
	"       atlas-bench history [show ID]\n"
	"\n"
	"Measure speed against the ceilings measured in the same run; print a table\n"
	"on stderr (--json: the result on stdout) and record the run under\n"
	"$ATLAS_HOME/runs/ (default ~/.atlas/runs/).\n"
	"\n"
	"What and where:\n"
	"  -m, --model MODEL     model directory or Hub id (decode, prefill, generate,\n"
	"                        serve --self; default for --self: the shipped model)\n"
	"  --synthetic SHAPE     random weights of a named shape instead of -m\n"
	"  --quant FORMAT        --synthetic: the linear layers' weights, bf16 (default)\n"
	"                        fp8-block (FP8 with 128x128 block scales; a GPU)\n"
	"                        w4a16 (4-bit, zero points, scales per 128; a GPU)\n"
	"                        or nvfp4 (E2M1 with F8 scales per 16; a GPU)\n"
	"  --shape SHAPE         kernels: the shapes (default qwen3-8b)\n"
	"                        shapes: qwen3-0.6b, qwen3-8b, qwen3-32b, llama3-8b,\n"
	"                        qwen3-30b-a3b, mixtral-8x7b (mixtures of experts),\n"
	"                        qwen3.5-35b-a3b, qwen3-next-80b-a3b (hybrid)\n"
	"  --device DEV          auto, cpu or cuda[:N] (default auto)\n"
	"  -t, --threads N       CPU threads (default: all cores)\n"
	"  --tp N                decode, prefill, generate, serve --self: tensor\n"
	"                        parallelism over N ranks, one thread each (1; the\n"
	"                        CPU for now; serve --self passes it to the server)\n"
	"Sizes (lists are comma-separated and swept; defaults depend on the device,\n"
	"GPU / CPU):\n"
	"  --filter OP           kernels: only ops whose name contains OP\n"
	"  --tokens LIST         kernels: tokens per call (1,512 / 1,32)\n"
	"  --context N           kernels: keys attention sees (4096 / 512);\n"
	"                        serve --self: the server's context (-c)\n"
	"  --reps N              kernels: timed calls, median kept (20 / 3);\n"
	"                        prefill: timed runs, best kept (3 / 1)\n"
	"  --batch LIST          decode, generate: sequences per step (1)\n"
	"  --prompt LIST         prompt tokens (decode 128 / 32, prefill 512 / 64,\n"
	"                        serve 32)\n"
	"  --gen LIST            generated tokens (256 / 16; serve 16)\n"
	"  --warmup N            decode: untimed steps first (2)\n"
	"  --seed N              weights, buffers and prompts (1)\n"
	"  --copy-size SIZE      bytes of the timed copy (4GiB / 64MiB)\n"
	"  --gemm-n N            T = N = K of the timed matrix product (8192 / 256)\n"
	"  --profile             decode/prefill: per-kernel times (needs a GPU)\n"
	"  --no-graphs           decode: op by op, no CUDA graphs\n"
	"  --batch-invariant     decode, prefill, generate: the kernels the server uses\n"
	"                        by default (a row's bits never depend on its batch)\n"
	"  --kv-dtype FMT        decode, prefill, generate, serve --self: the KV\n"
	"                        cache's format, auto (the activation type), bf16,\n"
	"                        fp8 or q4 (default auto; serve --self passes it on)\n"
	"  --no-baseline         kernels: skip the CPU reference column on a GPU\n"
	"Server load (serve):\n"
	"  --url URL             the server, e.g. http://127.0.0.1:8888\n"
	"  --self                start build's atlas-serve on a free port, then stop it\n"
	"  --no-batch-invariant  with --self: start it with --no-batch-invariant (the\n"
	"                        fastest kernels per step; default: batch-invariant)\n"
	"  --speculative MODE    decode --speculative mtp: also what a speculative step\n"
	"                        costs with the checkpoint's MTP head (a random one\n"
	"                        with --synthetic): verifying 1 + K rows, the head's\n"
	"                        passes, the tokens a step it must give to pay;\n"
	"                        with --self: start it with --speculative MODE (none,\n"
	"                        ngram, draft, mtp); a server that speculates (--self or\n"
	"                        --url) adds spec_accept_rate and spec_tok_per_step\n"
	"                        columns\n"
	"  --draft-model M       with --self: its draft model (implies --speculative\n"
	"                        draft)\n"
	"  --num-draft K         with --self and --speculative: drafts a step (1..16);\n"
	"                        decode --speculative mtp: the K it measures (4)\n"
	"  --concurrency LIST    requests in flight (1)\n"
	"  --requests N          requests per level (default 4 x concurrency, at most 256)\n"
	"  --timeout S           seconds per request and for the server to start (120)\n"
	"  --served-model NAME   the requests' \"model\" field (default)\n"
	"  --api-key KEY         send Authorization: Bearer KEY\n"
	"  --vocab N             prompt ids are drawn from [0, N) (1000, at most the\n"
	"                        model's vocabulary)\n"
	"Gates and output:\n"
	"  --min METRIC=VALUE    fail (exit 2) if any row is below VALUE (repeatable)\n"
	"  --max METRIC=VALUE    fail (exit 2) if any row is above VALUE (repeatable)\n"
	"  --thresholds FILE     JSON object of metric -> minimum (or {\"min\":,\"max\":})\n"
	"  --json                the full result as JSON on stdout\n"
	"  --no-record           do not write the run under $ATLAS_HOME/runs/\n"
	"  -q, --quiet           no table\n"
	"  -h, --help            this text\n"
	"      --version         version\n"
	"\n"
	"Exit status: 0 measured and every gate met, 1 the harness failed (bad flags,\n"
	"no device, server unreachable), 2 a gate was missed.\n";

enum {
	O_SYN = 256, O_SHAPE, O_FILTER, O_DEVICE, O_TOKENS, O_CONTEXT, O_REPS, O_BATCH, O_PROMPT,
	O_GEN, O_WARMUP, O_SEED, O_COPY, O_GEMM, O_PROFILE, O_NOGRAPHS, O_NOBASE, O_URL, O_SELF,
	O_CONC, O_REQS, O_TIMEOUT, O_SERVED, O_KEY, O_VOCAB, O_MIN, O_MAX, O_THRESH, O_JSON,
	O_NOREC, O_VERSION, O_TP, O_NOBI, O_BI, O_QUANT, O_KV_DTYPE, O_SPEC, O_NUM_DRAFT,
	O_DRAFT_MODEL
};

static const struct option longopts[] = {
	{"model", required_argument, NULL, 'm'},    {"synthetic", required_argument, NULL, O_SYN},
	{"quant", required_argument, NULL, O_QUANT},
	{"shape", required_argument, NULL, O_SHAPE}, {"filter", required_argument, NULL, O_FILTER},
	{"device", required_argument, NULL, O_DEVICE}, {"threads", required_argument, NULL, 't'},
	{"tokens", required_argument, NULL, O_TOKENS}, {"context", required_argument, NULL, O_CONTEXT},
	{"reps", required_argument, NULL, O_REPS},  {"batch", required_argument, NULL, O_BATCH},
	{"prompt", required_argument, NULL, O_PROMPT}, {"gen", required_argument, NULL, O_GEN},
	{"warmup", required_argument, NULL, O_WARMUP}, {"seed", required_argument, NULL, O_SEED},
	{"copy-size", required_argument, NULL, O_COPY}, {"gemm-n", required_argument, NULL, O_GEMM},
	{"profile", no_argument, NULL, O_PROFILE},  {"no-graphs", no_argument, NULL, O_NOGRAPHS},
	{"no-baseline", no_argument, NULL, O_NOBASE}, {"url", required_argument, NULL, O_URL},
	{"self", no_argument, NULL, O_SELF},        {"concurrency", required_argument, NULL, O_CONC},
	{"requests", required_argument, NULL, O_REQS}, {"timeout", required_argument, NULL, O_TIMEOUT},
	{"served-model", required_argument, NULL, O_SERVED},
	{"api-key", required_argument, NULL, O_KEY}, {"vocab", required_argument, NULL, O_VOCAB},
	{"min", required_argument, NULL, O_MIN},    {"max", required_argument, NULL, O_MAX},
	{"thresholds", required_argument, NULL, O_THRESH}, {"json", no_argument, NULL, O_JSON},
	{"no-record", no_argument, NULL, O_NOREC},  {"quiet", no_argument, NULL, 'q'},
	{"tp", required_argument, NULL, O_TP}, {"no-batch-invariant", no_argument, NULL, O_NOBI},
	{"speculative", required_argument, NULL, O_SPEC}, {"num-draft", required_argument, NULL, O_NUM_DRAFT},
	{"draft-model", required_argument, NULL, O_DRAFT_MODEL},
	{"batch-invariant", no_argument, NULL, O_BI},
	{"kv-dtype", required_argument, NULL, O_KV_DTYPE},
	{"help", no_argument, NULL, 'h'},           {"version", no_argument, NULL, O_VERSION},
	{NULL, 0, NULL, 0},
};

/* An integer list flag: values and count (0: not given, default applies). */
struct list {
	int64_t v[MAX_LIST]; /* values */
	int n;               /* count */
};

struct opts {
	const char *cmd, *show_id;     /* subcommand; history show's ID */
	const char *model, *synthetic, *shape, *filter, *device; /* what and where */
	const char *quant;             /* --quant: the synthetic model's weights */
	const char *url, *served, *api_key, *thresholds; /* serve, gates */
	struct list batch, prompt, gen, tokens, conc; /* sweeps */
	int64_t context, reps, warmup, copy, gemm_n, requests, timeout, vocab, threads; /* -1 = default */
	int64_t tp;                    /* --tp: tensor-parallel ranks (1) */
	uint64_t seed;                 /* --seed */
	int profile, graphs, baseline, self, json, quiet, record; /* switches */
	int no_bi;                     /* --no-batch-invariant (serve --self) */
	int bi;                        /* --batch-invariant (decode, prefill, generate) */
	enum atlas_kv_dtype kv;        /* --kv-dtype: the KV cache's format (auto) */
	bool kv_given;                 /* --kv-dtype was given */
	enum atlas_spec_mode spec;     /* --speculative (serve --self) */
	const char *draft_model;       /* --draft-model (serve --self), or NULL */
	int spec_set;                  /* --speculative was given */
	int64_t num_draft;             /* --num-draft (serve --self), 0 unset */
	const char *min_max[MAX_GATES]; /* --min/--max specs, in order */
	bool is_max[MAX_GATES];        /* which of the two */
	int n_gates;                   /* count */
};

/* Bad flags are a harness failure here: exit 1 (see the man page). */
static void __attribute__((format(printf, 1, 2), noreturn)) bad(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "atlas-bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'atlas-bench --help' for more information.\n");
	exit(1);
}

static int64_t num(const char *flag, const char *s, int64_t min, int64_t max)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || v < min || v > max)
		bad("%s: '%s' is not an integer in %lld..%lld", flag, s, (long long)min,
		    (long long)max);
	return v;
}

static int64_t size_arg(const char *flag, const char *s)
{
	static const struct { const char *u; double m; } units[] = {
		{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
	char *end;
	double v = strtod(s, &end);
	for (size_t i = 0; end != s && i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(end, units[i].u) && v * units[i].m >= 1 << 20 && v * units[i].m < 1e15)
			return (int64_t)(v * units[i].m);
	bad("%s: '%s' is not a size of at least 1MiB (e.g. 64MiB, 4GiB)", flag, s);
}

static void list_arg(const char *flag, const char *s, struct list *l, int64_t max)
{
	char buf[256], *save = NULL;
	if (strlen(s) >= sizeof(buf))
		bad("%s: list too long", flag);
	snprintf(buf, sizeof(buf), "%s", s);
	l->n = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (l->n == MAX_LIST)
			bad("%s: at most %d values", flag, MAX_LIST);
		l->v[l->n++] = num(flag, t, 1, max);
	}
	if (!l->n)
		bad("%s needs at least one value", flag);
}

static void valid_flags(void)
{
	fprintf(stderr, "valid options:");
	for (const struct option *o = longopts; o->name; o++)
		fprintf(stderr, " --%s", o->name);
	fprintf(stderr, "\n");
}

static void parse(int argc, char **argv, struct opts *o)
{
	int c;
	*o = (struct opts){.device = "auto", .context = -1, .reps = -1, .warmup = 2, .copy = -1,
			   .gemm_n = -1, .requests = -1, .timeout = 120, .vocab = 1000, .seed = 1,
			   .graphs = 1, .baseline = 1, .record = 1, .served = "default", .tp = 1};
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":m:t:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case O_SYN: o->synthetic = optarg; break;
		case O_QUANT:
			if (strcmp(optarg, "bf16") && strcmp(optarg, "fp8-block") &&
			    strcmp(optarg, "w4a16") && strcmp(optarg, "nvfp4"))
				bad("--quant: '%s' is not one of bf16, fp8-block, w4a16, nvfp4", optarg);
			o->quant = optarg;
			break;
		case O_SHAPE: o->shape = optarg; break;
		case O_FILTER: o->filter = optarg; break;
		case O_DEVICE: o->device = optarg; break;
		case 't': o->threads = num("--threads", optarg, 1, 1024); break;
		case O_TP: o->tp = num("--tp", optarg, 1, 256); break;
		case O_TOKENS: list_arg("--tokens", optarg, &o->tokens, 65536); break;
		case O_CONTEXT: o->context = num("--context", optarg, 1, 1 << 20); break;
		case O_REPS: o->reps = num("--reps", optarg, 1, 10000); break;
		case O_BATCH: list_arg("--batch", optarg, &o->batch, 1024); break;
		case O_PROMPT: list_arg("--prompt", optarg, &o->prompt, 131072); break;
		case O_GEN: list_arg("--gen", optarg, &o->gen, 1 << 20); break;
		case O_WARMUP: o->warmup = num("--warmup", optarg, 0, 1 << 20); break;
		case O_SEED: o->seed = (uint64_t)num("--seed", optarg, 0, INT64_MAX); break;
		case O_COPY: o->copy = size_arg("--copy-size", optarg); break;
		case O_GEMM: o->gemm_n = num("--gemm-n", optarg, 16, 65536); break;
		case O_PROFILE: o->profile = 1; break;
		case O_NOGRAPHS: o->graphs = 0; break;
		case O_NOBASE: o->baseline = 0; break;
		case O_URL: o->url = optarg; break;
		case O_SELF: o->self = 1; break;
		case O_NOBI: o->no_bi = 1; break;
		case O_SPEC: {
			enum atlas_spec_mode m;
			if (atlas_spec_parse(optarg, &m))
				bad("--speculative: %s", atlas_errmsg());
			o->spec = m;
			o->spec_set = 1;
			break;
		}
		case O_DRAFT_MODEL: o->draft_model = optarg; break;
		case O_NUM_DRAFT: o->num_draft = num("--num-draft", optarg, 1, ATLAS_SPEC_MAX_DRAFT); break;
		case O_BI: o->bi = 1; break;
		case O_KV_DTYPE:
			if (atlas_kv_dtype_parse(optarg, &o->kv))
				bad("--kv-dtype: unknown KV cache format '%s' (" CMD_KV_DTYPES ")",
				    optarg);
			o->kv_given = true;
			break;
		case O_CONC: list_arg("--concurrency", optarg, &o->conc, 1024); break;
		case O_REQS: o->requests = num("--requests", optarg, 1, 100000); break;
		case O_TIMEOUT: o->timeout = num("--timeout", optarg, 1, 86400); break;
		case O_SERVED: o->served = optarg; break;
		case O_KEY: o->api_key = optarg; break;
		case O_VOCAB: o->vocab = num("--vocab", optarg, 1, 1 << 30); break;
		case O_MIN:
		case O_MAX:
			if (o->n_gates == MAX_GATES)
				bad("at most %d thresholds", MAX_GATES);
			o->is_max[o->n_gates] = c == O_MAX;
			o->min_max[o->n_gates++] = optarg;
			break;
		case O_THRESH: o->thresholds = optarg; break;
		case O_JSON: o->json = 1; break;
		case O_NOREC: o->record = 0; break;
		case 'q': o->quiet = 1; break;
		case 'h': fputs(usage_text, stdout); exit(0);
		case O_VERSION: cmd_print_version(); exit(0);
		case ':': bad("option '%s' needs a value", argv[optind - 1]);
		default:
			valid_flags();
			bad("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		bad("missing command (kernels, decode, prefill, generate, serve or history)");
	o->cmd = argv[optind++];
	if (!strcmp(o->cmd, "history") && optind < argc && !strcmp(argv[optind], "show")) {
		if (optind + 1 >= argc)
			bad("history show needs a run ID");
		o->show_id = argv[optind + 1];
		optind += 2;
	}
	if (optind < argc)
		bad("unexpected argument '%s'", argv[optind]);
	if (!strstr(" kernels decode prefill generate serve history ", o->cmd) ||
	    strchr(o->cmd, ' ') || !*o->cmd)
		bad("unknown command '%s' (kernels, decode, prefill, generate, serve or history)",
		    o->cmd);
}

/* Subcommand-specific checks of the flags that do not depend on the device. */
static void check(struct opts *o)
{
	struct atlas_config cfg;
	bool model_cmd = !strcmp(o->cmd, "decode") || !strcmp(o->cmd, "prefill") ||
			 !strcmp(o->cmd, "generate");
	const char *shape = o->synthetic ? o->synthetic : o->shape;
	if (shape && atlas_bench_shape(shape, &cfg))
		bad("%s: %s", o->synthetic ? "--synthetic" : "--shape", atlas_errmsg());
	if (model_cmd && !o->model == !o->synthetic)
		bad("%s needs one of -m MODEL or --synthetic SHAPE", o->cmd);
	if (o->quant && !o->synthetic)
		bad("--quant goes with --synthetic (a checkpoint's format is its own)");
	if (!strcmp(o->cmd, "prefill") && o->batch.n)
		bad("--batch is for decode and generate");
	if (!strcmp(o->cmd, "serve") && !o->url == !o->self)
		bad("serve needs one of --url URL or --self");
	if (!strcmp(o->cmd, "serve") && o->url && o->model)
		bad("-m is for --self (the server at --url has its own model)");
	if (o->tp > 1 && !model_cmd && !(!strcmp(o->cmd, "serve") && o->self))
		bad("--tp is for decode, prefill, generate and serve --self");
	/* a server at --url runs in the mode it was started with */
	if (o->bi && !model_cmd)
		bad("--batch-invariant is for decode, prefill and generate (serve: the server's mode)");
	if (o->draft_model && !o->spec_set)
		o->spec = ATLAS_SPEC_DRAFT;
	const bool spec_cost = !strcmp(o->cmd, "decode") && o->spec == ATLAS_SPEC_MTP;
	if ((o->spec || o->num_draft || o->draft_model) && !(!strcmp(o->cmd, "serve") && o->self) &&
	    !(spec_cost && !o->draft_model))
		bad("--speculative, --draft-model and --num-draft are for serve --self (the server "
		    "started here; serve --url reports the server's own speculation), and "
		    "decode --speculative mtp (what its steps cost)");
	if (spec_cost && o->tp > 1)
		bad("decode --speculative mtp runs on one rank");
	if (o->draft_model && o->spec != ATLAS_SPEC_DRAFT)
		bad("--draft-model is for --speculative draft, not %s", atlas_spec_name(o->spec));
	if (o->spec == ATLAS_SPEC_DRAFT && !o->draft_model)
		bad("--speculative draft needs --draft-model M");
	if (o->num_draft && !o->spec)
		bad("--num-draft needs --speculative ngram, draft or mtp");
	if (o->no_bi && !(!strcmp(o->cmd, "serve") && o->self))
		bad("--no-batch-invariant is for serve --self (the server started here)");
	if (o->kv_given && !model_cmd && !(!strcmp(o->cmd, "serve") && o->self))
		bad("--kv-dtype is for decode, prefill, generate and serve --self (serve --url: "
		    "the server's format)");
	if (o->url && strncmp(o->url, "http://", 7) && strncmp(o->url, "https://", 8))
		bad("--url: '%s' is not an http:// or https:// address", o->url);
	struct atlas_bench_gate g;
	for (int i = 0; i < o->n_gates; i++)
		if (atlas_bench_gate_parse(o->cmd, o->min_max[i], o->is_max[i], &g))
			bad("%s: %s", o->is_max[i] ? "--max" : "--min", atlas_errmsg());
}

/* Rows of results as a table: the named keys of each object. */
static void table(FILE *f, json_object *rows, const char *const *cols)
{
	for (int c = 0; cols[c]; c++)
		fprintf(f, c ? " %12s" : "%-14s", cols[c]);
	fprintf(f, "\n");
	for (size_t i = 0; i < json_object_array_length(rows); i++) {
		json_object *r = json_object_array_get_idx(rows, i), *v;
		for (int c = 0; cols[c]; c++) {
			char cell[64] = "-";
			if (json_object_object_get_ex(r, cols[c], &v) && v) {
				if (json_object_is_type(v, json_type_string))
					snprintf(cell, sizeof(cell), "%s", json_object_get_string(v));
				else if (json_object_is_type(v, json_type_int))
					snprintf(cell, sizeof(cell), "%lld",
						 (long long)json_object_get_int64(v));
				else
					snprintf(cell, sizeof(cell), "%.4g", json_object_get_double(v));
			}
			fprintf(f, c ? " %12s" : "%-14s", cell);
		}
		fprintf(f, "\n");
	}
}

/* Defaults that depend on the device: GPU value, CPU value. */
static void list_default(struct list *l, int64_t v)
{
	if (!l->n)
		l->v[l->n++] = v;
}

static void resolve(struct opts *o, bool gpu)
{
	bool pre = !strcmp(o->cmd, "prefill"), srv = !strcmp(o->cmd, "serve");
	if (o->reps < 0)
		o->reps = !strcmp(o->cmd, "kernels") ? (gpu ? 20 : 3) : (gpu ? 3 : 1);
	if (o->context < 0 && !srv)
		o->context = gpu ? 4096 : 512;
	if (o->copy < 0)
		o->copy = gpu ? (int64_t)4 << 30 : (int64_t)64 << 20;
	if (o->gemm_n < 0)
		o->gemm_n = gpu ? 8192 : 256;
	if (!o->tokens.n) {
		list_default(&o->tokens, 1);
		o->tokens.v[o->tokens.n++] = gpu ? 512 : 32;
	}
	list_default(&o->batch, 1);
	list_default(&o->conc, 1);
	list_default(&o->prompt, srv ? 32 : pre ? (gpu ? 512 : 64) : (gpu ? 128 : 32));
	list_default(&o->gen, srv ? 16 : gpu ? 256 : 16);
	if (o->context < 0) {
		/* serve --self: room for the longest request (no device is
		 * opened here, so no GPU default; a fixed 512 cut 512-token
		 * prompts to one generated token) */
		int64_t mp = 0, mg = 0;
		for (int i = 0; i < o->prompt.n; i++)
			mp = o->prompt.v[i] > mp ? o->prompt.v[i] : mp;
		for (int i = 0; i < o->gen.n; i++)
			mg = o->gen.v[i] > mg ? o->gen.v[i] : mg;
		o->context = mp + mg + 1 > 512 ? mp + mg + 1 : 512;
	}
	if (!o->shape)
		o->shape = "qwen3-8b";
}

static json_object *jlist(const struct list *l)
{
	json_object *a = json_object_new_array();
	for (int i = 0; i < l->n; i++)
		json_object_array_add(a, json_object_new_int64(l->v[i]));
	return a;
}

static json_object *jstr(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

/* Every parameter the command used, defaults included. */
static json_object *params_json(const struct opts *o, const char *model_dir)
{
	json_object *p = json_object_new_object();
#define ADD(k, v) json_object_object_add(p, k, v)
#define I(v) json_object_new_int64(v)
#define B(v) json_object_new_boolean(v)
	ADD("device", jstr(o->device));
	ADD("threads", I(atlas_threads_count()));
	ADD("seed", I((int64_t)o->seed));
	if (!strcmp(o->cmd, "kernels")) {
		ADD("shape", jstr(o->shape));
		ADD("filter", jstr(o->filter));
		ADD("tokens", jlist(&o->tokens));
		ADD("context", I(o->context));
		ADD("reps", I(o->reps));
		ADD("baseline", B(o->baseline));
	} else if (strcmp(o->cmd, "serve")) {
		ADD("model", jstr(model_dir));
		ADD("synthetic", jstr(o->synthetic));
		if (o->quant)
			ADD("quant", jstr(o->quant));
		ADD("tp", I(o->tp));
		if (strcmp(o->cmd, "prefill"))
			ADD("batch", jlist(&o->batch));
		ADD("prompt", jlist(&o->prompt));
		if (strcmp(o->cmd, "prefill")) {
			ADD("gen", jlist(&o->gen));
			ADD("warmup", I(o->warmup));
			ADD("graphs", B(o->graphs));
		} else {
			ADD("reps", I(o->reps));
		}
		ADD("profile", B(o->profile));
		ADD("batch_invariant", B(o->bi));
		ADD("kv_dtype", jstr(atlas_kv_dtype_name(o->kv)));
		/* decode --speculative mtp: the drafts of its spec row */
		if (!strcmp(o->cmd, "decode")) {
			ADD("speculative", jstr(atlas_spec_name(o->spec)));
			ADD("num_draft", o->spec ? I(o->num_draft ? o->num_draft
								 : ATLAS_SPEC_DEFAULT_DRAFT)
					       : NULL);
		}
	} else {
		ADD("url", jstr(o->url));
		ADD("self", B(o->self));
		ADD("model", jstr(model_dir));
		ADD("served_model", jstr(o->served));
		ADD("tp", I(o->tp));
		/* asked for; null with --url (server.batch_invariant: as reported) */
		ADD("batch_invariant", o->self ? B(!o->no_bi) : NULL);
		ADD("kv_dtype", o->self ? jstr(atlas_kv_dtype_name(o->kv)) : NULL);
		ADD("speculative", o->self ? jstr(atlas_spec_name(o->spec)) : NULL);
		ADD("draft_model", o->self && o->draft_model ? jstr(o->draft_model) : NULL);
		ADD("concurrency", jlist(&o->conc));
		ADD("prompt", jlist(&o->prompt));
		ADD("gen", jlist(&o->gen));
		ADD("requests", I(o->requests));
		ADD("timeout_s", I(o->timeout));
		ADD("vocab", I(o->vocab));
		ADD("api_key", B(o->api_key != NULL));
	}
	if (strcmp(o->cmd, "serve")) {
		ADD("copy_size", I(o->copy));
		ADD("gemm_n", I(o->gemm_n));
	}
	ADD("thresholds_file", jstr(o->thresholds));
	ADD("record", B(o->record));
#undef ADD
#undef I
#undef B
	return p;
}

/* The per-kernel table of a profile: kernel, launches, device ms, share. */
static void print_profile(FILE *f, const char *what, const struct atlas_kernel_time *r, int n)
{
	double total = 0;
	for (int i = 0; i < n; i++)
		total += r[i].ms;
	fprintf(f, "\n%s: %.3f ms of kernels\n%-28s %6s %10s %7s\n", what, total, "kernel", "calls",
		"ms", "%");
	for (int i = 0; i < n; i++)
		fprintf(f, "%-28s %6lld %10.4f %6.1f%%\n", r[i].name, (long long)r[i].calls, r[i].ms,
			total > 0 ? 100.0 * r[i].ms / total : 0.0);
}

static void print_ceilings(FILE *f, const struct atlas_bench_ceilings *c)
{
	fprintf(f, "ceilings: copy %.1f GB/s (%lld MiB), matrix product %lld^3: %.3f TFLOP/s",
		c->copy_gbs, (long long)(c->copy_bytes >> 20), (long long)c->gemm_n,
		c->gemm_tflops);
	if (c->cublaslt_tflops > 0)
		fprintf(f, ", cuBLASLt %.1f TFLOP/s\n", c->cublaslt_tflops);
	else
		fprintf(f, " (baseline: %s)\n", c->cublaslt_note[0] ? c->cublaslt_note : "none");
}

/* kernels: rows into `res`. */
static int run_kernels(const struct opts *o, struct atlas_backend *be, json_object *doc,
		       json_object *res, FILE *tf)
{
	struct atlas_config cfg;
	struct atlas_bench_ceilings ceil;
	struct atlas_bench_kernel *rows = calloc(MAX_ROWS, sizeof(*rows));
	struct atlas_backend *base = NULL;
	int rc, n;
	atlas_bench_shape(o->shape, &cfg);
	if (!rows)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if ((rc = atlas_bench_ceilings(be, o->copy, o->gemm_n, &ceil))) {
		free(rows);
		return rc;
	}
	json_object_object_add(doc, "ceilings", atlas_bench_ceilings_json(&ceil));
	if (o->baseline && strcmp(be->name, "cpu") && !(base = atlas_backend_cpu_new())) {
		free(rows);
		return ATLAS_ENOMEM;
	}
	struct atlas_bench_kernels_params kp = {o->filter, o->tokens.v, o->tokens.n, o->context,
						o->reps, o->seed};
	n = atlas_bench_kernels(be, base, &cfg, &ceil, &kp, rows, MAX_ROWS);
	if (base)
		base->destroy(base);
	for (int i = 0; i < n; i++)
		json_object_array_add(res, atlas_bench_kernel_json(&rows[i]));
	free(rows);
	if (n < 0)
		return n;
	if (!n)
		return atlas_error(ATLAS_ENOTFOUND, "--filter '%s' matches no op (ops: %s)",
				   o->filter, atlas_bench_kernel_ops());
	if (tf) {
		static const char *const cols[] = {"op", "what", "tokens", "ms", "gbs", "tflops",
						   "roofline", "baseline_ms", "speedup", NULL};
		fprintf(tf, "kernels at the %s shapes on %s\n", o->shape, be->name);
		print_ceilings(tf, &ceil);
		table(tf, res, cols);
	}
	return 0;
}

/* How run_model builds each rank's model (one rank, or every rank of a
 * --tp group): the same parameters and seed, only be and comm differ. */
struct model_src {
	const struct opts *o;
	const char *dir;
	struct atlas_model_params mp;
};

static struct atlas_model *build_model(int rank, struct atlas_backend *be,
				       struct atlas_comm *comm, void *arg)
{
	(void)rank;
	struct model_src *src = arg;
	struct atlas_model_params mp = src->mp;
	struct atlas_model *m;
	mp.comm = comm;
	mp.synthetic_quant = src->o->quant;
	if (src->o->synthetic) {
		struct atlas_config cfg;
		atlas_bench_shape(src->o->synthetic, &cfg);
		atlas_bench_prepare(be);
		m = atlas_model_synthetic(&cfg, be, &mp, src->o->seed);
	} else {
		m = atlas_model_load(src->dir, be, &mp);
	}
	if (m)
		atlas_model_set_graphs(m, src->o->graphs);
	return m;
}

/* decode, prefill, generate: rows into `res`. The session's device is
 * open (be is its backend, rank 0's with --tp); the model is loaded into
 * it here, after the ceilings are measured, by `src`'s builder. */
static int run_model(const struct opts *o, struct atlas_session *ses, struct model_src *srcp,
		     const char *dir, json_object *doc, json_object *res, FILE *tf)
{
	bool pre = !strcmp(o->cmd, "prefill"), gen = !strcmp(o->cmd, "generate");
	struct atlas_bench_ceilings ceil;
	struct atlas_backend *be = atlas_session_backend(ses);
	bool tp = atlas_session_world(ses) > 1;
	struct model_src src = {.o = o, .dir = dir};
	struct atlas_model_params *mp = &src.mp;
	int64_t maxb = 1, maxp = 1, maxg = 0;
	int rc;
	for (int i = 0; i < o->batch.n && !pre; i++)
		maxb = o->batch.v[i] > maxb ? o->batch.v[i] : maxb;
	for (int i = 0; i < o->prompt.n; i++)
		maxp = o->prompt.v[i] > maxp ? o->prompt.v[i] : maxp;
	for (int i = 0; i < o->gen.n && !pre; i++)
		maxg = o->gen.v[i] > maxg ? o->gen.v[i] : maxg;
	if ((rc = atlas_bench_ceilings(be, o->copy, o->gemm_n, &ceil)))
		return rc;
	json_object_object_add(doc, "ceilings", atlas_bench_ceilings_json(&ceil));
	atlas_model_default_params(mp);
	mp->max_seqs = maxb;
	mp->max_tokens = maxp > maxb ? maxp : maxb;
	mp->max_context = maxp + (pre ? 0 : maxg + o->warmup) + 4;
	/* decode --speculative mtp: its rounds append 2 + k tokens, the
	 * head's 2 k */
	const int64_t spec_k = o->num_draft ? o->num_draft : ATLAS_SPEC_DEFAULT_DRAFT;
	const bool spec = !pre && !gen && o->spec == ATLAS_SPEC_MTP;
	if (spec)
		mp->max_context += (maxg + 1) * (2 * spec_k + 2);
	mp->kv_dtype = o->kv;
	*srcp = src;
	if ((rc = atlas_session_load(ses, mp)))
		return rc;
	struct atlas_model *m = atlas_session_model(ses);
	json_object_object_add(doc, "model",
			       atlas_bench_model_json(atlas_model_config(m),
						      o->synthetic ? o->synthetic : dir,
						      atlas_model_weight_bytes(m)));
	for (int b = 0; b < (pre ? 1 : o->batch.n) && !rc; b++)
		for (int p = 0; p < o->prompt.n && !rc; p++)
			for (int g = 0; g < (pre ? 1 : o->gen.n) && !rc; g++) {
				if (pre) {
					struct atlas_bench_prefill r;
					rc = atlas_bench_run_prefill(m, o->prompt.v[p], o->reps,
								     atlas_bench_matrix_rate(&ceil), &r);
					if (!rc)
						json_object_array_add(res, atlas_bench_prefill_json(&r));
				} else {
					struct atlas_bench_decode r;
					rc = atlas_bench_run_decode(m, be, o->batch.v[b],
								    o->prompt.v[p], o->gen.v[g],
								    gen ? 0 : o->warmup, ceil.copy_gbs,
								    &r);
					if (!rc)
						json_object_array_add(res, atlas_bench_decode_json(&r, gen));
				}
			}
	/* decode --speculative mtp: what a speculative step costs, with the
	 * checkpoint's head or a synthetic one */
	json_object *spec_o = NULL;
	struct atlas_bench_spec sr;
	if (!rc && spec) {
		struct atlas_model *h = o->synthetic ? atlas_model_synthetic_mtp(m, mp, o->seed + 99)
						     : atlas_model_load_mtp(dir, m, mp);
		rc = h ? atlas_bench_run_spec(m, h, spec_k, o->prompt.v[0], o->gen.v[0], &sr)
		       : ATLAS_EINVAL;
		atlas_model_free(h);
		if (!rc)
			json_object_object_add(doc, "spec", spec_o = atlas_bench_spec_json(&sr));
	}
	/* --profile: one step of the command's kind; decode adds the prefill
	 * of its prompt ("profile_prefill"), so both gaps show in one run */
	json_object *prof = NULL, *prof_pre = NULL;
	struct atlas_kernel_time rows[64], prows[64];
	int nrows = 0, nprows = 0;
	if (!rc && o->profile) {
		nrows = atlas_bench_profile(m, be, pre ? "prefill" : "decode", o->batch.v[0],
					    o->prompt.v[0], rows, 64);
		if (nrows < 0)
			rc = nrows;
		else
			prof = atlas_bench_profile_json(rows, nrows);
	}
	/* decode over several batch sizes: a table for each of the others too
	 * ("profile_batches": the first is "profile" as well) */
	json_object *prof_b = NULL;
	char *prof_txt = NULL;
	size_t prof_len = 0;
	FILE *pf = NULL;
	if (!rc && o->profile && !pre && !gen && o->batch.n > 1) {
		prof_b = json_object_new_array();
		json_object *first = json_object_new_object();
		json_object_object_add(first, "batch", json_object_new_int64(o->batch.v[0]));
		json_object_object_add(first, "kernels", json_object_get(prof));
		json_object_array_add(prof_b, first);
		pf = tf ? open_memstream(&prof_txt, &prof_len) : NULL;
		for (int b = 1; b < o->batch.n && !rc; b++) {
			struct atlas_kernel_time brows[64];
			int nb = atlas_bench_profile(m, be, "decode", o->batch.v[b], o->prompt.v[0],
						     brows, 64);
			if (nb < 0) {
				rc = nb;
				break;
			}
			json_object *e = json_object_new_object();
			json_object_object_add(e, "batch", json_object_new_int64(o->batch.v[b]));
			json_object_object_add(e, "kernels", atlas_bench_profile_json(brows, nb));
			json_object_array_add(prof_b, e);
			if (pf) {
				char what[64];
				snprintf(what, sizeof(what), "one decode step at batch %lld",
					 (long long)o->batch.v[b]);
				print_profile(pf, what, brows, nb);
			}
		}
		if (pf)
			fclose(pf);
	}
	if (!rc && o->profile && !pre && !gen) {
		nprows = atlas_bench_profile(m, be, "prefill", 1, o->prompt.v[0], prows, 64);
		if (nprows < 0)
			rc = nprows;
		else
			prof_pre = atlas_bench_profile_json(prows, nprows);
	}
	json_object_object_add(doc, "profile", prof);
	if (prof_b)
		json_object_object_add(doc, "profile_batches", prof_b);
	if (prof_pre)
		json_object_object_add(doc, "profile_prefill", prof_pre);
	if (!rc && tf) {
		static const char *const dcols[] = {"batch", "prompt", "gen", "ttft_ms", "ms_per_step",
						    "tok_s", "floor_ms", "roofline", NULL};
		static const char *const gcols[] = {"batch", "prompt", "gen", "ttft_ms", "total_ms",
						    "e2e_tok_s", "tok_s", "roofline", NULL};
		static const char *const pcols[] = {"prompt", "ms", "tok_s", "tflops", "roofline", NULL};
		fprintf(tf, "%s of %s on %s", o->cmd, o->synthetic ? o->synthetic : dir, be->name);
		if (tp)
			fprintf(tf, " (%lld tensor-parallel thread ranks)", (long long)o->tp);
		if (o->bi)
			fprintf(tf, ", batch-invariant");
		if (o->kv)
			fprintf(tf, ", KV cache %s", atlas_kv_dtype_name(o->kv));
		fprintf(tf, "\n");
		print_ceilings(tf, &ceil);
		table(tf, res, pre ? pcols : gen ? gcols : dcols);
		if (prof) {
			char what[64];
			snprintf(what, sizeof(what), "%s", pre ? "one prefill" : "one decode step");
			if (prof_b)
				snprintf(what, sizeof(what), "one decode step at batch %lld",
					 (long long)o->batch.v[0]);
			print_profile(tf, what, rows, nrows);
		}
		if (prof_txt)
			fputs(prof_txt, tf);
		if (prof_pre)
			print_profile(tf, "one prefill", prows, nprows);
		if (spec_o)
			fprintf(tf, "speculative (mtp, %lld drafts, %lld-token prompt): a step %.3f ms, "
				"verifying 1 + %lld rows %.3f ms, the head %.3f ms; pays above %.2f "
				"tokens a step; %.2fx at 60%% of drafts kept, %.2fx at 80%%, %.2fx "
				"at 90%%\n", (long long)sr.k, (long long)sr.prompt, sr.step_ms,
				(long long)sr.k, sr.verify_ms, sr.head_ms, sr.breakeven, sr.speedup[0],
				sr.speedup[1], sr.speedup[2]);
	}
	free(prof_txt);
	return rc;
}

static json_object *serve_row(const struct atlas_loadgen_result *r)
{
	json_object *o = json_object_new_object();
#define D(k, v) json_object_object_add(o, k, json_object_new_double(v))
#define I(k, v) json_object_object_add(o, k, json_object_new_int64(v))
	I("concurrency", r->concurrency);
	I("requests", r->requests);
	I("prompt", r->prompt);
	I("gen", r->output);
	I("ok", r->ok);
	I("errors", r->errors);
	D("error_rate", r->requests ? (double)r->errors / (double)r->requests : 0);
	I("tokens", r->tokens);
	D("wall_s", r->wall_s);
	D("throughput_tok_s", r->throughput);
	D("req_s", r->req_s);
	D("ttft_p50_ms", r->ttft_p50);
	D("ttft_p90_ms", r->ttft_p90);
	D("ttft_p99_ms", r->ttft_p99);
	D("tpot_p50_ms", r->tpot_p50);
	D("tpot_p99_ms", r->tpot_p99);
	D("e2e_p50_ms", r->e2e_p50);
	json_object_object_add(o, "first_error", r->first_error[0] ? jstr(r->first_error) : NULL);
#undef D
#undef I
	return o;
}

/* The server's speculative counters (atlas-serve's /metrics): steps that
 * verified drafts, drafts, accepted drafts, tokens those steps emitted.
 * false when it does not report them. */
static bool spec_counters(const struct opts *o, double v[4])
{
	static const char *const names[] = {"atlas_spec_steps_total", "atlas_spec_draft_tokens_total",
					    "atlas_spec_accepted_tokens_total",
					    "atlas_spec_emitted_tokens_total"};
	for (int i = 0; i < 4; i++)
		if (atlas_loadgen_metric(o->url, o->api_key, names[i],
					 o->timeout < 10 ? o->timeout : 10, &v[i]) != 1)
			return false;
	return true;
}

/* serve: rows into `res`; the server at o->url, or one started here. */
static int run_serve(struct opts *o, const char *dir, json_object *doc, json_object *res,
		     FILE *tf)
{
	struct atlas_selfserve ss = {0};
	struct atlas_config cfg;
	char *exe = NULL, ms[32];
	long status = 0;
	int rc = 0;
	int64_t maxc = 0;
	for (int i = 0; i < o->conc.n; i++)
		maxc = o->conc.v[i] > maxc ? o->conc.v[i] : maxc;
	if (dir && !atlas_config_load(dir, &cfg) && cfg.vocab_size < o->vocab)
		o->vocab = cfg.vocab_size;
	if (o->self) {
		const char *args[32] = {"-m", dir, "--device", o->device, "--served-model-name",
					o->served};
		int n = 6;
		snprintf(ms, sizeof(ms), "%lld", (long long)(maxc > 16 ? maxc : 16));
		args[n++] = "--max-seqs";
		args[n++] = ms;
		char cs[32];
		if (o->context > 0) {
			snprintf(cs, sizeof(cs), "%lld", (long long)o->context);
			args[n++] = "-c";
			args[n++] = cs;
		}
		char ts[16];
		if (o->tp > 1) {
			snprintf(ts, sizeof(ts), "%lld", (long long)o->tp);
			args[n++] = "--tp";
			args[n++] = ts;
		}
		if (o->api_key) {
			args[n++] = "--api-key";
			args[n++] = o->api_key;
		}
		if (o->no_bi)
			args[n++] = "--no-batch-invariant";
		if (o->kv) {
			args[n++] = "--kv-dtype";
			args[n++] = atlas_kv_dtype_name(o->kv);
		}
		char nd[16];
		if (o->spec) {
			args[n++] = "--speculative";
			args[n++] = atlas_spec_name(o->spec);
		}
		if (o->num_draft) {
			snprintf(nd, sizeof(nd), "%lld", (long long)o->num_draft);
			args[n++] = "--num-draft";
			args[n++] = nd;
		}
		if (o->draft_model) {
			args[n++] = "--draft-model";
			args[n++] = o->draft_model;
		}
		if (!(exe = atlas_selfserve_sibling("atlas-serve")))
			return ATLAS_ENOTFOUND;
		rc = atlas_selfserve_start(&ss, exe, args, o->timeout);
		free(exe);
		if (rc)
			return rc;
		o->url = ss.url;
	} else if ((rc = atlas_loadgen_probe(o->url, o->timeout < 10 ? o->timeout : 10, &status))) {
		return rc;
	}
	/* the mode as the server reports it (atlas-serve's gauge), so a run
	 * against --url records it too; null from other servers */
	double inv = -1;
	if (atlas_loadgen_metric(o->url, o->api_key, "atlas_batch_invariant",
				 o->timeout < 10 ? o->timeout : 10, &inv) != 1)
		inv = -1;
	json_object *srv = json_object_new_object();
	json_object_object_add(srv, "url", jstr(o->url));
	json_object_object_add(srv, "started_here", json_object_new_boolean(o->self));
	json_object_object_add(srv, "batch_invariant",
			       inv < 0 ? NULL : json_object_new_boolean(inv != 0));
	json_object_object_add(doc, "server", srv);
	int64_t all_ok = 0;
	bool speculated = false;
	for (int c = 0; c < o->conc.n && !rc; c++)
		for (int p = 0; p < o->prompt.n && !rc; p++)
			for (int g = 0; g < o->gen.n && !rc; g++) {
				int64_t n = o->requests > 0 ? o->requests : 4 * o->conc.v[c];
				struct atlas_loadgen_params lp = {
					o->url, o->served, o->api_key, o->conc.v[c],
					n > 256 && o->requests < 0 ? 256 : n, o->prompt.v[p],
					o->gen.v[g], o->vocab, o->timeout, o->seed};
				struct atlas_loadgen_result r;
				double sp0[4], sp1[4];
				bool spc = spec_counters(o, sp0);
				rc = atlas_loadgen_run(&lp, &r);
				json_object *row = rc ? NULL : serve_row(&r);
				if (row && spc && spec_counters(o, sp1) && sp1[0] > sp0[0]) {
					/* the server speculated during this level: its
					 * counters' growth (atlas-serve's /metrics) */
					double st = sp1[0] - sp0[0], dr = sp1[1] - sp0[1],
					       ac = sp1[2] - sp0[2], em = sp1[3] - sp0[3];
					json_object_object_add(row, "spec_drafted", json_object_new_int64((int64_t)dr));
					json_object_object_add(row, "spec_accepted", json_object_new_int64((int64_t)ac));
					json_object_object_add(row, "spec_accept_rate",
							       json_object_new_double(dr > 0 ? ac / dr : 0));
					json_object_object_add(row, "spec_tok_per_step",
							       json_object_new_double(em / st));
					speculated = true;
				}
				if (row)
					json_object_array_add(res, row);
				all_ok += r.ok;
				if (!rc && r.errors)
					fprintf(stderr, "atlas-bench: %lld of %lld requests failed: %s\n",
						(long long)r.errors, (long long)r.requests,
						r.first_error);
			}
	if (o->self)
		atlas_selfserve_stop(&ss);
	if (!rc && !all_ok)
		rc = atlas_error(ATLAS_EIO, "every request to '%s' failed", o->url);
	if (!rc && tf) {
		const char *cols[] = {"concurrency", "prompt", "gen", "errors",
				      "throughput_tok_s", "ttft_p50_ms", "ttft_p90_ms",
				      "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
				      speculated ? "spec_accept_rate" : NULL, "spec_tok_per_step", NULL};
		fprintf(tf, "serve load against %s%s%s%s%s\n", o->url,
			o->self ? " (started here)" : "",
			inv < 0 ? "" : inv ? ", batch-invariant" : ", not batch-invariant",
			o->self && o->kv ? ", KV cache " : "",
			o->self && o->kv ? atlas_kv_dtype_name(o->kv) : "");
		table(tf, res, cols);
	}
	if (o->self)
		o->url = NULL; /* the address was the child's */
	return rc;
}

static int history(const struct opts *o)
{
	char *s = o->show_id ? atlas_bench_history_show(o->show_id) : atlas_bench_history_list();
	if (!s)
		return cmd_lib_error();
	fputs(s, stdout);
	free(s);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct atlas_bench_gate gates[MAX_GATES];
	struct atlas_bench_machine mach;
	struct atlas_backend *be = NULL;
	struct atlas_session *ses = NULL;
	struct model_src src = {.o = &o};
	char *dir = NULL;
	int ng = 0, rc = 0;
	cmd_name = "atlas-bench";
	parse(argc, argv, &o);
	if (!strcmp(o.cmd, "history"))
		return history(&o);
	check(&o);
	for (int i = 0; i < o.n_gates; i++)
		atlas_bench_gate_parse(o.cmd, o.min_max[i], o.is_max[i], &gates[ng++]);
	if (o.thresholds && (ng = atlas_bench_gates_file(o.cmd, o.thresholds, gates, ng,
							 MAX_GATES)) < 0)
		bad("--thresholds: %s", atlas_errmsg());
	if (o.threads > 0)
		atlas_threads_set((int)o.threads);
	if ((o.model || (o.self && !o.url)) && !(dir = cmd_resolve_model(o.model)))
		return 1;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	bool serve = !strcmp(o.cmd, "serve");
	if (serve && o.tp > 1 && atlas_tp_check_device(o.device, (int)o.tp)) {
		free(dir);
		return cmd_lib_error();
	} else if (!serve) {
		/* the device now (its ceilings are measured before the weights
		 * take memory); the model in run_model, through src's builder */
		struct atlas_session_params sp;
		atlas_session_default_params(&sp);
		sp.model_dir = dir;
		sp.device = o.device;
		sp.tp = (int)o.tp;
		sp.no_tok = true;
		sp.batch_invariant = o.bi;
		sp.build = build_model;
		sp.build_arg = &src;
		if (!(ses = atlas_session_new(&sp))) {
			free(dir);
			return cmd_lib_error();
		}
		be = atlas_session_backend(ses);
	}
	resolve(&o, be && strcmp(be->name, "cpu"));
	atlas_bench_machine(be, &mach);
	json_object *doc = atlas_bench_doc_new(o.cmd, be ? be->name : o.device, &mach);
	json_object *res = json_object_new_array();
	FILE *tf = o.quiet ? NULL : stderr;
	json_object_object_add(doc, "params", params_json(&o, dir));
	if (!strcmp(o.cmd, "kernels"))
		rc = run_kernels(&o, be, doc, res, tf);
	else if (serve)
		rc = run_serve(&o, dir, doc, res, tf);
	else
		rc = run_model(&o, ses, &src, dir, doc, res, tf);
	json_object_object_add(doc, "results", res);
	int missed = 0;
	if (!rc) {
		missed = atlas_bench_gates_check(res, gates, ng);
		json_object_object_add(doc, "metrics", atlas_bench_metrics_json(o.cmd, res));
		json_object_object_add(doc, "gates", atlas_bench_gates_json(gates, ng));
		for (int i = 0; i < ng; i++)
			if (!gates[i].pass)
				fprintf(stderr, "atlas-bench: gate missed: %s %s %g (worst: %g)\n",
					gates[i].metric, gates[i].is_max ? "<=" : ">=", gates[i].limit,
					gates[i].actual);
		char *id = NULL;
		if (o.record && !atlas_bench_record(doc, o.cmd, &id) && tf)
			fprintf(tf, "recorded as %s\n", id);
		else if (o.record && !id)
			cmd_error("cannot record the run: %s", atlas_errmsg());
		free(id);
		if (o.json) {
			char *s = atlas_bench_doc_text(doc);
			if (s)
				puts(s);
			free(s);
		}
	} else {
		cmd_lib_error();
	}
	json_object_put(doc);
	atlas_session_close(ses); /* the backend (every rank's with --tp) and model */
	free(dir);
	curl_global_cleanup();
	return rc ? 1 : missed ? 2 : 0;
}
