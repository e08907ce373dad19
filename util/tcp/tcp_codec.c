/* SPDX-License-Identifier: MIT */
/*
 * The frame header and HELLO codec: the parsers of bytes a peer sends (the
 * HELLO's address goes through the shared parser, zap-addr.h). Pure (no
 * socket, no wire state), so fuzz-tcp-wire.c calls them directly; the wire
 * uses exactly these. No shared state.
 */
#include "tcp_int.h"
#include "tcp_shm.h"
#include "zap-addr.h"
#include "zap-conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tw_hdr_put(unsigned char *h, unsigned ver, unsigned type, uint64_t len)
{
	put_be32(h, TCP_MAGIC);
	h[4] = (unsigned char)ver;
	h[5] = (unsigned char)type;
	h[6] = 0;
	h[7] = 0;
	put_be64(h + 8, len);
}

int tcp_parse_header(const unsigned char *h, unsigned ver, unsigned want, uint64_t max,
		     uint64_t *len, char *why, size_t whylen)
{
	uint32_t magic = get_be32(h);
	if (magic != TCP_MAGIC) {
		snprintf(why, whylen, "bad magic 0x%08" PRIx32 " (not a zap peer?)",
			 magic);
		return -EPROTO;
	}
	if (!ver && (h[4] < TCP_VERSION_MIN || h[4] > TCP_VERSION)) {
		snprintf(why, whylen, "unsupported wire version %u (we speak %u to %u)",
			 h[4], TCP_VERSION_MIN, TCP_VERSION);
		return -EPROTO;
	}
	if (ver && h[4] != ver) {
		snprintf(why, whylen, "wire version %u on a connection of version %u",
			 h[4], ver);
		return -EPROTO;
	}
	if (h[5] != want) {
		snprintf(why, whylen, "unexpected frame type %u (expected %u)", h[5],
			 want);
		return -EPROTO;
	}
	if (h[6] || h[7]) {
		snprintf(why, whylen, "reserved header bytes set");
		return -EPROTO;
	}
	*len = get_be64(h + 8);
	if (*len > max) {
		snprintf(why, whylen,
			 "frame length %" PRIu64 " exceeds the maximum %" PRIu64 "%s",
			 *len, max, want == TCP_T_DATA ? " (ZAP_MAX_MSG_BYTES)" : "");
		return -EMSGSIZE;
	}
	return 0;
}

int tcp_parse_hello(const unsigned char *p, size_t len, struct tcp_hello *h, char *why,
		    size_t whylen)
{
	struct zaddr a;
	size_t al;

	if (len < TCP_HELLO_FIXED + 3 || len > TCP_HELLO_MAX) {
		snprintf(why, whylen, "HELLO too %s",
			 len > TCP_HELLO_MAX ? "long" : "short");
		return -EPROTO;
	}
	al = len - TCP_HELLO_FIXED;
	memcpy(h->addr, p + TCP_HELLO_FIXED, al);
	h->addr[al] = '\0';
	h->id = get_be64(p);
	h->nonce = get_be64(p + 8);
	h->max_msg = get_be64(p + 16);
	if (!h->id) {
		snprintf(why, whylen, "HELLO carries instance id 0");
		return -EPROTO;
	}
	if (!h->max_msg) {
		snprintf(why, whylen, "HELLO announces a maximum message size of 0");
		return -EPROTO;
	}
	/* A unix: address has no port; every other form needs one. */
	if (strlen(h->addr) != al || zaddr_parse(h->addr, &a) ||
	    (!a.port_num && a.kind != ZADDR_UNIX)) {
		snprintf(why, whylen, "HELLO carries a malformed address");
		return -EPROTO;
	}
	/* Parts of h->addr, so they fit. */
	memcpy(h->host, a.host, strlen(a.host) + 1);
	memcpy(h->port, a.port, strlen(a.port) + 1);
	h->port_num = a.port_num;
	h->wildcard = a.wildcard;
	h->unix_addr = a.kind == ZADDR_UNIX;
	return 0;
}

/* The identity rule is the connection layer's (zap-conn.h), which
 * gpudirect's bootstrap shares; the HELLO has been parsed already, so its
 * address is well-formed. */
int tcp_hello_peer(const struct tcp_hello *h, const struct sockaddr *src, socklen_t sl,
		   int dialed_port, char *out, size_t len, char *why, size_t whylen)
{
	return zconn_identity(h->addr, src, sl, dialed_port, "HELLO", out, len, why,
			      whylen);
}

