/* probe-mma-order.cu - facts about the tensor cores' summation that the
 * batch-invariant kernels rely on, checked on the GPU at hand:
 *   1. mma.sync m16n8k16 (bf16 in, f32 accumulate) gives the same bits
 *      whatever permutation of the 16 k slots the operands use (A's
 *      columns and B's rows permuted alike);
 *   2. the same with A and B exchanged (D^T = B^T A^T): the products are
 *      exact, so only the hardware's adding could differ;
 *   3. wgmma m64n8k16 (operands in 128-byte swizzled shared memory) gives
 *      each element the bits mma.sync gives it for the same 16 products
 *      and accumulator, with x as A and W as B, and with W as A.
 * Operands are random bf16 of wide exponent range and both signs, so that
 * alignment and truncation inside the adder show.
 *
 * Build: nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o probe-mma-order probe-mma-order.cu
 * Output: one line per fact, "ok" or the count of differing elements;
 * exit status 0 only if every fact held. */
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

#define TRIALS 4096

/* D[16][8] = C + A[16][16] B[8][16]^T through one mma.sync, k slot s
 * taking k = perm[s]. */
__global__ void k_mma(const bf16 *A, const bf16 *B, const float *C, float *D, const int *perm)
{
	const int t = blockIdx.x, lane = threadIdx.x, g = lane >> 2, c = lane & 3;
	A += t * 256;
	B += t * 128;
	C += t * 128;
	D += t * 128;
	perm += t * 16;
	auto pa = [&](int r, int s) {
		bf16 lo = A[r * 16 + perm[s]], hi = A[r * 16 + perm[s + 1]];
		return (unsigned)__bfloat16_as_ushort(lo) | (unsigned)__bfloat16_as_ushort(hi) << 16;
	};
	auto pb = [&](int n, int s) {
		bf16 lo = B[n * 16 + perm[s]], hi = B[n * 16 + perm[s + 1]];
		return (unsigned)__bfloat16_as_ushort(lo) | (unsigned)__bfloat16_as_ushort(hi) << 16;
	};
	unsigned a0 = pa(g, 2 * c), a1 = pa(g + 8, 2 * c), a2 = pa(g, 2 * c + 8), a3 = pa(g + 8, 2 * c + 8);
	unsigned b0 = pb(g, 2 * c), b1 = pb(g, 2 * c + 8);
	float d[4] = {C[g * 8 + 2 * c], C[g * 8 + 2 * c + 1], C[(g + 8) * 8 + 2 * c], C[(g + 8) * 8 + 2 * c + 1]};
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
	D[g * 8 + 2 * c] = d[0];
	D[g * 8 + 2 * c + 1] = d[1];
	D[(g + 8) * 8 + 2 * c] = d[2];
	D[(g + 8) * 8 + 2 * c + 1] = d[3];
}

/* D[64][8] = C + A[64][16] B[8][16]^T through one wgmma m64n8k16, both
 * operands K-major in 128-byte swizzled shared memory (k in the first 32
 * bytes of each 128-byte row). */
__global__ void k_wgmma(const bf16 *A, const bf16 *B, const float *C, float *D)
{
	__shared__ __align__(1024) unsigned char sa[64 * 128];
	__shared__ __align__(1024) unsigned char sb[8 * 128];
	const int t = blockIdx.x, tid = threadIdx.x;
	A += t * 1024;
	B += t * 128;
	C += t * 512;
	D += t * 512;
	for (int i = tid; i < 64 * 64; i += 128) {
		const int r = i / 64, k = i % 64, u = k / 8;
		bf16 v = k < 16 ? A[r * 16 + k] : __float2bfloat16(0.0f);
		*(bf16 *)(sa + (r / 8) * 1024 + (r % 8) * 128 + ((u ^ (r % 8)) * 16) + (k % 8) * 2) = v;
	}
	for (int i = tid; i < 8 * 64; i += 128) {
		const int r = i / 64, k = i % 64, u = k / 8;
		bf16 v = k < 16 ? B[r * 16 + k] : __float2bfloat16(0.0f);
		*(bf16 *)(sb + (r % 8) * 128 + ((u ^ (r % 8)) * 16) + (k % 8) * 2) = v;
	}
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	__syncthreads();
	const int w = tid >> 5, l = tid & 31;
	const int r0 = 16 * w + l / 4, c0 = 2 * (l % 4);
	float d[4] = {C[r0 * 8 + c0], C[r0 * 8 + c0 + 1], C[(r0 + 8) * 8 + c0], C[(r0 + 8) * 8 + c0 + 1]};
	auto desc = [](const void *p) {
		uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
		return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
		       ((uint64_t)1 << 62);
	};
	uint64_t da = desc(sa), db = desc(sb);
	asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "l"(da), "l"(db), "r"(1));
	asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
	asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
	D[r0 * 8 + c0] = d[0];
	D[r0 * 8 + c0 + 1] = d[1];
	D[(r0 + 8) * 8 + c0] = d[2];
	D[(r0 + 8) * 8 + c0 + 1] = d[3];
}

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)(rs >> 11);
}

