/* bench.c - the measurements of atlas-bench decode/prefill/generate:
 * named shapes, timed decode and prefill runs and per-kernel profiles.
 *
 * Times are wall-clock around work that ends in a download (each step
 * brings its sampled ids back), so they include every launch and copy a
 * real generation pays for. */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

struct shape {
	const char *name;   /* --synthetic value */
	const char *type;   /* config model_type */
	int64_t D, L, H, Hkv, hd, F, V; /* hidden, layers, heads, kv heads, head dim, MLP, vocab */
	bool tied;          /* lm_head is the embedding */
	double theta;       /* RoPE base */
	double eps;         /* RMSNorm epsilon */
	/* mixture of experts (every layer sparse); experts 0: dense */
	int64_t experts;    /* routed experts per layer */
	int64_t top_k;      /* experts per token */
	int64_t moe_F;      /* each expert's width, 0: F (Mixtral) */
	bool norm_topk;     /* norm_topk_prob */
	int64_t shared;     /* shared expert's width, 0: none */
	/* hybrid linear attention (lib/model/README-hybrid.md); interval 0:
	 * none. Layer l is full attention when (l + 1) % interval == 0, else
	 * a Gated DeltaNet of lk/lv heads of ldk/ldv dims (conv width 4) */
	int64_t interval, lk, lv, ldk, ldv;
	double rotary;      /* partial_rotary_factor, 0: 1 */
};

