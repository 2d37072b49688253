/* comm.h - collectives between the ranks of a tensor-parallel group.
 *
 * A communicator is a small ops table, like struct atlas_backend, so the
 * model code calls all_reduce_sum after the attention output and after
 * the MLP down projection whatever the world size: with one rank every
 * collective is a no-op. Three implementations:
 *
 *   single   world 1, no-ops (the default; needs no library)
 *   threads  N ranks that are threads of one process, host memory,
 *            summed in rank order (rank 0 + rank 1 + ...), so results do
 *            not depend on timing; lets the CPU test the TP code paths
 *   nccl     one rank per GPU, libnccl.so.2 loaded with dlopen only
 *            when the world has more than one rank
 *
 * Collectives are called by every rank of the group, in the same order,
 * with the same sizes; each rank's buffer is its own (no aliasing).
 * lib/comm sits between lib/backend and lib/model: buffers are memory of
 * the rank's backend. The TCP rendezvous that gives every process the
 * NCCL id and checks that the ranks were started alike is at the end.
 */
#ifndef ATLAS_COMM_H
#define ATLAS_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../core/dtype.h"

struct atlas_comm {
	const char *name; /* "single", "threads", "nccl" */
	int rank;         /* this rank, 0..world-1 */
	int world;        /* ranks in the group */
	void *ctx;        /* implementation state */

	/* buf[n] = the sum over ranks of every rank's buf[n], in place, on
	 * every rank. dt is F32, BF16 or F16; 16-bit values are added in
	 * FP32 (threads: in rank order, rounded once at the end). be is the
	 * backend that owns buf (threads: a host-memory backend or NULL). */
	int (*all_reduce_sum)(struct atlas_comm *c, void *buf, int64_t n,
			      enum atlas_dtype dt, struct atlas_backend *be);
	/* Copy `bytes` of rank `root`'s buf into every other rank's buf. */
	int (*broadcast)(struct atlas_comm *c, void *buf, size_t bytes, int root,
			 struct atlas_backend *be);
	/* Return once every rank has called barrier. */
	int (*barrier)(struct atlas_comm *c);
	/* Free this rank's communicator (each rank destroys its own). */
	void (*destroy)(struct atlas_comm *c);
};

/* The world-1 communicator: every collective returns 0 at once
 * (broadcast checks root == 0). Owned by the caller (c->destroy(c));
 * NULL only when out of memory. */
struct atlas_comm *atlas_comm_single_new(void);

/* World `world` (1..256) thread ranks: fills comms[0..world-1], comms[r]
 * to be used by the thread that runs rank r; each is destroyed by its
 * owner, the shared state with the last one. Collectives work on host
 * memory (be NULL, or a backend named "cpu" or "mock"). A collective
 * whose n, dtype or root differs between ranks fails on every rank.
 * Returns 0 or a negative code with a message. */
int atlas_comm_threads_new(int world, struct atlas_comm **comms);

/* --- NCCL, loaded at run time -------------------------------------- */

/* Bytes of an NCCL unique id (ncclUniqueId). */
#define ATLAS_COMM_ID_BYTES 128

/* Load libnccl (once per process; ATLAS_NCCL_LIB names another file)
 * and check that it has every symbol Atlas uses. Sets
 * NCCL_NVLS_ENABLE=0 first: Atlas never uses NVLink multicast. 0, or
 * ATLAS_ENOTFOUND with a message naming the library or the symbol. */
int atlas_comm_nccl_load(void);

/* NCCL's version as a number (e.g. 22304 for 2.23.4) after loading it. */
int atlas_comm_nccl_version(int *version);

/* A fresh NCCL unique id, made by the rank that hands it to the others
 * (rank 0, through atlas_rendezvous or shared memory). Loads NCCL. */
int atlas_comm_nccl_unique_id(uint8_t id[ATLAS_COMM_ID_BYTES]);

/* The NCCL communicator of `rank` in a world of `world`, all ranks
 * giving the same id. With world 1 it is the single communicator and
 * NCCL is not loaded. Otherwise the calling thread must have made the
 * rank's GPU current (the CUDA backend does, when created on it), and
 * `stream` is the cudaStream_t the backend queues its work on, so that
 * collectives are ordered with the ops and captured into its CUDA graphs
 * (NULL = the legacy default stream, which cannot be captured).
 * Collectives are asynchronous on that stream, like ops; barrier syncs.
 * Owned by the caller (c->destroy(c)), or NULL with a message. */
struct atlas_comm *atlas_comm_nccl_new(const uint8_t id[ATLAS_COMM_ID_BYTES], int rank,
				       int world, struct atlas_backend *be, void *stream);

/* --- rendezvous over TCP (rendezvous.c) ---------------------------- */

/* How a process finds the others (the --rank, --world-size,
 * --master-addr, --master-port flags). */
struct atlas_rendezvous_opts {
	int rank;                /* this process, 0..world-1 */
	int world;               /* processes in the job */
	const char *master_addr; /* rank 0's address (name or numeric); rank 0
				  * listens on it, the others connect to it */
	int master_port;         /* rank 0's TCP port, 1..65535 */
	double timeout_s;        /* the whole rendezvous; <= 0: 120 s */
	const char *fingerprint; /* "key=value;key=value..." of the flags that
				  * must match across ranks (model, dtype,
				  * parallel sizes, speculative settings) */
};

/* Meet the other ranks: every rank sends rank 0 its fingerprint; rank 0
 * checks them all and sends its `len` bytes of blob (at most 4096, e.g.
 * the NCCL unique id) to every rank, which receives them into blob.
 * Any problem (a fingerprint, world size or blob size that differs, two
 * processes claiming one rank, a rank that never comes) fails on every
 * rank that is up, with the same message naming the differing keys and
 * both values. Rank 0 waits timeout_s for the others and then tells
 * the ranks that came why it gave up; the others wait timeout_s to
 * reach rank 0 and a little longer (2 s) for its verdict, so that its
 * message, which names the missing ranks, is the one they report. With
 * world 1 it returns at once. 0, or a negative code with a message. */
int atlas_rendezvous(const struct atlas_rendezvous_opts *o, void *blob, size_t len);

/* Describe how fingerprints a and b differ, e.g. "dtype: rank 0 has
 * 'bf16', rank 2 has 'f16'" (entries separated by "; "), into out
 * (cap bytes, always terminated). Returns the number of differing keys,
 * 0 when the two hold the same pairs (order and empty entries ignored). */
int atlas_fingerprint_diff(const char *a, int rank_a, const char *b, int rank_b,
			   char *out, size_t cap);

#endif
