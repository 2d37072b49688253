/* cpu_ops.c - the element-wise and per-row ops of the CPU backend:
 * embed, rmsnorm, add_rmsnorm, rope, swiglu, add.
 *
 * All in FP32 as Hugging Face transformers computes them in float32.
 * Sums use several independent accumulators so they vectorize without
 * -ffast-math. Rows are split over threads when there are enough of them
 * to pay for the hand-off.
 */
#include "cpu.h"

#include <math.h>

#include "../../core/error.h"
#include "../../core/threads.h"

/* Elements of work below which an op runs on the caller alone. */
#define PAR_MIN 32768

static int bad_shape(const char *op, int64_t a, int64_t b)
{
	return atlas_error(ATLAS_EINVAL, "cpu %s: bad shape %lld x %lld", op, (long long)a,
			   (long long)b);
}

static int64_t row_grain(int64_t D)
{
	return PAR_MIN / (D + 1) + 1;
}

/* --- embed ------------------------------------------------------------ */

/* One embed call: rows of the table gathered into out. */
struct embed_job {
	float *out;	      /* [T,D] */
	const void *table;    /* [V,D] in wdt */
	enum atlas_dtype wdt; /* dtype of table */
	const int32_t *ids;   /* [T] */
	int64_t D;	      /* row length */
};

static void embed_range(void *ctx, int64_t b, int64_t e)
{
	const struct embed_job *j = ctx;
	for (int64_t t = b; t < e; t++)
		atlas_cpu_convert(j->out + t * j->D, j->table, j->wdt, (int64_t)j->ids[t] * j->D,
				  j->D);
}

int atlas_cpu_embed(struct atlas_backend *be, void *out, const void *table, enum atlas_dtype wdt,
		    const int32_t *ids, int64_t T, int64_t D)
{
	int rc = atlas_cpu_check_wdt(wdt, "embed");
	if (rc)
		return rc;
	if (T < 0 || D < 0)
		return bad_shape("embed", T, D);
	for (int64_t t = 0; t < T; t++)
		if (ids[t] < 0)
			return atlas_error(ATLAS_ERANGE, "cpu embed: negative token id %d",
					   (int)ids[t]);
	struct embed_job j = {out, table, wdt, ids, D};
	atlas_parallel_for(T, row_grain(D), embed_range, &j);
	return 0;
}

/* --- rmsnorm ---------------------------------------------------------- */

/* One rmsnorm or add_rmsnorm call. */
struct norm_job {
	float *out;	      /* [R,D] result */
	const float *x;	      /* [R,D] input (rmsnorm) or residual addend */
	float *res;	      /* [R,D] residual, updated in place, or NULL */
	const void *w;	      /* [D] in wdt */
	enum atlas_dtype wdt; /* dtype of w */
	int64_t D;	      /* row length */
	float eps;	      /* added to the mean square */
};

/* out = v * rsqrt(mean(v^2) + eps) * w for one row v. */
static void norm_row(float *out, const float *v, const void *w, enum atlas_dtype wdt, int64_t D,
		     float eps)
{
	float a[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= D; i += 8)
		for (int j = 0; j < 8; j++)
			a[j] += v[i + j] * v[i + j];
	for (; i < D; i++)
		a[0] += v[i] * v[i];
	float ss = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
	float inv = 1.0f / sqrtf(ss / (float)D + eps);
	if (wdt == ATLAS_DTYPE_F32) {
		const float *wf = w;
		for (i = 0; i < D; i++)
			out[i] = v[i] * inv * wf[i];
	} else {
		for (i = 0; i < D; i++)
			out[i] = v[i] * inv * atlas_cpu_wload(w, wdt, i);
	}
}

static void norm_range(void *ctx, int64_t b, int64_t e)
{
	const struct norm_job *j = ctx;
	const int64_t D = j->D;
	for (int64_t r = b; r < e; r++) {
		const float *v = j->x + r * D;
		if (j->res) {
			float *res = j->res + r * D;
			for (int64_t i = 0; i < D; i++)
				res[i] += v[i];
			v = res;
		}
		norm_row(j->out + r * D, v, j->w, j->wdt, D, j->eps);
	}
}

int atlas_cpu_rmsnorm(struct atlas_backend *be, void *out, const void *x, const void *w,
		      enum atlas_dtype wdt, int64_t R, int64_t D, float eps)
{
	int rc = atlas_cpu_check_wdt(wdt, "rmsnorm");
	if (rc)
		return rc;
	if (R < 0 || D <= 0)
		return bad_shape("rmsnorm", R, D);
	struct norm_job j = {out, x, NULL, w, wdt, D, eps};
	atlas_parallel_for(R, row_grain(D), norm_range, &j);
	return 0;
}

