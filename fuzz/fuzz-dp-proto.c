/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport's reliability protocol (plugins/dpdk/dp_proto*.c):
 * fragments, reassembly, acknowledgements, retransmission, stream restarts.
 *
 * Two instances, A sending messages to B, over a link the input drives
 * frame by frame (carry, drop, duplicate, reorder, each direction), on a
 * clock the input advances, while an attacker injects raw and
 * well-formed-looking DATA, ACK and CHALLENGE frames at both: from its own
 * address, either unproven or routable (it echoes B's cookie, computed
 * with dp_cookie()), and spoofing A's address (new streams, no cookie:
 * the attacker does not see B's challenges to A). Checked:
 *  - B delivers A's messages in order, each at most once and intact, and
 *    skips one only if A gave the stream up (peer timeout) after it began
 *    (the link never corrupts, it only loses, duplicates and reorders;
 *    empty messages all look alike and are only checked to have been
 *    sent); nothing spoofed as A is ever delivered, and nothing of the
 *    attacker's own address until it answered a challenge (the return
 *    routability exchange, dp_proto.h);
 *  - memory a peer can make B hold stays bounded (peers, early frames
 *    within hold_max, reassembly bytes, per the configuration) after
 *    every step;
 *  - every frame the protocol allocates or is given is freed exactly once
 *    (counted; ASan catches a double free) by the end;
 *  - with a clean link at the end and no stream given up, every message A
 *    finished sending arrives.
 */
#include <errno.h>
#include <stdbool.h>

#include "dp_proto.h"
#include "fuzz.h"

#define QMAX 512
#define MAX_MSG 2048

struct frame {
	size_t len;
	uint8_t b[];
};

struct node {
	struct dp_proto *p;
	struct dp_addr addr;
	long live; /* frames allocated or received, not yet freed */
};

static struct node A, B;
static struct frame *q[2][QMAX]; /* 0: toward B, 1: toward A */
static size_t nq[2];
static uint64_t now;
static const struct dp_addr evil = {0x0b0b0b0bu, 6666};
static bool evil_routable; /* the attacker echoed a cookie */

/* A's messages: lengths, A's stream resets when each began, and how far
 * B's deliveries got. A message may be missing only if A gave the stream
 * up (a reset) after it began: the protocol then drops what was unsent or
 * unacknowledged, and says so to a sender still sending. */
static size_t sent_len[4096];
static uint64_t sent_resets[4096];
static size_t nsent, ndone, ndelivered;

static uint64_t a_resets(void)
{
	struct dp_stats st;

	dp_get_stats(A.p, &st);
	return st.peers_reset;
}

/* Message @idx's bytes: its index first, so that no two messages of two
 * bytes or more look alike. */
static void fill(uint8_t *b, size_t len, size_t idx)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)(idx * 131 + i * 7 + (i >> 8));
	if (len >= 2) {
		b[0] = (uint8_t)(idx >> 8);
		b[1] = (uint8_t)idx;
	}
}

static void *f_alloc(void *user, size_t len, uint8_t **buf)
{
	struct node *n = user;
	struct frame *f = malloc(sizeof(*f) + len);

	if (!f)
		abort();
	f->len = len;
	*buf = f->b;
	n->live++;
	return f;
}

static void f_free(void *user, void *frame)
{
	struct node *n = user;

	FUZZ_CHECK(frame);
	n->live--;
	free(frame);
}

static void f_xmit(void *user, struct dp_addr to, void *frame, size_t len)
{
	struct node *n = user;
	struct frame *f = frame, *c;
	int dir;

	FUZZ_CHECK(len == f->len || len <= f->len);
	if (to.ip == B.addr.ip && to.port == B.addr.port && n == &A)
		dir = 0;
	else if (to.ip == A.addr.ip && to.port == A.addr.port && n == &B)
		dir = 1;
	else
		return; /* to the attacker: gone */
	if (nq[dir] == QMAX)
		return; /* a full link loses */
	c = malloc(sizeof(*c) + len);
	if (!c)
		abort();
	c->len = len;
	memcpy(c->b, f->b, len);
	q[dir][nq[dir]++] = c;
}

