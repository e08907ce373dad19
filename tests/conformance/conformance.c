/* SPDX-License-Identifier: MIT */
/*
 * The transport conformance suite: one set of behaviour checks (checks.c),
 * written once against the public API (<zap/zap.h>), run against every
 * transport that can run here. argv[1] names the instance (the table
 * below): how to open two endpoints A and B, the environment they need,
 * and the path (zap_peer_path()) a message between them must take.
 *
 * Every check gets endpoints of its own, so one failing check leaves the
 * others' alone, and they are closed after it, so a leak is the check's
 * (LeakSanitizer at exit). A transport with one endpoint per process (dpdk:
 * one EAL each) runs every check in a child process A of its own, beside a
 * peer process B that sends every message back to where it came from.
 *
 * Output is TAP on stdout; diagnostics are TAP comments on stderr. A hang
 * ends at a limit scaled by zt_timeout_ms() (tests/README.md).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conformance.h"

const struct inst *in;
static char sock_dir[128];
static unsigned sock_seq;

/* ---- helpers the checks share ------------------------------------------- */

static int open_ep(struct zap_transport **t, char *addr)
{
	char listen[256];
	struct zap_attr a = { .size = sizeof(a) };
	int rc;

	if (in->listen) {
		snprintf(listen, sizeof(listen), in->listen, sock_dir, sock_seq++);
		a.listen = listen;
	}
	rc = zap_pick(in->pref, ZAP_PICK_STRICT, &a, t);
	CK(rc == 0, "zap_pick(%s): %s", in->pref, zap_strerror(rc));
	rc = zap_transport_address(*t, addr, ZAP_PEER_MAX);
	CK(rc == 0, "zap_transport_address: %s", zap_strerror(rc));
	return 0;
}

struct zap_ctx *ctx_in(unsigned ms)
{
	struct zap_ctx *c = NULL;

	if (zap_ctx_new(&c) == 0)
		zap_ctx_set_timeout(c, (uint64_t)ms * 1000000u);
	return c;
}

/* Receive one message within the hang limit: 0 or the error. */
int recv_one(struct zap_transport *t, struct zap_msg **m)
{
	struct zap_ctx *c = ctx_in(zt_timeout_ms(HANG_MS));
	int rc;

	*m = NULL;
	if (!c)
		return -ENOMEM;
	rc = zap_recv(t, c, m);
	zap_ctx_free(c);
	return rc;
}

int send_one(struct zap_transport *t, const char *peer, const void *buf, size_t len)
{
	struct zap_ctx *c = ctx_in(zt_timeout_ms(HANG_MS));
	int rc;

	if (!c)
		return -ENOMEM;
	rc = zap_send(t, peer, buf, len, c);
	zap_ctx_free(c);
	return rc;
}

/* A received message must be @len bytes of zt_fill(@seed). */
int msg_is(struct zap_msg *m, size_t len, uint64_t seed)
{
	CK(zap_msg_len(m) == len, "length %zu, want %zu", zap_msg_len(m), len);
	CK(len == 0 || zap_msg_data(m) != NULL, "no bytes for %zu", len);
	CK(zt_check_fill(zap_msg_data(m), len, seed) == len,
	   "%zu-byte message (seed %llu) wrong at byte %zu", len,
	   (unsigned long long)seed, zt_check_fill(zap_msg_data(m), len, seed));
	return 0;
}

static void *sender_main(void *arg)
{
	struct sender *s = arg;

	for (s->sent = 0; s->sent < s->n; s->sent++) {
		size_t len = s->make(s->sent, s->buf, s->arg);

		s->rc = send_one(s->t, s->peer, s->buf, len);
		if (s->rc)
			break;
	}
	return NULL;
}

int sender_start(struct sender *s)
{
	s->rc = 0;
	CK(pthread_create(&s->th, NULL, sender_main, s) == 0, "pthread_create");
	return 0;
}

/* Join the sender (its sends end within their hang limits): 0 when it
 * sent them all. */
int sender_join(struct sender *s)
{
	pthread_join(s->th, NULL);
	CK(s->rc == 0, "zap_send #%u: %s", s->sent, zap_strerror(s->rc));
	return 0;
}

/* The path between @t and @peer is the instance's (when it has paths). */
int path_ok(struct zap_transport *t, const char *peer)
{
	char p[16] = "";
	int rc = zap_peer_path(t, peer, p, sizeof(p));

	if (!in->path) {
		CK(rc == -EOPNOTSUPP, "zap_peer_path on a transport without "
		   "paths: %d \"%s\"", rc, p);
		return 0;
	}
	CK(rc == 0 && !strcmp(p, in->path), "path to %s: %d \"%s\", want \"%s\"",
	   peer, rc, p, in->path);
	return 0;
}