int atlas_cpu_add_rmsnorm(struct atlas_backend *be, void *res, const void *x, void *out,
			  const void *w, enum atlas_dtype wdt, int64_t R, int64_t D, float eps)
{
	int rc = atlas_cpu_check_wdt(wdt, "add_rmsnorm");
	if (rc)
		return rc;
	if (R < 0 || D <= 0)
		return bad_shape("add_rmsnorm", R, D);
	struct norm_job j = {out, x, res, w, wdt, D, eps};
	atlas_parallel_for(R, row_grain(D), norm_range, &j);
	return 0;
}

/* --- rope ------------------------------------------------------------- */

/* One rope call. */
struct rope_job {
	float *x;	       /* [T,H,hd], rotated in place */
	const int32_t *pos;    /* [T] positions */
	const float *inv_freq; /* [rd/2] */
	int64_t H, hd, rd;     /* heads, head size, rotated dims (<= hd) */
};

static void rope_range(void *ctx, int64_t b, int64_t e)
{
	const struct rope_job *j = ctx;
	const int64_t H = j->H, hd = j->hd, half = j->rd / 2;
	for (int64_t t = b; t < e; t++) {
		float *xt = j->x + t * H * hd;
		float p = (float)j->pos[t];
		for (int64_t i = 0; i < half; i++) {
			/* as transformers: angle, cos and sin all in float32 */
			float ang = p * j->inv_freq[i];
			float c = cosf(ang), s = sinf(ang);
			for (int64_t h = 0; h < H; h++) {
				float *xh = xt + h * hd;
				float x0 = xh[i], x1 = xh[i + half];
				xh[i] = x0 * c - x1 * s;
				xh[i + half] = x1 * c + x0 * s;
			}
		}
	}
}

int atlas_cpu_rope_partial(struct atlas_backend *be, void *x, const int32_t *pos,
			   const float *inv_freq, int64_t T, int64_t H, int64_t hd, int64_t rd)
{
	if (T < 0 || H < 0 || hd < 0 || rd < 0 || rd % 2 || rd > hd)
		return atlas_error(ATLAS_EINVAL, "cpu rope: bad shape T=%lld H=%lld hd=%lld rd=%lld",
				   (long long)T, (long long)H, (long long)hd, (long long)rd);
	struct rope_job j = {x, pos, inv_freq, H, hd, rd};
	atlas_parallel_for(T, row_grain(H * rd * 8), rope_range, &j);
	return 0;
}

int atlas_cpu_rope(struct atlas_backend *be, void *x, const int32_t *pos, const float *inv_freq,
		   int64_t T, int64_t H, int64_t hd)
{
	return atlas_cpu_rope_partial(be, x, pos, inv_freq, T, H, hd, hd);
}

/* --- swiglu and add --------------------------------------------------- */

/* One swiglu or add call over n elements. */
struct ew_job {
	float *out;	/* result (swiglu) or y (add) */
	const float *a; /* gate (swiglu) or x (add) */
	const float *b; /* up (swiglu), unused by add */
};

static void swiglu_range(void *ctx, int64_t b, int64_t e)
{
	const struct ew_job *j = ctx;
	for (int64_t i = b; i < e; i++) {
		float g = j->a[i];
		j->out[i] = g / (1.0f + expf(-g)) * j->b[i];
	}
}

static void add_range(void *ctx, int64_t b, int64_t e)
{
	const struct ew_job *j = ctx;
	for (int64_t i = b; i < e; i++)
		j->out[i] += j->a[i];
}

int atlas_cpu_swiglu(struct atlas_backend *be, void *out, const void *gate, const void *up,
		     int64_t T, int64_t F)
{
	if (T < 0 || F < 0)
		return bad_shape("swiglu", T, F);
	struct ew_job j = {out, gate, up};
	atlas_parallel_for(T * F, PAR_MIN / 4, swiglu_range, &j);
	return 0;
}

int atlas_cpu_add(struct atlas_backend *be, void *y, const void *x, int64_t n)
{
	if (n < 0)
		return bad_shape("add", n, 1);
	struct ew_job j = {y, x, NULL};
	atlas_parallel_for(n, PAR_MIN * 4, add_range, &j);
	return 0;
}
