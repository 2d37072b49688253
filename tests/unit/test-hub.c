/* test-hub.c - the Hub client's offline parts: repository ids, the
 * offline switch, and the cache writer (relative snapshot links that
 * resolve to the blob, refs, atomic writes) read back through
 * atlas_model_resolve. The network parts are covered by the bats tests
 * against tests/hubmock. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../lib/core/error.h"
#include "../../lib/io/cache_write.h"
#include "../../lib/io/file.h"
#include "../../lib/io/hfcache.h"
#include "../../lib/io/hub.h"
#include "harness.h"

static void test_repo_ids(void)
{
	CHECK_EQ_INT(atlas_hub_check_repo_id("Qwen/Qwen3-0.6B"), 0);
	CHECK_EQ_INT(atlas_hub_check_repo_id("a/b_c.d-e"), 0);
	CHECK_EQ_INT(atlas_hub_check_repo_id("noslash"), ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "'noslash'");
	CHECK_EQ_INT(atlas_hub_check_repo_id("a/b/c"), ATLAS_EINVAL);
	CHECK_EQ_INT(atlas_hub_check_repo_id("../x"), ATLAS_EINVAL);
	CHECK_EQ_INT(atlas_hub_check_repo_id("a/.."), ATLAS_EINVAL);
	CHECK_EQ_INT(atlas_hub_check_repo_id("/b"), ATLAS_EINVAL);
}

static void test_offline_switch(void)
{
	setenv("HF_HUB_OFFLINE", "1", 1);
	CHECK(atlas_hub_offline());
	setenv("HF_HUB_OFFLINE", "true", 1);
	CHECK(atlas_hub_offline());
	setenv("HF_HUB_OFFLINE", "0", 1);
	CHECK(!atlas_hub_offline());
	unsetenv("HF_HUB_OFFLINE");
	CHECK(!atlas_hub_offline());
}

static void test_endpoint(void)
{
	struct atlas_hub_params p;
	atlas_hub_default_params(&p);
	p.endpoint = "http://127.0.0.1:9/mirror//";
	struct atlas_hub *h = atlas_hub_new(&p);
	CHECK(h != NULL);
	CHECK_STR(atlas_hub_endpoint(h), "http://127.0.0.1:9/mirror");
	atlas_hub_free(h);
	setenv("HF_ENDPOINT", "http://mirror.invalid", 1);
	h = atlas_hub_new(NULL);
	CHECK_STR(atlas_hub_endpoint(h), "http://mirror.invalid");
	atlas_hub_free(h);
	unsetenv("HF_ENDPOINT");
}

static void test_cache_layout(void)
{
	char cache[600], *text = NULL;
	size_t len;
	const char *sha = "0123456789abcdef0123456789abcdef01234567";
	const char *etag = "aaaabbbbccccddddeeeeffff0000111122223333";
	snprintf(cache, sizeof(cache), "%s/cache", harness_tmpdir());
	char *repo = atlas_cache_repo_dir(cache, "org/name");
	CHECK(repo && strstr(repo, "/cache/models--org--name"));
	char *blobs = atlas_path_join(repo, "blobs");
	CHECK_EQ_INT(atlas_mkdirs(blobs), 0);
	char *blob = atlas_cache_blob_path(repo, etag, NULL);
	CHECK_EQ_INT(atlas_file_write_atomic(blob, "{\"x\": 1}\n", 9), 0);
	CHECK(atlas_cache_blob_ready(repo, etag, 9));
	CHECK(!atlas_cache_blob_ready(repo, etag, 10));
	CHECK(atlas_cache_blob_ready(repo, etag, -1));
	CHECK_EQ_INT(atlas_cache_link(repo, sha, "config.json", etag), 0);
	CHECK_EQ_INT(atlas_cache_link(repo, sha, "sub/dir/x.json", etag), 0);
	/* linking again replaces the link */
	CHECK_EQ_INT(atlas_cache_link(repo, sha, "config.json", etag), 0);
	CHECK_EQ_INT(atlas_cache_write_ref(repo, "main", sha), 0);
	CHECK_EQ_INT(atlas_cache_write_ref(repo, "refs/pr/1", sha), 0);
	CHECK(atlas_cache_write_ref(repo, "../evil", sha) < 0);

	setenv("HF_HUB_CACHE", cache, 1);
	char *dir = atlas_model_resolve("org/name");
	CHECK(dir && strstr(dir, sha));
	char *cfg = dir ? atlas_path_join(dir, "sub/dir/x.json") : NULL;
	CHECK(cfg && atlas_file_read(cfg, &text, &len) == 0);
	CHECK(text && len == 9 && !memcmp(text, "{\"x\": 1}\n", 9));
	char target[256] = "";
	char *link = dir ? atlas_path_join(dir, "config.json") : NULL;
	ssize_t n = link ? readlink(link, target, sizeof(target) - 1) : -1;
	if (n > 0)
		target[n] = '\0';
	CHECK_STR(target, "../../blobs/aaaabbbbccccddddeeeeffff0000111122223333");
	unsetenv("HF_HUB_CACHE");
	free(text);
	free(cfg);
	free(link);
	free(dir);
	free(blob);
	free(blobs);
	free(repo);
}

int main(void)
{
	RUN(test_repo_ids);
	RUN(test_offline_switch);
	RUN(test_endpoint);
	RUN(test_cache_layout);
	return harness_done();
}
