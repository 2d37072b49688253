/* cuda_hybrid.c - the CUDA backend's ops of hybrid linear-attention models
 * (kernels/sm90/common/hybrid.cu; contracts in backend.h): partial rotary
 * embedding, gated attention's query split and output gate, and the
 * Gated DeltaNet in its recurrent form, each sequence from its own state
 * (batch-invariant by construction). The deltanet's items and its FP32
 * scratch [T, C] are the model's, in device memory, so the launches of a
 * decode step can be recorded in a graph. */
#include "../../core/error.h"
#include "cuda_internal.h"

#define GDN_MAX_K 8 /* hybrid.cu's */

_Static_assert(sizeof(struct atlas_gdn_item) == 48, "hybrid.cu's struct gdn_item");

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
		       int64_t n_items, int64_t off, float *scratch)
{
	struct cuda_ctx *c = be->ctx;
	const long long Hk = d->Hk, Hv = d->Hv, dk = d->dk, dv = d->dv, K = d->K, o = off;
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
	if (n_items <= 0 || n_items > 65535) /* (the launches' grid y) */
		return atlas_error(ATLAS_EINVAL, "cuda deltanet: %lld items (1..65535)",
				   (long long)n_items);
	const float eps = d->eps;
	const unsigned block = (unsigned)(((dv > dk ? dv : dk) + 31) / 32 * 32);
	void *cargs[] = {&qkvz, &scratch, &items, (void *)&o, (void *)&d->conv_w, (void *)&C,
			 (void *)&W, (void *)&K};
	int rc = atlas_cuda_launch(c, ATLAS_CK_GDN_CONV, (unsigned)((C + 127) / 128),
				   (unsigned)n_items, 128, 0, cargs);
	if (rc)
		return rc;
	void *rargs[] = {&scratch, &qkvz, &ba, &out, &items, (void *)&o, (void *)&d->A_log,
			 (void *)&d->dt_bias, (void *)&d->norm_w, (void *)&Hk, (void *)&Hv,
			 (void *)&dv, (void *)&C, (void *)&W, (void *)&K, (void *)&eps};
	return atlas_cuda_launch(c, rule, (unsigned)Hv, (unsigned)n_items, block, 0, rargs);
}

void atlas_cuda_hybrid_init(struct atlas_backend *be)
{
	be->rope_partial = op_rope_partial;
	be->gate_split = op_gate_split;
	be->gate_apply = op_gate_apply;
	be->deltanet = op_deltanet;
}
