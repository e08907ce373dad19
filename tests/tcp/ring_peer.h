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
/* Version 4: the express ring after the ring, 2^18 bytes of records. */
#define XRING_SIZE (1u << 18)
#define XRING_BYTES (192u + XRING_SIZE)
#define RING_FIRST 1u
#define RING_LAST 2u
#define RING_PAD 4u

struct ring_peer {
	int tcp, side;       /* the connection; the side channel (wake-ups) */
	unsigned char *ring; /* our tx ring (its header first) */
	uint64_t size;       /* its data bytes */
	uint64_t head;       /* what we published */
	size_t map;          /* bytes mapped at ring: the whole region */
	unsigned ver;
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
/* ring_peer_open() up to the SHM frame: records written before
 * ring_peer_switch() are read all at once when it comes. From version 4
 * the region holds the express ring too (ring_peer_express()). */
static inline void ring_peer_attach(struct ring_peer *rp, int tcp, unsigned ver,
				    uint64_t their_id, uint64_t nonce)
{
	struct side_msg m;
	int theirs, got;

	rp->tcp = tcp;
	rp->head = 0;
	rp->size = RING_SIZE;
	rp->ver = ver;
	rp->map = SIDE_RING_BYTES + (ver >= 4 ? XRING_BYTES : 0);
	int mine = side_region(rp->map, true, true);
	rp->side = answered(tcp, their_id, nonce, mine, &theirs);
	close(theirs);
	rp->ring = mmap(NULL, rp->map, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
	assert_true(rp->ring != MAP_FAILED);
	if (ver >= 4) {
		/* The express ring's header: side_region()'s, of 2^18 bytes. */
		uint32_t log2 = 18;
		memcpy(rp->ring + SIDE_RING_BYTES, rp->ring, 12);
		memcpy(rp->ring + SIDE_RING_BYTES + 12, &log2, 4);
	}
	struct side_msg r = { .magic = SIDE_RING, .log2 = 21 };
	assert_true(side_put(rp->side, &r, sizeof(r), &mine, 1));
	close(mine);
	assert_int_equal(side_next(rp->side, &m, &got), SIDE_DONE);
}

/* The SHM frame: the endpoint reads our rings from now on. */
static inline void ring_peer_switch(struct ring_peer *rp)
{
	unsigned char frame[16];
	size_t n = zt_wire_hdr_v(frame, rp->ver, 3, 0); /* SHM: our messages move */

	assert_int_equal(send(rp->tcp, frame, n, MSG_NOSIGNAL), (ssize_t)n);
}

static inline void ring_peer_open(struct ring_peer *rp, int tcp, unsigned ver,
				  uint64_t their_id, uint64_t nonce)
{
	ring_peer_attach(rp, tcp, ver, their_id, nonce);
	ring_peer_switch(rp);
}

/* Version 4: @rp's express ring, as a ring_peer of its own (the same
 * connection and side channel; ring_peer_close() only @rp). */
static inline void ring_peer_express(const struct ring_peer *rp, struct ring_peer *x)
{
	*x = *rp;
	x->ring = rp->ring + SIDE_RING_BYTES;
	x->size = XRING_SIZE;
	x->head = 0;
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
		if (rp->head - tail + span <= rp->size)
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
	return ring_u64(rp, RING_DATA + (unsigned)(at & (rp->size - 1)));
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
	uint64_t span = 8 + ((rlen + 7u) & ~7u), at = rp->head & (rp->size - 1), pad = 0;

	if (at + span > rp->size)
		pad = rp->size - at;
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
	munmap(rp->ring, rp->map);
	close(rp->side);
	close(rp->tcp);
}

#endif /* ZAP_TEST_RING_PEER_H */
