/* SPDX-License-Identifier: MIT */
/*
 * The transport conformance suite: one set of behaviour checks, written
 * once against the public API (<zap/zap.h>), run against every transport
 * that can run here. argv[1] names the instance (the table at the end):
 * how to open two endpoints A and B of one process, the environment they
 * need, and the path (zap_peer_path()) a message between them must take.
 *
 * Every check opens its own endpoints, so one failing check leaves the
 * others' endpoints alone, and closes them, so a leak is the check's
 * (LeakSanitizer at exit). Output is TAP on stdout; diagnostics go to
 * stderr. A hang ends at a limit scaled by zt_timeout_ms() (tests/README.md).
 *
 * The maximum message size is reduced to MAX_MSG (ZAP_MAX_MSG_BYTES, set
 * before the first pick): the default 64 MiB makes the sizes check slow
 * under ASan on a loaded machine, and nothing in the checks depends on the
 * value.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zap-test.h"

#define MAX_MSG (8u << 20)
#define MAX_MSG_ENV "8388608"
/* Hang limit of anything that must finish (scaled). */
#define HANG_MS 60000u

/* ---- instances --------------------------------------------------------- */

struct inst {
	const char *name;    /* argv[1] */
	const char *pref;    /* zap_pick() preference */
	const char *plugin;  /* a plugin that must be loaded (skip rule), or NULL */
	const char *needs;   /* what it needs, for the skip line */
	const char *listen;  /* "%s" is replaced by a fresh socket path, or NULL */
	const char *path;    /* what zap_peer_path() must say, NULL: no paths */
	bool send_blocks;    /* a send to a peer that does not read blocks */
	const char *env[6];  /* NAME=value, set before the first pick */
};

static const struct inst *in;
static char sock_dir[128];
static unsigned sock_seq;
static int failed_checks;

/* ---- check helpers ----------------------------------------------------- */

/* Inside a check (a function returning int): unless @cond, say why on
 * stderr and fail the check. */
#define CK(cond, ...)                                                          \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "# %s:%d: %s: ", __FILE__, __LINE__,   \
				#cond);                                        \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, " (last error: %s)\n", zap_last_error()); \
			return 1;                                              \
		}                                                              \
	} while (0)

static int open_ep(struct zap_transport **t, char *addr)
{
	char listen[256];
	struct zap_attr a = { .size = sizeof(a) };
	int rc;

	if (in->listen) {
		snprintf(listen, sizeof(listen), in->listen, sock_dir, sock_seq++);
		a.listen = listen;
	}
	rc = zap_pick(in->pref, ZAP_PICK_STRICT, &a, t);
	CK(rc == 0, "zap_pick(%s): %s", in->pref, zap_strerror(rc));
	rc = zap_transport_address(*t, addr, ZAP_PEER_MAX);
	CK(rc == 0, "zap_transport_address: %s", zap_strerror(rc));
	return 0;
}

/* Two endpoints; on failure none is left open. */
static int open_pair(struct zap_transport **a, char *addr_a, struct zap_transport **b,
		     char *addr_b)
{
	*a = *b = NULL;
	if (open_ep(a, addr_a))
		return 1;
	if (open_ep(b, addr_b)) {
		zap_close(*a);
		*a = NULL;
		return 1;
	}
	return 0;
}

static struct zap_ctx *ctx_in(unsigned ms)
{
	struct zap_ctx *c = NULL;

	if (zap_ctx_new(&c) == 0)
		zap_ctx_set_timeout(c, (uint64_t)ms * 1000000u);
	return c;
}

/* Receive one message within the hang limit: 0 or the error. */
static int recv_one(struct zap_transport *t, struct zap_msg **m)
{
	struct zap_ctx *c = ctx_in(zt_timeout_ms(HANG_MS));
	int rc;

	*m = NULL;
	if (!c)
		return -ENOMEM;
	rc = zap_recv(t, c, m);
	zap_ctx_free(c);
	return rc;
}

