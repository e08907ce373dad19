/* SPDX-License-Identifier: MIT */
/*
 * The same-host upgrade of the default wire (util/tcp/tcp_shm.c): two
 * processes on this host (the test and a fork()ed peer) move their
 * messages onto shared-memory rings, over loopback TCP and over both kinds
 * of Unix address; sizes 0 B to 64 MiB both ways, 100,000 messages in
 * order (also sent in bursts), 8 concurrent senders, a peer SIGKILLed
 * mid-message, a peer that scribbles on the rings, a peer of another
 * user, a peer in another network namespace, ZAP_SHM, and raw
 * side-channel requests that lie
 * (bad descriptors, unsealed or wrong-sized memory, foreign nonces).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "log-capture.h"
#include "zap-test.h"

#define BIG (64u << 20)

/* ---- endpoints ---------------------------------------------------------- */

static int ep_try(const char *listen, struct zap_transport **t)
{
	struct zap_attr a = { .size = sizeof(a), .listen = listen,
			      .max_msg_size = BIG };
	return zap_pick("=default", 0, &a, t);
}

static struct zap_transport *ep(const char *listen, char *addr)
{
	struct zap_transport *t = NULL;
	int r = ep_try(listen, &t);
	if (r)
		fprintf(stderr, "zap_pick(%s): %s\n", listen, zap_last_error());
	assert_int_equal(r, 0);
	if (addr)
		assert_int_equal(zap_transport_address(t, addr, ZAP_PEER_MAX), 0);
	return t;
}

static struct zap_msg *recv_in(struct zap_transport *t, unsigned ms, int *err)
{
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, ms * 1000000ull);
	*err = zap_recv(t, ctx, &m);
	zap_ctx_free(ctx);
	return m;
}

static struct zap_msg *recv_ok(struct zap_transport *t)
{
	int r;
	struct zap_msg *m = recv_in(t, 30000, &r);
	if (r)
		fprintf(stderr, "zap_recv: %s (%s)\n", zap_strerror(r), zap_last_error());
	assert_int_equal(r, 0);
	return m;
}

static void path_is(struct zap_transport *t, const char *peer, const char *want)
{
	char p[16] = "";
	int r = zap_peer_path(t, peer, p, sizeof(p));
	if (r || strcmp(p, want))
		fprintf(stderr, "path to %s: %d \"%s\", want \"%s\"\n", peer, r, p, want);
	assert_int_equal(r, 0);
	assert_string_equal(p, want);
}

/* ---- the peer process --------------------------------------------------- */

/* In a child: checks that exit with a code instead of cmocka's jumps. */
#define CK(cond)                                                              \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "peer: %s:%d: %s (%s)\n", __FILE__,   \
				__LINE__, #cond, zap_last_error());           \
			_exit(3);                                             \
		}                                                             \
	} while (0)

static struct zap_transport *child_ep(const char *listen)
{
	struct zap_transport *t = NULL;
	CK(ep_try(listen, &t) == 0);
	return t;
}

static struct zap_msg *child_recv(struct zap_transport *t)
{
	struct zap_msg *m = NULL;
	struct zap_ctx *ctx;
	CK(zap_ctx_new(&ctx) == 0);
	zap_ctx_set_timeout(ctx, 60ull * 1000000000u);
	CK(zap_recv(t, ctx, &m) == 0);
	zap_ctx_free(ctx);
	return m;
}

/*
 * Start the peer @name (a child_* function, see peers[] by main()) with
 * @arg in a new process: fork and exec this program, so that the peer
 * starts with no thread and no endpoint of ours (ThreadSanitizer cannot
 * follow a fork of a threaded process, and the peer should be a stranger).
 */
static pid_t peer_start(const char *name, const char *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/proc/self/exe", "test-tcp-shm", "--peer", name, arg, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void peer_wait(pid_t pid)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fprintf(stderr, "peer status 0x%x\n", st);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static const size_t sizes[] = { 0, 1, 7, 64, 4095, 4096, 65536, 1u << 20,
				(3u << 20) + 5, (24u << 20) + 3, BIG };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Every size to the server, which echoes it; then check the path. */
