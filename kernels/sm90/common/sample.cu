/* sample.cu - atlas_sample: pick the next token of each row of logits on
 * the device, so only the id crosses to the host.
 *
 * grid n (one row each), block 1024 (any multiple of 32 works; the sort
 * is written for 1024). Row i reads args[5i .. 5i+4] = {temperature,
 * top_k, top_p, min_p, u} and follows atlas_sample_pick
 * (lib/backend/sample_ref.c) step by step:
 *  - temperature 0: argmax, lowest index on ties (one block reduction);
 *  - no filter (top_k 0 or >= V, top_p 1, min_p 0): the candidates stay in
 *    index order, p_i = exp(l_i - max), the walk runs in index order (as
 *    the reference does: it sorts only when a filter needs the order);
 *  - else the kept candidates in scratch, sorted by logit descending, ties
 *    by lower index: top_k <= SAMPLE_SMALLK by repeated block argmax (k
 *    passes over the row), otherwise a bitonic sort of the whole row
 *    (shrunk first to the min_p survivors when no top_k applies, which is
 *    exact: min_p keeps precisely the candidates with p_j >= min_p);
 *    then top-p, min-p and the draw as prefix scans over the list.
 * Sums are in double as in the reference, but taken as block reductions
 * and scans, so they can differ from the sequential host sums in the last
 * bits; expf may differ from the host's by an ulp. A draw differs only
 * when u lands within that rounding of a boundary.
 *
 * scratch: 2*V floats per row: V float keys then V int ids.
 * Cost: greedy and unfiltered draws read the row 1-3 times (2 V bytes
 * each); top_k <= 64 reads it k times; the sort path does ~log2(V)^2 / 2
 * passes over 8 V bytes in L2 (~1-2 ms at V = 152K: the part to tune).
 */
#include <limits.h>

#include "common.cuh"

#define SAMPLE_TILE 2048  /* elements of one shared-memory sort tile */
#define SAMPLE_SMALLK 64  /* top_k up to this: repeated argmax, no sort */
#define SMP_INFLIGHT 8    /* greedy: 16-byte loads in flight a thread */

/* (la, ia) comes before (lb, ib): larger logit, then lower index. */
static __device__ __forceinline__ bool smp_before(float la, int ia, float lb, int ib)
{
	return la > lb || (la == lb && ia < ib);
}

/* f(logit, index) for every element of lg[b0, b1), each by one thread of
 * the block: the unaligned head one by one, then 16-byte loads,
 * SMP_INFLIGHT of them in flight a thread before the first is used (a
 * row of 152K logits read one float at a time was ~37 dependent round
 * trips: 38 us of a 4.4 ms Qwen3-8B step), then the tail. */
template <class F>
static __device__ __forceinline__ void smp_scan(const float *lg, long long b0, long long b1, F f)
{
	long long i0 = b0;
	while (i0 < b1 && ((unsigned long long)(lg + i0) & 15))
		i0++;
	for (long long i = b0 + threadIdx.x; i < i0; i += blockDim.x)
		f(lg[i], (int)i);
	const long long n4 = (b1 - i0) / 4;
	const float4 *l4 = (const float4 *)(lg + i0);
	for (long long b = threadIdx.x; b < n4; b += SMP_INFLIGHT * blockDim.x) {
		float4 v[SMP_INFLIGHT];
#pragma unroll
		for (int u = 0; u < SMP_INFLIGHT; u++)
			if (b + u * blockDim.x < n4)
				v[u] = l4[b + u * blockDim.x];
#pragma unroll
		for (int u = 0; u < SMP_INFLIGHT; u++) {
			const long long j = b + u * blockDim.x;
			if (j < n4) {
				const int i = (int)(i0 + 4 * j);
				f(v[u].x, i), f(v[u].y, i + 1), f(v[u].z, i + 2), f(v[u].w, i + 3);
			}
		}
	}
	for (long long i = i0 + 4 * n4 + threadIdx.x; i < b1; i += blockDim.x)
		f(lg[i], (int)i);
}

