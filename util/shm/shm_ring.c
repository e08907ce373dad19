/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory ring engine (shm_ring.h says what and why). Shared
 * state: the region; the producer writes the records and head, the
 * consumer writes tail and arms head's low bit to sleep, and each reads
 * the other's words as hostile input. The private structs belong to one thread each (the caller's
 * lock, if several threads use one side).
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "shm_ring.h"

#define OFF_MAGIC 0u
#define OFF_VERSION 8u
#define OFF_LOG2 12u
#define OFF_HEAD 64u
#define OFF_CLOSED ZSHM_OFF_CLOSED
#define OFF_TAIL 128u
#define OFF_WAITING 136u
#define REC_HDR 8u

/* The layout a second implementation is written from (WIRE.md, "The
 * ring's layout"): changing any of these changes the wire. */
_Static_assert(OFF_MAGIC == 0 && OFF_VERSION == 8 && OFF_LOG2 == 12,
	       "WIRE.md, The ring's layout: magic, version, log2");
_Static_assert(OFF_HEAD == 64 && OFF_CLOSED == 76,
	       "WIRE.md, The ring's layout: head, closed");
_Static_assert(OFF_TAIL == 128 && OFF_WAITING == 136,
	       "WIRE.md, The ring's layout: tail, waiting");
_Static_assert(ZSHM_HDR_BYTES == 192 && REC_HDR == 8,
	       "WIRE.md, The ring's layout: control block, record header");
_Static_assert(ZSHM_MAGIC == 0x31524d485350415aull && ZSHM_VERSION == 2,
	       "WIRE.md, The ring's layout: magic, version");
_Static_assert(ZSHM_F_FIRST == 1 && ZSHM_F_LAST == 2 && ZSHM_F_PAD == 4,
	       "WIRE.md, The ring's layout: record flags");

/* Positions, flags and record headers are accessed as atomics in place. */
static _Atomic uint64_t *word64(unsigned char *base, unsigned off)
{
	return (_Atomic uint64_t *)(void *)(base + off);
}

static _Atomic uint32_t *word32(unsigned char *base, unsigned off)
{
	return (_Atomic uint32_t *)(void *)(base + off);
}

static uint64_t align8(uint64_t n)
{
	return (n + 7u) & ~(uint64_t)7u;
}

size_t zshm_region_bytes(unsigned log2)
{
	return ZSHM_HDR_BYTES + ((size_t)1 << log2);
}

int zshm_tx_init(struct zshm_tx *tx, void *region, unsigned log2)
{
	unsigned char *b = region;
	uint64_t magic = ZSHM_MAGIC;
	uint32_t version = ZSHM_VERSION, l2 = log2;

	if (log2 < ZSHM_LOG2_MIN || log2 > ZSHM_LOG2_MAX)
		return -EINVAL;
	memset(b, 0, ZSHM_HDR_BYTES);
	memcpy(b + OFF_MAGIC, &magic, sizeof(magic));
	memcpy(b + OFF_VERSION, &version, sizeof(version));
	memcpy(b + OFF_LOG2, &l2, sizeof(l2));
	atomic_store(word64(b, OFF_HEAD), 0);
	atomic_store(word64(b, OFF_TAIL), 0);
	atomic_store(word32(b, OFF_WAITING), 0);
	atomic_store(word32(b, OFF_CLOSED), 0);
	atomic_store(word64(b, ZSHM_HDR_BYTES), 0); /* the first record's header */
	*tx = (struct zshm_tx){ .base = b, .size = (uint64_t)1 << log2 };
	return 0;
}

int zshm_rx_attach(struct zshm_rx *rx, void *region, unsigned log2, uint64_t max_msg)
{
	unsigned char *b = region;
	uint64_t magic;
	uint32_t version, l2;

	if (log2 < ZSHM_LOG2_MIN || log2 > ZSHM_LOG2_MAX)
		return -EINVAL;
	memcpy(&magic, b + OFF_MAGIC, sizeof(magic));
	memcpy(&version, b + OFF_VERSION, sizeof(version));
	memcpy(&l2, b + OFF_LOG2, sizeof(l2));
	if (magic != ZSHM_MAGIC || version != ZSHM_VERSION || l2 != log2 ||
	    atomic_load(word64(b, OFF_TAIL)) != 0 ||
	    atomic_load(word64(b, OFF_HEAD)) != 0)
		return -EPROTO;
	*rx = (struct zshm_rx){
		.base = b,
		.ctl = b,
		.size = (uint64_t)1 << log2,
		.max_msg = max_msg,
	};
	return 0;
}

