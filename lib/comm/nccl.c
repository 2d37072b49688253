/* nccl.c - the NCCL communicator, one rank per GPU, with libnccl.so.2
 * loaded by dlopen at run time so that every binary starts on a machine
 * without NCCL (or without a GPU) and only a run with more than one rank
 * needs it. The few NCCL types and entry points are declared here from
 * NCCL's documented C ABI; no NCCL or CUDA header is needed to build.
 *
 * NVLink multicast (NVLS) is switched off before NCCL starts, and Atlas
 * never calls the multicast APIs: the lent machines keep it off.
 */
#include "comm.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/log.h"

/* NCCL's ABI: ncclUniqueId is 128 opaque bytes passed by value, the
 * enums are ints, ncclComm_t and cudaStream_t are pointers. */
typedef struct {
	char internal[ATLAS_COMM_ID_BYTES];
} nccl_id;
typedef void *nccl_comm;
enum {
	NCCL_OK = 0,
	NCCL_INT8 = 0,
	NCCL_FLOAT16 = 6,
	NCCL_FLOAT32 = 7,
	NCCL_BFLOAT16 = 9,
	NCCL_SUM = 0,
};
/* The first release with ncclBfloat16. */
#define NCCL_MIN_VERSION 21000

/* The entry points Atlas uses, resolved once per process. */
struct nccl_api {
	int (*get_version)(int *version);
	int (*get_unique_id)(nccl_id *id);
	int (*comm_init_rank)(nccl_comm *comm, int nranks, nccl_id id, int rank);
	int (*comm_destroy)(nccl_comm comm);
	int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op,
			  nccl_comm comm, void *stream);
	int (*broadcast)(const void *send, void *recv, size_t count, int dtype, int root,
			 nccl_comm comm, void *stream);
	const char *(*error_string)(int result);
};

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static void *nccl_lib;       /* the dlopen handle once loaded (never closed) */
static struct nccl_api nccl; /* valid when nccl_lib is set */
static int nccl_ver;         /* ncclGetVersion's answer */

/* Resolve every symbol of api from lib; the name of a missing one, or NULL. */
static const char *resolve(void *lib, struct nccl_api *api)
{
	static const char *const names[] = {
		"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy",
		"ncclAllReduce", "ncclBroadcast", "ncclGetErrorString",
	};
	void *p[sizeof(names) / sizeof(names[0])];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		p[i] = dlsym(lib, names[i]);
		if (!p[i])
			return names[i];
	}
	/* POSIX guarantees that dlsym's pointer converts to a function pointer */
	memcpy(&api->get_version, &p[0], sizeof(void *));
	memcpy(&api->get_unique_id, &p[1], sizeof(void *));
	memcpy(&api->comm_init_rank, &p[2], sizeof(void *));
	memcpy(&api->comm_destroy, &p[3], sizeof(void *));
	memcpy(&api->all_reduce, &p[4], sizeof(void *));
	memcpy(&api->broadcast, &p[5], sizeof(void *));
	memcpy(&api->error_string, &p[6], sizeof(void *));
	return NULL;
}

int atlas_comm_nccl_load(void)
{
	pthread_mutex_lock(&load_mu);
	if (nccl_lib) {
		pthread_mutex_unlock(&load_mu);
		return 0;
	}
	/* before NCCL reads its environment, which it does on first use */
	setenv("NCCL_NVLS_ENABLE", "0", 1);
	const char *path = getenv("ATLAS_NCCL_LIB");
	if (!path || !*path)
		path = "libnccl.so.2";
	int rc = 0;
	struct nccl_api api;
	const char *missing;
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *why = dlerror();
		rc = atlas_error(ATLAS_ENOTFOUND,
				 "cannot load '%s' (%s): NCCL is needed for more than one rank",
				 path, why ? why : "unknown error");
	} else if ((missing = resolve(lib, &api))) {
		rc = atlas_error(ATLAS_ENOTFOUND, "'%s' has no '%s': is it NCCL 2?", path, missing);
		dlclose(lib);
	} else {
		int v = 0;
		if (api.get_version(&v) != NCCL_OK || v < NCCL_MIN_VERSION) {
			rc = atlas_error(ATLAS_EUNSUPPORTED,
					 "'%s' is NCCL version %d; Atlas needs %d or later", path, v,
					 NCCL_MIN_VERSION);
			dlclose(lib);
		} else {
			nccl = api;
			nccl_ver = v;
			nccl_lib = lib;
			atlas_debug("loaded '%s', NCCL version %d", path, v);
		}
	}
	pthread_mutex_unlock(&load_mu);
	return rc;
}

int atlas_comm_nccl_version(int *version)
{
	int rc = atlas_comm_nccl_load();
	if (!rc)
		*version = nccl_ver;
	return rc;
}

/* 0, or ATLAS_EIO naming the call and NCCL's reason. */
static int nccl_check(int result, const char *what)
{
	if (result == NCCL_OK)
		return 0;
	return atlas_error(ATLAS_EIO, "%s failed: %s (NCCL error %d)", what,
			   nccl.error_string(result), result);
}

