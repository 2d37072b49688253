/* test-convert.c - atlas_convert: values converted with round-to-nearest-
 * even, shards split at the size limit with an index that atlas_st_open
 * reads back, and atlas_ckpt_inspect's counts. */
#include <stdio.h>
#include <stdlib.h>

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

int main(void)
{
	snprintf(src, sizeof(src), "%s/tests/fixtures/golden/qwen3", harness_srcdir());
	RUN(test_bf16_values);
	RUN(test_shards_and_inspect);
	RUN(test_refuses_int_target);
	return harness_done();
}
