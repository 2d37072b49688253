/* cache_write.h - write into the Hugging Face cache layout atomically.
 *
 *   CACHE/models--ORG--NAME/blobs/<etag>            file contents
 *   CACHE/models--ORG--NAME/snapshots/<commit>/<path> -> ../../blobs/<etag>
 *   CACHE/models--ORG--NAME/refs/<branch or tag>    the commit sha
 *
 * Every final name appears by rename(2), so a reader (atlas-run,
 * transformers) sees either nothing or a complete file; partial
 * downloads live in blobs/<etag>.incomplete, as huggingface_hub names
 * them, so either tool can resume the other's download. */
#ifndef ATLAS_IO_CACHE_WRITE_H
#define ATLAS_IO_CACHE_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CACHE/models--ORG--NAME for `repo` "org/name"; malloc'd or NULL. */
char *atlas_cache_repo_dir(const char *cache, const char *repo);

/* mkdir -p; 0 or ATLAS_EIO naming the directory. */
int atlas_mkdirs(const char *path);

/* REPO_DIR/blobs/<etag><suffix>; malloc'd or NULL. */
char *atlas_cache_blob_path(const char *repo_dir, const char *etag, const char *suffix);

/* True when the blob exists as a regular file of `size` bytes (size < 0:
 * any size). */
bool atlas_cache_blob_ready(const char *repo_dir, const char *etag, int64_t size);

/* Point snapshots/<commit>/<path> at blobs/<etag> with a relative link,
 * replacing what was there. 0 or ATLAS_EIO. */
int atlas_cache_link(const char *repo_dir, const char *commit, const char *path,
		     const char *etag);

/* Write refs/<ref> = commit (ref may contain '/', as refs/pr/1). */
int atlas_cache_write_ref(const char *repo_dir, const char *ref, const char *commit);

/* Write `len` bytes to `path` through a temporary file and rename. */
int atlas_file_write_atomic(const char *path, const void *data, size_t len);

/* Move `from` to `to` (rename, creating to's directory). */
int atlas_file_move(const char *from, const char *to);

#endif
