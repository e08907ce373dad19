/* SPDX-License-Identifier: MIT */
/*
 * What an operator sees of the default transport: zap_stats(),
 * zap_peer_list() and zap_metrics_render() against known traffic, and each
 * close reason provoked (by a raw-socket peer or a second endpoint) and
 * counted exactly once. Every endpoint listens on 127.0.0.1, ephemeral
 * port. Counts are exact; nothing here asserts how long anything took: a
 * loop that waits for a count gives up only after a generous guard
 * (ZAP_TEST_TIMEOUT_SCALE stretches it), which is a hang, not a timing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "zap-test.h"
#include "raw_peer.h"

#define GUARD_MS 20000u /* a count that never comes: fail, do not hang */

static struct zap_transport *ep_open(void)
{
	struct zap_attr a = { .size = sizeof(a), .listen = "127.0.0.1:0" };
	struct zap_transport *t = NULL;
	int r = zap_pick("=default", 0, &a, &t);
	if (r)
		fprintf(stderr, "zap_pick: %s\n", zap_strerror(r));
	assert_int_equal(r, 0);
	return t;
}

/* An endpoint opened with @var=@val (read at open). */
static struct zap_transport *ep_open_env(const char *var, const char *val)
{
	setenv(var, val, 1);
	struct zap_transport *t = ep_open();
	unsetenv(var);
	return t;
}

static void ep_addr(struct zap_transport *t, char *buf)
{
	assert_int_equal(zap_transport_address(t, buf, ZAP_PEER_MAX), 0);
}

static void stats(struct zap_transport *t, struct zap_stats *s)
{
	memset(s, 0, sizeof(*s));
	s->size = sizeof(*s);
	int r = zap_stats(t, s);
	if (r)
		fprintf(stderr, "zap_stats: %s\n", zap_strerror(r));
	assert_int_equal(r, 0);
}

static uint64_t closed_total(const struct zap_stats *s)
{
	uint64_t n = 0;
	for (int i = 0; i < ZAP_CLOSE_REASON_SLOTS; i++)
		n += s->conns_closed[i];
	return n;
}

/* Progress is driven by callers: a zap_recv() that waits @ms for nothing. */
static void pump(struct zap_transport *t, unsigned ms)
{
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, ms * 1000000ull);
	int r = zap_recv(t, ctx, &m);
	if (!r)
		zap_msg_release(m);
	zap_ctx_free(ctx);
}

/* Pump @t until its close count under @reason reaches @want. */
static void wait_closed(struct zap_transport *t, int reason, uint64_t want)
{
	struct zap_stats s;
	uint64_t end = zt_now_ms() + zt_timeout_ms(GUARD_MS);

	for (;;) {
		stats(t, &s);
		if (s.conns_closed[reason] >= want)
			return;
		if (zt_now_ms() > end) {
			fprintf(stderr, "# closed[%s] = %llu, want %llu\n",
				zap_close_reason_name(reason),
				(unsigned long long)s.conns_closed[reason],
				(unsigned long long)want);
			fail_msg("close reason %s never counted",
				 zap_close_reason_name(reason));
		}
		pump(t, 20);
	}
}

/*
 * Take @t's events and check they are exactly @n of @types (with @reasons,
 * where reasons is not NULL); the events in @out for further checks.
 */
static void expect_events(struct zap_transport *t, const int *types, const int *reasons,
			  int n, struct zap_event *out)
{
	struct zap_event ev[16];
	ev[0].size = sizeof(ev[0]);
	int k = zap_events(t, ev, 16);
	if (k != n) {
		for (int i = 0; i < k; i++)
			fprintf(stderr, "# event %s %s %s\n", zap_event_type_name(ev[i].type),
				zap_close_reason_name(ev[i].reason), ev[i].detail);
		fail_msg("%d events, want %d", k, n);
	}
	for (int i = 0; i < n; i++) {
		if (ev[i].type != types[i] || (reasons && ev[i].reason != reasons[i]))
			fail_msg("event %d: %s (%s), want %s (%s)", i,
				 zap_event_type_name(ev[i].type),
				 zap_close_reason_name(ev[i].reason),
				 zap_event_type_name(types[i]),
				 reasons ? zap_close_reason_name(reasons[i]) : "-");
		assert_true(ev[i].time_ms > 0);
		if (out)
			out[i] = ev[i];
	}
	assert_int_equal(zap_events(t, ev, 16), 0); /* taken: gone */
}

