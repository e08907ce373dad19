/* SPDX-License-Identifier: MIT */
/*
 * The default (TCP) transport with two real endpoints in one process
 * (threads), each listening on 127.0.0.1 with an ephemeral port: messages
 * of every size and their order, memory reused and freed, concurrent
 * senders, replies (to a wildcard listener too), sending to ourselves, size
 * limits (ours and those agreed in the handshake), errors of addressing,
 * IPv6 and names, and garbage in the environment (each case in a child
 * process). The other concerns have files of their own (test_tcp_*.c).
 */
#include <sys/resource.h>
#include <sys/wait.h>

#include <malloc.h>

#include "tcp_ep.h"

/* ------------------------------------------------------------------------ */
/* Data                                                                      */
/* ------------------------------------------------------------------------ */

struct rx_arg {
	struct zap_transport *t;
	const size_t *sizes;
	size_t n;
	int err;
	char peer[ZAP_PEER_MAX];
};

static void *rx_sizes(void *p)
{
	struct rx_arg *a = p;
	unsigned char *want = malloc(64u << 20);
	for (size_t i = 0; i < a->n && !a->err; i++) {
		struct zap_msg *m = NULL;
		int r = zap_recv(a->t, NULL, &m);
		if (r) {
			a->err = r;
			break;
		}
		fill(want, a->sizes[i], (uint32_t)i);
		if (zap_msg_len(m) != a->sizes[i] ||
		    memcmp(zap_msg_data(m), want, a->sizes[i]) ||
		    zap_msg_device_ptr(m) != NULL ||
		    strcmp(zap_msg_peer(m), a->peer))
			a->err = -EBADMSG;
		zap_msg_release(m);
	}
	free(want);
	return NULL;
}

static void test_sizes(void **state)
{
	static const size_t sizes[] = {0, 1, 4096, 1u << 20, 64u << 20, 0, 3};
	struct zap_transport *a = ep_open(), *b = ep_open();
	struct rx_arg ra = {.t = b, .sizes = sizes, .n = 7};
	char ab[ZAP_PEER_MAX];
	unsigned char *buf = malloc(64u << 20);
	pthread_t th;
	(void)state;

	ep_addr(a, ra.peer);
	ep_addr(b, ab);
	pthread_create(&th, NULL, rx_sizes, &ra);
	for (size_t i = 0; i < 7; i++) {
		fill(buf, sizes[i], (uint32_t)i);
		send_ok(a, ab, sizes[i] ? buf : NULL, sizes[i]);
	}
	pthread_join(th, NULL);
	assert_int_equal(ra.err, 0);

	struct zap_caps caps = {.size = sizeof(caps)};
	assert_int_equal(zap_caps(a, &caps), 0);
	assert_false(caps.gpu_resident);
	assert_false(caps.zero_copy);
	assert_int_equal(caps.max_msg_size, ZAP_DEFAULT_MAX_MSG_BYTES);
	free(buf);
	zap_close(a);
	zap_close(b);
}

/*
 * Large messages reuse released memory instead of faulting fresh pages in
 * (plugins/default/default.c keeps a few released blocks; the wire grows
 * a message within one and takes a bounded amount from a ring per round):
 * without that, every 1 MiB message cost ~128 (TCP, growing) to 256 page
 * faults and streaming ran at a third of the speed. Page faults are what
 * is counted, not time: 32 messages, after a first one warmed the cache,
 * each released before the next, and a burst of 32 that the receiver
 * releases as they come; at most a quarter of their pages may fault.
 */
#define REUSE_MSG (1u << 20)
#define REUSE_N 32u

struct reuse_arg {
	struct zap_transport *t;
	unsigned n;
	atomic_uint done;
	int err;
};

static void *rx_reuse(void *p)
{
	struct reuse_arg *a = p;
	for (unsigned i = 0; i < a->n; i++) {
		struct zap_msg *m = NULL;
		int r = zap_recv(a->t, NULL, &m);
		if (r) {
			a->err = r;
			return NULL;
		}
		if (zap_msg_len(m) != REUSE_MSG ||
		    ((const unsigned char *)zap_msg_data(m))[REUSE_MSG - 1] != (unsigned char)i)
			a->err = -EBADMSG;
		zap_msg_release(m);
		atomic_fetch_add(&a->done, 1);
	}
	return NULL;
}

