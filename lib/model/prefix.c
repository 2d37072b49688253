/* prefix.c - the prefix cache: KV blocks kept after their sequences let
 * go and found again by their token content.
 *
 * A cached block is a node of a tree (node b is block b): its key is its
 * parent node (the block before it; -1 for a first block) and its
 * block_size tokens, so the path from the root spells the tokens from
 * position 0 and a match is exact (one hash table finds a key's node;
 * the tokens are compared, never trusted to the hash). Blocks carry
 * reference counts (m->refs, kvpool.c); a node no sequence holds is
 * "idle": on a list, oldest first, counted as free, and evicted from the
 * front when a sequence needs a block and the plain free list is empty.
 * Evicting a node takes its subtree out of the tree too (a child is
 * unreachable without its parent): idle nodes become plain free, held
 * ones stay with their sequences, uncached.
 *
 * A sequence that finds a node with an equal key when it publishes a
 * block keeps its own copy unpublished and goes on under the existing
 * node: blocks are never swapped under a running sequence. Everything
 * here is host bookkeeping; only the copy on write (kvpool.c) touches
 * the device. */
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "decoder_internal.h"

/* --- snapshots of a hybrid model's recurrent state -------------------------
 *
 * A cached block of a hybrid model is only worth attaching with the
 * recurrent state after its last token (README-hybrid.md). Each step
 * snapshots a hybrid sequence's state at the last block boundary it
 * reaches (the deltanet op copies it out as it passes: s->pend, see
 * atlas_prefix_snap_at); publishing hands that snapshot to the node of
 * the block it ends. When a prompt's match in the cache goes deeper than
 * the deepest snapshot on its path, the block where it branches off is
 * where later prompts with the same prefix (a shared system prompt
 * followed by different questions) will branch too: that boundary takes
 * the snapshot of the step that reaches it instead of the step's last
 * (Marconi's idea of snapshotting at branch points). Slots are few
 * (ATLAS_SNAPS_PER_SEQ per sequence of
 * a step) and each holds a whole state, so they are recycled least
 * recently used first; a node that loses its slot stays cached but is
 * no longer an attach point. Attaching stops at the deepest matching
 * node that has a snapshot and restores it into the sequence. */

/* snapshot slots per sequence a step may hold (at least 8 in all) */
#define ATLAS_SNAPS_PER_SEQ 4

static size_t state_bytes(const struct atlas_model *m)
{
	return (size_t)m->state_floats * sizeof(float);
}

/* Slot k no longer holds its node's state. */
static void snap_drop(struct atlas_model *m, int32_t k)
{
	struct atlas_prefix *P = &m->prefix;
	if (P->snaps[k].node >= 0) {
		P->nodes[P->snaps[k].node].snap = -1;
		P->snaps[k].node = -1;
		P->snaps_live--;
	}
}

/* A slot to store a snapshot in: a free one (with memory first), else
 * the least recently used (taken from its node); -1 when memory runs out. */
static int32_t snap_take(struct atlas_model *m)
{
	struct atlas_prefix *P = &m->prefix;
	int32_t free_k = -1, lru = -1;
	for (int32_t k = 0; k < (int32_t)P->n_snaps; k++) {
		const struct atlas_psnap *x = &P->snaps[k];
		if (x->node < 0) {
			if (free_k < 0 || x->state)
				free_k = k;
			if (x->state)
				break;
		} else if (lru < 0 || x->used < P->snaps[lru].used) {
			lru = k;
		}
	}
	const int32_t best = free_k >= 0 ? free_k : lru;
	if (best < 0)
		return -1;
	snap_drop(m, best);
	if (!P->snaps[best].state) {
		if (!(P->snaps[best].state = m->be->alloc(m->be, state_bytes(m))))
			return -1;
		P->snaps_alloc++;
	}
	return best;
}

static void snaps_free(struct atlas_model *m)
{
	struct atlas_prefix *P = &m->prefix;
	for (int64_t k = 0; P->snaps && k < P->n_snaps; k++)
		if (P->snaps[k].state)
			m->be->free(m->be, P->snaps[k].state);
	free(P->snaps);
	P->snaps = NULL;
	P->n_snaps = P->snaps_live = P->snaps_alloc = 0;
}

