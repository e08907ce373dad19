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
 *    returned 0, in order, and nothing of the sends that failed;
 *  - a burst (tcp_wire_send_burst()) writes 33 frames per call, returns
 *    early when the socket fills, and ends before a message too large
 *    for the peer or for us, delivering exactly what it counted.
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
	struct tcp_wire_args a = wire_args(dom, 64u << 20);
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
	/* A frame each, but the large messages (sender 0's every hundredth):
	 * one part, or 8 of 32 KiB while a spinning leader of ours wants its
	 * core back (TCP_PART_SHORT). */
	assert_true(k.sb.tx_frames >= SENDERS * PER_SENDER);
	assert_true(k.sb.tx_frames <= SENDERS * PER_SENDER + 7 * (PER_SENDER / 100));
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

	/* a reads: the huge message and only the later small one, which
	 * overlaps the huge one in time, so either may come first (version
	 * 3 sends the small one between two parts of the huge one). */
	struct one_send q2 = { b,     addr, after, make_msg(after, 1, 1, sizeof(after)),
			       30000, 1 };
	assert_int_equal(pthread_create(&tq, NULL, one_send_main, &q2), 0);
	bool got_huge = false, got_small = false;
	for (int i = 0; i < 2; i++) {
		struct zap_msg *m;
		struct mhdr h = { 0, 0 };
		assert_int_equal(tcp_wire_recv(a, within_ms(&c, 30000), &m), 0);
		assert_true(msg_ok(m, &h));
		if (m->len == HUGE) {
			assert_false(got_huge);
			got_huge = true;
		} else {
			assert_false(got_small);
			assert_int_equal(h.sender, 1);
			assert_int_equal(h.seq, 1);
			got_small = true;
		}
		m->release(m);
	}
	struct zap_msg *m;
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
	assert_true(now_ns() - t0 < zt_timeout_ms(10000) * 1000000ull);
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

/* ---- bursts (tcp_wire_send_burst(), zap_send_burst()) ------------------ */

/* Hand @v[0..n-1] over in as many calls as it takes, each with @ms; the
 * messages taken before the first failure, which goes to *@rc (0: none). */
static unsigned burst_loop(struct tcp_wire *w, const char *addr, const struct zap_iov *v,
			   unsigned n, unsigned ms, unsigned *calls, int *first, int *rc)
{
	unsigned i = 0;
	struct tctx c;

	*rc = 0;
	*calls = 0;
	while (i < n) {
		int k = tcp_wire_send_burst(w, addr, v + i, n - i, within_ms(&c, ms));
		if (!*calls)
			*first = k;
		++*calls;
		if (k <= 0) {
			*rc = k ? k : -EIO; /* 0 would be a bug: counted as one */
			break;
		}
		assert_true((unsigned)k <= n - i);
		i += (unsigned)k;
	}
	return i;
}

/* Receive @n messages of sender 0, numbered from @seq on, intact. */
static void recv_seq(struct tcp_wire *w, uint32_t seq, unsigned n)
{
	struct tctx c;

	for (unsigned i = 0; i < n; i++) {
		struct zap_msg *m;
		struct mhdr h = { 0, 0 };
		assert_int_equal(tcp_wire_recv(w, within_ms(&c, 5000), &m), 0);
		assert_true(msg_ok(m, &h));
		assert_int_equal(h.seq, seq + i);
		m->release(m);
	}
}

/* Nothing more arrives within 300 ms. */
static void recv_none(struct tcp_wire *w)
{
	struct zap_msg *m = NULL;
	struct tctx c;

	assert_int_equal(tcp_wire_recv(w, within_ms(&c, 300), &m), -ETIMEDOUT);
}

/*
 * 200 small messages of 8 to 207 bytes in one burst: the socket has room,
 * so one call takes them all, TCP_TXQ_BATCH + 1 = 33 frames per sendmsg(),
 * 7 system calls; all arrive in order, intact. Then 1,000 at once: the
 * first call stops at TCP_BURST_MAX (528), the second takes the rest.
 */
static void test_burst_calls(void **state)
{
	struct tcp_wire *a = open_wire("a"), *b = open_wire("b");
	char addr[ZAP_PEER_MAX];
	static unsigned char bufs[200][208];
	struct zap_iov v[200];
	struct tcp_wire_stats sb;
	unsigned calls;
	int first, rc;

	(void)state;
	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	for (uint32_t i = 0; i < 200; i++)
		v[i] = (struct zap_iov){ bufs[i], make_msg(bufs[i], 0, i, 8 + i) };
	assert_int_equal(burst_loop(b, addr, v, 200, 5000, &calls, &first, &rc), 200);
	assert_int_equal(rc, 0);
	tcp_wire_stats(b, &sb);
	fprintf(stderr, "# burst: %llu frames, %llu send calls, %u burst calls\n",
		(unsigned long long)sb.tx_frames, (unsigned long long)sb.tx_calls, calls);
	assert_int_equal(sb.tx_frames, 200);
	assert_int_equal(calls, 1);
	assert_int_equal(sb.tx_calls, 7);
	recv_seq(a, 0, 200);
	recv_none(a);

	/* 1,000 at once: a call stops after 528 (other senders' turn). */
	static unsigned char small[1000][16];
	static struct zap_iov w[1000];
	for (uint32_t i = 0; i < 1000; i++)
		w[i] = (struct zap_iov){ small[i], make_msg(small[i], 0, 200 + i, 16) };
	assert_int_equal(burst_loop(b, addr, w, 1000, 5000, &calls, &first, &rc), 1000);
	assert_int_equal(rc, 0);
	assert_int_equal(first, 528);
	assert_int_equal(calls, 2);
	recv_seq(a, 200, 1000);
	recv_none(a);
	tcp_wire_destroy(b);
	tcp_wire_destroy(a);
}

