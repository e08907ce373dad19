/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect protocol engine without hardware: two engines joined by an
 * in-memory stand-in for an RC queue pair (this file only), plus the
 * bootstrap message codec against hostile input.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap-plugin.h>

#include "gd_instance.h"
#include "gd_proto.h"
#include "zap-test.h"

/* ---- the stand-in queue pair -------------------------------------------- */

#define FQ_CQ 8192

struct fq {
	struct fq *peer;
	pthread_mutex_t *mx;        /* shared by both ends */
	uint32_t slots, slot_bytes;
	uint8_t *slot_mem;
	uint64_t posted[GD_SLOTS_MAX]; /* receive wr_ids, FIFO */
	uint32_t posted_head, nposted;
	uint32_t stages, stage_bytes;
	uint8_t *stage_mem;
	struct gd_cqe cq[FQ_CQ];
	uint32_t cq_head, ncq;
	uint64_t credit_word;
	int fail_after;             /* sends until an injected error; -1 never */
	bool dead;
	bool alloc_eagain;
	const void *reg;            /* a "registered" user buffer */
	size_t reg_len;
	int in_place;               /* sends from registered memory */
	int allocs, frees;
};

static void push_cqe(struct fq *q, uint64_t wr_id, int status, const char *why,
		     uint32_t len, uint32_t imm)
{
	assert_true(q->ncq < FQ_CQ);
	q->cq[(q->cq_head + q->ncq++) % FQ_CQ] = (struct gd_cqe){
		.wr_id = wr_id, .status = status, .why = why, .byte_len = len, .imm = imm,
	};
}

/* Flush every posted receive, as a queue pair entering the error state. */
static void flush_locked(struct fq *q)
{
	q->dead = true;
	while (q->nposted) {
		push_cqe(q, q->posted[q->posted_head], -ECONNRESET, "flushed", 0, 0);
		q->posted_head = (q->posted_head + 1) % GD_SLOTS_MAX;
		q->nposted--;
	}
}

static int fq_post_send(void *qp, uint64_t wr_id, const void *src, size_t len,
			uint32_t imm, uintptr_t key)
{
	struct fq *q = qp, *p = q->peer;
	uint64_t rwr;

	pthread_mutex_lock(q->mx);
	if (key == 2)
		q->in_place++;
	if (q->dead) {
		push_cqe(q, wr_id, -ECONNRESET, "flushed", 0, 0);
	} else if (q->fail_after == 0) {
		/* The NIC gave up: this end errors, the other end's pair is
		 * torn down (its receives flush). */
		push_cqe(q, wr_id, -EIO, "injected completion error", 0, 0);
		flush_locked(q);
		flush_locked(p);
	} else if (!p->nposted || p->dead) {
		push_cqe(q, wr_id, -ECONNRESET, "receiver not ready (credits broken)", 0, 0);
		q->dead = true;
	} else {
		if (q->fail_after > 0)
			q->fail_after--;
		rwr = p->posted[p->posted_head];
		p->posted_head = (p->posted_head + 1) % GD_SLOTS_MAX;
		p->nposted--;
		assert_true(len <= p->slot_bytes);
		if (len)
			memcpy(p->slot_mem + (rwr & 0xffffffffu) * p->slot_bytes, src, len);
		push_cqe(p, rwr, 0, NULL, (uint32_t)len, imm);
		push_cqe(q, wr_id, 0, NULL, 0, 0);
	}
	pthread_mutex_unlock(q->mx);
	return 0;
}

static int fq_post_recv(void *qp, uint64_t wr_id, uint32_t slot)
{
	struct fq *q = qp;

	pthread_mutex_lock(q->mx);
	assert_true(q->nposted < q->slots);
	assert_int_equal(wr_id & 0xffffffffu, slot);
	q->posted[(q->posted_head + q->nposted++) % GD_SLOTS_MAX] = wr_id;
	pthread_mutex_unlock(q->mx);
	return 0;
}

static int fq_post_credit(void *qp, uint64_t wr_id, uint64_t consumed)
{
	struct fq *q = qp;

	pthread_mutex_lock(q->mx);
	if (q->dead) {
		push_cqe(q, wr_id, -ECONNRESET, "flushed", 0, 0);
	} else {
		__atomic_store_n(&q->peer->credit_word, consumed, __ATOMIC_RELEASE);
		push_cqe(q, wr_id, 0, NULL, 0, 0);
	}
	pthread_mutex_unlock(q->mx);
	return 0;
}

