/* hybrid.c - the linear-attention (Gated DeltaNet) layers of hybrid
 * models (README-hybrid.md): binding their weights into one layout for
 * every family, and the size of a sequence's recurrent state.
 *
 * The backend's deltanet op reads one qkvz row per token (q, k, v, z,
 * each head after head) and one ba row (b, a). Qwen3.5 stores the
 * projections apart in that order already (in_proj_qkv, in_proj_z,
 * in_proj_b, in_proj_a): binding stacks them. Qwen3-Next fuses them and
 * groups the rows by key head (in_proj_qkvz: per key head dk of q, dk of
 * k, then Hv/Hk value heads of v and of z; in_proj_ba likewise): binding
 * gathers the rows into the plain order once, at load. The conv weight,
 * A_log, dt_bias and the gated norm's weight go to FP32. */
#include <stdio.h>
#include <stdlib.h>

#include "../core/error.h"
#include "decoder_internal.h"

/* Row order of the plain qkvz [C + Hv dv] from the grouped layout. */
static int64_t *grouped_qkvz(const struct atlas_config *c)
{
	const int64_t Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_k_dim;
	const int64_t dv = c->lin_v_dim, r = Hv / Hk, G = 2 * dk + 2 * r * dv;
	int64_t *map = malloc((size_t)(Hk * G) * sizeof(int64_t));
	if (!map)
		return NULL;
	int64_t o = 0;
	for (int part = 0; part < 2; part++) /* q then k */
		for (int64_t g = 0; g < Hk; g++)
			for (int64_t i = 0; i < dk; i++)
				map[o++] = g * G + part * dk + i;
	for (int part = 0; part < 2; part++) /* v then z */
		for (int64_t h = 0; h < Hv; h++)
			for (int64_t e = 0; e < dv; e++)
				map[o++] = h / r * G + 2 * dk + part * r * dv + h % r * dv + e;
	return map;
}

/* Row order of the plain ba [2 Hv] from the grouped layout. */
static int64_t *grouped_ba(const struct atlas_config *c)
{
	const int64_t Hk = c->lin_k_heads, Hv = c->lin_v_heads, r = Hv / Hk;
	int64_t *map = malloc((size_t)(2 * Hv) * sizeof(int64_t));
	if (!map)
		return NULL;
	for (int part = 0; part < 2; part++) /* b then a */
		for (int64_t h = 0; h < Hv; h++)
			map[part * Hv + h] = h / r * 2 * r + part * r + h % r;
	return map;
}

static int64_t *identity(int64_t n)
{
	int64_t *map = malloc((size_t)n * sizeof(int64_t));
	for (int64_t i = 0; map && i < n; i++)
		map[i] = i;
	return map;
}

