/* SPDX-License-Identifier: MIT */
/*
 * The receive side of the dpdk reliability protocol (see dp_proto.h):
 * which stream of a peer is adopted, in-order delivery with frames that
 * arrive early held in a window, duplicate suppression, reassembly of
 * multi-frame messages within the memory bounds, and the ACK and RST
 * frames that report on it.
 *
 * Shared state: the peers' receive streams (struct dp_peer, rx fields),
 * the ACK queue and the instance counters, unlocked: the caller serialises
 * every call on one instance (dp_proto.h).
 */
#include <stdlib.h>
#include <string.h>

#include "dp_proto_int.h"

/* What became of the next in-order frame (rx_consume()). */
enum dp_rx_take {
	DP_RX_TAKEN,     /* consumed (delivered, or added to the message) */
	DP_RX_NO_MEMORY, /* kept by the caller, neither consumed nor acked */
	DP_RX_LOST,      /* freed: it continues no message held */
};

/* Whether @conn may be adopted: newer (modulo 2^16) than every stream of
 * its epoch seen so far, and not of an epoch the sender left. */
static bool rx_conn_fresh(const struct dp_rxids *r, uint32_t conn)
{
	uint16_t ep = (uint16_t)(conn >> 16), ctr = (uint16_t)conn;

	if (r->rx_epoch_known && ep == r->rx_epoch)
		return (int16_t)(uint16_t)(ctr - r->rx_ctr_hi) > 0;
	for (unsigned i = 0; i < r->rx_old_n; i++)
		if (r->rx_old_epochs[i] == ep)
			return false;
	return true;
}

static void rx_conn_adopt(struct dp_rxids *r, uint32_t conn)
{
	uint16_t ep = (uint16_t)(conn >> 16);

	if (r->rx_epoch_known && ep != r->rx_epoch) {
		r->rx_old_epochs[r->rx_old_next] = r->rx_epoch;
		r->rx_old_next = (r->rx_old_next + 1) % DP_OLD_EPOCHS;
		if (r->rx_old_n < DP_OLD_EPOCHS)
			r->rx_old_n++;
	}
	r->rx_epoch_known = true;
	r->rx_epoch = ep;
	r->rx_ctr_hi = (uint16_t)conn;
}

static void part_drop(struct dp_proto *p, struct dp_peer *e)
{
	if (!e->part)
		return;
	free(e->part);
	p->st.reasm_bytes -= e->part_cap;
	p->st.partials_dropped++;
	e->part = NULL;
	e->part_cap = e->part_got = e->part_len = 0;
}

void dpp_rx_retire(struct dp_proto *p, struct dp_peer *e)
{
	for (unsigned i = 0; i < DP_WIN_MAX && e->early; i++) {
		if (!e->rx[i].frame)
			continue;
		p->ops.frame_free(p->ops.user, e->rx[i].frame);
		e->rx[i].frame = NULL;
		e->early--;
		p->st.early_frames--;
	}
	part_drop(p, e);
	e->rx_known = false;
	e->ack_due = false;
}

static void ack_enqueue(struct dp_proto *p, struct dp_peer *e)
{
	if (e->ack_queued)
		return;
	e->ack_queued = true;
	e->acknext = p->ackq;
	p->ackq = e;
}

static void ack_queue(struct dp_proto *p, struct dp_peer *e)
{
	e->ack_due = true;
	ack_enqueue(p, e);
}

static void rst_queue(struct dp_proto *p, struct dp_peer *e)
{
	e->rst_due = true;
	ack_enqueue(p, e);
}

/* Forget the receive stream after dropping data of it that its sender may
 * believe delivered (acknowledged fragments of a partial message, frames
 * reported held): from now on its frames get RST, never an ACK. */
static void rx_lose(struct dp_proto *p, struct dp_peer *e)
{
	if (e->rx_known)
		e->ids.rx_lost = e->rx_conn;
	dpp_rx_retire(p, e);
}

void dpp_frame_drop(struct dp_proto *p, void *frame)
{
	p->ops.frame_free(p->ops.user, frame);
	p->st.dropped++;
}

void dpp_frame_refuse(struct dp_proto *p, void *frame)
{
	dpp_frame_drop(p, frame);
	p->st.refused++;
}

/* Hand a whole message to the transport, counted for the stats and the
 * peer's row. */
static void rx_deliver(struct dp_proto *p, struct dp_peer *e, void *frame, void *heap,
		       const void *data, size_t len)
{
	p->st.delivered++;
	e->msgs_received++;
	e->bytes_received += len;
	p->ops.deliver(p->ops.user, e->addr, frame, heap, data, len);
}

