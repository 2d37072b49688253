/* bench.h - offline speed measurements for atlas-bench: named model
 * shapes, the device ceilings (copy bandwidth, BF16 matrix rate), decode
 * and prefill runs on a model, per-kernel profiles, and the JSON report.
 *
 * Every result carries its floor (bytes that must move / measured copy
 * bandwidth for decode; FLOPs / measured matrix rate for prefill) and the
 * measured time as a fraction of it (DESIGN.md, "Performance method"). */
#ifndef ATLAS_BENCH_H
#define ATLAS_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "../backend/backend.h"
#include "../io/config.h"
#include "../model/model.h"

/* The config of a named real shape ("qwen3-8b", "llama3-8b", "qwen3-0.6b",
 * "qwen3-32b", the mixtures of experts "qwen3-30b-a3b" and "mixtral-8x7b";
 * the table of scripts/make-synthetic.py plus qwen3-32b).
 * 0, or ATLAS_EINVAL with a message listing the names. */
int atlas_bench_shape(const char *name, struct atlas_config *out);
/* The names, comma-separated; static string. */
const char *atlas_bench_shape_names(void);

/* The two ceilings, measured on the backend (which must have `measure`). */
struct atlas_bench_ceilings {
	int64_t copy_bytes;     /* size of the timed copy */
	double copy_gbs;        /* GB/s, bytes read + written */
	int64_t gemm_n;         /* T = N = K of the timed product */
	double gemm_tflops;     /* our matmul op, TFLOP/s */
	double cublaslt_tflops; /* cuBLASLt baseline, 0 when it did not load */
	char cublaslt_note[128]; /* why there is no baseline, or "" */
	int runtime_version;    /* CUDA runtime, e.g. 13000 */
};
/* The matrix-rate ceiling roofline fractions use: the faster of our
 * matmul and the cuBLASLt baseline, both measured in the same run. */
static inline double atlas_bench_matrix_rate(const struct atlas_bench_ceilings *c)
{
	return c->cublaslt_tflops > c->gemm_tflops ? c->cublaslt_tflops : c->gemm_tflops;
}

/* With the backend's `measure` op when it has one; on the CPU backend
 * the copy is a threaded memcpy and the product is its matmul op (F32
 * activations, BF16 weights), timed with the monotonic clock here. */
int atlas_bench_ceilings(struct atlas_backend *be, int64_t copy_bytes, int64_t gemm_n,
			 struct atlas_bench_ceilings *out);

/* Make `be` able to build synthetic models: the CPU backend has no
 * fill_random op, and its memory is host memory, so the fill is done on
 * the host here (installed in be's table). Other backends are left as
 * they are. */
void atlas_bench_prepare(struct atlas_backend *be);

/* Monotonic clock, milliseconds. */
double atlas_bench_now_ms(void);

/* One decode run: `batch` sequences each prefilled with `prompt` random
 * tokens, then `gen` timed steps of one token per sequence (greedy, on
 * the device), after `warmup` untimed steps. be is m's backend (rank
 * 0's under tensor parallelism: rank 0 computes the MoE layers). */
struct atlas_bench_decode {
	int64_t batch, prompt, gen, warmup; /* the parameters */
	double ttft_ms;         /* prefill of the first sequence to its first token */
	double total_ms;        /* all prefills plus every step (generate) */
	double e2e_tok_s;       /* batch * (warmup + gen + 1) / total_ms */
	double step_ms;         /* mean time of one decode step */
	double tok_s;           /* batch * gen / decode time */
	int64_t weight_bytes;   /* read per step (an MoE model: the experts
				 * counted, see expert_bytes) */
	bool moe;               /* the model has routed experts */
	double expert_bytes;    /* routed experts' bytes of weight_bytes: the
				 * experts the timed steps read (the backend's
				 * moe_experts_read) times one expert's bytes,
				 * per step; top_k per sparse layer when the
				 * backend does not count */
	double experts_read;    /* (layer, expert) reads per step, < 0: not
				 * counted */
	double kv_bytes;        /* KV cache bytes read per step, mean over steps */
	double floor_ms;        /* (weights + KV) / copy bandwidth */
	double roofline;        /* floor_ms / step_ms */
};
int atlas_bench_run_decode(struct atlas_model *m, struct atlas_backend *be, int64_t batch,
			   int64_t prompt, int64_t gen, int64_t warmup, double copy_gbs,
			   struct atlas_bench_decode *r);

/* What a speculative step with an MTP head costs at batch 1 (decode
 * --speculative mtp): after a `prompt`-token prefill (the head caught up
 * on it), `steps` timed rounds (after one untimed) of
 *   verify  the model's step over the last token and k drafts (1 + k
 *           rows, the logits of every row to the host, as the engine's
 *           verification takes them), then
 *   head    the head's catch-up over those 1 + k positions (from the
 *           rows the step left) and its k - 1 one-token passes, each
 *           drawing its draft on the device where it can,
 * and as many plain one-token steps. Drafts are random ids: the cost of a
 * step does not depend on how many are accepted. */
