/* test-prefix.c - prefix caching over the paged KV pool (lib/model/
 * prefix.c, kvpool.c) on the CPU backend: sequences that share cached
 * blocks get the same logits, bit for bit, as a sequence that computed
 * everything itself on a model without the cache; reference counts,
 * least-recently-used eviction (never of a held block, a parent's
 * subtree with it), copy on write of a shared partial block, and a
 * randomized run that checks the pool's bookkeeping after every step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/backend/cpu/cpu.h"
#include "../../lib/core/error.h"
#include "../../lib/model/decoder_internal.h"
#include "../../lib/model/model.h"
#include "harness.h"

#define V 1024 /* the golden model's vocabulary */
#define B 4    /* tokens per block in most tests */

static char path[512];

static struct atlas_model *load(struct atlas_backend *be, int64_t block_size, int64_t blocks,
				int64_t seqs)
{
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_context = 64;
	p.max_seqs = seqs;
	p.block_size = block_size;
	p.kv_blocks = blocks;
	snprintf(path, sizeof(path), "%s/tests/fixtures/golden/qwen3-bf16", harness_srcdir());
	return atlas_model_load(path, be, &p);
}

/* The pool's bookkeeping is whole (kvpool.c's own check). */
#define CHECK_POOL(m) \
	do { \
		if (atlas_kvpool_check(m)) \
			harness_fail(__FILE__, __LINE__, "pool: %s", atlas_errmsg()); \
	} while (0)

/* Append ids[0..n) to s in steps of at most ATLAS_CPU_GEMV_MAX_T
 * tokens. The CPU backend's matmul sums in another order for longer
 * steps (a GEMV up to that many rows, tiles above), so a row's bits
 * depend on which side of that bound its step was; within one side they
 * do not depend on the step's length. Computing every row of these
 * tests on the same side makes "bit-identical to the reference" a test
 * of which KV rows a step read, which is the point. Returns the first
 * error. */
static int feed(struct atlas_model *m, struct atlas_seq *s, const int32_t *ids, int64_t n,
		float *logits)
{
	for (int64_t i = 0; i < n; i += ATLAS_CPU_GEMV_MAX_T) {
		int64_t k = n - i < ATLAS_CPU_GEMV_MAX_T ? n - i : ATLAS_CPU_GEMV_MAX_T;
		int rc = atlas_model_forward(m, s, ids + i, k, logits, false);
		if (rc)
			return rc;
	}
	return 0;
}

/* The last token's logits of ids[0..n) computed on a fresh sequence of
 * `ref` (a model with the cache off). */
static void reference(struct atlas_model *ref, const int32_t *ids, int64_t n, float *out)
{
	struct atlas_seq *s = atlas_seq_new(ref);
	CHECK_EQ_INT(feed(ref, s, ids, n, out), 0);
	atlas_seq_free(s);
}

/* s (empty) attaches what the cache has of ids[0..n), computes the rest
 * into logits and publishes; returns what was attached. */
static int64_t prompt(struct atlas_model *m, struct atlas_seq *s, const int32_t *ids, int64_t n,
		      float *logits)
{
	int64_t got = atlas_seq_attach_prefix(s, ids, n);
	CHECK_EQ_INT(atlas_seq_len(s), got);
	CHECK_EQ_INT(feed(m, s, ids + got, n - got, logits), 0);
	atlas_seq_publish_prefix(s, ids);
	return got;
}

/* Same bits as the reference of ids[0..n)? */
static bool same(struct atlas_model *ref, const int32_t *ids, int64_t n, const float *logits)
{
	static float want[V];
	reference(ref, ids, n, want);
	return !memcmp(want, logits, sizeof(want));
}

struct fixture {
	struct atlas_backend *be;
	struct atlas_model *m;   /* prefix cache on */
	struct atlas_model *ref; /* cache off: the references */
};

