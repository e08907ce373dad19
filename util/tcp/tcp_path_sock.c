/* SPDX-License-Identifier: MIT */
/*
 * The socket path (tcp_path.h): frames on the connection itself, which
 * every connection starts with and keeps unless the same-host upgrade
 * installs the shm path. Its frames are written by tcp_txq.c (coalesced:
 * one sendmsg() for the frames of senders queued behind each other) and
 * read by tcp_rx.c; here are its ops: a burst's batch, a large message's
 * parts, and the ops it has nothing for.
 *
 * Shared state: as tcp_txq.c's (mu, the tx owner's frames).
 */
#include "tcp_int.h"

#include <errno.h>

/* A burst's batch in one system call (tw_txq_send()); a full socket ends
 * the burst after what it took (no error: the next send waits). */
static int sock_send(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
		     struct tcp_txreq *req, size_t k, bool first, struct tcp_waiter *me,
		     struct zap_ctx *ctx, bool *partial, size_t *whole, int *conn_err)
{
	size_t n = 0;
	int err = tw_txq_send(w, c, req, k, me, ctx, partial, first);

	(void)p;
	*conn_err = err == -EAGAIN ? 0 : req[0].err;
	while (n < k && req[n].done == TCP_HDR + req[n].len)
		n++;
	*whole = n;
	return err == -EAGAIN ? 0 : err;
}

/*
 * The next parts of @m from *@off on the connection @c (tx side owned, mu
 * held; dropped while writing): with nobody in line for the tx side, up
 * to TCP_BIG_BATCH parts in one sendmsg() (parts the full socket did not
 * start are cut, tw_txq_send()), else one; one of TCP_PART_SHORT bytes
 * while a spinning leader of ours wants its core back (big_yield() then
 * gives it); then, while more parts are to come, the frames queued
 * behind us meanwhile, written by us (tw_txq_flush()). *@off advances by
 * the parts written whole; *@partial: one (or a queued frame) was left
 * half written. tw_txq_send()'s result, or the connection's error when a
 * later part or a queued frame broke.
 */
static int big_parts(struct tcp_wire *w, struct tcp_conn *c, const struct zap_iov *m,
		     size_t *off, struct tcp_waiter *me, struct zap_ctx *ctx,
		     bool *partial)
{
	struct tcp_txreq r[TCP_BIG_BATCH];
	bool wanted = atomic_load_explicit(&tw_core_wanted, memory_order_relaxed);
	size_t n = 0, at = *off, most = c->txq || wanted ? 1 : TCP_BIG_BATCH;
	size_t part = wanted ? TCP_PART_SHORT : TCP_PART;

	while (n < most && at < m->len) {
		r[n] = (struct tcp_txreq){ .buf = (const char *)m->buf + at };
		r[n].len = m->len - at < part ? m->len - at : part;
		if (!at) {
			r[n].ext = 8;
			tw_hdr_put(r[n].hdr, c->ver, TCP_T_BEGIN, 8 + r[n].len);
			put_be64(r[n].hdr + TCP_HDR, m->len);
		} else {
			tw_hdr_put(r[n].hdr, c->ver, TCP_T_MORE, r[n].len);
		}
		at += r[n++].len;
	}
	int err = tw_txq_send(w, c, r, n, me, ctx, partial, true);
	for (size_t i = 0; i < n && r[i].done == tw_frame_bytes(&r[i]); i++)
		*off += r[i].len;
	if (!err && *partial)
		err = r[0].err ? r[0].err : -EPIPE;
	/* The frames that queued meanwhile go now, before the next part. */
	if (!err && c->txq && *off < m->len)
		err = tw_txq_flush(w, c, me, ctx, partial);
	return err;
}

/* The send_part op: big_parts(), as complete, more to come, or failed. */
static int sock_send_part(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
			  const struct zap_iov *m, size_t *off, struct tcp_waiter *me,
			  struct zap_ctx *ctx, bool *open, bool *partial, uint64_t *seen)
{
	int err = big_parts(w, c, m, off, me, ctx, partial);

	(void)p;
	(void)seen; /* a full socket is waited for inside tw_txq_send() */
	*open = *off && *off < m->len;
	return err ? err : *open ? -EINPROGRESS : 0;
}

/* What the socket path has no state for: nothing to look at, to wait for
 * or to release beyond the connection itself. */
static bool sock_no(const struct tcp_path *p)
{
	(void)p;
	return false;
}

static uint64_t sock_zero(const struct tcp_path *p)
{
	(void)p;
	return 0;
}

static bool sock_rx_pending(struct tcp_path *p, bool sleeping)
{
	(void)p;
	(void)sleeping;
	return false;
}

/* TCP_T_SHM on a connection without rings: a protocol error. */
static bool sock_rx_switch(struct tcp_path *p, bool commit)
{
	(void)p;
	(void)commit;
	return false;
}

static int sock_side_fd(const struct tcp_path *p)
{
	(void)p;
	return -1;
}

static bool sock_side_event(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p)
{
	(void)w;
	(void)c;
	(void)p;
	return false;
}

static void sock_end(struct tcp_path *p)
{
	(void)p;
}

static const struct tcp_path_ops sock_ops = {
	.name = NULL,
	.stays_hot = false,
	.coalesce = true,
	.upgraded = sock_no,
	.tx_pick = NULL, /* always itself */
	.send = sock_send,
	.send_part = sock_send_part,
	.consumed = sock_zero,
	.room = sock_zero,
	.tx_lost = sock_no,
	.rx = tw_rx_sock,
	.rx_always = sock_no,
	.rx_pending = sock_rx_pending,
	.rx_switch = sock_rx_switch,
	.side_fd = sock_side_fd,
	.side_event = sock_side_event,
	.end = sock_end,
};

struct tcp_path tw_path_sock = { &sock_ops };
