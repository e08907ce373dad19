/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect bootstrap's byte stream and peer names under TLS, apart
 * from verbs (built everywhere, unit-tested by tests/gpudirect).
 *
 * When the endpoint has a certificate (ZAP_TLS_CERT), the bootstrap TCP
 * connection runs TLS 1.3 with mutual authentication (util/tls, the
 * settings of the TCP wire), so the queue-pair parameters come only from
 * an authenticated peer, and the peer's key is part of its name:
 * "host:port#sha256:<hex>" (docs/wires.md, "TLS"). There is no plaintext
 * fallback: a plaintext peer fails the TLS handshake.
 *
 * Shared state: none; a struct ztls_conn is used by one thread at a time
 * (the dialling sender, or the accept thread).
 */
#ifndef ZAP_GD_TLS_H
#define ZAP_GD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "zap-tls.h"

/*
 * Receive / send up to @len bytes on the non-blocking socket @fd, through
 * @tc when it is not NULL. >0 bytes; 0 (receive) the peer closed; -EAGAIN
 * with *@ev (POLLIN or POLLOUT) to wait for; another negative errno with
 * @why.
 */
ssize_t gd_io_recv(int fd, struct ztls_conn *tc, void *buf, size_t len, short *ev,
		   char *why, size_t wl);
ssize_t gd_io_send(int fd, struct ztls_conn *tc, const void *buf, size_t len, short *ev,
		   char *why, size_t wl);

/* Wait until @ev (POLLIN or POLLOUT) may be ready on @fd: 0, or a
 * negative errno that ends the bootstrap (deadline, cancel, shutdown). */
typedef int (*gd_wait_fn)(void *user, int fd, short ev);

/*
 * All @len bytes received into / sent from @buf (@wr) on @fd, through @tc
 * when it is not NULL, waiting with @wait. 0; -ECONNRESET with @why when
 * the peer closed; @wait's error; another negative errno with @why.
 */
int gd_io_all(int fd, struct ztls_conn *tc, void *buf, size_t len, bool wr,
	      gd_wait_fn wait, void *user, char *why, size_t wl);

/*
 * The dialling side's TLS handshake on the connected non-blocking @fd,
 * with @x's identity and trust, to the key @want only ("sha256:<hex>", or
 * NULL: any trusted key), waiting with @wait. 0 and *@out (free with
 * ztls_conn_free() before closing @fd), or a negative errno with @why:
 * -EACCES (the peer's key is not trusted or not @want, or it refused
 * ours), -EPROTO (not TLS), @wait's error.
 */
int gd_tls_dial(struct ztls_ctx *x, int fd, const char *want, gd_wait_fn wait, void *user,
		struct ztls_conn **out, char *why, size_t wl);

/*
 * A peer string a send names, checked and normalised: "host:port" as is;
 * "host:port#sha256:<hex>" only with TLS (@tls), the key in lower case so
 * that it equals the name a received message carries. 0 and @out, or
 * -EINVAL with @why.
 */
int gd_peer_norm(const char *peer, bool tls, char *out, size_t ol, char *why, size_t wl);

/* "@addr#@fp" into @out (@fp "" : @addr alone). 0, or -ENAMETOOLONG. */
int gd_peer_join(const char *addr, const char *fp, char *out, size_t ol);

/*
 * Whether a pair named @have (gd_peer.key) serves a send to @want (a
 * normalised peer string): the same name, or @want names no key and @have
 * is that address with the key it proved (any trusted key may answer a
 * keyless address, as on the TCP wire).
 */
bool gd_peer_match(const char *have, const char *want);

#endif /* ZAP_GD_TLS_H */
