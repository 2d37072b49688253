/* server.c - atlas-serve's life cycle: bind and answer at once (the gate:
 * our listening socket, connection limits, and the first request head of
 * each connection checked before libmicrohttpd gets it), load the model
 * in the engine thread (which then owns it and runs the scheduler); shut down gracefully (stop accepting, let requests in
 * flight finish, then end the rest with errors, never with a normal
 * finish), stop and unload. See server.h. Also the parse-only server of
 * the request fuzzer. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../core/error.h"
#include "../core/log.h"
#include "../engine/grammar.h"
#include "../engine/session.h"
#include "../tok/chat.h"
#include "serve_internal.h"
#include "toolcall.h"

int atlas_serve_http_start(struct atlas_server *s);

/* What agents need from the model: its tool-call syntax (--tool-parser,
 * else detected from the chat template), whether it thinks in
 * <think>...</think> (and the markers' ids), and the vocabulary view
 * grammars are compiled against. */
static int agent_setup(struct atlas_server *s)
{
	const char *src = atlas_chat_template_source(s->tok);
	if (s->p.tool_parser) {
		int f = atlas_toolfmt_from_name(s->p.tool_parser);
		if (f < 0)
			return atlas_error(ATLAS_EINVAL,
					   "--tool-parser: unknown syntax '%s' (hermes, qwen3_coder, "
					   "llama3_json, mistral or none)", s->p.tool_parser);
		s->toolfmt = f;
	} else {
		s->toolfmt = atlas_toolfmt_detect(src, s->tok);
	}
	s->think_start = atlas_tok_lookup(s->tok, "<think>");
	s->think_end = atlas_tok_lookup(s->tok, "</think>");
	s->reasoning = atlas_reasoning_detect(src, s->tok);
	s->gvocab = atlas_grammar_vocab_new(s->tok, atlas_model_config(s->model)->vocab_size,
					    s->gen_defaults.eos_ids, s->gen_defaults.n_eos);
	if (!s->gvocab)
		return ATLAS_EINVAL;
	return serve_grammars_init(s) ? atlas_error(ATLAS_ENOMEM, "out of memory") : 0;
}

/* Open the model through the engine session (tokenizer, defaults, EOS
 * set, backend or thread ranks, model, scheduler); the server keeps
 * shortcuts to its parts. A request's tokens must not depend on what it
 * was batched with, so the backend runs batch-invariant unless
 * --no-batch-invariant trades that for speed. */
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
	sp.model.kv_dtype = s->p.kv_dtype;
	sp.sched_max_seqs = s->p.max_seqs;
	sp.sched_max_tokens = s->p.max_batch_tokens;
	sp.batch_invariant = !s->p.no_batch_invariant;
	sp.prefix_cache = !s->p.no_prefix_cache;
	sp.spec = s->p.spec;
	sp.draft_model_dir = s->p.draft_model_dir;
	if (!(s->ses = atlas_session_open(&sp)))
		return ATLAS_EINVAL;
	s->be = atlas_session_backend(s->ses);
	s->model = atlas_session_model(s->ses);
	s->tok = atlas_session_tok(s->ses);
	atlas_session_gen_defaults(s->ses, &s->gen_defaults);
	s->ctx = atlas_model_max_context(s->model);
	int rc = agent_setup(s);
	if (rc)
		return rc;
	char tp_note[48] = "";
	if (s->p.tp > 1)
		snprintf(tp_note, sizeof(tp_note), " (%d tensor-parallel thread ranks)", s->p.tp);
	serve_log("model '%s' ready on %s%s: %lld-token context, %lld KV blocks of %lld tokens "
		  "(%s), %lld sequences and %lld tokens per step, %s, prefix cache %s, speculative "
		  "%s%s%s, tool calls %s%s%s%s",
		  s->served_name, s->be->name, tp_note, (long long)s->ctx,
		  (long long)atlas_model_kv_blocks_total(s->model),
		  (long long)atlas_model_block_size(s->model),
		  serve_kv_format(s->be, s->p.kv_dtype), (long long)s->p.max_seqs,
		  (long long)s->p.max_batch_tokens,
		  s->be->batch_invariant ? "batch-invariant" : "not batch-invariant",
		  s->p.no_prefix_cache ? "off" : "on", atlas_spec_name(s->p.spec.mode),
		  s->p.spec.mode == ATLAS_SPEC_DRAFT ? " with draft model " : "",
		  s->p.spec.mode == ATLAS_SPEC_DRAFT ? s->p.draft_model_dir : "",
		  atlas_toolfmt_name(s->toolfmt), s->reasoning ? ", reasoning <think>" : "",
		  atlas_session_is_embedding(s->ses) ? ", embeddings pooled by " : "",
		  atlas_session_is_embedding(s->ses)
		      ? atlas_pooling_name(atlas_session_embed(s->ses)->pooling)
		      : "");
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
static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE}, *ai;
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	int e = getaddrinfo(host, ps, &hints, &ai);
	if (e)
		return atlas_error(ATLAS_EINVAL, "cannot resolve host '%s': %s", host, gai_strerror(e));
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
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

