/* cuda_hybrid.c - the CUDA backend's ops of hybrid linear-attention models
 * (kernels/sm90/common/hybrid.cu; contracts in backend.h): partial rotary
 * embedding, gated attention's query split and output gate, and the
 * Gated DeltaNet in its recurrent form, each sequence from its own state
 * (batch-invariant by construction). The deltanet's items travel by
 * value in the launch's parameters (GDN_MAX_ITEMS a launch), so a layer
 * needs no copy to the device; the conv output goes through an FP32
 * scratch [T, C] the backend keeps. */
#include <string.h>

#include "../../core/error.h"
#include "cuda_internal.h"

/* hybrid.cu's struct gdn_item and struct gdn_batch, byte for byte */
struct gdn_item {
	long long row0, n;
	float *state, *snap;
	long long snap_at, fresh;
};
#define GDN_MAX_ITEMS 64
#define GDN_MAX_K 8
struct gdn_batch {
	struct gdn_item v[GDN_MAX_ITEMS];
};

static int op_rope_partial(struct atlas_backend *be, void *x, const int32_t *pos,
			   const float *inv_freq, int64_t T, int64_t H, int64_t hd, int64_t rd)
{
	long long t = T, h = H, d = hd, r = rd;
	void *args[] = {&x, &pos, &inv_freq, &t, &h, &d, &r};
	if (rd % 2 || rd < 2 || rd > hd || hd > 1024)
		return atlas_error(ATLAS_EINVAL, "cuda rope_partial: %lld of %lld dims is not supported",
				   (long long)rd, (long long)hd);
	return atlas_cuda_launch(be->ctx, ATLAS_CK_ROPE_PARTIAL, (unsigned)(T * H), 1,
				 (unsigned)(rd / 2), 0, args);
}

static int gate(struct atlas_backend *be, void *y, const void *qg, int64_t T, int64_t H,
		int64_t hd, int apply)
{
	long long t = T, h = H, d = hd;
	void *args[] = {&y, &qg, &t, &h, &d, &apply};
	const long long n = T * H * hd;
	unsigned grid = (unsigned)(n / 256 + 1 < 65536 ? n / 256 + 1 : 65535);
	return atlas_cuda_launch(be->ctx, ATLAS_CK_ATTN_GATE, grid, 1, 256, 0, args);
}

static int op_gate_split(struct atlas_backend *be, void *q, const void *qg, int64_t T, int64_t H,
			 int64_t hd)
{
	return gate(be, q, qg, T, H, hd, 0);
}

static int op_gate_apply(struct atlas_backend *be, void *att, const void *qg, int64_t T,
			 int64_t H, int64_t hd)
{
	return gate(be, att, qg, T, H, hd, 1);
}

static int op_deltanet(struct atlas_backend *be, void *out, const void *qkvz, const void *ba,
		       const struct atlas_gdn_desc *d, const struct atlas_gdn_item *items,
		       int64_t n_items)
{
	struct cuda_ctx *c = be->ctx;
	const long long Hk = d->Hk, Hv = d->Hv, dk = d->dk, dv = d->dv, K = d->K;
	const long long C = 2 * Hk * dk + Hv * dv, W = C + Hv * dv;
	enum atlas_cuda_kernel rule = dk == 16 ? ATLAS_CK_GDN_RULE16
				      : dk == 32 ? ATLAS_CK_GDN_RULE32
				      : dk == 64 ? ATLAS_CK_GDN_RULE64
				      : dk == 128 ? ATLAS_CK_GDN_RULE128
						  : ATLAS_CK_COUNT;
	if (rule == ATLAS_CK_COUNT || Hk <= 0 || Hv % Hk || dv <= 0 || dv > 1024 || K < 2 ||
	    K > GDN_MAX_K)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "cuda deltanet: key heads of %lld dims (16, 32, 64 or 128), value "
				   "heads of %lld (at most 1024) and a conv of width %lld (2..%d) are "
				   "what it takes", dk, dv, K, GDN_MAX_K);
	int64_t T = 0;
	for (int64_t i = 0; i < n_items; i++)
		T += items[i].n;
	int rc = atlas_cuda_scratch(be, (void **)&c->gdn_conv, &c->gdn_conv_cap,
				    (size_t)(T * C) * sizeof(float));
	if (rc)
		return rc;
	const float eps = d->eps;
	const unsigned block = (unsigned)(((dv > dk ? dv : dk) + 31) / 32 * 32);
	const long long S0 = C * (K - 1); /* the layer's S after its conv window */
	for (int64_t i0 = 0, row0 = 0; i0 < n_items; i0 += GDN_MAX_ITEMS) {
		const int64_t m = n_items - i0 < GDN_MAX_ITEMS ? n_items - i0 : GDN_MAX_ITEMS;
		struct gdn_batch cb, rb;
		memset(&cb, 0, sizeof(cb));
		memset(&rb, 0, sizeof(rb));
		for (int64_t i = 0; i < m; i++) {
			const struct atlas_gdn_item *it = &items[i0 + i];
			cb.v[i] = (struct gdn_item){row0, it->n, it->state, it->snap_at ? it->snap : NULL,
						    it->snap_at, it->fresh};
			rb.v[i] = cb.v[i];
			rb.v[i].state = it->state + S0;
			rb.v[i].snap = it->snap_at ? it->snap + S0 : NULL;
			row0 += it->n;
		}
		float *conv = c->gdn_conv;
		void *cargs[] = {&qkvz, &conv, &cb, (void *)&d->conv_w, (void *)&C, (void *)&W,
				 (void *)&K};
		if ((rc = atlas_cuda_launch(c, ATLAS_CK_GDN_CONV, (unsigned)((C + 127) / 128),
					    (unsigned)m, 128, 0, cargs)))
			return rc;
		void *rargs[] = {&conv, &qkvz, &ba, &out, &rb, (void *)&d->A_log,
				 (void *)&d->dt_bias, (void *)&d->norm_w, (void *)&Hk, (void *)&Hv,
				 (void *)&dv, (void *)&C, (void *)&W, (void *)&eps};
		if ((rc = atlas_cuda_launch(c, rule, (unsigned)Hv, (unsigned)m, block, 0, rargs)))
			return rc;
	}
	return 0;
}

void atlas_cuda_hybrid_init(struct atlas_backend *be)
{
	be->rope_partial = op_rope_partial;
	be->gate_split = op_gate_split;
	be->gate_apply = op_gate_apply;
	be->deltanet = op_deltanet;
}
