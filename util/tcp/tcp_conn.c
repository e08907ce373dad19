/* SPDX-License-Identifier: MIT */
/*
 * Connections, peers and routes, and the wake-ups of waiting threads.
 *
 * Shared state: everything here runs under w->mu (see the locking comment
 * in tcp_int.h), except tw_conn_free() of a connection no table holds any
 * more. Connections are freed only by tw_reap(), and that only while no
 * leader is polling, so the leader's snapshot of the table stays valid.
 */
#include "tcp_int.h"
#include "zap-conn.h"
#include "zap-addr.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

uint64_t tw_rand64(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
		/* No entropy source: still unique enough to tell instances apart. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^
		    ((uint64_t)getpid() << 16) ^ (uint64_t)(uintptr_t)&ts;
	}
	return v ? v : 1;
}

void tw_conn_set_src(struct tcp_conn *c, const struct sockaddr *sa, socklen_t sl)
{
	if (sl > sizeof(c->sa))
		sl = 0;
	memcpy(&c->sa, sa, sl);
	c->salen = sl;
	if (!sl || zaddr_format(sa, sl, -1, c->src, sizeof(c->src)))
		snprintf(c->src, sizeof(c->src), "?");
}

void tw_tune_socket(int fd)
{
	int one = 1;
	/* Messages are whole frames written at once; Nagle only adds delay. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/*
	 * Socket buffers stay the kernel's, autotuned: fixed SO_SNDBUF and
	 * SO_RCVBUF sizes gained nothing beyond the noise
	 * (bench/MEASUREMENTS.md, "socket-buffers"), and a fixed size turns
	 * autotuning off. MSG_ZEROCOPY is not used: looped
	 * back to a local socket its pages are copied anyway (the kernel's
	 * msg_zerocopy.rst, "Loopback"), and zap_send() would have to wait
	 * for the completion on the error queue before the caller may reuse
	 * its buffer.
	 */
}

bool tw_same_host(const struct sockaddr *local, const struct sockaddr *peer)
{
	const void *l, *p;
	size_t n;

	if (local->sa_family != peer->sa_family)
		return false;
	if (peer->sa_family == AF_INET) {
		l = &((const struct sockaddr_in *)local)->sin_addr;
		p = &((const struct sockaddr_in *)peer)->sin_addr;
		n = sizeof(struct in_addr);
	} else if (peer->sa_family == AF_INET6) {
		l = &((const struct sockaddr_in6 *)local)->sin6_addr;
		p = &((const struct sockaddr_in6 *)peer)->sin6_addr;
		n = sizeof(struct in6_addr);
	} else {
		return false;
	}
	return tw_ip_loopback(peer->sa_family, p) || !memcmp(l, p, n);
}

/*
 * A connection between two ends of this host crosses no network, so a
 * congestion control that paces its sends (BBR: a timer releases each
 * burst) protects no queue there and only costs the sending core: over
 * loopback reno streams faster and costs the sender less per byte than
 * bbr, and latency does not move (bench/MEASUREMENTS.md, "same-host-cc").
 * So such a connection trades a bbr* algorithm for reno, which
 * every Linux has and lets any process choose. Every other algorithm,
 * every connection that leaves the host, and every connection when
 * ZAP_TCP_SAME_HOST_CC=keep, keeps the host's choice. Best effort: a
 * failure leaves the socket as it was.
 */
void tw_tune_same_host(const struct tcp_wire *w, int fd)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	char cc[17] = ""; /* the kernel's names are at most 16 bytes */
	socklen_t cl = sizeof(cc) - 1;

	if (w->keep_cc || getsockname(fd, (struct sockaddr *)&l, &ll) ||
	    getpeername(fd, (struct sockaddr *)&p, &pl) ||
	    !tw_same_host((struct sockaddr *)&l, (struct sockaddr *)&p) ||
	    getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &cl) || strncmp(cc, "bbr", 3))
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "reno", strlen("reno"));
}

