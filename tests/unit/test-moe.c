/* test-moe.c - mixture-of-experts: the CPU backend's moe op against a
 * plain double-precision reference written here (routing ties, top-k
 * renormalisation on and off, the shared expert, BF16 weights, batch
 * invariance), the MoE fields of config.json and their refusals, and
 * whole tiny checkpoints written here: a Qwen3-MoE model whose experts
 * are all copies of one MLP equals the dense Qwen3 model with that MLP,
 * the fused expert layout equals the per-expert one, and a missing or
 * misshapen expert and a backend without the op are refused by name; two
 * tensor-parallel ranks give one rank's bits. The op's count of experts
 * read, and synthetic MoE models with the benchmarks' floor on them. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "harness.h"
#include "../../lib/backend/backend.h"
#include "../../lib/bench/bench.h"
#include "../../lib/comm/comm.h"
#include "../../lib/core/error.h"
#include "../../lib/io/config.h"
#include "../../lib/model/model.h"
#include "../../lib/model/tensors.h"
#include "../../lib/model/tp_group.h"

/* --- the op against a reference ------------------------------------- */

static uint64_t rng = 88172645463325252ull;

/* Uniform in [-1, 1). */
static float urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void fill(float *p, int64_t n, float scale)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = urand() * scale;
}

/* An MoE layer's weights in host F32 (and a BF16 copy). */
struct moe_w {
	int64_t E, K, D, F, Fs;
	float *router, *g, *u, *d;   /* [E,D], [E][F,D] x2, [E][D,F] */
	float *sg, *su, *sd, *sgate; /* [Fs,D] x2, [D,Fs], [1,D] */
};

static void moe_w_init(struct moe_w *w, int64_t E, int64_t K, int64_t D, int64_t F, int64_t Fs)
{
	*w = (struct moe_w){.E = E, .K = K, .D = D, .F = F, .Fs = Fs};
	w->router = malloc(sizeof(float) * (size_t)(E * D));
	w->g = malloc(sizeof(float) * (size_t)(E * F * D));
	w->u = malloc(sizeof(float) * (size_t)(E * F * D));
	w->d = malloc(sizeof(float) * (size_t)(E * D * F));
	fill(w->router, E * D, 0.5f);
	fill(w->g, E * F * D, 0.4f);
	fill(w->u, E * F * D, 0.4f);
	fill(w->d, E * D * F, 0.4f);
	if (Fs) {
		w->sg = malloc(sizeof(float) * (size_t)(Fs * D));
		w->su = malloc(sizeof(float) * (size_t)(Fs * D));
		w->sd = malloc(sizeof(float) * (size_t)(D * Fs));
		w->sgate = malloc(sizeof(float) * (size_t)D);
		fill(w->sg, Fs * D, 0.4f);
		fill(w->su, Fs * D, 0.4f);
		fill(w->sd, D * Fs, 0.4f);
		fill(w->sgate, D, 0.5f);
	}
}

static void moe_w_free(struct moe_w *w)
{
	free(w->router);
	free(w->g);
	free(w->u);
	free(w->d);
	free(w->sg);
	free(w->su);
	free(w->sd);
	free(w->sgate);
}

/* y[N] = W[N,K] x[K] in double. */
static void ref_mv(double *y, const float *W, const double *x, int64_t N, int64_t K)
{
	for (int64_t n = 0; n < N; n++) {
		double s = 0;
		for (int64_t k = 0; k < K; k++)
			s += (double)W[n * K + k] * x[k];
		y[n] = s;
	}
}

/* acc += scale * down(silu(gate x) * up x). */
static void ref_mlp(double *acc, const float *wg, const float *wu, const float *wd,
		    const double *x, int64_t D, int64_t F, double scale)
{
	double g[256], u[256], y[256];
	ref_mv(g, wg, x, F, D);
	ref_mv(u, wu, x, F, D);
	for (int64_t i = 0; i < F; i++)
		g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
	ref_mv(y, wd, g, D, F);
	for (int64_t i = 0; i < D; i++)
		acc[i] += scale * y[i];
}

/* The MoE block for one row, written from the transformers source:
 * softmax over all experts, top k (lower index on ties), optional
 * renormalisation, weighted expert sum, sigmoid-gated shared expert.
 * sel_out gets the chosen experts in choice order. */
static void ref_moe_row(double *out, const struct moe_w *w, const float *xf, bool norm,
			int *sel_out)
{
	const int64_t E = w->E, D = w->D, F = w->F;
	double x[256], p[64], mx = -INFINITY, sum = 0, ksum = 0;
	bool taken[64] = {false};
	for (int64_t i = 0; i < D; i++)
		x[i] = xf[i];
	ref_mv(p, w->router, x, E, D);
	for (int64_t e = 0; e < E; e++)
		mx = fmax(mx, p[e]);
	for (int64_t e = 0; e < E; e++)
		sum += p[e] = exp(p[e] - mx);
	for (int64_t e = 0; e < E; e++)
		p[e] /= sum;
	for (int64_t j = 0; j < w->K; j++) {
		int best = -1;
		for (int e = 0; e < E; e++)
			if (!taken[e] && (best < 0 || p[e] > p[best]))
				best = e;
		taken[best] = true;
		sel_out[j] = best;
		ksum += p[best];
	}
	for (int64_t i = 0; i < D; i++)
		out[i] = 0;
	for (int e = 0; e < E; e++)
		if (taken[e])
			ref_mlp(out, w->g + e * F * D, w->u + e * F * D, w->d + e * D * F, x, D, F,
				norm ? p[e] / ksum : p[e]);
	if (w->Fs) {
		double s = 0;
		for (int64_t i = 0; i < D; i++)
			s += (double)w->sgate[i] * x[i];
		ref_mlp(out, w->sg, w->su, w->sd, x, D, w->Fs, 1.0 / (1.0 + exp(-s)));
	}
}

