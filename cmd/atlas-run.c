/* atlas-run - batch and pipeline generation.
 *
 *   atlas-run [-m MODEL] -p PROMPT [-p PROMPT...]   generate from prompts
 *   atlas-run [-m MODEL] -f FILE [--jsonl]          one prompt per line
 *   atlas-run [-m MODEL] --chat [--system TEXT]      interactive chat
 *   atlas-run tokenize | generate | detokenize      the pipe stages
 *   atlas-run template [-m MODEL] < request.json    render the chat template
 *
 * Flags, usage and calls into libatlas only; the formats live in
 * lib/engine/pipe.c, generation in lib/engine/generate.c. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "../lib/backend/backend.h"
#include "../lib/core/error.h"
#include "../lib/core/log.h"
#include "../lib/core/threads.h"
#include "../lib/engine/generate.h"
#include "../lib/engine/pipe.h"
#include "../lib/io/config.h"
#include "../lib/model/model.h"
#include "../lib/model/tp_group.h"
#include "../lib/tok/chat.h"
#include "../lib/tok/tok.h"
#include "common.h"

static const char usage_text[] =
	"usage: atlas-run [options] -p PROMPT [-p PROMPT...]\n"
	"   or: atlas-run [options] -f FILE [--jsonl]\n"
	"   or: atlas-run [options] --chat [--system TEXT]\n"
	"   or: atlas-run tokenize [-m MODEL] [--jsonl] [--no-special] [--whole] [--show] < text\n"
	"   or: atlas-run generate [options] [--echo] [--jsonl] < ids\n"
	"   or: atlas-run detokenize [-m MODEL] [--jsonl] < ids\n"
	"   or: atlas-run template [-m MODEL] < request.json\n"
	"\n"
	"Generate text with a model. Text goes to stdout, timings and logs to stderr.\n"
	"\n"
	"Model and device:\n"
	"  -m, --model MODEL         model directory or Hub id org/name[@rev]\n"
	"                            (default: the small model shipped with Atlas)\n"
	"      --device DEV          auto, cpu or cuda[:N] (default auto)\n"
	"  -c, --ctx-size N          context length to allocate (default: the\n"
	"                            model's, at most 4096)\n"
	"  -t, --threads N           CPU threads (default: all cores)\n"
	"      --tp N                tensor parallelism over N ranks, one thread each\n"
	"                            (default 1); on the CPU, N thread ranks in this\n"
	"                            process; on CUDA, one GPU per rank\n"
	"\n"
	"Input:\n"
	"  -p, --prompt TEXT         a prompt; repeat for several\n"
	"  -f, --file FILE           prompts, one per line ('-' for stdin)\n"
	"      --jsonl               JSON lines: -f reads {\"prompt\": ...}, output is\n"
	"                            {\"text\": ..., ...}; pipe stages read and write\n"
	"                            {\"text\": ...} / {\"ids\": [...]}\n"
	"\n"
	"Chat:\n"
	"      --chat                talk with the model: read turns from stdin\n"
	"                            (readline on a terminal; a line ending in '\\'\n"
	"                            continues; Ctrl-D ends)\n"
	"      --chat-template       wrap each -p/-f prompt in the model's chat\n"
	"                            template as one user turn (default: raw text)\n"
	"      --system TEXT         system message for --chat / --chat-template\n"
	"\n"
	"Sampling (defaults from the model's generation_config.json):\n"
	"  -n, --max-tokens N        most tokens to generate (default 256)\n"
	"      --temperature T       0 = greedy\n"
	"      --top-k K             keep the K most likely tokens (0 = off)\n"
	"      --top-p P             nucleus sampling mass (1 = off)\n"
	"      --min-p P             drop tokens under P x p(best) (0 = off)\n"
	"      --repeat-penalty R    repetition penalty over the context (1 = off)\n"
	"      --presence-penalty X  subtract X from seen tokens (0 = off)\n"
	"      --frequency-penalty X subtract X per occurrence (0 = off)\n"
	"  -s, --seed N              random seed (default 0)\n"
	"      --ignore-eos          do not stop at end-of-sequence tokens\n"
	"      --stop STR            stop when STR appears; repeat for several\n"
	"\n"
	"Pipe stages:\n"
	"      --echo                generate: print the prompt ids first\n"
	"      --no-special          tokenize: add no BOS/EOS\n"
	"      --whole               tokenize: all of stdin is one document\n"
	"      --show                tokenize: one token a line: id, text, bytes\n"
	"\n"
	"Other:\n"
	"  -q, --quiet               no timing summary\n"
	"  -v, --verbose             log model loading and device choice\n"
	"  -h, --help                show this help\n"
	"  -V, --version             show the version\n";

enum { OPT_TEMP = 256, OPT_TOPK, OPT_TOPP, OPT_MINP, OPT_REP, OPT_PRES, OPT_FREQ,
	OPT_IGNORE_EOS, OPT_STOP, OPT_DEVICE, OPT_JSONL, OPT_ECHO, OPT_NOSPECIAL,
	OPT_WHOLE, OPT_CHAT, OPT_CHAT_TEMPLATE, OPT_SYSTEM, OPT_SHOW, OPT_TP };

static const struct option longopts[] = {
	{"model", required_argument, NULL, 'm'},
	{"prompt", required_argument, NULL, 'p'},
	{"file", required_argument, NULL, 'f'},
	{"max-tokens", required_argument, NULL, 'n'},
	{"ctx-size", required_argument, NULL, 'c'},
	{"threads", required_argument, NULL, 't'},
	{"seed", required_argument, NULL, 's'},
	{"temperature", required_argument, NULL, OPT_TEMP},
	{"top-k", required_argument, NULL, OPT_TOPK},
	{"top-p", required_argument, NULL, OPT_TOPP},
	{"min-p", required_argument, NULL, OPT_MINP},
	{"repeat-penalty", required_argument, NULL, OPT_REP},
	{"presence-penalty", required_argument, NULL, OPT_PRES},
	{"frequency-penalty", required_argument, NULL, OPT_FREQ},
	{"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
	{"stop", required_argument, NULL, OPT_STOP},
	{"device", required_argument, NULL, OPT_DEVICE},
	{"jsonl", no_argument, NULL, OPT_JSONL},
	{"echo", no_argument, NULL, OPT_ECHO},
	{"no-special", no_argument, NULL, OPT_NOSPECIAL},
	{"whole", no_argument, NULL, OPT_WHOLE},
	{"chat", no_argument, NULL, OPT_CHAT},
	{"chat-template", no_argument, NULL, OPT_CHAT_TEMPLATE},
	{"system", required_argument, NULL, OPT_SYSTEM},
	{"show", no_argument, NULL, OPT_SHOW},
	{"tp", required_argument, NULL, OPT_TP},
	{"quiet", no_argument, NULL, 'q'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

/* Command-line state. Sampling fields are "unset" (NAN / -1) until given,
 * so generation_config.json can fill them in. */