/* Grow the partial message to hold @need bytes. */
static bool part_reserve(struct dp_proto *p, struct dp_peer *e, uint64_t need)
{
	uint64_t cap = e->part_cap;
	uint8_t *n;

	if (need <= cap)
		return true;
	/* Double, so that memory follows the bytes that arrived, never the
	 * length a (possibly hostile) first fragment claims. */
	if (!cap)
		cap = DP_REASM_MIN;
	while (cap < need)
		cap *= 2;
	if (cap > e->part_len)
		cap = e->part_len;
	if (p->st.reasm_bytes - e->part_cap + cap > p->cfg.reasm_cap)
		return false;
	n = realloc(e->part, cap ? cap : 1);
	if (!n)
		return false;
	p->st.reasm_bytes += cap - e->part_cap;
	e->part = n;
	e->part_cap = cap;
	return true;
}

/*
 * Take the next in-order frame into the message being rebuilt (or deliver
 * it, a whole message in one frame). DP_RX_NO_MEMORY leaves the frame to
 * the caller; DP_RX_LOST means the stream lost data (the caller calls
 * rx_lose()).
 */
static enum dp_rx_take rx_consume(struct dp_proto *p, struct dp_peer *e, void *frame,
				  const uint8_t *b, uint32_t len)
{
	uint8_t flags = b[4];
	uint32_t msg_len = rd32(b + 16), off = rd32(b + 20);
	uint32_t plen = len - DP_HDR_LEN;
	const uint8_t *data = b + DP_HDR_LEN;

	if (flags & DP_F_FIRST) {
		/* A new message while one is unfinished: the sender abandoned
		 * that one (a cancelled send). */
		part_drop(p, e);
		if (flags & DP_F_LAST) {
			rx_deliver(p, e, frame, NULL, data, plen);
			return DP_RX_TAKEN;
		}
		e->part_len = msg_len;
		if (!part_reserve(p, e, plen)) {
			e->part_len = 0;
			free(e->part);
			e->part = NULL;
			return DP_RX_NO_MEMORY;
		}
	} else if (!e->part || off != e->part_got || msg_len != e->part_len) {
		/* Not the continuation of the message held: acknowledging it
		 * would tell the sender a message went through that did not. */
		dpp_frame_drop(p, frame);
		return DP_RX_LOST;
	} else if (!part_reserve(p, e, e->part_got + plen)) {
		return DP_RX_NO_MEMORY;
	}
	memcpy(e->part + e->part_got, data, plen);
	e->part_got += plen;
	p->ops.frame_free(p->ops.user, frame);
	if (flags & DP_F_LAST) {
		uint8_t *m = e->part;

		p->st.reasm_bytes -= e->part_cap;
		e->part = NULL;
		e->part_cap = e->part_got = e->part_len = 0;
		rx_deliver(p, e, NULL, m, m, msg_len);
	}
	return DP_RX_TAKEN;
}

/* Static checks of a DATA header against the bytes present. */
static bool data_valid(const struct dp_proto *p, const uint8_t *b, size_t len)
{
	uint64_t msg_len = rd32(b + 16), off = rd32(b + 20), plen = len - DP_HDR_LEN;
	uint8_t flags = b[4];

	if (flags & ~(DP_F_FIRST | DP_F_LAST) || !rd32(b + 8))
		return false;
	if (msg_len > p->cfg.max_msg || off + plen > msg_len)
		return false;
	if (!!(flags & DP_F_FIRST) != (off == 0))
		return false;
	if (!!(flags & DP_F_LAST) != (off + plen == msg_len))
		return false;
	return plen || msg_len == 0;
}

/* Answer the first frame of a stream from a source not yet proven with
 * the cookie it must echo; nothing is kept. */
static void challenge_send(struct dp_proto *p, struct dp_addr to, uint32_t conn,
			   uint64_t now)
{
	uint8_t *b;
	void *f = p->ops.frame_alloc(p->ops.user, DP_HDR_LEN, &b);

	if (!f)
		return; /* its retransmission asks again */
	memset(b, 0, DP_HDR_LEN);
	wr16(b, DP_MAGIC);
	b[2] = DP_VERSION;
	b[3] = DP_T_CHALLENGE;
	wr32(b + 8, conn);
	wr64(b + 24, dp_cookie(p, to, conn, now));
	p->ops.frame_xmit(p->ops.user, to, f, DP_HDR_LEN);
	p->ops.frame_free(p->ops.user, f);
	p->st.challenges++;
}

