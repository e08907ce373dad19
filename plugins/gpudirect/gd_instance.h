/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect instance, shared by its parts: gpudirect.c (listen
 * socket, TCP bootstrap, dialling, the accept thread), gd_peers.c (the
 * peer table) and gd_instance.c (the plugin's ops and descriptor, the
 * progress thread, the receive queue).
 *
 * Threads, per instance: the accept thread bootstraps the pairs peers
 * dial; the progress thread waits on the completion channel and drives
 * every pair's engine; application threads send (driving their own pair
 * while they wait, and dialling a peer that has no live pair) and receive.
 *
 * Locks, outermost first (a thread holding one may take those below it,
 * never one above):
 *  1. gd_tp.dial_mx lets one dial run at a time, so two senders do not
 *     bootstrap two pairs to one peer. It is held across the bootstrap.
 *  2. gd_tp.mx guards the peer list. find_live() and gd_shutdown() call
 *     into engines (gd_conn_error(), gd_conn_shutdown()) while holding it.
 *  3. Each pair's engine lock (struct gd_conn, gd_proto.c). The engine
 *     calls gd_deliver() and the gd_verbs_ops with it held.
 *  4. gd_tp.rx_mx guards the receive queue; @cv, waited on with it,
 *     signals a queued message or shutdown to gd_recv(). gd_deliver()
 *     takes it under an engine lock, so it must never be held while
 *     taking 2 or 3 (rx_release() runs with no lock held).
 *  @shut is written holding 2 and 4 (and read under 4, or atomically).
 *  What pairs pin is counted in the device (gd_dev_pinned(), atomic:
 *  reserved by bootstraps, released by a pair's last reference on any
 *  thread, possibly after the instance is gone).
 *  Everything else in gd_tp is written in gd_open() before the threads
 *  start and only read afterwards. A gd_peer is immutable once in the
 *  list; its engine reference (@conn) is the table's.
 */
#ifndef ZAP_GD_INSTANCE_H
#define ZAP_GD_INSTANCE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <zap/zap-plugin.h>

#include "gd_proto.h"
#include "zap-conn.h"
#include "zap-tls.h"

struct gd_dev;
struct gd_qp;

struct gd_tp;

/* One queue pair to one peer; owned by its engine (freed with it). */
struct gd_peer {
	struct gd_peer *next; /* in gd_tp.peers, under gd_tp.mx */
	struct gd_tp *tp;
	struct gd_conn *conn; /* the table's reference */
	struct gd_qp *qp;
	char key[ZAP_PEER_MAX]; /* peer string sends name it by */
	char fp[ZTLS_FP_LEN];   /* TLS: the key it proved, "sha256:<hex>"; "" */
	uint64_t instance;
	uint64_t pinned;  /* bytes reserved in *pinctr */
	uint64_t *pinctr; /* the device's count (gd_dev_pinned()) */
	bool dialed;
	uint64_t id; /* zap_peer_info.conn_id: set by gd_add_peer() */
};

struct gd_rxmsg {
	struct zap_msg msg;
	struct gd_rxmsg *next;
	struct gd_conn *conn; /* reference while a slot is held */
	int32_t slot;
	struct zap_buffer *buf;
	char peer[ZAP_PEER_MAX];
	char peer_id[ZTLS_FP_LEN];
};

struct gd_tp {
	const struct zap_host *host;
	struct gd_dev *dev;
	struct zap_pool *pool;
	uint64_t instance, max_msg;
	uint32_t slots, chunk;
	/* Pinned memory: per pair and all pairs (ZAP_GPUDIRECT_PEER_PIN_BYTES,
	 * ZAP_GPUDIRECT_PIN_BYTES); the count is the device's. */
	uint64_t peer_pin_cap, pin_cap;
	/* Handshakes: in flight at once, and each one's deadline. */
	uint64_t hs_max, hs_ms;
	struct ztls_ctx *tls; /* the bootstrap's TLS (ZAP_TLS_*), or NULL */
	int lfd, wake;
	char bound[ZAP_PEER_MAX]; /* as bound (may be a wildcard) */
	char addr[ZAP_PEER_MAX];  /* sendable */
	pthread_t accept_th, prog_th;
	bool threads;
	pthread_mutex_t dial_mx; /* one dial at a time */
	pthread_mutex_t mx;      /* peers, shut */
	pthread_mutex_t rx_mx;   /* rx queue, shut; inside engine locks */
	pthread_cond_t cv;       /* with rx_mx */
	struct gd_peer *peers;
	struct gd_rxmsg *rx_head, **rx_tail;
	bool shut;
	/* zap_stats(), under mx: pairs added, pairs gone by reason, and what
	 * pairs that left the table had counted (folded in as they leave). */
	uint64_t peer_ids, conns_dialed, conns_accepted;
	uint64_t conns_closed[ZAP_CLOSE_REASON_SLOTS];
	struct gd_conn_stats gone;
	/* Under rx_mx: the receive queue's length and payload bytes. */
	uint64_t rxq_msgs, rxq_bytes;
	/* The device's pinned-bytes count (gd_dev_pinned(); atomic), set in
	 * gd_open(); NULL before. */
	const uint64_t *pinctr;
};

/* gpudirect.c */

/* TLS for the bootstrap when @args configure a certificate (t->tls);
 * settings without a certificate are refused, never run in plaintext. */
int gd_tls_open(struct gd_tp *t, const struct zap_open_args *args);
/* Bind and listen on @listen_addr; set lfd, bound and addr. */
int gd_listen(struct gd_tp *t, const char *listen_addr);
/* Connect to @key, bootstrap a pair, add it to the table: its engine,
 * referenced, in *out. Called with dial_mx held. */
int gd_dial(struct gd_tp *t, const char *key, struct zap_ctx *ctx, struct gd_conn **out);
/* The accept thread: bootstraps incoming pairs until t->wake fires. */
void *gd_accept_main(void *arg);

/* gd_peers.c */

/* Put a bootstrapped pair in the table (replacing the pair a re-dialling
 * peer left behind). */
void gd_add_peer(struct gd_tp *t, struct gd_peer *p);
/* A live pair to @key, referenced, or NULL; failed pairs leave the table. */
struct gd_conn *gd_find_live(struct gd_tp *t, const char *key);
/* Drive every pair's engine once (the progress thread). */
void gd_peers_progress(struct gd_tp *t);
/* Drop every pair (destroy, threads stopped). */
void gd_peers_drop_all(struct gd_tp *t);
/* zap_stats() of the table: traffic (pairs gone included), connections,
 * credit waits, pinned bytes; members within out->size only. */
void gd_peers_stats(struct gd_tp *t, struct zap_stats *out);
/* zap_peer_list(): up to @n rows, out->size apart; the number of pairs. */
int gd_peers_list(struct gd_tp *t, struct zap_peer_info *out, size_t n);

/* gd_instance.c */
/* gd_conn_cfg.deliver: queue a complete message for gd_recv(). */
void gd_deliver(void *user, struct gd_conn *c, const struct gd_delivery *d);

#endif /* ZAP_GD_INSTANCE_H */
