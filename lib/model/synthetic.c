/* synthetic.c - a model with random weights made by the backend itself,
 * for speed measurements at real shapes (atlas-bench --synthetic).
 *
 * Speed does not depend on the values, and writing or reading 16-64 GB
 * of random checkpoint would take minutes, so the weights are filled on
 * the device (be->fill_random) straight into the backend's arena; the
 * rest (activation buffers, KV pool, forward steps) is the ordinary
 * decoder's, through decoder_internal.h. All weights are BF16. A
 * mixture-of-experts family gets a router and every expert in the layers
 * its config makes sparse (m->moe, as moe.c binds a checkpoint's), the
 * dense MLP in the others. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/log.h"
#include "decoder_internal.h"
#include "tensors.h"

/* One weight: allocated and filled with uniform values in [lo, hi]. */
static int make(struct atlas_model *m, struct weight *w, int64_t rows, int64_t cols, float lo,
		float hi, uint64_t seed)
{
	struct atlas_backend *be = m->be;
	int64_t n = rows * (cols > 0 ? cols : 1);
	size_t bytes = (size_t)n * 2;
	void *p = be->alloc(be, bytes);
	if (!p)
		return atlas_error_wrap(ATLAS_ENOMEM, "cannot allocate a [%lld, %lld] weight",
					(long long)rows, (long long)cols);
	int rc = be->fill_random(be, p, ATLAS_DTYPE_BF16, n, seed, lo, hi);
	if (rc) {
		be->free(be, p);
		return rc;
	}
	*w = (struct weight){p, ATLAS_DTYPE_BF16, bytes, NULL};
	return 0;
}

/* A matrix [N, K] whose products with unit-RMS rows have unit RMS:
 * uniform in +-sqrt(3 / K). */
static int make_matrix(struct atlas_model *m, struct weight *w, int64_t N, int64_t K,
		       uint64_t seed)
{
	float a = sqrtf(3.0f / (float)K);
	return make(m, w, N, K, -a, a, seed);
}

/* One random region of a quantized blob: n elements of dtype dt at byte
 * off, uniform in lo .. hi (the backend's fill_random). */
struct blob_fill {
	int64_t off, n;
	enum atlas_dtype dt;
	float lo, hi;
};

_Static_assert(ATLAS_F8B_HEAD == ATLAS_W4B_HEAD && ATLAS_F8B_HEAD == ATLAS_FP4B_HEAD,
	       "make_blob uploads one head size for every blob format");

/* A blob of `bytes` on the backend, dtype dt: its head (ATLAS_F8B_HEAD
 * bytes, every format's, already written by the format's init) uploaded, then the fills
 * (seeds seed, seed + 1, ...). `what` names the format in messages. */
static int make_blob(struct atlas_model *m, struct weight *w, const char *head, int64_t bytes,
		     enum atlas_dtype dt, const struct blob_fill *f, int nf, uint64_t seed,
		     const char *what, int64_t N, int64_t K)
{
	struct atlas_backend *be = m->be;
	char *p = be->alloc(be, (size_t)bytes);
	if (!p)
		return atlas_error_wrap(ATLAS_ENOMEM, "cannot allocate a [%lld, %lld] %s weight",
					(long long)N, (long long)K, what);
	int rc = be->upload(be, p, head, ATLAS_F8B_HEAD); /* plain memory: read before it returns */
	for (int i = 0; !rc && i < nf; i++)
		rc = be->fill_random(be, p + f[i].off, f[i].dt, f[i].n, seed + (uint64_t)i, f[i].lo,
				     f[i].hi);
	if (rc) {
		be->free(be, p);
		return rc;
	}
	*w = (struct weight){p, dt, (size_t)bytes, NULL};
	return 0;
}

/* A linear layer's matrix [N, K]: as make_matrix, or a quantized blob
 * of random values whose W is about uniform in +-a = sqrt(3 / K) again
 * and whose scales differ per block or group, so a kernel that takes the
 * wrong one gives other numbers:
 *   m->f8b   F8B: FP8 values uniform in +-448, each 128 x 128 block's
 *            scale uniform in (0.5 .. 1.5) a / 448 (W on the E4M3 grid);
 *   m->w4b   W4B: uniform bytes (each nibble 0..15), zero points 6..10,
 *            each group of 128 columns' scale (0.5 .. 1.5) a / 8: W on
 *            the grid a * (-8..7) / 8;
 *   m->fp4b  FP4B (NVFP4): uniform bytes (every nibble an E2M1 value,
 *            +-{0 .. 6}), the global multiplier a / 1536 and each group
 *            of 16 columns' F8 scale uniform in 128 .. 384. */
