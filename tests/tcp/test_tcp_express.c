/* SPDX-License-Identifier: MIT */
/*
 * Wire version 4: the express ring (plugins/default/WIRE.md, "The express
 * ring"), written by a raw same-host peer from WIRE.md alone
 * (ring_peer.h), so that the order and every violation can be laid out
 * exactly:
 *
 *  - order: an express record goes out once the ring was read up to its
 *    fence and not before, whatever else is there: records written before
 *    the peer's switch (all visible at once) come out as the fences say,
 *    a whole message between two chunks of a large one included;
 *  - a whole message between two chunks of a large one comes out before
 *    the rest of a nearly full ring was read;
 *  - a peer that breaks the express ring is closed with the reason, after
 *    the messages it completed were delivered: a fence past the ring's
 *    end, a fence on records that are not there, a record that is not one
 *    whole message (a chunk, or shorter than its fence), a message above
 *    the endpoint's limit, a record above the express ring's own limit.
 *
 * No shared state.
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
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "log-capture.h"
#include "zap-test.h"
#include "shm-side.h"
#include "shm_raw.h"
#include "ring_peer.h"

/* An endpoint that shares memory with its own user, messages up to @max. */
static struct zap_transport *ep_open(uint64_t max)
{
	struct zap_attr a = { .size = sizeof(a),
			      .listen = "127.0.0.1:0",
			      .max_msg_size = max };
	struct zap_transport *t = NULL;

	setenv("ZAP_SHM", "user", 1);
	assert_int_equal(zap_pick("=default", 0, &a, &t), 0);
	return t;
}

/* A raw version-4 peer of @ep, upgraded, its SHM frame not yet sent. */
static void peer_attach(struct zap_transport *ep, struct ring_peer *rp, struct ring_peer *xp)
{
	char addr[ZAP_PEER_MAX];
	uint64_t their;

	assert_int_equal(zap_transport_address(ep, addr, sizeof(addr)), 0);
	/* shm_raw.h's proofs are RAW_ID's, with the nonce of the HELLO. */
	int fd = raw_hello_v(addr, 4, RAW_ID, RAW_ID * 3, &their);
	ring_peer_attach(rp, fd, 4, their, RAW_ID * 3);
	ring_peer_express(rp, xp);
}

/* An express record: @fence, then @len bytes of @msg. */
static bool x_put(struct ring_peer *xp, uint64_t fence, const void *msg, uint32_t len)
{
	unsigned char buf[8 + 8192];

	assert_true(len <= sizeof(buf) - 8);
	memcpy(buf, &fence, 8);
	memcpy(buf + 8, msg, len);
	return ring_put(xp, RING_FIRST | RING_LAST, len + 8u, buf, len + 8u);
}

static struct zap_msg *recv_within(struct zap_transport *t, unsigned ms)
{
	struct zap_msg *m;

	assert_int_equal(zt_recv_within(t, ms, &m), 0);
	return m;
}

/* The next message is @want (@len bytes; NULL: of 'r'). */
static void expect(struct zap_transport *t, const char *want, size_t len)
{
	struct zap_msg *m = recv_within(t, 10000);

	assert_int_equal(zap_msg_len(m), len);
	if (want)
		assert_memory_equal(zap_msg_data(m), want, len);
	else
		for (size_t i = 0; i < len; i++)
			assert_int_equal(((const char *)zap_msg_data(m))[i], 'r');
	zap_msg_release(m);
}

/*
 * Everything in both rings before the switch: an express message with no
 * fence, a large message's first chunk, a whole message between its
 * chunks, an express message fenced behind that one, the large message's
 * last chunk. Out come e0, b1, e1, then the large one: e1 neither before
 * b1 (its fence) nor after the large message (not fenced behind it).
 */
static void test_fence_order(void **state)
{
	struct zap_transport *ep = ep_open(1u << 20);
	struct ring_peer rp, xp;
	const uint64_t total = 100000;
	(void)state;

	peer_attach(ep, &rp, &xp);
	assert_true(x_put(&xp, 0, "e0", 2));
	assert_true(ring_put(&rp, RING_FIRST, total, NULL, 50000));
	assert_true(ring_put(&rp, RING_FIRST | RING_LAST, 2, "b1", 2));
	assert_true(x_put(&xp, rp.head, "e1", 2));
	assert_true(ring_put(&rp, RING_LAST, 0, NULL, (uint32_t)(total - 50000)));
	ring_peer_switch(&rp);
	expect(ep, "e0", 2);
	expect(ep, "b1", 2);
	expect(ep, "e1", 2);
	expect(ep, NULL, total);
	/* And the connection goes on. */
	assert_true(x_put(&xp, rp.head, "e2", 2));
	expect(ep, "e2", 2);
	ring_peer_close(&rp);
	zap_close(ep);
}

