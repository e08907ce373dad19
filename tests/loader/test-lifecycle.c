/* SPDX-License-Identifier: MIT */
/*
 * Lifecycle suite: stopping a transport (zap_shutdown() with threads
 * blocked in recv and in send), the default send timeout, a transport
 * inherited across fork(), and zap_send_burst() on a plugin without the op.
 *
 * Each case runs in a forked child (harness.h). The recv cases use the
 * fixture plugin (an in-memory loopback whose recv blocks); the send cases
 * use the built-in default (TCP on loopback), whose send blocks once the
 * kernel buffers to a peer that does not read are full.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "zap-test.h"

/* Upper bounds on a wait are hang detection only: far above any delay a
 * loaded host adds, and scaled (ZAP_TEST_TIMEOUT_SCALE, tests/README.md).
 * The lower bounds are what these tests check (no deadline fires early). */
#define HANG_MS zt_timeout_ms(10000)

#define TIMEOUT_MS 30000
#define BIG (1u << 20)

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static const char *good_dir(void)
{
	static const char *const fixtures[] = { "good", NULL };
	static const char *dir;

	if (!dir)
		dir = th_fixture_dir(fixtures);
	return dir;
}

/* A default transport on loopback (any port). */
static struct zap_transport *open_tcp(uint64_t send_timeout_ms)
{
	struct zap_attr attr = { .size = sizeof(attr),
				 .listen = "127.0.0.1:0",
				 .send_timeout_ms = send_timeout_ms };
	struct zap_transport *t = NULL;
	int err = zap_pick("=default", 0, &attr, &t);

	TH_CHECK_MSG(err == 0, "zap_pick(=default) = %d (%s)", err, zap_strerror(err));
	return t;
}

/* ---- threads ------------------------------------------------------------ */

struct worker {
	pthread_t th;
	struct zap_transport *t;
	const char *peer;
	atomic_int progress; /* messages sent so far */
	atomic_int done;     /* 1 once the call returned */
	int err;	     /* what the last call returned */
	double start_ms;     /* when it began (send_worker) */
	double end_ms;	     /* when it returned */
};

static void *recv_worker(void *arg)
{
	struct worker *w = arg;
	struct zap_msg *m = NULL;

	w->err = zap_recv(w->t, NULL, &m);
	zap_msg_release(m);
	w->end_ms = now_ms();
	atomic_store(&w->done, 1);
	return NULL;
}

/* Send 1 MiB messages without a ctx until a send fails. */
static void *send_worker(void *arg)
{
	struct worker *w = arg;
	char *buf = calloc(1, BIG);
	int err;

	if (!buf) {
		w->err = -ENOMEM;
		atomic_store(&w->done, 1);
		return NULL;
	}
	for (;;) {
		w->start_ms = now_ms();
		if ((err = zap_send(w->t, w->peer, buf, BIG, NULL)) != 0)
			break;
		atomic_fetch_add(&w->progress, 1);
	}
	w->err = err;
	w->end_ms = now_ms();
	atomic_store(&w->done, 1);
	free(buf);
	return NULL;
}

static void start(struct worker *w, void *(*fn)(void *))
{
	TH_CHECK(pthread_create(&w->th, NULL, fn, w) == 0);
}

/* Wait until no worker of @w[0..n) progressed for 400 ms (they block). */
static void wait_blocked(struct worker *w, int n)
{
	int last = -1, same = 0;

	for (int round = 0; round < 200 && same < 4; round++) {
		int sum = 0;

		for (int i = 0; i < n; i++) {
			TH_CHECK_MSG(!atomic_load(&w[i].done),
				     "a sender returned %d (%s) before blocking",
				     w[i].err, zap_strerror(w[i].err));
			sum += atomic_load(&w[i].progress);
		}
		same = sum == last ? same + 1 : 0;
		last = sum;
		sleep_ms(100);
	}
	TH_CHECK_MSG(same >= 4, "senders never blocked");
}

