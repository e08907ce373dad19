/* SPDX-License-Identifier: MIT */
/*
 * The wire's interface (tcp_wire.h): open and close, the address, recv,
 * kicks; the send path is tcp_send.c.
 *
 * Shared state: struct tcp_wire (tcp_int.h, whose comment covers threads
 * and locking). Senders own a connection's tx side while c->tx_busy; send
 * and recv wait through tw_wait_step().
 */
#include "tcp_int.h"
#include "zap-addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Receive                                                                   */
/* ------------------------------------------------------------------------ */

int tcp_wire_recv(struct tcp_wire *w, struct zap_ctx *ctx, struct zap_msg **out)
{
	int err = 0;

	tw_lock(w);
	if (!w->qhead) {
		struct tcp_waiter me = { .ctx_fd = -1, .out_fd = -1 };
		do {
			err = tw_wait_step(w, &me, ctx);
			if (err)
				goto out;
		} while (!w->qhead);
	}
	if (atomic_load(&w->shut)) {
		err = -ESHUTDOWN;
		goto out;
	}
	struct tcp_rx_msg *m = w->qhead;
	w->qhead = m->next;
	w->qbytes -= m->msg.len;
	w->qmsgs--;
	if (w->q_full && !tw_rxq_full(w)) {
		/* Room again: the leader reads connections again. */
		w->q_full = false;
		if (w->leader)
			tw_kick(w);
	}
	if (!w->qhead)
		w->qtail = NULL;
	else
		tw_notify(w, false); /* more for other receivers */
	m->next = NULL;
	*out = &m->msg;
out:
	tw_unlock(w);
	return err;
}

/* ------------------------------------------------------------------------ */
/* Open / close                                                              */
/* ------------------------------------------------------------------------ */

/* The address others can reach a wildcard listener at: the source address
 * of the default route (no packet is sent), else loopback. */
static void wildcard_sendable(int family, uint16_t port, char *buf, size_t len)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(9);
		inet_pton(AF_INET6, "2001:db8::1", &s6->sin6_addr);
		sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(9);
		inet_pton(AF_INET, "192.0.2.1", &s4->sin_addr);
		sl = sizeof(*s4);
	}
	if (fd >= 0 && connect(fd, (struct sockaddr *)&ss, sl) == 0) {
		struct sockaddr_storage me;
		socklen_t ml = sizeof(me);
		if (getsockname(fd, (struct sockaddr *)&me, &ml) == 0) {
			char a[ZAP_PEER_MAX];
			struct zaddr z;
			if (!zaddr_format((struct sockaddr *)&me, ml, port, a,
					  sizeof(a)) &&
			    !zaddr_parse(a, &z) && !z.wildcard) {
				snprintf(buf, len, "%s", a);
				close(fd);
				return;
			}
		}
	}
	if (fd >= 0)
		close(fd);
	snprintf(buf, len, family == AF_INET6 ? "[::1]:%u" : "127.0.0.1:%u",
		 (unsigned)port);
}

static int wire_listen(struct tcp_wire *w, const char *listen_addr)
{
	struct zaddr a, b;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int r, fd = -1, one = 1;

	if (zaddr_parse(listen_addr, &a))
		return w->host
			->fail(-EINVAL,
			       "%s: malformed listen address \"%s\" (ZAP_LISTEN; want "
			       "host:port, unix:/path or unix:@name)",
			       w->dom, listen_addr);
	if (a.kind == ZADDR_UNIX)
		return tw_unix_listen(w, &a);
	bool any4 = a.wildcard && a.kind == ZADDR_IPV4;
	bool any6 = a.wildcard && a.kind == ZADDR_IPV6;
	r = getaddrinfo(any4 ? NULL : a.host, a.port, &hints, &res);
	if (r)
		return w->host->fail(-EINVAL, "%s: cannot resolve listen address %s: %s",
				     w->dom, listen_addr, gai_strerror(r));
	r = -EADDRNOTAVAIL;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		/* A bare wildcard binds IPv4 any, which every peer string
		 * form reaches; "[::]" asks for dual-stack explicitly. */
		if (any6 ? ai->ai_family != AF_INET6 : (any4 && ai->ai_family != AF_INET))
			continue;
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6) {
			int zero = 0;
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		}
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, SOMAXCONN) == 0) {
			r = 0;
			break;
		}
		r = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (r)
		return w->host->fail(r, "%s: cannot listen on %s: %s", w->dom,
				     listen_addr, strerror(-r));

	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	zaddr_format((struct sockaddr *)&ss, sl, -1, w->bound, sizeof(w->bound));
	if (zaddr_parse(w->bound, &b) || b.wildcard)
		wildcard_sendable(ss.ss_family, b.port_num, w->addr, sizeof(w->addr));
	else
		snprintf(w->addr, sizeof(w->addr), "%s", w->bound);
	w->lfd = fd;
	return 0;
}