static int fq_poll(void *qp, struct gd_cqe *out, int max)
{
	struct fq *q = qp;
	int n = 0;

	pthread_mutex_lock(q->mx);
	while (n < max && q->ncq) {
		out[n++] = q->cq[q->cq_head];
		q->cq_head = (q->cq_head + 1) % FQ_CQ;
		q->ncq--;
	}
	pthread_mutex_unlock(q->mx);
	return n;
}

static uint64_t fq_peer_consumed(void *qp)
{
	return __atomic_load_n(&((struct fq *)qp)->credit_word, __ATOMIC_ACQUIRE);
}

static void fq_kill(void *qp)
{
	struct fq *q = qp;

	pthread_mutex_lock(q->mx);
	flush_locked(q);
	pthread_mutex_unlock(q->mx);
}

static void *fq_slot_addr(void *qp, uint32_t slot)
{
	struct fq *q = qp;

	return q->slot_mem + (size_t)slot * q->slot_bytes;
}

static void *fq_stage_addr(void *qp, uint32_t stage)
{
	struct fq *q = qp;

	assert_true(stage < q->stages);
	return q->stage_mem + (size_t)stage * q->stage_bytes;
}

static int fq_lookup(void *qp, const void *src, size_t len, uintptr_t *key)
{
	struct fq *q = qp;
	const uint8_t *s = src;

	if (s >= q->stage_mem && s + len <= q->stage_mem + (size_t)q->stages * q->stage_bytes) {
		*key = 1;
		return 0;
	}
	if (q->reg && s >= (const uint8_t *)q->reg &&
	    s + len <= (const uint8_t *)q->reg + q->reg_len) {
		*key = 2;
		return 0;
	}
	return -ENOENT;
}

static int fq_copy(void *qp, void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
	return 0;
}

static int fq_alloc_msg(void *qp, size_t len, struct gd_rxbuf *out)
{
	struct fq *q = qp;

	if (__atomic_load_n(&q->alloc_eagain, __ATOMIC_ACQUIRE))
		return -EAGAIN;
	out->data = malloc(len);
	out->handle = out->data;
	if (!out->data)
		return -ENOMEM;
	__atomic_add_fetch(&q->allocs, 1, __ATOMIC_RELAXED);
	return 0;
}

static void fq_free_msg(void *qp, struct gd_rxbuf *buf)
{
	struct fq *q = qp;

	free(buf->handle);
	__atomic_add_fetch(&q->frees, 1, __ATOMIC_RELAXED);
}

static const struct gd_qp_ops fq_ops = {
	.post_send = fq_post_send, .post_recv = fq_post_recv,
	.post_credit = fq_post_credit, .poll = fq_poll,
	.peer_consumed = fq_peer_consumed, .kill = fq_kill,
	.slot_addr = fq_slot_addr, .stage_addr = fq_stage_addr,
	.lookup = fq_lookup, .copy = fq_copy, .alloc_msg = fq_alloc_msg,
	.free_msg = fq_free_msg,
};

/* ---- the host and the receiving side ------------------------------------ */

static void t_log(enum zap_log_level level, const char *domain, const char *fmt, ...)
{
	va_list ap;

	if (!getenv("GD_TEST_VERBOSE"))
		return;
	va_start(ap, fmt);
	fprintf(stderr, "[%s] ", domain);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int t_ctx_err(const struct zap_ctx *ctx)
{
	return zap_ctx_err(ctx);
}

static const struct zap_host t_host = {
	.size = sizeof(t_host), .log = t_log, .ctx_err = t_ctx_err,
};

#define RX_MAX 4096

struct rx {
	pthread_mutex_t mx;
	struct gd_delivery d[RX_MAX];
	int n, taken;
};

struct pair {
	pthread_mutex_t mx;
	struct fq *a, *b;
	struct gd_conn *ca, *cb;
	struct rx rx;   /* what b received */
};

static void t_deliver(void *user, struct gd_conn *c, const struct gd_delivery *d)
{
	struct rx *rx = user;

	pthread_mutex_lock(&rx->mx);
	assert_true(rx->n < RX_MAX);
	rx->d[rx->n++] = *d;
	pthread_mutex_unlock(&rx->mx);
}

static struct fq *fq_new(pthread_mutex_t *mx, uint32_t slots, uint32_t sb)
{
	struct fq *q = calloc(1, sizeof(*q));

	assert_non_null(q);
	q->mx = mx;
	q->slots = slots;
	q->slot_bytes = sb;
	q->slot_mem = calloc(slots, sb);
	q->stages = 3;
	q->stage_bytes = sb;
	q->stage_mem = calloc(q->stages, sb);
	q->fail_after = -1;
	return q;
}

static struct pair *pair_new(uint32_t slots, uint32_t sb, uint64_t max_msg)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct gd_conn_cfg cfg = {
		.host = &t_host, .ops = &fq_ops, .slots = slots, .slot_bytes = sb,
		.peer_slots = slots, .peer_slot_bytes = sb, .stages = 3,
		.sq_depth = 2 * slots + 8, .max_msg = max_msg, .deliver = t_deliver,
	};

	assert_non_null(p);
	pthread_mutex_init(&p->mx, NULL);
	pthread_mutex_init(&p->rx.mx, NULL);
	p->a = fq_new(&p->mx, slots, sb);
	p->b = fq_new(&p->mx, slots, sb);
	p->a->peer = p->b;
	p->b->peer = p->a;
	cfg.qp = p->a;
	cfg.peer = "b";
	cfg.user = &p->rx; /* a receives nothing in these tests */
	assert_int_equal(gd_conn_new(&cfg, &p->ca), 0);
	cfg.qp = p->b;
	cfg.peer = "a";
	assert_int_equal(gd_conn_new(&cfg, &p->cb), 0);
	return p;
}

