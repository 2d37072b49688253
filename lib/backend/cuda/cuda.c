/* cuda.c - the CUDA backend: device choice, kernel target, memory arena,
 * copies; the ops are in cuda_ops.c.
 *
 * Kernels come from the fatbins embedded in libatlas (kernel_registry.h):
 * the target for the GPU's architecture is loaded with
 * cudaLibraryLoadData and each entry point is looked up by its stable
 * name (kernels/ABI.md). At creation the architecture's common target is
 * loaded; once the model is known, specialize() switches to its
 * (family, quant) leaf when one exists. Memory comes from one arena that
 * reserve() allocates before the model loads, so no step allocates. All
 * work is queued on one stream; download and sync wait for it.
 *
 * The static CUDA runtime finds the driver at run time: on a machine with
 * no driver, creation fails cleanly and "auto" falls back to the CPU. */
#include "cuda_internal.h"
#include "kernel_args.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "../../core/log.h"

static const char *const kernel_names[ATLAS_CK_COUNT] = {
	[ATLAS_CK_EMBED] = "atlas_embed",
	[ATLAS_CK_RMSNORM] = "atlas_rmsnorm",
	[ATLAS_CK_ADD_RMSNORM] = "atlas_add_rmsnorm",
	[ATLAS_CK_GEMV] = "atlas_gemv",
	[ATLAS_CK_GEMM] = "atlas_gemm",
	[ATLAS_CK_GEMM_F32] = "atlas_gemm_f32",
	[ATLAS_CK_ROPE] = "atlas_rope",
	[ATLAS_CK_KV_STORE] = "atlas_kv_store",
	[ATLAS_CK_ATTENTION] = "atlas_attention",
	[ATLAS_CK_SWIGLU] = "atlas_swiglu",
	[ATLAS_CK_ADD] = "atlas_add",
	[ATLAS_CK_TO_F32] = "atlas_to_f32",
	[ATLAS_CK_SAMPLE] = "atlas_sample",
	[ATLAS_CK_FILL] = "atlas_fill_random",
	[ATLAS_CK_ATT_PART] = "atlas_attention_part",
	[ATLAS_CK_GEMM_TC] = "atlas_gemm_tc",
	[ATLAS_CK_GEMM_TC_F32] = "atlas_gemm_tc_f32",
	[ATLAS_CK_ATT_PREFILL] = "atlas_attention_prefill",
	[ATLAS_CK_QK_ROPE_STORE] = "atlas_qk_rope_store",
	[ATLAS_CK_GEMV_TC8] = "atlas_gemv_tc8",
	[ATLAS_CK_GEMV_TC16] = "atlas_gemv_tc16",
	[ATLAS_CK_GEMV_TC32] = "atlas_gemv_tc32",
	[ATLAS_CK_GEMV_TC64] = "atlas_gemv_tc64",
	[ATLAS_CK_GEMV_BULK] = "atlas_gemv_bulk",
	[ATLAS_CK_GEMM_TC_REDUCE] = "atlas_gemm_tc_reduce",
	[ATLAS_CK_DECODE_FUSED] = "atlas_decode_fused",
	[ATLAS_CK_DECODE_FUSED_MOE] = "atlas_decode_fused_moe",
	[ATLAS_CK_ARGMAX] = "atlas_argmax",
	[ATLAS_CK_MASK_LOGITS] = "atlas_mask_logits",
	[ATLAS_CK_MOE_ROUTE] = "atlas_moe_route",
	[ATLAS_CK_MOE_GEMV8] = "atlas_moe_gemv8",
	[ATLAS_CK_MOE_GEMV16] = "atlas_moe_gemv16",
	[ATLAS_CK_MOE_GEMV32] = "atlas_moe_gemv32",
	[ATLAS_CK_MOE_GEMV64] = "atlas_moe_gemv64",
	[ATLAS_CK_MOE_GEMV_ANY] = "atlas_moe_gemv_any",
	[ATLAS_CK_MOE_COMBINE] = "atlas_moe_combine",
	[ATLAS_CK_MOE_GATHER] = "atlas_moe_gather",
	[ATLAS_CK_MOE_GEMM_TC] = "atlas_moe_gemm_tc",
	[ATLAS_CK_GEMM_INV] = "atlas_gemm_inv",
	[ATLAS_CK_GEMM_INV_T64] = "atlas_gemm_inv_t64",
	[ATLAS_CK_GEMM_INV_T32] = "atlas_gemm_inv_t32",
	[ATLAS_CK_GEMM_INV_REDUCE] = "atlas_gemm_inv_reduce",
	[ATLAS_CK_GEMM_TC_INV] = "atlas_gemm_tc_inv",
	[ATLAS_CK_GEMV_TC8_F8] = "atlas_gemv_tc8_f8",
	[ATLAS_CK_GEMV_TC16_F8] = "atlas_gemv_tc16_f8",
	[ATLAS_CK_GEMV_TC32_F8] = "atlas_gemv_tc32_f8",
	[ATLAS_CK_GEMV_TC64_F8] = "atlas_gemv_tc64_f8",
	[ATLAS_CK_F8B_DEQUANT] = "atlas_f8b_dequant",
	[ATLAS_CK_GEMV_F8] = "atlas_gemv_f8",
	[ATLAS_CK_GEMV_TC8_W4] = "atlas_gemv_tc8_w4",
	[ATLAS_CK_GEMV_TC16_W4] = "atlas_gemv_tc16_w4",
	[ATLAS_CK_GEMV_TC32_W4] = "atlas_gemv_tc32_w4",
	[ATLAS_CK_GEMV_TC64_W4] = "atlas_gemv_tc64_w4",
	[ATLAS_CK_W4B_DEQUANT] = "atlas_w4b_dequant",
	[ATLAS_CK_GEMV_W4] = "atlas_gemv_w4",
	[ATLAS_CK_GEMV_TC8_FP4] = "atlas_gemv_tc8_fp4",
	[ATLAS_CK_GEMV_TC16_FP4] = "atlas_gemv_tc16_fp4",
	[ATLAS_CK_GEMV_TC32_FP4] = "atlas_gemv_tc32_fp4",
	[ATLAS_CK_GEMV_TC64_FP4] = "atlas_gemv_tc64_fp4",
	[ATLAS_CK_FP4B_DEQUANT] = "atlas_fp4b_dequant",
	[ATLAS_CK_GEMV_FP4] = "atlas_gemv_fp4",
	[ATLAS_CK_KV_STORE_Q] = "atlas_kv_store_q",
	[ATLAS_CK_QK_ROPE_STORE_Q] = "atlas_qk_rope_store_q",
	[ATLAS_CK_ATT_PART_FP8] = "atlas_attention_part_fp8",
	[ATLAS_CK_ATT_PART_Q4] = "atlas_attention_part_q4",
	[ATLAS_CK_KV_DEQUANT] = "atlas_kv_dequant",
	[ATLAS_CK_GEMM_TC_F8] = "atlas_gemm_tc_f8",
	[ATLAS_CK_MOE_GEMV1] = "atlas_moe_gemv1",
	[ATLAS_CK_FP8_ACT_QUANT] = "atlas_fp8_act_quant",
	[ATLAS_CK_ATT_INV_PREFILL] = "atlas_attention_inv_prefill",
	[ATLAS_CK_ATT_INV_SPLIT] = "atlas_attention_inv_split",
	[ATLAS_CK_ATT_INV_MERGE] = "atlas_attention_inv_merge",
	[ATLAS_CK_ROPE_PARTIAL] = "atlas_rope_partial",
	[ATLAS_CK_ATTN_GATE] = "atlas_attn_gate",
	[ATLAS_CK_GDN_CONV] = "atlas_gdn_conv",
	[ATLAS_CK_GDN_RULE16] = "atlas_gdn_rule_16",
	[ATLAS_CK_GDN_RULE32] = "atlas_gdn_rule_32",
	[ATLAS_CK_GDN_RULE64] = "atlas_gdn_rule_64",
	[ATLAS_CK_GDN_RULE128] = "atlas_gdn_rule_128",
};

