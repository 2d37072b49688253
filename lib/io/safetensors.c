/* safetensors.c - open, validate and index safetensors checkpoints (see
 * safetensors.h).
 *
 * A file is mmapped whole and its JSON header parsed with json-c. Header
 * values are untrusted input, so every entry is checked (with explicit
 * 64-bit overflow tests) before a tensor info points into the mapping.
 * A directory holds one model.safetensors or shards listed by
 * model.safetensors.index.json. Lookup by name goes through an
 * open-addressing hash table built once every file is open. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "../core/error.h"
#include "file.h"
#include "json_util.h"

/* Real headers are a few hundred bytes per tensor, a few MB at most; a
 * length past this is a corrupt field, not a big model. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

struct st_meta {
	char *key;   /* a __metadata__ key */
	char *value; /* its string value */
};

struct st_file {
	char *path;	      /* path as opened; tensor infos point at it */
	void *map;	      /* the whole file, PROT_READ + MAP_PRIVATE */
	size_t size;	      /* file size, the length of map */
	uint64_t header_len;  /* N, the JSON header length */
	const uint8_t *data;  /* start of the data region, map + 8 + N */
	uint64_t data_size;   /* bytes in the data region, size - 8 - N */
	struct st_meta *meta; /* __metadata__ pairs in header order */
	int nmeta;	      /* entries in meta */
};

struct atlas_st {
	struct st_file *files;		   /* open files, in index order */
	int nfiles;			   /* entries used in files */
	struct atlas_tensor_info *tensors; /* all tensors, file then header order */
	int64_t count;			   /* entries used in tensors */
	int64_t cap;			   /* entries allocated in tensors */
	int64_t *slots;			   /* hash table: tensor index + 1, 0 empty */
	size_t nslots;			   /* power of two, at least 2 * count */
};

static int missing(const char *where, const char *key)
{
	return atlas_error(ATLAS_EFORMAT, "%s: missing field '%s'", where, key);
}

/* "[2, 3]" for messages. */
static void format_shape(char *buf, size_t n, const struct atlas_tensor_info *t)
{
	size_t used = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < t->ndim && used < n; i++)
		used += (size_t)snprintf(buf + used, n - used, "%s%" PRId64, i ? ", " : "",
					 t->shape[i]);
	if (used < n)
		snprintf(buf + used, n - used, "]");
}

/* Fill ndim/shape/numel/nbytes from the JSON "shape" array. */
static int parse_shape(const char *where, struct json_object *arr, struct atlas_tensor_info *t)
{
	size_t nd = json_object_array_length(arr);
	bool has_zero = false;
	int64_t numel = 1;
	uint64_t nbytes;

	if (nd > ATLAS_MAX_DIMS)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: shape has %zu dimensions, at most %d are supported", where,
				   nd, ATLAS_MAX_DIMS);
	t->ndim = (int)nd;
	for (size_t i = 0; i < nd; i++) {
		struct json_object *e = json_object_array_get_idx(arr, i);
		if (!e || !json_object_is_type(e, json_type_int))
			return atlas_error(ATLAS_EFORMAT, "%s: shape[%zu] must be an integer",
					   where, i);
		t->shape[i] = json_object_get_int64(e);
		if (t->shape[i] < 0)
			return atlas_error(ATLAS_EFORMAT,
					   "%s: shape[%zu] is negative (%" PRId64 ")", where, i,
					   t->shape[i]);
		has_zero |= t->shape[i] == 0;
	}
	/* An empty tensor is fine whatever its other dims; only a product
	 * that is really large can overflow. */
	for (size_t i = 0; i < nd && !has_zero; i++)
		if (__builtin_mul_overflow(numel, t->shape[i], &numel))
			return atlas_error(ATLAS_EFORMAT,
					   "%s: shape overflows a 64-bit element count", where);
	if (has_zero)
		numel = 0;
	if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)atlas_dtype_size(t->dtype),
				   &nbytes) ||
	    nbytes > (uint64_t)INT64_MAX || nbytes > SIZE_MAX)
		return atlas_error(ATLAS_EFORMAT, "%s: byte size of the shape overflows", where);
	t->numel = numel;
	t->nbytes = (size_t)nbytes;
	return 0;
}