/* Round the weights to BF16 in place (the reference then reads the same
 * values the op does) and return BF16 copies for the op. */
static uint16_t *to_bf16(float *p, int64_t n)
{
	uint16_t *b = malloc(sizeof(uint16_t) * (size_t)n);
	for (int64_t i = 0; i < n; i++) {
		b[i] = atlas_f32_to_bf16(p[i]);
		p[i] = atlas_bf16_to_f32(b[i]);
	}
	return b;
}

/* Run the op over x [T, D] with w (as F32 or BF16) into out. */
static int run_op(struct atlas_backend *be, const struct moe_w *w, bool norm, bool bf16,
		  const float *x, int64_t T, float *out)
{
	const int64_t E = w->E, D = w->D, F = w->F, Fs = w->Fs;
	const void *ptrs[3 * 64];
	void *own[8] = {0};
	const void *router = w->router, *g = w->g, *u = w->u, *d = w->d;
	const void *sg = w->sg, *su = w->su, *sd = w->sd, *sgate = w->sgate;
	size_t es = bf16 ? 2 : 4;
	if (bf16) {
		float *src[] = {w->router, w->g, w->u, w->d, w->sg, w->su, w->sd, w->sgate};
		const int64_t n[] = {E * D, E * F * D, E * F * D, E * D * F, Fs * D, Fs * D, D * Fs, D};
		for (int i = 0; i < 8; i++)
			own[i] = src[i] ? to_bf16(src[i], n[i]) : NULL;
		router = own[0], g = own[1], u = own[2], d = own[3];
		sg = own[4], su = own[5], sd = own[6], sgate = own[7];
	}
	for (int64_t e = 0; e < E; e++) {
		ptrs[e] = (const char *)g + (size_t)(e * F * D) * es;
		ptrs[E + e] = (const char *)u + (size_t)(e * F * D) * es;
		ptrs[2 * E + e] = (const char *)d + (size_t)(e * D * F) * es;
	}
	struct atlas_moe_desc desc = {
	    .n_experts = E, .top_k = w->K, .D = D, .F = F, .Fs = Fs, .norm_topk = norm,
	    .wdt = bf16 ? ATLAS_DTYPE_BF16 : ATLAS_DTYPE_F32, .router = router,
	    .wg = ptrs, .wu = ptrs + E, .wd = ptrs + 2 * E,
	    .sg = sg, .su = su, .sd = sd, .sgate = sgate,
	};
	void *scratch = be->alloc(be, atlas_moe_scratch_bytes(&desc, T));
	int rc = be->moe(be, out, x, &desc, T, scratch);
	be->free(be, scratch);
	for (int i = 0; i < 8; i++)
		free(own[i]);
	return rc;
}

/* One configuration: the op's rows against the reference, and each row
 * alone against the same row in the batch (bit for bit). */
static void check_case(int64_t E, int64_t K, int64_t D, int64_t F, int64_t Fs, bool norm,
		       bool bf16, bool tie)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct moe_w w;
	const int64_t T = 6;
	moe_w_init(&w, E, K, D, F, Fs);
	float *x = malloc(sizeof(float) * (size_t)(T * D));
	float *out = malloc(sizeof(float) * (size_t)(T * D));
	float *one = malloc(sizeof(float) * (size_t)D);
	fill(x, T * D, 1.0f);
	if (tie) {
		/* experts 2 and 5 have the same router row, made the largest
		 * for positive inputs: every token ties between them, and the
		 * lower index must win */
		for (int64_t t = 0; t < T * D; t++)
			x[t] = fabsf(x[t]) + 0.1f;
		for (int64_t i = 0; i < D; i++) {
			w.router[2 * D + i] = 1.0f;
			w.router[5 * D + i] = 1.0f;
		}
	}
	CHECK_EQ_INT(run_op(be, &w, norm, bf16, x, T, out), 0);
	double maxerr = 0, maxref = 0;
	for (int64_t t = 0; t < T; t++) {
		double ref[256];
		int sel[64];
		ref_moe_row(ref, &w, x + t * D, norm, sel);
		if (tie && K == 1)
			CHECK_EQ_INT(sel[0], 2);
		for (int64_t i = 0; i < D; i++) {
			maxerr = fmax(maxerr, fabs(ref[i] - out[t * D + i]));
			maxref = fmax(maxref, fabs(ref[i]));
		}
		CHECK_EQ_INT(run_op(be, &w, norm, false, x + t * D, 1, one), 0);
		if (!bf16)
			CHECK(!memcmp(one, out + t * D, sizeof(float) * (size_t)D));
	}
	CHECK(maxref > 0.01);
	if (maxerr > 1e-5 * (1 + maxref))
		harness_fail(__FILE__, __LINE__,
			     "E=%lld K=%lld D=%lld F=%lld Fs=%lld norm=%d bf16=%d tie=%d: max error "
			     "%g (max |ref| %g)", (long long)E, (long long)K, (long long)D,
			     (long long)F, (long long)Fs, norm, bf16, tie, maxerr, maxref);
	free(x);
	free(out);
	free(one);
	moe_w_free(&w);
	be->destroy(be);
}

