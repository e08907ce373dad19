/* SPDX-License-Identifier: MIT */
/*
 * Wire version 3 (plugins/default/WIRE.md, "Large messages"): messages
 * above 32 KiB go in parts, and other messages to the same peer pass
 * between them, over TCP and through the shared-memory ring (run twice,
 * with ZAP_SHM=off and with the ring).
 *
 *  - many threads sending large and small messages at once to one peer:
 *    every message arrives whole and correct, and each thread's messages
 *    in the order it sent them (sizes up to the maximum);
 *  - a small message sent while a large one is on its way is delivered
 *    before the large one completes (no head-of-line blocking);
 *  - while a large message's sender waits for room, leading, receivers of
 *    its endpoint keep their deadline, are woken by a cancel, and get a
 *    message from the peer;
 *  - a previous-version (2) peer interoperates either way: as dialer
 *    (answered in version 2, sent whole DATA frames) and as acceptor
 *    (which closes at a HELLO of version 3 or 4; the dialer offers each
 *    earlier version in turn);
 *  - a peer that breaks the framing is closed with the reason, after the
 *    messages it completed were delivered: BEGIN while a message is open,
 *    MORE with none open or beyond its length, DATA above 32 KiB, a total
 *    above the maximum, and a message kept open by small messages alone
 *    (the stall limit);
 *  - a message that grows slower than ZAP_TCP_MIN_RATE (a byte at a
 *    time) is closed after the stall limit, one that keeps the rate is
 *    delivered; the same through a raw same-host peer's ring (empty or
 *    64-byte chunks of a 64 MiB message), while another peer is served.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "log-capture.h"
#include "zap-test.h"
#include "shm-side.h"
#include "shm_raw.h"
#include "ring_peer.h"

#define MAX_MSG (16u << 20)
#define SOLO (32u << 10)
#define THREADS 4

static struct zap_transport *ep_open(void)
{
	struct zap_attr a = { .size = sizeof(a), .listen = "127.0.0.1:0",
			      .max_msg_size = MAX_MSG };
	struct zap_transport *t = NULL;

	assert_int_equal(zap_pick("=default", 0, &a, &t), 0);
	return t;
}

static void ep_addr(struct zap_transport *t, char *buf)
{
	assert_int_equal(zap_transport_address(t, buf, ZAP_PEER_MAX), 0);
}

static struct zap_msg *recv_within(struct zap_transport *t, unsigned ms)
{
	struct zap_msg *m;

	assert_int_equal(zt_recv_within(t, ms, &m), 0);
	return m;
}

/* ---- a message that says who sent it, which one, and checks itself ------ */

struct tag {
	uint32_t thread, seq;
	uint64_t len;
};

static uint64_t seed_of(uint32_t thread, uint32_t seq)
{
	return (uint64_t)thread << 32 | seq;
}

static void make_msg(unsigned char *buf, size_t len, uint32_t thread, uint32_t seq)
{
	struct tag t = { thread, seq, len };

	zt_fill(buf, len, seed_of(thread, seq));
	memcpy(buf, &t, len < sizeof(t) ? len : sizeof(t));
}

/* The tag of @m, which must be whole and correct (tags need 16 bytes: a
 * shorter message is checked against the sender's count of short ones). */
static struct tag check_msg(const struct zap_msg *m)
{
	const unsigned char *d = zap_msg_data(m);
	size_t len = zap_msg_len(m);
	struct tag t = { 0 };

	if (len < sizeof(t))
		return (struct tag){ UINT32_MAX, 0, len };
	memcpy(&t, d, sizeof(t));
	assert_int_equal(t.len, len);
	assert_true(t.thread < THREADS);
	/* Bytes after the tag hold the pattern of the whole message. */
	unsigned char *want = malloc(len);
	assert_non_null(want);
	zt_fill(want, len, seed_of(t.thread, t.seq));
	assert_memory_equal(d + sizeof(t), want + sizeof(t), len - sizeof(t));
	free(want);
	return t;
}

/* ---- many senders, large and small, one peer ----------------------------- */

static const size_t sizes[] = { 16,         64,          SOLO - 1,  SOLO,
				SOLO + 1,   100000,      256u << 10, (256u << 10) + 1,
				1u << 20,   (4u << 20) + 7, 1000 };

struct sender {
	struct zap_transport *t;
	const char *peer;
	uint32_t id;
	uint32_t sent;
	int rc;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	size_t n = sizeof(sizes) / sizeof(sizes[0]);
	unsigned char *buf = malloc(MAX_MSG);

