/* SPDX-License-Identifier: MIT */
/*
 * How long a legitimate newcomer waits while an attacker holds an
 * endpoint's connections at its descriptor cap (issue #35): bench/
 * newcomer-wait.sh runs it.
 *
 *   newcomer_wait server NOFILE
 *   newcomer_wait client ADDR MODE [PEERS (120)] [TRIES (20)] [TRY_MS (10000)]
 *
 * The server: RLIMIT_NOFILE NOFILE (its connection cap, (NOFILE - 64) x
 * 3/4, follows), one default-transport endpoint on 127.0.0.1, its address
 * on stdout, then it echoes every message that starts with "echo" (the
 * attackers' messages are not answered, so it dials none of them back).
 * The script runs it against the libzap under test (LD_LIBRARY_PATH).
 *
 * The client: an attacker process keeps PEERS raw connections from
 * 127.0.0.2-5 (other hosts to the endpoint), dialing again whenever one
 * is closed, in MODE:
 *   none    no attacker (the baseline)
 *   silent  connections that never send a byte (no HELLO)
 *   hello   a HELLO, then nothing (idle)
 *   busy    a HELLO, then a 4-byte message every 50 ms each
 * and with "-once" (silent-once, hello-once, busy-once) the same without
 * dialing again: a connection the endpoint closed stays closed.
 * Once the attacker has dialed them all and a second passed, TRIES
 * newcomers, one after the other, each a fresh endpoint that sends "echo"
 * and waits for it to come back, sending again 10 ms after a failure,
 * for at most TRY_MS. Prints one line of key=value: tries, ok (echoed
 * within TRY_MS), first_failed (newcomers whose first attempt failed),
 * refused (failed attempts in all), the wait's median and max in ms (from
 * the first send to the echo, or to giving up), the attacker's dials
 * (redials_during: while the newcomers tried; each is a connection the
 * endpoint closed) and the first failure's reason.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#include "zap-test.h" /* zt_wire_hdr(), zt_be64(): the attacker's frames */

#define MAX_PEERS 1000

static void die(const char *what, int rc)
{
	fprintf(stderr, "newcomer_wait: %s: %s\n", what, rc ? zap_strerror(rc) : strerror(errno));
	exit(1);
}

static double now_ms(void)
{
	return (double)zt_now_ns() / 1e6;
}

static struct zap_transport *endpoint(void)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *t;
	int rc = zap_pick("=default", 0, &attr, &t);

	if (rc)
		die("zap_pick", rc);
	return t;
}

/* ---- the server ---------------------------------------------------------- */

_Noreturn static void server(rlim_t nofile)
{
	struct rlimit rl = { nofile, nofile };
	char addr[ZAP_PEER_MAX];
	struct zap_transport *t;
	struct zap_ctx *ctx;
	int rc;

	if (setrlimit(RLIMIT_NOFILE, &rl))
		die("setrlimit", 0);
	t = endpoint();
	rc = zap_transport_address(t, addr, sizeof(addr));
	if (rc)
		die("zap_transport_address", rc);
	printf("%s\n", addr);
	fflush(stdout);
	if (zap_ctx_new(&ctx))
		die("zap_ctx_new", 0);
	for (;;) {
		struct zap_msg *m;

		if (zap_recv(t, NULL, &m))
			continue;
		/* A newcomer that gave up must not hold the echo loop. */
		zap_ctx_set_timeout(ctx, 5000000000ull);
		if (zap_msg_len(m) >= 4 && !memcmp(zap_msg_data(m), "echo", 4))
			(void)zap_send(t, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m), ctx);
		zap_msg_release(m);
	}
}

/* ---- the attacker -------------------------------------------------------- */

enum mode { M_NONE, M_SILENT, M_HELLO, M_BUSY, M_ONCE = 8 /* no redial */ };

struct slot {
	int fd;
	bool up;          /* connected (and, with a HELLO, sent it) */
	bool answered;    /* the endpoint's HELLO came */
	bool gone;        /* the endpoint closed it once */
	double dialed_at; /* when it was dialed */
	double next_msg;  /* busy: when the next message goes */
};

static void slot_close(struct slot *s)
{
	close(s->fd);
	s->fd = -1;
	s->up = false;
	s->gone = true;
}

/* A non-blocking dial of @dst from 127.0.0.@host; the socket, or -1. */
static int dial_from(const struct sockaddr_in *dst, int host)
{
	struct sockaddr_in me = { .sin_family = AF_INET };
	char src[32];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	snprintf(src, sizeof(src), "127.0.0.%d", host);
	inet_pton(AF_INET, src, &me.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) ||
	    (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) && errno != EINPROGRESS)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* The HELLO of peer @i, claiming its own source address. */
