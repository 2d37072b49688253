/* rendezvous.c - the TCP meeting of the processes of a multi-process or
 * multi-node run (--rank, --world-size, --master-addr, --master-port).
 *
 * Rank 0 listens; every other rank connects (retrying until rank 0 is
 * up) and sends a hello with its rank, world size, expected blob size
 * and fingerprint. Rank 0 gathers all hellos, then judges them at once
 * and sends every connected rank the same verdict: its blob (the NCCL
 * unique id), or one message that says what differs. So a mismatch is
 * the same clear error on every rank, and every socket operation has a
 * deadline, so no rank hangs.
 *
 * Wire format, integers 32-bit big-endian:
 *   hello: magic "ATRV", version, rank, world, blob_len, fp_len, fp bytes
 *   reply: magic, status (0 ok, 1 error), len, blob or message bytes
 */
#include "comm.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "../core/error.h"
#include "../core/log.h"
#include "../core/clock.h"

#define RDV_MAGIC 0x41545256u /* "ATRV" */
#define RDV_VERSION 1u
#define RDV_MAX_FP 65536      /* bytes of a fingerprint */
#define RDV_MAX_BLOB 4096     /* bytes of the blob */
#define RDV_MSG 1000          /* bytes of a verdict message */
#define RDV_EXTRA 8           /* connections beyond world-1 kept to answer */
#define RDV_GRACE 2.0         /* seconds a rank waits for the verdict past its timeout */

/* Milliseconds left before `deadline`, for poll. */
static int left_ms(double deadline)
{
	double ms = (deadline - atlas_now()) * 1000.0;
	return ms <= 0 ? 0 : ms > 1e9 ? 1000000000 : (int)ms + 1;
}

/* Send or receive exactly len bytes before deadline: 0, or -1 with errno
 * (ETIMEDOUT, ECONNRESET for a peer that closed, or the socket's). */
static int io_all(int fd, void *buf, size_t len, double deadline, int sending)
{
	char *p = buf;
	while (len > 0) {
		struct pollfd pf = { .fd = fd, .events = sending ? POLLOUT : POLLIN };
		int pr = poll(&pf, 1, left_ms(deadline));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return -1;
		if (pr == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		ssize_t k = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (k < 0)
			return -1;
		if (k == 0) {
			errno = ECONNRESET;
			return -1;
		}
		p += k;
		len -= (size_t)k;
	}
	return 0;
}

static void put32(unsigned char *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return ntohl(v);
}

static int resolve(const char *addr, int port, int passive, struct addrinfo **res)
{
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0) };
	int e = getaddrinfo(addr, ps, &hints, res);
	if (e)
		return atlas_error(ATLAS_EINVAL, "cannot resolve master address '%s': %s", addr,
				   gai_strerror(e));
	return 0;
}

/* --- fingerprints -------------------------------------------------- */

/* One "key=value" entry of a fingerprint (entries separated by ';'). */
struct fp_entry {
	const char *k; /* key, not terminated */
	size_t kl;     /* its length */
	const char *v; /* value, not terminated ("" when there is no '=') */
	size_t vl;     /* its length */
};

/* Read the entry at *p into e and advance *p; 0 at the end. Empty
 * entries are skipped. */
static int fp_next(const char **p, struct fp_entry *e)
{
	while (**p == ';')
		(*p)++;
	if (!**p)
		return 0;
	size_t len = strcspn(*p, ";");
	const char *eq = memchr(*p, '=', len);
	e->k = *p;
	e->kl = eq ? (size_t)(eq - *p) : len;
	e->v = eq ? eq + 1 : *p + len;
	e->vl = eq ? len - e->kl - 1 : 0;
	*p += len;
	return 1;
}

/* The first entry of fp with key k (kl bytes) into e; 0 if none. */
static int fp_find(const char *fp, const char *k, size_t kl, struct fp_entry *e)
{
	while (fp_next(&fp, e))
		if (e->kl == kl && !memcmp(e->k, k, kl))
			return 1;
	return 0;
}

/* Is e the first entry of fp with its key (later repeats are ignored)? */
static int fp_first(const char *fp, const struct fp_entry *e)
{
	struct fp_entry f;
	return fp_find(fp, e->k, e->kl, &f) && f.k == e->k;
}

