/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory ring engine (util/shm/shm_ring.c) against arbitrary
 * shared state: the input is a script of operations on one 4 KiB ring —
 * send a message, receive what is there, or let the "other process"
 * scribble any bytes anywhere in the region (positions, flags, record
 * headers, payload). The region is static: each input starts on what the
 * one before left in the data area, which the engine must never read as
 * records.
 *
 * Oracle: until the first scribble, every message comes out whole, in
 * order, with the bytes that went in (a queue of what was sent, kept
 * here). After one, the engine may refuse the ring (-EPROTO, for good) but
 * every chunk it hands out still lies inside a message no longer than
 * max_msg, in order, and nothing outside the region is touched (ASan).
 *
 * An input whose length is odd runs the interleaving script instead
 * (shm_ring.h, "Interleaving"; the wire's version 3): one large message at
 * a time goes in parts (zshm_send_part(), any part size and room kept
 * free), whole messages (zshm_send_whole()) go between its parts, and the
 * consumer, with rx.interleave set, must hand out each message's chunks in
 * order, messages starting in the order their first records were written.
 * Half the whole messages go as tagged records (zshm_send_tagged(), the
 * express ring's), which must read as the same bytes.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "shm_ring.h"

#define LOG2 12u
#define MAX_MSG 20000u
#define QMAX 64

struct oracle {
	bool scribbled;
	size_t qlen[QMAX];
	uint8_t qseed[QMAX];
	unsigned qhead, qn;
	uint64_t expect_off;   /* where the next chunk of this message goes */
	uint64_t cur_total;
};

static uint8_t pattern(uint8_t seed, uint64_t i)
{
	return (uint8_t)(seed + i * 13u + (i >> 8));
}

static int on_chunk(void *user, uint64_t total, uint64_t off, const void *data, size_t len,
		    bool last)
{
	struct oracle *o = user;
	const uint8_t *d = data;

	FUZZ_CHECK(total <= MAX_MSG);
	FUZZ_CHECK(off + len <= total);
	if (off)
		FUZZ_CHECK(off == o->expect_off && total == o->cur_total);
	FUZZ_CHECK(last == (off + len == total));
	o->expect_off = last ? 0 : off + len;
	o->cur_total = total;
	if (o->scribbled)
		return 0;
	FUZZ_CHECK(o->qn > 0);
	FUZZ_CHECK(total == o->qlen[o->qhead]);
	for (size_t i = 0; i < len; i++)
		FUZZ_CHECK(d[i] == pattern(o->qseed[o->qhead], off + i));
	if (last) {
		o->qhead = (o->qhead + 1) % QMAX;
		o->qn--;
	}
	return 0;
}

/* The interleaving script's oracle: messages by the order of their first
 * record, and the one open in parts. */
struct ioracle {
	bool scribbled;
	size_t slen[QMAX];
	uint8_t sseed[QMAX];
	unsigned shead, sn;
	bool open; /* a message of several chunks is being handed out */
	size_t open_len;
	uint8_t open_seed;
	uint64_t open_off;
};

static int on_ichunk(void *user, uint64_t total, uint64_t off, const void *data,
		     size_t len, bool last)
{
	struct ioracle *o = user;
	const uint8_t *d = data;
	uint8_t seed;

	FUZZ_CHECK(total <= MAX_MSG);
	FUZZ_CHECK(off + len <= total);
	FUZZ_CHECK(last == (off + len == total));
	if (o->scribbled)
		return 0;
	if (!off) {
		/* A message starts: the next first record written. */
		FUZZ_CHECK(o->sn > 0);
		FUZZ_CHECK(total == o->slen[o->shead]);
		seed = o->sseed[o->shead];
		o->shead = (o->shead + 1) % QMAX;
		o->sn--;
		if (!last) {
			FUZZ_CHECK(!o->open);
			o->open = true;
			o->open_len = total;
			o->open_seed = seed;
		}
	} else {
		FUZZ_CHECK(o->open && off == o->open_off && total == o->open_len);
		seed = o->open_seed;
	}
	for (size_t i = 0; i < len; i++)
		FUZZ_CHECK(d[i] == pattern(seed, off + i));
	if (off || !last)
		o->open_off = off + len;
	if (off && last)
		o->open = false;
	return 0;
}

static void istart(struct ioracle *o, size_t len, uint8_t seed)
{
	o->slen[(o->shead + o->sn) % QMAX] = len;
	o->sseed[(o->shead + o->sn) % QMAX] = seed;
	o->sn++;
}

static int interleaved(const uint8_t *data, size_t size)
{
	static _Alignas(64) unsigned char region[ZSHM_HDR_BYTES + (1u << LOG2)];
	static uint8_t big[MAX_MSG], small[MAX_MSG];
	struct ioracle o = { 0 };
	struct zshm_tx tx;
	struct zshm_rx rx;
	size_t big_len = 0, i = 0;
	uint8_t big_seed = 0;
	bool wake, big_on = false;
	int rc;

	FUZZ_CHECK(zshm_tx_init(&tx, region, LOG2) == 0);
	FUZZ_CHECK(zshm_rx_attach(&rx, region, LOG2, MAX_MSG) == 0);
	rx.interleave = true;
	while (i + 3 <= size && o.sn < QMAX - 1) {
		uint8_t op = data[i] % 4, a = data[i + 1], b = data[i + 2];
		i += 3;
		if (op == 0) { /* the large message's next part */
			if (!big_on) {
				big_len = (size_t)a * b * 2 % (MAX_MSG + 1);
				big_seed = a ^ b;
				for (size_t k = 0; k < big_len; k++)
					big[k] = pattern(big_seed, k);
				big_on = true;
			}
			bool was_mid = zshm_tx_mid(&tx);
			rc = zshm_send_part(&tx, big, big_len, (uint64_t)(b + 1) * 16,
					    (uint64_t)a * 8, &wake);
			if (!o.scribbled)
				FUZZ_CHECK(rc == 0 || rc == -EINPROGRESS || rc == -EAGAIN);
			if (rc && rc != -EINPROGRESS && rc != -EAGAIN)
				break;
			if (!was_mid && (rc != -EAGAIN || zshm_tx_mid(&tx)))
				istart(&o, big_len, big_seed);
			if (!rc)
				big_on = false;
		} else if (op == 1) {
			rc = zshm_recv(&rx, on_ichunk, &o);
			FUZZ_CHECK(rc >= 0 || rc == -EPROTO);
			if (!o.scribbled)
				FUZZ_CHECK(rc >= 0);
		} else if (op == 2) {
			region[((size_t)a * 17u + b) % sizeof(region)] = b;
			o.scribbled = true;
		} else { /* a whole message, between the parts */
			/* Up to a chunk: a quarter of the ring, less 16. */
			size_t len = (size_t)a * b % ((1u << LOG2) / 4 - 16 + 1);
			for (size_t k = 0; k < len; k++)
				small[k] = pattern(b, k);
			if ((a & 1) && len >= 8) {
				/* The express ring's record (wire version 4): its
				 * 8-byte tag is the message's first bytes. */
				uint64_t tag;
				memcpy(&tag, small, 8);
				rc = zshm_send_tagged(&tx, tag, small + 8, len - 8, &wake);
			} else {
				rc = zshm_send_whole(&tx, small, len, &wake);
			}
			if (!o.scribbled)
				FUZZ_CHECK(rc == 0 || rc == -EAGAIN);
			if (rc && rc != -EAGAIN)
				break;
			if (!rc)
				istart(&o, len, b);
		}
	}
	if (!o.scribbled) { /* everything sent comes out, the rest of the part too */
		for (int tries = 0; big_on && tries < 4096; tries++) {
			bool was_mid = zshm_tx_mid(&tx);
			rc = zshm_send_part(&tx, big, big_len, 512, 0, &wake);
			FUZZ_CHECK(rc == 0 || rc == -EINPROGRESS || rc == -EAGAIN);
			if (!was_mid && (rc != -EAGAIN || zshm_tx_mid(&tx)))
				istart(&o, big_len, big_seed);
			if (!rc)
				big_on = false;
			FUZZ_CHECK(zshm_recv(&rx, on_ichunk, &o) >= 0);
		}
		FUZZ_CHECK(!big_on);
		FUZZ_CHECK(zshm_recv(&rx, on_ichunk, &o) >= 0);
		FUZZ_CHECK(o.sn == 0 && !o.open);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static _Alignas(64) unsigned char region[ZSHM_HDR_BYTES + (1u << LOG2)];
	static uint8_t msg[MAX_MSG];
	struct oracle o = { 0 };
	struct zshm_tx tx;
	struct zshm_rx rx;
	size_t i = 0;
	bool wake;

	if (size % 2)
		return interleaved(data + 1, size - 1);
	FUZZ_CHECK(zshm_tx_init(&tx, region, LOG2) == 0);
	FUZZ_CHECK(zshm_rx_attach(&rx, region, LOG2, MAX_MSG) == 0);
	while (i + 3 <= size) {
		uint8_t op = data[i] % 3, a = data[i + 1], b = data[i + 2];
		i += 3;
		if (op == 0 && o.qn < QMAX) { /* send: length a*b*2, pattern a^b */
			size_t len = (size_t)a * b * 2 % (MAX_MSG + 1);
			int rc, tries = 0;

			for (size_t k = 0; k < len; k++)
				msg[k] = pattern(a ^ b, k);
			/* Queued first: receiving to make room may take its
			 * first chunks before the last one is written. */
			o.qlen[(o.qhead + o.qn) % QMAX] = len;
			o.qseed[(o.qhead + o.qn) % QMAX] = a ^ b;
			o.qn++;
			/* A scribbled ring may never make room: bounded. */
			do {
				rc = zshm_send(&tx, msg, len, &wake);
				if (rc == -EAGAIN && zshm_recv(&rx, on_chunk, &o) < 0)
					break;
			} while (rc == -EAGAIN && ++tries < 64);
			if (!o.scribbled)
				FUZZ_CHECK(rc == 0);
			if (rc) {
				FUZZ_CHECK(rc == -EAGAIN || rc == -EPROTO);
				break; /* a half-sent message ends the script */
			}
		} else if (op == 1) {
			int rc = zshm_recv(&rx, on_chunk, &o);

			FUZZ_CHECK(rc >= 0 || rc == -EPROTO);
			if (!o.scribbled)
				FUZZ_CHECK(rc >= 0);
		} else if (op == 2) { /* the peer writes byte b at offset a*17+b */
			region[((size_t)a * 17u + b) % sizeof(region)] = b;
			o.scribbled = true;
		}
	}
	if (!o.scribbled) { /* everything sent comes out */
		FUZZ_CHECK(zshm_recv(&rx, on_chunk, &o) >= 0);
		FUZZ_CHECK(o.qn == 0);
	}
	(void)zshm_rx_prepare_sleep(&rx);
	return 0;
}
