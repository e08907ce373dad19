/* SPDX-License-Identifier: MIT */
/*
 * Leader/follower progress: the leader's poll set and round (tcp_rx.c
 * reads the connections), the message queue, and waiting.
 *
 * Shared state: w->leader, w->lead, the waiter list and the queue are
 * under w->mu; the poll set (w->pfd, w->slot) and each connection's
 * receive state (rbuf, rx_msg, rx_res...) belong to the leader, which
 * reads sockets with w->mu released (tcp_int.h has the whole picture).
 */
#include "tcp_int.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Leader / follower progress                                                */
/* ------------------------------------------------------------------------ */

static bool waiter_live(const struct tcp_wire *w, const struct tcp_waiter *me)
{
	for (const struct tcp_waiter *x = w->waiters; x; x = x->next)
		if (x == me)
			return true;
	return false;
}

static void waiter_del(struct tcp_wire *w, struct tcp_waiter *me)
{
	for (struct tcp_waiter **pp = &w->waiters; *pp; pp = &(*pp)->next)
		if (*pp == me) {
			*pp = me->next;
			w->nwaiters--;
			return;
		}
}

static int pollset_reserve(struct tcp_wire *w, size_t n)
{
	if (n <= w->pcap)
		return 0;
	size_t nc = n * 2;
	struct pollfd *p = realloc(w->pfd, nc * sizeof(*p));
	if (p)
		w->pfd = p;
	struct tcp_slot *s = realloc(w->slot, nc * sizeof(*s));
	if (s)
		w->slot = s;
	if (!p || !s)
		return -ENOMEM;
	w->pcap = nc;
	return 0;
}

/*
 * poll(pfd, n, timeout), except that the leader may first busy-poll the
 * same set for a while (tcp_spin.c decides how long). The set holds the
 * kick and stop eventfds, every waiter's ctx fd and POLLOUT interest and
 * every connection, so a message, a kick, a cancel or zap_close() ends the
 * spin at the next round, exactly as it would end the blocking poll();
 * shutdown and the ctx (its deadline has no fd) are also checked between
 * rounds.
 *
 * @spin false: block at once. A leader that is a sender waiting for room
 * on a full socket does not spin: its wait is bandwidth-bound, and when it
 * spun, it refilled the socket in small slivers as soon as any room
 * appeared, and streaming between two spinning endpoints fell below
 * never spinning at all (bench/MEASUREMENTS.md, "spin-poll").
 *
 * A poll(…, 0) round picks a message up as fast as a non-blocking read()
 * loop on the connection, and faster than epoll_wait(…, 0) followed by
 * the read (bench/spin_methods.c); it needs no second fd set and covers
 * every fd each round, so it is what spinning uses.
 */
struct spin_stop {
	struct tcp_wire *w;
	struct zap_ctx *ctx;
	size_t first, n; /* the connections' slots */
};

/*
 * Whether the leader has work without any descriptor being ready (the
 * spin's and the sleep's check): shutdown or the ctx (tw_wait_check() in
 * the caller reports either), or a message on a path read every round (a
 * ring: the rx_pending op). @sleeping: about to sleep, so announce it on
 * every such path, and its producer wakes us through the side channel,
 * which is in the poll set.
 */
static bool leader_ready(void *arg, bool sleeping)
{
	struct spin_stop *st = arg;
	struct tcp_wire *w = st->w;
	bool ready = false;

	if (atomic_load(&w->shut) || w->host->ctx_err(st->ctx))
		return true;
	/* About to sleep: no longer spinning, then the last look at kicks
	 * (tw_kick(), the other half). */
	if (sleeping)
		atomic_store(&w->lead_spins, false);
	if (atomic_load(&w->kick_due))
		return true;
	/* A sender leading while it waits for room on its path. */
	struct tcp_waiter *me = w->lead;
	if (me && me->room && me->room->ops->room(me->room) > me->room_had)
		return true;
	if (!w->lead_rings)
		return false;
	for (size_t i = st->first; i < st->n && !ready; i++) {
		if (w->slot[i].kind != SLOT_CONN)
			continue;
		struct tcp_path *p = atomic_load(
			&((struct tcp_conn *)w->slot[i].p)->path);
		ready = p->ops->rx_pending(p, sleeping);
	}
	return ready;
}

