/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport: Ethernet/IPv4/UDP frames on a DPDK port, with the
 * reliability protocol of dp_proto*.c on top. See README.md for the
 * operator's configuration and the threading model, dp_int.h for the map
 * of the files.
 *
 * This file is the instance and its ops (probe, open, send, recv, close)
 * and the plugin descriptor. What a frame means to the message stream is
 * decided in dp_proto*.c, which never sees an rte_* type.
 *
 * Shared state: one struct dp per open transport. Its lock (d->lock)
 * guards the port queues, the protocol state, the neighbour table and the
 * receive queue; whoever holds it polls the port (dp_progress()): a
 * thread in zap_recv()/zap_send(), or the service thread when nobody else
 * has polled for a while. shut (set by zap_close() through ops->shutdown)
 * and stop (for the service thread) are atomics read without the lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/random.h>

#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include <zap/zap-plugin.h>

#include "config.h"
#include "dp_int.h"
#include "zap-tls.h"

static void fill_caps(const struct dp *d, struct zap_caps *c)
{
	/* Single-frame messages reach zap_recv() in the mbuf they arrived
	 * in, but larger ones are reassembled by copying, so zero_copy is
	 * not claimed. Where the mbuf pool is mapped for the GPU, single-frame
	 * messages carry a device pointer; reassembled ones do not, so
	 * neither gpu_resident nor device_buffers is claimed (see README). */
	c->zero_copy = false;
	c->gpu_resident = false;
	c->device_buffers = false;
	c->max_msg_size = d ? d->max_msg : UINT32_MAX;
}

/* What probe can judge of a loaded configuration @c: ZAP_PROBE_OK with
 * *@eal the EAL's state, or ZAP_PROBE_ERROR with the reason. */
static enum zap_probe_result probe_check(const struct dp_conf *c,
					 struct zap_probe_info *pi,
					 enum dp_eal_state *eal)
{
	char why[768];

	*eal = dp_eal_state(why, sizeof(why));
	switch (*eal) {
	case DP_EAL_FAILED:
		snprintf(pi->reason, sizeof(pi->reason),
			 "EAL failed earlier in this process: %.200s", why);
		return ZAP_PROBE_ERROR;
	case DP_EAL_RUNNING:
		/* The EAL already runs here (an earlier open): ask it. */
		if (!rte_eth_dev_is_valid_port((uint16_t)c->port)) {
			snprintf(pi->reason, sizeof(pi->reason),
				 "ZAP_DPDK_PORT=%u: no such port", c->port);
			return ZAP_PROBE_ERROR;
		}
		return ZAP_PROBE_OK;
	case DP_EAL_NOT_STARTED:
		break;
	}
	if (dp_eal_args_check(c->eal, pi->reason, sizeof(pi->reason)))
		return ZAP_PROBE_ERROR;
	return ZAP_PROBE_OK;
}

static enum zap_probe_result dp_probe(const struct zap_host *h, struct zap_probe_info *pi)
{
	enum zap_probe_result res;
	enum dp_eal_state eal;
	struct dp_conf c;
	char ipbuf[24], gpu[256];
	int rc;

	if (!ZAP_HOST_HAS(h, last_error)) { /* host older than ABI 1.1 */
		snprintf(pi->reason, sizeof(pi->reason),
			 "libzap is too old for this plugin (needs plugin ABI 1.1)");
		return ZAP_PROBE_ERROR;
	}
	rc = dp_conf_load(h, &c, pi->reason, sizeof(pi->reason));
	if (rc == DP_CONF_UNSET)
		return ZAP_PROBE_NOT_PRESENT;
	if (rc)
		return ZAP_PROBE_ERROR;
	res = probe_check(&c, pi, &eal);
	if (res != ZAP_PROBE_OK)
		return res;
	dp_format_peer(ipbuf, sizeof(ipbuf), c.ip,
		       c.udp_port > 0 ? (uint16_t)c.udp_port : 0);
	snprintf(pi->reason, sizeof(pi->reason), "configured: port %u, %s%s", c.port,
		 ipbuf,
		 eal == DP_EAL_RUNNING ? " (EAL running)" : " (the EAL starts at open)");
	snprintf(pi->detail, sizeof(pi->detail),
		 "EAL arguments: %.600s\nport: %u\nlocal address: %s (port 0: from the listen "
		 "address, else %d)\nMTU: %llu, mbufs: %llu (early frames held: %llu, "
		 "%llu per peer), window: %llu frames\n"
		 "static neighbours: %u\nreceive drop injection: %g\n"
		 "GPU mapping of the mbuf pool: %.150s",
		 c.eal, c.port, ipbuf, DP_DEFAULT_UDP_PORT, (unsigned long long)c.mtu,
		 (unsigned long long)c.mbufs, (unsigned long long)c.hold,
		 (unsigned long long)c.hold_peer, (unsigned long long)c.window, c.n_nb,
		 c.drop_rx, dp_gpu_plan(h, gpu, sizeof(gpu)));
	fill_caps(NULL, &pi->caps);
	return ZAP_PROBE_OK;
}

