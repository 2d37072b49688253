/* runs.h - what atlas-bench keeps and judges: the record of each run
 * under $ATLAS_HOME/runs/ (default ~/.atlas/runs/), its listing, and the
 * thresholds of --min/--max/--thresholds checked against the results. */
#ifndef ATLAS_BENCH_RUNS_H
#define ATLAS_BENCH_RUNS_H

#include <stdbool.h>

#include <json-c/json.h>

/* The runs folder (malloc'd, caller frees), or NULL with a message when
 * neither ATLAS_HOME nor HOME is set. */
char *atlas_bench_runs_dir(void);

/* Write `doc` to a new file of the runs folder (made if missing) named
 * by the UTC time and the command ("20261202T101500Z-decode.json", a
 * suffix -2, -3... if taken). *id (malloc'd) gets the name without
 * ".json". 0 or a negative code. */
int atlas_bench_record(json_object *doc, const char *command, char **id);

/* One line per recorded run, oldest first: "ID  COMMAND  DEVICE  GPU
 * COMMIT  GATES", as a malloc'd string ("" when there are none), or NULL
 * with a message. */
char *atlas_bench_history_list(void);

/* The text of run `id` (a file name without .json, or a unique prefix of
 * one), malloc'd; NULL with ATLAS_ENOTFOUND's message if none or several. */
char *atlas_bench_history_show(const char *id);

/* One threshold. */
struct atlas_bench_gate {
	char metric[32];        /* a key of the result rows */
	bool is_max;            /* true: every row <= limit; false: >= limit */
	double limit;           /* the bar */
	double actual;          /* worst row's value (after check) */
	bool pass;              /* met (after check) */
};

/* The metrics `command` can be gated on, comma-separated; static string,
 * "" for an unknown command. */
const char *atlas_bench_metrics(const char *command);

/* "METRIC=VALUE" into *g; ATLAS_EINVAL naming the valid metrics of
 * `command` when the metric is unknown or the value not a number. */
int atlas_bench_gate_parse(const char *command, const char *spec, bool is_max,
			   struct atlas_bench_gate *g);

/* The thresholds of a JSON file: an object of metric -> minimum (or ->
 * {"min": X, "max": Y}). Appends to g (n used of max) and returns the
 * new count, or a negative code naming the file or metric at fault. */
int atlas_bench_gates_file(const char *command, const char *path, struct atlas_bench_gate *g,
			   int n, int max);

/* Judge every gate on the rows of `results` (a JSON array of objects):
 * the worst row decides. Returns the number missed (0: all met). */
int atlas_bench_gates_check(json_object *results, struct atlas_bench_gate *g, int n);

/* {"metric": {"min": X, "max": Y}} over the rows for each metric of
 * `command`, and the gates as an array; new objects owned by the caller. */
json_object *atlas_bench_metrics_json(const char *command, json_object *results);
json_object *atlas_bench_gates_json(const struct atlas_bench_gate *g, int n);

#endif
