/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect transport: RDMA from the NIC straight into GPU memory.
 *
 * One RC queue pair per peer, bootstrapped over a TCP connection to the
 * peer's listen address (gd_proto.h: the bootstrap message); the protocol
 * engine (gd_proto.c) runs credits, chunking and reassembly over the
 * verbs/CUDA backend (gd_verbs.h). This file is the network side of an
 * instance: the listen socket, the bootstrap handshake, dialling a peer on
 * the first send, and the accept thread. The ops, the peer table and the
 * progress thread are in gd_instance.c.
 *
 * Shared state: the device's pinned-bytes count (gd_dev_pinned(), atomic:
 * pairs reserve and release what they pin, gd_pin_plan()), nothing else
 * of its own. A dialled bootstrap
 * (handshake()) runs on a sender holding gd_tp.dial_mx; accepted ones run
 * concurrently on the accept thread (gd_hs.c: each with its own deadline,
 * a cap in flight, the pair built only after the peer's message is read
 * and its claimed address checked against the connection's source). Both
 * read the instance's fixed fields and hand the finished pair to
 * gd_add_peer(), which takes gd_tp.mx. gd_shutdown() interrupts
 * bootstraps in progress through gd_tp.wake.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap-plugin.h>

#include "gd_hs.h"
#include "gd_instance.h"
#include "zap-conn.h"
#include "zap-tls.h"
#include "gd_verbs.h"
#include "zap-addr.h"

/* ---- addresses ---------------------------------------------------------- */

/* A TCP address by the grammar the core and the TCP wire use (zap-addr.h):
 * 0 and @a, or -EINVAL. Unix-domain addresses are the TCP wire's; the
 * bootstrap is TCP. */
static int gd_parse(const char *s, struct zaddr *a)
{
	return zaddr_parse(s, a) || a->kind == ZADDR_UNIX ? -EINVAL : 0;
}

int gd_listen(struct gd_tp *t, const char *listen_addr)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct addrinfo *res = NULL;
	struct zaddr a, b = { 0 };
	int r, fd = -1, one = 1;
	bool any4;

	if (gd_parse(listen_addr, &a))
		return t->host->fail(-EINVAL,
				     "gpudirect: malformed listen address "
				     "\"%s\" (ZAP_LISTEN; want host:port)",
				     listen_addr);
	/* 0.0.0.0: every IPv4 address (getaddrinfo's passive NULL host). */
	any4 = a.wildcard && a.kind == ZADDR_IPV4;
	r = getaddrinfo(any4 ? NULL : a.host, a.port, &hints, &res);
	if (r)
		return t->host->fail(-EINVAL, "gpudirect: cannot resolve %s: %s",
				     listen_addr, gai_strerror(r));
	r = -EADDRNOTAVAIL;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		if (any4 && ai->ai_family != AF_INET)
			continue;
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
			r = -errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return t->host->fail(r, "gpudirect: cannot listen on %s: %s", listen_addr,
				     strerror(-r));
	/* What we bound, as the address grammar spells it; a wildcard is
	 * reachable on loopback. */
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
	    zaddr_format((struct sockaddr *)&ss, sl, -1, t->bound, sizeof(t->bound)) ||
	    gd_parse(t->bound, &b))
		snprintf(t->bound, sizeof(t->bound), "?");
	if (strcmp(t->bound, "?") && b.wildcard)
		snprintf(t->addr, sizeof(t->addr),
			 b.kind == ZADDR_IPV6 ? "[::1]:%s" : "127.0.0.1:%s", b.port);
	else
		snprintf(t->addr, sizeof(t->addr), "%s", t->bound);
	t->lfd = fd;
	return 0;
}

/* ---- bootstrap I/O ------------------------------------------------------ */

