/* SPDX-License-Identifier: MIT */
/*
 * The default (TCP) transport's blocking calls and how they end: a
 * receive's deadline, a cancel that wakes every receiver sharing a ctx,
 * zap_close() while receivers sleep, a send's deadline on a full socket
 * and a send abandoned mid-frame (the connection is retired, not closed);
 * then the same with receivers that spin (ZAP_TCP_SPIN_US). Two real
 * endpoints in one process (threads) on 127.0.0.1.
 */
#include "tcp_ep.h"

/* ------------------------------------------------------------------------ */
/* Deadlines, cancellation, close                                           */
/* ------------------------------------------------------------------------ */

static void test_deadline(void **state)
{
	struct zap_transport *a = ep_open();
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	(void)state;

	assert_int_equal(zap_ctx_new(&ctx), 0);
	assert_int_equal(zap_ctx_set_timeout(ctx, 100 * 1000000ull), 0);
	uint64_t t0 = now_ns();
	assert_int_equal(zap_recv(a, ctx, &m), -ETIMEDOUT);
	uint64_t dt = now_ns() - t0;
	assert_true(dt >= 95 * 1000000ull);
	/* An upper bound only as hang detection, scaled (tests/README.md). */
	assert_true(dt < zt_timeout_ms(10000) * 1000000ull);
	assert_null(m);
	/* An expired ctx fails sends too, promptly. */
	char aa[ZAP_PEER_MAX];
	ep_addr(a, aa);
	assert_int_equal(zap_send(a, aa, "x", 1, ctx), -ETIMEDOUT);
	zap_ctx_free(ctx);
	zap_close(a);
}

struct block_arg {
	struct zap_transport *t;
	struct zap_ctx *ctx;
	int rc;
	uint64_t done_ns;
	_Atomic pid_t tid; /* published right before zap_recv() */
};

static void *blocked_recv(void *p)
{
	struct block_arg *a = p;
	struct zap_msg *m = NULL;
	atomic_store(&a->tid, gettid());
	a->rc = zap_recv(a->t, a->ctx, &m);
	a->done_ns = now_ns();
	if (!a->rc)
		zap_msg_release(m);
	return NULL;
}

/* Three blocked receivers (one leads the polling, two follow) share a
 * ctx; @settle_us after they start, one cancel must wake all three within
 * @prompt_ns. */
static void cancel_wakes_three(struct zap_transport *a, unsigned settle_us,
			       uint64_t prompt_ns)
{
	struct block_arg ba[3] = {{.t = a}};
	pthread_t th[3];

	assert_int_equal(zap_ctx_new(&ba[0].ctx), 0);
	ba[1] = ba[2] = ba[0];
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, blocked_recv, &ba[i]);
	usleep(settle_us);
	uint64_t t0 = now_ns();
	zap_ctx_cancel(ba[0].ctx);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ba[i].rc, -ECANCELED);
		if (ba[i].done_ns - t0 >= prompt_ns)
			fprintf(stderr, "receiver %d woke %.1f ms after the cancel\n",
				i, (double)(ba[i].done_ns - t0) / 1e6);
		assert_true(ba[i].done_ns - t0 < prompt_ns);
	}
	zap_ctx_free(ba[0].ctx);
}

static void test_cancel_wakes_recv(void **state)
{
	struct zap_transport *a = ep_open();
	(void)state;

	cancel_wakes_three(a, 100000, 500 * 1000000ull);
	zap_close(a);
}

/* The scheduler state of thread @tid of this process ('R', 'S', ...), and
 * what it waits in (wchan, "" if unreadable). */
static char thread_state(pid_t tid, char *wchan, size_t wl)
{
	char path[64], buf[512];
	char st = '?';
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	if ((f = fopen(path, "r"))) {
		/* "tid (comm) S ...": comm may hold spaces, the state follows
		 * the last ')'. */
		if (fgets(buf, sizeof(buf), f)) {
			char *rp = strrchr(buf, ')');
			if (rp && rp[1] == ' ')
				st = rp[2];
		}
		fclose(f);
	}
	wchan[0] = '\0';
	snprintf(path, sizeof(path), "/proc/self/task/%d/wchan", (int)tid);
	if ((f = fopen(path, "r"))) {
		if (!fgets(wchan, (int)wl, f))
			wchan[0] = '\0';
		fclose(f);
	}
	return st;
}

