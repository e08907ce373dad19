/* SPDX-License-Identifier: MIT */
/*
 * Ethernet/IPv4/UDP and ARP framing for the dpdk transport, in plain C
 * (no rte_* calls), so the parser can be fed hostile frames in unit tests.
 * Addresses and ports are in host byte order in every struct below.
 */
#ifndef DP_WIRE_H
#define DP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DP_ETH_HLEN 14
#define DP_IP_HLEN 20
#define DP_UDP_HLEN 8
/* Ethernet + IPv4 (no options) + UDP: where the transport header starts. */
#define DP_L2L4_HLEN (DP_ETH_HLEN + DP_IP_HLEN + DP_UDP_HLEN)
#define DP_ARP_FRAME_LEN 60 /* 42 bytes padded to the Ethernet minimum */

#define DP_ARP_REQUEST 1
#define DP_ARP_REPLY 2

enum dp_frame_kind {
	DP_FRAME_DROP = 0, /* not for us or malformed; info->why says which */
	DP_FRAME_ARP,      /* an ARP request or reply (any target) */
	DP_FRAME_UDP,      /* a UDP datagram to our address and port */
};

/* Checks the parser may skip because the NIC already did them. */
#define DP_TRUST_IP_CSUM 0x1u
#define DP_TRUST_UDP_CSUM 0x2u

struct dp_local {
	uint8_t mac[6];
	uint32_t ip;
	uint16_t port;
};

struct dp_frame_info {
	const char *why; /* DP_FRAME_DROP: a static reason */
	uint8_t src_mac[6];
	uint32_t src_ip;
	uint16_t src_port;
	const uint8_t *payload; /* UDP payload (DP_FRAME_UDP) */
	size_t payload_len;
	uint16_t arp_op;
	uint8_t arp_sha[6];
	uint32_t arp_spa, arp_tpa;
};

/*
 * Classify one frame of @len bytes. Frames not addressed to @loc's MAC (or
 * broadcast), not IPv4/ARP, IPv4 fragments, bad header or total lengths,
 * bad IPv4 or UDP checksums (unless @trust says the NIC verified them; a
 * zero UDP checksum counts as bad: this transport always sends one), and
 * datagrams for another address or port are DP_FRAME_DROP with info->why.
 */
enum dp_frame_kind dp_wire_parse(const uint8_t *f, size_t len, const struct dp_local *loc,
				 unsigned trust, struct dp_frame_info *info);

/*
 * Write Ethernet, IPv4 and UDP headers in front of a UDP payload of
 * @payload_len bytes that lies at f + DP_L2L4_HLEN. Both checksum fields
 * are left 0: the caller fills them (dp_wire_csum(), rte_*_cksum or NIC
 * offload). Return the frame length.
 */
size_t dp_wire_udp(uint8_t *f, const uint8_t src_mac[6], const uint8_t dst_mac[6],
		   uint32_t src_ip, uint32_t dst_ip, uint16_t src_port, uint16_t dst_port,
		   size_t payload_len);

/* Fill both checksums of a frame dp_wire_udp() built, in software. */
void dp_wire_csum(uint8_t *f);

/*
 * Write an ARP frame (@op DP_ARP_REQUEST: broadcast, target MAC zero;
 * DP_ARP_REPLY: to @tha). Return DP_ARP_FRAME_LEN.
 */
size_t dp_wire_arp(uint8_t *f, uint16_t op, const uint8_t sha[6], uint32_t spa,
		   const uint8_t tha[6], uint32_t tpa);

/* The Internet checksum (RFC 1071) of @len bytes, folded, not inverted. */
uint32_t dp_csum_add(uint32_t sum, const void *p, size_t len);
uint16_t dp_csum_fold(uint32_t sum);

/* "a.b.c.d" -> host order; "a.b.c.d:port" -> both, by util/addr's
 * grammar (zap-addr.h: no leading zeros, no other spelling), IPv4 only.
 * 0 or -EINVAL. */
int dp_parse_ip(const char *s, uint32_t *ip);
int dp_parse_ip_port(const char *s, uint32_t *ip, uint16_t *port);
/* "aa:bb:cc:dd:ee:ff" -> bytes. 0 or -EINVAL. */
int dp_parse_mac(const char *s, uint8_t mac[6]);
/* "a.b.c.d:port" into @buf (at least 22 bytes; "" if shorter):
 * zaddr_format(). */
void dp_format_peer(char *buf, size_t len, uint32_t ip, uint16_t port);

#endif