struct opts {
	const char *mode;        /* NULL, "tokenize", "generate", "detokenize", "template" */
	const char *system;      /* --system */
	const char *model;       /* -m, or NULL for the default model */
	const char *device;      /* --device */
	const char **prompts;    /* -p values */
	int n_prompts;           /* count of prompts */
	const char *file;        /* -f */
	const char **stop;       /* --stop values */
	int n_stop;              /* count of stop */
	int64_t max_tokens;      /* -n, -1 unset */
	int64_t ctx;             /* -c, 0 unset */
	int tp;                  /* --tp: tensor-parallel ranks (1) */
	double temperature, top_p, min_p, rep, pres, freq; /* NAN unset */
	int64_t top_k;           /* -1 unset */
	uint64_t seed;           /* --seed */
	bool ignore_eos, jsonl, echo, no_special, whole, quiet;
	bool chat;               /* --chat */
	bool chat_template;      /* --chat-template */
	bool show;               /* --show */
};

/* Everything loaded for a run. */
struct ctx {
	struct opts *o;              /* options */
	char *dir;                   /* resolved model directory */
	struct atlas_backend *be;    /* compute backend */
	struct atlas_model *model;   /* NULL for tokenize/detokenize */
	struct atlas_tok *tok;       /* tokenizer */
	struct atlas_seq *seq;       /* the one sequence, reused */
	struct atlas_gen_params gp;  /* resolved generation parameters */
	struct atlas_tp_group *tp;   /* --tp > 1: the ranks; owns be and model */
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	int c;
	*o = (struct opts){.device = "auto", .tp = 1, .max_tokens = -1, .temperature = NAN,
		.top_p = NAN, .min_p = NAN, .rep = NAN, .pres = NAN, .freq = NAN, .top_k = -1};
	if (argc > 1 && (!strcmp(argv[1], "tokenize") || !strcmp(argv[1], "generate") ||
			 !strcmp(argv[1], "detokenize") || !strcmp(argv[1], "template"))) {
		o->mode = argv[1];
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	o->prompts = calloc((size_t)argc, sizeof(char *));
	o->stop = calloc((size_t)argc, sizeof(char *));
	while ((c = getopt_long(argc, argv, "m:p:f:n:c:t:s:qvhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 'p': o->prompts[o->n_prompts++] = optarg; break;
		case 'f': o->file = optarg; break;
		case 'n': o->max_tokens = cmd_parse_int("--max-tokens", optarg, 1, 1 << 30); break;
		case 'c': o->ctx = cmd_parse_int("--ctx-size", optarg, 1, 1 << 24); break;
		case 't': atlas_threads_set((int)cmd_parse_int("--threads", optarg, 1, 256)); break;
		case 's': o->seed = cmd_parse_u64("--seed", optarg); break;
		case OPT_TEMP: o->temperature = cmd_parse_double("--temperature", optarg, 0, 100); break;
		case OPT_TOPK: o->top_k = cmd_parse_int("--top-k", optarg, 0, INT32_MAX); break;
		case OPT_TOPP: o->top_p = cmd_parse_double("--top-p", optarg, 1e-9, 1); break;
		case OPT_MINP: o->min_p = cmd_parse_double("--min-p", optarg, 0, 1); break;
		case OPT_REP: o->rep = cmd_parse_double("--repeat-penalty", optarg, 1e-6, 100); break;
		case OPT_PRES: o->pres = cmd_parse_double("--presence-penalty", optarg, -2, 2); break;
		case OPT_FREQ: o->freq = cmd_parse_double("--frequency-penalty", optarg, -2, 2); break;
		case OPT_IGNORE_EOS: o->ignore_eos = true; break;
		case OPT_STOP: o->stop[o->n_stop++] = optarg; break;
		case OPT_DEVICE: o->device = optarg; break;
		case OPT_JSONL: o->jsonl = true; break;
		case OPT_ECHO: o->echo = true; break;
		case OPT_NOSPECIAL: o->no_special = true; break;
		case OPT_WHOLE: o->whole = true; break;
		case OPT_CHAT: o->chat = true; break;
		case OPT_CHAT_TEMPLATE: o->chat_template = true; break;
		case OPT_SYSTEM: o->system = optarg; break;
		case OPT_SHOW: o->show = true; break;
		case OPT_TP: o->tp = (int)cmd_parse_int("--tp", optarg, 1, 256); break;
		case 'q': o->quiet = true; break;
		case 'v': atlas_log_set_level(ATLAS_LOG_INFO); break;
		case 'h': fputs(usage_text, stdout); exit(0);
		case 'V': cmd_print_version(); exit(0);
		default: fprintf(stderr, "Try 'atlas-run --help' for more information.\n"); exit(2);
		}
	}
	if (optind < argc)
		cmd_usage_error("unexpected argument '%s'", argv[optind]);
	if (!o->mode && !o->n_prompts && !o->file && !o->chat)
		cmd_usage_error("nothing to do: give -p PROMPT, -f FILE, --chat or a pipe stage");
	if (o->chat && (o->mode || o->n_prompts || o->file))
		cmd_usage_error("--chat reads turns from standard input; -p, -f and pipe stages do not apply");
	if (o->chat && o->jsonl)
		cmd_usage_error("--chat and --jsonl cannot be used together");
	if (o->chat_template && (o->mode || o->chat))
		cmd_usage_error("--chat-template applies to -p and -f prompts");
	if (o->system && !o->chat && !o->chat_template)
		cmd_usage_error("--system needs --chat or --chat-template");
	if (o->show && (!o->mode || strcmp(o->mode, "tokenize")))
		cmd_usage_error("--show applies to 'tokenize'");
	if (o->show && o->jsonl)
		cmd_usage_error("--show and --jsonl cannot be used together");
	if (o->mode && (o->n_prompts || o->file))
		cmd_usage_error("'%s' reads standard input; -p and -f do not apply", o->mode);
	if (o->n_prompts && o->file)
		cmd_usage_error("-p and -f cannot be used together");
}

/* Sampling and stopping: flags first, then generation_config.json, then
 * the defaults of transformers. */
static int resolve_gen(struct ctx *x)
{
	struct opts *o = x->o;
	struct atlas_gen_config gc;
	struct atlas_gen_params *gp = &x->gp;
	if (atlas_gen_config_load(x->dir, &gc))
		return cmd_lib_error();
	const struct atlas_config *c = atlas_model_config(x->model);
	memset(gp, 0, sizeof(*gp));
	atlas_sampler_default_params(&gp->sampling);
	struct atlas_sampler_params *sp = &gp->sampling;
	sp->temperature = !isnan(o->temperature) ? o->temperature
			  : (gc.do_sample ? gc.temperature : 0.0);
	sp->top_k = o->top_k >= 0 ? o->top_k : (gc.do_sample ? gc.top_k : 0);
	sp->top_p = !isnan(o->top_p) ? o->top_p : (gc.do_sample ? gc.top_p : 1.0);
	sp->min_p = !isnan(o->min_p) ? o->min_p : (gc.do_sample ? gc.min_p : 0.0);
	sp->repetition_penalty = !isnan(o->rep) ? o->rep : gc.repetition_penalty;
	sp->presence_penalty = !isnan(o->pres) ? o->pres : 0.0;
	sp->frequency_penalty = !isnan(o->freq) ? o->freq : 0.0;
	sp->seed = o->seed;
	if (atlas_sampler_check(sp))
		return cmd_lib_error();
	gp->max_tokens = o->max_tokens > 0 ? o->max_tokens
			 : (gc.max_new_tokens > 0 ? gc.max_new_tokens : 256);
	gp->ignore_eos = o->ignore_eos;
	gp->stop = o->stop;
	gp->n_stop = o->n_stop;
	/* end-of-sequence ids: config, generation config and tokenizer */
	int32_t cand[2 * ATLAS_MAX_EOS + 1];
	int nc = 0;
	for (int i = 0; i < c->n_eos; i++) cand[nc++] = c->eos_ids[i];
	for (int i = 0; i < gc.n_eos; i++) cand[nc++] = gc.eos_ids[i];
	if (x->tok && atlas_tok_eos(x->tok) >= 0) cand[nc++] = atlas_tok_eos(x->tok);
	for (int i = 0; i < nc; i++) {
		int dup = 0;
		for (int j = 0; j < gp->n_eos; j++)
			dup |= gp->eos_ids[j] == cand[i];
		if (!dup && gp->n_eos < 16)
			gp->eos_ids[gp->n_eos++] = cand[i];
	}
	return 0;
}

/* --- tensor parallelism (--tp) ---------------------------------------- */

/* Load the ranks for --tp > 1 and start the followers (lib/model/
 * tp_group.h: thread ranks on the CPU; CUDA refused with the message).
 * x->be and x->model are rank 0's, owned by the group. 0 or 1. */
static int load_tp(struct ctx *x, const struct atlas_model_params *base)
{
	if (!(x->tp = atlas_tp_group_new(x->o->device, x->o->tp)) ||
	    atlas_tp_group_load(x->tp, x->dir, base))
		return cmd_lib_error();
	x->be = atlas_tp_group_backend(x->tp, 0);
	x->model = atlas_tp_group_model(x->tp, 0);
	return 0;
}

/* Stop and join the followers, free every rank (rank 0's be and model
 * too, after the sequence that uses them). */
static void unload_tp(struct ctx *x)
{
	if (!x->tp)
		return;
	atlas_seq_free(x->seq);
	x->seq = NULL;
	atlas_tp_group_free(x->tp); /* a failure to stop is logged there */
	x->tp = NULL;
	x->model = NULL;
	x->be = NULL;
}

static int load(struct ctx *x, bool need_model, bool need_tok)
{
	if (!(x->dir = cmd_resolve_model(x->o->model)))
		return 1;
	if (need_tok && !(x->tok = atlas_tok_load(x->dir)))
		return cmd_lib_error();
	if (!need_model)
		return 0;
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	mp.max_context = x->o->ctx;
	if (x->o->tp > 1) {
		if (load_tp(x, &mp))
			return 1;
	} else {
		if (!(x->be = atlas_backend_open(x->o->device)))
			return cmd_lib_error();
		if (!(x->model = atlas_model_load(x->dir, x->be, &mp)))
			return cmd_lib_error();
	}
	atlas_info("device: %s (%d threads)", x->be->name, atlas_threads_count());
	if (!(x->seq = atlas_seq_new(x->model)))
		return cmd_lib_error();
	return resolve_gen(x);
}

static void unload(struct ctx *x)
{
	unload_tp(x);
	atlas_seq_free(x->seq);
	atlas_model_free(x->model);
	if (x->be)
		x->be->destroy(x->be);
	atlas_tok_free(x->tok);
	free(x->dir);
}

/* --- generation from prompts ------------------------------------------ */

struct sink {
	bool ids;           /* print ids (generate stage) rather than text */
	bool jsonl;         /* collect, print one object at the end */
	int64_t count;      /* ids printed so far on this line */
	char *text;         /* collected text (jsonl) */
	size_t len, cap;    /* of text */
	int32_t *idv;       /* collected ids (jsonl ids mode) */
	size_t nid, capid;  /* of idv */
};

static int on_token(void *ud, int32_t id, const char *text, size_t len)
{
	struct sink *k = ud;
	if (k->ids) {
		if (id < 0)
			return 0;
		if (k->jsonl) {
			if (k->nid == k->capid) {
				k->capid = k->capid ? 2 * k->capid : 64;
				k->idv = realloc(k->idv, k->capid * sizeof(int32_t));
			}
			k->idv[k->nid++] = id;
		} else {
			printf(k->count++ ? " %d" : "%d", id);
			fflush(stdout);
		}
		return 0;
	}
	if (k->jsonl) {
		if (k->len + len + 1 > k->cap) {
			k->cap = (k->len + len + 1) * 2;
			k->text = realloc(k->text, k->cap);
		}
		memcpy(k->text + k->len, text, len);
		k->len += len;
	} else if (len) {
		fwrite(text, 1, len, stdout);
		fflush(stdout);
	}
	return 0;
}

static void print_stats(const struct ctx *x, const struct atlas_gen_stats *st)
{
	if (x->o->quiet)
		return;
	fprintf(stderr,
		"atlas-run: prompt %lld tokens in %.1f ms (%.1f tok/s); "
		"generated %lld tokens in %.1f ms (%.1f tok/s); first token after %.1f ms; finish %s\n",
		(long long)st->n_prompt, st->prompt_s * 1e3,
		st->prompt_s > 0 ? st->n_prompt / st->prompt_s : 0.0,
		(long long)st->n_gen, st->gen_s * 1e3,
		st->gen_s > 0 ? st->n_decode / st->gen_s : 0.0, st->ttft_s * 1e3,
		atlas_finish_name(st->finish));
}

/* Generate for one prompt of ids; prints per the sink. On failure the
 * message is left in atlas_errmsg() for the caller, who knows the line. */
static int run_ids(struct ctx *x, const int32_t *ids, size_t n, struct sink *k,
		   struct atlas_gen_stats *st)
{
	atlas_seq_reset(x->seq);
	return atlas_generate(x->model, x->seq, x->tok, ids, (int64_t)n, &x->gp, on_token, k, st)
		       ? 1 : 0;
}

/* A chat request: the --system message (if any), then `messages`. */
static json_object *chat_request(const char *system, json_object *messages)
{
	json_object *req = json_object_new_object(), *all = json_object_new_array();
	if (system) {
		json_object *m = json_object_new_object();
		json_object_object_add(m, "role", json_object_new_string("system"));
		json_object_object_add(m, "content", json_object_new_string(system));
		json_object_array_add(all, m);
	}
	for (size_t i = 0; messages && i < json_object_array_length(messages); i++)
		json_object_array_add(all, json_object_get(json_object_array_get_idx(messages, i)));
	json_object_object_add(req, "messages", all);
	json_object_object_add(req, "add_generation_prompt", json_object_new_boolean(1));
	return req;
}

static json_object *message(const char *role, const char *text, size_t len)
{
	json_object *m = json_object_new_object();
	json_object_object_add(m, "role", json_object_new_string(role));
	json_object_object_add(m, "content", json_object_new_string_len(text, (int)len));
	return m;
}

/* The prompt's ids: the text as it is, or (--chat-template) the rendered
 * template around it as one user turn. A rendered template carries its
 * own BOS, so it is encoded without special additions, as transformers'
 * apply_chat_template(tokenize=True) does. */
static int prompt_ids(struct ctx *x, const char *text, size_t len, int32_t **ids, size_t *n)
{
	if (!x->o->chat_template)
		return atlas_tok_encode(x->tok, text, len, !x->o->no_special, ids, n);
	json_object *msgs = json_object_new_array();
	json_object_array_add(msgs, message("user", text, len));
	json_object *req = chat_request(x->o->system, msgs);
	char *out;
	size_t olen;
	int rc = atlas_chat_render(x->tok, req, &out, &olen);
	json_object_put(req);
	json_object_put(msgs);
	if (rc)
		return rc;
	rc = atlas_tok_encode(x->tok, out, olen, false, ids, n);
	free(out);
	return rc;
}

static int run_prompt(struct ctx *x, const char *text, size_t len)
{
	int32_t *ids;
	size_t n;
	struct sink k = {.jsonl = x->o->jsonl};
	struct atlas_gen_stats st;
	if (prompt_ids(x, text, len, &ids, &n))
		return cmd_lib_error();
	int rc = run_ids(x, ids, n, &k, &st);
	free(ids);
	if (rc) {
		free(k.text);
		return cmd_lib_error();
	}
	if (x->o->jsonl) {
		fputs("{\"prompt\": ", stdout);
		atlas_json_write_string(stdout, text, len);
		fputs(", \"text\": ", stdout);
		atlas_json_write_string(stdout, k.text ? k.text : "", k.len);
		printf(", \"prompt_tokens\": %lld, \"completion_tokens\": %lld, \"finish_reason\": \"%s\"}\n",
		       (long long)st.n_prompt, (long long)st.n_gen, atlas_finish_name(st.finish));
	} else {
		putchar('\n');
	}
	fflush(stdout);
	free(k.text);
	print_stats(x, &st);
	return 0;
}

/* Read one line (without its newline) into *buf; -1 at EOF. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap)
{
	ssize_t n = getline(buf, cap, f);
	if (n > 0 && (*buf)[n - 1] == '\n')
		(*buf)[--n] = '\0';
	return n;
}

static int run_file(struct ctx *x)
{
	FILE *f = strcmp(x->o->file, "-") ? fopen(x->o->file, "rb") : stdin;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int rc = 0;
	int64_t lineno = 0;
	if (!f) {
		cmd_error("cannot open '%s': %s", x->o->file, strerror(errno));
		return 1;
	}
	while (!rc && (n = read_line(f, &line, &cap)) >= 0) {
		lineno++;
		if (!x->o->jsonl) {
			rc = run_prompt(x, line, (size_t)n);
			continue;
		}
		char *text;
		size_t len;
		if (n == 0)
			continue;
		if (atlas_jsonl_get_string(line, "prompt", &text, &len)) {
			cmd_error("%s:%lld: %s", x->o->file, (long long)lineno, atlas_errmsg());
			rc = 1;
			break;
		}
		rc = run_prompt(x, text, len);
		free(text);
	}
	free(line);
	if (f != stdin)
		fclose(f);
	return rc;
}

/* --- pipe stages -------------------------------------------------------- */

static void print_ids(const int32_t *ids, size_t n, bool jsonl)
{
	if (jsonl)
		fputs("{\"ids\": [", stdout);
	for (size_t i = 0; i < n; i++)
		printf(i ? (jsonl ? ", %d" : " %d") : "%d", ids[i]);
	puts(jsonl ? "]}" : "");
}

/* --show: one token a line: id, its text as a JSON string, its bytes in
 * hex, and "special" for special tokens; a blank line ends each input. */
static void show_ids(const struct atlas_tok *tok, const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *p = atlas_tok_piece(tok, ids[i], &len);
		printf("%d\t", ids[i]);
		atlas_json_write_string(stdout, p ? p : "", p ? len : 0);
		putchar('\t');
		for (size_t j = 0; p && j < len; j++)
			printf(j ? " %02x" : "%02x", (unsigned char)p[j]);
		puts(atlas_tok_is_special(tok, ids[i]) ? "\tspecial" : "");
	}
	putchar('\n');
}

static int tokenize_one(struct ctx *x, const char *text, size_t len)
{
	int32_t *ids;
	size_t n;
	if (atlas_tok_encode(x->tok, text, len, !x->o->no_special, &ids, &n))
		return cmd_lib_error();
	if (x->o->show)
		show_ids(x->tok, ids, n);
	else
		print_ids(ids, n, x->o->jsonl);
	free(ids);
	return 0;
}

static int stage_tokenize(struct ctx *x)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int rc = 0;
	if (x->o->whole) {
		size_t len = 0;
		char buf[65536];
		while ((n = (ssize_t)fread(buf, 1, sizeof(buf), stdin)) > 0) {
			line = realloc(line, len + (size_t)n + 1);
			memcpy(line + len, buf, (size_t)n);
			len += (size_t)n;
		}
		rc = tokenize_one(x, line ? line : "", len);
		free(line);
		return rc;
	}
	while (!rc && (n = read_line(stdin, &line, &cap)) >= 0) {
		if (!x->o->jsonl) {
			rc = tokenize_one(x, line, (size_t)n);
			continue;
		}
		char *text;
		size_t len;
		if (atlas_jsonl_get_string(line, "text", &text, &len))
			return free(line), cmd_lib_error();
		rc = tokenize_one(x, text, len);
		free(text);
	}
	free(line);
	return rc;
}