/* --- the gate ----------------------------------------------------------
 * The listening socket is ours, not libmicrohttpd's: a new connection
 * waits here (one thread, epoll) until the head of its first request has
 * come, which serve_head_check reads without taking it off the socket
 * (MSG_PEEK). A bad head is answered here in JSON and the connection
 * closed; a good one goes to libmicrohttpd (MHD_add_connection), which
 * reads the request from its first byte. So libmicrohttpd, which answers
 * heads it cannot parse with HTML of its own, never sees a malformed
 * first request. The gate also counts connections, in all and per client
 * address (its own and libmicrohttpd's), refuses those over the limits
 * and closes those whose head does not come within --timeout. */

#define GATE_HEAD_MAX (64 * 1024) /* bytes of a head looked at (414, 431 beyond) */
#define GATE_MAX_READS 64         /* reads before a head must be complete */
#define GATE_LINGER_S 2.0         /* a refused connection's input is drained this long */
#define GATE_IP_BUCKETS 4096

struct gate_conn {
	int fd;                       /* the socket */
	struct sockaddr_storage addr; /* the client's address */
	socklen_t addrlen;            /* its length */
	double deadline;              /* closed then (serve_now); 0 = never */
	int reads;                    /* read events so far */
	bool closing;                 /* answered: its input is drained until it closes */
	struct gate_conn *prev, *next; /* in its list, by deadline */
};

/* Connections in deadline order: every entry of a list waits as long. */
struct gate_list {
	struct gate_conn *head, *tail; /* oldest first */
};

struct gate_ip {
	unsigned char a[16];          /* the address (IPv4 as ::ffff:a.b.c.d) */
	int n;                        /* its open connections, here and in libmicrohttpd */
	struct gate_ip *next;         /* in its bucket */
};

struct serve_gate {
	int lfd;                      /* the listening socket, or -1 */
	int ep;                       /* epoll over lfd, wake and the waiting connections */
	int wake;                     /* eventfd: stop */
	pthread_t thread;             /* runs gate_main */
	bool started;                 /* thread is running */
	double paused_until;          /* accept failed (out of fds): retry then */
	struct gate_list waiting;     /* connections whose head has not come */
	struct gate_list closing;     /* refused connections, lingering */
	pthread_mutex_t mu;           /* guards ips (libmicrohttpd's threads release) */
	struct gate_ip *ips[GATE_IP_BUCKETS]; /* counts per address */
};

