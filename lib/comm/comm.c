/* comm.c - the single-rank communicator (every collective a no-op) and
 * the thread-ranks communicator that unit-tests tensor-parallel code on
 * the CPU (see comm.h).
 *
 * Thread ranks meet in a shared group: each collective publishes the
 * caller's arguments in its slot, waits for all ranks, checks that they
 * agree, and then rank r computes the slice r of the elements for
 * everyone, adding the ranks' values in rank order and writing the sum
 * into every rank's buffer. The slices are disjoint, so no lock is held
 * while summing, and the order of additions never depends on timing. A
 * second wait keeps the slots and buffers stable until all are done.
 */
#include "comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

/* --- single ------------------------------------------------------------ */

static int single_all_reduce(struct atlas_comm *c, void *buf, int64_t n,
			     enum atlas_dtype dt, struct atlas_backend *be)
{
	return 0;
}

static int single_broadcast(struct atlas_comm *c, void *buf, size_t bytes, int root,
			    struct atlas_backend *be)
{
	if (root != 0)
		return atlas_error(ATLAS_EINVAL, "broadcast from rank %d in a world of 1", root);
	return 0;
}

static int single_barrier(struct atlas_comm *c)
{
	return 0;
}

static void single_destroy(struct atlas_comm *c)
{
	free(c);
}

struct atlas_comm *atlas_comm_single_new(void)
{
	struct atlas_comm *c = calloc(1, sizeof(*c));
	if (!c) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	*c = (struct atlas_comm){
		.name = "single",
		.rank = 0,
		.world = 1,
		.all_reduce_sum = single_all_reduce,
		.broadcast = single_broadcast,
		.barrier = single_barrier,
		.destroy = single_destroy,
	};
	return c;
}

/* --- threads ----------------------------------------------------------- */

enum { OP_ALL_REDUCE = 1, OP_BROADCAST = 2 };

/* What one rank passed to the collective in progress. */
struct slot {
	int op;            /* OP_* */
	void *buf;         /* the rank's buffer */
	int64_t n;         /* elements (all_reduce) or bytes (broadcast) */
	enum atlas_dtype dt; /* element type (all_reduce) */
	int root;          /* source rank (broadcast) */
	char bad[160];     /* non-empty: this rank's own arguments are wrong */
};

/* State shared by the thread ranks of one group. */
struct group {
	pthread_mutex_t mu; /* guards arrived, gen, refs */
	pthread_cond_t cv;  /* signalled when a barrier opens */
	int world;          /* ranks */
	int arrived;        /* ranks waiting at the current barrier */
	uint64_t gen;       /* barriers opened so far (wakes the waiters) */
	int refs;           /* communicators not yet destroyed */
	struct slot *slots; /* [world] arguments of the current collective */
};

/* Wait until every rank of g has arrived. */
static void group_wait(struct group *g)
{
	pthread_mutex_lock(&g->mu);
	uint64_t gen = g->gen;
	if (++g->arrived == g->world) {
		g->arrived = 0;
		g->gen++;
		pthread_cond_broadcast(&g->cv);
	} else {
		while (gen == g->gen)
			pthread_cond_wait(&g->cv, &g->mu);
	}
	pthread_mutex_unlock(&g->mu);
}

static const char *op_name(int op)
{
	return op == OP_ALL_REDUCE ? "all_reduce_sum" : "broadcast";
}

/* After the first wait: 0 if every rank passed the same arguments and
 * none was bad, else the error (the same verdict on every rank, since
 * all read the same slots). */
static int group_check(const struct group *g)
{
	const struct slot *s0 = &g->slots[0];
	for (int r = 0; r < g->world; r++) {
		const struct slot *s = &g->slots[r];
		if (s->bad[0])
			return atlas_error(ATLAS_EINVAL, "rank %d: %s", r, s->bad);
		if (s->op != s0->op)
			return atlas_error(ATLAS_EINVAL, "rank 0 called %s but rank %d called %s",
					   op_name(s0->op), r, op_name(s->op));
		if (s->n != s0->n)
			return atlas_error(ATLAS_EINVAL, "%s of %lld on rank 0 but %lld on rank %d",
					   op_name(s->op), (long long)s0->n, (long long)s->n, r);
		if (s->op == OP_ALL_REDUCE && s->dt != s0->dt)
			return atlas_error(ATLAS_EINVAL, "all_reduce_sum of %s on rank 0 but %s on rank %d",
					   atlas_dtype_name(s0->dt), atlas_dtype_name(s->dt), r);
		if (s->op == OP_BROADCAST && s->root != s0->root)
			return atlas_error(ATLAS_EINVAL, "broadcast from rank %d on rank 0 but from %d on rank %d",
					   s0->root, s->root, r);
	}
	return 0;
}

/* The collectives can only touch host memory. */
static int host_backend(const struct atlas_backend *be)
{
	return !be || !strcmp(be->name, "cpu") || !strcmp(be->name, "mock");
}

static float load_elt(const void *p, int64_t i, enum atlas_dtype dt)
{
	switch (dt) {
	case ATLAS_DTYPE_BF16: return atlas_bf16_to_f32(((const uint16_t *)p)[i]);
	case ATLAS_DTYPE_F16: return atlas_f16_to_f32(((const uint16_t *)p)[i]);
	default: return ((const float *)p)[i];
	}
}

