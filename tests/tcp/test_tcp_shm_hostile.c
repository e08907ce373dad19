/* SPDX-License-Identifier: MIT */
/*
 * Hostile same-host peers (issue #35).
 *
 * Hoarded rings: a same-host peer makes the endpoint fill its
 * ring toward it, hangs up, and keeps only the descriptor of the endpoint's
 * region. That region once stayed alive as long as the peer kept the
 * descriptor (16 such connections held 26-29 MiB, visible in no process's
 * RSS). The peer here is a raw dialer in this process (shm_raw.h) holding
 * the memfd, so the test reads the region's resident size from it
 * (fstat() st_blocks): a released region has none, whoever holds it.
 *
 *  - the peer closes its connection and its side channel: released as
 *    soon as the endpoint sees the end;
 *  - the peer closes its connection but keeps the side channel open (as
 *    if it were still reading): released once ZAP_TCP_STALL_MS passed;
 *  - a peer that marks our ring closed (as a peer that is done with it
 *    does) and keeps the side channel: released at once.
 *
 * A stranger's flood: a process of another user connects to an
 * endpoint's side-channel name and closes, as fast as it can, from
 * several processes. Each connection is refused at once, but they once
 * filled the listener's backlog (64), and our own peers' connects then
 * failed: 1-5 of 6 stayed on TCP. Now all six upgrade.
 * No shared state.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "shm-side.h"
#include "shm_peer.h"
#include "shm_raw.h"
#include "zap-test.h"

#define MSG (16u << 10)
#define FILL (1u << 20) /* half the ring: sends never wait for room */

/* A raw peer that completed the upgrade with endpoint @s: its TCP socket,
 * its side channel, the endpoint's ring memfd, and the peer string @s
 * knows it by. */
struct hoarder {
	int tcp, side, ring, ours;
	char peer[ZAP_PEER_MAX];
};

static void hoarder_up(struct zap_transport *s, const char *sa, struct hoarder *h)
{
	uint64_t id;
	struct side_msg m;
	int got;

	h->tcp = raw_hello(sa, 0x5eed0fca11ab1e00ull, &id);
	h->ours = side_region(SIDE_RING_BYTES, true, true);
	h->side = answered(h->tcp, id, 0x5eed0fca11ab1e00ull, h->ours, &h->ring);
	struct side_msg r = { .magic = SIDE_RING, .log2 = 21 };
	assert_true(side_put(h->side, &r, sizeof(r), &h->ours, 1));
	assert_int_equal(side_next(h->side, &m, &got), SIDE_DONE);
	/* A message over TCP, for the peer string the endpoint replies to. */
	unsigned char f[16 + 5];
	put_be32(f, 0x5a415057u);
	f[4] = 2;
	f[5] = 2; /* DATA */
	f[6] = f[7] = 0;
	put_be64(f + 8, 5);
	memcpy(f + 16, "hello", 5);
	assert_int_equal(send(h->tcp, f, sizeof(f), MSG_NOSIGNAL), (ssize_t)sizeof(f));
	struct zap_msg *in = recv_ok(s);
	snprintf(h->peer, sizeof(h->peer), "%s", zap_msg_peer(in));
	zap_msg_release(in);
}

/* Bytes of the region behind @fd that hold memory. */
static uint64_t resident(int fd)
{
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/* The endpoint fills half its ring toward @h, which reads none of it. */
static void fill(struct zap_transport *s, struct hoarder *h)
{
	static unsigned char b[MSG];
	memset(b, 0x5a, sizeof(b));
	for (unsigned i = 0; i < FILL / MSG; i++)
		assert_int_equal(zap_send(s, h->peer, b, sizeof(b), NULL), 0);
	path_is(s, h->peer, "shm");
	assert_true(resident(h->ring) >= FILL);
}

/* Drive @s (its leader reads the peer's end) until the region behind
 * @fd holds nothing; false if it still does after @ms (scaled). */
static bool released_within(struct zap_transport *s, int fd, unsigned ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int err;
		struct zap_msg *m = recv_in(s, 20, &err);
		if (m)
			zap_msg_release(m);
		if (resident(fd) == 0)
			return true;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >
		    zt_timeout_ms(ms))
			return false;
	}
}

enum hoard { HANG_UP, KEEP_SIDE, SAY_CLOSED };

/*
 * An endpoint (ZAP_TCP_STALL_MS @stall) fills its ring toward a hoarder,
 * which then ends as @how says, keeping the descriptor of that ring: its
 * memory must go within 30 s (scaled), or the test fails naming @who.
 */