int64_t atlas_prefix_snap_at(struct atlas_seq *s, int64_t n)
{
	struct atlas_model *m = s->m;
	const int64_t B = m->block_size;
	int64_t p = (s->len + n) / B * B;
	s->pend_len = -1;
	if (s->snap_want > s->len && s->snap_want <= s->len + n) {
		p = s->snap_want; /* the branch point first */
		s->snap_want = 0;
	}
	if (!m->prefix.on || !m->prefix.snaps || p <= s->len)
		return 0;
	if (!s->pend && !(s->pend = m->be->alloc(m->be, state_bytes(m))))
		return 0; /* no snapshot: the cache just has less to offer */
	s->pend_len = p;
	return p - s->len;
}

/* s's pending snapshot to node b (the node of the block it ends), unless
 * b has one already. */
static void snap_store(struct atlas_seq *s, int32_t b)
{
	struct atlas_model *m = s->m;
	struct atlas_prefix *P = &m->prefix;
	s->pend_len = -1;
	if (P->nodes[b].snap >= 0)
		return;
	int32_t k = snap_take(m);
	if (k < 0 || m->be->copy(m->be, P->snaps[k].state, s->pend, state_bytes(m)))
		return;
	P->snaps[k].node = b;
	P->snaps[k].used = ++P->tick;
	P->nodes[b].snap = k;
	P->snaps_live++;
}

int64_t atlas_model_prefix_snapshots(const struct atlas_model *m, int64_t *bytes)
{
	if (bytes)
		*bytes = m->prefix.snaps_alloc * (int64_t)state_bytes(m);
	return m->prefix.snaps_live;
}

int atlas_prefix_init(struct atlas_model *m)
{
	struct atlas_prefix *P = &m->prefix;
	int64_t nb = m->n_blocks;
	uint32_t nbuckets = 1;
	while ((int64_t)nbuckets < nb)
		nbuckets <<= 1;
	P->on = false;
	P->root = P->lru_head = P->lru_tail = -1;
	P->n_idle = 0;
	P->mask = nbuckets - 1;
	P->nodes = calloc((size_t)nb, sizeof(*P->nodes));
	P->tokens = malloc((size_t)(nb * m->block_size) * sizeof(int32_t));
	P->buckets = malloc((size_t)nbuckets * sizeof(int32_t));
	P->stack = malloc((size_t)nb * sizeof(int32_t));
	if (!P->nodes || !P->tokens || !P->buckets || !P->stack)
		return atlas_error(ATLAS_ENOMEM, "cannot allocate the prefix cache");
	memset(P->buckets, 0xff, (size_t)nbuckets * sizeof(int32_t)); /* -1 */
	return 0;
}

void atlas_prefix_release(struct atlas_model *m)
{
	struct atlas_prefix *P = &m->prefix;
	free(P->nodes);
	free(P->tokens);
	free(P->buckets);
	free(P->stack);
	snaps_free(m);
	memset(P, 0, sizeof(*P));
}

static uint32_t key_hash(int32_t parent, const int32_t *t, int64_t B)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint32_t)parent;
	for (int64_t i = 0; i < B; i++) {
		h = (h ^ (uint32_t)t[i]) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	return (uint32_t)(h ^ (h >> 32));
}

static const int32_t *node_tokens(const struct atlas_model *m, int32_t b)
{
	return m->prefix.tokens + (int64_t)b * m->block_size;
}

/* The node with key (parent, t[0..B)), or -1. */
static int32_t find(const struct atlas_model *m, int32_t parent, const int32_t *t)
{
	const struct atlas_prefix *P = &m->prefix;
	uint32_t h = key_hash(parent, t, m->block_size);
	for (int32_t b = P->buckets[h & P->mask]; b >= 0; b = P->nodes[b].hnext)
		if (P->nodes[b].hash == h && P->nodes[b].parent == parent &&
		    !memcmp(node_tokens(m, b), t, (size_t)m->block_size * sizeof(int32_t)))
			return b;
	return -1;
}

static int32_t *first_child(struct atlas_model *m, int32_t parent)
{
	return parent < 0 ? &m->prefix.root : &m->prefix.nodes[parent].child;
}

