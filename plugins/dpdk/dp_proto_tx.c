/* SPDX-License-Identifier: MIT */
/*
 * The send side of the dpdk reliability protocol (see dp_proto.h): one
 * message at a time per peer cut into DATA frames, a window of
 * unacknowledged frames kept for retransmission, the retransmission
 * timeout (RTT estimate, backoff), and what ACK and RST frames do to it.
 *
 * Shared state: the peers' send streams (struct dp_peer, tx fields) and
 * the instance counters, unlocked: the caller serialises every call on
 * one instance (dp_proto.h).
 */
#include <errno.h>
#include <string.h>

#include "dp_proto_int.h"

void dpp_tx_reset(struct dp_proto *p, struct dp_peer *e)
{
	for (uint32_t s = e->snd_una; s != e->snd_nxt; s++) {
		struct dp_txslot *t = &e->tx[s % DP_WIN_MAX];

		p->ops.frame_free(p->ops.user, t->frame);
		memset(t, 0, sizeof(*t));
	}
	p->st.unacked_frames -= e->snd_nxt - e->snd_una;
	e->tx_conn = dpp_next_conn(p);
	e->tx_cookie = 0;
	e->tx_proven = false;
	e->snd_una = e->snd_nxt = 0;
	e->srtt = e->rttvar = 0;
	e->rto = p->cfg.rto_min_ns;
}

int dp_send_begin(struct dp_proto *p, struct dp_addr to, uint64_t len, struct dp_send *s,
		  uint64_t now)
{
	struct dp_peer *e;

	if (len > p->cfg.max_msg)
		return -EMSGSIZE;
	e = dpp_peer_get(p, to, now);
	if (!e)
		return p->st.peers >= p->cfg.max_peers ? -EAGAIN : -ENOMEM;
	if (e->tx_owned)
		return -EBUSY;
	/* After a long silence the peer may have forgotten this stream (it
	 * forgets idle peers): start a new one, which it adopts at seq 0. */
	if (e->snd_una == e->snd_nxt && e->snd_nxt &&
	    now - e->last_ns > p->cfg.peer_timeout_ns)
		dpp_tx_reset(p, e);
	e->tx_owned = true;
	e->pins++;
	*s = (struct dp_send){ .peer = e, .conn = e->tx_conn, .len = len };
	return 0;
}

void dp_send_end(struct dp_proto *p, struct dp_send *s)
{
	if (!s->peer)
		return;
	s->peer->tx_owned = false;
	s->peer->pins--;
	s->peer = NULL;
}

static void xmit(struct dp_proto *p, struct dp_peer *e, struct dp_txslot *t, uint64_t now)
{
	t->last_ns = now;
	p->ops.frame_xmit(p->ops.user, e->addr, t->frame, t->len);
}

/*
 * Before the next fragment of @s: whether its stream still holds after a
 * silence. Return 0 to go on, or -ECONNRESET when the message is given up.
 */
static int send_resume(struct dp_proto *p, struct dp_send *s, uint64_t now)
{
	struct dp_peer *e = s->peer;

	if (s->conn != e->tx_conn)
		return -ECONNRESET;
	if (!s->started && e->snd_una == e->snd_nxt && e->snd_nxt &&
	    now - e->last_ns > p->cfg.peer_timeout_ns) {
		/* As in dp_send_begin(): begun, then a long silence before the
		 * first fragment; the peer may have forgotten this stream. Nothing
		 * of this message is out yet, so start it on a new stream. */
		dpp_tx_reset(p, e);
		s->conn = e->tx_conn;
	}
	if (s->started && s->off < s->len && e->snd_una == e->snd_nxt &&
	    now - s->new_ns > p->cfg.peer_timeout_ns) {
		/* Paused mid-message, everything acknowledged, for longer than
		 * the receiver keeps a partial message: it has dropped (or
		 * even forgotten) the start, so the rest could not complete
		 * it. Give the stream up, as at peer_timeout. The pause counts
		 * from our newest fragment, as the receiver's clock runs from
		 * the last one new to it, not from the last frame we heard:
		 * an ACK held up on the way would make a receiver that has
		 * dropped the start look fresh, and the message would be
		 * reported sent and then lost (fuzz/regressions/dp_proto,
		 * "late-ack-paused-sender"). */
		dpp_tx_reset(p, e);
		p->st.peers_reset++;
		return -ECONNRESET;
	}
	return 0;
}

