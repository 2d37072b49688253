/* nfc.c - NFC and NFKC normalization (Unicode canonical or compatibility
 * decomposition, ordering and composition) for tokenizers whose
 * normalizer is "NFC" (Qwen 2/3) or "NFKC".
 *
 * Almost all text is already NFC, so a quick scan decides that first and
 * copies nothing. Only when a character could change (a combining mark,
 * a character that composes with its predecessor, or one NFC replaces)
 * does the full algorithm run, over the whole segment. Invalid UTF-8
 * bytes are kept as they are and act as starters that never compose. */
#include "nfc_internal.h"
#include "tok_internal.h"

#include "../core/error.h"

#include <stdlib.h>
#include <string.h>

/* Hangul syllable arithmetic (Unicode chapter 3.12). */
#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

/* Marks an invalid byte in the code point buffer (above U+10FFFF). */
#define RAW_BYTE 0x200000u

static unsigned ccc_of(uint32_t cp)
{
	size_t lo = 0, hi = atlas_nfc_ccc_len;
	if (cp < 0x300 || cp >= RAW_BYTE)
		return 0;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cp < atlas_nfc_ccc[mid].first)
			hi = mid;
		else if (cp > atlas_nfc_ccc[mid].last)
			lo = mid + 1;
		else
			return atlas_nfc_ccc[mid].ccc;
	}
	return 0;
}

static const struct atlas_nfc_decomp *decomp_of(uint32_t cp)
{
	size_t lo = 0, hi = atlas_nfc_decomp_len;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cp < atlas_nfc_decomp[mid].cp)
			hi = mid;
		else if (cp > atlas_nfc_decomp[mid].cp)
			lo = mid + 1;
		else
			return &atlas_nfc_decomp[mid];
	}
	return NULL;
}

static int is_second(uint32_t cp)
{
	size_t lo = 0, hi = atlas_nfc_second_len;
	if ((cp >= VBASE && cp < VBASE + VCOUNT) || (cp > TBASE && cp < TBASE + TCOUNT))
		return 1;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cp < atlas_nfc_second[mid])
			hi = mid;
		else if (cp > atlas_nfc_second[mid])
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
	if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
		return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
	if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
	    b < TBASE + TCOUNT)
		return a + (b - TBASE);
	size_t lo = 0, hi = atlas_nfc_comp_len;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct atlas_nfc_comp *c = &atlas_nfc_comp[mid];
		if (a < c->a || (a == c->a && b < c->b))
			hi = mid;
		else if (a > c->a || b > c->b)
			lo = mid + 1;
		else
			return c->cp;
	}
	return 0;
}

static const struct atlas_nfkc_decomp *compat_of(uint32_t cp)
{
	size_t lo = 0, hi = atlas_nfkc_decomp_len;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cp < atlas_nfkc_decomp[mid].cp)
			hi = mid;
		else if (cp > atlas_nfkc_decomp[mid].cp)
			lo = mid + 1;
		else
			return &atlas_nfkc_decomp[mid];
	}
	return NULL;
}

/* Could NFC (NFKC with compat) change this character, alone or with its
 * neighbours? */
static int unstable(uint32_t cp, int compat)
{
	if (compat && compat_of(cp))
		return 1;
	if (cp < 0x300)
		return 0;
	if (ccc_of(cp) || is_second(cp))
		return 1;
	const struct atlas_nfc_decomp *d = decomp_of(cp);
	return d && !d->primary;
}

/* Append the full canonical (with compat: compatibility) decomposition of
 * cp to out[*n]; out has room for expand_len(cp, compat) more. */
static void decompose(uint32_t cp, uint32_t *out, size_t *n, int compat)
{
	const struct atlas_nfkc_decomp *k = compat && cp < RAW_BYTE ? compat_of(cp) : NULL;
	if (k) {
		memcpy(out + *n, atlas_nfkc_pool + k->off, k->len * sizeof(*out));
		*n += k->len;
		return;
	}
	if (cp >= SBASE && cp < SBASE + SCOUNT) {
		uint32_t s = cp - SBASE;
		out[(*n)++] = LBASE + s / NCOUNT;
		out[(*n)++] = VBASE + (s % NCOUNT) / TCOUNT;
		if (s % TCOUNT)
			out[(*n)++] = TBASE + s % TCOUNT;
		return;
	}
	const struct atlas_nfc_decomp *d = cp < 0xC0 || cp >= RAW_BYTE ? NULL : decomp_of(cp);
	if (!d) {
		out[(*n)++] = cp;
		return;
	}
	decompose(d->a, out, n, compat);
	if (d->b)
		decompose(d->b, out, n, compat);
}