	/* Each thread its own order of sizes; thread 0 ends with the
	 * largest message the peer accepts. */
	for (size_t round = 0; buf && round < 2 && !s->rc; round++)
		for (size_t i = 0; i < n && !s->rc; i++) {
			size_t len = sizes[(i * (s->id + 3) + round) % n];
			make_msg(buf, len, s->id, s->sent);
			s->rc = zap_send(s->t, s->peer, buf, len, NULL);
			if (!s->rc)
				s->sent++;
		}
	if (buf && !s->rc && s->id == 0) {
		make_msg(buf, MAX_MSG, s->id, s->sent);
		s->rc = zap_send(s->t, s->peer, buf, MAX_MSG, NULL);
		if (!s->rc)
			s->sent++;
	}
	free(buf);
	return NULL;
}

static void test_mixed_senders(void **state)
{
	struct zap_transport *r = ep_open(), *s = ep_open();
	char ra[ZAP_PEER_MAX];
	struct sender snd[THREADS];
	pthread_t th[THREADS];
	uint32_t next[THREADS] = { 0 };
	unsigned total = 0, got = 0;
	(void)state;

	ep_addr(r, ra);
	for (uint32_t i = 0; i < THREADS; i++) {
		snd[i] = (struct sender){ .t = s, .peer = ra, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, sender_main, &snd[i]), 0);
	}
	for (uint32_t i = 0; i < THREADS; i++)
		total += 2 * (unsigned)(sizeof(sizes) / sizeof(sizes[0])) + (i == 0);
	while (got < total) {
		struct zap_msg *m = recv_within(r, 60000);
		struct tag t = check_msg(m);
		/* One thread's sends are sequential: they arrive in order. */
		assert_int_equal(t.seq, next[t.thread]);
		next[t.thread]++;
		got++;
		zap_msg_release(m);
	}
	for (uint32_t i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(snd[i].rc, 0);
		assert_int_equal(next[i], snd[i].sent);
	}
	zap_close(s);
	zap_close(r);
}

/* Small messages, one after the other, 1,000 and then on until 20 large
 * sends were stopped or 50,000 went (test_deadline_between_parts). */
static atomic_uint small_done;
struct stopper;
static struct stopper *small_until;
static unsigned stopped_count(void);

static void *small_main(void *arg)
{
	struct sender *s = arg;
	unsigned char buf[1000];

	for (uint32_t i = 0; (i < 1000 || stopped_count() < 20) && i < 50000 && !s->rc;
	     i++) {
		size_t len = 16 + (i * 37) % (sizeof(buf) - 16);
		make_msg(buf, len, s->id, s->sent);
		s->rc = zap_send(s->t, s->peer, buf, len, NULL);
		if (!s->rc)
			s->sent++;
	}
	atomic_fetch_add(&small_done, 1);
	return NULL;
}

/* ---- a small message passes a large one ----------------------------------- */

struct one {
	struct zap_transport *t;
	const char *peer;
	size_t len;
	uint32_t thread;
	atomic_bool started;
	int rc;
};

static void *one_main(void *arg)
{
	struct one *o = arg;
	unsigned char *buf = malloc(o->len);

	assert_non_null(buf);
	make_msg(buf, o->len, o->thread, 0);
	atomic_store(&o->started, true);
	o->rc = zap_send(o->t, o->peer, buf, o->len, NULL);
	free(buf);
	return NULL;
}

/*
 * Connect @s to @r (and, with the ring, set it up), then start @large on
 * its thread @tl: a MAX_MSG message from @s to @r, which reads nothing
 * meanwhile, so more than any socket buffer or ring holds of it stays on
 * the sender's side.
 */
static void start_large(struct zap_transport *r, struct zap_transport *s, const char *ra,
			struct one *large, pthread_t *tl)
{
	assert_int_equal(zap_send(s, ra, "hello, peer", 11, NULL), 0);
	struct zap_msg *m = recv_within(r, 10000);
	zap_msg_release(m);
	assert_int_equal(pthread_create(tl, NULL, one_main, large), 0);
	while (!atomic_load(&large->started))
		zt_sleep_ms(1);
	zt_sleep_ms(200); /* its first parts are out (if not, still passes) */
}

/* The next message on @t: @len bytes from thread @thread, whole and
 * correct. */
static void expect_msg(struct zap_transport *t, size_t len, uint32_t thread)
{
	struct zap_msg *m = recv_within(t, 60000);
	struct tag tg = check_msg(m);

	assert_int_equal(zap_msg_len(m), len);
	assert_int_equal(tg.thread, thread);
	zap_msg_release(m);
}

