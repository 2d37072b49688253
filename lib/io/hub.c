/* hub.c - list a Hub repository and download verified files (see hub.h). */
#include "hub.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"
#include "../core/sha256.h"
#include "hub_internal.h"
#include "json_util.h"

/* The one place the public Hub's address is written. */
#define ATLAS_HUB_DEFAULT_ENDPOINT "https://huggingface.co"

void atlas_hub_default_params(struct atlas_hub_params *p)
{
	const char *b = getenv("ATLAS_HUB_BACKOFF_MS");
	*p = (struct atlas_hub_params){.retries = 5, .backoff_ms = 1000, .stall_s = 60};
	if (b && *b)
		p->backoff_ms = atoi(b) < 0 ? 0 : atoi(b);
}

struct atlas_hub *atlas_hub_new(const struct atlas_hub_params *p)
{
	struct atlas_hub_params def;
	struct atlas_hub *h = calloc(1, sizeof(*h));
	const char *ep;

	if (!p) {
		atlas_hub_default_params(&def);
		p = &def;
	}
	ep = p->endpoint ? p->endpoint : getenv("HF_ENDPOINT");
	if (!ep || !*ep)
		ep = ATLAS_HUB_DEFAULT_ENDPOINT;
	if (!h || !(h->endpoint = strdup(ep)) || (p->token && !(h->token = strdup(p->token)))) {
		atlas_hub_free(h);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	size_t n = strlen(h->endpoint);
	while (n > 0 && h->endpoint[n - 1] == '/')
		h->endpoint[--n] = '\0';
	h->retries = p->retries;
	h->backoff_ms = p->backoff_ms;
	h->stall_s = p->stall_s > 0 ? p->stall_s : 60;
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		atlas_hub_free(h);
		atlas_error(ATLAS_EIO, "cannot initialize libcurl");
		return NULL;
	}
	return h;
}

void atlas_hub_free(struct atlas_hub *h)
{
	if (!h)
		return;
	free(h->endpoint);
	free(h->token);
	free(h);
}

const char *atlas_hub_endpoint(const struct atlas_hub *h)
{
	return h->endpoint;
}

bool atlas_hub_offline(void)
{
	const char *v = getenv("HF_HUB_OFFLINE");
	if (!v)
		return false;
	return !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
	       !strcasecmp(v, "on");
}

static bool id_part_ok(const char *s, size_t n)
{
	if (!n || n > 96 || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("-_.", s[i]))
			return false;
	return !memmem(s, n, "..", 2);
}

int atlas_hub_check_repo_id(const char *repo)
{
	const char *slash = strchr(repo, '/');
	if (!slash || !id_part_ok(repo, (size_t)(slash - repo)) ||
	    !id_part_ok(slash + 1, strlen(slash + 1)))
		return atlas_error(ATLAS_EINVAL,
				   "'%s' is not a Hub repository id (expected org/name)", repo);
	return 0;
}

/* --- listing ------------------------------------------------------------ */

/* A path from the listing goes under a cache directory: keep it inside. */
static bool safe_path(const char *p)
{
	if (!*p || *p == '/' || strstr(p, "//"))
		return false;
	for (const char *s = p; s; s = strchr(s, '/')) {
		if (*s == '/')
			s++;
		if (!strncmp(s, "..", 2) && (s[2] == '/' || !s[2]))
			return false;
		if (s[0] == '.' && (s[1] == '/' || !s[1]))
			return false;
	}
	return true;
}

