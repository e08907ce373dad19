/* SPDX-License-Identifier: MIT */
/*
 * zap_metrics_render(): a transport's counters and peers in the
 * Prometheus text exposition format (version 0.0.4): for each family a
 * HELP and a TYPE line, then its samples, each family once. Label values
 * are escaped as the format says (backslash, double quote, newline). The
 * names are documented in docs/metrics.md; tests/check-prometheus.py
 * checks the output against the format's grammar.
 * No shared state: the text is built in memory owned by the call.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zap-private.h"

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_printf(struct sbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		sb_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* name="value", the value escaped. */
static void sb_label(struct sbuf *b, const char *name, const char *v)
{
	sb_printf(b, "%s%s=\"", b->len && b->p[b->len - 1] != '{' ? "," : "", name);
	for (; *v; v++) {
		if (*v == '\\')
			sb_add(b, "\\\\", 2);
		else if (*v == '"')
			sb_add(b, "\\\"", 2);
		else if (*v == '\n')
			sb_add(b, "\\n", 2);
		else
			sb_add(b, v, 1);
	}
	sb_add(b, "\"", 1);
}

struct who {
	const char *transport;
	const char *endpoint;
};

static void family(struct sbuf *b, const char *name, const char *type, const char *help)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{transport=..,endpoint=..[,extra=..]} value */
static void sample(struct sbuf *b, const struct who *w, const char *name,
		   const char *extra, const char *extra_v, uint64_t v)
{
	sb_printf(b, "%s{", name);
	sb_label(b, "transport", w->transport);
	sb_label(b, "endpoint", w->endpoint);
	if (extra)
		sb_label(b, extra, extra_v);
	sb_printf(b, "} %" PRIu64 "\n", v);
}

static void one(struct sbuf *b, const struct who *w, const char *name, const char *type,
		const char *help, uint64_t v)
{
	family(b, name, type, help);
	sample(b, w, name, NULL, NULL, v);
}

static void render_stats(struct sbuf *b, const struct who *w, const struct zap_stats *s)
{
	uint64_t closed[ZAP_CLOSE_REASON_COUNT] = { 0 };

	one(b, w, "zap_messages_sent_total", "counter", "Messages the transport took.",
	    s->msgs_sent);
	one(b, w, "zap_bytes_sent_total", "counter", "Payload bytes of those messages.",
	    s->bytes_sent);
	one(b, w, "zap_messages_received_total", "counter", "Complete messages received.",
	    s->msgs_received);
	one(b, w, "zap_bytes_received_total", "counter",
	    "Payload bytes of those messages.", s->bytes_received);
	one(b, w, "zap_connections_dialed_total", "counter",
	    "Connections this endpoint opened.", s->conns_dialed);
	one(b, w, "zap_connections_accepted_total", "counter",
	    "Connections peers opened to this endpoint.", s->conns_accepted);
	one(b, w, "zap_connections_open", "gauge",
	    "Connections open now, handshakes included.", s->conns_open);
	/* Reasons this build does not know count as other. */
	for (size_t i = 0; i < ZAP_CLOSE_REASON_SLOTS; i++)
		closed[i < ZAP_CLOSE_REASON_COUNT ? i : ZAP_CLOSE_OTHER] +=
			s->conns_closed[i];
	family(b, "zap_connections_closed_total", "counter",
	       "Connections closed or refused, by reason.");
	for (int i = 0; i < ZAP_CLOSE_REASON_COUNT; i++)
		sample(b, w, "zap_connections_closed_total", "reason",
		       zap_close_reason_name(i), closed[i]);
	one(b, w, "zap_shm_upgrades_total", "counter",
	    "Connections moved onto shared-memory rings.", s->shm_upgrades);
	one(b, w, "zap_shm_refused_total", "counter",
	    "Same-host upgrades tried or offered that did not happen.", s->shm_refused);
	family(b, "zap_messages_dropped_total", "counter",
	       "Messages lost, by reason: partly received from a peer that closed, "
	       "reset or stalled.");
	sample(b, w, "zap_messages_dropped_total", "reason", "partial", s->drops_partial);
	one(b, w, "zap_messages_pending_drop", "gauge",
	    "Received messages zap_close() will drop (after zap_shutdown()).",
	    s->drops_shutdown);
	one(b, w, "zap_rx_queue_messages", "gauge", "Messages waiting for zap_recv().",
	    s->rxq_msgs);
	one(b, w, "zap_rx_queue_bytes", "gauge", "Bytes waiting for zap_recv().",
	    s->rxq_bytes);
	one(b, w, "zap_rx_queue_limit_bytes", "gauge",
	    "ZAP_TCP_RX_QUEUE_BYTES: reading stops at this many queued bytes.",
	    s->rxq_limit);
	one(b, w, "zap_partial_bytes", "gauge",
	    "Memory held by partly received messages.", s->partial_bytes);
	one(b, w, "zap_partial_limit_bytes", "gauge",
	    "ZAP_TCP_PARTIAL_BYTES: the budget of partly received messages.",
	    s->partial_limit);
	one(b, w, "zap_peers", "gauge", "Peers with a connection now.", s->peers);
	one(b, w, "zap_events_lost_total", "counter",
	    "Events dropped because nobody took them with zap_events().", s->events_lost);
	one(b, w, "zap_retransmits_total", "counter",
	    "Frames sent again (no acknowledgement in time, or a hole reported).",
	    s->retransmits);
	one(b, w, "zap_peers_forgotten_total", "counter",
	    "Peers dropped from the peer table (idle, or evicted for room).",
	    s->peers_forgotten);
	one(b, w, "zap_frames_refused_total", "counter",
	    "Received frames refused: malformed, from an unproven (spoofed) source, "
	    "of a retired stream, or with the peer table full.",
	    s->frames_refused);
	one(b, w, "zap_credit_waits_total", "counter",
	    "Sends that had to wait for the peer to give back a receive slot.",
	    s->credit_waits);
	one(b, w, "zap_pinned_bytes", "gauge", "Memory registered with the NIC now.",
	    s->pinned_bytes);
}