static void test_op_reference(void)
{
	check_case(8, 2, 24, 12, 0, true, false, false);
	check_case(8, 2, 24, 12, 0, false, false, false);
	check_case(4, 2, 40, 20, 16, false, false, false); /* shared expert */
	check_case(6, 3, 17, 9, 11, true, false, false);   /* odd sizes */
	check_case(8, 8, 16, 8, 0, false, false, false);   /* every expert */
	check_case(8, 2, 32, 16, 8, true, true, false);    /* BF16 weights */
	check_case(8, 1, 16, 8, 0, true, false, true);     /* a tie, top 1 */
	check_case(8, 2, 16, 8, 0, false, false, true);    /* the tied pair, top 2 */
}

/* A tie in the router must go to the lower expert: with experts 2 and 5
 * tied and top 1, the output is expert 2's alone (not 5's). */
static void test_tie_lower_index(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct moe_w w;
	const int64_t D = 8, F = 4;
	moe_w_init(&w, 8, 1, D, F, 0);
	float x[8], out[8], alt[8];
	for (int i = 0; i < 8; i++)
		x[i] = 0.5f + 0.1f * (float)i;
	for (int64_t i = 0; i < D; i++)
		w.router[2 * D + i] = w.router[5 * D + i] = 2.0f;
	CHECK_EQ_INT(run_op(be, &w, true, false, x, 1, out), 0);
	/* the same with expert 5 removed from the race: expert 2 alone */
	for (int64_t i = 0; i < D; i++)
		w.router[5 * D + i] = -2.0f;
	CHECK_EQ_INT(run_op(be, &w, true, false, x, 1, alt), 0);
	CHECK(!memcmp(out, alt, sizeof(out)));
	moe_w_free(&w);
	be->destroy(be);
}

static void test_op_bad_desc(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct moe_w w;
	moe_w_init(&w, 4, 2, 8, 4, 0);
	w.K = 5; /* more than E */
	float x[8], out[8] = {0};
	fill(x, 8, 1.0f);
	CHECK_EQ_INT(run_op(be, &w, true, false, x, 1, out), ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "top_k=5");
	moe_w_free(&w);
	be->destroy(be);
}

/* The backend counts the distinct experts each call reads: two rows
 * whose top 2 share an expert count their union once, reading the count
 * resets it, and separate calls add up. */
static void test_experts_read(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	struct moe_w w;
	const int64_t D = 4;
	moe_w_init(&w, 4, 2, D, 4, 0);
	for (int64_t e = 0; e < 4; e++) /* expert e answers input e */
		for (int64_t i = 0; i < D; i++)
			w.router[e * D + i] = e == i ? 4.0f : 0.0f;
	float x[8] = {1, 1, 0, 0, 0, 1, 1, 0}, out[8]; /* experts {0, 1}, {1, 2} */
	CHECK(be->moe_experts_read != NULL);
	CHECK_EQ_INT(be->moe_experts_read(be), 0);
	CHECK_EQ_INT(run_op(be, &w, true, false, x, 2, out), 0);
	CHECK_EQ_INT(be->moe_experts_read(be), 3);
	CHECK_EQ_INT(be->moe_experts_read(be), 0);
	CHECK_EQ_INT(run_op(be, &w, true, false, x, 1, out), 0);
	CHECK_EQ_INT(run_op(be, &w, true, false, x + D, 1, out), 0);
	CHECK_EQ_INT(be->moe_experts_read(be), 4);
	moe_w_free(&w);
	be->destroy(be);
}

/* --- config.json ------------------------------------------------------ */

#define MOE_BASE                                                                                   \
	"\"model_type\":\"qwen3_moe\",\"vocab_size\":100,\"hidden_size\":16,"                      \
	"\"intermediate_size\":32,\"num_hidden_layers\":4,\"num_attention_heads\":2"

static int parse(const char *extra, struct atlas_config *c)
{
	char buf[2048];
	snprintf(buf, sizeof(buf), "{" MOE_BASE "%s}", extra);
	atlas_error_clear();
	return atlas_config_parse(buf, "cfg", c);
}

static void refused(const char *extra, int code, const char *msg)
{
	struct atlas_config c;
	int rc = parse(extra, &c);
	CHECK_EQ_INT(rc, code);
	CHECK_CONTAINS(atlas_errmsg(), msg);
}

