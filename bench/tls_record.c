/* SPDX-License-Identifier: MIT */
/*
 * What util/tls costs per record, apart from the wire and the scheduler:
 * two ztls connections over a socketpair in one thread, for each TLS 1.3
 * cipher suite and for plain send()/recv() on the same socketpair:
 *   - a 64 B message written on one end and read on the other, both ways
 *     in turn: nanoseconds per message (one write plus one read);
 *   - 1 MiB writes streamed to the reader: MB/s with one core doing both
 *     ends' work (encrypt, send, recv, decrypt), so a sender and a
 *     receiver on a core each would reach up to twice that.
 * bench/tls.sh runs it with its key; the numbers explain the wire's (see
 * docs/wires.md, "TLS speed").
 *
 *   tls_record CERT KEY PINS [MESSAGES] [MIB]   (defaults 200000, 512)
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "zap-tls.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, const char *why)
{
	fprintf(stderr, "tls_record: %s: %s\n", what, why);
	exit(1);
}

/* One end: TLS (tc) or plain (tc NULL). */
struct end {
	int fd;
	struct ztls_conn *tc;
};

static ssize_t wr(struct end *e, const void *b, size_t n)
{
	char why[256];
	short ev;

	if (e->tc) {
		ssize_t k = ztls_write(e->tc, b, n, &ev, why, sizeof(why));

		if (k < 0 && k != -EAGAIN)
			die("write", why);
		return k < 0 ? 0 : k;
	}
	ssize_t k = send(e->fd, b, n, MSG_NOSIGNAL);
	if (k < 0 && errno != EAGAIN)
		die("send", strerror(errno));
	return k < 0 ? 0 : k;
}

static ssize_t rd(struct end *e, void *b, size_t n)
{
	char why[256];
	short ev;

	if (e->tc) {
		ssize_t k = ztls_read(e->tc, b, n, &ev, why, sizeof(why));

		if (k < 0 && k != -EAGAIN)
			die("read", why);
		if (!k)
			die("read", "closed");
		return k < 0 ? 0 : k;
	}
	ssize_t k = recv(e->fd, b, n, 0);
	if (k < 0 && errno != EAGAIN)
		die("recv", strerror(errno));
	if (!k)
		die("recv", "closed");
	return k < 0 ? 0 : k;
}

static void pair(struct ztls_ctx *x, struct end *a, struct end *b)
{
	int sv[2], big = 4 << 20, da = 0, db = 0;
	char why[512];
	short ev;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
		die("socketpair", strerror(errno));
	for (int i = 0; i < 2; i++)
		setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	*a = (struct end){ .fd = sv[0] };
	*b = (struct end){ .fd = sv[1] };
	if (!x)
		return;
	if (ztls_conn_new(x, sv[0], false, NULL, &a->tc, why, sizeof(why)) ||
	    ztls_conn_new(x, sv[1], true, NULL, &b->tc, why, sizeof(why)))
		die("ztls_conn_new", why);
	while (da != 1 || db != 1) {
		if (da != 1 && (da = ztls_handshake(a->tc, &ev, why, sizeof(why))) < 0)
			die("client handshake", why);
		if (db != 1 && (db = ztls_handshake(b->tc, &ev, why, sizeof(why))) < 0)
			die("server handshake", why);
	}
}

static void unpair(struct end *a, struct end *b)
{
	ztls_conn_free(a->tc);
	ztls_conn_free(b->tc);
	close(a->fd);
	close(b->fd);
}

/* 64 B, one way then the other: ns per message. */
static double small(struct end *a, struct end *b, long n)
{
	char m[64] = { 1 }, in[64];
	uint64_t t0 = now_ns();

	for (long i = 0; i < 2 * n; i++) {
		struct end *s = i & 1 ? b : a, *r = i & 1 ? a : b;
		size_t got = 0;

		if (wr(s, m, sizeof(m)) != (ssize_t)sizeof(m))
			die("64 B write", "short");
		while (got < sizeof(in))
			got += (size_t)rd(r, in + got, sizeof(in) - got);
	}
	return (double)(now_ns() - t0) / (double)(2 * n);
}

/* 1 MiB writes, @mib of them: MB/s on one core. */
static double bulk(struct end *a, struct end *b, long mib)
{
	size_t len = 1u << 20, total = (size_t)mib * len, sent = 0, got = 0;
	char *out = calloc(1, len), *in = malloc(len);
	uint64_t t0 = now_ns();

	if (!out || !in)
		die("bulk", "out of memory");
	while (got < total) {
		ssize_t k;

		while (sent < total && (k = wr(a, out + sent % len, len - sent % len)) > 0)
			sent += (size_t)k;
		while ((k = rd(b, in, len)) > 0)
			got += (size_t)k;
	}
	free(out);
	free(in);
	return (double)total / 1e6 / ((double)(now_ns() - t0) / 1e9);
}

int main(int argc, char **argv)
{
	static const char *suites[] = { "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
					"TLS_CHACHA20_POLY1305_SHA256" };
	long n = argc > 4 ? atol(argv[4]) : 200000, mib = argc > 5 ? atol(argv[5]) : 512;
	struct end a, b;

	if (argc < 4 || n <= 0 || mib <= 0) {
		fprintf(stderr, "usage: tls_record CERT KEY PINS [MESSAGES] [MIB]\n");
		return 2;
	}
	printf("%-30s %14s %16s\n", "one thread, socketpair", "64 B (ns/msg)",
	       "1 MiB (MB/s/core)");
	pair(NULL, &a, &b);
	printf("%-30s %14.0f", "plaintext", small(&a, &b, n));
	printf(" %16.0f\n", bulk(&a, &b, mib));
	unpair(&a, &b);
	for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
		struct ztls_config cfg = { .cert = argv[1],
					   .key = argv[2],
					   .peers = argv[3],
					   .suites = suites[i] };
		struct ztls_ctx *x;
		char why[512];

		if (ztls_ctx_new(&cfg, &x, why, sizeof(why)))
			die("ztls_ctx_new", why);
		pair(x, &a, &b);
		printf("%-30s %14.0f", suites[i], small(&a, &b, n));
		printf(" %16.0f\n", bulk(&a, &b, mib));
		unpair(&a, &b);
		ztls_ctx_free(x);
	}
	return 0;
}
