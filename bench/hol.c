/* SPDX-License-Identifier: MIT */
/*
 * Votes beside blocks: the 64 B round trip to a peer while another thread
 * of the same endpoint streams large messages to that peer.
 *
 *   hol SIZE [PINGS (5000)] [SECONDS (0: until the pings are done)]
 *   hol --stream SIZE [SECONDS (3)]
 *
 * A server process (default transport, its own endpoint) echoes every
 * message of at most 64 bytes, with the time it received it written in,
 * and drops the others. The client endpoint sends a 64 B ping every 200 us
 * from one thread and waits for its echo, while, with SIZE > 0, a second
 * thread sends SIZE-byte messages to the same server as fast as it can.
 * Prints one line of key=value: the round trip's median, p99 and max in
 * microseconds; the same split at the server's stamp (both processes read
 * one CLOCK_MONOTONIC), the way there (send to the server's zap_recv()) and
 * the way back; the pinger thread's context switches per ping (voluntary
 * and involuntary, getrusage(RUSAGE_THREAD): 1 is the sleep between two
 * pings, more is waits for the echo, a count that does not move with the
 * VM's noise as times do); the pings done; and the streaming rate of the
 * large messages meanwhile. --stream only streams SIZE-byte messages for
 * SECONDS and prints the bandwidth.
 *
 * ZAP_SHM=off (bench/traffic.sh sets it) measures TCP, the default the
 * shared-memory ring. CPUS="a,b" pins the server to core a and the client
 * to core b.
 *
 * Loopback, unless HOL_NETNS names a network namespace (a file such as
 * /run/netns/NAME) for the client and HOL_LISTEN the server's address on
 * a link into it: a path that leaves the host as libzap sees it, whose
 * rate a qdisc on the link can limit (bench/MEASUREMENTS.md,
 * "unsent-bytes").
 *
 * HOL_FIFO=1 runs the pinging thread SCHED_FIFO (root, or CAP_SYS_NICE),
 * so that the kernel hands it the core the moment it is woken, whatever
 * the streaming thread beside it is doing: what is left of its waits is
 * then not the wait for the core (bench/MEASUREMENTS.md,
 * "shm-way-back-wakes").
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#define PING 64
/* In a ping: the client's send time, then the server's receive time. */
#define SENT_AT 8
#define SEEN_AT 16

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pin(int which)
{
	const char *cpus = getenv("CPUS");
	int a = -1, b = -1;
	cpu_set_t set;

	if (!cpus || sscanf(cpus, "%d,%d", &a, &b) != 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(which ? b : a, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static struct zap_transport *open_ep(const char *listen)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = listen };
	struct zap_transport *t = NULL;
	int r = zap_pick("=default", 0, &attr, &t);

	if (r) {
		fprintf(stderr, "hol: zap_pick: %s (%s)\n", zap_strerror(r), zap_last_error());
		exit(2);
	}
	return t;
}

static void serve(struct zap_transport *t)
{
	for (;;) {
		struct zap_msg *m;
		if (zap_recv(t, NULL, &m))
			break;
		size_t len = zap_msg_len(m);
		if (len <= PING) {
			char echo[PING];
			uint64_t seen = now_ns();
			memcpy(echo, zap_msg_data(m), len);
			if (len >= SEEN_AT + sizeof(seen))
				memcpy(echo + SEEN_AT, &seen, sizeof(seen));
			zap_send(t, zap_msg_peer(m), echo, len, NULL);
		}
		zap_msg_release(m);
	}
}

struct streamer {
	struct zap_transport *t;
	const char *peer;
	size_t size;
	uint64_t deadline_ns;
	atomic_bool stop;
	uint64_t msgs;
	int err;
};

static void *stream_main(void *arg)
{
	struct streamer *s = arg;
	char *buf = calloc(1, s->size);

	while (buf && !atomic_load(&s->stop)) {
		struct zap_ctx *ctx = NULL;
		/* A deadline, so that the thread stops however full the
		 * path is when the pings are done: 200 ms, or HOL_SEND_MS
		 * for a slow link. */
		zap_ctx_new(&ctx);
		zap_ctx_set_timeout(ctx, s->deadline_ns);
		int r = zap_send(s->t, s->peer, buf, s->size, ctx);
		zap_ctx_free(ctx);
		if (!r)
			s->msgs++;
		else if (r != -ETIMEDOUT) {
			s->err = r;
			break;
		}
	}
	free(buf);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Sorts @v (@n > 0 values) and prints "@name_med_us=.. @name_p99_us=..". */
static void print_spread(const char *name, uint64_t *v, long n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	printf("%s_med_us=%llu %s_p99_us=%llu ", name, (unsigned long long)v[n / 2], name,
	       (unsigned long long)v[(size_t)((double)n * 0.99)]);
}

int main(int argc, char **argv)
{
	bool stream_only = argc > 1 && !strcmp(argv[1], "--stream");
	int ai = stream_only ? 2 : 1;
	size_t size = argc > ai ? strtoull(argv[ai], NULL, 0) : 0;
	long pings = !stream_only && argc > ai + 1 ? atol(argv[ai + 1]) : 5000;
	double secs = argc > ai + (stream_only ? 1 : 2)
			      ? atof(argv[ai + (stream_only ? 1 : 2)])
			      : (stream_only ? 3 : 0);
	char addr[ZAP_PEER_MAX];
	int pfd[2];

	if (pings < 1 || (stream_only && !size) || pipe(pfd))
		return 2;
	pid_t srv = fork();
	if (srv < 0)
		return 2;
	if (!srv) {
		pin(0);
		const char *listen = getenv("HOL_LISTEN");
		struct zap_transport *t = open_ep(listen ? listen : "127.0.0.1:0");
		zap_transport_address(t, addr, sizeof(addr));
		if (write(pfd[1], addr, sizeof(addr)) != (ssize_t)sizeof(addr))
			_exit(2);
		serve(t);
		_exit(0);
	}
	if (read(pfd[0], addr, sizeof(addr)) != (ssize_t)sizeof(addr))
		return 2;
	pin(1);
	const char *ns = getenv("HOL_NETNS");
	if (ns) {
		int fd = open(ns, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET)) {
			perror("hol: HOL_NETNS");
			kill(srv, SIGKILL);
			return 2;
		}
		close(fd);
	}
	/* In a namespace: any address, so that dials leave by the link. */
	struct zap_transport *t = open_ep(ns ? "0.0.0.0:0" : "127.0.0.1:0");
	struct zap_ctx *ctx = NULL;
	char ping[PING] = "ping";
	struct zap_msg *m;
	int rc = 0;

	/* Connect (and move to shared memory) before measuring. */
	zap_ctx_new(&ctx);
	zap_ctx_set_timeout(ctx, 10000000000u);
	if (zap_send(t, addr, ping, PING, ctx) || zap_recv(t, ctx, &m)) {
		fprintf(stderr, "hol: first round trip: %s\n", zap_last_error());
		kill(srv, SIGKILL);
		return 1;
	}
	zap_msg_release(m);

	const char *dl = getenv("HOL_SEND_MS");
	char *dl_end = NULL;
	unsigned long long send_ms = dl ? strtoull(dl, &dl_end, 10) : 200;
	if (dl && (!*dl || *dl_end || !send_ms || send_ms > 3600000)) {
		fprintf(stderr, "hol: HOL_SEND_MS=%s: want milliseconds, 1 to 3600000\n", dl);
		kill(srv, SIGKILL);
		return 2;
	}
	struct streamer s = { .t = t, .peer = addr, .size = size,
			      .deadline_ns = send_ms * 1000000u };
	pthread_t st;
	uint64_t t0 = now_ns();
	if (size)
		pthread_create(&st, NULL, stream_main, &s);
	if (stream_only) {
		usleep((useconds_t)(secs * 1e6));
		atomic_store(&s.stop, true);
		pthread_join(st, NULL);
		double el = (double)(now_ns() - t0) / 1e9;
		printf("size=%zu stream_MBps=%.0f msgs=%llu err=%d\n", size,
		       (double)s.msgs * (double)size / el / 1e6, (unsigned long long)s.msgs,
		       s.err);
		kill(srv, SIGKILL);
		waitpid(srv, NULL, 0);
		return s.err != 0;
	}
	/* Let the stream fill the path first. */
	if (size)
		usleep(100000);
	uint64_t *rtt = calloc((size_t)pings, sizeof(*rtt));
	uint64_t *there = calloc((size_t)pings, sizeof(*there));
	uint64_t *back = calloc((size_t)pings, sizeof(*back));
	struct rusage ru0, ru1;
	long done = 0;
	const char *fifo = getenv("HOL_FIFO");
	if (fifo && strcmp(fifo, "0") != 0) {
		struct sched_param sp = { .sched_priority = 1 };
		int e = strcmp(fifo, "1") ? EINVAL
					  : pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
		if (e) {
			fprintf(stderr, "hol: HOL_FIFO=%s: %s (want 0 or 1; 1 needs CAP_SYS_NICE)\n",
				fifo, strerror(e));
			kill(srv, SIGKILL);
			return 2;
		}
	}
	uint64_t next = now_ns();
	uint64_t stop_at = secs > 0 ? now_ns() + (uint64_t)(secs * 1e9) : UINT64_MAX;
	getrusage(RUSAGE_THREAD, &ru0);
	while (rtt && there && back && done < pings && now_ns() < stop_at) {
		/* Sleep, not spin, till the next ping: on a machine with few
		 * cores a spinning pinger takes one from the two endpoints. */
		struct timespec at = { (time_t)(next / 1000000000u), (long)(next % 1000000000u) };
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
			;
		next += 200000;
		uint64_t a = now_ns();
		memcpy(ping + SENT_AT, &a, sizeof(a));
		zap_ctx_set_timeout(ctx, 60000000000u);
		if (zap_send(t, addr, ping, PING, ctx)) {
			rc = 1;
			break;
		}
		for (;;) {
			if (zap_recv(t, ctx, &m)) {
				rc = 1;
				break;
			}
			bool echo = false;
			if (zap_msg_len(m) == PING) {
				uint64_t sent, seen;
				memcpy(&sent, (const char *)zap_msg_data(m) + SENT_AT, sizeof(sent));
				memcpy(&seen, (const char *)zap_msg_data(m) + SEEN_AT, sizeof(seen));
				echo = sent == a; /* ours, not a late one's */
				if (echo) {
					there[done] = (seen - a) / 1000;
					back[done] = (now_ns() - seen) / 1000;
				}
			}
			zap_msg_release(m);
			if (echo)
				break;
		}
		if (rc)
			break;
		rtt[done++] = (now_ns() - a) / 1000;
		if (now_ns() > next)
			next = now_ns();
	}
	double el = (double)(now_ns() - t0) / 1e9;
	getrusage(RUSAGE_THREAD, &ru1);
	atomic_store(&s.stop, true);
	if (size)
		pthread_join(st, NULL);
	if (!done) {
		fprintf(stderr, "hol: no ping completed: %s\n", zap_last_error());
		rc = 1;
	} else {
		printf("size=%zu ", size);
		print_spread("rtt", rtt, done); /* sorted: the last is the max */
		printf("rtt_max_us=%llu ", (unsigned long long)rtt[done - 1]);
		print_spread("there", there, done);
		print_spread("back", back, done);
		long cs = (ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw);
		printf("ping_cs=%.2f pings=%ld stream_MBps=%.0f stream_err=%d\n",
		       (double)cs / (double)done, done,
		       (double)s.msgs * (double)size / el / 1e6, s.err);
	}
	free(rtt);
	free(there);
	free(back);
	zap_ctx_free(ctx);
	zap_close(t);
	kill(srv, SIGKILL);
	waitpid(srv, NULL, 0);
	return rc;
}