/* Validate one header entry and fill *t (name strdup'd last, so a failed
 * entry owns nothing). */
static int parse_entry(const struct st_file *f, const char *name, struct json_object *v,
		       struct atlas_tensor_info *t)
{
	char where[768], shp[256];
	struct json_object *arr;
	const char *ds;
	int64_t off[2];
	int rc;

	memset(t, 0, sizeof(*t));
	snprintf(where, sizeof(where), "tensor '%s' in '%s'", name, f->path);
	if (!json_object_is_type(v, json_type_object))
		return atlas_error(ATLAS_EFORMAT, "%s: entry must be an object", where);

	rc = atlas_json_string(v, "dtype", where, &ds);
	if (rc <= 0)
		return rc < 0 ? rc : missing(where, "dtype");
	if (atlas_dtype_parse(ds, &t->dtype))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "unsupported dtype '%s' for tensor '%s' in '%s'", ds, name,
				   f->path);

	rc = atlas_json_array(v, "shape", where, &arr);
	if (rc <= 0)
		return rc < 0 ? rc : missing(where, "shape");
	rc = parse_shape(where, arr, t);
	if (rc)
		return rc;

	rc = atlas_json_array(v, "data_offsets", where, &arr);
	if (rc <= 0)
		return rc < 0 ? rc : missing(where, "data_offsets");
	if (json_object_array_length(arr) != 2)
		return atlas_error(ATLAS_EFORMAT,
				   "%s: data_offsets must be two integers [begin, end]", where);
	for (size_t i = 0; i < 2; i++) {
		struct json_object *e = json_object_array_get_idx(arr, i);
		if (!e || !json_object_is_type(e, json_type_int) ||
		    (off[i] = json_object_get_int64(e)) < 0)
			return atlas_error(ATLAS_EFORMAT,
					   "%s: data_offsets must be two non-negative integers",
					   where);
	}
	if (off[0] > off[1])
		return atlas_error(ATLAS_EFORMAT,
				   "%s: data_offsets [%" PRId64 ", %" PRId64
				   "] end before they begin",
				   where, off[0], off[1]);
	if ((uint64_t)off[1] > f->data_size)
		return atlas_error(ATLAS_EFORMAT,
				   "tensor '%s' in '%s' ends at byte %" PRIu64
				   ", past the end of the file (%zu bytes)",
				   name, f->path, 8 + f->header_len + (uint64_t)off[1], f->size);
	if ((uint64_t)(off[1] - off[0]) != (uint64_t)t->nbytes) {
		format_shape(shp, sizeof(shp), t);
		return atlas_error(
		    ATLAS_EFORMAT,
		    "%s: data_offsets span %" PRId64 " bytes but shape %s of %s needs %zu", where,
		    off[1] - off[0], shp, atlas_dtype_name(t->dtype), t->nbytes);
	}
	t->data = f->data + off[0];
	t->file = f->path;
	t->name = strdup(name);
	if (!t->name)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	return 0;
}

