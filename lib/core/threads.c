/* threads.c - persistent pthread pool behind atlas_parallel_for.
 *
 * Workers sleep on a condition variable; a job is published with a
 * generation counter, each worker takes chunks with an atomic counter,
 * and the caller works too, then waits for the last chunk. */
#include "threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static struct pool {
	pthread_mutex_t lock;    /* guards gen, job fields, and sleeping */
	pthread_cond_t wake;     /* workers wait here for a new generation */
	pthread_cond_t done;     /* caller waits here for pending == 0 */
	pthread_mutex_t serial;  /* one parallel_for at a time */
	int nthreads;            /* workers + caller */
	uint64_t gen;            /* bumps once per job */
	atlas_range_fn fn;       /* current job */
	void *ctx;               /* current job's context */
	int64_t n, chunk;        /* items and chunk size */
	atomic_int_fast64_t next;   /* next chunk start */
	atomic_int_fast64_t pending; /* items not yet finished */
	int active;              /* workers inside a job (guarded by lock) */
	int started;             /* pool initialised */
} P = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
	.serial = PTHREAD_MUTEX_INITIALIZER,
};
static int requested;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_t tids[256];   /* the workers, joined at exit */
static int nworkers;          /* entries in tids */
static int quit;              /* set at exit (guarded by P.lock) */

/* A snapshot of one job, read under the lock. */
struct job {
	atlas_range_fn fn;
	void *ctx;
	int64_t n, chunk;
};

static void run_chunks(struct job j)
{
	for (;;) {
		int64_t b = atomic_fetch_add(&P.next, j.chunk);
		if (b >= j.n)
			return;
		int64_t e = b + j.chunk < j.n ? b + j.chunk : j.n;
		j.fn(j.ctx, b, e);
		if (atomic_fetch_sub(&P.pending, e - b) == e - b) {
			pthread_mutex_lock(&P.lock);
			pthread_cond_signal(&P.done);
			pthread_mutex_unlock(&P.lock);
		}
	}
}

static void *worker(void *arg)
{
	uint64_t seen = 0;
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&P.lock);
		while (P.gen == seen && !quit)
			pthread_cond_wait(&P.wake, &P.lock);
		if (quit) {
			pthread_mutex_unlock(&P.lock);
			return NULL;
		}
		seen = P.gen;
		P.active++;
		struct job j = {P.fn, P.ctx, P.n, P.chunk};
		pthread_mutex_unlock(&P.lock);
		run_chunks(j);
		pthread_mutex_lock(&P.lock);
		if (--P.active == 0)
			pthread_cond_signal(&P.done);
		pthread_mutex_unlock(&P.lock);
	}
	return NULL;
}

/* At exit: wake the workers, let them leave and join them, so that
 * nothing the pool allocated is left behind (valgrind stays quiet). A
 * parallel_for still running elsewhere finishes on its caller alone. */
static void stop_pool(void)
{
	pthread_mutex_lock(&P.lock);
	quit = 1;
	pthread_cond_broadcast(&P.wake);
	pthread_mutex_unlock(&P.lock);
	for (int i = 0; i < nworkers; i++)
		pthread_join(tids[i], NULL);
	nworkers = 0;
}

static void start(void)
{
	int n = requested;
	if (n <= 0) {
		const char *e = getenv("ATLAS_THREADS");
		n = e ? atoi(e) : 0;
	}
	if (n <= 0)
		n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (n <= 0)
		n = 1;
	if (n > 256)
		n = 256;
	P.nthreads = n;
	for (int i = 1; i < n; i++) {
		if (pthread_create(&tids[nworkers], NULL, worker, NULL) != 0) {
			P.nthreads = i;
			break;
		}
		nworkers++;
	}
	if (nworkers)
		atexit(stop_pool);
	P.started = 1;
}

void atlas_threads_set(int n)
{
	requested = n;
}

int atlas_threads_count(void)
{
	pthread_once(&once, start);
	return P.nthreads;
}

void atlas_parallel_for(int64_t n, int64_t grain, atlas_range_fn fn, void *ctx)
{
	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	int nt = atlas_threads_count();
	if (nt == 1 || n <= grain) {
		fn(ctx, 0, n);
		return;
	}
	/* a few chunks per thread for balance, none under grain */
	int64_t chunk = (n + (int64_t)nt * 4 - 1) / ((int64_t)nt * 4);
	if (chunk < grain)
		chunk = grain;
	pthread_mutex_lock(&P.serial);
	pthread_mutex_lock(&P.lock);
	/* late workers of the previous job must leave before next is reset */
	while (P.active > 0)
		pthread_cond_wait(&P.done, &P.lock);
	P.fn = fn;
	P.ctx = ctx;
	P.n = n;
	P.chunk = chunk;
	atomic_store(&P.next, 0);
	atomic_store(&P.pending, n);
	P.gen++;
	pthread_cond_broadcast(&P.wake);
	pthread_mutex_unlock(&P.lock);
	run_chunks((struct job){fn, ctx, n, chunk});
	pthread_mutex_lock(&P.lock);
	while (atomic_load(&P.pending) > 0)
		pthread_cond_wait(&P.done, &P.lock);
	pthread_mutex_unlock(&P.lock);
	pthread_mutex_unlock(&P.serial);
}
