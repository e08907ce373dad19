/* SPDX-License-Identifier: MIT */
/*
 * The accepting side of the gpudirect bootstrap on the connection layer's
 * accept engine (zap-conn.h): the gd_boot message, who sent it, and the
 * pinned memory plan (see gd_hs.h).
 *
 * Shared state: none. One thread (the accept thread, or a test) makes
 * every call on an instance; the callbacks run on it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "gd_hs.h"
#include "zap-conn.h"

struct gd_hs {
	struct gd_hs_cfg cfg;
	struct zconn_acc *acc;
};

/* ---- pinned memory ------------------------------------------------------ */

int gd_pin_plan(uint64_t own, const struct gd_boot *peer, uint64_t peer_cap,
		uint32_t *stages, uint64_t *bytes, char *why, size_t wl)
{
	uint64_t n = peer->slots < 8 ? peer->slots : 8;

	if (!peer->slot_bytes || own + peer->slot_bytes > peer_cap) {
		snprintf(why, wl,
			 "the pair would pin %llu bytes (%llu of receive slots and "
			 "a %u-byte staging buffer for the peer's slot size), above "
			 "ZAP_GPUDIRECT_PEER_PIN_BYTES=%llu",
			 (unsigned long long)(own + peer->slot_bytes),
			 (unsigned long long)own, peer->slot_bytes,
			 (unsigned long long)peer_cap);
		return -ENOBUFS;
	}
	if (n > (peer_cap - own) / peer->slot_bytes)
		n = (peer_cap - own) / peer->slot_bytes;
	if (!n)
		n = 1;
	*stages = (uint32_t)n;
	*bytes = own + n * peer->slot_bytes;
	return 0;
}

/* ---- the bootstrap message on the engine -------------------------------- */

/* zconn_acc_cfg.msg_len: a gd_boot header announces its body. */
static int boot_len(void *user, const uint8_t *hdr, size_t *len, char *why, size_t wl)
{
	size_t body;
	int rc = gd_boot_header(hdr, &body, why, wl);

	(void)user;
	if (!rc)
		*len = GD_BOOT_HDR + body;
	return rc;
}

/* zconn_acc_cfg.on_msg: decode, check who sent it, build the pair. */
static int boot_msg(void *user, const uint8_t *msg, size_t len,
		    const struct sockaddr *src, socklen_t sl, const char *fp, void **pair,
		    uint8_t *out, size_t cap, char *why, size_t wl)
{
	struct gd_hs *g = user;
	char key[ZAP_PEER_MAX];
	struct gd_boot peer;
	int rc;

	rc = gd_boot_decode(msg, len, &peer, why, wl);
	if (rc)
		return rc;
	rc = zconn_identity(peer.listen, src, sl, -1, "bootstrap message", key,
			    sizeof(key), why, wl);
	if (rc)
		return rc;
	/* With TLS the peer is its key as much as its address. */
	if (zconn_peer_join(key, fp, key, sizeof(key))) {
		snprintf(why, wl, "address %.64s too long to carry a key", key);
		return -EPROTO;
	}
	if (peer.instance == g->cfg.instance) {
		snprintf(why, wl, "claims to be this endpoint (its own instance id)");
		return -EPERM;
	}
	return g->cfg.on_boot(g->cfg.user, &peer, key, pair, out, cap, why, wl);
}

/* The engine's other callbacks, to the plugin's (its own user pointer). */
static void boot_ready(void *user, void *pair)
{
	struct gd_hs *g = user;

	g->cfg.on_ready(g->cfg.user, pair);
}

static void boot_fail(void *user, void *pair)
{
	struct gd_hs *g = user;

	g->cfg.on_fail(g->cfg.user, pair);
}

static void boot_drop(void *user, const char *src, const char *why)
{
	struct gd_hs *g = user;

	if (g->cfg.on_drop)
		g->cfg.on_drop(g->cfg.user, src, why);
}

int gd_hs_new(const struct gd_hs_cfg *cfg, struct gd_hs **out)
{
	struct gd_hs *g;
	int rc;

	if (!cfg->on_boot || !cfg->on_ready || !cfg->on_fail)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cfg = *cfg;
	struct zconn_acc_cfg ac = { .max_inflight = cfg->max_inflight,
				    .timeout_ns = cfg->timeout_ns,
				    .tls = cfg->tls,
				    .hdr_len = GD_BOOT_HDR,
				    .msg_max = GD_BOOT_MAX,
				    .out_max = GD_BOOT_MAX + 1,
				    .ack_len = 1,
				    .what = "bootstrap message",
				    .cap_var = "ZAP_GPUDIRECT_HANDSHAKES",
				    .time_var = "ZAP_GPUDIRECT_HANDSHAKE_MS",
				    .msg_len = boot_len,
				    .on_msg = boot_msg,
				    .on_ready = boot_ready,
				    .on_fail = boot_fail,
				    .on_drop = boot_drop,
				    .user = g };
	rc = zconn_acc_new(&ac, &g->acc);
	if (rc) {
		free(g);
		return rc;
	}
	*out = g;
	return 0;
}

void gd_hs_free(struct gd_hs *g)
{
	if (!g)
		return;
	zconn_acc_free(g->acc);
	free(g);
}

int gd_hs_serve(struct gd_hs *g, int lfd, int wake)
{
	return zconn_acc_serve(g->acc, lfd, wake);
}
