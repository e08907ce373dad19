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
	struct zshm_tx tx;
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
	/* Without it no ring lingers (tw_shm_end()): it is released at once. */
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

/*
 * Unmap a ring of ours; with @release, hand its memory back to the system
 * first (MADV_REMOVE punches the whole region out of the memfd). A peer
 * holds the memfd, and may keep it after it hung up: released, the region
 * costs us nothing however long it does (issue #35, hoarded rings); its
 * mapping then reads zeros, which a reader takes for a broken ring.
 */
static void region_drop(void *map, size_t len, bool release)
{
	if (release)
		(void)madvise(map, len, MADV_REMOVE);
	munmap(map, len);
}

/* Our ring of @s, released, and the rest of the pair freed. */
static void pair_free(struct tcp_shm *s, bool release)
{
	if (s->tx_map)
		region_drop(s->tx_map, s->map_len, release);
	if (s->rx_map) {
		if (s->rx.ctl) /* attached: the peer's sends fail from now on */
			zshm_rx_close(&s->rx);
		munmap(s->rx_map, s->map_len);
	}
	if (s->sock >= 0)
		close(s->sock);
	if (s->count)
		atomic_fetch_sub(s->count, 1);
	free(s);
}

/* A pair that never carried a message (set-up failed, or was refused):
 * nobody may read our ring, so its memory goes at once. */
void tw_shm_free(struct tcp_shm *s)
{
	if (s)
		pair_free(s, true);
}

/*
 * Whether the peer reads no more of our ring: it said so (it marks its rx
 * ring closed before it lets go of it), or its side channel ended (it
 * closed its end of the pair, or died). Not that it read everything: a
 * peer still attached keeps looking at the positions, and a released
 * region reads as a broken ring. A peer that lies only gets its own ring
 * released early.
 */
static bool tx_finished(const struct tcp_shm *s)
{
	if (!s->tx_map || zshm_tx_peer_closed(&s->tx))
		return true;
	struct pollfd p = { .fd = s->sock, .events = POLLIN };
	return s->sock < 0 || (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)));
}

/*
 * The connection of pair @s ended (tw_conn_free()). We stop reading the
 * peer's ring. Ours may still hold messages a live peer reads after our
 * end, as a socket's buffer is still delivered after close(): then it
 * lingers, for the accept thread to release once the peer finished, or
 * after ZAP_TCP_STALL_MS at most (it keeps its place among TCP_SHM_MAX
 * meanwhile, so lingering rings are bounded too). At shutdown nobody is
 * left to watch it: it is left to the peer's mapping as it is.
 */
void tw_shm_end(struct tcp_shm *s)
{
	if (!s)
		return;
	if (s->rx_map) {
		if (s->rx.ctl)
			zshm_rx_close(&s->rx);
		munmap(s->rx_map, s->map_len);
		s->rx_map = NULL;
	}
	struct tcp_wire *w = s->w;
	bool done = tx_finished(s);
	if (done || atomic_load(&w->shut) || w->shm_linger_fd < 0) {
		pair_free(s, done);
		return;
	}
	s->linger_until = now_ms() + w->stall_ms;
	s->linger_next = atomic_load(&w->shm_linger_in);
	while (!atomic_compare_exchange_weak(&w->shm_linger_in, &s->linger_next, s))
		;
	uint64_t one = 1;
	ssize_t k = write(w->shm_linger_fd, &one, sizeof(one));
	(void)k;
}

/*
 * The accept thread's look at the lingering rings: new ones taken from
 * the inbox, finished or expired ones released. When some linger, the
 * next look is due in TCP_SHM_LINGER_TICK_MS (*@next_ms).
 */
static void linger_sweep(struct tcp_wire *w, uint64_t *next_ms)
{
	uint64_t drained, now = now_ms();
	ssize_t k = read(w->shm_linger_fd, &drained, sizeof(drained));
	(void)k;
	for (struct tcp_shm *s = atomic_exchange(&w->shm_linger_in, NULL), *n; s; s = n) {
		n = s->linger_next;
		s->linger_next = w->shm_linger;
		w->shm_linger = s;
	}
	for (struct tcp_shm **pp = &w->shm_linger, *s; (s = *pp);) {
		bool done = tx_finished(s);
		if (!done && s->linger_until > now) {
			pp = &s->linger_next;
			continue;
		}
		if (!done)
			w->host->log(ZAP_LOG_DEBUG, w->dom,
				     "a peer left our ring unread for %u ms after its "
				     "connection ended: released",
				     w->stall_ms);
		*pp = s->linger_next;
		pair_free(s, true);
	}
	if (w->shm_linger && *next_ms > now + TCP_SHM_LINGER_TICK_MS)
		*next_ms = now + TCP_SHM_LINGER_TICK_MS;
}

