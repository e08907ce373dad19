/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect transport: RDMA from the NIC straight into GPU memory.
 *
 * One RC queue pair per peer, bootstrapped over a TCP connection to the
 * peer's listen address (gd_proto.h: the bootstrap message); the protocol
 * engine (gd_proto.c) runs credits, chunking and reassembly over the
 * verbs/CUDA backend (gd_verbs.c). Two threads per instance: one accepts
 * bootstrap connections, one waits for completion events and drives the
 * engines of every pair (senders also drive their own pair while waiting).
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap-plugin.h>

#include "config.h"
#include "gd_proto.h"
#include "gd_verbs.h"
#include "zap-addr.h"

#define GD_DEFAULT_POOL_BYTES (1ull << 30)
#define GD_DEFAULT_CHUNK (1u << 20)
#define GD_DEFAULT_SLOTS 16u
#define GD_BOOT_TIMEOUT_MS 10000

struct gd_tp;

/* One queue pair to one peer; owned by its engine (freed with it). */
struct gd_peer {
	struct gd_peer *next;    /* in gd_tp.peers, under gd_tp.mx */
	struct gd_tp *tp;
	struct gd_conn *conn;    /* the table's reference */
	struct gd_qp *qp;
	char key[ZAP_PEER_MAX];  /* peer string sends name it by */
	uint64_t instance;
	bool dialed;
};

struct gd_rxmsg {
	struct zap_msg msg;
	struct gd_rxmsg *next;
	struct gd_conn *conn;    /* reference while a slot is held */
	int32_t slot;
	struct zap_buffer *buf;
	char peer[ZAP_PEER_MAX];
};

struct gd_tp {
	const struct zap_host *host;
	struct gd_dev *dev;
	struct zap_pool *pool;
	uint64_t instance, max_msg;
	uint32_t slots, chunk;
	int lfd, wake;
	char bound[ZAP_PEER_MAX]; /* as bound (may be a wildcard) */
	char addr[ZAP_PEER_MAX];  /* sendable */
	pthread_t accept_th, prog_th;
	bool threads;
	pthread_mutex_t mx;       /* peers, rx queue, shut */
	pthread_cond_t cv;
	pthread_mutex_t dial_mx;  /* one dial at a time */
	struct gd_peer *peers;
	struct gd_rxmsg *rx_head, **rx_tail;
	bool shut;
};

/* ---- addresses ---------------------------------------------------------- */

/* "host:port" or "[v6]:port" into getaddrinfo's parts, by the grammar
 * the core and the TCP wire use (zap-addr.h). @host and @port are ""
 * when @s is refused. */
static int gd_split(const char *s, char *host, size_t hl, char *port, size_t pl)
{
	struct zaddr a;

	host[0] = port[0] = '\0';
	if (zaddr_parse(s, &a) || strlen(a.host) >= hl || strlen(a.port) >= pl)
		return -EINVAL;
	strcpy(host, a.host);
	strcpy(port, a.port);
	return 0;
}

static bool wildcard(const char *h)
{
	return !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::");
}

