/* SPDX-License-Identifier: MIT */
/*
 * The same-host upgrade's side channel (WIRE.md, "Same host"; the steps in
 * tcp_shm_setup.c): what binds a pair to its connection (the ends as both
 * see them, the key), the proofs (an HMAC over both challenges), and the
 * side channel's datagrams with their deadline.
 */
#include "tcp_int.h"
#include "tcp_shm.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

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
bool tw_shm_proof(uint32_t magic, const unsigned char *key, size_t key_len, uint64_t did,
		  uint64_t aid, const unsigned char *cd, const unsigned char *ca,
		  const unsigned char *bind, size_t bind_len, unsigned char out[32])
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

bool tw_shm_fresh(unsigned char out[32])
{
	return getrandom(out, 32, 0) == 32;
}

/* ---- the side channel's messages ---------------------------------------- */

int tw_shm_msg_send(int fd, uint32_t magic, const unsigned char *a,
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
int tw_shm_msg_recv(int fd, uint32_t magic, struct tcp_shm_msg *m, int *got, char *why,
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

/* Wait for the next message (tw_shm_msg_recv()) until @deadline_ms. */
int tw_shm_msg_wait(struct tcp_wire *w, int fd, uint32_t magic, struct tcp_shm_msg *m,
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
		r = tw_shm_msg_recv(fd, magic, m, got, why, whylen);
		if (r != -EAGAIN)
			return r;
	}
}