/* ---- zap_shutdown() ----------------------------------------------------- */

/*
 * Four threads blocked in zap_recv(): zap_shutdown() wakes each with
 * -ESHUTDOWN promptly, later calls fail the same way, the handle stays
 * valid until zap_close().
 */
static void child_shutdown_recv(void *arg)
{
	struct worker w[4] = { 0 };
	struct zap_transport *t = NULL;
	struct zap_msg *m = NULL;
	double t0;

	th_setenv("ZAP_PLUGIN_PATH", arg);
	th_capture_logs(true);
	TH_CHECK_INT(zap_pick("=good", 0, NULL, &t), 0);
	for (int i = 0; i < 4; i++) {
		w[i].t = t;
		start(&w[i], recv_worker);
	}
	sleep_ms(200);
	for (int i = 0; i < 4; i++)
		TH_CHECK_MSG(!atomic_load(&w[i].done), "recv returned %d early",
			     w[i].err);
	t0 = now_ms();
	TH_CHECK_INT(zap_shutdown(t), 0);
	for (int i = 0; i < 4; i++) {
		TH_CHECK(pthread_join(w[i].th, NULL) == 0);
		TH_CHECK_INT(w[i].err, -ESHUTDOWN);
		TH_CHECK_MSG(w[i].end_ms - t0 < HANG_MS, "woken after %.0f ms",
			     w[i].end_ms - t0);
	}
	/* Later calls fail too; the handle is still valid. */
	TH_CHECK_INT(zap_recv(t, NULL, &m), -ESHUTDOWN);
	TH_CHECK_HAS(zap_strerror(-ESHUTDOWN), "shut down");
	TH_CHECK_INT(zap_send(t, "x:1", "a", 1, NULL), -ESHUTDOWN);
	TH_CHECK_STR(zap_transport_name(t), "good");
	TH_CHECK_INT(zap_shutdown(t), 0); /* idempotent */
	TH_CHECK_INT(zap_shutdown(NULL), -EINVAL);
	zap_close(t);
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, NULL, ""), 0);
}

/*
 * zap_send_burst() on a plugin without the op (the fixture is ABI 1.0
 * shaped): the core sends one by one and stops at the first failure,
 * which the next call reports; argument errors come first.
 */
static void child_burst_fallback(void *arg)
{
	struct zap_transport *t = NULL;
	struct zap_msg *m = NULL;
	size_t big_len = (1u << 20) + 1; /* the fixture's FIX_MAX_MSG + 1 */
	char *big = calloc(1, big_len);
	struct zap_iov v[4] = { { "a", 1 }, { "bb", 2 }, { big, big_len }, { "d", 1 } };
	const char *want[] = { "a", "bb", "d" };

	TH_CHECK(big != NULL);
	th_setenv("ZAP_PLUGIN_PATH", arg);
	TH_CHECK_INT(zap_pick("=good", 0, NULL, &t), 0);
	TH_CHECK_INT(zap_send_burst(t, "x:1", NULL, 1, NULL), -EINVAL);
	TH_CHECK_INT(zap_send_burst(NULL, "x:1", v, 1, NULL), -EINVAL);
	TH_CHECK_INT(zap_send_burst(t, "x:1", v, 0, NULL), 0);
	struct zap_iov hole = { NULL, 3 };
	TH_CHECK_INT(zap_send_burst(t, "x:1", &hole, 1, NULL), -EINVAL);
	struct zap_iov then_hole[2] = { { "z", 1 }, { NULL, 3 } };
	TH_CHECK_INT(zap_send_burst(t, "x:1", then_hole, 2, NULL), 1);
	TH_CHECK_INT(zap_recv(t, NULL, &m), 0);
	TH_CHECK_INT((int)zap_msg_len(m), 1);
	zap_msg_release(m);
	TH_CHECK_INT(zap_send_burst(t, "x:1", v, 4, NULL), 2);
	TH_CHECK_INT(zap_send_burst(t, "x:1", v + 2, 2, NULL), -EMSGSIZE);
	TH_CHECK_INT(zap_send_burst(t, "x:1", v + 3, 1, NULL), 1);
	for (int i = 0; i < 3; i++) {
		TH_CHECK_INT(zap_recv(t, NULL, &m), 0);
		TH_CHECK_INT((int)zap_msg_len(m), (int)strlen(want[i]));
		TH_CHECK(!memcmp(zap_msg_data(m), want[i], strlen(want[i])));
		zap_msg_release(m);
	}
	TH_CHECK_INT(zap_shutdown(t), 0);
	TH_CHECK_INT(zap_send_burst(t, "x:1", v, 2, NULL), -ESHUTDOWN);
	zap_close(t);
	free(big);
}