static int make_linear(struct atlas_model *m, struct weight *w, int64_t N, int64_t K,
		       uint64_t seed)
{
	if (!m->f8b && !m->w4b && !m->fp4b)
		return make_matrix(m, w, N, K, seed);
	const float a = sqrtf(3.0f / (float)K);
	char head[ATLAS_F8B_HEAD];
	if (m->w4b) {
		const int64_t g = 128, ng = (K + g - 1) / g;
		if (atlas_w4b_init(head, N, K, g))
			return atlas_error(ATLAS_EINVAL, "bad 4-bit shape [%lld, %lld] (K a multiple "
							 "of 32)", (long long)N, (long long)K);
		const struct blob_fill f[] = {
		    {ATLAS_W4B_HEAD, N * K / 2, ATLAS_DTYPE_U8, 0.0f, 256.0f},
		    {atlas_w4b_z_off(N, K), N * ng, ATLAS_DTYPE_U8, 6.0f, 11.0f},
		    {atlas_w4b_s_off(N, K, g), N * ng, ATLAS_DTYPE_BF16, 0.5f * a / 8.0f,
		     1.5f * a / 8.0f}};
		return make_blob(m, w, head, atlas_w4b_bytes(N, K, g), ATLAS_DTYPE_W4B, f, 3, seed,
				 "4-bit", N, K);
	}
	if (m->fp4b) {
		if (atlas_fp4b_init(head, N, K, a / 1536.0f))
			return atlas_error(ATLAS_EINVAL, "bad NVFP4 shape [%lld, %lld] (K a multiple "
							 "of 32)", (long long)N, (long long)K);
		const struct blob_fill f[] = {
		    {ATLAS_FP4B_HEAD, N * K / 2, ATLAS_DTYPE_U8, 0.0f, 256.0f},
		    {atlas_fp4b_s_off(N, K), N * (K / 16), ATLAS_DTYPE_F8_E4M3, 128.0f, 384.0f}};
		return make_blob(m, w, head, atlas_fp4b_bytes(N, K), ATLAS_DTYPE_FP4B, f, 2, seed,
				 "NVFP4", N, K);
	}
	if (atlas_f8b_init(head, N, K, 128, 128))
		return atlas_error(ATLAS_EINVAL, "bad FP8 shape [%lld, %lld]", (long long)N,
				   (long long)K);
	const struct blob_fill f[] = {
	    {ATLAS_F8B_HEAD, N * K, ATLAS_DTYPE_F8_E4M3, -448.0f, 448.0f},
	    {atlas_f8b_scale_off(N, K), ((N + 127) / 128) * ((K + 127) / 128), ATLAS_DTYPE_F32,
	     0.5f * a / 448.0f, 1.5f * a / 448.0f}};
	return make_blob(m, w, head, atlas_f8b_bytes(N, K, 128, 128), ATLAS_DTYPE_F8B, f, 2, seed,
			 "FP8", N, K);
}

/* Layer l's mixture-of-experts MLP into m->moe[l], laid out as
 * transformers 5 saves it (moe.c's fused layout): one [E, 2F, D] tensor
 * of every expert's gate then up rows and one [E, D, F] of the downs,
 * two allocations and fills per layer instead of 3E; the description
 * points into them, so atlas_moe_release gives them back like bound
 * ones. Seeds s + 12.. continue make_layer's. */
