/* SPDX-License-Identifier: MIT */
/*
 * The dialer's side of the handshake (WIRE.md): resolve and connect
 * (a source address when one is set), TLS when it is on, send our HELLO
 * and wait for the answer (offering version 3, falling back to 2), then
 * register the connection (tw_conn_register(), the tie-break). The
 * HELLO's codec and reader are tcp_handshake.c's.
 *
 * Shared state: the dialing sender owns the connection's hs buffer until
 * the connection joins the shared table under w->mu.
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
#include <unistd.h>

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
 * dial_ver()'s HELLO to @peer on the new connection @c. 0, or the error
 * (reported through host->fail()): a TLS peer's refusal (its alert read)
 * rather than the write's failure. A step of its own to keep dial_ver()
 * short.
 */
static int dial_hello_send(struct tcp_wire *w, struct tcp_conn *c, const char *peer)
{
	unsigned char hb[TCP_HDR + TCP_HELLO_MAX];
	size_t hn = tw_hello_build(w, c, hb);
	/* A fresh socket's send buffer always takes a HELLO. */
	struct iovec hv = { hb, hn };
	ssize_t k = tw_io_send(c, &hv, 1);
	if (k != (ssize_t)hn) {
		int e = k < 0 ? errno : EPIPE;
		char why[400];
		/* A TLS peer that refused us closed after its alert; on a
		 * Unix socket our write fails before we read it: read it. */
		if (c->tls && tw_hello_read(w, c, why, sizeof(why)) == -EACCES) {
			w->host->log(ZAP_LOG_WARN, w->dom, "handshake with %s failed: %s",
				     peer, why);
			return w->host->fail(-EACCES, "%s: handshake with %s failed: %s",
					     w->dom, peer, why);
		}
		return w->host->fail(-e, "%s: send HELLO to %s: %s", w->dom, peer,
				     k < 0 ? tw_io_err(c, e) : "short write");
	}
	return 0;
}

/*
 * dial_ver()'s wait for @peer's HELLO on @c (socket @fd) until
 * @deadline_ms or the ctx ends. 0 once it is read and checked, else the
 * error (reported through host->fail() where the peer's doing), with
 * *@closed when the peer closed instead of answering. A step of its own
 * to keep dial_ver() short.
 */
static int dial_hello_wait(struct tcp_wire *w, struct tcp_conn *c, int fd,
			   const char *peer, struct zap_ctx *ctx, uint64_t deadline,
			   bool *closed)
{
	for (;;) {
		char why[400];
		int h = tw_hello_read(w, c, why, sizeof(why));
		if (h == 1)
			return 0;
		if (h < 0) {
			*closed = h == -EPIPE || h == -ECONNRESET;
			if (h == -EACCES)
				w->host->log(ZAP_LOG_WARN, w->dom,
					     "handshake with %s failed: %s", peer, why);
			return w->host->fail(h == -EPIPE ? -ECONNRESET : h,
					     "%s: handshake with %s failed: %s", w->dom,
					     peer, why);
		}
		uint64_t now = now_ms();
		if (now >= deadline) {
			return w->host->fail(-ETIMEDOUT,
					     "%s: %s did not answer the handshake",
					     w->dom, peer);
		}
		int r = tw_wait_fd(w, fd, POLLIN, ctx, (int)(deadline - now));
		if (r == -ETIMEDOUT && !w->host->ctx_err(ctx))
			continue; /* our own handshake limit; checked above */
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
	atomic_init(&c->path, &tw_path_sock); /* tcp_path.h */
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
	r = dial_hello_send(w, c, peer);
	if (r)
		goto fail;
	r = dial_hello_wait(w, c, fd, peer, ctx, deadline, closed);
	if (r)
		goto fail;

	tw_tls_log_up(w, c); /* before the leader may read c */
	/* Same host: move to shared memory if the peer may (tcp_shm_setup.c);
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
	unsigned ver = TCP_VERSION;
	int r = dial_ver(w, peer, ctx, ver, &closed);

	/* A peer of an earlier version closes at a HELLO of a later one
	 * ("unsupported wire version"): offer the one before, on a new
	 * connection each, down to TCP_VERSION_MIN (WIRE.md). */
	while (r && closed && ver > TCP_VERSION_MIN && !w->host->ctx_err(ctx) &&
	       !atomic_load(&w->shut)) {
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "%s closed at a HELLO of wire version %u; offering %u", peer,
			     ver, ver - 1);
		closed = false;
		r = dial_ver(w, peer, ctx, --ver, &closed);
	}
	return r;
}