static void test_burst_fallback(void **state)
{
	(void)state;
	th_child(child_burst_fallback, (void *)good_dir(), TIMEOUT_MS);
}

/*
 * A plugin without the stats, peers and events ops (plugin ABI 1.5; the
 * fixture has none) loads and works; the core answers -EOPNOTSUPP for
 * zap_stats(), zap_peer_list(), zap_metrics_render() and zap_events(),
 * and -EINVAL for
 * bad arguments before asking the plugin.
 */
static void child_no_stats(void *arg)
{
	struct zap_transport *t = NULL;
	struct zap_stats s = { .size = sizeof(s) };
	struct zap_peer_info p = { .size = sizeof(p) };
	char buf[64];

	th_setenv("ZAP_PLUGIN_PATH", arg);
	TH_CHECK_INT(zap_pick("=good", 0, NULL, &t), 0);
	TH_CHECK_INT(zap_stats(t, &s), -EOPNOTSUPP);
	TH_CHECK_HAS(zap_strerror(-EOPNOTSUPP), "keeps no counters");
	TH_CHECK_INT(zap_peer_list(t, &p, 1), -EOPNOTSUPP);
	TH_CHECK_INT(zap_peer_list(t, NULL, 0), -EOPNOTSUPP);
	TH_CHECK_INT(zap_metrics_render(t, buf, sizeof(buf)), -EOPNOTSUPP);
	struct zap_event ev = { .size = sizeof(ev) };
	TH_CHECK_INT(zap_events(t, &ev, 1), -EOPNOTSUPP);
	TH_CHECK_STR(zap_event_type_name(ZAP_EVENT_REFUSED), "refused");
	TH_CHECK_STR(zap_event_type_name(0), "unknown");
	TH_CHECK_INT(zap_stats(NULL, &s), -EINVAL);
	TH_CHECK_INT(zap_stats(t, NULL), -EINVAL);
	TH_CHECK_INT(zap_peer_list(t, NULL, 1), -EINVAL);
	TH_CHECK_INT(zap_metrics_render(t, NULL, 1), -EINVAL);
	TH_CHECK_STR(zap_close_reason_name(ZAP_CLOSE_IDLE), "idle");
	TH_CHECK_STR(zap_close_reason_name(-1), "other");
	TH_CHECK_STR(zap_close_reason_name(ZAP_CLOSE_REASON_COUNT), "other");
	zap_close(t);
}

static void test_no_stats(void **state)
{
	(void)state;
	th_child(child_no_stats, (void *)good_dir(), TIMEOUT_MS);
}

static void test_shutdown_recv(void **state)
{
	(void)state;
	th_child(child_shutdown_recv, (void *)good_dir(), TIMEOUT_MS);
}

/*
 * Two threads blocked in zap_send() to a peer that does not read, and one
 * in zap_recv(), all on the same default transport: zap_shutdown() wakes
 * them all with -ESHUTDOWN; nothing is logged as a warning or an error.
 */
