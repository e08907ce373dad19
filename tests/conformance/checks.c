/* SPDX-License-Identifier: MIT */
/*
 * The conformance checks, each written once against the public API and
 * given the endpoints of one instance (struct pair, conformance.h). Every
 * check can fail; none asserts timing beyond a deadline not firing early
 * and the scaled hang limit.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

/* ---- sizes: 0 B to the maximum, intact, on the instance's path ---------- */

static int sizes_list(size_t *s)
{
	size_t n = 0;

	for (size_t k = 0; k < 4; k++)
		s[n++] = k;
	for (size_t p = 64; p < MAX_MSG; p *= 4) {
		s[n++] = p - 1;
		s[n++] = p;
		s[n++] = p + 1;
	}
	s[n++] = MAX_MSG - 1;
	s[n++] = MAX_MSG;
	return (int)n;
}

static size_t make_sized(unsigned i, unsigned char *buf, const void *arg)
{
	const size_t *sizes = arg;

	zt_fill(buf, sizes[i], (uint64_t)i + 1);
	return sizes[i];
}

static int recv_sizes(struct zap_transport *b, const size_t *sizes, int n, char *peer_a)
{
	for (int i = 0; i < n; i++) {
		struct zap_msg *m;
		int rc = recv_one(b, &m);

		CK(rc == 0, "zap_recv (%zu B due): %s", sizes[i], zap_strerror(rc));
		snprintf(peer_a, ZAP_PEER_MAX, "%s", zap_msg_peer(m));
		rc = msg_is(m, sizes[i], (uint64_t)i + 1);
		zap_msg_release(m);
		if (rc)
			return rc;
	}
	return 0;
}

static int sizes_on(struct pair *p, unsigned char *buf)
{
	size_t sizes[64];
	int n = sizes_list(sizes), rc;
	char peer_a[ZAP_PEER_MAX] = "";
	struct sender s = { .t = p->a, .peer = p->addr_b, .n = (unsigned)n,
			    .make = make_sized, .arg = sizes, .buf = buf };

	if (sender_start(&s))
		return 1;
	rc = recv_sizes(p->rx, sizes, n, peer_a);
	if (rc) /* the sender may be blocked on us: unblock it */
		zap_shutdown(p->a);
	if (sender_join(&s) || rc)
		return 1;
	/* Both ways: from A to B, and from B to the peer string A has there. */
	if (path_ok(p->a, p->addr_b) || (p->b && path_ok(p->b, peer_a)))
		return 1;
	return 0;
}

int check_sizes(struct pair *p)
{
	struct zap_caps caps = { .size = sizeof(caps) };
	unsigned char *buf;
	int rc = zap_caps(p->a, &caps);

	CK(rc == 0 && caps.max_msg_size == MAX_MSG, "zap_caps: %d, max_msg_size %llu, "
	   "want %u", rc, (unsigned long long)caps.max_msg_size, MAX_MSG);
	buf = malloc(MAX_MSG);
	CK(buf != NULL, "malloc");
	rc = sizes_on(p, buf);
	free(buf);
	return rc;
}

/* ---- order: N sequential sends arrive in order, none lost -------------- */

#define NORDER 2000u

/* Mixed lengths: a long message must not be overtaken either. */
static size_t make_numbered(unsigned i, unsigned char *buf, const void *arg)
{
	uint32_t v = i;
	size_t len = sizeof(v) + (i % 7 == 0 ? 4000 : i % 13);

	(void)arg;
	memset(buf, 0, len);
	memcpy(buf, &v, sizeof(v));
	return len;
}

static int recv_numbered(struct zap_transport *b)
{
	for (uint32_t i = 0; i < NORDER; i++) {
		struct zap_msg *m;
		uint32_t v = UINT32_MAX;
		int rc = recv_one(b, &m);

		CK(rc == 0, "zap_recv #%u: %s", i, zap_strerror(rc));
		if (zap_msg_len(m) >= sizeof(v))
			memcpy(&v, zap_msg_data(m), sizeof(v));
		zap_msg_release(m);
		CK(v == i, "message %u arrived where %u was due", v, i);
	}
	return 0;
}

int check_order(struct pair *p)
{
	unsigned char buf[4096];
	struct sender s = { .t = p->a, .peer = p->addr_b, .n = NORDER,
			    .make = make_numbered, .buf = buf };
	int rc;

	if (sender_start(&s))
		return 1;
	rc = recv_numbered(p->rx);
	if (rc)
		zap_shutdown(p->a);
	return sender_join(&s) || rc;
}

