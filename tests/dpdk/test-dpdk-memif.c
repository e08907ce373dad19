/* SPDX-License-Identifier: MIT */
/*
 * Two processes over net_memif (a unix socket plus shared memory: no NIC,
 * no root, --no-huge). The parent forks a server (10.77.0.1:5000, lcore 1)
 * and a client (10.77.0.2:5001, lcore 0), each with its own file prefix;
 * they share only the memif socket name. argv[1] picks the case:
 *
 *   sizes   0 B .. 64 MiB intact, each answered by the server replying to
 *           the peer it received from
 *   order   100k messages arrive in order, none lost or repeated
 *   loss    both sides drop 5% of received frames (ZAP_DPDK_DROP_RX):
 *           20k messages, some spanning many frames, still arrive exactly
 *           once and in order
 *   vanish  a client dies in the middle of a 64 MiB message; the server
 *           delivers no partial message, adopts the restarted client's new
 *           stream at once, and a send to a peer that is gone fails with
 *           -ECONNRESET after ZAP_DPDK_PEER_TIMEOUT_MS; then it forgets
 *           the peer (zap_stats().peers_forgotten)
 *
 * Each case also checks what zap_stats() and zap_peer_list() say: the
 * exact message and byte counts of sizes, retransmissions under loss.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>

#include "dp-test.h"

#define SRV "10.77.0.1:5000"
#define MIB (1ull << 20)

static char sock_name[64];

static void child_env(bool server, const char *prefix)
{
	char eal[512];

	snprintf(eal, sizeof(eal),
		 "--no-huge --no-shconf -m 256 --no-pci --no-telemetry -l %d "
		 "--vdev=net_memif0,role=%s,socket=%s,mac=02:00:00:77:00:%02d "
		 "--file-prefix=zapdp%s%d%s",
		 server ? 1 : 0, server ? "server" : "client", sock_name, server ? 1 : 2,
		 prefix, (int)getppid(), server ? "s" : "c");
	setenv("ZAP_DPDK_EAL_ARGS", eal, 1);
	setenv("ZAP_DPDK_IP", server ? "10.77.0.1" : "10.77.0.2", 1);
	setenv("ZAP_DPDK_UDP_PORT", server ? "5000" : "5001", 1);
	setenv("ZAP_TRANSPORT_QUIET", "1", 1);
	dpt_who = server ? "server" : "client";
}

static struct zap_msg *recv_msg(struct zap_transport *t, uint64_t ms)
{
	struct zap_ctx *ctx = dpt_timeout(ms);
	struct zap_msg *m = NULL;
	int rc = zap_recv(t, ctx, &m);

	CHECK_RC(rc, "zap_recv");
	zap_ctx_free(ctx);
	return m;
}

static void send_msg(struct zap_transport *t, const char *peer, const void *b, size_t len,
		     uint64_t ms)
{
	struct zap_ctx *ctx = dpt_timeout(ms);
	int rc = zap_send(t, peer, b, len, ctx);

	CHECK(rc == 0, "zap_send(%s, %zu): %d %s", peer, len, rc, zap_strerror(rc));
	zap_ctx_free(ctx);
}

/* ---------------------------------------------------- stats and peers */

static struct zap_stats stats_of(struct zap_transport *t)
{
	struct zap_stats s = { .size = sizeof(s) };
	int rc = zap_stats(t, &s);

	CHECK_RC(rc, "zap_stats");
	return s;
}

/* @t's counters and its one peer's row against what was sent and
 * received (messages, payload bytes). */
