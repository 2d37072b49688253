/* atlas-doctor - diagnose this machine's setup for Atlas.
 *
 *   atlas-doctor [-m MODEL] [--port N] [--json]
 *
 * Each check reports ok, warning or problem with a one-line fix hint.
 * Exit 0 when there is no problem, 1 otherwise. A machine without an
 * NVIDIA driver gets a warning, not a problem: the CPU backend is a
 * supported path, so the exit status is 0 when it works. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../lib/backend/backend.h"
#include "../lib/comm/comm.h"
#include "../lib/core/error.h"
#include "../lib/io/file.h"
#include "../lib/io/hfcache.h"
#include "../lib/engine/session.h"
#include "../lib/model/model.h"
#include "../lib/model/tensors.h"
#include "common.h"

static const char usage_text[] =
	"usage: atlas-doctor [-m MODEL] [--port N] [--json]\n"
	"\n"
	"Check this machine for Atlas: NVIDIA driver and GPUs, the CUDA backend, this\n"
	"build's kernel targets, NCCL, the CPU backend, the Hugging Face cache (location,\n"
	"free disk, models), a model (-m), the server port, pinned-memory limits.\n"
	"Each check prints ok, warning or problem, with a fix for the last two.\n"
	"Exit 0 when nothing is a problem (no GPU is a warning: the CPU path works), 1\n"
	"otherwise.\n"
	"\n"
	"  -m, --model MODEL         also check that MODEL validates and loads (CPU)\n"
	"      --port N              the port atlas-serve will use (default 8888)\n"
	"      --json                one JSON object on stdout\n"
	"  -h, --help                show this help\n"
	"  -V, --version             show the version\n";

enum { OPT_PORT = 256, OPT_JSON };

static const struct option longopts[] = {
	{"model", required_argument, NULL, 'm'},
	{"port", required_argument, NULL, OPT_PORT},
	{"json", no_argument, NULL, OPT_JSON},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

enum status { OK, WARN, PROBLEM };
static const char *const status_name[] = {"ok", "warning", "problem"};

/* The report being built. */
struct report {
	bool json;                /* --json */
	struct json_object *checks; /* array of {check, status, message, hint} */
	struct json_object *gpus; /* array of GPU objects */
	int n[3];                 /* checks per status */
};

static void add(struct report *r, enum status st, const char *check, const char *hint,
		const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void add(struct report *r, enum status st, const char *check, const char *hint,
		const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->n[st]++;
	if (r->json) {
		struct json_object *c = json_object_new_object();
		json_object_object_add(c, "check", json_object_new_string(check));
		json_object_object_add(c, "status", json_object_new_string(status_name[st]));
		json_object_object_add(c, "message", json_object_new_string(msg));
		json_object_object_add(c, "hint", hint && st != OK ? json_object_new_string(hint) : NULL);
		json_object_array_add(r->checks, c);
		return;
	}
	printf("%-8s %-15s %s\n", status_name[st], check, msg);
	if (hint && st != OK)
		printf("%-8s %-15s fix: %s\n", "", "", hint);
}

static double gib(double b)
{
	return b / (1024.0 * 1024.0 * 1024.0);
}

/* --- GPU, CUDA, kernels, NCCL ----------------------------------------------- */

#define MAX_GPUS 64

static int check_gpus(struct report *r, struct atlas_gpu_info *g)
{
	int ver = 0, n = atlas_gpu_probe(g, MAX_GPUS, &ver);
	if (n == ATLAS_ENOTFOUND) {
		add(r, WARN, "driver", "install the NVIDIA driver to use a GPU; without one Atlas "
		    "runs on the CPU backend", "%s", atlas_errmsg());
		return 0;
	}
	if (n < 0) {
		add(r, PROBLEM, "driver", "check the driver install: nvidia-smi should list the GPUs",
		    "%s", atlas_errmsg());
		return 0;
	}
	add(r, OK, "driver", NULL, "NVIDIA driver supporting CUDA %d.%d", ver / 1000, ver % 1000 / 10);
	if (n == 0)
		add(r, WARN, "gpus", "check that the GPUs are visible (CUDA_VISIBLE_DEVICES, "
		    "nvidia-smi)", "the driver sees no GPU; Atlas runs on the CPU backend");
	for (int i = 0; i < n && i < MAX_GPUS; i++) {
		char free_s[48] = "free unknown";
		if (g[i].mem_free)
			snprintf(free_s, sizeof(free_s), "%.1f GiB free", gib((double)g[i].mem_free));
		add(r, OK, "gpu", NULL, "GPU %d: %s, compute capability %d.%d, %.1f GiB total, %s",
		    g[i].index, g[i].name, g[i].cc_major, g[i].cc_minor, gib((double)g[i].mem_total),
		    free_s);
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, "index", json_object_new_int(g[i].index));
		json_object_object_add(o, "name", json_object_new_string(g[i].name));
		json_object_object_add(o, "compute_capability", json_object_new_double(
			g[i].cc_major + g[i].cc_minor / 10.0));
		json_object_object_add(o, "memory_total", json_object_new_int64((int64_t)g[i].mem_total));
		json_object_object_add(o, "memory_free", json_object_new_int64((int64_t)g[i].mem_free));
		json_object_array_add(r->gpus, o);
	}
	return n < MAX_GPUS ? n : MAX_GPUS;
}

