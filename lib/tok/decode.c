/* decode.c - ids back to bytes: whole sequences (atlas_tok_decode) and
 * the streaming decoder that only lets complete UTF-8 characters out.
 *
 * Pieces are stored already run through the per-token decoder steps
 * (pipeline.c), so decoding is concatenation, plus the two things that
 * depend on position: the first token's own piece (Metaspace) and a
 * Strip after Fuse (leading and trailing characters of the whole text;
 * the stream applies the leading part only, it cannot know the end). The stream holds back a trailing sequence
 * only while it is a valid but unfinished UTF-8 prefix; bytes that can
 * never become a character are passed through raw at once. */
#include "tok_internal.h"

#include "../core/error.h"

#include <stdlib.h>
#include <string.h>

static int bad_id(const struct atlas_tok *tok, int32_t id)
{
	if (id < 0 || id >= tok->nvocab)
		return atlas_error(ATLAS_ERANGE, "token id %ld is outside the vocabulary (0..%lld)",
				   (long)id, (long long)tok->nvocab - 1);
	return atlas_error(ATLAS_ERANGE, "token id %ld has no token in the vocabulary", (long)id);
}

/* The bytes of id as the i-th token of a decode: the first token has its
 * own piece when a Metaspace decoder drops its replacement characters. */
static const char *piece_at(const struct atlas_tok *tok, int32_t id, int64_t i, size_t *len)
{
	const char *p = atlas_tok_piece(tok, id, len);
	if (p && i == 0 && tok->piece0) {
		*len = tok->piece0[id].len;
		p = tok->arena + tok->piece0[id].off;
	}
	return p;
}

int atlas_tok_decode(const struct atlas_tok *tok, const int32_t *ids, size_t n, char **out,
		     size_t *len)
{
	size_t total = 0, w = 0, plen;
	*out = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++) {
		if (!piece_at(tok, ids[i], (int64_t)i, &plen))
			return bad_id(tok, ids[i]);
		total += plen;
	}
	char *buf = malloc(total + 1);
	if (!buf)
		return atlas_error(ATLAS_ENOMEM, "out of memory decoding %zu ids", n);
	for (size_t i = 0; i < n; i++) {
		const char *p = piece_at(tok, ids[i], (int64_t)i, &plen);
		memcpy(buf + w, p, plen);
		w += plen;
	}
	/* A Strip decoder after Fuse trims the whole text. */
	size_t s = 0;
	for (int k = 0; k < tok->strip_start && s < w && buf[s] == tok->strip_char; k++)
		s++;
	for (int k = 0; k < tok->strip_stop && w > s && buf[w - 1] == tok->strip_char; k++)
		w--;
	memmove(buf, buf + s, w - s);
	w -= s;
	buf[w] = '\0';
	*out = buf;
	*len = w;
	return 0;
}

void atlas_tok_stream_init(struct atlas_tok_stream *s, const struct atlas_tok *tok)
{
	memset(s, 0, sizeof(*s));
	s->tok = tok;
	s->strip_left = tok->strip_start;
}

/* Total length of the UTF-8 sequence lead byte c starts, 0 if none. */
static int seq_len(unsigned char c)
{
	if (c >= 0xc2 && c <= 0xdf)
		return 2;
	if (c >= 0xe0 && c <= 0xef)
		return 3;
	if (c >= 0xf0 && c <= 0xf4)
		return 4;
	return 0;
}

/* May byte d follow lead byte c as the second byte of a valid sequence? */
static bool second_ok(unsigned char c, unsigned char d)
{
	unsigned char lo = 0x80, hi = 0xbf;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	return d >= lo && d <= hi;
}

/* How many trailing bytes of a[0..n) form a valid, unfinished UTF-8
 * sequence (0..3). */
static size_t unfinished_tail(const unsigned char *a, size_t n)
{
	for (size_t back = 1; back <= 3 && back <= n; back++) {
		unsigned char c = a[n - back];
		if ((c & 0xc0) == 0x80)
			continue;
		int need = seq_len(c);
		if (need == 0 || (size_t)need <= back)
			return 0;
		if (back >= 2 && !second_ok(c, a[n - back + 1]))
			return 0;
		return back;
	}
	return 0;
}

int64_t atlas_tok_stream_push(struct atlas_tok_stream *s, int32_t id, char *buf, size_t cap)
{
	size_t plen;
	const char *p = piece_at(s->tok, id, s->ntok, &plen);
	if (!p)
		return bad_id(s->tok, id);
	s->ntok++;
	/* Leading characters a Strip decoder drops from the whole text. */
	while (s->strip_left > 0 && plen > 0 && s->npending == 0) {
		if (p[0] != s->tok->strip_char) {
			s->strip_left = 0;
			break;
		}
		p++;
		plen--;
		s->strip_left--;
	}
	if (plen == 0 && s->npending == 0)
		return 0;
	/* Only the last 3 bytes can be held back: look at pending + the end
	 * of the piece together. */
	unsigned char tail[16];
	size_t keep = plen < 3 ? plen : 3, np = s->npending;
	size_t from_pending = keep < 3 ? (np < 3 - keep ? np : 3 - keep) : 0;
	memcpy(tail, s->pending + np - from_pending, from_pending);
	memcpy(tail + from_pending, p + plen - keep, keep);
	size_t hold = unfinished_tail(tail, from_pending + keep);
	size_t total = np + plen, emit = total - hold;
	if (emit > cap)
		return atlas_error(ATLAS_EINVAL, "stream buffer of %zu bytes is too small for %zu",
				   cap, emit);
	char held[8];
	memcpy(held, tail + from_pending + keep - hold, hold);
	/* Emit the first `emit` bytes of pending + piece. */
	size_t w = np < emit ? np : emit;
	memcpy(buf, s->pending, w);
	if (emit > np)
		memcpy(buf + np, p, emit - np);
	memcpy(s->pending, held, hold);
	s->npending = hold;
	return (int64_t)emit;
}

int64_t atlas_tok_stream_flush(struct atlas_tok_stream *s, char *buf, size_t cap)
{
	size_t n = s->npending;
	if (n > cap)
		return atlas_error(ATLAS_EINVAL, "stream buffer of %zu bytes is too small for %zu",
				   cap, n);
	memcpy(buf, s->pending, n);
	s->npending = 0;
	return (int64_t)n;
}