static void fmt_addr(const struct sockaddr *sa, socklen_t sl, const char *port,
		     char *buf, size_t len)
{
	char h[NI_MAXHOST], p[NI_MAXSERV];

	if (getnameinfo(sa, sl, h, sizeof(h), p, sizeof(p),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(buf, len, "?");
		return;
	}
	if (!strncmp(h, "::ffff:", 7) && strchr(h, '.'))
		memmove(h, h + 7, strlen(h + 7) + 1);
	snprintf(buf, len, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, port ? port : p);
}

static int gd_listen(struct gd_tp *t, const char *listen_addr)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	char host[ZAP_PEER_MAX], port[8], h2[ZAP_PEER_MAX], p2[8];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct addrinfo *res = NULL;
	int r, fd = -1, one = 1;

	if (gd_split(listen_addr, host, sizeof(host), port, sizeof(port)))
		return t->host->fail(-EINVAL, "gpudirect: malformed listen address "
				     "\"%s\" (ZAP_LISTEN; want host:port)", listen_addr);
	r = getaddrinfo(wildcard(host) && strcmp(host, "::") ? NULL : host, port,
			&hints, &res);
	if (r)
		return t->host->fail(-EINVAL, "gpudirect: cannot resolve %s: %s",
				     listen_addr, gai_strerror(r));
	r = -EADDRNOTAVAIL;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		if (wildcard(host) && strcmp(host, "::") && ai->ai_family != AF_INET)
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
		return t->host->fail(r, "gpudirect: cannot listen on %s: %s",
				     listen_addr, strerror(-r));
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	fmt_addr((struct sockaddr *)&ss, sl, NULL, t->bound, sizeof(t->bound));
	gd_split(t->bound, h2, sizeof(h2), p2, sizeof(p2));
	if (wildcard(h2))
		snprintf(t->addr, sizeof(t->addr), ss.ss_family == AF_INET6 ?
			 "[::1]:%s" : "127.0.0.1:%s", p2);
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

static int io_all(struct gd_tp *t, int fd, void *buf, size_t len, bool wr,
		  struct zap_ctx *ctx, const struct timespec *limit)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = wr ? send(fd, (char *)buf + done, len - done,
				      MSG_NOSIGNAL | MSG_DONTWAIT)
			       : recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
		int rc;

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (!n)
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		rc = wait_fd(t, fd, wr ? POLLOUT : POLLIN, ctx, limit);
		if (rc)
			return rc;
	}
	return 0;
}

static void peer_destroy(void *user, void *qp)
{
	gd_qp_free(qp);
	free(user);
}

static void deliver(void *user, struct gd_conn *c, const struct gd_delivery *d);

/*
 * Both ends write their bootstrap message, read the other's, connect their
 * pair, post receives, and confirm with one byte each: no chunk is sent
 * before the peer's receives are posted.
 */
static int handshake(struct gd_tp *t, int fd, const char *dialed, struct zap_ctx *ctx,
		     struct gd_peer **out)
{
	uint8_t msg[GD_BOOT_MAX], in[GD_BOOT_MAX], ok = 1;
	struct gd_boot me = { .instance = t->instance }, peer;
	struct gd_conn_cfg cfg = { 0 };
	struct gd_peer *p = calloc(1, sizeof(*p));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct timespec limit;
	char why[200] = "", host[ZAP_PEER_MAX], port[8];
	size_t body;
	int rc, n;

	if (!p)
		return -ENOMEM;
	clock_gettime(CLOCK_MONOTONIC, &limit);
	limit.tv_sec += GD_BOOT_TIMEOUT_MS / 1000;
	snprintf(me.listen, sizeof(me.listen), "%s", t->bound);
	rc = gd_qp_new(t->dev, t->slots, t->chunk, t->pool, &me, &p->qp);
	if (rc)
		goto fail;
	n = gd_boot_encode(&me, msg, sizeof(msg));
	rc = n < 0 ? n : io_all(t, fd, msg, (size_t)n, true, ctx, &limit);
	if (!rc)
		rc = io_all(t, fd, in, GD_BOOT_HDR, false, ctx, &limit);
	if (rc)
		goto fail;
	rc = gd_boot_header(in, &body, why, sizeof(why));
	if (!rc)
		rc = io_all(t, fd, in + GD_BOOT_HDR, body, false, ctx, &limit);
	if (!rc)
		rc = gd_boot_decode(in, GD_BOOT_HDR + body, &peer, why, sizeof(why));
	if (rc)
		goto fail;
	rc = gd_qp_connect(p->qp, &peer);
	if (rc)
		goto fail;
	/* The name replies use: what was dialled, or the peer's listen
	 * address with a wildcard host replaced by where it came from. */
	if (dialed) {
		snprintf(p->key, sizeof(p->key), "%s", dialed);
	} else if (!gd_split(peer.listen, host, sizeof(host), port, sizeof(port)) &&
		   wildcard(host) && !getpeername(fd, (struct sockaddr *)&ss, &sl)) {
		fmt_addr((struct sockaddr *)&ss, sl, port, p->key, sizeof(p->key));
	} else {
		snprintf(p->key, sizeof(p->key), "%s", peer.listen);
	}
	p->tp = t;
	p->instance = peer.instance;
	p->dialed = dialed != NULL;
	cfg.host = t->host;
	cfg.peer = p->key;
	cfg.ops = &gd_verbs_ops;
	cfg.qp = p->qp;
	cfg.slots = t->slots;
	cfg.slot_bytes = t->chunk;
	cfg.peer_slots = peer.slots;
	cfg.peer_slot_bytes = peer.slot_bytes;
	cfg.stages = gd_qp_stages(p->qp);
	cfg.sq_depth = gd_qp_sq_depth(p->qp);
	cfg.max_msg = t->max_msg;
	cfg.deliver = deliver;
	cfg.destroy = peer_destroy;
	cfg.user = p;
	rc = gd_conn_new(&cfg, &p->conn);
	if (rc)
		goto fail;
	/* From here the engine owns p and the pair. */
	rc = io_all(t, fd, &ok, 1, true, ctx, &limit);
	if (!rc)
		rc = io_all(t, fd, &ok, 1, false, ctx, &limit);
	if (rc) {
		snprintf(why, sizeof(why), "peer gave up before the pair was ready");
		gd_conn_put(p->conn);
		return t->host->fail(rc, "gpudirect: bootstrap with %s: %s",
				     dialed ? dialed : "a peer", why);
	}
	*out = p;
	return 0;
fail:
	gd_qp_free(p->qp);
	free(p);
	if (!*why)
		snprintf(why, sizeof(why), "%s", strerror(-rc));
	return t->host->fail(rc, "gpudirect: bootstrap with %s: %s",
			     dialed ? dialed : "a peer", why);
}

