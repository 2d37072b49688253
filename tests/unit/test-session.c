/* test-session.c - the engine session (what every program opens a model
 * through) and the ordered many-prompt driver: the generation defaults
 * and EOS set come from the model's files, a tokenizer-only session has
 * no model, a bad directory is named; atlas_batch_generate hands tokens
 * out strictly in input order, reports a bad input in its place while
 * the others complete, and gives each prompt what it gives alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/error.h"
#include "../../lib/engine/batch.h"
#include "../../lib/engine/session.h"
#include "harness.h"

static char dir[512];

static struct atlas_session *open_default(bool no_model)
{
	struct atlas_session_params p;
	atlas_session_default_params(&p);
	snprintf(dir, sizeof(dir), "%s/models/default", harness_srcdir());
	p.model_dir = dir;
	p.device = "cpu";
	p.no_model = no_model;
	p.model.max_context = 256;
	p.model.max_seqs = 4;
	p.model.max_tokens = 64;
	return atlas_session_open(&p);
}

static void test_defaults(void)
{
	struct atlas_session *s = open_default(false);
	CHECK(s != NULL);
	if (!s)
		return;
	CHECK(atlas_session_model(s) && atlas_session_tok(s) && atlas_session_sched(s));
	CHECK_EQ_INT(atlas_session_world(s), 1);
	CHECK(atlas_model_prefix_cache(atlas_session_model(s)));
	struct atlas_gen_params gp;
	atlas_session_gen_defaults(s, &gp);
	/* generation_config.json: do_sample with T 0.8, top_k 40, top_p 0.95,
	 * repetition 1.1, EOS [4093, 4095] (config.json's 4093 not repeated) */
	CHECK(gp.sampling.temperature > 0.79 && gp.sampling.temperature < 0.81);
	CHECK_EQ_INT(gp.sampling.top_k, 40);
	CHECK(gp.sampling.repetition_penalty > 1.09 && gp.sampling.repetition_penalty < 1.11);
	CHECK_EQ_INT(gp.max_tokens, 256);
	int has93 = 0, has95 = 0;
	for (int i = 0; i < gp.n_eos; i++) {
		has93 += gp.eos_ids[i] == 4093;
		has95 += gp.eos_ids[i] == 4095;
	}
	CHECK_EQ_INT(has93, 1);
	CHECK_EQ_INT(has95, 1);
	atlas_session_close(s);

	s = open_default(true);
	CHECK(s != NULL);
	if (s) {
		CHECK(atlas_session_tok(s) != NULL);
		CHECK(atlas_session_model(s) == NULL);
		CHECK(atlas_session_sched(s) == NULL);
		atlas_session_close(s);
	}

	struct atlas_session_params p;
	atlas_session_default_params(&p);
	p.model_dir = "/nonexistent/atlas-model";
	p.device = "cpu";
	CHECK(atlas_session_open(&p) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "/nonexistent/atlas-model");
}

/* The driver's callbacks, checked as they come. */
struct order {
	int64_t next;         /* the inputs given out so far */
	int64_t n_in;         /* inputs to give */
	int64_t open;         /* the input whose tokens come now (-1 none) */
	int64_t ended;        /* inputs ended so far */
	bool out_of_order;    /* a token or end came for another input */
	int32_t got[8][16];   /* ids per input */
	int n_got[8];         /* how many */
	int rc[8];            /* their end codes */
	struct atlas_gen_params gp;
};

static const int32_t prompts[8][6] = {
	{100, 200, 300, 400, 500, 600}, {7, 8, 9, 10, 11, 12}, {0}, {42, 43, 44, 45, 46, 47},
	{100, 200, 300, 400, 500, 601}, {900, 901, 902, 903, 904, 905},
};

static int next_in(void *ud, struct atlas_batch_input *in)
{
	struct order *o = ud;
	if (o->next == o->n_in)
		return 0;
	int64_t i = o->next++;
	if (i == 2) { /* a bad line in the middle */
		in->bad = true;
		snprintf(in->error, sizeof(in->error), "line 3: no prompt ids");
		return 1;
	}
	in->ids = malloc(6 * sizeof(int32_t));
	memcpy(in->ids, prompts[i], 6 * sizeof(int32_t));
	in->n = 6;
	return 1;
}

static void token(void *ud, int64_t index, void *tag, int32_t id, const char *text, size_t len)
{
	struct order *o = ud;
	if (o->open < 0)
		o->open = index;
	if (index != o->open || index != o->ended)
		o->out_of_order = true;
	if (id >= 0 && o->n_got[index] < 16)
		o->got[index][o->n_got[index]++] = id;
}

static void done(void *ud, const struct atlas_batch_end *e)
{
	struct order *o = ud;
	if (e->index != o->ended || (o->open >= 0 && o->open != e->index))
		o->out_of_order = true;
	o->rc[e->index] = e->rc;
	o->ended++;
	o->open = -1;
}

/* Ids of one atlas_generate run. */
struct collect {
	int32_t v[16]; /* ids */
	int n;         /* how many */
};

static int collect_id(void *ud, int32_t id, const char *text, size_t len)
{
	struct collect *c = ud;
	if (id >= 0 && c->n < 16)
		c->v[c->n++] = id;
	return 0;
}

static void test_batch_order(void)
{
	struct atlas_session *s = open_default(false);
	CHECK(s != NULL);
	if (!s)
		return;
	struct atlas_sched *sc = atlas_session_sched(s);
	struct order o = {.n_in = 6, .open = -1};
	atlas_session_gen_defaults(s, &o.gp);
	o.gp.max_tokens = 12;
	o.gp.ignore_eos = true;
	o.gp.sampling.seed = 9;
	struct atlas_batch_io io = {.next = next_in, .token = token, .done = done, .ud = &o};
	struct atlas_batch_totals tot;
	CHECK_EQ_INT(atlas_batch_generate(sc, &o.gp, 3, &io, &tot), ATLAS_EINVAL);
	CHECK(!o.out_of_order);
	CHECK_EQ_INT(o.ended, 6);
	CHECK_EQ_INT(tot.inputs, 6);
	CHECK_EQ_INT(tot.failed, 1);
	CHECK_EQ_INT(o.rc[2], ATLAS_EINVAL);
	CHECK_EQ_INT(tot.gen_tokens, 5 * 12);
	/* inputs 0 and 4 share 5 tokens: the later one found a block */
	CHECK(tot.cached_tokens >= 4);
	/* each good input alone, through atlas_generate */
	for (int i = 0; i < 6; i++) {
		if (i == 2)
			continue;
		struct collect c = {.n = 0};
		struct atlas_gen_stats st;
		CHECK_EQ_INT(o.n_got[i], 12);
		CHECK_EQ_INT(atlas_generate(sc, prompts[i], 6, &o.gp, collect_id, &c, &st), 0);
		CHECK_EQ_INT(c.n, 12);
		CHECK(!memcmp(c.v, o.got[i], 12 * sizeof(int32_t)));
	}
	atlas_session_close(s);
}

int main(void)
{
	RUN(test_defaults);
	RUN(test_batch_order);
	return harness_done();
}
