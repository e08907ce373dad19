/* SPDX-License-Identifier: MIT */
/*
 * raw_tcp: the baseline zap-perf is held against. Plain blocking sockets,
 * TCP_NODELAY, one connection, no framing beyond a fixed-size control
 * header per test: the least any TCP message library has to do.
 *
 *   raw_tcp server PORT
 *   raw_tcp client HOST:PORT [--sizes LIST] [--iters N] [--bytes N] [--json]
 *   raw_tcp --loopback [--cpus S,C] [...]   (forks the server)
 *
 * --spin: receive with MSG_DONTWAIT in a loop instead of blocking (both
 * sides), the busy-polling counterpart of the blocking baseline; for
 * information next to ZAP_TCP_SPIN_US, not the baseline itself.
 *
 * Tests mirror zap-perf: "lat" (ping-pong of SIZE bytes, one-way = RTT/2)
 * and "bw" (stream COUNT messages of SIZE bytes, one 1-byte ack at the
 * end). Output: zap-perf's table or JSON layout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct ctl {
	uint32_t test; /* 1 lat, 2 bw, 3 quit */
	uint32_t pad;
	uint64_t size;
	uint64_t count;
};

static bool spin; /* --spin: busy-poll receives */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void io_all(int fd, void *p, size_t n, bool wr)
{
	char *c = p;
	while (n) {
		ssize_t k = wr ? send(fd, c, n, MSG_NOSIGNAL)
			       : recv(fd, c, n, spin ? MSG_DONTWAIT : 0);
		if (k <= 0) {
			if (k < 0 && (errno == EINTR || (!wr && errno == EAGAIN)))
				continue;
			fprintf(stderr, "raw_tcp: %s: %s\n", wr ? "send" : "recv",
				k ? strerror(errno) : "peer closed");
			exit(1);
		}
		c += k;
		n -= (size_t)k;
	}
}

static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	sched_setaffinity(0, sizeof(s), &s);
}

static int serve_conn(int fd)
{
	unsigned char *buf = NULL;
	size_t cap = 0;
	for (;;) {
		struct ctl c;
		io_all(fd, &c, sizeof(c), false);
		if (c.test == 3)
			break;
		if (c.size > cap) {
			free(buf);
			cap = c.size;
			buf = malloc(cap);
			if (!buf)
				return 1;
		}
		if (c.test == 1) {
			for (uint64_t i = 0; i < c.count; i++) {
				io_all(fd, buf, c.size, false);
				io_all(fd, buf, c.size, true);
			}
		} else {
			for (uint64_t i = 0; i < c.count; i++)
				io_all(fd, buf, c.size, false);
			char a = 'a';
			io_all(fd, &a, 1, true);
		}
	}
	free(buf);
	return 0;
}

static int listen_on(const char *port, int *out_port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)atoi(port))};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 4)) {
		perror("raw_tcp: bind/listen");
		exit(1);
	}
	socklen_t sl = sizeof(sa);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	*out_port = ntohs(sa.sin_port);
	return fd;
}

static int dial(const char *hostport)
{
	char host[256];
	const char *colon = strrchr(hostport, ':');
	if (!colon || (size_t)(colon - hostport) >= sizeof(host)) {
		fprintf(stderr, "raw_tcp: want HOST:PORT\n");
		exit(2);
	}
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = '\0';
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
	if (getaddrinfo(host, colon + 1, &hints, &res)) {
		fprintf(stderr, "raw_tcp: cannot resolve %s\n", host);
		exit(1);
	}
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(fd, res->ai_addr, res->ai_addrlen)) {
		perror("raw_tcp: connect");
		exit(1);
	}
	freeaddrinfo(res);
	nodelay(fd);
	return fd;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t parse_num(const char *s)
{
	char *e;
	uint64_t v = strtoull(s, &e, 10);
	if (*e == 'K' || *e == 'k')
		v <<= 10;
	else if (*e == 'M' || *e == 'm')
		v <<= 20;
	else if (*e == 'G' || *e == 'g')
		v <<= 30;
	return v;
}

