/* SPDX-License-Identifier: MIT */
/*
 * A raw same-host peer that writes its own shared-memory ring, from
 * plugins/default/WIRE.md ("Same host", "The ring's layout") alone: on a
 * connection whose HELLOs it exchanged as the dialer, it completes the
 * upgrade (shm_raw.h), sends the SHM frame, and then puts whatever
 * records a test makes up into its ring, for the tests that play a
 * hostile ring peer. Include after <cmocka.h>, "zap-test.h", "shm-side.h"
 * and "shm_raw.h" (cmocka, pthreads, libcrypto).
 */
#ifndef ZAP_TEST_RING_PEER_H
#define ZAP_TEST_RING_PEER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

/* The ring's layout (WIRE.md): positions, flags, where records start. */
#define RING_HEAD 64u
#define RING_CLOSED 76u
#define RING_TAIL 128u
#define RING_DATA 192u
#define RING_SIZE (1u << 21)
#define RING_FIRST 1u
#define RING_LAST 2u
#define RING_PAD 4u

struct ring_peer {
	int tcp, side;       /* the connection; the side channel (wake-ups) */
	unsigned char *ring; /* our tx ring, SIDE_RING_BYTES mapped */
	uint64_t head;       /* what we published */
};

static inline _Atomic uint64_t *ring_u64(const struct ring_peer *rp, unsigned off)
{
	return (_Atomic uint64_t *)(void *)(rp->ring + off);
}

static inline _Atomic uint32_t *ring_u32(const struct ring_peer *rp, unsigned off)
{
	return (_Atomic uint32_t *)(void *)(rp->ring + off);
}

/*
 * Upgrade @tcp, whose HELLOs were exchanged with us (instance RAW_ID,
 * nonce @nonce) as the dialer and the acceptor @their_id, to our ring
 * (shm_raw.h's answered(): challenge, request, the acceptor's proof and
 * ring; then ours and the confirmation), and send the SHM frame (wire
 * version @ver). The acceptor's ring is not read: what it sends stays
 * there.
 */
static inline void ring_peer_open(struct ring_peer *rp, int tcp, unsigned ver,
				  uint64_t their_id, uint64_t nonce)
{
	unsigned char frame[16];
	struct side_msg m;
	int theirs, got;

	rp->tcp = tcp;
	rp->head = 0;
	int mine = side_region(SIDE_RING_BYTES, true, true);
	rp->side = answered(tcp, their_id, nonce, mine, &theirs);
	close(theirs);
	rp->ring = mmap(NULL, SIDE_RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
	assert_true(rp->ring != MAP_FAILED);
	struct side_msg r = { .magic = SIDE_RING, .log2 = 21 };
	assert_true(side_put(rp->side, &r, sizeof(r), &mine, 1));
	close(mine);
	assert_int_equal(side_next(rp->side, &m, &got), SIDE_DONE);
	size_t n = zt_wire_hdr_v(frame, ver, 3, 0); /* SHM: our messages move */
	assert_int_equal(send(tcp, frame, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Whether the endpoint marked our ring closed (it closed the connection). */
static inline bool ring_peer_closed(const struct ring_peer *rp)
{
	return atomic_load(ring_u32(rp, RING_CLOSED)) != 0;
}

/* Room for @span bytes at the head within 5 s (the endpoint reads as it
 * makes progress); false when it closed the ring or made none. */
static inline bool ring_room(struct ring_peer *rp, uint64_t span)
{
	for (int i = 0; i < 5000; i++) {
		uint64_t tail = atomic_load(ring_u64(rp, RING_TAIL));
		if (ring_peer_closed(rp))
			return false;
		if (rp->head - tail + span <= RING_SIZE)
			return true;
		usleep(1000);
	}
	return false;
}

/* The header word of a record (length, then flags, native order). */
static inline uint64_t ring_hdr(uint32_t len, uint32_t flags)
{
	uint32_t h[2] = { len, flags };
	uint64_t w;
	memcpy(&w, h, sizeof(w));
	return w;
}

static inline _Atomic uint64_t *ring_slot(const struct ring_peer *rp, uint64_t at)
{
	return ring_u64(rp, RING_DATA + (unsigned)(at & (RING_SIZE - 1)));
}

/*
 * Publish a record of @flags: @total first (FIRST only), then @len bytes of
 * @p (NULL: of 'r'), and wake the endpoint if it sleeps. As WIRE.md says:
 * the payload, a zero in the next header slot, the header (release), then
 * head by an exchange whose low bit says the consumer sleeps. A record
 * never wraps: a PAD record fills the end first. false when the endpoint
 * closed our ring, or left no room.
 */
static inline bool ring_put(struct ring_peer *rp, uint32_t flags, uint64_t total,
			    const void *p, uint32_t len)
{
	uint32_t rlen = len + (flags & RING_FIRST ? 8u : 0u);
	uint64_t span = 8 + ((rlen + 7u) & ~7u), at = rp->head & (RING_SIZE - 1), pad = 0;

	if (at + span > RING_SIZE)
		pad = RING_SIZE - at;
	if (!ring_room(rp, pad + span + 8))
		return false;
	unsigned char *rec = rp->ring + RING_DATA + (pad ? 0 : at);
	if (flags & RING_FIRST)
		memcpy(rec + 8, &total, 8);
	if (p)
		memcpy(rec + 8 + (rlen - len), p, len);
	else
		memset(rec + 8 + (rlen - len), 'r', len);
	atomic_store_explicit(ring_slot(rp, rp->head + pad + span), 0, memory_order_relaxed);
	atomic_store_explicit(ring_slot(rp, rp->head + pad), ring_hdr(rlen, flags),
			      memory_order_release);
	if (pad)
		atomic_store_explicit(ring_slot(rp, rp->head),
				      ring_hdr((uint32_t)(pad - 8), RING_PAD),
				      memory_order_release);
	rp->head += pad + span;
	if (atomic_exchange(ring_u64(rp, RING_HEAD), rp->head) & 1u)
		(void)!send(rp->side, "w", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	return true;
}

static inline void ring_peer_close(struct ring_peer *rp)
{
	munmap(rp->ring, SIDE_RING_BYTES);
	close(rp->side);
	close(rp->tcp);
}

#endif /* ZAP_TEST_RING_PEER_H */
