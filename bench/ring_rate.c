/* SPDX-License-Identifier: MIT */
/*
 * ring_rate: the shared-memory ring alone (util/shm), without the library
 * around it: messages per second of SIZE bytes from one process to
 * another through a ring of the size libzap's same-host path uses, each
 * message written with zshm_send_whole() and copied out by the consumer
 * into a block of its own, as the wire does. Both sides spin; nothing
 * else happens per message. bench/traffic.sh runs it beside zap-perf and
 * ucx_perftest, alternating, so that libzap's 64 B message rate reads
 * as two factors measured on one placement of the VM's CPUs: what the
 * ring's cache-line traffic allows against UCX, and what the library's
 * per-message work takes from that.
 *
 *   ring_rate [SIZE (64)] [COUNT (4000000)] [CPU_PRODUCER,CPU_CONSUMER (0,1)]
 *             [WINDOW (0)]
 *
 * WINDOW: at most that many messages ahead of the consumer, which the
 * producer checks by reading the consumer's position before each message
 * (a cache line of the consumer's per message, which the ring itself reads
 * only when its room runs out); 0: as far ahead as the ring lets it.
 * Prints "ring SIZE COUNT MSGS_PER_S".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shm_ring.h"

#define RING_LOG2 21u   /* TCP_SHM_LOG2 (util/tcp/tcp_shm.h): libzap's ring */
#define BLOCK_BYTES 640 /* a small received message's block (plugins/default) */

/* The first page of the mapping: the two sides' start and end. */
struct ctl {
	_Atomic int ready; /* the consumer attached */
	_Atomic int done;  /* the consumer has every message */
	_Atomic uint64_t bad;
};

struct consumer {
	unsigned char block[BLOCK_BYTES];
	uint64_t got, bytes;
};

static int copy_out(void *user, uint64_t total, uint64_t off, const void *data, size_t len,
		    bool last)
{
	struct consumer *c = user;

	(void)total;
	if (off + len <= sizeof(c->block))
		memcpy(c->block + off, data, len);
	c->bytes += len;
	c->got += last;
	return 0;
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("ring_rate: sched_setaffinity");
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int consume(struct ctl *ctl, void *region, uint64_t count, size_t size)
{
	struct zshm_rx rx;
	struct consumer c = { 0 };

	if (zshm_rx_attach(&rx, region, RING_LOG2, size)) {
		fprintf(stderr, "ring_rate: attach failed\n");
		atomic_store(&ctl->bad, 1);
		atomic_store(&ctl->ready, 1);
		return 1;
	}
	atomic_store(&ctl->ready, 1);
	while (c.got < count) {
		int r = zshm_recv(&rx, copy_out, &c);
		if (r < 0) {
			fprintf(stderr, "ring_rate: zshm_recv: %s\n", strerror(-r));
			atomic_store(&ctl->bad, 1);
			break;
		}
	}
	if (c.bytes != count * size)
		atomic_store(&ctl->bad, 1);
	atomic_store(&ctl->done, 1);
	return 0;
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 64;
	uint64_t count = argc > 2 ? strtoull(argv[2], NULL, 0) : 4000000;
	uint64_t window = argc > 4 ? strtoull(argv[4], NULL, 0) : 0;
	uint64_t span = 8 + ((8 + size + 7) & ~(size_t)7); /* a record's bytes */
	int cp = 0, cc = 1;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (argc > 3 && sscanf(argv[3], "%d,%d", &cp, &cc) != 2) {
		fprintf(stderr, "usage: ring_rate [SIZE] [COUNT] [CPU_PRODUCER,CPU_CONSUMER]\n");
		return 2;
	}
	if (!count || size > BLOCK_BYTES) {
		fprintf(stderr, "ring_rate: SIZE 0-%d, COUNT at least 1\n", BLOCK_BYTES);
		return 2;
	}
	size_t bytes = page + zshm_region_bytes(RING_LOG2);
	unsigned char *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED) {
		perror("ring_rate: mmap");
		return 1;
	}
	struct ctl *ctl = (struct ctl *)(void *)map;
	struct zshm_tx tx;
	if (zshm_tx_init(&tx, map + page, RING_LOG2))
		return 1;
	pid_t pid = fork();
	if (pid < 0) {
		perror("ring_rate: fork");
		return 1;
	}
	if (!pid) {
		/* A consumer left spinning on a core would skew every
		 * measurement after this one: it goes when we go. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == 1)
			_exit(1);
		pin(cc);
		_exit(consume(ctl, map + page, count, size));
	}
	pin(cp);
	unsigned char msg[BLOCK_BYTES];
	memset(msg, 0x5a, sizeof(msg));
	while (!atomic_load(&ctl->ready))
		;
	if (atomic_load(&ctl->bad)) {
		waitpid(pid, NULL, 0);
		return 1;
	}
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < count; i++) {
		bool wake;
		int r;
		/* At most @window messages ahead of the consumer (bytes: all
		 * records are the same size). */
		if (window)
			while (zshm_tx_published(&tx) - zshm_tx_consumed(&tx) >= window * span)
				;
		while ((r = zshm_send_whole(&tx, msg, size, &wake)) == -EAGAIN)
			;
		if (r) {
			fprintf(stderr, "ring_rate: zshm_send_whole: %s\n", strerror(-r));
			kill(pid, SIGKILL);
			return 1;
		}
	}
	while (!atomic_load(&ctl->done))
		;
	uint64_t t1 = now_ns();
	int st;
	waitpid(pid, &st, 0);
	if (atomic_load(&ctl->bad) || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "ring_rate: the consumer did not get every byte\n");
		return 1;
	}
	printf("ring %zu %llu %.0f\n", size, (unsigned long long)count,
	       (double)count * 1e9 / (double)(t1 - t0));
	return 0;
}
