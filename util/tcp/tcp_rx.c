/* SPDX-License-Identifier: MIT */
/*
 * The leader's receive side: a connection read into messages (frames off
 * the socket, version 3's parts: the socket path's rx op; and the chunks
 * another path hands over, tw_rx_chunk(): the records of a shared-memory
 * ring, tcp_shm_rx.c), the partial-message budget and the stall clock,
 * and messages delivered onto the round's list (tcp_progress.c queues
 * them). Every read goes through the connection's path (tw_conn_rx()).
 *
 * Shared state: each connection's receive state (rbuf, rx_msg, rx_res...)
 * and the partial-message budget belong to the leader, which reads
 * sockets with w->mu released (tcp_int.h has the whole picture).
 */
#include "tcp_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void deliver(struct tcp_conn *c, struct tcp_rx_msg *m, size_t len,
		    struct tcp_rx_msg ***tail)
{
	m->msg.len = len;
	/* An address that ends within its first 64 bytes (a 0 there: the
	 * string's end is at or before it) needs only those: a line, not
	 * two. */
	_Static_assert(sizeof(c->raddr) > 64 && sizeof(m->peer) == sizeof(c->raddr),
		       "a peer's address has a first line and more");
	if (!c->raddr[63])
		memcpy(m->peer, c->raddr, 64);
	else
		memcpy(m->peer, c->raddr, sizeof(m->peer));
	m->msg.peer = m->peer;
	/* TLS: the key that proved itself on this connection; plaintext
	 * Unix socket: the peer's credentials (tcp_unix.c). Neither: no copy,
	 * and no key (a 64 B message's copies were most of this function). */
	if (c->tls || c->ident[0]) {
		memcpy(m->peer_id, c->tls ? c->fp : c->ident, sizeof(m->peer_id));
		m->msg.peer_id = m->peer_id;
	} else {
		m->msg.peer_id = NULL;
	}
	m->next = NULL;
	/* The leader is their only writer: no locked instruction here. */
	tw_add1(&c->rx_msgs, 1);
	tw_add1(&c->rx_bytes, len);
	**tail = m;
	*tail = &m->next;
}

/*
 * The budget for partly received messages (leader): @n more bytes for @c.
 * The oldest partial message, or the only one, may always grow, so one
 * message at a time completes however the budget is spent; the others
 * wait (the connection is not read, TCP holds the sender) until a partial
 * message completes or is dropped and kicks them.
 */
static bool budget_take(struct tcp_wire *w, struct tcp_conn *c, uint64_t n)
{
	if (w->partial_bytes + n > w->partial_max && c != w->oldest && w->partial_bytes) {
		c->alloc_wait = true;
		c->budget_paused = true;
		w->budget_wait = true;
		return false;
	}
	w->partial_bytes += n;
	atomic_store_explicit(&w->st_partial_now, w->partial_bytes, memory_order_relaxed);
	c->rx_charge += n;
	return true;
}

/* Give @n bytes of @c's charge back (budget_put(): all of it). */
static void budget_give(struct tcp_wire *w, struct tcp_conn *c, uint64_t n)
{
	w->partial_bytes -= n;
	atomic_store_explicit(&w->st_partial_now, w->partial_bytes, memory_order_relaxed);
	c->rx_charge -= n;
	if (w->budget_wait) {
		w->budget_wait = false;
		tw_kick(w); /* resume_paused() retries the waiting ones */
	}
}

static void budget_put(struct tcp_wire *w, struct tcp_conn *c)
{
	budget_give(w, c, c->rx_charge);
}

/* The allocator said @r for @len bytes (rx_alloc()): give back the
 * @charged budget, and pause @c (-EAGAIN) or say why it fails. */
static int rx_alloc_failed(struct tcp_wire *w, struct tcp_conn *c, size_t len,
			   uint64_t charged, int r)
{
	budget_give(w, c, charged);
	if (r == -EAGAIN)
		c->alloc_wait = true;
	else
		snprintf(c->rx_why, sizeof(c->rx_why), "cannot allocate %zu bytes: %s",
			 len, strerror(-r));
	return r;
}

