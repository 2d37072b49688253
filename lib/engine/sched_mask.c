/* sched_mask.c - the grammar masks of a step, computed in parallel.
 *
 * With device sampling the model calls this while the device runs the
 * step (atlas_model_set_sample_hook), so the masks cost nothing as long
 * as they take less host time than the step takes device time. A batch
 * of 32 constrained requests is 32 independent masks (a matcher each;
 * a grammar's mask cache is shared and locked only while an entry is
 * first computed), so they are spread over the process's thread pool,
 * which the CUDA backend leaves idle. Each mask depends only on its own
 * request, so the result is the same however they are spread. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/error.h"
#include "../core/threads.h"
#include "sched_internal.h"

struct mask_job {
	struct atlas_sched *s;
	struct atlas_sreq *r[1024]; /* the requests that need a mask */
	int n;
};

static void one(struct atlas_sched *s, struct atlas_sreq *r)
{
	r->mask_rc = atlas_sreq_prepare_mask(s, r);
	if (r->mask_rc < 0)
		snprintf(r->mask_err, sizeof(r->mask_err), "%s", atlas_errmsg());
	if (r->mask_rc)
		r->masked = false; /* draw anything: the token is not used */
	if (r->dev)
		r->args.mask = r->masked ? r->mask : NULL;
}

static void range(void *ctx, int64_t b, int64_t e)
{
	struct mask_job *j = ctx;
	for (int64_t i = b; i < e; i++)
		one(j->s, j->r[i]);
}

/* Does item i sample from a constrained request? */
static bool needs_mask(const struct atlas_sched *s, int64_t i)
{
	const struct atlas_sreq *r = s->item_req[i];
	const struct atlas_batch_item *it = &s->items[i];
	return (it->logits || it->sample) && (r->gm || r->mask);
}

void atlas_sched_masks(struct atlas_sched *s)
{
	int64_t first = 0;
	while (first < s->n_items && !needs_mask(s, first))
		first++;
	if (first == s->n_items)
		return; /* the usual step: nothing constrained, nothing to allocate */
	struct mask_job *j = malloc(sizeof(*j));
	int n = 0;
	for (int64_t i = first; i < s->n_items; i++) {
		struct atlas_sreq *r = s->item_req[i];
		if (!needs_mask(s, i))
			continue;
		if (!j || n == (int)(sizeof(j->r) / sizeof(j->r[0])))
			one(s, r); /* (no memory, or past the list: inline) */
		else
			j->r[n++] = r;
	}
	if (!j)
		return;
	j->s = s;
	j->n = n;
	if (n == 1)
		one(s, j->r[0]);
	else if (n > 1)
		atlas_parallel_for(n, 1, range, j);
	free(j);
}
