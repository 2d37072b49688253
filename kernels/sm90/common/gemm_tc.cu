/* gemm_tc.cu - the Hopper tensor-core linear layer for prefill:
 * out[T,N] = x[T,K] W[N,K]^T + bias[N], x, W and bias BF16 (bias may be
 * NULL), FP32 accumulation, out BF16 (atlas_gemm_tc) or FP32
 * (atlas_gemm_tc_f32, the logits). sm_90a only (wgmma, setmaxnreg); the
 * compute_90 PTX of these entry points traps.
 *
 * Tiles: each block computes one BM x BN = 128 x BN output tile, BN = 256
 * or 128 (a kernel parameter the host picks: 128 when 256-wide tiles
 * would not fill the SMs once). K goes in BK = 64 slices: 64 BF16 are
 * 128 bytes, one row of the 128-byte TMA/wgmma swizzle atom.
 *
 * Block: 384 threads, three warpgroups. Warpgroup 0 is the producer: it
 * gives up registers (setmaxnreg.dec 40) and one thread issues the TMA
 * loads (cp.async.bulk.tensor.2d) of the x slice [128 x 64] and the W
 * slice [BN x 64] of every K step into a ring of STAGES shared-memory
 * stages (4 for BN 256, 6 for BN 128: 192 KiB either way). Warpgroups 1
 * and 2 are the consumers (setmaxnreg.inc 232): consumer c owns output
 * rows 64c..64c+63 of the tile, BN/2 FP32 accumulators per thread, and
 * per K step issues four wgmma.mma_async m64nBNk16 (A = its 64 rows of the
 * x slice, B = the W slice, both straight from shared memory through
 * matrix descriptors).
 *
 * Synchronization per stage s: full[s] (1 arrival: the producer's
 * arrive.expect_tx, plus the TMA's transaction bytes, always the full
 * box even where it zero-fills beyond the tensor) and empty[s] (8
 * arrivals: lane 0 of each consumer warp). A consumer keeps one wgmma
 * group in flight: after committing step i it waits until at most one
 * group is pending, i.e. step i-1's wgmmas finished reading their stage,
 * and only then releases that stage to the producer.
 *
 * Tails: TMA zero-fills rows beyond T or N and columns beyond K, so the
 * main loop has no tail code (K % 8 == 0 is still needed: the tensor
 * map's row stride must be a multiple of 16 bytes). The epilogue adds
 * the bias in FP32, rounds, and stores straight from the accumulators,
 * masking t < T and n < N (pairs of columns at once when N is even and
 * out is aligned for it).
 *
 * Shared memory: a 1024-byte aligned base (the 128-byte swizzle repeats
 * every 8 rows = 1024 bytes and the descriptors assume aligned atoms),
 * then STAGES x (x slice 16 KiB, W slice BN*128 bytes), then the 2*STAGES
 * mbarriers: TCG_SMEM bytes of dynamic shared memory (the host sets the
 * kernel's limit).
 *
 * Matrix descriptor (PTX ISA, "matrix descriptor format"): start address
 * >> 4 in bits 0-13, leading byte offset >> 4 in 16-29 (unused for
 * swizzled K-major operands; 1), stride byte offset >> 4 in 32-45 (1024:
 * the distance between 8-row groups), base offset 0 in 49-51, swizzle
 * mode in 62-63 (1 = 128 bytes). The k16 steps inside a 64-wide slice
 * advance the start address by 32 bytes; the hardware applies the
 * swizzle to the computed addresses, as TMA did when it wrote them.
 *
 * Accumulator layout (m64nN f32 D): thread l of warp w of a consumer
 * warpgroup holds, for j < N/8, d[4j+0..1] = rows 16w + l/4, columns
 * 8j + 2(l%4) + {0,1} and d[4j+2..3] = the same columns of row
 * 16w + l/4 + 8.
 *
 * Determinism: no atomics; every output is the K slices summed in
 * ascending order (one FP32 accumulator chain per element), the same for
 * both tile widths and for any T.
 *
 * Programmatic dependent launch: every thread lets the next kernel launch
 * at once; the producer issues the W slices of the first stages, then
 * waits for the previous kernel (griddepcontrol.wait), then their x
 * slices; consumers wait too before their stores (it has long returned).
 *
 * Split-K (decode-sized T, where the tiles alone would leave most SMs
 * idle: 32 tiles for a 4096-wide product at T <= 128): grid z > 1 splits
 * the K slices into z equal contiguous ranges, each block writes its FP32
 * sums (no bias) to ws[z][T][N], and atlas_gemm_tc_reduce adds them in z
 * order, adds the bias and rounds: deterministic, but not the same bits
 * as one range (batch-invariant mode never uses this kernel).
 *
 * Batch-invariant form (atlas_gemm_tc_inv, 128 x 128 tiles): every
 * output gets exactly the bits the tensor-core GEMV (gemv_tc.cu) gives
 * it. A wgmma k16 step gives each element mma.sync's bits for the same
 * 16 products and accumulator, whatever slot holds which product
 * (tests/gpu/probe-mma-order.cu), and a k16 step at +32 bytes of a slice
 * sums 16 consecutive k, as the GEMV's k-steps do. So it remains to repeat
 * the GEMV's chains: K in 32-wide chunks split into wpr contiguous ranges
 * of ceil(chunks / wpr) (wpr = 8 / the GEMV's rows per block, from the
 * weight's shape), one accumulator chain per range from zero, and the
 * ranges added 0 + r0 + r1 + ... into a second register set (tot) as each
 * range ends, +0 for each empty range, then the bias or the swiglu, one
 * rounding. The fold waits for the wgmmas in flight and happens between
 * 64-wide slices (the host sends only shapes whose chunk and range counts
 * are even; the others take atlas_gemm_inv). With swiglu a tile's W slice
 * is 64 gate rows then the same 64 features' up rows (two 64-row TMA
 * boxes), so a thread holds the gate and up sums of its outputs (columns
 * j and j + 64 of its accumulators). Split form (ws set; few tiles, as
 * in a decode batch): block z runs only range z's chain and stores it
 * unmerged; atlas_gemm_inv_reduce (gemm_inv.cu) merges the ranges in
 * order with the same epilogue: the same bits.
 *
 * W8A8 form (atlas_gemm_tc_f8, FP8 checkpoints outside batch-invariant
 * mode when ATLAS_FP8_W8A8=1): x is FP8 E4M3 with an FP32 scale per row
 * and 128 columns (atlas_fp8_act_quant, f8b.cu), W an F8B blob's FP8
 * values with its block scales, 128 x 128 tiles. A stage holds the same
 * bytes as the BF16 form's (128 x 128-byte rows of each operand), now
 * 128 K elements: one scale block. A consumer runs the slice's four
 * m64n128k32 e4m3 wgmmas into a second register set from zero, waits,
 * frees the stage and adds it times the row's and the tile's scale into
 * the accumulators (scales by column, for weights with a scale per row
 * of W, once in the epilogue). Each output is the K slices' scaled sums
 * added in ascending order; within a slice the tensor core's order.
 * Split-K and atlas_gemm_tc_reduce work as for the BF16 form.
 *
 * Segments: one launch computes up to three products of the same x (q,
 * k and v; gate and up), each with its own W tensor map, out, bias and N;
 * grid y runs over segment 0's column tiles, then segment 1's, ...
 *
 * Parameter: one struct atlas_tcg_args (kernel_args.h): the tensor map of
 * x (dims {K, T}, box {64, 128}) and of each W (dims {K, N}, box {64,
 * bn}), all BF16, 128-byte swizzle, zero fill, built by
 * lib/backend/cuda/cuda_gemm.c; ws NULL, or the split-K partials (then
 * out is not written). Grid (ceil(T/128), sum of ceil(N/bn), splits),
 * block 384, TCG_SMEM bytes of dynamic shared memory.
 */
