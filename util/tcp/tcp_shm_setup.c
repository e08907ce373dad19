/* SPDX-License-Identifier: MIT */
/*
 * The same-host upgrade (WIRE.md, "Same host"): two endpoints whose
 * connection (TCP or Unix socket) turns out to join processes of one host
 * that may share memory move its messages onto a pair of shared-memory
 * rings (util/shm/shm_ring.h), one per direction. The connection stays:
 * it carries everything before the switch, its end is the peer's end, and
 * if anything here fails the messages simply keep using it.
 *
 * Setting up, the dialer D and the acceptor A, after the HELLOs:
 *  - Every wire listens on an abstract SOCK_SEQPACKET socket named after
 *    its instance id, "@zap-shm-<id hex>". Abstract names belong to the
 *    network namespace, so only a process of this host (and namespace)
 *    reaches it, and the listener's credentials say who it is.
 *  - D connects to the name of the id in A's HELLO and checks the
 *    listener's SO_PEERCRED against the policy (ZAP_SHM); A checks D's.
 *    Whoever holds that name need not be A (issue #35: the id is in every
 *    HELLO, and the name is free where A does not listen), so each side
 *    proves it holds its end of this connection: an HMAC keyed with the
 *    connection nonce (it only ever travelled over the connection; under
 *    TLS with the session's exporter too) over both challenges and the
 *    connection's ends as both see them (a relay's two connections
 *    differ). A challenges (ZSH2), D proves (ZSQ2), A finds the
 *    connection by the proof and proves back with its sealed memfd (ZSA2),
 *    D checks that, maps it and sends its own (ZSR2), A maps it, installs
 *    the pair and confirms (ZSC2), and D installs. No ring crosses before
 *    the other side's proof. The side channel then stays open, for
 *    wake-ups (one byte, sent with MSG_DONTWAIT: the peer's socket buffer
 *    is never ours to block on) and as a second signal of the peer's end.
 *  - Each direction switches on its own: the side that may send into its
 *    ring (A once it installed, D once it read the confirmation) writes a
 *    TCP_T_SHM frame on the connection and then puts every frame into the
 *    ring. The receiver reads the ring only after that frame, so the
 *    messages before it (on the connection) come first: order holds.
 *
 * The peer is hostile: the ring engine checks everything it reads from
 * the region; a memfd that could shrink under us (SIGBUS) is refused;
 * descriptors arrive with MSG_CMSG_CLOEXEC and any we did not ask for are
 * closed; at most TCP_SHM_MAX connections of a wire hold rings (memory:
 * two 2 MiB rings each) and TCP_SHM_PENDING side channels wait to be set
 * up, each with the handshake's deadline.
 *
 * Shared state: see "Shared memory" in tcp_int.h; w->shm_pend belongs to
 * the accept thread.
 */
#include "tcp_int.h"
#include "tcp_shm.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

_Static_assert(sizeof(struct tcp_shm_msg) == TCP_SHM_MSG, "the datagram's layout");

/* A side channel accepted, being set up (accept thread). */
struct tcp_shm_pend {
	struct tcp_shm_pend *next;
	int fd;
	uint64_t deadline_ms;
	int stage;              /* 0: challenged, waiting for the request;
				  * 1: answered, waiting for the dialer's ring */
	unsigned char chal[32]; /* our challenge */
	unsigned char cd[32];   /* the dialer's */
	struct tcp_conn *conn;  /* 1: the connection proven (checked again,
				  * with its nonce, under mu before use) */
	uint64_t nonce, rid;
	unsigned char bind[TW_SHM_BIND_MAX], key[TW_SHM_KEY_MAX];
	unsigned char bind_len, key_len;
	void *tx_map; /* 1: our ring, announced */
	unsigned ver; /* 1: the connection's wire version, its region's layout */
	struct zshm_tx tx, xtx;
};

/* ---- policy ------------------------------------------------------------- */

