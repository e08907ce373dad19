/* SPDX-License-Identifier: MIT */
/* The core buffer pool with host-memory backing (docs/architecture.md). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "zap-private.h"
#include "zap-test.h"

/* Upper bounds on a wait are hang detection only, scaled like every test
 * time limit (tests/README.md); the lower bounds are what is checked. */
#define HANG_MS zt_timeout_ms(10000)

/* Host backing that counts, so tests can see what reached the backing. */
struct counting {
	int allocs, frees, destroyed;
	uint64_t live;
	bool fail_next;
};

static void *c_alloc(void *user, size_t len, void **dev)
{
	struct counting *c = user;
	void *p;

	*dev = NULL;
	if (c->fail_next) {
		c->fail_next = false;
		return NULL;
	}
	p = malloc(len);
	if (p) {
		__atomic_add_fetch(&c->allocs, 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&c->live, len, __ATOMIC_SEQ_CST);
	}
	return p;
}

static void c_free(void *user, void *ptr, size_t len)
{
	struct counting *c = user;

	__atomic_add_fetch(&c->frees, 1, __ATOMIC_SEQ_CST);
	__atomic_sub_fetch(&c->live, len, __ATOMIC_SEQ_CST);
	free(ptr);
}

static void c_destroy(void *user)
{
	((struct counting *)user)->destroyed++;
}

static struct zap_pool *counting_pool(struct counting *c, uint64_t cap,
				      uint64_t max_buf)
{
	struct zap_pool_backing b = {
		.size = sizeof(b), .user = c, .alloc = c_alloc, .free = c_free,
		.destroy = c_destroy,
	};
	struct zap_pool *p = NULL;

	memset(c, 0, sizeof(*c));
	assert_int_equal(zap__pool_new(&b, cap, max_buf, &p), 0);
	return p;
}

static struct zap_pool_stats stats(struct zap_pool *p)
{
	struct zap_pool_stats s = { .size = sizeof(s) };

	zap__pool_stats(p, &s);
	return s;
}

static void test_alloc_release(void **state)
{
	struct counting c;
	struct zap_pool *p = counting_pool(&c, 1 << 20, 64 << 10);
	struct zap_buffer *b = NULL;

	assert_int_equal(zap__pool_alloc(p, 1000, NULL, &b), 0);
	assert_non_null(zap_buffer_bytes(b));
	assert_int_equal(zap_buffer_len(b), 1000);
	assert_null(zap_buffer_device_ptr(b)); /* host memory is not device-visible */
	memset(zap_buffer_bytes(b), 0xab, 1000);
	assert_int_equal(stats(p).in_use, 1024);  /* size class */
	assert_int_equal(stats(p).owned, 1024);
	zap_buffer_release(b);
	assert_int_equal(stats(p).in_use, 0);
	assert_int_equal(stats(p).owned, 1024);   /* cached for reuse */
	assert_int_equal(stats(p).high_water, 1024);

	/* Cached memory is reused without touching the backing. */
	assert_int_equal(zap__pool_alloc(p, 600, NULL, &b), 0);
	assert_int_equal(c.allocs, 1);
	zap_buffer_release(b);

	/* Empty buffers and the smallest class. */
	assert_int_equal(zap__pool_alloc(p, 0, NULL, &b), 0);
	assert_int_equal(zap_buffer_len(b), 0);
	zap_buffer_release(b);
	zap__pool_close(p);
	assert_int_equal(c.destroyed, 1);
	assert_int_equal(c.live, 0);
}

static void test_sizes_rejected(void **state)
{
	struct counting c;
	struct zap_pool *p = counting_pool(&c, 8192, 64 << 10);
	struct zap_buffer *b = NULL;

	assert_int_equal(zap__pool_alloc(p, (64 << 10) + 1, NULL, &b), -EMSGSIZE);
	assert_int_equal(zap__pool_alloc(p, 16384, NULL, &b), -EMSGSIZE); /* > cap */
	assert_null(b);
	zap__pool_close(p);
	assert_int_equal(zap__pool_new(NULL, 100, 4096, &p), -EINVAL);
	assert_int_equal(zap__pool_new(NULL, 1 << 20, 0, &p), -EINVAL);
}

