/* atlas-run - batch and pipeline generation.
 *
 *   atlas-run [-m MODEL] -p PROMPT [-p PROMPT...]   generate from prompts
 *   atlas-run [-m MODEL] -f FILE [--jsonl]          one prompt per line
 *   atlas-run [-m MODEL] --chat [--system TEXT]      interactive chat
 *   atlas-run tokenize | generate | detokenize      the pipe stages
 *   atlas-run template [-m MODEL] < request.json    render the chat template
 *
 * Flags, usage and calls into libatlas only: the model opens through
 * the engine session (lib/engine/session.h), prompts run through the
 * scheduler, many at once in input order (lib/engine/batch.h), and the
 * formats live in lib/engine/pipe.c. */
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
#include "../lib/core/clock.h"
#include "../lib/core/error.h"
#include "../lib/core/log.h"
#include "../lib/core/threads.h"
#include "../lib/core/utf8.h"
#include "../lib/engine/batch.h"
#include "../lib/engine/generate.h"
#include "../lib/engine/grammar.h"
#include "../lib/engine/pipe.h"
#include "../lib/engine/session.h"
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
	"      --parallel N          -f, --jsonl, generate: prompts in flight at once\n"
	"                            (default 64; each prompt's output is what it\n"
	"                            gives alone, written in input order)\n"
	"      --no-prefix-cache     recompute every prompt instead of reusing the KV\n"
	"                            blocks of an earlier prompt's equal prefix\n"
	"      --kv-dtype FMT        the KV cache's format: auto (the activation type:\n"
	"                            f32 on the CPU, bf16 on CUDA), bf16, fp8 (E4M3,\n"
	"                            a scale per token and head) or q4 (4-bit, a\n"
	"                            scale per 32 values); default auto\n"
	"      --speculative MODE    speculative decoding: none (default), ngram\n"
	"                            (drafts looked up in the prompt and output so\n"
	"                            far), draft (drafts from --draft-model) or mtp\n"
	"                            (from the checkpoint's MTP head, mtp.*),\n"
	"                            verified in one step; the output is what it is\n"
	"                            without, greedy or seeded\n"
	"      --draft-model M       the draft model (same tokenizer; a directory or\n"
	"                            a cached repo id); implies --speculative draft\n"
	"      --num-draft K         drafts a step with --speculative, 1..16 (default 4)\n"
	"      --batch-invariant     kernels whose rows never depend on the step's\n"
	"                            other rows (atlas-serve's default): on CUDA,\n"
	"                            --speculative and --parallel then give greedy\n"
	"                            output bit for bit, at some speed\n"
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
	"Structured output (the output must match; one of):\n"
	"      --json-schema FILE    JSON that satisfies the JSON schema in FILE\n"
	"      --json                any JSON object\n"
	"      --grammar FILE        text of the grammar in FILE (GBNF-like; the\n"
	"                            start rule is root)\n"
	"      --regex RE            text that matches the regular expression RE\n"
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
	OPT_WHOLE, OPT_CHAT, OPT_CHAT_TEMPLATE, OPT_SYSTEM, OPT_SHOW, OPT_TP, OPT_PARALLEL,
	OPT_JSON_SCHEMA, OPT_JSON, OPT_GRAMMAR, OPT_REGEX,
	OPT_NO_PREFIX, OPT_KV_DTYPE, OPT_SPEC, OPT_NUM_DRAFT, OPT_BATCH_INV,
	OPT_DRAFT_MODEL };

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
	{"parallel", required_argument, NULL, OPT_PARALLEL},
	{"json-schema", required_argument, NULL, OPT_JSON_SCHEMA},
	{"json", no_argument, NULL, OPT_JSON},
	{"grammar", required_argument, NULL, OPT_GRAMMAR},
	{"regex", required_argument, NULL, OPT_REGEX},
	{"no-prefix-cache", no_argument, NULL, OPT_NO_PREFIX},
	{"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
	{"speculative", required_argument, NULL, OPT_SPEC},
	{"num-draft", required_argument, NULL, OPT_NUM_DRAFT},
	{"draft-model", required_argument, NULL, OPT_DRAFT_MODEL},
	{"batch-invariant", no_argument, NULL, OPT_BATCH_INV},
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
	int64_t parallel;        /* --parallel: prompts in flight, 0 unset */
	bool no_prefix_cache;    /* --no-prefix-cache */
	enum atlas_kv_dtype kv_dtype; /* --kv-dtype: the KV cache's format (auto) */
	enum atlas_spec_mode spec; /* --speculative (none) */
	int num_draft;           /* --num-draft, 0 unset */
	const char *draft_model; /* --draft-model, or NULL */
	bool spec_set;           /* --speculative was given */
	bool batch_invariant;    /* --batch-invariant */
	const char *json_schema; /* --json-schema FILE */
	bool json;               /* --json */
	const char *grammar;     /* --grammar FILE */
	const char *regex;       /* --regex RE */
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
	char *draft_dir;             /* resolved --draft-model, or NULL */
	struct atlas_session *ses;   /* tokenizer, model, scheduler */
	struct atlas_tok *tok;       /* the session's tokenizer (NULL when not needed) */
	struct atlas_sched *sched;   /* the session's scheduler (NULL without a model) */
	struct atlas_gen_params gp;  /* resolved generation parameters */
	int64_t parallel;            /* prompts in flight */
	struct atlas_grammar_vocab *gvocab; /* for --json-schema, --grammar... */
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
		case OPT_PARALLEL: o->parallel = cmd_parse_int("--parallel", optarg, 1, 4096); break;
		case OPT_NO_PREFIX: o->no_prefix_cache = true; break;
		case OPT_KV_DTYPE: o->kv_dtype = cmd_parse_kv_dtype("--kv-dtype", optarg); break;
		case OPT_SPEC:
			o->spec = cmd_parse_spec("--speculative", optarg);
			o->spec_set = true;
			break;
		case OPT_DRAFT_MODEL: o->draft_model = optarg; break;
		case OPT_BATCH_INV: o->batch_invariant = true; break;
		case OPT_NUM_DRAFT:
			o->num_draft = (int)cmd_parse_int("--num-draft", optarg, 1, ATLAS_SPEC_MAX_DRAFT);
			break;
		case OPT_JSON_SCHEMA: o->json_schema = optarg; break;
		case OPT_JSON: o->json = true; break;
		case OPT_GRAMMAR: o->grammar = optarg; break;
		case OPT_REGEX: o->regex = optarg; break;
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
	if (o->draft_model && !o->spec_set)
		o->spec = ATLAS_SPEC_DRAFT;
	if (o->draft_model && o->spec != ATLAS_SPEC_DRAFT)
		cmd_usage_error("--draft-model is for --speculative draft, not %s",
				atlas_spec_name(o->spec));
	if (o->spec == ATLAS_SPEC_DRAFT && !o->draft_model)
		cmd_usage_error("--speculative draft needs --draft-model M");
	if (o->num_draft && o->spec == ATLAS_SPEC_NONE)
		cmd_usage_error("--num-draft needs --speculative ngram, draft or mtp");
	if ((o->json_schema != NULL) + o->json + (o->grammar != NULL) + (o->regex != NULL) > 1)
		cmd_usage_error("--json-schema, --json, --grammar and --regex cannot be combined");
	if ((o->json_schema || o->json || o->grammar || o->regex) && o->mode &&
	    strcmp(o->mode, "generate"))
		cmd_usage_error("structured output applies to generation, not '%s'", o->mode);
}

