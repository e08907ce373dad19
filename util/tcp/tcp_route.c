/* SPDX-License-Identifier: MIT */
/*
 * Routes and peers by address (mu held throughout, tcp_int.h, "Locking").
 *
 * Routes are found by address on every send, and peers by address on
 * every registration (a connect burst registers thousands while senders
 * and the leader wait for mu), so both by hash, not by walking a list as
 * long as the number of peers; w->routes and w->peers link them all for
 * the walks that need every one (a peer's end, statistics, close). The
 * bottom of the wire's call graph with tcp_ready.c: it calls nothing in
 * the other files.
 */
#include "tcp_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * @addr's bucket in a table of @n (a power of two) buckets. FNV-1a from a
 * secret start (w->hash_seed, drawn at open), so that a peer choosing the
 * ports it claims cannot aim them all at one bucket.
 */
static size_t addr_bucket(const struct tcp_wire *w, const char *addr, size_t n)
{
	uint64_t h = 1469598103934665603ull ^ w->hash_seed;

	for (const unsigned char *c = (const unsigned char *)addr; *c; c++)
		h = (h ^ *c) * 1099511628211ull;
	return (size_t)(h & (n - 1));
}

static size_t route_bucket(const struct tcp_wire *w, const char *addr)
{
	return addr_bucket(w, addr, w->rtab_n);
}

/* Grow the table to keep about one route a bucket; on failure keep the
 * one there is (slower, still right). */
static void route_rehash(struct tcp_wire *w)
{
	size_t n = w->rtab_n ? 2 * w->rtab_n : 64;
	struct tcp_route **t = calloc(n, sizeof(*t));

	if (!t)
		return;
	free(w->rtab);
	w->rtab = t;
	w->rtab_n = n;
	for (struct tcp_route *r = w->routes; r; r = r->next) {
		size_t b = route_bucket(w, r->addr);
		r->hnext = t[b];
		t[b] = r;
	}
}

void tw_route_add(struct tcp_wire *w, struct tcp_route *r)
{
	size_t had = w->rtab_n;

	r->prev = NULL;
	r->next = w->routes;
	if (w->routes)
		w->routes->prev = r;
	w->routes = r;
	r->hnext = NULL;
	if (++w->nroutes > w->rtab_n)
		route_rehash(w);
	if (!w->rtab_n || w->rtab_n != had)
		return; /* no table (found by the list), or rebuilt with @r */
	size_t b = route_bucket(w, r->addr);
	r->hnext = w->rtab[b];
	w->rtab[b] = r;
}

/*
 * The route each thread found last, for the next send to the same peer:
 * hashing the address was the largest cost of a small send after the
 * copy (bench/instructions.sh; bench/MEASUREMENTS.md, "send-instructions").
 * Valid while its wire's route_gen is the one it was found under: every
 * route freed moves route_gen on, to a value no wire had before (so a
 * wire opened where a closed one was has none of its routes' values).
 * initial-exec, as default.c's small blocks, for the same reason: no
 * __tls_get_addr() call in every send ("recv-tls"). In libzap.so that
 * costs nothing; the uma plugin, which links this wire too and is
 * dlopen()ed, takes these 24 bytes from the static TLS glibc keeps spare
 * for such libraries.
 */
static atomic_uint_fast64_t route_gens;
static _Thread_local struct {
	const struct tcp_wire *w;
	uint64_t gen;
	struct tcp_route *r;
} route_last __attribute__((tls_model("initial-exec")));

void tw_route_gen_next(struct tcp_wire *w)
{
	uint64_t g = atomic_fetch_add_explicit(&route_gens, 1, memory_order_relaxed);

	w->route_gen = g + 1;
}

static struct tcp_route *route_lookup(struct tcp_wire *w, const char *addr)
{
	if (!w->rtab_n) {
		for (struct tcp_route *r = w->routes; r; r = r->next)
			if (!strcmp(r->addr, addr))
				return r;
		return NULL;
	}
	for (struct tcp_route *r = w->rtab[route_bucket(w, addr)]; r; r = r->hnext)
		if (!strcmp(r->addr, addr))
			return r;
	return NULL;
}

struct tcp_route *tw_route_find(struct tcp_wire *w, const char *addr)
{
	TW_HELD(w);
	if (route_last.w == w && route_last.gen == w->route_gen &&
	    !strcmp(route_last.r->addr, addr))
		return route_last.r;
	struct tcp_route *r = route_lookup(w, addr);
	if (r) {
		route_last.w = w;
		route_last.gen = w->route_gen;
		route_last.r = r;
	}
	return r;
}