static int parse_metadata(struct st_file *f, struct json_object *v)
{
	if (!json_object_is_type(v, json_type_object))
		return atlas_error(ATLAS_EFORMAT, "'%s': __metadata__ must be an object", f->path);
	f->meta = calloc((size_t)json_object_object_length(v) + 1, sizeof(*f->meta));
	if (!f->meta)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	json_object_object_foreach(v, key, val)
	{
		struct st_meta *m = &f->meta[f->nmeta];
		if (!val || !json_object_is_type(val, json_type_string))
			return atlas_error(ATLAS_EFORMAT,
					   "'%s': __metadata__ value for '%s' must be a string",
					   f->path, key);
		m->key = strdup(key);
		m->value = strdup(json_object_get_string(val));
		f->nmeta++;
		if (!m->key || !m->value)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	return 0;
}

struct span {
	const uint8_t *begin; /* first byte of the tensor in the mapping */
	int64_t idx;	      /* index into the tensor array */
};

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Tensors t[0..n) of one file must not share bytes. Sorted by start,
 * any overlap shows up between neighbours. Empty tensors share nothing. */
static int check_overlap(const struct st_file *f, const struct atlas_tensor_info *t, int64_t n)
{
	struct span *s = malloc(sizeof(*s) * (size_t)(n ? n : 1));
	int64_t m = 0;
	int rc = 0;

	if (!s)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	for (int64_t i = 0; i < n; i++)
		if (t[i].nbytes)
			s[m++] = (struct span){(const uint8_t *)t[i].data, i};
	qsort(s, (size_t)m, sizeof(*s), cmp_span);
	for (int64_t i = 1; i < m; i++) {
		const struct atlas_tensor_info *a = &t[s[i - 1].idx], *b = &t[s[i].idx];
		if (s[i].begin < (const uint8_t *)a->data + a->nbytes) {
			rc = atlas_error(
			    ATLAS_EFORMAT,
			    "tensors '%s' and '%s' in '%s' overlap (data offsets %td and %td)",
			    a->name, b->name, f->path, (const uint8_t *)a->data - f->data,
			    (const uint8_t *)b->data - f->data);
			break;
		}
	}
	free(s);
	return rc;
}

/* A top-level key of a header, as written: the bytes between its quotes. */
struct raw_key {
	const char *p; /* first byte after the opening quote */
	int len;       /* bytes up to the closing quote */
};

/* The key `k` decoded as json-c decodes it; a new object or NULL. */
static struct json_object *decode_key(const struct raw_key *k)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o = NULL;
	if (tok) {
		o = json_tokener_parse_ex(tok, k->p - 1, k->len + 2);
		json_tokener_free(tok);
	}
	if (o && !json_object_is_type(o, json_type_string)) {
		json_object_put(o);
		o = NULL;
	}
	return o;
}

/* Name the first key that repeats an earlier one (only called when the
 * parsed object has fewer keys than the text). */
static int report_duplicate(const struct st_file *f, const struct raw_key *k, int n)
{
	struct json_object **d = calloc((size_t)n, sizeof(*d));
	int rc = 0;
	if (!d)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	for (int i = 0; i < n && !rc; i++) {
		if (!(d[i] = decode_key(&k[i])))
			continue;
		for (int j = 0; j < i && !rc; j++)
			if (d[j] &&
			    !strcmp(json_object_get_string(d[i]), json_object_get_string(d[j])))
				rc = atlas_error(ATLAS_EFORMAT,
						 "'%s': tensor name '%s' appears more than once in "
						 "the header",
						 f->path, json_object_get_string(d[i]));
	}
	if (!rc)
		rc = atlas_error(ATLAS_EFORMAT, "'%s': the header repeats a tensor name", f->path);
	for (int i = 0; i < n; i++)
		json_object_put(d[i]);
	free(d);
	return rc;
}

/* Check the tensor names as the header text writes them, which the
 * parsed object cannot show: json-c keeps only the last of equal keys
 * and cuts a key at a \u0000 escape. `text` (len bytes) is a header
 * json-c accepted as the object `root`, so only its lenient extras
 * (single quotes, comments) need care here besides plain JSON. A name
 * with a NUL byte or a name seen twice is ATLAS_EFORMAT naming the file. */
static int check_names(const struct st_file *f, const char *text, size_t len,
		       struct json_object *root)
{
	struct raw_key *k = NULL;
	int depth = 0, nk = 0, cap = 0, rc = 0;
	bool want_key = false;

