/* SPDX-License-Identifier: MIT */
/*
 * A single-producer, single-consumer message ring in memory shared by two
 * processes on one host: the engine for same-host paths (the thin layer
 * that maps the memory and sleeps on it lives with the wire that uses it).
 * Pure: no system calls, no allocation; it reads and writes the region it
 * is given and the two small private structs below.
 *
 * The other process is hostile. Everything read from the region is input:
 * every record header, the producer's position and the consumer's are
 * read once, copied, and checked against what this side keeps privately
 * (the ring's size never comes from the region after setup) before any of
 * it is used as a size or an offset (the producer reads the consumer's
 * position only when the room it last saw runs out, and then also checks
 * that it did not move back; the consumer reads the producer's only when
 * it is about to sleep). A violation makes the ring corrupt for good
 * (-EPROTO): the caller drops this path, which costs that peer's
 * connection and nothing else.
 *
 * Layout of the region (native byte order: both ends are on one host;
 * plugins/default/WIRE.md, "The ring's layout", is the specification,
 * and shm_ring.c asserts the offsets it states):
 *
 *   0    magic "ZAPSHMR1" (u64), version 2 (u32), log2 of the data size (u32)
 *   64   head: bytes ever published by the producer (u64); its low bit is
 *        the consumer's "I sleep"
 *   76   closed: the consumer is gone for good (u32)
 *   128  tail: bytes ever consumed (u64, release)
 *   136  waiting: the producer waits for room (u32, see below)
 *   192  data: 2^log2 bytes of records
 *
 * A record is an 8-byte header (payload length u32, flags u32, stored as
 * one 64-bit word, last) and the payload, padded to 8 bytes; records never
 * wrap: a PAD record fills the end of the data area when the next one does
 * not fit there. A record is there when its header is not 0: the producer
 * zeroes the header slot after each record before it publishes that
 * record, so the consumer polls the next record's own cache line, never a
 * line the producer writes for every record besides. A message is one or
 * more chunk records: the FIRST carries the message's total length (u64)
 * before its payload, the LAST completes it; a chunk is at most a quarter
 * of the data area, so a message of any size flows through.
 *
 * Interleaving (a consumer that sets rx->interleave after attaching, when
 * both sides agreed on it beforehand): between two chunks of a message, a
 * whole message (one record, FIRST and LAST) may come; it is delivered at
 * once and the open message goes on with its next chunk. Only one message
 * of several chunks is ever open, so a small message waits behind at most
 * what is in the ring, never behind the rest of a large one.
 *
 * Waking: a consumer that finds nothing sets head's low bit with a
 * compare-and-swap, which succeeds only while head says it consumed all
 * that was published, and then sleeps (on whatever the layer above uses);
 * the producer moves head past each record with an atomic exchange, and an
 * exchange that returns the bit wakes the consumer. One word changed by
 * both sides with atomic read-modify-writes: no wake-up can be lost, and
 * no fence is needed besides. The other way round, a producer that finds
 * the ring full sets "waiting" and tries once more before it sleeps; a
 * consumer that made room and finds "waiting" set clears it and wakes the
 * producer (sequentially consistent fences on both sides). A flag is only
 * ever a reason to wake the other side, never trusted for anything else: a
 * peer that keeps one set costs itself wake-ups.
 */
#ifndef ZAP_SHM_RING_H
#define ZAP_SHM_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZSHM_MAGIC 0x31524d485350415aull /* "ZAPSHMR1" as a little-endian u64 */
#define ZSHM_VERSION 2u
#define ZSHM_HDR_BYTES 192u
#define ZSHM_OFF_CLOSED 76u /* the "closed" word (the layout above) */
#define ZSHM_LOG2_MIN 12u   /* 4 KiB */
#define ZSHM_LOG2_MAX 30u   /* 1 GiB */

enum {
	ZSHM_F_FIRST = 1u,
	ZSHM_F_LAST = 2u,
	ZSHM_F_PAD = 4u,
};

/* Bytes a region needs for a data area of 2^@log2 bytes. */
size_t zshm_region_bytes(unsigned log2);

