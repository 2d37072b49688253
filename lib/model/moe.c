/* moe.c - binding a layer's mixture-of-experts weights (README-moe.md).
 *
 * The family says where its MoE block lives (family.h: block name,
 * projection names, shared expert); this file finds the router and the
 * experts in either layout a checkpoint may carry:
 *  - per expert, as the Hub ships them: BLOCK.experts.E.{gate,up,down}
 *    (Qwen: gate_proj/up_proj/down_proj; Mixtral: w1/w3/w2), each a
 *    matrix [F, D] / [F, D] / [D, F];
 *  - fused, as transformers 5 may save them: BLOCK.experts.gate_up_proj
 *    [E, 2F, D] (gate rows first) and BLOCK.experts.down_proj [E, D, F].
 * Either way the backend gets one pointer per expert and projection
 * (atlas_moe_desc), so the op does not care which. A tensor that is
 * missing or of the wrong shape is refused naming it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "decoder_internal.h"

/* "PREFIXlayers.L.BLOCK.REST" into n. */
static void lname(const struct atlas_model *m, char *n, size_t size, int64_t l,
		  const char *block, const char *rest)
{
	snprintf(n, size, "%slayers.%lld.%s.%s", m->tprefix, (long long)l, block, rest);
}

/* Bind a fused expert tensor [E, a, b] whole. */
static int bind_3d(struct atlas_model *m, struct weight *w, const char *name, int64_t E,
		   int64_t a, int64_t b)
{
	const struct atlas_tensor_info *t = atlas_st_find(m->st, name);
	memset(w, 0, sizeof(*w));
	if (!t)
		return atlas_error(ATLAS_EFORMAT, "tensor '%s' is missing from the checkpoint", name);
	if (t->ndim != 3 || t->shape[0] != E || t->shape[1] != a || t->shape[2] != b)
		return atlas_error(ATLAS_EFORMAT,
				   "tensor '%s' in '%s' has %d dimensions [%lld, %lld, %lld], but "
				   "config.json implies [%lld, %lld, %lld]",
				   name, t->file, t->ndim, (long long)t->shape[0],
				   (long long)(t->ndim > 1 ? t->shape[1] : 0),
				   (long long)(t->ndim > 2 ? t->shape[2] : 0), (long long)E,
				   (long long)a, (long long)b);
	if (t->dtype != ATLAS_DTYPE_F32 && t->dtype != ATLAS_DTYPE_F16 &&
	    t->dtype != ATLAS_DTYPE_BF16)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "tensor '%s' has dtype %s; supported here: F32, F16, BF16", name,
				   atlas_dtype_name(t->dtype));
	if (!(w->p = m->be->weight_upload(m->be, t->data, t->nbytes)))
		return atlas_error_wrap(ATLAS_ENOMEM, "cannot load tensor '%s'", name);
	w->dtype = t->dtype;
	w->nbytes = t->nbytes;
	return 0;
}

/* The experts, one tensor per expert and projection. */
static int bind_split(struct atlas_model *m, struct moe_layer *ml, int64_t l, const char *blk)
{
	const struct atlas_moe_family *f = m->fam->moe;
	const int64_t E = ml->d.n_experts, D = ml->d.D, F = ml->d.F;
	const char *proj[3] = {f->gate, f->up, f->down};
	char rest[96], n[192];
	ml->nw = 3 * E;
	if (!(ml->w = calloc((size_t)ml->nw, sizeof(*ml->w))))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	for (int64_t e = 0; e < E; e++)
		for (int i = 0; i < 3; i++) {
			snprintf(rest, sizeof(rest), "experts.%lld.%s.weight", (long long)e, proj[i]);
			lname(m, n, sizeof(n), l, blk, rest);
			struct weight *w = &ml->w[3 * e + i];
			int rc = atlas_decoder_bind(m, w, n, i == 2 ? D : F, i == 2 ? F : D, 1);
			if (rc)
				return rc;
			ml->ptrs[i * E + e] = w->p;
		}
	return 0;
}

