/* atlas-fetch - download a model from the Hugging Face Hub into the HF
 * cache (or a plain directory), resuming, verifying and retrying.
 *
 *   atlas-fetch [options] ORG/NAME[@REVISION]
 *
 * Flags, token lookup, progress display and calls into lib/io/hub_fetch.c;
 * prints the directory holding the files on stdout. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/core/error.h"
#include "../lib/io/file.h"
#include "../lib/io/hfcache.h"
#include "../lib/io/hub.h"
#include "../lib/io/hub_fetch.h"
#include "common.h"
#include "../lib/core/clock.h"

static const char usage_text[] =
	"usage: atlas-fetch [options] ORG/NAME[@REVISION]\n"
	"\n"
	"Download a model repository from the Hugging Face Hub into the Hugging Face\n"
	"cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub), where\n"
	"atlas-run -m ORG/NAME and transformers find it. Prints the directory that\n"
	"holds the files on stdout; progress goes to stderr.\n"
	"\n"
	"  -r, --revision REV        branch, tag or commit (default main, or @REV)\n"
	"  -I, --include GLOB        fetch only files matching GLOB; repeat for several\n"
	"                            (default: *.json *.safetensors tokenizer.model\n"
	"                            *.tiktoken *.txt *.jinja, never the .bin/.pth\n"
	"                            duplicates)\n"
	"  -X, --exclude GLOB        leave out files matching GLOB; repeat for several\n"
	"      --local-dir DIR       plain copy into DIR instead of the cache\n"
	"  -j, --jobs N              parallel transfers (default 4)\n"
	"      --token-file FILE     read the access token from FILE (default: $HF_TOKEN,\n"
	"                            else $HF_TOKEN_PATH or $HF_HOME/token)\n"
	"      --retries N           retries of a failing transfer (default 5)\n"
	"  -n, --dry-run             list what would be fetched and how many bytes\n"
	"  -q, --quiet               no progress display\n"
	"  -h, --help                show this help\n"
	"  -V, --version             show the version\n"
	"\n"
	"Environment: HF_TOKEN, HF_ENDPOINT (a mirror), HF_HUB_OFFLINE=1 (resolve from\n"
	"the cache only), HF_HOME, HF_HUB_CACHE.\n";

enum { OPT_LOCAL_DIR = 256, OPT_TOKEN_FILE, OPT_RETRIES };

static const struct option longopts[] = {
	{"revision", required_argument, NULL, 'r'},
	{"include", required_argument, NULL, 'I'},
	{"exclude", required_argument, NULL, 'X'},
	{"local-dir", required_argument, NULL, OPT_LOCAL_DIR},
	{"jobs", required_argument, NULL, 'j'},
	{"token-file", required_argument, NULL, OPT_TOKEN_FILE},
	{"retries", required_argument, NULL, OPT_RETRIES},
	{"dry-run", no_argument, NULL, 'n'},
	{"quiet", no_argument, NULL, 'q'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

struct opts {
	char *repo;              /* "org/name" */
	const char *rev;         /* revision */
	const char **include;    /* -I values */
	int n_include;           /* count */
	const char **exclude;    /* -X values */
	int n_exclude;           /* count */
	const char *local_dir;   /* --local-dir */
	const char *token_file;  /* --token-file */
	int jobs;                /* -j */
	int retries;             /* --retries, -1 default */
	bool dry_run, quiet;     /* -n, -q */
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	int c;
	const char *rev_flag = NULL;

	*o = (struct opts){.jobs = 4, .retries = -1};
	o->include = calloc((size_t)argc, sizeof(char *));
	o->exclude = calloc((size_t)argc, sizeof(char *));
	while ((c = getopt_long(argc, argv, "r:I:X:j:nqhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': rev_flag = optarg; break;
		case 'I': o->include[o->n_include++] = optarg; break;
		case 'X': o->exclude[o->n_exclude++] = optarg; break;
		case 'j': o->jobs = (int)cmd_parse_int("--jobs", optarg, 1, 64); break;
		case OPT_LOCAL_DIR: o->local_dir = optarg; break;
		case OPT_TOKEN_FILE: o->token_file = optarg; break;
		case OPT_RETRIES: o->retries = (int)cmd_parse_int("--retries", optarg, 0, 100); break;
		case 'n': o->dry_run = true; break;
		case 'q': o->quiet = true; break;
		case 'h': fputs(usage_text, stdout); exit(0);
		case 'V': cmd_print_version(); exit(0);
		default: fprintf(stderr, "Try 'atlas-fetch --help' for more information.\n"); exit(2);
		}
	}
	if (optind >= argc)
		cmd_usage_error("no repository given (expected ORG/NAME[@REVISION])");
	if (optind + 1 < argc)
		cmd_usage_error("unexpected argument '%s'", argv[optind + 1]);
	o->repo = strdup(argv[optind]);
	char *at = strchr(o->repo, '@');
	if (at) {
		*at = '\0';
		if (!at[1])
			cmd_usage_error("'%s': empty revision after '@'", argv[optind]);
		if (rev_flag && strcmp(rev_flag, at + 1))
			cmd_usage_error("revision given twice: '@%s' and --revision '%s'", at + 1,
					rev_flag);
		o->rev = at + 1;
	} else {
		o->rev = rev_flag ? rev_flag : "main";
	}
	if (!*o->rev || strstr(o->rev, ".."))
		cmd_usage_error("invalid revision '%s'", o->rev);
	if (atlas_hub_check_repo_id(o->repo))
		cmd_usage_error("%s", atlas_errmsg());
}

