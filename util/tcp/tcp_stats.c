/* SPDX-License-Identifier: MIT */
/*
 * What an operator sees of a wire: its counters (zap_stats()), its
 * connections (zap_peer_list()) and its events (zap_events()). The
 * counting itself happens where things happen (see "Counters" and
 * "Events" in tcp_int.h for who writes what); this file classifies close
 * reasons, keeps the event ring, and reads everything back under w->mu,
 * which the send and receive paths take anyway and hold only briefly.
 */
#include "tcp_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The event ring (see "Events" in tcp_int.h): all under mu but @lost. */
struct tcp_events {
	pthread_mutex_t mu;
	unsigned head, n; /* the oldest, and how many */
	_Atomic uint64_t lost;
	struct zap_event ev[TCP_EV_MAX];
};

int tw_close_why(int err)
{
	switch (err < 0 ? -err : err) {
	case EMSGSIZE:
		return ZAP_CLOSE_OVERSIZE;
	case EPROTO:
	case EBADMSG:
		return ZAP_CLOSE_PROTOCOL;
	case EACCES:
	case EKEYREJECTED:
		return ZAP_CLOSE_TLS;
	case EPIPE:
		return ZAP_CLOSE_PEER_EOF;
	case ECONNRESET:
	case ECONNABORTED:
	case ENOTCONN:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENETDOWN:
	case EIO:
		return ZAP_CLOSE_PEER_RESET;
	case ETIMEDOUT:
		return ZAP_CLOSE_HANDSHAKE;
	case ECANCELED:
		return ZAP_CLOSE_SEND_ABORTED;
	case ESHUTDOWN:
		return ZAP_CLOSE_SHUTDOWN;
	default:
		return ZAP_CLOSE_OTHER;
	}
}

void tw_conn_count_gone(struct tcp_wire *w, const struct tcp_conn *c)
{
	w->gone_tx_msgs += c->tx_msgs;
	w->gone_tx_bytes += c->tx_bytes;
	w->gone_rx_msgs += atomic_load_explicit(&c->rx_msgs, memory_order_relaxed);
	w->gone_rx_bytes += atomic_load_explicit(&c->rx_bytes, memory_order_relaxed);
	if (c->rx_msg) /* freed with the connection: a partial message lost */
		tw_count(&w->st_drop_partial, 1);
	tw_count_close(w, c->why);
	tw_event(w, ZAP_EVENT_DISCONNECTED, c->why, c, NULL, c->rx_why);
}

static uint64_t ld(const _Atomic uint64_t *n)
{
	return atomic_load_explicit(n, memory_order_relaxed);
}

void tcp_wire_obs(struct tcp_wire *w, struct zap_stats *out)
{
	struct zap_stats s = { .size = sizeof(s) };
	uint64_t closed = 0;

	/* Closes before opens: a close seen here had its open counted. */
	for (size_t i = 0; i < ZAP_CLOSE_REASON_SLOTS; i++) {
		s.conns_closed[i] = ld(&w->st_closed[i]);
		closed += s.conns_closed[i];
	}
	s.conns_dialed = ld(&w->st_dialed);
	s.conns_accepted = ld(&w->st_accepted);
	s.conns_open = s.conns_dialed + s.conns_accepted > closed
			       ? s.conns_dialed + s.conns_accepted - closed
			       : 0;
	s.shm_upgrades = ld(&w->st_shm_up);
	s.shm_refused = ld(&w->st_shm_refused);
	s.drops_partial = ld(&w->st_drop_partial);
	s.rxq_limit = w->rxq_max;
	s.partial_limit = w->partial_max;

	tw_lock(w);
	s.msgs_sent = w->gone_tx_msgs;
	s.bytes_sent = w->gone_tx_bytes;
	s.msgs_received = w->gone_rx_msgs;
	s.bytes_received = w->gone_rx_bytes;
	for (const struct tcp_conn *c = w->conns; c; c = c->next) {
		s.msgs_sent += c->tx_msgs;
		s.bytes_sent += c->tx_bytes;
		s.msgs_received += ld(&c->rx_msgs);
		s.bytes_received += ld(&c->rx_bytes);
	}
	for (const struct tcp_peer *p = w->peers; p; p = p->next)
		s.peers++;
	s.rxq_msgs = w->qmsgs;
	s.rxq_bytes = w->qbytes;
	if (atomic_load(&w->shut))
		s.drops_shutdown = w->qmsgs;
	tw_unlock(w);
	/* The leader's, read without its lock: a recent value is all a
	 * gauge promises (and the budget changes with every round). */
	s.partial_bytes = ld(&w->st_partial_now);
	if (w->ev)
		s.events_lost = ld(&w->ev->lost);

	memcpy((char *)out + sizeof(out->size), (char *)&s + sizeof(s.size),
	       (out->size < sizeof(s) ? out->size : sizeof(s)) - sizeof(s.size));
}