/* ---- producer ---------------------------------------------------------- */

/* Room the consumer left us, or -1 when its position cannot be (ahead
 * of what we wrote, behind where we last saw it, or unaligned). */
static int64_t tx_room(const struct zshm_tx *tx, uint64_t *tail_out)
{
	uint64_t tail = atomic_load_explicit(word64(tx->base, OFF_TAIL),
					     memory_order_acquire);
	uint64_t used = tx->head - tail;

	if (tail > tx->head || tail < tx->tail_seen || used > tx->size || (tail & 7u))
		return -1;
	if (tail_out)
		*tail_out = tail;
	return (int64_t)(tx->size - used);
}

/*
 * Room for @need bytes: from where we last saw the consumer if that
 * suffices, else from its position now. Reading its position is a cache
 * miss on a line it writes after every record, and the read pulls that
 * line away from it, so its next store there (and the fence after it,
 * zshm_rx_producer_waits()) waits for the line too (bench/MEASUREMENTS.md,
 * "ring-tail-seen").
 */
static int64_t tx_room_for(struct zshm_tx *tx, uint64_t need)
{
	uint64_t room = tx->size - (tx->head - tx->tail_seen);

	if (room >= need)
		return (int64_t)room;
	return tx_room(tx, &tx->tail_seen);
}

/* The record header at data offset @at, as one 64-bit word: length in
 * the first 4 bytes, flags in the next 4 (native order). */
static _Atomic uint64_t *rec_word(unsigned char *base, uint64_t at)
{
	return word64(base, (unsigned)(ZSHM_HDR_BYTES + at));
}

static uint64_t rec_pack(uint32_t len, uint32_t flags)
{
	uint32_t h[2] = { len, flags };
	uint64_t w;

	memcpy(&w, h, sizeof(w));
	return w;
}

/* Write a record's payload at data offset @at (its header comes last,
 * tx_chunk()): @alen (0, 8 or 16) bytes of @a, then @plen of @p; return
 * its span. */
static uint64_t tx_body(struct zshm_tx *tx, uint64_t at, const void *a, size_t alen,
			const void *p, size_t plen)
{
	unsigned char *rec = tx->base + ZSHM_HDR_BYTES + at;

	/* 8 or 16 bytes (a FIRST's total, and a tag): copies of a size the
	 * compiler knows, which a variable-length copy of so few is not. */
	if (alen == 16)
		memcpy(rec + REC_HDR, a, 16);
	else if (alen)
		memcpy(rec + REC_HDR, a, 8);
	if (plen)
		memcpy(rec + REC_HDR + alen, p, plen);
	return REC_HDR + align8(alen + plen);
}

/*
 * Write one chunk of at most @max payload bytes if it fits, keeping @keep
 * bytes of the ring free after it; -EAGAIN when it does not. @p is the
 * message's progress (tx->msg_off and tx->mid for zshm_send(), a
 * caller's own for a whole record written between the chunks of one).
 *
 * Publishing (WIRE.md, "Publishing and consuming"): the payload, then a
 * zero in the header slot after the record, so that what an earlier lap
 * left there never reads as a record; then the header, a release store
 * the consumer polls for; then the exchange that moves head past it and
 * returns the consumer's sleep bit. The consumer polls the record's own
 * line, not head, so head's line stays ours and the exchange is cheap
 * (bench/MEASUREMENTS.md, "ring-v2").
 */