/*
 * Each side stores, then loads (both sequentially consistent): a leader
 * that stops spinning to sleep either sees kick_due (leader_ready(),
 * tcp_progress.c) or is seen here no longer spinning, and then the
 * eventfd wakes it. A spinning leader takes the kick in its next round
 * without a system call on either side: a sender handing the tx side to
 * a queued one that leads made two writes and the leader a poll() and a
 * read() (bench/MEASUREMENTS.md, "kick-spinning-leader").
 */
void tw_kick(struct tcp_wire *w)
{
	uint64_t one = 1;

	atomic_store(&w->kick_due, true);
	if (atomic_load(&w->lead_spins))
		return;
	ssize_t r = write(w->kick_fd, &one, sizeof(one));
	(void)r;
}

/* ------------------------------------------------------------------------ */
/* Connection table (all under w->mu)                                        */
/* ------------------------------------------------------------------------ */

/*
 * Tie-break: among the connections between two instances, the one with
 * the smallest (dialer instance id, connection nonce) is *the* connection.
 * Both ends compute the same order from the HELLOs. Each end sends on the
 * best connection it knows and only ever moves to a better one; the loser
 * is retired with SHUT_WR once its last frame is out, and closes at EOF.
 * A receiver holds back data on a connection while one the peer wrote on
 * before may still deliver (conn_before(), tw_conn_held()), so moving
 * never reorders.
 */
static bool key_less(const struct tcp_wire *w, const struct tcp_conn *a,
		     const struct tcp_conn *b)
{
	uint64_t da = a->dialed ? w->id : a->rid;
	uint64_t db = b->dialed ? w->id : b->rid;
	return da != db ? da < db : a->nonce < b->nonce;
}

/*
 * Whether the peer's frames on @x come before its frames on @c (two
 * connections of one peer). The key orders connections that were open at
 * once: the peer moves only to a better one. But once we sent our FIN on
 * a connection, the peer may close it at that FIN and dial again, and the
 * new connection's key is as random as its nonce; its frames still come
 * after everything the peer wrote on the old one, which we may not have
 * read yet. So a connection that joined the peer after one of its FINs
 * (c->after_fins) comes after the connections that were there before.
 * A strict order, so some connection is always free to be read.
 */
static bool conn_before(const struct tcp_wire *w, const struct tcp_conn *x,
			const struct tcp_conn *c)
{
	if (x->after_fins != c->after_fins)
		return x->after_fins < c->after_fins;
	return key_less(w, c, x);
}

/* Our FIN on @c (mu held), after our last frame there. */
static void conn_fin(struct tcp_conn *c)
{
	shutdown(c->fd, SHUT_WR);
	c->tx_shut = true;
	if (c->peer)
		c->peer->fins++;
}

void tw_retire(struct tcp_conn *c)
{
	c->retiring = true;
	if (!tw_tx_in_use(c) && !c->big && !c->tx_shut)
		conn_fin(c);
}

void tw_peer_pick_tx(struct tcp_wire *w, struct tcp_peer *p)
{
	TW_HELD(w);
	p->tx = NULL;
	for (struct tcp_conn *c = w->conns; c; c = c->next)
		if (c->peer == p && !c->dead && !c->retiring &&
		    (!p->tx || key_less(w, c, p->tx)))
			p->tx = c;
}

/* Whether a connection to @p is retired but still open for reading. */
bool tw_peer_draining(const struct tcp_wire *w, const struct tcp_peer *p)
{
	TW_HELD(w);
	for (const struct tcp_conn *c = w->conns; c; c = c->next)
		if (c->peer == p && !c->dead)
			return true;
	return false;
}

