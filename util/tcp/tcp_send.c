/* SPDX-License-Identifier: MIT */
/*
 * The wire's send path (tcp_wire.h: tcp_wire_send(), tcp_wire_send_burst()):
 * a route to the peer (dialing it first if need be), the connection's tx
 * side claimed, frames written (tcp_txq.c) or put into its ring
 * (tcp_shm.c), and version 3's large messages in parts.
 *
 * Shared state: struct tcp_wire (tcp_int.h, whose comment covers threads
 * and locking). Senders own a connection's tx side while c->tx_busy; they
 * wait through tw_wait_step().
 */
#include "tcp_int.h"
#include "zap-conn.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * Dial @peer for a sender (mu held, dropped during the dial): a
 * placeholder route makes concurrent senders to the same new address wait
 * for this dial instead of racing it.
 */
static int send_dial(struct tcp_wire *w, const char *peer, struct zap_ctx *ctx)
{
	TW_HELD(w);
	struct tcp_route *r = calloc(1, sizeof(*r));
	int err;

	if (!r)
		return -ENOMEM;
	/* Our own sends keep working at the descriptor limit: the
	 * connection idle the longest makes room. */
	if (w->nconns >= w->conn_max)
		tw_evict_idle(w, "descriptor limit reached, dialing a new peer");
	snprintf(r->addr, sizeof(r->addr), "%s", peer);
	r->dialing = true;
	tw_route_add(w, r);
	tw_unlock(w);
	err = tw_dial(w, peer, ctx);
	tw_lock(w);
	/* tw_conn_register() turned the placeholder into a route; on failure
	 * remove it. */
	r = tw_route_find(w, peer);
	if (r && r->dialing) {
		if (err)
			tw_route_del(w, r);
		else
			r->dialing = false;
	}
	tw_notify(w, true);
	return err;
}

/*
 * Dial @peer, whose route @r exists, to prove who listens there now
 * (struct tcp_route; mu held, dropped during the dial). The connection it
 * makes registers as any dial does: the instance that answers takes the
 * route. Senders to the address wait for it meanwhile. A failed dial is
 * the send's error: nobody we can reach listens there.
 */
static int send_verify(struct tcp_wire *w, struct tcp_route *r, const char *peer,
		       struct zap_ctx *ctx)
{
	TW_HELD(w);
	w->host->log(ZAP_LOG_DEBUG, w->dom, "%s: %s; dialing it to see who listens there",
		     peer,
		     r->contested ? "another instance claims the address"
				  : "the connection stalled with data unread");
	uint64_t was = r->peer ? r->peer->rid : 0;
	r->verifying = true;
	r->verify_ms = now_coarse_ms();
	tw_unlock(w);
	int err = tw_dial(w, peer, ctx);
	tw_lock(w);
	r = tw_route_find(w, peer);
	if (r) {
		r->verifying = false;
		if (!err && r->peer && r->peer->rid != was)
			w->host->log(ZAP_LOG_INFO, w->dom,
				     "%s: another instance listens there now (restarted); "
				     "sending to it",
				     peer);
	}
	tw_notify(w, true);
	return err;
}

/* The peer announced its limit: refuse here, before a byte is written, so
 * the connection and every message after this one are unaffected. */
static int send_too_big(struct tcp_wire *w, const struct tcp_conn *c, size_t len)
{
	return w->host->fail(-EMSGSIZE,
			     "%s: message of %zu bytes exceeds the maximum %" PRIu64
			     " that %s accepts (its ZAP_MAX_MSG_BYTES)",
			     w->dom, len, c->peer_max, c->raddr);
}

/*
 * Find (dial, or wait for) the connection to send to @peer on and take
 * its tx side (req->state TXQ_OWNER) or queue @req behind its owner
 * (TXQ_QUEUED), or, with @express (one small message), count it as a
 * writer of the express ring (TXQ_EXPRESS) or write it into the ring
 * under mu (TXQ_DONE) (mu held; dropped while dialing or waiting). 0
 * and *@out.
 */
