/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport's protocol (dp_proto*.c) and framing (dp_wire.c)
 * without DPDK: two protocol instances over a simulated link that loses,
 * duplicates and reorders frames, on a simulated clock; and hostile input
 * fed straight to the parser and the protocol.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dp_proto.h"
#include "dp_wire.h"
#include "zap-test.h"

/* ------------------------------------------------------- simulated link */

struct frame {
	size_t len;
	uint8_t b[];
};

struct msg {
	struct dp_addr from;
	size_t len;
	uint8_t *data;
};

struct node {
	struct dp_proto *p;
	struct dp_addr addr;
	struct sim *sim;
	struct msg msgs[4096];
	size_t nmsgs;
	long frames_live; /* allocated and not freed: must return to 0 */
	long pool;	  /* > 0: frames it may hold at once (an mbuf pool) */
	long pool_low;	  /* the fewest free frames seen (pool - live) */
};

struct wire_frame {
	struct dp_addr from, to;
	struct frame *f;
};

struct sim {
	struct node n[2];
	struct wire_frame q[1 << 16];
	size_t nq;
	uint64_t now, rng;
	unsigned loss_pct, dup_pct;
	bool reorder;
};

static uint64_t rnd(struct sim *s)
{
	s->rng ^= s->rng << 13;
	s->rng ^= s->rng >> 7;
	s->rng ^= s->rng << 17;
	return s->rng;
}

/* When >= 0: frames node 0 (the sender) may still allocate (a pool running
 * dry pauses a sender mid-message). */
static long a_alloc_budget = -1;

static void *f_alloc(void *user, size_t len, uint8_t **buf)
{
	struct node *n = user;
	struct frame *f;

	*buf = NULL;
	if (n == &n->sim->n[0] && a_alloc_budget >= 0 && !a_alloc_budget--)
		return NULL;
	f = malloc(sizeof(*f) + len);

	f->len = len;
	*buf = f->b;
	n->frames_live++;
	return f;
}

static void f_free(void *user, void *frame)
{
	struct node *n = user;

	n->frames_live--;
	free(frame);
}

static void f_xmit(void *user, struct dp_addr to, void *frame, size_t len)
{
	struct node *n = user;
	struct sim *s = n->sim;
	struct frame *f = frame;
	unsigned copies = 1;

	if (s->loss_pct && rnd(s) % 100 < s->loss_pct)
		return;
	if (s->dup_pct && rnd(s) % 100 < s->dup_pct)
		copies = 2;
	while (copies-- && s->nq < sizeof(s->q) / sizeof(s->q[0])) {
		struct frame *c = malloc(sizeof(*c) + len);

		c->len = len;
		memcpy(c->b, f->b, len);
		s->q[s->nq++] = (struct wire_frame){ n->addr, to, c };
	}
}

static void f_deliver(void *user, struct dp_addr from, void *frame, void *heap,
		      const void *data, size_t len)
{
	struct node *n = user;
	struct msg *m = &n->msgs[n->nmsgs++ % 4096];

	m->from = from;
	m->len = len;
	m->data = malloc(len ? len : 1);
	memcpy(m->data, data, len);
	if (frame)
		f_free(user, frame);
	free(heap);
}

static struct dp_proto_cfg cfg_default(void)
{
	return (struct dp_proto_cfg){
		.payload_max = 1448, .window = 64, .max_msg = 64u << 20,
		.rto_min_ns = 1000000, .rto_max_ns = 50000000, .peer_timeout_ns = 2000000000,
		.max_peers = 16, .reasm_cap = 8u << 20, .seed = 42,
	};
}

static void sim_init(struct sim *s, const struct dp_proto_cfg *cfg)
{
	memset(s, 0, sizeof(*s));
	s->rng = 0x1234567;
	s->now = 1000000000;
	for (int i = 0; i < 2; i++) {
		struct dp_proto_ops ops = { .user = &s->n[i], .frame_alloc = f_alloc,
					    .frame_free = f_free, .frame_xmit = f_xmit,
					    .deliver = f_deliver };
		struct dp_proto_cfg c = *cfg;

		c.seed = cfg->seed + (uint64_t)i;
		s->n[i].sim = s;
		s->n[i].addr = (struct dp_addr){ 0x0a000001u + (uint32_t)i, (uint16_t)(5000 + i) };
		assert_int_equal(dp_proto_new(&c, &ops, &s->n[i].p), 0);
	}
}

/* A received frame takes a buffer of @n's pool (the receiver owns the
 * frame now); false when the pool is empty, as a NIC would drop it. */
static bool pool_take(struct node *n)
{
	if (n->pool && n->frames_live >= n->pool)
		return false;
	n->frames_live++;
	if (n->pool && n->pool - n->frames_live < n->pool_low)
		n->pool_low = n->pool - n->frames_live;
	return true;
}

static struct node *node_at(struct sim *s, struct dp_addr a)
{
	for (int i = 0; i < 2; i++)
		if (s->n[i].addr.ip == a.ip && s->n[i].addr.port == a.port)
			return &s->n[i];
	return NULL;
}

/* Carry frames (in random order when reordering), then run timers. */
static void sim_step(struct sim *s)
{
	size_t n = s->nq;

	for (size_t k = 0; k < n && s->nq; k++) {
		size_t i = s->reorder ? rnd(s) % s->nq : 0;
		struct wire_frame w = s->q[i];
		struct node *dst = node_at(s, w.to);

		if (s->reorder)
			s->q[i] = s->q[--s->nq];
		else
			memmove(s->q, s->q + 1, --s->nq * sizeof(s->q[0]));
		if (!dst) {
			free(w.f);
			continue;
		}
		if (!pool_take(dst)) { /* no buffer to receive into: lost */
			free(w.f);
			continue;
		}
		dp_input(dst->p, w.from, w.f, w.f->b, w.f->len, s->now);
	}
	for (int i = 0; i < 2; i++)
		dp_flush_acks(s->n[i].p);
	s->now += 50000; /* 50 us per step */
	for (int i = 0; i < 2; i++)
		dp_timers(s->n[i].p, s->now);
}

/* Send @count messages A->B of sizes from @size_of and check B got each
 * exactly once, in order, intact. */