/* After a single connection accepted by @t was closed: it was counted once,
 * under @reason and nothing else, nothing stays open, and the events say
 * so: connected then disconnected when @established, else refused. */
static void expect_one_close(struct zap_transport *t, int reason, bool established)
{
	struct zap_stats s;

	wait_closed(t, reason, 1);
	pump(t, 50); /* a second count would come about now */
	stats(t, &s);
	for (int i = 0; i < ZAP_CLOSE_REASON_SLOTS; i++)
		if (s.conns_closed[i] != (i == reason))
			fail_msg("closed[%s] = %llu (want only %s once)",
				 zap_close_reason_name(i),
				 (unsigned long long)s.conns_closed[i],
				 zap_close_reason_name(reason));
	assert_int_equal(s.conns_accepted, 1);
	assert_int_equal(s.conns_dialed, 0);
	assert_int_equal(s.conns_open, 0);
	assert_int_equal(s.events_lost, 0);
	struct zap_event ev[2];
	if (established) {
		const int types[] = { ZAP_EVENT_CONNECTED, ZAP_EVENT_DISCONNECTED };
		const int reasons[] = { 0, reason };
		expect_events(t, types, reasons, 2, ev);
		assert_int_equal(ev[0].conn_id, ev[1].conn_id);
		assert_false(ev[0].dialed);
		assert_string_equal(ev[0].peer, "127.0.0.1:9");
		assert_string_equal(ev[0].path, "tcp");
	} else {
		const int types[] = { ZAP_EVENT_REFUSED };
		expect_events(t, types, &reason, 1, ev);
		assert_int_equal(ev[0].conn_id, 0);
		assert_true(!strncmp(ev[0].peer, "127.0.0.1:", 10));
		if (reason == ZAP_CLOSE_IDENTITY)
			assert_non_null(strstr(ev[0].detail, "127.0.0.9"));
	}
}

/* ---- raw-socket peers (plugins/default/WIRE.md) -------------------------- */

/* A HELLO announcing @addr (instance id from the pid: unique per run). */
static size_t hello_addr(unsigned char *p, const char *addr)
{
	return hello_full(p, 0x5a5a000000000000ull | (uint64_t)getpid(), 42, addr);
}

