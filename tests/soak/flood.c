/* SPDX-License-Identifier: MIT */
/*
 * Connection flood against one default-transport endpoint, while
 * well-behaved peers keep talking to it; see README.md here.
 *
 *   zap-flood [--seconds S] [--idle N] [--drip N] [--rate CONNECTS_PER_S]
 *
 * A child process keeps N idle connections (connect, send nothing) and N
 * slow-drip connections (one byte every 100 ms: half a valid HELLO header
 * announcing the longest HELLO, which cannot complete within the
 * handshake timeout, half garbage) open against the server, reconnecting
 * (at most --rate, 2000, connects/s) whenever the server drops one. Meanwhile, in
 * this process:
 *  - 4 clients ping-pong 64-byte messages with the server (an echo thread)
 *    through the whole run: before the flood (baseline) and during it;
 *  - every 250 ms a new client endpoint is opened, makes a new connection
 *    (handshake) and pings once: newcomers must get in during the flood.
 * Checked: no client send or receive fails (each within a scaled 10 s
 * deadline); round trips go on during the flood (their latencies are
 * printed, not bounded: speed belongs to bench/); every newcomer is served; the server's descriptors stay bounded by the
 * pending-handshake cap (ZAP_TCP_MAX_PENDING) plus the real connections;
 * the server actually shed connections (cap) and timed them out
 * (ZAP_TCP_HANDSHAKE_MS); bad values of those variables fail the open with
 * a reason naming them.
 *
 * ZAP_FLOOD_SECONDS overrides --seconds. Exit 0 pass, 1 fail, 2 setup
 * error, 77 skip (RLIMIT_NOFILE too low).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#include "soak-common.h"

#if defined(__SANITIZE_ADDRESS__)
#define SLOW 3
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLOW 3
#endif
#endif
#ifndef SLOW
#define SLOW 1
#endif
/* The flood's bounds are the property under test (legitimate peers are
 * still served while it lasts), so they stay, stretched like every test
 * time limit by ZAP_TEST_TIMEOUT_SCALE (tests/README.md). */
#define SLOW_RUN (SLOW * zt_timeout_ms(1))

#define CLIENTS 4
#define MAX_SAMPLES 200000

static int failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&mu);
	if (failures++ < 20) {
		fprintf(stderr, "FAIL: ");
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------------------ */
/* The flooder (child process, raw sockets)                                  */
/* ------------------------------------------------------------------------ */

struct fconn {
	int fd;
	int kind;       /* 0 idle, 1 drip HELLO, 2 drip garbage */
	unsigned sent;  /* drip bytes written */
	bool up;        /* connected */
	uint64_t born;  /* connect time */
};

static struct sockaddr_in target;

static int fl_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&target, sizeof(target)) && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The byte a drip connection sends at position @i. */
static unsigned char drip_byte(int kind, unsigned i)
{
	/* HELLO header: magic, version 1, type 1, reserved, length 143. */
	static const unsigned char hello[16] = { 0x5a, 0x41, 0x50, 0x57, 1, 1, 0, 0,
						 0, 0, 0, 0, 0, 0, 0, 143 };
	if (kind == 1)
		return i < 16 ? hello[i] : (unsigned char)('a' + i % 26);
	return (unsigned char)(0x41 + i % 7);
}

