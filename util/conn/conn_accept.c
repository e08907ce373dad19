/* SPDX-License-Identifier: MIT */
/*
 * The accept engine: concurrent handshakes with deadlines, a cap in
 * flight with eviction of an idle one (the busiest host's oldest), TLS,
 * and a length-prefixed
 * first message read whole before the caller allocates anything
 * (zap-conn.h).
 *
 * Shared state: none. One thread (the accept thread, or a test) makes
 * every call on an instance; the callbacks run on it.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "zap-addr.h"
#include "zap-conn.h"
#include "zap-tls.h"

enum hs_phase {
	HS_FREE = 0,
	HS_TLS,  /* the TLS handshake (cfg.tls) */
	HS_HDR,  /* reading the peer's header */
	HS_BODY, /* reading the rest of its message */
	HS_OUT,  /* answered: writing the answer */
	HS_OK,   /* reading the peer's confirmation */
};

struct hs {
	enum hs_phase ph;
	int fd;
	struct zconn_pend pend; /* in g->set: deadline, host, age (zap-conn.h) */
	size_t got, need, outlen, sent;
	void *pair;
	struct ztls_conn *tc; /* TLS over fd, or NULL */
	short ev;             /* what the next step waits for */
	uint8_t *in;          /* msg_max bytes */
	uint8_t *out;         /* out_max bytes */
	char src[ZAP_PEER_MAX];
};

struct zconn_acc {
	struct zconn_acc_cfg cfg;
	struct hs *v;
	struct zconn_pend_set set; /* the handshakes in flight, cap max_inflight */
	uint8_t *bufs;             /* every handshake's in and out, allocated up front */
	unsigned *count; /* handshakes per host bucket, while choosing whom to evict */
	struct zconn_acc_stats st;
};

int zconn_acc_new(const struct zconn_acc_cfg *cfg, struct zconn_acc **out)
{
	size_t per = cfg->msg_max + cfg->out_max;
	struct zconn_acc *g;

	if (!cfg->max_inflight || !cfg->hdr_len || cfg->msg_max < cfg->hdr_len ||
	    cfg->ack_len > cfg->msg_max || !cfg->msg_len || !cfg->on_msg ||
	    !cfg->on_ready || !cfg->on_fail || !cfg->what || !cfg->cap_var ||
	    !cfg->time_var)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cfg = *cfg;
	zconn_pend_init(&g->set, cfg->max_inflight);
	g->v = calloc(cfg->max_inflight, sizeof(*g->v));
	g->bufs = calloc(cfg->max_inflight, per);
	g->count = calloc(ZCONN_HOST_BUCKETS, sizeof(*g->count));
	if (!g->v || !g->bufs || !g->count) {
		free(g->v);
		free(g->bufs);
		free(g->count);
		free(g);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < cfg->max_inflight; i++) {
		g->v[i].in = g->bufs + i * per;
		g->v[i].out = g->v[i].in + cfg->msg_max;
	}
	*out = g;
	return 0;
}

static void hs_end(struct zconn_acc *g, struct hs *h, const char *why)
{
	if (h->pair)
		g->cfg.on_fail(g->cfg.user, h->pair);
	if (why && g->cfg.on_drop)
		g->cfg.on_drop(g->cfg.user, h->src, why);
	zconn_pend_del(&g->set, &h->pend);
	ztls_conn_free(h->tc);
	close(h->fd);
	h->tc = NULL;
	h->pair = NULL;
	h->ph = HS_FREE;
	g->st.inflight--;
}

void zconn_acc_free(struct zconn_acc *g)
{
	if (!g)
		return;
	for (unsigned i = 0; i < g->cfg.max_inflight; i++)
		if (g->v[i].ph != HS_FREE)
			hs_end(g, &g->v[i], NULL);
	free(g->v);
	free(g->bufs);
	free(g->count);
	free(g);
}

static struct hs *hs_of(struct zconn_pend *p)
{
	return (struct hs *)((char *)p - offsetof(struct hs, pend));
}

/*
 * Of the handshakes that have not delivered a whole message (they hold
 * nothing but their socket), the one to evict: from the source host
 * holding the most handshakes in flight, its oldest; else the oldest
 * (zconn_pend_victim()).
 */
static struct hs *hs_victim(struct zconn_acc *g)
{
	unsigned busiest;
	struct zconn_pend *p = zconn_pend_victim(&g->set, g->count, &busiest);

	memset(g->count, 0, ZCONN_HOST_BUCKETS * sizeof(*g->count));
	if (!p) /* the busiest host's handshakes have all delivered */
		p = zconn_pend_oldest_evictable(&g->set);
	return p ? hs_of(p) : NULL;
}

/* A free slot, or a handshake that has not delivered a whole message,
 * evicted (hs_victim()). */
static struct hs *hs_slot(struct zconn_acc *g)
{
	struct hs *old;
	char why[160];