static void f_deliver(void *user, struct dp_addr from, void *frame, void *heap,
		      const void *data, size_t len)
{
	struct node *n = user;

	FUZZ_CHECK(n == &B || n == &A);
	FUZZ_CHECK(!!frame != !!heap);
	FUZZ_CHECK(len <= MAX_MSG);
	FUZZ_CHECK(evil_routable || from.ip != evil.ip || from.port != evil.port);
	if (n == &B && from.ip == A.addr.ip && from.port == A.addr.port) {
		/* Never the attacker's frames spoofed as A's. */
		FUZZ_CHECK(len < 2 || ((const uint8_t *)data)[0] != 0xee ||
			   ((const uint8_t *)data)[1] != 0xee);
		uint8_t want[MAX_MSG];
		uint64_t resets = a_resets();
		size_t k = ndelivered;

		/* The next message, or a later one if those between were lost
		 * to a reset; never an earlier one (duplicate, reordered).
		 * Empty messages all look alike: one is only checked to have
		 * been sent, and they may be skipped. */
		if (!len) {
			for (; k < nsent && sent_len[k]; k++)
				;
			FUZZ_CHECK(k < nsent);
		} else {
			for (; k < nsent; k++) {
				fill(want, sent_len[k], k);
				if (len == sent_len[k] && !memcmp(data, want, len))
					break;
				FUZZ_CHECK(!sent_len[k] || resets > sent_resets[k]);
			}
			FUZZ_CHECK(k < nsent);
			ndelivered = k + 1;
		}
	} else {
		/* The attacker's: read every byte (ASan checks the bounds). */
		volatile uint8_t x = 0;
		for (size_t i = 0; i < len; i++)
			x ^= ((const uint8_t *)data)[i];
		(void)x;
	}
	if (frame)
		f_free(user, frame);
	free(heap);
}

static const struct dp_proto_cfg cfg = {
	.payload_max = 64,
	.window = 8,
	.max_msg = MAX_MSG,
	.rto_min_ns = 100000,
	.rto_max_ns = 2000000,
	.peer_timeout_ns = 50000000,
	.max_peers = 4,
	.reasm_cap = 4096,
	.hold_max = 10,
	.hold_peer_max = 6,
	.seed = 7,
	.secret = "fuzz-dp-proto-k",
};

static void carry(int dir, bool keep)
{
	struct node *dst = dir ? &A : &B, *src = dir ? &B : &A;
	uint8_t *b;

	if (!nq[dir])
		return;
	struct frame *f = q[dir][0];
	void *in = f_alloc(dst, f->len, &b);
	memcpy(b, f->b, f->len);
	dp_input(dst->p, src->addr, in, b, f->len, now);
	if (!keep) {
		free(f);
		memmove(q[dir], q[dir] + 1, --nq[dir] * sizeof(q[dir][0]));
	}
}

static void drop_head(int dir)
{
	if (!nq[dir])
		return;
	free(q[dir][0]);
	memmove(q[dir], q[dir] + 1, --nq[dir] * sizeof(q[dir][0]));
}

static void rotate(int dir)
{
	if (nq[dir] < 2)
		return;
	struct frame *f = q[dir][0];
	memmove(q[dir], q[dir] + 1, (nq[dir] - 1) * sizeof(q[dir][0]));
	q[dir][nq[dir] - 1] = f;
}

static void inject_from(struct node *dst, struct dp_addr from, const uint8_t *b,
			size_t len)
{
	uint8_t *buf;
	void *f = f_alloc(dst, len, &buf);

	memcpy(buf, b, len);
	dp_input(dst->p, from, f, buf, len, now);
}

static void inject(struct node *dst, const uint8_t *b, size_t len)
{
	inject_from(dst, evil, b, len);
}

