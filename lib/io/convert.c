/* convert.c - rewrite a checkpoint in another float dtype (optionally with
 * its linear weights quantized, quant_write.c), sharded as
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
#include "quant.h"
#include "quant_write.h"
#include "safetensors.h"

static bool is_float(enum atlas_dtype d)
{
	return d == ATLAS_DTYPE_F32 || d == ATLAS_DTYPE_F16 || d == ATLAS_DTYPE_BF16;
}

/* A tensor's place in the output. */
struct out_tensor {
	const struct atlas_tensor_info *t; /* source */
	char *name;                        /* output name (owned) */
	enum atlas_dtype dtype;            /* output dtype */
	int ndim;                          /* output dimensions */
	int64_t shape[ATLAS_MAX_DIMS];     /* output shape */
	int part;                          /* -1: t converted to dtype; k >= 0: part k of t quantized */
	size_t nbytes;                     /* output bytes */
	int shard;                         /* 0-based shard */
};

/* --- quantization (--quant): one source weight becomes 2-3 tensors ---- */

#define QW_PARTS 3
#define W4_GROUP 128
#define FP8_BLOCK 128

/* The parts of a weight quantized in `scheme`: suffix after the module
 * prefix, dtype, shape. Returns the count (0: the shape does not fit). */
static int quant_parts(enum atlas_quant_scheme scheme, int64_t out, int64_t in,
		       const char **sfx, enum atlas_dtype *dts, int64_t shapes[][2])
{
	switch (scheme) {
	case ATLAS_QSCHEME_FP8_BLOCK:
		sfx[0] = "weight", dts[0] = ATLAS_DTYPE_F8_E4M3;
		shapes[0][0] = out, shapes[0][1] = in;
		sfx[1] = "weight_scale_inv", dts[1] = ATLAS_DTYPE_BF16;
		shapes[1][0] = (out + FP8_BLOCK - 1) / FP8_BLOCK;
		shapes[1][1] = (in + FP8_BLOCK - 1) / FP8_BLOCK;
		return 2;
	case ATLAS_QSCHEME_FP8_CHANNEL:
		sfx[0] = "weight", dts[0] = ATLAS_DTYPE_F8_E4M3;
		shapes[0][0] = out, shapes[0][1] = in;
		sfx[1] = "weight_scale", dts[1] = ATLAS_DTYPE_BF16;
		shapes[1][0] = out, shapes[1][1] = 1;
		return 2;
	case ATLAS_QSCHEME_W4A16:
		if (in % W4_GROUP)
			return 0;
		sfx[0] = "weight_packed", dts[0] = ATLAS_DTYPE_I32;
		shapes[0][0] = out, shapes[0][1] = in / 8;
		sfx[1] = "weight_scale", dts[1] = ATLAS_DTYPE_BF16;
		shapes[1][0] = out, shapes[1][1] = in / W4_GROUP;
		sfx[2] = "weight_shape", dts[2] = ATLAS_DTYPE_I64;
		shapes[2][0] = 2, shapes[2][1] = 0;
		return 3;
	case ATLAS_QSCHEME_NVFP4:
		if (in % 16)
			return 0;
		sfx[0] = "weight_packed", dts[0] = ATLAS_DTYPE_U8;
		shapes[0][0] = out, shapes[0][1] = in / 2;
		sfx[1] = "weight_scale", dts[1] = ATLAS_DTYPE_F8_E4M3;
		shapes[1][0] = out, shapes[1][1] = in / 16;
		sfx[2] = "weight_global_scale", dts[2] = ATLAS_DTYPE_F32;
		shapes[2][0] = 1, shapes[2][1] = 0;
		return 3;
	default:
		return 0;
	}
}

/* A linear weight of a decoder layer: "...layers.N.<...>_proj.weight"
 * (attention, MLP, MoE experts, shared experts) or Mixtral's experts
 * w1/w2/w3, 2-D and float. Routers (mlp.gate), norms, embeddings and
 * lm_head are not. */
