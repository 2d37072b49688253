/* clock.h - monotonic time in seconds, for timings and deadlines. */
#ifndef ATLAS_CORE_CLOCK_H
#define ATLAS_CORE_CLOCK_H

#include <time.h>

static inline double atlas_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
