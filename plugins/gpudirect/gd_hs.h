/* SPDX-License-Identifier: MIT */
/*
 * The accepting side of the gpudirect bootstrap, apart from verbs: the
 * RDMA-specific part on top of the connection layer's accept engine
 * (util/conn, zap-conn.h), which runs many handshakes at once with
 * deadlines, a cap in flight, eviction of idle ones and TLS, and reads
 * the peer's message whole before anything is allocated. Here: the
 * message is a gd_boot (gd_proto.h); the peer is who the TCP wire's
 * identity rule says (zconn_identity(): the address it claims to listen
 * on must be the connection's source, a wildcard becomes the source;
 * with TLS the name ends with the key it proved, "host:port#sha256:<hex>");
 * a claim of our own instance is refused; then on_boot() builds the pair
 * and gives our message followed by the one-byte confirmation, and the
 * engine waits for the peer's confirmation byte.
 *
 * The plugin (gpudirect.c) runs it on its accept thread; the unit tests
 * (tests/gpudirect/test-gd-hs.c) drive it over real loopback sockets with
 * callbacks that allocate nothing from hardware.
 *
 * Not thread-safe: one thread (the accept thread) makes every call.
 */
#ifndef ZAP_GD_HS_H
#define ZAP_GD_HS_H

#include <stddef.h>
#include <stdint.h>

#include "gd_proto.h"

struct ztls_ctx;

struct gd_hs_cfg {
	unsigned max_inflight; /* handshakes at once, >= 1 */
	uint64_t timeout_ns;   /* each handshake's deadline, from accept */
	uint64_t instance;     /* ours: a peer claiming it is refused */
	struct ztls_ctx *tls;  /* TLS for every handshake, or NULL: plaintext */
	/*
	 * The peer's message is valid and it is who it claims (@key: the
	 * name replies use). Build the pair; write into @out (cap bytes) our
	 * bootstrap message and the confirmation byte after it. Return their
	 * length and the pair in *@pair, or a negative errno with @why.
	 */
	int (*on_boot)(void *user, const struct gd_boot *peer, const char *key,
		       void **pair, uint8_t *out, size_t cap, char *why, size_t wl);
	void (*on_ready)(void *user, void *pair); /* takes the pair */
	void (*on_fail)(void *user, void *pair);  /* frees the pair */
	/* A handshake dropped, with why (logged by the plugin). */
	void (*on_drop)(void *user, const char *src, const char *why);
	void *user;
};

struct gd_hs;

int gd_hs_new(const struct gd_hs_cfg *cfg, struct gd_hs **out);
/* Drops every handshake in flight (on_fail() for those with a pair). */
void gd_hs_free(struct gd_hs *hs);
/*
 * The accept loop: accept on the listening socket @lfd (while there is
 * room), run the handshakes, until @wake is readable. Return 0, or a
 * negative errno when poll fails.
 */
int gd_hs_serve(struct gd_hs *hs, int lfd, int wake);

/*
 * What one pair may pin, given our receive slots (@own bytes of GPU
 * memory) and the peer's slot size: host staging stages of
 * peer->slot_bytes (at most min(peer->slots, 8)) within @peer_cap bytes in
 * all (own included). 0 with *@stages (>= 1) and *@bytes (own + staging),
 * or -ENOBUFS with @why when not even one stage fits.
 */
int gd_pin_plan(uint64_t own, const struct gd_boot *peer, uint64_t peer_cap,
		uint32_t *stages, uint64_t *bytes, char *why, size_t wl);

#endif /* ZAP_GD_HS_H */