/*
 * Wait (up to 10 s) until the thread that published its id in @a has
 * entered zap_recv() and sleeps in the kernel there: its state is 'S'
 * three reads in a row, 1 ms apart (so not a passing lock). Nothing else
 * the thread does after publishing its id sleeps.
 */
static void wait_blocked(struct block_arg *a)
{
	char wchan[64];
	int asleep = 0;

	for (int i = 0; i < 10000 && asleep < 3; i++) {
		pid_t tid = atomic_load(&a->tid);
		if (tid && thread_state(tid, wchan, sizeof(wchan)) == 'S')
			asleep++;
		else
			asleep = 0;
		usleep(1000);
	}
	assert_int_equal(asleep, 3);
	thread_state(atomic_load(&a->tid), wchan, sizeof(wchan));
	fprintf(stderr, "# receiver %d blocked (wchan %s)\n",
		(int)atomic_load(&a->tid), wchan[0] ? wchan : "?");
	/* Where the kernel names it: poll() (the leader) or a futex (a
	 * follower on the condition variable, or the wire's mutex). */
	if (wchan[0] && strcmp(wchan, "0"))
		assert_true(strstr(wchan, "poll") || strstr(wchan, "futex"));
}

static void test_close_while_blocked(void **state)
{
	struct zap_transport *a = ep_open();
	struct block_arg ba[2] = {{.t = a}, {.t = a}};
	pthread_t th[2];
	(void)state;

	/* One receiver leads (sleeps in poll), the other follows (sleeps on
	 * the condition variable): zap_close() must wake both. */
	pthread_create(&th[0], NULL, blocked_recv, &ba[0]);
	pthread_create(&th[1], NULL, blocked_recv, &ba[1]);
	wait_blocked(&ba[0]);
	wait_blocked(&ba[1]);
	zap_close(a);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	assert_int_equal(ba[0].rc, -ESHUTDOWN);
	assert_int_equal(ba[1].rc, -ESHUTDOWN);
}

/* A sender blocked on a full socket (the receiver never reads) is woken by
 * its ctx's deadline. */
static void test_send_deadline(void **state)
{
	struct zap_transport *a = ep_open(), *b = ep_open();
	char ab[ZAP_PEER_MAX];
	struct zap_ctx *ctx;
	const size_t sz = 32u << 20;
	unsigned char *buf = calloc(1, sz);
	int r = 0;
	(void)state;

	ep_addr(b, ab);
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, 300 * 1000000ull);
	for (int i = 0; i < 8 && !r; i++)
		r = zap_send(a, ab, buf, sz, ctx);
	assert_int_equal(r, -ETIMEDOUT);
	zap_ctx_free(ctx);
	free(buf);
	zap_close(a);
	zap_close(b);
}

/*
 * A send abandoned mid-frame (its deadline fires while the peer is not
 * reading) retires the connection instead of closing it: the peer still
 * gets every complete message sent before (and drops only the partial
 * one), we still get everything the peer sends on it until its FIN, and
 * the next send goes out on a new connection, delivered after the old
 * connection's messages. Closing (as this code once did) threw away the
 * unread data on one side and reset the connection, losing the other
 * side's completed messages as well.
 */
struct abandon_rx {
	struct zap_transport *t;
	unsigned want;      /* complete 'A' messages before the follow-up */
	unsigned got;
	bool follow_up;
	bool bad;
};

static void *abandon_reader(void *p)
{
	struct abandon_rx *x = p;
	while (!x->follow_up && !x->bad) {
		struct zap_msg *m = NULL;
		if (zap_recv(x->t, NULL, &m)) {
			x->bad = true;
			break;
		}
		char tag;
		unsigned a, b;
		if (zap_msg_len(m) >= 64) { /* the partial message, delivered */
			x->bad = true;
			zap_msg_release(m);
			break;
		}
		parse_tagged(m, &tag, &a, &b);
		zap_msg_release(m);
		if (tag == 'A' && a == x->got && x->got < x->want)
			x->got++;
		else if (tag == 'F' && x->got == x->want)
			x->follow_up = true;
		else
			x->bad = true;
	}
	return NULL;
}