static long minflt(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static void reuse_case(const char *shm)
{
	setenv("ZAP_SHM", shm, 1);
	struct zap_transport *a = ep_open(), *b = ep_open();
	unsetenv("ZAP_SHM");
	struct reuse_arg ra = {.t = b, .n = 1 + 2 * REUSE_N};
	unsigned char *buf = malloc(REUSE_MSG);
	char ab[ZAP_PEER_MAX];
	pthread_t th;
	long f0, lockstep, burst;

	assert_non_null(buf);
	memset(buf, 0, REUSE_MSG); /* faulted in before counting */
	ep_addr(b, ab);
	pthread_create(&th, NULL, rx_reuse, &ra);
	send_ok(a, ab, buf, REUSE_MSG);
	while (atomic_load(&ra.done) < 1)
		usleep(100);
	f0 = minflt();
	for (unsigned i = 1; i <= REUSE_N; i++) {
		buf[REUSE_MSG - 1] = (unsigned char)i;
		send_ok(a, ab, buf, REUSE_MSG);
		while (atomic_load(&ra.done) < i + 1)
			usleep(50);
	}
	lockstep = minflt() - f0;
	f0 = minflt();
	for (unsigned i = REUSE_N + 1; i <= 2 * REUSE_N; i++) {
		buf[REUSE_MSG - 1] = (unsigned char)i;
		send_ok(a, ab, buf, REUSE_MSG);
	}
	pthread_join(th, NULL);
	burst = minflt() - f0;
	assert_int_equal(ra.err, 0);
	print_message("ZAP_SHM=%s: %ld page faults for %u x 1 MiB one at a time, %ld for a "
		      "burst of %u\n", shm, lockstep, REUSE_N, burst, REUSE_N);
#ifndef __SANITIZE_THREAD__
	assert_true(lockstep < (long)(REUSE_N * (REUSE_MSG / 4096) / 4));
	assert_true(burst < (long)(REUSE_N * (REUSE_MSG / 4096) / 4));
#else
	/* ThreadSanitizer's allocator maps and unmaps large blocks itself,
	 * so faults say nothing of ours there; the messages are still checked. */
	print_message("page faults not checked under ThreadSanitizer\n");
#endif
	free(buf);
	zap_close(a);
	zap_close(b);
}

static void test_large_reuses_memory(void **state)
{
	(void)state;
	reuse_case("off");
	reuse_case("user");
}

/*
 * What the allocator keeps is an open endpoint's cost: once the last
 * endpoint of the transport closes, released blocks are freed, and a
 * message released after that is not kept. Seen in glibc's count of
 * mapped bytes (a block of more than 32 MiB is a mapping of its own);
 * skipped at once where the allocator does not count them (sanitizers).
 */
#define KEPT_MSG (48u << 20)

static void *rx_one_release(void *p)
{
	struct reuse_arg *a = p;
	struct zap_msg *m = NULL;
	a->err = zap_recv(a->t, NULL, &m);
	if (!a->err && zap_msg_len(m) != KEPT_MSG)
		a->err = -EBADMSG;
	if (m)
		zap_msg_release(m);
	return NULL;
}

static void test_cache_freed_on_close(void **state)
{
	unsigned char *buf = calloc(1, KEPT_MSG);
	char ab[ZAP_PEER_MAX];
	pthread_t th;
	(void)state;

	assert_non_null(buf);
	if (mallinfo2().hblkhd < KEPT_MSG) {
		free(buf);
		skip(); /* the allocator does not count its mappings there */
	}
	struct zap_transport *a = ep_open(), *b = ep_open();
	struct reuse_arg ra = {.t = b, .n = 1};
	ep_addr(b, ab);
	pthread_create(&th, NULL, rx_one_release, &ra);
	send_ok(a, ab, buf, KEPT_MSG);
	pthread_join(th, NULL);
	assert_int_equal(ra.err, 0);
	free(buf);
	size_t kept = mallinfo2().hblkhd;
	zap_close(a);
	zap_close(b);
	size_t after = mallinfo2().hblkhd;
	print_message("mapped: %zu bytes with endpoints open, %zu after closing\n", kept,
		      after);
	assert_true(kept >= KEPT_MSG); /* the block was kept */
	assert_true(after + KEPT_MSG <= kept);
}

#define ORDER_N 100000u

static void *rx_order(void *p)
{
	struct rx_arg *a = p;
	for (unsigned i = 0; i < ORDER_N; i++) {
		struct zap_msg *m = NULL;
		char tag;
		unsigned x, y;
		if (zap_recv(a->t, NULL, &m)) {
			a->err = -EIO;
			return NULL;
		}
		parse_tagged(m, &tag, &x, &y);
		zap_msg_release(m);
		if (x != i) {
			a->err = -EBADMSG;
			return NULL;
		}
	}
	return NULL;
}

static void test_order_100k(void **state)
{
	struct zap_transport *a = ep_open(), *b = ep_open();
	struct rx_arg ra = {.t = b};
	char ab[ZAP_PEER_MAX];
	pthread_t th;
	(void)state;

	ep_addr(b, ab);
	pthread_create(&th, NULL, rx_order, &ra);
	for (unsigned i = 0; i < ORDER_N; i++)
		send_tagged(a, ab, 'o', i, 0);
	pthread_join(th, NULL);
	assert_int_equal(ra.err, 0);
	zap_close(a);
	zap_close(b);
}

#define NSEND 8
#define PER_SENDER 5000u

struct tx_arg {
	struct zap_transport *t;
	const char *peer;
	unsigned id;
	int err;
};

static void *tx_many(void *p)
{
	struct tx_arg *a = p;
	for (unsigned i = 0; i < PER_SENDER && !a->err; i++) {
		char buf[32];
		int n = snprintf(buf, sizeof(buf), "s %u %u", a->id, i);
		a->err = zap_send(a->t, a->peer, buf, (size_t)n, NULL);
	}
	return NULL;
}

static void test_eight_senders(void **state)
{
	/* Four threads share one transport, four have their own: concurrent
	 * senders on one connection and on several. */
	struct zap_transport *shared = ep_open(), *b = ep_open(), *own[NSEND];
	struct tx_arg ta[NSEND];
	pthread_t th[NSEND];
	unsigned next[NSEND] = {0};
	char ab[ZAP_PEER_MAX];
	(void)state;

	ep_addr(b, ab);
	for (unsigned i = 0; i < NSEND; i++) {
		own[i] = i < NSEND / 2 ? shared : ep_open();
		ta[i] = (struct tx_arg){.t = own[i], .peer = ab, .id = i};
		pthread_create(&th[i], NULL, tx_many, &ta[i]);
	}
	for (unsigned k = 0; k < NSEND * PER_SENDER; k++) {
		struct zap_msg *m = recv_ok(b);
		char tag;
		unsigned id, seq;
		parse_tagged(m, &tag, &id, &seq);
		zap_msg_release(m);
		assert_true(id < NSEND);
		/* Per-sender order means no loss and no duplicate either. */
		assert_int_equal(seq, next[id]);
		next[id]++;
	}
	for (unsigned i = 0; i < NSEND; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(ta[i].err, 0);
		assert_int_equal(next[i], PER_SENDER);
	}
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, 50 * 1000000ull);
	assert_int_equal(zap_recv(b, ctx, &m), -ETIMEDOUT);
	zap_ctx_free(ctx);
	for (unsigned i = NSEND / 2; i < NSEND; i++)
		zap_close(own[i]);
	zap_close(shared);
	zap_close(b);
}