static void write_all(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Read the endpoint's HELLO answer (16 + 24 + its address). */
static void read_answer(int fd)
{
	unsigned char h[16];
	size_t got = 0;
	while (got < sizeof(h)) {
		ssize_t k = recv(fd, h + got, sizeof(h) - got, 0);
		assert_true(k > 0);
		got += (size_t)k;
	}
	uint64_t len = 0;
	for (int i = 8; i < 16; i++)
		len = len << 8 | h[i];
	assert_true(len < 512);
	unsigned char rest[512];
	for (got = 0; got < len;) {
		ssize_t k = recv(fd, rest + got, len - got, 0);
		assert_true(k > 0);
		got += (size_t)k;
	}
}

/*
 * A raw peer that completed the handshake with @t (at address @at). Each
 * is an instance of its own: connections of one instance are ordered
 * (WIRE.md, "One connection per pair of endpoints", rule 3), and closing
 * an unread earlier one drops the later ones with it, which would add
 * closes to what these tests count.
 */
static int raw_peer(struct zap_transport *t, const char *at)
{
	static uint64_t next_id = 0x5000;
	unsigned char p[256];
	int fd = raw_connect_from(at, "127.0.0.1");
	write_all(fd, p, hello_full(p, next_id++, 42, "127.0.0.1:9"));
	(void)t;
	read_answer(fd);
	return fd;
}

/* ---- known traffic -------------------------------------------------------- */

#define N_MSGS 200

/* Sizes from 0 up, the last three large: in parts on the wire (above
 * 32 KiB, and several parts of 256 KiB), counted as one message each. */
#define BIG_MAX (1u << 20)
static size_t msg_size(unsigned i)
{
	static const size_t big[] = { 40000, 300000, BIG_MAX };
	if (i >= N_MSGS - 3)
		return big[i - (N_MSGS - 3)];
	return (size_t)i * 37u % 5000u; /* 0 included */
}

/* Receives N_MSGS on @p's transport, checking their sizes in order. */
static void *recv_known(void *p)
{
	struct zap_transport *t = p;
	for (unsigned i = 0; i < N_MSGS; i++) {
		struct zap_msg *m = NULL;
		assert_int_equal(zap_recv(t, NULL, &m), 0);
		assert_int_equal(zap_msg_len(m), msg_size(i));
		zap_msg_release(m);
	}
	return NULL;
}

static void check_text_has(const char *text, const char *want)
{
	if (!strstr(text, want))
		fail_msg("metrics lack \"%s\":\n%s", want, text);
}

/*
 * N messages of known sizes one way, one reply: both ends count exactly
 * those messages and bytes, one connection dialed and one accepted, the
 * peer listing says the same per connection, and the rendered metrics
 * carry the numbers. @shm: whether the same-host upgrade may happen.
 */
static void known_traffic(bool shm)
{
	char ab[ZAP_PEER_MAX], bb[ZAP_PEER_MAX];
	unsigned char *buf = malloc(BIG_MAX);
	uint64_t bytes = 0;
	pthread_t rx;
	struct zap_stats sa, sb;

	setenv("ZAP_SHM", shm ? "user" : "off", 1);
	struct zap_transport *a = ep_open(), *b = ep_open();
	unsetenv("ZAP_SHM");
	ep_addr(a, ab);
	ep_addr(b, bb);

	stats(a, &sa);
	assert_int_equal(sa.msgs_sent, 0);
	assert_int_equal(sa.conns_open, 0);
	assert_int_equal(sa.peers, 0);
	assert_int_equal(zap_peer_list(a, NULL, 0), 0);

	assert_non_null(buf);
	/* b receives meanwhile: the large ones do not fit the sockets. */
	assert_int_equal(pthread_create(&rx, NULL, recv_known, b), 0);
	for (unsigned i = 0; i < N_MSGS; i++) {
		zt_fill(buf, msg_size(i), i);
		assert_int_equal(zap_send(a, bb, buf, msg_size(i), NULL), 0);
		bytes += msg_size(i);
	}
	pthread_join(rx, NULL);
	free(buf);
	/* A reply: the accepted end sends too. */
	struct zap_msg *m = NULL;
	assert_int_equal(zap_send(b, ab, "pong", 4, NULL), 0);
	assert_int_equal(zap_recv(a, NULL, &m), 0);
	zap_msg_release(m);

	stats(a, &sa);
	stats(b, &sb);
	assert_int_equal(sa.msgs_sent, N_MSGS);
	assert_int_equal(sa.bytes_sent, bytes);
	assert_int_equal(sa.msgs_received, 1);
	assert_int_equal(sa.bytes_received, 4);
	assert_int_equal(sb.msgs_received, N_MSGS);
	assert_int_equal(sb.bytes_received, bytes);
	assert_int_equal(sb.msgs_sent, 1);
	assert_int_equal(sb.bytes_sent, 4);
	assert_int_equal(sa.conns_dialed, 1);
	assert_int_equal(sa.conns_accepted, 0);
	assert_int_equal(sb.conns_accepted, 1);
	assert_int_equal(sb.conns_dialed, 0);
	assert_int_equal(sa.conns_open, 1);
	assert_int_equal(sb.conns_open, 1);
	assert_int_equal(closed_total(&sa), 0);
	assert_int_equal(closed_total(&sb), 0);
	assert_int_equal(sa.peers, 1);
	assert_int_equal(sb.peers, 1);
	assert_int_equal(sb.rxq_msgs, 0);
	assert_int_equal(sb.rxq_bytes, 0);
	assert_true(sb.rxq_limit > 0);
	assert_true(sb.partial_limit > 0);
	assert_int_equal(sb.drops_partial, 0);
	assert_int_equal(sb.drops_shutdown, 0);

	/* The listing: one connection each, the same numbers. */
	struct zap_peer_info pa[4], pb[4];
	pa[0].size = sizeof(pa[0]);
	pb[0].size = sizeof(pb[0]);
	assert_int_equal(zap_peer_list(a, pa, 4), 1);
	assert_int_equal(zap_peer_list(b, pb, 4), 1);
	assert_string_equal(pa[0].peer, bb);
	assert_true(pa[0].dialed);
	assert_false(pb[0].dialed);
	assert_false(pa[0].tls);
	assert_string_equal(pa[0].identity, ""); /* plaintext TCP proves no identity */
	assert_int_equal(pa[0].msgs_sent, N_MSGS);
	assert_int_equal(pa[0].bytes_sent, bytes);
	assert_int_equal(pa[0].msgs_received, 1);
	assert_int_equal(pb[0].msgs_received, N_MSGS);
	assert_int_equal(pb[0].bytes_received, bytes);
	assert_int_equal(pb[0].bytes_sent, 4);
	assert_true(pa[0].rtt_us >= 0); /* TCP has a round-trip estimate */
	assert_true(pa[0].conn_id > 0);

	char path[16];
	assert_int_equal(zap_peer_path(a, bb, path, sizeof(path)), 0);
	assert_string_equal(pa[0].path, path);
	if (!shm) {
		assert_string_equal(path, "tcp");
		assert_int_equal(sa.shm_upgrades, 0);
		assert_int_equal(sb.shm_upgrades, 0);
	} else if (!strcmp(path, "shm")) {
		/* Each end counts its own direction's switch. The accepted
		 * end's comes with the dialer's confirmation, which its
		 * progress reads in its own time: wait for it (a's path is
		 * shm, so b has its rings and the confirmation was sent). */
		char pbp[16] = "";
		uint64_t end = zt_now_ms() + zt_timeout_ms(GUARD_MS);
		while (zap_peer_path(b, ab, pbp, sizeof(pbp)) || strcmp(pbp, "shm")) {
			assert_true(zt_now_ms() < end);
			pump(b, 10);
		}
		stats(b, &sb);
		assert_int_equal(sa.shm_upgrades, 1);
		assert_int_equal(sb.shm_upgrades, 1);
		assert_int_equal(sa.shm_refused, 0);
		assert_int_equal(sb.shm_refused, 0);
	} else {
		fprintf(stderr, "# no shared-memory upgrade here (path %s): its counts "
				"not checked\n", path);
	}

	/* The rendered text: exact numbers, the labels. */
	int len = zap_metrics_render(a, NULL, 0);
	assert_true(len > 0);
	char *text = malloc((size_t)len + 1);
	assert_non_null(text);
	assert_int_equal(zap_metrics_render(a, text, (size_t)len + 1), len);
	assert_int_equal(strlen(text), (size_t)len);
	char want[512];
	snprintf(want, sizeof(want),
		 "zap_messages_sent_total{transport=\"default\",endpoint=\"%s\"} %d\n", ab,
		 N_MSGS);
	check_text_has(text, want);
	snprintf(want, sizeof(want),
		 "zap_bytes_sent_total{transport=\"default\",endpoint=\"%s\"} %llu\n", ab,
		 (unsigned long long)bytes);
	check_text_has(text, want);
	check_text_has(text, "# TYPE zap_connections_closed_total counter\n");
	snprintf(want, sizeof(want), "zap_peer_messages_sent_total{transport=\"default\","
				     "endpoint=\"%s\",peer=\"%s\",identity=\"\",path=\"%s\"",
		 ab, bb, path);
	check_text_has(text, want);
	/* Truncation: like snprintf, the whole length, a terminated prefix. */
	char small[10];
	assert_int_equal(zap_metrics_render(a, small, sizeof(small)), len);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, text, sizeof(small) - 1);
	free(text);

	/* A struct from an older header (only the first members) gets those. */
	struct {
		size_t size;
		uint64_t msgs_sent, bytes_sent;
		uint64_t canary;
	} old = { .size = offsetof(struct zap_stats, msgs_received), .canary = 77 };
	assert_int_equal(zap_stats(a, (struct zap_stats *)(void *)&old), 0);
	assert_int_equal(old.msgs_sent, N_MSGS);
	assert_int_equal(old.canary, 77);

	/* Events: each end saw the connection come up (and move to shared
	 * memory where it did), a's as dialed. */
	struct zap_event ev[3];
	int up[] = { ZAP_EVENT_CONNECTED, ZAP_EVENT_UPGRADED };
	bool a_shm = !strcmp(path, "shm");
	expect_events(a, up, NULL, a_shm ? 2 : 1, ev);
	assert_true(ev[0].dialed);
	assert_string_equal(ev[0].peer, bb);
	assert_int_equal(ev[0].conn_id, pa[0].conn_id);
	expect_events(b, up, NULL, a_shm ? 2 : 1, ev);
	assert_false(ev[0].dialed);
	assert_int_equal(ev[0].conn_id, pb[0].conn_id);

	zap_close(a);
	/* b sees a's end as an orderly close, once. */
	wait_closed(b, ZAP_CLOSE_PEER_EOF, 1);
	int down[] = { ZAP_EVENT_DISCONNECTED };
	int eof[] = { ZAP_CLOSE_PEER_EOF };
	expect_events(b, down, eof, 1, ev);
	assert_int_equal(ev[0].conn_id, pb[0].conn_id);
	stats(b, &sb);
	assert_int_equal(closed_total(&sb), 1);
	assert_int_equal(sb.conns_open, 0);
	assert_int_equal(sb.peers, 0);
	/* Traffic of closed connections stays counted. */
	assert_int_equal(sb.msgs_received, N_MSGS);
	assert_int_equal(sb.bytes_received, bytes);
	assert_int_equal(zap_peer_list(b, NULL, 0), 0);
	zap_close(b);
}