/* Block b (held by the caller, not in the tree) becomes the node with
 * key (parent, t). */
static void insert(struct atlas_model *m, int32_t b, int32_t parent, const int32_t *t)
{
	struct atlas_prefix *P = &m->prefix;
	struct atlas_pnode *n = &P->nodes[b];
	int32_t *head = first_child(m, parent);
	memcpy(P->tokens + (int64_t)b * m->block_size, t, (size_t)m->block_size * sizeof(int32_t));
	n->parent = parent;
	n->child = -1;
	n->prev = -1;
	n->next = *head;
	if (*head >= 0)
		P->nodes[*head].prev = b;
	*head = b;
	n->hash = key_hash(parent, t, m->block_size);
	n->hnext = P->buckets[n->hash & P->mask];
	P->buckets[n->hash & P->mask] = b;
	n->lru_prev = n->lru_next = -1;
	n->cached = true;
	n->snap = -1;
}

static void lru_remove(struct atlas_model *m, int32_t b)
{
	struct atlas_prefix *P = &m->prefix;
	struct atlas_pnode *n = &P->nodes[b];
	if (n->lru_prev >= 0)
		P->nodes[n->lru_prev].lru_next = n->lru_next;
	else
		P->lru_head = n->lru_next;
	if (n->lru_next >= 0)
		P->nodes[n->lru_next].lru_prev = n->lru_prev;
	else
		P->lru_tail = n->lru_prev;
	n->lru_prev = n->lru_next = -1;
	P->n_idle--;
}

void atlas_prefix_idle(struct atlas_model *m, int32_t b)
{
	struct atlas_prefix *P = &m->prefix;
	struct atlas_pnode *n = &P->nodes[b];
	n->lru_prev = P->lru_tail;
	n->lru_next = -1;
	if (P->lru_tail >= 0)
		P->nodes[P->lru_tail].lru_next = b;
	else
		P->lru_head = b;
	P->lru_tail = b;
	P->n_idle++;
}

bool atlas_prefix_has(const struct atlas_model *m, int32_t b)
{
	return m->prefix.nodes[b].cached;
}

/* One more sequence holds node b (an idle node stops being idle). */
static void hold(struct atlas_model *m, int32_t b)
{
	if (m->refs[b]++ == 0)
		lru_remove(m, b);
}

/* Node b leaves the tree (its sibling links are the caller's): out of
 * its hash chain, and onto the free list when no sequence holds it. */
static void leave(struct atlas_model *m, int32_t b)
{
	struct atlas_prefix *P = &m->prefix;
	struct atlas_pnode *n = &P->nodes[b];
	int32_t *p = &P->buckets[n->hash & P->mask];
	while (*p != b)
		p = &P->nodes[*p].hnext;
	*p = n->hnext;
	if (m->refs[b] == 0) {
		lru_remove(m, b);
		m->free_list[m->n_free++] = b;
	}
	if (n->snap >= 0)
		snap_drop(m, n->snap);
	n->cached = false;
	n->child = n->prev = n->next = n->hnext = -1;
	n->gen++;
}

/* Take node top and everything under it out of the tree. */
static void drop_subtree(struct atlas_model *m, int32_t top)
{
	struct atlas_prefix *P = &m->prefix;
	struct atlas_pnode *t = &P->nodes[top];
	if (t->prev >= 0)
		P->nodes[t->prev].next = t->next;
	else
		*first_child(m, t->parent) = t->next;
	if (t->next >= 0)
		P->nodes[t->next].prev = t->prev;
	/* each node is pushed once, so n_blocks entries are enough */
	int64_t sp = 0;
	P->stack[sp++] = top;
	while (sp > 0) {
		int32_t b = P->stack[--sp];
		for (int32_t c = P->nodes[b].child; c >= 0; c = P->nodes[c].next)
			P->stack[sp++] = c;
		leave(m, b);
	}
}

bool atlas_prefix_evict(struct atlas_model *m)
{
	if (m->prefix.lru_head < 0)
		return false;
	drop_subtree(m, m->prefix.lru_head);
	return true;
}