/* The first of (l, i) over the block in the order above, to every
 * thread. tl, ti: 32 entries of shared memory each. */
static __device__ void smp_block_first(float &l, int &i, float *tl, int *ti)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nw = (blockDim.x + 31) >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float ol = __shfl_xor_sync(0xffffffffu, l, o);
		int oi = __shfl_xor_sync(0xffffffffu, i, o);
		if (smp_before(ol, oi, l, i))
			l = ol, i = oi;
	}
	__syncthreads();
	if (lane == 0)
		tl[warp] = l, ti[warp] = i;
	__syncthreads();
	l = lane < nw ? tl[lane] : -INFINITY;
	i = lane < nw ? ti[lane] : INT_MAX;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float ol = __shfl_xor_sync(0xffffffffu, l, o);
		int oi = __shfl_xor_sync(0xffffffffu, i, o);
		if (smp_before(ol, oi, l, i))
			l = ol, i = oi;
	}
}

/* Shared state of one row. */
struct smp_shared {
	float tl[32];		 /* block_first scratch: logits */
	int ti[32];		 /* block_first scratch: ids */
	double td[32];		 /* double sums and scans */
	int found;		 /* first index meeting a predicate */
	float skey[SAMPLE_TILE]; /* sort tile: keys */
	int sidx[SAMPLE_TILE];	 /* sort tile: ids */
};

/* The first i in [0, n) for which pred(i, sum of val(0..i)) holds, or -1;
 * val gives doubles, the sum is an inclusive prefix sum in double. Runs
 * blockDim.x elements at a time and stops at the first chunk with a hit. */
template <class V, class P>
static __device__ int smp_first(int n, V val, P pred, smp_shared *sh)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nw = (blockDim.x + 31) >> 5;
	double carry = 0.0;
	__syncthreads(); /* everyone has read the previous call's found */
	if (threadIdx.x == 0)
		sh->found = INT_MAX;
	for (int b = 0; b < n; b += blockDim.x) {
		const int i = b + threadIdx.x;
		double x = i < n ? val(i) : 0.0;
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) {
			double y = __shfl_up_sync(0xffffffffu, x, o);
			if (lane >= o)
				x += y;
		}
		__syncthreads(); /* td of the previous chunk is read; found is set */
		if (lane == 31)
			sh->td[warp] = x;
		__syncthreads();
		double before = 0.0, total = 0.0;
		for (int w = 0; w < nw; w++) {
			if (w < warp)
				before += sh->td[w];
			total += sh->td[w];
		}
		if (i < n && pred(i, carry + before + x))
			atomicMin(&sh->found, i);
		__syncthreads();
		if (sh->found != INT_MAX)
			return sh->found;
		carry += total;
	}
	return -1;
}

/* One compare-exchange step of the bitonic sort over positions
 * [base, base + len) of key/idx (global or shared), for sub-sequences of
 * size s and partner distance j; flip: the first step of a merge, which
 * pairs i with the mirror position so that every comparator sorts the
 * same way. Positions >= n stand for entries after every real one and
 * never move, so comparators that reach them are skipped. */
static __device__ __forceinline__ void smp_step(float *key, int *idx, int base, int len, int s,
						int j, bool flip, int n)
{
	for (int c = threadIdx.x; c < len / 2; c += blockDim.x) {
		int i, p;
		if (flip) {
			const int h = s / 2, b = (c / h) * s, m = c % h;
			i = b + m;
			p = b + s - 1 - m;
		} else {
			i = (c / j) * 2 * j + c % j;
			p = i + j;
		}
		if (base + p >= n)
			continue;
		float ki = key[i], kp = key[p];
		int ii = idx[i], ip = idx[p];
		if (smp_before(kp, ip, ki, ii)) {
			key[i] = kp, key[p] = ki;
			idx[i] = ip, idx[p] = ii;
		}
	}
}