static int make_moe(struct atlas_model *m, int64_t l, uint64_t s)
{
	const struct atlas_config *c = &m->cfg;
	const struct atlas_moe_family *f = m->fam->moe;
	struct moe_layer *ml = &m->moe[l];
	const int64_t E = c->num_experts, D = c->hidden_size, F = c->moe_intermediate_size;
	const int64_t Fs = f->shared_expert ? c->shared_expert_intermediate_size : 0;
	int rc;
	ml->d = (struct atlas_moe_desc){
	    .n_experts = E, .top_k = c->experts_per_tok, .D = D, .F = F, .Fs = Fs,
	    .norm_topk = f->always_norm || c->norm_topk_prob, .wdt = ATLAS_DTYPE_BF16,
	};
	ml->nw = 2;
	ml->ptrs = calloc((size_t)(3 * E), sizeof(*ml->ptrs));
	ml->w = calloc(2, sizeof(*ml->w));
	if (!ml->ptrs || !ml->w)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if ((rc = make_matrix(m, &ml->router, E, D, s + 12)) ||
	    (rc = make_matrix(m, &ml->w[0], E * 2 * F, D, s + 13)) ||
	    (rc = make_matrix(m, &ml->w[1], E * D, F, s + 14)))
		return rc;
	if (Fs && ((rc = make_matrix(m, &ml->sg, Fs, D, s + 15)) ||
		   (rc = make_matrix(m, &ml->su, Fs, D, s + 16)) ||
		   (rc = make_matrix(m, &ml->sd, D, Fs, s + 17)) ||
		   (rc = make_matrix(m, &ml->sgate, 1, D, s + 18))))
		return rc;
	for (int64_t e = 0; e < E; e++) {
		const char *gu = (const char *)ml->w[0].p + (size_t)(e * 2 * F * D) * 2;
		ml->ptrs[e] = gu;
		ml->ptrs[E + e] = gu + (size_t)(F * D) * 2;
		ml->ptrs[2 * E + e] = (const char *)ml->w[1].p + (size_t)(e * D * F) * 2;
	}
	atlas_moe_point_desc(ml, ATLAS_DTYPE_BF16);
	return 0;
}

/* n FP32 values uniform in [lo, hi] (a DeltaNet layer's small weights). */
static int make_f32(struct atlas_model *m, struct weight *w, int64_t n, float lo, float hi,
		    uint64_t seed)
{
	struct atlas_backend *be = m->be;
	void *p = be->alloc(be, (size_t)n * 4);
	if (!p)
		return atlas_error_wrap(ATLAS_ENOMEM, "cannot allocate %lld floats", (long long)n);
	int rc = be->fill_random(be, p, ATLAS_DTYPE_F32, n, seed, lo, hi);
	if (rc) {
		be->free(be, p);
		return rc;
	}
	*w = (struct weight){p, ATLAS_DTYPE_F32, (size_t)n * 4, NULL};
	return 0;
}

/* A hybrid model's linear-attention layer l into m->lin[l], in the one
 * layout hybrid.c binds (qkvz, ba, out, FP32 conv, A_log, dt_bias and
 * norm). Seeds s + 3.. as the attention weights it replaces. */
static int make_lin(struct atlas_model *m, int64_t l, uint64_t s)
{
	const struct atlas_config *c = &m->cfg;
	struct lin_layer *L = &m->lin[l];
	const int64_t D = c->hidden_size, Hk = c->lin_k_heads, Hv = c->lin_v_heads;
	const int64_t Z = Hv * c->lin_v_dim, C = 2 * Hk * c->lin_k_dim + Z, K = c->lin_conv;
	int rc;
	if ((rc = make_linear(m, &L->qkvz, C + Z, D, s + 3)) ||
	    (rc = make_linear(m, &L->ba, 2 * Hv, D, s + 4)) ||
	    (rc = make_linear(m, &L->out, D, Z, s + 5)) ||
	    (rc = make_f32(m, &L->conv, C * K, -0.5f, 0.5f, s + 6)) ||
	    (rc = make_f32(m, &L->A_log, Hv, 0.0f, 2.7f, s + 7)) ||
	    (rc = make_f32(m, &L->dt_bias, Hv, -1.0f, 1.0f, s + 8)) ||
	    (rc = make_f32(m, &L->norm, c->lin_v_dim, 1.0f, 1.0f, s + 9)))
		return rc;
	atlas_hybrid_point_desc(m, l);
	return 0;
}