#include "common.cuh"
#include "../../../lib/backend/cuda/kernel_args.h"

#define TCG_BM 128
#define TCG_BK 64
#define TCG_THREADS 384
/* Dynamic shared memory (kernel_args.h, shared with the host). */
#define TCG_SMEM ATLAS_TCG_SMEM

/* A CUtensorMap as the kernel sees it (kernel_args.h): only its address
 * goes to the TMA instruction. */
typedef atlas_tmap tcg_tmap;

extern __shared__ unsigned char tcg_smem[];

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

static __device__ __forceinline__ uint32_t tcg_smem_addr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void tcg_bar_init(uint32_t bar, uint32_t count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* The producer's arrival on a full barrier, announcing tx bytes of TMA. */
static __device__ __forceinline__ void tcg_bar_expect(uint32_t bar, uint32_t tx)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(tx)
		     : "memory");
}

static __device__ __forceinline__ void tcg_bar_arrive(uint32_t bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* Wait until the phase of parity `par` of the barrier has completed. */
static __device__ __forceinline__ void tcg_bar_wait(uint32_t bar, uint32_t par)
{
	uint32_t done;
	do {
		asm volatile("{\n.reg .pred p;\n"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
			     "selp.u32 %0, 1, 0, p;\n}\n"
			     : "=r"(done)
			     : "r"(bar), "r"(par)
			     : "memory");
	} while (!done);
}

/* TMA: the box at (column c0, row c1) of the tensor map to shared memory
 * at dst, completing its bytes on barrier bar. */
static __device__ __forceinline__ void tcg_tma_load(uint32_t dst, const tcg_tmap *map, int c0,
						     int c1, uint32_t bar)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
		     " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
		     "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar)
		     : "memory");
}

/* Descriptor of a K-major, 128-byte swizzled operand at smem address a. */
static __device__ __forceinline__ uint64_t tcg_desc(uint32_t a)
{
	return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
	       ((uint64_t)1 << 62);
}