static size_t hello(unsigned char *p, int fd, unsigned i)
{
	struct sockaddr_in me;
	socklen_t ml = sizeof(me);
	char claim[64], host[32];

	getsockname(fd, (struct sockaddr *)&me, &ml);
	inet_ntop(AF_INET, &me.sin_addr, host, sizeof(host));
	int cl = snprintf(claim, sizeof(claim), "%s:%d", host, ntohs(me.sin_port));
	uint64_t id = (uint64_t)lrand48() << 32 ^ (uint64_t)lrand48() << 1 ^ i ^ 1;
	size_t n = zt_wire_hdr(p, 1, 24 + (uint64_t)cl);

	zt_be64(p + n, id);
	zt_be64(p + n + 8, id ^ 0x9e3779b97f4a7c15ull);
	zt_be64(p + n + 16, 1u << 20);
	memcpy(p + n + 24, claim, (size_t)cl);
	return n + 24 + (size_t)cl;
}

/* Whatever @s's socket says: connected (send the HELLO), answered
 * (drained), or closed (the slot is free again). */
static void slot_event(struct slot *s, short rev, enum mode mode, unsigned i)
{
	unsigned char buf[4096];

	if (!s->up && (rev & (POLLOUT | POLLERR | POLLHUP))) {
		int err = 0;
		socklen_t el = sizeof(err);
		getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el);
		if (err)
			goto closed;
		s->up = true;
		if ((mode & ~M_ONCE) != M_SILENT) {
			size_t n = hello(buf, s->fd, i);
			if (send(s->fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
				goto closed;
		}
		return;
	}
	if (!(rev & (POLLIN | POLLERR | POLLHUP)))
		return;
	for (;;) {
		ssize_t k = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (k > 0) {
			s->answered = true;
			continue;
		}
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		goto closed;
	}
closed:
	slot_close(s);
}

/* Busy peers: a 4-byte message each every 50 ms. */
static void slot_vote(struct slot *s, double now)
{
	unsigned char p[32];
	size_t n = zt_wire_hdr(p, 2, 4);

	if (s->fd < 0 || !s->up || now < s->next_msg)
		return;
	memcpy(p + n, "vote", 4);
	if (send(s->fd, p, n + 4, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN) {
		slot_close(s);
		return;
	}
	s->next_msg = now + 50;
}

/*
 * Whether a connection with a HELLO is still waiting for the endpoint's
 * (for at most 300 ms): peers with a HELLO dial back to back, as in the
 * report, so that none is in its handshake (the first to go at the cap)
 * when the next one comes. Silent ones never get an answer.
 */
static bool awaiting(const struct slot *s, unsigned n, enum mode mode, double now)
{
	if ((mode & ~M_ONCE) == M_SILENT)
		return false;
	for (unsigned i = 0; i < n; i++)
		if (s[i].fd >= 0 && !s[i].answered && now - s[i].dialed_at < 300)
			return true;
	return false;
}

/* Keep @n connections to @addr for ever, dialing again whenever one is
 * closed (not with M_ONCE); a byte on @ready once all were dialed;
 * *@dials counts them. */
static void attacker(const char *addr, enum mode mode, unsigned n, int ready,
		     volatile unsigned long *dials)
{
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct slot *s = calloc(n, sizeof(*s));
	struct pollfd *pf = calloc(n, sizeof(*pf));
	struct rlimit rl;
	bool told = false;
	char host[64];
	const char *colon = strrchr(addr, ':');

	if (!s || !pf || !colon)
		die("attacker", 0);
	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	inet_pton(AF_INET, host, &dst.sin_addr);
	dst.sin_port = htons((uint16_t)atoi(colon + 1));
	srand48(getpid());
	for (unsigned i = 0; i < n; i++)
		s[i].fd = -1;
	for (;;) {
		double now = now_ms();
		bool wait = awaiting(s, n, mode, now);
		for (unsigned i = 0; i < n; i++) {
			/* -once: a connection the endpoint closed stays closed. */
			if (s[i].fd < 0 && !wait && !(s[i].gone && (mode & M_ONCE)) &&
			    (s[i].fd = dial_from(&dst, 2 + (int)(i % 4))) >= 0) {
				(*dials)++;
				s[i].dialed_at = now;
				s[i].answered = false;
				s[i].next_msg = now + 50;
				wait = (mode & ~M_ONCE) != M_SILENT;
			}
			if ((mode & ~M_ONCE) == M_BUSY)
				slot_vote(&s[i], now);
			pf[i] = (struct pollfd){ .fd = s[i].fd,
						 .events = (short)(s[i].up ? POLLIN : POLLOUT) };
		}
		if (!told && *dials >= n)
			told = write(ready, "r", 1) == 1;
		if (poll(pf, n, wait ? 1 : 10) < 0 && errno != EINTR)
			die("poll", 0);
		for (unsigned i = 0; i < n; i++)
			if (s[i].fd >= 0 && pf[i].revents)
				slot_event(&s[i], pf[i].revents, mode, i);
	}
}

/* ---- the newcomers ------------------------------------------------------- */

/* What one newcomer saw. */
struct try {
	double wait_ms;    /* from its first zap_send() to the echo (or giving up) */
	unsigned refused;  /* sends or receives that failed before that */
	bool ok;           /* the echo came within the deadline */
	char why[200];     /* the first failure's reason */
};

/*
 * One newcomer: a fresh endpoint sends "echo" to @addr and waits for the
 * answer, as an application that retries would, every 10 ms until it
 * comes or @try_ms passed since the first send.
 */
static void newcomer(const char *addr, unsigned try_ms, struct try *r)
{
	struct zap_transport *t = endpoint();
	struct zap_ctx *ctx;
	double t0 = now_ms();

	memset(r, 0, sizeof(*r));
	if (zap_ctx_new(&ctx))
		die("zap_ctx_new", 0);
	zap_ctx_set_timeout(ctx, (uint64_t)try_ms * 1000000u);
	for (;;) {
		struct zap_msg *m = NULL;
		int rc = zap_send(t, addr, "echo", 4, ctx);
		if (!rc)
			rc = zap_recv(t, ctx, &m);
		if (!rc) {
			zap_msg_release(m);
			r->ok = true;
			break;
		}
		if (!r->refused++)
			snprintf(r->why, sizeof(r->why), "%s (%s)", zap_strerror(rc),
				 zap_last_error());
		if (now_ms() - t0 + 10 >= try_ms)
			break;
		usleep(10000);
	}
	r->wait_ms = now_ms() - t0;
	zap_ctx_free(ctx);
	zap_close(t);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static enum mode mode_of(const char *s)
{
	static const char *const names[] = { "none", "silent", "hello", "busy" };
	size_t n = strlen(s), once = n > 5 && !strcmp(s + n - 5, "-once") ? 5 : 0;

	for (int i = 0; i < 4; i++)
		if (strlen(names[i]) == n - once && !strncmp(s, names[i], n - once) &&
		    (i || !once))
			return (enum mode)(i | (once ? M_ONCE : 0));
	fprintf(stderr,
		"newcomer_wait: MODE is none, or silent, hello or busy with or without "
		"-once, not %s\n",
		s);
	exit(2);
}

static int client(const char *addr, enum mode mode, unsigned peers, unsigned tries,
		  unsigned try_ms)
{
	volatile unsigned long *dials = mmap(NULL, sizeof(*dials), PROT_READ | PROT_WRITE,
					     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	double *w = calloc(tries, sizeof(*w));
	unsigned ok = 0, first = 0, refused = 0;
	int ready[2];
	pid_t att = -1;
	char why[256] = "", c;

	if (dials == MAP_FAILED || !w || pipe(ready))
		die("setup", 0);
	if (mode != M_NONE) {
		att = fork();
		if (att < 0)
			die("fork", 0);
		if (!att) {
			prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed run */
			attacker(addr, mode, peers, ready[1], dials);
			_exit(0);
		}
		if (read(ready[0], &c, 1) != 1)
			die("attacker", 0);
		sleep(1); /* the attack holds the cap */
	}
	unsigned long before = *dials;
	for (unsigned i = 0; i < tries; i++) {
		struct try r;
		newcomer(addr, try_ms, &r);
		w[i] = r.wait_ms;
		ok += r.ok;
		first += r.refused > 0;
		refused += r.refused;
		if (r.refused && !*why)
			snprintf(why, sizeof(why), "%s", r.why);
	}
	unsigned long during = *dials - before;
	if (att > 0) {
		kill(att, SIGKILL);
		waitpid(att, NULL, 0);
	}
	qsort(w, tries, sizeof(*w), cmp_d);
	printf("tries=%u ok=%u first_failed=%u refused=%u median_ms=%.1f max_ms=%.1f "
	       "attacker_dials=%lu redials_during=%lu first_failure=\"%s\"\n",
	       tries, ok, first, refused, w[tries / 2], w[tries - 1], *dials, during, why);
	free(w);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setenv("ZAP_TRANSPORT_QUIET", "1", 0);
	if (argc == 3 && !strcmp(argv[1], "server"))
		server((rlim_t)atol(argv[2]));
	if (argc >= 4 && argc <= 7 && !strcmp(argv[1], "client")) {
		unsigned peers = argc > 4 ? (unsigned)atoi(argv[4]) : 120;
		unsigned tries = argc > 5 ? (unsigned)atoi(argv[5]) : 20;
		unsigned try_ms = argc > 6 ? (unsigned)atoi(argv[6]) : 10000;
		if (peers >= 1 && peers <= MAX_PEERS && tries >= 1 && try_ms >= 1)
			return client(argv[2], mode_of(argv[3]), peers, tries, try_ms);
	}
	fprintf(stderr, "usage: newcomer_wait server NOFILE\n"
			"       newcomer_wait client ADDR none|{silent|hello|busy}[-once] "
			"[PEERS (120, <= %d)] [TRIES (20)] [TRY_MS (10000)]\n",
		MAX_PEERS);
	return 2;
}
