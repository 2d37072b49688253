/* atlas-bench - offline speed measurements with the roofline beside each
 * number: `decode` and `prefill` on a model of a named real shape with
 * random weights made on the GPU (--synthetic), the copy-bandwidth and
 * matrix-rate ceilings measured in the same run, and per-kernel times.
 * Flags and output only; the measurements are lib/bench. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/bench/bench.h"
#include "../lib/core/error.h"
#include "common.h"

#define MAX_LIST 16
#define MAX_PROF 64

static const char usage_text[] =
	"usage: atlas-bench decode --synthetic SHAPE [--batch N[,N...]] [--prompt N] [--gen N] [options]\n"
	"       atlas-bench prefill --synthetic SHAPE [--prompt N[,N...]] [options]\n"
	"\n"
	"Measure decode or prefill speed on random weights at a real model's shape,\n"
	"with the device ceilings measured in the same run and each result given as\n"
	"a fraction of its roofline.\n"
	"\n"
	"  --synthetic SHAPE  model shape: qwen3-0.6b, qwen3-8b, qwen3-32b, llama3-8b\n"
	"  --batch LIST       decode: sequences per step, comma-separated (default 1)\n"
	"  --prompt LIST      prompt tokens (decode default 128, prefill default 512)\n"
	"  --gen N            decode: timed steps per batch size (default 256)\n"
	"  --warmup N         decode: untimed steps first (default 2)\n"
	"  --reps N           prefill: timed repetitions, best kept (default 3)\n"
	"  --device DEV       cuda or cuda:N (default cuda)\n"
	"  --seed N           weights and prompts (default 1)\n"
	"  --copy-size SIZE   bytes of the timed device copy (default 4GiB)\n"
	"  --gemm-n N         T = N = K of the timed matrix product (default 8192)\n"
	"  --profile          per-kernel times of one decode step and one prefill\n"
	"  --no-graphs        run decode steps op by op (no CUDA graphs)\n"
	"  --json             the full result as JSON on stdout (table on stderr)\n"
	"  -q, --quiet        no table\n"
	"  -h, --help         this text\n"
	"      --version      version\n"
	"\n"
	"Exit status: 0 measured, 1 the measurement failed (no GPU, out of memory),\n"
	"2 usage error.\n";

static const struct option longopts[] = {
	{"synthetic", required_argument, NULL, 'S'}, {"batch", required_argument, NULL, 'b'},
	{"prompt", required_argument, NULL, 'p'},    {"gen", required_argument, NULL, 'g'},
	{"warmup", required_argument, NULL, 'w'},    {"reps", required_argument, NULL, 'r'},
	{"device", required_argument, NULL, 'd'},    {"seed", required_argument, NULL, 's'},
	{"copy-size", required_argument, NULL, 'C'}, {"gemm-n", required_argument, NULL, 'G'},
	{"profile", no_argument, NULL, 'P'},         {"no-graphs", no_argument, NULL, 'N'},
	{"json", no_argument, NULL, 'j'},            {"quiet", no_argument, NULL, 'q'},
	{"help", no_argument, NULL, 'h'},            {"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

struct opts {
	const char *cmd, *shape, *device; /* subcommand, --synthetic, --device */
	int64_t batch[MAX_LIST], prompt[MAX_LIST]; /* lists */
	int nbatch, nprompt;               /* their lengths */
	int64_t gen, warmup, reps, copy, gemm_n; /* scalars */
	uint64_t seed;                     /* --seed */
	int profile, graphs, json, quiet;  /* switches */
};

/* "1,8,32" into v (each in [1, max]); exits 2 naming the flag. */
static int parse_list(const char *flag, const char *s, int64_t *v, int64_t max)
{
	char buf[256], *save = NULL;
	int n = 0;
	if (strlen(s) >= sizeof(buf))
		cmd_usage_error("%s: list too long", flag);
	strcpy(buf, s);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (n == MAX_LIST)
			cmd_usage_error("%s: at most %d values", flag, MAX_LIST);
		v[n++] = cmd_parse_int(flag, t, 1, max);
	}
	if (!n)
		cmd_usage_error("%s needs at least one value", flag);
	return n;
}