/* Speed-only kernels a target may lack (c->kern[k] is then NULL and the
 * ops fall back to the baseline kernels). */
static const unsigned char optional_kernel[ATLAS_CK_COUNT] = {
	[ATLAS_CK_GEMM_TC] = 1,
	[ATLAS_CK_GEMM_TC_F32] = 1,
	[ATLAS_CK_ATT_PREFILL] = 1,
	/* without them, invariant steps take the split-K kernel */
	[ATLAS_CK_ATT_INV_PREFILL] = 1,
	[ATLAS_CK_ATT_INV_SPLIT] = 1,
	[ATLAS_CK_ATT_INV_MERGE] = 1,
	/* without them, hybrid models fail at their first step, naming it */
	[ATLAS_CK_ROPE_PARTIAL] = 1,
	[ATLAS_CK_ATTN_GATE] = 1,
	[ATLAS_CK_GDN_CONV] = 1,
	[ATLAS_CK_GDN_RULE16] = 1,
	[ATLAS_CK_GDN_RULE32] = 1,
	[ATLAS_CK_GDN_RULE64] = 1,
	[ATLAS_CK_GDN_RULE128] = 1,
	[ATLAS_CK_GEMV_TC8] = 1,
	[ATLAS_CK_GEMV_TC16] = 1,
	[ATLAS_CK_GEMV_TC32] = 1,
	[ATLAS_CK_GEMV_TC64] = 1,
	[ATLAS_CK_GEMV_BULK] = 1,
	[ATLAS_CK_GEMM_TC_REDUCE] = 1,
	[ATLAS_CK_DECODE_FUSED] = 1, /* its shared memory is set by fused_prepare */
	[ATLAS_CK_DECODE_FUSED_MOE] = 1,
	[ATLAS_CK_ARGMAX] = 1,
	[ATLAS_CK_MASK_LOGITS] = 1, /* without it, masked rows are refused */
	/* without them the moe op fails with the kernel's name */
	[ATLAS_CK_MOE_ROUTE] = 1,
	[ATLAS_CK_MOE_GEMV8] = 1,
	[ATLAS_CK_MOE_GEMV16] = 1,
	[ATLAS_CK_MOE_GEMV32] = 1,
	[ATLAS_CK_MOE_GEMV64] = 1,
	[ATLAS_CK_MOE_GEMV_ANY] = 1,
	[ATLAS_CK_MOE_COMBINE] = 1,
	[ATLAS_CK_MOE_GATHER] = 1,
	[ATLAS_CK_MOE_GEMM_TC] = 1,
	[ATLAS_CK_GEMM_INV] = 1, /* without them, invariant steps take the GEMV */
	[ATLAS_CK_GEMM_INV_T64] = 1,
	[ATLAS_CK_GEMM_INV_T32] = 1,
	[ATLAS_CK_GEMM_INV_REDUCE] = 1,
	[ATLAS_CK_GEMM_TC_INV] = 1,
	/* without them, FP8 checkpoints load dequantized (f8b_weights off) */
	[ATLAS_CK_GEMV_TC8_F8] = 1,
	[ATLAS_CK_GEMV_TC16_F8] = 1,
	[ATLAS_CK_GEMV_TC32_F8] = 1,
	[ATLAS_CK_GEMV_TC64_F8] = 1,
	[ATLAS_CK_F8B_DEQUANT] = 1,
	[ATLAS_CK_GEMV_F8] = 1, /* without it, the tensor-core FP8 GEMV */
	/* without them, 4-bit checkpoints load dequantized (w4b_weights off) */
	[ATLAS_CK_GEMV_TC8_W4] = 1,
	[ATLAS_CK_GEMV_TC16_W4] = 1,
	[ATLAS_CK_GEMV_TC32_W4] = 1,
	[ATLAS_CK_GEMV_TC64_W4] = 1,
	[ATLAS_CK_W4B_DEQUANT] = 1,
	[ATLAS_CK_GEMV_W4] = 1, /* without it, the tensor-core W4 GEMV */
	/* without them, no W8A8 (the weight-only FP8 paths) */
	[ATLAS_CK_GEMM_TC_F8] = 1,
	[ATLAS_CK_MOE_GEMV1] = 1, /* without it, atlas_moe_gemv8 */
	[ATLAS_CK_FP8_ACT_QUANT] = 1,
	/* without them, NVFP4 checkpoints load dequantized (fp4b_weights off) */
	[ATLAS_CK_GEMV_TC8_FP4] = 1,
	[ATLAS_CK_GEMV_TC16_FP4] = 1,
	[ATLAS_CK_GEMV_TC32_FP4] = 1,
	[ATLAS_CK_GEMV_TC64_FP4] = 1,
	[ATLAS_CK_FP4B_DEQUANT] = 1,
	[ATLAS_CK_GEMV_FP4] = 1, /* without it, the tensor-core NVFP4 GEMV */
};