static int send_one(struct zap_transport *t, const char *peer, const void *buf, size_t len)
{
	struct zap_ctx *c = ctx_in(zt_timeout_ms(HANG_MS));
	int rc;

	if (!c)
		return -ENOMEM;
	rc = zap_send(t, peer, buf, len, c);
	zap_ctx_free(c);
	return rc;
}

/* A received message must be @len bytes of zt_fill(@seed). */
static int msg_is(struct zap_msg *m, size_t len, uint64_t seed)
{
	CK(zap_msg_len(m) == len, "length %zu, want %zu", zap_msg_len(m), len);
	CK(len == 0 || zap_msg_data(m) != NULL, "no bytes for %zu", len);
	CK(zt_check_fill(zap_msg_data(m), len, seed) == len,
	   "%zu-byte message (seed %llu) wrong at byte %zu", len,
	   (unsigned long long)seed, zt_check_fill(zap_msg_data(m), len, seed));
	return 0;
}

/*
 * A thread that sends @n messages to @peer, message @i made by @make into
 * @buf: the receiving side runs in the caller, since a transport may move
 * bytes only while its peer receives (TCP's send blocks once the socket
 * buffers hold a few MB, whoever reads them).
 */
struct sender {
	struct zap_transport *t;
	const char *peer;
	unsigned n;
	size_t (*make)(unsigned i, unsigned char *buf, const void *arg);
	const void *arg;
	unsigned char *buf;
	unsigned sent;
	int rc;
	pthread_t th;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;

	for (s->sent = 0; s->sent < s->n; s->sent++) {
		size_t len = s->make(s->sent, s->buf, s->arg);

		s->rc = send_one(s->t, s->peer, s->buf, len);
		if (s->rc)
			break;
	}
	return NULL;
}

static int sender_start(struct sender *s)
{
	s->rc = 0;
	CK(pthread_create(&s->th, NULL, sender_main, s) == 0, "pthread_create");
	return 0;
}

/* Join the sender (its sends end within their hang limits): 0 when it
 * sent them all. */
static int sender_join(struct sender *s)
{
	pthread_join(s->th, NULL);
	CK(s->rc == 0, "zap_send #%u: %s", s->sent, zap_strerror(s->rc));
	return 0;
}

/* The path between @t and @peer is the instance's (when it has paths). */
static int path_ok(struct zap_transport *t, const char *peer)
{
	char p[16] = "";
	int rc = zap_peer_path(t, peer, p, sizeof(p));

	if (!in->path) {
		CK(rc == -EOPNOTSUPP, "zap_peer_path on a transport without "
		   "paths: %d \"%s\"", rc, p);
		return 0;
	}
	CK(rc == 0 && !strcmp(p, in->path), "path to %s: %d \"%s\", want \"%s\"",
	   peer, rc, p, in->path);
	return 0;
}

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

static int check_sizes_on(struct zap_transport *a, struct zap_transport *b,
			  const char *addr_b, unsigned char *buf)
{
	size_t sizes[64];
	int n = sizes_list(sizes), rc;
	char peer_a[ZAP_PEER_MAX] = "";
	struct sender s = { .t = a, .peer = addr_b, .n = (unsigned)n,
			    .make = make_sized, .arg = sizes, .buf = buf };

	if (sender_start(&s))
		return 1;
	rc = recv_sizes(b, sizes, n, peer_a);
	if (rc) /* the sender may be blocked on us: unblock it */
		zap_shutdown(a);
	if (sender_join(&s) || rc)
		return 1;
	if (path_ok(a, addr_b) || path_ok(b, peer_a))
		return 1;
	return 0;
}

static int check_sizes(void)
{
	struct zap_transport *a, *b;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX];
	struct zap_caps caps = { .size = sizeof(caps) };
	unsigned char *buf = malloc(MAX_MSG);
	int rc;

	CK(buf != NULL, "malloc");
	if (open_pair(&a, addr_a, &b, addr_b)) {
		free(buf);
		return 1;
	}
	rc = zap_caps(a, &caps);
	if (rc || caps.max_msg_size != MAX_MSG) {
		fprintf(stderr, "# zap_caps: %d, max_msg_size %llu, want %u\n", rc,
			(unsigned long long)caps.max_msg_size, MAX_MSG);
		rc = 1;
	} else {
		rc = check_sizes_on(a, b, addr_b, buf);
	}
	zap_close(a);
	zap_close(b);
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

