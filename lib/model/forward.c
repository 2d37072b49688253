/* forward.c - one forward step over a batch of sequences.
 *
 * The tokens of every item are laid end to end (T rows); each layer's
 * matrices run once over all T rows, and only attention looks at which
 * sequence and position a row belongs to (through the block tables), so
 * a request's result does not depend on its neighbours in the batch:
 *
 *   x = embed(ids)
 *   for each layer:
 *     h = rmsnorm(x)                      (fused with the residual add)
 *     q, k, v = h Wq, h Wk, h Wv          (+ biases; + per-head norm)
 *     rope(q, k); store k, v in the paged cache
 *     x += attention(q, cache) Wo
 *     h = rmsnorm(x)
 *     x += (silu(h Wg) * h Wu) Wd         (or the backend's moe op in a
 *                                          layer the config makes sparse)
 *   logits = rmsnorm(x) Wlm               (last row of each item, or all)
 *
 * An MTP head (atlas_model_load_mtp) is one such layer whose x comes in
 * as fc([rmsnorm(embed(ids)), rmsnorm(hidden)]): each item's hidden rows
 * (atlas_batch_item.hid, zeros where none) are gathered first; the final
 * normed rows of every step stay in m->h until the next one
 * (atlas_model_hidden_rows), for a head to read.
 *
 * A one-token step (T = 1) runs the whole layer loop as the backend's
 * fused op when the backend accepted the model at load
 * (atlas_forward_fused_setup; CUDA: one kernel launch for every layer),
 * except in batch-invariant mode, where a token must get the bits it
 * would get in any batch, and past ATLAS_FUSED_MAX_KEYS keys, where the
 * op path's split-K attention is faster.
 *
 * Tensor parallelism (lib/comm/README-tp.md): every rank holds its slice
 * of the heads and MLP rows (m->H_loc, Hkv_loc, F_loc), so the o and down
 * products are partial sums, completed by the two all_reduce_sum calls
 * of each layer (an MoE layer's experts are not split: rank 0 computes
 * it and the others contribute zeros); the code is the same for one
 * rank (whose collectives are no-ops). Rank 0 drives the steps and broadcasts each one's header
 * and token metadata before running it; the other ranks run the same
 * body in atlas_model_follow. Only rank 0 computes logits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/log.h"
#include "decoder_internal.h"

#define TRY(call) \
	do { \
		int rc_ = (call); \
		if (rc_) \
			return rc_; \
	} while (0)

/* Base of layer l's K (which = 0) or V (1) pool. */
static void *kv_pool(struct atlas_model *m, int which, int64_t l)
{
	const struct atlas_config *c = &m->cfg;
	size_t per_layer = (size_t)(m->n_blocks * m->block_size) * m->kv_row;
	return (char *)m->kv + ((size_t)which * (size_t)c->num_layers + (size_t)l) * per_layer;
}

/* The Gated DeltaNet of linear-attention layer l (hybrid models) over the
 * step's T rows into m->o: the input projections, the deltanet op from
 * each item's own state (m->d_gdn, uploaded by step()), the output
 * projection. */
static int lin_mixer(struct atlas_model *m, int64_t l, int64_t T)
{
	struct atlas_backend *be = m->be;
	const struct lin_layer *L = &m->lin[l];
	const struct atlas_gdn_desc *d = &L->d;
	const int64_t D = m->cfg.hidden_size, Z = d->Hv * d->dv;
	const int64_t C = 2 * d->Hk * d->dk + Z;
	TRY(be->matmul(be, m->qkvz, m->h, L->qkvz.p, NULL, L->qkvz.dtype, T, C + Z, D));
	TRY(be->matmul(be, m->ba, m->h, L->ba.p, NULL, L->ba.dtype, T, 2 * d->Hv, D));
	TRY(be->deltanet(be, m->lin_o, m->qkvz, m->ba, d, m->d_gdn, m->gdn_n, L->state_off,
			 m->gdn_scratch));
	return be->matmul(be, m->o, m->lin_o, L->out.p, NULL, L->out.dtype, T, D, Z);
}

/* One layer over the T rows of the step. On entry m->h holds rmsnorm(x)
 * for this layer; on exit x holds the residual stream without the MLP
 * output, which is left in m->o for the next fused add+norm. */
