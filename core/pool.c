/* SPDX-License-Identifier: MIT */
/*
 * The buffer pool (docs/architecture.md, "The buffer pool"): size classes over memory a
 * transport supplies, a cap, blocking allocation, idempotent release.
 *
 * Invariants (under pool->lock):
 *  - owned = sum of class sizes of every slab that holds memory (handed out
 *    or cached in free[]); owned <= cap, except transiently while an
 *    allocation has reserved room and is calling the backing unlocked;
 *  - in_use = sum of class sizes of slabs handed out;
 *  - slab records are never freed before the pool itself, so a second
 *    release of a buffer (also racing from two threads) finds its record
 *    and does nothing: `held` is exchanged atomically and only the release
 *    that turns it from 1 to 0 acts.
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "zap-private.h"

#define MIN_SHIFT 8 /* 256 bytes */
#define MAX_CLASSES 40

struct slab {
	struct zap_buffer pub; /* first: zap_buffer_release() gets this */
	struct zap_pool *pool;
	atomic_int held;
	unsigned cls;
	void *mem;
	void *dev;
	struct slab *next;     /* free[cls] or spare list */
	struct slab *all_next; /* every record, for the final teardown */
};

struct waiter {
	int efd;
	struct waiter *next;
};

struct zap_pool {
	pthread_mutex_t lock;
	struct zap_pool_backing b;
	uint64_t cap;
	unsigned nclasses;
	uint64_t owned, in_use, high_water, allocs, waits;
	struct slab *free[MAX_CLASSES];
	struct slab *spare; /* records without memory */
	struct slab *all;
	struct waiter *waiters;
	size_t users; /* buffers held + allocations in progress */
	bool closed;
};

static void *host_alloc(void *user, size_t len, void **dev)
{
	void *p = NULL;

	*dev = NULL;
	if (posix_memalign(&p, len >= 4096 ? 4096 : 64, len))
		return NULL;
	return p;
}

static void host_free(void *user, void *ptr, size_t len)
{
	free(ptr);
}

static uint64_t class_size(unsigned cls)
{
	return 1ull << (MIN_SHIFT + cls);
}

int zap__pool_new(const struct zap_pool_backing *backing, uint64_t cap, uint64_t max_buf,
		  struct zap_pool **out)
{
	struct zap_pool *p;
	unsigned n = 1;

	if (!out || !max_buf || max_buf > (1ull << (MIN_SHIFT + MAX_CLASSES - 1)))
		return zap__fail(-EINVAL, "pool: largest buffer %llu out of range",
				 (unsigned long long)max_buf);
	if (backing && (backing->size < offsetof(struct zap_pool_backing, free) +
						sizeof(backing->free) ||
			!backing->alloc || !backing->free))
		return zap__fail(-EINVAL, "pool: incomplete backing");
	while (class_size(n - 1) < max_buf)
		n++;
	if (cap < class_size(0))
		return zap__fail(-EINVAL, "pool: cap %llu below the smallest buffer",
				 (unsigned long long)cap);
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	if (backing) {
		memcpy(&p->b, backing,
		       backing->size < sizeof(p->b) ? backing->size : sizeof(p->b));
	} else {
		p->b.alloc = host_alloc;
		p->b.free = host_free;
	}
	p->b.size = sizeof(p->b);
	p->cap = cap;
	p->nclasses = n;
	*out = p;
	return 0;
}

static void wake_waiters(struct zap_pool *p)
{
	uint64_t one = 1;

	for (struct waiter *w = p->waiters; w; w = w->next)
		if (write(w->efd, &one, sizeof(one)) < 0) {
			/* Cannot fill: each waiter is woken at most a few times. */
		}
}

/* Give a slab's memory back to the backing; keep the record. Locked. */
static void drop_memory(struct zap_pool *p, struct slab *s)
{
	p->b.free(p->b.user, s->mem, class_size(s->cls));
	p->owned -= class_size(s->cls);
	s->mem = s->dev = NULL;
	s->next = p->spare;
	p->spare = s;
}

