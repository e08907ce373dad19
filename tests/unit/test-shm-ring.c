/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory ring engine (util/shm): messages of every size go
 * through in order, the ring wraps, a full ring answers -EAGAIN and
 * resumes, the wake-up handshake is not lost, what an earlier lap left in
 * the data area is never read as a record, and a producer that scribbles
 * on the region (positions, record headers, declared lengths) makes the
 * ring corrupt (-EPROTO) without any read or write outside it. A tagged
 * record reads as one message, its tag first.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shm_ring.h"
#include "zap-test.h"

#define LOG2 12u

struct sink {
	unsigned char *buf;
	uint64_t cap, len;
	int msgs;
	int stop_after; /* fail the chunk callback after this many calls */
	int calls;
};

static int collect(void *user, uint64_t total, uint64_t off, const void *data, size_t len,
		   bool last)
{
	struct sink *s = user;

	if (s->stop_after && ++s->calls > s->stop_after)
		return -ENOBUFS;
	assert_true(off + len <= total);
	if (off == 0) {
		free(s->buf);
		s->buf = malloc(total ? total : 1);
		s->cap = total;
		s->len = 0;
	}
	assert_int_equal(off, s->len);
	memcpy(s->buf + off, data, len);
	s->len += len;
	if (last) {
		assert_int_equal(s->len, total);
		s->msgs++;
		/* far more than any test sends: a consumer that reads what
		 * nobody published loops through the fake records for ever */
		assert_true(s->msgs < 1000000);
	}
	return 0;
}

struct pair {
	void *region;
	struct zshm_tx tx;
	struct zshm_rx rx;
};

/* What a record header followed by a total of 0 looks like: a whole
 * empty message, were it read as a record. */
static void fake_records(unsigned char *d, size_t len)
{
	uint32_t rec[4] = { 8, ZSHM_F_FIRST | ZSHM_F_LAST, 0, 0 };

	for (size_t i = 0; i + sizeof(rec) <= len; i += sizeof(rec))
		memcpy(d + i, rec, sizeof(rec));
}

/* The data area starts out full of fake records: a consumer that read a
 * header slot the producer did not publish would count extra messages. */
static void pair_init(struct pair *p, uint64_t max_msg)
{
	p->region = aligned_alloc(64, zshm_region_bytes(LOG2));
	assert_non_null(p->region);
	fake_records((unsigned char *)p->region + ZSHM_HDR_BYTES, (size_t)1 << LOG2);
	assert_int_equal(zshm_tx_init(&p->tx, p->region, LOG2), 0);
	assert_int_equal(zshm_rx_attach(&p->rx, p->region, LOG2, max_msg), 0);
}

/* Send @len bytes of pattern @seed, draining the ring whenever it fills. */
static void send_all(struct pair *p, struct sink *s, size_t len, unsigned seed)
{
	unsigned char *m = malloc(len ? len : 1);
	bool wake;
	int rc;

	zt_fill(m, len, seed);
	while ((rc = zshm_send(&p->tx, m, len, &wake)) == -EAGAIN)
		assert_true(zshm_recv(&p->rx, collect, s) >= 0);
	assert_int_equal(rc, 0);
	while (zshm_rx_pending(&p->rx))
		assert_true(zshm_recv(&p->rx, collect, s) >= 0);
	assert_int_equal(s->len, len);
	assert_int_equal(zt_check_fill(s->buf, len, seed), len);
	free(m);
}

/* A tagged record (the express ring's, tcp_shm.c): read as one message of
 * the tag and the bytes; the published position counts it; above a
 * chunk's limit, nothing is written. */
static void test_tagged(void **state)
{
	const uint64_t tag = 0x0123456789abcdefull;
	const size_t limit = ((size_t)1 << LOG2) / 4 - 8 - 8; /* a chunk, header and total out */
	unsigned char m[900], big[2048] = { 0 };
	struct sink s = { 0 };
	struct pair p;
	bool wake;

	(void)state;
	pair_init(&p, 1 << 20);
	zt_fill(m, sizeof(m), 7);
	for (int i = 0; i < 20; i++) { /* wraps */
		uint64_t before = zshm_tx_published(&p.tx);
		assert_int_equal(zshm_send_tagged(&p.tx, tag + (uint64_t)i, m, sizeof(m), &wake),
				 0);
		assert_true(zshm_tx_published(&p.tx) > before);
		assert_int_equal(zshm_rx_published(&p.rx), zshm_tx_published(&p.tx));
		assert_int_equal(zshm_recv(&p.rx, collect, &s), 1);
		assert_int_equal(s.len, sizeof(m) + 8);
		uint64_t got;
		memcpy(&got, s.buf, 8);
		assert_int_equal(got, tag + (uint64_t)i);
		assert_memory_equal(s.buf + 8, m, sizeof(m));
	}
	assert_int_equal(zshm_send_tagged(&p.tx, tag, big, limit - 8, &wake), 0);
	assert_int_equal(zshm_recv(&p.rx, collect, &s), 1);
	assert_int_equal(zshm_send_tagged(&p.tx, tag, big, limit - 7, &wake), -EMSGSIZE);
	assert_int_equal(zshm_rx_pending(&p.rx), 0);
	free(s.buf);
	free(p.region);
}