static void child_shutdown_send(void *arg)
{
	struct worker w[3] = { 0 };
	struct zap_transport *srv, *cli;
	char addr[ZAP_PEER_MAX];
	double t0;

	(void)arg;
	th_capture_logs(true);
	srv = open_tcp(0);
	cli = open_tcp(0);
	TH_CHECK_INT(zap_transport_address(srv, addr, sizeof(addr)), 0);
	for (int i = 0; i < 3; i++) {
		w[i].t = cli;
		w[i].peer = addr;
		start(&w[i], i < 2 ? send_worker : recv_worker);
	}
	wait_blocked(w, 2);
	t0 = now_ms();
	TH_CHECK_INT(zap_shutdown(cli), 0);
	for (int i = 0; i < 3; i++) {
		TH_CHECK(pthread_join(w[i].th, NULL) == 0);
		TH_CHECK_MSG(w[i].err == -ESHUTDOWN, "thread %d: %d (%s)", i, w[i].err,
			     zap_strerror(w[i].err));
		TH_CHECK_MSG(w[i].end_ms - t0 < HANG_MS, "woken after %.0f ms",
			     w[i].end_ms - t0);
	}
	zap_close(cli);
	zap_close(srv);
	/* Our own shutdown stopping a send mid-message is not a warning on
	 * the sending side. (The receiving side cannot yet tell a sender that
	 * stopped from one that broke: the wire has no abort marker.) */
	TH_CHECK_MSG(th_log_count(ZAP_LOG_WARN, NULL, "mid-frame") == 0 &&
			     th_log_count(ZAP_LOG_ERROR, NULL, "") == 0,
		     "logged:\n%s", th_logs());
}

static void test_shutdown_send(void **state)
{
	(void)state;
	th_child(child_shutdown_send, NULL, TIMEOUT_MS);
}

/* ---- the default send timeout ------------------------------------------ */

/* Flood @cli -> @srv with no ctx; return the error and how long the last
 * send blocked (from the last progress to the error). */
static int flood(struct zap_transport *cli, const char *addr, double *blocked_ms)
{
	struct worker w = { .t = cli, .peer = addr };
	double last = now_ms();
	int seen = 0;

	start(&w, send_worker);
	while (!atomic_load(&w.done)) {
		int p = atomic_load(&w.progress);

		if (p != seen) {
			seen = p;
			last = now_ms();
		}
		TH_CHECK_MSG(now_ms() - last < HANG_MS, "send blocked for %u ms", HANG_MS);
		sleep_ms(5);
	}
	TH_CHECK(pthread_join(w.th, NULL) == 0);
	/* The last send's own clock: this loop notices progress only when it
	 * runs, which on a busy machine is late. */
	*blocked_ms = w.end_ms - w.start_ms;
	return w.err;
}

/* ZAP_SEND_TIMEOUT_MS bounds a zap_send() given no ctx. */
static void child_send_timeout_env(void *arg)
{
	struct zap_transport *srv, *cli;
	char addr[ZAP_PEER_MAX];
	double blocked;
	int err;

	(void)arg;
	th_setenv("ZAP_SEND_TIMEOUT_MS", "300");
	th_capture_logs(true);
	srv = open_tcp(0);
	cli = open_tcp(0);
	TH_CHECK_INT(zap_transport_address(srv, addr, sizeof(addr)), 0);
	err = flood(cli, addr, &blocked);
	TH_CHECK_MSG(err == -ETIMEDOUT, "send = %d (%s)", err, zap_strerror(err));
	TH_CHECK_MSG(blocked >= 250 && blocked < HANG_MS, "timed out after %.0f ms",
		     blocked);
	zap_close(cli);
	zap_close(srv);
	/* A deadline firing mid-send is not a warning on the sending side. */
	TH_CHECK_MSG(th_log_count(ZAP_LOG_WARN, NULL, "mid-frame") == 0, "logged:\n%s",
		     th_logs());
}

static void test_send_timeout_env(void **state)
{
	(void)state;
	th_child(child_send_timeout_env, NULL, TIMEOUT_MS);
}

