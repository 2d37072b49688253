/* cpu_hybrid.c - the ops of hybrid linear-attention models on the CPU:
 * partial rotary embedding is cpu_ops.c's rope; here are gated
 * attention's output gate and the Gated DeltaNet (backend.h has the
 * contracts, lib/model/README-hybrid.md what transformers computes).
 *
 * The DeltaNet runs the recurrent form, token by token from each
 * sequence's own state, in FP32: a row's bits depend on its sequence
 * alone, however the sequence's tokens were cut into steps and whatever
 * else is in the step. Work is split over (sequence, channel) for the
 * convolution and over (sequence, value head) for the delta rule; each
 * piece runs its tokens in order, so the split changes no bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "../../core/threads.h"
#include "cpu.h"

static inline float sigmoid(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

static inline float silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* --- gated attention ---------------------------------------------------- */

struct gate_job {
	float *y;          /* q [T,H,hd] (split) or att [T,H,hd] (apply) */
	const float *qg;   /* [T,H,2hd] */
	int64_t H, hd;
	bool apply;
};

static void gate_range(void *ctx, int64_t b, int64_t e)
{
	const struct gate_job *j = ctx;
	for (int64_t r = b; r < e; r++) { /* r: one (token, head) */
		float *y = j->y + r * j->hd;
		const float *src = j->qg + r * 2 * j->hd;
		for (int64_t i = 0; i < j->hd; i++)
			y[i] = j->apply ? y[i] * sigmoid(src[j->hd + i]) : src[i];
	}
}

static int gate_run(void *y, const void *qg, int64_t T, int64_t H, int64_t hd, bool apply)
{
	if (T < 0 || H <= 0 || hd <= 0)
		return atlas_error(ATLAS_EINVAL, "cpu gate: bad shape T=%lld H=%lld hd=%lld",
				   (long long)T, (long long)H, (long long)hd);
	struct gate_job j = {y, qg, H, hd, apply};
	atlas_parallel_for(T * H, 64, gate_range, &j);
	return 0;
}

int atlas_cpu_gate_split(struct atlas_backend *be, void *q, const void *qg, int64_t T, int64_t H,
			 int64_t hd)
{
	(void)be;
	return gate_run(q, qg, T, H, hd, false);
}

int atlas_cpu_gate_apply(struct atlas_backend *be, void *att, const void *qg, int64_t T,
			 int64_t H, int64_t hd)
{
	(void)be;
	return gate_run(att, qg, T, H, hd, true);
}

/* --- Gated DeltaNet ------------------------------------------------------- */

struct gdn_job {
	const struct atlas_gdn_desc *d;
	const struct atlas_gdn_item *items;
	int64_t off;            /* the layer's part of each state */
	const float *qkvz, *ba; /* inputs (backend.h) */
	float *conv;            /* the caller's scratch [T, C]: silu(conv(x)) */
	float *out;             /* [T, Hv dv] */
	int64_t C, W;           /* conv channels, qkvz row width */
};

/* Units (item i, channel c), i * C + c: the causal conv of channel c
 * over item i's rows, its window kept in the item's conv state. */
static void conv_range(void *ctx, int64_t b, int64_t e)
{
	const struct gdn_job *j = ctx;
	const int64_t C = j->C, K = j->d->K;
	for (int64_t u = b; u < e; u++) {
		const int64_t i = u / C, c = u % C;
		const struct atlas_gdn_item *it = &j->items[i];
		float *win = it->state + j->off + c * (K - 1); /* oldest first */
		const float *w = j->d->conv_w + c * K;
		for (int64_t t = 0; t < it->n; t++) {
			const int64_t row = it->row0 + t;
			const float x = j->qkvz[row * j->W + c];
			float y = 0.0f;
			for (int64_t k = 0; k < K - 1; k++)
				y += w[k] * win[k];
			y += w[K - 1] * x;
			memmove(win, win + 1, (size_t)(K - 2) * sizeof(float));
			win[K - 2] = x;
			j->conv[row * C + c] = silu(y);
			if (t + 1 == it->snap_at)
				memcpy(it->snap + j->off + c * (K - 1), win,
				       (size_t)(K - 1) * sizeof(float));
		}
	}
}

/* v[0..n) *= rsqrt(sum v^2 + 1e-6), as transformers' l2norm */
static void l2norm(float *v, int64_t n)
{
	float ss = 0.0f;
	for (int64_t i = 0; i < n; i++)
		ss += v[i] * v[i];
	const float r = 1.0f / sqrtf(ss + 1e-6f);
	for (int64_t i = 0; i < n; i++)
		v[i] *= r;
}

/* Units (item i, value head h), i * Hv + h: the delta rule of head h
 * over item i's rows, then the gated norm of its output. */