static void test_reply(void **state)
{
	struct zap_transport *a = ep_open(), *b = ep_open();
	char aa[ZAP_PEER_MAX], ab[ZAP_PEER_MAX];
	(void)state;

	ep_addr(a, aa);
	ep_addr(b, ab);
	send_ok(a, ab, "ping", 4);
	struct zap_msg *m = recv_ok(b);
	assert_string_equal(zap_msg_peer(m), aa);
	send_ok(b, zap_msg_peer(m), "pong", 4);
	zap_msg_release(m);
	m = recv_ok(a);
	assert_int_equal(zap_msg_len(m), 4);
	assert_memory_equal(zap_msg_data(m), "pong", 4);
	assert_string_equal(zap_msg_peer(m), ab);
	zap_msg_release(m);

	/* Messages outlive the transport. */
	send_ok(a, ab, "late", 4);
	m = recv_ok(b);
	zap_close(b);
	assert_memory_equal(zap_msg_data(m), "late", 4);
	zap_msg_release(m);
	zap_close(a);
}

/* A wildcard listener advertises 0.0.0.0; the receiver substitutes the
 * connection's source address so the peer string is still replyable. */
static void test_wildcard_reply(void **state)
{
	struct zap_attr at = {.size = sizeof(at), .listen = "0.0.0.0:0"};
	struct zap_transport *a = NULL, *b = ep_open();
	char ab[ZAP_PEER_MAX], aa[ZAP_PEER_MAX];
	(void)state;

	assert_int_equal(zap_pick("=default", 0, &at, &a), 0);
	ep_addr(a, aa);
	ep_addr(b, ab);
	send_ok(a, ab, "x", 1);
	struct zap_msg *m = recv_ok(b);
	const char *port = strrchr(aa, ':');
	assert_non_null(port);
	assert_true(!strncmp(zap_msg_peer(m), "127.0.0.1:", 10));
	assert_string_equal(strrchr(zap_msg_peer(m), ':'), port);
	send_ok(b, zap_msg_peer(m), "y", 1);
	zap_msg_release(m);
	m = recv_ok(a);
	assert_memory_equal(zap_msg_data(m), "y", 1);
	zap_msg_release(m);
	zap_close(a);
	zap_close(b);
}

