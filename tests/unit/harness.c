/* harness.c - TAP output for the unit tests (see harness.h). */
#include "harness.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
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
	/* HARNESS_ONLY=TEXT: only the tests whose name contains TEXT */
	const char *only = getenv("HARNESS_ONLY");
	if (only && *only && !strstr(name, only))
		return;
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

char *harness_write_st(const char *name, const struct harness_tensor *t, int n)
{
	size_t cap = 256, hl = 0, off = 0;
	for (int i = 0; i < n; i++)
		cap += strlen(t[i].name) + 128;
	char *hdr = malloc(cap);
	hl += (size_t)snprintf(hdr + hl, cap - hl, "{");
	for (int i = 0; i < n; i++) {
		hl += (size_t)snprintf(hdr + hl, cap - hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
				       i ? "," : "", t[i].name, t[i].dtype);
		for (int d = 0; d < t[i].ndim; d++)
			hl += (size_t)snprintf(hdr + hl, cap - hl, "%s%lld", d ? "," : "",
					       (long long)t[i].shape[d]);
		hl += (size_t)snprintf(hdr + hl, cap - hl, "],\"data_offsets\":[%zu,%zu]}", off,
				       off + t[i].len);
		off += t[i].len;
	}
	hl += (size_t)snprintf(hdr + hl, cap - hl, "}");
	unsigned char *buf = malloc(8 + hl + off);
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
	memcpy(buf + 8, hdr, hl);
	off = 8 + hl;
	for (int i = 0; i < n; i++) {
		memcpy(buf + off, t[i].data, t[i].len);
		off += t[i].len;
	}
	char *path = harness_write(harness_tmpdir(), name, buf, off);
	free(buf);
	free(hdr);
	return path;
}

const char *harness_srcdir(void)
{
	const char *s = getenv("ATLAS_SRC");
	return s ? s : ".";
}

static int golden_by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int harness_each_golden(char *dir, size_t dir_size, void (*fn)(void))
{
	char root[512];
	struct dirent **ents;
	int found = 0;
	snprintf(root, sizeof(root), "%s/tests/fixtures/golden", harness_srcdir());
	int n = scandir(root, &ents, NULL, golden_by_name);
	for (int i = 0; i < n; i++) {
		char exp[1100];
		snprintf(dir, dir_size, "%s/%.200s", root, ents[i]->d_name);
		snprintf(exp, sizeof(exp), "%s/expected.json", dir);
		FILE *f = ents[i]->d_name[0] != '.' ? fopen(exp, "r") : NULL;
		if (f) {
			fclose(f);
			found++;
			harness_run(ents[i]->d_name, fn);
		}
		free(ents[i]);
	}
	if (n >= 0)
		free(ents);
	return found;
}
