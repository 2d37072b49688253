/* synthetic.c - a model with random weights made by the backend itself,
 * for speed measurements at real shapes (atlas-bench --synthetic).
 *
 * Speed does not depend on the values, and writing or reading 16-64 GB
 * of random checkpoint would take minutes, so the weights are filled on
 * the device (be->fill_random) straight into the backend's arena; the
 * rest (activation buffers, KV pool, forward steps) is the ordinary
 * decoder's, through decoder_internal.h. All weights are BF16. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/log.h"
#include "decoder_internal.h"

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
	if (!rc)
		rc = make_matrix(m, &L->wq, qd, D, s + 3);
	if (!rc)
		rc = make_matrix(m, &L->wk, kvd, D, s + 4);
	if (!rc)
		rc = make_matrix(m, &L->wv, kvd, D, s + 5);
	if (!rc)
		rc = make_matrix(m, &L->wo, D, qd, s + 6);
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
	if (!rc)
		rc = make_matrix(m, &L->wg, F, D, s + 12);
	if (!rc)
		rc = make_matrix(m, &L->wu, F, D, s + 13);
	if (!rc)
		rc = make_matrix(m, &L->wd, D, F, s + 14);
	return rc;
}

/* Bytes the model will hold, as decoder.c's size_memory counts them. */
static size_t footprint(const struct atlas_model *m)
{
	const struct atlas_config *c = &m->cfg;
	size_t a = m->act, pad = 256;
	int64_t D = c->hidden_size, F = m->F_loc, hd = c->head_dim;
	int64_t qd = m->H_loc * hd, kvd = m->Hkv_loc * hd;
	size_t per_layer = (size_t)(2 * D + 2 * hd + qd * D + 2 * kvd * D + D * qd + 3 * F * D +
				    qd + 2 * kvd) * 2 + 16 * pad;
	size_t w = per_layer * (size_t)c->num_layers +
		   (size_t)(c->vocab_size * D * (c->tie_embeddings ? 1 : 2) + D) * 2 + 4 * pad;
	size_t rows = (size_t)m->max_tokens;
	size_t act = rows * a * (size_t)(3 * D + 2 * qd + 2 * kvd + 2 * F) +
		     rows * 4 * (size_t)c->vocab_size + (size_t)m->max_seqs * (size_t)D * a + 16 * pad;
	size_t kv = 2 * (size_t)c->num_layers * (size_t)(m->n_blocks * m->block_size) * (size_t)kvd * a;
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
	if (m->fam->moe) {
		atlas_error(ATLAS_EUNSUPPORTED,
			    "synthetic mixture-of-experts models ('%s') are not available yet",
			    m->fam->name);
		goto fail;
	}
	atlas_decoder_size(m, p);
	if (be->reserve && be->reserve(be, footprint(m)))
		goto fail;
	if (be->specialize && be->specialize(be, m->fam->name, "bf16"))
		goto fail;
	if (!(m->layers = calloc((size_t)c->num_layers, sizeof(*m->layers)))) {
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
	return m;
fail:
	atlas_error_wrap(ATLAS_EINVAL, "cannot make a synthetic %s model", c->model_type);
	atlas_model_free(m);
	return NULL;
}
