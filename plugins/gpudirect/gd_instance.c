/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect instance: the plugin's ops and descriptor, the progress
 * thread that drives the pairs' engines, and the queue of received
 * messages. The table of peers is in gd_peers.c; the listen socket, the
 * bootstrap and the accept thread are in gpudirect.c.
 *
 * Shared state: the peer table under gd_tp.mx, the receive queue under
 * gd_tp.rx_mx, the shutdown flag under both; dials serialised by
 * gd_tp.dial_mx. gd_instance.h lists the threads and the lock order.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap-plugin.h>

#include "config.h"
#include "gd_instance.h"
#include "gd_verbs.h"

/* Defaults and ranges of the ZAP_GPUDIRECT_* variables: core/config-vars.c. */

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
		gd_peers_progress(t);
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

void gd_deliver(void *user, struct gd_conn *c, const struct gd_delivery *d)
{
	struct gd_peer *p = user;
	struct gd_tp *t = p->tp;
	struct gd_rxmsg *r = calloc(1, sizeof(*r));

	if (!r) {
		/* The slot stays taken (one credit less) rather than risk a
		 * repost from inside the engine's lock. */
		t->host->log(ZAP_LOG_ERROR, "gpudirect",
			     "out of memory: dropped a "
			     "message from %s",
			     p->key);
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
	if (p->fp[0]) {
		memcpy(r->peer_id, p->fp, sizeof(r->peer_id));
		r->msg.peer_id = r->peer_id;
	}
	r->slot = d->slot;
	r->buf = d->buf.handle;
	if (d->slot >= 0) {
		r->conn = c;
		gd_conn_get(c);
	}
	pthread_mutex_lock(&t->rx_mx);
	*t->rx_tail = r;
	t->rx_tail = &r->next;
	t->rxq_msgs++;
	t->rxq_bytes += r->msg.len;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->rx_mx);
}

/* ---- plugin ops --------------------------------------------------------- */

/* What bounds a peer: pinned memory and handshakes. */
struct gd_limits {
	uint64_t peer_pin, pin, hs_max, hs_ms;
};