static bool is_layer_matrix(const struct atlas_tensor_info *t)
{
	size_t l = strlen(t->name);
	return t->ndim == 2 && is_float(t->dtype) && l > 7 &&
	       !strcmp(t->name + l - 7, ".weight") &&
	       (!strncmp(t->name, "layers.", 7) || strstr(t->name, ".layers."));
}

static bool is_linear(const struct atlas_tensor_info *t)
{
	if (!is_layer_matrix(t))
		return false;
	size_t l = strlen(t->name) - 7; /* the module, without ".weight" */
	const char *m = t->name;
	return (l > 5 && !strncmp(m + l - 5, "_proj", 5)) ||
	       (l > 3 && (!strncmp(m + l - 3, ".w1", 3) || !strncmp(m + l - 3, ".w2", 3) ||
			  !strncmp(m + l - 3, ".w3", 3)));
}

/* The quantized parts of the last weight written: the parts of one
 * weight are consecutive in the output, whatever shard they land in. */
struct qcache {
	enum atlas_quant_scheme scheme;
	const struct atlas_tensor_info *t; /* whose parts these are, or NULL */
	void *part[QW_PARTS];              /* bytes of each part */
};

static void qcache_clear(struct qcache *c)
{
	for (int k = 0; k < QW_PARTS; k++) {
		free(c->part[k]);
		c->part[k] = NULL;
	}
	c->t = NULL;
}

/* Quantize t into c's parts (sized as quant_parts says). */
static int qcache_fill(struct qcache *c, const struct atlas_tensor_info *t)
{
	const char *sfx[QW_PARTS];
	enum atlas_dtype dts[QW_PARTS];
	int64_t shapes[QW_PARTS][2], out = t->shape[0], in = t->shape[1];
	int n = quant_parts(c->scheme, out, in, sfx, dts, shapes), rc = 0;
	float *w = malloc((size_t)(out * in) * sizeof(float));

	qcache_clear(c);
	for (int k = 0; k < n; k++) {
		int64_t numel = shapes[k][0] * (shapes[k][1] ? shapes[k][1] : 1);
		c->part[k] = malloc((size_t)numel * atlas_dtype_size(dts[k]));
		if (!c->part[k])
			rc = 1;
	}
	if (!w || rc) {
		free(w);
		qcache_clear(c);
		return atlas_error(ATLAS_ENOMEM, "out of memory quantizing '%s'", t->name);
	}
	atlas_dtype_convert(w, ATLAS_DTYPE_F32, t->data, t->dtype, out * in);
	switch (c->scheme) {
	case ATLAS_QSCHEME_FP8_BLOCK:
		atlas_quant_write_fp8(w, out, in, FP8_BLOCK, FP8_BLOCK, c->part[0], c->part[1]);
		break;
	case ATLAS_QSCHEME_FP8_CHANNEL:
		atlas_quant_write_fp8(w, out, in, 1, in, c->part[0], c->part[1]);
		break;
	case ATLAS_QSCHEME_W4A16: {
		int64_t dims[2] = {out, in};
		rc = atlas_quant_write_int4(w, out, in, W4_GROUP, c->part[0], c->part[1]);
		memcpy(c->part[2], dims, sizeof(dims));
		break;
	}
	case ATLAS_QSCHEME_NVFP4:
		rc = atlas_quant_write_nvfp4(w, out, in, c->part[0], c->part[1], c->part[2]);
		break;
	default:
		rc = atlas_error(ATLAS_EINVAL, "no quantization");
	}
	free(w);
	if (rc)
		qcache_clear(c);
	else
		c->t = t;
	return rc;
}

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
static atlas_convert_progress_fn progress_fn;
static void *progress_arg;
static int64_t progress_done, progress_total;

void atlas_convert_set_progress(atlas_convert_progress_fn fn, void *arg)
{
	progress_fn = fn;
	progress_arg = arg;
}

static void progress(int64_t bytes)
{
	progress_done += bytes;
	if (progress_fn)
		progress_fn(progress_arg, progress_done, progress_total);
}

