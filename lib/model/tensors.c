/* tensors.c - enumerate the tensors of a decoder (see tensors.h).
 * Mixture-of-experts layers are listed in the Hub's per-expert layout;
 * the validator also accepts the other layouts moe.c binds (the fused
 * 3-D experts, the family's other block name).
 * Keep in step with bind_layer() and atlas_model_load() in decoder.c:
 * tests/unit/test-tensors.c loads every golden model and checks that
 * this list and the loader agree. */
#include "tensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../io/quant.h"
#include "../io/safetensors.h"

/* Emit one tensor; d1 < 0 makes it 1-D. */
static int emit(atlas_expected_tensor_fn fn, void *arg, const char *name, int64_t d0,
		int64_t d1, bool required, const char *weight_of)
{
	struct atlas_expected_tensor t = {
		.name = name, .ndim = d1 < 0 ? 1 : 2, .shape = {d0, d1 < 0 ? 0 : d1},
		.required = required, .weight_of = weight_of,
	};
	return fn(arg, &t);
}

/* The tensors of a linear-attention (Gated DeltaNet) layer, in the
 * family's layout (hybrid.c binds them). */
static int linear_attn(const struct atlas_config *c, const struct atlas_family *fam,
		       const char *pre, int64_t l, atlas_expected_tensor_fn fn, void *arg)
{
	const int64_t D = c->hidden_size, Hk = c->lin_k_heads, Hv = c->lin_v_heads;
	const int64_t Z = Hv * c->lin_v_dim, C = 2 * Hk * c->lin_k_dim + Z;
	char n[160];
	int rc = 0;
#define L(suffix, d0, d1) \
	do { \
		snprintf(n, sizeof(n), "%slayers.%lld.linear_attn.%s", pre, (long long)l, suffix); \
		if (!rc) rc = emit(fn, arg, n, d0, d1, true, NULL); \
	} while (0)
	if (fam->hybrid && fam->hybrid->grouped) {
		L("in_proj_qkvz.weight", C + Z, D);
		L("in_proj_ba.weight", 2 * Hv, D);
	} else {
		L("in_proj_qkv.weight", C, D);
		L("in_proj_z.weight", Z, D);
		L("in_proj_b.weight", Hv, D);
		L("in_proj_a.weight", Hv, D);
	}
	L("out_proj.weight", D, Z);
	L("A_log", Hv, -1);
	L("dt_bias", Hv, -1);
	L("norm.weight", c->lin_v_dim, -1);
#undef L
	snprintf(n, sizeof(n), "%slayers.%lld.linear_attn.conv1d.weight", pre, (long long)l);
	struct atlas_expected_tensor t = {.name = n, .ndim = 3, .shape = {C, 1, c->lin_conv},
					  .required = true};
	return rc ? rc : fn(arg, &t);
}