static void check_counts(struct zap_transport *t, const char *peer, bool dialed,
			 uint64_t msgs_tx, uint64_t bytes_tx, uint64_t msgs_rx,
			 uint64_t bytes_rx)
{
	struct zap_stats s = stats_of(t);
	struct zap_peer_info p[2] = { { .size = sizeof(p[0]) } };
	int n = zap_peer_list(t, p, 2);
	char text[1 << 14];

	CHECK(s.msgs_sent == msgs_tx && s.bytes_sent == bytes_tx,
	      "sent %llu/%llu B, want %llu/%llu B", (unsigned long long)s.msgs_sent,
	      (unsigned long long)s.bytes_sent, (unsigned long long)msgs_tx,
	      (unsigned long long)bytes_tx);
	CHECK(s.msgs_received == msgs_rx && s.bytes_received == bytes_rx,
	      "received %llu/%llu B, want %llu/%llu B", (unsigned long long)s.msgs_received,
	      (unsigned long long)s.bytes_received, (unsigned long long)msgs_rx,
	      (unsigned long long)bytes_rx);
	CHECK(s.peers == 1 && s.rxq_msgs == 0 && s.partial_bytes == 0,
	      "peers %llu, queued %llu, partial %llu B", (unsigned long long)s.peers,
	      (unsigned long long)s.rxq_msgs, (unsigned long long)s.partial_bytes);
	CHECK(n == 1, "zap_peer_list: %d", n);
	CHECK(!strcmp(p[0].peer, peer) && !strcmp(p[0].path, "dpdk") && !p[0].identity[0] &&
		      !p[0].tls && p[0].dialed == dialed,
	      "row: peer %s path %s identity '%s' dialed %d", p[0].peer, p[0].path,
	      p[0].identity, p[0].dialed);
	CHECK(p[0].msgs_sent == msgs_tx && p[0].bytes_sent == bytes_tx &&
		      p[0].msgs_received == msgs_rx && p[0].bytes_received == bytes_rx,
	      "row counts %llu/%llu, %llu/%llu", (unsigned long long)p[0].msgs_sent,
	      (unsigned long long)p[0].bytes_sent, (unsigned long long)p[0].msgs_received,
	      (unsigned long long)p[0].bytes_received);
	/* Whoever sent data has a round-trip estimate from the ACKs. */
	CHECK(!msgs_tx || (p[0].rtt_us >= 0 && p[0].rtt_var_us >= 0), "rtt %lld",
	      (long long)p[0].rtt_us);
	/* A caller built with the 0.3.0 header (up to events_lost) gets
	 * those members and nothing past them. */
	{
		union {
			struct zap_stats s;
			unsigned char b[sizeof(struct zap_stats)];
		} old;
		size_t end = offsetof(struct zap_stats, retransmits);

		memset(&old, 0xee, sizeof(old));
		old.s.size = end;
		CHECK_RC(zap_stats(t, &old.s), "zap_stats (0.3.0 size)");
		CHECK(old.s.size == end && old.s.msgs_sent == msgs_tx && old.b[end] == 0xee &&
			      old.b[sizeof(old) - 1] == 0xee,
		      "0.3.0-sized zap_stats: size %zu, sent %llu", old.s.size,
		      (unsigned long long)old.s.msgs_sent);
	}
	n = zap_metrics_render(t, text, sizeof(text));
	CHECK(n > 0 && (size_t)n < sizeof(text) && strstr(text, "zap_frames_refused_total{") &&
		      strstr(text, "path=\"dpdk\""),
	      "metrics: %d", n);
	printf("# %s: sent %llu (%llu B), received %llu (%llu B), retransmits %llu, "
	       "frames refused %llu, rtt %lld us\n",
	       dpt_who, (unsigned long long)s.msgs_sent, (unsigned long long)s.bytes_sent,
	       (unsigned long long)s.msgs_received, (unsigned long long)s.bytes_received,
	       (unsigned long long)s.retransmits, (unsigned long long)s.frames_refused,
	       (long long)p[0].rtt_us);
}

/* --------------------------------------------------------------- sizes */

static const size_t sizes[] = { 0, 1, 100, 1447, 1448, 1449, 2896, 4096, 65536,
				1 * MIB, 8 * MIB, 64 * MIB };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Payload bytes of every size, and of every reply ("ok <size>"). */
static void sizes_totals(uint64_t *bytes, uint64_t *reply_bytes)
{
	*bytes = *reply_bytes = 0;
	for (size_t i = 0; i < NSIZES; i++) {
		char reply[32];

		*bytes += sizes[i];
		*reply_bytes += (uint64_t)snprintf(reply, sizeof(reply), "ok %zu", sizes[i]);
	}
}

