/* SPDX-License-Identifier: MIT */
/*
 * Every size of the benchmark sweep (bench/traffic.sh: 64 B to 64 MiB in
 * powers of four) streamed through the same-host rings between two
 * processes, both ways, each size with zap_send() and, up to 64 KiB, also
 * with zap_send_burst(): every byte and the count are checked, and each
 * receive has a deadline, so a lost wake-up or a stall fails (or shows as
 * meson's timeout); nothing is timed.
 *
 * Where the test process receives, the page faults of the second half of
 * each zap_send() stream of 4 KiB to 64 MiB messages are counted: received
 * messages must reuse released memory (plugins/default/default.c).
 * Streaming 4-64 KiB messages through shared memory used to run at
 * 0.3-0.6 GB/s because the heap was handed back to the kernel and faulted
 * in again between every two poll rounds (issue 33; 528 faults for 1024
 * pages at 4 KiB, now 0), and 64 MiB ones at 0.13 GB/s, a fresh mapping
 * faulted in for every message. The burst streams' faults are printed, not
 * checked: 0-65 for 1024 pages here, up to 443 under ThreadSanitizer,
 * though the allocator's cache missed there exactly as in the zap_send()
 * streams (one round's blocks per size, counted with a debug print):
 * whatever faults there is not the messages' memory.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "log-capture.h"
#include "shm_peer.h"
#include "zap-test.h"

#define SWEEP_BYTES (8u << 20) /* streamed per size and way, about */
#define SWEEP_MAX_N 65536u     /* 64 B: 5 MiB of records, the ring wraps */
#define BURST_MAX (64u << 10)  /* bursts up to this size */
#define BURST_N 8u

static const size_t sweep[] = {
	64, 256, 1u << 10, 4u << 10, 16u << 10, 64u << 10, 256u << 10,
	1u << 20, 4u << 20, 16u << 20, 64u << 20,
};
#define NSWEEP (sizeof(sweep) / sizeof(sweep[0]))
_Static_assert(64u << 20 <= BIG, "the endpoints accept the largest size");

/* Messages of size index @i in one way: at least two of each. */
static unsigned sweep_n(size_t i)
{
	size_t n = SWEEP_BYTES / sweep[i];

	return n > SWEEP_MAX_N ? SWEEP_MAX_N : n < 2 ? 2 : (unsigned)n;
}

/* Message @k of size index @i: its pattern (zt_fill()). Burst messages
 * follow the zap_send() ones with seeds of their own. */
static uint64_t seed(size_t i, unsigned k, bool burst)
{
	return ((uint64_t)i << 40) | ((uint64_t)burst << 32) | k;
}

static bool bursts(size_t i)
{
	return sweep[i] <= BURST_MAX;
}

/* Both ways use these, so a failed check says where in either process. */
typedef int (*check_fn)(bool ok, const char *what, size_t i, unsigned k);

static int child_check(bool ok, const char *what, size_t i, unsigned k)
{
	if (!ok) {
		fprintf(stderr, "peer: %s, size %zu, message %u (%s)\n", what, sweep[i], k,
			zap_last_error());
		_exit(3);
	}
	return 0;
}

static int test_check(bool ok, const char *what, size_t i, unsigned k)
{
	if (!ok)
		fail_msg("%s, size %zu, message %u", what, sweep[i], k);
	return 0;
}

/* Send the sweep to @peer: for each size, its zap_send() stream, then
 * (small sizes) the same count again in bursts of BURST_N. */
static void send_sweep(struct zap_transport *t, const char *peer, check_fn ck)
{
	unsigned char *buf = malloc(BIG), *bb = malloc((size_t)BURST_N * BURST_MAX);
	struct zap_iov v[BURST_N];

	ck(buf && bb, "out of memory", 0, 0);
	for (size_t i = 0; i < NSWEEP; i++) {
		for (unsigned k = 0; k < sweep_n(i); k++) {
			zt_fill(buf, sweep[i], seed(i, k, false));
			ck(zap_send(t, peer, buf, sweep[i], NULL) == 0, "zap_send", i, k);
		}
		for (unsigned k = 0; bursts(i) && k < sweep_n(i);) {
			unsigned n = sweep_n(i) - k < BURST_N ? sweep_n(i) - k : BURST_N;
			for (unsigned j = 0; j < n; j++) {
				unsigned char *p = bb + (size_t)j * BURST_MAX;
				zt_fill(p, sweep[i], seed(i, k + j, true));
				v[j] = (struct zap_iov){ p, sweep[i] };
			}
			for (unsigned j = 0; j < n;) {
				int r = zap_send_burst(t, peer, v + j, n - j, NULL);
				ck(r > 0, "zap_send_burst", i, k + j);
				j += (unsigned)r;
			}
			k += n;
		}
	}
	free(buf);
	free(bb);
}

