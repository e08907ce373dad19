/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport: Ethernet/IPv4/UDP frames on a DPDK port, with the
 * reliability protocol of dp_proto.c on top. See README.md for the
 * operator's configuration and the threading model.
 *
 * This file is the rte_* side only: EAL start-up, the port, mbufs, ARP,
 * checksums, polling and the zap ops. What a frame means to the message
 * stream is decided in dp_proto.c, which never sees an rte_* type.
 *
 * Locking: one mutex per instance (d->lock) guards the port queues, the
 * protocol state, the neighbour table and the receive queue. Whoever holds
 * it polls the port (dp_progress()): a thread in zap_recv()/zap_send(), or
 * the service thread when nobody else has polled for a while.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_udp.h>

#include <zap/zap-plugin.h>

#include "config.h"
#include "dp_proto.h"
#include "dp_wire.h"
#include "zap-cuda.h"

#define DP_DOM "dpdk"
#define DP_DEFAULT_UDP_PORT 47000
#define DP_MAX_ARGS 64
#define DP_NEIGH_MAX 256
#define DP_BURST 32
#define DP_TXB 64
#define DP_NB_DESC 1024
#define DP_TIMER_NS 200000ull     /* protocol timers at most this often */
#define DP_SERVICE_IDLE_NS 50000ull /* service thread polls after this idle */

/* ------------------------------------------------------------ config */

struct dp_conf {
	char eal[1024];
	unsigned port;
	uint32_t ip;
	int udp_port; /* -1: from the listen address, else the default */
	struct {
		uint32_t ip;
		uint8_t mac[6];
	} nb[64];
	unsigned n_nb;
	double drop_rx;
	uint64_t mtu, mbufs, window, spin_us, rto_min_us, peer_timeout_ms,
		arp_timeout_ms, start_timeout_ms, linger_ms, max_peers, pin;
	uint64_t reasm_bytes, rxq_bytes, pool_bytes;
};

/*
 * The environment through the host (zap_host.env_get): in a setuid or
 * file-capability program every variable reads as unset, so a caller
 * cannot hand EAL arguments ("-d lib.so") to a privileged process and dpdk
 * reports itself not configured. A host without env_get: secure_getenv().
 */
static const char *dp_getenv(const struct zap_host *h, const char *name)
{
	return ZAP_HOST_HAS(h, env_get) ? h->env_get(name) : secure_getenv(name);
}

static int env_u64(const struct zap_host *h, const char *name, uint64_t def,
		   uint64_t min, uint64_t max, uint64_t *out, char *why, size_t len)
{
	const char *v = dp_getenv(h, name);
	unsigned long long x;
	char *end;

	if (!v || !*v) {
		*out = def;
		return 0;
	}
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || x < min || x > max) {
		snprintf(why, len, "bad %s=\"%s\" (want an integer in [%llu, %llu])", name,
			 v, (unsigned long long)min, (unsigned long long)max);
		return -EINVAL;
	}
	*out = x;
	return 0;
}

static int parse_neighbors(struct dp_conf *c, const char *v, char *why, size_t len)
{
	char buf[2048], *save = NULL, *tok;

	if (strlen(v) >= sizeof(buf))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", v);
	for (tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		char *eq = strchr(tok, '=');

		if (!eq || c->n_nb == sizeof(c->nb) / sizeof(c->nb[0]))
			goto bad;
		*eq = 0;
		if (dp_parse_ip(tok, &c->nb[c->n_nb].ip) || dp_parse_mac(eq + 1, c->nb[c->n_nb].mac))
			goto bad;
		c->n_nb++;
	}
	return 0;
bad:
	snprintf(why, len, "bad ZAP_DPDK_NEIGHBORS=\"%s\" (want ip=aa:bb:cc:dd:ee:ff,... "
		 "at most 64)", v);
	return -EINVAL;
}

/*
 * Read every ZAP_DPDK_* variable. Return 1 when the transport is not
 * configured (no EAL arguments), 0, or -EINVAL with @why naming the
 * variable.
 */
static int dp_conf_load(const struct zap_host *h, struct dp_conf *c, char *why,
			size_t len)
{
	const char *v = dp_getenv(h, "ZAP_DPDK_EAL_ARGS");
	uint64_t x;
	int rc = 0;

	memset(c, 0, sizeof(*c));
	if (!v || !v[strspn(v, " \t")]) {
		snprintf(why, len, "not configured: ZAP_DPDK_EAL_ARGS unset");
		return 1;
	}
	if (strlen(v) >= sizeof(c->eal)) {
		snprintf(why, len, "ZAP_DPDK_EAL_ARGS longer than %zu bytes", sizeof(c->eal) - 1);
		return -EINVAL;
	}
	snprintf(c->eal, sizeof(c->eal), "%s", v);
	v = dp_getenv(h, "ZAP_DPDK_IP");
	if (!v || !*v) {
		snprintf(why, len, "ZAP_DPDK_IP unset (the port's local IPv4 address)");
		return -EINVAL;
	}
	if (dp_parse_ip(v, &c->ip) || !c->ip) {
		snprintf(why, len, "bad ZAP_DPDK_IP=\"%s\" (want a.b.c.d)", v);
		return -EINVAL;
	}
	rc = env_u64(h, "ZAP_DPDK_PORT", 0, 0, RTE_MAX_ETHPORTS - 1, &x, why, len);
	c->port = (unsigned)x;
	c->udp_port = -1;
	v = dp_getenv(h, "ZAP_DPDK_UDP_PORT");
	if (!rc && v && *v) {
		rc = env_u64(h, "ZAP_DPDK_UDP_PORT", 0, 1, 65535, &x, why, len);
		c->udp_port = (int)x;
	}
	v = dp_getenv(h, "ZAP_DPDK_NEIGHBORS");
	if (!rc && v && *v)
		rc = parse_neighbors(c, v, why, len);
	v = dp_getenv(h, "ZAP_DPDK_DROP_RX");
	if (!rc && v && *v) {
		char *end;

		errno = 0;
		c->drop_rx = strtod(v, &end);
		if (errno || end == v || *end || !(c->drop_rx >= 0 && c->drop_rx < 1)) {
			snprintf(why, len, "bad ZAP_DPDK_DROP_RX=\"%s\" (want a fraction in [0, 1))", v);
			rc = -EINVAL;
		}
	}
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_MTU", 1500, 576, 9000, &c->mtu, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_MBUFS", 8191, 1023, 1u << 24, &c->mbufs, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_WINDOW", 256, 4, DP_WIN_MAX, &c->window, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_SPIN_US", 100, 0, 1000000, &c->spin_us, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_RTO_MIN_US", 1000, 20, 10000000, &c->rto_min_us, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_PEER_TIMEOUT_MS", 5000, 10, 3600000,
			       &c->peer_timeout_ms, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_ARP_TIMEOUT_MS", 3000, 1, 600000, &c->arp_timeout_ms,
			       why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_START_TIMEOUT_MS", 5000, 0, 600000,
			       &c->start_timeout_ms, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_LINGER_MS", 2000, 0, 600000, &c->linger_ms, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_MAX_PEERS", 256, 1, 65536, &c->max_peers, why, len);
	rc = rc ? rc : env_u64(h, "ZAP_DPDK_PIN", 1, 0, 1, &c->pin, why, len);
	if (rc)
		return rc;
	/* The byte counts go through the host, which words its own reason. */
	if (h->env_bytes("ZAP_DPDK_REASM_BYTES", 256ull << 20, 1ull << 20, 1ull << 40,
			 &c->reasm_bytes) ||
	    h->env_bytes("ZAP_DPDK_RXQ_BYTES", 256ull << 20, 1ull << 20, 1ull << 40,
			 &c->rxq_bytes) ||
	    h->env_bytes("ZAP_DPDK_POOL_BYTES", 64ull << 20, 4096, 1ull << 40,
			 &c->pool_bytes)) {
		snprintf(why, len, "%s", h->last_error());
		return -EINVAL;
	}
	return 0;
}

