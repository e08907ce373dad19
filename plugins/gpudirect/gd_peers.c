/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect instance's table of peers (one RC pair each): finding a
 * live pair for a send, adding a bootstrapped one, and driving every
 * pair's engine for the progress thread. Apart from verbs (it reaches the
 * pairs through their engines only), so the unit tests run it over the
 * in-memory queue-pair stand-in.
 *
 * Shared state: the list under gd_tp.mx (gd_instance.h: threads and lock
 * order); engines are called with references taken under it, outside it.
 */
#include <stdlib.h>
#include <string.h>

#include "gd_instance.h"

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

		if (gd_conn_error(p->conn)) {
			*pp = p->next;
			p->next = dead;
			dead = p;
			continue;
		}
		if (gd_peer_match(p->key, key) && (!best || (p->dialed && !best->dialed)))
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
			*pp = q->next;
			q->next = old;
			old = q;
			continue;
		}
		pp = &q->next;
	}
	p->next = t->peers;
	t->peers = p;
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

		t->peers = p->next;
		peer_drop(p);
	}
}