/*
 * The wire's variables are read through libzap's registry
 * (zap_host.config_u64: grammar, range, default and setuid policy are
 * declared there once): 1 when set, 0 for the default, or a negative errno
 * after the registry recorded the reason, naming the variable (the core
 * prefixes the transport's name when the open fails).
 */

/* ZAP_TCP_SPIN_US: microseconds to busy-poll before sleeping (0: never
 * spin). Unset: learned from traffic (tcp_spin.c). */
static int spin_setting(const struct zap_host *host, const char *dom, struct tcp_spin *s)
{
	uint64_t n;
	int rc = host->config_u64(TCP_SPIN_ENV, &n);

	tw_spin_init(s, false, 0);
	if (rc < 0)
		return rc;
	if (rc)
		tw_spin_init(s, true, (unsigned)n);
	return 0;
}
/* ZAP_TCP_SAME_HOST_CC: "auto" (choice 0), or "keep" the host's
 * congestion control on connections within this host too
 * (tw_tune_same_host()). */
static int same_host_cc_setting(const struct zap_host *host, const char *dom, bool *keep)
{
	uint64_t n;
	int rc = host->config_u64(TCP_SAME_HOST_CC_ENV, &n);

	*keep = rc >= 0 && n == 1;
	return rc < 0 ? rc : 0;
}

/* A limit from the registry, which bounds it (@out is unsigned). */
static int env_limit(const struct zap_host *host, const char *dom, const char *name,
		     unsigned *out)
{
	uint64_t n;
	int rc = host->config_u64(name, &n);

	*out = rc < 0 ? 0 : (unsigned)n;
	return rc < 0 ? rc : 0;
}

/*
 * Connections (established and in handshake) the wire may hold: the
 * descriptor limit less TCP_FD_HEADROOM and a quarter, for the
 * application and our own eventfds; at least 8.
 */
static size_t conn_limit(void)
{
	struct rlimit rl;
	uint64_t n = 1 << 20;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY)
		n = rl.rlim_cur;
	n = n > TCP_FD_HEADROOM ? (n - TCP_FD_HEADROOM) * 3 / 4 : 0;
	return n < 8 ? 8 : (size_t)n;
}

/*
 * tcp_wire_open()'s first step: @w's fields from @args, every descriptor
 * -1 (so that tcp_wire_destroy() may run from here on), its lock and
 * condition. A step of its own to keep tcp_wire_open() short.
 */
static void wire_init(struct tcp_wire *w, const struct tcp_wire_args *args)
{
	const struct zap_host *host = args->host;

	w->host = host;
	w->dom = args->domain;
	w->alloc = args->alloc;
	w->no_coalesce = args->no_coalesce;
	w->max_msg = args->max_msg_size;
	/* A length must fit a size_t with the message record around it: on
	 * a 32-bit build, 4 GiB or more would truncate in the cast to the
	 * allocator. Clamp, and say so. */
	if (w->max_msg > (uint64_t)(SIZE_MAX / 2)) {
		w->max_msg = (uint64_t)(SIZE_MAX / 2);
		host->log(ZAP_LOG_WARN, args->domain,
			  "maximum message size %llu does not fit this build; using %llu",
			  (unsigned long long)args->max_msg_size,
			  (unsigned long long)w->max_msg);
	}
	w->id = tw_rand64();
	w->hash_seed = tw_rand64();
	tw_route_gen_next(w);
	w->lfd = w->kick_fd = w->stop_fd = w->shm_lfd = w->shm_linger_fd = w->epfd =
		w->hs_epfd = -1;
	atomic_init(&w->shut, false);
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
}

