/* SPDX-License-Identifier: MIT */
/*
 * The real gpudirect data path: two endpoints in this process over the
 * first RDMA device and GPU the plugin finds (ZAP_GPUDIRECT_DEVICE and
 * ZAP_CUDA_DEVICE choose others), bootstrapped over loopback TCP. Sends
 * from host memory and from a GPU pool buffer, sizes 0 B to 64 MiB, checks
 * every byte (copied back from GPU memory), replies to the peer string.
 * Exits 77, printing the probe's reason, only where the probe said NOT
 * PRESENT (no RDMA device, no active port, no CUDA driver or GPU, no way
 * to register GPU memory). A plugin that did not load, or whose probe said
 * ERROR, is a failure, and so is any error once the probe said LOADED.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zap/zap.h>

#include "zap-cuda.h"
#include "zap-test.h"

static const struct zcu *cu;

static int fail(const char *what, int rc)
{
	fprintf(stderr, "FAIL: %s: %s\n", what, rc ? zap_strerror(rc) : "");
	return 1;
}

/* Receive one message on @t and compare it with @want (GPU memory). */
static int expect(struct zap_transport *t, const unsigned char *want, size_t len,
		  char *peer, size_t pl)
{
	struct zap_ctx *ctx;
	struct zap_msg *m;
	unsigned char *got = malloc(len ? len : 1);
	int rc;

	zap_ctx_new(&ctx);
	zap_ctx_set_timeout(ctx, 30ull * 1000000000ull);
	rc = zap_recv(t, ctx, &m);
	zap_ctx_free(ctx);
	if (rc) {
		free(got);
		return fail("zap_recv", rc);
	}
	if (zap_msg_len(m) != len || !zap_msg_device_ptr(m)) {
		fprintf(stderr, "FAIL: got %zu bytes (device ptr %p), want %zu\n",
			zap_msg_len(m), zap_msg_device_ptr(m), len);
		return 1;
	}
	if (len && cu->MemcpyDtoH(got, (zcu_ptr)(uintptr_t)zap_msg_device_ptr(m), len)) {
		free(got);
		return fail("cuMemcpyDtoH", 0);
	}
	rc = len && memcmp(got, want, len);
	if (peer)
		snprintf(peer, pl, "%s", zap_msg_peer(m));
	zap_msg_release(m);
	free(got);
	if (rc)
		fprintf(stderr, "FAIL: %zu-byte message corrupted\n", len);
	return rc;
}

/* @t's zap_stats() and its one pair against what went each way. */
static int check_counts(struct zap_transport *t, const char *who, uint64_t msgs_tx,
			uint64_t bytes_tx, uint64_t msgs_rx, uint64_t bytes_rx, bool dialed)
{
	struct zap_stats s = { .size = sizeof(s) };
	struct zap_peer_info p = { .size = sizeof(p) };
	int rc = zap_stats(t, &s), n = zap_peer_list(t, &p, 1);

	if (rc)
		return fail("zap_stats", rc);
	printf("%s: sent %llu (%llu B), received %llu (%llu B), credit waits %llu, "
	       "pinned %llu B, peers %d\n",
	       who, (unsigned long long)s.msgs_sent, (unsigned long long)s.bytes_sent,
	       (unsigned long long)s.msgs_received, (unsigned long long)s.bytes_received,
	       (unsigned long long)s.credit_waits, (unsigned long long)s.pinned_bytes, n);
	if (s.msgs_sent != msgs_tx || s.bytes_sent != bytes_tx || s.msgs_received != msgs_rx ||
	    s.bytes_received != bytes_rx || !s.pinned_bytes || s.conns_open != 1 ||
	    s.peers != 1 || (dialed ? s.conns_dialed : s.conns_accepted) != 1) {
		fprintf(stderr, "FAIL: %s: counters off (want sent %llu/%llu B, received "
				"%llu/%llu B, one %s pair, pinned memory)\n",
			who, (unsigned long long)msgs_tx, (unsigned long long)bytes_tx,
			(unsigned long long)msgs_rx, (unsigned long long)bytes_rx,
			dialed ? "dialed" : "accepted");
		return 1;
	}
	if (n != 1 || strcmp(p.path, "rdma") || p.dialed != dialed || p.msgs_sent != msgs_tx ||
	    p.msgs_received != msgs_rx) {
		fprintf(stderr, "FAIL: %s: zap_peer_list %d: path %s dialed %d\n", who, n,
			p.path, p.dialed);
		return 1;
	}
	return 0;
}

