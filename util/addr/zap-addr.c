/* SPDX-License-Identifier: MIT */
/*
 * The address parser and formatter: see zap-addr.h for the grammar.
 * Pure; no shared state.
 */
#include "zap-addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#define UNIX_PREFIX "unix:"
#define UNIX_PREFIX_LEN 5

_Static_assert(ZADDR_UNIX_MAX + 1 == sizeof(((struct sockaddr_un *)0)->sun_path),
	       "ZADDR_UNIX_MAX is sun_path less one byte");
_Static_assert(ZADDR_UNIX_MAX + 2 <= ZADDR_HOST_MAX, "a unix address fits host");

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_alnum(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Decimal @s[0..n) without sign or leading zero, at most @max. */
static bool parse_dec(const char *s, size_t n, unsigned max, unsigned *out)
{
	unsigned v = 0;

	if (!n || (n > 1 && s[0] == '0'))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!is_digit(s[i]))
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
		if (v > max)
			return false;
	}
	*out = v;
	return true;
}

/* Four decimal octets; their value (host order) in *@ip if not NULL. */
static bool parse_ipv4(const char *s, size_t n, uint32_t *ip)
{
	size_t i = 0;
	uint32_t all = 0;

	for (int part = 0; part < 4; part++) {
		size_t start = i;
		unsigned v;

		while (i < n && s[i] != '.')
			i++;
		if (!parse_dec(s + start, i - start, 255, &v))
			return false;
		all = all << 8 | v;
		if (part < 3) {
			if (i == n)
				return false;
			i++; /* the dot */
		}
	}
	if (i != n)
		return false;
	if (ip)
		*ip = all;
	return true;
}

int zaddr_ipv4(const char *s, uint32_t *ip)
{
	return s && parse_ipv4(s, strlen(s), ip) ? 0 : -EINVAL;
}

/* A label inet_aton(3) could read as a number: digits, or 0x and hex. */
static bool label_numeric(const char *s, size_t n)
{
	size_t i = 0;

	if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		for (i = 2; i < n; i++)
			if (!is_hex(s[i]))
				return false;
		return true;
	}
	for (; i < n; i++)
		if (!is_digit(s[i]))
			return false;
	return true;
}

/* LDH labels, at most 253 characters, not all labels numeric. */
static bool parse_name(const char *s, size_t n)
{
	bool numeric = true;
	size_t i = 0;

	if (!n || n > 253)
		return false;
	while (i <= n) {
		size_t start = i;

		while (i < n && s[i] != '.')
			i++;
		size_t len = i - start;
		if (len < 1 || len > 63 || s[start] == '-' || s[i - 1] == '-')
			return false;
		for (size_t k = start; k < i; k++)
			if (!is_alnum(s[k]) && s[k] != '-')
				return false;
		numeric = numeric && label_numeric(s + start, len);
		i++; /* the dot, or past the end */
	}
	return !numeric;
}

/* A byte allowed in a unix path component or an abstract name. */
static bool unix_byte(char c)
{
	return c >= 0x21 && c <= 0x7e && c != '#';
}

static bool bad(const char **why, const char *reason)
{
	if (why)
		*why = reason;
	return false;
}

/* An absolute path in its one spelling (zap-addr.h, upath). */
static bool unix_path(const char *s, size_t n, const char **why)
{
	size_t i = 1;

	if (n < 2)
		return bad(why, "the path is empty");
	while (i <= n) {
		size_t start = i;

		while (i < n && s[i] != '/') {
			if (!unix_byte(s[i]))
				return bad(why, "the path holds a byte that is not "
						"printable ASCII, a space or '#'");
			i++;
		}
		size_t len = i - start;
		if (!len)
			return bad(why, "the path has an empty component "
					"(\"//\" or a trailing \"/\")");
		if ((len == 1 && s[start] == '.') ||
		    (len == 2 && s[start] == '.' && s[start + 1] == '.'))
			return bad(why, "the path has a \".\" or \"..\" component");
		i++; /* the slash, or past the end */
	}
	return true;
}

int zaddr_unix_check(const char *s, size_t n, const char **why)
{
	if (n > ZADDR_UNIX_MAX + 1 || (n > ZADDR_UNIX_MAX && s[0] == '/')) {
		bad(why, "longer than a Unix socket address holds (107 bytes)");
		return -EINVAL;
	}
	if (n && s[0] == '@') {
		if (n < 2) {
			bad(why, "the abstract name is empty");
			return -EINVAL;
		}
		for (size_t i = 1; i < n; i++)
			if (!unix_byte(s[i])) {
				bad(why, "the abstract name holds a byte that is not "
					 "printable ASCII, a space or '#'");
				return -EINVAL;
			}
		return 0;
	}
	if (!n || s[0] != '/') {
		bad(why, "want an absolute path (unix:/path) or an abstract name "
			 "(unix:@name)");
		return -EINVAL;
	}
	return unix_path(s, n, why) ? 0 : -EINVAL;
}

int zaddr_unix_sockaddr(const struct zaddr *a, struct sockaddr_un *sun, socklen_t *sl)
{
	size_t n = strlen(a->host);

	if (a->kind != ZADDR_UNIX || n > ZADDR_UNIX_MAX + 1 || !n)
		return -EINVAL;
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	if (a->host[0] == '@') {
		/* Abstract: a NUL, then the name; the length counts the
		 * name's bytes only (no padding), as ss(8) shows it. */
		memcpy(sun->sun_path + 1, a->host + 1, n - 1);
		*sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		memcpy(sun->sun_path, a->host, n);
		*sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	}
	return 0;
}

