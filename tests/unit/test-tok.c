/* test-tok.c - unit tests of lib/tok: byte-level BPE from tokenizer.json.
 *
 * The fixtures in tests/fixtures/tok/ are tiny hand-written tokenizers
 * whose ids are worked out by hand in the comments below; when the lead's
 * trained tokenizer and its expected ids exist in
 * tests/fixtures/golden/tokenizer/, they are checked too. */
#include "harness.h"

#include "../../lib/core/error.h"
#include "../../lib/tok/tok.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct atlas_tok *load(const char *name)
{
	char dir[1024];
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/tok/%s", harness_srcdir(), name);
	struct atlas_tok *tok = atlas_tok_load(dir);
	if (!tok)
		printf("# cannot load '%s': %s\n", dir, atlas_errmsg());
	return tok;
}

/* Encode `text` and compare with the `n` expected ids. */
static void check_encode(const struct atlas_tok *tok, const char *text, size_t len, bool special,
			 const int32_t *want, size_t n)
{
	int32_t *ids = NULL;
	size_t got = 0;
	int rc = atlas_tok_encode(tok, text, len, special, &ids, &got);
	CHECK_EQ_INT(rc, 0);
	CHECK_EQ_INT(got, n);
	CHECK(ids != NULL);
	for (size_t i = 0; ids && i < got && i < n; i++) {
		if (ids[i] != want[i])
			harness_fail(__FILE__, __LINE__, "'%.*s': id[%zu] = %d, expected %d",
				     (int)len, text, i, ids[i], want[i]);
	}
	free(ids);
}

#define ENC(tok, text, special, ...)                                                               \
	do {                                                                                       \
		const int32_t want_[] = {__VA_ARGS__};                                             \
		check_encode(tok, text, sizeof(text) - 1, special, want_,                          \
			     sizeof(want_) / sizeof(want_[0]));                                    \
	} while (0)

/* Decode ids and compare with the expected bytes. */
static void check_decode(const struct atlas_tok *tok, const int32_t *ids, size_t n,
			 const char *want, size_t wlen)
{
	char *out = NULL;
	size_t len = 0;
	CHECK_EQ_INT(atlas_tok_decode(tok, ids, n, &out, &len), 0);
	CHECK_EQ_INT(len, wlen);
	CHECK(out && !memcmp(out, want, wlen) && out[len] == '\0');
	free(out);
}

static void test_bpe_merges(void)
{
	struct atlas_tok *tok = load("bpe");
	CHECK(tok != NULL);
	if (!tok)
		return;
	CHECK_EQ_INT(atlas_tok_vocab_size(tok), 29);
	/* "hello" merges h e -> he, l l -> ll, he ll -> hell, hell o; the
	 * regex keeps the space with "world". */
	ENC(tok, "hello world", false, 19, 24);
	/* Rank order: "l l" (rank 1) beats "l o" (rank 9). */
	ENC(tok, "llo", false, 17, 3);
	/* Equal pairs merge leftmost first. */
	ENC(tok, "lll", false, 17, 2);
	ENC(tok, "hello\n", false, 19, 8);
	ENC(tok, "hello world!", false, 19, 24, 15);
	const int32_t ids[] = {19, 24, 15};
	check_decode(tok, ids, 3, "hello world!", 12);
	atlas_tok_free(tok);
}

static void test_empty(void)
{
	struct atlas_tok *tok = load("bpe");
	struct atlas_tok *tmpl = load("template");
	int32_t *ids = NULL;
	size_t n = 99;
	CHECK(tok && tmpl);
	if (!tok || !tmpl)
		goto out;
	CHECK_EQ_INT(atlas_tok_encode(tok, "", 0, true, &ids, &n), 0);
	CHECK_EQ_INT(n, 0);
	CHECK(ids != NULL);
	free(ids);
	/* The template puts <|bos|> before $A; the config adds EOS. */
	ENC(tmpl, "", true, 20, 21);
	CHECK_EQ_INT(atlas_tok_encode(tmpl, "", 0, false, &ids, &n), 0);
	CHECK_EQ_INT(n, 0);
	free(ids);
out:
	atlas_tok_free(tok);
	atlas_tok_free(tmpl);
}