static __device__ __forceinline__ void tcg_wgmma_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

static __device__ __forceinline__ void tcg_wgmma_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void tcg_wgmma_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* acc += A (64x16, descriptor da) * B (256x16, descriptor db)^T, both K-major. */
static __device__ __forceinline__ void tcg_wgmma_n256(float (&d)[128], uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, "
		     "%8, %9, %10, %11, %12, %13, %14, %15, "
		     "%16, %17, %18, %19, %20, %21, %22, %23, "
		     "%24, %25, %26, %27, %28, %29, %30, %31, "
		     "%32, %33, %34, %35, %36, %37, %38, %39, "
		     "%40, %41, %42, %43, %44, %45, %46, %47, "
		     "%48, %49, %50, %51, %52, %53, %54, %55, "
		     "%56, %57, %58, %59, %60, %61, %62, %63, "
		     "%64, %65, %66, %67, %68, %69, %70, %71, "
		     "%72, %73, %74, %75, %76, %77, %78, %79, "
		     "%80, %81, %82, %83, %84, %85, %86, %87, "
		     "%88, %89, %90, %91, %92, %93, %94, %95, "
		     "%96, %97, %98, %99, %100, %101, %102, %103, "
		     "%104, %105, %106, %107, %108, %109, %110, %111, "
		     "%112, %113, %114, %115, %116, %117, %118, %119, "
		     "%120, %121, %122, %123, %124, %125, %126, %127"
		     "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
		       "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
		       "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
		       "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
		       "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
		       "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
		       "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
		       "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
		       "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
		       "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
		       "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
		       "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
		       "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
		     : "l"(da), "l"(db), "r"(1));
}

/* The 64 FP32 accumulators of an m64n128 wgmma: their "%0".."%63" list
 * and output operands (d a float[64]). */
#define TCG_D64_REGS \
	"%0, %1, %2, %3, %4, %5, %6, %7, "\
	"%8, %9, %10, %11, %12, %13, %14, %15, "\
	"%16, %17, %18, %19, %20, %21, %22, %23, "\
	"%24, %25, %26, %27, %28, %29, %30, %31, "\
	"%32, %33, %34, %35, %36, %37, %38, %39, "\
	"%40, %41, %42, %43, %44, %45, %46, %47, "\
	"%48, %49, %50, %51, %52, %53, %54, %55, "\
	"%56, %57, %58, %59, %60, %61, %62, %63"
#define TCG_D64_OUT(d) \
	"+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]),\
	"+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]),\
	"+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]),\
	"+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31]),\
	"+f"((d)[32]), "+f"((d)[33]), "+f"((d)[34]), "+f"((d)[35]), "+f"((d)[36]), "+f"((d)[37]), "+f"((d)[38]), "+f"((d)[39]),\
	"+f"((d)[40]), "+f"((d)[41]), "+f"((d)[42]), "+f"((d)[43]), "+f"((d)[44]), "+f"((d)[45]), "+f"((d)[46]), "+f"((d)[47]),\
	"+f"((d)[48]), "+f"((d)[49]), "+f"((d)[50]), "+f"((d)[51]), "+f"((d)[52]), "+f"((d)[53]), "+f"((d)[54]), "+f"((d)[55]),\
	"+f"((d)[56]), "+f"((d)[57]), "+f"((d)[58]), "+f"((d)[59]), "+f"((d)[60]), "+f"((d)[61]), "+f"((d)[62]), "+f"((d)[63])

/* acc += A (64x16, descriptor da) * B (128x16, descriptor db)^T, both K-major. */
static __device__ __forceinline__ void tcg_wgmma_n128(float (&d)[64], uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" TCG_D64_REGS
		     "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
		     : TCG_D64_OUT(d)
		     : "l"(da), "l"(db), "r"(1));
}

/* d = (sd ? d : 0) + A (64x32 FP8 E4M3, descriptor da) * B (128x32 E4M3,
 * descriptor db)^T, both K-major (the only layout FP8 wgmma takes): 32
 * FP8 values are 32 bytes, so the k32 steps of a 128-byte row advance
 * the descriptors by 32 bytes, as the BF16 k16 steps do. */
static __device__ __forceinline__ void tcg_wgmma_f8_n128(float (&d)[64], uint64_t da, uint64_t db,
							 int sd)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" TCG_D64_REGS
		     "}, %64, %65, p, 1, 1;\n}\n"
		     : TCG_D64_OUT(d)
		     : "l"(da), "l"(db), "r"(sd));
}

/* Pin an accumulator register in place: the wgmmas write it
 * asynchronously, so the compiler must not move its reads or writes
 * across the fences and waits. */
static __device__ __forceinline__ void tcg_fence_acc(float &r)
{
	asm volatile("" : "+f"(r)::"memory");
}