static void test_known_traffic_tcp(void **state)
{
	(void)state;
	known_traffic(false);
}

static void test_known_traffic_shm(void **state)
{
	(void)state;
	known_traffic(true);
}

/*
 * Messages received but not taken when zap_shutdown() comes are the ones
 * zap_close() drops: the gauge says how many, and the queue's figures
 * agree with what was taken.
 */
static void test_drops_at_shutdown(void **state)
{
	char bb[ZAP_PEER_MAX];
	struct zap_stats s;
	struct zap_msg *m = NULL;
	(void)state;

	struct zap_transport *a = ep_open(), *b = ep_open();
	ep_addr(b, bb);
	for (int i = 0; i < 5; i++)
		assert_int_equal(zap_send(a, bb, "12345678", 8, NULL), 0);
	/* The round that delivers the first usually reads them all. */
	assert_int_equal(zap_recv(b, NULL, &m), 0);
	zap_msg_release(m);
	stats(b, &s);
	assert_true(s.msgs_received >= 1);
	assert_int_equal(s.rxq_msgs, s.msgs_received - 1);
	assert_int_equal(s.rxq_bytes, s.rxq_msgs * 8);
	assert_int_equal(s.drops_shutdown, 0);
	fprintf(stderr, "# %llu of 5 queued at shutdown\n", (unsigned long long)s.rxq_msgs);
	assert_int_equal(zap_shutdown(b), 0);
	uint64_t queued = s.rxq_msgs;
	stats(b, &s);
	assert_int_equal(s.drops_shutdown, queued);
	zap_close(b);
	zap_close(a);
}