static int sizes_server(struct zap_transport *t)
{
	uint64_t bytes, reply_bytes;

	for (size_t i = 0; i < NSIZES; i++) {
		struct zap_msg *m = recv_msg(t, 60000);
		char reply[32];

		CHECK(zap_msg_len(m) == sizes[i], "got %zu want %zu", zap_msg_len(m), sizes[i]);
		CHECK(dpt_check(zap_msg_data(m), sizes[i], i) == 0, "bytes of %zu", sizes[i]);
		CHECK(!strcmp(zap_msg_peer(m), "10.77.0.2:5001"), "peer %s", zap_msg_peer(m));
		snprintf(reply, sizeof(reply), "ok %zu", sizes[i]);
		send_msg(t, zap_msg_peer(m), reply, strlen(reply), 10000);
		zap_msg_release(m);
	}
	sizes_totals(&bytes, &reply_bytes);
	check_counts(t, "10.77.0.2:5001", false, NSIZES, reply_bytes, NSIZES, bytes);
	return 0;
}

static int sizes_client(struct zap_transport *t)
{
	uint8_t *b = malloc(64 * MIB);
	uint64_t bytes, reply_bytes;

	for (size_t i = 0; i < NSIZES; i++) {
		struct zap_msg *m;
		char want[32];
		uint64_t t0 = dpt_now_ms();

		dpt_fill(b, sizes[i], i);
		send_msg(t, SRV, b, sizes[i], 60000);
		m = recv_msg(t, 60000);
		snprintf(want, sizeof(want), "ok %zu", sizes[i]);
		CHECK(zap_msg_len(m) == strlen(want) && !memcmp(zap_msg_data(m), want, strlen(want)),
		      "reply to %zu", sizes[i]);
		CHECK(!strcmp(zap_msg_peer(m), SRV), "reply from %s", zap_msg_peer(m));
		zap_msg_release(m);
		printf("# %zu bytes: %llu ms\n", sizes[i], (unsigned long long)(dpt_now_ms() - t0));
	}
	free(b);
	sizes_totals(&bytes, &reply_bytes);
	check_counts(t, SRV, true, NSIZES, bytes, NSIZES, reply_bytes);
	return 0;
}

/* ------------------------------------------------------- order and loss */

static size_t stream_len(uint64_t i, bool big)
{
	/* Mostly one frame; with @big every 97th message spans ~14 frames. */
	return big && i % 97 == 0 ? 20000 : 8 + (size_t)(i % 57);
}

static int stream_server(struct zap_transport *t, uint64_t n, bool big)
{
	char reply[32];
	struct zap_msg *m;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t got;

		m = recv_msg(t, 60000);
		CHECK(zap_msg_len(m) == stream_len(i, big), "message %llu: len %zu want %zu",
		      (unsigned long long)i, zap_msg_len(m), stream_len(i, big));
		memcpy(&got, zap_msg_data(m), 8);
		CHECK(got == i, "message %llu arrived as number %llu (lost/dup/reordered)",
		      (unsigned long long)i, (unsigned long long)got);
		CHECK(dpt_check((const uint8_t *)zap_msg_data(m) + 8, zap_msg_len(m) - 8, i) == 0,
		      "bytes of message %llu", (unsigned long long)i);
		zap_msg_release(m);
	}
	m = recv_msg(t, 60000);
	CHECK(zap_msg_len(m) == 3 && !memcmp(zap_msg_data(m), "end", 3), "no end marker");
	snprintf(reply, sizeof(reply), "got %llu", (unsigned long long)n);
	send_msg(t, zap_msg_peer(m), reply, strlen(reply), 10000);
	zap_msg_release(m);
	/* Nothing after the marker: no duplicate crept in. */
	{
		struct zap_ctx *ctx = dpt_timeout(300);
		int rc = zap_recv(t, ctx, &m);

		CHECK(rc == -ETIMEDOUT, "extra message after the end: %d", rc);
		zap_ctx_free(ctx);
	}
	return 0;
}

