/* common.c - shared command-line helpers (see common.h). */
#include "common.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/backend/backend.h"
#include "../lib/backend/kvq.h"
#include "../lib/core/error.h"
#include "../lib/io/hfcache.h"

const char *cmd_name = "atlas";

void cmd_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: error: ", cmd_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cmd_lib_error(void)
{
	cmd_error("%s", atlas_errmsg());
	return 1;
}

void cmd_usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", cmd_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", cmd_name);
	exit(2);
}

int64_t cmd_parse_int(const char *flag, const char *s, int64_t min, int64_t max)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		cmd_usage_error("%s: '%s' is not an integer", flag, s);
	if (v < min || v > max)
		cmd_usage_error("%s: %lld is out of range (%lld..%lld)", flag, v,
				(long long)min, (long long)max);
	return v;
}

double cmd_parse_double(const char *flag, const char *s, double min, double max)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v))
		cmd_usage_error("%s: '%s' is not a number", flag, s);
	if (v < min || v > max)
		cmd_usage_error("%s: %g is out of range (%g..%g)", flag, v, min, max);
	return v;
}

uint64_t cmd_parse_u64(const char *flag, const char *s)
{
	char *end;
	errno = 0;
	if (*s == '-')
		cmd_usage_error("%s: '%s' must not be negative", flag, s);
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		cmd_usage_error("%s: '%s' is not an integer", flag, s);
	return v;
}

enum atlas_kv_dtype cmd_parse_kv_dtype(const char *flag, const char *s)
{
	enum atlas_kv_dtype k;
	if (atlas_kv_dtype_parse(s, &k))
		cmd_usage_error("%s: unknown KV cache format '%s' (" CMD_KV_DTYPES ")", flag, s);
	return k;
}

enum atlas_spec_mode cmd_parse_spec(const char *flag, const char *s)
{
	enum atlas_spec_mode m;
	if (atlas_spec_parse(s, &m))
		cmd_usage_error("%s: %s", flag, atlas_errmsg());
	return m;
}

int64_t cmd_parse_size(const char *flag, const char *s, int64_t min)
{
	static const struct { const char *unit; double mult; } units[] = {
		{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
		{"TiB", 1099511627776.0},
	};
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		cmd_usage_error("%s: '%s' is not a size (e.g. 500MB, 2GiB)", flag, s);
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].unit))
			continue;
		double bytes = v * units[i].mult;
		if (bytes < (double)min || bytes > 9e18)
			cmd_usage_error("%s: '%s' is out of range (at least %lld bytes)", flag, s,
					(long long)min);
		return (int64_t)bytes;
	}
	cmd_usage_error("%s: '%s' has an unknown unit (B, KB, MB, GB, KiB, MiB, GiB)", flag, s);
}

void cmd_print_version(void)
{
	const char *k = atlas_kernel_targets();
	printf("%s %s (git %s)\n", cmd_name, ATLAS_VERSION, ATLAS_GIT_REV);
	printf("kernel targets: %s\n", k[0] ? k : "none (CPU-only build)");
}

static int is_model_dir(const char *d)
{
	char p[PATH_MAX + 80];
	struct stat st;
	size_t n = strlen(d);
	if (n >= PATH_MAX)
		return 0;
	memcpy(p, d, n);
	strcpy(p + n, "/config.json");
	return stat(p, &st) == 0;
}

/* The default model: $ATLAS_DEFAULT_MODEL, else next to the executable in
 * the build tree (build/../models/default) or an install
 * (bin/../share/atlas/models/default). */
static char *default_model(void)
{
	const char *env = getenv("ATLAS_DEFAULT_MODEL");
	char exe[PATH_MAX], cand[PATH_MAX + 64];
	_Static_assert(sizeof(cand) > sizeof(exe) + 40, "room for the suffix");
	if (env && *env) {
		if (is_model_dir(env))
			return strdup(env);
		cmd_error("ATLAS_DEFAULT_MODEL '%s' is not a model directory (no config.json)", env);
		return NULL;
	}
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = '\0';
		const char *rel[] = {"../models/default", "../share/atlas/models/default"};
		for (size_t i = 0; i < 2; i++) {
			size_t el = strlen(exe);
			memcpy(cand, exe, el);
			cand[el] = '/';
			strcpy(cand + el + 1, rel[i]);
			if (is_model_dir(cand))
				return realpath(cand, NULL);
		}
	}
	cmd_error("no model given and the default model was not found next to the program "
		  "(set ATLAS_DEFAULT_MODEL or pass -m MODEL)");
	return NULL;
}

char *cmd_resolve_model(const char *model)
{
	if (!model)
		return default_model();
	char *dir = atlas_model_resolve(model);
	if (!dir)
		cmd_lib_error();
	return dir;
}