/* Write the DATA header of the next fragment (@plen bytes) of @s. */
static void data_header(uint8_t *b, const struct dp_peer *e, const struct dp_send *s,
			uint64_t plen)
{
	memset(b, 0, DP_HDR_LEN);
	wr16(b, DP_MAGIC);
	b[2] = DP_VERSION;
	b[3] = DP_T_DATA;
	b[4] = (uint8_t)((s->off == 0 ? DP_F_FIRST : 0) |
			 (s->off + plen == s->len ? DP_F_LAST : 0));
	wr32(b + 8, e->tx_conn);
	wr32(b + 12, e->snd_nxt);
	wr32(b + 16, (uint32_t)s->len);
	wr32(b + 20, (uint32_t)s->off);
	wr64(b + 24, e->tx_cookie);
}

int dp_send_step(struct dp_proto *p, struct dp_send *s, const void *buf, uint64_t now)
{
	struct dp_peer *e = s->peer;
	int rc = send_resume(p, s, now);

	if (rc)
		return rc;
	while (!s->started || s->off < s->len) {
		uint64_t plen = s->len - s->off;
		struct dp_txslot *t;
		uint8_t *b;
		void *f;

		if (e->snd_nxt - e->snd_una >= p->cfg.window)
			return DP_SEND_WAIT;
		/* Until the receiver adopts the stream (after its challenge)
		 * it drops every frame past the first: send that one alone. */
		if (!e->tx_proven && e->snd_nxt != e->snd_una)
			return DP_SEND_WAIT;
		if (plen > p->cfg.payload_max)
			plen = p->cfg.payload_max;
		f = p->ops.frame_alloc(p->ops.user, DP_HDR_LEN + plen, &b);
		if (!f)
			return DP_SEND_WAIT;
		data_header(b, e, s, plen);
		if (plen)
			memcpy(b + DP_HDR_LEN, (const uint8_t *)buf + s->off, plen);
		if (e->snd_una == e->snd_nxt)
			e->progress_ns = now; /* the give-up clock starts now */
		t = &e->tx[e->snd_nxt % DP_WIN_MAX];
		*t = (struct dp_txslot){ .frame = f,
					 .b = b,
					 .len = (uint32_t)(DP_HDR_LEN + plen),
					 .tries = 1 };
		e->snd_nxt++;
		p->st.unacked_frames++;
		s->started = true;
		s->off += plen;
		s->new_ns = now;
		e->last_ns = now;
		xmit(p, e, t, now);
	}
	if (!s->done) {
		s->done = true;
		e->msgs_sent++;
		e->bytes_sent += s->len;
	}
	return DP_SEND_DONE;
}

static void rto_reset(struct dp_proto *p, struct dp_peer *e)
{
	e->rto = e->srtt + 4 * e->rttvar;
	if (e->rto < p->cfg.rto_min_ns)
		e->rto = p->cfg.rto_min_ns;
	if (e->rto > p->cfg.rto_max_ns)
		e->rto = p->cfg.rto_max_ns;
}

static void rtt_sample(struct dp_proto *p, struct dp_peer *e, uint64_t r)
{
	if (!e->srtt) {
		e->srtt = r;
		e->rttvar = r / 2;
	} else {
		uint64_t d = r > e->srtt ? r - e->srtt : e->srtt - r;

		e->rttvar = (3 * e->rttvar + d) / 4;
		e->srtt = (7 * e->srtt + r) / 8;
	}
}

static bool sack_bit(const uint8_t *sack, unsigned i)
{
	return sack[i / 8] >> (i % 8) & 1;
}

/* Frames up to @cum (excluded) arrived: free them, take an RTT sample. */
static void ack_cumulative(struct dp_proto *p, struct dp_peer *e, uint32_t cum,
			   uint64_t now)
{
	struct dp_txslot *last = &e->tx[(cum - 1) % DP_WIN_MAX];

	/* Karn: time only frames sent once, and only when this ACK is the
	 * first news of them: a frame already reported held (sacked) waited
	 * for a hole, not for the network. */
	if (last->tries == 1 && !last->sacked && now > last->last_ns)
		rtt_sample(p, e, now - last->last_ns);
	for (uint32_t s = e->snd_una; s != cum; s++) {
		struct dp_txslot *t = &e->tx[s % DP_WIN_MAX];

		p->ops.frame_free(p->ops.user, t->frame);
		memset(t, 0, sizeof(*t));
		p->st.unacked_frames--;
	}
	e->snd_una = cum;
	e->progress_ns = now;
	rto_reset(p, e); /* progress: undo the timeout backoff */
}

/* Mark the frames the bitmap reports held; return the highest such seq
 * (@cum when none). */
static uint32_t ack_selective(struct dp_peer *e, uint32_t cum, const uint8_t *sack)
{
	uint32_t hi = cum;

	for (unsigned i = 0; i < DP_WIN_MAX - 1; i++) {
		uint32_t s = cum + 1 + i;

		if (seq_diff(s, e->snd_nxt) >= 0)
			break;
		if (!sack_bit(sack, i))
			continue;
		e->tx[s % DP_WIN_MAX].sacked = true;
		hi = s;
	}
	return hi;
}