/* ---- peers -------------------------------------------------------------- */

static void peer_drop(struct gd_peer *p)
{
	gd_conn_shutdown(p->conn);
	gd_conn_put(p->conn);
}

/* A live pair to @key, referenced; failed pairs leave the table (they are
 * rebuilt by the caller). Dialled pairs first: a side sends on one pair. */
static struct gd_conn *find_live(struct gd_tp *t, const char *key)
{
	struct gd_peer **pp = &t->peers, *dead = NULL, *best = NULL;

	pthread_mutex_lock(&t->mx);
	while (*pp) {
		struct gd_peer *p = *pp;

		if (gd_conn_error(p->conn)) {
			*pp = p->next;
			p->next = dead;
			dead = p;
			continue;
		}
		if (!strcmp(p->key, key) && (!best || (p->dialed && !best->dialed)))
			best = p;
		pp = &p->next;
	}
	if (best)
		gd_conn_get(best->conn);
	pthread_mutex_unlock(&t->mx);
	while (dead) {
		struct gd_peer *n = dead->next;

		peer_drop(dead);
		dead = n;
	}
	return best ? best->conn : NULL;
}

static void add_peer(struct gd_tp *t, struct gd_peer *p)
{
	struct gd_peer **pp, *old = NULL;

	pthread_mutex_lock(&t->mx);
	/* A peer dials again only when its side of the old pair broke. */
	for (pp = &t->peers; *pp && !p->dialed;) {
		struct gd_peer *q = *pp;

		if (!q->dialed && q->instance == p->instance) {
			*pp = q->next;
			q->next = old;
			old = q;
			continue;
		}
		pp = &q->next;
	}
	p->next = t->peers;
	t->peers = p;
	pthread_mutex_unlock(&t->mx);
	while (old) {
		struct gd_peer *n = old->next;

		peer_drop(old);
		old = n;
	}
}

static int dial(struct gd_tp *t, const char *key, struct zap_ctx *ctx,
		struct gd_conn **out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	char host[ZAP_PEER_MAX], port[8];
	struct addrinfo *res = NULL;
	struct gd_peer *p;
	struct timespec limit;
	int fd = -1, rc, one = 1;

	if (gd_split(key, host, sizeof(host), port, sizeof(port)) || wildcard(host) ||
	    !atoi(port))
		return t->host->fail(-EINVAL, "gpudirect: malformed peer address \"%s\"", key);
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc)
		return t->host->fail(-EHOSTUNREACH, "gpudirect: cannot resolve %s: %s", key,
				     gai_strerror(rc));
	clock_gettime(CLOCK_MONOTONIC, &limit);
	limit.tv_sec += GD_BOOT_TIMEOUT_MS / 1000;
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
	rc = handshake(t, fd, key, ctx, &p);
	close(fd);
	if (rc)
		return rc;
	gd_conn_get(p->conn);
	add_peer(t, p);
	*out = p->conn;
	return 0;
}

