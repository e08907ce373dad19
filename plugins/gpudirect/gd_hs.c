/* SPDX-License-Identifier: MIT */
/*
 * The accepting side of the gpudirect bootstrap: concurrent handshakes
 * with deadlines, a cap in flight, the identity rule, and the pinned
 * memory plan (see gd_hs.h).
 *
 * Shared state: none. One thread (the accept thread, or a test) makes
 * every call on an instance; the callbacks run on it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gd_hs.h"
#include "gd_tls.h"
#include "zap-addr.h"

enum hs_phase {
	HS_FREE = 0,
	HS_TLS,  /* the TLS handshake (cfg.tls) */
	HS_HDR,  /* reading the peer's header */
	HS_BODY, /* reading its body */
	HS_OUT,  /* pair built: writing ours and the confirmation */
	HS_OK,   /* reading the peer's confirmation */
};

struct hs {
	enum hs_phase ph;
	int fd;
	uint64_t born, deadline;
	size_t got, need, outlen, sent;
	void *pair;
	struct ztls_conn *tc; /* TLS over fd, or NULL */
	short ev;             /* what the next step waits for */
	uint8_t in[GD_BOOT_MAX];
	uint8_t out[GD_BOOT_MAX + 1];
	char src[ZAP_PEER_MAX];
};

struct gd_hs {
	struct gd_hs_cfg cfg;
	struct hs *v;
	struct gd_hs_stats st;
};

/* ---- the identity rule -------------------------------------------------- */

/*
 * The claim is parsed by the one address grammar (zap-addr.h); the source
 * is formatted by the same code, so both sides of the comparison are
 * spelled alike. A claimed name is refused: it would have to be resolved,
 * and would prove no more than the source address does.
 */
int gd_hs_identity(const char *claim, const struct sockaddr *src, unsigned srclen,
		   char *key, size_t kl, char *why, size_t wl)
{
	struct zaddr c, from;
	char sa[ZAP_PEER_MAX];
	uint8_t a[16], b[16];
	int fam;

	if (zaddr_format(src, (socklen_t)srclen, 0, sa, sizeof(sa)) ||
	    zaddr_parse(sa, &from)) {
		snprintf(why, wl, "unusable source address");
		return -EINVAL;
	}
	if (zaddr_parse(claim, &c) || !c.port_num) {
		snprintf(why, wl, "malformed listen address \"%s\" claimed from %s",
			 claim, from.host);
		return -EINVAL;
	}
	fam = from.kind == ZADDR_IPV6 ? AF_INET6 : AF_INET;
	if (!c.wildcard &&
	    (c.kind == ZADDR_NAME || inet_pton(fam, from.host, a) != 1 ||
	     inet_pton(fam, c.host, b) != 1 || memcmp(a, b, fam == AF_INET ? 4 : 16))) {
		snprintf(why, wl,
			 "claims to listen on %s but connects from %s: a peer's address is "
			 "its connection's source (give it a listen address on %s, or a "
			 "wildcard)",
			 claim, from.host, from.host);
		return -EPERM;
	}
	if (zaddr_join(&from, c.port, key, kl)) {
		snprintf(why, wl, "source address %s too long", from.host);
		return -EINVAL;
	}
	return 0;
}

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

/* ---- handshakes --------------------------------------------------------- */

int gd_hs_new(const struct gd_hs_cfg *cfg, struct gd_hs **out)
{
	struct gd_hs *g;

	if (!cfg->max_inflight || !cfg->on_boot || !cfg->on_ready || !cfg->on_fail)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cfg = *cfg;
	g->v = calloc(cfg->max_inflight, sizeof(*g->v));
	if (!g->v) {
		free(g);
		return -ENOMEM;
	}
	*out = g;
	return 0;
}

static void hs_end(struct gd_hs *g, struct hs *h, const char *why)
{
	if (h->pair)
		g->cfg.on_fail(g->cfg.user, h->pair);
	if (why && g->cfg.on_drop)
		g->cfg.on_drop(g->cfg.user, h->src, why);
	ztls_conn_free(h->tc);
	close(h->fd);
	h->tc = NULL;
	h->pair = NULL;
	h->ph = HS_FREE;
	g->st.inflight--;
}

void gd_hs_free(struct gd_hs *g)
{
	if (!g)
		return;
	for (unsigned i = 0; i < g->cfg.max_inflight; i++)
		if (g->v[i].ph != HS_FREE)
			hs_end(g, &g->v[i], NULL);
	free(g->v);
	free(g);
}

/* A free slot, or the oldest handshake that has not delivered a whole
 * bootstrap message (it holds nothing but its socket), evicted. */
