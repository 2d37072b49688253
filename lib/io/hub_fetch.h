/* hub_fetch.h - fetch a repository from the Hub into the HF cache (or a
 * plain directory): pick the files, skip what is already there, download
 * the rest with N parallel transfers, link the snapshot, write the ref.
 *
 * Two steps so a caller can show the plan (--dry-run) before acting:
 * atlas_fetch_plan lists and filters, atlas_fetch_run downloads. */
#ifndef ATLAS_IO_HUB_FETCH_H
#define ATLAS_IO_HUB_FETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "hub.h"

/* Callbacks from atlas_fetch_run; they may be called from several
 * threads at once (the caller serializes its own output). Any may be NULL. */
struct atlas_fetch_events {
	void (*start)(void *arg, int64_t item);                 /* a download begins */
	void (*progress)(void *arg, int64_t item, int64_t done, int64_t total);
	void (*done)(void *arg, int64_t item, int rc, const char *msg); /* rc 0: ok */
	void *arg;                                              /* passed to each */
};

struct atlas_fetch_opts {
	const char *const *include; /* globs over the path ('*' crosses '/'); NULL: defaults */
	int n_include;              /* count */
	const char *const *exclude; /* globs to leave out */
	int n_exclude;              /* count */
	const char *local_dir;      /* plain copy into this directory; NULL: the HF cache */
	int jobs;                   /* parallel transfers, >= 1 */
	struct atlas_fetch_events ev; /* progress reports */
};

/* One selected file. */
struct atlas_fetch_item {
	const struct atlas_hub_file *file; /* in the plan's listing */
	bool present;                      /* already complete at its destination */
};

struct atlas_fetch_plan {
	char *repo;                   /* "org/name" */
	char *rev;                    /* as asked ("main", a tag, a sha) */
	struct atlas_hub_repo listing; /* every file of the revision */
	struct atlas_fetch_item *items; /* selected files, [n_items] */
	int64_t n_items;              /* count */
	int64_t bytes_total;          /* size of the selected files */
	int64_t bytes_present;        /* of which already there */
	bool has_safetensors;         /* the revision has *.safetensors files */
	char *repo_dir;               /* cache: models--org--name; NULL for local_dir */
	char *dest;                   /* where the files appear: snapshot or local_dir */
};

/* The default include globs (config, tokenizer and safetensors files),
 * NULL-terminated, static. */
extern const char *const atlas_fetch_default_include[];

/* List `repo` at `rev` and select files per `o`. Returns 0 and fills
 * *plan (release with atlas_fetch_plan_release), or a negative code with
 * a message (ATLAS_ENOTFOUND also when no file matches). */
int atlas_fetch_plan(struct atlas_hub *h, const char *repo, const char *rev,
		     const struct atlas_fetch_opts *o, struct atlas_fetch_plan *plan);

/* Download what the plan lacks. Returns 0 when every file is in place
 * (and, in the cache, refs/<rev> names the commit), else the negative
 * code of the first failure with its message; files that did arrive
 * stay. */
int atlas_fetch_run(struct atlas_hub *h, struct atlas_fetch_plan *plan,
		    const struct atlas_fetch_opts *o);

void atlas_fetch_plan_release(struct atlas_fetch_plan *plan);

#endif