/* Split EAL arguments on blanks (no quoting) after argv[0]. */
static int split_args(char *s, char **argv, int max)
{
	char *save = NULL;
	int n = 0;

	argv[n++] = (char *)"zap-dpdk";
	for (char *t = strtok_r(s, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
		if (n == max - 1)
			return -E2BIG;
		argv[n++] = t;
	}
	argv[n] = NULL;
	return n;
}

/* Whether a DPDK driver library matching vdev @name is installed. */
static bool vdev_driver_found(const char *name, char *dir_out, size_t len)
{
	DIR *dir = opendir(RTE_EAL_PMD_PATH);
	struct dirent *de;
	char want[160];
	bool found = false;

	snprintf(dir_out, len, "%s", RTE_EAL_PMD_PATH);
	if (!dir)
		return true; /* cannot tell: let the EAL judge at open */
	/* "eth_" is the old prefix many drivers still accept as an alias. */
	snprintf(want, sizeof(want), "%s%s", strncmp(name, "eth_", 4) ? "" : "net_",
		 strncmp(name, "eth_", 4) ? name : name + 4);
	while (!found && (de = readdir(dir))) {
		const char *f = de->d_name, *so;
		size_t n;

		if (strncmp(f, "librte_", 7) || !(so = strstr(f, ".so")))
			continue;
		n = (size_t)(so - f) - 7;
		/* The vdev bus matches a device to the driver whose name is a
		 * prefix of the device name. */
		found = n && !strncmp(want, f + 7, n);
	}
	closedir(dir);
	return found;
}

static unsigned long free_hugepages(void)
{
	DIR *dir = opendir("/sys/kernel/mm/hugepages");
	unsigned long total = 0;
	struct dirent *de;

	if (!dir)
		return 0;
	while ((de = readdir(dir))) {
		char path[512];
		unsigned long n = 0;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/%s/free_hugepages",
			 de->d_name);
		f = fopen(path, "r");
		if (f && fscanf(f, "%lu", &n) == 1)
			total += n;
		if (f)
			fclose(f);
	}
	closedir(dir);
	return total;
}

/*
 * What can be checked about the EAL arguments without starting the EAL
 * (probe may not): every --vdev names an installed driver, and hugepages
 * exist unless --no-huge. The EAL's own verdict comes at open.
 */
static int eal_args_check(const char *eal, char *why, size_t len)
{
	char buf[1024], *argv[DP_MAX_ARGS + 1], dir[256];
	bool no_huge = false;
	int argc;

	snprintf(buf, sizeof(buf), "%s", eal);
	argc = split_args(buf, argv, DP_MAX_ARGS + 1);
	if (argc < 0) {
		snprintf(why, len, "ZAP_DPDK_EAL_ARGS has more than %d words", DP_MAX_ARGS - 1);
		return -EINVAL;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *dev = NULL;
		char name[128];

		if (!strcmp(a, "--no-huge"))
			no_huge = true;
		if (!strncmp(a, "--vdev=", 7))
			dev = a + 7;
		else if (!strcmp(a, "--vdev") && i + 1 < argc)
			dev = argv[++i];
		if (!dev)
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(dev, ","), dev);
		if (!vdev_driver_found(name, dir, sizeof(dir))) {
			snprintf(why, len, "ZAP_DPDK_EAL_ARGS: no DPDK driver for vdev \"%.64s\" in %.120s",
				 name, dir);
			return -ENOENT;
		}
	}
	if (!no_huge && !free_hugepages()) {
		snprintf(why, len, "no free hugepages (see /sys/kernel/mm/hugepages) and "
			 "ZAP_DPDK_EAL_ARGS lacks --no-huge");
		return -ENOMEM;
	}
	return 0;
}

/* ------------------------------------------------------- process-wide */

/* The EAL starts once per process and is never cleaned up: DPDK cannot
 * start it again after rte_eal_cleanup(). A failed start is not retried
 * either (it may leave state behind); its reason is kept for every later
 * open and probe. */
static pthread_mutex_t dp_eal_lock = PTHREAD_MUTEX_INITIALIZER;
static int dp_eal_rc = 1; /* 1: not started, 0: running, <0: failed */
static char dp_eal_why[768];

/* DPDK's log goes through the host's log (at DEBUG); its last error lines
 * are kept to explain a failure. */
static pthread_mutex_t dp_log_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct zap_host *dp_log_host;
static char dp_log_buf[512];
static size_t dp_log_pos;
static char dp_log_err[2][256];

/* Per port, for the life of the process: the mbuf pool outlives every
 * instance, so messages still held after zap_close() stay valid and a
 * later open reuses it. */
#define DP_GPU_CHUNKS 64

/* A memory chunk of an mbuf pool, registered with CUDA. */
struct dp_gpu_chunk {
	char *addr;
	size_t len;
	zcu_ptr dev;
};

