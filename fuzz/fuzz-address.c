/* SPDX-License-Identifier: MIT */
/*
 * Socket addresses: the shared parser (util/addr, zaddr_parse()) and the
 * core's wrapper of it (zap__check_address(), used for ZAP_LISTEN and the
 * listen attribute) against an independent reading of the grammar in
 * zap-addr.h; and the formatter (zaddr_format()) against the parser.
 *
 * Properties: the parser agrees with the reference on every input and on
 * what it read (kind, host, port, wildcard); parsing is lossless (joining
 * the parts gives the input back); nothing accepted as a name is an IPv4
 * address to inet_aton(3), and every accepted IPv4 or IPv6 host converts
 * with inet_pton(); a formatted sockaddr parses back to the same address;
 * a unix: address (its oracle reads it by substrings, not components)
 * becomes the sockaddr_un it names and formats back to itself.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/un.h>

#include "fuzz.h"
#include "zap-addr.h"
#include "zap-private.h"

/* IPv4: sscanf into four runs of digits, then the octet rules. */
static bool ref_ipv4(const char *h)
{
	char o[4][5], tail;

	if (sscanf(h, "%4[0-9].%4[0-9].%4[0-9].%4[0-9]%c", o[0], o[1], o[2], o[3],
		   &tail) != 4)
		return false;
	if (strspn(h, "0123456789.") != strlen(h))
		return false; /* sscanf skipped nothing, but be explicit */
	for (int i = 0; i < 4; i++)
		if (strlen(o[i]) > 3 || (o[i][0] == '0' && o[i][1]) || atoi(o[i]) > 255)
			return false;
	return true;
}

static bool ref_numeric_label(const char *l, size_t n)
{
	static const char hex[] = "0123456789abcdefABCDEF";

	if (n >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X')) {
		for (size_t i = 2; i < n; i++)
			if (!strchr(hex, l[i]))
				return false;
		return true;
	}
	for (size_t i = 0; i < n; i++)
		if (l[i] < '0' || l[i] > '9')
			return false;
	return true;
}

/* A name: a character at a time, tracking the current label. */
static bool ref_name(const char *h)
{
	static const char ldh[] = "abcdefghijklmnopqrstuvwxyz"
				  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-";
	size_t n = strlen(h), lstart = 0;
	bool all_numeric = true;

	if (n < 1 || n > 253)
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && h[i] != '.') {
			if (!strchr(ldh, h[i]))
				return false;
			continue;
		}
		size_t len = i - lstart;
		if (len < 1 || len > 63 || h[lstart] == '-' || h[i - 1] == '-')
			return false;
		if (!ref_numeric_label(h + lstart, len))
			all_numeric = false;
		lstart = i + 1;
	}
	return !all_numeric;
}

struct ref {
	enum zaddr_kind kind;
	char host[300];
	long port;
	bool wildcard;
};

/* unix:/path or unix:@name, read a different way: by substrings. */
static bool ref_unix(const char *u, struct ref *r)
{
	size_t n = strlen(u);

	for (size_t i = u[0] == '@' || u[0] == '/'; i < n; i++)
		if ((unsigned char)u[i] < 0x21 || (unsigned char)u[i] > 0x7e || u[i] == '#')
			return false;
	if (u[0] == '@') {
		if (n < 2 || n > 108)
			return false;
	} else {
		char t[300];
		if (u[0] != '/' || n < 2 || n > 107 || u[n - 1] == '/' || strstr(u, "//"))
			return false;
		snprintf(t, sizeof(t), "%s/", u); /* every component ends in '/' */
		if (strstr(t, "/./") || strstr(t, "/../"))
			return false;
	}
	r->kind = ZADDR_UNIX;
	memcpy(r->host, u, n + 1);
	return true;
}

static bool ref_parse(const char *a, struct ref *r)
{
	const char *port;

	memset(r, 0, sizeof(*r));
	if (!strncmp(a, "unix:", 5))
		return strlen(a) < 5 + sizeof(r->host) && ref_unix(a + 5, r);
	if (a[0] == '[') {
		const char *close = strchr(a, ']');
		unsigned char b[16];
		static const unsigned char zero[16];

		if (!close || close[1] != ':' || (size_t)(close - a - 1) >= sizeof(r->host))
			return false;
		memcpy(r->host, a + 1, (size_t)(close - a - 1));
		if (!r->host[0] || strchr(r->host, '%') ||
		    inet_pton(AF_INET6, r->host, b) != 1)
			return false;
		r->kind = ZADDR_IPV6;
		r->wildcard = !memcmp(b, zero, 16);
		port = close + 2;
	} else {
		const char *colon = strrchr(a, ':');

		if (!colon || (size_t)(colon - a) >= sizeof(r->host))
			return false;
		memcpy(r->host, a, (size_t)(colon - a));
		if (ref_ipv4(r->host))
			r->kind = ZADDR_IPV4;
		else if (ref_name(r->host))
			r->kind = ZADDR_NAME;
		else
			return false;
		r->wildcard = !strcmp(r->host, "0.0.0.0");
		port = colon + 1;
	}
	size_t pl = strlen(port);
	if (pl < 1 || pl > 5 || strspn(port, "0123456789") != pl ||
	    (port[0] == '0' && pl > 1))
		return false;
	r->port = strtol(port, NULL, 10);
	return r->port <= 65535;
}

