/* SPDX-License-Identifier: MIT */
/* The dpdk transport's reliability protocol: see dp_proto.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp_proto.h"

#define DP_BUCKETS 256
#define DP_REASM_MIN (64u << 10) /* first allocation of a partial message */
#define DP_OLD_EPOCHS 8          /* earlier sender epochs remembered per peer */
#define DP_GHOSTS 64             /* forgotten peers whose stream ids are kept */
#define DP_GHOST_TTL 64          /* ... for this many peer timeouts */

struct dp_txslot {
	void *frame;
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
	uint64_t last_ns;            /* last activity either way */

	/* send stream (its id: see next_conn()) */
	uint32_t tx_conn, snd_una, snd_nxt;
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
	uint16_t epoch, ctr; /* stream ids: see next_conn() */
	struct dp_ghost ghosts[DP_GHOSTS];
	unsigned ghost_next;
	struct dp_stats st;
};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void wr32(uint8_t *p, uint32_t v)
{
	wr16(p, (uint16_t)(v >> 16));
	wr16(p + 2, (uint16_t)v);
}

/* Sequence arithmetic modulo 2^32. */
static int32_t seq_diff(uint32_t a, uint32_t b) { return (int32_t)(a - b); }

static uint32_t rnd32(struct dp_proto *p)
{
	/* xorshift64*: stream ids need to differ, not to be secret */
	p->rng ^= p->rng >> 12;
	p->rng ^= p->rng << 25;
	p->rng ^= p->rng >> 27;
	return (uint32_t)((p->rng * 0x2545f4914f6cdd1dull) >> 32);
}

/*
 * A new stream id: epoch << 16 | counter. The epoch (random, nonzero, so
 * no id is 0, "no stream") is drawn once per instance (incarnation of this
 * sender); the counter, of the instance too, starts at a random value and
 * grows by one with each new stream toward any peer, so a receiver can
 * tell a newer stream of the same incarnation from an older one, even one
 * from before this instance forgot and re-met it.
 */
static uint32_t next_conn(struct dp_proto *p)
{
	return (uint32_t)p->epoch << 16 | ++p->ctr;
}

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

static unsigned bucket(struct dp_addr a)
{
	return (unsigned)(((a.ip * 2654435761u) ^ a.port) % DP_BUCKETS);
}

static struct dp_peer *peer_find(struct dp_proto *p, struct dp_addr a)
{
	struct dp_peer *e = p->buckets[bucket(a)];

	while (e && (e->addr.ip != a.ip || e->addr.port != a.port))
		e = e->hnext;
	return e;
}

