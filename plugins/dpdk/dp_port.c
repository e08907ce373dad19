/* SPDX-License-Identifier: MIT */
/*
 * DPDK ports: claiming one for an instance, its mbuf pool (created at the
 * first open of the port and kept for the life of the process), its
 * configuration (one rx/tx queue pair, checksum offloads where offered),
 * start, stop, and a watch that restarts a port whose link stays down.
 *
 * Shared state: dp_ports[], process-wide (see struct dp_port in
 * dp_int.h). dp_port_lock serialises port claims and releases and the
 * pool's set-up; the queues of a running port belong to the instance that
 * claimed it (its d->lock).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "dp_int.h"

struct dp_port dp_ports[RTE_MAX_ETHPORTS];
static pthread_mutex_t dp_port_lock = PTHREAD_MUTEX_INITIALIZER;

/* The port exists and is free: its driver and NUMA socket into @d. */
static int port_check(struct dp *d, struct rte_eth_dev_info *di)
{
	const struct zap_host *h = d->host;
	int rc, sock;

	if (!rte_eth_dev_is_valid_port(d->port)) {
		char said[520];

		dp_eal_said(said, sizeof(said));
		return h->fail(ZAP_ENOTAVAIL,
			       "dpdk: ZAP_DPDK_PORT=%u: no such port (the EAL "
			       "found %u); EAL said: %s",
			       d->port, rte_eth_dev_count_avail(), said);
	}
	if (dp_ports[d->port].in_use)
		return h->fail(-EBUSY,
			       "dpdk: port %u is in use by another open transport in "
			       "this process",
			       d->port);
	rc = rte_eth_dev_info_get(d->port, di);
	if (rc)
		return h->fail(-EIO, "dpdk: rte_eth_dev_info_get(%u): %s", d->port,
			       rte_strerror(-rc));
	d->driver = di->driver_name;
	sock = rte_eth_dev_socket_id(d->port);
	d->socket = sock < 0 ? (int)SOCKET_ID_ANY : sock;
	return 0;
}

/* The port's mbuf pool, created (and mapped for the GPU) at its first
 * open in this process. */
static int port_pool(struct dp *d)
{
	struct dp_port *pt = &dp_ports[d->port];
	char name[RTE_MEMPOOL_NAMESIZE];
	uint32_t room;

	if (pt->mp)
		goto out;
	/* One frame per mbuf: room for the MTU, the Ethernet header and our
	 * 2-byte alignment shift. */
	room = RTE_PKTMBUF_HEADROOM + 2 +
	       (uint32_t)(d->conf.mtu + DP_ETH_HLEN + 4 > 2048
				  ? d->conf.mtu + DP_ETH_HLEN + 4
				  : 2048);
	snprintf(name, sizeof(name), "zap_dp_%u", d->port);
	/* NUMA-local to the port; hugepages unless --no-huge. */
	pt->mp = rte_pktmbuf_pool_create(name, (unsigned)d->conf.mbufs, 256, 0,
					 (uint16_t)room, d->socket);
	if (!pt->mp)
		return d->host->fail(-ENOMEM,
				     "dpdk: rte_pktmbuf_pool_create(%llu mbufs of %u "
				     "bytes, socket %d): %s",
				     (unsigned long long)d->conf.mbufs, room, d->socket,
				     rte_strerror(rte_errno));
	pt->nmbufs = (unsigned)d->conf.mbufs;
	dp_gpu_register(d->host, d->port);
out:
	d->mp = pt->mp;
	return 0;
}