/* Hand every delivery back; returns how many. */
static int rx_release_all(struct pair *p)
{
	int n = 0;

	pthread_mutex_lock(&p->rx.mx);
	while (p->rx.taken < p->rx.n) {
		struct gd_delivery *d = &p->rx.d[p->rx.taken++];

		pthread_mutex_unlock(&p->rx.mx);
		if (d->slot >= 0) {
			gd_conn_slot_done(p->cb, d->slot);
		} else {
			free(d->buf.handle);
			__atomic_add_fetch(&p->b->frees, 1, __ATOMIC_RELAXED);
		}
		n++;
		pthread_mutex_lock(&p->rx.mx);
	}
	pthread_mutex_unlock(&p->rx.mx);
	return n;
}

static void pair_free(struct pair *p)
{
	rx_release_all(p);
	gd_conn_put(p->ca);
	gd_conn_put(p->cb);
	assert_int_equal(p->b->allocs, p->b->frees);
	for (int i = 0; i < 2; i++) {
		struct fq *q = i ? p->b : p->a;

		free(q->slot_mem);
		free(q->stage_mem);
		free(q);
	}
	pthread_mutex_destroy(&p->rx.mx);
	pthread_mutex_destroy(&p->mx);
	free(p);
}

/* A receiver thread: progress b, check each message, give it back. */
struct checker {
	struct pair *p;
	const size_t *sizes;
	int count;
	int bad;
	volatile int stop;
};

static void *checker_main(void *arg)
{
	struct checker *k = arg;
	int seen = 0;

	while (seen < k->count && !k->stop) {
		gd_conn_progress(k->p->cb);
		pthread_mutex_lock(&k->p->rx.mx);
		while (k->p->rx.taken < k->p->rx.n) {
			struct gd_delivery *d = &k->p->rx.d[k->p->rx.taken];
			size_t want = k->sizes[seen];
			uint8_t *ref = malloc(want ? want : 1);

			zt_fill(ref, want, (unsigned)seen);
			if (d->len != want || (want && memcmp(d->data, ref, want)))
				k->bad++;
			free(ref);
			seen++;
			pthread_mutex_unlock(&k->p->rx.mx);
			/* Release through the shared path (counts frees). */
			pthread_mutex_lock(&k->p->rx.mx);
			k->p->rx.taken++;
			if (d->slot >= 0) {
				pthread_mutex_unlock(&k->p->rx.mx);
				gd_conn_slot_done(k->p->cb, d->slot);
			} else {
				pthread_mutex_unlock(&k->p->rx.mx);
				free(d->buf.handle);
				__atomic_add_fetch(&k->p->b->frees, 1, __ATOMIC_RELAXED);
			}
			pthread_mutex_lock(&k->p->rx.mx);
		}
		pthread_mutex_unlock(&k->p->rx.mx);
		usleep(50);
	}
	return NULL;
}

/* ---- engine tests ------------------------------------------------------- */

