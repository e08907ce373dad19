/* SPDX-License-Identifier: MIT */
/*
 * The accepting side of the gpudirect bootstrap (gd_hs.c) without RDMA
 * hardware: the same accept loop the plugin runs (gd_hs_serve()) on a
 * loopback socket, with callbacks that stand in for the queue pair
 * (counting what would be allocated), against hostile bootstrap clients:
 * silent sockets, half messages, garbage, clients from 127.0.0.2 and up
 * claiming another address. The engine under it is the connection
 * layer's (util/conn); its identity rule and peer names alone are tested
 * in tests/conn. Also the pinned-memory plan on its own. With TLS
 * (cfg.tls): a pinned peer is named by its key, an unpinned key, a
 * plaintext client and a stalled TLS handshake are refused, and a second
 * key on the same address is another peer.
 *
 * Prints the handshake latency of a legitimate peer while 100 idle
 * sockets hold handshakes open (the closing note of issue 18).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "zap-test.h"

#include "gd_hs.h"
#include "zap-conn.h"
#include "zap-tls.h"
#include "tls-test-certs.h"

#define OUR_INSTANCE 0x1111222233334444ull

/* ---- the server: gd_hs_serve() on 127.0.0.1 ------------------------------ */

struct srv {
	int lfd, wake;
	uint16_t port;
	struct gd_hs *hs;
	pthread_t th;
	pthread_mutex_t mx;
	int boots, readies, fails, drops; /* under mx */
	char last_key[ZAP_PEER_MAX], last_drop[512];
};

static int s_on_boot(void *user, const struct gd_boot *peer, const char *key, void **pair,
		     uint8_t *out, size_t cap, char *why, size_t wl)
{
	struct srv *s = user;
	struct gd_boot me = { .instance = OUR_INSTANCE,
			      .qpn = 1,
			      .psn = 2,
			      .mtu = 5,
			      .slots = 16,
			      .slot_bytes = 1 << 20,
			      .credit_addr = 4096,
			      .credit_rkey = 1 };
	int n;

	(void)peer;
	(void)why;
	(void)wl;
	snprintf(me.listen, sizeof(me.listen), "127.0.0.1:%u", s->port);
	n = gd_boot_encode(&me, out, cap - 1);
	assert_true(n > 0);
	out[n] = 1;	     /* the confirmation: "receives posted" */
	*pair = strdup(key); /* what the plugin allocates here: the pair */
	pthread_mutex_lock(&s->mx);
	s->boots++;
	snprintf(s->last_key, sizeof(s->last_key), "%s", key);
	pthread_mutex_unlock(&s->mx);
	return n + 1;
}

static void s_on_ready(void *user, void *pair)
{
	struct srv *s = user;

	pthread_mutex_lock(&s->mx);
	s->readies++;
	pthread_mutex_unlock(&s->mx);
	free(pair);
}

static void s_on_fail(void *user, void *pair)
{
	struct srv *s = user;

	pthread_mutex_lock(&s->mx);
	s->fails++;
	pthread_mutex_unlock(&s->mx);
	free(pair);
}

static void s_on_drop(void *user, const char *src, const char *why)
{
	struct srv *s = user;

	pthread_mutex_lock(&s->mx);
	s->drops++;
	snprintf(s->last_drop, sizeof(s->last_drop), "from %s: %s", src, why);
	pthread_mutex_unlock(&s->mx);
}

static void *srv_main(void *arg)
{
	struct srv *s = arg;

	assert_int_equal(gd_hs_serve(s->hs, s->lfd, s->wake), 0);
	return NULL;
}

/* The server, TLS for every handshake when @tls is not NULL. */
static struct srv *srv_start_tls(unsigned cap, unsigned timeout_ms, struct ztls_ctx *tls)
{
	struct srv *s = calloc(1, sizeof(*s));
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	struct gd_hs_cfg cfg = {
		.max_inflight = cap,
		.timeout_ns = timeout_ms * 1000000ull,
		.instance = OUR_INSTANCE,
		.tls = tls,
		.on_boot = s_on_boot,
		.on_ready = s_on_ready,
		.on_fail = s_on_fail,
		.on_drop = s_on_drop,
		.user = s,
	};