static int order_on(struct zap_transport *a, struct zap_transport *b, const char *addr_b)
{
	unsigned char buf[4096];
	struct sender s = { .t = a, .peer = addr_b, .n = NORDER,
			    .make = make_numbered, .buf = buf };
	int rc;

	if (sender_start(&s))
		return 1;
	rc = recv_numbered(b);
	if (rc)
		zap_shutdown(a);
	return sender_join(&s) || rc;
}

static int check_order(void)
{
	struct zap_transport *a, *b;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX];
	int rc;

	if (open_pair(&a, addr_a, &b, addr_b))
		return 1;
	rc = order_on(a, b, addr_b);
	zap_close(a);
	zap_close(b);
	return rc;
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

static int check_replyable(void)
{
	struct zap_transport *a, *b;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX];
	int rc;

	if (open_pair(&a, addr_a, &b, addr_b))
		return 1;
	rc = reply_on(a, b, addr_b);
	zap_close(a);
	zap_close(b);
	return rc;
}

/* ---- deadlines: nothing to receive returns -ETIMEDOUT, not early -------- */

static int check_deadline(void)
{
	struct zap_transport *a, *b;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX];
	const uint64_t wait_ms = 200;
	struct zap_msg *m = NULL;
	struct zap_ctx *c;
	uint64_t t0, took;
	int rc;

	if (open_pair(&a, addr_a, &b, addr_b))
		return 1;
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
	zap_close(a);
	zap_close(b);
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

static int check_oversize(void)
{
	struct zap_transport *a, *b;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX];
	int rc;

	if (open_pair(&a, addr_a, &b, addr_b))
		return 1;
	rc = oversize_on(a, b, addr_b);
	zap_close(a);
	zap_close(b);
	return rc;
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

static int shutdown_on(struct zap_transport *a, struct zap_transport *b, const char *addr_b)
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
	(void)b;
	return rc;
}

static int check_shutdown(void)
{
	struct zap_transport *a, *b;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX];
	int rc;

	if (open_pair(&a, addr_a, &b, addr_b))
		return 1;
	rc = shutdown_on(a, b, addr_b);
	zap_close(a);
	zap_close(b);
	return rc;
}

/* ---- close with messages queued ----------------------------------------- */

#define NHELD 3
#define NQUEUED 3

/* Wait until @t holds @n messages not yet received, where the transport
 * counts them (zap_stats().rxq_msgs); elsewhere a returned send is taken
 * as queued. */
static int wait_queued(struct zap_transport *t, uint64_t n)
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
		if (s.rxq_msgs >= n) {
			fprintf(stderr, "# %llu messages queued at close\n",
				(unsigned long long)s.rxq_msgs);
			return 0;
		}
		CK(zt_now_ms() < limit, "%llu of %llu messages queued",
		   (unsigned long long)s.rxq_msgs, (unsigned long long)n);
		zt_sleep_ms(5);
	}
}

static int close_queued_on(struct zap_transport *a, struct zap_transport *b,
			   const char *addr_b, struct zap_msg **held)
{
	unsigned char buf[3000];
	int rc;

	for (int i = 0; i < NHELD + NQUEUED; i++) {
		size_t len = 1000u * (size_t)(i % 3 + 1);

		zt_fill(buf, len, 50u + (uint64_t)i);
		rc = send_one(a, addr_b, buf, len);
		CK(rc == 0, "zap_send #%d: %s", i, zap_strerror(rc));
	}
	for (int i = 0; i < NHELD; i++) {
		rc = recv_one(b, &held[i]);
		CK(rc == 0, "zap_recv #%d: %s", i, zap_strerror(rc));
	}
	return wait_queued(b, NQUEUED);
}