static void check_cuda(struct report *r, int n_gpus)
{
	if (n_gpus == 0)
		return;
	struct atlas_backend *be = atlas_backend_open("cuda");
	if (!be) {
		add(r, PROBLEM, "cuda backend", atlas_kernel_targets()[0]
		    ? "check that the driver (nvidia-smi) supports the CUDA version this build uses"
		    : "rebuild Atlas with nvcc on PATH (make NVCC=...)", "%s", atlas_errmsg());
		return;
	}
	add(r, OK, "cuda backend", NULL, "usable (%s)", be->name);
	be->destroy(be);
}

/* Does the target list have an entry for arch "smXY"? */
static bool has_arch(const char *targets, int major, int minor)
{
	char arch[32];
	snprintf(arch, sizeof(arch), "sm%d%d/", major, minor);
	for (const char *p = targets; (p = strstr(p, arch)); p++)
		if (p == targets || p[-1] == ' ')
			return true;
	return false;
}

static void check_kernels(struct report *r, const struct atlas_gpu_info *g, int n_gpus)
{
	const char *t = atlas_kernel_targets();
	if (!t[0]) {
		if (n_gpus)
			add(r, PROBLEM, "kernel targets", "rebuild Atlas with nvcc on PATH",
			    "none (CPU-only build) but %d GPU%s present", n_gpus, n_gpus == 1 ? "" : "s");
		else
			add(r, OK, "kernel targets", NULL, "none (CPU-only build)");
		return;
	}
	add(r, OK, "kernel targets", NULL, "%s", t);
	for (int i = 0; i < n_gpus; i++)
		if (!has_arch(t, g[i].cc_major, g[i].cc_minor))
			add(r, PROBLEM, "kernel targets", "rebuild with ATLAS_TARGETS naming this "
			    "GPU's architecture, or use --device cpu",
			    "no kernels for GPU %d (%s, sm%d%d) in this build", i, g[i].name,
			    g[i].cc_major, g[i].cc_minor);
}

/* NCCL's version (loaded the way the nccl communicator loads it:
 * ATLAS_NCCL_LIB or libnccl.so.2). Not found is not an error: only runs
 * across several GPUs need it. */
static void check_nccl(struct report *r, int n_gpus)
{
	const char *lib = getenv("ATLAS_NCCL_LIB");
	int v = 0, rc = atlas_comm_nccl_version(&v);
	if (!lib || !*lib)
		lib = "libnccl.so.2";
	if (!rc) {
		/* NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch (>= 2.9) */
		add(r, OK, "nccl", NULL, "NCCL %d.%d.%d (%s)", v / 10000, v % 10000 / 100, v % 100,
		    lib);
	} else if (rc != ATLAS_ENOTFOUND) {
		add(r, WARN, "nccl", "install NCCL 2.10 or later (libnccl2) for multi-GPU runs",
		    "%s", atlas_errmsg());
	} else if (n_gpus == 0) {
		add(r, OK, "nccl", NULL, "not found (%s; not needed without GPUs)", lib);
	} else {
		add(r, WARN, "nccl", "install NCCL (libnccl2) for multi-GPU runs",
		    "not found (%s): %s", lib, n_gpus > 1 ? "runs across several GPUs will fail"
						       : "needed only for runs across several GPUs");
	}
}

