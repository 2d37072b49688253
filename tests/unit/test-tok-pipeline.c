/* test-tok-pipeline.c - unit tests of the tokenizer.json components
 * beyond byte-level BPE: BPE over characters with byte fallback and
 * unk, normalizers (Prepend, Replace, NFKC), every Split behaviour and
 * invert, Digits, Metaspace, the decoder chain (Replace, ByteFallback,
 * Fuse, Strip, Metaspace), added tokens with Unicode lstrip/rstrip and
 * normalized matching, refusal of what is not supported, and the bound
 * on what a normalizer may output.
 *
 * Each test writes a tiny tokenizer.json whose ids are worked out by hand
 * in the comments. The real vocabularies are checked against the JS
 * reference by tests/tokverify/run. */
#include "harness.h"

#include "../../lib/core/error.h"
#include "../../lib/tok/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ids: 0 <unk>, 1 <s>, 2 </s>, 3 <0xC3>, 4 <0xA9>, 5 ▁, 6 a, 7 b, 8 ▁a,
 * 9 ab, 10 ▁ab, 11 -, 12 a-, 13 -a, 14 --, 15 1, 16 2, 17 12;
 * merges by rank: "▁ a", "a b", "▁a b", "a -", "- a", "- -", "1 2". */
#define VOCAB                                                                                      \
	"{\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"<0xC3>\": 3, \"<0xA9>\": 4, \"\xe2\x96\x81\": 5, " \
	"\"a\": 6, \"b\": 7, \"\xe2\x96\x81" "a\": 8, \"ab\": 9, \"\xe2\x96\x81" "ab\": 10, "        \
	"\"-\": 11, \"a-\": 12, \"-a\": 13, \"--\": 14, \"1\": 15, \"2\": 16, \"12\": 17}"
#define MERGES                                                                                     \
	"[\"\xe2\x96\x81 a\", \"a b\", \"\xe2\x96\x81" "a b\", \"a -\", \"- a\", \"- -\", \"1 2\"]"

/* Write a tokenizer from its parts into a fresh directory and load it.
 * Returns NULL (and the message in *err) when loading fails. */
static struct atlas_tok *make(const char *name, const char *normalizer, const char *pretok,
			      const char *decoder, const char *added, const char *post)
{
	char dir[1024], *json = NULL;
	snprintf(dir, sizeof(dir), "%s/%s", harness_tmpdir(), name);
	mkdir(dir, 0700);
	int n = asprintf(&json,
			 "{\"version\": \"1.0\", \"added_tokens\": %s, \"normalizer\": %s,"
			 " \"pre_tokenizer\": %s, \"post_processor\": %s, \"decoder\": %s,"
			 " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"fuse_unk\": true,"
			 " \"unk_token\": \"<unk>\", \"vocab\": " VOCAB ", \"merges\": " MERGES "}}",
			 added ? added : "[]", normalizer ? normalizer : "null",
			 pretok ? pretok : "null", post ? post : "null",
			 decoder ? decoder : "{\"type\": \"Fuse\"}");
	CHECK(n > 0);
	free(harness_write(dir, "tokenizer.json", json, strlen(json)));
	free(json);
	return atlas_tok_load(dir);
}

static void check_ids(const struct atlas_tok *tok, const char *text, bool special,
		      const int32_t *want, size_t n, int line)
{
	int32_t *ids = NULL;
	size_t got = 0;
	if (!tok || atlas_tok_encode(tok, text, strlen(text), special, &ids, &got)) {
		harness_fail(__FILE__, line, "cannot encode '%s': %s", text, atlas_errmsg());
		return;
	}
	bool same = got == n;
	for (size_t i = 0; same && i < n; i++)
		same = ids[i] == want[i];
	if (!same) {
		char buf[512];
		size_t w = 0;
		for (size_t i = 0; i < got && w < sizeof(buf) - 16; i++)
			w += (size_t)snprintf(buf + w, sizeof(buf) - w, " %d", ids[i]);
		buf[w] = '\0';
		harness_fail(__FILE__, line, "'%s' encodes to [%s ], not as expected", text, buf);
	}
	free(ids);
}

#define ENC(tok, text, special, ...)                                                               \
	do {                                                                                       \
		const int32_t want_[] = {__VA_ARGS__};                                             \
		check_ids(tok, text, special, want_, sizeof(want_) / sizeof(want_[0]), __LINE__);  \
	} while (0)

/* Decode through the whole-sequence decoder and the stream; both must
 * give `want`. */
