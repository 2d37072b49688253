/* test-tp.c - tensor parallelism on the CPU: every golden model whose
 * head counts allow it, loaded as P = 2 (and P = 4 where the heads
 * allow) thread ranks, each rank with its own CPU backend and thread,
 * against the same model on one rank:
 *
 *  - all-logits prefill of a fixture case and the same tokens one at a
 *    time through the KV cache: logits within 1e-4 relative (max |a - b|
 *    over max |b|; the o and down sums are split, so the bits may differ);
 *  - 32 greedy tokens (rank 0 samples on its backend) identical to one
 *    rank's and to the fixture's transformers tokens;
 *  - exactly two all-reduces per layer per step on every rank, and rank
 *    0's weights a fraction of one rank's;
 *  - a negative control: with the all-reduce made a no-op the logits are
 *    far off (so the comparison above can see a missing sum), and the
 *    errors: a P that does not divide the heads, follow on rank 0, a
 *    forward step on a follower. */
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/comm/comm.h"
#include "../../lib/core/error.h"
#include "../../lib/core/threads.h"
#include "../../lib/engine/generate.h"
#include "../../lib/engine/scheduler.h"
#include "../../lib/model/model.h"
#include "harness.h"

#define TOL 1e-4     /* relative logit error */
#define NGEN 32      /* greedy tokens */
#define MAXP 4       /* ranks at most */

/* --- a communicator that counts (and may drop) all-reduces -------------- */

struct wrap {
	struct atlas_comm *inner; /* the real communicator */
	long reduces;             /* all_reduce_sum calls so far */
	int drop;                 /* 1: all_reduce_sum does nothing (broken) */
};

static int w_reduce(struct atlas_comm *c, void *buf, int64_t n, enum atlas_dtype dt,
		    struct atlas_backend *be)
{
	struct wrap *w = c->ctx;
	w->reduces++;
	return w->drop ? 0 : w->inner->all_reduce_sum(w->inner, buf, n, dt, be);
}

static int w_broadcast(struct atlas_comm *c, void *buf, size_t bytes, int root,
		       struct atlas_backend *be)
{
	struct wrap *w = c->ctx;
	return w->inner->broadcast(w->inner, buf, bytes, root, be);
}

static int w_barrier(struct atlas_comm *c)
{
	struct wrap *w = c->ctx;
	return w->inner->barrier(w->inner);
}

static void w_destroy(struct atlas_comm *c)
{
	struct wrap *w = c->ctx;
	w->inner->destroy(w->inner);
	free(w);
	free(c);
}

static struct atlas_comm *wrap_new(struct atlas_comm *inner, int drop)
{
	struct atlas_comm *c = calloc(1, sizeof(*c));
	struct wrap *w = calloc(1, sizeof(*w));
	w->inner = inner;
	w->drop = drop;
	*c = (struct atlas_comm){
		.name = "wrap", .rank = inner->rank, .world = inner->world, .ctx = w,
		.all_reduce_sum = w_reduce, .broadcast = w_broadcast, .barrier = w_barrier,
		.destroy = w_destroy,
	};
	return c;
}

static long reduces(struct atlas_comm *c)
{
	return ((struct wrap *)c->ctx)->reduces;
}

/* --- a group of P ranks of one model ------------------------------------ */

struct group {
	int P;
	struct atlas_comm *comm[MAXP];
	struct atlas_backend *be[MAXP];
	struct atlas_model *m[MAXP];
	pthread_t tid[MAXP];
	int rc[MAXP];           /* follow's result, ranks 1.. */
	char err[MAXP][256];    /* its message */
};

struct follower {
	struct group *g;
	int r;
};

static void *follower_main(void *arg)
{
	struct follower *f = arg;
	struct group *g = f->g;
	g->rc[f->r] = atlas_model_follow(g->m[f->r]);
	if (g->rc[f->r])
		snprintf(g->err[f->r], sizeof(g->err[f->r]), "%s", atlas_errmsg());
	return NULL;
}

static struct follower followers[MAXP];

/* Load `dir` as P ranks (threads comm, wrapped; drop: broken reduce);
 * the model of one rank when P == 1 (single comm, wrapped). All loads
 * happen here, on this thread: loading needs no collective. 0 or an
 * error (printed). */