int atlas_hybrid_bind_layer(struct atlas_model *m, int64_t l)
{
	const struct atlas_config *c = &m->cfg;
	struct lin_layer *L = &m->lin[l];
	const int64_t Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_k_dim;
	const int64_t dv = c->lin_v_dim, K = c->lin_conv, D = c->hidden_size;
	const int64_t C = 2 * Hk * dk + Hv * dv, Z = Hv * dv;
	char n[4][192];
	int rc;
#define NAME(i, suffix) \
	snprintf(n[i], sizeof(n[i]), "%slayers.%lld.linear_attn.%s", m->tprefix, (long long)l, suffix)
	const bool grouped = m->fam->hybrid->grouped;
	int64_t *mq = grouped ? grouped_qkvz(c) : identity(C + Z);
	int64_t *mb = grouped ? grouped_ba(c) : identity(2 * Hv);
	if (!mq || !mb) {
		free(mq);
		free(mb);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	if (grouped) {
		NAME(0, "in_proj_qkvz.weight");
		rc = atlas_decoder_bind_rows(m, &L->qkvz, 1, (const char *const[]){n[0]},
					     (const int64_t[]){C + Z}, D, mq, C + Z);
		NAME(0, "in_proj_ba.weight");
		if (!rc)
			rc = atlas_decoder_bind_rows(m, &L->ba, 1, (const char *const[]){n[0]},
						     (const int64_t[]){2 * Hv}, D, mb, 2 * Hv);
	} else {
		NAME(0, "in_proj_qkv.weight");
		NAME(1, "in_proj_z.weight");
		rc = atlas_decoder_bind_rows(m, &L->qkvz, 2, (const char *const[]){n[0], n[1]},
					     (const int64_t[]){C, Z}, D, mq, C + Z);
		NAME(0, "in_proj_b.weight");
		NAME(1, "in_proj_a.weight");
		if (!rc)
			rc = atlas_decoder_bind_rows(m, &L->ba, 2, (const char *const[]){n[0], n[1]},
						     (const int64_t[]){Hv, Hv}, D, mb, 2 * Hv);
	}
	free(mq);
	free(mb);
	NAME(0, "out_proj.weight");
	if (!rc)
		rc = atlas_decoder_bind(m, &L->out, n[0], D, Z, 1);
	NAME(0, "conv1d.weight");
	if (!rc)
		rc = atlas_decoder_bind_f32(m, &L->conv, n[0], (const int64_t[]){C, 1, K}, 3, 0.0f);
	NAME(0, "A_log");
	if (!rc)
		rc = atlas_decoder_bind_f32(m, &L->A_log, n[0], (const int64_t[]){Hv}, 1, 0.0f);
	NAME(0, "dt_bias");
	if (!rc)
		rc = atlas_decoder_bind_f32(m, &L->dt_bias, n[0], (const int64_t[]){Hv}, 1, 0.0f);
	NAME(0, "norm.weight");
	if (!rc)
		rc = atlas_decoder_bind_f32(m, &L->norm, n[0], (const int64_t[]){dv}, 1, 0.0f);
#undef NAME
	if (rc)
		return rc;
	atlas_hybrid_point_desc(m, l);
	return 0;
}

void atlas_hybrid_point_desc(struct atlas_model *m, int64_t l)
{
	const struct atlas_config *c = &m->cfg;
	struct lin_layer *L = &m->lin[l];
	L->d = (struct atlas_gdn_desc){
	    .Hk = c->lin_k_heads, .Hv = c->lin_v_heads, .dk = c->lin_k_dim, .dv = c->lin_v_dim,
	    .K = c->lin_conv, .eps = (float)c->rms_eps, .conv_w = L->conv.p, .A_log = L->A_log.p,
	    .dt_bias = L->dt_bias.p, .norm_w = L->norm.p,
	};
	L->state_off = m->state_floats;
	m->state_floats += atlas_gdn_state_floats(&L->d);
}

int atlas_hybrid_check(const struct atlas_config *c, const char *family)
{
	if (c->sliding_window > 0)
		return atlas_error(ATLAS_EUNSUPPORTED, "%s with a sliding window is not supported",
				   family);
	if (!c->n_linear)
		return atlas_error(ATLAS_EFORMAT,
				   "%s config without linear-attention layers (layer_types or "
				   "full_attention_interval)", family);
	return 0;
}

void atlas_hybrid_release(struct atlas_model *m)
{
	if (!m->lin)
		return;
	for (int64_t l = 0; l < m->cfg.num_layers; l++) {
		struct weight *w[] = {&m->lin[l].qkvz, &m->lin[l].ba, &m->lin[l].out,
			&m->lin[l].conv, &m->lin[l].A_log, &m->lin[l].dt_bias, &m->lin[l].norm};
		for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
			atlas_decoder_release(m, w[i]);
	}
	free(m->lin);
	m->lin = NULL;
}

int64_t atlas_hybrid_bytes_per_token(const struct atlas_model *m, int64_t l)
{
	if (!m->lin || !m->lin[l].qkvz.p)
		return 0;
	const struct lin_layer *L = &m->lin[l];
	return (int64_t)(L->qkvz.nbytes + L->ba.nbytes + L->out.nbytes + L->conv.nbytes +
			 L->A_log.nbytes + L->dt_bias.nbytes + L->norm.nbytes);
}