static void wr32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void check_bounds(void)
{
	struct dp_stats st;

	dp_get_stats(B.p, &st);
	FUZZ_CHECK(st.peers <= cfg.max_peers);
	FUZZ_CHECK(st.early_frames <= st.peers * cfg.hold_peer_max);
	FUZZ_CHECK(st.early_frames <= cfg.hold_max);
	FUZZ_CHECK(st.reasm_bytes <= cfg.reasm_cap);
	dp_get_stats(A.p, &st);
	FUZZ_CHECK(st.peers <= cfg.max_peers);
	FUZZ_CHECK(st.unacked_frames <= st.peers * cfg.window);
	FUZZ_CHECK(st.reasm_bytes <= cfg.reasm_cap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dp_proto_ops oa = {&A, f_alloc, f_free, f_xmit, f_deliver};
	struct dp_proto_ops ob = {&B, f_alloc, f_free, f_xmit, f_deliver};
	static uint8_t msg[MAX_MSG];
	struct dp_send snd = {0};
	bool sending = false;
	size_t i = 0;

	memset(&A, 0, sizeof(A));
	memset(&B, 0, sizeof(B));
	A.addr = (struct dp_addr){0x0a000001u, 5000};
	B.addr = (struct dp_addr){0x0a000002u, 5001};
	nq[0] = nq[1] = 0;
	nsent = ndone = ndelivered = 0;
	evil_routable = false;
	now = 1000000000;
	FUZZ_CHECK(dp_proto_new(&cfg, &oa, &A.p) == 0);
	struct dp_proto_cfg cb = cfg;
	cb.seed = 8;
	FUZZ_CHECK(dp_proto_new(&cb, &ob, &B.p) == 0);

#define NEXT() (i < size ? data[i++] : 0)
	while (i < size) {
		uint8_t op = NEXT();
		switch (op % 13) {
		case 0: carry(0, false); break;
		case 1: drop_head(0); break;
		case 2: carry(0, true); break; /* duplicate */
		case 3: rotate(0); break;      /* reorder */
		case 4: carry(1, false); break;
		case 5: drop_head(1); break;
		case 6:
			now += (1 + (uint64_t)NEXT()) * 20000;
			dp_timers(A.p, now);
			dp_timers(B.p, now);
			break;
		case 7:
			dp_flush_acks(B.p);
			dp_flush_acks(A.p);
			break;
		case 8: /* A sends: begin a message, or push it on */
			if (!sending && nsent < sizeof(sent_len) / sizeof(sent_len[0])) {
				size_t hi = NEXT(), lo = NEXT();
				size_t len = (hi << 4 | lo) % (MAX_MSG + 1);
				int r = dp_send_begin(A.p, B.addr, len, &snd, now);
				FUZZ_CHECK(r == 0 || r == -EAGAIN);
				if (r)
					break;
				sent_len[nsent] = len;
				sent_resets[nsent] = a_resets();
				fill(msg, len, nsent);
				nsent++;
				sending = true;
			}
			if (sending) {
				int r = dp_send_step(A.p, &snd, msg, now);
				FUZZ_CHECK(r == 0 || r == 1 || r == -ECONNRESET);
				if (r) {
					dp_send_end(A.p, &snd);
					sending = false;
					if (r == 1)
						ndone = nsent;
				}
			}
			break;
		case 9: { /* raw bytes from the attacker, to B or A */
			uint8_t b[128];
			size_t len = NEXT() % sizeof(b);
			for (size_t k = 0; k < len; k++)
				b[k] = NEXT();
			inject(op & 0x10 ? &A : &B, b, len);
			break;
		}
		case 10: { /* a DATA frame from the attacker, fields chosen */
			uint8_t b[DP_HDR_LEN + 96];
			uint8_t fb = NEXT();
			uint8_t flags = fb & 7;
			uint8_t conn = NEXT() % 3;
			uint8_t seq = NEXT();
			uint32_t mlen = (uint32_t)NEXT() << 5;
			uint32_t off = (uint32_t)NEXT() << 4;
			size_t plen = NEXT() % 97;
			/* 0x10: spoofing A (no cookie); else 0x08: routable. */
			struct dp_addr from = fb & 0x10 ? A.addr : evil;
			memset(b, 0, sizeof(b));
			b[0] = 0x5a;
			b[1] = 0x50;
			b[2] = DP_VERSION;
			b[3] = DP_T_DATA;
			b[4] = flags;
			wr32(b + 8, conn);
			wr32(b + 12, seq);
			wr32(b + 16, mlen);
			wr32(b + 20, off);
			memset(b + DP_HDR_LEN, 0xee, 2);
			if (!(fb & 0x10) && (fb & 0x08)) {
				uint64_t c = dp_cookie(B.p, evil, conn, now);
				wr32(b + 24, (uint32_t)(c >> 32));
				wr32(b + 28, (uint32_t)c);
				evil_routable = true;
			}
			inject_from(&B, from, b, DP_HDR_LEN + plen);
			break;
		}
		case 11: { /* an ACK (0x10: a CHALLENGE as if from B) to A */
			uint8_t b[DP_ACK_LEN];
			bool ch = op & 0x10;
			memset(b, 0, sizeof(b));
			b[0] = 0x5a;
			b[1] = 0x50;
			b[2] = DP_VERSION;
			b[3] = ch ? DP_T_CHALLENGE : DP_T_ACK;
			for (size_t k = 8; k < sizeof(b); k++)
				b[k] = NEXT();
			if (ch)
				inject_from(&A, B.addr, b, DP_HDR_LEN);
			else
				inject(&A, b, sizeof(b));
			break;
		}
		case 12:
			dp_set_rx_blocked(B.p, NEXT() & 1);
			break;
		}
		check_bounds();
	}
#undef NEXT

	/* A clean link: carry everything, both ways, with timers, until
	 * quiet, within the peer timeout. */
	dp_set_rx_blocked(B.p, false);
	for (int round = 0; round < 2000 && (nq[0] || nq[1] || dp_busy(A.p) || sending);
	     round++) {
		if (sending) {
			int r = dp_send_step(A.p, &snd, msg, now);
			if (r) {
				dp_send_end(A.p, &snd);
				sending = false;
				if (r == 1)
					ndone = nsent;
			}
		}
		while (nq[0])
			carry(0, false);
		dp_flush_acks(B.p);
		while (nq[1])
			carry(1, false);
		now += 10000;
		dp_timers(A.p, now);
		dp_timers(B.p, now);
		check_bounds();
	}
	struct dp_stats sa, sb;
	dp_get_stats(A.p, &sa);
	dp_get_stats(B.p, &sb);
	if (!sa.peers_reset && !sending) {
		/* Every non-empty message A finished went through. */
		size_t last = ndone;
		while (last && !sent_len[last - 1])
			last--;
		FUZZ_CHECK(ndelivered >= last);
	}

	if (sending)
		dp_send_end(A.p, &snd);
	dp_proto_free(A.p);
	dp_proto_free(B.p);
	for (int d = 0; d < 2; d++)
		while (nq[d])
			drop_head(d);
	FUZZ_CHECK(A.live == 0 && B.live == 0);
	return 0;
}