static int layer(const struct atlas_config *c, const struct atlas_family *fam, const char *pre,
		 int64_t l, atlas_expected_tensor_fn fn, void *arg)
{
	int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
	int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
	bool qkv_bias = fam->qkv_bias || c->attention_bias, o_bias = c->attention_bias;
	char n[160], w[160];
	int rc = 0;
	/* X: a tensor; XB: a bias of the matrix `mat` */
#define X(suffix, d0, d1, req) \
	do { \
		snprintf(n, sizeof(n), "%slayers.%lld.%s", pre, (long long)l, suffix); \
		if (!rc) rc = emit(fn, arg, n, d0, d1, req, NULL); \
	} while (0)
#define XB(mat, d0, req) \
	do { \
		snprintf(n, sizeof(n), "%slayers.%lld.%s.bias", pre, (long long)l, mat); \
		snprintf(w, sizeof(w), "%slayers.%lld.%s.weight", pre, (long long)l, mat); \
		if (!rc) rc = emit(fn, arg, n, d0, -1, req, w); \
	} while (0)
	X("input_layernorm.weight", D, -1, true);
	X("post_attention_layernorm.weight", D, -1, true);
	if (atlas_config_layer_is_linear(c, l)) {
		rc = linear_attn(c, fam, pre, l, fn, arg);
		goto mlp;
	}
	/* gated attention: a query and a gate per head */
	X("self_attn.q_proj.weight", fam->gated_attn ? 2 * qd : qd, D, true);
	X("self_attn.k_proj.weight", kvd, D, true);
	X("self_attn.v_proj.weight", kvd, D, true);
	X("self_attn.o_proj.weight", D, qd, true);
	XB("self_attn.q_proj", qd, qkv_bias);
	XB("self_attn.k_proj", kvd, qkv_bias);
	XB("self_attn.v_proj", kvd, qkv_bias);
	XB("self_attn.o_proj", D, o_bias);
	if (fam->qk_norm) {
		X("self_attn.q_norm.weight", hd, -1, true);
		X("self_attn.k_norm.weight", hd, -1, true);
	}
mlp:
	if (fam->moe && atlas_config_layer_is_moe(c, l)) {
		const struct atlas_moe_family *f = fam->moe;
		const int64_t E = c->num_experts, Fe = c->moe_intermediate_size;
		const int64_t Fs = f->shared_expert ? c->shared_expert_intermediate_size : 0;
		char s[128];
#define XM(rest, d0, d1) \
	do { \
		snprintf(s, sizeof(s), "%s.%s", f->block, rest); \
		X(s, d0, d1, true); \
	} while (0)
		XM("gate.weight", E, D);
		for (int64_t e = 0; e < E && !rc; e++) {
			char r[96];
			snprintf(r, sizeof(r), "experts.%lld.%s.weight", (long long)e, f->gate);
			XM(r, Fe, D);
			snprintf(r, sizeof(r), "experts.%lld.%s.weight", (long long)e, f->up);
			XM(r, Fe, D);
			snprintf(r, sizeof(r), "experts.%lld.%s.weight", (long long)e, f->down);
			XM(r, D, Fe);
		}
		if (Fs) {
			XM("shared_expert.gate_proj.weight", Fs, D);
			XM("shared_expert.up_proj.weight", Fs, D);
			XM("shared_expert.down_proj.weight", D, Fs);
			XM("shared_expert_gate.weight", 1, D);
		}
#undef XM
	} else {
		X("mlp.gate_proj.weight", F, D, true);
		X("mlp.up_proj.weight", F, D, true);
		X("mlp.down_proj.weight", D, F, true);
		XB("mlp.gate_proj", F, c->mlp_bias);
		XB("mlp.up_proj", F, c->mlp_bias);
		XB("mlp.down_proj", D, c->mlp_bias);
	}
#undef X
#undef XB
	return rc;
}

void atlas_mtp_config(const struct atlas_config *c, bool dense, struct atlas_config *out)
{
	*out = *c;
	out->num_layers = 1;
	memset(out->linear, 0, sizeof(out->linear));
	out->n_linear = 0;
	memset(out->mlp_only, 0, sizeof(out->mlp_only));
	out->decoder_sparse_step = 1;
	if (dense)
		out->mlp_only[0] = 1;
}

bool atlas_model_mtp_config(const struct atlas_config *c, const struct atlas_st *st,
			    struct atlas_config *out)
{
	if (!atlas_st_find(st, "mtp.fc.weight"))
		return false;
	atlas_mtp_config(c, c->num_experts > 0 && !atlas_st_find(st, "mtp.layers.0.mlp.gate.weight"),
			 out);
	return true;
}

int atlas_model_expected_mtp_tensors(const struct atlas_config *mc,
				     const struct atlas_family *fam,
				     atlas_expected_tensor_fn fn, void *arg)
{
	const int64_t D = mc->hidden_size;
	int rc = emit(fn, arg, "mtp.fc.weight", D, 2 * D, true, NULL);
	static const char *const norms[] = {"mtp.pre_fc_norm_embedding.weight",
		"mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"};
	for (int i = 0; !rc && i < 3; i++)
		rc = emit(fn, arg, norms[i], D, -1, true, NULL);
	return rc ? rc : layer(mc, fam, "mtp.", 0, fn, arg);
}

const char *atlas_model_tensor_prefix(const struct atlas_st *st)
{
	/* a composite vision-language checkpoint's language model */
	if (atlas_st_find(st, "model.language_model.embed_tokens.weight"))
		return "model.language_model.";
	if (!atlas_st_find(st, "model.embed_tokens.weight") && atlas_st_find(st, "embed_tokens.weight"))
		return "";
	return "model.";
}