/* A frame of a stream other than the one held from @from (@e, NULL when
 * no peer is there): adopt it (the peer, created if need be), or drop
 * the frame (NULL), answering a lost stream with RST and an unproven
 * source with a CHALLENGE. */
static struct dp_peer *rx_stream_adopt(struct dp_proto *p, struct dp_peer *e,
				       struct dp_addr from, void *frame, const uint8_t *b,
				       uint64_t now)
{
	uint32_t conn = rd32(b + 8), seq = rd32(b + 12);

	if (e && conn == e->ids.rx_lost) {
		/* Data of it was dropped: tell its sender, never ACK. */
		dpp_frame_refuse(p, frame);
		rst_queue(p, e);
		return NULL;
	}
	/* A stream is adopted at its first frame only (frames of it may
	 * arrive in any order), and only if newer than every one of the
	 * sender's seen so far: a retired one never again (its late frames
	 * must not bring it back). */
	if (!(b[4] & DP_F_FIRST) || seq != 0 || (e && !rx_conn_fresh(&e->ids, conn))) {
		dpp_frame_refuse(p, frame);
		return NULL;
	}
	/* And only once its source showed that it receives at the address it
	 * claims: before that, no state at all (dp_proto.h). */
	if (!dpp_cookie_ok(p, from, conn, rd64(b + 24), now)) {
		dpp_frame_refuse(p, frame);
		challenge_send(p, from, conn, now);
		return NULL;
	}
	if (!e) {
		e = dpp_peer_get(p, from, now);
		/* Full of live peers, or a forgotten peer's old stream (its ids
		 * came back with it). */
		if (!e || !rx_conn_fresh(&e->ids, conn)) {
			dpp_frame_refuse(p, frame);
			return NULL;
		}
		e->accepted = true; /* new: its stream came before any of ours */
	}
	if (e->rx_known) {
		p->st.peers_reset++;
		/* A new stream from a known peer usually means it restarted
		 * and forgot ours too: start ours afresh so that it can adopt
		 * it. Only when nothing of ours is in flight, which a fresh
		 * stream would lose. */
		if (e->snd_una == e->snd_nxt && !e->tx_owned && e->snd_nxt)
			dpp_tx_reset(p, e);
	}
	dpp_rx_retire(p, e);
	rx_conn_adopt(&e->ids, conn);
	e->rx_known = true;
	e->rx_conn = conn;
	e->rcv_nxt = seq;
	return e;
}

/* The peer whose current stream a valid DATA frame belongs to, or NULL
 * with the frame dropped. */
static struct dp_peer *rx_stream(struct dp_proto *p, struct dp_addr from, void *frame,
				 const uint8_t *b, size_t len, uint64_t now)
{
	struct dp_peer *e;

	if (!data_valid(p, b, len)) {
		dpp_frame_refuse(p, frame);
		return NULL;
	}
	if (p->rx_blocked) { /* the application is behind: not a refusal */
		dpp_frame_drop(p, frame);
		return NULL;
	}
	e = dpp_peer_find(p, from);
	if (e && e->rx_known && rd32(b + 8) == e->rx_conn)
		return e;
	return rx_stream_adopt(p, e, from, frame, b, now);
}

/* Keep a frame that arrived early (or again, while an earlier copy of
 * the next one is held) until its turn. */
static void rx_hold(struct dp_proto *p, struct dp_peer *e, void *frame, const uint8_t *b,
		    size_t len, uint32_t seq)
{
	struct dp_rxslot *r = &e->rx[seq % DP_WIN_MAX];

	if (r->frame) { /* the next frame, and an earlier copy is held */
		p->ops.frame_free(p->ops.user, frame);
		p->st.dups++;
		return;
	}
	*r = (struct dp_rxslot){ .frame = frame, .b = b, .len = (uint32_t)len };
	e->early++;
	p->st.early_frames++;
}

/* Consume the held frames that were waiting for the one just taken. */
static enum dp_rx_take rx_drain(struct dp_proto *p, struct dp_peer *e)
{
	for (;;) {
		struct dp_rxslot *r = &e->rx[e->rcv_nxt % DP_WIN_MAX];
		enum dp_rx_take c;

		if (!r->frame)
			return DP_RX_TAKEN;
		c = rx_consume(p, e, r->frame, r->b, r->len);
		if (c == DP_RX_NO_MEMORY)
			return DP_RX_TAKEN; /* held: the sender retries the rest */
		r->frame = NULL;
		e->early--;
		p->st.early_frames--;
		if (c == DP_RX_LOST)
			return DP_RX_LOST;
		e->rcv_nxt++;
	}
}