static void transfer(struct sim *s, unsigned count, size_t (*size_of)(unsigned))
{
	static uint8_t buf[1 << 20];
	struct node *a = &s->n[0], *b = &s->n[1];

	b->nmsgs = 0;
	for (unsigned i = 0; i < count; i++) {
		struct dp_send snd;
		size_t len = size_of(i);
		int rc, guard = 0;

		zt_fill(buf, len, i);
		assert_int_equal(dp_send_begin(a->p, b->addr, len, &snd, s->now), 0);
		while ((rc = dp_send_step(a->p, &snd, buf, s->now)) == 0) {
			sim_step(s);
			assert_true(++guard < 200000);
		}
		assert_int_equal(rc, 1);
		dp_send_end(a->p, &snd);
		/* Keep B's queue from wrapping: drain every 1000. */
		if (b->nmsgs >= 3000) {
			for (size_t k = 0; k < b->nmsgs; k++)
				free(b->msgs[k].data);
			fail_msg("receiver got more messages than sent");
		}
	}
	for (int guard = 0; guard < 100000; guard++) {
		struct dp_stats st;

		dp_get_stats(a->p, &st);
		if (!st.unacked_frames && !s->nq)
			break;
		sim_step(s);
	}
	if (b->nmsgs != count) {
		struct dp_stats sa, sb;

		dp_get_stats(a->p, &sa);
		dp_get_stats(b->p, &sb);
		print_message("sender: unacked %u retransmits %llu resets %llu; receiver: early %u "
			      "reasm %llu delivered %llu dups %llu dropped %llu partials dropped %llu "
			      "resets %llu\n", sa.unacked_frames, (unsigned long long)sa.retransmits,
			      (unsigned long long)sa.peers_reset, sb.early_frames,
			      (unsigned long long)sb.reasm_bytes, (unsigned long long)sb.delivered,
			      (unsigned long long)sb.dups, (unsigned long long)sb.dropped,
			      (unsigned long long)sb.partials_dropped,
			      (unsigned long long)sb.peers_reset);
	}
	if (b->nmsgs != count)
		for (unsigned i = 0, j = 0; i < b->nmsgs && j < count; i++, j++) {
			while (j < count && b->msgs[i].len != size_of(j)) {
				print_message("missing message %u (%zu bytes)\n", j, size_of(j));
				j++;
			}
		}
	assert_int_equal(b->nmsgs, count);
	for (unsigned i = 0; i < count; i++) {
		struct msg *m = &b->msgs[i];
		size_t len = size_of(i);

		assert_int_equal(m->len, len);
		zt_fill(buf, len, i);
		assert_memory_equal(m->data, buf, len);
		assert_int_equal(m->from.port, a->addr.port);
		free(m->data);
	}
	b->nmsgs = 0;
}

static void sim_free(struct sim *s)
{
	while (s->nq)
		free(s->q[--s->nq].f);
	for (int i = 0; i < 2; i++) {
		dp_proto_free(s->n[i].p);
		assert_int_equal(s->n[i].frames_live, 0); /* nothing leaked */
	}
}

static size_t sz_mixed(unsigned i)
{
	static const size_t t[] = { 0, 1, 1447, 1448, 1449, 2896, 2897, 65536, 200000 };

	return i < 9 ? t[i] : (i * 7919u) % 30000;
}

static size_t sz_small(unsigned i) { return 8 + i % 50; }

static void t_clean_link(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();

	sim_init(&s, &c);
	transfer(&s, 200, sz_mixed);
	sim_free(&s);
}

static void t_loss_dup_reorder(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_stats st;

	sim_init(&s, &c);
	s.loss_pct = 10;
	s.dup_pct = 5;
	s.reorder = true;
	transfer(&s, 1000, sz_mixed);
	transfer(&s, 2000, sz_small);
	dp_get_stats(s.n[0].p, &st);
	assert_true(st.retransmits > 0);
	dp_get_stats(s.n[1].p, &st);
	assert_true(st.dups > 0);
	sim_free(&s);
}

/* Heavy loss, both ways (ACKs too). */
static void t_heavy_loss(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();

	sim_init(&s, &c);
	s.loss_pct = 30;
	s.reorder = true;
	transfer(&s, 300, sz_mixed);
	sim_free(&s);
}

/* A sender whose peer never answers gives up after peer_timeout. */
static void t_sender_gives_up(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	static uint8_t buf[200000];
	struct dp_send snd;
	int rc = 0;

	sim_init(&s, &c);
	s.loss_pct = 100;
	assert_int_equal(dp_send_begin(s.n[0].p, s.n[1].addr, sizeof(buf), &snd, s.now), 0);
	for (int i = 0; i < 100000 && rc == 0; i++) {
		rc = dp_send_step(s.n[0].p, &snd, buf, s.now);
		sim_step(&s);
	}
	assert_int_equal(rc, -ECONNRESET);
	dp_send_end(s.n[0].p, &snd);
	/* A new stream starts and, with the link back, works. */
	s.loss_pct = 0;
	transfer(&s, 10, sz_mixed);
	sim_free(&s);
}

/* Build one DATA or ACK header. */
static size_t hdr(uint8_t *b, uint8_t type, uint8_t flags, uint32_t conn, uint32_t seq,
		  uint32_t msg_len, uint32_t off, size_t payload)
{
	memset(b, 0, DP_HDR_LEN + payload);
	b[0] = 0x5a;
	b[1] = 0x50;
	b[2] = DP_VERSION;
	b[3] = type;
	b[4] = flags;
	for (int i = 0; i < 4; i++) {
		b[8 + i] = (uint8_t)(conn >> (24 - 8 * i));
		b[12 + i] = (uint8_t)(seq >> (24 - 8 * i));
		b[16 + i] = (uint8_t)(msg_len >> (24 - 8 * i));
		b[20 + i] = (uint8_t)(off >> (24 - 8 * i));
	}
	return DP_HDR_LEN + payload;
}

/* Put into @b (a DATA frame toward B) the cookie B expects from @from:
 * the frame of a routable sender that answered B's challenge. */
static void stamp(struct sim *s, struct dp_addr from, uint8_t *b, size_t len)
{
	uint32_t conn;
	uint64_t c;

	if (len < DP_HDR_LEN || b[3] != DP_T_DATA)
		return; /* truncated or not DATA: as it is */
	conn = (uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11];
	c = dp_cookie(s->n[1].p, from, conn, s->now);
	for (int i = 0; i < 8; i++)
		b[24 + i] = (uint8_t)(c >> (56 - 8 * i));
}

/* A frame from @from, a routable sender (it echoes B's cookie), into B. */
static void feed(struct sim *s, struct dp_addr from, const uint8_t *b, size_t len)
{
	struct node *n = &s->n[1];
	uint8_t *buf;
	void *f = f_alloc(n, len, &buf);

	memcpy(buf, b, len);
	stamp(s, from, buf, len);
	dp_input(n->p, from, f, buf, len, s->now);
}

/* Malformed transport headers are dropped before any state exists. */
static void t_hostile_headers(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_addr evil = { 0x0a0000ffu, 666 };
	uint8_t b[4096];
	struct dp_stats st;
	size_t n;

	sim_init(&s, &c);
	for (size_t len = 0; len < DP_HDR_LEN; len++) /* truncated */
		feed(&s, evil, b, len);
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, 7, 0, 10, 0, 10);
	b[0] = 0;
	feed(&s, evil, b, n); /* bad magic */
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, 7, 0, 10, 0, 10);
	b[2] = 9;
	feed(&s, evil, b, n); /* unknown version */
	n = hdr(b, 9, 0, 7, 0, 10, 0, 10);
	feed(&s, evil, b, n); /* unknown type */
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, 7, 0, 20, 0, 10);
	feed(&s, evil, b, n); /* LAST but short of msg_len */
	n = hdr(b, DP_T_DATA, DP_F_FIRST, 7, 0, 5, 0, 10);
	feed(&s, evil, b, n); /* payload beyond msg_len */
	n = hdr(b, DP_T_DATA, DP_F_LAST, 7, 0, 10, 0, 10);
	feed(&s, evil, b, n); /* offset 0 without FIRST */
	n = hdr(b, DP_T_DATA, DP_F_FIRST, 7, 0, 100u << 20, 0, 1000);
	feed(&s, evil, b, n); /* above max_msg */
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, 0, 0, 10, 0, 10);
	feed(&s, evil, b, n); /* stream id 0 */
	n = hdr(b, DP_T_DATA, 0x80 | DP_F_FIRST | DP_F_LAST, 7, 0, 10, 0, 10);
	feed(&s, evil, b, n); /* unknown flag */
	n = hdr(b, DP_T_DATA, DP_F_FIRST, 7, 0, 10, 0, 0);
	feed(&s, evil, b, n); /* empty fragment of a non-empty message */
	n = hdr(b, DP_T_ACK, 0, 7, 0, 0, 0, 3);
	feed(&s, evil, b, n); /* ACK of the wrong length */
	n = hdr(b, DP_T_ACK, 0, 7, 5, 0, 0, DP_ACK_LEN - DP_HDR_LEN);
	feed(&s, evil, b, n); /* ACK from a stranger */
	n = hdr(b, DP_T_DATA, 0, 7, 3, 5000, 1448, 100);
	feed(&s, evil, b, n); /* middle of a stream never started */
	dp_get_stats(s.n[1].p, &st);
	assert_int_equal(st.delivered, 0);
	assert_int_equal(st.reasm_bytes, 0);
	assert_int_equal(st.early_frames, 0);
	assert_true(st.peers <= 1);
	assert_int_equal(s.n[1].nmsgs, 0);
	/* Each refused (zap_stats().frames_refused) but the stranger's ACK,
	 * which is ignored like a late one of an old stream: 32 truncated,
	 * magic, version, type, 7 DATA headers, the ACK's length, the
	 * stream never started. */
	assert_int_equal(st.refused, 32 + 3 + 7 + 1 + 1);
	assert_int_equal(st.forgotten, 0);
	sim_free(&s);
}