/*
 * A message record of @len bytes from the allocator, for a frame or a
 * ring message, for which @charged bytes of the budget were taken. On
 * failure those (and only those: an open message keeps its own) are given
 * back: -EAGAIN pauses @c until a kick; any other error has its reason in
 * c->rx_why.
 */
static int rx_alloc(struct tcp_wire *w, struct tcp_conn *c, size_t len, uint64_t charged,
		    struct tcp_rx_msg **m)
{
	int r = w->alloc.alloc(w->alloc.user, len, m);

	return r ? rx_alloc_failed(w, c, len, charged, r) : 0;
}

/*
 * A message record for a message of @total bytes with room for @first,
 * taking @first of the partial budget first when @partial (the message
 * will be completed later). -EAGAIN: paused (the budget or the
 * allocator), else rx_alloc()'s result.
 */
static int rx_new(struct tcp_wire *w, struct tcp_conn *c, size_t first, uint64_t total,
		  bool partial, struct tcp_rx_msg **m)
{
	if (partial && !budget_take(w, c, first))
		return -EAGAIN;
	int r = rx_alloc(w, c, first, partial ? first : 0, m);
	if (!r)
		(*m)->msg.len = (size_t)total;
	return r;
}

/*
 * The first allocation for a message of @total bytes of which @have are
 * here: all of it, or with a growing allocator and a large message what is
 * here, at least TCP_GROW_FIRST (rx_grow() adds the rest as it arrives),
 * so that nothing a peer declares is allocated before it comes.
 */
static size_t rx_first(const struct tcp_wire *w, uint64_t total, size_t have)
{
	if (!w->alloc.grow || total <= TCP_GROW_FIRST)
		return (size_t)total;
	return have > TCP_GROW_FIRST ? have : TCP_GROW_FIRST;
}

/* @m becomes the message being received on @c (a new one for the stall
 * clock: stall_clock() tells messages apart by c->rx_opened). */
static void rx_open(struct tcp_wire *w, struct tcp_conn *c, struct tcp_rx_msg *m)
{
	c->rx_msg = m;
	c->rx_start = ++w->rx_starts;
	c->rx_opened++;
}

/* The peer ended in the middle of c->rx_msg: everything before it was
 * delivered (WIRE.md, "Closing"); drop it, and only it. */
int tw_rx_drop_partial(struct tcp_wire *w, struct tcp_conn *c)
{
	struct tcp_rx_msg *m = c->rx_msg;

	snprintf(c->rx_why, sizeof(c->rx_why),
		 "peer closed mid-message (%zu of %zu bytes)", c->rx_off, c->rx_len);
	c->rx_msg = NULL;
	c->rx_part = 0;
	budget_put(w, c);
	m->msg.release(&m->msg);
	tw_count(&w->st_drop_partial, 1);
	return RX_EOF_PARTIAL;
}

/*
 * Room for at least @need bytes of the open message c->rx_msg (allocated
 * with c->rx_cap, grown as its bytes arrive, so that what a peer declares
 * is neither allocated nor charged before it comes): up to double, at most
 * its length, within the budget. -EAGAIN: paused by the budget; else 0 or
 * the allocator's error (reason in c->rx_why).
 */
static int rx_grow(struct tcp_wire *w, struct tcp_conn *c, size_t need)
{
	size_t ncap = c->rx_cap <= c->rx_len / 2 ? 2 * c->rx_cap : c->rx_len;

	if (ncap < need)
		ncap = need;
	if (!budget_take(w, c, ncap - c->rx_cap))
		return -EAGAIN;
	int r = w->alloc.grow(w->alloc.user, ncap, &c->rx_msg);
	if (r) {
		budget_give(w, c, ncap - c->rx_cap);
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "cannot grow a message to %zu bytes: %s", ncap, strerror(-r));
		return r;
	}
	c->rx_cap = ncap;
	return 0;
}

/* A read on @c that returned < 0: RX_MORE to retry (EINTR), 0 when
 * nothing more is there (EAGAIN), else -errno with the reason. */
