/* SPDX-License-Identifier: MIT */
/*
 * What the files of the dpdk reliability protocol share (not installed,
 * not seen by the rte_* side, which uses dp_proto.h only):
 *
 *   dp_proto.c     the instance, the peer table, stream ids, cookies,
 *                  dp_input()'s dispatch and dp_timers()
 *   dp_proto_tx.c  the send side: window, retransmission, RTT, ACK and RST
 *                  input
 *   dp_proto_rx.c  the receive side: stream adoption, ordering, early
 *                  frames, reassembly, ACK and RST output
 *
 * Like the public API, nothing here is thread-safe: the caller serialises
 * every call on one instance (the transport holds its instance lock).
 */
#ifndef DP_PROTO_INT_H
#define DP_PROTO_INT_H

#include "dp_proto.h"

#define DP_BUCKETS 256
#define DP_REASM_MIN (64u << 10) /* first allocation of a partial message */
#define DP_OLD_EPOCHS 8          /* earlier sender epochs remembered per peer */
#define DP_GHOSTS 64             /* forgotten peers whose stream ids are kept */
#define DP_GHOST_TTL 64          /* ... for this many peer timeouts */

struct dp_txslot {
	void *frame;
	uint8_t *b; /* its transport bytes */
	uint32_t len;
	uint16_t tries;
	bool sacked;
	uint64_t last_ns;
};

struct dp_rxslot {
	void *frame; /* NULL: empty */
	const uint8_t *b;
	uint32_t len;
};

/* Stream ids a receiver has seen from one peer. */
struct dp_rxids {
	/* The sender's current epoch, the newest counter of it adopted, and
	 * the epochs it had before (a ring of the last rx_old_n). */
	bool rx_epoch_known;
	uint16_t rx_epoch, rx_ctr_hi;
	uint16_t rx_old_epochs[DP_OLD_EPOCHS];
	unsigned rx_old_next, rx_old_n;
	/* A stream whose in-flight data was dropped (0: none): its frames are
	 * answered with RST, never acknowledged. */
	uint32_t rx_lost;
};

/* A forgotten peer's stream ids, so that its old frames, should they turn
 * up after all, are not taken for a new stream. */
struct dp_ghost {
	struct dp_addr addr;
	bool used;
	struct dp_rxids ids;
	uint64_t ns; /* when forgotten */
};

struct dp_peer {
	struct dp_addr addr;
	struct dp_peer *hnext;       /* hash chain */
	struct dp_peer *prev, *next; /* all peers, for timers */
	struct dp_peer *acknext;
	bool ack_queued, ack_due, rst_due;
	unsigned pins;
	bool tx_owned;
	bool accepted;    /* created for a stream it sent (else we sent first) */
	uint64_t last_ns; /* last activity either way */
	uint64_t id;      /* dp_peer_row.id */
	/* What dp_peer_list() reports: plain counts, under the caller's
	 * serialisation like everything here. */
	uint64_t msgs_sent, bytes_sent, msgs_received, bytes_received;

	/* send stream (its id: see dpp_next_conn()) */
	uint32_t tx_conn, snd_una, snd_nxt;
	uint64_t tx_cookie;   /* the peer's cookie for tx_conn (0: none yet) */
	bool tx_proven;       /* the peer acknowledged tx_conn: adopted */
	uint64_t progress_ns; /* last time snd_una moved (or the window filled) */
	uint64_t srtt, rttvar, rto;
	struct dp_txslot tx[DP_WIN_MAX];

	/* receive stream */
	bool rx_known;
	uint32_t rx_conn, rcv_nxt, early;
	struct dp_rxids ids;
	uint64_t rx_ns; /* last in-window frame */
	uint8_t *part;  /* partial message */
	uint64_t part_cap, part_got, part_len;
	struct dp_rxslot rx[DP_WIN_MAX];
};

struct dp_proto {
	struct dp_proto_cfg cfg;
	struct dp_proto_ops ops;
	struct dp_peer *buckets[DP_BUCKETS];
	struct dp_peer *all;
	struct dp_peer *ackq;
	bool rx_blocked;
	uint64_t rng;
	uint16_t epoch, ctr; /* stream ids: see dpp_next_conn() */
	struct dp_ghost ghosts[DP_GHOSTS];
	unsigned ghost_next;
	uint64_t peer_ids; /* the last dp_peer.id given */
	struct dp_stats st;
};

static inline uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}
static inline uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static inline void wr32(uint8_t *p, uint32_t v)
{
	wr16(p, (uint16_t)(v >> 16));
	wr16(p + 2, (uint16_t)v);
}
static inline uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) << 32 | rd32(p + 4);
}
static inline void wr64(uint8_t *p, uint64_t v)
{
	wr32(p, (uint32_t)(v >> 32));
	wr32(p + 4, (uint32_t)v);
}

/* Sequence arithmetic modulo 2^32. */
static inline int32_t seq_diff(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b);
}

/* dp_proto.c: peers and stream ids */
uint32_t dpp_next_conn(struct dp_proto *p);
struct dp_peer *dpp_peer_find(struct dp_proto *p, struct dp_addr a);
/* Whether @cookie is what @p gave @from for stream @conn (this time
 * bucket or the one before). */
bool dpp_cookie_ok(const struct dp_proto *p, struct dp_addr from, uint32_t conn,
		   uint64_t cookie, uint64_t now);
/* The peer at @a, created if there is room; NULL when the table is full
 * of live peers or memory is short. Only for a source that proved itself
 * (a valid cookie) or one we send to. */
struct dp_peer *dpp_peer_get(struct dp_proto *p, struct dp_addr a, uint64_t now);
bool dpp_peer_idle(const struct dp_peer *e);

/* dp_proto_tx.c: the send side */
/* Give up the send stream: free its frames, start a new stream id. */
void dpp_tx_reset(struct dp_proto *p, struct dp_peer *e);
void dpp_input_ack(struct dp_proto *p, struct dp_addr from, const uint8_t *b,
		   uint64_t now);
void dpp_input_rst(struct dp_proto *p, struct dp_addr from, const uint8_t *b,
		   uint64_t now);
/* A CHALLENGE for our stream to @from: echo its cookie in the stream's
 * first frame, sent again at once. */
void dpp_input_challenge(struct dp_proto *p, struct dp_addr from, const uint8_t *b,
			 uint64_t now);
/* Retransmit what is due; true when the peer was given up (no progress
 * for peer_timeout), in which case nothing else is due for it now. */
bool dpp_timers_tx(struct dp_proto *p, struct dp_peer *e, uint64_t now);

/* dp_proto_rx.c: the receive side */
/* Forget the receive stream (its sender went away or was replaced). */
void dpp_rx_retire(struct dp_proto *p, struct dp_peer *e);
/* Free @frame as a dropped one (counted). */
void dpp_frame_drop(struct dp_proto *p, void *frame);
/* Free @frame as a refused one (dp_stats.refused; counted dropped too). */
void dpp_frame_refuse(struct dp_proto *p, void *frame);
/* A DATA frame (header checked by dp_input()); takes @frame. */
void dpp_input_data(struct dp_proto *p, struct dp_addr from, void *frame,
		    const uint8_t *b, size_t len, uint64_t now);
/* Drop a partial message stalled for peer_timeout; true when done so. */
bool dpp_timers_rx(struct dp_proto *p, struct dp_peer *e, uint64_t now);

#endif