static int write_shard(const char *path, struct out_tensor *ts, int64_t lo, int64_t hi,
		       struct qcache *qc)
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
		for (int d = 0; d < ts[i].ndim; d++)
			json_object_array_add(shape, json_object_new_int64(ts[i].shape[d]));
		json_object_object_add(e, "shape", shape);
		json_object_array_add(offs, json_object_new_int64((int64_t)off));
		off += ts[i].nbytes;
		json_object_array_add(offs, json_object_new_int64((int64_t)off));
		json_object_object_add(e, "data_offsets", offs);
		json_object_object_add(hdr, ts[i].name, e);
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
		if (ts[i].part >= 0) {
			if (qc->t != ts[i].t && (rc = qcache_fill(qc, ts[i].t)))
				break;
			rc = write_all(fd, qc->part[ts[i].part], ts[i].nbytes, tmp);
			progress((int64_t)ts[i].nbytes);
			continue;
		}
		void *buf = malloc(ts[i].nbytes ? ts[i].nbytes : 1);
		if (!buf) {
			rc = atlas_error(ATLAS_ENOMEM, "out of memory converting '%s'", ts[i].t->name);
			break;
		}
		atlas_dtype_convert(buf, ts[i].dtype, ts[i].t->data, ts[i].t->dtype, ts[i].t->numel);
		rc = write_all(fd, buf, ts[i].nbytes, tmp);
		free(buf);
		progress((int64_t)ts[i].nbytes);
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

/* config.json with "torch_dtype" (and "dtype" when present) set, and
 * quantization_config set to qcfg when not NULL (consumed). */
static int write_config(const char *src, const char *out, enum atlas_dtype dt,
			struct json_object *qcfg)
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
	if (qcfg) {
		json_object_object_add(o, "quantization_config", qcfg);
		qcfg = NULL;
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
	json_object_put(qcfg);
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
		json_object_object_add(map, ts[i].name, json_object_new_string(name));
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

/* The quantization_config block for `scheme` (field names as the Hub
 * checkpoints spell them), with `ignore` (consumed) as the modules left
 * unquantized. */
static struct json_object *quant_config(enum atlas_quant_scheme scheme, struct json_object *ignore)
{
	struct json_object *o = json_object_new_object();
	if (scheme == ATLAS_QSCHEME_FP8_BLOCK) {
		struct json_object *b = json_object_new_array();
		json_object_array_add(b, json_object_new_int(FP8_BLOCK));
		json_object_array_add(b, json_object_new_int(FP8_BLOCK));
		json_object_object_add(o, "quant_method", json_object_new_string("fp8"));
		json_object_object_add(o, "fmt", json_object_new_string("e4m3"));
		json_object_object_add(o, "activation_scheme", json_object_new_string("dynamic"));
		json_object_object_add(o, "weight_block_size", b);
		json_object_object_add(o, "modules_to_not_convert", ignore);
		return o;
	}
	struct json_object *w = json_object_new_object(), *g = json_object_new_object();
	struct json_object *groups = json_object_new_object(), *targets = json_object_new_array();
	const char *format = scheme == ATLAS_QSCHEME_FP8_CHANNEL ? "float-quantized"
			     : scheme == ATLAS_QSCHEME_W4A16     ? "pack-quantized"
								 : "nvfp4-pack-quantized";
	json_object_object_add(w, "num_bits",
			       json_object_new_int(scheme == ATLAS_QSCHEME_FP8_CHANNEL ? 8 : 4));
	json_object_object_add(w, "type", json_object_new_string(scheme == ATLAS_QSCHEME_W4A16
									 ? "int"
									 : "float"));
	json_object_object_add(w, "strategy",
			       json_object_new_string(scheme == ATLAS_QSCHEME_FP8_CHANNEL ? "channel"
						      : scheme == ATLAS_QSCHEME_W4A16 ? "group"
										  : "tensor_group"));
	if (scheme == ATLAS_QSCHEME_W4A16 || scheme == ATLAS_QSCHEME_NVFP4)
		json_object_object_add(w, "group_size", json_object_new_int(
								scheme == ATLAS_QSCHEME_W4A16 ? W4_GROUP : 16));
	json_object_object_add(w, "symmetric", json_object_new_boolean(1));
	json_object_object_add(w, "dynamic", json_object_new_boolean(0));
	json_object_array_add(targets, json_object_new_string("Linear"));
	json_object_object_add(g, "targets", targets);
	json_object_object_add(g, "weights", w);
	json_object_object_add(g, "input_activations", NULL);
	json_object_object_add(groups, "group_0", g);
	json_object_object_add(o, "quant_method", json_object_new_string("compressed-tensors"));
	json_object_object_add(o, "format", json_object_new_string(format));
	json_object_object_add(o, "quantization_status", json_object_new_string("compressed"));
	json_object_object_add(o, "config_groups", groups);
	json_object_object_add(o, "ignore", ignore);
	return o;
}

/* Refuse a source that is already quantized (or whose quantization
 * cannot even be read): --quant would quantize twice, and a plain dtype
 * conversion would round its float scales (an F32 global scale to BF16)
 * and leave the rest as it was. */
static int check_not_quantized(const char *src, bool quant)
{
	struct atlas_quant q;
	int rc = atlas_quant_load(src, &q);
	if (!rc && q.method != ATLAS_QUANT_NONE)
		rc = atlas_error(ATLAS_EUNSUPPORTED,
				 quant ? "'%s' is already quantized (%s); --quant needs a BF16, F16 or "
					 "F32 checkpoint"
				       : "'%s' is quantized (%s); convert --dtype rewrites BF16, F16 or "
					 "F32 checkpoints (Atlas loads this one as it is)",
				 src, q.name);
	atlas_quant_free(&q);
	return rc;
}

/* Append `ignore` a module name (the tensor name without ".weight"). */
static int add_ignore(struct json_object *ignore, const char *weight_name)
{
	if (json_object_array_length(ignore) >= ATLAS_QUANT_MAX_IGNORE)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "more than %d modules would stay unquantized (at '%s')",
				   ATLAS_QUANT_MAX_IGNORE, weight_name);
	json_object_array_add(ignore, json_object_new_string_len(weight_name,
								 (int)strlen(weight_name) - 7));
	return 0;
}