/*
 * tcp_wire_open()'s settings: the environment's limits, then TLS, the
 * side channel and the events ring, stopping at the first failure (its
 * error). A step of its own to keep tcp_wire_open() short.
 */
static int wire_settings(struct tcp_wire *w, const struct tcp_wire_args *args)
{
	const struct zap_host *host = args->host;
	int r;

	r = ZAP_HOST_HAS(host, config_u64)
		    ? 0
		    : host->fail(-ENOTSUP, "%s: libzap is too old (needs plugin ABI 1.4)",
				 w->dom);
	if (!r)
		r = spin_setting(host, w->dom, &w->spin);
	if (!r)
		r = env_limit(host, w->dom, TCP_HS_ENV, &w->hs_timeout_ms);
	if (!r)
		r = env_limit(host, w->dom, TCP_PENDING_ENV, &w->pending_max);
	if (!r)
		r = env_limit(host, w->dom, TCP_STALL_ENV, &w->stall_ms);
	if (!r)
		r = host->config_u64(TCP_MIN_RATE_ENV, &w->min_rate) < 0 ? -EINVAL : 0;
	if (!r)
		r = host->config_u64(TCP_PARTIAL_ENV, &w->partial_max) < 0 ? -EINVAL : 0;
	if (!r)
		r = host->config_u64(TCP_RXQ_ENV, &w->rxq_max) < 0 ? -EINVAL : 0;
	if (!r)
		r = env_limit(host, w->dom, TCP_IDLE_ENV, &w->idle_ms);
	if (!r)
		r = same_host_cc_setting(host, w->dom, &w->keep_cc);
	w->conn_max = conn_limit();
	if (!r)
		r = tw_tls_open(w, args);
	if (!r)
		r = tw_shm_open(w);
	if (!r && tw_events_open(w))
		r = host->fail(-ENOMEM, "%s: out of memory", w->dom);
	return r;
}

int tcp_wire_open(const struct tcp_wire_args *args, struct tcp_wire **out)
{
	const struct zap_host *host = args->host;
	struct tcp_wire *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return host->fail(-ENOMEM, "%s: out of memory", args->domain);
	wire_init(w, args);
	r = wire_settings(w, args);
	if (r)
		goto fail;

	w->kick = calloc(1, sizeof(*w->kick));
	if (!w->kick) {
		r = host->fail(-ENOMEM, "%s: out of memory", w->dom);
		goto fail;
	}
	atomic_init(&w->kick->refs, 1);
	w->kick->fd = w->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->kick_fd < 0 || w->stop_fd < 0) {
		r = host->fail(-errno, "%s: eventfd: %s", w->dom, strerror(errno));
		goto fail;
	}
	r = tw_ready_open(w);
	if (r) {
		r = host->fail(r, "%s: epoll_create1: %s", w->dom, strerror(-r));
		goto fail;
	}
	r = wire_listen(w, args->listen);
	if (r)
		goto fail;
	/* Under TLS every peer string carries '#' and the key after the
	 * address (WIRE.md, "TLS"); a longer address would open, and then
	 * no peer could take our answer. */
	if (w->tls && strlen(w->addr) + ZTLS_FP_LEN >= ZAP_PEER_MAX) {
		r = host->fail(
			-EINVAL,
			"%s: listen address %s too long for TLS: a peer string holds "
			"at most %d bytes of address before \"#sha256:<hex>\"",
			w->dom, w->addr, ZAP_PEER_MAX - ZTLS_FP_LEN - 1);
		goto fail;
	}
	r = pthread_create(&w->acc, NULL, tw_accept_main, w);
	if (r) {
		r = host->fail(-r, "%s: cannot start the handshake thread: %s", w->dom,
			       strerror(r));
		goto fail;
	}
	w->acc_started = true;
	host->log(ZAP_LOG_DEBUG, w->dom, "listening on %s (reachable as %s)", w->bound,
		  w->addr);
	*out = w;
	return 0;
fail:
	tcp_wire_destroy(w);
	return r;
}

void tcp_wire_shutdown(struct tcp_wire *w)
{
	uint64_t one = 1;
	ssize_t k;

	if (!w)
		return;
	atomic_store(&w->shut, true);
	k = write(w->stop_fd, &one, sizeof(one));
	(void)k;
	tw_lock(w);
	pthread_cond_broadcast(&w->cond);
	tw_unlock(w);
}

