/* SPDX-License-Identifier: MIT */
/*
 * The default (TCP) transport's identity rules, played by raw-socket peers
 * on 127.0.0.2 and up (other hosts) and on 127.0.0.1: what a HELLO may
 * claim (another host's address, a live peer's route, our own address or
 * instance id), a broken worse connection of one instance, a peer
 * restarted behind our full receive window (child processes), and a
 * dialer checking the answer to its HELLO.
 */
#include <signal.h>
#include <sys/wait.h>

#include "tcp_ep.h"

/* ------------------------------------------------------------------------ */
/* Identity: what a HELLO may claim (hostile peers on 127.0.0.2 and up)      */
/* ------------------------------------------------------------------------ */

/* One message on @t within @ms, or NULL. */
static struct zap_msg *recv_within(struct zap_transport *t, unsigned ms)
{
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, ms * 1000000ull);
	if (zap_recv(t, ctx, &m))
		m = NULL;
	zap_ctx_free(ctx);
	return m;
}

/* @b has a live connection from @v, which it knows by @av. */
static void link_up(struct zap_transport *v, struct zap_transport *b,
		    const char *av, const char *ab)
{
	send_ok(v, ab, "hi", 2);
	struct zap_msg *m = recv_ok(b);
	assert_string_equal(zap_msg_peer(m), av);
	zap_msg_release(m);
}

/* @b sends to @av and @v gets it, labelled @ab; and back. */
static void still_linked(struct zap_transport *v, struct zap_transport *b,
			 const char *av, const char *ab)
{
	send_ok(b, av, "secret", 6);
	struct zap_msg *m = recv_within(v, 3000);
	assert_non_null(m);
	assert_memory_equal(zap_msg_data(m), "secret", 6);
	assert_string_equal(zap_msg_peer(m), ab);
	zap_msg_release(m);
	link_up(v, b, av, ab);
}

/*
 * A host that is not the victim claims the victim's address, instance id
 * and the smallest nonce. It used to take the route over (B's replies to
 * the victim went to it) and retire the victim's connection.
 */
static void test_hijack_from_other_host(void **state)
{
	struct zap_transport *v = ep_open(), *b = ep_open();
	char av[ZAP_PEER_MAX], ab[ZAP_PEER_MAX];
	unsigned char p[256];
	(void)state;

	ep_addr(v, av);
	ep_addr(b, ab);
	link_up(v, b, av, ab);
	uint64_t vid = instance_id(av);
	zt_log_clear();
	int fd = raw_connect_from(ab, "127.0.0.2");
	write_all(fd, p, hello_full(p, vid, 0, av));
	pump(b, 100);
	still_linked(v, b, av, ab);
	assert_true(dropped(fd));
	close(fd);
	/* The log names the real source, not the claim. */
	assert_true(log_wait("dropping connection from 127.0.0.2:"));
	assert_true(log_wait("not its source address"));
	zap_close(v);
	zap_close(b);
}

/*
 * Another process on the victim's host (same source address: plaintext
 * cannot tell them apart) claims the victim's address as another
 * instance: the live victim keeps its route (the newcomer is not dropped:
 * it may be the victim restarted, with its old connection's FIN not yet
 * read; it gets the route once the old connections close).
 */