int atlas_comm_nccl_unique_id(uint8_t id[ATLAS_COMM_ID_BYTES])
{
	int rc = atlas_comm_nccl_load();
	if (rc)
		return rc;
	nccl_id u;
	rc = nccl_check(nccl.get_unique_id(&u), "ncclGetUniqueId");
	if (!rc)
		memcpy(id, u.internal, ATLAS_COMM_ID_BYTES);
	return rc;
}

/* One rank's NCCL state. */
struct nccl_ctx {
	nccl_comm comm;           /* NCCL's communicator */
	void *stream;             /* the backend's cudaStream_t */
	struct atlas_backend *be; /* the rank's backend (barrier's sync) */
	float *scratch;           /* one float of device memory for barrier */
};

static int nccl_dtype(enum atlas_dtype dt, int *out)
{
	switch (dt) {
	case ATLAS_DTYPE_F32: *out = NCCL_FLOAT32; return 0;
	case ATLAS_DTYPE_F16: *out = NCCL_FLOAT16; return 0;
	case ATLAS_DTYPE_BF16: *out = NCCL_BFLOAT16; return 0;
	default:
		return atlas_error(ATLAS_EUNSUPPORTED, "all_reduce_sum of '%s' is not supported",
				   atlas_dtype_name(dt));
	}
}

static int nccl_all_reduce(struct atlas_comm *c, void *buf, int64_t n, enum atlas_dtype dt,
			   struct atlas_backend *be)
{
	struct nccl_ctx *x = c->ctx;
	int ndt = NCCL_FLOAT32;
	int rc = nccl_dtype(dt, &ndt);
	if (rc)
		return rc;
	if (n < 0)
		return atlas_error(ATLAS_EINVAL, "all_reduce_sum of %lld elements", (long long)n);
	return nccl_check(nccl.all_reduce(buf, buf, (size_t)n, ndt, NCCL_SUM, x->comm, x->stream),
			  "ncclAllReduce");
}

static int nccl_broadcast(struct atlas_comm *c, void *buf, size_t bytes, int root,
			  struct atlas_backend *be)
{
	struct nccl_ctx *x = c->ctx;
	if (root < 0 || root >= c->world)
		return atlas_error(ATLAS_EINVAL, "broadcast from rank %d in a world of %d", root,
				   c->world);
	return nccl_check(nccl.broadcast(buf, buf, bytes, NCCL_INT8, root, x->comm, x->stream),
			  "ncclBroadcast");
}

/* NCCL has no barrier: a one-float all-reduce that every rank waits for. */
static int nccl_barrier(struct atlas_comm *c)
{
	struct nccl_ctx *x = c->ctx;
	int rc = nccl_check(nccl.all_reduce(x->scratch, x->scratch, 1, NCCL_FLOAT32, NCCL_SUM,
					    x->comm, x->stream),
			    "ncclAllReduce (barrier)");
	return rc ? rc : x->be->sync(x->be);
}

static void nccl_destroy(struct atlas_comm *c)
{
	if (!c)
		return;
	struct nccl_ctx *x = c->ctx;
	nccl.comm_destroy(x->comm);
	x->be->free(x->be, x->scratch);
	free(x);
	free(c);
}

struct atlas_comm *atlas_comm_nccl_new(const uint8_t id[ATLAS_COMM_ID_BYTES], int rank,
				       int world, struct atlas_backend *be, void *stream)
{
	if (world < 1 || rank < 0 || rank >= world) {
		atlas_error(ATLAS_EINVAL, "rank %d is not in a world of %d", rank, world);
		return NULL;
	}
	if (world == 1)
		return atlas_comm_single_new();
	if (!be || !id) {
		atlas_error(ATLAS_EINVAL, "an NCCL rank needs a backend and the unique id");
		return NULL;
	}
	if (atlas_comm_nccl_load())
		return NULL;
	struct atlas_comm *c = calloc(1, sizeof(*c));
	struct nccl_ctx *x = calloc(1, sizeof(*x));
	float *scratch = be->alloc(be, sizeof(float));
	if (!c || !x || !scratch) {
		atlas_error(ATLAS_ENOMEM, "out of memory for NCCL rank %d", rank);
		goto fail;
	}
	nccl_id u;
	memcpy(u.internal, id, ATLAS_COMM_ID_BYTES);
	if (nccl_check(nccl.comm_init_rank(&x->comm, world, u, rank), "ncclCommInitRank")) {
		atlas_error_wrap(ATLAS_EIO, "rank %d of %d", rank, world);
		goto fail;
	}
	x->stream = stream;
	x->be = be;
	x->scratch = scratch;
	*c = (struct atlas_comm){
		.name = "nccl",
		.rank = rank,
		.world = world,
		.ctx = x,
		.all_reduce_sum = nccl_all_reduce,
		.broadcast = nccl_broadcast,
		.barrier = nccl_barrier,
		.destroy = nccl_destroy,
	};
	return c;
fail:
	if (scratch)
		be->free(be, scratch);
	free(x);
	free(c);
	return NULL;
}