static const struct shape shapes[] = {
	{"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, true, 1e6, 1e-6,
	 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0},
	{"qwen3-8b", "qwen3", 4096, 36, 32, 8, 128, 12288, 151936, false, 1e6, 1e-6,
	 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0},
	{"qwen3-32b", "qwen3", 5120, 64, 64, 8, 128, 25600, 151936, false, 1e6, 1e-6,
	 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0},
	{"llama3-8b", "llama", 4096, 32, 32, 8, 128, 14336, 128256, false, 5e5, 1e-5,
	 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0},
	{"qwen3-30b-a3b", "qwen3_moe", 2048, 48, 32, 4, 128, 6144, 151936, false, 1e6, 1e-6,
	 128, 8, 768, true, 0, 0, 0, 0, 0, 0, 0},
	{"mixtral-8x7b", "mixtral", 4096, 32, 32, 8, 128, 14336, 32000, false, 1e6, 1e-5,
	 8, 2, 0, false, 0, 0, 0, 0, 0, 0, 0},
	/* Qwen3.5-35B-A3B-like: 3 Gated DeltaNet layers to 1 gated attention,
	 * 256 experts top 8 with a shared expert, 248k vocabulary */
	{"qwen3.5-35b-a3b", "qwen3_5_moe_text", 2048, 40, 16, 2, 256, 512, 248320, false, 1e7,
	 1e-6, 256, 8, 512, true, 512, 4, 16, 32, 128, 128, 0.25},
	/* Qwen3-Next-80B-A3B: 512 experts top 10 (160 GB in BF16: an H200
	 * holds it only with FP8 experts, which synthetic MoE models lack) */
	{"qwen3-next-80b-a3b", "qwen3_next", 2048, 48, 16, 2, 256, 5120, 151936, false, 1e7,
	 1e-6, 512, 10, 512, true, 512, 4, 16, 32, 128, 128, 0.25},
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

const char *atlas_bench_shape_names(void)
{
	return "qwen3-0.6b, qwen3-8b, qwen3-32b, llama3-8b, qwen3-30b-a3b, mixtral-8x7b, "
	       "qwen3.5-35b-a3b, qwen3-next-80b-a3b";
}

int atlas_bench_shape(const char *name, struct atlas_config *c)
{
	for (size_t i = 0; i < NSHAPES; i++) {
		const struct shape *s = &shapes[i];
		if (strcmp(name, s->name))
			continue;
		memset(c, 0, sizeof(*c));
		snprintf(c->model_type, sizeof(c->model_type), "%s", s->type);
		snprintf(c->hidden_act, sizeof(c->hidden_act), "silu");
		c->hidden_size = s->D;
		c->num_layers = s->L;
		c->num_heads = s->H;
		c->num_kv_heads = s->Hkv;
		c->head_dim = s->hd;
		c->intermediate_size = s->F;
		c->vocab_size = s->V;
		c->tie_embeddings = s->tied;
		c->rope_theta = s->theta;
		c->rope_type = ATLAS_ROPE_DEFAULT;
		c->rms_eps = s->eps;
		c->max_position = 40960;
		c->dtype = ATLAS_DTYPE_BF16;
		c->bos_id = -1;
		/* as config.c fills them from config.json */
		c->num_experts = s->experts;
		c->experts_per_tok = s->top_k;
		c->moe_intermediate_size = s->moe_F ? s->moe_F : s->F;
		c->norm_topk_prob = s->norm_topk;
		c->decoder_sparse_step = 1;
		c->shared_expert_intermediate_size = s->shared;
		c->rotary_dim = s->rotary > 0 ? (int64_t)((double)s->hd * s->rotary) : s->hd;
		for (int64_t l = 0; s->interval > 1 && l < s->L && l < ATLAS_MAX_MLP_ONLY; l++)
			if ((l + 1) % s->interval) {
				c->linear[l / 64] |= (uint64_t)1 << (l % 64);
				c->n_linear++;
			}
		c->lin_k_heads = s->lk;
		c->lin_v_heads = s->lv;
		c->lin_k_dim = s->ldk;
		c->lin_v_dim = s->ldv;
		c->lin_conv = s->interval ? 4 : 0;
		return 0;
	}
	return atlas_error(ATLAS_EINVAL, "unknown shape '%s' (known: %s)", name,
			   atlas_bench_shape_names());
}

/* Random prompt ids in [0, V) from a small LCG. */
static void random_ids(int32_t *ids, int64_t n, int64_t V, uint64_t *state)
{
	for (int64_t i = 0; i < n; i++) {
		*state = *state * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((*state >> 33) % (uint64_t)V);
	}
}

/* KV cache bytes one token at position p (seeing p + 1 keys) reads: its
 * attention layers' (a hybrid model's linear-attention layers keep none). */
static double kv_read(const struct atlas_config *c, int64_t p)
{
	return (double)(p + 1) * 2.0 *
	       (double)((c->num_layers - c->n_linear) * c->num_kv_heads * c->head_dim) * 2.0;
}

/* The weight bytes of a step for r: the model's figure, or for an MoE
 * model whose backend counts its expert reads (`reads` over r->gen
 * steps, < 0: not counted) the experts the steps really read in place
 * of top_k per sparse layer. Batch 1 reads exactly top_k per layer, so
 * both give the same bytes there. */
static void weight_floor(struct atlas_model *m, int64_t reads, struct atlas_bench_decode *r)
{
	int64_t all = atlas_model_weight_bytes(m), routed = atlas_model_routed_bytes(m);
	int64_t one = atlas_model_expert_bytes(m);
	r->weight_bytes = all;
	r->moe = one > 0;
	r->experts_read = -1;
	r->expert_bytes = (double)routed;
	if (!r->moe || reads < 0)
		return;
	r->experts_read = (double)reads / (double)r->gen;
	r->expert_bytes = r->experts_read * (double)one;
	r->weight_bytes = all - routed + (int64_t)llround(r->expert_bytes);
}

int atlas_bench_run_decode(struct atlas_model *m, struct atlas_backend *be, int64_t batch,
			   int64_t prompt, int64_t gen, int64_t warmup, double copy_gbs,
			   struct atlas_bench_decode *r)
{
	const struct atlas_config *c = atlas_model_config(m);
	/* an MoE model's batched steps read the experts their rows route to:
	 * count them over the timed steps where the backend can */
	bool count = atlas_model_expert_bytes(m) > 0 && be->moe_experts_read;
	struct atlas_seq **seqs = calloc((size_t)batch, sizeof(*seqs));
	struct atlas_batch_item *items = calloc((size_t)batch, sizeof(*items));
	int32_t *in = calloc((size_t)batch, sizeof(int32_t));
	int32_t *out = calloc((size_t)batch, sizeof(int32_t));
	int32_t *ids = malloc((size_t)prompt * sizeof(int32_t));
	struct atlas_sample_args greedy = {0};
	uint64_t st = 12345;
	double start = 0;
	int rc = 0;
	memset(r, 0, sizeof(*r));
	r->batch = batch, r->prompt = prompt, r->gen = gen, r->warmup = warmup;
	if (!seqs || !items || !in || !out || !ids) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto done;
	}
	for (int64_t i = 0; i < batch && !rc; i++) {
		if (!(seqs[i] = atlas_seq_new(m))) {
			rc = ATLAS_ENOMEM;
			break;
		}
		random_ids(ids, prompt, c->vocab_size, &st);
		double t0 = atlas_bench_now_ms();
		rc = atlas_model_forward_sample(m, seqs[i], ids, prompt, &greedy, &in[i]);
		if (i == 0)
			r->ttft_ms = atlas_bench_now_ms() - t0;
		if (i == 0)
			start = t0;
	}
	for (int64_t i = 0; i < batch; i++)
		items[i] = (struct atlas_batch_item){
			.seq = seqs[i], .ids = &in[i], .n = 1, .sample = &greedy, .token = &out[i]};
	double t0 = 0;
	for (int64_t s = 0; s < warmup + gen && !rc; s++) {
		if (s == warmup && count)
			be->moe_experts_read(be); /* reset, outside the timed span */
		if (s == warmup)
			t0 = atlas_bench_now_ms();
		rc = atlas_model_forward_batch(m, items, batch);
		memcpy(in, out, (size_t)batch * sizeof(int32_t));
	}
	if (!rc) {
		double t1 = atlas_bench_now_ms(), ms = t1 - t0;
		r->total_ms = t1 - start;
		r->e2e_tok_s = (double)(batch * (warmup + gen + 1)) / (r->total_ms / 1e3);
		r->step_ms = ms / (double)gen;
		r->tok_s = (double)(batch * gen) / (ms / 1e3);
		weight_floor(m, count ? be->moe_experts_read(be) : -1, r);
		double kv = 0;
		for (int64_t s = 0; s < gen; s++) /* token of step s sits at position p */
			kv += kv_read(c, prompt + warmup + s) * (double)batch;
		/* a hybrid model's sequences read and write their recurrent
		 * state every step */
		r->kv_bytes = kv / (double)gen + 2.0 * (double)atlas_model_state_bytes(m) * (double)batch;
		if (copy_gbs > 0) {
			r->floor_ms = ((double)r->weight_bytes + r->kv_bytes) / (copy_gbs * 1e9) * 1e3;
			r->roofline = r->floor_ms / r->step_ms;
		}
	}
done:
	for (int64_t i = 0; seqs && i < batch; i++)
		atlas_seq_free(seqs[i]);
	free(seqs);
	free(items);
	free(in);
	free(out);
	free(ids);
	return rc;
}

