/* atlas-load - inspect, validate and convert checkpoints.
 *
 *   atlas-load inspect [--tensors] [--json] MODEL
 *   atlas-load validate [--json] MODEL
 *   atlas-load convert [--dtype bf16|f16|f32] [--quant fp8-block|fp8-channel|w4a16|nvfp4]
 *                      [--max-shard-size SIZE] MODEL OUT
 *
 * Flags, output formats and calls into lib/io/convert.c and
 * lib/model/tensors.c. */
#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/backend/backend.h"
#include "../lib/core/error.h"
#include "../lib/io/config.h"
#include "../lib/io/convert.h"
#include "../lib/io/quant.h"
#include "../lib/io/safetensors.h"
#include "../lib/model/family.h"
#include "../lib/model/tensors.h"
#include "common.h"

static const char usage_text[] =
	"usage: atlas-load inspect [--tensors] [--json] MODEL\n"
	"   or: atlas-load validate [--json] MODEL\n"
	"   or: atlas-load convert [--dtype bf16|f16|f32] [--quant SCHEME] [--max-shard-size SIZE]\n"
	"                          MODEL OUT\n"
	"\n"
	"Inspect, validate and convert Hugging Face checkpoints. MODEL is a directory\n"
	"or a Hub id org/name[@revision] in the Hugging Face cache.\n"
	"\n"
	"  inspect     architecture, family, parameters, dtypes, bytes, tensors, context\n"
	"              length, tokenizer, chat template, this build's kernel targets\n"
	"  validate    check every tensor the family needs against config.json; exit 1\n"
	"              with the list of problems\n"
	"  convert     write OUT: safetensors in another dtype, sharded, with an index,\n"
	"              config and tokenizer files copied; with --quant, the linear weights\n"
	"              of the decoder layers quantized (round to nearest)\n"
	"\n"
	"      --tensors             inspect: list every tensor (name, dtype, shape, bytes)\n"
	"      --json                inspect, validate: one JSON object on stdout\n"
	"      --dtype T             convert: bf16, f16 or f32 (with --quant: of the tensors\n"
	"                            left unquantized; default bf16)\n"
	"      --quant SCHEME        convert: fp8-block (fp8, 128x128 blocks), fp8-channel\n"
	"                            (compressed-tensors FP8), w4a16 (compressed-tensors int4,\n"
	"                            group 128) or nvfp4 (compressed-tensors NVFP4)\n"
	"      --max-shard-size SIZE convert: largest shard, e.g. 500MB, 2GiB (default 5GB)\n"
	"  -h, --help                show this help\n"
	"  -V, --version             show the version\n";

enum { OPT_TENSORS = 256, OPT_JSON, OPT_DTYPE, OPT_SHARD, OPT_QUANT };