bool tw_ip_loopback(int family, const void *addr)
{
	if (family == AF_INET)
		return (ntohl(((const struct in_addr *)addr)->s_addr) >> 24) == 127;
	if (family != AF_INET6)
		return false;
	const struct in6_addr *x = addr;
	if (IN6_IS_ADDR_V4MAPPED(x))
		return x->s6_addr[12] == 127;
	return IN6_IS_ADDR_LOOPBACK(x);
}

/* Whether IPv4/IPv6 literal @host is a loopback address (tw_ip_loopback()). */
static bool host_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (inet_pton(AF_INET, host, &a4) == 1)
		return tw_ip_loopback(AF_INET, &a4);
	return inet_pton(AF_INET6, host, &a6) == 1 && tw_ip_loopback(AF_INET6, &a6);
}

int tcp_hello_peer_local(const struct tcp_hello *h, const char *who, char *out,
			 size_t len, char *why, size_t whylen)
{
	struct sockaddr_storage cs;
	socklen_t cl;

	if (len)
		out[0] = '\0';
	if (h->unix_addr) {
		if (strlen(h->addr) >= len) {
			snprintf(why, whylen, "HELLO from %s: address too long", who);
			return -EPROTO;
		}
		memcpy(out, h->addr, strlen(h->addr) + 1);
		return 1; /* the caller proves it: tw_unix_hello_peer(), tcp_unix.c */
	}
	if (h->wildcard) {
		/* Listening on every address: loopback reaches it. */
		snprintf(out, len, strchr(h->host, ':') ? "[::1]:%u" : "127.0.0.1:%u",
			 (unsigned)h->port_num);
		return 0;
	}
	/* Over a Unix socket a TCP address proves no more than TCP from
	 * loopback would: a loopback host with any port. Another host (even
	 * one of ours) or a name is refused. */
	if (!zconn_literal(h->host, h->port_num, &cs, &cl) || !host_loopback(h->host) ||
	    zaddr_format((struct sockaddr *)&cs, cl, -1, out, len)) {
		if (len)
			out[0] = '\0';
		snprintf(why, whylen,
			 "HELLO from %s claims %s: over a Unix socket only a loopback "
			 "or wildcard TCP address or a Unix address is believed",
			 who, h->addr);
		return -EPROTO;
	}
	return 0;
}

/* What WIRE.md states of the HELLO and the side channel's datagram, so
 * that a change here breaks the build until the spec says it too. */
_Static_assert(TCP_HELLO_FIXED == 24 && TCP_HELLO_MAX == 151,
	       "WIRE.md, HELLO payload: 24 fixed bytes, at most 151");
_Static_assert(offsetof(struct tcp_shm_msg, magic) == 0 &&
		       offsetof(struct tcp_shm_msg, log2) == 4 &&
		       offsetof(struct tcp_shm_msg, a) == 8 &&
		       offsetof(struct tcp_shm_msg, b) == 40 && TCP_SHM_MSG == 72,
	       "WIRE.md, Same host: the side channel's 72-byte message");
_Static_assert(TCP_SHM_LOG2 == 21, "WIRE.md, Same host: 2^21 bytes of records");

int tcp_parse_shm_msg(const void *buf, size_t len, bool trunc, int nfd, uint32_t want,
		      int want_fds, struct tcp_shm_msg *m, char *why, size_t whylen)
{
	if (trunc) {
		snprintf(why, whylen, "oversized side-channel message");
		return -EPROTO;
	}
	if (len != TCP_SHM_MSG) {
		snprintf(why, whylen, "malformed side-channel message (%zu bytes)", len);
		return -EPROTO;
	}
	memcpy(m, buf, sizeof(*m));
	if (m->magic != want) {
		snprintf(why, whylen, "unexpected side-channel message 0x%08" PRIx32,
			 m->magic);
		return -EPROTO;
	}
	if (m->log2 != TCP_SHM_LOG2) {
		snprintf(why, whylen, "ring size 2^%" PRIu32 " offered, we use 2^%u",
			 m->log2, TCP_SHM_LOG2);
		return -EPROTO;
	}
	if (nfd != want_fds) {
		snprintf(why, whylen, "%d descriptors with a side-channel message", nfd);
		return -EPROTO;
	}
	return 0;
}

int tcp_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t n = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		uint64_t d = (uint64_t)(*s - '0');

		if (*s < '0' || *s > '9' || n > (UINT64_MAX - d) / 10)
			return -EINVAL;
		n = n * 10 + d;
	}
	if (n < min || n > max)
		return -EINVAL;
	*out = n;
	return 0;
}