static void parse(int argc, char **argv, struct opts *o)
{
	int c;
	*o = (struct opts){.device = "cuda", .gen = 256, .warmup = 2, .reps = 3,
			   .copy = (int64_t)4 << 30, .gemm_n = 8192, .seed = 1, .graphs = 1};
	while ((c = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'S': o->shape = optarg; break;
		case 'b': o->nbatch = parse_list("--batch", optarg, o->batch, 1024); break;
		case 'p': o->nprompt = parse_list("--prompt", optarg, o->prompt, 131072); break;
		case 'g': o->gen = cmd_parse_int("--gen", optarg, 1, 1 << 20); break;
		case 'w': o->warmup = cmd_parse_int("--warmup", optarg, 0, 1 << 20); break;
		case 'r': o->reps = cmd_parse_int("--reps", optarg, 1, 1000); break;
		case 'd': o->device = optarg; break;
		case 's': o->seed = cmd_parse_u64("--seed", optarg); break;
		case 'C': o->copy = cmd_parse_size("--copy-size", optarg, 1 << 20); break;
		case 'G': o->gemm_n = cmd_parse_int("--gemm-n", optarg, 64, 65536); break;
		case 'P': o->profile = 1; break;
		case 'N': o->graphs = 0; break;
		case 'j': o->json = 1; break;
		case 'q': o->quiet = 1; break;
		case 'h': fputs(usage_text, stdout); exit(0);
		case 'V': cmd_print_version(); exit(0);
		default: cmd_usage_error("unknown option");
		}
	}
	if (optind >= argc)
		cmd_usage_error("missing command (decode or prefill)");
	o->cmd = argv[optind++];
	if (strcmp(o->cmd, "decode") && strcmp(o->cmd, "prefill"))
		cmd_usage_error("unknown command '%s' (decode or prefill)", o->cmd);
	if (optind < argc)
		cmd_usage_error("unexpected argument '%s'", argv[optind]);
	if (!o->shape)
		cmd_usage_error("--synthetic SHAPE is required (model directories come later)");
	struct atlas_config cfg;
	if (atlas_bench_shape(o->shape, &cfg))
		cmd_usage_error("--synthetic: %s", atlas_errmsg());
	if (!strcmp(o->cmd, "prefill") && o->nbatch)
		cmd_usage_error("--batch is for decode");
	if (!o->nbatch)
		o->batch[o->nbatch++] = 1;
	if (!o->nprompt)
		o->prompt[o->nprompt++] = strcmp(o->cmd, "decode") ? 512 : 128;
	if (!strcmp(o->cmd, "decode") && o->nprompt > 1)
		cmd_usage_error("decode takes one --prompt length");
}