/* Read the next line of ids from stdin; 1 at EOF, -1 on error. */
static int next_ids(struct ctx *x, char **line, size_t *cap, int64_t *lineno,
		    int32_t **ids, size_t *n)
{
	if (read_line(stdin, line, cap) < 0)
		return 1;
	(*lineno)++;
	int rc = x->o->jsonl ? atlas_idline_parse_json(*line, "ids", ids, n)
			     : atlas_idline_parse(*line, ids, n);
	if (rc) {
		cmd_error("line %lld: %s", (long long)*lineno, atlas_errmsg());
		return -1;
	}
	return 0;
}

static int stage_generate(struct ctx *x)
{
	char *line = NULL;
	size_t cap = 0, n;
	int32_t *ids;
	int64_t lineno = 0;
	int rc = 0, r;
	while (!rc && (r = next_ids(x, &line, &cap, &lineno, &ids, &n)) == 0) {
		struct sink k = {.ids = true, .jsonl = x->o->jsonl};
		struct atlas_gen_stats st;
		if (x->o->echo && !x->o->jsonl)
			for (size_t i = 0; i < n; i++)
				printf(k.count++ ? " %d" : "%d", ids[i]);
		if (run_ids(x, ids, n, &k, &st)) {
			cmd_error("line %lld: %s", (long long)lineno, atlas_errmsg());
			rc = 1;
		} else if (x->o->jsonl) {
			fputs("{\"ids\": [", stdout);
			size_t i = 0;
			for (size_t j = 0; x->o->echo && j < n; j++)
				printf(i++ ? ", %d" : "%d", ids[j]);
			for (size_t j = 0; j < k.nid; j++)
				printf(i++ ? ", %d" : "%d", k.idv[j]);
			printf("], \"finish_reason\": \"%s\"}\n", atlas_finish_name(st.finish));
		} else {
			putchar('\n');
		}
		fflush(stdout);
		free(k.idv);
		free(ids);
		if (!rc)
			print_stats(x, &st);
	}
	free(line);
	return rc ? rc : (r < 0 ? 1 : 0);
}

