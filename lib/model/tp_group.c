/* tp_group.c - thread ranks of one process for --tp N. See tp_group.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../comm/comm.h"
#include "../core/error.h"
#include "../core/log.h"
#include "model.h"
#include "tp_group.h"

struct rank {
	struct atlas_backend *be;
	struct atlas_comm *comm;
	struct atlas_model *model;
	pthread_t tid;
	bool running;            /* tid is a thread to join (ranks 1..) */
	int rc;                  /* follow's result */
};

struct atlas_tp_group {
	int world;
	bool loaded;             /* load_with was called */
	struct rank r[];         /* [world] */
};

/* Is `device` (auto or cuda[:N]) a GPU run? auto: when a driver lists a
 * GPU and this build has CUDA kernels. */
static bool on_gpu(const char *device, int *n_gpus)
{
	struct atlas_gpu_info gi[64];
	int ver = 0, n = atlas_gpu_probe(gi, 64, &ver);
	*n_gpus = n > 0 ? n : 0;
	if (!strncmp(device, "cuda", 4))
		return true;
	return !strcmp(device, "auto") && n > 0 && atlas_kernel_targets()[0];
}

int atlas_tp_check_device(const char *device, int world)
{
	int n_gpus;
	if (!device)
		device = "auto";
	if (world < 1 || world > 256)
		return atlas_error(ATLAS_EINVAL, "--tp %d: the ranks must be 1..256", world);
	if (world == 1)
		return 0;
	if (on_gpu(device, &n_gpus)) {
		if (n_gpus < world)
			return atlas_error(ATLAS_EINVAL, "--tp %d needs %d GPUs, but this machine has %d",
					   world, world, n_gpus);
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "--tp %d on CUDA GPUs is not available in this build yet (the NCCL "
				   "communicator needs the CUDA backend's stream); use --device cpu",
				   world);
	}
	if (strcmp(device, "cpu") && strcmp(device, "auto"))
		return atlas_error(ATLAS_EINVAL,
				   "--tp %d: device '%s' cannot run tensor-parallel ranks (use cpu or cuda)",
				   world, device);
	return 0;
}

struct atlas_tp_group *atlas_tp_group_new(const char *device, int world)
{
	if (atlas_tp_check_device(device, world))
		return NULL;
	struct atlas_tp_group *g = calloc(1, sizeof(*g) + (size_t)world * sizeof(g->r[0]));
	struct atlas_comm **comms = calloc((size_t)world, sizeof(*comms));
	if (!g || !comms) {
		free(g);
		free(comms);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	g->world = world;
	if (atlas_comm_threads_new(world, comms)) {
		free(g);
		free(comms);
		return NULL;
	}
	for (int r = 0; r < world; r++)
		g->r[r].comm = comms[r];
	free(comms);
	/* the CPU worker pool is shared by the backends; their calls are
	 * serialized by it */
	for (int r = 0; r < world; r++)
		if (!(g->r[r].be = atlas_backend_cpu_new())) {
			atlas_tp_group_free(g);
			return NULL;
		}
	atlas_info("tensor parallelism: %d thread ranks on the cpu", world);
	return g;
}

int atlas_tp_group_world(const struct atlas_tp_group *g)
{
	return g->world;
}

struct atlas_backend *atlas_tp_group_backend(struct atlas_tp_group *g, int rank)
{
	return rank >= 0 && rank < g->world ? g->r[rank].be : NULL;
}

struct atlas_comm *atlas_tp_group_comm(struct atlas_tp_group *g, int rank)
{
	return rank >= 0 && rank < g->world ? g->r[rank].comm : NULL;
}

struct atlas_model *atlas_tp_group_model(struct atlas_tp_group *g, int rank)
{
	return rank >= 0 && rank < g->world ? g->r[rank].model : NULL;
}

static void *follow_main(void *arg)
{
	struct rank *f = arg;
	f->rc = atlas_model_follow(f->model);
	if (f->rc)
		atlas_log(ATLAS_LOG_ERROR, "tensor-parallel rank %d stopped: %s", f->comm->rank,
			  atlas_errmsg());
	return NULL;
}

int atlas_tp_group_load_with(struct atlas_tp_group *g, atlas_tp_load_fn fn, void *arg)
{
	if (g->loaded)
		return atlas_error(ATLAS_EINVAL, "the tensor-parallel group is loaded already");
	g->loaded = true;
	/* every rank is built alike; only the comm differs */
	for (int r = 0; r < g->world; r++)
		if (!(g->r[r].model = fn(r, g->r[r].be, g->r[r].comm, arg)))
			return ATLAS_EINVAL;
	for (int r = 1; r < g->world; r++) {
		if (pthread_create(&g->r[r].tid, NULL, follow_main, &g->r[r]))
			return atlas_error(ATLAS_ENOMEM, "cannot start the thread of rank %d", r);
		g->r[r].running = true;
	}
	return 0;
}

struct load_arg {
	const char *dir;
	const struct atlas_model_params *params;
};

static struct atlas_model *load_one(int rank, struct atlas_backend *be, struct atlas_comm *comm,
				    void *arg)
{
	(void)rank;
	struct load_arg *a = arg;
	struct atlas_model_params mp = *a->params;
	mp.comm = comm;
	return atlas_model_load(a->dir, be, &mp);
}

int atlas_tp_group_load(struct atlas_tp_group *g, const char *dir,
			const struct atlas_model_params *params)
{
	struct load_arg a = {dir, params};
	return atlas_tp_group_load_with(g, load_one, &a);
}

bool atlas_tp_group_failed(struct atlas_tp_group *g)
{
	for (int r = 1; r < g->world; r++)
		if (g->r[r].rc)
			return true;
	return false;
}

int atlas_tp_group_free(struct atlas_tp_group *g)
{
	if (!g)
		return 0;
	int rc = 0;
	bool any = false;
	for (int r = 1; r < g->world; r++)
		any |= g->r[r].running;
	if (any && (rc = atlas_model_stop_followers(g->r[0].model)))
		atlas_log(ATLAS_LOG_ERROR, "cannot stop the tensor-parallel ranks: %s",
			  atlas_errmsg());
	for (int r = 1; r < g->world; r++)
		if (g->r[r].running)
			pthread_join(g->r[r].tid, NULL);
	/* the models go before the backends and comms they hold */
	for (int r = 0; r < g->world; r++)
		atlas_model_free(g->r[r].model);
	for (int r = 0; r < g->world; r++) {
		if (g->r[r].be)
			g->r[r].be->destroy(g->r[r].be);
		if (g->r[r].comm)
			g->r[r].comm->destroy(g->r[r].comm);
	}
	free(g);
	return rc;
}
