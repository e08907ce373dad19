/* SPDX-License-Identifier: MIT */
/*
 * Ethernet/IPv4/UDP/ARP framing without DPDK: see dp_wire.h. Every length
 * read from the wire is checked against the bytes actually present before
 * it is used.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "dp_wire.h"
#include "zap-addr.h"

#define ETHERTYPE_IPV4 0x0800
#define ETHERTYPE_ARP 0x0806
#define IPPROTO_UDP_ 17

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void wr32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

uint32_t dp_csum_add(uint32_t sum, const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t s = sum;

	for (; len >= 2; b += 2, len -= 2)
		s += (uint32_t)(b[0] << 8 | b[1]);
	if (len)
		s += (uint32_t)b[0] << 8;
	while (s >> 32)
		s = (s & 0xffffffffu) + (s >> 32);
	return (uint32_t)s;
}

uint16_t dp_csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)sum;
}

/* Sum of the UDP pseudo header for @ip (IPv4 header) and UDP length. */
static uint32_t pseudo_sum(const uint8_t *ip, uint16_t udp_len)
{
	uint32_t s = dp_csum_add(0, ip + 12, 8); /* source and destination */

	return s + IPPROTO_UDP_ + udp_len;
}

static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

static enum dp_frame_kind drop(struct dp_frame_info *info, const char *why)
{
	info->why = why;
	return DP_FRAME_DROP;
}

static enum dp_frame_kind parse_arp(const uint8_t *a, size_t len,
				    struct dp_frame_info *info)
{
	if (len < 28)
		return drop(info, "truncated ARP");
	/* Ethernet/IPv4 ARP only: htype 1, ptype 0x0800, hlen 6, plen 4. */
	if (rd16(a) != 1 || rd16(a + 2) != ETHERTYPE_IPV4 || a[4] != 6 || a[5] != 4)
		return drop(info, "ARP not for Ethernet/IPv4");
	info->arp_op = rd16(a + 6);
	if (info->arp_op != DP_ARP_REQUEST && info->arp_op != DP_ARP_REPLY)
		return drop(info, "unknown ARP operation");
	memcpy(info->arp_sha, a + 8, 6);
	info->arp_spa = rd32(a + 14);
	info->arp_tpa = rd32(a + 24);
	return DP_FRAME_ARP;
}

enum dp_frame_kind dp_wire_parse(const uint8_t *f, size_t len, const struct dp_local *loc,
				 unsigned trust, struct dp_frame_info *info)
{
	const uint8_t *ip, *udp;
	size_t ihl, tot, ulen;

	memset(info, 0, sizeof(*info));
	if (len < DP_ETH_HLEN)
		return drop(info, "truncated Ethernet header");
	if (memcmp(f, loc->mac, 6) && memcmp(f, bcast, 6))
		return drop(info, "not our MAC");
	memcpy(info->src_mac, f + 6, 6);
	if (rd16(f + 12) == ETHERTYPE_ARP)
		return parse_arp(f + DP_ETH_HLEN, len - DP_ETH_HLEN, info);
	if (rd16(f + 12) != ETHERTYPE_IPV4)
		return drop(info, "not IPv4 or ARP");
	ip = f + DP_ETH_HLEN;
	len -= DP_ETH_HLEN;
	if (len < DP_IP_HLEN)
		return drop(info, "truncated IPv4 header");
	ihl = (size_t)(ip[0] & 0xf) * 4;
	if ((ip[0] >> 4) != 4 || ihl < DP_IP_HLEN || ihl > len)
		return drop(info, "bad IPv4 version or header length");
	tot = rd16(ip + 2);
	/* Ethernet pads short frames, so the frame may exceed tot, never the
	 * reverse. */
	if (tot < ihl + DP_UDP_HLEN || tot > len)
		return drop(info, "bad IPv4 total length");
	if (rd16(ip + 6) & 0x3fff)
		return drop(info, "IPv4 fragment");
	if (ip[9] != IPPROTO_UDP_)
		return drop(info, "not UDP");
	if (!(trust & DP_TRUST_IP_CSUM) &&
	    dp_csum_fold(dp_csum_add(0, ip, ihl)) != 0xffff)
		return drop(info, "bad IPv4 checksum");
	if (rd32(ip + 16) != loc->ip)
		return drop(info, "not our IPv4 address");
	udp = ip + ihl;
	ulen = rd16(udp + 4);
	if (ulen < DP_UDP_HLEN || ulen != tot - ihl)
		return drop(info, "bad UDP length");
	if (rd16(udp + 2) != loc->port)
		return drop(info, "not our UDP port");
	if (!(trust & DP_TRUST_UDP_CSUM)) {
		uint32_t s = pseudo_sum(ip, (uint16_t)ulen);

		if (rd16(udp + 6) == 0)
			return drop(info, "UDP checksum absent");
		if (dp_csum_fold(dp_csum_add(s, udp, ulen)) != 0xffff)
			return drop(info, "bad UDP checksum");
	}
	info->src_ip = rd32(ip + 12);
	info->src_port = rd16(udp);
	info->payload = udp + DP_UDP_HLEN;
	info->payload_len = ulen - DP_UDP_HLEN;
	return DP_FRAME_UDP;
}

