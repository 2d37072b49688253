/* normalize.c - the normalizer steps of tokenizer.json (NFC, NFKC,
 * Replace, Prepend, in file order) run over one span of text.
 *
 * Each step reads the previous step's output; a step that changes
 * nothing allocates nothing, so the common "text already normalized"
 * case costs one scan per step. Replace with a regex runs through PCRE2
 * (compiled like the pre-tokenizer patterns); a literal Replace is a
 * byte search. Prepend adds its text to a non-empty span, as Hugging Face
 * does for every span between added tokens. */
#include "nfc_internal.h"
#include "tok_internal.h"

#include "../core/error.h"

#include <stdlib.h>
#include <string.h>

/* Replace every match of a literal or regex by content. Sets *out NULL
 * when nothing matched. */
static int replace(const struct atlas_tok *tok, const struct tok_norm *n, const char *s,
		   size_t len, char **out, size_t *outlen)
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
	memcpy(o + w, s + at, len - at);
	*out = o;
	*outlen = w + len - at;
	return 0;
}

int atlas_tok_normalize(const struct atlas_tok *tok, const char *s, size_t len, char **out,
			size_t *outlen)
{
	char *cur = NULL; /* the current text when a step changed it (owned) */
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
			rc = replace(tok, n, in, inlen, &next, &nl);
		} else if (inlen > 0) { /* Prepend */
			nl = n->content.len + inlen;
			if (!(next = malloc(nl + 1)))
				rc = atlas_error(ATLAS_ENOMEM, "out of memory normalizing text");
			else {
				memcpy(next, tok->arena + n->content.off, n->content.len);
				memcpy(next + n->content.len, in, inlen);
			}
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
