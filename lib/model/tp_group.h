/* tp_group.h - a tensor-parallel group of thread ranks in one process,
 * as atlas-run, atlas-serve and atlas-bench start it for --tp N.
 *
 * Rank r of N has its own communicator (atlas_comm_threads_new), its
 * own CPU backend and its own model slice; ranks 1..N-1 run
 * atlas_model_follow on a thread each, and rank 0 is driven by the
 * caller (forward, scheduler) as a one-rank model would be. On CUDA the
 * group is refused for now (lib/comm/README-tp.md: the NCCL wiring).
 *
 * Use: atlas_tp_check_device, atlas_tp_group_new, optionally adjust the
 * backends (atlas_tp_group_backend), atlas_tp_group_load (or _load_with),
 * drive atlas_tp_group_model(g, 0), atlas_tp_group_free. The group owns
 * every backend, comm and model, rank 0's included. */
#ifndef ATLAS_MODEL_TP_GROUP_H
#define ATLAS_MODEL_TP_GROUP_H

#include <stdbool.h>

struct atlas_backend;
struct atlas_comm;
struct atlas_model;
struct atlas_model_params;
struct atlas_tp_group; /* opaque */

/* Can `device` ("auto", "cpu", "cuda[:N]", ...) run `world` ranks? 0, or
 * ATLAS_EINVAL with the message the programs print: on CUDA (or auto
 * with a GPU and kernels) "--tp N needs N GPUs, but this machine has M",
 * or, with enough GPUs, that CUDA ranks are not available yet. */
int atlas_tp_check_device(const char *device, int world);

/* Communicators and CPU backends for `world` (2..256) thread ranks,
 * after atlas_tp_check_device. NULL with a message. */
struct atlas_tp_group *atlas_tp_group_new(const char *device, int world);

int atlas_tp_group_world(const struct atlas_tp_group *g);
struct atlas_backend *atlas_tp_group_backend(struct atlas_tp_group *g, int rank);
struct atlas_comm *atlas_tp_group_comm(struct atlas_tp_group *g, int rank);
/* Rank r's model (NULL before a load). */
struct atlas_model *atlas_tp_group_model(struct atlas_tp_group *g, int rank);

/* Build rank r's model: called for r = 0..world-1 in order on the
 * caller's thread; returns the model loaded with `comm` on `be`, or NULL
 * with a message. */
typedef struct atlas_model *(*atlas_tp_load_fn)(int rank, struct atlas_backend *be,
						struct atlas_comm *comm, void *arg);

/* Build every rank's model with `fn`, then start the followers. 0, or a
 * negative code with a message (the models built so far are kept for
 * atlas_tp_group_free). Once only. */
int atlas_tp_group_load_with(struct atlas_tp_group *g, atlas_tp_load_fn fn, void *arg);
/* The same with atlas_model_load(dir, be, params with .comm = rank's). */
int atlas_tp_group_load(struct atlas_tp_group *g, const char *dir,
			const struct atlas_model_params *params);

/* Did a follower stop with an error? (Its message was logged.) */
bool atlas_tp_group_failed(struct atlas_tp_group *g);

/* Stop the followers (atlas_model_stop_followers on rank 0, from any
 * thread while rank 0 is idle), join them, free models, backends and
 * comms. NULL is a no-op. 0, or a negative code when stopping failed
 * (logged; everything is still freed). */
int atlas_tp_group_free(struct atlas_tp_group *g);

#endif
