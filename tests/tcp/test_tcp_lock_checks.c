/* SPDX-License-Identifier: MIT */
/*
 * The lock-holder checks of the default transport (util/tcp/tcp_int.h):
 * in a -Dlock_checks=true build (scripts/test's), TW_HELD(w) passes for
 * the thread that took w->mu with tw_lock(), also after a condition wait,
 * and aborts when nobody holds it, when another thread does, or after
 * tw_unlock(). A build without the option has nothing to check: the test
 * says so and skips (77), so a CI build that lost the option shows.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tcp_int.h"

static struct tcp_wire w;

static void wire_init(void)
{
	memset(&w, 0, sizeof(w));
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cond, NULL);
}

/* Runs @fn in a child; returns the signal that ended it, 0 for exit(0). */
static int in_child(void (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* An abort here is the expected outcome, not a crash report. */
		signal(SIGABRT, SIG_DFL);
		fn();
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		return WTERMSIG(st);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	return 0;
}

static void held_by_me(void)
{
	tw_lock(&w);
	TW_HELD(&w);
	tw_unlock(&w);
}

static void held_after_wait(void)
{
	struct timespec ts;

	tw_lock(&w);
	clock_gettime(CLOCK_REALTIME, &ts);
	tw_cond_timedwait(&w, &ts); /* times out at once, mu taken back */
	TW_HELD(&w);
	tw_unlock(&w);
}

static void not_held(void)
{
	TW_HELD(&w);
}

static void after_unlock(void)
{
	tw_lock(&w);
	tw_unlock(&w);
	TW_HELD(&w);
}

static void *take_and_keep(void *arg)
{
	tw_lock(&w);
	/* After the holder was noted: our reads below happen after its
	 * writes (no data race for ThreadSanitizer to report). */
	atomic_store((atomic_bool *)arg, true);
	for (;;)
		pause();
	return NULL;
}

static void held_by_other(void)
{
	static atomic_bool taken;
	pthread_t t;

	if (pthread_create(&t, NULL, take_and_keep, &taken))
		_exit(3);
	while (!atomic_load(&taken))
		sched_yield();
	TW_HELD(&w);
}

static void test_passes_for_holder(void **state)
{
	(void)state;
	wire_init();
	assert_int_equal(in_child(held_by_me), 0);
	assert_int_equal(in_child(held_after_wait), 0);
}

static void test_aborts_otherwise(void **state)
{
	(void)state;
	wire_init();
	assert_int_equal(in_child(not_held), SIGABRT);
	assert_int_equal(in_child(after_unlock), SIGABRT);
	assert_int_equal(in_child(held_by_other), SIGABRT);
}

int main(void)
{
#if !ZAP_LOCK_CHECKS || defined(NDEBUG)
	printf("SKIP: built without -Dlock_checks=true (or with NDEBUG): "
	       "TW_HELD() is compiled out, nothing to check\n");
	return 77;
#endif
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_passes_for_holder),
		cmocka_unit_test(test_aborts_otherwise),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