/* ---- each close reason, exactly once -------------------------------------- */

/*
 * A raw peer that has sent part of a 1 MiB message, which the endpoint
 * holds, then goes: with a reset (SO_LINGER 0) or with an orderly close
 * (FIN). Either way the connection is counted once, under @reason, and
 * the partial message is dropped and counted.
 */
static void partial_then_gone(bool reset, int reason)
{
	char bb[ZAP_PEER_MAX];
	unsigned char p[64];
	struct zap_stats s;

	struct zap_transport *b = ep_open();
	ep_addr(b, bb);
	int fd = raw_peer(b, bb);
	write_all(fd, p, zt_wire_hdr(p, 2, 1u << 20));
	write_all(fd, p, 32);
	do { /* until the endpoint holds the partial message */
		pump(b, 20);
		stats(b, &s);
	} while (!s.partial_bytes);
	if (reset) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(fd);
	} else {
		shutdown(fd, SHUT_WR);
	}
	expect_one_close(b, reason, true);
	stats(b, &s);
	assert_int_equal(s.drops_partial, 1);
	assert_int_equal(s.partial_bytes, 0);
	if (!reset)
		close(fd);
	zap_close(b);
}

static void test_close_reset(void **state)
{
	(void)state;
	partial_then_gone(true, ZAP_CLOSE_PEER_RESET);
}

