/* SPDX-License-Identifier: MIT */
/*
 * The data path of the dpdk transport: mbufs as the protocol's frames
 * (headers and checksums on the way out), the transmit batch, received
 * frames classified and handed to the protocol, whole messages queued for
 * zap_recv(), the poll of the port, how a waiting caller pauses, and the
 * service thread that polls when nobody else does.
 *
 * Shared state: the instance's transmit batch, receive queue, protocol
 * and counters, under d->lock; whoever holds it polls the port
 * (dp_progress()): a thread in zap_recv()/zap_send(), or the service
 * thread when nobody else has polled for DP_SERVICE_IDLE_NS. d->last_poll,
 * d->shut and d->stop are atomics read without the lock; a port's held
 * count (dp_ports[].held) is atomic, since messages are released from any
 * thread.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_pause.h>
#include <rte_udp.h>

#include "dp_int.h"

void dp_tx_flush(struct dp *d)
{
	unsigned sent = 0;

	for (int tries = 0; sent < d->ntx && tries < 4; tries++)
		sent += rte_eth_tx_burst(d->port, 0, d->txb + sent,
					 (uint16_t)(d->ntx - sent));
	/* The ring is full or the link down: those frames are lost, and the
	 * protocol retransmits what matters. */
	for (unsigned i = sent; i < d->ntx; i++)
		rte_pktmbuf_free(d->txb[i]);
	d->ntx = 0;
}

void dp_tx_push(struct dp *d, struct rte_mbuf *mb)
{
	if (d->ntx == DP_TXB)
		dp_tx_flush(d);
	d->txb[d->ntx++] = mb;
}

/* --- what the protocol calls */

static void *fr_alloc(void *user, size_t len, uint8_t **buf)
{
	struct dp *d = user;
	struct rte_mbuf *mb = rte_pktmbuf_alloc(d->mp);

	if (!mb)
		return NULL;
	/* Two bytes more headroom put the IPv4 header on a 16-byte boundary. */
	mb->data_off += 2;
	if (DP_L2L4_HLEN + len > rte_pktmbuf_tailroom(mb)) {
		rte_pktmbuf_free(mb);
		return NULL;
	}
	mb->data_len = (uint16_t)(DP_L2L4_HLEN + len);
	mb->pkt_len = mb->data_len;
	*buf = rte_pktmbuf_mtod(mb, uint8_t *) + DP_L2L4_HLEN;
	return mb;
}

static void fr_free(void *user, void *frame)
{
	rte_pktmbuf_free(frame);
}

/* IPv4 and UDP checksums of a built frame: by the NIC where offloaded. */
static void fr_csum(const struct dp *d, struct rte_mbuf *mb, uint8_t *f)
{
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(f + DP_ETH_HLEN);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(f + DP_ETH_HLEN + DP_IP_HLEN);

	if (d->tx_csum_offload) {
		mb->l2_len = DP_ETH_HLEN;
		mb->l3_len = DP_IP_HLEN;
		mb->ol_flags = RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM |
			       RTE_MBUF_F_TX_UDP_CKSUM;
		udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, mb->ol_flags);
	} else {
		ip->hdr_checksum = rte_ipv4_cksum(ip);
		udp->dgram_cksum = rte_ipv4_udptcp_cksum(ip, udp);
	}
}

