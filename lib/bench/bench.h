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

#include "../backend/backend.h"
#include "../io/config.h"
#include "../model/model.h"

/* The config of a named real shape ("qwen3-8b", "llama3-8b", "qwen3-0.6b",
 * "qwen3-32b", the table of scripts/make-synthetic.py plus qwen3-32b).
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
int atlas_bench_ceilings(struct atlas_backend *be, int64_t copy_bytes, int64_t gemm_n,
			 struct atlas_bench_ceilings *out);

/* One decode run: `batch` sequences each prefilled with `prompt` random
 * tokens, then `gen` timed steps of one token per sequence (greedy, on
 * the device), after `warmup` untimed steps. */
struct atlas_bench_decode {
	int64_t batch, prompt, gen, warmup; /* the parameters */
	double ttft_ms;         /* prefill of the first sequence to its first token */
	double step_ms;         /* mean time of one decode step */
	double tok_s;           /* batch * gen / decode time */
	int64_t weight_bytes;   /* read per step */
	double kv_bytes;        /* KV cache bytes read per step, mean over steps */
	double floor_ms;        /* (weights + KV) / copy bandwidth */
	double roofline;        /* floor_ms / step_ms */
};
int atlas_bench_run_decode(struct atlas_model *m, int64_t batch, int64_t prompt, int64_t gen,
			   int64_t warmup, double copy_gbs, struct atlas_bench_decode *r);

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
	char gpu[128];          /* GPU name, or "" */
	int driver;             /* driver version (e.g. 13000), 0 if unknown */
	int runtime;            /* CUDA runtime version, 0 if unknown */
	const char *commit;     /* git revision of the build */
	const char *version;    /* Atlas version */
	const char *target;     /* kernel targets built in, or "" */
};
void atlas_bench_machine(struct atlas_backend *be, struct atlas_bench_machine *out);

/* Everything one atlas-bench decode/prefill invocation measured. */
struct atlas_bench_report {
	const char *command;    /* "decode" or "prefill" */
	const char *shape;      /* --synthetic name */
	const char *device;     /* --device */
	uint64_t seed;          /* weights and prompts */
	const struct atlas_config *cfg; /* the model's shape */
	struct atlas_bench_machine machine;
	struct atlas_bench_ceilings ceil;
	const struct atlas_bench_decode *decode; /* [n_decode] */
	int n_decode;
	const struct atlas_bench_prefill *prefill; /* [n_prefill] */
	int n_prefill;
	const struct atlas_kernel_time *prof; /* [n_prof] decode step, or NULL */
	int n_prof;
	const struct atlas_kernel_time *prof2; /* [n_prof2] prefill, or NULL */
	int n_prof2;
};
/* The report as one JSON object (a malloc'd string the caller frees), or
 * NULL with a message. */
char *atlas_bench_json(const struct atlas_bench_report *r);

#endif