static int send_claim(struct tcp_wire *w, const char *peer, struct tcp_waiter *me,
		      struct zap_ctx *ctx, struct tcp_txreq *req, bool express,
		      struct tcp_conn **out)
{
	TW_HELD(w);
	for (;;) {
		int err = tw_wait_check(w, me, ctx);
		if (err)
			return err;
		struct tcp_route *r = tw_route_find(w, peer);
		if (!r) {
			err = send_dial(w, peer, ctx);
			if (err)
				return err;
			continue;
		}
		if ((!r->dialing || r->peer) && !r->verifying) {
			r->dialing = false;
			struct tcp_conn *c = r->peer ? r->peer->tx : NULL;
			if (!c && !(r->peer && tw_peer_draining(w, r->peer))) {
				/* The peer's connections are gone: dial again. */
				tw_route_del(w, r);
				continue;
			}
			if (c && req->len > c->peer_max)
				return send_too_big(w, c, req->len);
			uint64_t now = now_coarse_ms();
			int state = c && !c->tx_busy ? tw_conn_check(w, c, now)
						     : TW_CONN_OK;
			if (state == TW_CONN_SHUT)
				continue;
			if ((r->contested || state == TW_CONN_STALLED) &&
			    now - r->verify_ms >= TCP_VERIFY_MS) {
				err = send_verify(w, r, peer, ctx);
				if (err)
					return err;
				continue;
			}
			/* A small message beside a large one (its part in
			 * progress, or its sender between two parts): the
			 * express ring, whose fence then stays before the
			 * large message. Into the ring itself, it moved the
			 * fence of the votes after it to its own place, past
			 * parts that reach a ring's length ahead of the
			 * reader (bench/MEASUREMENTS.md, "express-beside-big"). */
			if (c && (c->tx_busy || c->big) && express &&
			    tw_shm_express_ok(c, req->len)) {
				c->x_users++;
				req->state = TXQ_EXPRESS;
				*out = c;
				return 0;
			}
			/* ... or, its tx side free, straight into its ring. */
			if (c && !c->tx_busy && express &&
			    !tw_shm_direct(w, c, req->buf, req->len, now)) {
				req->state = TXQ_DONE;
				req->err = 0;
				req->done = TCP_HDR + req->len;
				*out = c;
				return 0;
			}
			if (c && !c->tx_busy) {
				c->tx_busy = true;
				req->state = TXQ_OWNER;
				*out = c;
				return 0;
			}
			/* Behind a busy owner: have it write our frame with its
			 * own (tcp_txq.c), if the frame is small. */
			if (c && tw_txq_join(w, c, req)) {
				*out = c;
				return 0;
			}
		}
		/*
		 * Wait: for the dial another sender is making, for the tx side
		 * of the connection, or for a retired connection to this peer
		 * still being read (e.g. after a send abandoned mid-frame) to
		 * close: frames we wrote there must reach the peer before any
		 * on a new connection, so dial only once it closed.
		 */
		err = tw_wait_step(w, me, ctx);
		if (err)
			return err;
	}
}

/* Give @c's tx side back after a frame (mu held): what a failure after
 * @done bytes does to the connection. */
static void send_release(struct tcp_wire *w, struct tcp_conn *c, int err, size_t done)
{
	TW_HELD(w);
	bool stopped = err == -ECANCELED || err == -ETIMEDOUT;

	/* TLS may hold an encrypted record of this frame: partly written. */
	if (c->tls_wpend && err && !done)
		done = 1;
	c->tx_busy = false;
	c->tx_used = true;
	tw_touch(c, now_coarse_ms());
	if (err && done && stopped && !c->dead) {
		/*
		 * A partial frame cannot be taken back, so no new frame may
		 * start on this connection. Closing it would discard what
		 * the peer sent us and not yet read, and (unread data) make
		 * the kernel reset it, so the peer would lose our earlier,
		 * complete frames still in flight. Instead retire it: FIN
		 * after the partial frame (the peer drops only that one),
		 * keep reading to the peer's FIN, then close.
		 */
		/* The caller's own ctx did this and gets the error: DEBUG. */
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "retiring connection to %s: send interrupted mid-frame (%s)",
			     c->raddr, strerror(-err));
		tw_retire(c);
		if (c->peer && c->peer->tx == c)
			tw_peer_pick_tx(w, c->peer);
		w->host->fail(err,
			      "%s: send to %s interrupted mid-frame; connection retired",
			      w->dom, c->raddr);
	} else if (err && done) {
		/* A partial frame cannot be taken back: the stream is lost. */
		/* Our own deadline or shutdown: the caller has the error. */
		w->host->log(stopped || err == -ESHUTDOWN ? ZAP_LOG_DEBUG : ZAP_LOG_WARN,
			     w->dom,
			     "dropping connection to %s: send interrupted mid-frame (%s)",
			     c->raddr, strerror(-err));
		tw_conn_kill(w, c, stopped ? ZAP_CLOSE_SEND_ABORTED : tw_close_why(err));
		if (stopped)
			w->host->fail(
				err,
				"%s: send to %s interrupted mid-frame; connection closed",
				w->dom, c->raddr);
	} else if (err && !stopped && err != -ESHUTDOWN) {
		tw_conn_kill(w, c, tw_close_why(err));
	}
	tw_conn_tx_done(w, c);
	tw_txq_handoff(w, c);
	if (!w->leader)
		tw_reap(w);
	else if (c->dead)
		tw_kick(w);
	tw_notify(w, true);
}

