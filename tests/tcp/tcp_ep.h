/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the programs that test the default (TCP) transport
 * through its public API (test_tcp.c, test_tcp_deadline.c,
 * test_tcp_dial_race.c, test_tcp_identity.c, test_tcp_hostile.c,
 * test_tcp_flood.c): endpoints on 127.0.0.1 with an ephemeral port, tagged
 * messages, raw-socket peers (raw_peer.h) that a test plays, and the
 * program's main (tcp_run_tests()). It brings the system headers they use.
 */
#ifndef ZAP_TEST_TCP_EP_H
#define ZAP_TEST_TCP_EP_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "log-capture.h"
#include "zap-test.h"
#include "raw_peer.h"

/* ------------------------------------------------------------------------ */
/* Endpoints and messages                                                   */
/* ------------------------------------------------------------------------ */

/* Wait up to 3 s for a captured line containing @s. */
static inline bool log_wait(const char *s)
{
	return zt_log_wait(s, 3000);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline struct zap_transport *ep_open_max(uint64_t max)
{
	struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0",
			     .max_msg_size = max};
	struct zap_transport *t = NULL;
	int r = zap_pick("=default", 0, &a, &t);
	if (r)
		fprintf(stderr, "zap_pick: %s\n", zap_strerror(r));
	assert_int_equal(r, 0);
	assert_string_equal(zap_transport_name(t), "default");
	return t;
}

static inline struct zap_transport *ep_open(void)
{
	return ep_open_max(0);
}

static inline void ep_addr(struct zap_transport *t, char *buf)
{
	assert_int_equal(zap_transport_address(t, buf, ZAP_PEER_MAX), 0);
}

static inline struct zap_msg *recv_ok(struct zap_transport *t)
{
	struct zap_msg *m = NULL;
	int r = zap_recv(t, NULL, &m);
	if (r)
		fprintf(stderr, "zap_recv: %s\n", zap_strerror(r));
	assert_int_equal(r, 0);
	return m;
}

static inline void send_ok(struct zap_transport *t, const char *peer, const void *b,
			   size_t len)
{
	int r = zap_send(t, peer, b, len, NULL);
	if (r)
		fprintf(stderr, "zap_send: %s\n", zap_strerror(r));
	assert_int_equal(r, 0);
}

static inline void fill(unsigned char *p, size_t len, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (unsigned char)(x >> 16);
	}
}

/* A message whose payload is "<tag> <a> <b>". */
static inline void send_tagged(struct zap_transport *t, const char *peer, char tag,
			       unsigned a, unsigned b)
{
	char buf[64];
	int n = snprintf(buf, sizeof(buf), "%c %u %u", tag, a, b);
	send_ok(t, peer, buf, (size_t)n);
}

static inline void parse_tagged(struct zap_msg *m, char *tag, unsigned *a, unsigned *b)
{
	char buf[64];
	size_t n = zap_msg_len(m);
	assert_true(n < sizeof(buf));
	memcpy(buf, zap_msg_data(m), n);
	buf[n] = '\0';
	assert_int_equal(sscanf(buf, "%c %u %u", tag, a, b), 3);
}

/* ------------------------------------------------------------------------ */
/* Raw peers                                                                */
/* ------------------------------------------------------------------------ */

static inline int raw_connect(const char *addr)
{
	return raw_connect_from(addr, NULL);
}

/* A HELLO announcing @addr. */
static inline size_t hello_addr(unsigned char *p, const char *addr)
{
	return hello_full(p, 0x1234567887654321ull, 42, addr);
}

static inline size_t hello(unsigned char *p)
{
	return hello_addr(p, "127.0.0.1:9");
}

static inline void write_all(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* After hostile input, a normal peer is served normally. */
static inline void served(struct zap_transport *b, const char *ab)
{
	struct zap_transport *a = ep_open();
	send_ok(a, ab, "ok", 2);
	struct zap_msg *m = recv_ok(b);
	assert_int_equal(zap_msg_len(m), 2);
	assert_memory_equal(zap_msg_data(m), "ok", 2);
	zap_msg_release(m);
	zap_close(a);
}

/*
 * Progress is driven by receivers: keep one in zap_recv() on @b for @ms
 * (nothing well-behaved arrives) so the transport reads hostile input.
 */
static inline void pump(struct zap_transport *b, unsigned ms)
{
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, ms * 1000000ull);
	assert_int_equal(zap_recv(b, ctx, &m), -ETIMEDOUT);
	zap_ctx_free(ctx);
}

/* Read until the peer closes (the transport dropped us); true if it did. */
static inline bool dropped(int fd)
{
	struct timeval tv = {.tv_sec = 5};
	char c[256];
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		ssize_t k = recv(fd, c, sizeof(c), 0);
		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return true;
		if (k < 0)
			return false;
	}
}