static bool setup(struct fixture *f, int64_t block_size, int64_t blocks, int64_t seqs)
{
	f->be = atlas_backend_cpu_new();
	f->be->batch_invariant = true;
	f->m = load(f->be, block_size, blocks, seqs);
	f->ref = load(f->be, block_size, 64, 1);
	CHECK(f->m && f->ref);
	if (!f->m || !f->ref) {
		atlas_model_free(f->m);
		atlas_model_free(f->ref);
		f->be->destroy(f->be);
		return false;
	}
	CHECK(!atlas_model_prefix_cache(f->m));
	atlas_model_set_prefix_cache(f->m, true);
	CHECK(atlas_model_prefix_cache(f->m));
	return true;
}

static void teardown(struct fixture *f)
{
	atlas_model_free(f->m);
	atlas_model_free(f->ref);
	f->be->destroy(f->be);
}

/* Two sequences with one 10-token prompt: the second shares the first
 * two blocks and gets the same logits; the reference counts bring every
 * block back, the shared ones as cached. */
static void test_sharing(void)
{
	struct fixture f;
	if (!setup(&f, B, 16, 2))
		return;
	struct atlas_model *m = f.m;
	const int32_t P[10] = {11, 502, 73, 9, 640, 31, 2, 888, 17, 400};
	float la[V], lb[V];
	struct atlas_seq *a = atlas_seq_new(m), *b = atlas_seq_new(m);
	CHECK_EQ_INT(prompt(m, a, P, 10, la), 0);
	CHECK(same(f.ref, P, 10, la));
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 0); /* held, so not counted */
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 16 - 3);
	CHECK_POOL(m);

	CHECK_EQ_INT(atlas_seq_attach_prefix(b, P, 10), 8);
	CHECK_EQ_INT(atlas_seq_len(b), 8);
	CHECK_EQ_INT(atlas_seq_blocks(b), 2);
	CHECK_EQ_INT(b->blocks[0], a->blocks[0]);
	CHECK_EQ_INT(b->blocks[1], a->blocks[1]);
	CHECK_EQ_INT(m->refs[a->blocks[0]], 2);
	CHECK_EQ_INT(m->refs[a->blocks[2]], 1);
	CHECK_EQ_INT(atlas_seq_blocks_needed(b, 2), 1);
	/* a second attach does nothing to a sequence that is not empty */
	CHECK_EQ_INT(atlas_seq_attach_prefix(b, P, 10), 0);
	CHECK_EQ_INT(atlas_model_forward(m, b, P + 8, 2, lb, false), 0);
	CHECK(!memcmp(la, lb, sizeof(la)));
	CHECK(same(f.ref, P, 10, lb));
	atlas_seq_publish_prefix(b, P);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 16 - 4);
	CHECK_POOL(m);

	/* the prompt whole: one token is always left to compute */
	struct atlas_seq *c = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_seq_attach_prefix(c, P, 8), 7); /* a block and 3 of the next */
	CHECK_EQ_INT(c->blocks[1], a->blocks[1]);
	atlas_seq_reset(c);
	CHECK_EQ_INT(atlas_seq_attach_prefix(c, P, 6), 5);
	CHECK_EQ_INT(atlas_seq_blocks(c), 2);
	atlas_seq_reset(c);
	CHECK_EQ_INT(atlas_seq_attach_prefix(c, P, 4), 3); /* a part of the first */
	CHECK_EQ_INT(atlas_seq_blocks(c), 1);
	CHECK_EQ_INT(c->blocks[0], a->blocks[0]);
	atlas_seq_reset(c);
	CHECK_EQ_INT(atlas_seq_attach_prefix(c, P, 1), 0);
	atlas_seq_free(c);
	CHECK_POOL(m);

	atlas_seq_free(a);
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 0); /* b still holds both */
	CHECK_EQ_INT(m->refs[b->blocks[0]], 1);
	CHECK_POOL(m);
	atlas_seq_free(b);
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 2);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 16);
	CHECK_POOL(m);

	/* off: attach finds nothing, and the cached blocks are plain free */
	atlas_model_set_prefix_cache(m, false);
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 0);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 16);
	CHECK_EQ_INT(m->n_free, 16);
	a = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_seq_attach_prefix(a, P, 10), 0);
	CHECK_POOL(m);
	atlas_seq_free(a);
	teardown(&f);
}

