/* grammar_match.c - matching a compiled grammar (see grammar.h): the
 * vocabulary view, stacks of rule frames, the byte walker, the
 * per-state mask cache (filled by several threads at once), the matcher
 * and its token masks. The automaton comes from grammar_parse.c. */
#include "grammar.h"

#include <pthread.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../tok/tok.h"
#include "grammar_internal.h"

#define MAX_VISITS 65536	 /* closure visits of one step past the fast path */
#define MAX_WALK_WORK (64 << 20) /* stack steps of one mask's walks */
#define MAX_DEPTH 512		 /* frames of one stack */
#define MAX_STACKS 1024		 /* live stacks (parses) at one point */
/* Cache walkers of one grammar, i.e. threads computing entries at once
 * (a test build may lower it, to exercise the wait for one). */
#ifndef MAX_WALKERS
#define MAX_WALKERS 64
#endif

/* ---- the vocabulary ---- */

/* Tokens sorted by their bytes, so that a walk over them shares the work
 * on common prefixes (rolling back to the common prefix of neighbours). */
struct atlas_grammar_vocab {
	int64_t n_vocab; /* ids 0 .. n_vocab - 1 (masks cover them all) */
	int64_t n_words; /* mask words */
	int64_t n;	 /* tokens that can be allowed (text, not special, not EOS) */
	int32_t *id;	 /* per sorted position: the token id */
	int64_t *off;	 /* per sorted position: its bytes in `bytes` */
	int32_t *len;	 /* per sorted position: its length */
	char *bytes;	 /* the tokens' bytes, in sorted order */
	int32_t *pos;	 /* per id: sorted position, -1 if never allowed as text */
	int32_t *eos;	 /* end-of-sequence ids */
	int n_eos;	 /* entries of eos */
};

struct tokref {
	const char *p; /* bytes (owned by the tokenizer) */
	int32_t len;   /* byte count */
	int32_t id;    /* token id */
};

static int cmp_tokref(const void *a, const void *b)
{
	const struct tokref *x = a, *y = b;
	int32_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->p, y->p, (size_t)n);
	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

static bool is_eos(const struct atlas_grammar_vocab *v, int32_t id)
{
	for (int k = 0; k < v->n_eos; k++)
		if (v->eos[k] == id)
			return true;
	return false;
}

struct atlas_grammar_vocab *atlas_grammar_vocab_new(const struct atlas_tok *tok, int64_t n_vocab,
						    const int32_t *eos, int n_eos)
{
	int64_t nt = atlas_tok_vocab_size(tok);
	struct atlas_grammar_vocab *v = calloc(1, sizeof(*v));
	struct tokref *t = calloc((size_t)nt + 1, sizeof(*t));
	if (!v || !t || n_eos < 0 || nt > INT32_MAX)
		goto fail;
	v->n_vocab = n_vocab > nt ? n_vocab : nt;
	v->n_words = (v->n_vocab + 31) / 32;
	v->eos = malloc(sizeof(int32_t) * (size_t)(n_eos + 1));
	v->pos = malloc(sizeof(int32_t) * (size_t)v->n_vocab);
	if (!v->eos || !v->pos)
		goto fail;
	memcpy(v->eos, eos, sizeof(int32_t) * (size_t)n_eos);
	v->n_eos = n_eos;
	int64_t total = 0;
	for (int32_t id = 0; id < nt; id++) {
		size_t len = 0;
		const char *p = atlas_tok_piece(tok, id, &len);
		if (!p || !len || len > 4096 || atlas_tok_is_special(tok, id) || is_eos(v, id))
			continue;
		t[v->n++] = (struct tokref){.p = p, .len = (int32_t)len, .id = id};
		total += (int64_t)len;
	}
	qsort(t, (size_t)v->n, sizeof(*t), cmp_tokref);
	v->id = malloc(sizeof(int32_t) * (size_t)(v->n + 1));
	v->off = malloc(sizeof(int64_t) * (size_t)(v->n + 1));
	v->len = malloc(sizeof(int32_t) * (size_t)(v->n + 1));
	v->bytes = malloc((size_t)total + 1);
	if (!v->id || !v->off || !v->len || !v->bytes)
		goto fail;
	for (int64_t k = 0; k < v->n_vocab; k++)
		v->pos[k] = -1;
	total = 0;
	for (int64_t k = 0; k < v->n; k++) {
		v->id[k] = t[k].id;
		v->off[k] = total;
		v->len[k] = t[k].len;
		v->pos[t[k].id] = (int32_t)k;
		memcpy(v->bytes + total, t[k].p, (size_t)t[k].len);
		total += t[k].len;
	}
	free(t);
	return v;
fail:
	free(t);
	atlas_grammar_vocab_free(v);
	atlas_error(ATLAS_ENOMEM, "out of memory");
	return NULL;
}

void atlas_grammar_vocab_free(struct atlas_grammar_vocab *v)
{
	if (!v)
		return;
	free(v->id), free(v->off), free(v->len), free(v->bytes), free(v->pos), free(v->eos);
	free(v);
}

int64_t atlas_grammar_vocab_size(const struct atlas_grammar_vocab *v)
{
	return v->n_vocab;
}

int64_t atlas_grammar_mask_words(const struct atlas_grammar_vocab *v)
{
	return v->n_words;
}

/* ---- stacks ----
 *
 * A stack is (top state, parent frame): the top is where the innermost
 * rule is, the frames below are return states. Frames are hash-consed
 * nodes in a pool, so equal stacks are equal pairs (duplicates are cheap
 * to drop) and stacks share their bottoms. A walk appends nodes and
 * rolls the pool back (truncate) when it backs up; newer nodes are always
 * at the head of their hash chains, which is what makes that possible. */

struct gframe {
	int32_t state;	/* the state to return to */
	int32_t parent; /* the frame below, -1 at the bottom */
	int32_t depth;	/* frames from the bottom, this one included */
	int32_t hnext;	/* next frame in its hash chain */
};

struct gpool {
	struct gframe *f; /* frames */
	int32_t n, cap;	  /* used, allocated */
	int32_t *bucket;  /* hash chain heads, -1 if empty */
	int32_t nb;	  /* buckets (a power of two) */
};

