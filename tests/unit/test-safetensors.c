/* test-safetensors.c - safetensors reader: good files of every dtype,
 * every header validation error, sharded directories. Files are built
 * here from a JSON header string and data bytes. */
#include <stdlib.h>
#include <sys/stat.h>

#include "harness.h"
#include "../../lib/core/error.h"
#include "../../lib/io/safetensors.h"

/* A fresh subdirectory of the test tmpdir; malloc'd path. */
static char *subdir(const char *name)
{
	char *p = malloc(strlen(harness_tmpdir()) + strlen(name) + 2);
	sprintf(p, "%s/%s", harness_tmpdir(), name);
	mkdir(p, 0755);
	return p;
}

/* Write `dir`/`name` as: u64 LE `hlen`, the header text, the data. `hlen`
 * is normally strlen(header); tests of lying lengths pass another. */
static char *write_raw(const char *dir, const char *name, uint64_t hlen, const char *header,
		       const void *data, size_t len)
{
	size_t hl = strlen(header);
	unsigned char *buf = malloc(8 + hl + len + 1);
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(hlen >> (8 * i));
	memcpy(buf + 8, header, hl);
	if (len)
		memcpy(buf + 8 + hl, data, len);
	char *p = harness_write(dir, name, buf, 8 + hl + len);
	free(buf);
	return p;
}

static char *write_st(const char *dir, const char *name, const char *header, const void *data,
		      size_t len)
{
	return write_raw(dir, name, strlen(header), header, data, len);
}

/* Element i of tensor data, which a header of any length leaves at any
 * alignment (a plain load would be undefined behaviour). */
static float ld_f32(const void *p, int i)
{
	float f;
	memcpy(&f, (const char *)p + 4 * i, 4);
	return f;
}

static uint16_t ld_u16(const void *p, int i)
{
	uint16_t h;
	memcpy(&h, (const char *)p + 2 * i, 2);
	return h;
}

/* Opening `path` must fail with a message holding `a` and `b`
 * (pass NULL for b when one is enough). */
static void expect_fail(const char *path, const char *a, const char *b)
{
	struct atlas_st *st;
	atlas_error_clear();
	st = atlas_st_open(path);
	CHECK(st == NULL);
	atlas_st_close(st);
	if (getenv("TEST_VERBOSE"))
		printf("# %s\n", atlas_errmsg());
	CHECK_CONTAINS(atlas_errmsg(), a);
	if (b)
		CHECK_CONTAINS(atlas_errmsg(), b);
}

/* Write a one-file model with header `h` and 64 zero bytes of data and
 * check that opening it fails naming the file and `msg`. */
static void bad_header(const char *h, const char *msg)
{
	static int n;
	static const unsigned char zeros[64];
	char name[64];
	sprintf(name, "bad%d.safetensors", n++);
	char *p = write_st(harness_tmpdir(), name, h, zeros, sizeof(zeros));
	expect_fail(p, p, msg);
	free(p);
}