/* attr.send_timeout_ms does the same, and ZAP_TIMEOUT_NONE overrides the
 * environment (the send blocks until zap_shutdown()). */
static void child_send_timeout_attr(void *arg)
{
	struct zap_transport *srv, *cli;
	struct worker w[1] = { 0 };
	char addr[ZAP_PEER_MAX];
	double blocked;
	int err;

	(void)arg;
	th_setenv("ZAP_SEND_TIMEOUT_MS", "100");
	th_capture_logs(true);
	srv = open_tcp(0);
	TH_CHECK_INT(zap_transport_address(srv, addr, sizeof(addr)), 0);
	cli = open_tcp(400);
	err = flood(cli, addr, &blocked);
	TH_CHECK_MSG(err == -ETIMEDOUT, "send = %d (%s)", err, zap_strerror(err));
	TH_CHECK_MSG(blocked >= 350 && blocked < HANG_MS, "timed out after %.0f ms",
		     blocked);
	zap_close(cli);

	cli = open_tcp(ZAP_TIMEOUT_NONE);
	w[0].t = cli;
	w[0].peer = addr;
	start(&w[0], send_worker);
	wait_blocked(w, 1); /* still blocked well past the env's 100 ms */
	TH_CHECK_INT(zap_shutdown(cli), 0);
	TH_CHECK(pthread_join(w[0].th, NULL) == 0);
	TH_CHECK_INT(w[0].err, -ESHUTDOWN);
	zap_close(cli);
	zap_close(srv);
}

static void test_send_timeout_attr(void **state)
{
	(void)state;
	th_child(child_send_timeout_attr, NULL, TIMEOUT_MS);
}

/* ---- a far end that is not libzap --------------------------------------- */