/* The whole of a file as a NUL-terminated string, or NULL with a message. */
static char *slurp(const char *path, const char *what)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		atlas_error(ATLAS_EIO, "%s: cannot open '%s': %s", what, path, strerror(errno));
		return NULL;
	}
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);
	while (b) {
		n += fread(b + n, 1, cap - n - 1, f);
		if (n < cap - 1)
			break;
		char *nb = cap < ((size_t)64 << 20) ? realloc(b, cap * 2) : NULL;
		if (!nb) {
			free(b);
			b = NULL;
			atlas_error(ATLAS_ERANGE, "%s: '%s' is too large", what, path);
			break;
		}
		b = nb;
		cap *= 2;
	}
	if (b && ferror(f)) {
		free(b);
		b = NULL;
		atlas_error(ATLAS_EIO, "%s: cannot read '%s'", what, path);
	}
	fclose(f);
	if (b)
		b[n] = '\0';
	return b;
}

/* --json-schema, --json, --grammar or --regex as the compiled grammar of
 * every prompt (gp->grammar, whose reference the ctx keeps). */
static int resolve_grammar(struct ctx *x)
{
	struct opts *o = x->o;
	char *text = NULL;
	const char *what = o->json_schema ? "--json-schema" : o->json ? "--json"
			   : o->grammar	  ? "--grammar"
					  : "--regex";
	if (!o->json_schema && !o->json && !o->grammar && !o->regex)
		return 0;
	if (o->json_schema) {
		char *src = slurp(o->json_schema, what);
		if (!src)
			return cmd_lib_error();
		json_tokener *t = json_tokener_new();
		json_object *schema = json_tokener_parse_ex(t, src, (int)strlen(src));
		bool ok = json_tokener_get_error(t) == json_tokener_success;
		json_tokener_free(t);
		free(src);
		if (!ok) {
			json_object_put(schema);
			atlas_error(ATLAS_EFORMAT, "--json-schema: '%s' is not JSON", o->json_schema);
			return cmd_lib_error();
		}
		text = atlas_json_schema_grammar(schema, "", NULL);
		json_object_put(schema);
	} else if (o->json) {
		text = atlas_json_object_grammar("");
	} else if (o->grammar) {
		text = slurp(o->grammar, what);
	} else {
		text = atlas_regex_grammar(o->regex, "");
	}
	if (!text) {
		atlas_error_wrap(ATLAS_EINVAL, "%s", what);
		return cmd_lib_error();
	}
	if (!x->tok) {
		free(text);
		atlas_error(ATLAS_EINVAL, "%s needs the model's tokenizer", what);
		return cmd_lib_error();
	}
	x->gvocab = atlas_grammar_vocab_new(x->tok, atlas_model_config(atlas_session_model(x->ses))->vocab_size,
					    x->gp.eos_ids, x->gp.n_eos);
	x->gp.grammar = x->gvocab ? atlas_grammar_compile(text, strlen(text), x->gvocab) : NULL;
	free(text);
	if (!x->gp.grammar) {
		atlas_error_wrap(ATLAS_EINVAL, "%s", what);
		return cmd_lib_error();
	}
	return 0;
}