/* The token: --token-file, $HF_TOKEN, $HF_TOKEN_PATH, $HF_HOME/token or
 * ~/.cache/huggingface/token (as huggingface_hub looks). NULL if none;
 * exits 1 when --token-file cannot be read. */
static char *find_token(const char *file)
{
	const char *env = getenv("HF_TOKEN");
	char *path = NULL, *text = NULL;
	size_t len;

	if (!file && env && *env)
		return strdup(env);
	if (file) {
		path = strdup(file);
	} else if ((env = getenv("HF_TOKEN_PATH")) && *env) {
		path = strdup(env);
	} else if ((env = getenv("HF_HOME")) && *env) {
		path = atlas_path_join(env, "token");
	} else if ((env = getenv("HOME")) && *env) {
		path = atlas_path_join(env, ".cache/huggingface/token");
	}
	if (!path)
		return NULL;
	if (atlas_file_read(path, &text, &len)) {
		if (file) {
			cmd_error("cannot read the token file: %s", atlas_errmsg());
			exit(1);
		}
		free(path);
		return NULL;
	}
	free(path);
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
		text[--len] = '\0';
	if (!len) {
		free(text);
		if (file) {
			cmd_error("the token file '%s' is empty", file);
			exit(1);
		}
		return NULL;
	}
	return text;
}

/* --- progress display --------------------------------------------------- */

struct display {
	pthread_mutex_t lock;        /* serializes output and counters */
	struct atlas_fetch_plan *plan; /* sizes and names */
	int64_t *done;               /* [n_items] bytes present per item */
	int64_t base;                /* bytes present before the run */
	bool tty, quiet;             /* stderr is a terminal; -q */
	double t0, last;             /* run start, last redraw (seconds) */
	int64_t files_done;          /* files finished in this run */
	int64_t files_todo;          /* files to download */
	int failed;                  /* files that failed */
};

