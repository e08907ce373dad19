/* SPDX-License-Identifier: MIT */
/*
 * The cost of a new connection on the default transport: a server
 * endpoint, and N fresh client endpoints each timing its first zap_send()
 * (connect, TLS 1.3 handshake with both certificates checked when
 * ZAP_TLS_CERT is set, HELLO exchange, one 64 B frame) until it returns;
 * the server receives each message. Prints the median and mean in
 * microseconds as JSON. bench/tls.sh runs it with and without TLS.
 *
 *   tls_handshake [N]      (default 200)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zap/zap.h>

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

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200;
	struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0"};
	struct zap_transport *srv = NULL;
	char addr[ZAP_PEER_MAX], msg[64] = "hello";
	double *us = calloc((size_t)n, sizeof(*us)), sum = 0;
	int r;

	if (n < 1 || !us)
		return 2;
	if ((r = zap_pick("=default", 0, &a, &srv)) ||
	    (r = zap_transport_address(srv, addr, sizeof(addr)))) {
		fprintf(stderr, "tls_handshake: %s\n", zap_strerror(r));
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct zap_transport *c = NULL;
		struct zap_msg *m = NULL;
		if ((r = zap_pick("=default", 0, &a, &c))) {
			fprintf(stderr, "tls_handshake: %s\n", zap_strerror(r));
			return 1;
		}
		uint64_t t0 = now_ns();
		r = zap_send(c, addr, msg, sizeof(msg), NULL);
		uint64_t t1 = now_ns();
		if (r || (r = zap_recv(srv, NULL, &m))) {
			fprintf(stderr, "tls_handshake: %s\n", zap_strerror(r));
			return 1;
		}
		zap_msg_release(m);
		zap_close(c);
		us[i] = (double)(t1 - t0) / 1000.0;
		sum += us[i];
	}
	qsort(us, (size_t)n, sizeof(*us), cmp);
	printf("{\"connections\": %d, \"median_us\": %.1f, \"avg_us\": %.1f, \"min_us\": %.1f}\n",
	       n, us[n / 2], sum / n, us[0]);
	zap_close(srv);
	free(us);
	return 0;
}