static int tx_chunk(struct zshm_tx *tx, const unsigned char *msg, uint64_t len,
		    uint64_t *msg_off, bool *mid, uint64_t max, uint64_t keep,
		    const uint64_t *tag, bool *wake)
{
	uint64_t limit = tx->size / 4 - REC_HDR - 8, at = tx->head & (tx->size - 1);
	uint64_t left = len - *msg_off, chunk, span, need, pad = 0;
	/* FIRST's total, then a tag's 8 bytes, which count as the message's
	 * first (zshm_send_tagged(): whole records only) */
	uint64_t pre[2] = { tag ? len + 8 : len, tag ? *tag : 0 };
	size_t extra = *mid ? 0 : tag ? sizeof(pre) : sizeof(pre[0]);
	uint32_t flags = *mid ? 0 : ZSHM_F_FIRST;
	int64_t room;

	if (max < limit)
		limit = max;
	chunk = left < limit ? left : limit;
	span = REC_HDR + align8(extra + chunk);
	if (span > tx->size - at)
		pad = tx->size - at;  /* records never wrap: a PAD fills the end */
	need = pad + span + 8 + keep; /* + the next header slot, zeroed */
	room = tx_room_for(tx, need);
	if (room < 0)
		return -EPROTO;
	if ((uint64_t)room < need)
		return -EAGAIN;
	if (chunk == left)
		flags |= ZSHM_F_LAST;
	uint64_t rec = pad ? 0 : at, next = tx->head + pad + span;
	tx_body(tx, rec, pre, extra, msg + *msg_off, chunk);
	atomic_store_explicit(rec_word(tx->base, (rec + span) & (tx->size - 1)), 0,
			      memory_order_relaxed);
	atomic_store_explicit(rec_word(tx->base, rec),
			      rec_pack((uint32_t)(extra + chunk), flags),
			      memory_order_release);
	if (pad) /* after the record it leads to: the consumer finds that one there */
		atomic_store_explicit(rec_word(tx->base, at),
				      rec_pack((uint32_t)(pad - REC_HDR), ZSHM_F_PAD),
				      memory_order_release);
	tx->head = next;
	if (atomic_exchange(word64(tx->base, OFF_HEAD), next) & 1u)
		*wake = true;
	*msg_off += chunk;
	*mid = !(flags & ZSHM_F_LAST);
	return 0;
}

uint64_t zshm_tx_consumed(const struct zshm_tx *tx)
{
	return atomic_load_explicit(word64(tx->base, OFF_TAIL), memory_order_acquire);
}

int zshm_send_part(struct zshm_tx *tx, const void *msg, size_t len, uint64_t max,
		   uint64_t keep, bool *wake)
{
	uint64_t wrote = 0;
	int rc = 0;

	*wake = false;
	if (tx->corrupt)
		return -EPROTO;
	if ((uint64_t)len > (UINT64_MAX >> 1))
		return -EMSGSIZE;
	if (!max)
		return -EINVAL; /* an empty chunk's header would read as no record */
	/* Each chunk is published as soon as it is written, so that the
	 * consumer copies one out while we copy the next in. */
	do {
		uint64_t before = tx->msg_off;
		rc = tx_chunk(tx, msg, len, &tx->msg_off, &tx->mid, max - wrote, keep,
			      NULL, wake);
		wrote += tx->msg_off - before;
	} while (!rc && tx->mid && wrote < max);
	if (rc == -EPROTO) {
		tx->corrupt = true;
		return rc;
	}
	if (!rc && tx->mid)
		return -EINPROGRESS;
	if (!rc)
		tx->msg_off = 0;
	return rc;
}

int zshm_send(struct zshm_tx *tx, const void *msg, size_t len, bool *wake)
{
	return zshm_send_part(tx, msg, len, UINT64_MAX, 0, wake);
}

/* One whole record of @msg, after the 8-byte *@tag if there is one. */
static int whole_record(struct zshm_tx *tx, const uint64_t *tag, const void *msg,
			size_t len, bool *wake)
{
	uint64_t off = 0;
	bool mid = false;
	int rc;

	*wake = false;
	if (tx->corrupt)
		return -EPROTO;
	if ((uint64_t)len + (tag ? 8 : 0) > tx->size / 4 - REC_HDR - 8)
		return -EMSGSIZE;
	rc = tx_chunk(tx, msg, len, &off, &mid, UINT64_MAX, 0, tag, wake);
	if (rc == -EPROTO)
		tx->corrupt = true;
	return rc;
}