/* Whether the process behind @fd may share memory with us. */
static bool peer_allowed(const struct tcp_wire *w, int fd, char *why, size_t whylen)
{
	struct ucred cr;
	char who[72];

	if (!tw_peer_cred(fd, &cr, who, sizeof(who))) {
		snprintf(why, whylen, "no peer credentials: %s", strerror(errno));
		return false;
	}
	if (cr.uid == geteuid() || (w->shm_policy == TW_SHM_GROUP && cr.gid == getegid()))
		return true;
	snprintf(why, whylen, "its process (%s) is not ours to share memory with (%s=%s)",
		 who, TCP_SHM_ENV, w->shm_policy == TW_SHM_GROUP ? "group" : "user");
	return false;
}

static socklen_t side_name(uint64_t id, struct sockaddr_un *sun)
{
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	/* Abstract: sun_path[0] is NUL; the name is not NUL-terminated. */
	int k = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1,
			 "zap-shm-%016" PRIx64, id);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)k);
}

int tw_shm_open(struct tcp_wire *w)
{
	/* Through libzap's registry: user (0), group (1) or off (2). */
	uint64_t policy;
	int rc = w->host->config_u64(TCP_SHM_ENV, &policy);
	struct sockaddr_un sun;

	w->shm_lfd = w->shm_linger_fd = -1;
	atomic_init(&w->nshm, 0);
	atomic_init(&w->shm_linger_in, NULL);
	if (rc < 0)
		return rc; /* the registry recorded the reason, naming it */
	w->shm_policy = policy == 1   ? TW_SHM_GROUP
			: policy == 2 ? TW_SHM_OFF
				      : TW_SHM_USER;
	if (w->shm_policy == TW_SHM_OFF)
		return 0;
	/* Without it no ring lingers (shm_end() in tcp_shm.c): it is released at once. */
	w->shm_linger_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	/* The longest backlog the system allows: a stranger that floods the
	 * name with connects (each closed at once: peer_allowed()) must not
	 * fill it and so keep our own peers on TCP (issue #35). */
	if (fd < 0 || bind(fd, (struct sockaddr *)&sun, side_name(w->id, &sun)) < 0 ||
	    listen(fd, SOMAXCONN) < 0) {
		/* Not fatal: this endpoint just never upgrades. */
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "no shared-memory upgrades: side channel: %s",
			     strerror(errno));
		if (fd >= 0)
			close(fd);
		return 0;
	}
	w->shm_lfd = fd;
	return 0;
}

/* ---- regions ------------------------------------------------------------ */