static int wire_poll(struct tcp_wire *w, size_t first, size_t n, int timeout, bool spin,
		     struct zap_ctx *ctx)
{
	struct spin_stop st = { w, ctx, first, n };

	if (spin) {
		atomic_store(&w->lead_spins, true);
		int r = tw_spin_poll(&w->spin, w->pfd, n, timeout, leader_ready, &st,
				     w->lead_rings > 0 || (w->lead && w->lead->room));
		atomic_store(&w->lead_spins, false);
		return r;
	}
	if (timeout != 0 && w->lead_rings && leader_ready(&st, true))
		timeout = 0;
	return poll(w->pfd, n, timeout);
}

static void pollset_add(struct tcp_wire *w, size_t *n, int fd, short events, int kind,
			void *p)
{
	w->pfd[*n] = (struct pollfd){ .fd = fd, .events = events };
	w->slot[(*n)++] = (struct tcp_slot){ kind, p };
}

/* The eventfds, the ctx, our own and the followers' fds. Returns n. */
static size_t pollset_fixed(struct tcp_wire *w, struct tcp_waiter *me, int cfd)
{
	size_t n = 0;

	pollset_add(w, &n, w->kick_fd, POLLIN, SLOT_KICK, NULL);
	pollset_add(w, &n, w->stop_fd, POLLIN, SLOT_STOP, NULL);
	if (cfd >= 0)
		pollset_add(w, &n, cfd, POLLIN, SLOT_CTX, NULL);
	if (me->out_fd >= 0)
		pollset_add(w, &n, me->out_fd, POLLOUT, SLOT_OUT, NULL);
	for (struct tcp_waiter *x = w->waiters; x; x = x->next) {
		if (x->ctx_fd >= 0 && !x->ctx_fired)
			pollset_add(w, &n, x->ctx_fd, POLLIN, SLOT_WCTX, x);
		if (x->out_fd >= 0 && !x->out_ready)
			pollset_add(w, &n, x->out_fd, POLLOUT, SLOT_WOUT, x);
	}
	return n;
}

/*
 * pollset_conns()'s clocks over the hot connections: a stalled one is
 * closed, the others' stall deadlines bound *@timeout, and the oldest
 * partial message (w->oldest) is found and, if the budget paused it,
 * resumed. A step of its own to keep pollset_conns() short.
 */
static void pollset_clocks(struct tcp_wire *w, uint64_t now, int *timeout)
{
	uint64_t oldest = UINT64_MAX;

	/* Only hot connections can have work without epoll saying so: a
	 * partial frame, a paused allocation, a ring keep one hot. */
	for (struct tcp_conn *c = w->hot, *next; c; c = next) {
		next = c->hnext;
		if (c->dead || (tw_conn_may_cool(w, c, now) && !tw_conn_held(w, c) &&
				tw_conn_cool(w, c)))
			continue;
		if (c->rx_eof || !c->rx_since_ms)
			continue;
		if (w->q_full || c->alloc_wait || tw_conn_held(w, c)) {
			/* Not read by our choice: its clock does not run. */
			c->rx_since_ms = now;
		} else if (now - c->rx_since_ms >= w->stall_ms) {
			if (c->rx_msg)
				w->host->log(
					ZAP_LOG_WARN, w->dom,
					"dropping connection to %s (from %s): its open message (%zu of %zu bytes) made no progress for %u ms at ZAP_TCP_MIN_RATE (%llu bytes/s)",
					c->raddr, c->src, c->rx_off, c->rx_len,
					w->stall_ms, (unsigned long long)w->min_rate);
			else
				w->host->log(
					ZAP_LOG_WARN, w->dom,
					"dropping connection to %s (from %s): a partial frame made no progress for %u ms",
					c->raddr, c->src, w->stall_ms);
			tw_conn_kill(w, c, ZAP_CLOSE_STALL);
			continue;
		} else {
			*timeout = ms_min(*timeout,
					  (int)(c->rx_since_ms + w->stall_ms - now));
		}
		if (c->rx_msg && c->rx_start < oldest) {
			oldest = c->rx_start;
			w->oldest = c;
		}
	}
	if (w->oldest && w->oldest->budget_paused) {
		/* The oldest partial message may always grow: resume it (it
		 * may have become the oldest when an older one was dropped). */
		w->oldest->alloc_wait = false;
		w->oldest->budget_paused = false;
		w->oldest->rx_ready = true;
	}
}