/* Fill ts (room for n * QW_PARTS) from st: each tensor converted, or a
 * linear weight quantized into its parts. *n_out gets the count; the
 * modules left unquantized are appended to `ignore`. */
static int plan_tensors(struct atlas_st *st, enum atlas_dtype dt, enum atlas_quant_scheme scheme,
			struct out_tensor *ts, int64_t *n_out, struct json_object *ignore)
{
	int64_t n = atlas_st_count(st), k = 0;
	for (int64_t i = 0; i < n; i++) {
		const struct atlas_tensor_info *t = atlas_st_get(st, i);
		const char *sfx[QW_PARTS];
		enum atlas_dtype dts[QW_PARTS];
		int64_t shapes[QW_PARTS][2];
		int np = 0, rc;
		if (scheme && is_linear(t))
			np = quant_parts(scheme, t->shape[0], t->shape[1], sfx, dts, shapes);
		if (scheme && !np && is_layer_matrix(t) && (rc = add_ignore(ignore, t->name)))
			return rc;
		if (!np) {
			ts[k].t = t;
			ts[k].part = -1;
			ts[k].dtype = is_float(t->dtype) ? dt : t->dtype;
			ts[k].ndim = t->ndim;
			memcpy(ts[k].shape, t->shape, sizeof(t->shape));
			ts[k].nbytes = (size_t)t->numel * atlas_dtype_size(ts[k].dtype);
			if (!(ts[k].name = strdup(t->name)))
				return atlas_error(ATLAS_ENOMEM, "out of memory");
			k++;
			continue;
		}
		size_t pl = strlen(t->name) - 7; /* the module prefix */
		for (int p = 0; p < np; p++, k++) {
			ts[k].t = t;
			ts[k].part = p;
			ts[k].dtype = dts[p];
			ts[k].ndim = shapes[p][1] ? 2 : 1;
			ts[k].shape[0] = shapes[p][0];
			ts[k].shape[1] = shapes[p][1];
			ts[k].nbytes = (size_t)(shapes[p][0] * (shapes[p][1] ? shapes[p][1] : 1)) *
				       atlas_dtype_size(dts[p]);
			if (asprintf(&ts[k].name, "%.*s.%s", (int)pl, t->name, sfx[p]) < 0) {
				ts[k].name = NULL;
				return atlas_error(ATLAS_ENOMEM, "out of memory");
			}
		}
	}
	*n_out = k;
	return 0;
}

