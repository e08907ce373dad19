/* SPDX-License-Identifier: MIT */
/*
 * The accepting side of the gpudirect bootstrap, apart from verbs: many
 * handshakes at once on accepted TCP sockets, each with its own deadline,
 * a cap on how many are in flight, and nothing allocated for a peer before
 * its bootstrap message has been read whole, decoded and its identity
 * checked (with TLS, only the TLS session, bounded by the cap). The plugin (gpudirect.c) runs it on its accept thread and
 * builds the queue pair in the on_boot callback; the unit tests
 * (tests/gpudirect/test-gd-hs.c) drive it over real loopback sockets with
 * callbacks that allocate nothing from hardware.
 *
 * One handshake, accepted side (the dialler writes first and reads after,
 * gpudirect.c):
 *   0. with TLS (cfg.tls), the TLS 1.3 handshake with mutual auth, in
 *      non-blocking steps (gd_tls.h): a peer that is not TLS, or whose
 *      key is not trusted, is refused; everything below runs over TLS;
 *   1. read the peer's message: header, then the body it announces
 *      (gd_boot_header(), gd_boot_decode());
 *   2. the identity rule of the TCP wire (plugins/default/WIRE.md): the
 *      address the peer claims to listen on must be the connection's
 *      source address; a wildcard host claimed becomes the source address;
 *      any other claim, or a claim of our own instance, is refused with a
 *      reason naming the real source; with TLS the name ends with the
 *      key the peer proved ("host:port#sha256:<hex>");
 *   3. on_boot(): allocate and connect the pair, post its receives, and
 *      give our message followed by the one-byte confirmation;
 *   4. write them, read the peer's confirmation; on_ready() (or on_fail()
 *      when anything after 3 fails).
 * A handshake that has not finished by its deadline is dropped (on_fail()
 * if it got to 3). When max_inflight handshakes are in flight, a new
 * connection evicts the oldest one that has not yet delivered a whole
 * bootstrap message (so idle sockets cannot shut peers out); if every one
 * has, it waits in the listen backlog.
 *
 * Not thread-safe: one thread (the accept thread) makes every call.
 */
#ifndef ZAP_GD_HS_H
#define ZAP_GD_HS_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

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

struct gd_hs_stats {
	unsigned inflight;
	uint64_t ready, refused, timed_out, evicted;
};

struct gd_hs;

int gd_hs_new(const struct gd_hs_cfg *cfg, struct gd_hs **out);
/* Drops every handshake in flight (on_fail() for those with a pair). */
void gd_hs_free(struct gd_hs *hs);
/* Whether a new connection may be accepted now (room, or one to evict). */
bool gd_hs_room(const struct gd_hs *hs);
/* Take an accepted, non-blocking socket (closed by the engine). 0, or
 * -EAGAIN (no room: the caller closes it) / -ENOMEM. */
int gd_hs_add(struct gd_hs *hs, int fd, uint64_t now);
/* pollfds for the handshakes in flight, at most @max: their count. */
unsigned gd_hs_pollfds(const struct gd_hs *hs, struct pollfd *pfd, unsigned max);
/* Milliseconds until the next deadline (-1: none). */
int gd_hs_timeout_ms(const struct gd_hs *hs, uint64_t now);
/* Move every handshake on as far as it goes without blocking; drop those
 * past their deadline. */
void gd_hs_step(struct gd_hs *hs, uint64_t now);
void gd_hs_get_stats(const struct gd_hs *hs, struct gd_hs_stats *st);
/*
 * The accept loop: accept on the listening socket @lfd (while there is
 * room), run the handshakes, until @wake is readable. Return 0, or a
 * negative errno when poll fails.
 */
int gd_hs_serve(struct gd_hs *hs, int lfd, int wake);

/*
 * The identity rule alone: the name a peer that claims @claim (its
 * listen address, "host:port" or "[v6]:port") goes by, given the
 * connection's source @src. 0 and @key; -EPERM with @why naming the
 * source when the claimed host is neither a wildcard nor the source;
 * -EINVAL for a malformed claim.
 */
int gd_hs_identity(const char *claim, const struct sockaddr *src, unsigned srclen,
		   char *key, size_t kl, char *why, size_t wl);

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
