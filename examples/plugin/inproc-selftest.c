/* SPDX-License-Identifier: MIT */
/*
 * A round trip over the example inproc transport, through the public API
 * only: two endpoints in this process, a message each way, an unknown peer,
 * a deadline and a cancellation from another thread. Run by `meson test` with ZAP_PLUGIN_PATH
 * pointing at the build directory, or against the installed plugin.
 */
/* POSIX interfaces (nanosleep, pthreads) under plain -std=c11. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <zap/zap.h>

#define CHECK(cond)                                                        \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "inproc-selftest: %s:%d: %s\n",    \
				__FILE__, __LINE__, #cond);                \
			return 1;                                          \
		}                                                          \
	} while (0)

static void *canceller(void *arg)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	nanosleep(&ts, NULL);
	zap_ctx_cancel(arg);
	return NULL;
}

int main(void)
{
	struct zap_transport *a, *b;
	struct zap_msg *m, *none = NULL;
	struct zap_ctx *ctx;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX], peer[ZAP_PEER_MAX];
	pthread_t th;
	int rc;

	rc = zap_pick("=inproc", 0, NULL, &a);
	if (rc) {
		fprintf(stderr, "inproc-selftest: zap_pick: %s\n", zap_strerror(rc));
		return 1;
	}
	CHECK(!strcmp(zap_transport_name(a), "inproc"));
	CHECK(zap_pick("=inproc", 0, NULL, &b) == 0);
	CHECK(zap_transport_address(a, addr_a, sizeof(addr_a)) == 0);
	CHECK(zap_transport_address(b, addr_b, sizeof(addr_b)) == 0);
	CHECK(strcmp(addr_a, addr_b) != 0);

	/* a -> b, then b replies to the peer it saw. */
	CHECK(zap_send(a, addr_b, "ping", 4, NULL) == 0);
	CHECK(zap_send(a, addr_b, "", 0, NULL) == 0);
	CHECK(zap_recv(b, NULL, &m) == 0);
	CHECK(zap_msg_len(m) == 4 && !memcmp(zap_msg_data(m), "ping", 4));
	CHECK(!strcmp(zap_msg_peer(m), addr_a));
	snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
	zap_msg_release(m);
	CHECK(zap_recv(b, NULL, &m) == 0);  /* order kept, empty allowed */
	CHECK(zap_msg_len(m) == 0);
	zap_msg_release(m);
	CHECK(zap_send(b, peer, "pong", 4, NULL) == 0);
	CHECK(zap_recv(a, NULL, &m) == 0);
	CHECK(zap_msg_len(m) == 4 && !memcmp(zap_msg_data(m), "pong", 4));

	/* Errors: unknown endpoint, wrong address form, deadline. */
	CHECK(zap_send(a, "inproc:999999", "x", 1, NULL) == -EHOSTUNREACH);
	CHECK(zap_send(a, "127.0.0.1:1", "x", 1, NULL) == -EINVAL);
	CHECK(zap_ctx_new(&ctx) == 0);
	CHECK(zap_ctx_set_timeout(ctx, 20 * 1000 * 1000) == 0);
	CHECK(zap_recv(a, ctx, &none) == -ETIMEDOUT && !none);
	zap_ctx_free(ctx);

	/* Another thread cancels a blocked recv. */
	CHECK(zap_ctx_new(&ctx) == 0);
	CHECK(pthread_create(&th, NULL, canceller, ctx) == 0);
	CHECK(zap_recv(b, ctx, &none) == -ECANCELED && !none);
	pthread_join(th, NULL);
	zap_ctx_free(ctx);

	/* A message outlives its transport. */
	zap_close(a);
	zap_close(b);
	CHECK(zap_msg_len(m) == 4);
	zap_msg_release(m);
	puts("inproc-selftest: ok");
	return 0;
}
