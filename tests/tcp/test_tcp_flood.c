/* SPDX-License-Identifier: MIT */
/*
 * The default (TCP) transport's descriptors: idle peers cannot lock anyone
 * out. A thousand idle raw connections, 300 idle and 120 busy peers
 * against an endpoint in a child process with a low RLIMIT_NOFILE (a
 * newcomer still gets its echoes), and the idle timeout (ZAP_TCP_IDLE_MS).
 */
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "tcp_ep.h"

static void test_hostile_idle_1000(void **state)
{
	struct zap_transport *b = ep_open();
	char ab[ZAP_PEER_MAX];
	enum { N = 1000 };
	int *fds = malloc(N * sizeof(int));
	struct rlimit rl;
	(void)state;

	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < 3 * N && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < 2 * N + 100) {
		free(fds);
		zap_close(b);
		skip();
	}
	ep_addr(b, ab);
	for (int i = 0; i < N; i++)
		fds[i] = raw_connect(ab);
	/* Some idle peers completed a HELLO and then sent nothing. */
	unsigned char p[128];
	size_t n = hello(p);
	for (int i = 0; i < 50; i++)
		write_all(fds[i], p, n);
	served(b, ab);
	served(b, ab);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	served(b, ab);
	free(fds);
	zap_close(b);
}

/* ------------------------------------------------------------------------ */
/* Descriptors: idle peers cannot lock anyone out                            */
/* ------------------------------------------------------------------------ */

/*
 * An endpoint in a child process with RLIMIT_NOFILE 256 (the hostile
 * sockets live here, and must not count against it) echoes messages.
 * 300 peers from 127.0.1.x complete a HELLO and idle; a well-behaved peer
 * must still get its echo. It used to be locked out (EMFILE on accept).
 */
/*
 * An echo server in a child process whose RLIMIT_NOFILE is @nofile (the
 * hostile sockets live in this process and must not count against it);
 * its address in @addr. With @only_echo it answers the 4-byte "echo"
 * messages only. Skips the test unless this process may open @need
 * descriptors.
 */
static pid_t echo_child(rlim_t nofile, rlim_t need, bool only_echo, char *addr)
{
	struct rlimit rl;
	int pfd[2];

	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < need && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < need)
		skip();
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit low = { nofile, nofile };
		struct zap_transport *t;
		char ab[ZAP_PEER_MAX] = "";
		/* Forked from a threaded process: another thread may have
		 * held zt_log_mu at the fork. The echo server logs nothing. */
		zap_set_log_handler(NULL, NULL);
		zap_set_log_level(ZAP_LOG_ERROR);
		close(pfd[0]);
		setrlimit(RLIMIT_NOFILE, &low);
		t = ep_open();
		ep_addr(t, ab);
		if (write(pfd[1], ab, sizeof(ab)) != (ssize_t)sizeof(ab))
			_exit(1);
		for (;;) {
			struct zap_msg *m;
			if (zap_recv(t, NULL, &m))
				continue;
			if (!only_echo ||
			    (zap_msg_len(m) == 4 && !memcmp(zap_msg_data(m), "echo", 4)))
				zap_send(t, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m),
					 NULL);
			zap_msg_release(m);
		}
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], addr, ZAP_PEER_MAX), (ssize_t)ZAP_PEER_MAX);
	close(pfd[0]);
	return pid;
}

/*
 * 20 echo round trips from a fresh endpoint to the echo server at @addr,
 * each within @timeout_ms; how many came back. Each failure is
 * printed with its reason.
 */
static int echoes(const char *addr, unsigned timeout_ms)
{
	struct zap_transport *a = ep_open();
	int ok = 0;

	for (int i = 0; i < 20; i++) {
		struct zap_ctx *ctx;
		struct zap_msg *m = NULL;
		assert_int_equal(zap_ctx_new(&ctx), 0);
		zap_ctx_set_timeout(ctx, (uint64_t)timeout_ms * 1000000u);
		int rc = zap_send(a, addr, "echo", 4, ctx);
		if (!rc)
			rc = zap_recv(a, ctx, &m);
		if (!rc) {
			ok++;
			zap_msg_release(m);
		} else {
			fprintf(stderr, "# echo %d: %s (%s)\n", i, zap_strerror(rc),
				zap_last_error());
		}
		zap_ctx_free(ctx);
	}
	zap_close(a);
	return ok;
}

