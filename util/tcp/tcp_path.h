/* SPDX-License-Identifier: MIT */
/*
 * The path interface: how bytes move on a connection, once its HELLOs are
 * done. The progress engine (tcp_progress.c), the send path (tcp_send.c),
 * the receive side (tcp_rx.c) and the connection table (tcp_conn.c,
 * tcp_ready.c) call through a connection's path and know nothing of how
 * it moves bytes; the model is UCX's split between uct/tcp and
 * uct/sm/mm, chosen per peer. Two implementations:
 *
 *   socket (tcp_path_sock.c)  frames on the connection itself: written by
 *                             tcp_txq.c (coalesced), read by tcp_rx.c
 *   shm    (tcp_shm.c,        a pair of shared-memory rings beside the
 *           tcp_shm_rx.c)     connection and a side channel for wake-ups
 *                             and liveness (WIRE.md, "Same host"): the
 *                             same-host upgrade
 *
 * Every connection starts on the socket path (tw_path_sock). The upgrade
 * (tcp_shm_setup.c) publishes its shm path once, with an atomic store of
 * c->path (the leader loads it while reading); the shm path then decides
 * per direction when frames move to the rings (the peer's TCP_T_SHM frame
 * for ours to read, our own for ours to write), so until then its ops
 * hand the work to the socket path's. A path object is its ops pointer
 * first, then whatever state its implementation keeps (struct tcp_shm).
 *
 * Locking: as the op says; "mu" means w->mu held (tcp_int.h, "Locking"),
 * "leader" the leader's receive state, "tx owner" the connection's tx side
 * owned (c->tx_busy, tcp_txq.c).
 */
#ifndef ZAP_TCP_PATH_H
#define ZAP_TCP_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tcp_wire;
struct tcp_conn;
struct tcp_txreq;
struct tcp_waiter;
struct tcp_rx_msg;
struct zap_ctx;
struct zap_iov;

struct tcp_path {
	const struct tcp_path_ops *ops;
};

struct tcp_path_ops {
	/* What zap_peers() and events call it once upgraded; the socket's
	 * name is the connection's ("tcp", "unix"). */
	const char *name;
	/* Read every round from its start on, so never cold (tcp_ready.c). */
	bool stays_hot;
	/* Whether a sender's system call may take the frames queued behind
	 * it: not once rings are set up, since frames queued before may not
	 * follow TCP_T_SHM on the connection (tcp_txq.c). */
	bool coalesce;
	/* mu: whether our sends may use the path (the peer maps our ring). */
	bool (*upgraded)(const struct tcp_path *p);

	/* ---- sending (tcp_send.c), tx owner, mu held ---- */
	/* The path this send's frames take: @p, or the socket's while this
	 * direction may not switch (@big: for a large message's parts, which
	 * all go where the first went). NULL: always @p (tw_tx_pick()). */
	struct tcp_path *(*tx_pick)(struct tcp_wire *w, struct tcp_conn *c,
				    struct tcp_path *p, bool big);
	/* Write a burst's @req[0..@k-1] (mu dropped while writing); only the
	 * burst's @first batch waits for room. *@whole: frames written whole;
	 * *@partial: one was left half written; *@conn_err: the connection's
	 * error, 0 where the path was only full. 0 or the first frame's
	 * error. */
	int (*send)(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
		    struct tcp_txreq *req, size_t k, bool first, struct tcp_waiter *me,
		    struct zap_ctx *ctx, bool *partial, size_t *whole, int *conn_err);
	/* The next parts of the large message @m from *@off (version 3). 0:
	 * complete; -EINPROGRESS: more to come; -EAGAIN: no room (*@seen:
	 * consumed() then); or an error. *@open: part of it went, the rest
	 * not; *@partial: a part was left half written. */
	int (*send_part)(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
			 const struct zap_iov *m, size_t *off, struct tcp_waiter *me,
			 struct zap_ctx *ctx, bool *open, bool *partial, uint64_t *seen);
	/* Where the peer's consumption is (grows only): a sender that found
	 * no room waits while it has not moved. Any thread. */
	uint64_t (*consumed)(const struct tcp_path *p);
	/* Room for our sends now: a leading waiter's check (tcp_progress.c). */
	uint64_t (*room)(const struct tcp_path *p);
	/* mu: nobody reads what we write there any more. */
	bool (*tx_lost)(const struct tcp_path *p);

	/* ---- receiving (tcp_progress.c, tcp_rx.c), the leader ---- */
	/* Read what is there, delivering onto *@tail (mu released; as
	 * tw_conn_rx(); @readable: poll saw the connection readable). */
	int (*rx)(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
		  struct tcp_rx_msg ***tail, uint64_t now, bool readable);
	/* Whether the path is read every round whatever poll says. */
	bool (*rx_always)(const struct tcp_path *p);
	/* Whether a message waits (@sleeping: and announce that the leader
	 * is about to sleep, so the peer wakes it): the spin's check. */
	bool (*rx_pending)(struct tcp_path *p, bool sleeping);
	/* The peer's TCP_T_SHM frame: whether it may switch our receive
	 * here (with @commit: and switch it). */
	bool (*rx_switch)(struct tcp_path *p, bool commit);

	/* ---- the side channel (tcp_progress.c), mu held ---- */
	/* The descriptor the leader polls for the path, -1 if none. */
	int (*side_fd)(const struct tcp_path *p);
	/* It was readable: whether anything a waiter may wait for changed. */
	bool (*side_event)(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p);

	/* The connection is freed (tw_conn_free()). */
	void (*end)(struct tcp_path *p);
};

/* The socket path (tcp_path_sock.c): stateless, one for every connection. */
extern struct tcp_path tw_path_sock;

/* The path of a send on @p (its tx_pick op, if it has one): a send on the
 * socket path makes one indirect call, its send. */
static inline struct tcp_path *tw_tx_pick(struct tcp_wire *w, struct tcp_conn *c,
					  struct tcp_path *p, bool big)
{
	return p->ops->tx_pick ? p->ops->tx_pick(w, c, p, big) : p;
}

#endif /* ZAP_TCP_PATH_H */
