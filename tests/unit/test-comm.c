/* test-comm.c - the communication layer: world-1 no-ops, thread ranks
 * (all-reduce exactly equal to the serial sum in rank order, argument
 * mismatches failing on every rank), the TCP rendezvous between forked
 * processes, and the NCCL loader on a machine without NCCL. */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "../../lib/comm/comm.h"
#include "../../lib/core/error.h"
#include "harness.h"

static void test_single(void)
{
	struct atlas_comm *c = atlas_comm_single_new();
	CHECK(c != NULL);
	if (!c)
		return;
	CHECK_STR(c->name, "single");
	CHECK_EQ_INT(c->rank, 0);
	CHECK_EQ_INT(c->world, 1);
	float x[3] = { 1.5f, -2.0f, 3.25f };
	CHECK_EQ_INT(c->all_reduce_sum(c, x, 3, ATLAS_DTYPE_F32, NULL), 0);
	CHECK(x[0] == 1.5f && x[1] == -2.0f && x[2] == 3.25f);
	CHECK_EQ_INT(c->broadcast(c, x, sizeof(x), 0, NULL), 0);
	CHECK(x[0] == 1.5f && x[2] == 3.25f);
	CHECK_EQ_INT(c->broadcast(c, x, sizeof(x), 1, NULL), ATLAS_EINVAL);
	CHECK_EQ_INT(c->barrier(c), 0);
	c->destroy(c);

	/* the NCCL constructor with one rank never loads NCCL */
	setenv("ATLAS_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
	c = atlas_comm_nccl_new(NULL, 0, 1, NULL, NULL);
	CHECK(c != NULL);
	if (c) {
		CHECK_STR(c->name, "single");
		c->destroy(c);
	}
	unsetenv("ATLAS_NCCL_LIB");
	CHECK(atlas_comm_nccl_new(NULL, 1, 1, NULL, NULL) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "rank 1");
}

/* Input value of element i of rank r in call `call`: magnitudes spread
 * over many binades so that the order of additions changes the bits. */
static float input(int r, int64_t i, int call)
{
	uint32_t h = (uint32_t)(r * 7919 + call * 104729) ^ (uint32_t)i * 2654435761u;
	h ^= h >> 15;
	h *= 2246822519u;
	h ^= h >> 13;
	float mant = (float)(h & 0xffff) / 65536.0f - 0.5f;
	return ldexpf(mant, (int)((h >> 16) % 24) - 8);
}

static const int64_t sizes[] = { 1, 2, 7, 1023, 4099 };
#define N_SIZES 5
#define N_REPEAT 3

/* The reference: the sum in rank order, as comm.h promises. */
static float serial_sum(int world, int64_t i, int call, enum atlas_dtype dt)
{
	float acc = 0;
	for (int r = 0; r < world; r++) {
		float v = input(r, i, call);
		if (dt == ATLAS_DTYPE_BF16)
			v = atlas_bf16_to_f32(atlas_f32_to_bf16(v));
		acc = r ? acc + v : v;
	}
	return dt == ATLAS_DTYPE_BF16 ? atlas_bf16_to_f32(atlas_f32_to_bf16(acc)) : acc;
}

/* What one thread rank does and what it found. */
struct rank_job {
	struct atlas_comm *c; /* its communicator */
	int rc;               /* first failing return code */
	int64_t wrong;        /* elements that differ from serial_sum */
	int64_t calls;        /* collectives that returned 0 */
};

static void *rank_main(void *arg)
{
	struct rank_job *j = arg;
	struct atlas_comm *c = j->c;
	int call = 0;
	for (int rep = 0; rep < N_REPEAT; rep++)
		for (int s = 0; s < N_SIZES; s++)
			for (int d = 0; d < 2; d++, call++) {
				enum atlas_dtype dt = d ? ATLAS_DTYPE_BF16 : ATLAS_DTYPE_F32;
				int64_t n = sizes[s];
				float *f = malloc((size_t)n * sizeof(float));
				uint16_t *h = (uint16_t *)f;
				for (int64_t i = 0; i < n; i++) {
					if (d)
						h[i] = atlas_f32_to_bf16(input(c->rank, i, call));
					else
						f[i] = input(c->rank, i, call);
				}
				int rc = c->all_reduce_sum(c, f, n, dt, NULL);
				if (rc && !j->rc)
					j->rc = rc;
				if (!rc)
					j->calls++;
				for (int64_t i = 0; i < n; i++) {
					float got = d ? atlas_bf16_to_f32(h[i]) : f[i];
					if (memcmp(&got, &(float){ serial_sum(c->world, i, call, dt) }, 4))
						j->wrong++;
				}
				free(f);
			}
	return NULL;
}

static void run_threads(int world, struct rank_job *jobs, void *(*fn)(void *))
{
	pthread_t t[8];
	for (int r = 0; r < world; r++)
		pthread_create(&t[r], NULL, fn, &jobs[r]);
	for (int r = 0; r < world; r++)
		pthread_join(t[r], NULL);
}

static void test_threads_all_reduce(void)
{
	/* the reference must depend on order, or the test proves nothing */
	int differs = 0;
	for (int64_t i = 0; i < 4099; i++) {
		float fwd = input(0, i, 0) + input(1, i, 0) + input(2, i, 0);
		float rev = input(2, i, 0) + input(1, i, 0) + input(0, i, 0);
		differs += fwd != rev;
	}
	CHECK(differs > 0);

	for (int world = 2; world <= 4; world++) {
		struct atlas_comm *comms[4];
		struct rank_job jobs[4] = { 0 };
		CHECK_EQ_INT(atlas_comm_threads_new(world, comms), 0);
		for (int r = 0; r < world; r++) {
			CHECK_STR(comms[r]->name, "threads");
			CHECK_EQ_INT(comms[r]->rank, r);
			CHECK_EQ_INT(comms[r]->world, world);
			jobs[r].c = comms[r];
		}
		run_threads(world, jobs, rank_main);
		for (int r = 0; r < world; r++) {
			CHECK_EQ_INT(jobs[r].rc, 0);
			CHECK_EQ_INT(jobs[r].wrong, 0);
			CHECK_EQ_INT(jobs[r].calls, N_REPEAT * N_SIZES * 2);
			comms[r]->destroy(comms[r]);
		}
	}
}

/* A backend that the thread ranks cannot reach (only its name matters). */
static struct atlas_backend fake_cuda = { .name = "cuda" };

/* Rank 2 asks for one element more; rank 1 then passes device memory;
 * then all agree, and the group still works. */
static void *mismatch_main(void *arg)
{
	struct rank_job *j = arg;
	struct atlas_comm *c = j->c;
	float x[6] = { 1, 2, 3, 4, 5, 6 };
	int rc1 = c->all_reduce_sum(c, x, c->rank == 2 ? 6 : 5, ATLAS_DTYPE_F32, NULL);
	int ok1 = rc1 == ATLAS_EINVAL && strstr(atlas_errmsg(), "rank 2") &&
		  strstr(atlas_errmsg(), "6") && x[0] == 1;
	int rc2 = c->all_reduce_sum(c, x, 5, ATLAS_DTYPE_F32, c->rank == 1 ? &fake_cuda : NULL);
	int ok2 = rc2 == ATLAS_EINVAL && strstr(atlas_errmsg(), "'cuda'") &&
		  strstr(atlas_errmsg(), "rank 1");
	int rc3 = c->all_reduce_sum(c, x, 5, ATLAS_DTYPE_I32, NULL);
	int ok3 = rc3 == ATLAS_EINVAL && strstr(atlas_errmsg(), "I32");
	int rc4 = c->all_reduce_sum(c, x, 5, ATLAS_DTYPE_F32, NULL);
	int ok4 = rc4 == 0 && x[0] == 3 && x[4] == 15 && x[5] == 6;
	j->wrong = !ok1 + !ok2 + !ok3 + !ok4;
	return NULL;
}

static void test_threads_mismatch(void)
{
	struct atlas_comm *comms[3];
	struct rank_job jobs[3] = { 0 };
	CHECK_EQ_INT(atlas_comm_threads_new(3, comms), 0);
	for (int r = 0; r < 3; r++)
		jobs[r].c = comms[r];
	run_threads(3, jobs, mismatch_main);
	for (int r = 0; r < 3; r++) {
		CHECK_EQ_INT(jobs[r].wrong, 0);
		comms[r]->destroy(comms[r]);
	}
	CHECK_EQ_INT(atlas_comm_threads_new(0, comms), ATLAS_EINVAL);
	CHECK_EQ_INT(atlas_comm_threads_new(300, comms), ATLAS_EINVAL);
}

static int arrived; /* ranks past the first step of bcast_main */
static pthread_mutex_t arrived_mu = PTHREAD_MUTEX_INITIALIZER;

static void *bcast_main(void *arg)
{
	struct rank_job *j = arg;
	struct atlas_comm *c = j->c;
	unsigned char b[1001];
	for (int i = 0; i < 1001; i++)
		b[i] = (unsigned char)(c->rank == 2 ? i * 7 + 1 : 0);
	int rc = c->broadcast(c, b, sizeof(b), 2, NULL);
	for (int i = 0; i < 1001; i++)
		j->wrong += b[i] != (unsigned char)(i * 7 + 1);
	pthread_mutex_lock(&arrived_mu);
	arrived++;
	pthread_mutex_unlock(&arrived_mu);
	rc |= c->barrier(c);
	pthread_mutex_lock(&arrived_mu);
	j->wrong += arrived != c->world; /* nobody leaves the barrier early */
	pthread_mutex_unlock(&arrived_mu);
	rc |= c->barrier(c);
	/* a bad root fails on every rank */
	j->rc = rc;
	j->calls = c->broadcast(c, b, 4, c->world, NULL) == ATLAS_EINVAL;
	return NULL;
}

static void test_threads_broadcast_barrier(void)
{
	struct atlas_comm *comms[4];
	struct rank_job jobs[4] = { 0 };
	CHECK_EQ_INT(atlas_comm_threads_new(4, comms), 0);
	for (int r = 0; r < 4; r++)
		jobs[r].c = comms[r];
	arrived = 0;
	run_threads(4, jobs, bcast_main);
	for (int r = 0; r < 4; r++) {
		CHECK_EQ_INT(jobs[r].rc, 0);
		CHECK_EQ_INT(jobs[r].wrong, 0);
		CHECK_EQ_INT(jobs[r].calls, 1);
		comms[r]->destroy(comms[r]);
	}
}

static void test_fingerprint_diff(void)
{
	char out[512];
	CHECK_EQ_INT(atlas_fingerprint_diff("model=q;dtype=bf16;tp=2", 0,
					    ";tp=2;model=q;;dtype=bf16", 3, out, sizeof(out)), 0);
	CHECK_STR(out, "");
	CHECK_EQ_INT(atlas_fingerprint_diff("model=q;dtype=bf16;tp=2", 0, "model=q;dtype=f16;tp=2",
					    2, out, sizeof(out)), 1);
	CHECK_STR(out, "dtype: rank 0 has 'bf16', rank 2 has 'f16'");
	CHECK_EQ_INT(atlas_fingerprint_diff("a=1;b=2", 0, "a=1;c=", 1, out, sizeof(out)), 2);
	CHECK_STR(out, "b: rank 0 has '2', rank 1 has nothing; c: rank 0 has nothing, rank 1 has ''");
	/* a tiny buffer is cut, still terminated */
	CHECK_EQ_INT(atlas_fingerprint_diff("a=1", 0, "a=2", 1, out, 8), 1);
	CHECK_EQ_INT((int)strlen(out), 7);
}

/* --- rendezvous between forked processes --------------------------- */

/* A free TCP port on 127.0.0.1 (the kernel's choice). */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(fd, (struct sockaddr *)&a, &l)) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	close(fd);
	return ntohs(a.sin_port);
}