/* The driver API calls of the peer-to-peer check (libcuda.so.1 loaded at
 * run time, as gpu_probe.c does: no link-time dependency). */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_peer_fn)(int *, int, int);

/* With 2+ GPUs: which GPU can read which one's memory directly
 * (cuDeviceCanAccessPeer), as one line of "i->j,k" entries and a
 * "peer_access" list in each GPU's JSON object. A missing pair is a
 * warning: tensor parallelism still works, its all-reduces through host
 * memory. */
static void check_p2p(struct report *r, int n_gpus)
{
	if (n_gpus < 2)
		return;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	cu_init_fn init = NULL;
	cu_get_fn get = NULL;
	cu_peer_fn peer = NULL;
	if (lib) {
		void *p[3] = {dlsym(lib, "cuInit"), dlsym(lib, "cuDeviceGet"),
			      dlsym(lib, "cuDeviceCanAccessPeer")};
		memcpy(&init, &p[0], sizeof(void *));
		memcpy(&get, &p[1], sizeof(void *));
		memcpy(&peer, &p[2], sizeof(void *));
	}
	if (!init || !get || !peer || init(0)) {
		add(r, WARN, "p2p", "check the driver install (nvidia-smi topo -m)",
		    "cannot query peer-to-peer access between the %d GPUs", n_gpus);
		if (lib)
			dlclose(lib);
		return;
	}
	char line[1024] = "";
	size_t off = 0;
	int missing = 0;
	for (int i = 0; i < n_gpus; i++) {
		int di = 0, n_row = 0;
		json_object *list = json_object_new_array();
		if (get(&di, i))
			di = i;
		if (off < sizeof(line) - 24)
			off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%d->", i ? "; " : "", i);
		for (int j = 0; j < n_gpus; j++) {
			int dj = 0, can = 0;
			if (j == i)
				continue;
			if (get(&dj, j) || peer(&can, di, dj))
				can = 0;
			if (!can) {
				missing++;
				continue;
			}
			json_object_array_add(list, json_object_new_int(j));
			if (off < sizeof(line) - 24)
				off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%d",
							n_row ? "," : "", j);
			n_row++;
		}
		if (!n_row && off < sizeof(line) - 24)
			off += (size_t)snprintf(line + off, sizeof(line) - off, "none");
		json_object *g = json_object_array_get_idx(r->gpus, (size_t)i);
		if (g)
			json_object_object_add(g, "peer_access", list);
		else
			json_object_put(list);
	}
	dlclose(lib);
	if (missing)
		add(r, WARN, "p2p", "tensor parallelism across GPUs without peer access is slower "
		    "(check nvidia-smi topo -m)", "peer-to-peer access %s (%d of %d pairs missing)",
		    line, missing, n_gpus * (n_gpus - 1));
	else
		add(r, OK, "p2p", NULL, "peer-to-peer access between all %d GPUs (%s)", n_gpus, line);
}

/* --- CPU backend --------------------------------------------------------------- */

static void check_cpu(struct report *r)
{
	struct atlas_backend *be = atlas_backend_cpu_new();
	/* x [1,3] times W [2,3]^T = [1*1, 2*1 + 3*1] */
	const float x[3] = {1, 2, 3}, w[6] = {1, 0, 0, 0, 1, 1};
	float y[2] = {0, 0};
	void *dx = NULL, *dy = NULL;
	const void *dw = NULL;
	int rc = !be;
	if (!rc) {
		dx = be->alloc(be, sizeof(x));
		dy = be->alloc(be, sizeof(y));
		dw = be->weight_upload(be, w, sizeof(w));
		rc = !dx || !dy || !dw || be->upload(be, dx, x, sizeof(x)) ||
		     be->matmul(be, dy, dx, dw, NULL, ATLAS_DTYPE_F32, 1, 2, 3) ||
		     be->to_f32(be, y, dy, 2);
	}
	if (rc || y[0] != 1.0f || y[1] != 5.0f)
		add(r, PROBLEM, "cpu backend", "report this as a bug with the output of atlas-doctor",
		    "a test matmul failed: %s", rc ? atlas_errmsg() : "wrong result");
	else
		add(r, OK, "cpu backend", NULL, "works (%s)", be->name);
	if (be) {
		if (dw)
			be->weight_release(be, dw);
		be->free(be, dx);
		be->free(be, dy);
		be->destroy(be);
	}
}