static void test_sizes_in_order(void **state)
{
	static const size_t sizes[] = { 0, 1, 7, 8, 9, 1000, 1008, 1009, 4096, 65536, 1 << 20 };
	struct sink s = { 0 };
	struct pair p;

	(void)state;
	pair_init(&p, 1 << 20);
	for (int round = 0; round < 3; round++) /* wraps many times */
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			send_all(&p, &s, sizes[i], (unsigned)(i + 10 * round));
	assert_int_equal(s.msgs, 33);
	free(s.buf);
	free(p.region);
}

/*
 * A record is there only once its header is published: header slots land
 * in payloads of earlier laps (sizes that are not multiples of each
 * other), and every payload is made of fake records, yet only the
 * messages sent arrive, in order and whole.
 */
static void test_stale_never_read(void **state)
{
	unsigned char m[1000];
	struct sink s = { 0 };
	struct pair p;
	bool wake;
	int sent = 0, got = 0;

	(void)state;
	pair_init(&p, sizeof(m));
	fake_records(m, sizeof(m));
	for (int i = 0; i < 3000; i++) {
		size_t len = (size_t)(i * 37) % sizeof(m);
		int rc;
		while ((rc = zshm_send(&p.tx, m, len, &wake)) == -EAGAIN)
			got += zshm_recv(&p.rx, collect, &s);
		assert_int_equal(rc, 0);
		sent++;
		if (i % 7 == 0) { /* drained to the last record now and then */
			got += zshm_recv(&p.rx, collect, &s);
			assert_int_equal(got, sent);
			assert_int_equal(s.len, len);
			assert_memory_equal(s.buf, m, len);
		}
	}
	got += zshm_recv(&p.rx, collect, &s);
	assert_int_equal(got, sent);
	assert_int_equal(zshm_recv(&p.rx, collect, &s), 0);
	assert_false(zshm_rx_prepare_sleep(&p.rx)); /* nothing there: may sleep */
	free(s.buf);
	free(p.region);
}

static void test_full_then_resume(void **state)
{
	unsigned char m[900];
	struct sink s = { 0 };
	struct pair p;
	bool wake;
	int sent = 0;

	(void)state;
	pair_init(&p, 1 << 20);
	zt_fill(m, sizeof(m), 3);
	while (zshm_send(&p.tx, m, sizeof(m), &wake) == 0)
		sent++;
	assert_true(sent >= 3);
	/* A callback that stops keeps the record for the next call: the
	 * first message is taken, the second stays. */
	s.stop_after = 1;
	assert_int_equal(zshm_recv(&p.rx, collect, &s), -ENOBUFS);
	assert_int_equal(s.msgs, 1);
	s.stop_after = 0;
	assert_int_equal(zshm_recv(&p.rx, collect, &s), sent - 1);
	assert_int_equal(zshm_send(&p.tx, m, sizeof(m), &wake), 0); /* the one refused */
	assert_int_equal(zshm_recv(&p.rx, collect, &s), 1);
	free(s.buf);
	free(p.region);
}

static void test_wake_handshake(void **state)
{
	struct sink s = { 0 };
	struct pair p;
	bool wake;

	(void)state;
	pair_init(&p, 64);
	assert_false(zshm_rx_prepare_sleep(&p.rx)); /* empty: may sleep */
	assert_int_equal(zshm_send(&p.tx, "hi", 2, &wake), 0);
	assert_true(wake); /* the sleeper is woken */
	assert_int_equal(zshm_send(&p.tx, "hi", 2, &wake), 0);
	assert_false(wake); /* once */
	assert_true(zshm_rx_prepare_sleep(&p.rx)); /* data there: don't sleep */
	assert_int_equal(zshm_recv(&p.rx, collect, &s), 2);
	free(s.buf);
	free(p.region);
}