/* One process of a rendezvous test and what it reported. */
struct proc {
	int rank, world;         /* its flags */
	const char *fp;          /* its fingerprint */
	int delay_ms;            /* sleep before starting */
	int rc;                  /* atlas_rendezvous's answer */
	unsigned char id[ATLAS_COMM_ID_BYTES]; /* the blob it ended with */
	char msg[1024];          /* its error message */
	double secs;             /* how long it took */
};

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fork one process per entry, each running atlas_rendezvous against
 * 127.0.0.1:port, and collect their results through pipes. */
static void run_procs(struct proc *p, int n, int port, double timeout)
{
	pid_t pid[8];
	int fd[8];
	for (int i = 0; i < n; i++) {
		int pp[2];
		if (pipe(pp)) {
			CHECK(!"pipe");
			return;
		}
		pid[i] = fork();
		if (pid[i] == 0) {
			close(pp[0]);
			struct proc r = p[i];
			if (r.delay_ms)
				usleep((useconds_t)r.delay_ms * 1000);
			for (int k = 0; k < ATLAS_COMM_ID_BYTES; k++)
				r.id[k] = r.rank == 0 ? (unsigned char)(k * 3 + 11) : 0;
			struct atlas_rendezvous_opts o = {
				.rank = r.rank, .world = r.world, .master_addr = "127.0.0.1",
				.master_port = port, .timeout_s = timeout, .fingerprint = r.fp,
			};
			double t0 = mono();
			r.rc = atlas_rendezvous(&o, r.id, sizeof(r.id));
			r.secs = mono() - t0;
			snprintf(r.msg, sizeof(r.msg), "%s", r.rc ? atlas_errmsg() : "");
			ssize_t w = write(pp[1], &r, sizeof(r));
			_exit(w == (ssize_t)sizeof(r) ? 0 : 1);
		}
		close(pp[1]);
		fd[i] = pp[0];
	}
	for (int i = 0; i < n; i++) {
		int st = 0;
		CHECK(read(fd[i], &p[i], sizeof(p[i])) == (ssize_t)sizeof(p[i]));
		close(fd[i]);
		waitpid(pid[i], &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
}

#define FP "model=Qwen/Qwen3-8B;dtype=bf16;tp=2;pp=1;spec=none"

static void test_rendezvous_ok(void)
{
	int port = free_port();
	CHECK(port > 0);
	/* rank 0 comes last: the others must retry until it listens */
	struct proc p[3] = {
		{ .rank = 1, .world = 3, .fp = FP },
		{ .rank = 2, .world = 3, .fp = "spec=none;tp=2;pp=1;dtype=bf16;model=Qwen/Qwen3-8B" },
		{ .rank = 0, .world = 3, .fp = FP, .delay_ms = 300 },
	};
	run_procs(p, 3, port, 5.0);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ_INT(p[i].rc, 0);
		CHECK_STR(p[i].msg, "");
		int same = 1;
		for (int k = 0; k < ATLAS_COMM_ID_BYTES; k++)
			same &= p[i].id[k] == (unsigned char)(k * 3 + 11);
		CHECK(same);
	}
	/* world 1 needs no network */
	struct atlas_rendezvous_opts o = { .rank = 0, .world = 1 };
	CHECK_EQ_INT(atlas_rendezvous(&o, NULL, 0), 0);
	o.rank = 1;
	CHECK_EQ_INT(atlas_rendezvous(&o, NULL, 0), ATLAS_EINVAL);
	o = (struct atlas_rendezvous_opts){ .rank = 1, .world = 2, .master_addr = "127.0.0.1" };
	CHECK_EQ_INT(atlas_rendezvous(&o, NULL, 0), ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "port 0");
}

static void test_rendezvous_mismatch(void)
{
	int port = free_port();
	struct proc p[3] = {
		{ .rank = 0, .world = 3, .fp = FP },
		{ .rank = 1, .world = 3, .fp = FP },
		{ .rank = 2, .world = 3, .fp = "model=Qwen/Qwen3-8B;dtype=f16;tp=2;pp=1;spec=none" },
	};
	run_procs(p, 3, port, 5.0);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ_INT(p[i].rc, ATLAS_EINVAL);
		CHECK_CONTAINS(p[i].msg, "dtype: rank 0 has 'bf16', rank 2 has 'f16'");
		CHECK(p[i].secs < 4.0);
		int zero = 1;
		for (int k = 0; i > 0 && k < ATLAS_COMM_ID_BYTES; k++)
			zero &= p[i].id[k] == 0;
		CHECK(zero); /* no id handed out */
	}
	/* a world size that differs */
	port = free_port();
	struct proc q[2] = {
		{ .rank = 0, .world = 2, .fp = FP },
		{ .rank = 1, .world = 3, .fp = FP },
	};
	run_procs(q, 2, port, 5.0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ_INT(q[i].rc, ATLAS_EINVAL);
		CHECK_CONTAINS(q[i].msg, "world size: rank 0 has 2, rank 1 has 3");
	}
}