static void test_sizes(void **state)
{
	static const size_t sizes[] = {
		0, 1, 100, 65535, 65536, 65537, 3 * 65536 + 7, (1u << 20) + 1,
		64u << 20,
	};
	struct pair *p = pair_new(8, 65536, 64u << 20);
	struct checker k = { .p = p, .sizes = sizes, .count = 9 };
	uint8_t *buf = malloc(64u << 20);
	pthread_t th;

	assert_non_null(buf);
	assert_int_equal(pthread_create(&th, NULL, checker_main, &k), 0);
	for (int i = 0; i < k.count; i++) {
		zt_fill(buf, sizes[i], (unsigned)i);
		assert_int_equal(gd_conn_send(p->ca, buf, sizes[i], NULL), 0);
	}
	pthread_join(th, NULL);
	assert_int_equal(k.bad, 0);
	assert_int_equal(gd_conn_error(p->ca), 0);
	assert_int_equal(gd_conn_error(p->cb), 0);
	/* Above the maximum: refused before anything is posted. */
	assert_int_equal(gd_conn_send(p->ca, buf, (64u << 20) + 1, NULL), -EMSGSIZE);
	{
		struct gd_conn_stats sa, sb;
		uint64_t bytes = 0;

		for (int i = 0; i < k.count; i++)
			bytes += sizes[i];
		gd_conn_stats(p->ca, &sa);
		gd_conn_stats(p->cb, &sb);
		/* Exactly what went (the refused one is not counted). */
		assert_int_equal(sa.msgs_sent, 9);
		assert_int_equal(sa.bytes_sent, bytes);
		assert_int_equal(sa.msgs_received, 0);
		assert_int_equal(sb.msgs_received, 9);
		assert_int_equal(sb.bytes_received, bytes);
		assert_int_equal(sb.msgs_sent, 0);
		/* 64 MiB in 64 KiB chunks over 8 credits: it waited. */
		assert_true(sa.credit_waits >= 1);
		assert_int_equal(sb.credit_waits, 0);
		assert_true(sa.idle_ms < 10000);
	}
	free(buf);
	pair_free(p);
}

static void test_in_place(void **state)
{
	static const size_t sizes[] = { 5000, 20000 };
	struct pair *p = pair_new(4, 4096, 1 << 20);
	struct checker k = { .p = p, .sizes = sizes, .count = 2 };
	uint8_t *buf = malloc(20000);
	pthread_t th;

	/* A registered buffer (a pool buffer for real) goes without staging. */
	p->a->reg = buf;
	p->a->reg_len = 20000;
	assert_int_equal(pthread_create(&th, NULL, checker_main, &k), 0);
	zt_fill(buf, 5000, 0);
	assert_int_equal(gd_conn_send(p->ca, buf, 5000, NULL), 0);
	zt_fill(buf, 20000, 1);
	assert_int_equal(gd_conn_send(p->ca, buf, 20000, NULL), 0);
	pthread_join(th, NULL);
	assert_int_equal(k.bad, 0);
	assert_int_equal(p->a->in_place, 2 + 5);
	free(buf);
	pair_free(p);
}

struct blocked {
	struct gd_conn *c;
	struct zap_ctx *ctx;
	size_t len;
	int rc;
	volatile int done;
};

static void *blocked_main(void *arg)
{
	struct blocked *b = arg;
	uint8_t buf[64];

	memset(buf, 7, sizeof(buf));
	b->rc = gd_conn_send(b->c, buf, b->len, b->ctx);
	b->done = 1;
	return NULL;
}

/* zap_stats().credit_waits of the pair so far, and its messages sent. */
static uint64_t credit_waits(struct gd_conn *c, uint64_t *sent)
{
	struct gd_conn_stats s;

	gd_conn_stats(c, &s);
	*sent = s.msgs_sent;
	return s.credit_waits;
}