static void test_double_release(void **state)
{
	struct counting c;
	struct zap_pool *p = counting_pool(&c, 1 << 20, 4096);
	struct zap_buffer *a, *b;

	assert_int_equal(zap__pool_alloc(p, 4096, NULL, &a), 0);
	zap_buffer_release(a);
	zap_buffer_release(a); /* no-op */
	assert_int_equal(stats(p).in_use, 0);
	/* Had the second release queued the slab twice, these would alias. */
	assert_int_equal(zap__pool_alloc(p, 4096, NULL, &a), 0);
	assert_int_equal(zap__pool_alloc(p, 4096, NULL, &b), 0);
	assert_ptr_not_equal(a, b);
	assert_ptr_not_equal(zap_buffer_bytes(a), zap_buffer_bytes(b));
	zap_buffer_release(a);
	zap_buffer_release(b);
	zap_buffer_release(NULL);
	zap__pool_close(p);
}

struct racer {
	pthread_barrier_t *bar;
	struct zap_buffer *volatile *buf;
	int rounds;
};

static void *race_release(void *arg)
{
	struct racer *r = arg;

	for (int i = 0; i < r->rounds; i++) {
		pthread_barrier_wait(r->bar); /* buffer ready */
		zap_buffer_release(*r->buf);
		pthread_barrier_wait(r->bar); /* both released */
	}
	return NULL;
}

static void test_double_release_race(void **state)
{
	struct counting c;
	struct zap_pool *p = counting_pool(&c, 1 << 20, 4096);
	struct zap_buffer *volatile buf = NULL;
	pthread_barrier_t bar;
	struct racer r = { &bar, &buf, 2000 };
	pthread_t t1, t2;

	pthread_barrier_init(&bar, NULL, 3);
	assert_int_equal(pthread_create(&t1, NULL, race_release, &r), 0);
	assert_int_equal(pthread_create(&t2, NULL, race_release, &r), 0);
	for (int i = 0; i < r.rounds; i++) {
		struct zap_buffer *x, *y;

		assert_int_equal(zap__pool_alloc(p, 512, NULL, (struct zap_buffer **)&buf), 0);
		pthread_barrier_wait(&bar);
		pthread_barrier_wait(&bar);
		assert_int_equal(stats(p).in_use, 0);
		assert_int_equal(zap__pool_alloc(p, 512, NULL, &x), 0);
		assert_int_equal(zap__pool_alloc(p, 512, NULL, &y), 0);
		assert_ptr_not_equal(x, y);
		zap_buffer_release(x);
		zap_buffer_release(y);
	}
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	pthread_barrier_destroy(&bar);
	assert_int_equal(stats(p).in_use, 0);
	zap__pool_close(p);
}

struct blocked {
	struct zap_pool *p;
	struct zap_ctx *ctx;
	size_t len;
	int rc;
	uint64_t waited_ms;
	struct zap_buffer *b;
};

static void *blocked_alloc(void *arg)
{
	struct blocked *x = arg;
	uint64_t t0 = zt_now_ms();

	x->rc = zap__pool_alloc(x->p, x->len, x->ctx, &x->b);
	x->waited_ms = zt_now_ms() - t0;
	return NULL;
}

/*
 * A pool whose one 4096-byte buffer is held (*full), and a thread blocked
 * allocating another, with @x->ctx as its context; returns once it waits.
 */
static struct zap_pool *start_blocked(struct counting *c, struct blocked *x,
				      struct zap_buffer **full, pthread_t *t)
{
	struct zap_pool *p = counting_pool(c, 4096, 4096);

	x->p = p;
	x->len = 4096;
	assert_int_equal(zap__pool_alloc(p, 4096, NULL, full), 0);
	assert_int_equal(pthread_create(t, NULL, blocked_alloc, x), 0);
	for (uint64_t end = zt_now_ms() + HANG_MS; stats(p).waits == 0 && zt_now_ms() < end;)
		zt_sleep_ms(1);
	assert_int_equal(stats(p).waits, 1); /* it is really waiting */
	return p;
}