static void tx_reset(struct dp_proto *p, struct dp_peer *e)
{
	for (uint32_t s = e->snd_una; s != e->snd_nxt; s++) {
		struct dp_txslot *t = &e->tx[s % DP_WIN_MAX];

		p->ops.frame_free(p->ops.user, t->frame);
		memset(t, 0, sizeof(*t));
	}
	p->st.unacked_frames -= e->snd_nxt - e->snd_una;
	e->tx_conn = next_conn(p);
	e->snd_una = e->snd_nxt = 0;
	e->srtt = e->rttvar = 0;
	e->rto = p->cfg.rto_min_ns;
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

/* Forget the receive stream (its sender went away or was replaced). */
static void rx_retire(struct dp_proto *p, struct dp_peer *e)
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

static bool peer_idle(const struct dp_peer *e)
{
	return !e->pins && e->snd_una == e->snd_nxt && !e->part && !e->early &&
	       !e->ack_queued;
}

static void peer_remove(struct dp_proto *p, struct dp_peer *e, uint64_t now)
{
	struct dp_peer **pp = &p->buckets[bucket(e->addr)];

	rx_retire(p, e);
	tx_reset(p, e);
	if (e->ids.rx_epoch_known || e->ids.rx_lost) {
		/* Keep its stream ids a while (the last DP_GHOSTS forgotten). */
		p->ghosts[p->ghost_next] = (struct dp_ghost){ e->addr, true, e->ids, now };
		p->ghost_next = (p->ghost_next + 1) % DP_GHOSTS;
	}
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	if (e->prev)
		e->prev->next = e->next;
	else
		p->all = e->next;
	if (e->next)
		e->next->prev = e->prev;
	p->st.peers--;
	free(e);
}

static struct dp_peer *peer_get(struct dp_proto *p, struct dp_addr a, uint64_t now)
{
	struct dp_peer *e = peer_find(p, a);
	unsigned b;

	if (e)
		return e;
	if (p->st.peers >= p->cfg.max_peers) {
		/* Make room only from a peer idle for twice the timeout: by then
		 * its sender has given up, so no old frame of it can return and
		 * be taken for new. */
		struct dp_peer *old = NULL;

		for (e = p->all; e; e = e->next)
			if (peer_idle(e) && now - e->last_ns > 2 * p->cfg.peer_timeout_ns &&
			    (!old || e->last_ns < old->last_ns))
				old = e;
		if (!old)
			return NULL;
		peer_remove(p, old, now);
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->addr = a;
	for (unsigned i = 0; i < DP_GHOSTS; i++) {
		/* The newest record of it, if it was forgotten before. */
		struct dp_ghost *g = &p->ghosts[(p->ghost_next + DP_GHOSTS - 1 - i) % DP_GHOSTS];

		if (g->used && g->addr.ip == a.ip && g->addr.port == a.port) {
			/* Not for ever: a peer whose epoch clashes with an
			 * old one is refused only this long. */
			if (now - g->ns <= DP_GHOST_TTL * p->cfg.peer_timeout_ns)
				e->ids = g->ids;
			g->used = false;
			break;
		}
	}
	e->tx_conn = next_conn(p);
	e->rto = p->cfg.rto_min_ns;
	e->last_ns = now;
	b = bucket(a);
	e->hnext = p->buckets[b];
	p->buckets[b] = e;
	e->next = p->all;
	if (p->all)
		p->all->prev = e;
	p->all = e;
	p->st.peers++;
	return e;
}

int dp_proto_new(const struct dp_proto_cfg *cfg, const struct dp_proto_ops *ops,
		 struct dp_proto **out)
{
	struct dp_proto *p;

	if (!cfg->payload_max || !cfg->window || cfg->window > DP_WIN_MAX ||
	    !cfg->max_peers || cfg->max_msg > UINT32_MAX || !cfg->rto_min_ns ||
	    cfg->rto_max_ns < cfg->rto_min_ns)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cfg = *cfg;
	p->ops = *ops;
	p->rng = cfg->seed | 1;
	do
		p->epoch = (uint16_t)(rnd32(p) >> 16);
	while (!p->epoch);
	p->ctr = (uint16_t)rnd32(p);
	*out = p;
	return 0;
}

void dp_proto_free(struct dp_proto *p)
{
	if (!p)
		return;
	while (p->all) {
		p->all->pins = 0;
		p->all->ack_queued = false;
		peer_remove(p, p->all, 0);
	}
	free(p);
}

void dp_set_rx_blocked(struct dp_proto *p, bool blocked)
{
	p->rx_blocked = blocked;
}

void dp_get_stats(const struct dp_proto *p, struct dp_stats *st)
{
	*st = p->st;
}

bool dp_busy(const struct dp_proto *p)
{
	return p->st.unacked_frames || p->st.early_frames || p->st.reasm_bytes;
}

/* ------------------------------------------------------------------ send */

int dp_send_begin(struct dp_proto *p, struct dp_addr to, uint64_t len,
		  struct dp_send *s, uint64_t now)
{
	struct dp_peer *e;

	if (len > p->cfg.max_msg)
		return -EMSGSIZE;
	e = peer_get(p, to, now);
	if (!e)
		return p->st.peers >= p->cfg.max_peers ? -EAGAIN : -ENOMEM;
	if (e->tx_owned)
		return -EBUSY;
	/* After a long silence the peer may have forgotten this stream (it
	 * forgets idle peers): start a new one, which it adopts at seq 0. */
	if (e->snd_una == e->snd_nxt && e->snd_nxt && now - e->last_ns > p->cfg.peer_timeout_ns)
		tx_reset(p, e);
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

static void xmit(struct dp_proto *p, struct dp_peer *e, struct dp_txslot *t,
		 uint64_t now)
{
	t->last_ns = now;
	p->ops.frame_xmit(p->ops.user, e->addr, t->frame, t->len);
}

int dp_send_step(struct dp_proto *p, struct dp_send *s, const void *buf,
		 uint64_t now)
{
	struct dp_peer *e = s->peer;

	if (s->conn != e->tx_conn)
		return -ECONNRESET;
	if (!s->started && e->snd_una == e->snd_nxt && e->snd_nxt &&
	    now - e->last_ns > p->cfg.peer_timeout_ns) {
		/* As in dp_send_begin(): begun, then a long silence before the
		 * first fragment; the peer may have forgotten this stream. Nothing
		 * of this message is out yet, so start it on a new stream. */
		tx_reset(p, e);
		s->conn = e->tx_conn;
	}
	if (s->started && s->off < s->len && e->snd_una == e->snd_nxt &&
	    now - e->last_ns > p->cfg.peer_timeout_ns) {
		/* Paused mid-message, everything acknowledged, for longer than
		 * the receiver keeps a partial message: it has dropped (or
		 * even forgotten) the start, so the rest could not complete
		 * it. Give the stream up, as at peer_timeout. */
		tx_reset(p, e);
		p->st.peers_reset++;
		return -ECONNRESET;
	}
	while (!s->started || s->off < s->len) {
		uint64_t plen = s->len - s->off;
		struct dp_txslot *t;
		uint8_t *b;
		void *f;

		if (e->snd_nxt - e->snd_una >= p->cfg.window)
			return 0;
		if (plen > p->cfg.payload_max)
			plen = p->cfg.payload_max;
		f = p->ops.frame_alloc(p->ops.user, DP_HDR_LEN + plen, &b);
		if (!f)
			return 0;
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
		if (plen)
			memcpy(b + DP_HDR_LEN, (const uint8_t *)buf + s->off, plen);
		if (e->snd_una == e->snd_nxt)
			e->progress_ns = now; /* the give-up clock starts now */
		t = &e->tx[e->snd_nxt % DP_WIN_MAX];
		*t = (struct dp_txslot){ .frame = f, .len = (uint32_t)(DP_HDR_LEN + plen),
					 .tries = 1 };
		e->snd_nxt++;
		p->st.unacked_frames++;
		s->started = true;
		s->off += plen;
		e->last_ns = now;
		xmit(p, e, t, now);
	}
	return 1;
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

static void input_ack(struct dp_proto *p, struct dp_addr from, const uint8_t *b,
		      uint64_t now)
{
	struct dp_peer *e = peer_find(p, from);
	uint32_t cum = rd32(b + 12), hi;
	const uint8_t *sack = b + 16;
	uint64_t gap;

	if (!e || rd32(b + 8) != e->tx_conn)
		return; /* stale stream or a stranger */
	if (seq_diff(cum, e->snd_una) < 0 || seq_diff(cum, e->snd_nxt) > 0)
		return; /* old, or acknowledges what was never sent */
	e->last_ns = now;
	if (cum != e->snd_una) {
		struct dp_txslot *last = &e->tx[(cum - 1) % DP_WIN_MAX];

		/* Karn: time only frames sent once, and only when this ACK is
		 * the first news of them: a frame already reported held
		 * (sacked) waited for a hole, not for the network. */
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
	hi = cum;
	for (unsigned i = 0; i < DP_WIN_MAX - 1; i++) {
		uint32_t s = cum + 1 + i;

		if (seq_diff(s, e->snd_nxt) >= 0)
			break;
		if (!sack_bit(sack, i))
			continue;
		e->tx[s % DP_WIN_MAX].sacked = true;
		hi = s;
	}
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
static void input_rst(struct dp_proto *p, struct dp_addr from, const uint8_t *b,
		      uint64_t now)
{
	struct dp_peer *e = peer_find(p, from);

	if (!e || rd32(b + 8) != e->tx_conn)
		return; /* an old stream or a stranger */
	e->last_ns = now;
	tx_reset(p, e);
	p->st.peers_reset++;
}

/* --------------------------------------------------------------- receive */

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
	rx_retire(p, e);
}

static void frame_drop(struct dp_proto *p, void *frame)
{
	p->ops.frame_free(p->ops.user, frame);
	p->st.dropped++;
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
 * Take the next in-order frame into the message being rebuilt. Return 1
 * when consumed; 0, keeping the frame, when there is no memory for it now
 * (it is then neither consumed nor acknowledged, and the sender retries);
 * -1, the frame freed, when it continues no message held (the stream lost
 * data: the caller calls rx_lose()).
 */
static int rx_consume(struct dp_proto *p, struct dp_peer *e, void *frame,
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
			p->st.delivered++;
			p->ops.deliver(p->ops.user, e->addr, frame, NULL, data, plen);
			return 1;
		}
		e->part_len = msg_len;
		if (!part_reserve(p, e, plen)) {
			e->part_len = 0;
			free(e->part);
			e->part = NULL;
			return 0;
		}
	} else if (!e->part || off != e->part_got || msg_len != e->part_len) {
		/* Not the continuation of the message held: acknowledging it
		 * would tell the sender a message went through that did not. */
		frame_drop(p, frame);
		return -1;
	} else if (!part_reserve(p, e, e->part_got + plen)) {
		return 0;
	}
	memcpy(e->part + e->part_got, data, plen);
	e->part_got += plen;
	p->ops.frame_free(p->ops.user, frame);
	if (flags & DP_F_LAST) {
		uint8_t *m = e->part;

		p->st.reasm_bytes -= e->part_cap;
		e->part = NULL;
		e->part_cap = e->part_got = e->part_len = 0;
		p->st.delivered++;
		p->ops.deliver(p->ops.user, e->addr, NULL, m, m, msg_len);
	}
	return 1;
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

static void input_data(struct dp_proto *p, struct dp_addr from, void *frame,
		       const uint8_t *b, size_t len, uint64_t now)
{
	uint32_t conn = rd32(b + 8), seq = rd32(b + 12);
	struct dp_peer *e;
	int32_t d;
	int c;

	if (!data_valid(p, b, len) || p->rx_blocked) {
		frame_drop(p, frame);
		return;
	}
	e = peer_get(p, from, now);
	if (!e) {
		frame_drop(p, frame);
		return;
	}
	if (!e->rx_known || conn != e->rx_conn) {
		if (conn == e->ids.rx_lost) {
			/* Data of it was dropped: tell its sender, never ACK. */
			frame_drop(p, frame);
			rst_queue(p, e);
			return;
		}
		/* A stream is adopted at its first frame only (frames of it
		 * may arrive in any order), and only if newer than every one
		 * of the sender's seen so far: a retired one never again (its
		 * late frames must not bring it back). */
		if (!(b[4] & DP_F_FIRST) || seq != 0 || !rx_conn_fresh(&e->ids, conn)) {
			frame_drop(p, frame);
			return;
		}
		if (e->rx_known) {
			p->st.peers_reset++;
			/* A new stream from a known peer usually means it
			 * restarted and forgot ours too: start ours afresh so
			 * that it can adopt it. Only when nothing of ours is in
			 * flight, which a fresh stream would lose. */
			if (e->snd_una == e->snd_nxt && !e->tx_owned && e->snd_nxt)
				tx_reset(p, e);
		}
		rx_retire(p, e);
		rx_conn_adopt(&e->ids, conn);
		e->rx_known = true;
		e->rx_conn = conn;
		e->rcv_nxt = seq;
	}
	e->last_ns = now;
	d = seq_diff(seq, e->rcv_nxt);
	if (d < 0 || (d > 0 && e->rx[seq % DP_WIN_MAX].frame)) {
		p->ops.frame_free(p->ops.user, frame);
		p->st.dups++;
		ack_queue(p, e); /* our ACK may have been lost */
		return;
	}
	if (d >= DP_WIN_MAX) {
		frame_drop(p, frame);
		return;
	}
	e->rx_ns = now;
	if (d > 0 || e->rx[seq % DP_WIN_MAX].frame) {
		struct dp_rxslot *r = &e->rx[seq % DP_WIN_MAX];

		if (r->frame) { /* d == 0 and an earlier copy is held */
			p->ops.frame_free(p->ops.user, frame);
			p->st.dups++;
		} else {
			*r = (struct dp_rxslot){ .frame = frame, .b = b, .len = (uint32_t)len };
			e->early++;
			p->st.early_frames++;
		}
		if (d > 0) {
			ack_queue(p, e);
			return;
		}
	} else {
		c = rx_consume(p, e, frame, b, (uint32_t)len);
		if (c == 0) {
			frame_drop(p, frame);
			return;
		}
		if (c < 0)
			goto lost;
		e->rcv_nxt++;
	}
	/* Drain frames that were waiting for this one. */
	for (;;) {
		struct dp_rxslot *r = &e->rx[e->rcv_nxt % DP_WIN_MAX];

		if (!r->frame)
			break;
		c = rx_consume(p, e, r->frame, r->b, r->len);
		if (c == 0)
			break;
		r->frame = NULL;
		e->early--;
		p->st.early_frames--;
		if (c < 0)
			goto lost;
		e->rcv_nxt++;
	}
	ack_queue(p, e);
	return;
lost:
	rx_lose(p, e);
	rst_queue(p, e);
}

void dp_input(struct dp_proto *p, struct dp_addr from, void *frame,
	      const uint8_t *b, size_t len, uint64_t now)
{
	if (len < DP_HDR_LEN || rd16(b) != DP_MAGIC || b[2] != DP_VERSION) {
		frame_drop(p, frame);
		return;
	}
	if (b[3] == DP_T_DATA) {
		input_data(p, from, frame, b, len, now);
		return;
	}
	if (b[3] == DP_T_ACK && len == DP_ACK_LEN)
		input_ack(p, from, b, now);
	else if (b[3] == DP_T_RST && len == DP_HDR_LEN)
		input_rst(p, from, b, now);
	else
		p->st.dropped++;
	p->ops.frame_free(p->ops.user, frame);
}

void dp_flush_acks(struct dp_proto *p)
{
	while (p->ackq) {
		struct dp_peer *e = p->ackq;
		uint8_t *b;
		void *f;

		p->ackq = e->acknext;
		e->ack_queued = false;
		if (e->rst_due && e->ids.rx_lost) {
			f = p->ops.frame_alloc(p->ops.user, DP_HDR_LEN, &b);
			if (f) { /* else the next frame of it asks again */
				memset(b, 0, DP_HDR_LEN);
				wr16(b, DP_MAGIC);
				b[2] = DP_VERSION;
				b[3] = DP_T_RST;
				wr32(b + 8, e->ids.rx_lost);
				p->ops.frame_xmit(p->ops.user, e->addr, f, DP_HDR_LEN);
				p->ops.frame_free(p->ops.user, f);
			}
		}
		e->rst_due = false;
		if (!e->ack_due || !e->rx_known)
			continue;
		e->ack_due = false;
		f = p->ops.frame_alloc(p->ops.user, DP_ACK_LEN, &b);
		if (!f)
			continue; /* the next frame from the peer asks again */
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
}

void dp_timers(struct dp_proto *p, uint64_t now)
{
	struct dp_peer *e, *next;

	for (e = p->all; e; e = next) {
		next = e->next;
		if (e->snd_una != e->snd_nxt) {
			struct dp_txslot *first = &e->tx[e->snd_una % DP_WIN_MAX];
			bool backoff = now - first->last_ns >= e->rto;

			if (now - e->progress_ns > p->cfg.peer_timeout_ns) {
				/* Give up: a sender blocked on this stream gets
				 * -ECONNRESET, and the next message starts a new
				 * stream the receiver adopts. */
				tx_reset(p, e);
				p->st.peers_reset++;
				continue;
			}
			for (uint32_t s = e->snd_una; s != e->snd_nxt; s++) {
				struct dp_txslot *t = &e->tx[s % DP_WIN_MAX];

				if (t->sacked || now - t->last_ns < e->rto)
					continue;
				t->tries++;
				p->st.retransmits++;
				xmit(p, e, t, now);
			}
			/* Back off while the oldest frame goes unanswered (the
			 * peer is silent or the path congested); any progress
			 * resets it. */
			if (backoff)
				e->rto = e->rto * 2 > p->cfg.rto_max_ns ? p->cfg.rto_max_ns
									 : e->rto * 2;
		}
		if ((e->part || e->early) && now - e->rx_ns > p->cfg.peer_timeout_ns) {
			/* Its sender vanished or paused mid-message: the partial
			 * message (whose fragments were acknowledged) is lost,
			 * and the sender must hear so if it comes back. */
			rx_lose(p, e);
			continue;
		}
		if (peer_idle(e) && now - e->last_ns > 2 * p->cfg.peer_timeout_ns)
			peer_remove(p, e, now);
	}
}
