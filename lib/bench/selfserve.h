/* selfserve.h - atlas-bench serve --self: atlas-serve started as a child
 * process on a free 127.0.0.1 port, waited for until /health says 200,
 * and stopped afterwards. */
#ifndef ATLAS_BENCH_SELFSERVE_H
#define ATLAS_BENCH_SELFSERVE_H

#include <stdint.h>
#include <sys/types.h>

struct atlas_selfserve {
	pid_t pid;              /* the server, 0 when not running */
	int port;               /* its port */
	char url[64];           /* "http://127.0.0.1:PORT" */
	char log[256];          /* its stderr, a temporary file */
};

/* The program `name` in the folder of the running executable (malloc'd),
 * or NULL with a message. */
char *atlas_selfserve_sibling(const char *name);

/* Start `exe` with `args` (NULL-terminated, --port added here) and wait
 * up to timeout_s for /health to answer 200. 0, or a negative code with
 * a message quoting the end of the server's log. */
int atlas_selfserve_start(struct atlas_selfserve *s, const char *exe, const char *const *args,
			  int64_t timeout_s);

/* SIGTERM, wait, remove the log. */
void atlas_selfserve_stop(struct atlas_selfserve *s);

#endif
