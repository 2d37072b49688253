/* hub_fetch.c - plan and run the download of a repository (see
 * hub_fetch.h). Files go to a temporary name first (blobs/<etag>.incomplete
 * in the cache, DIR/.cache/atlas/download/<etag>.incomplete for a local
 * directory) and reach their final name by rename after verification. */
#include "hub_fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"
#include "../core/sha256.h"
#include "cache_write.h"
#include "hfcache.h"

const char *const atlas_fetch_default_include[] = {
	"*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja", NULL,
};

/* With the default include: the index of the PyTorch duplicates. */
static const char *const default_exclude[] = {"*.bin.index.json", "*.pth.index.json", NULL};

static bool match_any(const char *const *globs, int n, const char *path)
{
	for (int i = 0; n < 0 ? globs[i] != NULL : i < n; i++)
		if (!fnmatch(globs[i], path, 0))
			return true;
	return false;
}

static bool selected(const struct atlas_fetch_opts *o, const char *path)
{
	if (o->n_include > 0 ? !match_any(o->include, o->n_include, path)
			     : !match_any(atlas_fetch_default_include, -1, path))
		return false;
	if (o->n_include == 0 && match_any(default_exclude, -1, path))
		return false;
	return !match_any(o->exclude, o->n_exclude, path);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix);
}

/* A local copy is complete when it has the size and, for LFS, the hash. */
static bool local_ready(const char *path, const struct atlas_hub_file *f)
{
	struct stat sb;
	if (stat(path, &sb) || !S_ISREG(sb.st_mode) || (f->size >= 0 && sb.st_size != f->size))
		return false;
	if (!f->lfs)
		return true;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	struct atlas_sha256 s;
	char buf[1 << 16], hex[65];
	ssize_t r;
	atlas_sha256_init(&s);
	while ((r = read(fd, buf, sizeof(buf))) > 0)
		atlas_sha256_update(&s, buf, (size_t)r);
	close(fd);
	atlas_sha256_hex(&s, hex);
	return r == 0 && !strcmp(hex, f->etag);
}

static char *join(const char *a, const char *b)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", a, b) < 0) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	return p;
}