/* Copy one tile between the scratch list and shared memory. */
static __device__ void smp_tile(float *key, int *idx, int base, int len, int n, smp_shared *sh,
				bool load)
{
	for (int i = threadIdx.x; i < len && base + i < n; i += blockDim.x) {
		if (load)
			sh->skey[i] = key[base + i], sh->sidx[i] = idx[base + i];
		else
			key[base + i] = sh->skey[i], idx[base + i] = sh->sidx[i];
	}
	__syncthreads();
}

/* Sort key/idx[0, n) in place: logit descending, ties by lower index. */
static __device__ void smp_sort(float *key, int *idx, int n, smp_shared *sh)
{
	int P = 1;
	while (P < n)
		P <<= 1;
	const int tile = P < SAMPLE_TILE ? P : SAMPLE_TILE;
	/* every tile sorted on its own, in shared memory */
	for (int base = 0; base < n; base += tile) {
		smp_tile(key, idx, base, tile, n, sh, true);
		for (int s = 2; s <= tile; s <<= 1)
			for (int j = s / 2; j > 0; j >>= 1) {
				smp_step(sh->skey, sh->sidx, base, tile, s, j, j == s / 2, n);
				__syncthreads();
			}
		smp_tile(key, idx, base, tile, n, sh, false);
	}
	/* merges wider than a tile: long strides in place, short in shared */
	for (int s = 2 * tile; s <= P; s <<= 1) {
		for (int j = s / 2; j >= tile; j >>= 1) {
			smp_step(key, idx, 0, P, s, j, j == s / 2, n);
			__syncthreads();
		}
		for (int base = 0; base < n; base += tile) {
			smp_tile(key, idx, base, tile, n, sh, true);
			for (int j = tile / 2; j > 0; j >>= 1) {
				smp_step(sh->skey, sh->sidx, base, tile, s, j, false, n);
				__syncthreads();
			}
			smp_tile(key, idx, base, tile, n, sh, false);
		}
	}
}

