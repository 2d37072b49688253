/* test-toolcall.c - the streaming tool-call and reasoning parser
 * (lib/serve/toolcall.h): the recorded outputs of tests/fixtures/toolcall
 * against their expected content, reasoning and calls, the same result
 * for every split of each output (every byte boundary, every pair of
 * boundaries for the short ones, byte by byte, random splits), call ids,
 * format detection, and the tool-call grammar: its text, its errors, and
 * outputs it accepts (fixed and random walks) read back as calls. */
#include <dirent.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/error.h"
#include "../../lib/engine/grammar.h"
#include "../../lib/serve/toolcall.h"
#include "../../lib/tok/tok.h"
#include "harness.h"

#define MAXCALLS 16

/* Everything a parse produced, events concatenated. */
struct result {
	char *content, *reasoning;
	size_t ncontent, nreasoning;
	int ncalls;
	char name[MAXCALLS][64];
	char id[MAXCALLS][40];
	char *args[MAXCALLS];
	size_t nargs[MAXCALLS];
	bool ended[MAXCALLS];
	int bad; /* events out of order */
	int nevents;
	int stop_after; /* return 1 from the callback at this event (0: never) */
};

static void append(char **s, size_t *n, const char *t, size_t len)
{
	*s = realloc(*s, *n + len + 1);
	memcpy(*s + *n, t, len);
	*n += len;
	(*s)[*n] = '\0';
}

