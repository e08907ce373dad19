/* SPDX-License-Identifier: MIT */
/*
 * Fewer system calls per message (util/tcp/tcp_txq.c, issue #16), driven on
 * the wire directly so that tcp_wire_stats() counts exactly this wire's
 * calls:
 *  - a lone sender writes each frame, header and payload, with one call;
 *  - frames queued in the socket are received several per read;
 *  - 8 threads sending small messages, interleaved with large ones, to one
 *    peer coalesce (fewer send calls than frames), and every message
 *    arrives once, intact, in its sender's order;
 *  - a send whose deadline passes while its frame waits behind another
 *    returns -ETIMEDOUT and its frame never arrives; the next one does;
 *  - when the connection dies under queued frames, every waiting sender
 *    returns (an error: nothing of theirs reached the peer), none hangs;
 *  - 8 senders against a peer that does not read, each send with a
 *    deadline: the peer then receives exactly the messages whose send
 *    returned 0, in order, and nothing of the sends that failed.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tcp_wire.h"
#include "wire_host.h"

#define SENDERS 8
#define PER_SENDER 3000
#define BIG (256u << 10)
#define HUGE (48u << 20) /* more than loopback's socket buffers hold */

static struct tcp_wire *open_wire(const char *dom)
{
	struct tcp_wire_args a = {
		.host = &host,
		.domain = dom,
		.listen = "127.0.0.1:0",
		.max_msg_size = 64u << 20,
		.alloc = { .alloc = wire_malloc_alloc },
	};
	struct tcp_wire *w = NULL;

	assert_int_equal(tcp_wire_open(&a, &w), 0);
	return w;
}

/* A message: sender, sequence number, then bytes derived from both. */
struct mhdr {
	uint32_t sender, seq;
};

static unsigned char fill_byte(const struct mhdr *h, size_t i)
{
	return (unsigned char)(h->sender * 31u + h->seq * 7u + i);
}

static size_t make_msg(unsigned char *buf, uint32_t sender, uint32_t seq, size_t len)
{
	struct mhdr h = { sender, seq };

	memcpy(buf, &h, sizeof(h));
	for (size_t i = sizeof(h); i < len; i++)
		buf[i] = fill_byte(&h, i);
	return len;
}

static bool msg_ok(const struct zap_msg *m, struct mhdr *h)
{
	if (m->len < sizeof(*h))
		return false;
	memcpy(h, m->data, sizeof(*h));
	const unsigned char *p = m->data;
	for (size_t i = sizeof(*h); i < m->len; i++)
		if (p[i] != fill_byte(h, i))
			return false;
	return true;
}

/* ---- lone sender, batched receive -------------------------------------- */

static void test_lone_sender_one_call_per_frame(void **state)
{
	struct tcp_wire *a = open_wire("a"), *b = open_wire("b");
	char addr[ZAP_PEER_MAX];
	unsigned char buf[64];
	struct tcp_wire_stats sb, sa;
	struct tctx c;
	const int n = 200;

	(void)state;
	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	/* Nobody reads on a yet: the frames wait in its socket. */
	for (int i = 0; i < n; i++)
		assert_int_equal(tcp_wire_send(b, addr, buf,
					       make_msg(buf, 0, (uint32_t)i, sizeof(buf)),
					       within_ms(&c, 5000)),
				 0);
	tcp_wire_stats(b, &sb);
	fprintf(stderr, "# lone sender: %llu frames, %llu send calls\n",
		(unsigned long long)sb.tx_frames, (unsigned long long)sb.tx_calls);
	assert_int_equal(sb.tx_frames, n);
	assert_int_equal(sb.tx_calls, n); /* header and payload together */

	usleep(100000); /* let loopback deliver them all; only speeds it up */
	for (int i = 0; i < n; i++) {
		struct zap_msg *m;
		struct mhdr h = { 0, 0 };
		assert_int_equal(tcp_wire_recv(a, within_ms(&c, 5000), &m), 0);
		assert_true(msg_ok(m, &h));
		assert_int_equal(h.seq, i);
		m->release(m);
	}
	tcp_wire_stats(a, &sa);
	fprintf(stderr, "# receiver: %llu frames in %llu reads\n",
		(unsigned long long)sa.rx_frames, (unsigned long long)sa.rx_reads);
	assert_int_equal(sa.rx_frames, n);
	/* 200 x 80 bytes fit one read of the 64 KiB buffer. */
	assert_true(sa.rx_reads * 10 <= (uint64_t)n);
	tcp_wire_destroy(b);
	tcp_wire_destroy(a);
}