extern "C" __global__ void __launch_bounds__(1024)
    atlas_sample(int *ids, const float *logits, long long V, const float *args, float *scratch)
{
	ATLAS_PDL_ENTRY();
	__shared__ smp_shared sh;
	const long long row = blockIdx.x;
	const float *lg = logits + row * V;
	const float temp = args[row * 5 + 0];
	const long long top_k = (long long)args[row * 5 + 1];
	const float top_p = args[row * 5 + 2], min_p = args[row * 5 + 3];
	const float u = args[row * 5 + 4];
	const int n = (int)V;
	if (n <= 0)
		return;

	if (temp == 0.0f) {
		float bl = -INFINITY;
		int bi = INT_MAX;
		smp_scan(lg, 0, n, [&](float l, int i) {
			if (smp_before(l, i, bl, bi))
				bl = l, bi = i;
		});
		smp_block_first(bl, bi, sh.tl, sh.ti);
		if (threadIdx.x == 0)
			ids[row] = bi < n ? bi : 0;
		return;
	}

	/* the processed logit of token i */
	auto logit = [&](int i) { return lg[i] / temp; };
	const int k = top_k > 0 && top_k < n ? (int)top_k : n;

	if (k == n && !(top_p < 1.0f) && !(min_p > 0.0f)) {
		float mx = -INFINITY;
		for (int i = threadIdx.x; i < n; i += blockDim.x)
			mx = fmaxf(mx, logit(i));
		mx = atlas_block_max(mx, sh.tl);
		double sum = 0.0;
		for (int i = threadIdx.x; i < n; i += blockDim.x)
			sum += (double)expf(logit(i) - mx);
		sum = atlas_block_sum_d(sum, sh.td);
		const double r = (double)u * sum;
		int hit = smp_first(
		    n, [&](int i) { return (double)expf(logit(i) - mx); },
		    [&](int, double acc) { return r < acc; }, &sh);
		if (threadIdx.x == 0)
			ids[row] = hit >= 0 ? hit : n - 1;
		return;
	}

	float *key = scratch + row * 2 * V;
	int *idx = (int *)(key + V);
	int len;	     /* entries of the sorted list */
	double sum = -1.0;   /* mass of the top-k set, when known before the list */
	if (k <= SAMPLE_SMALLK) {
		float ll = INFINITY;
		int li = -1;
		for (int j = 0; j < k; j++) {
			float bl = -INFINITY;
			int bi = INT_MAX;
			for (int i = threadIdx.x; i < n; i += blockDim.x) {
				float l = logit(i);
				if (smp_before(ll, li, l, i) && smp_before(l, i, bl, bi))
					bl = l, bi = i;
			}
			smp_block_first(bl, bi, sh.tl, sh.ti);
			if (bi == INT_MAX) /* only NaNs left */
				bi = li, bl = ll;
			if (threadIdx.x == 0)
				key[j] = bl, idx[j] = bi;
			ll = bl, li = bi;
		}
		len = k;
	} else {
		/* with no top_k, min_p keeps exactly the p_j >= min_p: sort only those */
		const bool compact = k == n && min_p > 0.0f;
		if (compact) {
			float mx = -INFINITY;
			for (int i = threadIdx.x; i < n; i += blockDim.x)
				mx = fmaxf(mx, logit(i));
			mx = atlas_block_max(mx, sh.tl);
			double s = 0.0;
			for (int i = threadIdx.x; i < n; i += blockDim.x)
				s += (double)expf(logit(i) - mx);
			sum = atlas_block_sum_d(s, sh.td);
			if (threadIdx.x == 0)
				sh.found = 0;
			__syncthreads();
			for (int i = threadIdx.x; i < n; i += blockDim.x) {
				float l = logit(i);
				if (expf(l - mx) >= min_p) {
					int at = atomicAdd(&sh.found, 1);
					key[at] = l, idx[at] = i;
				}
			}
		} else {
			for (int i = threadIdx.x; i < n; i += blockDim.x)
				key[i] = logit(i), idx[i] = i;
		}
		__syncthreads();
		len = compact ? sh.found : n;
		__syncthreads();
		smp_sort(key, idx, len, &sh);
		if (len > k)
			len = k;
	}
	__syncthreads();

	/* softmax over the survivors: the list is sorted, so its max is key[0] */
	const float mx = key[0];
	auto prob = [&](int i) { return expf(key[i] - mx); };
	if (sum < 0.0) {
		double s = 0.0;
		for (int i = threadIdx.x; i < len; i += blockDim.x)
			s += (double)prob(i);
		sum = atlas_block_sum_d(s, sh.td);
	}
	if (top_p < 1.0f) {
		const double tp = top_p;
		int hit = smp_first(
		    len, [&](int i) { return (double)prob(i) / sum; },
		    [&](int, double acc) { return acc >= tp; }, &sh);
		if (hit >= 0)
			len = hit + 1;
	}
	if (min_p > 0.0f) {
		const float floor_p = min_p * prob(0);
		int hit = smp_first(
		    len, [&](int) { return 0.0; },
		    [&](int i, double) { return i > 0 && prob(i) < floor_p; }, &sh);
		if (hit >= 0)
			len = hit;
	}
	double s = 0.0;
	for (int i = threadIdx.x; i < len; i += blockDim.x)
		s += (double)prob(i);
	const double r = (double)u * atlas_block_sum_d(s, sh.td);
	int hit = smp_first(
	    len, [&](int i) { return (double)prob(i); }, [&](int, double acc) { return r < acc; },
	    &sh);
	if (threadIdx.x == 0)
		ids[row] = idx[hit >= 0 ? hit : len - 1];
}