int atlas_bench_run_spec(struct atlas_model *m, struct atlas_model *head, int64_t k,
			 int64_t prompt, int64_t steps, struct atlas_bench_spec *r)
{
	const struct atlas_config *c = atlas_model_config(m);
	const int64_t V = c->vocab_size, n = prompt + (steps + 1) * (2 * k + 2);
	struct atlas_seq *s = atlas_seq_new(m), *q = atlas_seq_new(head);
	int32_t *ids = malloc((size_t)n * sizeof(int32_t));
	float *logits = malloc((size_t)((k + 1) * V) * sizeof(float));
	const struct atlas_sample_args greedy = {.top_p = 1};
	int32_t tok = 0;
	uint64_t st = 777;
	int rc = 0;
	memset(r, 0, sizeof(*r));
	r->k = k, r->prompt = prompt, r->steps = steps;
	if (!s || !q || !ids || !logits) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto done;
	}
	random_ids(ids, n, V, &st);
	/* the prompt but its last token (the one a step feeds), and the
	 * head caught up on it */
	if (prompt < 3 || prompt - 1 > atlas_model_max_tokens(m)) {
		rc = atlas_error(ATLAS_EINVAL, "a prompt of 3..%lld tokens, not %lld",
				 (long long)atlas_model_max_tokens(m) + 1, (long long)prompt);
		goto done;
	}
	rc = atlas_model_forward(m, s, ids, prompt - 1, NULL, false);
	struct atlas_batch_item hi = {.seq = q, .ids = ids + 1, .n = prompt - 2,
				      .hid = atlas_model_hidden_rows(m, NULL)};
	if (!rc)
		rc = atlas_model_forward_batch(head, &hi, 1);
	int64_t at = prompt;
	double t_verify = 0, t_head = 0, t_step = 0;
	for (int64_t i = 0; i <= steps && !rc; i++) {
		/* verify: the last token and k drafts, every row's logits */
		struct atlas_batch_item it = {.seq = s, .ids = ids + at - 1, .n = k + 1,
					      .logits = logits, .n_logits = k + 1};
		double t0 = atlas_bench_now_ms();
		if ((rc = atlas_model_forward_batch(m, &it, 1)))
			break;
		double t1 = atlas_bench_now_ms();
		/* the head: its catch-up over those rows, then k - 1 passes */
		size_t rb;
		hi = (struct atlas_batch_item){.seq = q, .ids = ids + at, .n = k + 1,
					       .hid = atlas_model_hidden_rows(m, &rb), .sample = &greedy,
					       .token = &tok};
		rc = atlas_model_forward_batch(head, &hi, 1);
		for (int64_t j = 1; j < k && !rc; j++) {
			hi = (struct atlas_batch_item){
				.seq = q, .ids = ids + at + k + j, .n = 1,
				.hid = (const char *)atlas_model_hidden_rows(head, NULL) +
				       (j == 1 ? (size_t)k * rb : 0),
				.sample = &greedy, .token = &tok};
			rc = atlas_model_forward_batch(head, &hi, 1);
		}
		double t2 = atlas_bench_now_ms();
		/* and a plain one-token step */
		it = (struct atlas_batch_item){.seq = s, .ids = ids + at + k, .n = 1,
					       .sample = &greedy, .token = &tok};
		if (!rc)
			rc = atlas_model_forward_batch(m, &it, 1);
		double t3 = atlas_bench_now_ms();
		if (i > 0) { /* the first round warms up */
			t_verify += t1 - t0;
			t_head += t2 - t1;
			t_step += t3 - t2;
		}
		at += k + 2;
	}
	if (!rc && steps > 0) {
		r->verify_ms = t_verify / (double)steps;
		r->head_ms = t_head / (double)steps;
		r->step_ms = t_step / (double)steps;
		r->spec_ms = r->verify_ms + r->head_ms;
		r->breakeven = r->spec_ms / r->step_ms;
		static const double acc[3] = {0.6, 0.8, 0.9};
		for (int i = 0; i < 3; i++)
			r->speedup[i] = (1.0 - pow(acc[i], (double)(k + 1))) / (1.0 - acc[i]) /
					r->breakeven;
	}