/* ---- concurrent senders ------------------------------------------------ */

/* A sending thread: sender @id sends @msgs messages of @len bytes (0: a
 * mix, see sender_main()) with a deadline of @ms each and stops at the
 * first that fails; @ok sends returned 0, then @rc. */
struct sjob {
	struct tcp_wire *w;
	const char *addr;
	uint32_t id;
	uint32_t msgs;
	size_t len;
	unsigned ms;
	uint32_t ok;
	int rc;
};

/* @m is intact and the next of its sender's messages (next[] counts). */
static void check_next(struct zap_msg *m, uint32_t *next)
{
	struct mhdr h = { 0, 0 };

	assert_true(msg_ok(m, &h));
	assert_true(h.sender < SENDERS);
	assert_int_equal(h.seq, next[h.sender]); /* in order, none lost */
	next[h.sender]++;
	m->release(m);
}

static void *sender_main(void *arg)
{
	struct sjob *j = arg;
	unsigned char *buf = malloc(j->len ? j->len : BIG);
	struct tctx c;

	assert_non_null(buf);
	for (uint32_t i = 0; i < j->msgs; i++) {
		size_t len = j->len;
		if (!len) /* the mix: sender 0 sends a large message now and then */
			len = j->id == 0 && i % 100 == 0 ? BIG : 16 + (i * 13u + j->id) % 200;
		make_msg(buf, j->id, i, len);
		j->rc = tcp_wire_send(j->w, j->addr, buf, len, within_ms(&c, j->ms));
		if (j->rc)
			break;
		j->ok++;
	}
	free(buf);
	return NULL;
}

/*
 * One scenario with SENDERS threads sending from wire b to wire a, each
 * as @tmpl says (msgs, len, ms). a receives @during messages (20 s each)
 * while they send; then, once every sender has returned, b's counters
 * are read into @sb and a receives until @after_ms pass with nothing
 * (@after counts those messages, @after_rc is the receive that ended
 * it). Every message a receives is intact (@tmpl->len long when that is
 * set) and the next of its sender's (@next counts them).
 */
struct crowd {
	struct sjob tmpl;
	uint32_t during;
	unsigned after_ms;
	struct sjob j[SENDERS];
	uint32_t next[SENDERS];
	struct tcp_wire_stats sb;
	uint32_t after;
	int after_rc;
};

static void crowd_run(struct crowd *k)
{
	struct tcp_wire *a = open_wire("a"), *b = open_wire("b");
	char addr[ZAP_PEER_MAX];
	pthread_t t[SENDERS];
	struct zap_msg *m;
	struct tctx c;

	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	for (uint32_t i = 0; i < SENDERS; i++) {
		k->j[i] = k->tmpl;
		k->j[i].w = b;
		k->j[i].addr = addr;
		k->j[i].id = i;
		k->next[i] = 0;
		assert_int_equal(pthread_create(&t[i], NULL, sender_main, &k->j[i]), 0);
	}
	for (uint32_t n = 0; n < k->during; n++) {
		assert_int_equal(tcp_wire_recv(a, within_ms(&c, 20000), &m), 0);
		check_next(m, k->next);
	}
	for (int i = 0; i < SENDERS; i++)
		pthread_join(t[i], NULL);
	tcp_wire_stats(b, &k->sb);
	k->after = 0;
	while ((k->after_rc = tcp_wire_recv(a, within_ms(&c, k->after_ms), &m)) == 0) {
		if (k->tmpl.len)
			assert_int_equal(m->len, k->tmpl.len);
		check_next(m, k->next);
		k->after++;
	}
	tcp_wire_destroy(b);
	tcp_wire_destroy(a);
}

