/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the dpdk tests that drive the real EAL. */
#ifndef DP_TEST_H
#define DP_TEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

static const char *dpt_who = "test";

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s: FAIL %s:%d: %s: ", dpt_who,       \
				__FILE__, __LINE__, #cond);                    \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			exit(1);                                               \
		}                                                              \
	} while (0)

#define CHECK_RC(rc, what)                                                     \
	CHECK((rc) == 0, "%s: %d %s", what, rc, zap_strerror(rc))

static inline uint64_t dpt_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Deterministic bytes for message @seq of @len, checkable on arrival. */
static inline void dpt_fill(uint8_t *b, size_t len, uint64_t seq)
{
	uint64_t x = seq * 0x9e3779b97f4a7c15ull + len;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (uint8_t)x;
	}
}

static inline int dpt_check(const uint8_t *b, size_t len, uint64_t seq)
{
	uint64_t x = seq * 0x9e3779b97f4a7c15ull + len;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (b[i] != (uint8_t)x)
			return -1;
	}
	return 0;
}

/* A ctx that fires after @ms (NULL-safe free with zap_ctx_free). */
static inline struct zap_ctx *dpt_timeout(uint64_t ms)
{
	struct zap_ctx *c = NULL;

	CHECK(zap_ctx_new(&c) == 0, "zap_ctx_new");
	zap_ctx_set_timeout(c, ms * 1000000ull);
	return c;
}

static inline void dpt_open(struct zap_transport **t)
{
	int rc = zap_pick("=dpdk", 0, NULL, t);

	CHECK_RC(rc, "zap_pick(=dpdk)");
	CHECK(!strcmp(zap_transport_name(*t), "dpdk"), "picked %s", zap_transport_name(*t));
}

#endif
