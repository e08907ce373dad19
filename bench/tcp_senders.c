/* SPDX-License-Identifier: MIT */
/*
 * Several threads of one endpoint sending small messages to one peer over
 * the TCP wire (util/tcp), with coalescing (tcp_txq.c) and without
 * (tcp_wire_args.no_coalesce): messages per second, and frames per send
 * system call from tcp_wire_stats(). One process, loopback; a thread of
 * the receiving endpoint drains.
 *
 * usage: tcp_senders [THREADS (8)] [MSGS per thread (20000)] [SIZE (64)]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcp_wire.h"
#include "wire_host.h"

struct job {
	struct tcp_wire *w;
	const char *addr;
	long msgs;
	size_t size;
	int rc;
};

static void *send_main(void *arg)
{
	struct job *j = arg;
	char *buf = calloc(1, j->size);

	for (long i = 0; buf && i < j->msgs && !j->rc; i++)
		j->rc = tcp_wire_send(j->w, j->addr, buf, j->size, NULL);
	free(buf);
	return NULL;
}

static void *recv_main(void *arg)
{
	struct job *j = arg;
	struct tctx c;

	for (long i = 0; i < j->msgs && !j->rc; i++) {
		struct zap_msg *m;
		j->rc = tcp_wire_recv(j->w, within_ms(&c, 30000), &m);
		if (!j->rc)
			m->release(m);
	}
	return NULL;
}

static struct tcp_wire *open_wire(const char *dom, bool no_coalesce)
{
	struct tcp_wire_args a = {
		.host = &host,
		.domain = dom,
		.listen = "127.0.0.1:0",
		.max_msg_size = 1 << 20,
		.alloc = { .alloc = wire_malloc_alloc },
		.no_coalesce = no_coalesce,
	};
	struct tcp_wire *w = NULL;

	if (tcp_wire_open(&a, &w))
		exit(1);
	return w;
}

static int run(int threads, long msgs, size_t size, bool no_coalesce)
{
	struct tcp_wire *a = open_wire("a", false), *b = open_wire("b", no_coalesce);
	char addr[ZAP_PEER_MAX];
	struct job *j = calloc((size_t)threads, sizeof(*j));
	pthread_t *t = calloc((size_t)threads, sizeof(*t)), rt;
	struct tcp_wire_stats st;
	int rc = 0;

	if (!j || !t || tcp_wire_address(a, addr, sizeof(addr)))
		return 1;
	/* Connect first, so that the dial is not measured. */
	rc = tcp_wire_send(b, addr, "", 0, NULL);
	struct job rj = { a, NULL, (long)threads * msgs + 1, 0, 0 };
	pthread_create(&rt, NULL, recv_main, &rj);
	uint64_t t0 = now_ns();
	for (int i = 0; i < threads; i++) {
		j[i] = (struct job){ b, addr, msgs, size, 0 };
		pthread_create(&t[i], NULL, send_main, &j[i]);
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		rc |= j[i].rc;
	}
	pthread_join(rt, NULL);
	double s = (double)(now_ns() - t0) / 1e9;
	rc |= rj.rc;
	tcp_wire_stats(b, &st);
	printf("%-13s %2d threads x %ld x %zu B: %10.0f msg/s, %.3f frames per send call"
	       " (%llu in %llu)\n",
	       no_coalesce ? "one per call" : "coalescing", threads, msgs, size,
	       (double)threads * (double)msgs / s,
	       st.tx_calls ? (double)st.tx_frames / (double)st.tx_calls : 0.0,
	       (unsigned long long)st.tx_frames, (unsigned long long)st.tx_calls);
	tcp_wire_destroy(b);
	tcp_wire_destroy(a);
	free(j);
	free(t);
	return rc != 0;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 8;
	long msgs = argc > 2 ? atol(argv[2]) : 20000;
	size_t size = argc > 3 ? (size_t)atol(argv[3]) : 64;

	if (threads < 1 || msgs < 1)
		return 2;
	return run(threads, msgs, size, true) | run(threads, msgs, size, false);
}