static void test_idle_flood_low_nofile(void **state)
{
	enum { N = 300 };
	char ab[ZAP_PEER_MAX] = "";
	(void)state;

	pid_t pid = echo_child(256, N + 200, false, ab);
	int *fds = malloc(N * sizeof(int));
	for (int i = 0; i < N; i++) {
		char from[32], claim[48];
		unsigned char p[256];
		snprintf(from, sizeof(from), "127.0.1.%d", 1 + i % 250 + (i >= 250));
		snprintf(claim, sizeof(claim), "%s:%d", from, 1000 + i);
		fds[i] = raw_connect_from(ab, from);
		write_all(fds[i], p, hello_full(p, 0x1000 + (uint64_t)i, 7, claim));
	}
	usleep(1500000); /* every one of them idle longer than 1 s */
	int ok = echoes(ab, 2000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	free(fds);
	fprintf(stderr, "# %d of 20 echoes through 300 idle peers at RLIMIT_NOFILE 256\n", ok);
	assert_int_equal(ok, 20);
}

/*
 * Busy connections at the cap (issue #35): an endpoint in a child with
 * RLIMIT_NOFILE 128 (its cap: 48 connections) echoes messages, while 120
 * raw peers from four addresses (127.0.2.1-4) complete a HELLO and then
 * send a message every 50 ms each: none is ever idle. A newcomer from
 * 127.0.0.1 must still get each of its echoes within a few handshake
 * times, whether the flood dials again when closed or not. It used to be
 * locked out: only connections idle 250 ms could be evicted, a newcomer
 * was admitted beyond the cap until accept() failed with EMFILE, and then
 * the listener paused without ever evicting anyone.
 */
struct busy_flood {
	char addr[ZAP_PEER_MAX];
	bool redial; /* dial again when closed (else the peer is gone) */
	atomic_bool stop;
	unsigned reconnects;
};

static int busy_peer(const char *addr, int i)
{
	char from[32], claim[48];
	unsigned char p[256];

	snprintf(from, sizeof(from), "127.0.2.%d", 1 + i % 4);
	snprintf(claim, sizeof(claim), "%s:%d", from, 2000 + i);
	int fd = raw_connect_from(addr, from);
	if (fd >= 0 && send(fd, p, hello_full(p, 0x2000 + (uint64_t)i, 9, claim),
			    MSG_NOSIGNAL) < 0) {
		close(fd);
		fd = -1;
	}
	/* Back to back: the endpoint's answer (or 300 ms) before the next
	 * one, so that none is still in its handshake when the next comes. */
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	if (fd >= 0 && poll(&pf, 1, 300) == 1)
		(void)!recv(fd, p, sizeof(p), 0);
	return fd;
}

static void *busy_flood_main(void *arg)
{
	struct busy_flood *f = arg;
	enum { N = 120 };
	int fd[N];
	unsigned char p[64];
	size_t n = zt_wire_hdr(p, 2, 4);

	memcpy(p + n, "vote", 4);
	for (int i = 0; i < N; i++)
		fd[i] = busy_peer(f->addr, i);
	while (!atomic_load(&f->stop)) {
		for (int i = 0; i < N; i++) {
			char sink[4096];
			/* Drain what the endpoint answers; closed: dial again. */
			while (fd[i] >= 0 && recv(fd[i], sink, sizeof(sink), MSG_DONTWAIT) > 0)
				;
			if (fd[i] >= 0 && send(fd[i], p, n + 4, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
			    errno != EAGAIN) {
				close(fd[i]);
				fd[i] = -1;
			}
			if (fd[i] < 0 && f->redial) {
				fd[i] = busy_peer(f->addr, i);
				f->reconnects++;
			}
		}
		zt_sleep_ms(50);
	}
	for (int i = 0; i < N; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	return NULL;
}

static void busy_flood(bool redial)
{
	struct busy_flood f = { .redial = redial, .stop = false };
	pthread_t th;

	/* Only the newcomer's messages are answered. */
	pid_t pid = echo_child(128, 400, true, f.addr);
	assert_int_equal(pthread_create(&th, NULL, busy_flood_main, &f), 0);
	zt_sleep_ms(1000); /* the flood holds the cap, and keeps busy */
	/* Each within a few handshake times (ZAP_TCP_HANDSHAKE_MS is 5 s),
	 * scaled. */
	int ok = echoes(f.addr, zt_timeout_ms(15000));
	atomic_store(&f.stop, true);
	pthread_join(th, NULL);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	fprintf(stderr,
		"# %d of 20 echoes beside 120 busy peers at RLIMIT_NOFILE 128 "
		"(%s: %u dials again)\n",
		ok, redial ? "dialing again" : "not dialing again", f.reconnects);
	assert_int_equal(ok, 20);
}

static void test_busy_flood_low_nofile(void **state)
{
	(void)state;
	busy_flood(false);
	busy_flood(true);
}

/* A connection that carries nothing for ZAP_TCP_IDLE_MS is closed. */
static void test_idle_timeout(void **state)
{
	char ab[ZAP_PEER_MAX];
	unsigned char p[256];
	(void)state;

	setenv("ZAP_TCP_IDLE_MS", "300", 1);
	struct zap_transport *b = ep_open();
	unsetenv("ZAP_TCP_IDLE_MS");
	ep_addr(b, ab);
	int fd = raw_connect_from(ab, "127.0.0.7");
	write_all(fd, p, hello_addr(p, "127.0.0.7:9"));
	pump(b, 1000);
	expect_dropped(b, fd, false, NULL);
	served(b, ab);
	zap_close(b);
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_idle_1000),
		cmocka_unit_test(test_idle_flood_low_nofile),
		cmocka_unit_test(test_busy_flood_low_nofile),
		cmocka_unit_test(test_idle_timeout),
	};

	return tcp_run_tests(tests, sizeof(tests) / sizeof(tests[0]));
}