/* ---- threads ------------------------------------------------------------ */

static void *accept_main(void *arg)
{
	struct gd_tp *t = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = t->lfd, .events = POLLIN },
				       { .fd = t->wake, .events = POLLIN } };
		struct gd_peer *peer;
		int fd, one = 1;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!p[0].revents)
			continue;
		fd = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			continue;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (handshake(t, fd, NULL, NULL, &peer))
			t->host->log(ZAP_LOG_WARN, "gpudirect", "%s", t->host->last_error());
		else
			add_peer(t, peer);
		close(fd);
	}
	return NULL;
}

static void progress_all(struct gd_tp *t)
{
	struct gd_conn *cs[64];
	int n = 0;

	pthread_mutex_lock(&t->mx);
	for (struct gd_peer *p = t->peers; p && n < 64; p = p->next) {
		gd_conn_get(p->conn);
		cs[n++] = p->conn;
	}
	pthread_mutex_unlock(&t->mx);
	for (int i = 0; i < n; i++) {
		gd_conn_progress(cs[i]);
		gd_conn_put(cs[i]);
	}
}

static void *progress_main(void *arg)
{
	struct gd_tp *t = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = gd_dev_chan_fd(t->dev), .events = POLLIN },
				       { .fd = t->wake, .events = POLLIN } };

		/* The timeout retries reassembly that waited for pool memory
		 * and credit writes that waited for send-queue room. */
		if (poll(p, 2, 10) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (p[0].revents)
			gd_dev_ack_event(t->dev);
		progress_all(t);
	}
	return NULL;
}

/* ---- messages ----------------------------------------------------------- */

static void rx_release(struct zap_msg *m)
{
	struct gd_rxmsg *r = (struct gd_rxmsg *)m;

	if (r->slot >= 0) {
		gd_conn_slot_done(r->conn, r->slot);
		gd_conn_put(r->conn);
	} else if (r->buf) {
		r->buf->release(r->buf);
	}
	free(r);
}

static void deliver(void *user, struct gd_conn *c, const struct gd_delivery *d)
{
	struct gd_peer *p = user;
	struct gd_tp *t = p->tp;
	struct gd_rxmsg *r = calloc(1, sizeof(*r));

	if (!r) {
		/* The slot stays taken (one credit less) rather than risk a
		 * repost from inside the engine's lock. */
		t->host->log(ZAP_LOG_ERROR, "gpudirect", "out of memory: dropped a "
			     "message from %s", p->key);
		if (d->slot < 0 && d->buf.handle)
			((struct zap_buffer *)d->buf.handle)->release(d->buf.handle);
		return;
	}
	r->msg.size = sizeof(r->msg);
	r->msg.data = d->data;
	r->msg.len = d->len;
	r->msg.device_ptr = (void *)d->data;
	r->msg.release = rx_release;
	snprintf(r->peer, sizeof(r->peer), "%s", p->key);
	r->msg.peer = r->peer;
	r->slot = d->slot;
	r->buf = d->buf.handle;
	if (d->slot >= 0) {
		r->conn = c;
		gd_conn_get(c);
	}
	pthread_mutex_lock(&t->mx);
	*t->rx_tail = r;
	t->rx_tail = &r->next;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mx);
}

/* ---- plugin ops --------------------------------------------------------- */

static int read_env(const struct zap_host *host, uint64_t *chunk, uint64_t *slots,
		    uint64_t *pool)
{
	if (host->env_bytes("ZAP_GPUDIRECT_CHUNK_BYTES", GD_DEFAULT_CHUNK, GD_SLOT_MIN,
			    GD_SLOT_MAX, chunk) ||
	    host->env_bytes("ZAP_GPUDIRECT_RECV_SLOTS", GD_DEFAULT_SLOTS, 1,
			    GD_SLOTS_MAX, slots) ||
	    host->env_bytes("ZAP_GPUDIRECT_POOL_BYTES", GD_DEFAULT_POOL_BYTES, 1 << 20,
			    1ull << 50, pool))
		return -EINVAL;
	if (*chunk & (*chunk - 1))
		return host->fail(-EINVAL, "ZAP_GPUDIRECT_CHUNK_BYTES=%llu is not a "
				  "power of two", (unsigned long long)*chunk);
	return 0;
}