static void test_eight_senders_coalesce_in_order(void **state)
{
	struct crowd k = { .tmpl = { .msgs = PER_SENDER, .ms = 20000 },
			   .during = SENDERS * PER_SENDER,
			   .after_ms = 200 };

	(void)state;
	crowd_run(&k);
	for (int i = 0; i < SENDERS; i++)
		assert_int_equal(k.j[i].rc, 0);
	/* Nothing more, in particular no duplicate. */
	assert_int_equal(k.after_rc, -ETIMEDOUT);
	assert_int_equal(k.after, 0);
	fprintf(stderr, "# %d senders: %llu frames in %llu send calls (%.2f per call)\n",
		SENDERS, (unsigned long long)k.sb.tx_frames,
		(unsigned long long)k.sb.tx_calls,
		(double)k.sb.tx_frames / (double)k.sb.tx_calls);
	assert_int_equal(k.sb.tx_frames, SENDERS * PER_SENDER);
	/* Coalesced: the large messages alone keep the others queueing. */
	assert_true(k.sb.tx_calls < k.sb.tx_frames);
}

/* ---- a deadline while queued -------------------------------------------- */

struct one_send {
	struct tcp_wire *w;
	const char *addr;
	const void *buf;
	size_t len;
	unsigned ms;
	int rc;
};

static void *one_send_main(void *arg)
{
	struct one_send *s = arg;
	struct tctx c;

	s->rc = tcp_wire_send(s->w, s->addr, s->buf, s->len, within_ms(&c, s->ms));
	return NULL;
}

/* A huge message from a thread that blocks on the full socket (a does not
 * read), owning b's tx side until a reads. */
static void start_huge(struct one_send *s, pthread_t *t, struct tcp_wire *b,
		       const char *addr, unsigned ms)
{
	unsigned char *huge = malloc(HUGE);

	assert_non_null(huge);
	make_msg(huge, 9, 0, HUGE);
	*s = (struct one_send){ b, addr, huge, HUGE, ms, 1 };
	assert_int_equal(pthread_create(t, NULL, one_send_main, s), 0);
	usleep(300000); /* it owns the tx side by now */
}

static void test_deadline_while_queued(void **state)
{
	struct tcp_wire *a = open_wire("a"), *b = open_wire("b");
	char addr[ZAP_PEER_MAX];
	unsigned char small[100], after[100];
	struct one_send big, q;
	pthread_t tb, tq;
	struct tctx c;

	(void)state;
	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	start_huge(&big, &tb, b, addr, 30000);
	q = (struct one_send){ b,   addr, small, make_msg(small, 1, 0, sizeof(small)),
			       300, 1 };
	assert_int_equal(pthread_create(&tq, NULL, one_send_main, &q), 0);
	pthread_join(tq, NULL);
	assert_int_equal(q.rc, -ETIMEDOUT); /* queued, never started */

	/* a reads: the huge message, then only the later small one. */
	struct one_send q2 = { b,     addr, after, make_msg(after, 1, 1, sizeof(after)),
			       30000, 1 };
	assert_int_equal(pthread_create(&tq, NULL, one_send_main, &q2), 0);
	struct zap_msg *m;
	struct mhdr h = { 0, 0 };
	assert_int_equal(tcp_wire_recv(a, within_ms(&c, 30000), &m), 0);
	assert_int_equal(m->len, HUGE);
	assert_true(msg_ok(m, &h));
	m->release(m);
	assert_int_equal(tcp_wire_recv(a, within_ms(&c, 30000), &m), 0);
	assert_true(msg_ok(m, &h));
	assert_int_equal(h.sender, 1);
	assert_int_equal(h.seq, 1);
	m->release(m);
	assert_int_equal(tcp_wire_recv(a, within_ms(&c, 200), &m), -ETIMEDOUT);
	pthread_join(tb, NULL);
	pthread_join(tq, NULL);
	assert_int_equal(big.rc, 0);
	assert_int_equal(q2.rc, 0);
	free((void *)big.buf);
	tcp_wire_destroy(b);
	tcp_wire_destroy(a);
}