static void test_small_passes_large(void **state)
{
	struct zap_transport *r = ep_open(), *s = ep_open();
	char ra[ZAP_PEER_MAX];
	pthread_t tl, ts;
	(void)state;

	ep_addr(r, ra);
	struct one large = { .t = s, .peer = ra, .len = MAX_MSG, .thread = 1 };
	start_large(r, s, ra, &large, &tl);
	struct one small = { .t = s, .peer = ra, .len = 64, .thread = 2 };
	assert_int_equal(pthread_create(&ts, NULL, one_main, &small), 0);
	while (!atomic_load(&small.started))
		zt_sleep_ms(1);
	zt_sleep_ms(50);
	/* The small one goes between two parts, so it completes first. */
	expect_msg(r, 64, 2);
	expect_msg(r, MAX_MSG, 1);
	pthread_join(tl, NULL);
	pthread_join(ts, NULL);
	assert_int_equal(large.rc, 0);
	assert_int_equal(small.rc, 0);
	zap_close(s);
	zap_close(r);
}

/* ---- a receiver while a sender of its endpoint leads ---------------------- */

struct cancelled {
	struct zap_transport *t;
	struct zap_ctx *ctx;
	atomic_bool started;
	int rc;
};

static void *cancelled_main(void *arg)
{
	struct cancelled *c = arg;
	struct zap_msg *m = NULL;

	atomic_store(&c->started, true);
	c->rc = zap_recv(c->t, c->ctx, &m);
	if (!c->rc)
		zap_msg_release(m);
	return NULL;
}

/*
 * s streams a large message to r, which reads nothing: s's sender waits
 * for room, leading s's progress. Receivers of s meanwhile (they yield to
 * that sender for a while before they sleep; tcp_progress.c,
 * follow_by_yielding()) keep their deadline, are woken by a cancel, and
 * get a message r sends them; then the large message arrives whole.
 */
static void test_recv_beside_leading_sender(void **state)
{
	struct zap_transport *r = ep_open(), *s = ep_open();
	char ra[ZAP_PEER_MAX], sa[ZAP_PEER_MAX];
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	pthread_t tl, tc;
	(void)state;

	ep_addr(r, ra);
	ep_addr(s, sa);
	struct one large = { .t = s, .peer = ra, .len = MAX_MSG, .thread = 1 };
	start_large(r, s, ra, &large, &tl);

	/* A deadline. */
	assert_int_equal(zap_ctx_new(&ctx), 0);
	assert_int_equal(zap_ctx_set_timeout(ctx, 100 * 1000000ull), 0);
	uint64_t t0 = zt_now_ns();
	assert_int_equal(zap_recv(s, ctx, &m), -ETIMEDOUT);
	assert_null(m);
	assert_true(zt_now_ns() - t0 >= 95 * 1000000ull);
	zap_ctx_free(ctx);

	/* A cancel. */
	struct cancelled c = { .t = s };
	assert_int_equal(zap_ctx_new(&c.ctx), 0);
	assert_int_equal(pthread_create(&tc, NULL, cancelled_main, &c), 0);
	while (!atomic_load(&c.started))
		zt_sleep_ms(1);
	zt_sleep_ms(50);
	zap_ctx_cancel(c.ctx);
	pthread_join(tc, NULL);
	assert_int_equal(c.rc, -ECANCELED);
	zap_ctx_free(c.ctx);

	/* A message the other way, while the large one still waits. */
	unsigned char vote[64];
	make_msg(vote, sizeof(vote), 2, 0);
	assert_int_equal(zap_send(r, sa, vote, sizeof(vote), NULL), 0);
	expect_msg(s, sizeof(vote), 2);
	expect_msg(r, MAX_MSG, 1);
	pthread_join(tl, NULL);
	assert_int_equal(large.rc, 0);
	zap_close(s);
	zap_close(r);
}

/* ---- large sends stopped between parts, small ones beside them ------------ */

struct stopper {
	struct zap_transport *t;
	const char *peer;
	atomic_bool stop;
	atomic_uint stopped; /* sends stopped by their deadline */
};

static unsigned stopped_count(void)
{
	return small_until ? atomic_load(&small_until->stopped) : 0;
}

static void *stopper_main(void *arg)
{
	struct stopper *s = arg;
	unsigned char *buf = malloc(MAX_MSG);

	assert_non_null(buf);
	make_msg(buf, MAX_MSG, 3, 0);
	while (!atomic_load(&s->stop)) {
		struct zap_ctx *ctx;
		assert_int_equal(zap_ctx_new(&ctx), 0);
		zap_ctx_set_timeout(ctx, 1000000u); /* 1 ms: usually mid-message */
		int r = zap_send(s->t, s->peer, buf, MAX_MSG, ctx);
		zap_ctx_free(ctx);
		assert_true(r == 0 || r == -ETIMEDOUT);
		if (r == -ETIMEDOUT)
			atomic_fetch_add(&s->stopped, 1);
	}
	free(buf);
	return NULL;
}

