/* gates.c - the thresholds of atlas-bench (--min, --max, --thresholds):
 * which metrics each command reports, parsing the bars, and judging them
 * on the result rows, the worst row deciding. */
#include "runs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

struct metrics {
	const char *command; /* subcommand */
	const char *names;   /* its gate-able row keys, ", "-separated */
};

static const struct metrics table[] = {
	{"kernels", "ms, gbs, tflops, roofline, speedup"},
	{"decode", "tok_s, ms_per_step, ttft_ms, roofline"},
	{"prefill", "tok_s, ms, ttft_ms, tflops, roofline"},
	{"generate", "tok_s, e2e_tok_s, ms_per_step, ttft_ms, total_ms, roofline"},
	{"serve", "throughput_tok_s, req_s, ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, "
		  "tpot_p50_ms, tpot_p99_ms, errors, error_rate"},
};

const char *atlas_bench_metrics(const char *command)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (!strcmp(table[i].command, command))
			return table[i].names;
	return "";
}

static bool known(const char *command, const char *name)
{
	const char *l = atlas_bench_metrics(command);
	size_t n = strlen(name);
	for (const char *p = strstr(l, name); n && p; p = strstr(p + 1, name))
		if ((p == l || p[-1] == ' ') && (p[n] == ',' || p[n] == 0))
			return true;
	return false;
}

static int set_gate(const char *command, const char *name, size_t len, double v, bool is_max,
		    struct atlas_bench_gate *g)
{
	memset(g, 0, sizeof(*g));
	if (len >= sizeof(g->metric))
		len = sizeof(g->metric) - 1;
	memcpy(g->metric, name, len);
	if (!known(command, g->metric))
		return atlas_error(ATLAS_EINVAL, "unknown metric '%s' for %s (valid: %s)", g->metric,
				   command, atlas_bench_metrics(command));
	g->is_max = is_max;
	g->limit = v;
	return 0;
}

int atlas_bench_gate_parse(const char *command, const char *spec, bool is_max,
			   struct atlas_bench_gate *g)
{
	const char *eq = strchr(spec, '=');
	char *end;
	if (!eq)
		return atlas_error(ATLAS_EINVAL, "'%s' is not METRIC=VALUE (metrics: %s)", spec,
				   atlas_bench_metrics(command));
	errno = 0;
	double v = strtod(eq + 1, &end);
	int rc = set_gate(command, spec, (size_t)(eq - spec), v, is_max, g);
	if (!rc && (eq[1] == 0 || *end || errno || !isfinite(v)))
		rc = atlas_error(ATLAS_EINVAL, "'%s': '%s' is not a number", spec, eq + 1);
	return rc;
}

int atlas_bench_gates_file(const char *command, const char *path, struct atlas_bench_gate *g,
			   int n, int max)
{
	json_object *o = json_object_from_file(path);
	int rc = 0;
	if (!o || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return atlas_error(ATLAS_EFORMAT, "'%s' is not a JSON object of metric -> minimum",
				   path);
	}
	json_object_object_foreach(o, key, val)
	{
		json_object *mn = NULL, *mx = NULL;
		if (json_object_is_type(val, json_type_object)) {
			json_object_object_get_ex(val, "min", &mn);
			json_object_object_get_ex(val, "max", &mx);
		} else {
			mn = val;
		}
		json_object *bars[2] = {mn, mx};
		for (int k = 0; k < 2 && !rc; k++) {
			if (!bars[k])
				continue;
			if (!json_object_is_type(bars[k], json_type_double) &&
			    !json_object_is_type(bars[k], json_type_int))
				rc = atlas_error(ATLAS_EFORMAT, "'%s': the bar of '%s' is not a number",
						 path, key);
			else if (n == max)
				rc = atlas_error(ATLAS_ERANGE, "'%s': more than %d thresholds", path, max);
			else if (!(rc = set_gate(command, key, strlen(key),
						 json_object_get_double(bars[k]), k == 1, &g[n])))
				n++;
			if (rc && rc != ATLAS_EFORMAT && rc != ATLAS_ERANGE)
				rc = atlas_error_wrap(rc, "'%s'", path);
		}
		if (rc)
			break;
	}
	json_object_put(o);
	return rc ? rc : n;
}

/* Lowest and highest value of `key` over the rows; false if no row has
 * a number there. */
static bool range_of(json_object *rows, const char *key, double *lo, double *hi)
{
	bool any = false;
	for (size_t i = 0; i < json_object_array_length(rows); i++) {
		json_object *v;
		if (!json_object_object_get_ex(json_object_array_get_idx(rows, i), key, &v) || !v ||
		    json_object_is_type(v, json_type_string))
			continue;
		double d = json_object_get_double(v);
		*lo = any && *lo < d ? *lo : d;
		*hi = any && *hi > d ? *hi : d;
		any = true;
	}
	return any;
}

int atlas_bench_gates_check(json_object *results, struct atlas_bench_gate *g, int n)
{
	int missed = 0;
	for (int i = 0; i < n; i++) {
		double lo = NAN, hi = NAN;
		if (!range_of(results, g[i].metric, &lo, &hi)) {
			g[i].actual = NAN, g[i].pass = false; /* no measurement meets no bar */
		} else {
			g[i].actual = g[i].is_max ? hi : lo;
			g[i].pass = g[i].is_max ? hi <= g[i].limit : lo >= g[i].limit;
		}
		missed += !g[i].pass;
	}
	return missed;
}

json_object *atlas_bench_metrics_json(const char *command, json_object *results)
{
	json_object *o = json_object_new_object();
	char names[256], *save = NULL;
	snprintf(names, sizeof(names), "%s", atlas_bench_metrics(command));
	for (char *t = strtok_r(names, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		double lo, hi;
		if (!range_of(results, t, &lo, &hi))
			continue;
		json_object *r = json_object_new_object();
		json_object_object_add(r, "min", json_object_new_double(lo));
		json_object_object_add(r, "max", json_object_new_double(hi));
		json_object_object_add(o, t, r);
	}
	return o;
}

json_object *atlas_bench_gates_json(const struct atlas_bench_gate *g, int n)
{
	json_object *a = json_object_new_array();
	for (int i = 0; i < n; i++) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "metric", json_object_new_string(g[i].metric));
		json_object_object_add(o, "bound", json_object_new_string(g[i].is_max ? "max" : "min"));
		json_object_object_add(o, "limit", json_object_new_double(g[i].limit));
		json_object_object_add(o, "actual", isnan(g[i].actual) ? NULL
						       : json_object_new_double(g[i].actual));
		json_object_object_add(o, "pass", json_object_new_boolean(g[i].pass));
		json_object_array_add(a, o);
	}
	return a;
}