static void test_good_file(void)
{
	/* a: F32 [2,3]; b: BF16 [4]; c: I64 scalar; d: U8 [0,5] (empty);
	 * e: F16 [2]; f: I8 [2]; g: F8_E4M3 [2]; h: I32 [1] */
	const char *h = "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
			"\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
			"\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
			"\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
			"\"d\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[40,40]},"
			"\"e\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[40,44]},"
			"\"f\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[44,46]},"
			"\"g\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[46,48]},"
			"\"h\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[48,52]}}      ";
	unsigned char data[52];
	float fa[6] = {1, 2, 3, 4, 5, -6.5f};
	uint16_t bb[4] = {atlas_f32_to_bf16(1.5f), atlas_f32_to_bf16(-2), 0, atlas_f32_to_bf16(3)};
	int64_t ci = -1234567890123LL;
	uint16_t ee[2] = {atlas_f32_to_f16(0.5f), atlas_f32_to_f16(-1)};
	int8_t ff[2] = {-7, 9};
	uint8_t gg[2] = {0x38, 0xb8}; /* E4M3: 1.0, -1.0 */
	int32_t hh = 424242;
	memcpy(data, fa, 24);
	memcpy(data + 24, bb, 8);
	memcpy(data + 32, &ci, 8);
	memcpy(data + 40, ee, 4);
	memcpy(data + 44, ff, 2);
	memcpy(data + 46, gg, 2);
	memcpy(data + 48, &hh, 4);
	char *p = write_st(harness_tmpdir(), "good.safetensors", h, data, sizeof(data));
	struct atlas_st *st = atlas_st_open(p);
	CHECK(st != NULL);
	if (!st) {
		printf("# %s\n", atlas_errmsg());
		free(p);
		return;
	}
	CHECK_EQ_INT(atlas_st_count(st), 8);
	const char *order = "abcdefgh";
	for (int i = 0; i < 8; i++) {
		const struct atlas_tensor_info *t = atlas_st_get(st, i);
		char nm[2] = {order[i], 0};
		CHECK_STR(t->name, nm);
		CHECK(atlas_st_find(st, nm) == t);
		CHECK_STR(t->file, p);
	}
	CHECK(atlas_st_get(st, -1) == NULL);
	CHECK(atlas_st_get(st, 8) == NULL);
	CHECK(atlas_st_find(st, "zz") == NULL);
	CHECK(atlas_st_find(st, "__metadata__") == NULL);

	const struct atlas_tensor_info *t = atlas_st_find(st, "a");
	CHECK_EQ_INT(t->dtype, ATLAS_DTYPE_F32);
	CHECK_EQ_INT(t->ndim, 2);
	CHECK_EQ_INT(t->shape[0], 2);
	CHECK_EQ_INT(t->shape[1], 3);
	CHECK_EQ_INT(t->numel, 6);
	CHECK_EQ_INT(t->nbytes, 24);
	CHECK_NEAR(ld_f32(t->data, 5), -6.5, 0);
	CHECK_NEAR(ld_f32(t->data, 0), 1, 0);

	t = atlas_st_find(st, "b");
	CHECK_EQ_INT(t->dtype, ATLAS_DTYPE_BF16);
	CHECK_EQ_INT(t->numel, 4);
	CHECK_EQ_INT(t->nbytes, 8);
	CHECK_NEAR(atlas_bf16_to_f32(ld_u16(t->data, 0)), 1.5, 0);
	CHECK_NEAR(atlas_bf16_to_f32(ld_u16(t->data, 3)), 3, 0);

	t = atlas_st_find(st, "c");
	CHECK_EQ_INT(t->dtype, ATLAS_DTYPE_I64);
	CHECK_EQ_INT(t->ndim, 0);
	CHECK_EQ_INT(t->numel, 1);
	int64_t cv;
	memcpy(&cv, t->data, 8);
	CHECK_EQ_INT(cv, -1234567890123LL);

	t = atlas_st_find(st, "d");
	CHECK_EQ_INT(t->dtype, ATLAS_DTYPE_U8);
	CHECK_EQ_INT(t->ndim, 2);
	CHECK_EQ_INT(t->numel, 0);
	CHECK_EQ_INT(t->nbytes, 0);

	t = atlas_st_find(st, "e");
	CHECK_EQ_INT(t->dtype, ATLAS_DTYPE_F16);
	CHECK_NEAR(atlas_f16_to_f32(ld_u16(t->data, 0)), 0.5, 0);
	CHECK_NEAR(atlas_f16_to_f32(ld_u16(t->data, 1)), -1, 0);

	t = atlas_st_find(st, "f");
	CHECK_EQ_INT(t->dtype, ATLAS_DTYPE_I8);
	CHECK_EQ_INT(((const int8_t *)t->data)[0], -7);
	CHECK_EQ_INT(((const int8_t *)t->data)[1], 9);

	t = atlas_st_find(st, "g");
	CHECK_EQ_INT(t->dtype, ATLAS_DTYPE_F8_E4M3);
	CHECK_NEAR(atlas_f8e4m3_to_f32(((const uint8_t *)t->data)[0]), 1, 0);
	CHECK_NEAR(atlas_f8e4m3_to_f32(((const uint8_t *)t->data)[1]), -1, 0);

	t = atlas_st_find(st, "h");
	CHECK_EQ_INT(t->dtype, ATLAS_DTYPE_I32);
	int32_t hv;
	memcpy(&hv, t->data, 4);
	CHECK_EQ_INT(hv, 424242);

	CHECK_STR(atlas_st_metadata(st, "format"), "pt");
	CHECK_STR(atlas_st_metadata(st, "note"), "x");
	CHECK(atlas_st_metadata(st, "absent") == NULL);
	atlas_st_close(st);
	atlas_st_close(NULL);
	free(p);
}

