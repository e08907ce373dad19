/* SPDX-License-Identifier: MIT */
/*
 * The handshake, both sides: the accept thread (accepts, reads HELLOs with
 * a deadline, registers, answers) and the dialer (connects, sends its
 * HELLO, waits for the answer, registers).
 *
 * Shared state: w->pending and w->npending belong to the accept thread
 * alone; a connection joins the shared table only through
 * tw_conn_register() under w->mu. A connection's hs buffer belongs to
 * whoever runs its handshake (the accept thread, or the dialing sender).
 */
#include "tcp_int.h"
#include "zap-addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/epoll.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Handshake                                                                 */
/* ------------------------------------------------------------------------ */

static size_t hello_build(const struct tcp_wire *w, const struct tcp_conn *c,
			  unsigned char *buf)
{
	size_t al = strlen(w->bound);
	tw_hdr_put(buf, c->ver, TCP_T_HELLO, TCP_HELLO_FIXED + al);
	put_be64(buf + TCP_HDR, w->id);
	put_be64(buf + TCP_HDR + 8, c->nonce);
	put_be64(buf + TCP_HDR + 16, w->max_msg);
	memcpy(buf + TCP_HDR + TCP_HELLO_FIXED, w->bound, al);
	return TCP_HDR + TCP_HELLO_FIXED + al;
}

/* Whether @c's proven address is one we listen on: our port, and our
 * bound host, or for a wildcard listener a loopback host or the address
 * the connection reached us at. */
static bool own_address(const struct tcp_wire *w, const struct tcp_conn *c)
{
	struct zaddr ra, ba;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char local[ZAP_PEER_MAX];

	if (!strncmp(w->bound, "unix:", 5) || !strncmp(c->raddr, "unix:", 5))
		return !strcmp(c->raddr, w->bound);
	if (zaddr_parse(c->raddr, &ra) || zaddr_parse(w->bound, &ba) ||
	    ra.port_num != ba.port_num)
		return false;
	if (!ba.wildcard)
		return !strcmp(c->raddr, w->bound);
	if (!strcmp(ra.host, "::1") || !strncmp(ra.host, "127.", 4))
		return true;
	return !getsockname(c->fd, (struct sockaddr *)&ss, &sl) &&
	       !zaddr_format((struct sockaddr *)&ss, sl, ba.port_num, local,
			     sizeof(local)) &&
	       !strcmp(local, c->raddr);
}

/*
 * Without TLS here: does the peer speak TLS (a TLS record, 0x15 alert or
 * 0x16 handshake, version 3.x, where a HELLO should start)? A TLS endpoint
 * answers a plaintext HELLO with an alert (util/tls), so the sender learns
 * what to change rather than "connection reset". The other way, we answer
 * a TLS ClientHello with the start of a zap frame, which no TLS stack
 * takes for a record ("wrong version number", which util/tls reports as
 * a peer without TLS), after taking in what it sent (a close with unread
 * bytes would reset the connection and could overtake the answer).
 */
static bool tls_record(const struct tcp_conn *c, char *why, size_t whylen)
{
	if (c->tls || c->hslen < 2 || (c->hs[0] != 0x15 && c->hs[0] != 0x16) ||
	    c->hs[1] != 0x03)
		return false;
	if (!c->dialed && !c->local) {
		/* Our magic and zeros: more than the 5 bytes of a record
		 * header, which a TLS stack reads before it judges. */
		static const unsigned char zap[8] = { 'Z', 'A', 'P', 'W' };
		unsigned char sink[512];
		ssize_t k;

		for (int i = 0; i < 8; i++)
			if (recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0)
				break;
		k = send(c->fd, zap, sizeof(zap), MSG_DONTWAIT | MSG_NOSIGNAL);
		(void)k;
	}
	if (c->dialed)
		snprintf(why, whylen,
			 "the peer requires TLS (it answered with a TLS record) and this "
			 "endpoint has none: set ZAP_TLS_CERT and ZAP_TLS_KEY (or "
			 "zap_attr.tls_cert, tls_key) here");
	else
		snprintf(why, whylen,
			 "a TLS peer (it opened with a TLS record) and this endpoint has "
			 "no TLS (ZAP_TLS_CERT unset here)");
	return true;
}

/*
 * Read more of a HELLO into c->hs without blocking.
 * Return: 1 complete, 0 need more, -EPIPE closed, other negative: protocol
 * error or socket error, reason in @why.
 */