static int rx_read_failed(struct tcp_conn *c)
{
	if (errno == EINTR)
		return RX_MORE;
	if (errno == EAGAIN)
		return 0;
	int e = errno;
	snprintf(c->rx_why, sizeof(c->rx_why), "read: %s", tw_io_err(c, e));
	return -e;
}

/* Read more of the payload being read straight into place (c->rx_msg):
 * the rest of its current frame (c->rx_part), from what rbuf holds first. */
static int rx_payload(struct tcp_wire *w, struct tcp_conn *c, struct tcp_rx_msg ***tail)
{
	struct tcp_rx_msg *m = c->rx_msg;

	if (c->rx_off == c->rx_cap) {
		int r = rx_grow(w, c, c->rx_off + 1);
		if (r)
			return r == -EAGAIN ? 0 : r;
		m = c->rx_msg;
	}
	size_t want = c->rx_cap - c->rx_off;
	ssize_t k;
	if (want > c->rx_part)
		want = c->rx_part;
	if (c->rhead < c->rlen) {
		k = (ssize_t)(c->rlen - c->rhead < want ? c->rlen - c->rhead : want);
		memcpy((char *)m->msg.data + c->rx_off, c->rbuf + c->rhead, (size_t)k);
		c->rhead += (size_t)k;
	} else {
		k = tw_io_read(c, (char *)m->msg.data + c->rx_off, want);
		tw_add1(&w->st_rx_reads, 1);
		if (k > 0)
			c->rx_total += (size_t)k;
	}

	if (k > 0) {
		c->rx_off += (size_t)k;
		c->rx_part -= (size_t)k;
		if (c->rx_off < c->rx_len) {
			/* Between two parts (version 3): expect the next. */
			if (!c->rx_part)
				c->rx_big = true;
			return RX_MORE;
		}
		c->rx_msg = NULL;
		c->rx_big = c->rx_len >= TCP_RBUF;
		budget_put(w, c);
		deliver(c, m, c->rx_len, tail);
		tw_add1(&w->st_rx_frames, 1);
		c->rx_ready = true;
		return 0;
	}
	if (k == 0) {
		/* Everything before this frame was delivered; the peer
		 * abandoned this one (WIRE.md, "Closing"). Drop it, and only
		 * it. */
		return tw_rx_drop_partial(w, c);
	}
	return rx_read_failed(c);
}

/*
 * TCP_T_SHM at c->rhead: the peer's frames come from the ring from now on
 * (tcp_shm.c). Valid once, on a connection with rings, as the last bytes
 * on the connection. 0 (read the ring next), or -EPROTO.
 */
static int rx_switch(struct tcp_conn *c)
{
	struct tcp_path *p = atomic_load(&c->path);
	uint64_t len;
	int r = tcp_parse_header(c->rbuf + c->rhead, c->ver, TCP_T_SHM, 0, &len,
				 c->rx_why, sizeof(c->rx_why));

	if (r)
		return r == -EMSGSIZE ? -EPROTO : r;
	if (c->rx_msg) {
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "switch to shared memory in the middle of a message");
		return -EPROTO;
	}
	if (!p->ops->rx_switch(p, false)) {
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "switch to shared memory that was never set up");
		return -EPROTO;
	}
	c->rhead += TCP_HDR;
	if (c->rhead != c->rlen) {
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "data on the connection after the switch to shared memory");
		return -EPROTO;
	}
	c->rhead = c->rlen = 0;
	p->ops->rx_switch(p, true);
	c->rx_ready = true;
	return 0;
}

/*
 * A part of a large message at c->rhead (version 3, WIRE.md "Large
 * messages"): BEGIN opens c->rx_msg, MORE continues it; its bytes are
 * then read into place (c->rx_part, rx_payload()). RX_MORE, 0 (paused:
 * the budget or the allocator), or an error with c->rx_why.
 */
