/* SPDX-License-Identifier: MIT */
/*
 * The frame header and HELLO codec: the parsers of bytes a peer sends and
 * of address strings. Pure (no socket, no wire state), so fuzz-tcp-wire.c
 * calls them directly; the wire uses exactly these. No shared state.
 */
#include "tcp_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tw_hdr_put(unsigned char *h, unsigned type, uint64_t len)
{
	put_be32(h, TCP_MAGIC);
	h[4] = TCP_VERSION;
	h[5] = (unsigned char)type;
	h[6] = 0;
	h[7] = 0;
	put_be64(h + 8, len);
}

int tcp_parse_header(const unsigned char *h, unsigned want, uint64_t max,
		     uint64_t *len, char *why, size_t whylen)
{
	uint32_t magic = get_be32(h);
	if (magic != TCP_MAGIC) {
		snprintf(why, whylen, "bad magic 0x%08" PRIx32 " (not a zap peer?)",
			 magic);
		return -EPROTO;
	}
	if (h[4] != TCP_VERSION) {
		snprintf(why, whylen, "unsupported wire version %u (we speak %u)",
			 h[4], TCP_VERSION);
		return -EPROTO;
	}
	if (h[5] != want) {
		snprintf(why, whylen, "unexpected frame type %u (expected %u)",
			 h[5], want);
		return -EPROTO;
	}
	if (h[6] || h[7]) {
		snprintf(why, whylen, "reserved header bytes set");
		return -EPROTO;
	}
	*len = get_be64(h + 8);
	if (*len > max) {
		snprintf(why, whylen,
			 "frame length %" PRIu64 " exceeds the maximum %" PRIu64
			 "%s", *len, max,
			 want == TCP_T_DATA ? " (ZAP_MAX_MSG_BYTES)" : "");
		return -EMSGSIZE;
	}
	return 0;
}

int tcp_addr_split(const char *s, char *host, size_t hl, char *port, size_t pl)
{
	const char *colon, *h = s;
	size_t n;

	if (!s || !*s)
		return -EINVAL;
	if (*s == '[') {
		const char *close = strchr(s, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		h = s + 1;
		n = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		n = (size_t)(colon - s);
		if (memchr(s, ':', n)) /* bare IPv6 needs brackets */
			return -EINVAL;
	}
	if (n >= hl || strlen(colon + 1) >= pl || !colon[1])
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = '\0';
	for (const char *p = colon + 1; *p; p++)
		if (*p < '0' || *p > '9')
			return -EINVAL;
	if (strtoul(colon + 1, NULL, 10) > 65535)
		return -EINVAL;
	strcpy(port, colon + 1);
	for (const char *p = host; *p; p++)
		if (*p <= ' ' || *p > '~')
			return -EINVAL;
	return 0;
}

void tw_addr_format(const struct sockaddr *sa, socklen_t sl, char *buf,
			size_t len)
{
	/* An IPv6 literal with a scope name always fits. */
	char h[INET6_ADDRSTRLEN + IF_NAMESIZE + 2], p[NI_MAXSERV];

	if (getnameinfo(sa, sl, h, sizeof(h), p, sizeof(p),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(buf, len, "?");
		return;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			struct sockaddr_in s4 = {.sin_family = AF_INET,
						 .sin_port = s6->sin6_port};
			memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
			tw_addr_format((struct sockaddr *)&s4, sizeof(s4), buf, len);
			return;
		}
		snprintf(buf, len, "[%s]:%s", h, p);
	} else {
		snprintf(buf, len, "%s:%s", h, p);
	}
}

bool tw_host_is_wildcard(const char *h)
{
	return !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::") ||
	       !strcmp(h, "*");
}

int tcp_parse_hello(const unsigned char *p, size_t len, struct tcp_hello *h,
		    char *why, size_t whylen)
{
	size_t al;

	if (len < TCP_HELLO_FIXED + 3 || len > TCP_HELLO_MAX) {
		snprintf(why, whylen, "HELLO too %s", len > TCP_HELLO_MAX ? "long" : "short");
		return -EPROTO;
	}
	al = len - TCP_HELLO_FIXED;
	memcpy(h->addr, p + TCP_HELLO_FIXED, al);
	h->addr[al] = '\0';
	h->id = get_be64(p);
	h->nonce = get_be64(p + 8);
	if (strlen(h->addr) != al ||
	    tcp_addr_split(h->addr, h->host, sizeof(h->host), h->port,
			   sizeof(h->port)) ||
	    !strcmp(h->port, "0")) {
		snprintf(why, whylen, "HELLO carries a malformed address");
		return -EPROTO;
	}
	h->wildcard = tw_host_is_wildcard(h->host);
	return 0;
}

int tcp_hello_peer(const struct tcp_hello *h, const struct sockaddr *src,
		   socklen_t sl, char *out, size_t len, char *why, size_t whylen)
{
	char s[ZAP_PEER_MAX], sh[ZAP_PEER_MAX], sp[8];

	if (!h->wildcard) {
		snprintf(out, len, "%s", h->addr);
		return 0;
	}
	tw_addr_format(src, sl, s, sizeof(s));
	if (tcp_addr_split(s, sh, sizeof(sh), sp, sizeof(sp))) {
		snprintf(why, whylen, "unusable source address %s", s);
		return -EPROTO;
	}
	snprintf(out, len, strchr(sh, ':') ? "[%s]:%s" : "%s:%s", sh, h->port);
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
