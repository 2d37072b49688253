/* normalize.c - the normalizer steps of tokenizer.json (NFC, NFKC,
 * Replace, Prepend, in file order) run over one span of text.
 *
 * Each step reads the previous step's output; a step that changes
 * nothing allocates nothing, so the common "text already normalized"
 * case costs one scan per step. Replace with a regex runs through PCRE2
 * (compiled like the pre-tokenizer patterns); a literal Replace is a
 * byte search. Prepend adds its text to a non-empty span, as Hugging Face
 * does for every span between added tokens.
 *
 * tokenizer.json is untrusted, and a Replace applies its content to every
 * match: " " -> a megabyte makes each space of a prompt a megabyte. So no
 * step's output may pass norm_max() of the span: 64 bytes per input byte
 * plus 4 KiB, far above what real normalizers do (NFKC expands a code
 * point at most 11-fold, Llama's Replace " " -> "\u2581" 3-fold, Prepend
 * adds a few bytes). Past it the span fails with ATLAS_ERANGE. The
 * additive part is small because it is granted per span, and a text
 * has a span per added token in it. */
#include "nfc_internal.h"
#include "tok_internal.h"

#include "../core/error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NORM_GROWTH 64	/* output bytes allowed per input byte */
#define NORM_SLACK 4096 /* plus these, for a Prepend to a short span */

/* The most bytes any normalizer step may output for a span of len bytes. */
static size_t norm_max(size_t len)
{
	return len > (SIZE_MAX - NORM_SLACK) / NORM_GROWTH ? SIZE_MAX
							   : len * NORM_GROWTH + NORM_SLACK;
}

static int too_long(size_t len, size_t max)
{
	return atlas_error(ATLAS_ERANGE,
			   "the tokenizer's normalizer expands %zu bytes of text past %zu bytes "
			   "(at most %d per byte plus %d): a Replace or Prepend of "
			   "tokenizer.json adds too much",
			   len, max, NORM_GROWTH, NORM_SLACK);
}

/* Replace every match of a literal or regex by content. Sets *out NULL
 * when nothing matched. Fails with ATLAS_ERANGE (too_long of orig) when the
 * output would pass max bytes, ATLAS_ENOMEM. */
static int replace(const struct atlas_tok *tok, const struct tok_norm *n, const char *s, size_t len,
		   size_t orig, size_t max, char **out, size_t *outlen)
{
	const char *pat = tok->arena + n->pattern.off, *rep = tok->arena + n->content.off;
	size_t pl = n->pattern.len, rl = n->content.len, w = 0, cap = 0, at = 0;
	pcre2_match_data *md = NULL;
	char *o = NULL;
	*out = NULL;
	if (n->re && !(md = pcre2_match_data_create_from_pattern(n->re, NULL)))
		return atlas_error(ATLAS_ENOMEM, "out of memory normalizing text");
	while (at < len) {
		size_t ms, me;
		if (n->re) {
			int m = pcre2_match(n->re, (PCRE2_SPTR)s, len, at, 0, md, NULL);
			if (m < 0)
				break;
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
			ms = ov[0];
			me = ov[1];
		} else {
			const char *f = memmem(s + at, len - at, pat, pl);
			if (!f)
				break;
			ms = (size_t)(f - s);
			me = ms + pl;
		}
		if (me == ms) { /* an empty match replaces nothing */
			at = me + 1;
			continue;
		}
		if (w + (ms - at) + rl > max) {
			free(o);
			pcre2_match_data_free(md);
			return too_long(orig, max);
		}
		size_t need = w + (ms - at) + rl + (len - me) + 1;
		if (need > cap) {
			cap = need * 2;
			char *g = realloc(o, cap);
			if (!g) {
				free(o);
				pcre2_match_data_free(md);
				return atlas_error(ATLAS_ENOMEM, "out of memory normalizing text");
			}
			o = g;
		}
		memcpy(o + w, s + at, ms - at);
		w += ms - at;
		memcpy(o + w, rep, rl);
		w += rl;
		at = me;
	}
	pcre2_match_data_free(md);
	if (!o)
		return 0;
	if (w + len - at > max) {
		free(o);
		return too_long(orig, max);
	}
	memcpy(o + w, s + at, len - at);
	*out = o;
	*outlen = w + len - at;
	return 0;
}

int atlas_tok_normalize(const struct atlas_tok *tok, const char *s, size_t len, char **out,
			size_t *outlen)
{
	char *cur = NULL; /* the current text when a step changed it (owned) */
	size_t max = norm_max(len);
	*out = NULL;
	*outlen = len;
	for (int i = 0; i < tok->nnorm; i++) {
		const struct tok_norm *n = &tok->norm[i];
		const char *in = cur ? cur : s;
		size_t inlen = cur ? *outlen : len, nl = 0;
		char *next = NULL;
		int rc = 0;
		if (n->kind == TOK_N_NFC) {
			rc = atlas_nfc(in, inlen, &next, &nl);
		} else if (n->kind == TOK_N_NFKC) {
			rc = atlas_nfkc(in, inlen, &next, &nl);
		} else if (n->kind == TOK_N_REPLACE) {
			rc = replace(tok, n, in, inlen, len, max, &next, &nl);
		} else if (inlen > 0) { /* Prepend */
			nl = n->content.len + inlen;
			if (nl > max)
				rc = too_long(len, max);
			else if (!(next = malloc(nl + 1)))
				rc = atlas_error(ATLAS_ENOMEM, "out of memory normalizing text");
			else {
				memcpy(next, tok->arena + n->content.off, n->content.len);
				memcpy(next + n->content.len, in, inlen);
			}
		}
		if (!rc && next && nl > max) { /* NFC, NFKC: bounded, but checked */
			free(next);
			rc = too_long(len, max);
		}
		if (rc) {
			free(cur);
			return rc;
		}
		if (next) {
			free(cur);
			cur = next;
			*outlen = nl;
		}
	}
	*out = cur;
	return 0;
}