static int run_client(int fd, const char *sizes, long iters, uint64_t bytes,
		      bool json, bool do_lat, bool do_bw)
{
	char *dup = strdup(sizes), *save = NULL;
	bool first = true;
	size_t max = 1;
	for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (parse_num(t) > max)
			max = parse_num(t);
	free(dup);
	unsigned char *buf = calloc(1, max);

	if (json)
		printf("{\"transport\":\"raw-tcp\",\"results\":[");
	else
		printf("%-10s %10s %9s %10s %10s %10s %11s\n", "test", "size", "count",
		       "min(us)", "median(us)", "p99(us)", "bw(MB/s)");
	dup = strdup(sizes);
	for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t size = parse_num(t);
		if (do_lat) {
			long n = iters;
			if (size > 65536)
				n = (long)((double)n * 65536.0 / (double)size);
			if (n < 10)
				n = 10;
			long warm = 100;
			struct ctl c = {1, 0, size, (uint64_t)(n + warm)};
			uint64_t *rtt = malloc((size_t)n * sizeof(*rtt));
			double sum = 0;
			io_all(fd, &c, sizeof(c), true);
			for (long i = 0; i < n + warm; i++) {
				uint64_t t0 = now_ns();
				io_all(fd, buf, size, true);
				io_all(fd, buf, size, false);
				if (i >= warm) {
					rtt[i - warm] = now_ns() - t0;
					sum += (double)rtt[i - warm];
				}
			}
			qsort(rtt, (size_t)n, sizeof(*rtt), cmp);
			double mn = rtt[0] / 2000.0, md = rtt[n / 2] / 2000.0,
			       p99 = rtt[(long)((n - 1) * 0.99)] / 2000.0,
			       avg = sum / (double)n / 2000.0;
			if (json)
				printf("%s{\"test\":\"latency\",\"size\":%zu,\"count\":%ld,\"min_us\":%.3f,\"median_us\":%.3f,\"p99_us\":%.3f,\"avg_us\":%.3f}",
				       first ? "" : ",", size, n, mn, md, p99, avg);
			else
				printf("%-10s %10zu %9ld %10.2f %10.2f %10.2f %11s\n", "latency",
				       size, n, mn, md, p99, "-");
			first = false;
			free(rtt);
		}
		if (do_bw) {
			uint64_t count = bytes / (size ? size : 1);
			if (count > 1000000)
				count = 1000000;
			if (!count)
				count = 1;
			struct ctl c = {2, 0, size, count};
			char a;
			io_all(fd, &c, sizeof(c), true);
			uint64_t t0 = now_ns();
			for (uint64_t i = 0; i < count; i++)
				io_all(fd, buf, size, true);
			io_all(fd, &a, 1, false);
			double secs = (now_ns() - t0) / 1e9;
			double mbs = (double)count * (double)size / secs / 1e6;
			if (json)
				printf("%s{\"test\":\"bandwidth\",\"size\":%zu,\"count\":%llu,\"msgs_per_s\":%.1f,\"mb_per_s\":%.3f}",
				       first ? "" : ",", size, (unsigned long long)count,
				       count / secs, mbs);
			else
				printf("%-10s %10zu %9llu %10s %10s %10s %11.1f\n", "bandwidth",
				       size, (unsigned long long)count, "-", "-", "-", mbs);
			first = false;
		}
	}
	if (json)
		printf("]}\n");
	struct ctl q = {3, 0, 0, 0};
	io_all(fd, &q, sizeof(q), true);
	free(dup);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	const char *sizes = "1,64,1K,4K,64K,1M", *target = NULL, *port = NULL;
	long iters = 10000;
	uint64_t bytes = 1ull << 30;
	bool json = false, loop = false, lat = true, bw = true;
	int cs = -1, cc = -1;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--spin")) {
			spin = true;
		} else if (!strcmp(a, "--loopback")) {
			loop = true;
		} else if (!strcmp(a, "--sizes") && v) {
			sizes = v, i++;
		} else if (!strcmp(a, "--iters") && v) {
			iters = (long)parse_num(v), i++;
		} else if (!strcmp(a, "--bytes") && v) {
			bytes = parse_num(v), i++;
		} else if (!strcmp(a, "--tests") && v) {
			lat = strstr(v, "lat") != NULL;
			bw = strstr(v, "bw") != NULL;
			i++;
		} else if (!strcmp(a, "--cpus") && v) {
			sscanf(v, "%d,%d", &cs, &cc), i++;
		} else if (!strcmp(a, "server") && v) {
			port = v, i++;
		} else if (!strcmp(a, "client") && v) {
			target = v, i++;
		} else {
			fprintf(stderr,
				"usage: raw_tcp server PORT | client HOST:PORT | --loopback\n"
				"  [--sizes LIST] [--iters N] [--bytes N] [--tests lat,bw]\n"
				"  [--cpus S,C] [--spin] [--json]\n");
			return !strcmp(a, "-h") || !strcmp(a, "--help") ? 0 : 2;
		}
	}
	if (port) {
		int p, lfd = listen_on(port, &p);
		fprintf(stderr, "raw_tcp: listening on port %d\n", p);
		int fd = accept(lfd, NULL, NULL);
		nodelay(fd);
		return serve_conn(fd);
	}
	if (target)
		return run_client(dial(target), sizes, iters, bytes, json, lat, bw);
	if (!loop) {
		fprintf(stderr, "raw_tcp: server, client or --loopback\n");
		return 2;
	}
	int p, lfd = listen_on("0", &p);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		pin(cs);
		int fd = accept(lfd, NULL, NULL);
		nodelay(fd);
		_exit(serve_conn(fd));
	}
	close(lfd);
	pin(cc);
	char hp[64];
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", p);
	int r = run_client(dial(hp), sizes, iters, bytes, json, lat, bw);
	waitpid(pid, NULL, 0);
	return r;
}