/* Caching off (the default): attach finds nothing, publish keeps nothing. */
static void test_off(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model *m = load(be, B, 8, 1);
	CHECK(m != NULL);
	if (!m) {
		be->destroy(be);
		return;
	}
	const int32_t P[9] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
	float l[V];
	struct atlas_seq *a = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, a, P, 9, l, false), 0);
	atlas_seq_publish_prefix(a, P);
	atlas_seq_free(a);
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 0);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 8);
	a = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_seq_attach_prefix(a, P, 9), 0);
	CHECK_EQ_INT(atlas_seq_len(a), 0);
	CHECK_POOL(m);
	atlas_seq_free(a);
	atlas_model_free(m);
	be->destroy(be);
}

/* A tiny pool: the older prefix goes first; a held block never goes, and
 * the sequence holding it computes the same bits after the pressure. */
static void test_eviction_order(void)
{
	struct fixture f;
	if (!setup(&f, B, 8, 3))
		return;
	struct atlas_model *m = f.m;
	const int32_t A[9] = {100, 101, 102, 103, 104, 105, 106, 107, 108};
	const int32_t Bp[9] = {200, 201, 202, 203, 204, 205, 206, 207, 208};
	const int32_t C[16] = {300, 301, 302, 303, 304, 305, 306, 307,
			       308, 309, 310, 311, 312, 313, 314, 315};
	float l[V];
	struct atlas_seq *s = atlas_seq_new(m);
	prompt(m, s, A, 9, l);
	atlas_seq_reset(s);
	prompt(m, s, Bp, 9, l);
	atlas_seq_reset(s);
	/* A's two whole blocks, then B's, are idle; 4 plain free */
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 4);
	CHECK_EQ_INT(m->n_free, 4);
	CHECK_POOL(m);
	/* 6 blocks: the 4 plain ones, then A's two */
	CHECK_EQ_INT(atlas_model_forward(m, s, C, 16, l, false), 0);
	CHECK_EQ_INT(atlas_model_forward(m, s, C, 5, l, false), 0);
	CHECK_EQ_INT(atlas_seq_blocks(s), 6);
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 2);
	CHECK_POOL(m);
	struct atlas_seq *t = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_seq_attach_prefix(t, A, 9), 0);
	CHECK_EQ_INT(atlas_seq_attach_prefix(t, Bp, 9), 8);
	atlas_seq_reset(t);
	atlas_seq_reset(s);
	CHECK_POOL(m);

	/* u holds B's blocks: they are not free, and pressure that needs
	 * them fails instead */
	struct atlas_seq *u = atlas_seq_new(m);
	int32_t Bx[11];
	memcpy(Bx, Bp, sizeof(Bp));
	Bx[9] = 42;
	Bx[10] = 43;
	CHECK_EQ_INT(prompt(m, u, Bx, 10, l), 8);
	CHECK(same(f.ref, Bx, 10, l));
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 8 - 3);
	CHECK_EQ_INT(atlas_model_forward(m, s, C, 16, l, false), 0); /* 4 of the 5 */
	CHECK_EQ_INT(atlas_model_forward(m, t, C, 8, l, false), ATLAS_ENOMEM);
	CHECK_EQ_INT(atlas_seq_len(t), 0);
	CHECK_EQ_INT(atlas_model_forward(m, t, C, 4, l, false), 0); /* the last */
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 0);
	CHECK_EQ_INT(m->refs[u->blocks[0]], 1);
	CHECK_POOL(m);
	CHECK_EQ_INT(atlas_model_forward(m, u, Bx + 10, 1, l, false), 0);
	CHECK(same(f.ref, Bx, 11, l));
	atlas_seq_free(s);
	atlas_seq_free(t);
	atlas_seq_free(u);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 8);
	CHECK_POOL(m);
	teardown(&f);
}

/* Copy on write: sequences that share a partly used block each append
 * their own tokens into a copy, and the original keeps its rows. */