/* ---- the instances ------------------------------------------------------ */

static const struct inst insts[] = {
	{ "tcp", "=default", NULL, NULL, "127.0.0.1:0", "tcp", true, false,
	  { "ZAP_SHM=off", "ZAP_TCP_RX_QUEUE_BYTES=16M" } },
	{ "unix", "=default", NULL, NULL, "unix:%s/ep%u.sock", "unix", true, false,
	  { "ZAP_SHM=off", "ZAP_TCP_RX_QUEUE_BYTES=16M" } },
	{ "shm", "=default", NULL, NULL, "127.0.0.1:0", "shm", true, false,
	  { "ZAP_SHM=user", "ZAP_TCP_RX_QUEUE_BYTES=16M" } },
	/* Against the mock driver of mockcuda/ (LD_LIBRARY_PATH). */
	{ "uma", "=uma", "uma", "a CUDA driver", "127.0.0.1:0", "tcp", true, false,
	  { "ZAP_SHM=off", "ZAP_TCP_RX_QUEUE_BYTES=16M" } },
	/* Its mailboxes have no limit: no send ever blocks. */
	{ "inproc", "=inproc", "inproc", "the example plugin", NULL, NULL, false, false,
	  { NULL } },
	/* Two processes over net_memif (dpdk_env() sets each one's EAL);
	 * B always reads, so no send of A's blocks. */
	{ "dpdk-memif", "=dpdk", "dpdk", "DPDK with net_memif", NULL, NULL, false, true,
	  { NULL } },
};

static const struct {
	const char *name;
	int (*fn)(struct pair *p);
} checks[] = {
	{ "sizes 0 B to the maximum arrive intact", check_sizes },
	{ "sequential sends arrive in order", check_order },
	{ "a received peer string is a send destination", check_replyable },
	{ "a receive deadline returns -ETIMEDOUT, not early", check_deadline },
	{ "a message above the maximum is refused -EMSGSIZE", check_oversize },
	{ "zap_shutdown wakes every blocked call", check_shutdown },
	{ "held messages outlive zap_close, queued ones are freed", check_close_queued },
};

/* ---- both endpoints in this process ---------------------------------------- */

static int run_local(size_t i)
{
	struct pair p;
	int rc;

	memset(&p, 0, sizeof(p));
	if (open_ep(&p.a, p.addr_a))
		return 1;
	if (open_ep(&p.b, p.addr_b)) {
		zap_close(p.a);
		return 1;
	}
	p.rx = p.b;
	rc = checks[i].fn(&p);
	zap_close(p.a);
	zap_close(p.b);
	return rc;
}

/* ---- one endpoint per process: dpdk over net_memif ------------------------- */

#define DP_B "10.77.0.1:5000"

/* The EAL of B (memif server, lcore 1) or A (client, lcore 0) for check
 * @i: a file prefix of their own, the memif socket they share. */
static void dpdk_env(bool b, size_t i)
{
	static int run; /* the parent's pid: both children name the same socket */
	char eal[512];

	if (!run)
		run = (int)getpid();

	snprintf(eal, sizeof(eal),
		 "--no-huge --no-shconf -m 256 --no-pci --no-telemetry -l %d "
		 "--vdev=net_memif0,role=%s,socket=/zapconf-%d-%zu,"
		 "mac=02:00:00:78:00:%02d --file-prefix=zapconf%d%zu%s",
		 b ? 1 : 0, b ? "server" : "client", run, i, b ? 1 : 2, run, i,
		 b ? "b" : "a");
	setenv("ZAP_DPDK_EAL_ARGS", eal, 1);
	setenv("ZAP_DPDK_IP", b ? "10.77.0.1" : "10.77.0.2", 1);
	setenv("ZAP_DPDK_UDP_PORT", b ? "5000" : "5001", 1);
}

static struct zap_ctx *echo_ctx;

static void echo_stop(int sig)
{
	(void)sig;
	zap_ctx_cancel(echo_ctx); /* async-signal-safe */
}

/* B: send every message back to its sender until SIGTERM. */
static int echo_main(struct zap_transport *t)
{
	struct zap_msg *m;
	int rc;

	while ((rc = zap_recv(t, echo_ctx, &m)) == 0) {
		int s = zap_send(t, zap_msg_peer(m), zap_msg_data(m), zap_msg_len(m),
				 echo_ctx);

		/* A may be gone (close_queued closes it with echoes due). */
		if (s && s != -ECANCELED)
			fprintf(stderr, "# echo to %s: %s\n", zap_msg_peer(m),
				zap_strerror(s));
		zap_msg_release(m);
	}
	if (rc != -ECANCELED)
		fprintf(stderr, "# echo: zap_recv: %s\n", zap_strerror(rc));
	return rc != -ECANCELED;
}