static void test_close_eof_mid_message(void **state)
{
	(void)state;
	partial_then_gone(false, ZAP_CLOSE_PEER_EOF);
}

/*
 * One raw peer against an endpoint opened with @var=@val (NULL: none):
 * established (a valid HELLO) when @hello_claim is NULL; else, from
 * 127.0.0.1, a HELLO claiming @hello_claim ("": no HELLO at all), which
 * the endpoint refuses. Then it writes @len bytes of @bytes. Its
 * connection must end once, under @reason, with the matching events.
 */
static void raw_close(const char *var, const char *val, const char *hello_claim,
		      const void *bytes, size_t len, int reason)
{
	char bb[ZAP_PEER_MAX];
	unsigned char p[256];
	int fd;

	struct zap_transport *b = var ? ep_open_env(var, val) : ep_open();
	ep_addr(b, bb);
	if (hello_claim) {
		fd = raw_connect_from(bb, "127.0.0.1");
		if (hello_claim[0])
			write_all(fd, p, hello_addr(p, hello_claim));
	} else {
		fd = raw_peer(b, bb);
	}
	if (len)
		write_all(fd, bytes, len);
	expect_one_close(b, reason, !hello_claim);
	close(fd);
	zap_close(b);
}

/* Bytes that are not a frame after the handshake. */
static void test_close_protocol(void **state)
{
	unsigned char p[16];
	(void)state;
	zt_wire_hdr(p, 2, 4);
	memcpy(p, "HTTP", 4); /* bad magic */
	raw_close(NULL, NULL, NULL, p, sizeof(p), ZAP_CLOSE_PROTOCOL);
}

/* A frame declaring more than ZAP_MAX_MSG_BYTES. */
static void test_close_oversize(void **state)
{
	unsigned char p[16];
	(void)state;
	zt_wire_hdr(p, 2, (64ull << 20) + 1);
	raw_close(NULL, NULL, NULL, p, sizeof(p), ZAP_CLOSE_OVERSIZE);
}

/* A HELLO claiming a host the connection does not come from. */
static void test_close_identity(void **state)
{
	(void)state;
	raw_close(NULL, NULL, "127.0.0.9:9", NULL, 0, ZAP_CLOSE_IDENTITY);
}

/* No HELLO within ZAP_TCP_HANDSHAKE_MS. */
static void test_close_handshake(void **state)
{
	(void)state;
	raw_close("ZAP_TCP_HANDSHAKE_MS", "50", "", NULL, 0, ZAP_CLOSE_HANDSHAKE);
}

/* A partial frame that makes no progress for ZAP_TCP_STALL_MS. */
static void test_close_stall(void **state)
{
	unsigned char p[8] = "ZAPW"; /* half a header */
	(void)state;
	raw_close("ZAP_TCP_STALL_MS", "50", NULL, p, sizeof(p), ZAP_CLOSE_STALL);
}

/* No frame byte either way for ZAP_TCP_IDLE_MS. */
static void test_close_idle(void **state)
{
	(void)state;
	raw_close("ZAP_TCP_IDLE_MS", "50", NULL, NULL, 0, ZAP_CLOSE_IDLE);
}

/*
 * At the descriptor cap the connection idle the longest makes room for a
 * newcomer: one eviction, counted once. The cap is read at open from
 * RLIMIT_NOFILE: a soft limit of 64 while b opens gives it the floor of 8
 * connections (WIRE.md, "Limits against floods").
 */
static void test_close_evicted(void **state)
{
	char bb[ZAP_PEER_MAX];
	struct rlimit rl, low;
	struct zap_stats s;
	int fd[9];
	(void)state;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	low = rl;
	low.rlim_cur = 64;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	struct zap_transport *b = ep_open();
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	ep_addr(b, bb);
	for (int i = 0; i < 8; i++)
		fd[i] = raw_peer(b, bb);
	/* Only a connection idle for 250 ms or more may be evicted. */
	zt_sleep_ms(400);
	fd[8] = raw_peer(b, bb);
	wait_closed(b, ZAP_CLOSE_EVICTED, 1);
	pump(b, 50);
	stats(b, &s);
	assert_int_equal(s.conns_accepted, 9);
	assert_int_equal(closed_total(&s), 1);
	assert_int_equal(s.conns_closed[ZAP_CLOSE_EVICTED], 1);
	assert_int_equal(s.conns_open, 8);
	for (int i = 0; i < 9; i++)
		close(fd[i]);
	zap_close(b);
}

