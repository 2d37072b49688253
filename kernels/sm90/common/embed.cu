/* embed.cu - atlas_embed: gather rows of the embedding table into bf16
 * activations.
 *
 * grid T, block 256: block t copies row ids[t] of the table (converted
 * from wdt to bf16) into out[t, :]. A bf16 table with 16-byte aligned rows
 * moves 16 bytes per thread per step; any other case takes the element
 * loop. Cost: D * (2 + sizeof(wdt)) bytes per token.
 */
#include "common.cuh"

extern "C" __global__ void atlas_embed(bf16 *out, const void *table, int wdt, const int *ids,
				       long long T, long long D)
{
	ATLAS_PDL_ENTRY();
	const long long t = blockIdx.x;
	if (t >= T)
		return;
	const long long row = (long long)ids[t] * D;
	bf16 *o = out + t * D;
	if (wdt == ATLAS_WDT_BF16 && D % 8 == 0 && atlas_aligned(table, 16) &&
	    atlas_aligned(out, 16)) {
		const uint4 *src = (const uint4 *)((const bf16 *)table + row);
		uint4 *dst = (uint4 *)o;
		for (long long i = threadIdx.x; i < D / 8; i += blockDim.x)
			dst[i] = __ldg(src + i);
		return;
	}
	for (long long i = threadIdx.x; i < D; i += blockDim.x)
		o[i] = atlas_tobf(atlas_wload(table, wdt, row + i));
}