static int hello_read(struct tcp_wire *w, struct tcp_conn *c, char *why, size_t whylen)
{
	for (;;) {
		size_t need = TCP_HDR;
		uint64_t len = 0;
		if (c->hslen >= TCP_HDR) {
			/* The dialer offers a version (c->ver); the acceptor
			 * answers with it, or with an older one it prefers. */
			int r = tcp_parse_header(c->hs, 0, TCP_T_HELLO, TCP_HELLO_MAX,
						 &len, why, whylen);
			if (r)
				return r;
			if (c->dialed && c->hs[4] > c->ver) {
				snprintf(why, whylen,
					 "HELLO answers wire version %u to our offer of %u",
					 c->hs[4], c->ver);
				return -EPROTO;
			}
			c->ver = c->hs[4];
			if (len < TCP_HELLO_FIXED + 3) {
				snprintf(why, whylen, "HELLO too short");
				return -EPROTO;
			}
			need = TCP_HDR + (size_t)len;
			if (c->hslen == need)
				break;
		}
		ssize_t k = tw_io_read(c, c->hs + c->hslen, need - c->hslen);
		if (k > 0) {
			c->hslen += (size_t)k;
			if (tls_record(c, why, whylen))
				return -EPROTO;
			continue;
		}
		if (k == 0) {
			snprintf(why, whylen,
				 "closed during the handshake (%zu bytes in)", c->hslen);
			return -EPIPE;
		}
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		int e = errno;
		snprintf(why, whylen, "read: %s", tw_io_err(c, e));
		return e == EACCES ? -EACCES : -e;
	}

	/* Parse: id, nonce, address; check the address against the
	 * connection (a wildcard host becomes the source). */
	struct tcp_hello hl;
	int r = tcp_parse_hello(c->hs + TCP_HDR, c->hslen - TCP_HDR, &hl, why, whylen);
	if (r)
		return r;
	int dport = -1;
	if (c->dialed) {
		struct zaddr ra;
		if (zaddr_parse(c->src, &ra)) {
			snprintf(why, whylen, "unusable remote address");
			return -EPROTO;
		}
		dport = ra.port_num;
		if (hl.nonce != c->nonce) {
			snprintf(why, whylen,
				 "HELLO from %.64s does not echo our connection nonce",
				 c->src);
			c->why = ZAP_CLOSE_IDENTITY;
			return -EPROTO;
		}
	}
	/* Unix sockets: the credentials back the claim (tcp_unix.c). */
	if (c->local)
		r = tw_unix_hello_peer(w, c, &hl, why, whylen);
	else
		r = tcp_hello_peer(&hl, (struct sockaddr *)&c->sa, c->salen, dport,
				   c->raddr, sizeof(c->raddr), why, whylen);
	if (r) {
		c->why = ZAP_CLOSE_IDENTITY; /* a claim the connection does not back */
		return r;
	}
	c->rid = hl.id;
	c->peer_max = hl.max_msg;
	if (!c->dialed)
		c->nonce = hl.nonce;

	/* Loops: our own instance id or listen address, unless this really
	 * is a connection to ourselves (the nonce exchange proves it). */
	tw_lock(w);
	bool self = tw_self_proven(w, c);
	tw_unlock(w);
	if (!self && hl.id == w->id) {
		snprintf(why, whylen, "HELLO from %.64s claims our own instance id",
			 c->raddr);
		c->why = ZAP_CLOSE_IDENTITY;
		return -EPROTO;
	}
	if (!self && own_address(w, c)) {
		snprintf(why, whylen, "HELLO from %.64s claims our own listen address",
			 c->raddr);
		c->why = ZAP_CLOSE_IDENTITY;
		return -EPROTO;
	}
	/* TLS: the peer is its key as much as its address, so the key is
	 * part of the peer string, of the peer's identity in the table and
	 * of its routes (WIRE.md, "TLS"). */
	if (c->tls) {
		size_t al = strlen(c->raddr);
		if (al + 1 + strlen(c->fp) >= sizeof(c->raddr)) {
			snprintf(why, whylen, "address %.64s too long to carry a key",
				 c->raddr);
			return -EPROTO;
		}
		c->raddr[al] = '#';
		memcpy(c->raddr + al + 1, c->fp, strlen(c->fp) + 1);
	}
	return 1;
}

/* The accepted side's handshake step: TLS first when it is on, then the
 * HELLO. 1 complete, 0 wait (for c->hs_events), negative: refused. */