static void test_blocks_until_release(void **state)
{
	struct counting c;
	struct blocked x = { 0 };
	struct zap_buffer *full;
	pthread_t t;
	struct zap_pool *p = start_blocked(&c, &x, &full, &t);

	zt_sleep_ms(100);
	assert_int_equal(stats(p).waits, 1); /* still waiting */
	zap_buffer_release(full);
	pthread_join(t, NULL);
	assert_int_equal(x.rc, 0);
	assert_true(x.waited_ms >= 90);
	assert_ptr_equal(x.b, full); /* the released slab, reused */
	zap_buffer_release(x.b);
	zap__pool_close(p);
}

static void test_deadline_expires(void **state)
{
	struct counting c;
	struct zap_pool *p = counting_pool(&c, 4096, 4096);
	struct zap_buffer *full, *b = NULL;
	struct zap_ctx *ctx;
	uint64_t t0;

	assert_int_equal(zap__pool_alloc(p, 4096, NULL, &full), 0);
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, 80 * 1000000ull);
	t0 = zt_now_ms();
	assert_int_equal(zap__pool_alloc(p, 100, ctx, &b), -ETIMEDOUT);
	assert_true(zt_now_ms() - t0 >= 75);
	assert_true(zt_now_ms() - t0 < HANG_MS);
	assert_null(b);
	/* An expired ctx fails at once, without waiting again. */
	assert_int_equal(zap__pool_alloc(p, 100, ctx, &b), -ETIMEDOUT);
	zap_ctx_free(ctx);
	zap_buffer_release(full);
	zap__pool_close(p);
}

static void test_cancel_wakes(void **state)
{
	struct counting c;
	struct blocked x = { 0 };
	struct zap_buffer *full;
	struct zap_pool *p;
	pthread_t t;

	assert_int_equal(zap_ctx_new(&x.ctx), 0);
	p = start_blocked(&c, &x, &full, &t);
	zap_ctx_cancel(x.ctx);
	pthread_join(t, NULL);
	assert_int_equal(x.rc, -ECANCELED);
	assert_true(x.waited_ms < HANG_MS);
	zap_ctx_free(x.ctx);
	zap_buffer_release(full);
	zap__pool_close(p);
}

static void test_other_classes_reclaimed(void **state)
{
	struct counting c;
	struct zap_pool *p = counting_pool(&c, 8192, 8192);
	struct zap_buffer *a, *b, *small, *big;

	/* Fill the cap with class 4096, then free one: it stays cached. */
	assert_int_equal(zap__pool_alloc(p, 4096, NULL, &a), 0);
	assert_int_equal(zap__pool_alloc(p, 4096, NULL, &b), 0);
	zap_buffer_release(b);
	assert_int_equal(stats(p).owned, 8192);
	/* Class 256 has nothing cached and the cap is reached: the cached
	 * 4096 buffer goes back to the backing instead of blocking. */
	assert_int_equal(zap__pool_alloc(p, 200, NULL, &small), 0);
	assert_int_equal(stats(p).owned, 4096 + 256);
	assert_int_equal(stats(p).waits, 0);
	zap_buffer_release(small);
	zap_buffer_release(a);
	/* Everything cached in small classes makes room for the largest. */
	assert_int_equal(zap__pool_alloc(p, 8192, NULL, &big), 0);
	assert_int_equal(stats(p).owned, 8192);
	zap_buffer_release(big);
	zap__pool_close(p);
	assert_int_equal(c.live, 0);
}

static void test_close_with_outstanding(void **state)
{
	struct counting c;
	struct zap_pool *p = counting_pool(&c, 1 << 20, 4096);
	struct zap_buffer *a, *b, *d;

	assert_int_equal(zap__pool_alloc(p, 100, NULL, &a), 0);
	assert_int_equal(zap__pool_alloc(p, 4000, NULL, &b), 0);
	assert_int_equal(zap__pool_alloc(p, 4000, NULL, &d), 0);
	zap_buffer_release(d); /* cached: freed by close */
	zap__pool_close(p);
	assert_int_equal(c.frees, 1);
	assert_int_equal(c.destroyed, 0);
	memset(zap_buffer_bytes(a), 1, 100); /* still valid after close */
	zap_buffer_release(a);
	zap_buffer_release(a);
	assert_int_equal(c.destroyed, 0);
	zap_buffer_release(b);
	assert_int_equal(c.destroyed, 1);
	assert_int_equal(c.live, 0);
}