static void test_added_tokens(void)
{
	struct atlas_tok *tok = load("bpe");
	CHECK(tok != NULL);
	if (!tok)
		return;
	ENC(tok, "hello<|end|>world", false, 19, 26, 4, 21, 2, 6);
	/* No strip: the spaces stay with the neighbouring text. */
	ENC(tok, "hello <|end|> world", false, 19, 7, 26, 24);
	/* <|pad|> has lstrip and rstrip: both spaces are absorbed. */
	ENC(tok, "hello <|pad|> world", false, 19, 27, 4, 21, 2, 6);
	ENC(tok, "[X]hello", false, 28, 19);
	ENC(tok, "<|end|><|end|>", false, 26, 26);
	CHECK(atlas_tok_is_special(tok, 26));
	CHECK(atlas_tok_is_special(tok, 27));
	CHECK(!atlas_tok_is_special(tok, 28));
	CHECK(!atlas_tok_is_special(tok, 19));
	CHECK(!atlas_tok_is_special(tok, 1000));
	CHECK_EQ_INT(atlas_tok_lookup(tok, "<|end|>"), 26);
	CHECK_EQ_INT(atlas_tok_lookup(tok, "\xc4\xa0world"), 24); /* "Ġworld" */
	CHECK_EQ_INT(atlas_tok_lookup(tok, "nope"), -1);
	CHECK_EQ_INT(atlas_tok_eos(tok), 26);
	CHECK_EQ_INT(atlas_tok_bos(tok), -1);
	/* Special tokens decode to their text. */
	const int32_t ids[] = {19, 26, 24};
	check_decode(tok, ids, 3, "hello<|end|> world", 18);
	size_t len = 0;
	const char *p = atlas_tok_piece(tok, 24, &len);
	CHECK(p && len == 6 && !memcmp(p, " world", 6));
	atlas_tok_free(tok);
}

static void test_invalid_utf8(void)
{
	struct atlas_tok *tok = load("bpe");
	int32_t *ids = NULL;
	size_t n = 0;
	char *out = NULL;
	size_t len = 0;
	CHECK(tok != NULL);
	if (!tok)
		return;
	ENC(tok, "\xff\xc3", false, 9, 10);
	ENC(tok, "hello\xff world", false, 19, 9, 24);
	CHECK_EQ_INT(atlas_tok_encode(tok, "\xc3hello\xff", 7, false, &ids, &n), 0);
	CHECK_EQ_INT(atlas_tok_decode(tok, ids, n, &out, &len), 0);
	CHECK_EQ_INT(len, 7);
	CHECK(out && !memcmp(out, "\xc3hello\xff", 7));
	free(ids);
	free(out);
	atlas_tok_free(tok);
}

static void test_template_split_nfc(void)
{
	struct atlas_tok *tok = load("template");
	CHECK(tok != NULL);
	if (!tok)
		return;
	CHECK_EQ_INT(atlas_tok_bos(tok), 20);
	CHECK_EQ_INT(atlas_tok_eos(tok), 21);
	/* ignore_merges: "hello" is in the vocab, no merge chain needed. */
	ENC(tok, "hello", false, 10);
	ENC(tok, "hello", true, 20, 10, 21);
	/* Not in the vocab: BPE with the one merge "l l". */
	ENC(tok, "hell", false, 6, 7, 16);
	/* \p{N}{1,3} splits "1212" into "121" and "2" before BPE; without
	 * the split it would be 12 12. */
	ENC(tok, "1212", false, 5, 0, 1);
	/* NFC turns e + U+0301 into U+00E9 (bytes C3 A9). */
	ENC(tok, "e\xcc\x81", false, 11, 12);
	ENC(tok, "\xc3\xa9", false, 11, 12);
	atlas_tok_free(tok);
}