/* Wait for @ev on @fd within @ctx (and a hard bootstrap limit). */
static int wait_fd(struct gd_tp *t, int fd, short ev, struct zap_ctx *ctx,
		   const struct timespec *limit)
{
	struct pollfd p[3] = { { .fd = fd, .events = ev },
			       { .fd = t->wake, .events = POLLIN },
			       { .fd = t->host->ctx_fd(ctx), .events = POLLIN } };
	struct timespec now;
	int ms, cms = t->host->ctx_timeout_ms(ctx), rc;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (int)((limit->tv_sec - now.tv_sec) * 1000 +
		   (limit->tv_nsec - now.tv_nsec) / 1000000);
	if (ms <= 0)
		return -ETIMEDOUT;
	if (cms >= 0 && cms < ms)
		ms = cms;
	rc = poll(p, p[2].fd < 0 ? 2 : 3, ms);
	if (rc < 0)
		return errno == EINTR ? 0 : -errno;
	if (p[1].revents)
		return -ESHUTDOWN;
	rc = t->host->ctx_err(ctx);
	if (rc)
		return rc;
	return 0;
}

/* zconn_wait_fn for a dial: wait_fd() within the send's ctx and @limit. */
struct dial_wait {
	struct gd_tp *t;
	struct zap_ctx *ctx;
	const struct timespec *limit;
};

static int dial_wait(void *user, int fd, short ev)
{
	struct dial_wait *w = user;

	return wait_fd(w->t, fd, ev, w->ctx, w->limit);
}

/* ---- TLS ------------------------------------------------------------------ */

int gd_tls_open(struct gd_tp *t, const struct zap_open_args *args)
{
	/* No kernel TLS and no read-ahead: the bootstrap is a few hundred
	 * bytes (the data path is RDMA), and each handshake in flight then
	 * holds one record's buffer, not 256 KiB. */
	struct ztls_config cfg = { .ktls = false, .small_reads = true };
	char why[512];
	int rc;

	if (args->size >=
	    offsetof(struct zap_open_args, tls_peers) + sizeof(args->tls_peers)) {
		cfg.cert = args->tls_cert;
		cfg.key = args->tls_key;
		cfg.ca = args->tls_ca;
		cfg.peers = args->tls_peers;
	}
	if (ztls_partial_config(cfg.cert, cfg.key, cfg.ca, cfg.peers))
		return t->host->fail(-EINVAL, "gpudirect: %s",
				     ztls_partial_config(cfg.cert, cfg.key, cfg.ca,
							 cfg.peers));
	if (!cfg.cert)
		return 0;
	rc = ztls_ctx_new(&cfg, &t->tls, why, sizeof(why));
	if (rc)
		return t->host->fail(ztls_open_err(rc), "gpudirect: TLS: %s", why);
	if (ztls_ctx_warning(t->tls))
		t->host->log(ZAP_LOG_WARN, "gpudirect", "TLS: %s",
			     ztls_ctx_warning(t->tls));
	t->host->log(ZAP_LOG_DEBUG, "gpudirect",
		     "bootstrap over TLS 1.3, key %s, trusting %s",
		     ztls_ctx_fingerprint(t->tls), ztls_ctx_trust(t->tls));
	return 0;
}

/* The dialling side's TLS handshake on @fd, to the key @want (NULL: any
 * trusted key): 0 and *@out, or a negative errno (-EACCES: refused). */
static int tls_dial(struct gd_tp *t, int fd, const char *key, const char *want,
		    struct zap_ctx *ctx, const struct timespec *limit,
		    struct ztls_conn **out)
{
	struct dial_wait w = { t, ctx, limit };
	char why[512] = "";
	int rc = zconn_tls_dial(t->tls, fd, want, dial_wait, &w, out, why, sizeof(why));

	if (!rc)
		return 0;
	if (!*why)
		snprintf(why, sizeof(why), "%s", strerror(-rc));
	return t->host->fail(rc, "gpudirect: TLS with %s: %s", key, why);
}

/* ---- pinned memory ------------------------------------------------------ */

/* Plan and reserve what @p's pair with @peer pins: 0 with the staging
 * buffers in *@stages (p->pinned, p->pinctr set), or -ENOBUFS. */