static int pending_step(struct tcp_wire *w, struct tcp_conn *c, char *why, size_t whylen)
{
	if (c->tls && !c->tls_ok) {
		int r = tw_tls_step(c, why, whylen);
		if (r < 0 && r != -EPIPE)
			c->why = ZAP_CLOSE_TLS;
		if (r <= 0)
			return r;
		c->hs_events = POLLIN;
		/* The peer's HELLO may have come with its last TLS flight. */
	}
	return hello_read(w, c, why, whylen);
}

/* The events the handshake of @c waits for. */
static short pending_events(const struct tcp_conn *c)
{
	return c->tls && !c->tls_ok && c->hs_events ? c->hs_events : POLLIN;
}

/* Watch @c in hs_epfd for what its handshake waits for (a TLS step may
 * want to write). A failed epoll_ctl() leaves it to its deadline. */
static void pending_arm(struct tcp_wire *w, struct tcp_conn *c)
{
	short ev = pending_events(c);

	if (ev == c->hs_armed)
		return;
	struct epoll_event e = { .events = (ev & POLLIN ? EPOLLIN : 0) |
					   (ev & POLLOUT ? EPOLLOUT : 0),
				 .data.ptr = c };
	if (!epoll_ctl(w->hs_epfd, c->hs_armed ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd,
		       &e))
		c->hs_armed = ev;
}

static void pending_add(struct tcp_wire *w, struct tcp_conn *c)
{
	c->pprev = NULL;
	c->next = w->pending;
	if (w->pending)
		w->pending->pprev = c;
	else
		w->pending_tail = c;
	w->pending = c;
	w->npending++;
	pending_arm(w, c);
}

static void pending_unlink(struct tcp_wire *w, struct tcp_conn *c)
{
	if (c->pprev)
		c->pprev->next = c->next;
	else
		w->pending = c->next;
	if (c->next)
		c->next->pprev = c->pprev;
	else
		w->pending_tail = c->pprev;
	c->next = c->pprev = NULL;
	w->npending--;
	if (c->hs_armed)
		epoll_ctl(w->hs_epfd, EPOLL_CTL_DEL, c->fd, NULL);
	c->hs_armed = 0;
}

static void pending_drop(struct tcp_wire *w, struct tcp_conn *c, enum zap_log_level lvl,
			 int reason, const char *why)
{
	w->host->log(lvl, w->dom, "dropping connection from %s: %s", c->src, why);
	tw_count_close(w, reason);
	tw_event(w, ZAP_EVENT_REFUSED, reason, c, c->src, why);
	pending_unlink(w, c);
	tw_conn_free(c);
}

/* The accepted side: register, then answer with our HELLO. */
static void pending_finish(struct tcp_wire *w, struct tcp_conn *c)
{
	unsigned char buf[TCP_HDR + TCP_HELLO_MAX];
	size_t n = hello_build(w, c, buf);
	int r;

	pending_unlink(w, c);

	w->host->log(ZAP_LOG_DEBUG, w->dom, "accepted connection from %s", c->raddr);
	tw_tls_log_up(w, c);
	/* The ends a dialer's shared-memory proof must name (tcp_shm.c). */
	if (w->shm_lfd >= 0)
		tw_shm_bind(c);
	tw_lock(w);
	/* Hold tx so that a retire decided here waits for our HELLO. */
	c->tx_busy = true;
	r = tw_conn_register(w, c, NULL);
	tw_unlock(w);
	if (r) {
		w->host->log(ZAP_LOG_WARN, w->dom,
			     "dropping connection from %s: out of memory", c->src);
		tw_count_close(w, ZAP_CLOSE_OTHER);
		tw_event(w, ZAP_EVENT_REFUSED, ZAP_CLOSE_OTHER, c, c->src,
			 "out of memory");
		tw_conn_free(c);
		return;
	}

	/* A fresh socket's send buffer always takes a HELLO. */
	struct iovec hv = { buf, n };
	ssize_t k = tw_io_send(c, &hv, 1);
	int e = errno;
	tw_lock(w);
	c->tx_busy = false;
	if (k != (ssize_t)n) {
		w->host->log(ZAP_LOG_WARN, w->dom,
			     "dropping connection from %s: cannot answer HELLO: %s",
			     c->raddr, k < 0 ? tw_io_err(c, e) : "short write");
		tw_conn_kill(w, c, ZAP_CLOSE_PEER_RESET);
	} else {
		tw_conn_tx_done(w, c);
	}
	/* Senders may have queued frames behind the HELLO (tcp_txq.c). */
	tw_txq_handoff(w, c);
	if (w->leader)
		tw_kick(w);
	else
		tw_reap(w);
	tw_notify(w, true);
	tw_unlock(w);
}

