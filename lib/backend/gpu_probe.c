/* gpu_probe.c - find NVIDIA GPUs through the driver API loaded at run
 * time (see atlas_gpu_probe in backend.h). No CUDA header and no link
 * dependency: libcuda.so.1 is dlopen'ed, so programs start on machines
 * without a driver; free memory comes from NVML when it is there. The
 * few driver types are declared here with the ABI the driver exports. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "backend.h"

typedef int CUresult; /* 0 = CUDA_SUCCESS */
typedef int CUdevice;
#define CU_ATTR_CC_MAJOR 75 /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
#define CU_ATTR_CC_MINOR 76 /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */

typedef CUresult (*cu_init_fn)(unsigned int);
typedef CUresult (*cu_version_fn)(int *);
typedef CUresult (*cu_count_fn)(int *);
typedef CUresult (*cu_get_fn)(CUdevice *, int);
typedef CUresult (*cu_name_fn)(char *, int, CUdevice);
typedef CUresult (*cu_attr_fn)(int *, int, CUdevice);
typedef CUresult (*cu_mem_fn)(size_t *, CUdevice);
typedef CUresult (*cu_errstr_fn)(CUresult, const char **);

/* NVML: nvmlMemory_t is {total, free, used}, unsigned long long each. */
struct nvml_memory {
	unsigned long long total; /* bytes */
	unsigned long long free;  /* bytes */
	unsigned long long used;  /* bytes */
};
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef int (*nvml_mem_fn)(void *, struct nvml_memory *);
typedef int (*nvml_shutdown_fn)(void);

/* Free memory of device i from NVML, or 0. NVML orders devices by PCI
 * bus like CUDA does unless CUDA_VISIBLE_DEVICES reorders them, so use it
 * only when no such variable is set. */
static void nvml_free(struct atlas_gpu_info *gpus, int n)
{
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return;
	nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
	nvml_handle_fn handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	nvml_mem_fn mem = (nvml_mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
	nvml_shutdown_fn down = (nvml_shutdown_fn)dlsym(lib, "nvmlShutdown");
	if (init && handle && mem && init() == 0) {
		for (int i = 0; i < n; i++) {
			void *h = NULL;
			struct nvml_memory m;
			if (handle((unsigned int)gpus[i].index, &h) == 0 && mem(h, &m) == 0)
				gpus[i].mem_free = (size_t)m.free;
		}
		if (down)
			down();
	}
	dlclose(lib);
}

static int cu_fail(cu_errstr_fn errstr, CUresult r, const char *what)
{
	const char *s = NULL;
	if (errstr)
		errstr(r, &s);
	return atlas_error(ATLAS_EIO, "the NVIDIA driver failed in %s: error %d%s%s", what, r,
			   s ? ": " : "", s ? s : "");
}

int atlas_gpu_probe(struct atlas_gpu_info *gpus, int max, int *driver_version)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int n = 0, rc;
	CUresult r;

	if (driver_version)
		*driver_version = 0;
	if (!lib)
		return atlas_error(ATLAS_ENOTFOUND, "no NVIDIA driver: cannot load libcuda.so.1 (%s)",
				   dlerror());
	cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
	cu_version_fn version = (cu_version_fn)dlsym(lib, "cuDriverGetVersion");
	cu_count_fn count = (cu_count_fn)dlsym(lib, "cuDeviceGetCount");
	cu_get_fn get = (cu_get_fn)dlsym(lib, "cuDeviceGet");
	cu_name_fn name = (cu_name_fn)dlsym(lib, "cuDeviceGetName");
	cu_attr_fn attr = (cu_attr_fn)dlsym(lib, "cuDeviceGetAttribute");
	cu_mem_fn mem = (cu_mem_fn)dlsym(lib, "cuDeviceTotalMem_v2");
	cu_errstr_fn errstr = (cu_errstr_fn)dlsym(lib, "cuGetErrorString");
	if (!init || !version || !count || !get || !name || !attr || !mem) {
		dlclose(lib);
		return atlas_error(ATLAS_EIO, "libcuda.so.1 lacks a driver API function (too old a "
				   "driver?)");
	}
	if (driver_version && (r = version(driver_version))) {
		rc = cu_fail(errstr, r, "cuDriverGetVersion");
		goto out;
	}
	if ((r = init(0))) {
		/* 100 = CUDA_ERROR_NO_DEVICE: a driver without GPUs is zero GPUs */
		rc = r == 100 ? 0 : cu_fail(errstr, r, "cuInit");
		goto out;
	}
	if ((r = count(&n))) {
		rc = cu_fail(errstr, r, "cuDeviceGetCount");
		goto out;
	}
	for (int i = 0; i < n && i < max; i++) {
		CUdevice d;
		struct atlas_gpu_info *g = &gpus[i];
		memset(g, 0, sizeof(*g));
		g->index = i;
		if ((r = get(&d, i)) || (r = name(g->name, (int)sizeof(g->name), d)) ||
		    (r = attr(&g->cc_major, CU_ATTR_CC_MAJOR, d)) ||
		    (r = attr(&g->cc_minor, CU_ATTR_CC_MINOR, d)) || (r = mem(&g->mem_total, d))) {
			rc = cu_fail(errstr, r, "a device query");
			goto out;
		}
	}
	if (!getenv("CUDA_VISIBLE_DEVICES"))
		nvml_free(gpus, n < max ? n : max);
	rc = n;
out:
	dlclose(lib);
	return rc;
}
