/* test-kernel-registry.c - choosing a kernel target (leaf, else common,
 * else none), the generated table of this build, and the memory the
 * model asks the backend to reserve before it loads (checked through the
 * mock backend, which records the request). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/backend/kernel_registry.h"
#include "../../lib/model/model.h"
#include "harness.h"

static const unsigned char blob[4] = {1, 2, 3, 4};
static const struct atlas_kernel_blob table[] = {
	{"sm90", "common", "", blob, 0, blob + 4},
	{"sm90", "qwen3", "bf16", blob, 0, blob + 4},
	{"sm100", "common", "", blob, 0, blob + 4},
	{"sm90", "llama", "fp8", blob, 0, blob + 4},
};

static void test_pick(void)
{
	int fb;
	char name[64];
	const struct atlas_kernel_blob *b = atlas_kernel_pick(table, 4, "sm90", "qwen3", "bf16", &fb);
	CHECK(b == &table[1]);
	CHECK_EQ_INT(fb, 0);
	CHECK_STR(atlas_kernel_blob_name(b, name, sizeof(name)), "sm90/qwen3/bf16");
	/* a family without its own kernels falls back to common, and says so */
	b = atlas_kernel_pick(table, 4, "sm90", "mistral", "bf16", &fb);
	CHECK(b == &table[0]);
	CHECK_EQ_INT(fb, 1);
	CHECK_STR(atlas_kernel_blob_name(b, name, sizeof(name)), "sm90/common");
	/* the right family with another quant also falls back */
	b = atlas_kernel_pick(table, 4, "sm90", "llama", "bf16", &fb);
	CHECK(b == &table[0]);
	CHECK_EQ_INT(fb, 1);
	b = atlas_kernel_pick(table, 4, "sm90", "llama", "fp8", &fb);
	CHECK(b == &table[3]);
	/* asking for common itself is no fallback */
	b = atlas_kernel_pick(table, 4, "sm90", "common", "", &fb);
	CHECK(b == &table[0]);
	CHECK_EQ_INT(fb, 0);
	/* another architecture: its own common; an unknown one: nothing */
	b = atlas_kernel_pick(table, 4, "sm100", "qwen3", "bf16", &fb);
	CHECK(b == &table[2]);
	CHECK(atlas_kernel_pick(table, 4, "sm80", "qwen3", "bf16", &fb) == NULL);
	CHECK(atlas_kernel_pick(table, 0, "sm90", "qwen3", "bf16", &fb) == NULL);
}

/* The table generated for this build agrees with atlas_kernel_targets(). */
static void test_build_table(void)
{
	const char *t = atlas_kernel_targets();
	int n = 0;
	char name[64];
	for (const struct atlas_kernel_blob *b = atlas_kernel_blobs; b->arch; b++, n++) {
		CHECK(b->data_end > b->data);
		CHECK_CONTAINS(t, atlas_kernel_blob_name(b, name, sizeof(name)));
	}
	CHECK_EQ_INT(n, atlas_kernel_nblobs);
	printf("# this build's kernel targets: %s\n", t[0] ? t : "none (CPU-only build)");
	if (n == 0)
		CHECK_STR(t, "");
}

static void test_reserve(void)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/qwen3-bf16", harness_srcdir());
	struct atlas_backend *be = atlas_backend_mock_new();
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_context = 256;
	p.max_seqs = 2;
	struct atlas_model *m = atlas_model_load(dir, be, &p);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	/* reserve comes first, once, and covers weights + KV pool */
	CHECK(atlas_backend_mock_count(be) >= 1);
	const char *first = atlas_backend_mock_call(be, 0);
	CHECK(!strncmp(first, "reserve bytes=", 14));
	long long bytes = atoll(first + 14);
	int64_t kv = 2 * 4 /* layers */ * 32 /* blocks: 2 seqs x 256/16 */ * 16 * 64 /* kv dim */ * 4;
	CHECK(bytes >= atlas_model_weight_bytes(m) + kv);
	CHECK(bytes < 64ll << 20);
	int reserves = 0;
	for (int64_t i = 0; i < atlas_backend_mock_count(be); i++)
		reserves += !strncmp(atlas_backend_mock_call(be, i), "reserve", 7);
	CHECK_EQ_INT(reserves, 1);
	atlas_model_free(m);
	be->destroy(be);
}

int main(void)
{
	RUN(test_pick);
	RUN(test_build_table);
	RUN(test_reserve);
	return harness_done();
}
