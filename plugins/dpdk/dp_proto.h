/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport's reliability protocol, separate from all rte_* I/O so
 * that it runs in unit tests over a simulated link and can be fed hostile
 * frames directly.
 *
 * Per peer (IPv4 address and UDP port) there is one send stream and one
 * receive stream. A message is split into frames of at most payload_max
 * bytes, each carrying a 32-byte header (below, network byte order). Frames
 * have consecutive 32-bit sequence numbers per stream; the receiver delivers
 * them in order, keeps frames that arrive early (up to DP_WIN_MAX ahead,
 * within hold_peer_max per peer and hold_max in all), suppresses
 * duplicates and acknowledges with the next sequence number it expects
 * plus a bitmap of the DP_WIN_MAX frames after it that it already holds.
 * The sender keeps at most `window` unacknowledged frames, retransmits a
 * frame when its timeout passes or when the bitmap shows a hole, and gives
 * the peer up (-ECONNRESET) when nothing is acknowledged for peer_timeout.
 *
 *   off size field
 *    0  2   magic 0x5a50 ("ZP")
 *    2  1   version (2; 1 had no cookie and a 24-byte header)
 *    3  1   type: 1 DATA, 2 ACK, 3 RST, 4 CHALLENGE
 *    4  1   flags (DATA): 1 FIRST fragment, 2 LAST fragment
 *    5  3   reserved, 0
 *    8  4   conn: the sender's stream id (DATA) / the acknowledged one (ACK)
 *              / the one whose data the receiver dropped (RST) / the one
 *              challenged (CHALLENGE)
 *   12  4   seq: the frame's number (DATA) / next expected (ACK)
 *   16  4   msg_len (DATA): the whole message's length
 *   20  4   offset  (DATA): this fragment's offset in the message
 *   24  8   cookie  (DATA): the receiver's cookie for this stream, echoed
 *                   (0 until the sender has one) / (CHALLENGE) the cookie
 *   16  32  sack    (ACK): bit i (byte i/8, bit i%8) set: frame seq+1+i is
 *                   held; an ACK frame is DP_ACK_LEN bytes
 * RST and CHALLENGE frames are DP_HDR_LEN bytes (unused fields 0).
 *
 * Return routability. A receiver creates no state for a source (no peer,
 * no stream, no held frame) until the source has shown it receives at the
 * address it claims: the first frame of a new stream (seq 0) is adopted
 * only if it carries a valid cookie; otherwise the receiver answers with a
 * CHALLENGE carrying the cookie, sends it to the claimed address, and
 * drops the frame, keeping nothing (as SCTP's INIT cookie and QUIC's Retry
 * do). A cookie is a keyed hash (SipHash-2-4, the instance's random
 * secret) of the claimed address and port, the stream id and a one-second
 * time bucket; the current and the previous bucket are accepted. The
 * sender, given a CHALLENGE for its current stream, puts the cookie into
 * the stream's first frame and sends it again at once; until the stream's
 * first ACK it sends no frame past the first. A CHALLENGE is no longer
 * than the frame that caused it, so it amplifies nothing. Frames of an
 * adopted stream are matched by their stream id alone. A stream whose
 * source never answered can therefore neither be delivered nor retire the
 * stream a real peer holds, and spoofed sources hold no buffer and no
 * slot of the peer table.
 *
 * A stream id is fresh whenever a sender (re)starts a stream (first
 * contact, after giving the peer up, or after peer_timeout of silence,
 * since receivers forget peers idle for twice that), and streams start at
 * seq 0. A stream id is epoch << 16 | counter: the epoch random and nonzero
 * per sender instance (incarnation), the counter of the instance one higher
 * for each new stream toward any peer. A receiver adopts a new stream
 * only at its seq 0, and only if its counter is newer (modulo 2^16, serial
 * number comparison) than every stream of that epoch seen, or its epoch is
 * new and none of the last DP_OLD_EPOCHS (8) epochs the peer left; so a
 * restarted or forgotten peer never has its frames mistaken for old ones,
 * and a retired stream, however many restarts ago, never comes back. The
 * stream ids of the last 64 peers forgotten (idle for twice peer_timeout)
 * are kept, for 64 peer_timeouts, and given back to them if they return.
 *
 * A message is never acknowledged unless delivered: a receiver that drops
 * data of a stream (a partial message after peer_timeout without progress,
 * or a fragment that continues no message held) retires the stream and
 * answers its later frames with RST, never ACK; a sender given RST for its
 * current stream gives it up (as at peer_timeout). A sender resuming a
 * message more than peer_timeout after its newest fragment first went
 * out, with everything acknowledged, gives it up at once (the receiver
 * dropped the start, or forgot the peer).
 *
 * Memory a peer can make the receiver hold is bounded: at most max_peers
 * peers (each one that answered a challenge, or that we send to), at most
 * hold_peer_max early frames each and hold_max in all (the transport sets
 * these well inside its buffer pool, so that in-order frames of every peer
 * always find buffers), partial messages that grow only with in-order data
 * actually received, within reasm_cap bytes in all (one message, so at
 * most max_msg, per peer), and dropped after peer_timeout without
 * progress.
 *
 * Not thread-safe: the caller serialises every call on one instance.
 */