static int group_load(struct group *g, const char *dir, int P, int drop)
{
	struct atlas_comm *raw[MAXP];
	memset(g, 0, sizeof(*g));
	g->P = P;
	if (P == 1) {
		raw[0] = atlas_comm_single_new();
	} else if (atlas_comm_threads_new(P, raw)) {
		printf("# threads comm: %s\n", atlas_errmsg());
		return -1;
	}
	for (int r = 0; r < P; r++) {
		g->comm[r] = wrap_new(raw[r], drop);
		g->be[r] = atlas_backend_cpu_new();
		struct atlas_model_params mp;
		atlas_model_default_params(&mp);
		mp.comm = g->comm[r];
		mp.max_tokens = 64;
		g->m[r] = atlas_model_load(dir, g->be[r], &mp);
		if (!g->m[r]) {
			printf("# load rank %d of %d: %s\n", r, P, atlas_errmsg());
			/* the ranks not reached yet give their comms back here
			 * (group_free frees those already wrapped) */
			for (int q = r + 1; q < P; q++)
				raw[q]->destroy(raw[q]);
			return -1;
		}
	}
	return 0;
}

static void group_start(struct group *g)
{
	for (int r = 1; r < g->P; r++) {
		followers[r] = (struct follower){g, r};
		pthread_create(&g->tid[r], NULL, follower_main, &followers[r]);
	}
}

/* Stop and join the followers; check they ended cleanly. */
static void group_stop(struct group *g)
{
	if (g->m[0])
		CHECK_EQ_INT(atlas_model_stop_followers(g->m[0]), 0);
	for (int r = 1; r < g->P; r++) {
		pthread_join(g->tid[r], NULL);
		if (g->rc[r])
			printf("# rank %d: %s\n", r, g->err[r]);
		CHECK_EQ_INT(g->rc[r], 0);
	}
}

static void group_free(struct group *g)
{
	for (int r = 0; r < g->P; r++) {
		atlas_model_free(g->m[r]);
		if (g->be[r])
			g->be[r]->destroy(g->be[r]);
		if (g->comm[r])
			g->comm[r]->destroy(g->comm[r]);
	}
}

/* --- what rank 0 computes ----------------------------------------------- */

struct result {
	float *all;        /* [n_case, V] all-logits prefill of the case */
	float *inc;        /* [n_case, V] the same, one token at a time */
	int32_t tok[NGEN]; /* greedy tokens */
	size_t ntok;
	long steps;        /* forward steps run */
};

struct collect {
	int32_t *v;
	size_t n;
};

static int collect_cb(void *ud, int32_t id, const char *text, size_t len)
{
	struct collect *c = ud;
	(void)text;
	(void)len;
	if (id >= 0 && c->n < NGEN)
		c->v[c->n++] = id;
	return 0;
}

/* Run the case ids and the greedy prompt on rank 0 of g (followers
 * running); 0 on success. */
static int run_rank0(struct group *g, const int32_t *ids, size_t n, const int32_t *prompt,
		     size_t np, struct result *res)
{
	struct atlas_model *m = g->m[0];
	int64_t V = atlas_model_config(m)->vocab_size;
	int rc;
	memset(res, 0, sizeof(*res));
	res->all = malloc(n * (size_t)V * sizeof(float));
	res->inc = malloc(n * (size_t)V * sizeof(float));
	struct atlas_seq *s = atlas_seq_new(m);
	rc = atlas_model_forward(m, s, ids, (int64_t)n, res->all, true);
	res->steps++;
	atlas_seq_reset(s);
	for (size_t t = 0; !rc && t < n; t++, res->steps++)
		rc = atlas_model_forward(m, s, ids + t, 1, res->inc + t * (size_t)V, false);
	atlas_seq_reset(s);
	struct atlas_gen_params gp = {.max_tokens = NGEN, .ignore_eos = true};
	atlas_sampler_default_params(&gp.sampling);
	gp.sampling.temperature = 0;
	struct collect col = {res->tok, 0};
	struct atlas_gen_stats st;
	if (!rc)
	{
		struct atlas_sched *sc = atlas_sched_new(m, NULL, NULL);
		rc = sc ? atlas_generate(sc, prompt, (int64_t)np, &gp, collect_cb, &col, &st)
			: ATLAS_ENOMEM;
		atlas_sched_free(sc);
	}
	res->ntok = col.n;
	res->steps += 1 + st.n_decode;
	if (rc)
		printf("# rank 0: %s\n", atlas_errmsg());
	atlas_seq_free(s);
	return rc;
}

static void result_free(struct result *r)
{
	free(r->all);
	free(r->inc);
}

static double rel_err(const float *a, const float *b, size_t n)
{
	double maxd = 0, maxb = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (!(d <= maxd))
			maxd = isnan(d) ? INFINITY : d;
		maxb = fmax(maxb, fabs((double)b[i]));
	}
	return maxb > 0 ? maxd / maxb : maxd;
}

/* --- the fixtures ------------------------------------------------------- */

static char dir[512];   /* fixture directory */
static char mdir[1100]; /* model directory */
static int models_run;  /* fixtures run at P = 2 */

static int32_t *ids_of(json_object *arr, size_t *n)
{
	*n = json_object_array_length(arr);
	int32_t *v = malloc((*n ? *n : 1) * sizeof(int32_t));
	for (size_t i = 0; i < *n; i++)
		v[i] = json_object_get_int(json_object_array_get_idx(arr, i));
	return v;
}