/*
 * A large send whose deadline stops it between two parts retires the
 * connection, while other threads' small messages wait in line on it (or,
 * with rings, write into the ring): every small send that returned 0 is
 * delivered, whole, in its sender's order, and nothing breaks the framing
 * (no "data on the connection after the switch to shared memory").
 */
static void test_deadline_between_parts(void **state)
{
	struct zap_transport *r = ep_open(), *s = ep_open();
	char ra[ZAP_PEER_MAX];
	struct stopper st = { 0 };
	pthread_t ts, tp[2];
	struct sender small[2];
	uint32_t next[THREADS] = { 0 };
	unsigned got = 0, want = 0;
	(void)state;

	ep_addr(r, ra);
	zap_set_log_handler(zt_log_capture, NULL);
	zt_log_clear();
	st = (struct stopper){ .t = s, .peer = ra };
	small_until = &st;
	assert_int_equal(pthread_create(&ts, NULL, stopper_main, &st), 0);
	for (uint32_t i = 0; i < 2; i++) {
		small[i] = (struct sender){ .t = s, .peer = ra, .id = i };
		assert_int_equal(pthread_create(&tp[i], NULL, small_main, &small[i]), 0);
	}
	/* Receive until both small senders are done and all theirs came. */
	for (;;) {
		struct zap_ctx *ctx;
		struct zap_msg *m;
		assert_int_equal(zap_ctx_new(&ctx), 0);
		zap_ctx_set_timeout(ctx, 100000000u);
		int rc = zap_recv(r, ctx, &m);
		zap_ctx_free(ctx);
		if (!rc) {
			if (zap_msg_len(m) != MAX_MSG) {
				struct tag t = check_msg(m);
				assert_true(t.thread < 2);
				assert_int_equal(t.seq, next[t.thread]);
				next[t.thread]++;
				got++;
			}
			zap_msg_release(m);
		}
		if (atomic_load(&small_done) == 2 && !want)
			want = small[0].sent + small[1].sent;
		if (want && got == want)
			break;
		assert_true(rc == 0 || rc == -ETIMEDOUT);
	}
	atomic_store(&st.stop, true);
	pthread_join(ts, NULL);
	for (int i = 0; i < 2; i++) {
		pthread_join(tp[i], NULL);
		assert_int_equal(small[i].rc, 0);
	}
	fprintf(stderr, "# %u large sends stopped by their deadline, %u small delivered\n",
		atomic_load(&st.stopped), got);
	small_until = NULL;
	pthread_mutex_lock(&zt_log_mu);
	assert_false(zt_log_has_("after the switch", NULL, false));
	assert_false(zt_log_has_("broke", NULL, false));
	pthread_mutex_unlock(&zt_log_mu);
	zap_set_log_handler(NULL, NULL);
	zap_close(s);
	zap_close(r);
}

/* ---- raw peers ------------------------------------------------------------ */

static void read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t k = recv(fd, (char *)buf + got, len - got, 0);
		assert_true(k > 0);
		got += (size_t)k;
	}
}

