/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect instance's table of peers (one RC pair each): finding a
 * live pair for a send, adding a bootstrapped one, and driving every
 * pair's engine for the progress thread. Apart from verbs (it reaches the
 * pairs through their engines only), so the unit tests run it over the
 * in-memory queue-pair stand-in.
 *
 * Shared state: the list under gd_tp.mx (gd_instance.h: threads and lock
 * order); engines are called with references taken under it, outside it,
 * but for the counters, which are copied under it (an engine's lock nests
 * inside gd_tp.mx, and gd_conn_stats() holds it only to copy).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_instance.h"

/* Add @p's pair's counts to @sum. */
static void counts_add(struct gd_conn_stats *sum, const struct gd_peer *p)
{
	struct gd_conn_stats c;

	gd_conn_stats(p->conn, &c);
	sum->msgs_sent += c.msgs_sent;
	sum->bytes_sent += c.bytes_sent;
	sum->msgs_received += c.msgs_received;
	sum->bytes_received += c.bytes_received;
	sum->credit_waits += c.credit_waits;
}

/* @p leaves the table (gd_tp.mx held): keep what its pair counted, and
 * count it closed for @reason. Its traffic after this (none: it failed,
 * was replaced, or the instance is going) is not counted. */
static void peer_leave(struct gd_tp *t, struct gd_peer *p, int reason)
{
	counts_add(&t->gone, p);
	t->conns_closed[reason]++;
}

static void peer_drop(struct gd_peer *p)
{
	gd_conn_shutdown(p->conn);
	gd_conn_put(p->conn);
}

/* A live pair to @key, referenced; failed pairs leave the table (they are
 * rebuilt by the caller). Dialled pairs first: a side sends on one pair. */
struct gd_conn *gd_find_live(struct gd_tp *t, const char *key)
{
	struct gd_peer **pp = &t->peers, *dead = NULL, *best = NULL;

	pthread_mutex_lock(&t->mx);
	while (*pp) {
		struct gd_peer *p = *pp;

		int err = gd_conn_error(p->conn);

		if (err) {
			/* A protocol violation, else a completion error: the
			 * peer went away or reset the pair. */
			peer_leave(t, p,
				   err == -EPROTO ? ZAP_CLOSE_PROTOCOL
						  : ZAP_CLOSE_PEER_RESET);
			*pp = p->next;
			p->next = dead;
			dead = p;
			continue;
		}
		if (zconn_peer_match(p->key, key) &&
		    (!best || (p->dialed && !best->dialed)))
			best = p;
		pp = &p->next;
	}
	if (best)
		gd_conn_get(best->conn);
	pthread_mutex_unlock(&t->mx);
	while (dead) {
		struct gd_peer *n = dead->next;

		peer_drop(dead);
		dead = n;
	}
	return best ? best->conn : NULL;
}

void gd_add_peer(struct gd_tp *t, struct gd_peer *p)
{
	struct gd_peer **pp, *old = NULL;

	pthread_mutex_lock(&t->mx);
	/* A peer dials again only when its side of the old pair broke; with
	 * TLS only the same key replaces a pair (another key claiming the
	 * instance id is another peer). */
	for (pp = &t->peers; *pp && !p->dialed;) {
		struct gd_peer *q = *pp;

		if (!q->dialed && q->instance == p->instance && !strcmp(q->fp, p->fp)) {
			peer_leave(t, q, ZAP_CLOSE_PEER_EOF); /* retired */
			*pp = q->next;
			q->next = old;
			old = q;
			continue;
		}
		pp = &q->next;
	}
	p->next = t->peers;
	t->peers = p;
	p->id = ++t->peer_ids;
	if (p->dialed)
		t->conns_dialed++;
	else
		t->conns_accepted++;
	pthread_mutex_unlock(&t->mx);
	while (old) {
		struct gd_peer *n = old->next;

		peer_drop(old);
		old = n;
	}
}