static void hoard(const char *stall, enum hoard how, const char *who)
{
	char sa[ZAP_PEER_MAX];
	struct hoarder h;
	setenv("ZAP_TCP_STALL_MS", stall, 1);
	struct zap_transport *s = ep("127.0.0.1:0", sa);
	unsetenv("ZAP_TCP_STALL_MS");
	hoarder_up(s, sa, &h);
	fill(s, &h);
	if (how == SAY_CLOSED) {
		/* The consumer's flag in its control block (WIRE.md, "The
		 * ring's layout": CLOSED at 76). */
		unsigned char *map = mmap(NULL, SIDE_RING_BYTES, PROT_READ | PROT_WRITE,
					  MAP_SHARED, h.ring, 0);
		assert_true(map != MAP_FAILED);
		uint32_t one = 1;
		memcpy(map + 76, &one, sizeof(one));
		munmap(map, SIDE_RING_BYTES);
	}
	if (how == HANG_UP)
		close(h.side);
	close(h.tcp);
	if (!released_within(s, h.ring, 30000))
		fail_msg("%s still holds %llu bytes of our ring", who,
			 (unsigned long long)resident(h.ring));
	if (how != HANG_UP)
		close(h.side);
	close(h.ring);
	close(h.ours);
	zap_close(s);
}

/* Hangs up everything but the descriptor of our region. */
static void test_hang_up(void **state)
{
	(void)state;
	hoard("30000", HANG_UP, "the peer that hung up");
}

/* Hangs up the connection, keeps the side channel: the ring lingers for
 * the stall limit (300 ms here), then goes. */
static void test_keeps_side(void **state)
{
	(void)state;
	hoard("300", KEEP_SIDE, "a peer that kept its side channel");
}

/* Says it closed our ring, hangs up the connection and keeps the side
 * channel: the ring goes without waiting out the stall limit (an hour
 * here: the test would give up first). */
static void test_says_closed(void **state)
{
	(void)state;
	hoard("3600000", SAY_CLOSED, "a peer that closed our ring");
}

/* The stranger (uid 65534): @procs processes connect to the name of @id
 * and close, as fast as they can, until killed. Processes, not threads:
 * a thread started after fork() in a threaded program is refused by
 * ThreadSanitizer. */
static void stranger_start(uint64_t id, pid_t *pids, int procs)
{
	for (int i = 0; i < procs; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i])
			continue;
		if (setgid(65534) || setuid(65534))
			_exit(3);
		for (;;) {
			int fd = side_dial(id);
			if (fd >= 0)
				close(fd);
		}
	}
}

static void test_stranger_flood(void **state)
{
	char sa[ZAP_PEER_MAX], path[16];
	uint64_t id;
	int st, upgraded = 0;
	(void)state;
	if (geteuid() != 0)
		skip(); /* needs root to become another user */
	struct zap_transport *a = ep("127.0.0.1:0", sa);
	close(raw_hello(sa, 7, &id));
	pid_t pids[4];
	stranger_start(id, pids, 4);
	usleep(200000); /* the flood under way */
	/* No assertion while the stranger runs (it would outlive a failure):
	 * each peer sends, and is served, or the count says it was not. */
	int served = 0;
	for (int i = 0; i < 6; i++) {
		struct zap_transport *d = ep("127.0.0.1:0", NULL);
		int err = zap_send(d, sa, "x", 1, NULL);
		struct zap_msg *m = err ? NULL : recv_in(a, zt_timeout_ms(30000), &err);
		if (m) {
			served++;
			zap_msg_release(m);
		}
		if (!zap_peer_path(d, sa, path, sizeof(path)))
			upgraded += !strcmp(path, "shm");
		zap_close(d);
	}
	int killed = 0;
	for (int i = 0; i < 4; i++) {
		kill(pids[i], SIGKILL);
		killed += waitpid(pids[i], &st, 0) == pids[i] && WIFSIGNALED(st);
	}
	assert_int_equal(killed, 4); /* each flooded until killed */
	if (served != 6)
		fail_msg("%d of 6 peers served beside a stranger's connect flood", served);
	if (upgraded != 6)
		fail_msg("%d of 6 peers upgraded beside a stranger's connect flood", upgraded);
	zap_close(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hang_up),
		cmocka_unit_test(test_keeps_side),
		cmocka_unit_test(test_says_closed),
		cmocka_unit_test(test_stranger_flood),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