/* ---- replyable: the peer string of a message is a send destination ----- */

static int reply_on(struct zap_transport *a, struct zap_transport *b, const char *addr_b)
{
	char peer[ZAP_PEER_MAX];
	unsigned char buf[100];
	struct zap_msg *m;
	int rc;

	zt_fill(buf, sizeof(buf), 7);
	rc = send_one(a, addr_b, buf, sizeof(buf));
	CK(rc == 0, "zap_send: %s", zap_strerror(rc));
	rc = recv_one(b, &m);
	CK(rc == 0, "zap_recv at B: %s", zap_strerror(rc));
	CK(zap_msg_peer(m) && *zap_msg_peer(m), "no peer string");
	snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
	rc = msg_is(m, sizeof(buf), 7);
	zap_msg_release(m);
	if (rc)
		return rc;
	/* Twice: the second reply goes over whatever the first set up. */
	for (uint64_t k = 0; k < 2; k++) {
		zt_fill(buf, sizeof(buf), 8 + k);
		rc = send_one(b, peer, buf, sizeof(buf));
		CK(rc == 0, "reply to \"%s\": %s", peer, zap_strerror(rc));
		rc = recv_one(a, &m);
		CK(rc == 0, "zap_recv at A: %s", zap_strerror(rc));
		/* A's view of B replies to B, whichever string it is. */
		CK(zap_msg_peer(m) && *zap_msg_peer(m), "no peer string at A");
		rc = msg_is(m, sizeof(buf), 8 + k);
		zap_msg_release(m);
		if (rc)
			return rc;
	}
	return 0;
}

/* With an echo process as B: the echo of A's message carries B's peer
 * string, and A's reply to it comes back too (B replied to A's string). */
static int reply_echo(struct pair *p)
{
	char peer[ZAP_PEER_MAX];
	unsigned char buf[100];
	struct zap_msg *m;
	int rc;

	for (uint64_t k = 0; k < 3; k++) {
		zt_fill(buf, sizeof(buf), 7 + k);
		rc = send_one(p->a, k ? peer : p->addr_b, buf, sizeof(buf));
		CK(rc == 0, "zap_send to \"%s\": %s", k ? peer : p->addr_b,
		   zap_strerror(rc));
		rc = recv_one(p->a, &m);
		CK(rc == 0, "zap_recv of the echo: %s", zap_strerror(rc));
		CK(zap_msg_peer(m) && *zap_msg_peer(m), "no peer string");
		snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
		rc = msg_is(m, sizeof(buf), 7 + k);
		zap_msg_release(m);
		if (rc)
			return rc;
	}
	return 0;
}

int check_replyable(struct pair *p)
{
	return p->b ? reply_on(p->a, p->b, p->addr_b) : reply_echo(p);
}

/* ---- deadlines: nothing to receive returns -ETIMEDOUT, not early -------- */

int check_deadline(struct pair *p)
{
	struct zap_transport *b = p->rx;
	const uint64_t wait_ms = 200;
	struct zap_msg *m = NULL;
	struct zap_ctx *c;
	uint64_t t0, took;
	int rc;

	c = ctx_in((unsigned)wait_ms);
	t0 = zt_now_ms();
	rc = c ? zap_recv(b, c, &m) : -ENOMEM;
	took = zt_now_ms() - t0;
	zap_ctx_free(c);
	/* And an absolute deadline already in the past. */
	int rc2 = -ENOMEM;
	if (zap_ctx_new(&c) == 0) {
		zap_ctx_set_deadline(c, zt_now_ns() - 1);
		rc2 = zap_recv(b, c, &m);
		zap_ctx_free(c);
	}
	CK(rc == -ETIMEDOUT, "zap_recv: %d (%s), want -ETIMEDOUT", rc, zap_strerror(rc));
	CK(took >= wait_ms, "returned after %llu ms, before the %llu ms deadline",
	   (unsigned long long)took, (unsigned long long)wait_ms);
	CK(took < zt_timeout_ms(HANG_MS), "hung for %llu ms", (unsigned long long)took);
	CK(rc2 == -ETIMEDOUT, "zap_recv, deadline passed: %d, want -ETIMEDOUT", rc2);
	CK(m == NULL, "a message came out of a timed-out receive");
	return 0;
}

/* ---- oversize: one byte above the maximum is refused, nothing arrives --- */