static struct {
	bool in_use;
	struct rte_mempool *mp;
	atomic_uint held; /* mbufs inside undelivered/unreleased messages */
	unsigned nmbufs;
	/* Where CUDA is present, the pool's memory is registered with the
	 * GPU once, for the pool's (the process's) life. */
	bool gpu;
	unsigned nchunks;
	struct dp_gpu_chunk chunk[DP_GPU_CHUNKS];
} dp_ports[RTE_MAX_ETHPORTS];

static void gpu_register(const struct zap_host *h, unsigned port);
static void *gpu_addr(unsigned port, const void *p);

static void log_line(const char *line)
{
	int lvl = rte_log_cur_msg_loglevel();

	if (lvl > 0 && lvl <= (int)RTE_LOG_ERR) {
		memcpy(dp_log_err[0], dp_log_err[1], sizeof(dp_log_err[0]));
		snprintf(dp_log_err[1], sizeof(dp_log_err[1]), "%.255s", line);
	}
	if (dp_log_host && dp_log_host->log_enabled(ZAP_LOG_DEBUG))
		dp_log_host->log(ZAP_LOG_DEBUG, DP_DOM, "%s", line);
}

static ssize_t log_write(void *cookie, const char *buf, size_t size)
{
	pthread_mutex_lock(&dp_log_lock);
	for (size_t i = 0; i < size; i++) {
		if (buf[i] == '\n' || dp_log_pos == sizeof(dp_log_buf) - 1) {
			dp_log_buf[dp_log_pos] = 0;
			if (dp_log_pos)
				log_line(dp_log_buf);
			dp_log_pos = 0;
			if (buf[i] == '\n')
				continue;
		}
		dp_log_buf[dp_log_pos++] = buf[i];
	}
	pthread_mutex_unlock(&dp_log_lock);
	return (ssize_t)size;
}

static void eal_said(char *out, size_t len)
{
	pthread_mutex_lock(&dp_log_lock);
	if (dp_log_err[0][0])
		snprintf(out, len, "%s / %s", dp_log_err[0], dp_log_err[1]);
	else
		snprintf(out, len, "%s", dp_log_err[1][0] ? dp_log_err[1] : "(nothing logged)");
	pthread_mutex_unlock(&dp_log_lock);
}

static int dp_eal_start(const struct zap_host *h, const struct dp_conf *c)
{
	char buf[1024], *argv[DP_MAX_ARGS + 1], said[520];
	cpu_set_t saved;
	int argc, rc, saved_ok;

	pthread_mutex_lock(&dp_eal_lock);
	if (dp_eal_rc <= 0) {
		rc = dp_eal_rc;
		pthread_mutex_unlock(&dp_eal_lock);
		return rc ? h->fail(rc, "dpdk: %s", dp_eal_why) : 0;
	}
	dp_log_host = h;
	if (!rte_log_get_stream() || rte_log_get_stream() == stderr) {
		FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){ .write = log_write });

		if (f) {
			setvbuf(f, NULL, _IOLBF, 0);
			rte_openlog_stream(f);
		}
	}
	snprintf(buf, sizeof(buf), "%s", c->eal);
	argc = split_args(buf, argv, DP_MAX_ARGS + 1);
	if (argc < 0) {
		rc = -EINVAL;
		snprintf(dp_eal_why, sizeof(dp_eal_why), "ZAP_DPDK_EAL_ARGS has too many words");
		goto out;
	}
	/* rte_eal_init() pins the calling thread to the main lcore: that is
	 * the application's thread, so its affinity is put back; only the
	 * transport's own service thread runs on the EAL's core. */
	saved_ok = !pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved);
	rc = rte_eal_init(argc, argv);
	if (saved_ok)
		pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	if (rc < 0) {
		int e = rte_errno;

		eal_said(said, sizeof(said));
		snprintf(dp_eal_why, sizeof(dp_eal_why),
			 "rte_eal_init(\"%s\") failed: %s; EAL said: %s", c->eal,
			 rte_strerror(e), said);
		h->log(ZAP_LOG_ERROR, DP_DOM, "%s", dp_eal_why);
		rc = ZAP_ENOTAVAIL;
		goto out;
	}
	rc = 0;
out:
	dp_eal_rc = rc;
	pthread_mutex_unlock(&dp_eal_lock);
	return rc ? h->fail(rc, "dpdk: %s", dp_eal_why) : 0;
}

/* ------------------------------------------------------------ instance */

struct dp_neigh {
	uint32_t ip;
	uint8_t mac[6];
	bool fixed;
	uint64_t used_ns;
};

struct dp;

struct dp_msg {
	struct zap_msg m;
	struct dp_msg *next;
	struct rte_mbuf *mb; /* single-frame message: the bytes lie here */
	void *heap;          /* reassembled message */
	atomic_uint *held;
	char peer[24];
};

struct dp {
	const struct zap_host *host;
	struct dp_conf conf;
	uint16_t port;
	struct dp_local loc;
	uint32_t payload_max;
	uint64_t max_msg;
	bool tx_csum_offload, rx_csum_offload;
	const char *driver;
	struct rte_mempool *mp;
	struct zap_pool *pool;
	int socket;

	pthread_mutex_t lock;
	struct dp_proto *proto;
	struct rte_mbuf *txb[DP_TXB];
	unsigned ntx;
	struct dp_neigh nb[DP_NEIGH_MAX];
	unsigned n_nb;
	uint32_t arp_last_ip;
	uint64_t arp_last_ns;
	struct dp_msg *rxq, *rxq_tail;
	uint64_t rxq_bytes;
	bool rx_blocked;
	uint64_t next_timer, rng;
	uint64_t rx_dropped; /* frames the parser refused */
	uint64_t tx_copies;  /* retransmissions of frames still held elsewhere */
	_Atomic uint64_t last_poll;