static int stream_client(struct zap_transport *t, uint64_t n, bool big)
{
	uint8_t b[20000];
	char want[32];
	uint64_t t0 = dpt_now_ms();
	struct zap_msg *m;

	for (uint64_t i = 0; i < n; i++) {
		size_t len = stream_len(i, big);

		memcpy(b, &i, 8);
		dpt_fill(b + 8, len - 8, i);
		send_msg(t, SRV, b, len, 30000);
	}
	send_msg(t, SRV, "end", 3, 30000);
	m = recv_msg(t, 60000);
	snprintf(want, sizeof(want), "got %llu", (unsigned long long)n);
	CHECK(zap_msg_len(m) == strlen(want) && !memcmp(zap_msg_data(m), want, strlen(want)),
	      "server's count");
	zap_msg_release(m);
	printf("# %llu messages in %llu ms\n", (unsigned long long)n,
	       (unsigned long long)(dpt_now_ms() - t0));
	{
		struct zap_stats s = stats_of(t);

		CHECK(s.msgs_sent == n + 1 && s.msgs_received == 1, "sent %llu, received %llu",
		      (unsigned long long)s.msgs_sent, (unsigned long long)s.msgs_received);
		/* 5% of frames dropped each way: some went again. */
		CHECK(!big || s.retransmits > 0, "no retransmission under loss");
		printf("# client: %llu retransmits\n", (unsigned long long)s.retransmits);
	}
	return 0;
}

/* -------------------------------------------------------------- vanish */

static int vanish_pipe[2];

static int vanish_server(struct zap_transport *t)
{
	uint8_t *big = malloc(2 * MIB);
	struct zap_ctx *ctx;
	char c;
	int rc;

	for (;;) {
		struct zap_msg *m = recv_msg(t, 60000);
		size_t len = zap_msg_len(m);

		if (len == 64 * MIB) {
			/* The send may have finished before the client died;
			 * then it must be whole. */
			CHECK(dpt_check(zap_msg_data(m), len, 64) == 0, "64 MiB bytes");
			printf("# the 64 MiB message completed before the client died\n");
		} else if (len == 6 && !memcmp(zap_msg_data(m), "hello1", 6)) {
			send_msg(t, zap_msg_peer(m), "ok1", 3, 10000);
		} else {
			CHECK(len == 6 && !memcmp(zap_msg_data(m), "hello2", 6),
			      "unexpected %zu-byte message (a partial one?)", len);
			send_msg(t, zap_msg_peer(m), "ok2", 3, 10000);
			zap_msg_release(m);
			break;
		}
		zap_msg_release(m);
	}
	/* Wait for the second client to be gone too, then send to it. */
	CHECK(read(vanish_pipe[0], &c, 1) == 1, "pipe");
	ctx = dpt_timeout(20000);
	rc = zap_send(t, "10.77.0.2:5001", big, 2 * MIB, ctx);
	printf("# send to the vanished peer: %s\n", zap_strerror(rc));
	CHECK(rc == -ECONNRESET, "send to a vanished peer: %d %s", rc, zap_strerror(rc));
	zap_ctx_free(ctx);
	free(big);
	/* Idle for twice the peer timeout (500 ms here), the peer is
	 * forgotten by the service thread's timers. */
	for (uint64_t t0 = dpt_now_ms();;) {
		struct zap_stats s = stats_of(t);

		if (s.peers_forgotten >= 1 && s.peers == 0) {
			CHECK(zap_peer_list(t, NULL, 0) == 0, "a forgotten peer listed");
			printf("# peer forgotten after %llu ms\n",
			       (unsigned long long)(dpt_now_ms() - t0));
			break;
		}
		CHECK(dpt_now_ms() - t0 < 5000, "peer not forgotten: peers %llu, forgotten %llu",
		      (unsigned long long)s.peers, (unsigned long long)s.peers_forgotten);
		usleep(50000);
	}
	return 0;
}

static void *vanish_big(void *arg)
{
	struct zap_transport *t = arg;
	uint8_t *b = malloc(64 * MIB);

	dpt_fill(b, 64 * MIB, 64);
	zap_send(t, SRV, b, 64 * MIB, NULL);
	return NULL;
}