static void test_copy_on_write(void)
{
	struct fixture f;
	if (!setup(&f, B, 16, 3))
		return;
	struct atlas_model *m = f.m;
	int32_t P1[9] = {7, 70, 700, 77, 5, 50, 500, 55, 1}; /* 2 whole blocks */
	int32_t P2[8] = {7, 70, 700, 77, 5, 50, 900, 901};   /* 6 of them */
	int32_t P3[8] = {7, 70, 700, 77, 5, 50, 33, 34};     /* the same 6 */
	float l[V];
	struct atlas_seq *a = atlas_seq_new(m), *b = atlas_seq_new(m), *c = atlas_seq_new(m);
	CHECK_EQ_INT(prompt(m, a, P1, 8, l), 0);
	int32_t shared = a->blocks[1];
	CHECK_EQ_INT(atlas_seq_attach_prefix(b, P2, 8), 6);
	CHECK_EQ_INT(atlas_seq_attach_prefix(c, P3, 8), 6);
	CHECK_EQ_INT(b->blocks[1], shared);
	CHECK_EQ_INT(c->blocks[1], shared);
	CHECK_EQ_INT(m->refs[shared], 3);
	/* no new block for 6 -> 8 tokens, but the copy */
	CHECK_EQ_INT(atlas_seq_blocks_needed(b, 2), 1);
	CHECK_EQ_INT(atlas_seq_blocks_needed(b, 3), 2);
	CHECK_EQ_INT(atlas_model_forward(m, b, P2 + 6, 2, l, false), 0);
	CHECK(b->blocks[1] != shared);
	CHECK_EQ_INT(m->refs[shared], 2);
	CHECK(same(f.ref, P2, 8, l));
	CHECK_EQ_INT(atlas_model_forward(m, c, P3 + 6, 1, l, false), 0);
	CHECK(same(f.ref, P3, 7, l));
	CHECK_EQ_INT(atlas_model_forward(m, c, P3 + 7, 1, l, false), 0);
	CHECK(same(f.ref, P3, 8, l));
	CHECK(c->blocks[1] != shared && c->blocks[1] != b->blocks[1]);
	/* a's own continuation reads the original rows */
	CHECK_EQ_INT(atlas_model_forward(m, a, P1 + 8, 1, l, false), 0);
	CHECK(same(f.ref, P1, 9, l));
	CHECK_POOL(m);

	/* the owner gone: the cache still knows the block, so a sharer copies */
	atlas_seq_free(a);
	atlas_seq_reset(b);
	CHECK_EQ_INT(atlas_seq_attach_prefix(b, P2, 8), 6);
	CHECK_EQ_INT(m->refs[shared], 1);
	CHECK_EQ_INT(atlas_seq_blocks_needed(b, 1), 1);
	CHECK_EQ_INT(atlas_model_forward(m, b, P2 + 6, 2, l, false), 0);
	CHECK(same(f.ref, P2, 8, l));
	CHECK(b->blocks[1] != shared);
	/* and the cached block still has a's rows */
	a = atlas_seq_new(m);
	CHECK_EQ_INT(prompt(m, a, P1, 9, l), 8);
	CHECK(same(f.ref, P1, 9, l));
	CHECK_EQ_INT(a->blocks[1], shared);
	CHECK_POOL(m);
	atlas_seq_free(a);
	atlas_seq_free(b);
	atlas_seq_free(c);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 16);
	CHECK_POOL(m);
	teardown(&f);
}

/* Evicting a node takes its subtree with it: an idle child becomes plain
 * free, a held one stays with its sequence, uncached. */
