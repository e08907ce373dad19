/* SPDX-License-Identifier: MIT */
/*
 * The handshake's HELLO (built, read) and the accept thread (accepts,
 * reads HELLOs with a deadline, registers, answers). The dialer's side is
 * tcp_dial.c.
 *
 * Shared state: w->pending (a struct zconn_pend_set, zap-conn.h) belongs
 * to the accept thread alone; a connection joins the shared table only
 * through tw_conn_register() under w->mu. A connection's hs buffer belongs
 * to whoever runs its handshake (the accept thread, or the dialing
 * sender).
 */
#include "tcp_int.h"
#include "zap-addr.h"
#include "zap-conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
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

/* Our HELLO for @c into @buf (TCP_HELLO_MAX bytes); returns its length. */
size_t tw_hello_build(const struct tcp_wire *w, const struct tcp_conn *c,
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
 * tw_hello_read()'s reading: more of the HELLO into c->hs without
 * blocking, its header checked as soon as it is in. 1 complete, 0 need
 * more, else an error (reason in @why). A step of its own to keep
 * tw_hello_read() short.
 */
static int hello_fill(struct tcp_conn *c, char *why, size_t whylen)
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
				return 1;
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
}

/*
 * tw_hello_read()'s last checks of the peer's claims (instance id @id,
 * the address already in c->raddr), and under TLS the key appended to
 * c->raddr. 1, or -EPROTO with @why. A step of its own to keep
 * tw_hello_read() short.
 */