void gd_peers_progress(struct gd_tp *t)
{
	struct gd_conn *few[64], **cs = few;
	size_t n = 0, cap = 64;

	/* Every pair, however many: a snapshot of references taken under the
	 * lock (grown outside the fixed array when the table is larger),
	 * engines driven outside it. */
	pthread_mutex_lock(&t->mx);
	for (struct gd_peer *p = t->peers; p; p = p->next) {
		if (n == cap) {
			struct gd_conn **m = malloc(2 * cap * sizeof(*m));

			if (!m)
				break; /* out of memory: these this turn */
			memcpy(m, cs, n * sizeof(*m));
			if (cs != few)
				free(cs);
			cs = m;
			cap *= 2;
		}
		gd_conn_get(p->conn);
		cs[n++] = p->conn;
	}
	pthread_mutex_unlock(&t->mx);
	for (size_t i = 0; i < n; i++) {
		gd_conn_progress(cs[i]);
		gd_conn_put(cs[i]);
	}
	if (cs != few)
		free(cs);
}

void gd_peers_drop_all(struct gd_tp *t)
{
	while (t->peers) {
		struct gd_peer *p = t->peers;

		peer_leave(t, p, ZAP_CLOSE_SHUTDOWN);
		t->peers = p->next;
		peer_drop(p);
	}
}

/* Whether a pair before @p in the table goes to the same peer. */
static bool seen_before(const struct gd_tp *t, const struct gd_peer *p)
{
	for (const struct gd_peer *q = t->peers; q != p; q = q->next)
		if (!strcmp(q->key, p->key))
			return true;
	return false;
}

void gd_peers_stats(struct gd_tp *t, struct zap_stats *out)
{
	struct zap_stats s = { .size = sizeof(s) };
	struct gd_conn_stats sum;
	uint64_t closed = 0;

	pthread_mutex_lock(&t->mx);
	sum = t->gone;
	for (struct gd_peer *p = t->peers; p; p = p->next) {
		counts_add(&sum, p);
		/* A peer usually has one pair; two while both ends dialed. */
		s.peers += !seen_before(t, p);
	}
	s.msgs_sent = sum.msgs_sent;
	s.bytes_sent = sum.bytes_sent;
	s.msgs_received = sum.msgs_received;
	s.bytes_received = sum.bytes_received;
	s.credit_waits = sum.credit_waits;
	s.conns_dialed = t->conns_dialed;
	s.conns_accepted = t->conns_accepted;
	for (int i = 0; i < ZAP_CLOSE_REASON_SLOTS; i++) {
		s.conns_closed[i] = t->conns_closed[i];
		closed += t->conns_closed[i];
	}
	s.conns_open = s.conns_dialed + s.conns_accepted - closed;
	pthread_mutex_unlock(&t->mx);
	if (t->pinctr)
		s.pinned_bytes = __atomic_load_n(t->pinctr, __ATOMIC_RELAXED);
	zap_plugin_put_sized(out, &s, sizeof(s));
}

int gd_peers_list(struct gd_tp *t, struct zap_peer_info *out, size_t n)
{
	size_t stride = n ? out->size : 0, i = 0;

	pthread_mutex_lock(&t->mx);
	for (struct gd_peer *p = t->peers; p; p = p->next, i++) {
		struct zap_peer_info e = { .size = sizeof(e),
					   .path = "rdma",
					   .tls = p->fp[0] != '\0',
					   .dialed = p->dialed,
					   .conn_id = p->id,
					   .rtt_us = -1, /* verbs keep none */
					   .rtt_var_us = -1 };
		struct gd_conn_stats c;

		if (i >= n)
			continue; /* counting the rest */
		gd_conn_stats(p->conn, &c);
		snprintf(e.peer, sizeof(e.peer), "%s", p->key);
		snprintf(e.identity, sizeof(e.identity), "%s", p->fp);
		e.msgs_sent = c.msgs_sent;
		e.bytes_sent = c.bytes_sent;
		e.msgs_received = c.msgs_received;
		e.bytes_received = c.bytes_received;
		e.idle_ms = c.idle_ms;
		zap_plugin_put_sized((char *)out + i * stride, &e, sizeof(e));
	}
	pthread_mutex_unlock(&t->mx);
	return i > INT32_MAX ? INT32_MAX : (int)i;
}