static void write_all(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static uint64_t be64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* A HELLO of version @ver: instance @id, @nonce, claiming @addr. */
static size_t hello_v(unsigned char *p, unsigned ver, uint64_t id, uint64_t nonce,
		      const char *addr)
{
	size_t n = zt_wire_hdr_v(p, ver, 1, 24 + strlen(addr));

	zt_be64(p + n, id);
	zt_be64(p + n + 8, nonce);
	zt_be64(p + n + 16, MAX_MSG);
	memcpy(p + n + 24, addr, strlen(addr));
	return n + 24 + strlen(addr);
}

/* A TCP socket bound to @host (port 0), connected to @to's port on
 * 127.0.0.1. */
static int raw_dial(const char *host, const char *to)
{
	struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, host, &src.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
	inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
	dst.sin_port = htons((uint16_t)atoi(strrchr(to, ':') + 1));
	assert_int_equal(connect(fd, (struct sockaddr *)&dst, sizeof(dst)), 0);
	return fd;
}

/* Dial @to from @host as a raw peer of version @ver (instance @id, nonce
 * @id x 3) and read the answer, which must be a HELLO of that version;
 * the acceptor's instance id in *@their. */
static int raw_peer_as(const char *host, const char *to, unsigned ver, uint64_t id,
		       uint64_t *their)
{
	unsigned char h[256], a[16 + 24 + ZAP_PEER_MAX];
	char claim[64];
	int fd = raw_dial(host, to);

	snprintf(claim, sizeof(claim), "%s:9", host);
	write_all(fd, h, hello_v(h, ver, id, id * 3, claim));
	read_full(fd, a, 16);
	assert_int_equal(a[4], ver);
	assert_int_equal(a[5], 1);
	uint64_t len = be64(a + 8);
	assert_true(len <= sizeof(a) - 16);
	read_full(fd, a + 16, len);
	*their = be64(a + 16);
	return fd;
}

static int raw_peer(const char *host, const char *to, unsigned ver, uint64_t id)
{
	uint64_t their;

	return raw_peer_as(host, to, ver, id, &their);
}

/* A version-2 dialer: answered in version 2; gets whole DATA frames. */
static void test_v2_dialer(void **state)
{
	struct zap_transport *r = ep_open();
	char ra[ZAP_PEER_MAX];
	const size_t len = 100000;
	unsigned char *buf = malloc(16 + len), h[16];
	(void)state;

	ep_addr(r, ra);
	int fd = raw_peer("127.0.0.2", ra, 2, 0x2222);
	/* A version-2 peer sends a large message as one DATA frame. */
	zt_wire_hdr(buf, 2, len);
	make_msg(buf + 16, len, 0, 7);
	write_all(fd, buf, 16 + len);
	struct zap_msg *m = recv_within(r, 10000);
	struct tag t = check_msg(m);
	assert_int_equal(t.seq, 7);
	/* ... and is answered in kind. */
	make_msg(buf, len, 1, 8);
	assert_int_equal(zap_send(r, zap_msg_peer(m), buf, len, NULL), 0);
	zap_msg_release(m);
	read_full(fd, h, 16);
	assert_int_equal(h[4], 2);
	assert_int_equal(h[5], 2);
	assert_int_equal(be64(h + 8), len);
	read_full(fd, buf, len);
	unsigned char *want = malloc(len);
	make_msg(want, len, 1, 8);
	assert_memory_equal(buf, want, len);
	free(want);
	close(fd);
	free(buf);
	zap_close(r);
}

/* A version-2 acceptor: closes at a HELLO of a later version, each time,
 * then answers the HELLO of version 2 the dialer offers last, and reads
 * DATA frames. */
struct v2_acceptor {
	int lfd;
	char addr[64];
	unsigned offers[4], n_offers; /* the versions offered, in turn */
	size_t got_len;
	unsigned char *got;
	unsigned got_type, got_ver;
};

static void *v2_accept_main(void *arg)
{
	struct v2_acceptor *v = arg;
	unsigned char h[16 + 24 + ZAP_PEER_MAX], a[256];
	int fd;

	for (;;) {
		fd = accept(v->lfd, NULL, NULL);
		if (fd < 0)
			return NULL;
		if (recv(fd, h, 16, MSG_WAITALL) != 16 || v->n_offers == 4)
			goto out;
		v->offers[v->n_offers++] = h[4];
		if (h[4] <= 2)
			break;
		close(fd); /* "unsupported wire version" */
	}
	uint64_t len = be64(h + 8);
	if (len > sizeof(h) - 16 || recv(fd, h + 16, len, MSG_WAITALL) != (ssize_t)len)
		goto out;
	uint64_t nonce = be64(h + 16 + 8);
	size_t n = hello_v(a, 2, 0x3333, nonce, v->addr);
	if (send(fd, a, n, MSG_NOSIGNAL) != (ssize_t)n)
		goto out;
	if (recv(fd, h, 16, MSG_WAITALL) != 16)
		goto out;
	v->got_ver = h[4];
	v->got_type = h[5];
	v->got_len = be64(h + 8);
	if (v->got_len > MAX_MSG)
		goto out;
	v->got = malloc(v->got_len);
	if (v->got && recv(fd, v->got, v->got_len, MSG_WAITALL) != (ssize_t)v->got_len)
		v->got_len = 0;
out:
	close(fd);
	return NULL;
}

static void test_v2_acceptor(void **state)
{
	struct zap_transport *s = ep_open();
	struct v2_acceptor v = { 0 };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	const size_t len = 100000;
	unsigned char *buf = malloc(len);
	pthread_t th;
	(void)state;

	inet_pton(AF_INET, "127.0.0.3", &sa.sin_addr);
	v.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(v.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(v.lfd, 4), 0);
	getsockname(v.lfd, (struct sockaddr *)&sa, &sl);
	snprintf(v.addr, sizeof(v.addr), "127.0.0.3:%u", ntohs(sa.sin_port));
	assert_int_equal(pthread_create(&th, NULL, v2_accept_main, &v), 0);
	make_msg(buf, len, 0, 5);
	assert_int_equal(zap_send(s, v.addr, buf, len, NULL), 0);
	pthread_join(th, NULL);
	close(v.lfd);
	/* Offered first, then each previous version in turn. */
	assert_int_equal(v.n_offers, 3);
	assert_int_equal(v.offers[0], 4);
	assert_int_equal(v.offers[1], 3);
	assert_int_equal(v.offers[2], 2);
	assert_int_equal(v.got_ver, 2);
	assert_int_equal(v.got_type, 2); /* one whole DATA frame */
	assert_int_equal(v.got_len, len);
	assert_memory_equal(v.got, buf, len);
	free(v.got);
	free(buf);
	zap_close(s);
}

/* ---- hostile framing ---------------------------------------------------- */

static size_t data3(unsigned char *p, const void *msg, size_t len)
{
	size_t n = zt_wire_hdr_v(p, 3, 2, len);

	memcpy(p + n, msg, len);
	return n + len;
}

static size_t begin3(unsigned char *p, uint64_t total, size_t part)
{
	size_t n = zt_wire_hdr_v(p, 3, 4, 8 + part);

	zt_be64(p + n, total);
	memset(p + n + 8, 'b', part);
	return n + 8 + part;
}

static size_t more3(unsigned char *p, size_t part)
{
	size_t n = zt_wire_hdr_v(p, 3, 5, part);

	memset(p + n, 'm', part);
	return n + part;
}

/* Whether the captured log holds @s, now. */
static void test_hostile_framing(void **state)
{
	static const struct {
		const char *name, *why;
	} cases[] = {
		{ "BEGIN while one is open", "a BEGIN frame while a message is open" },
		{ "MORE with none open", "a MORE frame with no message open" },
		{ "MORE beyond the message", "the open message has" },
		{ "DATA above 32 KiB", "version 3 sends more than" },
		{ "total above the maximum", "exceeds the maximum" },
	};
	struct zap_transport *r = ep_open();
	char ra[ZAP_PEER_MAX], host[32];
	unsigned char *buf = malloc(1 << 20);
	(void)state;

	ep_addr(r, ra);
	zap_set_log_handler(zt_log_capture, NULL);
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(host, sizeof(host), "127.0.0.%u", 10 + i);
		zt_log_clear();
		int fd = raw_peer(host, ra, 3, 0x4000 + i);
		/* A complete message first: delivered whatever follows. */
		size_t n = data3(buf, "before", 6);
		switch (i) {
		case 0:
			n += begin3(buf + n, 100000, 10);
			n += begin3(buf + n, 100000, 10);
			break;
		case 1:
			n += more3(buf + n, 10);
			break;
		case 2:
			n += begin3(buf + n, 100000, 99990);
			n += more3(buf + n, 11);
			break;
		case 3:
			n += zt_wire_hdr_v(buf + n, 3, 2, SOLO + 1);
			memset(buf + n, 'd', SOLO + 1);
			n += SOLO + 1;
			break;
		case 4:
			n += begin3(buf + n, MAX_MSG + 1ull, 10);
			break;
		}
		write_all(fd, buf, n);
		struct zap_msg *m = recv_within(r, 10000);
		assert_int_equal(zap_msg_len(m), 6);
		assert_memory_equal(zap_msg_data(m), "before", 6);
		zap_msg_release(m);
		/* Keep the endpoint reading (progress runs in zap_recv()):
		 * nothing else may be delivered. */
		bool said = false;
		for (unsigned k = 0; k < zt_timeout_ms(5000) / 10 && !said; k++) {
			struct zap_ctx *ctx;
			assert_int_equal(zap_ctx_new(&ctx), 0);
			zap_ctx_set_timeout(ctx, 10000000u);
			assert_int_equal(zap_recv(r, ctx, &m), -ETIMEDOUT);
			zap_ctx_free(ctx);
			said = zt_log_has(cases[i].why);
		}
		if (!said)
			fprintf(stderr, "# %s: no log line with \"%s\"\n", cases[i].name,
				cases[i].why);
		assert_true(said);
		assert_true(raw_closed(fd));
		close(fd);
	}
	zap_set_log_handler(NULL, NULL);
	free(buf);
	zap_close(r);
}