static void conn_info(const struct tcp_conn *c, uint64_t now, struct zap_peer_info *e)
{
	uint64_t last = ld(&c->last_ms);

	snprintf(e->peer, sizeof(e->peer), "%s", c->raddr);
	snprintf(e->identity, sizeof(e->identity), "%s", c->tls ? c->fp : c->ident);
	snprintf(e->path, sizeof(e->path), "%s", tw_conn_path(c));
	e->tls = c->tls != NULL;
	e->dialed = c->dialed;
	e->conn_id = c->id;
	e->msgs_sent = c->tx_msgs;
	e->bytes_sent = c->tx_bytes;
	e->msgs_received = ld(&c->rx_msgs);
	e->bytes_received = ld(&c->rx_bytes);
	e->idle_ms = now > last ? now - last : 0;
	e->rtt_us = e->rtt_var_us = -1;
	if (!c->local) {
		struct tcp_info ti;
		socklen_t sl = sizeof(ti);
		memset(&ti, 0, sizeof(ti));
		if (!getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &sl) &&
		    sl >= offsetof(struct tcp_info, tcpi_rttvar) +
				    sizeof(ti.tcpi_rttvar)) {
			e->rtt_us = ti.tcpi_rtt;
			e->rtt_var_us = ti.tcpi_rttvar;
		}
	}
}

int tcp_wire_peers(struct tcp_wire *w, struct zap_peer_info *out, size_t n)
{
	uint64_t now = now_coarse_ms();
	size_t i = 0;

	tw_lock(w);
	for (const struct tcp_conn *c = w->conns; c; c = c->next) {
		if (c->dead)
			continue;
		if (i < n) {
			struct zap_peer_info e = { .size = sizeof(e) };
			struct zap_peer_info *d =
				(struct zap_peer_info *)(void *)((char *)out +
								 i * out->size);
			conn_info(c, now, &e);
			memcpy((char *)d + sizeof(d->size), (char *)&e + sizeof(e.size),
			       (out->size < sizeof(e) ? out->size : sizeof(e)) -
				       sizeof(e.size));
		}
		i++;
	}
	tw_unlock(w);
	return i > INT32_MAX ? INT32_MAX : (int)i;
}

/* ---- events ------------------------------------------------------------- */

int tw_events_open(struct tcp_wire *w)
{
	w->ev = calloc(1, sizeof(*w->ev));
	if (!w->ev)
		return -ENOMEM;
	pthread_mutex_init(&w->ev->mu, NULL);
	atomic_init(&w->ev->lost, 0);
	return 0;
}

void tw_events_close(struct tcp_wire *w)
{
	if (!w->ev)
		return;
	pthread_mutex_destroy(&w->ev->mu);
	free(w->ev);
	w->ev = NULL;
}

/* The first "sha256:<64 hex>" in @s, into @out; "" when there is none. */
static void key_in(const char *s, char *out, size_t len)
{
	out[0] = '\0';
	for (const char *p = s ? strstr(s, "sha256:") : NULL; p;
	     p = strstr(p + 1, "sha256:")) {
		size_t k = strspn(p + 7, "0123456789abcdef");
		if (k == 64 && len > 7 + 64) {
			memcpy(out, p, 7 + 64);
			out[7 + 64] = '\0';
			return;
		}
	}
}

void tw_event(struct tcp_wire *w, int type, int reason, const struct tcp_conn *c,
	      const char *peer, const char *detail)
{
	struct zap_event e = { .size = sizeof(e), .type = type, .reason = reason };
	struct timespec ts;

	if (!w->ev)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	e.time_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	e.conn_id = c->id;
	e.dialed = c->dialed;
	snprintf(e.peer, sizeof(e.peer), "%s",
		 peer          ? peer
		 : c->raddr[0] ? c->raddr
			       : c->src);
	snprintf(e.identity, sizeof(e.identity), "%s", c->tls ? c->fp : c->ident);
	if (type == ZAP_EVENT_REFUSED && !e.identity[0])
		key_in(detail, e.identity, sizeof(e.identity));
	snprintf(e.path, sizeof(e.path), "%s", tw_conn_path(c));
	if (detail && (type == ZAP_EVENT_REFUSED || type == ZAP_EVENT_DISCONNECTED))
		snprintf(e.detail, sizeof(e.detail), "%s", detail);

	struct tcp_events *q = w->ev;
	pthread_mutex_lock(&q->mu);
	if (q->n == TCP_EV_MAX) { /* nobody took them: the oldest go */
		q->head = (q->head + 1) % TCP_EV_MAX;
		q->n--;
		tw_count(&q->lost, 1);
	}
	q->ev[(q->head + q->n) % TCP_EV_MAX] = e;
	q->n++;
	pthread_mutex_unlock(&q->mu);
}

int tcp_wire_events(struct tcp_wire *w, struct zap_event *out, size_t n)
{
	struct tcp_events *q = w->ev;
	size_t k = 0;

	pthread_mutex_lock(&q->mu);
	for (; k < n && q->n; k++) {
		struct zap_event *d = (struct zap_event *)(void *)((char *)out +
								   k * out->size);
		memcpy((char *)d + sizeof(d->size),
		       (char *)&q->ev[q->head] + sizeof(d->size),
		       (out->size < sizeof(*d) ? out->size : sizeof(*d)) -
			       sizeof(d->size));
		q->head = (q->head + 1) % TCP_EV_MAX;
		q->n--;
	}
	pthread_mutex_unlock(&q->mu);
	return (int)k;
}