static void human(char *buf, size_t n, double bytes)
{
	const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	while (bytes >= 1024 && u < 4)
		bytes /= 1024, u++;
	snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

/* Redraw the one-line status (TTY only); caller holds the lock. */
static void redraw(struct display *d, int64_t item, bool force)
{
	double t = atlas_now();
	if (!d->tty || d->quiet || (!force && t - d->last < 0.1))
		return;
	d->last = t;
	int64_t sum = 0;
	for (int64_t i = 0; i < d->plan->n_items; i++)
		sum += d->done[i];
	int64_t total = d->plan->bytes_total, got = sum - d->base;
	double rate = t > d->t0 ? got / (t - d->t0) : 0;
	double eta = rate > 0 ? (total - sum) / rate : 0;
	char a[32], b[32], r[32], fa[32], fb[32];
	human(a, sizeof(a), (double)sum);
	human(b, sizeof(b), (double)total);
	human(r, sizeof(r), rate);
	const struct atlas_hub_file *f = d->plan->items[item].file;
	human(fa, sizeof(fa), (double)d->done[item]);
	human(fb, sizeof(fb), (double)(f->size > 0 ? f->size : 0));
	fprintf(stderr, "\r[%lld/%lld] %.40s %s/%s | total %s/%s %s/s ETA %d:%02d\033[K",
		(long long)d->files_done, (long long)d->files_todo, f->path, fa, fb, a, b, r,
		(int)(eta / 60), (int)eta % 60);
	fflush(stderr);
}

static void ev_start(void *arg, int64_t item)
{
	struct display *d = arg;
	pthread_mutex_lock(&d->lock);
	if (!d->tty && !d->quiet)
		fprintf(stderr, "atlas-fetch: fetching '%s' (%lld bytes)\n",
			d->plan->items[item].file->path, (long long)d->plan->items[item].file->size);
	redraw(d, item, true);
	pthread_mutex_unlock(&d->lock);
}

static void ev_progress(void *arg, int64_t item, int64_t done, int64_t total)
{
	struct display *d = arg;
	pthread_mutex_lock(&d->lock);
	d->done[item] = done;
	redraw(d, item, false);
	pthread_mutex_unlock(&d->lock);
}

static void ev_done(void *arg, int64_t item, int rc, const char *msg)
{
	struct display *d = arg;
	pthread_mutex_lock(&d->lock);
	if (d->tty && !d->quiet)
		fputs("\r\033[K", stderr);
	if (rc) {
		d->failed++;
		cmd_error("%s", msg);
	} else {
		d->files_done++;
		d->done[item] = d->plan->items[item].file->size;
		if (!d->tty && !d->quiet)
			fprintf(stderr, "atlas-fetch: fetched '%s'\n", d->plan->items[item].file->path);
	}
	redraw(d, item, true);
	pthread_mutex_unlock(&d->lock);
}

/* --- main ----------------------------------------------------------------- */

static void print_plan(const struct atlas_fetch_plan *p)
{
	int64_t n_present = 0;
	printf("%s at '%s' (commit %s) into %s\n", p->repo, p->rev, p->listing.commit, p->dest);
	for (int64_t i = 0; i < p->n_items; i++) {
		const struct atlas_hub_file *f = p->items[i].file;
		n_present += p->items[i].present;
		printf("%s %12lld  %s\n", p->items[i].present ? "have " : "fetch",
		       (long long)f->size, f->path);
	}
	printf("%lld files, %lld bytes to fetch; %lld files, %lld bytes already present\n",
	       (long long)(p->n_items - n_present), (long long)(p->bytes_total - p->bytes_present),
	       (long long)n_present, (long long)p->bytes_present);
}

/* HF_HUB_OFFLINE=1: answer from the cache alone. */
static int offline(const struct opts *o)
{
	char *id = NULL, *dir;
	if (o->local_dir) {
		cmd_error("offline mode (HF_HUB_OFFLINE is set): --local-dir needs the network");
		return 1;
	}
	if (asprintf(&id, "%s@%s", o->repo, o->rev) < 0)
		return 1;
	dir = atlas_model_resolve(id);
	free(id);
	if (!dir) {
		cmd_error("offline mode (HF_HUB_OFFLINE is set) and '%s' at '%s' is not in the "
			  "cache: %s",
			  o->repo, o->rev, atlas_errmsg());
		return 1;
	}
	if (o->dry_run)
		printf("offline: '%s' at '%s' is in the cache; nothing to fetch\n", o->repo, o->rev);
	printf("%s\n", dir);
	free(dir);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct atlas_hub_params hp;
	struct atlas_fetch_plan plan;
	struct atlas_hub *hub;
	char *token;
	int rc;

	cmd_name = "atlas-fetch";
	parse_args(argc, argv, &o);
	if (atlas_hub_offline())
		return offline(&o);
	token = find_token(o.token_file);
	atlas_hub_default_params(&hp);
	hp.token = token;
	if (o.retries >= 0)
		hp.retries = o.retries;
	if (!(hub = atlas_hub_new(&hp)))
		return cmd_lib_error();
	free(token);

	struct display d = {.tty = isatty(2), .quiet = o.quiet};
	struct atlas_fetch_opts fo = {
		.include = o.include, .n_include = o.n_include,
		.exclude = o.exclude, .n_exclude = o.n_exclude,
		.local_dir = o.local_dir, .jobs = o.jobs,
		.ev = {.start = ev_start, .progress = ev_progress, .done = ev_done, .arg = &d},
	};
	if ((rc = atlas_fetch_plan(hub, o.repo, o.rev, &fo, &plan))) {
		cmd_lib_error();
		goto out;
	}
	if (!plan.has_safetensors && !o.n_include)
		fprintf(stderr, "atlas-fetch: warning: '%s' has no safetensors weights; Atlas reads "
			"only safetensors (use --include to fetch other files)\n", o.repo);
	if (o.dry_run) {
		print_plan(&plan);
		goto out;
	}
	pthread_mutex_init(&d.lock, NULL);
	d.plan = &plan;
	d.done = calloc((size_t)plan.n_items + 1, sizeof(int64_t));
	for (int64_t i = 0; i < plan.n_items; i++) {
		if (plan.items[i].present)
			d.done[i] = plan.items[i].file->size > 0 ? plan.items[i].file->size : 0;
		else
			d.files_todo++;
	}
	d.base = plan.bytes_present;
	d.t0 = d.last = atlas_now();
	rc = atlas_fetch_run(hub, &plan, &fo);
	if (rc) {
		cmd_error("%d of %lld files failed; run atlas-fetch again to resume", d.failed,
			  (long long)plan.n_items);
	} else {
		if (!o.quiet) {
			char b[32];
			double t = atlas_now() - d.t0;
			human(b, sizeof(b), (double)(plan.bytes_total - plan.bytes_present));
			fprintf(stderr, "atlas-fetch: %lld files in place (%lld downloaded, %s in %.1f s)\n",
				(long long)plan.n_items, (long long)d.files_done, b, t);
		}
		printf("%s\n", plan.dest);
	}
	free(d.done);
	pthread_mutex_destroy(&d.lock);
out:
	atlas_fetch_plan_release(&plan);
	atlas_hub_free(hub);
	free(o.repo);
	free(o.include);
	free(o.exclude);
	return rc ? 1 : 0;
}
