/* SPDX-License-Identifier: MIT */
/*
 * What a new connection costs, with and without the same-host upgrade:
 * a server endpoint in a child process; here, ROUNDS times, a fresh
 * endpoint sends one 1-byte message to it and waits for the 1-byte echo.
 * Prints the median and 90th percentile of that first round trip (dial,
 * HELLOs, upgrade if any, one message each way), in microseconds, and the
 * path the last one took (zap_peer_path()).
 *
 *   conn_setup [ROUNDS (200)]
 *
 * Runs whatever ZAP_SHM says: bench/shm.sh runs it with and without.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static struct zap_transport *open_ep(void)
{
	struct zap_attr a = { .size = sizeof(a), .listen = "127.0.0.1:0" };
	struct zap_transport *t = NULL;
	int r = zap_pick("=default", 0, &a, &t);
	if (r) {
		fprintf(stderr, "conn_setup: zap_pick: %s\n", zap_last_error());
		exit(1);
	}
	return t;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200, pfd[2];
	char addr[ZAP_PEER_MAX] = "", path[16] = "?";
	if (rounds < 1 || pipe(pfd))
		return 2;
	pid_t pid = fork();
	if (pid == 0) { /* the server: echo everything */
		struct zap_transport *s = open_ep();
		zap_transport_address(s, addr, sizeof(addr));
		if (write(pfd[1], addr, strlen(addr)) < 0)
			_exit(1);
		for (;;) {
			struct zap_msg *m = NULL;
			if (zap_recv(s, NULL, &m))
				_exit(1);
			zap_send(s, zap_msg_peer(m), "e", 1, NULL);
			zap_msg_release(m);
		}
	}
	if (read(pfd[0], addr, sizeof(addr) - 1) <= 0)
		return 1;
	uint64_t *t = calloc((size_t)rounds, sizeof(*t));
	for (int i = 0; i < rounds; i++) {
		struct zap_transport *c = open_ep();
		struct zap_msg *m = NULL;
		uint64_t t0 = now_us();
		if (zap_send(c, addr, "x", 1, NULL) || zap_recv(c, NULL, &m)) {
			fprintf(stderr, "conn_setup: %s\n", zap_last_error());
			return 1;
		}
		t[i] = now_us() - t0;
		zap_msg_release(m);
		zap_peer_path(c, addr, path, sizeof(path));
		zap_close(c);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	qsort(t, (size_t)rounds, sizeof(*t), cmp);
	printf("{\"path\":\"%s\",\"median_us\":%llu,\"p90_us\":%llu}\n", path,
	       (unsigned long long)t[rounds / 2], (unsigned long long)t[rounds * 9 / 10]);
	free(t);
	return 0;
}