static int make_layer(struct atlas_model *m, int64_t l, uint64_t seed)
{
	const struct atlas_config *c = &m->cfg;
	struct layer *L = &m->layers[l];
	/* this rank's slices: only the shapes matter here */
	int64_t D = c->hidden_size, F = m->F_loc, hd = c->head_dim;
	int64_t qd = m->H_loc * hd, kvd = m->Hkv_loc * hd;
	uint64_t s = seed + (uint64_t)l * 64;
	int rc = make(m, &L->ln1, D, 0, 1.0f, 1.0f, s + 1);
	if (!rc)
		rc = make(m, &L->ln2, D, 0, 1.0f, 1.0f, s + 2);
	if (!rc && m->lin && atlas_config_layer_is_linear(c, l)) {
		rc = make_lin(m, l, s);
		goto mlp;
	}
	/* gated attention: a query and a gate per head */
	if (!rc)
		rc = make_linear(m, &L->wq, m->fam->gated_attn ? 2 * qd : qd, D, s + 3);
	if (!rc)
		rc = make_linear(m, &L->wk, kvd, D, s + 4);
	if (!rc)
		rc = make_linear(m, &L->wv, kvd, D, s + 5);
	if (!rc)
		rc = make_linear(m, &L->wo, D, qd, s + 6);
	if (!rc && m->fam->qk_norm)
		rc = make(m, &L->qn, hd, 0, 1.0f, 1.0f, s + 7);
	if (!rc && m->fam->qk_norm)
		rc = make(m, &L->kn, hd, 0, 1.0f, 1.0f, s + 8);
	if (!rc && (m->fam->qkv_bias || c->attention_bias)) {
		rc = make(m, &L->bq, qd, 0, -0.1f, 0.1f, s + 9);
		if (!rc)
			rc = make(m, &L->bk, kvd, 0, -0.1f, 0.1f, s + 10);
		if (!rc)
			rc = make(m, &L->bv, kvd, 0, -0.1f, 0.1f, s + 11);
	}
mlp:
	if (!rc && m->moe && atlas_config_layer_is_moe(c, l))
		return make_moe(m, l, s);
	if (!rc)
		rc = make_linear(m, &L->wg, F, D, s + 12);
	if (!rc)
		rc = make_linear(m, &L->wu, F, D, s + 13);
	if (!rc)
		rc = make_linear(m, &L->wd, D, F, s + 14);
	return rc;
}

/* The moe op's description of a sparse layer of m without its pointers
 * (shapes only), or all zeros for a dense family. */
static struct atlas_moe_desc moe_shape(const struct atlas_model *m)
{
	const struct atlas_config *c = &m->cfg;
	const struct atlas_moe_family *f = m->fam->moe;
	if (!f)
		return (struct atlas_moe_desc){0};
	return (struct atlas_moe_desc){
	    .n_experts = c->num_experts, .top_k = c->experts_per_tok, .D = c->hidden_size,
	    .F = c->moe_intermediate_size,
	    .Fs = f->shared_expert ? c->shared_expert_intermediate_size : 0};
}

/* Bytes the model will hold, as decoder.c's size_memory counts them. */
static size_t footprint(const struct atlas_model *m)
{
	const struct atlas_config *c = &m->cfg;
	const struct atlas_moe_desc md = moe_shape(m);
	size_t a = m->act, pad = 256;
	int64_t D = c->hidden_size, F = m->F_loc, hd = c->head_dim;
	int64_t qd = m->H_loc * hd, kvd = m->Hkv_loc * hd;
	size_t attn = (size_t)(2 * D + 2 * hd + qd * D + 2 * kvd * D + D * qd + qd + 2 * kvd) * 2 +
		      16 * pad;
	/* a sparse layer holds every expert (whole on every rank), its
	 * router and the shared expert with its gate, instead of the MLP */
	size_t dense = (size_t)(3 * F * D) * 2;
	size_t sparse = (size_t)(md.n_experts * D + 3 * md.n_experts * md.F * D +
				 (md.Fs ? 3 * md.Fs * D + D : 0)) * 2;
	size_t w = (size_t)(c->vocab_size * D * (c->tie_embeddings ? 1 : 2) + D) * 2 + 4 * pad;
	/* a linear-attention layer: its projections, FP32 small weights, and
	 * every sequence's recurrent state */
	const int64_t Z = c->lin_v_heads * c->lin_v_dim, C = 2 * c->lin_k_heads * c->lin_k_dim + Z;
	const size_t lin = (size_t)((C + Z) * D + 2 * c->lin_v_heads * D + D * Z) * 2 +
			   (size_t)(C * c->lin_conv + 2 * c->lin_v_heads + c->lin_v_dim) * 4 + 16 * pad;
	const size_t state = (size_t)(C * (c->lin_conv - 1) + c->lin_v_heads * c->lin_k_dim *
				      c->lin_v_dim) * 4;
	const size_t gq = m->fam->gated_attn ? (size_t)(qd * D) * 2 : 0;
	for (int64_t l = 0; l < c->num_layers; l++) {
		const bool li = atlas_config_layer_is_linear(c, l);
		w += (li ? lin + 4 * (size_t)m->max_seqs * state : attn + gq) +
		     (md.n_experts && atlas_config_layer_is_moe(c, l) ? sparse : dense);
	}
	size_t rows = (size_t)m->max_tokens;
	size_t act = rows * a * (size_t)(3 * D + 2 * qd + 2 * kvd + 2 * F) +
		     (gq ? rows * a * (size_t)(2 * qd) : 0) +
		     (c->n_linear ? rows * (a * (size_t)(C + 2 * Z + 2 * c->lin_v_heads + D) +
					    4 * (size_t)C) : 0) +
		     rows * 4 * (size_t)c->vocab_size + (size_t)m->max_seqs * (size_t)D * a +
		     (md.n_experts ? atlas_moe_scratch_bytes(&md, m->max_tokens) : 0) +
		     (md.n_experts && m->comm->rank > 0 ? rows * (size_t)D * a : 0) + 16 * pad;
	size_t kv = 2 * (size_t)c->num_layers * (size_t)(m->n_blocks * m->block_size) * m->kv_row;
	size_t meta = (size_t)(ATLAS_STEP_HDR + 4 * (m->max_tokens + 63) +
			       m->max_seqs * (m->max_blocks + 1)) * 4 + 8 * pad;
	size_t scratch = rows * (size_t)c->vocab_size * 4 + 64 * 2 * (size_t)c->vocab_size * 4 + 4 * pad;
	return w + act + kv + meta + scratch + (size_t)hd * 4 + pad;
}