static int unix_format(const struct sockaddr *sa, socklen_t sl, char *buf, size_t len)
{
	const struct sockaddr_un *sun = (const struct sockaddr_un *)sa;
	size_t off = offsetof(struct sockaddr_un, sun_path);
	char text[ZADDR_UNIX_MAX + 2];
	size_t n;

	if (sl <= off || sl > sizeof(*sun))
		goto unsupported;
	n = sl - off;
	if (sun->sun_path[0]) {
		n = strnlen(sun->sun_path, n); /* a path: up to its NUL */
		memcpy(text, sun->sun_path, n);
	} else {
		text[0] = '@';
		memcpy(text + 1, sun->sun_path + 1, n - 1);
	}
	if (zaddr_unix_check(text, n, NULL))
		goto unsupported;
	if (UNIX_PREFIX_LEN + n >= len) {
		if (len)
			buf[0] = '\0';
		return -ENOSPC;
	}
	memcpy(buf, UNIX_PREFIX, UNIX_PREFIX_LEN);
	memcpy(buf + UNIX_PREFIX_LEN, text, n);
	buf[UNIX_PREFIX_LEN + n] = '\0';
	return 0;
unsupported:
	if (len)
		buf[0] = '\0';
	return -EAFNOSUPPORT;
}

int zaddr_parse(const char *s, struct zaddr *out)
{
	const char *host, *colon;
	size_t hl;
	unsigned port;
	struct zaddr a = { 0 };

	if (!s)
		return -EINVAL;
	if (!strncmp(s, UNIX_PREFIX, UNIX_PREFIX_LEN)) {
		size_t n = strlen(s + UNIX_PREFIX_LEN);
		if (zaddr_unix_check(s + UNIX_PREFIX_LEN, n, NULL))
			return -EINVAL;
		a.kind = ZADDR_UNIX;
		memcpy(a.host, s + UNIX_PREFIX_LEN, n + 1); /* fits: checked */
		*out = a;
		return 0;
	}
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		struct in6_addr in6;

		if (!close || close[1] != ':')
			return -EINVAL;
		host = s + 1;
		hl = (size_t)(close - host);
		colon = close + 1;
		if (!hl || hl >= INET6_ADDRSTRLEN)
			return -EINVAL;
		memcpy(a.host, host, hl);
		if (inet_pton(AF_INET6, a.host, &in6) != 1)
			return -EINVAL;
		a.kind = ZADDR_IPV6;
		a.wildcard = IN6_IS_ADDR_UNSPECIFIED(&in6);
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		host = s;
		hl = (size_t)(colon - s);
		if (parse_ipv4(host, hl, NULL))
			a.kind = ZADDR_IPV4;
		else if (parse_name(host, hl))
			a.kind = ZADDR_NAME;
		else
			return -EINVAL;
		memcpy(a.host, host, hl);
		a.wildcard = a.kind == ZADDR_IPV4 && !strcmp(a.host, "0.0.0.0");
	}
	if (!parse_dec(colon + 1, strlen(colon + 1), 65535, &port))
		return -EINVAL;
	strcpy(a.port, colon + 1); /* at most 5 digits: checked above */
	a.port_num = (uint16_t)port;
	*out = a;
	return 0;
}

int zaddr_join(const struct zaddr *a, const char *port, char *buf, size_t len)
{
	int n;

	if (a->kind == ZADDR_UNIX)
		n = snprintf(buf, len, UNIX_PREFIX "%s", a->host);
	else
		n = snprintf(buf, len, a->kind == ZADDR_IPV6 ? "[%s]:%s" : "%s:%s",
			     a->host, port);

	if (n < 0 || (size_t)n >= len) {
		if (len)
			buf[0] = '\0';
		return -ENOSPC;
	}
	return 0;
}

int zaddr_format(const struct sockaddr *sa, socklen_t sl, int port, char *buf, size_t len)
{
	struct zaddr a = { 0 };
	char p[ZADDR_PORT_MAX];
	const void *bytes;
	unsigned pn;

	if (sa->sa_family == AF_UNIX)
		return unix_format(sa, sl, buf, len);
	if (sa->sa_family == AF_INET && sl >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		a.kind = ZADDR_IPV4;
		bytes = &s4->sin_addr;
		pn = ntohs(s4->sin_port);
	} else if (sa->sa_family == AF_INET6 &&
		   sl >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		bool mapped = IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr);
		a.kind = mapped ? ZADDR_IPV4 : ZADDR_IPV6;
		bytes = mapped ? (const void *)&s6->sin6_addr.s6_addr[12]
			       : (const void *)&s6->sin6_addr;
		pn = ntohs(s6->sin6_port);
	} else {
		if (len)
			buf[0] = '\0';
		return -EAFNOSUPPORT;
	}
	inet_ntop(a.kind == ZADDR_IPV4 ? AF_INET : AF_INET6, bytes, a.host,
		  sizeof(a.host));
	snprintf(p, sizeof(p), "%u", port >= 0 ? (unsigned)port & 0xffffu : pn);
	return zaddr_join(&a, p, buf, len);
}