static int stage_detokenize(struct ctx *x)
{
	char *line = NULL;
	size_t cap = 0, n;
	int32_t *ids;
	int64_t lineno = 0;
	int rc = 0, r;
	while (!rc && (r = next_ids(x, &line, &cap, &lineno, &ids, &n)) == 0) {
		if (x->o->jsonl) {
			char *text;
			size_t len;
			if (atlas_tok_decode(x->tok, ids, n, &text, &len)) {
				cmd_error("line %lld: %s", (long long)lineno, atlas_errmsg());
				rc = 1;
			} else {
				fputs("{\"text\": ", stdout);
				atlas_json_write_string(stdout, text, len);
				puts("}");
				free(text);
			}
		} else {
			struct atlas_tok_stream ts;
			char buf[256];
			atlas_tok_stream_init(&ts, x->tok);
			for (size_t i = 0; !rc && i < n; i++) {
				int64_t w = atlas_tok_stream_push(&ts, ids[i], buf, sizeof(buf));
				if (w < 0) {
					putchar('\n');
					cmd_error("line %lld: %s", (long long)lineno, atlas_errmsg());
					rc = 1;
				} else {
					fwrite(buf, 1, (size_t)w, stdout);
				}
			}
			if (!rc) {
				int64_t w = atlas_tok_stream_flush(&ts, buf, sizeof(buf));
				if (w > 0)
					fwrite(buf, 1, (size_t)w, stdout);
				putchar('\n');
			}
		}
		fflush(stdout);
		free(ids);
	}
	free(line);
	return rc ? rc : (r < 0 ? 1 : 0);
}

