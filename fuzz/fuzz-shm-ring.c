/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory ring engine (util/shm/shm_ring.c) against arbitrary
 * shared state: the input is a script of operations on one 4 KiB ring —
 * send a message, receive what is there, or let the "other process"
 * scribble any bytes anywhere in the region (positions, sleeping flag,
 * record headers, payload).
 *
 * Oracle: until the first scribble, every message comes out whole, in
 * order, with the bytes that went in (a queue of what was sent, kept
 * here). After one, the engine may refuse the ring (-EPROTO, for good) but
 * every chunk it hands out still lies inside a message no longer than
 * max_msg, in order, and nothing outside the region is touched (ASan).
 */
#include <errno.h>
#include <stdbool.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static _Alignas(64) unsigned char region[ZSHM_HDR_BYTES + (1u << LOG2)];
	static uint8_t msg[MAX_MSG];
	struct oracle o = { 0 };
	struct zshm_tx tx;
	struct zshm_rx rx;
	size_t i = 0;
	bool wake;

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