/* One corruption of the region after a good message was published. */
static void corrupt_case(void (*scribble)(unsigned char *region), int want)
{
	struct sink s = { 0 };
	struct pair p;
	bool wake;

	pair_init(&p, 4096);
	assert_int_equal(zshm_send(&p.tx, "hello, ring", 11, &wake), 0);
	scribble(p.region);
	assert_int_equal(zshm_recv(&p.rx, collect, &s), want);
	if (want == -EPROTO) /* and it stays corrupt */
		assert_int_equal(zshm_recv(&p.rx, collect, &s), -EPROTO);
	free(s.buf);
	free(p.region);
}

static void put64(unsigned char *r, unsigned off, uint64_t v)
{
	memcpy(r + off, &v, sizeof(v));
}

static void put32(unsigned char *r, unsigned off, uint32_t v)
{
	memcpy(r + off, &v, sizeof(v));
}

static void len_huge(unsigned char *r)
{
	put32(r, ZSHM_HDR_BYTES, 0xfffffff0u);
}
static void total_over_max(unsigned char *r)
{
	put64(r, ZSHM_HDR_BYTES + 8, 1ull << 32);
}
static void total_shorter(unsigned char *r)
{
	put64(r, ZSHM_HDR_BYTES + 8, 3);
}
static void flags_junk(unsigned char *r)
{
	put32(r, ZSHM_HDR_BYTES + 4, 0x80u | ZSHM_F_FIRST);
}
static void no_first(unsigned char *r)
{
	put32(r, ZSHM_HDR_BYTES + 4, ZSHM_F_LAST);
}
static void pad_midway(unsigned char *r)
{
	put32(r, ZSHM_HDR_BYTES + 4, ZSHM_F_PAD);
}
static void last_missing(unsigned char *r)
{
	put32(r, ZSHM_HDR_BYTES + 4, ZSHM_F_FIRST);
}

static void test_hostile_region(void **state)
{
	(void)state;
	corrupt_case(len_huge, -EPROTO);
	corrupt_case(total_over_max, -EPROTO);
	corrupt_case(total_shorter, -EPROTO);
	corrupt_case(flags_junk, -EPROTO);
	corrupt_case(no_first, -EPROTO);
	corrupt_case(pad_midway, -EPROTO);
	corrupt_case(last_missing, -EPROTO);
}

/*
 * The consumer reads head only to arm its sleep. A head ahead of what it
 * consumed promises records: none there breaks the ring. A head at or
 * behind it (a producer between a record and its exchange, or one that
 * lies) is armed as it is: sleeping is safe, and a producer that lies
 * only goes without its wake-ups.
 */
static void test_hostile_head(void **state)
{
	struct sink s = { 0 };
	struct pair p;
	bool wake;

	(void)state;
	pair_init(&p, 4096);
	assert_int_equal(zshm_send(&p.tx, "hello, ring", 11, &wake), 0);
	put64(p.region, 64, 1ull << 40);
	assert_int_equal(zshm_recv(&p.rx, collect, &s), 1); /* records, not head */
	assert_true(zshm_rx_prepare_sleep(&p.rx));	     /* do not sleep: read */
	assert_int_equal(zshm_recv(&p.rx, collect, &s), -EPROTO);
	free(p.region);

	pair_init(&p, 4096);
	assert_int_equal(zshm_send(&p.tx, "hello, ring", 11, &wake), 0);
	assert_int_equal(zshm_recv(&p.rx, collect, &s), 1);
	put64(p.region, 64, 13); /* behind, odd: armed already */
	assert_false(zshm_rx_prepare_sleep(&p.rx));
	put64(p.region, 64, 8); /* behind: armed on it */
	assert_false(zshm_rx_prepare_sleep(&p.rx));
	assert_int_equal(zshm_send(&p.tx, "again", 5, &wake), 0);
	assert_true(wake);
	assert_int_equal(zshm_recv(&p.rx, collect, &s), 1);
	free(s.buf);
	free(p.region);
}

/* Send @m until the producer, out of the room it last saw, reads the
 * consumer's position; the count of sends that went through. */
static int send_until_looked(struct pair *p, const unsigned char *m, size_t len, int want)
{
	bool wake;
	int n = 0, rc;

	while ((rc = zshm_send(&p->tx, m, len, &wake)) == 0)
		n++;
	assert_int_equal(rc, want);
	return n;
}

