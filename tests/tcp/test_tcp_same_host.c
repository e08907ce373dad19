/* SPDX-License-Identifier: MIT */
/*
 * Congestion control on connections within this host (tw_tune_same_host(),
 * util/tcp/tcp_conn.c): which address pairs count as one host; a socket on
 * loopback moves from bbr to reno, keeps any other algorithm, and keeps
 * bbr with ZAP_TCP_SAME_HOST_CC=keep; and two real wires on 127.0.0.1 end
 * up with reno on both ends when the host's default is bbr.
 *
 * Where the kernel has no bbr to set, or the host's default is not bbr,
 * the switch cannot be shown: those tests say why and are skipped
 * (cmocka lists them as SKIPPED); the address checks always run.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "tcp_int.h"
#include "wire_host.h"

/* @ip as a socket address: IPv6 if it has a colon, else IPv4. */
static struct sockaddr_storage addr(const char *ip)
{
	struct sockaddr_storage ss = { 0 };
	bool six = strchr(ip, ':') != NULL;
	void *a = six ? (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
		      : (void *)&((struct sockaddr_in *)&ss)->sin_addr;

	ss.ss_family = six ? AF_INET6 : AF_INET;
	assert_int_equal(inet_pton(ss.ss_family, ip, a), 1);
	return ss;
}

static bool same(const char *local, const char *peer)
{
	struct sockaddr_storage l = addr(local), p = addr(peer);

	return tw_same_host((struct sockaddr *)&l, (struct sockaddr *)&p);
}

static void test_which_pairs(void **state)
{
	static const struct {
		const char *local, *peer;
		bool same;
	} pairs[] = {
		/* Loopback peers, whatever our end says. */
		{ "127.0.0.1", "127.0.0.1", true },
		{ "127.0.0.1", "127.0.0.2", true },
		{ "10.1.2.3", "127.255.0.9", true },
		{ "::1", "::1", true },
		{ "::ffff:10.0.0.1", "::ffff:127.0.0.1", true },
		/* The same address at both ends: routed over loopback too. */
		{ "10.0.0.5", "10.0.0.5", true },
		{ "2001:db8::7", "2001:db8::7", true },
		/* Another host, or another family. */
		{ "10.0.0.5", "10.0.0.6", false },
		{ "192.168.1.1", "128.0.0.1", false },
		{ "2001:db8::7", "2001:db8::8", false },
		{ "::ffff:10.0.0.1", "::ffff:10.0.0.2", false },
		{ "127.0.0.1", "::1", false },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		if (same(pairs[i].local, pairs[i].peer) != pairs[i].same)
			fail_msg("%s -> %s: want %s", pairs[i].local, pairs[i].peer,
				 pairs[i].same ? "same host" : "another host");
	}
}

static void cc_get(int fd, char *out, size_t len)
{
	socklen_t l = (socklen_t)len - 1;

	memset(out, 0, len);
	assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, out, &l), 0);
}

static bool cc_set(int fd, const char *name)
{
	return !setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name));
}

/* A connected loopback pair: *@c dialed, *@s accepted. */
static void loopback_pair(int *c, int *s)
{
	struct sockaddr_storage ss = addr("127.0.0.1");
	socklen_t sl = sizeof(struct sockaddr_in);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(l >= 0);
	assert_int_equal(bind(l, (struct sockaddr *)&ss, sl), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&ss, &sl), 0);
	*c = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(*c, (struct sockaddr *)&ss, sl), 0);
	*s = accept(l, NULL, NULL);
	assert_true(*s >= 0);
	close(l);
}