void dpp_input_ack(struct dp_proto *p, struct dp_addr from, const uint8_t *b,
		   uint64_t now)
{
	struct dp_peer *e = dpp_peer_find(p, from);
	uint32_t cum = rd32(b + 12), hi;
	uint64_t gap;

	if (!e || rd32(b + 8) != e->tx_conn)
		return; /* stale stream or a stranger */
	if (seq_diff(cum, e->snd_una) < 0 || seq_diff(cum, e->snd_nxt) > 0)
		return; /* old, or acknowledges what was never sent */
	e->last_ns = now;
	e->tx_proven = true; /* only an adopted stream is acknowledged */
	if (cum != e->snd_una)
		ack_cumulative(p, e, cum, now);
	hi = ack_selective(e, cum, b + 16);
	/* Frames before the highest one held are missing at the peer: resend
	 * them now rather than at the timeout, but at most once per round
	 * trip so that a stream of such ACKs does not multiply them. */
	gap = e->srtt + e->srtt / 4;
	if (gap > p->cfg.rto_min_ns)
		gap = p->cfg.rto_min_ns;
	if (gap < 20000)
		gap = 20000;
	for (uint32_t s = cum; s != hi; s++) {
		struct dp_txslot *t = &e->tx[s % DP_WIN_MAX];

		if (t->sacked || now - t->last_ns < gap)
			continue;
		t->tries++;
		p->st.retransmits++;
		xmit(p, e, t, now);
	}
}

/* The peer dropped data of our current stream that it had (partly)
 * acknowledged: give the stream up, as at peer_timeout, so that a sender
 * still on it gets -ECONNRESET and the next message starts a new stream. */
void dpp_input_rst(struct dp_proto *p, struct dp_addr from, const uint8_t *b,
		   uint64_t now)
{
	struct dp_peer *e = dpp_peer_find(p, from);

	if (!e || rd32(b + 8) != e->tx_conn)
		return; /* an old stream or a stranger */
	e->last_ns = now;
	dpp_tx_reset(p, e);
	p->st.peers_reset++;
}

void dpp_input_challenge(struct dp_proto *p, struct dp_addr from, const uint8_t *b,
			 uint64_t now)
{
	struct dp_peer *e = dpp_peer_find(p, from);
	uint64_t cookie = rd64(b + 24);
	struct dp_txslot *t;
	uint8_t *nb;
	void *f;

	if (!e || rd32(b + 8) != e->tx_conn || !cookie || e->tx_proven)
		return; /* an old stream, a stranger, or adopted already */
	e->tx_cookie = cookie;
	t = &e->tx[e->snd_una % DP_WIN_MAX];
	if (e->snd_una != 0 || e->snd_nxt == e->snd_una)
		return; /* the first frame is not out yet: it gets the cookie */
	/* The first frame goes again with the cookie: in a new frame, since
	 * the old one may still be on its way out (dp_proto_ops.frame_xmit
	 * does not consume it). */
	f = p->ops.frame_alloc(p->ops.user, t->len, &nb);
	if (!f)
		return; /* its retransmission is challenged again */
	memcpy(nb, t->b, t->len);
	wr64(nb + 24, cookie);
	p->ops.frame_free(p->ops.user, t->frame);
	t->frame = f;
	t->b = nb;
	t->tries++;
	xmit(p, e, t, now);
}

bool dpp_timers_tx(struct dp_proto *p, struct dp_peer *e, uint64_t now)
{
	struct dp_txslot *first = &e->tx[e->snd_una % DP_WIN_MAX];
	bool backoff;

	if (e->snd_una == e->snd_nxt)
		return false;
	backoff = now - first->last_ns >= e->rto;
	if (now - e->progress_ns > p->cfg.peer_timeout_ns) {
		/* Give up: a sender blocked on this stream gets -ECONNRESET,
		 * and the next message starts a new stream the receiver
		 * adopts. */
		dpp_tx_reset(p, e);
		p->st.peers_reset++;
		return true;
	}
	for (uint32_t s = e->snd_una; s != e->snd_nxt; s++) {
		struct dp_txslot *t = &e->tx[s % DP_WIN_MAX];

		if (t->sacked || now - t->last_ns < e->rto)
			continue;
		t->tries++;
		p->st.retransmits++;
		xmit(p, e, t, now);
	}
	/* Back off while the oldest frame goes unanswered (the peer is silent
	 * or the path congested); any progress resets it. */
	if (backoff)
		e->rto = e->rto * 2 > p->cfg.rto_max_ns ? p->cfg.rto_max_ns : e->rto * 2;
	return false;
}