void tw_conn_kill(struct tcp_wire *w, struct tcp_conn *c, int why)
{
	TW_HELD(w);
	if (c->dead)
		return;
	bool cut = !c->rx_eof; /* the peer's frames on it may not all be in */
	c->dead = true;
	c->why = why;
	c->rx_eof = true;
	w->reap_due = true;
	if (c->peer && c->peer->tx == c)
		tw_peer_pick_tx(w, c->peer);
	if (!cut || !c->peer)
		return;
	/*
	 * Later connections of the same peer were held back behind this
	 * one (tw_conn_held()): the peer wrote their frames after its last
	 * frames here, some of which may now never arrive (a killed peer's
	 * unsent bytes go with it; a reset discards what we had not read).
	 * Delivering them would leave a hole in that peer's order, so they
	 * go too, unread. (A soak run with kills saw "seq 30, expected 25".)
	 */
	for (struct tcp_conn *x = w->conns; x; x = x->next) {
		if (x == c || x->dead || x->peer != c->peer || !conn_before(w, c, x))
			continue;
		w->host->log(ZAP_LOG_INFO, w->dom,
			     "dropping connection to %s (from %s) unread: the connection "
			     "before it broke, and frames sent there first may be lost",
			     x->raddr, x->src);
		tw_conn_kill(w, x, why);
	}
}

/*
 * A connection closes only once both directions are finished: the peer's
 * FIN was read (rx_eof) and ours was sent after our last frame (tx_shut).
 *
 * The peer's FIN alone does not mean the peer is gone: it is also how the
 * peer retires a connection that lost the tie-break, and it keeps reading
 * it (WIRE.md, rule 2). When both ends dial at once, the end whose own
 * dialed connection loses may already be writing a large frame on it when
 * the peer's FIN arrives. Closing at that FIN (as this code once did) made
 * that sender fail mid-frame with -ECONNRESET, the peer dropped the
 * connection as "closed mid-message", and whoever waited for the rest of
 * the data waited forever (test_bidirectional_large hung ~1 run in 5).
 * So at EOF the connection is retired instead: no new frame starts on it,
 * the frame in flight is finished, then we send our FIN and close. A peer
 * that really went away fails that frame by itself (EPIPE/ECONNRESET).
 */
void tw_conn_rx_done(struct tcp_wire *w, struct tcp_conn *c)
{
	c->rx_eof = true;
	tw_retire(c);
	if (c->tx_shut)
		tw_conn_kill(w, c, ZAP_CLOSE_PEER_EOF);
}

/* The tx owner (a sender, or the handshake's HELLO) let go of @c (mu
 * held): a retired connection gets its FIN now, and closes if the peer's
 * FIN was already read. */
void tw_conn_tx_done(struct tcp_wire *w, struct tcp_conn *c)
{
	TW_HELD(w);
	if (c->dead)
		return;
	if (c->retiring && !c->tx_shut && !c->big && !tw_tx_in_use(c))
		conn_fin(c);
	if (c->rx_eof && c->tx_shut)
		tw_conn_kill(w, c, ZAP_CLOSE_PEER_EOF);
}

void tw_conn_free(struct tcp_conn *c)
{
	tw_tls_conn_free(c);
	struct tcp_path *p = atomic_load(&c->path);
	p->ops->end(p);
	if (c->fd >= 0)
		close(c->fd);
	if (c->rx_msg)
		c->rx_msg->msg.release(&c->rx_msg->msg);
	free(c->rbuf);
	free(c);
}