/* A dial whose sender's deadline passes before the peer answers its HELLO:
 * counted on the dialing side as send_aborted, with a refused event. */
static void test_close_dial_aborted(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	char peer[64];
	struct zap_stats s;
	struct zap_ctx *ctx;
	(void)state;

	/* A listener that never answers: the kernel completes connect(). */
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(peer, sizeof(peer), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));

	struct zap_transport *a = ep_open();
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, 50ull * 1000000u);
	assert_int_equal(zap_send(a, peer, "x", 1, ctx), -ETIMEDOUT);
	zap_ctx_free(ctx);
	stats(a, &s);
	assert_int_equal(s.conns_dialed, 1);
	assert_int_equal(s.conns_open, 0);
	assert_int_equal(closed_total(&s), 1);
	assert_int_equal(s.conns_closed[ZAP_CLOSE_SEND_ABORTED], 1);
	assert_int_equal(s.msgs_sent, 0);
	struct zap_event ev[1];
	const int types[] = { ZAP_EVENT_REFUSED };
	const int reasons[] = { ZAP_CLOSE_SEND_ABORTED };
	expect_events(a, types, reasons, 1, ev);
	assert_true(ev[0].dialed);
	assert_string_equal(ev[0].peer, peer);
	zap_close(a);
	close(lfd);
}

/* Events nobody takes: the last TCP_EV_MAX (128) stay, the rest count as
 * lost, oldest first. */
static void test_events_lost(void **state)
{
	char bb[ZAP_PEER_MAX];
	unsigned char p[256];
	struct zap_stats s;
	(void)state;

	struct zap_transport *b = ep_open();
	ep_addr(b, bb);
	for (int i = 0; i < 130; i++) {
		/* A claim the connection does not back: refused at once. */
		int fd = raw_connect_from(bb, "127.0.0.1");
		write_all(fd, p, hello_addr(p, "127.0.0.9:9"));
		char c;
		assert_int_equal(recv(fd, &c, 1, 0), 0); /* closed by b */
		close(fd);
	}
	wait_closed(b, ZAP_CLOSE_IDENTITY, 130);
	stats(b, &s);
	assert_int_equal(s.events_lost, 2);
	struct zap_event *ev = calloc(200, sizeof(*ev));
	assert_non_null(ev);
	ev[0].size = sizeof(*ev);
	assert_int_equal(zap_events(b, ev, 127), 127);
	for (int i = 0; i < 127; i++) {
		assert_int_equal(ev[i].type, ZAP_EVENT_REFUSED);
		assert_int_equal(ev[i].reason, ZAP_CLOSE_IDENTITY);
	}
	/* The last one into a caller's struct from an older header (type and
	 * reason only): what it covers, nothing past it. */
	struct old_event {
		size_t size;
		int type, reason;
	} old[2] = { { .size = sizeof(old[0]) }, { .size = 5, .type = 6, .reason = 7 } };
	_Static_assert(sizeof(struct old_event) == offsetof(struct zap_event, time_ms),
		       "the first members of struct zap_event");
	assert_int_equal(zap_events(b, (struct zap_event *)(void *)old, 2), 1);
	assert_int_equal(old[0].type, ZAP_EVENT_REFUSED);
	assert_int_equal(old[0].reason, ZAP_CLOSE_IDENTITY);
	assert_int_equal(old[1].size, 5); /* untouched: one event only */
	assert_int_equal(old[1].type, 6);
	assert_int_equal(zap_events(b, ev, 200), 0);
	free(ev);
	struct zap_event one = { .size = sizeof(one) };
	assert_int_equal(zap_events(b, &one, 0), -EINVAL);
	assert_int_equal(zap_events(b, NULL, 1), -EINVAL);
	zap_close(b);
}

/* ---- concurrent senders (the unit suite runs this under TSan) ------------- */

#define SENDERS 6
#define PER_SENDER 500

struct sender {
	pthread_t th;
	struct zap_transport *t;
	const char *peer;
	unsigned id;
	int err;
};

