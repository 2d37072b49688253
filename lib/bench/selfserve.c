/* selfserve.c - start, wait for and stop the atlas-serve of
 * `atlas-bench serve --self`. The port is one the kernel hands out for a
 * socket bound to 127.0.0.1:0, released just before the server binds it. */
#include "selfserve.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <libgen.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../core/error.h"

char *atlas_selfserve_sibling(const char *name)
{
	char exe[4096], *p = NULL;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		atlas_error(ATLAS_EIO, "cannot find the running program");
		return NULL;
	}
	exe[n] = 0;
	if (asprintf(&p, "%s/%s", dirname(exe), name) < 0)
		p = NULL;
	if (p && access(p, X_OK)) {
		atlas_error(ATLAS_ENOTFOUND, "cannot find '%s' next to atlas-bench", p);
		free(p);
		return NULL;
	}
	return p;
}

static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
	return sz * n;
}

/* HTTP status of GET url/health, 0 if no answer. */
static long health(const char *url)
{
	char u[128];
	long code = 0;
	CURL *c = curl_easy_init();
	if (!c)
		return 0;
	snprintf(u, sizeof(u), "%s/health", url);
	curl_easy_setopt(c, CURLOPT_URL, u);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 2L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	return code;
}

/* The last line of the log, for the error message. */
static void log_tail(const char *path, char *out, size_t n)
{
	FILE *f = fopen(path, "r");
	char line[512];
	snprintf(out, n, "no output");
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (line[0])
			snprintf(out, n, "%s", line);
	}
	if (f)
		fclose(f);
}

int atlas_selfserve_start(struct atlas_selfserve *s, const char *exe, const char *const *args,
			  int64_t timeout_s)
{
	const char *argv[64];
	char port[16], tail[400];
	int n = 0;
	memset(s, 0, sizeof(*s));
	if ((s->port = free_port()) < 0)
		return atlas_error(ATLAS_EIO, "cannot find a free port on 127.0.0.1");
	snprintf(port, sizeof(port), "%d", s->port);
	snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", s->port);
	/* the server's log, named by process and port (both unique right
	 * now), created exclusively so nothing else's file is reused */
	snprintf(s->log, sizeof(s->log), "%s/atlas-bench-serve-%d-%d.log",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(), s->port);
	int fd = open(s->log, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		atlas_error(ATLAS_EIO, "cannot create the log file '%s'", s->log);
		s->log[0] = 0;
		return ATLAS_EIO;
	}
	argv[n++] = exe;
	for (int i = 0; args[i] && n < 58; i++)
		argv[n++] = args[i];
	argv[n++] = "--host";
	argv[n++] = "127.0.0.1";
	argv[n++] = "--port";
	argv[n++] = port;
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid < 0) {
		close(fd);
		return atlas_error(ATLAS_EIO, "cannot fork");
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(fd, 2);
		execv(exe, (char *const *)argv);
		_exit(127);
	}
	close(fd);
	s->pid = pid;
	struct timespec t0, now, nap = {0, 50 * 1000 * 1000};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			s->pid = 0;
			log_tail(s->log, tail, sizeof(tail));
			return atlas_error(ATLAS_EIO, "atlas-serve exited before it was ready: %s",
					   tail);
		}
		if (health(s->url) == 200)
			return 0;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > timeout_s) {
			log_tail(s->log, tail, sizeof(tail));
			atlas_selfserve_stop(s);
			return atlas_error(ATLAS_EIO, "atlas-serve was not ready after %lld s: %s",
					   (long long)timeout_s, tail);
		}
		nanosleep(&nap, NULL);
	}
}

void atlas_selfserve_stop(struct atlas_selfserve *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
		s->pid = 0;
	}
	if (s->log[0])
		unlink(s->log);
	s->log[0] = 0;
}
