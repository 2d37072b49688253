/* test-backend-mock.c - the mock backend records one line per op in the
 * documented format and ignores memory operations; atlas_backend_open
 * picks backends by name and explains what it refuses. */
#include <stdint.h>
#include <stdlib.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "harness.h"

static void test_records_ops(void)
{
	struct atlas_backend *be = atlas_backend_mock_new();
	CHECK(be != NULL);
	if (!be)
		return;
	CHECK_STR(be->name, "mock");
	CHECK_EQ_INT(be->act_dtype, ATLAS_DTYPE_F32);
	float *a = be->alloc(be, 64 * sizeof(float));
	float host[64], w[64] = {0};
	int32_t ids[2] = {1, 2};
	CHECK(a != NULL);
	CHECK(a[0] == 0.0f && a[63] == 0.0f);
	for (int i = 0; i < 64; i++)
		host[i] = 1.0f + (float)i;
	CHECK(be->weight_upload(be, w, sizeof(w)) == (const void *)w);
	CHECK_EQ_INT(be->upload(be, a, host, sizeof(host)), 0);
	CHECK_EQ_INT(be->sync(be), 0);
	CHECK_EQ_INT(atlas_backend_mock_count(be), 0);

	CHECK_EQ_INT(be->embed(be, a, w, ATLAS_DTYPE_BF16, ids, 2, 16), 0);
	CHECK_EQ_INT(be->rmsnorm(be, a, a, w, ATLAS_DTYPE_F32, 2, 16, 1e-6f), 0);
	CHECK_EQ_INT(be->matmul(be, a, a, w, NULL, ATLAS_DTYPE_BF16, 1, 64, 32), 0);
	CHECK_EQ_INT(be->matmul(be, a, a, w, w, ATLAS_DTYPE_BF16, 3, 8, 4), 0);
	CHECK_EQ_INT(be->rope(be, a, ids, w, 2, 4, 8), 0);
	int32_t pos[2] = {7, 8}, seq_of[2] = {0, 0}, table[1] = {0}, slot[2] = {7, 8};
	struct atlas_kv_batch kb = {.seq_of = seq_of, .pos = pos, .block_tables = table,
				    .n_seq = 1, .max_blocks = 1, .block_size = 16, .max_keys = 9};
	CHECK_EQ_INT(be->kv_store(be, a, a, a, a, slot, 2, 2, 4), 0);
	CHECK_EQ_INT(be->attention(be, a, a, a, a, &kb, 2, 4, 2, 8, 0, 0.5f), 0);
	CHECK_EQ_INT(be->swiglu(be, a, a, a, 2, 24), 0);
	CHECK_EQ_INT(be->add(be, a, a, 48), 0);
	CHECK_EQ_INT(be->add_rmsnorm(be, a, a, a, w, ATLAS_DTYPE_F32, 1, 16, 1e-6f), 0);
	CHECK_EQ_INT(be->copy(be, a, a, 12), 0);
	float back[64];
	CHECK_EQ_INT(be->download(be, back, a, sizeof(back)), 0);
	/* ops compute nothing: the buffer still holds what was uploaded */
	CHECK(back[0] == 1.0f && back[63] == 64.0f);
	CHECK_EQ_INT(be->to_f32(be, back, a, 5), 0);
	CHECK(back[0] == 0.0f && back[4] == 0.0f && back[5] == 6.0f);

	static const char *want[] = {
	    "embed T=2 D=16",	       "rmsnorm R=2 D=16",  "matmul T=1 N=64 K=32",
	    "matmul T=3 N=8 K=4 bias", "rope T=2 H=4 hd=8", "kv_store T=2 row=8", "attention T=2 pos0=7 H=4 Hkv=2 hd=8 seqs=1",
	    "swiglu T=2 F=24",	       "add n=48",	    "add_rmsnorm R=1 D=16",
	    "copy bytes=12",	       "to_f32 n=5",
	};
	int64_t n = (int64_t)(sizeof(want) / sizeof(want[0]));
	CHECK_EQ_INT(atlas_backend_mock_count(be), n);
	for (int64_t i = 0; i < n; i++)
		CHECK_STR(atlas_backend_mock_call(be, i), want[i]);
	CHECK(atlas_backend_mock_call(be, n) == NULL);
	CHECK(atlas_backend_mock_call(be, -1) == NULL);

	atlas_backend_mock_reset(be);
	CHECK_EQ_INT(atlas_backend_mock_count(be), 0);
	/* many calls: the record grows */
	for (int i = 0; i < 1000; i++)
		be->add(be, a, a, i);
	CHECK_EQ_INT(atlas_backend_mock_count(be), 1000);
	CHECK_STR(atlas_backend_mock_call(be, 999), "add n=999");
	be->free(be, a);
	be->destroy(be);
}

static void test_open(void)
{
	struct atlas_backend *be = atlas_backend_open("mock");
	CHECK(be && !strcmp(be->name, "mock"));
	if (be)
		be->destroy(be);
	be = atlas_backend_open("cpu");
	CHECK(be && !strcmp(be->name, "cpu"));
	if (be)
		be->destroy(be);
	be = atlas_backend_open("auto");
	CHECK(be && !strcmp(be->name, "cpu"));
	if (be)
		be->destroy(be);

	/* these tests run where there is no GPU: asking for one is an error
	 * that says why (no CUDA in the build, or no driver/GPU) */
	atlas_error_clear();
	CHECK(atlas_backend_open("cuda") == NULL);
#ifdef ATLAS_HAVE_CUDA
	CHECK_CONTAINS(atlas_errmsg(), "NVIDIA");
#else
	CHECK_STR(atlas_errmsg(), "device 'cuda' is not available: this build has no CUDA backend");
#endif
	CHECK(atlas_backend_open("cuda:1") == NULL);
#ifndef ATLAS_HAVE_CUDA
	CHECK_CONTAINS(atlas_errmsg(), "this build has no CUDA backend");
#endif
	CHECK(atlas_backend_open("bogus") == NULL);
	CHECK_STR(atlas_errmsg(), "unknown device 'bogus' (expected cpu, cuda[:N] or auto)");
	CHECK(atlas_backend_open("cuda:x") == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "unknown device 'cuda:x'");
}

int main(void)
{
	RUN(test_records_ops);
	RUN(test_open);
	return harness_done();
}