/* A new sealed memfd of @len bytes, mapped at *@map; the fd, or -errno. */
static int region_new(size_t len, void **map)
{
	int fd = memfd_create("zap-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0 || fcntl(fd, F_ADD_SEALS, SHM_SEALS) < 0)
		goto fail;
	*map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (*map == MAP_FAILED)
		goto fail;
	return fd;
fail:;
	int e = errno;
	close(fd);
	return -e;
}

/* Map the peer's region @fd, after checking it cannot change size. */
static int region_map(int fd, size_t len, void **map, char *why, size_t whylen)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "the peer's region is not a memory file");
		return -EPROTO;
	}
	if (seals < 0 || (seals & SHM_SEALS) != SHM_SEALS) {
		snprintf(why, whylen, "the peer's region is not sealed against resizing");
		return -EPROTO;
	}
	if ((uint64_t)st.st_size != len) {
		snprintf(why, whylen, "the peer's region has %jd bytes, not %zu",
			 (intmax_t)st.st_size, len);
		return -EPROTO;
	}
	*map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (*map == MAP_FAILED) {
		snprintf(why, whylen, "mmap: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* A region's bytes on a connection of wire version @ver: the ring, and
 * from version 4 the express ring after it (WIRE.md, "Same host"). */
size_t tw_shm_region_len(unsigned ver)
{
	return zshm_region_bytes(TCP_SHM_LOG2) +
	       (ver >= 4 ? zshm_region_bytes(TCP_SHM_XLOG2) : 0);
}

/* Lay out our new region @map for wire version @ver: its rings' producers. */
static void region_layout(void *map, unsigned ver, struct zshm_tx *tx,
			  struct zshm_tx *xtx)
{
	zshm_tx_init(tx, map, TCP_SHM_LOG2);
	if (ver >= 4)
		zshm_tx_init(xtx, (unsigned char *)map + zshm_region_bytes(TCP_SHM_LOG2),
			     TCP_SHM_XLOG2);
}

/* Attach @s's consumers to the peer's region, laid out for @ver. */
static int region_attach(struct tcp_wire *w, struct tcp_shm *s, unsigned ver)
{
	if (zshm_rx_attach(&s->rx, s->rx_map, TCP_SHM_LOG2, w->max_msg))
		return -EPROTO;
	if (ver < 4)
		return 0;
	/* An express record's message is its fence and at most
	 * TCP_SHM_XMAX bytes (tcp_shm_rx.c checks it against ours). */
	if (zshm_rx_attach(&s->xrx,
			   (unsigned char *)s->rx_map + zshm_region_bytes(TCP_SHM_LOG2),
			   TCP_SHM_XLOG2, TCP_SHM_XMAX + 8))
		return -EPROTO;
	s->x_on = true;
	return 0;
}

/*
 * Our half of a pair on a connection of wire version @ver: the peer's
 * region @pfd mapped as our rx rings, and our tx rings: @given and
 * @given_x (laid out and announced already; the pair owns its mapping
 * once this succeeds), or else a new region, whose memfd *@our_fd is
 * then the caller's to pass on and close. Counts against TCP_SHM_MAX.
 * NULL with @why.
 */
static struct tcp_shm *shm_new(struct tcp_wire *w, int pfd, unsigned ver,
			       const struct zshm_tx *given, const struct zshm_tx *given_x,
			       int *our_fd, char *why, size_t whylen)
{
	struct tcp_shm *s = calloc(1, sizeof(*s));
	size_t len = tw_shm_region_len(ver);

	if (our_fd)
		*our_fd = -1;
	if (!s) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	s->path.ops = &tw_shm_ops;
	pthread_mutex_init(&s->xmu, NULL);
	s->w = w;
	s->sock = -1;
	s->map_len = len;
	if (atomic_fetch_add(&w->nshm, 1) >= TCP_SHM_MAX) {
		atomic_fetch_sub(&w->nshm, 1);
		snprintf(why, whylen, "%u connections already use shared memory",
			 TCP_SHM_MAX);
		free(s);
		return NULL;
	}
	s->count = &w->nshm;
	if (region_map(pfd, len, &s->rx_map, why, whylen)) {
		s->rx_map = NULL;
		goto fail;
	}
	if (region_attach(w, s, ver)) {
		snprintf(why, whylen, "the peer's ring has a bad header");
		goto fail;
	}
	if (given) {
		s->tx = *given;
		if (ver >= 4)
			s->xtx = *given_x;
		s->tx_map = given->base;
		return s;
	}
	*our_fd = region_new(len, &s->tx_map);
	if (*our_fd < 0) {
		snprintf(why, whylen, "memfd: %s", strerror(-*our_fd));
		*our_fd = -1;
		s->tx_map = NULL;
		goto fail;
	}
	region_layout(s->tx_map, ver, &s->tx, &s->xtx);
	return s;
fail:
	tw_shm_free(s);
	return NULL;
}

/* ---- the dialer --------------------------------------------------------- */

/*
 * connect() to the side channel's listener. A full backlog (EAGAIN: a
 * burst of connects, perhaps a stranger's flood, each of which the
 * listener closes at once) is waited out until @deadline_ms, a
 * millisecond at a time: AF_UNIX has no way to poll for room. 0, or -1
 * with errno.
 */
static int side_connect(struct tcp_wire *w, int fd, const struct sockaddr_un *sun,
			socklen_t len, uint64_t deadline_ms)
{
	while (connect(fd, (const struct sockaddr *)sun, len) < 0) {
		if ((errno != EAGAIN && errno != EINTR) || now_ms() >= deadline_ms ||
		    atomic_load(&w->shut))
			return -1;
		poll(NULL, 0, 1);
	}
	return 0;
}

/*
 * tw_shm_dial()'s check where the connection @c is a Unix socket: a Unix
 * path can be taken over (unlink, bind) by a relay that already holds a
 * connection to it, so there the listener of the side channel @fd must
 * also be the process that accepted us. false with @why. A step of its
 * own to keep tw_shm_dial() short.
 */
static bool dial_same_process(const struct tcp_conn *c, int fd, char *why, size_t whylen)
{
	if (c->local) {
		struct ucred a, b;
		char who[72];
		if (!tw_peer_cred(c->fd, &a, who, sizeof(who)) ||
		    !tw_peer_cred(fd, &b, who, sizeof(who)) || a.pid != b.pid) {
			snprintf(why, whylen,
				 "the side channel's listener is not the process that "
				 "accepted the connection");
			return false;
		}
	}
	return true;
}

/*
 * tw_shm_dial()'s proofs over the side channel @fd: the listener's
 * challenge, ours with our proof, then its proof with its ring (*@pfd,
 * the caller's to close), checked before anything is mapped. 0, or -1
 * with @why. A step of its own to keep tw_shm_dial() short.
 */
static int dial_prove(struct tcp_wire *w, struct tcp_conn *c, int fd,
		      uint64_t deadline_ms, struct zap_ctx *ctx, int *pfd, char *why,
		      size_t whylen)
{
	struct tcp_shm_msg m;
	unsigned char cd[32], ca[32], mac[32];

	tw_shm_bind(c);
	if (!c->shm_bind_len || !tw_shm_fresh(cd)) {
		snprintf(why, whylen, "cannot name the connection's ends");
		return -1;
	}
	/* Its challenge, then ours with our proof. */
	int r = tw_shm_msg_wait(w, fd, TCP_SHM_CHAL, &m, NULL, deadline_ms, ctx, why,
				whylen);
	if (r)
		return -1;
	memcpy(ca, m.a, 32);
	if (!tw_shm_proof(TCP_SHM_REQ, c->shm_key, c->shm_key_len, w->id, c->rid, cd, ca,
			  c->shm_bind, c->shm_bind_len, mac)) {
		snprintf(why, whylen, "HMAC failed");
		return -1;
	}
	r = tw_shm_msg_send(fd, TCP_SHM_REQ, cd, mac, -1);
	if (r) {
		snprintf(why, whylen, "side channel: %s", strerror(-r));
		return -1;
	}
	/* Its proof, with its ring: checked before we map anything. */
	r = tw_shm_msg_wait(w, fd, TCP_SHM_ANS, &m, pfd, deadline_ms, ctx, why, whylen);
	if (r)
		return -1;
	if (!tw_shm_proof(TCP_SHM_ANS, c->shm_key, c->shm_key_len, w->id, c->rid, cd, ca,
			  c->shm_bind, c->shm_bind_len, mac) ||
	    CRYPTO_memcmp(mac, m.a, 32)) {
		snprintf(why, whylen,
			 "the side channel's listener does not hold the other end of this "
			 "connection (a process squatting the peer's name, or a relay)");
		return -1;
	}
	return 0;
}

/*
 * Try the upgrade on @c, which we dialed and whose HELLO exchange is done
 * (not yet registered: nothing else sees it). Best effort: on any failure
 * @c stays as it is, and the reason is logged at DEBUG. Waits for the
 * acceptor at most TCP_SHM_HS_MS, and never past the ctx.
 *
 * Whoever holds the name "@zap-shm-<the id the peer's HELLO gave>" may be
 * anybody's process (a squatter, when the real peer is remote, in another
 * namespace or has ZAP_SHM=off), so nothing of ours crosses the side
 * channel before it proved that it holds the other end of @c: our proof
 * goes only to a challenge, and our ring only after its proof.
 */
void tw_shm_dial(struct tcp_wire *w, struct tcp_conn *c, uint64_t deadline_ms,
		 struct zap_ctx *ctx)
{
	struct sockaddr_un sun;
	struct tcp_shm *s = NULL;
	struct tcp_shm_msg m;
	char why[200] = "";
	int fd = -1, txfd = -1, pfd = -1, r;
	bool tried = false;

	if (w->shm_policy == TW_SHM_OFF)
		return;
	if (deadline_ms > now_ms() + TCP_SHM_HS_MS)
		deadline_ms = now_ms() + TCP_SHM_HS_MS;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
	    side_connect(w, fd, &sun, side_name(c->rid, &sun), deadline_ms) < 0) {
		/* The usual case for a peer on another host or namespace. */
		snprintf(why, sizeof(why),
			 "no side channel (%s): another host or namespace, or ZAP_SHM=off there",
			 strerror(errno));
		goto out;
	}
	tried = true; /* from here on a failure is a refused upgrade */
	if (!peer_allowed(w, fd, why, sizeof(why)))
		goto out;
	if (!dial_same_process(c, fd, why, sizeof(why)))
		goto out;
	if (dial_prove(w, c, fd, deadline_ms, ctx, &pfd, why, sizeof(why)))
		goto out;
	s = shm_new(w, pfd, c->ver, NULL, NULL, &txfd, why, sizeof(why));
	if (!s)
		goto out;
	r = tw_shm_msg_send(fd, TCP_SHM_RING, NULL, NULL, txfd);
	if (r) {
		snprintf(why, sizeof(why), "side channel: %s", strerror(-r));
		goto out;
	}
	/* The acceptor installed the pair: our SHM frame finds its rings. */
	r = tw_shm_msg_wait(w, fd, TCP_SHM_DONE, &m, NULL, deadline_ms, ctx, why,
			    sizeof(why));
	if (r)
		goto out;
	s->sock = fd;
	fd = -1;
	s->tx_ready = true; /* the peer mapped our ring before it confirmed */
	/* Version 3: whole messages may come between a large one's parts. */
	s->rx.interleave = c->ver >= 3;
	atomic_store(&c->path, &s->path);
	s = NULL;
	w->host->log(ZAP_LOG_DEBUG, w->dom, "%s: messages go through shared memory",
		     c->src);
	tw_count(&w->st_shm_up, 1);
out:
	if (why[0])
		w->host->log(ZAP_LOG_DEBUG, w->dom, "%s: staying on the connection: %s",
			     c->src, why);
	if (why[0] && tried)
		tw_count(&w->st_shm_refused, 1);
	tw_shm_free(s);
	if (txfd >= 0)
		close(txfd);
	if (pfd >= 0)
		close(pfd);
	if (fd >= 0)
		close(fd);
}

/* ---- the acceptor (the handshake thread) -------------------------------- */

static void pend_drop(struct tcp_wire *w, struct tcp_shm_pend *p, bool close_fd)
{
	for (struct tcp_shm_pend **pp = &w->shm_pend; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	w->nshm_pend--;
	if (close_fd)
		close(p->fd);
	if (p->tx_map) /* announced, never installed: nobody may read it */
		tw_shm_region_drop(p->tx_map, tw_shm_region_len(p->ver), true);
	free(p);
}

void tw_shm_close(struct tcp_wire *w)
{
	while (w->shm_pend)
		pend_drop(w, w->shm_pend, true);
	/* Lingering rings (the accept thread is gone): a peer that finished
	 * with ours gets it released, one still reading keeps it. */
	tw_shm_linger_take(w);
	for (struct tcp_shm *s = w->shm_linger, *n; s; s = n) {
		n = s->linger_next;
		tw_shm_pair_free(s, tw_shm_tx_finished(s));
	}
	w->shm_linger = NULL;
	if (w->shm_linger_fd >= 0)
		close(w->shm_linger_fd);
	w->shm_linger_fd = -1;
	if (w->shm_lfd >= 0)
		close(w->shm_lfd);
	w->shm_lfd = -1;
}

/* The accept thread's poll slots: the lingering rings' eventfd, the
 * side-channel listener (either -1 when absent), the pending side
 * channels. None when this endpoint never shares memory. */
size_t tw_shm_accept_fds(struct tcp_wire *w, struct pollfd *pfd, uint64_t *next_ms)
{
	size_t n = 0;

	if (w->shm_lfd < 0 && w->shm_linger_fd < 0)
		return 0;
	if (w->shm_linger_fd >= 0)
		tw_shm_linger_sweep(w, next_ms);
	pfd[n++] = (struct pollfd){ .fd = w->shm_linger_fd, .events = POLLIN };
	pfd[n++] = (struct pollfd){ .fd = w->shm_lfd, .events = POLLIN };
	for (struct tcp_shm_pend *p = w->shm_pend; p; p = p->next) {
		if (p->deadline_ms < *next_ms)
			*next_ms = p->deadline_ms;
		pfd[n++] = (struct pollfd){ .fd = p->fd, .events = POLLIN };
	}
	return n;
}

/* Whether accepted @c may take rings (mu held). */
static bool conn_open_for_rings(struct tcp_conn *c)
{
	return !c->dialed && !c->dead && !c->rx_eof && !c->retiring && !tw_shm_of(c) &&
	       c->shm_bind_len;
}

/* A candidate for a request's proof, copied under mu. */
struct shm_cand {
	struct tcp_conn *c;
	uint64_t nonce, rid;
	unsigned char bind[TW_SHM_BIND_MAX], key[TW_SHM_KEY_MAX];
	unsigned char bind_len, key_len;
	unsigned ver; /* its wire version: our region's layout */
};

/*
 * The request on @p: which connection of ours its proof is for. The
 * proof names none (it would reveal what it proves), so every accepted
 * connection without rings is tried: HMACs outside mu, on copies. NULL
 * when none; else the connection, *@nonce, *@rid.
 */
static struct tcp_conn *conn_by_proof(struct tcp_wire *w, struct tcp_shm_pend *p,
				      const unsigned char *cd, const unsigned char *mac,
				      uint64_t *nonce, uint64_t *rid)
{
	struct shm_cand *cand = NULL;
	size_t n = 0, cap = 0;
	struct tcp_conn *hit = NULL;

	tw_lock(w);
	for (struct tcp_conn *c = w->conns; c; c = c->next)
		if (conn_open_for_rings(c))
			cap++;
	cand = cap ? calloc(cap, sizeof(*cand)) : NULL;
	for (struct tcp_conn *c = w->conns; cand && c && n < cap; c = c->next)
		if (conn_open_for_rings(c)) {
			cand[n] = (struct shm_cand){ .c = c,
						     .nonce = c->nonce,
						     .rid = c->rid,
						     .ver = c->ver,
						     .bind_len = c->shm_bind_len,
						     .key_len = c->shm_key_len };
			memcpy(cand[n].bind, c->shm_bind, c->shm_bind_len);
			memcpy(cand[n].key, c->shm_key, c->shm_key_len);
			n++;
		}
	tw_unlock(w);
	for (size_t i = 0; i < n && !hit; i++) {
		unsigned char want[32];
		if (tw_shm_proof(TCP_SHM_REQ, cand[i].key, cand[i].key_len, cand[i].rid,
				 w->id, cd, p->chal, cand[i].bind, cand[i].bind_len,
				 want) &&
		    !CRYPTO_memcmp(want, mac, 32)) {
			hit = cand[i].c;
			*nonce = cand[i].nonce;
			*rid = cand[i].rid;
			p->ver = cand[i].ver;
			p->bind_len = cand[i].bind_len;
			memcpy(p->bind, cand[i].bind, cand[i].bind_len);
			p->key_len = cand[i].key_len;
			memcpy(p->key, cand[i].key, cand[i].key_len);
		}
	}
	free(cand);
	return hit;
}

/* Whether @c is still a connection of ours, the one with @nonce, and may
 * take rings (mu held): it may have ended since the proof. */
static bool conn_still(struct tcp_wire *w, struct tcp_conn *c, uint64_t nonce)
{
	for (struct tcp_conn *x = w->conns; x; x = x->next)
		if (x == c)
			return c->nonce == nonce && conn_open_for_rings(c);
	return false;
}

/* The dialer's challenge and proof on @p: find the connection, answer
 * with our proof and our ring. 0, or -errno with @why. */
static int pend_request(struct tcp_wire *w, struct tcp_shm_pend *p, char *why,
			size_t whylen)
{
	struct tcp_shm_msg m;
	unsigned char mac[32];
	int r = tw_shm_msg_recv(p->fd, TCP_SHM_REQ, &m, NULL, why, whylen);
	if (r)
		return r;
	memcpy(p->cd, m.a, 32);
	p->conn = conn_by_proof(w, p, m.a, m.b, &p->nonce, &p->rid);
	if (!p->conn) {
		snprintf(why, whylen,
			 "its proof is for no connection of ours (a stranger, or a relay)");
		return -EACCES;
	}
	if (atomic_load(&w->nshm) >= TCP_SHM_MAX) {
		snprintf(why, whylen, "%u connections already use shared memory",
			 TCP_SHM_MAX);
		return -ENOSPC;
	}
	if (!tw_shm_proof(TCP_SHM_ANS, p->key, p->key_len, p->rid, w->id, p->cd, p->chal,
			  p->bind, p->bind_len, mac)) {
		snprintf(why, whylen, "HMAC failed");
		return -EIO;
	}
	int txfd = region_new(tw_shm_region_len(p->ver), &p->tx_map);
	if (txfd < 0) {
		p->tx_map = NULL;
		snprintf(why, whylen, "memfd: %s", strerror(-txfd));
		return txfd;
	}
	/* Laid out before the peer can see it. */
	region_layout(p->tx_map, p->ver, &p->tx, &p->xtx);
	r = tw_shm_msg_send(p->fd, TCP_SHM_ANS, mac, NULL, txfd);
	close(txfd); /* the mapping stays */
	if (r) {
		snprintf(why, whylen, "side channel: %s", strerror(-r));
		return r;
	}
	p->stage = 1;
	return 0;
}

/* The dialer's ring on @p (its proof checked): map it, install the pair
 * on the connection, confirm. 0, or -errno with @why. */
static int pend_ring(struct tcp_wire *w, struct tcp_shm_pend *p, char *why, size_t whylen)
{
	struct tcp_shm_msg m;
	int pfd = -1;

	int r = tw_shm_msg_recv(p->fd, TCP_SHM_RING, &m, &pfd, why, whylen);
	if (r)
		return r;
	/* Everything that can fail before the connection is touched, so
	 * that installing is a pointer store under mu. */
	struct tcp_shm *s = shm_new(w, pfd, p->ver, &p->tx, &p->xtx, NULL, why, whylen);
	close(pfd);
	if (!s)
		return -EPROTO;
	p->tx_map = NULL; /* the pair's now */
	s->sock = p->fd;
	/* The dialer mapped our ring before it sent its own, and switches
	 * when it reads our confirmation: our direction may switch now. */
	s->tx_ready = true;
	tw_lock(w);
	struct tcp_conn *c = p->conn;
	bool ok = conn_still(w, c, p->nonce);
	if (ok) {
		/* Version 3: whole messages may come between a large one's parts. */
		s->rx.interleave = c->ver >= 3;
		atomic_store(&c->path, &s->path);
		/* Its ring and side channel are read every round: the
		 * leader must poll it itself from now on. */
		tw_conn_heat(w, c);
		tw_count(&w->st_shm_up, 1);
		tw_event(w, ZAP_EVENT_UPGRADED, 0, c, NULL, NULL);
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "%s: messages go through shared memory", c->raddr);
		/* Before the leader may read the side channel: the
		 * dialer's SHM frame follows it, and finds the rings. */
		r = tw_shm_msg_send(p->fd, TCP_SHM_DONE, NULL, NULL, -1);
		if (w->leader)
			tw_kick(w);
	}
	tw_unlock(w);
	if (!ok) {
		s->sock = -1;
		tw_shm_free(s);
		snprintf(why, whylen, "the connection ended meanwhile");
		return -ENOTCONN;
	}
	if (r) /* the dialer stays on the connection; the side channel's end
		* tells our leader it is gone */
		w->host->log(ZAP_LOG_DEBUG, w->dom, "cannot confirm on the side channel");
	return 1; /* the descriptor is the connection's now */
}

/* Input on @p: the step its stage waits for. Logs a refusal. */
static void pend_input(struct tcp_wire *w, struct tcp_shm_pend *p)
{
	char why[200] = "";
	int r = p->stage ? pend_ring(w, p, why, sizeof(why))
			 : pend_request(w, p, why, sizeof(why));

	if (r == -EAGAIN || r == 0)
		return;
	if (r == 1) {
		pend_drop(w, p, false);
		return;
	}
	w->host->log(ZAP_LOG_DEBUG, w->dom, "refusing a shared-memory request: %s",
		     why[0] ? why : strerror(-r));
	tw_count(&w->st_shm_refused, 1);
	pend_drop(w, p, true);
}

void tw_shm_accept_ready(struct tcp_wire *w, const struct pollfd *pfd, size_t n)
{
	uint64_t now = now_ms();
	size_t i = 2;

	if (!n)
		return;
	/* The pending side channels, in the order they were polled; a
	 * request handled or refused removes its entry. (Slot 0, the
	 * lingering rings, is looked at before the next poll.) */
	for (struct tcp_shm_pend *p = w->shm_pend, *next; p && i < n; p = next, i++) {
		next = p->next;
		if (pfd[i].revents)
			pend_input(w, p);
		else if (p->deadline_ms <= now)
			pend_drop(w, p, true);
	}
	if (!pfd[1].revents)
		return;
	/* A batch a round: a flood of connects (a stranger's, each refused
	 * below) must leave the accept thread to its other work, the TCP
	 * listener and the handshakes. */
	for (unsigned k = 0; k < TCP_SHM_ACCEPT_BATCH; k++) {
		int fd = accept4(w->shm_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		char why[200];
		if (fd < 0)
			return;
		if (!peer_allowed(w, fd, why, sizeof(why))) {
			w->host->log(ZAP_LOG_DEBUG, w->dom,
				     "refusing a shared-memory request: %s", why);
			tw_count(&w->st_shm_refused, 1);
			close(fd);
			continue;
		}
		if (w->nshm_pend >= TCP_SHM_PENDING) {
			struct tcp_shm_pend *old = w->shm_pend;
			while (old->next)
				old = old->next;
			pend_drop(w, old, true);
		}
		struct tcp_shm_pend *p = calloc(1, sizeof(*p));
		/* Our challenge first: the dialer's proof covers it, so a
		 * proof seen once (by a squatter of our name, say) is
		 * worth nothing here later. */
		if (!p || !tw_shm_fresh(p->chal) ||
		    tw_shm_msg_send(fd, TCP_SHM_CHAL, p->chal, NULL, -1)) {
			free(p);
			close(fd);
			continue;
		}
		p->fd = fd;
		p->deadline_ms = now + w->hs_timeout_ms;
		p->next = w->shm_pend;
		w->shm_pend = p;
		w->nshm_pend++;
	}
}
