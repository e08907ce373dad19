/* SPDX-License-Identifier: MIT */
/*
 * Small helpers of the wire's files (included by tcp_int.h): the clocks,
 * big-endian fields, and the shorter of two poll() timeouts.
 */
#ifndef ZAP_TCP_UTIL_H
#define ZAP_TCP_UTIL_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/*
 * The clock of connection activity (c->last_ms, the partial-frame stall
 * clocks, the side channel's liveness look): the kernel's tick, 1-4 ms
 * behind the exact time, which is all idle and stall limits of seconds
 * need. It is read on every send and every leader round, where the exact
 * clock's cost showed in small messages' latency through shared memory
 * (bench/MEASUREMENTS.md, "coarse-clock"). Compare its
 * readings only with each other.
 */
static inline uint64_t now_coarse_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

static inline uint32_t get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
	       (uint32_t)p[3];
}

static inline uint64_t get_be64(const unsigned char *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

static inline int ms_min(int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return a < b ? a : b;
}

#endif /* ZAP_TCP_UTIL_H */