	if (!zconn_pend_full(&g->set)) {
		for (unsigned i = 0; i < g->cfg.max_inflight; i++)
			if (g->v[i].ph == HS_FREE)
				return &g->v[i];
	}
	old = hs_victim(g);
	if (old) {
		g->st.evicted++;
		snprintf(why, sizeof(why),
			 "dropped unfinished to make room for a new connection "
			 "(%s handshakes in flight)",
			 g->cfg.cap_var);
		hs_end(g, old, why);
	}
	return old;
}

bool zconn_acc_room(const struct zconn_acc *g)
{
	return !zconn_pend_full(&g->set) || zconn_pend_oldest_evictable(&g->set);
}

int zconn_acc_add(struct zconn_acc *g, int fd, uint64_t now)
{
	struct hs *h = hs_slot(g);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct ztls_conn *tc = NULL;
	uint8_t *in, *out;
	char why[256];

	if (!h)
		return -EAGAIN;
	if (g->cfg.tls &&
	    ztls_conn_new(g->cfg.tls, fd, true, NULL, &tc, why, sizeof(why)))
		return -ENOMEM; /* no want_fp: only allocation fails */
	in = h->in;
	out = h->out;
	*h = (struct hs){ .ph = tc ? HS_TLS : HS_HDR,
			  .fd = fd,
			  .tc = tc,
			  .ev = POLLIN,
			  .pend = { .born = now,
				    .deadline = now + g->cfg.timeout_ns,
				    .evictable = true },
			  .need = g->cfg.hdr_len,
			  .in = in,
			  .out = out };
	/* The source, for logs: host and port as the address grammar spells it. */
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) ||
	    zaddr_format((struct sockaddr *)&ss, sl, -1, h->src, sizeof(h->src)))
		snprintf(h->src, sizeof(h->src), "?");
	else
		h->pend.host = zconn_host_bucket((struct sockaddr *)&ss, sl, NULL);
	zconn_pend_add(&g->set, &h->pend);
	g->st.inflight++;
	return 0;
}

unsigned zconn_acc_pollfds(const struct zconn_acc *g, struct pollfd *pfd, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < g->cfg.max_inflight && n < max; i++) {
		const struct hs *h = &g->v[i];

		if (h->ph == HS_FREE)
			continue;
		pfd[n++] = (struct pollfd){ .fd = h->fd, .events = h->ev };
	}
	return n;
}

int zconn_acc_timeout_ms(const struct zconn_acc *g, uint64_t now)
{
	uint64_t next = zconn_pend_next_deadline(&g->set);

	if (next == UINT64_MAX)
		return -1;
	if (next <= now)
		return 0;
	return (int)((next - now + 999999) / 1000000);
}

/* The peer's message is in: hand it over with who sent it. */
static int hs_message(struct zconn_acc *g, struct hs *h, char *why, size_t wl)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int rc;

	if (getpeername(h->fd, (struct sockaddr *)&ss, &sl)) {
		snprintf(why, wl, "getpeername: %s", strerror(errno));
		return -errno;
	}
	rc = g->cfg.on_msg(g->cfg.user, h->in, h->need, (struct sockaddr *)&ss, sl,
			   h->tc ? ztls_conn_peer_fp(h->tc) : "", &h->pair, h->out,
			   g->cfg.out_max, why, wl);
	if (rc < 0)
		return rc;
	h->outlen = (size_t)rc;
	h->sent = 0;
	h->ph = HS_OUT;
	h->pend.evictable = false; /* it holds a pair now */
	h->ev = POLLOUT;
	return 0;
}

/* Read what the current phase needs: 1 when complete, 0 for more later,
 * negative on error or end of file (@why). */
static int hs_read(struct hs *h, char *why, size_t wl)
{
	while (h->got < h->need) {
		ssize_t k = zconn_recv(h->fd, h->tc, h->in + h->got, h->need - h->got,
				       &h->ev, why, wl);

		if (k > 0) {
			h->got += (size_t)k;
			continue;
		}
		if (k == -EAGAIN)
			return 0;
		if (!k) {
			snprintf(why, wl, "closed during the handshake (%zu bytes in)",
				 h->got);
			return -ECONNRESET;
		}
		return (int)k;
	}
	return 1;
}

/* Write the answer: 1 when all written, 0 for later, negative on error
 * (@why). */
static int hs_write(struct hs *h, char *why, size_t wl)
{
	while (h->sent < h->outlen) {
		ssize_t k = zconn_send(h->fd, h->tc, h->out + h->sent,
				       h->outlen - h->sent, &h->ev, why, wl);

		if (k > 0) {
			h->sent += (size_t)k;
			continue;
		}
		if (k == -EAGAIN)
			return 0;
		return k ? (int)k : -EIO;
	}
	return 1;
}

/* The message is read up to what the phase needs: on to the next. 0, or
 * negative when refused (@why). */
