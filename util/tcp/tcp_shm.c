/* SPDX-License-Identifier: MIT */
/*
 * The shm path (tcp_path.h; WIRE.md, "Same host"), once a connection
 * holds its pair of rings (set up in tcp_shm_setup.c, the side channel's
 * datagrams in tcp_shm_side.c, the ring's receive in tcp_shm_rx.c): its
 * ops table, sending into our ring (the switch frame first, then every
 * frame), the wake-ups over the side channel, and the ends: a pair
 * released, or our ring left to linger for a peer still reading it.
 *
 * Shared state: see "Shared memory" in tcp_int.h.
 */
#include "tcp_int.h"
#include "tcp_shm.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- ends --------------------------------------------------------------- */

/*
 * Unmap a ring of ours; with @release, hand its memory back to the system
 * first (MADV_REMOVE punches the whole region out of the memfd). A peer
 * holds the memfd, and may keep it after it hung up: released, the region
 * costs us nothing however long it does (issue #35, hoarded rings); its
 * mapping then reads zeros, which a reader takes for a broken ring.
 */
void tw_shm_region_drop(void *map, size_t len, bool release)
{
	if (release)
		(void)madvise(map, len, MADV_REMOVE);
	munmap(map, len);
}

/* We read the peer's ring no more: say so in it, and unmap it. */
static void rx_end(struct tcp_shm *s)
{
	if (!s->rx_map)
		return;
	if (s->rx.ctl) /* attached: the peer's sends fail from now on */
		zshm_rx_close(&s->rx);
	if (s->x_on)
		zshm_rx_close(&s->xrx);
	munmap(s->rx_map, s->map_len);
	s->rx_map = NULL;
}

/* Our ring of @s, released, and the rest of the pair freed. */
void tw_shm_pair_free(struct tcp_shm *s, bool release)
{
	if (s->tx_map)
		tw_shm_region_drop(s->tx_map, s->map_len, release);
	rx_end(s);
	if (s->sock >= 0)
		close(s->sock);
	if (s->count)
		atomic_fetch_sub(s->count, 1);
	pthread_mutex_destroy(&s->xmu);
	free(s);
}

/* A pair that never carried a message (set-up failed, or was refused):
 * nobody may read our ring, so its memory goes at once. */
void tw_shm_free(struct tcp_shm *s)
{
	if (s)
		tw_shm_pair_free(s, true);
}

/*
 * Whether the peer reads no more of our ring: it said so (it marks its rx
 * ring closed before it lets go of it), or its side channel ended (it
 * closed its end of the pair, or died). Not that it read everything: a
 * peer still attached keeps looking at the positions, and a released
 * region reads as a broken ring. A peer that lies only gets its own ring
 * released early.
 */
bool tw_shm_tx_finished(const struct tcp_shm *s)
{
	if (!s->tx_map || zshm_tx_peer_closed(&s->tx))
		return true;
	struct pollfd p = { .fd = s->sock, .events = POLLIN };
	return s->sock < 0 || (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)));
}

/*
 * The connection of pair @s ended (tw_conn_free()). We stop reading the
 * peer's ring. Ours may still hold messages a live peer reads after our
 * end, as a socket's buffer is still delivered after close(): then it
 * lingers, for the accept thread to release once the peer finished, or
 * after ZAP_TCP_STALL_MS at most (it keeps its place among TCP_SHM_MAX
 * meanwhile, so lingering rings are bounded too). At shutdown nobody is
 * left to watch it: it is left to the peer's mapping as it is.
 */
static void shm_end(struct tcp_path *p)
{
	struct tcp_shm *s = tw_shm_path(p);

	rx_end(s);
	struct tcp_wire *w = s->w;
	bool done = tw_shm_tx_finished(s);
	if (done || atomic_load(&w->shut) || w->shm_linger_fd < 0) {
		tw_shm_pair_free(s, done);
		return;
	}
	s->linger_until = now_ms() + w->stall_ms;
	s->linger_next = atomic_load(&w->shm_linger_in);
	while (!atomic_compare_exchange_weak(&w->shm_linger_in, &s->linger_next, s))
		;
	uint64_t one = 1;
	ssize_t k = write(w->shm_linger_fd, &one, sizeof(one));
	(void)k;
}

/* The rings other threads left to linger, moved from the inbox onto the
 * accept thread's own list (or, at close, the last thread's). */