/* One queue pair, checksum offloads where the port offers both. */
static int port_configure(struct dp *d, const struct rte_eth_dev_info *di)
{
	const struct zap_host *h = d->host;
	uint64_t want_tx = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
	uint64_t want_rx = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
	uint16_t nrx = DP_NB_DESC, ntx = DP_NB_DESC;
	struct rte_eth_conf conf;
	int rc;

	memset(&conf, 0, sizeof(conf));
	d->tx_csum_offload = (di->tx_offload_capa & want_tx) == want_tx;
	d->rx_csum_offload = (di->rx_offload_capa & want_rx) == want_rx;
	if (d->tx_csum_offload)
		conf.txmode.offloads = want_tx;
	if (d->rx_csum_offload)
		conf.rxmode.offloads = want_rx;
	rc = rte_eth_dev_configure(d->port, 1, 1, &conf);
	if (rc)
		return h->fail(-EIO, "dpdk: rte_eth_dev_configure(port %u, %s): %s",
			       d->port, di->driver_name, rte_strerror(-rc));
	rc = rte_eth_dev_set_mtu(d->port, (uint16_t)d->conf.mtu);
	if (rc && rc != -ENOTSUP)
		h->log(ZAP_LOG_DEBUG, DP_DOM, "rte_eth_dev_set_mtu(%u, %llu): %s",
		       d->port, (unsigned long long)d->conf.mtu, rte_strerror(-rc));
	rte_eth_dev_adjust_nb_rx_tx_desc(d->port, &nrx, &ntx);
	rc = rte_eth_rx_queue_setup(d->port, 0, nrx, (unsigned)d->socket, NULL, d->mp);
	if (!rc)
		rc = rte_eth_tx_queue_setup(d->port, 0, ntx, (unsigned)d->socket, NULL);
	if (rc)
		return h->fail(-EIO, "dpdk: queue setup on port %u (%s): %s", d->port,
			       di->driver_name, rte_strerror(-rc));
	return 0;
}

/* Start the port, retrying: a memif client cannot start before its server
 * listens. Then read its MAC address. */
static int port_run(struct dp *d, const struct rte_eth_dev_info *di)
{
	uint64_t deadline = now_ns() + d->conf.start_timeout_ms * 1000000ull;
	struct rte_ether_addr mac;
	int rc;

	while ((rc = rte_eth_dev_start(d->port)) != 0 && now_ns() < deadline)
		usleep(20000);
	if (rc)
		return d->host->fail(-EIO,
				     "dpdk: rte_eth_dev_start(port %u, %s): %s (for %llu "
				     "ms, ZAP_DPDK_START_TIMEOUT_MS)",
				     d->port, di->driver_name, rte_strerror(-rc),
				     (unsigned long long)d->conf.start_timeout_ms);
	rte_eth_macaddr_get(d->port, &mac);
	memcpy(d->loc.mac, mac.addr_bytes, 6);
	return 0;
}

int dp_port_open(struct dp *d)
{
	struct rte_eth_dev_info di;
	int rc;

	pthread_mutex_lock(&dp_port_lock);
	rc = port_check(d, &di);
	rc = rc ? rc : port_pool(d);
	rc = rc ? rc : port_configure(d, &di);
	rc = rc ? rc : port_run(d, &di);
	if (!rc) {
		dp_ports[d->port].in_use = true;
		dp_ports[d->port].socket = d->socket;
	}
	pthread_mutex_unlock(&dp_port_lock);
	return rc;
}

void dp_port_close(struct dp *d)
{
	pthread_mutex_lock(&dp_port_lock);
	rte_eth_dev_stop(d->port);
	dp_ports[d->port].in_use = false;
	pthread_mutex_unlock(&dp_port_lock);
}

/*
 * Restart a port whose link stays down: a memif client that started before
 * its server listened does not try again by itself. Every other driver
 * takes a restart of a down link in its stride.
 */
void dp_port_link_watch(struct dp *d, uint64_t *down_since)
{
	struct rte_eth_link link;
	uint64_t now = now_ns();
	int rc;

	memset(&link, 0, sizeof(link));
	if (rte_eth_link_get_nowait(d->port, &link) || link.link_status) {
		*down_since = 0;
		return;
	}
	if (!*down_since) {
		*down_since = now;
		return;
	}
	if (now - *down_since < 500000000ull)
		return;
	pthread_mutex_lock(&d->lock);
	rte_eth_dev_stop(d->port);
	rc = rte_eth_dev_start(d->port);
	pthread_mutex_unlock(&d->lock);
	d->host->log(ZAP_LOG_DEBUG, DP_DOM,
		     "port %u link down for 500 ms: restarted it (%s)", d->port,
		     rc ? rte_strerror(-rc) : "ok");
	*down_since = now;
}