static bool in_bucket(const struct tcp_conn *c, const void *arg)
{
	return tw_conn_host(c) == *(const unsigned *)arg;
}

/*
 * Make room for one more connection (accept thread): the descriptor cap is
 * reached, accept() ran out of descriptors, or (@pending_only) too many
 * handshakes are under way. The source host holding the most connections
 * (established and in handshake, counted in TCP_HOST_BUCKETS) gives one
 * up: its oldest handshake (not proven yet), else its connection idle the
 * longest, however recently used. So many connections from a few hosts
 * cannot keep a newcomer from elsewhere out: they make the room. When no
 * host holds two, the oldest handshake goes, else the connection idle the
 * longest. Whether one was closed.
 */
static bool make_room(struct tcp_wire *w, bool pending_only, const char *why)
{
	unsigned *count = calloc(TCP_HOST_BUCKETS, sizeof(*count));
	unsigned best = 0;
	bool made = false;

	if (!count)
		return false;
	for (struct tcp_conn *c = w->pending; c; c = c->next)
		count[tw_conn_host(c)]++;
	tw_lock(w);
	if (!pending_only)
		for (struct tcp_conn *c = w->conns; c; c = c->next)
			if (!c->dead)
				count[tw_conn_host(c)]++;
	for (unsigned b = 1; b < TCP_HOST_BUCKETS; b++)
		if (count[b] > count[best])
			best = b;
	struct tcp_conn *victim = NULL;
	for (struct tcp_conn *c = w->pending_tail; c && !victim; c = c->pprev)
		if (count[best] < 2 || tw_conn_host(c) == best)
			victim = c;
	if (!victim && !pending_only)
		made = tw_evict_from(w, why, count[best] < 2 ? NULL : in_bucket, &best,
				     0);
	tw_unlock(w);
	free(count);
	if (victim) {
		pending_drop(w, victim, ZAP_LOG_WARN,
			     pending_only ? ZAP_CLOSE_HANDSHAKE : ZAP_CLOSE_EVICTED, why);
		made = true;
	}
	return made;
}

/*
 * New connections from the listener, a batch at a time: the handshakes
 * under way get their turn between two batches. Taking them until
 * accept() ran dry let a peer that dials again as fast as the connections
 * it holds are closed for the newcomers (make_room()) keep this thread
 * here, and a newcomer's HELLO, already read for, was never answered.
 */
static void accept_ready(struct tcp_wire *w, bool *backoff)
{
	for (unsigned taken = 0; taken < TCP_EPOLL_BATCH; taken++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(w->lfd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
				/* Leave the backlog in the kernel and retry
				 * later rather than spin on a readable socket;
				 * out of descriptors, also free one to retry
				 * with (one per pause: an evicted connection's
				 * descriptor is closed after the leader's
				 * round), or a full table locks everyone out
				 * for good. */
				bool made = (e == EMFILE || e == ENFILE) &&
					    make_room(w, false, "out of descriptors");
				w->host->log(ZAP_LOG_WARN, w->dom,
					     "accept: %s; pausing new connections%s",
					     strerror(e),
					     made ? " (one closed to make room)" : "");
				*backoff = true;
			}
			return;
		}
		tw_count(&w->st_accepted, 1);
		struct tcp_conn *c = calloc(1, sizeof(*c));
		if (!c) {
			w->host->log(ZAP_LOG_WARN, w->dom,
				     "dropping new connection: out of memory");
			tw_count_close(w, ZAP_CLOSE_OTHER);
			close(fd);
			continue;
		}
		c->fd = fd;
		if (ss.ss_family == AF_UNIX) {
			tw_unix_accepted(c); /* the peer's credentials */
		} else {
			tw_conn_set_src(c, (struct sockaddr *)&ss, sl);
			tw_tune_socket(fd);
			tw_tune_same_host(w, fd);
		}
		c->hs_deadline_ms = now_ms() + w->hs_timeout_ms;
		char why[200];
		if (w->tls && tw_tls_conn_new(w, c, true, NULL, why, sizeof(why))) {
			w->host->log(ZAP_LOG_WARN, w->dom,
				     "dropping connection from %s: %s", c->src, why);
			tw_count_close(w, ZAP_CLOSE_TLS);
			tw_event(w, ZAP_EVENT_REFUSED, ZAP_CLOSE_TLS, c, c->src, why);
			tw_conn_free(c);
			continue;
		}
		/* Too many handshakes, or the descriptor cap: someone makes
		 * room (make_room()), or the newcomer is turned away; the cap
		 * holds either way, and a flood from a few hosts evicts its
		 * own connections, not the newcomer. */
		tw_lock(w);
		bool full = w->nconns + w->npending >= w->conn_max;
		tw_unlock(w);
		bool shed = w->npending >= w->pending_max ||
			    (w->tls && w->npending >= TCP_TLS_PENDING_MAX);
		if ((shed || full) &&
		    !make_room(w, shed && !full,
			       shed && !full ? "too many connections in handshake"
					     : "descriptor limit reached")) {
			w->host->log(
				ZAP_LOG_WARN, w->dom,
				"dropping connection from %s: descriptor limit reached "
				"and no connection to close for it",
				c->src);
			tw_count_close(w, ZAP_CLOSE_EVICTED);
			tw_event(w, ZAP_EVENT_REFUSED, ZAP_CLOSE_EVICTED, c, c->src,
				 "descriptor limit reached");
			tw_conn_free(c);
			continue;
		}
		pending_add(w, c);
	}
}