/* Append "key: rank ra has 'x', rank rb has 'y'" (or "nothing") to out. */
static void fp_note(char *out, size_t cap, size_t *used, const struct fp_entry *key,
		    int ra, const struct fp_entry *va, int rb, const struct fp_entry *vb)
{
	char a[200], b[200];
	if (va)
		snprintf(a, sizeof(a), "'%.*s'", (int)va->vl, va->v);
	else
		snprintf(a, sizeof(a), "nothing");
	if (vb)
		snprintf(b, sizeof(b), "'%.*s'", (int)vb->vl, vb->v);
	else
		snprintf(b, sizeof(b), "nothing");
	int k = snprintf(out + *used, cap - *used, "%s%.*s: rank %d has %s, rank %d has %s",
			 *used ? "; " : "", (int)key->kl, key->k, ra, a, rb, b);
	if (k > 0)
		*used = *used + (size_t)k >= cap ? cap - 1 : *used + (size_t)k;
}

int atlas_fingerprint_diff(const char *a, int rank_a, const char *b, int rank_b, char *out,
			   size_t cap)
{
	size_t used = 0;
	int n = 0;
	struct fp_entry e, f;
	if (cap)
		out[0] = '\0';
	if (cap < 2)
		return 0;
	for (const char *p = a; fp_next(&p, &e);) {
		if (!fp_first(a, &e))
			continue;
		int in_b = fp_find(b, e.k, e.kl, &f);
		if (!in_b || f.vl != e.vl || memcmp(f.v, e.v, e.vl)) {
			fp_note(out, cap, &used, &e, rank_a, &e, rank_b, in_b ? &f : NULL);
			n++;
		}
	}
	for (const char *p = b; fp_next(&p, &e);) {
		if (fp_first(b, &e) && !fp_find(a, e.k, e.kl, &f)) {
			fp_note(out, cap, &used, &e, rank_a, NULL, rank_b, &e);
			n++;
		}
	}
	return n;
}

/* --- rank 0 -------------------------------------------------------- */

/* One connected rank, as its hello describes it. */
struct peer {
	int fd;            /* the connection */
	int rank;          /* the rank it claims */
	int world;         /* the world size it was given */
	uint32_t blob_len; /* the blob size it expects */
	char *fp;          /* its fingerprint (malloc'd, terminated) */
};

/* Append "; "-separated text to msg (RDV_MSG bytes, *used so far). */
__attribute__((format(printf, 3, 4)))
static void add(char *msg, size_t *used, const char *fmt, ...)
{
	va_list ap;
	if (*used + 3 >= RDV_MSG)
		return;
	if (*used) {
		memcpy(msg + *used, "; ", 3);
		*used += 2;
	}
	va_start(ap, fmt);
	int k = vsnprintf(msg + *used, RDV_MSG - *used, fmt, ap);
	va_end(ap);
	if (k > 0)
		*used = *used + (size_t)k >= RDV_MSG ? RDV_MSG - 1 : *used + (size_t)k;
}

static int listen_on(const char *addr, int port, int backlog, int *out)
{
	struct addrinfo *res;
	int rc = resolve(addr, port, 1, &res), err = 0;
	if (rc)
		return rc;
	int fd = -1;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, backlog)) {
			err = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return atlas_error(ATLAS_EIO, "rank 0 cannot listen on %s:%d: %s", addr, port,
				   strerror(err));
	*out = fd;
	return 0;
}

/* Read a hello into p: 0, or -1 for a connection that is not an Atlas
 * rank of this protocol (dropped without an answer). */
static int read_hello(int fd, double deadline, struct peer *p)
{
	unsigned char h[24];
	if (io_all(fd, h, sizeof(h), deadline, 0))
		return -1;
	uint32_t fl = get32(h + 20);
	if (get32(h) != RDV_MAGIC || get32(h + 4) != RDV_VERSION || fl > RDV_MAX_FP) {
		atlas_warn("rendezvous: dropped a connection that is not an atlas rank");
		return -1;
	}
	p->rank = (int)get32(h + 8);
	p->world = (int)get32(h + 12);
	p->blob_len = get32(h + 16);
	p->fp = malloc((size_t)fl + 1);
	if (!p->fp || io_all(fd, p->fp, fl, deadline, 0)) {
		free(p->fp);
		p->fp = NULL;
		return -1;
	}
	p->fp[fl] = '\0';
	return 0;
}