/* --- HF cache --------------------------------------------------------------------- */

/* The deepest existing directory on the way to `path` (for free space
 * and writability of a cache that does not exist yet). */
static void existing_ancestor(const char *path, char *buf, size_t n)
{
	struct stat sb;
	snprintf(buf, n, "%s", path);
	while (stat(buf, &sb) != 0) {
		char *slash = strrchr(buf, '/');
		if (!slash || slash == buf) {
			snprintf(buf, n, "/");
			return;
		}
		*slash = '\0';
	}
}

static void check_cache(struct report *r)
{
	char *cache = atlas_hf_cache_dir(), anc[4096];
	struct statvfs vfs;
	struct stat sb;

	if (!cache) {
		add(r, PROBLEM, "hf cache", "set HF_HOME or HF_HUB_CACHE", "%s", atlas_errmsg());
		return;
	}
	existing_ancestor(cache, anc, sizeof(anc));
	bool exists = !strcmp(anc, cache);
	if ((stat(anc, &sb) || !S_ISDIR(sb.st_mode)))
		add(r, PROBLEM, "hf cache", "point HF_HUB_CACHE (or HF_HOME) at a directory",
		    "'%s' is in the way of the cache at '%s': not a directory", anc, cache);
	else if (access(anc, W_OK))
		add(r, PROBLEM, "hf cache", "make it writable or point HF_HUB_CACHE elsewhere",
		    "cache '%s' is not writable (%s)", cache, exists ? "the directory" : anc);
	else
		add(r, OK, "hf cache", NULL, "%s%s", cache, exists ? "" : " (will be created)");
	if (statvfs(anc, &vfs) == 0) {
		double avail = (double)vfs.f_bavail * (double)vfs.f_frsize;
		if (gib(avail) < 10)
			add(r, WARN, "disk", "free space where the cache lives: models need GBs",
			    "%.1f GiB free at '%s'", gib(avail), anc);
		else
			add(r, OK, "disk", NULL, "%.1f GiB free at '%s'", gib(avail), anc);
	}
	DIR *d = exists ? opendir(cache) : NULL;
	struct dirent *e;
	char names[512] = "";
	int count = 0;
	size_t off = 0;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "models--", 8))
			continue;
		char id[256];
		const char *sep = strstr(e->d_name + 8, "--");
		if (!sep)
			continue;
		snprintf(id, sizeof(id), "%.*s/%s", (int)(sep - e->d_name - 8), e->d_name + 8, sep + 2);
		if (off + strlen(id) + 8 < sizeof(names))
			off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", count ? ", " : "",
						id);
		count++;
	}
	if (d)
		closedir(d);
	add(r, OK, "models", NULL, "%d in the cache%s%s", count, count ? ": " : "", names);
	free(cache);
}

/* --- model, port, memory ------------------------------------------------------------ */

struct first_problem {
	char msg[512]; /* first problem's text */
	int n;         /* problems */
};

static void on_finding(void *arg, enum atlas_finding level, const char *msg)
{
	struct first_problem *f = arg;
	if (level == ATLAS_FINDING_PROBLEM && !f->n++)
		snprintf(f->msg, sizeof(f->msg), "%s", msg);
}

static void check_model(struct report *r, const char *model)
{
	char *dir = atlas_model_resolve(model);
	struct first_problem f = {.n = 0};
	if (!dir) {
		add(r, PROBLEM, "model", "fetch it with atlas-fetch, or give a directory",
		    "%s", atlas_errmsg());
		return;
	}
	if (atlas_model_validate(dir, on_finding, &f) != 0) {
		add(r, PROBLEM, "model", "run atlas-load validate for the full list",
		    "'%s' does not validate: %d problem%s, first: %s", dir, f.n, f.n == 1 ? "" : "s",
		    f.msg);
		free(dir);
		return;
	}
	/* opened as every program opens it (tokenizer, generation defaults,
	 * model, scheduler), on the CPU with a small context */
	struct atlas_session_params sp;
	atlas_session_default_params(&sp);
	sp.model_dir = dir;
	sp.device = "cpu";
	sp.model.max_context = 16;
	struct atlas_session *ses = atlas_session_open(&sp);
	struct atlas_model *m = ses ? atlas_session_model(ses) : NULL;
	if (!m)
		add(r, PROBLEM, "model", "run atlas-load validate for details", "%s", atlas_errmsg());
	else
		add(r, OK, "model", NULL, "'%s' validates and loads (%s, %lld layers)", dir,
		    atlas_model_family(m), (long long)atlas_model_config(m)->num_layers);
	atlas_session_close(ses);
	free(dir);
}