/* The most dynamic shared memory each kernel is launched with, when over
 * the default 48 KiB (kernel_args.h); set once when the target loads.
 * Every kernel here must be in optional_kernel. */
static const int dyn_smem[ATLAS_CK_COUNT] = {
	[ATLAS_CK_GEMM_TC] = ATLAS_TCG_SMEM,
	[ATLAS_CK_GEMM_TC_F32] = ATLAS_TCG_SMEM,
	[ATLAS_CK_GEMM_TC_INV] = ATLAS_TCG_SMEM,
	[ATLAS_CK_GEMM_TC_F8] = ATLAS_TCG_SMEM,
	[ATLAS_CK_GEMV_TC8] = ATLAS_GTC_SMEM(1),
	[ATLAS_CK_GEMV_TC16] = ATLAS_GTC_SMEM(2),
	[ATLAS_CK_GEMV_TC32] = ATLAS_GTC_SMEM(4),
	[ATLAS_CK_GEMV_TC64] = ATLAS_GTC_SMEM(8),
	[ATLAS_CK_GEMV_TC8_F8] = ATLAS_GTC_SMEM(1),
	[ATLAS_CK_GEMV_TC16_F8] = ATLAS_GTC_SMEM(2),
	[ATLAS_CK_GEMV_TC32_F8] = ATLAS_GTC_SMEM(4),
	[ATLAS_CK_GEMV_TC64_F8] = ATLAS_GTC_SMEM(8),
	[ATLAS_CK_GEMV_TC8_W4] = ATLAS_GTC_SMEM(1),
	[ATLAS_CK_GEMV_TC16_W4] = ATLAS_GTC_SMEM(2),
	[ATLAS_CK_GEMV_TC32_W4] = ATLAS_GTC_SMEM(4),
	[ATLAS_CK_GEMV_TC64_W4] = ATLAS_GTC_SMEM(8),
	[ATLAS_CK_GEMV_TC8_FP4] = ATLAS_GTC_SMEM(1),
	[ATLAS_CK_GEMV_TC16_FP4] = ATLAS_GTC_SMEM(2),
	[ATLAS_CK_GEMV_TC32_FP4] = ATLAS_GTC_SMEM(4),
	[ATLAS_CK_GEMV_TC64_FP4] = ATLAS_GTC_SMEM(8),
	[ATLAS_CK_GEMV_BULK] = ATLAS_GBK_SMEM_MAX,
	[ATLAS_CK_MOE_GEMV8] = ATLAS_GTC_SMEM(1),
	[ATLAS_CK_MOE_GEMV16] = ATLAS_GTC_SMEM(2),
	[ATLAS_CK_MOE_GEMV32] = ATLAS_GTC_SMEM(4),
	[ATLAS_CK_MOE_GEMV64] = ATLAS_GTC_SMEM(8),
	[ATLAS_CK_MOE_GEMM_TC] = ATLAS_TCG_SMEM,
	[ATLAS_CK_GEMM_INV] = ATLAS_GINV_SMEM(0),
	[ATLAS_CK_GEMM_INV_T64] = ATLAS_GINV_SMEM(1),
	[ATLAS_CK_GEMM_INV_T32] = ATLAS_GINV_SMEM(2),
	[ATLAS_CK_MOE_ROUTE] = 32 * ATLAS_MOE_MAX_E * 4,
};

