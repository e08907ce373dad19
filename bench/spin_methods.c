/* SPDX-License-Identifier: MIT */
/*
 * spin_methods: which way of busy-waiting for a TCP message is cheapest on
 * this host, the measurement behind ZAP_TCP_SPIN_US (tcp_wire.c uses the
 * winner). A 64 B ping-pong over loopback, two processes pinned to two
 * cores, each side waiting for the reply by
 *
 *   block   poll(fds, 3, -1), then recv            (the kernel sleeps)
 *   poll    poll(fds, 3, 0) until ready, then recv
 *   epoll   epoll_wait(ep, ., ., 0) until ready, then recv
 *   recv    recv(MSG_DONTWAIT) until data
 *
 * where the set holds the socket and two idle eventfds, as the wire's
 * does (kick, stop). Also prints the cost of one empty call of each.
 *
 *   spin_methods [ITERS] [CPU_SERVER,CPU_CLIENT]     (default 20000, 0,1)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { M_BLOCK, M_POLL, M_EPOLL, M_RECV, M_N };
static const char *const names[M_N] = {"block", "poll", "epoll", "recv"};

struct waiter {
	int fd, ep;
	struct pollfd p[3];
};

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	sched_setaffinity(0, sizeof(s), &s);
}

static void waiter_init(struct waiter *w, int fd)
{
	int ev1 = eventfd(0, EFD_NONBLOCK), ev2 = eventfd(0, EFD_NONBLOCK);
	int fds[3] = {ev1, ev2, fd};
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	w->fd = fd;
	w->ep = epoll_create1(0);
	for (int i = 0; i < 3; i++) {
		struct epoll_event e = {.events = EPOLLIN, .data.fd = fds[i]};
		epoll_ctl(w->ep, EPOLL_CTL_ADD, fds[i], &e);
		w->p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
	}
}

/* Receive exactly @n bytes, waiting the @m way. */
static int wait_recv(struct waiter *w, int m, char *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		struct epoll_event e[3];
		switch (m) {
		case M_BLOCK:
			poll(w->p, 3, -1);
			break;
		case M_POLL:
			while (poll(w->p, 3, 0) == 0)
				;
			break;
		case M_EPOLL:
			while (epoll_wait(w->ep, e, 3, 0) == 0)
				;
			break;
		default:
			break;
		}
		ssize_t k = recv(w->fd, b + got, n - got, MSG_DONTWAIT);
		if (k > 0)
			got += (size_t)k;
		else if (k == 0 || (errno != EAGAIN && errno != EINTR))
			return -1;
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void pingpong(int m, int iters, int cs, int cc)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	const int warm = 100;
	char b[64] = {0};

	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &sl)) {
		perror("spin_methods: listen");
		exit(1);
	}
	pid_t pid = fork();
	if (pid == 0) {
		struct waiter w;
		pin(cs);
		waiter_init(&w, accept(l, NULL, NULL));
		for (int i = 0; i < iters + warm; i++)
			if (wait_recv(&w, m, b, sizeof(b)) ||
			    send(w.fd, b, sizeof(b), MSG_NOSIGNAL) != sizeof(b))
				_exit(1);
		_exit(0);
	}
	close(l);
	pin(cc);
	struct waiter w;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		perror("spin_methods: connect");
		exit(1);
	}
	waiter_init(&w, fd);
	double *r = malloc(sizeof(*r) * (size_t)iters), sum = 0;
	for (int i = 0; i < iters + warm; i++) {
		double t = now_us();
		if (send(fd, b, sizeof(b), MSG_NOSIGNAL) != sizeof(b) ||
		    wait_recv(&w, m, b, sizeof(b))) {
			fprintf(stderr, "spin_methods: connection lost\n");
			exit(1);
		}
		if (i >= warm) {
			r[i - warm] = (now_us() - t) / 2;
			sum += r[i - warm];
		}
	}
	qsort(r, (size_t)iters, sizeof(*r), cmp);
	printf("%-6s %8.2f %8.2f %8.2f %8.2f\n", names[m], r[0], r[iters / 2],
	       r[(int)((iters - 1) * 0.99)], sum / iters);
	free(r);
	close(fd);
	waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20000, cs = 0, cc = 1;
	if (argc > 2 && sscanf(argv[2], "%d,%d", &cs, &cc) != 2)
		return 2;
	if (iters < 10)
		iters = 10;

	/* One empty call of each (nothing ready). */
	int sp[2];
	socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
	struct waiter w;
	waiter_init(&w, sp[0]);
	struct epoll_event e[3];
	char b[64];
	const int n = 100000;
	double t = now_us();
	for (int i = 0; i < n; i++)
		poll(w.p, 3, 0);
	printf("empty call: poll(3 fds, 0) %.3f us", (now_us() - t) / n);
	t = now_us();
	for (int i = 0; i < n; i++)
		epoll_wait(w.ep, e, 3, 0);
	printf(", epoll_wait(0) %.3f us", (now_us() - t) / n);
	t = now_us();
	for (int i = 0; i < n; i++)
		if (recv(sp[0], b, sizeof(b), MSG_DONTWAIT) > 0)
			break;
	printf(", recv(MSG_DONTWAIT) %.3f us\n", (now_us() - t) / n);

	printf("64 B one-way latency (us) by way of waiting, %d round trips\n"
	       "%-6s %8s %8s %8s %8s\n", iters, "wait", "min", "median", "p99",
	       "mean");
	fflush(stdout);
	for (int m = 0; m < M_N; m++) {
		pingpong(m, iters, cs, cc);
		fflush(stdout);
	}
	return 0;
}
