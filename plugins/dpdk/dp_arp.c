/* SPDX-License-Identifier: MIT */
/*
 * Neighbours and ARP for the dpdk transport: the table of IPv4 -> MAC
 * (static entries from ZAP_DPDK_NEIGHBORS, and entries learnt from ARP frames
 * meant for us, bounded, the least recently used learnt one replaced),
 * answers to ARP requests for our address, and resolution of a peer
 * before the first send to it.
 *
 * Shared state: the instance's neighbour table and ARP rate limit
 * (d->nb, d->n_nb, d->arp_last_*, d->arp_any_ns), under d->lock.
 */
#include <errno.h>
#include <string.h>

#include <rte_mbuf.h>

#include "dp_int.h"

struct dp_neigh *dp_neigh_find(struct dp *d, uint32_t ip)
{
	for (unsigned i = 0; i < d->n_nb; i++)
		if (d->nb[i].ip == ip)
			return &d->nb[i];
	return NULL;
}

/* Record @ip at @mac: update a known entry; add one only if @create (the
 * frame was meant for us). A full table replaces its least recently used
 * learned entry, so a flood of senders cannot grow it. */
void dp_neigh_learn(struct dp *d, uint32_t ip, const uint8_t mac[6], bool create,
		    uint64_t now)
{
	struct dp_neigh *n = dp_neigh_find(d, ip);

	if (!ip || ip == d->loc.ip || (mac[0] & 1))
		return;
	if (n) {
		if (!n->fixed)
			memcpy(n->mac, mac, 6);
		n->used_ns = now;
		return;
	}
	if (!create)
		return;
	if (d->n_nb < DP_NEIGH_MAX) {
		n = &d->nb[d->n_nb++];
	} else {
		for (unsigned i = 0; i < d->n_nb; i++)
			if (!d->nb[i].fixed && (!n || d->nb[i].used_ns < n->used_ns))
				n = &d->nb[i];
		if (!n)
			return;
	}
	*n = (struct dp_neigh){ .ip = ip, .used_ns = now };
	memcpy(n->mac, mac, 6);
}

void dp_neigh_init(struct dp *d)
{
	for (unsigned i = 0; i < d->conf.n_nb; i++) {
		struct dp_neigh *n = &d->nb[d->n_nb++];

		*n = (struct dp_neigh){ .ip = d->conf.nb[i].ip, .fixed = true };
		memcpy(n->mac, d->conf.nb[i].mac, 6);
	}
}

void dp_arp_send(struct dp *d, uint16_t op, const uint8_t tha[6], uint32_t tpa)
{
	struct rte_mbuf *mb = rte_pktmbuf_alloc(d->mp);

	if (!mb)
		return;
	mb->data_len = (uint16_t)dp_wire_arp(rte_pktmbuf_mtod(mb, uint8_t *), op,
					     d->loc.mac, d->loc.ip, tha, tpa);
	mb->pkt_len = mb->data_len;
	dp_tx_push(d, mb);
}

void dp_arp_request(struct dp *d, uint32_t ip, uint64_t now, bool force)
{
	static const uint8_t zero[6];

	/* From the data path at most one request per target per 10 ms, and
	 * one per millisecond in all: challenges to forged sources (dp_proto.h)
	 * must not turn into a broadcast storm. */
	if (!force && ((ip == d->arp_last_ip && now - d->arp_last_ns < 10000000ull) ||
		       now - d->arp_any_ns < 1000000ull))
		return;
	if (!force)
		d->arp_any_ns = now;
	d->arp_last_ip = ip;
	d->arp_last_ns = now;
	dp_arp_send(d, DP_ARP_REQUEST, zero, ip);
}

int dp_resolve(struct dp *d, uint32_t ip, const char *peer, struct zap_ctx *ctx)
{
	uint64_t start = now_ns(), next = start, gap = 10000000ull;
	uint64_t end = start + d->conf.arp_timeout_ms * 1000000ull;
	unsigned tries = 0, backoff = 0;
	int rc;

	while (ip != d->loc.ip && !dp_neigh_find(d, ip)) {
		uint64_t now = now_ns();

		if (now >= next) {
			if (now >= end)
				return d->host->fail(
					-EHOSTUNREACH,
					"dpdk: no ARP reply from %s after %u "
					"requests in %llu ms (ZAP_DPDK_ARP_TIMEOUT_MS); "
					"is the peer up on port %u's link?",
					peer, tries,
					(unsigned long long)d->conf.arp_timeout_ms,
					d->port);
			dp_arp_request(d, ip, now, true);
			tries++;
			next = now + gap;
			gap = gap * 2 > 500000000ull ? 500000000ull : gap * 2;
		}
		rc = dp_wait(d, ctx, &start, &backoff);
		if (rc)
			return rc;
	}
	return 0;
}
