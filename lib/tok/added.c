/* added.c - added tokens (special or not): they are cut out of the text
 * before normalization and pre-tokenization, and map straight to their
 * ids.
 *
 * Tokens with `normalized: false` (every special token, by default) are
 * found in the raw text; those with `normalized: true` in each span's
 * normalized text, as Hugging Face does. lstrip / rstrip absorb Unicode
 * white space. Matching is leftmost-longest, like the Aho-Corasick matcher Hugging
 * Face uses: at the first position where any added token matches, the
 * longest one wins. A first-byte index keeps the scan cheap: most bytes
 * of ordinary text start no added token at all. */
#include "tok_internal.h"

#include "../core/error.h"

#include <stdlib.h>
#include <string.h>

static int by_first_then_longest(const void *pa, const void *pb, void *ctx)
{
	const struct atlas_tok *tok = ctx;
	const struct tok_added *a = &tok->added[*(const uint32_t *)pa];
	const struct tok_added *b = &tok->added[*(const uint32_t *)pb];
	unsigned char fa = (unsigned char)tok->arena[a->content.off];
	unsigned char fb = (unsigned char)tok->arena[b->content.off];
	if (fa != fb)
		return fa < fb ? -1 : 1;
	if (a->content.len != b->content.len)
		return a->content.len > b->content.len ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

int atlas_tok_added_index(struct atlas_tok *tok)
{
	memset(tok->added_first, 0, sizeof(tok->added_first));
	if (tok->nadded == 0)
		return 0;
	tok->added_order = malloc(tok->nadded * sizeof(*tok->added_order));
	if (!tok->added_order)
		return atlas_error(ATLAS_ENOMEM, "out of memory for added tokens");
	size_t n = 0;
	for (size_t i = 0; i < tok->nadded; i++) {
		/* An empty added token can never be matched. */
		if (tok->added[i].content.len)
			tok->added_order[n++] = (uint32_t)i;
	}
	qsort_r(tok->added_order, n, sizeof(*tok->added_order), by_first_then_longest, tok);
	/* added_first[b] = first index in added_order whose content starts
	 * with a byte >= b; the run for byte b ends at added_first[b + 1]. */
	size_t j = 0;
	for (unsigned b = 0; b <= 256; b++) {
		while (j < n &&
		       (unsigned char)tok->arena[tok->added[tok->added_order[j]].content.off] < b)
			j++;
		tok->added_first[b] = (uint32_t)j;
	}
	return 0;
}

bool atlas_tok_is_space(uint32_t cp)
{
	return (cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
	       cp == 0x205f || cp == 0x3000;
}

/* Length of the white-space character starting at s[0], or 0. */
static size_t space_at(const unsigned char *s, size_t len)
{
	uint32_t cp;
	int n = len ? atlas_utf8_decode(s, len, &cp) : 0;
	return n && atlas_tok_is_space(cp) ? (size_t)n : 0;
}

/* Length of the white-space character ending at s[end), not before from. */
static size_t space_before(const unsigned char *s, size_t from, size_t end)
{
	for (size_t k = 1; k <= 3 && k <= end - from; k++) {
		if (k < 3 && end - k > from && (s[end - k] & 0xc0) == 0x80)
			continue; /* a continuation byte: look further back */
		return space_at(s + end - k, k) == k ? k : 0;
	}
	return 0;
}

/* A word character for single_word tokens (Rust's char::is_alphanumeric
 * for ASCII; every non-ASCII character counts as one, most are letters). */
static bool is_word(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       c >= 0x80;
}

int64_t atlas_tok_added_find(const struct atlas_tok *tok, const char *s, size_t len, size_t from,
			     bool normalized, size_t *start, size_t *end)
{
	const unsigned char *u = (const unsigned char *)s;
	if (tok->nadded == 0)
		return -1;
	for (size_t i = from; i < len; i++) {
		uint32_t lo = tok->added_first[u[i]], hi = tok->added_first[u[i] + 1];
		for (uint32_t k = lo; k < hi; k++) {
			const struct tok_added *a = &tok->added[tok->added_order[k]];
			if (a->normalized != normalized || a->content.len > len - i ||
			    memcmp(s + i, tok->arena + a->content.off, a->content.len))
				continue;
			size_t b = i, e = i + a->content.len, n;
			if (a->single_word &&
			    ((b > 0 && is_word(u[b - 1])) || (e < len && is_word(u[e]))))
				break; /* the longest match is refused: move on */
			if (a->lstrip)
				while (b > from && (n = space_before(u, from, b)))
					b -= n;
			if (a->rstrip)
				while (e < len && (n = space_at(u + e, len - e)))
					e += n;
			*start = b;
			*end = e;
			return tok->added_order[k];
		}
	}
	return -1;
}