static uint32_t frame_hash(int32_t state, int32_t parent, int32_t nb)
{
	uint32_t h = (uint32_t)state * 0x9e3779b1u ^ (uint32_t)parent * 0x85ebca77u;
	return (h ^ (h >> 15)) & (uint32_t)(nb - 1);
}

static int pool_rehash(struct gpool *p, int32_t nb)
{
	int32_t *b = malloc(sizeof(int32_t) * (size_t)nb);
	if (!b)
		return -1;
	free(p->bucket);
	p->bucket = b;
	p->nb = nb;
	for (int32_t k = 0; k < nb; k++)
		b[k] = -1;
	for (int32_t k = 0; k < p->n; k++) {
		uint32_t h = frame_hash(p->f[k].state, p->f[k].parent, nb);
		p->f[k].hnext = b[h];
		b[h] = k;
	}
	return 0;
}

/* The frame (state, parent): found or added. -1 past MAX_DEPTH or out
 * of memory. */
static int32_t pool_push(struct gpool *p, int32_t state, int32_t parent)
{
	int32_t depth = parent < 0 ? 1 : p->f[parent].depth + 1;
	if (depth > MAX_DEPTH)
		return -1;
	if (!p->nb && pool_rehash(p, 1024))
		return -1;
	uint32_t h = frame_hash(state, parent, p->nb);
	for (int32_t k = p->bucket[h]; k >= 0; k = p->f[k].hnext)
		if (p->f[k].state == state && p->f[k].parent == parent)
			return k;
	if (p->n == INT32_MAX / 2)
		return -1;
	struct gframe *f = grow(p->f, &p->cap, p->n + 1, sizeof(*f));
	if (!f)
		return -1;
	p->f = f;
	f[p->n] = (struct gframe){
	    .state = state, .parent = parent, .depth = depth, .hnext = p->bucket[h]};
	p->bucket[h] = p->n++;
	if (p->n > 2 * p->nb)
		pool_rehash(p, 2 * p->nb); /* on failure the chains just stay long */
	return p->n - 1;
}

static void pool_truncate(struct gpool *p, int32_t mark)
{
	while (p->n > mark) {
		struct gframe *f = &p->f[--p->n];
		p->bucket[frame_hash(f->state, f->parent, p->nb)] = f->hnext;
	}
}

static void pool_release(struct gpool *p)
{
	free(p->f);
	free(p->bucket);
	memset(p, 0, sizeof(*p));
}

/* ---- walking bytes ----
 *
 * A level is the set of stacks after some bytes: entries (top, parent),
 * the partial UTF-8 character they share (boundaries depend only on the
 * bytes), and whether some parse popped its bottom frame (for a real
 * stack: the grammar can end; for a cache walk: the token reaches the end
 * of the rule). Levels are stacked: level k + 1 is built from level k and
 * one byte, and backing up to level k drops what came after it. */

struct gentry {
	int32_t top;	/* state: its class edges consume the next character */
	int32_t parent; /* frame below, -1 for none */
};

struct glevel {
	int64_t off;	/* first entry in the walker's ent */
	int32_t n;	/* entries */
	uint32_t acc;	/* bits of the partial character so far */
	uint8_t rem;	/* continuation bytes it still needs (0: at a boundary) */
	uint8_t len;	/* its total length */
	uint8_t bottom; /* some parse popped the bottom frame */
	uint8_t anyb;	/* a cache walk: some earlier level had a bottom that the
			 * byte after it may follow (see struct gwalk's follow) */
	int32_t pmark;	/* pool size when the level was complete */
	int32_t set;	/* a cache walk: its interned stack set, -1 if none */
};

/* Cache walks memoize transitions: a level's stacks (interned as a set;
 * frames are hash-consed and never dropped during cache walks, so equal
 * sets are equal arrays) and a byte give the next level's set. Inside a
 * JSON string every character leads back to the same set, so most steps
 * of a cache walk become a table lookup. */
struct gset {
	int64_t off;	/* entries in the memo's ent */
	int32_t n;	/* how many */
	uint32_t acc;	/* partial character, as in struct glevel */
	uint8_t rem;	/* continuation bytes it needs */
	uint8_t len;	/* its length */
	uint8_t bottom; /* some parse popped the bottom frame */
	int32_t *next;	/* per byte: next set, -1 unknown, -2 none (NULL: all unknown) */
};

struct gmemo {
	struct gentry *ent; /* entries of all sets */
	int64_t n_ent, cap_ent;
	struct gset *sets; /* interned sets */
	int32_t n_sets, cap_sets;
	int32_t *hash; /* open addressing over sets: set id, -1 if empty */
	int32_t n_hash;
};

struct gwalk {
	const struct atlas_grammar *g; /* the grammar */
	struct gpool pool;	       /* frames */
	struct gentry *ent;	       /* entries of all levels */
	int64_t cap_ent;
	struct glevel *lv; /* levels */
	int32_t cap_lv;
	uint32_t stamp;	    /* current step, for the marks below */
	uint32_t *vstamp;   /* per state: step of its last closure visit */
	int32_t *vpar;	    /* per state: parent of that visit */
	uint32_t *estamp;   /* per state: step it last became an entry top */
	int32_t *epar;	    /* per state: parent of that entry */
	struct gentry *vis; /* other closure visits of this step */
	int32_t n_vis, cap_vis;
	const uint32_t *follow; /* a cache walk: the bytes that may follow the rule
				 * of its bottom frame (a token that leaves the rule
				 * with another byte depends on the context) */
	bool overflow;		/* a level passed MAX_STACKS */
	bool oom;		/* an allocation failed */
	int64_t work;		/* stack steps since the walk began */
	struct gmemo *memo;	/* cache walks: the transition memo, else NULL */
};

