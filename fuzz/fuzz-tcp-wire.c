/* SPDX-License-Identifier: MIT */
/*
 * The default/uma wire's parsers of network bytes, called directly
 * (util/tcp/tcp_wire.c): the frame header (tcp_parse_header()),
 * the HELLO payload (tcp_parse_hello()) and the replyable peer string made
 * from it and the connection's source address (tcp_hello_peer()), peer
 * address splitting (tcp_addr_split(), also used on every zap_send()
 * peer and on ZAP_LISTEN), and the decimal parser of the wire's
 * environment variables (tcp_parse_uint()). fuzz-tcp-stream.c drives the
 * same code through a real socket.
 *
 * First byte: which parser (mod 5); the rest is its input.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>

#include "fuzz.h"
#include "tcp_wire.h"

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* The address rules of WIRE.md, read independently: host:port or
 * [host]:port, port 1-7 digits <= 65535, host printable, no ':' unless
 * bracketed, the host may be empty. */
static bool ref_split(const char *a, char *host, char *port)
{
	const char *colon, *h;
	size_t hl, n = strlen(a);

	if (!n)
		return false;
	if (a[0] == '[') {
		const char *close = strchr(a, ']');
		if (!close || close[1] != ':')
			return false;
		h = a + 1;
		hl = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(a, ':');
		if (!colon)
			return false;
		h = a;
		hl = (size_t)(colon - a);
		if (memchr(h, ':', hl))
			return false;
	}
	size_t pl = strlen(colon + 1);
	if (!pl || pl >= 8 || hl >= ZAP_PEER_MAX)
		return false;
	unsigned long v = 0;
	for (size_t i = 0; i < pl; i++) {
		if (!isdigit((unsigned char)colon[1 + i]))
			return false;
		v = v * 10 + (unsigned long)(colon[1 + i] - '0');
	}
	if (v > 65535)
		return false;
	for (size_t i = 0; i < hl; i++)
		if (h[i] <= ' ' || h[i] > '~')
			return false;
	memcpy(host, h, hl);
	host[hl] = '\0';
	strcpy(port, colon + 1);
	return true;
}

static void do_header(const uint8_t *d, size_t n)
{
	uint8_t *h;
	uint64_t len = 0, max;
	char why[160];

	if (n < 16 + 1 + 8)
		return;
	unsigned want = d[0] & 1 ? 2 : 1;
	max = rd64(d + 1);
	h = malloc(16); /* exactly a header */
	if (!h)
		abort();
	memcpy(h, d + 9, 16);
	why[0] = '\0';
	int r = tcp_parse_header(h, want, max, &len, why, sizeof(why));
	bool ok = h[0] == 0x5a && h[1] == 0x41 && h[2] == 0x50 && h[3] == 0x57 &&
		  h[4] == 1 && h[5] == want && !h[6] && !h[7];
	if (!ok) {
		FUZZ_CHECK(r == -EPROTO && why[0]);
	} else if (rd64(h + 8) > max) {
		FUZZ_CHECK(r == -EMSGSIZE && why[0]);
	} else {
		FUZZ_CHECK(r == 0 && len == rd64(h + 8));
	}
	free(h);
}

static void check_split(const char *s)
{
	char host[ZAP_PEER_MAX], port[8], rh[ZAP_PEER_MAX], rp[8];
	int r = tcp_addr_split(s, host, sizeof(host), port, sizeof(port));
	bool ref = ref_split(s, rh, rp);

	FUZZ_CHECK((r == 0) == ref);
	if (!r) {
		FUZZ_CHECK(!strcmp(host, rh) && !strcmp(port, rp));
		/* Splitting is lossless. */
		char back[2 * ZAP_PEER_MAX];
		snprintf(back, sizeof(back), s[0] == '[' ? "[%s]:%s" : "%s:%s", host, port);
		FUZZ_CHECK(!strcmp(back, s));
	}
	/* Short buffers are refused, never overrun. */
	char h4[4], p2[2];
	if (!tcp_addr_split(s, h4, sizeof(h4), p2, sizeof(p2)))
		FUZZ_CHECK(strlen(h4) < 4 && strlen(p2) < 2);
}

