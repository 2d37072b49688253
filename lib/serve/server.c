/* server.c - atlas-serve's life cycle: bind and answer at once, load the
 * model in the engine thread (which then owns it and runs the
 * scheduler); shut down gracefully (stop accepting, let requests in
 * flight finish, then end the rest with errors, never with a normal
 * finish), stop and unload. See server.h. Also the parse-only server of
 * the request fuzzer. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../core/error.h"
#include "../core/log.h"
#include "../engine/session.h"
#include "serve_internal.h"

int atlas_serve_http_start(struct atlas_server *s, const struct sockaddr *addr, bool v6);

/* Open the model through the engine session (tokenizer, defaults, EOS
 * set, backend or thread ranks, model, scheduler); the server keeps
 * shortcuts to its parts. A request's tokens must not depend on what it
 * was batched with, so the backend runs batch-invariant. */
static int load(struct atlas_server *s)
{
	struct atlas_session_params sp;
	atlas_session_default_params(&sp);
	sp.model_dir = s->model_dir;
	sp.device = s->p.device ? s->p.device : "auto";
	sp.tp = s->p.tp;
	sp.model.max_context = s->p.ctx;
	sp.model.max_seqs = s->p.max_seqs;
	sp.model.max_tokens = s->p.max_batch_tokens;
	sp.model.kv_blocks = s->p.kv_blocks;
	sp.sched_max_seqs = s->p.max_seqs;
	sp.sched_max_tokens = s->p.max_batch_tokens;
	sp.batch_invariant = true;
	sp.prefix_cache = !s->p.no_prefix_cache;
	if (!(s->ses = atlas_session_open(&sp)))
		return ATLAS_EINVAL;
	s->be = atlas_session_backend(s->ses);
	s->model = atlas_session_model(s->ses);
	s->tok = atlas_session_tok(s->ses);
	atlas_session_gen_defaults(s->ses, &s->gen_defaults);
	s->ctx = atlas_model_max_context(s->model);
	char tp_note[48] = "";
	if (s->p.tp > 1)
		snprintf(tp_note, sizeof(tp_note), " (%d tensor-parallel thread ranks)", s->p.tp);
	serve_log("model '%s' ready on %s%s: %lld-token context, %lld KV blocks of %lld tokens, "
		  "%lld sequences and %lld tokens per step, prefix cache %s",
		  s->served_name, s->be->name, tp_note, (long long)s->ctx,
		  (long long)atlas_model_kv_blocks_total(s->model),
		  (long long)atlas_model_block_size(s->model), (long long)s->p.max_seqs,
		  (long long)s->p.max_batch_tokens, s->p.no_prefix_cache ? "off" : "on");
	/* published last: stop() reads it once the state says ready */
	s->sched = atlas_session_sched(s->ses);
	return 0;
}

static void *engine_main(void *arg)
{
	struct atlas_server *s = arg;
	/* tests hold the loading state long enough to see /health say 503 */
	const char *delay = getenv("ATLAS_SERVE_TEST_LOAD_DELAY_MS");
	if (delay && atoi(delay) > 0) {
		struct timespec ts = {atoi(delay) / 1000, (long)(atoi(delay) % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	int rc = load(s);
	pthread_mutex_lock(&s->mu);
	if (rc) {
		s->state = -1;
		s->load_rc = rc;
		snprintf(s->load_err, sizeof(s->load_err), "%s", atlas_errmsg());
	} else if (s->state == 0) {
		s->state = 1;
	}
	bool run = s->state == 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (run)
		atlas_sched_run(s->sched);
	return NULL;
}

/* Resolve host:port into a socket address. */
static int resolve(const char *host, int port, struct sockaddr_storage *ss, bool *v6)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE}, *ai;
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	int e = getaddrinfo(host, ps, &hints, &ai);
	if (e)
		return atlas_error(ATLAS_EINVAL, "cannot resolve host '%s': %s", host, gai_strerror(e));
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*v6 = ai->ai_family == AF_INET6;
	freeaddrinfo(ai);
	return 0;
}

static char *base_name(const char *dir)
{
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	size_t b = n;
	while (b > 0 && dir[b - 1] != '/')
		b--;
	char *out = malloc(n - b + 1);
	if (out) {
		memcpy(out, dir + b, n - b);
		out[n - b] = '\0';
	}
	return out;
}

void atlas_server_default_params(struct atlas_server_params *p)
{
	memset(p, 0, sizeof(*p));
	p->port = 8888;
	p->device = "auto";
	p->max_connections = 8192;
	p->max_connections_per_ip = 256;
	p->timeout_s = 30;
}

/* Copies of n strings into *out; 0 or ATLAS_ENOMEM. */
static int copy_strings(const char *const *in, int n, char ***out)
{
	if (n <= 0)
		return 0;
	if (!(*out = calloc((size_t)n, sizeof(char *))))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++)
		if (!((*out)[i] = strdup(in[i])))
			return atlas_error(ATLAS_ENOMEM, "out of memory");
	return 0;
}