done:
	atlas_seq_free(s);
	atlas_seq_free(q);
	free(ids);
	free(logits);
	return rc;
}

/* FLOPs of a T-token prefill from an empty cache: every matrix product
 * (2 per weight per token; in a sparse layer the router, top_k experts
 * and the shared expert with its gate), attention (QK^T and PV over the
 * causal triangle), and the output head for the last token only. */
static double prefill_flops(const struct atlas_config *c, int64_t T)
{
	double D = (double)c->hidden_size, F = (double)c->intermediate_size;
	double qd = (double)(c->num_heads * c->head_dim), kvd = (double)(c->num_kv_heads * c->head_dim);
	double E = (double)c->num_experts, K = (double)c->experts_per_tok;
	double Fm = (double)c->moe_intermediate_size;
	double Fs = (double)c->shared_expert_intermediate_size;
	double attn = 2.0 * (D * qd + 2 * D * kvd + qd * D);
	double dense = 2.0 * 3 * D * F;
	double sparse = 2.0 * (E * D + K * 3 * D * Fm + (Fs > 0 ? 3 * D * Fs + D : 0));
	double pairs = (double)T * (double)(T + 1) / 2.0; /* (query, key) pairs */
	double att = 4.0 * pairs * qd, sum = 0;
	/* hybrid: gated attention's q projection is twice as wide; a linear
	 * layer has its projections and, per token and value head, the delta
	 * rule's ~4 dk dv multiply-adds */
	const bool gated = c->n_linear > 0;
	const double Z = (double)(c->lin_v_heads * c->lin_v_dim);
	const double Cc = (double)(2 * c->lin_k_heads * c->lin_k_dim) + Z;
	const double lin = 2.0 * (D * (Cc + Z) + D * 2.0 * (double)c->lin_v_heads + Z * D) +
			   8.0 * (double)(c->lin_v_heads * c->lin_k_dim * c->lin_v_dim);
	for (int64_t l = 0; l < c->num_layers; l++) {
		double mlp = atlas_config_layer_is_moe(c, l) ? sparse : dense;
		if (atlas_config_layer_is_linear(c, l))
			sum += (lin + mlp) * (double)T;
		else
			sum += (attn + (gated ? 2.0 * D * qd : 0) + mlp) * (double)T + att;
	}
	return sum + 2.0 * D * (double)c->vocab_size;
}