	for (size_t i = 0; i < len && !rc; i++) {
		char c = text[i];
		if (c == '"' || c == '\'') {
			size_t b = ++i;
			bool nul = false;
			for (; i < len && text[i] != c; i++)
				if (text[i] == '\\' && i + 1 < len) {
					nul |= i + 5 < len && !memcmp(text + i + 1, "u0000", 5);
					i++;
				}
			if (depth != 1 || !want_key)
				continue;
			want_key = false;
			if (nul) {
				rc = atlas_error(ATLAS_EFORMAT,
						 "'%s': tensor name '%.*s' has a NUL byte", f->path,
						 (int)(i - b < 200 ? i - b : 200), text + b);
				break;
			}
			if (nk == cap) {
				cap = cap ? 2 * cap : 64;
				struct raw_key *nkp = realloc(k, sizeof(*k) * (size_t)cap);
				if (!nkp) {
					rc = atlas_error(ATLAS_ENOMEM, "out of memory");
					break;
				}
				k = nkp;
			}
			k[nk++] = (struct raw_key){text + b, (int)(i - b)}; /* < ST_MAX_HEADER */
		} else if (c == '/' && i + 1 < len && text[i + 1] == '*') {
			const char *e = memmem(text + i + 2, len - i - 2, "*/", 2);
			i = e ? (size_t)(e - text) + 1 : len;
		} else if (c == '/' && i + 1 < len && text[i + 1] == '/') {
			const char *e = memchr(text + i, '\n', len - i);
			i = e ? (size_t)(e - text) : len;
		} else if (c == '{' || c == '[') {
			want_key = ++depth == 1;
		} else if (c == '}' || c == ']') {
			if (--depth == 0)
				break;
		} else if (c == ',') {
			want_key = depth == 1;
		}
	}
	if (!rc && nk != json_object_object_length(root))
		rc = report_duplicate(f, k, nk);
	free(k);
	return rc;
}

/* Parse the header of the file just mapped and append its tensors. */
static int parse_header(struct atlas_st *st, struct st_file *f)
{
	const uint8_t *p = f->map;
	char where[600], *text;
	struct json_object *root;
	int64_t first = st->count, want;
	uint64_t n = 0;
	int rc = 0;

	for (int i = 7; i >= 0; i--)
		n = (n << 8) | p[i];
	if (n == 0)
		return atlas_error(ATLAS_EFORMAT, "'%s': safetensors header length is 0", f->path);
	if (n > ST_MAX_HEADER)
		return atlas_error(ATLAS_EFORMAT,
				   "'%s': safetensors header length %" PRIu64
				   " is absurdly large (limit %" PRIu64 " bytes)",
				   f->path, n, ST_MAX_HEADER);
	if (n > f->size - 8)
		return atlas_error(ATLAS_EFORMAT,
				   "'%s': safetensors header length %" PRIu64
				   " is past the end of the file (%zu bytes)",
				   f->path, n, f->size);
	f->header_len = n;
	f->data = p + 8 + n;
	f->data_size = f->size - 8 - n;

	text = malloc(n + 1); /* json-c wants a terminated string */
	if (!text)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	memcpy(text, p + 8, n);
	text[n] = '\0';
	snprintf(where, sizeof(where), "header of '%s'", f->path);
	root = atlas_json_parse_object(text, n, where);
	if (root && (rc = check_names(f, text, n, root))) {
		json_object_put(root);
		root = NULL;
	}
	free(text);
	if (!root)
		return rc ? rc : ATLAS_EFORMAT;

	want = st->count + json_object_object_length(root);
	if (want > st->cap) {
		struct atlas_tensor_info *t = realloc(st->tensors, sizeof(*t) * (size_t)want);
		if (!t) {
			json_object_put(root);
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		}
		st->tensors = t;
		st->cap = want;
	}
	json_object_object_foreach(root, key, val)
	{
		if (!strcmp(key, "__metadata__"))
			rc = parse_metadata(f, val);
		else if (!(rc = parse_entry(f, key, val, &st->tensors[st->count])))
			st->count++;
		if (rc)
			break;
	}
	if (!rc && st->count > first) /* with none, tensors may be NULL: no arithmetic on it */
		rc = check_overlap(f, st->tensors + first, st->count - first);
	json_object_put(root);
	return rc;
}

/* Map `path` and append its tensors to the set. */
static int open_file(struct atlas_st *st, const char *path)
{
	struct st_file *files, *f;
	struct stat sb;
	int fd, rc;

	files = realloc(st->files, sizeof(*files) * (size_t)(st->nfiles + 1));
	if (!files)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	st->files = files;
	f = &files[st->nfiles];
	memset(f, 0, sizeof(*f));

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return atlas_error(errno == ENOENT ? ATLAS_ENOTFOUND : ATLAS_EIO,
				   "cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		close(fd);
		return atlas_error(ATLAS_EIO, "'%s' is not a regular file", path);
	}
	if (sb.st_size < 8) {
		close(fd);
		return atlas_error(ATLAS_EFORMAT,
				   "'%s' is too short to be a safetensors file (%lld bytes)", path,
				   (long long)sb.st_size);
	}
	f->size = (size_t)sb.st_size;
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	rc = errno;
	close(fd);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		return atlas_error(ATLAS_EIO, "cannot mmap '%s': %s", path, strerror(rc));
	}
	f->path = strdup(path);
	st->nfiles++; /* from here on atlas_st_close releases it */
	if (!f->path)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	return parse_header(st, f);
}

