/* SPDX-License-Identifier: MIT */
/*
 * The default/uma wire's parsers of network bytes, called directly
 * (util/tcp/tcp_codec.c): the frame header (tcp_parse_header()), the HELLO
 * payload (tcp_parse_hello()) and the replyable peer string made from it
 * and the connection's source address (tcp_hello_peer()), the formatting
 * of socket addresses the wire sends and logs (zaddr_format(), util/addr;
 * its parser has its own harness, fuzz-address.c), and the decimal parser
 * of the wire's environment variables (tcp_parse_uint()).
 * fuzz-tcp-stream.c drives the same code through a real socket.
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
#include "zap-addr.h"

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void do_header(const uint8_t *d, size_t n)
{
	uint8_t *h;
	uint64_t len = 0, max;
	char why[160];

	if (n < 16 + 1 + 8)
		return;
	unsigned want = d[0] & 1 ? 2 : 1;
	/* 0: any version spoken (2 to 4), else exactly 2, 3 or 4. */
	unsigned ver = (d[0] >> 1) % 4 ? 1 + (d[0] >> 1) % 4 : 0;
	max = rd64(d + 1);
	h = malloc(16); /* exactly a header */
	if (!h)
		abort();
	memcpy(h, d + 9, 16);
	why[0] = '\0';
	int r = tcp_parse_header(h, ver, want, max, &len, why, sizeof(why));
	bool ok = h[0] == 0x5a && h[1] == 0x41 && h[2] == 0x50 && h[3] == 0x57 &&
		  (ver ? h[4] == ver : h[4] >= 2 && h[4] <= 4) && h[5] == want && !h[6] &&
		  !h[7];
	if (!ok) {
		FUZZ_CHECK(r == -EPROTO && why[0]);
	} else if (rd64(h + 8) > max) {
		FUZZ_CHECK(r == -EMSGSIZE && why[0]);
	} else {
		FUZZ_CHECK(r == 0 && len == rd64(h + 8));
	}
	free(h);
}

/* The source address of a connection from the first 19 bytes of @d: IPv4,
 * IPv6 (with a scope id) or v4-mapped IPv6. */
static socklen_t source_addr(const uint8_t *d, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (d[0] % 3 == 0) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, d + 1, 4);
		memcpy(&s4->sin_port, d + 17, 2);
		return sizeof(*s4);
	}
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	s6->sin6_family = AF_INET6;
	memcpy(&s6->sin6_addr, d + 1, 16);
	if (d[0] % 3 == 2) { /* v4-mapped */
		memset(&s6->sin6_addr, 0, 10);
		s6->sin6_addr.s6_addr[10] = s6->sin6_addr.s6_addr[11] = 0xff;
	}
	memcpy(&s6->sin6_port, d + 17, 2);
	s6->sin6_scope_id = d[0] & 0x80 ? 1 : 0; /* lo */
	return sizeof(*s6);
}

/* The formatter the wire uses for source and bound addresses: whatever
 * the socket says, the result is an address the shared parser accepts,
 * with the same port (or the one asked for). */
static void do_format(const uint8_t *d, size_t n)
{
	struct sockaddr_storage ss;
	char buf[ZAP_PEER_MAX];
	struct zaddr z;

	if (n < 19)
		return;
	socklen_t sl = source_addr(d, &ss);
	unsigned port = ntohs(ss.ss_family == AF_INET
				      ? ((struct sockaddr_in *)&ss)->sin_port
				      : ((struct sockaddr_in6 *)&ss)->sin6_port);
	int want = n > 19 && d[19] & 1 ? (int)(d[19] * 257u) & 0xffff : -1;
	FUZZ_CHECK(zaddr_format((struct sockaddr *)&ss, sl, want, buf, sizeof(buf)) == 0);
	FUZZ_CHECK(zaddr_parse(buf, &z) == 0);
	FUZZ_CHECK(z.port_num == (want >= 0 ? (unsigned)want : port));
	FUZZ_CHECK(z.kind == ZADDR_IPV4 || z.kind == ZADDR_IPV6);
	bool v4 = ss.ss_family == AF_INET ||
		  IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&ss)->sin6_addr);
	FUZZ_CHECK((z.kind == ZADDR_IPV4) == v4);
}

