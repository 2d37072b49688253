/* convert.c - rewrite a checkpoint in another float dtype, sharded as
 * transformers' save_pretrained shards (see convert.h). */
#include "convert.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"
#include "cache_write.h"
#include "file.h"
#include "json_util.h"
#include "safetensors.h"

static bool is_float(enum atlas_dtype d)
{
	return d == ATLAS_DTYPE_F32 || d == ATLAS_DTYPE_F16 || d == ATLAS_DTYPE_BF16;
}

static float load_one(const void *p, enum atlas_dtype d, int64_t i)
{
	switch (d) {
	case ATLAS_DTYPE_F32: {
		float f;
		memcpy(&f, (const char *)p + 4 * i, 4);
		return f;
	}
	case ATLAS_DTYPE_F16: {
		uint16_t h;
		memcpy(&h, (const char *)p + 2 * i, 2);
		return atlas_f16_to_f32(h);
	}
	default: {
		uint16_t h;
		memcpy(&h, (const char *)p + 2 * i, 2);
		return atlas_bf16_to_f32(h);
	}
	}
}

/* Convert n elements of `src` (dtype s) into `dst` (dtype d). */
static void convert(void *dst, enum atlas_dtype d, const void *src, enum atlas_dtype s, int64_t n)
{
	if (d == s) {
		memcpy(dst, src, (size_t)n * atlas_dtype_size(d));
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		float f = load_one(src, s, i);
		if (d == ATLAS_DTYPE_F32) {
			memcpy((char *)dst + 4 * i, &f, 4);
		} else {
			uint16_t h = d == ATLAS_DTYPE_F16 ? atlas_f32_to_f16(f) : atlas_f32_to_bf16(f);
			memcpy((char *)dst + 2 * i, &h, 2);
		}
	}
}

/* A tensor's place in the output. */
struct out_tensor {
	const struct atlas_tensor_info *t; /* source */
	enum atlas_dtype dtype;            /* output dtype */
	size_t nbytes;                     /* output bytes */
	int shard;                         /* 0-based shard */
};

static int write_all(int fd, const void *p, size_t n, const char *path)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return atlas_error(ATLAS_EIO, "%scannot write '%s': %s",
					   errno == ENOSPC ? "disk full: " : "", path, strerror(errno));
		c += w, n -= (size_t)w;
	}
	return 0;
}

/* Write shard `s` (tensors ts[lo..hi)) to `path`. */
static int write_shard(const char *path, struct out_tensor *ts, int64_t lo, int64_t hi)
{
	struct json_object *hdr = json_object_new_object(), *meta = json_object_new_object();
	char *tmp = NULL;
	int rc = 0, fd = -1;
	uint64_t off = 0;

	json_object_object_add(meta, "format", json_object_new_string("pt"));
	json_object_object_add(hdr, "__metadata__", meta);
	for (int64_t i = lo; i < hi; i++) {
		struct json_object *e = json_object_new_object(), *shape = json_object_new_array();
		struct json_object *offs = json_object_new_array();
		json_object_object_add(e, "dtype", json_object_new_string(atlas_dtype_name(ts[i].dtype)));
		for (int d = 0; d < ts[i].t->ndim; d++)
			json_object_array_add(shape, json_object_new_int64(ts[i].t->shape[d]));
		json_object_object_add(e, "shape", shape);
		json_object_array_add(offs, json_object_new_int64((int64_t)off));
		off += ts[i].nbytes;
		json_object_array_add(offs, json_object_new_int64((int64_t)off));
		json_object_object_add(e, "data_offsets", offs);
		json_object_object_add(hdr, ts[i].t->name, e);
	}
	const char *js = json_object_to_json_string_ext(hdr, JSON_C_TO_STRING_PLAIN);
	size_t jl = strlen(js), padded = (jl + 7) & ~(size_t)7;
	uint64_t hl = padded;
	unsigned char le[8];
	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)(hl >> (8 * i));
	if (asprintf(&tmp, "%s.tmp", path) < 0) {
		tmp = NULL;
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = atlas_error(ATLAS_EIO, "cannot create '%s': %s", tmp, strerror(errno));
		goto out;
	}
	if ((rc = write_all(fd, le, 8, tmp)) || (rc = write_all(fd, js, jl, tmp)) ||
	    (rc = write_all(fd, "        ", padded - jl, tmp)))
		goto out;
	for (int64_t i = lo; i < hi && !rc; i++) {
		void *buf = malloc(ts[i].nbytes ? ts[i].nbytes : 1);
		if (!buf) {
			rc = atlas_error(ATLAS_ENOMEM, "out of memory converting '%s'", ts[i].t->name);
			break;
		}
		convert(buf, ts[i].dtype, ts[i].t->data, ts[i].t->dtype, ts[i].t->numel);
		rc = write_all(fd, buf, ts[i].nbytes, tmp);
		free(buf);
	}
	if (!rc && fsync(fd))
		rc = atlas_error(ATLAS_EIO, "cannot write '%s': %s", tmp, strerror(errno));
	close(fd);
	fd = -1;
	if (!rc)
		rc = atlas_file_move(tmp, path);