/* Accept one connection, answer like another protocol would, hold it. */
static void *fake_server(void *arg)
{
	int lfd = *(int *)arg, fd = accept(lfd, NULL, NULL);
	static const char banner[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
	char sink[4096];

	if (fd < 0)
		return NULL;
	if (write(fd, banner, sizeof(banner) - 1) < 0) {
		/* the client will see the close instead */
	}
	while (read(fd, sink, sizeof(sink)) > 0)
		;
	close(fd);
	return NULL;
}

/*
 * zap_send() to a port where something else listens: -EPROTO, as zap.h
 * documents, with a reason saying the far end is not a zap peer.
 */
static void child_not_libzap(void *arg)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	struct zap_transport *t;
	char peer[64];
	pthread_t th;
	int lfd, err;

	(void)arg;
	th_capture_logs(true);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	TH_CHECK(lfd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	TH_CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	TH_CHECK(listen(lfd, 4) == 0);
	TH_CHECK(getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
	snprintf(peer, sizeof(peer), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
	TH_CHECK(pthread_create(&th, NULL, fake_server, &lfd) == 0);
	t = open_tcp(0);
	err = zap_send(t, peer, "hello", 5, NULL);
	TH_CHECK_MSG(err == -EPROTO, "zap_send to a non-libzap peer = %d (%s)", err,
		     zap_strerror(err));
	TH_CHECK_HAS(zap_last_error(), "not a zap peer");
	zap_close(t);
	close(lfd);
	pthread_cancel(th);
	pthread_join(th, NULL);
}

static void test_not_libzap(void **state)
{
	(void)state;
	th_child(child_not_libzap, NULL, TIMEOUT_MS);
}

/* ---- fork() -------------------------------------------------------------- */

/* Every socket and eventfd this process holds is close-on-exec. */
static void check_cloexec(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	TH_CHECK(d != NULL);
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name);
		char link[64], target[256];
		ssize_t k;

		if (e->d_name[0] == '.' || fd == dirfd(d) || fd <= 2)
			continue;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		k = readlink(link, target, sizeof(target) - 1);
		if (k <= 0)
			continue;
		target[k] = '\0';
		if (strncmp(target, "socket:", 7) && !strstr(target, "eventfd"))
			continue;
		n++;
		TH_CHECK_MSG(fcntl(fd, F_GETFD) & FD_CLOEXEC,
			     "fd %d (%s) is not close-on-exec", fd, target);
	}
	closedir(d);
	TH_CHECK_MSG(n >= 2, "found only %d sockets", n);
}

/*
 * A fork() child cannot use the parent's transport: every call fails with
 * -EBADFD and a reason naming fork(), zap_close() there returns at once
 * and releases nothing the parent uses, and the parent's transport keeps
 * accepting, sending and receiving afterwards.
 */
static void child_fork(void *arg)
{
	struct zap_transport *a, *b;
	char addr[ZAP_PEER_MAX];
	struct zap_msg *m = NULL;
	int status;
	pid_t pid;

	(void)arg;
	th_capture_logs(true);
	a = open_tcp(0);
	b = open_tcp(0);
	TH_CHECK_INT(zap_transport_address(a, addr, sizeof(addr)), 0);
	/* A connection exists before the fork, so that sockets are shared. */
	TH_CHECK_INT(zap_send(b, addr, "one", 3, NULL), 0);
	TH_CHECK_INT(zap_recv(a, NULL, &m), 0);
	zap_msg_release(m);
	check_cloexec();

	pid = fork();
	TH_CHECK(pid >= 0);
	if (pid == 0) {
		struct zap_caps caps = { .size = sizeof(caps) };
		char buf[ZAP_PEER_MAX];
		int rc = 0;

		/* Plain exits: th_fail here would report from the wrong process. */
		if (zap_send(b, addr, "x", 1, NULL) != -EBADFD)
			rc |= 1;
		if (!strstr(zap_last_error(), "fork()"))
			rc |= 2;
		if (zap_recv(a, NULL, &m) != -EBADFD)
			rc |= 4;
		if (zap_shutdown(a) != -EBADFD || zap_caps(a, &caps) != -EBADFD ||
		    zap_transport_address(a, buf, sizeof(buf)) != -EBADFD)
			rc |= 8;
		zap_close(a);
		zap_close(b);
		_exit(rc);
	}
	TH_CHECK(waitpid(pid, &status, 0) == pid);
	TH_CHECK_MSG(
		WIFEXITED(status) && WEXITSTATUS(status) == 0,
		"fork child: status 0x%x (bits: 1 send, 2 reason, 4 recv, 8 other calls)",
		status);
	/* The parent's transports are intact: old and new connections. */
	TH_CHECK_INT(zap_send(b, addr, "two", 3, NULL), 0);
	TH_CHECK_INT(zap_recv(a, NULL, &m), 0);
	TH_CHECK_INT(zap_msg_len(m), 3);
	TH_CHECK(memcmp(zap_msg_data(m), "two", 3) == 0);
	zap_msg_release(m);
	{
		struct zap_transport *c = open_tcp(0);

		TH_CHECK_INT(zap_send(c, addr, "three", 5, NULL), 0);
		TH_CHECK_INT(zap_recv(a, NULL, &m), 0);
		TH_CHECK_INT(zap_msg_len(m), 5);
		zap_msg_release(m);
		zap_close(c);
	}
	zap_close(a);
	zap_close(b);
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, NULL, ""), 0);
}

static void test_fork(void **state)
{
	(void)state;
	th_child(child_fork, NULL, TIMEOUT_MS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shutdown_recv),
		cmocka_unit_test(test_burst_fallback),
		cmocka_unit_test(test_no_stats),
		cmocka_unit_test(test_shutdown_send),
		cmocka_unit_test(test_send_timeout_env),
		cmocka_unit_test(test_send_timeout_attr),
		cmocka_unit_test(test_fork),
		cmocka_unit_test(test_not_libzap),
	};

	return cmocka_run_group_tests_name("lifecycle", tests, th_group_setup,
					   th_group_teardown);
}