/* First fragments that never complete, from many senders: bounded by
 * max_peers and reasm_cap, dropped after peer_timeout, peers forgotten. */
static void t_fragments_never_complete(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	uint8_t b[4096];
	struct dp_stats st;

	c.reasm_cap = 512u << 10;
	sim_init(&s, &c);
	for (unsigned i = 0; i < 1000; i++) {
		struct dp_addr evil = { 0x0b000000u + i, (uint16_t)(1000 + i) };
		size_t n = hdr(b, DP_T_DATA, DP_F_FIRST, 100 + i, 0, 60u << 20, 0, 1448);

		feed(&s, evil, b, n);
		/* ...and early frames far ahead that will never be reached. */
		for (uint32_t k = 2; k < 300; k += 3) {
			n = hdr(b, DP_T_DATA, 0, 100 + i, k, 60u << 20, 1448 * k, 1448);
			feed(&s, evil, b, n);
		}
		dp_get_stats(s.n[1].p, &st);
		assert_true(st.peers <= c.max_peers);
		assert_true(st.reasm_bytes <= c.reasm_cap);
		assert_true(st.early_frames <= c.max_peers * DP_WIN_MAX);
	}
	dp_flush_acks(s.n[1].p);
	s.now += c.peer_timeout_ns + 1;
	dp_timers(s.n[1].p, s.now);
	dp_get_stats(s.n[1].p, &st);
	assert_int_equal(st.reasm_bytes, 0);
	assert_int_equal(st.early_frames, 0);
	s.now += 2 * c.peer_timeout_ns + 1;
	dp_timers(s.n[1].p, s.now);
	dp_get_stats(s.n[1].p, &st);
	assert_int_equal(st.peers, 0);
	assert_int_equal(s.n[1].nmsgs, 0);
	while (s.nq) /* the ACKs to the strangers */
		free(s.q[--s.nq].f);
	/* A real sender still gets through afterwards. */
	transfer(&s, 20, sz_mixed);
	sim_free(&s);
}

/* A restarted sender (new stream id) is adopted at its first fragment; the
 * old stream's partial message is dropped and its stragglers ignored. */
static void t_restart(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_addr peer = { 0x0a000001u, 5000 };
	uint8_t b[4096];
	struct dp_stats st;
	size_t n;

	sim_init(&s, &c);
	n = hdr(b, DP_T_DATA, DP_F_FIRST, 11, 0, 5000, 0, 1448);
	feed(&s, peer, b, n); /* old stream: half a message */
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, 22, 0, 3, 0, 3);
	memcpy(b + DP_HDR_LEN, "new", 3);
	feed(&s, peer, b, n); /* restarted sender */
	n = hdr(b, DP_T_DATA, 0, 11, 1, 5000, 1448, 1448);
	feed(&s, peer, b, n); /* old straggler */
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, 11, 2, 3, 0, 3);
	feed(&s, peer, b, n); /* old stream may not come back */
	dp_get_stats(s.n[1].p, &st);
	assert_int_equal(s.n[1].nmsgs, 1);
	assert_int_equal(s.n[1].msgs[0].len, 3);
	assert_memory_equal(s.n[1].msgs[0].data, "new", 3);
	free(s.n[1].msgs[0].data);
	s.n[1].nmsgs = 0;
	assert_int_equal(st.reasm_bytes, 0);
	assert_int_equal(st.partials_dropped, 1);
	while (s.nq)
		free(s.q[--s.nq].f);
	sim_free(&s);
}

/* Frames queued from B toward @to of @type for stream @conn, with seq
 * (ACK: next expected) at least @min_seq. */
static unsigned queued(struct sim *s, struct dp_addr to, uint8_t type, uint32_t conn,
		       uint32_t min_seq)
{
	unsigned k = 0;

	for (size_t i = 0; i < s->nq; i++) {
		const uint8_t *b = s->q[i].f->b;
		uint32_t c = (uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11];
		uint32_t q = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];

		if (s->q[i].to.ip == to.ip && s->q[i].to.port == to.port &&
		    s->q[i].f->len >= DP_HDR_LEN && b[3] == type && c == conn && q >= min_seq)
			k++;
	}
	return k;
}

/* A frame from B's address straight into A. */
static void feed_a(struct sim *s, const uint8_t *b, size_t len)
{
	struct node *n = &s->n[0];
	uint8_t *buf;
	void *f = f_alloc(n, len, &buf);

	assert_non_null(f);
	memcpy(buf, b, len);
	dp_input(n->p, s->n[1].addr, f, buf, len, s->now);
}

static uint32_t frame_conn(const struct frame *f)
{
	return (uint32_t)f->b[8] << 24 | (uint32_t)f->b[9] << 16 | (uint32_t)f->b[10] << 8 |
	       f->b[11];
}

static void drop_queue(struct sim *s)
{
	while (s->nq)
		free(s->q[--s->nq].f);
}

/*
 * A late first frame of a stream retired two (or more) restarts ago is
 * never adopted again: the receiver used to remember only the last retired
 * stream id and delivered that message a second time. Stream ids are
 * epoch << 16 | counter (per sender instance, see dp_proto.h).
 */