static void fill_caps(struct zap_caps *c, uint64_t max_msg, uint64_t chunk)
{
	c->gpu_resident = true;
	c->device_buffers = true;
	/* Messages of one chunk are handed out where the NIC wrote them;
	 * longer ones are reassembled with a device-to-device copy. */
	c->zero_copy = max_msg && max_msg <= chunk;
	c->max_msg_size = max_msg;
}

static enum zap_probe_result gd_probe(const struct zap_host *host,
				      struct zap_probe_info *pi)
{
	enum zap_probe_result r;
	struct gd_sel s;
	uint64_t chunk, slots, pool;

	if (!ZAP_HOST_HAS(host, last_error)) { /* host older than ABI 1.1 */
		snprintf(pi->reason, sizeof(pi->reason),
			 "libzap is too old for this plugin (needs plugin ABI 1.1)");
		return ZAP_PROBE_ERROR;
	}
	r = gd_select(&s, pi->reason, sizeof(pi->reason));
	if (r != ZAP_PROBE_OK)
		return r;
	if (read_env(host, &chunk, &slots, &pool)) {
		snprintf(pi->reason, sizeof(pi->reason), "%s", host->last_error());
		return ZAP_PROBE_ERROR;
	}
	gd_sel_detail(&s, pi->detail, sizeof(pi->detail));
	fill_caps(&pi->caps, 0, chunk);
	return ZAP_PROBE_OK;
}

static void gd_destroy(void *tp);

static int gd_open(const struct zap_host *host, const struct zap_open_args *args,
		   void **tp)
{
	struct zap_pool_backing backing;
	uint64_t chunk, slots, pool;
	struct gd_tp *t;
	int rc;

	rc = read_env(host, &chunk, &slots, &pool);
	if (rc)
		return rc;
	if (args->pool_bytes)
		pool = args->pool_bytes;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->host = host;
	t->lfd = -1;
	t->wake = -1;
	t->chunk = (uint32_t)chunk;
	t->slots = (uint32_t)slots;
	t->max_msg = args->max_msg_size;
	t->rx_tail = &t->rx_head;
	pthread_mutex_init(&t->mx, NULL);
	pthread_mutex_init(&t->dial_mx, NULL);
	pthread_cond_init(&t->cv, NULL);
	while (!t->instance)
		if (getrandom(&t->instance, sizeof(t->instance), 0) != sizeof(t->instance))
			t->instance = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
	rc = gd_dev_open(host, &t->dev);
	if (rc)
		goto fail;
	gd_dev_backing(t->dev, &backing);
	/* The largest reassembly target is the message rounded up to chunks. */
	rc = host->pool_new(&backing, pool, (t->max_msg + chunk - 1) / chunk * chunk,
			    &t->pool);
	if (rc) {
		gd_dev_put(t->dev); /* the backing's reference */
		goto fail;
	}
	rc = gd_listen(t, args->listen);
	if (rc)
		goto fail;
	t->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->wake < 0) {
		rc = -errno;
		goto fail;
	}
	if (pthread_create(&t->accept_th, NULL, accept_main, t)) {
		rc = -EAGAIN;
		goto fail;
	}
	if (pthread_create(&t->prog_th, NULL, progress_main, t)) {
		uint64_t one = 1;

		(void)!write(t->wake, &one, sizeof(one));
		pthread_join(t->accept_th, NULL);
		rc = -EAGAIN;
		goto fail;
	}
	t->threads = true;
	*tp = t;
	return 0;
fail:
	gd_destroy(t);
	return rc;
}

static void gd_shutdown(void *tp)
{
	struct gd_tp *t = tp;
	uint64_t one = 1;

	pthread_mutex_lock(&t->mx);
	t->shut = true;
	for (struct gd_peer *p = t->peers; p; p = p->next)
		gd_conn_shutdown(p->conn);
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mx);
	if (t->wake >= 0)
		(void)!write(t->wake, &one, sizeof(one));
}