/* Free cached memory of other classes until @need more bytes fit. Locked. */
static void reclaim(struct zap_pool *p, uint64_t need)
{
	for (unsigned c = p->nclasses; c-- > 0 && p->owned + need > p->cap;) {
		while (p->free[c] && p->owned + need > p->cap) {
			struct slab *s = p->free[c];

			p->free[c] = s->next;
			drop_memory(p, s);
		}
	}
}

static void destroy(struct zap_pool *p)
{
	struct slab *s = p->all;

	while (s) {
		struct slab *next = s->all_next;

		free(s);
		s = next;
	}
	if (p->b.destroy)
		p->b.destroy(p->b.user);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Drop a user; destroy the pool if it was the last one after close. */
static void unuse(struct zap_pool *p)
{
	bool gone = --p->users == 0 && p->closed;

	pthread_mutex_unlock(&p->lock);
	if (gone)
		destroy(p);
}

static void slab_release(struct zap_buffer *b)
{
	struct slab *s = (struct slab *)b;
	struct zap_pool *p = s->pool;

	if (!atomic_exchange(&s->held, 0))
		return; /* released already */
	pthread_mutex_lock(&p->lock);
	p->in_use -= class_size(s->cls);
	if (p->closed) {
		drop_memory(p, s);
	} else {
		s->next = p->free[s->cls];
		p->free[s->cls] = s;
		wake_waiters(p);
	}
	unuse(p);
}

/* Wait until woken, cancelled or past the deadline. Locked on entry/exit. */
static int wait_for_room(struct zap_pool *p, struct zap_ctx *ctx)
{
	struct waiter w = { .next = p->waiters };
	struct pollfd pfd[2];
	int rc;

	rc = zap_ctx_err(ctx);
	if (rc)
		return rc;
	w.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w.efd < 0)
		return zap__fail(-errno, "pool: eventfd failed");
	p->waiters = &w;
	p->waits++;
	pthread_mutex_unlock(&p->lock);

	pfd[0] = (struct pollfd){ .fd = w.efd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = zap__ctx_fd(ctx), .events = POLLIN };
	while (poll(pfd, ctx ? 2 : 1, zap__ctx_timeout_ms(ctx)) < 0 && errno == EINTR)
		;

	pthread_mutex_lock(&p->lock);
	for (struct waiter **pp = &p->waiters; *pp; pp = &(*pp)->next)
		if (*pp == &w) {
			*pp = w.next;
			break;
		}
	close(w.efd);
	return zap_ctx_err(ctx);
}

/* The smallest class that holds @len bytes, in *@cls; -EMSGSIZE when no
 * class does or the class is above the cap, so waiting could never help. */
static int pool_class(const struct zap_pool *p, size_t len, unsigned *cls)
{
	uint64_t size;

	*cls = 0;
	while (*cls < p->nclasses && class_size(*cls) < len)
		(*cls)++;
	if (*cls == p->nclasses)
		return zap__fail(-EMSGSIZE,
				 "buffer of %zu bytes exceeds the pool's largest (%llu)",
				 len, (unsigned long long)class_size(p->nclasses - 1));
	size = class_size(*cls);
	if (size > p->cap)
		return zap__fail(
			-EMSGSIZE,
			"buffer of %zu bytes (class %llu) exceeds the pool cap %llu", len,
			(unsigned long long)size, (unsigned long long)p->cap);
	return 0;
}

/*
 * A new slab of class @cls (@size bytes) from the backing, in *@sp, the
 * room for it already counted in owned. Locked on entry and exit, unlocked
 * around the backing call: it may be slow (cuMemAllocManaged, hugepages).
 * On failure the room is given back.
 */