/* zap_buffer_alloc() memory: EAL memory on the port's NUMA socket. Pool
 * buffers may outlive the instance, so the backing knows only the socket
 * (dp_ports[].socket, kept for the life of the process). */
static void *mem_alloc(void *user, size_t len, void **dev)
{
	const int *socket = user;

	*dev = NULL;
	return rte_malloc_socket("zap_dp_buf", len, 64, *socket);
}

static void mem_free(void *user, void *ptr, size_t len)
{
	rte_free(ptr);
}

static void dp_destroy(void *tp);

/* A new instance with its configuration and local address, nothing
 * started: 0, or the error through h->fail() (*@out set either way, for
 * dp_destroy()). */
static int dp_new(const struct zap_host *h, const struct zap_open_args *args,
		  struct dp **out)
{
	struct dp *d = calloc(1, sizeof(*d));
	char why[256];
	uint32_t lip = 0;
	uint16_t lport = 0;
	int rc;

	*out = d;
	if (!d)
		return -ENOMEM;
	d->host = h;
	d->shut_fd = -1;
	pthread_mutex_init(&d->lock, NULL);
	rc = dp_conf_load(h, &d->conf, why, sizeof(why));
	if (rc == DP_CONF_UNSET)
		return h->fail(ZAP_ENOTAVAIL, "dpdk: %s", why);
	if (rc)
		return h->fail(-EINVAL, "dpdk: %s", why);
	d->port = (uint16_t)d->conf.port;
	d->loc.ip = d->conf.ip;
	dp_parse_ip_port(args->listen, &lip, &lport);
	d->loc.port = d->conf.udp_port > 0 ? (uint16_t)d->conf.udp_port
		      : lport              ? lport
					   : DP_DEFAULT_UDP_PORT;
	/* The wire carries 32-bit message lengths. */
	d->max_msg = args->max_msg_size < UINT32_MAX ? args->max_msg_size : UINT32_MAX;
	if (d->conf.reasm_bytes < d->max_msg)
		d->conf.reasm_bytes = d->max_msg; /* else a largest message never fits */
	d->payload_max = (uint32_t)(d->conf.mtu - DP_IP_HLEN - DP_UDP_HLEN - DP_HDR_LEN);
	d->rng = now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)d;
	d->shut_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->shut_fd < 0)
		return h->fail(-errno, "dpdk: eventfd: %s", strerror(errno));
	return 0;
}

static int proto_setup(struct dp *d)
{
	struct dp_proto_cfg pc = {
		.payload_max = d->payload_max,
		.window = (uint32_t)d->conf.window,
		.max_msg = d->max_msg,
		.rto_min_ns = d->conf.rto_min_us * 1000,
		.rto_max_ns = d->conf.peer_timeout_ms * 250000,
		.peer_timeout_ns = d->conf.peer_timeout_ms * 1000000,
		.max_peers = (uint32_t)d->conf.max_peers,
		.reasm_cap = d->conf.reasm_bytes,
		.hold_max = (uint32_t)d->conf.hold,
		.hold_peer_max = (uint32_t)d->conf.hold_peer,
		.seed = d->rng,
	};
	struct dp_proto_ops po;
	int rc;

	/* The cookie key (dp_proto.h): unpredictable, or return routability
	 * proves nothing. */
	if (getrandom(pc.secret, sizeof(pc.secret), 0) != (ssize_t)sizeof(pc.secret))
		return d->host->fail(-EIO, "dpdk: getrandom: %s", strerror(errno));
	if (pc.rto_max_ns < pc.rto_min_ns)
		pc.rto_max_ns = pc.rto_min_ns;
	dp_io_proto_ops(d, &po);
	rc = dp_proto_new(&pc, &po, &d->proto);
	return rc ? d->host->fail(rc, "dpdk: protocol set-up failed") : 0;
}

