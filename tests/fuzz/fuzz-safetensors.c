/* fuzz-safetensors.c - libFuzzer entry point for the safetensors reader.
 *
 * Each input is written to one temporary file (atlas_st_open takes a
 * path and mmaps it) and opened; on success every tensor is looked up by
 * name and its first and last data bytes are read, so a header that
 * slipped past validation with a bad offset faults here. See README. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/io/safetensors.h"

static char path[64];

/* The same file is reused for every input: fewer inodes, faster runs. */
static int write_input(const uint8_t *data, size_t size)
{
	FILE *f;

	if (!path[0]) {
		int fd;
		snprintf(path, sizeof(path), "/tmp/fuzz-st-%d-XXXXXX", (int)getpid());
		fd = mkstemp(path);
		if (fd < 0)
			return -1;
		close(fd);
	}
	f = fopen(path, "wb");
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
	struct atlas_st *st;
	volatile uint8_t sink = 0;

	if (!registered) {
		atexit(remove_input);
		registered = 1;
	}
	if (write_input(data, size))
		return 0;
	st = atlas_st_open(path);
	if (!st)
		return 0;
	for (int64_t i = 0; i < atlas_st_count(st); i++) {
		const struct atlas_tensor_info *t = atlas_st_get(st, i);
		if (atlas_st_find(st, t->name) != t)
			abort(); /* a name that cannot be found again */
		if (t->nbytes) {
			sink ^= ((const uint8_t *)t->data)[0];
			sink ^= ((const uint8_t *)t->data)[t->nbytes - 1];
		}
	}
	(void)atlas_st_metadata(st, "format");
	atlas_st_close(st);
	(void)sink;
	return 0;
}