/* Enough tensors to exercise the hash table's collisions and growth. */
static void test_many_tensors(void)
{
	enum { N = 1500 };
	size_t cap = (size_t)N * 96 + 16, used = 0;
	char *h = malloc(cap);
	int32_t *data = malloc(N * sizeof(int32_t));
	used += (size_t)sprintf(h, "{");
	for (int i = 0; i < N; i++) {
		used += (size_t)sprintf(h + used,
					"%s\"model.layers.%d.w\":{\"dtype\":\"I32\",\"shape\":[1],"
					"\"data_offsets\":[%d,%d]}",
					i ? "," : "", i, 4 * (N - 1 - i), 4 * (N - i));
		data[N - 1 - i] = i * 3;
	}
	sprintf(h + used, "}");
	char *p = write_st(harness_tmpdir(), "many.safetensors", h, data, N * sizeof(int32_t));
	struct atlas_st *st = atlas_st_open(p);
	CHECK(st != NULL);
	if (st) {
		int bad = 0;
		CHECK_EQ_INT(atlas_st_count(st), N);
		for (int i = 0; i < N; i++) {
			char nm[64];
			sprintf(nm, "model.layers.%d.w", i);
			const struct atlas_tensor_info *t = atlas_st_find(st, nm);
			int32_t v;
			if (!t || t != atlas_st_get(st, i)) {
				bad++;
				continue;
			}
			memcpy(&v, t->data, 4);
			bad += v != i * 3;
		}
		CHECK_EQ_INT(bad, 0);
		CHECK(atlas_st_find(st, "model.layers.1500.w") == NULL);
	}
	atlas_st_close(st);
	free(p);
	free(h);
	free(data);
}

static void test_directory_single(void)
{
	char *d = subdir("single");
	const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
	float one = 1;
	char *p = write_st(d, "model.safetensors", h, &one, 4);
	struct atlas_st *st = atlas_st_open(d);
	CHECK(st != NULL);
	if (st) {
		CHECK_EQ_INT(atlas_st_count(st), 1);
		CHECK_CONTAINS(atlas_st_get(st, 0)->file, "single/model.safetensors");
		CHECK(atlas_st_metadata(st, "format") == NULL);
	}
	atlas_st_close(st);
	free(p);
	free(d);

	d = subdir("empty");
	expect_fail(d, "no safetensors files in", d);
	free(d);
	expect_fail("/nonexistent/atlas/x.safetensors",
		    "cannot open '/nonexistent/atlas/x.safetensors'", NULL);
}

static void test_file_level_errors(void)
{
	const char *dir = harness_tmpdir();
	char *p = harness_write(dir, "short.safetensors", "\x05\0\0\0", 4);
	expect_fail(p, p, "too short");
	free(p);
	p = harness_write(dir, "empty.safetensors", "", 0);
	expect_fail(p, p, "too short");
	free(p);
	p = write_raw(dir, "zero.safetensors", 0, "{}", NULL, 0);
	expect_fail(p, p, "header length is 0");
	free(p);
	/* claims 1000 header bytes but the file has 2 after the length */
	p = write_raw(dir, "long.safetensors", 1000, "{}", NULL, 0);
	expect_fail(p, p, "header length 1000 is past the end of the file (10 bytes)");
	free(p);
	p = write_raw(dir, "huge.safetensors", (uint64_t)1 << 40, "{}", NULL, 0);
	expect_fail(p, p, "absurdly large");
	free(p);
	p = write_raw(dir, "huge2.safetensors", UINT64_MAX, "{}", NULL, 0);
	expect_fail(p, p, "absurdly large");
	free(p);
}