static void fr_xmit(void *user, struct dp_addr to, void *frame, size_t len)
{
	struct dp *d = user;
	struct rte_mbuf *mb = frame;
	struct dp_neigh *n;
	const uint8_t *mac;
	uint8_t *f;

	/* Still referenced elsewhere (a driver that has not completed the last
	 * transmission, or a loopback port's receive side): its headers are
	 * complete but must not change under the other holder, so send a
	 * copy. */
	if (rte_mbuf_refcnt_read(mb) > 1) {
		struct rte_mbuf *c = rte_pktmbuf_copy(mb, d->mp, 0, UINT32_MAX);

		d->tx_copies++;
		if (c)
			dp_tx_push(d, c);
		return;
	}
	if (to.ip == d->loc.ip) {
		mac = d->loc.mac;
	} else if ((n = dp_neigh_find(d, to.ip))) {
		mac = n->mac;
	} else {
		/* Forgotten (table full): ask again; the retransmission timer
		 * sends this frame once the answer is in. */
		dp_arp_request(d, to.ip, now_ns(), false);
		return;
	}
	f = rte_pktmbuf_mtod(mb, uint8_t *);
	dp_wire_udp(f, d->loc.mac, mac, d->loc.ip, to.ip, d->loc.port, to.port, len);
	fr_csum(d, mb, f);
	/* The driver frees one reference once sent; the protocol keeps its
	 * own until the frame is acknowledged. */
	rte_mbuf_refcnt_update(mb, 1);
	dp_tx_push(d, mb);
}

void dp_msg_release(struct zap_msg *zm)
{
	struct dp_msg *m = (struct dp_msg *)zm;

	if (m->mb) {
		rte_pktmbuf_free(m->mb);
		atomic_fetch_sub(m->held, 1);
	}
	free(m->heap);
	free(m);
}

/* Queue @m for zap_recv(); stop taking frames when the queue is full. */
static void rxq_push(struct dp *d, struct dp_msg *m)
{
	if (d->rxq_tail)
		d->rxq_tail->next = m;
	else
		d->rxq = m;
	d->rxq_tail = m;
	d->rxq_msgs++;
	d->rxq_bytes += m->m.len + sizeof(*m);
	d->msgs_received++;
	d->bytes_received += m->m.len;
	if (d->rxq_bytes > d->conf.rxq_bytes && !d->rx_blocked) {
		d->rx_blocked = true;
		dp_set_rx_blocked(d->proto, true);
	}
}

static void fr_deliver(void *user, struct dp_addr from, void *frame, void *heap,
		       const void *data, size_t len)
{
	struct dp *d = user;
	struct dp_msg *m = malloc(sizeof(*m));

	if (m && frame &&
	    atomic_load(&dp_ports[d->port].held) > dp_ports[d->port].nmbufs / 4) {
		/* The application holds many frames: copy this one out so the
		 * port keeps mbufs to receive into. */
		heap = malloc(len ? len : 1);
		if (heap) {
			memcpy(heap, data, len);
			data = heap;
			rte_pktmbuf_free(frame);
			frame = NULL;
		}
	}
	if (!m || (!frame && !heap)) {
		/* Already acknowledged, so this loses a message: say so. */
		d->host->log(ZAP_LOG_ERROR, DP_DOM,
			     "out of memory: message of %zu bytes lost", len);
		free(m);
		free(heap);
		if (frame)
			rte_pktmbuf_free(frame);
		return;
	}
	*m = (struct dp_msg){
		.m = { .size = sizeof(m->m),
		       .data = data,
		       .len = len,
		       .peer = m->peer,
		       .release = dp_msg_release,
		       .device_ptr = frame ? dp_gpu_addr(d->port, data) : NULL },
		.mb = frame,
		.heap = heap,
		.held = &dp_ports[d->port].held,
	};
	if (frame)
		atomic_fetch_add(m->held, 1);
	dp_format_peer(m->peer, sizeof(m->peer), from.ip, from.port);
	rxq_push(d, m);
}

void dp_io_proto_ops(struct dp *d, struct dp_proto_ops *po)
{
	*po = (struct dp_proto_ops){ .user = d,
				     .frame_alloc = fr_alloc,
				     .frame_free = fr_free,
				     .frame_xmit = fr_xmit,
				     .deliver = fr_deliver };
}

/* --- receive side */

/* Fault injection (ZAP_DPDK_DROP_RX): whether to drop this frame. */
static bool rx_drop_injected(struct dp *d)
{
	d->rng ^= d->rng << 13;
	d->rng ^= d->rng >> 7;
	d->rng ^= d->rng << 17;
	return (double)(d->rng >> 11) / 9007199254740992.0 < d->conf.drop_rx;
}