	atomic_bool shut, stop;
	int shut_fd;
	pthread_t svc;
	bool svc_started;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct dp_neigh *neigh_find(struct dp *d, uint32_t ip)
{
	for (unsigned i = 0; i < d->n_nb; i++)
		if (d->nb[i].ip == ip)
			return &d->nb[i];
	return NULL;
}

/* Record @ip at @mac: update a known entry; add one only if @create (the
 * frame was meant for us). A full table replaces its least recently used
 * learned entry, so a flood of senders cannot grow it. */
static void neigh_learn(struct dp *d, uint32_t ip, const uint8_t mac[6], bool create,
			uint64_t now)
{
	struct dp_neigh *n = neigh_find(d, ip);

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

static void tx_flush(struct dp *d)
{
	unsigned sent = 0;

	for (int tries = 0; sent < d->ntx && tries < 4; tries++)
		sent += rte_eth_tx_burst(d->port, 0, d->txb + sent, (uint16_t)(d->ntx - sent));
	/* The ring is full or the link down: those frames are lost, and the
	 * protocol retransmits what matters. */
	for (unsigned i = sent; i < d->ntx; i++)
		rte_pktmbuf_free(d->txb[i]);
	d->ntx = 0;
}

static void tx_push(struct dp *d, struct rte_mbuf *mb)
{
	if (d->ntx == DP_TXB)
		tx_flush(d);
	d->txb[d->ntx++] = mb;
}

static void arp_send(struct dp *d, uint16_t op, const uint8_t tha[6], uint32_t tpa)
{
	struct rte_mbuf *mb = rte_pktmbuf_alloc(d->mp);

	if (!mb)
		return;
	mb->data_len = (uint16_t)dp_wire_arp(rte_pktmbuf_mtod(mb, uint8_t *), op, d->loc.mac,
					      d->loc.ip, tha, tpa);
	mb->pkt_len = mb->data_len;
	tx_push(d, mb);
}

static void arp_request(struct dp *d, uint32_t ip, uint64_t now, bool force)
{
	static const uint8_t zero[6];

	/* At most one request per target per 10 ms from the data path. */
	if (!force && ip == d->arp_last_ip && now - d->arp_last_ns < 10000000ull)
		return;
	d->arp_last_ip = ip;
	d->arp_last_ns = now;
	arp_send(d, DP_ARP_REQUEST, zero, ip);
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

static void fr_xmit(void *user, struct dp_addr to, void *frame, size_t len)
{
	struct dp *d = user;
	struct rte_mbuf *mb = frame;
	struct dp_neigh *n;
	const uint8_t *mac;
	struct rte_ipv4_hdr *ip;
	struct rte_udp_hdr *udp;
	uint8_t *f;

	/* Still referenced elsewhere (a driver that has not completed the last
	 * transmission, or a loopback port's receive side): its headers are
	 * complete but must not change under the other holder, so send a
	 * copy. */
	if (rte_mbuf_refcnt_read(mb) > 1) {
		struct rte_mbuf *c = rte_pktmbuf_copy(mb, d->mp, 0, UINT32_MAX);

		d->tx_copies++;
		if (c)
			tx_push(d, c);
		return;
	}
	if (to.ip == d->loc.ip) {
		mac = d->loc.mac;
	} else if ((n = neigh_find(d, to.ip))) {
		mac = n->mac;
	} else {
		/* Forgotten (table full): ask again; the retransmission timer
		 * sends this frame once the answer is in. */
		arp_request(d, to.ip, now_ns(), false);
		return;
	}
	f = rte_pktmbuf_mtod(mb, uint8_t *);
	dp_wire_udp(f, d->loc.mac, mac, d->loc.ip, to.ip, d->loc.port, to.port, len);
	ip = (struct rte_ipv4_hdr *)(f + DP_ETH_HLEN);
	udp = (struct rte_udp_hdr *)(f + DP_ETH_HLEN + DP_IP_HLEN);
	if (d->tx_csum_offload) {
		mb->l2_len = DP_ETH_HLEN;
		mb->l3_len = DP_IP_HLEN;
		mb->ol_flags = RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
		udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, mb->ol_flags);
	} else {
		ip->hdr_checksum = rte_ipv4_cksum(ip);
		udp->dgram_cksum = rte_ipv4_udptcp_cksum(ip, udp);
	}
	/* The driver frees one reference once sent; the protocol keeps its
	 * own until the frame is acknowledged. */
	rte_mbuf_refcnt_update(mb, 1);
	tx_push(d, mb);
}

static void msg_release(struct zap_msg *zm)
{
	struct dp_msg *m = (struct dp_msg *)zm;

	if (m->mb) {
		rte_pktmbuf_free(m->mb);
		atomic_fetch_sub(m->held, 1);
	}
	free(m->heap);
	free(m);
}

static void fr_deliver(void *user, struct dp_addr from, void *frame, void *heap,
		       const void *data, size_t len)
{
	struct dp *d = user;
	struct dp_msg *m = malloc(sizeof(*m));

	if (m && frame && atomic_load(&dp_ports[d->port].held) > dp_ports[d->port].nmbufs / 4) {
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
		d->host->log(ZAP_LOG_ERROR, DP_DOM, "out of memory: message of %zu bytes lost",
			     len);
		free(m);
		free(heap);
		if (frame)
			rte_pktmbuf_free(frame);
		return;
	}
	*m = (struct dp_msg){
		.m = { .size = sizeof(m->m), .data = data, .len = len, .peer = m->peer,
		       .release = msg_release,
		       .device_ptr = frame ? gpu_addr(d->port, data) : NULL },
		.mb = frame, .heap = heap, .held = &dp_ports[d->port].held,
	};
	if (frame)
		atomic_fetch_add(m->held, 1);
	dp_format_peer(m->peer, sizeof(m->peer), from.ip, from.port);
	if (d->rxq_tail)
		d->rxq_tail->next = m;
	else
		d->rxq = m;
	d->rxq_tail = m;
	d->rxq_bytes += len + sizeof(*m);
	if (d->rxq_bytes > d->conf.rxq_bytes && !d->rx_blocked) {
		d->rx_blocked = true;
		dp_set_rx_blocked(d->proto, true);
	}
}

/* --- receive side */

static void rx_one(struct dp *d, struct rte_mbuf *mb, uint64_t now)
{
	struct dp_frame_info fi;
	unsigned trust = 0;

	if (mb->nb_segs != 1)
		goto drop; /* larger than the MTU this transport sends */
	if (d->conf.drop_rx > 0) {
		d->rng ^= d->rng << 13;
		d->rng ^= d->rng >> 7;
		d->rng ^= d->rng << 17;
		if ((double)(d->rng >> 11) / 9007199254740992.0 < d->conf.drop_rx)
			goto drop_quiet;
	}
	if (d->rx_csum_offload) {
		uint64_t ipf = mb->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
		uint64_t l4f = mb->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;

		if (ipf == RTE_MBUF_F_RX_IP_CKSUM_BAD || l4f == RTE_MBUF_F_RX_L4_CKSUM_BAD)
			goto drop;
		trust |= ipf == RTE_MBUF_F_RX_IP_CKSUM_GOOD ? DP_TRUST_IP_CSUM : 0;
		trust |= l4f == RTE_MBUF_F_RX_L4_CKSUM_GOOD ? DP_TRUST_UDP_CSUM : 0;
	}
	switch (dp_wire_parse(rte_pktmbuf_mtod(mb, uint8_t *), mb->data_len, &d->loc, trust,
			      &fi)) {
	case DP_FRAME_ARP:
		neigh_learn(d, fi.arp_spa, fi.arp_sha, fi.arp_tpa == d->loc.ip, now);
		if (fi.arp_op == DP_ARP_REQUEST && fi.arp_tpa == d->loc.ip && fi.arp_spa)
			arp_send(d, DP_ARP_REPLY, fi.arp_sha, fi.arp_spa);
		rte_pktmbuf_free(mb);
		return;
	case DP_FRAME_UDP:
		neigh_learn(d, fi.src_ip, fi.src_mac, true, now);
		dp_input(d->proto, (struct dp_addr){ fi.src_ip, fi.src_port }, mb, fi.payload,
			 fi.payload_len, now);
		return;
	case DP_FRAME_DROP:
		break;
	}
drop:
	d->rx_dropped++;
drop_quiet:
	rte_pktmbuf_free(mb);
}

/* Poll the port once; d->lock held. Return the frames received. */
static unsigned dp_progress(struct dp *d)
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
		tx_flush(d);
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
	d->host->log(ZAP_LOG_DEBUG, DP_DOM, "peers %u, early %u, unacked %u, reassembling %llu B; "
		     "delivered %llu, retransmits %llu, dups %llu, dropped %llu (+%llu refused "
		     "frames), acks %llu, partials dropped %llu, peers reset %llu; mbufs free %u, "
		     "held by messages %u; retransmitted copies %llu", st.peers, st.early_frames, st.unacked_frames,
		     (unsigned long long)st.reasm_bytes, (unsigned long long)st.delivered,
		     (unsigned long long)st.retransmits, (unsigned long long)st.dups,
		     (unsigned long long)st.dropped, (unsigned long long)rxd,
		     (unsigned long long)st.acks_sent, (unsigned long long)st.partials_dropped,
		     (unsigned long long)st.peers_reset, rte_mempool_avail_count(d->mp),
		     atomic_load(&dp_ports[d->port].held), (unsigned long long)copies);
}

/*
 * Restart a port whose link stays down: a memif client that started before
 * its server listened does not try again by itself. Every other driver
 * takes a restart of a down link in its stride.
 */
static void link_watch(struct dp *d, uint64_t *down_since)
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
	d->host->log(ZAP_LOG_DEBUG, DP_DOM, "port %u link down for 500 ms: restarted it (%s)",
		     d->port, rc ? rte_strerror(-rc) : "ok");
	*down_since = now;
}