static void test_json_errors(void)
{
	bad_header("{\"a\": ", "invalid JSON");
	bad_header("{\"a\":{\"dtype\":\"F32\" \"shape\":[]}}", "invalid JSON");
	bad_header("[1, 2]", "not an object");
	bad_header("null", "not an object");
	bad_header("\"str\"", "not an object");
	bad_header("{} trailing", "unexpected text after the object");
	bad_header("{\"x\": 5}", "tensor 'x'");
	bad_header("{\"x\": 5}", "entry must be an object");
	bad_header("{\"x\": [1]}", "entry must be an object");
	bad_header("{\"__metadata__\": 5}", "__metadata__ must be an object");
	bad_header("{\"__metadata__\": {\"k\": 5}}", "__metadata__ value for 'k' must be a string");
}

static void test_entry_errors(void)
{
	bad_header("{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "tensor 'x' in '");
	bad_header("{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "missing field 'dtype'");
	bad_header("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}",
		   "field 'dtype' must be a string");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "missing field 'shape'");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}}",
		   "field 'shape' must be an array");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", "missing field 'data_offsets'");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}}",
		   "field 'data_offsets' must be an array");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
		   "shape[0] is negative");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1, 2.5],\"data_offsets\":[0,4]}}",
		   "shape[1] must be an integer");
	bad_header(
	    "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
	    "shape has 9 dimensions, at most 8");
	bad_header(
	    "{\"x\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
	    "shape overflows");
	bad_header(
	    "{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}}",
	    "byte size of the shape overflows");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
		   "data_offsets must be two integers");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
		   "data_offsets must be two non-negative integers");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}",
		   "data_offsets must be two non-negative integers");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}",
		   "data_offsets [8, 4] end before they begin");
	bad_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
		   "data_offsets span 4 bytes but shape [2] of F32 needs 8");
	bad_header(
	    "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}",
	    "past the end of the file");
	bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
		   "tensors 'a' and 'b' in '");
	bad_header("{\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]},"
		   "\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[10,11]}}",
		   "overlap");
}

/* json-c keeps only the last of two equal keys and cuts a key at
 * \u0000, so these would load as something other than what the file
 * says: both are refused, naming the file. */
static void test_name_errors(void)
{
#define T(name, off) "\"" name "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":" off "}"
	bad_header("{" T("a\\u0000b", "[0,4]") "}", "tensor name 'a\\u0000b' has a NUL byte");
	bad_header("{" T("a\\u0000b", "[0,4]") "," T("a\\u0000c", "[4,8]") "}", "has a NUL byte");
	bad_header("{" T("w", "[0,4]") "," T("w", "[4,8]") "}",
		   "tensor name 'w' appears more than once in the header");
	bad_header("{" T("w", "[0,4]") "," T("\\u0077", "[4,8]") "}",
		   "tensor name 'w' appears more than once");
	bad_header("{\"__metadata__\":{},\"__metadata__\":{}}", "'__metadata__' appears more than once");

	/* not names: an escaped backslash before u0000, keys of entries and
	 * of __metadata__, quotes and commas inside strings */
	static const unsigned char zeros[64];
	const char *h = "{\"__metadata__\":{\"format\":\"pt\",\"n\":\"x\\\",\\\"a\\\":\"},"
			T("a\\\\u0000", "[0,4]") "," T("b", "[4,8]") "," T("shape", "[8,12]") "}";
	char *p = write_st(harness_tmpdir(), "names.safetensors", h, zeros, 12);
	struct atlas_st *st = atlas_st_open(p);
	CHECK(st != NULL);
	if (!st)
		printf("# %s\n", atlas_errmsg());
	CHECK_EQ_INT(atlas_st_count(st), 3);
	CHECK(atlas_st_find(st, "a\\u0000") != NULL);
	CHECK_STR(atlas_st_metadata(st, "n"), "x\",\"a\":");
	atlas_st_close(st);
	free(p);
#undef T
}