/* --- chat templates ------------------------------------------------------ */

static int need_template(struct ctx *x)
{
	if (atlas_chat_has_template(x->tok))
		return 0;
	cmd_error("model '%s' has no chat template (no \"chat_template\" in tokenizer_config.json)",
		  x->dir);
	return 1;
}

/* template: one request body on stdin, the rendered prompt on stdout. */
static int stage_template(struct ctx *x)
{
	char buf[65536], *all = NULL;
	size_t len = 0, n;
	if (need_template(x))
		return 1;
	while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0) {
		all = realloc(all, len + n + 1);
		memcpy(all + len, buf, n);
		len += n;
		all[len] = '\0';
	}
	enum json_tokener_error jerr = json_tokener_success;
	json_object *req = all ? json_tokener_parse_verbose(all, &jerr) : NULL;
	free(all);
	if (!req || !json_object_is_type(req, json_type_object)) {
		cmd_error("standard input is not a JSON request object%s%s",
			  jerr != json_tokener_success ? ": " : "",
			  jerr != json_tokener_success ? json_tokener_error_desc(jerr) : "");
		json_object_put(req);
		return 1;
	}
	char *out;
	int rc = atlas_chat_render(x->tok, req, &out, &len);
	json_object_put(req);
	if (rc)
		return cmd_lib_error();
	fwrite(out, 1, len, stdout);
	fflush(stdout);
	free(out);
	return 0;
}

