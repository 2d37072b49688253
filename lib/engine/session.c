/* session.c - open a model for generation: device, tokenizer, defaults,
 * model and scheduler in one place (see session.h). */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../core/error.h"
#include "../core/log.h"

struct atlas_session {
	struct atlas_session_params p; /* as given */
	struct atlas_backend *be;      /* world 1: the backend (owned) */
	struct atlas_tp_group *tp;     /* world > 1: every rank (owns their backends and models) */
	struct atlas_model *model;     /* rank 0's model (owned unless tp) */
	struct atlas_model *draft;     /* the draft model (owned), or NULL */
	struct atlas_tok *tok;         /* tokenizer, or NULL with no_tok */
	struct atlas_sched *sched;     /* the scheduler over model */
	struct atlas_gen_config gc;    /* generation_config.json, or transformers' defaults */
	bool loaded;                   /* atlas_session_load ran */
};

void atlas_session_default_params(struct atlas_session_params *p)
{
	memset(p, 0, sizeof(*p));
	p->device = "auto";
	p->tp = 1;
	p->prefix_cache = true;
	atlas_model_default_params(&p->model);
}

struct atlas_session *atlas_session_new(const struct atlas_session_params *p)
{
	struct atlas_session *s = calloc(1, sizeof(*s));
	if (!s) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	s->p = *p;
	if (!s->p.device)
		s->p.device = "auto";
	atlas_gen_config_defaults(&s->gc);
	if (p->no_model)
		return s;
	if (s->p.tp > 1) {
		if (!(s->tp = atlas_tp_group_new(s->p.device, s->p.tp)))
			goto fail;
		for (int r = 0; r < s->p.tp; r++)
			atlas_tp_group_backend(s->tp, r)->batch_invariant = p->batch_invariant;
	} else {
		if (!(s->be = atlas_backend_open(s->p.device)))
			goto fail;
		s->be->batch_invariant = p->batch_invariant;
	}
	return s;
fail:
	atlas_session_close(s);
	return NULL;
}

/* How the ranks of a group are built when the caller gave no builder. */
static struct atlas_model *load_rank(int rank, struct atlas_backend *be,
				     struct atlas_comm *comm, void *arg)
{
	(void)rank;
	struct atlas_session *s = arg;
	struct atlas_model_params mp = s->p.model;
	mp.comm = comm;
	return atlas_model_load(s->p.model_dir, be, &mp);
}

static int load_model(struct atlas_session *s)
{
	atlas_tp_load_fn fn = s->p.build ? s->p.build : load_rank;
	void *arg = s->p.build ? s->p.build_arg : s;
	if (s->tp) {
		int rc = atlas_tp_group_load_with(s->tp, fn, arg);
		if (rc)
			return rc;
		s->model = atlas_tp_group_model(s->tp, 0);
	} else if (!(s->model = fn(0, s->be, NULL, arg))) {
		return ATLAS_EINVAL;
	}
	if (s->p.no_graphs)
		atlas_model_set_graphs(s->model, false);
	return 0;
}

/* Two tokenizers give every id the same piece (a draft model's drafts
 * are the target's tokens). */
static int same_tokenizer(const struct atlas_tok *a, const struct atlas_tok *b, const char *dir)
{
	int64_t n = atlas_tok_vocab_size(a);
	if (atlas_tok_vocab_size(b) != n)
		return atlas_error(ATLAS_EINVAL,
				   "the draft model %s has a tokenizer of %lld tokens, the model %lld: "
				   "a draft model must share the model's tokenizer",
				   dir, (long long)atlas_tok_vocab_size(b), (long long)n);
	for (int64_t i = 0; i < n; i++) {
		size_t la = 0, lb = 0;
		const char *pa = atlas_tok_piece(a, (int32_t)i, &la);
		const char *pb = atlas_tok_piece(b, (int32_t)i, &lb);
		if ((pa == NULL) != (pb == NULL) || la != lb || (pa && memcmp(pa, pb, la)))
			return atlas_error(ATLAS_EINVAL,
					   "the draft model %s's tokenizer differs from the model's at "
					   "id %lld: a draft model must share the model's tokenizer",
					   dir, (long long)i);
	}
	return 0;
}

/* A draft model's parameters: the target's context, step limits and as
 * many KV blocks. */