const char *atlas_cuda_kernel_name(enum atlas_cuda_kernel k)
{
	return kernel_names[k];
}

int atlas_cuda_check(struct cuda_ctx *c, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	return atlas_error(ATLAS_EIO, "CUDA %s failed: %s (after kernel '%s')", what,
			   cudaGetErrorString(e), c->last_kernel ? c->last_kernel : "none");
}

int atlas_cuda_launch(struct cuda_ctx *c, enum atlas_cuda_kernel k, unsigned gx, unsigned gy,
		      unsigned block, size_t smem, void **args)
{
	return atlas_cuda_launch_z(c, k, gx, gy, 1, block, smem, args);
}

int atlas_cuda_launch_z(struct cuda_ctx *c, enum atlas_cuda_kernel k, unsigned gx, unsigned gy,
			unsigned gz, unsigned block, size_t smem, void **args)
{
	dim3 grid = {gx, gy, gz}, blk = {block, 1, 1};
	if (gx == 0 || gy == 0 || gz == 0 || c->skip[k])
		return 0; /* nothing to do (or ATLAS_CUDA_SKIP) */
	if (!c->kern[k])
		return atlas_error(ATLAS_EUNSUPPORTED, "kernel target %s lacks '%s'", c->target,
				   kernel_names[k]);
	int timed = c->prof_on && c->prof_n < ATLAS_CUDA_PROF_MAX;
	if (timed)
		cudaEventRecord(c->prof_ev[2 * c->prof_n], c->stream);
	cudaError_t e;
	if (c->pdl) { /* every kernel waits for its predecessor (kernels/ABI.md) */
		cudaLaunchAttribute attr;
		memset(&attr, 0, sizeof(attr));
		attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
		attr.val.programmaticStreamSerializationAllowed = 1;
		cudaLaunchConfig_t cfg;
		memset(&cfg, 0, sizeof(cfg));
		cfg.gridDim = grid, cfg.blockDim = blk, cfg.dynamicSmemBytes = smem;
		cfg.stream = c->stream, cfg.attrs = &attr, cfg.numAttrs = 1;
		e = cudaLaunchKernelExC(&cfg, (const void *)c->kern[k], args);
	} else {
		e = cudaLaunchKernel((const void *)c->kern[k], grid, blk, args, smem, c->stream);
	}
	if (timed) {
		cudaEventRecord(c->prof_ev[2 * c->prof_n + 1], c->stream);
		c->prof_k[c->prof_n++] = (unsigned char)k;
	}
	if (e == cudaSuccess)
		e = cudaGetLastError();
	c->last_kernel = kernel_names[k];
	if (e != cudaSuccess)
		return atlas_error(ATLAS_EIO, "CUDA kernel '%s' failed: %s", kernel_names[k],
				   cudaGetErrorString(e));
	return 0;
}

/* True when the environment variable `name` is set to `value`. */
static int env_is(const char *name, const char *value)
{
	const char *v = getenv(name);
	return v && strcmp(v, value) == 0;
}

