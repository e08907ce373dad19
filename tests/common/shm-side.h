/* SPDX-License-Identifier: MIT */
/*
 * The same-host upgrade's side channel as a stranger (or a test of the
 * protocol) speaks it, from plugins/default/WIRE.md "Same host" alone: no
 * header of the library. A squatter that holds "@zap-shm-<a peer's id>"
 * and plays along with whatever the dialer sends: the request of the
 * previous protocol (ZSQ1, with the dialer's ring) is echoed with a ring
 * of its own; today's challenge comes, and any proof is answered with a
 * made-up one and a ring. It counts the ring descriptors it was given.
 * Needs cmocka, pthreads and libcrypto.
 */
#ifndef ZAP_TEST_SHM_SIDE_H
#define ZAP_TEST_SHM_SIDE_H

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#define SIDE_CHAL 0x5a534832u /* "ZSH2" */
#define SIDE_REQ 0x5a535132u  /* "ZSQ2" */
#define SIDE_ANS 0x5a534132u  /* "ZSA2" */
#define SIDE_RING 0x5a535232u /* "ZSR2" */
#define SIDE_DONE 0x5a534332u /* "ZSC2" */
#define SIDE_RING_BYTES (192 + (2u << 20))

/* One datagram, native byte order. */
struct side_msg {
	uint32_t magic, log2;
	unsigned char a[32], b[32];
};

/* A ring region as the wire lays it out: @seal, @len, @header. */
static inline int side_region(size_t len, bool seal, bool header)
{
	int fd = memfd_create("zap-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	if (header) {
		unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		assert_true(p != MAP_FAILED);
		uint64_t magic = 0x31524d485350415aull;
		uint32_t v = 2, l2 = 21;
		memcpy(p, &magic, 8);
		memcpy(p + 8, &v, 4);
		memcpy(p + 12, &l2, 4);
		munmap(p, len);
	}
	if (seal)
		assert_int_equal(fcntl(fd, F_ADD_SEALS,
				       F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
				 0);
	return fd;
}

/* Send @len bytes with @nfd descriptors; whether all went. */
static inline bool side_put(int fd, const void *msg, size_t len, const int *fds, int nfd)
{
	struct iovec iov = { (void *)msg, len };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfd) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.b;
		mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfd * sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)len;
}

static inline void side_msg_put(int fd, uint32_t magic, const unsigned char *a,
				const unsigned char *b, int pass)
{
	struct side_msg m = { .magic = magic, .log2 = 21 };
	if (a)
		memcpy(m.a, a, 32);
	if (b)
		memcpy(m.b, b, 32);
	side_put(fd, &m, sizeof(m), &pass, pass >= 0);
}

/* One datagram within @ms: its length (0: closed, -1: nothing), the
 * descriptors that came with it (*@nfd of them, at most 4, in @fds). */
static inline ssize_t side_get(int fd, void *buf, size_t cap, int *fds, int *nfd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct iovec iov = { buf, cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof(u.b) };
	*nfd = 0;
	if (poll(&p, 1, ms) != 1)
		return -1;
	ssize_t k = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); k >= 0 && c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) &&
					   *nfd < 4;
			     i++)
				memcpy(&fds[(*nfd)++], CMSG_DATA(c) + i * sizeof(int),
				       sizeof(int));
	return k < 0 ? 0 : k;
}

static inline int side_dial(uint64_t id)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int k = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "zap-shm-%016llx",
			 (unsigned long long)id);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (connect(fd, (struct sockaddr *)&sun,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)k))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- proofs (WIRE.md: HMAC-SHA256 keyed with the nonce) ----------------- */

static inline void side_be(unsigned char *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

/* The binding of a TCP connection over IPv4 whose dialer end is @fd
 * (@dialed) or whose acceptor end it is: kind 4, then each end as
 * 18, ::ffff:a.b.c.d, port. 39 bytes at @out. */
static inline size_t side_bind_tcp4(int fd, bool dialed, unsigned char *out)
{
	struct sockaddr_in me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &ml), 0);
	assert_int_equal(getpeername(fd, (struct sockaddr *)&peer, &pl), 0);
	const struct sockaddr_in *e[2] = { dialed ? &me : &peer, dialed ? &peer : &me };
	out[0] = 4;
	for (int i = 0; i < 2; i++) {
		unsigned char *p = out + 1 + 19 * i;
		p[0] = 18;
		memset(p + 1, 0, 10);
		p[11] = p[12] = 0xff;
		memcpy(p + 13, &e[i]->sin_addr, 4);
		memcpy(p + 17, &e[i]->sin_port, 2);
	}
	return 39;
}

/* The proof keyed with @key (the nonce, 8 bytes big-endian; under TLS
 * followed by 32 bytes of the exporter "EXPORTER-zap-shm"). */