static void gd_destroy(void *tp)
{
	struct gd_tp *t = tp;

	if (t->threads) {
		gd_shutdown(t);
		pthread_join(t->accept_th, NULL);
		pthread_join(t->prog_th, NULL);
	}
	while (t->peers) {
		struct gd_peer *p = t->peers;

		t->peers = p->next;
		peer_drop(p);
	}
	while (t->rx_head) {
		struct gd_rxmsg *r = t->rx_head;

		t->rx_head = r->next;
		rx_release(&r->msg);
	}
	if (t->pool)
		t->host->pool_close(t->pool);
	gd_dev_put(t->dev);
	if (t->lfd >= 0)
		close(t->lfd);
	if (t->wake >= 0)
		close(t->wake);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mx);
	pthread_mutex_destroy(&t->dial_mx);
	free(t);
}

static int gd_send(void *tp, const char *peer, const void *buf, size_t len,
		   struct zap_ctx *ctx)
{
	struct gd_tp *t = tp;
	struct gd_conn *c;
	int rc;

	if (len > t->max_msg)
		return -EMSGSIZE;
	if (__atomic_load_n(&t->shut, __ATOMIC_ACQUIRE))
		return -ESHUTDOWN;
	c = find_live(t, peer);
	if (!c) {
		pthread_mutex_lock(&t->dial_mx);
		c = find_live(t, peer);
		rc = c ? 0 : dial(t, peer, ctx, &c);
		pthread_mutex_unlock(&t->dial_mx);
		if (rc)
			return rc;
	}
	rc = gd_conn_send(c, buf, len, ctx);
	gd_conn_put(c);
	if (rc && rc != -ECANCELED && rc != -ETIMEDOUT && rc != -ESHUTDOWN &&
	    rc != -EMSGSIZE)
		return t->host->fail(rc, "gpudirect: send to %s failed: %s (the pair "
				     "is rebuilt on the next send)", peer, strerror(-rc));
	return rc;
}

static int gd_recv(void *tp, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct gd_tp *t = tp;
	int rc = 0;

	pthread_mutex_lock(&t->mx);
	while (!t->rx_head) {
		struct timespec ts;
		int ms;

		if (t->shut) {
			rc = -ESHUTDOWN;
			break;
		}
		rc = t->host->ctx_err(ctx);
		if (rc)
			break;
		/* Slices: a cancelled ctx is noticed within 10 ms. */
		ms = t->host->ctx_timeout_ms(ctx);
		if (ms < 0 || ms > 10)
			ms = 10;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)(ms ? ms : 1) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&t->cv, &t->mx, &ts);
	}
	if (!rc) {
		struct gd_rxmsg *r = t->rx_head;

		t->rx_head = r->next;
		if (!t->rx_head)
			t->rx_tail = &t->rx_head;
		*out = &r->msg;
	}
	pthread_mutex_unlock(&t->mx);
	return rc;
}

static int gd_caps(void *tp, struct zap_caps *caps)
{
	struct gd_tp *t = tp;

	fill_caps(caps, t->max_msg, t->chunk);
	return 0;
}

static int gd_address(void *tp, char *buf, size_t len)
{
	struct gd_tp *t = tp;

	if (strlen(t->addr) >= len)
		return -ENOSPC;
	memcpy(buf, t->addr, strlen(t->addr) + 1);
	return 0;
}

static int gd_buffer_alloc(void *tp, size_t size, struct zap_ctx *ctx,
			   struct zap_buffer **out)
{
	struct gd_tp *t = tp;

	return t->host->pool_alloc(t->pool, size, ctx, out);
}

static int gd_pool_stats(void *tp, struct zap_pool_stats *stats)
{
	struct gd_tp *t = tp;

	t->host->pool_stats(t->pool, stats);
	return 0;
}

static const struct zap_plugin_ops gd_ops = {
	.size = sizeof(gd_ops),
	.probe = gd_probe,
	.open = gd_open,
	.shutdown = gd_shutdown,
	.destroy = gd_destroy,
	.send = gd_send,
	.recv = gd_recv,
	.caps = gd_caps,
	.address = gd_address,
	.buffer_alloc = gd_buffer_alloc,
	.pool_stats = gd_pool_stats,
};

ZAP_PLUGIN_EXPORT = {
	.abi_major = ZAP_PLUGIN_ABI_MAJOR,
	.abi_minor = ZAP_PLUGIN_ABI_MINOR,
	.size = sizeof(struct zap_plugin),
	.rank = ZAP_RANK_GPUDIRECT,
	.name = "gpudirect",
	.version = ZAP_VERSION,
	.ops = &gd_ops,
};