static int layer_forward(struct atlas_model *m, int64_t l, int64_t T,
			 const struct atlas_kv_batch *kb)
{
	struct atlas_backend *be = m->be;
	struct atlas_comm *comm = m->comm;
	const struct atlas_config *c = &m->cfg;
	const struct layer *L = &m->layers[l];
	/* this rank's heads and MLP rows (all of them on one rank) */
	int64_t D = c->hidden_size, F = m->F_loc, hd = c->head_dim;
	int64_t H = m->H_loc, Hkv = m->Hkv_loc;
	int64_t window = m->fam->use_window ? c->sliding_window : 0;
	float eps = (float)c->rms_eps;

	if (m->lin && m->lin[l].qkvz.p) {
		TRY(lin_mixer(m, l, T));
		goto mlp;
	}
	void *kc = kv_pool(m, 0, l), *vc = kv_pool(m, 1, l);
	const int64_t rd = c->rotary_dim > 0 ? c->rotary_dim : hd;
	if (m->fam->gated_attn) {
		/* the q projection gives each head's query and gate */
		TRY(be->matmul(be, m->qg, m->h, L->wq.p, L->bq.p, L->wq.dtype, T, 2 * H * hd, D));
		TRY(be->gate_split(be, m->q, m->qg, T, H, hd));
		TRY(be->matmul(be, m->k, m->h, L->wk.p, L->bk.p, L->wk.dtype, T, Hkv * hd, D));
		TRY(be->matmul(be, m->v, m->h, L->wv.p, L->bv.p, L->wv.dtype, T, Hkv * hd, D));
	} else if (be->matmul_multi && L->wq.dtype == L->wk.dtype && L->wq.dtype == L->wv.dtype) {
		void *const outs[3] = {m->q, m->k, m->v};
		const void *const ws[3] = {L->wq.p, L->wk.p, L->wv.p};
		const void *const bs[3] = {L->bq.p, L->bk.p, L->bv.p};
		const int64_t Ns[3] = {H * hd, Hkv * hd, Hkv * hd};
		TRY(be->matmul_multi(be, 3, outs, m->h, ws, bs, L->wq.dtype, T, Ns, D));
	} else {
		TRY(be->matmul(be, m->q, m->h, L->wq.p, L->bq.p, L->wq.dtype, T, H * hd, D));
		TRY(be->matmul(be, m->k, m->h, L->wk.p, L->bk.p, L->wk.dtype, T, Hkv * hd, D));
		TRY(be->matmul(be, m->v, m->h, L->wv.p, L->bv.p, L->wv.dtype, T, Hkv * hd, D));
	}
	if (rd != hd) {
		/* partial rotary embedding (Qwen3-Next): the plain ops */
		if (m->fam->qk_norm) {
			TRY(be->rmsnorm(be, m->q, m->q, L->qn.p, L->qn.dtype, T * H, hd, eps));
			TRY(be->rmsnorm(be, m->k, m->k, L->kn.p, L->kn.dtype, T * Hkv, hd, eps));
		}
		TRY(be->rope_partial(be, m->q, m->d_pos, m->inv_freq, T, H, hd, rd));
		TRY(be->rope_partial(be, m->k, m->d_pos, m->inv_freq, T, Hkv, hd, rd));
		TRY(be->kv_store(be, kc, vc, m->k, m->v, m->d_slot, T, Hkv, hd));
	} else if (be->qk_rope_store && (!m->fam->qk_norm || L->qn.dtype == L->kn.dtype)) {
		const bool qk = m->fam->qk_norm;
		TRY(be->qk_rope_store(be, m->q, m->k, m->v, qk ? L->qn.p : NULL,
				      qk ? L->kn.p : NULL, L->qn.dtype, eps, m->d_pos,
				      m->inv_freq, kc, vc, m->d_slot, T, H, Hkv, hd));
	} else {
		if (m->fam->qk_norm) {
			TRY(be->rmsnorm(be, m->q, m->q, L->qn.p, L->qn.dtype, T * H, hd, eps));
			TRY(be->rmsnorm(be, m->k, m->k, L->kn.p, L->kn.dtype, T * Hkv, hd, eps));
		}
		TRY(be->rope(be, m->q, m->d_pos, m->inv_freq, T, H, hd));
		TRY(be->rope(be, m->k, m->d_pos, m->inv_freq, T, Hkv, hd));
		TRY(be->kv_store(be, kc, vc, m->k, m->v, m->d_slot, T, Hkv, hd));
	}
	TRY(be->attention(be, m->att, m->q, kc, vc, kb, T, H, Hkv, hd, window,
			  1.0f / sqrtf((float)hd)));
	if (m->fam->gated_attn)
		TRY(be->gate_apply(be, m->att, m->qg, T, H, hd));
	TRY(be->matmul(be, m->o, m->att, L->wo.p, L->bo.p, L->wo.dtype, T, D, H * hd));
	/* o is this rank's partial sum over its heads (bo on rank 0 only) */
	TRY(comm->all_reduce_sum(comm, m->o, T * D, be->act_dtype, be));
mlp:
	TRY(be->add_rmsnorm(be, m->x, m->o, m->h, L->ln2.p, L->ln2.dtype, T, D, eps));
	if (m->moe && m->moe[l].d.n_experts) {
		/* every rank holds all the experts (README-moe.md): rank 0
		 * computes the layer's MoE output, the others add zeros, so
		 * the sum is rank 0's bits for any world size */
		if (comm->rank == 0)
			TRY(be->moe(be, m->o, m->h, &m->moe[l].d, T, m->moe_scratch));
		else
			TRY(be->copy(be, m->o, m->moe_zero, (size_t)(T * D) * m->act));
		return comm->all_reduce_sum(comm, m->o, T * D, be->act_dtype, be);
	}
	if (be->matmul_swiglu && !L->bg.p && !L->bu.p && L->wg.dtype == L->wu.dtype) {
		TRY(be->matmul_swiglu(be, m->g, m->h, L->wg.p, L->wu.p, L->wg.dtype, T, F, D, m->u));
	} else {
		TRY(be->matmul(be, m->g, m->h, L->wg.p, L->bg.p, L->wg.dtype, T, F, D));
		TRY(be->matmul(be, m->u, m->h, L->wu.p, L->bu.p, L->wu.dtype, T, F, D));
		TRY(be->swiglu(be, m->g, m->g, m->u, T, F));
	}
	TRY(be->matmul(be, m->o, m->g, L->wd.p, L->bd.p, L->wd.dtype, T, D, F));
	/* likewise over this rank's MLP rows (bd on rank 0 only) */
	return comm->all_reduce_sum(comm, m->o, T * D, be->act_dtype, be);
}