/* A message kept open by small messages alone: the stall limit closes it;
 * the small ones are delivered meanwhile. */
static void test_open_forever(void **state)
{
	setenv("ZAP_TCP_STALL_MS", "300", 1);
	struct zap_transport *r = ep_open();
	unsetenv("ZAP_TCP_STALL_MS");
	char ra[ZAP_PEER_MAX];
	unsigned char buf[256];
	unsigned sent = 0, got = 0;
	(void)state;

	ep_addr(r, ra);
	zap_set_log_handler(zt_log_capture, NULL);
	zt_log_clear();
	int fd = raw_peer("127.0.0.20", ra, 3, 0x5555);
	write_all(fd, buf, begin3(buf, 1u << 20, 100));
	/* A vote every 20 ms, for ever: the open message never grows. */
	for (;;) {
		if (send(fd, buf, data3(buf, "vote", 4), MSG_NOSIGNAL) != 20)
			break;
		sent++;
		struct zap_ctx *ctx;
		struct zap_msg *m;
		assert_int_equal(zap_ctx_new(&ctx), 0);
		zap_ctx_set_timeout(ctx, 20000000u);
		if (!zap_recv(r, ctx, &m)) {
			assert_int_equal(zap_msg_len(m), 4);
			got++;
			zap_msg_release(m);
		}
		zap_ctx_free(ctx);
		if (zt_log_has("made no progress"))
			break;
		zt_sleep_ms(20);
		assert_true(sent < 2000); /* 40 s of votes: the limit is 300 ms */
	}
	assert_true(raw_closed(fd));
	assert_true(got > 0);
	close(fd);
	zap_set_log_handler(NULL, NULL);
	zap_close(r);
}