static int pin_reserve(struct gd_tp *t, struct gd_peer *p, const struct gd_boot *peer,
		       uint32_t *stages, char *why, size_t wl)
{
	uint64_t own = (uint64_t)t->slots * t->chunk, all, bytes;
	uint64_t *ctr = gd_dev_pinned(t->dev);
	int rc = gd_pin_plan(own, peer, t->peer_pin_cap, stages, &bytes, why, wl);

	if (rc)
		return rc;
	all = __atomic_add_fetch(ctr, bytes, __ATOMIC_RELAXED);
	if (all > t->pin_cap) {
		__atomic_sub_fetch(ctr, bytes, __ATOMIC_RELAXED);
		snprintf(why, wl,
			 "pairs pin %llu bytes already; this one (%llu) would pass "
			 "ZAP_GPUDIRECT_PIN_BYTES=%llu",
			 (unsigned long long)(all - bytes), (unsigned long long)bytes,
			 (unsigned long long)t->pin_cap);
		return -ENOBUFS;
	}
	p->pinned = bytes;
	p->pinctr = ctr;
	return 0;
}

static void pin_release(struct gd_peer *p)
{
	if (p->pinctr)
		__atomic_sub_fetch(p->pinctr, p->pinned, __ATOMIC_RELAXED);
	p->pinctr = NULL;
}

static void peer_destroy(void *user, void *qp)
{
	struct gd_peer *p = user;

	/* Before the pair goes: its device reference keeps the count alive. */
	pin_release(p);
	gd_qp_free(qp);
	free(p);
}

/* The protocol engine over @p's connected pair: on success it owns @p and
 * the pair (peer_destroy() frees them with its last reference). */
static int peer_engine(struct gd_tp *t, struct gd_peer *p, const struct gd_boot *peer)
{
	struct gd_conn_cfg cfg = { 0 };

	cfg.host = t->host;
	cfg.peer = p->key;
	cfg.ops = &gd_verbs_ops;
	cfg.qp = p->qp;
	cfg.slots = t->slots;
	cfg.slot_bytes = t->chunk;
	cfg.peer_slots = peer->slots;
	cfg.peer_slot_bytes = peer->slot_bytes;
	cfg.stages = gd_qp_stages(p->qp);
	cfg.sq_depth = gd_qp_sq_depth(p->qp);
	cfg.max_msg = t->max_msg;
	cfg.deliver = gd_deliver;
	cfg.destroy = peer_destroy;
	cfg.user = p;
	return gd_conn_new(&cfg, &p->conn);
}

/*
 * Both ends write their bootstrap message, read the other's, connect their
 * pair, post receives, and confirm with one byte each: no chunk is sent
 * before the peer's receives are posted.
 */
/* Our bootstrap message out, the peer's in, whole and decoded. */
static int boot_exchange(int fd, struct ztls_conn *tc, struct dial_wait *w,
			 const struct gd_boot *me, struct gd_boot *peer, char *why,
			 size_t wl)
{
	uint8_t msg[GD_BOOT_MAX], in[GD_BOOT_MAX];
	size_t body;
	int rc, n = gd_boot_encode(me, msg, sizeof(msg));

	rc = n < 0 ? n : zconn_all(fd, tc, msg, (size_t)n, true, dial_wait, w, why, wl);
	if (!rc)
		rc = zconn_all(fd, tc, in, GD_BOOT_HDR, false, dial_wait, w, why, wl);
	if (!rc)
		rc = gd_boot_header(in, &body, why, wl);
	if (!rc)
		rc = zconn_all(fd, tc, in + GD_BOOT_HDR, body, false, dial_wait, w, why,
			       wl);
	if (!rc)
		rc = gd_boot_decode(in, GD_BOOT_HDR + body, peer, why, wl);
	return rc;
}

/* Replies go to what was dialled (accepted pairs are made by gd_hs.c,
 * which applies the identity rule), with TLS ending with the key the
 * peer proved (the one asked for, if any: ztls_conn_new()'s want). */
static int dialled_key(struct gd_peer *p, struct ztls_conn *tc, const char *dialed,
		       char *why, size_t wl)
{
	const char *h;
	size_t al;

	if (!tc) {
		snprintf(p->key, sizeof(p->key), "%s", dialed);
		return 0;
	}
	h = strchr(dialed, '#');
	al = h ? (size_t)(h - dialed) : strlen(dialed);
	snprintf(p->fp, sizeof(p->fp), "%s", ztls_conn_peer_fp(tc));
	snprintf(p->key, sizeof(p->key), "%.*s", (int)al, dialed);
	if (zconn_peer_join(p->key, p->fp, p->key, sizeof(p->key))) {
		snprintf(why, wl, "address too long to carry a key");
		return -EINVAL;
	}
	return 0;
}