	assert_non_null(s);
	pthread_mutex_init(&s->mx, NULL);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(s->lfd >= 0);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s->lfd, 512), 0);
	assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&sa, &sl), 0);
	s->port = ntohs(sa.sin_port);
	s->wake = eventfd(0, EFD_CLOEXEC);
	assert_true(s->wake >= 0);
	assert_int_equal(gd_hs_new(&cfg, &s->hs), 0);
	assert_int_equal(pthread_create(&s->th, NULL, srv_main, s), 0);
	return s;
}

static struct srv *srv_start(unsigned cap, unsigned timeout_ms)
{
	return srv_start_tls(cap, timeout_ms, NULL);
}

static void srv_stop(struct srv *s)
{
	uint64_t one = 1;

	assert_int_equal(write(s->wake, &one, sizeof(one)), (ssize_t)sizeof(one));
	pthread_join(s->th, NULL);
	gd_hs_free(s->hs);
	close(s->lfd);
	close(s->wake);
	pthread_mutex_destroy(&s->mx);
	free(s);
}

static int srv_get(struct srv *s, int *field)
{
	int v;

	pthread_mutex_lock(&s->mx);
	v = *field;
	pthread_mutex_unlock(&s->mx);
	return v;
}

/* Whether the last dropped handshake's reason holds @needle. */
static bool srv_drop_has(struct srv *s, const char *needle)
{
	bool r;

	pthread_mutex_lock(&s->mx);
	r = strstr(s->last_drop, needle) != NULL;
	if (!r)
		print_message("last drop: %s\n", s->last_drop);
	pthread_mutex_unlock(&s->mx);
	return r;
}

/* Whether the last peer built was named @want. */
static bool srv_key_is(struct srv *s, const char *want)
{
	bool r;

	pthread_mutex_lock(&s->mx);
	r = !strcmp(s->last_key, want);
	if (!r)
		print_message("last key: %s\n", s->last_key);
	pthread_mutex_unlock(&s->mx);
	return r;
}

static uint64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* ---- clients -------------------------------------------------------------- */

