/* bpe.c - the BPE model: vocabulary and merge hash tables, GPT-2's
 * byte-level alphabet, and the merge loop that turns one pre-token into
 * ids.
 *
 * The merge loop works on ids, never on strings: the pre-token's bytes
 * start as the ids of their one-symbol tokens, a min-heap holds every
 * adjacent pair that has a merge (ordered by rank, then position, which
 * is what Hugging Face's tokenizers does: lowest rank first, leftmost
 * among equals), and a doubly linked list over the symbols lets a merge
 * run in O(log n). Stale heap entries are skipped when popped. */
#include "tok_internal.h"

#include "../core/error.h"

#include <stdlib.h>
#include <string.h>

uint32_t atlas_tok_byte_cp(uint8_t b)
{
	/* Printable Latin-1 bytes stand for themselves; the other 68 bytes
	 * (0-32, 127-160, 173) are numbered from 256 upwards in byte order. */
	if (b <= 32)
		return 256u + b;
	if (b >= 127 && b <= 160)
		return 256u + 33 + (b - 127u);
	if (b == 173)
		return 256u + 67;
	return b;
}

int atlas_tok_cp_byte(uint32_t cp)
{
	if (cp < 256)
		return atlas_tok_byte_cp((uint8_t)cp) == cp ? (int)cp : -1;
	if (cp < 256 + 33)
		return (int)(cp - 256);
	if (cp < 256 + 67)
		return (int)(cp - 256 - 33 + 127);
	return cp == 256 + 67 ? 173 : -1;
}

uint32_t atlas_tok_hash(const char *s, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

int atlas_tok_map_build(struct atlas_tok *tok, size_t n)
{
	size_t cap = pow2_at_least(n + n / 2 + 1);
	tok->vocab.slots = malloc(cap * sizeof(*tok->vocab.slots));
	if (!tok->vocab.slots)
		return atlas_error(ATLAS_ENOMEM, "out of memory for the vocabulary");
	for (size_t i = 0; i < cap; i++)
		tok->vocab.slots[i].id = -1;
	tok->vocab.mask = cap - 1;
	return 0;
}

/* Insert key -> id; a key already present keeps its first id. Returns 0,
 * or 1 if the key was already there. The table never fills: it is sized
 * for every key at build time. */
int atlas_tok_map_put(struct atlas_tok *tok, struct tok_str key, int32_t id)
{
	const char *k = tok->arena + key.off;
	uint32_t h = atlas_tok_hash(k, key.len);
	size_t i = h & tok->vocab.mask;
	for (;;) {
		struct tok_slot *s = &tok->vocab.slots[i];
		if (s->id < 0) {
			s->hash = h;
			s->id = id;
			s->key = key;
			return 0;
		}
		if (s->hash == h && s->key.len == key.len &&
		    !memcmp(tok->arena + s->key.off, k, key.len))
			return 1;
		i = (i + 1) & tok->vocab.mask;
	}
}

int32_t atlas_tok_map_get(const struct atlas_tok *tok, const char *k, size_t len)
{
	uint32_t h = atlas_tok_hash(k, len);
	size_t i = h & tok->vocab.mask;
	for (;;) {
		const struct tok_slot *s = &tok->vocab.slots[i];
		if (s->id < 0)
			return -1;
		if (s->hash == h && s->key.len == len && !memcmp(tok->arena + s->key.off, k, len))
			return s->id;
		i = (i + 1) & tok->vocab.mask;
	}
}

static size_t pair_slot(uint64_t key, size_t mask)
{
	return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

int atlas_tok_merges_build(struct atlas_tok *tok, size_t n)
{
	size_t cap = pow2_at_least(n + n / 2 + 1);
	tok->merges.slots = malloc(cap * sizeof(*tok->merges.slots));
	if (!tok->merges.slots)
		return atlas_error(ATLAS_ENOMEM, "out of memory for the merges");
	for (size_t i = 0; i < cap; i++)
		tok->merges.slots[i].key = UINT64_MAX;
	tok->merges.mask = cap - 1;
	return 0;
}

/* A pair listed twice keeps its later rank, as Hugging Face's loader
 * (which collects the list into a hash map) does. */
void atlas_tok_merges_put(struct atlas_tok *tok, int32_t a, int32_t b, int32_t rank, int32_t result)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = pair_slot(key, tok->merges.mask);
	while (tok->merges.slots[i].key != UINT64_MAX && tok->merges.slots[i].key != key)
		i = (i + 1) & tok->merges.mask;
	tok->merges.slots[i].key = key;
	tok->merges.slots[i].rank = rank;
	tok->merges.slots[i].result = result;
}

static const struct tok_merge *merge_get(const struct atlas_tok *tok, int32_t a, int32_t b)
{
	if (a < 0 || b < 0)
		return NULL;
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = pair_slot(key, tok->merges.mask);
	for (;;) {
		const struct tok_merge *m = &tok->merges.slots[i];
		if (m->key == key)
			return m;
		if (m->key == UINT64_MAX)
			return NULL;
		i = (i + 1) & tok->merges.mask;
	}
}

int atlas_tok_ids_push(struct tok_ids *ids, int32_t id)
{
	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 64;
		int32_t *v = realloc(ids->v, cap * sizeof(*v));
		if (!v)
			return atlas_error(ATLAS_ENOMEM, "out of memory encoding text");
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
	return 0;
}

/* A symbol of the word being merged. */
struct sym {
	int32_t id;   /* token id; -2 once merged away */
	int32_t prev; /* index of the previous live symbol, -1 at the start */
	int32_t next; /* index of the next live symbol, -1 at the end */
};

/* A candidate merge of the symbol at pos with its successor. */
struct cand {
	int32_t rank;	/* merge rank (heap key) */
	int32_t pos;	/* left symbol index (tie-break: leftmost first) */
	int32_t left;	/* left id when pushed, to detect stale entries */
	int32_t right;	/* right id when pushed */
	int32_t result; /* merged id */
};

static int cand_less(const struct cand *a, const struct cand *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct cand *h, size_t *n, struct cand c)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!cand_less(&c, &h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n)
{
	struct cand top = h[0], last = h[--(*n)];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		const struct cand *best = &last;
		if (l < *n && cand_less(&h[l], best)) {
			m = l;
			best = &h[l];
		}
		if (l + 1 < *n && cand_less(&h[l + 1], best))
			m = l + 1;
		if (m == i)
			break;
		h[i] = h[m];
		i = m;
	}
	if (*n)
		h[i] = last;
	return top;
}