static int rx_part(struct tcp_wire *w, struct tcp_conn *c)
{
	unsigned char *h = c->rbuf + c->rhead;
	size_t avail = c->rlen - c->rhead - TCP_HDR;
	uint64_t len, total;
	int r = tcp_parse_header(h, c->ver, h[5], w->max_msg + 8, &len, c->rx_why,
				 sizeof(c->rx_why));

	if (r)
		return r;
	if (h[5] == TCP_T_MORE) {
		if (!c->rx_msg) {
			snprintf(c->rx_why, sizeof(c->rx_why),
				 "a MORE frame with no message open");
			return -EPROTO;
		}
		if (!len || len > c->rx_len - c->rx_off) {
			snprintf(c->rx_why, sizeof(c->rx_why),
				 "a MORE frame of %" PRIu64
				 " bytes; the open message has %zu left",
				 len, c->rx_len - c->rx_off);
			return -EPROTO;
		}
		c->rhead += TCP_HDR;
		c->rx_part = (size_t)len;
		return RX_MORE;
	}
	if (c->rx_msg) {
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "a BEGIN frame while a message is open (%zu of %zu bytes)",
			 c->rx_off, c->rx_len);
		return -EPROTO;
	}
	if (len < 8 + 1) {
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "a BEGIN frame of %" PRIu64 " bytes", len);
		return -EPROTO;
	}
	if (avail < 8)
		return RX_MORE; /* its total length is next */
	total = get_be64(h + TCP_HDR);
	if (total > w->max_msg) {
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "message length %" PRIu64 " exceeds the maximum %" PRIu64
			 " (ZAP_MAX_MSG_BYTES)",
			 total, w->max_msg);
		return -EMSGSIZE;
	}
	if (len - 8 > total) {
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "a BEGIN frame of %" PRIu64 " bytes for a message of %" PRIu64,
			 len, total);
		return -EPROTO;
	}
	/* Within the budget, which the message holds until it is complete. */
	size_t first = rx_first(w, total, 0);
	struct tcp_rx_msg *m = NULL;
	r = rx_new(w, c, first, total, true, &m);
	if (r == -EAGAIN)
		return 0;
	if (r)
		return r;
	c->rhead += TCP_HDR + 8;
	rx_open(w, c, m);
	c->rx_off = 0;
	c->rx_cap = first;
	c->rx_len = (size_t)total;
	c->rx_part = (size_t)(len - 8);
	return RX_MORE;
}

/*
 * Turn the complete frames in c->rbuf into messages (counted in *@got); a
 * frame whose payload does not fit the buffer starts c->rx_msg (version
 * 2), as does a BEGIN (version 3). RX_MORE when the buffer has no
 * complete frame left or a payload is to be read into place, else
 * tw_conn_rx()'s result.
 */
static int rx_frames(struct tcp_wire *w, struct tcp_conn *c, struct tcp_rx_msg ***tail,
		     int *got)
{
	while (c->rlen - c->rhead >= TCP_HDR) {
		unsigned char *h = c->rbuf + c->rhead;
		uint64_t len;
		if (h[5] == TCP_T_SHM)
			return rx_switch(c);
		if (c->ver >= 3 && (h[5] == TCP_T_BEGIN || h[5] == TCP_T_MORE)) {
			/* RX_MORE: its bytes next (c->rx_part), or more of
			 * its header first. */
			return rx_part(w, c);
		}
		/* Version 3 sends larger messages in parts: a DATA frame
		 * always fits rbuf, and may come between two parts. */
		int r = tcp_parse_header(h, c->ver, TCP_T_DATA,
					 c->ver >= 3 ? TCP_SOLO_MAX : w->max_msg, &len,
					 c->rx_why, sizeof(c->rx_why));
		if (r == -EMSGSIZE && c->ver >= 3) {
			snprintf(c->rx_why, sizeof(c->rx_why),
				 "a DATA frame of %" PRIu64
				 " bytes (version 3 sends more than %u in parts)",
				 get_be64(h + 8), TCP_SOLO_MAX);
			return -EPROTO;
		}
		if (r)
			return r;
		size_t avail = c->rlen - c->rhead - TCP_HDR;
		if (len > avail && (c->ver >= 3 || len - avail <= TCP_RBUF - c->rlen)) {
			/* The rest fits the buffer: wait for it there, small
			 * frames cost one read each. */
			return RX_MORE;
		}
		/* Within the budget when the rest is still to come. */
		bool part = len > avail;
		size_t first = part ? rx_first(w, len, avail) : (size_t)len;
		struct tcp_rx_msg *m = NULL;
		r = rx_new(w, c, first, len, part, &m);
		if (r == -EAGAIN)
			return 0;
		if (r)
			return r;
		size_t take = avail < len ? avail : (size_t)len;
		if (take)
			memcpy((void *)m->msg.data, h + TCP_HDR, take);
		c->rhead += TCP_HDR + take;
		if (take < len) {
			rx_open(w, c, m);
			c->rx_off = take;
			c->rx_cap = first;
			c->rx_len = (size_t)len;
			c->rx_part = (size_t)len - take;
			return RX_MORE;
		}
		deliver(c, m, (size_t)len, tail);
		c->rx_big = false;
		(*got)++;
		tw_add1(&w->st_rx_frames, 1);
	}
	return RX_MORE;
}