int zshm_send_whole(struct zshm_tx *tx, const void *msg, size_t len, bool *wake)
{
	return whole_record(tx, NULL, msg, len, wake);
}

int zshm_send_tagged(struct zshm_tx *tx, uint64_t tag, const void *msg, size_t len,
		     bool *wake)
{
	return whole_record(tx, &tag, msg, len, wake);
}

uint64_t zshm_tx_published(const struct zshm_tx *tx)
{
	return tx->head;
}

/* ---- consumer ---------------------------------------------------------- */

static int rx_bad(struct zshm_rx *rx)
{
	rx->corrupt = true;
	return -EPROTO;
}

/* The header word of the record at the consumer's position: 0 while
 * none was published there. */
static uint64_t rx_next(const struct zshm_rx *rx)
{
	return atomic_load_explicit(rec_word((unsigned char *)rx->base,
					     rx->tail & (rx->size - 1)),
				    memory_order_acquire);
}

uint64_t zshm_rx_pending(const struct zshm_rx *rx)
{
	uint64_t a = rx_next(rx);

	/*
	 * Nothing yet: have the CPU fetch the line after the one we poll as
	 * well. A 64 B message's record is 80 bytes, and without the hint its
	 * second line is a miss only after the header arrived: two transfers
	 * from the producer's cache one after the other (bench/MEASUREMENTS.md,
	 * "ring-prefetch"). A hint: it cannot fault, reads nothing we use, and
	 * is inside the data area whatever the position.
	 */
	if (!a) {
		uint64_t at = rx->tail & (rx->size - 1);
		if (at + 64 < rx->size)
			__builtin_prefetch(rx->base + ZSHM_HDR_BYTES + at + 64);
	}
	return a;
}

/* Check one record's header against the message in progress. */
static int rx_check(struct zshm_rx *rx, uint32_t len, uint32_t flags, uint64_t at,
		    uint64_t *total)
{
	uint64_t span = REC_HDR + align8(len);

	if (flags & ~(uint32_t)(ZSHM_F_FIRST | ZSHM_F_LAST | ZSHM_F_PAD))
		return -1;
	if (at + span > rx->size || (!(flags & ZSHM_F_PAD) && span > rx->size - 8))
		return -1; /* wrapping, or leaving no free slot */
	if (flags & ZSHM_F_PAD)
		return flags == ZSHM_F_PAD && at + span == rx->size ? 0 : -1;
	/* A FIRST mid-message, or a chunk with no FIRST; with interleaving,
	 * a whole message (FIRST and LAST) may come between two chunks. */
	if (!!(flags & ZSHM_F_FIRST) == rx->mid &&
	    !(rx->interleave && rx->mid && (flags & ZSHM_F_FIRST) &&
	      (flags & ZSHM_F_LAST)))
		return -1;
	if (flags & ZSHM_F_FIRST) {
		if (len < sizeof(*total))
			return -1;
		memcpy(total, rx->base + ZSHM_HDR_BYTES + at + REC_HDR, sizeof(*total));
		if (*total > rx->max_msg || len - sizeof(*total) > *total)
			return -1;
	} else if (len > rx->msg_total - rx->msg_got) {
		return -1;
	}
	return 0;
}

