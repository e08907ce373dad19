/* SPDX-License-Identifier: MIT */
/*
 * gpudirect with TLS on real hardware: two endpoints in this process
 * whose bootstrap runs TLS 1.3 with mutual auth (identities made at test
 * time; each pins the other), over the first RDMA device and GPU the
 * plugin finds. A message arrives named "host:port#sha256:<sender's key>"
 * with zap_msg_peer_id() that key, a reply to that name arrives, a send
 * naming another key is refused (-EACCES) and so is a plaintext endpoint
 * dialling a TLS one. Exits 77, printing the probe's reason, only where
 * the probe said NOT PRESENT (as gpudirect-datapath); the accept loop's
 * TLS cases without hardware are in test-gd-hs.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zap/zap.h>

#include "tls-test-certs.h"
#include "zap-test.h"

static int fail(const char *what, int rc)
{
	fprintf(stderr, "FAIL: %s: %s\n", what, rc ? zap_strerror(rc) : "");
	return 1;
}

/* One message on @t within 30 s: its length, sender and key. */
static int recv_one(struct zap_transport *t, size_t *len, char *peer, size_t pl, char *id,
		    size_t il)
{
	struct zap_ctx *ctx;
	struct zap_msg *m;
	int rc;

	zap_ctx_new(&ctx);
	zap_ctx_set_timeout(ctx, 30ull * 1000000000ull);
	rc = zap_recv(t, ctx, &m);
	zap_ctx_free(ctx);
	if (rc)
		return rc;
	*len = zap_msg_len(m);
	snprintf(peer, pl, "%s", zap_msg_peer(m));
	snprintf(id, il, "%s", zap_msg_peer_id(m) ? zap_msg_peer_id(m) : "(none)");
	zap_msg_release(m);
	return 0;
}

static int open_tls(const struct tid *id, const char *pins, struct zap_transport **t)
{
	struct zap_attr attr = { .size = sizeof(attr),
				 .listen = "127.0.0.1:0",
				 .tls_cert = id->cert_path,
				 .tls_key = id->key_path,
				 .tls_peers = pins };

	return zap_pick("=gpudirect", 0, &attr, t);
}

static int run(const struct tid *A, const struct tid *B, const char *pins)
{
	struct zap_attr plain = { .size = sizeof(plain), .listen = "127.0.0.1:0" };
	struct zap_transport *a = NULL, *b = NULL, *c = NULL;
	char addr_b[ZAP_PEER_MAX], to[2 * ZAP_PEER_MAX], peer[ZAP_PEER_MAX], id[128];
	char want[3 * ZAP_PEER_MAX];
	char msg[1000] = { 7 };
	size_t len;
	int rc;

	if ((rc = open_tls(A, pins, &a)) || (rc = open_tls(B, pins, &b)))
		return fail("open a TLS endpoint", rc);
	zap_transport_address(b, addr_b, sizeof(addr_b));
	rc = zap_send(a, addr_b, msg, sizeof(msg), NULL);
	if (rc || (rc = recv_one(b, &len, peer, sizeof(peer), id, sizeof(id))))
		return fail("a to b over a TLS bootstrap", rc);
	zap_transport_address(a, to, sizeof(to));
	snprintf(want, sizeof(want), "%s#%s", to, A->fp);
	if (len != sizeof(msg) || strcmp(peer, want) || strcmp(id, A->fp)) {
		fprintf(stderr, "FAIL: got %zu bytes from %s (key %s), want %s\n", len,
			peer, id, want);
		return 1;
	}
	printf("ok message from %s\n", peer);
	rc = zap_send(b, peer, msg, 10, NULL);
	if (rc || (rc = recv_one(a, &len, peer, sizeof(peer), id, sizeof(id))))
		return fail("reply to the keyed peer string", rc);
	if (len != 10 || strcmp(id, B->fp))
		return fail("reply's length or key", 0);
	printf("ok reply, key %s\n", id);
	/* B's address with A's key: B cannot prove it. */
	snprintf(to, sizeof(to), "%s#%s", addr_b, A->fp);
	rc = zap_send(a, to, msg, 10, NULL);
	if (rc != -EACCES)
		return fail("send to another key (want -EACCES)", rc ? rc : -EPROTO);
	printf("ok another key refused\n");
	/* No plaintext fallback: a plaintext endpoint cannot reach b. */
	if ((rc = zap_pick("=gpudirect", 0, &plain, &c)))
		return fail("open a plaintext endpoint", rc);
	rc = zap_send(c, addr_b, msg, 10, NULL);
	if (!rc)
		return fail("a plaintext endpoint reached a TLS one", 0);
	printf("ok plaintext refused: %s\n", zap_strerror(rc));
	zap_close(c);
	zap_close(a);
	zap_close(b);
	return 0;
}

int main(void)
{
	char dir[512], pins[600];
	struct tid A, B;
	int rc = zt_need_plugin("gpudirect", "an RDMA device with an active port and a GPU");

	if (rc)
		return rc;
	tid_tmpdir(dir, sizeof(dir));
	tid_make(&A, dir, "a", -60, 86400, NULL);
	tid_make(&B, dir, "b", -60, 86400, NULL);
	snprintf(pins, sizeof(pins), "%s/pins", dir);
	tid_pins(pins, (const struct tid *const[]){ &A, &B }, 2);
	rc = run(&A, &B, pins);
	tid_free(&A);
	tid_free(&B);
	tid_rmdir(dir);
	return rc;
}