static void t_stale_stream_not_resurrected(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_addr peer = { 0x0a000001u, 5000 };
	/* Counters across the 16-bit wrap; then a restarted incarnation. */
	const uint32_t x1 = 0x1234fffeu, x2 = 0x1234ffffu, x3 = 0x12340000u, y1 = 0x56780007u;
	uint8_t b[4096];
	size_t n;

	sim_init(&s, &c);
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, x1, 0, 3, 0, 3);
	memcpy(b + DP_HDR_LEN, "one", 3);
	feed(&s, peer, b, n);
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, x2, 0, 3, 0, 3);
	memcpy(b + DP_HDR_LEN, "two", 3);
	feed(&s, peer, b, n); /* restart 1 */
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, x3, 0, 3, 0, 3);
	memcpy(b + DP_HDR_LEN, "thr", 3);
	feed(&s, peer, b, n); /* restart 2, the counter wrapped */
	assert_int_equal(s.n[1].nmsgs, 3);
	/* Late copies of the first two streams' first frames. */
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, x1, 0, 3, 0, 3);
	memcpy(b + DP_HDR_LEN, "one", 3);
	feed(&s, peer, b, n);
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, x2, 0, 3, 0, 3);
	memcpy(b + DP_HDR_LEN, "two", 3);
	feed(&s, peer, b, n);
	assert_int_equal(s.n[1].nmsgs, 3);
	/* A restarted sender (new epoch) is adopted; then no stream of the
	 * epoch it left comes back, not even one with a newer counter. */
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, y1, 0, 3, 0, 3);
	memcpy(b + DP_HDR_LEN, "new", 3);
	feed(&s, peer, b, n);
	assert_int_equal(s.n[1].nmsgs, 4);
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, x3, 0, 3, 0, 3);
	memcpy(b + DP_HDR_LEN, "thr", 3);
	feed(&s, peer, b, n);
	n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, x3 + 1, 0, 3, 0, 3);
	feed(&s, peer, b, n);
	assert_int_equal(s.n[1].nmsgs, 4);
	assert_memory_equal(s.n[1].msgs[0].data, "one", 3);
	assert_memory_equal(s.n[1].msgs[1].data, "two", 3);
	assert_memory_equal(s.n[1].msgs[2].data, "thr", 3);
	assert_memory_equal(s.n[1].msgs[3].data, "new", 3);
	for (size_t i = 0; i < s.n[1].nmsgs; i++)
		free(s.n[1].msgs[i].data);
	s.n[1].nmsgs = 0;
	drop_queue(&s);
	sim_free(&s);
}

/* The same with two real senders' restarts: a copy of the first stream's
 * first frame, held back by the network, arrives after two give-ups. */
static void t_stale_stream_real_sender(void **state)
{
	static struct sim s;
	static uint8_t buf[100];
	struct dp_proto_cfg c = cfg_default();
	struct node *a = &s.n[0], *bn = &s.n[1];
	struct frame *late = NULL;
	struct dp_send snd;

	sim_init(&s, &c);
	zt_fill(buf, sizeof(buf), 1);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(dp_send_begin(a->p, bn->addr, sizeof(buf), &snd, s.now), 0);
		assert_int_equal(dp_send_step(a->p, &snd, buf, s.now), 1);
		dp_send_end(a->p, &snd);
		assert_int_equal(s.nq, 1);
		sim_step(&s); /* B challenges the new stream */
		sim_step(&s); /* A sends its frame again, with the cookie */
		assert_int_equal(s.nq, 1);
		if (!round) { /* keep a copy of the first message's frame */
			late = malloc(sizeof(*late) + s.q[0].f->len);
			late->len = s.q[0].f->len;
			memcpy(late->b, s.q[0].f->b, late->len);
		}
		sim_step(&s); /* delivered, ACK queued toward A */
		drop_queue(&s); /* ACK lost */
		/* A gives the stream up (no ACK for peer_timeout) and the
		 * next message starts a new one. */
		s.now += c.peer_timeout_ns + 1000000;
		dp_timers(a->p, s.now);
		dp_timers(bn->p, s.now);
	}
	assert_int_equal(bn->nmsgs, 3);
	struct frame *late2 = malloc(sizeof(*late2) + late->len);
	late2->len = late->len;
	memcpy(late2->b, late->b, late->len);
	bn->frames_live++;
	stamp(&s, a->addr, late->b, late->len); /* only its stream id is old */
	dp_input(bn->p, a->addr, late, late->b, late->len, s.now);
	assert_int_equal(bn->nmsgs, 3); /* not a fourth time */
	/* Nor after the receiver forgot the idle peer altogether. */
	s.now += 3 * c.peer_timeout_ns;
	dp_timers(a->p, s.now);
	dp_timers(bn->p, s.now);
	struct dp_stats st;
	dp_get_stats(bn->p, &st);
	assert_int_equal(st.peers, 0);
	bn->frames_live++;
	stamp(&s, a->addr, late2->b, late2->len);
	dp_input(bn->p, a->addr, late2, late2->b, late2->len, s.now);
	assert_int_equal(bn->nmsgs, 3);
	dp_get_stats(bn->p, &st);
	assert_int_equal(st.delivered, 3);
	for (size_t i = 0; i < bn->nmsgs; i++)
		free(bn->msgs[i].data);
	bn->nmsgs = 0;
	drop_queue(&s);
	/* The sender's next message (a new stream) still goes through. */
	transfer(&s, 3, sz_small);
	sim_free(&s);
}

/* The sender, paused mid-message after the receiver dropped the start,
 * resumes @snd (of @buf, the pool full again): it must be told
 * (-ECONNRESET), the receiver must get nothing, and the sender's next
 * message must go through on a new stream. Frees @s. */
static void resume_told(struct sim *s, struct dp_send *snd, const uint8_t *buf)
{
	struct node *a = &s->n[0], *bn = &s->n[1];
	int rc;

	a_alloc_budget = -1;
	rc = dp_send_step(a->p, snd, buf, s->now);
	for (int i = 0; i < 1000 && !rc; i++) {
		sim_step(s);
		rc = dp_send_step(a->p, snd, buf, s->now);
	}
	assert_int_equal(rc, -ECONNRESET);
	dp_send_end(a->p, snd);
	for (int i = 0; i < 100; i++)
		sim_step(s);
	assert_int_equal(bn->nmsgs, 0);
	transfer(s, 3, sz_small);
	sim_free(s);
}

/*
 * A sender paused mid-message (everything it sent acknowledged) for longer
 * than peer_timeout: the receiver drops the partial message, so the message
 * cannot be delivered and the sender must hear so (-ECONNRESET), never be
 * told it went. It used to get 1 while the rest was thrown away.
 */
static void t_paused_sender_told(void **state)
{
	static struct sim s;
	static uint8_t buf[3 * 1448];
	struct dp_proto_cfg c = cfg_default();
	struct node *a = &s.n[0], *bn = &s.n[1];
	struct dp_send snd;
	struct dp_stats st;

	sim_init(&s, &c);
	zt_fill(buf, sizeof(buf), 7);
	assert_int_equal(dp_send_begin(a->p, bn->addr, sizeof(buf), &snd, s.now), 0);
	/* The pool runs dry after the first fragment (and its copy sent
	 * again with the receiver's cookie). */
	a_alloc_budget = 2;
	assert_int_equal(dp_send_step(a->p, &snd, buf, s.now), 0);
	for (int i = 0; i < 10; i++)
		sim_step(&s); /* first fragment delivered and acknowledged */
	dp_get_stats(a->p, &st);
	assert_int_equal(st.unacked_frames, 0);
	s.now += c.peer_timeout_ns + 1000000; /* the pause */
	dp_timers(a->p, s.now);
	dp_timers(bn->p, s.now);
	dp_get_stats(bn->p, &st);
	assert_int_equal(st.partials_dropped, 1);
	resume_told(&s, &snd, buf);
}

/*
 * The same pause, told although the receiver's ACK of the first fragment
 * reached the sender only after the pause (held up on the way): the pause
 * counts from the sender's newest fragment, as the receiver's clock does,
 * not from that ACK. Counted from the last frame heard, the sender went
 * on, was told the message went, and the receiver refused the rest
 * (found by fuzz-dp_proto: fuzz/regressions/dp_proto/late-ack-paused-sender).
 */