/* Check a step and take the KV blocks it needs; on error nothing moves. */
static int prepare(struct atlas_model *m, const struct atlas_batch_item *it, int64_t n,
		   int64_t *T_out)
{
	const struct atlas_config *c = &m->cfg;
	int64_t T = 0;
	if (n <= 0 || n > m->max_seqs)
		return atlas_error(ATLAS_EINVAL, "a step takes 1..%lld sequences, not %lld",
				   (long long)m->max_seqs, (long long)n);
	int64_t need = 0;
	for (int64_t i = 0; i < n; i++) {
		if (it[i].n <= 0)
			return atlas_error(ATLAS_EINVAL, "no tokens to run");
		if (it[i].seq->len + it[i].n > m->max_ctx)
			return atlas_error(ATLAS_ERANGE,
					   "%lld tokens do not fit in the context (%lld of %lld used)",
					   (long long)it[i].n, (long long)it[i].seq->len,
					   (long long)m->max_ctx);
		for (int64_t j = 0; j < i; j++)
			if (it[j].seq == it[i].seq)
				return atlas_error(ATLAS_EINVAL, "a sequence appears twice in one step");
		if (it[i].n_logits < 0 || it[i].n_logits > it[i].n)
			return atlas_error(ATLAS_EINVAL, "%lld logits rows asked of an item of %lld tokens",
					   (long long)it[i].n_logits, (long long)it[i].n);
		if (m->mtp && it[i].hid && (it[i].hid_zeros < 0 || it[i].hid_zeros > it[i].n))
			return atlas_error(ATLAS_EINVAL, "%lld zero rows in an item of %lld tokens",
					   (long long)it[i].hid_zeros, (long long)it[i].n);
		for (int64_t t = 0; t < it[i].n; t++)
			if (it[i].ids[t] < 0 || it[i].ids[t] >= c->vocab_size)
				return atlas_error(ATLAS_ERANGE,
						   "token id %d is outside the vocabulary (0..%lld)",
						   it[i].ids[t], (long long)c->vocab_size - 1);
		T += it[i].n;
		need += atlas_seq_blocks_needed(it[i].seq, it[i].n);
	}
	if (T > m->max_tokens)
		return atlas_error(ATLAS_EINVAL, "a step takes at most %lld tokens, not %lld",
				   (long long)m->max_tokens, (long long)T);
	if (need > atlas_model_kv_blocks_free(m))
		return atlas_error(ATLAS_ENOMEM,
				   "out of KV cache blocks: %lld more needed, %lld of %lld free",
				   (long long)need, (long long)atlas_model_kv_blocks_free(m),
				   (long long)m->n_blocks);
	for (int64_t i = 0; i < n; i++)
		TRY(atlas_kvpool_reserve(it[i].seq, it[i].seq->len + it[i].n));
	*T_out = T;
	return 0;
}

/* The device work of a step from the embedding to the final norm: on
 * return m->h holds rmsnorm(x) of every row (a one-token step through the
 * fused layer stack when it may: see the top of the file). */
/* The fused stack runs a one-token step whose context is at most this
 * many keys. On the H100 (Qwen3-8B shape, batch 1, scripts/gpu-ctx-sweep.sh,
 * bench/h100-2026-12-05-kvq) fused against op by op took 6.12 / 6.40 ms
 * a step at 2,048 keys, 7.92 / 7.38 at 8,192, 10.24 / 8.38 at 16,384 and
 * 14.96 / 10.30 at 32,768 (the op path's attention splits a token's keys
 * over up to 64 blocks a kv head). */
#define ATLAS_FUSED_MAX_KEYS 4096

static bool use_fused(const struct atlas_model *m, int64_t T, const struct atlas_kv_batch *kb)
{
	return T == 1 && m->fused && !m->be->batch_invariant && kb->max_keys <= ATLAS_FUSED_MAX_KEYS;
}

static int body(struct atlas_model *m, int64_t T, const struct atlas_kv_batch *kb)
{
	struct atlas_backend *be = m->be;
	const struct atlas_config *c = &m->cfg;
	int64_t D = c->hidden_size;
	float eps = (float)c->rms_eps;
	TRY(be->embed(be, m->x, m->embed.p, m->embed.dtype, m->d_ids, T, D));
	if (m->mtp) {
		/* an MTP head: fc([rmsnorm_e(x), rmsnorm_h(hidden)]) as the sum
		 * of its two column halves' products, x + o (the add comes
		 * with layer 0's norm below); the hidden rows were gathered
		 * into mtp_hid by step() */
		TRY(be->rmsnorm(be, m->h, m->x, m->pre_e.p, m->pre_e.dtype, T, D, eps));
		TRY(be->rmsnorm(be, m->mtp_hid, m->mtp_hid, m->pre_h.p, m->pre_h.dtype, T, D, eps));
		TRY(be->matmul(be, m->x, m->h, m->fc_e.p, NULL, m->fc_e.dtype, T, D, D));
		TRY(be->matmul(be, m->o, m->mtp_hid, m->fc_h.p, NULL, m->fc_h.dtype, T, D, D));
	}
	if (use_fused(m, T, kb)) {
		TRY(be->fused_decode(be, m->fused));
		return be->add_rmsnorm(be, m->x, m->o, m->h, m->norm.p, m->norm.dtype, T, D, eps);
	}
	for (int64_t l = 0; l < c->num_layers; l++) {
		const struct layer *L = &m->layers[l];
		if (l == 0 && !m->mtp)
			TRY(be->rmsnorm(be, m->h, m->x, L->ln1.p, L->ln1.dtype, T, D, eps));
		else
			TRY(be->add_rmsnorm(be, m->x, m->o, m->h, L->ln1.p, L->ln1.dtype, T, D, eps));
		TRY(layer_forward(m, l, T, kb));
	}
	return be->add_rmsnorm(be, m->x, m->o, m->h, m->norm.p, m->norm.dtype, T, D, eps);
}

