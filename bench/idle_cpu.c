/* SPDX-License-Identifier: MIT */
/*
 * What an endpoint waiting in zap_recv() with no traffic costs: a server
 * endpoint takes one message from each of N peers (separate endpoints in a
 * child process, which then sit idle with their connections open), then
 * waits in zap_recv() for SECS seconds with nothing arriving. Prints the
 * server process's CPU time over that wait (from /proc/self/stat, like
 * `ps`) as a percentage of one core.
 *
 *   idle_cpu [PEERS (1000)] [SECS (10)]
 *
 * Runs whatever ZAP_TRANSPORT and ZAP_TCP_SPIN_US say (default: the
 * default transport, learned spinning). Loopback only.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

static void die(const char *what, int rc)
{
	fprintf(stderr, "idle_cpu: %s: %s\n", what, zap_strerror(rc));
	exit(1);
}

/* utime + stime of this process, in clock ticks. */
static long long cpu_ticks(void)
{
	char buf[1024], *p;
	long long ut = 0, st = 0;
	FILE *f = fopen("/proc/self/stat", "r");

	if (!f || !fgets(buf, sizeof(buf), f))
		exit(1);
	fclose(f);
	p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld",
			 &ut, &st) != 2)
		exit(1);
	return ut + st;
}

static struct zap_transport *endpoint(void)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *t;
	int rc = zap_pick(NULL, 0, &attr, &t);

	if (rc)
		die("zap_pick", rc);
	return t;
}

/* The peers: one endpoint each, one message each, then idle until killed.
 * Forked before the server opens anything, so no transport is inherited. */
static void peers(int n, int from, int ready)
{
	char server[ZAP_PEER_MAX] = "";

	if (read(from, server, sizeof(server) - 1) <= 0)
		exit(1);
	for (int i = 0; i < n; i++) {
		int rc = zap_send(endpoint(), server, "x", 1, NULL);

		if (rc)
			die("zap_send", rc);
	}
	if (write(ready, "r", 1) != 1)
		exit(1);
	pause();
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000, secs = argc > 2 ? atoi(argv[2]) : 10;
	struct rlimit rl;
	struct zap_transport *srv;
	struct zap_ctx *ctx;
	struct zap_msg *m;
	char addr[ZAP_PEER_MAX], c;
	long long t0, t1;
	int p[2], q[2], rc;
	pid_t kid;

	/* Each peer costs the child a few descriptors and the server one. */
	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	setenv("ZAP_TRANSPORT_QUIET", "1", 0);
	if (pipe(p) || pipe(q))
		return 1;
	kid = fork();
	if (kid == 0) {
		peers(n, q[0], p[1]);
		_exit(0);
	}
	srv = endpoint();
	rc = zap_transport_address(srv, addr, sizeof(addr));
	if (rc)
		die("zap_transport_address", rc);
	if (write(q[1], addr, strlen(addr)) < 0)
		return 1;
	for (int i = 0; i < n; i++) {
		rc = zap_recv(srv, NULL, &m);
		if (rc)
			die("zap_recv", rc);
		zap_msg_release(m);
	}
	if (read(p[0], &c, 1) != 1)
		return 1;

	zap_ctx_new(&ctx);
	zap_ctx_set_timeout(ctx, (uint64_t)secs * 1000000000ull);
	t0 = cpu_ticks();
	rc = zap_recv(srv, ctx, &m);
	t1 = cpu_ticks();
	if (rc != -ETIMEDOUT)
		die("zap_recv (expected a timeout)", rc);
	printf("idle_cpu: %d peers connected, %d s waiting in zap_recv: %.2f%% of a core\n",
	       n, secs, 100.0 * (double)(t1 - t0) / (double)sysconf(_SC_CLK_TCK) / secs);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	zap_ctx_free(ctx);
	zap_close(srv);
	return 0;
}