void atlas_model_set_prefix_cache(struct atlas_model *m, bool on)
{
	struct atlas_prefix *P = &m->prefix;
	if (!on) {
		/* every node leaves, so no sibling list needs mending */
		for (int32_t b = 0; b < (int32_t)m->n_blocks; b++)
			if (P->nodes[b].cached)
				leave(m, b);
		P->root = -1;
		snaps_free(m);
	} else if (m->state_floats && !P->snaps) {
		int64_t n = m->max_seqs * ATLAS_SNAPS_PER_SEQ;
		P->n_snaps = n > 8 ? n : 8;
		if (!(P->snaps = calloc((size_t)P->n_snaps, sizeof(*P->snaps))))
			P->n_snaps = 0; /* a hybrid model then shares nothing */
		for (int64_t k = 0; k < P->n_snaps; k++)
			P->snaps[k].node = -1;
	}
	P->on = on;
}

bool atlas_model_prefix_cache(const struct atlas_model *m)
{
	return m->prefix.on;
}

int64_t atlas_model_kv_blocks_cached(const struct atlas_model *m)
{
	return m->prefix.n_idle;
}

/* How many leading tokens of node b's block equal t[0..cap). */
static int64_t common(const struct atlas_model *m, int32_t b, const int32_t *t, int64_t cap)
{
	const int32_t *bt = node_tokens(m, b);
	int64_t k = 0;
	while (k < cap && bt[k] == t[k])
		k++;
	return k;
}

/* atlas_seq_attach_prefix of a hybrid sequence: the whole blocks up to
 * the deepest matching node with a snapshot, whose state s takes. */
static int64_t attach_recurrent(struct atlas_seq *s, const int32_t *ids, int64_t cap)
{
	struct atlas_model *m = s->m;
	struct atlas_prefix *P = &m->prefix;
	const int64_t B = m->block_size;
	int64_t k = 0, best = 0;
	for (int32_t parent = -1; (k + 1) * B <= cap; k++) {
		int32_t b = find(m, parent, ids + k * B);
		if (b < 0)
			break;
		P->stack[k] = b;
		parent = b;
		if (P->nodes[b].snap >= 0)
			best = k + 1;
	}
	/* the match goes on past the deepest snapshot: this prompt branches
	 * off at block k, where later prompts sharing the same prefix will
	 * too; snapshot there on the way (atlas_prefix_snap_at) */
	if (k > best)
		s->snap_want = k * B;
	if (!best || !P->snaps)
		return 0;
	const int32_t last = P->stack[best - 1], slot = P->nodes[last].snap;
	if (m->be->copy(m->be, s->state, P->snaps[slot].state, state_bytes(m)))
		return 0;
	P->snaps[slot].used = ++P->tick;
	for (int64_t i = 0; i < best; i++) {
		hold(m, P->stack[i]);
		s->blocks[s->n_blocks++] = P->stack[i];
	}
	s->n_pub = best;
	s->pub_node = last;
	s->pub_gen = P->nodes[last].gen;
	s->len = best * B;
	return s->len;
}

int64_t atlas_seq_attach_prefix(struct atlas_seq *s, const int32_t *ids, int64_t n)
{
	struct atlas_model *m = s->m;
	struct atlas_prefix *P = &m->prefix;
	int64_t B = m->block_size;
	if (!P->on || s->len != 0 || s->n_blocks != 0 || n < 2)
		return 0;
	/* one token is left to compute; the table holds max_ctx tokens */
	int64_t cap = n - 1 < m->max_ctx ? n - 1 : m->max_ctx;
	if (s->state)
		return attach_recurrent(s, ids, cap);
	int64_t got = 0;
	int32_t parent = -1;
	while (got + B <= cap) {
		int32_t b = find(m, parent, ids + got);
		if (b < 0)
			break;
		hold(m, b);
		s->blocks[s->n_blocks++] = b;
		parent = b;
		got += B;
	}
	s->n_pub = s->n_blocks;
	s->pub_node = parent;
	s->pub_gen = parent >= 0 ? P->nodes[parent].gen : 0;
	/* a partly matching child, shared until s appends to it (copy on
	 * write, which tensor parallelism does not have) */
	if (m->comm->world == 1 && got < cap) {
		int64_t rest = cap - got < B ? cap - got : B - 1;
		int32_t best = -1;
		int64_t best_k = 0;
		for (int32_t c = *first_child(m, parent); c >= 0; c = P->nodes[c].next) {
			int64_t k = common(m, c, ids + got, rest);
			if (k > best_k) {
				best = c;
				best_k = k;
			}
		}
		if (best >= 0) {
			hold(m, best);
			s->blocks[s->n_blocks++] = best;
			got += best_k;
		}
	}
	s->len = got;
	return got;
}