struct atlas_model *atlas_model_synthetic(const struct atlas_config *cfg,
					  struct atlas_backend *be,
					  const struct atlas_model_params *p, uint64_t seed)
{
	if (!be->fill_random) {
		atlas_error(ATLAS_EUNSUPPORTED,
			    "backend '%s' cannot make random weights (synthetic models need a GPU)",
			    be->name);
		return NULL;
	}
	struct atlas_model *m = calloc(1, sizeof(*m));
	if (!m) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	m->be = be;
	m->synthetic = true;
	m->act = atlas_dtype_size(be->act_dtype);
	m->cfg = *cfg;
	const struct atlas_config *c = &m->cfg;
	if (!(m->fam = atlas_family_find(c)) || atlas_decoder_check_config(c, m->fam) ||
	    atlas_decoder_set_parallel(m, p ? p->comm : NULL))
		goto fail;
	if (m->fam->moe && !be->moe) {
		atlas_error(ATLAS_EUNSUPPORTED,
			    "'%s' is a mixture-of-experts model and backend '%s' has no MoE op",
			    m->fam->name, be->name);
		goto fail;
	}
	if ((c->n_linear || m->fam->gated_attn) &&
	    (!be->deltanet || !be->gate_split || !be->rope_partial || m->comm->world > 1)) {
		atlas_error(ATLAS_EUNSUPPORTED,
			    "'%s' is a hybrid model: it needs one rank and a backend with the "
			    "deltanet op ('%s' %s)", m->fam->name, be->name,
			    be->deltanet ? "has it" : "has not");
		goto fail;
	}
	const char *q = p ? p->synthetic_quant : NULL;
	if (q && strcmp(q, "bf16")) {
		const bool w4 = !strcmp(q, "w4a16"), f4 = !strcmp(q, "nvfp4");
		if (!w4 && !f4 && strcmp(q, "fp8-block")) {
			atlas_error(ATLAS_EINVAL,
				    "unknown weight format '%s' (bf16, fp8-block, w4a16, nvfp4)", q);
			goto fail;
		}
		const bool has = w4 ? be->w4b_weights : f4 ? be->fp4b_weights : be->f8b_weights;
		if (!has || m->comm->world != 1 || m->fam->moe) {
			atlas_error(ATLAS_EUNSUPPORTED,
				    "%s weights need a backend with %s matmuls (%s has %s), one rank "
				    "and a dense model",
				    q, w4 ? "4-bit" : f4 ? "NVFP4" : "FP8", be->name,
				    has ? "them" : "none");
			goto fail;
		}
		m->f8b = !w4 && !f4;
		m->w4b = w4;
		m->fp4b = f4;
	}
	if (atlas_decoder_size(m, p))
		goto fail;
	if (be->reserve && be->reserve(be, footprint(m)))
		goto fail;
	m->kern_quant = "bf16";
	if (atlas_model_specialize(m))
		goto fail;
	m->layers = calloc((size_t)c->num_layers, sizeof(*m->layers));
	if (m->fam->moe)
		m->moe = calloc((size_t)c->num_layers, sizeof(*m->moe));
	if (c->n_linear)
		m->lin = calloc((size_t)c->num_layers, sizeof(*m->lin));
	if (!m->layers || (m->fam->moe && !m->moe) || (c->n_linear && !m->lin)) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		goto fail;
	}
	int rc = make(m, &m->embed, c->vocab_size, c->hidden_size, -1.0f, 1.0f, seed);
	if (!rc)
		rc = make(m, &m->norm, c->hidden_size, 0, 1.0f, 1.0f, seed + 1);
	if (!rc && c->tie_embeddings)
		m->lm_head = m->embed;
	else if (!rc)
		rc = make_matrix(m, &m->lm_head, c->vocab_size, c->hidden_size, seed + 2);
	for (int64_t l = 0; !rc && l < c->num_layers; l++)
		rc = make_layer(m, l, seed + 16);
	if (rc || atlas_decoder_alloc_buffers(m) || atlas_kvpool_init(m))
		goto fail;
	atlas_forward_fused_setup(m);
	atlas_info("synthetic %s model: %lld layers, hidden %lld, %lld heads (%lld kv), vocab %lld; "
		   "%lld bytes of weights read per token",
		   m->fam->name, (long long)c->num_layers, (long long)c->hidden_size,
		   (long long)c->num_heads, (long long)c->num_kv_heads, (long long)c->vocab_size,
		   (long long)atlas_model_weight_bytes(m));
	if (m->moe)
		atlas_info("mixture of experts: %lld experts, top %lld, expert width %lld%s",
			   (long long)c->num_experts, (long long)c->experts_per_tok,
			   (long long)c->moe_intermediate_size,
			   m->fam->moe->shared_expert ? ", a shared expert" : "");
	return m;
