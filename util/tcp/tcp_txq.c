/* SPDX-License-Identifier: MIT */
/*
 * The tx side of a connection: writing frames, and coalescing the frames
 * of senders that queue behind each other (issue #16).
 *
 * One sender at a time owns a connection's tx side (c->tx_busy). A sender
 * that finds it owned and has a small frame (TCP_TXQ_FRAME_MAX) does not
 * wait for its turn to make a system call of its own: it queues the frame
 * (a struct tcp_txreq on its own stack) on the connection. The owner
 * writes its own frame and the queued ones with one sendmsg() (iovecs
 * pointing into the senders' buffers, no copy), sets each queued sender's
 * result, and on release hands the tx side to the next queued sender, if
 * any, which does the same. A lone sender finds the tx side free and
 * writes at once: nothing ever waits for company. An owner with a burst
 * of its own (zap_send_burst(), tcp_send.c) fills the call with those
 * frames instead; where the socket fills, the ones it had not started are
 * dropped from the batch, unsent, and its caller counts what went whole.
 *
 * Semantics, per queued frame (all under w->mu):
 *  - QUEUED, nothing written: the sender's ctx applies; on expiry it
 *    unlinks the frame and returns the error: nothing was sent.
 *  - TAKEN by an owner: its bytes may be going out, so its buffer is in
 *    use; the sender waits for DONE whatever its ctx says. When the socket
 *    fills, the owner gives every frame it has not started back to the
 *    queue (QUEUED again, ctx applies again) and completes only the one in
 *    progress, which is at most TCP_TXQ_FRAME_MAX bytes.
 *  - DONE: the frame was handed to the kernel whole (0), or the result of
 *    the owner's failure: nothing of it written (err, done 0: the sender
 *    retries a stale connection like its own send would), or a partial
 *    frame, which the peer drops (WIRE.md, "Closing") with the stream
 *    (err; an owner's own deadline or cancel reads -ECONNABORTED here,
 *    since it is not this sender's).
 *  - AGAIN: the connection was lost or retired, or the hand-off chain hit
 *    TCP_TXQ_CHAIN, before anything was written: claim afresh.
 * So a peer receives each sender's frames in order, each whole or not at
 * all, and a sender told 0 had its frame handed to the kernel whole.
 */
#include "tcp_int.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

/* An owner's frames: its own first (one, or a burst's), then those it
 * took from the queue. */
struct txbatch {
	struct tcp_txreq *req[TCP_TXQ_BATCH + 1];
	size_t n;
	size_t own;   /* req[0..own-1] are the owner's own */
	bool no_wait; /* a full socket before any byte: -EAGAIN, don't wait */
	size_t total; /* bytes of the n frames */
	size_t sent;  /* bytes written */
	struct iovec iov[2 * (TCP_TXQ_BATCH + 1)];
};

static size_t frame_bytes(const struct tcp_txreq *r)
{
	return tw_frame_bytes(r);
}

/*
 * Queue @r behind @c's tx owner if it may (mu held; c->tx_busy; @c is its
 * peer's tx connection, so neither dead nor retiring: tw_txq_handoff()
 * sends the queue to claim afresh if it becomes either). The flags are not
 * read here: the leader writes its own flags beside them without mu.
 */
bool tw_txq_join(const struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq *r)
{
	TW_HELD(w);
	/* On a connection with rings a queued frame is not written with
	 * the owner's system call (tw_txq_send()): a version-3 owner puts it
	 * into the ring as a record of its own (tcp_shm.c, shm_put_queued()),
	 * between two parts of a large message too; a large message's
	 * sender on the socket writes it between two parts
	 * (tw_txq_flush()); otherwise it waits for its turn, handed the tx
	 * side in line (tw_txq_handoff()). Either
	 * way a sender that keeps the ring busy does not shut the others out:
	 * the tx side is free for whoever grabs it first only when nobody
	 * waits in line. */
	if (w->no_coalesce || r->len > TCP_TXQ_FRAME_MAX || c->txq_n >= TCP_TXQ_MAX ||
	    c->tx_chain >= TCP_TXQ_CHAIN || (c->ver >= 3 && r->len > TCP_SOLO_MAX))
		return false;
	r->hdr[4] = c->ver; /* frames speak the connection's version */
	r->state = TXQ_QUEUED;
	r->next = NULL;
	if (!c->txq)
		c->txq_tail = &c->txq;
	*c->txq_tail = r;
	c->txq_tail = &r->next;
	c->txq_n++;
	return true;
}

