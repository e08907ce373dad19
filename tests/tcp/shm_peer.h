/* SPDX-License-Identifier: MIT */
/*
 * Two processes for the same-host upgrade's tests (test_tcp_shm.c,
 * test_tcp_shm_sweep.c): endpoints of the default transport that accept
 * messages up to BIG, receiving with a deadline, the path a peer's
 * messages take, and a peer process: the test program exec()ed again
 * with "--peer NAME ARG" (its main() runs the child_* function NAME),
 * whose checks (CK) exit with a code instead of cmocka's jumps. No shared
 * state. Include it after <cmocka.h>.
 */
#ifndef ZAP_TEST_SHM_PEER_H
#define ZAP_TEST_SHM_PEER_H

#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zap/zap.h>

#define BIG (64u << 20)

/* ---- endpoints ---------------------------------------------------------- */

static inline int ep_try(const char *listen, struct zap_transport **t)
{
	struct zap_attr a = { .size = sizeof(a), .listen = listen,
			      .max_msg_size = BIG };
	return zap_pick("=default", 0, &a, t);
}

static inline struct zap_transport *ep(const char *listen, char *addr)
{
	struct zap_transport *t = NULL;
	int r = ep_try(listen, &t);
	if (r)
		fprintf(stderr, "zap_pick(%s): %s\n", listen, zap_last_error());
	assert_int_equal(r, 0);
	if (addr)
		assert_int_equal(zap_transport_address(t, addr, ZAP_PEER_MAX), 0);
	return t;
}

static inline struct zap_msg *recv_in(struct zap_transport *t, unsigned ms, int *err)
{
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, ms * 1000000ull);
	*err = zap_recv(t, ctx, &m);
	zap_ctx_free(ctx);
	return m;
}

static inline struct zap_msg *recv_ok(struct zap_transport *t)
{
	int r;
	struct zap_msg *m = recv_in(t, 30000, &r);
	if (r)
		fprintf(stderr, "zap_recv: %s (%s)\n", zap_strerror(r), zap_last_error());
	assert_int_equal(r, 0);
	return m;
}

static inline void path_is(struct zap_transport *t, const char *peer, const char *want)
{
	char p[16] = "";
	int r = zap_peer_path(t, peer, p, sizeof(p));
	if (r || strcmp(p, want))
		fprintf(stderr, "path to %s: %d \"%s\", want \"%s\"\n", peer, r, p, want);
	assert_int_equal(r, 0);
	assert_string_equal(p, want);
}

/* ---- the peer process --------------------------------------------------- */

/* In a child: checks that exit with a code instead of cmocka's jumps. */
#define CK(cond)                                                              \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "peer: %s:%d: %s (%s)\n", __FILE__,   \
				__LINE__, #cond, zap_last_error());           \
			_exit(3);                                             \
		}                                                             \
	} while (0)

static inline struct zap_transport *child_ep(const char *listen)
{
	struct zap_transport *t = NULL;
	CK(ep_try(listen, &t) == 0);
	return t;
}

static inline struct zap_msg *child_recv(struct zap_transport *t)
{
	struct zap_msg *m = NULL;
	struct zap_ctx *ctx;
	CK(zap_ctx_new(&ctx) == 0);
	zap_ctx_set_timeout(ctx, 60ull * 1000000000u);
	CK(zap_recv(t, ctx, &m) == 0);
	zap_ctx_free(ctx);
	return m;
}

/*
 * Start the peer @name (a child_* function, see peers[] by main()) with
 * @arg in a new process: fork and exec this program, so that the peer
 * starts with no thread and no endpoint of ours (ThreadSanitizer cannot
 * follow a fork of a threaded process, and the peer should be a stranger).
 */
static inline pid_t peer_start(const char *name, const char *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/proc/self/exe", "shm-peer", "--peer", name, arg, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static inline void peer_wait(pid_t pid)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fprintf(stderr, "peer status 0x%x\n", st);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The peer's first message ("hi") into @peer's address, then "go": for
 * peers that wait until the test knows them. */
static inline void peer_greet(struct zap_transport *s, char *peer)
{
	struct zap_msg *m = recv_ok(s);
	snprintf(peer, ZAP_PEER_MAX, "%s", zap_msg_peer(m));
	zap_msg_release(m);
	assert_int_equal(zap_send(s, peer, "go", 2, NULL), 0);
}

#endif /* ZAP_TEST_SHM_PEER_H */