/* A socket from @src (e.g. "127.0.0.2") to the server, connected. */
static int client_connect(struct srv *s, const char *src)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(s->port) };
	struct sockaddr_in me = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	inet_pton(AF_INET, src, &me.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* zconn_wait_fn for the clients: poll, up to 5 s. */
static int poll_wait(void *user, int fd, short ev)
{
	struct pollfd p = { .fd = fd, .events = ev };

	(void)user;
	return poll(&p, 1, 5000) == 1 ? 0 : -ETIMEDOUT;
}

/* @len bytes from @fd through the dialler's own code (zconn_all()): 0,
 * -ETIMEDOUT, or negative when the server closed or refused. */
static int read_full(int fd, struct ztls_conn *tc, void *buf, size_t len)
{
	char why[256];

	return zconn_all(fd, tc, buf, len, false, poll_wait, NULL, why, sizeof(why));
}

static void write_full(int fd, struct ztls_conn *tc, const void *buf, size_t len)
{
	char why[256];

	assert_int_equal(zconn_all(fd, tc, (void *)buf, len, true, poll_wait, NULL, why,
				   sizeof(why)),
			 0);
}

/* The dialling side of a bootstrap on a connected @fd (TLS through @tc
 * when not NULL), as gpudirect.c runs it: 0, or -ECONNRESET when the
 * server refused (closed). */
static int client_boot(int fd, struct ztls_conn *tc, const char *claim, uint64_t instance)
{
	struct gd_boot me = { .instance = instance,
			      .qpn = 7,
			      .psn = 9,
			      .mtu = 5,
			      .slots = 16,
			      .slot_bytes = 1 << 20,
			      .credit_addr = 8192,
			      .credit_rkey = 3 };
	uint8_t msg[GD_BOOT_MAX], in[GD_BOOT_MAX], ok = 1;
	struct gd_boot peer;
	char why[200];
	size_t body;
	int n, rc;

	snprintf(me.listen, sizeof(me.listen), "%s", claim);
	n = gd_boot_encode(&me, msg, sizeof(msg));
	assert_true(n > 0);
	write_full(fd, tc, msg, (size_t)n);
	rc = read_full(fd, tc, in, GD_BOOT_HDR);
	if (!rc) {
		assert_int_equal(gd_boot_header(in, &body, why, sizeof(why)), 0);
		rc = read_full(fd, tc, in + GD_BOOT_HDR, body);
	}
	if (!rc) {
		assert_int_equal(gd_boot_decode(in, GD_BOOT_HDR + body, &peer, why,
						sizeof(why)),
				 0);
		assert_int_equal(peer.instance, OUR_INSTANCE);
		write_full(fd, tc, &ok, 1);
		rc = read_full(fd, tc, &ok, 1);
		/* The server closes once the pair is in its table. */
		if (!rc)
			assert_int_equal(read_full(fd, tc, &ok, 1), -ECONNRESET);
	}
	return rc;
}

static int client_handshake(struct srv *s, const char *src, const char *claim,
			    uint64_t instance)
{
	int fd = client_connect(s, src), rc = client_boot(fd, NULL, claim, instance);

	close(fd);
	return rc;
}

/* ---- tests ---------------------------------------------------------------- */

/* The queue pair (and its GPU receive slots) used to be allocated before
 * the peer's message was read: now nothing is allocated for a connection
 * that sends nothing, half a message, or a message that does not decode. */
static void test_nothing_before_boot(void **state)
{
	struct srv *s = srv_start(128, 2000);
	struct gd_boot b = { .instance = 5,
			     .qpn = 1,
			     .mtu = 5,
			     .slots = 4,
			     .slot_bytes = 4096,
			     .credit_rkey = 1 };
	uint8_t msg[GD_BOOT_MAX];
	int fds[8], n;

	snprintf(b.listen, sizeof(b.listen), "127.0.0.1:7000");
	n = gd_boot_encode(&b, msg, sizeof(msg));
	for (int i = 0; i < 4; i++) /* silent */
		fds[i] = client_connect(s, "127.0.0.1");
	fds[4] = client_connect(s, "127.0.0.1");
	assert_int_equal(send(fds[4], msg, 5, 0), 5); /* half a header */
	fds[5] = client_connect(s, "127.0.0.1");
	assert_int_equal(send(fds[5], "GET / HTTP/1.0\r\n\r\n", 18, 0), 18);
	fds[6] = client_connect(s, "127.0.0.1");
	assert_int_equal(send(fds[6], msg, (size_t)n - 3, 0), n - 3); /* truncated body */
	fds[7] = client_connect(s, "127.0.0.1");
	msg[GD_BOOT_HDR + 12] = 9; /* mtu out of range: does not decode */
	assert_int_equal(send(fds[7], msg, (size_t)n, 0), n);
	sleep_ms(200);
	assert_int_equal(srv_get(s, &s->boots), 0);
	assert_true(srv_get(s, &s->drops) >= 2); /* garbage and the bad field */
	/* A real peer meanwhile. */
	assert_int_equal(client_handshake(s, "127.0.0.1", "127.0.0.1:7001", 6), 0);
	assert_int_equal(srv_get(s, &s->boots), 1);
	assert_int_equal(srv_get(s, &s->readies), 1);
	for (int i = 0; i < 8; i++)
		close(fds[i]);
	srv_stop(s);
}

/* Handshakes used to be served one at a time with a 10 s timeout, so one
 * idle socket stalled every new peer. Now 100 idle sockets hold their
 * handshakes open while a peer bootstraps at once; each is dropped at its
 * own deadline. */
/* Median of @n round trips of client_handshake() (microseconds). */
static uint64_t handshake_median_us(struct srv *s, int n, uint64_t *max)
{
	uint64_t lat[64], t;

	*max = 0;
	for (int i = 0; i < n; i++) {
		t = mono_us();
		assert_int_equal(client_handshake(s, "127.0.0.1", "127.0.0.1:7100",
						  1000 + (uint64_t)i),
				 0);
		lat[i] = mono_us() - t;
		if (lat[i] > *max)
			*max = lat[i];
	}
	for (int i = 1; i < n; i++) /* insertion sort: a handful */
		for (int j = i; j > 0 && lat[j] < lat[j - 1]; j--) {
			t = lat[j];
			lat[j] = lat[j - 1];
			lat[j - 1] = t;
		}
	return lat[n / 2];
}

static void test_idle_sockets_do_not_stall(void **state)
{
	/* The idle sockets' deadline, scaled (tests/README.md): a handshake
	 * stalled behind them would wait that long. */
	const unsigned idle_ms = zt_timeout_ms(1500);
	struct srv *s = srv_start(128, idle_ms);
	uint64_t give_up;
	uint64_t base, busy, base_max, busy_max;
	int fds[100];

	base = handshake_median_us(s, 21, &base_max);
	for (int i = 0; i < 100; i++)
		fds[i] = client_connect(s, "127.0.0.1");
	sleep_ms(50); /* all accepted, all idle */
	busy = handshake_median_us(s, 21, &busy_max);
	/* Not TAP: stderr (meson reads stdout as TAP). */
	fprintf(stderr,
		"# handshake latency, median (max) of 21: %llu (%llu) us alone, %llu "
		"(%llu) us with 100 idle sockets holding handshakes open\n",
		(unsigned long long)base, (unsigned long long)base_max,
		(unsigned long long)busy, (unsigned long long)busy_max);
	/* One idle socket used to stall it until its deadline: not a speed
	 * check, only "before the idle sockets' deadline" (2/3 of it). */
	assert_true(busy_max < idle_ms * 1000ull * 2 / 3);
	assert_int_equal(srv_get(s, &s->readies), 42);
	assert_int_equal(srv_get(s, &s->drops), 0); /* the idle ones still held */
	/* Past every idle socket's deadline, however long the server takes
	 * to get round to them (a scaled hang bound). */
	give_up = mono_us() + (idle_ms + zt_timeout_ms(10000)) * 1000ull;
	while (srv_get(s, &s->drops) < 100 && mono_us() < give_up)
		sleep_ms(20);
	assert_int_equal(srv_get(s, &s->drops), 100);
	assert_true(srv_drop_has(s, "ZAP_GPUDIRECT_HANDSHAKE_MS"));
	assert_int_equal(srv_get(s, &s->boots), 42);
	srv_stop(s);
	for (int i = 0; i < 100; i++)
		close(fds[i]);
}

/* 20 sockets from @src to a server with a cap of 8, each having sent
 * @first (@fl bytes, may be 0) and nothing more. */
static void hold_open(struct srv *s, int fds[20], const char *src, const void *first,
		      size_t fl)
{
	for (int i = 0; i < 20; i++) {
		fds[i] = client_connect(s, src);
		if (fl)
			assert_int_equal(send(fds[i], first, fl, MSG_NOSIGNAL),
					 (ssize_t)fl);
	}
	sleep_ms(100);
}

/* One peer got through, the held sockets were evicted; stop it all. */
static void check_evicted(struct srv *s, int fds[20])
{
	assert_int_equal(srv_get(s, &s->readies), 1);
	assert_true(srv_get(s, &s->drops) >= 12);
	assert_true(srv_drop_has(s, "ZAP_GPUDIRECT_HANDSHAKES"));
	for (int i = 0; i < 20; i++)
		close(fds[i]);
	srv_stop(s);
}

/* At the cap, a new connection evicts the oldest that has not sent its
 * message, so idle sockets cannot fill the handshake table either. */
static void test_cap_evicts_idle(void **state)
{
	struct srv *s = srv_start(8, 5000);
	int fds[20];

	hold_open(s, fds, "127.0.0.1", NULL, 0);
	assert_int_equal(client_handshake(s, "127.0.0.1", "127.0.0.1:7200", 42), 0);
	check_evicted(s, fds);
}

/* Whether the server closed @fd (EOF or reset), waiting a little for it. */
static bool closed_by_server(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, 200) <= 0)
		return false;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* At the cap, the room comes from the source host holding the most
 * handshakes, not from the oldest: one idle socket from 127.0.0.3, then
 * three from 127.0.0.2; a newcomer from 127.0.0.4 evicts one of the three
 * (the oldest handshake was 127.0.0.3's, which the old rule evicted). */
static void test_cap_evicts_busiest_host(void **state)
{
	struct srv *s = srv_start(4, 5000);
	int lone, many[3], gone = 0;

	(void)state;
	lone = client_connect(s, "127.0.0.3");
	sleep_ms(50);
	for (int i = 0; i < 3; i++)
		many[i] = client_connect(s, "127.0.0.2");
	sleep_ms(100);
	assert_int_equal(client_handshake(s, "127.0.0.4", "127.0.0.4:7250", 43), 0);
	assert_int_equal(srv_get(s, &s->readies), 1);
	for (int i = 0; i < 3; i++)
		gone += closed_by_server(many[i]);
	assert_int_equal(gone, 1);
	assert_false(closed_by_server(lone));
	close(lone);
	for (int i = 0; i < 3; i++)
		close(many[i]);
	srv_stop(s);
}

/* The TCP wire's identity rule: the address a peer claims must be its
 * connection's source; a wildcard becomes the source. */
static void test_identity_over_tcp(void **state)
{
	struct srv *s = srv_start(16, 2000);

	/* From 127.0.0.2, claiming 127.0.0.1: refused, naming the source. */
	assert_int_equal(client_handshake(s, "127.0.0.2", "127.0.0.1:7300", 1),
			 -ECONNRESET);
	assert_true(srv_drop_has(s, "from 127.0.0.2:"));
	assert_true(srv_drop_has(s, "claims 127.0.0.1:7300, which is not its source"));
	assert_int_equal(srv_get(s, &s->boots), 0);
	assert_int_equal(client_handshake(s, "127.0.0.3", "10.1.2.3:7300", 2),
			 -ECONNRESET);
	assert_true(srv_drop_has(s, "127.0.0.3"));
	/* A wildcard claim becomes the source. */
	assert_int_equal(client_handshake(s, "127.0.0.2", "0.0.0.0:7301", 3), 0);
	assert_true(srv_key_is(s, "127.0.0.2:7301"));
	assert_int_equal(client_handshake(s, "127.0.0.4", "[::]:7302", 4), 0);
	assert_true(srv_key_is(s, "127.0.0.4:7302"));
	/* The source itself. */
	assert_int_equal(client_handshake(s, "127.0.0.2", "127.0.0.2:7303", 5), 0);
	assert_true(srv_key_is(s, "127.0.0.2:7303"));
	/* Our own instance. */
	assert_int_equal(client_handshake(s, "127.0.0.1", "127.0.0.1:7304", OUR_INSTANCE),
			 -ECONNRESET);
	assert_true(srv_drop_has(s, "own instance"));
	assert_int_equal(srv_get(s, &s->boots), 3);
	srv_stop(s);
}

/* Pinned memory a peer sizes (host staging of its slot size) within the
 * per-peer bound. */
static void test_pin_plan(void **state)
{
	struct gd_boot b = { .slots = 16, .slot_bytes = 64u << 20 };
	uint32_t stages;
	uint64_t bytes;
	char why[256];

	/* The old plan: 8 x 64 MiB staging, whatever the peer asked. */
	assert_int_equal(gd_pin_plan(16u << 20, &b, 64u << 20, &stages, &bytes, why,
				     sizeof(why)),
			 -ENOBUFS);
	assert_non_null(strstr(why, "ZAP_GPUDIRECT_PEER_PIN_BYTES"));
	assert_int_equal(gd_pin_plan(16u << 20, &b, 128u << 20, &stages, &bytes, why,
				     sizeof(why)),
			 0);
	assert_int_equal(stages, 1);
	assert_int_equal(bytes, 80u << 20);
	b.slot_bytes = 1 << 20;
	assert_int_equal(gd_pin_plan(16u << 20, &b, 64u << 20, &stages, &bytes, why,
				     sizeof(why)),
			 0);
	assert_int_equal(stages, 8);
	assert_int_equal(bytes, 24u << 20);
	b.slots = 2;
	assert_int_equal(gd_pin_plan(16u << 20, &b, 64u << 20, &stages, &bytes, why,
				     sizeof(why)),
			 0);
	assert_int_equal(stages, 2);
}

/* ---- TLS ------------------------------------------------------------------ */

/* Identities made at test time: the server S trusts A and B; C is
 * trusted by nobody; every client trusts S. */
static char tdir[512];
static struct tid S, A, B, C;
static struct ztls_ctx *xs, *xa, *xb, *xc;

static struct ztls_ctx *ctx_of(const struct tid *id, const char *pins)
{
	struct ztls_config cfg = { .cert = id->cert_path, .key = id->key_path,
				   .peers = pins };
	struct ztls_ctx *x = NULL;
	char why[512];

	if (ztls_ctx_new(&cfg, &x, why, sizeof(why)))
		fail_msg("ztls_ctx_new: %s", why);
	return x;
}

static int tls_setup(void **state)
{
	char sp[600], cp[600];
	const struct tid *spins[] = { &A, &B }, *cpins[] = { &S };

	tid_tmpdir(tdir, sizeof(tdir));
	tid_make(&S, tdir, "s", -60, 86400, NULL);
	tid_make(&A, tdir, "a", -60, 86400, NULL);
	tid_make(&B, tdir, "b", -60, 86400, NULL);
	tid_make(&C, tdir, "c", -60, 86400, NULL);
	snprintf(sp, sizeof(sp), "%s/server.pins", tdir);
	snprintf(cp, sizeof(cp), "%s/client.pins", tdir);
	tid_pins(sp, spins, 2);
	tid_pins(cp, cpins, 1);
	xs = ctx_of(&S, sp);
	xa = ctx_of(&A, cp);
	xb = ctx_of(&B, cp);
	xc = ctx_of(&C, cp);
	return 0;
}

static int tls_teardown(void **state)
{
	ztls_ctx_free(xs);
	ztls_ctx_free(xa);
	ztls_ctx_free(xb);
	ztls_ctx_free(xc);
	tid_free(&S);
	tid_free(&A);
	tid_free(&B);
	tid_free(&C);
	tid_rmdir(tdir);
	return 0;
}

/* A TLS bootstrap client with identity @x from @src, as gpudirect.c
 * dials: zconn_tls_dial() to the key @want, then client_boot(). 0, or
 * negative: refused. */
static int tls_client_to(struct srv *s, struct ztls_ctx *x, const char *want,
			 const char *src, const char *claim, uint64_t instance)
{
	int fd = client_connect(s, src), rc;
	struct ztls_conn *tc = NULL;
	char why[512];

	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	rc = zconn_tls_dial(x, fd, want, poll_wait, NULL, &tc, why, sizeof(why));
	if (!rc)
		rc = client_boot(fd, tc, claim, instance);
	else
		fprintf(stderr, "# client TLS: %s\n", why); /* not TAP: stderr */
	ztls_conn_free(tc);
	close(fd);
	return rc;
}

static int tls_client(struct srv *s, struct ztls_ctx *x, const char *src,
		      const char *claim, uint64_t instance)
{
	return tls_client_to(s, x, S.fp, src, claim, instance);
}

/* A pinned peer bootstraps over TLS and is named by its address and key. */
static void test_tls_pinned_peer(void **state)
{
	struct srv *s = srv_start_tls(16, 3000, xs);
	char want[ZAP_PEER_MAX];

	assert_int_equal(tls_client(s, xa, "127.0.0.2", "127.0.0.2:7400", 21), 0);
	snprintf(want, sizeof(want), "127.0.0.2:7400#%s", A.fp);
	assert_true(srv_key_is(s, want));
	assert_int_equal(srv_get(s, &s->readies), 1);
	assert_int_equal(srv_get(s, &s->drops), 0);
	srv_stop(s);
}

/* Refused before any bootstrap byte is read: a key that is not pinned,
 * and a plaintext client (no fallback). */
static void test_tls_refusals(void **state)
{
	struct srv *s = srv_start_tls(16, 3000, xs);

	assert_true(tls_client(s, xc, "127.0.0.2", "127.0.0.2:7410", 22) < 0);
	/* The client may read the server's alert before the server has
	 * recorded the drop (it closes after): wait for it. */
	for (int i = 0; i < 200 && srv_get(s, &s->drops) < 1; i++)
		sleep_ms(10);
	assert_int_equal(srv_get(s, &s->boots), 0);
	assert_true(srv_drop_has(s, "from 127.0.0.2"));
	assert_int_equal(srv_get(s, &s->drops), 1);
	assert_int_equal(client_handshake(s, "127.0.0.3", "127.0.0.3:7411", 23),
			 -ECONNRESET);
	assert_int_equal(srv_get(s, &s->boots), 0);
	assert_int_equal(srv_get(s, &s->drops), 2);
	assert_true(srv_drop_has(s, "from 127.0.0.3"));
	srv_stop(s);
}

/* A client that starts a TLS record and goes silent is closed at the
 * deadline, and a good peer is served meanwhile. */
static void test_tls_stall_deadline(void **state)
{
	struct srv *s = srv_start_tls(16, 400, xs);
	static const uint8_t rec[] = { 0x16, 0x03, 0x01, 0x01, 0x00, 0x01 };
	int fd = client_connect(s, "127.0.0.4");
	uint64_t t0 = mono_us();
	uint8_t b;

	assert_int_equal(send(fd, rec, sizeof(rec), MSG_NOSIGNAL), (ssize_t)sizeof(rec));
	assert_int_equal(tls_client(s, xb, "127.0.0.5", "127.0.0.5:7420", 24), 0);
	assert_int_equal(read_full(fd, NULL, &b, 1), -ECONNRESET);
	assert_true(mono_us() - t0 >= 350000);
	assert_true(srv_drop_has(s, "no TLS handshake before the deadline"));
	assert_int_equal(srv_get(s, &s->readies), 1);
	close(fd);
	srv_stop(s);
}

/* At the cap, sockets stalled in the TLS handshake are evicted for a new
 * connection: a pinned peer still gets through. */
static void test_tls_cap_evicts_stalled(void **state)
{
	struct srv *s = srv_start_tls(8, 5000, xs);
	static const uint8_t rec[] = { 0x16, 0x03, 0x01, 0x01, 0x00, 0x01 };
	int fds[20];

	hold_open(s, fds, "127.0.0.7", rec, sizeof(rec));
	assert_int_equal(tls_client(s, xa, "127.0.0.8", "127.0.0.8:7440", 26), 0);
	check_evicted(s, fds);
}

/* Another key from the same address, claiming the same listen address and
 * instance, is another peer: its name carries its own key. */
static void test_tls_other_key_same_address(void **state)
{
	struct srv *s = srv_start_tls(16, 3000, xs);
	char ka[ZAP_PEER_MAX], kb[ZAP_PEER_MAX];

	snprintf(ka, sizeof(ka), "127.0.0.6:7430#%s", A.fp);
	snprintf(kb, sizeof(kb), "127.0.0.6:7430#%s", B.fp);
	assert_int_equal(tls_client(s, xa, "127.0.0.6", "127.0.0.6:7430", 25), 0);
	assert_true(srv_key_is(s, ka));
	assert_int_equal(tls_client(s, xb, "127.0.0.6", "127.0.0.6:7430", 25), 0);
	assert_true(srv_key_is(s, kb));
	/* A send naming A's key is not served by B's pair, nor B's by A's;
	 * a keyless address is served by either (any trusted key). */
	assert_true(zconn_peer_match(ka, ka));
	assert_false(zconn_peer_match(kb, ka));
	assert_false(zconn_peer_match(ka, kb));
	assert_true(zconn_peer_match(kb, "127.0.0.6:7430"));
	assert_false(zconn_peer_match(kb, "127.0.0.6:743"));
	srv_stop(s);
}

/* A dial to a key the server does not have fails -EACCES in the TLS
 * handshake: no bootstrap byte is sent, nothing is built. */
static void test_tls_dial_wrong_key(void **state)
{
	struct srv *s = srv_start_tls(16, 3000, xs);

	assert_int_equal(tls_client_to(s, xa, B.fp, "127.0.0.9", "127.0.0.9:7450", 27),
			 -EACCES);
	assert_int_equal(tls_client_to(s, xa, NULL, "127.0.0.9", "127.0.0.9:7451", 28),
			 0);
	assert_int_equal(srv_get(s, &s->boots), 1);
	srv_stop(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pin_plan),
		cmocka_unit_test(test_nothing_before_boot),
		cmocka_unit_test(test_idle_sockets_do_not_stall),
		cmocka_unit_test(test_cap_evicts_idle),
		cmocka_unit_test(test_cap_evicts_busiest_host),
		cmocka_unit_test(test_identity_over_tcp),
		cmocka_unit_test(test_tls_pinned_peer),
		cmocka_unit_test(test_tls_refusals),
		cmocka_unit_test(test_tls_stall_deadline),
		cmocka_unit_test(test_tls_cap_evicts_stalled),
		cmocka_unit_test(test_tls_other_key_same_address),
		cmocka_unit_test(test_tls_dial_wrong_key),
	};
	/* The identities for the TLS cases are made once, for the group. */
	return cmocka_run_group_tests(tests, tls_setup, tls_teardown);
}