/* The tuning switches of kernels/ABI.md, read once at creation. */
static void read_switches(struct cuda_ctx *c, int major)
{
	c->pdl = major >= 9 && !env_is("ATLAS_CUDA_PDL", "0");
	c->gemv_pre = !env_is("ATLAS_CUDA_GEMV_PRE", "0");
	c->fused = !env_is("ATLAS_CUDA_FUSED", "0");
	c->fused_quant = env_is("ATLAS_CUDA_FUSED_QUANT", "0") ? 0 : env_is("ATLAS_CUDA_FUSED_QUANT", "1") ? 2 : 1;
	c->fused_moe = !env_is("ATLAS_CUDA_FUSED_MOE", "0");
	const char *fm = getenv("ATLAS_CUDA_FUSED_MODE");
	c->fused_mode = fm && atoi(fm) >= 1 && atoi(fm) <= 3 ? atoi(fm) : 0;
	c->fd_trace = env_is("ATLAS_CUDA_FD_TRACE", "1");
	c->no_split_k = env_is("ATLAS_CUDA_SPLITK", "0");
	const char *rpb = getenv("ATLAS_CUDA_GEMV_RPB");
	c->gemv_rpb = rpb && (!strcmp(rpb, "1") || !strcmp(rpb, "2") || !strcmp(rpb, "4") ||
			      !strcmp(rpb, "8"))
			  ? atoi(rpb)
			  : 0;
	const char *mk = getenv("ATLAS_CUDA_ATT_MINKEYS");
	c->att_minkeys = mk && atoi(mk) >= 32 ? atoi(mk) : 0;
	const char *as = getenv("ATLAS_CUDA_ATT_SPLITS");
	c->att_splits = as && atoi(as) >= 1 && atoi(as) <= 64 ? atoi(as) : 0;
	c->att_inv = !env_is("ATLAS_CUDA_ATT_INV", "0");
	c->att_tc = env_is("ATLAS_CUDA_ATT_TC", "1");
	const char *fmin = getenv("ATLAS_CUDA_FLASH_MIN_T");
	c->flash_min_t = fmin && atoi(fmin) > 0 ? atoi(fmin) : ATLAS_CUDA_FLASH_MIN_T;
	const char *tmin = getenv("ATLAS_CUDA_TC_MIN_T");
	c->tc_min_t = tmin && atoi(tmin) > 0 ? atoi(tmin) : ATLAS_CUDA_TC_MIN_T;
	const char *imin = getenv("ATLAS_CUDA_INV_MIN_T");
	c->inv_min_t = imin && atoi(imin) > 0 ? atoi(imin) : ATLAS_CUDA_INV_MIN_T;
	const char *wmin = getenv("ATLAS_CUDA_INV_WG_MIN_T");
	c->inv_wg_min_t = wmin && atoi(wmin) > 0 ? atoi(wmin) : ATLAS_CUDA_INV_WG_MIN_T;
	const char *fmax = getenv("ATLAS_CUDA_F8_GEMV_MAX_T");
	c->f8_gemv_max_t = fmax && atoi(fmax) >= 0 ? atoi(fmax) : ATLAS_CUDA_F8_GEMV_MAX_T;
	const char *ffma = getenv("ATLAS_CUDA_F8_FMA_MAX_T");
	c->f8_fma_max_t = ffma && !strcmp(ffma, "0") ? 0 : 1;
	c->w8a8 = env_is("ATLAS_FP8_W8A8", "1");
	const char *w8min = getenv("ATLAS_CUDA_W8A8_MIN_T");
	c->w8a8_min_t = w8min && atoi(w8min) > 0 ? atoi(w8min) : ATLAS_CUDA_W8A8_MIN_T;
	const char *mrpb = getenv("ATLAS_CUDA_MOE_RPB");
	c->moe_rpb = mrpb && (atoi(mrpb) == 1 || atoi(mrpb) == 2 || atoi(mrpb) == 4 || atoi(mrpb) == 8)
			 ? atoi(mrpb) : 0;
	c->moe_gemv1 = !env_is("ATLAS_CUDA_MOE_GEMV1", "0");
	const char *mmin = getenv("ATLAS_CUDA_MOE_GEMM_MIN_T");
	c->moe_gemm_min_t = mmin && atoi(mmin) > 0 ? atoi(mmin) : ATLAS_CUDA_MOE_GEMM_MIN_T;
	/* comma-separated kernel names */
	const char *skip = getenv("ATLAS_CUDA_SKIP");
	for (int i = 0; skip && i < ATLAS_CK_COUNT; i++) {
		const char *p = strstr(skip, kernel_names[i]);
		size_t len = strlen(kernel_names[i]);
		while (p && ((p > skip && p[-1] != ',') || (p[len] && p[len] != ',')))
			p = strstr(p + 1, kernel_names[i]);
		c->skip[i] = p != NULL;
	}
	c->gemv_mode = env_is("ATLAS_CUDA_GEMV", "fma")	   ? 1
		       : env_is("ATLAS_CUDA_GEMV", "tc")   ? 2
		       : env_is("ATLAS_CUDA_GEMV", "bulk") ? 3
							   : 0;
}

