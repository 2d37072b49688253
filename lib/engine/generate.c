/* generate.c - one prompt to completion, synchronously, through the
 * scheduler's step (see generate.h): the same loop, sampling and stop
 * rules as every other request. */
#include "generate.h"

#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "../core/error.h"
#include "scheduler.h"

const char *atlas_finish_name(enum atlas_finish f)
{
	switch (f) {
	case ATLAS_FINISH_LENGTH: return "length";
	case ATLAS_FINISH_EOS: return "stop";
	case ATLAS_FINISH_STOP: return "stop";
	case ATLAS_FINISH_CANCELLED: return "cancelled";
	}
	return "?";
}

void atlas_gen_stats_from(struct atlas_gen_stats *st, const struct atlas_sreq_result *res,
			  int64_t n_decode)
{
	memset(st, 0, sizeof(*st));
	st->n_prompt = res->n_prompt;
	st->n_cached = res->n_cached;
	st->n_gen = res->n_gen;
	st->n_decode = n_decode;
	st->ttft_s = res->ttft_s;
	st->prompt_s = res->ttft_s;
	st->gen_s = res->total_s > res->ttft_s ? res->total_s - res->ttft_s : 0;
	st->finish = res->finish;
	st->spec_steps = res->spec_steps;
	st->spec_drafted = res->spec_drafted;
	st->spec_accepted = res->spec_accepted;
}

int atlas_generate(struct atlas_sched *s, const int32_t *prompt, int64_t n,
		   const struct atlas_gen_params *p, atlas_token_cb cb, void *ud,
		   struct atlas_gen_stats *stats)
{
	struct atlas_sreq_params rp = {.prompt = prompt, .n_prompt = n, .gen = *p,
				       .top_logprobs = -1};
	struct atlas_sreq *r;
	struct atlas_sreq_result res;
	int rc = atlas_sched_submit(s, &rp, &r);
	if (rc)
		return rc;
	bool done = false, stopped = false, first = false;
	int64_t n_decode = 0, n_gen = 0;
	double t0 = atlas_now(), t_first = 0;
	while (!done) {
		rc = atlas_sched_step(s);
		if (rc < 0)
			break; /* the request finished with the error: taken below */
		if (first)
			n_decode++;
		struct atlas_sched_chunk c;
		atlas_sreq_take(r, 0, &c);
		for (size_t i = 0; i < c.n && !stopped; i++) {
			if (!first)
				t_first = atlas_now();
			first = true;
			n_gen += c.tok[i].id >= 0;
			if (cb && cb(ud, c.tok[i].id, c.text + c.tok[i].text_off, c.tok[i].text_len))
				stopped = true;
		}
		done = c.done || stopped;
		atlas_sched_chunk_free(&c);
		if (!rc && !done) {
			atlas_sreq_release(r);
			return atlas_error(ATLAS_EIO, "the scheduler stalled with a request queued");
		}
	}
	if (rc < 0) {
		/* drain the outcome the failed step left */
		struct atlas_sched_chunk c;
		atlas_sreq_take(r, 0, &c);
		atlas_sched_chunk_free(&c);
	}
	atlas_sreq_result(r, &res);
	atlas_sreq_release(r);
	if (stopped && !res.rc) {
		/* the callback asked to stop: the request is not done yet, so
		 * its numbers are the driver's; a step reaps it (frees blocks) */
		atlas_sched_step(s);
		res.finish = ATLAS_FINISH_CANCELLED;
		res.n_gen = n_gen;
		res.ttft_s = t_first > 0 ? t_first - t0 : 0;
		res.total_s = atlas_now() - t0;
	}
	if (res.rc)
		return atlas_error(res.rc, "%s", res.error);
	if (stats)
		atlas_gen_stats_from(stats, &res, n_decode);
	return 0;
}