int atlas_fetch_plan(struct atlas_hub *h, const char *repo, const char *rev,
		     const struct atlas_fetch_opts *o, struct atlas_fetch_plan *plan)
{
	int rc;
	char *cache = NULL;

	memset(plan, 0, sizeof(*plan));
	if (!(plan->repo = strdup(repo)) || !(plan->rev = strdup(rev)))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if ((rc = atlas_hub_repo_info(h, repo, rev, &plan->listing)))
		return rc;
	struct atlas_hub_repo *l = &plan->listing;
	if (!(plan->items = calloc((size_t)l->n_files + 1, sizeof(*plan->items))))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if (o->local_dir) {
		if (!(plan->dest = strdup(o->local_dir)))
			return atlas_error(ATLAS_ENOMEM, "out of memory");
	} else {
		if (!(cache = atlas_hf_cache_dir()))
			return ATLAS_ENOTFOUND;
		plan->repo_dir = atlas_cache_repo_dir(cache, repo);
		free(cache);
		if (!plan->repo_dir || asprintf(&plan->dest, "%s/snapshots/%s", plan->repo_dir,
						l->commit) < 0)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	for (int64_t i = 0; i < l->n_files; i++) {
		const struct atlas_hub_file *f = &l->files[i];
		if (ends_with(f->path, ".safetensors"))
			plan->has_safetensors = true;
		if (!selected(o, f->path))
			continue;
		struct atlas_fetch_item *it = &plan->items[plan->n_items++];
		it->file = f;
		if (plan->repo_dir) {
			it->present = atlas_cache_blob_ready(plan->repo_dir, f->etag, f->size);
		} else {
			char *p = join(plan->dest, f->path);
			if (!p)
				return ATLAS_ENOMEM;
			it->present = local_ready(p, f);
			free(p);
		}
		if (f->size > 0) {
			plan->bytes_total += f->size;
			if (it->present)
				plan->bytes_present += f->size;
		}
	}
	if (plan->n_items == 0)
		return atlas_error(ATLAS_ENOTFOUND,
				   "no file of '%s' at revision '%s' matches the %s patterns (%lld "
				   "files in the repository)",
				   repo, rev, o->n_include ? "--include/--exclude" : "default",
				   (long long)l->n_files);
	return 0;
}

void atlas_fetch_plan_release(struct atlas_fetch_plan *plan)
{
	atlas_hub_repo_release(&plan->listing);
	free(plan->items);
	free(plan->repo);
	free(plan->rev);
	free(plan->repo_dir);
	free(plan->dest);
	memset(plan, 0, sizeof(*plan));
}

/* --- running ---------------------------------------------------------------- */

struct runner {
	struct atlas_hub *h;                 /* client */
	struct atlas_fetch_plan *plan;       /* what to do */
	const struct atlas_fetch_opts *o;    /* events */
	pthread_mutex_t lock;                /* guards next, first_rc, first_msg */
	int64_t next;                        /* next item to take */
	int first_rc;                        /* first failure */
	char first_msg[1024];                /* its message */
};

/* Progress trampoline: adds the item index. */
struct item_ctx {
	struct runner *r;   /* the run */
	int64_t item;       /* index in plan->items */
};

static void on_progress(void *arg, int64_t done, int64_t total)
{
	struct item_ctx *c = arg;
	if (c->r->o->ev.progress)
		c->r->o->ev.progress(c->r->o->ev.arg, c->item, done, total);
}

/* Fetch one item to its final place. */
static int fetch_item(struct runner *r, int64_t i)
{
	struct atlas_fetch_plan *p = r->plan;
	const struct atlas_hub_file *f = p->items[i].file;
	struct item_ctx ctx = {.r = r, .item = i};
	char *tmp = NULL, *final = NULL, *tmpdir = NULL;
	int rc = 0;

	if (p->repo_dir) {
		if (!(tmpdir = join(p->repo_dir, "blobs")) || (rc = atlas_mkdirs(tmpdir)))
			goto out;
		tmp = atlas_cache_blob_path(p->repo_dir, f->etag, ".incomplete");
		final = atlas_cache_blob_path(p->repo_dir, f->etag, NULL);
	} else {
		if (asprintf(&tmpdir, "%s/.cache/atlas/download", p->dest) < 0) {
			tmpdir = NULL;
			rc = atlas_error(ATLAS_ENOMEM, "out of memory");
			goto out;
		}
		if ((rc = atlas_mkdirs(tmpdir)))
			goto out;
		if (asprintf(&tmp, "%s/%s.incomplete", tmpdir, f->etag) < 0)
			tmp = NULL;
		final = join(p->dest, f->path);
	}
	if (!tmp || !final) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	if (!p->items[i].present) {
		if (r->o->ev.start)
			r->o->ev.start(r->o->ev.arg, i);
		rc = atlas_hub_download(r->h, p->repo, p->listing.commit, f, tmp, on_progress, &ctx);
		if (!rc)
			rc = atlas_file_move(tmp, final);
		if (!rc)
			p->items[i].present = true;
	}
	if (!rc && p->repo_dir)
		rc = atlas_cache_link(p->repo_dir, p->listing.commit, f->path, f->etag);
out:
	free(tmp);
	free(final);
	free(tmpdir);
	return rc;
}

static void *worker(void *arg)
{
	struct runner *r = arg;
	for (;;) {
		pthread_mutex_lock(&r->lock);
		int64_t i = r->next++;
		pthread_mutex_unlock(&r->lock);
		if (i >= r->plan->n_items)
			return NULL;
		bool was_present = r->plan->items[i].present;
		int rc = fetch_item(r, i);
		if (rc) {
			pthread_mutex_lock(&r->lock);
			if (!r->first_rc) {
				r->first_rc = rc;
				snprintf(r->first_msg, sizeof(r->first_msg), "%s", atlas_errmsg());
			}
			pthread_mutex_unlock(&r->lock);
		}
		if (r->o->ev.done && !(was_present && !rc))
			r->o->ev.done(r->o->ev.arg, i, rc, rc ? atlas_errmsg() : "");
	}
}

int atlas_fetch_run(struct atlas_hub *h, struct atlas_fetch_plan *plan,
		    const struct atlas_fetch_opts *o)
{
	struct runner r = {.h = h, .plan = plan, .o = o};
	int jobs = o->jobs < 1 ? 1 : o->jobs > 64 ? 64 : o->jobs;
	pthread_t th[64];
	int started = 0;

	if (jobs > plan->n_items)
		jobs = (int)plan->n_items;
	pthread_mutex_init(&r.lock, NULL);
	for (int i = 1; i < jobs; i++)
		if (!pthread_create(&th[started], NULL, worker, &r))
			started++;
	worker(&r);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&r.lock);
	if (r.first_rc)
		return atlas_error(r.first_rc, "%s", r.first_msg);
	if (plan->repo_dir && strcmp(plan->rev, plan->listing.commit))
		return atlas_cache_write_ref(plan->repo_dir, plan->rev, plan->listing.commit);
	return 0;
}
