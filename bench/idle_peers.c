/* SPDX-License-Identifier: MIT */
/*
 * What connected but idle peers cost a busy endpoint: an echo server (one
 * default-transport endpoint, in a process of its own pinned to one core)
 * holds N idle peers, each of which completed a HELLO and one 64 B round
 * trip; a separate client endpoint then pings it with 64 B messages.
 *
 *   idle_peers PEERS [PINGS (20000)] [BURST (0)]
 *
 * Prints one line of key=value: the round trip's median, p99 and max in
 * microseconds; the server's resident memory before and after the peers
 * connected, and per peer; the server's CPU time over 2 s of nothing
 * (percent of one core); and, with BURST > 0, the same round trip while
 * BURST new peers connect at once (each a HELLO and a round trip).
 *
 * The idle peers are raw sockets speaking the wire (plugins/default/
 * WIRE.md), a few thousand per holder process, each holder on its own
 * loopback address (127.0.0.2 and up), so that 10,000 of them fit the
 * per-process descriptor limit and the ephemeral ports. Run with
 * ZAP_SHM=off (bench/traffic.sh does) for TCP. Loopback only.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#include "zap-test.h" /* zt_wire_hdr(): the raw peers' frames */

#define PER_HOLDER 5000
#define MSG 64

static void die(const char *what, int rc)
{
	fprintf(stderr, "idle_peers: %s: %s\n", what, rc ? zap_strerror(rc) : strerror(errno));
	exit(1);
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static struct zap_transport *endpoint(void)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *t;
	int rc = zap_pick("=default", 0, &attr, &t);

	if (rc)
		die("zap_pick", rc);
	return t;
}

/* The echo server: every message goes back to its sender. */
static void server(int tell)
{
	struct zap_transport *t;
	char addr[ZAP_PEER_MAX];
	int rc;

	raise_nofile();
	pin(0);
	t = endpoint();
	rc = zap_transport_address(t, addr, sizeof(addr));
	if (rc || write(tell, addr, strlen(addr) + 1) < 0)
		die("zap_transport_address", rc);
	for (;;) {
		struct zap_msg *m;

		rc = zap_recv(t, NULL, &m);
		if (rc)
			die("zap_recv", rc);
		rc = zap_send(t, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m), NULL);
		if (rc && rc != -ECONNRESET && rc != -EPIPE)
			die("zap_send", rc);
		zap_msg_release(m);
	}
}

static int read_full(int fd, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t k = read(fd, (char *)buf + got, len - got);
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

/*
 * One idle peer from @src to @port: HELLO (claiming the address the
 * socket has, which is what the connection proves), the server's HELLO,
 * one 64 B round trip. The socket, or -1.
 */
static int peer_connect(const char *src, int port, uint64_t id)
{
	struct sockaddr_in sa = { .sin_family = AF_INET }, me = { .sin_family = AF_INET };
	socklen_t ml = sizeof(me);
	unsigned char buf[16 + 24 + 64 + 16], in[16 + 160];
	char claim[64];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	inet_pton(AF_INET, src, &me.sin_addr);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	sa.sin_port = htons((uint16_t)port);
	/* The port is picked at connect(), by the whole address pair: bind()
	 * picking one alone searched the ephemeral range for a port free on
	 * every address, in the kernel, and with thousands taken a burst's
	 * holder spent most of its time there (non-preemptible here), taking
	 * the core from the client and the server it measures. */
	if (fd >= 0)
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&me, &ml))
		goto fail;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	int cl = snprintf(claim, sizeof(claim), "%s:%d", src, ntohs(me.sin_port));
	zt_wire_hdr(buf, 1, 24 + (uint64_t)cl);
	zt_be64(buf + 16, id);
	zt_be64(buf + 24, id ^ 0x9e3779b97f4a7c15ull);
	zt_be64(buf + 32, 64u << 20);
	memcpy(buf + 40, claim, (size_t)cl);
	if (write(fd, buf, 40 + (size_t)cl) != 40 + cl || read_full(fd, in, 16))
		goto fail;
	uint64_t hl = 0;
	for (int i = 8; i < 16; i++)
		hl = hl << 8 | in[i];
	if (hl > sizeof(in) - 16 || read_full(fd, in + 16, (size_t)hl))
		goto fail;
	zt_wire_hdr(buf, 2, MSG);
	memset(buf + 16, 'i', MSG);
	if (write(fd, buf, 16 + MSG) != 16 + MSG || read_full(fd, in, 16 + MSG))
		goto fail;
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

/* A holder: @n idle peers from 127.0.0.@host, then a byte on @ready. */
static void holder(int n, int host, int port, int ready)
{
	char src[32];
	int made = 0;

	raise_nofile();
	snprintf(src, sizeof(src), "127.0.0.%d", host);
	srand48(getpid());
	for (int i = 0; i < n; i++) {
		uint64_t id = (uint64_t)lrand48() << 32 | (uint64_t)lrand48() | 1;
		made += peer_connect(src, port, id) >= 0;
	}
	if (made < n)
		fprintf(stderr, "idle_peers: holder %d: %d of %d peers connected\n", host,
			made, n);
	if (write(ready, "r", 1) != 1)
		exit(1);
	pause();
}