static void child_sizes(const char *server)
{
	struct zap_transport *t = child_ep("127.0.0.1:0");
	unsigned char *buf = malloc(BIG);
	CK(buf);
	for (size_t i = 0; i < NSIZES; i++) {
		zt_fill(buf, sizes[i], i + 1);
		CK(zap_send(t, server, buf, sizes[i], NULL) == 0);
		struct zap_msg *m = child_recv(t);
		CK(zap_msg_len(m) == sizes[i]);
		CK(zt_check_fill(zap_msg_data(m), sizes[i], i + 100) == sizes[i]);
		zap_msg_release(m);
	}
	char p[16];
	CK(zap_peer_path(t, server, p, sizeof(p)) == 0 && !strcmp(p, "shm"));
	free(buf);
	zap_close(t);
}

static void serve_sizes(struct zap_transport *s)
{
	unsigned char *buf = malloc(BIG);
	assert_non_null(buf);
	for (size_t i = 0; i < NSIZES; i++) {
		struct zap_msg *m = recv_ok(s);
		assert_int_equal(zap_msg_len(m), sizes[i]);
		assert_int_equal(zt_check_fill(zap_msg_data(m), sizes[i], i + 1), sizes[i]);
		char peer[ZAP_PEER_MAX];
		snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
		zap_msg_release(m);
		zt_fill(buf, sizes[i], i + 100);
		assert_int_equal(zap_send(s, peer, buf, sizes[i], NULL), 0);
		if (i == NSIZES - 1)
			path_is(s, peer, "shm");
	}
	free(buf);
}

