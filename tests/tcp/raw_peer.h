/* SPDX-License-Identifier: MIT */
/*
 * A raw-socket peer of the default wire (plugins/default/WIRE.md), for the
 * tests that play a hostile or broken peer: a TCP connection from a chosen
 * loopback address and a HELLO of our making. Include after <cmocka.h>
 * and "zap-test.h".
 */
#ifndef ZAP_TEST_RAW_PEER_H
#define ZAP_TEST_RAW_PEER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Connect to @addr ("a.b.c.d:port") from the local address @from (NULL:
 * any). Loopback addresses 127.0.0.2 and up stand for other hosts. */
static inline int raw_connect_from(const char *addr, const char *from)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	struct sockaddr_in sa = { .sin_family = AF_INET };
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	inet_pton(AF_INET, host, &sa.sin_addr);
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	if (from) {
		struct sockaddr_in me = { .sin_family = AF_INET };
		inet_pton(AF_INET, from, &me.sin_addr);
		assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
	}
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* A HELLO from instance @id with @nonce announcing @addr (and a 64 MiB
 * maximum message). Return: its length. */
static inline size_t hello_full(unsigned char *p, uint64_t id, uint64_t nonce,
				const char *addr)
{
	size_t n = zt_wire_hdr(p, 1, 24 + strlen(addr));
	zt_be64(p + n, id);
	zt_be64(p + n + 8, nonce);
	zt_be64(p + n + 16, 64ull << 20);
	memcpy(p + n + 24, addr, strlen(addr));
	return n + 24 + strlen(addr);
}

#endif /* ZAP_TEST_RAW_PEER_H */