static int pool_setup(struct dp *d, const struct zap_open_args *args)
{
	struct zap_pool_backing backing = { .size = sizeof(backing),
					    .alloc = mem_alloc,
					    .free = mem_free,
					    .user = &dp_ports[d->port].socket };

	return d->host->pool_new(&backing,
				 args->pool_bytes ? args->pool_bytes : d->conf.pool_bytes,
				 d->max_msg < d->conf.pool_bytes ? d->max_msg
								 : d->conf.pool_bytes,
				 &d->pool);
}

static int service_start(struct dp *d)
{
	int rc = pthread_create(&d->svc, NULL, dp_service_main, d);

	if (rc)
		return d->host->fail(-rc, "dpdk: cannot start the service thread: %s",
				     strerror(rc));
	d->svc_started = true;
	if (d->conf.pin) {
		rte_cpuset_t set = rte_lcore_cpuset(rte_get_main_lcore());

		pthread_setaffinity_np(d->svc, sizeof(set), &set);
	}
	return 0;
}

static int dp_open(const struct zap_host *h, const struct zap_open_args *args, void **tp)
{
	struct dp *d;
	int rc;

	/* No downgrade: this wire is not TLS, so a configured certificate
	 * makes the transport unavailable (a pick falls back to one that
	 * runs TLS), and a partial configuration is refused as every
	 * transport refuses it. */
	if (args->size >=
	    offsetof(struct zap_open_args, tls_peers) + sizeof(args->tls_peers)) {
		const char *partial = ztls_partial_config(args->tls_cert, args->tls_key,
							  args->tls_ca, args->tls_peers);

		if (partial)
			return h->fail(-EINVAL, "dpdk: %s", partial);
		if (args->tls_cert)
			return h->fail(
				ZAP_ENOTAVAIL,
				"dpdk: ZAP_TLS_CERT is set, and this wire is not TLS");
	}
	rc = dp_new(h, args, &d);
	if (!d)
		return rc;
	rc = rc ? rc : dp_eal_start(h, &d->conf);
	rc = rc ? rc : dp_port_open(d);
	if (rc)
		goto fail;
	dp_neigh_init(d);
	rc = proto_setup(d);
	rc = rc ? rc : pool_setup(d, args);
	rc = rc ? rc : service_start(d);
	if (rc)
		goto fail;
	h->log(ZAP_LOG_INFO, DP_DOM,
	       "port %u (%s) %02x:%02x:%02x:%02x:%02x:%02x, %u.%u.%u.%u:%u,"
	       " checksums %s",
	       d->port, d->driver, d->loc.mac[0], d->loc.mac[1], d->loc.mac[2],
	       d->loc.mac[3], d->loc.mac[4], d->loc.mac[5], d->loc.ip >> 24,
	       (d->loc.ip >> 16) & 0xff, (d->loc.ip >> 8) & 0xff, d->loc.ip & 0xff,
	       d->loc.port, d->tx_csum_offload ? "offloaded" : "in software");
	*tp = d;
	return 0;
fail:
	dp_destroy(d);
	return rc;
}

static void dp_shutdown(void *tp)
{
	struct dp *d = tp;
	uint64_t one = 1;

	atomic_store(&d->shut, true);
	if (write(d->shut_fd, &one, sizeof(one)) < 0) {
		/* the flag alone still stops every loop within a backoff */
	}
}

/* Like SO_LINGER: zap_send() returned once frames were queued, so give the
 * peers a moment to acknowledge them, then free the protocol. d->lock
 * held. */
static void linger(struct dp *d)
{
	uint64_t end = now_ns() + d->conf.linger_ms * 1000000ull;
	struct dp_stats st;

	for (;;) {
		dp_get_stats(d->proto, &st);
		if (!st.unacked_frames || now_ns() >= end)
			break;
		if (!dp_progress(d)) {
			pthread_mutex_unlock(&d->lock);
			usleep(50);
			pthread_mutex_lock(&d->lock);
		}
	}
	dp_proto_free(d->proto);
	dp_tx_flush(d);
}