/* Free dead connections nobody uses. Only while no leader is polling. */
void tw_reap(struct tcp_wire *w)
{
	TW_HELD(w);
	struct tcp_conn **pp = &w->conns;
	bool again = false;

	/* Nothing died: nothing to walk (this runs after every send). */
	if (!w->reap_due)
		return;
	while (*pp) {
		struct tcp_conn *c = *pp;
		if (!c->dead || tw_tx_in_use(c) || c->big || c->bigq) {
			again |= c->dead; /* freed once its sender lets go */
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		tw_ready_del(w, c);
		struct tcp_peer *p = c->peer;
		if (c->rx_charge) {
			/* Its partial message goes: others may take the budget. */
			w->partial_bytes -= c->rx_charge;
			atomic_store_explicit(&w->st_partial_now, w->partial_bytes,
					      memory_order_relaxed);
			c->rx_charge = 0;
			if (w->budget_wait) {
				w->budget_wait = false;
				tw_kick(w);
			}
		}
		if (w->oldest == c)
			w->oldest = NULL;
		w->nconns--;
		tw_conn_count_gone(w, c);
		tw_conn_free(c);
		if (p && --p->nconns == 0) {
			tw_peer_drop_routes(w, p);
			tw_peer_del(w, p);
			free(p);
		}
	}
	w->reap_due = again;
}

/*
 * Whether @c's HELLO carrying our own instance id comes from ourselves
 * (mu held): an accepted end must echo the nonce of a dial we are making,
 * a dialed end must have been registered by our accept thread under its
 * nonce (the acceptor registers before it answers).
 */
bool tw_self_proven(const struct tcp_wire *w, const struct tcp_conn *c)
{
	TW_HELD(w);
	if (c->rid != w->id)
		return false;
	if (!c->dialed) {
		for (const struct tcp_dial *d = w->dials; d; d = d->next)
			if (d->nonce == c->nonce)
				return true;
		return false;
	}
	for (const struct tcp_conn *x = w->conns; x; x = x->next)
		if (!x->dialed && x->rid == w->id && x->nonce == c->nonce)
			return true;
	return false;
}

/* Whether @p still has a connection the peer has not closed (mu held): a
 * FIN or reset waiting unread on a socket counts as closed, so a peer that
 * restarted on the same address is not locked out by its own past. */
static bool peer_live(const struct tcp_wire *w, const struct tcp_peer *p)
{
	for (const struct tcp_conn *x = w->conns; x; x = x->next) {
		char b;
		if (x->peer != p || x->dead || x->rx_eof)
			continue;
		ssize_t k = recv(x->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (k > 0 || (k < 0 && (errno == EAGAIN || errno == EINTR)))
			return true;
	}
	return false;
}

/*
 * What a new frame on @c would meet, seen before it starts (mu held, @c's
 * tx free). The leader notices a FIN only when it reads the connection,
 * which it may not do for a while (a full receive queue, a starved
 * thread), and a frame written after the peer's FIN is taken by the
 * kernel and lost if the peer went away: a peer restarted at the same
 * address would silently miss it. A connection not used since the last
 * clock tick (@now, now_coarse_ms(): 1-4 ms) is checked here, one poll
 * (tw_conn_check() takes a busy one as it is without calling this):
 *  - TW_CONN_SHUT: the peer shut its side; @c is retired as its FIN would
 *    retire it, and the sender picks another or dials;
 *  - TW_CONN_STALLED: data waits unread on @c and none was read for
 *    TCP_VERIFY_MS. A dead peer's FIN can wait there behind it, unseen
 *    (struct tcp_route says what the sender does then);
 *  - TW_CONN_OK otherwise.
 */
int tw_conn_check_at(struct tcp_wire *w, struct tcp_conn *c, uint64_t now)
{
	TW_HELD(w);
	struct pollfd pfd = { .fd = c->fd, .events = POLLIN | POLLRDHUP };

	if (poll(&pfd, 1, 0) != 1)
		return TW_CONN_OK;
	if (!(pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return now - atomic_load_explicit(&c->rx_ms, memory_order_relaxed) >=
				       TCP_VERIFY_MS
			       ? TW_CONN_STALLED
			       : TW_CONN_OK;
	w->host->log(ZAP_LOG_DEBUG, w->dom,
		     "%s (from %s) shut its side of the connection: no new frame on it",
		     c->raddr, c->src);
	tw_retire(c);
	if (c->peer && c->peer->tx == c)
		tw_peer_pick_tx(w, c->peer);
	return TW_CONN_SHUT;
}

/*
 * tw_conn_register()'s look-up (mu held): the peer @c belongs to (*@pp,
 * NULL if new), and whether the route to c->raddr stays where it is (a
 * live peer holds it). A step of its own to keep tw_conn_register() short.
 */
static bool register_lookup(struct tcp_wire *w, struct tcp_conn *c, bool self,
			    struct tcp_peer **pp)
{
	struct tcp_peer *p = NULL;
	bool keep_route = false;

	if (!self || c->dialed) {
		p = tw_peer_find(w, c->rid, c->raddr);
		struct tcp_route *r = tw_route_find(w, c->raddr);
		/* Another instance at a live peer's address: a restart whose
		 * old connections we have not seen close yet (data may sit
		 * before their FIN), or a process posing as it from the same
		 * host. Either way it does not take the route: replies go to
		 * the live peer; once that one's connections close, the route
		 * goes, and the next send dials the address again. */
		keep_route = !c->dialed && !p && r && r->peer && peer_live(w, r->peer);
	}
	*pp = p;
	return keep_route;
}

/*
 * tw_conn_register()'s linking of @c (mu held): its receive buffer, the
 * readiness set (*@kick: the leader must look), the connection list and
 * its clocks. 0, or -ENOMEM with nothing of it left. A step of its own
 * to keep tw_conn_register() short.
 */
static int register_link(struct tcp_wire *w, struct tcp_conn *c, bool *kick)
{
	c->rbuf = malloc(TCP_RBUF);
	if (!c->rbuf)
		return -ENOMEM;
	int r = tw_ready_add(w, c, now_coarse_ms(), kick);
	if (r) {
		w->host->log(ZAP_LOG_WARN, w->dom, "%s: epoll_ctl: %s", c->raddr,
			     strerror(-r));
		free(c->rbuf);
		c->rbuf = NULL;
		return -ENOMEM;
	}
	c->next = w->conns;
	w->conns = c;
	w->nconns++;
	tw_touch(c, now_coarse_ms());
	atomic_store_explicit(&c->rx_ms, now_coarse_ms(), memory_order_relaxed);
	return 0;
}

/*
 * tw_conn_register()'s last step (mu held): the events of @c, and the
 * leader and the waiters told. A step of its own to keep
 * tw_conn_register() short.
 */
static void register_announce(struct tcp_wire *w, struct tcp_conn *c, bool kick)
{
	tw_event(w, ZAP_EVENT_CONNECTED, 0, c, NULL, NULL);
	/* The dialer moved to shared memory before registering (tcp_shm_setup.c). */
	struct tcp_path *p = atomic_load(&c->path);
	if (p->ops->upgraded(p))
		tw_event(w, ZAP_EVENT_UPGRADED, 0, c, NULL, NULL);
	/* A leader waiting for something send-side (a dial, a route) looks
	 * again; a receiving one only when the new connection needs it. */
	if (w->leader && (kick || (w->lead && w->lead->tx)))
		tw_kick(w);
	tw_wake_all(w);
}

/*
 * Add an established connection (HELLO seen, its address proven as far as
 * plaintext can: tcp_hello_peer()). @dial_addr: the string the application
 * dialed, or NULL. An accepted connection never takes over the route of a
 * different live peer. Returns -ENOMEM on failure (c not added).
 */
int tw_conn_register(struct tcp_wire *w, struct tcp_conn *c, const char *dial_addr)
{
	TW_HELD(w);
	struct tcp_peer *p = NULL;

	c->id = ++w->next_conn_id;
	bool self = c->rid == w->id;

	bool keep_route = register_lookup(w, c, self, &p);

	bool kick;
	int r = register_link(w, c, &kick);
	if (r)
		return r;
	if (self && !c->dialed) {
		/* The accepted end of a connection to ourselves only receives;
		 * the dialed end carries our sends. */
		c->peer = NULL;
		goto out;
	}
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			tw_ready_del(w, c);
			w->conns = c->next;
			w->nconns--;
			free(c->rbuf);
			c->rbuf = NULL;
			return -ENOMEM;
		}
		p->rid = c->rid;
		snprintf(p->addr, sizeof(p->addr), "%s", c->raddr);
		tw_peer_add(w, p);
	}
	c->peer = p;
	c->after_fins = p->fins;
	p->nconns++;
	if (!p->tx) {
		p->tx = c;
	} else if (key_less(w, c, p->tx)) {
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "%s: both ends dialed; moving to the %s connection",
			     c->raddr, c->dialed ? "dialed" : "accepted");
		tw_retire(p->tx);
		p->tx = c;
	} else {
		tw_retire(c);
	}
	if (keep_route) {
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "%s (from %s): a live peer holds that address; not routing to "
			     "the newcomer before a dial shows who listens there",
			     c->raddr, c->src);
		tw_route_find(w, c->raddr)->contested = true;
	} else
		tw_route_set(w, c->raddr, p);
	if (dial_addr)
		tw_route_set(w, dial_addr, p);
out:
	register_announce(w, c, kick);
	return 0;
}