static void check_port(struct report *r, int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (s < 0) {
		add(r, WARN, "port", NULL, "cannot create a socket: %s", strerror(errno));
		return;
	}
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&a, sizeof(a)))
		add(r, WARN, "port", "stop what listens there, or start atlas-serve with --port N",
		    "port %d is in use (%s)", port, strerror(errno));
	else
		add(r, OK, "port", NULL, "port %d is free", port);
	close(s);
}

static void check_memory(struct report *r, int n_gpus)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
		if (rl.rlim_cur == RLIM_INFINITY)
			add(r, OK, "memlock", NULL, "ulimit -l is unlimited");
		else if (n_gpus)
			add(r, WARN, "memlock", "raise it: ulimit -l unlimited, or memlock in "
			    "/etc/security/limits.conf",
			    "ulimit -l is %llu KiB: pinned host memory for GPU transfers is limited",
			    (unsigned long long)rl.rlim_cur / 1024);
		else
			add(r, OK, "memlock", NULL, "ulimit -l is %llu KiB (matters only with a GPU)",
			    (unsigned long long)rl.rlim_cur / 1024);
	}
	char *text = NULL;
	size_t len;
	if (atlas_file_read("/sys/kernel/mm/transparent_hugepage/enabled", &text, &len) == 0) {
		char *a = strchr(text, '['), *b = a ? strchr(a, ']') : NULL;
		if (a && b) {
			*b = '\0';
			if (!strcmp(a + 1, "never"))
				add(r, WARN, "huge pages", "echo madvise > /sys/kernel/mm/"
				    "transparent_hugepage/enabled (as root)",
				    "transparent huge pages are off: large weight mappings fault more");
			else
				add(r, OK, "huge pages", NULL, "transparent huge pages: %s", a + 1);
		}
		free(text);
	}
	atlas_error_clear();
}

int main(int argc, char **argv)
{
	struct report r = {.checks = json_object_new_array(), .gpus = json_object_new_array()};
	struct atlas_gpu_info gpus[MAX_GPUS];
	const char *model = NULL;
	int port = 8888, c;

	cmd_name = "atlas-doctor";
	while ((c = getopt_long(argc, argv, "m:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': model = optarg; break;
		case OPT_PORT: port = (int)cmd_parse_int("--port", optarg, 1, 65535); break;
		case OPT_JSON: r.json = true; break;
		case 'h': fputs(usage_text, stdout); exit(0);
		case 'V': cmd_print_version(); exit(0);
		default: fprintf(stderr, "Try 'atlas-doctor --help' for more information.\n"); exit(2);
		}
	}
	if (optind < argc)
		cmd_usage_error("unexpected argument '%s'", argv[optind]);

	int n = check_gpus(&r, gpus);
	check_cuda(&r, n);
	check_kernels(&r, gpus, n);
	check_nccl(&r, n);
	check_p2p(&r, n);
	check_cpu(&r);
	check_cache(&r);
	if (model)
		check_model(&r, model);
	check_port(&r, port);
	check_memory(&r, n);

	if (r.json) {
		struct json_object *j = json_object_new_object();
		json_object_object_add(j, "ok", json_object_new_boolean(r.n[PROBLEM] == 0));
		json_object_object_add(j, "problems", json_object_new_int(r.n[PROBLEM]));
		json_object_object_add(j, "warnings", json_object_new_int(r.n[WARN]));
		json_object_object_add(j, "gpus", r.gpus);
		json_object_object_add(j, "checks", r.checks);
		puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN |
							  JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(j);
	} else {
		printf("%d problem%s, %d warning%s\n", r.n[PROBLEM], r.n[PROBLEM] == 1 ? "" : "s",
		       r.n[WARN], r.n[WARN] == 1 ? "" : "s");
		json_object_put(r.checks);
		json_object_put(r.gpus);
	}
	return r.n[PROBLEM] ? 1 : 0;
}