static struct atlas_model_params draft_params(const struct atlas_session *s)
{
	struct atlas_model_params dp = s->p.model;
	dp.comm = NULL;
	dp.synthetic_quant = NULL;
	dp.max_context = atlas_model_max_context(s->model);
	dp.max_seqs = atlas_model_max_seqs(s->model);
	dp.max_tokens = atlas_model_max_tokens(s->model);
	dp.block_size = atlas_model_block_size(s->model);
	dp.kv_blocks = atlas_model_kv_blocks_total(s->model);
	return dp;
}

/* The checkpoint's MTP head (--speculative mtp), as the draft model. */
static int load_mtp(struct atlas_session *s)
{
	if (s->p.draft_model_dir)
		return atlas_error(ATLAS_EINVAL, "--speculative mtp drafts with the model's own "
				   "MTP head; --draft-model is for --speculative draft");
	if (s->tp || !s->p.model_dir)
		return atlas_error(ATLAS_EUNSUPPORTED, "--speculative mtp needs a checkpoint "
				   "directory on one device (not tensor parallelism or a synthetic "
				   "model)");
	struct atlas_model_params dp = draft_params(s);
	if (!(s->draft = atlas_model_load_mtp(s->p.model_dir, s->model, &dp)))
		return ATLAS_EINVAL;
	return 0;
}

/* The draft model of speculative decoding: on the target's backend, with
 * its context and step limits and as many KV blocks. */
static int load_draft(struct atlas_session *s)
{
	const char *dir = s->p.draft_model_dir;
	if (!dir)
		return atlas_error(ATLAS_EINVAL,
				   "speculative decoding with a draft model needs the draft model "
				   "(--draft-model)");
	if (s->tp)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "a draft model with tensor parallelism is not in Atlas yet");
	if (s->tok) {
		struct atlas_tok *dt = atlas_tok_load(dir);
		if (!dt)
			return ATLAS_EINVAL;
		int rc = same_tokenizer(s->tok, dt, dir);
		atlas_tok_free(dt);
		if (rc)
			return rc;
	}
	struct atlas_model_params dp = draft_params(s);
	if (!(s->draft = atlas_model_load(dir, s->be, &dp)))
		return ATLAS_EINVAL;
	/* the backend's kernels are the model's again (the draft's family
	 * may have picked others) */
	int rc = atlas_model_specialize(s->model);
	if (rc)
		return rc;
	if (atlas_model_embed_config(s->draft)->pooling != ATLAS_POOL_NONE)
		return atlas_error(ATLAS_EINVAL, "the draft model %s is an embedding model", dir);
	if (s->p.no_graphs)
		atlas_model_set_graphs(s->draft, false);
	return 0;
}

int atlas_session_load(struct atlas_session *s, const struct atlas_model_params *mp)
{
	int rc;
	if (s->loaded)
		return atlas_error(ATLAS_EINVAL, "the session is loaded already");
	s->loaded = true;
	if (mp)
		s->p.model = *mp;
	if (s->p.model_dir) {
		if (!s->p.no_tok && !(s->tok = atlas_tok_load(s->p.model_dir)))
			return ATLAS_EINVAL;
		if ((rc = atlas_gen_config_load(s->p.model_dir, &s->gc)))
			return rc;
	}
	if (s->p.no_model)
		return 0;
	if ((rc = load_model(s)))
		return rc;
	if (s->p.spec.mode == ATLAS_SPEC_DRAFT && (rc = load_draft(s)))
		return rc;
	if (s->p.spec.mode == ATLAS_SPEC_MTP && (rc = load_mtp(s)))
		return rc;
	struct atlas_sched_params sp = {.max_seqs = s->p.sched_max_seqs,
					.max_batch_tokens = s->p.sched_max_tokens,
					.prefix_cache = s->p.prefix_cache,
					.spec = s->p.spec,
					.draft = s->draft};
	if (!(s->sched = atlas_sched_new(s->model, s->tok, &sp)))
		return ATLAS_EINVAL;
	const struct atlas_embed_config *ec = atlas_session_embed(s);
	char mode[80] = "";
	if (ec->pooling)
		snprintf(mode, sizeof(mode), "; embedding model, %s pooling%s",
			 atlas_pooling_name(ec->pooling), ec->normalize ? ", L2-normalized" : "");
	atlas_info("device: %s; model %s: %lld-token context, %lld KV blocks of %lld tokens, "
		   "%lld sequences and %lld tokens per step, prefix cache %s, speculative %s%s%s%s%s",
		   s->be ? s->be->name : atlas_tp_group_backend(s->tp, 0)->name,
		   atlas_model_family(s->model), (long long)atlas_model_max_context(s->model),
		   (long long)atlas_model_kv_blocks_total(s->model),
		   (long long)atlas_model_block_size(s->model),
		   (long long)atlas_model_max_seqs(s->model),
		   (long long)atlas_model_max_tokens(s->model), s->p.prefix_cache ? "on" : "off",
		   atlas_spec_name(s->p.spec.mode),
		   s->draft && s->p.draft_model_dir ? " with draft model " : "",
		   s->draft && s->p.draft_model_dir ? s->p.draft_model_dir : "",
		   s->p.batch_invariant ? ", batch-invariant" : "", mode);
	return 0;
}