static void do_hello(const uint8_t *d, size_t n)
{
	struct tcp_hello h;
	char why[160], peer[ZAP_PEER_MAX];

	if (n < 1 + 18 + 2)
		return;
	/* The source address the connection came from: IPv4, IPv6 (with a
	 * scope id) or v4-mapped IPv6, from the first bytes. */
	struct sockaddr_storage ss;
	socklen_t sl;
	memset(&ss, 0, sizeof(ss));
	if (d[0] % 3 == 0) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, d + 1, 4);
		memcpy(&s4->sin_port, d + 17, 2);
		sl = sizeof(*s4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, d + 1, 16);
		if (d[0] % 3 == 2) { /* v4-mapped */
			memset(&s6->sin6_addr, 0, 10);
			s6->sin6_addr.s6_addr[10] = s6->sin6_addr.s6_addr[11] = 0xff;
		}
		memcpy(&s6->sin6_port, d + 17, 2);
		s6->sin6_scope_id = d[0] & 0x80 ? 1 : 0; /* lo */
		sl = sizeof(*s6);
	}
	d += 19;
	n -= 19;

	uint8_t *p = malloc(n); /* exactly the payload */
	if (!p)
		abort();
	memcpy(p, d, n);
	why[0] = '\0';
	int r = tcp_parse_hello(p, n, &h, why, sizeof(why));
	FUZZ_CHECK(r == 0 || r == -EPROTO);
	if (r) {
		FUZZ_CHECK(why[0]);
		free(p);
		return;
	}
	FUZZ_CHECK(n >= 16 + 3 && n <= 16 + ZAP_PEER_MAX - 1);
	FUZZ_CHECK(h.id == rd64(p) && h.nonce == rd64(p + 8));
	FUZZ_CHECK(strlen(h.addr) == n - 16 && !memcmp(h.addr, p + 16, n - 16));
	char rh[ZAP_PEER_MAX], rp[8];
	FUZZ_CHECK(ref_split(h.addr, rh, rp));
	FUZZ_CHECK(!strcmp(rh, h.host) && !strcmp(rp, h.port) && strcmp(h.port, "0"));
	FUZZ_CHECK(h.wildcard == (!rh[0] || !strcmp(rh, "0.0.0.0") || !strcmp(rh, "::") ||
				  !strcmp(rh, "*")));
	why[0] = '\0';
	r = tcp_hello_peer(&h, (struct sockaddr *)&ss, sl, peer, sizeof(peer), why,
			   sizeof(why));
	if (!h.wildcard) {
		FUZZ_CHECK(r == 0 && !strcmp(peer, h.addr));
	} else if (!r) {
		/* A replyable peer: splits, same port, the host from the
		 * connection's source. */
		FUZZ_CHECK(ref_split(peer, rh, rp));
		FUZZ_CHECK(!strcmp(rp, h.port));
		FUZZ_CHECK(rh[0]);
	} else {
		FUZZ_CHECK(why[0]);
	}
	free(p);
}

static void do_uint(const uint8_t *d, size_t n)
{
	if (n < 16)
		return;
	uint64_t min = rd64(d), max = rd64(d + 8), v = 0;
	char *s = fuzz_strndup(d + 16, n - 16);
	int r = tcp_parse_uint(s, min, max, &v);

	/* Reference: plain decimal digits only, value in [min, max]. */
	unsigned __int128 ref = 0;
	bool ok = *s != '\0';
	for (const char *c = s; *c && ok; c++) {
		if (!isdigit((unsigned char)*c))
			ok = false;
		else if ((ref = ref * 10 + (unsigned)(*c - '0')) > UINT64_MAX)
			ok = false;
	}
	ok = ok && ref >= min && ref <= max;
	FUZZ_CHECK((r == 0) == ok);
	if (ok)
		FUZZ_CHECK(v == (uint64_t)ref);
	else
		FUZZ_CHECK(r == -EINVAL);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	switch (data[0] % 5) {
	case 0:
		do_header(data + 1, size - 1);
		break;
	case 1:
		do_hello(data + 1, size - 1);
		break;
	case 2:
	case 3: {
		char *s = fuzz_strndup(data + 1, size - 1);
		check_split(s);
		free(s);
		break;
	}
	case 4:
		do_uint(data + 1, size - 1);
		break;
	}
	return 0;
}