size_t dp_wire_udp(uint8_t *f, const uint8_t src_mac[6], const uint8_t dst_mac[6],
		   uint32_t src_ip, uint32_t dst_ip, uint16_t src_port, uint16_t dst_port,
		   size_t payload_len)
{
	uint8_t *ip = f + DP_ETH_HLEN, *udp = ip + DP_IP_HLEN;

	memcpy(f, dst_mac, 6);
	memcpy(f + 6, src_mac, 6);
	wr16(f + 12, ETHERTYPE_IPV4);
	ip[0] = 0x45;
	ip[1] = 0;
	wr16(ip + 2, (uint16_t)(DP_IP_HLEN + DP_UDP_HLEN + payload_len));
	wr16(ip + 4, 0); /* id: never fragmented, DF set */
	wr16(ip + 6, 0x4000);
	ip[8] = 64;
	ip[9] = IPPROTO_UDP_;
	wr16(ip + 10, 0);
	wr32(ip + 12, src_ip);
	wr32(ip + 16, dst_ip);
	wr16(udp, src_port);
	wr16(udp + 2, dst_port);
	wr16(udp + 4, (uint16_t)(DP_UDP_HLEN + payload_len));
	wr16(udp + 6, 0);
	return DP_L2L4_HLEN + payload_len;
}

void dp_wire_csum(uint8_t *f)
{
	uint8_t *ip = f + DP_ETH_HLEN, *udp = ip + DP_IP_HLEN;
	uint16_t ulen = rd16(udp + 4), c;

	wr16(ip + 10, 0);
	wr16(ip + 10, (uint16_t)~dp_csum_fold(dp_csum_add(0, ip, DP_IP_HLEN)));
	wr16(udp + 6, 0);
	c = (uint16_t)~dp_csum_fold(dp_csum_add(pseudo_sum(ip, ulen), udp, ulen));
	wr16(udp + 6, c ? c : 0xffff); /* 0 means "none" in UDP/IPv4 */
}

size_t dp_wire_arp(uint8_t *f, uint16_t op, const uint8_t sha[6], uint32_t spa,
		   const uint8_t tha[6], uint32_t tpa)
{
	static const uint8_t zero[6];
	uint8_t *a = f + DP_ETH_HLEN;

	memset(f, 0, DP_ARP_FRAME_LEN);
	memcpy(f, op == DP_ARP_REQUEST ? bcast : tha, 6);
	memcpy(f + 6, sha, 6);
	wr16(f + 12, ETHERTYPE_ARP);
	wr16(a, 1);
	wr16(a + 2, ETHERTYPE_IPV4);
	a[4] = 6;
	a[5] = 4;
	wr16(a + 6, op);
	memcpy(a + 8, sha, 6);
	wr32(a + 14, spa);
	memcpy(a + 18, op == DP_ARP_REQUEST ? zero : tha, 6);
	wr32(a + 24, tpa);
	return DP_ARP_FRAME_LEN;
}

/*
 * Exactly @n fields of 1..@width digits in @base, each <= @max, separated by
 * @sep and nothing else: no blanks, signs or trailing bytes (sscanf would
 * take "1. 2.3.4" or "1.+2.3.4").
 */
static int parse_fields(const char *s, int n, char sep, int base, int width, unsigned max,
			unsigned *out)
{
	if (!s)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		unsigned v = 0;
		int digits = 0;

		for (;; s++, digits++) {
			int d;

			if (*s >= '0' && *s <= '9')
				d = *s - '0';
			else if (base == 16 && *s >= 'a' && *s <= 'f')
				d = *s - 'a' + 10;
			else if (base == 16 && *s >= 'A' && *s <= 'F')
				d = *s - 'A' + 10;
			else
				break;
			if (digits == width)
				return -EINVAL;
			v = v * (unsigned)base + (unsigned)d;
		}
		if (!digits || v > max || *s != (i + 1 < n ? sep : '\0'))
			return -EINVAL;
		out[i] = v;
		s++;
	}
	return 0;
}

/* Addresses follow util/addr's grammar (zap-addr.h), the one every
 * transport shares, restricted to IPv4: this wire has no IPv6 or names. */
int dp_parse_ip(const char *s, uint32_t *ip)
{
	return zaddr_ipv4(s, ip);
}

int dp_parse_ip_port(const char *s, uint32_t *ip, uint16_t *port)
{
	struct zaddr a;

	if (zaddr_parse(s, &a) || a.kind != ZADDR_IPV4 || zaddr_ipv4(a.host, ip))
		return -EINVAL;
	*port = a.port_num;
	return 0;
}

int dp_parse_mac(const char *s, uint8_t mac[6])
{
	unsigned m[6];

	if (parse_fields(s, 6, ':', 16, 2, 255, m))
		return -EINVAL;
	for (int i = 0; i < 6; i++)
		mac[i] = (uint8_t)m[i];
	return 0;
}

void dp_format_peer(char *buf, size_t len, uint32_t ip, uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };

	sin.sin_addr.s_addr = htonl(ip);
	if (zaddr_format((struct sockaddr *)&sin, sizeof(sin), port, buf, len) && len)
		buf[0] = 0;
}