static void test_out_of_range(void)
{
	struct atlas_tok *tok = load("bpe");
	char *out = NULL;
	size_t len = 0;
	CHECK(tok != NULL);
	if (!tok)
		return;
	const int32_t bad[] = {19, 99999};
	CHECK_EQ_INT(atlas_tok_decode(tok, bad, 2, &out, &len), ATLAS_ERANGE);
	CHECK_STR(atlas_errmsg(), "token id 99999 is outside the vocabulary (0..28)");
	CHECK(out == NULL);
	const int32_t neg[] = {-1};
	CHECK_EQ_INT(atlas_tok_decode(tok, neg, 1, &out, &len), ATLAS_ERANGE);
	CHECK(atlas_tok_piece(tok, 29, &len) == NULL);
	struct atlas_tok_stream s;
	char buf[16];
	atlas_tok_stream_init(&s, tok);
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 29, buf, sizeof(buf)), ATLAS_ERANGE);
	atlas_tok_free(tok);
}

static void test_stream(void)
{
	struct atlas_tok *tok = load("bpe");
	struct atlas_tok_stream s;
	char buf[64];
	CHECK(tok != NULL);
	if (!tok)
		return;
	/* U+1F600 is F0 9F 98 80: four byte tokens, one character. */
	atlas_tok_stream_init(&s, tok);
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 19, buf, sizeof(buf)), 5);
	CHECK(!memcmp(buf, "hello", 5));
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 11, buf, sizeof(buf)), 0);
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 12, buf, sizeof(buf)), 0);
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 13, buf, sizeof(buf)), 0);
	CHECK_EQ_INT(s.npending, 3);
	/* Too small a buffer is refused and loses nothing. */
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 14, buf, 3), ATLAS_EINVAL);
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 14, buf, sizeof(buf)), 4);
	CHECK(!memcmp(buf, "\xf0\x9f\x98\x80", 4));
	CHECK_EQ_INT(atlas_tok_stream_flush(&s, buf, sizeof(buf)), 0);

	/* C3 followed by 'h' can never complete: out go the raw bytes. */
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 10, buf, sizeof(buf)), 0);
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 0, buf, sizeof(buf)), 2);
	CHECK(!memcmp(buf, "\xc3h", 2));
	/* FF is never part of a character: emitted at once. */
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 9, buf, sizeof(buf)), 1);
	/* An unfinished character at the end comes out with flush. */
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 11, buf, sizeof(buf)), 0);
	CHECK_EQ_INT(atlas_tok_stream_flush(&s, buf, sizeof(buf)), 1);
	CHECK_EQ_INT((unsigned char)buf[0], 0xf0);
	CHECK_EQ_INT(s.npending, 0);
	/* F0 then 80 is not a valid start (F0 needs 90..BF): both raw. */
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 11, buf, sizeof(buf)), 0);
	CHECK_EQ_INT(atlas_tok_stream_push(&s, 14, buf, sizeof(buf)), 2);
	atlas_tok_free(tok);
}

/* Write fixture "bpe" with `from` replaced by `to` into a fresh directory
 * and try to load it; returns the error message (static) or NULL if it
 * loaded. */