static void test_credits(void **state)
{
	struct pair *p = pair_new(4, 4096, 1 << 20);
	struct blocked b = { .len = 10 };
	struct zap_ctx *ctx;
	uint8_t buf[10] = { 1 };
	pthread_t th;
	uint64_t t0, sent;

	assert_int_equal(gd_conn_credits(p->ca), 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(gd_conn_send(p->ca, buf, sizeof(buf), NULL), 0);
	/* Exhausted: nobody has given a slot back. Nothing waited yet. */
	assert_int_equal(gd_conn_credits(p->ca), 0);
	assert_int_equal(credit_waits(p->ca, &sent), 0);
	assert_int_equal(sent, 4);
	assert_int_equal(zap_ctx_new(&ctx), 0);
	assert_int_equal(zap_ctx_set_timeout(ctx, 100000000ull), 0);
	t0 = zt_now_ms();
	assert_int_equal(gd_conn_send(p->ca, buf, sizeof(buf), ctx), -ETIMEDOUT);
	assert_true(zt_now_ms() - t0 >= 90);
	/* Timed out before posting: the pair is still fine. It waited for a
	 * credit (counted) and sent nothing (not counted). */
	assert_int_equal(gd_conn_error(p->ca), 0);
	assert_int_equal(credit_waits(p->ca, &sent), 1);
	assert_int_equal(sent, 4);
	zap_ctx_free(ctx);

	/* Refill: the receiver takes and releases two. */
	gd_conn_progress(p->cb);
	assert_int_equal(p->rx.n, 4);
	pthread_mutex_lock(&p->rx.mx);
	p->rx.taken = 2;
	pthread_mutex_unlock(&p->rx.mx);
	gd_conn_slot_done(p->cb, p->rx.d[0].slot);
	gd_conn_slot_done(p->cb, p->rx.d[1].slot);
	assert_int_equal(gd_conn_credits(p->ca), 2);
	assert_int_equal(gd_conn_send(p->ca, buf, sizeof(buf), NULL), 0);
	assert_int_equal(gd_conn_send(p->ca, buf, sizeof(buf), NULL), 0);
	assert_int_equal(gd_conn_credits(p->ca), 0);
	/* Credits were there for both. */
	assert_int_equal(credit_waits(p->ca, &sent), 1);
	assert_int_equal(sent, 6);

	/* A sender without a deadline blocks until a slot comes back. */
	b.c = p->ca;
	assert_int_equal(pthread_create(&th, NULL, blocked_main, &b), 0);
	usleep(100000);
	assert_false(b.done);
	gd_conn_progress(p->cb);
	pthread_mutex_lock(&p->rx.mx);
	p->rx.taken = 3;
	pthread_mutex_unlock(&p->rx.mx);
	gd_conn_slot_done(p->cb, p->rx.d[2].slot);
	pthread_join(th, NULL);
	assert_int_equal(b.rc, 0);
	assert_int_equal(credit_waits(p->ca, &sent), 2);
	assert_int_equal(sent, 7);
	/* Cancellation wakes a blocked sender too. */
	assert_int_equal(zap_ctx_new(&b.ctx), 0);
	b.done = 0;
	assert_int_equal(pthread_create(&th, NULL, blocked_main, &b), 0);
	usleep(50000);
	assert_false(b.done);
	zap_ctx_cancel(b.ctx);
	pthread_join(th, NULL);
	assert_int_equal(b.rc, -ECANCELED);
	assert_int_equal(credit_waits(p->ca, &sent), 3);
	assert_int_equal(sent, 7);
	zap_ctx_free(b.ctx);
	/* Shutdown wakes it with -ESHUTDOWN. */
	b.ctx = NULL;
	b.done = 0;
	assert_int_equal(pthread_create(&th, NULL, blocked_main, &b), 0);
	usleep(50000);
	gd_conn_shutdown(p->ca);
	pthread_join(th, NULL);
	assert_int_equal(b.rc, -ESHUTDOWN);
	assert_int_equal(credit_waits(p->ca, &sent), 4);
	assert_int_equal(sent, 7);
	gd_conn_progress(p->cb);
	pair_free(p);
}

struct sender {
	struct gd_conn *c;
	const uint8_t *buf;
	size_t len;
	int rc;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;

	s->rc = gd_conn_send(s->c, s->buf, s->len, NULL);
	return NULL;
}

static int rx_count(struct pair *p)
{
	int n;

	pthread_mutex_lock(&p->rx.mx);
	n = p->rx.n;
	pthread_mutex_unlock(&p->rx.mx);
	return n;
}

static void test_reassembly(void **state)
{
	struct pair *p = pair_new(4, 4096, 1 << 20);
	size_t len = 5 * 4096 - 3;
	uint8_t *buf = malloc(len);
	struct sender s = { p->ca, buf, len, 1 };
	pthread_t th;

	zt_fill(buf, len, 9);
	/* No reassembly memory at first: the chunks wait in order, the
	 * sender runs out of credits after four, nothing is delivered. */
	__atomic_store_n(&p->b->alloc_eagain, true, __ATOMIC_RELEASE);
	assert_int_equal(pthread_create(&th, NULL, sender_main, &s), 0);
	for (int i = 0; i < 20; i++) {
		gd_conn_progress(p->cb);
		usleep(2000);
	}
	assert_int_equal(rx_count(p), 0);
	assert_int_equal(gd_conn_credits(p->ca), 0);
	__atomic_store_n(&p->b->alloc_eagain, false, __ATOMIC_RELEASE);
	for (int i = 0; i < 5000 && !rx_count(p); i++) {
		gd_conn_progress(p->cb);
		usleep(1000);
	}
	pthread_join(th, NULL);
	assert_int_equal(s.rc, 0);
	assert_int_equal(rx_count(p), 1);
	assert_int_equal(p->rx.d[0].slot, -1);
	assert_int_equal(p->rx.d[0].len, len);
	assert_memory_equal(p->rx.d[0].data, buf, len);
	assert_int_equal(p->b->allocs, 1);
	free(buf);
	pair_free(p);
}

static void test_completion_error(void **state)
{
	struct pair *p = pair_new(8, 4096, 1 << 20);
	uint8_t *buf = malloc(6 * 4096);
	int rc;

	zt_fill(buf, 6 * 4096, 3);
	/* Two chunks land, the third fails. */
	p->a->fail_after = 2;
	rc = gd_conn_send(p->ca, buf, 6 * 4096, NULL);
	assert_int_equal(rc, -EIO);
	assert_int_equal(gd_conn_error(p->ca), -EIO);
	/* Sticky: the plugin replaces the pair on the next send. */
	assert_int_equal(gd_conn_send(p->ca, buf, 10, NULL), -EIO);
	/* The receiver drops the partial message and delivers nothing. */
	gd_conn_progress(p->cb);
	assert_int_equal(p->rx.n, 0);
	assert_int_equal(gd_conn_error(p->cb), -ECONNRESET);
	assert_int_equal(p->b->allocs, p->b->frees);
	pair_free(p);

	/* The receiver had started reassembling when its pair broke: the
	 * partial message is freed, not delivered. */
	p = pair_new(8, 4096, 1 << 20);
	fq_post_send(p->a, GD_WR_DATA | GD_NO_STAGE, buf, 4096, GD_IMM_FIRST | 3, 1);
	fq_post_send(p->a, GD_WR_DATA | GD_NO_STAGE, buf, 4096, 1, 1);
	assert_int_equal(gd_conn_progress(p->cb), 0);
	assert_int_equal(p->b->allocs, 1);
	fq_kill(p->b);
	assert_int_equal(gd_conn_progress(p->cb), -ECONNRESET);
	assert_int_equal(p->rx.n, 0);
	assert_int_equal(p->b->frees, 1);
	free(buf);
	pair_free(p);
}

static void test_protocol_violation(void **state)
{
	struct pair *p = pair_new(4, 4096, 1 << 20);
	uint8_t chunk[4096] = { 0 };

	/* A middle chunk with no first chunk before it. */
	fq_post_send(p->a, GD_WR_DATA | GD_NO_STAGE, chunk, sizeof(chunk), 2, 1);
	assert_int_equal(gd_conn_progress(p->cb), -EPROTO);
	pair_free(p);

	/* A first chunk announcing more chunks than any message may have. */
	p = pair_new(4, 4096, 1 << 20);
	fq_post_send(p->a, GD_WR_DATA | GD_NO_STAGE, chunk, sizeof(chunk),
		     GD_IMM_FIRST | 100000, 1);
	assert_int_equal(gd_conn_progress(p->cb), -EPROTO);
	pair_free(p);

	/* A short first chunk of a multi-chunk message. */
	p = pair_new(4, 4096, 1 << 20);
	fq_post_send(p->a, GD_WR_DATA | GD_NO_STAGE, chunk, 100, GD_IMM_FIRST | 2, 1);
	assert_int_equal(gd_conn_progress(p->cb), -EPROTO);
	assert_int_equal(p->rx.n, 0);
	pair_free(p);
}

/* ---- bootstrap codec ---------------------------------------------------- */

/* The progress thread drives every pair: it used to take only the first
 * 64 of the table (cs[64]), so the others' messages were never delivered
 * unless their own senders happened to poll. */
static void test_progress_every_pair(void **state)
{
	enum { N = 100 };
	static struct gd_tp t;
	static struct pair *ps[N];
	static struct gd_peer *peers[N];
	uint8_t msg[64] = { 1 };
	int delivered = 0;

	memset(&t, 0, sizeof(t));
	pthread_mutex_init(&t.mx, NULL);
	for (int i = 0; i < N; i++) {
		ps[i] = pair_new(4, 4096, 1u << 20);
		assert_int_equal(gd_conn_send(ps[i]->ca, msg, sizeof(msg), NULL), 0);
		peers[i] = calloc(1, sizeof(*peers[i]));
		assert_non_null(peers[i]);
		peers[i]->tp = &t;
		peers[i]->conn = ps[i]->cb;
		gd_conn_get(ps[i]->cb); /* the table's reference */
		peers[i]->instance = (uint64_t)i + 1;
		snprintf(peers[i]->key, sizeof(peers[i]->key), "10.0.0.%d:7000", i + 1);
		gd_add_peer(&t, peers[i]);
	}
	gd_peers_progress(&t);
	for (int i = 0; i < N; i++)
		delivered += ps[i]->rx.n;
	assert_int_equal(delivered, N);

	/* What zap_stats() and zap_peer_list() make of the table: each pair
	 * (accepted here) delivered one message; pinned bytes are the
	 * device's count. */
	uint64_t pinned = 3u << 20;
	struct zap_stats s = { .size = sizeof(s) };
	static struct zap_peer_info rows[N + 1];

	t.pinctr = &pinned;
	gd_peers_stats(&t, &s);
	assert_int_equal(s.msgs_received, N);
	assert_int_equal(s.bytes_received, N * sizeof(msg));
	assert_int_equal(s.msgs_sent, 0);
	assert_int_equal(s.conns_accepted, N);
	assert_int_equal(s.conns_dialed, 0);
	assert_int_equal(s.conns_open, N);
	assert_int_equal(s.peers, N);
	assert_int_equal(s.pinned_bytes, 3u << 20);
	for (int i = 0; i <= N; i++) /* as the host sets them */
		rows[i].size = sizeof(rows[i]);
	assert_int_equal(gd_peers_list(&t, NULL, 0), N);
	assert_int_equal(gd_peers_list(&t, rows, 2), N); /* room for two */
	assert_int_equal(gd_peers_list(&t, rows, N + 1), N);
	for (int i = 0; i < N; i++) {
		assert_string_equal(rows[i].path, "rdma");
		assert_string_equal(rows[i].identity, "");
		assert_false(rows[i].tls);
		assert_false(rows[i].dialed);
		assert_int_equal(rows[i].msgs_received, 1);
		assert_int_equal(rows[i].bytes_received, sizeof(msg));
		assert_int_equal(rows[i].rtt_us, -1);
		assert_true(rows[i].conn_id >= 1 && rows[i].conn_id <= N);
	}
	/* An older caller's smaller rows: only what its size covers. */
	{
		size_t old = offsetof(struct zap_peer_info, conn_id);
		/* One flat buffer: the rows are @old bytes apart in it. */
		static _Alignas(struct zap_peer_info) unsigned char
			small[2 * sizeof(struct zap_peer_info)];

		memset(small, 0xee, sizeof(small));
		memcpy(small, &old, sizeof(old)); /* as the host sets them */
		memcpy(small + old, &old, sizeof(old));
		assert_int_equal(gd_peers_list(&t, (struct zap_peer_info *)small, 2), N);
		assert_int_equal(memcmp(small, &old, sizeof(old)), 0);
		assert_int_equal(memcmp(small + old, &old, sizeof(old)), 0);
		assert_string_equal((char *)small + offsetof(struct zap_peer_info, path),
				    "rdma");
		assert_int_equal(small[2 * old], 0xee); /* past the second row */
	}
	gd_peers_drop_all(&t);
	/* The pairs' traffic stays in the totals; every pair counted closed. */
	memset(&s, 0, sizeof(s));
	s.size = sizeof(s);
	gd_peers_stats(&t, &s);
	assert_int_equal(s.msgs_received, N);
	assert_int_equal(s.conns_open, 0);
	assert_int_equal(s.conns_closed[ZAP_CLOSE_SHUTDOWN], N);
	assert_int_equal(s.peers, 0);
	for (int i = 0; i < N; i++) {
		pair_free(ps[i]);
		free(peers[i]);
	}
	pthread_mutex_destroy(&t.mx);
}

static void boot_sample(struct gd_boot *b)
{
	memset(b, 0, sizeof(*b));
	b->instance = 0x0123456789abcdefull;
	b->qpn = 0x1234;
	b->psn = 0xabcdef;
	b->lid = 7;
	b->mtu = 5;
	for (int i = 0; i < 16; i++)
		b->gid[i] = (uint8_t)(i * 17);
	b->slots = 16;
	b->slot_bytes = 1 << 20;
	b->credit_addr = 0x7f0000001000ull;
	b->credit_rkey = 0xdeadbeef;
	snprintf(b->listen, sizeof(b->listen), "10.0.0.1:4000");
}

static void test_boot_roundtrip(void **state)
{
	uint8_t buf[GD_BOOT_MAX];
	struct gd_boot a, b;
	char why[200];
	int n;

	boot_sample(&a);
	n = gd_boot_encode(&a, buf, sizeof(buf));
	assert_int_equal(n, GD_BOOT_HDR + GD_BOOT_FIXED + strlen(a.listen));
	assert_int_equal(gd_boot_decode(buf, (size_t)n, &b, why, sizeof(why)), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(gd_boot_encode(&a, buf, 20), -ENOSPC);
	a.listen[0] = '\0';
	assert_int_equal(gd_boot_encode(&a, buf, sizeof(buf)), -EINVAL);
}

static void test_boot_version(void **state)
{
	uint8_t buf[GD_BOOT_MAX];
	struct gd_boot a, b;
	char why[200] = "";
	size_t body;
	int n;

	boot_sample(&a);
	n = gd_boot_encode(&a, buf, sizeof(buf));
	buf[5] = 2; /* a newer peer */
	assert_int_equal(gd_boot_decode(buf, (size_t)n, &b, why, sizeof(why)),
			 -EPROTONOSUPPORT);
	assert_non_null(strstr(why, "version 2"));
	assert_non_null(strstr(why, "version 1"));
	assert_int_equal(gd_boot_header(buf, &body, why, sizeof(why)), -EPROTONOSUPPORT);
}

static void test_boot_malformed(void **state)
{
	uint8_t buf[GD_BOOT_MAX], bad[GD_BOOT_MAX];
	struct gd_boot a, b;
	char why[200];
	int n;

	boot_sample(&a);
	n = gd_boot_encode(&a, buf, sizeof(buf));
	/* Truncated at every length. */
	for (int i = 0; i < n; i++)
		assert_int_equal(gd_boot_decode(buf, (size_t)i, &b, why, sizeof(why)), -EPROTO);
	/* Bad magic: someone else's protocol (an HTTP request, say). */
	memcpy(bad, "GET / HTTP/1.1\r\n", 16);
	assert_int_equal(gd_boot_decode(bad, 16, &b, why, sizeof(why)), -EPROTO);
	assert_non_null(strstr(why, "magic"));
	/* Absurd values, one field at a time. */
	static const struct {
		size_t off;
		uint8_t v;
	} pokes[] = {
		{ GD_BOOT_HDR + 8, 0xff },       /* qpn above 24 bits */
		{ GD_BOOT_HDR + 12, 0x01 },      /* psn above 24 bits */
		{ GD_BOOT_HDR + 18, 9 },         /* mtu */
		{ GD_BOOT_HDR + 19, 1 },         /* reserved */
		{ GD_BOOT_HDR + 36, 0xff },      /* slots */
		{ GD_BOOT_HDR + 41, 0x13 },      /* slot_bytes not a power of two */
		{ GD_BOOT_HDR + 56, 0x40 },      /* listen length */
		{ GD_BOOT_HDR + GD_BOOT_FIXED + 2, 0 }, /* NUL in the address */
		{ 6, 0xff },                     /* body length in the header */
		{ 7, 3 },                        /* body length shorter than sent */
	};
	for (size_t i = 0; i < sizeof(pokes) / sizeof(pokes[0]); i++) {
		memcpy(bad, buf, (size_t)n);
		bad[pokes[i].off] = pokes[i].v;
		assert_int_equal(gd_boot_decode(bad, (size_t)n, &b, why, sizeof(why)), -EPROTO);
	}
	/* A zero instance, zero qpn and zero slots. */
	a.slots = 0;
	n = gd_boot_encode(&a, buf, sizeof(buf));
	assert_int_equal(gd_boot_decode(buf, (size_t)n, &b, why, sizeof(why)), -EPROTO);
	/* Random bytes behind a valid header never crash the decoder. */
	srand(1);
	for (int round = 0; round < 20000; round++) {
		size_t len = (size_t)rand() % sizeof(bad);

		for (size_t i = 0; i < len; i++)
			bad[i] = (uint8_t)rand();
		if (round & 1 && len >= GD_BOOT_HDR)
			memcpy(bad, buf, GD_BOOT_HDR);
		gd_boot_decode(bad, len, &b, why, sizeof(why));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_boot_roundtrip),
		cmocka_unit_test(test_boot_version),
		cmocka_unit_test(test_boot_malformed),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_progress_every_pair),
		cmocka_unit_test(test_in_place),
		cmocka_unit_test(test_credits),
		cmocka_unit_test(test_reassembly),
		cmocka_unit_test(test_completion_error),
		cmocka_unit_test(test_protocol_violation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