fail:
	atlas_error_wrap(ATLAS_EINVAL, "cannot make a synthetic %s model", c->model_type);
	atlas_model_free(m);
	return NULL;
}

struct atlas_model *atlas_model_synthetic_mtp(struct atlas_model *target,
					      const struct atlas_model_params *p, uint64_t seed)
{
	struct atlas_backend *be = target->be;
	if (!be->fill_random || target->comm->world > 1) {
		atlas_error(ATLAS_EUNSUPPORTED, "a synthetic MTP head needs one rank and a backend "
			    "that makes random weights (a GPU)");
		return NULL;
	}
	struct atlas_model *m = atlas_decoder_mtp_new(target);
	if (!m)
		return NULL;
	m->synthetic = true;
	atlas_mtp_config(&target->cfg, false, &m->cfg);
	const struct atlas_config *c = &m->cfg;
	if (atlas_decoder_set_parallel(m, NULL) || atlas_decoder_size(m, p))
		goto fail;
	if (be->reserve && be->reserve(be, footprint(m) + (size_t)(4 * m->max_tokens *
								 c->hidden_size) * m->act))
		goto fail;
	/* the target's embeddings and head; fc's two halves, the norms */
	if (atlas_decoder_mtp_parts(m, target))
		goto fail;
	const int64_t D = c->hidden_size;
	int rc = make_matrix(m, &m->fc_e, D, D, seed);
	if (!rc)
		rc = make_matrix(m, &m->fc_h, D, D, seed + 1);
	if (!rc)
		rc = make(m, &m->pre_e, D, 0, 1.0f, 1.0f, seed + 2);
	if (!rc)
		rc = make(m, &m->pre_h, D, 0, 1.0f, 1.0f, seed + 3);
	if (!rc)
		rc = make(m, &m->norm, D, 0, 1.0f, 1.0f, seed + 4);
	if (!rc)
		rc = make_layer(m, 0, seed + 16);
	if (rc || atlas_decoder_alloc_buffers(m) || atlas_kvpool_init(m))
		goto fail;
	if (atlas_model_specialize(target))
		goto fail;
	return m;
fail:
	atlas_error_wrap(ATLAS_EINVAL, "cannot make a synthetic MTP head");
	atlas_model_free(m);
	return NULL;
}