/* B (@ready >= 0) writes a byte to @ready once its endpoint is open. */
static pid_t spawn(bool b, size_t i, int ready)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct pair p;
		int rc = 1;

		memset(&p, 0, sizeof(p));
		dpdk_env(b, i);
		if (b && (zap_ctx_new(&echo_ctx) || signal(SIGTERM, echo_stop) == SIG_ERR))
			_exit(1);
		if (open_ep(&p.a, p.addr_a) == 0) {
			snprintf(p.addr_b, sizeof(p.addr_b), "%s", DP_B);
			p.rx = p.a;
			if (ready >= 0)
				(void)!write(ready, "", 1);
			rc = b ? echo_main(p.a) : checks[i].fn(&p);
			zap_close(p.a);
		}
		zap_ctx_free(echo_ctx);
		fflush(NULL);
		_exit(rc ? 1 : 0);
	}
	return pid;
}

static int reap(pid_t pid, const char *who)
{
	int st;

	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		fprintf(stderr, "# %s: fork or waitpid failed\n", who);
		return 1;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	fprintf(stderr, "# %s: %s %d\n", who, WIFEXITED(st) ? "exit" : "signal",
		WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	return 1;
}

static int run_two_procs(size_t i)
{
	pid_t b, a;
	int rc;

	/*
	 * A starts once B's endpoint is open: A's first send resolves B's
	 * address within ZAP_DPDK_ARP_TIMEOUT_MS (3 s), and B's EAL start
	 * on a loaded host once took longer than that (CI: "no ARP reply").
	 * B failing to open closes the pipe: A then runs and says so.
	 */
	int ready[2];
	char byte;

	fflush(NULL);
	if (pipe(ready)) {
		perror("pipe");
		return 1;
	}
	b = spawn(true, i, ready[1]);
	close(ready[1]);
	struct pollfd pf = { .fd = ready[0], .events = POLLIN };
	if (poll(&pf, 1, (int)zt_timeout_ms(60000)) != 1 || read(ready[0], &byte, 1) != 1)
		fprintf(stderr, "# B (echo) did not open its endpoint\n");
	close(ready[0]);
	a = spawn(false, i, -1);
	rc = reap(a, "A");
	if (b > 0)
		kill(b, SIGTERM);
	return reap(b, "B (echo)") | rc;
}

/* ---- main ------------------------------------------------------------------- */

static int setup(const char *name)
{
	for (size_t i = 0; i < sizeof(insts) / sizeof(insts[0]); i++)
		if (!strcmp(insts[i].name, name))
			in = &insts[i];
	if (!in) {
		fprintf(stderr, "conformance: unknown instance '%s'\n", name);
		return 2;
	}
	setenv("ZAP_MAX_MSG_BYTES", MAX_MSG_ENV, 1);
	for (int i = 0; in->env[i]; i++)
		putenv((char *)in->env[i]);
	if (in->two_procs)
		dpdk_env(false, 0); /* the probe, here, sees A's settings */
	if (!zt_mkdtemp(sock_dir, sizeof(sock_dir), "zap-conf")) {
		perror("mkdtemp");
		return 2;
	}
	if (in->plugin) {
		/* zt_need_plugin() says why on stdout: stdout is TAP only. */
		int out = dup(1), rc;

		fflush(stdout);
		dup2(2, 1);
		rc = zt_need_plugin(in->plugin, in->needs);
		fflush(stdout);
		dup2(out, 1);
		close(out);
		if (rc == ZT_SKIP)
			printf("1..0 # SKIP %s not present\n", in->plugin);
		return rc;
	}
	return 0;
}

int main(int argc, char **argv)
{
	size_t n = sizeof(checks) / sizeof(checks[0]);
	int rc, failed = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s tcp|unix|shm|uma|inproc|dpdk-memif\n", argv[0]);
		return 2;
	}
	rc = setup(argv[1]);
	if (rc) {
		zt_rmtree(sock_dir);
		return rc;
	}
	printf("1..%zu\n", n);
	for (size_t i = 0; i < n; i++) {
		fflush(stdout);
		rc = in->two_procs ? run_two_procs(i) : run_local(i);
		printf("%sok %zu - %s: %s\n", rc ? "not " : "", i + 1, in->name,
		       checks[i].name);
		failed += rc != 0;
	}
	zt_rmtree(sock_dir);
	return failed ? 1 : 0;
}