static void test_config(void)
{
	struct atlas_config c;
	/* a dense config: no experts, every layer dense */
	CHECK_EQ_INT(parse("", &c), 0);
	CHECK_EQ_INT(c.num_experts, 0);
	CHECK(!atlas_config_layer_is_moe(&c, 0));
	/* Qwen spelling, sparse step, mlp_only_layers */
	CHECK_EQ_INT(parse(",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":"
			   "12,\"norm_topk_prob\":true,\"decoder_sparse_step\":2,"
			   "\"mlp_only_layers\":[3]", &c), 0);
	CHECK_EQ_INT(c.num_experts, 8);
	CHECK_EQ_INT(c.experts_per_tok, 2);
	CHECK_EQ_INT(c.moe_intermediate_size, 12);
	CHECK(c.norm_topk_prob);
	CHECK(!atlas_config_layer_is_moe(&c, 0));
	CHECK(atlas_config_layer_is_moe(&c, 1));
	CHECK(!atlas_config_layer_is_moe(&c, 2));
	CHECK(!atlas_config_layer_is_moe(&c, 3)); /* mlp_only */
	/* Mixtral / transformers 5 spelling; expert width defaults to
	 * intermediate_size; norm_topk_prob defaults to false */
	CHECK_EQ_INT(parse(",\"num_local_experts\":4,\"num_experts_per_tok\":2", &c), 0);
	CHECK_EQ_INT(c.num_experts, 4);
	CHECK_EQ_INT(c.moe_intermediate_size, 32);
	CHECK(!c.norm_topk_prob);
	for (int l = 0; l < 4; l++)
		CHECK(atlas_config_layer_is_moe(&c, l));
	CHECK_EQ_INT(parse(",\"num_experts\":4,\"num_experts_per_tok\":2,"
			   "\"shared_expert_intermediate_size\":48", &c), 0);
	CHECK_EQ_INT(c.shared_expert_intermediate_size, 48);

	refused(",\"num_experts\":4,\"num_experts_per_tok\":5", ATLAS_EFORMAT,
		"num_experts_per_tok (5) is greater than num_experts (4)");
	refused(",\"num_local_experts\":2,\"num_experts_per_tok\":3", ATLAS_EFORMAT,
		"greater than num_local_experts (2)");
	refused(",\"num_experts\":4", ATLAS_EFORMAT, "'num_experts_per_tok'");
	refused(",\"num_experts\":100000,\"num_experts_per_tok\":2", ATLAS_EUNSUPPORTED,
		"at most 65536 experts");
	refused(",\"num_experts\":128,\"num_experts_per_tok\":65", ATLAS_EUNSUPPORTED,
		"top 64 are supported");
	refused(",\"num_experts\":4,\"num_experts_per_tok\":2,\"mlp_only_layers\":[4]",
		ATLAS_EFORMAT, "mlp_only_layers");
	refused(",\"num_experts\":4,\"num_experts_per_tok\":2,\"topk_method\":\"noaux_tc\"",
		ATLAS_EUNSUPPORTED, "topk_method 'noaux_tc'");
	refused(",\"num_experts\":4,\"num_experts_per_tok\":2,\"scoring_func\":\"sigmoid\"",
		ATLAS_EUNSUPPORTED, "scoring_func 'sigmoid'");
	refused(",\"num_experts\":4,\"num_experts_per_tok\":2,\"n_group\":8", ATLAS_EUNSUPPORTED,
		"n_group 8");
	refused(",\"num_experts\":4,\"num_experts_per_tok\":2,\"n_shared_experts\":1",
		ATLAS_EUNSUPPORTED, "n_shared_experts");
	refused(",\"num_experts\":4,\"num_experts_per_tok\":2,\"routed_scaling_factor\":2.5",
		ATLAS_EUNSUPPORTED, "routed_scaling_factor");
	/* neutral values of those fields are accepted */
	CHECK_EQ_INT(parse(",\"num_experts\":4,\"num_experts_per_tok\":2,\"scoring_func\":"
			   "\"softmax\",\"topk_method\":\"greedy\",\"n_group\":1", &c), 0);
}

/* --- whole tiny checkpoints -------------------------------------------- */

#define V 40
#define D 16
#define HD 8
#define NH 2
#define NKV 1
#define FD 12 /* dense MLP width */
#define FE 12 /* expert width (equal, so experts can copy the dense MLP) */
#define NE 4
#define NL 2

/* A safetensors file being built: a JSON header and F32 data. */
struct st {
	char hdr[65536];
	size_t hlen;
	float *data;
	size_t n, cap; /* floats used / allocated */
};

static void st_add(struct st *s, const char *name, int ndim, const int64_t *shape,
		   const float *v)
{
	int64_t numel = 1;
	for (int i = 0; i < ndim; i++)
		numel *= shape[i];
	if (s->n + (size_t)numel > s->cap) {
		s->cap = (s->n + (size_t)numel) * 2;
		s->data = realloc(s->data, s->cap * sizeof(float));
	}
	memcpy(s->data + s->n, v, (size_t)numel * sizeof(float));
	s->hlen += (size_t)snprintf(s->hdr + s->hlen, sizeof(s->hdr) - s->hlen,
				    "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", s->hlen > 1 ? "," : "",
				    name);
	for (int i = 0; i < ndim; i++)
		s->hlen += (size_t)snprintf(s->hdr + s->hlen, sizeof(s->hdr) - s->hlen, "%s%lld",
					    i ? "," : "", (long long)shape[i]);
	s->hlen += (size_t)snprintf(s->hdr + s->hlen, sizeof(s->hdr) - s->hlen,
				    "],\"data_offsets\":[%zu,%zu]}", s->n * 4,
				    (s->n + (size_t)numel) * 4);
	s->n += (size_t)numel;
}