static void rule_range(void *ctx, int64_t b, int64_t e)
{
	const struct gdn_job *j = ctx;
	const struct atlas_gdn_desc *d = j->d;
	const int64_t Hk = d->Hk, Hv = d->Hv, dk = d->dk, dv = d->dv, C = j->C;
	const int64_t rep = Hv / Hk;
	float *q = malloc((size_t)(2 * dk + 2 * dv) * sizeof(float));
	if (!q)
		abort(); /* a few KiB; the op cannot report from a worker */
	float *k = q + dk, *u = k + dk, *o = u + dv;
	const float qs = 1.0f / sqrtf((float)dk);
	for (int64_t unit = b; unit < e; unit++) {
		const int64_t i = unit / Hv, h = unit % Hv, kh = h / rep;
		const struct atlas_gdn_item *it = &j->items[i];
		float *S = it->state + j->off + C * (d->K - 1) + h * dk * dv; /* [dk, dv] */
		const float A = expf(d->A_log[h]);
		for (int64_t t = 0; t < it->n; t++) {
			const int64_t row = it->row0 + t;
			const float *x = j->conv + row * C;
			memcpy(q, x + kh * dk, (size_t)dk * sizeof(float));
			memcpy(k, x + Hk * dk + kh * dk, (size_t)dk * sizeof(float));
			const float *v = x + 2 * Hk * dk + h * dv;
			l2norm(q, dk);
			l2norm(k, dk);
			for (int64_t a = 0; a < dk; a++)
				q[a] *= qs;
			const float beta = sigmoid(j->ba[row * 2 * Hv + h]);
			const float av = j->ba[row * 2 * Hv + Hv + h] + d->dt_bias[h];
			const float sp = av > 20.0f ? av : log1pf(expf(av));
			const float decay = expf(-A * sp);
			for (int64_t a = 0; a < dk * dv; a++)
				S[a] *= decay;
			for (int64_t c = 0; c < dv; c++)
				u[c] = 0.0f;
			for (int64_t a = 0; a < dk; a++)
				for (int64_t c = 0; c < dv; c++)
					u[c] += S[a * dv + c] * k[a];
			for (int64_t c = 0; c < dv; c++)
				u[c] = (v[c] - u[c]) * beta;
			for (int64_t a = 0; a < dk; a++)
				for (int64_t c = 0; c < dv; c++)
					S[a * dv + c] += k[a] * u[c];
			if (t + 1 == it->snap_at)
				memcpy(it->snap + (S - it->state), S, (size_t)(dk * dv) * sizeof(float));
			for (int64_t c = 0; c < dv; c++)
				o[c] = 0.0f;
			for (int64_t a = 0; a < dk; a++)
				for (int64_t c = 0; c < dv; c++)
					o[c] += S[a * dv + c] * q[a];
			float ss = 0.0f;
			for (int64_t c = 0; c < dv; c++)
				ss += o[c] * o[c];
			const float r = 1.0f / sqrtf(ss / (float)dv + d->eps);
			const float *z = j->qkvz + row * j->W + C + h * dv;
			float *y = j->out + row * Hv * dv + h * dv;
			for (int64_t c = 0; c < dv; c++)
				y[c] = o[c] * r * d->norm_w[c] * silu(z[c]);
		}
	}
	free(q);
}

int atlas_cpu_deltanet(struct atlas_backend *be, void *out, const void *qkvz, const void *ba,
		       const struct atlas_gdn_desc *d, const struct atlas_gdn_item *items,
		       int64_t n_items, int64_t off, float *scratch)
{
	(void)be;
	if (!d || d->Hk <= 0 || d->Hv <= 0 || d->Hv % d->Hk || d->dk <= 0 || d->dv <= 0 ||
	    d->K < 2 || n_items <= 0 || off < 0 || !scratch)
		return atlas_error(ATLAS_EINVAL, "cpu deltanet: bad shape");
	const int64_t C = 2 * d->Hk * d->dk + d->Hv * d->dv;
	for (int64_t i = 0, T = 0; i < n_items; T += items[i].n, i++) {
		if (items[i].n <= 0 || items[i].row0 != T || !items[i].state || items[i].snap_at < 0 ||
		    items[i].snap_at > items[i].n || (items[i].snap_at && !items[i].snap))
			return atlas_error(ATLAS_EINVAL,
					   "cpu deltanet: item %lld: bad rows, state or snapshot",
					   (long long)i);
		if (items[i].fresh)
			memset(items[i].state + off, 0,
			       (size_t)atlas_gdn_state_floats(d) * sizeof(float));
	}
	struct gdn_job j = {d, items, off, qkvz, ba, scratch, out, C, C + d->Hv * d->dv};
	atlas_parallel_for(n_items * C, 16, conv_range, &j);
	atlas_parallel_for(n_items * d->Hv, 1, rule_range, &j);
	return 0;
}
