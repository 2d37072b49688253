/* cache_write.c - atomic writes into the HF cache layout (see
 * cache_write.h). */
#include "cache_write.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"

char *atlas_cache_repo_dir(const char *cache, const char *repo)
{
	const char *slash = strchr(repo, '/');
	char *p = NULL;
	if (!slash || asprintf(&p, "%s/models--%.*s--%s", cache, (int)(slash - repo), repo,
			       slash + 1) < 0) {
		atlas_error(ATLAS_EINVAL, "cannot place '%s' in the cache", repo);
		return NULL;
	}
	return p;
}

int atlas_mkdirs(const char *path)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	if (n >= sizeof(buf))
		return atlas_error(ATLAS_EIO, "path too long: '%s'", path);
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			return atlas_error(ATLAS_EIO, "cannot create directory '%s': %s", buf,
					   strerror(errno));
		buf[i] = c;
	}
	struct stat sb;
	if (stat(path, &sb) || !S_ISDIR(sb.st_mode))
		return atlas_error(ATLAS_EIO, "'%s' is not a directory", path);
	return 0;
}

char *atlas_cache_blob_path(const char *repo_dir, const char *etag, const char *suffix)
{
	char *p = NULL;
	if (asprintf(&p, "%s/blobs/%s%s", repo_dir, etag, suffix ? suffix : "") < 0) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	return p;
}

bool atlas_cache_blob_ready(const char *repo_dir, const char *etag, int64_t size)
{
	char *p = atlas_cache_blob_path(repo_dir, etag, NULL);
	struct stat sb;
	bool ok = p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && (size < 0 || sb.st_size == size);
	free(p);
	return ok;
}

/* The directory part of `path` created; 0 or ATLAS_EIO. */
static int make_parent(const char *path)
{
	char *d = strdup(path), *slash;
	int rc = 0;
	if (!d)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if ((slash = strrchr(d, '/')) && slash != d) {
		*slash = '\0';
		rc = atlas_mkdirs(d);
	}
	free(d);
	return rc;
}

int atlas_cache_link(const char *repo_dir, const char *commit, const char *path,
		     const char *etag)
{
	char *link = NULL, *tmp = NULL, *target = NULL;
	size_t depth = 0;
	int rc = 0;

	for (const char *s = path; *s; s++)
		depth += *s == '/';
	/* snapshots/<commit>/a/b -> ../../../blobs/<etag>: two levels plus one per '/' */
	size_t tl = 3 * (depth + 2) + strlen("blobs/") + strlen(etag) + 1;
	if (!(target = malloc(tl)) || asprintf(&link, "%s/snapshots/%s/%s", repo_dir, commit, path) < 0 ||
	    asprintf(&tmp, "%s.%ld.tmp", link, (long)getpid()) < 0) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	target[0] = '\0';
	for (size_t i = 0; i < depth + 2; i++)
		strcat(target, "../");
	strcat(target, "blobs/");
	strcat(target, etag);
	if ((rc = make_parent(link)))
		goto out;
	unlink(tmp);
	if (symlink(target, tmp) || rename(tmp, link)) {
		rc = atlas_error(ATLAS_EIO, "cannot link '%s' to '%s': %s", link, target,
				 strerror(errno));
		unlink(tmp);
	}
out:
	free(target);
	free(link);
	free(tmp);
	return rc;
}

int atlas_file_write_atomic(const char *path, const void *data, size_t len)
{
	char *tmp = NULL;
	int rc = 0, fd;

	if (asprintf(&tmp, "%s.%ld.tmp", path, (long)getpid()) < 0)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if ((rc = make_parent(path)))
		goto out;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = atlas_error(ATLAS_EIO, "cannot create '%s': %s", tmp, strerror(errno));
		goto out;
	}
	ssize_t w = write(fd, data, len);
	if (w != (ssize_t)len || fsync(fd)) {
		int e = w < 0 ? errno : ENOSPC;
		close(fd);
		unlink(tmp);
		rc = atlas_error(ATLAS_EIO, "%scannot write '%s': %s", e == ENOSPC ? "disk full: " : "",
				 path, strerror(e));
		goto out;
	}
	close(fd);
	if (rename(tmp, path)) {
		rc = atlas_error(ATLAS_EIO, "cannot rename '%s' to '%s': %s", tmp, path,
				 strerror(errno));
		unlink(tmp);
	}
out:
	free(tmp);
	return rc;
}

int atlas_cache_write_ref(const char *repo_dir, const char *ref, const char *commit)
{
	char *p = NULL;
	int rc;
	if (!*ref || ref[0] == '/' || strstr(ref, ".."))
		return atlas_error(ATLAS_EINVAL, "invalid ref name '%s'", ref);
	if (asprintf(&p, "%s/refs/%s", repo_dir, ref) < 0)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	rc = atlas_file_write_atomic(p, commit, strlen(commit));
	free(p);
	return rc;
}

int atlas_file_move(const char *from, const char *to)
{
	int rc = make_parent(to);
	if (rc)
		return rc;
	if (rename(from, to))
		return atlas_error(ATLAS_EIO, "cannot rename '%s' to '%s': %s", from, to,
				   strerror(errno));
	return 0;
}