/* Load a target's fatbin and look up every entry point. */
static int load_target(struct cuda_ctx *c, const struct atlas_kernel_blob *b)
{
	cudaLibrary_t lib;
	cudaKernel_t kern[ATLAS_CK_COUNT];
	char name[96];
	cudaError_t e = cudaLibraryLoadData(&lib, b->data, NULL, NULL, 0, NULL, NULL, 0);
	if (e != cudaSuccess)
		return atlas_error(ATLAS_EIO, "cannot load kernel target %s: %s",
				   atlas_kernel_blob_name(b, name, sizeof(name)), cudaGetErrorString(e));
	for (int i = 0; i < ATLAS_CK_COUNT; i++) {
		e = cudaLibraryGetKernel(&kern[i], lib, kernel_names[i]);
		if (e != cudaSuccess && optional_kernel[i]) {
			/* the ops that use it fall back to other kernels */
			cudaGetLastError();
			kern[i] = NULL;
			continue;
		}
		if (e != cudaSuccess) {
			cudaLibraryUnload(lib);
			return atlas_error(ATLAS_EIO, "kernel target %s has no entry point '%s'",
					   atlas_kernel_blob_name(b, name, sizeof(name)),
					   kernel_names[i]);
		}
		/* kernels over the default 48 KiB of dynamic shared memory (all
		 * optional: a device that cannot give it falls back) */
		if (dyn_smem[i] &&
		    cudaKernelSetAttributeForDevice(kern[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
						    dyn_smem[i], c->dev) != cudaSuccess) {
			cudaGetLastError();
			kern[i] = NULL;
		}
		/* a kernel reloaded (another model's family picked other
		 * kernels, then this one's again) keeps what a model's
		 * fused_prepare gave it */
		if (kern[i] && c->smem_set[i] > (size_t)dyn_smem[i] &&
		    cudaKernelSetAttributeForDevice(kern[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
						    (int)c->smem_set[i], c->dev) != cudaSuccess) {
			cudaGetLastError();
			cudaLibraryUnload(lib);
			return atlas_error(ATLAS_EIO, "kernel target %s refused %zu bytes of shared "
					   "memory for '%s'", atlas_kernel_blob_name(b, name, sizeof(name)),
					   c->smem_set[i], kernel_names[i]);
		}
	}
	if (c->lib_loaded)
		cudaLibraryUnload(c->lib);
	c->lib = lib;
	c->lib_loaded = 1;
	memcpy(c->kern, kern, sizeof(kern));
	c->blob = b;
	atlas_kernel_blob_name(b, c->target, sizeof(c->target));
	return 0;
}

/* kernel_args.h's view of an F8B head is backend.h's */
_Static_assert(sizeof(struct atlas_f8b_head) == sizeof(struct atlas_f8b_head_k) &&
		       offsetof(struct atlas_f8b_head, nbc) == offsetof(struct atlas_f8b_head_k, nbc) &&
		       offsetof(struct atlas_f8b_head, K) == offsetof(struct atlas_f8b_head_k, K) &&
		       offsetof(struct atlas_f8b_head, scale_off) ==
			   offsetof(struct atlas_f8b_head_k, scale_off) &&
		       ATLAS_F8B_HEAD == ATLAS_F8B_HEAD_BYTES,
	       "struct atlas_f8b_head and struct atlas_f8b_head_k disagree");
_Static_assert(sizeof(struct atlas_w4b_head) == sizeof(struct atlas_w4b_head_k) &&
		       offsetof(struct atlas_w4b_head, g) == offsetof(struct atlas_w4b_head_k, g) &&
		       offsetof(struct atlas_w4b_head, K) == offsetof(struct atlas_w4b_head_k, K) &&
		       offsetof(struct atlas_w4b_head, z_off) ==
			   offsetof(struct atlas_w4b_head_k, z_off) &&
		       offsetof(struct atlas_w4b_head, s_off) ==
			   offsetof(struct atlas_w4b_head_k, s_off) &&
		       ATLAS_W4B_HEAD == ATLAS_W4B_HEAD_BYTES && ATLAS_DTYPE_W4B == 9 &&
		       ATLAS_DTYPE_U8 == 5,
	       "struct atlas_w4b_head and struct atlas_w4b_head_k disagree");
_Static_assert(sizeof(struct atlas_fp4b_head) == sizeof(struct atlas_fp4b_head_k) &&
		       offsetof(struct atlas_fp4b_head, ng) == offsetof(struct atlas_fp4b_head_k, ng) &&
		       offsetof(struct atlas_fp4b_head, gm) == offsetof(struct atlas_fp4b_head_k, gm) &&
		       offsetof(struct atlas_fp4b_head, K) == offsetof(struct atlas_fp4b_head_k, K) &&
		       offsetof(struct atlas_fp4b_head, s_off) ==
			   offsetof(struct atlas_fp4b_head_k, s_off) &&
		       ATLAS_FP4B_HEAD == ATLAS_FP4B_HEAD_BYTES && ATLAS_DTYPE_FP4B == 10,
	       "struct atlas_fp4b_head and struct atlas_fp4b_head_k disagree");

/* --- memory ------------------------------------------------------------- */

static int cuda_reserve(struct atlas_backend *be, size_t bytes)
{
	struct cuda_ctx *c = be->ctx;
	size_t free_b = 0, total_b = 0;
	if (c->arena) {
		/* another model on the same backend: keep the old arena (its
		 * blocks may still be in use) and start a new one */
		if (c->n_old == ATLAS_CUDA_MAX_ARENAS)
			return atlas_error(ATLAS_ENOMEM, "cuda: too many models on one backend");
		c->old_arenas[c->n_old] = c->arena;
		c->old_sizes[c->n_old++] = c->arena_size;
		c->arena = NULL;
	}
	bytes = (bytes + 255) & ~(size_t)255;
	cudaMemGetInfo(&free_b, &total_b);
	cudaError_t e = cudaMalloc((void **)&c->arena, bytes);
	if (e != cudaSuccess) {
		cudaGetLastError(); /* clear the sticky-free error state */
		return atlas_error(ATLAS_ENOMEM,
				   "out of GPU memory: the model needs %zu MiB, %zu MiB free of %zu MiB on %s",
				   bytes >> 20, free_b >> 20, total_b >> 20, c->gpu_name);
	}
	c->arena_size = bytes;
	c->arena_used = 0;
	return 0;
}

static void *cuda_alloc(struct atlas_backend *be, size_t bytes)
{
	struct cuda_ctx *c = be->ctx;
	size_t n = (bytes + 255) & ~(size_t)255;
	void *p = NULL;
	if (n == 0)
		n = 256;
	if (c->arena && c->arena_used + n <= c->arena_size) {
		p = c->arena + c->arena_used;
		c->arena_used += n;
	} else {
		/* outside the arena: only before reserve() or if it was too small */
		if (cudaMalloc(&p, n) != cudaSuccess) {
			size_t free_b = 0, total_b = 0;
			cudaGetLastError();
			cudaMemGetInfo(&free_b, &total_b);
			atlas_error(ATLAS_ENOMEM,
				    "out of GPU memory: %zu MiB needed, %zu MiB free of %zu MiB",
				    n >> 20, free_b >> 20, total_b >> 20);
			return NULL;
		}
		c->outside += n;
		if (c->arena)
			atlas_debug("cuda: %zu bytes allocated outside the arena", n);
	}
	if (cudaMemsetAsync(p, 0, n, c->stream) != cudaSuccess) {
		atlas_error(ATLAS_EIO, "cuda: cannot clear new memory");
		return NULL;
	}
	return p;
}

static int in_arena(const struct cuda_ctx *c, const void *p)
{
	const char *q = p;
	if (c->arena && q >= c->arena && q < c->arena + c->arena_size)
		return 1;
	for (int i = 0; i < c->n_old; i++)
		if (q >= c->old_arenas[i] && q < c->old_arenas[i] + c->old_sizes[i])
			return 1;
	return 0;
}

static void cuda_free(struct atlas_backend *be, void *p)
{
	struct cuda_ctx *c = be->ctx;
	if (p && !in_arena(c, p))
		cudaFree(p); /* arena blocks live until the backend is destroyed */
}

static const void *cuda_weight_upload(struct atlas_backend *be, const void *host, size_t bytes)
{
	struct cuda_ctx *c = be->ctx;
	void *d = cuda_alloc(be, bytes);
	if (!d)
		return NULL;
	if (atlas_cuda_check(c, cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, c->stream),
			     "weight upload"))
		return NULL;
	atlas_cuda_f8meta_note(c, d, host, bytes);
	return d;
}

static void cuda_weight_release(struct atlas_backend *be, const void *w)
{
	atlas_cuda_f8meta_drop(be->ctx, w);
	cuda_free(be, (void *)w);
}

static void *cuda_host_alloc(struct atlas_backend *be, size_t bytes)
{
	(void)be;
	void *p = NULL;
	if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	memset(p, 0, bytes);
	return p;
}

static void cuda_host_free(struct atlas_backend *be, void *p)
{
	(void)be;
	if (p)
		cudaFreeHost(p);
}

static int cuda_upload(struct atlas_backend *be, void *dst, const void *src, size_t bytes)
{
	struct cuda_ctx *c = be->ctx;
	if (!bytes)
		return 0;
	atlas_cuda_f8meta_note(c, dst, src, bytes);
	return atlas_cuda_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream),
				"upload");
}