static bool is_hex(const char *s, size_t n)
{
	if (strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

static int parse_sibling(struct json_object *o, const char *where, struct atlas_hub_file *f)
{
	const char *name = NULL, *blob = NULL, *sha = NULL;
	struct json_object *lfs = NULL;
	int64_t size = -1;

	if (!json_object_is_type(o, json_type_object))
		return atlas_error(ATLAS_EFORMAT, "%s: a sibling is not an object", where);
	if (atlas_json_string(o, "rfilename", where, &name) != 1)
		return atlas_error(ATLAS_EFORMAT, "%s: a sibling has no 'rfilename'", where);
	if (!safe_path(name))
		return atlas_error(ATLAS_EFORMAT, "%s: unsafe file name '%s'", where, name);
	if (atlas_json_string(o, "blobId", where, &blob) < 0 ||
	    atlas_json_int(o, "size", where, &size) < 0 ||
	    atlas_json_object(o, "lfs", where, &lfs) < 0)
		return ATLAS_EFORMAT;
	if (lfs && (atlas_json_string(lfs, "sha256", where, &sha) != 1 ||
		    atlas_json_int(lfs, "size", where, &size) < 0 || !is_hex(sha, 64)))
		return atlas_error(ATLAS_EFORMAT, "%s: file '%s' has an invalid 'lfs' entry", where,
				   name);
	if (!sha && (!blob || !is_hex(blob, 40)))
		return atlas_error(ATLAS_EFORMAT, "%s: file '%s' has no valid 'blobId'", where, name);
	if (!(f->path = strdup(name)))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	f->size = size;
	f->lfs = sha != NULL;
	snprintf(f->etag, sizeof(f->etag), "%s", sha ? sha : blob);
	for (char *p = f->etag; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return 0;
}

static int parse_listing(const char *body, size_t len, const char *where,
			 struct atlas_hub_repo *out)
{
	struct json_object *o = atlas_json_parse_object(body, len, where), *sib = NULL;
	const char *sha = NULL;
	int rc = 0;

	if (!o)
		return ATLAS_EFORMAT;
	if (atlas_json_string(o, "sha", where, &sha) != 1 || !is_hex(sha, 40)) {
		rc = atlas_error(ATLAS_EFORMAT, "%s: no valid commit 'sha'", where);
		goto out;
	}
	snprintf(out->commit, sizeof(out->commit), "%s", sha);
	if (atlas_json_array(o, "siblings", where, &sib) != 1) {
		rc = atlas_error(ATLAS_EFORMAT, "%s: no 'siblings' list", where);
		goto out;
	}
	size_t n = json_object_array_length(sib);
	out->files = calloc(n + 1, sizeof(*out->files));
	if (!out->files) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		rc = parse_sibling(json_object_array_get_idx(sib, i), where, &out->files[i]);
		if (!rc)
			out->n_files++;
	}
out:
	json_object_put(o);
	return rc;
}

int atlas_hub_repo_info(struct atlas_hub *h, const char *repo, const char *rev,
			struct atlas_hub_repo *out)
{
	char *erev, *url = NULL, what[512];
	struct hub_result res;
	int rc, grc = 0;

	memset(out, 0, sizeof(*out));
	if ((rc = atlas_hub_check_repo_id(repo)))
		return rc;
	if (!(erev = hub_escape(rev, false)) ||
	    asprintf(&url, "%s/api/models/%s/revision/%s?blobs=true", h->endpoint, repo, erev) < 0) {
		free(erev);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	free(erev);
	snprintf(what, sizeof(what), "'%s' at revision '%s'", repo, rev);
	for (int attempt = 0;; attempt++) {
		struct hub_sink sink = {.fd = -1, .max = 64 << 20};
		grc = hub_get(h, url, &sink, &res);
		if (!grc && res.status == 200) {
			rc = parse_listing(sink.buf ? sink.buf : "", sink.len, url, out);
			free(sink.buf);
			if (rc)
				atlas_hub_repo_release(out);
			break;
		}
		free(sink.buf);
		if (attempt >= h->retries || !hub_transient(&res, grc)) {
			rc = hub_fail(h, &res, grc, what, url);
			break;
		}
		hub_backoff(h, &res, attempt);
	}
	free(url);
	return rc;
}

void atlas_hub_repo_release(struct atlas_hub_repo *r)
{
	for (int64_t i = 0; r->files && i < r->n_files; i++)
		free(r->files[i].path);
	free(r->files);
	r->files = NULL;
	r->n_files = 0;
}

/* --- download ------------------------------------------------------------- */

/* Hash the first `n` bytes already in `fd` (a resumed download). */
static int hash_prefix(int fd, int64_t n, struct atlas_sha256 *s, const char *path)
{
	char buf[1 << 16];
	int64_t off = 0;
	while (off < n) {
		size_t want = (size_t)(n - off < (int64_t)sizeof(buf) ? n - off : (int64_t)sizeof(buf));
		ssize_t r = pread(fd, buf, want, off);
		if (r <= 0)
			return atlas_error(ATLAS_EIO, "cannot read '%s': %s", path,
					   r < 0 ? strerror(errno) : "unexpected end of file");
		atlas_sha256_update(s, buf, (size_t)r);
		off += r;
	}
	return 0;
}

/* Check the finished file: its size and, for LFS, its sha256. A mismatch
 * deletes the file. */
static int verify(const struct atlas_hub_file *f, const char *repo, const char *tmp,
		  int64_t size, struct atlas_sha256 *s)
{
	char hex[65];
	if (f->size >= 0 && size != f->size) {
		unlink(tmp);
		return atlas_error(ATLAS_EFORMAT,
				   "'%s' of '%s': received %lld bytes but the Hub lists %lld; the "
				   "download was discarded",
				   f->path, repo, (long long)size, (long long)f->size);
	}
	if (!f->lfs)
		return 0;
	atlas_sha256_hex(s, hex);
	if (strcmp(hex, f->etag)) {
		unlink(tmp);
		return atlas_error(ATLAS_EFORMAT,
				   "checksum mismatch for '%s' of '%s': expected sha256 %s, got %s; "
				   "the download was discarded",
				   f->path, repo, f->etag, hex);
	}
	return 0;
}

int atlas_hub_download(struct atlas_hub *h, const char *repo, const char *commit,
		       const struct atlas_hub_file *f, const char *tmp_path,
		       atlas_hub_progress_fn fn, void *arg)
{
	char *epath = hub_escape(f->path, true), *url = NULL, what[1024];
	struct atlas_sha256 sha;
	struct hub_result res;
	struct stat sb;
	int fd, rc = 0;

	if (!epath || asprintf(&url, "%s/%s/resolve/%s/%s", h->endpoint, repo, commit, epath) < 0) {
		free(epath);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	free(epath);
	snprintf(what, sizeof(what), "'%s' of '%s'", f->path, repo);
	fd = open(tmp_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = atlas_error(ATLAS_EIO, "cannot create '%s': %s", tmp_path, strerror(errno));
		free(url);
		return rc;
	}
	/* another process downloading the same blob: wait for it */
	while (flock(fd, LOCK_EX) && errno == EINTR)
		;
	for (int attempt = 0;; attempt++) {
		struct hub_sink sink = {.fd = fd, .sha = &sha, .progress = fn, .progress_arg = arg,
			.total = f->size};
		int grc;

		if (fstat(fd, &sb)) {
			rc = atlas_error(ATLAS_EIO, "cannot stat '%s': %s", tmp_path, strerror(errno));
			break;
		}
		sink.offset = sb.st_size;
		if (f->size >= 0 && sink.offset > f->size)
			sink.offset = 0; /* longer than the file: useless */
		if (ftruncate(fd, sink.offset) || lseek(fd, sink.offset, SEEK_SET) < 0) {
			rc = atlas_error(ATLAS_EIO, "cannot write '%s': %s", tmp_path, strerror(errno));
			break;
		}
		atlas_sha256_init(&sha);
		if (f->lfs && (rc = hash_prefix(fd, sink.offset, &sha, tmp_path)))
			break;
		if (f->size >= 0 && sink.offset == f->size && f->size > 0) {
			/* an earlier run got every byte but stopped before the rename */
			rc = verify(f, repo, tmp_path, sink.offset, &sha);
			break;
		}
		grc = hub_get(h, url, &sink, &res);
		if (sink.write_errno) {
			rc = atlas_error(ATLAS_EIO, "%scannot write '%s': %s",
					 sink.write_errno == ENOSPC ? "disk full: " : "", tmp_path,
					 strerror(sink.write_errno));
			break;
		}
		if (!grc && res.status == 206 && res.range_start != sink.offset) {
			/* a range we did not ask for: start over */
			if (attempt >= h->retries) {
				rc = atlas_error(ATLAS_EIO, "cannot download %s: the server sent "
						 "bytes from %lld, not %lld", what,
						 (long long)res.range_start, (long long)sink.offset);
				break;
			}
			if (ftruncate(fd, 0)) {
				rc = atlas_error(ATLAS_EIO, "cannot write '%s': %s", tmp_path,
						 strerror(errno));
				break;
			}
			continue;
		}
		if (!grc && (res.status == 200 || res.status == 206)) {
			rc = verify(f, repo, tmp_path, sink.offset + sink.got, &sha);
			break;
		}
		if (!grc && res.status == 416) {
			/* our partial file is not a prefix the server accepts */
			if (ftruncate(fd, 0) || attempt >= h->retries) {
				rc = hub_fail(h, &res, grc, what, url);
				break;
			}
			continue;
		}
		if (attempt >= h->retries || !hub_transient(&res, grc)) {
			rc = hub_fail(h, &res, grc, what, url);
			if (attempt > 0 && hub_transient(&res, grc))
				atlas_error_wrap(rc, "giving up after %d attempts", attempt + 1);
			break;
		}
		hub_backoff(h, &res, attempt);
	}
	if (fd >= 0 && rc != ATLAS_EFORMAT)
		fsync(fd);
	close(fd);
	free(url);
	return rc;
}