/* Formatting the parsed address's bytes gives an address that parses to
 * the same bytes and port. */
static void check_format(const struct zaddr *z)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	char buf[64];
	struct zaddr back;

	memset(&ss, 0, sizeof(ss));
	if (z->kind == ZADDR_IPV4) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(z->port_num);
		FUZZ_CHECK(inet_pton(AF_INET, z->host, &s4->sin_addr) == 1);
		sl = sizeof(*s4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(z->port_num);
		FUZZ_CHECK(inet_pton(AF_INET6, z->host, &s6->sin6_addr) == 1);
		sl = sizeof(*s6);
	}
	/* zaddr_ipv4() (dpdk's parser) reads exactly the IPv4 hosts, as
	 * inet_pton does. */
	if (z->kind == ZADDR_IPV4) {
		uint32_t ip;
		FUZZ_CHECK(zaddr_ipv4(z->host, &ip) == 0);
		FUZZ_CHECK(htonl(ip) == ((struct sockaddr_in *)&ss)->sin_addr.s_addr);
	} else {
		FUZZ_CHECK(zaddr_ipv4(z->host, &(uint32_t){ 0 }) == -EINVAL);
	}
	FUZZ_CHECK(zaddr_format((struct sockaddr *)&ss, sl, -1, buf, sizeof(buf)) == 0);
	FUZZ_CHECK(zaddr_parse(buf, &back) == 0);
	FUZZ_CHECK(back.port_num == z->port_num);
	/* A v4-mapped IPv6 address comes back as IPv4 ([::ffff:0.0.0.0] as
	 * the wildcard 0.0.0.0), anything else as it was. */
	if (back.kind == z->kind) {
		FUZZ_CHECK(back.wildcard == z->wildcard);
		unsigned char x[16], y[16];
		int af = z->kind == ZADDR_IPV4 ? AF_INET : AF_INET6;
		FUZZ_CHECK(inet_pton(af, z->host, x) == 1 && inet_pton(af, back.host, y) == 1);
		FUZZ_CHECK(!memcmp(x, y, af == AF_INET ? 4 : 16));
	} else {
		FUZZ_CHECK(z->kind == ZADDR_IPV6 && back.kind == ZADDR_IPV4);
	}
	/* Too small a buffer: refused, and "" rather than a cut address. */
	FUZZ_CHECK(zaddr_format((struct sockaddr *)&ss, sl, -1, buf, 4) == -ENOSPC &&
		   !buf[0]);
}

/* A unix address's socket address formats back to the same text, and
 * holds exactly the path (with its NUL) or a NUL and the name. */
static void check_unix(const struct zaddr *z, const char *s)
{
	struct sockaddr_un sun;
	socklen_t sl;
	char buf[200];
	size_t n = strlen(z->host), off = offsetof(struct sockaddr_un, sun_path);

	FUZZ_CHECK(z->port_num == 0 && !z->port[0] && !z->wildcard);
	FUZZ_CHECK(zaddr_unix_sockaddr(z, &sun, &sl) == 0 && sun.sun_family == AF_UNIX);
	if (z->host[0] == '@')
		FUZZ_CHECK(sl == off + n && !sun.sun_path[0] &&
			   !memcmp(sun.sun_path + 1, z->host + 1, n - 1));
	else
		FUZZ_CHECK(sl == off + n + 1 && !strcmp(sun.sun_path, z->host));
	FUZZ_CHECK(zaddr_format((struct sockaddr *)&sun, sl, -1, buf, sizeof(buf)) == 0);
	FUZZ_CHECK(!strcmp(buf, s));
	FUZZ_CHECK(zaddr_format((struct sockaddr *)&sun, sl, -1, buf, strlen(s)) == -ENOSPC &&
		   !buf[0]);
	FUZZ_CHECK(zaddr_unix_check(z->host, n, NULL) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_strndup(data, size);
	struct zaddr z;
	struct ref r;
	int rc = zap__check_address("ZAP_LISTEN", s);
	int zr = zaddr_parse(s, &z);
	bool ok = ref_parse(s, &r);

	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	if (rc)
		FUZZ_CHECK(strstr(zap_last_error(), "ZAP_LISTEN"));
	FUZZ_CHECK((rc == 0) == ok);
	FUZZ_CHECK((zr == 0) == ok && (zr == 0 || zr == -EINVAL));
	if (ok) {
		char back[600];
		FUZZ_CHECK(z.kind == r.kind && !strcmp(z.host, r.host));
		FUZZ_CHECK(z.port_num == r.port && z.wildcard == r.wildcard);
		FUZZ_CHECK(zaddr_join(&z, z.port, back, sizeof(back)) == 0);
		FUZZ_CHECK(!strcmp(back, s));
		if (z.kind == ZADDR_UNIX) {
			check_unix(&z, s);
		} else if (z.kind == ZADDR_NAME) {
			struct in_addr in;
			FUZZ_CHECK(inet_aton(z.host, &in) == 0);
		} else {
			check_format(&z);
		}
	}
	zap__clear_error();
	free(s);
	return 0;
}