/* a bf16 of random sign, exponent in [-spread, spread], random mantissa;
 * 1 in 16 is zero */
static bf16 rbf(int spread)
{
	if (rnd() % 16 == 0)
		return __float2bfloat16(0.0f);
	float m = 1.0f + (rnd() % 128) / 128.0f;
	int e = (int)(rnd() % (2 * spread + 1)) - spread;
	float v = ldexpf(m, e) * (rnd() & 1 ? -1.0f : 1.0f);
	return __float2bfloat16(v);
}

static float rf(int spread)
{
	if (rnd() % 8 == 0)
		return 0.0f;
	float m = 1.0f + (rnd() % (1u << 23)) / (float)(1u << 23);
	return ldexpf(m, (int)(rnd() % (2 * spread + 1)) - spread) * (rnd() & 1 ? -1.0f : 1.0f);
}

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                  \
			exit(2);                                                                   \
		}                                                                                  \
	} while (0)

template <typename T> static T *dev(const T *h, size_t n)
{
	T *d;
	CK(cudaMalloc(&d, n * sizeof(T)));
	if (h)
		CK(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
	return d;
}

template <typename T> static void back(T *h, const T *d, size_t n)
{
	CK(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost));
}

static int report(const char *what, const float *a, const float *b, size_t n)
{
	size_t bad = 0, first = n;
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], 4)) {
			if (!bad)
				first = i;
			bad++;
		}
	if (bad)
		printf("%s: %zu of %zu differ (first %zu: %.9g vs %.9g)\n", what, bad, n, first, a[first], b[first]);
	else
		printf("%s: ok (%zu elements)\n", what, n);
	return bad != 0;
}