static void t_paused_sender_told_late_ack(void **state)
{
	static struct sim s;
	static uint8_t buf[3 * 1448];
	struct dp_proto_cfg c = cfg_default();
	struct node *a = &s.n[0], *bn = &s.n[1];
	struct frame *late[8];
	size_t nlate = 0;
	struct dp_send snd;
	struct dp_stats st;

	sim_init(&s, &c);
	zt_fill(buf, sizeof(buf), 7);
	assert_int_equal(dp_send_begin(a->p, bn->addr, sizeof(buf), &snd, s.now), 0);
	a_alloc_budget = 2; /* the first fragment, and its copy with the cookie */
	assert_int_equal(dp_send_step(a->p, &snd, buf, s.now), 0);
	/* Carry everything but the receiver's ACKs, which are held back. */
	for (int i = 0; i < 10; i++) {
		for (size_t k = 0; k < s.nq;) {
			if (s.q[k].f->b[3] == DP_T_ACK && s.q[k].to.ip == a->addr.ip &&
			    nlate < 8) {
				late[nlate++] = s.q[k].f;
				memmove(s.q + k, s.q + k + 1, (--s.nq - k) * sizeof(s.q[0]));
			} else {
				k++;
			}
		}
		sim_step(&s);
	}
	assert_true(nlate > 0);
	dp_get_stats(bn->p, &st);
	assert_true(st.reasm_bytes > 0); /* the receiver holds the start */
	s.now += c.peer_timeout_ns + 1000000; /* the pause */
	dp_timers(bn->p, s.now);
	dp_get_stats(bn->p, &st);
	assert_int_equal(st.partials_dropped, 1);
	/* The ACKs arrive now (into the sender's pool, full again), and the
	 * sender resumes at once. */
	a_alloc_budget = -1;
	for (size_t k = 0; k < nlate; k++) {
		feed_a(&s, late[k]->b, late[k]->len);
		free(late[k]);
	}
	dp_get_stats(a->p, &st);
	assert_int_equal(st.unacked_frames, 0);
	resume_told(&s, &snd, buf);
}

/* The receiver side of the same rule: after dropping a partial message it
 * answers the stream's later fragments with RST, never an ACK, and a
 * sender given RST for its stream fails the message with -ECONNRESET. */
static void t_dropped_partial_rst(void **state)
{
	static struct sim s;
	static uint8_t buf[3 * 1448];
	struct dp_proto_cfg c = cfg_default();
	struct dp_addr peer = { 0x0a000001u, 5000 };
	const uint32_t x = 0x11110001u;
	struct node *a = &s.n[0], *bn = &s.n[1];
	struct dp_send snd;
	uint8_t b[4096];
	uint32_t conn;
	size_t n;

	sim_init(&s, &c);
	n = hdr(b, DP_T_DATA, DP_F_FIRST, x, 0, 3000, 0, 1448);
	feed(&s, peer, b, n);
	dp_flush_acks(bn->p);
	assert_int_equal(queued(&s, peer, DP_T_ACK, x, 1), 1);
	drop_queue(&s);
	s.now += c.peer_timeout_ns + 1000000;
	dp_timers(bn->p, s.now); /* the partial message is dropped */
	n = hdr(b, DP_T_DATA, 0, x, 1, 3000, 1448, 1448);
	feed(&s, peer, b, n);
	n = hdr(b, DP_T_DATA, DP_F_LAST, x, 2, 3000, 2896, 104);
	feed(&s, peer, b, n);
	dp_flush_acks(bn->p);
	assert_int_equal(queued(&s, peer, DP_T_ACK, x, 0), 0);
	assert_int_equal(queued(&s, peer, DP_T_RST, x, 0), 1);
	assert_int_equal(bn->nmsgs, 0);
	drop_queue(&s);

	/* A sender told RST for its stream. */
	assert_int_equal(dp_send_begin(a->p, bn->addr, sizeof(buf), &snd, s.now), 0);
	a_alloc_budget = 1;
	assert_int_equal(dp_send_step(a->p, &snd, buf, s.now), 0);
	a_alloc_budget = -1;
	assert_int_equal(s.nq, 1);
	conn = frame_conn(s.q[0].f);
	drop_queue(&s);
	n = hdr(b, DP_T_RST, 0, conn + 1, 0, 0, 0, 0); /* not its stream */
	feed_a(&s, b, n);
	/* Not given up: it waits for the receiver to adopt the stream. */
	assert_int_equal(dp_send_step(a->p, &snd, buf, s.now), 0);
	dp_send_end(a->p, &snd);
	drop_queue(&s);
	/* Its next message, then RST for it. */
	assert_int_equal(dp_send_begin(a->p, bn->addr, sizeof(buf), &snd, s.now), 0);
	a_alloc_budget = 1;
	assert_int_equal(dp_send_step(a->p, &snd, buf, s.now), 0);
	a_alloc_budget = -1;
	if (s.nq) /* else still the stream of the message abandoned */
		conn = frame_conn(s.q[0].f);
	drop_queue(&s);
	n = hdr(b, DP_T_RST, 0, conn, 0, 0, 0, 0);
	feed_a(&s, b, n);
	assert_int_equal(dp_send_step(a->p, &snd, buf, s.now), -ECONNRESET);
	dp_send_end(a->p, &snd);
	drop_queue(&s);
	sim_free(&s);
}

/* A message begun, then a silence long enough for the receiver to forget
 * the sender, before its first fragment: it goes out on a new stream (the
 * receiver adopts only a new stream at seq 0), not on the forgotten one to
 * be dropped while dp_send_step() says 1. */
static void t_silence_before_first_fragment(void **state)
{
	static struct sim s;
	static uint8_t buf[3000];
	struct dp_proto_cfg c = cfg_default();
	struct node *a = &s.n[0], *bn = &s.n[1];
	struct dp_send snd;
	struct dp_stats st;
	int rc;

	sim_init(&s, &c);
	transfer(&s, 2, sz_small);
	zt_fill(buf, sizeof(buf), 9);
	assert_int_equal(dp_send_begin(a->p, bn->addr, sizeof(buf), &snd, s.now), 0);
	s.now += 3 * c.peer_timeout_ns;
	dp_timers(a->p, s.now);
	dp_timers(bn->p, s.now);
	dp_get_stats(bn->p, &st);
	assert_int_equal(st.peers, 0); /* B forgot A */
	rc = 0;
	for (int i = 0; i < 100 && bn->nmsgs < 1; i++) {
		if (!rc)
			rc = dp_send_step(a->p, &snd, buf, s.now);
		sim_step(&s);
	}
	assert_int_equal(rc, 1);
	dp_send_end(a->p, &snd);
	assert_int_equal(bn->nmsgs, 1);
	assert_int_equal(bn->msgs[0].len, sizeof(buf));
	assert_memory_equal(bn->msgs[0].data, buf, sizeof(buf));
	free(bn->msgs[0].data);
	bn->nmsgs = 0;
	drop_queue(&s);
	sim_free(&s);
}

/* A stream the receiver never saw (its frames held back by the network,
 * its sender gave it up), from before the sender forgot and re-met the
 * receiver, is older than the sender's current one: not adopted, so its
 * message does not arrive after a later one. */