static int read_env(const struct zap_host *host, uint64_t *chunk, uint64_t *slots,
		    uint64_t *pool, struct gd_limits *l)
{
	/* Through libzap's registry, which holds their defaults and ranges. */
	if (!ZAP_HOST_HAS(host, config_u64))
		return host->fail(-ENOTSUP, "gpudirect: libzap is too old (needs plugin "
					    "ABI 1.4)");
	if (host->config_u64("ZAP_GPUDIRECT_CHUNK_BYTES", chunk) < 0 ||
	    host->config_u64("ZAP_GPUDIRECT_RECV_SLOTS", slots) < 0 ||
	    host->config_u64("ZAP_GPUDIRECT_POOL_BYTES", pool) < 0 ||
	    host->config_u64("ZAP_GPUDIRECT_PEER_PIN_BYTES", &l->peer_pin) < 0 ||
	    host->config_u64("ZAP_GPUDIRECT_PIN_BYTES", &l->pin) < 0 ||
	    host->config_u64("ZAP_GPUDIRECT_HANDSHAKES", &l->hs_max) < 0 ||
	    host->config_u64("ZAP_GPUDIRECT_HANDSHAKE_MS", &l->hs_ms) < 0)
		return -EINVAL;
	if (*chunk & (*chunk - 1))
		return host->fail(-EINVAL,
				  "ZAP_GPUDIRECT_CHUNK_BYTES=%llu is not a "
				  "power of two",
				  (unsigned long long)*chunk);
	/* A pair pins our receive slots and one staging buffer at least. */
	if (*slots * *chunk + *chunk > l->peer_pin)
		return host->fail(
			-EINVAL,
			"ZAP_GPUDIRECT_PEER_PIN_BYTES=%llu is below what one "
			"pair of this endpoint pins (%llu receive slots of %llu bytes "
			"and one staging buffer)",
			(unsigned long long)l->peer_pin, (unsigned long long)*slots,
			(unsigned long long)*chunk);
	if (l->pin < l->peer_pin)
		return host->fail(-EINVAL,
				  "ZAP_GPUDIRECT_PIN_BYTES=%llu is below "
				  "ZAP_GPUDIRECT_PEER_PIN_BYTES=%llu",
				  (unsigned long long)l->pin,
				  (unsigned long long)l->peer_pin);
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
	struct gd_limits lim;
	uint64_t chunk, slots, pool;

	if (!ZAP_HOST_HAS(host, last_error)) { /* host older than ABI 1.1 */
		snprintf(pi->reason, sizeof(pi->reason),
			 "libzap is too old for this plugin (needs plugin ABI 1.1)");
		return ZAP_PROBE_ERROR;
	}
	r = gd_select(host, &s, pi->reason, sizeof(pi->reason));
	if (r != ZAP_PROBE_OK)
		return r;
	if (read_env(host, &chunk, &slots, &pool, &lim)) {
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
	struct gd_limits lim;
	struct gd_tp *t;
	int rc;

	rc = read_env(host, &chunk, &slots, &pool, &lim);
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
	t->peer_pin_cap = lim.peer_pin;
	t->pin_cap = lim.pin;
	t->hs_max = lim.hs_max;
	t->hs_ms = lim.hs_ms;
	t->max_msg = args->max_msg_size;
	t->rx_tail = &t->rx_head;
	pthread_mutex_init(&t->mx, NULL);
	pthread_mutex_init(&t->rx_mx, NULL);
	pthread_mutex_init(&t->dial_mx, NULL);
	pthread_cond_init(&t->cv, NULL);
	while (!t->instance)
		if (getrandom(&t->instance, sizeof(t->instance), 0) !=
		    sizeof(t->instance))
			t->instance = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
	rc = gd_tls_open(t, args);
	if (rc)
		goto fail;
	rc = gd_dev_open(host, &t->dev);
	if (rc)
		goto fail;
	t->pinctr = gd_dev_pinned(t->dev); /* one device per instance */
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
	if (pthread_create(&t->accept_th, NULL, gd_accept_main, t)) {
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
	pthread_mutex_lock(&t->rx_mx);
	__atomic_store_n(&t->shut, true, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->rx_mx);
	for (struct gd_peer *p = t->peers; p; p = p->next)
		gd_conn_shutdown(p->conn);
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
	gd_peers_drop_all(t);
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
	ztls_ctx_free(t->tls);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mx);
	pthread_mutex_destroy(&t->rx_mx);
	pthread_mutex_destroy(&t->dial_mx);
	free(t);
}

static int gd_send(void *tp, const char *peer, const void *buf, size_t len,
		   struct zap_ctx *ctx)
{
	struct gd_tp *t = tp;
	char norm[ZAP_PEER_MAX], why[200];
	struct gd_conn *c;
	int rc;

	if (len > t->max_msg)
		return -EMSGSIZE;
	if (__atomic_load_n(&t->shut, __ATOMIC_ACQUIRE))
		return -ESHUTDOWN;
	/* "host:port#sha256:<hex>": only a pair with that key serves it. */
	rc = zconn_peer_norm(peer, t->tls != NULL, norm, sizeof(norm), why, sizeof(why));
	if (rc)
		return t->host->fail(rc, "gpudirect: %s", why);
	peer = norm;
	c = gd_find_live(t, peer);
	if (!c) {
		pthread_mutex_lock(&t->dial_mx);
		c = gd_find_live(t, peer);
		rc = c ? 0 : gd_dial(t, peer, ctx, &c);
		pthread_mutex_unlock(&t->dial_mx);
		if (rc)
			return rc;
	}
	rc = gd_conn_send(c, buf, len, ctx);
	gd_conn_put(c);
	if (rc && rc != -ECANCELED && rc != -ETIMEDOUT && rc != -ESHUTDOWN &&
	    rc != -EMSGSIZE)
		return t->host->fail(rc,
				     "gpudirect: send to %s failed: %s (the pair "
				     "is rebuilt on the next send)",
				     peer, strerror(-rc));
	return rc;
}

static int gd_recv(void *tp, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct gd_tp *t = tp;
	int rc = 0;

	pthread_mutex_lock(&t->rx_mx);
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
		pthread_cond_timedwait(&t->cv, &t->rx_mx, &ts);
	}
	if (!rc) {
		struct gd_rxmsg *r = t->rx_head;

		t->rx_head = r->next;
		if (!t->rx_head)
			t->rx_tail = &t->rx_head;
		t->rxq_msgs--;
		t->rxq_bytes -= r->msg.len;
		*out = &r->msg;
	}
	pthread_mutex_unlock(&t->rx_mx);
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

/* zap_stats(): the peer table's counts (gd_peers.c) and the receive
 * queue's, each copied under its own lock. */
static int gd_stats(void *tp, struct zap_stats *out)
{
	struct gd_tp *t = tp;
	struct zap_stats s = { .size = sizeof(s) };

	gd_peers_stats(t, &s);
	pthread_mutex_lock(&t->rx_mx);
	s.rxq_msgs = t->rxq_msgs;
	s.rxq_bytes = t->rxq_bytes;
	/* Shut down, the queue is what zap_close() drops. */
	s.drops_shutdown = t->shut ? t->rxq_msgs : 0;
	pthread_mutex_unlock(&t->rx_mx);
	zap_plugin_put_sized(out, &s, sizeof(s));
	return 0;
}

static int gd_peers(void *tp, struct zap_peer_info *out, size_t n)
{
	return gd_peers_list(tp, out, n);
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
	.stats = gd_stats,
	.peers = gd_peers,
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
