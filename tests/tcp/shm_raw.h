/* SPDX-License-Identifier: MIT */
/*
 * A raw dialer of the default wire that completes (or breaks) the
 * same-host upgrade by hand, as WIRE.md specifies it: a version-2 HELLO
 * over TCP, then the side channel's challenge, request, answer, ring and
 * confirmation (tests/common/shm-side.h has the messages and proofs).
 * For the tests of hostile same-host peers (test_tcp_shm.c,
 * test_tcp_shm_hoard.c). No shared state. Include it after <cmocka.h>
 * and shm-side.h.
 */
#ifndef ZAP_TEST_SHM_RAW_H
#define ZAP_TEST_SHM_RAW_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>


static inline void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

static inline uint64_t get_be64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

#define RAW_ID 0x1234567890abcdefull

/* A HELLO of wire version @ver: instance id @id, @nonce, address @me. */
static inline size_t hello_put_v(unsigned char *p, unsigned ver, uint64_t id,
				 uint64_t nonce, const char *me)
{
	size_t al = strlen(me);
	put_be32(p, 0x5a415057u);
	p[4] = (unsigned char)ver;
	p[5] = 1;
	p[6] = p[7] = 0;
	put_be64(p + 8, 24 + al);
	put_be64(p + 16, id);
	put_be64(p + 24, nonce);
	put_be64(p + 32, 1u << 20);
	memcpy(p + 40, me, al);
	return 40 + al;
}

/* ... of wire version 2. */
static inline size_t hello_put(unsigned char *p, uint64_t id, uint64_t nonce, const char *me)
{
	return hello_put_v(p, 2, id, nonce, me);
}

/* Whether the endpoint closed @fd (reads until EOF or reset). */
static inline bool raw_closed(int fd)
{
	char b[4096];

	for (;;) {
		ssize_t k = recv(fd, b, sizeof(b), 0);
		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return true;
		if (k < 0)
			return false;
	}
}

/* A whole HELLO (or frame) from @fd into @r; its length. */
static inline size_t frame_get(int fd, unsigned char *r, size_t cap)
{
	size_t got = 0;
	while (got < 16 || got < 16 + (size_t)get_be64(r + 8)) {
		size_t want = got < 16 ? 16 - got : 16 + (size_t)get_be64(r + 8) - got;
		assert_true(want <= cap - got);
		ssize_t k = recv(fd, r + got, want, 0);
		if (k <= 0)
			return 0;
		got += (size_t)k;
	}
	return got;
}

static inline int tcp_to(const char *addr)
{
	char host[64];
	int port;
	assert_int_equal(sscanf(addr, "%63[^:]:%d", host, &port), 2);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	assert_int_equal(inet_pton(AF_INET, host, &sa.sin_addr), 1);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	struct timeval tv = { .tv_sec = 10 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* A raw dialer (instance id @me_id): a HELLO with @nonce; returns the
 * socket and the acceptor's instance id from its answer, which is all a
 * stranger needs to squat its side-channel name. */
static inline int raw_hello_v(const char *addr, unsigned ver, uint64_t me_id,
			      uint64_t nonce, uint64_t *id)
{
	unsigned char p[128], r[256];
	int fd = tcp_to(addr);
	size_t n = hello_put_v(p, ver, me_id, nonce, "0.0.0.0:9");
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
	assert_true(frame_get(fd, r, sizeof(r)) >= 40);
	assert_int_equal(r[4], ver); /* answered in the version offered */
	*id = get_be64(r + 16);
	return fd;
}

static inline int raw_hello_as(const char *addr, uint64_t me_id, uint64_t nonce, uint64_t *id)
{
	return raw_hello_v(addr, 2, me_id, nonce, id);
}

static inline int raw_hello(const char *addr, uint64_t nonce, uint64_t *id)
{
	return raw_hello_as(addr, RAW_ID, nonce, id);
}

/* A side channel to @id, after its challenge (*@ca). */
static inline int side_open(uint64_t id, unsigned char ca[32])
{
	struct side_msg m;
	int fd = side_dial(id), fds[4], nfd;
	assert_true(fd >= 0);
	assert_int_equal(side_get(fd, &m, sizeof(m), fds, &nfd, 5000), (ssize_t)sizeof(m));
	assert_int_equal(m.magic, SIDE_CHAL);
	assert_int_equal(nfd, 0);
	memcpy(ca, m.a, 32);
	return fd;
}

/* What came next on @fd within 5 s: its magic with one descriptor
 * (*@got), or 0 when the listener closed or sent anything else. */
static inline uint32_t side_next(int fd, struct side_msg *m, int *got)
{
	int fds[4], nfd;
	ssize_t k = side_get(fd, m, sizeof(*m), fds, &nfd, 5000);
	*got = nfd == 1 ? fds[0] : -1;
	for (int i = nfd == 1 ? 1 : 0; i < nfd; i++)
		close(fds[i]);
	return k == (ssize_t)sizeof(*m) ? m->magic : 0;
}

/* How the raw dialer's request on a side channel is broken. */
struct req_case {
	const char *what;
	uint32_t magic, log2, label;
	uint64_t nonce_delta;
	bool other_chal, other_ends, with_fd, is_short;
};

/* Send the raw dialer's request on @fd, over @ca, broken as @rc says;
 * *@ans: the proof a true acceptor answers with. */
static inline void request(int fd, int tcp, uint64_t id, uint64_t nonce, const unsigned char *ca,
		    const struct req_case *rc, int good, unsigned char ans[32])
{
	unsigned char cd[32], ca2[32], bind[64], mac[32];
	struct side_msg m = { .magic = rc->magic, .log2 = rc->log2 };
	assert_int_equal(getrandom(cd, 32, 0), 32);
	memcpy(ca2, ca, 32);
	if (rc->other_chal)
		ca2[0] ^= 1; /* a proof seen before, for another challenge */
	size_t bl = side_bind_tcp4(tcp, !rc->other_ends, bind);
	side_proof(rc->label, nonce + rc->nonce_delta, RAW_ID, id, cd, ca2, bind, bl, mac);
	memcpy(m.a, cd, 32);
	memcpy(m.b, mac, 32);
	assert_true(side_put(fd, &m, rc->is_short ? 40 : sizeof(m), &good, rc->with_fd));
	bl = side_bind_tcp4(tcp, true, bind);
	side_proof(SIDE_ANS, nonce, RAW_ID, id, cd, ca, bind, bl, ans);
}

static const struct req_case req_ok = { "", SIDE_REQ, 21, SIDE_REQ, 0, false, false,
					 false, false };

/* A side channel with the request answered: its descriptor, the
 * acceptor's ring in *@ring. */
static inline int answered(int tcp, uint64_t id, uint64_t nonce, int good, int *ring)
{
	unsigned char ca[32], ans[32];
	struct side_msg m;
	int fd = side_open(id, ca);
	request(fd, tcp, id, nonce, ca, &req_ok, good, ans);
	assert_int_equal(side_next(fd, &m, ring), SIDE_ANS);
	assert_true(*ring >= 0);
	assert_memory_equal(m.a, ans, 32); /* WIRE.md's proof, computed here */
	return fd;
}

#endif /* ZAP_TEST_SHM_RAW_H */