/* One handshake step for @c, which epoll reported. */
static void pending_ready(struct tcp_wire *w, struct tcp_conn *c)
{
	char why[400];
	int h = pending_step(w, c, why, sizeof(why));

	if (h == 1)
		pending_finish(w, c);
	else if (h < 0)
		pending_drop(w, c, h == -EPIPE && !c->hslen ? ZAP_LOG_INFO : ZAP_LOG_WARN,
			     tw_hs_why(c, h), why);
	else
		pending_arm(w, c);
}

/*
 * The accept thread is named, so that top -H and the tests can tell it
 * apart. It keeps the application's priority: run nicer, it was preempted
 * while holding w->mu during connect bursts, and the leader then waited
 * for it (priority inversion: a round trip's p99 went from 0.6 to 3.8 ms
 * in bench/traffic.sh's burst).
 */
static void name_thread(void)
{
	pthread_setname_np(pthread_self(), "zap-handshake");
}

/*
 * After a burst of TLS handshakes (TCP_TLS_PENDING_MAX were under way at
 * once), once none is left: hand the memory their sessions took back to
 * the system. The C library keeps freed heap for reuse, and a flood of
 * half-open handshakes would otherwise leave the endpoint tens of MiB
 * larger for good (glibc: malloc_trim(); elsewhere nothing to do).
 */
static void give_back(struct tcp_wire *w)
{
	if (w->tls && w->npending >= TCP_TLS_PENDING_MAX / 4)
		w->hs_burst = true;
	if (!w->hs_burst || w->npending)
		return;
	w->hs_burst = false;
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}

/*
 * The accept thread: new connections, the handshakes under way (in
 * hs_epfd, so a round costs what is ready, not how many wait: a burst of
 * thousands of connects is taken in batches) and the side channels of the
 * same-host upgrade.
 */