static const char *load_variant(const char *name, const char *from, const char *to)
{
	static char msg[1024];
	char src[1024], dir[1024];
	snprintf(src, sizeof(src), "%s/tests/fixtures/tok/bpe/tokenizer.json", harness_srcdir());
	FILE *f = fopen(src, "rb");
	CHECK(f != NULL);
	if (!f)
		return NULL;
	char text[8192];
	size_t len = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[len] = '\0';
	char *at = strstr(text, from);
	CHECK(at != NULL);
	if (!at)
		return NULL;
	char out[8192];
	snprintf(out, sizeof(out), "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	snprintf(dir, sizeof(dir), "%s/%s", harness_tmpdir(), name);
	mkdir(dir, 0755);
	free(harness_write(dir, "tokenizer.json", out, strlen(out)));
	struct atlas_tok *tok = atlas_tok_load(dir);
	if (tok) {
		atlas_tok_free(tok);
		return NULL;
	}
	snprintf(msg, sizeof(msg), "%s", atlas_errmsg());
	return msg;
}

static void test_unsupported(void)
{
	const char *m;
	m = load_variant("unigram", "\"type\": \"BPE\"", "\"type\": \"Unigram\"");
	CHECK_CONTAINS(m, "model type 'Unigram' is not supported (supported: BPE)");
	CHECK_CONTAINS(m, "tokenizer.json in '");
	m = load_variant("scripts", "\"pre_tokenizer\": {\"type\": \"ByteLevel\"",
			 "\"pre_tokenizer\": {\"type\": \"UnicodeScripts\"");
	CHECK_CONTAINS(m, "pre_tokenizer 'UnicodeScripts' is not supported");
	m = load_variant("lowercase", "\"normalizer\": null",
			 "\"normalizer\": {\"type\": \"Lowercase\"}");
	CHECK_CONTAINS(m, "normalizer 'Lowercase' is not supported");
	m = load_variant("wordpiece", "\"decoder\": {\"type\": \"ByteLevel\"",
			 "\"decoder\": {\"type\": \"WordPiece\"");
	CHECK_CONTAINS(m, "decoder 'WordPiece' is not supported");
	m = load_variant("bert", "\"post_processor\": {\"type\": \"ByteLevel\"",
			 "\"post_processor\": {\"type\": \"BertProcessing\"");
	CHECK_CONTAINS(m, "post_processor 'BertProcessing' is not supported");
	m = load_variant("ctc", "\"decoder\": {\"type\": \"ByteLevel\"",
			 "\"decoder\": {\"type\": \"CTC\"");
	CHECK_CONTAINS(m, "decoder 'CTC' is not supported");
	m = load_variant("suffix", "\"end_of_word_suffix\": \"\"",
			 "\"end_of_word_suffix\": \"</w>\"");
	CHECK_CONTAINS(m, "end_of_word_suffix '</w>' is not supported");
	m = load_variant("broken", "\"merges\": [", "\"merges\": [[");
	CHECK_CONTAINS(m, "cannot parse '");
	/* The variant machinery itself works: an identity edit loads. */
	CHECK(load_variant("same", "\"normalizer\": null", "\"normalizer\": null") == NULL);
	CHECK(atlas_tok_load("/nonexistent/dir") == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "cannot open '/nonexistent/dir/tokenizer.json'");
}

/* Many threads encode with one tokenizer at once and must agree with a
 * single-threaded run. */
struct job {
	const struct atlas_tok *tok; /* shared tokenizer */
	int ok;			     /* set when every result matched */
};

static void *encode_many(void *arg)
{
	struct job *j = arg;
	static const char text[] = "hello world hello <|end|> llo lll \xff world!";
	const int32_t want[] = {19, 24, 7, 19, 7, 26, 7, 17, 3, 7, 17, 2, 7, 9, 24, 15};
	j->ok = 1;
	for (int i = 0; i < 2000; i++) {
		int32_t *ids;
		size_t n;
		if (atlas_tok_encode(j->tok, text, sizeof(text) - 1, false, &ids, &n) ||
		    n != sizeof(want) / sizeof(want[0]) || memcmp(ids, want, sizeof(want)))
			j->ok = 0;
		free(ids);
	}
	return NULL;
}

static void test_threads(void)
{
	struct atlas_tok *tok = load("bpe");
	pthread_t th[4];
	struct job jobs[4];
	CHECK(tok != NULL);
	if (!tok)
		return;
	/* Worked out by hand: " hello" has no merge for Ġ + hello, so it is
	 * Ġ hello; the space before <|end|> and before the invalid byte FF
	 * (which no regex branch matches) stand alone. */
	ENC(tok, "hello world hello <|end|> llo lll \xff world!", false, 19, 24, 7, 19, 7, 26, 7,
	    17, 3, 7, 17, 2, 7, 9, 24, 15);
	for (int i = 0; i < 4; i++) {
		jobs[i].tok = tok;
		CHECK_EQ_INT(pthread_create(&th[i], NULL, encode_many, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(jobs[i].ok);
	}
	atlas_tok_free(tok);
}

/* The lead's trained tokenizer with ids from the reference
 * implementation, when present. */
static void test_golden(void)
{
	char dir[1024], cases[1100];
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/tokenizer", harness_srcdir());
	snprintf(cases, sizeof(cases), "%s/tok_cases.json", dir);
	if (access(cases, R_OK)) {
		printf("# skip golden tokenizer check: no '%s'\n", cases);
		return;
	}
	struct atlas_tok *tok = atlas_tok_load(dir);
	json_object *list = json_object_from_file(cases);
	CHECK(tok != NULL);
	CHECK(list != NULL);
	if (!tok || !list) {
		printf("# %s\n", atlas_errmsg());
		goto out;
	}
	size_t n = json_object_array_length(list), bad = 0;
	CHECK(n > 0);
	for (size_t i = 0; i < n; i++) {
		json_object *c = json_object_array_get_idx(list, i), *t, *want;
		CHECK(json_object_object_get_ex(c, "text", &t));
		CHECK(json_object_object_get_ex(c, "ids", &want));
		int32_t *ids = NULL;
		size_t m = 0;
		CHECK_EQ_INT(atlas_tok_encode(tok, json_object_get_string(t),
					      (size_t)json_object_get_string_len(t), false, &ids,
					      &m),
			     0);
		bool same = m == json_object_array_length(want);
		for (size_t k = 0; same && k < m; k++)
			same = ids[k] == json_object_get_int(json_object_array_get_idx(want, k));
		if (!same && bad++ < 5)
			harness_fail(__FILE__, __LINE__, "golden case %zu ('%.40s') differs", i,
				     json_object_get_string(t));
		free(ids);
	}
	CHECK_EQ_INT(bad, 0);
out:
	json_object_put(list);
	atlas_tok_free(tok);
}

/* The id arrays are sized by the largest id: a 1.4 KB file with id
 * 833,333,333 allocated 6.7 GB. Ids far beyond the file's entries are
 * refused by name; a few unused ids at the end are still fine. */
static void test_sparse_ids(void)
{
	const char *m = load_variant("huge-id", "\"lo\": 25", "\"lo\": 833333333");
	CHECK_CONTAINS(m, "tokenizer.json in '");
	CHECK_CONTAINS(m, "model.vocab['lo'] has id 833333333, far beyond the 29 tokens of the file");
	m = load_variant("huge-added-id", "{\"id\": 28,", "{\"id\": 2147483000,");
	CHECK_CONTAINS(m, "added_tokens[2] has id 2147483000, far beyond");
	m = load_variant("gap-id", "\"lo\": 25", "\"lo\": 1081");
	CHECK(m == NULL); /* 2 * 29 + 1024 = 1082: loads */
	m = load_variant("gap-id2", "\"lo\": 25", "\"lo\": 1082");
	CHECK_CONTAINS(m, "ids must be below 1082");
}

int main(void)
{
	RUN(test_bpe_merges);
	RUN(test_empty);
	RUN(test_added_tokens);
	RUN(test_invalid_utf8);
	RUN(test_template_split_nfc);
	RUN(test_out_of_range);
	RUN(test_stream);
	RUN(test_unsupported);
	RUN(test_sparse_ids);
	RUN(test_threads);
	RUN(test_golden);
	return harness_done();
}