/* The experts as transformers 5's fused 3-D tensors. */
static int bind_fused(struct atlas_model *m, struct moe_layer *ml, int64_t l, const char *blk)
{
	const int64_t E = ml->d.n_experts, D = ml->d.D, F = ml->d.F;
	char n[192];
	int rc;
	ml->nw = 2;
	if (!(ml->w = calloc(2, sizeof(*ml->w))))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	lname(m, n, sizeof(n), l, blk, "experts.gate_up_proj");
	if ((rc = bind_3d(m, &ml->w[0], n, E, 2 * F, D)))
		return rc;
	lname(m, n, sizeof(n), l, blk, "experts.down_proj");
	if ((rc = bind_3d(m, &ml->w[1], n, E, D, F)))
		return rc;
	size_t es = atlas_dtype_size(ml->w[0].dtype), ed = atlas_dtype_size(ml->w[1].dtype);
	for (int64_t e = 0; e < E; e++) {
		const char *gu = (const char *)ml->w[0].p + (size_t)(e * 2 * F * D) * es;
		ml->ptrs[e] = gu;
		ml->ptrs[E + e] = gu + (size_t)(F * D) * es;
		ml->ptrs[2 * E + e] = (const char *)ml->w[1].p + (size_t)(e * D * F) * ed;
	}
	return 0;
}

/* Every MoE tensor of the layer in one dtype (the op takes one). */
static int check_dtypes(const struct moe_layer *ml, int64_t l)
{
	enum atlas_dtype dt = ml->router.dtype;
	const struct weight *shared[] = {&ml->sg, &ml->su, &ml->sd, &ml->sgate};
	int ok = 1;
	for (int64_t i = 0; i < ml->nw; i++)
		ok &= ml->w[i].dtype == dt;
	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++)
		ok &= !shared[i]->p || shared[i]->dtype == dt;
	if (!ok)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "layer %lld: MoE weights (router, experts, shared expert) of "
				   "mixed dtypes are not supported", (long long)l);
	return 0;
}

static int bind_layer(struct atlas_model *m, int64_t l);

/* The experts go through the moe op, which takes no F8B or W4B weights. */
int atlas_moe_bind_layer(struct atlas_model *m, int64_t l)
{
	m->blob_off = true;
	int rc = bind_layer(m, l);
	m->blob_off = false;
	return rc;
}

static int bind_layer(struct atlas_model *m, int64_t l)
{
	const struct atlas_config *c = &m->cfg;
	const struct atlas_moe_family *f = m->fam->moe;
	struct moe_layer *ml = &m->moe[l];
	const int64_t E = c->num_experts, D = c->hidden_size, Fs = c->shared_expert_intermediate_size;
	char n[192], rest[96];
	int rc;
	if (!atlas_config_layer_is_moe(c, l))
		return 0;
	ml->d = (struct atlas_moe_desc){
	    .n_experts = E, .top_k = c->experts_per_tok, .D = D, .F = c->moe_intermediate_size,
	    .Fs = f->shared_expert ? Fs : 0, .norm_topk = f->always_norm || c->norm_topk_prob,
	};
	/* the block's name: the family's, or its other spelling */
	const char *blk = f->block;
	lname(m, n, sizeof(n), l, blk, "gate.weight");
	if (!atlas_st_find(m->st, n) && f->alt_block) {
		lname(m, rest, sizeof(rest), l, f->alt_block, "gate.weight");
		if (atlas_st_find(m->st, rest))
			blk = f->alt_block;
	}
	lname(m, n, sizeof(n), l, blk, "gate.weight");
	if ((rc = atlas_decoder_bind(m, &ml->router, n, E, D, 1)))
		return rc;
	if (!(ml->ptrs = calloc((size_t)(3 * E), sizeof(*ml->ptrs))))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	snprintf(rest, sizeof(rest), "experts.0.%s.weight", f->gate);
	lname(m, n, sizeof(n), l, blk, rest);
	int split = atlas_st_find(m->st, n) != NULL;
	lname(m, n, sizeof(n), l, blk, "experts.gate_up_proj");
	if (split || !atlas_st_find(m->st, n))
		rc = bind_split(m, ml, l, blk); /* names the first missing tensor */
	else
		rc = bind_fused(m, ml, l, blk);
	if (rc)
		return rc;
	/* a quantized checkpoint's experts come dequantized (F32 on the CPU,
	 * BF16 elsewhere) while its router stays as stored: the op takes one
	 * dtype, so the plain tensors follow the experts' */
	const bool conv = m->quant.method != ATLAS_QUANT_NONE && ml->nw > 0;
	const enum atlas_dtype edt = ml->nw > 0 ? ml->w[0].dtype : ml->router.dtype;
	if (conv && ml->router.dtype != edt) {
		lname(m, n, sizeof(n), l, blk, "gate.weight");
		atlas_decoder_release(m, &ml->router);
		if ((rc = atlas_decoder_bind_dtype(m, &ml->router, n, E, D, edt)))
			return rc;
	}
	if (ml->d.Fs) {
		static const char *const sh[] = {"shared_expert.gate_proj.weight",
						 "shared_expert.up_proj.weight",
						 "shared_expert.down_proj.weight",
						 "shared_expert_gate.weight"};
		struct weight *sw[] = {&ml->sg, &ml->su, &ml->sd, &ml->sgate};
		const int64_t d0[] = {Fs, Fs, D, 1}, d1[] = {D, D, Fs, D};
		for (int i = 0; i < 4 && !rc; i++) {
			lname(m, n, sizeof(n), l, blk, sh[i]);
			rc = conv ? atlas_decoder_bind_dtype(m, sw[i], n, d0[i], d1[i], edt)
				  : atlas_decoder_bind(m, sw[i], n, d0[i], d1[i], 1);
		}
		if (rc)
			return rc;
	}
	if ((rc = check_dtypes(ml, l)))
		return rc;
	atlas_moe_point_desc(ml, ml->router.dtype);
	return 0;
}