/* Sampling and stopping: flags first, then the session's defaults
 * (generation_config.json, then transformers'). */
static int resolve_gen(struct ctx *x)
{
	struct opts *o = x->o;
	struct atlas_gen_params *gp = &x->gp;
	struct atlas_sampler_params *sp = &gp->sampling;
	atlas_session_gen_defaults(x->ses, gp);
	if (!isnan(o->temperature)) sp->temperature = o->temperature;
	if (o->top_k >= 0) sp->top_k = o->top_k;
	if (!isnan(o->top_p)) sp->top_p = o->top_p;
	if (!isnan(o->min_p)) sp->min_p = o->min_p;
	if (!isnan(o->rep)) sp->repetition_penalty = o->rep;
	if (!isnan(o->pres)) sp->presence_penalty = o->pres;
	if (!isnan(o->freq)) sp->frequency_penalty = o->freq;
	sp->seed = o->seed;
	if (atlas_sampler_check(sp))
		return cmd_lib_error();
	if (o->max_tokens > 0)
		gp->max_tokens = o->max_tokens;
	gp->ignore_eos = o->ignore_eos;
	gp->stop = o->stop;
	gp->n_stop = o->n_stop;
	return resolve_grammar(x);
}

/* Open the session: the tokenizer when needed, and for generation the
 * device, model and scheduler. Many prompts (-f, generate) get a step
 * of `parallel` sequences and a KV pool for them, one prompt the
 * smallest step. */