/* The labels of a peer's samples. */
static void peer_labels(struct sbuf *b, const struct who *w, const char *name,
			const struct zap_peer_info *p)
{
	char id[24];

	snprintf(id, sizeof(id), "%" PRIu64, p->conn_id);
	sb_printf(b, "%s{", name);
	sb_label(b, "transport", w->transport);
	sb_label(b, "endpoint", w->endpoint);
	sb_label(b, "peer", p->peer);
	sb_label(b, "identity", p->identity);
	sb_label(b, "path", p->path);
	sb_label(b, "tls", p->tls ? "true" : "false");
	sb_label(b, "direction", p->dialed ? "dialed" : "accepted");
	sb_label(b, "conn", id);
	sb_add(b, "} ", 2);
}

enum { P_MSGS_TX, P_BYTES_TX, P_MSGS_RX, P_BYTES_RX, P_IDLE, P_RTT, P_N };

static void render_peers(struct sbuf *b, const struct who *w,
			 const struct zap_peer_info *p, size_t n)
{
	static const struct {
		const char *name, *type, *help;
	} fam[P_N] = {
		[P_MSGS_TX] = { "zap_peer_messages_sent_total", "counter",
				"Messages sent on this connection." },
		[P_BYTES_TX] = { "zap_peer_bytes_sent_total", "counter",
				 "Payload bytes sent on this connection." },
		[P_MSGS_RX] = { "zap_peer_messages_received_total", "counter",
				"Messages received on this connection." },
		[P_BYTES_RX] = { "zap_peer_bytes_received_total", "counter",
				 "Payload bytes received on this connection." },
		[P_IDLE] = { "zap_peer_idle_seconds", "gauge",
			     "Time since the last frame byte either way." },
		[P_RTT] = { "zap_peer_rtt_seconds", "gauge",
			    "The kernel's smoothed TCP round-trip estimate." },
	};

	for (int f = 0; f < P_N; f++) {
		family(b, fam[f].name, fam[f].type, fam[f].help);
		for (size_t i = 0; i < n; i++) {
			if (f == P_RTT && p[i].rtt_us < 0)
				continue;
			peer_labels(b, w, fam[f].name, &p[i]);
			if (f == P_IDLE)
				sb_printf(b, "%" PRIu64 ".%03u\n", p[i].idle_ms / 1000,
					  (unsigned)(p[i].idle_ms % 1000));
			else if (f == P_RTT)
				sb_printf(b, "%" PRId64 ".%06u\n", p[i].rtt_us / 1000000,
					  (unsigned)(p[i].rtt_us % 1000000));
			else
				sb_printf(b, "%" PRIu64 "\n",
					  f == P_MSGS_TX    ? p[i].msgs_sent
					  : f == P_BYTES_TX ? p[i].bytes_sent
					  : f == P_MSGS_RX  ? p[i].msgs_received
							    : p[i].bytes_received);
		}
	}
}

ZAP_EXPORT int zap_metrics_render(const struct zap_transport *t, char *buf, size_t len)
{
	struct zap_stats s = { .size = sizeof(s) };
	struct zap_peer_info *peers = NULL;
	struct sbuf b = { 0 };
	char addr[ZAP_PEER_MAX] = "";
	int rc, n = 0;

	zap__clear_error();
	if (!t || (!buf && len))
		return zap__fail(-EINVAL, "zap_metrics_render: NULL argument");
	rc = zap_stats(t, &s);
	if (rc)
		return rc;
	if (zap_transport_address(t, addr, sizeof(addr)) < 0)
		addr[0] = '\0';
	/* The peers may change between the count and the listing: retry
	 * with room for what came meanwhile. */
	for (int cap = 16;;) {
		struct zap_peer_info *np = realloc(peers, (size_t)cap * sizeof(*np));
		if (!np) {
			rc = -ENOMEM;
			goto out;
		}
		peers = np;
		peers[0].size = sizeof(*peers);
		n = zap_peer_list(t, peers, (size_t)cap);
		if (n == -EOPNOTSUPP) {
			n = 0; /* counters without a listing */
			break;
		}
		if (n < 0) {
			rc = n;
			goto out;
		}
		if (n <= cap)
			break;
		cap = n + 16;
	}
	zap__clear_error();
	const struct who w = { zap_transport_name(t), addr };
	render_stats(&b, &w, &s);
	render_peers(&b, &w, peers, (size_t)n);
	if (b.oom) {
		rc = -ENOMEM;
		goto out;
	}
	if (b.len > INT32_MAX) {
		rc = zap__fail(-EOVERFLOW, "zap_metrics_render: text too long");
		goto out;
	}
	if (len) {
		size_t k = b.len < len ? b.len : len - 1;
		memcpy(buf, b.p ? b.p : "", k);
		buf[k] = '\0';
	}
	rc = (int)b.len;
out:
	free(peers);
	free(b.p);
	return rc;
}