static void st_write(struct st *s, const char *dir)
{
	s->hlen += (size_t)snprintf(s->hdr + s->hlen, sizeof(s->hdr) - s->hlen, "}");
	while (s->hlen % 8)
		s->hdr[s->hlen++] = ' ';
	size_t total = 8 + s->hlen + s->n * 4;
	char *buf = malloc(total);
	uint64_t h = s->hlen;
	memcpy(buf, &h, 8);
	memcpy(buf + 8, s->hdr, s->hlen);
	memcpy(buf + 8 + s->hlen, s->data, s->n * 4);
	free(harness_write(dir, "model.safetensors", buf, total));
	free(buf);
	free(s->data);
}

/* The weights every variant shares, drawn once. */
static float W_embed[V * D], W_ln[NL][2][D], W_norm[D], W_q[NL][NH * HD * D],
	W_k[NL][NKV * HD * D], W_v[NL][NKV * HD * D], W_o[NL][D * NH * HD], W_qn[NL][HD],
	W_kn[NL][HD], W_g[NL][FD * D], W_u[NL][FD * D], W_d[NL][D * FD],
	W_router[NL][NE * D], W_eg[NL][NE][FE * D], W_eu[NL][NE][FE * D], W_ed[NL][NE][D * FE];

static void draw_weights(void)
{
	fill(W_embed, V * D, 1.0f);
	fill(W_norm, D, 0.2f);
	for (int i = 0; i < D; i++)
		W_norm[i] += 1.0f;
	for (int l = 0; l < NL; l++) {
		for (int j = 0; j < 2; j++)
			for (int i = 0; i < D; i++)
				W_ln[l][j][i] = 1.0f + 0.2f * urand();
		for (int i = 0; i < HD; i++) {
			W_qn[l][i] = 1.0f + 0.2f * urand();
			W_kn[l][i] = 1.0f + 0.2f * urand();
		}
		fill(W_q[l], NH * HD * D, 0.25f);
		fill(W_k[l], NKV * HD * D, 0.25f);
		fill(W_v[l], NKV * HD * D, 0.25f);
		fill(W_o[l], D * NH * HD, 0.25f);
		fill(W_g[l], FD * D, 0.25f);
		fill(W_u[l], FD * D, 0.25f);
		fill(W_d[l], D * FD, 0.3f);
		fill(W_router[l], NE * D, 0.5f);
		for (int e = 0; e < NE; e++) {
			fill(W_eg[l][e], FE * D, 0.25f);
			fill(W_eu[l][e], FE * D, 0.25f);
			fill(W_ed[l][e], D * FE, 0.3f);
		}
	}
}

enum variant {
	DENSE,        /* qwen3 with W_g/W_u/W_d */
	MOE_COPIES,   /* qwen3_moe, every expert a copy of the dense MLP, top 2, norm */
	MOE_SPLIT,    /* qwen3_moe, distinct experts, per-expert tensors */
	MOE_FUSED,    /* the same experts as gate_up_proj / down_proj */
	MOE_MISSING,  /* MOE_SPLIT without layers.1.mlp.experts.3.up_proj.weight */
	MOE_BADSHAPE, /* MOE_SPLIT with expert 1's down_proj of layer 0 too wide */
};

/* Write checkpoint `v` into a new directory under the tmpdir. Layer 1
 * is dense in every MoE variant (mlp_only_layers [1]) except
 * MOE_MISSING, where both layers are MoE. */