static struct hs *hs_slot(struct gd_hs *g, bool evict)
{
	struct hs *old = NULL;

	for (unsigned i = 0; i < g->cfg.max_inflight; i++) {
		struct hs *h = &g->v[i];

		if (h->ph == HS_FREE)
			return h;
		if (h->ph <= HS_BODY && (!old || h->born < old->born))
			old = h;
	}
	if (old && evict) {
		g->st.evicted++;
		hs_end(g, old,
		       "dropped unfinished to make room for a new connection "
		       "(ZAP_GPUDIRECT_HANDSHAKES handshakes in flight)");
	}
	return old;
}

bool gd_hs_room(const struct gd_hs *g)
{
	return hs_slot((struct gd_hs *)g, false) != NULL;
}

int gd_hs_add(struct gd_hs *g, int fd, uint64_t now)
{
	struct hs *h = hs_slot(g, true);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	struct ztls_conn *tc = NULL;
	char why[256];

	if (!h)
		return -EAGAIN;
	if (g->cfg.tls &&
	    ztls_conn_new(g->cfg.tls, fd, true, NULL, &tc, why, sizeof(why)))
		return -ENOMEM; /* no want_fp: only allocation fails */
	*h = (struct hs){ .ph = tc ? HS_TLS : HS_HDR,
			  .fd = fd,
			  .tc = tc,
			  .ev = POLLIN,
			  .born = now,
			  .deadline = now + g->cfg.timeout_ns,
			  .need = GD_BOOT_HDR };
	/* The source, for logs: host and port as the address grammar spells it. */
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) ||
	    zaddr_format((struct sockaddr *)&ss, sl, -1, h->src, sizeof(h->src)))
		snprintf(h->src, sizeof(h->src), "?");
	g->st.inflight++;
	return 0;
}

unsigned gd_hs_pollfds(const struct gd_hs *g, struct pollfd *pfd, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < g->cfg.max_inflight && n < max; i++) {
		const struct hs *h = &g->v[i];

		if (h->ph == HS_FREE)
			continue;
		pfd[n++] = (struct pollfd){ .fd = h->fd, .events = h->ev };
	}
	return n;
}

int gd_hs_timeout_ms(const struct gd_hs *g, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (unsigned i = 0; i < g->cfg.max_inflight; i++)
		if (g->v[i].ph != HS_FREE && g->v[i].deadline < next)
			next = g->v[i].deadline;
	if (next == UINT64_MAX)
		return -1;
	if (next <= now)
		return 0;
	return (int)((next - now + 999999) / 1000000);
}

/* The peer's message is in: check it and who sent it, build the pair. */
static int hs_booted(struct gd_hs *g, struct hs *h, char *why, size_t wl)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char key[ZAP_PEER_MAX];
	struct gd_boot peer;
	int rc;

	rc = gd_boot_decode(h->in, h->need, &peer, why, wl);
	if (rc)
		return rc;
	if (getpeername(h->fd, (struct sockaddr *)&ss, &sl)) {
		snprintf(why, wl, "getpeername: %s", strerror(errno));
		return -errno;
	}
	rc = gd_hs_identity(peer.listen, (struct sockaddr *)&ss, sl, key, sizeof(key),
			    why, wl);
	if (rc)
		return rc;
	/* With TLS the peer is its key as much as its address (gd_tls.h). */
	if (h->tc && gd_peer_join(key, ztls_conn_peer_fp(h->tc), key, sizeof(key))) {
		snprintf(why, wl, "address %s too long to carry a key", key);
		return -EINVAL;
	}
	if (peer.instance == g->cfg.instance) {
		snprintf(why, wl, "claims to be this endpoint (its own instance id)");
		return -EPERM;
	}
	rc = g->cfg.on_boot(g->cfg.user, &peer, key, &h->pair, h->out, sizeof(h->out),
			    why, wl);
	if (rc < 0)
		return rc;
	h->outlen = (size_t)rc;
	h->sent = 0;
	h->ph = HS_OUT;
	h->ev = POLLOUT;
	return 0;
}

/* Read what the current phase needs: 1 when complete, 0 for more later,
 * negative on error or end of file (@why). */
static int hs_read(struct hs *h, char *why, size_t wl)
{
	while (h->got < h->need) {
		ssize_t k = gd_io_recv(h->fd, h->tc, h->in + h->got, h->need - h->got,
				       &h->ev, why, wl);

		if (k > 0) {
			h->got += (size_t)k;
			continue;
		}
		if (k == -EAGAIN)
			return 0;
		if (!k) {
			snprintf(why, wl, "closed during the handshake (%zu bytes in)",
				 h->got);
			return -ECONNRESET;
		}
		return (int)k;
	}
	return 1;
}