static void test_close_wakes_waiter(void **state)
{
	struct counting c;
	struct blocked x = { 0 };
	struct zap_buffer *full;
	pthread_t t;
	struct zap_pool *p = start_blocked(&c, &x, &full, &t);

	zap__pool_close(p);
	pthread_join(t, NULL);
	assert_int_equal(x.rc, -ESHUTDOWN);
	zap_buffer_release(full);
	assert_int_equal(c.destroyed, 1);
}

static void test_backing_failure(void **state)
{
	struct counting c;
	struct zap_pool *p = counting_pool(&c, 1 << 20, 4096);
	struct zap_buffer *b = NULL;

	c.fail_next = true;
	assert_int_equal(zap__pool_alloc(p, 100, NULL, &b), -ENOMEM);
	assert_null(b);
	assert_int_equal(stats(p).owned, 0);
	assert_int_equal(zap__pool_alloc(p, 100, NULL, &b), 0);
	zap_buffer_release(b);
	zap__pool_close(p);
}

struct churn {
	struct zap_pool *p;
	unsigned seed;
	int errors;
};

static void *churn_thread(void *arg)
{
	struct churn *ch = arg;

	for (int i = 0; i < 3000; i++) {
		struct zap_buffer *b;
		size_t len = (size_t)(rand_r(&ch->seed) % 16384);

		if (zap__pool_alloc(ch->p, len, NULL, &b)) {
			ch->errors++;
			continue;
		}
		memset(zap_buffer_bytes(b), (int)i, len);
		zap_buffer_release(b);
	}
	return NULL;
}

static void test_threads_churn(void **state)
{
	struct counting c;
	/* Cap below what 4 threads could hold at once: they must wait. */
	struct zap_pool *p = counting_pool(&c, 40000, 16384);
	struct zap_buffer *held[2];
	struct churn ch[4];
	pthread_t t[4];

	/* Whether threads overlap is up to the scheduler, so make sure the
	 * waiting path runs: hold 32 KiB of the 40000-byte cap until one of
	 * them waits (any size above 4096 must), then let them all run. */
	for (int i = 0; i < 2; i++)
		assert_int_equal(zap__pool_alloc(p, 16384, NULL, &held[i]), 0);
	for (int i = 0; i < 4; i++) {
		ch[i] = (struct churn){ .p = p, .seed = (unsigned)i + 1 };
		assert_int_equal(pthread_create(&t[i], NULL, churn_thread, &ch[i]), 0);
	}
	for (uint64_t end = zt_now_ms() + HANG_MS; stats(p).waits == 0 && zt_now_ms() < end;)
		zt_sleep_ms(1);
	assert_true(stats(p).waits > 0);
	for (int i = 0; i < 2; i++)
		zap_buffer_release(held[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(ch[i].errors, 0);
	}
	assert_int_equal(stats(p).in_use, 0);
	assert_true(stats(p).owned <= 40000);
	assert_int_equal(stats(p).allocs, 2 + 4 * 3000);
	zap__pool_close(p);
	assert_int_equal(c.live, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alloc_release),
		cmocka_unit_test(test_sizes_rejected),
		cmocka_unit_test(test_double_release),
		cmocka_unit_test(test_double_release_race),
		cmocka_unit_test(test_blocks_until_release),
		cmocka_unit_test(test_deadline_expires),
		cmocka_unit_test(test_cancel_wakes),
		cmocka_unit_test(test_other_classes_reclaimed),
		cmocka_unit_test(test_close_with_outstanding),
		cmocka_unit_test(test_close_wakes_waiter),
		cmocka_unit_test(test_backing_failure),
		cmocka_unit_test(test_threads_churn),
	};

	return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}