template <int BN>
static __device__ __forceinline__ void tcg_wgmma(float (&d)[BN / 2], uint64_t da, uint64_t db)
{
	if constexpr (BN == 256)
		tcg_wgmma_n256(d, da, db);
	else
		tcg_wgmma_n128(d, da, db);
}

static __device__ __forceinline__ void tcg_store2(bf16 *p, float a, float b, bool pair)
{
	if (pair) {
		*(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
	} else {
		p[0] = atlas_tobf(a);
		p[1] = atlas_tobf(b);
	}
}

static __device__ __forceinline__ void tcg_store2(float *p, float a, float b, bool pair)
{
	if (pair) {
		*(float2 *)p = make_float2(a, b);
	} else {
		p[0] = a;
		p[1] = b;
	}
}

static __device__ __forceinline__ void tcg_store1(bf16 *p, float a)
{
	*p = atlas_tobf(a);
}

static __device__ __forceinline__ void tcg_store1(float *p, float a)
{
	*p = a;
}

/* A consumer warpgroup's accumulators to out [T, N] (masked to t < T,
 * n < N; pairs of columns at once when N is even and out is aligned for
 * it), plus bias when there is one: the tile's result, or (float out, no
 * bias) its split-K partial sums. */
template <int BN, typename OutT>
static __device__ __forceinline__ void tcg_store_tile(OutT *out, const float (&acc)[BN / 2],
						      const bf16 *bias, int m0, int n0, int cw,
						      long long T, long long N,
						      const int *rowmap = NULL)
{
	const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
	const bool pair_ok = (N & 1) == 0 && atlas_aligned(out, 2 * sizeof(OutT));
	const long long r0 = (long long)m0 + cw * 64 + warp * 16 + (lane >> 2);
#pragma unroll
	for (int j = 0; j < BN / 8; j++) {
		const long long n = (long long)n0 + 8 * j + 2 * (lane & 3);
		if (n >= N)
			continue;
		const bool two = n + 1 < N;
		float b0 = 0.0f, b1 = 0.0f;
		if (bias) {
			b0 = atlas_bf(bias[n]);
			b1 = two ? atlas_bf(bias[n + 1]) : 0.0f;
		}
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const long long t = r0 + 8 * h;
			if (t >= T)
				continue;
			OutT *p = out + (rowmap ? (long long)rowmap[t] : t) * N + n;
			const float v0 = acc[4 * j + 2 * h] + b0, v1 = acc[4 * j + 2 * h + 1] + b1;
			if (two)
				tcg_store2(p, v0, v1, pair_ok);
			else
				tcg_store1(p, v0);
		}
	}
}

/* The W slice of a stage: BN rows of segment map tw at (k, n0), or, for
 * the invariant swiglu tile, 64 gate rows then the same 64 up rows (maps
 * 0 and 1, boxes of 64 rows) from feature n0 / 2. */
template <bool INV>
static __device__ __forceinline__ void tcg_load_w(const atlas_tcg_args &ga, uint32_t dst,
						   const tcg_tmap *tw, int k, int n0, uint32_t bar)
{
	if (INV && ga.swiglu) {
		tcg_tma_load(dst, &ga.map[0], k, n0 / 2, bar);
		tcg_tma_load(dst + 64 * TCG_BK * 2, &ga.map[1], k, n0 / 2, bar);
	} else {
		tcg_tma_load(dst, tw, k, n0, bar);
	}
}

/* The invariant form's epilogue (128-wide tiles). Merged (part false):
 * to out of segment seg as gemv_tc.cu's epilogue does it, + bias then one
 * rounding (bf16, or float when out_f32), or, for swiglu (columns 0..63
 * of the tile gate rows, 64..127 the up rows of the same features n0 / 2
 * ..), the gate and up sums rounded to bf16, silu(g) u, rounded. Split
 * (part true): this block's range chain (blockIdx.z) to ws at
 * ws_off[seg] + z T rows + t rows + o (rows = N, or 2N with swiglu: gate
 * o = f, up o = N + f), the layout atlas_gemm_inv_reduce merges. */