/*
 * The connections to read, from slot @n on: a connection that may have
 * buffered data (or whose allocation is to be retried) as an rx_ready slot
 * without an fd if it is not polled anyway, and then *@timeout is 0. A
 * connection paused by an -EAGAIN allocation is neither polled nor read
 * until a kick resumes it (resume_paused()). Returns the new n.
 */
static size_t pollset_conns(struct tcp_wire *w, size_t n, int *timeout)
{
	size_t first = n;
	uint64_t now = now_coarse_ms();

	/* The application is not taking messages: read nothing, so that
	 * TCP pushes back on the senders. A recv that drains kicks. */
	w->q_full = tw_rxq_full(w);
	w->oldest = NULL;
	tw_idle_scan(w, now);
	if (w->next_idle_ms != UINT64_MAX)
		*timeout = ms_min(*timeout, w->next_idle_ms > now
						    ? (int)(w->next_idle_ms - now)
						    : 0);
	pollset_clocks(w, now, timeout);
	/* Side channels: wake-ups for our senders too, so also while the
	 * connection is not read (its end seen, paused, the queue full). */
	for (struct tcp_conn *c = w->hot; c; c = c->hnext) {
		struct tcp_path *p = atomic_load(&c->path);
		int fd = c->dead ? -1 : p->ops->side_fd(p);
		if (fd >= 0)
			pollset_add(w, &n, fd, POLLIN, SLOT_SIDE, c);
	}
	w->lead_rings = 0;
	if (w->q_full)
		return n;
	/* The cold connections, all behind one descriptor. */
	pollset_add(w, &n, w->epfd, POLLIN, SLOT_EPOLL, NULL);
	for (struct tcp_conn *c = w->hot; c; c = c->hnext) {
		if (c->rx_eof || c->dead || c->alloc_wait)
			continue;
		if (tw_conn_held(w, c))
			continue;
		if (c->rx_ready)
			*timeout = 0;
		c->rx_res = 0;
		pollset_add(w, &n, c->fd, POLLIN, SLOT_CONN, c);
		struct tcp_path *p = atomic_load(&c->path);
		if (p->ops->rx_always(p))
			w->lead_rings++;
	}
	for (struct tcp_conn *c = w->hot; c; c = c->hnext) {
		if (!c->rx_ready || c->rx_eof || c->dead || c->alloc_wait ||
		    tw_conn_held(w, c))
			continue;
		bool listed = false;
		for (size_t i = first; i < n; i++)
			if (w->slot[i].kind == SLOT_CONN && w->slot[i].p == c)
				listed = true;
		if (!listed) {
			c->rx_res = 0;
			pollset_add(w, &n, -1, 0, SLOT_CONN, c);
		}
	}
	return n;
}

/* A connection's read result, as the leader applies it (mu held).
 * Whether anything a waiter may wait for changed. */