/* One chat turn from stdin: readline on a terminal, plain lines otherwise;
 * a line ending in a backslash continues on the next. NULL at the end. */
static char *read_turn(bool tty)
{
	char *turn = NULL, *line = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		ssize_t n;
		if (tty) {
			free(line);
			line = readline(turn ? "... " : "> ");
			n = line ? (ssize_t)strlen(line) : -1;
		} else {
			n = read_line(stdin, &line, &cap);
		}
		if (n < 0)
			break;
		bool more = n > 0 && line[n - 1] == '\\';
		if (more)
			line[--n] = '\0';
		turn = realloc(turn, len + (size_t)n + 2);
		memcpy(turn + len, line, (size_t)n);
		len += (size_t)n;
		turn[len] = '\0';
		if (!more)
			break;
		turn[len++] = '\n';
		turn[len] = '\0';
	}
	free(line);
	if (turn && tty && *turn)
		add_history(turn);
	return turn;
}

/* Collects the reply while it streams to stdout. */
struct reply {
	struct sink k;     /* the streaming printer */
	char *text;        /* the whole reply */
	size_t len, cap;   /* of text */
	int32_t last;      /* the last id generated, -1 for none */
};

/* A conversation and what the sequence holds of it. */
struct chat {
	json_object *msgs; /* the turns so far */
	char *held;        /* the text the sequence holds: last render + reply */
	size_t held_len;   /* bytes in held */
	int32_t pending;   /* a reply's last id, sampled but not yet fed; -1 */
};

