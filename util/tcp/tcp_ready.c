/* SPDX-License-Identifier: MIT */
/*
 * Readiness: which connections the leader polls itself (hot) and which
 * wait in one epoll set (cold), tcp_int.h, "Readiness", says why; and the
 * wait for one descriptor outside the progress engine (the dialer, the
 * side channel's set-up). The bottom of the wire's call graph: it calls
 * nothing in the other files.
 *
 * Shared state: w->hot, w->nhot, c->hot, c->hprev/hnext and
 * w->next_idle_ms are under w->mu; w->epfd is made at open and closed at
 * close. The epoll set holds a cold connection's pointer, so
 * tw_ready_del() takes it out before the connection is freed (tw_reap(),
 * which runs only while no leader polls: a pointer the leader has from
 * epoll_wait() stays valid until its round ends).
 */
#include "tcp_int.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

int tw_ready_open(struct tcp_wire *w)
{
	w->next_idle_ms = UINT64_MAX;
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0)
		return -errno;
	/* The accept thread's, for the handshakes under way. */
	w->hs_epfd = epoll_create1(EPOLL_CLOEXEC);
	return w->hs_epfd < 0 ? -errno : 0;
}

void tw_ready_close(struct tcp_wire *w)
{
	if (w->epfd >= 0)
		close(w->epfd);
	if (w->hs_epfd >= 0)
		close(w->hs_epfd);
	w->epfd = w->hs_epfd = -1;
}

static int ep_add(struct tcp_wire *w, struct tcp_conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

	return epoll_ctl(w->epfd, EPOLL_CTL_ADD, c->fd, &ev) ? -errno : 0;
}

static void hot_link(struct tcp_wire *w, struct tcp_conn *c)
{
	c->hot = true;
	c->hprev = NULL;
	c->hnext = w->hot;
	if (w->hot)
		w->hot->hprev = c;
	w->hot = c;
	w->nhot++;
}

static void hot_unlink(struct tcp_wire *w, struct tcp_conn *c)
{
	if (c->hprev)
		c->hprev->hnext = c->hnext;
	else
		w->hot = c->hnext;
	if (c->hnext)
		c->hnext->hprev = c->hprev;
	c->hprev = c->hnext = NULL;
	c->hot = false;
	w->nhot--;
}

int tw_ready_add(struct tcp_wire *w, struct tcp_conn *c, uint64_t now, bool *kick)
{
	*kick = false;
	/* A connection whose path moved before it was registered (the
	 * dialer's, to shared memory) is read every round: hot for good. */
	if (atomic_load(&c->path)->ops->stays_hot) {
		hot_link(w, c);
		*kick = true; /* a blocked leader does not poll it yet */
	} else {
		int r = ep_add(w, c);
		if (r)
			return r;
		c->hot = false;
	}
	if (now + w->idle_ms < w->next_idle_ms) {
		w->next_idle_ms = now + w->idle_ms;
		*kick = true; /* a blocked leader's timeout may be too long */
	}
	return 0;
}

void tw_ready_del(struct tcp_wire *w, struct tcp_conn *c)
{
	if (c->hot)
		hot_unlink(w, c);
	else
		epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
}

void tw_conn_heat(struct tcp_wire *w, struct tcp_conn *c)
{
	if (c->hot)
		return;
	/* Cannot fail for a registered descriptor; if it did, epoll would
	 * only report the connection again, which heating ignores. */
	epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	hot_link(w, c);
}

/*
 * Whether hot @c may go cold: nothing happened on it for
 * TCP_HOT_IDLE_MS (with more than TCP_HOT_MAX hot: nothing is happening
 * now) and it has no state the leader must look at every
 * round (tcp_int.h, "Readiness"). A connection whose end was read stays
 * hot until it is freed: epoll would report its end every round. Whether
 * its data must wait for another connection (tw_conn_held()) is the
 * caller's last check: the connection table's, not readiness's.
 */
bool tw_conn_may_cool(const struct tcp_wire *w, const struct tcp_conn *c, uint64_t now)
{
	uint64_t last = atomic_load_explicit(&c->last_ms, memory_order_relaxed);
	/* Past TCP_HOT_MAX, idle now is idle enough: many peers each sending
	 * now and then (a burst of newcomers, votes from every validator)
	 * would otherwise all stay hot, and each round would poll them all. */
	uint64_t idle = w->nhot > TCP_HOT_MAX ? 0 : TCP_HOT_IDLE_MS;

	return !c->dead && !c->rx_eof && !c->rx_ready && !c->alloc_wait && !c->rx_msg &&
	       !c->rx_since_ms && c->rhead == c->rlen &&
	       !atomic_load(&c->path)->ops->stays_hot && now - last >= idle;
}

bool tw_conn_cool(struct tcp_wire *w, struct tcp_conn *c)
{
	if (ep_add(w, c))
		return false; /* a failed add (no memory): it stays hot */
	hot_unlink(w, c);
	return true;
}

/* Wait for @events on @fd, the ctx or shutdown, at most @limit_ms (-1: no
 * limit). 0, or a negative errno (-ETIMEDOUT at the limit). */
int tw_wait_fd(struct tcp_wire *w, int fd, short events, struct zap_ctx *ctx,
	       int limit_ms)
{
	for (;;) {
		struct pollfd p[3] = {
			{ .fd = fd, .events = events },
			{ .fd = w->stop_fd, .events = POLLIN },
			{ .fd = w->host->ctx_fd(ctx), .events = POLLIN },
		};
		int tmo = ms_min(w->host->ctx_timeout_ms(ctx), limit_ms);
		int r = poll(p, 3, tmo);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (atomic_load(&w->shut))
			return -ESHUTDOWN;
		int e = w->host->ctx_err(ctx);
		if (e)
			return e;
		if (p[0].revents)
			return 0;
		if (r == 0)
			return -ETIMEDOUT;
	}
}