void tw_shm_linger_take(struct tcp_wire *w)
{
	for (struct tcp_shm *s = atomic_exchange(&w->shm_linger_in, NULL), *n; s; s = n) {
		n = s->linger_next;
		s->linger_next = w->shm_linger;
		w->shm_linger = s;
	}
}

/*
 * The accept thread's look at the lingering rings: new ones taken from
 * the inbox, finished or expired ones released. When some linger, the
 * next look is due in TCP_SHM_LINGER_TICK_MS (*@next_ms).
 */
void tw_shm_linger_sweep(struct tcp_wire *w, uint64_t *next_ms)
{
	uint64_t drained, now = now_ms();
	ssize_t k = read(w->shm_linger_fd, &drained, sizeof(drained));
	(void)k;
	tw_shm_linger_take(w);
	for (struct tcp_shm **pp = &w->shm_linger, *s; (s = *pp);) {
		bool done = tw_shm_tx_finished(s);
		if (!done && s->linger_until > now) {
			pp = &s->linger_next;
			continue;
		}
		if (!done)
			w->host->log(ZAP_LOG_DEBUG, w->dom,
				     "a peer left our ring unread for %u ms after its "
				     "connection ended: released",
				     w->stall_ms);
		*pp = s->linger_next;
		tw_shm_pair_free(s, true);
	}
	if (w->shm_linger && *next_ms > now + TCP_SHM_LINGER_TICK_MS)
		*next_ms = now + TCP_SHM_LINGER_TICK_MS;
}

/* ---- after the set-up --------------------------------------------------- */

/*
 * Read what came on @c's side channel (mu held): wake-ups, or its end.
 * Whether anything a waiter may wait for changed.
 */