int atlas_bench_run_prefill(struct atlas_model *m, int64_t prompt, int64_t reps,
			    double gemm_tflops, struct atlas_bench_prefill *r)
{
	const struct atlas_config *c = atlas_model_config(m);
	struct atlas_seq *s = atlas_seq_new(m);
	int32_t *ids = malloc((size_t)prompt * sizeof(int32_t));
	struct atlas_sample_args greedy = {0};
	uint64_t st = 777;
	int32_t tok;
	int rc = 0;
	memset(r, 0, sizeof(*r));
	r->prompt = prompt, r->reps = reps;
	if (!s || !ids) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto done;
	}
	random_ids(ids, prompt, c->vocab_size, &st);
	r->ms = 1e30;
	for (int64_t i = 0; i <= reps && !rc; i++) { /* i == 0: warm-up */
		atlas_seq_reset(s);
		double t0 = atlas_bench_now_ms();
		rc = atlas_model_forward_sample(m, s, ids, prompt, &greedy, &tok);
		double ms = atlas_bench_now_ms() - t0;
		if (i > 0 && ms < r->ms)
			r->ms = ms;
	}
	if (!rc) {
		r->tok_s = (double)prompt / (r->ms / 1e3);
		r->flops = prefill_flops(c, prompt);
		r->tflops = r->flops / (r->ms / 1e3) / 1e12;
		r->roofline = gemm_tflops > 0 ? r->tflops / gemm_tflops : 0;
	}
done:
	atlas_seq_free(s);
	free(ids);
	return rc;
}

/* One profiled decode step at `batch` after untimed prefills and one
 * untimed step. */
static int profile_decode(struct atlas_model *m, struct atlas_backend *be, int64_t batch,
			  int64_t prompt)
{
	const struct atlas_config *c = atlas_model_config(m);
	struct atlas_seq **seqs = calloc((size_t)batch, sizeof(*seqs));
	struct atlas_batch_item *items = calloc((size_t)batch, sizeof(*items));
	int32_t *tok = calloc((size_t)batch * 2, sizeof(int32_t));
	int32_t *ids = malloc((size_t)prompt * sizeof(int32_t));
	struct atlas_sample_args greedy = {0};
	uint64_t st = 99;
	int rc = 0;
	if (!seqs || !items || !tok || !ids)
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
	for (int64_t i = 0; i < batch && !rc; i++) {
		if (!(seqs[i] = atlas_seq_new(m)))
			rc = ATLAS_ENOMEM;
		random_ids(ids, prompt, c->vocab_size, &st);
		if (!rc)
			rc = atlas_model_forward_sample(m, seqs[i], ids, prompt, &greedy, &tok[i]);
		items[i] = (struct atlas_batch_item){.seq = seqs[i], .ids = &tok[i], .n = 1,
						     .sample = &greedy, .token = &tok[batch + i]};
	}
	if (!rc)
		rc = atlas_model_forward_batch(m, items, batch);
	if (!rc)
		rc = be->profile(be, true);
	if (!rc)
		rc = atlas_model_forward_batch(m, items, batch);
	for (int64_t i = 0; seqs && i < batch; i++)
		atlas_seq_free(seqs[i]);
	free(seqs);
	free(items);
	free(tok);
	free(ids);
	return rc;
}

int atlas_bench_profile(struct atlas_model *m, struct atlas_backend *be, const char *what,
			int64_t batch, int64_t prompt, struct atlas_kernel_time *rows, int max)
{
	struct atlas_bench_prefill p;
	int rc;
	if (!be->profile || !be->profile_report)
		return atlas_error(ATLAS_EUNSUPPORTED, "backend '%s' cannot time kernels", be->name);
	atlas_model_set_graphs(m, false);
	if (!strcmp(what, "decode")) {
		rc = profile_decode(m, be, batch, prompt);
	} else {
		/* a warm-up prefill, then the profiled one */
		rc = atlas_bench_run_prefill(m, prompt, 0, 0, &p);
		if (!rc)
			rc = be->profile(be, true);
		if (!rc)
			rc = atlas_bench_run_prefill(m, prompt, 0, 0, &p);
	}
	be->profile(be, false);
	atlas_model_set_graphs(m, true);
	return rc ? rc : be->profile_report(be, rows, max);
}