/* Take @r off its peer's list of routes (a few: its address, the
 * addresses dialed to reach it). */
static void route_unpeer(struct tcp_route *r)
{
	if (!r->peer)
		return;
	for (struct tcp_route **pp = &r->peer->routes; *pp; pp = &(*pp)->pnext)
		if (*pp == r) {
			*pp = r->pnext;
			break;
		}
	r->peer = NULL;
	r->pnext = NULL;
}

struct tcp_route *tw_route_set(struct tcp_wire *w, const char *addr, struct tcp_peer *p)
{
	struct tcp_route *r = tw_route_find(w, addr);
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return NULL;
		snprintf(r->addr, sizeof(r->addr), "%s", addr);
		tw_route_add(w, r);
	}
	/* The newest registration wins: an address now names this instance
	 * (a restarted peer on the same port is a new instance). */
	if (r->peer != p) {
		route_unpeer(r);
		r->peer = p;
		r->pnext = p->routes;
		p->routes = r;
	}
	r->contested = false;
	return r;
}

void tw_route_del(struct tcp_wire *w, struct tcp_route *dead)
{
	TW_HELD(w);
	if (w->rtab_n)
		for (struct tcp_route **pp = &w->rtab[route_bucket(w, dead->addr)]; *pp;
		     pp = &(*pp)->hnext)
			if (*pp == dead) {
				*pp = dead->hnext;
				break;
			}
	route_unpeer(dead);
	if (dead->prev)
		dead->prev->next = dead->next;
	else
		w->routes = dead->next;
	if (dead->next)
		dead->next->prev = dead->prev;
	w->nroutes--;
	tw_route_gen_next(w);
	free(dead);
}

/* Every route to @p goes (its last connection went): its own list, not a
 * walk of every route, so that thousands of peers leaving at once cost
 * each its own routes under w->mu. */
void tw_peer_drop_routes(struct tcp_wire *w, struct tcp_peer *p)
{
	TW_HELD(w);
	while (p->routes)
		tw_route_del(w, p->routes);
}

/* Grow the peers' table to keep about one a bucket; on failure keep the
 * one there is (slower, still right). */
static void peer_rehash(struct tcp_wire *w)
{
	size_t n = w->ptab_n ? 2 * w->ptab_n : 64;
	struct tcp_peer **t = calloc(n, sizeof(*t));

	if (!t)
		return;
	free(w->ptab);
	w->ptab = t;
	w->ptab_n = n;
	for (struct tcp_peer *p = w->peers; p; p = p->next) {
		size_t b = addr_bucket(w, p->addr, n);
		p->hnext = t[b];
		t[b] = p;
	}
}

/* The peer @rid at @addr, or NULL. */
struct tcp_peer *tw_peer_find(struct tcp_wire *w, uint64_t rid, const char *addr)
{
	TW_HELD(w);
	struct tcp_peer *p = w->ptab_n ? w->ptab[addr_bucket(w, addr, w->ptab_n)]
				       : w->peers;

	for (; p; p = w->ptab_n ? p->hnext : p->next)
		if (p->rid == rid && !strcmp(p->addr, addr))
			return p;
	return NULL;
}

void tw_peer_add(struct tcp_wire *w, struct tcp_peer *p)
{
	TW_HELD(w);
	size_t had = w->ptab_n;

	p->prev = NULL;
	p->next = w->peers;
	if (w->peers)
		w->peers->prev = p;
	w->peers = p;
	p->hnext = NULL;
	if (++w->npeers > w->ptab_n)
		peer_rehash(w);
	if (!w->ptab_n || w->ptab_n != had)
		return; /* no table (found by the list), or rebuilt with @p */
	size_t b = addr_bucket(w, p->addr, w->ptab_n);
	p->hnext = w->ptab[b];
	w->ptab[b] = p;
}

/* Unlink @p from the list and the table (the caller frees it). */
void tw_peer_del(struct tcp_wire *w, struct tcp_peer *p)
{
	TW_HELD(w);
	if (w->ptab_n)
		for (struct tcp_peer **pp = &w->ptab[addr_bucket(w, p->addr, w->ptab_n)];
		     *pp; pp = &(*pp)->hnext)
			if (*pp == p) {
				*pp = p->hnext;
				break;
			}
	if (p->prev)
		p->prev->next = p->next;
	else
		w->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	w->npeers--;
}