static void t_unseen_old_stream_refused(void **state)
{
	static struct sim s;
	static uint8_t buf[100];
	struct dp_proto_cfg c = cfg_default();
	struct node *a = &s.n[0], *bn = &s.n[1];
	struct frame *late;
	struct dp_send snd;
	struct dp_stats st;

	sim_init(&s, &c);
	transfer(&s, 1, sz_small); /* B knows A's first stream */
	zt_fill(buf, sizeof(buf), 1);
	s.now += 3 * c.peer_timeout_ns; /* both forget each other */
	dp_timers(a->p, s.now);
	dp_timers(bn->p, s.now);
	assert_int_equal(dp_send_begin(a->p, bn->addr, sizeof(buf), &snd, s.now), 0);
	assert_int_equal(dp_send_step(a->p, &snd, buf, s.now), 1);
	dp_send_end(a->p, &snd);
	assert_int_equal(s.nq, 1);
	late = s.q[0].f; /* held back */
	s.nq = 0;
	s.now += c.peer_timeout_ns + 1000000;
	dp_timers(a->p, s.now); /* A gives it up */
	dp_timers(bn->p, s.now);
	s.now += 3 * c.peer_timeout_ns; /* and forgets B again */
	dp_timers(a->p, s.now);
	dp_timers(bn->p, s.now);
	dp_get_stats(a->p, &st);
	assert_int_equal(st.peers, 0);
	transfer(&s, 2, sz_small); /* a new stream, delivered */
	bn->frames_live++;
	dp_input(bn->p, a->addr, late, late->b, late->len, s.now);
	assert_int_equal(bn->nmsgs, 0); /* the old message does not follow */
	drop_queue(&s);
	sim_free(&s);
}

/* ------------------------------------------------ spoofed and hostile peers */

/* A frame from @from into B, through B's pool like a received frame: as
 * a spoofer sends it (no cookie), or a routable sender (@cookie). */
static void feed_pool(struct sim *s, struct dp_addr from, const uint8_t *b, size_t len,
		      bool cookie)
{
	struct node *n = &s->n[1];
	struct frame *f;

	if (!pool_take(n))
		return;
	f = malloc(sizeof(*f) + len);
	f->len = len;
	memcpy(f->b, b, len);
	if (cookie)
		stamp(s, from, f->b, len);
	dp_input(n->p, from, f, f->b, len, s->now);
}

static void feed_spoof(struct sim *s, struct dp_addr from, const uint8_t *b, size_t len)
{
	feed_pool(s, from, b, len, false);
}

/* Send one @len-byte message from node @from to the other node and carry
 * frames until it arrives or @steps pass; whether it arrived. */
static bool one_message(struct sim *s, int from, size_t len, unsigned steps)
{
	static uint8_t buf[4096];
	struct node *a = &s->n[from], *b = &s->n[!from];
	size_t had = b->nmsgs;
	struct dp_send snd;
	int rc = 0;

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * 7 + 77);
	assert_int_equal(dp_send_begin(a->p, b->addr, len, &snd, s->now), 0);
	for (unsigned i = 0; i < steps && b->nmsgs == had; i++) {
		if (rc == 0)
			rc = dp_send_step(a->p, &snd, buf, s->now);
		sim_step(s);
	}
	dp_send_end(a->p, &snd);
	if (b->nmsgs == had)
		return false;
	assert_int_equal(b->msgs[had].len, len);
	assert_memory_equal(b->msgs[had].data, buf, len);
	free(b->msgs[had].data);
	b->nmsgs = had;
	return true;
}

/* Spoofed sources each open a message and send frames far ahead of it.
 * Early frames used to be held for any source, 255 each, so 36 of them
 * emptied an 8,191-buffer pool and a legitimate frame was lost: now no
 * source holds a buffer before it answers a challenge, free buffers stay
 * above half the pool, and a legitimate message goes through at once. */
static void t_spoofed_sources_keep_mbufs(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_stats st;
	uint8_t b[2048];

	c.window = DP_WIN_MAX;
	c.max_peers = 256;
	c.reasm_cap = 256u << 20;
	sim_init(&s, &c);
	s.n[1].pool = s.n[1].pool_low = 8191;
	for (uint32_t i = 0; i < 40; i++) {
		struct dp_addr src = { 0x0b000000u + i, (uint16_t)(1000 + i) };
		uint32_t conn = 0x70000001u + (i << 16);
		size_t n = hdr(b, DP_T_DATA, DP_F_FIRST, conn, 0, 60u << 20, 0, 1400);

		feed_spoof(&s, src, b, n);
		for (uint32_t k = 2; k < DP_WIN_MAX; k++) {
			n = hdr(b, DP_T_DATA, 0, conn, k, 60u << 20, 1400 * k, 1400);
			feed_spoof(&s, src, b, n);
		}
	}
	dp_flush_acks(s.n[1].p);
	drop_queue(&s);
	dp_get_stats(s.n[1].p, &st);
	print_message(
		"spoofed: free frames at least %ld of %ld; held early %u, peers %u\n",
		s.n[1].pool_low, s.n[1].pool, st.early_frames, st.peers);
	assert_true(s.n[1].pool_low >= s.n[1].pool / 2);
	assert_true(one_message(&s, 0, 100, 200)); /* within 10 ms */
	assert_int_equal(s.n[1].nmsgs, 0);
	drop_queue(&s);
	sim_free(&s);
}

/* The same flood from sources that do answer challenges (hostile but
 * routable): what they may hold early is capped per peer (hold_peer_max)
 * and in all (hold_max, a quarter of the pool, as the transport sets it),
 * so free buffers stay above three quarters of the pool less a burst. */
static void t_hostile_peers_hold_capped(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_stats st;
	uint8_t b[2048];

	c.window = DP_WIN_MAX;
	c.max_peers = 256;
	c.reasm_cap = 256u << 20;
	c.hold_max = 8191 / 4;
	c.hold_peer_max = 255;
	sim_init(&s, &c);
	s.n[1].pool = s.n[1].pool_low = 8191;
	for (uint32_t i = 0; i < 40; i++) {
		struct dp_addr src = { 0x0b000000u + i, (uint16_t)(1000 + i) };
		uint32_t conn = 0x70000001u + (i << 16);
		size_t n = hdr(b, DP_T_DATA, DP_F_FIRST, conn, 0, 60u << 20, 0, 1400);

		feed_pool(&s, src, b, n, true);
		for (uint32_t k = 2; k < DP_WIN_MAX; k++) {
			n = hdr(b, DP_T_DATA, 0, conn, k, 60u << 20, 1400 * k, 1400);
			feed_pool(&s, src, b, n, true);
		}
		dp_get_stats(s.n[1].p, &st);
		assert_true(st.early_frames <= c.hold_max);
	}
	dp_flush_acks(s.n[1].p);
	drop_queue(&s);
	dp_get_stats(s.n[1].p, &st);
	print_message(
		"routable: free frames at least %ld of %ld; held early %u, refused %llu\n",
		s.n[1].pool_low, s.n[1].pool, st.early_frames,
		(unsigned long long)st.hold_refused);
	assert_true(s.n[1].pool_low >= s.n[1].pool - (long)c.hold_max - 1);
	assert_true(st.hold_refused > 0);
	assert_true(one_message(&s, 0, 3000, 200)); /* three frames, within 10 ms */
	/* Per peer: one source may hold hold_peer_max. */
	{
		struct dp_addr src = { 0x0d000001u, 999 };
		size_t n = hdr(b, DP_T_DATA, DP_F_FIRST, 0x0d0d0001u, 0, 60u << 20, 0,
			       1400);

		s.now += 3 * c.peer_timeout_ns; /* the flood is forgotten */
		dp_timers(s.n[1].p, s.now);
		dp_timers(s.n[0].p, s.now);
		drop_queue(&s);
		dp_get_stats(s.n[1].p, &st);
		assert_int_equal(st.early_frames, 0);
		c.hold_peer_max = 16;
		dp_proto_free(s.n[1].p);
		assert_int_equal(s.n[1].frames_live, 0);
		{
			struct dp_proto_ops ops = { .user = &s.n[1],
						    .frame_alloc = f_alloc,
						    .frame_free = f_free,
						    .frame_xmit = f_xmit,
						    .deliver = f_deliver };
			assert_int_equal(dp_proto_new(&c, &ops, &s.n[1].p), 0);
		}
		feed_pool(&s, src, b, n, true);
		for (uint32_t k = 2; k < DP_WIN_MAX; k++) {
			n = hdr(b, DP_T_DATA, 0, 0x0d0d0001u, k, 60u << 20, 1400 * k,
				1400);
			feed_pool(&s, src, b, n, true);
		}
		dp_get_stats(s.n[1].p, &st);
		assert_int_equal(st.early_frames, 16);
	}
	dp_flush_acks(s.n[1].p);
	drop_queue(&s);
	sim_free(&s);
}