static const char *write_model(const char *name, enum variant v)
{
	static char dir[512];
	char cfg[1024], n[128];
	snprintf(dir, sizeof(dir), "%s/%s", harness_tmpdir(), name);
	mkdir(dir, 0755);
	bool moe = v != DENSE;
	snprintf(cfg, sizeof(cfg),
		 "{\"model_type\":\"%s\",\"architectures\":[\"%s\"],\"vocab_size\":%d,"
		 "\"hidden_size\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":%d,"
		 "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"head_dim\":%d,"
		 "\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true,\"rope_theta\":10000.0,"
		 "\"max_position_embeddings\":64%s}",
		 moe ? "qwen3_moe" : "qwen3", moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM", V,
		 D, FD, NL, NH, NKV, HD,
		 !moe ? ""
		 : v == MOE_MISSING
		     ? ",\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":12,"
		       "\"norm_topk_prob\":true,\"mlp_only_layers\":[]"
		     : ",\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":12,"
		       "\"norm_topk_prob\":true,\"mlp_only_layers\":[1]");
	free(harness_write(dir, "config.json", cfg, strlen(cfg)));
	struct st s = {.hdr = "{", .hlen = 1};
	int64_t sh[3];
#define ADD(nm, nd, a, b, c, data) \
	do { sh[0] = a; sh[1] = b; sh[2] = c; st_add(&s, nm, nd, sh, data); } while (0)
	ADD("model.embed_tokens.weight", 2, V, D, 0, W_embed);
	ADD("model.norm.weight", 1, D, 0, 0, W_norm);
	for (int l = 0; l < NL; l++) {
#define L(suffix) (snprintf(n, sizeof(n), "model.layers.%d.%s", l, suffix), n)
		ADD(L("input_layernorm.weight"), 1, D, 0, 0, W_ln[l][0]);
		ADD(L("post_attention_layernorm.weight"), 1, D, 0, 0, W_ln[l][1]);
		ADD(L("self_attn.q_proj.weight"), 2, NH * HD, D, 0, W_q[l]);
		ADD(L("self_attn.k_proj.weight"), 2, NKV * HD, D, 0, W_k[l]);
		ADD(L("self_attn.v_proj.weight"), 2, NKV * HD, D, 0, W_v[l]);
		ADD(L("self_attn.o_proj.weight"), 2, D, NH * HD, 0, W_o[l]);
		ADD(L("self_attn.q_norm.weight"), 1, HD, 0, 0, W_qn[l]);
		ADD(L("self_attn.k_norm.weight"), 1, HD, 0, 0, W_kn[l]);
		bool sparse = moe && (l == 0 || v == MOE_MISSING);
		if (!sparse) {
			ADD(L("mlp.gate_proj.weight"), 2, FD, D, 0, W_g[l]);
			ADD(L("mlp.up_proj.weight"), 2, FD, D, 0, W_u[l]);
			ADD(L("mlp.down_proj.weight"), 2, D, FD, 0, W_d[l]);
			continue;
		}
		ADD(L("mlp.gate.weight"), 2, NE, D, 0, W_router[l]);
		if (v == MOE_FUSED) {
			float *gu = malloc(sizeof(float) * NE * 2 * FE * D), *dn = malloc(sizeof(float) * NE * D * FE);
			for (int e = 0; e < NE; e++) {
				memcpy(gu + e * 2 * FE * D, W_eg[l][e], sizeof(W_eg[l][e]));
				memcpy(gu + e * 2 * FE * D + FE * D, W_eu[l][e], sizeof(W_eu[l][e]));
				memcpy(dn + e * D * FE, W_ed[l][e], sizeof(W_ed[l][e]));
			}
			ADD(L("mlp.experts.gate_up_proj"), 3, NE, 2 * FE, D, gu);
			ADD(L("mlp.experts.down_proj"), 3, NE, D, FE, dn);
			free(gu);
			free(dn);
			continue;
		}
		for (int e = 0; e < NE; e++) {
			char en[96];
			const float *g = v == MOE_COPIES ? W_g[l] : W_eg[l][e];
			const float *u = v == MOE_COPIES ? W_u[l] : W_eu[l][e];
			const float *d = v == MOE_COPIES ? W_d[l] : W_ed[l][e];
			snprintf(en, sizeof(en), "mlp.experts.%d.gate_proj.weight", e);
			ADD(L(en), 2, FE, D, 0, g);
			snprintf(en, sizeof(en), "mlp.experts.%d.up_proj.weight", e);
			if (!(v == MOE_MISSING && l == 1 && e == 3))
				ADD(L(en), 2, FE, D, 0, u);
			snprintf(en, sizeof(en), "mlp.experts.%d.down_proj.weight", e);
			if (v == MOE_BADSHAPE && e == 1) {
				float wide[D * (FE + 1)] = {0};
				ADD(L(en), 2, D, FE + 1, 0, wide);
			} else {
				ADD(L(en), 2, D, FE, 0, d);
			}
		}
#undef L
	}
#undef ADD
	st_write(&s, dir);
	return dir;
}

/* All-position logits [T, V] of ids through the model in dir. */
static int logits_of(const char *dir, struct atlas_backend *be, const int32_t *ids, int64_t T,
		     float *out)
{
	struct atlas_model *m = atlas_model_load(dir, be, NULL);
	if (!m)
		return ATLAS_EFORMAT;
	struct atlas_seq *s = atlas_seq_new(m);
	int rc = atlas_model_forward(m, s, ids, T, out, true);
	atlas_seq_free(s);
	atlas_model_free(m);
	return rc;
}