static void test_send_abandoned_mid_frame(void **state)
{
	struct zap_transport *a = ep_open(), *b = ep_open();
	char aa[ZAP_PEER_MAX], ab[ZAP_PEER_MAX];
	const unsigned na = 8, nb = 6;
	const size_t big = 16u << 20;
	unsigned char *buf = calloc(1, big);
	struct zap_ctx *ctx;
	(void)state;

	ep_addr(a, aa);
	ep_addr(b, ab);
	zt_log_clear();
	/* B -> A first (B dials), then A's complete messages on it. */
	for (unsigned i = 0; i < nb / 2; i++)
		send_tagged(b, aa, 'B', i, 0);
	for (unsigned i = 0; i < na; i++)
		send_tagged(a, ab, 'A', i, 0);
	/* B reads nothing: the big one stops mid-frame at its deadline. */
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, 200 * 1000000ull);
	assert_int_equal(zap_send(a, ab, buf, big, ctx), -ETIMEDOUT);
	zap_ctx_free(ctx);
	/* The caller's own deadline: returned, logged at DEBUG only. */
	/* Mid-frame, or between two parts of the message (version 3). */
	assert_true(strstr(zap_last_error(), "interrupted mid-") != NULL);
	/* B has not seen A's FIN yet and keeps sending on that connection. */
	for (unsigned i = nb / 2; i < nb; i++)
		send_tagged(b, aa, 'B', i, 0);

	/* B starts reading; A's next send goes out once the old connection
	 * is drained, on a new one, and must arrive after A's earlier ones. */
	struct abandon_rx x = {.t = b, .want = na};
	pthread_t th;
	pthread_create(&th, NULL, abandon_reader, &x);
	send_tagged(a, ab, 'F', 0, 0);
	pthread_join(th, NULL);
	assert_false(x.bad);
	assert_int_equal(x.got, na);
	assert_true(x.follow_up);
	assert_true(log_wait("closed mid-message"));

	/* A got all of B's, in order, including those sent after A retired. */
	for (unsigned i = 0; i < nb; i++) {
		struct zap_msg *m = recv_ok(a);
		char tag;
		unsigned u, v;
		parse_tagged(m, &tag, &u, &v);
		assert_int_equal(tag, 'B');
		assert_int_equal(u, i);
		zap_msg_release(m);
	}
	/* Both directions still work. */
	send_tagged(b, aa, 'C', 1, 0);
	struct zap_msg *m = recv_ok(a);
	char tag;
	unsigned u, v;
	parse_tagged(m, &tag, &u, &v);
	assert_int_equal(tag, 'C');
	zap_msg_release(m);
	send_tagged(a, ab, 'D', 2, 0);
	m = recv_ok(b);
	parse_tagged(m, &tag, &u, &v);
	assert_int_equal(tag, 'D');
	zap_msg_release(m);
	free(buf);
	zap_close(a);
	zap_close(b);
}

/*
 * The peer moves to a new connection after ours was retired, while its
 * earlier messages on the old one are still unread here: they come first.
 * A's receive queue is kept full (one 1 MiB message it does not read), so
 * B's next three messages wait in A's socket; A abandons a large send
 * mid-frame, which retires the connection (FIN after the partial frame);
 * B reads that FIN, drops the connection and dials again for its next
 * three. Both connections were dialed by B, so which has the smaller
 * tie-break key is down to their random nonces: the ordering by key alone
 * delivered the new connection's messages first whenever its nonce was the
 * larger (half the rounds; test_send_abandoned_mid_frame failed so under
 * TSan in CI). Several rounds, so both orders of the nonces are met.
 */