static inline void side_proof_key(uint32_t magic, const unsigned char *key, size_t kl,
				  uint64_t did, uint64_t aid, const unsigned char *cd,
				  const unsigned char *ca, const unsigned char *bind,
				  size_t bl, unsigned char out[32])
{
	unsigned char m[256];
	unsigned int ol = 0;
	side_be(m, magic, 4);
	side_be(m + 4, did, 8);
	side_be(m + 12, aid, 8);
	memcpy(m + 20, cd, 32);
	memcpy(m + 52, ca, 32);
	memcpy(m + 84, bind, bl);
	assert_non_null(HMAC(EVP_sha256(), key, (int)kl, m, 84 + bl, out, &ol));
}

/* ... on a plaintext connection: keyed with its nonce. */
static inline void side_proof(uint32_t magic, uint64_t nonce, uint64_t did, uint64_t aid,
			      const unsigned char *cd, const unsigned char *ca,
			      const unsigned char *bind, size_t bl, unsigned char out[32])
{
	unsigned char key[8];
	side_be(key, nonce, 8);
	side_proof_key(magic, key, 8, did, aid, cd, ca, bind, bl, out);
}

/* ---- the squatter ------------------------------------------------------- */

struct squat {
	int lfd;
	pthread_t th;
	atomic_int stop;
	atomic_int channels; /* side channels the victim opened */
	atomic_int rings;    /* ring descriptors it handed over */
	int keep[16];        /* side channels held open until the end */
	int nkeep;
};

static inline void squat_serve(struct squat *q, int fd)
{
	unsigned char buf[128];
	int fds[4], nfd;
	/* The old protocol opens with its request (and ring); today's
	 * waits for the listener's challenge. */
	ssize_t k = side_get(fd, buf, sizeof(buf), fds, &nfd, 300);
	if (k < 0) {
		unsigned char ca[32], fake[32];
		assert_int_equal(getrandom(ca, 32, 0), 32);
		assert_int_equal(getrandom(fake, 32, 0), 32);
		side_msg_put(fd, SIDE_CHAL, ca, NULL, -1);
		k = side_get(fd, buf, sizeof(buf), fds, &nfd, 2000);
		if (k > 0) {
			/* Whatever it proved, "prove" back, ring attached. */
			int r = side_region(SIDE_RING_BYTES, true, true);
			side_msg_put(fd, SIDE_ANS, fake, NULL, r);
			close(r);
			atomic_fetch_add(&q->rings, nfd);
			for (int i = 0; i < nfd; i++)
				close(fds[i]);
			k = side_get(fd, buf, sizeof(buf), fds, &nfd, 2000);
		}
	} else if (k == 16) {
		struct {
			uint32_t magic, log2;
			uint64_t nonce;
		} m;
		memcpy(&m, buf, 16);
		atomic_fetch_add(&q->rings, nfd);
		for (int i = 0; i < nfd; i++)
			close(fds[i]);
		m.magic = 0x5a534131u; /* "ZSA1", the nonce echoed */
		int r = side_region(SIDE_RING_BYTES, true, true);
		side_put(fd, &m, sizeof(m), &r, 1);
		close(r);
		k = side_get(fd, buf, sizeof(buf), fds, &nfd, 2000);
	}
	if (k > 0)
		atomic_fetch_add(&q->rings, nfd);
	for (int i = 0; k > 0 && i < nfd; i++)
		close(fds[i]);
	if (q->nkeep < 16)
		q->keep[q->nkeep++] = fd; /* a live side channel, as a real peer's */
	else
		close(fd);
}

static inline void *squat_main(void *arg)
{
	struct squat *q = arg;
	while (!atomic_load(&q->stop)) {
		struct pollfd p = { .fd = q->lfd, .events = POLLIN };
		if (poll(&p, 1, 50) != 1)
			continue;
		int fd = accept4(q->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		atomic_fetch_add(&q->channels, 1);
		squat_serve(q, fd);
	}
	return NULL;
}

/* Hold "@zap-shm-<@id>" (a peer's instance id, read from its HELLO). */
static inline void squat_start(struct squat *q, uint64_t id)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int k = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "zap-shm-%016llx",
			 (unsigned long long)id);
	memset(q, 0, sizeof(*q));
	q->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(q->lfd >= 0);
	assert_int_equal(bind(q->lfd, (struct sockaddr *)&sun,
			      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
					  (size_t)k)),
			 0);
	assert_int_equal(listen(q->lfd, 16), 0);
	assert_int_equal(pthread_create(&q->th, NULL, squat_main, q), 0);
}

/* Stop; how many ring descriptors it was handed. */
static inline int squat_stop(struct squat *q)
{
	atomic_store(&q->stop, 1);
	pthread_join(q->th, NULL);
	for (int i = 0; i < q->nkeep; i++)
		close(q->keep[i]);
	close(q->lfd);
	return atomic_load(&q->rings);
}

#endif /* ZAP_TEST_SHM_SIDE_H */