void dpp_input_data(struct dp_proto *p, struct dp_addr from, void *frame,
		    const uint8_t *b, size_t len, uint64_t now)
{
	uint32_t seq = rd32(b + 12);
	struct dp_peer *e = rx_stream(p, from, frame, b, len, now);
	enum dp_rx_take c;
	int32_t d;

	if (!e)
		return;
	e->last_ns = now;
	d = seq_diff(seq, e->rcv_nxt);
	if (d < 0 || (d > 0 && e->rx[seq % DP_WIN_MAX].frame)) {
		p->ops.frame_free(p->ops.user, frame);
		p->st.dups++;
		ack_queue(p, e); /* our ACK may have been lost */
		return;
	}
	if (d >= DP_WIN_MAX) {
		/* No sender has this much unacknowledged: not ours to keep. */
		dpp_frame_refuse(p, frame);
		return;
	}
	if (d > 0 &&
	    (e->early >= p->cfg.hold_peer_max || p->st.early_frames >= p->cfg.hold_max)) {
		/* Held frames are buffers the port receives into: past the
		 * caps, drop it unreported (the sender sends it again), so
		 * that in-order frames of every peer always find one. */
		dpp_frame_drop(p, frame);
		p->st.hold_refused++;
		return;
	}
	e->rx_ns = now;
	if (d > 0 || e->rx[seq % DP_WIN_MAX].frame) {
		rx_hold(p, e, frame, b, len, seq);
		if (d > 0) {
			ack_queue(p, e);
			return;
		}
	} else {
		c = rx_consume(p, e, frame, b, (uint32_t)len);
		if (c == DP_RX_NO_MEMORY) {
			dpp_frame_drop(p, frame);
			return;
		}
		if (c == DP_RX_LOST)
			goto lost;
		e->rcv_nxt++;
	}
	if (rx_drain(p, e) == DP_RX_LOST)
		goto lost;
	ack_queue(p, e);
	return;
lost:
	rx_lose(p, e);
	rst_queue(p, e);
}

static void rst_send(struct dp_proto *p, struct dp_peer *e)
{
	uint8_t *b;
	void *f = p->ops.frame_alloc(p->ops.user, DP_HDR_LEN, &b);

	if (!f)
		return; /* the next frame of it asks again */
	memset(b, 0, DP_HDR_LEN);
	wr16(b, DP_MAGIC);
	b[2] = DP_VERSION;
	b[3] = DP_T_RST;
	wr32(b + 8, e->ids.rx_lost);
	p->ops.frame_xmit(p->ops.user, e->addr, f, DP_HDR_LEN);
	p->ops.frame_free(p->ops.user, f);
}

static void ack_send(struct dp_proto *p, struct dp_peer *e)
{
	uint8_t *b;
	void *f = p->ops.frame_alloc(p->ops.user, DP_ACK_LEN, &b);

	if (!f)
		return; /* the next frame from the peer asks again */
	memset(b, 0, DP_ACK_LEN);
	for (unsigned i = 0, n = e->early; i < DP_WIN_MAX - 1 && n; i++)
		if (e->rx[(e->rcv_nxt + 1 + i) % DP_WIN_MAX].frame) {
			b[16 + i / 8] |= (uint8_t)(1u << (i % 8));
			n--;
		}
	wr16(b, DP_MAGIC);
	b[2] = DP_VERSION;
	b[3] = DP_T_ACK;
	wr32(b + 8, e->rx_conn);
	wr32(b + 12, e->rcv_nxt);
	p->ops.frame_xmit(p->ops.user, e->addr, f, DP_ACK_LEN);
	p->ops.frame_free(p->ops.user, f);
	p->st.acks_sent++;
}

void dp_flush_acks(struct dp_proto *p)
{
	while (p->ackq) {
		struct dp_peer *e = p->ackq;

		p->ackq = e->acknext;
		e->ack_queued = false;
		if (e->rst_due && e->ids.rx_lost)
			rst_send(p, e);
		e->rst_due = false;
		if (!e->ack_due || !e->rx_known)
			continue;
		e->ack_due = false;
		ack_send(p, e);
	}
}

bool dpp_timers_rx(struct dp_proto *p, struct dp_peer *e, uint64_t now)
{
	if (!(e->part || e->early) || now - e->rx_ns <= p->cfg.peer_timeout_ns)
		return false;
	/* Its sender vanished or paused mid-message: the partial message
	 * (whose fragments were acknowledged) is lost, and the sender must
	 * hear so if it comes back. */
	rx_lose(p, e);
	return true;
}