static void *service_main(void *arg)
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
		if (now_ns() - last >= DP_SERVICE_IDLE_NS && !pthread_mutex_trylock(&d->lock)) {
			n = dp_progress(d);
			busy = dp_busy(d->proto);
			pthread_mutex_unlock(&d->lock);
		}
		if (now_ns() >= next_link) {
			link_watch(d, &down_since);
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

/* ------------------------------------------------------------- port */

static int port_start(struct dp *d)
{
	const struct zap_host *h = d->host;
	struct rte_eth_dev_info di;
	struct rte_eth_conf conf;
	struct rte_ether_addr mac;
	uint64_t want_tx = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
	uint64_t want_rx = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
	uint16_t nrx = DP_NB_DESC, ntx = DP_NB_DESC;
	uint64_t deadline;
	int rc, sock;

	if (!rte_eth_dev_is_valid_port(d->port)) {
		char said[520];

		eal_said(said, sizeof(said));
		return h->fail(ZAP_ENOTAVAIL, "dpdk: ZAP_DPDK_PORT=%u: no such port (the EAL "
			       "found %u); EAL said: %s", d->port, rte_eth_dev_count_avail(),
			       said);
	}
	if (dp_ports[d->port].in_use)
		return h->fail(-EBUSY, "dpdk: port %u is in use by another open transport in "
			       "this process", d->port);
	rc = rte_eth_dev_info_get(d->port, &di);
	if (rc)
		return h->fail(-EIO, "dpdk: rte_eth_dev_info_get(%u): %s", d->port,
			       rte_strerror(-rc));
	d->driver = di.driver_name;
	sock = rte_eth_dev_socket_id(d->port);
	d->socket = sock < 0 ? (int)SOCKET_ID_ANY : sock;
	if (!dp_ports[d->port].mp) {
		char name[RTE_MEMPOOL_NAMESIZE];
		/* One frame per mbuf: room for the MTU, the Ethernet header
		 * and our 2-byte alignment shift. */
		uint32_t room = RTE_PKTMBUF_HEADROOM + 2 +
				(uint32_t)(d->conf.mtu + DP_ETH_HLEN + 4 > 2048 ?
						   d->conf.mtu + DP_ETH_HLEN + 4 : 2048);

		snprintf(name, sizeof(name), "zap_dp_%u", d->port);
		/* NUMA-local to the port; hugepages unless --no-huge. */
		dp_ports[d->port].mp = rte_pktmbuf_pool_create(name, (unsigned)d->conf.mbufs,
							       256, 0, (uint16_t)room, d->socket);
		if (!dp_ports[d->port].mp)
			return h->fail(-ENOMEM, "dpdk: rte_pktmbuf_pool_create(%llu mbufs of %u "
				       "bytes, socket %d): %s", (unsigned long long)d->conf.mbufs,
				       room, d->socket, rte_strerror(rte_errno));
		dp_ports[d->port].nmbufs = (unsigned)d->conf.mbufs;
		gpu_register(h, d->port);
	}
	d->mp = dp_ports[d->port].mp;
	memset(&conf, 0, sizeof(conf));
	d->tx_csum_offload = (di.tx_offload_capa & want_tx) == want_tx;
	d->rx_csum_offload = (di.rx_offload_capa & want_rx) == want_rx;
	if (d->tx_csum_offload)
		conf.txmode.offloads = want_tx;
	if (d->rx_csum_offload)
		conf.rxmode.offloads = want_rx;
	rc = rte_eth_dev_configure(d->port, 1, 1, &conf);
	if (rc)
		return h->fail(-EIO, "dpdk: rte_eth_dev_configure(port %u, %s): %s", d->port,
			       di.driver_name, rte_strerror(-rc));
	rc = rte_eth_dev_set_mtu(d->port, (uint16_t)d->conf.mtu);
	if (rc && rc != -ENOTSUP)
		h->log(ZAP_LOG_DEBUG, DP_DOM, "rte_eth_dev_set_mtu(%u, %llu): %s", d->port,
		       (unsigned long long)d->conf.mtu, rte_strerror(-rc));
	rte_eth_dev_adjust_nb_rx_tx_desc(d->port, &nrx, &ntx);
	rc = rte_eth_rx_queue_setup(d->port, 0, nrx, (unsigned)d->socket, NULL, d->mp);
	if (!rc)
		rc = rte_eth_tx_queue_setup(d->port, 0, ntx, (unsigned)d->socket, NULL);
	if (rc)
		return h->fail(-EIO, "dpdk: queue setup on port %u (%s): %s", d->port,
			       di.driver_name, rte_strerror(-rc));
	/* A memif client cannot start before its server listens: retry. */
	deadline = now_ns() + d->conf.start_timeout_ms * 1000000ull;
	while ((rc = rte_eth_dev_start(d->port)) != 0 && now_ns() < deadline)
		usleep(20000);
	if (rc)
		return h->fail(-EIO, "dpdk: rte_eth_dev_start(port %u, %s): %s (for %llu ms, "
			       "ZAP_DPDK_START_TIMEOUT_MS)", d->port, di.driver_name,
			       rte_strerror(-rc), (unsigned long long)d->conf.start_timeout_ms);
	rte_eth_macaddr_get(d->port, &mac);
	memcpy(d->loc.mac, mac.addr_bytes, 6);
	dp_ports[d->port].in_use = true;
	return 0;
}

/* ------------------------------------------------------- GPU mapping */

struct gpu_reg {
	const struct zcu *cu;
	unsigned port;
	char why[160];
};

static void gpu_chunk(struct rte_mempool *mp, void *opaque,
		      struct rte_mempool_memhdr *memhdr, unsigned idx)
{
	struct gpu_reg *g = opaque;
	struct dp_gpu_chunk *c;
	char err[96];
	zcu_result r;

	if (g->why[0])
		return;
	if (dp_ports[g->port].nchunks == DP_GPU_CHUNKS) {
		snprintf(g->why, sizeof(g->why), "more than %d memory chunks", DP_GPU_CHUNKS);
		return;
	}
	c = &dp_ports[g->port].chunk[dp_ports[g->port].nchunks];
	r = g->cu->MemHostRegister(memhdr->addr, memhdr->len,
				   ZCU_MEMHOSTREGISTER_PORTABLE | ZCU_MEMHOSTREGISTER_DEVICEMAP);
	if (r != ZCU_SUCCESS) {
		snprintf(g->why, sizeof(g->why), "cuMemHostRegister(%zu bytes): %s",
			 memhdr->len, zcu_error_name(g->cu, r, err, sizeof(err)));
		return;
	}
	c->addr = memhdr->addr;
	c->len = memhdr->len;
	dp_ports[g->port].nchunks++;
	r = g->cu->MemHostGetDevicePointer(&c->dev, memhdr->addr, 0);
	if (r != ZCU_SUCCESS)
		snprintf(g->why, sizeof(g->why), "cuMemHostGetDevicePointer: %s",
			 zcu_error_name(g->cu, r, err, sizeof(err)));
}

/*
 * Register a port's mbuf pool with the GPU, where CUDA is present, so that
 * kernels read single-frame payloads where the NIC put them
 * (zap_msg_device_ptr()). Failure is not fatal: messages then carry no
 * device pointer, and the log says why.
 */
static void gpu_register(const struct zap_host *h, unsigned port)
{
	struct gpu_reg g = { .port = port };
	struct zcu_device_info info;
	zcu_ctx ctx, prev;
	char err[96];
	zcu_result r;

	if (zcu_load(&g.cu, g.why, sizeof(g.why)) != ZAP_PROBE_OK ||
	    zcu_open_device(h, g.cu, &info, g.why, sizeof(g.why)) != ZAP_PROBE_OK) {
		h->log(ZAP_LOG_DEBUG, DP_DOM, "mbuf pool not mapped for a GPU: %s", g.why);
		return;
	}
	if (!g.cu->MemHostRegister || !g.cu->MemHostUnregister ||
	    !g.cu->MemHostGetDevicePointer) {
		h->log(ZAP_LOG_WARN, DP_DOM, "mbuf pool not mapped for the GPU: the CUDA "
		       "driver lacks cuMemHostRegister/cuMemHostGetDevicePointer");
		return;
	}
	r = g.cu->DevicePrimaryCtxRetain(&ctx, info.dev);
	if (r != ZCU_SUCCESS) {
		h->log(ZAP_LOG_WARN, DP_DOM, "mbuf pool not mapped for the GPU: "
		       "cuDevicePrimaryCtxRetain: %s", zcu_error_name(g.cu, r, err, sizeof(err)));
		return;
	}
	g.cu->CtxPushCurrent(ctx);
	rte_mempool_mem_iter(dp_ports[port].mp, gpu_chunk, &g);
	if (g.why[0])
		while (dp_ports[port].nchunks)
			g.cu->MemHostUnregister(dp_ports[port].chunk[--dp_ports[port].nchunks].addr);
	g.cu->CtxPopCurrent(&prev);
	if (g.why[0]) {
		g.cu->DevicePrimaryCtxRelease(info.dev);
		h->log(ZAP_LOG_WARN, DP_DOM, "mbuf pool not mapped for the GPU: %s", g.why);
		return;
	}
	/* The context stays retained: the pool lives as long as the process. */
	dp_ports[port].gpu = true;
	h->log(ZAP_LOG_INFO, DP_DOM, "mbuf pool of port %u mapped for CUDA device %d (%s): "
	       "%u chunks", port, info.ordinal, info.name, dp_ports[port].nchunks);
}

/* The device address of @p inside a registered mbuf pool, or NULL. */
static void *gpu_addr(unsigned port, const void *p)
{
	const char *c = p;

	if (!dp_ports[port].gpu)
		return NULL;
	for (unsigned i = 0; i < dp_ports[port].nchunks; i++) {
		const struct dp_gpu_chunk *k = &dp_ports[port].chunk[i];

		if (c >= k->addr && c < k->addr + k->len)
			return (void *)(uintptr_t)(k->dev + (zcu_ptr)(c - k->addr));
	}
	return NULL;
}

/* ------------------------------------------------------------- ops */

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

/* What open will do about the GPU, for the probe's detail (cheap: cuInit
 * and device queries only). */
static const char *gpu_plan(const struct zap_host *h, char *buf, size_t len)
{
	struct zcu_device_info info;
	const struct zcu *cu;
	char why[160];

	if (zcu_load(&cu, why, sizeof(why)) != ZAP_PROBE_OK ||
	    zcu_open_device(h, cu, &info, why, sizeof(why)) != ZAP_PROBE_OK)
		snprintf(buf, len, "no (%s)", why);
	else if (!cu->MemHostRegister || !cu->MemHostGetDevicePointer)
		snprintf(buf, len, "no (the CUDA driver lacks cuMemHostRegister)");
	else
		snprintf(buf, len, "at open, for CUDA device %d (%s)", info.ordinal,
			 info.name);
	return buf;
}

static enum zap_probe_result dp_probe(const struct zap_host *h, struct zap_probe_info *pi)
{
	struct dp_conf c;
	char ipbuf[24], gpu[256];
	int rc;

	if (!ZAP_HOST_HAS(h, last_error)) { /* host older than ABI 1.1 */
		snprintf(pi->reason, sizeof(pi->reason),
			 "libzap is too old for this plugin (needs plugin ABI 1.1)");
		return ZAP_PROBE_ERROR;
	}
	rc = dp_conf_load(h, &c, pi->reason, sizeof(pi->reason));
	if (rc == 1)
		return ZAP_PROBE_NOT_PRESENT;
	if (rc)
		return ZAP_PROBE_ERROR;
	pthread_mutex_lock(&dp_eal_lock);
	rc = dp_eal_rc;
	if (rc < 0)
		snprintf(pi->reason, sizeof(pi->reason), "EAL failed earlier in this process: %.200s",
			 dp_eal_why);
	pthread_mutex_unlock(&dp_eal_lock);
	if (rc < 0)
		return ZAP_PROBE_ERROR;
	if (rc == 0) {
		/* The EAL already runs here (an earlier open): ask it. */
		if (!rte_eth_dev_is_valid_port((uint16_t)c.port)) {
			snprintf(pi->reason, sizeof(pi->reason), "ZAP_DPDK_PORT=%u: no such port",
				 c.port);
			return ZAP_PROBE_ERROR;
		}
	} else if (eal_args_check(c.eal, pi->reason, sizeof(pi->reason))) {
		return ZAP_PROBE_ERROR;
	}
	dp_format_peer(ipbuf, sizeof(ipbuf), c.ip, c.udp_port > 0 ? (uint16_t)c.udp_port : 0);
	snprintf(pi->reason, sizeof(pi->reason), "configured: port %u, %s%s", c.port, ipbuf,
		 rc ? " (the EAL starts at open)" : " (EAL running)");
	snprintf(pi->detail, sizeof(pi->detail),
		 "EAL arguments: %.600s\nport: %u\nlocal address: %s (port 0: from the listen "
		 "address, else %d)\nMTU: %llu, mbufs: %llu, window: %llu frames\n"
		 "static neighbours: %u\nreceive drop injection: %g\n"
		 "GPU mapping of the mbuf pool: %.150s",
		 c.eal, c.port, ipbuf, DP_DEFAULT_UDP_PORT, (unsigned long long)c.mtu,
		 (unsigned long long)c.mbufs, (unsigned long long)c.window, c.n_nb, c.drop_rx,
		 gpu_plan(h, gpu, sizeof(gpu)));
	fill_caps(NULL, &pi->caps);
	return ZAP_PROBE_OK;
}

/* Pool buffers may outlive the instance, so the backing knows only the
 * NUMA socket, kept per port for the life of the process. */
static int dp_port_socket[RTE_MAX_ETHPORTS];

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

static int dp_open(const struct zap_host *h, const struct zap_open_args *args, void **tp)
{
	struct zap_pool_backing backing = { .size = sizeof(backing), .alloc = mem_alloc,
					    .free = mem_free };
	struct dp_proto_cfg pc;
	struct dp_proto_ops po;
	char why[256];
	struct dp *d;
	uint32_t lip = 0;
	uint16_t lport = 0;
	int rc;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->host = h;
	d->shut_fd = -1;
	pthread_mutex_init(&d->lock, NULL);
	rc = dp_conf_load(h, &d->conf, why, sizeof(why));
	if (rc) {
		rc = rc == 1 ? h->fail(ZAP_ENOTAVAIL, "dpdk: %s", why)
			     : h->fail(-EINVAL, "dpdk: %s", why);
		goto fail;
	}
	d->port = (uint16_t)d->conf.port;
	d->loc.ip = d->conf.ip;
	dp_parse_ip_port(args->listen, &lip, &lport);
	d->loc.port = d->conf.udp_port > 0 ? (uint16_t)d->conf.udp_port
		      : lport			 ? lport
						 : DP_DEFAULT_UDP_PORT;
	/* The wire carries 32-bit message lengths. */
	d->max_msg = args->max_msg_size < UINT32_MAX ? args->max_msg_size : UINT32_MAX;
	if (d->conf.reasm_bytes < d->max_msg)
		d->conf.reasm_bytes = d->max_msg; /* else a largest message never fits */
	d->payload_max = (uint32_t)(d->conf.mtu - DP_IP_HLEN - DP_UDP_HLEN - DP_HDR_LEN);
	d->rng = now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)d;
	d->shut_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->shut_fd < 0) {
		rc = h->fail(-errno, "dpdk: eventfd: %s", strerror(errno));
		goto fail;
	}
	rc = dp_eal_start(h, &d->conf);
	if (rc)
		goto fail;
	pthread_mutex_lock(&dp_eal_lock); /* serialises port claims */
	rc = port_start(d);
	pthread_mutex_unlock(&dp_eal_lock);
	if (rc)
		goto fail;
	for (unsigned i = 0; i < d->conf.n_nb; i++) {
		struct dp_neigh *n = &d->nb[d->n_nb++];

		*n = (struct dp_neigh){ .ip = d->conf.nb[i].ip, .fixed = true };
		memcpy(n->mac, d->conf.nb[i].mac, 6);
	}
	pc = (struct dp_proto_cfg){
		.payload_max = d->payload_max, .window = (uint32_t)d->conf.window,
		.max_msg = d->max_msg, .rto_min_ns = d->conf.rto_min_us * 1000,
		.rto_max_ns = d->conf.peer_timeout_ms * 250000, .peer_timeout_ns = d->conf.peer_timeout_ms * 1000000,
		.max_peers = (uint32_t)d->conf.max_peers, .reasm_cap = d->conf.reasm_bytes,
		.seed = d->rng,
	};
	if (pc.rto_max_ns < pc.rto_min_ns)
		pc.rto_max_ns = pc.rto_min_ns;
	po = (struct dp_proto_ops){ .user = d, .frame_alloc = fr_alloc, .frame_free = fr_free,
				    .frame_xmit = fr_xmit, .deliver = fr_deliver };
	rc = dp_proto_new(&pc, &po, &d->proto);
	if (rc) {
		rc = h->fail(rc, "dpdk: protocol set-up failed");
		goto fail;
	}
	dp_port_socket[d->port] = d->socket;
	backing.user = &dp_port_socket[d->port];
	rc = h->pool_new(&backing, args->pool_bytes ? args->pool_bytes : d->conf.pool_bytes,
			 d->max_msg < d->conf.pool_bytes ? d->max_msg : d->conf.pool_bytes,
			 &d->pool);
	if (rc)
		goto fail;
	rc = pthread_create(&d->svc, NULL, service_main, d);
	if (rc) {
		rc = h->fail(-rc, "dpdk: cannot start the service thread: %s", strerror(rc));
		goto fail;
	}
	d->svc_started = true;
	if (d->conf.pin) {
		rte_cpuset_t set = rte_lcore_cpuset(rte_get_main_lcore());

		pthread_setaffinity_np(d->svc, sizeof(set), &set);
	}
	h->log(ZAP_LOG_INFO, DP_DOM, "port %u (%s) %02x:%02x:%02x:%02x:%02x:%02x, %u.%u.%u.%u:%u,"
	       " checksums %s", d->port, d->driver, d->loc.mac[0], d->loc.mac[1], d->loc.mac[2],
	       d->loc.mac[3], d->loc.mac[4], d->loc.mac[5], d->loc.ip >> 24,
	       (d->loc.ip >> 16) & 0xff, (d->loc.ip >> 8) & 0xff, d->loc.ip & 0xff, d->loc.port,
	       d->tx_csum_offload ? "offloaded" : "in software");
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