/* The producer's private state. */
struct zshm_tx {
	unsigned char *base; /* the region */
	uint64_t size;       /* data bytes, fixed at setup */
	uint64_t head;       /* private: what we published */
	uint64_t msg_off;    /* bytes of the current message already written */
	uint64_t tail_seen;  /* private: the consumer's position when last read */
	bool mid;            /* a message is partly written */
	bool corrupt;
};

/* The consumer's private state. */
struct zshm_rx {
	const unsigned char *base;
	unsigned char *ctl; /* the region, for tail and head's sleep bit */
	uint64_t size;
	uint64_t tail;      /* private: what we consumed */
	uint64_t max_msg;   /* our limit on a message's total length */
	uint64_t msg_total; /* declared by the current message's FIRST */
	uint64_t msg_got;
	bool mid;
	bool corrupt;
	bool interleave; /* whole messages may come between chunks (see below) */
};

/*
 * Lay out a new ring in @region (zshm_region_bytes(@log2) bytes, 64-byte
 * aligned) and make @tx its producer. The creating side is the producer;
 * the other side attaches as consumer. Return 0, or -EINVAL for a @log2
 * outside [ZSHM_LOG2_MIN, ZSHM_LOG2_MAX].
 */
int zshm_tx_init(struct zshm_tx *tx, void *region, unsigned log2);

/*
 * Attach @rx as the consumer of the ring in @region, whose size the two
 * sides agreed on beforehand (@log2, from the handshake, not from the
 * region). Checks the header and that the ring is empty. Return 0, or
 * -EPROTO for a header that does not match.
 */
int zshm_rx_attach(struct zshm_rx *rx, void *region, unsigned log2, uint64_t max_msg);

/*
 * Write as much of the message @msg (@len bytes) as fits, from where the
 * last call for it stopped. Return 0 when all of it is published,
 * -EAGAIN when the ring is full (call again with the same message once
 * the consumer made room), -EMSGSIZE for @len above 2^63, -EPROTO when the
 * consumer's position is impossible. *@wake is set when the consumer
 * announced it sleeps and must be woken.
 */
int zshm_send(struct zshm_tx *tx, const void *msg, size_t len, bool *wake);

/*
 * zshm_send(), for one chunk's worth at a time: write at most @max bytes of
 * the message (in chunks of at most @max, at least 1), and only while @keep bytes of
 * the ring stay free after each chunk. Return 0 when the message is
 * complete, -EINPROGRESS when @max bytes went and more remain (call again
 * with the same message), -EAGAIN when the ring has no room for the next
 * chunk (zshm_tx_mid() says whether some of it went), or as zshm_send().
 */
int zshm_send_part(struct zshm_tx *tx, const void *msg, size_t len, uint64_t max,
		   uint64_t keep, bool *wake);

/*
 * Write @msg as one record (FIRST and LAST), leaving the state of a message
 * zshm_send_part() has open as it is: a consumer with interleaving takes
 * it between that message's chunks. 0, -EAGAIN (no room: nothing written),
 * -EMSGSIZE for @len above a chunk (a quarter of the ring, less 16), or
 * -EPROTO.
 */
int zshm_send_whole(struct zshm_tx *tx, const void *msg, size_t len, bool *wake);

/*
 * zshm_send_whole() with an 8-byte @tag before @msg: one record whose
 * message is the tag (native byte order) followed by @len bytes, so a
 * consumer reads it as a message of @len + 8 bytes. The same results;
 * -EMSGSIZE for @len + 8 above a chunk.
 */
int zshm_send_tagged(struct zshm_tx *tx, uint64_t tag, const void *msg, size_t len,
		     bool *wake);

/* The producer's own position: bytes it ever published. */
uint64_t zshm_tx_published(const struct zshm_tx *tx);

/*
 * Called with each chunk of a message as it is read: @total is the
 * message's length (declared by its first chunk and already checked
 * against max_msg), @off where this chunk goes, @data/@len the bytes (in
 * the shared region: copy them out; they are only valid during the call).
 * Return 0, or a negative errno to stop (the chunk is then not consumed
 * and the next zshm_recv() starts with it again).
 */