/*
 * Close the connection idle the longest (no frame byte either way) among
 * those for which @pick holds (every one when NULL), if it has been idle
 * at least @min_idle_ms (mu held): the descriptor limit is reached, and a
 * newcomer or our own dial needs one. Whether one was closed. It closes
 * at once when no leader polls, else after the leader's round.
 */
bool tw_evict_from(struct tcp_wire *w, const char *why,
		   bool (*pick)(const struct tcp_conn *c, const void *arg),
		   const void *arg, uint64_t min_idle_ms)
{
	TW_HELD(w);
	struct tcp_conn *old = NULL;
	uint64_t old_ms = UINT64_MAX, now = now_coarse_ms();

	for (struct tcp_conn *c = w->conns; c; c = c->next) {
		uint64_t t = atomic_load_explicit(&c->last_ms, memory_order_relaxed);
		if (c->dead || tw_tx_in_use(c) || t >= old_ms || (pick && !pick(c, arg)))
			continue;
		old = c;
		old_ms = t;
	}
	uint64_t idle = old && now > old_ms ? now - old_ms : 0;
	if (!old || idle < min_idle_ms)
		return false;
	w->host->log(ZAP_LOG_WARN, w->dom,
		     "closing the connection to %s (from %s), idle %llu ms: %s",
		     old->raddr, old->src, (unsigned long long)idle, why);
	tw_conn_kill(w, old, ZAP_CLOSE_EVICTED);
	if (w->leader)
		tw_kick(w);
	else
		tw_reap(w);
	return true;
}

bool tw_evict_idle(struct tcp_wire *w, const char *why)
{
	TW_HELD(w);
	return tw_evict_from(w, why, NULL, NULL, TCP_EVICT_MIN_IDLE_MS);
}

/*
 * Which of ZCONN_HOST_BUCKETS a connection's source host falls in: the
 * connection layer's buckets (zconn_host_bucket()), by IP address, or on a
 * Unix socket by the peer's uid and gid (c->ident up to " pid=").
 */
unsigned tw_conn_host(const struct tcp_conn *c)
{
	return zconn_host_bucket((const struct sockaddr *)&c->sa, c->salen, c->ident);
}

/*
 * Whether data on @c must wait: another connection from the same peer may
 * still deliver frames the peer sent before moving to @c (conn_before()).
 */
bool tw_conn_held(const struct tcp_wire *w, const struct tcp_conn *c)
{
	if (!c->peer || c->peer->nconns < 2)
		return false;
	for (const struct tcp_conn *x = w->conns; x; x = x->next)
		if (x != c && x->peer == c->peer && !x->rx_eof && conn_before(w, x, c))
			return true;
	return false;
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
		if (!tw_tx_in_use(c) && due <= now) {
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