/* An express ring's writer is done with @c (mu held): what its owner's
 * release would do, if it was the last sender on it. */
static void express_done(struct tcp_wire *w, struct tcp_conn *c)
{
	TW_HELD(w);
	if (--c->x_users || c->tx_busy)
		return;
	tw_conn_tx_done(w, c);
	if (!w->leader)
		tw_reap(w);
	else if (c->dead)
		tw_kick(w);
}

/*
 * Check @msgs[0] and @peer, and put @peer in the form routes are keyed by
 * (*@peer may then point at @norm). 0, or the error for the whole send.
 */
static int send_check(struct tcp_wire *w, const char **peer, const struct zap_iov *msgs,
		      char norm[ZAP_PEER_MAX])
{
	if (msgs[0].len > w->max_msg)
		return w->host
			->fail(-EMSGSIZE,
			       "%s: message of %zu bytes exceeds the maximum %" PRIu64
			       " (ZAP_MAX_MSG_BYTES)",
			       w->dom, msgs[0].len, w->max_msg);
	/* "host:port#sha256:<hex>" normalised (zap-conn.h) so that it finds
	 * the route a received message's peer string names; one that is
	 * its own normal form is used as given, without the copy (a tenth of a
	 * 64 B send's instructions; bench/MEASUREMENTS.md, "recv-tls"). */
	if (zconn_peer_plain(*peer, ZAP_PEER_MAX))
		return 0;
	char why[ZAP_PEER_MAX + 96];
	int r = zconn_peer_norm(*peer, w->tls != NULL, norm, ZAP_PEER_MAX, why,
				sizeof(why));
	if (r)
		return w->host->fail(r, "%s: %s", w->dom, why);
	*peer = norm;
	return 0;
}

/* A DATA frame for @m; its version byte is the connection's, set when
 * the frame is queued or written (tcp_txq.c). */
static void req_set(struct tcp_txreq *r, const struct zap_iov *m)
{
	*r = (struct tcp_txreq){ .buf = m->buf, .len = m->len };
	tw_hdr_put(r->hdr, TCP_VERSION, TCP_T_DATA, m->len);
}

/* ---- version 3: a large message in parts (WIRE.md, "Large messages") ---- */

/* Hand @c's large-message turn to the next sender in line (mu held). */
static void big_next(struct tcp_wire *w, struct tcp_conn *c)
{
	TW_HELD(w);
	c->big = c->bigq;
	c->big_path = NULL;
	if (c->bigq)
		c->bigq = c->bigq->next;
	tw_notify(w, true);
}

/* Leave the line (mu held); a turn handed to us meanwhile goes on. */
static void big_leave(struct tcp_wire *w, struct tcp_conn *c, struct tcp_bigwait *me)
{
	TW_HELD(w);
	if (c->big == me) {
		big_next(w, c);
		return;
	}
	for (struct tcp_bigwait **pp = &c->bigq; *pp; pp = &(*pp)->next)
		if (*pp == me) {
			*pp = me->next;
			return;
		}
}

/* Whether @c still takes a message's parts: a part may follow another only
 * on the connection the first went on, which must stay up. */
static bool big_usable(const struct tcp_conn *c)
{
	return !c->dead && !c->tx_shut;
}

