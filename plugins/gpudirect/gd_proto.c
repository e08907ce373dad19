/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect protocol engine; see gd_proto.h for the rules.
 *
 * Shared state: one struct gd_conn per queue pair, used by the progress
 * thread, senders and the threads releasing received messages. gd_conn.mx
 * guards all of it but @refs (atomic); @cv, with mx, wakes senders waiting
 * for credits or completions. gd_conn.send_mx, taken before mx, keeps one
 * message at a time on the pair. The qp ops and cfg.deliver are called
 * with mx held, so they may take only locks of their own that nest inside
 * it, and never call back into the engine (but gd_conn_get()). The
 * bootstrap codec above the engine is pure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gd_proto.h"

/* ---- bootstrap ------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}

int gd_boot_encode(const struct gd_boot *b, uint8_t *buf, size_t len)
{
	size_t alen = strnlen(b->listen, sizeof(b->listen));
	size_t body = GD_BOOT_FIXED + alen;
	uint8_t *p = buf + GD_BOOT_HDR;

	if (!alen || alen >= sizeof(b->listen))
		return -EINVAL;
	if (len < GD_BOOT_HDR + body)
		return -ENOSPC;
	put32(buf, GD_BOOT_MAGIC);
	put16(buf + 4, GD_BOOT_VERSION);
	put16(buf + 6, (uint16_t)body);
	put64(p, b->instance);
	put32(p + 8, b->qpn);
	put32(p + 12, b->psn);
	put16(p + 16, b->lid);
	p[18] = b->mtu;
	p[19] = 0; /* reserved */
	memcpy(p + 20, b->gid, 16);
	put32(p + 36, b->slots);
	put32(p + 40, b->slot_bytes);
	put64(p + 44, b->credit_addr);
	put32(p + 52, b->credit_rkey);
	put16(p + 56, (uint16_t)alen);
	memcpy(p + GD_BOOT_FIXED, b->listen, alen);
	return (int)(GD_BOOT_HDR + body);
}