out:
	if (fd >= 0)
		close(fd);
	if (rc && tmp)
		unlink(tmp);
	free(tmp);
	json_object_put(hdr);
	return rc;
}

/* config.json with "torch_dtype" (and "dtype" when present) set. */
static int write_config(const char *src, const char *out, enum atlas_dtype dt)
{
	char *in = atlas_path_join(src, "config.json"), *text = NULL, *dst = NULL;
	const char *name = dt == ATLAS_DTYPE_F32 ? "float32" : dt == ATLAS_DTYPE_F16 ? "float16"
										     : "bfloat16";
	size_t len;
	int rc;
	struct json_object *o = NULL;

	if (!in || !(dst = atlas_path_join(out, "config.json"))) {
		rc = ATLAS_ENOMEM;
		goto done;
	}
	if ((rc = atlas_file_read(in, &text, &len)))
		goto done;
	if (!(o = atlas_json_parse_object(text, len, in))) {
		rc = ATLAS_EFORMAT;
		goto done;
	}
	if (json_object_object_get_ex(o, "dtype", NULL))
		json_object_object_add(o, "dtype", json_object_new_string(name));
	if (json_object_object_get_ex(o, "torch_dtype", NULL) ||
	    !json_object_object_get_ex(o, "dtype", NULL))
		json_object_object_add(o, "torch_dtype", json_object_new_string(name));
	const char *js = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
							       JSON_C_TO_STRING_NOSLASHESCAPE);
	char *withnl = NULL;
	if (asprintf(&withnl, "%s\n", js) < 0) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto done;
	}
	rc = atlas_file_write_atomic(dst, withnl, strlen(withnl));
	free(withnl);
done:
	json_object_put(o);
	free(in);
	free(dst);
	free(text);
	return rc;
}

/* Non-weight files a model directory needs: tokenizer, generation,
 * chat template, vocabularies. */
static bool copy_wanted(const char *n)
{
	static const char *const keep[] = {"tokenizer.json", "tokenizer_config.json",
		"generation_config.json", "special_tokens_map.json", "chat_template.jinja",
		"chat_template.json", "tokenizer.model", "vocab.json", "merges.txt",
		"added_tokens.json", "preprocessor_config.json", NULL};
	for (int i = 0; keep[i]; i++)
		if (!strcmp(n, keep[i]))
			return true;
	return false;
}

static int copy_small_files(const char *src, const char *out)
{
	DIR *d = opendir(src);
	struct dirent *e;
	int rc = 0;

	if (!d)
		return atlas_error(ATLAS_EIO, "cannot read directory '%s': %s", src, strerror(errno));
	while (!rc && (e = readdir(d))) {
		if (!copy_wanted(e->d_name))
			continue;
		char *from = atlas_path_join(src, e->d_name), *to = atlas_path_join(out, e->d_name);
		char *text = NULL;
		size_t len;
		if (!from || !to)
			rc = ATLAS_ENOMEM;
		else if (!(rc = atlas_file_read(from, &text, &len)))
			rc = atlas_file_write_atomic(to, text, len);
		free(text);
		free(from);
		free(to);
	}
	closedir(d);
	return rc;
}

/* `out` must not exist or be an empty directory. */
static int check_out_dir(const char *out)
{
	DIR *d = opendir(out);
	struct dirent *e;
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return atlas_error(ATLAS_EIO, "cannot use '%s' as the output: %s", out, strerror(errno));
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			closedir(d);
			return atlas_error(ATLAS_EINVAL, "output directory '%s' is not empty", out);
		}
	closedir(d);
	return 0;
}

/* Make the directory the files are written into: "OUT.partial-XXXXXX"
 * beside `out` (`out` without trailing slashes; its parents are created),
 * so that the last step renames a complete directory into place and an
 * interrupted convert never leaves something that looks finished at
 * `out`. *work gets the malloc'd path; 0 or a negative code. */
static int make_work_dir(const char *out, char **work)
{
	char *tmpl = NULL, *parent = strdup(out), *slash;
	int rc = 0;

	*work = NULL;
	if (!parent)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if ((slash = strrchr(parent, '/')) && slash != parent) {
		*slash = '\0';
		rc = atlas_mkdirs(parent);
	}
	free(parent);
	if (rc)
		return rc;
	if (asprintf(&tmpl, "%s.partial-XXXXXX", out) < 0)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if (!mkdtemp(tmpl) || chmod(tmpl, 0755)) {
		rc = atlas_error(ATLAS_EIO, "cannot create directory '%s': %s", tmpl, strerror(errno));
		rmdir(tmpl);
		free(tmpl);
		return rc;
	}
	*work = tmpl;
	return 0;
}

