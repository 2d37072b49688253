/* test-convert.c - atlas_convert: values converted with round-to-nearest-
 * even, shards split at the size limit with an index that atlas_st_open
 * reads back, atlas_ckpt_inspect's counts, and a failed convert that
 * leaves no destination behind. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/core/dtype.h"
#include "../../lib/core/error.h"
#include "../../lib/io/convert.h"
#include "../../lib/io/safetensors.h"
#include "harness.h"

static char src[512];

static void test_bf16_values(void)
{
	char out[600];
	int shards = 0;
	snprintf(out, sizeof(out), "%s/bf16", harness_tmpdir());
	CHECK_EQ_INT(atlas_convert(src, out, ATLAS_DTYPE_BF16, 1 << 30, &shards), 0);
	CHECK_EQ_INT(shards, 1);
	struct atlas_st *a = atlas_st_open(src), *b = atlas_st_open(out);
	CHECK(a && b);
	if (!a || !b)
		return;
	CHECK_EQ_INT(atlas_st_count(a), atlas_st_count(b));
	int64_t bad = 0;
	for (int64_t i = 0; i < atlas_st_count(a); i++) {
		const struct atlas_tensor_info *ta = atlas_st_get(a, i);
		const struct atlas_tensor_info *tb = atlas_st_find(b, ta->name);
		CHECK(tb && tb->dtype == ATLAS_DTYPE_BF16 && tb->numel == ta->numel);
		if (!tb)
			continue;
		for (int64_t k = 0; k < ta->numel; k++) {
			float f;
			uint16_t h;
			memcpy(&f, (const char *)ta->data + 4 * k, 4);
			memcpy(&h, (const char *)tb->data + 2 * k, 2);
			bad += h != atlas_f32_to_bf16(f);
		}
	}
	CHECK_EQ_INT(bad, 0);
	atlas_st_close(a);
	atlas_st_close(b);
}

static void test_shards_and_inspect(void)
{
	char out[600];
	int shards = 0;
	struct atlas_ckpt_info ci, co;
	snprintf(out, sizeof(out), "%s/f32", harness_tmpdir());
	CHECK_EQ_INT(atlas_convert(src, out, ATLAS_DTYPE_F32, 100000, &shards), 0);
	CHECK(shards >= 5);
	CHECK_EQ_INT(atlas_ckpt_inspect(src, &ci), 0);
	CHECK_EQ_INT(atlas_ckpt_inspect(out, &co), 0);
	CHECK_EQ_INT(co.n_files, shards);
	CHECK_EQ_INT(ci.n_files, 1);
	CHECK_EQ_INT(co.n_params, ci.n_params);
	CHECK_EQ_INT(co.n_bytes, ci.n_bytes);
	CHECK_EQ_INT(co.n_tensors, ci.n_tensors);
	CHECK_EQ_INT(ci.params_by_dtype[ATLAS_DTYPE_F32], ci.n_params);
	CHECK_STR(ci.tokenizer_type, "BPE");
	/* identical bytes for every tensor */
	struct atlas_st *a = atlas_st_open(src), *b = atlas_st_open(out);
	for (int64_t i = 0; a && b && i < atlas_st_count(a); i++) {
		const struct atlas_tensor_info *ta = atlas_st_get(a, i);
		const struct atlas_tensor_info *tb = atlas_st_find(b, ta->name);
		CHECK(tb && tb->nbytes == ta->nbytes && !memcmp(tb->data, ta->data, ta->nbytes));
	}
	atlas_st_close(a);
	atlas_st_close(b);
	/* a second convert into the same, now full, directory is refused */
	CHECK_EQ_INT(atlas_convert(src, out, ATLAS_DTYPE_F32, 100000, &shards), ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "is not empty");
}

static void test_refuses_int_target(void)
{
	char out[600];
	snprintf(out, sizeof(out), "%s/i8", harness_tmpdir());
	CHECK_EQ_INT(atlas_convert(src, out, ATLAS_DTYPE_I8, 1 << 30, NULL), ATLAS_EUNSUPPORTED);
}

/* Whether `dir` holds an entry whose name starts with `prefix`. */
static bool has_entry(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false;
	while (d && (e = readdir(d)))
		found |= !strncmp(e->d_name, prefix, strlen(prefix));
	if (d)
		closedir(d);
	return found;
}

