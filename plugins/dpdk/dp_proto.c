/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport's reliability protocol (see dp_proto.h): the
 * instance, its peer table and stream ids, the dispatch of received
 * frames and the timers. The send side is in dp_proto_tx.c, the receive
 * side in dp_proto_rx.c; dp_proto_int.h is what they share.
 *
 * Shared state: struct dp_proto and its peers, unlocked: the caller
 * serialises every call on one instance (dp_proto.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp_proto_int.h"

static uint32_t rnd32(struct dp_proto *p)
{
	/* xorshift64*: stream ids need to differ, not to be secret */
	p->rng ^= p->rng >> 12;
	p->rng ^= p->rng << 25;
	p->rng ^= p->rng >> 27;
	return (uint32_t)((p->rng * 0x2545f4914f6cdd1dull) >> 32);
}

/* ---- cookies (see dp_proto.h: return routability) */

static uint64_t rotl(uint64_t x, int b)
{
	return x << b | x >> (64 - b);
}

#define SIPROUND                   \
	do {                       \
		v0 += v1;          \
		v1 = rotl(v1, 13); \
		v1 ^= v0;          \
		v0 = rotl(v0, 32); \
		v2 += v3;          \
		v3 = rotl(v3, 16); \
		v3 ^= v2;          \
		v0 += v3;          \
		v3 = rotl(v3, 21); \
		v3 ^= v0;          \
		v2 += v1;          \
		v1 = rotl(v1, 17); \
		v1 ^= v2;          \
		v2 = rotl(v2, 32); \
	} while (0)

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* SipHash-2-4 of two 64-bit words (a fixed 16-byte input). */
static uint64_t siphash16(const uint8_t key[16], uint64_t m0, uint64_t m1)
{
	uint64_t k0 = le64(key), k1 = le64(key + 8);
	uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
	uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
	uint64_t last = 16ull << 56;

	v3 ^= m0;
	SIPROUND;
	SIPROUND;
	v0 ^= m0;
	v3 ^= m1;
	SIPROUND;
	SIPROUND;
	v0 ^= m1;
	v3 ^= last;
	SIPROUND;
	SIPROUND;
	v0 ^= last;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

static uint64_t cookie_at(const struct dp_proto *p, struct dp_addr from, uint32_t conn,
			  uint64_t bucket)
{
	uint64_t c = siphash16(p->cfg.secret,
			       (uint64_t)from.ip << 32 | (uint64_t)from.port << 16,
			       (uint64_t)conn << 32 ^ bucket);

	return c ? c : 1; /* 0 means "no cookie" on the wire */
}

uint64_t dp_cookie(const struct dp_proto *p, struct dp_addr from, uint32_t conn,
		   uint64_t now)
{
	return cookie_at(p, from, conn, now / DP_COOKIE_BUCKET_NS);
}

bool dpp_cookie_ok(const struct dp_proto *p, struct dp_addr from, uint32_t conn,
		   uint64_t cookie, uint64_t now)
{
	uint64_t bucket = now / DP_COOKIE_BUCKET_NS;

	if (!cookie)
		return false;
	return cookie == cookie_at(p, from, conn, bucket) ||
	       (bucket && cookie == cookie_at(p, from, conn, bucket - 1));
}

/* ---- stream ids and peers */

/*
 * A new stream id: epoch << 16 | counter. The epoch (random, nonzero, so
 * no id is 0, "no stream") is drawn once per instance (incarnation of this
 * sender); the counter, of the instance too, starts at a random value and
 * grows by one with each new stream toward any peer, so a receiver can
 * tell a newer stream of the same incarnation from an older one, even one
 * from before this instance forgot and re-met it.
 */
uint32_t dpp_next_conn(struct dp_proto *p)
{
	return (uint32_t)p->epoch << 16 | ++p->ctr;
}

static unsigned bucket(struct dp_addr a)
{
	return (unsigned)(((a.ip * 2654435761u) ^ a.port) % DP_BUCKETS);
}

struct dp_peer *dpp_peer_find(struct dp_proto *p, struct dp_addr a)
{
	struct dp_peer *e = p->buckets[bucket(a)];

	while (e && (e->addr.ip != a.ip || e->addr.port != a.port))
		e = e->hnext;
	return e;
}

bool dpp_peer_idle(const struct dp_peer *e)
{
	return !e->pins && e->snd_una == e->snd_nxt && !e->part && !e->early &&
	       !e->ack_queued;
}

static void peer_remove(struct dp_proto *p, struct dp_peer *e, uint64_t now)
{
	struct dp_peer **pp = &p->buckets[bucket(e->addr)];

	dpp_rx_retire(p, e);
	dpp_tx_reset(p, e);
	if (e->ids.rx_epoch_known || e->ids.rx_lost) {
		/* Keep its stream ids a while (the last DP_GHOSTS forgotten). */
		p->ghosts[p->ghost_next] = (struct dp_ghost){ e->addr, true, e->ids,
							      now };
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

/* Make room only from a peer idle for twice the timeout: by then its
 * sender has given up, so no old frame of it can return and be taken for
 * new. False when there is none. */
static bool peer_evict(struct dp_proto *p, uint64_t now)
{
	struct dp_peer *e, *old = NULL;

	for (e = p->all; e; e = e->next)
		if (dpp_peer_idle(e) && now - e->last_ns > 2 * p->cfg.peer_timeout_ns &&
		    (!old || e->last_ns < old->last_ns))
			old = e;
	if (!old)
		return false;
	peer_remove(p, old, now);
	p->st.forgotten++;
	return true;
}

/* A returning peer gets back the stream ids kept when it was forgotten. */
static void peer_unghost(struct dp_proto *p, struct dp_peer *e, uint64_t now)
{
	for (unsigned i = 0; i < DP_GHOSTS; i++) {
		/* The newest record of it, if it was forgotten before. */
		struct dp_ghost *g =
			&p->ghosts[(p->ghost_next + DP_GHOSTS - 1 - i) % DP_GHOSTS];

		if (g->used && g->addr.ip == e->addr.ip && g->addr.port == e->addr.port) {
			/* Not for ever: a peer whose epoch clashes with an
			 * old one is refused only this long. */
			if (now - g->ns <= DP_GHOST_TTL * p->cfg.peer_timeout_ns)
				e->ids = g->ids;
			g->used = false;
			break;
		}
	}
}

struct dp_peer *dpp_peer_get(struct dp_proto *p, struct dp_addr a, uint64_t now)
{
	struct dp_peer *e = dpp_peer_find(p, a);
	unsigned b;

	if (e)
		return e;
	if (p->st.peers >= p->cfg.max_peers && !peer_evict(p, now))
		return NULL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->addr = a;
	e->id = ++p->peer_ids;
	peer_unghost(p, e, now);
	e->tx_conn = dpp_next_conn(p);
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
	if (!p->cfg.hold_peer_max || p->cfg.hold_peer_max > DP_WIN_MAX)
		p->cfg.hold_peer_max = DP_WIN_MAX;
	if (!p->cfg.hold_max)
		p->cfg.hold_max = UINT32_MAX;
	/* The secret too: a stream id is all that matches frames of an
	 * adopted stream, so an off-path sender should not predict it. */
	p->rng = (cfg->seed ^ siphash16(cfg->secret, cfg->seed, 0)) | 1;
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

size_t dp_peer_list(const struct dp_proto *p, struct dp_peer_row *rows, size_t n,
		    uint64_t now)
{
	size_t i = 0;

	for (const struct dp_peer *e = p->all; e && i < n; e = e->next, i++)
		rows[i] = (struct dp_peer_row){
			.addr = e->addr,
			.id = e->id,
			.dialed = !e->accepted,
			.msgs_sent = e->msgs_sent,
			.bytes_sent = e->bytes_sent,
			.msgs_received = e->msgs_received,
			.bytes_received = e->bytes_received,
			.idle_ns = now > e->last_ns ? now - e->last_ns : 0,
			/* srtt 0: no sample yet (or the stream was reset) */
			.srtt_ns = e->srtt ? (int64_t)e->srtt : -1,
			.rttvar_ns = e->srtt ? (int64_t)e->rttvar : -1,
		};
	return p->st.peers;
}

bool dp_busy(const struct dp_proto *p)
{
	return p->st.unacked_frames || p->st.early_frames || p->st.reasm_bytes;
}

void dp_input(struct dp_proto *p, struct dp_addr from, void *frame, const uint8_t *b,
	      size_t len, uint64_t now)
{
	if (len < DP_HDR_LEN || rd16(b) != DP_MAGIC || b[2] != DP_VERSION) {
		dpp_frame_refuse(p, frame);
		return;
	}
	if (b[3] == DP_T_DATA) {
		dpp_input_data(p, from, frame, b, len, now);
		return;
	}
	if (b[3] == DP_T_ACK && len == DP_ACK_LEN)
		dpp_input_ack(p, from, b, now);
	else if (b[3] == DP_T_RST && len == DP_HDR_LEN)
		dpp_input_rst(p, from, b, now);
	else if (b[3] == DP_T_CHALLENGE && len == DP_HDR_LEN)
		dpp_input_challenge(p, from, b, now);
	else {
		p->st.dropped++;
		p->st.refused++; /* an unknown type, or a length its type has not */
	}
	p->ops.frame_free(p->ops.user, frame);
}

void dp_timers(struct dp_proto *p, uint64_t now)
{
	struct dp_peer *e, *next;

	for (e = p->all; e; e = next) {
		next = e->next;
		if (dpp_timers_tx(p, e, now) || dpp_timers_rx(p, e, now))
			continue;
		if (dpp_peer_idle(e) && now - e->last_ns > 2 * p->cfg.peer_timeout_ns) {
			peer_remove(p, e, now);
			p->st.forgotten++;
		}
	}
}