static void dp_destroy(void *tp)
{
	struct dp *d = tp;

	if (d->svc_started) {
		atomic_store(&d->stop, true);
		pthread_join(d->svc, NULL);
	}
	if (d->proto) {
		pthread_mutex_lock(&d->lock);
		linger(d);
		pthread_mutex_unlock(&d->lock);
	}
	while (d->rxq) {
		struct dp_msg *m = d->rxq;

		d->rxq = m->next;
		dp_msg_release(&m->m);
	}
	if (d->mp)
		dp_port_close(d);
	if (d->pool)
		d->host->pool_close(d->pool);
	if (d->shut_fd >= 0)
		close(d->shut_fd);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* Send the fragments of a message begun in @s, polling while the window
 * is full; d->lock held. 0 once the last fragment is out, or an error. */
static int send_fragments(struct dp *d, struct dp_send *s, const void *buf,
			  struct zap_ctx *ctx)
{
	unsigned backoff = 0;
	uint64_t idle = now_ns();
	int rc;

	for (;;) {
		rc = dp_send_step(d->proto, s, buf, now_ns());
		if (d->ntx)
			dp_tx_flush(d);
		if (rc)
			break;
		rc = dp_wait(d, ctx, &idle, &backoff);
		if (rc || atomic_load(&d->shut)) {
			rc = rc ? rc : -ESHUTDOWN;
			break;
		}
	}
	return rc == DP_SEND_DONE ? 0 : rc;
}

static int dp_send(void *tp, const char *peer, const void *buf, size_t len,
		   struct zap_ctx *ctx)
{
	struct dp *d = tp;
	struct dp_send s = { 0 };
	unsigned backoff = 0;
	uint64_t idle;
	uint32_t ip;
	uint16_t port;
	int rc;

	if (dp_parse_ip_port(peer, &ip, &port) || !ip || !port)
		return d->host->fail(-EINVAL, "dpdk: bad peer \"%s\" (want a.b.c.d:port)",
				     peer);
	if (len > d->max_msg)
		return d->host->fail(-EMSGSIZE,
				     "dpdk: %zu bytes exceed the maximum message size "
				     "%llu",
				     len, (unsigned long long)d->max_msg);
	if (atomic_load(&d->shut))
		return -ESHUTDOWN;
	rc = d->host->ctx_err(ctx);
	if (rc)
		return rc;
	pthread_mutex_lock(&d->lock);
	rc = dp_resolve(d, ip, peer, ctx);
	idle = now_ns();
	while (!rc) {
		rc = dp_send_begin(d->proto, (struct dp_addr){ ip, port }, len, &s,
				   now_ns());
		if (rc != -EBUSY && rc != -EAGAIN)
			break;
		/* another thread is sending to this peer: wait */
		rc = dp_wait(d, ctx, &idle, &backoff);
	}
	if (rc)
		goto out;
	rc = send_fragments(d, &s, buf, ctx);
	dp_send_end(d->proto, &s);
	if (!rc) {
		d->msgs_sent++;
		d->bytes_sent += len;
	}
	if (rc == -ECONNRESET)
		rc = d->host->fail(-ECONNRESET,
				   "dpdk: the message to %s was lost: the "
				   "peer reset the stream, or one side was silent for over "
				   "%llu ms (ZAP_DPDK_PEER_TIMEOUT_MS)",
				   peer, (unsigned long long)d->conf.peer_timeout_ms);
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* The oldest received message, or NULL; d->lock held. */
static struct dp_msg *rxq_pop(struct dp *d)
{
	struct dp_msg *m = d->rxq;

	if (!m)
		return NULL;
	d->rxq = m->next;
	if (!d->rxq)
		d->rxq_tail = NULL;
	d->rxq_msgs--;
	d->rxq_bytes -= m->m.len + sizeof(*m);
	/* Resume taking frames once half the queue is drained. */
	if (d->rx_blocked && d->rxq_bytes <= d->conf.rxq_bytes / 2) {
		d->rx_blocked = false;
		dp_set_rx_blocked(d->proto, false);
	}
	return m;
}

static int dp_recv(void *tp, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct dp *d = tp;
	unsigned backoff = 0;
	uint64_t idle;
	int rc;

	if (atomic_load(&d->shut))
		return -ESHUTDOWN;
	rc = d->host->ctx_err(ctx);
	if (rc)
		return rc;
	idle = now_ns();
	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct dp_msg *m = rxq_pop(d);

		if (m) {
			*out = &m->m;
			break;
		}
		if (atomic_load(&d->shut)) {
			rc = -ESHUTDOWN;
			break;
		}
		rc = dp_wait(d, ctx, &idle, &backoff);
		if (rc)
			break;
	}
	pthread_mutex_unlock(&d->lock);
	return rc;
}

static int dp_caps(void *tp, struct zap_caps *caps)
{
	fill_caps(tp, caps);
	return 0;
}

static int dp_address(void *tp, char *buf, size_t len)
{
	struct dp *d = tp;
	char a[24];

	dp_format_peer(a, sizeof(a), d->loc.ip, d->loc.port);
	if (strlen(a) >= len)
		return -ENOSPC;
	memcpy(buf, a, strlen(a) + 1);
	return 0;
}

static int dp_buffer_alloc(void *tp, size_t size, struct zap_ctx *ctx,
			   struct zap_buffer **out)
{
	struct dp *d = tp;

	return d->host->pool_alloc(d->pool, size, ctx, out);
}

static int dp_pool_stats(void *tp, struct zap_pool_stats *stats)
{
	struct dp *d = tp;

	d->host->pool_stats(d->pool, stats);
	return 0;
}

/*
 * zap_stats(). Everything counted is under d->lock already (whoever
 * holds it polls the port), so the counts are plain and this takes the
 * lock just to copy them: a holder drops it on every turn of its wait.
 * No connections on this wire, so the conns_* members stay 0.
 */
static int dp_stats_op(void *tp, struct zap_stats *out)
{
	struct dp *d = tp;
	struct zap_stats s = { .size = sizeof(s) };
	struct dp_stats st = { 0 };

	pthread_mutex_lock(&d->lock);
	if (d->proto)
		dp_get_stats(d->proto, &st);
	s.msgs_sent = d->msgs_sent;
	s.bytes_sent = d->bytes_sent;
	s.msgs_received = d->msgs_received;
	s.bytes_received = d->bytes_received;
	s.rxq_msgs = d->rxq_msgs;
	s.rxq_bytes = d->rxq_bytes;
	pthread_mutex_unlock(&d->lock);
	/* Shut down, the queue is what zap_close() drops. */
	s.drops_shutdown = atomic_load(&d->shut) ? s.rxq_msgs : 0;
	s.rxq_limit = d->conf.rxq_bytes;
	s.partial_bytes = st.reasm_bytes;
	s.partial_limit = d->conf.reasm_bytes;
	s.drops_partial = st.partials_dropped;
	s.peers = st.peers;
	s.retransmits = st.retransmits;
	s.peers_forgotten = st.forgotten;
	s.frames_refused = st.refused;
	zap_plugin_put_sized(out, &s, sizeof(s));
	return 0;
}

/* zap_peer_list(): the protocol's peer table, copied under the lock into
 * rows allocated before it, formatted after. */
static int dp_peers_op(void *tp, struct zap_peer_info *out, size_t n)
{
	struct dp *d = tp;
	struct dp_peer_row *rows = NULL;
	size_t stride = n ? out->size : 0, total;
	uint64_t now = now_ns();

	if (n > d->conf.max_peers)
		n = d->conf.max_peers; /* the table never holds more */
	if (n && !(rows = calloc(n, sizeof(*rows))))
		return -ENOMEM;
	pthread_mutex_lock(&d->lock);
	total = d->proto ? dp_peer_list(d->proto, rows, n, now) : 0;
	pthread_mutex_unlock(&d->lock);
	for (size_t i = 0; i < n && i < total; i++) {
		const struct dp_peer_row *r = &rows[i];
		struct zap_peer_info e = {
			.size = sizeof(e),
			.path = "dpdk",
			.dialed = r->dialed,
			.conn_id = r->id,
			.msgs_sent = r->msgs_sent,
			.bytes_sent = r->bytes_sent,
			.msgs_received = r->msgs_received,
			.bytes_received = r->bytes_received,
			.idle_ms = r->idle_ns / 1000000,
			/* the protocol's own estimate, from its acknowledgements */
			.rtt_us = r->srtt_ns < 0 ? -1 : r->srtt_ns / 1000,
			.rtt_var_us = r->rttvar_ns < 0 ? -1 : r->rttvar_ns / 1000,
		};

		dp_format_peer(e.peer, sizeof(e.peer), r->addr.ip, r->addr.port);
		zap_plugin_put_sized((char *)out + i * stride, &e, sizeof(e));
	}
	free(rows);
	return total > INT32_MAX ? INT32_MAX : (int)total;
}

static const struct zap_plugin_ops dp_ops = {
	.size = sizeof(dp_ops),
	.probe = dp_probe,
	.open = dp_open,
	.shutdown = dp_shutdown,
	.destroy = dp_destroy,
	.send = dp_send,
	.recv = dp_recv,
	.caps = dp_caps,
	.address = dp_address,
	.buffer_alloc = dp_buffer_alloc,
	.pool_stats = dp_pool_stats,
	.stats = dp_stats_op,
	.peers = dp_peers_op,
};

ZAP_PLUGIN_EXPORT = {
	.abi_major = ZAP_PLUGIN_ABI_MAJOR,
	.abi_minor = ZAP_PLUGIN_ABI_MINOR,
	.size = sizeof(struct zap_plugin),
	.rank = ZAP_RANK_DPDK,
	.name = "dpdk",
	.version = ZAP_VERSION,
	.ops = &dp_ops,
};
