/* runs.c - the record of atlas-bench runs: one JSON file per run under
 * $ATLAS_HOME/runs/ (default ~/.atlas/runs/), named by UTC time and
 * command so that a plain sort is the order they ran in, and the listing
 * and lookup behind `atlas-bench history`. */
#include "runs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/error.h"

char *atlas_bench_runs_dir(void)
{
	const char *h = getenv("ATLAS_HOME"), *home = getenv("HOME");
	char *p = NULL;
	if (h && *h) {
		if (asprintf(&p, "%s/runs", h) < 0)
			p = NULL;
	} else if (home && *home) {
		if (asprintf(&p, "%s/.atlas/runs", home) < 0)
			p = NULL;
	} else {
		atlas_error(ATLAS_ENOTFOUND, "neither ATLAS_HOME nor HOME is set");
		return NULL;
	}
	if (!p)
		atlas_error(ATLAS_ENOMEM, "out of memory");
	return p;
}

/* mkdir -p of `dir`. */
static int make_dirs(const char *dir)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", dir);
	for (char *s = buf + 1;; s++) {
		char c = *s;
		if (c != '/' && c != 0)
			continue;
		*s = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return atlas_error(ATLAS_EIO, "cannot create '%s': %s", buf, strerror(errno));
		if (!c)
			return 0;
		*s = c;
	}
}

int atlas_bench_record(json_object *doc, const char *command, char **id)
{
	char *dir = atlas_bench_runs_dir(), stamp[32], name[96], path[4200];
	time_t now = time(NULL);
	struct tm tm;
	int rc, fd = -1;
	*id = NULL;
	if (!dir)
		return ATLAS_ENOTFOUND;
	if ((rc = make_dirs(dir))) {
		free(dir);
		return rc;
	}
	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	for (int i = 1; i < 1000 && fd < 0; i++) {
		if (i == 1)
			snprintf(name, sizeof(name), "%s-%s", stamp, command);
		else
			snprintf(name, sizeof(name), "%s-%s-%d", stamp, command, i);
		snprintf(path, sizeof(path), "%s/%s.json", dir, name);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	free(dir);
	if (fd < 0)
		return atlas_error(ATLAS_EIO, "cannot create '%s': %s", path, strerror(errno));
	const char *s = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PRETTY |
								JSON_C_TO_STRING_NOSLASHESCAPE);
	size_t len = strlen(s), off = 0;
	while (off < len) {
		ssize_t w = write(fd, s + off, len - off);
		if (w <= 0) {
			close(fd);
			return atlas_error(ATLAS_EIO, "cannot write '%s'", path);
		}
		off += (size_t)w;
	}
	if (write(fd, "\n", 1) != 1 || close(fd))
		return atlas_error(ATLAS_EIO, "cannot write '%s'", path);
	*id = strdup(name);
	return *id ? 0 : atlas_error(ATLAS_ENOMEM, "out of memory");
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The run names (without .json) in sorted order; *n gets the count. */
static char **run_names(const char *dir, int *n)
{
	DIR *d = opendir(dir);
	char **v = NULL;
	int cap = 0;
	struct dirent *e;
	*n = 0;
	if (!d)
		return NULL;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 6 || strcmp(e->d_name + l - 5, ".json") || e->d_name[0] == '.')
			continue;
		if (*n == cap) {
			char **nv = realloc(v, (size_t)(cap = cap ? 2 * cap : 32) * sizeof(*v));
			if (!nv)
				break;
			v = nv;
		}
		v[(*n)++] = strndup(e->d_name, l - 5);
	}
	closedir(d);
	if (v)
		qsort(v, (size_t)*n, sizeof(*v), cmp_str);
	return v;
}

static const char *str_at(json_object *o, const char *a, const char *b)
{
	json_object *v;
	if (!json_object_object_get_ex(o, a, &v))
		return "-";
	if (b && !json_object_object_get_ex(v, b, &v))
		return "-";
	return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "-";
}

/* "pass", "FAIL 1/3" or "-" from a document's gates. */
static void gates_word(json_object *doc, char *s, size_t n)
{
	json_object *g;
	int bad = 0, all = 0;
	snprintf(s, n, "-");
	if (!json_object_object_get_ex(doc, "gates", &g) || !json_object_is_type(g, json_type_array))
		return;
	all = (int)json_object_array_length(g);
	for (int i = 0; i < all; i++) {
		json_object *p;
		if (json_object_object_get_ex(json_object_array_get_idx(g, i), "pass", &p) &&
		    !json_object_get_boolean(p))
			bad++;
	}
	if (all)
		snprintf(s, n, bad ? "FAIL %d/%d" : "pass", bad, all);
}

char *atlas_bench_history_list(void)
{
	char *dir = atlas_bench_runs_dir(), *buf = NULL;
	size_t len = 0;
	int n = 0;
	if (!dir)
		return NULL;
	char **names = run_names(dir, &n);
	FILE *f = open_memstream(&buf, &len);
	for (int i = 0; f && i < n; i++) {
		char path[4200], g[32];
		snprintf(path, sizeof(path), "%s/%s.json", dir, names[i]);
		json_object *doc = json_object_from_file(path);
		gates_word(doc, g, sizeof(g));
		fprintf(f, "%-36s %-8s %-8s %-20s %-10s %s\n", names[i], str_at(doc, "command", NULL),
			str_at(doc, "machine", "device"), str_at(doc, "machine", "gpu"),
			str_at(doc, "commit", NULL), g);
		json_object_put(doc);
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(dir);
	if (!f || fclose(f)) {
		free(buf);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	return buf;
}

char *atlas_bench_history_show(const char *id)
{
	char *dir = atlas_bench_runs_dir(), *found = NULL, *text = NULL;
	int n = 0, hits = 0;
	if (!dir)
		return NULL;
	char **names = run_names(dir, &n);
	for (int i = 0; i < n; i++) {
		if (!strcmp(names[i], id)) { /* an exact name wins over prefixes */
			found = names[i], hits = 1;
			break;
		}
		if (!strncmp(names[i], id, strlen(id)))
			found = names[i], hits++;
	}
	if (hits == 1 && *id) {
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s.json", dir, found);
		FILE *f = fopen(path, "r");
		size_t cap = 0;
		if (f) {
			ssize_t r = getdelim(&text, &cap, 0, f);
			if (r < 0) {
				free(text);
				text = NULL;
			}
			fclose(f);
		}
		if (!text)
			atlas_error(ATLAS_EIO, "cannot read '%s'", path);
	} else {
		if (hits > 1)
			atlas_error(ATLAS_ENOTFOUND, "run id '%s' is ambiguous (%d runs match)", id,
				    hits);
		else
			atlas_error(ATLAS_ENOTFOUND, "no run '%s' in '%s'", id, dir);
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(dir);
	return text;
}
