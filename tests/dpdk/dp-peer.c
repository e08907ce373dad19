/* SPDX-License-Identifier: MIT */
/*
 * A dpdk endpoint for scripted tests (veth.sh), configured by ZAP_DPDK_*:
 *   dp-peer echo N           receive N messages, answer each to its sender
 *   dp-peer ping PEER N      send N messages of growing sizes to PEER and
 *                            check every answer; print the round trips
 *                            (median, 99th percentile, max)
 * Either way it then checks zap_stats()' message and byte counts against
 * what went each way and prints a line of the counters ("counters: ...")
 * for the scripts to read.
 */
#include "dp-test.h"

static const size_t sizes[] = { 0, 64, 1400, 1449, 5000, 100000 };

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct zap_transport *t;
	static uint8_t b[100000];
	static uint64_t rtt[100000];
	const char *fixed = getenv("DP_PEER_SIZE"); /* one size for every message */
	struct zap_stats st = { .size = sizeof(st) };
	uint64_t bytes = 0; /* each way: the echo answers with what it got */
	int n;

	if (argc < 3 || (strcmp(argv[1], "echo") && (strcmp(argv[1], "ping") || argc < 4))) {
		fprintf(stderr, "usage: %s echo N | ping PEER N\n", argv[0]);
		return 2;
	}
	dpt_who = argv[1];
	n = atoi(argv[argc - 1]);
	dpt_open(&t);
	for (int i = 0; i < n; i++) {
		struct zap_ctx *ctx = dpt_timeout(20000);
		struct zap_msg *m = NULL;
		size_t len = fixed ? (size_t)atoi(fixed) % sizeof(b) : sizes[i % 6];
		int rc;

		if (!strcmp(argv[1], "echo")) {
			CHECK_RC(zap_recv(t, ctx, &m), "recv");
			bytes += zap_msg_len(m);
			rc = zap_send(t, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m), ctx);
			CHECK_RC(rc, "echo");
		} else {
			struct timespec t0, t1;

			dpt_fill(b, len, (uint64_t)i);
			bytes += len;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			CHECK_RC(zap_send(t, argv[2], b, len, ctx), "send");
			CHECK_RC(zap_recv(t, ctx, &m), "recv");
			CHECK(zap_msg_len(m) == len && !dpt_check(zap_msg_data(m), len, (uint64_t)i),
			      "answer %d", i);
			CHECK(!strcmp(zap_msg_peer(m), argv[2]), "answer from %s", zap_msg_peer(m));
			clock_gettime(CLOCK_MONOTONIC, &t1);
			if (i < 100000)
				rtt[i] = (uint64_t)(t1.tv_sec - t0.tv_sec) *
						 1000000000ull +
					 (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
		}
		zap_msg_release(m);
		zap_ctx_free(ctx);
	}
	CHECK_RC(zap_stats(t, &st), "zap_stats");
	printf("counters: sent %llu (%llu B), received %llu (%llu B), retransmits %llu, "
	       "frames refused %llu, peers forgotten %llu, peers %llu\n",
	       (unsigned long long)st.msgs_sent, (unsigned long long)st.bytes_sent,
	       (unsigned long long)st.msgs_received, (unsigned long long)st.bytes_received,
	       (unsigned long long)st.retransmits, (unsigned long long)st.frames_refused,
	       (unsigned long long)st.peers_forgotten, (unsigned long long)st.peers);
	CHECK(st.msgs_sent == (uint64_t)n && st.msgs_received == (uint64_t)n &&
		      st.bytes_sent == bytes && st.bytes_received == bytes,
	      "counters against %d messages of %llu B in all each way", n,
	      (unsigned long long)bytes);
	zap_close(t);
	printf("%s: %d messages ok\n", argv[1], n);
	if (!strcmp(argv[1], "ping") && n > 0 && n <= 100000) {
		qsort(rtt, (size_t)n, sizeof(rtt[0]), cmp_u64);
		printf("ping: round trip median %.1f us, p99 %.1f us, max %.1f us\n",
		       rtt[n / 2] / 1e3, rtt[(size_t)n * 99 / 100] / 1e3,
		       rtt[n - 1] / 1e3);
	}
	return 0;
}