/*
 * The endpoint must drop the hostile connection @fd and log @why. @pump: let
 * the endpoint read first (data frames are read while someone receives).
 */
static inline void expect_dropped(struct zap_transport *b, int fd, bool pump_first,
				  const char *why)
{
	if (pump_first)
		pump(b, 100);
	assert_true(dropped(fd));
	close(fd);
	if (why)
		assert_true(log_wait(why));
}

/* An endpoint's instance id, from its answer to a raw HELLO. */
static inline uint64_t instance_id(const char *addr)
{
	unsigned char p[256], r[256];
	size_t n = hello(p), got = 0;
	int fd = raw_connect(addr);
	struct timeval tv = {.tv_sec = 10};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	write_all(fd, p, n);
	/* Read the whole answer: closing with unread bytes would reset. */
	while (got < 40 || got < 16 + (size_t)r[15]) {
		ssize_t k = recv(fd, r + got, sizeof(r) - got, 0);
		assert_true(k > 0);
		got += (size_t)k;
	}
	close(fd);
	uint64_t id = 0;
	for (int i = 0; i < 8; i++)
		id = id << 8 | r[16 + i];
	return id;
}

/* Bytes waiting unread on established sockets whose local port is @port. */
static inline unsigned long rx_queued(unsigned port)
{
	FILE *f = fopen("/proc/net/tcp", "r");
	char line[512];
	unsigned long n = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned lp, st;
		unsigned long txq, rxq;
		if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %lx:%lx", &lp, &st, &txq,
			   &rxq) == 4 && st == 1 && lp == port)
			n += rxq;
	}
	fclose(f);
	return n;
}

/* A raw acceptor that answers a dialer's HELLO wrongly. */
struct fake_acceptor {
	int lfd;
	char addr[64];
	int mode; /* 0: wrong nonce echo, 1: another port, 2: our id, 3: sink */
	uint64_t id;
};

static inline void *fake_accept(void *arg)
{
	struct fake_acceptor *f = arg;
	unsigned char in[256], out[256];
	size_t got = 0;
	int fd = accept(f->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	while (got < 16 || got < 16 + (size_t)in[15]) {
		ssize_t k = recv(fd, in + got, sizeof(in) - got, 0);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	uint64_t id = 0, nonce = 0;
	for (int i = 0; i < 8; i++) {
		id = id << 8 | in[16 + i];
		nonce = nonce << 8 | in[24 + i];
	}
	char claim[64];
	snprintf(claim, sizeof(claim), "%s", f->addr);
	if (f->mode == 1)
		snprintf(strrchr(claim, ':'), 8, ":%u", 9u);
	size_t n = hello_full(out, f->mode == 2 ? id : 0x55, f->mode == 0 ? nonce + 1 : nonce,
			      claim);
	ssize_t k = send(fd, out, n, MSG_NOSIGNAL);
	(void)k;
	if (f->mode == 3) {
		/* A sink that never reads: wait for the test to shut us. */
		int x = accept(f->lfd, NULL, NULL); /* until shut down */
		if (x >= 0)
			close(x);
		close(fd);
		return NULL;
	}
	while (recv(fd, in, sizeof(in), 0) > 0)
		;
	close(fd);
	return NULL;
}

/* @f listens on @host (a loopback address) with an ephemeral port; its
 * address in f->addr. */
static inline void fake_listen(struct fake_acceptor *f, const char *host)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	inet_pton(AF_INET, host, &sa.sin_addr);
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	getsockname(f->lfd, (struct sockaddr *)&sa, &sl);
	snprintf(f->addr, sizeof(f->addr), "%s:%u", host, ntohs(sa.sin_port));
}

/*
 * The program's main after its own arguments: @n tests in the group
 * "plugin-default" (TEST_FILTER selects some), with the wire's log
 * captured for the cases that read it.
 */
static inline int tcp_run_tests(const struct CMUnitTest *tests, size_t n)
{
	/* A hang is a failure, not a stuck CI job. */
	alarm(zt_timeout_ms(120000) / 1000); /* scaled (tests/README.md) */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	setenv("ZAP_TRANSPORT_QUIET", "1", 1);
	zap_set_log_handler(zt_log_capture, NULL);
	/* The cases read what the wire logs about a peer, INFO included (a
	 * peer's FIN mid-message is INFO: an ordinary event). */
	zap_set_log_level(ZAP_LOG_INFO);
	return _cmocka_run_group_tests("plugin-default", tests, n, NULL, NULL);
}

#endif /* ZAP_TEST_TCP_EP_H */