static int load(struct ctx *x, bool need_model, bool need_tok, bool many)
{
	struct opts *o = x->o;
	if (!(x->dir = cmd_resolve_model(o->model)))
		return 1;
	if (o->draft_model && need_model && !(x->draft_dir = cmd_resolve_model(o->draft_model)))
		return 1;
	struct atlas_session_params sp;
	atlas_session_default_params(&sp);
	sp.model_dir = x->dir;
	sp.device = o->device;
	sp.tp = o->tp;
	sp.no_model = !need_model;
	sp.no_tok = !need_tok;
	sp.prefix_cache = !o->no_prefix_cache;
	sp.model.max_context = o->ctx;
	sp.model.kv_dtype = o->kv_dtype;
	sp.spec = (struct atlas_spec_params){.mode = need_model ? o->spec : ATLAS_SPEC_NONE,
					     .num_draft = o->num_draft};
	sp.draft_model_dir = x->draft_dir;
	sp.batch_invariant = o->batch_invariant;
	x->parallel = !many ? 1 : o->parallel > 0 ? o->parallel : 64;
	if (many) {
		/* a pool for `parallel` sequences of up to 1,024 tokens (at
		 * least one whole context); longer ones preempt and recompute */
		int64_t B = 16, per = o->ctx > 0 && o->ctx < 1024 ? o->ctx : 1024;
		sp.model.max_seqs = x->parallel;
		sp.model.max_tokens = x->parallel > 512 ? x->parallel : 512;
		sp.model.kv_blocks = x->parallel * ((per + B - 1) / B);
		int64_t whole = ((o->ctx > 0 ? o->ctx : 4096) + B - 1) / B;
		if (sp.model.kv_blocks < whole)
			sp.model.kv_blocks = whole;
	}
	if (!(x->ses = atlas_session_open(&sp)))
		return cmd_lib_error();
	x->tok = atlas_session_tok(x->ses);
	x->sched = atlas_session_sched(x->ses);
	if (!need_model)
		return 0;
	atlas_info("device: %s (%d threads)", atlas_session_backend(x->ses)->name,
		   atlas_threads_count());
	return resolve_gen(x);
}