static void txq_unlink(struct tcp_conn *c, struct tcp_txreq *r)
{
	struct tcp_txreq *prev = NULL;

	for (struct tcp_txreq **pp = &c->txq; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			if (c->txq_tail == &r->next)
				c->txq_tail = prev ? &prev->next : &c->txq;
			c->txq_n--;
			return;
		}
}

/* Put @r back at the head of the queue (an owner did not start it). */
static void txq_push_front(struct tcp_conn *c, struct tcp_txreq *r)
{
	r->state = TXQ_QUEUED;
	r->next = c->txq;
	if (!c->txq)
		c->txq_tail = &r->next;
	c->txq = r;
	c->txq_n++;
}

/*
 * Wait, queued on @c, until @r is no longer queued or taken (mu held).
 * 0 with r->state OWNER, DONE or AGAIN; or an error with @r unlinked and
 * nothing of it written.
 */
int tw_txq_wait(struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq *r,
		struct tcp_waiter *me, struct zap_ctx *ctx)
{
	TW_HELD(w);
	for (;;) {
		if (r->state == TXQ_TAKEN) {
			/* Its buffer is being written: no ctx applies. */
			tw_wait_plain(w, me);
			continue;
		}
		if (r->state != TXQ_QUEUED)
			return 0;
		int err = tw_wait_step(w, me, ctx);
		if (err && r->state == TXQ_QUEUED) {
			txq_unlink(c, r);
			return err;
		}
	}
}

/*
 * Up to @max queued frames off @c's queue into @req, TAKEN, in order (mu
 * held): for batch_take(), and for an owner that writes them itself, a
 * record each (the ring, tcp_shm.c). Their count.
 */
size_t tw_txq_take(struct tcp_conn *c, struct tcp_txreq **req, size_t max)
{
	size_t n = 0;

	while (c->txq && n < max) {
		struct tcp_txreq *r = c->txq;
		txq_unlink(c, r);
		r->state = TXQ_TAKEN;
		req[n++] = r;
	}
	return n;
}

/* Move up to TCP_TXQ_BATCH queued frames into @b (mu held). */
static void batch_take(struct tcp_conn *c, struct txbatch *b)
{
	size_t k = tw_txq_take(c, b->req + b->n, TCP_TXQ_BATCH + 1 - b->n);

	for (size_t i = b->n; i < b->n + k; i++)
		b->total += frame_bytes(b->req[i]);
	b->n += k;
}

/* The iovecs of what is left to write from b->sent on. Their count. */
static size_t batch_iov(struct txbatch *b)
{
	size_t pos = b->sent, n = 0;

	for (size_t i = 0; i < b->n; i++) {
		struct tcp_txreq *r = b->req[i];
		const char *part[2] = { (const char *)r->hdr, r->buf };
		size_t plen[2] = { TCP_HDR + r->ext, r->len };
		for (int j = 0; j < 2; j++) {
			if (pos >= plen[j]) {
				pos -= plen[j];
				continue;
			}
			b->iov[n++] = (struct iovec){ (void *)(part[j] + pos),
						      plen[j] - pos };
			pos = 0;
		}
	}
	return n;
}

/* Bytes of frame @i that b->sent covers. */
static size_t batch_wrote(const struct txbatch *b, size_t i)
{
	size_t start = 0;

	for (size_t j = 0; j < i; j++)
		start += frame_bytes(b->req[j]);
	if (b->sent <= start)
		return 0;
	size_t k = b->sent - start;
	return k < frame_bytes(b->req[i]) ? k : frame_bytes(b->req[i]);
}

/* Whether a frame of @b was left half written (the stream is broken). */
static bool batch_partial(const struct txbatch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		size_t k = batch_wrote(b, i);
		if (k && k < frame_bytes(b->req[i]))
			return true;
	}
	return false;
}

/*
 * The socket is full (mu held): give the frames not started back to the
 * queue, in order, so that their senders' deadlines apply while we wait;
 * the owner's own burst frames not started are simply not sent (the burst
 * returns early). Our first frame stays, and so does a frame in progress.
 */