/* BEGIN of a 1 MiB message, then MORE frames of @part bytes every 20 ms,
 * from a raw peer on @host, to an endpoint with a 300 ms stall limit and
 * ZAP_TCP_MIN_RATE 64K (19.2 KiB per 300 ms). Whether the endpoint
 * closed the connection (true), or the message arrived whole (false). */
static bool trickle(const char *host, size_t part)
{
	setenv("ZAP_TCP_STALL_MS", "300", 1);
	setenv("ZAP_TCP_MIN_RATE", "64K", 1);
	struct zap_transport *r = ep_open();
	unsetenv("ZAP_TCP_STALL_MS");
	unsetenv("ZAP_TCP_MIN_RATE");
	char ra[ZAP_PEER_MAX];
	size_t total = 1u << 20, sent = 100;
	unsigned char *buf = malloc(16 + 8 + (64u << 10));
	bool closed = false, whole = false;

	assert_non_null(buf);
	ep_addr(r, ra);
	zap_set_log_handler(zt_log_capture, NULL);
	zt_log_clear();
	int fd = raw_peer(host, ra, 3, 0x6000 + part);
	write_all(fd, buf, begin3(buf, total, sent));
	while (!closed && !whole) {
		size_t n = part < total - sent ? part : total - sent;
		size_t k = more3(buf, n);
		if (n && send(fd, buf, k, MSG_NOSIGNAL) != (ssize_t)k) {
			closed = true;
			break;
		}
		sent += n;
		struct zap_ctx *ctx;
		struct zap_msg *m;
		assert_int_equal(zap_ctx_new(&ctx), 0);
		zap_ctx_set_timeout(ctx, 20000000u);
		if (!zap_recv(r, ctx, &m)) {
			assert_int_equal(zap_msg_len(m), total);
			whole = true;
			zap_msg_release(m);
		}
		zap_ctx_free(ctx);
		closed = closed || zt_log_has("made no progress");
		/* At a byte per 20 ms the message would need 17 hours: the
		 * limit is 300 ms. */
		assert_true(sent < 100 + 2000 * part || whole || closed);
	}
	if (closed)
		assert_true(raw_closed(fd));
	close(fd);
	zap_set_log_handler(NULL, NULL);
	zap_close(r);
	free(buf);
	return closed;
}

/* A message that trickles in (a byte per 20 ms) is closed after the stall
 * limit, though bytes keep coming; one that keeps the rate (64 KiB per 20
 * ms, 50 times it) completes. */
static void test_trickle(void **state)
{
	(void)state;
	assert_true(trickle("127.0.0.21", 1));
	assert_false(trickle("127.0.0.22", 64u << 10));
}

/* ---- a trickle through the ring ------------------------------------------ */

/*
 * Over shared memory (issue #35): a raw same-host peer from @host
 * completes the upgrade, opens a message of @total bytes in its ring (a
 * 16-byte FIRST record) and then adds a chunk of @part bytes every 20 ms
 * (0: "empty" 8-byte records, whose header is 0: no record at all, with
 * head moved past it), to an endpoint with a 300 ms stall limit and
 * ZAP_TCP_MIN_RATE 64K (19.2 KiB per 300 ms), while another endpoint sends
 * it a message every 20 ms. Whether the endpoint closed the raw peer's
 * connection with the reason @why (true) or the message arrived whole
 * (false); the other peer is served meanwhile, and afterwards, either way.
 */