/* Take @c's tx side again between two parts (mu held). */
static int big_take_tx(struct tcp_wire *w, struct tcp_conn *c, struct tcp_waiter *me,
		       struct zap_ctx *ctx)
{
	TW_HELD(w);
	for (;;) {
		/* A path nobody reads any more (a ring whose side channel
		 * ended) takes no more parts. */
		if (!big_usable(c) ||
		    (c->big_path && c->big_path->ops->tx_lost(c->big_path)))
			return w->host->fail(-ECONNRESET, "%s: connection to %s was lost",
					     w->dom, c->raddr);
		if (!c->tx_busy) {
			c->tx_busy = true;
			return 0;
		}
		int err = tw_wait_step(w, me, ctx);
		if (err)
			return err;
	}
}

/*
 * send_big()'s turn among the large messages of @c (mu held): behind
 * those queued before it (c->bigq), the tx side given up while it waits,
 * then taken again. A step of its own so that send_big() reads as the
 * parts' loop. 0 with @line in c->big, or 0 with *@again when the
 * connection stopped being the peer's tx (the caller routes again), or an
 * error; @line has left the queue unless it is c->big.
 */
static int big_line_up(struct tcp_wire *w, struct tcp_conn *c, struct tcp_bigwait *line,
		       struct tcp_waiter *me, struct zap_ctx *ctx, bool *again)
{
	int err = 0;

	if (!c->big && !c->bigq) {
		c->big = line;
		return 0;
	}
	struct tcp_bigwait **pp = &c->bigq;
	while (*pp)
		pp = &(*pp)->next;
	*pp = line;
	send_release(w, c, 0, 0);
	while (c->big != line && !err) {
		if (!big_usable(c) || c->retiring || !c->peer || c->peer->tx != c) {
			big_leave(w, c, line);
			*again = true;
			return 0;
		}
		err = tw_wait_step(w, me, ctx);
	}
	if (!err)
		err = big_take_tx(w, c, me, ctx);
	if (err)
		big_leave(w, c, line);
	return err;
}

/*
 * send_big() stopped between two parts with @err, the tx side not ours
 * (mu held): @line leaves, and if the peer holds part of the message
 * (@open) the connection is retired, as a send stopped mid-frame does,
 * since no other large message may start there. A step of its own so
 * that send_big() reads as the parts' loop. Returns the error to report.
 */
static int big_interrupted(struct tcp_wire *w, struct tcp_conn *c,
			   struct tcp_bigwait *line, bool open, int err)
{
	big_leave(w, c, line);
	if (open && !c->dead) {
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "retiring connection to %s: send interrupted "
			     "between two parts (%s)",
			     c->raddr, strerror(-err));
		tw_retire(c);
		if (c->peer && c->peer->tx == c)
			tw_peer_pick_tx(w, c->peer);
		err = w->host->fail(err,
				    "%s: send to %s interrupted mid-message; "
				    "connection retired",
				    w->dom, c->raddr);
	}
	if (!w->leader)
		tw_reap(w);
	return err;
}

/* When this thread last let others run between two parts: kept from one
 * message to the next, since a stream of 1 MiB messages (4 parts, 45 us
 * each over the ring) never ran TCP_BIG_RUN_NS within one, and a vote's
 * thread woken meanwhile waited for the end of the stream's time slice
 * (the echo's p99 behind 1 MiB: 2.6-3.3 ms, "big-yield-across"). */
static _Thread_local uint64_t big_ran_from;

/*
 * Between two parts of a large message (mu held, dropped around it): after
 * TCP_BIG_RUN_NS of copying parts without a break, let a thread waiting
 * for this core run first. The thread that sends a vote beside a block,
 * or waits for its answer, shares a core with this one on a small host,
 * and the scheduler lets a running thread finish its slice (up to a tick,
 * 4 ms at HZ=250) before the thread it woke: that was the 64 B round
 * trip's p99 behind 64 MiB messages (bench/MEASUREMENTS.md, "big-yield").
 * At once, after each (short) part, when a spinning leader of ours gave
 * its core away (tw_core_wanted): the thread waiting for the vote's
 * answer, which otherwise waited for the copy of up to 1 MiB
 * ("tcp-short-parts"). One system call per TCP_BIG_RUN_NS when nobody
 * waits.
 */