/* An upper bound of the code points decompose() appends for cp: the
 * deepest canonical decomposition in Unicode has 4 code points. */
static size_t expand_len(uint32_t cp, int compat)
{
	const struct atlas_nfkc_decomp *k = compat ? compat_of(cp) : NULL;
	return k && k->len > 4 ? k->len : 4;
}

/* Canonical ordering: stable insertion sort of each run of non-starters. */
static void reorder(uint32_t *cps, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		uint32_t c = cps[i];
		unsigned cc = ccc_of(c);
		if (!cc)
			continue;
		size_t j = i;
		while (j > 0) {
			unsigned pc = ccc_of(cps[j - 1]);
			if (!pc || pc <= cc)
				break;
			cps[j] = cps[j - 1];
			j--;
		}
		cps[j] = c;
	}
}

/* Canonical composition in place; returns the new length. */
static size_t recompose(uint32_t *cps, size_t n)
{
	size_t starter = SIZE_MAX, w = 0;
	unsigned last = 0; /* ccc of the last character kept after the starter */
	for (size_t i = 0; i < n; i++) {
		uint32_t c = cps[i];
		unsigned cc = ccc_of(c);
		if (starter != SIZE_MAX && (w == starter + 1 || (last && last < cc))) {
			uint32_t comp = c < RAW_BYTE ? compose(cps[starter], c) : 0;
			if (comp) {
				cps[starter] = comp;
				continue;
			}
		}
		if (cc == 0) {
			starter = c < RAW_BYTE ? w : SIZE_MAX;
			last = 0;
		} else {
			last = cc;
		}
		cps[w++] = c;
	}
	return w;
}

static void put_utf8(uint32_t cp, char *out, size_t *n)
{
	unsigned char *o = (unsigned char *)out + *n;
	if (cp >= RAW_BYTE) {
		o[0] = (unsigned char)(cp - RAW_BYTE);
		*n += 1;
	} else if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		*n += 1;
	} else if (cp < 0x800) {
		o[0] = (unsigned char)(0xc0 | cp >> 6);
		o[1] = (unsigned char)(0x80 | (cp & 0x3f));
		*n += 2;
	} else if (cp < 0x10000) {
		o[0] = (unsigned char)(0xe0 | cp >> 12);
		o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (unsigned char)(0x80 | (cp & 0x3f));
		*n += 3;
	} else {
		o[0] = (unsigned char)(0xf0 | cp >> 18);
		o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		o[3] = (unsigned char)(0x80 | (cp & 0x3f));
		*n += 4;
	}
}

static int normalize(const char *s, size_t len, char **out, size_t *outlen, int compat)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	*out = NULL;
	*outlen = 0;
	/* Quick check: stop at the first character NFC could touch. */
	while (i < len) {
		uint32_t cp;
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		int k = atlas_utf8_decode(u + i, len - i, &cp);
		if (k == 0) {
			i++;
			continue;
		}
		if (unstable(cp, compat))
			break;
		i += (size_t)k;
	}
	if (i == len)
		return 0;

	/* Room for the decomposition: 4 code points per character at most,
	 * more for the few long compatibility expansions. */
	size_t room = 0;
	for (i = 0; i < len;) {
		uint32_t cp;
		int k = atlas_utf8_decode(u + i, len - i, &cp);
		room += k ? expand_len(cp, compat) : 1;
		i += k ? (size_t)k : 1;
	}
	uint32_t *cps = malloc(room * sizeof(*cps));
	if (!cps)
		return atlas_error(ATLAS_ENOMEM, "out of memory normalizing text");
	size_t n = 0;
	for (i = 0; i < len;) {
		uint32_t cp;
		int k = atlas_utf8_decode(u + i, len - i, &cp);
		if (k == 0) {
			cps[n++] = RAW_BYTE + u[i++];
			continue;
		}
		decompose(cp, cps, &n, compat);
		i += (size_t)k;
	}
	reorder(cps, n);
	n = recompose(cps, n);
	char *o = malloc(n * 4 + 1);
	if (!o) {
		free(cps);
		return atlas_error(ATLAS_ENOMEM, "out of memory normalizing text");
	}
	size_t w = 0;
	for (i = 0; i < n; i++)
		put_utf8(cps[i], o, &w);
	free(cps);
	*out = o;
	*outlen = w;
	return 0;
}

int atlas_nfc(const char *s, size_t len, char **out, size_t *outlen)
{
	return normalize(s, len, out, outlen, 0);
}

int atlas_nfkc(const char *s, size_t len, char **out, size_t *outlen)
{
	return normalize(s, len, out, outlen, 1);
}
