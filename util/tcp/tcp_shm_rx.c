/* SPDX-License-Identifier: MIT */
/*
 * The shm path's receive (tcp_path.h): once the peer switched to its
 * ring (its TCP_T_SHM frame, read by tcp_rx.c), the leader takes the
 * ring's records a chunk at a time and hands them to the receive side's
 * message assembler (tw_rx_chunk()); the connection itself must stay
 * silent until its end. Before the switch the socket path reads.
 *
 * Shared state: the rx ring, rx_on and rx_gone are the leader's (tcp_int.h,
 * "Shared memory").
 */
#include "tcp_int.h"
#include "tcp_shm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct ring_rx {
	struct tcp_wire *w;
	struct tcp_conn *c;
	struct tcp_shm *s;
	struct tcp_rx_msg ***tail;
	int got;
	int recs;       /* chunks taken in this zshm_recv() call */
	uint64_t bytes; /* delivered this round */
	uint64_t taken; /* ring bytes taken this round, whole or not */
	bool fenced;    /* the express ring's next record waits for the ring */
};

/* Whether this round delivered enough (see TCP_SHM_BATCH_BYTES). */
static bool ring_batch_done(const struct ring_rx *x)
{
	return x->got >= TCP_SHM_BATCH || x->bytes >= TCP_SHM_BATCH_BYTES ||
	       x->taken >= TCP_SHM_ROUND_BYTES;
}

/*
 * Whole messages of at most TCP_SHM_XMAX bytes taken in one zshm_recv()
 * call: each call costs the record's checks once more for the record that
 * ends it, and a fence (zshm_rx_producer_waits()); one record a call made
 * the receiver's part of a 64 B message a third larger
 * (bench/instructions.sh; bench/MEASUREMENTS.md, "recv-instructions").
 */
#define RING_CALL_RECS 16

/*
 * One chunk of a message from the ring (zshm_chunk_fn), handed to the
 * receive side's assembler (tw_rx_chunk()), which delivers the message
 * with its last chunk. -EAGAIN (paused, as for TCP: the same chunk comes
 * again), -EINTR (a batch is done: come back without waiting), or an
 * error.
 */
static int ring_chunk(void *user, uint64_t total, uint64_t off, const void *data,
		      size_t len, bool last)
{
	struct ring_rx *x = user;
	struct tcp_conn *c = x->c;

	/* A chunk of a large message ends a zshm_recv() call, so that
	 * ring_rx() wakes a producer waiting for its room at once; so does an
	 * express record waiting to be looked at before this one (version 4:
	 * it may have to go first). */
	if (x->recs++ &&
	    (off || !last || len > TCP_SHM_XMAX || x->recs > RING_CALL_RECS ||
	     (x->s->x_on && zshm_rx_waiting(&x->s->xrx))))
		return -EINTR;
	if (!off && (last || !c->rx_msg) && ring_batch_done(x))
		return -EINTR;
	int r = tw_rx_chunk(x->w, c, x->tail, total, off, data, len, last);
	if (!r) {
		x->taken += len;
		if (last) {
			x->got++;
			x->bytes += total;
		}
	}
	return r;
}

/* A record of the express ring that cannot be (mu not held): why. */
static int x_bad(struct tcp_conn *c, const char *why)
{
	snprintf(c->rx_why, sizeof(c->rx_why), "the peer broke the express ring: %s",
		 why);
	return -EPROTO;
}

/*
 * Version 4: one record of the express ring (zshm_chunk_fn): a whole
 * message, its fence first. It is delivered once the ring was read up to
 * its fence; before that it stays (-EBUSY, x->fenced), and the ring's
 * records are read first. A fence past what the peer ever published in
 * the ring would hold it for good (WIRE.md, "The express ring").
 */
static int x_record(void *user, uint64_t total, uint64_t off, const void *data,
		    size_t len, bool last)
{
	struct ring_rx *x = user;
	struct tcp_shm *s = x->s;
	uint64_t fence;

	if (off || !last || len != total || len < sizeof(fence))
		return x_bad(x->c, "a record that is not one whole message");
	if (len - sizeof(fence) > x->w->max_msg)
		return x_bad(x->c, "a message above our limit");
	memcpy(&fence, data, sizeof(fence));
	if (fence > s->rx.tail) {
		if (fence > zshm_rx_published(&s->rx))
			return x_bad(x->c, "a fence past the ring's end");
		x->fenced = true;
		return -EBUSY;
	}
	if (ring_batch_done(x))
		return -EINTR;
	len -= sizeof(fence);
	int r = tw_rx_chunk(x->w, x->c, x->tail, len, 0,
			    (const unsigned char *)data + sizeof(fence), len, true);
	if (!r) {
		x->got++;
		x->bytes += len;
	}
	return r;
}

/*
 * Whether a producer waiting for room is woken now: once a quarter of the
 * ring is free (more than any chunk and TCP_SHM_KEEP need), not as soon
 * as any is. Woken at once, a stream's sender that outpaced us wrote a
 * few records into what one call freed and waited again: 6,700 wake-ups
 * (a system call on each side) in 1 M messages of 64 B
 * (bench/MEASUREMENTS.md, "ring-wake-quarter"). A ring read empty has
 * all of it free, so a waiting producer is always woken before we sleep.
 */
static bool ring_room_back(const struct zshm_rx *rx)
{
	/* The flag first: the producer's position is on a line it writes
	 * with every record, which a look per call would pull over. */
	return zshm_rx_producer_flagged(rx) &&
	       rx->size - (zshm_rx_published(rx) - rx->tail) >= rx->size / 4;
}