/* Write ours and the confirmation: 1 when all written, 0 for later,
 * negative on error (@why). */
static int hs_write(struct hs *h, char *why, size_t wl)
{
	while (h->sent < h->outlen) {
		ssize_t k = gd_io_send(h->fd, h->tc, h->out + h->sent,
				       h->outlen - h->sent, &h->ev, why, wl);

		if (k > 0) {
			h->sent += (size_t)k;
			continue;
		}
		if (k == -EAGAIN)
			return 0;
		return k ? (int)k : -EIO;
	}
	return 1;
}

static void hs_run(struct gd_hs *g, struct hs *h)
{
	char why[256] = "";
	size_t body;
	int rc;

	for (;;) {
		switch (h->ph) {
		case HS_HDR:
		case HS_BODY:
			rc = hs_read(h, why, sizeof(why));
			if (rc <= 0)
				goto out;
			if (h->ph == HS_HDR) {
				rc = gd_boot_header(h->in, &body, why, sizeof(why));
				if (rc)
					goto refused;
				h->ph = HS_BODY;
				h->need = GD_BOOT_HDR + body;
				continue;
			}
			rc = hs_booted(g, h, why, sizeof(why));
			if (rc)
				goto refused;
			continue;
		case HS_TLS:
			rc = ztls_handshake(h->tc, &h->ev, why, sizeof(why));
			if (!rc)
				return;
			if (rc < 0)
				goto refused;
			h->ph = HS_HDR;
			h->ev = POLLIN;
			continue;
		case HS_OUT:
			rc = hs_write(h, why, sizeof(why));
			if (rc <= 0)
				goto out;
			h->ph = HS_OK;
			h->ev = POLLIN;
			h->got = 0;
			h->need = 1;
			continue;
		case HS_OK:
			rc = hs_read(h, why, sizeof(why));
			if (rc <= 0) {
				if (rc)
					snprintf(why, sizeof(why),
						 "peer gave up before the pair was ready");
				goto out;
			}
			g->cfg.on_ready(g->cfg.user, h->pair);
			h->pair = NULL;
			g->st.ready++;
			hs_end(g, h, NULL);
			return;
		case HS_FREE:
			return;
		}
	}
refused:
	g->st.refused++;
	hs_end(g, h, why);
	return;
out:
	if (rc < 0)
		hs_end(g, h, why);
}

static const char *hs_late(enum hs_phase ph)
{
	if (ph == HS_TLS)
		return "no TLS handshake before the deadline (ZAP_GPUDIRECT_HANDSHAKE_MS)";
	if (ph <= HS_BODY)
		return "no bootstrap message before the deadline "
		       "(ZAP_GPUDIRECT_HANDSHAKE_MS)";
	return "peer did not confirm before the deadline (ZAP_GPUDIRECT_HANDSHAKE_MS)";
}

void gd_hs_step(struct gd_hs *g, uint64_t now)
{
	for (unsigned i = 0; i < g->cfg.max_inflight; i++) {
		struct hs *h = &g->v[i];

		if (h->ph == HS_FREE)
			continue;
		hs_run(g, h);
		if (h->ph != HS_FREE && now >= h->deadline) {
			g->st.timed_out++;
			hs_end(g, h, hs_late(h->ph));
		}
	}
}

void gd_hs_get_stats(const struct gd_hs *g, struct gd_hs_stats *st)
{
	*st = g->st;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int gd_hs_serve(struct gd_hs *g, int lfd, int wake)
{
	unsigned max = g->cfg.max_inflight + 2;
	struct pollfd *pf = calloc(max, sizeof(*pf));

	if (!pf)
		return -ENOMEM;
	for (;;) {
		uint64_t now = mono_ns();
		unsigned n;

		pf[0] = (struct pollfd){ .fd = wake, .events = POLLIN };
		/* With no room, new connections wait in the listen backlog. */
		pf[1] = (struct pollfd){ .fd = lfd,
					 .events = gd_hs_room(g) ? POLLIN : 0 };
		n = 2 + gd_hs_pollfds(g, pf + 2, max - 2);
		if (poll(pf, n, gd_hs_timeout_ms(g, now)) < 0 && errno != EINTR) {
			int rc = -errno;

			free(pf);
			return rc;
		}
		if (pf[0].revents)
			break;
		now = mono_ns();
		while ((pf[1].revents & POLLIN) && gd_hs_room(g)) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

			if (fd < 0)
				break;
			if (gd_hs_add(g, fd, now))
				close(fd);
		}
		gd_hs_step(g, now);
	}
	free(pf);
	return 0;
}
