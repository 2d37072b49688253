/* test-hfcache.c - model argument resolution: plain directories, and Hub
 * ids looked up in a fake Hugging Face cache built in the tmpdir. */
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "harness.h"
#include "../../lib/core/error.h"
#include "../../lib/io/hfcache.h"

#define SHA_MAIN "0123456789abcdef0123456789abcdef01234567"
#define SHA_V2 "fedcba9876543210fedcba9876543210fedcba98"
#define SHA_OLD "1111111111222222222233333333334444444444"
#define SHA_GONE "9999999999999999999999999999999999999999"

static char *path2(const char *a, const char *b)
{
	char *p = malloc(strlen(a) + strlen(b) + 2);
	sprintf(p, "%s/%s", a, b);
	return p;
}

static void mkdirs(const char *path)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *s = buf + 1; *s; s++) {
		if (*s == '/') {
			*s = '\0';
			mkdir(buf, 0755);
			*s = '/';
		}
	}
	mkdir(buf, 0755);
}

/* `root`/models--org--name with refs main, v2, pr/1 (newline-ended, as
 * some tools write it) and a ref to a snapshot that is not there. */
static char *make_cache(const char *root)
{
	char *repo = path2(root, "models--org--name");
	char *p;
	p = path2(repo, "snapshots/" SHA_MAIN);
	mkdirs(p);
	free(p);
	p = path2(repo, "snapshots/" SHA_V2);
	mkdirs(p);
	free(p);
	p = path2(repo, "snapshots/" SHA_OLD);
	mkdirs(p);
	free(p);
	p = path2(repo, "refs/pr");
	mkdirs(p);
	free(p);
	free(harness_write(repo, "refs/main", SHA_MAIN, 40));
	free(harness_write(repo, "refs/v2", SHA_V2 "\n", 41));
	free(harness_write(repo, "refs/pr/1", SHA_OLD, 40));
	free(harness_write(repo, "refs/gone", SHA_GONE, 40));
	free(harness_write(repo, "refs/evil", "../../../etc", 12));
	return repo;
}

static void expect_resolve(const char *model, const char *want)
{
	char *r;
	atlas_error_clear();
	r = atlas_model_resolve(model);
	CHECK_STR(r, want);
	if (!r)
		printf("# %s: %s\n", model, atlas_errmsg());
	free(r);
}

static void expect_fail(const char *model, const char *a, const char *b)
{
	char *r;
	atlas_error_clear();
	r = atlas_model_resolve(model);
	CHECK(r == NULL);
	free(r);
	CHECK_CONTAINS(atlas_errmsg(), a);
	if (b)
		CHECK_CONTAINS(atlas_errmsg(), b);
}

static void test_directory(void)
{
	char real[PATH_MAX];
	CHECK(realpath(harness_tmpdir(), real) != NULL);
	expect_resolve(harness_tmpdir(), real);
	/* relative directories, including one shaped like an org/name id */
	char *fx = realpath("tests/fixtures", NULL);
	CHECK(fx != NULL);
	if (fx)
		expect_resolve("tests/fixtures", fx);
	free(fx);
	char *f = harness_write(harness_tmpdir(), "plainfile", "x", 1);
	expect_fail(f, "model '", "' is not a directory");
	free(f);
	expect_fail("", "no model given", NULL);
	expect_fail(NULL, "no model given", NULL);
}

static void test_not_found_paths(void)
{
	expect_fail("./nope", "no such model directory './nope'", NULL);
	expect_fail("/nonexistent/atlas/model",
		    "no such model directory '/nonexistent/atlas/model'", NULL);
	expect_fail("../nope", "no such model directory '../nope'", NULL);
	expect_fail(".hidden", "no such model directory '.hidden'", NULL);
	expect_fail("a/./b", "no such model directory 'a/./b'", NULL);
	expect_fail("justaname",
		    "model 'justaname' not found: no such directory, and not a Hugging Face id",
		    NULL);
	expect_fail("a/b/c", "model 'a/b/c' not found", "not a Hugging Face id");
	expect_fail("org/", "not a Hugging Face id", NULL);
	expect_fail("org/name@", "not a Hugging Face id", NULL);
	expect_fail("org/name@a..b", "not a Hugging Face id", NULL);
}

static void test_cache_dir(void)
{
	char *d;
	setenv("HF_HUB_CACHE", "/x/hubcache", 1);
	setenv("HF_HOME", "/y/hfhome", 1);
	d = atlas_hf_cache_dir();
	CHECK_STR(d, "/x/hubcache");
	free(d);
	unsetenv("HF_HUB_CACHE");
	d = atlas_hf_cache_dir();
	CHECK_STR(d, "/y/hfhome/hub");
	free(d);
	setenv("HF_HUB_CACHE", "", 1); /* empty counts as unset */
	d = atlas_hf_cache_dir();
	CHECK_STR(d, "/y/hfhome/hub");
	free(d);
	unsetenv("HF_HUB_CACHE");
	unsetenv("HF_HOME");
	setenv("XDG_CACHE_HOME", "/z/xdg", 1);
	d = atlas_hf_cache_dir();
	CHECK_STR(d, "/z/xdg/huggingface/hub");
	free(d);
	unsetenv("XDG_CACHE_HOME");
	setenv("HOME", "/home/tester", 1);
	d = atlas_hf_cache_dir();
	CHECK_STR(d, "/home/tester/.cache/huggingface/hub");
	free(d);
	setenv("HF_HOME", "~/hf", 1);
	d = atlas_hf_cache_dir();
	CHECK_STR(d, "/home/tester/hf/hub");
	free(d);
	unsetenv("HF_HOME");
}

static void test_hub_lookup(void)
{
	char *root = path2(harness_tmpdir(), "hub");
	char *repo = make_cache(root);
	char *want;

	unsetenv("HF_HOME");
	setenv("HF_HUB_CACHE", root, 1);

	want = path2(repo, "snapshots/" SHA_MAIN);
	expect_resolve("org/name", want);
	expect_resolve("org/name@main", want);
	free(want);
	want = path2(repo, "snapshots/" SHA_V2);
	expect_resolve("org/name@v2", want);
	free(want);
	want = path2(repo, "snapshots/" SHA_OLD);
	expect_resolve("org/name@" SHA_OLD, want); /* a commit, no ref */
	expect_resolve("org/name@pr/1", want);	   /* a ref with a '/' */
	free(want);

	char msg[1024];
	snprintf(msg, sizeof(msg),
		 "model 'org/other' not found: no such directory, and not in the Hugging Face "
		 "cache at '%s' (download it with: atlas-fetch org/other)",
		 root);
	expect_fail("org/other", msg, NULL);
	expect_fail("org/name@v3", "revision 'v3' of 'org/name' not in the cache at '", repo);
	expect_fail("org/name@" SHA_GONE, "revision '" SHA_GONE "' of 'org/name' not in the cache",
		    "no snapshot '");
	expect_fail("org/name@gone",
		    "revision 'gone' of 'org/name' not in the cache: no snapshot '", SHA_GONE);
	expect_fail("org/name@evil", "holds an invalid commit", NULL);

	/* the same cache found through HF_HOME/hub */
	unsetenv("HF_HUB_CACHE");
	setenv("HF_HOME", harness_tmpdir(), 1);
	want = path2(repo, "snapshots/" SHA_V2);
	expect_resolve("org/name@v2", want);
	free(want);
	unsetenv("HF_HOME");

	free(repo);
	free(root);
}

int main(void)
{
	RUN(test_directory);
	RUN(test_not_found_paths);
	RUN(test_cache_dir);
	RUN(test_hub_lookup);
	return harness_done();
}