/* The express ring's records that may go now: 0 (none left, or the next
 * one fenced), -EINTR (a batch is done), -EAGAIN (paused), or -EPROTO. */
static int x_drain(struct tcp_conn *c, struct tcp_shm *s, struct ring_rx *x)
{
	uint64_t before = s->xrx.tail;

	x->fenced = false;
	int r = zshm_recv(&s->xrx, x_record, x);
	c->rx_total += s->xrx.tail - before;
	if (r == -EPROTO && s->xrx.corrupt)
		return x_bad(c, "a position or a record that cannot be");
	return r == -EBUSY || r > 0 ? 0 : r;
}

/*
 * tw_conn_rx() for a connection whose peer switched to its ring: the
 * connection itself must stay silent until its end (@readable: poll saw
 * it), which, like the side channel's end, means the peer is gone:
 * complete messages in the ring are still delivered, a partial one is
 * dropped. Results as tw_conn_rx().
 */
static int ring_rx(struct tcp_wire *w, struct tcp_conn *c, struct tcp_shm *s,
		   struct tcp_rx_msg ***tail, bool readable)
{
	struct ring_rx x = { .w = w, .c = c, .s = s, .tail = tail };

	c->rx_ready = false;
	if (readable && !s->rx_gone) {
		unsigned char b;
		ssize_t k = tw_io_read(c, &b, 1);
		if (k > 0) {
			snprintf(
				c->rx_why, sizeof(c->rx_why),
				"data on the connection after the switch to shared memory");
			return -EPROTO;
		}
		if (k == 0)
			s->rx_gone = true;
		else if (errno != EAGAIN && errno != EINTR) {
			int e = errno;
			snprintf(c->rx_why, sizeof(c->rx_why), "read: %s",
				 tw_io_err(c, e));
			return -e;
		}
	}
	/* A chunk at a time: a producer waiting for room is woken as soon
	 * as there is some, and copies in while we copy out. */
	int r;
	for (;;) {
		uint64_t before = s->rx.tail;
		/* Version 4: the ring's next record seen first, then the
		 * express ring's that may go: a message sent there before
		 * that record's message began shows by now, and goes first
		 * (WIRE.md, "The express ring"). */
		if (s->x_on) {
			bool more = zshm_rx_pending(&s->rx) != 0;
			int got = x.got;
			r = x_drain(c, s, &x);
			/* What came through it goes to the application now,
			 * not after the rest of a large message in the ring. */
			if (!r && x.got > got)
				r = -EINTR;
			if (r)
				break;
			if (x.fenced && !more && !zshm_rx_pending(&s->rx))
				return x_bad(c, "a fence on records that are not there");
			if (!more)
				break;
		}
		x.recs = 0;
		r = zshm_recv(&s->rx, ring_chunk, &x);
		c->rx_total += s->rx.tail - before;
		if (s->rx.tail != before && ring_room_back(&s->rx) &&
		    zshm_rx_producer_waits(&s->rx))
			tw_shm_wake(s);
		if (r != -EINTR || x.recs < 2 || ring_batch_done(&x))
			break;
	}
	if (r == -EPROTO && s->rx.corrupt) {
		snprintf(
			c->rx_why, sizeof(c->rx_why),
			"the peer broke the shared-memory ring (a position or a record that cannot be)");
		return -EPROTO;
	}
	if (r == -EINTR) {
		c->rx_ready = true;
		return 0;
	}
	if (r == -EAGAIN)
		return 0;
	if (r < 0)
		return r;
	if (!s->rx_gone)
		return 0;
	if (zshm_rx_pending(&s->rx) || (s->x_on && zshm_rx_pending(&s->xrx))) {
		c->rx_ready = true; /* more to deliver before the end */
		return 0;
	}
	return c->rx_msg ? tw_rx_drop_partial(w, c) : RX_EOF;
}

/* The shm path's rx op: the ring once the peer switched, else the socket. */
int tw_shm_rx(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
	      struct tcp_rx_msg ***tail, uint64_t now, bool readable)
{
	struct tcp_shm *s = tw_shm_path(p);

	return s->rx_on ? ring_rx(w, c, s, tail, readable)
			: tw_rx_sock(w, c, p, tail, now, readable);
}

bool tw_shm_rx_always(const struct tcp_path *p)
{
	return tw_shm_path(p)->rx_on;
}

/* A record in @rx; @sleeping: announce the sleep first (zshm_rx_prepare_sleep()). */
static bool ring_has(struct zshm_rx *rx, bool sleeping)
{
	return sleeping ? zshm_rx_prepare_sleep(rx) : zshm_rx_pending(rx) > 0;
}

/* A message in the rings; @sleeping: and announce that the leader sleeps
 * (zshm_rx_prepare_sleep()), so its producer wakes it through the side
 * channel, which is in the poll set. */
bool tw_shm_rx_pending(struct tcp_path *p, bool sleeping)
{
	struct tcp_shm *s = tw_shm_path(p);

	if (!s->rx_on)
		return false;
	return (s->x_on && ring_has(&s->xrx, sleeping)) || ring_has(&s->rx, sleeping);
}

/* The peer's TCP_T_SHM: valid once, on a connection with rings. */
bool tw_shm_rx_switch(struct tcp_path *p, bool commit)
{
	struct tcp_shm *s = tw_shm_path(p);

	if (s->rx_on)
		return false;
	if (commit)
		s->rx_on = true;
	return true;
}