static void *sender_main(void *p)
{
	struct sender *s = p;
	unsigned char buf[300];
	memset(buf, (int)s->id, sizeof(buf));
	for (unsigned i = 0; i < PER_SENDER && !s->err; i++)
		s->err = zap_send(s->t, s->peer, buf, 1 + s->id * 40 + i % 7, NULL);
	return NULL;
}

/* Reads stats and the listing over and over while traffic flows. */
struct watcher {
	pthread_t th;
	struct zap_transport *t[2];
	atomic_bool stop;
	uint64_t rounds;
};

static void *watcher_main(void *p)
{
	struct watcher *w = p;
	while (!atomic_load(&w->stop)) {
		for (int i = 0; i < 2; i++) {
			struct zap_stats s = { .size = sizeof(s) };
			struct zap_peer_info pi[2] = { { .size = sizeof(pi[0]) } };
			char text[256];
			if (zap_stats(w->t[i], &s) || zap_peer_list(w->t[i], pi, 2) < 0 ||
			    zap_metrics_render(w->t[i], text, sizeof(text)) < 0)
				return NULL;
		}
		w->rounds++;
	}
	return NULL;
}

static void test_concurrent_senders(void **state)
{
	char bb[ZAP_PEER_MAX];
	struct sender s[SENDERS];
	struct watcher w = { 0 };
	uint64_t want_bytes = 0;
	(void)state;

	struct zap_transport *a = ep_open(), *b = ep_open();
	ep_addr(b, bb);
	w.t[0] = a;
	w.t[1] = b;
	atomic_init(&w.stop, false);
	assert_int_equal(pthread_create(&w.th, NULL, watcher_main, &w), 0);
	for (unsigned i = 0; i < SENDERS; i++) {
		s[i] = (struct sender){ .t = a, .peer = bb, .id = i };
		for (unsigned k = 0; k < PER_SENDER; k++)
			want_bytes += 1 + i * 40 + k % 7;
		assert_int_equal(pthread_create(&s[i].th, NULL, sender_main, &s[i]), 0);
	}
	uint64_t got = 0, got_bytes = 0;
	while (got < SENDERS * PER_SENDER) {
		struct zap_msg *m = NULL;
		assert_int_equal(zap_recv(b, NULL, &m), 0);
		got++;
		got_bytes += zap_msg_len(m);
		zap_msg_release(m);
	}
	for (unsigned i = 0; i < SENDERS; i++) {
		pthread_join(s[i].th, NULL);
		assert_int_equal(s[i].err, 0);
	}
	atomic_store(&w.stop, true);
	pthread_join(w.th, NULL);
	assert_int_equal(got_bytes, want_bytes);

	struct zap_stats sa, sb;
	stats(a, &sa);
	stats(b, &sb);
	assert_int_equal(sa.msgs_sent, SENDERS * PER_SENDER);
	assert_int_equal(sa.bytes_sent, want_bytes);
	assert_int_equal(sb.msgs_received, SENDERS * PER_SENDER);
	assert_int_equal(sb.bytes_received, want_bytes);
	/* Concurrent first sends may both dial: the loser is retired, and
	 * whatever it carried is still counted. */
	assert_true(sa.conns_dialed >= 1);
	assert_int_equal(sa.conns_dialed + sa.conns_accepted,
			 sa.conns_open + closed_total(&sa));
	fprintf(stderr, "# %llu stats/listing/render rounds during the traffic\n",
		(unsigned long long)w.rounds);
	zap_close(a);
	zap_close(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_traffic_tcp),
		cmocka_unit_test(test_known_traffic_shm),
		cmocka_unit_test(test_drops_at_shutdown),
		cmocka_unit_test(test_close_reset),
		cmocka_unit_test(test_close_eof_mid_message),
		cmocka_unit_test(test_close_protocol),
		cmocka_unit_test(test_close_oversize),
		cmocka_unit_test(test_close_identity),
		cmocka_unit_test(test_close_handshake),
		cmocka_unit_test(test_close_stall),
		cmocka_unit_test(test_close_idle),
		cmocka_unit_test(test_close_evicted),
		cmocka_unit_test(test_close_dial_aborted),
		cmocka_unit_test(test_events_lost),
		cmocka_unit_test(test_concurrent_senders),
	};
	setenv("ZAP_TRANSPORT_QUIET", "1", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