static void test_rendezvous_no_master(void)
{
	int port = free_port();
	char where[64];
	snprintf(where, sizeof(where), "rank 0 at 127.0.0.1:%d", port);
	struct proc p[2] = {
		{ .rank = 1, .world = 3, .fp = FP },
		{ .rank = 2, .world = 3, .fp = FP },
	};
	run_procs(p, 2, port, 2.0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ_INT(p[i].rc, ATLAS_EIO);
		CHECK_CONTAINS(p[i].msg, where);
		CHECK_CONTAINS(p[i].msg, "within 2 s");
		CHECK(p[i].secs >= 1.9 && p[i].secs < 3.5);
	}
	/* rank 0 alone: it gives up and names the missing ranks */
	port = free_port();
	struct proc q[2] = {
		{ .rank = 0, .world = 3, .fp = FP },
		{ .rank = 2, .world = 3, .fp = FP },
	};
	run_procs(q, 2, port, 1.0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ_INT(q[i].rc, ATLAS_EIO);
		CHECK_CONTAINS(q[i].msg, "rank 1 never came");
	}
}

/* --- the NCCL loader ------------------------------------------------ */

static void test_nccl_loader(void)
{
	setenv("ATLAS_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
	unsetenv("NCCL_NVLS_ENABLE");
	CHECK_EQ_INT(atlas_comm_nccl_load(), ATLAS_ENOTFOUND);
	CHECK_CONTAINS(atlas_errmsg(), "cannot load '/nonexistent/libnccl.so.2'");
	CHECK_STR(getenv("NCCL_NVLS_ENABLE"), "0");
	/* a library that is not NCCL */
	setenv("ATLAS_NCCL_LIB", "libm.so.6", 1);
	CHECK_EQ_INT(atlas_comm_nccl_load(), ATLAS_ENOTFOUND);
	CHECK_CONTAINS(atlas_errmsg(), "'libm.so.6' has no 'ncclGetVersion'");
	unsetenv("ATLAS_NCCL_LIB");

	uint8_t id[ATLAS_COMM_ID_BYTES] = { 0 };
	int v = 0;
	if (atlas_comm_nccl_load() == 0) {
		/* a machine with NCCL: it loads and answers; forming a world of
		 * 2 would wait for a second rank, so stop here */
		CHECK_EQ_INT(atlas_comm_nccl_version(&v), 0);
		CHECK(v >= 21000);
		return;
	}
	CHECK_CONTAINS(atlas_errmsg(), "libnccl.so.2");
	CHECK_EQ_INT(atlas_comm_nccl_version(&v), ATLAS_ENOTFOUND);
	CHECK_EQ_INT(atlas_comm_nccl_unique_id(id), ATLAS_ENOTFOUND);
	struct atlas_backend *be = atlas_backend_cpu_new();
	CHECK(be != NULL);
	CHECK(atlas_comm_nccl_new(id, 0, 2, be, NULL) == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "cannot load 'libnccl.so.2'");
	if (be)
		be->destroy(be);
}

int main(void)
{
	RUN(test_single);
	RUN(test_threads_all_reduce);
	RUN(test_threads_mismatch);
	RUN(test_threads_broadcast_barrier);
	RUN(test_fingerprint_diff);
	RUN(test_rendezvous_ok);
	RUN(test_rendezvous_mismatch);
	RUN(test_rendezvous_no_master);
	RUN(test_nccl_loader);
	return harness_done();
}
