/* fuzz-quant.c - libFuzzer entry point for the quantized-checkpoint
 * reader (lib/io/quant.c and the format dequantizers).
 *
 * Byte 0 picks what the rest is: 0..6, a safetensors file dequantized as
 * the module "m" in one of the seven formats (bytes 1 and 2 give the
 * weight's out and in, 1..64 and 1..256, so shapes both match and miss
 * the tensors'); anything else, a config.json text for
 * atlas_quant_parse; the FP8 formats also through atlas_quant_f8_view
 * into an F8B blob (backend.h), read back row by row as the GPU loader
 * and the CPU reference do, and the integer ones through
 * atlas_quant_int_view, whose values, zeros and groups must be in range
 * and whose W must be atlas_quant_dequant's bit for bit (else abort); the
 * NVFP4 ones through atlas_quant_fp4_view into an FP4B blob whose rows
 * must be atlas_quant_dequant's W rounded to BF16, bit for bit. A
 * tensor set that slips past the checks with a bad length reads out of
 * bounds here under ASan. See README. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/backend/backend.h"
#include "../../lib/io/quant.h"
#include "../../lib/io/safetensors.h"

static char path[64];

static const char *const configs[] = {
    "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [4, 8]}}",
    "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
    "\"float-quantized\", \"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 8, \"type\": "
    "\"float\", \"strategy\": \"channel\"}}}}}",
    "{\"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 8, "
    "\"version\": \"gemm\"}}",
    "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 8, "
    "\"desc_act\": true}}",
    "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
    "\"pack-quantized\", \"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 4, \"type\": "
    "\"int\", \"strategy\": \"group\", \"group_size\": 8, \"symmetric\": false}}}}}",
    "{\"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\"}}",
    "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
    "\"nvfp4-pack-quantized\", \"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 4, "
    "\"type\": \"float\", \"strategy\": \"tensor_group\", \"group_size\": 16}}}}}",
};

static int write_input(const uint8_t *data, size_t size)
{
	if (!path[0]) {
		snprintf(path, sizeof(path), "/tmp/fuzz-quant-%d-XXXXXX", (int)getpid());
		int fd = mkstemp(path);
		if (fd < 0)
			return -1;
		close(fd);
	}
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	if (size && fwrite(data, 1, size, f) != size) {
		fclose(f);
		return -1;
	}
	return fclose(f);
}

static void remove_input(void)
{
	if (path[0])
		unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int registered;
	struct atlas_quant q;
	if (!registered) {
		atexit(remove_input);
		registered = 1;
	}
	if (size < 3)
		return 0;
	if (data[0] >= sizeof(configs) / sizeof(configs[0])) {
		char *text = malloc(size);
		if (!text)
			return 0;
		memcpy(text, data + 1, size - 1);
		text[size - 1] = 0;
		if (atlas_quant_parse(text, NULL, "fuzz", &q) == 0) {
			atlas_quant_ignored(&q, "model.layers.0.mlp.gate");
			atlas_quant_free(&q);
		}
		free(text);
		return 0;
	}
	const int64_t out = 1 + data[1] % 64, in = 1 + data[2] % 256;
	if (atlas_quant_parse(configs[data[0]], NULL, "fuzz", &q) || write_input(data + 3, size - 3))
		return 0;
	struct atlas_st *st = atlas_st_open(path);
	if (st) {
		float *w = malloc((size_t)(out * in) * sizeof(float));
		const int deq =
		    w ? atlas_quant_dequant(&q, st, "m.weight", out, in, ATLAS_DTYPE_F32, w) : 0;
		if (deq == 1) {
			volatile float sink = 0;
			for (int64_t i = 0; i < out * in; i++)
				sink += w[i];
			(void)sink;
		}
		atlas_quant_stored_bytes(&q, st, "m.weight");
		/* the FP8 formats as the loader keeps them on GPUs: the view,
		 * its scales, an F8B blob and its rows read back */
		struct atlas_quant_f8 v;
		if (atlas_quant_f8_view(&q, st, "m.weight", out, in, &v) == 1) {
			const int64_t bytes = atlas_f8b_bytes(out, in, v.bo, v.bi);
			char *blob = malloc((size_t)bytes);
			uint16_t *row = malloc((size_t)in * sizeof(uint16_t));
			if (blob && row && atlas_f8b_init(blob, out, in, v.bo, v.bi) == 0) {
				memcpy(blob + ATLAS_F8B_HEAD, v.q, (size_t)(out * in));
				atlas_quant_f8_scales(&v, out, in,
						      (float *)(blob + atlas_f8b_scale_off(out, in)));
				for (int64_t r = 0; r < out; r++)
					atlas_f8b_row_bf16(blob, r, row);
			}
			free(row);
			free(blob);
		}
		/* NVFP4 as the loader keeps it on GPUs: the view packed into an
		 * FP4B blob, its rows the dequantized W in BF16 */
		struct atlas_quant_fp4 fv;
		if (atlas_quant_fp4_view(&q, st, "m.weight", out, in, &fv) == 1) {
			const int64_t bytes = atlas_fp4b_bytes(out, in);
			char *blob = malloc((size_t)bytes);
			uint16_t *row = malloc((size_t)in * sizeof(uint16_t));
			if (blob && row && atlas_fp4b_init(blob, out, in, fv.gm) == 0) {
				memcpy(blob + ATLAS_FP4B_HEAD, fv.q, (size_t)(out * in / 2));
				memcpy(blob + atlas_fp4b_s_off(out, in), fv.s, (size_t)(out * (in / 16)));
				for (int64_t r = 0; r < out; r++) {
					atlas_fp4b_row_bf16(blob, r, row);
					for (int64_t k = 0; deq == 1 && k < in; k++)
						if (row[k] != atlas_f32_to_bf16(w[r * in + k]))
							abort();
				}
			}
			free(row);
			free(blob);
		}
		/* the integer formats as the loader unpacks them */
		struct atlas_quant_int iv;
		if (atlas_quant_int_view(&q, st, "m.weight", out, in, &iv) == 1) {
			const int top = 1 << iv.bits;
			if (iv.g < 1 || iv.g > in || iv.ng != (in + iv.g - 1) / iv.g)
				abort();
			for (int64_t k = 0; k < out * in; k++)
				if (iv.q[k] >= top)
					abort();
			for (int64_t k = 0; k < out * iv.ng; k++)
				if (iv.z[k] < 0 || iv.z[k] > top)
					abort();
			for (int64_t i = 0; iv.grp && i < in; i++)
				if (iv.grp[i] < 0 || iv.grp[i] >= iv.ng)
					abort();
			float *w2 = malloc((size_t)(out * in) * sizeof(float));
			if (w2 && deq == 1) {
				atlas_quant_int_dequant(&iv, out, in, w2);
				if (memcmp(w, w2, (size_t)(out * in) * sizeof(float)))
					abort();
			}
			free(w2);
		}
		atlas_quant_int_free(&iv);
		free(w);
		atlas_st_close(st);
	}
	atlas_quant_free(&q);
	return 0;
}