static __device__ __forceinline__ void tcg_store_inv(const atlas_tcg_args &ga, int seg,
						      const float (&v)[64], int m0, int n0, int cw,
						      long long T, long long N, bool part)
{
	const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
	const long long r0 = (long long)m0 + cw * 64 + warp * 16 + (lane >> 2);
	const bf16 *bias = (const bf16 *)ga.bias[seg];
	const long long rows = ga.swiglu ? 2 * N : N;
	float *ws = part ? ga.ws + ga.ws_off[seg] + (long long)blockIdx.z * T * rows : NULL;
#pragma unroll
	for (int j = 0; j < 16; j++) {
		if (ga.swiglu && j >= 8 && !part)
			break; /* the up columns: read with their gate columns */
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int col = 8 * j + 2 * (lane & 3) + e;
			const long long f = ga.swiglu ? (long long)n0 / 2 + (col & 63) : (long long)n0 + col;
			if (f >= N)
				continue;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const long long t = r0 + 8 * h;
				if (t >= T)
					continue;
				float x = v[4 * j + 2 * h + e];
				if (part) {
					ws[t * rows + f + (col >= 64 && ga.swiglu ? N : 0)] = x;
					continue;
				}
				if (ga.swiglu) {
					x = atlas_bf(atlas_tobf(x));
					const float u = atlas_bf(atlas_tobf(v[4 * (j + 8) + 2 * h + e]));
					x = x / (1.0f + expf(-x)) * u;
				} else if (bias) {
					x += atlas_bf(bias[f]);
				}
				if (ga.out_f32)
					((float *)ga.out[seg])[t * N + f] = x;
				else
					((bf16 *)ga.out[seg])[t * N + f] = atlas_tobf(x);
			}
		}
	}
}

/* One 128 x BN tile; see the header comment. GROUPED (atlas_moe_gemm_tc):
 * the tile is tiles[blockIdx.x] of the grouped rows of an MoE layer,
 * rows off[e] + 128 j .. of expert e (stores masked below off[e + 1],
 * the next expert's rows in the box being ignored), W is expert e's
 * (a tensor map in global memory), and output row r goes to rowmap[r]
 * when rowmap is set. The tile table is written by the previous kernel,
 * so a grouped block waits for it before its first load. */
template <int BN, int STAGES, typename OutT, bool GROUPED = false, bool INV = false,
	  bool F8 = false>