static void move_after_retire_round(void)
{
	setenv("ZAP_TCP_RX_QUEUE_BYTES", "64K", 1);
	struct zap_transport *a = ep_open();
	unsetenv("ZAP_TCP_RX_QUEUE_BYTES");
	struct zap_transport *b = ep_open();
	char aa[ZAP_PEER_MAX], ab[ZAP_PEER_MAX];
	const size_t filler = 1u << 20, big = 16u << 20;
	unsigned char *buf = calloc(1, big);
	struct zap_ctx *ctx;

	ep_addr(a, aa);
	ep_addr(b, ab);
	zt_log_clear();
	send_tagged(b, aa, 'B', 0, 0); /* B dials */
	zap_msg_release(recv_ok(a));
	send_ok(b, aa, buf, filler); /* fills A's receive queue */
	for (unsigned i = 1; i <= 3; i++)
		send_tagged(b, aa, 'B', i, 0);

	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, 200 * 1000000ull);
	assert_int_equal(zap_send(a, ab, buf, big, ctx), -ETIMEDOUT);
	/* B's progress reads the FIN that follows the partial frame. */
	for (unsigned i = 0; i < 300 && !zt_log_has("closed mid-message"); i++) {
		struct zap_msg *m = NULL;
		zap_ctx_set_timeout(ctx, 10 * 1000000ull);
		assert_int_equal(zap_recv(b, ctx, &m), -ETIMEDOUT);
	}
	zap_ctx_free(ctx);
	assert_true(log_wait("closed mid-message"));
	for (unsigned i = 4; i <= 6; i++)
		send_tagged(b, aa, 'B', i, 0); /* on a new connection */

	struct zap_msg *m = recv_ok(a);
	assert_int_equal(zap_msg_len(m), filler);
	zap_msg_release(m);
	for (unsigned i = 1; i <= 6; i++) {
		char tag;
		unsigned u, v;
		m = recv_ok(a);
		parse_tagged(m, &tag, &u, &v);
		zap_msg_release(m);
		assert_int_equal(tag, 'B');
		assert_int_equal(u, i);
	}
	free(buf);
	zap_close(a);
	zap_close(b);
}

static void test_move_after_retire(void **state)
{
	(void)state;
	for (int round = 0; round < 8; round++)
		move_after_retire_round();
}

/* ------------------------------------------------------------------------ */
/* Spinning (ZAP_TCP_SPIN_US, read when an endpoint opens)                   */
/* ------------------------------------------------------------------------ */

static struct zap_transport *ep_open_spin(const char *us)
{
	setenv("ZAP_TCP_SPIN_US", us, 1);
	struct zap_transport *t = ep_open();
	unsetenv("ZAP_TCP_SPIN_US");
	return t;
}

struct echo_arg {
	struct zap_transport *t;
	int n;
};

static void *echo_n(void *p)
{
	struct echo_arg *a = p;
	for (int i = 0; i < a->n; i++) {
		struct zap_msg *m = recv_ok(a->t);
		send_ok(a->t, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m));
		zap_msg_release(m);
	}
	return NULL;
}

static void test_spin_pingpong(void **state)
{
	struct zap_transport *a = ep_open_spin("200"), *b = ep_open_spin("200");
	struct echo_arg ea = {.t = b, .n = 2000};
	char ab[ZAP_PEER_MAX];
	unsigned char buf[64];
	pthread_t th;
	(void)state;

	ep_addr(b, ab);
	pthread_create(&th, NULL, echo_n, &ea);
	for (int i = 0; i < ea.n; i++) {
		fill(buf, sizeof(buf), (uint32_t)i);
		send_ok(a, ab, buf, sizeof(buf));
		struct zap_msg *m = recv_ok(a);
		assert_int_equal(zap_msg_len(m), sizeof(buf));
		assert_memory_equal(zap_msg_data(m), buf, sizeof(buf));
		zap_msg_release(m);
	}
	/* A 1 MiB message through spinning ends (a sender on a full socket
	 * may be the one spinning). */
	unsigned char *big = malloc(1u << 20);
	fill(big, 1u << 20, 7);
	pthread_join(th, NULL);
	ea.n = 1; /* after the join: the echo thread reads it */
	pthread_create(&th, NULL, echo_n, &ea);
	send_ok(a, ab, big, 1u << 20);
	struct zap_msg *m = recv_ok(a);
	assert_int_equal(zap_msg_len(m), 1u << 20);
	assert_memory_equal(zap_msg_data(m), big, 1u << 20);
	zap_msg_release(m);
	pthread_join(th, NULL);
	free(big);
	zap_close(a);
	zap_close(b);
}