static const struct option longopts[] = {
	{"tensors", no_argument, NULL, OPT_TENSORS},
	{"json", no_argument, NULL, OPT_JSON},
	{"dtype", required_argument, NULL, OPT_DTYPE},
	{"max-shard-size", required_argument, NULL, OPT_SHARD},
	{"quant", required_argument, NULL, OPT_QUANT},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

struct opts {
	const char *cmd;          /* inspect, validate, convert */
	const char *model;        /* MODEL */
	const char *out;          /* convert: OUT */
	bool tensors, json;       /* --tensors, --json */
	const char *dtype;        /* --dtype */
	enum atlas_dtype dt;      /* parsed --dtype */
	int64_t shard;            /* --max-shard-size */
	const char *quant;        /* --quant */
	enum atlas_quant_scheme scheme; /* parsed --quant */
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	int c;
	*o = (struct opts){.shard = 5000000000LL};
	if (argc > 1 && argv[1][0] != '-') {
		o->cmd = argv[1];
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_TENSORS: o->tensors = true; break;
		case OPT_JSON: o->json = true; break;
		case OPT_DTYPE: o->dtype = optarg; break;
		case OPT_SHARD: o->shard = cmd_parse_size("--max-shard-size", optarg, 1); break;
		case OPT_QUANT: o->quant = optarg; break;
		case 'h': fputs(usage_text, stdout); exit(0);
		case 'V': cmd_print_version(); exit(0);
		default: fprintf(stderr, "Try 'atlas-load --help' for more information.\n"); exit(2);
		}
	}
	if (!o->cmd)
		cmd_usage_error("no command given (inspect, validate or convert)");
	bool convert = !strcmp(o->cmd, "convert");
	if (!convert && strcmp(o->cmd, "inspect") && strcmp(o->cmd, "validate"))
		cmd_usage_error("unknown command '%s' (expected inspect, validate or convert)", o->cmd);
	int want = convert ? 2 : 1;
	if (argc - optind < want)
		cmd_usage_error("%s: missing %s", o->cmd,
				argc - optind == 0 ? "MODEL" : "OUT directory");
	if (argc - optind > want)
		cmd_usage_error("unexpected argument '%s'", argv[optind + want]);
	o->model = argv[optind];
	o->out = convert ? argv[optind + 1] : NULL;
	if (o->tensors && strcmp(o->cmd, "inspect"))
		cmd_usage_error("--tensors applies to inspect only");
	if (o->json && convert)
		cmd_usage_error("--json applies to inspect and validate only");
	if (convert) {
		if (!o->dtype && !o->quant)
			cmd_usage_error("convert: --dtype is required (bf16, f16 or f32) unless --quant is given");
		if (o->quant && atlas_quant_scheme_parse(o->quant, &o->scheme))
			cmd_usage_error("--quant: '%s' is not one of fp8-block, fp8-channel, w4a16, "
					"nvfp4",
					o->quant);
		if (!o->dtype)
			o->dt = ATLAS_DTYPE_BF16;
		else if (!strcmp(o->dtype, "bf16"))
			o->dt = ATLAS_DTYPE_BF16;
		else if (!strcmp(o->dtype, "f16") || !strcmp(o->dtype, "fp16"))
			o->dt = ATLAS_DTYPE_F16;
		else if (!strcmp(o->dtype, "f32") || !strcmp(o->dtype, "fp32"))
			o->dt = ATLAS_DTYPE_F32;
		else
			cmd_usage_error("--dtype: '%s' is not one of bf16, f16, f32", o->dtype);
	} else if (o->dtype) {
		cmd_usage_error("--dtype applies to convert only");
	} else if (o->quant) {
		cmd_usage_error("--quant applies to convert only");
	}
}

/* --- inspect ------------------------------------------------------------------ */

/* The build's kernel targets usable by `family`: entries "arch/fam/quant"
 * whose fam is the family or "common", joined by ", " into buf. */
static void targets_for(const char *family, char *buf, size_t n)
{
	const char *all = atlas_kernel_targets(), *p = all;
	size_t off = 0;
	buf[0] = '\0';
	while (p && *p) {
		const char *end = strstr(p, ", ");
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *s1 = memchr(p, '/', len);
		const char *s2 = s1 ? memchr(s1 + 1, '/', len - (size_t)(s1 + 1 - p)) : NULL;
		if (s2) {
			size_t fl = (size_t)(s2 - s1 - 1);
			bool ok = (fl == 6 && !strncmp(s1 + 1, "common", 6)) ||
				  (family && fl == strlen(family) && !strncmp(s1 + 1, family, fl));
			if (ok && off + len + 3 < n)
				off += (size_t)snprintf(buf + off, n - off, "%s%.*s", off ? ", " : "",
							(int)len, p);
		}
		p = end ? end + 2 : NULL;
	}
}

static void human(char *buf, size_t n, double v, const char *const *units, double step)
{
	int u = 0;
	while (v >= step && units[u + 1])
		v /= step, u++;
	snprintf(buf, n, u ? "%.2f %s" : "%.0f%s%s", v, u ? units[u] : (units[0][0] ? " " : ""),
		 u ? "" : units[0]);
}

/* A terminal's progress line for convert: percent, bytes written of the
 * total, redrawn when the percent changes. */
struct progress_line {
	int last; /* percent last drawn, -1: none */
};

static void draw_progress(void *arg, int64_t done, int64_t total)
{
	struct progress_line *p = arg;
	static const char *const bunits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", NULL};
	char d[32], t[32];
	int pct = total > 0 ? (int)(done * 100 / total) : 100;
	if (pct == p->last)
		return;
	p->last = pct;
	human(d, sizeof(d), (double)done, bunits, 1024);
	human(t, sizeof(t), (double)total, bunits, 1024);
	fprintf(stderr, "\ratlas-load: writing %3d%% (%s of %s)  ", pct, d, t);
	fflush(stderr);
}