static void test_self_send(void **state)
{
	struct zap_transport *a = ep_open();
	char aa[ZAP_PEER_MAX];
	(void)state;

	ep_addr(a, aa);
	for (unsigned i = 0; i < 100; i++)
		send_tagged(a, aa, 's', i, 0);
	for (unsigned i = 0; i < 100; i++) {
		struct zap_msg *m = recv_ok(a);
		char tag;
		unsigned x, y;
		parse_tagged(m, &tag, &x, &y);
		assert_int_equal(x, i);
		assert_string_equal(zap_msg_peer(m), aa);
		zap_msg_release(m);
	}
	zap_close(a);
}

/* ------------------------------------------------------------------------ */
/* Errors and addresses                                                     */
/* ------------------------------------------------------------------------ */

static void test_oversize(void **state)
{
	struct zap_transport *a = ep_open_max(1024);
	char aa[ZAP_PEER_MAX];
	unsigned char buf[1025] = {0};
	(void)state;

	ep_addr(a, aa);
	int r = zap_send(a, aa, buf, 1025, NULL);
	assert_int_equal(r, -EMSGSIZE);
	assert_non_null(strstr(zap_strerror(r), "1025"));
	send_ok(a, aa, buf, 1024);
	struct zap_msg *m = recv_ok(a);
	assert_int_equal(zap_msg_len(m), 1024);
	zap_msg_release(m);

	struct zap_caps caps = {.size = sizeof(caps)};
	assert_int_equal(zap_caps(a, &caps), 0);
	assert_int_equal(caps.max_msg_size, 1024);
	zap_close(a);
}

static void test_nothing_listens(void **state)
{
	struct zap_transport *a = ep_open(), *gone = ep_open();
	char dead[ZAP_PEER_MAX];
	(void)state;

	ep_addr(gone, dead);
	zap_close(gone);
	int r = zap_send(a, dead, "x", 1, NULL);
	assert_int_equal(r, -ECONNREFUSED);
	assert_non_null(strstr(zap_strerror(r), dead));
	assert_non_null(strstr(zap_strerror(r), "nothing listens"));

	assert_int_equal(zap_send(a, "no-port", "x", 1, NULL), -EINVAL);
	assert_int_equal(zap_send(a, "1.2.3.4:99999", "x", 1, NULL), -EINVAL);
	assert_int_equal(zap_send(a, "::1:80", "x", 1, NULL), -EINVAL);
	zap_close(a);
}