static int flooder(int rd, int wr, int nidle, int ndrip, uint64_t seconds,
		   unsigned rate)
{
	char addr[ZAP_PEER_MAX] = {0};
	int total = nidle + ndrip;
	struct fconn *c = calloc((size_t)total, sizeof(*c));
	struct pollfd *pf = calloc((size_t)total, sizeof(*pf));
	uint64_t connects = 0, dropped = 0, refused = 0, drip_bytes = 0;
	uint64_t drops[3] = {0}, oldest = 0;

	if (read(rd, addr, sizeof(addr) - 1) <= 0 || !c || !pf)
		return 2;
	char *colon = strrchr(addr, ':');
	*colon = '\0';
	target.sin_family = AF_INET;
	target.sin_port = htons((uint16_t)atoi(colon + 1));
	inet_pton(AF_INET, addr, &target.sin_addr);
	for (int i = 0; i < total; i++) {
		c[i].fd = -1;
		c[i].kind = i < nidle ? 0 : 1 + (i % 2);
	}

	uint64_t start = zt_now_ns(), end = start + seconds * 1000000000ull;
	uint64_t next_drip = start, budget_t = start;
	int budget = 0, cursor = 0;
	bool told = false;
	while (zt_now_ns() < end) {
		uint64_t t = zt_now_ns();
		/* Reconnect what was dropped, at most @rate connects/s (the
		 * first connects of all go out at once). */
		uint64_t add = (t - budget_t) * rate / 1000000000ull;
		if (add) {
			budget += (int)(add < rate ? add : rate);
			if (budget > (int)rate)
				budget = (int)rate;
			budget_t += add * 1000000000ull / rate;
		}
		if (!told)
			budget = total;
		/* Round robin, so that every kind gets reconnected. */
		for (int k = 0; k < total && budget > 0; k++) {
			int i = (cursor + k) % total;
			if (c[i].fd >= 0)
				continue;
			cursor = i + 1;
			c[i].fd = fl_connect();
			c[i].sent = 0;
			c[i].up = false;
			c[i].born = t;
			budget--;
			if (c[i].fd >= 0)
				connects++;
			else
				refused++;
		}
		if (!told && connects >= (uint64_t)total) {
			/* Everyone is connected once: the flood is on. */
			if (write(wr, "F", 1) != 1)
				return 2;
			told = true;
		}
		if (t >= next_drip) {
			for (int i = 0; i < total; i++) {
				if (c[i].fd < 0 || !c[i].kind || !c[i].up)
					continue;
				unsigned char b = drip_byte(c[i].kind, c[i].sent);
				if (send(c[i].fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
					c[i].sent++;
					drip_bytes++;
				}
			}
			next_drip += 100000000ull;
		}
		for (int i = 0; i < total; i++)
			pf[i] = (struct pollfd){.fd = c[i].fd,
						.events = c[i].up ? POLLIN : POLLOUT};
		int r = poll(pf, (nfds_t)total, 10);
		if (r <= 0)
			continue;
		for (int i = 0; i < total; i++) {
			if (!pf[i].revents)
				continue;
			if (!c[i].up && (pf[i].revents & POLLOUT) &&
			    !(pf[i].revents & (POLLERR | POLLHUP))) {
				c[i].up = true;
				continue;
			}
			char buf[256];
			ssize_t k = recv(c[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (k > 0)
				continue; /* a server never answers these, but fine */
			if (k < 0 && errno == EAGAIN && !(pf[i].revents & (POLLERR | POLLHUP)))
				continue;
			/* The server dropped it (EOF or reset). */
			close(c[i].fd);
			c[i].fd = -1;
			dropped++;
			drops[c[i].kind]++;
			if (zt_now_ns() - c[i].born > oldest)
				oldest = zt_now_ns() - c[i].born;
		}
	}
	for (int i = 0; i < total; i++)
		if (c[i].fd >= 0) {
			/* Still open: only the ones accepted lately should be. */
			if (c[i].up && zt_now_ns() - c[i].born > oldest)
				oldest = zt_now_ns() - c[i].born;
			close(c[i].fd);
		}
	char line[256];
	int n = snprintf(line, sizeof(line), "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
			 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
			 connects, dropped, refused, drip_bytes, drops[0], drops[1], drops[2],
			 oldest / 1000000);
	if (write(wr, line, (size_t)n) != n)
		return 2;
	free(c);
	free(pf);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Server and well-behaved clients (this process)                            */
/* ------------------------------------------------------------------------ */

static struct zap_transport *server;
static char server_addr[ZAP_PEER_MAX];
static atomic_int phase; /* 0 baseline, 1 flood, 2 stop */
static atomic_int echo_stop; /* set once every client has stopped */
static atomic_uint_fast64_t echoes;

static uint64_t lat[2][MAX_SAMPLES];
static size_t nlat[2];

static void *echo_main(void *p)
{
	struct zap_ctx *ctx;
	(void)p;
	zap_ctx_new(&ctx);
	while (!atomic_load(&echo_stop)) {
		struct zap_msg *m;
		zap_ctx_set_timeout(ctx, 100000000ull);
		int r = zap_recv(server, ctx, &m);
		if (r == -ETIMEDOUT)
			continue;
		if (r) {
			fail("server zap_recv: %s", zap_strerror(r));
			break;
		}
		zap_ctx_set_timeout(ctx, zt_timeout_ms(5000) * 1000000ull);
		r = zap_send(server, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m), ctx);
		if (r)
			fail("server reply to %s: %s", zap_msg_peer(m), zap_strerror(r));
		zap_msg_release(m);
		atomic_fetch_add(&echoes, 1);
	}
	zap_ctx_free(ctx);
	return NULL;
}

static struct zap_transport *open_ep(void)
{
	struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0"};
	struct zap_transport *t = NULL;
	int r = zap_pick("=default", 0, &a, &t);
	if (r) {
		fail("zap_pick: %s", zap_strerror(r));
		return NULL;
	}
	return t;
}

/* One round trip; returns its time in ns, or 0 on failure. */
static uint64_t ping(struct zap_transport *t, struct zap_ctx *ctx, uint64_t n)
{
	unsigned char b[64];
	struct zap_msg *m;
	uint64_t t0 = zt_now_ns();

	memset(b, (int)(n & 0xff), sizeof(b));
	memcpy(b, &n, sizeof(n));
	zap_ctx_set_timeout(ctx, 10000000000ull * SLOW_RUN);
	int r = zap_send(t, server_addr, b, sizeof(b), ctx);
	if (r) {
		fail("client send: %s", zap_strerror(r));
		return 0;
	}
	r = zap_recv(t, ctx, &m);
	if (r) {
		fail("client recv: %s", zap_strerror(r));
		return 0;
	}
	if (zap_msg_len(m) != sizeof(b) || memcmp(zap_msg_data(m), b, sizeof(b)))
		fail("client: wrong echo");
	zap_msg_release(m);
	return zt_now_ns() - t0;
}

static void record(uint64_t ns)
{
	int ph = atomic_load(&phase);
	if (ph > 1 || !ns)
		return;
	pthread_mutex_lock(&mu);
	if (nlat[ph] < MAX_SAMPLES)
		lat[ph][nlat[ph]++] = ns;
	pthread_mutex_unlock(&mu);
}

static void *client_main(void *p)
{
	struct zap_transport *t = open_ep();
	struct zap_ctx *ctx;
	uint64_t n = (uint64_t)(uintptr_t)p << 32;

	if (!t)
		return NULL;
	zap_ctx_new(&ctx);
	while (atomic_load(&phase) < 2) {
		record(ping(t, ctx, n++));
		usleep(2000); /* ~ a few hundred round trips a second each */
	}
	zap_ctx_free(ctx);
	zap_close(t);
	return NULL;
}

static uint64_t newcomers, newcomer_max_ns;

static void *newcomer_main(void *p)
{
	struct zap_ctx *ctx;
	(void)p;
	zap_ctx_new(&ctx);
	while (atomic_load(&phase) < 2) {
		if (atomic_load(&phase) == 1) {
			uint64_t t0 = zt_now_ns();
			struct zap_transport *t = open_ep();
			if (t) {
				uint64_t ns = ping(t, ctx, 7);
				if (ns) {
					newcomers++;
					if (zt_now_ns() - t0 > newcomer_max_ns)
						newcomer_max_ns = zt_now_ns() - t0;
				}
				zap_close(t);
			}
		}
		usleep(250000);
	}
	zap_ctx_free(ctx);
	return NULL;
}

static int cmp64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static double pct(uint64_t *v, size_t n, double q)
{
	if (!n)
		return 0;
	size_t i = (size_t)(q * (double)(n - 1));
	return (double)v[i] / 1e6;
}


static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);
	return v && *v ? strtoull(v, NULL, 10) : def;
}

static atomic_uint_fast64_t warn_lines;

static void count_log(enum zap_log_level level, const char *domain, const char *msg,
		      void *user)
{
	(void)user;
	/* The server logs each connection it drops; count, do not print. */
	if (level <= ZAP_LOG_WARN)
		atomic_fetch_add(&warn_lines, 1);
	if (level == ZAP_LOG_ERROR)
		fprintf(stderr, "zap %s: %s\n", domain, msg);
}

int main(int argc, char **argv)
{
	uint64_t seconds = 15;
	int nidle = 2000, ndrip = 1000;
	unsigned rate = 2000;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--idle") && i + 1 < argc)
			nidle = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--drip") && i + 1 < argc)
			ndrip = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
			rate = (unsigned)atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: zap-flood [--seconds S] [--idle N] [--drip N] "
					"[--rate CONNECTS_PER_S]\n");
			return 2;
		}
	}
	seconds = env_u64("ZAP_FLOOD_SECONDS", seconds);
	if (under_valgrind()) {
		printf("SKIP: a connection flood under valgrind measures valgrind\n");
		return 77;
	}
	uint64_t cap = env_u64("ZAP_TCP_MAX_PENDING", 4096);
	uint64_t hs_ms = env_u64("ZAP_TCP_HANDSHAKE_MS", 10000);

	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	uint64_t need = (uint64_t)(nidle + ndrip) + cap + 256;
	if (rl.rlim_cur < need) {
		printf("SKIP: RLIMIT_NOFILE %llu, need %llu\n",
		       (unsigned long long)rl.rlim_cur, (unsigned long long)need);
		return 77;
	}

	/* The limits' variables: a bad value fails the open, naming it. */
	static const char *const bad[][2] = {
		{ "ZAP_TCP_MAX_PENDING", "0" },      { "ZAP_TCP_MAX_PENDING", "lots" },
		{ "ZAP_TCP_MAX_PENDING", "4096 " },  { "ZAP_TCP_MAX_PENDING", "9999999" },
		{ "ZAP_TCP_HANDSHAKE_MS", "5" },     { "ZAP_TCP_HANDSHAKE_MS", "-1" },
		{ "ZAP_TCP_HANDSHAKE_MS", "10s" },   { "ZAP_TCP_HANDSHAKE_MS", "99999999999999999999" },
	};
	zap_set_log_handler(count_log, NULL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *old = getenv(bad[i][0]);
		char *keep = old ? strdup(old) : NULL;
		struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0"};
		struct zap_transport *t = NULL;

		setenv(bad[i][0], bad[i][1], 1);
		int r = zap_pick("=default", 0, &a, &t);
		if (r != -EINVAL || !strstr(zap_last_error(), bad[i][0]))
			fail("%s=\"%s\": zap_pick returned %d (%s), want -EINVAL naming it",
			     bad[i][0], bad[i][1], r, zap_strerror(r));
		zap_close(t);
		if (keep)
			setenv(bad[i][0], keep, 1);
		else
			unsetenv(bad[i][0]);
		free(keep);
	}

	/* The flooder first, before this process has threads. */
	int to_child[2], from_child[2];
	if (pipe(to_child) || pipe(from_child))
		return 2;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(to_child[1]);
		close(from_child[0]);
		_exit(flooder(to_child[0], from_child[1], nidle, ndrip, seconds + 3,
			      rate ? rate : 1));
	}
	close(to_child[0]);
	close(from_child[1]);

	server = open_ep();
	if (!server || zap_transport_address(server, server_addr, sizeof(server_addr))) {
		kill(pid, SIGKILL);
		return 2;
	}
	uint64_t fds0 = fd_count();
	printf("flood: server %s; %d idle + %d slow-drip connections for %" PRIu64
	       " s, reconnecting at up to %u/s; pending cap %" PRIu64
	       ", handshake timeout %" PRIu64 " ms\n",
	       server_addr, nidle, ndrip, seconds, rate, cap, hs_ms);
	fflush(stdout);

	pthread_t echo, cl[CLIENTS], nc;
	pthread_create(&echo, NULL, echo_main, NULL);
	for (int i = 0; i < CLIENTS; i++)
		pthread_create(&cl[i], NULL, client_main, (void *)(uintptr_t)(i + 1));
	pthread_create(&nc, NULL, newcomer_main, NULL);

	/* Baseline for 2 s, then start the flood. */
	usleep(2000000);
	if (write(to_child[1], server_addr, strlen(server_addr)) < 0)
		return 2;
	char f;
	if (read(from_child[0], &f, 1) != 1) {
		fail("the flooder did not start");
		kill(pid, SIGKILL);
		return 1;
	}
	atomic_store(&phase, 1);
	uint64_t t_flood = zt_now_ns(), peak_fds = 0;
	while (zt_now_ns() - t_flood < seconds * 1000000000ull) {
		uint64_t n = fd_count();
		if (n > peak_fds)
			peak_fds = n;
		usleep(100000);
	}
	atomic_store(&phase, 2);
	pthread_join(nc, NULL);
	for (int i = 0; i < CLIENTS; i++)
		pthread_join(cl[i], NULL);
	atomic_store(&echo_stop, 1);
	pthread_join(echo, NULL);

	char line[256] = {0};
	uint64_t connects = 0, dropped = 0, refused = 0, drip = 0, drops[3] = {0}, oldest = 0;
	int st;
	ssize_t k = read(from_child[0], line, sizeof(line) - 1);
	waitpid(pid, &st, 0);
	if (k <= 0 || sscanf(line, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
			     " %" SCNu64 " %" SCNu64 " %" SCNu64, &connects, &dropped, &refused,
			     &drip, &drops[0], &drops[1], &drops[2], &oldest) != 8)
		fail("no figures from the flooder (status 0x%x)", st);
	zap_close(server);

	for (int ph = 0; ph < 2; ph++)
		qsort(lat[ph], nlat[ph], sizeof(uint64_t), cmp64);
	printf("flood: flooder: %" PRIu64 " connects, %" PRIu64 " dropped by the server (idle %"
	       PRIu64 ", HELLO drip %" PRIu64 ", garbage drip %" PRIu64 "), %" PRIu64
	       " failed connects, %" PRIu64 " bytes dripped, oldest connection %" PRIu64
	       " ms; server logged %" PRIu64 " warnings\n", connects, dropped, drops[0], drops[1],
	       drops[2], refused, drip, oldest, (uint64_t)atomic_load(&warn_lines));
	for (int ph = 0; ph < 2; ph++)
		printf("flood: %s: %zu round trips, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
		       ph ? "during the flood" : "baseline", nlat[ph], pct(lat[ph], nlat[ph], 0.5),
		       pct(lat[ph], nlat[ph], 0.99), pct(lat[ph], nlat[ph], 1.0));
	printf("flood: %" PRIu64 " newcomers served during the flood (slowest open + "
	       "handshake + round trip %.1f ms); server process fds: %" PRIu64
	       " before, peak %" PRIu64 " (bound %" PRIu64 ")\n", newcomers,
	       (double)newcomer_max_ns / 1e6, fds0, peak_fds, fds0 + cap + 64);

	/* Served, not how fast (tests/README.md: speed belongs to bench/;
	 * the latencies above are printed for the log): round trips before
	 * and during the flood, and newcomers. A round trip that failed or
	 * hung past its (scaled) deadline has failed the run already. */
	if (!nlat[0])
		fail("no round trip in the baseline");
	if (!nlat[1])
		fail("no round trip during the flood");
	if (!newcomers)
		fail("no newcomer served during the flood");
	if (peak_fds > fds0 + cap + 64)
		fail("server process held %" PRIu64 " descriptors", peak_fds);
	if ((uint64_t)(nidle + ndrip) > cap && dropped < (uint64_t)(nidle + ndrip) - cap)
		fail("the server shed only %" PRIu64 " connections", dropped);
	if (ndrip && !drops[2])
		fail("garbage was not refused");
	if (oldest > hs_ms + 2000 * SLOW_RUN)
		fail("a connection that never completed a HELLO stayed %" PRIu64 " ms "
		     "(handshake timeout %" PRIu64 " ms)", oldest, hs_ms);
	if (seconds * 1000 > hs_ms + 2000 * SLOW_RUN && nidle && drops[0] < (uint64_t)nidle)
		fail("only %" PRIu64 " idle connections timed out", drops[0]);
	printf("%s\n", failures ? "flood: FAILED" : "flood: ok");
	return failures ? 1 : 0;
}