/* atlas_argmax: the greedy pick of rows whose every sampler is greedy
 * (the host knows: op_sample), over many blocks instead of one. grid
 * (nb, n rows), block 256: block b of row r reads elements
 * [V b / nb, V (b + 1) / nb) (smp_scan) and folds its best into keys[r]
 * with a 64-bit atomicMax: the logit's bits made order-preserving in the
 * high word, ~index in the low one, so the larger logit and then the
 * lower index wins, as smp_before orders them (NaN never wins; a row of
 * NaN gives id 0, as atlas_sample gives). The last block of a row
 * (done[r]) writes ids[r] and leaves keys[r] and done[r] zero for the
 * next launch. keys and done start zero (cuda_ops.c clears them when it
 * allocates them). A 152K row: 6.8 us on the H200, where one block of
 * atlas_sample took 13. */
static __device__ __forceinline__ unsigned long long amx_key(float l, int i)
{
	unsigned u = __float_as_uint(l + 0.0f); /* -0 as +0: they tie, as in smp_before */
	u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	return ((unsigned long long)u << 32) | (unsigned)(0xffffffffu - (unsigned)i);
}

extern "C" __global__ void __launch_bounds__(256)
    atlas_argmax(int *ids, const float *logits, long long V, unsigned long long *keys,
		 unsigned *done)
{
	ATLAS_PDL_ENTRY();
	__shared__ unsigned long long wk[8];
	__shared__ bool last;
	const long long row = blockIdx.y;
	const float *lg = logits + row * V;
	const long long b0 = V * blockIdx.x / gridDim.x, b1 = V * (blockIdx.x + 1) / gridDim.x;
	unsigned long long best = 0; /* below every real key */
	smp_scan(lg, b0, b1, [&](float l, int i) {
		const unsigned long long k = amx_key(l, i);
		if (!isnan(l) && k > best)
			best = k;
	});
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const unsigned long long x = __shfl_xor_sync(0xffffffffu, best, o);
		best = x > best ? x : best;
	}
	if ((threadIdx.x & 31) == 0)
		wk[threadIdx.x >> 5] = best;
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int w = 1; w < (int)(blockDim.x >> 5); w++)
			best = wk[w] > best ? wk[w] : best;
		if (best)
			atomicMax(keys + row, best);
		__threadfence();
		last = atomicAdd(done + row, 1u) == gridDim.x - 1;
		if (last) {
			__threadfence();
			const unsigned long long k = atomicExch(keys + row, 0ull);
			ids[row] = k ? (int)(0xffffffffu - (unsigned)(k & 0xffffffffu)) : 0;
			done[row] = 0;
		}
	}
}

/* atlas_mask_logits: grammar-constrained decoding's mask, applied before
 * atlas_sample / atlas_argmax: logits of the tokens a row's mask leaves
 * out become -inf, which both samplers then never choose (exp(-inf) = 0
 * mass, and -inf never wins an argmax over an allowed finite logit).
 * grid (ceil(W / 256), nm), block 256: thread w of row y handles the 32
 * tokens of mask word w of row rows[y]; words [nm, W] (W = ceil(V / 32)),
 * bit i % 32 of word i / 32 set = token i allowed. Per-row work only, so
 * a row's result never depends on its batch-mates. */
extern "C" __global__ void __launch_bounds__(256)
    atlas_mask_logits(float *logits, long long V, const int *rows, const unsigned *words,
		      long long W)
{
	ATLAS_PDL_ENTRY();
	const long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (w >= W)
		return;
	const unsigned bits = words[(long long)blockIdx.y * W + w];
	if (bits == 0xffffffffu)
		return;
	float *lg = logits + (long long)rows[blockIdx.y] * V;
	const long long i0 = w * 32;
	for (int b = 0; b < 32 && i0 + b < V; b++)
		if (!((bits >> b) & 1u))
			lg[i0 + b] = -INFINITY;
}