static bool conn_rx_result(struct tcp_wire *w, struct tcp_conn *c)
{
	bool changed = false;

	if (c->rx_res == RX_EOF || c->rx_res == RX_EOF_PARTIAL) {
		/* A clean FIN mid-frame is what a peer whose own deadline or
		 * close cut its send short does (its caller got the error),
		 * and what a peer process that exits does: ordinary, so INFO.
		 * Resets and protocol errors below stay WARN. */
		if (c->rx_res == RX_EOF_PARTIAL)
			w->host->log(ZAP_LOG_INFO, w->dom,
				     "dropping a partial message from %s: %s", c->raddr,
				     c->rx_why);
		else
			w->host->log(ZAP_LOG_DEBUG, w->dom, "%s closed the connection",
				     c->raddr);
		/* Everything was read. Close now (a clean FIN: the peer
		 * still reads what we queued before), or, if a frame of ours
		 * is still going out, right after it: see tw_conn_rx_done(). */
		tw_conn_rx_done(w, c);
		changed = true;
	} else if (c->rx_res < 0) {
		w->host->log(ZAP_LOG_WARN, w->dom, "dropping connection to %s: %s",
			     c->raddr, c->rx_why);
		tw_conn_kill(w, c, tw_close_why(c->rx_res));
		changed = true;
	}
	c->rx_res = 0;
	return changed;
}

/*
 * The kick fired (mu held): memory may be free again, so every connection
 * paused by an -EAGAIN allocation retries in the next round. The kick was
 * drained after this round's reads, so a release that came after a failed
 * allocation either is seen here or left the eventfd readable for the
 * next poll: no wake-up is lost, and nothing polls on a timer.
 */
static void resume_paused(struct tcp_wire *w)
{
	/* Paused connections were being read, so they are hot. */
	for (struct tcp_conn *c = w->hot; c; c = c->hnext)
		if (c->alloc_wait) {
			c->alloc_wait = false;
			c->budget_paused = false;
			c->rx_ready = true;
		}
}

/*
 * The cold connections epoll has ready, at most TCP_EPOLL_BATCH (the
 * rest stay ready for the next round): kept in w->woke for
 * leader_apply(), which heats them under mu. Leader, mu released; a
 * pointer from epoll stays valid to the end of the round (tcp_ready.c).
 */
static void epoll_take(struct tcp_wire *w)
{
	struct epoll_event ev[TCP_EPOLL_BATCH];
	int k = epoll_wait(w->epfd, ev, TCP_EPOLL_BATCH, 0);

	w->nwoke = 0;
	for (int i = 0; i < k; i++)
		w->woke[w->nwoke++] = ev[i].data.ptr;
}

/* Apply what the poll round saw (mu held). Whether anything changed. */
static bool leader_apply(struct tcp_wire *w, struct tcp_waiter *me, size_t n)
{
	bool changed = false;

	for (size_t i = 0; i < n; i++) {
		short re = w->pfd[i].revents;
		struct tcp_slot *s = &w->slot[i];

		switch (s->kind) {
		case SLOT_KICK: {
			/* Through the eventfd, or seen while spinning. A load
			 * first: the exchange, a locked instruction, only when
			 * there is a kick to take, not every round. */
			bool due = atomic_load(&w->kick_due) &&
				   atomic_exchange(&w->kick_due, false);
			if ((due || re) && !atomic_load(&w->shut)) {
				uint64_t v;
				ssize_t k = re ? read(w->kick_fd, &v, sizeof(v)) : 0;
				(void)k;
				resume_paused(w);
			}
			break;
		}
		case SLOT_OUT:
			if (re)
				me->out_ready = true;
			break;
		case SLOT_WCTX:
		case SLOT_WOUT:
			if (re && waiter_live(w, s->p)) {
				struct tcp_waiter *x = s->p;
				if (s->kind == SLOT_WCTX)
					x->ctx_fired = true;
				else
					x->out_ready = true;
				changed = true;
			}
			break;
		case SLOT_CONN:
			changed |= conn_rx_result(w, s->p);
			break;
		case SLOT_EPOLL:
			/* Cold connections epoll found readable: hot from now
			 * on, read in the next round, which does not wait. */
			for (size_t k = 0; k < w->nwoke; k++) {
				struct tcp_conn *c = w->woke[k];
				if (c->dead || c->hot)
					continue;
				tw_conn_heat(w, c);
				c->rx_ready = true;
				changed = true;
			}
			w->nwoke = 0;
			break;
		case SLOT_SIDE:
			if (re) {
				struct tcp_conn *c = s->p;
				struct tcp_path *p = atomic_load(&c->path);
				changed |= p->ops->side_event(w, c, p);
			}
			break;
		default:
			break;
		}
	}
	return changed;
}

