/* SPDX-License-Identifier: MIT */
/*
 * The leader's spin budget (util/tcp/tcp_spin.c): learned from how long
 * waits last, dropped at once when they grow long, regained after a few
 * short ones, fixed (and never learned) when ZAP_TCP_SPIN_US is set; and
 * tw_spin_poll() returns what poll() would, spinning only within budget;
 * a spin that finds its CPU contended (a yield that ran another thread)
 * yields every round for the next waits, but not when the thread that ran
 * was a stream of ours that gave the core back; a stream's occasional longer
 * wait is covered by the next waits' spins; a learned spin does not start
 * on a host with more runnable threads than CPUs.
 */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "tcp_int.h"

#define US 1000u
#define MS 1000000u

static void test_learned_budget(void **state)
{
	struct tcp_spin s;

	(void)state;
	tw_spin_init(&s, false, 0);
	/* A new endpoint spins a little: the first replies may be quick. */
	assert_true(tw_spin_budget(&s) > 0);
	assert_true(tw_spin_budget(&s) <= 100 * US);

	/* Ping-pong at ~8 us: the budget covers a few such waits. */
	for (int i = 0; i < 20; i++)
		tw_spin_learn(&s, 8 * US);
	assert_true(tw_spin_budget(&s) >= 16 * US);
	assert_true(tw_spin_budget(&s) <= 100 * US);

	/* Traffic stops: one long wait and the next wait does not spin. */
	tw_spin_learn(&s, 5000 * MS);
	assert_int_equal(tw_spin_budget(&s), 0);

	/* Traffic resumes (sleeping waits of ~30 us): spinning comes back
	 * within a bounded number of waits. */
	int n = 0;
	while (!tw_spin_budget(&s) && n < 100) {
		tw_spin_learn(&s, 30 * US);
		n++;
	}
	assert_true(tw_spin_budget(&s) > 0);
	assert_true(n <= 30);
}

static void test_peak(void **state)
{
	struct tcp_spin s;

	(void)state;
	tw_spin_init(&s, false, 0);
	for (int i = 0; i < 20; i++)
		tw_spin_learn(&s, 2 * US);
	/* The least a learned spin lasts: a sleep's and wake-up's cost. */
	assert_true(tw_spin_budget(&s) <= 30 * US);

	/* A receiver of a stream waits 150 us once (the sender refilling
	 * its socket): the next waits spin that long, not 3x the mean. */
	tw_spin_learn(&s, 150 * US);
	assert_true(tw_spin_budget(&s) >= 150 * US);
	tw_spin_learn(&s, 2 * US);
	assert_true(tw_spin_budget(&s) >= 120 * US);

	/* It fades after a few dozen short waits. */
	for (int i = 0; i < 40; i++)
		tw_spin_learn(&s, 2 * US);
	assert_true(tw_spin_budget(&s) <= 30 * US);

	/* A wait too long to spin through is no peak: the budget drops. */
	tw_spin_learn(&s, 5000 * MS);
	assert_int_equal(tw_spin_budget(&s), 0);
}

static void test_fixed_budget(void **state)
{
	struct tcp_spin s;

	(void)state;
	tw_spin_init(&s, true, 200);
	assert_int_equal(tw_spin_budget(&s), 200 * US);
	tw_spin_learn(&s, 5000 * MS);
	assert_int_equal(tw_spin_budget(&s), 200 * US);

	tw_spin_init(&s, true, 0); /* ZAP_TCP_SPIN_US=0: never spin */
	tw_spin_learn(&s, 1 * US);
	assert_int_equal(tw_spin_budget(&s), 0);
}

static bool never(void *arg, bool sleeping)
{
	(void)arg;
	(void)sleeping;
	return false;
}

/* Work found only when about to sleep (a ring filled during the spin):
 * counts the calls, so the test sees both kinds were asked. */
static bool at_sleep(void *arg, bool sleeping)
{
	unsigned *calls = arg;

	calls[sleeping]++;
	return sleeping;
}

static uint64_t t_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void test_spin_poll(void **state)
{
	struct tcp_spin s;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct pollfd p = { .fd = efd, .events = POLLIN };
	uint64_t one = 1, t0;

	(void)state;
	assert_true(efd >= 0);
	tw_spin_init(&s, false, 0);

	/* Ready at once: returns 1 without waiting. */
	assert_int_equal(write(efd, &one, sizeof(one)), sizeof(one));
	assert_int_equal(tw_spin_poll(&s, &p, 1, 1000, never, NULL, false), 1);
	assert_int_equal(read(efd, &one, sizeof(one)), sizeof(one));

	/* Nothing arrives: the timeout is honoured (spin included) and the
	 * 50 ms wait teaches the budget to drop to zero. */
	t0 = t_now();
	assert_int_equal(tw_spin_poll(&s, &p, 1, 50, never, NULL, false), 0);
	assert_true(t_now() - t0 >= 45 * MS);
	assert_int_equal(tw_spin_budget(&s), 0);

	/* Shared memory: work found just before sleeping ends the wait at
	 * once, with no descriptor ready, spinning or not. */
	for (int spin = 0; spin < 2; spin++) {
		unsigned calls[2] = { 0, 0 };
		tw_spin_init(&s, true, spin ? 200 : 0); /* 0: never spin */
		t0 = t_now();
		assert_int_equal(tw_spin_poll(&s, &p, 1, 5000, at_sleep, calls, true), 0);
		assert_true(t_now() - t0 < 1000 * MS);
		assert_int_equal(calls[1], 1);
		assert_true(spin ? calls[0] > 0 : calls[0] == 0);
	}
	close(efd);
}