int atlas_convert(const char *src, const char *out, enum atlas_dtype dt,
		  int64_t max_shard_bytes, int *n_shards)
{
	return atlas_convert_quant(src, out, dt, ATLAS_QSCHEME_NONE, max_shard_bytes, n_shards);
}

int atlas_convert_quant(const char *src, const char *out, enum atlas_dtype dt,
			enum atlas_quant_scheme scheme, int64_t max_shard_bytes, int *n_shards)
{
	struct atlas_st *st = NULL;
	struct out_tensor *ts = NULL;
	struct qcache qc = {.scheme = scheme};
	struct json_object *ignore = NULL, *qcfg = NULL;
	char *dst = NULL, *work = NULL;
	int rc, shards = 0;
	int64_t total = 0, in_shard = 0, n = 0, n_src = 0;
	char name[64];

	if (!is_float(dt))
		return atlas_error(ATLAS_EUNSUPPORTED, "cannot convert to %s (supported: F32, F16, BF16)",
				   atlas_dtype_name(dt));
	if (scheme < ATLAS_QSCHEME_NONE || scheme > ATLAS_QSCHEME_NVFP4)
		return atlas_error(ATLAS_EINVAL, "unknown quantization scheme %d", (int)scheme);
	if ((rc = check_not_quantized(src, scheme != ATLAS_QSCHEME_NONE)))
		return rc;
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
	n_src = atlas_st_count(st);
	if (!(ts = calloc((size_t)n_src * QW_PARTS + 1, sizeof(*ts)))) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	if (scheme) {
		ignore = json_object_new_array();
		json_object_array_add(ignore, json_object_new_string("lm_head"));
	}
	if ((rc = plan_tensors(st, dt, scheme, ts, &n, ignore)))
		goto out;
	for (int64_t i = 0; i < n; i++) {
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
	progress_done = 0;
	progress_total = total;
	for (int s = 0, lo = 0; s < shards && !rc; s++) {
		int64_t hi = lo;
		while (hi < n && ts[hi].shard == s)
			hi++;
		if (shards == 1)
			snprintf(name, sizeof(name), "model.safetensors");
		else
			snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, shards);
		char *path = atlas_path_join(work, name);
		rc = path ? write_shard(path, ts, lo, hi, &qc) : ATLAS_ENOMEM;
		free(path);
		lo = (int)hi;
	}
	if (!rc && shards > 1)
		rc = write_index(work, ts, n, shards, total);
	if (scheme) {
		qcfg = quant_config(scheme, ignore);
		ignore = NULL;
	}
	if (!rc) {
		rc = write_config(src, work, dt, qcfg);
		qcfg = NULL;
	}
	if (!rc)
		rc = copy_small_files(src, work);
	if (!rc)
		rc = publish_dir(work, dst);
	if (!rc && n_shards)
		*n_shards = shards;
out:
	if (rc && work)
		remove_work_dir(work);
	qcache_clear(&qc);
	json_object_put(ignore);
	json_object_put(qcfg);
	for (int64_t i = 0; ts && i < n_src * QW_PARTS; i++)
		free(ts[i].name);
	free(work);
	free(dst);
	free(ts);
	atlas_st_close(st);
	return rc;
}
