/* SPDX-License-Identifier: MIT */
/*
 * Readiness: which connections the leader polls itself (hot) and which
 * wait in one epoll set (cold), and the idle-timeout scan; tcp_int.h,
 * "Readiness", says why.
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
	/* A connection that moved to shared memory before it was registered
	 * (the dialer's) is read every round: hot for good. */
	if (atomic_load(&c->shm)) {
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
 * TCP_HOT_IDLE_MS and it has no state the leader must look at every
 * round (tcp_int.h, "Readiness"). A connection whose end was read stays
 * hot until it is freed: epoll would report its end every round.
 */
static bool may_cool(const struct tcp_wire *w, const struct tcp_conn *c, uint64_t now)
{
	uint64_t last = atomic_load_explicit(&c->last_ms, memory_order_relaxed);

	return !c->dead && !c->rx_eof && !c->rx_ready && !c->alloc_wait && !c->rx_msg &&
	       !c->rx_since_ms && c->rhead == c->rlen && !atomic_load(&c->shm) &&
	       now - last >= TCP_HOT_IDLE_MS && !tw_conn_held(w, c);
}

bool tw_conn_cool(struct tcp_wire *w, struct tcp_conn *c, uint64_t now)
{
	if (!may_cool(w, c, now) || ep_add(w, c))
		return false; /* a failed add (no memory): it stays hot */
	hot_unlink(w, c);
	return true;
}

/*
 * Close the connections idle for w->idle_ms (mu held), when the earliest
 * idle deadline has come, and note the next one. A connection whose tx
 * side is busy is not idle whatever its clock says (a sender waits for
 * room on it); such a one is looked at again a second later.
 */
void tw_idle_scan(struct tcp_wire *w, uint64_t now)
{
	TW_HELD(w);
	uint64_t next = UINT64_MAX;

	if (now < w->next_idle_ms)
		return;
	for (struct tcp_conn *c = w->conns; c; c = c->next) {
		if (c->dead)
			continue;
		uint64_t last = atomic_load_explicit(&c->last_ms, memory_order_relaxed);
		uint64_t due = last + w->idle_ms;
		if (!c->tx_busy && due <= now) {
			w->host->log(
				ZAP_LOG_INFO, w->dom,
				"closing the connection to %s (from %s): idle for %u ms",
				c->raddr, c->src, w->idle_ms);
			tw_conn_kill(w, c, ZAP_CLOSE_IDLE);
			continue;
		}
		if (due <= now)
			due = now + 1000;
		if (due < next)
			next = due;
	}
	w->next_idle_ms = next;
}
