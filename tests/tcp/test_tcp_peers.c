/* SPDX-License-Identifier: MIT */
/*
 * Thousands of peers on one default-transport endpoint (util/tcp/
 * tcp_ready.c: hot connections polled, cold ones behind epoll):
 *  - every one of them is served, when all are connected at once, and
 *    again after they have gone cold;
 *  - closing them all gives every descriptor back;
 *  - the idle timeout still closes connections that went cold;
 *  - the handshake thread is named zap-handshake and keeps the
 *    application's priority (a nicer one, preempted while holding the
 *    endpoint's lock in a connect burst, stalled the data path).
 * The peers are raw sockets speaking the wire (plugins/default/WIRE.md),
 * so that thousands fit one process. Run with ZAP_SHM=off (meson.build).
 *
 * Shared state: the echo thread and the test share only the endpoint,
 * which is thread-safe.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "zap-test.h"

#define MAX_PEERS 2000
#define MSG 48

static struct zap_transport *srv;
static int srv_port;
static pthread_t echo_thr;

static void *echo_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct zap_msg *m;
		int rc = zap_recv(srv, NULL, &m);

		if (rc)
			return NULL; /* -ESHUTDOWN at the end */
		zap_send(srv, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m), NULL);
		zap_msg_release(m);
	}
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void read_full(int fd, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t k = read(fd, (char *)buf + got, len - got);
		if (k <= 0)
			fail_msg("read after %zu of %zu bytes: %s", got, len,
				 k ? strerror(errno) : "EOF");
		got += (size_t)k;
	}
}

/* A peer from 127.0.0.@host: connected, HELLO sent and answered. */
static int peer_open(int host, uint64_t id)
{
	struct sockaddr_in sa = { .sin_family = AF_INET }, me = { .sin_family = AF_INET };
	socklen_t ml = sizeof(me);
	unsigned char b[16 + 24 + 40], in[16 + 160];
	char src[32], claim[40];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(src, sizeof(src), "127.0.0.%d", host);
	assert_true(fd >= 0);
	inet_pton(AF_INET, src, &me.sin_addr);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	sa.sin_port = htons((uint16_t)srv_port);
	assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &ml), 0);
	int cl = snprintf(claim, sizeof(claim), "%s:%d", src, ntohs(me.sin_port));
	zt_wire_hdr(b, 1, 24 + (uint64_t)cl);
	zt_be64(b + 16, id);
	zt_be64(b + 24, id * 31 + 7);
	zt_be64(b + 32, 1u << 20);
	memcpy(b + 40, claim, (size_t)cl);
	assert_int_equal(write(fd, b, 40 + (size_t)cl), 40 + cl);
	read_full(fd, in, 16);
	assert_memory_equal(in, "ZAPW", 4);
	assert_int_equal(in[5], 1);
	uint64_t hl = 0;
	for (int i = 8; i < 16; i++)
		hl = hl << 8 | in[i];
	assert_true(hl <= sizeof(in) - 16);
	read_full(fd, in + 16, (size_t)hl);
	return fd;
}

static void peer_send(int fd, uint64_t seed)
{
	unsigned char b[16 + MSG];

	zt_wire_hdr(b, 2, MSG);
	zt_fill(b + 16, MSG, seed);
	assert_int_equal(write(fd, b, sizeof(b)), (ssize_t)sizeof(b));
}

static void peer_check(int fd, uint64_t seed)
{
	unsigned char b[16 + MSG];

	read_full(fd, b, sizeof(b));
	assert_memory_equal(b, "ZAPW", 4);
	assert_int_equal(b[5], 2);
	assert_int_equal(zt_check_fill(b + 16, MSG, seed), MSG);
}

/* How many peers fit: two descriptors each (ours and the server's). */
static int peers_that_fit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 0;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	getrlimit(RLIMIT_NOFILE, &rl);
	long n = ((long)rl.rlim_cur - 256) / 2;
	return n > MAX_PEERS ? MAX_PEERS : (int)n;
}

static int setup(void **state)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	char addr[ZAP_PEER_MAX];

	(void)state;
	if (zap_pick("=default", 0, &attr, &srv))
		return -1;
	if (zap_transport_address(srv, addr, sizeof(addr)))
		return -1;
	srv_port = atoi(strrchr(addr, ':') + 1);
	return pthread_create(&echo_thr, NULL, echo_main, NULL) ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	zap_shutdown(srv);
	pthread_join(echo_thr, NULL);
	zap_close(srv);
	return 0;
}

