/* SPDX-License-Identifier: MIT */
/*
 * zap-perf: latency, message rate and bandwidth between two libzap
 * endpoints over any transport.
 *
 *   zap-perf server [--listen ADDR]
 *   zap-perf client HOST:PORT
 *   zap-perf --loopback            (forks the server)
 *
 * Protocol on top of zap messages: the client sends a text control message
 * "zperf <test> <size> <count> <window>", the server answers "ok", then
 * the test runs:
 *   lat:  count+warmup round trips of @size bytes (server echoes).
 *   rate: the client sends count messages of @size, at most 2*window
 *         unacknowledged; the server acknowledges every window messages
 *         (1 byte) and once at the end.
 *   bw:   the client streams count messages of @size; one ack at the end.
 * "zperf quit 0 0 0" stops the server. "zperf metrics 0 0 0" (--metrics):
 * after the "ok", the server sends its zap_metrics_render() text.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#include "zap-perf.h"

#define MAX_SIZES 32

struct opts {
	const char *transport;
	const char *listen;
	size_t sizes[MAX_SIZES];
	int nsizes;
	long iters;      /* latency round trips (small sizes) */
	long msgs;       /* rate messages (small sizes) */
	uint64_t bytes;  /* bandwidth bytes per size */
	long window;
	long burst;      /* rate/bw messages per zap_send_burst(); 1: zap_send() */
	long warmup;
	bool do_lat, do_rate, do_bw;
	bool json;
	bool metrics; /* --metrics: both ends' counters after the run */
	int cpu_server, cpu_client;
};

struct result {
	const char *test;
	size_t size;
	long count;
	long burst; /* rate, bandwidth: messages per send call, at most */
	double min_us, median_us, p99_us, avg_us; /* latency */
	double msgs_per_s, mb_per_s;              /* rate, bandwidth (MB = 1e6) */
};

static struct result results[3 * MAX_SIZES];
static int nresults;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zap-perf [options] server\n"
		"       zap-perf [options] client HOST:PORT\n"
		"       zap-perf [options] --loopback\n"
		"\n"
		"Measure latency (ping-pong, one-way = RTT/2: min, median, p99),\n"
		"message rate (a window of messages in flight) and streaming\n"
		"bandwidth between two libzap endpoints, sweeping message sizes.\n"
		"\n"
		"options:\n"
		"  -t, --transport PREF  transport preference, as for zap_pick()\n"
		"                        (default: ZAP_TRANSPORT, else the best)\n"
		"  -l, --listen ADDR     local listen address (server default\n"
		"                        0.0.0.0:18515; client default ZAP_LISTEN or\n"
		"                        any; loopback 127.0.0.1:0); default and uma\n"
		"                        also unix:/path or unix:@name (--loopback:\n"
		"                        the server's, so the pair talk over it)\n"
		"  -s, --sizes LIST      message sizes, e.g. 1,64,4K,1M\n"
		"                        (default 1,64,1K,4K,64K,1M)\n"
		"  -T, --tests LIST      any of lat,rate,bw (default all three)\n"
		"  -n, --iters N         latency round trips per size (default 10000;\n"
		"                        fewer for sizes above 64K)\n"
		"  -m, --msgs N          rate-test messages per size (default 100000;\n"
		"                        capped at 256 MiB per size)\n"
		"  -b, --bytes N         bandwidth bytes streamed per size (default 1G;\n"
		"                        suffixes K M G)\n"
		"  -w, --window N        rate-test messages in flight (default 64)\n"
		"  -B, --burst N         rate and bandwidth: hand up to N messages to\n"
		"                        each zap_send_burst() (default 1: zap_send())\n"
		"      --warmup N        unmeasured round trips first (default 100)\n"
		"      --cpus S,C        loopback: pin server to CPU S, client to C\n"
		"  -j, --json            one JSON object on stdout instead of a table\n"
		"      --metrics         after the results, both ends' counters and\n"
		"                        peers in the Prometheus text format (with\n"
		"                        --json: the object's \"metrics\" string)\n"
		"  -h, --help            this text\n"
		"\n"
		"Exit status: 0 on success, 1 on a transport error, 2 on bad usage.\n");
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B')
		end++;
	if (*end)
		return -1;
	*out = v;
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die_zap(const char *what, int r)
{
	fprintf(stderr, "zap-perf: %s: %s\n", what, zap_strerror(r));
	exit(1);
}

static struct zap_msg *recv_or_die(struct zap_transport *t)
{
	struct zap_msg *m = NULL;
	int r = zap_recv(t, NULL, &m);
	if (r)
		die_zap("recv", r);
	return m;
}