static void test_models(void)
{
	static const int32_t ids[] = {3, 17, 5, 39, 0, 22, 8, 8, 31};
	const int64_t T = sizeof(ids) / sizeof(ids[0]);
	static float dense[9 * V], copies[9 * V], split[9 * V], fused[9 * V], last[V];
	struct atlas_backend *be = atlas_backend_cpu_new();
	draw_weights();
	CHECK_EQ_INT(logits_of(write_model("dense", DENSE), be, ids, T, dense), 0);
	/* experts that are all the dense MLP, weights renormalised to 1:
	 * the same function as the dense model */
	CHECK_EQ_INT(logits_of(write_model("copies", MOE_COPIES), be, ids, T, copies), 0);
	double err = 0, mag = 0;
	for (int64_t i = 0; i < T * V; i++) {
		err = fmax(err, fabs((double)dense[i] - copies[i]));
		mag = fmax(mag, fabs((double)dense[i]));
	}
	CHECK(mag > 0.1);
	if (err > 1e-4 * mag)
		harness_fail(__FILE__, __LINE__, "MoE of copies differs from dense by %g (max %g)",
			     err, mag);
	/* the fused layout reads the same experts: the same bits */
	CHECK_EQ_INT(logits_of(write_model("split", MOE_SPLIT), be, ids, T, split), 0);
	CHECK_EQ_INT(logits_of(write_model("fused", MOE_FUSED), be, ids, T, fused), 0);
	CHECK(!memcmp(split, fused, sizeof(split)));
	CHECK(memcmp(split, dense, sizeof(split))); /* distinct experts do change it */
	/* two tensor-parallel ranks: attention and the dense layer split
	 * (partial sums: rounding apart), the MoE layer computed by rank 0 */
	struct atlas_tp_group *g = atlas_tp_group_new("cpu", 2);
	struct atlas_model_params mp;
	atlas_model_default_params(&mp);
	CHECK(g != NULL);
	if (g && atlas_tp_group_load(g, write_model("split", MOE_SPLIT), &mp) == 0) {
		static float tp[9 * V];
		struct atlas_model *m0 = atlas_tp_group_model(g, 0);
		struct atlas_seq *s = atlas_seq_new(m0);
		CHECK_EQ_INT(atlas_model_forward(m0, s, ids, T, tp, true), 0);
		double e = 0;
		for (int64_t i = 0; i < T * V; i++)
			e = fmax(e, fabs((double)tp[i] - split[i]));
		CHECK(e < 1e-5 * mag);
		atlas_seq_free(s);
	} else {
		harness_fail(__FILE__, __LINE__, "tp load: %s", atlas_errmsg());
	}
	CHECK_EQ_INT(atlas_tp_group_free(g), 0);
	/* the last row of a one-by-one decode equals the prefill's */
	struct atlas_model *m = atlas_model_load(write_model("split", MOE_SPLIT), be, NULL);
	CHECK(m != NULL);
	if (m) {
		struct atlas_seq *s = atlas_seq_new(m);
		for (int64_t t = 0; t < T; t++)
			CHECK_EQ_INT(atlas_model_forward(m, s, ids + t, 1, last, false), 0);
		double d = 0;
		for (int i = 0; i < V; i++)
			d = fmax(d, fabs((double)last[i] - split[(T - 1) * V + i]));
		CHECK(d < 1e-4);
		atlas_seq_free(s);
		atlas_model_free(m);
	}
	be->destroy(be);
}

/* Findings of atlas_model_validate, the problems joined into buf. */
static void on_finding(void *arg, enum atlas_finding level, const char *msg)
{
	char *buf = arg;
	if (level == ATLAS_FINDING_PROBLEM && strlen(buf) + strlen(msg) + 2 < 4096) {
		strcat(buf, msg);
		strcat(buf, "\n");
	}
}

static void test_validate(void)
{
	static char probs[4096];
	draw_weights();
	static const enum variant ok[] = {MOE_SPLIT, MOE_FUSED, MOE_COPIES};
	for (size_t i = 0; i < 3; i++) {
		probs[0] = '\0';
		CHECK_EQ_INT(atlas_model_validate(write_model("v", ok[i]), on_finding, probs), 0);
		if (probs[0])
			printf("# %s", probs);
	}
	probs[0] = '\0';
	CHECK_EQ_INT(atlas_model_validate(write_model("vm", MOE_MISSING), on_finding, probs), 1);
	CHECK_CONTAINS(probs, "model.layers.1.mlp.experts.3.up_proj.weight' is missing");
	probs[0] = '\0';
	CHECK_EQ_INT(atlas_model_validate(write_model("vb", MOE_BADSHAPE), on_finding, probs), 1);
	CHECK_CONTAINS(probs, "model.layers.0.mlp.experts.1.down_proj.weight");
}

static void test_model_refusals(void)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	draw_weights();
	atlas_error_clear();
	CHECK(atlas_model_load(write_model("missing", MOE_MISSING), be, NULL) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "model.layers.1.mlp.experts.3.up_proj.weight");
	CHECK_CONTAINS(atlas_errmsg(), "missing");
	atlas_error_clear();
	CHECK(atlas_model_load(write_model("badshape", MOE_BADSHAPE), be, NULL) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "model.layers.0.mlp.experts.1.down_proj.weight");
	CHECK_CONTAINS(atlas_errmsg(), "[16, 13]");
	/* a backend without the moe op (the mock, its recording moe op taken
	 * away) */
	struct atlas_backend *mock = atlas_backend_mock_new();
	mock->moe = NULL;
	atlas_error_clear();
	CHECK(atlas_model_load(write_model("split", MOE_SPLIT), mock, NULL) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "is a mixture-of-experts model");
	CHECK_CONTAINS(atlas_errmsg(), "has no MoE op");
	mock->destroy(mock);
	be->destroy(be);
}

/* --- synthetic models and the benchmarks' floor ---------------------- */

/* A synthetic model of config `json` on the CPU (atlas-bench fills its
 * weights on the host): the expert bytes it reports, and decode runs
 * whose floor counts the experts read: at batch 1 exactly top_k per
 * sparse layer (the model's own figure), at batch 4 between that and
 * every expert, the bytes following the count. */
