/* SPDX-License-Identifier: MIT */
/*
 * The cost of a new connection on the default transport: the time a
 * client endpoint's first zap_send() to a server takes (connect, the TLS
 * 1.3 handshake with both certificates checked when ZAP_TLS_CERT is set,
 * the HELLO exchange, one 64 B frame).
 *
 * Endpoints are long-lived in applications, so the first connection an
 * endpoint makes or accepts (which also pays OpenSSL's one-time setup of
 * that endpoint's context) is not counted: every server is warmed by one
 * connection from a warm-up client, and each timed client first connects
 * to a spare server. Then each of R clients connects once to each of S
 * servers: S x R timed connections. Prints JSON with the median and mean
 * in microseconds. bench/tls.sh runs it with and without TLS.
 *
 *   tls_handshake [CONNECTIONS]      (default 200; S = 20 servers)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zap/zap.h>

#define SERVERS 20

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int check(int r, const char *what)
{
	if (r)
		fprintf(stderr, "tls_handshake: %s: %s\n", what, zap_strerror(r));
	return r;
}

static int open_ep(struct zap_transport **t)
{
	struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0"};
	return check(zap_pick("=default", 0, &a, t), "zap_pick");
}

/* One message from @c to @addr, received by @s; its send time in us. */
static int one(struct zap_transport *c, struct zap_transport *s,
	       const char *addr, double *us)
{
	char msg[64] = "hello";
	struct zap_msg *m = NULL;
	uint64_t t0 = now_ns();
	int r = zap_send(c, addr, msg, sizeof(msg), NULL);
	uint64_t t1 = now_ns();

	if (check(r, "zap_send") || check(zap_recv(s, NULL, &m), "zap_recv"))
		return 1;
	zap_msg_release(m);
	if (us)
		*us = (double)(t1 - t0) / 1000.0;
	return 0;
}

int main(int argc, char **argv)
{
	int want = argc > 1 ? atoi(argv[1]) : 200;
	int rounds = (want + SERVERS - 1) / SERVERS, n = 0;
	struct zap_transport *srv[SERVERS + 1], *warm;
	char addr[SERVERS + 1][ZAP_PEER_MAX];
	double *us = calloc((size_t)rounds * SERVERS, sizeof(*us)), sum = 0;

	if (want < 1 || !us)
		return 2;
	if (open_ep(&warm))
		return 1;
	for (int i = 0; i <= SERVERS; i++) {
		if (open_ep(&srv[i]) ||
		    check(zap_transport_address(srv[i], addr[i], ZAP_PEER_MAX), "address") ||
		    one(warm, srv[i], addr[i], NULL))
			return 1;
	}
	for (int r = 0; r < rounds; r++) {
		struct zap_transport *c;
		if (open_ep(&c) || one(c, srv[SERVERS], addr[SERVERS], NULL))
			return 1;
		for (int i = 0; i < SERVERS; i++, n++) {
			if (one(c, srv[i], addr[i], &us[n]))
				return 1;
			sum += us[n];
		}
		zap_close(c);
	}
	qsort(us, (size_t)n, sizeof(*us), cmp);
	printf("{\"connections\": %d, \"median_us\": %.1f, \"avg_us\": %.1f, \"min_us\": %.1f}\n",
	       n, us[n / 2], sum / n, us[0]);
	for (int i = 0; i <= SERVERS; i++)
		zap_close(srv[i]);
	zap_close(warm);
	free(us);
	return 0;
}