void *tw_accept_main(void *arg)
{
	struct tcp_wire *w = arg;
	struct pollfd pfd[3 + 2 + TCP_SHM_PENDING]; /* tw_shm_accept_fds() */
	struct epoll_event ev[TCP_EPOLL_BATCH];
	bool backoff = false;

	name_thread();

	while (!atomic_load(&w->shut)) {
		size_t n = 0;
		uint64_t now = now_ms(), next = now + w->hs_timeout_ms;
		pfd[n++] = (struct pollfd){ .fd = w->stop_fd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = backoff ? -1 : w->lfd,
					    .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = w->hs_epfd, .events = POLLIN };
		/* The oldest handshake's deadline comes first. */
		if (w->pending_tail && w->pending_tail->hs_deadline_ms < next)
			next = w->pending_tail->hs_deadline_ms;
		size_t shm_first = n;
		n += tw_shm_accept_fds(w, pfd + n, &next);
		int timeout = next > now ? (int)(next - now) : 0;
		if (backoff && timeout > 100)
			timeout = 100;
		backoff = false;
		int r = poll(pfd, n, timeout);
		if (r < 0 && errno != EINTR) {
			w->host->log(ZAP_LOG_ERROR, w->dom, "poll: %s", strerror(errno));
			poll(NULL, 0, 100);
			continue;
		}
		if (atomic_load(&w->shut))
			break;
		if (pfd[2].revents) {
			int k = epoll_wait(w->hs_epfd, ev, TCP_EPOLL_BATCH, 0);
			for (int i = 0; i < k; i++)
				pending_ready(w, ev[i].data.ptr);
		}
		now = now_ms();
		while (w->pending_tail && w->pending_tail->hs_deadline_ms <= now) {
			struct tcp_conn *c = w->pending_tail;
			pending_drop(
				w, c, ZAP_LOG_INFO, ZAP_CLOSE_HANDSHAKE,
				c->tls && !c->tls_ok
					? "TLS handshake not complete within the handshake timeout"
					: "no HELLO within the handshake timeout");
		}
		tw_shm_accept_ready(w, pfd + shm_first, n - shm_first);
		if (pfd[1].revents)
			accept_ready(w, &backoff);
		give_back(w);
	}
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* Dial                                                                      */
/* ------------------------------------------------------------------------ */

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

/*
 * Dial from the host we listen on, when we listen on one: our HELLO
 * claims that host, and the acceptor checks it against the source
 * (an endpoint on 127.0.0.2 would otherwise dial from 127.0.0.1). Best
 * effort: a family mismatch or a failed bind leaves the kernel's choice,
 * and the acceptor then refuses us with a reason.
 */
static bool bind_source(const struct tcp_wire *w, int fd, int family)
{
	struct zaddr b;
	struct sockaddr_storage ss = { 0 };
	socklen_t sl = 0;

	if (zaddr_parse(w->bound, &b) || b.wildcard)
		return false;
	if (family == AF_INET && b.kind == ZADDR_IPV4) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		if (inet_pton(AF_INET, b.host, &s4->sin_addr) == 1)
			sl = sizeof(*s4);
	} else if (family == AF_INET6 && b.kind == ZADDR_IPV6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		if (inet_pton(AF_INET6, b.host, &s6->sin6_addr) == 1)
			sl = sizeof(*s6);
	}
#ifdef IP_BIND_ADDRESS_NO_PORT
	int one = 1;
	if (sl) /* pick the port at connect, by the whole 4-tuple */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
#endif
	if (sl && bind(fd, (struct sockaddr *)&ss, sl) < 0) {
		w->host->log(ZAP_LOG_DEBUG, w->dom, "cannot dial from %s: %s", b.host,
			     strerror(errno));
		return false;
	}
	return sl != 0;
}

/*
 * connect() failed with @e from a socket bound to our listen host: EINVAL
 * there is a listener on a loopback address asked to reach another host,
 * which no route from that source can. Say so, as unreachable, instead of
 * "Invalid argument". (EADDRNOTAVAIL is no free local port: not this.)
 */
static int dial_refused(const struct tcp_wire *w, const char *peer, int e, bool bound)
{
	struct zaddr b;

	if (!bound || e != EINVAL || zaddr_parse(w->bound, &b))
		return w->host->fail(-e, "%s: connect to %s: %s%s", w->dom, peer,
				     strerror(e),
				     e == ECONNREFUSED ? " (nothing listens there)" : "");
	return w->host->fail(-ENETUNREACH,
			     "%s: bound to %s: cannot reach %s from there (%s); listen "
			     "on an address of the interface that reaches it, or on "
			     "0.0.0.0",
			     w->dom, b.host, peer, strerror(e));
}

static int dial_one(struct tcp_wire *w, const char *peer, const struct addrinfo *ai,
		    struct zap_ctx *ctx, int *out)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			ai->ai_protocol);
	if (fd < 0)
		return w->host->fail(-errno, "%s: socket: %s", w->dom, strerror(errno));
	tw_tune_socket(fd);
	bool bound = bind_source(w, fd, ai->ai_family);
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS) {
			int e = errno;
			close(fd);
			return dial_refused(w, peer, e, bound);
		}
		int r = tw_wait_fd(w, fd, POLLOUT, ctx, -1);
		if (r) {
			close(fd);
			return r == -ECANCELED || r == -ETIMEDOUT || r == -ESHUTDOWN
				       ? r
				       : w->host->fail(r, "%s: connect to %s: %s", w->dom,
						       peer, strerror(-r));
		}
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr) {
			close(fd);
			return dial_refused(w, peer, soerr, bound);
		}
	}
	tw_tune_same_host(w, fd);
	*out = fd;
	return 0;
}

/* Resolve @peer and connect to the first address that answers. 0 and
 * *@fd, or a negative errno with a reason. */