static void rx_one(struct dp *d, struct rte_mbuf *mb, uint64_t now)
{
	struct dp_frame_info fi;
	unsigned trust = 0;

	if (mb->nb_segs != 1)
		goto drop; /* larger than the MTU this transport sends */
	if (d->conf.drop_rx > 0 && rx_drop_injected(d))
		goto drop_quiet;
	if (d->rx_csum_offload) {
		uint64_t ipf = mb->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
		uint64_t l4f = mb->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;

		if (ipf == RTE_MBUF_F_RX_IP_CKSUM_BAD ||
		    l4f == RTE_MBUF_F_RX_L4_CKSUM_BAD)
			goto drop;
		trust |= ipf == RTE_MBUF_F_RX_IP_CKSUM_GOOD ? DP_TRUST_IP_CSUM : 0;
		trust |= l4f == RTE_MBUF_F_RX_L4_CKSUM_GOOD ? DP_TRUST_UDP_CSUM : 0;
	}
	switch (dp_wire_parse(rte_pktmbuf_mtod(mb, uint8_t *), mb->data_len, &d->loc,
			      trust, &fi)) {
	case DP_FRAME_ARP:
		dp_neigh_learn(d, fi.arp_spa, fi.arp_sha, fi.arp_tpa == d->loc.ip, now);
		if (fi.arp_op == DP_ARP_REQUEST && fi.arp_tpa == d->loc.ip && fi.arp_spa)
			dp_arp_send(d, DP_ARP_REPLY, fi.arp_sha, fi.arp_spa);
		rte_pktmbuf_free(mb);
		return;
	case DP_FRAME_UDP:
		/* No neighbour is learnt from a datagram: its source address
		 * is whatever the sender wrote, and a challenge (dp_proto.h)
		 * must go where the claimed address really is (ARP or
		 * ZAP_DPDK_NEIGHBORS), not to whoever claims it. */
		dp_input(d->proto, (struct dp_addr){ fi.src_ip, fi.src_port }, mb,
			 fi.payload, fi.payload_len, now);
		return;
	case DP_FRAME_DROP:
		break;
	}
drop:
	d->rx_dropped++;
drop_quiet:
	rte_pktmbuf_free(mb);
}

unsigned dp_progress(struct dp *d)
{
	struct rte_mbuf *pk[DP_BURST];
	uint64_t now = now_ns();
	unsigned total = 0;
	uint16_t n;

	do {
		n = rte_eth_rx_burst(d->port, 0, pk, DP_BURST);
		for (uint16_t i = 0; i < n; i++)
			rx_one(d, pk[i], now);
		total += n;
	} while (n == DP_BURST && total < 8 * DP_BURST);
	if (total)
		dp_flush_acks(d->proto);
	if (now >= d->next_timer) {
		dp_timers(d->proto, now);
		d->next_timer = now + DP_TIMER_NS;
	}
	if (d->ntx)
		dp_tx_flush(d);
	atomic_store_explicit(&d->last_poll, now, memory_order_relaxed);
	return total;
}

/*
 * Wait a moment without the lock, for a caller that found nothing to do.
 * Busy-poll for spin_us after @idle_since (the latency path), then sleep
 * with a growing backoff, woken early by shutdown or @ctx.
 */
static int dp_pause(struct dp *d, struct zap_ctx *ctx, uint64_t idle_since,
		    unsigned *backoff_us)
{
	struct pollfd pf[2] = { { .fd = d->shut_fd, .events = POLLIN },
				{ .fd = d->host->ctx_fd(ctx), .events = POLLIN } };
	struct timespec ts;
	int err, ms;

	if (atomic_load(&d->shut))
		return -ESHUTDOWN;
	err = d->host->ctx_err(ctx);
	if (err)
		return err;
	if (now_ns() - idle_since < d->conf.spin_us * 1000) {
		rte_pause();
		return 0;
	}
	*backoff_us = *backoff_us ? *backoff_us * 2 : 5;
	if (*backoff_us > 500)
		*backoff_us = 500;
	ms = d->host->ctx_timeout_ms(ctx);
	if (ms >= 0 && (unsigned)ms * 1000 < *backoff_us)
		*backoff_us = (unsigned)ms * 1000 + 1;
	ts.tv_sec = 0;
	ts.tv_nsec = (long)*backoff_us * 1000;
	ppoll(pf, pf[1].fd >= 0 ? 2 : 1, &ts, NULL);
	return 0;
}