/* A spoofed first frame with a new stream id from A's address used to be
 * delivered as A's message, and A's real stream refused from then on. */
static void t_spoofed_stream_not_adopted(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_stats st;
	uint8_t b[256];
	size_t n;

	sim_init(&s, &c);
	transfer(&s, 3, sz_small);
	for (uint32_t e = 1; e < 64; e++) { /* any epoch, any counter */
		n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, e << 16 | 9, 0, 5, 0, 5);
		memcpy(b + DP_HDR_LEN, "evil!", 5);
		feed_spoof(&s, s.n[0].addr, b, n);
	}
	assert_int_equal(s.n[1].nmsgs, 0);
	transfer(&s, 20, sz_mixed); /* A's stream carries on */
	dp_get_stats(s.n[0].p, &st);
	assert_int_equal(st.peers_reset, 0);
	dp_get_stats(s.n[1].p, &st);
	assert_int_equal(st.peers_reset, 0);
	sim_free(&s);
}

/* 256 spoofed sources used to fill the peer table: the receiver's own
 * sends to a real peer got -EAGAIN. */
static void t_spoofed_peers_leave_room(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_stats st;
	uint8_t b[256];

	c.max_peers = 256;
	sim_init(&s, &c);
	for (uint32_t i = 0; i < 256; i++) {
		struct dp_addr src = { 0x0c000000u + i, (uint16_t)(2000 + i) };
		size_t n = hdr(b, DP_T_DATA, DP_F_FIRST | DP_F_LAST, 0x50000001u + i, 0,
			       4, 0, 4);

		feed_spoof(&s, src, b, n);
	}
	dp_flush_acks(s.n[1].p);
	drop_queue(&s);
	assert_int_equal(s.n[1].nmsgs, 0);
	dp_get_stats(s.n[1].p, &st);
	assert_true(st.peers < c.max_peers);
	/* Every spoofed frame refused and challenged, none kept. */
	assert_int_equal(st.refused, 256);
	assert_int_equal(st.challenges, 256);
	assert_int_equal(st.peers, 0);
	assert_true(one_message(&s, 1, 300, 200)); /* B -> A */
	assert_true(one_message(&s, 0, 300, 200)); /* A -> B */
	drop_queue(&s);
	sim_free(&s);
}

/* What zap_stats() and zap_peer_list() report of the dpdk transport: per
 * peer message counts both ways, the round-trip estimate, who sent first,
 * and idle peers forgotten (counted) after twice peer_timeout. */
static void t_counters_and_peer_list(void **state)
{
	static struct sim s;
	struct dp_proto_cfg c = cfg_default();
	struct dp_peer_row r[2];
	struct dp_stats st;
	uint64_t bytes = 0;

	sim_init(&s, &c);
	for (unsigned i = 0; i < 200; i++)
		bytes += sz_mixed(i);
	transfer(&s, 200, sz_mixed);
	/* A sent, B received; each has one peer. */
	assert_int_equal(dp_peer_list(s.n[0].p, r, 2, s.now), 1);
	assert_int_equal(r[0].addr.ip, s.n[1].addr.ip);
	assert_int_equal(r[0].addr.port, s.n[1].addr.port);
	assert_true(r[0].dialed);
	assert_int_equal(r[0].msgs_sent, 200);
	assert_int_equal(r[0].bytes_sent, bytes);
	assert_int_equal(r[0].msgs_received, 0);
	assert_true(r[0].srtt_ns > 0 && r[0].rttvar_ns >= 0);
	assert_true(r[0].id > 0);
	assert_int_equal(dp_peer_list(s.n[1].p, r, 2, s.now), 1);
	assert_false(r[0].dialed);
	assert_int_equal(r[0].msgs_received, 200);
	assert_int_equal(r[0].bytes_received, bytes);
	assert_int_equal(r[0].msgs_sent, 0);
	assert_int_equal(r[0].srtt_ns, -1); /* B sent no data: no sample */
	/* Counting only, with no room. */
	assert_int_equal(dp_peer_list(s.n[1].p, r, 0, s.now), 1);
	/* Idle past twice peer_timeout: both forget the other, once. */
	s.now += 2 * c.peer_timeout_ns + 1000000;
	assert_int_equal(dp_peer_list(s.n[1].p, r, 2, s.now), 1);
	assert_true(r[0].idle_ns > 2 * c.peer_timeout_ns);
	for (int i = 0; i < 3; i++)
		sim_step(&s);
	for (int i = 0; i < 2; i++) {
		dp_get_stats(s.n[i].p, &st);
		assert_int_equal(st.forgotten, 1);
		assert_int_equal(st.peers, 0);
		/* B refused one frame: A's first, without a cookie yet,
		 * answered with the challenge (as for a spoofed source). */
		assert_int_equal(st.refused, (uint64_t)i);
		assert_int_equal(st.challenges, (uint64_t)i);
		assert_int_equal(dp_peer_list(s.n[i].p, r, 2, s.now), 0);
	}
	/* A returning peer is a new row (a new id), sent first by B now. */
	s.n[0].nmsgs = 0;
	assert_true(one_message(&s, 1, 100, 200));
	assert_int_equal(dp_peer_list(s.n[0].p, r, 2, s.now), 1);
	assert_false(r[0].dialed);
	assert_int_equal(r[0].msgs_received, 1);
	assert_true(r[0].id > 1);
	drop_queue(&s);
	for (size_t k = 0; k < s.n[0].nmsgs; k++)
		free(s.n[0].msgs[k].data);
	sim_free(&s);
}

/* ------------------------------------------------------------- framing */

static const struct dp_local loc = { { 2, 0, 0, 0, 0, 1 }, 0x0a000001u, 5000 };
static const uint8_t peer_mac[6] = { 2, 0, 0, 0, 0, 2 };

static size_t good_frame(uint8_t *f, size_t payload)
{
	size_t n;

	memset(f + DP_L2L4_HLEN, 0xab, payload);
	n = dp_wire_udp(f, peer_mac, loc.mac, 0x0a000002u, loc.ip, 6000, loc.port, payload);
	dp_wire_csum(f);
	return n;
}

static enum dp_frame_kind parse(const uint8_t *f, size_t n, struct dp_frame_info *fi)
{
	return dp_wire_parse(f, n, &loc, 0, fi);
}