typedef int (*zshm_chunk_fn)(void *user, uint64_t total, uint64_t off, const void *data,
			     size_t len, bool last);

/*
 * Read records until the ring is empty, @fn stops, or a ring's worth went. Return the number of
 * messages completed (>= 0), @fn's error, or -EPROTO (corrupt: a position
 * or a record header that cannot be, a message longer than max_msg or
 * than it declared, a chunk out of order).
 */
int zshm_recv(struct zshm_rx *rx, zshm_chunk_fn fn, void *user);

/*
 * About to sleep: announce it (head's low bit). Return true when a record
 * is there after all (do not sleep: read), or when the producer's head
 * says records that are not there (the ring is then corrupt, and
 * zshm_recv() says so); false when the caller may sleep until woken.
 */
bool zshm_rx_prepare_sleep(struct zshm_rx *rx);

/* Not 0 when a record waits at the consumer's position (its header word,
 * unchecked). When none, the next record's first two cache lines are
 * prefetched (a spinning caller then has them when the header comes). */
uint64_t zshm_rx_pending(const struct zshm_rx *rx);

/* Whether a record waits at the consumer's position, inline and without
 * zshm_rx_pending()'s prefetch: for a look at one ring between two
 * records of another, once a record (tcp_shm_rx.c's ring_chunk(): the
 * call was 16 instructions of every 64 B message). A hint: relaxed, and
 * the record is read, and checked, by zshm_recv() only. */
static inline bool zshm_rx_waiting(const struct zshm_rx *rx)
{
	const void *word = rx->base + ZSHM_HDR_BYTES + (rx->tail & (rx->size - 1));

	return atomic_load_explicit((const _Atomic uint64_t *)word,
				    memory_order_relaxed) != 0;
}

/* The producer's position as the region says (unchecked, without the
 * sleep bit; an acquire load: records published before it are there). */
uint64_t zshm_rx_published(const struct zshm_rx *rx);

/*
 * After zshm_recv() consumed something: whether the producer announced
 * it waits for room and must be woken (the flag is then cleared).
 */
bool zshm_rx_producer_waits(struct zshm_rx *rx);

/* A look at the same flag, without the fence and without clearing it:
 * false may be stale (zshm_rx_producer_waits() is the one that counts),
 * but it costs no fence and no line of the producer's. */
bool zshm_rx_producer_flagged(const struct zshm_rx *rx);

/*
 * The producer found the ring full (-EAGAIN) and is about to wait:
 * announce it. The caller then calls zshm_send() once more, and waits only
 * if that is -EAGAIN too: room made in between is either seen by that
 * call or followed by a wake-up.
 */
void zshm_tx_prepare_wait(struct zshm_tx *tx);

/* The consumer's position as the region says (unchecked: only compare
 * two readings); reads nothing of the producer's private state. */
uint64_t zshm_tx_consumed(const struct zshm_tx *tx);

/* Bytes the consumer left free, as this producer can see (0 when its
 * position cannot be). */
uint64_t zshm_tx_room(const struct zshm_tx *tx);

/*
 * The consumer stops for good (its endpoint closes the connection): say
 * so, so that the producer fails its next send at once instead of filling
 * a ring nobody reads. Advisory, like the other flags: a consumer that
 * dies without it is noticed by whatever else watches it.
 */
void zshm_rx_close(struct zshm_rx *rx);
/* Inline, as zshm_tx_mid(): both are asked before every small message
 * (tcp_shm.c's tw_shm_direct()), and two calls were 17 instructions. */
static inline bool zshm_tx_peer_closed(const struct zshm_tx *tx)
{
	const void *closed = tx->base + ZSHM_OFF_CLOSED;

	return atomic_load_explicit((const _Atomic uint32_t *)closed,
				    memory_order_relaxed) != 0;
}

/* Whether the message zshm_send() was last called with is partly
 * published (it cannot be taken back: the consumer holds part of it). */
static inline bool zshm_tx_mid(const struct zshm_tx *tx)
{
	return tx->mid || tx->msg_off;
}

#endif /* ZAP_SHM_RING_H */