/* Append the messages read this round to the queue (mu held). */
static void queue_append(struct tcp_wire *w, struct tcp_rx_msg *mhead)
{
	if (w->qtail)
		w->qtail->next = mhead;
	else
		w->qhead = mhead;
	struct tcp_rx_msg *t = mhead;
	w->qbytes += t->msg.len;
	w->qmsgs++;
	while (t->next) {
		t = t->next;
		w->qbytes += t->msg.len;
		w->qmsgs++;
	}
	w->qtail = t;
}

/*
 * One round as leader: poll everything, read what is ready, queue the
 * messages. Called and returns with w->mu held; drops it around poll and
 * reads. @me->out_fd is our own POLLOUT interest (or -1).
 */
static int leader_round(struct tcp_wire *w, struct tcp_waiter *me, struct zap_ctx *ctx)
{
	int timeout = w->host->ctx_timeout_ms(ctx);
	struct tcp_rx_msg *mhead = NULL, **mtail = &mhead;
	size_t n, want = 4, first_conn;
	int err = 0;

	tw_reap(w);
	want += 2 * w->nhot; /* a hot connection, and its side channel if any */
	want += 2u * w->nwaiters;
	if (pollset_reserve(w, want))
		return -ENOMEM;
	first_conn = pollset_fixed(w, me, w->host->ctx_fd(ctx));
	n = pollset_conns(w, first_conn, &timeout);
	/* It closed connections (idle, stalled): free them at the end of
	 * this round, not after a poll that may wait for ever. */
	if (w->reap_due)
		timeout = 0;

	tw_unlock(w);
	if (wire_poll(w, first_conn, n, timeout, me->out_fd < 0, ctx) < 0 &&
	    errno != EINTR)
		err = -errno;
	uint64_t now = now_coarse_ms();
	for (size_t i = first_conn; i < n; i++) {
		if (w->slot[i].kind == SLOT_EPOLL && w->pfd[i].revents)
			epoll_take(w);
		if (w->slot[i].kind != SLOT_CONN)
			continue;
		struct tcp_conn *c = w->slot[i].p;
		struct tcp_path *p = atomic_load(&c->path);
		/* A ring is read every round: a load tells it is empty. */
		if (w->pfd[i].revents || c->rx_ready || p->ops->rx_always(p)) {
			c->rx_res = tw_conn_rx(w, c, &mtail, now, w->pfd[i].revents != 0);
			/* TLS may hold decrypted bytes poll() cannot see. */
			if (!c->rx_res && c->tls && !c->rx_ready && tw_io_pending(c))
				c->rx_ready = true;
		}
	}
	tw_lock(w);

	bool changed = leader_apply(w, me, n);
	if (mhead) {
		queue_append(w, mhead);
		changed = true;
	}
	/* Close what died now (a stalled or broken peer), not at the next
	 * round, which may be long in coming. */
	if (w->reap_due)
		tw_reap(w);
	if (changed)
		tw_wake_all(w);
	return err;
}

int tw_wait_check(struct tcp_wire *w, struct tcp_waiter *me, struct zap_ctx *ctx)
{
	TW_HELD(w);
	if (atomic_load(&w->shut))
		return -ESHUTDOWN;
	int e = w->host->ctx_err(ctx);
	if (e)
		return e;
	(void)me;
	return 0;
}