/* The step metadata staging (h_meta) may be page-locked (the backend's
 * host_alloc): a copy of it reads it when the copy runs, not when it is
 * queued. Before h_meta is rewritten, wait for the queue if an upload of
 * it may still be pending (m->meta_inflight: set by step(), cleared by
 * any wait). */
static int meta_writable(struct atlas_model *m)
{
	if (!m->meta_inflight)
		return 0;
	TRY(m->be->sync(m->be));
	m->meta_inflight = false;
	return 0;
}

/* Backend -> host copy; it waits for the queue, so h_meta is free too. */
static int download(struct atlas_model *m, void *dst, const void *src, size_t bytes)
{
	TRY(m->be->download(m->be, dst, src, bytes));
	m->meta_inflight = false;
	return 0;
}

/* Rows of logits an item asks for (n_logits, 0 meaning 1). */
static int64_t logits_rows(const struct atlas_batch_item *it)
{
	return it->n_logits > 1 ? it->n_logits : 1;
}

/* The draw: the sample hook (host work for it while the device runs the
 * step, then the masks it set), then rows [0, rows) of m->logits sampled
 * with m->h_args into m->h_out. Row k belongs to the k-th item that asks
 * for logits or a token when `every`, else to the k-th that asks for a
 * token. */
static int draw(struct atlas_model *m, const struct atlas_batch_item *it, int64_t n,
		int64_t rows, bool every)
{
	struct atlas_backend *be = m->be;
	if (!be->sample)
		return atlas_error(ATLAS_EUNSUPPORTED, "backend '%s' cannot sample", be->name);
	if (m->hook) {
		m->hook(m->hook_ud);
		for (int64_t i = 0, k = 0; i < n; i++)
			if (it[i].sample || (every && it[i].logits)) {
				if (it[i].sample)
					m->h_args[k].mask = it[i].sample->mask;
				k++;
			}
	}
	TRY(be->sample(be, m->d_out, m->logits, rows, m->cfg.vocab_size, m->h_args));
	return download(m, m->h_out, m->d_out, (size_t)rows * sizeof(int32_t));
}

/* A recorded decode step's outputs: row k of m->logits ([nsel, V]) is the
 * k-th item that wants logits or a token; draw the ids when some item
 * wants one, then hand out logits and ids. */
static int finish_decode(struct atlas_model *m, const struct atlas_batch_item *it, int64_t n,
			 int64_t nsel, int want_ids)
{
	int64_t V = m->cfg.vocab_size;
	if (want_ids)
		TRY(draw(m, it, n, nsel, true));
	for (int64_t i = 0, k = 0; i < n; i++) {
		if (!it[i].logits && !it[i].sample)
			continue;
		if (it[i].logits)
			TRY(download(m, it[i].logits, m->logits + k * V, (size_t)V * sizeof(float)));
		if (it[i].sample)
			*it[i].token = m->h_out[k];
		k++;
	}
	return 0;
}

/* An eager step's outputs: the first ns rows of m->logits are the items
 * that asked for a token, in order (drawn here), then the logits rows
 * (n_logits rows each, in order). */
static int finish(struct atlas_model *m, const struct atlas_batch_item *it, int64_t n,
		  int64_t ns)
{
	int64_t V = m->cfg.vocab_size;
	if (ns)
		TRY(draw(m, it, n, ns, false));
	for (int64_t i = 0, k = 0, row = ns; i < n; i++) {
		if (it[i].sample)
			*it[i].token = m->h_out[k++];
		if (it[i].logits) {
			int64_t r = logits_rows(&it[i]);
			TRY(download(m, it[i].logits, m->logits + row * V, (size_t)(r * V) * sizeof(float)));
			row += r;
		}
	}
	return 0;
}

/* The step op by op. all: logits of every row to `all` (one item only);
 * else each item's last row to its own logits pointer or sampled id. */
static int eager_step(struct atlas_model *m, const struct atlas_batch_item *it, int64_t n,
		      float *all, int64_t T, const struct atlas_kv_batch *kb)
{
	struct atlas_backend *be = m->be;
	const struct atlas_config *c = &m->cfg;
	int64_t D = c->hidden_size, V = c->vocab_size;
	TRY(body(m, T, kb));
	/* the final-normed rows of each item that asked for them (an
	 * embedding model's pooling input), as FP32 on the host */
	for (int64_t i = 0, row = 0; i < n; row += it[i].n, i++)
		if (it[i].hidden)
			TRY(be->to_f32(be, it[i].hidden, (const char *)m->h + (size_t)(row * D) * m->act,
				       it[i].n * D));
	if (all) {
		TRY(be->logits(be, m->logits, m->h, m->lm_head.p, m->lm_head.dtype, T, V, D));
		return download(m, all, m->logits, (size_t)(T * V) * sizeof(float));
	}
	/* gather the rows the step's outputs read: the last row of each item
	 * that asks for a token (the draw takes rows [0, ns)), then the
	 * n_logits last rows of each that asks for logits; into m->sel, or
	 * m->o (max_tokens rows, free once body() has run) when a speculative
	 * step's rows outnumber m->sel's max_seqs */
	int64_t ns = 0, nl = 0;
	for (int64_t i = 0; i < n; i++) {
		ns += it[i].sample != NULL;
		nl += it[i].logits ? logits_rows(&it[i]) : 0;
	}
	if (!ns && !nl)
		return 0;
	size_t rb = (size_t)D * m->act;
	void *sel = ns + nl <= m->max_seqs ? m->sel : m->o;
	int64_t k = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int64_t i = 0, end = 0; i < n; i++) {
			end += it[i].n;
			if (pass == 0 && it[i].sample) {
				m->h_args[k] = *it[i].sample;
				TRY(be->copy(be, (char *)sel + (size_t)k++ * rb,
					     (const char *)m->h + (size_t)(end - 1) * rb, rb));
			} else if (pass == 1 && it[i].logits) {
				int64_t r = logits_rows(&it[i]);
				TRY(be->copy(be, (char *)sel + (size_t)k * rb,
					     (const char *)m->h + (size_t)(end - r) * rb, (size_t)r * rb));
				k += r;
			}
		}
	TRY(be->logits(be, m->logits, sel, m->lm_head.p, m->lm_head.dtype, ns + nl, V, D));
	return finish(m, it, n, ns);
}