static void test_sizes_tcp(void **state)
{
	char sa[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	pid_t pid = peer_start("sizes", sa);
	serve_sizes(s);
	peer_wait(pid);
	zap_close(s);
}

/* Both Unix forms: the credentials stay the identity (peer_id). */
static void test_sizes_unix(void **state)
{
	char sa[ZAP_PEER_MAX], dir[64], path[128];
	(void)state;
	assert_non_null(zt_mkdtemp(dir, sizeof(dir), "shm"));
	snprintf(path, sizeof(path), "unix:%s/s.sock", dir);
	const char *addrs[] = { path, "unix:@zap-shm-test-abstract" };
	for (int k = 0; k < 2; k++) {
		struct zap_transport *s = ep(addrs[k], sa);
		pid_t pid = peer_start("sizes", sa);
		serve_sizes(s);
		peer_wait(pid);
		zap_close(s);
	}
	zt_rmtree(dir);
}

/* ---- order, and concurrent senders -------------------------------------- */

#define NORDER 100000u
#define NTHREADS 8
#define PER_THREAD 5000u

static void child_order(const char *server)
{
	struct zap_transport *t = child_ep("127.0.0.1:0");
	for (uint32_t i = 0; i < NORDER; i++)
		CK(zap_send(t, server, &i, sizeof(i), NULL) == 0);
	zap_msg_release(child_recv(t)); /* the server's "done" */
	zap_close(t);
}

/* Receive the numbers @from to @to - 1, in order, and the child's peer
 * string; then check the path, say "done" and reap the child @pid. */
static void recv_numbers(struct zap_transport *s, uint32_t from, uint32_t to, pid_t pid)
{
	char peer[ZAP_PEER_MAX];
	for (uint32_t i = from; i < to; i++) {
		struct zap_msg *m = recv_ok(s);
		uint32_t v;
		assert_int_equal(zap_msg_len(m), sizeof(v));
		memcpy(&v, zap_msg_data(m), sizeof(v));
		if (v != i)
			fail_msg("message %u arrived as number %u", v, i);
		if (i == from)
			snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
		zap_msg_release(m);
	}
	path_is(s, peer, "shm");
	assert_int_equal(zap_send(s, peer, "done", 4, NULL), 0);
	peer_wait(pid);
}

static void test_order_100k(void **state)
{
	char sa[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	pid_t pid = peer_start("order", sa);
	recv_numbers(s, 0, NORDER, pid);
	zap_close(s);
}

/*
 * zap_send_burst() onto the rings: 64 messages of 256 KiB to a server that
 * does not read yet (the 2 MiB ring fills, so the first burst returns
 * early, having waited only for its first message), then 100,000 small
 * messages in bursts of 64, in order.
 */
#define NBURST_BIG 64u
#define BURST_BIG (256u << 10)

static int burst_all(struct zap_transport *t, const char *server,
		     const struct zap_iov *v, unsigned n)
{
	int first = 0;
	for (unsigned i = 0; i < n;) {
		int k = zap_send_burst(t, server, v + i, n - i, NULL);
		CK(k > 0);
		if (!i)
			first = k;
		i += (unsigned)k;
	}
	return first;
}

static void child_burst(const char *server)
{
	struct zap_transport *t = child_ep("127.0.0.1:0");
	unsigned char *big = malloc((size_t)NBURST_BIG * BURST_BIG);
	struct zap_iov v[NBURST_BIG];
	uint32_t nums[NBURST_BIG];
	CK(big);
	CK(zap_send(t, server, "hi", 2, NULL) == 0);
	zap_msg_release(child_recv(t)); /* "go": connected, upgraded */
	for (unsigned i = 0; i < NBURST_BIG; i++) {
		v[i] = (struct zap_iov){ big + (size_t)i * BURST_BIG, BURST_BIG };
		zt_fill(big + (size_t)i * BURST_BIG, BURST_BIG, i + 1);
	}
	int first = burst_all(t, server, v, NBURST_BIG);
	fprintf(stderr, "# first burst took %d of %u\n", first, NBURST_BIG);
	CK(first >= 1 && first < (int)NBURST_BIG);
	for (uint32_t i = 0; i < NORDER; i += NBURST_BIG) {
		for (unsigned j = 0; j < NBURST_BIG; j++) {
			nums[j] = i + j;
			v[j] = (struct zap_iov){ &nums[j], sizeof(nums[j]) };
		}
		burst_all(t, server, v, NBURST_BIG);
	}
	zap_msg_release(child_recv(t)); /* the server's "done" */
	char p[16];
	CK(zap_peer_path(t, server, p, sizeof(p)) == 0 && !strcmp(p, "shm"));
	free(big);
	zap_close(t);
}

static void test_burst(void **state)
{
	char sa[ZAP_PEER_MAX], peer[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	pid_t pid = peer_start("burst", sa);
	struct zap_msg *m = recv_ok(s);
	snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
	zap_msg_release(m);
	assert_int_equal(zap_send(s, peer, "go", 2, NULL), 0);
	usleep(300000); /* the child fills the ring meanwhile */
	for (unsigned i = 0; i < NBURST_BIG; i++) {
		m = recv_ok(s);
		assert_int_equal(zap_msg_len(m), BURST_BIG);
		assert_int_equal(zt_check_fill(zap_msg_data(m), BURST_BIG, i + 1), BURST_BIG);
		zap_msg_release(m);
	}
	recv_numbers(s, 0, ((NORDER + NBURST_BIG - 1) / NBURST_BIG) * NBURST_BIG, pid);
	zap_close(s);
}

struct sender {
	struct zap_transport *t;
	const char *server;
	uint32_t id;
};

static void *send_thread(void *arg)
{
	struct sender *x = arg;
	unsigned char buf[300];
	for (uint32_t i = 0; i < PER_THREAD; i++) {
		uint32_t h[2] = { x->id, i };
		size_t len = sizeof(h) + (i * 37u) % (sizeof(buf) - sizeof(h));
		memset(buf, (int)(x->id + i), sizeof(buf));
		memcpy(buf, h, sizeof(h));
		CK(zap_send(x->t, x->server, buf, len, NULL) == 0);
	}
	return NULL;
}

static void child_senders(const char *server)
{
	struct zap_transport *t = child_ep("127.0.0.1:0");
	pthread_t th[NTHREADS];
	struct sender x[NTHREADS];
	for (uint32_t k = 0; k < NTHREADS; k++) {
		x[k] = (struct sender){ t, server, k };
		CK(pthread_create(&th[k], NULL, send_thread, &x[k]) == 0);
	}
	for (int k = 0; k < NTHREADS; k++)
		pthread_join(th[k], NULL);
	zap_msg_release(child_recv(t));
	zap_close(t);
}

static void test_eight_senders(void **state)
{
	char sa[ZAP_PEER_MAX], peer[ZAP_PEER_MAX] = "";
	uint32_t next[NTHREADS] = { 0 };
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	pid_t pid = peer_start("senders", sa);
	for (unsigned n = 0; n < NTHREADS * PER_THREAD; n++) {
		struct zap_msg *m = recv_ok(s);
		const unsigned char *d = zap_msg_data(m);
		uint32_t h[2];
		assert_true(zap_msg_len(m) >= sizeof(h));
		memcpy(h, d, sizeof(h));
		assert_true(h[0] < NTHREADS);
		assert_int_equal(h[1], next[h[0]]);
		next[h[0]]++;
		assert_int_equal(zap_msg_len(m), sizeof(h) + (h[1] * 37u) % (300 - sizeof(h)));
		for (size_t i = sizeof(h); i < zap_msg_len(m); i++)
			assert_int_equal(d[i], (unsigned char)(h[0] + h[1]));
		snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
		zap_msg_release(m);
	}
	path_is(s, peer, "shm");
	assert_int_equal(zap_send(s, peer, "done", 4, NULL), 0);
	peer_wait(pid);
	zap_close(s);
}

/* ---- peers that die or scribble ----------------------------------------- */

/* Three small messages, then one far larger than the ring: the send
 * stops mid-message (nobody reads), where the parent kills us. A byte on
 * this pipe says the big one starts. */
static int started[2];

static void child_dies_mid_message(const char *server)
{
	struct zap_transport *t = child_ep("127.0.0.1:0");
	unsigned char *buf = calloc(1, 48u << 20);
	CK(buf);
	for (uint32_t i = 0; i < 3; i++)
		CK(zap_send(t, server, &i, sizeof(i), NULL) == 0);
	CK(write(atoi(getenv("ZT_STARTED_FD")), "s", 1) == 1);
	zap_send(t, server, buf, 48u << 20, NULL);
	_exit(4); /* not reached: killed */
}

/* After a peer's end, a new peer is served at once, over shm. */
static void served(struct zap_transport *s, const char *sa)
{
	pid_t pid = peer_start("sizes", sa);
	serve_sizes(s);
	peer_wait(pid);
}

static void test_sigkill_mid_message(void **state)
{
	char sa[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	zt_log_clear();
	assert_int_equal(pipe(started), 0);
	char fdtext[16];
	snprintf(fdtext, sizeof(fdtext), "%d", started[1]);
	setenv("ZT_STARTED_FD", fdtext, 1);
	pid_t pid = peer_start("dies", sa);
	char b;
	assert_int_equal(read(started[0], &b, 1), 1);
	close(started[0]);
	close(started[1]);
	/* Let it fill the ring with part of the big one; nobody reads. */
	zt_sleep_ms(300);
	kill(pid, SIGKILL);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	for (uint32_t i = 0; i < 3; i++) {
		struct zap_msg *m = recv_ok(s);
		uint32_t v;
		assert_int_equal(zap_msg_len(m), sizeof(v));
		memcpy(&v, zap_msg_data(m), sizeof(v));
		assert_int_equal(v, i);
		zap_msg_release(m);
	}
	/* The partial message is dropped, said so, and nothing else comes. */
	int r;
	struct zap_msg *m = recv_in(s, 500, &r);
	assert_null(m);
	assert_int_equal(r, -ETIMEDOUT);
	assert_true(zt_log_wait("closed mid-message", 5000));
	served(s, sa);
	zap_close(s);
}

/* Overwrite the rings' positions in every shared region we map. */
static void scribble(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	CK(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (!strstr(line, "memfd:zap-shm") || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		unsigned char *p = (unsigned char *)lo;
		memset(p + 64, 0xa5, 128); /* head, sleeping, tail... */
		n++;
	}
	fclose(f);
	CK(n == 2);
}

static void child_scribbles(const char *server)
{
	struct zap_transport *t = child_ep("127.0.0.1:0");
	CK(zap_send(t, server, "one", 3, NULL) == 0);
	zap_msg_release(child_recv(t)); /* the server read it: both rings up */
	scribble();
	/* The server drops us: our connection ends. */
	struct zap_msg *m = NULL;
	struct zap_ctx *ctx;
	CK(zap_ctx_new(&ctx) == 0);
	zap_ctx_set_timeout(ctx, 2000000000ull);
	zap_recv(t, ctx, &m);
	zap_ctx_free(ctx);
	zap_close(t);
}

static void test_scribbler(void **state)
{
	char sa[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	zt_log_clear();
	pid_t pid = peer_start("scribbles", sa);
	struct zap_msg *m = recv_ok(s);
	assert_int_equal(zap_msg_len(m), 3);
	char peer[ZAP_PEER_MAX];
	snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
	zap_msg_release(m);
	assert_int_equal(zap_send(s, peer, "ack", 3, NULL), 0);
	/* Reading finds the ring broken: that connection goes, with a reason. */
	int r;
	m = recv_in(s, 1000, &r);
	assert_null(m);
	assert_true(zt_log_wait("broke the shared-memory ring", 5000));
	peer_wait(pid);
	served(s, sa);
	zap_close(s);
}

/* ---- who may share memory ----------------------------------------------- */

static void child_other_user(const char *server)
{
	CK(setgid(65534) == 0 && setuid(65534) == 0);
	struct zap_transport *t = child_ep("127.0.0.1:0");
	CK(zap_send(t, server, "hello", 5, NULL) == 0);
	struct zap_msg *m = child_recv(t);
	CK(zap_msg_len(m) == 5);
	zap_msg_release(m);
	char p[16];
	CK(zap_peer_path(t, server, p, sizeof(p)) == 0 && !strcmp(p, "tcp"));
	zap_close(t);
}

static void test_two_users(void **state)
{
	char sa[ZAP_PEER_MAX], peer[ZAP_PEER_MAX];
	(void)state;
	if (geteuid() != 0)
		skip(); /* needs root to become another user */
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	pid_t pid = peer_start("other-user", sa);
	struct zap_msg *m = recv_ok(s);
	snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
	zap_msg_release(m);
	assert_int_equal(zap_send(s, peer, "howdy", 5, NULL), 0);
	path_is(s, peer, "tcp");
	peer_wait(pid);
	zap_close(s);
}

/* At most 16 connections of an endpoint hold rings (two 2 MiB regions
 * each): the 17th peer stays on TCP, and is served all the same. */
static void test_ring_cap(void **state)
{
	char sa[ZAP_PEER_MAX];
	struct zap_transport *c[17];
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	for (int i = 0; i < 17; i++) {
		c[i] = ep("127.0.0.1:0", NULL);
		assert_int_equal(zap_send(c[i], sa, "x", 1, NULL), 0);
		zap_msg_release(recv_ok(s));
		path_is(c[i], sa, i < 16 ? "shm" : "tcp");
	}
	for (int i = 0; i < 17; i++)
		zap_close(c[i]);
	zap_close(s);
}

static void test_env(void **state)
{
	char aa[ZAP_PEER_MAX], ba[ZAP_PEER_MAX];
	struct zap_transport *t = NULL;
	(void)state;
	setenv("ZAP_SHM", "sometimes", 1);
	assert_int_equal(ep_try("127.0.0.1:0", &t), -EINVAL);
	assert_non_null(strstr(zap_last_error(), "ZAP_SHM"));
	/* off: two endpoints of one process stay on TCP; default: shm. */
	const char *vals[] = { "off", "group", "" };
	const char *want[] = { "tcp", "shm", "shm" };
	for (int k = 0; k < 3; k++) {
		setenv("ZAP_SHM", vals[k], 1);
		struct zap_transport *a = ep("127.0.0.1:0", aa), *b = ep("127.0.0.1:0", ba);
		assert_int_equal(zap_send(a, ba, "x", 1, NULL), 0);
		struct zap_msg *m = recv_ok(b);
		zap_msg_release(m);
		path_is(a, ba, want[k]);
		zap_close(a);
		zap_close(b);
	}
	unsetenv("ZAP_SHM");
}

/* ---- another network namespace ------------------------------------------ */

/* The veth pair lives in the host's namespace while the test runs: a
 * subnet of its own per process (10.202.x.y/30 from the pid), so that a
 * run beside another, or an interface a killed run left behind, never
 * takes its address; and a teardown that removes the pair on every path. */
static char ns_name[32], ns_addr_a[32], ns_addr_b[32];
static int ns_id = -1;

static void child_in_netns(const char *server)
{
	char path[64];
	snprintf(path, sizeof(path), "/run/netns/%s", getenv("ZT_NETNS"));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CK(fd >= 0 && setns(fd, CLONE_NEWNET) == 0);
	char me[48];
	snprintf(me, sizeof(me), "%s:0", getenv("ZT_NETNS_ADDR"));
	struct zap_transport *t = child_ep(me);
	CK(zap_send(t, server, "over veth", 9, NULL) == 0);
	zap_msg_release(child_recv(t));
	char p[16];
	CK(zap_peer_path(t, server, p, sizeof(p)) == 0 && !strcmp(p, "tcp"));
	zap_close(t);
}

static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

/* A peer in another namespace reaches us over TCP (a veth pair); its
 * abstract socket names are its namespace's, so it never upgrades. */
static void test_other_netns(void **state)
{
	char sa[ZAP_PEER_MAX], peer[ZAP_PEER_MAX];
	(void)state;
	snprintf(ns_name, sizeof(ns_name), "zapshm%d", (int)getpid());
	setenv("ZT_NETNS", ns_name, 1);
	if (geteuid() != 0 ||
	    sh("ip netns add %s 2>/dev/null && ip link add zs%da type veth peer name zs%db "
	       "2>/dev/null",
	       ns_name, (int)getpid() % 10000, (int)getpid() % 10000)) {
		sh("ip netns del %s 2>/dev/null", ns_name);
		fprintf(stderr, "skip: needs root and ip netns / veth\n");
		skip();
	}
	int id = (int)getpid() % 10000;
	char me[48];
	ns_id = id;
	snprintf(ns_addr_a, sizeof(ns_addr_a), "10.202.%d.%d", id / 64, id % 64 * 4 + 1);
	snprintf(ns_addr_b, sizeof(ns_addr_b), "10.202.%d.%d", id / 64, id % 64 * 4 + 2);
	setenv("ZT_NETNS_ADDR", ns_addr_b, 1);
	assert_int_equal(sh("ip link set zs%db netns %s && ip addr add %s/30 dev zs%da && "
			    "ip link set zs%da up && ip -n %s addr add %s/30 dev zs%db && "
			    "ip -n %s link set zs%db up && ip -n %s link set lo up",
			    id, ns_name, ns_addr_a, id, id, ns_name, ns_addr_b, id, ns_name,
			    id, ns_name),
			 0);
	snprintf(me, sizeof(me), "%s:0", ns_addr_a);
	struct zap_transport *s = ep(me, sa);
	pid_t pid = peer_start("netns", sa);
	struct zap_msg *m = recv_ok(s);
	assert_int_equal(zap_msg_len(m), 9);
	snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
	zap_msg_release(m);
	assert_int_equal(zap_send(s, peer, "back", 4, NULL), 0);
	path_is(s, peer, "tcp");
	peer_wait(pid);
	zap_close(s);
}

static int netns_teardown(void **state)
{
	(void)state;
	if (ns_id >= 0)
		sh("ip link del zs%da 2>/dev/null; ip netns del %s 2>/dev/null", ns_id, ns_name);
	ns_id = -1;
	return 0;
}

/* ---- raw side-channel requests that lie --------------------------------- */

static void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static void put_be64(unsigned char *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

/* A raw dialer: a HELLO with @nonce; returns the socket and the
 * acceptor's instance id from its answer. */
static int raw_hello(const char *addr, uint64_t nonce, uint64_t *id)
{
	const char *me = "127.0.0.1:9";
	unsigned char p[128], r[256];
	size_t al = strlen(me), n = 16 + 24 + al, got = 0;
	put_be32(p, 0x5a415057u);
	p[4] = 2;
	p[5] = 1;
	p[6] = p[7] = 0;
	put_be64(p + 8, 24 + al);
	put_be64(p + 16, 0x1234567890abcdefull);
	put_be64(p + 24, nonce);
	put_be64(p + 32, 1u << 20);
	memcpy(p + 40, me, al);

	const char *colon = strrchr(addr, ':');
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)atoi(colon + 1)) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
	struct timeval tv = { .tv_sec = 10 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (got < 40 || got < 16 + (size_t)r[15]) {
		ssize_t k = recv(fd, r + got, sizeof(r) - got, 0);
		assert_true(k > 0);
		got += (size_t)k;
	}
	*id = 0;
	for (int i = 0; i < 8; i++)
		*id = *id << 8 | r[16 + i];
	return fd;
}

static int side_connect(uint64_t id)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int k = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "zap-shm-%016llx",
			 (unsigned long long)id);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sun,
				 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
					     (size_t)k)),
			 0);
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

struct req {
	uint32_t magic, log2;
	uint64_t nonce;
};

static void side_send(int fd, const void *msg, size_t len, const int *fds, int nfd)
{
	struct iovec iov = { (void *)msg, len };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfd) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.b;
		mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfd * sizeof(int));
	}
	assert_int_equal(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)len);
}