int atlas_model_expected_tensors_at(const struct atlas_config *c, const struct atlas_family *fam,
				    const char *prefix, bool embedding,
				    atlas_expected_tensor_fn fn, void *arg)
{
	char n[96];
	snprintf(n, sizeof(n), "%sembed_tokens.weight", prefix);
	int rc = emit(fn, arg, n, c->vocab_size, c->hidden_size, true, NULL);
	snprintf(n, sizeof(n), "%snorm.weight", prefix);
	if (!rc)
		rc = emit(fn, arg, n, c->hidden_size, -1, true, NULL);
	/* the head is never prefixed; an embedding model does not read it */
	if (!rc && !c->tie_embeddings)
		rc = emit(fn, arg, "lm_head.weight", c->vocab_size, c->hidden_size, !embedding, NULL);
	for (int64_t l = 0; !rc && l < c->num_layers; l++)
		rc = layer(c, fam, prefix, l, fn, arg);
	return rc;
}

int atlas_model_expected_tensors(const struct atlas_config *c, const struct atlas_family *fam,
				 atlas_expected_tensor_fn fn, void *arg)
{
	return atlas_model_expected_tensors_at(c, fam, "model.", false, fn, arg);
}

/* --- validation ---------------------------------------------------------- */

struct vstate {
	struct atlas_st *st;   /* the checkpoint */
	struct atlas_quant quant; /* its quantization (lib/io/quant.h) */
	float *qbuf;           /* scratch for dequantizing one matrix */
	size_t qcap;           /* its floats */
	const struct atlas_family *fam; /* its family */
	unsigned char *seen;   /* [count] tensor i was expected */
	atlas_finding_fn fn;   /* where findings go */
	void *arg;             /* its argument */
	int problems;          /* count of ATLAS_FINDING_PROBLEM */
};

static void finding(struct vstate *v, enum atlas_finding level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void finding(struct vstate *v, enum atlas_finding level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (level == ATLAS_FINDING_PROBLEM)
		v->problems++;
	v->fn(v->arg, level, msg);
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t off = 0;
	buf[0] = '\0';
	for (int i = 0; i < ndim && off + 24 < n; i++)
		off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? ", " : "",
					(long long)shape[i]);
}

static bool float_dtype(enum atlas_dtype d)
{
	return d == ATLAS_DTYPE_F32 || d == ATLAS_DTYPE_F16 || d == ATLAS_DTYPE_BF16;
}

static void mark_seen(struct vstate *v, const struct atlas_tensor_info *t)
{
	for (int64_t i = 0; t && i < atlas_st_count(v->st); i++)
		if (atlas_st_get(v->st, i) == t)
			v->seen[i] = 1;
}

/* An MoE tensor the checkpoint holds in another layout moe.c reads: under
 * the family's other block name, or inside the fused 3-D experts of its
 * layer (whose shapes the loader checks). Marks what it finds as seen. */
static bool moe_elsewhere(struct vstate *v, const char *name)
{
	const struct atlas_moe_family *f = v->fam->moe;
	char alt[256], base[256];
	if (!f)
		return false;
	size_t bl = strlen(f->block);
	const char *b = strstr(name, f->block);
	snprintf(base, sizeof(base), "%s", name);
	if (f->alt_block && b && b > name && b[-1] == '.' && b[bl] == '.') {
		snprintf(alt, sizeof(alt), "%.*s%s%s", (int)(b - name), name, f->alt_block, b + bl);
		const struct atlas_tensor_info *t = atlas_st_find(v->st, alt);
		if (t) {
			mark_seen(v, t);
			return true;
		}
		snprintf(base, sizeof(base), "%s", alt); /* the fused tensors may use it too */
	}
	for (int pass = 0; pass < 2; pass++) {
		const char *src = pass ? name : base;
		const char *x = strstr(src, ".experts.");
		if (!x || x[9] < '0' || x[9] > '9')
			continue;
		char gu[256], dn[256];
		snprintf(gu, sizeof(gu), "%.*s.experts.gate_up_proj", (int)(x - src), src);
		snprintf(dn, sizeof(dn), "%.*s.experts.down_proj", (int)(x - src), src);
		const struct atlas_tensor_info *t1 = atlas_st_find(v->st, gu);
		const struct atlas_tensor_info *t2 = atlas_st_find(v->st, dn);
		if (t1 && t2) {
			mark_seen(v, t1);
			mark_seen(v, t2);
			return true;
		}
	}
	return false;
}