static void send_or_die(struct zap_transport *t, const char *peer,
			const void *b, size_t n)
{
	int r = zap_send(t, peer, b, n, NULL);
	if (r)
		die_zap("send", r);
}

/* Send @k (>= 1) copies of @b: one zap_send(), or a zap_send_burst(),
 * which may take fewer. The count taken. */
static long send_some(struct zap_transport *t, const char *peer, const void *b,
		      size_t n, long k)
{
	struct zap_iov v[256];

	if (k == 1) {
		send_or_die(t, peer, b, n);
		return 1;
	}
	if (k > 256)
		k = 256;
	for (long i = 0; i < k; i++)
		v[i] = (struct zap_iov){ b, n };
	int r = zap_send_burst(t, peer, v, (unsigned int)k, NULL);
	if (r < 0)
		die_zap("send", r);
	return r;
}

static struct zap_transport *open_transport(const struct opts *o,
					    const char *listen)
{
	struct zap_attr a = {.size = sizeof(a), .listen = listen};
	struct zap_transport *t = NULL;
	int r = zap_pick(o->transport, 0, &a, &t);
	if (r)
		die_zap("open", r);
	return t;
}

static void pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("zap-perf: sched_setaffinity");
}

/* ------------------------------------------------------------------------ */
/* Server                                                                    */
/* ------------------------------------------------------------------------ */