static int hello_claims(struct tcp_wire *w, struct tcp_conn *c, uint64_t id, char *why,
			size_t whylen)
{
	/* Loops: our own instance id or listen address, unless this really
	 * is a connection to ourselves (the nonce exchange proves it). */
	tw_lock(w);
	bool self = tw_self_proven(w, c);
	tw_unlock(w);
	if (!self && id == w->id) {
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
	if (c->tls && zconn_peer_join(c->raddr, c->fp, c->raddr, sizeof(c->raddr))) {
		snprintf(why, whylen, "address %.64s too long to carry a key", c->raddr);
		return -EPROTO;
	}
	return 1;
}

/*
 * Read more of a HELLO into c->hs without blocking.
 * Return: 1 complete, 0 need more, -EPIPE closed, other negative: protocol
 * error or socket error, reason in @why.
 */
int tw_hello_read(struct tcp_wire *w, struct tcp_conn *c, char *why, size_t whylen)
{
	int r = hello_fill(c, why, whylen);
	if (r != 1)
		return r;

	/* Parse: id, nonce, address; check the address against the
	 * connection (a wildcard host becomes the source). */
	struct tcp_hello hl;
	r = tcp_parse_hello(c->hs + TCP_HDR, c->hslen - TCP_HDR, &hl, why, whylen);
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

	return hello_claims(w, c, hl.id, why, whylen);
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
	return tw_hello_read(w, c, why, whylen);
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

/* @c joins the handshakes under way as the newest, with the deadline
 * and host bucket accept_ready() gave it. */
static void pending_add(struct tcp_wire *w, struct tcp_conn *c)
{
	zconn_pend_add(&w->pending, &c->pend);
	pending_arm(w, c);
}

static void pending_unlink(struct tcp_wire *w, struct tcp_conn *c)
{
	zconn_pend_del(&w->pending, &c->pend);
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
	size_t n = tw_hello_build(w, c, buf);
	int r;

	pending_unlink(w, c);

	w->host->log(ZAP_LOG_DEBUG, w->dom, "accepted connection from %s", c->raddr);
	tw_tls_log_up(w, c);
	/* The ends a dialer's shared-memory proof must name (tcp_shm_side.c). */
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
 * (established and in handshake, counted in ZCONN_HOST_BUCKETS) gives one
 * up: its oldest handshake (not proven yet), else its connection idle the
 * longest, however recently used. So many connections from a few hosts
 * cannot keep a newcomer from elsewhere out: they make the room. When no
 * host holds two, the oldest handshake goes, else the connection idle the
 * longest. The handshake's choice is the connection layer's
 * (zconn_pend_victim()), shared with gpudirect's bootstrap. Whether one
 * was closed.
 */
static bool make_room(struct tcp_wire *w, bool pending_only, const char *why)
{
	unsigned *count = calloc(ZCONN_HOST_BUCKETS, sizeof(*count));
	unsigned best;
	bool made = false;

	if (!count)
		return false;
	tw_lock(w);
	if (!pending_only)
		for (struct tcp_conn *c = w->conns; c; c = c->next)
			if (!c->dead)
				count[tw_conn_host(c)]++;
	/* Every handshake is evictable: none holds more than its socket. */
	struct zconn_pend *p = zconn_pend_victim(&w->pending, count, &best);
	struct tcp_conn *victim = p ? tw_pend_conn(p) : NULL;
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
 * accept() failed with @e. Short of descriptors or memory: leave the
 * backlog in the kernel and retry later (*@backoff) rather than spin on a
 * readable socket; out of descriptors, also free one to retry with (one
 * per pause: an evicted connection's descriptor is closed after the
 * leader's round), or a full table locks everyone out for good. A step of
 * its own to keep accept_ready() short.
 */
static void accept_failed(struct tcp_wire *w, int e, bool *backoff)
{
	if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
		bool made = (e == EMFILE || e == ENFILE) &&
			    make_room(w, false, "out of descriptors");
		w->host->log(ZAP_LOG_WARN, w->dom,
			     "accept: %s; pausing new connections%s", strerror(e),
			     made ? " (one closed to make room)" : "");
		*backoff = true;
	}
}

/*
 * Between two handshake steps of a batch: let a thread waiting for this
 * core run first. During a connect burst this thread has work for every
 * step of thousands of handshakes, and the scheduler lets a running thread
 * finish its time slice (up to a tick, 4 ms at HZ=250) before a thread it
 * woke (the application's, with a message in) gets the core; yielding
 * here bounds that wait to one step, and costs one system call when no
 * one waits. Never with w->mu held, so that nobody waits for the yielder.
 *
 * But a yield that took TCP_HS_YIELD_LONG_NS or more ran a thread that
 * uses its whole time slice, not one with a message to take: on a core
 * shared with busy threads every step then cost a slice, handshakes ran
 * seconds past their deadline and newcomers went unserved (the soak
 * test's flood beside two busy loops on two cores failed 8 runs of 8,
 * and passed 3 of 3 without the yield). So after such a yield, none for
 * TCP_HS_YIELD_PAUSE_NS.
 */
static void let_others_run(struct tcp_wire *w)
{
	uint64_t t0 = now_ns();

	if (t0 < w->hs_yield_after_ns)
		return;
	sched_yield();
	uint64_t t1 = now_ns();
	if (t1 - t0 >= TCP_HS_YIELD_LONG_NS)
		w->hs_yield_after_ns = t1 + TCP_HS_YIELD_PAUSE_NS;
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
		if (taken)
			let_others_run(w);
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(w->lfd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			accept_failed(w, errno, backoff);
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
		atomic_init(&c->path, &tw_path_sock); /* tcp_path.h */
		if (ss.ss_family == AF_UNIX) {
			tw_unix_accepted(c); /* the peer's credentials */
		} else {
			tw_conn_set_src(c, (struct sockaddr *)&ss, sl);
			tw_tune_socket(fd);
			tw_tune_same_host(w, fd);
		}
		c->pend.born = now_ms();
		c->pend.deadline = c->pend.born + w->hs_timeout_ms;
		c->pend.host = tw_conn_host(c); /* fixed at accept: source, credentials */
		c->pend.evictable = true;
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
		bool full = w->nconns + w->pending.count >= w->conn_max;
		tw_unlock(w);
		bool shed = zconn_pend_full(&w->pending);
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
	if (w->tls && w->pending.count >= TCP_TLS_PENDING_MAX / 4)
		w->hs_burst = true;
	if (!w->hs_burst || w->pending.count)
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
	/* The handshake cap, and under TLS the cap on those in flight (each
	 * holds a TLS session). */
	zconn_pend_init(&w->pending, w->tls && w->pending_max > TCP_TLS_PENDING_MAX
					     ? TCP_TLS_PENDING_MAX
					     : w->pending_max);

	while (!atomic_load(&w->shut)) {
		size_t n = 0;
		uint64_t now = now_ms(), next = now + w->hs_timeout_ms;
		pfd[n++] = (struct pollfd){ .fd = w->stop_fd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = backoff ? -1 : w->lfd,
					    .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = w->hs_epfd, .events = POLLIN };
		/* The oldest handshake's deadline comes first. */
		if (zconn_pend_next_deadline(&w->pending) < next)
			next = zconn_pend_next_deadline(&w->pending);
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
			for (int i = 0; i < k; i++) {
				if (i)
					let_others_run(w);
				pending_ready(w, ev[i].data.ptr);
			}
		}
		now = now_ms();
		for (struct zconn_pend *p; (p = zconn_pend_expired(&w->pending, now));) {
			struct tcp_conn *c = tw_pend_conn(p);
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