static void store_elt(void *p, int64_t i, enum atlas_dtype dt, float v)
{
	switch (dt) {
	case ATLAS_DTYPE_BF16: ((uint16_t *)p)[i] = atlas_f32_to_bf16(v); break;
	case ATLAS_DTYPE_F16: ((uint16_t *)p)[i] = atlas_f32_to_f16(v); break;
	default: ((float *)p)[i] = v; break;
	}
}

/* Rank r's share of the sum: elements [n*r/world, n*(r+1)/world). */
static void reduce_slice(struct group *g, int r)
{
	const struct slot *s0 = &g->slots[0];
	int64_t n = s0->n, lo = n * r / g->world, hi = n * (r + 1) / g->world;
	enum atlas_dtype dt = s0->dt;
	for (int64_t i = lo; i < hi; i++) {
		float acc = load_elt(g->slots[0].buf, i, dt);
		for (int k = 1; k < g->world; k++)
			acc += load_elt(g->slots[k].buf, i, dt);
		for (int k = 0; k < g->world; k++)
			store_elt(g->slots[k].buf, i, dt, acc);
	}
}

/* Publish, wait, check, run `body` if all agree, wait again. */
static int collective(struct atlas_comm *c, struct slot *mine,
		      void (*body)(struct group *g, int rank))
{
	struct group *g = c->ctx;
	g->slots[c->rank] = *mine;
	group_wait(g);
	int rc = group_check(g);
	if (!rc)
		body(g, c->rank);
	group_wait(g);
	return rc;
}

static int threads_all_reduce(struct atlas_comm *c, void *buf, int64_t n,
			      enum atlas_dtype dt, struct atlas_backend *be)
{
	struct slot s = { .op = OP_ALL_REDUCE, .buf = buf, .n = n, .dt = dt };
	if (dt != ATLAS_DTYPE_F32 && dt != ATLAS_DTYPE_BF16 && dt != ATLAS_DTYPE_F16)
		snprintf(s.bad, sizeof(s.bad), "all_reduce_sum of '%s' is not supported",
			 atlas_dtype_name(dt));
	else if (n < 0 || (n > 0 && !buf))
		snprintf(s.bad, sizeof(s.bad), "all_reduce_sum of %lld elements at %p",
			 (long long)n, buf);
	else if (!host_backend(be))
		snprintf(s.bad, sizeof(s.bad), "thread ranks cannot reach '%s' memory", be->name);
	return collective(c, &s, reduce_slice);
}

/* Every rank but the root copies the root's bytes. */
static void broadcast_body(struct group *g, int r)
{
	const struct slot *s = &g->slots[r];
	if (r != s->root && s->n > 0)
		memcpy(s->buf, g->slots[s->root].buf, (size_t)s->n);
}

static int threads_broadcast(struct atlas_comm *c, void *buf, size_t bytes, int root,
			     struct atlas_backend *be)
{
	struct slot s = { .op = OP_BROADCAST, .buf = buf, .n = (int64_t)bytes, .root = root };
	if (root < 0 || root >= c->world)
		snprintf(s.bad, sizeof(s.bad), "broadcast from rank %d in a world of %d", root,
			 c->world);
	else if (bytes > 0 && !buf)
		snprintf(s.bad, sizeof(s.bad), "broadcast of %zu bytes from NULL", bytes);
	else if (!host_backend(be))
		snprintf(s.bad, sizeof(s.bad), "thread ranks cannot reach '%s' memory", be->name);
	return collective(c, &s, broadcast_body);
}

static int threads_barrier(struct atlas_comm *c)
{
	group_wait(c->ctx);
	return 0;
}

static void threads_destroy(struct atlas_comm *c)
{
	if (!c)
		return;
	struct group *g = c->ctx;
	pthread_mutex_lock(&g->mu);
	int last = --g->refs == 0;
	pthread_mutex_unlock(&g->mu);
	if (last) {
		pthread_mutex_destroy(&g->mu);
		pthread_cond_destroy(&g->cv);
		free(g->slots);
		free(g);
	}
	free(c);
}

int atlas_comm_threads_new(int world, struct atlas_comm **comms)
{
	if (world < 1 || world > 256)
		return atlas_error(ATLAS_EINVAL, "world size %d is not in 1..256", world);
	struct group *g = calloc(1, sizeof(*g));
	struct slot *slots = calloc((size_t)world, sizeof(*slots));
	if (!g || !slots) {
		free(g);
		free(slots);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	g->world = world;
	g->slots = slots;
	for (int r = 0; r < world; r++) {
		struct atlas_comm *c = calloc(1, sizeof(*c));
		if (!c) {
			g->refs = r;
			for (int k = r - 1; k >= 0; k--) /* the last frees g */
				threads_destroy(comms[k]);
			if (r == 0) {
				pthread_mutex_destroy(&g->mu);
				pthread_cond_destroy(&g->cv);
				free(slots);
				free(g);
			}
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		}
		*c = (struct atlas_comm){
			.name = "threads",
			.rank = r,
			.world = world,
			.ctx = g,
			.all_reduce_sum = threads_all_reduce,
			.broadcast = threads_broadcast,
			.barrier = threads_barrier,
			.destroy = threads_destroy,
		};
		comms[r] = c;
	}
	g->refs = world;
	return 0;
}