static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	while (*s)
		h = (h ^ (uint8_t)*s++) * 1099511628211ull;
	return h;
}

/* Build the name table; a name seen twice (across shards) is an error. */
static int build_table(struct atlas_st *st)
{
	size_t n = 16;
	while (n < 2 * (size_t)st->count)
		n *= 2;
	st->slots = calloc(n, sizeof(*st->slots));
	if (!st->slots)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	st->nslots = n;
	for (int64_t i = 0; i < st->count; i++) {
		const char *name = st->tensors[i].name;
		size_t h = (size_t)hash_name(name) & (n - 1);
		for (; st->slots[h]; h = (h + 1) & (n - 1)) {
			const struct atlas_tensor_info *o = &st->tensors[st->slots[h] - 1];
			if (!strcmp(o->name, name))
				return atlas_error(ATLAS_EFORMAT,
						   "tensor '%s' appears in both '%s' and '%s'",
						   name, o->file, st->tensors[i].file);
		}
		st->slots[h] = i + 1;
	}
	return 0;
}

/* A shard name from an index must stay inside the model directory. */
static bool safe_relpath(const char *s)
{
	if (!*s || *s == '/')
		return false;
	for (const char *c = s;; c++) {
		if (c[0] == '.' && c[1] == '.' && (c[2] == '/' || !c[2]))
			return false;
		if (!(c = strchr(c, '/')))
			return true;
	}
}

static bool exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0;
}

/* Open every shard named by the index once, in order of first mention,
 * then check each listed tensor is in the shard the index names. */
static int open_shards(struct atlas_st *st, const char *dir, const char *ipath,
		       struct json_object *wm)
{
	int nmax = json_object_object_length(wm), nshards = 0, rc = 0;
	const char **shards = calloc((size_t)nmax + 1, sizeof(*shards));

	if (!shards)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	json_object_object_foreach(wm, name, val)
	{
		const char *s;
		int i;
		if (!val || !json_object_is_type(val, json_type_string)) {
			rc = atlas_error(ATLAS_EFORMAT,
					 "'%s': weight_map entry for tensor '%s' must be a string",
					 ipath, name);
			goto out;
		}
		s = json_object_get_string(val);
		if (!safe_relpath(s)) {
			rc = atlas_error(ATLAS_EFORMAT,
					 "'%s': shard '%s' of tensor '%s' is not a file name in "
					 "the model directory",
					 ipath, s, name);
			goto out;
		}
		for (i = nshards - 1; i >= 0 && strcmp(shards[i], s); i--)
			;
		if (i < 0)
			shards[nshards++] = s;
	}
	if (!nshards) {
		rc = atlas_error(ATLAS_EFORMAT, "'%s': weight_map is empty", ipath);
		goto out;
	}
	for (int i = 0; i < nshards && !rc; i++) {
		char *p = atlas_path_join(dir, shards[i]);
		if (!p)
			rc = ATLAS_ENOMEM;
		else if (!exists(p))
			rc = atlas_error(ATLAS_ENOTFOUND, "shard '%s' listed in '%s' is missing",
					 shards[i], ipath);
		else
			rc = open_file(st, p);
		free(p);
	}
	if (!rc)
		rc = build_table(st);
	json_object_object_foreach(wm, tname, tval)
	{
		const struct atlas_tensor_info *t;
		char *p;
		if (rc)
			break;
		t = atlas_st_find(st, tname);
		if (!(p = atlas_path_join(dir, json_object_get_string(tval)))) {
			rc = ATLAS_ENOMEM;
		} else if (!t) {
			rc = atlas_error(
			    ATLAS_EFORMAT,
			    "tensor '%s' is listed in '%s' but not found in its shard '%s'", tname,
			    ipath, p);
		} else if (strcmp(t->file, p)) {
			rc = atlas_error(
			    ATLAS_EFORMAT,
			    "tensor '%s' is listed in '%s' for shard '%s' but is in '%s'", tname,
			    ipath, p, t->file);
		}
		free(p);
	}
out:
	free(shards);
	return rc;
}