/* A header without tensors is a valid, empty file (found by the fuzzer:
 * the overlap check did arithmetic on the NULL tensor array, which
 * clang's UBSan reports; the seed tests/fuzz/corpus/safetensors/
 * empty-header replays it in make fuzz). */
static void test_no_tensors(void)
{
	static const char *const headers[] = {"{}", "{\"__metadata__\":{\"format\":\"pt\"}}",
					      "{}      "};
	for (int i = 0; i < 3; i++) {
		char name[32];
		snprintf(name, sizeof(name), "empty%d.safetensors", i);
		char *p = write_st(harness_tmpdir(), name, headers[i], NULL, 0);
		struct atlas_st *st = atlas_st_open(p);
		CHECK(st != NULL);
		CHECK_EQ_INT(atlas_st_count(st), 0);
		CHECK(atlas_st_find(st, "a") == NULL);
		atlas_st_close(st);
		free(p);
	}
}

static void test_unsupported_dtype(void)
{
	static const unsigned char z[8];
	char *p =
	    write_st(harness_tmpdir(), "f64.safetensors",
		     "{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", z, 8);
	char want[512];
	snprintf(want, sizeof(want), "unsupported dtype 'F64' for tensor 'w' in '%s'", p);
	expect_fail(p, want, NULL);
	free(p);
	bad_header("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		   "unsupported dtype 'BOOL' for tensor 'w'");
}

/* A valid header whose last tensor runs past the end of a cut file. */
static void test_truncated(void)
{
	const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
			"\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}";
	float d[6] = {0};
	char *p = write_st(harness_tmpdir(), "trunc.safetensors", h, d, sizeof(d));
	size_t hl = strlen(h);
	char want[600];
	snprintf(want, sizeof(want),
		 "tensor 'b' in '%s' ends at byte %zu, past the end of the file (%zu bytes)", p,
		 8 + hl + 32, 8 + hl + 24);
	expect_fail(p, want, NULL);
	free(p);
}

/* Two shards with the index naming each tensor's shard. */
static char *make_shards(const char *name, const char *index)
{
	char *d = subdir(name);
	float v[4] = {1, 2, 3, 4};
	free(write_st(d, "model-00001-of-00002.safetensors",
		      "{\"__metadata__\":{\"format\":\"pt\"},"
		      "\"embed\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		      "\"l0\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
		      v, 12));
	free(write_st(d, "model-00002-of-00002.safetensors",
		      "{\"l1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		      "\"head\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
		      v + 2, 8));
	free(harness_write(d, "model.safetensors.index.json", index, strlen(index)));
	return d;
}

#define SH1 "model-00001-of-00002.safetensors"
#define SH2 "model-00002-of-00002.safetensors"

static void test_sharded(void)
{
	char *d =
	    make_shards("sharded", "{\"metadata\":{\"total_size\":20},\"weight_map\":{"
				   "\"l1\":\"" SH2 "\",\"embed\":\"" SH1 "\",\"head\":\"" SH2 "\","
				   "\"l0\":\"" SH1 "\"}}");
	struct atlas_st *st = atlas_st_open(d);
	CHECK(st != NULL);
	if (st) {
		static const char *order[] = {"l1", "head", "embed", "l0"};
		CHECK_EQ_INT(atlas_st_count(st), 4);
		/* files in index order (first mention), tensors in header order */
		for (int i = 0; i < 4; i++)
			CHECK_STR(atlas_st_get(st, i)->name, order[i]);
		const struct atlas_tensor_info *t = atlas_st_find(st, "head");
		CHECK_CONTAINS(t->file, SH2);
		CHECK_NEAR(ld_f32(t->data, 0), 4, 0);
		t = atlas_st_find(st, "embed");
		CHECK_CONTAINS(t->file, SH1);
		CHECK_NEAR(ld_f32(t->data, 1), 2, 0);
		CHECK(atlas_st_metadata(st, "format") == NULL); /* first file is shard 2 */
	}
	atlas_st_close(st);
	free(d);

	d = make_shards("sharded2", "{\"weight_map\":{\"embed\":\"" SH1 "\",\"l1\":\"" SH2 "\"}}");
	st = atlas_st_open(d);
	CHECK(st != NULL);
	if (st) {
		CHECK_EQ_INT(atlas_st_count(st), 4); /* unlisted tensors still load */
		CHECK_STR(atlas_st_metadata(st, "format"), "pt");
	}
	atlas_st_close(st);
	free(d);
}

static void test_sharded_errors(void)
{
	char *d = make_shards("missing-shard", "{\"weight_map\":{\"embed\":\"" SH1
					       "\",\"x\":\"model-00003-of-00002.safetensors\"}}");
	expect_fail(d, "shard 'model-00003-of-00002.safetensors' listed in '", "is missing");
	free(d);

	d = make_shards("missing-tensor",
			"{\"weight_map\":{\"embed\":\"" SH1 "\",\"ghost\":\"" SH2 "\"}}");
	expect_fail(d, "tensor 'ghost' is listed in '", "but not found in its shard '");
	CHECK_CONTAINS(atlas_errmsg(), SH2);
	free(d);

	d = make_shards("wrong-shard",
			"{\"weight_map\":{\"embed\":\"" SH2 "\",\"l1\":\"" SH1 "\"}}");
	expect_fail(d, "tensor 'embed' is listed in '", "is in '");
	free(d);

	d = make_shards("no-map", "{\"metadata\":{}}");
	expect_fail(d, "missing field 'weight_map'", "model.safetensors.index.json");
	free(d);

	d = make_shards("bad-map", "{\"weight_map\":{\"embed\":7}}");
	expect_fail(d, "weight_map entry for tensor 'embed' must be a string", NULL);
	free(d);

	d = make_shards("escape", "{\"weight_map\":{\"embed\":\"../sharded/" SH1 "\"}}");
	expect_fail(d, "is not a file name in the model directory", NULL);
	free(d);

	d = make_shards("empty-map", "{\"weight_map\":{}}");
	expect_fail(d, "weight_map is empty", NULL);
	free(d);

	d = make_shards("bad-index", "{\"weight_map\":");
	expect_fail(d, "invalid JSON", "model.safetensors.index.json");
	free(d);

	/* the same tensor name in two shards */
	d = subdir("dup");
	float v[2] = {1, 2};
	free(write_st(d, SH1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", v,
		      4));
	free(write_st(d, SH2, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", v,
		      4));
	const char *idx = "{\"weight_map\":{\"w\":\"" SH1 "\",\"v\":\"" SH2 "\"}}";
	free(harness_write(d, "model.safetensors.index.json", idx, strlen(idx)));
	expect_fail(d, "tensor 'w' appears in both '", SH2);
	free(d);

	/* a broken shard reports the shard's own problem */
	d = subdir("bad-shard");
	free(write_st(d, SH1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", v,
		      4));
	free(write_st(d, SH2, "{\"w2\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
		      v, 4));
	idx = "{\"weight_map\":{\"w\":\"" SH1 "\",\"w2\":\"" SH2 "\"}}";
	free(harness_write(d, "model.safetensors.index.json", idx, strlen(idx)));
	expect_fail(d, "tensor 'w2' in '", "past the end of the file");
	free(d);
}

int main(void)
{
	RUN(test_good_file);
	RUN(test_many_tensors);
	RUN(test_directory_single);
	RUN(test_file_level_errors);
	RUN(test_json_errors);
	RUN(test_entry_errors);
	RUN(test_name_errors);
	RUN(test_no_tensors);
	RUN(test_unsupported_dtype);
	RUN(test_truncated);
	RUN(test_sharded);
	RUN(test_sharded_errors);
	return harness_done();
}