/*
 * All peers connected at once, then each sends one message (in reverse
 * order of connecting) and gets it back: every connection is served.
 * Once they have gone cold (TCP_HOT_IDLE_MS, 200 ms), again. Then all
 * close, and the endpoint gives every descriptor back.
 */
static void test_thousands(void **state)
{
	int n = peers_that_fit(), base = open_fds();
	int *fd;

	(void)state;
	if (n < 100) {
		fprintf(stderr, "skip: RLIMIT_NOFILE leaves room for %d peers only\n", n);
		skip();
	}
	fd = calloc((size_t)n, sizeof(*fd));
	assert_non_null(fd);
	for (int i = 0; i < n; i++)
		fd[i] = peer_open(2 + i % 8, 1000 + (uint64_t)i);
	for (int round = 0; round < 2; round++) {
		if (round)
			zt_sleep_ms(400); /* long enough for every one to go cold */
		for (int i = n - 1; i >= 0; i--)
			peer_send(fd[i], (uint64_t)i * 2 + (uint64_t)round);
		for (int i = n - 1; i >= 0; i--)
			peer_check(fd[i], (uint64_t)i * 2 + (uint64_t)round);
	}
	print_message("%d peers served twice\n", n);
	for (int i = 0; i < n; i++)
		close(fd[i]);
	free(fd);
	/* The endpoint closes each connection at its end: wait for that
	 * (the suite's timeout bounds the wait, not a clock here). */
	while (open_fds() > base)
		zt_sleep_ms(20);
	/* None kept (fewer is fine: a descriptor the endpoint had open
	 * for a moment when base was counted may be gone). */
	assert_true(open_fds() <= base);
}

/*
 * ZAP_TCP_IDLE_MS (500 ms in this test's environment) closes connections
 * that went cold (after 200 ms) like any other: every peer reads EOF.
 */
static void test_idle_cold(void **state)
{
	int fd[64];

	(void)state;
	for (int i = 0; i < 64; i++) {
		fd[i] = peer_open(10 + i % 4, 5000 + (uint64_t)i);
		peer_send(fd[i], (uint64_t)i);
		peer_check(fd[i], (uint64_t)i);
	}
	for (int i = 0; i < 64; i++) {
		unsigned char b;
		assert_int_equal(read(fd[i], &b, 1), 0);
		close(fd[i]);
	}
}

/* The endpoint's handshake thread is there by its name ("zap-handshake")
 * and runs at this thread's priority (util/tcp/tcp_handshake.c). */
static void test_handshake_nice(void **state)
{
	char path[300], buf[512];
	int found = 0, mine;
	struct dirent *e;
	DIR *d;

	(void)state;
	errno = 0;
	mine = getpriority(PRIO_PROCESS, 0);
	assert_int_equal(errno, 0);
	d = opendir("/proc/self/task");
	assert_non_null(d);
	while ((e = readdir(d))) {
		FILE *f;
		char *end;
		long nice;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* a thread that ended meanwhile */
		bool ours = fgets(buf, sizeof(buf), f) && !strcmp(buf, "zap-handshake\n");
		fclose(f);
		if (!ours)
			continue;
		/* stat: "pid (comm) state ...": nice is the 17th field after
		 * the closing parenthesis (proc(5) field 19). */
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		f = fopen(path, "r");
		assert_non_null(f);
		assert_non_null(fgets(buf, sizeof(buf), f));
		fclose(f);
		end = strrchr(buf, ')');
		assert_non_null(end);
		end++;
		for (int field = 3; field < 19; field++) {
			end = strchr(end + 1, ' ');
			assert_non_null(end);
		}
		nice = strtol(end + 1, NULL, 10);
		assert_int_equal(nice, mine);
		found++;
	}
	closedir(d);
	/* One endpoint (setup()'s), one handshake thread. */
	assert_int_equal(found, 1);
}

/* "idle": test_idle_cold alone, with its short idle timeout; else the rest. */
int main(int argc, char **argv)
{
	const struct CMUnitTest many[] = {
		cmocka_unit_test(test_thousands),
		cmocka_unit_test(test_handshake_nice),
	};
	const struct CMUnitTest idle[] = {
		cmocka_unit_test(test_idle_cold),
	};

	if (argc > 1 && !strcmp(argv[1], "idle")) {
		setenv("ZAP_TCP_IDLE_MS", "500", 1);
		return cmocka_run_group_tests(idle, setup, teardown);
	}
	return cmocka_run_group_tests(many, setup, teardown);
}