static void unload(struct ctx *x)
{
	if (x->gp.grammar)
		atlas_grammar_free(x->gp.grammar);
	atlas_grammar_vocab_free(x->gvocab);
	atlas_session_close(x->ses);
	free(x->dir);
	free(x->draft_dir);
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
	/* the rate after the first token: one token a step, or with drafts
	 * the tokens themselves */
	int64_t after = x->o->spec != ATLAS_SPEC_NONE ? (st->n_gen > 1 ? st->n_gen - 1 : 0)
						       : st->n_decode;
	char spec[160] = "";
	if (x->o->spec != ATLAS_SPEC_NONE)
		snprintf(spec, sizeof(spec),
			 "; speculative (%s): %lld of %lld drafts accepted (%.0f%%), %.2f tokens a step",
			 atlas_spec_name(x->o->spec), (long long)st->spec_accepted,
			 (long long)st->spec_drafted,
			 st->spec_drafted ? 100.0 * st->spec_accepted / st->spec_drafted : 0.0,
			 st->n_decode ? (double)after / st->n_decode : 0.0);
	fprintf(stderr,
		"atlas-run: prompt %lld tokens in %.1f ms (%.1f tok/s); "
		"generated %lld tokens in %.1f ms (%.1f tok/s); first token after %.1f ms; finish %s%s\n",
		(long long)st->n_prompt, st->prompt_s * 1e3,
		st->prompt_s > 0 ? st->n_prompt / st->prompt_s : 0.0,
		(long long)st->n_gen, st->gen_s * 1e3,
		st->gen_s > 0 ? after / st->gen_s : 0.0, st->ttft_s * 1e3,
		atlas_finish_name(st->finish), spec);
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

/* Read one line (without its newline) into *buf; -1 at EOF. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap)
{
	ssize_t n = getline(buf, cap, f);
	if (n > 0 && (*buf)[n - 1] == '\n')
		(*buf)[--n] = '\0';
	return n;
}

/* --- many prompts: -p, -f, --jsonl, generate ------------------------------ */

enum feed_kind { FEED_ARGS, FEED_TEXT, FEED_IDS };

/* What a prompt keeps until its output is written. */
struct tag {
	char *prompt;       /* its text (--jsonl output), or NULL */
	size_t len;         /* bytes of prompt */
	int32_t *ids;       /* its ids (generate --echo), or NULL */
	size_t n;           /* entries in ids */
	char where[64];     /* "FILE:LINE" or "line N" for messages, or "" */
};

/* The input and output of a batch run. */
struct feed {
	struct ctx *x;
	enum feed_kind kind;
	int arg;            /* next -p value */
	FILE *f;            /* -f input, or stdin for generate */
	const char *name;   /* its name for messages */
	char *line;         /* line buffer */
	size_t cap;         /* of line */
	int64_t lineno;     /* lines read */
	int64_t cur;        /* input whose output is open, -1 for none */
	struct sink k;      /* the open output */
	bool tty;           /* show a progress line on stderr */
	bool shown;         /* the progress line is on the screen */
	double last;        /* when it was drawn */
	double t0;          /* the first step's time, for tok/s */
};

/* Mark input `in` bad with a message. 1 (an input was produced). */
static int bad_input(struct atlas_batch_input *in, struct tag *t, const char *msg)
{
	in->bad = true;
	snprintf(in->error, sizeof(in->error), "%s%s%s", t->where, *t->where ? ": " : "", msg);
	return 1;
}

/* The first byte of a line that is not UTF-8, or -1. */
static ssize_t bad_utf8(const char *s, size_t len)
{
	uint32_t cp;
	for (size_t i = 0; i < len;) {
		int k = atlas_utf8_decode((const unsigned char *)s + i, len - i, &cp);
		if (!k)
			return (ssize_t)i;
		i += (size_t)k;
	}
	return -1;
}

static int feed_next(void *ud, struct atlas_batch_input *in)
{
	struct feed *fd = ud;
	struct ctx *x = fd->x;
	struct tag *t = calloc(1, sizeof(*t));
	const char *text;
	size_t len, n;
	char msg[200];
	if (!t)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	in->tag = t;
	if (fd->kind == FEED_ARGS) {
		if (fd->arg == x->o->n_prompts) {
			free(t);
			in->tag = NULL;
			return 0;
		}
		text = x->o->prompts[fd->arg++];
		len = strlen(text);
	} else {
		ssize_t got = read_line(fd->f, &fd->line, &fd->cap);
		if (got < 0) {
			free(t);
			in->tag = NULL;
			return 0;
		}
		fd->lineno++;
		if (fd->kind == FEED_IDS)
			snprintf(t->where, sizeof(t->where), "line %lld", (long long)fd->lineno);
		else
			snprintf(t->where, sizeof(t->where), "%s:%lld", fd->name, (long long)fd->lineno);
		text = fd->line;
		len = (size_t)got;
		if (!len)
			return bad_input(in, t, "empty line (no prompt)");
		if (fd->kind == FEED_IDS) {
			int rc = x->o->jsonl
					 ? atlas_idline_parse_json_n(fd->line, len, "ids", &t->ids, &t->n)
					 : atlas_idline_parse_n(fd->line, len, &t->ids, &t->n);
			if (rc)
				return bad_input(in, t, atlas_errmsg());
			if (!t->n)
				return bad_input(in, t, "no prompt ids");
			in->ids = malloc(t->n * sizeof(int32_t));
			if (!in->ids)
				return atlas_error(ATLAS_ENOMEM, "out of memory");
			memcpy(in->ids, t->ids, t->n * sizeof(int32_t));
			in->n = (int64_t)t->n;
			if (!x->o->echo) {
				free(t->ids);
				t->ids = NULL;
			}
			return 1;
		}
		if (x->o->jsonl) {
			char *p;
			if (atlas_jsonl_get_string_n(fd->line, len, "prompt", &p, &len))
				return bad_input(in, t, atlas_errmsg());
			t->prompt = p;
			t->len = len;
			text = p;
		}
		ssize_t at = bad_utf8(text, len);
		if (at >= 0) {
			snprintf(msg, sizeof(msg), "the prompt is not valid UTF-8 (byte %zd)", at + 1);
			return bad_input(in, t, msg);
		}
	}
	if (x->o->jsonl && !t->prompt) {
		if (!(t->prompt = malloc(len + 1)))
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		memcpy(t->prompt, text, len);
		t->len = len;
	}
	if (prompt_ids(x, text, len, &in->ids, &n))
		return bad_input(in, t, atlas_errmsg());
	in->n = (int64_t)n;
	return 1;
}

/* Wipe the progress line before other output on stderr. */
static void progress_clear(struct feed *fd)
{
	if (fd->shown)
		fputs("\r\033[K", stderr);
	fd->shown = false;
}

static void feed_progress(void *ud, int64_t done, int64_t read, bool eof, int64_t tokens)
{
	struct feed *fd = ud;
	double now = atlas_now();
	if (!fd->t0)
		fd->t0 = now;
	if (!fd->tty || now - fd->last < 0.2)
		return;
	double t0 = fd->t0;
	fd->last = now;
	fprintf(stderr, "\r\033[Katlas-run: %lld/%lld%s prompts done, %lld tokens, %.1f tok/s",
		(long long)done, (long long)read, eof ? "" : "+", (long long)tokens,
		now > t0 ? tokens / (now - t0) : 0.0);
	fd->shown = true;
}

/* Open input `index`'s output (generate --echo prints its ids first). */
static void feed_open(struct feed *fd, int64_t index, struct tag *t)
{
	if (fd->cur == index)
		return;
	fd->cur = index;
	fd->k = (struct sink){.ids = fd->kind == FEED_IDS, .jsonl = fd->x->o->jsonl};
	if (t && t->ids && !fd->x->o->jsonl)
		for (size_t i = 0; i < t->n; i++)
			printf(fd->k.count++ ? " %d" : "%d", t->ids[i]);
}

static void feed_token(void *ud, int64_t index, void *tag, int32_t id, const char *text,
		       size_t len)
{
	struct feed *fd = ud;
	feed_open(fd, index, tag);
	on_token(&fd->k, id, text, len);
}

static void print_ids_json(const struct tag *t, const struct sink *k)
{
	size_t i = 0;
	for (size_t j = 0; t && j < t->n && t->ids; j++)
		printf(i++ ? ", %d" : "%d", t->ids[j]);
	for (size_t j = 0; j < k->nid; j++)
		printf(i++ ? ", %d" : "%d", k->idv[j]);
}

static void feed_done(void *ud, const struct atlas_batch_end *e)
{
	struct feed *fd = ud;
	struct ctx *x = fd->x;
	struct tag *t = e->tag;
	bool jsonl = x->o->jsonl;
	if (fd->cur != e->index)
		feed_open(fd, e->index, t);
	progress_clear(fd);
	if (e->rc) {
		fflush(stdout);
		/* a bad input's message carries its place; a failed run gets it */
		if (t && *t->where && strncmp(e->error, t->where, strlen(t->where)))
			cmd_error("%s: %s", t->where, e->error);
		else
			cmd_error("%s", e->error);
		if (jsonl) {
			fputs(fd->kind == FEED_IDS ? "{\"ids\": [], \"error\": " : "{\"error\": ", stdout);
			atlas_json_write_string(stdout, e->error, strlen(e->error));
			puts("}");
		}
	} else if (fd->kind == FEED_IDS && jsonl) {
		fputs("{\"ids\": [", stdout);
		print_ids_json(t, &fd->k);
		printf("], \"finish_reason\": \"%s\"}\n", atlas_finish_name(e->st.finish));
	} else if (jsonl) {
		fputs("{\"prompt\": ", stdout);
		atlas_json_write_string(stdout, t && t->prompt ? t->prompt : "", t ? t->len : 0);
		fputs(", \"text\": ", stdout);
		atlas_json_write_string(stdout, fd->k.text ? fd->k.text : "", fd->k.len);
		printf(", \"prompt_tokens\": %lld, \"cached_tokens\": %lld, \"completion_tokens\": %lld, "
		       "\"finish_reason\": \"%s\"}\n",
		       (long long)e->st.n_prompt, (long long)e->st.n_cached, (long long)e->st.n_gen,
		       atlas_finish_name(e->st.finish));
	} else {
		putchar('\n');
	}
	fflush(stdout);
	if (!e->rc)
		print_stats(x, &e->st);
	free(fd->k.text);
	free(fd->k.idv);
	fd->k = (struct sink){0};
	fd->cur = -1;
	if (t) {
		free(t->prompt);
		free(t->ids);
		free(t);
	}
}

/* Run every prompt of the feed through the scheduler, `parallel` at a
 * time, output in input order. 0, or 1 when any failed. */
static int run_feed(struct feed *fd)
{
	struct ctx *x = fd->x;
	struct atlas_batch_io io = {.next = feed_next, .token = feed_token, .done = feed_done,
				    .progress = feed_progress, .ud = fd};
	struct atlas_batch_totals tot;
	fd->cur = -1;
	fd->tty = !x->o->quiet && isatty(STDERR_FILENO);
	int rc = atlas_batch_generate(x->sched, &x->gp, x->parallel, &io, &tot);
	progress_clear(fd);
	free(fd->line);
	if (rc && rc != ATLAS_EINVAL)
		cmd_lib_error(); /* the input stopped (a read error) */
	if (!x->o->quiet && tot.inputs > 1)
		fprintf(stderr,
			"atlas-run: %lld prompts (%lld failed) in %.2f s: %lld prompt tokens "
			"(%lld cached), %lld generated, %.1f tok/s\n",
			(long long)tot.inputs, (long long)tot.failed, tot.wall_s,
			(long long)tot.prompt_tokens, (long long)tot.cached_tokens,
			(long long)tot.gen_tokens, tot.wall_s > 0 ? tot.gen_tokens / tot.wall_s : 0.0);
	return rc ? 1 : 0;
}

static int run_prompts(struct ctx *x)
{
	struct feed fd = {.x = x, .kind = FEED_ARGS};
	if (x->o->file) {
		fd.kind = FEED_TEXT;
		fd.name = x->o->file;
		fd.f = strcmp(x->o->file, "-") ? fopen(x->o->file, "rb") : stdin;
		if (!fd.f) {
			cmd_error("cannot open '%s': %s", x->o->file, strerror(errno));
			return 1;
		}
	}
	int rc = run_feed(&fd);
	if (fd.f && fd.f != stdin)
		fclose(fd.f);
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
		if (atlas_jsonl_get_string_n(line, (size_t)n, "text", &text, &len))
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
	ssize_t got = read_line(stdin, line, cap);
	if (got < 0)
		return 1;
	(*lineno)++;
	int rc = x->o->jsonl ? atlas_idline_parse_json_n(*line, (size_t)got, "ids", ids, n)
			     : atlas_idline_parse_n(*line, (size_t)got, ids, n);
	if (rc) {
		cmd_error("line %lld: %s", (long long)*lineno, atlas_errmsg());
		return -1;
	}
	return 0;
}

static int stage_generate(struct ctx *x)
{
	struct feed fd = {.x = x, .kind = FEED_IDS, .f = stdin, .name = "-"};
	return run_feed(&fd);
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

/* A conversation. */
struct chat {
	json_object *msgs; /* the turns so far */
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

/* One turn: render the whole conversation and generate from it. The
 * prefix cache finds the KV blocks of the conversation so far, so only
 * the new part is computed (what the sequence held in earlier versions,
 * now with the same code path as the server's). */
static int chat_turn(struct ctx *x, struct chat *c)
{
	json_object *req = chat_request(x->o->system, c->msgs);
	char *text;
	size_t len;
	int rc = atlas_chat_render(x->tok, req, &text, &len);
	json_object_put(req);
	if (rc)
		return cmd_lib_error();
	int32_t *ids;
	size_t n;
	rc = atlas_tok_encode(x->tok, text, len, false, &ids, &n);
	free(text);
	if (rc)
		return cmd_lib_error();
	struct reply r = {.last = -1};
	struct atlas_gen_stats st;
	rc = n ? atlas_generate(x->sched, ids, (int64_t)n, &x->gp, on_reply, &r, &st) : 0;
	free(ids);
	putchar('\n');
	fflush(stdout);
	if (rc || !n) {
		free(r.text);
		return n ? cmd_lib_error() : 0;
	}
	atlas_info("chat turn: %zu prompt tokens, %lld of them from the prefix cache", n,
		   (long long)st.n_cached);
	print_stats(x, &st);
	json_object_array_add(c->msgs, message("assistant", r.text ? r.text : "", r.len));
	free(r.text);
	return 0;
}

static int run_chat(struct ctx *x)
{
	bool tty = isatty(STDIN_FILENO);
	struct chat c = {.msgs = json_object_new_array()};
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
	/* generate needs the tokenizer only to find stop strings and for
	 * structured output */
	bool many = gen_stage || o.file || o.n_prompts > 1;
	bool structured = o.json_schema || o.json || o.grammar || o.regex;
	rc = load(&x, !tokenize && !detok && !tmpl, !gen_stage || o.n_stop > 0 || structured, many);
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
		else
			rc = run_prompts(&x);
	}
	unload(&x);
	free(o.prompts);
	free(o.stop);
	return rc;
}