static void ip_key(const struct sockaddr *sa, unsigned char k[16])
{
	memset(k, 0, 16);
	if (sa->sa_family == AF_INET) {
		k[10] = k[11] = 0xff;
		memcpy(k + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(k, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

/* Count one more connection of sa's address unless it has `limit` (0 = no
 * limit) already; false when refused or out of memory. */
static bool ip_add(struct serve_gate *g, const struct sockaddr *sa, int limit)
{
	unsigned char k[16];
	ip_key(sa, k);
	uint32_t h = 2166136261u;
	for (int i = 0; i < 16; i++)
		h = (h ^ k[i]) * 16777619u;
	bool ok = true;
	pthread_mutex_lock(&g->mu);
	struct gate_ip **b = &g->ips[h % GATE_IP_BUCKETS], *e = *b;
	while (e && memcmp(e->a, k, 16))
		e = e->next;
	if (!e && (e = calloc(1, sizeof(*e)))) {
		memcpy(e->a, k, 16);
		e->next = *b;
		*b = e;
	}
	if (!e || (limit > 0 && e->n >= limit))
		ok = false;
	else
		e->n++;
	pthread_mutex_unlock(&g->mu);
	return ok;
}

static void ip_del(struct serve_gate *g, const struct sockaddr *sa)
{
	unsigned char k[16];
	ip_key(sa, k);
	uint32_t h = 2166136261u;
	for (int i = 0; i < 16; i++)
		h = (h ^ k[i]) * 16777619u;
	pthread_mutex_lock(&g->mu);
	struct gate_ip **pe = &g->ips[h % GATE_IP_BUCKETS];
	while (*pe && memcmp((*pe)->a, k, 16))
		pe = &(*pe)->next;
	if (*pe && --(*pe)->n <= 0) {
		struct gate_ip *e = *pe;
		*pe = e->next;
		free(e);
	}
	pthread_mutex_unlock(&g->mu);
}

void serve_gate_closed(struct atlas_server *s, const struct sockaddr *sa)
{
	if (s->gate && sa)
		ip_del(s->gate, sa);
	__atomic_sub_fetch(&s->n_conns, 1, __ATOMIC_RELAXED);
}

static void list_add(struct gate_list *l, struct gate_conn *c)
{
	c->next = NULL;
	c->prev = l->tail;
	if (l->tail)
		l->tail->next = c;
	else
		l->head = c;
	l->tail = c;
}

static void list_del(struct gate_list *l, struct gate_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		l->tail = c->prev;
}

/* Close c and forget it. */
static void gate_drop(struct atlas_server *s, struct gate_conn *c)
{
	struct serve_gate *g = s->gate;
	list_del(c->closing ? &g->closing : &g->waiting, c);
	close(c->fd);
	serve_gate_closed(s, (const struct sockaddr *)&c->addr);
	free(c);
}

/* Drain a refused connection's input; close it at its end. */
static void gate_drain(struct atlas_server *s, struct gate_conn *c, char *buf)
{
	ssize_t r;
	while ((r = recv(c->fd, buf, GATE_HEAD_MAX, 0)) > 0)
		;
	if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		gate_drop(s, c);
}

/* Answer c's bad head with e in JSON and close (after draining its input,
 * so that the answer is not lost to a reset). */
static void gate_refuse(struct atlas_server *s, struct gate_conn *c, enum serve_api api,
			const struct serve_err *e, char *buf)
{
	struct serve_gate *g = s->gate;
	json_object *o = serve_error_body(api, e->status, e->param, e->code, e->msg);
	const char *js = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE);
	const char *reason = MHD_get_reason_phrase_for(e->status);
	int n = snprintf(buf, GATE_HEAD_MAX,
			 "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 e->status, reason ? reason : "Error", strlen(js), js);
	json_object_put(o);
	if (n > 0 && n < GATE_HEAD_MAX)
		(void)!send(c->fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	shutdown(c->fd, SHUT_WR);
	serve_metrics_status(&s->metrics, e->status);
	list_del(&g->waiting, c);
	c->closing = true;
	c->deadline = serve_now() + GATE_LINGER_S;
	list_add(&g->closing, c);
	gate_drain(s, c, buf);
}

/* Give c to libmicrohttpd, which reads its request from the start. */
static void gate_handoff(struct atlas_server *s, struct gate_conn *c)
{
	struct serve_gate *g = s->gate;
	epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
	list_del(&g->waiting, c);
	if (MHD_add_connection(s->mhd, c->fd, (const struct sockaddr *)&c->addr, c->addrlen) !=
	    MHD_YES)
		serve_gate_closed(s, (const struct sockaddr *)&c->addr); /* it closed the socket */
	free(c);
}

/* Input on c: its head so far, or a refused one's leftovers. */
static void gate_read(struct atlas_server *s, struct gate_conn *c, uint32_t events, char *buf)
{
	if (c->closing) {
		gate_drain(s, c, buf);
		return;
	}
	ssize_t n = recv(c->fd, buf, GATE_HEAD_MAX, MSG_PEEK);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
		gate_drop(s, c); /* gone before a request */
		return;
	}
	if (n < 0)
		return;
	struct serve_err e;
	enum serve_api api;
	int rc = serve_head_check(s, buf, (size_t)n, GATE_HEAD_MAX, &api, &e);
	if (rc > 0)
		gate_handoff(s, c);
	else if (rc < 0)
		gate_refuse(s, c, api, &e, buf);
	else if (++c->reads > GATE_MAX_READS || (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
		gate_drop(s, c); /* a head in dribbles, or the client stopped sending */
}

/* Take every pending connection; refuse (close) those over the limits. */
static void gate_accept(struct atlas_server *s)
{
	struct serve_gate *g = s->gate;
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(g->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				/* out of descriptors: stop polling the socket for a moment */
				serve_log("http: cannot accept a connection: %s", strerror(errno));
				epoll_ctl(g->ep, EPOLL_CTL_DEL, g->lfd, NULL);
				g->paused_until = serve_now() + 0.1;
			}
			return;
		}
		if (__atomic_load_n(&s->n_conns, __ATOMIC_RELAXED) >= s->p.max_connections ||
		    !ip_add(g, (struct sockaddr *)&ss, s->p.max_connections_per_ip)) {
			close(fd);
			continue;
		}
		__atomic_add_fetch(&s->n_conns, 1, __ATOMIC_RELAXED);
		struct gate_conn *c = calloc(1, sizeof(*c));
		struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
		if (!c || epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev)) {
			free(c);
			close(fd);
			serve_gate_closed(s, (struct sockaddr *)&ss);
			continue;
		}
		c->fd = fd;
		c->addr = ss;
		c->addrlen = sl;
		c->deadline = s->p.timeout_s > 0 ? serve_now() + s->p.timeout_s : 0;
		list_add(&g->waiting, c);
	}
}

/* Milliseconds until the next deadline (-1: none), closing what is due. */
static int gate_expire(struct atlas_server *s)
{
	struct serve_gate *g = s->gate;
	double now = serve_now(), next = 0;
	struct gate_list *lists[2] = {&g->waiting, &g->closing};
	for (int i = 0; i < 2; i++) {
		struct gate_conn *c;
		while ((c = lists[i]->head) && c->deadline > 0 && c->deadline <= now)
			gate_drop(s, c);
		if (c && c->deadline > 0 && (next == 0 || c->deadline < next))
			next = c->deadline;
	}
	if (g->paused_until > 0) {
		if (g->paused_until <= now) {
			struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->lfd};
			epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &ev);
			g->paused_until = 0;
		} else if (next == 0 || g->paused_until < next) {
			next = g->paused_until;
		}
	}
	return next > 0 ? (int)((next - now) * 1e3) + 1 : -1;
}

static void *gate_main(void *arg)
{
	struct atlas_server *s = arg;
	struct serve_gate *g = s->gate;
	char *buf = malloc(GATE_HEAD_MAX);
	struct epoll_event ev[64];
	for (bool run = buf != NULL; run;) {
		int n = epoll_wait(g->ep, ev, 64, gate_expire(s));
		for (int i = 0; i < n && run; i++) {
			if (ev[i].data.ptr == &g->lfd)
				gate_accept(s);
			else if (ev[i].data.ptr == &g->wake)
				run = false;
			else
				gate_read(s, ev[i].data.ptr, ev[i].events, buf);
		}
	}
	/* stopping: connections without a request have nothing in flight */
	while (g->waiting.head)
		gate_drop(s, g->waiting.head);
	while (g->closing.head)
		gate_drop(s, g->closing.head);
	free(buf);
	return NULL;
}

/* Bind and listen at addr; s->port is the port. 0 or a negative ATLAS_E*. */
static int gate_open(struct atlas_server *s, const struct sockaddr *addr, socklen_t len)
{
	struct serve_gate *g = calloc(1, sizeof(*g));
	if (!g)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	g->lfd = g->ep = g->wake = -1;
	pthread_mutex_init(&g->mu, NULL);
	s->gate = g;
	int one = 1;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	g->lfd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (g->lfd < 0 || setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(g->lfd, addr, len) || listen(g->lfd, SOMAXCONN) ||
	    getsockname(g->lfd, (struct sockaddr *)&ss, &sl))
		return atlas_error(ATLAS_EIO, "cannot listen on '%s' port %d: %s", s->p.host,
				   s->p.port, strerror(errno));
	s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						 : ((struct sockaddr_in *)&ss)->sin_port);
	struct epoll_event el = {.events = EPOLLIN, .data.ptr = &g->lfd};
	struct epoll_event ew = {.events = EPOLLIN, .data.ptr = &g->wake};
	if ((g->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (g->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &el) ||
	    epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake, &ew))
		return atlas_error(ATLAS_EIO, "cannot poll: %s", strerror(errno));
	return 0;
}

