/* SPDX-License-Identifier: MIT */
/*
 * A spoofing sender for the dpdk wire (spoof.sh, bench/dpdk-spoof.sh): a
 * raw AF_PACKET socket that sends, from many forged IPv4 sources, the
 * frames that used to pin a receiver's mbufs: per source, the first
 * fragment of a large message on a new stream, then fragments far ahead
 * of it (seq 2..255), which a receiver that trusted the source would hold
 * out of order. It never answers a challenge (it cannot: the replies go
 * to the forged addresses). Frames are built with the transport's own
 * header definitions (dp_proto.h, whatever its version) and dp_wire.c.
 *
 *   dp-spoof IFACE DST_MAC DST_IP:PORT SRC_NET SOURCES SECONDS [RATE]
 *
 * SRC_NET is the first forged address (a.b.c.d); sources are SRC_NET + i,
 * port 20000 + i, i < SOURCES. RATE: frames per second (default 50000).
 * Prints the frames sent.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dp_proto.h"
#include "dp_wire.h"

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	uint8_t dmac[6], smac[6] = { 0x02, 0x5f, 0x00, 0x00, 0x00, 0x01 }, f[1600];
	uint32_t dip, snet;
	uint16_t dport;
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_halen = 6 };
	unsigned sources, secs, rate = 50000;
	unsigned long long sent = 0;
	uint64_t start, gap;
	int fd;

	if (argc < 7 || dp_parse_mac(argv[2], dmac) ||
	    dp_parse_ip_port(argv[3], &dip, &dport) || dp_parse_ip(argv[4], &snet)) {
		fprintf(stderr,
			"usage: %s IFACE DST_MAC DST_IP:PORT SRC_NET SOURCES SECONDS "
			"[RATE]\n",
			argv[0]);
		return 2;
	}
	sources = (unsigned)atoi(argv[5]);
	secs = (unsigned)atoi(argv[6]);
	if (argc > 7)
		rate = (unsigned)atoi(argv[7]);
	if (!sources || !rate) {
		fprintf(stderr, "%s: SOURCES and RATE must be positive\n", argv[0]);
		return 2;
	}
	fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (fd < 0) {
		perror("dp-spoof: socket(AF_PACKET)");
		return 1;
	}
	sll.sll_ifindex = (int)if_nametoindex(argv[1]);
	if (!sll.sll_ifindex) {
		fprintf(stderr, "dp-spoof: no interface %s\n", argv[1]);
		return 1;
	}
	memcpy(sll.sll_addr, dmac, 6);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	gap = 1000000000ull / rate;
	start = now_ns();
	for (uint32_t round = 1;
	     !stop && now_ns() - start < (uint64_t)secs * 1000000000ull; round++) {
		for (unsigned i = 0; i < sources && !stop; i++) {
			uint32_t conn = (0x5000u + round) << 16 | (i & 0xffff);
			uint32_t payload = 1400, msg_len = 60u << 20;

			for (uint32_t seq = 0; seq < DP_WIN_MAX; seq++) {
				uint8_t *b = f + DP_L2L4_HLEN;
				size_t n;

				if (seq == 1)
					continue; /* the hole that keeps the rest early */
				memset(b, 0, DP_HDR_LEN);
				b[0] = DP_MAGIC >> 8;
				b[1] = DP_MAGIC & 0xff;
				b[2] = DP_VERSION;
				b[3] = DP_T_DATA;
				b[4] = seq ? 0 : DP_F_FIRST;
				put32(b + 8, conn);
				put32(b + 12, seq);
				put32(b + 16, msg_len);
				put32(b + 20, seq * payload);
				memset(b + DP_HDR_LEN, 0xee, payload);
				n = dp_wire_udp(f, smac, dmac, snet + i, dip,
						(uint16_t)(20000 + i), dport,
						DP_HDR_LEN + payload);
				dp_wire_csum(f);
				if (sendto(fd, f, n, 0, (struct sockaddr *)&sll,
					   sizeof(sll)) > 0)
					sent++;
				if (now_ns() - start < sent * gap) {
					uint64_t ahead = sent * gap - (now_ns() - start);
					struct timespec ts = { .tv_nsec = (long)ahead };

					if (ahead < 1000000000ull)
						nanosleep(&ts, NULL);
				}
			}
		}
	}
	printf("dp-spoof: %llu frames from %u forged sources in %.1f s\n", sent, sources,
	       (double)(now_ns() - start) / 1e9);
	close(fd);
	return 0;
}