/*
 * Our half of a pair: the peer's region @pfd mapped as our rx ring, and
 * our tx ring: @given (laid out and announced already; the pair owns its
 * mapping once this succeeds), or else a new one, whose memfd *@our_fd is
 * then the caller's to pass on and close. Counts against TCP_SHM_MAX.
 * NULL with @why.
 */
static struct tcp_shm *shm_new(struct tcp_wire *w, int pfd, const struct zshm_tx *given,
			       int *our_fd, char *why, size_t whylen)
{
	struct tcp_shm *s = calloc(1, sizeof(*s));
	size_t len = zshm_region_bytes(TCP_SHM_LOG2);

	if (our_fd)
		*our_fd = -1;
	if (!s) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
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
	if (zshm_rx_attach(&s->rx, s->rx_map, TCP_SHM_LOG2, w->max_msg)) {
		snprintf(why, whylen, "the peer's ring has a bad header");
		goto fail;
	}
	if (given) {
		s->tx = *given;
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
	zshm_tx_init(&s->tx, s->tx_map, TCP_SHM_LOG2);
	return s;
fail:
	tw_shm_free(s);
	return NULL;
}

/* ---- proofs ------------------------------------------------------------- */

/* One end of @c's socket, canonical: 16 bytes of IPv6 address (IPv4
 * mapped) and the port, big-endian; or a Unix address's sun_path bytes
 * (none for an unnamed socket). Appends length and bytes at @p. */
static size_t bind_end(const struct sockaddr_storage *ss, socklen_t sl, unsigned char *p)
{
	if (ss->ss_family == AF_INET && sl >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		p[0] = 18;
		memset(p + 1, 0, 10);
		p[11] = p[12] = 0xff;
		memcpy(p + 13, &a->sin_addr, 4);
		memcpy(p + 17, &a->sin_port, 2); /* network order already */
		return 19;
	}
	if (ss->ss_family == AF_INET6 && sl >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		p[0] = 18;
		memcpy(p + 1, &a->sin6_addr, 16);
		memcpy(p + 17, &a->sin6_port, 2);
		return 19;
	}
	size_t n = sl > offsetof(struct sockaddr_un, sun_path)
			   ? sl - offsetof(struct sockaddr_un, sun_path)
			   : 0;
	if (n > 108)
		n = 108;
	p[0] = (unsigned char)n;
	memcpy(p + 1, ((const struct sockaddr_un *)ss)->sun_path, n);
	return 1 + n;
}

static void be64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

/*
 * @c as both of its ends see it: the kind (4: TCP, 1: Unix), the dialer's
 * end, the acceptor's end. A relay in the middle (the splice: X answers
 * D's HELLO with Z's instance id and dials Z with D's nonce) has two
 * connections, whose ends differ, so a proof for one fails on the other.
 * And the proofs' key: the nonce (8 bytes, big-endian), then under TLS
 * 32 bytes of the exporter (TW_SHM_EXPORT_LABEL): 64 bits of nonce are
 * what a plaintext connection has, TLS gives both ends a full secret that
 * no observer of a plaintext nonce (nor a peer of another connection)
 * has. Left empty (no upgrade) when the socket or TLS cannot say. Before
 * @c is shared: the exporter reads its TLS state.
 */
void tw_shm_bind(struct tcp_conn *c)
{
	struct sockaddr_storage me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	unsigned char *p = c->shm_bind;

	c->shm_bind_len = 0;
	c->shm_key_len = 8;
	be64(c->shm_key, c->nonce);
	if (c->tls) {
		if (ztls_conn_export(c->tls, TW_SHM_EXPORT_LABEL, c->shm_key + 8, 32))
			return;
		c->shm_key_len += 32;
	}
	memset(&me, 0, sizeof(me));
	memset(&peer, 0, sizeof(peer));
	if (getsockname(c->fd, (struct sockaddr *)&me, &ml) < 0 ||
	    getpeername(c->fd, (struct sockaddr *)&peer, &pl) < 0)
		return;
	size_t n = 1;
	p[0] = me.ss_family == AF_UNIX ? 1 : 4;
	n += bind_end(c->dialed ? &me : &peer, c->dialed ? ml : pl, p + n);
	n += bind_end(c->dialed ? &peer : &me, c->dialed ? pl : ml, p + n);
	c->shm_bind_len = (unsigned char)n;
}

/*
 * The proof of one side (@magic: TCP_SHM_REQ for the dialer's,
 * TCP_SHM_ANS for the acceptor's, so that neither can be reflected):
 * HMAC-SHA256 keyed with @key (tw_shm_bind(): it travelled only over the
 * connection, or came from its TLS session), over the magic, both
 * instance ids, both challenges (fresh from each side: no replay) and the
 * binding.
 */
static bool shm_proof(uint32_t magic, const unsigned char *key, size_t key_len,
		      uint64_t did, uint64_t aid, const unsigned char *cd,
		      const unsigned char *ca, const unsigned char *bind, size_t bind_len,
		      unsigned char out[32])
{
	unsigned char m[4 + 16 + 64 + TW_SHM_BIND_MAX];
	unsigned int ol = 0;

	m[0] = (unsigned char)(magic >> 24);
	m[1] = (unsigned char)(magic >> 16);
	m[2] = (unsigned char)(magic >> 8);
	m[3] = (unsigned char)magic;
	be64(m + 4, did);
	be64(m + 12, aid);
	memcpy(m + 20, cd, 32);
	memcpy(m + 52, ca, 32);
	memcpy(m + 84, bind, bind_len);
	return HMAC(EVP_sha256(), key, (int)key_len, m, 84 + bind_len, out, &ol) &&
	       ol == 32;
}

static bool fresh(unsigned char out[32])
{
	return getrandom(out, 32, 0) == 32;
}

/* ---- the side channel's messages ---------------------------------------- */

static int side_send(int fd, uint32_t magic, const unsigned char *a,
		     const unsigned char *b, int pass_fd)
{
	struct tcp_shm_msg m = { .magic = magic, .log2 = TCP_SHM_LOG2 };
	struct iovec iov = { &m, sizeof(m) };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (a)
		memcpy(m.a, a, 32);
	if (b)
		memcpy(m.b, b, 32);
	if (pass_fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.b;
		mh.msg_controllen = sizeof(u.b);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	ssize_t k = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	return k == (ssize_t)sizeof(m) ? 0 : k < 0 ? -errno : -EPIPE;
}

/*
 * Read one message of @magic with exactly one descriptor (*@got), or none
 * when @got is NULL (tcp_parse_shm_msg()). Any other descriptor that came
 * is closed. 0, -EAGAIN, or -EPROTO / -errno with @why.
 */
static int side_recv(int fd, uint32_t magic, struct tcp_shm_msg *m, int *got, char *why,
		     size_t whylen)
{
	unsigned char buf[TCP_SHM_MSG + 1];
	struct iovec iov = { buf, sizeof(buf) };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.b,
			     .msg_controllen = sizeof(u.b) };
	int fds[8], nfd = 0;

	if (got)
		*got = -1;
	ssize_t k = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return -EAGAIN;
	if (k < 0) {
		snprintf(why, whylen, "side channel: %s", strerror(errno));
		return -errno;
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n && nfd < 8; i++)
			memcpy(&fds[nfd++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	int rc = 0;
	if (k == 0)
		snprintf(why, whylen, "the peer closed the side channel"), rc = -EPIPE;
	else
		rc = tcp_parse_shm_msg(buf, (size_t)k,
				       (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0,
				       nfd, magic, got ? 1 : 0, m, why, whylen);
	for (int i = 0; i < nfd; i++) {
		if (!rc && got)
			*got = fds[i];
		else
			close(fds[i]);
	}
	return rc;
}

/* ---- the dialer --------------------------------------------------------- */

/* Wait for the next message (side_recv()) until @deadline_ms. */
static int side_wait(struct tcp_wire *w, int fd, uint32_t magic, struct tcp_shm_msg *m,
		     int *got, uint64_t deadline_ms, struct zap_ctx *ctx, char *why,
		     size_t whylen)
{
	for (;;) {
		uint64_t now = now_ms();
		int r = now < deadline_ms
				? tw_wait_fd(w, fd, POLLIN, ctx, (int)(deadline_ms - now))
				: -ETIMEDOUT;
		if (r) {
			snprintf(why, whylen, "no answer on the side channel: %s",
				 strerror(-r));
			return r;
		}
		r = side_recv(fd, magic, m, got, why, whylen);
		if (r != -EAGAIN)
			return r;
	}
}

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
	unsigned char cd[32], ca[32], mac[32];
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
	/* A Unix path can be taken over (unlink, bind) by a relay that
	 * already holds a connection to it: there the listener of the side
	 * channel must also be the process that accepted us. */
	if (c->local) {
		struct ucred a, b;
		char who[72];
		if (!tw_peer_cred(c->fd, &a, who, sizeof(who)) ||
		    !tw_peer_cred(fd, &b, who, sizeof(who)) || a.pid != b.pid) {
			snprintf(why, sizeof(why),
				 "the side channel's listener is not the process that "
				 "accepted the connection");
			goto out;
		}
	}
	tw_shm_bind(c);
	if (!c->shm_bind_len || !fresh(cd)) {
		snprintf(why, sizeof(why), "cannot name the connection's ends");
		goto out;
	}
	/* Its challenge, then ours with our proof. */
	r = side_wait(w, fd, TCP_SHM_CHAL, &m, NULL, deadline_ms, ctx, why, sizeof(why));
	if (r)
		goto out;
	memcpy(ca, m.a, 32);
	if (!shm_proof(TCP_SHM_REQ, c->shm_key, c->shm_key_len, w->id, c->rid, cd, ca,
		       c->shm_bind, c->shm_bind_len, mac)) {
		snprintf(why, sizeof(why), "HMAC failed");
		goto out;
	}
	r = side_send(fd, TCP_SHM_REQ, cd, mac, -1);
	if (r) {
		snprintf(why, sizeof(why), "side channel: %s", strerror(-r));
		goto out;
	}
	/* Its proof, with its ring: checked before we map anything. */
	r = side_wait(w, fd, TCP_SHM_ANS, &m, &pfd, deadline_ms, ctx, why, sizeof(why));
	if (r)
		goto out;
	if (!shm_proof(TCP_SHM_ANS, c->shm_key, c->shm_key_len, w->id, c->rid, cd, ca,
		       c->shm_bind, c->shm_bind_len, mac) ||
	    CRYPTO_memcmp(mac, m.a, 32)) {
		snprintf(why, sizeof(why),
			 "the side channel's listener does not hold the other end of this "
			 "connection (a process squatting the peer's name, or a relay)");
		goto out;
	}
	s = shm_new(w, pfd, NULL, &txfd, why, sizeof(why));
	if (!s)
		goto out;
	r = side_send(fd, TCP_SHM_RING, NULL, NULL, txfd);
	if (r) {
		snprintf(why, sizeof(why), "side channel: %s", strerror(-r));
		goto out;
	}
	/* The acceptor installed the pair: our SHM frame finds its rings. */
	r = side_wait(w, fd, TCP_SHM_DONE, &m, NULL, deadline_ms, ctx, why, sizeof(why));
	if (r)
		goto out;
	s->sock = fd;
	fd = -1;
	s->tx_ready = true; /* the peer mapped our ring before it confirmed */
	/* Version 3: whole messages may come between a large one's parts. */
	s->rx.interleave = c->ver >= 3;
	atomic_store(&c->shm, s);
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
		region_drop(p->tx_map, zshm_region_bytes(TCP_SHM_LOG2), true);
	free(p);
}

void tw_shm_close(struct tcp_wire *w)
{
	while (w->shm_pend)
		pend_drop(w, w->shm_pend, true);
	/* Lingering rings (the accept thread is gone): a peer that finished
	 * with ours gets it released, one still reading keeps it. */
	for (struct tcp_shm *s = atomic_exchange(&w->shm_linger_in, NULL), *n; s; s = n) {
		n = s->linger_next;
		pair_free(s, tx_finished(s));
	}
	for (struct tcp_shm *s = w->shm_linger, *n; s; s = n) {
		n = s->linger_next;
		pair_free(s, tx_finished(s));
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
		linger_sweep(w, next_ms);
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
	return !c->dialed && !c->dead && !c->rx_eof && !c->retiring &&
	       !atomic_load(&c->shm) && c->shm_bind_len;
}

/* A candidate for a request's proof, copied under mu. */
struct shm_cand {
	struct tcp_conn *c;
	uint64_t nonce, rid;
	unsigned char bind[TW_SHM_BIND_MAX], key[TW_SHM_KEY_MAX];
	unsigned char bind_len, key_len;
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
						     .bind_len = c->shm_bind_len,
						     .key_len = c->shm_key_len };
			memcpy(cand[n].bind, c->shm_bind, c->shm_bind_len);
			memcpy(cand[n].key, c->shm_key, c->shm_key_len);
			n++;
		}
	tw_unlock(w);
	for (size_t i = 0; i < n && !hit; i++) {
		unsigned char want[32];
		if (shm_proof(TCP_SHM_REQ, cand[i].key, cand[i].key_len, cand[i].rid,
			      w->id, cd, p->chal, cand[i].bind, cand[i].bind_len, want) &&
		    !CRYPTO_memcmp(want, mac, 32)) {
			hit = cand[i].c;
			*nonce = cand[i].nonce;
			*rid = cand[i].rid;
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
	size_t len = zshm_region_bytes(TCP_SHM_LOG2);

	int r = side_recv(p->fd, TCP_SHM_REQ, &m, NULL, why, whylen);
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
	if (!shm_proof(TCP_SHM_ANS, p->key, p->key_len, p->rid, w->id, p->cd, p->chal,
		       p->bind, p->bind_len, mac)) {
		snprintf(why, whylen, "HMAC failed");
		return -EIO;
	}
	int txfd = region_new(len, &p->tx_map);
	if (txfd < 0) {
		p->tx_map = NULL;
		snprintf(why, whylen, "memfd: %s", strerror(-txfd));
		return txfd;
	}
	/* Laid out before the peer can see it. */
	zshm_tx_init(&p->tx, p->tx_map, TCP_SHM_LOG2);
	r = side_send(p->fd, TCP_SHM_ANS, mac, NULL, txfd);
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

	int r = side_recv(p->fd, TCP_SHM_RING, &m, &pfd, why, whylen);
	if (r)
		return r;
	/* Everything that can fail before the connection is touched, so
	 * that installing is a pointer store under mu. */
	struct tcp_shm *s = shm_new(w, pfd, &p->tx, NULL, why, whylen);
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
		atomic_store(&c->shm, s);
		/* Its ring and side channel are read every round: the
		 * leader must poll it itself from now on. */
		tw_conn_heat(w, c);
		tw_count(&w->st_shm_up, 1);
		tw_event(w, ZAP_EVENT_UPGRADED, 0, c, NULL, NULL);
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "%s: messages go through shared memory", c->raddr);
		/* Before the leader may read the side channel: the
		 * dialer's SHM frame follows it, and finds the rings. */
		r = side_send(p->fd, TCP_SHM_DONE, NULL, NULL, -1);
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
		if (!p || !fresh(p->chal) ||
		    side_send(fd, TCP_SHM_CHAL, p->chal, NULL, -1)) {
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

/* ---- after the set-up --------------------------------------------------- */

/*
 * Read what came on @c's side channel (mu held): wake-ups, or its end.
 * Whether anything a waiter may wait for changed.
 */
bool tw_shm_side(struct tcp_wire *w, struct tcp_conn *c)
{
	TW_HELD(w);
	struct tcp_shm *s = atomic_load(&c->shm);
	bool changed = false;

	if (!s || s->sock < 0 || s->side_gone)
		return false;
	/* Bounded: a peer that floods wake-ups gets them read a batch a
	 * round, like any other input. */
	for (int i = 0; i < 64; i++) {
		char m[16];
		ssize_t k = recv(s->sock, m, sizeof(m), MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			break;
		changed = true; /* room in our ring, perhaps: senders retry */
		if (k <= 0) {
			s->side_gone = true;
			w->host->log(ZAP_LOG_DEBUG, w->dom, "%s: side channel closed",
				     c->raddr);
			break;
		}
	}
	return changed;
}

void tw_shm_wake(const struct tcp_shm *s)
{
	static const char b = 'w';

	/* Never blocks: a full socket already holds wake-ups. */
	ssize_t k = send(s->sock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)k;
}

/*
 * Whether the peer is known to be gone, as a send on a closed TCP
 * connection fails: it said so in the ring (it closed), or, looked at
 * once a clock tick (now_coarse_ms()) at most, its side channel ended (it
 * died).
 */
static bool peer_gone(struct tcp_shm *s)
{
	if (zshm_tx_peer_closed(&s->tx))
		return true;
	uint64_t now = now_coarse_ms();
	if (now == s->live_ms)
		return false;
	s->live_ms = now;
	char b;
	ssize_t k = recv(s->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR);
}

/* Where the consumer is: grows with its progress only, whatever we
 * write meanwhile. Read from the region alone, so a sender that does not
 * own the tx side may read it too (tw_shm_consumed()). */
static uint64_t consumer_pos(const struct tcp_shm *s)
{
	return zshm_tx_consumed(&s->tx);
}

uint64_t tw_shm_consumed(const struct tcp_conn *c)
{
	return consumer_pos(atomic_load(&c->shm));
}

/*
 * The first frame of this direction into the ring writes TCP_T_SHM on the
 * connection first (mu held; tx side owned). 0, or tw_txq_send()'s error
 * with @own's result set.
 */
static int ring_switch(struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq *own,
		       struct tcp_waiter *me, struct zap_ctx *ctx, bool *partial)
{
	struct tcp_shm *s = atomic_load(&c->shm);

	if (s->tx_on)
		return 0;
	struct tcp_txreq sw = { 0 };
	tw_hdr_put(sw.hdr, c->ver, TCP_T_SHM, 0);
	int err = tw_txq_send(w, c, &sw, 1, me, ctx, partial, true);
	if (err) {
		own->err = sw.err;
		own->done = sw.done;
		return err;
	}
	s->tx_on = true;
	return 0;
}

/* One attempt to publish @own; 0, -EAGAIN (full), or -EPROTO. Version 3
 * writes it as one record, which may go between the parts of a large
 * message another sender has open (tw_shm_send_part()). */
static int ring_put(struct tcp_shm *s, const struct tcp_conn *c,
		    const struct tcp_txreq *own)
{
	bool wake;
	int r = c->ver >= 3 ? zshm_send_whole(&s->tx, own->buf, own->len, &wake)
			    : zshm_send(&s->tx, own->buf, own->len, &wake);

	if (wake)
		tw_shm_wake(s);
	return r;
}

/*
 * Send @own on @c, whose tx side we own and whose ring is ready (mu held;
 * dropped while writing and waiting). The first frame of this direction
 * writes TCP_T_SHM on the connection first. As tw_txq_send() returns;
 * without @may_wait, -EAGAIN (nothing written, own->err 0) where the ring
 * has no room to start the frame (a burst's later frames, tcp_api.c); a
 * frame once started is finished, waiting if it must.
 */
int tw_shm_send(struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq *own,
		struct tcp_waiter *me, struct zap_ctx *ctx, bool *partial, bool may_wait)
{
	TW_HELD(w);
	struct tcp_shm *s = atomic_load(&c->shm);
	bool whole = c->ver >= 3; /* one record, never partly written */
	int err = ring_switch(w, c, own, me, ctx, partial);

	if (err)
		return err;
	*partial = false;
	tw_unlock(w);
	if (peer_gone(s)) {
		/* Nothing written: the caller retries on a new connection. */
		tw_lock(w);
		own->done = 0;
		own->err = w->host->fail(-EPIPE, "%s: send to %s: the peer closed",
					 w->dom, c->raddr);
		return own->err;
	}
	for (;;) {
		int r = ring_put(s, c, own);
		uint64_t seen = 0;
		if (r == -EAGAIN && !may_wait && (whole || !zshm_tx_mid(&s->tx))) {
			tw_lock(w);
			own->done = 0;
			own->err = 0;
			return -EAGAIN;
		}
		if (r == -EAGAIN) {
			/* Full: announce that we wait, look once more. */
			zshm_tx_prepare_wait(&s->tx);
			seen = consumer_pos(s);
			r = ring_put(s, c, own);
		}
		if (!r)
			break;
		if (r != -EAGAIN) {
			err = w->host->fail(
				-EPROTO,
				"%s: send to %s: the peer broke the shared-memory ring",
				w->dom, c->raddr);
			break;
		}
		/*
		 * The consumer wakes us through the side channel, which the
		 * leader polls: any change, then try again. Room made since
		 * the last look, whose wake-up the leader may have handled
		 * before we wait, shows as consumer progress under mu: the
		 * leader's broadcast needs mu too, so it either comes after
		 * we sleep or its progress is visible here.
		 */
		tw_lock(w);
		if (consumer_pos(s) == seen) {
			me->room = s; /* a leading waiter also watches the ring */
			me->room_had = zshm_tx_room(&s->tx);
			err = tw_wait_step(w, me, ctx);
			me->room = NULL;
		}
		if (!err && (c->dead || s->side_gone))
			err = w->host->fail(-ECONNRESET, "%s: connection to %s was lost",
					    w->dom, c->raddr);
		tw_unlock(w);
		if (err)
			break;
	}
	tw_lock(w);
	*partial = err && !whole && zshm_tx_mid(&s->tx);
	own->done = err ? *partial : TCP_HDR + own->len;
	own->err = err;
	if (!err) {
		tw_count(&w->st_tx_frames, 1);
		c->tx_msgs++; /* mu held */
		c->tx_bytes += own->len;
	}
	return err;
}

const char *tw_conn_path(const struct tcp_conn *c)
{
	const struct tcp_shm *s = atomic_load(&((struct tcp_conn *)c)->shm);

	if (s && s->tx_ready)
		return "shm";
	return c->local ? "unix" : "tcp";
}

/*
 * Version 3: write the next part of the large message @buf/@len into @c's
 * ring (tx side owned, mu held; dropped while writing): at most TCP_PART
 * bytes, leaving TCP_SHM_KEEP bytes free for other senders' messages.
 * 0: the message is complete; -EINPROGRESS: a part went, more is to come;
 * -EAGAIN: no room for the next part (*@seen: the consumer's position
 * then; give the tx side back and wait for it to move); or an error.
 * *@open: part of the message is in the ring and the rest is not.
 */
int tw_shm_send_part(struct tcp_wire *w, struct tcp_conn *c, const void *buf, size_t len,
		     struct tcp_waiter *me, struct zap_ctx *ctx, bool *open,
		     uint64_t *seen)
{
	TW_HELD(w);
	struct tcp_shm *s = atomic_load(&c->shm);
	struct tcp_txreq own = { .buf = buf, .len = len };
	bool wake;
	int r = ring_switch(w, c, &own, me, ctx, open);

	if (r)
		return r;
	*open = zshm_tx_mid(&s->tx);
	tw_unlock(w);
	/* A peer gone (closed, or its side channel ended) reads no more of
	 * the ring: before the first part nothing was written (the caller
	 * may retry elsewhere); after it, the message is lost with it. */
	if (peer_gone(s)) {
		tw_lock(w);
		return *open ? w->host->fail(-ECONNRESET, "%s: connection to %s was lost",
					     w->dom, c->raddr)
			     : w->host->fail(-EPIPE, "%s: send to %s: the peer closed",
					     w->dom, c->raddr);
	}
	r = zshm_send_part(&s->tx, buf, len, TCP_PART, TCP_SHM_KEEP, &wake);
	if (wake)
		tw_shm_wake(s);
	if (r == -EAGAIN) {
		/* Full: announce that we wait, look once more. */
		zshm_tx_prepare_wait(&s->tx);
		*seen = consumer_pos(s);
		r = zshm_send_part(&s->tx, buf, len, TCP_PART, TCP_SHM_KEEP, &wake);
		if (wake)
			tw_shm_wake(s);
	}
	tw_lock(w);
	*open = zshm_tx_mid(&s->tx);
	if (r == -EPROTO)
		return w->host
			->fail(-EPROTO,
			       "%s: send to %s: the peer broke the shared-memory ring",
			       w->dom, c->raddr);
	if (!r)
		tw_count(&w->st_tx_frames, 1);
	return r;
}