static void batch_cut(struct tcp_wire *w, struct tcp_conn *c, struct txbatch *b)
{
	TW_HELD(w);
	size_t keep = 1;

	while (keep < b->n && batch_wrote(b, keep))
		keep++;
	if (keep == b->n)
		return;
	for (size_t i = b->n; i-- > keep;) {
		if (i >= b->own)
			txq_push_front(c, b->req[i]);
		b->total -= frame_bytes(b->req[i]);
	}
	if (b->n > b->own)
		tw_notify(w, true);
	b->n = keep;
}

/* Wait for room on @c's full socket while (as leader, or through the
 * leader) still draining inbound data. mu not held on entry; held on
 * return only when the result is an error. */
static int wait_room(struct tcp_wire *w, struct tcp_conn *c, struct tcp_waiter *me,
		     struct zap_ctx *ctx)
{
	int err = 0;

	tw_lock(w);
	me->out_fd = c->fd;
	me->out_ready = false;
	while (!me->out_ready && !err && !c->dead)
		err = tw_wait_step(w, me, ctx);
	me->out_fd = -1;
	if (c->dead && !err)
		err = w->host->fail(-ECONNRESET, "%s: connection to %s was lost", w->dom,
				    c->raddr);
	if (!err)
		tw_unlock(w);
	return err;
}

/* Write @b on @c, whose tx side we own (mu not held; held on return). */
static int batch_write(struct tcp_wire *w, struct tcp_conn *c, struct txbatch *b,
		       struct tcp_waiter *me, struct zap_ctx *ctx)
{
	while (b->sent < b->total) {
		size_t niov = batch_iov(b);
		ssize_t k = tw_io_send(c, b->iov, niov);
		tw_count(&w->st_tx_calls, 1);
		if (k > 0) {
			b->sent += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN) {
			if (b->no_wait && !b->sent && !c->tls_wpend) {
				tw_lock(w);
				return -EAGAIN; /* nothing started */
			}
			/* TLS may hold a record of these bytes, which must
			 * be offered again as they are (tcp_tls.c). */
			if (!c->tls_wpend) {
				tw_lock(w);
				batch_cut(w, c, b);
				tw_unlock(w);
				if (b->sent == b->total)
					break; /* ours is out, the rest given back */
			}
			int err = wait_room(w, c, me, ctx);
			if (err)
				return err; /* mu held */
			continue;
		}
		int err = k < 0 ? -errno : -EPIPE;
		err = w->host->fail(err, "%s: send to %s: %s", w->dom, c->raddr,
				    tw_io_err(c, -err));
		tw_lock(w);
		return err;
	}
	tw_lock(w);
	return 0;
}

/* Results for the queued frames of @b, written on @c, after a write that
 * ended with @err (mu held): also @c's counters (its whole DATA frames). */
static void batch_finish(struct tcp_wire *w, struct tcp_conn *c, struct txbatch *b,
			 int err)
{
	TW_HELD(w);
	size_t whole = 0;

	for (size_t i = 0; i < b->n; i++) {
		struct tcp_txreq *r = b->req[i];
		size_t k = batch_wrote(b, i);
		if (k == frame_bytes(r) && r->hdr[5] == TCP_T_DATA) {
			c->tx_msgs++;
			c->tx_bytes += r->len;
		}
		whole += k == frame_bytes(r);
		if (i < b->own)
			continue;
		r->done = k;
		r->err = k == frame_bytes(r) ? 0 : err;
		if (r->err && k && (err == -ETIMEDOUT || err == -ECANCELED))
			r->err = -ECONNABORTED;
		r->state = TXQ_DONE;
	}
	tw_add1(&w->st_tx_frames, whole);
	if (b->n > b->own)
		tw_notify(w, true);
}

/*
 * Write the frames @own[0..@nown-1] (1 to TCP_TXQ_BATCH + 1, a burst when
 * more than one) on @c, whose tx side we own, and, after a single frame,
 * whatever is queued behind it (mu held; dropped while writing). Returns
 * @own[0]'s result, with each own[i].done its bytes written (a burst's
 * frames after the first may be cut unwritten when the socket fills);
 * *@partial: a frame was left half written (the stream is broken there).
 * The connection's error, if any, is in own[0].err for send_release().
 * Without @may_wait, a socket full before the first byte is -EAGAIN with
 * nothing written (a burst's later batches, tcp_send.c).
 */