/* body() over a decode step's n rows (one token each) from a recording
 * made once per n, with the logits of all n rows when `logits` (rank 0);
 * the token metadata is already in the same buffers and every kernel
 * argument depends only on n, so the result is the eager step's, bit for
 * bit. 1 when it ran, 0 when the caller should run it eagerly, or a
 * negative error. */
static int replay_body(struct atlas_model *m, int64_t n, const struct atlas_kv_batch *kb,
		       bool logits)
{
	struct atlas_backend *be = m->be;
	const struct atlas_config *c = &m->cfg;
	/* an MoE layer's launches depend only on n too (the CUDA moe op
	 * sizes its grids for the worst routing), so MoE steps are recorded
	 * as well */
	/* (a hybrid model's deltanet reads its items from m->d_gdn, which
	 * step() uploads before the replay, so its steps record too) */
	if (m->no_graphs || !be->capture_begin || !be->replay)
		return 0;
	if (!m->graphs && !(m->graphs = calloc((size_t)m->max_seqs + 1, sizeof(void *))))
		return 0;
	/* a one-token step past the fused stack's context limit records
	 * the op path in slot 0 (n >= 1 leaves it free) */
	const int64_t gi = n == 1 && m->fused && !use_fused(m, n, kb) ? 0 : n;
	if (!m->graphs[gi]) {
		TRY(be->capture_begin(be));
		int rc = body(m, n, kb);
		if (!rc && logits)
			rc = be->logits(be, m->logits, m->h, m->lm_head.p, m->lm_head.dtype, n,
					c->vocab_size, c->hidden_size);
		void *gr = be->capture_end(be);
		if (rc || !gr) {
			/* not capturable here: run op by op from now on */
			atlas_debug("decode graphs off: %s", atlas_errmsg());
			if (gr)
				be->graph_free(be, gr);
			m->no_graphs = true;
			return 0;
		}
		m->graphs[gi] = gr;
	}
	TRY(be->replay(be, m->graphs[gi]));
	return 1;
}

/* A decode step (one token per item, every item wanting one row of
 * logits or a token) through replay_body; the rows of m->h are the rows the eager
 * path would gather. Returns 1 when the step ran, 0 when the caller
 * should run it eagerly, or a negative error. */
static int graph_step(struct atlas_model *m, const struct atlas_batch_item *it, int64_t n,
		      const struct atlas_kv_batch *kb)
{
	int want_ids = 0;
	if (m->no_graphs || !m->be->capture_begin || !m->be->replay)
		return 0;
	for (int64_t i = 0; i < n; i++) {
		/* the recording gathers no hidden rows: those steps run eagerly */
		if (it[i].n != 1 || (!it[i].logits && !it[i].sample) || it[i].hidden)
			return 0;
		m->h_args[i] = it[i].sample ? *it[i].sample : (struct atlas_sample_args){0};
		want_ids |= it[i].sample != NULL;
	}
	int g = replay_body(m, n, kb, true);
	if (g <= 0)
		return g;
	TRY(finish_decode(m, it, n, n, want_ids));
	return 1;
}

/* --- tensor-parallel step sharing ----------------------------------------- */

enum { STEP_RUN = 1, STEP_STOP = 2 };

/* Rank 0's metadata of a step of n items and T tokens, already in the
 * backend buffers there, to every rank's same buffers: ids, pos, seq and
 * slot in one broadcast (they lie end to end, slot's first T entries
 * last), the n block-table rows in another. No-ops with one rank. */
static int share_meta(struct atlas_model *m, int64_t T, int64_t n)
{
	struct atlas_comm *c = m->comm;
	size_t toks = (size_t)(3 * m->meta_stride + T) * sizeof(int32_t);
	TRY(c->broadcast(c, m->d_ids, toks, 0, m->be));
	return c->broadcast(c, m->d_tables, (size_t)(n * m->max_blocks) * sizeof(int32_t), 0,
			    m->be);
}

/* Fill the step header (op, n, T, max_keys, then the shapes every rank
 * must share) in host memory. */
static void fill_header(struct atlas_model *m, int op, int64_t n, int64_t T, int64_t max_keys)
{
	int32_t *h = m->h_hdr;
	memset(h, 0, ATLAS_STEP_HDR * sizeof(int32_t));
	h[0] = op;
	h[1] = (int32_t)n;
	h[2] = (int32_t)T;
	h[3] = (int32_t)max_keys;
	h[4] = (int32_t)m->max_tokens;
	h[5] = (int32_t)m->max_blocks;
	h[6] = (int32_t)m->n_blocks;
	h[7] = (int32_t)m->block_size;
}