static bool ring_trickle(const char *host, size_t part, size_t total, const char *why)
{
	char *shm = getenv("ZAP_SHM") ? strdup(getenv("ZAP_SHM")) : NULL;
	struct zap_attr a = { .size = sizeof(a), .listen = "127.0.0.1:0",
			      .max_msg_size = 64u << 20 };
	struct zap_transport *r = NULL, *o;
	char ra[ZAP_PEER_MAX];
	uint64_t their;
	unsigned other = 0;
	bool closed = false, whole = false;

	setenv("ZAP_SHM", "user", 1); /* in default-tcp-parts' run too */
	setenv("ZAP_TCP_STALL_MS", "300", 1);
	setenv("ZAP_TCP_MIN_RATE", "64K", 1);
	assert_int_equal(zap_pick("=default", 0, &a, &r), 0);
	unsetenv("ZAP_TCP_STALL_MS");
	unsetenv("ZAP_TCP_MIN_RATE");
	o = ep_open();
	if (shm)
		setenv("ZAP_SHM", shm, 1);
	else
		unsetenv("ZAP_SHM");
	free(shm);
	ep_addr(r, ra);
	zap_set_log_handler(zt_log_capture, NULL);
	zt_log_clear();
	struct ring_peer rp;
	/* shm_raw.h's proofs are RAW_ID's; raw_peer_as()'s nonce is 3 x id. */
	int fd = raw_peer_as(host, ra, 3, RAW_ID, &their);
	ring_peer_open(&rp, fd, 3, their, RAW_ID * 3);
	assert_true(ring_put(&rp, RING_FIRST, total, NULL, 0));
	for (size_t sent = 0, round = 0; !closed && !whole; round++) {
		size_t n = part < total - sent ? part : total - sent;
		if (!ring_put(&rp, sent + n == total ? RING_LAST : 0, 0, NULL, (uint32_t)n))
			break; /* our ring closed: the endpoint dropped us */
		sent += n;
		assert_int_equal(zap_send(o, ra, "vote", 4, NULL), 0);
		struct zap_ctx *ctx;
		struct zap_msg *m;
		assert_int_equal(zap_ctx_new(&ctx), 0);
		zap_ctx_set_timeout(ctx, 20000000u);
		while (!zap_recv(r, ctx, &m)) {
			if (zap_msg_len(m) == total)
				whole = true;
			else
				other += zap_msg_len(m) == 4;
			zap_msg_release(m);
		}
		zap_ctx_free(ctx);
		closed = zt_log_has(why);
		/* At 64 bytes per 20 ms, 64 MiB would take 6 hours: the limit
		 * is 300 ms (a hang bound, not a timing check). */
		if (round >= 2000)
			fail_msg("the ring peer's message (%zu-byte chunks) is still open after "
				 "2000 chunks",
				 part);
	}
	if (!whole) {
		/* Dropped for that reason, not another. */
		closed = zt_log_wait(why, zt_timeout_ms(5000));
		assert_true(closed);
		assert_true(raw_closed(rp.tcp));
		assert_true(ring_peer_closed(&rp));
	}
	fprintf(stderr, "# ring, %zu-byte chunks: %s; %u messages of another peer meanwhile\n",
		part, closed ? "closed" : "delivered", other);
	assert_true(other > 0);
	/* And still served. */
	assert_int_equal(zap_send(o, ra, "last", 4, NULL), 0);
	struct zap_msg *m = recv_within(r, 10000);
	assert_int_equal(zap_msg_len(m), 4);
	zap_msg_release(m);
	ring_peer_close(&rp);
	zap_set_log_handler(NULL, NULL);
	zap_close(o);
	zap_close(r);
	return closed;
}

/* The ring's counterpart of test_trickle: a 64 MiB message kept open by
 * 64-byte chunks is closed after the stall limit; one that keeps the rate
 * (64 KiB per 20 ms) completes. An empty chunk cannot be written (its
 * header reads as no record): a peer that moves head past one broke the
 * ring. */
static void test_ring_trickle(void **state)
{
	(void)state;
	assert_true(ring_trickle("127.0.0.23", 0, 64u << 20, "broke the shared-memory ring"));
	assert_true(ring_trickle("127.0.0.24", 64, 64u << 20, "made no progress"));
	assert_false(ring_trickle("127.0.0.25", 64u << 10, 1u << 20, "made no progress"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mixed_senders),
		cmocka_unit_test(test_small_passes_large),
		cmocka_unit_test(test_recv_beside_leading_sender),
		cmocka_unit_test(test_deadline_between_parts),
		cmocka_unit_test(test_v2_dialer),
		cmocka_unit_test(test_v2_acceptor),
		cmocka_unit_test(test_hostile_framing),
		cmocka_unit_test(test_trickle),
		cmocka_unit_test(test_ring_trickle),
		cmocka_unit_test(test_open_forever),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