/* A quantized matrix: dequantized as the loader would (every tensor of
 * the set checked), and every tensor of its module marked as read. 1
 * when e is stored quantized, else 0. */
static int check_quantized(struct vstate *v, const struct atlas_expected_tensor *e)
{
	if (v->quant.method == ATLAS_QUANT_NONE || e->ndim != 2 ||
	    atlas_quant_stored_bytes(&v->quant, v->st, e->name) <= 0)
		return 0;
	const size_t n = (size_t)e->shape[0] * (size_t)e->shape[1];
	if (n > v->qcap) {
		float *b = realloc(v->qbuf, n * sizeof(float));
		if (!b) {
			finding(v, ATLAS_FINDING_PROBLEM, "out of memory dequantizing '%s'", e->name);
			return 1;
		}
		v->qbuf = b;
		v->qcap = n;
	}
	if (atlas_quant_dequant(&v->quant, v->st, e->name, e->shape[0], e->shape[1],
				ATLAS_DTYPE_F32, v->qbuf) < 0)
		finding(v, ATLAS_FINDING_PROBLEM, "%s", atlas_errmsg());
	const size_t pl = strlen(e->name) - 6; /* "X." of "X.weight" */
	for (int64_t i = 0; i < atlas_st_count(v->st); i++)
		if (!strncmp(atlas_st_get(v->st, i)->name, e->name, pl))
			v->seen[i] = 1;
	return 1;
}

static int check_one(void *arg, const struct atlas_expected_tensor *e)
{
	struct vstate *v = arg;
	const struct atlas_tensor_info *t = atlas_st_find(v->st, e->name);
	char got[128], want[64];

	if (!t && moe_elsewhere(v, e->name))
		return 0;
	if (check_quantized(v, e))
		return 0;
	if (!t) {
		if (e->required)
			finding(v, ATLAS_FINDING_PROBLEM, "tensor '%s' is missing", e->name);
		return 0;
	}
	for (int64_t i = 0; i < atlas_st_count(v->st); i++)
		if (atlas_st_get(v->st, i) == t)
			v->seen[i] = 1;
	bool same = t->ndim == e->ndim;
	for (int i = 0; same && i < e->ndim; i++)
		same = t->shape[i] == e->shape[i];
	if (!same) {
		shape_str(got, sizeof(got), t->ndim, t->shape);
		shape_str(want, sizeof(want), e->ndim, e->shape);
		finding(v, ATLAS_FINDING_PROBLEM,
			"tensor '%s' in '%s' has shape [%s], but config.json implies [%s]", e->name,
			t->file, got, want);
	}
	if (!float_dtype(t->dtype))
		finding(v, ATLAS_FINDING_PROBLEM,
			"tensor '%s' has dtype %s; supported: F32, F16, BF16", e->name,
			atlas_dtype_name(t->dtype));
	/* (a quantized matrix's bias takes the dequantized dtype at load) */
	if (e->weight_of && atlas_quant_stored_bytes(&v->quant, v->st, e->weight_of) <= 0) {
		const struct atlas_tensor_info *w = atlas_st_find(v->st, e->weight_of);
		if (w && w->dtype != t->dtype)
			finding(v, ATLAS_FINDING_PROBLEM,
				"bias '%s' is %s but its weight is %s; they must match", e->name,
				atlas_dtype_name(t->dtype), atlas_dtype_name(w->dtype));
	}
	return 0;
}