/* Move unparsed bytes to the front of rbuf: always when @force, else when
 * a payload is being read in place, a header would not fit, or more than
 * half the buffer is consumed. */
static void rx_compact(struct tcp_conn *c, bool force)
{
	if (c->rhead == c->rlen) {
		c->rhead = c->rlen = 0;
	} else if (c->rhead && (force || c->rx_msg || TCP_RBUF - c->rlen < TCP_HDR ||
				c->rhead > TCP_RBUF / 2)) {
		memmove(c->rbuf, c->rbuf + c->rhead, c->rlen - c->rhead);
		c->rlen -= c->rhead;
		c->rhead = 0;
	}
}

/* Read into rbuf. RX_MORE after reading something, else a result. */
static int rx_fill(struct tcp_wire *w, struct tcp_conn *c)
{
	/* After a large message expect another: read just its header so
	 * the payload lands in place instead of through rbuf. */
	size_t room = TCP_RBUF - c->rlen;
	if (c->rx_big && c->rlen < TCP_HDR)
		room = TCP_HDR - c->rlen;
	ssize_t k = tw_io_read(c, c->rbuf + c->rlen, room);
	tw_add1(&w->st_rx_reads, 1);
	if (k > 0) {
		c->rx_total += (size_t)k;
		c->rlen += (size_t)k;
		return RX_MORE;
	}
	if (k == 0) {
		if (!c->rlen)
			return RX_EOF;
		snprintf(c->rx_why, sizeof(c->rx_why),
			 "peer closed mid-frame (%zu bytes pending)", c->rlen);
		c->rhead = c->rlen = 0;
		return RX_EOF_PARTIAL;
	}
	return rx_read_failed(c);
}

/*
 * Read what is available on @c without blocking and turn complete frames
 * into messages. Stops after the first batch of messages so the caller
 * gets one promptly (rx_ready says whether to come back without polling).
 * Return 0, RX_EOF, RX_EOF_PARTIAL (c->rx_why says what was dropped), or a
 * negative errno with c->rx_why set.
 */
static int conn_rx_inner(struct tcp_wire *w, struct tcp_conn *c,
			 struct tcp_rx_msg ***tail)
{
	int got = 0, r;

	c->rx_ready = false;
	for (;;) {
		if (c->rx_part) {
			r = rx_payload(w, c, tail);
			if (r != RX_MORE)
				return r;
			continue;
		}
		r = rx_frames(w, c, tail, &got);
		if (r != RX_MORE)
			return r;
		rx_compact(c, false);
		if (c->rx_part)
			continue;
		if (got) {
			c->rx_ready = true;
			return 0;
		}
		rx_compact(c, true); /* make room for the rest of a frame */
		r = rx_fill(w, c);
		if (r != RX_MORE)
			return r;
	}
}

/*
 * One chunk of a message that a path other than the socket's hands over
 * whole (the ring's records, tcp_shm_rx.c): the first starts c->rx_msg
 * (the path checked the length against our limit), which grows as
 * chunks arrive and takes the partial budget as a large frame does; the
 * last delivers it onto *@tail. A whole message between two chunks of
 * the open one (version 3) is delivered at once, outside the budget.
 * -EAGAIN (paused, as for TCP: the same chunk comes again) or an error.
 */