int atlas_model_stop_followers(struct atlas_model *m)
{
	struct atlas_comm *c = m->comm;
	if (c->rank != 0)
		return atlas_error(ATLAS_EINVAL, "only rank 0 stops the followers (this is rank %d)",
				   c->rank);
	TRY(meta_writable(m));
	fill_header(m, STEP_STOP, 0, 0, 0);
	TRY(m->be->upload(m->be, m->d_hdr, m->h_hdr, ATLAS_STEP_HDR * sizeof(int32_t)));
	return c->broadcast(c, m->d_hdr, ATLAS_STEP_HDR * sizeof(int32_t), 0, m->be);
}

int atlas_model_follow(struct atlas_model *m)
{
	struct atlas_comm *c = m->comm;
	struct atlas_backend *be = m->be;
	const int32_t *h = m->h_hdr;
	if (c->rank == 0)
		return atlas_error(ATLAS_EINVAL,
				   "rank 0 drives the model; ranks 1..%d follow it", c->world - 1);
	for (;;) {
		TRY(c->broadcast(c, m->d_hdr, ATLAS_STEP_HDR * sizeof(int32_t), 0, be));
		TRY(download(m, m->h_hdr, m->d_hdr, ATLAS_STEP_HDR * sizeof(int32_t)));
		if (h[0] == STEP_STOP)
			return 0;
		int64_t n = h[1], T = h[2];
		if (h[0] != STEP_RUN || h[4] != m->max_tokens || h[5] != m->max_blocks ||
		    h[6] != m->n_blocks || h[7] != m->block_size || n < 1 || n > m->max_seqs ||
		    T < n || T > m->max_tokens)
			return atlas_error(ATLAS_EINVAL,
					   "rank %d: rank 0 sent a step (op %d, %lld items, %lld tokens, "
					   "max_tokens %d, %d blocks of %d) that this rank's model "
					   "(max_tokens %lld, %lld blocks of %lld) cannot run: load every "
					   "rank with the same parameters",
					   c->rank, h[0], (long long)n, (long long)T, h[4], h[6], h[7],
					   (long long)m->max_tokens, (long long)m->n_blocks,
					   (long long)m->block_size);
		TRY(share_meta(m, T, n));
		struct atlas_kv_batch kb = {
			.seq_of = m->d_seq, .pos = m->d_pos, .block_tables = m->d_tables,
			.n_seq = n, .max_blocks = m->max_blocks, .block_size = m->block_size,
			.max_keys = h[3],
		};
		/* decode steps replay a recording of the body, as on rank 0 */
		int g = T == n ? replay_body(m, n, &kb, false) : 0;
		if (g < 0)
			return g;
		if (g == 0)
			TRY(body(m, T, &kb));
	}
}

void atlas_forward_fused_setup(struct atlas_model *m)
{
	struct atlas_backend *be = m->be;
	const struct atlas_config *c = &m->cfg;
	const int64_t nl = c->num_layers;
	/* the fused stack reads a BF16 cache (a quantized one runs op by
	 * op); an MoE layer goes as its moe op's description, which the
	 * backend may refuse */
	if (!be->fused_prepare || m->comm->world != 1 || be->act_dtype != ATLAS_DTYPE_BF16 ||
	    nl < 1 || m->kv_dt != ATLAS_KV_AUTO || m->lin || m->fam->gated_attn ||
	    (c->rotary_dim && c->rotary_dim != c->head_dim))
		return;
	const struct layer *L0 = &m->layers[0];
	const enum atlas_dtype wdt = L0->wq.dtype, nwdt = L0->ln1.dtype;
	struct atlas_fused_layer *fl = calloc((size_t)nl, sizeof(*fl));
	if (!fl)
		return;
	for (int64_t l = 0; l < nl; l++) {
		const struct layer *L = &m->layers[l];
		const struct atlas_moe_desc *moe = m->moe && m->moe[l].d.n_experts ? &m->moe[l].d : NULL;
		const struct weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd};
		const struct weight *b[] = {&L->bq, &L->bk, &L->bv};
		for (size_t i = 0; i < (moe ? 4 : sizeof(w) / sizeof(w[0])); i++)
			if (w[i]->dtype != wdt)
				goto out;
		if (moe && moe->wdt != wdt)
			goto out;
		/* biases are in the weights' dtype, BF16 beside F8B, W4B and FP4B */
		const bool blob = wdt == ATLAS_DTYPE_F8B || wdt == ATLAS_DTYPE_W4B || wdt == ATLAS_DTYPE_FP4B;
		const enum atlas_dtype bdt = blob ? ATLAS_DTYPE_BF16 : wdt;
		for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
			if (b[i]->p && b[i]->dtype != bdt)
				goto out;
		/* o and MLP biases are not in the fused op */
		if (L->bo.p || L->bg.p || L->bu.p || L->bd.p || L->ln2.dtype != nwdt ||
		    L->ln1.dtype != nwdt || (m->fam->qk_norm && (L->qn.dtype != nwdt || L->kn.dtype != nwdt)))
			goto out;
		fl[l] = (struct atlas_fused_layer){
		    .wq = L->wq.p, .wk = L->wk.p, .wv = L->wv.p,
		    .bq = L->bq.p, .bk = L->bk.p, .bv = L->bv.p,
		    .wo = L->wo.p,
		    .wg = moe ? NULL : L->wg.p, .wu = moe ? NULL : L->wu.p, .wd = moe ? NULL : L->wd.p,
		    .ln1 = L->ln1.p, .ln2 = L->ln2.p,
		    .qn = m->fam->qk_norm ? L->qn.p : NULL, .kn = m->fam->qk_norm ? L->kn.p : NULL,
		    .kc = kv_pool(m, 0, l), .vc = kv_pool(m, 1, l), .moe = moe,
		};
	}
	struct atlas_fused_desc d = {
	    .n_layers = nl, .D = c->hidden_size, .F = m->F_loc, .H = m->H_loc, .Hkv = m->Hkv_loc,
	    .hd = c->head_dim, .window = m->fam->use_window ? c->sliding_window : 0,
	    .wdt = wdt, .nwdt = nwdt, .eps = (float)c->rms_eps,
	    .scale = 1.0f / sqrtf((float)c->head_dim), .layers = fl,
	    .x = m->x, .o = m->o, .q = m->q, .k = m->k, .v = m->v, .att = m->att, .g = m->g,
	    .g_cap = m->max_tokens * m->F_loc,
	    .pos = m->d_pos, .seq_of = m->d_seq, .slot = m->d_slot, .block_tables = m->d_tables,
	    .max_blocks = m->max_blocks, .block_size = m->block_size, .inv_freq = m->inv_freq,
	};
	m->fused = be->fused_prepare(be, &d);