static void try_pair(const struct atlas_tok *tok, const struct sym *s, int32_t pos, struct cand *h,
		     size_t *nh)
{
	if (pos < 0 || s[pos].next < 0)
		return;
	const struct tok_merge *m = merge_get(tok, s[pos].id, s[s[pos].next].id);
	if (!m)
		return;
	struct cand c = {m->rank, pos, s[pos].id, s[s[pos].next].id, m->result};
	heap_push(h, nh, c);
}

static int scratch_grow(struct tok_bpe_scratch *sc, size_t len)
{
	if (len <= sc->cap && len * 4 <= sc->mapped_cap)
		return 0;
	size_t cap = len < 64 ? 64 : len;
	free(sc->sym);
	free(sc->heap);
	free(sc->mapped);
	sc->sym = malloc(cap * sizeof(struct sym));
	/* Every merge pushes at most two candidates on top of the n - 1 first
	 * ones: 3n bounds the heap. */
	sc->heap = malloc(3 * cap * sizeof(struct cand));
	sc->mapped = malloc(cap * 4);
	sc->cap = cap;
	sc->mapped_cap = cap * 4;
	if (!sc->sym || !sc->heap || !sc->mapped) {
		atlas_tok_bpe_scratch_free(sc);
		return atlas_error(ATLAS_ENOMEM, "out of memory encoding text");
	}
	return 0;
}

void atlas_tok_bpe_scratch_free(struct tok_bpe_scratch *sc)
{
	free(sc->sym);
	free(sc->heap);
	free(sc->mapped);
	memset(sc, 0, sizeof(*sc));
}

/* The byte-level spelling of s (each byte as its alphabet symbol in
 * UTF-8) into out; returns its length. */
static size_t map_bytes(const char *s, size_t len, char *out)
{
	size_t w = 0;
	for (size_t i = 0; i < len; i++) {
		uint32_t cp = atlas_tok_byte_cp((uint8_t)s[i]);
		if (cp < 0x80) {
			out[w++] = (char)cp;
		} else {
			out[w++] = (char)(0xc0 | cp >> 6);
			out[w++] = (char)(0x80 | (cp & 0x3f));
		}
	}
	return w;
}