static void big_yield(struct tcp_wire *w)
{
	uint64_t now = now_ns();

	if (!big_ran_from)
		big_ran_from = now;
	if (now - big_ran_from < TCP_BIG_RUN_NS &&
	    !(atomic_load_explicit(&tw_core_wanted, memory_order_relaxed) &&
	      atomic_exchange_explicit(&tw_core_wanted, false, memory_order_relaxed)))
		return;
	tw_unlock(w);
	sched_yield();
	tw_lock(w);
	big_ran_from = now_ns();
}

/*
 * Send @m, above TCP_SOLO_MAX, on the version-3 connection @c, whose tx
 * side we own (mu held; dropped while writing and waiting), in parts of
 * TCP_PART bytes, giving the tx side back between two parts so that other
 * senders' messages go in between; one large message at a time per
 * connection, the senders of others in line (FIFO) meanwhile. Returns 0 or
 * an error; *@written: whether any of it went out (then no retry), and
 * *@again: the connection could not take it before any byte went (claim
 * afresh). The tx side is given back in every case.
 */
static int send_big(struct tcp_wire *w, struct tcp_conn *c, const struct zap_iov *m,
		    struct tcp_waiter *me, struct zap_ctx *ctx, size_t *written,
		    bool *again)
{
	TW_HELD(w);
	struct tcp_bigwait line = { 0 };
	struct tcp_path *p = atomic_load(&c->path);
	size_t off = 0;
	bool open = false; /* part of it went, the rest not yet */
	int err = 0;

	*written = 0;
	*again = false;
	err = big_line_up(w, c, &line, me, ctx, again);
	if (err || *again)
		return err;
	/* The path is chosen once: parts after one on the connection stay
	 * there, so it may not switch to the ring meanwhile (send_owned()). */
	struct tcp_path *tx = tw_tx_pick(w, c, p, true);
	c->big_path = tx;
	for (;;) {
		bool partial = false;
		uint64_t seen = 0;
		err = tx->ops->send_part(w, c, tx, m, &off, me, ctx, &open, &partial,
					 &seen);
		if (err && err != -EINPROGRESS && err != -EAGAIN) {
			*written = open || partial;
			big_leave(w, c, &line);
			send_release(w, c, err, *written);
			return err;
		}
		if (!err)
			break;
		/* Between two parts, or waiting for room on the path: the tx
		 * side is the other senders' meanwhile. */
		send_release(w, c, 0, 0);
		if (err == -EAGAIN && tx->ops->consumed(tx) == seen) {
			err = tw_wait_step(w, me, ctx);
		} else {
			big_yield(w);
			err = 0;
		}
		if (!err)
			err = big_take_tx(w, c, me, ctx);
		if (err) {
			*written = open;
			return big_interrupted(w, c, &line, open, err);
		}
	}
	*written = 1;
	/* Counted whole, here (batch_finish() counts DATA frames only). */
	c->tx_msgs++;
	c->tx_bytes += m->len;
	big_leave(w, c, &line);
	send_release(w, c, 0, 0);
	return 0;
}

/*
 * Write @msgs[0..@n-1] on @c, whose tx side we own, @req[0] already set
 * for @msgs[0] (mu held; dropped while writing), and give the tx side
 * back. A burst goes TCP_TXQ_BATCH + 1 frames per system call, or frame
 * by frame into the ring, and stops, not waiting, where the next frame
 * finds no room, does not fit the peer's limit, or the connection fails.
 * *@taken: messages handed over whole. Returns @msgs[0]'s result;
 * *@written: bytes of it written.
 */
static int send_owned(struct tcp_wire *w, struct tcp_conn *c,
		      struct tcp_txreq req[TCP_TXQ_BATCH + 1], const struct zap_iov *msgs,
		      size_t n, struct tcp_waiter *me, struct zap_ctx *ctx, size_t *taken,
		      size_t *written)
{
	TW_HELD(w);
	struct tcp_path *p = atomic_load(&c->path);
	bool partial = false;
	int err = 0, first = 0, conn_err = 0;
	size_t done = 0;

	/* The ring or the connection, chosen once for the burst. */
	struct tcp_path *tx = tw_tx_pick(w, c, p, false);
	*written = 0;
	while (done < n && (!done || tw_burst_goes_on(c))) {
		size_t k = done ? 0 : 1, whole = 0;
		while (k < TCP_TXQ_BATCH + 1 && done + k < n &&
		       msgs[done + k].len <= c->peer_max) {
			req_set(&req[k], &msgs[done + k]);
			k++;
		}
		if (!k)
			break; /* too large for the peer: the next call says so */
		/* Only the first batch waits for room to start; a full path
		 * ends the burst there. */
		err = tx->ops->send(w, c, tx, req, k, !done, me, ctx, &partial, &whole,
				    &conn_err);
		if (!done) {
			first = whole ? 0 : err;
			*written = req[0].done;
		}
		done += whole;
		if (whole < k || err || partial)
			break;
	}
	send_release(w, c, conn_err, partial);
	*taken = done;
	return first;
}