static pid_t spawn_holders(int n, int first_host, int port, int ready,
			   pid_t *kids, int *nkids)
{
	for (int h = 0; n > 0; h++, n -= PER_HOLDER) {
		pid_t k = fork();

		if (k < 0)
			die("fork", 0);
		if (!k) {
			prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed run */
			holder(n < PER_HOLDER ? n : PER_HOLDER, first_host + h, port, ready);
			_exit(0);
		}
		kids[(*nkids)++] = k;
	}
	return 0;
}

static long long proc_field(pid_t pid, const char *file, const char *key)
{
	char path[64], line[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = atoll(line + strlen(key));
	fclose(f);
	return v;
}

/* utime + stime of @pid in clock ticks. */
static long long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	long long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		exit(1);
	fclose(f);
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld",
			 &ut, &st) != 2)
		exit(1);
	return ut + st;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * 64 B round trips to @srv: @pings of them, or with @until >= 0 as many as
 * fit until @wait bytes came on @until (the burst's holders are done).
 * Fills med, p99, max (us).
 */
static void ping(struct zap_transport *t, const char *srv, int pings, int until, int wait,
		 double *out)
{
	size_t cap = (size_t)pings, n = 0;
	double *rtt = malloc(cap * sizeof(*rtt));
	char msg[MSG], c;

	memset(msg, 'p', sizeof(msg));
	while (until >= 0 ? wait > 0 : n < (size_t)pings) {
		struct zap_msg *m;
		double t0 = now_us();
		int rc = zap_send(t, srv, msg, sizeof(msg), NULL);

		if (!rc)
			rc = zap_recv(t, NULL, &m);
		if (rc)
			die("ping", rc);
		zap_msg_release(m);
		if (n == cap) {
			cap *= 2;
			rtt = realloc(rtt, cap * sizeof(*rtt));
			if (!rtt)
				die("realloc", 0);
		}
		rtt[n++] = now_us() - t0;
		if (until < 0)
			continue;
		/* During the burst, a ping every 200 us, so that the new peers'
		 * holders get a core on a small host. */
		usleep(200);
		struct pollfd pf = { .fd = until, .events = POLLIN };
		while (wait > 0 && poll(&pf, 1, 0) == 1 && read(until, &c, 1) == 1)
			wait--;
	}
	qsort(rtt, n, sizeof(*rtt), cmp_d);
	out[0] = rtt[n / 2];
	out[1] = rtt[(size_t)((double)n * 0.99)];
	out[2] = rtt[n - 1];
	out[3] = (double)n;
	free(rtt);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	int pings = argc > 2 ? atoi(argv[2]) : 20000;
	int burst = argc > 3 ? atoi(argv[3]) : 0;
	pid_t kids[16], srv;
	int nkids = 0, tell[2], ready[2], port;
	char addr[ZAP_PEER_MAX] = "", c;
	double r[4], b[4] = { 0, 0, 0, 0 };

	if (n < 0 || n > 4 * PER_HOLDER || pings < 100 || burst < 0 || burst > 2 * PER_HOLDER) {
		fprintf(stderr, "usage: idle_peers PEERS (<= %d) [PINGS] [BURST]\n",
			4 * PER_HOLDER);
		return 2;
	}
	setenv("ZAP_TRANSPORT_QUIET", "1", 0);
	if (pipe(tell) || pipe(ready))
		die("pipe", 0);
	srv = fork();
	if (!srv) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		server(tell[1]);
		_exit(0);
	}
	if (read(tell[0], addr, sizeof(addr) - 1) <= 0 || !strrchr(addr, ':'))
		die("server address", 0);
	port = atoi(strrchr(addr, ':') + 1);
	usleep(100000);
	long long rss0 = proc_field(srv, "status", "VmRSS:");
	spawn_holders(n, 2, port, ready[1], kids, &nkids);
	for (int i = 0; i < nkids; i++)
		if (read(ready[0], &c, 1) != 1)
			die("holder", 0);
	long long rss1 = proc_field(srv, "status", "VmRSS:");
	long long t0 = cpu_ticks(srv);
	sleep(2);
	long long idle = cpu_ticks(srv) - t0;

	pin(1);
	struct zap_transport *t = endpoint();
	ping(t, addr, pings / 10, -1, 0, r); /* warm up: connection, spin learning */
	ping(t, addr, pings, -1, 0, r);
	if (burst) {
		int held = nkids;
		spawn_holders(burst, 2 + (n + PER_HOLDER - 1) / PER_HOLDER, port, ready[1],
			      kids, &nkids);
		/* While the burst connects, until its holders are done. */
		ping(t, addr, pings, ready[0], nkids - held, b);
	}
	printf("peers=%d rtt_med_us=%.1f rtt_p99_us=%.1f rtt_max_us=%.1f "
	       "rss_before_kib=%lld rss_after_kib=%lld rss_per_peer_b=%.0f "
	       "idle_cpu_pct=%.2f",
	       n, r[0], r[1], r[2], rss0, rss1,
	       n ? (double)(rss1 - rss0) * 1024.0 / n : 0.0,
	       100.0 * (double)idle / (double)sysconf(_SC_CLK_TCK) / 2.0);
	if (burst)
		printf(" burst=%d burst_pings=%.0f burst_rtt_med_us=%.1f "
		       "burst_rtt_p99_us=%.1f burst_rtt_max_us=%.1f",
		       burst, b[3], b[0], b[1], b[2]);
	printf("\n");
	zap_close(t);
	for (int i = 0; i < nkids; i++)
		kill(kids[i], SIGKILL);
	kill(srv, SIGKILL);
	while (wait(NULL) > 0)
		;
	return 0;
}
