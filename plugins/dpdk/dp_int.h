/* SPDX-License-Identifier: MIT */
/*
 * What the rte_* side of the dpdk transport shares between its files (the
 * protocol engine, dp_proto*.c and dp_wire.c, never includes this):
 *
 *   dp_conf.c   ZAP_DPDK_* parsing, and the checks probe makes of the EAL
 *               arguments without starting the EAL
 *   dp_eal.c    the process-wide EAL: start once, its log, its verdict
 *   dp_port.c   ports: the per-port table (mbuf pool for the process's
 *               life), start, stop, link watch
 *   dp_gpu.c    the mbuf pool registered with CUDA, where present
 *   dp_arp.c    the neighbour table, ARP answers and resolution
 *   dp_io.c     the data path: frames for the protocol, receive, polling,
 *               waiting, the service thread
 *   dpdk.c      the instance and its ops (probe, open, send, recv, close)
 *               and the plugin descriptor
 *
 * Locks: d->lock (one per instance) guards the port's queues, the
 * protocol, the neighbour table and the receive queue; whoever holds it
 * polls the port. dp_port_lock (dp_port.c) serialises port claims and the
 * per-port table's set-up; dp_eal_lock (dp_eal.c) the EAL's start and
 * state; dp_log_lock (dp_eal.c) the EAL's log lines. Only dp_log_lock is
 * ever taken inside another (the EAL logs while it starts, a port
 * failure quotes the log); d->lock and dp_port_lock are never nested.
 */
#ifndef DP_INT_H
#define DP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <rte_config.h>

#include <zap/zap-plugin.h>

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
#define DP_TIMER_NS 200000ull       /* protocol timers at most this often */
#define DP_SERVICE_IDLE_NS 50000ull /* service thread polls after this idle */
#define DP_GPU_CHUNKS 64

struct rte_mbuf;
struct rte_mempool;

/* ------------------------------------------------------------ dp_conf.c */

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
	uint64_t mtu, mbufs, window, spin_us, rto_min_us, peer_timeout_ms, arp_timeout_ms,
		start_timeout_ms, linger_ms, max_peers, pin;
	uint64_t reasm_bytes, rxq_bytes, pool_bytes;
	uint64_t hold, hold_peer; /* early frames held: all peers, per peer */
};

/* dp_conf_load()'s answers other than a negative errno. */
enum dp_conf_status {
	DP_CONF_OK = 0,
	DP_CONF_UNSET = 1, /* ZAP_DPDK_EAL_ARGS unset: not configured */
};

/* Read every ZAP_DPDK_* variable: DP_CONF_OK, DP_CONF_UNSET (@why says
 * "not configured"), or -EINVAL with @why naming the variable. */
int dp_conf_load(const struct zap_host *h, struct dp_conf *c, char *why, size_t len);
/* Split EAL arguments on blanks (no quoting) after argv[0]; the count, or
 * -E2BIG when more than @max - 2 words. */
int dp_split_args(char *s, char **argv, int max);
/* What can be judged of the EAL arguments without starting the EAL: 0, or
 * -EINVAL/-ENOENT/-ENOMEM with @why. */
int dp_eal_args_check(const char *eal, char *why, size_t len);

/* ------------------------------------------------------------- dp_eal.c */

enum dp_eal_state {
	DP_EAL_NOT_STARTED,
	DP_EAL_RUNNING,
	DP_EAL_FAILED, /* for the life of the process; the reason is kept */
};

/* Start the EAL once per process (later calls return the first verdict):
 * 0, or the failure through h->fail(). */
int dp_eal_start(const struct zap_host *h, const struct dp_conf *c);
/* The EAL's state; when DP_EAL_FAILED, its reason into @why. */
enum dp_eal_state dp_eal_state(char *why, size_t len);
/* The last error lines the EAL logged, to explain a failure. */
void dp_eal_said(char *out, size_t len);

/* ------------------------------------------------------------ dp_port.c */

/* A memory chunk of an mbuf pool, registered with CUDA. */
struct dp_gpu_chunk {
	char *addr;
	size_t len;
	zcu_ptr dev;
};

/*
 * Per port, for the life of the process: the mbuf pool outlives every
 * instance, so messages still held after zap_close() stay valid and a
 * later open reuses it. in_use, mp, nmbufs, socket and the GPU fields are
 * written under dp_port_lock (the GPU fields and mp once, before the first
 * instance of the port runs; read without the lock after that); held is
 * atomic (messages are released from any thread).
 */