static void dp_destroy(void *tp)
{
	struct dp *d = tp;

	if (d->svc_started) {
		atomic_store(&d->stop, true);
		pthread_join(d->svc, NULL);
	}
	if (d->proto) {
		uint64_t end = now_ns() + d->conf.linger_ms * 1000000ull;
		struct dp_stats st;

		/* Like SO_LINGER: zap_send() returned once frames were queued,
		 * so give the peers a moment to acknowledge them. */
		pthread_mutex_lock(&d->lock);
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
		tx_flush(d);
		pthread_mutex_unlock(&d->lock);
	}
	while (d->rxq) {
		struct dp_msg *m = d->rxq;

		d->rxq = m->next;
		msg_release(&m->m);
	}
	if (d->mp) {
		pthread_mutex_lock(&dp_eal_lock);
		rte_eth_dev_stop(d->port);
		dp_ports[d->port].in_use = false;
		pthread_mutex_unlock(&dp_eal_lock);
	}
	if (d->pool)
		d->host->pool_close(d->pool);
	if (d->shut_fd >= 0)
		close(d->shut_fd);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/*
 * One turn of a caller's wait, d->lock held: poll the port; when that
 * brought nothing, pause without the lock (dp_pause()). Return 0 to look
 * again, or the ctx/shutdown error.
 */
static int dp_wait(struct dp *d, struct zap_ctx *ctx, uint64_t *idle, unsigned *backoff)
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

/* Learn @ip's MAC by ARP; d->lock held (dropped while waiting). */
static int resolve(struct dp *d, uint32_t ip, const char *peer, struct zap_ctx *ctx)
{
	uint64_t start = now_ns(), next = start, gap = 10000000ull;
	uint64_t end = start + d->conf.arp_timeout_ms * 1000000ull;
	unsigned tries = 0, backoff = 0;
	int rc;

	while (ip != d->loc.ip && !neigh_find(d, ip)) {
		uint64_t now = now_ns();

		if (now >= next) {
			if (now >= end)
				return d->host->fail(-EHOSTUNREACH, "dpdk: no ARP reply from %s after %u "
						     "requests in %llu ms (ZAP_DPDK_ARP_TIMEOUT_MS); "
						     "is the peer up on port %u's link?",
						     peer, tries, (unsigned long long)d->conf.arp_timeout_ms,
						     d->port);
			arp_request(d, ip, now, true);
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
		return d->host->fail(-EINVAL, "dpdk: bad peer \"%s\" (want a.b.c.d:port)", peer);
	if (len > d->max_msg)
		return d->host->fail(-EMSGSIZE, "dpdk: %zu bytes exceed the maximum message size "
				     "%llu", len, (unsigned long long)d->max_msg);
	if (atomic_load(&d->shut))
		return -ESHUTDOWN;
	rc = d->host->ctx_err(ctx);
	if (rc)
		return rc;
	pthread_mutex_lock(&d->lock);
	rc = resolve(d, ip, peer, ctx);
	idle = now_ns();
	while (!rc) {
		rc = dp_send_begin(d->proto, (struct dp_addr){ ip, port }, len, &s, now_ns());
		if (rc != -EBUSY && rc != -EAGAIN)
			break;
		/* another thread is sending to this peer: wait */
		rc = dp_wait(d, ctx, &idle, &backoff);
	}
	if (rc)
		goto out;
	idle = now_ns();
	backoff = 0;
	for (;;) {
		rc = dp_send_step(d->proto, &s, buf, now_ns());
		if (d->ntx)
			tx_flush(d);
		if (rc)
			break;
		rc = dp_wait(d, ctx, &idle, &backoff);
		if (rc || atomic_load(&d->shut)) {
			rc = rc ? rc : -ESHUTDOWN;
			break;
		}
	}
	dp_send_end(d->proto, &s);
	if (rc == 1)
		rc = 0;
	else if (rc == -ECONNRESET)
		rc = d->host->fail(-ECONNRESET, "dpdk: the message to %s was lost: the "
				   "peer reset the stream, or one side was silent for over "
				   "%llu ms (ZAP_DPDK_PEER_TIMEOUT_MS)", peer,
				   (unsigned long long)d->conf.peer_timeout_ms);
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
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
		struct dp_msg *m = d->rxq;

		if (m) {
			d->rxq = m->next;
			if (!d->rxq)
				d->rxq_tail = NULL;
			d->rxq_bytes -= m->m.len + sizeof(*m);
			/* Resume taking frames once half the queue is drained. */
			if (d->rx_blocked && d->rxq_bytes <= d->conf.rxq_bytes / 2) {
				d->rx_blocked = false;
				dp_set_rx_blocked(d->proto, false);
			}
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