static __device__ __forceinline__ void tcg_tile(const atlas_tcg_args &ga)
{
	static_assert(!INV || BN == 128, "the invariant form keeps two accumulator sets");
	static_assert(!F8 || (BN == 128 && !INV && !GROUPED), "the FP8 form: 128-wide tiles");
	/* K elements of a stage: 128 bytes of a row either way */
	constexpr int BKE = F8 ? 2 * TCG_BK : TCG_BK;
	/* the block's segment and column tile */
	int seg = 0, ty = (int)blockIdx.y;
	while (seg < ga.nseg - 1 && ty >= ga.ny[seg])
		ty -= ga.ny[seg++];
	OutT *out = (OutT *)ga.out[seg];
	const tcg_tmap *tx = &ga.map_x, *tw = &ga.map[seg];
	const bf16 *bias = (const bf16 *)ga.bias[seg];
	long long T = ga.T;
	const long long N = ga.N[seg], K = ga.K;
	int m0 = (int)blockIdx.x * TCG_BM;
	const int *rowmap = NULL;
	if constexpr (GROUPED) {
		ATLAS_PDL_ENTRY();
		if ((int)blockIdx.x >= *ga.ntiles)
			return;
		const int tv = ga.tiles[blockIdx.x], e = tv >> 16;
		m0 = ga.off[e] + (tv & 0xffff) * TCG_BM;
		T = ga.off[e + 1];
		tw = ga.gmap + (long long)seg * ga.E + e;
		rowmap = ga.rowmap;
	}
	float *ws = ga.ws ? ga.ws + ga.ws_off[seg] : NULL;
	constexpr uint32_t A_BYTES = TCG_BM * TCG_BK * 2;
	constexpr uint32_t STAGE_BYTES = A_BYTES + BN * TCG_BK * 2;
	static_assert(STAGES * STAGE_BYTES + 1024 + 2 * STAGES * 8 <= TCG_SMEM, "smem");
	const uint32_t base = (tcg_smem_addr(tcg_smem) + 1023u) & ~1023u;
	const uint32_t bars = base + STAGES * STAGE_BYTES; /* full[s], then empty[s] */
	const int wg = threadIdx.x >> 7;
	const int nk = (int)((K + BKE - 1) / BKE);
	const int n0 = ty * BN;
	/* invariant form: the GEMV's K ranges, cpw 32-wide chunks each */
	const int nch = (int)((K + 31) / 32), cpw = INV ? (nch + ga.wpr - 1) / ga.wpr : 0;
	/* split-K: block z takes K slices [kb0, kb1); the invariant form's
	 * split takes K range z (its chunks are even in number) */
	int kb0 = (int)((long long)blockIdx.z * nk / gridDim.z);
	int kb1 = (int)((long long)(blockIdx.z + 1) * nk / gridDim.z);
	if (INV && ws) {
		const int c0 = (int)blockIdx.z * cpw, c1 = c0 + cpw < nch ? c0 + cpw : nch;
		kb0 = c0 / 2;
		kb1 = c1 / 2;
	}

	atlas_pdl_launch();
	if (threadIdx.x == 0) {
		for (int s = 0; s < STAGES; s++) {
			tcg_bar_init(bars + 8 * s, 1);
			tcg_bar_init(bars + 8 * (STAGES + s), 8);
		}
		/* make the initialized barriers visible to the async proxy (TMA) */
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	}
	__syncthreads();

	if (wg == 0) {
		/* producer */
		asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
		if (threadIdx.x == 0) {
			int s = 0;
			uint32_t ph = 0;
			/* programmatic dependent launch: W never changes, so the
			 * first stages' W slices load before the wait for the
			 * kernel that writes x; their x slices follow it */
			const int pre = kb1 - kb0 < STAGES ? kb1 - kb0 : STAGES;
			for (int i = 0; i < pre; i++) {
				const uint32_t a = base + i * STAGE_BYTES, full = bars + 8 * i;
				tcg_bar_expect(full, STAGE_BYTES);
				tcg_load_w<INV>(ga, a + A_BYTES, tw, (kb0 + i) * BKE, n0, full);
			}
			atlas_pdl_wait();
			for (int i = 0; i < pre; i++)
				tcg_tma_load(base + i * STAGE_BYTES, tx, (kb0 + i) * BKE, m0,
					     bars + 8 * i);
			s = pre == STAGES ? 0 : pre;
			ph = pre == STAGES ? 1 : 0;
			for (int kb = kb0 + pre; kb < kb1; kb++) {
				/* a fresh barrier counts as having completed the phase
				 * before its first, so the first pass does not wait */
				tcg_bar_wait(bars + 8 * (STAGES + s), ph ^ 1);
				const uint32_t a = base + s * STAGE_BYTES, full = bars + 8 * s;
				tcg_bar_expect(full, STAGE_BYTES);
				tcg_tma_load(a, tx, kb * BKE, m0, full);
				tcg_load_w<INV>(ga, a + A_BYTES, tw, kb * BKE, n0, full);
				if (++s == STAGES) {
					s = 0;
					ph ^= 1;
				}
			}
		}
		return;
	}

	/* consumers */
	asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
	const int cw = wg - 1;              /* rows 64cw.. of the tile */
	const int lane = threadIdx.x & 31;
	float acc[BN / 2];
#pragma unroll
	for (int i = 0; i < BN / 2; i++)
		acc[i] = 0.0f;
	/* invariant form: one chain per K range, merged into tot in range
	 * order (see the header comment) */
	float tot[INV ? BN / 2 : 1];
	int fold = ws ? 2 * nk : cpw; /* the next range's first chunk (split: none) */
	if constexpr (INV) {
#pragma unroll
		for (int i = 0; i < BN / 2; i++)
			tot[i] = 0.0f;
	}
	int s = 0, prev = 0;
	uint32_t ph = 0;
	if constexpr (F8) {
		/* W8A8: each 128-wide K slice is one block of both scales (the
		 * activations' per row, the weights' per tile or, with
		 * per-column weight scales, none until the epilogue): its four
		 * k32 wgmmas go to tmp from zero, then acc += tmp x the row's
		 * scale x the tile's. Waiting for them before the fold leaves
		 * the tensor cores to the other consumer warpgroup meanwhile. */
		float tmp[64];
		const int warp = (threadIdx.x >> 5) & 3;
		const long long r0 = (long long)m0 + cw * 64 + warp * 16 + (lane >> 2);
		const float *xs0 = ga.xs + (r0 < T ? r0 : 0) * ga.nkx;
		const float *xs1 = ga.xs + (r0 + 8 < T ? r0 + 8 : 0) * ga.nkx;
		const bool tile_sc = ga.wcol[seg] == 0;
		const float *wsr = ga.wsc[seg] + (long long)(n0 / ga.wbo[seg]) * ga.wnbc[seg];
		const int wbi = ga.wbi[seg];
		/* the scales of slice kb + 1 are loaded during slice kb: from
		 * L2 they would arrive after its wgmmas and hold up the fold */
#define TCG_F8_SCALES(KB, X0, X1, SW) \
	do { \
		SW = tile_sc ? __ldg(wsr + (long long)(KB) * BKE / wbi) : 1.0f; \
		X0 = r0 < T ? __ldg(xs0 + (KB)) : 0.0f; \
		X1 = r0 + 8 < T ? __ldg(xs1 + (KB)) : 0.0f; \
	} while (0)
		float x0 = 0.0f, x1 = 0.0f, sw = 0.0f;
		if (kb0 < kb1)
			TCG_F8_SCALES(kb0, x0, x1, sw);
		for (int kb = kb0; kb < kb1; kb++) {
			tcg_bar_wait(bars + 8 * s, ph);
			const uint32_t a = base + s * STAGE_BYTES + cw * (64 * TCG_BK * 2);
			const uint32_t b = base + s * STAGE_BYTES + A_BYTES;
#pragma unroll
			for (int i = 0; i < 64; i++)
				tcg_fence_acc(tmp[i]);
			tcg_wgmma_fence();
#pragma unroll
			for (int kk = 0; kk < 4; kk++)
				tcg_wgmma_f8_n128(tmp, tcg_desc(a + kk * 32), tcg_desc(b + kk * 32), kk);
			tcg_wgmma_commit();
			const float f0 = x0 * sw, f1 = x1 * sw;
			if (kb + 1 < kb1)
				TCG_F8_SCALES(kb + 1, x0, x1, sw);
			tcg_wgmma_wait<0>();
#pragma unroll
			for (int i = 0; i < 64; i++)
				tcg_fence_acc(tmp[i]);
			if (lane == 0)
				tcg_bar_arrive(bars + 8 * (STAGES + s));
#pragma unroll
			for (int j = 0; j < 16; j++) {
				acc[4 * j + 0] += tmp[4 * j + 0] * f0;
				acc[4 * j + 1] += tmp[4 * j + 1] * f0;
				acc[4 * j + 2] += tmp[4 * j + 2] * f1;
				acc[4 * j + 3] += tmp[4 * j + 3] * f1;
			}
			if (++s == STAGES) {
				s = 0;
				ph ^= 1;
			}
		}
#undef TCG_F8_SCALES
		if (!tile_sc) {
			/* per-column weight scales (bi covers the row) */
#pragma unroll
			for (int j = 0; j < 16; j++) {
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const long long n = (long long)n0 + 8 * j + 2 * (lane & 3) + e;
					const float w = n < N ? __ldg(ga.wsc[seg] + n / ga.wbo[seg] *
								      ga.wnbc[seg])
							      : 0.0f;
					acc[4 * j + e] *= w;
					acc[4 * j + 2 + e] *= w;
				}
			}
		}
	} else
	for (int kb = kb0; kb < kb1; kb++) {
		if constexpr (INV) {
			if (2 * kb == fold) {
				/* a new range (ranges start on even chunks and K has
				 * an even number of chunks: the host sees to it, so
				 * no 64-wide slice holds a step the GEMV lacks): this
				 * chain into tot, a new one from 0 */
				tcg_wgmma_wait<0>();
#pragma unroll
				for (int i = 0; i < BN / 2; i++) {
					tcg_fence_acc(acc[i]);
					tot[i] += acc[i];
					acc[i] = 0.0f;
				}
				fold += cpw;
			}
		}
		tcg_bar_wait(bars + 8 * s, ph);
		const uint32_t a = base + s * STAGE_BYTES + cw * (64 * TCG_BK * 2);
		const uint32_t b = base + s * STAGE_BYTES + A_BYTES;
#pragma unroll
		for (int i = 0; i < BN / 2; i++)
			tcg_fence_acc(acc[i]);
		tcg_wgmma_fence();
#pragma unroll
		for (int kk = 0; kk < TCG_BK / 16; kk++)
			tcg_wgmma<BN>(acc, tcg_desc(a + kk * 32), tcg_desc(b + kk * 32));
		tcg_wgmma_commit();
#pragma unroll
		for (int i = 0; i < BN / 2; i++)
			tcg_fence_acc(acc[i]);
		/* step kb-1's wgmmas are done: its stage may be refilled */
		tcg_wgmma_wait<1>();
		if (kb > kb0 && lane == 0)
			tcg_bar_arrive(bars + 8 * (STAGES + prev));
		prev = s;
		if (++s == STAGES) {
			s = 0;
			ph ^= 1;
		}
	}
	tcg_wgmma_wait<0>();