struct dp_port {
	bool in_use;
	struct rte_mempool *mp;
	atomic_uint held; /* mbufs inside undelivered/unreleased messages */
	unsigned nmbufs;
	/* The port's NUMA socket; pool buffers may outlive the instance, so
	 * their backing knows only this. */
	int socket;
	/* Where CUDA is present, the pool's memory is registered with the
	 * GPU once, for the pool's (the process's) life. */
	bool gpu;
	unsigned nchunks;
	struct dp_gpu_chunk chunk[DP_GPU_CHUNKS];
};

extern struct dp_port dp_ports[RTE_MAX_ETHPORTS];

struct dp;
/* Claim, configure and start d->port (with its pool): 0 or h->fail(). */
int dp_port_open(struct dp *d);
/* Stop the port and release the claim (the pool stays). */
void dp_port_close(struct dp *d);
/* Service thread: restart a port whose link stays down. */
void dp_port_link_watch(struct dp *d, uint64_t *down_since);

/* ------------------------------------------------------------- dp_gpu.c */

/* Register port @port's mbuf pool with the GPU (dp_port_lock held). */
void dp_gpu_register(const struct zap_host *h, unsigned port);
/* The device address of @p inside a registered mbuf pool, or NULL. */
void *dp_gpu_addr(unsigned port, const void *p);
/* What open will do about the GPU, for the probe's detail. */
const char *dp_gpu_plan(const struct zap_host *h, char *buf, size_t len);

/* ------------------------------------------------------------- instance */

struct dp_neigh {
	uint32_t ip;
	uint8_t mac[6];
	bool fixed;
	uint64_t used_ns;
};

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

	/* Everything below up to last_poll: under lock. */
	pthread_mutex_t lock;
	struct dp_proto *proto;
	struct rte_mbuf *txb[DP_TXB];
	unsigned ntx;
	struct dp_neigh nb[DP_NEIGH_MAX];
	unsigned n_nb;
	uint32_t arp_last_ip;
	uint64_t arp_last_ns;
	uint64_t arp_any_ns; /* the last request from the data path, any target */
	struct dp_msg *rxq, *rxq_tail;
	uint64_t rxq_msgs, rxq_bytes;
	bool rx_blocked;
	uint64_t next_timer, rng;
	uint64_t rx_dropped; /* frames the parser refused */
	uint64_t tx_copies;  /* retransmissions of frames still held elsewhere */
	/* zap_stats(): messages zap_send() handed over in full, and messages
	 * queued for zap_recv(); plain counts, read under the lock. */
	uint64_t msgs_sent, bytes_sent, msgs_received, bytes_received;
	_Atomic uint64_t last_poll;

	atomic_bool shut, stop;
	int shut_fd;
	pthread_t svc;
	bool svc_started;
};

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* dp_arp.c; d->lock held */
struct dp_neigh *dp_neigh_find(struct dp *d, uint32_t ip);
void dp_neigh_learn(struct dp *d, uint32_t ip, const uint8_t mac[6], bool create,
		    uint64_t now);
/* The operator's static neighbours (ZAP_DPDK_NEIGHBORS), at open. */
void dp_neigh_init(struct dp *d);
void dp_arp_send(struct dp *d, uint16_t op, const uint8_t tha[6], uint32_t tpa);
/* A request for @ip; from the data path (not @force) at most one per
 * 10 ms for one target and one per millisecond in all. */
void dp_arp_request(struct dp *d, uint32_t ip, uint64_t now, bool force);
/* Learn @ip's MAC by ARP (lock dropped while waiting): 0, or the ctx,
 * shutdown or -EHOSTUNREACH error. */
int dp_resolve(struct dp *d, uint32_t ip, const char *peer, struct zap_ctx *ctx);

/* dp_io.c */
/* The protocol's frame and delivery callbacks, on mbufs of @d. */
void dp_io_proto_ops(struct dp *d, struct dp_proto_ops *po);
void dp_tx_push(struct dp *d, struct rte_mbuf *mb);
void dp_tx_flush(struct dp *d);
void dp_msg_release(struct zap_msg *zm);
/* Poll the port once; d->lock held. Return the frames received. */
unsigned dp_progress(struct dp *d);
/* One turn of a caller's wait, d->lock held (dropped while pausing):
 * 0 to look again, or the ctx/shutdown error. */
int dp_wait(struct dp *d, struct zap_ctx *ctx, uint64_t *idle, unsigned *backoff);
void *dp_service_main(void *arg);

#endif