/*
 * 64 messages of 1 MiB in bursts to a peer that does not read: the socket
 * fills, so the first burst returns early with the messages it wrote whole
 * (it waited only to finish the one in progress, here until its deadline,
 * which leaves that one partial); the next call fails by its deadline. The
 * peer then receives exactly the messages the bursts counted, and after
 * that a fresh burst goes through.
 */
static void test_burst_full_socket(void **state)
{
	struct tcp_wire *a = open_wire("a"), *b = open_wire("b");
	char addr[ZAP_PEER_MAX];
	const size_t len = 1u << 20;
	unsigned char *buf = malloc(64 * len);
	struct zap_iov v[64];
	unsigned calls;
	int first, rc;

	(void)state;
	assert_non_null(buf);
	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	for (uint32_t i = 0; i < 64; i++)
		v[i] = (struct zap_iov){ buf + i * len, make_msg(buf + i * len, 0, i, len) };
	unsigned took = burst_loop(b, addr, v, 64, 500, &calls, &first, &rc);
	fprintf(stderr, "# full socket: first burst took %d, %u in all, then %d\n", first,
		took, rc);
	assert_true(first >= 1 && first < 33);
	assert_true(took < 64);
	assert_true(rc == -ETIMEDOUT || rc == -ECONNABORTED);
	recv_seq(a, 0, took);
	recv_none(a);
	/* The rest, now that the peer reads: no loss, no duplicate. */
	struct tctx c;
	int k = tcp_wire_send_burst(b, addr, v + took, 2, within_ms(&c, 5000));
	assert_true(k == 1 || k == 2);
	recv_seq(a, took, (unsigned)k);
	free(buf);
	tcp_wire_destroy(b);
	tcp_wire_destroy(a);
}

/*
 * Limits inside a burst: a message above the peer's announced maximum, or
 * above our own, ends the burst before it (nothing of it is written); the
 * next call fails -EMSGSIZE on it and the one after sends the rest.
 */
static void test_burst_limits(void **state)
{
	struct tcp_wire_args small = {
		.host = &host, .domain = "small", .listen = "127.0.0.1:0",
		.max_msg_size = 4096, .alloc = { .alloc = wire_malloc_alloc },
	};
	struct tcp_wire *a = NULL, *b = open_wire("b"), *sb = NULL;
	char addr[ZAP_PEER_MAX], baddr[ZAP_PEER_MAX];
	static unsigned char m[5][8192];
	size_t lens[5] = { 100, 100, 8192, 100, 100 };
	struct zap_iov v[5];
	struct tctx c;

	(void)state;
	assert_int_equal(tcp_wire_open(&small, &a), 0);
	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	for (uint32_t i = 0; i < 5; i++)
		v[i] = (struct zap_iov){ m[i], make_msg(m[i], 0, i, lens[i]) };
	/* Connect first, so that b knows a's limit. */
	assert_int_equal(tcp_wire_send_burst(b, addr, v, 1, within_ms(&c, 5000)), 1);
	recv_seq(a, 0, 1);
	assert_int_equal(tcp_wire_send_burst(b, addr, v + 1, 4, within_ms(&c, 5000)), 1);
	assert_int_equal(tcp_wire_send_burst(b, addr, v + 2, 3, within_ms(&c, 5000)),
			 -EMSGSIZE);
	assert_int_equal(tcp_wire_send_burst(b, addr, v + 3, 2, within_ms(&c, 5000)), 2);
	recv_seq(a, 1, 1);
	struct zap_msg *got;
	for (uint32_t i = 3; i < 5; i++) {
		struct mhdr h = { 0, 0 };
		assert_int_equal(tcp_wire_recv(a, within_ms(&c, 5000), &got), 0);
		assert_true(msg_ok(got, &h));
		assert_int_equal(h.seq, i);
		got->release(got);
	}
	recv_none(a);

	/* Our own limit: the small wire sending to b. */
	assert_int_equal(tcp_wire_address(b, baddr, sizeof(baddr)), 0);
	sb = a;
	assert_int_equal(tcp_wire_send_burst(sb, baddr, v + 1, 2, within_ms(&c, 5000)), 1);
	assert_int_equal(tcp_wire_send_burst(sb, baddr, v + 2, 1, within_ms(&c, 5000)),
			 -EMSGSIZE);
	recv_seq(b, 1, 1);
	recv_none(b);
	assert_int_equal(tcp_wire_send_burst(sb, baddr, v, 0, NULL), 0);
	tcp_wire_destroy(b);
	tcp_wire_destroy(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lone_sender_one_call_per_frame),
		cmocka_unit_test(test_eight_senders_coalesce_in_order),
		cmocka_unit_test(test_deadline_while_queued),
		cmocka_unit_test(test_conn_dies_with_queue),
		cmocka_unit_test(test_deadlines_on_full_socket),
		cmocka_unit_test(test_burst_calls),
		cmocka_unit_test(test_burst_full_socket),
		cmocka_unit_test(test_burst_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