static int walk_init(struct gwalk *w, const struct atlas_grammar *g)
{
	memset(w, 0, sizeof(*w));
	w->g = g;
	size_t ns = (size_t)g->n_states + 1;
	w->vstamp = calloc(ns, sizeof(uint32_t));
	w->vpar = calloc(ns, sizeof(int32_t));
	w->estamp = calloc(ns, sizeof(uint32_t));
	w->epar = calloc(ns, sizeof(int32_t));
	w->cap_lv = 64;
	w->lv = calloc((size_t)w->cap_lv, sizeof(*w->lv));
	w->cap_ent = 256;
	w->ent = malloc(sizeof(*w->ent) * (size_t)w->cap_ent);
	if (!w->vstamp || !w->vpar || !w->estamp || !w->epar || !w->lv || !w->ent)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	return 0;
}

static void walk_release(struct gwalk *w)
{
	pool_release(&w->pool);
	free(w->ent), free(w->lv), free(w->vstamp), free(w->vpar), free(w->estamp);
	free(w->epar), free(w->vis);
	memset(w, 0, sizeof(*w));
}

/* Has this step already expanded (s, parent)? Marks it if not. */
static bool visited(struct gwalk *w, int32_t s, int32_t parent)
{
	if (w->vstamp[s] != w->stamp) {
		w->vstamp[s] = w->stamp;
		w->vpar[s] = parent;
		return false;
	}
	if (w->vpar[s] == parent)
		return true;
	for (int32_t k = 0; k < w->n_vis; k++)
		if (w->vis[k].top == s && w->vis[k].parent == parent)
			return true;
	if (w->n_vis >= MAX_VISITS) {
		w->overflow = true; /* as if too ambiguous */
		return true;
	}
	struct gentry *v = grow(w->vis, &w->cap_vis, w->n_vis + 1, sizeof(*v));
	if (!v) {
		w->oom = true;
		return true;
	}
	w->vis = v;
	v[w->n_vis++] = (struct gentry){s, parent};
	return false;
}

static void add_entry(struct gwalk *w, struct glevel *L, int32_t top, int32_t parent)
{
	if (w->estamp[top] == w->stamp) {
		if (w->epar[top] == parent)
			return;
		for (int32_t k = 0; k < L->n; k++)
			if (w->ent[L->off + k].top == top && w->ent[L->off + k].parent == parent)
				return;
	} else {
		w->estamp[top] = w->stamp;
		w->epar[top] = parent;
	}
	if (L->n >= MAX_STACKS) {
		w->overflow = true;
		return;
	}
	if (L->off + L->n >= w->cap_ent) {
		struct gentry *e = realloc(w->ent, sizeof(*e) * (size_t)w->cap_ent * 2);
		if (!e) {
			w->oom = true;
			return;
		}
		w->ent = e;
		w->cap_ent *= 2;
	}
	w->ent[L->off + L->n++] = (struct gentry){top, parent};
}

/* Add to L every stack reached from (s, parent) without consuming. */
static void closure(struct gwalk *w, struct glevel *L, int32_t s, int32_t parent)
{
	const struct atlas_grammar *g = w->g;
	if (visited(w, s, parent))
		return;
	const struct gstate *st = &g->states[s];
	for (int32_t k = st->clo_off; k < st->clo_off + st->n_clo; k++) {
		int32_t x = g->clo[k];
		const struct gstate *xs = &g->states[x];
		if (xs->n_class)
			add_entry(w, L, x, parent);
		const struct gedge *e = &g->edges[xs->edge_off + xs->n_edges - xs->n_call];
		for (int32_t c = 0; c < xs->n_call; c++) {
			int32_t f = pool_push(&w->pool, e[c].to, parent);
			if (f >= 0)
				closure(w, L, g->rules[e[c].arg].start, f);
		}
		if (xs->final) {
			if (parent < 0) {
				L->bottom = 1;
			} else {
				struct gframe fr = w->pool.f[parent];
				closure(w, L, fr.state, fr.parent);
			}
		}
	}
}

