/* SPDX-License-Identifier: MIT */
/*
 * The wire's pause and kick (util/tcp), driven directly with a receive
 * allocator that behaves like uma's pool, so that it runs without a GPU:
 * a fixed number of messages may be held; one more answers -EAGAIN, and a
 * release kicks the wire (tcp_kick()) as uma's releases do.
 *
 * It shows that a connection paused on a full allocator is not retried on
 * a timer (it stays paused across a release that does not kick), that a
 * kicking release resumes it promptly (the latency is printed), and that a
 * message released after the wire is destroyed only touches the kick
 * handle (run under ASan to see that nothing freed is touched).
 *
 * The wire gets a host table of its own (wire_host.h): log and fail print,
 * and a "ctx" is a struct tctx (the wire only passes it back to the host's
 * ctx functions).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tcp_wire.h"
#include "wire_host.h"

/* ---- a pool-like receive allocator -------------------------------------- */

struct tpool {
	pthread_mutex_t mu;
	int held, cap;
	atomic_int eagain;          /* -EAGAIN answers so far */
	atomic_bool kick_on_release;
	struct tcp_kick *kick;      /* a reference, as uma holds one */
};

struct tmsg {
	struct tcp_rx_msg rx; /* first */
	struct tpool *pool;
};

static void tmsg_release(struct zap_msg *m)
{
	struct tmsg *t = (struct tmsg *)m;
	struct tpool *p = t->pool;

	free(t);
	pthread_mutex_lock(&p->mu);
	p->held--;
	pthread_mutex_unlock(&p->mu);
	if (atomic_load(&p->kick_on_release))
		tcp_kick(p->kick);
}

static int tpool_alloc(void *user, size_t len, struct tcp_rx_msg **out)
{
	struct tpool *p = user;
	struct tmsg *t;

	pthread_mutex_lock(&p->mu);
	if (p->held >= p->cap) {
		pthread_mutex_unlock(&p->mu);
		atomic_fetch_add(&p->eagain, 1);
		return -EAGAIN;
	}
	p->held++;
	pthread_mutex_unlock(&p->mu);
	t = calloc(1, sizeof(*t) + len);
	if (!t)
		return -ENOMEM;
	t->pool = p;
	t->rx.msg.size = sizeof(t->rx.msg);
	t->rx.msg.data = t + 1;
	t->rx.msg.release = tmsg_release;
	*out = &t->rx;
	return 0;
}

static struct tcp_wire *open_wire(const char *dom, struct tpool *p)
{
	struct tcp_wire_args a = {
		.host = &host, .domain = dom, .listen = "127.0.0.1:0",
		.max_msg_size = 1 << 20,
		.alloc = {.alloc = tpool_alloc, .user = p},
	};
	struct tcp_wire *w = NULL;

	assert_int_equal(tcp_wire_open(&a, &w), 0);
	return w;
}

/* ---- the receiver thread ------------------------------------------------ */

struct rx_job {
	struct tcp_wire *w;
	struct zap_msg *m;
	int rc;
	uint64_t done_ns;
};

static void *rx_main(void *arg)
{
	struct rx_job *j = arg;
	struct tctx c;

	j->rc = tcp_wire_recv(j->w, within_ms(&c, 10000), &j->m);
	j->done_ns = now_ns();
	return NULL;
}

static void test_pause_and_kick(void **state)
{
	struct tpool pa = {.mu = PTHREAD_MUTEX_INITIALIZER, .cap = 2};
	struct tpool pb = {.mu = PTHREAD_MUTEX_INITIALIZER, .cap = 1000};
	struct tcp_wire *a = open_wire("a", &pa), *b = open_wire("b", &pb);
	struct zap_msg *m[3] = {0};
	char addr[ZAP_PEER_MAX];
	struct tctx c;

	(void)state;
	pa.kick = tcp_wire_kick_get(a);
	assert_int_equal(tcp_wire_address(a, addr, sizeof(addr)), 0);
	for (int i = 0; i < 3; i++) {
		char msg[16];
		snprintf(msg, sizeof(msg), "msg %d", i);
		assert_int_equal(tcp_wire_send(b, addr, msg, strlen(msg) + 1,
					       within_ms(&c, 5000)),
				 0);
	}
	for (int i = 0; i < 2; i++) {
		assert_int_equal(tcp_wire_recv(a, within_ms(&c, 5000), &m[i]), 0);
		assert_string_equal(m[i]->data, i ? "msg 1" : "msg 0");
	}

	/* Full: the third message waits in the socket. */
	assert_int_equal(tcp_wire_recv(a, within_ms(&c, 300), &m[2]), -ETIMEDOUT);
	assert_true(atomic_load(&pa.eagain) >= 1);

	/* Room, but no kick: nothing retries on a timer (the 5 ms retry
	 * this replaces would have delivered it here, after ~60 retries). */
	int before = atomic_load(&pa.eagain);
	m[0]->release(m[0]);
	assert_int_equal(tcp_wire_recv(a, within_ms(&c, 300), &m[2]), -ETIMEDOUT);
	int retries = atomic_load(&pa.eagain) - before;
	fprintf(stderr, "# allocation retries in 300 ms without a kick: %d\n",
		retries);
	assert_true(retries <= 2);

	/* A release that kicks (as uma's do) resumes it promptly, also for a
	 * receiver already blocked. */
	atomic_store(&pa.kick_on_release, true);
	struct rx_job j = {.w = a};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, rx_main, &j), 0);
	usleep(50000); /* let it block; correctness does not depend on it */
	uint64_t t0 = now_ns();
	m[1]->release(m[1]);
	pthread_join(t, NULL);
	assert_int_equal(j.rc, 0);
	assert_string_equal(j.m->data, "msg 2");
	fprintf(stderr, "# resumed %.1f us after the kicking release\n",
		(double)(j.done_ns - t0) / 1e3);
	/* Unkicked, the receiver would sleep on: a hang bound, scaled. */
	assert_true(j.done_ns - t0 < zt_timeout_ms(10000) * 1000000ull);

	/* Released after the wire is gone: only the kick handle is touched. */
	tcp_wire_destroy(b);
	tcp_wire_destroy(a);
	j.m->release(j.m);
	tcp_kick_put(pa.kick);
	assert_int_equal(pa.held, 0);
}

/* The handle outlives the wire; NULL is accepted. */
static void test_kick_handle_lifetime(void **state)
{
	struct tpool p = {.mu = PTHREAD_MUTEX_INITIALIZER, .cap = 1};
	struct tcp_wire *w = open_wire("w", &p);
	struct tcp_kick *k1 = tcp_wire_kick_get(w), *k2 = tcp_wire_kick_get(w);

	(void)state;
	tcp_wire_kick(w);
	tcp_kick(k1);
	tcp_wire_destroy(w);
	tcp_kick(k1);
	tcp_kick_put(k1);
	tcp_kick(k2);
	tcp_kick_put(k2);
	tcp_kick(NULL);
	tcp_kick_put(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pause_and_kick),
		cmocka_unit_test(test_kick_handle_lifetime),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