/* The decoder's refusals of a config, as findings (decoder.c check_config). */
static void check_config(struct vstate *v, const struct atlas_config *c,
			 const struct atlas_family *fam)
{
	if (strcmp(c->hidden_act, "silu") && strcmp(c->hidden_act, "swish"))
		finding(v, ATLAS_FINDING_PROBLEM, "config.json: hidden_act '%s' is not supported "
			"(supported: silu)", c->hidden_act);
	if (c->head_dim % 2)
		finding(v, ATLAS_FINDING_PROBLEM, "config.json: head_dim %lld must be even",
			(long long)c->head_dim);
	if (c->num_kv_heads <= 0 || c->num_heads % c->num_kv_heads)
		finding(v, ATLAS_FINDING_PROBLEM, "config.json: num_attention_heads %lld is not "
			"a multiple of num_key_value_heads %lld", (long long)c->num_heads,
			(long long)c->num_kv_heads);
	if (fam->check && fam->check(c))
		finding(v, ATLAS_FINDING_PROBLEM, "config.json: %s", atlas_errmsg());
}

int atlas_model_validate(const char *dir, atlas_finding_fn fn, void *arg)
{
	struct vstate v = {.fn = fn, .arg = arg};
	struct atlas_config c;
	const struct atlas_family *fam;

	if (atlas_config_load(dir, &c)) {
		finding(&v, ATLAS_FINDING_PROBLEM, "%s", atlas_errmsg());
		return v.problems;
	}
	if (!(fam = atlas_family_find(&c))) {
		finding(&v, ATLAS_FINDING_PROBLEM, "%s", atlas_errmsg());
		return v.problems;
	}
	v.fam = fam;
	check_config(&v, &c, fam);
	struct atlas_embed_config emb;
	if (atlas_embed_config_load(dir, &emb))
		finding(&v, ATLAS_FINDING_PROBLEM, "%s", atlas_errmsg());
	else if (emb.pooling && emb.dim > 0 && emb.dim != c.hidden_size)
		finding(&v, ATLAS_FINDING_PROBLEM, "the pooling config's word_embedding_dimension "
			"%lld is not hidden_size %lld", (long long)emb.dim, (long long)c.hidden_size);
	if (atlas_quant_load(dir, &v.quant))
		finding(&v, ATLAS_FINDING_PROBLEM, "%s", atlas_errmsg());
	if (!(v.st = atlas_st_open(dir))) {
		finding(&v, ATLAS_FINDING_PROBLEM, "%s", atlas_errmsg());
		atlas_quant_free(&v.quant);
		return v.problems;
	}
	int64_t n = atlas_st_count(v.st);
	if (!(v.seen = calloc((size_t)n + 1, 1))) {
		atlas_st_close(v.st);
		atlas_quant_free(&v.quant);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	atlas_model_expected_tensors_at(&c, fam, atlas_model_tensor_prefix(v.st),
					emb.pooling != ATLAS_POOL_NONE, check_one, &v);
	/* an MTP head (--speculative mtp) is checked as its loader binds it */
	struct atlas_config mc;
	if (atlas_model_mtp_config(&c, v.st, &mc)) {
		if (c.mtp_layers > 1)
			finding(&v, ATLAS_FINDING_WARNING, "config.json: an MTP head of %lld layers; "
				"--speculative mtp runs heads of one", (long long)c.mtp_layers);
		else
			atlas_model_expected_mtp_tensors(&mc, fam, check_one, &v);
	}
	/* the parts of a composite checkpoint Atlas does not run: one warning
	 * each, not one a tensor */
	static const char *const parts[][2] = {{"model.visual.", "the vision tower"},
		{"mtp.", "the multi-token prediction head"}};
	int64_t skipped[2] = {0, 0};
	for (int64_t i = 0; i < n; i++)
		if (!v.seen[i]) {
			const struct atlas_tensor_info *t = atlas_st_get(v.st, i);
			int p = -1;
			for (int k = 0; k < 2 && p < 0; k++)
				if (!strncmp(t->name, parts[k][0], strlen(parts[k][0])))
					p = k;
			if (p >= 0) {
				skipped[p]++;
				continue;
			}
			finding(&v, ATLAS_FINDING_WARNING,
				"unexpected tensor '%s' in '%s' (not read by the %s family)", t->name,
				t->file, fam->name);
		}
	for (int k = 0; k < 2; k++)
		if (skipped[k])
			finding(&v, ATLAS_FINDING_WARNING, "%lld tensors of %s (%s*) are not read",
				(long long)skipped[k], parts[k][1], parts[k][0]);
	free(v.seen);
	free(v.qbuf);
	atlas_quant_free(&v.quant);
	atlas_st_close(v.st);
	return v.problems;
}