int main(int argc, char **argv)
{
	const int spread = argc > 1 ? atoi(argv[1]) : 12;
	const int N = TRIALS;
	/* x [N][64][16] tokens, W [N][16][16] weight rows, C [N][64][16] (t, n) */
	bf16 *x = (bf16 *)malloc(sizeof(bf16) * N * 1024), *w = (bf16 *)malloc(sizeof(bf16) * N * 256);
	float *cc = (float *)malloc(sizeof(float) * N * 1024);
	for (int i = 0; i < N * 1024; i++)
		x[i] = rbf(spread);
	for (int i = 0; i < N * 256; i++)
		w[i] = rbf(spread);
	for (int i = 0; i < N * 1024; i++)
		cc[i] = rf(2 * spread);

	int *id = (int *)malloc(sizeof(int) * N * 16), *pm = (int *)malloc(sizeof(int) * N * 16);
	for (int t = 0; t < N; t++) {
		for (int s = 0; s < 16; s++)
			id[t * 16 + s] = pm[t * 16 + s] = s;
		for (int s = 15; s > 0; s--) {
			int j = rnd() % (s + 1), tmp = pm[t * 16 + s];
			pm[t * 16 + s] = pm[t * 16 + j];
			pm[t * 16 + j] = tmp;
		}
	}
	int fail = 0;
	/* reference R[t][n] for t < 8, n < 16 of each trial: mma.sync, A = W
	 * (16 rows), B = tokens 0..7, C^T */
	bf16 *hA = (bf16 *)malloc(sizeof(bf16) * N * 256), *hB = (bf16 *)malloc(sizeof(bf16) * N * 128);
	float *hC = (float *)malloc(sizeof(float) * N * 128), *hD = (float *)malloc(sizeof(float) * N * 128);
	float *ref = (float *)malloc(sizeof(float) * N * 128), *got = (float *)malloc(sizeof(float) * N * 128);
	for (int t = 0; t < N; t++) {
		memcpy(hA + t * 256, w + t * 256, sizeof(bf16) * 256);
		memcpy(hB + t * 128, x + t * 1024, sizeof(bf16) * 128);
		for (int n = 0; n < 16; n++)
			for (int j = 0; j < 8; j++)
				hC[t * 128 + n * 8 + j] = cc[t * 1024 + j * 16 + n];
	}
	bf16 *dA = dev<bf16>(NULL, N * 256), *dB = dev<bf16>(NULL, N * 128);
	float *dC = dev<float>(NULL, N * 128), *dD = dev<float>(NULL, N * 128);
	int *did = dev(id, N * 16), *dpm = dev(pm, N * 16);
	/* hD = the mma of every trial's hA, hB, hC, k slots by perm */
	auto run_mma = [&](const int *perm) {
		CK(cudaMemcpy(dA, hA, sizeof(bf16) * N * 256, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dB, hB, sizeof(bf16) * N * 128, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dC, hC, sizeof(float) * N * 128, cudaMemcpyHostToDevice));
		k_mma<<<N, 32>>>(dA, dB, dC, dD, perm);
		CK(cudaDeviceSynchronize());
		back(hD, dD, N * 128);
	};
	run_mma(did);
	for (int t = 0; t < N; t++) /* ref[t][tok][n] */
		for (int n = 0; n < 16; n++)
			for (int j = 0; j < 8; j++)
				ref[t * 128 + j * 16 + n] = hD[t * 128 + n * 8 + j];

	/* 1. permuted k slots */
	run_mma(dpm);
	for (int t = 0; t < N; t++)
		for (int n = 0; n < 16; n++)
			for (int j = 0; j < 8; j++)
				got[t * 128 + j * 16 + n] = hD[t * 128 + n * 8 + j];
	fail |= report("mma.sync, k slots permuted", ref, got, (size_t)N * 128);

	/* 2. A = tokens 0..15 (rows 8..15 of the tile unused), B = W rows
	 * 0..7, then 8..15 */
	for (int half = 0; half < 2; half++) {
		for (int t = 0; t < N; t++) {
			memcpy(hA + t * 256, x + t * 1024, sizeof(bf16) * 256);
			memcpy(hB + t * 128, w + t * 256 + half * 128, sizeof(bf16) * 128);
			for (int j = 0; j < 16; j++)
				for (int n = 0; n < 8; n++)
					hC[t * 128 + j * 8 + n] = cc[t * 1024 + j * 16 + 8 * half + n];
		}
		run_mma(did);
		for (int t = 0; t < N; t++)
			for (int j = 0; j < 8; j++)
				for (int n = 0; n < 8; n++)
					got[t * 128 + j * 16 + 8 * half + n] = hD[t * 128 + j * 8 + n];
	}
	fail |= report("mma.sync, A and B exchanged", ref, got, (size_t)N * 128);

	/* 3a. wgmma, A = x (64 tokens), B = W rows 0..7 / 8..15 */
	bf16 *wA = (bf16 *)malloc(sizeof(bf16) * N * 1024), *wB = (bf16 *)malloc(sizeof(bf16) * N * 128);
	float *wC = (float *)malloc(sizeof(float) * N * 512), *wD = (float *)malloc(sizeof(float) * N * 512);
	bf16 *dwA = dev<bf16>(NULL, N * 1024), *dwB = dev<bf16>(NULL, N * 128);
	float *dwC = dev<float>(NULL, N * 512), *dwD = dev<float>(NULL, N * 512);
	/* wD = the wgmma of every trial's wA, wB, wC */
	auto run_wgmma = [&]() {
		CK(cudaMemcpy(dwA, wA, sizeof(bf16) * N * 1024, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dwB, wB, sizeof(bf16) * N * 128, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dwC, wC, sizeof(float) * N * 512, cudaMemcpyHostToDevice));
		k_wgmma<<<N, 128>>>(dwA, dwB, dwC, dwD);
		CK(cudaDeviceSynchronize());
		back(wD, dwD, N * 512);
	};
	for (int half = 0; half < 2; half++) {
		for (int t = 0; t < N; t++) {
			memcpy(wA + t * 1024, x + t * 1024, sizeof(bf16) * 1024);
			memcpy(wB + t * 128, w + t * 256 + half * 128, sizeof(bf16) * 128);
			for (int j = 0; j < 64; j++)
				for (int n = 0; n < 8; n++)
					wC[t * 512 + j * 8 + n] = cc[t * 1024 + j * 16 + 8 * half + n];
		}
		run_wgmma();
		for (int t = 0; t < N; t++)
			for (int j = 0; j < 8; j++)
				for (int n = 0; n < 8; n++)
					got[t * 128 + j * 16 + 8 * half + n] = wD[t * 512 + j * 8 + n];
	}
	fail |= report("wgmma m64n8k16, A = x, B = W", ref, got, (size_t)N * 128);

	/* 3b. wgmma, A = W (16 rows, zero below), B = tokens 0..7 */
	for (int t = 0; t < N; t++) {
		memset(wA + t * 1024, 0, sizeof(bf16) * 1024);
		memcpy(wA + t * 1024, w + t * 256, sizeof(bf16) * 256);
		memcpy(wB + t * 128, x + t * 1024, sizeof(bf16) * 128);
		for (int j = 0; j < 512; j++)
			wC[t * 512 + j] = 0.0f;
		for (int n = 0; n < 16; n++)
			for (int j = 0; j < 8; j++)
				wC[t * 512 + n * 8 + j] = cc[t * 1024 + j * 16 + n];
	}
	run_wgmma();
	for (int t = 0; t < N; t++)
		for (int n = 0; n < 16; n++)
			for (int j = 0; j < 8; j++)
				got[t * 128 + j * 16 + n] = wD[t * 512 + n * 8 + j];
	fail |= report("wgmma m64n8k16, A = W, B = x", ref, got, (size_t)N * 128);
	return fail;
}