static atomic_bool hog_stop;

/* Pin the calling thread to @cpu; whether it worked. */
static bool pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return !pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* A busy thread on CPU *@arg until hog_stop. */
static void *hog(void *arg)
{
	pin(*(int *)arg);
	while (!atomic_load_explicit(&hog_stop, memory_order_relaxed))
		;
	return NULL;
}

/* A thread of ours streaming on CPU *@arg until hog_stop: busy for 40 us
 * at a time (a record's copy), then, as a large message's sender between
 * two records does, it takes tw_core_wanted and gives the core back. */
static void *own_stream(void *arg)
{
	pin(*(int *)arg);
	while (!atomic_load_explicit(&hog_stop, memory_order_relaxed)) {
		uint64_t t0 = t_now();
		while (t_now() - t0 < 40 * US)
			;
		if (atomic_exchange(&tw_core_wanted, false))
			sched_yield();
	}
	return NULL;
}

/* A wait of 100 ms for nothing, spinning @spin_us, on our CPU shared with
 * @thread (started @settle_us before, stopped after): @s as it left it. */
static void spin_beside(void *(*thread)(void *), unsigned spin_us, unsigned settle_us,
			struct tcp_spin *s)
{
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), cpu = sched_getcpu();
	struct pollfd p = { .fd = efd, .events = POLLIN };
	cpu_set_t old;
	pthread_t th;

	assert_true(efd >= 0 && cpu >= 0);
	assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
	assert_true(pin(cpu));
	atomic_store(&hog_stop, false);
	assert_int_equal(pthread_create(&th, NULL, thread, &cpu), 0);
	usleep(settle_us); /* it runs */
	tw_spin_init(s, true, spin_us);
	assert_int_equal(tw_spin_poll(s, &p, 1, 100, never, NULL, false), 0);
	atomic_store(&hog_stop, true);
	pthread_join(th, NULL);
	pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
	close(efd);
}

static void test_contended(void **state)
{
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct pollfd p = { .fd = efd, .events = POLLIN };
	struct tcp_spin s;

	(void)state;
	assert_true(efd >= 0);
	/* A busy thread on the same CPU: the first yield hands it the CPU
	 * for a time slice, far beyond 20 us: contended. */
	spin_beside(hog, 20000, 20000, &s);
	assert_true(s.cool > 0);

	/* Each later wait uses one up. */
	unsigned left = s.cool;
	tw_spin_init(&s, true, 0);
	s.cool = left;
	assert_int_equal(tw_spin_poll(&s, &p, 1, 1, never, NULL, false), 0);
	assert_int_equal(s.cool, left - 1);
	close(efd);
}

/* The same CPU shared with our own stream, which gives the core back when
 * asked: a yield that ran it for longer than 20 us is no contention (the
 * peer we wait for is elsewhere), so the spin does not start yielding
 * every round. At least one of five tries: another process may run in a
 * yield too on a busy host, and that is contention. */
static void test_own_stream(void **state)
{
	struct tcp_spin s;
	unsigned calm = 0;

	(void)state;
	for (int i = 0; i < 5 && !calm; i++) {
		spin_beside(own_stream, 2000, 5000, &s);
		calm += s.cool == 0;
	}
	assert_true(calm > 0);
}

/* Busy threads, unpinned, until hog_stop. */
static void *hog_any(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&hog_stop, memory_order_relaxed))
		;
	return NULL;
}

static void test_host_busy(void **state)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct pollfd p = { .fd = efd, .events = POLLIN };
	struct tcp_spin s;
	unsigned calls[2] = { 0, 0 };
	pthread_t *th = calloc((size_t)cpus + 2, sizeof(*th));

	(void)state;
	assert_true(efd >= 0 && cpus > 0 && th);
	/* Two more busy threads than CPUs (this one waits): the host's
	 * runnable count exceeds its CPUs by more than one. A learned
	 * budget would spin (a fresh one starts above zero), but the spin
	 * does not start: @at_sleep is asked once after the CPU is handed
	 * over, and once as the wait sleeps (a spin asks every round). The
	 * host is read at most every millisecond: wait out the last
	 * reading first. */
	atomic_store(&hog_stop, false);
	for (long i = 0; i < cpus + 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, hog_any, NULL), 0);
	usleep(20000);
	tw_spin_init(&s, false, 0);
	assert_true(tw_spin_budget(&s) > 0);
	assert_int_equal(tw_spin_poll(&s, &p, 1, 1000, at_sleep, calls, true), 0);
	unsigned learned[2] = { calls[0], calls[1] };

	/* A fixed budget is what the operator asked for: it spins anyway. */
	calls[0] = calls[1] = 0;
	tw_spin_init(&s, true, 200);
	assert_int_equal(tw_spin_poll(&s, &p, 1, 1000, at_sleep, calls, true), 0);
	atomic_store(&hog_stop, true);
	for (long i = 0; i < cpus + 2; i++)
		pthread_join(th[i], NULL);
	assert_true(learned[0] <= 1);
	assert_int_equal(learned[1], 1);
	assert_true(calls[0] > 0);
	free(th);
	close(efd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_learned_budget),
		cmocka_unit_test(test_peak),
		cmocka_unit_test(test_fixed_budget),
		cmocka_unit_test(test_spin_poll),
		cmocka_unit_test(test_contended),
		cmocka_unit_test(test_own_stream),
		cmocka_unit_test(test_host_busy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