out:
	free(fl);
}

void atlas_forward_release(struct atlas_model *m)
{
	if (m->fused)
		m->be->fused_release(m->be, m->fused);
	m->fused = NULL;
	if (m->graphs)
		for (int64_t i = 0; i <= m->max_seqs; i++)
			if (m->graphs[i])
				m->be->graph_free(m->be, m->graphs[i]);
	free(m->graphs);
	m->graphs = NULL;
}

void atlas_model_set_sample_hook(struct atlas_model *m, atlas_sample_hook fn, void *ud)
{
	m->hook = fn;
	m->hook_ud = ud;
}

void atlas_model_set_graphs(struct atlas_model *m, bool on)
{
	m->no_graphs = !on;
}

/* An MTP head's step: each item's hidden rows (zeros, then its hid
 * rows) end to end into m->mtp_hid, before body() overwrites m->h, which
 * a drafting pass's hid may point into. */
static int mtp_gather(struct atlas_model *m, const struct atlas_batch_item *it, int64_t n)
{
	struct atlas_backend *be = m->be;
	const size_t rb = (size_t)m->cfg.hidden_size * m->act;
	char *dst = m->mtp_hid;
	for (int64_t i = 0; i < n; i++) {
		/* (prepare() checked hid_zeros) */
		const int64_t z = it[i].hid ? it[i].hid_zeros : it[i].n;
		if (z)
			TRY(be->copy(be, dst, m->mtp_zero, (size_t)z * rb));
		if (it[i].n > z)
			TRY(be->copy(be, dst + (size_t)z * rb, it[i].hid, (size_t)(it[i].n - z) * rb));
		dst += (size_t)it[i].n * rb;
	}
	return 0;
}

const void *atlas_model_hidden_rows(const struct atlas_model *m, size_t *row_bytes)
{
	if (row_bytes)
		*row_bytes = (size_t)m->cfg.hidden_size * m->act;
	return m->h;
}

/* The step itself. all_logits: logits of every row to `all` (one item
 * only); else each item's last row to its own logits pointer. */
