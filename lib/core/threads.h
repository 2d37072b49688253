/* threads.h - a persistent worker pool for data-parallel loops.
 *
 * One process-wide pool (created on first use) with one worker per core,
 * or ATLAS_THREADS workers. atlas_parallel_for splits [0, n) into
 * contiguous chunks and runs them on the pool; it returns when all are
 * done. Calls from several threads at once are serialized. */
#ifndef ATLAS_CORE_THREADS_H
#define ATLAS_CORE_THREADS_H

#include <stdint.h>

/* fn(ctx, begin, end) processes items [begin, end). */
typedef void (*atlas_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Run fn over [0, n) in chunks of at least `grain` items. Small n runs
 * inline on the caller. */
void atlas_parallel_for(int64_t n, int64_t grain, atlas_range_fn fn, void *ctx);

/* Number of threads the pool uses (including the caller). */
int atlas_threads_count(void);

/* Set the thread count before first use (0 = all cores). */
void atlas_threads_set(int n);

#endif
