/* kernel_registry.h - the CUDA kernel binaries embedded in libatlas.
 *
 * scripts/build-kernels.sh compiles each kernel target (kernels/<arch>/
 * common, and each <arch>/<model>/<quant> leaf overlaid on common) to a
 * fatbin and generates the table below; a build without nvcc gets an
 * empty table. Host code picks an entry for (arch, family, quant) with
 * atlas_kernel_pick; nothing here needs CUDA, so the choice is
 * unit-tested everywhere. */
#ifndef ATLAS_BACKEND_KERNEL_REGISTRY_H
#define ATLAS_BACKEND_KERNEL_REGISTRY_H

#include <stddef.h>

struct atlas_kernel_blob {
	const char *arch;            /* "sm90" */
	const char *family;          /* "common" or a model family, "qwen3" */
	const char *quant;           /* "" for common, else "bf16", "fp8", ... */
	const unsigned char *data;   /* the fatbin */
	size_t size;                 /* unused: data_end - data is the size */
	const unsigned char *data_end; /* one past the fatbin's last byte */
};

/* The generated table (terminated by an all-NULL entry) and its length. */
extern const struct atlas_kernel_blob atlas_kernel_blobs[];
extern const int atlas_kernel_nblobs;

/* The best entry of `tab` (n entries) for a model: the leaf
 * (arch, family, quant) if present, else (arch, "common"), else NULL.
 * *fallback is set to 1 when common was chosen although the family is
 * not "common" (the caller says so in its log). */
const struct atlas_kernel_blob *atlas_kernel_pick(const struct atlas_kernel_blob *tab, int n,
						  const char *arch, const char *family,
						  const char *quant, int *fallback);

/* "sm90/qwen3/bf16" style name of an entry into buf; returns buf. */
const char *atlas_kernel_blob_name(const struct atlas_kernel_blob *b, char *buf, size_t cap);

#endif
