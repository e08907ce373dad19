/* SPDX-License-Identifier: MIT */
/*
 * What hostile peers cost an endpoint, for the closing note of issue 12
 * (run by hand, not a test; tests/soak/README.md says how).
 *
 *   hostile-rss stall N   N peers (from 127.0.0.2 and up) each announce a
 *                         maximum-size message, send what the endpoint
 *                         will take of it for 3 s, and stall
 *   hostile-rss idle N    N peers complete a HELLO and idle, against an
 *                         endpoint whose RLIMIT_NOFILE is 256
 *
 * The endpoint is a child process echoing every message back; the parent
 * plays the hostile peers and one well-behaved endpoint that measures its
 * round trip (64 B, 200 times) while they hold on. Prints the child's
 * VmRSS before and after, and the good peer's median and worst round
 * trip, or how many of its sends failed.
 *
 * Build against any tree: cc -O2 -Iinclude tests/soak/hostile_rss.c
 * -Lbuild/core -lzap -lpthread (LD_LIBRARY_PATH=build/core to run).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#define MAXMSG (64ull << 20)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static void be64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

static size_t frame_hdr(unsigned char *p, unsigned type, uint64_t len)
{
	memcpy(p, "ZAPW", 4);
	p[4] = 1;
	p[5] = (unsigned char)type;
	p[6] = p[7] = 0;
	be64(p + 8, len);
	return 16;
}

static size_t hello(unsigned char *p, const char *addr, uint64_t id)
{
	size_t n = frame_hdr(p, 1, 16 + strlen(addr));
	be64(p + n, id);
	be64(p + n + 8, 42);
	memcpy(p + n + 16, addr, strlen(addr));
	return n + 16 + strlen(addr);
}

static int connect_from(const struct sockaddr_in *to, const char *from)
{
	struct sockaddr_in me = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	inet_pton(AF_INET, from, &me.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) ||
	    connect(fd, (const struct sockaddr *)to, sizeof(*to))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* The endpoint: echo everything until killed. */
static int serve(int pipe_w, bool low_nofile)
{
	struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0",
			     .max_msg_size = MAXMSG};
	struct zap_transport *t;
	char addr[ZAP_PEER_MAX] = "";

	if (low_nofile) {
		struct rlimit rl = {256, 256};
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (zap_pick("=default", 0, &a, &t) || zap_transport_address(t, addr, sizeof(addr)))
		return 1;
	if (write(pipe_w, addr, sizeof(addr)) != (ssize_t)sizeof(addr))
		return 1;
	for (;;) {
		struct zap_msg *m;
		if (zap_recv(t, NULL, &m))
			continue;
		zap_send(t, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m), NULL);
		zap_msg_release(m);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* 200 pings of 64 B from a fresh endpoint; prints median/worst. */
static void good_peer(const char *ep, const char *label)
{
	struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0"};
	struct zap_transport *t;
	uint64_t rtt[200];
	int n = 0, fails = 0;
	char buf[64] = "ping";

	if (zap_pick("=default", 0, &a, &t)) {
		printf("%s: good peer cannot open\n", label);
		return;
	}
	for (int i = 0; i < 200; i++) {
		struct zap_ctx *ctx;
		struct zap_msg *m;
		zap_ctx_new(&ctx);
		zap_ctx_set_timeout(ctx, 2000000000ull);
		uint64_t t0 = now_ns();
		if (zap_send(t, ep, buf, sizeof(buf), ctx) || zap_recv(t, ctx, &m)) {
			if (++fails == 10 && !n) {
				zap_ctx_free(ctx);
				break; /* locked out: no point waiting 200 times */
			}
		} else {
			rtt[n++] = now_ns() - t0;
			zap_msg_release(m);
		}
		zap_ctx_free(ctx);
	}
	qsort(rtt, (size_t)n, sizeof(rtt[0]), cmp_u64);
	if (n)
		printf("%s: good peer RTT median %.1f us, worst %.1f us, %d of 200 failed\n",
		       label, rtt[n / 2] / 1e3, rtt[n - 1] / 1e3, fails);
	else
		printf("%s: good peer: every round trip failed (%d tried)\n", label, fails);
	zap_close(t);
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "stall") && strcmp(argv[1], "idle"))) {
		fprintf(stderr, "usage: hostile-rss stall|idle N\n");
		return 2;
	}
	bool stall = !strcmp(argv[1], "stall");
	int n = atoi(argv[2]);
	int pfd[2];
	char ep[ZAP_PEER_MAX];

	setvbuf(stdout, NULL, _IOLBF, 0);
	setenv("ZAP_TRANSPORT_QUIET", "1", 1);
	setenv("ZAP_LOG_LEVEL", "error", 1);
	signal(SIGPIPE, SIG_IGN);
	if (pipe(pfd))
		return 1;
	pid_t child = fork();
	if (child == 0) {
		close(pfd[0]);
		_exit(serve(pfd[1], !stall));
	}
	close(pfd[1]);
	if (read(pfd[0], ep, sizeof(ep)) != (ssize_t)sizeof(ep)) {
		fprintf(stderr, "endpoint did not start\n");
		return 1;
	}
	struct sockaddr_in to = {.sin_family = AF_INET};
	char *colon = strrchr(ep, ':');
	to.sin_port = htons((uint16_t)atoi(colon + 1));
	inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);

	char label[64];
	snprintf(label, sizeof(label), "%s %d", argv[1], n);
	good_peer(ep, "baseline");
	long rss0 = rss_kib(child);
	int *fds = calloc((size_t)n, sizeof(int));
	unsigned char *junk = calloc(1, 1 << 20);
	uint64_t sent = 0;
	int up = 0;
	for (int i = 0; i < n; i++) {
		char from[32], claim[48];
		unsigned char h[256];
		snprintf(from, sizeof(from), "127.0.%d.%d", 1 + i / 250, 2 + i % 250);
		snprintf(claim, sizeof(claim), "%s:9", from);
		fds[i] = connect_from(&to, from);
		if (fds[i] < 0)
			continue;
		size_t hn = hello(h, claim, 0x1000 + (uint64_t)i);
		if (stall)
			hn += frame_hdr(h + hn, 2, MAXMSG);
		if (send(fds[i], h, hn, MSG_NOSIGNAL) == (ssize_t)hn)
			up++;
	}
	if (stall) {
		/* Send what the endpoint takes for 3 s, at most most of each
		 * message (it never completes). */
		uint64_t end = now_ns() + 3000000000ull;
		uint64_t *each = calloc((size_t)n, sizeof(uint64_t));
		while (now_ns() < end) {
			int moved = 0;
			for (int i = 0; i < n; i++) {
				if (fds[i] < 0 || each[i] >= MAXMSG - (1 << 20))
					continue;
				ssize_t k = send(fds[i], junk, 1 << 20,
						 MSG_NOSIGNAL | MSG_DONTWAIT);
				if (k > 0) {
					each[i] += (uint64_t)k;
					sent += (uint64_t)k;
					moved = 1;
				}
			}
			if (!moved)
				usleep(10000);
		}
		free(each);
	} else {
		usleep(500000);
	}
	long rss1 = rss_kib(child);
	printf("%s: %d hostile peers up, %.1f MiB sent; endpoint VmRSS %ld -> %ld KiB\n",
	       label, up, sent / 1048576.0, rss0, rss1);
	good_peer(ep, label);
	printf("%s: endpoint VmRSS after the good peer %ld KiB\n", label, rss_kib(child));
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	free(fds);
	free(junk);
	return 0;
}
