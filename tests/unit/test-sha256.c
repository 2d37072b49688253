/* test-sha256.c - SHA-256 against the FIPS 180-4 / NIST example vectors,
 * and incremental updates split at every offset agreeing with one call. */
#include <stdlib.h>

#include "../../lib/core/sha256.h"
#include "harness.h"

static void hex_of(const void *p, size_t n, char out[65])
{
	struct atlas_sha256 s;
	atlas_sha256_init(&s);
	atlas_sha256_update(&s, p, n);
	atlas_sha256_hex(&s, out);
}

static void test_vectors(void)
{
	char h[65];
	hex_of("", 0, h);
	CHECK_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	hex_of("abc", 3, h);
	CHECK_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	hex_of(m, strlen(m), h);
	CHECK_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_million_a(void)
{
	char *a = malloc(1000000), h[65];
	memset(a, 'a', 1000000);
	hex_of(a, 1000000, h);
	CHECK_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(a);
}

static void test_split_updates(void)
{
	unsigned char data[300];
	char whole[65], part[65];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7 + 3);
	hex_of(data, sizeof(data), whole);
	for (size_t cut = 0; cut <= sizeof(data); cut++) {
		struct atlas_sha256 s;
		atlas_sha256_init(&s);
		atlas_sha256_update(&s, data, cut);
		atlas_sha256_update(&s, data + cut, sizeof(data) - cut);
		atlas_sha256_hex(&s, part);
		if (strcmp(part, whole)) {
			CHECK_STR(part, whole);
			break;
		}
	}
	/* lengths around the padding boundary (55, 56, 63, 64 bytes) */
	hex_of(data, 55, part);
	CHECK(strcmp(part, whole));
	hex_of("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 56, part);
	CHECK_STR(part, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
}

int main(void)
{
	RUN(test_vectors);
	RUN(test_million_a);
	RUN(test_split_updates);
	return harness_done();
}