static void test_descendants(void)
{
	struct fixture f;
	if (!setup(&f, B, 6, 3))
		return;
	struct atlas_model *m = f.m;
	const int32_t X[9] = {60, 61, 62, 63, 64, 65, 66, 67, 68};
	const int32_t Z[20] = {80, 81, 82, 83, 84, 85, 86, 87, 88, 89,
			       90, 91, 92, 93, 94, 95, 96, 97, 98, 99};
	float l[V];
	/* b computes X alone while a publishes its first block: b's first
	 * block stays unpublished, its second hangs under a's first */
	struct atlas_seq *a = atlas_seq_new(m), *b = atlas_seq_new(m), *z = atlas_seq_new(m);
	CHECK_EQ_INT(feed(m, b, X, 9, l), 0);
	CHECK_EQ_INT(prompt(m, a, X, 5, l), 0);
	atlas_seq_publish_prefix(b, X);
	int32_t x0 = a->blocks[0], x1 = b->blocks[1];
	CHECK(atlas_prefix_has(m, x0) && atlas_prefix_has(m, x1));
	CHECK(!atlas_prefix_has(m, b->blocks[0]));
	CHECK_EQ_INT(m->prefix.nodes[x1].parent, x0);
	atlas_seq_free(a); /* x0 idle, older than x1 */
	atlas_seq_free(b);
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 2);
	CHECK_POOL(m);
	CHECK_EQ_INT(m->n_free, 4);
	/* one block more than the plain ones: x0 goes, and x1 with it */
	CHECK_EQ_INT(atlas_model_forward(m, z, Z, 20, l, false), 0);
	CHECK_EQ_INT(atlas_model_kv_blocks_cached(m), 0);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 6 - 5);
	CHECK(!atlas_prefix_has(m, x1));
	CHECK_POOL(m);
	atlas_seq_reset(z);

	/* held: b keeps its block after its parent is evicted, computes on,
	 * and publishes again from the root */
	a = atlas_seq_new(m);
	b = atlas_seq_new(m);
	CHECK_EQ_INT(feed(m, b, X, 9, l), 0);
	CHECK_EQ_INT(prompt(m, a, X, 5, l), 0);
	atlas_seq_publish_prefix(b, X);
	x0 = a->blocks[0];
	x1 = b->blocks[1];
	atlas_seq_free(a);
	CHECK_EQ_INT(atlas_model_forward(m, z, Z, 12, l, false), 0); /* 3 blocks, x0 the last */
	CHECK(!atlas_prefix_has(m, x0));
	CHECK(!atlas_prefix_has(m, x1));
	CHECK_EQ_INT(m->refs[x1], 1);
	CHECK_POOL(m);
	int32_t Xn[12];
	memcpy(Xn, X, sizeof(X));
	Xn[9] = 69, Xn[10] = 70, Xn[11] = 71;
	CHECK_EQ_INT(atlas_model_forward(m, b, Xn + 9, 3, l, false), 0);
	CHECK(same(f.ref, Xn, 12, l));
	atlas_seq_publish_prefix(b, Xn);
	CHECK(atlas_prefix_has(m, b->blocks[0]) && atlas_prefix_has(m, x1));
	CHECK(atlas_prefix_has(m, b->blocks[2]));
	CHECK_POOL(m);
	atlas_seq_free(z);
	a = atlas_seq_new(m);
	CHECK_EQ_INT(prompt(m, a, Xn, 12, l), 11);
	CHECK(same(f.ref, Xn, 12, l));
	atlas_seq_free(a);
	atlas_seq_free(b);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 6);
	CHECK_POOL(m);
	teardown(&f);
}

/* Random prompts over a three-token alphabet (so prefixes collide
 * often), random attach / append / publish / reset, caching turned off
 * and on: after every operation the pool's bookkeeping is whole, the
 * holders of each block are the tables that list it, and every logits
 * row equals the reference bit for bit. */
#define NSEQ 4
#define CTX 40

static uint64_t rng = 0x2545f4914f6cdd1dull;

static int64_t rnd(int64_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (int64_t)(rng % (uint64_t)n);
}

static void check_holders(struct atlas_model *m, struct atlas_seq **s, int line)
{
	int64_t held = 0;
	for (int32_t blk = 0; blk < (int32_t)m->n_blocks; blk++) {
		int32_t n = 0;
		for (int i = 0; i < NSEQ; i++)
			for (int64_t j = 0; j < s[i]->n_blocks; j++)
				n += s[i]->blocks[j] == blk;
		if (n != m->refs[blk])
			harness_fail(__FILE__, line, "block %d: %d tables, %d refs", blk, n,
				     m->refs[blk]);
		held += n > 0;
	}
	if (held + atlas_model_kv_blocks_free(m) != m->n_blocks)
		harness_fail(__FILE__, line, "%lld held + %lld free != %lld", (long long)held,
			     (long long)atlas_model_kv_blocks_free(m), (long long)m->n_blocks);
	if (atlas_kvpool_check(m))
		harness_fail(__FILE__, line, "pool: %s", atlas_errmsg());
}