static int gate_start(struct atlas_server *s)
{
	if (pthread_create(&s->gate->thread, NULL, gate_main, s))
		return atlas_error(ATLAS_ENOMEM, "cannot start the connection thread");
	s->gate->started = true;
	return 0;
}

/* Stop accepting: end the thread, close the listening socket and the
 * connections that have sent no request. Idempotent. */
static void gate_stop(struct atlas_server *s)
{
	struct serve_gate *g = s->gate;
	if (!g)
		return;
	if (g->started) {
		uint64_t one = 1;
		(void)!write(g->wake, &one, sizeof(one));
		pthread_join(g->thread, NULL);
		g->started = false;
	}
	if (g->lfd >= 0)
		close(g->lfd);
	g->lfd = -1;
}

static void gate_free(struct atlas_server *s)
{
	struct serve_gate *g = s->gate;
	if (!g)
		return;
	gate_stop(s);
	if (g->ep >= 0)
		close(g->ep);
	if (g->wake >= 0)
		close(g->wake);
	for (int i = 0; i < GATE_IP_BUCKETS; i++)
		while (g->ips[i]) {
			struct gate_ip *e = g->ips[i];
			g->ips[i] = e->next;
			free(e);
		}
	pthread_mutex_destroy(&g->mu);
	free(g);
	s->gate = NULL;
}

/* --- life cycle --------------------------------------------------------- */

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
	socklen_t sl = 0;
	if (resolve(s->p.host, s->p.port, &ss, &sl) || gate_open(s, (const struct sockaddr *)&ss, sl) ||
	    atlas_serve_http_start(s) || gate_start(s))
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
	p.tool_parser = "hermes"; /* tool choices compile their grammars too */
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
	if (agent_setup(s))
		goto fail;
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
	if (first)
		gate_stop(s); /* new connections are refused at once */
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
	gate_free(s);
	if (s->mhd)
		MHD_stop_daemon(s->mhd);
	/* the engine thread has ended: rank 0 of a group is idle, so its
	 * followers can be stopped from here */
	serve_grammars_free(s);
	atlas_grammar_vocab_free(s->gvocab);
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