int tw_txq_send(struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq *own,
		size_t nown, struct tcp_waiter *me, struct zap_ctx *ctx, bool *partial,
		bool may_wait)
{
	TW_HELD(w);
	struct txbatch b = { .n = nown, .own = nown, .no_wait = !may_wait };

	for (size_t i = 0; i < nown; i++) {
		own[i].hdr[4] = c->ver; /* frames speak the connection's version */
		b.req[i] = &own[i];
		b.total += frame_bytes(&own[i]);
	}
	/* With rings, frames queued before they were set up wait for their
	 * own turn (tw_txq_handoff()): none may follow TCP_T_SHM (the path's
	 * coalesce). A burst fills its own system call. */
	if (atomic_load(&c->path)->ops->coalesce && nown == 1)
		batch_take(c, &b);
	tw_unlock(w);
	int err = batch_write(w, c, &b, me, ctx);
	batch_finish(w, c, &b, err);
	for (size_t i = 0; i < nown; i++)
		own[i].done = i < b.n ? batch_wrote(&b, i) : 0;
	own->err = err;
	*partial = batch_partial(&b);
	return own->done == frame_bytes(own) ? 0 : err;
}

/*
 * Write the frames queued on @c now, for their senders, as the owner of
 * its tx side (mu held; dropped while writing): between two parts of a
 * large message, so that a vote goes right after the part just written,
 * not after the hand-off of the tx side to its thread and that thread's
 * return to a core the large message's sender keeps busy
 * (bench/MEASUREMENTS.md, "tcp-flush-queued"; the ring's counterpart is
 * tcp_shm.c's shm_put_queued()). A socket full before the first byte
 * gives them all back, queued as they were; one that fills later gives
 * back those not started, as with any owner. The connection's error, and
 * *@partial when a frame was left half written (the stream is broken).
 */
int tw_txq_flush(struct tcp_wire *w, struct tcp_conn *c, struct tcp_waiter *me,
		 struct zap_ctx *ctx, bool *partial)
{
	TW_HELD(w);
	struct txbatch b = { .no_wait = true };

	*partial = false;
	b.n = tw_txq_take(c, b.req, TCP_TXQ_BATCH + 1);
	if (!b.n)
		return 0;
	for (size_t i = 0; i < b.n; i++)
		b.total += frame_bytes(b.req[i]);
	tw_unlock(w);
	int err = batch_write(w, c, &b, me, ctx);
	if (err == -EAGAIN && !b.sent) {
		tw_txq_taken(w, c, b.req, b.n, 0);
		return 0;
	}
	batch_finish(w, c, &b, err);
	*partial = batch_partial(&b);
	return err;
}

/*
 * What became of the @n frames tw_txq_take() gave (mu held): the first
 * @wrote went whole (DONE, and counted, as batch_finish() counts); the
 * others, not started, go back to the head of the queue in order, QUEUED
 * again for the next owner.
 */
void tw_txq_taken(struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq **req,
		  size_t n, size_t wrote)
{
	TW_HELD(w);
	for (size_t i = 0; i < wrote; i++) {
		c->tx_msgs++;
		c->tx_bytes += req[i]->len;
		req[i]->done = frame_bytes(req[i]);
		req[i]->err = 0;
		req[i]->state = TXQ_DONE;
	}
	for (size_t i = n; i-- > wrote;)
		txq_push_front(c, req[i]);
	tw_add1(&w->st_tx_frames, wrote);
	if (n)
		tw_notify(w, true);
}

/*
 * After the owner's release (mu held, c->tx_busy false): hand the tx side
 * to the first queued sender, or, if the connection can no longer take
 * frames or the chain is long enough, send every queued one to claim
 * afresh.
 */
void tw_txq_handoff(struct tcp_wire *w, struct tcp_conn *c)
{
	TW_HELD(w);
	if (!c->txq) {
		c->tx_chain = 0;
		return;
	}
	if (!c->dead && !c->retiring && !c->tx_shut && c->tx_chain < TCP_TXQ_CHAIN) {
		struct tcp_txreq *r = c->txq;
		txq_unlink(c, r);
		r->state = TXQ_OWNER;
		c->tx_busy = true;
		c->tx_chain++;
	} else {
		while (c->txq) {
			struct tcp_txreq *r = c->txq;
			txq_unlink(c, r);
			r->state = TXQ_AGAIN;
		}
		c->tx_chain = 0;
	}
	tw_notify(w, true);
}