void tcp_wire_destroy(struct tcp_wire *w)
{
	if (!w)
		return;
	if (w->acc_started) {
		tcp_wire_shutdown(w);
		pthread_join(w->acc, NULL);
	}
	/* Counted for completeness: every connection ends once (tcp_int.h,
	 * "Counters"), though no handle is left to read these. */
	while (w->pending.newest) {
		struct tcp_conn *c = tw_pend_conn(w->pending.newest);
		zconn_pend_del(&w->pending, &c->pend);
		tw_count_close(w, ZAP_CLOSE_SHUTDOWN);
		tw_conn_free(c);
	}
	while (w->conns) {
		struct tcp_conn *c = w->conns;
		w->conns = c->next;
		if (!c->dead)
			c->why = ZAP_CLOSE_SHUTDOWN;
		tw_conn_count_gone(w, c);
		tw_conn_free(c);
	}
	while (w->peers) {
		struct tcp_peer *p = w->peers;
		w->peers = p->next;
		free(p);
	}
	while (w->routes) {
		struct tcp_route *r = w->routes;
		w->routes = r->next;
		free(r);
	}
	free(w->rtab);
	free(w->ptab);
	/* The last word on them: no handle is left to ask zap_stats(). */
	if (w->qmsgs)
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "dropping %zu received messages nobody took", w->qmsgs);
	while (w->qhead) {
		struct tcp_rx_msg *m = w->qhead;
		w->qhead = m->next;
		m->msg.release(&m->msg);
	}
	if (w->lfd >= 0)
		close(w->lfd);
	tw_shm_close(w);
	tw_unix_unlink(w);
	tcp_kick_put(w->kick); /* closes kick_fd unless a holder remains */
	if (w->stop_fd >= 0)
		close(w->stop_fd);
	tw_ready_close(w);
	free(w->pfd);
	free(w->slot);
	tw_tls_close(w);
	tw_events_close(w);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

int tcp_wire_address(const struct tcp_wire *w, char *buf, size_t len)
{
	if (strlen(w->addr) >= len)
		return -ENOSPC;
	memcpy(buf, w->addr, strlen(w->addr) + 1);
	return 0;
}

int tcp_wire_path(struct tcp_wire *w, const char *peer, char *buf, size_t len)
{
	int r = -ENOTCONN;

	tw_lock(w);
	struct tcp_route *rt = tw_route_find(w, peer);
	struct tcp_conn *c = rt && rt->peer ? rt->peer->tx : NULL;
	if (c && !c->dead) {
		const char *p = tw_conn_path(c);
		r = strlen(p) < len ? 0 : -ENOSPC;
		if (!r)
			memcpy(buf, p, strlen(p) + 1);
	}
	tw_unlock(w);
	return r;
}

uint64_t tcp_wire_max_msg(const struct tcp_wire *w)
{
	return w->max_msg;
}

void tcp_wire_stats(const struct tcp_wire *w, struct tcp_wire_stats *out)
{
	/* The counters are atomics: a const wire is read, not changed. */
	struct tcp_wire *mw = (struct tcp_wire *)w;
	memory_order o = memory_order_relaxed;

	out->tx_calls = atomic_load_explicit(&mw->st_tx_calls, o);
	out->tx_frames = atomic_load_explicit(&mw->st_tx_frames, o);
	out->rx_reads = atomic_load_explicit(&mw->st_rx_reads, o);
	out->rx_frames = atomic_load_explicit(&mw->st_rx_frames, o);
}

void tcp_wire_kick(struct tcp_wire *w)
{
	tw_kick(w);
}

struct tcp_kick *tcp_wire_kick_get(struct tcp_wire *w)
{
	atomic_fetch_add(&w->kick->refs, 1);
	return w->kick;
}

void tcp_kick(struct tcp_kick *k)
{
	uint64_t one = 1;

	if (k && k->fd >= 0) {
		ssize_t r = write(k->fd, &one, sizeof(one));
		(void)r; /* a full counter is readable anyway */
	}
}

void tcp_kick_put(struct tcp_kick *k)
{
	if (!k || atomic_fetch_sub(&k->refs, 1) != 1)
		return;
	if (k->fd >= 0)
		close(k->fd);
	free(k);
}