/* One message of the sweep, checked byte by byte. */
static void recv_one(struct zap_msg *m, size_t i, unsigned k, bool burst, check_fn ck)
{
	ck(m != NULL, "no message", i, k);
	ck(zap_msg_len(m) == sweep[i], "wrong length", i, k);
	ck(zt_check_fill(zap_msg_data(m), sweep[i], seed(i, k, burst)) == sweep[i],
	   "wrong bytes (a lost, repeated or reordered message, or a torn one)", i, k);
	zap_msg_release(m);
}

/* ---- the peer: streams the sweep to the test, then takes it back ---------- */

static void child_sweep(const char *server)
{
	struct zap_transport *t = child_ep("127.0.0.1:0");

	CK(zap_send(t, server, "hi", 2, NULL) == 0);
	zap_msg_release(child_recv(t)); /* "go": the test took our address */
	send_sweep(t, server, child_check);
	for (size_t i = 0; i < NSWEEP; i++)
		for (int b = 0; b <= (int)bursts(i); b++)
			for (unsigned k = 0; k < sweep_n(i); k++)
				recv_one(child_recv(t), i, k, b, child_check);
	char p[16];
	CK(zap_peer_path(t, server, p, sizeof(p)) == 0 && !strcmp(p, "shm"));
	CK(zap_send(t, server, "done", 4, NULL) == 0);
	zap_msg_release(child_recv(t)); /* "bye": the test has "done" */
	zap_close(t);
}

/* ---- the test process ------------------------------------------------------ */

static long minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* Receive one size's stream (@burst: its burst half); count the faults
 * of its second half where that is checked. */
static void recv_stream(struct zap_transport *s, size_t i, bool burst)
{
	unsigned n = sweep_n(i), half = n / 2;
	bool counted = sweep[i] >= (4u << 10);
	bool checked = counted && !burst;
	long f0 = 0;

	for (unsigned k = 0; k < n; k++) {
		if (k == half)
			f0 = minflt();
		recv_one(recv_ok(s), i, k, burst, test_check);
	}
	if (!counted)
		return;
	long faults = minflt() - f0, pages = (long)((n - half) * sweep[i] / 4096);
	print_message("%8zu B x %u%s: %ld page faults for the last %ld pages\n", sweep[i],
		      n, burst ? " (bursts)" : "", faults, pages);
	if (checked && faults > pages / 4)
		fail_msg("size %zu: %ld page faults receiving %ld pages of messages: "
			 "released memory is not reused",
			 sweep[i], faults, pages);
}

static void test_sweep(void **state)
{
	char sa[ZAP_PEER_MAX], peer[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	pid_t pid = peer_start("sweep", sa);

	peer_greet(s, peer);
	for (size_t i = 0; i < NSWEEP; i++)
		for (int b = 0; b <= (int)bursts(i); b++)
			recv_stream(s, i, b);
	path_is(s, peer, "shm");
	send_sweep(s, peer, test_check);
	struct zap_msg *m = recv_ok(s);
	assert_int_equal(zap_msg_len(m), 4);
	assert_memory_equal(zap_msg_data(m), "done", 4);
	zap_msg_release(m);
	assert_int_equal(zap_send(s, peer, "bye", 3, NULL), 0);
	peer_wait(pid);
	zap_close(s);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "--peer")) {
		if (strcmp(argv[2], "sweep"))
			return 2;
		child_sweep(argv[3]);
		return 0;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sweep),
	};
	signal(SIGPIPE, SIG_IGN);
	zap_set_log_handler(zt_log_capture, NULL);
	zap_set_log_level(ZAP_LOG_INFO);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