static int64_t max_of(const int64_t *v, int n)
{
	int64_t m = 0;
	for (int i = 0; i < n; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

static void print_profile(FILE *f, const char *title, const struct atlas_kernel_time *rows, int n)
{
	double total = 0;
	for (int i = 0; i < n; i++)
		total += rows[i].ms;
	fprintf(f, "\n%s: %.3f ms of kernels\n%-22s %7s %10s %6s\n", title, total, "kernel", "calls",
		"ms", "%");
	for (int i = 0; i < n; i++)
		fprintf(f, "%-22s %7lld %10.4f %5.1f%%\n", rows[i].name, (long long)rows[i].calls,
			rows[i].ms, total > 0 ? 100.0 * rows[i].ms / total : 0.0);
}

static void print_table(FILE *f, const struct atlas_bench_report *r)
{
	fprintf(f, "%s on %s (driver %d, CUDA %d), %s synthetic BF16, commit %s\n", r->command,
		r->machine.gpu[0] ? r->machine.gpu : r->device, r->machine.driver,
		r->machine.runtime, r->shape, r->machine.commit);
	fprintf(f, "ceilings: copy %.0f GB/s (%lld MiB), BF16 GEMM %d^3: atlas %.1f TFLOP/s",
		r->ceil.copy_gbs, (long long)(r->ceil.copy_bytes >> 20), (int)r->ceil.gemm_n,
		r->ceil.gemm_tflops);
	if (r->ceil.cublaslt_tflops > 0)
		fprintf(f, ", cuBLASLt %.1f TFLOP/s\n", r->ceil.cublaslt_tflops);
	else
		fprintf(f, ", cuBLASLt: %s\n", r->ceil.cublaslt_note);
	if (r->n_decode)
		fprintf(f, "%6s %7s %6s %10s %10s %10s %10s %9s\n", "batch", "prompt", "gen",
			"ttft_ms", "ms/step", "tok/s", "floor_ms", "roofline");
	for (int i = 0; i < r->n_decode; i++) {
		const struct atlas_bench_decode *d = &r->decode[i];
		fprintf(f, "%6lld %7lld %6lld %10.2f %10.3f %10.1f %10.3f %8.1f%%\n",
			(long long)d->batch, (long long)d->prompt, (long long)d->gen, d->ttft_ms,
			d->step_ms, d->tok_s, d->floor_ms, 100 * d->roofline);
	}
	if (r->n_prefill)
		fprintf(f, "%7s %10s %10s %10s %9s\n", "prompt", "ms", "tok/s", "TFLOP/s",
			"roofline");
	for (int i = 0; i < r->n_prefill; i++) {
		const struct atlas_bench_prefill *p = &r->prefill[i];
		fprintf(f, "%7lld %10.2f %10.1f %10.1f %8.1f%%\n", (long long)p->prompt, p->ms,
			p->tok_s, p->tflops, 100 * p->roofline);
	}
	if (r->prof)
		print_profile(f, "one decode step", r->prof, r->n_prof);
	if (r->prof2)
		print_profile(f, "one prefill", r->prof2, r->n_prof2);
}

int main(int argc, char **argv)
{
	struct opts o;
	struct atlas_config cfg;
	struct atlas_bench_report rep = {0};
	struct atlas_bench_decode dec[MAX_LIST];
	struct atlas_bench_prefill pre[MAX_LIST];
	struct atlas_kernel_time prof[MAX_PROF], prof2[MAX_PROF];
	int rc = 0, decode;
	cmd_name = "atlas-bench";
	parse(argc, argv, &o);
	decode = !strcmp(o.cmd, "decode");
	atlas_bench_shape(o.shape, &cfg);

	struct atlas_backend *be = atlas_backend_open(o.device);
	if (!be)
		return cmd_lib_error();
	if (!be->fill_random || !be->measure) {
		cmd_error("device '%s' cannot run synthetic benchmarks (it needs a GPU)", o.device);
		be->destroy(be);
		return 1;
	}
	rep = (struct atlas_bench_report){.command = o.cmd, .shape = o.shape, .device = o.device,
					  .seed = o.seed, .cfg = &cfg};
	atlas_bench_machine(be, &rep.machine);
	/* the ceilings first, while the memory is free */
	if (atlas_bench_ceilings(be, o.copy, o.gemm_n, &rep.ceil)) {
		be->destroy(be);
		return cmd_lib_error();
	}

	int64_t maxb = decode ? max_of(o.batch, o.nbatch) : 1, maxp = max_of(o.prompt, o.nprompt);
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	mp.max_seqs = maxb;
	mp.max_tokens = maxp > maxb ? maxp : maxb;
	mp.max_context = maxp + (decode ? o.gen + o.warmup : 0) + 4;
	struct atlas_model *m = atlas_model_synthetic(&cfg, be, &mp, o.seed);
	if (!m) {
		be->destroy(be);
		return cmd_lib_error();
	}
	atlas_model_set_graphs(m, o.graphs);
	if (decode) {
		for (int i = 0; i < o.nbatch && !rc; i++, rep.n_decode++)
			rc = atlas_bench_run_decode(m, o.batch[i], o.prompt[0], o.gen, o.warmup,
						    rep.ceil.copy_gbs, &dec[i]);
	} else {
		for (int i = 0; i < o.nprompt && !rc; i++, rep.n_prefill++)
			rc = atlas_bench_run_prefill(m, o.prompt[i], o.reps, rep.ceil.gemm_tflops,
						     &pre[i]);
	}
	rep.decode = dec;
	rep.prefill = pre;
	if (!rc && o.profile) {
		rc = atlas_bench_profile(m, be, "decode", o.batch[0], o.prompt[0], prof, MAX_PROF);
		if (rc >= 0) {
			rep.prof = prof, rep.n_prof = rc;
			rc = atlas_bench_profile(m, be, "prefill", 1, o.prompt[0], prof2, MAX_PROF);
		}
		if (rc >= 0)
			rep.prof2 = prof2, rep.n_prof2 = rc, rc = 0;
	}
	if (rc) {
		cmd_lib_error();
		/* the failed run has no numbers */
		if (decode && rep.n_decode)
			rep.n_decode--;
		if (!decode && rep.n_prefill)
			rep.n_prefill--;
	}
	if (!o.quiet)
		print_table(o.json ? stderr : stdout, &rep);
	if (o.json && !rc) {
		char *js = atlas_bench_json(&rep);
		if (js)
			puts(js);
		else
			rc = cmd_lib_error();
		free(js);
	}
	atlas_model_free(m);
	be->destroy(be);
	return rc ? 1 : 0;
}