static void check_dec(const struct atlas_tok *tok, const int32_t *ids, size_t n, const char *want,
		      int line)
{
	char *out = NULL, buf[256], streamed[256];
	size_t len = 0, w = 0;
	if (!tok || atlas_tok_decode(tok, ids, n, &out, &len)) {
		harness_fail(__FILE__, line, "cannot decode: %s", atlas_errmsg());
		return;
	}
	if (len != strlen(want) || memcmp(out, want, len))
		harness_fail(__FILE__, line, "decoded '%s', expected '%s'", out, want);
	struct atlas_tok_stream st;
	atlas_tok_stream_init(&st, tok);
	for (size_t i = 0; i <= n; i++) {
		int64_t k = i < n ? atlas_tok_stream_push(&st, ids[i], buf, sizeof(buf))
				  : atlas_tok_stream_flush(&st, buf, sizeof(buf));
		CHECK(k >= 0 && w + (size_t)k < sizeof(streamed));
		if (k < 0 || w + (size_t)k >= sizeof(streamed))
			break;
		memcpy(streamed + w, buf, (size_t)k);
		w += (size_t)k;
	}
	if (w != len || memcmp(streamed, out, len))
		harness_fail(__FILE__, line, "streamed '%.*s', whole decode '%s'", (int)w, streamed, out);
	free(out);
}

#define DEC(tok, want, ...)                                                                        \
	do {                                                                                       \
		const int32_t ids_[] = {__VA_ARGS__};                                              \
		check_dec(tok, ids_, sizeof(ids_) / sizeof(ids_[0]), want, __LINE__);              \
	} while (0)

#define LLAMA_NORM                                                                                 \
	"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": "         \
	"\"\xe2\x96\x81\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "             \
	"\"content\": \"\xe2\x96\x81\"}]}"
#define LLAMA_DEC                                                                                  \
	"{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": " \
	"\"\xe2\x96\x81\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": "          \
	"\"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}"
#define BOS_POST                                                                                   \
	"{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "    \
	"\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": " \
	"{\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}}}"
#define SPECIALS                                                                                   \
	"[{\"id\": 1, \"content\": \"<s>\", \"special\": true, \"lstrip\": false, \"rstrip\": "     \
	"false, \"normalized\": false, \"single_word\": false}]"

/* Llama 2 style: Prepend + Replace normalizer, no pre-tokenizer, byte
 * fallback, unk, and the Replace/ByteFallback/Fuse/Strip decoder. */
static void test_sentencepiece(void)
{
	struct atlas_tok *tok = make("sp", LLAMA_NORM, NULL, LLAMA_DEC, SPECIALS, BOS_POST);
	if (!tok) {
		harness_fail(__FILE__, __LINE__, "load: %s", atlas_errmsg());
		return;
	}
	/* "ab" -> "▁ab": ▁ a b, "▁ a" first, then "▁a b" */
	ENC(tok, "ab", true, 1, 10);
	ENC(tok, "ab", false, 10);
	/* é is not in the vocabulary: its bytes C3 A9 fall back to 3, 4 */
	ENC(tok, "ab \xc3\xa9", false, 10, 5, 3, 4);
	/* x and y are in neither: one fused <unk> */
	ENC(tok, "xy", false, 5, 0);
	/* every span between added tokens gets its own Prepend */
	ENC(tok, "a<s> a", false, 8, 1, 5, 8);
	/* Strip drops the leading space of the text, not after <s> */
	DEC(tok, "ab \xc3\xa9", 10, 5, 3, 4);
	DEC(tok, "<s> ab", 1, 10);
	atlas_tok_free(tok);
}

/* "a--a" under each Split behaviour on "-": the pieces decide which
 * merges ("a -" < "- a" < "- -") can apply. */
