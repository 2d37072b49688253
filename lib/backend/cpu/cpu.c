/* cpu.c - the CPU backend: memory, copies, kernel-set choice and the ops
 * table. The ops live in cpu_matmul.c, cpu_ops.c, cpu_attention.c and
 * cpu_moe.c.
 *
 * Backend memory is plain host memory (64-byte aligned, zeroed), weights
 * are used in place (zero copy from the mmap), and every op runs
 * synchronously on the caller plus the atlas_parallel_for pool, so sync
 * has nothing to wait for.
 */
#include "cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "../../core/error.h"

/* -1 until first asked: then the best set the CPU supports. */
static atomic_int isa_now = -1;

/* F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
 * does not know "f16c". AVX2 and FMA being usable already says the OS
 * saves the YMM state, which is all F16C needs besides its own bit. */
#if defined(__x86_64__)
static int has_f16c(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

int atlas_cpu_has_avx2(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
#else
	return 0;
#endif
}

enum atlas_cpu_isa atlas_cpu_isa_get(void)
{
	int v = atomic_load(&isa_now);
	if (v < 0) {
		v = atlas_cpu_has_avx2() ? ATLAS_CPU_ISA_AVX2 : ATLAS_CPU_ISA_GENERIC;
		atomic_store(&isa_now, v);
	}
	return (enum atlas_cpu_isa)v;
}

enum atlas_cpu_isa atlas_cpu_isa_set(enum atlas_cpu_isa isa)
{
	if (isa == ATLAS_CPU_ISA_AVX2 && !atlas_cpu_has_avx2())
		isa = ATLAS_CPU_ISA_GENERIC;
	atomic_store(&isa_now, (int)isa);
	return isa;
}

int atlas_cpu_check_wdt(enum atlas_dtype wdt, const char *op)
{
	if (wdt == ATLAS_DTYPE_F32 || wdt == ATLAS_DTYPE_F16 || wdt == ATLAS_DTYPE_BF16)
		return 0;
	return atlas_error(ATLAS_EUNSUPPORTED,
			   "cpu %s: unsupported weight dtype '%s' (expected F32, F16 or BF16)", op,
			   atlas_dtype_name(wdt));
}

void atlas_cpu_convert(float *dst, const void *w, enum atlas_dtype wdt, int64_t off, int64_t n)
{
	if (wdt == ATLAS_DTYPE_BF16) {
		const uint16_t *s = (const uint16_t *)w + off;
		for (int64_t i = 0; i < n; i++)
			dst[i] = atlas_bf16_to_f32(s[i]);
	} else if (wdt == ATLAS_DTYPE_F16) {
		const uint16_t *s = (const uint16_t *)w + off;
		for (int64_t i = 0; i < n; i++)
			dst[i] = atlas_cpu_f16(s[i]);
	} else {
		memcpy(dst, (const float *)w + off, (size_t)n * sizeof(float));
	}
}

static void cpu_destroy(struct atlas_backend *be)
{
	free(be->ctx);
	free(be);
}

/* Every block starts with a 64-byte header holding its mapped size (0 for
 * a heap block), so free knows how to give it back. Blocks of 1 MiB and
 * more are anonymous mappings: zero pages arrive lazily (no memset of a
 * KV cache that is mostly never touched) and transparent huge pages are
 * asked for, which matters for streaming weights through the TLB. */
#define HDR 64
#define BIG (1u << 20)

static void *cpu_alloc_raw(size_t bytes, int zero)
{
	size_t n = (bytes + 63) & ~(size_t)63;
	if (n < bytes || n > SIZE_MAX - 4096) {
		atlas_error(ATLAS_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
		return NULL;
	}
	if (n >= BIG) {
		size_t len = n + 4096;
		char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			atlas_error(ATLAS_ENOMEM, "cpu: cannot map %zu bytes", bytes);
			return NULL;
		}
#ifdef MADV_HUGEPAGE
		madvise(m, len, MADV_HUGEPAGE);
#endif
		/* header at the end of the first page keeps the data page-aligned */
		*(size_t *)(m + 4096 - HDR) = len;
		return m + 4096;
	}
	char *p = aligned_alloc(64, n + HDR);
	if (!p) {
		atlas_error(ATLAS_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
		return NULL;
	}
	*(size_t *)p = 0;
	if (zero)
		memset(p + HDR, 0, n);
	return p + HDR;
}

static void cpu_free_raw(const void *q)
{
	if (!q)
		return;
	char *p = (char *)q - HDR;
	size_t len = *(size_t *)p;
	if (len)
		munmap((char *)q - 4096, len);
	else
		free(p);
}

static void *cpu_alloc(struct atlas_backend *be, size_t bytes)
{
	return cpu_alloc_raw(bytes, 1);
}

static void cpu_free(struct atlas_backend *be, void *p)
{
	cpu_free_raw(p);
}

/* Weights are used in place from the checkpoint's mmap (zero copy), unless
 * ATLAS_CPU_COPY_WEIGHTS=1 asks for a private huge-page copy: more memory
 * and load time, fewer TLB misses while streaming them. */
static const void *cpu_weight_upload(struct atlas_backend *be, const void *host, size_t bytes)
{
	const struct atlas_cpu_ctx *cx = be->ctx;
	if (!cx->copy_weights)
		return host;
	void *p = cpu_alloc_raw(bytes, 0);
	if (p)
		memcpy(p, host, bytes);
	return p;
}

static void cpu_weight_release(struct atlas_backend *be, const void *w)
{
	const struct atlas_cpu_ctx *cx = be->ctx;
	if (cx->copy_weights)
		cpu_free_raw(w);
}

static int cpu_copy(struct atlas_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memmove(dst, src, bytes);
	return 0;
}

static int cpu_sync(struct atlas_backend *be)
{
	return 0;
}

static int cpu_to_f32(struct atlas_backend *be, float *host, const void *src, int64_t n)
{
	if (n < 0)
		return atlas_error(ATLAS_EINVAL, "cpu to_f32: negative count %lld", (long long)n);
	if (n)
		memmove(host, src, (size_t)n * sizeof(float));
	return 0;
}

/* The reference algorithm row by row (logits are F32 here). */
static int cpu_sample(struct atlas_backend *be, int32_t *ids, const float *logits, int64_t n,
		      int64_t V, const struct atlas_sample_args *args)
{
	float *row = malloc((size_t)V * sizeof(float));
	void *scratch = malloc((size_t)V * 8);
	if (!row || !scratch) {
		free(row);
		free(scratch);
		return atlas_error(ATLAS_ENOMEM, "cpu sample: out of memory");
	}
	for (int64_t i = 0; i < n; i++) {
		memcpy(row, logits + i * V, (size_t)V * sizeof(float));
		ids[i] = atlas_sample_pick(row, V, &args[i], scratch);
	}
	free(row);
	free(scratch);
	return 0;
}

/* Activations are FP32 already: the output head is a plain matmul. */
static int cpu_logits(struct atlas_backend *be, float *out, const void *x, const void *w,
		      enum atlas_dtype wdt, int64_t T, int64_t N, int64_t K)
{
	return atlas_cpu_matmul(be, out, x, w, NULL, wdt, T, N, K);
}

struct atlas_backend *atlas_backend_cpu_new(void)
{
	struct atlas_backend *be = calloc(1, sizeof(*be));
	struct atlas_cpu_ctx *cx = calloc(1, sizeof(*cx));
	if (!be || !cx) {
		free(be);
		free(cx);
		atlas_error(ATLAS_ENOMEM, "cpu: cannot allocate the backend");
		return NULL;
	}
	*be = (struct atlas_backend){
	    .name = "cpu",
	    .ctx = cx,
	    .act_dtype = ATLAS_DTYPE_F32,
	    .destroy = cpu_destroy,
	    .alloc = cpu_alloc,
	    .free = cpu_free,
	    .weight_upload = cpu_weight_upload,
	    .weight_release = cpu_weight_release,
	    .upload = cpu_copy,
	    .download = cpu_copy,
	    .copy = cpu_copy,
	    .sync = cpu_sync,
	    .embed = atlas_cpu_embed,
	    .rmsnorm = atlas_cpu_rmsnorm,
	    .add_rmsnorm = atlas_cpu_add_rmsnorm,
	    .matmul = atlas_cpu_matmul,
	    .logits = cpu_logits,
	    .rope = atlas_cpu_rope,
	    .kv_store = atlas_cpu_kv_store,
	    .attention = atlas_cpu_attention,
	    .swiglu = atlas_cpu_swiglu,
	    .add = atlas_cpu_add,
	    .to_f32 = cpu_to_f32,
	    .sample = cpu_sample,
	    .moe = atlas_cpu_moe,
	    .moe_experts_read = atlas_cpu_moe_experts_read,
	    .rope_partial = atlas_cpu_rope_partial,
	    .gate_split = atlas_cpu_gate_split,
	    .gate_apply = atlas_cpu_gate_apply,
	    .deltanet = atlas_cpu_deltanet,
	};
	const char *cw = getenv("ATLAS_CPU_COPY_WEIGHTS");
	cx->copy_weights = cw && !strcmp(cw, "1");
	atlas_cpu_isa_get();
	return be;
}