int gd_boot_header(const uint8_t *hdr, size_t *body_len, char *why, size_t wl)
{
	uint32_t magic = get32(hdr);
	uint16_t ver = get16(hdr + 4);
	uint16_t body = get16(hdr + 6);

	if (magic != GD_BOOT_MAGIC) {
		snprintf(why, wl,
			 "not a gpudirect peer (bootstrap magic 0x%08x, "
			 "expected 0x%08x)",
			 magic, GD_BOOT_MAGIC);
		return -EPROTO;
	}
	if (ver != GD_BOOT_VERSION) {
		snprintf(why, wl,
			 "peer speaks gpudirect bootstrap version %u, this "
			 "endpoint version %u: run the same libzap on both ends",
			 ver, GD_BOOT_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (body < GD_BOOT_FIXED + 1 || body > GD_BOOT_FIXED + ZAP_PEER_MAX - 1) {
		snprintf(why, wl, "bootstrap body of %u bytes (expected %u to %u)", body,
			 GD_BOOT_FIXED + 1, GD_BOOT_FIXED + ZAP_PEER_MAX - 1);
		return -EPROTO;
	}
	*body_len = body;
	return 0;
}

static int bad(char *why, size_t wl, const char *field, unsigned long long v)
{
	snprintf(why, wl, "bootstrap field %s out of range (%llu)", field, v);
	return -EPROTO;
}

int gd_boot_decode(const uint8_t *buf, size_t len, struct gd_boot *b, char *why,
		   size_t wl)
{
	const uint8_t *p = buf + GD_BOOT_HDR;
	size_t body, alen;
	int rc;

	if (len < GD_BOOT_HDR) {
		snprintf(why, wl, "truncated bootstrap message (%zu bytes)", len);
		return -EPROTO;
	}
	rc = gd_boot_header(buf, &body, why, wl);
	if (rc)
		return rc;
	if (len != GD_BOOT_HDR + body) {
		snprintf(why, wl, "bootstrap message of %zu bytes, header says %zu", len,
			 GD_BOOT_HDR + body);
		return -EPROTO;
	}
	memset(b, 0, sizeof(*b));
	b->instance = get64(p);
	b->qpn = get32(p + 8);
	b->psn = get32(p + 12);
	b->lid = get16(p + 16);
	b->mtu = p[18];
	memcpy(b->gid, p + 20, 16);
	b->slots = get32(p + 36);
	b->slot_bytes = get32(p + 40);
	b->credit_addr = get64(p + 44);
	b->credit_rkey = get32(p + 52);
	alen = get16(p + 56);
	if (!b->instance)
		return bad(why, wl, "instance", 0);
	if (!b->qpn || b->qpn > 0xffffff)
		return bad(why, wl, "qpn", b->qpn);
	if (b->psn > 0xffffff)
		return bad(why, wl, "psn", b->psn);
	if (b->mtu < 1 || b->mtu > 5)
		return bad(why, wl, "mtu", b->mtu);
	if (p[19])
		return bad(why, wl, "reserved", p[19]);
	if (!b->slots || b->slots > GD_SLOTS_MAX)
		return bad(why, wl, "slots", b->slots);
	if (b->slot_bytes < GD_SLOT_MIN || b->slot_bytes > GD_SLOT_MAX ||
	    (b->slot_bytes & (b->slot_bytes - 1)))
		return bad(why, wl, "slot_bytes", b->slot_bytes);
	if (!b->credit_addr || (b->credit_addr & 7))
		return bad(why, wl, "credit_addr", b->credit_addr);
	if (alen != body - GD_BOOT_FIXED)
		return bad(why, wl, "listen length", alen);
	memcpy(b->listen, p + GD_BOOT_FIXED, alen);
	if (strlen(b->listen) != alen) {
		snprintf(why, wl, "bootstrap listen address holds a NUL byte");
		return -EPROTO;
	}
	return 0;
}

/* ---- the engine ------------------------------------------------------ */

struct gd_conn {
	struct gd_conn_cfg cfg;
	char peer[ZAP_PEER_MAX];
	pthread_mutex_t mx;      /* everything below */
	pthread_mutex_t send_mx; /* one message at a time on the pair */
	pthread_cond_t cv;
	int refs;
	int err; /* sticky; 0 while healthy */
	bool shut;

	/* send side */
	uint64_t sent;          /* data chunks posted, ever */
	uint64_t peer_consumed; /* of our chunks, reposted by the peer */
	uint32_t sq_used;
	uint32_t inflight;    /* data chunks posted, not completed */
	uint32_t *stage_free; /* stack of free staging slots */
	uint32_t nstage_free;
	uint64_t credit_seq;

	/* receive side */
	uint64_t consumed;    /* our slots reposted, ever */
	uint64_t credit_sent; /* last value written to the peer */
	struct gd_cqe *pend;  /* receive completions not handled yet */
	uint32_t pend_head, npend;
	bool asm_on;
	uint32_t asm_n, asm_next;
	size_t asm_len;
	struct gd_rxbuf asm_buf;

	/* gd_conn_stats(): plain counts, under mx like the rest. */
	struct gd_conn_stats st;
	uint64_t last_ns; /* the last message either way (coarse clock) */
};

/* The coarse clock: a message's timestamp costs no more than a load. */
static uint64_t coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Hand a whole message to the instance, counted. */
static void deliver_locked(struct gd_conn *c, const struct gd_delivery *d)
{
	c->st.msgs_received++;
	c->st.bytes_received += d->len;
	c->last_ns = coarse_ns();
	c->cfg.deliver(c->cfg.user, c, d);
}

/* Under mx. */
static void fail_locked(struct gd_conn *c, int err, const char *why)
{
	if (c->err)
		return;
	c->err = err;
	if (c->cfg.host && c->cfg.host->log)
		c->cfg.host->log(ZAP_LOG_WARN, "gpudirect",
				 "peer %s: queue pair failed: %s", c->peer,
				 why ? why : strerror(-err));
	c->cfg.ops->kill(c->cfg.qp);
	if (c->asm_on) {
		c->cfg.ops->free_msg(c->cfg.qp, &c->asm_buf);
		c->asm_on = false;
	}
	pthread_cond_broadcast(&c->cv);
}

static uint32_t credits_locked(struct gd_conn *c)
{
	uint64_t pc = c->cfg.ops->peer_consumed(c->cfg.qp);
	uint64_t out;

	/* The word only grows; ignore a stale or torn read. */
	if (pc > c->peer_consumed && pc <= c->sent)
		c->peer_consumed = pc;
	out = c->sent - c->peer_consumed;
	return out >= c->cfg.peer_slots ? 0 : c->cfg.peer_slots - (uint32_t)out;
}

uint32_t gd_conn_credits(struct gd_conn *c)
{
	uint32_t n;

	pthread_mutex_lock(&c->mx);
	n = credits_locked(c);
	pthread_mutex_unlock(&c->mx);
	return n;
}

/* Tell the peer about reposted slots, if the send queue has room. */
static void credit_locked(struct gd_conn *c)
{
	int rc;

	if (c->err || c->consumed == c->credit_sent || c->sq_used >= c->cfg.sq_depth)
		return;
	rc = c->cfg.ops->post_credit(c->cfg.qp,
				     GD_WR_CREDIT | (c->credit_seq++ % c->cfg.sq_depth),
				     c->consumed);
	if (rc) {
		fail_locked(c, rc, "posting a credit update failed");
		return;
	}
	c->credit_sent = c->consumed;
	c->sq_used++;
}

static void repost_locked(struct gd_conn *c, uint32_t slot)
{
	int rc;

	if (c->err)
		return;
	rc = c->cfg.ops->post_recv(c->cfg.qp, GD_WR_RECV | slot, slot);
	if (rc) {
		fail_locked(c, rc, "posting a receive failed");
		return;
	}
	c->consumed++;
	credit_locked(c);
}

static int proto_error(struct gd_conn *c, const char *why)
{
	fail_locked(c, -EPROTO, why);
	return -EPROTO;
}

/* Handle one receive completion. -EAGAIN: no reassembly memory now. */
static int rx_locked(struct gd_conn *c, const struct gd_cqe *e)
{
	uint32_t slot = (uint32_t)(e->wr_id & 0xffffffffu);
	uint32_t v = e->imm & GD_IMM_VALUE, sb = c->cfg.slot_bytes;
	void *src = c->cfg.ops->slot_addr(c->cfg.qp, slot);
	struct gd_delivery d = { .slot = -1 };
	int rc;

	if (slot >= c->cfg.slots || e->byte_len > sb)
		return proto_error(c, "receive completion outside the slots");
	if (e->imm & GD_IMM_FIRST) {
		uint64_t most = (c->cfg.max_msg + sb - 1) / sb;

		if (c->asm_on)
			return proto_error(c, "a message started inside another");
		if (!v || v > most)
			return proto_error(c, "message of an absurd chunk count");
		if (v == 1) {
			d.data = src;
			d.len = e->byte_len;
			d.slot = (int32_t)slot;
			deliver_locked(c, &d);
			return 0;
		}
		if (e->byte_len != sb)
			return proto_error(c, "short first chunk");
		rc = c->cfg.ops->alloc_msg(c->cfg.qp, (size_t)v * sb, &c->asm_buf);
		if (rc == -EAGAIN)
			return rc;
		if (rc) {
			fail_locked(c, rc, "no memory to reassemble a message");
			return rc;
		}
		c->asm_on = true;
		c->asm_n = v;
		c->asm_next = 1;
		c->asm_len = 0;
	} else {
		if (!c->asm_on || v != c->asm_next)
			return proto_error(c, "chunk out of order");
		if (v + 1 < c->asm_n && e->byte_len != sb)
			return proto_error(c, "short middle chunk");
		c->asm_next++;
	}
	rc = c->cfg.ops->copy(c->cfg.qp, (char *)c->asm_buf.data + c->asm_len, src,
			      e->byte_len);
	if (rc) {
		fail_locked(c, rc, "copying a chunk failed");
		return rc;
	}
	c->asm_len += e->byte_len;
	repost_locked(c, slot);
	if (c->asm_next == c->asm_n && !c->err) {
		d.data = c->asm_buf.data;
		d.len = c->asm_len;
		d.buf = c->asm_buf;
		c->asm_on = false;
		deliver_locked(c, &d);
	}
	return 0;
}

static void tx_done_locked(struct gd_conn *c, const struct gd_cqe *e)
{
	uint64_t kind = e->wr_id & GD_WR_KIND;
	uint32_t idx = (uint32_t)(e->wr_id & 0xffffffffu);

	if (c->sq_used)
		c->sq_used--;
	if (kind == GD_WR_DATA) {
		if (c->inflight)
			c->inflight--;
		if (idx != GD_NO_STAGE && c->nstage_free < c->cfg.stages)
			c->stage_free[c->nstage_free++] = idx;
	}
}

static void handle_locked(struct gd_conn *c, const struct gd_cqe *e)
{
	uint64_t kind = e->wr_id & GD_WR_KIND;

	if (kind != GD_WR_RECV)
		tx_done_locked(c, e);
	if (e->status) {
		char why[160];

		snprintf(why, sizeof(why), "completion error: %s",
			 e->why ? e->why : strerror(-e->status));
		fail_locked(c, e->status, why);
		return;
	}
	if (kind != GD_WR_RECV || c->err)
		return;
	if (c->npend == c->cfg.slots) {
		proto_error(c, "more receive completions than slots");
		return;
	}
	c->pend[(c->pend_head + c->npend++) % c->cfg.slots] = *e;
}

static int progress_locked(struct gd_conn *c)
{
	struct gd_cqe e[16];
	int n;

	do {
		n = c->cfg.ops->poll(c->cfg.qp, e, 16);
		if (n < 0) {
			fail_locked(c, n, "polling the completion queue failed");
			break;
		}
		for (int i = 0; i < n; i++)
			handle_locked(c, &e[i]);
	} while (n == 16);
	/* In order; a message waiting for reassembly memory holds the rest. */
	while (c->npend && !c->err) {
		if (rx_locked(c, &c->pend[c->pend_head]) == -EAGAIN)
			break;
		c->pend_head = (c->pend_head + 1) % c->cfg.slots;
		c->npend--;
	}
	if (c->err)
		c->npend = 0;
	credit_locked(c);
	credits_locked(c);
	pthread_cond_broadcast(&c->cv);
	return c->err;
}

int gd_conn_progress(struct gd_conn *c)
{
	int rc;

	pthread_mutex_lock(&c->mx);
	rc = progress_locked(c);
	pthread_mutex_unlock(&c->mx);
	return rc;
}

/*
 * Wait a little for progress. Credits come back as RDMA writes, which raise
 * no completion event, so a waiting sender re-reads the word on a short
 * period instead of sleeping on an event.
 */
static void nap_locked(struct gd_conn *c, unsigned *spins)
{
	struct timespec ts;
	long ns = *spins < 64 ? 20000 : 1000000;

	(*spins)++;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ns;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&c->cv, &c->mx, &ts);
}

/*
 * Wait until a chunk of @clen bytes may go: a credit, room in the send
 * queue and, for a chunk to stage, a free staging slot. Return 0, or why
 * not: the pair's error, -ESHUTDOWN, or @ctx's error. *@no_credit is set
 * when it found no credit (the send counts as a credit wait).
 */
static int wait_room_locked(struct gd_conn *c, bool in_place, size_t clen,
			    struct zap_ctx *ctx, unsigned *spins, bool *no_credit)
{
	int rc;

	for (;;) {
		uint32_t credits;

		progress_locked(c);
		if (c->err || c->shut)
			return c->err ? c->err : -ESHUTDOWN;
		credits = credits_locked(c);
		if (!credits)
			*no_credit = true;
		if (credits && c->sq_used < c->cfg.sq_depth &&
		    (in_place || !clen || c->nstage_free))
			return 0;
		rc = c->cfg.host->ctx_err(ctx);
		if (rc)
			return rc;
		nap_locked(c, spins);
	}
}

/* Post one chunk, first copied into a staging slot unless it goes
 * @in_place (registered under @key). A failure fails the pair. */
static int post_chunk_locked(struct gd_conn *c, const void *src, size_t clen,
			     uint32_t imm, bool in_place, uintptr_t key)
{
	const struct gd_qp_ops *ops = c->cfg.ops;
	uint32_t stage = GD_NO_STAGE;
	int rc;

	if (!in_place && clen) {
		stage = c->stage_free[--c->nstage_free];
		memcpy(ops->stage_addr(c->cfg.qp, stage), src, clen);
		src = ops->stage_addr(c->cfg.qp, stage);
		rc = ops->lookup(c->cfg.qp, src, clen, &key);
		if (rc) {
			c->stage_free[c->nstage_free++] = stage;
			fail_locked(c, -EIO, "staging memory is not registered");
			return -EIO;
		}
	}
	rc = ops->post_send(c->cfg.qp, GD_WR_DATA | stage, src, clen, imm, key);
	if (rc) {
		if (stage != GD_NO_STAGE)
			c->stage_free[c->nstage_free++] = stage;
		fail_locked(c, rc, "posting a send failed");
		return rc;
	}
	c->sent++;
	c->sq_used++;
	c->inflight++;
	return 0;
}

/* After the last chunk, or a failure @rc once @posted chunks went out:
 * settle the pair's state and give the send's result. */
static int finish_send_locked(struct gd_conn *c, int rc, uint64_t posted, unsigned *spins)
{
	/*
	 * A message cut short cannot be taken back: the pair is failed (the
	 * peer drops the partial message) and rebuilt on the next send. A
	 * cancellation before the first chunk leaves the pair usable.
	 */
	if (rc && posted && !c->err && (rc == -ECANCELED || rc == -ETIMEDOUT))
		fail_locked(c, -ECONNABORTED, "a send was cancelled mid-message");
	/* Posted chunks may still read the buffer: wait for every completion
	 * (they come, or flush once the pair is in error). Not cut short by
	 * ctx. */
	while (c->inflight && !c->shut) {
		if (progress_locked(c) && !rc)
			rc = c->err;
		if (!c->inflight)
			break;
		nap_locked(c, spins);
	}
	if (!rc && c->err)
		rc = c->err;
	if (!rc && c->shut && c->inflight)
		rc = -ESHUTDOWN;
	return rc;
}

int gd_conn_send(struct gd_conn *c, const void *buf, size_t len, struct zap_ctx *ctx)
{
	size_t sb = c->cfg.peer_slot_bytes, off = 0;
	uint64_t n = len ? (len + sb - 1) / sb : 1;
	uintptr_t key = 0;
	bool in_place, no_credit = false;
	unsigned spins = 0;
	uint64_t posted = 0;
	int rc = 0;

	if (len > c->cfg.max_msg || n > GD_IMM_VALUE)
		return -EMSGSIZE;
	in_place = len && c->cfg.ops->lookup(c->cfg.qp, buf, len, &key) == 0;
	pthread_mutex_lock(&c->send_mx);
	pthread_mutex_lock(&c->mx);
	for (uint64_t i = 0; i < n; i++) {
		size_t clen = len - off < sb ? len - off : sb;
		uint32_t imm = i ? (uint32_t)i : GD_IMM_FIRST | (uint32_t)n;

		rc = wait_room_locked(c, in_place, clen, ctx, &spins, &no_credit);
		if (rc)
			break;
		rc = post_chunk_locked(c, (const char *)buf + off, clen, imm, in_place,
				       key);
		if (rc)
			break;
		posted++;
		off += clen;
	}
	rc = finish_send_locked(c, rc, posted, &spins);
	c->st.credit_waits += no_credit;
	if (!rc) {
		c->st.msgs_sent++;
		c->st.bytes_sent += len;
		c->last_ns = coarse_ns();
	}
	pthread_mutex_unlock(&c->mx);
	pthread_mutex_unlock(&c->send_mx);
	return rc;
}

void gd_conn_slot_done(struct gd_conn *c, int32_t slot)
{
	if (slot < 0)
		return;
	pthread_mutex_lock(&c->mx);
	repost_locked(c, (uint32_t)slot);
	pthread_mutex_unlock(&c->mx);
}

void gd_conn_shutdown(struct gd_conn *c)
{
	pthread_mutex_lock(&c->mx);
	c->shut = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mx);
}

