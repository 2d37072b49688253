/* fuzz-grammar.c - libFuzzer entry point for grammar-constrained decoding.
 *
 * The first byte of an input picks what the rest is: 'g' grammar text,
 * 'j' a JSON schema, 'r' a regex (anything else: grammar text). An
 * optional NUL byte ends it; the bytes after it are fed to a matcher of
 * the compiled grammar three at a time, with a token mask (over the small
 * default tokenizer, models/default) before each feed. Invariants: a
 * failure leaves a message; a mask's count is its number of set bits; the
 * first token a mask allows is accepted by a copy of the matcher; a
 * refused feed leaves the matcher where it was. See README. */
#include <json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/error.h"
#include "../../lib/engine/grammar.h"
#include "../../lib/tok/tok.h"

static struct atlas_tok *tok;
static struct atlas_grammar_vocab *vocab;
static uint32_t *mask;

static void setup(void)
{
	if (vocab)
		return;
	tok = atlas_tok_load("models/default");
	if (!tok)
		abort(); /* run from the repository root */
	int32_t eos = atlas_tok_eos(tok);
	vocab = atlas_grammar_vocab_new(tok, 0, &eos, 1);
	mask = calloc((size_t)atlas_grammar_mask_words(vocab), sizeof(uint32_t));
	if (!vocab || !mask)
		abort();
}

/* The grammar text an input means (malloc'd), or NULL after a refusal. */
static char *grammar_text(const uint8_t *data, size_t n)
{
	char mode = n ? (char)data[0] : 'g';
	char *s = malloc(n + 1);
	if (!s)
		abort();
	memcpy(s, data + (n ? 1 : 0), n ? n - 1 : 0);
	s[n ? n - 1 : 0] = '\0';
	char *t = NULL;
	if (mode == 'j') {
		json_tokener *tk = json_tokener_new_ex(64);
		json_object *j = tk ? json_tokener_parse_ex(tk, s, (int)strlen(s)) : NULL;
		json_tokener_free(tk);
		if (!j) {
			free(s);
			return NULL;
		}
		const char *bad = NULL;
		t = atlas_json_schema_grammar(j, "", &bad);
		if (!t && !atlas_errmsg()[0])
			abort();
		json_object_put(j);
		free(s);
		return t;
	}
	if (mode == 'r') {
		t = atlas_regex_grammar(s, "");
		if (!t && !atlas_errmsg()[0])
			abort();
		free(s);
		return t;
	}
	return s;
}

static int64_t popcount(const uint32_t *m, int64_t words)
{
	int64_t n = 0;
	for (int64_t k = 0; k < words; k++)
		n += __builtin_popcount(m[k]);
	return n;
}

/* The mask's invariants at the matcher's position. */
static void check_mask(struct atlas_grammar_matcher *m)
{
	int64_t words = atlas_grammar_mask_words(vocab);
	int64_t n = atlas_grammar_fill_mask(m, mask);
	if (n < 0)
		return; /* out of memory */
	if (n != popcount(mask, words))
		abort();
	for (int64_t id = 0; id < words * 32; id++) {
		if (!(mask[id >> 5] >> (id & 31) & 1))
			continue;
		struct atlas_grammar_matcher *c = atlas_grammar_matcher_copy(m);
		if (c && atlas_grammar_accept(c, (int32_t)id))
			abort(); /* an allowed token must be accepted */
		atlas_grammar_matcher_free(c);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	if (size > 1 << 16)
		return 0;
	const uint8_t *nul = memchr(data, 0, size);
	size_t glen = nul ? (size_t)(nul - data) : size;
	atlas_error_clear();
	char *text = grammar_text(data, glen);
	if (!text)
		return 0;
	struct atlas_grammar *g = atlas_grammar_compile(text, strlen(text), vocab);
	free(text);
	if (!g) {
		if (!atlas_errmsg()[0])
			abort();
		return 0;
	}
	struct atlas_grammar_matcher *m = atlas_grammar_matcher_new(g);
	const uint8_t *feed = nul ? nul + 1 : NULL;
	size_t nfeed = nul ? size - glen - 1 : 0;
	for (size_t i = 0, steps = 0; m && steps < 64; i += 3, steps++) {
		check_mask(m);
		if (i >= nfeed)
			break;
		size_t k = nfeed - i < 3 ? nfeed - i : 3;
		bool could = atlas_grammar_can_end(m);
		if (atlas_grammar_accept_bytes(m, (const char *)feed + i, k) &&
		    atlas_grammar_can_end(m) != could)
			abort(); /* a refused feed changes nothing */
	}
	atlas_grammar_matcher_free(m);
	atlas_grammar_free(g);
	return 0;
}