static int on_reply(void *ud, int32_t id, const char *text, size_t len)
{
	struct reply *r = ud;
	if (id >= 0)
		r->last = id;
	if (r->len + len + 1 > r->cap) {
		r->cap = (r->len + len + 1) * 2;
		r->text = realloc(r->text, r->cap);
	}
	memcpy(r->text + r->len, text, len);
	r->len += len;
	r->text[r->len] = '\0';
	return on_token(&r->k, id, text, len);
}

/* One turn: render the whole conversation; when what the sequence already
 * holds (the last render plus the reply) is a prefix of it, prefill only
 * the new part, else start the sequence over. */
static int chat_turn(struct ctx *x, struct chat *c)
{
	json_object *req = chat_request(x->o->system, c->msgs);
	char *text;
	size_t len, skip = 0;
	int rc = atlas_chat_render(x->tok, req, &text, &len);
	json_object_put(req);
	if (rc)
		return cmd_lib_error();
	if (c->held && atlas_seq_len(x->seq) > 0 && c->held_len <= len &&
	    !memcmp(text, c->held, c->held_len))
		skip = c->held_len;
	else
		atlas_seq_reset(x->seq);
	int32_t *ids;
	size_t n;
	if (atlas_tok_encode(x->tok, text + skip, len - skip, false, &ids, &n)) {
		free(text);
		return cmd_lib_error();
	}
	if (skip && c->pending >= 0) { /* the last reply token was never fed */
		ids = realloc(ids, (n + 1) * sizeof(*ids));
		memmove(ids + 1, ids, n * sizeof(*ids));
		ids[0] = c->pending;
		n++;
	}
	c->pending = -1;
	int64_t before = atlas_seq_len(x->seq);
	atlas_info("chat turn: %zu new prompt tokens after %lld kept", n,
		   (long long)atlas_seq_len(x->seq));
	struct reply r = {.last = -1};
	struct atlas_gen_stats st;
	rc = n ? atlas_generate(x->model, x->seq, x->tok, ids, (int64_t)n, &x->gp, on_reply, &r, &st)
	       : 0;
	free(ids);
	putchar('\n');
	fflush(stdout);
	free(c->held);
	c->held = NULL;
	if (rc || !n) {
		free(text);
		free(r.text);
		atlas_seq_reset(x->seq);
		return n ? cmd_lib_error() : 0;
	}
	print_stats(x, &st);
	json_object_array_add(c->msgs, message("assistant", r.text ? r.text : "", r.len));
	/* The sequence holds the prompt and the reply's ids but the last one
	 * (fed next turn); after a stop string the text is shorter than the
	 * ids, so the next turn starts over. */
	if (st.finish == ATLAS_FINISH_EOS || st.finish == ATLAS_FINISH_LENGTH) {
		if (atlas_seq_len(x->seq) == before + (int64_t)n + st.n_gen - 1)
			c->pending = r.last;
		c->held = realloc(text, len + r.len + 1);
		memcpy(c->held + len, r.text ? r.text : "", r.len);
		c->held_len = len + r.len;
	} else {
		free(text);
	}
	free(r.text);
	return 0;
}