int tw_rx_chunk(struct tcp_wire *w, struct tcp_conn *c, struct tcp_rx_msg ***tail,
		uint64_t total, uint64_t off, const void *data, size_t len, bool last)
{
	struct tcp_rx_msg *m = NULL;
	int r;

	if (!off && last) {
		/* Whole (every small message): the allocator straight, no
		 * budget; deliver() sets the length (rx_new() and rx_alloc()
		 * around it were 35 instructions of a 64 B message). */
		r = w->alloc.alloc(w->alloc.user, (size_t)total, &m);
		if (r)
			return rx_alloc_failed(w, c, (size_t)total, 0, r);
		memcpy((void *)m->msg.data, data, len);
		goto whole;
	}
	if (!off && !c->rx_msg) {
		size_t first = rx_first(w, total, len);
		r = rx_new(w, c, first, total, true, &m);
		if (r)
			return r;
		rx_open(w, c, m);
		c->rx_len = (size_t)total;
		c->rx_cap = first;
	}
	if (off + len > c->rx_cap) {
		r = rx_grow(w, c, (size_t)(off + len));
		if (r)
			return r;
	}
	if (len)
		memcpy((char *)c->rx_msg->msg.data + off, data, len);
	c->rx_off = (size_t)off + len;
	if (!last)
		return 0;
	m = c->rx_msg;
	c->rx_msg = NULL;
	budget_put(w, c);
whole:
	deliver(c, m, (size_t)total, tail);
	tw_add1(&w->st_rx_frames, 1);
	return 0;
}

/* The socket path's receive (tcp_path.h): conn_rx_inner(). */
int tw_rx_sock(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
	       struct tcp_rx_msg ***tail, uint64_t now, bool readable)
{
	(void)p;
	(void)now;
	(void)readable;
	return conn_rx_inner(w, c, tail);
}

/*
 * The clock of a partial frame (c->rx_since_ms; pollset_conns() closes the
 * connection when it reaches ZAP_TCP_STALL_MS). It stops when nothing is
 * partly read. While a message is open (c->rx_msg) it restarts only once
 * enough of that message's own bytes arrived since it last did:
 * ZAP_TCP_MIN_RATE x ZAP_TCP_STALL_MS, or the rest of the message. So a
 * peer holding partial-message budget keeps up that rate or is closed,
 * and a message of L bytes holds budget for at most about L / rate plus
 * the stall limit, whatever trickles in meanwhile (a byte a second, empty
 * ring chunks, small messages between its parts). A partly read frame
 * header holds nothing but the connection's buffer: any byte restarts it.
 */
static void stall_clock(const struct tcp_wire *w, struct tcp_conn *c, bool moved,
			uint64_t now)
{
	if (!c->rx_msg && c->rhead == c->rlen) {
		c->rx_since_ms = 0;
		return;
	}
	if (!c->rx_msg) {
		if (moved || !c->rx_since_ms)
			c->rx_since_ms = now;
		return;
	}
	if (c->rx_opened == c->rx_win_opened && c->rx_since_ms) {
		uint64_t need = w->min_rate * w->stall_ms / 1000;
		size_t got = c->rx_off - c->rx_win_off;

		if (need > c->rx_len - c->rx_win_off)
			need = c->rx_len - c->rx_win_off;
		if (!got || got < need)
			return;
	}
	/* A new window: a message just opened, or enough of it came. */
	c->rx_win_opened = c->rx_opened;
	c->rx_win_off = c->rx_off;
	c->rx_since_ms = now;
}

/* The path's receive (tw_rx_sock(), or the ring's), and the stall clock. */
int tw_conn_rx(struct tcp_wire *w, struct tcp_conn *c, struct tcp_rx_msg ***tail,
	       uint64_t now, bool readable)
{
	uint64_t before = c->rx_total;
	struct tcp_path *p = atomic_load(&c->path);
	int r = p->ops->rx(w, c, p, tail, now, readable);
	bool moved = c->rx_total != before;

	if (moved) {
		tw_touch(c, now);
		atomic_store_explicit(&c->rx_ms, now, memory_order_relaxed);
	}
	stall_clock(w, c, moved, now);
	return r;
}