static void test_ipv6_and_names(void **state)
{
	struct zap_attr at = {.size = sizeof(at), .listen = "[::1]:0"};
	struct zap_transport *a = ep_open(), *b = NULL;
	char ab[ZAP_PEER_MAX], byname[ZAP_PEER_MAX];
	(void)state;

	struct zap_msg *m;
	struct zap_transport *a6 = NULL;
	if (zap_pick("=default", 0, &at, &b) == 0) {
		/* The sender listens on IPv6 too: a HELLO's host must be the
		 * connection's source (127.0.0.1 cannot claim to be ::1). */
		assert_int_equal(zap_pick("=default", 0, &at, &a6), 0);
		ep_addr(b, ab);
		assert_true(!strncmp(ab, "[::1]:", 6));
		send_ok(a6, ab, "v6", 2);
		m = recv_ok(b);
		assert_memory_equal(zap_msg_data(m), "v6", 2);
		assert_true(!strncmp(zap_msg_peer(m), "[::1]:", 6));
		zap_msg_release(m);
		zap_close(a6);
		zap_close(b);
	} /* else: no IPv6 loopback on this host */

	/* A name: every address it resolves to is tried. */
	b = ep_open();
	ep_addr(b, ab);
	snprintf(byname, sizeof(byname), "localhost%s", strrchr(ab, ':'));
	send_ok(a, byname, "nm", 2);
	m = recv_ok(b);
	assert_memory_equal(zap_msg_data(m), "nm", 2);
	zap_msg_release(m);
	assert_int_equal(zap_send(a, "no-such-host.invalid:1", "x", 1, NULL),
			 -EHOSTUNREACH);
	zap_close(a);
	zap_close(b);
}

/* ------------------------------------------------------------------------ */
/* Environment (read once per process: each case runs in a child)            */
/* ------------------------------------------------------------------------ */

static int child_main(const char *var)
{
	struct zap_transport *t = NULL;
	zap_set_log_handler(zt_log_capture, NULL);
	int r = zap_pick("=default", 0, NULL, &t);
	if (r == -EINVAL && strstr(zap_strerror(r), var))
		return 0;
	fprintf(stderr, "%s=%s: pick returned %d (%s)\n", var, getenv(var), r,
		zap_strerror(r));
	zap_close(t);
	return 1;
}

/* A fresh process (exec, not just fork): the library reads the
 * environment once per process. */