int main(void)
{
	static const size_t sizes[] = { 0, 1, 4095, 4096, 65537, 1u << 20,
					(1u << 20) + 1, 5u << 20, 64u << 20 };
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *a = NULL, *b = NULL;
	struct zap_buffer *gbuf = NULL;
	struct zcu_device_info info;
	char addr_b[ZAP_PEER_MAX], peer[ZAP_PEER_MAX], why[256];
	uint64_t bytes = 0;
	unsigned char *buf;
	zcu_ctx ctx, prev;
	int rc;

	rc = zt_need_plugin("gpudirect", "an RDMA device with an active port and a GPU");
	if (rc)
		return rc;
	rc = zap_pick("=gpudirect", 0, &attr, &a);
	if (rc)
		return fail("open endpoint a", rc);
	rc = zap_pick("=gpudirect", 0, &attr, &b);
	if (rc)
		return fail("open endpoint b", rc);
	buf = malloc(64u << 20);
	if (!buf)
		return fail("malloc", -ENOMEM);
	/* The test reads GPU memory back through the driver itself. */
	if (zcu_load(&cu, why, sizeof(why)) != ZAP_PROBE_OK ||
	    zcu_open_device(NULL, cu, &info, why, sizeof(why)) != ZAP_PROBE_OK ||
	    cu->DevicePrimaryCtxRetain(&ctx, info.dev) || cu->CtxPushCurrent(ctx) ||
	    !cu->MemcpyDtoH || !cu->MemcpyHtoD) {
		fprintf(stderr, "FAIL: CUDA for checking: %s\n", why);
		return 1;
	}
	zap_transport_address(b, addr_b, sizeof(addr_b));
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		zt_fill(buf, sizes[i], (unsigned)i);
		rc = zap_send(a, addr_b, buf, sizes[i], NULL);
		if (rc)
			return fail("zap_send from host memory", rc);
		if (expect(b, buf, sizes[i], peer, sizeof(peer)))
			return 1;
		bytes += sizes[i];
		printf("ok %zu bytes from host memory\n", sizes[i]);
	}
	/* In place from a GPU pool buffer of this transport. */
	rc = zap_buffer_alloc(a, 8u << 20, NULL, &gbuf);
	if (rc)
		return fail("zap_buffer_alloc", rc);
	zt_fill(buf, 8u << 20, 99);
	if (cu->MemcpyHtoD((zcu_ptr)(uintptr_t)zap_buffer_device_ptr(gbuf), buf, 8u << 20))
		return fail("cuMemcpyHtoD", 0);
	rc = zap_send(a, addr_b, zap_buffer_bytes(gbuf), 8u << 20, NULL);
	if (rc || expect(b, buf, 8u << 20, NULL, 0))
		return fail("zap_send from a GPU buffer", rc);
	printf("ok 8 MiB from GPU memory\n");
	zap_buffer_release(gbuf);
	/* Reply to the peer string the receiver got. */
	zt_fill(buf, 1000, 5);
	rc = zap_send(b, peer, buf, 1000, NULL);
	if (rc || expect(a, buf, 1000, NULL, 0))
		return fail("reply to the received peer", rc);
	printf("ok reply to %s\n", peer);
	bytes += 8u << 20;
	if (check_counts(a, "a", 10, bytes, 1, 1000, true) ||
	    check_counts(b, "b", 1, 1000, 10, bytes, false))
		return 1;
	zap_close(a);
	zap_close(b);
	cu->CtxPopCurrent(&prev);
	cu->DevicePrimaryCtxRelease(info.dev);
	free(buf);
	return 0;
}
