/* generate.c - the single-sequence generation loop (see generate.h).
 *
 * Text and stop strings go through the stopper (stopper.h), the same
 * piece the server's scheduler uses: the streaming decoder's output is
 * held back while it could still grow into a stop string. */
#include "generate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../backend/backend.h"
#include "../core/error.h"
#include "stopper.h"
#include "../core/clock.h"

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

static int is_eos(const struct atlas_gen_params *p, int32_t id)
{
	for (int i = 0; i < p->n_eos; i++)
		if (p->eos_ids[i] == id)
			return 1;
	return 0;
}

int atlas_generate(struct atlas_model *m, struct atlas_seq *s,
		   const struct atlas_tok *tok, const int32_t *prompt, int64_t n,
		   const struct atlas_gen_params *p, atlas_token_cb cb, void *ud,
		   struct atlas_gen_stats *stats)
{
	const struct atlas_config *c = atlas_model_config(m);
	int64_t V = c->vocab_size, ctx = atlas_model_max_context(m);
	int64_t start = atlas_seq_len(s);
	struct atlas_gen_stats st = {.n_prompt = n};
	struct atlas_stopper stopper;
	const char *text;
	size_t len;
	int rc = 0;

	if (n <= 0)
		return atlas_error(ATLAS_EINVAL, "the prompt is empty (no tokens)");
	if (start + n > ctx)
		return atlas_error(ATLAS_ERANGE,
				   "the prompt has %lld tokens, more than the context of %lld",
				   (long long)n, (long long)(ctx - start));
	if (p->max_tokens <= 0)
		return atlas_error(ATLAS_EINVAL, "max_tokens must be > 0");
	if ((rc = atlas_stopper_init(&stopper, tok, p->stop, p->n_stop))) {
		atlas_stopper_release(&stopper);
		return rc;
	}
	float *logits = malloc((size_t)V * sizeof(float));
	int32_t *hist = malloc((size_t)(n + p->max_tokens) * sizeof(int32_t));
	struct atlas_sampler *smp = atlas_sampler_new(&p->sampling, V);
	if (!logits || !hist || !smp) {
		rc = smp ? atlas_error(ATLAS_ENOMEM, "out of memory") : ATLAS_EINVAL;
		goto out;
	}
	memcpy(hist, prompt, (size_t)n * sizeof(int32_t));

	/* sample on the backend (only ids cross) unless penalties need the
	 * token history on the host; both paths draw the same uniforms */
	bool dev = atlas_model_can_sample(m) && !atlas_sampler_uses_history(&p->sampling);
	struct atlas_sample_args args;
	int32_t id = -1;
	double t0 = atlas_now();
	if (dev) {
		atlas_sampler_args(smp, &args);
		rc = atlas_model_forward_sample(m, s, prompt, n, &args, &id);
	} else {
		rc = atlas_model_forward(m, s, prompt, n, logits, false);
	}
	if (rc)
		goto out;
	double t1 = atlas_now();
	st.prompt_s = t1 - t0;
	st.finish = ATLAS_FINISH_LENGTH;
	int64_t ng = 0;
	for (;;) {
		if (!dev)
			id = atlas_sampler_sample(smp, logits, hist, n + ng, ng);
		if (ng == 0)
			st.ttft_s = atlas_now() - t0;
		if (!p->ignore_eos && is_eos(p, id)) {
			st.finish = ATLAS_FINISH_EOS;
			break;
		}
		hist[n + ng++] = id;
		st.n_gen = ng;
		bool stopped;
		if ((rc = atlas_stopper_push(&stopper, id, &text, &len, &stopped)))
			goto out;
		if (cb && cb(ud, id, text, len)) {
			st.finish = ATLAS_FINISH_CANCELLED;
			break;
		}
		if (stopped) {
			st.finish = ATLAS_FINISH_STOP;
			break;
		}
		if (ng >= p->max_tokens || atlas_seq_len(s) >= ctx)
			break;
		if (dev) {
			int32_t next;
			atlas_sampler_args(smp, &args);
			rc = atlas_model_forward_sample(m, s, &id, 1, &args, &next);
			id = next;
		} else {
			rc = atlas_model_forward(m, s, &id, 1, logits, false);
		}
		if (rc)
			goto out;
		st.n_decode++;
	}
	/* release what was held for a stop string that never came, and any
	 * incomplete character at the very end */
	if (st.finish != ATLAS_FINISH_STOP && st.finish != ATLAS_FINISH_CANCELLED) {
		if ((rc = atlas_stopper_finish(&stopper, &text, &len)))
			goto out;
		if (len && cb)
			cb(ud, -1, text, len);
	}
	st.gen_s = atlas_now() - t0 - st.ttft_s;
out:
	if (stats)
		*stats = st;
	atlas_stopper_release(&stopper);
	free(logits);
	free(hist);
	atlas_sampler_free(smp);
	return rc;
}