static int hs_got(struct zconn_acc *g, struct hs *h, char *why, size_t wl)
{
	size_t len;
	int rc;

	if (h->ph == HS_BODY)
		return hs_message(g, h, why, wl);
	rc = g->cfg.msg_len(g->cfg.user, h->in, &len, why, wl);
	if (rc)
		return rc;
	if (len < g->cfg.hdr_len || len > g->cfg.msg_max) {
		snprintf(why, wl, "%s of %zu bytes (at most %zu)", g->cfg.what, len,
			 g->cfg.msg_max);
		return -EMSGSIZE;
	}
	h->ph = HS_BODY;
	h->need = len;
	return 0;
}

/* The answer is out: read the peer's confirmation (none: done at once). */
static void hs_sent(struct zconn_acc *g, struct hs *h)
{
	h->ph = HS_OK;
	h->ev = POLLIN;
	h->got = 0;
	h->need = g->cfg.ack_len;
}

static void hs_done(struct zconn_acc *g, struct hs *h)
{
	g->cfg.on_ready(g->cfg.user, h->pair);
	h->pair = NULL;
	g->st.ready++;
	hs_end(g, h, NULL);
}

static void hs_run(struct zconn_acc *g, struct hs *h)
{
	char why[256] = "";
	int rc;

	for (;;) {
		switch (h->ph) {
		case HS_HDR:
		case HS_BODY:
			rc = hs_read(h, why, sizeof(why));
			if (rc <= 0)
				goto out;
			rc = hs_got(g, h, why, sizeof(why));
			if (rc)
				goto refused;
			continue;
		case HS_TLS:
			rc = ztls_handshake(h->tc, &h->ev, why, sizeof(why));
			if (!rc)
				return;
			if (rc < 0)
				goto refused;
			h->ph = HS_HDR;
			h->ev = POLLIN;
			continue;
		case HS_OUT:
			rc = hs_write(h, why, sizeof(why));
			if (rc <= 0)
				goto out;
			hs_sent(g, h);
			continue;
		case HS_OK:
			rc = hs_read(h, why, sizeof(why));
			if (rc <= 0) {
				if (rc)
					snprintf(why, sizeof(why),
						 "peer gave up before the pair was ready");
				goto out;
			}
			hs_done(g, h);
			return;
		case HS_FREE:
			return;
		}
	}
refused:
	g->st.refused++;
	hs_end(g, h, why);
	return;
out:
	if (rc < 0)
		hs_end(g, h, why);
}

static void hs_late(const struct zconn_acc *g, enum hs_phase ph, char *why, size_t wl)
{
	if (ph == HS_TLS)
		snprintf(why, wl, "no TLS handshake before the deadline (%s)",
			 g->cfg.time_var);
	else if (ph <= HS_BODY)
		snprintf(why, wl, "no %s before the deadline (%s)", g->cfg.what,
			 g->cfg.time_var);
	else
		snprintf(why, wl, "peer did not confirm before the deadline (%s)",
			 g->cfg.time_var);
}

void zconn_acc_step(struct zconn_acc *g, uint64_t now)
{
	struct zconn_pend *p;
	char why[160];

	for (unsigned i = 0; i < g->cfg.max_inflight; i++)
		if (g->v[i].ph != HS_FREE)
			hs_run(g, &g->v[i]);
	while ((p = zconn_pend_expired(&g->set, now))) {
		struct hs *h = hs_of(p);

		g->st.timed_out++;
		hs_late(g, h->ph, why, sizeof(why));
		hs_end(g, h, why);
	}
}

void zconn_acc_get_stats(const struct zconn_acc *g, struct zconn_acc_stats *st)
{
	*st = g->st;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int zconn_acc_serve(struct zconn_acc *g, int lfd, int wake)
{
	unsigned max = g->cfg.max_inflight + 2;
	struct pollfd *pf = calloc(max, sizeof(*pf));

	if (!pf)
		return -ENOMEM;
	for (;;) {
		uint64_t now = mono_ns();
		unsigned n;

		pf[0] = (struct pollfd){ .fd = wake, .events = POLLIN };
		/* With no room, new connections wait in the listen backlog. */
		pf[1] = (struct pollfd){ .fd = lfd,
					 .events = zconn_acc_room(g) ? POLLIN : 0 };
		n = 2 + zconn_acc_pollfds(g, pf + 2, max - 2);
		if (poll(pf, n, zconn_acc_timeout_ms(g, now)) < 0 && errno != EINTR) {
			int rc = -errno;

			free(pf);
			return rc;
		}
		if (pf[0].revents)
			break;
		now = mono_ns();
		while ((pf[1].revents & POLLIN) && zconn_acc_room(g)) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

			if (fd < 0)
				break;
			if (zconn_acc_add(g, fd, now))
				close(fd);
		}
		zconn_acc_step(g, now);
	}
	free(pf);
	return 0;
}