/*
 * The consumer's position is read only when the room last seen runs out
 * (a read per record was a cache miss on both sides), and checked then: a
 * position ahead of what was published, or behind where it was last seen,
 * makes the ring corrupt for good.
 */
static void test_hostile_consumer(void **state)
{
	unsigned char m[64] = { 0 };
	struct sink s = { 0 };
	struct pair p;
	bool wake;

	(void)state;
	pair_init(&p, 4096);
	put64(p.region, 128, 1ull << 30); /* tail ahead of anything published */
	int n = send_until_looked(&p, m, sizeof(m), -EPROTO);
	assert_true(n > 0 && (uint64_t)n * 80 <= (1u << LOG2)); /* not one past the room */
	assert_int_equal(zshm_send(&p.tx, m, sizeof(m), &wake), -EPROTO);
	free(p.region);

	/* Consumed, seen, then moved back: the room it frees again is not
	 * taken. */
	pair_init(&p, 4096);
	send_until_looked(&p, m, sizeof(m), -EAGAIN);
	assert_true(zshm_recv(&p.rx, collect, &s) > 0);
	assert_int_equal(zshm_send(&p.tx, m, sizeof(m), &wake), 0); /* looked: all free */
	put64(p.region, 128, 0);
	send_until_looked(&p, m, sizeof(m), -EPROTO);
	free(s.buf);
	free(p.region);
}

static void test_attach_checks(void **state)
{
	struct pair p;
	struct zshm_rx rx;

	(void)state;
	pair_init(&p, 64);
	assert_int_equal(zshm_rx_attach(&rx, p.region, LOG2 + 1, 64), -EPROTO); /* size disagrees */
	put64(p.region, 0, 0);
	assert_int_equal(zshm_rx_attach(&rx, p.region, LOG2, 64), -EPROTO); /* no magic */
	assert_int_equal(zshm_rx_attach(&rx, p.region, 40, 64), -EINVAL);
	free(p.region);
}

/* The other direction's flags: a producer that waits for room is told
 * when there is some, a consumer that closed makes sends fail, and the
 * room the producer sees follows the consumer. */
static void test_producer_wait_and_close(void **state)
{
	struct pair p;
	struct sink s = { 0 };
	bool wake;
	unsigned char *big = calloc(1, (size_t)1 << LOG2);
	(void)state;
	pair_init(&p, 1u << 30);
	uint64_t room0 = zshm_tx_room(&p.tx);
	assert_int_equal(room0, (uint64_t)1 << LOG2);
	assert_int_equal(zshm_send(&p.tx, big, (size_t)1 << LOG2, &wake), -EAGAIN);
	assert_true(zshm_tx_mid(&p.tx));
	assert_true(zshm_tx_room(&p.tx) < room0);
	/* Nobody waits yet: consuming says nothing. */
	assert_true(zshm_recv(&p.rx, collect, &s) >= 0);
	assert_false(zshm_rx_producer_flagged(&p.rx));
	assert_false(zshm_rx_producer_waits(&p.rx));
	zshm_tx_prepare_wait(&p.tx);
	assert_true(zshm_recv(&p.rx, collect, &s) >= 0);
	assert_true(zshm_rx_producer_flagged(&p.rx));
	assert_true(zshm_rx_producer_flagged(&p.rx)); /* a look clears nothing */
	assert_true(zshm_rx_producer_waits(&p.rx));
	assert_false(zshm_rx_producer_flagged(&p.rx)); /* cleared */
	assert_false(zshm_rx_producer_waits(&p.rx));
	while (zshm_send(&p.tx, big, (size_t)1 << LOG2, &wake) == -EAGAIN)
		assert_true(zshm_recv(&p.rx, collect, &s) >= 0);
	assert_false(zshm_tx_mid(&p.tx));
	assert_false(zshm_tx_peer_closed(&p.tx));
	zshm_rx_close(&p.rx);
	assert_true(zshm_tx_peer_closed(&p.tx));
	free(s.buf);
	free(big);
	free(p.region);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_in_order),	cmocka_unit_test(test_stale_never_read),
		cmocka_unit_test(test_full_then_resume), cmocka_unit_test(test_hostile_head),
		cmocka_unit_test(test_wake_handshake),  cmocka_unit_test(test_hostile_region),
		cmocka_unit_test(test_hostile_consumer), cmocka_unit_test(test_attach_checks),
		cmocka_unit_test(test_producer_wait_and_close), cmocka_unit_test(test_tagged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