/* With a spin longer than the test, the blocked receivers are still
 * spinning when the cancel, the deadline or the close comes: each must
 * end the spin promptly, not after it. */
#define SPIN_LONG "1000000"
/* "Promptly" is "before the spin would have ended": the spin's own length,
 * the longest ZAP_TCP_SPIN_US allows (so not scaled), 10-20 times what an
 * unloaded host takes; a load that delays a wake-up by a whole second
 * would fail it. */
#define PROMPT_NS (1000 * 1000000ull)

static void test_spin_cancel_deadline_close(void **state)
{
	struct zap_transport *a = ep_open_spin(SPIN_LONG);
	struct block_arg ba;
	pthread_t th[2];
	uint64_t t0;
	(void)state;

	/* Cancel: one receiver leads (spins), two follow; all wake. */
	cancel_wakes_three(a, 50000, PROMPT_NS);

	/* Deadline: 50 ms into a 1 s spin. */
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	assert_int_equal(zap_ctx_new(&ctx), 0);
	assert_int_equal(zap_ctx_set_timeout(ctx, 50 * 1000000ull), 0);
	t0 = now_ns();
	assert_int_equal(zap_recv(a, ctx, &m), -ETIMEDOUT);
	uint64_t dt = now_ns() - t0;
	if (dt >= 50 * 1000000ull + PROMPT_NS)
		fprintf(stderr, "deadline of 50 ms took %.1f ms\n", (double)dt / 1e6);
	assert_true(dt >= 45 * 1000000ull);
	assert_true(dt < PROMPT_NS);
	assert_null(m);
	zap_ctx_free(ctx);

	/* A message still ends the spin at once. */
	char aa[ZAP_PEER_MAX];
	ep_addr(a, aa);
	ba = (struct block_arg){.t = a, .rc = 1};
	pthread_create(&th[0], NULL, blocked_recv, &ba);
	usleep(50000);
	t0 = now_ns();
	send_ok(a, aa, "x", 1);
	pthread_join(th[0], NULL);
	assert_int_equal(ba.rc, 0);
	assert_true(ba.done_ns - t0 < PROMPT_NS);

	/* Shutdown (which zap_close() begins with) wakes a spinning receiver
	 * and a follower. Not zap_close() itself: a thread not yet inside
	 * zap_recv() on a loaded host would call it on a freed handle (zap.h:
	 * shut down, join, then close; test_close_while_blocked closes
	 * under receivers it saw asleep inside). */
	struct block_arg cb[2] = {{.t = a}, {.t = a}};
	pthread_create(&th[0], NULL, blocked_recv, &cb[0]);
	pthread_create(&th[1], NULL, blocked_recv, &cb[1]);
	usleep(50000);
	t0 = now_ns();
	zap_shutdown(a);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	zap_close(a);
	assert_int_equal(cb[0].rc, -ESHUTDOWN);
	assert_int_equal(cb[1].rc, -ESHUTDOWN);
	assert_true(cb[0].done_ns - t0 < PROMPT_NS);
	assert_true(cb[1].done_ns - t0 < PROMPT_NS);
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_deadline),
		cmocka_unit_test(test_cancel_wakes_recv),
		cmocka_unit_test(test_close_while_blocked),
		cmocka_unit_test(test_send_deadline),
		cmocka_unit_test(test_send_abandoned_mid_frame),
		cmocka_unit_test(test_move_after_retire),
		cmocka_unit_test(test_spin_pingpong),
		cmocka_unit_test(test_spin_cancel_deadline_close),
	};

	return tcp_run_tests(tests, sizeof(tests) / sizeof(tests[0]));
}