static bool splits(const struct atlas_config *c, int P)
{
	return c->num_heads % P == 0 &&
	       (c->num_kv_heads % P == 0 || P % c->num_kv_heads == 0) &&
	       c->intermediate_size % P == 0;
}

static void test_model(void)
{
	char path[1200];
	snprintf(path, sizeof(path), "%s/expected.json", dir);
	json_object *exp = json_object_from_file(path), *md, *cases, *g, *j;
	CHECK(exp != NULL);
	if (!exp)
		return;
	if (json_object_object_get_ex(exp, "model_dir", &md))
		snprintf(mdir, sizeof(mdir), "%s/%s", harness_srcdir(), json_object_get_string(md));
	else
		snprintf(mdir, sizeof(mdir), "%s", dir);
	struct atlas_config cfg;
	CHECK_EQ_INT(atlas_config_load(mdir, &cfg), 0);
	if (cfg.n_linear) {
		/* a hybrid model (README-hybrid.md) is not split: refused by name */
		struct group tp;
		CHECK(group_load(&tp, mdir, 2, 0) != 0);
		CHECK(strstr(atlas_errmsg(), "tensor parallelism of hybrid models is not supported"));
		group_free(&tp);
		json_object_put(exp);
		return;
	}
	/* the longest case (up to 48 tokens) and the greedy prompt */
	size_t n = 0, np = 0, nwant = 0;
	int32_t *ids = NULL, *prompt = NULL, *want = NULL;
	if (json_object_object_get_ex(exp, "cases", &cases))
		for (size_t i = 0; i < json_object_array_length(cases); i++) {
			json_object *ci = json_object_array_get_idx(cases, i);
			size_t k;
			if (!json_object_object_get_ex(ci, "ids", &j))
				continue;
			int32_t *v = ids_of(j, &k);
			if (k > n && k <= 48) {
				free(ids);
				ids = v;
				n = k;
			} else {
				free(v);
			}
		}
	CHECK(json_object_object_get_ex(exp, "greedy", &g));
	CHECK(json_object_object_get_ex(g, "prompt", &j));
	prompt = ids_of(j, &np);
	CHECK(json_object_object_get_ex(g, "tokens", &j));
	want = ids_of(j, &nwant);
	CHECK(n > 1 && np > 0 && nwant >= NGEN);
	int64_t V = cfg.vocab_size, L = cfg.num_layers;

	struct group one;
	struct result ref;
	int64_t wbytes1 = 0;
	CHECK_EQ_INT(group_load(&one, mdir, 1, 0), 0);
	if (one.m[0]) {
		CHECK_EQ_INT(run_rank0(&one, ids, n, prompt, np, &ref), 0);
		CHECK_EQ_INT(ref.ntok, NGEN);
		CHECK(!memcmp(ref.tok, want, NGEN * sizeof(int32_t)));
		/* world 1 goes through the same two all-reduces (no-ops) */
		CHECK_EQ_INT(reduces(one.comm[0]), 2 * L * ref.steps);
		wbytes1 = atlas_model_weight_bytes(one.m[0]);
		CHECK_EQ_INT(atlas_model_world(one.m[0]), 1);
	}
	group_stop(&one);
	group_free(&one);

	for (int P = 2; P <= MAXP; P *= 2) {
		if (!splits(&cfg, P)) {
			CHECK(P > 2); /* every golden model splits in two */
			continue;
		}
		models_run += P == 2;
		struct group tp;
		struct result got;
		int ok = group_load(&tp, mdir, P, 0) == 0;
		CHECK(ok);
		if (!ok) {
			group_free(&tp);
			continue;
		}
		group_start(&tp);
		CHECK_EQ_INT(run_rank0(&tp, ids, n, prompt, np, &got), 0);
		group_stop(&tp);
		double e_all = rel_err(got.all, ref.all, n * (size_t)V);
		double e_inc = rel_err(got.inc, ref.inc, n * (size_t)V);
		size_t agree = 0;
		while (agree < got.ntok && got.tok[agree] == ref.tok[agree])
			agree++;
		printf("# %s P=%d: prefill %zu tokens rel err %.3g, one by one %.3g; "
		       "greedy %zu of %d tokens identical; weights %lld of %lld bytes on rank 0\n",
		       mdir, P, n, e_all, e_inc, agree, NGEN,
		       (long long)atlas_model_weight_bytes(tp.m[0]), (long long)wbytes1);
		CHECK(e_all < TOL);
		CHECK(e_inc < TOL);
		CHECK_EQ_INT(got.ntok, NGEN);
		CHECK_EQ_INT(agree, NGEN);
		CHECK_EQ_INT(got.steps, ref.steps);
		for (int r = 0; r < P; r++) {
			/* two per layer per step, on every rank, nothing else */
			CHECK_EQ_INT(reduces(tp.comm[r]), 2 * L * got.steps);
			CHECK_EQ_INT(atlas_model_rank(tp.m[r]), r);
			CHECK_EQ_INT(atlas_model_world(tp.m[r]), P);
		}
		/* layer matrices split: rank 0 holds well under one rank's */
		CHECK(atlas_model_weight_bytes(tp.m[0]) < wbytes1);
		result_free(&got);
		group_free(&tp);
	}
	result_free(&ref);
	free(ids);
	free(prompt);
	free(want);
	json_object_put(exp);
}