static int oversize_on(struct zap_transport *a, struct zap_transport *b, const char *addr_b)
{
	unsigned char *buf = calloc(1, (size_t)MAX_MSG + 1);
	struct zap_iov iov[2];
	struct zap_msg *m = NULL;
	struct zap_ctx *c;
	int rc, rb;

	CK(buf != NULL, "calloc");
	rc = send_one(a, addr_b, buf, (size_t)MAX_MSG + 1);
	iov[0] = (struct zap_iov){ buf, (size_t)MAX_MSG + 1 };
	iov[1] = (struct zap_iov){ buf, 1 };
	rb = zap_send_burst(a, addr_b, iov, 2, NULL);
	free(buf);
	CK(rc == -EMSGSIZE, "zap_send(max + 1): %d (%s), want -EMSGSIZE", rc, zap_strerror(rc));
	CK(rb == -EMSGSIZE, "zap_send_burst(max + 1, ...): %d, want -EMSGSIZE", rb);
	/* The endpoint still works, and the refused message never arrives:
	 * the next one is the first B sees. */
	rc = send_one(a, addr_b, "x", 1);
	CK(rc == 0, "zap_send after the refusal: %s", zap_strerror(rc));
	rc = recv_one(b, &m);
	CK(rc == 0, "zap_recv: %s", zap_strerror(rc));
	rb = zap_msg_len(m) == 1 && *(const char *)zap_msg_data(m) == 'x';
	zap_msg_release(m);
	CK(rb, "the first message B got is not the one after the refusal");
	c = ctx_in(100);
	rc = c ? zap_recv(b, c, &m) : -ENOMEM;
	zap_ctx_free(c);
	if (rc == 0)
		zap_msg_release(m);
	CK(rc == -ETIMEDOUT, "B got a second message (%d)", rc);
	return 0;
}

int check_oversize(struct pair *p)
{
	return oversize_on(p->a, p->rx, p->addr_b);
}

/* ---- shutdown wakes every waiter ---------------------------------------- */

#define NWAITERS 4

struct waiter {
	struct zap_transport *t;
	const char *peer; /* a sender: sends to it until a send fails */
	atomic_uint progress;
	atomic_bool done;
	int rc;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	struct zap_msg *m = NULL;

	if (!w->peer) {
		atomic_fetch_add(&w->progress, 1);
		w->rc = zap_recv(w->t, NULL, &m);
		if (w->rc == 0)
			zap_msg_release(m);
	} else {
		static unsigned char chunk[1u << 20];

		do {
			w->rc = zap_send(w->t, w->peer, chunk, sizeof(chunk), NULL);
			atomic_fetch_add(&w->progress, 1);
		} while (w->rc == 0);
	}
	atomic_store(&w->done, true);
	return NULL;
}

/* Wait until the sender @w has made no progress for a while (it is
 * blocked: its peer does not read) or it ended. Not a timing assertion:
 * a sender that only paused is woken by the shutdown all the same. */
static int wait_blocked(struct waiter *w)
{
	uint64_t limit = zt_now_ms() + zt_timeout_ms(HANG_MS), still = zt_now_ms();
	unsigned seen = atomic_load(&w->progress);

	while (!atomic_load(&w->done) && zt_now_ms() - still < 500) {
		zt_sleep_ms(20);
		if (atomic_load(&w->progress) != seen) {
			seen = atomic_load(&w->progress);
			still = zt_now_ms();
		}
		CK(zt_now_ms() < limit, "sends to a peer that never reads never "
		   "blocked (%u MiB taken)", seen);
	}
	CK(!atomic_load(&w->done), "the sender ended before the shutdown: %s",
	   zap_strerror(w->rc));
	fprintf(stderr, "# the sender blocked after %u MiB\n", seen);
	return 0;
}

static int join_all(struct waiter *w, pthread_t *th, int n)
{
	uint64_t limit = zt_now_ms() + zt_timeout_ms(HANG_MS);
	int bad = 0;

	for (int i = 0; i < n; i++) {
		while (!atomic_load(&w[i].done)) {
			if (zt_now_ms() > limit) {
				/* A thread stuck in libzap cannot be joined. */
				printf("not ok - shutdown: waiter %d still blocked\n", i);
				fflush(stdout);
				_exit(1);
			}
			zt_sleep_ms(5);
		}
		pthread_join(th[i], NULL);
		if (w[i].rc != -ESHUTDOWN) {
			fprintf(stderr, "# waiter %d (%s): %d (%s), want -ESHUTDOWN\n", i,
				w[i].peer ? "send" : "recv", w[i].rc, zap_strerror(w[i].rc));
			bad = 1;
		}
	}
	return bad;
}

