/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport's frame parser and builders (plugins/dpdk/dp_wire.c):
 * every Ethernet frame a DPDK port receives goes through dp_wire_parse().
 *
 * First byte (mod 4) picks:
 *  0  parse the rest as a frame (our MAC/IP/port and trust flags from its
 *     first bytes): a UDP payload lies inside the frame, a drop has a
 *     reason, ARP has a known operation;
 *  1  build a UDP frame around a payload (dp_wire_udp + dp_wire_csum),
 *     parse it back (same payload and source), then change one byte at a
 *     position from the input: below the source MAC that must be dropped
 *     (MAC, IPv4 and UDP checksums), in the source MAC it must parse
 *     with that MAC;
 *  2  build and parse an ARP frame;
 *  3  the address parsers (dp_parse_ip_port, dp_parse_ip, dp_parse_mac):
 *     what parses formats back (dp_format_peer) to a string that parses to
 *     the same value.
 */
#include <errno.h>
#include <stdbool.h>

#include "dp_wire.h"
#include "fuzz.h"

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void parse_any(const uint8_t *d, size_t n)
{
	struct dp_local loc;
	struct dp_frame_info info;

	if (n < 13)
		return;
	memcpy(loc.mac, d, 6);
	loc.ip = rd32(d + 6);
	loc.port = (uint16_t)(d[10] << 8 | d[11]);
	unsigned trust = d[12] & 3;
	d += 13;
	n -= 13;
	uint8_t *f = malloc(n ? n : 1); /* exactly the frame */
	if (!f)
		abort();
	memcpy(f, d, n);
	enum dp_frame_kind k = dp_wire_parse(f, n, &loc, trust, &info);
	switch (k) {
	case DP_FRAME_DROP:
		FUZZ_CHECK(info.why && info.why[0]);
		break;
	case DP_FRAME_UDP:
		FUZZ_CHECK(info.payload >= f + DP_L2L4_HLEN && info.payload <= f + n);
		FUZZ_CHECK(info.payload_len <= (size_t)(f + n - info.payload));
		break;
	case DP_FRAME_ARP:
		FUZZ_CHECK(info.arp_op == DP_ARP_REQUEST || info.arp_op == DP_ARP_REPLY);
		break;
	default:
		FUZZ_CHECK(!"unknown frame kind");
	}
	free(f);
}

static void udp_roundtrip(const uint8_t *d, size_t n)
{
	struct dp_local loc;
	struct dp_frame_info info;
	uint8_t smac[6];

	if (n < 6 + 6 + 4 + 4 + 2 + 2 + 2)
		return;
	memcpy(loc.mac, d, 6);
	memcpy(smac, d + 6, 6);
	uint32_t sip = rd32(d + 12);
	loc.ip = rd32(d + 16);
	uint16_t sport = (uint16_t)(d[20] << 8 | d[21]);
	loc.port = (uint16_t)(d[22] << 8 | d[23]);
	size_t pos = (size_t)(d[24] << 8 | d[25]);
	d += 26;
	n -= 26;
	if (n > 1400)
		n = 1400;

	size_t flen = DP_L2L4_HLEN + n;
	uint8_t *f = malloc(flen);
	if (!f)
		abort();
	memcpy(f + DP_L2L4_HLEN, d, n);
	FUZZ_CHECK(dp_wire_udp(f, smac, loc.mac, sip, loc.ip, sport, loc.port, n) == flen);
	dp_wire_csum(f);
	FUZZ_CHECK(dp_wire_parse(f, flen, &loc, 0, &info) == DP_FRAME_UDP);
	FUZZ_CHECK(info.src_ip == sip && info.src_port == sport);
	FUZZ_CHECK(!memcmp(info.src_mac, smac, 6));
	FUZZ_CHECK(info.payload_len == n && !memcmp(info.payload, d, n));

	/* One byte changed. */
	pos %= flen;
	f[pos] ^= (uint8_t)(pos * 31 + 1) | 1;
	enum dp_frame_kind k = dp_wire_parse(f, flen, &loc, 0, &info);
	if (pos >= 6 && pos < 12) {
		FUZZ_CHECK(k == DP_FRAME_UDP && info.payload_len == n);
	} else {
		/* A changed destination MAC could be broadcast only if five
		 * other bytes were 0xff already: then it is still ours. */
		bool bcast = pos < 6 && f[0] == 0xff && f[1] == 0xff && f[2] == 0xff &&
			     f[3] == 0xff && f[4] == 0xff && f[5] == 0xff;
		FUZZ_CHECK(k == DP_FRAME_DROP || bcast);
	}
	free(f);
}

static void arp_roundtrip(const uint8_t *d, size_t n)
{
	uint8_t f[DP_ARP_FRAME_LEN], sha[6], tha[6];
	struct dp_local loc;
	struct dp_frame_info info;

	if (n < 21)
		return;
	memcpy(sha, d, 6);
	memcpy(tha, d + 6, 6);
	uint32_t spa = rd32(d + 12), tpa = rd32(d + 16);
	uint16_t op = d[20] & 1 ? DP_ARP_REQUEST : DP_ARP_REPLY;
	FUZZ_CHECK(dp_wire_arp(f, op, sha, spa, tha, tpa) == DP_ARP_FRAME_LEN);
	memcpy(loc.mac, tha, 6);
	loc.ip = tpa;
	loc.port = 1;
	FUZZ_CHECK(dp_wire_parse(f, sizeof(f), &loc, 0, &info) == DP_FRAME_ARP);
	FUZZ_CHECK(info.arp_op == op && info.arp_spa == spa && info.arp_tpa == tpa);
	FUZZ_CHECK(!memcmp(info.arp_sha, sha, 6));
}

static void addresses(const uint8_t *d, size_t n)
{
	char *s = fuzz_strndup(d, n);
	uint32_t ip, ip2;
	uint16_t port, port2;
	uint8_t mac[6];
	char buf[32];

	if (!dp_parse_ip_port(s, &ip, &port)) {
		dp_format_peer(buf, sizeof(buf), ip, port);
		FUZZ_CHECK(!dp_parse_ip_port(buf, &ip2, &port2));
		FUZZ_CHECK(ip == ip2 && port == port2);
	}
	if (!dp_parse_ip(s, &ip)) {
		dp_format_peer(buf, sizeof(buf), ip, 1);
		*strrchr(buf, ':') = '\0';
		FUZZ_CHECK(!dp_parse_ip(buf, &ip2) && ip == ip2);
	}
	if (!dp_parse_mac(s, mac)) {
		snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1],
			 mac[2], mac[3], mac[4], mac[5]);
		uint8_t m2[6];
		FUZZ_CHECK(!dp_parse_mac(buf, m2) && !memcmp(mac, m2, 6));
	}
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	switch (data[0] % 4) {
	case 0:
		parse_any(data + 1, size - 1);
		break;
	case 1:
		udp_roundtrip(data + 1, size - 1);
		break;
	case 2:
		arp_roundtrip(data + 1, size - 1);
		break;
	case 3:
		addresses(data + 1, size - 1);
		break;
	}
	return 0;
}
