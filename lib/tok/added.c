/* added.c - added tokens (special or not): they are cut out of the text
 * before normalization and pre-tokenization, and map straight to their
 * ids.
 *
 * Matching is leftmost-longest, like the Aho-Corasick matcher Hugging
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

static bool is_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* A word character for single_word tokens; bytes of non-ASCII
 * characters count as word characters (most are letters). */
static bool is_word(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       c == '_' || c >= 0x80;
}

int64_t atlas_tok_added_find(const struct atlas_tok *tok, const char *s, size_t len, size_t from,
			     size_t *start, size_t *end)
{
	const unsigned char *u = (const unsigned char *)s;
	if (tok->nadded == 0)
		return -1;
	for (size_t i = from; i < len; i++) {
		uint32_t lo = tok->added_first[u[i]], hi = tok->added_first[u[i] + 1];
		for (uint32_t k = lo; k < hi; k++) {
			const struct tok_added *a = &tok->added[tok->added_order[k]];
			if (a->content.len > len - i ||
			    memcmp(s + i, tok->arena + a->content.off, a->content.len))
				continue;
			size_t b = i, e = i + a->content.len;
			if (a->single_word &&
			    ((b > 0 && is_word(u[b - 1])) || (e < len && is_word(u[e]))))
				break; /* the longest match is refused: move on */
			if (a->lstrip)
				while (b > from && is_space(u[b - 1]))
					b--;
			if (a->rstrip)
				while (e < len && is_space(u[e]))
					e++;
			*start = b;
			*end = e;
			return tok->added_order[k];
		}
	}
	return -1;
}