static void free_strings(char **v, int n)
{
	for (int i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* --allowed-origins: "scheme://host[:port]" entries (a trailing '/' is
 * dropped, as browsers send none) or "*", separated by commas. */
static int parse_origins(struct atlas_server *s, const char *list)
{
	if (!list)
		return 0;
	size_t len = strlen(list);
	for (size_t i = 0; i < len;) {
		size_t e = i;
		while (e < len && list[e] != ',')
			e++;
		size_t a = i, b = e;
		while (a < b && (list[a] == ' ' || list[a] == '\t'))
			a++;
		while (b > a && (list[b - 1] == ' ' || list[b - 1] == '\t' || list[b - 1] == '/'))
			b--;
		if (b > a) {
			char *o = strndup(list + a, b - a);
			char **v = realloc(s->origins, (size_t)(s->n_origins + 1) * sizeof(char *));
			if (!o || !v) {
				free(o);
				if (v)
					s->origins = v;
				return atlas_error(ATLAS_ENOMEM, "out of memory");
			}
			s->origins = v;
			s->origins[s->n_origins++] = o;
			if (strcmp(o, "*") && (!strstr(o, "://") || strpbrk(o, " \t\r\n")))
				return atlas_error(ATLAS_EINVAL,
						   "--allowed-origins: '%s' is not an origin "
						   "(scheme://host[:port], or *)", o);
		}
		i = e + 1;
	}
	if (!s->n_origins)
		return atlas_error(ATLAS_EINVAL, "--allowed-origins: no origin in '%s'", list);
	return 0;
}

/* The parts of a server every variant has; NULL when out of memory. */
static struct atlas_server *server_new(const struct atlas_server_params *p)
{
	struct atlas_server *s = calloc(1, sizeof(*s));
	if (!s) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	s->p = *p;
	s->created = (int64_t)time(NULL);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	serve_metrics_init(&s->metrics);
	serve_limits_init(&s->limits, p->rate_limit_rpm, p->rate_limit_tpm);
	return s;
}

struct atlas_server *atlas_server_start(const struct atlas_server_params *p)
{
	struct atlas_server *s = server_new(p);
	if (!s)
		return NULL;
	if (!s->p.host)
		s->p.host = "127.0.0.1";
	if (!s->p.max_body)
		s->p.max_body = (size_t)32 << 20;
	if (!s->p.max_seqs)
		s->p.max_seqs = 16;
	if (!s->p.max_batch_tokens)
		s->p.max_batch_tokens = 512;
	if (s->p.max_connections <= 0)
		s->p.max_connections = 8192;
	s->model_dir = strdup(p->model_dir);
	s->served_name = p->served_name ? strdup(p->served_name) : base_name(p->model_dir);
	if (!s->model_dir || !s->served_name) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		goto fail;
	}
	s->n_api_keys = p->n_api_keys > 0 ? p->n_api_keys : 0;
	if (copy_strings(p->api_keys, s->n_api_keys, &s->api_keys)) {
		if (!s->api_keys)
			s->n_api_keys = 0;
		goto fail;
	}
	if (parse_origins(s, p->allowed_origins))
		goto fail;
	if (s->p.max_batch_tokens < s->p.max_seqs) {
		atlas_error(ATLAS_EINVAL, "--max-batch-tokens (%lld) must be at least --max-seqs (%lld)",
			    (long long)s->p.max_batch_tokens, (long long)s->p.max_seqs);
		goto fail;
	}
	struct sockaddr_storage ss;
	bool v6 = false;
	if (resolve(s->p.host, s->p.port, &ss, &v6) ||
	    atlas_serve_http_start(s, (const struct sockaddr *)&ss, v6))
		goto fail;
	if (pthread_create(&s->engine, NULL, engine_main, s)) {
		atlas_error(ATLAS_ENOMEM, "cannot start the engine thread");
		goto fail;
	}
	s->engine_started = true;
	return s;
fail:
	atlas_server_stop(s);
	return NULL;
}

struct atlas_server *serve_parse_only_open(const char *model_dir)
{
	struct atlas_server_params p;
	atlas_server_default_params(&p);
	p.max_body = (size_t)32 << 20;
	struct atlas_server *s = server_new(&p);
	if (!s)
		return NULL;
	s->parse_only = true;
	s->model_dir = strdup(model_dir);
	s->served_name = strdup("parse-only");
	if (!s->model_dir || !s->served_name) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		goto fail;
	}
	struct atlas_session_params sp;
	atlas_session_default_params(&sp);
	sp.model_dir = s->model_dir;
	sp.device = "cpu";
	sp.model.max_seqs = 1;
	sp.model.max_tokens = 16;
	sp.sched_max_seqs = 1;
	sp.sched_max_tokens = 16;
	if (!(s->ses = atlas_session_open(&sp)))
		goto fail;
	s->be = atlas_session_backend(s->ses);
	s->model = atlas_session_model(s->ses);
	s->tok = atlas_session_tok(s->ses);
	atlas_session_gen_defaults(s->ses, &s->gen_defaults);
	s->ctx = atlas_model_max_context(s->model);
	s->state = 1; /* s->sched stays NULL: nothing is ever submitted */
	return s;
fail:
	atlas_server_stop(s);
	return NULL;
}

