/* SPDX-License-Identifier: MIT */
/*
 * Who a peer is: the identity rule (the claim a first message makes
 * against what its connection proves) and peer names with keys
 * (zap-conn.h). Pure functions; no shared state.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "zap-addr.h"
#include "zap-conn.h"
#include "zap-tls.h"

unsigned zconn_host_bucket(const struct sockaddr *sa, socklen_t sl, const char *ident)
{
	const unsigned char *p = (const unsigned char *)"";
	size_t n = 0;
	uint32_t h = 2166136261u; /* FNV-1a */

	if (sl >= sizeof(struct sockaddr_in) && sa->sa_family == AF_INET) {
		p = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
		n = 4;
	} else if (sl >= sizeof(struct sockaddr_in6) && sa->sa_family == AF_INET6) {
		p = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		n = 16;
		if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)p)) {
			p += 12;
			n = 4;
		}
	} else if (ident) {
		const char *pid = strstr(ident, " pid=");
		p = (const unsigned char *)ident;
		n = pid ? (size_t)(pid - ident) : strlen(ident);
	}
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h % ZCONN_HOST_BUCKETS;
}

bool zconn_literal(const char *host, uint16_t port, struct sockaddr_storage *ss,
		   socklen_t *sl)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		*sl = sizeof(*s4);
		return true;
	}
	if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		*sl = sizeof(*s6);
		return true;
	}
	return false;
}

/* A unix: claim (zap-conn.h): only on a connection we accepted, as @real. */
static int identity_unix(const char *claim, const char *real, int dialed_port,
			 const char *what, char *out, size_t len, char *why,
			 size_t whylen)
{
	if (dialed_port >= 0) {
		snprintf(why, whylen, "%s from %s claims %s, but we dialed TCP", what,
			 real, claim);
		return -EPROTO;
	}
	/* A Unix socket cannot be proven over TCP: the peer is what the
	 * connection shows, its source address and port, which replies
	 * reach while this connection is open (WIRE.md). */
	if (strlen(real) >= len || real[0] == '?') {
		snprintf(why, whylen, "unusable source address for %s", claim);
		return -EPROTO;
	}
	memcpy(out, real, strlen(real) + 1);
	return 0;
}

int zconn_identity(const char *claim, const struct sockaddr *src, socklen_t sl,
		   int dialed_port, const char *what, char *out, size_t len, char *why,
		   size_t whylen)
{
	char real[ZAP_PEER_MAX], lit[ZAP_PEER_MAX];
	struct sockaddr_storage cs;
	struct zaddr c;
	socklen_t cl;
	int rc = -EPROTO;

	if (zaddr_format(src, sl, -1, real, sizeof(real)))
		snprintf(real, sizeof(real), "?");
	/* A unix: address has no port; every other form needs one. */
	if (zaddr_parse(claim, &c) || (!c.port_num && c.kind != ZADDR_UNIX)) {
		snprintf(why, whylen, "%s from %s carries a malformed address", what,
			 real);
		goto refuse;
	}
	/* The source host with the claimed port: what the connection
	 * proves, plus the one claim plaintext cannot check (the port). */
	if (zaddr_format(src, sl, c.port_num, out, len)) {
		snprintf(why, whylen, "unusable source address (family %d)",
			 src->sa_family);
		goto refuse;
	}
	if (c.kind == ZADDR_UNIX)
		rc = identity_unix(claim, real, dialed_port, what, out, len, why, whylen);
	else if (dialed_port >= 0 && c.port_num != (unsigned)dialed_port)
		snprintf(why, whylen,
			 "%s from %s claims %s, another port than the one dialed", what,
			 real, claim);
	else if (c.wildcard)
		return 0;
	/* A name is never looked up, and a literal must be the source. */
	else if (!zconn_literal(c.host, c.port_num, &cs, &cl) ||
		 zaddr_format((struct sockaddr *)&cs, cl, -1, lit, sizeof(lit)) ||
		 strcmp(lit, out))
		snprintf(why, whylen,
			 "%s from %s claims %s, which is not its source address", what,
			 real, claim);
	else
		return 0;
	if (!rc)
		return 0;
refuse:
	if (len)
		out[0] = '\0';
	return rc;
}

int zconn_peer_norm(const char *peer, bool tls, char *out, size_t ol, char *why,
		    size_t whylen)
{
	const char *key = strchr(peer, '#');
	size_t len = strlen(peer), al;
	unsigned char fp[32];

	if (zconn_peer_plain(peer, ol)) {
		memmove(out, peer, len + 1);
		return 0;
	}
	if (len >= ol) {
		snprintf(why, whylen, "peer address too long");
		return -EINVAL;
	}
	/* "host:port#sha256:<hex>": TLS only, the key in lower case so that
	 * it finds the route a received message's peer string names. */
	if (!tls) {
		snprintf(why, whylen,
			 "peer \"%s\" requires a key, but TLS is off (ZAP_TLS_CERT)",
			 peer);
		return -EINVAL;
	}
	if (ztls_fp_parse(key + 1, strlen(key + 1), fp)) {
		snprintf(why, whylen,
			 "peer \"%s\": want host:port#sha256:<64 hex digits>", peer);
		return -EINVAL;
	}
	al = (size_t)(key - peer);
	memmove(out, peer, al);
	out[al] = '#';
	/* Fits: the text after '#' had exactly ZTLS_FP_LEN - 1 bytes. */
	ztls_fp_format(fp, out + al + 1);
	return 0;
}

int zconn_peer_join(const char *addr, const char *fp, char *out, size_t ol)
{
	size_t al = strlen(addr), fl = strlen(fp);

	if (al + (fl ? fl + 1 : 0) >= ol)
		return -ENAMETOOLONG;
	memmove(out, addr, al);
	if (fl) {
		out[al] = '#';
		memmove(out + al + 1, fp, fl);
		al += fl + 1;
	}
	out[al] = '\0';
	return 0;
}

bool zconn_peer_match(const char *have, const char *want)
{
	size_t wl = strlen(want);

	if (!strcmp(have, want))
		return true;
	return !strchr(want, '#') && !strncmp(have, want, wl) && have[wl] == '#';
}
