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

struct ring_rx {
	struct tcp_wire *w;
	struct tcp_conn *c;
	struct tcp_rx_msg ***tail;
	uint64_t now; /* the round's coarse clock */
	int got;
	int recs;       /* chunks taken in this zshm_recv() call */
	uint64_t bytes; /* delivered this round */
};

/* Whether this round delivered enough (see TCP_SHM_BATCH_BYTES). */
static bool ring_batch_done(const struct ring_rx *x)
{
	return x->got >= TCP_SHM_BATCH || x->bytes >= TCP_SHM_BATCH_BYTES;
}

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

	/* One chunk per zshm_recv(): ring_rx() frees its room at once. */
	if (x->recs++)
		return -EINTR;
	if (!off && (last || !c->rx_msg) && ring_batch_done(x))
		return -EINTR;
	int r = tw_rx_chunk(x->w, c, x->tail, x->now, total, off, data, len, last);
	if (!r && last) {
		x->got++;
		x->bytes += total;
	}
	return r;
}

/*
 * tw_conn_rx() for a connection whose peer switched to its ring: the
 * connection itself must stay silent until its end (@readable: poll saw
 * it), which, like the side channel's end, means the peer is gone:
 * complete messages in the ring are still delivered, a partial one is
 * dropped. Results as tw_conn_rx().
 */
static int ring_rx(struct tcp_wire *w, struct tcp_conn *c, struct tcp_shm *s,
		   struct tcp_rx_msg ***tail, uint64_t now, bool readable)
{
	struct ring_rx x = { w, c, tail, now, 0, 0, 0 };

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
		x.recs = 0;
		r = zshm_recv(&s->rx, ring_chunk, &x);
		c->rx_total += s->rx.tail - before;
		if (s->rx.tail != before && zshm_rx_producer_waits(&s->rx))
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
	if (zshm_rx_pending(&s->rx)) {
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

	return s->rx_on ? ring_rx(w, c, s, tail, now, readable)
			: tw_rx_sock(w, c, p, tail, now, readable);
}

bool tw_shm_rx_always(const struct tcp_path *p)
{
	return tw_shm_path(p)->rx_on;
}

/* A message in the ring; @sleeping: and announce that the leader sleeps
 * (zshm_rx_prepare_sleep()), so its producer wakes it through the side
 * channel, which is in the poll set. */
bool tw_shm_rx_pending(struct tcp_path *p, bool sleeping)
{
	struct tcp_shm *s = tw_shm_path(p);

	if (!s->rx_on)
		return false;
	return sleeping ? zshm_rx_prepare_sleep(&s->rx) : zshm_rx_pending(&s->rx) > 0;
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