/* The answer to a request: 1 with a descriptor, 0 refused (closed). */
static int side_answer(int fd, int *got)
{
	struct req a;
	struct iovec iov = { &a, sizeof(a) };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof(u.b) };
	ssize_t k = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	*got = -1;
	if (k <= 0)
		return 0;
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(got, CMSG_DATA(c), sizeof(int));
	return a.magic == 0x5a534131u && k == sizeof(a) && *got >= 0;
}

/* A ring region as the wire lays it out: @seal, @len, @header. */
static int region(size_t len, bool seal, bool header)
{
	int fd = memfd_create("zap-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	if (header) {
		unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		assert_true(p != MAP_FAILED);
		uint64_t magic = 0x31524d485350415aull;
		uint32_t v = 1, l2 = 21;
		memcpy(p, &magic, 8);
		memcpy(p + 8, &v, 4);
		memcpy(p + 12, &l2, 4);
		munmap(p, len);
	}
	if (seal)
		assert_int_equal(fcntl(fd, F_ADD_SEALS,
				       F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
				 0);
	return fd;
}

static void test_hostile_requests(void **state)
{
	char sa[ZAP_PEER_MAX];
	const size_t len = 192 + (2u << 20);
	const uint64_t nonce = 0x0badc0ffee0ddf00ull;
	uint64_t id;
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	int tcp = raw_hello(sa, nonce, &id);
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	int good = region(len, true, true);
	struct {
		const char *what;
		struct req r;
		int fds[3];
		int nfd;
	} bad[] = {
		{ "garbage", { 0x41414141u, 21, nonce }, { good }, 1 },
		{ "no descriptor", { 0x5a535131u, 21, nonce }, { 0 }, 0 },
		{ "a pipe", { 0x5a535131u, 21, nonce }, { pfd[0] }, 1 },
		{ "unsealed", { 0x5a535131u, 21, nonce }, { region(len, false, true) }, 1 },
		{ "wrong size", { 0x5a535131u, 21, nonce }, { region(len / 2, true, true) }, 1 },
		{ "no ring header", { 0x5a535131u, 21, nonce }, { region(len, true, false) }, 1 },
		{ "another size", { 0x5a535131u, 22, nonce }, { good }, 1 },
		{ "foreign nonce", { 0x5a535131u, 21, nonce + 1 }, { good }, 1 },
		{ "three descriptors", { 0x5a535131u, 21, nonce }, { good, good, pfd[1] }, 3 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int fd = side_connect(id), got;
		side_send(fd, &bad[i].r, sizeof(bad[i].r), bad[i].fds, bad[i].nfd);
		if (side_answer(fd, &got))
			fail_msg("answered a request with %s", bad[i].what);
		if (got >= 0)
			close(got);
		close(fd);
	}
	/* Told the truth, it answers: a sealed region of the agreed size. */
	int fd = side_connect(id), got;
	struct req ok = { 0x5a535131u, 21, nonce };
	side_send(fd, &ok, sizeof(ok), &good, 1);
	assert_int_equal(side_answer(fd, &got), 1);
	struct stat st;
	assert_int_equal(fstat(got, &st), 0);
	assert_int_equal((size_t)st.st_size, len);
	int seals = fcntl(got, F_GET_SEALS);
	assert_true((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW));
	/* A second request for the same connection is refused. */
	int fd2 = side_connect(id), got2;
	side_send(fd2, &ok, sizeof(ok), &good, 1);
	assert_int_equal(side_answer(fd2, &got2), 0);
	close(fd2);
	close(got);
	close(fd);
	close(tcp);
	close(good);
	close(pfd[0]);
	close(pfd[1]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (bad[i].fds[0] != good && bad[i].nfd == 1 && bad[i].fds[0] != pfd[0])
			close(bad[i].fds[0]);
	/* And a real peer is still served. */
	served(s, sa);
	zap_close(s);
}

static const struct {
	const char *name;
	void (*fn)(const char *arg);
} peers[] = {
	{ "sizes", child_sizes },	    { "order", child_order },
	{ "senders", child_senders },	    { "dies", child_dies_mid_message },
	{ "scribbles", child_scribbles },   { "other-user", child_other_user },
	{ "netns", child_in_netns },	    { "burst", child_burst },
};

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "--peer")) {
		for (size_t i = 0; i < sizeof(peers) / sizeof(peers[0]); i++)
			if (!strcmp(argv[2], peers[i].name)) {
				peers[i].fn(argv[3]);
				return 0;
			}
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_tcp),
		cmocka_unit_test(test_sizes_unix),
		cmocka_unit_test(test_order_100k),
		cmocka_unit_test(test_burst),
		cmocka_unit_test(test_eight_senders),
		cmocka_unit_test(test_sigkill_mid_message),
		cmocka_unit_test(test_scribbler),
		cmocka_unit_test(test_two_users),
		cmocka_unit_test(test_ring_cap),
		cmocka_unit_test(test_env),
		cmocka_unit_test_teardown(test_other_netns, netns_teardown),
		cmocka_unit_test(test_hostile_requests),
	};
	signal(SIGPIPE, SIG_IGN);
	zap_set_log_handler(zt_log_capture, NULL);
	zap_set_log_level(ZAP_LOG_INFO);
	if (getenv("ZT_TEST_FILTER")) /* one test, when debugging */
		cmocka_set_test_filter(getenv("ZT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