void gd_conn_stats(struct gd_conn *c, struct gd_conn_stats *out)
{
	uint64_t now = coarse_ns();

	pthread_mutex_lock(&c->mx);
	*out = c->st;
	out->idle_ms = now > c->last_ns ? (now - c->last_ns) / 1000000 : 0;
	pthread_mutex_unlock(&c->mx);
}

int gd_conn_error(struct gd_conn *c)
{
	int err;

	pthread_mutex_lock(&c->mx);
	err = c->err;
	pthread_mutex_unlock(&c->mx);
	return err;
}

int gd_conn_new(const struct gd_conn_cfg *cfg, struct gd_conn **out)
{
	struct gd_conn *c;
	int rc = -ENOMEM;

	if (!cfg->slots || cfg->slots > GD_SLOTS_MAX || !cfg->peer_slots ||
	    !cfg->slot_bytes || !cfg->peer_slot_bytes || !cfg->sq_depth || !cfg->stages)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	c->last_ns = coarse_ns(); /* idle since it was made */
	snprintf(c->peer, sizeof(c->peer), "%s", cfg->peer ? cfg->peer : "?");
	c->cfg.peer = c->peer;
	c->stage_free = calloc(cfg->stages, sizeof(*c->stage_free));
	c->pend = calloc(cfg->slots, sizeof(*c->pend));
	if (!c->stage_free || !c->pend)
		goto fail;
	for (uint32_t i = 0; i < cfg->stages; i++)
		c->stage_free[c->nstage_free++] = cfg->stages - 1 - i;
	for (uint32_t i = 0; i < cfg->slots; i++) {
		rc = cfg->ops->post_recv(cfg->qp, GD_WR_RECV | i, i);
		if (rc)
			goto fail;
	}
	pthread_mutex_init(&c->mx, NULL);
	pthread_mutex_init(&c->send_mx, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->refs = 1;
	*out = c;
	return 0;
fail:
	free(c->stage_free);
	free(c->pend);
	free(c);
	return rc;
}

void gd_conn_get(struct gd_conn *c)
{
	__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
}

void gd_conn_put(struct gd_conn *c)
{
	if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (c->asm_on)
		c->cfg.ops->free_msg(c->cfg.qp, &c->asm_buf);
	if (c->cfg.destroy)
		c->cfg.destroy(c->cfg.user, c->cfg.qp);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mx);
	pthread_mutex_destroy(&c->send_mx);
	free(c->stage_free);
	free(c->pend);
	free(c);
}