/* The dialling side of the bootstrap (the accepting side is gd_hs.c). */
static int handshake(struct gd_tp *t, int fd, struct ztls_conn *tc, const char *dialed,
		     struct zap_ctx *ctx, struct gd_peer **out)
{
	uint8_t ok = 1;
	struct gd_boot me = { .instance = t->instance }, peer;
	struct gd_peer *p = calloc(1, sizeof(*p));
	struct timespec limit;
	struct dial_wait w = { t, ctx, &limit };
	char why[200] = "";
	uint32_t stages;
	int rc;

	if (!p)
		return -ENOMEM;
	p->tp = t;
	clock_gettime(CLOCK_MONOTONIC, &limit);
	limit.tv_sec += (time_t)(t->hs_ms / 1000);
	limit.tv_nsec += (long)(t->hs_ms % 1000) * 1000000L;
	if (limit.tv_nsec >= 1000000000L) {
		limit.tv_sec++;
		limit.tv_nsec -= 1000000000L;
	}
	snprintf(me.listen, sizeof(me.listen), "%s", t->bound);
	rc = gd_qp_new(t->dev, t->slots, t->chunk, t->pool, &me, &p->qp);
	if (!rc)
		rc = boot_exchange(fd, tc, &w, &me, &peer, why, sizeof(why));
	if (!rc)
		rc = pin_reserve(t, p, &peer, &stages, why, sizeof(why));
	if (!rc)
		rc = gd_qp_connect(p->qp, &peer, stages);
	if (!rc)
		rc = dialled_key(p, tc, dialed, why, sizeof(why));
	if (rc)
		goto fail;
	p->instance = peer.instance;
	p->dialed = true;
	rc = peer_engine(t, p, &peer);
	if (rc)
		goto fail;
	/* From here the engine owns p and the pair. */
	rc = zconn_all(fd, tc, &ok, 1, true, dial_wait, &w, why, sizeof(why));
	if (!rc)
		rc = zconn_all(fd, tc, &ok, 1, false, dial_wait, &w, why, sizeof(why));
	if (rc) {
		snprintf(why, sizeof(why), "peer gave up before the pair was ready");
		gd_conn_put(p->conn);
		return t->host->fail(rc, "gpudirect: bootstrap with %s: %s", dialed, why);
	}
	*out = p;
	return 0;
fail:
	pin_release(p);
	gd_qp_free(p->qp);
	free(p);
	if (!*why)
		snprintf(why, sizeof(why), "%s", strerror(-rc));
	return t->host->fail(rc, "gpudirect: bootstrap with %s: %s", dialed, why);
}

/* ---- dialling ----------------------------------------------------------- */

int gd_dial(struct gd_tp *t, const char *key, struct zap_ctx *ctx, struct gd_conn **out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	const char *want = strchr(key, '#');
	char addr[ZAP_PEER_MAX];
	struct zaddr a;
	struct ztls_conn *tc = NULL;
	struct addrinfo *res = NULL;
	struct gd_peer *p = NULL;
	struct timespec limit;
	int fd = -1, rc, one = 1;

	/* "host:port#sha256:<hex>" (gd_send() checked it): only that key. */
	snprintf(addr, sizeof(addr), "%.*s", (int)(want ? want - key : ZAP_PEER_MAX - 1),
		 key);
	if (want)
		want++;
	if (gd_parse(addr, &a) || a.wildcard || !a.port_num)
		return t->host->fail(-EINVAL, "gpudirect: malformed peer address \"%s\"",
				     key);
	rc = getaddrinfo(a.host, a.port, &hints, &res);
	if (rc)
		return t->host->fail(-EHOSTUNREACH, "gpudirect: cannot resolve %s: %s",
				     key, gai_strerror(rc));
	clock_gettime(CLOCK_MONOTONIC, &limit);
	limit.tv_sec += (time_t)((t->hs_ms + 999) / 1000);
	rc = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno == EINPROGRESS) {
			int err = 0;
			socklen_t el = sizeof(err);

			rc = wait_fd(t, fd, POLLOUT, ctx, &limit);
			while (!rc && !err) {
				struct pollfd pf = { .fd = fd, .events = POLLOUT };

				if (poll(&pf, 1, 0) == 1)
					break;
				rc = wait_fd(t, fd, POLLOUT, ctx, &limit);
			}
			if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
				err = errno;
			if (!rc && err)
				rc = -err;
			if (!rc)
				break;
		} else if (!errno || errno == EISCONN) {
			rc = 0;
			break;
		} else {
			rc = -errno;
		}
		close(fd);
		fd = -1;
		if (rc == -ECANCELED || rc == -ETIMEDOUT || rc == -ESHUTDOWN)
			break;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return t->host->fail(rc, "gpudirect: cannot connect to %s: %s", key,
				     strerror(-rc));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	rc = t->tls ? tls_dial(t, fd, key, want, ctx, &limit, &tc) : 0;
	if (!rc)
		rc = handshake(t, fd, tc, key, ctx, &p);
	ztls_conn_free(tc);
	close(fd);
	if (rc)
		return rc;
	gd_conn_get(p->conn);
	gd_add_peer(t, p);
	*out = p->conn;
	return 0;
}

