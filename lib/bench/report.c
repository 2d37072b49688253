/* report.c - what atlas-bench knows about the machine, and its results as
 * one JSON object: every parameter used (not only the ones given), the
 * GPU, driver, CUDA runtime and commit, the ceilings, and each run with
 * its floor and roofline fraction. Field names are a stable interface. */
#include "bench.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "../core/error.h"

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
	out->target = "";
	if (atlas_gpu_probe(g, 8, &out->driver) > 0)
		snprintf(out->gpu, sizeof(out->gpu), "%s", g[0].name);
	if (be && be->measure && !be->measure(be, "runtime", 0, &v))
		out->runtime = (int)v;
	out->target = atlas_kernel_targets();
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

static json_object *profile_json(const struct atlas_kernel_time *rows, int n)
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

char *atlas_bench_json(const struct atlas_bench_report *r)
{
	json_object *root = json_object_new_object(), *o;
	const struct atlas_config *c = r->cfg;
	add_s(root, "command", r->command);
	add_s(root, "version", r->machine.version);
	add_s(root, "commit", r->machine.commit);

	o = json_object_new_object();
	add_s(o, "gpu", r->machine.gpu);
	add_i(o, "driver_version", r->machine.driver);
	add_i(o, "cuda_runtime_version", r->machine.runtime);
	add_s(o, "kernel_targets", r->machine.target);
	add_s(o, "device", r->device);
	json_object_object_add(root, "machine", o);

	o = json_object_new_object();
	add_s(o, "synthetic", r->shape);
	add_s(o, "family", c->model_type);
	add_i(o, "hidden_size", c->hidden_size);
	add_i(o, "num_layers", c->num_layers);
	add_i(o, "num_heads", c->num_heads);
	add_i(o, "num_kv_heads", c->num_kv_heads);
	add_i(o, "head_dim", c->head_dim);
	add_i(o, "intermediate_size", c->intermediate_size);
	add_i(o, "vocab_size", c->vocab_size);
	json_object_object_add(o, "tie_embeddings", json_object_new_boolean(c->tie_embeddings));
	add_s(o, "dtype", "bf16");
	add_i(o, "seed", (int64_t)r->seed);
	json_object_object_add(root, "model", o);

	o = json_object_new_object();
	add_i(o, "copy_bytes", r->ceil.copy_bytes);
	add_d(o, "copy_gbs", r->ceil.copy_gbs);
	add_i(o, "gemm_n", r->ceil.gemm_n);
	add_d(o, "gemm_tflops", r->ceil.gemm_tflops);
	if (r->ceil.cublaslt_tflops > 0)
		add_d(o, "cublaslt_tflops", r->ceil.cublaslt_tflops);
	else
		json_object_object_add(o, "cublaslt_tflops", NULL);
	add_s(o, "cublaslt_note", r->ceil.cublaslt_note);
	json_object_object_add(root, "ceilings", o);

	json_object *a = json_object_new_array();
	for (int i = 0; i < r->n_decode; i++) {
		const struct atlas_bench_decode *d = &r->decode[i];
		o = json_object_new_object();
		add_i(o, "batch", d->batch);
		add_i(o, "prompt", d->prompt);
		add_i(o, "gen", d->gen);
		add_i(o, "warmup", d->warmup);
		add_d(o, "ttft_ms", d->ttft_ms);
		add_d(o, "ms_per_step", d->step_ms);
		add_d(o, "tok_s", d->tok_s);
		add_i(o, "weight_bytes", d->weight_bytes);
		add_d(o, "kv_bytes_per_step", d->kv_bytes);
		add_d(o, "floor_ms", d->floor_ms);
		add_d(o, "roofline", d->roofline);
		json_object_array_add(a, o);
	}
	json_object_object_add(root, "decode", a);
	a = json_object_new_array();
	for (int i = 0; i < r->n_prefill; i++) {
		const struct atlas_bench_prefill *p = &r->prefill[i];
		o = json_object_new_object();
		add_i(o, "prompt", p->prompt);
		add_i(o, "reps", p->reps);
		add_d(o, "ms", p->ms);
		add_d(o, "tok_s", p->tok_s);
		add_d(o, "flops", p->flops);
		add_d(o, "tflops", p->tflops);
		add_d(o, "roofline", p->roofline);
		json_object_array_add(a, o);
	}
	json_object_object_add(root, "prefill", a);
	if (r->prof)
		json_object_object_add(root, "profile_decode_step", profile_json(r->prof, r->n_prof));
	if (r->prof2)
		json_object_object_add(root, "profile_prefill", profile_json(r->prof2, r->n_prof2));

	const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
								 JSON_C_TO_STRING_NOSLASHESCAPE);
	char *out = s ? strdup(s) : NULL;
	json_object_put(root);
	if (!out)
		atlas_error(ATLAS_ENOMEM, "out of memory");
	return out;
}