void atlas_moe_point_desc(struct moe_layer *ml, enum atlas_dtype wdt)
{
	const int64_t E = ml->d.n_experts;
	ml->d.wdt = wdt;
	ml->d.router = ml->router.p;
	ml->d.wg = ml->ptrs;
	ml->d.wu = ml->ptrs + E;
	ml->d.wd = ml->ptrs + 2 * E;
	ml->d.sg = ml->sg.p;
	ml->d.su = ml->su.p;
	ml->d.sd = ml->sd.p;
	ml->d.sgate = ml->sgate.p;
}

/* Bytes of one of layer l's routed experts (0: a dense layer). The
 * tensors bound hold every expert alike, whichever the layout. */
static int64_t expert_bytes(const struct atlas_model *m, int64_t l)
{
	const struct moe_layer *ml = m->moe ? &m->moe[l] : NULL;
	if (!ml || !ml->d.n_experts)
		return 0;
	int64_t all = 0;
	for (int64_t i = 0; i < ml->nw; i++)
		all += (int64_t)ml->w[i].nbytes;
	return all / ml->d.n_experts;
}

int64_t atlas_moe_bytes_per_token(const struct atlas_model *m, int64_t l)
{
	const struct moe_layer *ml = m->moe ? &m->moe[l] : NULL;
	if (!ml || !ml->d.n_experts)
		return 0;
	return (int64_t)(ml->router.nbytes + ml->sg.nbytes + ml->su.nbytes + ml->sd.nbytes +
			 ml->sgate.nbytes) +
	       expert_bytes(m, l) * ml->d.top_k;
}

int64_t atlas_model_expert_bytes(const struct atlas_model *m)
{
	for (int64_t l = 0; l < m->cfg.num_layers; l++)
		if (expert_bytes(m, l))
			return expert_bytes(m, l);
	return 0;
}

int64_t atlas_model_routed_bytes(const struct atlas_model *m)
{
	int64_t n = 0;
	for (int64_t l = 0; l < m->cfg.num_layers; l++)
		n += expert_bytes(m, l) * (m->moe ? m->moe[l].d.top_k : 0);
	return n;
}

void atlas_moe_release(struct atlas_model *m)
{
	if (!m->moe)
		return;
	for (int64_t l = 0; l < m->cfg.num_layers; l++) {
		struct moe_layer *ml = &m->moe[l];
		struct weight *one[] = {&ml->router, &ml->sg, &ml->su, &ml->sd, &ml->sgate};
		for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
			atlas_decoder_release(m, one[i]);
		for (int64_t i = 0; i < ml->nw; i++)
			atlas_decoder_release(m, &ml->w[i]);
		free(ml->w);
		free(ml->ptrs);
	}
	free(m->moe);
	m->moe = NULL;
}