/* One record at the consumer's position: 1 when it completed a message. */
static int rx_one(struct zshm_rx *rx, uint64_t word, zshm_chunk_fn fn, void *user)
{
	uint64_t at = rx->tail & (rx->size - 1), total = rx->msg_total, got;
	const unsigned char *rec = rx->base + ZSHM_HDR_BYTES + at;
	uint32_t hdr[2];
	size_t skip;
	bool last;
	int rc;

	memcpy(hdr, &word, sizeof(hdr)); /* read once; the copy is what counts */
	if (rx_check(rx, hdr[0], hdr[1], at, &total))
		return rx_bad(rx);
	if (hdr[1] & ZSHM_F_PAD) {
		rx->tail += REC_HDR + align8(hdr[0]);
		return 0;
	}
	skip = hdr[1] & ZSHM_F_FIRST ? sizeof(total) : 0;
	got = hdr[1] & ZSHM_F_FIRST ? 0 : rx->msg_got;
	last = got + (hdr[0] - skip) == total;
	if (!!(hdr[1] & ZSHM_F_LAST) != last)
		return rx_bad(rx); /* LAST must mean exactly complete */
	rc = fn(user, total, got, rec + REC_HDR + skip, hdr[0] - skip, last);
	if (rc)
		return rc;
	rx->tail += REC_HDR + align8(hdr[0]);
	if (rx->mid && (hdr[1] & ZSHM_F_FIRST))
		return 1; /* whole, between two chunks: the open one stays */
	rx->msg_total = total;
	rx->msg_got = last ? 0 : got + (hdr[0] - skip);
	rx->mid = !last;
	return last;
}

int zshm_recv(struct zshm_rx *rx, zshm_chunk_fn fn, void *user)
{
	uint64_t word, from = rx->tail;
	int done = 0, rc = 0;

	if (rx->corrupt)
		return -EPROTO;
	/* A ring's worth a call at most: a producer that scribbled over the
	 * zero after its last record could otherwise send us round and
	 * round the records of earlier laps. */
	while (rx->tail - from < rx->size && (word = rx_next(rx)) != 0) {
		rc = rx_one(rx, word, fn, user);
		if (rc < 0)
			break;
		done += rc;
		atomic_store_explicit(word64(rx->ctl, OFF_TAIL), rx->tail,
				      memory_order_release);
	}
	return rc < 0 ? rc : done;
}

/*
 * Arm: set the low bit of head, on a head that says we consumed all it
 * published. The producer stores a record's header before the exchange
 * that moves head past it, so head may still be behind a record we
 * already read (we arm on that value: its exchange then wakes us once
 * needlessly), and a head ahead of our tail has its records visible to
 * us. Honestly head changes once per record while we look, so a few
 * tries suffice; a producer whose head says records that are not there,
 * or that keeps head moving without publishing, broke the ring.
 */
bool zshm_rx_prepare_sleep(struct zshm_rx *rx)
{
	uint64_t h = atomic_load(word64(rx->ctl, OFF_HEAD));

	if (rx->corrupt)
		return true;
	for (int tries = 0; tries < 4; tries++) {
		uint64_t pos = h & ~(uint64_t)1;
		if (pos > rx->tail)
			break; /* published and not read yet */
		if ((h & 1u) ||
		    atomic_compare_exchange_strong(word64(rx->ctl, OFF_HEAD), &h, h | 1u))
			return rx_next(rx) != 0;
	}
	if (!rx_next(rx))
		rx_bad(rx); /* zshm_recv() says so */
	return true;
}

uint64_t zshm_rx_published(const struct zshm_rx *rx)
{
	return atomic_load_explicit(word64(rx->ctl, OFF_HEAD), memory_order_acquire) &
	       ~(uint64_t)1;
}

bool zshm_rx_producer_waits(struct zshm_rx *rx)
{
	/* Orders our tail stores (release) before the load of the flag, as
	 * the producer's fence orders its flag before its load of tail. */
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load(word32(rx->ctl, OFF_WAITING)) &&
	       atomic_exchange(word32(rx->ctl, OFF_WAITING), 0);
}

bool zshm_rx_producer_flagged(const struct zshm_rx *rx)
{
	_Atomic uint32_t *waiting = word32(rx->ctl, OFF_WAITING);

	return atomic_load_explicit(waiting, memory_order_relaxed) != 0;
}

void zshm_tx_prepare_wait(struct zshm_tx *tx)
{
	atomic_store(word32(tx->base, OFF_WAITING), 1);
	atomic_thread_fence(memory_order_seq_cst);
}

uint64_t zshm_tx_room(const struct zshm_tx *tx)
{
	int64_t r = tx_room(tx, NULL);

	return r < 0 ? 0 : (uint64_t)r;
}

void zshm_rx_close(struct zshm_rx *rx)
{
	atomic_store(word32(rx->ctl, OFF_CLOSED), 1);
}
