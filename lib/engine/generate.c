/* generate.c - the single-sequence generation loop (see generate.h).
 *
 * Text is produced by the tokenizer's streaming decoder and kept in a
 * small hold buffer: the longest tail that is a prefix of some stop
 * string stays unreleased until the next token decides it. */
#include "generate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../backend/backend.h"
#include "../core/error.h"

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

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct textbuf {
	char *buf;    /* held text */
	size_t len;   /* bytes held */
	size_t cap;   /* capacity */
};

static int tb_append(struct textbuf *t, const char *s, size_t n)
{
	if (t->len + n + 1 > t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 256;
		while (cap < t->len + n + 1)
			cap *= 2;
		char *b = realloc(t->buf, cap);
		if (!b)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		t->buf = b;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	t->buf[t->len] = '\0';
	return 0;
}

/* Length of the longest suffix of held text that is a proper prefix of a
 * stop string (it must be held back). */
static size_t held_suffix(const struct textbuf *t, const char *const *stop, int n_stop)
{
	size_t best = 0;
	for (int i = 0; i < n_stop; i++) {
		size_t sl = strlen(stop[i]);
		for (size_t k = sl > 1 ? sl - 1 : 0; k > best; k--)
			if (k <= t->len && !memcmp(t->buf + t->len - k, stop[i], k)) {
				best = k;
				break;
			}
	}
	return best;
}

/* Find the earliest stop string in held text; returns its offset or -1. */
static int64_t find_stop(const struct textbuf *t, const char *const *stop, int n_stop)
{
	int64_t first = -1;
	for (int i = 0; i < n_stop; i++) {
		if (!stop[i][0])
			continue;
		const char *p = memmem(t->buf, t->len, stop[i], strlen(stop[i]));
		if (p && (first < 0 || p - t->buf < first))
			first = p - t->buf;
	}
	return first;
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
	struct textbuf held = {0};
	struct atlas_tok_stream ts;
	int rc = 0;

	if (n <= 0)
		return atlas_error(ATLAS_EINVAL, "the prompt is empty (no tokens)");
	if (start + n > ctx)
		return atlas_error(ATLAS_ERANGE,
				   "the prompt has %lld tokens, more than the context of %lld",
				   (long long)n, (long long)(ctx - start));
	if (p->max_tokens <= 0)
		return atlas_error(ATLAS_EINVAL, "max_tokens must be > 0");
	float *logits = malloc((size_t)V * sizeof(float));
	int32_t *hist = malloc((size_t)(n + p->max_tokens) * sizeof(int32_t));
	struct atlas_sampler *smp = atlas_sampler_new(&p->sampling, V);
	if (!logits || !hist || !smp) {
		rc = smp ? atlas_error(ATLAS_ENOMEM, "out of memory") : ATLAS_EINVAL;
		goto out;
	}
	memcpy(hist, prompt, (size_t)n * sizeof(int32_t));
	if (tok)
		atlas_tok_stream_init(&ts, tok);

	/* sample on the backend (only ids cross) unless penalties need the
	 * token history on the host; both paths draw the same uniforms */
	const struct atlas_sampler_params *sp = &p->sampling;
	bool dev = atlas_model_can_sample(m) && sp->repetition_penalty == 1.0 &&
		   sp->presence_penalty == 0.0 && sp->frequency_penalty == 0.0;
	struct atlas_sample_args args;
	int32_t id = -1;
	double t0 = now();
	if (dev) {
		atlas_sampler_args(smp, &args);
		rc = atlas_model_forward_sample(m, s, prompt, n, &args, &id);
	} else {
		rc = atlas_model_forward(m, s, prompt, n, logits, false);
	}
	if (rc)
		goto out;
	double t1 = now();
	st.prompt_s = t1 - t0;
	st.finish = ATLAS_FINISH_LENGTH;
	int64_t ng = 0;
	for (;;) {
		if (!dev)
			id = atlas_sampler_sample(smp, logits, hist, n + ng, ng);
		if (ng == 0)
			st.ttft_s = now() - t0;
		if (!p->ignore_eos && is_eos(p, id)) {
			st.finish = ATLAS_FINISH_EOS;
			break;
		}
		hist[n + ng++] = id;
		st.n_gen = ng;
		char piece[256];
		int64_t plen = 0;
		size_t release = 0;
		int stopped = 0;
		if (tok) {
			plen = atlas_tok_stream_push(&ts, id, piece, sizeof(piece));
			if (plen < 0) {
				rc = (int)plen;
				goto out;
			}
			if ((rc = tb_append(&held, piece, (size_t)plen)))
				goto out;
			int64_t at = p->n_stop ? find_stop(&held, p->stop, p->n_stop) : -1;
			if (at >= 0) {
				release = (size_t)at;
				stopped = 1;
			} else {
				release = held.len - held_suffix(&held, p->stop, p->n_stop);
			}
		}
		if (cb && cb(ud, id, held.buf, release)) {
			st.finish = ATLAS_FINISH_CANCELLED;
			break;
		}
		if (release) {
			memmove(held.buf, held.buf + release, held.len - release);
			held.len -= release;
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
	if (tok && st.finish != ATLAS_FINISH_STOP && st.finish != ATLAS_FINISH_CANCELLED) {
		char tail[16];
		int64_t tl = atlas_tok_stream_flush(&ts, tail, sizeof(tail));
		if (tl > 0 && (rc = tb_append(&held, tail, (size_t)tl)))
			goto out;
		if (held.len && cb)
			cb(ud, -1, held.buf, held.len);
	}
	st.gen_s = now() - t1 - (st.ttft_s - st.prompt_s);
out:
	if (stats)
		*stats = st;
	free(held.buf);
	free(logits);
	free(hist);
	atlas_sampler_free(smp);
	return rc;
}