static int shutdown_on(struct zap_transport *a, const char *addr_b)
{
	struct waiter w[NWAITERS + 1] = { 0 };
	pthread_t th[NWAITERS + 1];
	int n = 0, rc = 0;

	for (; n < NWAITERS; n++) {
		w[n].t = a;
		if (pthread_create(&th[n], NULL, waiter_main, &w[n]))
			break;
	}
	if (in->send_blocks && n == NWAITERS) {
		w[n].t = a;
		w[n].peer = addr_b;
		if (pthread_create(&th[n], NULL, waiter_main, &w[n]) == 0)
			rc = wait_blocked(&w[n++]);
	}
	/* The receivers are in (or about to enter) zap_recv(); one that enters
	 * after the shutdown must get -ESHUTDOWN as well. */
	for (int i = 0; i < NWAITERS && i < n; i++)
		while (!atomic_load(&w[i].progress))
			zt_sleep_ms(1);
	zt_sleep_ms(50);
	zap_shutdown(a);
	rc |= join_all(w, th, n);
	CK(n == NWAITERS + (in->send_blocks ? 1 : 0), "pthread_create");
	/* Later calls too. */
	struct zap_msg *m = NULL;
	CK(zap_recv(a, NULL, &m) == -ESHUTDOWN, "zap_recv after zap_shutdown");
	CK(zap_send(a, addr_b, "x", 1, NULL) == -ESHUTDOWN, "zap_send after zap_shutdown");
	return rc;
}

int check_shutdown(struct pair *p)
{
	return shutdown_on(p->a, p->addr_b);
}

/* ---- close with messages queued ----------------------------------------- */

#define NHELD 3
#define NQUEUED 3

/* Wait until @t has received all @n messages, where the transport counts
 * them (zap_stats(): complete messages, queued for zap_recv()); elsewhere
 * a returned send is taken as delivered. */
static int wait_received(struct zap_transport *t, uint64_t n)
{
	uint64_t limit = zt_now_ms() + zt_timeout_ms(HANG_MS);
	struct zap_stats s = { .size = sizeof(s) };

	for (;;) {
		int rc = zap_stats(t, &s);

		if (rc) {
			fprintf(stderr, "# zap_stats: %s: queued messages not counted\n",
				zap_strerror(rc));
			return 0;
		}
		if (s.msgs_received >= n) {
			fprintf(stderr, "# %llu messages queued at close\n",
				(unsigned long long)s.rxq_msgs);
			return 0;
		}
		CK(zt_now_ms() < limit, "%llu of %llu messages received",
		   (unsigned long long)s.msgs_received, (unsigned long long)n);
		zt_sleep_ms(5);
	}
}

static int close_queued_on(struct pair *p, struct zap_msg **held)
{
	unsigned char buf[3000];
	int rc;

	for (int i = 0; i < NHELD + NQUEUED; i++) {
		size_t len = 1000u * (size_t)(i % 3 + 1);

		zt_fill(buf, len, 50u + (uint64_t)i);
		rc = send_one(p->a, p->addr_b, buf, len);
		CK(rc == 0, "zap_send #%d: %s", i, zap_strerror(rc));
	}
	for (int i = 0; i < NHELD; i++) {
		rc = recv_one(p->rx, &held[i]);
		CK(rc == 0, "zap_recv #%d: %s", i, zap_strerror(rc));
	}
	return wait_received(p->rx, NHELD + NQUEUED);
}

int check_close_queued(struct pair *p)
{
	char peer[NHELD][ZAP_PEER_MAX];
	struct zap_msg *held[NHELD] = { 0 };
	int rc = close_queued_on(p, held);

	for (int i = 0; i < NHELD; i++)
		snprintf(peer[i], sizeof(peer[i]), "%s", held[i] ? zap_msg_peer(held[i]) : "");
	/* The receiver goes first, with messages held and messages queued. */
	zap_close(p->rx);
	if (p->rx != p->a)
		zap_close(p->a);
	p->a = p->b = p->rx = NULL;
	for (int i = 0; i < NHELD && !rc; i++) {
		CK(held[i] != NULL, "message %d missing", i);
		rc = msg_is(held[i], 1000u * (size_t)(i % 3 + 1), 50u + (uint64_t)i);
		if (!rc && strcmp(zap_msg_peer(held[i]), peer[i]))
			rc = 1, fprintf(stderr, "# peer string changed at close\n");
	}
	for (int i = 0; i < NHELD; i++)
		zap_msg_release(held[i]);
	return rc;
}