static int step(struct atlas_model *m, const struct atlas_batch_item *it, int64_t n,
		float *all)
{
	struct atlas_backend *be = m->be;
	int64_t T = 0;
	if (m->comm->rank != 0)
		return atlas_error(ATLAS_EINVAL, "rank %d runs the steps rank 0 sends it "
				   "(atlas_model_follow), not its own", m->comm->rank);
	/* an embedding model has no output head to give logits with */
	for (int64_t i = 0; !m->lm_head.p && i < n; i++)
		if (all || it[i].logits || it[i].sample)
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "an embedding model has no output head: it cannot give "
					   "logits or generate");
	TRY(prepare(m, it, n, &T));
	/* hybrid sequences keep what a later cut back into this step needs */
	for (int64_t i = 0; m->state_floats && i < n; i++)
		TRY(atlas_seq_note_step(it[i].seq, it[i].ids, it[i].n));

	/* token metadata: ids, positions, owning sequence, cache slot (once
	 * the last step's copy of them has run) */
	TRY(meta_writable(m));
	int64_t row = 0, max_keys = 0, B = m->block_size;
	for (int64_t i = 0; i < n; i++) {
		const struct atlas_seq *s = it[i].seq;
		for (int64_t t = 0; t < it[i].n; t++, row++) {
			int64_t p = s->len + t;
			m->h_ids[row] = it[i].ids[t];
			m->h_pos[row] = (int32_t)p;
			m->h_seq[row] = (int32_t)i;
			m->h_slot[row] = (int32_t)(s->blocks[p / B] * B + p % B);
		}
		memcpy(m->h_tables + i * m->max_blocks, s->blocks,
		       (size_t)s->n_blocks * sizeof(int32_t));
		if (m->h_gdn) {
			/* each item's recurrent state, zero before its first
			 * token, and a snapshot at a block boundary it reaches */
			const int64_t at = atlas_prefix_snap_at(it[i].seq, it[i].n);
			m->h_gdn[i] = (struct atlas_gdn_item){
			    .row0 = row - it[i].n, .n = it[i].n, .state = s->state,
			    .snap = at ? it[i].seq->pend : NULL, .snap_at = at, .fresh = s->len == 0};
		}
		if (s->len + it[i].n > max_keys)
			max_keys = s->len + it[i].n;
	}
	m->gdn_n = n;
	if (m->h_gdn)
		TRY(be->upload(be, m->d_gdn, m->h_gdn, (size_t)n * sizeof(*m->h_gdn)));
	size_t tb = (size_t)T * sizeof(int32_t);
	fill_header(m, STEP_RUN, n, T, max_keys);
	/* the block from the header to the last table row used: one copy
	 * when it is small (a decode step: the gaps after ids, pos, seq and
	 * slot cost less than four more copies, ~2 us each on the GPU's
	 * queue), else the used parts one by one (the header and the ids lie
	 * end to end) */
	const size_t span =
	    (size_t)(ATLAS_STEP_HDR + 4 * m->meta_stride + n * m->max_blocks) * sizeof(int32_t);
	if (span <= ATLAS_META_ONE_COPY) {
		TRY(be->upload(be, m->d_hdr, m->h_hdr, span));
	} else {
		TRY(be->upload(be, m->d_hdr, m->h_hdr, ATLAS_STEP_HDR * sizeof(int32_t) + tb));
		TRY(be->upload(be, m->d_pos, m->h_pos, tb));
		TRY(be->upload(be, m->d_seq, m->h_seq, tb));
		TRY(be->upload(be, m->d_slot, m->h_slot, tb));
		TRY(be->upload(be, m->d_tables, m->h_tables,
			       (size_t)(n * m->max_blocks) * sizeof(int32_t)));
	}
	m->meta_inflight = true;
	/* the other ranks run this step too (no-ops with one rank) */
	TRY(m->comm->broadcast(m->comm, m->d_hdr, ATLAS_STEP_HDR * sizeof(int32_t), 0, be));
	TRY(share_meta(m, T, n));
	struct atlas_kv_batch kb = {
		.seq_of = m->d_seq, .pos = m->d_pos, .block_tables = m->d_tables,
		.n_seq = n, .max_blocks = m->max_blocks, .block_size = B, .max_keys = max_keys,
	};

	if (m->mtp)
		TRY(mtp_gather(m, it, n));
	int g = all ? 0 : graph_step(m, it, n, &kb);
	if (g < 0)
		return g;
	if (g == 0)
		TRY(eager_step(m, it, n, all, T, &kb));
	for (int64_t i = 0; i < n; i++)
		it[i].seq->len += it[i].n;
	return 0;
}

int atlas_model_forward_batch(struct atlas_model *m, const struct atlas_batch_item *items,
			      int64_t n)
{
	return step(m, items, n, NULL);
}

static int run(struct atlas_model *m, struct atlas_seq *s, const int32_t *ids, int64_t T,
	       float *logits, bool all_logits, const struct atlas_sample_args *args,
	       int32_t *token)
{
	const struct atlas_config *c = &m->cfg;
	if (T <= 0)
		return atlas_error(ATLAS_EINVAL, "no tokens to run");
	if (s->len + T > m->max_ctx)
		return atlas_error(ATLAS_ERANGE,
				   "%lld tokens do not fit in the context (%lld of %lld used)",
				   (long long)T, (long long)s->len, (long long)m->max_ctx);
	for (int64_t t = 0; t < T; t++)
		if (ids[t] < 0 || ids[t] >= c->vocab_size)
			return atlas_error(ATLAS_ERANGE,
					   "token id %d is outside the vocabulary (0..%lld)", ids[t],
					   (long long)c->vocab_size - 1);
	int64_t start = s->len, held = s->n_blocks;
	if (atlas_seq_blocks_needed(s, T) > atlas_model_kv_blocks_free(m))
		return atlas_error(ATLAS_ENOMEM,
				   "out of KV cache blocks: %lld more needed, %lld of %lld free",
				   (long long)atlas_seq_blocks_needed(s, T),
				   (long long)atlas_model_kv_blocks_free(m), (long long)m->n_blocks);
	for (int64_t done = 0; done < T; done += m->max_tokens) {
		int64_t k = T - done < m->max_tokens ? T - done : m->max_tokens;
		bool last = done + k == T;
		struct atlas_batch_item it = {
			.seq = s, .ids = ids + done, .n = k,
			.logits = !all_logits && last ? logits : NULL,
			.sample = last ? args : NULL,
			.token = token,
		};
		int rc = step(m, &it, 1, all_logits ? logits + done * c->vocab_size : NULL);
		if (rc) {
			/* nothing appended on failure: drop the blocks this call
			 * added (a block a copy on write replaced stays: it holds
			 * the rows before start) */
			s->len = start;
			atlas_kvpool_shrink(s, held);
			return rc;
		}
	}
	return 0;
}

int atlas_model_forward(struct atlas_model *m, struct atlas_seq *s, const int32_t *ids,
			int64_t T, float *logits, bool all_logits)
{
	return run(m, s, ids, T, logits, all_logits, NULL, NULL);
}

int atlas_model_forward_sample(struct atlas_model *m, struct atlas_seq *s,
			       const int32_t *ids, int64_t T,
			       const struct atlas_sample_args *args, int32_t *token)
{
	if (!m->be->sample)
		return atlas_error(ATLAS_EUNSUPPORTED, "backend '%s' cannot sample", m->be->name);
	return run(m, s, ids, T, NULL, false, args, token);
}

bool atlas_model_can_sample(const struct atlas_model *m)
{
	return m->be->sample != NULL;
}
