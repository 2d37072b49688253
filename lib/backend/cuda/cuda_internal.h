/* cuda_internal.h - private state of the CUDA backend, shared by cuda.c
 * (device, kernels, memory) and cuda_ops.c (the ops). The only place
 * outside kernels/ that includes CUDA headers. */
#ifndef ATLAS_BACKEND_CUDA_INTERNAL_H
#define ATLAS_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "../backend.h"
#include "../kernel_registry.h"

/* The entry points of kernels/ABI.md, in lookup order. */
enum atlas_cuda_kernel {
	ATLAS_CK_EMBED,
	ATLAS_CK_RMSNORM,
	ATLAS_CK_ADD_RMSNORM,
	ATLAS_CK_GEMV,
	ATLAS_CK_GEMM,
	ATLAS_CK_GEMV_F32,
	ATLAS_CK_GEMM_F32,
	ATLAS_CK_ROPE,
	ATLAS_CK_KV_STORE,
	ATLAS_CK_ATTENTION,
	ATLAS_CK_SWIGLU,
	ATLAS_CK_ADD,
	ATLAS_CK_TO_F32,
	ATLAS_CK_SAMPLE,
	ATLAS_CK_FILL,
	ATLAS_CK_ATT_PART,
	ATLAS_CK_ATT_COMBINE,
	ATLAS_CK_COUNT,
};

/* Most kernel launches one profile records (a decode step of a 64-layer
 * model is ~1,000). */
#define ATLAS_CUDA_PROF_MAX 16384

struct cuda_ctx {
	int dev;                      /* device ordinal */
	int sms;                      /* streaming multiprocessors: sizes split-K grids */
	char arch[16];                /* "sm90" */
	char gpu_name[128];           /* "NVIDIA H200" */
	cudaStream_t stream;          /* all work goes here */
	cudaLibrary_t lib;            /* the loaded kernel target */
	int lib_loaded;               /* lib is valid */
	const struct atlas_kernel_blob *blob; /* the target's registry entry */
	char target[64];              /* its name, "sm90/common" */
	cudaKernel_t kern[ATLAS_CK_COUNT]; /* entry points */
	const char *last_kernel;      /* for error messages */
	char *arena;                  /* the current arena: one allocation per model */
	size_t arena_size, arena_used; /* bytes */
	char *old_arenas[16];         /* arenas of earlier models, freed at destroy */
	size_t old_sizes[16];         /* their sizes */
	int n_old;                    /* entries in old_arenas */
	size_t outside;               /* bytes allocated outside the arena */
	float *f32_stage;             /* to_f32 staging */
	size_t f32_cap;               /* its bytes */
	float *d_args;                /* sample args, [n, 5] */
	size_t args_cap;              /* its bytes */
	float *d_scratch;             /* sample scratch */
	size_t scratch_cap;           /* its bytes */
	float *att_part;              /* split-K attention partials: a fixed size,
				       * allocated at creation so that a graph
				       * capture never sees it move */
	size_t att_cap;               /* its bytes */
	int capturing;                /* a graph capture is open on stream */
	int prof_on;                  /* time every launch (profile op) */
	int prof_n;                   /* launches timed so far */
	cudaEvent_t *prof_ev;         /* [2 * ATLAS_CUDA_PROF_MAX] start/stop pairs */
	unsigned char *prof_k;        /* [ATLAS_CUDA_PROF_MAX] kernel of each pair */
};

/* Launch kernel k on the backend's stream, grid (gx, gy), 1-D blocks;
 * errors name the kernel. A zero-sized grid is a no-op. */
int atlas_cuda_launch(struct cuda_ctx *c, enum atlas_cuda_kernel k, unsigned gx, unsigned gy,
		      unsigned block, size_t smem, void **args);
/* 0, or ATLAS_EIO naming `what`, the CUDA error and the last kernel. */
int atlas_cuda_check(struct cuda_ctx *c, cudaError_t e, const char *what);
/* Make *buf hold at least `need` bytes of device memory (grows rarely). */
int atlas_cuda_scratch(struct atlas_backend *be, void **buf, size_t *cap, size_t need);
const char *atlas_cuda_kernel_name(enum atlas_cuda_kernel k);
/* Bytes of att_part: the attention op runs tokens in groups that fit. */
#define ATLAS_CUDA_ATT_SCRATCH ((size_t)64 << 20)

/* Fill the op pointers of be. */
void atlas_cuda_ops_init(struct atlas_backend *be);
/* Fill the optional speed and benchmark ops (cuda_bench.c), and free
 * what they hold at destroy. */
void atlas_cuda_bench_init(struct atlas_backend *be);
void atlas_cuda_bench_release(struct cuda_ctx *c);

#endif