static int dial_connect(struct tcp_wire *w, const char *peer, struct zap_ctx *ctx,
			int *fd, struct sockaddr_storage *sa, socklen_t *salen)
{
	struct zaddr a;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int r;

	if (!zaddr_parse(peer, &a) && a.kind == ZADDR_UNIX)
		return tw_unix_connect(w, peer, &a, ctx, fd, sa, salen);
	if (zaddr_parse(peer, &a) || !a.port_num)
		return w->host->fail(-EINVAL,
				     "%s: malformed peer address \"%s\" (want host:port, "
				     "[v6]:port, unix:/path or unix:@name)",
				     w->dom, peer);
	r = getaddrinfo(a.host, a.port, &hints, &res);
	if (r)
		return w->host->fail(r == EAI_NONAME || r == EAI_AGAIN ? -EHOSTUNREACH
								       : -EINVAL,
				     "%s: cannot resolve %s: %s", w->dom, a.host,
				     gai_strerror(r));
	r = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		r = dial_one(w, peer, ai, ctx, fd);
		if (!r && ai->ai_addrlen <= sizeof(*sa)) {
			memcpy(sa, ai->ai_addr, ai->ai_addrlen);
			*salen = ai->ai_addrlen;
		}
		if (!r || r == -ECANCELED || r == -ETIMEDOUT || r == -ESHUTDOWN)
			break;
	}
	freeaddrinfo(res);
	return r;
}

static void dial_done(struct tcp_wire *w, struct tcp_dial *d)
{
	for (struct tcp_dial **pp = &w->dials; *pp; pp = &(*pp)->next)
		if (*pp == d) {
			*pp = d->next;
			return;
		}
}

/*
 * The dialer's TLS handshake on @c, until @deadline_ms (the wire's
 * handshake limit) or the ctx. @want: the key the peer string requires,
 * or NULL. 0, or a negative errno with a reason: -EACCES for a peer that
 * is not trusted (or not @want), or that refused us.
 */
static int dial_tls(struct tcp_wire *w, struct tcp_conn *c, const char *peer,
		    const char *want, struct zap_ctx *ctx, uint64_t deadline_ms)
{
	char why[400];
	int r = tw_tls_conn_new(w, c, false, want, why, sizeof(why));

	if (r) {
		c->why = ZAP_CLOSE_TLS;
		return w->host->fail(r, "%s: %s: %s", w->dom, peer, why);
	}
	for (;;) {
		r = tw_tls_step(c, why, sizeof(why));
		if (r == 1)
			return 0;
		if (r < 0) {
			c->why = ZAP_CLOSE_TLS;
			w->host->log(ZAP_LOG_WARN, w->dom, "TLS with %s failed: %s", peer,
				     why);
			return w->host->fail(r, "%s: TLS with %s failed: %s", w->dom,
					     peer, why);
		}
		uint64_t now = now_ms();
		if (now >= deadline_ms)
			return w->host->fail(
				-ETIMEDOUT,
				"%s: %s did not complete the TLS handshake in time",
				w->dom, peer);
		r = tw_wait_fd(w, c->fd, c->hs_events, ctx, (int)(deadline_ms - now));
		if (r == -ETIMEDOUT && !w->host->ctx_err(ctx))
			continue;
		if (r)
			return r;
	}
}

/*
 * Connect to @peer offering wire version @ver, exchange HELLOs, register.
 * mu not held. The peer's handshake thread answers independently of its
 * application, so this waits about one round trip, not for the peer to
 * call zap_recv(). *@closed: the peer closed the connection instead of
 * answering our HELLO, as a peer that speaks only an older version does.
 */