bool tw_shm_side(struct tcp_wire *w, struct tcp_conn *c)
{
	TW_HELD(w);
	struct tcp_shm *s = tw_shm_of(c);
	bool changed = false;

	if (!s || s->sock < 0 || s->side_gone)
		return false;
	/* Bounded: a peer that floods wake-ups gets them read a batch a
	 * round, like any other input. */
	for (int i = 0; i < 64; i++) {
		char m[16];
		ssize_t k = recv(s->sock, m, sizeof(m), MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			break;
		changed = true; /* room in our ring, perhaps: senders retry */
		if (k <= 0) {
			s->side_gone = true;
			w->host->log(ZAP_LOG_DEBUG, w->dom, "%s: side channel closed",
				     c->raddr);
			break;
		}
	}
	return changed;
}

void tw_shm_wake(const struct tcp_shm *s)
{
	static const char b = 'w';

	/* Never blocks: a full socket already holds wake-ups. */
	ssize_t k = send(s->sock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)k;
}

/*
 * Whether the peer is known to be gone, as a send on a closed TCP
 * connection fails: it said so in the ring (it closed), or, looked at
 * once a clock tick (now_coarse_ms()) at most, its side channel ended (it
 * died).
 */
static bool peer_gone(struct tcp_shm *s)
{
	if (zshm_tx_peer_closed(&s->tx))
		return true;
	uint64_t now = now_coarse_ms();
	if (now == s->live_ms)
		return false;
	s->live_ms = now;
	char b;
	ssize_t k = recv(s->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR);
}

/* Where the consumer is: grows with its progress only, whatever we
 * write meanwhile. Read from the region alone, so a sender that does not
 * own the tx side may read it too (the consumed op). */
static uint64_t consumer_pos(const struct tcp_shm *s)
{
	return zshm_tx_consumed(&s->tx);
}

static uint64_t shm_consumed(const struct tcp_path *p)
{
	return consumer_pos(tw_shm_path(p));
}

/*
 * The first frame of this direction into the ring writes TCP_T_SHM on the
 * connection first (mu held; tx side owned). 0, or tw_txq_send()'s error
 * with @own's result set.
 */
static int ring_switch(struct tcp_wire *w, struct tcp_conn *c, struct tcp_shm *s,
		       struct tcp_txreq *own, struct tcp_waiter *me, struct zap_ctx *ctx,
		       bool *partial)
{
	if (s->tx_on)
		return 0;
	struct tcp_txreq sw = { 0 };
	tw_hdr_put(sw.hdr, c->ver, TCP_T_SHM, 0);
	int err = tw_txq_send(w, c, &sw, 1, me, ctx, partial, true);
	if (err) {
		own->err = sw.err;
		own->done = sw.done;
		return err;
	}
	s->tx_on = true;
	return 0;
}

/* One message of @len bytes went to @c's rings (mu held). */
static void shm_sent(struct tcp_wire *w, struct tcp_conn *c, size_t len)
{
	TW_HELD(w);
	tw_add1(&w->st_tx_frames, 1);
	c->tx_msgs++;
	c->tx_bytes += len;
}

/* A message just completed in @s's ring (tx side owned): the position an
 * express record's fence names from now on (tw_shm_express()). */
static void bulk_done(struct tcp_shm *s)
{
	atomic_store_explicit(&s->bulk_done, zshm_tx_published(&s->tx),
			      memory_order_release);
}

/* One attempt to publish @own; 0, -EAGAIN (full), or -EPROTO. Version 3
 * writes it as one record, which may go between the parts of a large
 * message another sender has open (shm_send_part()). */
static int ring_put(struct tcp_shm *s, const struct tcp_conn *c,
		    const struct tcp_txreq *own)
{
	bool wake;
	int r = c->ver >= 3 ? zshm_send_whole(&s->tx, own->buf, own->len, &wake)
			    : zshm_send(&s->tx, own->buf, own->len, &wake);

	if (!r)
		bulk_done(s);
	if (wake)
		tw_shm_wake(s);
	return r;
}

/*
 * Send @own on @c, whose tx side we own and whose ring is ready (mu held;
 * dropped while writing and waiting). The first frame of this direction
 * writes TCP_T_SHM on the connection first. As tw_txq_send() returns;
 * without @may_wait, -EAGAIN (nothing written, own->err 0) where the ring
 * has no room to start the frame (a burst's later frames, tcp_send.c); a
 * frame once started is finished, waiting if it must.
 */
static int shm_send1(struct tcp_wire *w, struct tcp_conn *c, struct tcp_shm *s,
		     struct tcp_txreq *own, struct tcp_waiter *me, struct zap_ctx *ctx,
		     bool *partial, bool may_wait)
{
	TW_HELD(w);
	bool whole = c->ver >= 3; /* one record, never partly written */
	int err = ring_switch(w, c, s, own, me, ctx, partial);

	if (err)
		return err;
	*partial = false;
	tw_unlock(w);
	if (peer_gone(s)) {
		/* Nothing written: the caller retries on a new connection. */
		tw_lock(w);
		own->done = 0;
		own->err = w->host->fail(-EPIPE, "%s: send to %s: the peer closed",
					 w->dom, c->raddr);
		return own->err;
	}
	for (;;) {
		int r = ring_put(s, c, own);
		uint64_t seen = 0;
		if (r == -EAGAIN && !may_wait && (whole || !zshm_tx_mid(&s->tx))) {
			tw_lock(w);
			own->done = 0;
			own->err = 0;
			return -EAGAIN;
		}
		if (r == -EAGAIN) {
			/* Full: announce that we wait, look once more. */
			zshm_tx_prepare_wait(&s->tx);
			seen = consumer_pos(s);
			r = ring_put(s, c, own);
		}
		if (!r)
			break;
		if (r != -EAGAIN) {
			err = w->host->fail(
				-EPROTO,
				"%s: send to %s: the peer broke the shared-memory ring",
				w->dom, c->raddr);
			break;
		}
		/*
		 * The consumer wakes us through the side channel, which the
		 * leader polls: any change, then try again. Room made since
		 * the last look, whose wake-up the leader may have handled
		 * before we wait, shows as consumer progress under mu: the
		 * leader's broadcast needs mu too, so it either comes after
		 * we sleep or its progress is visible here.
		 */
		tw_lock(w);
		if (consumer_pos(s) == seen) {
			me->room = &s->path; /* a leading waiter also watches the ring */
			me->room_had = zshm_tx_room(&s->tx);
			err = tw_wait_step(w, me, ctx);
			me->room = NULL;
		}
		if (!err && (c->dead || s->side_gone))
			err = w->host->fail(-ECONNRESET, "%s: connection to %s was lost",
					    w->dom, c->raddr);
		tw_unlock(w);
		if (err)
			break;
	}
	tw_lock(w);
	*partial = err && !whole && zshm_tx_mid(&s->tx);
	own->done = err ? *partial : TCP_HDR + own->len;
	own->err = err;
	if (!err)
		shm_sent(w, c, own->len);
	return err;
}

/*
 * Version 3: the frames queued behind us (mu held, tx side owned, our own
 * frame or part just went into the ring), written by us, a record each,
 * up to TCP_TXQ_BATCH of them; what finds no room goes back to the head
 * of the queue for the next owner. Handing each its turn instead cost a
 * context switch per message: 8 threads sending 64 B to one peer made
 * 86-189 k/s in line, against 1.4-2.3 M/s for the same threads grabbing
 * the tx side in turn (no_coalesce), and 1.7-3.2 M/s now; a vote queued
 * behind a large message waited for the hand-off and its sender's return
 * to the core (bench/MEASUREMENTS.md, "shm-put-queued"). The ring takes a
 * record whole or not at all, so no frame is ever half written.
 */
static size_t shm_put_queued(struct tcp_wire *w, struct tcp_conn *c, struct tcp_shm *s)
{
	TW_HELD(w);
	struct tcp_txreq *req[TCP_TXQ_BATCH];
	size_t n, k = 0;

	if (c->ver < 3 || !s->tx_on || !c->txq || peer_gone(s))
		return 0;
	n = tw_txq_take(c, req, TCP_TXQ_BATCH);
	tw_unlock(w);
	while (k < n && !ring_put(s, c, req[k]))
		k++;
	tw_lock(w);
	tw_txq_taken(w, c, req, n, k);
	return k;
}

/* One attempt at the next record of the large message @buf, as ring_put()
 * is for a whole one: zshm_send_part()'s result. */
static int record_put(struct tcp_shm *s, const void *buf, size_t len)
{
	bool wake;
	int r = zshm_send_part(&s->tx, buf, len, TCP_SHM_CHUNK, TCP_SHM_KEEP, &wake);

	if (!r)
		bulk_done(s);
	if (wake)
		tw_shm_wake(s);
	return r;
}

/*
 * The records of one part of a large message (mu not held, tx side
 * owned): TCP_SHM_CHUNK bytes each, up to TCP_PART. Between two, the part
 * ends when a sender queued for the tx side (c->txq_n, read without mu: a
 * stale read moves the end by a record), and the core goes to a spinning
 * leader of this process that gave it to us (tw_core_wanted). Otherwise a
 * vote whose thread shares the core waited for the whole part's copy
 * (bench/MEASUREMENTS.md, "shm-part-records"). Results as shm_send_part().
 */
static int part_records(struct tcp_conn *c, struct tcp_shm *s, const void *buf,
			size_t len, uint64_t *seen)
{
	int r = -EINPROGRESS;

	for (unsigned i = 0; r == -EINPROGRESS && i < TCP_PART / TCP_SHM_CHUNK; i++) {
		if (i && atomic_load_explicit(&c->txq_n, memory_order_relaxed))
			break;
		if (i && atomic_load_explicit(&tw_core_wanted, memory_order_relaxed) &&
		    atomic_exchange_explicit(&tw_core_wanted, false,
					     memory_order_relaxed))
			sched_yield();
		r = record_put(s, buf, len);
		if (r == -EAGAIN) {
			/* Full: announce that we wait, look once more. */
			zshm_tx_prepare_wait(&s->tx);
			*seen = consumer_pos(s);
			r = record_put(s, buf, len);
		}
	}
	return r;
}

/*
 * Version 3: write the next part of the large message @m into @c's
 * ring (tx side owned, mu held; dropped while writing): at most TCP_PART
 * bytes, leaving TCP_SHM_KEEP bytes free for other senders' messages.
 * 0: the message is complete; -EINPROGRESS: a part went, more is to come;
 * -EAGAIN: no room for the next part (*@seen: the consumer's position
 * then; give the tx side back and wait for it to move); or an error.
 * *@open: part of the message is in the ring and the rest is not.
 */
static int shm_send_part(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
			 const struct zap_iov *m, size_t *off, struct tcp_waiter *me,
			 struct zap_ctx *ctx, bool *open, bool *partial, uint64_t *seen)
{
	TW_HELD(w);
	struct tcp_shm *s = tw_shm_path(p);
	const void *buf = m->buf;
	size_t len = m->len;
	struct tcp_txreq own = { .buf = buf, .len = len };
	int r = ring_switch(w, c, s, &own, me, ctx, open);

	(void)off;     /* the ring keeps its own place in the message */
	(void)partial; /* a part is one record, never half written */

	if (r)
		return r;
	*open = zshm_tx_mid(&s->tx);
	tw_unlock(w);
	/* A peer gone (closed, or its side channel ended) reads no more of
	 * the ring: before the first part nothing was written (the caller
	 * may retry elsewhere); after it, the message is lost with it. */
	if (peer_gone(s)) {
		tw_lock(w);
		return *open ? w->host->fail(-ECONNRESET, "%s: connection to %s was lost",
					     w->dom, c->raddr)
			     : w->host->fail(-EPIPE, "%s: send to %s: the peer closed",
					     w->dom, c->raddr);
	}
	r = part_records(c, s, buf, len, seen);
	tw_lock(w);
	*open = zshm_tx_mid(&s->tx);
	if (r == -EPROTO)
		return w->host
			->fail(-EPROTO,
			       "%s: send to %s: the peer broke the shared-memory ring",
			       w->dom, c->raddr);
	if (!r)
		tw_add1(&w->st_tx_frames, 1);
	/* Small ones queued meanwhile: into the room kept for them. Their
	 * senders, woken, may share our core, which we would otherwise keep
	 * to the end of our time slice (their p99 behind 64 MiB: 1.2-3.1 ms
	 * against 0.24-0.39 ms), so it goes to them first. */
	if (shm_put_queued(w, c, s)) {
		tw_unlock(w);
		sched_yield();
		tw_lock(w);
	}
	return r;
}

/* ---- version 4: the express ring ------------------------------------------ */

/*
 * Whether a message of @len bytes to @c goes through its express ring
 * (mu held): a small one, once this direction switched to the rings,
 * while the connection takes new messages. Whoever holds the tx side
 * meanwhile, with a large message's parts perhaps, is not waited for.
 */
/* Whether @c's rings (@s, NULL: none) take a message of @len bytes from
 * a sender without the tx side (mu held): small, this direction switched
 * to them, the connection taking new messages. */
static bool small_open(const struct tcp_conn *c, const struct tcp_shm *s, size_t len)
{
	return s && s->tx_on && !s->side_gone && len <= TCP_SHM_XMAX && !c->dead &&
	       !c->retiring && !c->tx_shut;
}

bool tw_shm_express_ok(const struct tcp_conn *c, size_t len)
{
	const struct tcp_shm *s = tw_shm_of(c);

	return small_open(c, s, len) && s->x_on;
}

/*
 * Write @buf into @c's express ring as one record, its fence first: the
 * ring's position after the last message completed there, which the
 * receiver reads up to before it delivers this one, so a message sent
 * before ours began stays ahead of it, and one still going out in parts
 * does not hold it (WIRE.md, "The express ring"). mu held, dropped while
 * writing; @c counted in x_users by the caller, which keeps it and its
 * pair. 0; -EAGAIN: no room, or the peer closed, nothing written (the
 * caller sends the usual way, which waits or reports); or -EPROTO.
 */
int tw_shm_express(struct tcp_wire *w, struct tcp_conn *c, const void *buf, size_t len)
{
	TW_HELD(w);
	struct tcp_shm *s = tw_shm_of(c);
	bool wake = false;
	int r = -EAGAIN;

	tw_unlock(w);
	if (!zshm_tx_peer_closed(&s->tx)) {
		pthread_mutex_lock(&s->xmu);
		/* Under xmu: the fences go up with the records. */
		uint64_t fence = atomic_load_explicit(&s->bulk_done,
						      memory_order_acquire);
		r = zshm_send_tagged(&s->xtx, fence, buf, len, &wake);
		pthread_mutex_unlock(&s->xmu);
	}
	if (wake)
		tw_shm_wake(s);
	tw_lock(w);
	if (!r) {
		shm_sent(w, c, len);
		tw_touch(c, now_coarse_ms());
	} else if (r == -EPROTO) {
		r = w->host->fail(-EPROTO,
				  "%s: send to %s: the peer broke the shared-memory ring",
				  w->dom, c->raddr);
		tw_conn_kill(w, c, tw_close_why(r));
	}
	return r;
}

/*
 * A message of at most TCP_SHM_XMAX bytes to @c, whose tx side is free
 * (mu held, kept): into the ring at once, one whole record, if it fits
 * now; nothing else of the connection may be written meanwhile, since
 * every other writer of this ring holds the tx side, which needs mu.
 * Taking the tx side instead cost a second round of mu and the release's
 * work, for a copy of less than a microsecond: 64 B streaming made
 * 2.2-4.8 M msg/s that way against 3.2-5.2 M this way
 * (bench/MEASUREMENTS.md, "shm-direct"). A wake-up (the consumer sleeps:
 * low traffic) is sent under mu too. 0; -EAGAIN: not now, nothing
 * written (the caller takes the tx side the usual way, which waits for
 * room or says what is wrong). @now: now_coarse_ms(), the caller's.
 */
int tw_shm_direct(struct tcp_wire *w, struct tcp_conn *c, const void *buf, size_t len,
		  uint64_t now)
{
	TW_HELD(w);
	struct tcp_shm *s = tw_shm_of(c);
	bool wake;

	if (!small_open(c, s, len) || c->ver < 3 || c->big || zshm_tx_mid(&s->tx) ||
	    zshm_tx_peer_closed(&s->tx))
		return -EAGAIN;
	int r = zshm_send_whole(&s->tx, buf, len, &wake);
	if (r)
		return -EAGAIN; /* full, or broken: the usual way says so */
	bulk_done(s);
	if (wake)
		tw_shm_wake(s);
	shm_sent(w, c, len);
	tw_touch(c, now);
	return 0;
}

/* ---- the path's ops (tcp_path.h) ---------------------------------------- */

static bool shm_upgraded(const struct tcp_path *p)
{
	return tw_shm_path(p)->tx_ready;
}

/*
 * The path of this send (mu held, tx side owned). The acceptor's
 * direction waits for the dialer's confirmation, which may be here
 * already. Once this direction switched, only the ring: nothing may
 * follow TCP_T_SHM on the connection, even on one retired since we were
 * handed its tx side (its FIN waits for us, and the peer delivers what
 * the ring holds at its end). Not while a large message goes out in parts
 * on the connection: its next part must follow there; and a large one
 * (@big) chooses once, its parts all going where the first went.
 */
static struct tcp_path *shm_tx_pick(struct tcp_wire *w, struct tcp_conn *c,
				    struct tcp_path *p, bool big)
{
	TW_HELD(w);
	struct tcp_shm *s = tw_shm_path(p);

	if (!s->tx_ready)
		tw_shm_side(w, c);
	bool ring = s->tx_ready &&
		    (s->tx_on || (!c->retiring && (big || !c->big || c->big_path == p)));
	return ring ? p : &tw_path_sock;
}

/* A burst's frames into the ring, one record each; only the burst's
 * first frame waits for room, and the burst ends where the ring is full
 * (then no error: the caller's next send waits). */
static int shm_send(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
		    struct tcp_txreq *req, size_t k, bool first, struct tcp_waiter *me,
		    struct zap_ctx *ctx, bool *partial, size_t *whole, int *conn_err)
{
	struct tcp_shm *s = tw_shm_path(p);
	size_t n = 0;
	int err = 0;

	for (; n < k && ((first && !n) || tw_burst_goes_on(c)); n++) {
		err = shm_send1(w, c, s, &req[n], me, ctx, partial, first && !n);
		if (err)
			break;
	}
	if (n)
		shm_put_queued(w, c, s);
	*whole = n;
	*conn_err = err == -EAGAIN ? 0 : err;
	return err == -EAGAIN ? 0 : err;
}

static uint64_t shm_room(const struct tcp_path *p)
{
	return zshm_tx_room(&tw_shm_path(p)->tx);
}

/* A ring whose side channel ended is read by nobody (mu held). */
static bool shm_tx_lost(const struct tcp_path *p)
{
	return tw_shm_path(p)->side_gone;
}

static int shm_side_fd(const struct tcp_path *p)
{
	const struct tcp_shm *s = tw_shm_path(p);

	return s->sock >= 0 && !s->side_gone ? s->sock : -1;
}

/* The side channel was readable (mu held, the leader): wake-ups, or its
 * end; the peer gone, its ring is drained, then the connection ends. */
static bool shm_side_event(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p)
{
	struct tcp_shm *s = tw_shm_path(p);
	bool changed = tw_shm_side(w, c);

	if (s->side_gone && s->rx_on) {
		s->rx_gone = true;
		c->rx_ready = true;
	}
	return changed;
}

const struct tcp_path_ops tw_shm_ops = {
	.name = "shm",
	.stays_hot = true,
	.coalesce = false,
	.upgraded = shm_upgraded,
	.tx_pick = shm_tx_pick,
	.send = shm_send,
	.send_part = shm_send_part,
	.consumed = shm_consumed,
	.room = shm_room,
	.tx_lost = shm_tx_lost,
	.rx = tw_shm_rx,
	.rx_always = tw_shm_rx_always,
	.rx_pending = tw_shm_rx_pending,
	.rx_switch = tw_shm_rx_switch,
	.side_fd = shm_side_fd,
	.side_event = shm_side_event,
	.end = shm_end,
};
