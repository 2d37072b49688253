/* backend.c - pick a backend by device name (see atlas_backend_open). */
#include "backend.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "../core/error.h"
#include "../core/log.h"

/* "cuda" or "cuda:N" with N a decimal GPU index. */
static int is_cuda(const char *d)
{
	if (strncmp(d, "cuda", 4))
		return 0;
	if (d[4] == '\0')
		return 1;
	if (d[4] != ':' || !d[5])
		return 0;
	return strspn(d + 5, "0123456789") == strlen(d + 5);
}

struct atlas_backend *atlas_backend_open(const char *device)
{
	if (!device || !strcmp(device, "auto")) {
#ifdef ATLAS_HAVE_CUDA
		/* the GPU when there is a usable one, else the CPU, saying why */
		struct atlas_backend *be = atlas_backend_cuda_new(0);
		if (be)
			return be;
		atlas_info("using the CPU: %s", atlas_errmsg());
#endif
		return atlas_backend_cpu_new();
	}
	if (!strcmp(device, "cpu"))
		return atlas_backend_cpu_new();
	if (!strcmp(device, "mock"))
		return atlas_backend_mock_new();
	if (is_cuda(device)) {
#ifdef ATLAS_HAVE_CUDA
		return atlas_backend_cuda_new(device[4] ? atoi(device + 5) : 0);
#else
		atlas_error(ATLAS_EUNSUPPORTED,
			    "device '%s' is not available: this build has no CUDA backend", device);
		return NULL;
#endif
	}
	atlas_error(ATLAS_EINVAL, "unknown device '%s' (expected cpu, cuda[:N] or auto)", device);
	return NULL;
}

/* --- ATLAS_DTYPE_F8B, ATLAS_DTYPE_W4B and ATLAS_DTYPE_FP4B blobs (backend.h) ------------------- */

int atlas_f8b_init(void *blob, int64_t N, int64_t K, int64_t bo, int64_t bi)
{
	if (N <= 0 || K <= 0 || bo <= 0 || bi <= 0 || (bi % 32 && bi < K) ||
	    bo > INT32_MAX || bi > INT32_MAX)
		return -1;
	/* a block wider than the row is the row: one block column */
	const int64_t nbc = (K + bi - 1) / bi;
	struct atlas_f8b_head h = {
	    .magic = ATLAS_F8B_MAGIC, .bo = (int32_t)bo, .bi = (int32_t)bi, .nbc = (int32_t)nbc,
	    .N = N, .K = K, .scale_off = atlas_f8b_scale_off(N, K)};
	memset(blob, 0, ATLAS_F8B_HEAD);
	memcpy(blob, &h, sizeof(h));
	return 0;
}

int atlas_w4b_init(void *blob, int64_t N, int64_t K, int64_t g)
{
	if (N <= 0 || K <= 0 || K % 32 || g <= 0 || (g % 32 && g < K) || g > INT32_MAX ||
	    (K + g - 1) / g > INT32_MAX)
		return -1;
	struct atlas_w4b_head h = {.magic = ATLAS_W4B_MAGIC,
				   .g = (int32_t)g,
				   .ng = (int32_t)((K + g - 1) / g),
				   .N = N,
				   .K = K,
				   .z_off = atlas_w4b_z_off(N, K),
				   .s_off = atlas_w4b_s_off(N, K, g)};
	memset(blob, 0, ATLAS_W4B_HEAD);
	memcpy(blob, &h, sizeof(h));
	return 0;
}

void atlas_w4b_row_bf16(const void *blob, int64_t n, uint16_t *out)
{
	struct atlas_w4b_head h;
	memcpy(&h, blob, sizeof(h));
	const uint8_t *q = (const uint8_t *)blob + ATLAS_W4B_HEAD + n * (h.K / 2);
	const uint8_t *z = (const uint8_t *)blob + h.z_off + n * h.ng;
	const uint16_t *s = (const uint16_t *)((const char *)blob + h.s_off) + n * h.ng;
	for (int64_t k = 0; k < h.K; k++) {
		const int v = (q[k / 2] >> (4 * (k & 1))) & 15;
		out[k] = atlas_f32_to_bf16((float)(v - z[k / h.g]) * atlas_bf16_to_f32(s[k / h.g]));
	}
}

int atlas_fp4b_init(void *blob, int64_t N, int64_t K, float gm)
{
	if (N <= 0 || K <= 0 || K % 32 || K / 16 > INT32_MAX || !(fabsf(gm) < 0x1p100f))
		return -1;
	struct atlas_fp4b_head h = {.magic = ATLAS_FP4B_MAGIC,
				    .g = 16,
				    .ng = (int32_t)(K / 16),
				    .gm = gm,
				    .N = N,
				    .K = K,
				    .s_off = atlas_fp4b_s_off(N, K)};
	memset(blob, 0, ATLAS_FP4B_HEAD);
	memcpy(blob, &h, sizeof(h));
	return 0;
}

void atlas_fp4b_row_bf16(const void *blob, int64_t n, uint16_t *out)
{
	struct atlas_fp4b_head h;
	memcpy(&h, blob, sizeof(h));
	const uint8_t *q = (const uint8_t *)blob + ATLAS_FP4B_HEAD + n * (h.K / 2);
	const uint8_t *s = (const uint8_t *)blob + h.s_off + n * h.ng;
	for (int64_t j = 0; j < h.ng; j++) {
		const float sc = atlas_f8e4m3_to_f32(s[j]) * h.gm;
		for (int64_t k = 16 * j; k < 16 * j + 16; k++)
			out[k] = atlas_f32_to_bf16(atlas_e2m1_to_f32((q[k / 2] >> (4 * (k & 1))) & 15) * sc);
	}
}

void atlas_f8b_row_bf16(const void *blob, int64_t n, uint16_t *out)
{
	struct atlas_f8b_head h;
	memcpy(&h, blob, sizeof(h));
	const uint8_t *q = (const uint8_t *)blob + ATLAS_F8B_HEAD + n * h.K;
	const float *s = (const float *)((const char *)blob + h.scale_off) + (n / h.bo) * h.nbc;
	for (int64_t k = 0; k < h.K; k++)
		out[k] = atlas_f32_to_bf16(atlas_f8e4m3_to_f32(q[k]) * s[k / h.bi]);
}