int dp_wait(struct dp *d, struct zap_ctx *ctx, uint64_t *idle, unsigned *backoff)
{
	int rc;

	if (dp_progress(d)) {
		*idle = now_ns();
		*backoff = 0;
		return 0;
	}
	pthread_mutex_unlock(&d->lock);
	rc = dp_pause(d, ctx, *idle, backoff);
	pthread_mutex_lock(&d->lock);
	return rc;
}

/* --- service thread */

/* A DEBUG line with the protocol's figures, once a second. */
static void log_stats(struct dp *d)
{
	struct dp_stats st;
	uint64_t rxd, copies;

	pthread_mutex_lock(&d->lock);
	dp_get_stats(d->proto, &st);
	rxd = d->rx_dropped;
	copies = d->tx_copies;
	pthread_mutex_unlock(&d->lock);
	d->host->log(
		ZAP_LOG_DEBUG, DP_DOM,
		"peers %u, early %u, unacked %u, reassembling %llu B; "
		"delivered %llu, retransmits %llu, dups %llu, dropped %llu (+%llu refused "
		"frames), acks %llu, partials dropped %llu, peers reset %llu, challenges "
		"%llu, early frames refused %llu; mbufs free %u, held by messages %u; "
		"retransmitted copies %llu",
		st.peers, st.early_frames, st.unacked_frames,
		(unsigned long long)st.reasm_bytes, (unsigned long long)st.delivered,
		(unsigned long long)st.retransmits, (unsigned long long)st.dups,
		(unsigned long long)st.dropped, (unsigned long long)rxd,
		(unsigned long long)st.acks_sent, (unsigned long long)st.partials_dropped,
		(unsigned long long)st.peers_reset, (unsigned long long)st.challenges,
		(unsigned long long)st.hold_refused, rte_mempool_avail_count(d->mp),
		atomic_load(&dp_ports[d->port].held), (unsigned long long)copies);
}

void *dp_service_main(void *arg)
{
	struct dp *d = arg;
	unsigned backoff_us = 0;
	uint64_t next_stats = 0, next_link = 0, down_since = 0;

	while (!atomic_load(&d->stop)) {
		uint64_t last = atomic_load_explicit(&d->last_poll, memory_order_relaxed);
		unsigned n = 0;
		bool busy = false;
		struct timespec ts;

		/* Callers poll on the latency path; this thread only covers
		 * the gaps (acknowledgements, retransmissions, ARP answers
		 * while the application is elsewhere). */
		if (now_ns() - last >= DP_SERVICE_IDLE_NS &&
		    !pthread_mutex_trylock(&d->lock)) {
			n = dp_progress(d);
			busy = dp_busy(d->proto);
			pthread_mutex_unlock(&d->lock);
		}
		if (now_ns() >= next_link) {
			dp_port_link_watch(d, &down_since);
			next_link = now_ns() + 100000000ull;
		}
		if (d->host->log_enabled(ZAP_LOG_DEBUG) && now_ns() >= next_stats) {
			log_stats(d);
			next_stats = now_ns() + 1000000000ull;
		}
		if (n) {
			backoff_us = 0;
			continue;
		}
		backoff_us = backoff_us ? backoff_us * 2 : 10;
		if (backoff_us > (busy ? 200u : 1000u))
			backoff_us = busy ? 200u : 1000u;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)backoff_us * 1000;
		nanosleep(&ts, NULL);
	}
	return NULL;
}