static int vanish_client1(struct zap_transport *t)
{
	struct zap_msg *m;
	pthread_t th;

	send_msg(t, SRV, "hello1", 6, 10000);
	m = recv_msg(t, 10000);
	zap_msg_release(m);
	pthread_create(&th, NULL, vanish_big, t);
	usleep(30000);
	raise(SIGKILL); /* die mid-message, without closing anything */
	return 1;
}

static int vanish_client2(struct zap_transport *t)
{
	struct zap_msg *m;

	send_msg(t, SRV, "hello2", 6, 10000);
	m = recv_msg(t, 10000);
	CHECK(zap_msg_len(m) == 3 && !memcmp(zap_msg_data(m), "ok2", 3), "reply");
	zap_msg_release(m);
	return 0;
}

/* ------------------------------------------------------------ harness */

typedef int (*role_fn)(struct zap_transport *t);

static pid_t spawn(bool server, const char *mode, role_fn fn, const char **env)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct zap_transport *t;
		int rc;

		child_env(server, mode);
		for (; env && *env; env += 2)
			setenv(env[0], env[1], 1);
		dpt_open(&t);
		rc = fn(t);
		zap_close(t);
		fflush(stdout);
		_exit(rc);
	}
	CHECK(pid > 0, "fork");
	return pid;
}

static int reap(pid_t pid, const char *who)
{
	int st;

	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	fprintf(stderr, "%s: %s %d\n", who, WIFEXITED(st) ? "exit" : "signal",
		WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	return 1;
}

static int order_server(struct zap_transport *t) { return stream_server(t, 100000, false); }
static int order_client(struct zap_transport *t) { return stream_client(t, 100000, false); }
static int loss_server(struct zap_transport *t) { return stream_server(t, 20000, true); }
static int loss_client(struct zap_transport *t) { return stream_client(t, 20000, true); }

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	static const char *loss_env[] = { "ZAP_DPDK_DROP_RX", "0.05", NULL };
	static const char *vanish_env[] = { "ZAP_DPDK_PEER_TIMEOUT_MS", "500", NULL };
	pid_t s, c;
	int bad = 0;

	snprintf(sock_name, sizeof(sock_name), "/zapdp-%d-%s", (int)getpid(), mode);
	if (!strcmp(mode, "sizes")) {
		s = spawn(true, mode, sizes_server, NULL);
		c = spawn(false, mode, sizes_client, NULL);
	} else if (!strcmp(mode, "order")) {
		s = spawn(true, mode, order_server, NULL);
		c = spawn(false, mode, order_client, NULL);
	} else if (!strcmp(mode, "loss")) {
		s = spawn(true, mode, loss_server, loss_env);
		c = spawn(false, mode, loss_client, loss_env);
	} else if (!strcmp(mode, "vanish")) {
		int st;

#if defined(__SANITIZE_ADDRESS__)
		/* DPDK 22.11's net_memif unmaps the regions of a peer that
		 * disconnects without synchronising with an rx burst in
		 * progress (plugins/dpdk/README.md); ASan's slower bursts
		 * widen that window into an occasional crash inside the
		 * driver. The normal build runs this case. */
		printf("SKIP: vanish not run under ASan: DPDK 22.11 net_memif "
		       "disconnect race (see plugins/dpdk/README.md)\n");
		return 77;
#endif
		CHECK(pipe(vanish_pipe) == 0, "pipe");
		s = spawn(true, mode, vanish_server, vanish_env);
		c = spawn(false, mode, vanish_client1, NULL);
		CHECK(waitpid(c, &st, 0) == c && WIFSIGNALED(st), "client 1 did not die");
		c = spawn(false, mode, vanish_client2, NULL);
		bad |= reap(c, "client 2");
		CHECK(write(vanish_pipe[1], "x", 1) == 1, "pipe");
		bad |= reap(s, "server");
		printf("%s - %s\n", bad ? "not ok" : "ok", mode);
		return bad;
	} else {
		fprintf(stderr, "usage: %s sizes|order|loss|vanish\n", argv[0]);
		return 2;
	}
	bad |= reap(c, "client");
	if (bad)
		kill(s, SIGKILL);
	bad |= reap(s, "server");
	printf("%s - %s\n", bad ? "not ok" : "ok", mode);
	return bad;
}