int atlas_tok_fallback_byte(const char *s, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	const char *h = memchr(hex, s[3], 16), *l = memchr(hex, s[4], 16);
	if (!h || !l || !s[3] || !s[4])
		return -1;
	return (int)((h - hex) << 4 | (l - hex));
}

/* The first symbols of a byte-level word: one per byte. A byte whose
 * symbol is not in the vocabulary is left out, as Hugging Face does when
 * there is no unk_token. Returns the number of symbols. */
static size_t initial_bytes(const struct atlas_tok *tok, const char *s, size_t len, struct sym *sy)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		int32_t id = tok->byte_id[(uint8_t)s[i]];
		if (id >= 0)
			sy[n++].id = id;
		else if (tok->unk >= 0 && !(tok->fuse_unk && n && sy[n - 1].id == tok->unk))
			sy[n++].id = tok->unk;
	}
	return n;
}

/* The first symbols of a word of characters (SentencePiece-style BPE):
 * one per character in the vocabulary; a character that is not becomes
 * its <0xNN> byte tokens (byte_fallback, when all of them exist), else
 * unk (consecutive ones fused with fuse_unk), else nothing. A byte that
 * is not UTF-8 counts as a character of its own. */
static size_t initial_chars(const struct atlas_tok *tok, const char *s, size_t len, struct sym *sy)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		int32_t id = u[i] < 0x80 ? tok->byte_id[u[i]] : -1;
		size_t k = 1;
		if (id < 0) {
			int c = atlas_utf8_decode(u + i, len - i, &cp);
			k = c ? (size_t)c : 1;
			id = atlas_tok_map_get(tok, s + i, k);
		}
		if (id >= 0) {
			sy[n++].id = id;
		} else if (tok->byte_fallback) {
			size_t j = 0;
			while (j < k && tok->fallback_id[u[i + j]] >= 0)
				j++;
			if (j == k) {
				for (j = 0; j < k; j++)
					sy[n++].id = tok->fallback_id[u[i + j]];
			} else if (tok->unk >= 0 && !(tok->fuse_unk && n && sy[n - 1].id == tok->unk)) {
				sy[n++].id = tok->unk;
			}
		} else if (tok->unk >= 0 && !(tok->fuse_unk && n && sy[n - 1].id == tok->unk)) {
			sy[n++].id = tok->unk;
		}
		i += k;
	}
	return n;
}

int atlas_tok_bpe(const struct atlas_tok *tok, struct tok_bpe_scratch *sc, const char *s,
		  size_t len, struct tok_ids *out)
{
	if (len == 0)
		return 0;
	if (len > INT32_MAX / 4)
		return atlas_error(ATLAS_ERANGE, "pre-token of %zu bytes is too long", len);
	int rc = scratch_grow(sc, len);
	if (rc)
		return rc;
	if (tok->ignore_merges || len == 1) {
		const char *key = s;
		size_t klen = len;
		if (tok->byte_level) {
			klen = map_bytes(s, len, sc->mapped);
			key = sc->mapped;
		}
		int32_t id = atlas_tok_map_get(tok, key, klen);
		if (id >= 0)
			return atlas_tok_ids_push(out, id);
	}
	struct sym *sy = sc->sym;
	struct cand *h = sc->heap;
	size_t nh = 0, n = tok->byte_level ? initial_bytes(tok, s, len, sy)
					   : initial_chars(tok, s, len, sy);
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		sy[i].prev = (int32_t)i - 1;
		sy[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < n; i++)
		try_pair(tok, sy, (int32_t)i, h, &nh);
	while (nh) {
		struct cand c = heap_pop(h, &nh);
		struct sym *l = &sy[c.pos];
		if (l->id != c.left || l->next < 0 || sy[l->next].id != c.right)
			continue;
		struct sym *r = &sy[l->next];
		l->id = c.result;
		r->id = -2;
		l->next = r->next;
		if (l->next >= 0)
			sy[l->next].prev = c.pos;
		try_pair(tok, sy, l->prev, h, &nh);
		try_pair(tok, sy, c.pos, h, &nh);
	}
	for (int32_t i = 0; i >= 0; i = sy[i].next) {
		if ((rc = atlas_tok_ids_push(out, sy[i].id)))
			return rc;
	}
	return 0;
}
