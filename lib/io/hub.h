/* hub.h - a client of the Hugging Face Hub HTTP API (libcurl).
 *
 * Lists a repository's files at a revision and downloads one file at a
 * time into a temporary path, resuming a partial file with a Range
 * request, retrying transient failures (connection errors, timeouts,
 * 5xx, 429 with Retry-After) with exponential backoff, and checking the
 * size and, for LFS files, the SHA-256 before it reports success. The
 * caller moves the verified file to its final name (cache_write.h), so
 * no final name ever holds a truncated or corrupt file.
 *
 * The endpoint is $HF_ENDPOINT, else the public Hub. The token is sent
 * only to the endpoint's own host and port, never to a CDN that a
 * resolve URL redirects to. */
#ifndef ATLAS_IO_HUB_H
#define ATLAS_IO_HUB_H

#include <stdbool.h>
#include <stdint.h>

/* One file of a repository at a commit, from the API listing. */
struct atlas_hub_file {
	char *path;       /* "model.safetensors", relative, owned by the repo */
	int64_t size;     /* bytes, -1 if the listing did not say */
	char etag[72];    /* LFS: the content's sha256; else the git blob sha1 */
	bool lfs;         /* stored with git-lfs: etag is a verifiable sha256 */
};

/* A repository listing at one revision. */
struct atlas_hub_repo {
	char commit[48];                 /* the revision's commit sha */
	struct atlas_hub_file *files;    /* [n_files], owned */
	int64_t n_files;                 /* count */
};

/* Client settings; atlas_hub_default_params fills the defaults. */
struct atlas_hub_params {
	const char *endpoint; /* base URL; NULL: $HF_ENDPOINT or the public Hub */
	const char *token;    /* bearer token or NULL */
	int retries;          /* retries after the first attempt (default 5) */
	int backoff_ms;       /* first wait, doubled per retry up to 30 s (default
			       * 1000; $ATLAS_HUB_BACKOFF_MS overrides) */
	int stall_s;          /* abort a transfer idle this long (default 60) */
};

struct atlas_hub; /* opaque: settings plus curl global state */

void atlas_hub_default_params(struct atlas_hub_params *p);

/* A new client (copies the strings of `p`), owned by the caller
 * (atlas_hub_free), or NULL with a message. Call it before starting
 * threads: it initializes libcurl. */
struct atlas_hub *atlas_hub_new(const struct atlas_hub_params *p);
void atlas_hub_free(struct atlas_hub *h);

/* The endpoint in use (no trailing '/'); owned by the client. */
const char *atlas_hub_endpoint(const struct atlas_hub *h);

/* True when HF_HUB_OFFLINE is set to 1/true/yes/on. */
bool atlas_hub_offline(void);

/* Check `repo` is "org/name" with characters the Hub allows. 0 or
 * ATLAS_EINVAL with a message. */
int atlas_hub_check_repo_id(const char *repo);

/* List `repo` ("org/name") at `rev` (branch, tag or commit) into *out
 * (release with atlas_hub_repo_release). Returns 0, or a negative code
 * with a message: ATLAS_ENOTFOUND for a missing repository or revision,
 * ATLAS_EIO for 401/403 (the message says how to pass a token) and for
 * network failures after the retries. */
int atlas_hub_repo_info(struct atlas_hub *h, const char *repo, const char *rev,
			struct atlas_hub_repo *out);
void atlas_hub_repo_release(struct atlas_hub_repo *r);

/* Progress of one download: bytes of the file present so far and its
 * size. Called from the downloading thread. */
typedef void (*atlas_hub_progress_fn)(void *arg, int64_t done, int64_t total);

/* Download `f` of `repo` at `commit` into `tmp_path`, resuming from what
 * the file already holds (it is locked while in use, so two processes do
 * not write it at once). On success returns 0 and `tmp_path` holds the
 * verified content. On a checksum or size mismatch the partial file is
 * deleted and ATLAS_EFORMAT names the file and both digests; other
 * failures (ATLAS_ENOTFOUND, ATLAS_EIO: network, HTTP status, disk full)
 * keep the partial file for the next run to resume. Thread-safe. */
int atlas_hub_download(struct atlas_hub *h, const char *repo, const char *commit,
		       const struct atlas_hub_file *f, const char *tmp_path,
		       atlas_hub_progress_fn fn, void *arg);

#endif