static int run_chat(struct ctx *x)
{
	bool tty = isatty(STDIN_FILENO);
	struct chat c = {.msgs = json_object_new_array(), .pending = -1};
	char *turn;
	int rc = 0;
	while (!rc && (turn = read_turn(tty)) != NULL) {
		if (!*turn) {
			free(turn);
			continue;
		}
		json_object_array_add(c.msgs, message("user", turn, strlen(turn)));
		free(turn);
		if (chat_turn(x, &c)) {
			/* forget the failed turn and keep talking on a terminal */
			json_object_array_del_idx(c.msgs, json_object_array_length(c.msgs) - 1, 1);
			rc = tty ? 0 : 1;
		}
	}
	if (tty && !rc)
		putchar('\n');
	free(c.held);
	json_object_put(c.msgs);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct ctx x = {.o = &o};
	int rc;
	cmd_name = "atlas-run";
	parse_args(argc, argv, &o);
	bool tokenize = o.mode && !strcmp(o.mode, "tokenize");
	bool detok = o.mode && !strcmp(o.mode, "detokenize");
	bool gen_stage = o.mode && !strcmp(o.mode, "generate");
	bool tmpl = o.mode && !strcmp(o.mode, "template");
	/* generate needs the tokenizer only to find stop strings */
	rc = load(&x, !tokenize && !detok && !tmpl, !gen_stage || o.n_stop > 0);
	if (!rc && (o.chat_template || o.chat))
		rc = need_template(&x);
	if (!rc) {
		if (tmpl)
			rc = stage_template(&x);
		else if (o.chat)
			rc = run_chat(&x);
		else if (tokenize)
			rc = stage_tokenize(&x);
		else if (detok)
			rc = stage_detokenize(&x);
		else if (gen_stage)
			rc = stage_generate(&x);
		else if (o.file)
			rc = run_file(&x);
		else
			for (int i = 0; !rc && i < o.n_prompts; i++)
				rc = run_prompt(&x, o.prompts[i], strlen(o.prompts[i]));
	}
	unload(&x);
	free(o.prompts);
	free(o.stop);
	return rc;
}