/* ---- the accept thread -------------------------------------------------- */

/* gd_hs_cfg.on_boot: the peer's message is valid and it is who it claims
 * (@key): only now build its pair (gd_hs.h), and answer with our message
 * and the confirmation byte (our receives are posted by then). */
static int acc_boot(void *user, const struct gd_boot *peer, const char *key, void **pair,
		    uint8_t *out, size_t cap, char *why, size_t wl)
{
	struct gd_tp *t = user;
	struct gd_boot me = { .instance = t->instance };
	struct gd_peer *p = calloc(1, sizeof(*p));
	uint32_t stages;
	int rc, n = 0;

	if (!p)
		return -ENOMEM;
	p->tp = t;
	rc = pin_reserve(t, p, peer, &stages, why, wl);
	if (rc) {
		free(p);
		return rc;
	}
	snprintf(me.listen, sizeof(me.listen), "%s", t->bound);
	rc = gd_qp_new(t->dev, t->slots, t->chunk, t->pool, &me, &p->qp);
	if (!rc)
		rc = gd_qp_connect(p->qp, peer, stages);
	if (!rc) {
		n = gd_boot_encode(&me, out, cap - 1);
		rc = n < 0 ? n : 0;
	}
	if (!rc) {
		const char *fp = strchr(key, '#');

		snprintf(p->key, sizeof(p->key), "%s", key);
		snprintf(p->fp, sizeof(p->fp), "%s", fp ? fp + 1 : "");
		p->instance = peer->instance;
		rc = peer_engine(t, p, peer);
	}
	if (rc) {
		snprintf(why, wl, "%s", strerror(-rc));
		pin_release(p);
		gd_qp_free(p->qp);
		free(p);
		return rc;
	}
	/* From here the engine owns p and the pair. */
	out[n] = 1;
	*pair = p;
	return n + 1;
}

static void acc_ready(void *user, void *pair)
{
	gd_add_peer(user, pair);
}

static void acc_fail(void *user, void *pair)
{
	struct gd_peer *p = pair;

	(void)user;
	gd_conn_put(p->conn); /* frees the pair and its pins */
}

static void acc_drop(void *user, const char *src, const char *why)
{
	struct gd_tp *t = user;

	t->host->log(ZAP_LOG_WARN, "gpudirect", "bootstrap from %s refused: %s", src,
		     why);
}

void *gd_accept_main(void *arg)
{
	struct gd_tp *t = arg;
	struct gd_hs_cfg cfg = {
		.max_inflight = (unsigned)t->hs_max,
		.timeout_ns = t->hs_ms * 1000000ull,
		.instance = t->instance,
		.tls = t->tls,
		.on_boot = acc_boot,
		.on_ready = acc_ready,
		.on_fail = acc_fail,
		.on_drop = acc_drop,
		.user = t,
	};
	struct gd_hs *hs;
	int rc;

	rc = gd_hs_new(&cfg, &hs);
	if (!rc) {
		rc = gd_hs_serve(hs, t->lfd, t->wake);
		gd_hs_free(hs);
	}
	if (rc)
		t->host->log(ZAP_LOG_ERROR, "gpudirect",
			     "the accept thread stopped: %s; "
			     "peers can no longer dial this endpoint",
			     strerror(-rc));
	return NULL;
}