/* Does s count a copy on write in `need` to append k tokens? */
static bool copying(const struct atlas_seq *s, int64_t k, int64_t need)
{
	int64_t bs = s->m->block_size;
	int64_t grow = (atlas_seq_len(s) + k + bs - 1) / bs - atlas_seq_blocks(s);
	return need > (grow > 0 ? grow : 0);
}

static void test_random(void)
{
	struct fixture f;
	if (!setup(&f, 3, 14, NSEQ))
		return;
	struct atlas_model *m = f.m;
	struct atlas_seq *s[NSEQ];
	int32_t tok[NSEQ][CTX];
	for (int i = 0; i < NSEQ; i++)
		s[i] = atlas_seq_new(m);
	float l[V];
	int64_t attached = 0, copies = 0, refused = 0, mismatches = 0;
	for (int op = 0; op < 600; op++) {
		int i = (int)rnd(NSEQ);
		int64_t len = atlas_seq_len(s[i]);
		int64_t what = rnd(20);
		if (what == 0) {
			atlas_model_set_prefix_cache(m, !atlas_model_prefix_cache(m));
		} else if (what < 4) {
			atlas_seq_reset(s[i]);
		} else if (what < 6) {
			atlas_seq_publish_prefix(s[i], tok[i]);
		} else if (len == 0) {
			int64_t n = 2 + rnd(14);
			for (int64_t t = 0; t < n; t++)
				tok[i][t] = (int32_t)(1 + rnd(3));
			int64_t got = atlas_seq_attach_prefix(s[i], tok[i], n);
			attached += got;
			check_holders(m, s, __LINE__);
			int64_t need = atlas_seq_blocks_needed(s[i], n - got);
			copies += copying(s[i], n - got, need);
			if (need <= atlas_model_kv_blocks_free(m)) {
				CHECK_EQ_INT(feed(m, s[i], tok[i] + got, n - got, l), 0);
				mismatches += !same(f.ref, tok[i], n, l);
				atlas_seq_publish_prefix(s[i], tok[i]);
			} else {
				/* refused whole, before anything moves */
				int rc = atlas_model_forward(m, s[i], tok[i] + got, n - got, l,
							     false);
				CHECK_EQ_INT(rc, ATLAS_ENOMEM);
				refused++;
				CHECK_EQ_INT(atlas_seq_len(s[i]), got);
				check_holders(m, s, __LINE__);
				atlas_seq_reset(s[i]);
			}
		} else if (len < CTX - 3) {
			int64_t k = 1 + rnd(3);
			for (int64_t t = 0; t < k; t++)
				tok[i][len + t] = (int32_t)(1 + rnd(3));
			int64_t need = atlas_seq_blocks_needed(s[i], k);
			int64_t free_before = atlas_model_kv_blocks_free(m);
			copies += copying(s[i], k, need);
			int rc = atlas_model_forward(m, s[i], tok[i] + len, k, l, false);
			CHECK_EQ_INT(rc, need > free_before ? ATLAS_ENOMEM : 0);
			if (rc == 0) {
				mismatches += !same(f.ref, tok[i], len + k, l);
				if (rnd(2))
					atlas_seq_publish_prefix(s[i], tok[i]);
			} else {
				refused++;
				CHECK_EQ_INT(atlas_seq_len(s[i]), len);
			}
		}
		check_holders(m, s, __LINE__);
	}
	CHECK_EQ_INT(mismatches, 0);
	/* the run did exercise what it checks */
	CHECK(attached > 0);
	CHECK(copies > 0);
	CHECK(refused > 0);
	for (int i = 0; i < NSEQ; i++)
		atlas_seq_free(s[i]);
	CHECK_EQ_INT(atlas_model_kv_blocks_free(m), 14);
	CHECK_POOL(m);
	teardown(&f);
}

int main(void)
{
	RUN(test_sharing);
	RUN(test_off);
	RUN(test_eviction_order);
	RUN(test_copy_on_write);
	RUN(test_descendants);
	RUN(test_random);
	return harness_done();
}
