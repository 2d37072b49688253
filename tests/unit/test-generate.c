/* test-generate.c - the generation loop on a golden model: max tokens,
 * EOS, stop strings (cut exactly before the stop, held-back text
 * released when the stop never completes), cancellation, bad prompts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/engine/generate.h"
#include "../../lib/engine/scheduler.h"
#include "harness.h"

static struct atlas_backend *be;
static struct atlas_model *model;
static struct atlas_tok *tok;
static int32_t prompt[4] = {100, 200, 300, 400};

/* What the callback saw. */
struct seen {
	int32_t ids[128];  /* ids (-1 for the final release) */
	int n;             /* calls */
	char text[4096];   /* concatenated text */
	size_t len;        /* bytes of text */
	int cancel_after;  /* return 1 after this many calls (0: never) */
};

static int on_tok(void *ud, int32_t id, const char *text, size_t len)
{
	struct seen *s = ud;
	if (s->n < 128)
		s->ids[s->n] = id;
	s->n++;
	memcpy(s->text + s->len, text, len);
	s->len += len;
	s->text[s->len] = '\0';
	return s->cancel_after && s->n >= s->cancel_after;
}

static struct atlas_gen_params greedy(int64_t n)
{
	struct atlas_gen_params p = {.max_tokens = n};
	atlas_sampler_default_params(&p.sampling);
	p.sampling.temperature = 0;
	return p;
}

static int run(struct atlas_gen_params *p, struct seen *s, struct atlas_gen_stats *st)
{
	struct atlas_sched *q = atlas_sched_new(model, tok, NULL);
	memset(s->ids, 0, sizeof(s->ids));
	s->n = 0;
	s->len = 0;
	s->text[0] = '\0';
	int rc = atlas_generate(q, prompt, 4, p, on_tok, s, st);
	/* every block is back in the pool (a cancelled request too) */
	CHECK_EQ_INT(atlas_model_kv_blocks_free(model), atlas_model_kv_blocks_total(model));
	atlas_sched_free(q);
	return rc;
}

static void test_max_tokens(void)
{
	struct atlas_gen_params p = greedy(12);
	struct seen s = {0};
	struct atlas_gen_stats st;
	CHECK_EQ_INT(run(&p, &s, &st), 0);
	CHECK_EQ_INT(st.n_gen, 12);
	CHECK_EQ_INT(st.n_prompt, 4);
	CHECK_EQ_INT(st.n_decode, 11);
	CHECK_EQ_INT(st.finish, ATLAS_FINISH_LENGTH);
	/* the streamed text is exactly the decode of the ids */
	char *text;
	size_t len;
	int32_t ids[12];
	int k = 0;
	for (int i = 0; i < s.n && k < 12; i++)
		if (s.ids[i] >= 0)
			ids[k++] = s.ids[i];
	CHECK_EQ_INT(atlas_tok_decode(tok, ids, 12, &text, &len), 0);
	CHECK_EQ_INT(len, s.len);
	CHECK(!memcmp(text, s.text, len));
	free(text);
}

static void test_eos(void)
{
	struct atlas_gen_params p = greedy(12);
	struct seen s = {0};
	struct atlas_gen_stats st;
	CHECK_EQ_INT(run(&p, &s, &st), 0);
	int32_t third = s.ids[2];
	int first = 0; /* where that id first appears */
	while (s.ids[first] != third)
		first++;
	p.eos_ids[0] = third;
	p.n_eos = 1;
	CHECK_EQ_INT(run(&p, &s, &st), 0);
	CHECK_EQ_INT(st.finish, ATLAS_FINISH_EOS);
	CHECK_EQ_INT(st.n_gen, first);
	p.ignore_eos = true;
	CHECK_EQ_INT(run(&p, &s, &st), 0);
	CHECK_EQ_INT(st.n_gen, 12);
}

static void test_stop_strings(void)
{
	struct atlas_gen_params p = greedy(24);
	struct seen full = {0}, s = {0};
	struct atlas_gen_stats st;
	CHECK_EQ_INT(run(&p, &full, &st), 0);
	CHECK(full.len > 12);
	/* a stop string taken from the middle of the full output */
	char stop[8];
	size_t at = full.len / 2;
	memcpy(stop, full.text + at, 3);
	stop[3] = '\0';
	const char *first = strstr(full.text, stop);
	const char *stops[] = {"never-appears-xyz", stop};
	p.stop = stops;
	p.n_stop = 2;
	CHECK_EQ_INT(run(&p, &s, &st), 0);
	CHECK_EQ_INT(st.finish, ATLAS_FINISH_STOP);
	CHECK_EQ_INT(s.len, (size_t)(first - full.text));
	CHECK(!memcmp(s.text, full.text, s.len));
	/* a stop string that only starts to appear: the held text comes out */
	char partial[64];
	snprintf(partial, sizeof(partial), "%.*s\x01", 2, full.text + full.len - 2);
	const char *stops2[] = {partial};
	p.stop = stops2;
	p.n_stop = 1;
	CHECK_EQ_INT(run(&p, &s, &st), 0);
	CHECK_EQ_INT(st.finish, ATLAS_FINISH_LENGTH);
	CHECK_EQ_INT(s.len, full.len);
	CHECK(!memcmp(s.text, full.text, full.len));
}

static void test_cancel_and_bad_prompts(void)
{
	struct atlas_gen_params p = greedy(24);
	struct seen s = {.cancel_after = 3};
	struct atlas_gen_stats st;
	CHECK_EQ_INT(run(&p, &s, &st), 0);
	CHECK_EQ_INT(st.finish, ATLAS_FINISH_CANCELLED);
	CHECK_EQ_INT(st.n_gen, 3);

	struct atlas_sched *q = atlas_sched_new(model, tok, NULL);
	CHECK_EQ_INT(atlas_generate(q, prompt, 0, &p, NULL, NULL, &st), ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "empty");
	int32_t *longp = calloc(600, sizeof(int32_t));
	CHECK_EQ_INT(atlas_generate(q, longp, 600, &p, NULL, NULL, &st), ATLAS_ERANGE);
	CHECK_CONTAINS(atlas_errmsg(), "context");
	int32_t bad[2] = {5, 5000};
	CHECK_EQ_INT(atlas_generate(q, bad, 2, &p, NULL, NULL, &st), ATLAS_ERANGE);
	CHECK_CONTAINS(atlas_errmsg(), "5000");
	free(longp);
	atlas_sched_free(q);
}

int main(void)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/qwen3", harness_srcdir());
	be = atlas_backend_cpu_new();
	model = atlas_model_load(dir, be, NULL);
	tok = atlas_tok_load(dir);
	if (!model || !tok) {
		printf("not ok 1 - load %s: %s\n", dir, atlas_errmsg());
		return 1;
	}
	RUN(test_max_tokens);
	RUN(test_eos);
	RUN(test_stop_strings);
	RUN(test_cancel_and_bad_prompts);
	atlas_model_free(model);
	atlas_tok_free(tok);
	be->destroy(be);
	return harness_done();
}