static int open_index(struct atlas_st *st, const char *dir, const char *ipath)
{
	struct json_object *root, *wm;
	char where[600], *text;
	size_t len;
	int rc;

	rc = atlas_file_read(ipath, &text, &len);
	if (rc)
		return rc;
	snprintf(where, sizeof(where), "'%s'", ipath);
	root = atlas_json_parse_object(text, len, where);
	free(text);
	if (!root)
		return ATLAS_EFORMAT;
	rc = atlas_json_object(root, "weight_map", where, &wm);
	if (rc == 0)
		rc = missing(where, "weight_map");
	else if (rc > 0)
		rc = open_shards(st, dir, ipath, wm);
	json_object_put(root);
	return rc;
}

static int open_dir(struct atlas_st *st, const char *dir)
{
	char *ipath = atlas_path_join(dir, "model.safetensors.index.json");
	char *spath = atlas_path_join(dir, "model.safetensors");
	int rc;

	if (!ipath || !spath)
		rc = ATLAS_ENOMEM;
	else if (exists(ipath))
		rc = open_index(st, dir, ipath);
	else if (!exists(spath))
		rc = atlas_error(ATLAS_ENOTFOUND, "no safetensors files in '%s'", dir);
	else if (!(rc = open_file(st, spath)))
		rc = build_table(st);
	free(ipath);
	free(spath);
	return rc;
}

struct atlas_st *atlas_st_open(const char *path)
{
	struct atlas_st *st;
	struct stat sb;
	int rc;

	if (!path || !*path) {
		atlas_error(ATLAS_EINVAL, "no safetensors path given");
		return NULL;
	}
	if (stat(path, &sb)) {
		atlas_error(errno == ENOENT ? ATLAS_ENOTFOUND : ATLAS_EIO, "cannot open '%s': %s",
			    path, strerror(errno));
		return NULL;
	}
	st = calloc(1, sizeof(*st));
	if (!st) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	if (S_ISDIR(sb.st_mode))
		rc = open_dir(st, path);
	else if (!(rc = open_file(st, path)))
		rc = build_table(st);
	if (rc) {
		atlas_st_close(st);
		return NULL;
	}
	return st;
}

void atlas_st_close(struct atlas_st *st)
{
	if (!st)
		return;
	for (int64_t i = 0; i < st->count; i++)
		free((char *)st->tensors[i].name);
	for (int i = 0; i < st->nfiles; i++) {
		struct st_file *f = &st->files[i];
		for (int j = 0; j < f->nmeta; j++) {
			free(f->meta[j].key);
			free(f->meta[j].value);
		}
		free(f->meta);
		if (f->map)
			munmap(f->map, f->size);
		free(f->path);
	}
	free(st->files);
	free(st->tensors);
	free(st->slots);
	free(st);
}

int64_t atlas_st_count(const struct atlas_st *st)
{
	return st ? st->count : 0;
}

const struct atlas_tensor_info *atlas_st_get(const struct atlas_st *st, int64_t i)
{
	if (!st || i < 0 || i >= st->count)
		return NULL;
	return &st->tensors[i];
}

const struct atlas_tensor_info *atlas_st_find(const struct atlas_st *st, const char *name)
{
	if (!st || !st->slots || !name)
		return NULL;
	for (size_t h = (size_t)hash_name(name) & (st->nslots - 1); st->slots[h];
	     h = (h + 1) & (st->nslots - 1)) {
		const struct atlas_tensor_info *t = &st->tensors[st->slots[h] - 1];
		if (!strcmp(t->name, name))
			return t;
	}
	return NULL;
}

const char *atlas_st_metadata(const struct atlas_st *st, const char *key)
{
	if (!st || !st->nfiles || !key)
		return NULL;
	for (int i = 0; i < st->files[0].nmeta; i++)
		if (!strcmp(st->files[0].meta[i].key, key))
			return st->files[0].meta[i].value;
	return NULL;
}