static int dial_ver(struct tcp_wire *w, const char *peer, struct zap_ctx *ctx,
		    unsigned ver, bool *closed)
{
	struct tcp_conn *c = NULL;
	struct sockaddr_storage sa = { 0 };
	socklen_t salen = 0;
	int fd = -1, r;
	char addr[ZAP_PEER_MAX];
	const char *want = strchr(peer, '#');

	/* "host:port#sha256:<hex>": only that key may answer (WIRE.md). */
	size_t al = want ? (size_t)(want - peer) : strlen(peer);
	if (al >= sizeof(addr))
		return w->host->fail(-EINVAL, "%s: peer address too long", w->dom);
	memcpy(addr, peer, al);
	addr[al] = '\0';
	if (want)
		want++;
	r = dial_connect(w, addr, ctx, &fd, &sa, &salen);
	if (r)
		return r;

	tw_count(&w->st_dialed, 1);
	c = calloc(1, sizeof(*c));
	if (!c) {
		tw_count_close(w, ZAP_CLOSE_OTHER);
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	tw_conn_set_src(c, (struct sockaddr *)&sa, salen);
	c->local = sa.ss_family == AF_UNIX;
	c->dialed = true;
	c->ver = (unsigned char)ver;
	c->nonce = tw_rand64();
	struct tcp_dial dial = { .nonce = c->nonce };
	tw_lock(w);
	dial.next = w->dials;
	w->dials = &dial;
	tw_unlock(w);
	uint64_t deadline = now_ms() + w->hs_timeout_ms;
	if (w->tls) {
		r = dial_tls(w, c, peer, want, ctx, deadline);
		if (r)
			goto fail;
	}
	unsigned char hb[TCP_HDR + TCP_HELLO_MAX];
	size_t hn = hello_build(w, c, hb);
	/* A fresh socket's send buffer always takes a HELLO. */
	struct iovec hv = { hb, hn };
	ssize_t k = tw_io_send(c, &hv, 1);
	if (k != (ssize_t)hn) {
		int e = k < 0 ? errno : EPIPE;
		char why[400];
		/* A TLS peer that refused us closed after its alert; on a
		 * Unix socket our write fails before we read it: read it. */
		if (c->tls && hello_read(w, c, why, sizeof(why)) == -EACCES) {
			w->host->log(ZAP_LOG_WARN, w->dom, "handshake with %s failed: %s",
				     peer, why);
			r = w->host->fail(-EACCES, "%s: handshake with %s failed: %s",
					  w->dom, peer, why);
			goto fail;
		}
		r = w->host->fail(-e, "%s: send HELLO to %s: %s", w->dom, peer,
				  k < 0 ? tw_io_err(c, e) : "short write");
		goto fail;
	}
	for (;;) {
		char why[400];
		int h = hello_read(w, c, why, sizeof(why));
		if (h == 1)
			break;
		if (h < 0) {
			*closed = h == -EPIPE || h == -ECONNRESET;
			if (h == -EACCES)
				w->host->log(ZAP_LOG_WARN, w->dom,
					     "handshake with %s failed: %s", peer, why);
			r = w->host->fail(h == -EPIPE ? -ECONNRESET : h,
					  "%s: handshake with %s failed: %s", w->dom,
					  peer, why);
			goto fail;
		}
		uint64_t now = now_ms();
		if (now >= deadline) {
			r = w->host->fail(-ETIMEDOUT,
					  "%s: %s did not answer the handshake", w->dom,
					  peer);
			goto fail;
		}
		r = tw_wait_fd(w, fd, POLLIN, ctx, (int)(deadline - now));
		if (r == -ETIMEDOUT && !w->host->ctx_err(ctx))
			continue; /* our own handshake limit; checked above */
		if (r)
			goto fail;
	}

	tw_tls_log_up(w, c); /* before the leader may read c */
	/* Same host: move to shared memory if the peer may (tcp_shm.c);
	 * before registering, so that nothing else uses c meanwhile. */
	tw_shm_dial(w, c, deadline, ctx);
	tw_lock(w);
	r = tw_conn_register(w, c, peer);
	dial_done(w, &dial);
	tw_unlock(w);
	if (r)
		goto fail_freed;
	w->host->log(ZAP_LOG_DEBUG, w->dom, "connected to %s (%s)", peer, c->raddr);
	return 0;
fail:
	tw_lock(w);
	dial_done(w, &dial);
	tw_unlock(w);
fail_freed:;
	/* The sender's own ctx ended it (-ETIMEDOUT is also the handshake
	 * limit's code): not the peer's doing. */
	int why = w->host->ctx_err(ctx) ? ZAP_CLOSE_SEND_ABORTED : tw_hs_why(c, r);
	tw_count_close(w, why);
	tw_event(w, ZAP_EVENT_REFUSED, why, c, peer,
		 ZAP_HOST_HAS(w->host, last_error) ? w->host->last_error() : NULL);
	tw_conn_free(c);
	return r;
}

int tw_dial(struct tcp_wire *w, const char *peer, struct zap_ctx *ctx)
{
	bool closed = false;
	int r = dial_ver(w, peer, ctx, TCP_VERSION, &closed);

	/* A peer of version 2 closes at a HELLO of version 3 ("unsupported
	 * wire version"): offer 2 once, on a new connection (WIRE.md). */
	if (r && closed && !w->host->ctx_err(ctx) && !atomic_load(&w->shut)) {
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "%s closed at a HELLO of wire version %u; offering %u", peer,
			     TCP_VERSION, TCP_VERSION_MIN);
		closed = false;
		r = dial_ver(w, peer, ctx, TCP_VERSION_MIN, &closed);
	}
	return r;
}