static bool class_has(const struct atlas_grammar *g, int32_t c, uint32_t cp)
{
	const struct gclass *k = &g->classes[c];
	if (cp < 128)
		return k->ascii[cp >> 5] >> (cp & 31) & 1;
	const uint32_t *r = g->ranges + k->off;
	int32_t lo = 0, hi = k->n - 1;
	while (lo <= hi) {
		int32_t mid = (lo + hi) / 2;
		if (cp < r[2 * mid])
			hi = mid - 1;
		else if (cp > r[2 * mid + 1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* Does class c hold some code point in [a, b]? */
static bool class_meets(const struct atlas_grammar *g, int32_t c, uint32_t a, uint32_t b)
{
	const struct gclass *k = &g->classes[c];
	const uint32_t *r = g->ranges + k->off;
	for (int32_t i = 0; i < k->n; i++)
		if (r[2 * i + 1] >= a)
			return r[2 * i] <= b;
	return false;
}

static struct glevel *level(struct gwalk *w, int32_t k)
{
	if (k >= w->cap_lv) {
		struct glevel *l = realloc(w->lv, sizeof(*l) * (size_t)w->cap_lv * 2);
		if (!l) {
			w->oom = true;
			return NULL;
		}
		w->lv = l;
		w->cap_lv *= 2;
	}
	return &w->lv[k];
}

static void new_step(struct gwalk *w)
{
	w->n_vis = 0;
	if (++w->stamp == 0) { /* wrapped: forget old marks */
		memset(w->vstamp, 0, sizeof(uint32_t) * (size_t)w->g->n_states);
		memset(w->estamp, 0, sizeof(uint32_t) * (size_t)w->g->n_states);
		w->stamp = 1;
	}
}

static const uint32_t cp_min[5] = {0, 0, 0x80, 0x800, 0x10000};

/* In a cache walk: does byte b, after level L, leave the rule for a
 * context that could take it? */
static bool leaves(const struct gwalk *w, const struct glevel *L, unsigned char b)
{
	return L->bottom && w->follow && (w->follow[b >> 5] >> (b & 31) & 1);
}

#define MEMO_SETS 8192 /* interned sets before the memo starts over */

static void memo_clear(struct gmemo *m)
{
	for (int32_t k = 0; k < m->n_sets; k++)
		free(m->sets[k].next);
	m->n_sets = 0;
	m->n_ent = 0;
	for (int32_t k = 0; k < m->n_hash; k++)
		m->hash[k] = -1;
}

static void memo_free(struct gmemo *m)
{
	if (!m)
		return;
	memo_clear(m);
	free(m->ent), free(m->sets), free(m->hash);
	free(m);
}

static uint32_t set_hash(const struct gentry *e, int32_t n, const struct glevel *L)
{
	uint32_t h = 2166136261u ^ L->acc ^ (uint32_t)L->rem << 24 ^ (uint32_t)L->len << 26 ^
		     (uint32_t)L->bottom << 28;
	for (int32_t k = 0; k < n; k++)
		h = (h ^ (uint32_t)e[k].top) * 16777619u ^ (uint32_t)e[k].parent * 0x9e3779b1u;
	return h ^ (h >> 15);
}

/* The id of level L's set in the memo (added if new), -1 when full. */
static int32_t memo_intern(struct gwalk *w, const struct glevel *L)
{
	struct gmemo *m = w->memo;
	const struct gentry *e = w->ent + L->off;
	if (m->n_sets >= MEMO_SETS || !m->hash)
		return -1;
	uint32_t h = set_hash(e, L->n, L) & (uint32_t)(m->n_hash - 1);
	for (; m->hash[h] >= 0; h = (h + 1) & (uint32_t)(m->n_hash - 1)) {
		const struct gset *t = &m->sets[m->hash[h]];
		if (t->n == L->n && t->acc == L->acc && t->rem == L->rem && t->len == L->len &&
		    t->bottom == L->bottom &&
		    !memcmp(m->ent + t->off, e, sizeof(*e) * (size_t)L->n))
			return m->hash[h];
	}
	if (m->n_ent + L->n > m->cap_ent) {
		int64_t cap = m->cap_ent ? m->cap_ent : 1024;
		while (cap < m->n_ent + L->n)
			cap *= 2;
		struct gentry *ne = realloc(m->ent, sizeof(*ne) * (size_t)cap);
		if (!ne)
			return -1;
		m->ent = ne;
		m->cap_ent = cap;
	}
	struct gset *ns = grow(m->sets, &m->cap_sets, m->n_sets + 1, sizeof(*ns));
	if (!ns)
		return -1;
	m->sets = ns;
	memcpy(m->ent + m->n_ent, e, sizeof(*e) * (size_t)L->n);
	ns[m->n_sets] = (struct gset){.off = m->n_ent,
				      .n = L->n,
				      .acc = L->acc,
				      .rem = L->rem,
				      .len = L->len,
				      .bottom = L->bottom};
	m->n_ent += L->n;
	m->hash[h] = m->n_sets;
	return m->n_sets++;
}

static struct gmemo *memo_new(void)
{
	struct gmemo *m = calloc(1, sizeof(*m));
	if (m)
		m->hash = malloc(sizeof(int32_t) * 2 * MEMO_SETS);
	if (!m || !m->hash) {
		memo_free(m);
		return NULL;
	}
	m->n_hash = 2 * MEMO_SETS;
	for (int32_t k = 0; k < m->n_hash; k++)
		m->hash[k] = -1;
	return m;
}

static bool step_compute(struct gwalk *w, int32_t k, unsigned char b);

/* Level k + 1 from level k and byte b. False when no parse takes b (or
 * the level overflowed, which counts as not taking it). */
static bool step(struct gwalk *w, int32_t k, unsigned char b)
{
	struct gmemo *m = w->memo;
	if (!m)
		return step_compute(w, k, b);
	int32_t sid = w->lv[k].set;
	int32_t nx = sid >= 0 && m->sets[sid].next ? m->sets[sid].next[b] : -1;
	if (nx == -2) {
		w->work++;
		return false;
	}
	if (nx >= 0) {
		const struct gset *t = &m->sets[nx];
		struct glevel *N = level(w, k + 1);
		struct glevel *L = &w->lv[k];
		int64_t off = L->off + L->n;
		if (N && off + t->n > w->cap_ent) {
			int64_t cap = 2 * (off + t->n);
			struct gentry *e = realloc(w->ent, sizeof(*e) * (size_t)cap);
			if (e) {
				w->ent = e;
				w->cap_ent = cap;
			}
		}
		if (!N || off + t->n > w->cap_ent) {
			w->oom = true;
			return false;
		}
		L = &w->lv[k];
		*N = (struct glevel){.off = off,
				     .n = t->n,
				     .acc = t->acc,
				     .rem = t->rem,
				     .len = t->len,
				     .bottom = t->bottom,
				     .pmark = w->pool.n,
				     .set = nx};
		N->anyb = L->anyb | leaves(w, L, b);
		memcpy(w->ent + off, m->ent + t->off, sizeof(*w->ent) * (size_t)t->n);
		w->work++;
		return true;
	}
	bool ok = step_compute(w, k, b);
	if (w->oom || w->overflow)
		return ok;
	int32_t to = -2;
	if (ok)
		to = w->lv[k + 1].set = memo_intern(w, &w->lv[k + 1]);
	if (sid >= 0 && to != -1) {
		struct gset *t = &m->sets[sid];
		if (!t->next && (t->next = malloc(sizeof(int32_t) * 256)))
			for (int i = 0; i < 256; i++)
				t->next[i] = -1;
		if (t->next)
			t->next[b] = to;
	}
	return ok;
}

static bool step_compute(struct gwalk *w, int32_t k, unsigned char b)
{
	const struct atlas_grammar *g = w->g;
	struct glevel *N = level(w, k + 1);
	if (!N)
		return false;
	struct glevel *L = &w->lv[k];
	*N = (struct glevel){.off = L->off + L->n};
	N->anyb = L->anyb | leaves(w, L, b);
	w->work += L->n + 1;
	new_step(w);
	w->overflow = false;
	uint32_t cp;
	if (L->rem == 0 && b < 0x80) {
		cp = b;
	} else {
		if (L->rem == 0) {
			int n = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
			if (b < 0xc2 || b > 0xf4)
				return false;
			N->acc = b & (0x7fu >> n);
			N->rem = (uint8_t)(n - 1);
			N->len = (uint8_t)n;
		} else {
			if ((b & 0xc0) != 0x80)
				return false;
			N->acc = L->acc << 6 | (b & 0x3f);
			N->rem = L->rem - 1;
			N->len = L->len;
		}
		if (N->rem) {
			uint32_t lo = N->acc << (6 * N->rem), hi = lo | ((1u << (6 * N->rem)) - 1);
			if (lo < cp_min[N->len])
				lo = cp_min[N->len];
			if (hi > 0x10ffff)
				hi = 0x10ffff;
			if (lo > hi)
				return false;
			for (int32_t e = 0; e < L->n; e++) {
				const struct gentry *en = &w->ent[L->off + e];
				const struct gstate *s = &g->states[en->top];
				const struct gedge *ed =
				    &g->edges[s->edge_off + s->n_edges - s->n_call - s->n_class];
				for (int32_t c = 0; c < s->n_class; c++)
					if (class_meets(g, ed[c].arg, lo, hi)) {
						add_entry(w, N, en->top, en->parent);
						break;
					}
			}
			N->pmark = w->pool.n;
			return N->n > 0 && !w->overflow && !w->oom;
		}
		cp = N->acc;
		N->acc = 0;
		N->len = 0;
		if (cp < cp_min[L->len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
	}
	for (int32_t e = 0; e < L->n; e++) {
		struct gentry en = w->ent[L->off + e];
		const struct gstate *s = &g->states[en.top];
		const struct gedge *ed =
		    &g->edges[s->edge_off + s->n_edges - s->n_call - s->n_class];
		for (int32_t c = 0; c < s->n_class; c++)
			if (class_has(g, ed[c].arg, cp))
				closure(w, N, ed[c].to, en.parent);
		L = &w->lv[k]; /* (entries may have moved; levels do not) */
	}
	N->pmark = w->pool.n;
	return (N->n > 0 || N->bottom) && !w->overflow && !w->oom;
}

/* Level `base` from a start state: its closure. */
static void level_start(struct gwalk *w, int32_t base, int64_t off, int32_t s, int32_t parent)
{
	struct glevel *L = level(w, base);
	if (!L) {
		w->oom = true;
		return;
	}
	*L = (struct glevel){.off = off, .set = -1};
	new_step(w);
	w->overflow = false;
	closure(w, L, s, parent);
	L->pmark = w->pool.n;
	L->anyb = 0;
}

enum { WALK_CACHE, WALK_FULL };

/* Back the pool up to mark, except in cache walks (their memo refers to
 * frames by id; hash-consing bounds the pool anyway). */
static void walk_truncate(struct gwalk *w, int32_t mark)
{
	if (!w->memo)
		pool_truncate(&w->pool, mark);
}

/* Walk the tokens at sorted positions list[n] (all tokens when list is
 * NULL) from level `base`. WALK_FULL: set the bit of each token that the
 * level takes whole (skipping tokens whose bit is already set). WALK_CACHE
 * (base's parent frame is the bottom of a one-rule stack): accepted
 * tokens into bits, tokens that reach the rule's end appended to ctx. */
static int walk(struct gwalk *w, int32_t base, const int32_t *list, int64_t n, int mode,
		uint32_t *bits, int32_t **ctx, int64_t *n_ctx)
{
	const struct atlas_grammar_vocab *v = w->g->v;
	int64_t cap_ctx = 0;
	const unsigned char *pb = NULL;
	int32_t plen = 0, have = 0, dead = -1;
	if (!list)
		n = v->n;
	w->work = 0;
	for (int64_t i = 0; i < n; i++) {
		int32_t k = list ? list[i] : (int32_t)i, id = v->id[k];
		if (mode == WALK_FULL && bits[id >> 5] >> (id & 31) & 1)
			continue;
		const unsigned char *tb = (const unsigned char *)v->bytes + v->off[k];
		int32_t tl = v->len[k], l = 0, lim = tl < plen ? tl : plen;
		while (l < lim && tb[l] == pb[l])
			l++;
		bool acc = false, dep;
		if (dead >= 0 && l > dead) {
			dep = w->lv[base + dead].anyb || leaves(w, &w->lv[base + dead], tb[dead]);
		} else {
			if (l < have) {
				have = l;
				walk_truncate(w, w->lv[base + have].pmark);
			}
			dead = -1;
			while (have < tl && step(w, base + have, tb[have]))
				have++;
			if (have < tl) {
				dead = have;
				walk_truncate(w, w->lv[base + have].pmark);
			}
			acc = have == tl;
			dep = have < tl &&
			      (w->lv[base + have].anyb || leaves(w, &w->lv[base + have], tb[have]));
			pb = tb;
			plen = tl;
		}
		if (w->oom)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		if (w->work > MAX_WALK_WORK) {
			walk_truncate(w, w->lv[base].pmark);
			return atlas_error(ATLAS_EINVAL,
					   "grammar too ambiguous to compute a token mask");
		}
		if (acc) {
			bits[id >> 5] |= 1u << (id & 31);
		} else if (mode == WALK_CACHE && dep) {
			if (*n_ctx == cap_ctx) {
				cap_ctx = cap_ctx ? 2 * cap_ctx : 256;
				int32_t *c = realloc(*ctx, sizeof(int32_t) * (size_t)cap_ctx);
				if (!c)
					return atlas_error(ATLAS_ENOMEM, "out of memory");
				*ctx = c;
			}
			(*ctx)[(*n_ctx)++] = k;
		}
	}
	walk_truncate(w, w->lv[base].pmark);
	return 0;
}

/* Level `base` holding the one stack (top, parent) at a boundary. */
static void level_one(struct gwalk *w, int32_t base, int64_t off, int32_t top, int32_t parent)
{
	struct glevel *L = level(w, base);
	if (L && off >= w->cap_ent) {
		struct gentry *e = realloc(w->ent, sizeof(*e) * (size_t)(off + 1) * 2);
		if (e) {
			w->ent = e;
			w->cap_ent = (off + 1) * 2;
		}
	}
	if (!L || off >= w->cap_ent) {
		w->oom = true;
		return;
	}
	*L = (struct glevel){.off = off, .n = 1, .pmark = w->pool.n, .set = -1};
	w->ent[off] = (struct gentry){top, parent};
}

/* ---- the mask cache ----
 *
 * An entry is a pure function of the grammar, the vocabulary and its
 * state, so any thread may compute it. Concurrency: a thread that needs
 * an absent entry claims its state (busy[s], under mu), takes a cache
 * walker from the grammar's pool, drops mu, walks the vocabulary, and
 * under mu again publishes the entry (an atomic release store that
 * lock-free readers pair with an acquire load), returns the walker and
 * wakes the waiters. A thread that finds the state busy waits on cv
 * instead of computing it twice (the requests of a batch often reach the
 * same state in the same step); if the computation failed, a waiter
 * computes it itself, so that every failing call leaves its own message
 * on its own thread. States that differ are computed in parallel.
 *
 * Walkers are not shared: each has its own frame pool and its own
 * transition memo, whose sets name that pool's frames by id (sharing the
 * memo would mean sharing the pool, under a lock taken on every step).
 * A memo only saves work (a hit gives the level the walk would compute),
 * so an entry comes out the same whichever walker computes it; only the
 * work a walk counts against MAX_WALK_WORK depends on how warm the memo
 * is, as it already did on the order in which states were reached.
 *
 * The pool holds walkers between computations: a new walker is made only
 * when none is idle, so there are never more than the threads that ever
 * computed at once, and at most MAX_WALKERS (past that a thread waits for
 * one to come back). A walker costs 16 bytes per state plus its memo (at
 * most MEMO_SETS sets); all are freed with the grammar. */

/* What a stack whose top is one state does with each token, as far as
 * that rule alone decides: acc, the tokens certainly allowed; ctx, the
 * tokens (sorted positions) that reach the end of the rule and so depend
 * on the frames below; every other token is rejected. */
struct gcache {
	uint32_t *acc; /* bitset over token ids */
	int32_t *ctx;  /* sorted positions, increasing */
	int64_t n_ctx; /* entries of ctx */
};

int grammar_cache_init(struct atlas_grammar *g)
{
	g->cache = calloc((size_t)g->n_states + 1, sizeof(*g->cache));
	g->busy = calloc((size_t)g->n_states + 1, 1);
	g->idle = calloc(MAX_WALKERS, sizeof(*g->idle));
	if (!g->cache || !g->busy || !g->idle)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if (pthread_mutex_init(&g->mu, NULL))
		return atlas_error(ATLAS_ENOMEM, "cannot create a mutex");
	if (pthread_cond_init(&g->cv, NULL)) {
		pthread_mutex_destroy(&g->mu);
		return atlas_error(ATLAS_ENOMEM, "cannot create a condition variable");
	}
	g->mu_ok = true;
	return 0;
}

static void cache_free(struct gcache *c)
{
	if (c) {
		free(c->acc);
		free(c->ctx);
		free(c);
	}
}

static void cache_walker_free(struct gwalk *w)
{
	if (w) {
		memo_free(w->memo);
		walk_release(w);
		free(w);
	}
}

/* A cache walker for the calling thread: an idle one, else a new one
 * while fewer than MAX_WALKERS exist, else the next one returned. Called
 * with g->mu held (it may wait, and it drops mu while allocating).
 * NULL with a message when out of memory. */
static struct gwalk *walker_take(struct atlas_grammar *g)
{
	while (!g->n_idle && g->n_walkers >= MAX_WALKERS)
		pthread_cond_wait(&g->cv, &g->mu);
	if (g->n_idle)
		return g->idle[--g->n_idle];
	g->n_walkers++; /* the slot is ours while we allocate */
	pthread_mutex_unlock(&g->mu);
	struct gwalk *w = malloc(sizeof(*w));
	if (!w)
		atlas_error(ATLAS_ENOMEM, "out of memory");
	else if (walk_init(w, g))
		cache_walker_free(w), w = NULL;
	pthread_mutex_lock(&g->mu);
	if (!w) {
		g->n_walkers--;
		pthread_cond_broadcast(&g->cv); /* a thread may wait for the slot */
	}
	return w;
}

/* State s's entry, computed with walker w (owned by the calling thread
 * for the time of the call; its memo is kept for the next state). NULL
 * with a message when out of memory or past the work limit. */
static struct gcache *cache_compute(struct atlas_grammar *g, struct gwalk *w, int32_t s)
{
	struct gcache *c = calloc(1, sizeof(*c));
	if (c)
		c->acc = calloc((size_t)g->v->n_words, sizeof(uint32_t));
	w->oom = false;
	w->follow = g->follow + 8 * (size_t)g->states[s].rule;
	if (!w->memo)
		w->memo = memo_new(); /* (without one the walk is just slower) */
	if (w->memo && (w->memo->n_sets >= MEMO_SETS || w->pool.n > (1 << 20)))
		memo_clear(w->memo);
	if (!w->memo || !w->memo->n_sets)
		pool_truncate(&w->pool, 0);
	level_one(w, 0, 0, s, -1);
	if (w->memo && !w->oom)
		w->lv[0].set = memo_intern(w, &w->lv[0]);
	if (!c || !c->acc || w->oom) {
		cache_free(c);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	if (walk(w, 0, NULL, 0, WALK_CACHE, c->acc, &c->ctx, &c->n_ctx)) {
		cache_free(c);
		return NULL;
	}
	return c;
}

/* The cache entry of state s, computed on first use (see above for who
 * computes it). NULL with a message when out of memory or past the work
 * limit. Readers without the lock see either NULL or a finished entry. */
static struct gcache *cache_get(const struct atlas_grammar *cg, int32_t s)
{
	struct atlas_grammar *g = (struct atlas_grammar *)cg; /* the cache is mutable */
	struct gcache *c = __atomic_load_n(&g->cache[s], __ATOMIC_ACQUIRE);
	if (c)
		return c;
	pthread_mutex_lock(&g->mu);
	while (!(c = __atomic_load_n(&g->cache[s], __ATOMIC_RELAXED)) && g->busy[s])
		pthread_cond_wait(&g->cv, &g->mu);
	if (c) {
		pthread_mutex_unlock(&g->mu);
		return c;
	}
	g->busy[s] = 1;
	struct gwalk *w = walker_take(g);
	pthread_mutex_unlock(&g->mu);
	if (w)
		c = cache_compute(g, w, s);
	pthread_mutex_lock(&g->mu);
	if (w)
		g->idle[g->n_idle++] = w;
	if (c)
		__atomic_store_n(&g->cache[s], c, __ATOMIC_RELEASE);
	g->busy[s] = 0;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	return c;
}

struct atlas_grammar *atlas_grammar_ref(struct atlas_grammar *g)
{
	__atomic_add_fetch(&g->extra_refs, 1, __ATOMIC_RELAXED);
	return g;
}

/* With the last reference no matcher runs, so every walker is idle. */
void atlas_grammar_free(struct atlas_grammar *g)
{
	if (!g)
		return;
	if (__atomic_sub_fetch(&g->extra_refs, 1, __ATOMIC_ACQ_REL) >= 0)
		return; /* others still hold it */
	for (int32_t s = 0; g->cache && s < g->n_states; s++)
		cache_free(g->cache[s]);
	for (int32_t k = 0; k < g->n_idle; k++)
		cache_walker_free(g->idle[k]);
	if (g->mu_ok) {
		pthread_cond_destroy(&g->cv);
		pthread_mutex_destroy(&g->mu);
	}
	free(g->cache), free(g->busy), free(g->idle), free(g->rules), free(g->states);
	free(g->edges), free(g->classes), free(g->ranges), free(g->clo), free(g->follow);
	for (int i = 0; i < g->n_special; i++)
		free(g->special_text[i]);
	free(g);
}

/* ---- the matcher ----
 *
 * Its position is level 0 of its walker; accepting bytes builds levels
 * 1.. and moves the last one down. Frames no stack uses any more are
 * collected when the pool has grown enough. */

struct atlas_grammar_matcher {
	const struct atlas_grammar *g; /* the grammar */
	struct gwalk w;		       /* level 0: the current stacks */
	bool finished;		       /* an EOS id was accepted */
	int32_t gc_at;		       /* pool size that triggers a collection */
};

struct atlas_grammar_matcher *atlas_grammar_matcher_new(const struct atlas_grammar *g)
{
	struct atlas_grammar_matcher *m = calloc(1, sizeof(*m));
	if (!m || walk_init(&m->w, g)) {
		if (m)
			walk_release(&m->w);
		free(m);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	m->g = g;
	m->gc_at = 1 << 16;
	level_start(&m->w, 0, 0, g->rules[g->root].start, -1);
	if (m->w.oom || m->w.overflow) {
		atlas_error(m->w.oom ? ATLAS_ENOMEM : ATLAS_EINVAL,
			    "grammar too ambiguous at its start (more than %d parses)", MAX_STACKS);
		atlas_grammar_matcher_free(m);
		return NULL;
	}
	return m;
}

struct atlas_grammar_matcher *atlas_grammar_matcher_copy(const struct atlas_grammar_matcher *m)
{
	struct atlas_grammar_matcher *c = atlas_grammar_matcher_new(m->g);
	if (!c)
		return NULL;
	const struct gpool *p = &m->w.pool;
	const struct glevel *L = &m->w.lv[0];
	struct gframe *f = malloc(sizeof(*f) * (size_t)(p->n + 1));
	struct gentry *e = malloc(sizeof(*e) * (size_t)(L->n + 1));
	if (!f || !e) {
		free(f);
		free(e);
		atlas_grammar_matcher_free(c);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	if (p->n)
		memcpy(f, p->f, sizeof(*f) * (size_t)p->n);
	memcpy(e, m->w.ent + L->off, sizeof(*e) * (size_t)L->n);
	free(c->w.pool.f);
	c->w.pool.f = f;
	c->w.pool.n = c->w.pool.cap = p->n;
	pool_rehash(&c->w.pool, p->nb ? p->nb : 1024);
	free(c->w.ent);
	c->w.ent = e;
	c->w.cap_ent = L->n + 1;
	c->w.lv[0] = *L;
	c->w.lv[0].off = 0;
	c->finished = m->finished;
	c->gc_at = m->gc_at;
	return c;
}

void atlas_grammar_matcher_free(struct atlas_grammar_matcher *m)
{
	if (!m)
		return;
	walk_release(&m->w);
	free(m);
}

/* Keep only the frames level 0 reaches (parents precede children, so
 * one pass in order renumbers them). */
static void collect(struct atlas_grammar_matcher *m)
{
	struct gpool *p = &m->w.pool;
	struct glevel *L = &m->w.lv[0];
	int32_t *map = malloc(sizeof(int32_t) * (size_t)(p->n + 1));
	if (!map)
		return;
	for (int32_t k = 0; k < p->n; k++)
		map[k] = -1;
	for (int32_t e = 0; e < L->n; e++)
		for (int32_t x = m->w.ent[L->off + e].parent; x >= 0 && map[x] == -1;
		     x = p->f[x].parent)
			map[x] = -2;
	int32_t j = 0;
	for (int32_t k = 0; k < p->n; k++) {
		if (map[k] != -2)
			continue;
		p->f[j] = p->f[k];
		if (p->f[j].parent >= 0)
			p->f[j].parent = map[p->f[j].parent];
		map[k] = j++;
	}
	for (int32_t e = 0; e < L->n; e++) {
		struct gentry *en = &m->w.ent[L->off + e];
		if (en->parent >= 0)
			en->parent = map[en->parent];
	}
	p->n = j;
	pool_rehash(p, p->nb);
	L->pmark = j;
	m->gc_at = j * 4 > (1 << 16) ? j * 4 : 1 << 16;
	free(map);
}

int atlas_grammar_accept_bytes(struct atlas_grammar_matcher *m, const char *s, size_t n)
{
	struct gwalk *w = &m->w;
	if (m->finished)
		return atlas_error(ATLAS_EINVAL, "grammar: the output has already ended");
	if (n > INT32_MAX / 2)
		return atlas_error(ATLAS_EINVAL, "grammar: too many bytes");
	w->oom = false;
	int32_t k = 0;
	while ((size_t)k < n && step(w, k, (unsigned char)s[k]))
		k++;
	if ((size_t)k < n) {
		bool amb = w->overflow;
		pool_truncate(&w->pool, w->lv[0].pmark);
		if (w->oom)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		if (amb)
			return atlas_error(ATLAS_EINVAL,
					   "grammar too ambiguous (more than %d parses)",
					   MAX_STACKS);
		return atlas_error(ATLAS_EINVAL, "grammar: byte %d of the text does not fit", k);
	}
	if (!n)
		return 0;
	struct glevel top = w->lv[k];
	memmove(w->ent, w->ent + top.off, sizeof(*w->ent) * (size_t)top.n);
	top.off = 0;
	top.anyb = 0;
	w->lv[0] = top;
	if (w->pool.n > m->gc_at)
		collect(m);
	return 0;
}

int atlas_grammar_accept(struct atlas_grammar_matcher *m, int32_t id)
{
	const struct atlas_grammar_vocab *v = m->g->v;
	if (id < 0 || id >= v->n_vocab)
		return atlas_error(ATLAS_EINVAL, "grammar: token %d outside the vocabulary",
				   (int)id);
	if (is_eos(v, id)) {
		if (!atlas_grammar_can_end(m))
			return atlas_error(ATLAS_EINVAL, "grammar: the output cannot end here");
		m->finished = true;
		return 0;
	}
	int32_t k = v->pos[id];
	for (int i = 0; k < 0 && i < m->g->n_special; i++)
		if (m->g->special_id[i] == id)
			return atlas_grammar_accept_bytes(m, m->g->special_text[i],
							  (size_t)m->g->special_len[i]);
	if (k < 0)
		return atlas_error(ATLAS_EINVAL, "grammar: token %d is never allowed", (int)id);
	return atlas_grammar_accept_bytes(m, v->bytes + v->off[k], (size_t)v->len[k]);
}

int atlas_grammar_allow_special(struct atlas_grammar *g, int32_t id, const char *text, size_t len)
{
	if (id < 0 || id >= g->v->n_vocab || !len || len > 256 || g->v->pos[id] >= 0 ||
	    is_eos(g->v, id))
		return atlas_error(ATLAS_EINVAL, "grammar: token %d cannot be allowed as a special "
				   "token", (int)id);
	for (int i = 0; i < g->n_special; i++)
		if (g->special_id[i] == id)
			return 0;
	if (g->n_special == GRAMMAR_MAX_SPECIAL)
		return atlas_error(ATLAS_EINVAL, "grammar: at most %d special tokens",
				   GRAMMAR_MAX_SPECIAL);
	char *t = malloc(len);
	if (!t)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	memcpy(t, text, len);
	g->special_id[g->n_special] = id;
	g->special_text[g->n_special] = t;
	g->special_len[g->n_special++] = (int32_t)len;
	return 0;
}

/* The special tokens of allow_special whose text fits here: each tried on
 * a copy of the matcher (a few, so a copy each is cheap enough). */
static int special_bits(struct atlas_grammar_matcher *m, uint32_t *mask)
{
	const struct atlas_grammar *g = m->g;
	for (int i = 0; i < g->n_special; i++) {
		struct atlas_grammar_matcher *c = atlas_grammar_matcher_copy(m);
		if (!c)
			return ATLAS_ENOMEM;
		if (!atlas_grammar_accept_bytes(c, g->special_text[i], (size_t)g->special_len[i]))
			mask[g->special_id[i] >> 5] |= 1u << (g->special_id[i] & 31);
		atlas_grammar_matcher_free(c);
	}
	atlas_error_clear();
	return 0;
}

bool atlas_grammar_can_end(const struct atlas_grammar_matcher *m)
{
	return m->finished || (m->w.lv[0].bottom && m->w.lv[0].rem == 0);
}

bool atlas_grammar_must_end(const struct atlas_grammar_matcher *m)
{
	return m->finished || (atlas_grammar_can_end(m) && m->w.lv[0].n == 0);
}

static int64_t popcount_mask(const uint32_t *mask, int64_t words)
{
	int64_t n = 0;
	for (int64_t k = 0; k < words; k++)
		n += __builtin_popcount(mask[k]);
	return n;
}

/* Tokens that the stacks of level 0 take: per stack, the cached answer
 * of its top and a walk over the tokens the cache left open. */
int64_t atlas_grammar_fill_mask(struct atlas_grammar_matcher *m, uint32_t *mask)
{
	const struct atlas_grammar_vocab *v = m->g->v;
	struct gwalk *w = &m->w;
	memset(mask, 0, sizeof(uint32_t) * (size_t)v->n_words);
	if (m->finished)
		return 0;
	struct glevel L0 = w->lv[0];
	int rc = 0;
	w->oom = false;
	if (L0.rem) { /* inside a character: no cache for that */
		rc = walk(w, 0, NULL, 0, WALK_FULL, mask, NULL, NULL);
	} else {
		for (int32_t e = 0; e < L0.n && !rc; e++) {
			struct gentry en = w->ent[L0.off + e];
			struct gcache *c = cache_get(m->g, en.top);
			if (!c)
				return ATLAS_EINVAL; /* (the message says why) */
			for (int64_t k = 0; k < v->n_words; k++)
				mask[k] |= c->acc[k];
			if (!c->n_ctx)
				continue;
			level_one(w, 1, L0.n, en.top, en.parent);
			rc = w->oom ? atlas_error(ATLAS_ENOMEM, "out of memory")
				    : walk(w, 1, c->ctx, c->n_ctx, WALK_FULL, mask, NULL, NULL);
		}
	}
	if (!rc && m->g->n_special)
		rc = special_bits(m, mask);
	if (rc)
		return rc;
	if (atlas_grammar_can_end(m))
		for (int k = 0; k < v->n_eos; k++)
			if (v->eos[k] >= 0 && v->eos[k] < v->n_vocab)
				mask[v->eos[k] >> 5] |= 1u << (v->eos[k] & 31);
	return popcount_mask(mask, v->n_words);
}