static int serve(struct zap_transport *t)
{
	unsigned char ack = 'a';
	unsigned char *buf = NULL;
	size_t cap = 0;

	for (;;) {
		struct zap_msg *m = recv_or_die(t);
		char cmd[128], test[16];
		size_t n = zap_msg_len(m);
		unsigned long long size, count, window;
		if (n >= sizeof(cmd) || n < 6 ||
		    memcmp(zap_msg_data(m), "zperf ", 6)) {
			zap_msg_release(m); /* stray data from an aborted run */
			continue;
		}
		memcpy(cmd, zap_msg_data(m), n);
		cmd[n] = '\0';
		char peer[ZAP_PEER_MAX];
		snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
		zap_msg_release(m);
		if (sscanf(cmd, "zperf %15s %llu %llu %llu", test, &size, &count,
			   &window) != 4)
			continue;
		if (!strcmp(test, "quit")) {
			send_or_die(t, peer, "ok", 2);
			break;
		}
		if (!strcmp(test, "metrics")) {
			send_or_die(t, peer, "ok", 2);
			if (perf_metrics_answer(t, peer))
				fprintf(stderr, "zap-perf: cannot send the metrics\n");
			continue;
		}
		if (size > cap) {
			free(buf);
			buf = calloc(1, size);
			if (!buf) {
				fprintf(stderr, "zap-perf: out of memory\n");
				return 1;
			}
			cap = size;
		}
		send_or_die(t, peer, "ok", 2);
		if (!strcmp(test, "lat")) {
			for (unsigned long long i = 0; i < count; i++) {
				m = recv_or_die(t);
				send_or_die(t, peer, zap_msg_data(m), zap_msg_len(m));
				zap_msg_release(m);
			}
		} else if (!strcmp(test, "rate") || !strcmp(test, "bw")) {
			for (unsigned long long i = 1; i <= count; i++) {
				m = recv_or_die(t);
				zap_msg_release(m);
				if (window && i % window == 0 && i != count)
					send_or_die(t, peer, &ack, 1);
			}
			send_or_die(t, peer, &ack, 1);
		}
	}
	free(buf);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

static void control(struct zap_transport *t, const char *peer, const char *test,
		    size_t size, long count, long window)
{
	char cmd[128];
	int n = snprintf(cmd, sizeof(cmd), "zperf %s %zu %ld %ld", test, size,
			 count, window);
	send_or_die(t, peer, cmd, (size_t)n);
	struct zap_msg *m = recv_or_die(t);
	if (zap_msg_len(m) != 2 || memcmp(zap_msg_data(m), "ok", 2)) {
		fprintf(stderr, "zap-perf: the server did not accept \"%s\"\n", cmd);
		exit(1);
	}
	zap_msg_release(m);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void run_lat(const struct opts *o, struct zap_transport *t,
		    const char *peer, size_t size, unsigned char *buf)
{
	long iters = o->iters;
	if (size > 65536)
		iters = (long)((double)iters * 65536.0 / (double)size);
	if (iters < 10)
		iters = 10;
	long warm = o->warmup;
	uint64_t *rtt = malloc((size_t)iters * sizeof(*rtt));
	if (!rtt)
		exit(1);
	control(t, peer, "lat", size, iters + warm, 0);
	for (long i = 0; i < iters + warm; i++) {
		uint64_t t0 = now_ns();
		send_or_die(t, peer, buf, size);
		struct zap_msg *m = recv_or_die(t);
		uint64_t t1 = now_ns();
		if (zap_msg_len(m) != size) {
			fprintf(stderr, "zap-perf: echo of %zu bytes came back as %zu\n",
				size, zap_msg_len(m));
			exit(1);
		}
		zap_msg_release(m);
		if (i >= warm)
			rtt[i - warm] = t1 - t0;
	}
	qsort(rtt, (size_t)iters, sizeof(*rtt), cmp_u64);
	double sum = 0;
	for (long i = 0; i < iters; i++)
		sum += (double)rtt[i];
	struct result *r = &results[nresults++];
	*r = (struct result){.test = "latency", .size = size, .count = iters};
	r->min_us = (double)rtt[0] / 2000.0;
	r->median_us = (double)rtt[iters / 2] / 2000.0;
	r->p99_us = (double)rtt[(long)((double)(iters - 1) * 0.99)] / 2000.0;
	r->avg_us = sum / (double)iters / 2000.0;
	free(rtt);
}

/* The path the run's messages took (zap_peer_path()), "-" if unknown. */
static char run_path[16] = "-";

static void run_stream(const struct opts *o, struct zap_transport *t,
		       const char *peer, size_t size, unsigned char *buf,
		       bool bw)
{
	long count, window;
	if (bw) {
		uint64_t c = o->bytes / (size ? size : 1);
		count = c > 1000000 ? 1000000 : (long)c;
		window = 0;
	} else {
		count = o->msgs;
		if ((uint64_t)count * size > (256ull << 20))
			count = (long)((256ull << 20) / size);
		window = o->window;
	}
	if (count < 1)
		count = 1;
	control(t, peer, bw ? "bw" : "rate", size, count, window);
	long nacks = 0, sent = 0;
	/* The server acks every window messages and once after the last. */
	long total_acks = window ? (count - 1) / window + 1 : 1;
	uint64_t t0 = now_ns();
	while (sent < count) {
		/* At most two windows unacknowledged. */
		while (window && sent - nacks * window >= 2 * window) {
			zap_msg_release(recv_or_die(t));
			nacks++;
		}
		/* Up to --burst at once, within the window. */
		long k = o->burst;
		if (k > count - sent)
			k = count - sent;
		if (window && k > 2 * window - (sent - nacks * window))
			k = 2 * window - (sent - nacks * window);
		sent += send_some(t, peer, buf, size, k);
	}
	while (nacks < total_acks) {
		zap_msg_release(recv_or_die(t));
		nacks++;
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	struct result *r = &results[nresults++];
	*r = (struct result){.test = bw ? "bandwidth" : "rate", .size = size,
			     .count = count, .burst = o->burst};
	r->msgs_per_s = (double)count / secs;
	r->mb_per_s = (double)count * (double)size / secs / 1e6;
}

static int client(const struct opts *o, struct zap_transport *t,
		  const char *peer, bool quit)
{
	size_t max = 1;
	for (int i = 0; i < o->nsizes; i++)
		if (o->sizes[i] > max)
			max = o->sizes[i];
	unsigned char *buf = malloc(max);
	if (!buf)
		return 1;
	for (size_t i = 0; i < max; i++)
		buf[i] = (unsigned char)i;
	for (int i = 0; i < o->nsizes; i++) {
		if (o->do_lat)
			run_lat(o, t, peer, o->sizes[i], buf);
		if (o->do_rate)
			run_stream(o, t, peer, o->sizes[i], buf, false);
		if (o->do_bw)
			run_stream(o, t, peer, o->sizes[i], buf, true);
	}
	/* The path, while the connection is sure to be up (print_results()). */
	if (zap_peer_path(t, peer, run_path, sizeof(run_path)))
		snprintf(run_path, sizeof(run_path), "-");
	if (o->metrics)
		perf_metrics_collect(t, peer);
	if (quit)
		control(t, peer, "quit", 0, 0, 0);
	free(buf);
	return 0;
}

static void print_results(struct zap_transport *t, const char *peer, bool json,
			  bool metrics)
{
	const char *transport = zap_transport_name(t);
	/* How the messages went (per peer: shm, unix or tcp), if it says. */
	const char *path = run_path;
	if (json) {
		printf("{\"transport\":\"%s\",\"peer\":\"%s\",\"path\":\"%s\",\"version\":\"%s\",\"results\":[",
		       transport, peer, path, zap_version());
		for (int i = 0; i < nresults; i++) {
			const struct result *r = &results[i];
			printf("%s{\"test\":\"%s\",\"size\":%zu,\"count\":%ld", i ? "," : "",
			       r->test, r->size, r->count);
			if (!strcmp(r->test, "latency"))
				printf(",\"min_us\":%.3f,\"median_us\":%.3f,\"p99_us\":%.3f,\"avg_us\":%.3f",
				       r->min_us, r->median_us, r->p99_us, r->avg_us);
			else
				printf(",\"burst\":%ld,\"msgs_per_s\":%.1f,\"mb_per_s\":%.3f",
				       r->burst, r->msgs_per_s, r->mb_per_s);
			printf("}");
		}
		printf("]");
		if (metrics) {
			printf(",\"metrics\":\"");
			perf_metrics_print(stdout, true);
			printf("\"");
		}
		printf("}\n");
		return;
	}
	printf("transport %s, peer %s, path %s (latency is one-way: RTT/2; MB = 10^6 bytes)\n",
	       transport, peer, path);
	printf("%-10s %10s %9s %10s %10s %10s %13s %11s\n", "test", "size", "count",
	       "min(us)", "median(us)", "p99(us)", "rate(msg/s)", "bw(MB/s)");
	for (int i = 0; i < nresults; i++) {
		const struct result *r = &results[i];
		if (!strcmp(r->test, "latency"))
			printf("%-10s %10zu %9ld %10.2f %10.2f %10.2f %13s %11s\n",
			       r->test, r->size, r->count, r->min_us, r->median_us,
			       r->p99_us, "-", "-");
		else
			printf("%-10s %10zu %9ld %10s %10s %10s %13.0f %11.1f\n", r->test,
			       r->size, r->count, "-", "-", "-", r->msgs_per_s,
			       r->mb_per_s);
	}
	if (metrics) {
		printf("\n");
		perf_metrics_print(stdout, false);
	}
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

#define GO_ON -1 /* parse_opts(): no exit status yet, run the mode */

/* -s: a comma-separated size list. */
static int parse_sizes(struct opts *o, const char *arg)
{
	uint64_t v;

	o->nsizes = 0;
	char *dup = strdup(arg), *save = NULL;
	for (char *tok = strtok_r(dup, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->nsizes == MAX_SIZES || parse_size(tok, &v)) {
			fprintf(stderr, "zap-perf: bad size list \"%s\"\n", arg);
			free(dup);
			return 2;
		}
		o->sizes[o->nsizes++] = (size_t)v;
	}
	free(dup);
	if (!o->nsizes) {
		fprintf(stderr, "zap-perf: empty size list\n");
		return 2;
	}
	return GO_ON;
}

/* -n, -m, -w, -B, --warmup, -b: a count or a byte size. */
static int parse_count(struct opts *o, int c, const char *arg)
{
	uint64_t v;

	if (parse_size(arg, &v) || (c != 'W' && !v) ||
	    v > (c == 'b' ? UINT64_MAX : (uint64_t)LONG_MAX)) {
		fprintf(stderr, "zap-perf: bad number \"%s\"\n", arg);
		return 2;
	}
	if (c == 'n') o->iters = (long)v;
	else if (c == 'm') o->msgs = (long)v;
	else if (c == 'w') o->window = (long)v;
	else if (c == 'B') o->burst = (long)v;
	else if (c == 'W') o->warmup = (long)v;
	else o->bytes = v;
	return GO_ON;
}

/* The command line into @o and @loopback: GO_ON, or the exit status. */
static int parse_opts(int argc, char **argv, struct opts *o, bool *loopback)
{
	static const size_t def_sizes[] = {1, 64, 1024, 4096, 65536, 1u << 20};
	static const struct option lo[] = {
		{"transport", required_argument, NULL, 't'},
		{"listen", required_argument, NULL, 'l'},
		{"sizes", required_argument, NULL, 's'},
		{"tests", required_argument, NULL, 'T'},
		{"iters", required_argument, NULL, 'n'},
		{"msgs", required_argument, NULL, 'm'},
		{"bytes", required_argument, NULL, 'b'},
		{"window", required_argument, NULL, 'w'},
		{"burst", required_argument, NULL, 'B'},
		{"warmup", required_argument, NULL, 'W'},
		{"cpus", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"metrics", no_argument, NULL, 'M'},
		{"loopback", no_argument, NULL, 'L'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int c, r = GO_ON;

	memcpy(o->sizes, def_sizes, sizeof(def_sizes));
	o->nsizes = (int)(sizeof(def_sizes) / sizeof(def_sizes[0]));
	while (r == GO_ON &&
	       (c = getopt_long(argc, argv, "t:l:s:T:n:m:b:w:B:jh", lo, NULL)) != -1) {
		switch (c) {
		case 't': o->transport = optarg; break;
		case 'l': o->listen = optarg; break;
		case 's': r = parse_sizes(o, optarg); break;
		case 'T':
			o->do_lat = strstr(optarg, "lat") != NULL;
			o->do_rate = strstr(optarg, "rate") != NULL;
			o->do_bw = strstr(optarg, "bw") != NULL;
			if (!o->do_lat && !o->do_rate && !o->do_bw) {
				fprintf(stderr, "zap-perf: --tests wants lat,rate,bw\n");
				r = 2;
			}
			break;
		case 'n': case 'm': case 'w': case 'W': case 'b': case 'B':
			r = parse_count(o, c, optarg);
			break;
		case 'c':
			if (sscanf(optarg, "%d,%d", &o->cpu_server, &o->cpu_client) != 2) {
				fprintf(stderr, "zap-perf: --cpus wants S,C\n");
				r = 2;
			}
			break;
		case 'j': o->json = true; break;
		case 'M': o->metrics = true; break;
		case 'L': *loopback = true; break;
		case 'h': usage(stdout); r = 0; break;
		default: usage(stderr); r = 2; break;
		}
	}
	return r;
}

/* ------------------------------------------------------------------------ */
/* Modes                                                                     */
/* ------------------------------------------------------------------------ */

/* The forked server of --loopback: tells the parent its address through
 * @wfd, serves until the client says quit. Never returns. */
static void loopback_server(const struct opts *o, int wfd)
{
	pin(o->cpu_server);
	struct zap_transport *t =
		open_transport(o, o->listen ? o->listen : "127.0.0.1:0");
	char addr[ZAP_PEER_MAX];
	int r = zap_transport_address(t, addr, sizeof(addr));
	if (r)
		die_zap("address", r);
	if (write(wfd, addr, strlen(addr) + 1) < 0)
		_exit(1);
	close(wfd);
	r = serve(t);
	zap_close(t);
	_exit(r);
}

static int run_loopback(const struct opts *o)
{
	int pfd[2];
	if (pipe(pfd)) {
		perror("zap-perf: pipe");
		return 1;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("zap-perf: fork");
		return 1;
	}
	if (pid == 0) {
		close(pfd[0]);
		loopback_server(o, pfd[1]);
	}
	close(pfd[1]);
	char addr[ZAP_PEER_MAX] = "";
	ssize_t k = read(pfd[0], addr, sizeof(addr) - 1);
	close(pfd[0]);
	if (k <= 0) {
		fprintf(stderr, "zap-perf: the server process did not start\n");
		waitpid(pid, NULL, 0);
		return 1;
	}
	pin(o->cpu_client);
	struct zap_transport *t = open_transport(o, "127.0.0.1:0");
	int r = client(o, t, addr, true);
	int st = 0;
	waitpid(pid, &st, 0);
	if (!r && (!WIFEXITED(st) || WEXITSTATUS(st)))
		r = 1;
	if (!r)
		print_results(t, addr, o->json, o->metrics);
	zap_close(t);
	return r;
}

static int run_server(const struct opts *o)
{
	struct zap_transport *t =
		open_transport(o, o->listen ? o->listen : "0.0.0.0:18515");
	char addr[ZAP_PEER_MAX];
	if (!zap_transport_address(t, addr, sizeof(addr)))
		fprintf(stderr, "zap-perf: %s server on %s\n",
			zap_transport_name(t), addr);
	int r = serve(t);
	zap_close(t);
	return r;
}

static int run_client(const struct opts *o, const char *peer)
{
	struct zap_transport *t = open_transport(o, o->listen);
	int r = client(o, t, peer, false);
	if (!r)
		print_results(t, peer, o->json, o->metrics);
	zap_close(t);
	return r;
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	struct opts o = {
		.iters = 10000, .msgs = 100000, .bytes = 1ull << 30, .window = 64, .burst = 1,
		.warmup = 100, .do_lat = true, .do_rate = true, .do_bw = true,
		.cpu_server = -1, .cpu_client = -1,
	};
	bool loopback = false;
	int r = parse_opts(argc, argv, &o, &loopback);

	if (r != GO_ON)
		return r;
	const char *mode = optind < argc ? argv[optind] : NULL;

	if (loopback) {
		if (mode) {
			usage(stderr);
			return 2;
		}
		return run_loopback(&o);
	}
	if (mode && !strcmp(mode, "server") && optind + 1 == argc)
		return run_server(&o);
	if (mode && !strcmp(mode, "client") && optind + 2 == argc)
		return run_client(&o, argv[optind + 1]);
	usage(stderr);
	return 2;
}
