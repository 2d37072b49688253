/* safetensors.h - read-only, mmapped access to safetensors checkpoints.
 *
 * Opens a single `*.safetensors` file, or a model directory holding
 * either `model.safetensors` or a sharded `model.safetensors.index.json`.
 * Every header field is validated before use (header length, JSON shape,
 * dtype, shape, data offsets inside the file and non-overlapping, byte
 * count = product(shape) * element size); a bad file yields NULL with a
 * message naming the file and the tensor. Tensor data stay in the mmap. */
#ifndef ATLAS_IO_SAFETENSORS_H
#define ATLAS_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"

#define ATLAS_MAX_DIMS 8

struct atlas_tensor_info {
	const char *name;            /* tensor name, owned by the set */
	enum atlas_dtype dtype;      /* element type */
	int ndim;                    /* number of dimensions, 0..ATLAS_MAX_DIMS */
	int64_t shape[ATLAS_MAX_DIMS]; /* dimensions, outermost first */
	int64_t numel;               /* product of shape (1 for scalars) */
	const void *data;            /* points into the mmap; nbytes long */
	size_t nbytes;               /* numel * atlas_dtype_size(dtype) */
	const char *file;            /* path of the file holding it */
};

struct atlas_st; /* opaque: a set of mmapped files and their tensors */

/* Open `path` (a .safetensors file or a directory as above).
 * Returns a new set owned by the caller (free with atlas_st_close), or
 * NULL with atlas_errmsg() set. */
struct atlas_st *atlas_st_open(const char *path);

/* Close the set and unmap its files; all infos become invalid. NULL ok. */
void atlas_st_close(struct atlas_st *st);

/* Number of tensors in the set. */
int64_t atlas_st_count(const struct atlas_st *st);

/* Tensor i in file order (0 <= i < count); owned by the set. */
const struct atlas_tensor_info *atlas_st_get(const struct atlas_st *st, int64_t i);

/* Tensor by name, or NULL (no message set). Owned by the set. */
const struct atlas_tensor_info *atlas_st_find(const struct atlas_st *st, const char *name);

/* The `__metadata__` value for `key` in the first file, or NULL. */
const char *atlas_st_metadata(const struct atlas_st *st, const char *key);

#endif
