/* SPDX-License-Identifier: MIT */
/*
 * The handshakes under way, one list both accept paths keep (zap-conn.h,
 * "handshakes under way"): the TCP wire's accept thread and the accept
 * engine (conn_accept.c) both drop on deadline and make room the same
 * way, so the rule is written once.
 *
 * Shared state: none. A set belongs to the one thread that accepts.
 */
#include "zap-conn.h"

void zconn_pend_init(struct zconn_pend_set *s, unsigned cap)
{
	*s = (struct zconn_pend_set){ .cap = cap };
}

void zconn_pend_add(struct zconn_pend_set *s, struct zconn_pend *p)
{
	p->newer = NULL;
	p->older = s->newest;
	if (s->newest)
		s->newest->newer = p;
	else
		s->oldest = p;
	s->newest = p;
	s->count++;
}

void zconn_pend_del(struct zconn_pend_set *s, struct zconn_pend *p)
{
	if (p->newer)
		p->newer->older = p->older;
	else
		s->newest = p->older;
	if (p->older)
		p->older->newer = p->newer;
	else
		s->oldest = p->newer;
	p->newer = p->older = NULL;
	s->count--;
}

uint64_t zconn_pend_next_deadline(const struct zconn_pend_set *s)
{
	/* Deadlines follow the order of adding: the oldest's comes first. */
	return s->oldest ? s->oldest->deadline : UINT64_MAX;
}

struct zconn_pend *zconn_pend_expired(const struct zconn_pend_set *s, uint64_t now)
{
	return s->oldest && s->oldest->deadline <= now ? s->oldest : NULL;
}

struct zconn_pend *zconn_pend_oldest_evictable(const struct zconn_pend_set *s)
{
	for (struct zconn_pend *p = s->oldest; p; p = p->newer)
		if (p->evictable)
			return p;
	return NULL;
}

struct zconn_pend *zconn_pend_victim(const struct zconn_pend_set *s, unsigned *count,
				     unsigned *busiest)
{
	unsigned best = 0;

	for (const struct zconn_pend *p = s->oldest; p; p = p->newer)
		count[p->host]++;
	/* Ties go to the lowest bucket: which of two equally busy hosts
	 * gives one up matters to neither, and the TCP wire always chose so. */
	for (unsigned b = 1; b < ZCONN_HOST_BUCKETS; b++)
		if (count[b] > count[best])
			best = b;
	*busiest = best;
	for (struct zconn_pend *p = s->oldest; p; p = p->newer)
		if (p->evictable && (count[best] < 2 || p->host == best))
			return p;
	return NULL;
}
