/* backend.c - pick a backend by device name (see atlas_backend_open). */
#include "backend.h"

#include <stdlib.h>
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