/* convert, with a progress line when stderr is a terminal. */
static int convert_progress(const struct opts *o, const char *dir, int *shards)
{
	struct progress_line p = {-1};
	const bool tty = isatty(STDERR_FILENO);
	atlas_convert_set_progress(tty ? draw_progress : NULL, &p);
	int rc = atlas_convert_quant(dir, o->out, o->dt, o->scheme, o->shard, shards);
	atlas_convert_set_progress(NULL, NULL);
	if (tty && p.last >= 0)
		fputc('\n', stderr);
	return rc;
}

static int inspect(const struct opts *o, const char *dir)
{
	struct atlas_config c;
	struct atlas_ckpt_info ci;
	char targets[1024], pbuf[32], bbuf[32];
	static const char *const punits[] = {"", "K", "M", "B", NULL};
	static const char *const bunits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", NULL};

	struct atlas_quant q;
	if (atlas_config_load(dir, &c) || atlas_ckpt_inspect(dir, &ci))
		return cmd_lib_error();
	/* an unsupported quantization is shown, not fatal: inspect describes */
	const bool qok = atlas_quant_load(dir, &q) == 0;
	char qdesc[160];
	if (!qok)
		snprintf(qdesc, sizeof(qdesc), "unsupported: %s", atlas_errmsg());
	else
		snprintf(qdesc, sizeof(qdesc), "%s", q.method ? q.name : "");
	const bool fp8 = qok && (q.method == ATLAS_QUANT_FP8 || q.method == ATLAS_QUANT_CT_FP8);
	/* the layouts the W4B kernels take (decoder.c's w4b_native; a
	 * matrix whose rows are not a multiple of 32 is still dequantized) */
	const bool w4 = qok && q.bits == 4 && !q.desc_act &&
			(q.method == ATLAS_QUANT_AWQ || q.method == ATLAS_QUANT_GPTQ ||
			 q.method == ATLAS_QUANT_CT_INT) &&
			(q.group_size == -1 || (q.group_size > 0 && q.group_size % 32 == 0));
	const struct atlas_family *fam = atlas_family_find(&c);
	const char *why = fam ? NULL : atlas_errmsg();
	targets_for(fam ? fam->name : NULL, targets, sizeof(targets));
	bool cpu_only = !atlas_kernel_targets()[0];

	if (o->json) {
		struct json_object *j = json_object_new_object(), *dts = json_object_new_object();
		struct json_object *tg = json_object_new_array();
		json_object_object_add(j, "model", json_object_new_string(dir));
		json_object_object_add(j, "architecture", json_object_new_string(c.architecture));
		json_object_object_add(j, "model_type", json_object_new_string(c.model_type));
		json_object_object_add(j, "family", fam ? json_object_new_string(fam->name) : NULL);
		json_object_object_add(j, "parameters", json_object_new_int64(ci.n_params));
		json_object_object_add(j, "bytes", json_object_new_int64(ci.n_bytes));
		json_object_object_add(j, "tensors", json_object_new_int64(ci.n_tensors));
		json_object_object_add(j, "files", json_object_new_int64(ci.n_files));
		for (int d = 0; d < ATLAS_DTYPE_COUNT; d++)
			if (ci.params_by_dtype[d])
				json_object_object_add(dts, atlas_dtype_name(d),
						       json_object_new_int64(ci.params_by_dtype[d]));
		json_object_object_add(j, "dtypes", dts);
		json_object_object_add(j, "context_length", json_object_new_int64(c.max_position));
		json_object_object_add(j, "layers", json_object_new_int64(c.num_layers));
		json_object_object_add(j, "hidden_size", json_object_new_int64(c.hidden_size));
		json_object_object_add(j, "vocab_size", json_object_new_int64(c.vocab_size));
		json_object_object_add(j, "moe", atlas_ckpt_moe_json(&c));
		json_object_object_add(j, "linear_attention", atlas_ckpt_hybrid_json(&c));
		struct json_object *mh = NULL;
		if (ci.mtp_tensors) {
			mh = json_object_new_object();
			json_object_object_add(mh, "layers", json_object_new_int64(c.mtp_layers));
			json_object_object_add(mh, "tensors", json_object_new_int64(ci.mtp_tensors));
			json_object_object_add(mh, "parameters", json_object_new_int64(ci.mtp_params));
		}
		json_object_object_add(j, "mtp_head", mh);
		json_object_object_add(j, "quantization",
				       qdesc[0] ? json_object_new_string(qdesc) : NULL);
		json_object_object_add(j, "tokenizer", json_object_new_string(ci.tokenizer_type));
		json_object_object_add(j, "chat_template", json_object_new_boolean(ci.chat_template));
		for (char *p = targets, *e; *p; p = e ? e + 2 : p + strlen(p)) {
			e = strstr(p, ", ");
			json_object_array_add(tg, json_object_new_string_len(p, e ? (int)(e - p)
										   : (int)strlen(p)));
		}
		json_object_object_add(j, "kernel_targets", tg);
		if (o->tensors) {
			struct atlas_st *st = atlas_st_open(dir);
			struct json_object *arr = json_object_new_array();
			for (int64_t i = 0; st && i < atlas_st_count(st); i++) {
				const struct atlas_tensor_info *t = atlas_st_get(st, i);
				struct json_object *e = json_object_new_object(), *sh = json_object_new_array();
				json_object_object_add(e, "name", json_object_new_string(t->name));
				json_object_object_add(e, "dtype", json_object_new_string(atlas_dtype_name(t->dtype)));
				for (int d = 0; d < t->ndim; d++)
					json_object_array_add(sh, json_object_new_int64(t->shape[d]));
				json_object_object_add(e, "shape", sh);
				json_object_object_add(e, "bytes", json_object_new_int64((int64_t)t->nbytes));
				json_object_array_add(arr, e);
			}
			atlas_st_close(st);
			json_object_object_add(j, "tensor_list", arr);
		}
		puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN |
							  JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(j);
		atlas_quant_free(&q);
		return 0;
	}
	human(pbuf, sizeof(pbuf), (double)ci.n_params, punits, 1000);
	human(bbuf, sizeof(bbuf), (double)ci.n_bytes, bunits, 1024);
	printf("model:           %s\n", dir);
	printf("architecture:    %s (model_type %s)\n",
	       c.architecture[0] ? c.architecture : "-", c.model_type);
	printf("family:          %s\n", fam ? fam->name : why);
	printf("parameters:      %s (%lld)\n", pbuf, (long long)ci.n_params);
	printf("dtypes:         ");
	for (int d = 0; d < ATLAS_DTYPE_COUNT; d++)
		if (ci.params_by_dtype[d])
			printf(" %s %.1f%%", atlas_dtype_name(d),
			       100.0 * (double)ci.params_by_dtype[d] / (double)ci.n_params);
	printf("\nbytes:           %s (%lld)\n", bbuf, (long long)ci.n_bytes);
	printf("tensors:         %lld in %lld file%s\n", (long long)ci.n_tensors,
	       (long long)ci.n_files, ci.n_files == 1 ? "" : "s");
	printf("context length:  %lld\n", (long long)c.max_position);
	printf("shape:           %lld layers, hidden %lld, %lld heads (%lld kv), head_dim %lld, "
	       "vocab %lld\n",
	       (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads,
	       (long long)c.num_kv_heads, (long long)c.head_dim, (long long)c.vocab_size);
	char *moe = atlas_ckpt_moe_text(&c);
	if (moe)
		fputs(moe, stdout);
	free(moe);
	char *lin = atlas_ckpt_hybrid_text(&c);
	if (lin)
		fputs(lin, stdout);
	free(lin);
	if (ci.mtp_tensors)
		printf("mtp head:        %lld layer%s, %lld tensors, %lld parameters "
		       "(--speculative mtp)\n", (long long)(c.mtp_layers ? c.mtp_layers : 1),
		       c.mtp_layers > 1 ? "s" : "", (long long)ci.mtp_tensors,
		       (long long)ci.mtp_params);
	if (qdesc[0])
		printf("quantization:    %s%s\n", qdesc,
		       fp8   ? " (linear layers FP8 on GPUs, dequantized on the CPU)"
		       : w4  ? " (linear layers 4-bit on GPUs, dequantized on the CPU)"
		       : qok ? " (dequantized to the activation type at load)"
			     : "");
	printf("tokenizer:       %s\n", ci.tokenizer_type[0] ? ci.tokenizer_type : "none");
	printf("chat template:   %s\n", ci.chat_template ? "yes" : "no");
	printf("kernel targets:  %s\n", cpu_only ? "none (CPU-only build)"
				       : targets[0] ? targets : "none for this family");
	if (o->tensors) {
		struct atlas_st *st = atlas_st_open(dir);
		char shape[128];
		for (int64_t i = 0; st && i < atlas_st_count(st); i++) {
			const struct atlas_tensor_info *t = atlas_st_get(st, i);
			size_t off = 0;
			shape[0] = '\0';
			for (int d = 0; d < t->ndim && off + 24 < sizeof(shape); d++)
				off += (size_t)snprintf(shape + off, sizeof(shape) - off, "%s%lld",
							d ? ", " : "", (long long)t->shape[d]);
			printf("%s\t%s\t[%s]\t%zu\n", t->name, atlas_dtype_name(t->dtype), shape,
			       t->nbytes);
		}
		atlas_st_close(st);
	}
	atlas_quant_free(&q);
	return 0;
}

/* --- validate ------------------------------------------------------------------ */

struct findings {
	struct json_object *problems, *warnings; /* JSON arrays (--json) */
	bool json;                                /* collect instead of print */
	int n_warn;                               /* warnings seen */
};

static void on_finding(void *arg, enum atlas_finding level, const char *msg)
{
	struct findings *f = arg;
	bool problem = level == ATLAS_FINDING_PROBLEM;
	if (!problem)
		f->n_warn++;
	if (f->json)
		json_object_array_add(problem ? f->problems : f->warnings, json_object_new_string(msg));
	else
		printf("%s: %s\n", problem ? "problem" : "warning", msg);
}

static int validate(const struct opts *o, const char *dir)
{
	struct findings f = {.json = o->json, .problems = json_object_new_array(),
		.warnings = json_object_new_array()};
	int n = atlas_model_validate(dir, on_finding, &f);
	if (n < 0) {
		json_object_put(f.problems);
		json_object_put(f.warnings);
		return cmd_lib_error();
	}
	if (o->json) {
		struct json_object *j = json_object_new_object();
		json_object_object_add(j, "model", json_object_new_string(dir));
		json_object_object_add(j, "valid", json_object_new_boolean(n == 0));
		json_object_object_add(j, "problems", f.problems);
		json_object_object_add(j, "warnings", f.warnings);
		puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN |
							  JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(j);
	} else {
		json_object_put(f.problems);
		json_object_put(f.warnings);
		if (n)
			printf("%s: %d problem%s, %d warning%s\n", dir, n, n == 1 ? "" : "s", f.n_warn,
			       f.n_warn == 1 ? "" : "s");
		else
			printf("%s: valid (%d warning%s)\n", dir, f.n_warn, f.n_warn == 1 ? "" : "s");
	}
	if (n)
		cmd_error("'%s' is not a valid checkpoint: %d problem%s", dir, n, n == 1 ? "" : "s");
	return n ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc, shards = 0;

	cmd_name = "atlas-load";
	parse_args(argc, argv, &o);
	char *dir = cmd_resolve_model(o.model);
	if (!dir)
		return 1;
	if (!strcmp(o.cmd, "inspect")) {
		rc = inspect(&o, dir);
	} else if (!strcmp(o.cmd, "validate")) {
		rc = validate(&o, dir);
	} else if ((rc = convert_progress(&o, dir, &shards))) {
		rc = cmd_lib_error();
	} else {
		fprintf(stderr, "atlas-load: wrote %s as %s%s%s in %d shard%s\n", o.out,
			o.scheme ? atlas_quant_scheme_name(o.scheme) : "",
			o.scheme ? ", the rest " : "", atlas_dtype_name(o.dt), shards,
			shards == 1 ? "" : "s");
		printf("%s\n", o.out);
		rc = 0;
	}
	free(dir);
	return rc;
}