static int child_pick(const char *var, const char *val)
{
	pid_t pid = fork();
	if (pid == 0) {
		setenv(var, val, 1);
		execl("/proc/self/exe", "test-tcp", "--child-pick", var, (char *)NULL);
		_exit(3);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

static void test_env_garbage(void **state)
{
	(void)state;
	assert_int_equal(child_pick("ZAP_LISTEN", "garbage"), 0);
	assert_int_equal(child_pick("ZAP_LISTEN", "127.0.0.1:notaport"), 0);
	assert_int_equal(child_pick("ZAP_MAX_MSG_BYTES", "lots"), 0);
	assert_int_equal(child_pick("ZAP_MAX_MSG_BYTES", "-5"), 0);
	/* Spinning: plain microseconds, 0..1000000, no suffixes. */
	assert_int_equal(child_pick("ZAP_TCP_SPIN_US", "lots"), 0);
	assert_int_equal(child_pick("ZAP_TCP_SPIN_US", "-1"), 0);
	assert_int_equal(child_pick("ZAP_TCP_SPIN_US", "1000001"), 0);
	assert_int_equal(child_pick("ZAP_TCP_SPIN_US", "99999999999999999999999"), 0);
	assert_int_equal(child_pick("ZAP_TCP_SPIN_US", "200us"), 0);
	assert_int_equal(child_pick("ZAP_TCP_SPIN_US", " 200"), 0);
	/* The trust limits: sizes (64M is one) in range. */
	assert_int_equal(child_pick("ZAP_TCP_PARTIAL_BYTES", "64X"), 0);
	assert_int_equal(child_pick("ZAP_TCP_PARTIAL_BYTES", "+64M"), 0);
	assert_int_equal(child_pick("ZAP_TCP_PARTIAL_BYTES", "1000"), 0);
	assert_int_equal(child_pick("ZAP_TCP_RX_QUEUE_BYTES", "-1"), 0);
	assert_int_equal(child_pick("ZAP_TCP_STALL_MS", "0"), 0);
	assert_int_equal(child_pick("ZAP_TCP_IDLE_MS", "forever"), 0);
	assert_int_equal(child_pick("ZAP_TCP_SAME_HOST_CC", "bbr"), 0);
	assert_int_equal(child_pick("ZAP_TCP_SAME_HOST_CC", "kept"), 0);
}

/*
 * Limits agreed in the handshake: each side announces its maximum message
 * size in its HELLO, so a message above the receiver's limit fails at the
 * sender (-EMSGSIZE, naming the peer's limit) before a byte is written,
 * and the connection and every message after it are unaffected. (Before,
 * the receiver closed the connection and the messages sent after the
 * oversize one were lost while every send returned 0.)
 */
static void test_limits_agreed(void **state)
{
	struct zap_transport *small = ep_open_max(1024), *big = ep_open();
	char as[ZAP_PEER_MAX], ab[ZAP_PEER_MAX];
	static char buf[4096];
	struct zap_msg *m;
	char tag;
	unsigned a, b;
	int r;

	(void)state;
	ep_addr(small, as);
	ep_addr(big, ab);
	send_tagged(big, as, 'a', 1, 0); /* the connection is up: limits known */
	zap_msg_release(recv_ok(small));
	r = zap_send(big, as, buf, 2048, NULL);
	assert_int_equal(r, -EMSGSIZE);
	assert_non_null(strstr(zap_strerror(r), "1024"));
	for (unsigned i = 0; i < 10; i++) /* nothing after it is lost */
		send_tagged(big, as, 'b', i, 0);
	for (unsigned i = 0; i < 10; i++) {
		m = recv_ok(small);
		parse_tagged(m, &tag, &a, &b);
		assert_int_equal(tag, 'b');
		assert_int_equal(a, i);
		zap_msg_release(m);
	}
	/* Exactly the limit goes through. */
	assert_int_equal(zap_send(big, as, buf, 1024, NULL), 0);
	m = recv_ok(small);
	assert_int_equal(zap_msg_len(m), 1024);
	zap_msg_release(m);
	/* The other way, the small side's own limit applies first. */
	assert_int_equal(zap_send(small, ab, buf, 2048, NULL), -EMSGSIZE);
	zap_close(small);
	zap_close(big);
}

/* zap_attr.max_msg_size has ZAP_MAX_MSG_BYTES's bounds (it used to take
 * any value, and 4 GiB or more truncated on 32-bit builds). */
static void test_max_msg_bounds(void **state)
{
	struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0",
			     .max_msg_size = ZAP_MAX_MSG_LIMIT + 1};
	struct zap_transport *t = NULL;
	int r;

	(void)state;
	r = zap_pick("=default", 0, &a, &t);
	assert_int_equal(r, -EINVAL);
	assert_non_null(strstr(zap_strerror(r), "max_msg_size"));
	a.max_msg_size = ZAP_MAX_MSG_LIMIT;
	assert_int_equal(zap_pick("=default", 0, &a, &t), 0);
	zap_close(t);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--child-pick"))
		return child_main(argv[2]);
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_order_100k),
		cmocka_unit_test(test_large_reuses_memory),
		cmocka_unit_test(test_cache_freed_on_close),
		cmocka_unit_test(test_eight_senders),
		cmocka_unit_test(test_reply),
		cmocka_unit_test(test_wildcard_reply),
		cmocka_unit_test(test_self_send),
		cmocka_unit_test(test_oversize),
		cmocka_unit_test(test_nothing_listens),
		cmocka_unit_test(test_ipv6_and_names),
		cmocka_unit_test(test_env_garbage),
		cmocka_unit_test(test_limits_agreed),
		cmocka_unit_test(test_max_msg_bounds),
	};

	return tcp_run_tests(tests, sizeof(tests) / sizeof(tests[0]));
}
