/* SPDX-License-Identifier: MIT */
/*
 * Socket addresses as text: the one parser and the one formatter that the
 * core (ZAP_LISTEN, the listen attribute), the TCP wire (peer strings,
 * HELLO addresses, listen addresses) and the gpudirect bootstrap share, so
 * that an address one of them accepts means the same to all of them.
 *
 * Grammar (plugins/default/WIRE.md, "Addresses", says the same):
 *
 *   address = host ":" port / "unix:" upath / "unix:@" aname
 *   host    = ipv4 / "[" ipv6 "]" / name
 *   ipv4    = four decimal octets 0-255 joined by ".", without leading
 *             zeros ("0" itself is fine): 0177.0.0.1, 127.1, 0x7f.0.0.1
 *             and 2130706433 are refused, never read the way inet_aton(3)
 *             reads them
 *   ipv6    = what inet_pton(AF_INET6) accepts, always in brackets (a
 *             bare one is ambiguous with the port); no zone id ("%eth0")
 *   name    = labels joined by "."; a label is 1-63 letters, digits and
 *             "-", not starting or ending with "-"; at most 253
 *             characters; not every label numeric (decimal, or "0x" and
 *             hex digits), so that nothing that looks like an IPv4
 *             address in another spelling reaches the resolver
 *   port    = decimal 0-65535, no sign, no leading zero ("0" itself is
 *             fine): one spelling per port, so that routes keyed by the
 *             peer string cannot name one endpoint twice
 *
 *   upath   = an absolute filesystem path of a Unix-domain stream socket:
 *             "/" and components joined by "/", each a run of bytes
 *             0x21-0x7e except "/" and "#", not "." or ".."; no empty
 *             component (no "//", no trailing "/"); at most
 *             ZADDR_UNIX_MAX bytes, so that it fits sun_path with its
 *             NUL. One spelling per path, so that routes keyed by the
 *             peer string cannot name one socket twice (a symbolic
 *             link still can: the path is not resolved).
 *   aname   = a Linux abstract socket name: 1 to ZADDR_UNIX_MAX bytes
 *             0x21-0x7e except "#" (the peer-string key separator);
 *             on the socket it is sun_path[0] = NUL, then these bytes,
 *             and the address length counts exactly them (no padding)
 *
 * A unix address has kind ZADDR_UNIX; its host holds the text after
 * "unix:" ("/path" or "@name"), its port is "" and port_num 0.
 *
 * Nothing is empty (":80", "[]:80", "host:" are refused) and nothing else
 * is allowed around or between the parts (no spaces, no trailing dot).
 * Wildcards are the IPv4 and IPv6 unspecified addresses, 0.0.0.0 and
 * [::] (any spelling inet_pton reads as ::). "*" is not an address: it
 * was never accepted by ZAP_LISTEN, and a peer that announces it in its
 * HELLO is refused like any other malformed address.
 *
 * Pure functions of their arguments; no shared state.
 */
#ifndef ZAP_ADDR_H
#define ZAP_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Longest host (a 253-character name) plus its NUL. */
#define ZADDR_HOST_MAX 254
/* Longest port ("65535") plus its NUL. */
#define ZADDR_PORT_MAX 6
/* Longest unix path or abstract name: sun_path (108) less its NUL (or
 * the abstract leading NUL). */
#define ZADDR_UNIX_MAX 107

enum zaddr_kind {
	ZADDR_IPV4 = 1,
	ZADDR_IPV6,
	ZADDR_NAME,
	ZADDR_UNIX, /* host: "/path" or "@name"; no port */
};

/* An address, parsed. */
struct zaddr {
	enum zaddr_kind kind;
	char host[ZADDR_HOST_MAX]; /* as written, IPv6 without brackets */
	char port[ZADDR_PORT_MAX]; /* as written (digits) */
	uint16_t port_num;
	bool wildcard; /* 0.0.0.0 or an IPv6 :: */
};

/*
 * Parse @s (NUL-terminated) by the grammar above.
 * Return: 0 and *@out, or -EINVAL (@s NULL or not an address).
 */
int zaddr_parse(const char *s, struct zaddr *out);

/*
 * Format @sa (AF_INET or AF_INET6) as "a.b.c.d:port" or "[v6]:port";
 * a v4-mapped IPv6 address as IPv4; an IPv6 scope id is left out (the
 * grammar has no zone ids). @port >= 0 replaces the sockaddr's port.
 * AF_UNIX as "unix:/path" or "unix:@name" (@port ignored).
 * The result always parses with zaddr_parse().
 * Return: 0, -EAFNOSUPPORT (another family, @sl too short, an unnamed
 * or unparsable Unix socket address), -ENOSPC (@len too small; @buf
 * then holds "").
 */
int zaddr_format(const struct sockaddr *sa, socklen_t sl, int port, char *buf,
		 size_t len);

/*
 * A bare IPv4 address @s ("a.b.c.d", the grammar's ipv4, no port), for
 * transports that speak IPv4 only (dpdk): its value in host byte order.
 * Return: 0 and *@ip, or -EINVAL.
 */
int zaddr_ipv4(const char *s, uint32_t *ip);

/*
 * Join a parsed host and a port back into an address ("[v6]:p" for IPv6).
 * Return: 0, -ENOSPC (@buf then holds "").
 */
int zaddr_join(const struct zaddr *a, const char *port, char *buf, size_t len);

/*
 * Parse the text after "unix:" (@s[0..@n), not NUL-terminated), by the
 * upath / aname rules above. On failure *@why (if not NULL) says what is
 * wrong ("relative path", "too long"...), for error messages.
 * Return: 0, or -EINVAL.
 */
int zaddr_unix_check(const char *s, size_t n, const char **why);

struct sockaddr_un;
/*
 * The socket address of a ZADDR_UNIX address: sun_path holds the path and
 * its NUL, or a NUL and the abstract name; *@sl is the length to pass to
 * bind/connect.
 * Return: 0, or -EINVAL (@a not ZADDR_UNIX).
 */
int zaddr_unix_sockaddr(const struct zaddr *a, struct sockaddr_un *sun, socklen_t *sl);

#endif /* ZAP_ADDR_H */
