/* membw.c - host memory bandwidth with a plain copy loop: N threads each
 * memcpy their slice of a large buffer, repeated; reports the best of the
 * repeats in GB/s counting bytes read plus bytes written (the same
 * convention as the GPU copy ceiling). Used by scripts/cpu-roofline.sh.
 *
 *   membw [MiB] [threads]      (default 1024 MiB, all cores) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct slice {
	char *dst;
	const char *src;
	size_t n;
};

static void *copy(void *arg)
{
	struct slice *s = arg;
	memcpy(s->dst, s->src, s->n);
	return NULL;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
	int nt = argc > 2 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
	size_t n = mib << 20;
	char *a = malloc(n), *b = malloc(n);
	if (!a || !b || nt < 1 || nt > 256)
		return 1;
	memset(a, 1, n);
	memset(b, 2, n);
	double best = 0;
	for (int rep = 0; rep < 6; rep++) {
		pthread_t th[256];
		struct slice sl[256];
		double t0 = now();
		for (int i = 0; i < nt; i++) {
			size_t lo = n / nt * i, hi = i == nt - 1 ? n : n / nt * (i + 1);
			sl[i] = (struct slice){b + lo, a + lo, hi - lo};
			pthread_create(&th[i], NULL, copy, &sl[i]);
		}
		for (int i = 0; i < nt; i++)
			pthread_join(th[i], NULL);
		double gbs = 2.0 * n / (now() - t0) / 1e9;
		if (rep > 0 && gbs > best) /* first pass warms the pages */
			best = gbs;
	}
	printf("%.2f\n", best);
	free(a);
	free(b);
	return 0;
}