static enum dp_frame_kind dp_wire_dparse_trusting(const uint8_t *f, size_t n,
						 struct dp_frame_info *fi)
{
	return dp_wire_parse(f, n, &loc, DP_TRUST_IP_CSUM | DP_TRUST_UDP_CSUM, fi);
}

static void t_wire(void **state)
{
	uint8_t f[2048], g[2048];
	struct dp_frame_info fi;
	size_t n = good_frame(f, 100);

	assert_int_equal(parse(f, n, &fi), DP_FRAME_UDP);
	assert_int_equal(fi.payload_len, 100);
	assert_int_equal(fi.src_port, 6000);
	assert_int_equal(fi.src_ip, 0x0a000002u);
	/* Ethernet padding past the IPv4 total length is fine. */
	assert_int_equal(parse(f, n + 20, &fi), DP_FRAME_UDP);
	for (size_t len = 0; len < n; len++) /* every truncation */
		assert_int_equal(parse(f, len, &fi), DP_FRAME_DROP);
#define MUTATE(off, val, reason)                                      \
	do {                                                       \
		memcpy(g, f, n);                                   \
		g[off] = (uint8_t)(val);                           \
		assert_int_equal(parse(g, n, &fi), DP_FRAME_DROP); \
		assert_non_null(strstr(fi.why, reason));           \
	} while (0)
	MUTATE(0, 0x04, "MAC");                 /* another host's frame */
	MUTATE(12, 0x86, "not IPv4");           /* ethertype */
	MUTATE(14, 0x46, "IPv4");               /* IHL 24: options that are not */
	MUTATE(14, 0x44, "header length");      /* IHL 16 */
	MUTATE(14, 0x65, "version");            /* IPv6 in an IPv4 frame */
	MUTATE(16, 0xff, "total length");       /* longer than the frame */
	MUTATE(17, 10, "total length");         /* shorter than its headers */
	MUTATE(20, 0x20, "fragment");           /* MF */
	MUTATE(23, 6, "not UDP");               /* TCP */
	MUTATE(24, f[24] ^ 1, "IPv4 checksum"); /* header checksum */
	MUTATE(22, f[22] ^ 1, "IPv4 checksum"); /* TTL changed */
	MUTATE(33, f[33] ^ 1, "IPv4 checksum"); /* destination changed */
	MUTATE(38, 1, "UDP length");            /* UDP length 256 too long */
	MUTATE(39, f[39] + 1, "UDP length");    /* UDP length off by one */
	MUTATE(40, f[40] ^ 1, "UDP checksum");  /* UDP checksum */
	MUTATE(60, 0xcd, "UDP checksum");       /* payload corrupted */
	memcpy(g, f, n);
	g[40] = g[41] = 0;
	assert_int_equal(parse(g, n, &fi), DP_FRAME_DROP);
	assert_non_null(strstr(fi.why, "absent"));
	/* Trusting the NIC skips only the checks it made. */
	memcpy(g, f, n);
	g[60] = 0xcd;
	assert_int_equal(dp_wire_dparse_trusting(g, n, &fi), DP_FRAME_UDP);
#undef MUTATE
}

static void t_wire_arp_and_addresses(void **state)
{
	uint8_t f[64];
	struct dp_frame_info fi;
	uint32_t ip;
	uint16_t port;
	uint8_t mac[6];
	char s[32];

	assert_int_equal(dp_wire_arp(f, DP_ARP_REQUEST, peer_mac, 0x0a000002u, NULL, loc.ip),
			 DP_ARP_FRAME_LEN);
	assert_int_equal(parse(f, DP_ARP_FRAME_LEN, &fi), DP_FRAME_ARP);
	assert_int_equal(fi.arp_op, DP_ARP_REQUEST);
	assert_int_equal(fi.arp_spa, 0x0a000002u);
	assert_int_equal(fi.arp_tpa, loc.ip);
	assert_memory_equal(fi.arp_sha, peer_mac, 6);
	assert_int_equal(parse(f, 20, &fi), DP_FRAME_DROP); /* truncated */
	f[21] = 9;                                          /* unknown op */
	assert_int_equal(parse(f, DP_ARP_FRAME_LEN, &fi), DP_FRAME_DROP);
	assert_int_equal(dp_parse_ip_port("10.1.2.3:80", &ip, &port), 0);
	assert_int_equal(ip, 0x0a010203u);
	assert_int_equal(port, 80);
	dp_format_peer(s, sizeof(s), ip, port);
	assert_string_equal(s, "10.1.2.3:80");
	assert_int_equal(dp_parse_ip_port("10.1.2.3", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("10.1.2.300:80", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("10.1.2.3:65536", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("host:80", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("10.1.2.3:8x", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_mac("02:00:00:aa:bb:cc", mac), 0);
	assert_int_equal(mac[3], 0xaa);
	assert_int_equal(dp_parse_mac("02:00:00:aa:bb", mac), -EINVAL);
	/* Strict spellings only: sscanf would have taken these. */
	assert_int_equal(dp_parse_ip_port("1. 2.3.4:80", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("1.+2.3.4:80", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("1.-0.3.4:80", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("1.2.3.4.5:80", &ip, &port), -EINVAL);
	/* util/addr's grammar, which every transport shares: one spelling of
	 * each address and port, IPv4 only on this wire. */
	assert_int_equal(dp_parse_ip_port("010.1.2.3:80", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("10.1.2.3:080", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("[::1]:80", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip_port("unix:/tmp/x", &ip, &port), -EINVAL);
	assert_int_equal(dp_parse_ip("10.0.0.1", &ip), 0);
	assert_int_equal(ip, 0x0a000001u);
	assert_int_equal(dp_parse_ip("10.0.0.1:80", &ip), -EINVAL);
	assert_int_equal(dp_parse_ip("10.0.0", &ip), -EINVAL);
	assert_int_equal(dp_parse_mac(" a:b:c:d:e:f", mac), -EINVAL);
	assert_int_equal(dp_parse_mac("aaa:b:c:d:e:f", mac), -EINVAL);
	assert_int_equal(dp_parse_mac("a:b:c:d:e:f", mac), 0);
	assert_int_equal(mac[5], 0x0f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_wire),
		cmocka_unit_test(t_wire_arp_and_addresses),
		cmocka_unit_test(t_clean_link),
		cmocka_unit_test(t_loss_dup_reorder),
		cmocka_unit_test(t_heavy_loss),
		cmocka_unit_test(t_sender_gives_up),
		cmocka_unit_test(t_hostile_headers),
		cmocka_unit_test(t_fragments_never_complete),
		cmocka_unit_test(t_restart),
		cmocka_unit_test(t_stale_stream_not_resurrected),
		cmocka_unit_test(t_stale_stream_real_sender),
		cmocka_unit_test(t_paused_sender_told),
		cmocka_unit_test(t_paused_sender_told_late_ack),
		cmocka_unit_test(t_dropped_partial_rst),
		cmocka_unit_test(t_silence_before_first_fragment),
		cmocka_unit_test(t_unseen_old_stream_refused),
		cmocka_unit_test(t_spoofed_sources_keep_mbufs),
		cmocka_unit_test(t_spoofed_stream_not_adopted),
		cmocka_unit_test(t_hostile_peers_hold_capped),
		cmocka_unit_test(t_spoofed_peers_leave_room),
		cmocka_unit_test(t_counters_and_peer_list),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