static int cuda_download(struct atlas_backend *be, void *dst, const void *src, size_t bytes)
{
	struct cuda_ctx *c = be->ctx;
	if (!bytes)
		return 0;
	int rc = atlas_cuda_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
				  "download");
	return rc ? rc : atlas_cuda_check(c, cudaStreamSynchronize(c->stream), "download");
}

static int cuda_copy(struct atlas_backend *be, void *dst, const void *src, size_t bytes)
{
	struct cuda_ctx *c = be->ctx;
	if (!bytes)
		return 0;
	return atlas_cuda_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
				"copy");
}

static int cuda_sync(struct atlas_backend *be)
{
	struct cuda_ctx *c = be->ctx;
	return atlas_cuda_check(c, cudaStreamSynchronize(c->stream), "synchronize");
}

int atlas_cuda_scratch(struct atlas_backend *be, void **buf, size_t *cap, size_t need)
{
	if (*cap >= need)
		return 0;
	/* grows at the first steps only; arena memory is not returned */
	void *p = cuda_alloc(be, need);
	if (!p)
		return ATLAS_ENOMEM;
	cuda_free(be, *buf);
	*buf = p;
	*cap = need;
	return 0;
}

/* --- lifetime ------------------------------------------------------------ */

static int cuda_specialize(struct atlas_backend *be, const char *family, const char *quant)
{
	struct cuda_ctx *c = be->ctx;
	int fallback;
	const struct atlas_kernel_blob *b = atlas_kernel_pick(atlas_kernel_blobs, atlas_kernel_nblobs,
							      c->arch, family, quant, &fallback);
	if (!b)
		return atlas_error(ATLAS_EUNSUPPORTED, "no kernels for %s", c->arch);
	if (b != c->blob) {
		int rc = load_target(c, b);
		if (rc)
			return rc;
	}
	if (fallback)
		atlas_info("no %s kernels of its own for %s/%s; using %s", c->arch, family, quant,
			   c->target);
	atlas_info("kernel target: %s", c->target);
	return 0;
}

static void cuda_destroy(struct atlas_backend *be)
{
	struct cuda_ctx *c = be->ctx;
	if (c) {
		cudaStreamSynchronize(c->stream);
		atlas_cuda_bench_release(c);
		atlas_cuda_moe_release(c);
		if (c->lib_loaded)
			cudaLibraryUnload(c->lib);
		if (c->arena)
			cudaFree(c->arena);
		for (int i = 0; i < c->n_old; i++)
			cudaFree(c->old_arenas[i]);
		cudaStreamDestroy(c->stream);
		free(c->f8meta);
		free(c);
	}
	free(be);
}

const char *atlas_backend_cuda_target(const struct atlas_backend *be)
{
	const struct cuda_ctx *c = be->ctx;
	return c->target;
}

size_t atlas_backend_cuda_used(const struct atlas_backend *be)
{
	const struct cuda_ctx *c = be->ctx;
	return c->arena_used + c->outside;
}