/* ---- the connection dies under queued frames ----------------------------- */

static void test_conn_dies_with_queue(void **state)
{
	struct tcp_wire *a = open_wire("a"), *b = open_wire("b");
	char addr[ZAP_PEER_MAX];
	unsigned char small[4][64];
	struct one_send big, q[4];
	pthread_t tb, tq[4];

	(void)state;
	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	start_huge(&big, &tb, b, addr, 30000);
	for (int i = 0; i < 4; i++) {
		q[i] = (struct one_send){
			b,     addr, small[i], make_msg(small[i], 2, (uint32_t)i, 64),
			20000, 1
		};
		assert_int_equal(pthread_create(&tq[i], NULL, one_send_main, &q[i]), 0);
	}
	usleep(200000); /* queued behind the huge one */
	/* a goes away with unread data: the kernel resets the connection,
	 * and nothing listens at a's address any more. */
	uint64_t t0 = now_ns();
	tcp_wire_destroy(a);
	pthread_join(tb, NULL);
	for (int i = 0; i < 4; i++) {
		pthread_join(tq[i], NULL);
		fprintf(stderr, "# queued sender %d: %d\n", i, q[i].rc);
		assert_true(q[i].rc < 0);
		assert_int_not_equal(q[i].rc, -ETIMEDOUT); /* told, not timed out */
	}
	fprintf(stderr, "# huge sender: %d; all returned %.0f ms after the reset\n",
		big.rc, (double)(now_ns() - t0) / 1e6);
	assert_true(big.rc < 0);
	assert_true(now_ns() - t0 < 10000000000ull);
	free((void *)big.buf);
	tcp_wire_destroy(b);
}

/* ---- deadlines on a full socket: what a sender is told is what arrives --- */

#define FULL_MSGS 20000
#define FULL_LEN (8u << 10) /* queueable: at most TCP_TXQ_FRAME_MAX */

/*
 * 8 senders of 8 KiB frames to a peer that does not read: the socket
 * fills with frames written together, owners give back what they had not
 * started, and every send ends by its deadline, some mid-frame (the
 * connection retires), some queued. Then the peer reads: it gets exactly
 * the messages whose send returned 0, in order per sender, and nothing
 * of a send that failed.
 */
static void test_deadlines_on_full_socket(void **state)
{
	struct crowd k = { .tmpl = { .msgs = FULL_MSGS, .len = FULL_LEN, .ms = 500 },
			   .after_ms = 1000 };

	(void)state;
	crowd_run(&k);
	for (int i = 0; i < SENDERS; i++) {
		fprintf(stderr, "# sender %d: %u sent, then %d\n", i, k.j[i].ok,
			k.j[i].rc);
		assert_true(k.j[i].ok < FULL_MSGS); /* the socket filled */
		assert_true(k.j[i].rc == -ETIMEDOUT || k.j[i].rc == -ECONNABORTED);
	}
	fprintf(stderr, "# %llu frames in %llu send calls\n",
		(unsigned long long)k.sb.tx_frames, (unsigned long long)k.sb.tx_calls);
	for (int i = 0; i < SENDERS; i++)
		assert_int_equal(k.next[i], k.j[i].ok); /* all told 0, no other */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lone_sender_one_call_per_frame),
		cmocka_unit_test(test_eight_senders_coalesce_in_order),
		cmocka_unit_test(test_deadline_while_queued),
		cmocka_unit_test(test_conn_dies_with_queue),
		cmocka_unit_test(test_deadlines_on_full_socket),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