/* A sender leads: it waits for room on its path (mu held). */
static bool sender_leads(const struct tcp_wire *w)
{
	return w->lead && w->lead->tx;
}

/*
 * A receiver's wait as a follower while a sender of this process leads,
 * waiting for room on its path (mu held, @me on the waiter list):
 * yield the core, asking for it back (tw_core_wanted: the stream yields
 * at its next record), and look again, until a message is queued, the
 * lead is free, or TCP_FOLLOW_YIELD_NS have passed; one receiver at a
 * time, the others sleep. True: stop waiting.
 *
 * Why: behind a stream over a ring, three threads are busy on two cores
 * and nobody spins; a receiver that slept here was woken when the
 * stream's round ended (a wake-up costs this VM 4-6 us, at any priority),
 * took the lead and slept again in poll() for its message's datagram: the
 * 64 B echo's way back was 11-15 us against 0-1 us idle
 * (bench/MEASUREMENTS.md, "shm-way-back-wakes").
 */
static bool follow_by_yielding(struct tcp_wire *w, struct tcp_waiter *me,
			       struct zap_ctx *ctx)
{
	TW_HELD(w);
	bool done = false;

	if (me->tx || w->follow_yielding || !sender_leads(w))
		return false;
	w->follow_yielding = true;
	uint64_t end = now_ns() + TCP_FOLLOW_YIELD_NS;
	do {
		atomic_store_explicit(&tw_core_wanted, true, memory_order_relaxed);
		tw_unlock(w);
		sched_yield();
		tw_lock(w);
		done = w->qhead || !w->leader || me->ctx_fired ||
		       tw_wait_check(w, me, ctx);
	} while (!done && sender_leads(w) && now_ns() < end);
	w->follow_yielding = false;
	return done;
}

/*
 * Wait for something to change (mu held): lead one poll round if nobody
 * does, else sleep as a follower until woken or the ctx deadline.
 */
int tw_wait_step(struct tcp_wire *w, struct tcp_waiter *me, struct zap_ctx *ctx)
{
	TW_HELD(w);
	int err = tw_wait_check(w, me, ctx);
	if (err)
		return err;
	if (!w->leader) {
		w->leader = true;
		w->lead = me;
		err = leader_round(w, me, ctx);
		w->leader = false;
		w->lead = NULL;
		/* Someone else may need to lead now. */
		tw_wake_all(w);
		return err;
	}

	me->ctx_fd = w->host->ctx_fd(ctx);
	me->next = w->waiters;
	w->waiters = me;
	w->nwaiters++;
	if (me->ctx_fd >= 0 || me->out_fd >= 0)
		tw_kick(w); /* the leader must add our fds to its set */
	/* Yielding may find what a wake-up would have brought; if not,
	 * sleep, with the deadline as it stands after the yields. */
	if (!follow_by_yielding(w, me, ctx)) {
		int tmo = w->host->ctx_timeout_ms(ctx);
		if (tmo < 0) {
			tw_cond_wait(w);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += tmo / 1000;
			ts.tv_nsec += (long)(tmo % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			tw_cond_timedwait(w, &ts);
		}
	}
	waiter_del(w, me);
	me->ctx_fired = false;
	return 0;
}

/*
 * Sleep as a follower until woken (mu held), whatever any ctx says: for a
 * sender whose frame another sender is writing (tcp_txq.c). That one makes
 * progress on its own (it leads, or someone does, when it must wait).
 */
void tw_wait_plain(struct tcp_wire *w, struct tcp_waiter *me)
{
	TW_HELD(w);
	me->ctx_fd = -1;
	me->next = w->waiters;
	w->waiters = me;
	w->nwaiters++;
	tw_cond_wait(w);
	waiter_del(w, me);
}