#ifndef DP_PROTO_H
#define DP_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DP_WIN_MAX 256
#define DP_HDR_LEN 32
#define DP_ACK_LEN 48
#define DP_MAGIC 0x5a50
#define DP_VERSION 2
#define DP_T_DATA 1
#define DP_T_ACK 2
#define DP_T_RST 3
#define DP_T_CHALLENGE 4
#define DP_COOKIE_BUCKET_NS 1000000000ull /* cookie lifetime: 1..2 of these */
#define DP_F_FIRST 0x1
#define DP_F_LAST 0x2

struct dp_addr {
	uint32_t ip;
	uint16_t port;
};

struct dp_proto_cfg {
	uint32_t payload_max; /* message bytes per DATA frame */
	uint32_t window;      /* unacknowledged frames per peer, <= DP_WIN_MAX */
	uint64_t max_msg;     /* largest message accepted (<= UINT32_MAX) */
	uint64_t rto_min_ns, rto_max_ns;
	uint64_t peer_timeout_ns; /* no progress for this long: give up */
	uint32_t max_peers;
	uint64_t reasm_cap;     /* bytes of partial messages, all peers */
	uint32_t hold_max;      /* early frames held, all peers (0: no cap) */
	uint32_t hold_peer_max; /* early frames held per peer (0: DP_WIN_MAX) */
	uint64_t seed;          /* for stream ids */
	uint8_t secret[16];     /* cookie key: random per process */
};

/* How the protocol reaches frames and the application (the I/O layer). */
struct dp_proto_ops {
	void *user;
	/* A frame with room for @len transport bytes (header + payload) at
	 * *@buf; NULL when none is free right now. */
	void *(*frame_alloc)(void *user, size_t len, uint8_t **buf);
	void (*frame_free)(void *user, void *frame);
	/* Put a frame on the wire (again). Does not consume it: the
	 * protocol frees it when acknowledged (or right after, for ACKs). */
	void (*frame_xmit)(void *user, struct dp_addr to, void *frame, size_t len);
	/* A whole message. Either @frame (a single-frame message whose bytes
	 * lie in the frame) or @heap (malloc'ed, holds the bytes) is set; the
	 * callee owns it. */
	void (*deliver)(void *user, struct dp_addr from, void *frame, void *heap,
			const void *data, size_t len);
};

struct dp_stats {
	uint32_t peers;
	uint32_t early_frames;   /* held out of order */
	uint32_t unacked_frames; /* held for retransmission */
	uint64_t reasm_bytes;    /* held by partial messages */
	uint64_t delivered, retransmits, dups, dropped, acks_sent;
	uint64_t partials_dropped, peers_reset;
	uint64_t challenges;   /* CHALLENGE frames sent (unproven sources) */
	uint64_t hold_refused; /* early frames dropped at hold_*max */
	/* Frames refused as belonging to no stream we accept (also in
	 * dropped): malformed, from an unproven source, of a retired or stale
	 * stream, outside the window, or with the peer table full. Not
	 * counted: duplicates, and frames of an adopted stream dropped for
	 * want of room (receive queue full, hold caps, memory). */
	uint64_t refused;
	uint64_t forgotten; /* peers removed: idle for 2 x peer_timeout, or evicted */
};