/* Remove the work directory and the files in it (it has no subdirectories). */
static void remove_work_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char *p;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if ((p = atlas_path_join(dir, e->d_name)))
			unlink(p);
		free(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* Rename the finished work directory to `out` (replacing it if it is an
 * empty directory) and sync the parent so the rename survives a crash. */
static int publish_dir(const char *work, const char *out)
{
	char *parent, *slash;
	int fd;

	if (rename(work, out))
		return atlas_error(ATLAS_EIO, "cannot rename '%s' to '%s': %s", work, out,
				   strerror(errno));
	if (!(parent = strdup(out)))
		return 0; /* renamed; only the sync is skipped */
	slash = strrchr(parent, '/');
	if (slash)
		slash[slash == parent] = '\0'; /* "/x" keeps "/" */
	fd = open(slash ? parent : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(parent);
	return 0;
}

static int write_index(const char *out, struct out_tensor *ts, int64_t n, int shards,
		       int64_t total)
{
	struct json_object *o = json_object_new_object(), *meta = json_object_new_object();
	struct json_object *map = json_object_new_object();
	char name[64], *path = atlas_path_join(out, "model.safetensors.index.json"), *text = NULL;
	int rc;

	json_object_object_add(meta, "total_size", json_object_new_int64(total));
	json_object_object_add(o, "metadata", meta);
	for (int64_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", ts[i].shard + 1, shards);
		json_object_object_add(map, ts[i].t->name, json_object_new_string(name));
	}
	json_object_object_add(o, "weight_map", map);
	if (!path || asprintf(&text, "%s\n", json_object_to_json_string_ext(
						     o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED)) < 0) {
		text = NULL;
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
	} else {
		rc = atlas_file_write_atomic(path, text, strlen(text));
	}
	free(text);
	free(path);
	json_object_put(o);
	return rc;
}

int atlas_convert(const char *src, const char *out, enum atlas_dtype dt,
		  int64_t max_shard_bytes, int *n_shards)
{
	struct atlas_st *st;
	struct out_tensor *ts = NULL;
	char *dst = NULL, *work = NULL;
	int rc, shards = 0;
	int64_t total = 0, in_shard = 0;
	char name[64];

	if (!is_float(dt))
		return atlas_error(ATLAS_EUNSUPPORTED, "cannot convert to %s (supported: F32, F16, BF16)",
				   atlas_dtype_name(dt));
	if (!(st = atlas_st_open(src)))
		return ATLAS_EFORMAT;
	if (!(dst = strdup(out))) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t l = strlen(dst); l > 1 && dst[l - 1] == '/'; l--)
		dst[l - 1] = '\0';
	if ((rc = check_out_dir(dst)))
		goto out;
	if ((rc = make_work_dir(dst, &work)))
		goto out;
	int64_t n = atlas_st_count(st);
	if (!(ts = calloc((size_t)n + 1, sizeof(*ts)))) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		ts[i].t = atlas_st_get(st, i);
		ts[i].dtype = is_float(ts[i].t->dtype) ? dt : ts[i].t->dtype;
		ts[i].nbytes = (size_t)ts[i].t->numel * atlas_dtype_size(ts[i].dtype);
		if (i == 0 || (in_shard > 0 && in_shard + (int64_t)ts[i].nbytes > max_shard_bytes)) {
			shards++;
			in_shard = 0;
		}
		ts[i].shard = shards - 1;
		in_shard += (int64_t)ts[i].nbytes;
		total += (int64_t)ts[i].nbytes;
	}
	if (!shards)
		shards = 1;
	for (int s = 0, lo = 0; s < shards && !rc; s++) {
		int64_t hi = lo;
		while (hi < n && ts[hi].shard == s)
			hi++;
		if (shards == 1)
			snprintf(name, sizeof(name), "model.safetensors");
		else
			snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, shards);
		char *path = atlas_path_join(work, name);
		rc = path ? write_shard(path, ts, lo, hi) : ATLAS_ENOMEM;
		free(path);
		lo = (int)hi;
	}
	if (!rc && shards > 1)
		rc = write_index(work, ts, n, shards, total);
	if (!rc)
		rc = write_config(src, work, dt);
	if (!rc)
		rc = copy_small_files(src, work);
	if (!rc)
		rc = publish_dir(work, dst);
	if (!rc && n_shards)
		*n_shards = shards;
out:
	if (rc && work)
		remove_work_dir(work);
	free(work);
	free(dst);
	free(ts);
	atlas_st_close(st);
	return rc;
}