static int check_close_queued(void)
{
	struct zap_transport *a, *b;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX], peer[NHELD][ZAP_PEER_MAX];
	struct zap_msg *held[NHELD] = { 0 };
	int rc;

	if (open_pair(&a, addr_a, &b, addr_b))
		return 1;
	rc = close_queued_on(a, b, addr_b, held);
	for (int i = 0; i < NHELD; i++)
		snprintf(peer[i], sizeof(peer[i]), "%s", held[i] ? zap_msg_peer(held[i]) : "");
	/* B goes with messages held and messages queued; A after it. */
	zap_close(b);
	zap_close(a);
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

/* ---- the instances and main --------------------------------------------- */

static const struct inst insts[] = {
	{ "tcp", "=default", NULL, NULL, "127.0.0.1:0", "tcp", true,
	  { "ZAP_SHM=off", "ZAP_TCP_RX_QUEUE_BYTES=16M" } },
	{ "unix", "=default", NULL, NULL, "unix:%s/ep%u.sock", "unix", true,
	  { "ZAP_SHM=off", "ZAP_TCP_RX_QUEUE_BYTES=16M" } },
	{ "shm", "=default", NULL, NULL, "127.0.0.1:0", "shm", true,
	  { "ZAP_SHM=user", "ZAP_TCP_RX_QUEUE_BYTES=16M" } },
	/* Against the mock driver of mockcuda/ (LD_LIBRARY_PATH). */
	{ "uma", "=uma", "uma", "a CUDA driver", "127.0.0.1:0", "tcp", true,
	  { "ZAP_SHM=off", "ZAP_TCP_RX_QUEUE_BYTES=16M" } },
	/* Its mailboxes have no limit: no send ever blocks. */
	{ "inproc", "=inproc", "inproc", "the example plugin", NULL, NULL, false, { NULL } },
};

static const struct {
	const char *name;
	int (*fn)(void);
} checks[] = {
	{ "sizes 0 B to the maximum arrive intact", check_sizes },
	{ "sequential sends arrive in order", check_order },
	{ "a received peer string is a send destination", check_replyable },
	{ "a receive deadline returns -ETIMEDOUT, not early", check_deadline },
	{ "a message above the maximum is refused -EMSGSIZE", check_oversize },
	{ "zap_shutdown wakes every blocked call", check_shutdown },
	{ "held messages outlive zap_close, queued ones are freed", check_close_queued },
};

static int setup(const char *name)
{
	for (size_t i = 0; i < sizeof(insts) / sizeof(insts[0]); i++)
		if (!strcmp(insts[i].name, name))
			in = &insts[i];
	if (!in) {
		fprintf(stderr, "conformance: unknown instance '%s'\n", name);
		return 2;
	}
	setenv("ZAP_MAX_MSG_BYTES", MAX_MSG_ENV, 1);
	for (int i = 0; in->env[i]; i++)
		putenv((char *)in->env[i]);
	if (!zt_mkdtemp(sock_dir, sizeof(sock_dir), "zap-conf")) {
		perror("mkdtemp");
		return 2;
	}
	if (in->plugin) {
		/* zt_need_plugin() says why on stdout: stdout is TAP only. */
		int out = dup(1), rc;

		fflush(stdout);
		dup2(2, 1);
		rc = zt_need_plugin(in->plugin, in->needs);
		fflush(stdout);
		dup2(out, 1);
		close(out);
		if (rc == ZT_SKIP)
			printf("1..0 # SKIP %s not present\n", in->plugin);
		return rc;
	}
	return 0;
}

int main(int argc, char **argv)
{
	size_t n = sizeof(checks) / sizeof(checks[0]);
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s tcp|unix|shm|uma|inproc\n", argv[0]);
		return 2;
	}
	rc = setup(argv[1]);
	if (rc) {
		zt_rmtree(sock_dir);
		return rc;
	}
	printf("1..%zu\n", n);
	for (size_t i = 0; i < n; i++) {
		fflush(stdout);
		rc = checks[i].fn();
		printf("%sok %zu - %s: %s\n", rc ? "not " : "", i + 1, in->name,
		       checks[i].name);
		failed_checks += rc != 0;
	}
	zt_rmtree(sock_dir);
	return failed_checks ? 1 : 0;
}