struct atlas_session *atlas_session_open(const struct atlas_session_params *p)
{
	struct atlas_session *s = atlas_session_new(p);
	if (s && atlas_session_load(s, NULL)) {
		atlas_session_close(s);
		return NULL;
	}
	return s;
}

void atlas_session_close(struct atlas_session *s)
{
	if (!s)
		return;
	atlas_sched_free(s->sched);
	atlas_model_free(s->draft);
	if (s->tp) {
		atlas_tp_group_free(s->tp); /* a failure to stop is logged there */
	} else {
		atlas_model_free(s->model);
		if (s->be)
			s->be->destroy(s->be);
	}
	atlas_tok_free(s->tok);
	free(s);
}

struct atlas_backend *atlas_session_backend(struct atlas_session *s)
{
	return s->tp ? atlas_tp_group_backend(s->tp, 0) : s->be;
}

struct atlas_model *atlas_session_model(struct atlas_session *s)
{
	return s->model;
}

struct atlas_tok *atlas_session_tok(struct atlas_session *s)
{
	return s->tok;
}

struct atlas_model *atlas_session_draft(struct atlas_session *s)
{
	return s->draft;
}

struct atlas_sched *atlas_session_sched(struct atlas_session *s)
{
	return s->sched;
}

const struct atlas_gen_config *atlas_session_gen_config(const struct atlas_session *s)
{
	return &s->gc;
}

const char *atlas_session_dir(const struct atlas_session *s)
{
	return s->p.model_dir;
}

const struct atlas_embed_config *atlas_session_embed(const struct atlas_session *s)
{
	static const struct atlas_embed_config none = {0};
	return s->model ? atlas_model_embed_config(s->model) : &none;
}

bool atlas_session_is_embedding(const struct atlas_session *s)
{
	return atlas_session_embed(s)->pooling != ATLAS_POOL_NONE;
}

int atlas_session_world(const struct atlas_session *s)
{
	return s->tp ? atlas_tp_group_world(s->tp) : 1;
}

void atlas_session_gen_defaults(const struct atlas_session *s, struct atlas_gen_params *out)
{
	const struct atlas_gen_config *gc = &s->gc;
	struct atlas_sampler_params *sp = &out->sampling;
	memset(out, 0, sizeof(*out));
	atlas_sampler_default_params(sp);
	sp->temperature = gc->do_sample ? gc->temperature : 0.0;
	sp->top_k = gc->do_sample ? gc->top_k : 0;
	sp->top_p = gc->do_sample ? gc->top_p : 1.0;
	sp->min_p = gc->do_sample ? gc->min_p : 0.0;
	sp->repetition_penalty = gc->repetition_penalty;
	out->max_tokens = gc->max_new_tokens > 0 ? gc->max_new_tokens : 256;
	/* end-of-sequence ids: config, generation config and tokenizer */
	int32_t cand[2 * ATLAS_MAX_EOS + 1];
	int nc = 0;
	if (s->model) {
		const struct atlas_config *c = atlas_model_config(s->model);
		for (int i = 0; i < c->n_eos; i++)
			cand[nc++] = c->eos_ids[i];
	}
	for (int i = 0; i < gc->n_eos; i++)
		cand[nc++] = gc->eos_ids[i];
	if (s->tok && atlas_tok_eos(s->tok) >= 0)
		cand[nc++] = atlas_tok_eos(s->tok);
	int cap = (int)(sizeof(out->eos_ids) / sizeof(out->eos_ids[0]));
	for (int i = 0; i < nc; i++) {
		bool dup = false;
		for (int j = 0; j < out->n_eos; j++)
			dup |= out->eos_ids[j] == cand[i];
		if (!dup && out->n_eos < cap)
			out->eos_ids[out->n_eos++] = cand[i];
	}
}