/*
 * A ring nearly full before the switch: a large message's first chunk, a
 * whole message, then the large message's other 56 chunks. The whole
 * message comes out before the endpoint read the ring to its end: a
 * round stops after TCP_SHM_ROUND_BYTES (1 MiB) of records, and hands
 * over what completed. Before, a round went on while the ring held
 * records, so a sender that kept it full held a small message back until
 * its large one completed (bench/MEASUREMENTS.md, "ring-round-bytes").
 * Then the large one, whole.
 */
static void test_round_bound(void **state)
{
	struct zap_transport *ep = ep_open(4u << 20);
	struct ring_peer rp, xp;
	const uint32_t chunk = 32768, chunks = 57;
	const uint64_t total = (uint64_t)chunk * chunks;
	(void)state;

	peer_attach(ep, &rp, &xp);
	assert_true(ring_put(&rp, RING_FIRST, total, NULL, chunk));
	assert_true(ring_put(&rp, RING_FIRST | RING_LAST, 2, "b1", 2));
	for (uint32_t i = 1; i < chunks; i++)
		assert_true(ring_put(&rp, i + 1 == chunks ? RING_LAST : 0, 0, NULL, chunk));
	ring_peer_switch(&rp);
	expect(ep, "b1", 2);
	assert_true(atomic_load(ring_u64(&rp, RING_TAIL)) < rp.head);
	expect(ep, NULL, total);
	ring_peer_close(&rp);
	zap_close(ep);
}

/* A peer whose express ring breaks in the way @bad lays out (after a good
 * express message): closed with @why, the good message delivered. */
static void broken(uint64_t max, void (*bad)(struct ring_peer *, struct ring_peer *),
		   const char *why)
{
	struct zap_transport *ep = ep_open(max);
	struct ring_peer rp, xp;

	zap_set_log_handler(zt_log_capture, NULL);
	zt_log_clear();
	peer_attach(ep, &rp, &xp);
	ring_peer_switch(&rp);
	assert_true(x_put(&xp, 0, "good", 4));
	expect(ep, "good", 4);
	bad(&rp, &xp);
	/* Someone must lead for the endpoint to read: receive meanwhile
	 * (nothing comes). */
	for (unsigned i = 0; !zt_log_has(why); i++) {
		struct zap_ctx *ctx;
		struct zap_msg *m = NULL;
		assert_int_equal(zap_ctx_new(&ctx), 0);
		zap_ctx_set_timeout(ctx, 20000000u);
		int r = zap_recv(ep, ctx, &m);
		zap_ctx_free(ctx);
		if (!r)
			fail_msg("a message of %zu bytes from the broken ring", zap_msg_len(m));
		/* a hang bound, not a timing check */
		if (i == zt_timeout_ms(10000) / 20)
			fail_msg("log lacks \"%s\" after 10 s", why);
	}
	assert_true(raw_closed(rp.tcp));
	assert_true(ring_peer_closed(&rp));
	fprintf(stderr, "# closed: %s\n", why);
	ring_peer_close(&rp);
	zap_set_log_handler(NULL, NULL);
	zap_close(ep);
}

static void bad_fence_past(struct ring_peer *rp, struct ring_peer *xp)
{
	assert_true(x_put(xp, rp->head + 4096, "late", 4));
}

/* head moved past 64 bytes of the ring with no record there */
static void bad_fence_nothing(struct ring_peer *rp, struct ring_peer *xp)
{
	atomic_store(ring_u64(rp, RING_HEAD), rp->head + 64);
	assert_true(x_put(xp, rp->head + 64, "late", 4));
}

static void bad_chunk(struct ring_peer *rp, struct ring_peer *xp)
{
	(void)rp;
	assert_true(ring_put(xp, RING_FIRST, 100, NULL, 50));
}

static void bad_short(struct ring_peer *rp, struct ring_peer *xp)
{
	(void)rp;
	assert_true(ring_put(xp, RING_FIRST | RING_LAST, 4, "abcd", 4));
}

static void bad_over_limit(struct ring_peer *rp, struct ring_peer *xp)
{
	static char big[2000];
	(void)rp;
	assert_true(x_put(xp, 0, big, sizeof(big)));
}

static void bad_over_ring_limit(struct ring_peer *rp, struct ring_peer *xp)
{
	static char big[8000];
	(void)rp;
	assert_true(x_put(xp, 0, big, sizeof(big)));
}

static void test_broken(void **state)
{
	(void)state;
	broken(1u << 20, bad_fence_past, "a fence past the ring's end");
	broken(1u << 20, bad_fence_nothing, "broke the");
	broken(1u << 20, bad_chunk, "a record that is not one whole message");
	broken(1u << 20, bad_short, "a record that is not one whole message");
	broken(1024, bad_over_limit, "a message above our limit");
	broken(1u << 20, bad_over_ring_limit, "a position or a record that cannot be");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fence_order),
		cmocka_unit_test(test_round_bound),
		cmocka_unit_test(test_broken),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