/* The all-reduce dropped: the test's own comparison must see it. */
static void test_negative_control(void)
{
	snprintf(mdir, sizeof(mdir), "%s/tests/fixtures/golden/qwen2", harness_srcdir());
	int32_t ids[6] = {5, 77, 300, 12, 900, 41}, prompt[2] = {3, 4};
	struct group one, bad;
	struct result ref, got;
	CHECK_EQ_INT(group_load(&one, mdir, 1, 0), 0);
	CHECK_EQ_INT(run_rank0(&one, ids, 6, prompt, 2, &ref), 0);
	group_stop(&one);
	group_free(&one);
	CHECK_EQ_INT(group_load(&bad, mdir, 2, 1), 0);
	group_start(&bad);
	CHECK_EQ_INT(run_rank0(&bad, ids, 6, prompt, 2, &got), 0);
	group_stop(&bad);
	double e = rel_err(got.all, ref.all, 6 * 1024);
	printf("# without the all-reduce: rel err %.3g\n", e);
	CHECK(e > 100 * TOL);
	result_free(&ref);
	result_free(&got);
	group_free(&bad);
}

static void test_errors(void)
{
	snprintf(mdir, sizeof(mdir), "%s/tests/fixtures/golden/qwen3", harness_srcdir());
	struct atlas_comm *c[3];
	CHECK_EQ_INT(atlas_comm_threads_new(3, c), 0);
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	mp.comm = c[1];
	CHECK(atlas_model_load(mdir, be, &mp) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "tensor parallelism over 3 ranks needs "
		       "num_attention_heads (4) to be a multiple of 3");
	for (int r = 0; r < 3; r++)
		c[r]->destroy(c[r]);

	/* follow is for ranks 1.., steps are for rank 0 */
	struct atlas_comm *c2[2];
	CHECK_EQ_INT(atlas_comm_threads_new(2, c2), 0);
	mp.comm = c2[0];
	struct atlas_model *m0 = atlas_model_load(mdir, be, &mp);
	CHECK(m0 != NULL);
	if (m0) {
		CHECK_EQ_INT(atlas_model_follow(m0), ATLAS_EINVAL);
		CHECK_CONTAINS(atlas_errmsg(), "rank 0 drives the model");
	}
	struct atlas_backend *be1 = atlas_backend_cpu_new();
	mp.comm = c2[1];
	struct atlas_model *m1 = atlas_model_load(mdir, be1, &mp);
	CHECK(m1 != NULL);
	if (m1) {
		struct atlas_seq *s = atlas_seq_new(m1);
		int32_t id = 1;
		float lg[1088];
		CHECK_EQ_INT(atlas_model_forward(m1, s, &id, 1, lg, false), ATLAS_EINVAL);
		CHECK_CONTAINS(atlas_errmsg(), "atlas_model_follow");
		CHECK_EQ_INT(atlas_model_stop_followers(m1), ATLAS_EINVAL);
		atlas_seq_free(s);
	}
	/* one rank: follow refuses, stopping nobody is fine */
	struct atlas_model *solo = atlas_model_load(mdir, be, NULL);
	CHECK(solo != NULL);
	if (solo) {
		CHECK_EQ_INT(atlas_model_follow(solo), ATLAS_EINVAL);
		CHECK_EQ_INT(atlas_model_stop_followers(solo), 0);
		CHECK_EQ_INT(atlas_model_rank(solo), 0);
	}
	atlas_model_free(solo);
	atlas_model_free(m0);
	atlas_model_free(m1);
	c2[0]->destroy(c2[0]);
	c2[1]->destroy(c2[1]);
	be->destroy(be);
	be1->destroy(be1);
}

static void test_fixtures_present(void)
{
	CHECK(models_run >= 8);
}

int main(void)
{
	/* the ranks' threads share the process pool; one thread each keeps
	 * the run small on a small machine (results do not depend on it) */
	atlas_threads_set(1);
	harness_each_golden(dir, sizeof(dir), test_model);
	RUN(test_fixtures_present);
	RUN(test_negative_control);
	RUN(test_errors);
	return harness_done();
}