/* Judge the hellos of peers[0..n) into msg; the error code, 0 if none. */
static int judge(const struct atlas_rendezvous_opts *o, size_t len, struct peer *peers, int n,
		 const char *have, double waited, char *msg)
{
	size_t used = 0;
	int code = 0;
	for (int i = 0; i < n; i++) {
		const struct peer *p = &peers[i];
		int dup = 0;
		for (int j = 0; j < i; j++)
			dup |= peers[j].rank == p->rank;
		if (p->rank < 1 || p->rank >= o->world)
			add(msg, &used, "a process claims rank %d, not in 1..%d", p->rank, o->world - 1);
		else if (dup)
			add(msg, &used, "two processes claim rank %d", p->rank);
		if (p->world != o->world)
			add(msg, &used, "world size: rank 0 has %d, rank %d has %d", o->world, p->rank,
			    p->world);
		if (p->blob_len != len)
			add(msg, &used, "rank %d expects a %u-byte id, rank 0 sends %zu", p->rank,
			    p->blob_len, len);
		char d[RDV_MSG];
		if (atlas_fingerprint_diff(o->fingerprint ? o->fingerprint : "", 0, p->fp, p->rank, d,
					   sizeof(d)))
			add(msg, &used, "flags differ: %s", d);
	}
	if (used)
		code = ATLAS_EINVAL;
	char miss[256];
	size_t mu = 0;
	int n_miss = 0;
	miss[0] = '\0';
	for (int r = 1; r < o->world; r++) {
		if (have[r])
			continue;
		if (n_miss++ < 16 && mu + 16 < sizeof(miss))
			mu += (size_t)snprintf(miss + mu, sizeof(miss) - mu, "%s%d", mu ? ", " : "", r);
	}
	if (n_miss) {
		add(msg, &used, "rank 0 waited %.3g s at %s:%d but rank%s %s%s never came", waited,
		    o->master_addr, o->master_port, n_miss > 1 ? "s" : "", miss,
		    n_miss > 16 ? ", ..." : "");
		if (!code)
			code = ATLAS_EIO;
	}
	return code;
}

/* Send one verdict: status 0 and the blob, or the code and msg. */
static void reply(int fd, int code, const void *blob, size_t len, const char *msg,
		  double deadline)
{
	unsigned char h[12];
	size_t ml = code ? strlen(msg) : len;
	put32(h, RDV_MAGIC);
	put32(h + 4, (uint32_t)code);
	put32(h + 8, (uint32_t)ml);
	if (io_all(fd, h, sizeof(h), deadline, 1) ||
	    io_all(fd, (void *)(code ? msg : blob), ml, deadline, 1))
		atlas_warn("rendezvous: cannot answer a rank: %s", strerror(errno));
}

static int serve(const struct atlas_rendezvous_opts *o, const void *blob, size_t len,
		 double start, double timeout)
{
	double deadline = start + timeout;
	int lfd = -1, max = o->world - 1 + RDV_EXTRA, n = 0, got = 0;
	int rc = listen_on(o->master_addr, o->master_port, o->world + RDV_EXTRA, &lfd);
	if (rc)
		return rc;
	struct peer *peers = calloc((size_t)max, sizeof(*peers));
	char *have = calloc((size_t)o->world, 1);
	char *msg = malloc(RDV_MSG);
	if (!peers || !have || !msg) {
		close(lfd);
		free(peers);
		free(have);
		free(msg);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	msg[0] = '\0';
	while (got < o->world - 1 && n < max) {
		struct pollfd pf = { .fd = lfd, .events = POLLIN };
		int pr = poll(&pf, 1, left_ms(deadline));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			break;
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		struct peer *p = &peers[n];
		p->fd = fd;
		double hd = atlas_now() + 5.0 < deadline ? atlas_now() + 5.0 : deadline;
		if (read_hello(fd, hd, p)) {
			close(fd);
			continue;
		}
		n++;
		if (p->rank >= 1 && p->rank < o->world && !have[p->rank]) {
			have[p->rank] = 1;
			got++;
		}
	}
	close(lfd);
	rc = judge(o, len, peers, n, have, atlas_now() - start, msg);
	double rd = atlas_now() + RDV_GRACE;
	for (int i = 0; i < n; i++) {
		reply(peers[i].fd, rc, blob, len, msg, rd);
		close(peers[i].fd);
		free(peers[i].fp);
	}
	if (rc)
		rc = atlas_error(rc, "rendezvous failed: %s", msg);
	free(peers);
	free(have);
	free(msg);
	return rc;
}

/* --- the other ranks ----------------------------------------------- */

static void nap(double deadline, double s)
{
	double left = deadline - atlas_now();
	if (left < s)
		s = left;
	if (s <= 0)
		return;
	struct timespec ts = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };
	nanosleep(&ts, NULL);
}

/* One attempt to connect to any address of res before deadline: the
 * socket, or -1 with errno. */
