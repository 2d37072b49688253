/* harness.c - TAP output for the unit tests (see harness.h). */
#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

static int ntests, nfailed, cur_failed;

void harness_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	printf("# %s:%d: ", file, line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	cur_failed = 1;
}

void harness_run(const char *name, void (*fn)(void))
{
	cur_failed = 0;
	fn();
	ntests++;
	if (cur_failed)
		nfailed++;
	printf("%s %d - %s\n", cur_failed ? "not ok" : "ok", ntests, name);
	fflush(stdout);
}

int harness_done(void)
{
	printf("1..%d\n", ntests);
	return nfailed ? 1 : 0;
}

static char tmpdir[256];

static void rm_tmp(void)
{
	char cmd[300];
	if (tmpdir[0] && !getenv("HARNESS_KEEP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove '%s'\n", tmpdir);
	}
}

const char *harness_tmpdir(void)
{
	if (!tmpdir[0]) {
		const char *base = getenv("TMPDIR");
		snprintf(tmpdir, sizeof(tmpdir), "%s/atlas-test-XXXXXX", base ? base : "/tmp");
		if (!mkdtemp(tmpdir)) {
			perror("mkdtemp");
			exit(1);
		}
		atexit(rm_tmp);
	}
	return tmpdir;
}

char *harness_write(const char *dir, const char *name, const void *data, size_t len)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	snprintf(p, n, "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	if (!f || fwrite(data, 1, len, f) != len) {
		perror(p);
		exit(1);
	}
	fclose(f);
	return p;
}

const char *harness_srcdir(void)
{
	const char *s = getenv("ATLAS_SRC");
	return s ? s : ".";
}