#pragma unroll
	for (int i = 0; i < BN / 2; i++)
		tcg_fence_acc(acc[i]);

	atlas_pdl_wait(); /* returned long ago in the producer: orders the stores */
	if constexpr (INV) {
		if (ws) { /* split: range z's chain, unmerged (atlas_gemm_inv_reduce) */
			tcg_store_inv(ga, seg, acc, m0, n0, cw, T, N, true);
			return;
		}
		/* the last non-empty range, then +0 for each empty one (the
		 * GEMV adds their zero partials too) */
		const int ranges = cpw > 0 ? (nch + cpw - 1) / cpw : 0;
#pragma unroll
		for (int i = 0; i < BN / 2; i++) {
			float v = tot[i];
			if (ranges > 0)
				v += acc[i];
			for (int q = ranges; q < ga.wpr; q++)
				v += 0.0f;
			acc[i] = v;
		}
		tcg_store_inv(ga, seg, acc, m0, n0, cw, T, N, false);
		return;
	}
	if (ws) /* split-K: FP32 partial sums, no bias (atlas_gemm_tc_reduce) */
		tcg_store_tile<BN, float>(ws + (long long)blockIdx.z * T * N, acc, NULL, m0, n0, cw,
					  T, N);
	else /* the result: bias, round, masked stores */
		tcg_store_tile<BN, OutT>(out, acc, bias, m0, n0, cw, T, N, rowmap);
}

template <typename OutT>
static __device__ __forceinline__ void tcg_entry(const atlas_tcg_args &ga)
{
	if (ga.bn == 256)
		tcg_tile<256, 4, OutT>(ga);
	else
		tcg_tile<128, 6, OutT>(ga);
}