static int grow(struct zap_pool *p, unsigned cls, uint64_t size, struct slab **sp)
{
	struct slab *s;
	void *mem, *dev;

	pthread_mutex_unlock(&p->lock);
	mem = p->b.alloc(p->b.user, size, &dev);
	pthread_mutex_lock(&p->lock);
	if (!mem || p->closed) {
		if (mem)
			p->b.free(p->b.user, mem, size);
		p->owned -= size;
		wake_waiters(p);
		return mem ? zap__fail(-ESHUTDOWN, "pool is closed")
			   : zap__fail(-ENOMEM,
				       "pool: backing allocation of %llu bytes failed",
				       (unsigned long long)size);
	}
	s = p->spare;
	if (s) {
		p->spare = s->next;
	} else {
		s = calloc(1, sizeof(*s));
		if (!s) {
			p->b.free(p->b.user, mem, size);
			p->owned -= size;
			return -ENOMEM;
		}
		s->pool = p;
		s->all_next = p->all;
		p->all = s;
	}
	s->cls = cls;
	s->mem = mem;
	s->dev = dev;
	*sp = s;
	return 0;
}

/* Count @s (@size bytes) as handed out, unlock, and make it the caller's
 * buffer of @len bytes. The allocation's use becomes the buffer's: users
 * stays counted. */
static void hand_out(struct zap_pool *p, struct slab *s, uint64_t size, size_t len,
		     struct zap_buffer **out)
{
	p->in_use += size;
	if (p->in_use > p->high_water)
		p->high_water = p->in_use;
	p->allocs++;
	pthread_mutex_unlock(&p->lock);
	s->pub.size = sizeof(s->pub);
	s->pub.bytes = s->mem;
	s->pub.len = len;
	s->pub.device_ptr = s->dev;
	s->pub.release = slab_release;
	atomic_store(&s->held, 1);
	*out = &s->pub;
}

/* @wait false: never block; a full pool answers -EAGAIN. */
static int pool_get(struct zap_pool *p, size_t len, struct zap_ctx *ctx, bool wait,
		    struct zap_buffer **out)
{
	unsigned cls;
	uint64_t size;
	struct slab *s = NULL;
	int rc;

	rc = pool_class(p, len, &cls);
	if (rc)
		return rc;
	size = class_size(cls);

	pthread_mutex_lock(&p->lock);
	p->users++;
	for (;;) {
		if (p->closed) {
			rc = zap__fail(-ESHUTDOWN, "pool is closed");
			goto fail;
		}
		if (p->free[cls]) {
			s = p->free[cls];
			p->free[cls] = s->next;
			break;
		}
		reclaim(p, size);
		if (p->owned + size <= p->cap) {
			/* Reserve the room, then call the backing unlocked. */
			p->owned += size;
			rc = grow(p, cls, size, &s);
			if (rc)
				goto fail;
			break;
		}
		rc = wait ? wait_for_room(p, ctx) : -EAGAIN;
		if (rc)
			goto fail;
	}
	hand_out(p, s, size, len, out);
	return 0;
fail:
	unuse(p);
	return rc;
}

int zap__pool_alloc(struct zap_pool *p, size_t len, struct zap_ctx *ctx,
		    struct zap_buffer **out)
{
	return pool_get(p, len, ctx, true, out);
}

int zap__pool_try_alloc(struct zap_pool *p, size_t len, struct zap_buffer **out)
{
	return pool_get(p, len, NULL, false, out);
}

void zap__pool_stats(struct zap_pool *p, struct zap_pool_stats *stats)
{
	struct zap_pool_stats full = { .size = sizeof(full) };

	pthread_mutex_lock(&p->lock);
	full.cap = p->cap;
	full.owned = p->owned;
	full.in_use = p->in_use;
	full.high_water = p->high_water;
	full.allocs = p->allocs;
	full.waits = p->waits;
	pthread_mutex_unlock(&p->lock);
	zap__copy_sized(stats, &full, sizeof(full));
}

void zap__pool_close(struct zap_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->closed = true;
	for (unsigned c = 0; c < p->nclasses; c++)
		while (p->free[c]) {
			struct slab *s = p->free[c];

			p->free[c] = s->next;
			drop_memory(p, s);
		}
	wake_waiters(p);
	/* The close holds a use of its own until here. */
	p->users++;
	unuse(p);
}