/* Over a Unix socket (tcp_hello_peer_local()): a unix: claim is handed
 * back to be proven; a TCP claim becomes a loopback address with its
 * port, or is refused. */
static void check_local(const struct tcp_hello *h)
{
	char out[ZAP_PEER_MAX], why[200] = "";
	struct zaddr o;
	int r = tcp_hello_peer_local(h, "fuzz", out, sizeof(out), why, sizeof(why));

	if (h->unix_addr) {
		FUZZ_CHECK(r == 1 && !strcmp(out, h->addr));
		return;
	}
	if (r) {
		FUZZ_CHECK(r == -EPROTO && why[0] && !out[0]);
		return;
	}
	FUZZ_CHECK(zaddr_parse(out, &o) == 0 && o.port_num == h->port_num);
	unsigned char b[16];
	if (o.kind == ZADDR_IPV4) {
		FUZZ_CHECK(inet_pton(AF_INET, o.host, b) == 1 && b[0] == 127);
	} else {
		static const unsigned char lo[16] = { [15] = 1 };
		FUZZ_CHECK(o.kind == ZADDR_IPV6 && inet_pton(AF_INET6, o.host, b) == 1);
		FUZZ_CHECK(!memcmp(b, lo, 16));
	}
	FUZZ_CHECK(!h->wildcard || !strcmp(o.host, "127.0.0.1") || !strcmp(o.host, "::1"));
}

static void do_hello(const uint8_t *d, size_t n)
{
	struct tcp_hello h;
	char why[160], peer[ZAP_PEER_MAX];

	if (n < 1 + 18 + 2)
		return;
	struct sockaddr_storage ss;
	socklen_t sl = source_addr(d, &ss);
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
	/* WIRE.md: id, nonce, maximum message size (8 bytes each, none 0
	 * but the nonce), then the address. */
	FUZZ_CHECK(n >= 24 + 3 && n <= 24 + ZAP_PEER_MAX - 1);
	FUZZ_CHECK(h.id == rd64(p) && h.nonce == rd64(p + 8) && h.max_msg == rd64(p + 16));
	FUZZ_CHECK(h.id && h.max_msg);
	FUZZ_CHECK(strlen(h.addr) == n - 24 && !memcmp(h.addr, p + 24, n - 24));
	/* The address is what the shared parser (fuzz-address.c checks it
	 * against its own oracle) reads, port 0 excluded. */
	struct zaddr z;
	FUZZ_CHECK(zaddr_parse(h.addr, &z) == 0 && (z.port_num || z.kind == ZADDR_UNIX));
	FUZZ_CHECK(h.unix_addr == (z.kind == ZADDR_UNIX));
	check_local(&h);
	FUZZ_CHECK(!strcmp(z.host, h.host) && !strcmp(z.port, h.port) &&
		   z.port_num == h.port_num && z.wildcard == h.wildcard);
	why[0] = '\0';
	int dport = d[0] & 1 ? (int)h.port_num : -1;
	r = tcp_hello_peer(&h, (struct sockaddr *)&ss, sl, dport, peer,
			   sizeof(peer), why, sizeof(why));
	if (!r && h.unix_addr) {
		/* Unprovable over TCP: the source as it is, and never on a
		 * connection we dialed. */
		char src[ZAP_PEER_MAX];
		FUZZ_CHECK(dport < 0);
		FUZZ_CHECK(zaddr_format((struct sockaddr *)&ss, sl, -1, src, sizeof(src)) == 0 &&
			   !strcmp(src, peer));
	} else if (!r) {
		/* A replyable peer: parses, same port, exactly the
		 * connection's source host; a name never passes. */
		struct zaddr pz;
		char src[ZAP_PEER_MAX];
		FUZZ_CHECK(zaddr_parse(peer, &pz) == 0);
		FUZZ_CHECK(!strcmp(pz.port, h.port));
		FUZZ_CHECK(zaddr_format((struct sockaddr *)&ss, sl, h.port_num, src,
					sizeof(src)) == 0 &&
			   !strcmp(src, peer));
		FUZZ_CHECK(z.kind != ZADDR_NAME);
	} else {
		FUZZ_CHECK(r == -EPROTO && why[0] && !peer[0]);
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
	case 3:
		do_format(data + 1, size - 1);
		break;
	case 4:
		do_uint(data + 1, size - 1);
		break;
	}
	return 0;
}