/*
 * zap_send_burst() semantics over zap_send()'s: the count taken, or an
 * error when none was.
 */
static int send_msgs(struct tcp_wire *w, const char *peer, const struct zap_iov *msgs,
		     size_t n, struct zap_ctx *ctx)
{
	struct tcp_waiter me = { .tx = true, .ctx_fd = -1, .out_fd = -1 };
	char norm[ZAP_PEER_MAX];
	int err = send_check(w, &peer, msgs, norm);

	if (err)
		return err;
	/* Later messages above our own limit end the burst before them. */
	if (n > TCP_BURST_MAX)
		n = TCP_BURST_MAX;
	/* ... and so do large ones (version 3 sends each in parts). */
	for (size_t i = 1; i < n; i++)
		if (msgs[i].len > w->max_msg || msgs[i].len > TCP_SOLO_MAX)
			n = i;
	/* One small message: the express ring, or the ring under mu, where
	 * the connection has them. */
	bool express = n == 1;
	tw_lock(w);
	for (int attempt = 0;;) {
		struct tcp_txreq req[TCP_TXQ_BATCH + 1];
		struct tcp_conn *c = NULL;
		size_t taken = 0, written = 0;

		req_set(&req[0], &msgs[0]);
		err = send_claim(w, peer, &me, ctx, &req[0], express, &c);
		if (!err && req[0].state == TXQ_EXPRESS) {
			err = tw_shm_express(w, c, msgs[0].buf, msgs[0].len);
			express_done(w, c);
			if (err == -EAGAIN) {
				express = false; /* no room: in line for the tx side */
				continue;
			}
			if (!err) {
				err = 1;
				break;
			}
		}
		if (!err && req[0].state == TXQ_QUEUED)
			err = tw_txq_wait(w, c, &req[0], &me, ctx);
		if (err)
			break;
		if (req[0].state == TXQ_AGAIN)
			continue; /* nothing written: claim afresh */
		if (req[0].state == TXQ_OWNER && c->ver >= 3 &&
		    msgs[0].len > TCP_SOLO_MAX) {
			bool again;
			err = send_big(w, c, &msgs[0], &me, ctx, &written, &again);
			if (again)
				continue; /* nothing written: claim afresh */
			taken = !err;
		} else if (req[0].state == TXQ_OWNER) {
			err = send_owned(w, c, req, msgs, n, &me, ctx, &taken, &written);
		} else if ((err = req[0].err)) {
			/* Another sender wrote (or failed to write) our frame and
			 * logged why; the reason is ours to give. */
			err = w->host->fail(err, "%s: send to %s: %s", w->dom, peer,
					    strerror(-err));
			written = req[0].done;
		} else {
			taken = 1; /* queued behind another sender: one, done */
		}
		if (taken) {
			err = (int)taken;
			break;
		}
		/*
		 * A connection that was stale (its peer had gone, and may be
		 * back, restarted at the same address, before we read its FIN
		 * or reset) fails before any byte of the frame is written, so
		 * the frame cannot arrive twice: send it once more, on a
		 * fresh connection.
		 */
		if (written || attempt++ || (err != -EPIPE && err != -ECONNRESET))
			break;
	}
	tw_unlock(w);
	return err;
}

int tcp_wire_send(struct tcp_wire *w, const char *peer, const void *buf, size_t len,
		  struct zap_ctx *ctx)
{
	const struct zap_iov m = { buf, len };
	int r = send_msgs(w, peer, &m, 1, ctx);

	return r > 0 ? 0 : r;
}

int tcp_wire_send_burst(struct tcp_wire *w, const char *peer, const struct zap_iov *msgs,
			size_t n, struct zap_ctx *ctx)
{
	return n ? send_msgs(w, peer, msgs, n > INT_MAX ? INT_MAX : n, ctx) : 0;
}