void atlas_seq_publish_prefix(struct atlas_seq *s, const int32_t *ids)
{
	struct atlas_model *m = s->m;
	struct atlas_prefix *P = &m->prefix;
	int64_t B = m->block_size;
	int64_t full = s->len / B < s->n_blocks ? s->len / B : s->n_blocks;
	/* the block a hybrid sequence's pending snapshot ends, or -1 */
	const int64_t sb = s->state && s->pend_len > 0 && s->pend_len <= s->len
				   ? s->pend_len / B - 1 : -1;
	if (sb >= 0 && sb == s->n_pub - 1 && s->n_pub > 0 && P->nodes[s->pub_node].cached &&
	    P->nodes[s->pub_node].gen == s->pub_gen)
		snap_store(s, s->pub_node);
	if (!P->on || full <= s->n_pub)
		return;
	/* go on from the last node published; when that one has left the
	 * tree (evicted, or caching turned off and on), walk again from the
	 * root, putting back what is missing */
	int64_t i = 0;
	int32_t parent = -1;
	if (s->n_pub > 0 && P->nodes[s->pub_node].cached &&
	    P->nodes[s->pub_node].gen == s->pub_gen) {
		i = s->n_pub;
		parent = s->pub_node;
	}
	for (; i < full; i++) {
		const int32_t *t = ids + i * B;
		int32_t b = find(m, parent, t);
		if (b < 0) {
			b = s->blocks[i];
			/* a node would have been found by its key */
			if (P->nodes[b].cached)
				break;
			insert(m, b, parent, t);
		}
		parent = b;
		if (i == sb)
			snap_store(s, b);
	}
	s->n_pub = i;
	s->pub_node = parent;
	s->pub_gen = parent >= 0 ? P->nodes[parent].gen : 0;
}

int atlas_prefix_check(const struct atlas_model *m)
{
	const struct atlas_prefix *P = &m->prefix;
	int64_t idle = 0;
	for (int32_t b = P->lru_head, prev = -1; b >= 0; prev = b, b = P->nodes[b].lru_next) {
		if (!P->nodes[b].cached || m->refs[b] != 0 || P->nodes[b].lru_prev != prev)
			return atlas_error(ATLAS_EINVAL, "idle block %d: cached %d, refs %d", b,
					   P->nodes[b].cached, m->refs[b]);
		if (++idle > m->n_blocks)
			return atlas_error(ATLAS_EINVAL, "the idle list loops");
	}
	if (idle != P->n_idle)
		return atlas_error(ATLAS_EINVAL, "%lld idle blocks listed, %lld counted",
				   (long long)idle, (long long)P->n_idle);
	for (int32_t b = 0; b < (int32_t)m->n_blocks; b++) {
		const struct atlas_pnode *n = &P->nodes[b];
		if (!n->cached)
			continue;
		if (n->parent >= 0 && !P->nodes[n->parent].cached)
			return atlas_error(ATLAS_EINVAL, "node %d's parent %d is not cached", b,
					   n->parent);
		if (find(m, n->parent, node_tokens(m, b)) != b)
			return atlas_error(ATLAS_EINVAL, "node %d is not found by its key", b);
		int32_t c = n->parent < 0 ? P->root : P->nodes[n->parent].child;
		while (c >= 0 && c != b)
			c = P->nodes[c].next;
		if (c != b)
			return atlas_error(ATLAS_EINVAL,
					   "node %d is not among its parent's children", b);
		if (P->nodes[b].lru_prev < 0 && P->lru_head != b && m->refs[b] == 0)
			return atlas_error(ATLAS_EINVAL, "idle node %d is off the idle list", b);
	}
	return 0;
}