static void test_split_behaviors(void)
{
	static const struct {
		const char *behavior; /* Split behavior */
		bool invert;	      /* Split invert */
		int32_t ids[4];	      /* expected ids, -1 padded */
	} cases[] = {
		{"Isolated", false, {6, 11, 11, 6}},	  /* a - - a */
		{"Removed", false, {6, 6, -1, -1}},	  /* a a */
		{"MergedWithPrevious", false, {12, 11, 6, -1}}, /* a- - a */
		{"MergedWithNext", false, {6, 11, 13, -1}},	  /* a - -a */
		{"Contiguous", false, {6, 14, 6, -1}},	  /* a -- a */
		{"Removed", true, {11, 11, -1, -1}},	  /* the a's are the delimiters */
		{"Isolated", true, {6, 11, 11, 6}},	  /* same pieces as Isolated */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char pre[256], name[64];
		snprintf(pre, sizeof(pre),
			 "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\","
			 " \"invert\": %s}",
			 cases[i].behavior, cases[i].invert ? "true" : "false");
		snprintf(name, sizeof(name), "split%zu", i);
		struct atlas_tok *tok = make(name, NULL, pre, NULL, NULL, NULL);
		size_t n = 0;
		while (n < 4 && cases[i].ids[n] >= 0)
			n++;
		if (!tok)
			harness_fail(__FILE__, __LINE__, "load %s: %s", name, atlas_errmsg());
		else
			check_ids(tok, "a--a", false, cases[i].ids, n, __LINE__);
		atlas_tok_free(tok);
	}
	/* Without any split, the merges run over the whole word: a- -a */
	struct atlas_tok *tok = make("nosplit", NULL, NULL, NULL, NULL, NULL);
	ENC(tok, "a--a", false, 12, 13);
	atlas_tok_free(tok);
	/* A Regex pattern and a Sequence of stages */
	tok = make("seq", NULL,
		   "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
		   "{\"Regex\": \"-+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
		   "\"Digits\", \"individual_digits\": true}]}",
		   NULL, NULL, NULL);
	ENC(tok, "a--a12", false, 6, 14, 6, 15, 16);
	atlas_tok_free(tok);
}

static void test_digits_metaspace(void)
{
	struct atlas_tok *tok =
	    make("digits", NULL, "{\"type\": \"Digits\", \"individual_digits\": false}", NULL,
		 NULL, NULL);
	ENC(tok, "12", false, 17);
	atlas_tok_free(tok);
	tok = make("digits1", NULL, "{\"type\": \"Digits\", \"individual_digits\": true}", NULL,
		   NULL, NULL);
	ENC(tok, "12", false, 15, 16);
	atlas_tok_free(tok);
	/* Metaspace: "a a" -> "▁a▁a", split before each ▁; the decoder drops
	 * the ▁ of the first token. */
	const char *meta = "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", "
			   "\"prepend_scheme\": \"%s\", \"split\": %s}";
	char pre[256];
	snprintf(pre, sizeof(pre), meta, "always", "true");
	tok = make("meta", NULL, pre,
		   "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", "
		   "\"prepend_scheme\": \"always\", \"split\": true}",
		   SPECIALS, NULL);
	ENC(tok, "a a", false, 8, 8);
	ENC(tok, "ab", false, 10);
	DEC(tok, "a a", 8, 8);
	DEC(tok, "ab a", 10, 8);
	/* "always" prepends after an added token too */
	ENC(tok, "a<s>a", false, 8, 1, 8);
	atlas_tok_free(tok);
	snprintf(pre, sizeof(pre), meta, "first", "true");
	tok = make("metafirst", NULL, pre, NULL, SPECIALS, NULL);
	/* "first": only the start of the text gets ▁ */
	ENC(tok, "a<s>a", false, 8, 1, 6);
	atlas_tok_free(tok);
	snprintf(pre, sizeof(pre), meta, "never", "false");
	tok = make("metanever", NULL, pre, NULL, NULL, NULL);
	ENC(tok, "ab", false, 9);
	ENC(tok, " ab", false, 10);
	atlas_tok_free(tok);
}

static void test_normalizers(void)
{
	/* NFKC: fullwidth ａｂ -> ab, circled ① -> 1 */
	struct atlas_tok *tok = make("nfkc", "{\"type\": \"NFKC\"}", NULL, NULL, NULL, NULL);
	ENC(tok, "\xef\xbd\x81\xef\xbd\x82", false, 9);
	ENC(tok, "\xe2\x91\xa0" "2", false, 17);
	atlas_tok_free(tok);
	/* Replace with a regex */
	tok = make("replace",
		   "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"-+\"}, \"content\": \"b\"}",
		   NULL, NULL, NULL, NULL);
	ENC(tok, "a---", false, 9);
	atlas_tok_free(tok);
}

/* A normalizer of a hostile tokenizer.json may not blow a span up past
 * 64 bytes per input byte plus 4 KiB: a Replace of " " by 1,000 bytes is
 * fine for a few spaces, an error (ATLAS_ERANGE, no output) for 300 of
 * them (300,000 bytes from 600); so is a Prepend of 5,000 bytes. */