/* One peer of the table, as dp_peer_list() reports it. */
struct dp_peer_row {
	struct dp_addr addr;
	uint64_t id; /* unique among the instance's peers, never reused */
	bool dialed; /* we sent first (else it reached us first) */
	uint64_t msgs_sent, bytes_sent; /* messages whose last fragment went out */
	uint64_t msgs_received, bytes_received; /* delivered */
	uint64_t idle_ns;                       /* since the last activity either way */
	int64_t srtt_ns, rttvar_ns;             /* -1 before the first sample */
};

struct dp_proto;
struct dp_peer;

/* One message being sent (see dp_send_begin()). */
struct dp_send {
	struct dp_peer *peer;
	uint32_t conn;
	uint64_t off, len;
	bool started;
	bool done;       /* DP_SEND_DONE returned (counted once) */
	uint64_t new_ns; /* when its newest fragment first went out */
};

int dp_proto_new(const struct dp_proto_cfg *cfg, const struct dp_proto_ops *ops,
		 struct dp_proto **out);
/* Frees every frame and partial message it holds. Accepts NULL. */
void dp_proto_free(struct dp_proto *p);

/*
 * Start sending a message of @len bytes to @to. One message per peer at a
 * time, so its fragments stay contiguous: -EBUSY while another is under
 * way (wait and retry); -EAGAIN when the peer table is full of live peers;
 * -EMSGSIZE above max_msg; -ENOMEM.
 */
int dp_send_begin(struct dp_proto *p, struct dp_addr to, uint64_t len, struct dp_send *s,
		  uint64_t now);
/* What dp_send_step() returns when it does not fail. */
enum dp_send_status {
	DP_SEND_WAIT = 0, /* window or frames exhausted: poll, call again */
	DP_SEND_DONE = 1, /* the last fragment is out (not yet acknowledged) */
};

/*
 * Send as many fragments of @buf as the window and frame supply allow.
 * Return DP_SEND_DONE when the last fragment is out, DP_SEND_WAIT when it
 * must wait (poll for acknowledgements, then call again), -ECONNRESET when
 * the peer was given
 * up meanwhile: no progress for peer_timeout, an RST from the receiver (it
 * dropped part of this message), or a pause of more than peer_timeout in
 * the middle of the message (the receiver drops a partial message then).
 */
int dp_send_step(struct dp_proto *p, struct dp_send *s, const void *buf, uint64_t now);
/* Finish (or abandon) @s. An abandoned message is discarded by the
 * receiver when the next one to it starts. */
void dp_send_end(struct dp_proto *p, struct dp_send *s);

/* One received UDP payload from @from. Takes @frame (freed or delivered). */
void dp_input(struct dp_proto *p, struct dp_addr from, void *frame, const uint8_t *b,
	      size_t len, uint64_t now);
/* Send the acknowledgements due (call after a batch of dp_input()). */
void dp_flush_acks(struct dp_proto *p);
/* Retransmit, give up silent peers, drop stale partial messages, forget
 * idle peers. Call every few hundred microseconds. */
void dp_timers(struct dp_proto *p, uint64_t now);
/* While set, DATA frames are dropped unacknowledged (the application is
 * not receiving): senders slow down and retransmit later. */
void dp_set_rx_blocked(struct dp_proto *p, bool blocked);
void dp_get_stats(const struct dp_proto *p, struct dp_stats *st);
/* Up to @n rows of the peer table into @rows (newest first); return the
 * number of peers, which may be more than @n. */
size_t dp_peer_list(const struct dp_proto *p, struct dp_peer_row *rows, size_t n,
		    uint64_t now);
/* Whether any peer has unacknowledged frames (timers matter). */
bool dp_busy(const struct dp_proto *p);
/* The cookie @p expects in the first frame of stream @conn from @from at
 * time @now (never 0): for tests and fuzzers that play a routable peer. */
uint64_t dp_cookie(const struct dp_proto *p, struct dp_addr from, uint32_t conn,
		   uint64_t now);

#endif