/* A model directory `name` in the tmpdir: the fixture's weights (a
 * link) and config.json, and `bad` made a directory so that reading it
 * fails (config.json: the config step, tokenizer.json: the last step). */
static void broken_source(char *dir, size_t n, const char *name, const char *bad)
{
	char from[600], to[700], real[PATH_MAX];
	snprintf(dir, n, "%s/%s", harness_tmpdir(), name);
	mkdir(dir, 0755);
	CHECK(realpath(src, real) != NULL);
	snprintf(from, sizeof(from), "%s/model.safetensors", real);
	snprintf(to, sizeof(to), "%s/model.safetensors", dir);
	CHECK_EQ_INT(symlink(from, to), 0);
	if (strcmp(bad, "config.json")) {
		snprintf(from, sizeof(from), "%s/config.json", real);
		snprintf(to, sizeof(to), "%s/config.json", dir);
		CHECK_EQ_INT(symlink(from, to), 0);
	}
	snprintf(to, sizeof(to), "%s/%s", dir, bad);
	CHECK_EQ_INT(mkdir(to, 0755), 0);
}

/* A convert that fails after writing some files leaves nothing at the
 * destination (before, the shards and config.json stayed there and the
 * directory looked complete), nor its work directory. */
static void test_failure_leaves_nothing(void)
{
	static const char *const bad[] = {"config.json", "tokenizer.json"};
	char dir[600], parent[600], out[700];
	struct stat sb;
	for (int i = 0; i < 2; i++) {
		char name[32];
		snprintf(name, sizeof(name), "broken%d", i);
		broken_source(dir, sizeof(dir), name, bad[i]);
		snprintf(parent, sizeof(parent), "%s/outs%d", harness_tmpdir(), i);
		snprintf(out, sizeof(out), "%s/deeper/out", parent);
		atlas_error_clear();
		CHECK(atlas_convert(dir, out, ATLAS_DTYPE_BF16, 100000, NULL) < 0);
		CHECK_CONTAINS(atlas_errmsg(), bad[i]);
		CHECK(stat(out, &sb) != 0 && errno == ENOENT);
		snprintf(out, sizeof(out), "%s/deeper", parent);
		CHECK(!has_entry(out, "out"));
		/* an empty destination that existed stays, empty */
		mkdir(parent, 0755);
		mkdir(out, 0755);
		snprintf(out, sizeof(out), "%s/deeper/out", parent);
		CHECK_EQ_INT(mkdir(out, 0755), 0);
		CHECK(atlas_convert(dir, out, ATLAS_DTYPE_BF16, 100000, NULL) < 0);
		CHECK(stat(out, &sb) == 0 && S_ISDIR(sb.st_mode));
		CHECK(!has_entry(out, "model"));
		CHECK(!has_entry(out, "config"));
		snprintf(out, sizeof(out), "%s/deeper", parent);
		CHECK(!has_entry(out, "out.partial"));
	}
}

/* Success renames the work directory into place, also over an empty
 * directory and with a trailing slash. */
static void test_publishes_whole(void)
{
	char out[600], dir[600];
	struct stat sb;
	snprintf(dir, sizeof(dir), "%s/pub", harness_tmpdir());
	CHECK_EQ_INT(mkdir(dir, 0755), 0);
	snprintf(out, sizeof(out), "%s/pub/empty/", harness_tmpdir());
	CHECK_EQ_INT(mkdir(out, 0755), 0);
	CHECK_EQ_INT(atlas_convert(src, out, ATLAS_DTYPE_F16, 1 << 30, NULL), 0);
	CHECK(has_entry(out, "model.safetensors"));
	CHECK(has_entry(out, "config.json"));
	CHECK(has_entry(out, "tokenizer.json"));
	CHECK(!has_entry(dir, "empty.partial"));
	CHECK(stat(out, &sb) == 0 && (sb.st_mode & 0777) == 0755);
}

int main(void)
{
	snprintf(src, sizeof(src), "%s/tests/fixtures/golden/qwen3", harness_srcdir());
	RUN(test_bf16_values);
	RUN(test_shards_and_inspect);
	RUN(test_refuses_int_target);
	RUN(test_failure_leaves_nothing);
	RUN(test_publishes_whole);
	return harness_done();
}
