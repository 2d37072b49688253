/* report.c - what atlas-bench knows about the machine, and the pieces of
 * its JSON document: every parameter used (the caller adds them), the
 * GPU, driver, CUDA runtime and commit, the ceilings, and each run with
 * its floor and roofline fraction. Field names are a stable interface
 * (tests/t/4010-bench-json.bats pins the top-level keys). */
#include "bench.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../core/error.h"
#include "../core/threads.h"

#ifndef ATLAS_GIT_REV
#define ATLAS_GIT_REV "unknown"
#endif
#ifndef ATLAS_VERSION
#define ATLAS_VERSION "0.0.0"
#endif

void atlas_bench_machine(struct atlas_backend *be, struct atlas_bench_machine *out)
{
	struct atlas_gpu_info g[8];
	double v = 0;
	memset(out, 0, sizeof(*out));
	out->commit = ATLAS_GIT_REV;
	out->version = ATLAS_VERSION;
	snprintf(out->gpu, sizeof(out->gpu), "none");
	if (atlas_gpu_probe(g, 8, &out->driver) > 0)
		snprintf(out->gpu, sizeof(out->gpu), "%s", g[0].name);
	if (be && be->measure && !be->measure(be, "runtime", 0, &v))
		out->runtime = (int)v;
	out->target = atlas_kernel_targets();
	out->threads = atlas_threads_count();
}

static void add_d(json_object *o, const char *k, double v)
{
	json_object_object_add(o, k, json_object_new_double(v));
}

static void add_i(json_object *o, const char *k, int64_t v)
{
	json_object_object_add(o, k, json_object_new_int64(v));
}

static void add_s(json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v ? v : ""));
}

/* "13000" -> "13.0"; 0 -> "none". */
static void add_version(json_object *o, const char *k, int v)
{
	char s[32];
	if (v <= 0)
		snprintf(s, sizeof(s), "none");
	else
		snprintf(s, sizeof(s), "%d.%d", v / 1000, (v % 1000) / 10);
	add_s(o, k, s);
}

json_object *atlas_bench_doc_new(const char *command, const char *device,
				 const struct atlas_bench_machine *m)
{
	json_object *root = json_object_new_object(), *o = json_object_new_object();
	char when[32];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	add_s(root, "command", command);
	add_s(root, "version", m->version);
	add_s(root, "commit", m->commit);
	add_s(root, "time", when);
	add_s(o, "gpu", m->gpu);
	add_version(o, "driver_version", m->driver);
	add_version(o, "cuda_runtime_version", m->runtime);
	add_s(o, "kernel_targets", m->target && m->target[0] ? m->target : "none");
	add_s(o, "device", device);
	add_i(o, "cpu_threads", m->threads);
	json_object_object_add(root, "machine", o);
	return root;
}

json_object *atlas_bench_ceilings_json(const struct atlas_bench_ceilings *c)
{
	json_object *o = json_object_new_object();
	add_i(o, "copy_bytes", c->copy_bytes);
	add_d(o, "copy_gbs", c->copy_gbs);
	add_i(o, "gemm_n", c->gemm_n);
	add_d(o, "gemm_tflops", c->gemm_tflops);
	if (c->cublaslt_tflops > 0)
		add_d(o, "cublaslt_tflops", c->cublaslt_tflops);
	else
		json_object_object_add(o, "cublaslt_tflops", NULL);
	add_s(o, "cublaslt_note", c->cublaslt_note);
	return o;
}

json_object *atlas_bench_model_json(const struct atlas_config *c, const char *source,
				    int64_t weight_bytes)
{
	json_object *o = json_object_new_object();
	add_s(o, "source", source);
	add_s(o, "family", c->model_type);
	add_i(o, "hidden_size", c->hidden_size);
	add_i(o, "num_layers", c->num_layers);
	add_i(o, "num_heads", c->num_heads);
	add_i(o, "num_kv_heads", c->num_kv_heads);
	add_i(o, "head_dim", c->head_dim);
	add_i(o, "intermediate_size", c->intermediate_size);
	add_i(o, "vocab_size", c->vocab_size);
	json_object_object_add(o, "tie_embeddings", json_object_new_boolean(c->tie_embeddings));
	add_s(o, "dtype", atlas_dtype_name(c->dtype));
	add_i(o, "weight_bytes_per_step", weight_bytes);
	return o;
}

