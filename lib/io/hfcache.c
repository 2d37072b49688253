/* hfcache.c - resolve a model argument to a directory (see hfcache.h).
 *
 * The cache layout is huggingface_hub's: models--ORG--NAME/ holds
 * refs/<branch or tag> (a file with the commit sha) and
 * snapshots/<sha>/ (the files, usually symlinks into blobs/). The cache
 * root follows huggingface_hub's environment variables so a model that
 * Python downloaded is found here and the other way round. */
#include "hfcache.h"

#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"
#include "file.h"

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* asprintf that sets the error message and returns NULL on failure. */
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	return s;
}

static const char *home_dir(void)
{
	const char *h = getenv("HOME");
	struct passwd *pw;

	if (h && *h)
		return h;
	pw = getpwuid(getuid());
	return pw && pw->pw_dir ? pw->pw_dir : NULL;
}

/* `s` + `suffix`, with a leading "~/" expanded as Python's expanduser
 * does (huggingface_hub expands HF_HOME and HF_HUB_CACHE). */
static char *expand(const char *s, const char *suffix)
{
	const char *home;

	if (s[0] == '~' && (s[1] == '/' || !s[1]) && (home = home_dir()))
		return xasprintf("%s%s%s", home, s + 1, suffix);
	return xasprintf("%s%s", s, suffix);
}

char *atlas_hf_cache_dir(void)
{
	const char *e, *home;

	if ((e = getenv("HF_HUB_CACHE")) && *e)
		return expand(e, "");
	if ((e = getenv("HF_HOME")) && *e)
		return expand(e, "/hub");
	/* huggingface_hub puts HF_HOME under XDG_CACHE_HOME when it is set. */
	if ((e = getenv("XDG_CACHE_HOME")) && *e)
		return expand(e, "/huggingface/hub");
	if (!(home = home_dir())) {
		atlas_error(ATLAS_ENOTFOUND,
			    "cannot find the Hugging Face cache: HOME is not set (set HF_HOME)");
		return NULL;
	}
	return xasprintf("%s/.cache/huggingface/hub", home);
}

static bool is_dir(const char *p)
{
	struct stat sb;
	return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool is_sha(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++)
		if (!isxdigit((unsigned char)s[n]))
			return false;
	return n == 40;
}

/* A ref or commit read from disk or given by the user goes into a path:
 * keep it inside the repository directory. */
static bool safe_component(const char *s)
{
	return *s && *s != '/' && !strstr(s, "..");
}

/* The sha stored in `repo`/refs/`rev`, malloc'd, or NULL (no message)
 * when there is no such ref. */
static char *read_ref(const char *repo, const char *rev)
{
	char *p = xasprintf("%s/refs/%s", repo, rev), *text = NULL;
	size_t len;

	if (!p)
		return NULL;
	if (atlas_file_read(p, &text, &len)) {
		free(p);
		atlas_error_clear();
		return NULL;
	}
	free(p);
	while (len > 0 && isspace((unsigned char)text[len - 1]))
		text[--len] = '\0';
	return text;
}

/* Look `id` (org/name) at `rev` up in the cache; `model` is the argument
 * as given, for messages. */
static char *resolve_hub(const char *model, const char *id, const char *rev)
{
	char *cache = atlas_hf_cache_dir(), *repo = NULL, *sha = NULL, *snap = NULL;
	const char *slash = strchr(id, '/');

	if (!cache)
		return NULL;
	repo = xasprintf("%s/models--%.*s--%s", cache, (int)(slash - id), id, slash + 1);
	if (!repo)
		goto out;
	if (!is_dir(repo)) {
		atlas_error(ATLAS_ENOTFOUND,
			    "model '%s' not found: no such directory, and not in the Hugging Face "
			    "cache at '%s' (download it with: atlas-fetch %s)",
			    model, cache, model);
		goto out;
	}
	sha = read_ref(repo, rev);
	if (!sha && is_sha(rev))
		sha = strdup(rev);
	if (!sha) {
		atlas_error(ATLAS_ENOTFOUND,
			    "revision '%s' of '%s' not in the cache at '%s' (download it with: "
			    "atlas-fetch %s)",
			    rev, id, repo, model);
		goto out;
	}
	if (!safe_component(sha) || strchr(sha, '/')) {
		atlas_error(ATLAS_EFORMAT, "'%s/refs/%s' holds an invalid commit '%s'", repo, rev,
			    sha);
		goto out;
	}
	snap = xasprintf("%s/snapshots/%s", repo, sha);
	if (snap && !is_dir(snap)) {
		atlas_error(ATLAS_ENOTFOUND,
			    "revision '%s' of '%s' not in the cache: no snapshot '%s' (download it "
			    "with: atlas-fetch %s)",
			    rev, id, snap, model);
		free(snap);
		snap = NULL;
	}
out:
	free(cache);
	free(repo);
	free(sha);
	return snap;
}

char *atlas_model_resolve(const char *model)
{
	const char *at, *slash;
	struct stat sb;
	char *id, *r;
	size_t idlen;

	if (!model || !*model) {
		atlas_error(ATLAS_EINVAL, "no model given");
		return NULL;
	}
	if (stat(model, &sb) == 0) {
		if (!S_ISDIR(sb.st_mode)) {
			atlas_error(ATLAS_EINVAL, "model '%s' is not a directory", model);
			return NULL;
		}
		r = realpath(model, NULL);
		if (!r && !(r = strdup(model)))
			atlas_error(ATLAS_ENOMEM, "out of memory");
		return r;
	}
	if (model[0] == '/' || model[0] == '.' || strstr(model, "./")) {
		atlas_error(ATLAS_ENOTFOUND, "no such model directory '%s'", model);
		return NULL;
	}
	/* A Hub id: exactly one '/' before an optional '@rev'; the revision
	 * may itself contain '/' (refs/pr/1). */
	at = strchr(model, '@');
	idlen = at ? (size_t)(at - model) : strlen(model);
	slash = memchr(model, '/', idlen);
	if (!slash || slash == model || (size_t)(slash - model) + 1 == idlen ||
	    memchr(slash + 1, '/', idlen - (size_t)(slash - model) - 1) ||
	    (at && !safe_component(at + 1))) {
		atlas_error(ATLAS_ENOTFOUND,
			    "model '%s' not found: no such directory, and not a Hugging Face id "
			    "(org/name[@revision])",
			    model);
		return NULL;
	}
	id = strndup(model, idlen);
	if (!id) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	r = resolve_hub(model, id, at ? at + 1 : "main");
	free(id);
	return r;
}
