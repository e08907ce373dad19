/* SPDX-License-Identifier: MIT */
/*
 * The same-host upgrade of the default wire (util/tcp/tcp_shm.c): two
 * processes on this host (the test and a fork()ed peer) move their
 * messages onto shared-memory rings, over loopback TCP and over both kinds
 * of Unix address; sizes 0 B to 64 MiB both ways, 100,000 messages in
 * order (also sent in bursts), 8 concurrent senders, a peer SIGKILLed
 * mid-message, a peer that scribbles on the rings, a peer of another
 * user, a peer in another network namespace, ZAP_SHM, raw side-channel
 * messages that lie (proofs for another nonce, challenge, direction or
 * connection; bad descriptors, unsealed or wrong-sized memory), a process
 * squatting the side-channel name of a peer that does not upgrade
 * (ZAP_SHM=off, also as another user of the group under ZAP_SHM=group;
 * another network namespace), and a splicing peer.
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
#include <sys/random.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "log-capture.h"
#include "shm-side.h"
#include "shm_peer.h"
#include "shm_raw.h"
#include "zap-test.h"

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
	char sa[ZAP_PEER_MAX], dir[64], path[128], abstract[64];
	(void)state;
	assert_non_null(zt_mkdtemp(dir, sizeof(dir), "shm"));
	snprintf(path, sizeof(path), "unix:%s/s.sock", dir);
	/* This run's own: the namespace's other runs see abstract names. */
	snprintf(abstract, sizeof(abstract), "unix:@zap-shm-test-%d", (int)getpid());
	const char *addrs[] = { path, abstract };
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
	peer_greet(s, peer);
	usleep(300000); /* the child fills the ring meanwhile */
	for (unsigned i = 0; i < NBURST_BIG; i++) {
		struct zap_msg *m = recv_ok(s);
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
		memset(p + 192, 0xa5, 65536); /* the records ahead */
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

static char ns_name[32];

/* In a child: into the namespace ZT_NETNS, listening at ZT_NETNS_PEER. */
static struct zap_transport *netns_ep(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/run/netns/%s", getenv("ZT_NETNS"));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CK(fd >= 0 && setns(fd, CLONE_NEWNET) == 0);
	return child_ep(getenv("ZT_NETNS_PEER"));
}

static void child_in_netns(const char *server)
{
	struct zap_transport *t = netns_ep();
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

/* The veth pair's /30 in 10.201/16, and its device number: this run's
 * own, so that a concurrent run, or the leftovers of one that was killed,
 * routes nothing of ours (one 10.201.0.0/30 for every run did). */
static int netns_id(void)
{
	return (int)getpid() % 16384;
}

static void netns_teardown_(void)
{
	if (ns_name[0])
		sh("ip link del zs%da 2>/dev/null; ip netns del %s 2>/dev/null", netns_id(),
		   ns_name);
	ns_name[0] = '\0';
}

/* Whether or not the test passed. */
static int netns_teardown(void **state)
{
	(void)state;
	netns_teardown_();
	return 0;
}

/* A veth pair to a new network namespace (ZT_NETNS; the peer's address
 * there in ZT_NETNS_PEER, port 0), our end's address in @ours; skips
 * where that is not permitted. */
static void netns_up(char ours[40])
{
	char theirs[40];
	int id = netns_id(), net = id << 2;
	snprintf(ns_name, sizeof(ns_name), "zapshm%d", (int)getpid());
	snprintf(ours, 40, "10.201.%d.%d", net >> 8, (net & 255) + 1);
	snprintf(theirs, sizeof(theirs), "10.201.%d.%d:0", net >> 8, (net & 255) + 2);
	setenv("ZT_NETNS", ns_name, 1);
	setenv("ZT_NETNS_PEER", theirs, 1);
	if (geteuid() != 0 ||
	    sh("ip netns add %s 2>/dev/null && ip link add zs%da type veth peer name zs%db "
	       "2>/dev/null",
	       ns_name, id, id)) {
		netns_teardown_();
		fprintf(stderr, "skip: needs root and ip netns / veth\n");
		skip();
	}
	theirs[strlen(theirs) - 2] = '\0'; /* the address alone */
	assert_int_equal(sh("ip link set zs%db netns %s && ip addr add %s/30 dev zs%da && "
			    "ip link set zs%da up && ip -n %s addr add %s/30 dev zs%db && "
			    "ip -n %s link set zs%db up && ip -n %s link set lo up",
			    id, ns_name, ours, id, id, ns_name, theirs, id, ns_name, id, ns_name),
			 0);
}

/* A peer in another namespace reaches us over TCP (a veth pair); its
 * abstract socket names are its namespace's, so it never upgrades. */
/* Our endpoint on our veth end (@ours), and the child @name (*@pid) in
 * the namespace; its first message, of @len bytes, gives its *@peer. */
static struct zap_transport *netns_start(const char *name, size_t len, char ours[40],
					 char *peer, pid_t *pid)
{
	char sa[ZAP_PEER_MAX];
	netns_up(ours);
	snprintf(sa, sizeof(sa), "%s:0", ours);
	struct zap_transport *s = ep(sa, sa);
	*pid = peer_start(name, sa);
	struct zap_msg *m = recv_ok(s);
	assert_int_equal(zap_msg_len(m), len);
	snprintf(peer, ZAP_PEER_MAX, "%s", zap_msg_peer(m));
	zap_msg_release(m);
	return s;
}

static void test_other_netns(void **state)
{
	char peer[ZAP_PEER_MAX], ours[40];
	pid_t pid;
	(void)state;
	struct zap_transport *s = netns_start("netns", 9, ours, peer, &pid);
	assert_int_equal(zap_send(s, peer, "back", 4, NULL), 0);
	path_is(s, peer, "tcp");
	peer_wait(pid);
	zap_close(s);
}

/* ---- raw side-channel messages that lie (shm_raw.h) -------------------- */

static void test_hostile_requests(void **state)
{
	char sa[ZAP_PEER_MAX];
	const size_t len = SIDE_RING_BYTES;
	const uint64_t nonce = 0x0badc0ffee0ddf00ull;
	uint64_t id;
	struct side_msg m;
	unsigned char ca[32], ans[32];
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	int tcp = raw_hello(sa, nonce, &id);
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	int good = side_region(len, true, true);
	/* Requests whose proof fails, or that break the layout: no answer,
	 * no ring. */
	const struct req_case bad[] = {
		{ "garbage", 0x41414141u, 21, SIDE_REQ, 0, false, false, false, false },
		{ "a descriptor", SIDE_REQ, 21, SIDE_REQ, 0, false, false, true, false },
		{ "another ring size", SIDE_REQ, 22, SIDE_REQ, 0, false, false, false, false },
		{ "a short message", SIDE_REQ, 21, SIDE_REQ, 0, false, false, false, true },
		{ "a foreign nonce", SIDE_REQ, 21, SIDE_REQ, 1, false, false, false, false },
		{ "the acceptor's label", SIDE_REQ, 21, SIDE_ANS, 0, false, false, false,
		  false },
		{ "another challenge", SIDE_REQ, 21, SIDE_REQ, 0, true, false, false, false },
		{ "the ends swapped", SIDE_REQ, 21, SIDE_REQ, 0, false, true, false, false },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int fd = side_open(id, ca), got;
		request(fd, tcp, id, nonce, ca, &bad[i], good, ans);
		if (side_next(fd, &m, &got))
			fail_msg("answered a request with %s", bad[i].what);
		if (got >= 0)
			fail_msg("a ring for a request with %s", bad[i].what);
		close(fd);
	}
	/* Proven, then a ring that lies: no confirmation. */
	struct {
		const char *what;
		uint32_t magic;
		int fds[3];
		int nfd;
	} ring[] = {
		{ "garbage", 0x41414141u, { good }, 1 },
		{ "no descriptor", SIDE_RING, { 0 }, 0 },
		{ "a pipe", SIDE_RING, { pfd[0] }, 1 },
		{ "unsealed", SIDE_RING, { side_region(len, false, true) }, 1 },
		{ "wrong size", SIDE_RING, { side_region(len / 2, true, true) }, 1 },
		{ "no ring header", SIDE_RING, { side_region(len, true, false) }, 1 },
		{ "three descriptors", SIDE_RING, { good, good, pfd[1] }, 3 },
	};
	for (size_t i = 0; i < sizeof(ring) / sizeof(ring[0]); i++) {
		int theirs, got;
		int fd = answered(tcp, id, nonce, good, &theirs);
		close(theirs);
		struct side_msg r = { .magic = ring[i].magic, .log2 = 21 };
		assert_true(side_put(fd, &r, sizeof(r), ring[i].fds, ring[i].nfd));
		if (side_next(fd, &m, &got))
			fail_msg("confirmed a ring with %s", ring[i].what);
		close(fd);
	}
	/* Told the truth, it answers with a sealed region of the agreed
	 * size, and confirms our ring. */
	int got, got2;
	int fd = answered(tcp, id, nonce, good, &got);
	struct stat st;
	assert_int_equal(fstat(got, &st), 0);
	assert_int_equal((size_t)st.st_size, len);
	int seals = fcntl(got, F_GET_SEALS);
	assert_true((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW));
	struct side_msg r = { .magic = SIDE_RING, .log2 = 21 };
	assert_true(side_put(fd, &r, sizeof(r), &good, 1));
	assert_int_equal(side_next(fd, &m, &got2), SIDE_DONE);
	/* A second request for the same connection is refused. */
	int fd2 = side_open(id, ca);
	request(fd2, tcp, id, nonce, ca, &req_ok, good, ans);
	assert_int_equal(side_next(fd2, &m, &got2), 0);
	close(fd2);
	close(got);
	close(fd);
	close(tcp);
	close(good);
	close(pfd[0]);
	close(pfd[1]);
	for (size_t i = 0; i < sizeof(ring) / sizeof(ring[0]); i++)
		if (ring[i].nfd == 1 && ring[i].fds[0] != good && ring[i].fds[0] != pfd[0])
			close(ring[i].fds[0]);
	/* And a real peer is still served. */
	served(s, sa);
	zap_close(s);
}

/* ---- squatters and splices (issue #35) ---------------------------------- */

/* Three messages from @d to @peer, each sent (zap_send() 0). */
static void send_three(struct zap_transport *d, const char *peer)
{
	for (int i = 0; i < 3; i++) {
		char b[16];
		int n = snprintf(b, sizeof(b), "for R %d", i);
		assert_int_equal(zap_send(d, peer, b, (size_t)n, NULL), 0);
	}
}

/* ... and @r received them (over TCP: within 5 s). */
static void got_three(struct zap_transport *r)
{
	for (int i = 0; i < 3; i++) {
		int err;
		char b[16];
		struct zap_msg *m = recv_in(r, 5000, &err);
		if (err)
			fail_msg("R received %d of 3 messages (%s)", i, zap_strerror(err));
		int n = snprintf(b, sizeof(b), "for R %d", i);
		assert_int_equal(zap_msg_len(m), (size_t)n);
		assert_memory_equal(zap_msg_data(m), b, (size_t)n);
		zap_msg_release(m);
	}
}

/*
 * R has ZAP_SHM=off (so nobody holds its side-channel name); a local
 * stranger read R's instance id from its HELLO and holds
 * "@zap-shm-<R's id>". D's messages to R reach R, over TCP; the squatter
 * gets no ring (the old protocol handed it D's with its request, and so
 * everything D sent then).
 */
static void test_squatter_shm_off(void **state)
{
	char ra[ZAP_PEER_MAX];
	uint64_t id;
	struct squat q;
	(void)state;
	setenv("ZAP_SHM", "off", 1);
	struct zap_transport *r = ep("127.0.0.1:0", ra);
	unsetenv("ZAP_SHM");
	close(raw_hello(ra, 42, &id));
	squat_start(&q, id);
	struct zap_transport *d = ep("127.0.0.1:0", NULL);
	send_three(d, ra);
	got_three(r);
	path_is(d, ra, "tcp");
	int rings = squat_stop(&q);
	assert_true(q.channels >= 1); /* it was asked */
	assert_int_equal(rings, 0);
	zap_close(d);
	zap_close(r);
}

/*
 * The splice: X answers D's HELLO with the instance id of Z (another
 * process of this host), dials Z reusing D's nonce (and D's id), and
 * passes D's SHM frame on to Z. With the old protocol D's side channel
 * went to Z, whose connection from X had the nonce: D's messages to X
 * arrived at Z, labelled as X's. X runs in a thread here, raw.
 */
struct splice {
	int lfd;
	char xaddr[64], zaddr[ZAP_PEER_MAX];
	atomic_int x_data;      /* D's DATA frames that reached X */
	atomic_int shm_relayed; /* D's SHM frames X passed on to Z */
	pthread_t th;
};

static void *splice_main(void *arg)
{
	struct splice *x = arg;
	unsigned char h[512], p[128];
	int d = accept4(x->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (d < 0)
		return NULL;
	struct timeval tv = { .tv_sec = 4 };
	setsockopt(d, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	size_t n = frame_get(d, h, sizeof(h)); /* D's HELLO */
	if (n < 40) {
		close(d);
		return NULL;
	}
	uint64_t did = get_be64(h + 16), nonce = get_be64(h + 24), zid;
	int z = raw_hello_as(x->zaddr, did, nonce, &zid);
	n = hello_put(p, zid, nonce, x->xaddr);
	if (send(d, p, n, MSG_NOSIGNAL) == (ssize_t)n)
		while ((n = frame_get(d, h, sizeof(h))) > 0) {
			if (h[5] == 3 && send(z, h, n, MSG_NOSIGNAL) == (ssize_t)n)
				atomic_fetch_add(&x->shm_relayed, 1);
			if (h[5] == 2 && atomic_fetch_add(&x->x_data, 1) == 2)
				break;
		}
	close(z);
	close(d);
	return NULL;
}

static void test_splice(void **state)
{
	struct splice x = { 0 };
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sin);
	(void)state;
	struct zap_transport *z = ep("127.0.0.1:0", x.zaddr);
	inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
	x.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(x.lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(x.lfd, 4), 0);
	assert_int_equal(getsockname(x.lfd, (struct sockaddr *)&sin, &sl), 0);
	snprintf(x.xaddr, sizeof(x.xaddr), "127.0.0.1:%d", ntohs(sin.sin_port));
	assert_int_equal(pthread_create(&x.th, NULL, splice_main, &x), 0);
	struct zap_transport *d = ep("127.0.0.1:0", NULL);
	send_three(d, x.xaddr);
	pthread_join(x.th, NULL);
	int err;
	struct zap_msg *m = recv_in(z, 300, &err);
	if (m) {
		fprintf(stderr, "Z received \"%.*s\" from %s\n", (int)zap_msg_len(m),
			(const char *)zap_msg_data(m), zap_msg_peer(m));
		zap_msg_release(m);
	}
	assert_int_equal(err, -ETIMEDOUT);
	assert_int_equal(atomic_load(&x.x_data), 3);
	assert_int_equal(atomic_load(&x.shm_relayed), 0);
	close(x.lfd);
	zap_close(d);
	zap_close(z);
}

/*
 * The squatter as another user of our group, which ZAP_SHM=group lets
 * onto the side channel: it squats the name @arg (R's id, hex), says so
 * through ZT_STARTED_FD, and exits 3 s after its first side channel
 * (20 s at most): 0 asked and given no ring, 10 never asked, 20 given one.
 */
static void child_squat(const char *arg)
{
	struct squat q;
	uint64_t id = strtoull(arg, NULL, 16);
	CK(setgid(getegid()) == 0 && setuid(65534) == 0);
	squat_start(&q, id);
	CK(write(atoi(getenv("ZT_STARTED_FD")), "s", 1) == 1);
	int ms = 0, asked_ms = -1;
	while (ms < 20000 && (asked_ms < 0 || ms - asked_ms < 3000)) {
		zt_sleep_ms(50);
		ms += 50;
		if (asked_ms < 0 && atomic_load(&q.channels))
			asked_ms = ms;
	}
	int rings = squat_stop(&q);
	_exit(!q.channels ? 10 : rings ? 20 : 0);
}

static void test_squatter_other_uid(void **state)
{
	char ra[ZAP_PEER_MAX], idhex[24], fdtext[16], b;
	uint64_t id;
	(void)state;
	if (geteuid() != 0)
		skip(); /* needs root to become another user */
	setenv("ZAP_SHM", "off", 1);
	struct zap_transport *r = ep("127.0.0.1:0", ra);
	setenv("ZAP_SHM", "group", 1);
	struct zap_transport *d = ep("127.0.0.1:0", NULL);
	unsetenv("ZAP_SHM");
	close(raw_hello(ra, 42, &id));
	snprintf(idhex, sizeof(idhex), "%016llx", (unsigned long long)id);
	assert_int_equal(pipe(started), 0);
	snprintf(fdtext, sizeof(fdtext), "%d", started[1]);
	setenv("ZT_STARTED_FD", fdtext, 1);
	pid_t pid = peer_start("squat", idhex);
	assert_int_equal(read(started[0], &b, 1), 1);
	close(started[0]);
	close(started[1]);
	send_three(d, ra);
	got_three(r);
	path_is(d, ra, "tcp");
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail_msg("squatter status 0x%x (10: never asked, 20: given a ring)", st);
	zap_close(d);
	zap_close(r);
}

/* The same with R in another network namespace, where its side channel
 * is (its namespace's names are not ours): the child R greets the test,
 * receives D's three messages and says so. */
static void child_r_in_netns(const char *server)
{
	struct zap_transport *t = netns_ep();
	CK(zap_send(t, server, "R", 1, NULL) == 0);
	for (int i = 0; i < 3; i++) {
		struct zap_msg *m = child_recv(t);
		char b[16];
		int n = snprintf(b, sizeof(b), "for R %d", i);
		CK(zap_msg_len(m) == (size_t)n && !memcmp(zap_msg_data(m), b, (size_t)n));
		zap_msg_release(m);
	}
	CK(zap_send(t, server, "got 3", 5, NULL) == 0);
	zap_msg_release(child_recv(t)); /* "bye" */
	zap_close(t);
}

static void test_squatter_netns(void **state)
{
	char sa[ZAP_PEER_MAX], rpeer[ZAP_PEER_MAX], ours[40];
	uint64_t id;
	struct squat q;
	pid_t pid;
	(void)state;
	struct zap_transport *s = netns_start("r-netns", 1, ours, rpeer, &pid);
	close(raw_hello(rpeer, 42, &id));
	squat_start(&q, id);
	snprintf(sa, sizeof(sa), "%s:0", ours); /* D dials from our veth end */
	struct zap_transport *d = ep(sa, NULL);
	send_three(d, rpeer);
	int err;
	struct zap_msg *m = recv_in(s, 5000, &err);
	if (err)
		fail_msg("R did not receive D's three messages (%s)", zap_strerror(err));
	assert_int_equal(zap_msg_len(m), 5);
	zap_msg_release(m);
	path_is(d, rpeer, "tcp");
	assert_int_equal(zap_send(s, rpeer, "bye", 3, NULL), 0);
	peer_wait(pid);
	int rings = squat_stop(&q);
	assert_true(q.channels >= 1);
	assert_int_equal(rings, 0);
	zap_close(d);
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
	{ "r-netns", child_r_in_netns },   { "squat", child_squat },
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
		cmocka_unit_test(test_squatter_shm_off),
		cmocka_unit_test(test_squatter_other_uid),
		cmocka_unit_test_teardown(test_squatter_netns, netns_teardown),
		cmocka_unit_test(test_splice),
	};
	signal(SIGPIPE, SIG_IGN);
	zap_set_log_handler(zt_log_capture, NULL);
	zap_set_log_level(ZAP_LOG_INFO);
	if (getenv("ZT_SHM_DEBUG")) { /* the side channel's reasons, on stderr */
		zap_set_log_handler(NULL, NULL);
		zap_set_log_level(ZAP_LOG_DEBUG);
	}
	if (getenv("ZT_TEST_FILTER")) /* one test, when debugging */
		cmocka_set_test_filter(getenv("ZT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