static void test_normalizer_bound(void)
{
	char big[5001], *norm = NULL, text[601];
	int32_t *ids = NULL;
	size_t n = 0;
	memset(big, '-', sizeof(big) - 1);
	big[1000] = '\0';
	CHECK(asprintf(&norm, "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"},"
		       " \"content\": \"%s\"}", big) > 0);
	struct atlas_tok *tok = make("bound1", norm, NULL, NULL, NULL, NULL);
	free(norm);
	CHECK(tok != NULL);
	CHECK_EQ_INT(atlas_tok_encode(tok, "a b", 3, false, &ids, &n), 0);
	CHECK(n >= 2);
	free(ids);
	for (size_t i = 0; i < 600; i += 2)
		memcpy(text + i, "a ", 2);
	text[600] = '\0';
	ids = NULL;
	CHECK_EQ_INT(atlas_tok_encode(tok, text, 600, false, &ids, &n), ATLAS_ERANGE);
	CHECK(ids == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "expands 600 bytes of text past 42496 bytes");
	atlas_tok_free(tok);
	/* a regex Replace is bounded the same way */
	CHECK(asprintf(&norm, "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"a\"},"
		       " \"content\": \"%s\"}", big) > 0);
	tok = make("bound2", norm, NULL, NULL, NULL, NULL);
	free(norm);
	CHECK(tok != NULL);
	CHECK_EQ_INT(atlas_tok_encode(tok, text, 600, false, &ids, &n), ATLAS_ERANGE);
	atlas_tok_free(tok);
	/* Prepend */
	memset(big, '-', sizeof(big) - 1);
	big[5000] = '\0';
	CHECK(asprintf(&norm, "{\"type\": \"Prepend\", \"prepend\": \"%s\"}", big) > 0);
	tok = make("bound3", norm, NULL, NULL, NULL, NULL);
	free(norm);
	CHECK(tok != NULL);
	CHECK_EQ_INT(atlas_tok_encode(tok, "a", 1, false, &ids, &n), ATLAS_ERANGE);
	CHECK_CONTAINS(atlas_errmsg(), "Replace or Prepend");
	/* 100 bytes of text may take it: 5,100 <= 64 * 100 + 4,096 */
	CHECK_EQ_INT(atlas_tok_encode(tok, text, 100, false, &ids, &n), 0);
	free(ids);
	atlas_tok_free(tok);
}

/* Added tokens: lstrip/rstrip take Unicode white space; a normalized
 * token is found after normalization (here NFKC), a raw one before. */
static void test_added(void)
{
	const char *added =
	    "[{\"id\": 2, \"content\": \"</s>\", \"special\": true, \"lstrip\": true, \"rstrip\": "
	    "true, \"normalized\": false, \"single_word\": false}, {\"id\": 14, \"content\": \"--\","
	    " \"special\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": true, "
	    "\"single_word\": false}]";
	struct atlas_tok *tok = make("added", "{\"type\": \"NFKC\"}", NULL, NULL, added, NULL);
	/* U+3000 before and U+00A0 + space after are absorbed */
	ENC(tok, "a\xe3\x80\x80</s>\xc2\xa0 a", false, 6, 2, 6);
	/* U+FF0D FULLWIDTH HYPHEN-MINUS normalizes to '-': "--" is found after NFKC */
	ENC(tok, "a\xef\xbc\x8d-a", false, 6, 14, 6);
	/* the fullwidth form of "</s>" is not the raw special token */
	ENC(tok, "\xef\xbc\x9c/s>", false, 0);
	DEC(tok, "a</s>a", 6, 2, 6);
	atlas_tok_free(tok);
}

static void test_refused(void)
{
	struct atlas_tok *tok = make("r1", "{\"type\": \"Lowercase\"}", NULL, NULL, NULL, NULL);
	CHECK(tok == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "normalizer 'Lowercase' is not supported");
	tok = make("r2", NULL,
		   "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Sideways\"}",
		   NULL, NULL, NULL);
	CHECK(tok == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "Split behavior 'Sideways' is not supported");
	tok = make("r3", NULL, "{\"type\": \"BertPreTokenizer\"}", NULL, NULL, NULL);
	CHECK(tok == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "pre_tokenizer 'BertPreTokenizer' is not supported");
	tok = make("r4", NULL, NULL, "{\"type\": \"WordPiece\"}", NULL, NULL);
	CHECK(tok == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "decoder 'WordPiece' is not supported");
	tok = make("r5", NULL, NULL, "null", NULL, NULL);
	CHECK(tok == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "decoder 'null' is not supported");
	tok = make("r6", NULL, "{\"type\": \"Metaspace\", \"prepend_scheme\": \"sometimes\"}", NULL,
		   NULL, NULL);
	CHECK(tok == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "prepend_scheme 'sometimes' is not supported");
}

int main(void)
{
	RUN(test_sentencepiece);
	RUN(test_split_behaviors);
	RUN(test_digits_metaspace);
	RUN(test_normalizers);
	RUN(test_normalizer_bound);
	RUN(test_added);
	RUN(test_refused);
	return harness_done();
}
