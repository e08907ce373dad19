/* SPDX-License-Identifier: MIT */
/*
 * What a dial that cannot work says (util/tcp/tcp_handshake.c): an
 * endpoint listening on a loopback address that sends to another host's
 * address gets -ENETUNREACH and a reason naming its bound address, not
 * connect()'s "Invalid argument". The other host is an address on a veth
 * pair in a network namespace of the test's own, so nothing leaves it
 * (needs root; skipped otherwise).
 *
 * Shared state: none; the check runs in a child process.
 */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

/* The child: 0 passed, 77 cannot set up, 1 failed (the reason on stderr). */
static int child(void)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *t;
	int rc;

	if (unshare(CLONE_NEWNET) ||
	    system("ip link set lo up && ip link add zd0 type veth peer name zd1 && "
		   "ip addr add 192.0.2.1/24 dev zd0 && ip link set zd0 up && "
		   "ip link set zd1 up"))
		return 77;
	if (zap_pick("=default", 0, &attr, &t))
		return 1;
	rc = zap_send(t, "192.0.2.77:7000", "x", 1, NULL);
	if (rc != -ENETUNREACH ||
	    !strstr(zap_last_error(), "bound to 127.0.0.1: cannot reach 192.0.2.77:7000")) {
		fprintf(stderr, "zap_send = %d: %s\n", rc, zap_last_error());
		return 1;
	}
	zap_close(t);
	return 0;
}

static void test_bound_to_loopback(void **state)
{
	int st = 0;
	pid_t k;

	(void)state;
	if (geteuid() != 0) {
		fprintf(stderr, "skip: needs root for a network namespace\n");
		skip();
	}
	k = fork();
	assert_true(k >= 0);
	if (!k)
		_exit(child());
	assert_int_equal(waitpid(k, &st, 0), k);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77) {
		fprintf(stderr, "skip: cannot make a network namespace with a veth pair\n");
		skip();
	}
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bound_to_loopback),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