static int try_connect(struct addrinfo *res, double deadline)
{
	int err = ECONNREFUSED;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			return fd;
		err = errno;
		if (err == EINPROGRESS) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			int ms = left_ms(deadline);
			int pr = poll(&pf, 1, ms < 1000 ? ms : 1000);
			socklen_t sl = sizeof(err);
			if (pr > 0 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) && !err)
				return fd;
			if (pr == 0)
				err = ETIMEDOUT;
		}
		close(fd);
	}
	errno = err;
	return -1;
}

static int join(const struct atlas_rendezvous_opts *o, void *blob, size_t len, double start,
		double timeout)
{
	double deadline = start + timeout;
	const char *fp = o->fingerprint ? o->fingerprint : "";
	size_t fl = strlen(fp);
	if (fl > RDV_MAX_FP)
		return atlas_error(ATLAS_EINVAL, "fingerprint of %zu bytes (most %d)", fl, RDV_MAX_FP);
	struct addrinfo *res;
	int rc = resolve(o->master_addr, o->master_port, 0, &res), fd;
	if (rc)
		return rc;
	while ((fd = try_connect(res, deadline)) < 0) {
		int err = errno;
		if (atlas_now() >= deadline) {
			freeaddrinfo(res);
			return atlas_error(ATLAS_EIO,
					   "rank %d cannot reach rank 0 at %s:%d within %.3g s (%s): "
					   "is rank 0 running with the same --master-addr and --master-port?",
					   o->rank, o->master_addr, o->master_port, timeout, strerror(err));
		}
		nap(deadline, 0.1);
	}
	freeaddrinfo(res);
	unsigned char h[24];
	put32(h, RDV_MAGIC);
	put32(h + 4, RDV_VERSION);
	put32(h + 8, (uint32_t)o->rank);
	put32(h + 12, (uint32_t)o->world);
	put32(h + 16, (uint32_t)len);
	put32(h + 20, (uint32_t)fl);
	double vd = deadline + RDV_GRACE;
	unsigned char r[12];
	if (io_all(fd, h, sizeof(h), vd, 1) || io_all(fd, (void *)fp, fl, vd, 1) ||
	    io_all(fd, r, sizeof(r), vd, 0)) {
		int err = errno;
		close(fd);
		if (err == ETIMEDOUT)
			return atlas_error(ATLAS_EIO, "rank %d: rank 0 at %s:%d gave no answer within %.3g s",
					   o->rank, o->master_addr, o->master_port, timeout + RDV_GRACE);
		return atlas_error(ATLAS_EIO, "rank %d: lost rank 0 at %s:%d: %s", o->rank,
				   o->master_addr, o->master_port, strerror(err));
	}
	int code = (int)get32(r + 4);
	uint32_t rl = get32(r + 8);
	if (get32(r) != RDV_MAGIC || (code == 0 && rl != len) || (code && rl >= RDV_MSG)) {
		close(fd);
		return atlas_error(ATLAS_EIO, "rank %d: '%s:%d' is not an atlas rank 0", o->rank,
				   o->master_addr, o->master_port);
	}
	char msg[RDV_MSG];
	rc = io_all(fd, code ? (void *)msg : blob, rl, vd, 0);
	close(fd);
	if (rc)
		return atlas_error(ATLAS_EIO, "rank %d: lost rank 0 at %s:%d: %s", o->rank,
				   o->master_addr, o->master_port, strerror(errno));
	if (!code)
		return 0;
	msg[rl] = '\0';
	if (code >= 0 || code < ATLAS_ERANGE)
		code = ATLAS_EIO;
	return atlas_error(code, "rendezvous failed: %s", msg);
}

int atlas_rendezvous(const struct atlas_rendezvous_opts *o, void *blob, size_t len)
{
	if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
		return atlas_error(ATLAS_EINVAL, "rank %d is not in a world of %d", o->rank, o->world);
	if (o->world == 1)
		return 0;
	if (!o->master_addr || !*o->master_addr)
		return atlas_error(ATLAS_EINVAL, "a world of %d needs a master address", o->world);
	if (o->master_port < 1 || o->master_port > 65535)
		return atlas_error(ATLAS_EINVAL, "master port %d is not in 1..65535", o->master_port);
	if (len > RDV_MAX_BLOB || (len && !blob))
		return atlas_error(ATLAS_EINVAL, "rendezvous blob of %zu bytes (most %d)", len,
				   RDV_MAX_BLOB);
	if (o->world > 65536)
		return atlas_error(ATLAS_EINVAL, "world size %d is too large", o->world);
	double timeout = o->timeout_s > 0 ? o->timeout_s : 120.0;
	double start = atlas_now();
	return o->rank == 0 ? serve(o, blob, len, start, timeout)
			    : join(o, blob, len, start, timeout);
}