struct atlas_backend *atlas_backend_cuda_new(int device)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		const char *why = e == cudaErrorInsufficientDriver
			? "no NVIDIA driver (or one older than the CUDA this build uses)"
			: e == cudaErrorNoDevice || n == 0 ? "no NVIDIA GPU found"
			: cudaGetErrorString(e);
		atlas_error(ATLAS_ENOTFOUND, "no usable NVIDIA GPU: %s", why);
		cudaGetLastError();
		return NULL;
	}
	if (device < 0 || device >= n) {
		atlas_error(ATLAS_EINVAL, "GPU %d does not exist (this machine has %d)", device, n);
		return NULL;
	}
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
		atlas_error(ATLAS_EIO, "cannot open GPU %d", device);
		return NULL;
	}
	struct atlas_backend *be = calloc(1, sizeof(*be));
	struct cuda_ctx *c = calloc(1, sizeof(*c));
	if (!be || !c) {
		free(be);
		free(c);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	c->dev = device;
	c->sms = prop.multiProcessorCount;
	read_switches(c, prop.major);
	snprintf(c->arch, sizeof(c->arch), "sm%d%d", prop.major, prop.minor);
	snprintf(c->gpu_name, sizeof(c->gpu_name), "%s", prop.name);
	int fallback;
	const struct atlas_kernel_blob *b = atlas_kernel_pick(atlas_kernel_blobs, atlas_kernel_nblobs,
							      c->arch, "common", "", &fallback);
	if (!b) {
		const char *t = atlas_kernel_targets();
		atlas_error(ATLAS_EUNSUPPORTED,
			    "GPU %d (%s) is %s; this build has kernels for: %s", device, prop.name,
			    c->arch, t[0] ? t : "none (built without nvcc)");
		free(c);
		free(be);
		return NULL;
	}
	if (cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess ||
	    load_target(c, b)) {
		if (!atlas_errmsg()[0])
			atlas_error(ATLAS_EIO, "cannot create a CUDA stream");
		free(c);
		free(be);
		return NULL;
	}
	*be = (struct atlas_backend){
		.name = "cuda",
		.ctx = c,
		.act_dtype = ATLAS_DTYPE_BF16,
		.destroy = cuda_destroy,
		.alloc = cuda_alloc,
		.host_alloc = cuda_host_alloc,
		.host_free = cuda_host_free,
		.free = cuda_free,
		.weight_upload = cuda_weight_upload,
		.weight_release = cuda_weight_release,
		.upload = cuda_upload,
		.download = cuda_download,
		.copy = cuda_copy,
		.sync = cuda_sync,
		.reserve = cuda_reserve,
		.specialize = cuda_specialize,
	};
	atlas_cuda_ops_init(be);
	atlas_cuda_hybrid_init(be);
	atlas_cuda_bench_init(be);
	/* FP8 checkpoints stay at one byte a weight when the target has the
	 * FP8 GEMVs and the dequantizer (the common target always does) */
	be->f8b_weights = c->kern[ATLAS_CK_GEMV_TC8_F8] && c->kern[ATLAS_CK_GEMV_TC16_F8] &&
			  c->kern[ATLAS_CK_GEMV_TC32_F8] && c->kern[ATLAS_CK_GEMV_TC64_F8] &&
			  c->kern[ATLAS_CK_F8B_DEQUANT];
	be->w4b_weights = c->kern[ATLAS_CK_GEMV_TC8_W4] && c->kern[ATLAS_CK_GEMV_TC16_W4] &&
			  c->kern[ATLAS_CK_GEMV_TC32_W4] && c->kern[ATLAS_CK_GEMV_TC64_W4] &&
			  c->kern[ATLAS_CK_W4B_DEQUANT];
	/* NVFP4 stays dequantized unless ATLAS_FP4_NATIVE=1: the FP4B kernels
	 * are correct (test_fp4b, the goldens: bench/h100-2026-12-06-moe-fused,
	 * h100-2026-12-07-r2) and faster than BF16 at batch 1 since
	 * atlas_gemv_fp4 (H100, Qwen3-8B shape: 4.13 against 5.84 ms), but
	 * batched steps still take the tensor-core GEMV, slower than the
	 * dequantized model's GEMMs (H200: 19.8 against 11.1 ms at batch 64) */
	const char *f4 = getenv("ATLAS_FP4_NATIVE");
	be->fp4b_weights = f4 && !strcmp(f4, "1") && c->kern[ATLAS_CK_GEMV_TC8_FP4] && c->kern[ATLAS_CK_GEMV_TC16_FP4] &&
			   c->kern[ATLAS_CK_GEMV_TC32_FP4] && c->kern[ATLAS_CK_GEMV_TC64_FP4] &&
			   c->kern[ATLAS_CK_FP4B_DEQUANT];
	/* split-K attention partials and counters: allocated now and never
	 * moved, since a decode graph records the pointers; the counters start
	 * zero (cuda_alloc clears too; the kernel relies on it) and each
	 * launch leaves them zero. Without both, attention falls back to the
	 * one-block-per-head kernel */
	if (atlas_cuda_scratch(be, (void **)&c->att_part, &c->att_cap, ATLAS_CUDA_ATT_SCRATCH) ||
	    atlas_cuda_scratch(be, (void **)&c->att_cnt, &c->att_cnt_cap, ATLAS_CUDA_ATT_COUNTERS) ||
	    atlas_cuda_check(c, cudaMemsetAsync(c->att_cnt, 0, c->att_cnt_cap, c->stream),
			     "attention counters"))
		atlas_debug("split-K attention off: %s", atlas_errmsg());
	/* split-K partials of the wgmma GEMM: likewise fixed */
	if (atlas_cuda_scratch(be, (void **)&c->gemm_ws, &c->gemm_ws_cap,
			       ATLAS_CUDA_GEMM_WS_PER_SM * (size_t)(c->sms > 0 ? c->sms : 132)))
		atlas_debug("split-K GEMM off: %s", atlas_errmsg());
	size_t free_b = 0, total_b = 0;
	cudaMemGetInfo(&free_b, &total_b);
	atlas_info("device: GPU %d, %s (%s, %d SMs), %zu MiB free of %zu MiB; kernels %s", device,
		   prop.name, c->arch, prop.multiProcessorCount, free_b >> 20, total_b >> 20, c->target);
	return be;
}