static __device__ __forceinline__ void tcg_entry_grouped(const atlas_tcg_args &ga)
{
	if (ga.bn == 256)
		tcg_tile<256, 4, bf16, true>(ga);
	else
		tcg_tile<128, 6, bf16, true>(ga);
}

static __device__ __forceinline__ void tcg_entry_inv(const atlas_tcg_args &ga)
{
	tcg_tile<128, 6, bf16, false, true>(ga);
}

static __device__ __forceinline__ void tcg_entry_f8(const atlas_tcg_args &ga)
{
	tcg_tile<128, 6, bf16, false, false, true>(ga);
}

#else /* not sm_90a: no wgmma; the host never launches these here */

template <typename OutT>
static __device__ __forceinline__ void tcg_entry(const atlas_tcg_args &ga)
{
	__trap();
}

static __device__ __forceinline__ void tcg_entry_grouped(const atlas_tcg_args &ga)
{
	__trap();
}

static __device__ __forceinline__ void tcg_entry_inv(const atlas_tcg_args &ga)
{
	__trap();
}

static __device__ __forceinline__ void tcg_entry_f8(const atlas_tcg_args &ga)
{
	__trap();
}

#endif

extern "C" __global__ void __launch_bounds__(TCG_THREADS, 1)
atlas_gemm_tc(const __grid_constant__ atlas_tcg_args a)
{
	tcg_entry<bf16>(a);
}

extern "C" __global__ void __launch_bounds__(TCG_THREADS, 1)
atlas_gemm_tc_f32(const __grid_constant__ atlas_tcg_args a)
{
	tcg_entry<float>(a);
}

/* The grouped product of an MoE layer's prefill (moe.cu, cuda_moe.c): grid
 * (tile slots, sum of ny), block 384, TCG_SMEM; see tcg_tile. */
extern "C" __global__ void __launch_bounds__(TCG_THREADS, 1)
atlas_moe_gemm_tc(const __grid_constant__ atlas_tcg_args a)
{
	tcg_entry_grouped(a);
}

/* The batch-invariant form (header comment): 128 x 128 tiles, the
 * GEMV's K ranges (a.wpr), out bf16 or float (a.out_f32), bias or swiglu
 * (a.swiglu) in the epilogue; grid (ceil(T/128), sum of ny), block 384,
 * TCG_SMEM. */
extern "C" __global__ void __launch_bounds__(TCG_THREADS, 1)
atlas_gemm_tc_inv(const __grid_constant__ atlas_tcg_args a)
{
	tcg_entry_inv(a);
}

/* The W8A8 FP8 form (header comment): x FP8 with a scale per row and 128
 * columns (atlas_fp8_act_quant), W the F8B blobs' values, 128 x 128
 * tiles, 128-wide K slices; out bf16 plus bias, or split-K partials for
 * atlas_gemm_tc_reduce; grid (ceil(T/128), sum of ny, splits), block 384,
 * TCG_SMEM. */
extern "C" __global__ void __launch_bounds__(TCG_THREADS, 1)
atlas_gemm_tc_f8(const __grid_constant__ atlas_tcg_args a)
{
	tcg_entry_f8(a);
}

/* Segment blockIdx.y of a: out[T,N] (bf16, or float when out_f32) = its
 * a.splits split-K partials of atlas_gemm_tc summed in z order, plus
 * bias: deterministic. Grid (any, nseg), grid-stride over groups of 4
 * elements (float4 loads when T*N % 4 == 0). */
extern "C" __global__ void atlas_gemm_tc_reduce(const __grid_constant__ atlas_tcg_args a)
{
	ATLAS_PDL_ENTRY();
	const int seg = (int)blockIdx.y;
	if (seg >= a.nseg || !a.ws)
		return;
	const long long N = a.N[seg], n = a.T * N;
	const float *ws = a.ws + a.ws_off[seg];
	const bf16 *bias = (const bf16 *)a.bias[seg];
	const bool vec = n % 4 == 0;
	for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n;
	     i += (long long)gridDim.x * blockDim.x * 4) {
		float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		for (int z = 0; z < a.splits; z++) {
			const float *p = ws + (long long)z * n + i;
			if (vec) {
				const float4 q = __ldcg((const float4 *)p);
				v[0] += q.x, v[1] += q.y, v[2] += q.z, v[3] += q.w;
			} else {
				for (int j = 0; j < 4 && i + j < n; j++)
					v[j] += __ldcg(p + j);
			}
		}
		for (int j = 0; j < 4 && i + j < n; j++) {
			float r = v[j];
			if (bias)
				r += atlas_bf(bias[(i + j) % N]);
			if (a.out_f32)
				((float *)a.out[seg])[i + j] = r;
			else
				((bf16 *)a.out[seg])[i + j] = atlas_tobf(r);
		}
	}
}