static void test_loopback_socket(void **state)
{
	struct tcp_wire w = { 0 }; /* only keep_cc is read */
	char cc[32];
	int c, s;

	(void)state;
	loopback_pair(&c, &s);
	if (!cc_set(c, "bbr")) {
		fprintf(stderr, "# SKIP: this kernel lets us set no \"bbr\" (%s): the "
				"switch away from it cannot be shown\n",
			strerror(errno));
		close(c);
		close(s);
		skip();
	}
	tw_tune_same_host(&w, c);
	cc_get(c, cc, sizeof(cc));
	assert_string_equal(cc, "reno");

	/* ZAP_TCP_SAME_HOST_CC=keep: the host's choice stays. */
	assert_true(cc_set(c, "bbr"));
	w.keep_cc = true;
	tw_tune_same_host(&w, c);
	cc_get(c, cc, sizeof(cc));
	assert_string_equal(cc, "bbr");

	/* An algorithm that does not pace stays as it is. */
	w.keep_cc = false;
	if (cc_set(s, "cubic")) {
		tw_tune_same_host(&w, s);
		cc_get(s, cc, sizeof(cc));
		assert_string_equal(cc, "cubic");
	}

	/* A socket with no peer is left alone. */
	int u = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(cc_set(u, "bbr"));
	tw_tune_same_host(&w, u);
	cc_get(u, cc, sizeof(cc));
	assert_string_equal(cc, "bbr");
	close(u);
	close(c);
	close(s);
}

static struct tcp_wire *open_wire(const char *dom)
{
	struct tcp_wire_args a = wire_args(dom, 1u << 20);
	struct tcp_wire *w = NULL;

	assert_int_equal(tcp_wire_open(&a, &w), 0);
	return w;
}

/* The algorithm of @w's one connection's socket. */
static void wire_cc(struct tcp_wire *w, char *out, size_t len)
{
	pthread_mutex_lock(&w->mu);
	assert_non_null(w->conns);
	assert_null(w->conns->next);
	cc_get(w->conns->fd, out, len);
	pthread_mutex_unlock(&w->mu);
}

/* b sends one message to a; the algorithms of both ends' sockets. */
static void wires_cc(char *ca, char *cb, size_t len)
{
	struct tcp_wire *a = open_wire("a"), *b = open_wire("b");
	char addr[ZAP_PEER_MAX];
	struct zap_msg *m;
	struct tctx c;

	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	assert_int_equal(tcp_wire_send(b, addr, "x", 1, within_ms(&c, 5000)), 0);
	assert_int_equal(tcp_wire_recv(a, within_ms(&c, 5000), &m), 0);
	m->release(m);
	wire_cc(a, ca, len);
	wire_cc(b, cb, len);
	tcp_wire_destroy(a);
	tcp_wire_destroy(b);
}

static void test_wires(void **state)
{
	char def[32] = "", ca[32], cb[32];
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");

	(void)state;
	if (f) {
		if (!fgets(def, sizeof(def), f))
			def[0] = '\0';
		fclose(f);
		def[strcspn(def, "\n")] = '\0';
	}
	if (strncmp(def, "bbr", 3)) {
		fprintf(stderr, "# SKIP: the host's default congestion control is \"%s\", "
				"not bbr: the wire's sockets have nothing to switch\n",
			def);
		skip();
	}
	unsetenv(TCP_SAME_HOST_CC_ENV);
	wires_cc(ca, cb, sizeof(ca));
	assert_string_equal(ca, "reno");
	assert_string_equal(cb, "reno");

	setenv(TCP_SAME_HOST_CC_ENV, "keep", 1);
	wires_cc(ca, cb, sizeof(ca));
	assert_string_equal(ca, def);
	assert_string_equal(cb, def);
	unsetenv(TCP_SAME_HOST_CC_ENV);
}

static void test_bad_setting(void **state)
{
	struct tcp_wire_args a = wire_args("bad", 1u << 20);
	struct tcp_wire *w = NULL;

	(void)state;
	setenv(TCP_SAME_HOST_CC_ENV, "reno", 1);
	assert_int_equal(tcp_wire_open(&a, &w), -EINVAL);
	assert_null(w);
	setenv(TCP_SAME_HOST_CC_ENV, "auto", 1);
	assert_int_equal(tcp_wire_open(&a, &w), 0);
	tcp_wire_destroy(w);
	unsetenv(TCP_SAME_HOST_CC_ENV);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_which_pairs),
		cmocka_unit_test(test_loopback_socket),
		cmocka_unit_test(test_wires),
		cmocka_unit_test(test_bad_setting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
