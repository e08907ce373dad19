/* SPDX-License-Identifier: MIT */
/*
 * What an operator sees of a wire: its counters (zap_stats()) and its
 * connections (zap_peer_list()). The counting itself happens where things
 * happen (see "Counters" in tcp_int.h for who writes what); this file
 * classifies close reasons and reads everything back under w->mu, which
 * the send and receive paths take anyway and hold only briefly.
 */
#include "tcp_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

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

	pthread_mutex_lock(&w->mu);
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
	pthread_mutex_unlock(&w->mu);
	/* The leader's, read without its lock: a recent value is all a
	 * gauge promises (and the budget changes with every round). */
	s.partial_bytes = ld(&w->st_partial_now);

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

	pthread_mutex_lock(&w->mu);
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
	pthread_mutex_unlock(&w->mu);
	return i > INT32_MAX ? INT32_MAX : (int)i;
}