static void check_synthetic(const char *json, int64_t sparse, int64_t one)
{
	struct atlas_config c;
	struct atlas_model_params mp;
	struct atlas_bench_decode r;
	/* synthetic weights are backend allocations that the model gives back
	 * through weight_release, which frees only when weights are copies */
	setenv("ATLAS_CPU_COPY_WEIGHTS", "1", 1);
	struct atlas_backend *be = atlas_backend_cpu_new();
	unsetenv("ATLAS_CPU_COPY_WEIGHTS");
	atlas_bench_prepare(be);
	CHECK_EQ_INT(atlas_config_parse(json, "cfg", &c), 0);
	atlas_model_default_params(&mp);
	mp.max_seqs = 4;
	mp.max_tokens = 8;
	mp.max_context = 32;
	struct atlas_model *m = atlas_model_synthetic(&c, be, &mp, 1);
	CHECK(m != NULL);
	if (!m) {
		harness_fail(__FILE__, __LINE__, "%s", atlas_errmsg());
		be->destroy(be);
		return;
	}
	const int64_t K = c.experts_per_tok, all = atlas_model_weight_bytes(m);
	CHECK_EQ_INT(atlas_model_expert_bytes(m), one);
	CHECK_EQ_INT(atlas_model_routed_bytes(m), sparse * K * one);
	CHECK_EQ_INT(atlas_bench_run_decode(m, be, 1, 4, 3, 1, 10.0, &r), 0);
	CHECK(r.moe);
	CHECK_NEAR(r.experts_read, (double)(sparse * K), 0);
	CHECK_NEAR(r.expert_bytes, (double)(sparse * K * one), 0);
	CHECK_EQ_INT(r.weight_bytes, all);
	CHECK_EQ_INT(atlas_bench_run_decode(m, be, 4, 4, 3, 1, 10.0, &r), 0);
	CHECK(r.experts_read >= (double)(sparse * K) &&
	      r.experts_read <= (double)(sparse * c.num_experts));
	CHECK(r.experts_read > (double)(sparse * K)); /* 4 random rows spread out */
	CHECK_NEAR(r.expert_bytes, r.experts_read * (double)one, 1e-6);
	CHECK_EQ_INT(r.weight_bytes, all - sparse * K * one + llround(r.expert_bytes));
	json_object *j = atlas_bench_decode_json(&r, false);
	CHECK_CONTAINS(json_object_to_json_string(j), "\"experts_read_per_step\":");
	json_object_put(j);
	atlas_model_free(m);
	be->destroy(be);
}

static void test_synthetic(void)
{
	/* layer 1 dense: 3 sparse layers of 8 experts [8, 16] x2, [16, 8] */
	check_synthetic("{" MOE_BASE ",\"num_experts\":8,\"num_experts_per_tok\":2,"
			"\"moe_intermediate_size\":8,\"mlp_only_layers\":[1],"
			"\"norm_topk_prob\":true}",
			3, 3 * 8 * 16 * 2);
	/* Qwen2-MoE: a shared expert, every other layer sparse */
	check_synthetic("{\"model_type\":\"qwen2_moe\",\"vocab_size\":100,\"hidden_size\":16,"
			"\"intermediate_size\":32,\"num_hidden_layers\":4,"
			"\"num_attention_heads\":2,\"num_experts\":6,\"num_experts_per_tok\":2,"
			"\"moe_intermediate_size\":8,\"decoder_sparse_step\":2,"
			"\"shared_expert_intermediate_size\":12}",
			2, 3 * 8 * 16 * 2);
	/* Mixtral: experts as wide as intermediate_size */
	check_synthetic("{\"model_type\":\"mixtral\",\"vocab_size\":100,\"hidden_size\":16,"
			"\"intermediate_size\":12,\"num_hidden_layers\":2,"
			"\"num_attention_heads\":2,\"num_local_experts\":4,"
			"\"num_experts_per_tok\":2}",
			2, 3 * 12 * 16 * 2);
}

/* The named MoE shapes: their configs as config.json would give them. */
static void test_bench_shapes(void)
{
	struct atlas_config c;
	CHECK_EQ_INT(atlas_bench_shape("qwen3-30b-a3b", &c), 0);
	CHECK_STR(c.model_type, "qwen3_moe");
	CHECK_EQ_INT(c.num_experts, 128);
	CHECK_EQ_INT(c.experts_per_tok, 8);
	CHECK_EQ_INT(c.moe_intermediate_size, 768);
	CHECK(c.norm_topk_prob);
	CHECK(atlas_config_layer_is_moe(&c, 0) && atlas_config_layer_is_moe(&c, 47));
	CHECK_EQ_INT(atlas_bench_shape("mixtral-8x7b", &c), 0);
	CHECK_STR(c.model_type, "mixtral");
	CHECK_EQ_INT(c.num_experts, 8);
	CHECK_EQ_INT(c.experts_per_tok, 2);
	CHECK_EQ_INT(c.moe_intermediate_size, 14336);
	CHECK_EQ_INT(c.sliding_window, 0);
	CHECK_CONTAINS(atlas_bench_shape_names(), "qwen3-30b-a3b, mixtral-8x7b");
}

int main(void)
{
	RUN(test_op_reference);
	RUN(test_tie_lower_index);
	RUN(test_op_bad_desc);
	RUN(test_experts_read);
	RUN(test_config);
	RUN(test_models);
	RUN(test_model_refusals);
	RUN(test_validate);
	RUN(test_synthetic);
	RUN(test_bench_shapes);
	return harness_done();
}