static int on_event(void *ud, const struct atlas_toolev *ev)
{
	struct result *r = ud;
	int i = ev->index;

	r->nevents++;
	switch (ev->kind) {
	case ATLAS_TOOLEV_CONTENT:
		append(&r->content, &r->ncontent, ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_REASONING:
		append(&r->reasoning, &r->nreasoning, ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_CALL:
		if (i != r->ncalls || i >= MAXCALLS || !ev->name || !ev->id) {
			r->bad++;
			break;
		}
		snprintf(r->name[i], sizeof(r->name[i]), "%s", ev->name);
		snprintf(r->id[i], sizeof(r->id[i]), "%s", ev->id);
		r->ncalls++;
		break;
	case ATLAS_TOOLEV_ARGS:
		if (i != r->ncalls - 1 || i < 0 || r->ended[i]) {
			r->bad++;
			break;
		}
		append(&r->args[i], &r->nargs[i], ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_CALL_END:
		if (i != r->ncalls - 1 || i < 0 || r->ended[i])
			r->bad++;
		else
			r->ended[i] = true;
		break;
	}
	return r->stop_after && r->nevents >= r->stop_after;
}

static void result_free(struct result *r)
{
	free(r->content);
	free(r->reasoning);
	for (int i = 0; i < MAXCALLS; i++)
		free(r->args[i]);
	memset(r, 0, sizeof(*r));
}

/* How to parse one fixture. */
struct setup {
	enum atlas_toolfmt fmt;
	bool reasoning, start_in_reasoning;
	struct json_object *tools;
};

/* Parse text fed in pieces that end at cuts[0..ncuts) (ascending). */
static void parse(const struct setup *s, const char *text, size_t n, const size_t *cuts, int ncuts,
		  uint64_t seed, struct result *r)
{
	struct atlas_toolparse *p =
	    atlas_toolparse_new(s->fmt, s->reasoning, s->start_in_reasoning, s->tools, seed);
	size_t at = 0;
	memset(r, 0, sizeof(*r));
	for (int k = 0; k <= ncuts; k++) {
		size_t end = k < ncuts ? cuts[k] : n;
		CHECK_EQ_INT(atlas_toolparse_feed(p, text + at, end - at, on_event, r), 0);
		at = end;
	}
	CHECK_EQ_INT(atlas_toolparse_finish(p, on_event, r), 0);
	CHECK_EQ_INT(atlas_toolparse_ncalls(p), r->ncalls);
	for (int i = 0; i < r->ncalls; i++)
		CHECK(atlas_toolparse_call_complete(p, i) == r->ended[i]);
	atlas_toolparse_free(p);
}

static bool same_text(const char *a, size_t na, const char *b, size_t nb)
{
	return na == nb && (!na || !memcmp(a, b, na));
}

/* Are two results equal (what any split must give)? */
static bool same(const struct result *a, const struct result *b)
{
	if (!same_text(a->content, a->ncontent, b->content, b->ncontent) ||
	    !same_text(a->reasoning, a->nreasoning, b->reasoning, b->nreasoning) ||
	    a->ncalls != b->ncalls || a->bad || b->bad)
		return false;
	for (int i = 0; i < a->ncalls; i++)
		if (strcmp(a->name[i], b->name[i]) || strcmp(a->id[i], b->id[i]) ||
		    a->ended[i] != b->ended[i] ||
		    !same_text(a->args[i], a->nargs[i], b->args[i], b->nargs[i]))
			return false;
	return true;
}

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *s = NULL;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	s = malloc((size_t)len + 1);
	*n = fread(s, 1, (size_t)len, f);
	s[*n] = '\0';
	fclose(f);
	return s;
}

/* Strict JSON text, as a client's json.loads sees it. */
static struct json_object *strict_parse(const char *s, size_t n)
{
	struct json_tokener *tk = json_tokener_new();
	struct json_object *o;
	json_tokener_set_flags(tk, JSON_TOKENER_STRICT);
	o = json_tokener_parse_ex(tk, s ? s : "", (int)n);
	if (!o || json_tokener_get_error(tk) != json_tokener_success ||
	    json_tokener_get_parse_end(tk) != n) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tk);
	return o;
}

static const char *str_of(struct json_object *o, const char *key, const char *dflt)
{
	struct json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return dflt;
	return json_object_get_string(v);
}

static bool bool_of(struct json_object *o, const char *key)
{
	struct json_object *v;
	return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

/* The one-shot result against the fixture's expectations. */
static void check_expected(const char *name, struct json_object *exp, const struct result *r)
{
	struct json_object *calls, *c, *a;
	const char *want = str_of(exp, "content", "");
	const char *wantr = str_of(exp, "reasoning_content", "");

	if (!same_text(r->content, r->ncontent, want, strlen(want)))
		harness_fail(__FILE__, __LINE__, "%s: content \"%s\", expected \"%s\"", name,
			     r->content ? r->content : "", want);
	if (!same_text(r->reasoning, r->nreasoning, wantr, strlen(wantr)))
		harness_fail(__FILE__, __LINE__, "%s: reasoning \"%s\", expected \"%s\"", name,
			     r->reasoning ? r->reasoning : "", wantr);
	json_object_object_get_ex(exp, "calls", &calls);
	if ((size_t)r->ncalls != json_object_array_length(calls)) {
		harness_fail(__FILE__, __LINE__, "%s: %d calls, expected %zu", name, r->ncalls,
			     json_object_array_length(calls));
		return;
	}
	CHECK_EQ_INT(r->bad, 0);
	for (int i = 0; i < r->ncalls; i++) {
		c = json_object_array_get_idx(calls, (size_t)i);
		CHECK_STR(r->name[i], str_of(c, "name", ""));
		if (json_object_object_get_ex(c, "arguments_text", &a)) {
			const char *t = json_object_get_string(a);
			CHECK(same_text(r->args[i], r->nargs[i], t, strlen(t)));
			CHECK(r->ended[i] == bool_of(c, "complete"));
			continue;
		}
		json_object_object_get_ex(c, "arguments", &a);
		struct json_object *got = strict_parse(r->args[i], r->nargs[i]);
		if (!got || !json_object_equal(got, a) || !r->ended[i])
			harness_fail(__FILE__, __LINE__,
				     "%s: call %d arguments '%.*s', expected %s", name, i,
				     (int)r->nargs[i], r->args[i] ? r->args[i] : "",
				     json_object_to_json_string(a));
		json_object_put(got);
	}
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Every split gives the one-shot result. */
static void check_splits(const char *name, const struct setup *s, const char *t, size_t n,
			 const struct result *one)
{
	struct result r;
	size_t cuts[64];
	int fails = 0;

	for (size_t i = 1; i < n && fails < 3; i++) {
		cuts[0] = i;
		parse(s, t, n, cuts, 1, 7, &r);
		if (!same(&r, one) && ++fails)
			harness_fail(__FILE__, __LINE__, "%s: split at %zu differs", name, i);
		result_free(&r);
	}
	for (size_t i = 1; n < 400 && i < n && fails < 3; i++)
		for (size_t j = i + 1; j < n && fails < 3; j++) {
			cuts[0] = i;
			cuts[1] = j;
			parse(s, t, n, cuts, 2, 7, &r);
			if (!same(&r, one) && ++fails)
				harness_fail(__FILE__, __LINE__, "%s: split at %zu, %zu differs",
					     name, i, j);
			result_free(&r);
		}
	/* byte by byte: every boundary at once */
	struct atlas_toolparse *p =
	    atlas_toolparse_new(s->fmt, s->reasoning, s->start_in_reasoning, s->tools, 7);
	memset(&r, 0, sizeof(r));
	for (size_t i = 0; i < n; i++)
		atlas_toolparse_feed(p, t + i, 1, on_event, &r);
	atlas_toolparse_finish(p, on_event, &r);
	atlas_toolparse_free(p);
	if (!same(&r, one))
		harness_fail(__FILE__, __LINE__, "%s: byte-by-byte feeding differs", name);
	result_free(&r);
	/* random splits */
	uint64_t x = 0x9e3779b97f4a7c15ull ^ n;
	for (int k = 0; k < 200 && fails < 3; k++) {
		int nc = (int)(rnd(&x) % 64);
		for (int i = 0; i < nc; i++)
			cuts[i] = n ? rnd(&x) % (n + 1) : 0;
		for (int i = 1; i < nc; i++) /* insertion sort */
			for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
				size_t tmp = cuts[j];
				cuts[j] = cuts[j - 1];
				cuts[j - 1] = tmp;
			}
		parse(s, t, n, cuts, nc, 7, &r);
		if (!same(&r, one) && ++fails)
			harness_fail(__FILE__, __LINE__, "%s: random split %d differs", name, k);
		result_free(&r);
	}
}

static int fixture_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Each NAME.txt of tests/fixtures/toolcall with its NAME.json: the
 * format, reasoning flags, tools, and what must come out. */
static void test_fixtures(void)
{
	char dir[1024], path[1200];
	char *names[256];
	int nn = 0;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/tests/fixtures/toolcall", harness_srcdir());
	DIR *d = opendir(dir);
	CHECK(d != NULL);
	if (!d)
		return;
	while ((de = readdir(d)) && nn < 256) {
		size_t l = strlen(de->d_name);
		if (l > 4 && !strcmp(de->d_name + l - 4, ".txt"))
			names[nn++] = strndup(de->d_name, l - 4);
	}
	closedir(d);
	qsort(names, (size_t)nn, sizeof(names[0]), fixture_cmp);
	CHECK(nn >= 20);
	for (int i = 0; i < nn; i++) {
		size_t n;
		snprintf(path, sizeof(path), "%s/%s.json", dir, names[i]);
		struct json_object *exp = json_object_from_file(path);
		snprintf(path, sizeof(path), "%s/%s.txt", dir, names[i]);
		char *text = slurp(path, &n);
		if (!exp || !text) {
			harness_fail(__FILE__, __LINE__, "%s: cannot read the fixture", names[i]);
			json_object_put(exp);
			free(text);
			free(names[i]);
			continue;
		}
		struct setup s = {0};
		s.fmt = atlas_toolfmt_from_name(str_of(exp, "format", "none"));
		s.reasoning = bool_of(exp, "reasoning");
		s.start_in_reasoning = bool_of(exp, "start_in_reasoning");
		json_object_object_get_ex(exp, "tools", &s.tools);
		struct result one;
		parse(&s, text, n, NULL, 0, 7, &one);
		check_expected(names[i], exp, &one);
		check_splits(names[i], &s, text, n, &one);
		result_free(&one);
		json_object_put(exp);
		free(text);
		free(names[i]);
	}
}

/* Parse a string in one piece. */
static void parse1(enum atlas_toolfmt fmt, bool reasoning, bool sir, const char *text,
		   struct result *r)
{
	struct setup s = {.fmt = fmt, .reasoning = reasoning, .start_in_reasoning = sir};
	parse(&s, text, strlen(text), NULL, 0, 42, r);
}

static bool alnum_run(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9')))
			return false;
	return strlen(s) == n;
}

static void test_ids(void)
{
	const char *h = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"
			"<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
	struct result r, r2;
	parse1(ATLAS_TOOLFMT_HERMES, false, false, h, &r);
	CHECK_EQ_INT(r.ncalls, 2);
	for (int i = 0; i < 2; i++) {
		CHECK(!strncmp(r.id[i], "call_", 5));
		CHECK(alnum_run(r.id[i] + 5, 24));
	}
	CHECK(strcmp(r.id[0], r.id[1]));
	parse1(ATLAS_TOOLFMT_HERMES, false, false, h, &r2);
	CHECK(same(&r, &r2)); /* same seed, same ids */
	result_free(&r2);
	struct setup s = {.fmt = ATLAS_TOOLFMT_HERMES};
	parse(&s, h, strlen(h), NULL, 0, 43, &r2);
	CHECK(strcmp(r.id[0], r2.id[0]));
	result_free(&r);
	result_free(&r2);

	parse1(ATLAS_TOOLFMT_MISTRAL, false, false,
	       "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS][{\"name\": \"b\", \"arguments\": {\"x\": 1}}]",
	       &r);
	CHECK_EQ_INT(r.ncalls, 2);
	for (int i = 0; i < r.ncalls; i++)
		CHECK(alnum_run(r.id[i], 9));
	result_free(&r);
}

/* Markers inside reasoning are reasoning; with and without a <think>
 * left open by the prompt. */
static void test_reasoning(void)
{
	struct result r;
	parse1(ATLAS_TOOLFMT_HERMES, true, true,
	       "Maybe <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>?</think>\n\nNo.",
	       &r);
	CHECK_EQ_INT(r.ncalls, 0);
	CHECK_STR(r.reasoning,
		  "Maybe <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>?");
	CHECK_STR(r.content, "No.");
	result_free(&r);

	/* output starting with <think>, reasoning cut off by the end */
	parse1(ATLAS_TOOLFMT_QWEN3_CODER, true, false, "\n<think>half a thought </thi", &r);
	CHECK_STR(r.reasoning, "half a thought </thi");
	CHECK(r.content == NULL);
	result_free(&r);

	/* reasoning off: <think> is content */
	parse1(ATLAS_TOOLFMT_HERMES, false, false, "<think>x</think>y", &r);
	CHECK_STR(r.content, "<think>x</think>y");
	CHECK(r.reasoning == NULL);
	result_free(&r);

	/* a call after reasoning */
	parse1(ATLAS_TOOLFMT_MISTRAL, true, false,
	       "<think>use f</think>\n[TOOL_CALLS]f[ARGS]{\"a\": [1]}", &r);
	CHECK_STR(r.reasoning, "use f");
	CHECK_EQ_INT(r.ncalls, 1);
	CHECK_STR(r.args[0], "{\"a\": [1]}");
	CHECK(r.content == NULL);
	result_free(&r);

	CHECK(atlas_reasoning_open_in_prompt("<|im_start|>assistant\n<think>\n", 29));
	CHECK(!atlas_reasoning_open_in_prompt("<think>\n\n</think>\n\n", 19));
	CHECK(!atlas_reasoning_open_in_prompt("plain", 5));
	CHECK(atlas_reasoning_open_in_prompt("<think></think> <think>", 23));
}

/* What the end of the output does to a call left open. */
static void test_truncated(void)
{
	struct result r;
	/* JSON complete, closing tag missing: a call */
	parse1(ATLAS_TOOLFMT_HERMES, false, false,
	       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_", &r);
	CHECK_EQ_INT(r.ncalls, 1);
	CHECK(r.ended[0]);
	CHECK(r.content == NULL);
	result_free(&r);
	/* arguments cut: CALL, unended */
	parse1(ATLAS_TOOLFMT_HERMES, false, false,
	       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": ", &r);
	CHECK_EQ_INT(r.ncalls, 1);
	CHECK(!r.ended[0]);
	CHECK_STR(r.args[0], "{\"a\": ");
	result_free(&r);
	/* before the call: the text is content */
	parse1(ATLAS_TOOLFMT_HERMES, false, false, "Hi <tool_call>\n{\"name\": \"f\"", &r);
	CHECK_EQ_INT(r.ncalls, 0);
	CHECK_STR(r.content, "Hi <tool_call>\n{\"name\": \"f\"");
	result_free(&r);
	/* a partial marker at the end is content */
	parse1(ATLAS_TOOLFMT_HERMES, false, false, "Hi <tool_ca", &r);
	CHECK_STR(r.content, "Hi <tool_ca");
	result_free(&r);
	/* mistral: a number as the whole arguments, complete at the end */
	parse1(ATLAS_TOOLFMT_MISTRAL, false, false, "[TOOL_CALLS]f[ARGS]12", &r);
	CHECK_EQ_INT(r.ncalls, 1);
	CHECK(r.ended[0]);
	CHECK_STR(r.args[0], "12");
	result_free(&r);
	/* qwen3_coder: the parameters complete so far, the cut one as content */
	parse1(ATLAS_TOOLFMT_QWEN3_CODER, false, false,
	       "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\nhal", &r);
	CHECK_EQ_INT(r.ncalls, 1);
	CHECK(r.ended[0]);
	CHECK_STR(r.args[0], "{\"a\": 1}");
	CHECK_STR(r.content, "\n<parameter=b>\nhal");
	result_free(&r);
	/* qwen3_coder: no parameters */
	parse1(ATLAS_TOOLFMT_QWEN3_CODER, false, false,
	       "<tool_call>\n<function=now>\n</function>\n</tool_call>", &r);
	CHECK_EQ_INT(r.ncalls, 1);
	CHECK_STR(r.args[0], "{}");
	result_free(&r);
	/* hermes: no arguments key */
	parse1(ATLAS_TOOLFMT_HERMES, false, false, "<tool_call>{\"name\": \"now\"}</tool_call>",
	       &r);
	CHECK_EQ_INT(r.ncalls, 1);
	CHECK_STR(r.args[0], "{}");
	result_free(&r);
}

/* Invalid JSON the scanner must refuse (each as hermes arguments). */
static void test_strict_json(void)
{
	static const char *const bad[] = {
	    "{\"a\": 01}",
	    "{\"a\": 1.}",
	    "{\"a\": .5}",
	    "{\"a\": tru}",
	    "{\"a\": \"\x01\"}",
	    "{\"a\": \"\\x\"}",
	    "{\"a\": \"\\u12g4\"}",
	    "{a: 1}",
	    "{\"a\" 1}",
	    "[1,]",
	    "{\"a\": \"\xc3\x28\"}",
	    "{\"a\": \"\xed\xa0\x80\"}",
	    "{\"a\": 1e}",
	    "{\"a\": -}",
	    "{\"a\": [}",
	    "{\"a\": nul}",
	};
	static const char *const good[] = {
	    "{\"a\": -0.5e+10}",
	    "[]",
	    "{\"a\": \"\\ud83d\\ude80\\/\"}",
	    "\"s\"",
	    "{\"a\":[[],{}]}",
	    "{\"a\": \"\xf0\x9f\x9a\x80\"}",
	    "-1",
	    "true",
	};
	char buf[256];
	struct result r;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(buf, sizeof(buf),
			 "<tool_call>{\"name\": \"f\", \"arguments\": %s}</tool_call>", bad[i]);
		parse1(ATLAS_TOOLFMT_HERMES, false, false, buf, &r);
		if (r.ncalls != 1 || r.ended[0])
			harness_fail(__FILE__, __LINE__, "accepted bad JSON %s", bad[i]);
		result_free(&r);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		snprintf(buf, sizeof(buf),
			 "<tool_call>{\"name\": \"f\", \"arguments\": %s}</tool_call>", good[i]);
		parse1(ATLAS_TOOLFMT_HERMES, false, false, buf, &r);
		if (r.ncalls != 1 || !r.ended[0] || !r.args[0] || strcmp(r.args[0], good[i]))
			harness_fail(__FILE__, __LINE__, "refused good JSON %s", good[i]);
		result_free(&r);
	}
	/* nesting past the limit is an error, not a crash */
	char deep[600] = "<tool_call>{\"name\": \"f\", \"arguments\": ";
	size_t l = strlen(deep);
	for (int i = 0; i < 200; i++)
		deep[l++] = '[';
	deep[l] = '\0';
	parse1(ATLAS_TOOLFMT_HERMES, false, false, deep, &r);
	CHECK_EQ_INT(r.ncalls, 1);
	CHECK(!r.ended[0]);
	result_free(&r);
}

/* A non-zero callback return stops the feed and is returned. */
static void test_stop(void)
{
	struct result r;
	memset(&r, 0, sizeof(r));
	r.stop_after = 2;
	struct atlas_toolparse *p =
	    atlas_toolparse_new(ATLAS_TOOLFMT_HERMES, false, false, NULL, 1);
	const char *t = "Hi <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> more";
	CHECK_EQ_INT(atlas_toolparse_feed(p, t, strlen(t), on_event, &r), 1);
	CHECK_EQ_INT(r.nevents, 2);
	atlas_toolparse_free(p);
	result_free(&r);
}

static void test_names(void)
{
	CHECK_EQ_INT(atlas_toolfmt_from_name("hermes"), ATLAS_TOOLFMT_HERMES);
	CHECK_EQ_INT(atlas_toolfmt_from_name("qwen3_coder"), ATLAS_TOOLFMT_QWEN3_CODER);
	CHECK_EQ_INT(atlas_toolfmt_from_name("llama3_json"), ATLAS_TOOLFMT_LLAMA3_JSON);
	CHECK_EQ_INT(atlas_toolfmt_from_name("mistral"), ATLAS_TOOLFMT_MISTRAL);
	CHECK_EQ_INT(atlas_toolfmt_from_name("none"), ATLAS_TOOLFMT_NONE);
	CHECK_EQ_INT(atlas_toolfmt_from_name("pythonic"), -1);
	CHECK_STR(atlas_toolfmt_name(ATLAS_TOOLFMT_QWEN3_CODER), "qwen3_coder");
}

static void test_detect(void)
{
	CHECK_EQ_INT(atlas_toolfmt_detect("{{ '<tool_call>\\n<function=' }}", NULL),
		     ATLAS_TOOLFMT_QWEN3_CODER);
	CHECK_EQ_INT(atlas_toolfmt_detect("{{- '<tool_call>\\n' }}", NULL), ATLAS_TOOLFMT_HERMES);
	CHECK_EQ_INT(atlas_toolfmt_detect("{{ '[TOOL_CALLS]' }}", NULL), ATLAS_TOOLFMT_MISTRAL);
	CHECK_EQ_INT(atlas_toolfmt_detect("<|start_header_id|>{\"name\": function name, "
					  "\"parameters\": dictionary}",
					  NULL),
		     ATLAS_TOOLFMT_LLAMA3_JSON);
	CHECK_EQ_INT(atlas_toolfmt_detect("{{ '<|python_tag|>' }}", NULL),
		     ATLAS_TOOLFMT_LLAMA3_JSON);
	CHECK_EQ_INT(atlas_toolfmt_detect("{{ messages }}", NULL), ATLAS_TOOLFMT_NONE);
	CHECK_EQ_INT(atlas_toolfmt_detect(NULL, NULL), ATLAS_TOOLFMT_NONE);
	CHECK(atlas_reasoning_detect("<think>{{ x }}</think>", NULL));
	CHECK(!atlas_reasoning_detect("{{ x }}", NULL));

	/* the real Qwen3 template of tests/fixtures/chat */
	char path[1024];
	size_t n;
	snprintf(path, sizeof(path), "%s/tests/fixtures/chat/qwen3/tokenizer_config.json",
		 harness_srcdir());
	struct json_object *cfg = json_object_from_file(path);
	const char *tmpl = str_of(cfg, "chat_template", NULL);
	CHECK(tmpl != NULL);
	CHECK_EQ_INT(atlas_toolfmt_detect(tmpl, NULL), ATLAS_TOOLFMT_HERMES);
	CHECK(atlas_reasoning_detect(tmpl, NULL));
	json_object_put(cfg);

	/* the vocabulary alone: the default model has no tool tokens */
	snprintf(path, sizeof(path), "%s/models/default", harness_srcdir());
	struct atlas_tok *tok = atlas_tok_load(path);
	CHECK(tok != NULL);
	CHECK_EQ_INT(atlas_toolfmt_detect(NULL, tok), ATLAS_TOOLFMT_NONE);
	CHECK(!atlas_reasoning_detect(NULL, tok));
	atlas_tok_free(tok);
	(void)n;
}

static const char *const grammar_tools =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
    "{\"type\": \"integer\"}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", "
    "\"function\": {\"name\": \"now\"}}]";

/* The grammar's rules, as text. */
static void test_grammar_text(void)
{
	struct json_object *tools = json_tokener_parse(grammar_tools);
	char *g = atlas_toolfmt_grammar(ATLAS_TOOLFMT_HERMES, tools, NULL, true);
	CHECK(g != NULL);
	CHECK_CONTAINS(g, "root ::= call ( \"\\n\" call )*\n");
	CHECK_CONTAINS(g, "call ::= tool0 | tool1\n");
	CHECK_CONTAINS(g, "tool0 ::= \"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", "
			  "\\\"arguments\\\": \" t0-root \"}\\n</tool_call>\"\n");
	CHECK_CONTAINS(g, "t0-root ::=");
	CHECK_CONTAINS(g, "t1-root ::="); /* no parameters: {} */
	free(g);

	g = atlas_toolfmt_grammar(ATLAS_TOOLFMT_HERMES, tools, "now", false);
	CHECK(g != NULL);
	CHECK_CONTAINS(g, "root ::= call\n");
	CHECK_CONTAINS(g, "call ::= tool1\n");
	CHECK(g && !strstr(g, "get_weather"));
	free(g);

	g = atlas_toolfmt_grammar(ATLAS_TOOLFMT_QWEN3_CODER, tools, NULL, true);
	CHECK_CONTAINS(g, "tool0 ::= \"<tool_call>\\n<function=get_weather>\\n\" tool0-params "
			  "\"</function>\\n</tool_call>\"\n");
	CHECK_CONTAINS(g, "tool0-params ::= tool0-p0 tool0-p1?\n");
	CHECK_CONTAINS(g, "tool0-p0 ::= \"<parameter=\" \"city\" \">\\n\" xml-text "
			  "\"\\n</parameter>\\n\"\n");
	CHECK_CONTAINS(g, "tool0-p1 ::= \"<parameter=\" \"days\" \">\\n\" t0-p1-root");
	free(g);

	g = atlas_toolfmt_grammar(ATLAS_TOOLFMT_LLAMA3_JSON, tools, NULL, true);
	CHECK_CONTAINS(g, "root ::= call ( \"; \" call )*\n");
	CHECK_CONTAINS(g, "tool0 ::= \"{\\\"name\\\": \\\"get_weather\\\", \\\"parameters\\\": \" "
			  "t0-root \"}\"\n");
	free(g);

	g = atlas_toolfmt_grammar(ATLAS_TOOLFMT_MISTRAL, tools, NULL, true);
	CHECK_CONTAINS(g, "root ::= \"[TOOL_CALLS][\" call ( \", \" call )* \"]\"\n");
	CHECK_CONTAINS(g, "tool1 ::= \"{\\\"name\\\": \\\"now\\\", \\\"arguments\\\": \" t1-root "
			  "\"}\"\n");
	free(g);
	json_object_put(tools);
}

/* Bad tools name the problem. */
static void test_grammar_errors(void)
{
	static const struct {
		const char *tools, *only, *msg;
	} cases[] = {
	    {"{}", NULL, "tools must be a non-empty array"},
	    {"[]", NULL, "tools must be a non-empty array"},
	    {"[1]", NULL, "tools[0] is not an object"},
	    {"[{\"function\": {\"name\": \"f\"}}]", NULL, "tools[0].type must be \"function\""},
	    {"[{\"type\": \"function\"}]", NULL, "tools[0].function is missing"},
	    {"[{\"type\": \"function\", \"function\": {\"name\": 3}}]", NULL,
	     "tools[0].function.name is missing or not a string"},
	    {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": []}}]",
	     NULL, "tools[0].function.parameters is not an object"},
	    {"[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", "x",
	     "tool_choice names function 'x', which is not in tools"},
	    {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
	     "\"object\", \"properties\": {\"a\": {\"type\": \"string\", \"contentSchema\": "
	     "{}}}}}}]",
	     NULL, "tools[0] parameters"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct json_object *tools = json_tokener_parse(cases[i].tools);
		atlas_error_clear();
		char *g = atlas_toolfmt_grammar(ATLAS_TOOLFMT_HERMES, tools, cases[i].only, true);
		CHECK(g == NULL);
		CHECK_CONTAINS(atlas_errmsg(), cases[i].msg);
		free(g);
		json_object_put(tools);
	}
	CHECK(atlas_toolfmt_grammar(ATLAS_TOOLFMT_NONE, NULL, NULL, true) == NULL);
}

/* The grammar compiles for a real vocabulary, accepts what the model
 * would write, and the parser finds the calls in it. */
static void test_grammar_roundtrip(void)
{
	static const struct {
		enum atlas_toolfmt fmt;
		const char *text;
	} cases[] = {
	    {ATLAS_TOOLFMT_HERMES,
	     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
	     "\"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
	     "</tool_call>"},
	    {ATLAS_TOOLFMT_QWEN3_CODER,
	     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
	     "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
	     "<function=now>\n</function>\n</tool_call>"},
	    {ATLAS_TOOLFMT_LLAMA3_JSON,
	     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}; "
	     "{\"name\": \"now\", \"parameters\": {}}"},
	    {ATLAS_TOOLFMT_MISTRAL,
	     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
	     "\"days\": 3}}, {\"name\": \"now\", \"arguments\": {}}]"},
	};
	char path[1024];
	snprintf(path, sizeof(path), "%s/models/default", harness_srcdir());
	struct atlas_tok *tok = atlas_tok_load(path);
	CHECK(tok != NULL);
	int32_t eos = atlas_tok_lookup(tok, "<|im_end|>");
	struct atlas_grammar_vocab *v = atlas_grammar_vocab_new(tok, 0, &eos, 1);
	CHECK(v != NULL);
	struct json_object *tools = json_tokener_parse(grammar_tools);
	struct json_object *want = json_tokener_parse("{\"city\": \"Paris\", \"days\": 3}");
	for (size_t i = 0; v && i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *g = atlas_toolfmt_grammar(cases[i].fmt, tools, NULL, true);
		struct atlas_grammar *gr = g ? atlas_grammar_compile(g, strlen(g), v) : NULL;
		if (!gr) {
			harness_fail(__FILE__, __LINE__, "%s: %s", atlas_toolfmt_name(cases[i].fmt),
				     atlas_errmsg());
			free(g);
			continue;
		}
		struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(gr);
		CHECK_EQ_INT(atlas_grammar_accept_bytes(m, cases[i].text, strlen(cases[i].text)),
			     0);
		CHECK(atlas_grammar_can_end(m));
		atlas_grammar_matcher_free(m);
		/* a function not in tools does not fit */
		m = atlas_grammar_matcher_new(gr);
		const char *bad =
		    cases[i].fmt == ATLAS_TOOLFMT_QWEN3_CODER ? "<tool_call>\n<function=x>"
		    : cases[i].fmt == ATLAS_TOOLFMT_MISTRAL   ? "[TOOL_CALLS][{\"name\": \"x\""
		    : cases[i].fmt == ATLAS_TOOLFMT_HERMES    ? "<tool_call>\n{\"name\": \"x\""
							      : "{\"name\": \"x\"";
		CHECK(atlas_grammar_accept_bytes(m, bad, strlen(bad)) != 0);
		atlas_grammar_matcher_free(m);
		atlas_grammar_free(gr);
		free(g);

		struct result r;
		struct setup s = {.fmt = cases[i].fmt, .tools = tools};
		parse(&s, cases[i].text, strlen(cases[i].text), NULL, 0, 1, &r);
		CHECK_EQ_INT(r.ncalls, 2);
		CHECK_STR(r.name[0], "get_weather");
		CHECK_STR(r.name[1], "now");
		struct json_object *got = strict_parse(r.args[0], r.nargs[0]);
		CHECK(got && json_object_equal(got, want));
		json_object_put(got);
		CHECK_STR(r.args[1], "{}");
		CHECK(r.ended[0] && r.ended[1]);
		CHECK(r.content == NULL);
		result_free(&r);
	}
	json_object_put(want);
	json_object_put(tools);
	atlas_grammar_vocab_free(v);
	atlas_tok_free(tok);
}

/* One random output of grammar g: a walk over the allowed tokens that
 * prefers closing bytes (so strings and containers end) and the end when
 * it is allowed. Returns the text's length in out, or -1 when the walk
 * did not end within the step budget. */
static long grammar_walk(const struct atlas_tok *tok, const struct atlas_grammar_vocab *v,
			 const struct atlas_grammar *g, int32_t eos, uint64_t *x, char *out,
			 size_t cap)
{
	int64_t nv = atlas_grammar_vocab_size(v), words = atlas_grammar_mask_words(v);
	uint32_t *mask = calloc((size_t)words, sizeof(uint32_t));
	int32_t *ids = malloc((size_t)nv * sizeof(int32_t));
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	long len = -1;
	size_t n = 0;

	for (int step = 0; step < 600; step++) {
		int nids = 0, nclose = 0;
		atlas_grammar_fill_mask(m, mask);
		for (int32_t id = 0; id < nv; id++)
			if (mask[id / 32] >> (id % 32) & 1)
				ids[nids++] = id;
		if (!nids)
			break;
		bool can_eos = mask[eos / 32] >> (eos % 32) & 1;
		if (can_eos && rnd(x) % 2) {
			len = (long)n;
			break;
		}
		/* closing bytes first: move them to the front */
		for (int i = 0; i < nids; i++) {
			size_t pl;
			const char *pc = atlas_tok_piece(tok, ids[i], &pl);
			if (ids[i] != eos && pl == 1 && strchr("\"}]>\n", pc[0])) {
				int32_t t = ids[nclose];
				ids[nclose++] = ids[i];
				ids[i] = t;
			}
		}
		int32_t id;
		do
			id = nclose && rnd(x) % 2 ? ids[rnd(x) % (uint64_t)nclose]
						  : ids[rnd(x) % (uint64_t)nids];
		while (id == eos && nids > 1);
		size_t pl;
		const char *pc = atlas_tok_piece(tok, id, &pl);
		if (atlas_grammar_accept(m, id) || n + pl >= cap)
			break;
		memcpy(out + n, pc, pl);
		n += pl;
	}
	out[n] = '\0';
	atlas_grammar_matcher_free(m);
	free(ids);
	free(mask);
	return len;
}

/* Random outputs that the grammar allows are calls to the parser, with
 * strict JSON arguments and no content. */
static void test_grammar_walks(void)
{
	static const enum atlas_toolfmt fmts[] = {ATLAS_TOOLFMT_HERMES, ATLAS_TOOLFMT_QWEN3_CODER,
						  ATLAS_TOOLFMT_LLAMA3_JSON, ATLAS_TOOLFMT_MISTRAL};
	char path[1024];
	static char text[1 << 16];
	uint64_t x = 88172645463325252ull;
	int ended = 0;

	snprintf(path, sizeof(path), "%s/models/default", harness_srcdir());
	struct atlas_tok *tok = atlas_tok_load(path);
	int32_t eos = atlas_tok_lookup(tok, "<|im_end|>");
	struct atlas_grammar_vocab *v = atlas_grammar_vocab_new(tok, 0, &eos, 1);
	struct json_object *tools = json_tokener_parse(grammar_tools);
	for (size_t f = 0; v && f < sizeof(fmts) / sizeof(fmts[0]); f++) {
		char *gt = atlas_toolfmt_grammar(fmts[f], tools, NULL, true);
		struct atlas_grammar *g = gt ? atlas_grammar_compile(gt, strlen(gt), v) : NULL;
		CHECK(g != NULL);
		for (int k = 0; g && k < 12; k++) {
			long n = grammar_walk(tok, v, g, eos, &x, text, sizeof(text));
			if (n < 0)
				continue;
			ended++;
			struct result r;
			struct setup s = {.fmt = fmts[f], .tools = tools};
			parse(&s, text, (size_t)n, NULL, 0, 1, &r);
			bool ok = r.ncalls >= 1 && !r.bad && !r.content;
			for (int i = 0; ok && i < r.ncalls; i++) {
				struct json_object *a = strict_parse(r.args[i], r.nargs[i]);
				ok = r.ended[i] && json_object_is_type(a, json_type_object) &&
				     (!strcmp(r.name[i], "get_weather") ||
				      !strcmp(r.name[i], "now"));
				json_object_put(a);
			}
			if (!ok)
				harness_fail(__FILE__, __LINE__,
					     "%s: grammar output not read back: %s",
					     atlas_toolfmt_name(fmts[f]), text);
			result_free(&r);
		}
		atlas_grammar_free(g);
		free(gt);
	}
	CHECK(ended >= 16); /* most walks end */
	json_object_put(tools);
	atlas_grammar_vocab_free(v);
	atlas_tok_free(tok);
}

int main(void)
{
	RUN(test_fixtures);
	RUN(test_ids);
	RUN(test_reasoning);
	RUN(test_truncated);
	RUN(test_strict_json);
	RUN(test_stop);
	RUN(test_names);
	RUN(test_detect);
	RUN(test_grammar_text);
	RUN(test_grammar_errors);
	RUN(test_grammar_roundtrip);
	RUN(test_grammar_walks);
	return harness_done();
}