json_object *atlas_bench_decode_json(const struct atlas_bench_decode *d, bool generate)
{
	json_object *o = json_object_new_object();
	add_i(o, "batch", d->batch);
	add_i(o, "prompt", d->prompt);
	add_i(o, "gen", d->gen);
	add_i(o, "warmup", d->warmup);
	add_d(o, "ttft_ms", d->ttft_ms);
	add_d(o, "ms_per_step", d->step_ms);
	add_d(o, "tok_s", d->tok_s);
	if (generate) {
		add_d(o, "total_ms", d->total_ms);
		add_d(o, "e2e_tok_s", d->e2e_tok_s);
	}
	add_i(o, "weight_bytes", d->weight_bytes);
	/* MoE: the routed experts' share of weight_bytes and how many
	 * (layer, expert) reads it is; null for a dense model, and
	 * experts_read_per_step null when the backend does not count */
	if (d->moe)
		add_d(o, "expert_bytes_per_step", d->expert_bytes);
	else
		json_object_object_add(o, "expert_bytes_per_step", NULL);
	if (d->moe && d->experts_read >= 0)
		add_d(o, "experts_read_per_step", d->experts_read);
	else
		json_object_object_add(o, "experts_read_per_step", NULL);
	add_d(o, "kv_bytes_per_step", d->kv_bytes);
	add_d(o, "floor_ms", d->floor_ms);
	add_d(o, "roofline", d->roofline);
	return o;
}

json_object *atlas_bench_spec_json(const struct atlas_bench_spec *r)
{
	json_object *o = json_object_new_object();
	add_i(o, "num_draft", r->k);
	add_i(o, "prompt", r->prompt);
	add_i(o, "steps", r->steps);
	add_d(o, "step_ms", r->step_ms);
	add_d(o, "verify_ms", r->verify_ms);
	add_d(o, "head_ms", r->head_ms);
	add_d(o, "spec_ms", r->spec_ms);
	add_d(o, "breakeven_tokens_per_step", r->breakeven);
	add_d(o, "speedup_at_0.6", r->speedup[0]);
	add_d(o, "speedup_at_0.8", r->speedup[1]);
	add_d(o, "speedup_at_0.9", r->speedup[2]);
	return o;
}

json_object *atlas_bench_prefill_json(const struct atlas_bench_prefill *p)
{
	json_object *o = json_object_new_object();
	add_i(o, "prompt", p->prompt);
	add_i(o, "reps", p->reps);
	add_d(o, "ms", p->ms);
	add_d(o, "ttft_ms", p->ms);
	add_d(o, "tok_s", p->tok_s);
	add_d(o, "flops", p->flops);
	add_d(o, "tflops", p->tflops);
	add_d(o, "roofline", p->roofline);
	return o;
}

json_object *atlas_bench_kernel_json(const struct atlas_bench_kernel *k)
{
	json_object *o = json_object_new_object();
	add_s(o, "op", k->op);
	add_s(o, "what", k->what);
	add_s(o, "shape", k->shape);
	add_i(o, "tokens", k->tokens);
	add_d(o, "ms", k->ms);
	add_d(o, "bytes", k->bytes);
	add_d(o, "flops", k->flops);
	add_d(o, "gbs", k->gbs);
	add_d(o, "tflops", k->tflops);
	add_d(o, "roofline", k->roofline);
	if (k->base_ms >= 0) {
		add_d(o, "baseline_ms", k->base_ms);
		add_d(o, "speedup", k->ms > 0 ? k->base_ms / k->ms : 0);
	} else {
		json_object_object_add(o, "baseline_ms", NULL);
		json_object_object_add(o, "speedup", NULL);
	}
	return o;
}

json_object *atlas_bench_profile_json(const struct atlas_kernel_time *rows, int n)
{
	json_object *a = json_object_new_array();
	for (int i = 0; i < n; i++) {
		json_object *o = json_object_new_object();
		add_s(o, "kernel", rows[i].name);
		add_i(o, "calls", rows[i].calls);
		add_d(o, "ms", rows[i].ms);
		json_object_array_add(a, o);
	}
	return a;
}

char *atlas_bench_doc_text(json_object *doc)
{
	const char *s = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PRETTY |
								JSON_C_TO_STRING_NOSLASHESCAPE);
	char *out = s ? strdup(s) : NULL;
	if (!out)
		atlas_error(ATLAS_ENOMEM, "out of memory");
	return out;
}
