/* tok.c - encoding (added tokens, normalization, pre-tokenization, BPE,
 * template tokens) and the small read-only queries of tok.h. */
#include "tok_internal.h"

#include "../core/error.h"

#include <stdlib.h>
#include <string.h>

int64_t atlas_tok_vocab_size(const struct atlas_tok *tok)
{
	return tok->nvocab;
}

int32_t atlas_tok_bos(const struct atlas_tok *tok)
{
	return tok->bos;
}

int32_t atlas_tok_eos(const struct atlas_tok *tok)
{
	return tok->eos;
}

const char *atlas_tok_piece(const struct atlas_tok *tok, int32_t id, size_t *len)
{
	if (id < 0 || id >= tok->nvocab || !(tok->flags[id] & TOK_F_PRESENT))
		return NULL;
	*len = tok->piece[id].len;
	return tok->arena + tok->piece[id].off;
}

int32_t atlas_tok_lookup(const struct atlas_tok *tok, const char *token)
{
	size_t len = strlen(token);
	for (size_t i = 0; i < tok->nadded; i++) {
		const struct tok_added *a = &tok->added[i];
		if (a->content.len == len && !memcmp(tok->arena + a->content.off, token, len))
			return a->id;
	}
	return atlas_tok_map_get(tok, token, len);
}

bool atlas_tok_is_special(const struct atlas_tok *tok, int32_t id)
{
	return id >= 0 && id < tok->nvocab && (tok->flags[id] & TOK_F_SPECIAL);
}

/* Normalize one span of raw text that holds no raw-matched added token,
 * cut it at the added tokens matched after normalization, and
 * pre-tokenize + BPE the rest. `first`: the span starts the text. */
static int encode_text(const struct atlas_tok *tok, struct tok_bpe_scratch *sc, const char *s,
		       size_t len, bool first, struct tok_ids *out)
{
	char *norm = NULL;
	size_t nlen = len, at = 0;
	int rc;
	if (len == 0)
		return 0;
	if (tok->nnorm && (rc = atlas_tok_normalize(tok, s, len, &norm, &nlen)))
		return rc;
	const char *t = norm ? norm : s;
	rc = 0;
	while (!rc && tok->has_normalized_added && at < nlen) {
		size_t start, end;
		int64_t k = atlas_tok_added_find(tok, t, nlen, at, true, &start, &end);
		if (k < 0)
			break;
		rc = atlas_tok_encode_segment(tok, sc, t + at, start - at, first && at == 0, out);
		if (!rc)
			rc = atlas_tok_ids_push(out, tok->added[k].id);
		at = end;
	}
	if (!rc && at < nlen)
		rc = atlas_tok_encode_segment(tok, sc, t + at, nlen - at, first && at == 0, out);
	free(norm);
	return rc;
}

int atlas_tok_encode(const struct atlas_tok *tok, const char *text, size_t len, bool add_special,
		     int32_t **ids, size_t *n)
{
	struct tok_ids out = {0};
	struct tok_bpe_scratch sc = {0};
	size_t at = 0;
	int rc = 0;
	*ids = NULL;
	*n = 0;
	if (!text && len)
		return atlas_error(ATLAS_EINVAL, "no text to encode");
	/* A first block, so that even an empty result is a valid pointer. */
	if ((rc = atlas_tok_ids_push(&out, 0)))
		return rc;
	out.n = 0;
	for (int i = 0; add_special && i < tok->nprefix && !rc; i++)
		rc = atlas_tok_ids_push(&out, tok->prefix_ids[i]);
	while (!rc && at < len) {
		size_t start, end;
		int64_t k = atlas_tok_added_find(tok, text, len, at, false, &start, &end);
		if (k < 0) {
			rc = encode_text(tok, &sc, text + at, len - at, at == 0, &out);
			break;
		}
		rc = encode_text(tok, &sc, text + at, start - at, at == 0, &out);
		if (!rc)
			rc = atlas_tok_ids_push(&out, tok->added[k].id);
		at = end;
	}
	for (int i = 0; add_special && i < tok->nsuffix && !rc; i++)
		rc = atlas_tok_ids_push(&out, tok->suffix_ids[i]);
	atlas_tok_bpe_scratch_free(&sc);
	if (rc) {
		free(out.v);
		return rc;
	}
	*ids = out.v;
	*n = out.n;
	return 0;
}