struct atlas_bench_spec {
	int64_t k, prompt, steps;  /* the parameters */
	double step_ms;            /* a plain one-token step */
	double verify_ms;          /* the model's step of 1 + k rows */
	double head_ms;            /* the head's passes */
	double spec_ms;            /* verify_ms + head_ms */
	double breakeven;          /* spec_ms / step_ms: the tokens a step must
				    * give for speculation to pay */
	double speedup[3];         /* step_ms * E(a) / spec_ms for an acceptance
				    * a of 0.6, 0.8 and 0.9 a draft, where E(a) =
				    * (1 - a^(k+1)) / (1 - a) tokens a step */
};
int atlas_bench_run_spec(struct atlas_model *m, struct atlas_model *head, int64_t k,
			 int64_t prompt, int64_t steps, struct atlas_bench_spec *r);
json_object *atlas_bench_spec_json(const struct atlas_bench_spec *r);

/* One prefill run: a `prompt`-token prompt to its first token, best of
 * `reps` after one warm-up. */
struct atlas_bench_prefill {
	int64_t prompt;         /* tokens */
	int64_t reps;           /* timed repetitions */
	double ms;              /* best time */
	double tok_s;           /* prompt / ms */
	double flops;           /* matrix products + attention FLOPs */
	double tflops;          /* flops / ms */
	double roofline;        /* tflops / measured matrix rate */
};
int atlas_bench_run_prefill(struct atlas_model *m, int64_t prompt, int64_t reps,
			    double gemm_tflops, struct atlas_bench_prefill *r);

/* Per-kernel device times of one decode step at `batch` after a
 * `prompt`-token prefill (what == "decode") or of one `prompt`-token
 * prefill ("prefill"); fills up to max rows, returns the count. Needs
 * the backend's profile ops (be is m's backend); decode steps run op by
 * op while profiling, recorded again afterwards. */
int atlas_bench_profile(struct atlas_model *m, struct atlas_backend *be, const char *what,
			int64_t batch, int64_t prompt, struct atlas_kernel_time *rows, int max);

/* Machine facts for the report. */
struct atlas_bench_machine {
	char gpu[128];          /* GPU name, or "none" */
	int driver;             /* driver version (e.g. 13000), 0 if unknown */
	int runtime;            /* CUDA runtime version, 0 if unknown */
	const char *commit;     /* git revision of the build */
	const char *version;    /* Atlas version */
	const char *target;     /* kernel targets built in, or "" */
	int threads;            /* CPU threads of the pool */
};
void atlas_bench_machine(struct atlas_backend *be, struct atlas_bench_machine *out);

/* --- kernels: every op at a model's shapes (kernels.c) ------------------ */

struct atlas_bench_kernel {
	char op[24];            /* backend op ("matmul", "attention", ...) */
	char what[24];          /* which use of it ("gate", "down", "decode", ...) */
	char shape[64];         /* its sizes, e.g. "T=1 N=12288 K=4096" */
	int64_t tokens;         /* rows (tokens) of the call */
	double ms;              /* median of the timed repetitions */
	double bytes;           /* bytes the op must move at least */
	double flops;           /* floating-point operations */
	double gbs;             /* bytes / ms */
	double tflops;          /* flops / ms */
	double roofline;        /* max(gbs / copy ceiling, tflops / matrix ceiling) */
	double base_ms;         /* the baseline's time (CPU reference), < 0 if none */
};

struct atlas_bench_kernels_params {
	const char *filter;     /* only ops whose name contains it, or NULL */
	const int64_t *tokens;  /* token counts of the calls ([n_tokens]) */
	int n_tokens;
	int64_t context;        /* keys the attention rows see */
	int64_t reps;           /* timed repetitions (median kept), after one warm-up */
	uint64_t seed;          /* buffer contents */
};

/* Time every op of `be` at the shapes of `cfg`; `base` (or NULL) runs the
 * same calls as the baseline (the CPU reference under a GPU backend).
 * Times on a backend with per-kernel profiling come from its device
 * events, else from the clock around the op and a sync. Fills up to max
 * rows and returns how many, or a negative code. */
int atlas_bench_kernels(struct atlas_backend *be, struct atlas_backend *base,
			const struct atlas_config *cfg, const struct atlas_bench_ceilings *ceil,
			const struct atlas_bench_kernels_params *p, struct atlas_bench_kernel *rows,
			int max);
/* The op names --filter matches, comma-separated; static string. */
const char *atlas_bench_kernel_ops(void);

/* --- the JSON document (report.c) ---------------------------------------- */

/* The start of every atlas-bench JSON document: command, version, commit,
 * UTC time, machine (GPU name, driver and CUDA versions or "none", the
 * device). Owned by the caller (json_object_put). */
json_object *atlas_bench_doc_new(const char *command, const char *device,
				 const struct atlas_bench_machine *mach);
json_object *atlas_bench_ceilings_json(const struct atlas_bench_ceilings *c);
json_object *atlas_bench_model_json(const struct atlas_config *c, const char *source,
				    int64_t weight_bytes);
json_object *atlas_bench_decode_json(const struct atlas_bench_decode *d, bool generate);
json_object *atlas_bench_prefill_json(const struct atlas_bench_prefill *p);
json_object *atlas_bench_kernel_json(const struct atlas_bench_kernel *k);
json_object *atlas_bench_profile_json(const struct atlas_kernel_time *rows, int n);
/* The document as pretty text (malloc'd, caller frees), or NULL. */
char *atlas_bench_doc_text(json_object *doc);

#endif