static void test_route_held_by_live_peer(void **state)
{
	struct zap_transport *v = ep_open(), *b = ep_open();
	char av[ZAP_PEER_MAX], ab[ZAP_PEER_MAX];
	unsigned char p[256];
	(void)state;

	ep_addr(v, av);
	ep_addr(b, ab);
	link_up(v, b, av, ab);
	int fd = raw_connect(ab);
	write_all(fd, p, hello_full(p, 0x1234567887654321ull, 1, av));
	pump(b, 100);
	still_linked(v, b, av, ab);
	/* Nothing B sent to av went to the impostor. */
	struct timeval tv = {.tv_sec = 0, .tv_usec = 300000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	unsigned char r[256];
	ssize_t got = 0, k;
	while ((k = recv(fd, r, sizeof(r), 0)) > 0)
		got += k;
	assert_true(got <= 16 + 24 + (ssize_t)strlen(ab)); /* B's HELLO only */
	close(fd);
	zap_close(v);
	zap_close(b);
}

/*
 * One instance, two connections (both accepted here; the smaller nonce is
 * the better one): DATA on the better one waits while the worse one is
 * open (WIRE.md, rule 3). If the worse one then breaks (a reset: the peer
 * was killed, its unsent frames gone with it), what waits on the better
 * one was sent after frames that may never come: it is dropped unread,
 * not delivered after a hole. It used to be delivered.
 */
static void test_broken_worse_connection(void **state)
{
	struct zap_transport *b = ep_open();
	char ab[ZAP_PEER_MAX];
	unsigned char p[256];
	size_t n;
	(void)state;

	ep_addr(b, ab);
	zt_log_clear();
	int worse = raw_connect(ab), better = raw_connect(ab);
	write_all(worse, p, hello_full(p, 0x1234567887654321ull, 2, "127.0.0.1:9"));
	n = zt_wire_hdr(p, 2, 3);
	memcpy(p + n, "one", 3);
	write_all(worse, p, n + 3);
	struct zap_msg *m = recv_within(b, 3000);
	assert_non_null(m);
	assert_memory_equal(zap_msg_data(m), "one", 3);
	zap_msg_release(m);

	write_all(better, p, hello_full(p, 0x1234567887654321ull, 1, "127.0.0.1:9"));
	/* B answers once it registered the connection: then it is held. */
	struct timeval tv = {.tv_sec = 5};
	setsockopt(better, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	size_t want = 16 + 24 + strlen(ab), got = 0;
	while (got < want) {
		ssize_t k = recv(better, p, want - got, 0);
		assert_true(k > 0);
		got += (size_t)k;
	}
	n = zt_wire_hdr(p, 2, 5);
	memcpy(p + n, "three", 5);
	write_all(better, p, n + 5);
	pump(b, 200); /* held: "two" may still come on the worse one */

	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	setsockopt(worse, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(worse);
	m = recv_within(b, 500);
	if (m)
		fail_msg("delivered \"%.*s\" after the connection before it broke",
			 (int)zap_msg_len(m), (const char *)zap_msg_data(m));
	assert_true(dropped(better));
	close(better);
	assert_true(log_wait("the connection before it broke"));
	zap_close(b);
}

/*
 * A child endpoint at @addr ("127.0.0.1:0" for a new port): it writes its
 * address to @out, then, with @to set, sends @to one message of @big bytes
 * and blocks in it; else it writes to @out the first message it receives
 * within 5 s ("" if none) and exits. Logs off: forked from a threaded
 * process.
 */
static pid_t child_endpoint(const char *addr, const char *to, size_t big, int out)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid)
		return pid;
	zap_set_log_handler(NULL, NULL);
	zap_set_log_level(ZAP_LOG_ERROR);
	struct zap_attr a = {.size = sizeof(a), .listen = addr};
	struct zap_transport *t = NULL;
	char me[ZAP_PEER_MAX] = "", got[64] = "";
	/* The killed incarnation's port may be taken for a moment. */
	for (int i = 0; i < 100 && zap_pick("=default", 0, &a, &t) == -EADDRINUSE; i++)
		usleep(50000);
	if (!t || zap_transport_address(t, me, sizeof(me)) ||
	    write(out, me, sizeof(me)) != (ssize_t)sizeof(me))
		_exit(1);
	if (to) {
		void *b = calloc(1, big);
		zap_send(t, to, b, big, NULL);
		_exit(1);
	}
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	if (zap_ctx_new(&ctx))
		_exit(1);
	zap_ctx_set_timeout(ctx, 5000000000ull);
	if (!zap_recv(t, ctx, &m))
		snprintf(got, sizeof(got), "%.*s", (int)zap_msg_len(m),
			 (const char *)zap_msg_data(m));
	_exit(write(out, got, sizeof(got)) == (ssize_t)sizeof(got) ? 0 : 1);
}

/*
 * A peer killed while its send is blocked on our full receive window
 * leaves a connection that looks alive: its FIN waits behind data we have
 * not read. Restarted at the same address, it must get what we send
 * there: the message used to go into the dead one's connection and was
 * lost (zap_send() returned 0; soak-faults, "receiver has inc 0").
 */
static void test_restart_behind_full_window(void **state)
{
#ifdef __SANITIZE_THREAD__
	/* The peer is a forked child that starts threads, which
	 * ThreadSanitizer refuses after a threaded fork: the other builds run
	 * this case. */
	print_message("skipped: a threaded fork's child under ThreadSanitizer\n");
	skip();
#endif
	/* TCP's window, not a shared-memory ring: */
	setenv("ZAP_SHM", "off", 1);
	struct zap_transport *a = ep_open();
	char aa[ZAP_PEER_MAX], ab[ZAP_PEER_MAX], got[64];
	int pfd[2];
	(void)state;

	ep_addr(a, aa);
	unsigned port = (unsigned)atoi(strrchr(aa, ':') + 1);
	assert_int_equal(pipe(pfd), 0);
	pid_t old = child_endpoint("127.0.0.1:0", aa, 64u << 20, pfd[1]);
	assert_int_equal(read(pfd[0], ab, sizeof(ab)), (ssize_t)sizeof(ab));
	/* Nobody reads on our side: wait until the queue stops growing. */
	unsigned long q = 0, was;
	do {
		was = q;
		usleep(200000);
		q = rx_queued(port);
	} while (!q || q != was);
	kill(old, SIGKILL);
	waitpid(old, NULL, 0);
	pid_t fresh = child_endpoint(ab, NULL, 0, pfd[1]);
	char again[ZAP_PEER_MAX];
	assert_int_equal(read(pfd[0], again, sizeof(again)), (ssize_t)sizeof(again));
	assert_string_equal(again, ab);
	usleep(1100000); /* nothing read from the old one for a second */
	zt_log_clear();
	send_ok(a, ab, "after restart", 13);
	assert_int_equal(read(pfd[0], got, sizeof(got)), (ssize_t)sizeof(got));
	assert_string_equal(got, "after restart");
	assert_true(log_wait("another instance listens there now"));
	int st;
	waitpid(fresh, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(pfd[0]);
	close(pfd[1]);
	zap_close(a);
	unsetenv("ZAP_SHM");
}

/* A HELLO claiming our own listen address (it started an endless echo of
 * replies to ourselves) or our own instance id is refused. */
static void test_hello_claims_us(void **state)
{
	struct zap_transport *b = ep_open();
	char ab[ZAP_PEER_MAX];
	unsigned char p[256];
	(void)state;

	ep_addr(b, ab);
	zt_log_clear();
	int fd = raw_connect(ab);
	write_all(fd, p, hello_addr(p, ab));
	expect_dropped(b, fd, false, "claims our own listen address");

	uint64_t bid = instance_id(ab);
	zt_log_clear();
	fd = raw_connect_from(ab, "127.0.0.3");
	write_all(fd, p, hello_full(p, bid, 7, "127.0.0.3:9"));
	expect_dropped(b, fd, false, "claims our own instance id");
	served(b, ab);
	/* Sending to ourselves still works (the nonce exchange proves it). */
	send_ok(b, ab, "me", 2);
	struct zap_msg *m = recv_ok(b);
	assert_string_equal(zap_msg_peer(m), ab);
	zap_msg_release(m);
	zap_close(b);
}

static void test_dialer_checks_answer(void **state)
{
	static const char *const why[] = {"does not echo our connection nonce",
					  "another port than the one dialed",
					  "claims our own instance id"};
	(void)state;

	for (int mode = 0; mode < 3; mode++) {
		struct zap_transport *b = ep_open();
		struct fake_acceptor f = {.mode = mode};
		fake_listen(&f, "127.0.0.4");
		pthread_t th;
		pthread_create(&th, NULL, fake_accept, &f);
		zt_log_clear();
		struct zap_ctx *ctx;
		assert_int_equal(zap_ctx_new(&ctx), 0);
		zap_ctx_set_timeout(ctx, 3000000000ull);
		int r = zap_send(b, f.addr, "x", 1, ctx);
		zap_ctx_free(ctx);
		if (r != -EPROTO)
			fprintf(stderr, "mode %d: send returned %d\n", mode, r);
		assert_int_equal(r, -EPROTO);
		assert_non_null(strstr(zap_strerror(r), why[mode]));
		zap_close(b);
		pthread_join(th, NULL);
		close(f.lfd);
	}
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hijack_from_other_host),
		cmocka_unit_test(test_route_held_by_live_peer),
		cmocka_unit_test(test_broken_worse_connection),
		cmocka_unit_test(test_restart_behind_full_window),
		cmocka_unit_test(test_hello_claims_us),
		cmocka_unit_test(test_dialer_checks_answer),
	};

	return tcp_run_tests(tests, sizeof(tests) / sizeof(tests[0]));
}