int atlas_server_port(const struct atlas_server *s)
{
	return s->port;
}

int atlas_server_wait_ready(struct atlas_server *s)
{
	pthread_mutex_lock(&s->mu);
	while (s->state == 0)
		pthread_cond_wait(&s->cv, &s->mu);
	int rc = s->state == 1 ? 0 : (s->load_rc ? s->load_rc : ATLAS_EIO);
	if (rc)
		atlas_error(rc, "%s", s->load_rc ? s->load_err : "the server is stopping");
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void atlas_server_quiesce(struct atlas_server *s)
{
	pthread_mutex_lock(&s->mu);
	bool first = !s->quiesced;
	__atomic_store_n(&s->quiesced, true, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->mu);
	if (first && s->mhd) {
		/* the pool threads stop polling the listening socket; closing it
		 * makes new connections fail at once */
		MHD_socket fd = MHD_quiesce_daemon(s->mhd);
		if (fd != MHD_INVALID_SOCKET)
			close(fd);
	}
}

int64_t atlas_server_in_flight(struct atlas_server *s)
{
	pthread_mutex_lock(&s->mu);
	int64_t n = s->n_inflight;
	pthread_mutex_unlock(&s->mu);
	return n;
}

/* How long stop waits for the replies of cut requests to go out. */
#define FLUSH_WAIT_S 2.0

/* Cut the jobs still running and wait for their workers (they see the cut
 * within one wait slice); then give their replies a moment to be sent. */
static void cut_requests(struct atlas_server *s)
{
	pthread_mutex_lock(&s->mu);
	int64_t workers = s->n_workers, inflight = s->n_inflight;
	__atomic_store_n(&s->cut, true, __ATOMIC_RELEASE);
	if (workers)
		serve_log("stopping: ending %lld running requests", (long long)workers);
	while (s->n_workers > 0)
		pthread_cond_wait(&s->cv, &s->mu);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)FLUSH_WAIT_S;
	while (s->n_inflight > 0 && pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0)
		;
	if (s->n_inflight > 0 && inflight)
		serve_log("stopping: closing %lld connections with replies unsent",
			  (long long)s->n_inflight);
	pthread_mutex_unlock(&s->mu);
}

void atlas_server_stop(struct atlas_server *s)
{
	if (!s)
		return;
	if (s->mhd) {
		atlas_server_quiesce(s);
		cut_requests(s);
	}
	pthread_mutex_lock(&s->mu);
	bool ready = s->state == 1;
	if (s->state == 0 || s->state == 1)
		s->state = 2;
	pthread_mutex_unlock(&s->mu);
	/* no request holds the engine any more */
	if (ready && s->sched)
		atlas_sched_stop(s->sched);
	if (s->engine_started) {
		/* a load in progress finishes first; it sees state 2 and does not run */
		pthread_join(s->engine, NULL);
	}
	if (s->mhd)
		MHD_stop_daemon(s->mhd);
	/* the engine thread has ended: rank 0 of a group is idle, so its
	 * followers can be stopped from here */
	atlas_session_close(s->ses);
	serve_metrics_release(&s->metrics);
	serve_limits_release(&s->limits);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s->model_dir);
	free(s->served_name);
	free_strings(s->api_keys, s->n_api_keys);
	free_strings(s->origins, s->n_origins);
	free(s);
}
